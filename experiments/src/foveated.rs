//! `experiments foveated`: do frozen encoders lose binding information, or does pooling?
//!
//! Seed study "Foveated Probes Recover Localized Binding Information". The scene design
//! (classes, lures, K, λ, counterfactuals, nuisance variants), the readouts, the probe recipe and
//! the metrics are documented in `bindscope_foveated` (`csb`, `csd`, `features`, `probe`,
//! `metrics`), the run and its directory in `bindscope_foveated::study`; `--help` summarises
//! them. This file holds the flags and their mapping to `study::Config`.
//!
//! ```text
//! experiments foveated --task csb --model facebook/dinov2-small
//! experiments foveated --task csd --model ./siglip-base --readouts gap,fovea --seeds 0,1,2
//! experiments foveated --task csb --dump-only --dump-images 8            # scenes only
//! ```

use crate::common::{ModelOpts, OutputArgs};
use anyhow::Result;
use bindscope_core::run::RunContext;
use bindscope_foveated::split::SplitSizes;
use bindscope_foveated::study::{self, Config, StudyTask};
use std::path::PathBuf;

/// Which study.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskArg {
    /// Colour–shape binding: 6 classes (circle / triangle × red / green / blue) among lures that
    /// make the shape and colour histograms label-independent.
    Csb,
    /// Small-shape detection: a small black circle or triangle among 1–11.5× larger distractors.
    Csd,
    /// Paired colour questions from GQA scene graphs (needs --gqa-dir).
    Gqa,
}

