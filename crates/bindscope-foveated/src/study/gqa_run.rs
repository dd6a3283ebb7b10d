//! The GQA run: paired colour questions, features of the full images and the oracle crops,
//! question embeddings for the text-conditioned fovea, probes, reports.

use super::{
    Config, Encoder, LogRecord, ProbeKey, Recipe, best_candidate, check_probes, open_cache,
    open_encoder, readout_data, report, run_dir, short_hash, train_grid, unknown_readout,
    write_config,
};
use crate::features::{Cache, Extractor, FeatureError, Features, Item};
use crate::gqa::{self, GqaPairs, Question};
use crate::metrics;
use crate::probe::{self, Act, Data, EpochLog, HeadSpec, PoolSpec, Selection, TrainConfig};
use crate::split::Split;
use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::options::Dtype;
use bindscope_core::run::{Output, RunContext, progress};
use bindscope_data::text::Tokenizer;
use bindscope_models::TextEncoder;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The readouts of GQA (`fovea` is accepted for `text-fovea`, [`gqa_readouts`]).
const GQA_READOUTS: [&str; 5] = ["gap", "summary", "oracle", "oracle-box", "text-fovea"];
/// The MLP dropouts tried; the best on validation paired accuracy is kept.
const GQA_DROPOUTS: [f64; 4] = [0.1, 0.2, 0.3, 0.5];
/// The splits, in extraction order.
const SPLITS: [Split; 3] = [Split::Train, Split::Val, Split::Test];

/// One trained GQA probe: a line of `probes.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct GqaRecord {
    pub(super) readout: String,
    pub(super) probe: String,
    pub(super) seed: u64,
    /// MLP: the dropout chosen on validation paired accuracy (and each candidate's score).
    pub(super) dropout: Option<f64>,
    pub(super) dropout_candidates: Vec<(f64, f64)>,
    pub(super) best_epoch: usize,
    pub(super) val_accuracy: f64,
    pub(super) val_paired_accuracy: f64,
    pub(super) test_accuracy: f64,
    pub(super) test_paired_accuracy: f64,
    pub(super) train_seconds: f64,
    pub(super) history: Vec<EpochLog>,
}

impl LogRecord for GqaRecord {
    fn key(&self) -> ProbeKey {
        (self.readout.clone(), self.probe.clone(), self.seed)
    }
}

/// What decides the numbers of a GQA run: `config.json`'s `identity`, and the values the run
/// computes with.
#[derive(Debug, Serialize)]
struct Identity<'a> {
    study: &'static str,
    task: &'static str,
    model: &'a str,
    weights_sha256: &'a str,
    gqa_pairs: String,
    data_seed: u64,
    side: usize,
    dtype: Dtype,
    recipe: &'a Recipe,
}

/// The GQA heads: linear, and `Linear(D→512)–ReLU–Dropout–Linear(512→10)` with the dropout
/// chosen from [`GQA_DROPOUTS`].
fn heads() -> BTreeMap<String, Vec<HeadSpec>> {
    let mlps = GQA_DROPOUTS
        .iter()
        .map(|&dropout| HeadSpec::Mlp {
            hidden: 512,
            act: Act::Relu,
            dropout,
        })
        .collect();
    BTreeMap::from([
        ("linear".to_string(), vec![HeadSpec::Linear]),
        ("mlp".to_string(), mlps),
    ])
}

/// The GQA recipe: Adam lr 1e-3 with weight decay 1e-4, batch 256, `epochs`, cross-entropy
/// with `class_weights`, best validation paired accuracy.
pub(super) fn train_config(epochs: usize, class_weights: Vec<f32>) -> TrainConfig {
    TrainConfig {
        epochs,
        batch: 256,
        lr: 1e-3,
        weight_decay: 1e-4,
        class_weights: Some(class_weights),
        seed: 0,
        selection: Selection::AdjacentPairs,
    }
}

