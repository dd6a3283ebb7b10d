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
use anyhow::{Result, bail};
use bindscope_binding::correlate::CorrelateConfig;
use bindscope_binding::study::probe_all::{self, JerSettings, ProbeAllConfig};
use bindscope_binding::study::{Encoder, EncoderConfig, zoo};
use bindscope_core::run::{RunContext, runs_root};
use std::path::PathBuf;

/// Arguments of `experiments probe-all`.
#[derive(clap::Args, Debug)]
pub struct ProbeAllArgs {
    #[command(flatten)]
    source: ModelSource,
    /// Run every encoder of a registry instead of one (`jer21`: the study's Table 3, see
    /// `experiments zoo --list`): one run directory per model under --out (default
    /// runs/probe-all/zoo-<name>), rows without weights listed instead of failing, then
    /// `correlate` over the finished rows (Table 2, Figure 1) in --out/correlate. Resumable.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["model", "random_init", "label", "arch"])]
    zoo: Option<String>,
    /// With --zoo: a folder holding checkpoints under the names `zoo --list` gives (the .pth
    /// releases must be here; Hub checkpoints are otherwise taken from the Hugging Face cache
    /// or downloaded).
    #[arg(long, value_name = "DIR", requires = "zoo")]
    weights_dir: Option<PathBuf>,
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
    let rows = match &args.zoo {
        Some(name) => Some(bindscope_binding::zoo::zoo(name).map_err(anyhow::Error::msg)?),
        None => None,
    };
    if rows.is_some() && args.run_dir.fresh {
        bail!(
            "--fresh with --zoo: give a new --out instead (every row resumes in its own directory)"
        );
    }
    let encoder = match &rows {
        // Replaced by each row's checkpoint; the dtype applies to every row.
        Some(_) => EncoderConfig {
            source: Encoder::Checkpoint(String::new()),
            dtype: args.source.model_opts.dtype,
            arch: None,
            random_init_dir: None,
        },
        None => args.source.config()?,
    };
    let mut config = ProbeAllConfig {
        encoder,
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
    if let (Some(rows), Some(name)) = (rows, &args.zoo) {
        let dir = args
            .run_dir
            .out
            .clone()
            .unwrap_or_else(|| runs_root("probe-all").join(format!("zoo-{name}")));
        let report = zoo::run(
            rows,
            &config,
            args.weights_dir.as_deref(),
            &CorrelateConfig {
                rows: Vec::new(),
                target: "binding_cosine".into(),
                covariates: vec!["embed_dim".into(), "num_params".into()],
                ols: vec!["jer".into(), "same_diff".into()],
            },
            &dir,
            ctx,
        )?;
        for m in &report.missing {
            println!("missing  {:<28} get it from {}", m.label, m.source);
        }
        for f in &report.failed {
            println!("failed   {:<28} {}", f.label, f.reason);
        }
        if !report.failed.is_empty() {
            bail!(
                "{} of {} rows failed (see above and {})",
                report.failed.len(),
                rows.len(),
                dir.join("zoo.json").display()
            );
        }
        return Ok(());
    }
    let output = args.run_dir.output();
    probe_all::run(&config, &output, ctx)?;
    Ok(())
}
