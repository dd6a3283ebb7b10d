//! Resolving a model name to the files of a Hugging Face–layout checkpoint.
//!
//! A model is named by a Hub id (`openai/clip-vit-base-patch32`) or by a local directory holding
//! `config.json` and `model.safetensors` (or a sharded `model.safetensors.index.json`), plus the
//! optional `preprocessor_config.json` and `tokenizer.json`. Ids are looked up in the standard
//! Hugging Face cache (`HF_HOME`, `HF_HUB_CACHE`) first and downloaded with `hf-hub` when online.
//! `HF_HUB_OFFLINE=1` forbids downloads.

use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Why a checkpoint could not be resolved or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Neither a local directory nor a cached / downloadable Hub id.
    #[error(
        "model '{spec}' not found: looked for {files} {where_}.\n  \
         Pass a local directory in Hugging Face layout (--model /path/to/dir with config.json and \
         model.safetensors), or download the model once while online (`huggingface-cli download {spec}`)."
    )]
    NotFound {
        /// The name as given.
        spec: String,
        /// The files that were looked for.
        files: String,
        /// Where they were looked for, and why downloading did not help.
        where_: String,
    },
    /// A directory exists but lacks a required file.
    #[error("{dir}: missing {file} (expected a Hugging Face checkpoint directory)")]
    MissingFile {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The missing file name.
        file: String,
    },
    /// A JSON file could not be read or does not have the expected fields.
    #[error("{path}: {message}")]
    BadJson {
        /// The file.
        path: PathBuf,
        /// What was wrong (serde's message names the field, line and column).
        message: String,
    },
    /// Any other I/O failure.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The files of one checkpoint, all inside [`Checkpoint::dir`] (or the Hub cache snapshot).
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The name the user gave (Hub id or directory).
    pub spec: String,
    /// `config.json`.
    pub config: PathBuf,
    /// `model.safetensors`, or every shard named by `model.safetensors.index.json`, in order.
    pub weights: Vec<PathBuf>,
    /// `preprocessor_config.json`, when present.
    pub preprocessor_config: Option<PathBuf>,
    /// `tokenizer.json`, when present.
    pub tokenizer: Option<PathBuf>,
}

const WEIGHTS: &str = "model.safetensors";
const INDEX: &str = "model.safetensors.index.json";

