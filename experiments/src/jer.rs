//! `experiments jer`: Jacobian effective rank of vision encoders.
//!
//! Source: "Global Geometry Is Not Enough for Vision Representations", §4.1, App. A.4, D.4. The
//! estimators, and why the output sketch estimates the paper's input sketch, are documented in
//! `bindscope_jer`; the run (run directory, resume log, reports, comparison table) in
//! `bindscope_jer::study`. This module maps the flags to a `bindscope_jer::study::Config`.

use crate::common::{ModelOpts, Normalize};
use anyhow::{Context, Result, bail};
use bindscope_core::run::{Output, RunContext};
use bindscope_jer::study::{self, Config};
use bindscope_jer::{Backward, Estimator};
use bindscope_models::VisionReadout;
use std::path::PathBuf;

/// Arguments of `experiments jer`.
#[derive(clap::Args, Debug)]
pub struct JerArgs {
    /// Hugging Face id, local checkpoint directory (transformers layout, or a timm repository of BEiT / EVA-02), or PyTorch .pth/.pt file (a torchvision ResNet; see --arch); repeat for a comparison table.
    #[arg(long, required = true, num_args = 1..)]
    model: Vec<String>,
    /// Number of probe images x ~ N(0.45, 0.225²), clipped to [0, 1].
    #[arg(long, default_value_t = 100)]
    images: usize,
    /// Seed of the probe images and sketch directions.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Seed-stability study: comma-separated seeds (overrides --seed), e.g. 42,123,456,789,1024.
    #[arg(long, value_delimiter = ',')]
    seeds: Vec<u64>,
    /// Sketch size k (2 ≤ k ≤ output dimension).
    #[arg(long, default_value_t = 32)]
    directions: usize,
    /// output-sketch (Gᵀ·J, k vector–Jacobian products) or input-sketch (J·V, the paper's
    /// definition).
    #[arg(long, default_value = "output-sketch")]
    estimator: Estimator,
    /// Directions per backward pass (cotangents through the shared backward, copies of the
    /// image under autodiff): bounds peak memory (a probe size and chunk whose lower-bound
    /// memory estimate exceeds the available memory are refused up front).
    #[arg(long, default_value_t = 8)]
    chunk: usize,
    /// How the vector–Jacobian products are taken: shared (one forward pass and the written-out
    /// backward of the pre-norm ViTs: ViT, DINOv2, CLIP, SigLIP, ViT-MAE, I-JEPA, BEiT; autodiff
    /// for other models) or autodiff (burn's autodiff over --chunk copies of the image). Same
    /// numbers to rounding on the CPU; on a GPU, autodiff's GELU derivative is approximate.
    #[arg(long, default_value = "shared")]
    backward: Backward,
    /// Which embedding: pooled (the model's standard embedding; projected for CLIP), summary
    /// (CLS after the final norm / MAP head), mean-patch.
    #[arg(long, default_value = "pooled")]
    output: VisionReadout,
    /// Normalization of the probe: imagenet (the paper, every model) or model (the
    /// checkpoint's own mean/std: preprocessor_config.json, a timm pretrained_cfg, or
    /// torchvision's ImageNet values for a .pth).
    #[arg(long, value_enum, default_value_t = Normalize::Imagenet)]
    normalize: Normalize,
    /// Also compute JER at the output of every block (pooled like the final output). Every
    /// output draws its own directions: the final-layer JER is the same with and without it.
    #[arg(long)]
    depth: bool,
    /// Probe image size HxW (position embeddings are interpolated, as transformers does), or
    /// `native`: each model at its configured input size (518 for the DINOv2 Hub checkpoints,
    /// 224 for the others). The paper does not state its probe size (App. D.4).
    #[arg(long = "image-size", alias = "size", default_value = "224x224")]
    image_size: String,
    /// Run directory (with several models: the parent of one directory per model).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a new run directory even if a matching one exists.
    #[arg(long)]
    fresh: bool,
    #[command(flatten)]
    model_opts: ModelOpts,
}

/// An image size `HxW` or `N` (square), both positive; `flag` names the option in errors.
pub(crate) fn image_size(flag: &str, s: &str) -> Result<[usize; 2]> {
    let (h, w) = s.split_once(['x', 'X']).unwrap_or((s, s));
    let parse = |v: &str| {
        v.trim()
            .parse::<usize>()
            .with_context(|| format!("{flag} '{s}': expected HxW, e.g. 224x224"))
    };
    let size = [parse(h)?, parse(w)?];
    if size.contains(&0) {
        bail!("{flag} '{s}': sizes must be positive");
    }
    Ok(size)
}

impl JerArgs {
    /// `--image-size native`.
    fn native_size(&self) -> bool {
        self.image_size.trim().eq_ignore_ascii_case("native")
    }

    /// The study's configuration: `--seeds` (or `--seed`) resolved, `--image-size` parsed.
    fn config(&self) -> Result<Config> {
        Ok(Config {
            models: self.model.clone(),
            images: self.images,
            seeds: if self.seeds.is_empty() {
                vec![self.seed]
            } else {
                self.seeds.clone()
            },
            directions: self.directions,
            estimator: self.estimator,
            chunk: self.chunk,
            backward: self.backward,
            output: self.output,
            normalize: self.normalize,
            depth: self.depth,
            image_size: if self.native_size() {
                [0, 0]
            } else {
                image_size("--image-size", &self.image_size)?
            },
            native_size: self.native_size(),
            dtype: self.model_opts.dtype,
            arch: self.model_opts.arch.clone(),
        })
    }
}

pub fn run(args: JerArgs, ctx: &RunContext) -> Result<()> {
    let output = Output::new(args.out.clone(), args.fresh);
    study::run(&args.config()?, &output, ctx).map(|_| ())
}
