//! `experiments binding` and `experiments samediff`: the arguments of the synthetic
//! shape–position probes of "Global Geometry Is Not Enough for Vision Representations" (§5.1,
//! App. C, D.5), and the argument groups the other binding-study subcommands share (model
//! source with random initialisation, scenes, readouts). The runs — scene bank, tasks, run
//! directories, random initialisation — are `bindscope_binding::study`.

use crate::common::{ModelOpts, Normalize, OutputArgs};
use anyhow::{Result, bail};
use bindscope_binding::readout::{KnnScore, PcaScore, Readout};
use bindscope_binding::study::{
    self, BindingConfig, Encoder, EncoderConfig, SameDiffConfig, SceneConfig,
};
use bindscope_core::run::RunContext;
use bindscope_models::VisionReadout;
use std::path::PathBuf;

/// Which encoder to probe.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelSource {
    /// Hugging Face id, local checkpoint directory (transformers layout, or a timm repository of BEiT / EVA-02), or PyTorch .pth/.pt file (a torchvision ResNet; see --arch).
    /// (One of --model and --random-init is required; `probe-all` also takes --zoo.)
    #[arg(long, conflicts_with = "random_init")]
    pub model: Option<String>,
    /// Probe a randomly initialised encoder instead: `vit-b16` (ViT-B/16 at 224 with pooler) or
    /// a config.json path with model_type vit or dinov2. Materialised once (about 85 MB for
    /// vit-b16) in --random-init-dir and reused by every later run and study.
    #[arg(long)]
    pub random_init: Option<String>,
    /// Seed of the random initialisation.
    #[arg(long, default_value_t = 0)]
    pub init_seed: u64,
    /// Where random initialisations are materialised: a cache shared by runs, not placed under
    /// --out [default: runs/random-init]
    #[arg(long, env = "BINDSCOPE_RANDOM_INIT_DIR", value_name = "DIR")]
    pub random_init_dir: Option<PathBuf>,
    #[command(flatten)]
    pub model_opts: ModelOpts,
}

impl ModelSource {
    /// The encoder these flags name.
    pub fn config(&self) -> Result<EncoderConfig> {
        let source = match (&self.model, &self.random_init) {
            (Some(m), _) => Encoder::Checkpoint(m.clone()),
            (None, Some(r)) => Encoder::RandomInit {
                init: r.clone(),
                seed: self.init_seed,
            },
            (None, None) => bail!("give --model or --random-init (probe-all: or --zoo)"),
        };
        Ok(EncoderConfig {
            source,
            dtype: self.model_opts.dtype,
            arch: self.model_opts.arch.clone(),
            random_init_dir: self.random_init_dir.clone(),
        })
    }
}

/// How scenes are drawn and fed to the encoder.
#[derive(clap::Args, Debug, Clone)]
pub struct SceneOpts {
    /// Canvas side in pixels.
    #[arg(long, default_value_t = 224)]
    pub image_size: usize,
    /// Anti-aliasing: n×n supersampling per pixel (1 = off, the default).
    #[arg(long, default_value_t = 1)]
    pub antialias: usize,
    /// Normalization: imagenet (rescale + ImageNet mean/std, no resize) or model (the
    /// checkpoint's preprocessor_config.json pipeline).
    #[arg(long, value_enum, default_value_t = Normalize::Imagenet)]
    pub normalize: Normalize,
    /// Which embedding: pooled, summary, mean-patch.
    #[arg(long, default_value = "pooled")]
    pub output: VisionReadout,
    /// Images per forward pass.
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Write every scene the run uses as PNG into this directory.
    #[arg(long)]
    pub dump_images: Option<PathBuf>,
}

impl SceneOpts {
    /// The scene configuration of these flags.
    pub fn config(&self) -> SceneConfig {
        SceneConfig {
            image_size: self.image_size,
            antialias: self.antialias,
            normalize: self.normalize,
            output: self.output,
            batch_size: self.batch_size,
        }
    }
}

