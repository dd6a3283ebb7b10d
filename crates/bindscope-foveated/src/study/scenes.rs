//! The CSB / CSD run: scenes, features, probes, metrics, reports.

use super::{
    Config, Encoder, LogRecord, ProbeKey, Recipe, Report, check_probes, open_cache, open_encoder,
    readout_data, report, run_dir, train_grid, unknown_readout, write_config,
};
use crate::dataset::{Generator, SetName, dump_images};
use crate::features::{Cache, Extractor, FeatureError, Features, Grid, Item};
use crate::metrics::{self, FlipStats, NsrStats};
use crate::probe::{self, Data, EpochLog, HeadSpec, PoolSpec, TrainConfig};
use crate::scene::{Scene, Task, Variant, save_png};
use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::options::Dtype;
use bindscope_core::run::{Output, RunContext, progress, runs_root};
use bindscope_data::image::{ImageProcessor, ResizeTo};
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// The readouts of CSB / CSD.
const READOUTS: [&str; 4] = ["gap", "summary", "oracle", "fovea"];

/// One trained probe: a line of `probes.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ProbeRecord {
    pub(super) readout: String,
    pub(super) probe: String,
    pub(super) seed: u64,
    pub(super) best_epoch: usize,
    pub(super) val_top1: f64,
    pub(super) test_top1: f64,
    /// Test top-1 by clutter level K.
    pub(super) test_top1_by_k: BTreeMap<usize, f64>,
    pub(super) flip: FlipStats,
    pub(super) nsr: Option<NsrStats>,
    pub(super) nuisance_top1: Option<f64>,
    pub(super) clean_top1: Option<f64>,
    pub(super) train_seconds: f64,
    pub(super) history: Vec<EpochLog>,
}

impl LogRecord for ProbeRecord {
    fn key(&self) -> ProbeKey {
        (self.readout.clone(), self.probe.clone(), self.seed)
    }
}

/// What decides the numbers of a CSB / CSD run: `config.json`'s `identity`, and the values the
/// run computes with.
#[derive(Debug, Serialize)]
struct Identity<'a> {
    study: &'static str,
    task: Task,
    model: &'a str,
    weights_sha256: &'a str,
    generator: &'a Generator,
    side: usize,
    supersample: usize,
    dtype: Dtype,
    recipe: &'a Recipe,
}

/// The CSB / CSD recipe (module docs of [`crate::probe`]): [`TrainConfig::synthetic`] with
/// `epochs`, linear and `Linear(D→128)–GELU–Linear(128→C)` heads.
pub(super) fn recipe(epochs: usize) -> Recipe {
    let heads = BTreeMap::from([
        ("linear".to_string(), vec![HeadSpec::Linear]),
        ("mlp".to_string(), vec![HeadSpec::mlp128()]),
    ]);
    Recipe::new(
        TrainConfig {
            epochs,
            ..TrainConfig::synthetic(0)
        },
        heads,
    )
}

