//! The GEB runs on a data directory (`train.json` in the LLaVA format, `dev.jsonl` /
//! `test.jsonl` manifests, `images/`; what `geb synth` writes): [`embed`] (the frozen
//! embedder's cache), [`train`] (`geb train`) and [`evaluate`] (`geb eval`).
//!
//! ## Slots
//! What the decoder reads is a list of slots, each an embedding file keyed per
//! [`SlotKind`]:
//! - visual-only: one [`SlotKind::Image`] slot (`--embedder` or `--embeddings`);
//! - VL-joint with a two-tower pair (`--embedder` + `--text-embedder`, or `--embeddings` +
//!   `--question-embeddings`): an image slot and a [`SlotKind::Question`] slot, one adapter
//!   each (the towers need not share a width: DINOv2 + MiniLM; CLIP / SigLIP's two towers get
//!   two adapters too, so every pair is handled alike);
//! - VL-joint with a joint embedder's file (`--embeddings` alone): one question slot, keyed by
//!   image and question;
//! - the text-only control (`--text-only`): no slot.

pub mod audit;
pub mod embed;
pub mod evaluate;
pub mod plots;
pub mod train;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::readout::chat::Mode;
use crate::readout::embeddings::{EmbeddingFile, question_key};

/// How a slot's rows are keyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlotKind {
    /// By `image` path.
    Image,
    /// By [`question_key`]`(image, question)`.
    Question,
}

impl SlotKind {
    /// The key of this slot for a question about `image`.
    pub fn key(self, image: &str, question: &str) -> String {
        match self {
            SlotKind::Image => image.to_string(),
            SlotKind::Question => question_key(image, question),
        }
    }

    /// The name used in file names.
    pub fn name(self) -> &'static str {
        match self {
            SlotKind::Image => "image",
            SlotKind::Question => "question",
        }
    }
}

/// Where the embeddings come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Embedder {
    /// A project encoder (and, for VL-joint, a text encoder), cached in `<data>/embeddings/`.
    Models {
        /// `--embedder`.
        vision: String,
        /// `--text-embedder`.
        text: Option<String>,
    },
    /// Imported files.
    Files {
        /// `--embeddings`.
        embeddings: PathBuf,
        /// `--question-embeddings`.
        questions: Option<PathBuf>,
    },
    /// No embedding (the text-only control).
    TextOnly,
}

impl Embedder {
    /// The slots this embedder gives in `mode` (module docs).
    ///
    /// # Errors
    /// Combinations that name no valid layout, in the flags' terms.
    pub fn slots(&self, mode: Mode) -> Result<Vec<SlotKind>> {
        Ok(match (self, mode) {
            (Embedder::TextOnly, _) => vec![],
            (Embedder::Models { text: None, .. }, Mode::VisualOnly) => vec![SlotKind::Image],
            (Embedder::Models { text: Some(_), .. }, Mode::VisualOnly) => {
                bail!("--text-embedder is for --mode vl-joint (visual-only reads the image alone)")
            }
            (Embedder::Models { text: Some(_), .. }, Mode::VlJoint) => {
                vec![SlotKind::Image, SlotKind::Question]
            }
            (Embedder::Models { text: None, .. }, Mode::VlJoint) => bail!(
                "--mode vl-joint with --embedder needs --text-embedder (a two-tower pair), or pass a joint embedder's --embeddings file keyed by image and question"
            ),
            (
                Embedder::Files {
                    questions: None, ..
                },
                Mode::VisualOnly,
            ) => vec![SlotKind::Image],
            (
                Embedder::Files {
                    questions: Some(_), ..
                },
                Mode::VisualOnly,
            ) => {
                bail!("--question-embeddings is for --mode vl-joint")
            }
            (
                Embedder::Files {
                    questions: None, ..
                },
                Mode::VlJoint,
            ) => vec![SlotKind::Question],
            (
                Embedder::Files {
                    questions: Some(_), ..
                },
                Mode::VlJoint,
            ) => {
                vec![SlotKind::Image, SlotKind::Question]
            }
        })
    }
}

/// A GEB data directory.
#[derive(Debug, Clone)]
pub struct DataDir {
    /// Its root.
    pub root: PathBuf,
}

