//! `experiments saber`: the SABER attribute–object binding benchmark (crate `bindscope-saber`).
//!
//! ```text
//! # the benchmark files: saber.jsonl (1,800 MCQ items), prompts.jsonl (9,000 images to render), manifest.json
//! cargo run --release -p experiments -- saber generate --seed 42 --out runs/saber/data-seed42
//! # evaluate a text encoder (text→text); items generated in memory with --seed unless --data is given
//! cargo run --release -p experiments -- saber eval --model /path/to/all-MiniLM-L6-v2
//! # with rendered images (DIR/<caption id>.png): text→image, image→text, image→image as well
//! cargo run --release -p experiments -- saber eval --model openai/clip-vit-base-patch32 --data runs/saber/data-seed42 --images DIR
//! ```
//!
//! `eval` writes `runs/saber/<model>-<timestamp>/` (or `--out`): `config.json`, `results.json`,
//! `per_n.csv`, `items.jsonl` (see `bindscope_saber::report`). Rows of `--data` that break a
//! rule are rejected with their line number and rule, listed in `results.json` and counted;
//! `--strict` makes any rejection fatal. The runs are `bindscope_saber::study::{generate, eval}`;
//! this module maps the flags to their configs.

use crate::common::ModelOpts;
use anyhow::Result;
use bindscope_core::run::{Output, RunContext};
use bindscope_saber::generate::GenerateConfig;
use bindscope_saber::study::{self, EvalConfig, Items};
use std::path::PathBuf;

/// Arguments of `experiments saber`.
#[derive(clap::Args, Debug)]
pub struct SaberArgs {
    #[command(subcommand)]
    command: SaberCommand,
}

#[derive(clap::Subcommand, Debug)]
enum SaberCommand {
    /// Generate the benchmark: saber.jsonl, prompts.jsonl (text-to-image), manifest.json.
    Generate(GenerateArgs),
    /// Evaluate an encoder: MCQ accuracy, gallery mAP, containment, per N.
    Eval(EvalArgs),
}

/// The generator's size options (defaults: the benchmark of issue 6).
#[derive(clap::Args, Debug, Clone)]
struct SizeArgs {
    /// Master seed of the generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Smallest number of bindings.
    #[arg(long, default_value_t = 2)]
    n_min: usize,
    /// Largest number of bindings.
    #[arg(long, default_value_t = 10)]
    n_max: usize,
    /// Independently sampled items per N.
    #[arg(long, default_value_t = 100)]
    independent: usize,
    /// Nested chains (one item per N each).
    #[arg(long, default_value_t = 100)]
    chains: usize,
}

impl SizeArgs {
    fn config(&self) -> GenerateConfig {
        GenerateConfig {
            seed: self.seed,
            n_min: self.n_min,
            n_max: self.n_max,
            independent_per_n: self.independent,
            chains: self.chains,
        }
    }
}

#[derive(clap::Args, Debug)]
struct GenerateArgs {
    #[command(flatten)]
    size: SizeArgs,
    /// Output directory (default runs/saber/data-seed<SEED>): new, empty, or holding the
    /// benchmark of these very settings; another generator's benchmark is never overwritten.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct EvalArgs {
    /// Hugging Face id or local checkpoint directory.
    #[arg(long)]
    model: String,
    /// A saber.jsonl (or a directory holding one) from `saber generate` or elsewhere; without
    /// it the items are generated in memory from the size options.
    #[arg(long)]
    data: Option<PathBuf>,
    #[command(flatten)]
    size: SizeArgs,
    /// Folder of rendered images named <caption id>.png|jpg|jpeg|webp: adds the text→image,
    /// image→text and image→image pairings (the model needs a vision tower).
    #[arg(long)]
    images: Option<PathBuf>,
    /// tokenizer.json to use instead of the checkpoint's.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Maximum tokens per text (default: sentence_bert_config.json's max_seq_length when the
    /// checkpoint has one, else the model's maximum).
    #[arg(long)]
    max_length: Option<usize>,
    /// Texts / images per forward pass.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Fail when any row of --data is rejected (default: evaluate the valid rows and report the
    /// rejected ones).
    #[arg(long)]
    strict: bool,
    /// Run directory (default runs/saber/<model>-<timestamp>).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    model_opts: ModelOpts,
}

/// Whether the subcommand computes on a device (`generate` only writes data files).
pub fn needs_device(args: &SaberArgs) -> bool {
    !matches!(args.command, SaberCommand::Generate(_))
}

impl EvalArgs {
    fn config(&self) -> EvalConfig {
        EvalConfig {
            model: self.model.clone(),
            items: match &self.data {
                Some(p) => Items::Data(p.clone()),
                None => Items::Generated(self.size.config()),
            },
            images: self.images.clone(),
            tokenizer: self.tokenizer.clone(),
            max_length: self.max_length,
            batch_size: self.batch_size,
            strict: self.strict,
            dtype: self.model_opts.dtype,
            arch: self.model_opts.arch.clone(),
        }
    }
}

pub fn run(args: SaberArgs, ctx: &RunContext) -> Result<()> {
    let output = |dir: &Option<PathBuf>| Output::new(dir.clone(), false);
    match args.command {
        SaberCommand::Generate(a) => {
            study::generate(&a.size.config(), &output(&a.out), ctx).map(|_| ())
        }
        SaberCommand::Eval(a) => study::eval(&a.config(), &output(&a.out), ctx).map(|_| ()),
    }
}
