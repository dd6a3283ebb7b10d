//! `experiments jer`: Jacobian effective rank of vision encoders.
//!
//! Source: "Global Geometry Is Not Enough for Vision Representations", §4.1, App. A.4, D.4. The
//! estimators and the derivation of why the output sketch estimates the paper's input sketch are
//! documented in `bindscope_jer`.
//!
//! A run directory holds `config.json` (every resolved option, checkpoint sha256, crate
//! versions, git commit, device), `per_image.jsonl` (the resume log: one line per finished
//! image, appended atomically), and, once all images are done, `results.json`,
//! `per_image.csv`, `spectrum.csv`, `depth.csv` (with `--depth`), `seeds.csv` (with `--seeds`)
//! and SVG plots. Re-running the same command resumes the newest run directory of that model
//! with the same configuration.

use crate::common::{self, ModelOpts, Normalize};
use crate::plot;
use anyhow::{Context, Result, bail};
use bindscope_jer::probe::{IMAGENET_MEAN, IMAGENET_STD, ProbeSpec};
use bindscope_jer::{Estimator, OutputSpectrum, Summary, jer_at, summarize};
use bindscope_models::{ForwardOptions, VisionEncoder, VisionReadout};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Arguments of `experiments jer`.
#[derive(clap::Args, Debug)]
pub struct JerArgs {
    /// Hugging Face id or local checkpoint directory; repeat for a comparison table.
    #[arg(long, required = true, num_args = 1..)]
    pub(crate) model: Vec<String>,
    /// Number of probe images x ~ N(0.45, 0.225²), clipped to [0, 1].
    #[arg(long, default_value_t = 100)]
    pub(crate) images: usize,
    /// Seed of the probe images and sketch directions.
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Seed-stability study: comma-separated seeds (overrides --seed), e.g. 42,123,456,789,1024.
    #[arg(long, value_delimiter = ',')]
    pub(crate) seeds: Vec<u64>,
    /// Sketch size k (2 ≤ k ≤ output dimension).
    #[arg(long, default_value_t = 32)]
    pub(crate) directions: usize,
    /// output-sketch (Gᵀ·J, one batched backward) or input-sketch (J·V, the paper's definition).
    #[arg(long, default_value = "output-sketch")]
    pub(crate) estimator: Estimator,
    /// Copies of the image per backward pass: bounds peak memory.
    #[arg(long, default_value_t = 8)]
    pub(crate) chunk: usize,
    /// Which embedding: pooled (the model's standard embedding; projected for CLIP), summary
    /// (CLS after the final norm / MAP head), mean-patch.
    #[arg(long, default_value = "pooled")]
    pub(crate) output: VisionReadout,
    /// Normalization of the probe: imagenet (the paper, every model) or model (the
    /// checkpoint's preprocessor_config.json mean/std).
    #[arg(long, value_enum, default_value_t = Normalize::Imagenet)]
    pub(crate) normalize: Normalize,
    /// Also compute JER at the output of every block (pooled like the final output).
    #[arg(long)]
    pub(crate) depth: bool,
    /// Probe image size HxW; the paper uses 224×224 for every model (DINOv2's position
    /// embeddings are interpolated from their 518-pixel grid, as transformers does).
    #[arg(long, default_value = "224x224")]
    pub(crate) size: String,
    /// Run directory (with several models: the parent of one directory per model).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Start a new run directory even if a matching one exists.
    #[arg(long)]
    pub(crate) fresh: bool,
    #[command(flatten)]
    pub(crate) model_opts: ModelOpts,
}

/// One finished probe image: the line format of `per_image.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ImageRecord {
    seed: u64,
    image: u64,
    /// Final output (index 0) or, with --depth, one entry per block then the final output.
    outputs: Vec<OutputSpectrum>,
}

/// Summary of one model's run, for the comparison table and `probe-all`.
pub(crate) struct ModelSummary {
    pub(crate) model: String,
    /// JER over the probe images (the final output).
    pub(crate) jer: Summary,
    /// Entropy effective rank over the probe images.
    pub(crate) erank: Summary,
    spectrum: Vec<f64>,
    dir: PathBuf,
}

fn parse_size(s: &str) -> Result<[usize; 2]> {
    let (h, w) = s.split_once(['x', 'X']).unwrap_or((s, s));
    let h: usize = h
        .trim()
        .parse()
        .with_context(|| format!("--size '{s}': expected HxW, e.g. 224x224"))?;
    let w: usize = w
        .trim()
        .parse()
        .with_context(|| format!("--size '{s}': expected HxW, e.g. 224x224"))?;
    if h == 0 || w == 0 {
        bail!("--size '{s}': sizes must be positive");
    }
    Ok([h, w])
}

