//! `experiments foveated`: do frozen encoders lose binding information, or does pooling?
//!
//! Seed study "Foveated Probes Recover Localized Binding Information". The scene design
//! (classes, lures, K, λ, counterfactuals, nuisance variants), the readouts, the probe recipe and
//! the metrics are documented in `bindscope_foveated` (`csb`, `csd`, `features`, `probe`,
//! `metrics`); `--help` summarises them.
//!
//! ```text
//! experiments foveated --task csb --model facebook/dinov2-small
//! experiments foveated --task csd --model ./siglip-base --readouts gap,fovea --seeds 0,1,2
//! experiments foveated --task csb --dump-only --dump-images 8            # scenes only
//! ```
//!
//! # Run directory (`runs/foveated/<task>-<model>-<time>/`, or `--out`)
//! - `config.json`: every resolved option (generator, input side, recipe), checkpoint sha256,
//!   model info, feature-cache path, crate versions, git commit, device;
//! - `probes.jsonl`: the resume log, one line per trained (readout, probe, seed);
//! - `results.json`: every metric per (readout, probe) as mean ± std over seeds, extraction and
//!   training wall times, realised scene statistics;
//! - `readout-<name>.csv`: one row per (probe, seed) with every metric, per readout;
//! - `summary.csv`, `top1.svg`, `flip.svg`, `nsr.svg`, `curves-<readout>-<probe>.svg`;
//! - `attention/`: fovea attention maps of the first test scenes (and their first
//!   counterfactual) as PNG; `images/` with `--dump-images`.
//!
//! Features live in a cache shared by runs (`runs/foveated/cache/<model>-<sha>/<task>-<hash>/`,
//! or `--cache-dir`), extracted once per encoder and scene configuration and resumable shard by
//! shard. Re-running the same command resumes: finished shards and finished probes are kept.

use crate::common::{self, ModelOpts};
use anyhow::{Context, Result, anyhow, bail};
use bindscope_data::image::{ImageProcessor, ResizeTo};
use bindscope_foveated::dataset::{Generator, SetName, dump_images};
use bindscope_foveated::features::{Cache, Extractor, FeatureError, Features, Item};
use bindscope_foveated::metrics::{self, FlipStats, NsrStats};
use bindscope_foveated::probe::{self, Data, HeadSpec, PoolSpec, TrainConfig};
use bindscope_foveated::scene::{Scene, Task, Variant, save_png};
use bindscope_foveated::split::SplitSizes;
use bindscope_models::VisionEncoder;
use burn::tensor::Device;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::Digest;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Which study.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskArg {
    /// Colour–shape binding: 6 classes (circle / triangle × red / green / blue) among lures that
    /// make the shape and colour histograms label-independent.
    Csb,
    /// Small-shape detection: a small black circle or triangle among 1–11.5× larger distractors.
    Csd,
    /// Paired colour questions from GQA scene graphs (needs --gqa-dir).
    Gqa,
}

/// Foveated probes: CSB / CSD scenes and GQA colour pairs, readouts over frozen patch tokens.
///
/// Scenes (CSB / CSD): white canvas, 6-colour palette, 20 shapes (2 class shapes + 18
/// distractor-only) in canonical orientations, rendered directly at the encoder's input size
/// (`--size`, default the processor's output size; no resize or crop) and normalized with the
/// checkpoint's preprocessor_config.json. Object sizes are fractions of the side (CSB
/// half-extent 0.037, ≈14 px at 384 and ≈8 px at 224; CSD target 0.02), so a scene is the same
/// at every resolution, the CSD 14 px margin included (14/384 of the side).
///
/// CSB design: class = class shape (circle, triangle) × class colour (red, green, blue); label
/// `i mod 6`. Five lure groups of Uniform{1,2,3} objects each, the target counting as a member
/// of its own shape and colour groups (so the shape and colour histograms carry no label);
/// clutter K ∈ {4, 8, 16, 24} noise objects, each in a class colour with probability
/// λ ∈ {0.25, 0.5, 0.75} (K and λ drawn per scene and recorded); minimum centre distance twice
/// the extent, the extent being the circumradius √2·half-extent; an unplaceable distractor is
/// dropped. CSD design: a black circle or triangle (label `i mod 2`) among K ∈ {2, 4, 8, 16}
/// black distractors of 1–11.5× its size (size law exponent λ ∈ {0.5, 1, 2}); safety circles
/// use the circumradius of each object's box (a conservative bound for round shapes);
/// unplaceable distractors shrink, never drop; a clean K = 0 split. Counterfactuals (CSB: 5, 3
/// or 1 histogram-preserving swaps; CSD: the target's shape flipped) and the 16 nuisance
/// variants are made for test scenes, the only ones the metrics use. The crate docs of
/// bindscope-foveated (csb, csd) give every rule.
///
/// Readouts: gap (mean patch token), summary (CLS / MAP head), oracle (mean of the patches
/// under the target's box), fovea (one learned query over the patch tokens, no temperature).
/// GQA: gap, summary, oracle (the summary token of the target's box cropped and stretched to
/// the input size), oracle-box (mean of the patches under the box), and fovea, which on GQA is
/// the text-conditioned fovea (also accepted as text-fovea). Probes: linear, mlp
/// (Linear(D→128)–GELU–Linear(128→C); GQA Linear(D→512)–ReLU–Dropout–Linear(512→10)). Recipe:
/// Adam lr 1e-3 (ε 1e-8, no weight decay), batch 512, 30 epochs, constant schedule, unweighted
/// cross-entropy, best validation top-1 checkpoint (GQA: weight decay 1e-4, batch 256, 50
/// epochs, inverse-frequency class weights, best validation paired accuracy). Metrics: top-1,
/// counterfactual flip rate, nuisance-to-signal ratio (Σ nuisance variance / Σ mean squared
/// counterfactual change of the pooled vector); GQA: accuracy and paired accuracy.
///
/// Features are cached per encoder (independent of the set sizes, so a smaller run fills the
/// first shards of a larger one) and runs resume.
#[derive(clap::Args, Debug)]
pub struct FoveatedArgs {
    /// csb, csd or gqa.
    #[arg(long, value_enum)]
    task: TaskArg,
    /// Hugging Face id or local checkpoint directory of the encoder.
    #[arg(long, required_unless_present = "dump_only")]
    model: Option<String>,
    /// Readouts, comma-separated: gap, summary, oracle, fovea (gqa also oracle-box; its fovea is
    /// the text-conditioned one).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "gap,summary,oracle,fovea"
    )]
    readouts: Vec<String>,
    /// Probes, comma-separated: linear, mlp.
    #[arg(long, value_delimiter = ',', default_value = "linear,mlp")]
    probes: Vec<String>,
    /// Probe seeds (initialisation, batch order, dropout), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    seeds: Vec<u64>,
    /// Seed of the scenes (and of the GQA split).
    #[arg(long, default_value_t = 42)]
    data_seed: u64,
    /// Training scenes.
    #[arg(long, default_value_t = 6000)]
    train: usize,
    /// Validation scenes.
    #[arg(long, default_value_t = 2000)]
    val: usize,
    /// Test scenes.
    #[arg(long, default_value_t = 2000)]
    test: usize,
    /// CSD clean K = 0 scenes.
    #[arg(long, default_value_t = 500)]
    clean: usize,
    /// Test scenes (the first ones) whose 16 nuisance variants are encoded; default: all.
    #[arg(long)]
    nuisance_scenes: Option<usize>,
    /// Input side in pixels; default: the checkpoint processor's output size (crop size);
    /// gqa: 384.
    #[arg(long)]
    size: Option<usize>,
    /// Anti-aliasing: samples per pixel per axis.
    #[arg(long, default_value_t = 4)]
    supersample: usize,
    /// Images per encoder forward pass.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Probe epochs (the recipe: 30; GQA 50). Change only for smoke runs.
    #[arg(long)]
    epochs: Option<usize>,
    /// Fovea attention maps saved per (readout, probe), from the first test scenes (csb, csd).
    #[arg(long, default_value_t = 6)]
    attention_maps: usize,
    /// Also write the first N scenes of every set as PNG + JSON to `<run>/images/`.
    #[arg(long, default_value_t = 0)]
    dump_images: usize,
    /// Only write scene images (no model, no features): `--dump-images N` scenes per set at
    /// `--size` (default 384) into `--out` (default runs/foveated/scenes-<task>-<seed>).
    /// Takes no `--model`.
    #[arg(long, conflicts_with = "model")]
    dump_only: bool,
    /// GQA: directory with train_sceneGraphs.json, val_sceneGraphs.json and images/<id>.jpg.
    #[arg(long)]
    gqa_dir: Option<PathBuf>,
    /// GQA: skip (and count) objects whose box leaves the image instead of stopping.
    #[arg(long)]
    gqa_lenient: bool,
    /// Feature cache root (default runs/foveated/cache).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Run directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a new run directory even if a matching one exists.
    #[arg(long)]
    fresh: bool,
    #[command(flatten)]
    model_opts: ModelOpts,
}