/// A CSB / CSD run ([`super::run`]).
pub(super) fn run(
    config: &Config,
    task: Task,
    output: &Output,
    ctx: &RunContext,
) -> Result<Report> {
    let generator = generator(config, task)?;
    if config.dump_only {
        return dump_only(config, &generator, output);
    }
    let recipe = checked_recipe(config, task)?;
    let device = &ctx.device;

    // Model, input geometry, extractor.
    let enc = open_encoder(config, device)?;
    let info = enc.model.info();
    let side = input_side(config, &enc)?;
    let extractor = Extractor::new(
        enc.model.as_ref(),
        &enc.spec,
        enc.processor.clone(),
        side,
        device,
    )?;
    let grid = extractor.grid;

    let (normalization, cache) = scene_cache(config, &enc, &generator, side)?;
    let identity = Identity {
        study: "foveated",
        task,
        model: &enc.spec,
        weights_sha256: &enc.sha,
        generator: &generator,
        side,
        supersample: config.supersample,
        dtype: config.dtype,
        recipe: &recipe,
    };
    let (dir, identity_json) = run_dir(output, task.name(), &enc.spec, &identity)?;
    write_config(
        &dir,
        ctx,
        json!({
            "identity": identity_json,
            "readouts": config.readouts, "probes": config.probes, "seeds": config.seeds,
            "model_info": info, "grid": grid, "processor_normalization": normalization,
            "feature_cache": cache.dir.display().to_string(),
            "checkpoint_files": enc.ckpt.weights.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        }),
    )?;
    if config.dump_images > 0 {
        dump_images(
            identity.generator,
            config.dump_images,
            side,
            config.supersample,
            &dir.join("images"),
        )?;
    }
    eprintln!(
        "foveated: {} on {} ({}, {side}×{side}, {}×{} patches of {} px) → {}",
        task.name(),
        enc.spec,
        info.model_type,
        grid.cells,
        grid.cells,
        grid.patch,
        dir.display()
    );

    // Scenes and features.
    let scenes = Scenes::generate(identity.generator);
    let t_extract = Instant::now();
    scenes.extract(&cache, &extractor, config)?;
    let extract_seconds = t_extract.elapsed().as_secs_f64();
    drop(extractor);
    drop(enc.model);

    // Probes.
    let need_patches = config.readouts.iter().any(|r| r == "fovea");
    let eval = EvalSets::load(&scenes, &cache, need_patches)?;
    let trainer = Trainer {
        config,
        recipe: identity.recipe,
        classes: identity.generator.num_classes(),
        scenes: &scenes,
        eval: &eval,
        cache: &cache,
        grid,
        dir: &dir,
        device,
    };
    let t_train = Instant::now();
    let done = train_grid(
        &dir.join("probes.jsonl"),
        &config.readouts,
        &config.probes,
        &config.seeds,
        |readout, probe, seed| trainer.train(readout, probe, seed),
    )?;
    let train_seconds = t_train.elapsed().as_secs_f64();

    let results = report::scenes(
        &dir,
        &enc.spec,
        identity.generator,
        &grid_records(&done, config),
        scenes.statistics(),
        extract_seconds,
        train_seconds,
    )?;
    println!("results: {}", dir.display());
    Ok(Report::Scenes(report::ScenesReport { dir, results }))
}

/// The recipe of a run with a model, after checking the readouts and probes (the other
/// options: [`Config::check`]).
fn checked_recipe(config: &Config, task: Task) -> Result<Recipe> {
    if let Some(r) = config
        .readouts
        .iter()
        .find(|r| !READOUTS.contains(&r.as_str()))
    {
        return Err(unknown_readout(r, task.name(), &READOUTS));
    }
    let recipe = recipe(config.epochs.unwrap_or(30));
    check_probes(&recipe.heads, &config.probes)?;
    Ok(recipe)
}

/// The input side: [`Config::image_size`], else the processor's square output.
fn input_side(config: &Config, enc: &Encoder) -> Result<usize> {
    match config.image_size {
        Some(s) => Ok(s),
        None => default_side(&enc.processor)
            .with_context(|| format!("'{}': pass --image-size", enc.spec)),
    }
}

/// The records of the (readout, probe, seed) grid of `config`, in grid order (no option
/// repeats a value: [`Config::check`]).
fn grid_records<'a>(
    done: &'a BTreeMap<ProbeKey, ProbeRecord>,
    config: &Config,
) -> Vec<&'a ProbeRecord> {
    let mut records = Vec::new();
    for r in &config.readouts {
        for p in &config.probes {
            records.extend(super::seed_records(done, r, p, &config.seeds));
        }
    }
    records
}

/// The scene generator of `config`, checked.
fn generator(config: &Config, task: Task) -> Result<Generator> {
    let mut g = Generator::new(task, config.data_seed);
    g.sizes = config.sizes;
    g.nuisance_scenes = config.nuisance_scenes.unwrap_or(config.sizes.test);
    g.validate().map_err(|e| anyhow!("scene generator: {e}"))?;
    Ok(g)
}

