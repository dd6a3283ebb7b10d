//! Embedding files: the frozen embedder's output, computed once per (embedder, mode) and
//! reused, or computed elsewhere and imported (`--embeddings FILE`) so an embedder bindscope
//! does not implement can be scored.
//!
//! A safetensors file with one tensor `embeddings` (F32, `[N, d]`) and the header metadata
//! `ids`: a JSON list of `N` distinct strings, row `i` belonging to `ids[i]`. The ids are image
//! ids for an image embedding, and `<image id>#<question hash>` for a VL-joint question
//! embedding ([`question_key`]). In Python:
//!
//! ```python
//! from safetensors.torch import save_file
//! save_file({"embeddings": e.float().contiguous()}, "emb.safetensors",
//!           metadata={"ids": json.dumps(ids)})
//! ```

use std::collections::HashMap;
use std::path::Path;

use sha2::{Digest, Sha256};

/// An embedding table keyed by id.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingFile {
    /// Row ids, distinct.
    pub ids: Vec<String>,
    /// `d`.
    pub dim: usize,
    /// `[N, d]` row-major.
    pub rows: Vec<f32>,
}

/// The key of a VL-joint embedding: the image id, `#`, and the first 16 hex digits of the
/// SHA-256 of the question's UTF-8 text.
pub fn question_key(image_id: &str, question: &str) -> String {
    let h = Sha256::digest(question.as_bytes());
    let hex: String = h.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{image_id}#{hex}")
}

impl EmbeddingFile {
    /// Reads and checks a file (module docs).
    ///
    /// # Errors
    /// Text naming the file: unreadable, no `embeddings` tensor or not F32 `[N, d]`, no `ids`
    /// metadata or not a JSON list of strings, a count that differs from `N`, a repeated id,
    /// or a non-finite value (with its row's id).
    pub fn read(path: &Path) -> Result<Self, String> {
        let at = |m: String| format!("{}: {m}", path.display());
        let bytes = std::fs::read(path).map_err(|e| at(e.to_string()))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)
            .map_err(|e| at(format!("not a safetensors file: {e}")))?;
        let st = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| at(format!("not a safetensors file: {e}")))?;
        let t = st
            .tensor("embeddings")
            .map_err(|_| at("no tensor `embeddings` (F32 [N, d])".into()))?;
        if t.dtype() != safetensors::Dtype::F32 || t.shape().len() != 2 {
            return Err(at(format!(
                "`embeddings` is {:?} {:?}, expected F32 [N, d]",
                t.dtype(),
                t.shape()
            )));
        }
        let (n, dim) = (t.shape()[0], t.shape()[1]);
        let ids_json = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get("ids"))
            .ok_or_else(|| {
                at("no `ids` in the header metadata (a JSON list of N strings)".into())
            })?;
        let ids: Vec<String> = serde_json::from_str(ids_json)
            .map_err(|e| at(format!("metadata `ids` is not a JSON list of strings: {e}")))?;
        if ids.len() != n {
            return Err(at(format!("{} ids for {n} embeddings", ids.len())));
        }
        let mut seen = HashMap::new();
        for (i, id) in ids.iter().enumerate() {
            if let Some(j) = seen.insert(id.as_str(), i) {
                return Err(at(format!("id {id:?} is on rows {j} and {i}")));
            }
        }
        let rows: Vec<f32> = t
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if let Some(bad) = rows.iter().position(|x| !x.is_finite()) {
            return Err(at(format!(
                "embedding of {:?} holds a non-finite value",
                ids[bad / dim.max(1)]
            )));
        }
        Ok(Self { ids, dim, rows })
    }

    /// Writes the file atomically.
    ///
    /// # Errors
    /// Text naming the file.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let bytes: Vec<u8> = self.rows.iter().flat_map(|x| x.to_le_bytes()).collect();
        let view = safetensors::tensor::TensorView::new(
            safetensors::Dtype::F32,
            vec![self.ids.len(), self.dim],
            &bytes,
        )
        .map_err(|e| e.to_string())?;
        let meta = std::collections::HashMap::from([(
            "ids".to_string(),
            serde_json::to_string(&self.ids).map_err(|e| e.to_string())?,
        )]);
        let data = safetensors::serialize([("embeddings", view)], Some(meta))
            .map_err(|e| e.to_string())?;
        bindscope_core::fsutil::write_atomic(path, &data)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The rows of `wanted`, in that order (`[wanted.len(), d]`).
    ///
    /// # Errors
    /// When ids are missing: their count and the first 20, naming `what` (the file).
    pub fn lookup(&self, wanted: &[&str], what: &str) -> Result<Vec<f32>, String> {
        let index: HashMap<&str, usize> = self
            .ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        let missing: Vec<&&str> = wanted.iter().filter(|w| !index.contains_key(**w)).collect();
        if !missing.is_empty() {
            let shown: Vec<String> = missing.iter().take(20).map(|m| format!("{m:?}")).collect();
            return Err(format!(
                "{what}: no embedding for {} of the {} ids the data needs: {}{}",
                missing.len(),
                wanted.len(),
                shown.join(", "),
                if missing.len() > 20 { ", …" } else { "" }
            ));
        }
        let mut out = Vec::with_capacity(wanted.len() * self.dim);
        for w in wanted {
            let i = index[*w];
            out.extend_from_slice(&self.rows[i * self.dim..(i + 1) * self.dim]);
        }
        Ok(out)
    }
}
