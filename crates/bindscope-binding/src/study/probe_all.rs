//! One row of Table 3 of "Global Geometry Is Not Enough for Vision Representations" for one
//! encoder (`experiments probe-all`): JER (§4.1), Same/Different and Attribute Binding with the
//! three readouts (§5.1) and, with a folder of natural images, the geometric metrics (§3.1),
//! written as `row.json` for [`crate::correlate`].
//!
//! JER runs through the JER study itself ([`bindscope_jer::study::run`]) in the sub-directory
//! `jer/` of the run directory, which keeps its own resume log; the 324 scenes are embedded once
//! (`scenes.jsonl`) and shared by binding and same/different; geometry embeddings are cached in
//! `geometry_embeddings.jsonl`. Re-running the same configuration resumes the newest matching
//! run directory and skips finished steps.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bindscope_core::options::Normalize;
use bindscope_core::run::{Output, RunContext, slug, write_json};
use bindscope_jer::Estimator;
use bindscope_models::ModelInfo;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::geometry::{self, GeometryIdentity, GeometryOptions, Selection};
use super::{
    BankIdentity, EncoderConfig, SameDiffSummary, SceneConfig, binding_on_bank, binding_summaries,
    check_readouts, dump_scenes, open_run_dir, samediff_on_bank, scene_bank, scene_processor,
};
use crate::readout::{Bank, Readout};

/// The JER part of a row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JerSettings {
    /// Probe images.
    pub images: usize,
    /// Probe size `[H, W]` in pixels.
    pub image_size: [usize; 2],
    /// The probe size as the user wrote it (`--jer-image-size`, e.g. `224x224`): what the row's
    /// identity records.
    pub size: String,
    /// Sketch size k.
    pub directions: usize,
    /// Seed of the probes and directions.
    pub seed: u64,
    /// Directions per backward pass (memory only; no number depends on it).
    pub chunk: usize,
}

/// Everything a Table-3 row depends on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeAllConfig {
    /// The encoder.
    pub encoder: EncoderConfig,
    /// Short name of the model in tables and plots (`None`: from the model spec).
    pub label: Option<String>,
    /// Folder of natural images for the geometric metrics (`None`: skipped).
    pub images: Option<PathBuf>,
    /// Options of the geometric metrics.
    pub geometry: GeometryOptions,
    /// JER settings (`None`: skipped; the row then has no `jer` metric).
    pub jer: Option<JerSettings>,
    /// Binding trials.
    pub trials: usize,
    /// Same/Different pairs.
    pub pairs: usize,
    /// Seed of the binding trials and the same/different pairs.
    pub seed: u64,
    /// The binding readouts.
    pub readouts: Vec<Readout>,
    /// How scenes are drawn and fed (also the readout of JER and geometry).
    pub scenes: SceneConfig,
    /// Also save the 324 scenes as PNG here.
    pub dump_images: Option<PathBuf>,
}

impl ProbeAllConfig {
    /// Refuses settings no run can use, naming the flag.
    ///
    /// # Errors
    /// Scene sizes out of range, fewer than 2 pairs, no trials, bad readouts
    /// ([`super::check_readouts`]), geometry options no folder can use (with `images`:
    /// [`GeometryOptions::check`]), no JER images, a zero JER chunk or fewer than 2 JER
    /// directions.
    pub fn check(&self) -> Result<()> {
        self.check_sizes()?;
        check_readouts(&self.readouts)?;
        if self.images.is_some() {
            self.geometry.check()?;
        }
        Ok(())
    }

    /// The checks of [`ProbeAllConfig::check`] that need no readout: scene sizes, pairs,
    /// trials and the JER settings.
    ///
    /// # Errors
    /// As [`ProbeAllConfig::check`].
    pub fn check_sizes(&self) -> Result<()> {
        self.scenes.check()?;
        if self.pairs < 2 {
            bail!("--pairs must be at least 2");
        }
        if self.trials == 0 {
            bail!("--trials must be at least 1");
        }
        if let Some(j) = &self.jer {
            if j.images == 0 {
                bail!("--jer-images must be at least 1");
            }
            if j.chunk == 0 {
                bail!("--jer-chunk must be at least 1");
            }
            if j.directions < 2 {
                bail!("--jer-directions must be at least 2");
            }
        }
        Ok(())
    }
}

/// The JER part of a row's identity.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct JerIdentity<'a> {
    images: usize,
    size: &'a str,
    directions: usize,
    seed: u64,
}