/// Foveated probes: CSB / CSD scenes and GQA colour pairs, readouts over frozen patch tokens.
///
/// Scenes (CSB / CSD): white canvas, 6-colour palette, 20 shapes (2 class shapes + 18
/// distractor-only) in canonical orientations, rendered directly at the encoder's input size
/// (`--image-size`, default the processor's output size; no resize or crop) and normalized with the
/// checkpoint's preprocessor_config.json. Object sizes are fractions of the side (CSB
/// half-extent 0.037, ≈14 px at 384 and ≈8 px at 224; CSD target 0.02), so a scene is the same
/// at every resolution, the CSD 14 px margin included (14/384 of the side).
///
/// CSB design: class = class shape (circle, triangle) × class colour (red, green, blue); label
/// `i mod 6`. Five lure groups of Uniform{1,2,3} objects each, the target counting as a member
/// of its own shape and colour groups (so the shape and colour histograms carry no label);
/// clutter K ∈ {4, 8, 16, 24} noise objects, each in a class colour with probability
/// λ ∈ {0.25, 0.5, 0.75} (K and λ drawn per scene and recorded); minimum centre distance twice
/// the extent, the extent being the circumradius √2·half-extent; an unplaceable distractor is
/// dropped. CSD design: a black circle or triangle (label `i mod 2`) among K ∈ {2, 4, 8, 16}
/// black distractors of 1–11.5× its size (size law exponent λ ∈ {0.5, 1, 2}); safety circles
/// use the circumradius of each object's box (a conservative bound for round shapes);
/// unplaceable distractors shrink, never drop; a clean K = 0 split. Counterfactuals (CSB: 5, 3
/// or 1 histogram-preserving swaps; CSD: the target's shape flipped) and the 16 nuisance
/// variants are made for test scenes, the only ones the metrics use. The crate docs of
/// bindscope-foveated (csb, csd) give every rule.
///
/// Readouts: gap (mean patch token), summary (CLS / MAP head), oracle (mean of the patches
/// under the target's box), fovea (one learned query over the patch tokens, no temperature).
/// GQA: gap, summary, oracle (the summary token of the target's box cropped and stretched to
/// the input size), oracle-box (mean of the patches under the box), and fovea, which on GQA is
/// the text-conditioned fovea (also accepted as text-fovea). Probes: linear, mlp
/// (Linear(D→128)–GELU–Linear(128→C); GQA Linear(D→512)–ReLU–Dropout–Linear(512→10)). Recipe:
/// Adam lr 1e-3 (ε 1e-8, no weight decay), batch 512, 30 epochs, constant schedule, unweighted
/// cross-entropy, best validation top-1 checkpoint (GQA: weight decay 1e-4, batch 256, 50
/// epochs, inverse-frequency class weights, best validation paired accuracy). Metrics: top-1,
/// counterfactual flip rate, nuisance-to-signal ratio (Σ nuisance variance / Σ mean squared
/// counterfactual change of the pooled vector); GQA: accuracy and paired accuracy.
///
/// Features are cached per encoder (independent of the set sizes, so a smaller run fills the
/// first shards of a larger one) and runs resume.
#[derive(clap::Args, Debug)]
pub struct FoveatedArgs {
    /// csb, csd or gqa.
    #[arg(long, value_enum)]
    task: TaskArg,
    /// Hugging Face id, local checkpoint directory (transformers layout, or a timm repository of BEiT / EVA-02), or PyTorch .pth/.pt file (a torchvision ResNet; see --arch) of the encoder.
    #[arg(long, required_unless_present = "dump_only")]
    model: Option<String>,
    /// Readouts, comma-separated: gap, summary, oracle, fovea (gqa also oracle-box; its fovea is
    /// the text-conditioned one).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "gap,summary,oracle,fovea"
    )]
    readouts: Vec<String>,
    /// Probes, comma-separated: linear, mlp.
    #[arg(long, value_delimiter = ',', default_value = "linear,mlp")]
    probes: Vec<String>,
    /// Probe seeds (initialisation, batch order, dropout), comma-separated, each once.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    seeds: Vec<u64>,
    /// Seed of the scenes (and of the GQA split).
    #[arg(long, default_value_t = 42)]
    data_seed: u64,
    /// Training scenes.
    #[arg(long, default_value_t = 6000)]
    train: usize,
    /// Validation scenes.
    #[arg(long, default_value_t = 2000)]
    val: usize,
    /// Test scenes.
    #[arg(long, default_value_t = 2000)]
    test: usize,
    /// CSD clean K = 0 scenes.
    #[arg(long, default_value_t = 500)]
    clean: usize,
    /// Test scenes (the first ones) whose 16 nuisance variants are encoded; default: all.
    #[arg(long)]
    nuisance_scenes: Option<usize>,
    /// Input side in pixels; default: the checkpoint processor's output size (crop size);
    /// gqa: 384.
    #[arg(long = "image-size", alias = "size")]
    image_size: Option<usize>,
    /// Anti-aliasing: samples per pixel per axis.
    #[arg(long, default_value_t = 4)]
    supersample: usize,
    /// Images per encoder forward pass.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Probe epochs (the recipe: 30; GQA 50). Change only for smoke runs.
    #[arg(long)]
    epochs: Option<usize>,
    /// Fovea attention maps saved per (readout, probe), from the first test scenes (csb, csd).
    #[arg(long, default_value_t = 6)]
    attention_maps: usize,
    /// Also write the first N scenes of every set as PNG + JSON to `<run>/images/`.
    #[arg(long, default_value_t = 0)]
    dump_images: usize,
    /// Only write scene images (no model, no features): `--dump-images N` scenes per set at
    /// `--image-size` (default 384) into `--out` (default runs/foveated/scenes-<task>-<seed>).
    /// Takes no `--model`.
    #[arg(long, conflicts_with = "model")]
    dump_only: bool,
    /// GQA: directory with train_sceneGraphs.json, val_sceneGraphs.json and images/<id>.jpg.
    #[arg(long)]
    gqa_dir: Option<PathBuf>,
    /// GQA: skip (and count) objects whose box leaves the image instead of stopping.
    #[arg(long)]
    gqa_lenient: bool,
    /// Feature cache root (default runs/foveated/cache).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    #[command(flatten)]
    run_dir: OutputArgs,
    #[command(flatten)]
    model_opts: ModelOpts,
}

impl FoveatedArgs {
    /// The study configuration these flags ask for.
    fn config(&self) -> Config {
        Config {
            task: match self.task {
                TaskArg::Csb => StudyTask::Csb,
                TaskArg::Csd => StudyTask::Csd,
                TaskArg::Gqa => StudyTask::Gqa,
            },
            model: self.model.clone(),
            dtype: self.model_opts.dtype,
            arch: self.model_opts.arch.clone(),
            readouts: self.readouts.clone(),
            probes: self.probes.clone(),
            seeds: self.seeds.clone(),
            data_seed: self.data_seed,
            sizes: SplitSizes {
                train: self.train,
                val: self.val,
                test: self.test,
                clean: self.clean,
            },
            nuisance_scenes: self.nuisance_scenes,
            image_size: self.image_size,
            supersample: self.supersample,
            batch: self.batch,
            epochs: self.epochs,
            attention_maps: self.attention_maps,
            dump_images: self.dump_images,
            dump_only: self.dump_only,
            gqa_dir: self.gqa_dir.clone(),
            gqa_lenient: self.gqa_lenient,
            cache_dir: self.cache_dir.clone(),
        }
    }
}

pub fn run(args: FoveatedArgs, ctx: &RunContext) -> Result<()> {
    let output = args.run_dir.output();
    study::run(&args.config(), &output, ctx)?;
    Ok(())
}
