//! The JER study as a run: one or several vision encoders, their run directories, resume logs,
//! reports and the comparison table (`experiments jer`, and the JER step of `probe-all`).
//!
//! Source: "Global Geometry Is Not Enough for Vision Representations", §4.1, App. A.4, D.4; the
//! estimators are [`crate::jer_at`].
//!
//! A model's run directory holds `config.json` (its [`Identity`], the model's description, the
//! checkpoint files and the provenance of [`RunContext::config_json`]), `per_image.jsonl` (the
//! resume log: one line per finished image, appended atomically), and, once all images are
//! done, `results.json`, `per_image.csv`, `spectrum.csv`, `depth.csv` (with
//! [`Config::depth`]), `seeds.csv` (with several [`Config::seeds`]) and SVG plots
//! ([`crate::plot`]). Running the same [`Config`](struct@Config) again resumes the newest run
//! directory of that model with the same identity. With several models, [`Output::dir`] is the parent of one directory per model
//! and the comparison (`comparison.csv`, `spectrum.svg`) goes there (default
//! `runs/jer/compare-<timestamp>`).

use crate::probe::{IMAGENET_MEAN, IMAGENET_STD, ProbeSpec};
use crate::sketch::Linearize;
use crate::{
    Backward, Estimator, OutputSpectrum, Summary, jer_at_with, memory, normalized_spectrum, plot,
    summarize,
};
use anyhow::{Context, Result, bail};
use bindscope_core::CheckpointError;
use bindscope_core::options::{Dtype, Normalize};
use bindscope_core::run::{
    Output, Plain, RunContext, append_jsonl, new_run_dir, progress, read_jsonl, slug, timestamp,
    write_csv, write_json,
};
use bindscope_data::image::ImageProcessor;
use bindscope_models::linearize::Outputs;
use bindscope_models::registry::{Opened, open_vision};
use bindscope_models::{ForwardOptions, ModelError, VisionEncoder, VisionReadout};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Everything that decides the numbers of a JER run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Hugging Face ids or local checkpoint directories, one run each; several add a
    /// comparison table.
    pub models: Vec<String>,
    /// Probe images per seed, x ~ N(0.45, 0.225²) clipped to [0, 1] ([`ProbeSpec::paper`]).
    pub images: usize,
    /// Seeds of the probe images and sketch directions, each one repetition of the study
    /// (`--seed` or `--seeds`, resolved); more than one adds the seed-stability report.
    pub seeds: Vec<u64>,
    /// Sketch size k (2 ≤ k ≤ output dimension).
    pub directions: usize,
    /// Which sketch of the Jacobian.
    pub estimator: Estimator,
    /// Copies of the image per backward pass (bounds peak memory; changes no number). With the
    /// shared backward, cotangents per pass.
    pub chunk: usize,
    /// How the vector–Jacobian products are taken. Not part of a run's identity: on the CPU the
    /// two agree to rounding (1e-6 relative on a real DINOv2); on a GPU backend burn's autodiff
    /// differentiates exact GELU approximately ([`Backward`]). The backward a model actually
    /// got is recorded in its `config.json`.
    #[serde(default)]
    pub backward: Backward,
    /// Which embedding is differentiated.
    pub output: VisionReadout,
    /// The mean / std the probe is normalized with.
    pub normalize: Normalize,
    /// Also compute JER at the output of every block (read out like the final output). Each
    /// output has its own direction stream ([`crate::probe::directions_stream`]), so the final
    /// output's numbers do not change with it.
    pub depth: bool,
    /// Probe image size `[height, width]` in pixels (ignored with `native_size`).
    pub image_size: [usize; 2],
    /// Probe each model at its own configured input size ([`bindscope_models::ModelInfo::
    /// input_size`]: `image_size` of its `config.json`, 518 for the DINOv2 Hub checkpoints)
    /// instead of `image_size` (`--image-size native`). The paper does not state its probe
    /// size (App. D.4, Table 11).
    #[serde(default)]
    pub native_size: bool,
    /// The float type of the weights.
    pub dtype: Dtype,
    /// The architecture of the models that are PyTorch pickles without `config.json`
    /// (`--arch`, [`bindscope_core::LoadOptions::arch`]); `None` reads it off their keys.
    #[serde(default)]
    pub arch: Option<String>,
}

