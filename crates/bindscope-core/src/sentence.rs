//! The sentence-transformers description of a checkpoint: what `SentenceTransformer(dir).encode`
//! does on top of the Hugging Face model, read from the files sentence-transformers keeps beside
//! it (the reading of sentence-transformers 6.2).
//!
//! A directory is a sentence-transformers model when it has `modules.json`; without it nothing
//! here applies and callers keep the transformers defaults. The pipelines read are
//! `Transformer → Pooling [→ Normalize]`:
//! - `Transformer` (the checkpoint itself, `path` `""`): `max_seq_length` and `do_lower_case`
//!   from `sentence_bert_config.json`; a file written by sentence-transformers ≥ 6 has neither,
//!   and the length is then the tokenizer's `model_max_length` (`tokenizer_config.json`), capped
//!   at the model's `max_position_embeddings` by the tokenizer side;
//! - `Pooling`: its `<path>/config.json`, in the current form (`pooling_mode`: one mode or a list)
//!   or the legacy one (`pooling_mode_cls_token`, `pooling_mode_mean_tokens`, … booleans; none
//!   set means mean); several modes are concatenated in the order given (legacy: cls, max,
//!   mean, mean_sqrt_len_tokens, weightedmean, lasttoken);
//! - `Normalize`: L2 normalization of the pooled vector.
//!
//! Anything else is refused by name rather than skipped: another module type (`Dense`,
//! `LayerNorm`, `Router`, …), a `Transformer` that is not the checkpoint directory or not a
//! `feature-extraction` task, an unknown pooling mode, a `config_sentence_transformers.json` of
//! another model type (`SparseEncoder`, `CrossEncoder`) or one with a `default_prompt_name`
//! (`encode` would prepend that prompt).
//!
//! [`Checkpoint::sentence_transformers`] is the one reader; the tokenizer
//! (`bindscope_data::text::TextPolicy::from_checkpoint`) and the text encoders
//! (`bindscope_models`) both take their part of it from there.

use crate::checkpoint::{Checkpoint, CheckpointError};
use std::path::{Path, PathBuf};

/// The module list of a sentence-transformers model.
pub const MODULES_FILE: &str = "modules.json";
/// The `Transformer` module's settings.
pub const SENTENCE_BERT_CONFIG_FILE: &str = "sentence_bert_config.json";
/// The model-level settings (model type, prompts).
pub const MODEL_CONFIG_FILE: &str = "config_sentence_transformers.json";

/// One pooling mode of sentence-transformers' `Pooling` module, over the token vectors `h_t`
/// of the tokens with attention mask `m_t = 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolingMode {
    /// The first unmasked token (`[CLS]` with right padding).
    Cls,
    /// The element-wise maximum over unmasked tokens.
    Max,
    /// `Σ m_t·h_t / max(Σ m_t, 1e-9)`.
    Mean,
    /// `Σ m_t·h_t / sqrt(max(Σ m_t, 1e-9))`.
    MeanSqrtLenTokens,
    /// `Σ w_t·m_t·h_t / max(Σ w_t·m_t, 1e-9)` with `w_t = t + 1 − (index of the first unmasked
    /// token)`.
    #[serde(rename = "weightedmean")]
    WeightedMean,
    /// The last unmasked token.
    #[serde(rename = "lasttoken")]
    LastToken,
}

impl PoolingMode {
    /// Every mode, in the order of the legacy configuration keys (the order sentence-transformers
    /// concatenates legacy multi-mode poolings in).
    pub const ALL: [PoolingMode; 6] = [
        Self::Cls,
        Self::Max,
        Self::Mean,
        Self::MeanSqrtLenTokens,
        Self::WeightedMean,
        Self::LastToken,
    ];

    /// The name sentence-transformers uses in `pooling_mode`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cls => "cls",
            Self::Max => "max",
            Self::Mean => "mean",
            Self::MeanSqrtLenTokens => "mean_sqrt_len_tokens",
            Self::WeightedMean => "weightedmean",
            Self::LastToken => "lasttoken",
        }
    }

    /// The legacy boolean key of the mode (`pooling_mode_cls_token`, …).
    pub fn legacy_key(self) -> &'static str {
        match self {
            Self::Cls => "pooling_mode_cls_token",
            Self::Max => "pooling_mode_max_tokens",
            Self::Mean => "pooling_mode_mean_tokens",
            Self::MeanSqrtLenTokens => "pooling_mode_mean_sqrt_len_tokens",
            Self::WeightedMean => "pooling_mode_weightedmean_tokens",
            Self::LastToken => "pooling_mode_lasttoken",
        }
    }

    /// The mode named `name` (as in `pooling_mode`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// How a sentence-transformers model turns the encoder's last hidden state into its sentence