fn model_normalization(ckpt: &bindscope_core::Checkpoint) -> Result<([f32; 3], [f32; 3])> {
    let path = ckpt.preprocessor_config.as_ref().with_context(|| {
        format!(
            "--normalize model: {} has no preprocessor_config.json",
            ckpt.dir().display()
        )
    })?;
    let v: serde_json::Value = common::read_json(path)?;
    let triple = |key: &str| -> Result<[f32; 3]> {
        let a = v
            .get(key)
            .and_then(|a| a.as_array())
            .with_context(|| format!("{}: missing '{key}'", path.display()))?;
        let vals: Vec<f32> = a
            .iter()
            .filter_map(|x| x.as_f64().map(|x| x as f32))
            .collect();
        vals.try_into()
            .map_err(|_| anyhow::anyhow!("{}: '{key}' must be 3 numbers", path.display()))
    };
    Ok((triple("image_mean")?, triple("image_std")?))
}

pub fn run(args: JerArgs, device: &Device, device_spec: &str) -> Result<()> {
    run_models(&args, device, device_spec).map(|_| ())
}

/// Runs every model of `args` (and the comparison table when there are several) and returns
/// their summaries.
pub(crate) fn run_models(
    args: &JerArgs,
    device: &Device,
    device_spec: &str,
) -> Result<Vec<ModelSummary>> {
    let seeds = if args.seeds.is_empty() {
        vec![args.seed]
    } else {
        args.seeds.clone()
    };
    if let Some(dup) = seeds
        .iter()
        .enumerate()
        .find_map(|(i, s)| seeds[..i].contains(s).then_some(s))
    {
        bail!("--seeds: seed {dup} is given twice (each seed is one repetition of the study)");
    }
    if args.images == 0 {
        bail!("--images must be at least 1");
    }
    if args.chunk == 0 {
        bail!("--chunk must be at least 1");
    }
    let several = args.model.len() > 1;
    let stamp = common::timestamp();
    let mut summaries = Vec::new();
    for spec in &args.model {
        let out = match (&args.out, several) {
            (Some(o), false) => Some(o.clone()),
            (Some(o), true) => Some(o.join(common::slug(spec))),
            (None, _) => None,
        };
        summaries.push(run_model(args, spec, &seeds, out, device, device_spec)?);
    }
    if several {
        let dir = args
            .out
            .clone()
            .unwrap_or_else(|| common::runs_root("jer").join(format!("compare-{stamp}")));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut csv = String::from(
            "model,jer_mean,jer_std,jer_ci95_low,jer_ci95_high,jer_cv,erank_mean,erank_std,run_dir\n",
        );
        println!(
            "\n{:<40} {:>16} {:>16} {:>8}",
            "model", "JER (mean±std)", "erank (mean±std)", "CV"
        );
        for s in &summaries {
            println!(
                "{:<40} {:>9.3} ± {:<5.3} {:>9.3} ± {:<5.3} {:>8.4}",
                s.model, s.jer.mean, s.jer.std, s.erank.mean, s.erank.std, s.jer.cv
            );
            csv.push_str(&format!(
                "{},{},{},{},{},{},{},{},{}\n",
                s.model,
                s.jer.mean,
                s.jer.std,
                s.jer.ci95_low,
                s.jer.ci95_high,
                s.jer.cv,
                s.erank.mean,
                s.erank.std,
                s.dir.display()
            ));
        }
        bindscope_core::fsutil::write_atomic(&dir.join("comparison.csv"), csv.as_bytes())?;
        let series: Vec<(String, Vec<f64>)> = summaries
            .iter()
            .map(|s| (s.model.clone(), s.spectrum.clone()))
            .collect();
        plot::spectrum_svg(&dir.join("spectrum.svg"), &series)?;
        println!("comparison: {}", dir.display());
    }
    Ok(summaries)
}