/// One trained probe: a line of `probes.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ProbeRecord {
    readout: String,
    probe: String,
    seed: u64,
    best_epoch: usize,
    val_top1: f64,
    test_top1: f64,
    /// Test top-1 by clutter level K.
    test_top1_by_k: BTreeMap<usize, f64>,
    flip: FlipStats,
    nsr: Option<NsrStats>,
    nuisance_top1: Option<f64>,
    clean_top1: Option<f64>,
    train_seconds: f64,
    history: Vec<probe::EpochLog>,
}

const READOUTS: [&str; 4] = ["gap", "summary", "oracle", "fovea"];

pub fn run(args: FoveatedArgs, device: &Device, device_spec: &str) -> Result<()> {
    if args.size == Some(0) || args.supersample == 0 {
        bail!("--size and --supersample must be at least 1");
    }
    let task = match args.task {
        TaskArg::Csb => Task::Csb,
        TaskArg::Csd => Task::Csd,
        TaskArg::Gqa => return run_gqa(args, device, device_spec),
    };
    let generator = build_generator(&args, task)?;
    if args.dump_only {
        let side = args.size.unwrap_or(384);
        let n = if args.dump_images == 0 {
            8
        } else {
            args.dump_images
        };
        let dir = args.out.clone().unwrap_or_else(|| {
            common::runs_root("foveated").join(format!("scenes-{}-{}", task.name(), args.data_seed))
        });
        let written = dump_images(&generator, n, side, args.supersample, &dir)
            .with_context(|| format!("writing {}", dir.display()))?;
        println!("{written} scenes written to {}", dir.display());
        return Ok(());
    }
    for r in &args.readouts {
        if !READOUTS.contains(&r.as_str()) {
            bail!(
                "--readouts: unknown readout '{r}' for --task {} (choose from {})",
                task.name(),
                READOUTS.join(", ")
            );
        }
    }
    let heads: Vec<(String, HeadSpec)> = args
        .probes
        .iter()
        .map(|p| match p.as_str() {
            "linear" => Ok((p.clone(), HeadSpec::Linear)),
            "mlp" => Ok((p.clone(), HeadSpec::mlp128())),
            other => Err(anyhow!("--probes: unknown probe '{other}' (linear, mlp)")),
        })
        .collect::<Result<_>>()?;
    if args.seeds.is_empty() {
        bail!("--seeds: at least one seed");
    }
    if args.batch == 0 || args.supersample == 0 {
        bail!("--batch and --supersample must be at least 1");
    }

    // Model, input geometry, extractor.
    let Encoder {
        spec,
        ckpt,
        sha,
        model,
        processor,
    } = load_encoder(&args, device)?;
    let info = model.info();
    let side = match args.size {
        Some(s) => s,
        None => default_side(&processor).with_context(|| format!("'{spec}': pass --size"))?,
    };
    let extractor = Extractor::new(model.as_ref(), &spec, processor.clone(), side, device)?;
    let grid = extractor.grid;

    // Cache and run directory.
    let normalization = json!({
        "image_mean": processor.image_mean, "image_std": processor.image_std,
        "rescale_factor": processor.rescale_factor, "do_rescale": processor.do_rescale, "do_normalize": processor.do_normalize,
    });
    // The cache is shared by runs of any set sizes: every scene is drawn from its own seeded
    // stream (seed, split, index), so the sets of a smaller run are prefixes of a larger one's,
    // and a shard of the wrong length is extracted again (`Cache::missing`).
    let mut scene_design = serde_json::to_value(&generator)?;
    if let Some(o) = scene_design.as_object_mut() {
        o.remove("sizes");
        o.remove("nuisance_scenes");
    }
    let cache_identity = json!({
        "model_sha256": sha, "dtype": args.model_opts.dtype, "generator": scene_design,
        "side": side, "supersample": args.supersample, "normalization": normalization,
    });
    let cache = open_cache(&args, &spec, &sha, task.name(), &cache_identity)?;
    let cache_dir = cache.dir.clone();

    let epochs = args.epochs.unwrap_or(30);
    let identity = json!({
        "study": "foveated", "task": task.name(), "model": spec, "weights_sha256": sha,
        "generator": generator, "side": side, "supersample": args.supersample, "dtype": args.model_opts.dtype,
        "recipe": { "optimizer": "adam", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0,
                    "batch": 512, "epochs": epochs, "schedule": "constant", "loss": "cross-entropy (unweighted)",
                    "selection": "best validation top-1", "mlp": "Linear(D→128)-GELU-Linear(128→C)",
                    "fovea": "q ~ N(0, 0.02²), softmax(q·x_i), no temperature" },
    });
    let dir = common::run_dir(
        "foveated",
        &format!("{}-{}", task.name(), common::slug(&spec)),
        args.out.clone(),
        &identity,
        args.fresh,
    )?;
    if !dir.join("config.json").exists() {
        let config = common::config_json(
            json!({
                "identity": identity,
                "readouts": args.readouts, "probes": args.probes, "seeds": args.seeds,
                "model_info": info, "grid": grid, "processor_normalization": normalization,
                "feature_cache": cache_dir.display().to_string(),
                "checkpoint_files": ckpt.weights.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            }),
            Some((device_spec, device)),
        );
        common::write_json(&dir.join("config.json"), &config)?;
    }
    if args.dump_images > 0 {
        dump_images(
            &generator,
            args.dump_images,
            side,
            args.supersample,
            &dir.join("images"),
        )?;
    }
    eprintln!(
        "foveated: {} on {spec} ({}, {side}×{side}, {}×{} patches of {} px) → {}",
        task.name(),
        info.model_type,
        grid.cells,
        grid.cells,
        grid.patch,
        dir.display()
    );

    // Scenes and features.
    let sets = generator.sets();
    let mut scenes: BTreeMap<SetName, Vec<Scene>> = BTreeMap::new();
    for &s in &sets {
        scenes.insert(s, generator.scenes(s));
    }
    let total_missing: usize = sets
        .iter()
        .map(|s| {
            let n = scenes[s].len();
            cache
                .missing(s.name(), n)
                .iter()
                .map(|&k| cache.shard_items(k, n))
                .sum::<usize>()
        })
        .sum();
    let total: usize = scenes.values().map(Vec::len).sum();
    eprintln!(
        "features: {total_missing} of {total} images to encode ({} cached) in {}",
        total - total_missing,
        cache_dir.display()
    );
    let t_extract = Instant::now();
    if total_missing > 0 {
        let pb = common::progress(total_missing as u64, "encoding scenes");
        for &s in &sets {
            let list = &scenes[&s];
            let ss = args.supersample;
            let make = |r: std::ops::Range<usize>| -> Result<Vec<Item>, FeatureError> {
                Ok(list[r]
                    .iter()
                    .map(|sc| Item::from_scene(sc, side, ss))
                    .collect())
            };
            cache
                .extract(
                    &extractor,
                    s.name(),
                    list.len(),
                    args.batch,
                    &make,
                    &mut |k| pb.inc(k as u64),
                )
                .with_context(|| format!("extracting features of set '{}'", s.name()))?;
        }
        pb.finish_and_clear();
    }
    let extract_seconds = t_extract.elapsed().as_secs_f64();
    drop(extractor);
    drop(model);

    let need_patches = args.readouts.iter().any(|r| r == "fovea");
    let labels = |s: SetName| {
        scenes
            .get(&s)
            .map(|v| v.iter().map(|x| x.label).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    // Train / val / test are held in memory (with patch tokens for the fovea); the larger
    // counterfactual, nuisance and clean sets are streamed shard by shard for the fovea.
    let load = |s: SetName, patches: bool| -> Result<Option<Features>> {
        if !sets.contains(&s) {
            return Ok(None);
        }
        Ok(Some(cache.load(s.name(), &labels(s), patches)?))
    };
    let f_train = load(SetName::Train, need_patches)?.expect("train set");
    let f_val = load(SetName::Val, need_patches)?.expect("val set");
    let f_test = load(SetName::Test, need_patches)?.expect("test set");
    let f_cf = load(SetName::TestCf, false)?.expect("counterfactual set");
    let f_nu = load(SetName::TestNuisance, false)?;
    let f_clean = load(SetName::Clean, false)?;
    let base_of = |s: &[Scene]| -> Vec<usize> {
        s.iter()
            .map(|x| match x.variant {
                Variant::Counterfactual { base } | Variant::Nuisance { base, .. } => base,
                Variant::Base => usize::MAX,
            })
            .collect()
    };
    let cf_base = base_of(&scenes[&SetName::TestCf]);
    let nu_base = scenes
        .get(&SetName::TestNuisance)
        .map(|v| base_of(v))
        .unwrap_or_default();
    let test_k: Vec<usize> = scenes[&SetName::Test].iter().map(|s| s.clutter).collect();

    // Probes.
    let log = dir.join("probes.jsonl");
    let mut done: BTreeMap<(String, String, u64), ProbeRecord> = BTreeMap::new();
    for r in common::read_jsonl::<ProbeRecord>(&log, "probe")? {
        done.insert((r.readout.clone(), r.probe.clone(), r.seed), r);
    }
    let classes = generator.num_classes();
    let t_train = Instant::now();
    for readout in &args.readouts {
        let pool = if readout == "fovea" {
            PoolSpec::Fovea
        } else {
            PoolSpec::Fixed
        };
        for (pname, head) in &heads {
            for &seed in &args.seeds {
                let key = (readout.clone(), pname.clone(), seed);
                if done.contains_key(&key) {
                    continue;
                }
                eprintln!("  training {readout} + {pname} (seed {seed}) …");
                let t0 = Instant::now();
                let cfg = TrainConfig {
                    epochs,
                    ..TrainConfig::synthetic(seed)
                };
                let trained = probe::train(
                    pool,
                    *head,
                    classes,
                    &readout_data(readout, &f_train),
                    &f_train.label,
                    &readout_data(readout, &f_val),
                    &f_val.label,
                    &cfg,
                    device,
                );
                let train_seconds = t0.elapsed().as_secs_f64();
                let keep_attn =
                    pool == PoolSpec::Fovea && args.attention_maps > 0 && seed == args.seeds[0];
                let o_test = probe::predict(
                    &trained.probe,
                    &readout_data(readout, &f_test),
                    device,
                    keep_attn,
                );
                let o_cf = predict_set(
                    &trained.probe,
                    readout,
                    &f_cf,
                    &cache,
                    SetName::TestCf,
                    device,
                    keep_attn,
                )?;
                let p_test = o_test.predictions();
                let p_cf = o_cf.predictions();
                let mut by_k: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
                for (i, &k) in test_k.iter().enumerate() {
                    let e = by_k.entry(k).or_default();
                    e.0 += (p_test[i] == f_test.label[i]) as usize;
                    e.1 += 1;
                }
                let flip =
                    metrics::flip_stats(&p_cf, &f_cf.label, &cf_base, &p_test, &f_test.label);
                let (nsr, nuisance_top1) = match &f_nu {
                    Some(fnu) => {
                        let o_nu = predict_set(
                            &trained.probe,
                            readout,
                            fnu,
                            &cache,
                            SetName::TestNuisance,
                            device,
                            false,
                        )?;
                        let n = metrics::nsr(
                            o_test.dim,
                            &o_test.pooled,
                            &o_cf.pooled,
                            &cf_base,
                            &o_nu.pooled,
                            &nu_base,
                        );
                        (
                            Some(n),
                            Some(metrics::top1(&o_nu.predictions(), &fnu.label)),
                        )
                    }
                    None => (None, None),
                };
                let clean_top1 = match &f_clean {
                    Some(fc) => {
                        let o = predict_set(
                            &trained.probe,
                            readout,
                            fc,
                            &cache,
                            SetName::Clean,
                            device,
                            false,
                        )?;
                        Some(metrics::top1(&o.predictions(), &fc.label))
                    }
                    None => None,
                };
                if keep_attn {
                    save_attention(
                        &dir,
                        readout,
                        pname,
                        &scenes,
                        &o_test,
                        &o_cf,
                        &cf_base,
                        grid,
                        side,
                        args.supersample,
                        args.attention_maps,
                    )?;
                }
                let rec = ProbeRecord {
                    readout: readout.clone(),
                    probe: pname.clone(),
                    seed,
                    best_epoch: trained.best_epoch,
                    val_top1: trained
                        .history
                        .get(trained.best_epoch.saturating_sub(1))
                        .map(|h| h.val_top1)
                        .unwrap_or(f64::NAN),
                    test_top1: metrics::top1(&p_test, &f_test.label),
                    test_top1_by_k: by_k
                        .into_iter()
                        .map(|(k, (c, n))| (k, c as f64 / n as f64))
                        .collect(),
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
                bindscope_core::fsutil::append_line(&log, &serde_json::to_string(&rec)?)?;
                done.insert(key, rec);
            }
        }
    }
    let train_seconds = t_train.elapsed().as_secs_f64();

    let mut records: Vec<&ProbeRecord> = Vec::new();
    for r in &args.readouts {
        for (p, _) in &heads {
            for &s in &args.seeds {
                if let Some(rec) = done.get(&(r.clone(), p.clone(), s)) {
                    records.push(rec);
                }
            }
        }
    }
    let scene_stats = scene_statistics(&scenes);
    write_reports(
        &dir,
        &spec,
        task,
        &records,
        &scene_stats,
        extract_seconds,
        train_seconds,
        &generator,
    )?;
    println!("results: {}", dir.display());
    Ok(())
}

/// The data a synthetic-task readout trains on.
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

fn build_generator(args: &FoveatedArgs, task: Task) -> Result<Generator> {
    let mut g = Generator::new(task, args.data_seed);
    g.sizes = SplitSizes {
        train: args.train,
        val: args.val,
        test: args.test,
        clean: args.clean,
    };
    g.nuisance_scenes = args.nuisance_scenes.unwrap_or(args.test);
    g.validate().map_err(|e| anyhow!("scene generator: {e}"))?;
    Ok(g)
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

/// The encoder of `--model`: its checkpoint, weights hash, vision tower and processor.
struct Encoder {
    spec: String,
    ckpt: bindscope_core::Checkpoint,
    sha: String,
    model: Box<dyn VisionEncoder>,
    processor: ImageProcessor,
}

/// Resolves and loads `--model`; a checkpoint without `preprocessor_config.json` is an error
/// (the pixel normalization would be unknown).
fn load_encoder(args: &FoveatedArgs, device: &Device) -> Result<Encoder> {
    let spec = args.model.clone().context("--model is required")?;
    let ckpt = common::resolve(&spec)?;
    let sha = ckpt.weights_sha256()?;
    let model: Box<dyn VisionEncoder> =
        bindscope_models::registry::load_vision(&ckpt, device, &args.model_opts.load_options())
            .with_context(|| format!("loading vision encoder of '{spec}'"))?;
    let processor = match &ckpt.preprocessor_config {
        Some(p) => ImageProcessor::from_file(p)?,
        None => {
            bail!("'{spec}': no preprocessor_config.json, so the pixel normalization is unknown")
        }
    };
    Ok(Encoder {
        spec,
        ckpt,
        sha,
        model,
        processor,
    })
}

/// Opens the feature cache `<cache root>/<model>-<sha12>/<task>-<hash of identity>`.
fn open_cache(
    args: &FoveatedArgs,
    spec: &str,
    sha: &str,
    task: &str,
    identity: &serde_json::Value,
) -> Result<Cache> {
    let root = args
        .cache_dir
        .clone()
        .unwrap_or_else(|| common::runs_root("foveated").join("cache"));
    let dir = root
        .join(format!(
            "{}-{}",
            common::slug(spec),
            &sha[..12.min(sha.len())]
        ))
        .join(format!("{task}-{}", short_hash(identity)));
    Ok(Cache::open(&dir, identity, 500)?)
}

fn short_hash(v: &serde_json::Value) -> String {
    let digest = sha2::Sha256::digest(v.to_string().as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

#[allow(clippy::too_many_arguments)]
fn save_attention(
    dir: &Path,
    readout: &str,
    probe: &str,
    scenes: &BTreeMap<SetName, Vec<Scene>>,
    o_test: &probe::Outputs,
    o_cf: &probe::Outputs,
    cf_base: &[usize],
    grid: bindscope_foveated::features::Grid,
    side: usize,
    ss: usize,
    n: usize,
) -> Result<()> {
    let p = grid.num_patches();
    let out = dir.join("attention");
    let test = &scenes[&SetName::Test];
    let cfs = &scenes[&SetName::TestCf];
    let pred_t = o_test.predictions();
    let pred_c = o_cf.predictions();
    // One overlay: scene `s`, its attention row `j` in `o`, file tag `tag`.
    let overlay = |s: &Scene, o: &probe::Outputs, j: usize, pred: usize, tag: String| {
        let img = bindscope_foveated::viz::attention_overlay(
            &s.render(side, ss),
            &grid,
            &o.attention[j * p..(j + 1) * p],
            s.target().bbox(),
        );
        let name = format!("{readout}-{probe}-{tag}-y{}-pred{pred}.png", s.label);
        save_png(&img, &out.join(name))
    };
    for i in 0..n.min(test.len()) {
        overlay(&test[i], o_test, i, pred_t[i], format!("test{i:03}"))?;
        if let Some(k) = cf_base.iter().position(|&b| b == i) {
            overlay(&cfs[k], o_cf, k, pred_c[k], format!("test{i:03}-cf"))?;
        }
    }
    Ok(())
}

/// Realised scene statistics (K and λ histograms, drops, regenerations, counterfactual counts).
fn scene_statistics(scenes: &BTreeMap<SetName, Vec<Scene>>) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (set, list) in scenes {
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
    if let Some(cf) = scenes.get(&SetName::TestCf) {
        let mut per_base: BTreeMap<usize, usize> = BTreeMap::new();
        for s in cf {
            if let Variant::Counterfactual { base } = s.variant {
                *per_base.entry(base).or_default() += 1;
            }
        }
        let n_test = scenes.get(&SetName::Test).map(|t| t.len()).unwrap_or(0);
        let mut hist: BTreeMap<usize, usize> = BTreeMap::new();
        for b in 0..n_test {
            *hist.entry(*per_base.get(&b).unwrap_or(&0)).or_default() += 1;
        }
        out.insert("counterfactuals_per_test_scene".into(), json!(hist));
    }
    serde_json::Value::Object(out)
}

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

fn num(v: f64) -> serde_json::Value {
    if v.is_finite() {
        json!(v)
    } else {
        serde_json::Value::Null
    }
}

#[allow(clippy::too_many_arguments)]
fn write_reports(
    dir: &Path,
    spec: &str,
    task: Task,
    records: &[&ProbeRecord],
    scene_stats: &serde_json::Value,
    extract_seconds: f64,
    train_seconds: f64,
    generator: &Generator,
) -> Result<()> {
    // Group by (readout, probe).
    let mut groups: Vec<((String, String), Vec<&ProbeRecord>)> = Vec::new();
    for r in records {
        let key = (r.readout.clone(), r.probe.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    let metric = |rs: &[&ProbeRecord], f: &dyn Fn(&ProbeRecord) -> f64| -> serde_json::Value {
        let (m, s) = mean_std(&rs.iter().map(|r| f(r)).collect::<Vec<_>>());
        json!({ "mean": num(m), "std": num(s), "n": rs.len() })
    };
    let nsr_of = |r: &ProbeRecord| r.nsr.and_then(|n| n.nsr).unwrap_or(f64::NAN);
    let mut table = Vec::new();
    let mut summary_csv = String::from(
        "readout,probe,seeds,test_top1_mean,test_top1_std,flip_mean,flip_std,flip_given_base_correct_mean,stay_mean,nsr_mean,nuisance_top1_mean,clean_top1_mean,val_top1_mean\n",
    );
    for ((readout, probe), rs) in &groups {
        let t1 = mean_std(&rs.iter().map(|r| r.test_top1).collect::<Vec<_>>());
        let fl = mean_std(&rs.iter().map(|r| r.flip.flip).collect::<Vec<_>>());
        let fbc = mean_std(
            &rs.iter()
                .map(|r| r.flip.flip_given_base_correct)
                .collect::<Vec<_>>(),
        );
        let st = mean_std(&rs.iter().map(|r| r.flip.stay).collect::<Vec<_>>());
        let ns = mean_std(&rs.iter().map(|r| nsr_of(r)).collect::<Vec<_>>());
        let nu = mean_std(
            &rs.iter()
                .map(|r| r.nuisance_top1.unwrap_or(f64::NAN))
                .collect::<Vec<_>>(),
        );
        let cl = mean_std(
            &rs.iter()
                .map(|r| r.clean_top1.unwrap_or(f64::NAN))
                .collect::<Vec<_>>(),
        );
        let va = mean_std(&rs.iter().map(|r| r.val_top1).collect::<Vec<_>>());
        summary_csv.push_str(&format!(
            "{readout},{probe},{},{},{},{},{},{},{},{},{},{},{}\n",
            rs.len(),
            t1.0,
            t1.1,
            fl.0,
            fl.1,
            fbc.0,
            st.0,
            ns.0,
            nu.0,
            cl.0,
            va.0
        ));
        let mut ks: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for r in rs {
            for (k, v) in &r.test_top1_by_k {
                ks.entry(*k).or_default().push(*v);
            }
        }
        table.push(json!({
            "readout": readout, "probe": probe, "seeds": rs.iter().map(|r| r.seed).collect::<Vec<_>>(),
            "test_top1": metric(rs, &|r| r.test_top1),
            "test_top1_by_clutter": ks.iter().map(|(k, v)| (k.to_string(), json!(num(mean_std(v).0)))).collect::<serde_json::Map<_, _>>(),
            "val_top1": metric(rs, &|r| r.val_top1),
            "flip_rate": metric(rs, &|r| r.flip.flip),
            "flip_rate_given_base_correct": metric(rs, &|r| r.flip.flip_given_base_correct),
            "stay_rate": metric(rs, &|r| r.flip.stay),
            "counterfactuals": rs[0].flip.n,
            "nsr": metric(rs, &nsr_of),
            "nsr_detail": rs.iter().map(|r| json!(r.nsr)).collect::<Vec<_>>(),
            "nuisance_top1": metric(rs, &|r| r.nuisance_top1.unwrap_or(f64::NAN)),
            "clean_top1": metric(rs, &|r| r.clean_top1.unwrap_or(f64::NAN)),
            "best_epoch": rs.iter().map(|r| r.best_epoch).collect::<Vec<_>>(),
            "train_seconds": rs.iter().map(|r| r.train_seconds).collect::<Vec<_>>(),
        }));

        // Per-readout CSV rows are written below.
    }
    bindscope_core::fsutil::write_atomic(&dir.join("summary.csv"), summary_csv.as_bytes())?;
    let mut by_readout: BTreeMap<&str, String> = BTreeMap::new();
    for r in records {
        let csv = by_readout.entry(&r.readout).or_insert_with(|| {
            "probe,seed,best_epoch,val_top1,test_top1,flip,flip_given_base_correct,stay,counterfactuals,nsr,nsr_nuisance,nsr_signal,nuisance_top1,clean_top1,train_seconds\n"
                .to_string()
        });
        let opt = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            r.probe,
            r.seed,
            r.best_epoch,
            r.val_top1,
            r.test_top1,
            r.flip.flip,
            r.flip.flip_given_base_correct,
            r.flip.stay,
            r.flip.n,
            opt(r.nsr.and_then(|n| n.nsr)),
            opt(r.nsr.map(|n| n.nuisance)),
            opt(r.nsr.map(|n| n.signal)),
            opt(r.nuisance_top1),
            opt(r.clean_top1),
            r.train_seconds
        ));
    }
    for (readout, csv) in &by_readout {
        bindscope_core::fsutil::write_atomic(
            &dir.join(format!("readout-{readout}.csv")),
            csv.as_bytes(),
        )?;
    }
    common::write_json(
        &dir.join("results.json"),
        &json!({
            "model": spec, "task": task.name(), "classes": generator.class_names(),
            "chance": 1.0 / generator.num_classes() as f64,
            "results": table, "scenes": scene_stats,
            "extract_seconds_this_invocation": extract_seconds, "train_seconds_this_invocation": train_seconds,
        }),
    )?;
    // Plots.
    let bars = |f: &dyn Fn(&[&ProbeRecord]) -> f64| -> Vec<(String, f64)> {
        groups
            .iter()
            .map(|((r, p), rs)| (format!("{r}+{p}"), f(rs)))
            .collect()
    };
    let chance = 1.0 / generator.num_classes() as f64;
    bar_svg(
        &dir.join("top1.svg"),
        &format!("Test top-1 — {spec} ({})", task.name()),
        &bars(&|rs| mean_std(&rs.iter().map(|r| r.test_top1).collect::<Vec<_>>()).0),
        Some(chance),
        Some(1.0),
    )?;
    bar_svg(
        &dir.join("flip.svg"),
        &format!("Counterfactual flip rate — {spec}"),
        &bars(&|rs| mean_std(&rs.iter().map(|r| r.flip.flip).collect::<Vec<_>>()).0),
        None,
        Some(1.0),
    )?;
    let nsr_bars = bars(&|rs| mean_std(&rs.iter().map(|r| nsr_of(r)).collect::<Vec<_>>()).0);
    if nsr_bars.iter().any(|(_, v)| v.is_finite()) {
        bar_svg(
            &dir.join("nsr.svg"),
            &format!("Nuisance-to-signal ratio — {spec}"),
            &nsr_bars,
            Some(1.0),
            None,
        )?;
    }
    for ((r, p), rs) in &groups {
        curves_svg(
            &dir.join(format!("curves-{r}-{p}.svg")),
            &format!("{r} + {p}: validation top-1 per epoch"),
            rs,
        )?;
    }
    // Console table.
    println!(
        "\n{:<10} {:<7} {:>16} {:>16} {:>10}",
        "readout", "probe", "test top-1", "flip rate", "NSR"
    );
    for t in &table {
        let g = |k: &str| {
            (
                t[k]["mean"].as_f64().unwrap_or(f64::NAN),
                t[k]["std"].as_f64().unwrap_or(f64::NAN),
            )
        };
        let (a, sa) = g("test_top1");
        let (f, sf) = g("flip_rate");
        let (n, _) = g("nsr");
        println!(
            "{:<10} {:<7} {:>8.4} ± {:<5.4} {:>8.4} ± {:<5.4} {:>10.3}",
            t["readout"].as_str().unwrap_or(""),
            t["probe"].as_str().unwrap_or(""),
            a,
            sa,
            f,
            sf,
            n
        );
    }
    Ok(())
}

use crate::plot::COLORS;

fn svg(
    path: &Path,
    draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<()>,
) -> Result<()> {
    crate::plot::render_sized(path, (760, 420), draw)
}

/// One bar per (readout, probe); an optional dashed reference line (chance / NSR = 1).
fn bar_svg(
    path: &Path,
    title: &str,
    bars: &[(String, f64)],
    reference: Option<f64>,
    top: Option<f64>,
) -> Result<()> {
    let finite: Vec<f64> = bars.iter().map(|b| b.1).filter(|v| v.is_finite()).collect();
    let hi = top
        .unwrap_or_else(|| {
            finite
                .iter()
                .copied()
                .fold(reference.unwrap_or(0.0), f64::max)
                * 1.15
        })
        .max(1e-9);
    svg(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((0..bars.len()).into_segmented(), 0f64..hi)
            .map_err(|e| anyhow!("{e:?}"))?;
        let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        chart
            .configure_mesh()
            .x_labels(bars.len())
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .draw_series(
                bars.iter()
                    .enumerate()
                    .filter(|(_, b)| b.1.is_finite())
                    .map(|(i, b)| {
                        let c = COLORS[i / 2 % COLORS.len()];
                        Rectangle::new(
                            [
                                (SegmentValue::Exact(i), 0.0),
                                (SegmentValue::Exact(i + 1), b.1.min(hi)),
                            ],
                            c.mix(0.8).filled(),
                        )
                    }),
            )
            .map_err(|e| anyhow!("{e:?}"))?;
        if let Some(r) = reference {
            chart
                .draw_series(LineSeries::new(
                    vec![
                        (SegmentValue::Exact(0), r),
                        (SegmentValue::Exact(bars.len()), r),
                    ],
                    BLACK.stroke_width(1),
                ))
                .map_err(|e| anyhow!("{e:?}"))?;
        }
        Ok(())
    })
}

fn curves_svg(path: &Path, title: &str, rs: &[&ProbeRecord]) -> Result<()> {
    let epochs = rs.iter().map(|r| r.history.len()).max().unwrap_or(1).max(1);
    svg(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(50)
            .build_cartesian_2d(1f64..epochs as f64, 0f64..1f64)
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .x_desc("epoch")
            .y_desc("val top-1")
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        for (i, r) in rs.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    r.history.iter().map(|h| (h.epoch as f64, h.val_top1)),
                    c.stroke_width(2),
                ))
                .map_err(|e| anyhow!("{e:?}"))?
                .label(format!("seed {}", r.seed))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// GQA paired colour questions.

/// One trained GQA probe: a line of `probes.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct GqaRecord {
    readout: String,
    probe: String,
    seed: u64,
    /// MLP: the dropout chosen on validation paired accuracy (and each candidate's score).
    dropout: Option<f64>,
    dropout_candidates: Vec<(f64, f64)>,
    best_epoch: usize,
    val_accuracy: f64,
    val_paired_accuracy: f64,
    test_accuracy: f64,
    test_paired_accuracy: f64,
    train_seconds: f64,
    history: Vec<probe::EpochLog>,
}

const GQA_READOUTS: [&str; 5] = ["gap", "summary", "oracle", "oracle-box", "text-fovea"];
const GQA_DROPOUTS: [f64; 4] = [0.1, 0.2, 0.3, 0.5];

fn write_text_embeddings(path: &Path, rows: &[f32], dim: usize) -> Result<()> {
    let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![rows.len() / dim.max(1), dim],
        &bytes,
    )
    .map_err(|e| anyhow!("{e}"))?;
    let out = safetensors::serialize([("text", view)], None).map_err(|e| anyhow!("{e}"))?;
    bindscope_core::fsutil::write_atomic(path, &out)?;
    Ok(())
}

fn read_text_embeddings(path: &Path, n: usize) -> Result<(Vec<f32>, usize)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let t = st
        .tensor("text")
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    if t.shape().len() != 2 || t.shape()[0] != n {
        bail!(
            "{}: {:?} text embeddings, expected {n} rows",
            path.display(),
            t.shape()
        );
    }
    Ok((
        t.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        t.shape()[1],
    ))
}

/// The GQA readouts of `--readouts`: `fovea` (in the default list) means the text-conditioned
/// fovea, `text-fovea`.
fn gqa_readouts(requested: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for r in requested {
        let r = if r == "fovea" {
            "text-fovea"
        } else {
            r.as_str()
        };
        if !GQA_READOUTS.contains(&r) {
            bail!(
                "--readouts: unknown readout '{r}' for --task gqa (choose from {})",
                GQA_READOUTS.join(", ")
            );
        }
        if !out.iter().any(|o| o == r) {
            out.push(r.to_string());
        }
    }
    Ok(out)
}

fn run_gqa(args: FoveatedArgs, device: &Device, device_spec: &str) -> Result<()> {
    use bindscope_foveated::gqa;
    use bindscope_foveated::split::Split;
    let gdir_buf = args.gqa_dir.clone().context(
        "--task gqa needs --gqa-dir (train_sceneGraphs.json, val_sceneGraphs.json, images/)",
    )?;
    let readouts = gqa_readouts(&args.readouts)?;
    for p in &args.probes {
        if p != "linear" && p != "mlp" {
            bail!("--probes: unknown probe '{p}' (linear, mlp)");
        }
    }
    let gdir = gdir_buf.as_path();
    let graphs = gqa::load_scene_graphs(gdir)?;
    let pairs = gqa::build_pairs(&graphs, args.data_seed, !args.gqa_lenient)?;
    drop(graphs);
    if pairs.report.pairs == 0 {
        bail!(
            "{}: no question pairs survive the rules ({})",
            gdir.display(),
            serde_json::to_string(&pairs.report)?
        );
    }
    gqa::check_images(gdir, &pairs.questions)?;
    eprintln!(
        "gqa: {} pairs on {} images {:?} (train/val/test)",
        pairs.report.pairs, pairs.report.pair_images, pairs.report.pairs_per_split
    );

    let Encoder {
        spec,
        ckpt,
        sha,
        model,
        processor,
    } = load_encoder(&args, device)?;
    let info = model.info();
    let side = args.size.unwrap_or(384);
    let extractor = Extractor::new(model.as_ref(), &spec, processor.clone(), side, device)?;
    let grid = extractor.grid;
    let want_text = readouts.iter().any(|r| r == "text-fovea");

    let pairs_hash = short_hash(&serde_json::to_value(&pairs)?);
    let normalization = json!({ "image_mean": processor.image_mean, "image_std": processor.image_std, "rescale_factor": processor.rescale_factor });
    let cache_identity = json!({ "model_sha256": sha, "dtype": args.model_opts.dtype, "gqa_pairs": pairs_hash,
                                 "gqa_dir": gdir.display().to_string(), "side": side, "normalization": normalization });
    let cache = open_cache(&args, &spec, &sha, "gqa", &cache_identity)?;
    let cache_dir = cache.dir.clone();
    let epochs = args.epochs.unwrap_or(50);
    let identity = json!({
        "study": "foveated", "task": "gqa", "model": spec, "weights_sha256": sha, "gqa_pairs": pairs_hash,
        "data_seed": args.data_seed, "side": side, "dtype": args.model_opts.dtype,
        "recipe": { "optimizer": "adam", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 1e-4,
                    "batch": 256, "epochs": epochs, "loss": "cross-entropy, inverse-frequency class weights",
                    "selection": "best validation paired accuracy",
                    "mlp": "Linear(d→512)-ReLU-Dropout-Linear(512→10), dropout chosen on validation from {0.1,0.2,0.3,0.5}",
                    "text_fovea": "LN(t)ᵀ W_q LN(x_i) / T, log T init log √d_patch, W_q ~ N(0, 0.02²)" },
    });
    let dir = common::run_dir(
        "foveated",
        &format!("gqa-{}", common::slug(&spec)),
        args.out.clone(),
        &identity,
        args.fresh,
    )?;
    if !dir.join("config.json").exists() {
        common::write_json(
            &dir.join("config.json"),
            &common::config_json(
                json!({
                    "identity": identity, "readouts": readouts, "probes": args.probes, "seeds": args.seeds,
                    "gqa_dir": gdir.display().to_string(), "build_report": pairs.report, "model_info": info, "grid": grid,
                    "feature_cache": cache_dir.display().to_string(),
                }),
                Some((device_spec, device)),
            ),
        )?;
    }

    // Features: full images and oracle crops per split, and text embeddings.
    let splits = [Split::Train, Split::Val, Split::Test];
    let idx: BTreeMap<Split, Vec<usize>> = splits
        .iter()
        .map(|&s| (s, pairs.split_indices(s)))
        .collect();
    let t_extract = Instant::now();
    for &s in &splits {
        let items = &idx[&s];
        let qs = &pairs.questions;
        let make = |crop: bool| {
            move |r: std::ops::Range<usize>| -> Result<Vec<Item>, FeatureError> {
                let mut last: Option<(String, bindscope_data::image::RgbImage)> = None;
                let input_err = |id: &str, e: gqa::GqaError| {
                    FeatureError::Input(format!("GQA image {id}: {e}"))
                };
                r.map(|k| {
                    let q = &qs[items[k]];
                    if last.as_ref().map(|l| &l.0) != Some(&q.image_id) {
                        let img = gqa::load_image(gdir, &q.image_id)
                            .map_err(|e| input_err(&q.image_id, e))?;
                        last = Some((q.image_id.clone(), img));
                    }
                    let img = &last.as_ref().expect("decoded").1;
                    let (full, bbox, c) =
                        gqa::inputs(img, q, side).map_err(|e| input_err(&q.image_id, e))?;
                    Ok(if crop {
                        Item {
                            image: c,
                            label: q.label,
                            bbox: [0.0, 0.0, 1.0, 1.0],
                        }
                    } else {
                        Item {
                            image: full,
                            label: q.label,
                            bbox,
                        }
                    })
                })
                .collect()
            }
        };
        for (suffix, crop) in [("", false), ("-crop", true)] {
            let name = format!("{}{suffix}", s.name());
            if cache.missing(&name, items.len()).is_empty() {
                continue;
            }
            let pb = common::progress(items.len() as u64, &format!("encoding {name}"));
            let f = make(crop);
            cache.extract(&extractor, &name, items.len(), args.batch, &f, &mut |k| {
                pb.inc(k as u64)
            })?;
            pb.finish_and_clear();
        }
        if want_text
            && !cache
                .dir
                .join(format!("text-{}.safetensors", s.name()))
                .exists()
        {
            let tok =
                bindscope_data::text::Tokenizer::from_checkpoint(&ckpt).with_context(|| {
                    format!("'{spec}': the text-conditioned fovea needs the checkpoint's tokenizer")
                })?;
            let text_model = bindscope_models::registry::load_text(
                &ckpt,
                device,
                &args.model_opts.load_options(),
            )
            .with_context(|| {
                format!(
                    "'{spec}': the text-conditioned fovea needs a text tower in the same checkpoint"
                )
            })?;
            let mut rows = Vec::new();
            let mut dim = 0;
            for chunk in items.chunks(64) {
                let texts: Vec<&str> = chunk
                    .iter()
                    .map(|&i| pairs.questions[i].text.as_str())
                    .collect();
                let (ids, mask) = tok.encode_batch(&texts)?.tensors(device);
                let e = text_model.embed_text(ids, mask);
                dim = e.dims()[1];
                rows.extend(bindscope_core::device::to_host_f32(e)?);
            }
            write_text_embeddings(
                &cache.dir.join(format!("text-{}.safetensors", s.name())),
                &rows,
                dim,
            )?;
        }
    }
    let extract_seconds = t_extract.elapsed().as_secs_f64();
    drop(extractor);
    drop(model);

    let labels =
        |s: Split| -> Vec<usize> { idx[&s].iter().map(|&i| pairs.questions[i].label).collect() };
    let need_patches = want_text;
    let full: BTreeMap<Split, Features> = splits
        .iter()
        .map(|&s| Ok((s, cache.load(s.name(), &labels(s), need_patches)?)))
        .collect::<Result<_>>()?;
    let crops: BTreeMap<Split, Features> = splits
        .iter()
        .map(|&s| {
            Ok((
                s,
                cache.load(&format!("{}-crop", s.name()), &labels(s), false)?,
            ))
        })
        .collect::<Result<_>>()?;
    let texts: BTreeMap<Split, (Vec<f32>, usize)> = if want_text {
        splits
            .iter()
            .map(|&s| {
                Ok((
                    s,
                    read_text_embeddings(
                        &cache.dir.join(format!("text-{}.safetensors", s.name())),
                        idx[&s].len(),
                    )?,
                ))
            })
            .collect::<Result<_>>()?
    } else {
        BTreeMap::new()
    };
    // Pairs as (i, i+1) within each split (members are adjacent in the question list).
    let pairs_of = |s: Split| -> Vec<(usize, usize)> {
        (0..idx[&s].len() / 2).map(|k| (2 * k, 2 * k + 1)).collect()
    };
    let weights = gqa::class_weights(&labels(Split::Train));

    let log = dir.join("probes.jsonl");
    let mut done: BTreeMap<(String, String, u64), GqaRecord> = BTreeMap::new();
    if log.exists() {
        let text = std::fs::read_to_string(&log)?;
        for (n, line) in text.lines().enumerate() {
            if let Ok(r) = serde_json::from_str::<GqaRecord>(line) {
                done.insert((r.readout.clone(), r.probe.clone(), r.seed), r);
            } else if text.ends_with('\n') || n + 1 < text.lines().count() {
                bail!("{}:{}: not a probe record", log.display(), n + 1);
            }
        }
    }
    let t_train = Instant::now();
    for readout in &readouts {
        let data = |s: Split| -> Data<'_> {
            let f = &full[&s];
            match readout.as_str() {
                "gap" | "summary" => readout_data(readout, f),
                // The patch tokens under the box; "oracle" is the crop's own summary.
                "oracle-box" => readout_data("oracle", f),
                "oracle" => Data::Pooled {
                    x: &crops[&s].summary,
                    dim: crops[&s].e,
                },
                _ => {
                    let (t, d_text) = &texts[&s];
                    Data::PatchesText {
                        feats: f,
                        text: t,
                        d_text: *d_text,
                    }
                }
            }
        };
        let pool = if readout == "text-fovea" {
            PoolSpec::TextFovea {
                d_text: texts[&Split::Train].1,
            }
        } else {
            PoolSpec::Fixed
        };
        for pname in &args.probes {
            for &seed in &args.seeds {
                let key = (readout.clone(), pname.clone(), seed);
                if done.contains_key(&key) {
                    continue;
                }
                eprintln!("  training {readout} + {pname} (seed {seed}) …");
                let t0 = Instant::now();
                let cfg = TrainConfig {
                    epochs,
                    batch: 256,
                    lr: 1e-3,
                    weight_decay: 1e-4,
                    class_weights: Some(weights.clone()),
                    seed,
                    selection: probe::Selection::Paired(pairs_of(Split::Val)),
                };
                let candidates: Vec<(Option<f64>, HeadSpec)> = if pname == "mlp" {
                    GQA_DROPOUTS
                        .iter()
                        .map(|&p| {
                            (
                                Some(p),
                                HeadSpec::Mlp {
                                    hidden: 512,
                                    act: probe::Act::Relu,
                                    dropout: p,
                                },
                            )
                        })
                        .collect()
                } else {
                    vec![(None, HeadSpec::Linear)]
                };
                let (tr, va, te) = (data(Split::Train), data(Split::Val), data(Split::Test));
                let mut best: Option<(Option<f64>, probe::Trained)> = None;
                let mut scores = Vec::new();
                for (p, head) in candidates {
                    let t = probe::train(
                        pool,
                        head,
                        gqa::LABELS.len(),
                        &tr,
                        &full[&Split::Train].label,
                        &va,
                        &full[&Split::Val].label,
                        &cfg,
                        device,
                    );
                    if let Some(p) = p {
                        scores.push((p, t.best_val));
                    }
                    if best.as_ref().is_none_or(|b| t.best_val > b.1.best_val) {
                        best = Some((p, t));
                    }
                }
                let (dropout, trained) = best.expect("at least one candidate");
                let eval = |d: &Data, s: Split| -> (f64, f64) {
                    let pred = probe::predict(&trained.probe, d, device, false).predictions();
                    let y = &full[&s].label;
                    (
                        metrics::top1(&pred, y),
                        metrics::paired_accuracy(&pred, y, &pairs_of(s)),
                    )
                };
                let (va_acc, va_pair) = eval(&va, Split::Val);
                let (te_acc, te_pair) = eval(&te, Split::Test);
                let rec = GqaRecord {
                    readout: readout.clone(),
                    probe: pname.clone(),
                    seed,
                    dropout,
                    dropout_candidates: scores,
                    best_epoch: trained.best_epoch,
                    val_accuracy: va_acc,
                    val_paired_accuracy: va_pair,
                    test_accuracy: te_acc,
                    test_paired_accuracy: te_pair,
                    train_seconds: t0.elapsed().as_secs_f64(),
                    history: trained.history,
                };
                eprintln!("    test accuracy {te_acc:.4}, paired {te_pair:.4}");
                bindscope_core::fsutil::append_line(&log, &serde_json::to_string(&rec)?)?;
                done.insert(key, rec);
            }
        }
    }
    let train_seconds = t_train.elapsed().as_secs_f64();

    // Reports.
    let mut table = Vec::new();
    let mut summary = String::from(
        "readout,probe,seeds,test_accuracy_mean,test_accuracy_std,test_paired_mean,test_paired_std,val_paired_mean\n",
    );
    let mut by_readout: BTreeMap<String, String> = BTreeMap::new();
    let mut bars = Vec::new();
    for readout in &readouts {
        for pname in &args.probes {
            let rs: Vec<&GqaRecord> = args
                .seeds
                .iter()
                .filter_map(|&s| done.get(&(readout.clone(), pname.clone(), s)))
                .collect();
            if rs.is_empty() {
                continue;
            }
            let acc = mean_std(&rs.iter().map(|r| r.test_accuracy).collect::<Vec<_>>());
            let pa = mean_std(
                &rs.iter()
                    .map(|r| r.test_paired_accuracy)
                    .collect::<Vec<_>>(),
            );
            let vp = mean_std(&rs.iter().map(|r| r.val_paired_accuracy).collect::<Vec<_>>());
            summary.push_str(&format!(
                "{readout},{pname},{},{},{},{},{},{}\n",
                rs.len(),
                acc.0,
                acc.1,
                pa.0,
                pa.1,
                vp.0
            ));
            bars.push((format!("{readout}+{pname}"), pa.0));
            table.push(json!({
                "readout": readout, "probe": pname, "seeds": rs.iter().map(|r| r.seed).collect::<Vec<_>>(),
                "test_accuracy": { "mean": num(acc.0), "std": num(acc.1) },
                "test_paired_accuracy": { "mean": num(pa.0), "std": num(pa.1) },
                "val_paired_accuracy": { "mean": num(vp.0), "std": num(vp.1) },
                "dropout": rs.iter().map(|r| r.dropout).collect::<Vec<_>>(),
            }));
            let csv = by_readout.entry(readout.clone()).or_insert_with(|| {
                "probe,seed,dropout,best_epoch,val_accuracy,val_paired_accuracy,test_accuracy,test_paired_accuracy,train_seconds\n".into()
            });
            for r in &rs {
                csv.push_str(&format!(
                    "{},{},{},{},{},{},{},{},{}\n",
                    r.probe,
                    r.seed,
                    r.dropout.map(|d| d.to_string()).unwrap_or_default(),
                    r.best_epoch,
                    r.val_accuracy,
                    r.val_paired_accuracy,
                    r.test_accuracy,
                    r.test_paired_accuracy,
                    r.train_seconds
                ));
            }
        }
    }
    bindscope_core::fsutil::write_atomic(&dir.join("summary.csv"), summary.as_bytes())?;
    for (r, csv) in &by_readout {
        bindscope_core::fsutil::write_atomic(
            &dir.join(format!("readout-{r}.csv")),
            csv.as_bytes(),
        )?;
    }
    bar_svg(
        &dir.join("paired.svg"),
        &format!("GQA paired accuracy — {spec}"),
        &bars,
        None,
        Some(1.0),
    )?;
    common::write_json(
        &dir.join("results.json"),
        &json!({ "model": spec, "task": "gqa", "labels": gqa::LABELS, "build_report": pairs.report, "results": table,
                 "extract_seconds_this_invocation": extract_seconds, "train_seconds_this_invocation": train_seconds }),
    )?;
    println!(
        "\n{:<12} {:<7} {:>10} {:>10}",
        "readout", "probe", "accuracy", "paired"
    );
    for t in &table {
        println!(
            "{:<12} {:<7} {:>10.4} {:>10.4}",
            t["readout"].as_str().unwrap_or(""),
            t["probe"].as_str().unwrap_or(""),
            t["test_accuracy"]["mean"].as_f64().unwrap_or(f64::NAN),
            t["test_paired_accuracy"]["mean"]
                .as_f64()
                .unwrap_or(f64::NAN)
        );
    }
    println!("results: {}", dir.display());
    Ok(())
}
