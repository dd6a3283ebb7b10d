//! Resolving a model name to the files of a Hugging Face–layout checkpoint.
//!
//! A model is named by a local directory holding `config.json` and `model.safetensors` (or a
//! sharded `model.safetensors.index.json`), plus the optional `preprocessor_config.json` and
//! `tokenizer.json`; or by a Hub id, `org/name` or `org/name@<revision>` (a branch, tag or commit
//! sha). Hub ids are read from the standard Hugging Face cache, the one Python's
//! `huggingface_hub` uses (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`),
//! and what the cache lacks is downloaded from `HF_ENDPOINT` (default `https://huggingface.co`)
//! with `hf-hub`, with the token in `HF_TOKEN` for gated and private repositories;
//! `HF_HUB_OFFLINE=1` forbids downloads. The details are in [`HubConfig`] and the `hub` module.

mod hub;

pub use hub::{HubConfig, HubId, OPTIONAL_FILES};

use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Why a checkpoint could not be resolved or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A Hub id that is not in the cache and could not be downloaded (offline).
    #[error(
        "model '{spec}' not found: looked for {files} {where_}.\n  {fix}, or pass a local checkpoint directory (--model path/to/dir with config.json and model.safetensors)."
    )]
    NotFound {
        /// The name as given.
        spec: String,
        /// The files that were looked for.
        files: String,
        /// Where they were looked for, and why downloading did not help.
        where_: String,
        /// How to get the files.
        fix: String,
    },
    /// A name that is a path (or is no Hub id) and names no directory.
    #[error(
        "--model {spec}: no such directory or file ({why}); --model takes a checkpoint directory (with config.json and model.safetensors), a PyTorch .pth/.pt file, or a Hub id org/name[@revision]"
    )]
    LocalNotFound {
        /// The name as given.
        spec: String,
        /// What exists of it.
        why: String,
    },
    /// The Hub refused or failed a request; the message says why and what to do.
    #[error("--model {spec}: {message}")]
    Hub {
        /// The name as given.
        spec: String,
        /// What happened and what to do, in the user's terms.
        message: String,
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
    /// `--arch` given for a checkpoint whose `config.json` names its architecture.
    #[error(
        "{}: --arch {arch} is for a PyTorch .pth/.pt file without config.json; this checkpoint's config.json names its architecture (model_type)", path.display()
    )]
    ArchWithConfig {
        /// The checkpoint's `config.json`.
        path: PathBuf,
        /// The `--arch` given.
        arch: String,
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
    /// The architecture a PyTorch pickle checkpoint without `config.json` is read as (`--arch
    /// resnet50`): its `model_type` ([`Checkpoint::config_json`]). `None` for one that has a
    /// `config.json`, and for a pickle whose architecture the model registry infers from its
    /// keys.
    pub arch: Option<String>,
}