/// `dump_only`: the first scenes of every set as PNG + JSON, no model.
fn dump_only(config: &Config, generator: &Generator, output: &Output) -> Result<Report> {
    let side = config.image_size.unwrap_or(384);
    let n = if config.dump_images == 0 {
        8
    } else {
        config.dump_images
    };
    let dir = output.dir.clone().unwrap_or_else(|| {
        runs_root("foveated").join(format!(
            "scenes-{}-{}",
            generator.task.name(),
            config.data_seed
        ))
    });
    let written = dump_images(generator, n, side, config.supersample, &dir)
        .with_context(|| format!("writing {}", dir.display()))?;
    println!("{written} scenes written to {}", dir.display());
    Ok(Report::Dump {
        dir,
        scenes: written,
    })
}

/// The processor's output side for square outputs.
fn default_side(p: &ImageProcessor) -> Result<usize> {
    let (h, w) = if p.do_center_crop {
        p.crop_size
    } else {
        match p.size {
            ResizeTo::Exact { height, width } => (height, width),
            ResizeTo::ShortestEdge(s) => (s, s),
        }
    };
    if h != w {
        bail!("the processor's output is {h}×{w}, not square");
    }
    Ok(h)
}

/// The feature cache of this encoder, scene design and input, and the processor's
/// normalization (recorded in `config.json`).
///
/// The cache is shared by runs of any set sizes: every scene is drawn from its own seeded
/// stream (seed, split, index), so the sets of a smaller run are prefixes of a larger one's,
/// and a shard of the wrong length is extracted again (`Cache::missing`).
fn scene_cache(
    config: &Config,
    enc: &Encoder,
    generator: &Generator,
    side: usize,
) -> Result<(serde_json::Value, Cache)> {
    let p = &enc.processor;
    let normalization = json!({
        "image_mean": p.image_mean, "image_std": p.image_std,
        "rescale_factor": p.rescale_factor, "do_rescale": p.do_rescale, "do_normalize": p.do_normalize,
    });
    let mut scene_design = serde_json::to_value(generator)?;
    if let Some(o) = scene_design.as_object_mut() {
        o.remove("sizes");
        o.remove("nuisance_scenes");
    }
    let cache_identity = json!({
        "model_sha256": enc.sha, "dtype": config.dtype, "generator": scene_design,
        "side": side, "supersample": config.supersample, "normalization": normalization,
    });
    let cache = open_cache(config, enc, generator.task.name(), &cache_identity)?;
    Ok((normalization, cache))
}

/// Every scene set of a run.
struct Scenes {
    sets: Vec<SetName>,
    by_set: BTreeMap<SetName, Vec<Scene>>,
}

impl Scenes {
    fn generate(generator: &Generator) -> Self {
        let sets = generator.sets();
        let by_set = sets.iter().map(|&s| (s, generator.scenes(s))).collect();
        Self { sets, by_set }
    }

    fn get(&self, set: SetName) -> &[Scene] {
        &self.by_set[&set]
    }

    fn labels(&self, set: SetName) -> Vec<usize> {
        self.by_set
            .get(&set)
            .map(|v| v.iter().map(|x| x.label).collect())
            .unwrap_or_default()
    }

    /// Encodes the scenes whose shards the cache lacks, with one progress bar.
    fn extract(&self, cache: &Cache, extractor: &Extractor, config: &Config) -> Result<()> {
        let total_missing: usize = self
            .sets
            .iter()
            .map(|s| {
                let n = self.by_set[s].len();
                cache
                    .missing(s.name(), n)
                    .iter()
                    .map(|&k| cache.shard_items(k, n))
                    .sum::<usize>()
            })
            .sum();
        let total: usize = self.by_set.values().map(Vec::len).sum();
        eprintln!(
            "features: {total_missing} of {total} images to encode ({} cached) in {}",
            total - total_missing,
            cache.dir.display()
        );
        if total_missing == 0 {
            return Ok(());
        }
        let (side, ss) = (extractor.grid.side, config.supersample);
        let pb = progress(total_missing as u64, "encoding scenes");
        for &s in &self.sets {
            let list = &self.by_set[&s];
            let make = |r: std::ops::Range<usize>| -> Result<Vec<Item>, FeatureError> {
                Ok(list[r]
                    .iter()
                    .map(|sc| Item::from_scene(sc, side, ss))
                    .collect())
            };
            cache
                .extract(
                    extractor,
                    s.name(),
                    list.len(),
                    config.batch,
                    &make,
                    &mut |k| pb.inc(k as u64),
                )
                .with_context(|| format!("extracting features of set '{}'", s.name()))?;
        }
        pb.finish_and_clear();
        Ok(())
    }