impl DataDir {
    /// `dir`, checked to hold `train.json`, the manifests and `images/`.
    ///
    /// # Errors
    /// Naming what is missing.
    pub fn open(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            bail!("--data {}: not a directory", dir.display());
        }
        if !dir.join("images").is_dir() {
            bail!("--data {}: no images/ directory", dir.display());
        }
        Ok(Self {
            root: dir.to_path_buf(),
        })
    }

    /// `images/`.
    pub fn images(&self) -> PathBuf {
        self.root.join("images")
    }

    /// `train.json`.
    pub fn train(&self) -> PathBuf {
        self.root.join("train.json")
    }

    /// The manifest of `split` (`dev`, `test`).
    pub fn manifest(&self, split: &str) -> PathBuf {
        self.root.join(format!("{split}.jsonl"))
    }

    /// The embedding cache directory.
    pub fn cache(&self) -> PathBuf {
        self.root.join("embeddings")
    }
}

/// The SHA-256 (hex) of the embedding rows a run uses, with their keys in order: what a run's
/// identity records (a cache file grows as splits are added; the rows a run reads do not
/// change).
pub fn rows_sha256(keys: &[String], rows: &[f32]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for k in keys {
        h.update((k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
    }
    for x in rows {
        h.update(x.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of a file, hex.
///
/// # Errors
/// An unreadable file, named.
pub fn file_sha256(path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The slot files of a run, resolved: imported files as given, project encoders through the
/// cache (computed when the cache does not cover `needs`). Returns each slot's file and path.
///
/// # Errors
/// Unreadable files, missing ids, model failures.
pub fn slot_files(
    embedder: &Embedder,
    slots: &[SlotKind],
    data: &DataDir,
    needs: &embed::Needs,
    batch: usize,
    ctx: &bindscope_core::run::RunContext,
) -> Result<Vec<(EmbeddingFile, PathBuf)>> {
    let mut out = Vec::new();
    for &slot in slots {
        let (file, path) = match embedder {
            Embedder::TextOnly => unreachable!("no slots"),
            Embedder::Files {
                embeddings,
                questions,
            } => {
                let path = match (slot, questions) {
                    (SlotKind::Question, Some(q)) => q.clone(),
                    _ => embeddings.clone(),
                };
                (
                    EmbeddingFile::read(&path).map_err(anyhow::Error::msg)?,
                    path,
                )
            }
            Embedder::Models { vision, text } => {
                let spec = match slot {
                    SlotKind::Image => vision.clone(),
                    SlotKind::Question => text.clone().expect("checked by slots()"),
                };
                // The cache is keyed by what the embedding depends on (the weights, the
                // preprocessing, the tokenizer), not by the directory's name alone.
                let identity = embed::model_identity(&spec)?;
                let path = embed::cache_path(&data.cache(), &spec, &identity, slot.name());
                let mut f = if path.is_file() {
                    Some(EmbeddingFile::read(&path).map_err(anyhow::Error::msg)?)
                } else {
                    None
                };
                let have: std::collections::HashSet<String> = f
                    .as_ref()
                    .map(|f| f.ids.iter().cloned().collect())
                    .unwrap_or_default();
                // Only what the cache lacks is computed; the cache keeps every split's rows.
                let todo = embed::Needs {
                    images: needs
                        .images
                        .iter()
                        .filter(|i| !have.contains(*i))
                        .cloned()
                        .collect(),
                    questions: needs
                        .questions
                        .iter()
                        .filter(|(k, _)| !have.contains(k))
                        .cloned()
                        .collect(),
                };
                let pending = match slot {
                    SlotKind::Image => !todo.images.is_empty(),
                    SlotKind::Question => !todo.questions.is_empty(),
                };
                if pending {
                    let (new, _) = match slot {
                        SlotKind::Image => {
                            embed::embed_images(&spec, &data.images(), &todo, batch, ctx)?
                        }
                        SlotKind::Question => embed::embed_questions(&spec, &todo, batch, ctx)?,
                    };
                    let merged = match f.take() {
                        None => new,
                        Some(mut old) => {
                            if old.dim != new.dim {
                                bail!(
                                    "{}: {}-dimensional rows, the embedder now gives {}",
                                    path.display(),
                                    old.dim,
                                    new.dim
                                );
                            }
                            old.ids.extend(new.ids);
                            old.rows.extend(new.rows);
                            old
                        }
                    };
                    std::fs::create_dir_all(data.cache())
                        .with_context(|| format!("creating {}", data.cache().display()))?;
                    merged.write(&path).map_err(anyhow::Error::msg)?;
                    f = Some(merged);
                }
                (f.expect("computed or cached"), path)
            }
        };
        out.push((file, path));
    }
    Ok(out)
}
