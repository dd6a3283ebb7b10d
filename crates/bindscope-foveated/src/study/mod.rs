//! The study as a run: `experiments foveated` maps its flags to a [`Config`] and calls [`run`].
//!
//! - CSB / CSD ([`StudyTask::Csb`], [`StudyTask::Csd`]): scenes ([`crate::dataset`]), features
//!   of one frozen encoder ([`crate::features`]), the readouts and probes of [`crate::probe`],
//!   top-1, counterfactual flip rate and nuisance-to-signal ratio ([`crate::metrics`]);
//! - GQA ([`StudyTask::Gqa`]): the paired colour questions of [`crate::gqa`], accuracy and
//!   paired accuracy;
//! - `dump_only`: the scenes alone, as PNG + JSON, without a model.
//!
//! # Run directory (`runs/foveated/<task>-<model>-<time>/`, or [`Output::dir`])
//! - `config.json`: `identity` (what decides the numbers: task, model and its weights' sha256,
//!   scene generator or GQA pairs, input side, dtype, and the probe recipe — the serialization
//!   of the [`Recipe`] the probes train with), the readouts, probes and seeds, model info, patch
//!   grid, feature-cache path and the provenance of `bindscope_core::run`;
//! - `probes.jsonl`: the resume log, one line per trained (readout, probe, seed);
//! - `results.json`: every metric per (readout, probe) as mean ± std over seeds, extraction and
//!   training wall times, realised scene statistics (GQA: the pair-building report);
//! - `readout-<name>.csv`: one row per (probe, seed) with every metric, per readout;
//! - `summary.csv`, `top1.svg`, `flip.svg`, `nsr.svg`, `curves-<readout>-<probe>.svg` (GQA:
//!   `paired.svg`);
//! - `attention/`: fovea attention maps of the first test scenes (and their first
//!   counterfactual) as PNG; `images/` with [`Config::dump_images`].
//!
//! `config.json` is rewritten by every invocation (what ran last: its readouts, probes and
//! seeds, which `results.json` reports), keeping the first invocation's `created` time.
//!
//! Features live in a cache shared by runs (`runs/foveated/cache/<model>-<sha>/<task>-<hash>/`,
//! or [`Config::cache_dir`]), extracted once per encoder and scene configuration and resumable
//! shard by shard. Running the same configuration again resumes: finished shards and finished
//! probes are kept.

mod gqa_run;
mod plots;
mod report;
mod scenes;

pub use report::{GqaReport, GqaResults, GqaRow, ScenesReport, ScenesResults, ScenesRow, Stat};

use crate::features::{Cache, Features};
use crate::probe::{Data, HeadSpec, TrainConfig, Trained};
use crate::scene::Task;
use crate::split::SplitSizes;
use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::options::Dtype;
use bindscope_core::run::{Output, RunContext, append_jsonl, read_jsonl, runs_root, slug};
use bindscope_core::train::BestSoFar;
use bindscope_data::image::ImageProcessor;
use bindscope_models::VisionEncoder;
use burn::optim::AdamConfig;
use burn::tensor::Device;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which study a run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StudyTask {
    /// Colour–shape binding ([`crate::csb`]).
    Csb,
    /// Small-shape detection ([`crate::csd`]).
    Csd,
    /// Paired colour questions from GQA scene graphs ([`crate::gqa`]).
    Gqa,
}

