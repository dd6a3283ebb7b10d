//! `experiments probe-all`: one row of the paper's Table 3 for one encoder — JER,
//! Same/Different, Attribute Binding with the three readouts, and (with `--images DIR`) the
//! geometric metrics — written as `row.json` for `experiments correlate`.
//!
//! JER is computed by the `jer` subcommand itself (same code path, arguments built here) in
//! the sub-directory `jer/` of the run directory, which keeps its own resume log; defaults
//! here: 100 probe images, seed 42, k = 32, output sketch, ImageNet normalization, and the
//! probe size `--jer-size 224` (the synthetic canvas size; the `jer` subcommand's own default
//! is the model's configured size, 518 for DINOv2 checkpoints). The 324 scenes are embedded
//! once (`scenes.jsonl`) and shared by binding and same/different; geometry embeddings are
//! cached in `geometry_embeddings.jsonl`. Re-running the same command resumes the newest
//! matching run directory and skips finished steps.
//!
//! `row.json`: `model`, `label`, `model_type`, `embed_dim`, `num_params`, a flat `metrics`
//! map (`jer`, `jer_entropy_rank`, `same_diff`, `binding_cosine`, `binding_knn`,
//! `binding_local_pca`, `g_pr`, `g_iso`, `l_iso_{variance,erank,pr}_k{8,16,32}`), the full
//! `details` of every step, wall times per step (`timings_s`) and the run identity.

use crate::binding::{self, ModelSource, ReadoutOpts, SceneOpts};
use crate::common;
use crate::common::Normalize;
use crate::geometry::{self, GeometryOpts};
use crate::jer::JerArgs;
use anyhow::{Context, Result, bail};
use bindscope_binding::readout::Bank;
use bindscope_jer::Estimator;
use burn::prelude::*;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

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
    #[arg(long, default_value = "224x224")]
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
    /// Run directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a new run directory even if a matching one exists.
    #[arg(long)]
    fresh: bool,
}

