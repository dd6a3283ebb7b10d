//! Embeddings for SABER: any [`TextEncoder`] (through [`EncoderEmbedder`]) or any other
//! [`TextEmbed`], batched and cached per unique text; images of the items through a
//! [`VisionEncoder`], keyed by caption id.
//!
//! Rows are stored L2-normalised, so cosine similarity is a dot product.

use crate::SaberError;
use crate::generate::McqItem;
use bindscope_core::Checkpoint;
use bindscope_data::image::{DecodeOptions, ImageProcessor, PixelBatch, decode_file};
use bindscope_data::text::{TextPolicy, Tokenizer};
use bindscope_models::{TextEncoder, VisionEncoder, VisionReadout};
use burn::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// L2-normalised embeddings keyed by a string (a text, or a caption id for images).
#[derive(Debug, Clone, Default)]
pub struct EmbeddingTable {
    dim: usize,
    index: HashMap<String, usize>,
    data: Vec<f32>,
}

impl EmbeddingTable {
    /// An empty table of `dim`-dimensional rows.
    pub fn new(dim: usize) -> Self {
        Self {
            dim,
            index: HashMap::new(),
            data: Vec::new(),
        }
    }

    /// Embedding dimension (0 while the table is empty and was created with `default`).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether `key` has a row.
    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Inserts (or replaces) the row of `key`, L2-normalised (an all-zero vector stays zero:
    /// its cosine with anything is 0).
    ///
    /// # Panics
    /// If the length differs from the table's dimension.
    pub fn insert(&mut self, key: &str, v: &[f32]) {
        if self.index.is_empty() && self.dim == 0 {
            self.dim = v.len();
        }
        assert_eq!(
            v.len(),
            self.dim,
            "embedding of length {} in a table of dimension {}",
            v.len(),
            self.dim
        );
        let norm = v
            .iter()
            .map(|x| f64::from(*x) * f64::from(*x))
            .sum::<f64>()
            .sqrt();
        let inv = if norm > 0.0 { (1.0 / norm) as f32 } else { 0.0 };
        let row: Vec<f32> = v.iter().map(|x| x * inv).collect();
        if let Some(&i) = self.index.get(key) {
            self.data[i * self.dim..(i + 1) * self.dim].copy_from_slice(&row);
        } else {
            self.index
                .insert(key.to_string(), self.data.len() / self.dim.max(1));
            self.data.extend(row);
        }
    }

    /// The normalised row of `key`.
    pub fn get(&self, key: &str) -> Option<&[f32]> {
        self.index
            .get(key)
            .map(|&i| &self.data[i * self.dim..(i + 1) * self.dim])
    }

    /// Cosine similarity of two keys.
    pub fn cosine(&self, a: &str, b: &str) -> Option<f32> {
        Some(dot(self.get(a)?, self.get(b)?))
    }
}

/// Dot product, accumulated in eight lanes (vectorisable) then summed in a fixed order: the
/// result depends only on the two vectors.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of vectors of different lengths");
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Something that embeds a batch of texts into `[N][E]` vectors.
pub trait TextEmbed {
    /// Embeds `texts` (one forward pass or more; the caller batches).
    ///
    /// # Errors
    /// Tokenization or model errors.
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, SaberError>;
}

/// A [`TextEncoder`] with its tokenizer on a device: [`TextEncoder::embed_text`] of each batch.
pub struct EncoderEmbedder<'a> {
    /// The tokenizer.
    pub tokenizer: &'a Tokenizer,
    /// The model.
    pub model: &'a dyn TextEncoder,
    /// Where the model runs.
    pub device: &'a Device,
}

/// `[N, E]` tensor → rows on the host.
///
/// # Errors
/// [`ReadError`](bindscope_core::device::ReadError) when the computation failed on its device.
pub fn host_rows(t: Tensor<2>) -> Result<Vec<Vec<f32>>, bindscope_core::device::ReadError> {
    let [n, e] = t.dims();
    let flat = bindscope_core::device::to_host_f32(t)?;
    Ok((0..n).map(|i| flat[i * e..(i + 1) * e].to_vec()).collect())
}

