//! Naming quality with a CLIP checkpoint (COOCO §4.3), for predictions made by any model.
//!
//! Per item, with image and text features L2-normalised and dot products in f64:
//! - **CLIPScore** `2.5 · max(cos(image, "A photo depicts " + prediction), 0)` and
//!   **RefCLIPScore**, the harmonic mean of CLIPScore and `max(max_r cos(candidate, "A photo
//!   depicts " + reference_r), 0)` (Hessel et al. 2021, §3; 0 when both are 0). Hessel et
//!   al.'s reference code takes the text-side maximum without the clip at 0 that the paper's
//!   formula has; the two differ only when every reference is negatively similar. This
//!   follows the paper.
//! - **Text similarity**: the cosine of the CLIP text embeddings of the bare prediction and the
//!   target label (`sim_target`), and of the prediction and the scene label (`sim_scene`).
//! - **Accuracy**: `correct` when `sim_target` is strictly greater than the threshold (0.9);
//!   `correct_levenshtein` when the normalized Levenshtein similarity (`strsim`, over
//!   characters, `1 − distance / max(len)`) of the lower-cased, trimmed prediction and target
//!   is strictly greater than its threshold (0.9).
//!
//! Texts are tokenized with the checkpoint's tokenizer and truncated to its 77 positions, as
//! `clip.tokenize(..., truncate=True)` and transformers' `CLIPTokenizer` do.

use crate::CoocoError;
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::image::{DecodeOptions, ImageProcessor, RgbImage, decode_file};
use bindscope_data::text::Tokenizer;
use bindscope_models::clip::ClipModel;
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The prefix of candidate and reference texts in CLIPScore / RefCLIPScore.
pub const PREFIX: &str = "A photo depicts ";

/// One line of a predictions file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The image the model saw (relative paths are relative to the predictions file).
    pub image: String,
    /// The model's answer.
    pub prediction: String,
    /// The label a correct answer names.
    pub target: String,
    /// The scene label.
    pub scene: String,
    /// Reference names for RefCLIPScore (at least one).
    pub references: Vec<String>,
    /// Any other fields (condition, model, …), kept in the output.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The metrics of one item.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ItemScores {
    /// `2.5 · max(cos(image, candidate), 0)`.
    pub clip_score: f64,
    /// Harmonic mean of `clip_score` and the clipped best reference similarity.
    pub ref_clip_score: f64,
    /// Cosine of the prediction's and the target's text embeddings.
    pub sim_target: f64,
    /// Cosine of the prediction's and the scene's text embeddings.
    pub sim_scene: f64,
    /// `sim_target > threshold`.
    pub correct: bool,
    /// Normalized Levenshtein similarity of prediction and target.
    pub levenshtein: f64,
    /// `levenshtein > levenshtein_threshold`.
    pub correct_levenshtein: bool,
}

/// The CLIP model and its processors.
pub struct ClipScorer {
    model: ClipModel,
    tokenizer: Tokenizer,
    processor: ImageProcessor,
    device: Device,
    /// Threshold of `correct` on `sim_target` (strict).
    pub threshold: f64,
    /// Threshold of `correct_levenshtein` (strict).
    pub levenshtein_threshold: f64,
}

