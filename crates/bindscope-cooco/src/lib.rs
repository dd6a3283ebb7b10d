//! # bindscope-cooco
//!
//! COOCO ("Common Objects Out-of-Context: Semantic Violation in Scenes", §3–§7): a COCO target
//! is replaced by objects of high, medium or low relatedness to the scene, Gaussian noise is
//! added to the target, the context or both, and a vision–language model is asked to name the
//! object in the box.
//!
//! This crate holds the release layout and its checks ([`dataset`]), the study's image
//! preparation and seeded noise ([`prepare`]), the region prompts of four model families
//! ([`prompt`]), the `prepare` run ([`run_prepare`]) behind `experiments cooco prepare`, which
//! writes every prepared image and a `prompts.jsonl` that any model's outputs can be matched
//! against, the CLIP metrics of the answers ([`score`]: CLIPScore, RefCLIPScore, text
//! similarities, accuracy), the output–scene mixed-effects model ([`lme`], REML), and the
//! study's run ([`run`]: LLaVA-OneVision, `bindscope_models::llava_onevision`, names the object
//! of every image under every noise condition; the answers are scored, aggregated with bootstrap
//! intervals and plotted by [`report`], and the attention allocation of App. C is measured by
//! [`attention`]).

pub mod attention;
pub mod dataset;
pub mod lme;
pub mod prepare;
pub mod prompt;
pub mod report;
pub mod run;
pub mod score;
#[cfg(test)]
mod tests;

use bindscope_data::image::{DecodeOptions, decode_file, save_png};
use prepare::{NoiseArea, apply_noise, noise_stream, prepare};
use prompt::{Family, normalized_box, region_prompt};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What went wrong, naming the file or item.
#[derive(Debug, thiserror::Error)]
pub enum CoocoError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file is malformed.
    #[error("{}: {message}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An image could not be decoded or written.
    #[error(transparent)]
    Image(#[from] bindscope_data::image::ImageError),
    /// Records, options or inputs that cannot be used.
    #[error("{0}")]
    Invalid(String),
}

/// What `prepare` does.
#[derive(Debug, Clone, Serialize)]
pub struct PrepareConfig {
    /// The dataset directory (`metadata.json`, `images/`).
    pub data: PathBuf,
    /// Where to write `images/` and `prompts.jsonl` (created; must not hold a
    /// `prompts.jsonl` already).
    pub out: PathBuf,
    /// Whose region syntax the prompts use.
    pub family: Family,
    /// The noise area.
    pub area: NoiseArea,
    /// The noise level λ (the standard deviation in units of 255).
    pub level: f64,
    /// Seed of the noise streams.
    pub seed: u64,
    /// Leave invalid records out (listed in `invalid.json`) instead of failing.
    pub skip_invalid: bool,
}

/// One line of `prompts.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct PromptLine {
    /// The metadata file name of the source image.
    pub image: String,
    /// The prepared PNG, relative to the output directory.
    pub prepared: String,
    /// The family whose syntax `prompt` uses.
    pub family: String,
    /// The exact user text, `<image>` marker included.
    pub prompt: String,
    /// `[x, y, w, h]` in the prepared image.
    pub r#box: [f64; 4],
    /// `[x1, y1, x2, y2]` divided by the prepared image's width and height, 4 decimals.
    pub box_normalized: [f64; 4],
    /// `[W, H]` of the prepared image.
    pub size: [usize; 2],
    /// The noise area.
    pub area: String,
    /// The noise level λ.
    pub level: f64,
    /// The record's `scene`.
    pub scene: String,
    /// The record's `target`.
    pub target: String,
    /// The label a correct answer names (`swapped_object`, else `target`).
    pub expected: String,
    /// `rel_level`.
    pub rel_level: String,
}