    /// Realised scene statistics (K and λ histograms, drops, regenerations, counterfactual
    /// counts).
    fn statistics(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for (set, list) in &self.by_set {
            let mut k_hist: BTreeMap<usize, usize> = BTreeMap::new();
            let mut dropped = 0;
            let mut regenerations = 0;
            let mut shrink = 0;
            for s in list {
                *k_hist.entry(s.clutter).or_default() += 1;
                dropped += s.requested.total() - s.realized.total();
                regenerations += s.regenerations;
                shrink += s.shrink_steps;
            }
            out.insert(
                set.name().to_string(),
                json!({ "scenes": list.len(), "clutter_histogram": k_hist, "dropped_distractors": dropped,
                        "regenerations": regenerations, "shrink_steps": shrink }),
            );
        }
        if let Some(cf) = self.by_set.get(&SetName::TestCf) {
            let mut per_base: BTreeMap<usize, usize> = BTreeMap::new();
            for s in cf {
                if let Variant::Counterfactual { base } = s.variant {
                    *per_base.entry(base).or_default() += 1;
                }
            }
            let n_test = self
                .by_set
                .get(&SetName::Test)
                .map(|t| t.len())
                .unwrap_or(0);
            let mut hist: BTreeMap<usize, usize> = BTreeMap::new();
            for b in 0..n_test {
                *hist.entry(*per_base.get(&b).unwrap_or(&0)).or_default() += 1;
            }
            out.insert("counterfactuals_per_test_scene".into(), json!(hist));
        }
        serde_json::Value::Object(out)
    }
}

/// The cached features the probes train and are evaluated on. Train / val / test are held in
/// memory (with patch tokens for the fovea); the larger counterfactual, nuisance and clean
/// sets are streamed shard by shard for the fovea ([`predict_set`]).
struct EvalSets {
    train: Features,
    val: Features,
    test: Features,
    cf: Features,
    nuisance: Option<Features>,
    clean: Option<Features>,
    /// Index of each counterfactual's base test scene.
    cf_base: Vec<usize>,
    /// Index of each nuisance variant's base test scene.
    nu_base: Vec<usize>,
    /// Clutter level K of each test scene.
    test_k: Vec<usize>,
}

impl EvalSets {
    fn load(scenes: &Scenes, cache: &Cache, need_patches: bool) -> Result<Self> {
        let load = |s: SetName, patches: bool| -> Result<Option<Features>> {
            if !scenes.sets.contains(&s) {
                return Ok(None);
            }
            Ok(Some(cache.load(s.name(), &scenes.labels(s), patches)?))
        };
        let base_of = |s: &[Scene]| -> Vec<usize> {
            s.iter()
                .map(|x| match x.variant {
                    Variant::Counterfactual { base } | Variant::Nuisance { base, .. } => base,
                    Variant::Base => usize::MAX,
                })
                .collect()
        };
        Ok(Self {
            train: load(SetName::Train, need_patches)?.expect("train set"),
            val: load(SetName::Val, need_patches)?.expect("val set"),
            test: load(SetName::Test, need_patches)?.expect("test set"),
            cf: load(SetName::TestCf, false)?.expect("counterfactual set"),
            nuisance: load(SetName::TestNuisance, false)?,
            clean: load(SetName::Clean, false)?,
            cf_base: base_of(scenes.get(SetName::TestCf)),
            nu_base: scenes
                .by_set
                .get(&SetName::TestNuisance)
                .map(|v| base_of(v))
                .unwrap_or_default(),
            test_k: scenes
                .get(SetName::Test)
                .iter()
                .map(|s| s.clutter)
                .collect(),
        })
    }
}

