//! The runs of the binding study: `experiments binding` and `experiments samediff` (the
//! synthetic shape–position probes of §5.1, App. C, D.5), the scene part of `probe-all`, and
//! in [`geometry`] the natural-image geometry run (§3.1, App. D.3). Correlation across models
//! is [`crate::correlate`].
//!
//! The pieces every run shares are here: which encoder ([`EncoderConfig`]: a checkpoint or a
//! random initialisation, [`materialize_random`]), how scenes are drawn and fed
//! ([`SceneConfig`], [`scene_processor`]), batched embedding ([`embed_images`]), the bank of
//! all 324 scene embeddings with its resume log ([`scene_bank`]), the two tasks on that bank
//! with their CSV outputs ([`binding_on_bank`], [`samediff_on_bank`]) and run directories
//! ([`open_run_dir`]).
//!
//! The encoder embeds every scene of the grammar once (about as many forward passes as the
//! trials use, and the bank the kNN and local-PCA readouts need); trials and pairs then only
//! index that bank.
//!
//! Scene preprocessing: the canvas is rendered at `image_size` (224) and fed at that size after
//! rescaling to [0, 1] and normalizing with ImageNet mean / std ([`Normalize::Imagenet`], the
//! default, as for JER) or with the checkpoint's full `preprocessor_config.json` pipeline
//! ([`Normalize::Model`]: resize / center crop too). Models whose configured size differs
//! (DINOv2: 518) interpolate their position embeddings.
//!
//! A run directory (`runs/<study>/<model>-<timestamp>/`, or `--out`) holds `config.json`
//! (`study`, the run's `identity` — every option that changes a number, the checkpoint sha256 —
//! and the provenance of [`RunContext::config_json`]), `scenes.jsonl` (the embedding cache and
//! resume log: one line per scene) and, at the end, `results.json` and a per-trial CSV.
//! Re-running the same configuration resumes the newest matching run directory.
//!
//! ## Random initialisation
//! [`Encoder::RandomInit`] (`--random-init vit-b16`, or a `config.json` with `model_type` `vit`
//! or `dinov2`) builds the architecture with transformers-style random weights (normal, std
//! 0.02; burn's RNG seeded with the seed), saves it once as a Hugging Face checkpoint directory
//! `<random-init dir>/<name>-seed<N>/` (`config.json` + `model.safetensors`, Hub key names:
//! [`bindscope_models::vit::save_hf`]) and then uses that directory like any checkpoint, so
//! every study (JER included) sees the same weights and the run config records their sha256.
//! The random-init directory is a cache the user chooses ([`EncoderConfig::random_init_dir`]:
//! `--random-init-dir`, or the `BINDSCOPE_RANDOM_INIT_DIR` variable); by default
//! `runs/random-init/` in the current directory. It is not placed under `--out`: one
//! materialisation (about 85 MB for ViT-B/16) serves every run and study of that config and
//! seed.
//!
//! ## Checks before any work
//! Every option is checked before an encoder is embedded and before a run directory exists:
//! the sizes and readouts need no model ([`BindingConfig::check`], [`SceneConfig::check`],
//! [`Readout::check`] against the 324-scene bank), the canvas against the encoder's patch
//! size and a memory lower bound ([`SceneConfig::check_fits`],
//! [`SceneConfig::check_memory`]). Run identities record a local checkpoint or config path
//! as its canonical absolute path ([`bindscope_jer::study::canonical_spec`]), so the same
//! directory given relative and absolute is one configuration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::Checkpoint;
use bindscope_core::options::{Dtype, Normalize};
use bindscope_core::run::{
    Output, Plain, RunContext, progress, read_jsonl, runs_root, slug, write_csv, write_json,
};
use bindscope_data::image::{ImageProcessor, ProcessorKind, RgbImage};
use bindscope_jer::probe::{IMAGENET_MEAN, IMAGENET_STD};
use bindscope_jer::study::{canonical_spec, on_host};
use bindscope_models::registry::{Opened, open_vision};
use bindscope_models::{ModelInfo, VisionEncoder, VisionReadout};
use burn::prelude::*;
use burn::tensor::TensorData;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::readout::{
    Bank, BindingResult, Readout, SameDiffResult, evaluate_binding, evaluate_samediff, kind_name,
};
use crate::scene::{NUM_SCENES, RenderSpec, Scene, render, save_png};
use crate::tasks::{binding_trials, samediff_pairs};

pub mod geometry;
pub mod probe_all;
pub mod zoo;

// ---------------------------------------------------------------------------------------------
// The encoder: a checkpoint or a random initialisation
// ---------------------------------------------------------------------------------------------

/// Which encoder a run probes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoder {
    /// A Hugging Face id or a local checkpoint directory (`--model`).
    Checkpoint(String),
    /// A random initialisation (`--random-init`, `--init-seed`): the preset `vit-b16` or the
    /// path of a `config.json` with `model_type` `vit` or `dinov2`, materialised once under
    /// `runs/random-init/` ([`materialize_random`]).
    RandomInit {
        /// `vit-b16` or a `config.json` path.
        init: String,
        /// Seed of the initialisation.
        seed: u64,
    },
}

/// The encoder of a run and how its weights are loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncoderConfig {
    /// Checkpoint or random initialisation.
    pub source: Encoder,
    /// The float type of the weights (`--dtype`).
    pub dtype: Dtype,
    /// The architecture of a PyTorch pickle without `config.json` (`--arch`,
    /// [`bindscope_core::LoadOptions::arch`]); `None` reads it off the keys.
    #[serde(default)]
    pub arch: Option<String>,
    /// Where random initialisations are materialised (`--random-init-dir`; `None`:
    /// `runs/random-init`). Changes no number.
    #[serde(default)]
    pub random_init_dir: Option<PathBuf>,
}