/// embedding: pooling (modes concatenated), then optionally L2 normalization.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentencePooling {
    /// The pooling modes, concatenated in this order (never empty).
    pub modes: Vec<PoolingMode>,
    /// Whether a `Normalize` module follows the pooling.
    pub normalize: bool,
}

impl SentencePooling {
    /// Mean pooling then L2 normalization: bindscope's BERT sentence embedding when the
    /// checkpoint has no sentence-transformers files (the recipe of all-MiniLM-L6-v2).
    pub fn mean_normalized() -> Self {
        Self {
            modes: vec![PoolingMode::Mean],
            normalize: true,
        }
    }
}

/// What `SentenceTransformer(dir).encode` does beyond the transformers model, for a directory
/// with `modules.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentenceTransformers {
    /// The `modules.json` this was read from.
    pub modules_file: PathBuf,
    /// `max_seq_length` of `sentence_bert_config.json` when set, else `model_max_length` of
    /// `tokenizer_config.json` when it is a plain integer; `None`: neither (the tokenizer's
    /// default applies). Not yet capped at `max_position_embeddings`.
    pub max_seq_length: Option<usize>,
    /// `do_lower_case` of `sentence_bert_config.json`: a `Lowercase` normalizer runs before the
    /// tokenizer's own (unless that already lowercases).
    pub do_lower_case: bool,
    /// Pooling and normalization.
    pub pooling: SentencePooling,
}

