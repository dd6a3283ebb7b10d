//! `experiments geometry`: the arguments of the global and local geometry (G.PR, G.Iso, L.Iso)
//! of an encoder's embeddings of a folder of natural images (paper §3.1, App. D.3). The run is
//! `bindscope_binding::study::geometry`.

use crate::binding::ModelSource;
use crate::common::{Normalize, OutputArgs};
use anyhow::Result;
use bindscope_binding::study::geometry::{self, GeometryConfig, GeometryOptions};
use bindscope_core::run::RunContext;
use bindscope_models::VisionReadout;
use std::path::PathBuf;

/// Options of the geometric metrics (shared with `probe-all`).
#[derive(clap::Args, Debug, Clone)]
pub struct GeometryOpts {
    /// Images used for the covariance (a seeded subset when the folder has more; at least 3).
    #[arg(long, default_value_t = 1000)]
    pub samples: usize,
    /// L.Iso anchors (a seeded subset of the samples; at least 1).
    #[arg(long, default_value_t = 500)]
    pub anchors: usize,
    /// L.Iso neighbourhood sizes (each 2 ≤ k < --samples). The printed effective rank and
    /// participation ratio of L.Iso are normalised by min(k − 1, D) (at most 1).
    #[arg(long = "k", value_delimiter = ',', default_value = "8,16,32")]
    pub ks: Vec<usize>,
    /// Seed of the sample and anchor selection.
    #[arg(long, default_value_t = 42)]
    pub geometry_seed: u64,
    /// Preprocessing of the folder images: imagenet (resize 256 bicubic, center crop 224,
    /// ImageNet mean/std) or model (the checkpoint's preprocessor_config.json).
    #[arg(long, value_enum, default_value_t = Normalize::Imagenet)]
    pub preprocess: Normalize,
}

impl GeometryOpts {
    /// The metrics' options of these flags.
    pub fn options(&self) -> GeometryOptions {
        GeometryOptions {
            samples: self.samples,
            anchors: self.anchors,
            ks: self.ks.clone(),
            geometry_seed: self.geometry_seed,
            preprocess: self.preprocess,
        }
    }
}

/// Arguments of `experiments geometry`.
#[derive(clap::Args, Debug)]
pub struct GeometryArgs {
    #[command(flatten)]
    source: ModelSource,
    /// Folder of images (searched recursively).
    #[arg(long)]
    images: PathBuf,
    #[command(flatten)]
    geometry: GeometryOpts,
    /// Which embedding: pooled, summary, mean-patch.
    #[arg(long, default_value = "pooled")]
    output: VisionReadout,
    /// Images per forward pass.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    #[command(flatten)]
    run_dir: OutputArgs,
}

pub fn run(args: GeometryArgs, ctx: &RunContext) -> Result<()> {
    let config = GeometryConfig {
        encoder: args.source.config()?,
        images: args.images,
        geometry: args.geometry.options(),
        output: args.output,
        batch_size: args.batch_size,
    };
    let output = args.run_dir.output();
    geometry::run(&config, &output, ctx)?;
    Ok(())
}