/// Everything a run of the study is asked to do (the options of `experiments foveated`; where
/// the run writes is the [`Output`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// CSB, CSD or GQA.
    pub task: StudyTask,
    /// Hugging Face id or local checkpoint directory of the encoder (`None` only with
    /// `dump_only`).
    pub model: Option<String>,
    /// Float dtype of the encoder's weights.
    pub dtype: Dtype,
    /// The architecture of a PyTorch pickle without `config.json` (`--arch`,
    /// [`bindscope_core::LoadOptions::arch`]); `None` reads it off the keys.
    #[serde(default)]
    pub arch: Option<String>,
    /// Readouts: `gap`, `summary`, `oracle`, `fovea` (GQA also `oracle-box`; its `fovea` is the
    /// text-conditioned one, also spelled `text-fovea`).
    pub readouts: Vec<String>,
    /// Probes: `linear`, `mlp`.
    pub probes: Vec<String>,
    /// Probe seeds (initialisation, batch order, dropout).
    pub seeds: Vec<u64>,
    /// Seed of the scenes (and of the GQA split).
    pub data_seed: u64,
    /// Base scenes per split (CSB / CSD).
    pub sizes: SplitSizes,
    /// Test scenes (the first ones) whose nuisance variants are encoded; `None`: all.
    pub nuisance_scenes: Option<usize>,
    /// Input side in pixels; `None`: the checkpoint processor's output size (GQA: 384;
    /// `dump_only`: 384).
    pub image_size: Option<usize>,
    /// Anti-aliasing: samples per pixel per axis.
    pub supersample: usize,
    /// Images per encoder forward pass.
    pub batch: usize,
    /// Probe epochs; `None`: the recipe's (30; GQA 50).
    pub epochs: Option<usize>,
    /// Fovea attention maps saved per (readout, probe), from the first test scenes.
    pub attention_maps: usize,
    /// Scenes of every set also written as PNG + JSON to `<run>/images/` (with `dump_only`:
    /// the scenes written, 0 meaning 8).
    pub dump_images: usize,
    /// Only write scene images: no model, no features.
    pub dump_only: bool,
    /// GQA: directory with `train_sceneGraphs.json`, `val_sceneGraphs.json`, `images/<id>.jpg`.
    pub gqa_dir: Option<PathBuf>,
    /// GQA: skip (and count) objects whose box leaves the image instead of stopping.
    pub gqa_lenient: bool,
    /// Feature cache root; `None`: `runs/foveated/cache`.
    pub cache_dir: Option<PathBuf>,
}

/// What a run computed.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Report {
    /// A CSB / CSD run.
    Scenes(ScenesReport),
    /// A GQA run (boxed: its pair-building report makes it the largest).
    Gqa(Box<GqaReport>),
    /// `dump_only`: scenes written.
    Dump {
        /// Where.
        dir: PathBuf,
        /// Scenes written (over every set).
        scenes: usize,
    },
}

impl Report {
    /// The directory the run wrote.
    pub fn dir(&self) -> &Path {
        match self {
            Report::Scenes(r) => &r.dir,
            Report::Gqa(r) => &r.dir,
            Report::Dump { dir, .. } => dir,
        }
    }
}

/// Runs the study `config` asks for into `output` on `ctx`'s device.
///
/// # Errors
/// Invalid options (named by their `experiments foveated` flag), unreadable or unsupported
/// checkpoints, GQA inputs, feature-cache and run-directory errors.
pub fn run(config: &Config, output: &Output, ctx: &RunContext) -> Result<Report> {
    config.check()?;
    match config.task {
        StudyTask::Csb => scenes::run(config, Task::Csb, output, ctx),
        StudyTask::Csd => scenes::run(config, Task::Csd, output, ctx),
        StudyTask::Gqa => gqa_run::run(config, output, ctx).map(|r| Report::Gqa(Box::new(r))),
    }
}