/// A GQA run ([`super::run`]).
pub(super) fn run(config: &Config, output: &Output, ctx: &RunContext) -> Result<report::GqaReport> {
    let gdir = config.gqa_dir.as_deref().context(
        "--task gqa needs --gqa-dir (train_sceneGraphs.json, val_sceneGraphs.json, images/)",
    )?;
    let readouts = gqa_readouts(&config.readouts)?;
    let heads = heads();
    check_probes(&heads, &config.probes)?;
    let pairs = load_pairs(gdir, config)?;
    let device = &ctx.device;

    let enc = open_encoder(config, device)?;
    let info = enc.model.info();
    let side = config.image_size.unwrap_or(384);
    let extractor = Extractor::new(
        enc.model.as_ref(),
        &enc.spec,
        enc.processor.clone(),
        side,
        device,
    )?;
    let grid = extractor.grid;
    let want_text = readouts.iter().any(|r| r == "text-fovea");
    // The text-conditioned fovea needs the checkpoint's tokenizer and text tower: checked
    // before the run directory is made or any image is encoded.
    let text = if want_text {
        Some(text_tower(&enc, config, device)?)
    } else {
        None
    };

    let pairs_hash = short_hash(&serde_json::to_value(&pairs)?);
    let p = &enc.processor;
    let normalization = json!({ "image_mean": p.image_mean, "image_std": p.image_std, "rescale_factor": p.rescale_factor });
    let cache_identity = json!({ "model_sha256": enc.sha, "dtype": config.dtype, "gqa_pairs": pairs_hash,
                                 "gqa_dir": gdir.display().to_string(), "side": side, "normalization": normalization });
    let cache = open_cache(config, &enc, "gqa", &cache_identity)?;
    let splits = SplitIndex::new(&pairs);
    let recipe = Recipe::new(
        train_config(
            config.epochs.unwrap_or(50),
            gqa::class_weights(&splits.labels(Split::Train)),
        ),
        heads,
    );
    let identity = Identity {
        study: "foveated",
        task: "gqa",
        model: &enc.spec,
        weights_sha256: &enc.sha,
        gqa_pairs: pairs_hash,
        data_seed: config.data_seed,
        side,
        dtype: config.dtype,
        recipe: &recipe,
    };
    let (dir, identity_json) = run_dir(output, "gqa", &enc.spec, &identity)?;
    write_config(
        &dir,
        ctx,
        json!({
            "identity": identity_json, "readouts": readouts, "probes": config.probes, "seeds": config.seeds,
            "gqa_dir": gdir.display().to_string(), "build_report": pairs.report, "model_info": info, "grid": grid,
            "feature_cache": cache.dir.display().to_string(),
        }),
    )?;

    // Features: full images and oracle crops per split, and text embeddings.
    let t_extract = Instant::now();
    let inputs = Inputs {
        dir: gdir,
        questions: &pairs.questions,
        splits: &splits,
    };
    inputs.extract(&cache, &extractor, config, text)?;
    let extract_seconds = t_extract.elapsed().as_secs_f64();
    drop(extractor);
    drop(enc.model);

    let feats = SplitFeatures::load(&cache, &splits, want_text)?;
    let trainer = Trainer {
        recipe: identity.recipe,
        feats: &feats,
        splits: &splits,
        device,
    };
    let t_train = Instant::now();
    let done = train_grid(
        &dir.join("probes.jsonl"),
        &readouts,
        &config.probes,
        &config.seeds,
        |readout, probe, seed| trainer.train(readout, probe, seed),
    )?;
    let train_seconds = t_train.elapsed().as_secs_f64();

    let results = report::gqa(
        &dir,
        &enc.spec,
        &pairs.report,
        &done,
        (&readouts, &config.probes, &config.seeds),
        extract_seconds,
        train_seconds,
    )?;
    println!("results: {}", dir.display());
    Ok(report::GqaReport { dir, results })
}

/// The GQA readouts of `--readouts`: `fovea` (in the default list) means the text-conditioned
/// fovea, `text-fovea`; both given is an error (a repeated name already is: [`super::Config::check`]).
fn gqa_readouts(requested: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for r in requested {
        let r = if r == "fovea" {
            "text-fovea"
        } else {
            r.as_str()
        };
        if !GQA_READOUTS.contains(&r) {
            return Err(unknown_readout(r, "gqa", &GQA_READOUTS));
        }
        if out.iter().any(|o| o == r) {
            bail!(
                "--readouts: fovea and text-fovea are the same readout on --task gqa (the text-conditioned fovea): give one"
            );
        }
        out.push(r.to_string());
    }
    Ok(out)
}

/// The question pairs of the scene graphs in `gdir`, their images checked.
fn load_pairs(gdir: &Path, config: &Config) -> Result<GqaPairs> {
    let graphs = gqa::load_scene_graphs(gdir)?;
    let pairs = gqa::build_pairs(&graphs, config.data_seed, !config.gqa_lenient)?;
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
    Ok(pairs)
}

/// The questions of each split (indices into the question list, pair members adjacent).
struct SplitIndex<'a> {
    pairs: &'a GqaPairs,
    idx: BTreeMap<Split, Vec<usize>>,
}