/// Readouts of the binding task and their hyper-parameters.
#[derive(clap::Args, Debug, Clone)]
pub struct ReadoutOpts {
    /// Readouts to evaluate (comma-separated): cosine, knn, local-pca.
    #[arg(long, value_delimiter = ',', default_value = "cosine,knn,local-pca")]
    pub readouts: Vec<String>,
    /// kNN: neighbours per image.
    #[arg(long, default_value_t = 60)]
    pub knn_k: usize,
    /// kNN scoring rule: shared (|N_k(q) ∩ N_k(c)| / k, ties by cosine) or mean (cosine of
    /// kNN-smoothed embeddings).
    #[arg(long, default_value = "shared")]
    pub knn_score: KnnScore,
    /// Local PCA: principal components.
    #[arg(long, default_value_t = 32)]
    pub pca_components: usize,
    /// Local PCA: nearest neighbours of the query the PCA is fitted on.
    #[arg(long, default_value_t = 50)]
    pub pca_neighbours: usize,
    /// Local PCA scoring rule: projected-cosine or projected-distance.
    #[arg(long, default_value = "projected-cosine")]
    pub pca_score: PcaScore,
}

impl ReadoutOpts {
    /// The readouts named by `--readouts`, with their hyper-parameters; one named twice
    /// (`cosine,cosine`, `local-pca,local_pca`) is computed once, and a note says so.
    pub fn readouts(&self) -> Result<Vec<Readout>> {
        let all = self
            .readouts
            .iter()
            .map(|r| match r.trim() {
                "cosine" => Ok(Readout::Cosine),
                "knn" => Ok(Readout::Knn {
                    k: self.knn_k,
                    score: self.knn_score,
                }),
                "local-pca" | "local_pca" => Ok(Readout::LocalPca {
                    components: self.pca_components,
                    neighbours: self.pca_neighbours,
                    score: self.pca_score,
                }),
                o => bail!("--readouts: unknown readout '{o}' (cosine, knn, local-pca)"),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut out: Vec<Readout> = Vec::with_capacity(all.len());
        for r in all {
            if out.contains(&r) {
                eprintln!("--readouts: {} is given twice; computed once", r.name());
            } else {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// Arguments of `experiments binding`.
#[derive(clap::Args, Debug)]
pub struct BindingArgs {
    #[command(flatten)]
    source: ModelSource,
    /// Number of trials.
    #[arg(long, default_value_t = 500)]
    trials: usize,
    /// Seed of the trials.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[command(flatten)]
    readout: ReadoutOpts,
    #[command(flatten)]
    scenes: SceneOpts,
    #[command(flatten)]
    run_dir: OutputArgs,
}

/// Arguments of `experiments samediff`.
#[derive(clap::Args, Debug)]
pub struct SameDiffArgs {
    #[command(flatten)]
    source: ModelSource,
    /// Number of pairs (half same, half different).
    #[arg(long, default_value_t = 500)]
    pairs: usize,
    /// Seed of the pairs.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[command(flatten)]
    scenes: SceneOpts,
    #[command(flatten)]
    run_dir: OutputArgs,
}

pub fn run_binding_cmd(args: BindingArgs, ctx: &RunContext) -> Result<()> {
    let mut config = BindingConfig {
        encoder: args.source.config()?,
        scenes: args.scenes.config(),
        trials: args.trials,
        seed: args.seed,
        readouts: Vec::new(),
        dump_images: args.scenes.dump_images,
    };
    // The sizes are refused before a bad --readouts, as they always were.
    config.check_sizes()?;
    config.readouts = args.readout.readouts()?;
    // Every option (readouts included) before any work: `run_binding` checks again.
    config.check()?;
    let output = args.run_dir.output();
    study::run_binding(&config, &output, ctx)?;
    Ok(())
}

pub fn run_samediff_cmd(args: SameDiffArgs, ctx: &RunContext) -> Result<()> {
    let config = SameDiffConfig {
        encoder: args.source.config()?,
        scenes: args.scenes.config(),
        pairs: args.pairs,
        seed: args.seed,
        dump_images: args.scenes.dump_images,
    };
    config.check()?;
    let output = args.run_dir.output();
    study::run_samediff(&config, &output, ctx)?;
    Ok(())
}