impl Config {
    /// Checks the options that need no model, naming the command-line flags.
    ///
    /// # Errors
    /// A repeated seed, no seed or model, or a zero image count, chunk or image size.
    pub fn check(&self) -> Result<()> {
        let seeds = &self.seeds;
        if let Some(dup) = seeds
            .iter()
            .enumerate()
            .find_map(|(i, s)| seeds[..i].contains(s).then_some(s))
        {
            bail!("--seeds: seed {dup} is given twice (each seed is one repetition of the study)");
        }
        if seeds.is_empty() {
            bail!("--seeds: no seed given");
        }
        if self.models.is_empty() {
            bail!("--model: no model given");
        }
        if self.images == 0 {
            bail!("--images must be at least 1");
        }
        if self.chunk == 0 {
            bail!("--chunk must be at least 1");
        }
        if !self.native_size && self.image_size.contains(&0) {
            let [h, w] = self.image_size;
            bail!("--image-size {h}x{w}: sizes must be positive");
        }
        Ok(())
    }
}

/// The normalization a probe was given: `(x - mean) / std` per channel after clipping.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Normalization {
    /// Where mean and std come from.
    pub mode: Normalize,
    /// Channel means.
    pub mean: [f32; 3],
    /// Channel standard deviations.
    pub std: [f32; 3],
}

/// The pixel distribution of the probe images before normalization.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PixelDistribution {
    /// Per-pixel mean before clipping.
    pub pixel_mean: f32,
    /// Per-pixel standard deviation before clipping.
    pub pixel_std: f32,
    /// The clipping range, always `[0, 1]` ([`crate::probe::probe_image`]).
    pub clip: [f64; 2],
}

/// The identity of one model's run: what its `config.json` records as `"identity"`, what the
/// run computes from, and what decides which run directory a later run resumes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Identity {
    /// The model as given.
    pub model: String,
    /// sha256 of its weight files.
    pub weights_sha256: String,
    /// Probe images per seed.
    pub images: usize,
    /// Seeds, each one repetition.
    pub seeds: Vec<u64>,
    /// Sketch size k.
    pub directions: usize,
    /// Which sketch.
    pub estimator: Estimator,
    /// Which embedding.
    pub output: VisionReadout,
    /// The probe's normalization, resolved.
    pub normalize: Normalization,
    /// The probe's pixel distribution.
    pub probe: PixelDistribution,
    /// Whether every block's output is differentiated too.
    pub depth: bool,
    /// Probe size `[height, width]`.
    pub size: [usize; 2],
    /// The float type of the weights.
    pub dtype: Dtype,
}

impl Identity {
    /// The probe images this identity describes.
    pub fn probe_spec(&self) -> ProbeSpec {
        ProbeSpec {
            height: self.size[0],
            width: self.size[1],
            pixel_mean: self.probe.pixel_mean,
            pixel_std: self.probe.pixel_std,
            norm_mean: self.normalize.mean,
            norm_std: self.normalize.std,
        }
    }
}

/// What one model's run computed.
#[derive(Debug, Clone, Serialize)]
pub struct ModelReport {
    /// The model as given.
    pub model: String,
    /// JER of the final output over every probe image (all seeds).
    pub jer: Summary,
    /// Entropy effective rank of the final output over every probe image.
    pub entropy_rank: Summary,
    /// Mean normalized spectrum σᵢ/σ₁ of the final output, i = 1..k.
    pub mean_spectrum: Vec<f64>,
    /// The model's run directory.
    pub run_dir: PathBuf,
}

/// What [`run`] computed: one report per model, in the order of [`Config::models`].
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Per model.
    pub models: Vec<ModelReport>,
    /// Where the comparison table went (several models only).
    pub comparison_dir: Option<PathBuf>,
}

/// One finished probe image: the line format of `per_image.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ImageRecord {
    seed: u64,
    image: u64,
    /// The final output alone or, with depth, one entry per block (block 1 … L; block L, the
    /// last, is the final output).
    outputs: Vec<OutputSpectrum>,
}