fn read_json_value(path: &Path) -> Result<serde_json::Value, CheckpointError> {
    let text = std::fs::read_to_string(path).map_err(|source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| CheckpointError::BadJson {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Shard file names listed in a `model.safetensors.index.json` (`weight_map` values, deduplicated
/// in first-seen order of the sorted keys).
fn shards_from_index(index: &Path) -> Result<Vec<String>, CheckpointError> {
    let v = read_json_value(index)?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| CheckpointError::BadJson {
            path: index.to_path_buf(),
            message: "expected an object field 'weight_map' mapping tensor names to shard files"
                .into(),
        })?;
    let mut names: Vec<String> = Vec::new();
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for k in keys {
        let f = map[k].as_str().ok_or_else(|| CheckpointError::BadJson {
            path: index.to_path_buf(),
            message: format!("weight_map['{k}'] must be a file name string"),
        })?;
        if !names.iter().any(|n| n == f) {
            names.push(f.to_string());
        }
    }
    Ok(names)
}

impl Checkpoint {
    /// Resolves a Hub id or local directory.
    ///
    /// # Errors
    /// [`CheckpointError::NotFound`] naming every file and place looked at;
    /// [`CheckpointError::MissingFile`] when a directory lacks `config.json` or weights.
    pub fn resolve(spec: &str) -> Result<Self, CheckpointError> {
        let path = Path::new(spec);
        if path.is_dir() {
            return Self::from_dir(spec, path);
        }
        let looks_local = spec.starts_with('.') || spec.starts_with('/') || spec.contains('\\');
        if looks_local || spec.split('/').count() > 2 || spec.is_empty() {
            return Err(CheckpointError::NotFound {
                spec: spec.to_string(),
                files: "a directory".into(),
                where_: "on disk (no such directory)".into(),
            });
        }
        Self::from_hub(spec)
    }

    /// Reads a local directory in Hugging Face layout.
    ///
    /// # Errors
    /// [`CheckpointError::MissingFile`] when `config.json` or the weights are absent.
    pub fn from_dir(spec: &str, dir: &Path) -> Result<Self, CheckpointError> {
        let config = dir.join("config.json");
        if !config.is_file() {
            return Err(CheckpointError::MissingFile {
                dir: dir.to_path_buf(),
                file: "config.json".into(),
            });
        }
        let weights = if dir.join(WEIGHTS).is_file() {
            vec![dir.join(WEIGHTS)]
        } else if dir.join(INDEX).is_file() {
            let shards = shards_from_index(&dir.join(INDEX))?;
            let mut out = Vec::new();
            for s in shards {
                let p = dir.join(&s);
                if !p.is_file() {
                    return Err(CheckpointError::MissingFile {
                        dir: dir.to_path_buf(),
                        file: s,
                    });
                }
                out.push(p);
            }
            out
        } else {
            return Err(CheckpointError::MissingFile {
                dir: dir.to_path_buf(),
                file: format!("{WEIGHTS} (or {INDEX})"),
            });
        };
        let opt = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
        Ok(Self {
            spec: spec.to_string(),
            config,
            weights,
            preprocessor_config: opt("preprocessor_config.json"),
            tokenizer: opt("tokenizer.json"),
        })
    }

    fn from_hub(spec: &str) -> Result<Self, CheckpointError> {
        let cache = hf_hub::Cache::from_env();
        let repo = cache.model(spec.to_string());
        let cached = |f: &str| repo.get(f);
        let offline = std::env::var("HF_HUB_OFFLINE")
            .is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        let files = format!("config.json and {WEIGHTS} (or {INDEX})");
        let cache_dir = cache
            .path()
            .join(format!("models--{}", spec.replace('/', "--")));

        // 1. Everything already in the cache.
        if let Some(config) = cached("config.json") {
            let weights = if let Some(w) = cached(WEIGHTS) {
                Some(vec![w])
            } else if let Some(idx) = cached(INDEX) {
                shards_from_index(&idx)?
                    .iter()
                    .map(|s| cached(s))
                    .collect::<Option<Vec<_>>>()
            } else {
                None
            };
            if let Some(weights) = weights {
                return Ok(Self {
                    spec: spec.to_string(),
                    config,
                    weights,
                    preprocessor_config: cached("preprocessor_config.json"),
                    tokenizer: cached("tokenizer.json"),
                });
            }
        }
        if offline {
            return Err(CheckpointError::NotFound {
                spec: spec.to_string(),
                files,
                where_: format!(
                    "as a local directory (none) and in the Hugging Face cache ({}); HF_HUB_OFFLINE is set, so nothing was downloaded",
                    cache_dir.display()
                ),
            });
        }
        // 2. Download through hf-hub.
        let not_found = |why: String| CheckpointError::NotFound {
            spec: spec.to_string(),
            files: files.clone(),
            where_: format!(
                "as a local directory (none), in the Hugging Face cache ({}) and on the Hub ({why})",
                cache_dir.display()
            ),
        };
        let api = hf_hub::api::sync::ApiBuilder::from_env()
            .with_progress(true)
            .build()
            .map_err(|e| not_found(e.to_string()))?;
        let remote = api.model(spec.to_string());
        let config = remote
            .get("config.json")
            .map_err(|e| not_found(e.to_string()))?;
        let weights = match remote.get(WEIGHTS) {
            Ok(w) => vec![w],
            Err(first) => match remote.get(INDEX) {
                Ok(idx) => shards_from_index(&idx)?
                    .iter()
                    .map(|s| remote.get(s).map_err(|e| not_found(e.to_string())))
                    .collect::<Result<Vec<_>, _>>()?,
                Err(_) => return Err(not_found(first.to_string())),
            },
        };
        Ok(Self {
            spec: spec.to_string(),
            config,
            weights,
            preprocessor_config: remote.get("preprocessor_config.json").ok(),
            tokenizer: remote.get("tokenizer.json").ok(),
        })
    }

    /// `config.json` as raw JSON.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] / [`CheckpointError::BadJson`] naming the file.
    pub fn config_json(&self) -> Result<serde_json::Value, CheckpointError> {
        read_json_value(&self.config)
    }

    /// `config.json` deserialized into a typed config; a wrong or missing field is reported with
    /// the file, the field and the line.
    ///
    /// # Errors
    /// [`CheckpointError::BadJson`].
    pub fn read_config<T: DeserializeOwned>(&self) -> Result<T, CheckpointError> {
        read_json_file(&self.config)
    }

    /// The directory holding `config.json`.
    pub fn dir(&self) -> &Path {
        self.config.parent().unwrap_or(Path::new("."))
    }

    /// sha256 of the weights: the hex digest of the single file, or of the concatenated digests
    /// of the shards in order.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] naming the file.
    pub fn weights_sha256(&self) -> Result<String, CheckpointError> {
        let mut digests = Vec::new();
        for w in &self.weights {
            let mut f = std::fs::File::open(w).map_err(|source| CheckpointError::Io {
                path: w.clone(),
                source,
            })?;
            let mut h = Sha256::new();
            std::io::copy(&mut f, &mut h).map_err(|source| CheckpointError::Io {
                path: w.clone(),
                source,
            })?;
            digests.push(hex(&h.finalize()));
        }
        if digests.len() == 1 {
            return Ok(digests.remove(0));
        }
        Ok(hex(&Sha256::digest(digests.concat().as_bytes())))
    }
}

/// Reads a JSON file into `T`, naming the file, the field and the line on error.
///
/// # Errors
/// [`CheckpointError::Io`] or [`CheckpointError::BadJson`].
pub fn read_json_file<T: DeserializeOwned>(path: &Path) -> Result<T, CheckpointError> {
    let text = std::fs::read_to_string(path).map_err(|source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| CheckpointError::BadJson {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_missing_model_names_files_and_fix() {
        // SAFETY: tests in this module do not read these variables concurrently elsewhere.
        unsafe {
            std::env::set_var("HF_HUB_OFFLINE", "1");
            std::env::set_var(
                "HF_HOME",
                std::env::temp_dir().join("bindscope-empty-hf-home"),
            );
        }
        let err = Checkpoint::resolve("nobody/no-such-model")
            .unwrap_err()
            .to_string();
        assert!(err.contains("config.json"), "{err}");
        assert!(err.contains("HF_HUB_OFFLINE"), "{err}");
        assert!(err.contains("--model /path/to/dir"), "{err}");
    }

    #[test]
    fn directory_without_weights_is_named() {
        let dir = std::env::temp_dir().join(format!("bindscope-ckpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        let err = Checkpoint::resolve(dir.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("model.safetensors"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