impl Config {
    /// Refuses settings that cannot run or would report nonsense, each error naming its flag
    /// of `experiments foveated`: a zero `--image-size`, `--supersample`, `--batch` or
    /// `--epochs`; CSB / CSD: a zero `--train`, `--val` or `--test`, `--nuisance-scenes`
    /// beyond `--test`; an empty `--seeds`; a value given twice in `--seeds`, `--readouts` or
    /// `--probes` (the summary would count a seed twice). Readout and probe names are checked
    /// per task ([`scenes`], [`gqa_run`]). Runs before any model is opened or file written.
    ///
    /// # Errors
    /// The first bad option, named by its flag.
    pub fn check(&self) -> Result<()> {
        let positive = [
            ("--image-size", self.image_size),
            ("--supersample", Some(self.supersample)),
            ("--batch", Some(self.batch)),
            ("--epochs", self.epochs),
        ];
        for (flag, v) in positive {
            if v == Some(0) {
                bail!("{flag} must be at least 1 (got 0)");
            }
        }
        if self.task != StudyTask::Gqa {
            let sizes = [
                ("--train", self.sizes.train),
                ("--val", self.sizes.val),
                ("--test", self.sizes.test),
            ];
            for (flag, n) in sizes {
                if n == 0 {
                    bail!("{flag} must be at least 1 scene (got 0)");
                }
            }
            if let Some(n) = self.nuisance_scenes
                && n > self.sizes.test
            {
                bail!(
                    "--nuisance-scenes {n} exceeds --test {}: nuisance variants are made of test scenes",
                    self.sizes.test
                );
            }
        }
        if self.seeds.is_empty() {
            bail!("--seeds: at least one seed");
        }
        fn no_repeats<T: PartialEq + std::fmt::Display>(flag: &str, values: &[T]) -> Result<()> {
            for (i, v) in values.iter().enumerate() {
                if values[..i].contains(v) {
                    bail!("{flag}: {v} is given twice");
                }
            }
            Ok(())
        }
        no_repeats("--seeds", &self.seeds)?;
        no_repeats("--readouts", &self.readouts)?;
        no_repeats("--probes", &self.probes)?;
        Ok(())
    }
}

/// The probe recipe of a run: what every probe trains with, and what `config.json` records
/// under `identity.recipe` (this value, serialized).
#[derive(Debug, Clone, Serialize)]
pub struct Recipe {
    /// The training configuration of every probe, each with its own seed
    /// (`TrainConfig { seed, ..train }`).
    pub train: TrainConfig,
    /// The optimizer [`crate::probe::train`] builds from it ([`TrainConfig::optimizer`]).
    pub optimizer: AdamConfig,
    /// The candidate heads of each probe name; the one with the best validation selection
    /// metric is kept (ties keep the earlier).
    pub heads: BTreeMap<String, Vec<HeadSpec>>,
}

impl Recipe {
    /// The recipe around `train`, with `heads` per probe name.
    fn new(train: TrainConfig, heads: BTreeMap<String, Vec<HeadSpec>>) -> Self {
        Self {
            optimizer: train.optimizer(),
            train,
            heads,
        }
    }

    /// The training configuration of the probe with `seed`.
    fn for_seed(&self, seed: u64) -> TrainConfig {
        TrainConfig {
            seed,
            ..self.train.clone()
        }
    }
}

/// Checks that every requested probe has heads.
fn check_probes(heads: &BTreeMap<String, Vec<HeadSpec>>, probes: &[String]) -> Result<()> {
    match probes.iter().find(|p| !heads.contains_key(*p)) {
        Some(p) => bail!("--probes: unknown probe '{p}' (linear, mlp)"),
        None => Ok(()),
    }
}

/// Trains each candidate head with `train` and keeps the best by validation selection metric
/// ([`BestSoFar`]: ties keep the earlier); returns it with every candidate's head and score.
fn best_candidate(
    heads: &[HeadSpec],
    mut train: impl FnMut(HeadSpec) -> Trained,
) -> (HeadSpec, Trained, Vec<(HeadSpec, f64)>) {
    let mut best = BestSoFar::new();
    let mut scores = Vec::new();
    for (i, &head) in heads.iter().enumerate() {
        let t = train(head);
        scores.push((head, t.best_val));
        best.offer(i, t.best_val, (head, t));
    }
    let (_, _, (head, trained)) = best.into_best().expect("at least one candidate head");
    (head, trained, scores)
}

/// `(readout, probe, seed)`: the key of a trained probe.
type ProbeKey = (String, String, u64);

/// A line of the resume log `probes.jsonl`.
trait LogRecord: Serialize + DeserializeOwned {
    /// Its (readout, probe, seed).
    fn key(&self) -> ProbeKey;
}