/// The identity of a row: the scene bank and every setting of the steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct RowIdentity<'a> {
    #[serde(flatten)]
    bank: BankIdentity,
    trials: usize,
    pairs: usize,
    seed: u64,
    readouts: &'a [Readout],
    jer: Option<JerIdentity<'a>>,
    geometry: Option<&'a GeometryIdentity>,
}

/// The plain-device (no autodiff) encoder of `ckpt`.
fn load(
    config: &ProbeAllConfig,
    ckpt: &bindscope_core::Checkpoint,
    spec: &str,
    device: &burn::prelude::Device,
) -> Result<Box<dyn bindscope_models::VisionEncoder>> {
    bindscope_models::registry::load_vision(ckpt, device, &config.encoder.load_options())
        .with_context(|| format!("loading vision encoder of '{spec}'"))
}

/// A JER check's message with probe-all's flag names (`--jer-image-size`, `--jer-chunk`,
/// `--jer-directions`) for the `jer` subcommand's.
fn jer_flags(e: &anyhow::Error) -> anyhow::Error {
    let text = format!("{e:#}")
        .replace("--image-size", "--jer-image-size")
        .replace("--chunk", "--jer-chunk")
        .replace("--directions", "--jer-directions");
    anyhow::anyhow!(text)
}

/// `row.json`: one encoder's row of Table 3.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The checkpoint spec.
    pub model: String,
    /// Its short name.
    pub label: String,
    /// `model_type`.
    pub model_type: String,
    /// Dimension of the embedding the row's probes read (the `--output` readout).
    pub embed_dim: usize,
    /// Parameter count.
    pub num_params: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// The flat metrics: `jer`, `jer_entropy_rank`, `same_diff`, `binding_<readout>`, `g_pr`,
    /// `g_iso`, `l_iso_{variance,erank,pr}_k<k>`.
    pub metrics: BTreeMap<String, serde_json::Value>,
    /// Every step's full results.
    pub details: BTreeMap<String, serde_json::Value>,
    /// Wall time per step of this invocation, seconds.
    pub timings_s: BTreeMap<String, f64>,
    /// The run directory.
    pub run_dir: PathBuf,
    /// The run's identity.
    pub identity: serde_json::Value,
}