impl<'a> SplitIndex<'a> {
    fn new(pairs: &'a GqaPairs) -> Self {
        let idx = SPLITS
            .iter()
            .map(|&s| (s, pairs.split_indices(s)))
            .collect();
        Self { pairs, idx }
    }

    fn get(&self, s: Split) -> &[usize] {
        &self.idx[&s]
    }

    fn labels(&self, s: Split) -> Vec<usize> {
        self.idx[&s]
            .iter()
            .map(|&i| self.pairs.questions[i].label)
            .collect()
    }

    /// The pairs of split `s`, `(i, i + 1)` in its item order.
    fn pairs_of(&self, s: Split) -> Vec<(usize, usize)> {
        probe::adjacent_pairs(self.idx[&s].len())
    }
}

/// The cached question embeddings of split `s`.
fn text_path(cache: &Cache, s: Split) -> PathBuf {
    cache.dir.join(format!("text-{}.safetensors", s.name()))
}

/// The encoder inputs of a GQA run: the images of `dir` and the questions of each split.
struct Inputs<'a> {
    dir: &'a Path,
    questions: &'a [Question],
    splits: &'a SplitIndex<'a>,
}

impl Inputs<'_> {
    /// Encodes what the cache lacks: per split the full images (`<split>`), the oracle crops
    /// (`<split>-crop`) and, with the text tower of the text-conditioned fovea, the questions.
    fn extract(
        &self,
        cache: &Cache,
        extractor: &Extractor,
        config: &Config,
        text: Option<(Tokenizer, Box<dyn TextEncoder>)>,
    ) -> Result<()> {
        for &s in &SPLITS {
            let items = self.splits.get(s);
            for (suffix, crop) in [("", false), ("-crop", true)] {
                let name = format!("{}{suffix}", s.name());
                if cache.missing(&name, items.len()).is_empty() {
                    continue;
                }
                let pb = progress(items.len() as u64, &format!("encoding {name}"));
                let make = self.items(items, extractor.grid.side, crop);
                cache.extract(
                    extractor,
                    &name,
                    items.len(),
                    config.batch,
                    &make,
                    &mut |k| pb.inc(k as u64),
                )?;
                pb.finish_and_clear();
            }
            let path = text_path(cache, s);
            if let Some((tok, model)) = &text
                && !path.exists()
            {
                self.embed(tok, model.as_ref(), items, &extractor.device, &path)?;
            }
        }
        Ok(())
    }

    /// The items `range` of the split `items` as encoder inputs: the whole image with the box
    /// scaled to the side, or (`crop`) the box's crop with the whole canvas as its box.
    fn items<'b>(
        &'b self,
        items: &'b [usize],
        side: usize,
        crop: bool,
    ) -> impl Fn(std::ops::Range<usize>) -> Result<Vec<Item>, FeatureError> + 'b {
        move |r| {
            let mut last: Option<(String, bindscope_data::image::RgbImage)> = None;
            let input_err =
                |id: &str, e: gqa::GqaError| FeatureError::Input(format!("GQA image {id}: {e}"));
            r.map(|k| {
                let q = &self.questions[items[k]];
                if last.as_ref().map(|l| &l.0) != Some(&q.image_id) {
                    let img = gqa::load_image(self.dir, &q.image_id)
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
    }

    /// Embeds the questions `items` with the text tower and writes them to `path`.
    fn embed(
        &self,
        tok: &Tokenizer,
        model: &dyn TextEncoder,
        items: &[usize],
        device: &Device,
        path: &Path,
    ) -> Result<()> {
        let mut rows = Vec::new();
        let mut dim = 0;
        for chunk in items.chunks(64) {
            let texts: Vec<&str> = chunk
                .iter()
                .map(|&i| self.questions[i].text.as_str())
                .collect();
            let (ids, mask) = tok.encode_batch(&texts)?.tensors(device);
            let e = model.embed_text(ids, mask);
            dim = e.dims()[1];
            rows.extend(bindscope_core::device::to_host_f32(e)?);
        }
        write_text_embeddings(path, &rows, dim)
    }
}

/// The tokenizer and text tower of the encoder's checkpoint (the text-conditioned fovea).
fn text_tower(
    enc: &Encoder,
    config: &Config,
    device: &Device,
) -> Result<(Tokenizer, Box<dyn TextEncoder>)> {
    let spec = &enc.spec;
    let tok = Tokenizer::from_checkpoint(&enc.ckpt).with_context(|| {
        format!("'{spec}': the text-conditioned fovea needs the checkpoint's tokenizer")
    })?;
    let model =
        bindscope_models::registry::load_text(&enc.ckpt, device, &config.dtype.load_options())
            .with_context(|| {
                format!(
                    "'{spec}': the text-conditioned fovea needs a text tower in the same checkpoint"
                )
            })?;
    Ok((tok, model))
}

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

/// The cached features of each split: full images (with patch tokens for the text fovea),
/// oracle crops, question embeddings `(rows, dim)`.
struct SplitFeatures {
    full: BTreeMap<Split, Features>,
    crops: BTreeMap<Split, Features>,
    texts: BTreeMap<Split, (Vec<f32>, usize)>,
}

impl SplitFeatures {
    fn load(cache: &Cache, splits: &SplitIndex, want_text: bool) -> Result<Self> {
        let need_patches = want_text;
        let load_all = |suffix: &str, patches: bool| -> Result<BTreeMap<Split, Features>> {
            SPLITS
                .iter()
                .map(|&s| {
                    let name = format!("{}{suffix}", s.name());
                    Ok((s, cache.load(&name, &splits.labels(s), patches)?))
                })
                .collect()
        };
        let full = load_all("", need_patches)?;
        let crops = load_all("-crop", false)?;
        let texts = if want_text {
            SPLITS
                .iter()
                .map(|&s| {
                    let t = read_text_embeddings(&text_path(cache, s), splits.get(s).len())?;
                    Ok((s, t))
                })
                .collect::<Result<_>>()?
        } else {
            BTreeMap::new()
        };
        Ok(Self { full, crops, texts })
    }

    /// The data readout `readout` trains on in split `s`.
    fn data(&self, readout: &str, s: Split) -> Data<'_> {
        let f = &self.full[&s];
        match readout {
            "gap" | "summary" => readout_data(readout, f),
            // The patch tokens under the box; "oracle" is the crop's own summary.
            "oracle-box" => readout_data("oracle", f),
            "oracle" => Data::Pooled {
                x: &self.crops[&s].summary,
                dim: self.crops[&s].e,
            },
            _ => {
                let (t, d_text) = &self.texts[&s];
                Data::PatchesText {
                    feats: f,
                    text: t,
                    d_text: *d_text,
                }
            }
        }
    }
}

/// Trains and evaluates one (readout, probe, seed) of a GQA run.
struct Trainer<'a> {
    recipe: &'a Recipe,
    feats: &'a SplitFeatures,
    splits: &'a SplitIndex<'a>,
    device: &'a Device,
}