/// Trains every (readout, probe, seed) of the grid, in that order, that the resume log `log`
/// does not hold yet: `train(readout, probe, seed)` for each, the record appended to the log
/// as soon as it is trained. Returns every record of the log by key.
fn train_grid<R: LogRecord>(
    log: &Path,
    readouts: &[String],
    probes: &[String],
    seeds: &[u64],
    mut train: impl FnMut(&str, &str, u64) -> Result<R>,
) -> Result<BTreeMap<ProbeKey, R>> {
    let mut done: BTreeMap<ProbeKey, R> = read_jsonl::<R>(log, "probe")?
        .into_iter()
        .map(|r| (r.key(), r))
        .collect();
    for readout in readouts {
        for probe in probes {
            for &seed in seeds {
                let key = (readout.clone(), probe.clone(), seed);
                if done.contains_key(&key) {
                    continue;
                }
                eprintln!("  training {readout} + {probe} (seed {seed}) …");
                let rec = train(readout, probe, seed)?;
                append_jsonl(log, &rec)?;
                done.insert(key, rec);
            }
        }
    }
    Ok(done)
}

/// The records of (`readout`, `probe`) in `seeds` order (a seed without one is left out).
fn seed_records<'a, R>(
    done: &'a BTreeMap<ProbeKey, R>,
    readout: &str,
    probe: &str,
    seeds: &[u64],
) -> Vec<&'a R> {
    seeds
        .iter()
        .filter_map(|&s| done.get(&(readout.to_string(), probe.to_string(), s)))
        .collect()
}

/// The encoder of [`Config::model`]: its checkpoint, weights hash, vision tower and processor.
struct Encoder {
    spec: String,
    ckpt: bindscope_core::Checkpoint,
    sha: String,
    model: Box<dyn VisionEncoder>,
    processor: ImageProcessor,
}

/// Opens [`Config::model`] ([`bindscope_models::registry::open_vision`]); a checkpoint without
/// `preprocessor_config.json` is an error (the pixel normalization would be unknown).
fn open_encoder(config: &Config, device: &Device) -> Result<Encoder> {
    let spec = config.model.clone().context("--model is required")?;
    let opened = bindscope_models::registry::open_vision(
        &spec,
        device,
        &bindscope_core::LoadOptions {
            arch: config.arch.clone(),
            ..config.dtype.load_options()
        },
    )
    .with_context(|| format!("loading vision encoder of '{spec}'"))?;
    let ckpt = opened.checkpoint;
    if ckpt.preprocessor_config.is_none() {
        bail!("'{spec}': no preprocessor_config.json, so the pixel normalization is unknown");
    }
    let processor = ImageProcessor::for_checkpoint(&ckpt)?;
    Ok(Encoder {
        spec,
        ckpt,
        sha: opened.weights_sha256,
        model: opened.model,
        processor,
    })
}

/// Opens the feature cache `<cache root>/<model>-<sha12>/<task>-<hash of identity>`.
fn open_cache(
    config: &Config,
    enc: &Encoder,
    task: &str,
    identity: &serde_json::Value,
) -> Result<Cache> {
    let root = config
        .cache_dir
        .clone()
        .unwrap_or_else(|| runs_root("foveated").join("cache"));
    let sha = &enc.sha;
    let dir = root
        .join(format!("{}-{}", slug(&enc.spec), &sha[..12.min(sha.len())]))
        .join(format!("{task}-{}", short_hash(identity)));
    Ok(Cache::open(&dir, identity, 500)?)
}