/// Trains and evaluates one (readout, probe, seed) of a CSB / CSD run.
struct Trainer<'a> {
    config: &'a Config,
    recipe: &'a Recipe,
    classes: usize,
    scenes: &'a Scenes,
    eval: &'a EvalSets,
    cache: &'a Cache,
    grid: Grid,
    dir: &'a Path,
    device: &'a Device,
}

impl Trainer<'_> {
    fn train(&self, readout: &str, pname: &str, seed: u64) -> Result<ProbeRecord> {
        let (e, device) = (self.eval, self.device);
        let pool = if readout == "fovea" {
            PoolSpec::Fovea
        } else {
            PoolSpec::Fixed
        };
        let t0 = Instant::now();
        let cfg = self.recipe.for_seed(seed);
        let (_, trained, _) = super::best_candidate(&self.recipe.heads[pname], |head| {
            probe::train(
                pool,
                head,
                self.classes,
                &readout_data(readout, &e.train),
                &e.train.label,
                &readout_data(readout, &e.val),
                &e.val.label,
                &cfg,
                device,
            )
        });
        let train_seconds = t0.elapsed().as_secs_f64();
        let keep_attn = pool == PoolSpec::Fovea
            && self.config.attention_maps > 0
            && seed == self.config.seeds[0];
        let o_test = probe::predict(
            &trained.probe,
            &readout_data(readout, &e.test),
            device,
            keep_attn,
        );
        let o_cf = self.predict(&trained.probe, readout, &e.cf, SetName::TestCf, keep_attn)?;
        let p_test = o_test.predictions();
        let flip = metrics::flip_stats(
            &o_cf.predictions(),
            &e.cf.label,
            &e.cf_base,
            &p_test,
            &e.test.label,
        );
        let (nsr, nuisance_top1) = self.nuisance(&trained.probe, readout, &o_test, &o_cf)?;
        let clean_top1 = match &e.clean {
            Some(fc) => {
                let o = self.predict(&trained.probe, readout, fc, SetName::Clean, false)?;
                Some(metrics::top1(&o.predictions(), &fc.label))
            }
            None => None,
        };
        if keep_attn {
            self.save_attention(readout, pname, &o_test, &o_cf)?;
        }
        let rec = ProbeRecord {
            readout: readout.to_string(),
            probe: pname.to_string(),
            seed,
            best_epoch: trained.best_epoch,
            val_top1: trained
                .history
                .get(trained.best_epoch.saturating_sub(1))
                .map(|h| h.val_top1)
                .unwrap_or(f64::NAN),
            test_top1: metrics::top1(&p_test, &e.test.label),
            test_top1_by_k: top1_by_clutter(&p_test, &e.test.label, &e.test_k),
            flip,
            nsr,
            nuisance_top1,
            clean_top1,
            train_seconds,
            history: trained.history,
        };
        eprintln!(
            "    test top-1 {:.4}, flip {:.4}, NSR {}  ({:.1} s)",
            rec.test_top1,
            rec.flip.flip,
            rec.nsr
                .and_then(|n| n.nsr)
                .map(|v| format!("{v:.3}"))
                .unwrap_or_else(|| "–".into()),
            train_seconds
        );
        Ok(rec)
    }

    /// [`predict_set`] over a set of this run.
    fn predict(
        &self,
        p: &probe::Probe,
        readout: &str,
        light: &Features,
        set: SetName,
        keep_attention: bool,
    ) -> Result<probe::Outputs> {
        predict_set(
            p,
            readout,
            light,
            self.cache,
            set,
            self.device,
            keep_attention,
        )
    }

    /// The nuisance-to-signal ratio and the nuisance variants' top-1, when the run has them.
    fn nuisance(
        &self,
        p: &probe::Probe,
        readout: &str,
        o_test: &probe::Outputs,
        o_cf: &probe::Outputs,
    ) -> Result<(Option<NsrStats>, Option<f64>)> {
        let e = self.eval;
        let Some(fnu) = &e.nuisance else {
            return Ok((None, None));
        };
        let o_nu = self.predict(p, readout, fnu, SetName::TestNuisance, false)?;
        let n = metrics::nsr(
            o_test.dim,
            &o_test.pooled,
            &o_cf.pooled,
            &e.cf_base,
            &o_nu.pooled,
            &e.nu_base,
        );
        Ok((
            Some(n),
            Some(metrics::top1(&o_nu.predictions(), &fnu.label)),
        ))
    }

    /// Fovea attention maps of the first test scenes and their first counterfactual, as PNG in
    /// `attention/`.
    fn save_attention(
        &self,
        readout: &str,
        probe: &str,
        o_test: &probe::Outputs,
        o_cf: &probe::Outputs,
    ) -> Result<()> {
        let grid = self.grid;
        let p = grid.num_patches();
        let out = self.dir.join("attention");
        let test = self.scenes.get(SetName::Test);
        let cfs = self.scenes.get(SetName::TestCf);
        let pred_t = o_test.predictions();
        let pred_c = o_cf.predictions();
        let (side, ss) = (grid.side, self.config.supersample);
        // One overlay: scene `s`, its attention row `j` in `o`, file tag `tag`.
        let overlay = |s: &Scene, o: &probe::Outputs, j: usize, pred: usize, tag: String| {
            let img = crate::viz::attention_overlay(
                &s.render(side, ss),
                &grid,
                &o.attention[j * p..(j + 1) * p],
                s.target().bbox(),
            );
            let name = format!("{readout}-{probe}-{tag}-y{}-pred{pred}.png", s.label);
            save_png(&img, &out.join(name))
        };
        for i in 0..self.config.attention_maps.min(test.len()) {
            overlay(&test[i], o_test, i, pred_t[i], format!("test{i:03}"))?;
            if let Some(k) = self.eval.cf_base.iter().position(|&b| b == i) {
                overlay(&cfs[k], o_cf, k, pred_c[k], format!("test{i:03}-cf"))?;
            }
        }
        Ok(())
    }
}