pub fn run(args: ProbeAllArgs, device: &Device, device_spec: &str) -> Result<()> {
    let t_all = Instant::now();
    args.scenes.check()?;
    if args.pairs < 2 {
        bail!("--pairs must be at least 2");
    }
    if args.trials == 0 {
        bail!("--trials must be at least 1");
    }
    let readouts = args.readout.readouts()?;
    let spec = args.source.spec(device)?;
    let ckpt = common::resolve(&spec)?;
    let sha = ckpt.weights_sha256()?;
    let label = args.label.clone().unwrap_or_else(|| common::slug(&spec));
    if let Some(d) = &args.scenes.dump_images {
        binding::dump_scenes(d, &args.scenes.render_spec())?;
    }
    let geo = match &args.images {
        Some(folder) => {
            let files = geometry::list_images(folder)?;
            let samples = geometry::select_samples(&files, &args.geometry);
            Some((
                geometry::geometry_identity(folder, &files, &args.geometry),
                samples,
            ))
        }
        None => None,
    };
    let mut identity = binding::bank_identity(&spec, &sha, &args.source, &args.scenes);
    identity["trials"] = json!(args.trials);
    identity["pairs"] = json!(args.pairs);
    identity["seed"] = json!(args.seed);
    identity["readouts"] = json!(readouts);
    identity["jer"] = if args.skip_jer {
        json!(null)
    } else {
        json!({ "images": args.jer_images, "size": args.jer_size, "directions": args.jer_directions, "seed": args.jer_seed })
    };
    identity["geometry"] = geo.as_ref().map_or(json!(null), |g| g.0.clone());
    let dir = common::run_dir(
        "probe-all",
        &common::slug(&spec),
        args.out.clone(),
        &identity,
        args.fresh,
    )?;
    binding::write_config(
        &dir,
        "probe-all",
        &identity,
        json!({ "label": label, "geometry_files": geo.as_ref().map(|g| &g.1) }),
        device,
        device_spec,
    )?;
    eprintln!("probe-all: {spec} → {}", dir.display());
    let mut timings = serde_json::Map::new();
    let mut metrics = serde_json::Map::new();
    let mut details = serde_json::Map::new();

    // 1. JER, through the jer subcommand (its own resumable run directory).
    if !args.skip_jer {
        let t = Instant::now();
        let jer_dir = dir.join("jer");
        let jer_args = JerArgs {
            model: vec![spec.clone()],
            images: args.jer_images,
            seed: args.jer_seed,
            seeds: Vec::new(),
            directions: args.jer_directions,
            estimator: Estimator::OutputSketch,
            chunk: args.jer_chunk,
            output: args.scenes.output,
            normalize: Normalize::Imagenet,
            depth: false,
            size: args.jer_size.clone(),
            out: Some(jer_dir.clone()),
            fresh: false,
            model_opts: args.source.model_opts.clone(),
        };
        let summary = crate::jer::run_models(&jer_args, device, device_spec)?
            .pop()
            .context("the JER run returned no summary")?;
        metrics.insert("jer".into(), json!(summary.jer.mean));
        metrics.insert("jer_entropy_rank".into(), json!(summary.erank.mean));
        details.insert(
            "jer".into(),
            json!({ "jer": summary.jer, "entropy_rank": summary.erank, "run_dir": jer_dir }),
        );
        timings.insert("jer".into(), json!(t.elapsed().as_secs_f64()));
    }

    // 2. Scene bank, binding, same/different; 3. geometry — one plain-device model.
    let model = bindscope_models::registry::load_vision(
        &ckpt,
        device,
        &args.source.model_opts.load_options(),
    )
    .with_context(|| format!("loading vision encoder of '{spec}'"))?;
    let info = model.info();
    let t = Instant::now();
    let proc = binding::scene_processor(&ckpt, args.scenes.normalize)?;
    let rows = binding::scene_bank(
        model.as_ref(),
        &proc,
        &args.scenes,
        &dir.join("scenes.jsonl"),
        device,
    )?;
    timings.insert("scene_embeddings".into(), json!(t.elapsed().as_secs_f64()));
    let bank = Bank::new(&rows);
    let t = Instant::now();
    let bind = binding::run_binding(&dir, &bank, args.trials, args.seed, &readouts)?;
    for r in &bind {
        metrics.insert(format!("binding_{}", r.readout.name()), json!(r.accuracy));
    }
    details.insert("binding".into(), binding::binding_json(&bind));
    let sd = binding::run_samediff(&dir, &bank, args.pairs, args.seed)?;
    metrics.insert("same_diff".into(), json!(sd.accuracy));
    details.insert("samediff".into(), binding::samediff_json(&sd));
    timings.insert(
        "binding_samediff_readouts".into(),
        json!(t.elapsed().as_secs_f64()),
    );

    if let (Some((_, samples)), Some(_)) = (&geo, &args.images) {
        let t = Instant::now();
        let gproc = geometry::folder_processor(&ckpt, args.geometry.preprocess)?;
        let g = geometry::compute(
            &dir,
            model.as_ref(),
            &gproc,
            samples,
            &args.geometry,
            args.scenes.output,
            args.scenes.batch_size,
            device,
        )?;
        geometry::flat_metrics(&g, &mut metrics);
        details.insert("geometry".into(), g);
        timings.insert("geometry".into(), json!(t.elapsed().as_secs_f64()));
    }
    timings.insert(
        "total_this_invocation".into(),
        json!(t_all.elapsed().as_secs_f64()),
    );

    let row = json!({
        "model": spec,
        "label": label,
        "model_type": info.model_type,
        "embed_dim": info.embed_dim,
        "num_params": info.num_params,
        "hidden_size": info.hidden_size,
        "metrics": metrics,
        "details": details,
        "timings_s": timings,
        "run_dir": dir,
        "identity": identity,
    });
    common::write_json(&dir.join("row.json"), &row)?;
    println!(
        "\n{label} ({}; D = {}, {} parameters)",
        info.model_type, info.embed_dim, info.num_params
    );
    for (k, v) in &metrics {
        println!(
            "  {k:<22} {}",
            v.as_f64()
                .map_or_else(|| v.to_string(), |x| format!("{x:.4}"))
        );
    }
    println!("row: {}", dir.join("row.json").display());
    Ok(())
}
