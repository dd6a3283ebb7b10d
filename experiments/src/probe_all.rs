//! `experiments probe-all`: one row of the paper's Table 3 for one encoder — JER,
//! Same/Different, Attribute Binding with the three readouts, and (with `--images DIR`) the
//! geometric metrics — written as `row.json` for `experiments correlate`.
//!
//! JER is computed by the JER study (`bindscope_jer::study::run`, the code path of the `jer`
//! subcommand, with a `Config` built here) in the sub-directory `jer/` of the run directory,
//! which keeps its own resume log; defaults here: 100 probe images, seed 42, k = 32, output
//! sketch, ImageNet normalization, and the probe size `--jer-image-size 224x224` (as the `jer`
//! subcommand's default). The 324 scenes are embedded
//! once (`scenes.jsonl`) and shared by binding and same/different; geometry embeddings are
//! cached in `geometry_embeddings.jsonl`. Re-running the same command resumes the newest
//! matching run directory and skips finished steps.
//!
//! `row.json`: `model`, `label`, `model_type`, `embed_dim`, `num_params`, a flat `metrics`
//! map (`jer`, `jer_entropy_rank`, `same_diff`, `binding_cosine`, `binding_knn`,
//! `binding_local_pca`, `g_pr`, `g_iso`, `l_iso_{variance,erank,pr}_k{8,16,32}`), the full
//! `details` of every step, wall times per step (`timings_s`) and the run identity.

use crate::binding::{ModelSource, ReadoutOpts, SceneOpts};
use crate::common::OutputArgs;
use crate::geometry::GeometryOpts;
use anyhow::Result;
use bindscope_binding::study::probe_all::{self, JerSettings, ProbeAllConfig};
use bindscope_core::run::RunContext;
use std::path::PathBuf;

/// Arguments of `experiments probe-all`.
#[derive(clap::Args, Debug)]
pub struct ProbeAllArgs {
    #[command(flatten)]
    source: ModelSource,
    /// Short name of the model in tables and plots (default: from the model spec).
    #[arg(long)]
    label: Option<String>,
    /// Folder of natural images for the geometric metrics (skipped without it).
    #[arg(long)]
    images: Option<PathBuf>,
    #[command(flatten)]
    geometry: GeometryOpts,
    /// JER: number of probe images.
    #[arg(long, default_value_t = 100)]
    jer_images: usize,
    /// JER: probe size HxW.
    #[arg(
        long = "jer-image-size",
        alias = "jer-size",
        value_name = "JER_IMAGE_SIZE",
        default_value = "224x224"
    )]
    jer_size: String,
    /// JER: sketch size k.
    #[arg(long, default_value_t = 32)]
    jer_directions: usize,
    /// JER: seed of the probes and directions.
    #[arg(long, default_value_t = 42)]
    jer_seed: u64,
    /// JER: copies of the image per backward pass (bounds memory).
    #[arg(long, default_value_t = 8)]
    jer_chunk: usize,
    /// Skip JER (the row then has no `jer` metric).
    #[arg(long)]
    skip_jer: bool,
    /// Binding trials.
    #[arg(long, default_value_t = 500)]
    trials: usize,
    /// Same/Different pairs.
    #[arg(long, default_value_t = 500)]
    pairs: usize,
    /// Seed of the binding trials and the same/different pairs.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[command(flatten)]
    readout: ReadoutOpts,
    #[command(flatten)]
    scenes: SceneOpts,
    #[command(flatten)]
    run_dir: OutputArgs,
}

pub fn run(args: ProbeAllArgs, ctx: &RunContext) -> Result<()> {
    let mut config = ProbeAllConfig {
        encoder: args.source.config()?,
        label: args.label,
        images: args.images,
        geometry: args.geometry.options(),
        jer: if args.skip_jer {
            None
        } else {
            Some(JerSettings {
                images: args.jer_images,
                image_size: crate::jer::image_size("--jer-image-size", &args.jer_size)?,
                size: args.jer_size,
                directions: args.jer_directions,
                seed: args.jer_seed,
                chunk: args.jer_chunk,
            })
        },
        trials: args.trials,
        pairs: args.pairs,
        seed: args.seed,
        readouts: Vec::new(),
        scenes: args.scenes.config(),
        dump_images: args.scenes.dump_images,
    };
    // The sizes, pairs and trials are refused before a bad --readouts, as they always were.
    config.check_sizes()?;
    config.readouts = args.readout.readouts()?;
    // Every option (readouts, geometry, JER) before any work: `probe_all::run` checks again.
    config.check()?;
    let output = args.run_dir.output();
    probe_all::run(&config, &output, ctx)?;
    Ok(())
}