fn run_model(
    args: &JerArgs,
    spec: &str,
    seeds: &[u64],
    out: Option<PathBuf>,
    device: &Device,
    device_spec: &str,
) -> Result<ModelSummary> {
    let ckpt = common::resolve(spec)?;
    let sha = ckpt.weights_sha256()?;
    let ad = device.clone().autodiff();
    let model: Box<dyn VisionEncoder> =
        bindscope_models::registry::load_vision(&ckpt, &ad, &args.model_opts.load_options())
            .with_context(|| format!("loading vision encoder of '{spec}'"))?;
    let info = model.info();
    let [h, w] = parse_size(&args.size)?;
    let (mean, std) = match args.normalize {
        Normalize::Model => model_normalization(&ckpt)?,
        Normalize::Imagenet => (IMAGENET_MEAN, IMAGENET_STD),
    };
    let probe = ProbeSpec {
        norm_mean: mean,
        norm_std: std,
        ..ProbeSpec::paper(h, w)
    };

    // The differentiable map: final output, or every block's output then the final one.
    let readout = args.output;
    let depth = args.depth;
    let m: &dyn VisionEncoder = model.as_ref();
    let f = move |x: Tensor<4>| -> Vec<Tensor<2>> {
        if depth {
            let out = m.forward_vision(
                x,
                ForwardOptions {
                    output_hidden_states: true,
                    output_attentions: false,
                },
            );
            let hs = out.hidden_states.expect("hidden states requested");
            hs.into_iter()
                .skip(1)
                .map(|h| m.readout(h, readout))
                .collect()
        } else {
            vec![m.embed(x, readout)]
        }
    };
    // Output dimensions from one forward pass without gradients.
    let dims: Vec<usize> = {
        let x = Tensor::<4>::zeros([1, 3, h, w], &ad);
        f(x).iter().map(|y| y.dims()[1]).collect()
    };
    if dims.is_empty() {
        bail!("'{spec}': the encoder produced no output to differentiate");
    }
    for &d in &dims {
        if args.directions < 2 || args.directions > d {
            bail!(
                "--directions {} is invalid for '{spec}': the {} output has dimension {d}; need 2 ≤ k ≤ {d}",
                args.directions,
                serde_json::to_string(&readout)?
            );
        }
    }

    let identity = json!({
        "model": spec,
        "weights_sha256": sha,
        "images": args.images,
        "seeds": seeds,
        "directions": args.directions,
        "estimator": args.estimator.to_string(),
        "output": readout,
        "normalize": { "mode": args.normalize, "mean": mean, "std": std },
        "probe": { "pixel_mean": probe.pixel_mean, "pixel_std": probe.pixel_std, "clip": [0.0, 1.0] },
        "depth": depth,
        "size": [h, w],
        "dtype": args.model_opts.dtype,
    });
    let dir = common::run_dir("jer", &common::slug(spec), out, &identity, args.fresh)?;
    let config = common::config_json(
        json!({
            "study": "jer",
            "identity": identity,
            "model_info": info,
            "chunk": args.chunk,
            "checkpoint_files": ckpt.weights.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        }),
        Some((device_spec, device)),
    );
    if !dir.join("config.json").exists() {
        common::write_json(&dir.join("config.json"), &config)?;
    }

    // Resume: what is already in the log.
    let log = dir.join("per_image.jsonl");
    let mut done: BTreeMap<(u64, u64), ImageRecord> = BTreeMap::new();
    for r in common::read_jsonl::<ImageRecord>(&log, "per-image")? {
        done.insert((r.seed, r.image), r);
    }
    let total = (seeds.len() * args.images) as u64;
    let todo: Vec<(u64, u64)> = seeds
        .iter()
        .flat_map(|&s| (0..args.images as u64).map(move |i| (s, i)))
        .filter(|k| !done.contains_key(k))
        .collect();
    eprintln!(
        "jer: {spec} ({}; {}×{}; k={}; {}; {}) → {}{}",
        info.model_type,
        h,
        w,
        args.directions,
        args.estimator,
        serde_json::to_string(&readout)?.trim_matches('"'),
        dir.display(),
        if done.is_empty() {
            String::new()
        } else {
            format!(" (resuming: {} of {total} images done)", done.len())
        }
    );
    let pb = common::progress(total, "images");
    pb.set_position(done.len() as u64);
    for (s, i) in todo {
        let outputs = jer_at(
            &f,
            &probe,
            &dims,
            args.directions,
            args.estimator,
            s,
            i,
            args.chunk,
            device,
        )
        .with_context(|| format!("'{spec}', seed {s}"))?;
        let rec = ImageRecord {
            seed: s,
            image: i,
            outputs,
        };
        bindscope_core::fsutil::append_line(&log, &serde_json::to_string(&rec)?)?;
        done.insert((s, i), rec);
        pb.inc(1);
    }
    pb.finish_and_clear();

    let records: Vec<ImageRecord> = done.into_values().collect();
    let summary = write_reports(&dir, spec, &records, seeds, depth)?;
    println!(
        "{spec}: JER = {:.3} ± {:.3} (95% CI {:.3}–{:.3}, CV {:.4}), entropy rank = {:.3} ± {:.3}, n = {}  [{}]",
        summary.jer.mean,
        summary.jer.std,
        summary.jer.ci95_low,
        summary.jer.ci95_high,
        summary.jer.cv,
        summary.erank.mean,
        summary.erank.std,
        summary.jer.n,
        dir.display()
    );
    Ok(summary)
}