/// What `prepare` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct PrepareSummary {
    /// Images prepared.
    pub prepared: usize,
    /// Records marked `excluded`.
    pub excluded: usize,
    /// Invalid records left out (with `skip_invalid`).
    pub invalid: Vec<dataset::Invalid>,
    /// `prompts.jsonl`.
    pub prompts: PathBuf,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> CoocoError + '_ {
    move |source| CoocoError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Prepares every record of the dataset for one (area, level) condition: the resized, padded
/// and noised image as `OUT/images/<stem>.png` and one [`PromptLine`] per image in
/// `OUT/prompts.jsonl` (written last, atomically), with `invalid.json` listing what
/// `skip_invalid` left out.
///
/// # Errors
/// [`CoocoError::Invalid`] for a level outside [0, 10] or an existing `prompts.jsonl`; as
/// [`dataset::load`]; the first image that cannot be decoded or written, by name.
pub fn run_prepare(cfg: &PrepareConfig) -> Result<PrepareSummary, CoocoError> {
    if !(0.0..=10.0).contains(&cfg.level) || !cfg.level.is_finite() {
        return Err(CoocoError::Invalid(format!(
            "noise level {} is outside [0, 10] (λ: the standard deviation in units of 255)",
            cfg.level
        )));
    }
    let prompts_path = cfg.out.join("prompts.jsonl");
    if prompts_path.exists() {
        return Err(CoocoError::Invalid(format!(
            "{} exists: choose another --out",
            prompts_path.display()
        )));
    }
    let ds = dataset::load(&cfg.data, cfg.skip_invalid)?;
    let images_out = cfg.out.join("images");
    std::fs::create_dir_all(&images_out).map_err(io(&images_out))?;
    let progress = bindscope_core::run::progress(ds.records.len() as u64, "images");
    let mut lines = Vec::with_capacity(ds.records.len());
    let mut invalid = ds.invalid.clone();
    for r in &ds.records {
        let img = decode_file(ds.image_path(r), &DecodeOptions::hf())?;
        let mut p = match prepare(&img, r.target_bbox) {
            Ok(p) => p,
            Err(e) if cfg.skip_invalid => {
                invalid.push(dataset::Invalid {
                    file: r.file.clone(),
                    reason: e.to_string(),
                });
                progress.inc(1);
                continue;
            }
            Err(e) => return Err(CoocoError::Invalid(format!("{}: {e}", r.file))),
        };
        let mut rng = noise_stream(cfg.seed, &r.file, cfg.area, cfg.level);
        apply_noise(&mut p.image, p.bbox, cfg.area, cfg.level, &mut rng);
        let stem = Path::new(&r.file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| r.file.clone());
        let rel = format!("images/{stem}.png");
        save_png(&p.image, cfg.out.join(&rel))?;
        let size = [p.image.width, p.image.height];
        lines.push(PromptLine {
            image: r.file.clone(),
            prepared: rel,
            family: cfg.family.name().into(),
            prompt: region_prompt(cfg.family, p.bbox, size),
            r#box: p.bbox,
            box_normalized: normalized_box(p.bbox, size),
            size,
            area: cfg.area.name().into(),
            level: cfg.level,
            scene: r.scene.clone(),
            target: r.target.clone(),
            expected: r.expected_label().into(),
            rel_level: r.rel_level.name().into(),
        });
        progress.inc(1);
    }
    progress.finish_and_clear();
    let mut buf = Vec::new();
    for l in &lines {
        serde_json::to_writer(&mut buf, l).expect("a prompt line serializes");
        buf.write_all(b"\n").expect("writing to memory");
    }
    if cfg.skip_invalid {
        let p = cfg.out.join("invalid.json");
        let text = serde_json::to_vec_pretty(&invalid).expect("serializes");
        bindscope_core::fsutil::write_atomic(&p, &text).map_err(io(&p))?;
    }
    bindscope_core::fsutil::write_atomic(&prompts_path, &buf).map_err(io(&prompts_path))?;
    Ok(PrepareSummary {
        prepared: lines.len(),
        excluded: ds.excluded,
        invalid,
        prompts: prompts_path,
    })
}