const WEIGHTS: &str = "model.safetensors";
const INDEX: &str = "model.safetensors.index.json";
const PYTORCH_WEIGHTS: &str = "pytorch_model.bin";

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
    /// Resolves a Hub id or local directory, with the Hub settings of this process's
    /// environment ([`HubConfig::from_env`]).
    ///
    /// # Errors
    /// As [`Checkpoint::resolve_with`].
    pub fn resolve(spec: &str) -> Result<Self, CheckpointError> {
        Self::resolve_with(spec, &HubConfig::from_env())
    }

    /// Resolves `spec`: an existing directory is read as a checkpoint directory; a name that
    /// looks like a path (starts with `.`, `/` or `~`, holds `\`, names an existing file, or has
    /// more than two `/`-separated parts) and is no directory is an error; anything else is a
    /// Hub id `org/name[@revision]` resolved through the cache and the Hub as `hub` configures.
    ///
    /// # Errors
    /// [`CheckpointError::LocalNotFound`] for a path that names no directory;
    /// [`CheckpointError::NotFound`] for a Hub id not in the cache when offline;
    /// [`CheckpointError::Hub`] when the Hub refuses (unknown repo or revision, gated or private
    /// repository without access) or a download fails; [`CheckpointError::MissingFile`] when a
    /// directory lacks `config.json` or weights.
    pub fn resolve_with(spec: &str, hub: &HubConfig) -> Result<Self, CheckpointError> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let path = hub::expand_home(spec, home.as_deref());
        if path.is_dir() {
            return Self::from_dir(spec, &path);
        }
        if path.is_file() && crate::pth::is_pytorch_file(&path) {
            return Ok(Self::pytorch_file(spec, &path));
        }
        let looks_local = spec.starts_with(['.', '/', '~'])
            || spec.contains('\\')
            || path.exists()
            || crate::pth::is_pytorch_file(&path)
            || spec.split('@').next().unwrap_or("").split('/').count() > 2;
        match HubId::parse(spec).filter(|_| !looks_local) {
            Some(id) => hub::resolve(spec, &id, hub),
            None => Err(CheckpointError::LocalNotFound {
                spec: spec.to_string(),
                why: local_miss(&path),
            }),
        }
    }

    /// A PyTorch pickle (`.pth`, `.pth.tar`, `.pt`, …) on its own: no `config.json`, so the
    /// architecture comes from [`Checkpoint::with_arch`] or from its keys; `config` names the
    /// file itself (in messages), and no processor or tokenizer files come with it.
    pub fn pytorch_file(spec: &str, file: &Path) -> Self {
        Self {
            spec: spec.to_string(),
            config: file.to_path_buf(),
            weights: vec![file.to_path_buf()],
            preprocessor_config: None,
            tokenizer: None,
            arch: None,
        }
    }

    /// The same checkpoint read as architecture `arch` (`--arch`): only a PyTorch pickle without
    /// `config.json` takes one.
    ///
    /// # Errors
    /// [`CheckpointError::ArchWithConfig`] when the checkpoint has a `config.json` (its
    /// `model_type` names the architecture).
    pub fn with_arch(mut self, arch: Option<&str>) -> Result<Self, CheckpointError> {
        let Some(arch) = arch else {
            return Ok(self);
        };
        if !self.is_pytorch_file() {
            return Err(CheckpointError::ArchWithConfig {
                path: self.config.clone(),
                arch: arch.to_string(),
            });
        }
        self.arch = Some(arch.to_string());
        Ok(self)
    }

    /// Whether this is a PyTorch pickle without `config.json` ([`Checkpoint::pytorch_file`]).
    pub fn is_pytorch_file(&self) -> bool {
        self.weights.len() == 1 && self.config == self.weights[0]
    }

    /// Reads a local directory in Hugging Face layout, or a directory holding one PyTorch
    /// pickle and no `config.json` ([`Checkpoint::pytorch_file`]). The weights are
    /// `model.safetensors`, the shards of `model.safetensors.index.json`, or, without either,
    /// `pytorch_model.bin`.
    ///
    /// # Errors
    /// [`CheckpointError::MissingFile`] when `config.json` or the weights are absent (or a
    /// directory without `config.json` holds no PyTorch pickle, or several).
    pub fn from_dir(spec: &str, dir: &Path) -> Result<Self, CheckpointError> {
        let config = dir.join("config.json");
        let names = |files: &[PathBuf]| -> String {
            files
                .iter()
                .filter_map(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !config.is_file() {
            let pickles = pickles_in(dir)?;
            return match pickles.as_slice() {
                [one] => Ok(Self::pytorch_file(spec, one)),
                [] => Err(CheckpointError::MissingFile {
                    dir: dir.to_path_buf(),
                    file: "config.json".into(),
                }),
                many => Err(CheckpointError::MissingFile {
                    dir: dir.to_path_buf(),
                    file: format!(
                        "config.json (it holds {} PyTorch files, {}: pass one of them as --model)",
                        many.len(),
                        names(many)
                    ),
                }),
            };
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
        } else if dir.join(PYTORCH_WEIGHTS).is_file() {
            vec![dir.join(PYTORCH_WEIGHTS)]
        } else {
            let pickles = pickles_in(dir)?;
            let hint = if pickles.is_empty() {
                String::new()
            } else {
                format!(
                    "; it holds {}: pass the file itself as --model to read it without config.json",
                    names(&pickles)
                )
            };
            return Err(CheckpointError::MissingFile {
                dir: dir.to_path_buf(),
                file: format!("{WEIGHTS} (or {INDEX}, or {PYTORCH_WEIGHTS}){hint}"),
            });
        };
        let opt = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
        Ok(Self {
            spec: spec.to_string(),
            config,
            weights,
            preprocessor_config: opt("preprocessor_config.json"),
            tokenizer: opt("tokenizer.json"),
            arch: None,
        })
    }

    /// `config.json` as raw JSON.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] / [`CheckpointError::BadJson`] naming the file.
    pub fn config_json(&self) -> Result<serde_json::Value, CheckpointError> {
        if self.is_pytorch_file() {
            // No config.json: the architecture is all there is to say.
            return Ok(match &self.arch {
                Some(arch) => serde_json::json!({ "model_type": arch }),
                None => serde_json::json!({}),
            });
        }
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
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        // The field's path (`rope_parameters.factor`) first, when the error is inside one.
        let field = e.path().to_string();
        let inner = e.into_inner();
        CheckpointError::BadJson {
            path: path.to_path_buf(),
            message: if field.is_empty() || field == "." {
                inner.to_string()
            } else {
                format!("{field}: {inner}")
            },
        }
    })
}