impl TextEmbed for EncoderEmbedder<'_> {
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, SaberError> {
        let (ids, mask) = self.tokenizer.encode_batch(texts)?.tensors(self.device);
        Ok(host_rows(self.model.embed_text(ids, mask))?)
    }
}

/// Embeds every text not yet in `table`, `batch_size` unique texts per call of `embedder`,
/// in order of increasing length (less padding); `progress(done, total)` after each batch.
///
/// # Errors
/// The embedder's errors; [`SaberError::Invalid`] when it returns the wrong number of rows.
pub fn embed_texts_cached(
    embedder: &dyn TextEmbed,
    texts: &[&str],
    table: &mut EmbeddingTable,
    batch_size: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(), SaberError> {
    let mut todo: Vec<&str> = texts
        .iter()
        .copied()
        .filter(|t| !table.contains(t))
        .collect();
    todo.sort_unstable_by(|a, b| a.len().cmp(&b.len()).then(a.cmp(b)));
    todo.dedup();
    let total = todo.len();
    let mut done = 0;
    for batch in todo.chunks(batch_size.max(1)) {
        let rows = embedder.embed_batch(batch)?;
        if rows.len() != batch.len() {
            return Err(SaberError::Invalid(format!(
                "embedder returned {} rows for {} texts",
                rows.len(),
                batch.len()
            )));
        }
        for (t, r) in batch.iter().zip(&rows) {
            table.insert(t, r);
        }
        done += batch.len();
        progress(done, total);
    }
    Ok(())
}

/// Every text of the items (queries and candidates), each once, in item order.
pub fn item_texts(items: &[McqItem]) -> Vec<&str> {
    let mut seen = std::collections::HashSet::new();
    items
        .iter()
        .flat_map(|it| std::iter::once(&it.query).chain(&it.candidates))
        .map(|c| c.text.as_str())
        .filter(|t| seen.insert(*t))
        .collect()
}

/// The text embeddings of all the items' captions with an encoder (the whole pipeline a
/// finetuning loop needs to score SABER text→text).
///
/// # Errors
/// Tokenization or model errors.
pub fn embed_items_text(
    items: &[McqItem],
    tokenizer: &Tokenizer,
    model: &dyn TextEncoder,
    device: &Device,
    batch_size: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<EmbeddingTable, SaberError> {
    let mut table = EmbeddingTable::default();
    let embedder = EncoderEmbedder {
        tokenizer,
        model,
        device,
    };
    embed_texts_cached(
        &embedder,
        &item_texts(items),
        &mut table,
        batch_size,
        progress,
    )?;
    Ok(table)
}

/// The tokenizer of a checkpoint for embedding: `tokenizer` (or the checkpoint's
/// `tokenizer.json`) with the checkpoint's policy ([`TextPolicy::from_checkpoint`]: its
/// `config.json` and, for a sentence-transformers model, `max_seq_length` — 256 for
/// all-MiniLM-L6-v2 — and `do_lower_case`); `max_length`, when given, replaces the length.
///
/// # Errors
/// [`SaberError::Text`] for unreadable files or unknown model types; [`SaberError::Invalid`]
/// for a `max_length` of 0 or beyond the model's `max_position_embeddings`.
pub fn tokenizer_for(
    ckpt: &Checkpoint,
    tokenizer: Option<&Path>,
    max_length: Option<usize>,
) -> Result<Tokenizer, SaberError> {
    let config = ckpt
        .config_json()
        .map_err(|e| SaberError::Invalid(e.to_string()))?;
    let mut policy = TextPolicy::from_config(&config)?;
    if let Some(n) = max_length {
        // The model has no position embedding past its own length: refuse, as transformers does.
        if n == 0 || n > policy.max_length {
            return Err(SaberError::Invalid(format!(
                "--max-length {n}: the text encoder of {} takes 1 to {} tokens \
                 (max_position_embeddings of its config.json)",
                ckpt.dir().display(),
                policy.max_length
            )));
        }
        // The checkpoint's own policy (sentence-transformers lowercasing included), this length.
        policy = TextPolicy::from_checkpoint(ckpt)?.with_max_length(n);
    } else {
        policy = TextPolicy::from_checkpoint(ckpt)?;
    }
    let path: PathBuf = match tokenizer {
        Some(p) => p.to_path_buf(),
        None => ckpt.tokenizer.clone().ok_or_else(|| {
            SaberError::Invalid(format!(
                "{}: no tokenizer.json (pass one explicitly)",
                ckpt.dir().display()
            ))
        })?,
    };
    Ok(Tokenizer::from_file(path, policy)?)
}

/// Image file extensions looked for, in order.
pub const IMAGE_EXTENSIONS: [&str; 4] = ["png", "jpg", "jpeg", "webp"];

/// `dir/<id>.<ext>` for the first extension of [`IMAGE_EXTENSIONS`] that exists.
pub fn find_image(dir: &Path, id: &str) -> Option<PathBuf> {
    IMAGE_EXTENSIONS
        .iter()
        .map(|e| dir.join(format!("{id}.{e}")))
        .find(|p| p.is_file())
}

/// What was found in an images folder.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ImageCoverage {
    /// Captions whose image was read and embedded.
    pub embedded: usize,
    /// Captions without an image file.
    pub missing: usize,
    /// Image files that could not be decoded or preprocessed: `(id, error)`.
    pub unreadable: Vec<(String, String)>,
}

/// Embeds the images of every caption (query and candidates) found in `dir` as `<id>.<ext>`,
/// decoded as the HF processors see them ([`DecodeOptions::hf`]), preprocessed by
/// `processor`, read out with [`VisionReadout::Pooled`]; keyed by caption id.
///
/// Missing and unreadable images are counted, not fatal: the image pairings then use the items
/// whose five images are all present.
///
/// # Errors
/// Only errors of the model run itself.
pub fn embed_item_images(
    items: &[McqItem],
    dir: &Path,
    processor: &ImageProcessor,
    model: &dyn VisionEncoder,
    device: &Device,
    batch_size: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(EmbeddingTable, ImageCoverage), SaberError> {
    let mut cov = ImageCoverage::default();
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for c in items
        .iter()
        .flat_map(|it| std::iter::once(&it.query).chain(&it.candidates))
    {
        match find_image(dir, &c.id) {
            Some(p) => files.push((c.id.clone(), p)),
            None => cov.missing += 1,
        }
    }
    let total = files.len();
    let mut table = EmbeddingTable::default();
    let decode = DecodeOptions::hf();
    let mut done = 0;
    for batch in files.chunks(batch_size.max(1)) {
        let mut ids = Vec::new();
        let mut data: Vec<f32> = Vec::new();
        let mut hw: Option<(usize, usize)> = None;
        for (id, path) in batch {
            // One by one, so that one bad file does not sink the batch.
            let pv = decode_file(path, &decode).and_then(|img| processor.preprocess(&img));
            match pv {
                Ok(pv) if hw.is_none_or(|s| s == (pv.height, pv.width)) => {
                    hw = Some((pv.height, pv.width));
                    ids.push(id.clone());
                    data.extend_from_slice(&pv.data);
                }
                Ok(pv) => cov.unreadable.push((
                    id.clone(),
                    format!(
                        "{}: preprocesses to {}x{}, unlike the rest of its batch",
                        path.display(),
                        pv.width,
                        pv.height
                    ),
                )),
                Err(e) => cov.unreadable.push((id.clone(), e.to_string())),
            }
        }
        if let Some((h, w)) = hw {
            let x = PixelBatch {
                shape: [ids.len(), 3, h, w],
                data,
            }
            .to_tensor(device);
            let rows = host_rows(model.embed(x, VisionReadout::Pooled))?;
            for (id, r) in ids.iter().zip(&rows) {
                table.insert(id, r);
            }
            cov.embedded += ids.len();
        }
        done += batch.len();
        progress(done, total);
    }
    Ok((table, cov))
}
