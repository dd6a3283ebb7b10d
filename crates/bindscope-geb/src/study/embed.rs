//! The frozen embedder's embeddings of a GEB data directory, computed once and cached per
//! embedder identity ([`model_identity`]: weights, preprocessing, tokenizer) (module [`crate::readout::embeddings`] for the file format).
//!
//! Images are keyed by their `image` path as the data writes it (relative to `images/`), so
//! a training conversation and an evaluation item of the same file share a row. The image
//! embedding is the encoder's standard one ([`VisionReadout::Pooled`]: CLIP's projected
//! `image_embeds`, SigLIP / DINOv2 `pooler_output`), after the checkpoint's own preprocessing
//! (`preprocessor_config.json`). The question embedding of VL-joint with a two-tower pair is the
//! text encoder's sentence embedding of the question text (its own pooling), keyed by
//! [`question_key`]`(image, question)`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::LoadOptions;
use bindscope_core::run::RunContext;
use bindscope_data::image::{DecodeOptions, ImageProcessor, PixelBatch, decode_file};
use bindscope_data::text::Tokenizer;
use bindscope_models::VisionReadout;
use bindscope_models::registry::{open_text, open_vision};

use crate::readout::embeddings::{EmbeddingFile, question_key};

/// The texts or images one slot needs, by key.
#[derive(Debug, Clone, Default)]
pub struct Needs {
    /// Image paths relative to `images/`.
    pub images: BTreeSet<String>,
    /// `(key, question)` pairs.
    pub questions: Vec<(String, String)>,
}

impl Needs {
    /// Adds a question about `image`.
    pub fn question(&mut self, image: &str, question: &str) {
        let key = question_key(image, question);
        if !self.questions.iter().any(|(k, _)| *k == key) {
            self.questions.push((key, question.to_string()));
        }
    }
}

/// Image embeddings of `needs.images` under `root`, `batch` at a time; every unreadable or
/// missing image is listed (the first 20) and nothing is returned when there is one.
///
/// # Errors
/// A model that cannot be opened, unreadable images (named), a device failure.
pub fn embed_images(
    spec: &str,
    root: &Path,
    needs: &Needs,
    batch: usize,
    ctx: &RunContext,
) -> Result<(EmbeddingFile, String)> {
    let opened = open_vision(spec, &ctx.device, &LoadOptions::default())
        .with_context(|| format!("--embedder {spec}"))?;
    let processor = ImageProcessor::for_checkpoint(&opened.checkpoint)
        .with_context(|| format!("--embedder {spec}: preprocessing"))?;
    let ids: Vec<&String> = needs.images.iter().collect();
    let mut bad = Vec::new();
    let mut rows = Vec::new();
    let mut dim = 0;
    let bar = bindscope_core::run::progress(ids.len() as u64, "embedding images");
    for chunk in ids.chunks(batch.max(1)) {
        let mut data = Vec::new();
        let mut shape = None;
        for id in chunk {
            let path = root.join(id);
            match decode_file(&path, &DecodeOptions::hf()).and_then(|i| processor.preprocess(&i)) {
                Ok(pv) => {
                    shape.get_or_insert((pv.height, pv.width));
                    data.extend_from_slice(&pv.data);
                }
                Err(e) => bad.push(format!("{}: {e}", path.display())),
            }
        }
        if !bad.is_empty() {
            bar.inc(chunk.len() as u64);
            continue;
        }
        let (h, w) = shape.ok_or_else(|| anyhow!("empty batch"))?;
        let x = PixelBatch {
            shape: [chunk.len(), 3, h, w],
            data,
        }
        .to_tensor(&ctx.device);
        let e = opened.model.embed(x, VisionReadout::Pooled);
        dim = e.dims()[1];
        rows.extend(bindscope_core::device::to_host_f32(e).map_err(|e| anyhow!("{e}"))?);
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    if !bad.is_empty() {
        bail!(
            "{} of {} image(s) could not be read (nothing was embedded):\n{}",
            bad.len(),
            ids.len(),
            bad.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
        );
    }
    Ok((
        EmbeddingFile {
            ids: ids.into_iter().cloned().collect(),
            dim,
            rows,
        },
        opened.weights_sha256,
    ))
}

/// Question embeddings of `needs.questions` with the text encoder `spec`.
///
/// # Errors
/// A model or tokenizer that cannot be opened, a device failure.
pub fn embed_questions(
    spec: &str,
    needs: &Needs,
    batch: usize,
    ctx: &RunContext,
) -> Result<(EmbeddingFile, String)> {
    let opened = open_text(spec, &ctx.device, &LoadOptions::default())
        .with_context(|| format!("--text-embedder {spec}"))?;
    let tok = Tokenizer::from_checkpoint(&opened.checkpoint)
        .with_context(|| format!("--text-embedder {spec}"))?;
    let mut rows = Vec::new();
    let mut dim = 0;
    let bar = bindscope_core::run::progress(needs.questions.len() as u64, "embedding questions");
    for chunk in needs.questions.chunks(batch.max(1)) {
        let texts: Vec<&str> = chunk.iter().map(|(_, q)| q.as_str()).collect();
        let (ids, mask) = tok.encode_batch(&texts)?.tensors(&ctx.device);
        let e = opened.model.embed_text(ids, mask);
        dim = e.dims()[1];
        rows.extend(bindscope_core::device::to_host_f32(e).map_err(|e| anyhow!("{e}"))?);
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok((
        EmbeddingFile {
            ids: needs.questions.iter().map(|(k, _)| k.clone()).collect(),
            dim,
            rows,
        },
        opened.weights_sha256,
    ))
}

/// What an embedder's output depends on, as 12 hex digits: the SHA-256 of its weights' hash,
/// its `config.json`, its `preprocessor_config.json` and its `tokenizer.json` (those it has).
///
/// # Errors
/// An unresolvable spec or unreadable files.
pub fn model_identity(spec: &str) -> Result<String> {
    use sha2::{Digest, Sha256};
    let ckpt = bindscope_core::Checkpoint::resolve(spec).with_context(|| spec.to_string())?;
    let mut h = Sha256::new();
    h.update(ckpt.weights_sha256()?.as_bytes());
    h.update(
        std::fs::read(&ckpt.config)
            .with_context(|| format!("reading {}", ckpt.config.display()))?,
    );
    for f in [&ckpt.preprocessor_config, &ckpt.tokenizer]
        .into_iter()
        .flatten()
    {
        h.update(std::fs::read(f).with_context(|| format!("reading {}", f.display()))?);
    }
    Ok(h.finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The cache path of `slot` for an embedder in `dir`:
/// `<dir>/<slug(spec)>-<identity>.<slot>.safetensors` ([`model_identity`]).
pub fn cache_path(dir: &Path, spec: &str, identity: &str, slot: &str) -> PathBuf {
    dir.join(format!(
        "{}-{identity}.{slot}.safetensors",
        bindscope_core::run::slug(spec)
    ))
}
