//! `experiments finetune`: textual attribute–object binding finetuning (issue 6, "Stuck on
//! Shuffle"). The arguments of `finetune data` / `finetune train` and their mapping to the
//! configs of `bindscope_tuning::study::{data, train}`, which do the runs.
//!
//! ```text
//! experiments finetune data  --out runs/finetune/data [--per-type 400] [--seed 0] [--import rows.jsonl]
//! experiments finetune train --model sentence-transformers/all-MiniLM-L6-v2 --data runs/finetune/data --out runs/finetune/minilm
//! ```

use anyhow::{Context, Result, anyhow};
use bindscope_core::run::{Output, RunContext};
use bindscope_tuning::generate::GeneratorConfig;
use bindscope_tuning::lora::{LinesConfig, LoraConfig};
use bindscope_tuning::study::{data, train};
use bindscope_tuning::train::{AttnLossConfig, TrainConfig};
use std::path::PathBuf;

/// Arguments of `experiments finetune`.
#[derive(clap::Args, Debug)]
pub struct FinetuneArgs {
    #[command(subcommand)]
    cmd: FinetuneCmd,
}

#[derive(clap::Subcommand, Debug)]
enum FinetuneCmd {
    /// Generate and/or import triplet examples, validate, split.
    Data(DataArgs),
    /// Train LoRA on a text encoder, apply LiNeS, evaluate, export.
    Train(TrainArgs),
}

/// Arguments of `finetune data`.
#[derive(clap::Args, Debug, Clone)]
pub struct DataArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Template examples per construction type (0: none).
    #[arg(long, default_value_t = 400)]
    per_type: usize,
    /// Seed of the generator and of the split.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// External JSONL files to import (after the generated examples).
    #[arg(long = "import")]
    imports: Vec<PathBuf>,
    /// Probability of a scene phrase.
    #[arg(long, default_value_t = 0.5)]
    scene_prob: f64,
    /// Probability of a distractor pair.
    #[arg(long, default_value_t = 0.3)]
    distractor_prob: f64,
    /// Frequency cap per attribute / object word (default: 1.25 × the mean use of an attribute, at least 4).
    #[arg(long)]
    max_word_uses: Option<usize>,
    /// Allowed binding distance `MIN:MAX` (words).
    #[arg(long)]
    binding_distance: Option<String>,
    /// Registers allowed (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    registers: Vec<String>,
}

/// Arguments of `finetune train`.
#[derive(clap::Args, Debug, Clone)]
pub struct TrainArgs {
    /// Hugging Face id or local checkpoint directory of a text encoder (BERT/MiniLM, CLIP, SigLIP).
    #[arg(long)]
    model: String,
    /// Directory written by `finetune data` (default: generate into `<out>/data`).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Run directory (default `runs/finetune/<model>-<time>`); an existing one is resumed.
    #[arg(long)]
    out: Option<PathBuf>,
    /// With no `--data`: template examples per type to generate (an error with `--data`).
    #[arg(long, default_value_t = 400, conflicts_with = "data")]
    per_type: usize,
    /// Seed of generation / split (no `--data`), batch order and LoRA init.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Use only the first N training triplets (0: all).
    #[arg(long, default_value_t = 0)]
    max_train_triplets: usize,
    /// Triplets per step.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Learning rate (constant).
    #[arg(long, default_value_t = 5e-5)]
    lr: f64,
    /// AdamW weight decay.
    #[arg(long, default_value_t = 0.01)]
    weight_decay: f32,
    /// Hinge margin.
    #[arg(long, default_value_t = 0.05)]
    margin: f64,
    /// LoRA rank.
    #[arg(long, default_value_t = 4)]
    rank: usize,
    /// LoRA α.
    #[arg(long, default_value_t = 4.0)]
    lora_alpha: f64,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    epochs: usize,
    /// LiNeS α (scale of the first layer).
    #[arg(long, default_value_t = 0.5)]
    lines_alpha: f64,
    /// LiNeS β (added linearly up to the last layer).
    #[arg(long, default_value_t = 0.5)]
    lines_beta: f64,
    /// Add the attention-margin loss.
    #[arg(long)]
    attn_loss: bool,
    /// Attention loss target margin τ.
    #[arg(long, default_value_t = 0.1)]
    attn_tau: f64,
    /// Attention loss weight λ_attn.
    #[arg(long, default_value_t = 0.1)]
    attn_lambda: f64,
    /// Attention loss layers `START:END` (0-based, end exclusive; default all).
    #[arg(long)]
    attn_layers: Option<String>,
    /// Steps between checkpoints.
    #[arg(long, default_value_t = 25)]
    checkpoint_every: usize,
    /// Stop after this many steps in total (simulates an interruption; rerun to resume).
    #[arg(long)]
    max_steps: Option<usize>,
    /// SABER items per N for each of independent and chain items (0: skip SABER).
    #[arg(long, default_value_t = 100)]
    saber_per_n: usize,
    /// Texts per forward pass in evaluation.
    #[arg(long, default_value_t = 64)]
    eval_batch: usize,
}