impl EncoderConfig {
    /// The checkpoint spec to load: the `--model` spec, or the directory of the materialised
    /// random initialisation (built on `device` the first time).
    ///
    /// # Errors
    /// As [`materialize_random`].
    pub fn spec(&self, device: &Device) -> Result<String> {
        match &self.source {
            Encoder::Checkpoint(m) => Ok(m.clone()),
            Encoder::RandomInit { init, seed } => {
                let root = self
                    .random_init_dir
                    .clone()
                    .unwrap_or_else(|| runs_root("random-init"));
                Ok(materialize_random(&root, init, *seed, device)?
                    .display()
                    .to_string())
            }
        }
    }

    /// `--random-init` as given; `None` for a checkpoint.
    pub fn random_init(&self) -> Option<&str> {
        match &self.source {
            Encoder::Checkpoint(_) => None,
            Encoder::RandomInit { init, .. } => Some(init),
        }
    }

    /// The seed of a random initialisation; `None` for a checkpoint.
    pub fn init_seed(&self) -> Option<u64> {
        match &self.source {
            Encoder::Checkpoint(_) => None,
            Encoder::RandomInit { seed, .. } => Some(*seed),
        }
    }

    /// How its weights load: [`EncoderConfig::dtype`] and [`EncoderConfig::arch`].
    pub fn load_options(&self) -> bindscope_core::LoadOptions {
        bindscope_core::LoadOptions {
            arch: self.arch.clone(),
            ..self.dtype.load_options()
        }
    }

    /// Resolves the spec ([`EncoderConfig::spec`]), hashes the weights and loads the vision
    /// encoder on `device` ([`open_vision`]). Returns the spec and the opened model.
    ///
    /// # Errors
    /// As [`EncoderConfig::spec`]; a resolve, hash or load failure naming the spec.
    pub fn open(&self, device: &Device) -> Result<(String, Opened<Box<dyn VisionEncoder>>)> {
        let spec = self.spec(device)?;
        let opened = open_vision(&spec, device, &self.load_options())
            .with_context(|| format!("loading vision encoder of '{spec}'"))?;
        Ok((spec, opened))
    }
}

/// `--random-init` as a run identity records it: the preset as given, a `config.json` path
/// canonical (the same file given relative and absolute is one configuration).
pub fn canonical_init(init: &str) -> String {
    if init != RANDOM_INIT_PRESET
        && let Ok(c) = Path::new(init).canonicalize()
    {
        return c.display().to_string();
    }
    init.to_string()
}

/// The preset of [`Encoder::RandomInit`]: ViT-B/16 at 224 with a pooler
/// ([`bindscope_models::vit::ViTConfig::vit_b16`]).
pub const RANDOM_INIT_PRESET: &str = "vit-b16";

/// The standard deviation of every random-init draw (transformers' `initializer_range`).
const INIT_STD: f64 = bindscope_models::vit::INITIALIZER_RANGE;