/// Runs every model of `config` on `ctx`'s device (resuming what a previous run with the same
/// identity finished) and, with several models, writes the comparison table. Prints each
/// model's summary (and the table) on stdout, progress on stderr.
///
/// Every option is checked before any work: with several models each one is opened and
/// checked ([`check_model`]: patch size, memory, `--directions`, `--normalize model`) before the
/// first one runs, so a bad option for the last model does not surface after hours of the
/// first; no run directory is created before its model passed.
///
/// # Errors
/// [`Config::check`]; a model that does not resolve or load; [`check_model`]; an
/// `output.dir` holding another run; a failed computation or write.
pub fn run(config: &Config, output: &Output, ctx: &RunContext) -> Result<Report> {
    config.check()?;
    let several = config.models.len() > 1;
    if several {
        for spec in &config.models {
            prepare(config, spec, ctx)?;
        }
    }
    let stamp = timestamp();
    let mut models = Vec::new();
    for spec in &config.models {
        let out = Output {
            dir: match (&output.dir, several) {
                (Some(o), false) => Some(o.clone()),
                (Some(o), true) => Some(o.join(slug(spec))),
                (None, _) => None,
            },
            fresh: output.fresh,
        };
        models.push(run_model(config, spec, &out, ctx)?);
    }
    let comparison_dir = if several {
        let dir = match &output.dir {
            Some(d) => d.clone(),
            None => new_run_dir("jer", &format!("compare-{stamp}"))?,
        };
        write_comparison(&dir, &models)?;
        Some(dir)
    } else {
        None
    };
    Ok(Report {
        models,
        comparison_dir,
    })
}

/// `comparison.csv` and `spectrum.svg` of several models in `dir`, and the table on stdout.
fn write_comparison(dir: &Path, models: &[ModelReport]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    println!(
        "\n{:<40} {:>16} {:>16} {:>8}",
        "model", "JER (mean±std)", "erank (mean±std)", "CV"
    );
    let mut rows = Vec::new();
    for s in models {
        println!(
            "{:<40} {:>9.3} ± {:<5.3} {:>9.3} ± {:<5.3} {:>8.4}",
            s.model, s.jer.mean, s.jer.std, s.entropy_rank.mean, s.entropy_rank.std, s.jer.cv
        );
        rows.push(ComparisonRow {
            model: &s.model,
            jer_mean: Plain(s.jer.mean),
            jer_std: Plain(s.jer.std),
            jer_ci95_low: Plain(s.jer.ci95_low),
            jer_ci95_high: Plain(s.jer.ci95_high),
            jer_cv: Plain(s.jer.cv),
            erank_mean: Plain(s.entropy_rank.mean),
            erank_std: Plain(s.entropy_rank.std),
            run_dir: s.run_dir.display().to_string(),
        });
    }
    write_csv(&dir.join("comparison.csv"), &rows)?;
    let series: Vec<(String, Vec<f64>)> = models
        .iter()
        .map(|s| (s.model.clone(), s.mean_spectrum.clone()))
        .collect();
    plot::spectrum_svg(&dir.join("spectrum.svg"), &series)?;
    println!("comparison: {}", dir.display());
    Ok(())
}

/// Opens `spec` on `device`; a failed load (not a failed resolve) names the model.
fn open(
    spec: &str,
    device: &Device,
    dtype: Dtype,
    arch: Option<&str>,
) -> Result<Opened<Box<dyn VisionEncoder>>> {
    let opts = bindscope_core::LoadOptions {
        arch: arch.map(str::to_string),
        ..dtype.load_options()
    };
    open_vision(spec, device, &opts).map_err(|e| match e {
        ModelError::Checkpoint(
            CheckpointError::NotFound { .. } | CheckpointError::MissingFile { .. },
        ) => e.into(),
        e => anyhow::Error::new(e).context(format!("loading vision encoder of '{spec}'")),
    })
}

/// The spec a run identity records: a local directory as its canonical absolute path (the
/// same checkpoint given as `m`, `./m` or `/abs/m` is one configuration), a Hub id as given.
pub fn canonical_spec(spec: &str) -> String {
    let p = Path::new(spec);
    if p.is_dir()
        && let Ok(c) = p.canonicalize()
    {
        return c.display().to_string();
    }
    spec.to_string()
}

/// Whether `ctx`'s device computes in host memory (the CPU), so that the device part of a
/// memory estimate is checked against the host's memory too ([`crate::memory`]).
pub fn on_host(ctx: &RunContext) -> bool {
    matches!(
        ctx.device_spec.parse::<bindscope_core::DeviceSpec>(),
        Ok(bindscope_core::DeviceSpec::Cpu)
    )
}