/// What exists of a path that is no directory: "X is a file", or the deepest existing ancestor.
fn local_miss(path: &Path) -> String {
    if path.exists() {
        return format!("{} is a file, not a checkpoint directory", path.display());
    }
    let existing = path
        .ancestors()
        .skip(1)
        .find(|a| !a.as_os_str().is_empty() && *a != Path::new(".") && a.is_dir());
    match existing {
        Some(a) => format!("{} exists, {} does not", a.display(), path.display()),
        None => format!("{} does not exist", path.display()),
    }
}

/// The PyTorch pickles ([`crate::pth::is_pytorch_file`]) directly inside `dir`, sorted.
fn pickles_in(dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    let mut pickles: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| CheckpointError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && crate::pth::is_pytorch_file(p))
        .collect();
    pickles.sort();
    Ok(pickles)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offline_in(cache: &Path) -> HubConfig {
        HubConfig {
            cache: cache.to_path_buf(),
            endpoint: "http://127.0.0.1:9".into(),
            offline: true,
            token: None,
        }
    }

    #[test]
    fn offline_missing_model_names_files_and_fix() {
        let cache = tempfile::tempdir().unwrap();
        let err = Checkpoint::resolve_with("nobody/no-such-model", &offline_in(cache.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("config.json"), "{err}");
        assert!(err.contains("HF_HUB_OFFLINE"), "{err}");
        assert!(
            err.contains("huggingface-cli download nobody/no-such-model"),
            "{err}"
        );
        assert!(err.contains("--model path/to/dir"), "{err}");
        let err = Checkpoint::resolve_with("nobody/m@v2", &offline_in(cache.path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("huggingface-cli download nobody/m --revision v2"),
            "{err}"
        );
    }

    /// A name that is a path gets no Hub advice: it says what exists of the path.
    #[test]
    fn a_missing_local_path_is_not_sent_to_the_hub() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = offline_in(dir.path());
        let missing = dir.path().join("dinov2-small");
        let file = dir.path().join("model.safetensors");
        std::fs::write(&file, b"").unwrap();
        for (spec, want) in [
            (
                missing.display().to_string(),
                format!("{} exists", dir.path().display()),
            ),
            (
                "./no-such-dir".to_string(),
                "no-such-dir does not exist".to_string(),
            ),
            (
                "~/no-such-bindscope-dir".to_string(),
                "no-such-bindscope-dir".to_string(),
            ),
            (file.display().to_string(), "is a file".to_string()),
            ("a/b/c".to_string(), "does not exist".to_string()),
        ] {
            let e = Checkpoint::resolve_with(&spec, &cfg).unwrap_err();
            let text = e.to_string();
            assert!(
                matches!(e, CheckpointError::LocalNotFound { .. }),
                "{spec}: {text}"
            );
            assert!(text.contains(&want), "{spec}: {text}");
            assert!(!text.contains("huggingface-cli"), "{spec}: {text}");
        }
    }

    #[test]
    fn directory_without_weights_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let err = Checkpoint::resolve(dir.path().to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("model.safetensors"), "{err}");
    }
}