/// Builds (once) the random-init checkpoint directory `<root>/<name>-seed<seed>` and returns
/// it: `name` is `vit-b16` for the preset, `<slug of the config's folder>-random` for a
/// `config.json` path. The weights: the constructor's initializer `normal(0, 0.02)`, then every
/// rank ≥ 2 parameter redrawn `normal(0, 0.02)` in module order after `Device::seed(seed)`
/// ([`bindscope_models::randomize`]; rank-1 parameters — biases, norms — as the constructor
/// set them). The directory's `config.json` is the model's config with a
/// `bindscope_random_init` record (seed, scheme, source).
///
/// The tensors are a deterministic function of the config and the seed (the constructor's
/// biases are drawn lazily, from the seeded stream, when the model is saved:
/// [`bindscope_models::vit::ViTModel::init_seeded`]); the safetensors header's metadata order
/// (hence the file's sha256) may differ between materialisations, which is why a directory is
/// built once and reused.
///
/// # Errors
/// An unreadable or invalid config, an unsupported `model_type` (vit, dinov2), or a failed
/// write.
pub fn materialize_random(root: &Path, what: &str, seed: u64, device: &Device) -> Result<PathBuf> {
    let (name, config_text) = if what == RANDOM_INIT_PRESET {
        (
            RANDOM_INIT_PRESET.to_string(),
            bindscope_models::vit::ViTConfig::vit_b16()
                .to_hf_json()
                .to_string(),
        )
    } else {
        let p = Path::new(what);
        let text = std::fs::read_to_string(p).with_context(|| {
            format!("--random-init {what}: not a preset (vit-b16) and not a readable config.json")
        })?;
        let stem = p
            .parent()
            .and_then(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "custom".into());
        (format!("{}-random", slug(&stem)), text)
    };
    let cfg: serde_json::Value = serde_json::from_str(&config_text)
        .with_context(|| format!("--random-init {what}: invalid config JSON"))?;
    let mt = cfg.get("model_type").and_then(|m| m.as_str()).unwrap_or("");
    if !matches!(mt, "vit" | "dinov2") {
        bail!("--random-init {what}: model_type '{mt}' is not supported (vit, dinov2)");
    }
    // A directory built from another config with the same name (two `m/config.json` of
    // different sizes) is not reused: this config then gets a name with its hash.
    let mut dir = root.join(format!("{name}-seed{seed}"));
    if holds_another_config(&dir, &cfg)? {
        let hash = bindscope_core::train::Fingerprint::new().json(&cfg).hex();
        dir = root.join(format!("{name}-{}-seed{seed}", &hash[..8]));
    }
    if dir.join("model.safetensors").is_file() && !holds_another_config(&dir, &cfg)? {
        return Ok(dir);
    }
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.with_file_name(format!(".{dir_name}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let built = build_random(&cfg, mt, what, &name, seed, &tmp, &dir, device);
    if built.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    built?;
    std::fs::rename(&tmp, &dir)
        .with_context(|| format!("moving {} to {}", tmp.display(), dir.display()))?;
    Ok(dir)
}

/// Whether `dir` holds a materialised initialisation of a config other than `cfg` (its
/// `config.json` without the `bindscope_random_init` record differs).
fn holds_another_config(dir: &Path, cfg: &serde_json::Value) -> Result<bool> {
    let path = dir.join("config.json");
    if !path.is_file() {
        return Ok(false);
    }
    let mut there: serde_json::Value = bindscope_core::run::read_json(&path)?;
    if let Some(o) = there.as_object_mut() {
        o.remove("bindscope_random_init");
    }
    Ok(&there != cfg)
}

/// Builds the random initialisation of `cfg` (`model_type` `mt`) into the temporary
/// directory `tmp`: `model.safetensors` and `config.json`.
#[allow(clippy::too_many_arguments)]
fn build_random(
    cfg: &serde_json::Value,
    mt: &str,
    what: &str,
    name: &str,
    seed: u64,
    tmp: &Path,
    dir: &Path,
    device: &Device,
) -> Result<()> {
    let weights = tmp.join("model.safetensors");
    eprintln!(
        "random-init: building {name} (model_type {mt}, seed {seed}) → {}",
        dir.display()
    );
    let init = burn::nn::Initializer::Normal {
        mean: 0.0,
        std: INIT_STD,
    };
    let saved = match mt {
        "vit" => {
            let c: bindscope_models::vit::ViTConfig = serde_json::from_value(cfg.clone())?;
            bindscope_models::vit::ViTModel::init_seeded(&c, &init, INIT_STD, seed, device)?
                .save_hf(&weights)
        }
        "dinov2" => {
            let c: bindscope_models::dinov2::Dinov2Config = serde_json::from_value(cfg.clone())?;
            let m = bindscope_models::dinov2::Dinov2Model::init_random(&c, device)?;
            bindscope_models::vit::save_hf(
                &bindscope_models::randomize(m, INIT_STD, seed),
                &weights,
            )
        }
        other => unreachable!("model_type '{other}' was checked before building"),
    };
    saved.map_err(|e| anyhow!("saving {}: {e:?}", weights.display()))?;
    let mut cfg = cfg.clone();
    cfg["bindscope_random_init"] = json!({ "seed": seed, "init": "every weight matrix and embedding normal(0, 0.02) drawn in module order after Device::seed(seed) (bindscope_models::randomize); rank-1 parameters as the constructor sets them", "source": what });
    write_json(&tmp.join("config.json"), &cfg)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Scenes and their embeddings
// ---------------------------------------------------------------------------------------------

/// How scenes are drawn and fed to the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SceneConfig {
    /// Canvas side in pixels (`--image-size`; square canvas).
    pub image_size: usize,
    /// `n × n` supersampling per pixel (1 = no anti-aliasing).
    pub antialias: usize,
    /// ImageNet mean / std (no resize) or the checkpoint's preprocessor pipeline.
    pub normalize: Normalize,
    /// Which embedding.
    pub output: VisionReadout,
    /// Images per forward pass.
    pub batch_size: usize,
}

impl SceneConfig {
    /// How the scenes are rendered.
    pub fn render_spec(&self) -> RenderSpec {
        RenderSpec {
            image_size: self.image_size,
            antialias: self.antialias,
        }
    }

    /// Refuses a canvas smaller than one patch of the model `info` describes (`spec`): scenes
    /// are fed at their canvas size unless the checkpoint's processor resizes them.
    ///
    /// # Errors
    /// The canvas is smaller than a patch.
    pub fn check_fits(&self, info: &ModelInfo, spec: &str) -> Result<()> {
        if self.normalize == Normalize::Imagenet
            && !info.holds_a_patch([self.image_size, self.image_size])
        {
            bail!(
                "--image-size {} is smaller than one {p}×{p} patch of '{spec}'",
                self.image_size,
                p = info.patch_size
            );
        }
        Ok(())
    }

    /// Refuses a canvas and batch whose rendering and forward pass cannot fit in memory (lower
    /// bounds, [`bindscope_jer::memory`]): the rendered batch always, the forward pass at the
    /// canvas size under [`Normalize::Imagenet`] when the device computes in host memory
    /// (`on_host`).
    ///
    /// # Errors
    /// The lower bound exceeds the available memory (naming `--image-size`, `--batch-size`).
    pub fn check_memory(&self, model: &dyn VisionEncoder, spec: &str, on_host: bool) -> Result<()> {
        use bindscope_jer::memory;
        let s = self.image_size;
        let mut needed = memory::render_bytes(s, self.batch_size);
        if on_host && self.normalize == Normalize::Imagenet {
            needed +=
                memory::forward_bytes(&memory::EncoderShape::of(model), [s, s], self.batch_size);
        }
        memory::ensure_fits(
            needed,
            memory::available_bytes(),
            &format!(
                "--image-size {s} with --batch-size {} on '{spec}'",
                self.batch_size
            ),
            "reduce --image-size or --batch-size",
        )
    }

    /// Checks the sizes.
    ///
    /// # Errors
    /// An image size below 6 pixels, or antialias or batch size 0 (named by their flags).
    pub fn check(&self) -> Result<()> {
        if self.image_size < 6 {
            bail!(
                "--image-size {}: scenes need at least 6 pixels a side",
                self.image_size
            );
        }
        if self.antialias == 0 {
            bail!("--antialias must be at least 1 (1 = no anti-aliasing)");
        }
        if self.batch_size == 0 {
            bail!("--batch-size must be at least 1");
        }
        Ok(())
    }
}

/// The processor that turns a rendered scene into pixel values: rescale and ImageNet mean /
/// std at the rendered size, or ([`Normalize::Model`]) the checkpoint's own
/// ([`ImageProcessor::for_checkpoint`]).
///
/// # Errors
/// As [`ImageProcessor::for_checkpoint`] (no or a bad `preprocessor_config.json`), under
/// `--normalize model`.
pub fn scene_processor(ckpt: &Checkpoint, normalize: Normalize) -> Result<ImageProcessor> {
    match normalize {
        Normalize::Model => ImageProcessor::for_checkpoint(ckpt).context("--normalize model"),
        Normalize::Imagenet => Ok(ImageProcessor {
            do_resize: false,
            do_center_crop: false,
            image_mean: IMAGENET_MEAN,
            image_std: IMAGENET_STD,
            ..ImageProcessor::defaults(ProcessorKind::Bit)
        }),
    }
}

/// Embeds decoded images (`[H, W, 3]` u8) in one forward pass: `[N][D]` f32.
///
/// # Errors
/// A preprocessing failure, or a device failure reading the embeddings back (out of memory:
/// the message names `--batch-size`).
pub fn embed_images(
    model: &dyn VisionEncoder,
    proc: &ImageProcessor,
    imgs: &[RgbImage],
    output: VisionReadout,
    device: &Device,
) -> Result<Vec<Vec<f32>>> {
    let batch = proc.preprocess_batch(imgs)?;
    let [n, c, h, w] = batch.shape;
    let x = Tensor::<4>::from_data(TensorData::new(batch.data, [n, c, h, w]), device);
    let e = model.embed(x, output);
    let d = e.dims()[1];
    let v = bindscope_core::device::to_host_f32(e)
        .with_context(|| format!("embedding a batch of {n} images (--batch-size)"))?;
    Ok(v.chunks(d).map(<[f32]>::to_vec).collect())
}

/// One line of `scenes.jsonl`.
#[derive(Serialize, Deserialize)]
struct SceneLine {
    scene: usize,
    name: String,
    embedding: Vec<f32>,
}

/// Embeddings of all 324 scenes (row = scene id), computed once and cached in `cache`, one
/// line per scene, appended one batch at a time (resumable).
///
/// # Errors
/// A bad cache line, an embedding failure, or a non-finite embedding (naming the scene).
pub fn scene_bank(
    model: &dyn VisionEncoder,
    proc: &ImageProcessor,
    scenes: &SceneConfig,
    cache: &Path,
    device: &Device,
) -> Result<Vec<Vec<f32>>> {
    let spec = scenes.render_spec();
    let mut have: BTreeMap<usize, Vec<f32>> = BTreeMap::new();
    for l in read_jsonl::<SceneLine>(cache, "scene-embedding")? {
        have.insert(l.scene, l.embedding);
    }
    let todo: Vec<usize> = (0..NUM_SCENES).filter(|i| !have.contains_key(i)).collect();
    if !todo.is_empty() {
        let pb = progress(NUM_SCENES as u64, "scenes");
        pb.set_position(have.len() as u64);
        for chunk in todo.chunks(scenes.batch_size) {
            let imgs: Vec<_> = chunk
                .iter()
                .map(|&i| render(&Scene::from_id(i), &spec))
                .collect();
            let rows = embed_images(model, proc, &imgs, scenes.output, device)?;
            let mut text = String::new();
            for (&i, e) in chunk.iter().zip(&rows) {
                text.push_str(&serde_json::to_string(&SceneLine {
                    scene: i,
                    name: Scene::from_id(i).name(),
                    embedding: e.clone(),
                })?);
                text.push('\n');
            }
            // One write per batch: a crash leaves whole lines (a cut last line is dropped on resume).
            bindscope_core::fsutil::append_line(cache, text.trim_end_matches('\n'))?;
            for (&i, e) in chunk.iter().zip(rows) {
                have.insert(i, e);
            }
            pb.inc(chunk.len() as u64);
        }
        pb.finish_and_clear();
    }
    let rows: Vec<Vec<f32>> = (0..NUM_SCENES)
        .map(|i| have.remove(&i).expect("all scenes embedded"))
        .collect();
    if let Some(bad) = rows.iter().position(|r| r.iter().any(|v| !v.is_finite())) {
        bail!(
            "scene {bad} ({}) has a non-finite embedding",
            Scene::from_id(bad).name()
        );
    }
    Ok(rows)
}

/// Writes every scene of the grammar as `<id>_<name>.png` into `dir` (`--dump-images`).
///
/// # Errors
/// A directory or file that cannot be written.
pub fn dump_scenes(dir: &Path, spec: &RenderSpec) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for id in 0..NUM_SCENES {
        let s = Scene::from_id(id);
        save_png(
            &render(&s, spec),
            &dir.join(format!("{id:03}_{}.png", s.name())),
        )
        .map_err(|e| anyhow!(e))?;
    }
    eprintln!("wrote {NUM_SCENES} scene PNGs to {}", dir.display());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Run directories
// ---------------------------------------------------------------------------------------------

/// The run directory of a run of `study` on the encoder `spec` with `identity` (resumed,
/// refused or new: [`Output::run_dir`]), with its `config.json` written unless it has one:
/// `study`, `identity`, the fields of `extra` (a JSON object) and the provenance of
/// [`RunContext::config_json`].
///
/// # Errors
/// As [`Output::run_dir`]; a `config.json` that cannot be written.
pub fn open_run_dir<I: Serialize>(
    output: &Output,
    study: &str,
    spec: &str,
    identity: &I,
    extra: serde_json::Value,
    ctx: &RunContext,
) -> Result<PathBuf> {
    let identity = serde_json::to_value(identity)?;
    let dir = output.run_dir(study, &slug(spec), &identity)?;
    let path = dir.join("config.json");
    if !path.exists() {
        let mut fields = json!({ "study": study, "identity": identity });
        if let (Some(o), Some(e)) = (fields.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        write_json(&path, &ctx.config_json(fields))?;
    }
    Ok(dir)
}

/// The identity of a scene bank: everything its embeddings depend on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BankIdentity {
    /// The checkpoint spec ([`EncoderConfig::spec`]).
    pub model: String,
    /// sha256 of its weights.
    pub weights_sha256: String,
    /// `--random-init` as given.
    pub random_init: Option<String>,
    /// Its seed (`None` for a checkpoint).
    pub init_seed: Option<u64>,
    /// Weight dtype.
    pub dtype: Dtype,
    /// Canvas side.
    pub image_size: usize,
    /// Supersampling.
    pub antialias: usize,
    /// Normalization.
    pub normalize: Normalize,
    /// Which embedding.
    pub output: VisionReadout,
}

impl BankIdentity {
    /// The bank of `encoder` (opened as `spec`, weights `sha`) on `scenes`. Local paths (the
    /// checkpoint directory, a `--random-init` config) are recorded canonical.
    pub fn new(spec: &str, sha: &str, encoder: &EncoderConfig, scenes: &SceneConfig) -> Self {
        Self {
            model: canonical_spec(spec),
            weights_sha256: sha.to_string(),
            random_init: encoder.random_init().map(canonical_init),
            init_seed: encoder.init_seed(),
            dtype: encoder.dtype,
            image_size: scenes.image_size,
            antialias: scenes.antialias,
            normalize: scenes.normalize,
            output: scenes.output,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The tasks on a bank
// ---------------------------------------------------------------------------------------------

/// Runs the seeded binding trials with every readout on `bank`; writes `binding_trials.csv`
/// (one row per trial and readout) into `dir` and returns the results in readout order.
///
/// # Errors
/// A readout that cannot be fitted (e.g. more neighbours than scenes), or the write.
pub fn binding_on_bank(
    dir: &Path,
    bank: &Bank,
    trials: usize,
    seed: u64,
    readouts: &[Readout],
) -> Result<Vec<BindingResult>> {
    let trials = binding_trials(seed, trials);
    let mut out = Vec::new();
    let mut rows = Vec::new();
    for r in readouts {
        let res = evaluate_binding(bank, &trials, *r).map_err(|e| anyhow!(e))?;
        for (t, o) in trials.iter().zip(&res.outcomes) {
            let [cand0, cand1, cand2, cand3] =
                t.candidates.each_ref().map(|c| c.name().to_string());
            let [kind0, kind1, kind2, kind3] = t.kinds.map(kind_name);
            let [score0, score1, score2, score3] = [0, 1, 2, 3].map(|i| Plain(o.scores[i].0));
            rows.push(TrialRow {
                trial: t.index,
                readout: r.name().to_string(),
                query: t.query.name().to_string(),
                cand0,
                cand1,
                cand2,
                cand3,
                kind0,
                kind1,
                kind2,
                kind3,
                target: t.target_index(),
                chosen: o.chosen,
                chosen_kind: kind_name(o.chosen_kind),
                correct: u8::from(o.chosen == t.target_index()),
                score0,
                score1,
                score2,
                score3,
            });
        }
        out.push(res);
    }
    write_csv(&dir.join("binding_trials.csv"), &rows)?;
    Ok(out)
}

/// Runs the seeded same/different pairs on `bank`; writes `samediff_pairs.csv` (one row per
/// pair) and `samediff_sweep.csv` (accuracy at every candidate threshold) into `dir`.
///
/// # Errors
/// Fewer than 2 pairs, or a write.
pub fn samediff_on_bank(
    dir: &Path,
    bank: &Bank,
    pairs: usize,
    seed: u64,
) -> Result<SameDiffResult> {
    if pairs < 2 {
        bail!("--pairs must be at least 2");
    }
    let pairs = samediff_pairs(seed, pairs);
    let res = evaluate_samediff(bank, &pairs);
    let mut rows = Vec::new();
    for (p, d) in pairs.iter().zip(&res.distances) {
        let pred = *d <= res.threshold;
        rows.push(PairRow {
            pair: p.index,
            kind: serde_json::to_value(p.kind)?
                .as_str()
                .unwrap_or("?")
                .to_string(),
            a: p.a.name().to_string(),
            b: p.b.name().to_string(),
            cosine_distance: Plain(*d),
            predicted_same: u8::from(pred),
            correct: u8::from(pred == p.kind.is_same()),
        });
    }
    write_csv(&dir.join("samediff_pairs.csv"), &rows)?;
    let sweep: Vec<SweepRow> = res
        .sweep
        .iter()
        .map(|&(p, t, a)| SweepRow {
            percentile: Plain(p),
            threshold: Plain(t),
            accuracy: Plain(a),
        })
        .collect();
    write_csv(&dir.join("samediff_sweep.csv"), &sweep)?;
    Ok(res)
}

/// A row of `binding_trials.csv`: one trial under one readout.
#[derive(Serialize)]
struct TrialRow {
    trial: usize,
    readout: String,
    query: String,
    cand0: String,
    cand1: String,
    cand2: String,
    cand3: String,
    kind0: &'static str,
    kind1: &'static str,
    kind2: &'static str,
    kind3: &'static str,
    target: usize,
    chosen: usize,
    chosen_kind: &'static str,
    correct: u8,
    score0: Plain,
    score1: Plain,
    score2: Plain,
    score3: Plain,
}

/// A row of `samediff_pairs.csv`.
#[derive(Serialize)]
struct PairRow {
    pair: usize,
    kind: String,
    a: String,
    b: String,
    cosine_distance: Plain,
    predicted_same: u8,
    correct: u8,
}

/// A row of `samediff_sweep.csv`.
#[derive(Serialize)]
struct SweepRow {
    percentile: Plain,
    threshold: Plain,
    accuracy: Plain,
}

/// A binding result as `results.json` and `row.json` record it (the per-trial outcomes are in
/// the CSV).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BindingSummary {
    /// The readout and its hyper-parameters.
    pub readout: Readout,
    /// Its short name ([`Readout::name`]).
    pub name: &'static str,
    /// Number of trials.
    pub trials: usize,
    /// Fraction of trials the target won.
    pub accuracy: f64,
    /// Fraction of trials each candidate kind won (`target`, `d1`, `d2`, `d3`).
    pub chosen_fraction: BTreeMap<String, f64>,
}

impl From<&BindingResult> for BindingSummary {
    fn from(r: &BindingResult) -> Self {
        Self {
            readout: r.readout,
            name: r.readout.name(),
            trials: r.trials,
            accuracy: r.accuracy,
            chosen_fraction: r.chosen_fraction.clone(),
        }
    }
}

/// The summaries of binding results, in order.
pub fn binding_summaries(results: &[BindingResult]) -> Vec<BindingSummary> {
    results.iter().map(BindingSummary::from).collect()
}

/// One candidate threshold of the same/different sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SweepPoint {
    /// Percentile (0, 5, …, 100) of the distances.
    pub percentile: f64,
    /// The threshold (cosine distance).
    pub threshold: f64,
    /// Accuracy with it.
    pub accuracy: f64,
}

/// A same/different result as `results.json` and `row.json` record it (the distances are in
/// the CSV).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SameDiffSummary {
    /// Number of pairs.
    pub pairs: usize,
    /// Accuracy at the best threshold.
    pub accuracy: f64,
    /// The percentile that gave it.
    pub best_percentile: f64,
    /// The threshold: "same" iff cosine distance ≤ threshold.
    pub threshold: f64,
    /// Mean cosine distance of the same pairs.
    pub mean_distance_same: f64,
    /// Mean cosine distance of the different pairs.
    pub mean_distance_different: f64,
    /// Every candidate threshold.
    pub sweep: Vec<SweepPoint>,
}

impl From<&SameDiffResult> for SameDiffSummary {
    fn from(r: &SameDiffResult) -> Self {
        Self {
            pairs: r.pairs,
            accuracy: r.accuracy,
            best_percentile: r.best_percentile,
            threshold: r.threshold,
            mean_distance_same: r.mean_distance_same,
            mean_distance_different: r.mean_distance_different,
            sweep: r
                .sweep
                .iter()
                .map(|&(percentile, threshold, accuracy)| SweepPoint {
                    percentile,
                    threshold,
                    accuracy,
                })
                .collect(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `experiments binding` and `experiments samediff`
// ---------------------------------------------------------------------------------------------

/// The configuration of a binding run (`experiments binding`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BindingConfig {
    /// The encoder.
    pub encoder: EncoderConfig,
    /// How scenes are drawn and fed.
    pub scenes: SceneConfig,
    /// Number of trials.
    pub trials: usize,
    /// Seed of the trials.
    pub seed: u64,
    /// The readouts, in order.
    pub readouts: Vec<Readout>,
    /// Write every scene as PNG into this directory (changes no number).
    pub dump_images: Option<PathBuf>,
}

impl BindingConfig {
    /// Checks the sizes (the scenes, the trials), naming the flags.
    ///
    /// # Errors
    /// As [`SceneConfig::check`]; no trial.
    pub fn check_sizes(&self) -> Result<()> {
        self.scenes.check()?;
        if self.trials == 0 {
            bail!("--trials must be at least 1");
        }
        Ok(())
    }

    /// Checks every option that needs no model, naming the flags.
    ///
    /// # Errors
    /// As [`BindingConfig::check_sizes`] and [`check_readouts`].
    pub fn check(&self) -> Result<()> {
        self.check_sizes()?;
        check_readouts(&self.readouts)
    }
}

/// Checks readouts against the 324-scene bank ([`Readout::check`]) and refuses one given
/// twice (it would be computed twice and reported as two rows).
///
/// # Errors
/// No readout, a repeated readout, or a hyper-parameter that does not fit the bank.
pub fn check_readouts(readouts: &[Readout]) -> Result<()> {
    if readouts.is_empty() {
        bail!("--readouts: no readout given (cosine, knn, local-pca)");
    }
    for (i, r) in readouts.iter().enumerate() {
        if readouts[..i].iter().any(|q| q.name() == r.name()) {
            bail!("--readouts: {} is given twice", r.name());
        }
        r.check(NUM_SCENES).map_err(|e| anyhow!(e))?;
    }
    Ok(())
}

/// The identity of a binding run: what its numbers depend on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BindingIdentity {
    /// The scene bank.
    #[serde(flatten)]
    pub bank: BankIdentity,
    /// Number of trials.
    pub trials: usize,
    /// Seed of the trials.
    pub seed: u64,
    /// The readouts.
    pub readouts: Vec<Readout>,
}

/// What a binding run computed.
#[derive(Debug, Clone, Serialize)]
pub struct BindingReport {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The checkpoint spec.
    pub model: String,
    /// The encoder's facts.
    pub model_info: ModelInfo,
    /// One summary per readout.
    pub binding: Vec<BindingSummary>,
}

/// The encoder opened for a scene-bank run, its scene processor, and `--dump-images` done.
struct BankRun {
    spec: String,
    opened: Opened<Box<dyn VisionEncoder>>,
    proc: ImageProcessor,
}

impl BankRun {
    fn open(
        encoder: &EncoderConfig,
        scenes: &SceneConfig,
        dump_images: Option<&Path>,
        ctx: &RunContext,
    ) -> Result<Self> {
        let (spec, opened) = encoder.open(&ctx.device)?;
        scenes.check_fits(&opened.model.info(), &spec)?;
        scenes.check_memory(opened.model.as_ref(), &spec, on_host(ctx))?;
        let proc = scene_processor(&opened.checkpoint, scenes.normalize)?;
        if let Some(d) = dump_images {
            dump_scenes(d, &scenes.render_spec())?;
        }
        Ok(Self { spec, opened, proc })
    }

    fn identity(&self, encoder: &EncoderConfig, scenes: &SceneConfig) -> BankIdentity {
        BankIdentity::new(&self.spec, &self.opened.weights_sha256, encoder, scenes)
    }

    /// The bank of scene embeddings, cached in `dir/scenes.jsonl`.
    fn bank(&self, scenes: &SceneConfig, dir: &Path, device: &Device) -> Result<Vec<Vec<f32>>> {
        scene_bank(
            self.opened.model.as_ref(),
            &self.proc,
            scenes,
            &dir.join("scenes.jsonl"),
            device,
        )
    }
}

/// `experiments binding`: embeds the scene bank and runs the binding trials with every readout.
/// Writes `config.json`, `scenes.jsonl`, `binding_trials.csv`, `results.json`; prints one line
/// per readout.
///
/// # Errors
/// As [`BindingConfig::check`], [`EncoderConfig::open`], [`scene_processor`],
/// [`open_run_dir`], [`scene_bank`], [`binding_on_bank`].
pub fn run_binding(
    config: &BindingConfig,
    output: &Output,
    ctx: &RunContext,
) -> Result<BindingReport> {
    config.check()?;
    let device = &ctx.device;
    let run = BankRun::open(
        &config.encoder,
        &config.scenes,
        config.dump_images.as_deref(),
        ctx,
    )?;
    let spec = &run.spec;
    let identity = BindingIdentity {
        bank: run.identity(&config.encoder, &config.scenes),
        trials: config.trials,
        seed: config.seed,
        readouts: config.readouts.clone(),
    };
    let dir = open_run_dir(output, "binding", spec, &identity, json!({}), ctx)?;
    eprintln!("binding: {spec} → {}", dir.display());
    let rows = run.bank(&config.scenes, &dir, device)?;
    let results = binding_on_bank(
        &dir,
        &Bank::new(&rows),
        config.trials,
        config.seed,
        &config.readouts,
    )?;
    let report = BindingReport {
        run_dir: dir.clone(),
        model: spec.clone(),
        model_info: run.opened.model.info(),
        binding: binding_summaries(&results),
    };
    write_json(
        &dir.join("results.json"),
        &json!({ "model": report.model, "model_info": report.model_info, "binding": report.binding }),
    )?;
    for r in &results {
        println!(
            "{spec}: binding accuracy ({}) = {:.3}  [chance 0.25; chosen: target {:.3}, D1 {:.3}, D2 {:.3}, D3 {:.3}]",
            r.readout.name(),
            r.accuracy,
            r.chosen_fraction["target"],
            r.chosen_fraction["d1"],
            r.chosen_fraction["d2"],
            r.chosen_fraction["d3"]
        );
    }
    println!("results: {}", dir.display());
    Ok(report)
}

/// The configuration of a same/different run (`experiments samediff`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SameDiffConfig {
    /// The encoder.
    pub encoder: EncoderConfig,
    /// How scenes are drawn and fed.
    pub scenes: SceneConfig,
    /// Number of pairs (half same, half different).
    pub pairs: usize,
    /// Seed of the pairs.
    pub seed: u64,
    /// Write every scene as PNG into this directory (changes no number).
    pub dump_images: Option<PathBuf>,
}

impl SameDiffConfig {
    /// Checks the sizes.
    ///
    /// # Errors
    /// As [`SceneConfig::check`]; fewer than 2 pairs.
    pub fn check(&self) -> Result<()> {
        self.scenes.check()?;
        if self.pairs < 2 {
            bail!("--pairs must be at least 2");
        }
        Ok(())
    }
}

/// The identity of a same/different run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SameDiffIdentity {
    /// The scene bank.
    #[serde(flatten)]
    pub bank: BankIdentity,
    /// Number of pairs.
    pub pairs: usize,
    /// Seed of the pairs.
    pub seed: u64,
}

/// What a same/different run computed.
#[derive(Debug, Clone, Serialize)]
pub struct SameDiffReport {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The checkpoint spec.
    pub model: String,
    /// The encoder's facts.
    pub model_info: ModelInfo,
    /// The result.
    pub samediff: SameDiffSummary,
}

/// `experiments samediff`: embeds the scene bank and scores the same/different pairs. Writes
/// `config.json`, `scenes.jsonl`, `samediff_pairs.csv`, `samediff_sweep.csv`, `results.json`;
/// prints the accuracy.
///
/// # Errors
/// As [`SameDiffConfig::check`], [`EncoderConfig::open`], [`scene_processor`],
/// [`open_run_dir`], [`scene_bank`], [`samediff_on_bank`].
pub fn run_samediff(
    config: &SameDiffConfig,
    output: &Output,
    ctx: &RunContext,
) -> Result<SameDiffReport> {
    config.check()?;
    let device = &ctx.device;
    let run = BankRun::open(
        &config.encoder,
        &config.scenes,
        config.dump_images.as_deref(),
        ctx,
    )?;
    let spec = &run.spec;
    let identity = SameDiffIdentity {
        bank: run.identity(&config.encoder, &config.scenes),
        pairs: config.pairs,
        seed: config.seed,
    };
    let dir = open_run_dir(output, "samediff", spec, &identity, json!({}), ctx)?;
    eprintln!("samediff: {spec} → {}", dir.display());
    let rows = run.bank(&config.scenes, &dir, device)?;
    let res = samediff_on_bank(&dir, &Bank::new(&rows), config.pairs, config.seed)?;
    let report = SameDiffReport {
        run_dir: dir.clone(),
        model: spec.clone(),
        model_info: run.opened.model.info(),
        samediff: SameDiffSummary::from(&res),
    };
    write_json(
        &dir.join("results.json"),
        &json!({ "model": report.model, "model_info": report.model_info, "samediff": report.samediff }),
    )?;
    println!(
        "{spec}: same/different accuracy = {:.3} at the {}th percentile of cosine distance (threshold {:.4}; chance 0.5)  [{}]",
        res.accuracy,
        res.best_percentile,
        res.threshold,
        dir.display()
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readout::threshold_accuracy;

    /// Two configs in folders of the same name (`a/m`, `b/m`) are materialised apart; the same
    /// config again reuses its directory; an unsupported `model_type` leaves nothing behind.
    #[test]
    fn random_inits_of_different_configs_never_share_a_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/jer");
        let base: serde_json::Value = bindscope_core::run::read_json(&fixture.join("config.json"))
            .expect("the JER fixture config");
        let mut one_layer = base.clone();
        one_layer["num_hidden_layers"] = 1.into();
        let mut bert = base.clone();
        bert["model_type"] = "bert".into();
        let write = |sub: &str, cfg: &serde_json::Value| {
            let d = tmp.path().join(sub);
            std::fs::create_dir_all(&d).unwrap();
            let p = d.join("config.json");
            std::fs::write(&p, cfg.to_string()).unwrap();
            p.display().to_string()
        };
        let (a, b, c) = (
            write("a/m", &base),
            write("b/m", &one_layer),
            write("c/m", &bert),
        );
        let root = tmp.path().join("runs");
        let device = bindscope_core::device::test_device();
        let da = materialize_random(&root, &a, 0, &device).unwrap();
        let db = materialize_random(&root, &b, 0, &device).unwrap();
        assert_ne!(da, db, "another config must not reuse {}", da.display());
        assert_eq!(materialize_random(&root, &b, 0, &device).unwrap(), db);
        assert_eq!(materialize_random(&root, &a, 0, &device).unwrap(), da);
        let err = materialize_random(&root, &c, 0, &device)
            .unwrap_err()
            .to_string();
        assert!(err.contains("model_type 'bert' is not supported"), "{err}");
        let left: Vec<_> = std::fs::read_dir(&root).unwrap().collect();
        assert_eq!(left.len(), 2, "no temporary directory left: {left:?}");
    }

    fn scenes() -> SceneConfig {
        SceneConfig {
            image_size: 48,
            antialias: 1,
            normalize: Normalize::Imagenet,
            output: VisionReadout::Pooled,
            batch_size: 16,
        }
    }

    /// The identities serialize to the keys earlier run directories recorded, so those runs
    /// still resume.
    #[test]
    fn identities_keep_the_recorded_keys() {
        let random = EncoderConfig {
            source: Encoder::RandomInit {
                init: "vit-b16".into(),
                seed: 3,
            },
            dtype: Dtype::F32,
            arch: None,
            random_init_dir: None,
        };
        let id = BindingIdentity {
            bank: BankIdentity::new("m", "abc", &random, &scenes()),
            trials: 40,
            seed: 42,
            readouts: Readout::paper().to_vec(),
        };
        let want = json!({
            "model": "m", "weights_sha256": "abc", "random_init": "vit-b16", "init_seed": 3,
            "dtype": "f32", "image_size": 48, "antialias": 1, "normalize": "imagenet",
            "output": "pooled", "trials": 40, "seed": 42, "readouts": Readout::paper(),
        });
        assert_eq!(serde_json::to_value(&id).unwrap(), want);
        let checkpoint = EncoderConfig {
            source: Encoder::Checkpoint("m".into()),
            dtype: Dtype::Keep,
            arch: None,
            random_init_dir: None,
        };
        let id = SameDiffIdentity {
            bank: BankIdentity::new("m", "abc", &checkpoint, &scenes()),
            pairs: 40,
            seed: 1,
        };
        let v = serde_json::to_value(&id).unwrap();
        assert_eq!(v["random_init"], serde_json::Value::Null);
        assert_eq!(v["init_seed"], serde_json::Value::Null);
        assert_eq!(
            (v["dtype"].as_str(), v["pairs"].as_u64()),
            (Some("keep"), Some(40))
        );
    }

    /// `results.json` / `row.json` summaries have the fields they always had.
    #[test]
    fn summaries_have_the_recorded_fields() {
        let r = BindingResult {
            readout: Readout::Cosine,
            trials: 2,
            accuracy: 0.5,
            chosen_fraction: [("target".to_string(), 0.5), ("d1".to_string(), 0.5)].into(),
            outcomes: Vec::new(),
        };
        assert_eq!(
            serde_json::to_value(binding_summaries(&[r])).unwrap(),
            json!([{ "readout": {"readout": "cosine"}, "name": "cosine", "trials": 2, "accuracy": 0.5, "chosen_fraction": {"target": 0.5, "d1": 0.5} }])
        );
        let sd = threshold_accuracy(&[0.1, 0.2, 0.7, 0.9], &[true, true, false, false]);
        let v = serde_json::to_value(SameDiffSummary::from(&sd)).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "accuracy",
                "best_percentile",
                "mean_distance_different",
                "mean_distance_same",
                "pairs",
                "sweep",
                "threshold"
            ]
        );
        assert_eq!(v["accuracy"], 1.0);
        let (p, t, a) = sd.sweep[3];
        assert_eq!(
            v["sweep"][3],
            json!({"percentile": p, "threshold": t, "accuracy": a})
        );
    }
}
