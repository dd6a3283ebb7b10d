//! `experiments binding` and `experiments samediff`: the synthetic shape–position probes of
//! "Global Geometry Is Not Enough for Vision Representations" (§5.1, App. C, D.5), plus the
//! pieces the other binding-study subcommands share (model source with random
//! initialisation, scene embedding cache, run directories).
//!
//! Scenes, trials, readouts and scoring rules are defined and documented in
//! `bindscope_binding` (`scene`, `tasks`, `readout`). Here the encoder embeds every one of the
//! 324 scenes of the grammar once (about as many forward passes as the trials use, and the
//! bank the kNN and local-PCA readouts need); trials and pairs then only index that bank.
//!
//! Scene preprocessing: the canvas is rendered at `--image-size` (224) and fed at that size
//! after rescaling to [0, 1] and normalizing with ImageNet mean / std (`--normalize imagenet`,
//! the default, as for JER) or with the checkpoint's full `preprocessor_config.json` pipeline
//! (`--normalize model`: resize / center crop too). Models whose configured size differs
//! (DINOv2: 518) interpolate their position embeddings.
//!
//! A run directory (`runs/<study>/<model>-<timestamp>/`, or `--out`) holds `config.json` (every
//! option, checkpoint sha256, crate versions, git commit, device), `scenes.jsonl` (the
//! embedding cache and resume log: one line per scene) and, at the end, `results.json` and a
//! per-trial CSV. Re-running the same command resumes the newest matching run directory.
//!
//! ## Random initialisation (`--random-init`)
//! `--random-init vit-b16` (or a `config.json` with `model_type` `vit` or `dinov2`) builds the
//! architecture with transformers-style random weights (normal, std 0.02; burn's RNG seeded
//! with `--init-seed`), saves it once as a Hugging Face checkpoint directory
//! `runs/random-init/<name>-seed<N>/` (`config.json` + `model.safetensors`, Hub key names via
//! burn-store's `BurnToPyTorchAdapter`) and then uses that directory like any `--model`, so every
//! study (JER included) sees the same weights and the run config records their sha256.

use crate::common::{self, ModelOpts, Normalize};
use anyhow::{Context, Result, anyhow, bail};
use bindscope_binding::readout::{
    Bank, BindingResult, KnnScore, PcaScore, Readout, SameDiffResult, evaluate_binding,
    evaluate_samediff, kind_name,
};
use bindscope_binding::scene::{NUM_SCENES, RenderSpec, Scene, render, save_png};
use bindscope_binding::tasks::{binding_trials, samediff_pairs};
use bindscope_data::image::{ImageProcessor, ProcessorKind};
use bindscope_jer::probe::{IMAGENET_MEAN, IMAGENET_STD};
use bindscope_models::{VisionEncoder, VisionReadout};
use burn::prelude::*;
use burn::tensor::TensorData;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------------
// Model source: a checkpoint or a random initialisation
// ---------------------------------------------------------------------------------------------

/// Which encoder to probe.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelSource {
    /// Hugging Face id or local checkpoint directory.
    #[arg(
        long,
        required_unless_present = "random_init",
        conflicts_with = "random_init"
    )]
    pub model: Option<String>,
    /// Probe a randomly initialised encoder instead: `vit-b16` (ViT-B/16 at 224 with pooler) or
    /// a config.json path with model_type vit or dinov2. Materialised once under
    /// runs/random-init/.
    #[arg(long)]
    pub random_init: Option<String>,
    /// Seed of the random initialisation.
    #[arg(long, default_value_t = 0)]
    pub init_seed: u64,
    #[command(flatten)]
    pub model_opts: ModelOpts,
}