fn write_reports(
    dir: &Path,
    spec: &str,
    records: &[ImageRecord],
    seeds: &[u64],
    depth: bool,
) -> Result<ModelSummary> {
    let last = |r: &ImageRecord| r.outputs.last().cloned().expect("at least one output");
    let jers: Vec<f64> = records.iter().map(|r| last(r).jer).collect();
    let eranks: Vec<f64> = records.iter().map(|r| last(r).entropy_rank).collect();
    let k = last(&records[0]).sigma.len();
    let mut mean_spec = vec![0f64; k];
    for r in records {
        for (m, v) in mean_spec
            .iter_mut()
            .zip(bindscope_jer::normalized_spectrum(&last(r).sigma))
        {
            *m += v / records.len() as f64;
        }
    }
    let jer = summarize(&jers);
    let erank = summarize(&eranks);

    let mut per_image = String::from("seed,image,jer,entropy_rank,sigma_max\n");
    let mut spectrum = String::from("seed,image,index,sigma,normalized\n");
    for r in records {
        let o = last(r);
        per_image.push_str(&format!(
            "{},{},{},{},{}\n",
            r.seed, r.image, o.jer, o.entropy_rank, o.sigma[0]
        ));
        for (i, (s, n)) in o
            .sigma
            .iter()
            .zip(bindscope_jer::normalized_spectrum(&o.sigma))
            .enumerate()
        {
            spectrum.push_str(&format!("{},{},{},{},{}\n", r.seed, r.image, i + 1, s, n));
        }
    }
    bindscope_core::fsutil::write_atomic(&dir.join("per_image.csv"), per_image.as_bytes())?;
    bindscope_core::fsutil::write_atomic(&dir.join("spectrum.csv"), spectrum.as_bytes())?;

    let per_seed: Vec<serde_json::Value> = seeds
        .iter()
        .map(|&s| {
            let v: Vec<f64> = records
                .iter()
                .filter(|r| r.seed == s)
                .map(|r| last(r).jer)
                .collect();
            json!({ "seed": s, "jer": summarize(&v) })
        })
        .collect();
    let seed_means: Vec<f64> = per_seed
        .iter()
        .map(|p| p["jer"]["mean"].as_f64().unwrap_or(f64::NAN))
        .collect();
    if seeds.len() > 1 {
        let mut csv = String::from("seed,n,jer_mean,jer_std,jer_cv\n");
        for p in &per_seed {
            csv.push_str(&format!(
                "{},{},{},{},{}\n",
                p["seed"], p["jer"]["n"], p["jer"]["mean"], p["jer"]["std"], p["jer"]["cv"]
            ));
        }
        bindscope_core::fsutil::write_atomic(&dir.join("seeds.csv"), csv.as_bytes())?;
        println!("seed stability ({spec}):");
        for p in &per_seed {
            println!(
                "  seed {:>6}: JER {:.3} ± {:.3}",
                p["seed"],
                p["jer"]["mean"].as_f64().unwrap_or(f64::NAN),
                p["jer"]["std"].as_f64().unwrap_or(f64::NAN)
            );
        }
        let across = summarize(&seed_means);
        println!(
            "  across seeds: {:.3} ± {:.3} (CV {:.4})",
            across.mean, across.std, across.cv
        );
    }

    let mut depth_json = serde_json::Value::Null;
    if depth {
        let blocks = records[0].outputs.len();
        let mut csv = String::from("seed,image,block,jer,entropy_rank\n");
        for r in records {
            for (b, o) in r.outputs.iter().enumerate() {
                csv.push_str(&format!(
                    "{},{},{},{},{}\n",
                    r.seed,
                    r.image,
                    b + 1,
                    o.jer,
                    o.entropy_rank
                ));
            }
        }
        bindscope_core::fsutil::write_atomic(&dir.join("depth.csv"), csv.as_bytes())?;
        let profile: Vec<Summary> = (0..blocks)
            .map(|b| summarize(&records.iter().map(|r| r.outputs[b].jer).collect::<Vec<_>>()))
            .collect();
        plot::depth_svg(&dir.join("depth.svg"), spec, &profile)?;
        depth_json = json!(
            profile
                .iter()
                .enumerate()
                .map(|(b, s)| json!({"block": b + 1, "jer": s}))
                .collect::<Vec<_>>()
        );
    }
    plot::spectrum_svg(
        &dir.join("spectrum.svg"),
        &[(spec.to_string(), mean_spec.clone())],
    )?;
    common::write_json(
        &dir.join("results.json"),
        &json!({
            "model": spec,
            "jer": jer,
            "entropy_rank": erank,
            "normalized_spectrum_mean": mean_spec,
            "per_seed": per_seed,
            "seed_means": summarize(&seed_means),
            "depth": depth_json,
        }),
    )?;
    Ok(ModelSummary {
        model: spec.to_string(),
        jer,
        erank,
        spectrum: mean_spec,
        dir: dir.to_path_buf(),
    })
}