fn normalized(rows: Vec<f32>, d: usize) -> Vec<Vec<f64>> {
    rows.chunks(d)
        .map(|r| {
            let n = r.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            r.iter().map(|&x| x as f64 / n).collect()
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `strsim::normalized_levenshtein` of the lower-cased, trimmed texts.
pub fn levenshtein_similarity(a: &str, b: &str) -> f64 {
    strsim::normalized_levenshtein(&a.trim().to_lowercase(), &b.trim().to_lowercase())
}

impl ClipScorer {
    /// Loads a `CLIPModel` checkpoint with its `tokenizer.json` and `preprocessor_config.json`.
    ///
    /// # Errors
    /// [`CoocoError::Invalid`] naming the checkpoint and what is missing or wrong.
    pub fn load(ckpt: &Checkpoint, device: &Device) -> Result<Self, CoocoError> {
        let err = |e: String| CoocoError::Invalid(format!("--clip {}: {e}", ckpt.spec));
        let model = ClipModel::load(ckpt, device, &LoadOptions::default())
            .map_err(|e| err(e.to_string()))?;
        let tokenizer = Tokenizer::from_checkpoint(ckpt).map_err(|e| err(e.to_string()))?;
        let processor = ImageProcessor::for_checkpoint(ckpt).map_err(|e| err(e.to_string()))?;
        Ok(Self {
            model,
            tokenizer,
            processor,
            device: device.clone(),
            threshold: 0.9,
            levenshtein_threshold: 0.9,
        })
    }

    /// L2-normalised text embeddings, one per text.
    ///
    /// # Errors
    /// [`CoocoError::Invalid`] when tokenization or reading back fails.
    pub fn texts(&self, texts: &[&str]) -> Result<Vec<Vec<f64>>, CoocoError> {
        let enc = self
            .tokenizer
            .encode_batch(texts)
            .map_err(|e| CoocoError::Invalid(e.to_string()))?;
        let (ids, mask) = enc.tensors(&self.device);
        let e = self.model.text_embeds(ids, mask);
        let d = e.dims()[1];
        let host = bindscope_core::device::to_host_f32(e)
            .map_err(|e| CoocoError::Invalid(e.to_string()))?;
        Ok(normalized(host, d))
    }

    /// The L2-normalised image embedding of a file.
    ///
    /// # Errors
    /// [`CoocoError::Image`] naming the file.
    pub fn image(&self, path: &Path) -> Result<Vec<f64>, CoocoError> {
        let img = decode_file(path, &DecodeOptions::hf())?;
        self.image_embedding(&img)
    }

    /// The L2-normalised embedding of an image in memory.
    ///
    /// # Errors
    /// [`CoocoError::Image`] when the processor refuses it.
    pub fn image_embedding(&self, img: &RgbImage) -> Result<Vec<f64>, CoocoError> {
        let px = self
            .processor
            .pixel_values(std::slice::from_ref(img), &self.device)?;
        let e = self.model.image_embeds(px);
        let d = e.dims()[1];
        let host = bindscope_core::device::to_host_f32(e)
            .map_err(|e| CoocoError::Invalid(e.to_string()))?;
        Ok(normalized(host, d).remove(0))
    }

    /// The metrics of one prediction whose image is at `image`.
    ///
    /// # Errors
    /// As [`Self::image`] and [`Self::texts`]; [`CoocoError::Invalid`] without references.
    pub fn score(&self, p: &Prediction, image: &Path) -> Result<ItemScores, CoocoError> {
        let v = self.image(image)?;
        self.score_embedded(p, &v)
    }

    /// The metrics of one prediction given its image's [`Self::image_embedding`].
    ///
    /// # Errors
    /// As [`Self::texts`]; [`CoocoError::Invalid`] without references.
    pub fn score_embedded(&self, p: &Prediction, v: &[f64]) -> Result<ItemScores, CoocoError> {
        if p.references.is_empty() {
            return Err(CoocoError::Invalid(format!(
                "{}: no references for RefCLIPScore",
                p.image
            )));
        }
        let mut texts = vec![format!("{PREFIX}{}", p.prediction)];
        texts.extend(p.references.iter().map(|r| format!("{PREFIX}{r}")));
        texts.extend([p.prediction.clone(), p.target.clone(), p.scene.clone()]);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let e = self.texts(&refs)?;
        let n = p.references.len();
        let cand = &e[0];
        let clip_score = 2.5 * dot(v, cand).max(0.0);
        let best = e[1..=n]
            .iter()
            .map(|r| dot(cand, r))
            .fold(f64::NEG_INFINITY, f64::max)
            .max(0.0);
        let ref_clip_score = if clip_score + best == 0.0 {
            0.0
        } else {
            2.0 * clip_score * best / (clip_score + best)
        };
        let (bare, target, scene) = (&e[n + 1], &e[n + 2], &e[n + 3]);
        let sim_target = dot(bare, target);
        let levenshtein = levenshtein_similarity(&p.prediction, &p.target);
        Ok(ItemScores {
            clip_score,
            ref_clip_score,
            sim_target,
            sim_scene: dot(bare, scene),
            correct: sim_target > self.threshold,
            levenshtein,
            correct_levenshtein: levenshtein > self.levenshtein_threshold,
        })
    }
}

/// Reads a predictions file (JSONL), checking every line.
///
/// # Errors
/// [`CoocoError::Io`] for an unreadable file; [`CoocoError::Invalid`] naming the line and the
/// field for a malformed one, or for an empty file.
pub fn read_predictions(path: &Path) -> Result<Vec<Prediction>, CoocoError> {
    let text = std::fs::read_to_string(path).map_err(|source| CoocoError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let p: Prediction = serde_json::from_str(line).map_err(|e| {
            CoocoError::Invalid(format!(
                "{} line {}: {e} (expected image, prediction, target, scene, references)",
                path.display(),
                i + 1
            ))
        })?;
        if p.references.is_empty() {
            return Err(CoocoError::Invalid(format!(
                "{} line {}: references is empty",
                path.display(),
                i + 1
            )));
        }
        out.push(p);
    }
    if out.is_empty() {
        return Err(CoocoError::Invalid(format!(
            "{}: no predictions",
            path.display()
        )));
    }
    Ok(out)
}

/// What `score` does.
#[derive(Debug, Clone)]
pub struct ScoreConfig {
    /// The predictions (JSONL).
    pub predictions: PathBuf,
    /// The CLIP checkpoint (a directory or `org/name`).
    pub clip: String,
    /// Output directory.
    pub out: PathBuf,
    /// Threshold of `correct`.
    pub threshold: f64,
    /// Threshold of `correct_levenshtein`.
    pub levenshtein_threshold: f64,
}

/// The means over items.
#[derive(Debug, Clone, Serialize)]
pub struct ScoreSummary {
    /// Items scored.
    pub items: usize,
    /// Mean CLIPScore.
    pub clip_score: f64,
    /// Mean RefCLIPScore.
    pub ref_clip_score: f64,
    /// Mean `sim_target`.
    pub sim_target: f64,
    /// Mean `sim_scene`.
    pub sim_scene: f64,
    /// Fraction `correct`.
    pub accuracy: f64,
    /// Fraction `correct_levenshtein`.
    pub accuracy_levenshtein: f64,
    /// The CLIP checkpoint.
    pub clip: String,
    /// The thresholds.
    pub threshold: f64,
    /// The Levenshtein threshold.
    pub levenshtein_threshold: f64,
}

/// Scores a predictions file: `OUT/items.jsonl` (each line with its [`ItemScores`]) and
/// `OUT/summary.json` (the means), written atomically after every item is scored.
///
/// # Errors
/// As [`read_predictions`], [`ClipScorer::load`] and [`ClipScorer::score`] (naming the line).
pub fn run_score(cfg: &ScoreConfig, device: &Device) -> Result<ScoreSummary, CoocoError> {
    let preds = read_predictions(&cfg.predictions)?;
    // The output directory before any scoring, so that a bad --out fails at once.
    std::fs::create_dir_all(&cfg.out).map_err(|source| CoocoError::Io {
        path: cfg.out.clone(),
        source,
    })?;
    // The resolver names the flag most commands take (`--model`); this one is `--clip`.
    let ckpt = Checkpoint::resolve(&cfg.clip)
        .map_err(|e| CoocoError::Invalid(e.to_string().replace("--model", "--clip")))?;
    let mut scorer = ClipScorer::load(&ckpt, device)?;
    scorer.threshold = cfg.threshold;
    scorer.levenshtein_threshold = cfg.levenshtein_threshold;
    let base = cfg
        .predictions
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let progress = bindscope_core::run::progress(preds.len() as u64, "items");
    let mut lines = Vec::new();
    let mut all = Vec::new();
    for (i, p) in preds.iter().enumerate() {
        let image = base.join(&p.image);
        let s = scorer.score(p, &image).map_err(|e| {
            CoocoError::Invalid(format!("{} line {}: {e}", cfg.predictions.display(), i + 1))
        })?;
        let mut v = serde_json::to_value(p).expect("serializes");
        let scores = serde_json::to_value(s).expect("serializes");
        if let (Some(o), Some(sc)) = (v.as_object_mut(), scores.as_object()) {
            o.extend(sc.clone());
        }
        lines.push(serde_json::to_string(&v).expect("serializes"));
        all.push(s);
        progress.inc(1);
    }
    progress.finish_and_clear();
    let n = all.len() as f64;
    let mean = |f: &dyn Fn(&ItemScores) -> f64| all.iter().map(f).sum::<f64>() / n;
    let summary = ScoreSummary {
        items: all.len(),
        clip_score: mean(&|s| s.clip_score),
        ref_clip_score: mean(&|s| s.ref_clip_score),
        sim_target: mean(&|s| s.sim_target),
        sim_scene: mean(&|s| s.sim_scene),
        accuracy: mean(&|s| s.correct as u8 as f64),
        accuracy_levenshtein: mean(&|s| s.correct_levenshtein as u8 as f64),
        clip: cfg.clip.clone(),
        threshold: cfg.threshold,
        levenshtein_threshold: cfg.levenshtein_threshold,
    };
    let items = cfg.out.join("items.jsonl");
    let mut text = lines.join("\n");
    text.push('\n');
    bindscope_core::fsutil::write_atomic(&items, text.as_bytes()).map_err(|source| {
        CoocoError::Io {
            path: items.clone(),
            source,
        }
    })?;
    let sp = cfg.out.join("summary.json");
    let json = serde_json::to_vec_pretty(&summary).expect("serializes");
    bindscope_core::fsutil::write_atomic(&sp, &json).map_err(|source| CoocoError::Io {
        path: sp.clone(),
        source,
    })?;
    Ok(summary)
}