/// transformers' `ViTConfig()` defaults: ViT-B/16, 224×224.
const VIT_B16: &str = r#"{
  "architectures": ["ViTModel"],
  "model_type": "vit",
  "hidden_size": 768,
  "num_hidden_layers": 12,
  "num_attention_heads": 12,
  "intermediate_size": 3072,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.0,
  "attention_probs_dropout_prob": 0.0,
  "initializer_range": 0.02,
  "layer_norm_eps": 1e-12,
  "image_size": 224,
  "patch_size": 16,
  "num_channels": 3,
  "qkv_bias": true
}
"#;

impl ModelSource {
    /// The checkpoint spec to load: `--model`, or the directory of the materialised random
    /// initialisation.
    pub fn spec(&self, device: &Device) -> Result<String> {
        match (&self.model, &self.random_init) {
            (Some(m), _) => Ok(m.clone()),
            (None, Some(r)) => Ok(materialize_random(
                &common::runs_root("random-init"),
                r,
                self.init_seed,
                device,
            )?
            .display()
            .to_string()),
            (None, None) => bail!("give --model or --random-init"),
        }
    }
}

/// Builds (once) the random-init checkpoint directory `<root>/<name>-seed<seed>` and returns it.
/// The tensors are a deterministic function of the config and the seed (the safetensors
/// header's metadata order, hence the file's sha256, may differ between materialisations).
fn materialize_random(root: &Path, what: &str, seed: u64, device: &Device) -> Result<PathBuf> {
    let (name, config_text) = if what == "vit-b16" {
        ("vit-b16".to_string(), VIT_B16.to_string())
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
        (format!("{}-random", common::slug(&stem)), text)
    };
    let dir = root.join(format!("{name}-seed{seed}"));
    if dir.join("model.safetensors").is_file() && dir.join("config.json").is_file() {
        return Ok(dir);
    }
    let cfg: serde_json::Value =
        serde_json::from_str(&config_text).context("--random-init: invalid config JSON")?;
    let mt = cfg.get("model_type").and_then(|m| m.as_str()).unwrap_or("");
    let tmp = dir.with_file_name(format!(".{name}-seed{seed}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let weights = tmp.join("model.safetensors");
    eprintln!(
        "random-init: building {name} (model_type {mt}, seed {seed}) → {}",
        dir.display()
    );
    match mt {
        "vit" => {
            let c: bindscope_models::vit::ViTConfig = serde_json::from_value(cfg.clone())?;
            let m = bindscope_models::vit::ViTModel::init_random(&c, device)?;
            save_hf(&bindscope_models::randomize(m, 0.02, seed), &weights)?;
        }
        "dinov2" => {
            let c: bindscope_models::dinov2::Dinov2Config = serde_json::from_value(cfg.clone())?;
            let m = bindscope_models::dinov2::Dinov2Model::init_random(&c, device)?;
            save_hf(&bindscope_models::randomize(m, 0.02, seed), &weights)?;
        }
        other => bail!("--random-init: model_type '{other}' is not supported (vit, dinov2)"),
    }
    let mut cfg = cfg;
    cfg["bindscope_random_init"] = json!({ "seed": seed, "init": "every weight matrix and embedding normal(0, 0.02) drawn in module order after Device::seed(seed) (bindscope_models::randomize); rank-1 parameters as the constructor sets them", "source": what });
    common::write_json(&tmp.join("config.json"), &cfg)?;
    std::fs::rename(&tmp, &dir)
        .with_context(|| format!("moving {} to {}", tmp.display(), dir.display()))?;
    Ok(dir)
}

/// Saves a module with Hugging Face key names (Linear weights transposed back, norm
/// gamma/beta → weight/bias).
fn save_hf<M: burn::module::Module>(m: &M, path: &Path) -> Result<()> {
    use burn::store::{BurnToPyTorchAdapter, ModuleSnapshot, SafetensorsStore};
    let mut store = SafetensorsStore::from_file(path).with_to_adapter(BurnToPyTorchAdapter);
    m.save_into(&mut store)
        .map_err(|e| anyhow!("saving {}: {e:?}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Scene embeddings
// ---------------------------------------------------------------------------------------------

/// How scenes are drawn and fed to the encoder.
#[derive(clap::Args, Debug, Clone)]
pub struct SceneOpts {
    /// Canvas side in pixels.
    #[arg(long, default_value_t = 224)]
    pub image_size: usize,
    /// Anti-aliasing: n×n supersampling per pixel (1 = off, the default).
    #[arg(long, default_value_t = 1)]
    pub antialias: usize,
    /// Normalization: imagenet (rescale + ImageNet mean/std, no resize) or model (the
    /// checkpoint's preprocessor_config.json pipeline).
    #[arg(long, value_enum, default_value_t = Normalize::Imagenet)]
    pub normalize: Normalize,
    /// Which embedding: pooled, summary, mean-patch.
    #[arg(long, default_value = "pooled")]
    pub output: VisionReadout,
    /// Images per forward pass.
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Write every scene the run uses as PNG into this directory.
    #[arg(long)]
    pub dump_images: Option<PathBuf>,
}

impl SceneOpts {
    pub fn render_spec(&self) -> RenderSpec {
        RenderSpec {
            image_size: self.image_size,
            antialias: self.antialias,
        }
    }

    pub fn check(&self) -> Result<()> {
        if self.image_size < 6 || self.antialias == 0 || self.batch_size == 0 {
            bail!("--image-size must be ≥ 6, --antialias and --batch-size ≥ 1");
        }
        Ok(())
    }
}

/// The processor that turns a rendered scene into pixel values.
pub fn scene_processor(
    ckpt: &bindscope_core::Checkpoint,
    normalize: Normalize,
) -> Result<ImageProcessor> {
    if normalize == Normalize::Model {
        let p = ckpt.preprocessor_config.as_ref().with_context(|| {
            format!(
                "--normalize model: {} has no preprocessor_config.json",
                ckpt.dir().display()
            )
        })?;
        return Ok(ImageProcessor::from_file(p)?);
    }
    Ok(ImageProcessor {
        do_resize: false,
        do_center_crop: false,
        image_mean: IMAGENET_MEAN,
        image_std: IMAGENET_STD,
        ..ImageProcessor::defaults(ProcessorKind::Bit)
    })
}

/// Embeds images (already decoded, `[H, W, 3]` u8) in batches: `[N][D]` f32.
pub fn embed_images(
    model: &dyn VisionEncoder,
    proc: &ImageProcessor,
    imgs: &[bindscope_data::image::RgbImage],
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
#[derive(serde::Serialize, serde::Deserialize)]
struct SceneLine {
    scene: usize,
    name: String,
    embedding: Vec<f32>,
}

/// Embeddings of all 324 scenes (row = scene id), computed once and cached in `cache`
/// (resumable).
pub fn scene_bank(
    model: &dyn VisionEncoder,
    proc: &ImageProcessor,
    opts: &SceneOpts,
    cache: &Path,
    device: &Device,
) -> Result<Vec<Vec<f32>>> {
    let spec = opts.render_spec();
    let mut have: BTreeMap<usize, Vec<f32>> = BTreeMap::new();
    for l in common::read_jsonl::<SceneLine>(cache, "scene-embedding")? {
        have.insert(l.scene, l.embedding);
    }
    let todo: Vec<usize> = (0..NUM_SCENES).filter(|i| !have.contains_key(i)).collect();
    if !todo.is_empty() {
        let pb = common::progress(NUM_SCENES as u64, "scenes");
        pb.set_position(have.len() as u64);
        for chunk in todo.chunks(opts.batch_size) {
            let imgs: Vec<_> = chunk
                .iter()
                .map(|&i| render(&Scene::from_id(i), &spec))
                .collect();
            let rows = embed_images(model, proc, &imgs, opts.output, device)?;
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

/// Writes every scene of the grammar as `<id>_<name>.png` into `dir`.
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

/// Writes `config.json` (identity + provenance) unless the directory already has one.
pub fn write_config(
    dir: &Path,
    study: &str,
    identity: &serde_json::Value,
    extra: serde_json::Value,
    device: &Device,
    device_spec: &str,
) -> Result<()> {
    if dir.join("config.json").exists() {
        return Ok(());
    }
    let mut cfg = common::config_json(
        json!({ "study": study, "identity": identity }),
        Some((device_spec, device)),
    );
    if let (Some(o), Some(e)) = (cfg.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    Ok(common::write_json(&dir.join("config.json"), &cfg)?)
}

// ---------------------------------------------------------------------------------------------
// Readout options
// ---------------------------------------------------------------------------------------------

/// Readouts of the binding task and their hyper-parameters.
#[derive(clap::Args, Debug, Clone)]
pub struct ReadoutOpts {
    /// Readouts to evaluate (comma-separated): cosine, knn, local-pca.
    #[arg(long, value_delimiter = ',', default_value = "cosine,knn,local-pca")]
    pub readouts: Vec<String>,
    /// kNN: neighbours per image.
    #[arg(long, default_value_t = 60)]
    pub knn_k: usize,
    /// kNN scoring rule: shared (|N_k(q) ∩ N_k(c)| / k, ties by cosine) or mean (cosine of
    /// kNN-smoothed embeddings).
    #[arg(long, default_value = "shared")]
    pub knn_score: KnnScore,
    /// Local PCA: principal components.
    #[arg(long, default_value_t = 32)]
    pub pca_components: usize,
    /// Local PCA: nearest neighbours of the query the PCA is fitted on.
    #[arg(long, default_value_t = 50)]
    pub pca_neighbours: usize,
    /// Local PCA scoring rule: projected-cosine or projected-distance.
    #[arg(long, default_value = "projected-cosine")]
    pub pca_score: PcaScore,
}

impl ReadoutOpts {
    pub fn readouts(&self) -> Result<Vec<Readout>> {
        self.readouts
            .iter()
            .map(|r| match r.as_str() {
                "cosine" => Ok(Readout::Cosine),
                "knn" => Ok(Readout::Knn {
                    k: self.knn_k,
                    score: self.knn_score,
                }),
                "local-pca" | "local_pca" => Ok(Readout::LocalPca {
                    components: self.pca_components,
                    neighbours: self.pca_neighbours,
                    score: self.pca_score,
                }),
                o => bail!("--readouts: unknown readout '{o}' (cosine, knn, local-pca)"),
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// The tasks on a bank
// ---------------------------------------------------------------------------------------------

/// Runs the binding trials with every readout; writes `binding_trials.csv` and returns the
/// results.
pub fn run_binding(
    dir: &Path,
    bank: &Bank,
    trials: usize,
    seed: u64,
    readouts: &[Readout],
) -> Result<Vec<BindingResult>> {
    let trials = binding_trials(seed, trials);
    let mut out = Vec::new();
    let mut csv = String::from(
        "trial,readout,query,cand0,cand1,cand2,cand3,kind0,kind1,kind2,kind3,target,chosen,chosen_kind,correct,score0,score1,score2,score3\n",
    );
    for r in readouts {
        let res = evaluate_binding(bank, &trials, *r).map_err(|e| anyhow!(e))?;
        for (t, o) in trials.iter().zip(&res.outcomes) {
            csv.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                t.index,
                r.name(),
                t.query.name(),
                t.candidates[0].name(),
                t.candidates[1].name(),
                t.candidates[2].name(),
                t.candidates[3].name(),
                kind_name(t.kinds[0]),
                kind_name(t.kinds[1]),
                kind_name(t.kinds[2]),
                kind_name(t.kinds[3]),
                t.target_index(),
                o.chosen,
                kind_name(o.chosen_kind),
                (o.chosen == t.target_index()) as u8,
                o.scores[0].0,
                o.scores[1].0,
                o.scores[2].0,
                o.scores[3].0
            ));
        }
        out.push(res);
    }
    bindscope_core::fsutil::write_atomic(&dir.join("binding_trials.csv"), csv.as_bytes())?;
    Ok(out)
}

/// Runs the same/different pairs; writes `samediff_pairs.csv` and `samediff_sweep.csv`.
pub fn run_samediff(dir: &Path, bank: &Bank, pairs: usize, seed: u64) -> Result<SameDiffResult> {
    let pairs = samediff_pairs(seed, pairs);
    let res = evaluate_samediff(bank, &pairs);
    let mut csv = String::from("pair,kind,a,b,cosine_distance,predicted_same,correct\n");
    for (p, d) in pairs.iter().zip(&res.distances) {
        let pred = *d <= res.threshold;
        csv.push_str(&format!(
            "{},{},{},{},{},{},{}\n",
            p.index,
            serde_json::to_value(p.kind)?.as_str().unwrap_or("?"),
            p.a.name(),
            p.b.name(),
            d,
            pred as u8,
            (pred == p.kind.is_same()) as u8
        ));
    }
    bindscope_core::fsutil::write_atomic(&dir.join("samediff_pairs.csv"), csv.as_bytes())?;
    let mut sweep = String::from("percentile,threshold,accuracy\n");
    for (p, t, a) in &res.sweep {
        sweep.push_str(&format!("{p},{t},{a}\n"));
    }
    bindscope_core::fsutil::write_atomic(&dir.join("samediff_sweep.csv"), sweep.as_bytes())?;
    Ok(res)
}

/// `results.json` fields of binding results (per-trial outcomes are in the CSV).
pub fn binding_json(results: &[BindingResult]) -> serde_json::Value {
    json!(results
        .iter()
        .map(|r| json!({ "readout": r.readout, "name": r.readout.name(), "trials": r.trials, "accuracy": r.accuracy, "chosen_fraction": r.chosen_fraction }))
        .collect::<Vec<_>>())
}

/// `results.json` fields of a same/different result (distances are in the CSV).
pub fn samediff_json(r: &SameDiffResult) -> serde_json::Value {
    json!({
        "pairs": r.pairs,
        "accuracy": r.accuracy,
        "best_percentile": r.best_percentile,
        "threshold": r.threshold,
        "mean_distance_same": r.mean_distance_same,
        "mean_distance_different": r.mean_distance_different,
        "sweep": r.sweep.iter().map(|(p, t, a)| json!({"percentile": p, "threshold": t, "accuracy": a})).collect::<Vec<_>>(),
    })
}

// ---------------------------------------------------------------------------------------------
// Subcommands
// ---------------------------------------------------------------------------------------------

/// Arguments of `experiments binding`.
#[derive(clap::Args, Debug)]
pub struct BindingArgs {
    #[command(flatten)]
    source: ModelSource,
    /// Number of trials.
    #[arg(long, default_value_t = 500)]
    trials: usize,
    /// Seed of the trials.
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

/// Arguments of `experiments samediff`.
#[derive(clap::Args, Debug)]
pub struct SameDiffArgs {
    #[command(flatten)]
    source: ModelSource,
    /// Number of pairs (half same, half different).
    #[arg(long, default_value_t = 500)]
    pairs: usize,
    /// Seed of the pairs.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[command(flatten)]
    scenes: SceneOpts,
    /// Run directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a new run directory even if a matching one exists.
    #[arg(long)]
    fresh: bool,
}

/// The identity of a scene bank: everything its embeddings depend on.
pub fn bank_identity(
    spec: &str,
    sha: &str,
    source: &ModelSource,
    scenes: &SceneOpts,
) -> serde_json::Value {
    json!({
        "model": spec,
        "weights_sha256": sha,
        "random_init": source.random_init,
        "init_seed": source.random_init.as_ref().map(|_| source.init_seed),
        "dtype": source.model_opts.dtype,
        "image_size": scenes.image_size,
        "antialias": scenes.antialias,
        "normalize": scenes.normalize,
        "output": scenes.output,
    })
}

/// Loads the encoder on the plain device and embeds the scene bank into `dir/scenes.jsonl`.
fn load_and_embed(
    spec: &str,
    source: &ModelSource,
    scenes: &SceneOpts,
    dir: &Path,
    device: &Device,
) -> Result<(Vec<Vec<f32>>, bindscope_models::ModelInfo)> {
    let ckpt = common::resolve(spec)?;
    let model =
        bindscope_models::registry::load_vision(&ckpt, device, &source.model_opts.load_options())
            .with_context(|| format!("loading vision encoder of '{spec}'"))?;
    let proc = scene_processor(&ckpt, scenes.normalize)?;
    let rows = scene_bank(
        model.as_ref(),
        &proc,
        scenes,
        &dir.join("scenes.jsonl"),
        device,
    )?;
    Ok((rows, model.info()))
}

pub fn run_binding_cmd(args: BindingArgs, device: &Device, device_spec: &str) -> Result<()> {
    args.scenes.check()?;
    if args.trials == 0 {
        bail!("--trials must be at least 1");
    }
    let readouts = args.readout.readouts()?;
    let spec = args.source.spec(device)?;
    let sha = common::resolve(&spec)?.weights_sha256()?;
    if let Some(d) = &args.scenes.dump_images {
        dump_scenes(d, &args.scenes.render_spec())?;
    }
    let mut identity = bank_identity(&spec, &sha, &args.source, &args.scenes);
    identity["trials"] = json!(args.trials);
    identity["seed"] = json!(args.seed);
    identity["readouts"] = json!(readouts);
    let dir = common::run_dir(
        "binding",
        &common::slug(&spec),
        args.out.clone(),
        &identity,
        args.fresh,
    )?;
    write_config(&dir, "binding", &identity, json!({}), device, device_spec)?;
    eprintln!("binding: {spec} → {}", dir.display());
    let (rows, info) = load_and_embed(&spec, &args.source, &args.scenes, &dir, device)?;
    let bank = Bank::new(&rows);
    let results = run_binding(&dir, &bank, args.trials, args.seed, &readouts)?;
    common::write_json(
        &dir.join("results.json"),
        &json!({ "model": spec, "model_info": info, "binding": binding_json(&results) }),
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
    Ok(())
}

pub fn run_samediff_cmd(args: SameDiffArgs, device: &Device, device_spec: &str) -> Result<()> {
    args.scenes.check()?;
    if args.pairs < 2 {
        bail!("--pairs must be at least 2");
    }
    let spec = args.source.spec(device)?;
    let sha = common::resolve(&spec)?.weights_sha256()?;
    if let Some(d) = &args.scenes.dump_images {
        dump_scenes(d, &args.scenes.render_spec())?;
    }
    let mut identity = bank_identity(&spec, &sha, &args.source, &args.scenes);
    identity["pairs"] = json!(args.pairs);
    identity["seed"] = json!(args.seed);
    let dir = common::run_dir(
        "samediff",
        &common::slug(&spec),
        args.out.clone(),
        &identity,
        args.fresh,
    )?;
    write_config(&dir, "samediff", &identity, json!({}), device, device_spec)?;
    eprintln!("samediff: {spec} → {}", dir.display());
    let (rows, info) = load_and_embed(&spec, &args.source, &args.scenes, &dir, device)?;
    let res = run_samediff(&dir, &Bank::new(&rows), args.pairs, args.seed)?;
    common::write_json(
        &dir.join("results.json"),
        &json!({ "model": spec, "model_info": info, "samediff": samediff_json(&res) }),
    )?;
    println!(
        "{spec}: same/different accuracy = {:.3} at the {}th percentile of cosine distance (threshold {:.4}; chance 0.5)  [{}]",
        res.accuracy,
        res.best_percentile,
        res.threshold,
        dir.display()
    );
    Ok(())
}