/// The first 6 bytes of the sha256 of a JSON value's compact text, in hex.
fn short_hash(v: &serde_json::Value) -> String {
    let digest = sha2::Sha256::digest(v.to_string().as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// The run directory of a run named `<task>-<model slug>` with `identity` (serialized).
fn run_dir<T: Serialize>(
    output: &Output,
    task: &str,
    spec: &str,
    identity: &T,
) -> Result<(PathBuf, serde_json::Value)> {
    let identity = serde_json::to_value(identity)?;
    let dir = output.run_dir("foveated", &format!("{task}-{}", slug(spec)), &identity)?;
    Ok((dir, identity))
}

/// Writes `config.json`: `fields` (the identity and what this invocation runs: readouts,
/// probes, seeds, …) with the provenance of `ctx`. Every invocation rewrites it, so it records
/// what ran last (the results are computed for exactly those readouts, probes and seeds); a
/// resumed run keeps the `created` time of its first invocation and records this one as
/// `updated`. The identity cannot change: [`run_dir`] refused another one.
fn write_config(dir: &Path, ctx: &RunContext, fields: serde_json::Value) -> Result<()> {
    let path = dir.join("config.json");
    let mut config = ctx.config_json(fields);
    if path.exists() {
        let old: serde_json::Value = bindscope_core::run::read_json(&path)?;
        if let (Some(created), Some(obj)) = (old.get("created"), config.as_object_mut()) {
            let now = obj.insert("created".into(), created.clone());
            if let Some(now) = now {
                obj.insert("updated".into(), now);
            }
        }
    }
    bindscope_core::run::write_json(&path, &config)?;
    Ok(())
}

/// Mean and sample standard deviation (n − 1) of the finite values; `(NaN, NaN)` when there
/// are none, std 0 for one.
fn mean_std(v: &[f64]) -> (f64, f64) {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let s = if v.len() > 1 {
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
    } else {
        0.0
    };
    (m, s)
}

/// The data a readout computed at extraction trains on: `gap`, `summary`, `oracle` (the mean
/// of the patches under the target's box); any other readout pools the patch tokens.
fn readout_data<'a>(readout: &str, f: &'a Features) -> Data<'a> {
    match readout {
        "gap" => Data::Pooled {
            x: &f.gap,
            dim: f.d,
        },
        "summary" => Data::Pooled {
            x: &f.summary,
            dim: f.e,
        },
        "oracle" => Data::Pooled {
            x: &f.oracle,
            dim: f.d,
        },
        _ => Data::Patches(f),
    }
}

/// An error for an unknown readout of `--task task`, listing `known`.
fn unknown_readout(r: &str, task: &str, known: &[&str]) -> anyhow::Error {
    anyhow!(
        "--readouts: unknown readout '{r}' for --task {task} (choose from {})",
        known.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Selection;

    /// The recorded recipe is the serialization of what the probes train with: the CSB / CSD
    /// recipe is `TrainConfig::synthetic` with the run's epochs and each probe's seed.
    #[test]
    fn the_recorded_recipe_is_the_one_that_trains() {
        let r = scenes::recipe(7);
        assert_eq!(
            r.for_seed(3),
            TrainConfig {
                epochs: 7,
                ..TrainConfig::synthetic(3)
            }
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["train"]["epochs"], 7);
        assert_eq!(v["train"]["batch"], 512);
        assert_eq!(v["train"]["selection"], "top1");
        assert!(v["train"].get("seed").is_none(), "{v}");
        let eps = v["optimizer"]["epsilon"].as_f64().unwrap();
        assert!((eps - 1e-8).abs() < 1e-12, "{v}");
        assert_eq!(v["heads"]["mlp"][0]["hidden"], 128);
        let g = gqa_run::train_config(50, vec![1.0; 10]);
        assert_eq!(g.selection, Selection::AdjacentPairs);
        assert_eq!(
            serde_json::to_value(&g).unwrap()["selection"],
            "adjacent-pairs"
        );
    }

    #[test]
    fn mean_std_leaves_out_non_finite_values() {
        assert_eq!(mean_std(&[1.0, f64::NAN, 3.0]), (2.0, 2f64.sqrt()));
        assert_eq!(mean_std(&[4.0]), (4.0, 0.0));
        assert!(mean_std(&[f64::NAN]).0.is_nan());
    }
}