impl Trainer<'_> {
    fn train(&self, readout: &str, pname: &str, seed: u64) -> Result<GqaRecord> {
        let (full, device) = (&self.feats.full, self.device);
        let pool = if readout == "text-fovea" {
            PoolSpec::TextFovea {
                d_text: self.feats.texts[&Split::Train].1,
            }
        } else {
            PoolSpec::Fixed
        };
        let t0 = Instant::now();
        let cfg = self.recipe.for_seed(seed);
        let data = |s: Split| self.feats.data(readout, s);
        let (tr, va, te) = (data(Split::Train), data(Split::Val), data(Split::Test));
        let (head, trained, scores) = best_candidate(&self.recipe.heads[pname], |head| {
            probe::train(
                pool,
                head,
                gqa::LABELS.len(),
                &tr,
                &full[&Split::Train].label,
                &va,
                &full[&Split::Val].label,
                &cfg,
                device,
            )
        });
        let dropout_of = |h: &HeadSpec| match h {
            HeadSpec::Mlp { dropout, .. } => Some(*dropout),
            HeadSpec::Linear => None,
        };
        let eval = |d: &Data, s: Split| -> (f64, f64) {
            let pred = probe::predict(&trained.probe, d, device, false).predictions();
            let y = &full[&s].label;
            (
                metrics::top1(&pred, y),
                metrics::paired_accuracy(&pred, y, &self.splits.pairs_of(s)),
            )
        };
        let (va_acc, va_pair) = eval(&va, Split::Val);
        let (te_acc, te_pair) = eval(&te, Split::Test);
        let rec = GqaRecord {
            readout: readout.to_string(),
            probe: pname.to_string(),
            seed,
            dropout: dropout_of(&head),
            dropout_candidates: scores
                .iter()
                .filter_map(|(h, score)| dropout_of(h).map(|p| (p, *score)))
                .collect(),
            best_epoch: trained.best_epoch,
            val_accuracy: va_acc,
            val_paired_accuracy: va_pair,
            test_accuracy: te_acc,
            test_paired_accuracy: te_pair,
            train_seconds: t0.elapsed().as_secs_f64(),
            history: trained.history,
        };
        eprintln!("    test accuracy {te_acc:.4}, paired {te_pair:.4}");
        Ok(rec)
    }
}