/// Top-1 of the test scenes by clutter level `k[i]`.
fn top1_by_clutter(pred: &[usize], y: &[usize], k: &[usize]) -> BTreeMap<usize, f64> {
    let mut by_k: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    for (i, &k) in k.iter().enumerate() {
        let e = by_k.entry(k).or_default();
        e.0 += (pred[i] == y[i]) as usize;
        e.1 += 1;
    }
    by_k.into_iter()
        .map(|(k, (c, n))| (k, c as f64 / n as f64))
        .collect()
}

/// Predictions of a probe over a cached set. `light` holds the set's features; when the fovea
/// needs patch tokens that are not in memory, they are read shard by shard.
fn predict_set(
    p: &probe::Probe,
    readout: &str,
    light: &Features,
    cache: &Cache,
    set: SetName,
    device: &Device,
    keep_attention: bool,
) -> Result<probe::Outputs> {
    if readout != "fovea" || !light.patch.is_empty() {
        return Ok(probe::predict(
            p,
            &readout_data(readout, light),
            device,
            keep_attention,
        ));
    }
    let mut out = probe::Outputs::default();
    for k in 0..cache.num_shards(light.n) {
        let f = cache.read(set.name(), k, light.n, true)?;
        let o = probe::predict(p, &Data::Patches(&f), device, keep_attention);
        out.classes = o.classes;
        out.dim = o.dim;
        out.logits.extend(o.logits);
        out.pooled.extend(o.pooled);
        out.attention.extend(o.attention);
    }
    Ok(out)
}