/// Whether the subcommand computes on a device (`data` only writes data files).
pub fn needs_device(args: &FinetuneArgs) -> bool {
    !matches!(args.cmd, FinetuneCmd::Data(_))
}

pub fn run(args: FinetuneArgs, ctx: &RunContext) -> Result<()> {
    match args.cmd {
        FinetuneCmd::Data(a) => {
            let output = Output::new(Some(a.out.clone()), false);
            data::run(&a.config()?, &output, ctx)?;
        }
        FinetuneCmd::Train(a) => {
            let output = Output::new(a.out.clone(), false);
            train::run(&a.config()?, &output, ctx)?;
        }
    }
    Ok(())
}

/// `START:END` (or `MIN:MAX`) of the flag `what`.
fn parse_range(s: &str, what: &str) -> Result<(usize, usize)> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| anyhow!("{what}: expected START:END, got '{s}'"))?;
    Ok((
        a.trim().parse().with_context(|| format!("{what}: '{a}'"))?,
        b.trim().parse().with_context(|| format!("{what}: '{b}'"))?,
    ))
}

impl DataArgs {
    fn config(&self) -> Result<data::Config> {
        Ok(data::Config {
            generator: GeneratorConfig {
                seed: self.seed,
                per_type: self.per_type,
                scene_prob: self.scene_prob,
                distractor_prob: self.distractor_prob,
                max_word_uses: self.max_word_uses,
                binding_distance: self
                    .binding_distance
                    .as_deref()
                    .map(|s| parse_range(s, "--binding-distance"))
                    .transpose()?,
                registers: self.registers.clone(),
                ..Default::default()
            },
            imports: self.imports.clone(),
            split_seed: self.seed,
        })
    }
}

impl TrainArgs {
    fn config(&self) -> Result<train::Config> {
        let attn = if self.attn_loss {
            let layers = self
                .attn_layers
                .as_deref()
                .map(|s| parse_range(s, "--attn-layers"))
                .transpose()?
                .unwrap_or((0, usize::MAX));
            Some(AttnLossConfig {
                tau: self.attn_tau,
                lambda: self.attn_lambda,
                layers,
            })
        } else {
            None
        };
        Ok(train::Config {
            model: self.model.clone(),
            data: match &self.data {
                Some(d) => train::DataSource::Dir(d.clone()),
                None => {
                    train::DataSource::Generate(data::Config::generated(self.per_type, self.seed))
                }
            },
            max_train_triplets: self.max_train_triplets,
            train: TrainConfig {
                lora: LoraConfig {
                    rank: self.rank,
                    alpha: self.lora_alpha,
                    seed: self.seed,
                },
                lr: self.lr,
                weight_decay: self.weight_decay,
                margin: self.margin,
                batch_size: self.batch_size,
                epochs: self.epochs,
                shuffle_seed: self.seed,
                attn,
                checkpoint_every: self.checkpoint_every,
                ..Default::default()
            },
            lines: LinesConfig {
                alpha: self.lines_alpha,
                beta: self.lines_beta,
            },
            max_steps: self.max_steps,
            saber_per_n: self.saber_per_n,
            eval_batch: self.eval_batch,
        })
    }
}