/// Computes the row of `config` in its run directory (resumed when it matches), writes
/// `row.json` and prints the metrics.
///
/// # Errors
/// Bad settings ([`ProbeAllConfig::check`]), an unloadable encoder, a failed step or write.
pub fn run(config: &ProbeAllConfig, output: &Output, ctx: &RunContext) -> Result<Row> {
    let t_all = Instant::now();
    config.check()?;
    let device = &ctx.device;
    let scenes = &config.scenes;
    let spec = config.encoder.spec(device)?;
    // Resolved and hashed first, loaded after JER: JER loads its own (autodiff) copy, and two
    // models are not held at once.
    let ckpt = bindscope_core::Checkpoint::resolve(&spec)?;
    let sha = ckpt.weights_sha256()?;
    let label = config.label.clone().unwrap_or_else(|| slug(&spec));
    let jer = config.jer.as_ref().map(|j| bindscope_jer::study::Config {
        models: vec![spec.clone()],
        images: j.images,
        seeds: vec![j.seed],
        directions: j.directions,
        estimator: Estimator::OutputSketch,
        chunk: j.chunk,
        backward: bindscope_jer::Backward::Shared,
        output: scenes.output,
        normalize: Normalize::Imagenet,
        depth: false,
        image_size: j.image_size,
        native_size: false,
        dtype: config.encoder.dtype,
        arch: config.encoder.arch.clone(),
    });
    // Every check that needs the model, before the run directory: the scenes and the JER
    // probe against its patch size and the memory, `--jer-directions` against its output.
    {
        let model = load(config, &ckpt, &spec, device)?;
        scenes.check_fits(&model.info(), &spec)?;
        let host = bindscope_jer::study::on_host(ctx);
        scenes.check_memory(model.as_ref(), &spec, host)?;
        if let Some(jer) = &jer {
            jer.check()?;
            bindscope_jer::study::check_model(jer, &spec, model.as_ref(), device, host)
                .map_err(|e| jer_flags(&e))?;
        }
    }
    // The scenes are dumped before the folder is listed: `--dump-images D --images D` uses
    // them as the natural images.
    if let Some(d) = &config.dump_images {
        dump_scenes(d, &scenes.render_spec())?;
    }
    let geo = config
        .images
        .as_deref()
        .map(|folder| Selection::new(folder, &config.geometry))
        .transpose()?;
    let identity = serde_json::to_value(RowIdentity {
        bank: BankIdentity::new(&spec, &sha, &config.encoder, scenes),
        trials: config.trials,
        pairs: config.pairs,
        seed: config.seed,
        readouts: &config.readouts,
        jer: config.jer.as_ref().map(|j| JerIdentity {
            images: j.images,
            size: &j.size,
            directions: j.directions,
            seed: j.seed,
        }),
        geometry: geo.as_ref().map(|g| &g.identity),
    })?;
    let dir = open_run_dir(
        output,
        "probe-all",
        &spec,
        &identity,
        json!({ "label": label, "geometry_files": geo.as_ref().map(|g| &g.samples) }),
        ctx,
    )?;
    // One process per run directory: a second would interleave the resume logs.
    let _lock = bindscope_core::run::lock_run_dir(&dir)?;
    eprintln!("probe-all: {spec} → {}", dir.display());
    let mut timings = BTreeMap::new();
    let mut metrics = BTreeMap::new();
    let mut details = BTreeMap::new();

    // 1. JER, through the JER study (its own resumable run directory).
    if let Some(jer) = &jer {
        let t = Instant::now();
        let jer_dir = dir.join("jer");
        let jer_out = Output {
            dir: Some(jer_dir.clone()),
            fresh: false,
        };
        let summary = bindscope_jer::study::run(jer, &jer_out, ctx)?
            .models
            .pop()
            .context("the JER run returned no summary")?;
        metrics.insert("jer".into(), json!(summary.jer.mean));
        metrics.insert("jer_entropy_rank".into(), json!(summary.entropy_rank.mean));
        details.insert(
            "jer".into(),
            json!({ "jer": summary.jer, "entropy_rank": summary.entropy_rank, "run_dir": jer_dir }),
        );
        timings.insert("jer".into(), t.elapsed().as_secs_f64());
    }

    // 2. Scene bank, binding, same/different; 3. geometry — one plain-device model.
    let model = load(config, &ckpt, &spec, device)?;
    let info: ModelInfo = model.info();
    let t = Instant::now();
    let proc = scene_processor(&ckpt, scenes.normalize)?;
    let rows = scene_bank(
        model.as_ref(),
        &proc,
        scenes,
        &dir.join("scenes.jsonl"),
        device,
    )?;
    timings.insert("scene_embeddings".into(), t.elapsed().as_secs_f64());
    // The dimension of the readout the study uses (`--output`), not the model's pooled one.
    let embed_dim = rows.first().map_or(info.embed_dim, Vec::len);
    let bank = Bank::new(&rows);
    let t = Instant::now();
    let bind = binding_on_bank(&dir, &bank, config.trials, config.seed, &config.readouts)?;
    for r in &bind {
        metrics.insert(format!("binding_{}", r.readout.name()), json!(r.accuracy));
    }
    details.insert("binding".into(), json!(binding_summaries(&bind)));
    let sd = samediff_on_bank(&dir, &bank, config.pairs, config.seed)?;
    metrics.insert("same_diff".into(), json!(sd.accuracy));
    details.insert("samediff".into(), json!(SameDiffSummary::from(&sd)));
    timings.insert(
        "binding_samediff_readouts".into(),
        t.elapsed().as_secs_f64(),
    );

    if let Some(selection) = &geo {
        let t = Instant::now();
        let gproc = geometry::folder_processor(&ckpt, config.geometry.preprocess)?;
        let g = geometry::compute(
            &dir,
            model.as_ref(),
            &gproc,
            &selection.samples,
            &config.geometry,
            scenes.output,
            scenes.batch_size,
            device,
        )?;
        for (k, v) in g.flat_metrics() {
            metrics.insert(k, json!(v));
        }
        details.insert("geometry".into(), json!(g));
        timings.insert("geometry".into(), t.elapsed().as_secs_f64());
    }
    timings.insert(
        "total_this_invocation".into(),
        t_all.elapsed().as_secs_f64(),
    );

    let row = Row {
        model: spec,
        label,
        model_type: info.model_type,
        embed_dim,
        num_params: info.num_params,
        hidden_size: info.hidden_size,
        metrics,
        details,
        timings_s: timings,
        run_dir: dir.clone(),
        identity,
    };
    // Through a JSON value: every object's keys in sorted order, as in every run file.
    write_json(&dir.join("row.json"), &serde_json::to_value(&row)?)?;
    println!(
        "\n{} ({}; D = {}, {} parameters)",
        row.label, row.model_type, row.embed_dim, row.num_params
    );
    for (k, v) in &row.metrics {
        println!(
            "  {k:<22} {}",
            v.as_f64()
                .map_or_else(|| v.to_string(), |x| format!("{x:.4}"))
        );
    }
    println!("row: {}", dir.join("row.json").display());
    Ok(row)
}