/// The outputs the JER of `config` differentiates, for a batch `x`: the final output, or with
/// `depth` every block's output read out like the final one (block L is the final output).
/// What [`VisionEncoder::linearize`] with `Outputs::Final` / `Outputs::EveryBlock` computes.
///
/// # Shapes
/// `x: [N, 3, H, W]` → `[N, E]` each.
pub fn outputs(
    m: &dyn VisionEncoder,
    x: Tensor<4>,
    readout: VisionReadout,
    depth: bool,
) -> Vec<Tensor<2>> {
    if depth {
        let out = m.forward_vision(
            x,
            ForwardOptions {
                output_hidden_states: true,
                output_attentions: false,
                attention_last_rows: None,
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
}

/// Checks `config` against the model `spec` (loaded as `model` on `device`) before any work,
/// naming the flags: the probe holds a patch, a backward chunk and the host's share fit in
/// memory (lower bounds, [`crate::memory`]; the device part only when `on_host`), and
/// `--directions` fits every output. Returns the output dimensions (one forward pass of a
/// zero probe, batch 1).
///
/// # Errors
/// An `--image-size` smaller than a patch or too large for the memory, or `--directions`
/// outside `2..=D`.
pub fn check_model(
    config: &Config,
    spec: &str,
    model: &dyn VisionEncoder,
    device: &Device,
    on_host: bool,
) -> Result<Vec<usize>> {
    let info = model.info();
    let [h, w] = config.image_size;
    if !info.holds_a_patch(config.image_size) {
        bail!(
            "--image-size {h}x{w} is smaller than one {p}×{p} patch of '{spec}'",
            p = info.patch_size
        );
    }
    let shape = memory::EncoderShape::of(model);
    let input = config.estimator == Estimator::InputSketch;
    let mut needed = memory::jer_host_bytes(config.image_size, config.directions, input);
    if on_host {
        let autodiff = memory::jer_device_bytes(&shape, config.image_size, config.chunk);
        // With the shared backward a model that offers no linearization falls back to
        // autodiff: the smaller bound holds either way.
        needed += match config.backward {
            Backward::Autodiff => autodiff,
            Backward::Shared => autodiff.min(memory::jer_shared_device_bytes(
                &shape,
                config.image_size,
                config.chunk,
            )),
        };
    }
    memory::ensure_fits(
        needed,
        memory::available_bytes(),
        &format!(
            "--image-size {h}x{w} with --chunk {} on '{spec}' ({} tokens per copy)",
            config.chunk,
            shape.tokens(config.image_size)
        ),
        "reduce --image-size or --chunk",
    )?;
    let dims: Vec<usize> = {
        let x = Tensor::<4>::zeros([1, 3, h, w], device);
        outputs(model, x, config.output, config.depth)
            .iter()
            .map(|y| y.dims()[1])
            .collect()
    };
    if dims.is_empty() {
        bail!("'{spec}': the encoder produced no output to differentiate");
    }
    let k = config.directions;
    for &d in &dims {
        if k < 2 || k > d {
            bail!(
                "--directions {k} is invalid for '{spec}': the {} output has dimension {d}; need 2 ≤ k ≤ {d}",
                serde_json::to_string(&config.output)?
            );
        }
    }
    Ok(dims)
}

/// A model opened for its run and checked ([`check_model`]), with its identity.
struct Prepared {
    opened: Opened<Box<dyn VisionEncoder>>,
    identity: Identity,
    dims: Vec<usize>,
}

/// Opens `spec` on the autodiff device, resolves the normalization and checks the options
/// against it: everything before the run directory.
fn prepare(config: &Config, spec: &str, ctx: &RunContext) -> Result<Prepared> {
    let ad = ctx.device.clone().autodiff();
    let opened = open(spec, &ad, config.dtype, config.arch.as_deref())?;
    let (mean, std) = match config.normalize {
        Normalize::Model => {
            let p =
                ImageProcessor::for_checkpoint(&opened.checkpoint).context("--normalize model")?;
            (p.image_mean, p.image_std)
        }
        Normalize::Imagenet => (IMAGENET_MEAN, IMAGENET_STD),
    };
    // The probe size this model is run at: the configured one with `native_size`.
    let sized;
    let config = if config.native_size {
        sized = Config {
            image_size: opened.model.info().input_size,
            ..config.clone()
        };
        &sized
    } else {
        config
    };
    let dims = check_model(config, spec, opened.model.as_ref(), &ad, on_host(ctx))?;
    let [h, w] = config.image_size;
    let paper = ProbeSpec::paper(h, w);
    let identity = Identity {
        model: canonical_spec(spec),
        weights_sha256: opened.weights_sha256.clone(),
        images: config.images,
        seeds: config.seeds.clone(),
        directions: config.directions,
        estimator: config.estimator,
        output: config.output,
        normalize: Normalization {
            mode: config.normalize,
            mean,
            std,
        },
        probe: PixelDistribution {
            pixel_mean: paper.pixel_mean,
            pixel_std: paper.pixel_std,
            clip: [0.0, 1.0],
        },
        depth: config.depth,
        size: config.image_size,
        dtype: config.dtype,
    };
    Ok(Prepared {
        opened,
        identity,
        dims,
    })
}

fn run_model(
    config: &Config,
    spec: &str,
    output: &Output,
    ctx: &RunContext,
) -> Result<ModelReport> {
    let device = &ctx.device;
    let Prepared {
        opened,
        identity,
        dims,
    } = prepare(config, spec, ctx)?;
    let info = opened.model.info();
    let [h, w] = identity.size;
    let probe = identity.probe_spec();

    // The differentiable map: final output, or every block's output (block L is the final one).
    let readout = identity.output;
    let depth = identity.depth;
    let m: &dyn VisionEncoder = opened.model.as_ref();
    let f = move |x: Tensor<4>| -> Vec<Tensor<2>> { outputs(m, x, readout, depth) };
    let kind = if depth {
        Outputs::EveryBlock
    } else {
        Outputs::Final
    };
    let lin = move |x: Tensor<4>| m.linearize(x, readout, kind);
    // The backward this model actually gets: `shared` only where it offers a linearization
    // (one forward pass of a zero probe tells), recorded and printed as such.
    let backward = match config.backward {
        Backward::Shared if lin(Tensor::<4>::zeros([1, 3, h, w], device)).is_some() => {
            Backward::Shared
        }
        _ => Backward::Autodiff,
    };
    let linearize: Option<Linearize<'_>> = match backward {
        Backward::Shared => Some(&lin),
        Backward::Autodiff => None,
    };
    let k = identity.directions;

    let identity_json = serde_json::to_value(&identity)?;
    let dir = output.run_dir("jer", &slug(spec), &identity_json)?;
    // One process per run directory: a second would interleave the per-image log.
    let _lock = bindscope_core::run::lock_run_dir(&dir)?;
    let record = ctx.config_json(json!({
        "study": "jer",
        "identity": identity_json,
        "model_info": info,
        "chunk": config.chunk,
        "backward": backward,
        "checkpoint_files": opened.checkpoint.weights.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
    }));
    if !dir.join("config.json").exists() {
        write_json(&dir.join("config.json"), &record)?;
    }

    // Resume: what is already in the log.
    let log = dir.join("per_image.jsonl");
    let mut done: BTreeMap<(u64, u64), ImageRecord> = BTreeMap::new();
    for r in read_jsonl::<ImageRecord>(&log, "per-image")? {
        done.insert((r.seed, r.image), r);
    }
    let seeds = &identity.seeds;
    let total = (seeds.len() * identity.images) as u64;
    let todo: Vec<(u64, u64)> = seeds
        .iter()
        .flat_map(|&s| (0..identity.images as u64).map(move |i| (s, i)))
        .filter(|key| !done.contains_key(key))
        .collect();
    eprintln!(
        "jer: {spec} ({}; {}×{}; k={k}; {}, {backward} backward; {}) → {}{}",
        info.model_type,
        h,
        w,
        identity.estimator,
        serde_json::to_string(&readout)?.trim_matches('"'),
        dir.display(),
        if done.is_empty() {
            String::new()
        } else {
            format!(" (resuming: {} of {total} images done)", done.len())
        }
    );
    let pb = progress(total, "images");
    pb.set_position(done.len() as u64);
    for (s, i) in todo {
        let outputs = jer_at_with(
            &f,
            linearize,
            &probe,
            &dims,
            k,
            identity.estimator,
            s,
            i,
            config.chunk,
            device,
        )
        .with_context(|| format!("'{spec}', seed {s}"))?;
        let rec = ImageRecord {
            seed: s,
            image: i,
            outputs,
        };
        append_jsonl(&log, &rec)?;
        done.insert((s, i), rec);
        pb.inc(1);
    }
    pb.finish_and_clear();

    let records: Vec<ImageRecord> = done.into_values().collect();
    let report = write_reports(&dir, spec, &records, seeds, depth)?;
    println!(
        "{spec}: JER = {:.3} ± {:.3}, {}, CV {:.4}, entropy rank = {:.3} ± {:.3}, n = {}  [{}]",
        report.jer.mean,
        report.jer.std,
        // A JER is at least 1 (one direction): a t-interval reaching below is shown clipped.
        bindscope_core::plot::interval(
            report.jer.ci95_low,
            report.jer.ci95_high,
            report.jer.n,
            Some(1.0),
            3
        ),
        report.jer.cv,
        report.entropy_rank.mean,
        report.entropy_rank.std,
        report.jer.n,
        dir.display()
    );
    Ok(report)
}

/// The reports of one finished model run. CSV rows are written with `format!` (Rust's float
/// formatting), as they always were: the csv crate would print `1.0` where these files have `1`.
fn write_reports(
    dir: &Path,
    spec: &str,
    records: &[ImageRecord],
    seeds: &[u64],
    depth: bool,
) -> Result<ModelReport> {
    let last = |r: &ImageRecord| r.outputs.last().cloned().expect("at least one output");
    let jers: Vec<f64> = records.iter().map(|r| last(r).jer).collect();
    let eranks: Vec<f64> = records.iter().map(|r| last(r).entropy_rank).collect();
    let k = last(&records[0]).sigma.len();
    let mut mean_spec = vec![0f64; k];
    for r in records {
        for (m, v) in mean_spec
            .iter_mut()
            .zip(normalized_spectrum(&last(r).sigma))
        {
            *m += v / records.len() as f64;
        }
    }
    let jer = summarize(&jers);
    let erank = summarize(&eranks);

    let mut per_image = Vec::new();
    let mut spectrum = Vec::new();
    for r in records {
        let o = last(r);
        per_image.push(PerImageRow {
            seed: r.seed,
            image: r.image,
            jer: Plain(o.jer),
            entropy_rank: Plain(o.entropy_rank),
            sigma_max: Plain(o.sigma[0]),
        });
        for (i, (s, n)) in o
            .sigma
            .iter()
            .zip(normalized_spectrum(&o.sigma))
            .enumerate()
        {
            spectrum.push(SpectrumRow {
                seed: r.seed,
                image: r.image,
                index: i + 1,
                sigma: Plain(*s),
                normalized: Plain(n),
            });
        }
    }
    write_csv(&dir.join("per_image.csv"), &per_image)?;
    write_csv(&dir.join("spectrum.csv"), &spectrum)?;

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
        // The numbers as their JSON text (`1.0`), the form this file has always had.
        let rows: Vec<SeedRow<'_>> = per_seed
            .iter()
            .map(|p| SeedRow {
                seed: Plain(&p["seed"]),
                n: Plain(&p["jer"]["n"]),
                jer_mean: Plain(&p["jer"]["mean"]),
                jer_std: Plain(&p["jer"]["std"]),
                jer_cv: Plain(&p["jer"]["cv"]),
            })
            .collect();
        write_csv(&dir.join("seeds.csv"), &rows)?;
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
        let rows: Vec<DepthRow> = records
            .iter()
            .flat_map(|r| {
                r.outputs.iter().enumerate().map(|(b, o)| DepthRow {
                    seed: r.seed,
                    image: r.image,
                    block: b + 1,
                    jer: Plain(o.jer),
                    entropy_rank: Plain(o.entropy_rank),
                })
            })
            .collect();
        write_csv(&dir.join("depth.csv"), &rows)?;
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
    write_json(
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
    Ok(ModelReport {
        model: spec.to_string(),
        jer,
        entropy_rank: erank,
        mean_spectrum: mean_spec,
        run_dir: dir.to_path_buf(),
    })
}

/// A row of `comparison.csv`.
#[derive(Serialize)]
struct ComparisonRow<'a> {
    model: &'a str,
    jer_mean: Plain,
    jer_std: Plain,
    jer_ci95_low: Plain,
    jer_ci95_high: Plain,
    jer_cv: Plain,
    erank_mean: Plain,
    erank_std: Plain,
    run_dir: String,
}

/// A row of `per_image.csv`.
#[derive(Serialize)]
struct PerImageRow {
    seed: u64,
    image: u64,
    jer: Plain,
    entropy_rank: Plain,
    sigma_max: Plain,
}

/// A row of `spectrum.csv`.
#[derive(Serialize)]
struct SpectrumRow {
    seed: u64,
    image: u64,
    index: usize,
    sigma: Plain,
    normalized: Plain,
}

/// A row of `seeds.csv`.
#[derive(Serialize)]
struct SeedRow<'a> {
    seed: Plain<&'a serde_json::Value>,
    n: Plain<&'a serde_json::Value>,
    jer_mean: Plain<&'a serde_json::Value>,
    jer_std: Plain<&'a serde_json::Value>,
    jer_cv: Plain<&'a serde_json::Value>,
}

/// A row of `depth.csv`.
#[derive(Serialize)]
struct DepthRow {
    seed: u64,
    image: u64,
    block: usize,
    jer: Plain,
    entropy_rank: Plain,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config {
            models: vec!["m".into()],
            images: 3,
            seeds: vec![42],
            directions: 4,
            estimator: Estimator::OutputSketch,
            chunk: 2,
            backward: Backward::Shared,
            output: VisionReadout::Summary,
            normalize: Normalize::Imagenet,
            depth: false,
            image_size: [16, 24],
            native_size: false,
            dtype: Dtype::F32,
            arch: None,
        }
    }

    /// The identity decides which run directory is resumed: it must keep the JSON that runs
    /// recorded before it was a typed value.
    #[test]
    fn identity_serializes_as_recorded_runs_have_it() {
        let paper = ProbeSpec::paper(16, 24);
        let id = Identity {
            model: "m".into(),
            weights_sha256: "ab".into(),
            images: 3,
            seeds: vec![42, 7],
            directions: 4,
            estimator: Estimator::OutputSketch,
            output: VisionReadout::MeanPatch,
            normalize: Normalization {
                mode: Normalize::Imagenet,
                mean: IMAGENET_MEAN,
                std: IMAGENET_STD,
            },
            probe: PixelDistribution {
                pixel_mean: paper.pixel_mean,
                pixel_std: paper.pixel_std,
                clip: [0.0, 1.0],
            },
            depth: true,
            size: [16, 24],
            dtype: Dtype::Keep,
        };
        let recorded = json!({
            "model": "m",
            "weights_sha256": "ab",
            "images": 3,
            "seeds": [42, 7],
            "directions": 4,
            "estimator": "output-sketch",
            "output": "mean-patch",
            "normalize": { "mode": "imagenet", "mean": IMAGENET_MEAN, "std": IMAGENET_STD },
            "probe": { "pixel_mean": paper.pixel_mean, "pixel_std": paper.pixel_std, "clip": [0.0, 1.0] },
            "depth": true,
            "size": [16, 24],
            "dtype": "keep",
        });
        assert_eq!(serde_json::to_value(&id).unwrap(), recorded);
        assert_eq!(id.probe_spec(), paper);
    }

    #[test]
    fn check_names_the_flags() {
        assert!(config().check().is_ok());
        let fails = |c: Config, want: &str| {
            let e = c.check().unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        };
        fails(
            Config {
                seeds: vec![1, 2, 1],
                ..config()
            },
            "seed 1 is given twice",
        );
        fails(
            Config {
                images: 0,
                ..config()
            },
            "--images",
        );
        fails(
            Config {
                chunk: 0,
                ..config()
            },
            "--chunk",
        );
        fails(
            Config {
                image_size: [0, 4],
                ..config()
            },
            "sizes must be positive",
        );
    }

    #[test]
    fn config_round_trips_through_json() {
        let c = config();
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["image_size"], json!([16, 24]));
        assert_eq!(v["output"], "summary");
        assert_eq!(serde_json::from_value::<Config>(v).unwrap(), c);
    }
}