fn bad(path: &Path, message: impl Into<String>) -> CheckpointError {
    CheckpointError::BadJson {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn read_value(path: &Path) -> Result<serde_json::Value, CheckpointError> {
    let text = std::fs::read_to_string(path).map_err(|source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| bad(path, e.to_string()))
}

/// The class name of a `modules.json` `type` (`sentence_transformers.models.Pooling`,
/// `sentence_transformers.sentence_transformer.modules.pooling.Pooling` → `Pooling`), when it is
/// one of sentence-transformers' own modules.
fn own_class(type_: &str) -> Option<&str> {
    type_
        .strip_prefix("sentence_transformers.")
        .and_then(|rest| rest.rsplit('.').next())
}

/// The pooling modes of a `Pooling` module's `config.json`.
fn pooling_modes(path: &Path, v: &serde_json::Value) -> Result<Vec<PoolingMode>, CheckpointError> {
    let known = || {
        PoolingMode::ALL
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let by_name = |s: &str| {
        PoolingMode::from_name(s).ok_or_else(|| {
            bad(
                path,
                format!(
                    "pooling_mode '{s}' is not a sentence-transformers pooling mode (known: {})",
                    known()
                ),
            )
        })
    };
    match v.get("pooling_mode") {
        Some(serde_json::Value::String(s)) => return Ok(vec![by_name(s)?]),
        Some(serde_json::Value::Array(list)) if !list.is_empty() => {
            return list
                .iter()
                .map(|m| {
                    m.as_str()
                        .ok_or_else(|| bad(path, "pooling_mode: expected mode names (strings)"))
                        .and_then(by_name)
                })
                .collect();
        }
        Some(serde_json::Value::Null) | None => {}
        Some(other) => {
            return Err(bad(
                path,
                format!("pooling_mode: expected a mode name or a list of them, found {other}"),
            ));
        }
    }
    // The legacy form: one boolean per mode; none set means mean.
    let mut modes = Vec::new();
    for m in PoolingMode::ALL {
        match v.get(m.legacy_key()) {
            Some(serde_json::Value::Bool(true)) => modes.push(m),
            Some(serde_json::Value::Bool(false)) | Some(serde_json::Value::Null) | None => {}
            Some(other) => {
                return Err(bad(
                    path,
                    format!("{}: expected true or false, found {other}", m.legacy_key()),
                ));
            }
        }
    }
    if modes.is_empty() {
        modes.push(PoolingMode::Mean);
    }
    Ok(modes)
}

/// `model_max_length` of a `tokenizer_config.json`, when it is an integer a tokenizer can use
/// (transformers writes `1e30`-like values for "no limit").
fn model_max_length(path: &Path) -> Result<Option<usize>, CheckpointError> {
    if !path.is_file() {
        return Ok(None);
    }
    Ok(read_value(path)?
        .get("model_max_length")
        .and_then(|n| n.as_u64())
        .filter(|&n| n > 0 && n <= 1 << 24)
        .map(|n| n as usize))
}

impl SentenceTransformers {
    /// Reads the sentence-transformers files of `dir`; `None` when it has no `modules.json`.
    ///
    /// # Errors
    /// [`CheckpointError::BadJson`] naming the file for malformed JSON and for every pipeline
    /// this reading does not cover (see the module docs); [`CheckpointError::Io`].
    pub fn read(dir: &Path) -> Result<Option<Self>, CheckpointError> {
        let modules_file = dir.join(MODULES_FILE);
        if !modules_file.is_file() {
            return Ok(None);
        }
        let modules = read_value(&modules_file)?;
        let list = modules
            .as_array()
            .ok_or_else(|| bad(&modules_file, "expected a list of modules"))?;
        let mut transformer = false;
        let mut pooling: Option<Vec<PoolingMode>> = None;
        let mut normalize = false;
        for (i, m) in list.iter().enumerate() {
            let type_ = m.get("type").and_then(|t| t.as_str()).unwrap_or("");
            let path = m.get("path").and_then(|p| p.as_str()).unwrap_or("");
            let class = own_class(type_);
            let unsupported = |why: &str| {
                bad(
                    &modules_file,
                    format!(
                        "module {i} ('{type_}'): {why}; bindscope implements Transformer → Pooling [→ Normalize]"
                    ),
                )
            };
            match (i, class) {
                (0, Some("Transformer")) => {
                    if !path.is_empty() {
                        return Err(unsupported(&format!(
                            "the Transformer lives in '{path}', not in the checkpoint directory"
                        )));
                    }
                    transformer = true;
                }
                (_, Some("Pooling")) if transformer && pooling.is_none() => {
                    let cfg = dir.join(path).join("config.json");
                    let v = if cfg.is_file() {
                        read_value(&cfg)?
                    } else {
                        serde_json::json!({})
                    };
                    pooling = Some(pooling_modes(&cfg, &v)?);
                }
                (_, Some("Normalize")) if pooling.is_some() && !normalize => normalize = true,
                _ => {
                    return Err(unsupported(
                        "this module (or this module in this position) is not implemented",
                    ));
                }
            }
        }
        let Some(modes) = pooling else {
            return Err(bad(
                &modules_file,
                "no Pooling module after the Transformer: no sentence embedding is defined",
            ));
        };

        let sbert = dir.join(SENTENCE_BERT_CONFIG_FILE);
        let (mut max_seq_length, mut do_lower_case) = (None, false);
        if sbert.is_file() {
            let v = read_value(&sbert)?;
            if let Some(task) = v.get("transformer_task").and_then(|t| t.as_str())
                && task != "feature-extraction"
            {
                return Err(bad(
                    &sbert,
                    format!("transformer_task '{task}' (bindscope implements feature-extraction)"),
                ));
            }
            max_seq_length = match v.get("max_seq_length") {
                None | Some(serde_json::Value::Null) => None,
                Some(n) => Some(n.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                    bad(
                        &sbert,
                        format!("max_seq_length: expected a positive integer, found {n}"),
                    )
                })? as usize),
            };
            do_lower_case = match v.get("do_lower_case") {
                None | Some(serde_json::Value::Null) => false,
                Some(serde_json::Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(bad(
                        &sbert,
                        format!("do_lower_case: expected true or false, found {other}"),
                    ));
                }
            };
        }
        if max_seq_length.is_none() {
            max_seq_length = model_max_length(&dir.join("tokenizer_config.json"))?;
        }

        let model_cfg = dir.join(MODEL_CONFIG_FILE);
        if model_cfg.is_file() {
            let v = read_value(&model_cfg)?;
            if let Some(t) = v.get("model_type").and_then(|t| t.as_str())
                && t != "SentenceTransformer"
            {
                return Err(bad(
                    &model_cfg,
                    format!("model_type '{t}' (bindscope reads SentenceTransformer models)"),
                ));
            }
            if let Some(p) = v.get("default_prompt_name").and_then(|p| p.as_str()) {
                return Err(bad(
                    &model_cfg,
                    format!(
                        "default_prompt_name '{p}': sentence-transformers prepends that prompt to every input, which bindscope does not implement"
                    ),
                ));
            }
        }
        Ok(Some(Self {
            modules_file,
            max_seq_length,
            do_lower_case,
            pooling: SentencePooling { modes, normalize },
        }))
    }
}

impl Checkpoint {
    /// The checkpoint's sentence-transformers description ([`SentenceTransformers::read`] of
    /// [`Checkpoint::dir`]); `None` for a plain transformers checkpoint.
    ///
    /// # Errors
    /// As [`SentenceTransformers::read`].
    pub fn sentence_transformers(&self) -> Result<Option<SentenceTransformers>, CheckpointError> {
        SentenceTransformers::read(self.dir())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    const MODULES: &str = r#"[
      {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
      {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
      {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
    ]"#;

    #[test]
    fn no_modules_json_is_no_pipeline() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            SENTENCE_BERT_CONFIG_FILE,
            r#"{"max_seq_length": 7}"#,
        );
        assert_eq!(SentenceTransformers::read(dir.path()).unwrap(), None);
    }

    #[test]
    fn legacy_and_current_pooling_forms() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), MODULES_FILE, MODULES);
        write(
            dir.path(),
            "1_Pooling/config.json",
            r#"{"word_embedding_dimension": 8, "pooling_mode_cls_token": false,
                "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true}"#,
        );
        write(
            dir.path(),
            SENTENCE_BERT_CONFIG_FILE,
            r#"{"max_seq_length": 7, "do_lower_case": true}"#,
        );
        let st = SentenceTransformers::read(dir.path()).unwrap().unwrap();
        // Legacy keys concatenate in sentence-transformers' fixed order, not the file's.
        assert_eq!(st.pooling.modes, [PoolingMode::Max, PoolingMode::Mean]);
        assert!(st.pooling.normalize);
        assert_eq!((st.max_seq_length, st.do_lower_case), (Some(7), true));

        write(
            dir.path(),
            "1_Pooling/config.json",
            r#"{"embedding_dimension": 8, "pooling_mode": ["lasttoken", "cls"]}"#,
        );
        let st = SentenceTransformers::read(dir.path()).unwrap().unwrap();
        assert_eq!(st.pooling.modes, [PoolingMode::LastToken, PoolingMode::Cls]);
    }

    #[test]
    fn the_tokenizer_length_stands_in_for_a_missing_max_seq_length() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), MODULES_FILE, MODULES);
        write(
            dir.path(),
            SENTENCE_BERT_CONFIG_FILE,
            r#"{"transformer_task": "feature-extraction"}"#,
        );
        write(
            dir.path(),
            "tokenizer_config.json",
            r#"{"model_max_length": 12}"#,
        );
        let st = SentenceTransformers::read(dir.path()).unwrap().unwrap();
        assert_eq!(st.max_seq_length, Some(12));
        assert_eq!(st.pooling, SentencePooling::mean_normalized());
        write(
            dir.path(),
            "tokenizer_config.json",
            r#"{"model_max_length": 1000000000000000019884624838656}"#,
        );
        let st = SentenceTransformers::read(dir.path()).unwrap().unwrap();
        assert_eq!(st.max_seq_length, None);
    }

    #[test]
    fn unsupported_pipelines_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let err = |dir: &Path| SentenceTransformers::read(dir).unwrap_err().to_string();
        write(
            dir.path(),
            MODULES_FILE,
            r#"[{"path": "", "type": "sentence_transformers.models.Transformer"},
                {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#,
        );
        let e = err(dir.path());
        assert!(
            e.contains("sentence_transformers.models.Dense") && e.contains("modules.json"),
            "{e}"
        );

        write(dir.path(), MODULES_FILE, MODULES);
        write(
            dir.path(),
            "1_Pooling/config.json",
            r#"{"pooling_mode": "median"}"#,
        );
        let e = err(dir.path());
        assert!(e.contains("'median'") && e.contains("1_Pooling"), "{e}");

        write(
            dir.path(),
            "1_Pooling/config.json",
            r#"{"pooling_mode": "mean"}"#,
        );
        write(
            dir.path(),
            MODEL_CONFIG_FILE,
            r#"{"model_type": "SentenceTransformer", "prompts": {"query": "query: "}, "default_prompt_name": "query"}"#,
        );
        let e = err(dir.path());
        assert!(e.contains("default_prompt_name 'query'"), "{e}");
    }
}
