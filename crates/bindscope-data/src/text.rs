//! Tokenization from a Hugging Face `tokenizer.json`, with each text-encoder family's padding and
//! truncation rules (what the transformers fast tokenizers produce when called as the model
//! cards do).
//!
//! The `padding` / `truncation` sections stored in a `tokenizer.json` are ignored, as
//! transformers ignores them (the shared all-MiniLM-L6-v2 file pads and truncates to 128); each
//! [`TextPolicy`] sets its own:
//!
//! | family | truncation | padding | HF call it reproduces |
//! |---|---|---|---|
//! | [`TextFamily::Bert`] | 512 (model max; a sentence-transformers model's `max_seq_length`) | longest in the batch | `tok(texts, padding=True, truncation=True, max_length=512)` |
//! | [`TextFamily::Clip`] | 77, keeping `<\|endoftext\|>` last | longest, or 77 with [`Padding::MaxLength`] | `tok(texts, padding=True \| "max_length", truncation=True, max_length=77)` |
//! | [`TextFamily::Siglip`] | 64 | always to 64 | `tok(texts, padding="max_length", truncation=True, max_length=64)` |
//!
//! Special tokens (`[CLS]`/`[SEP]`, `<|startoftext|>`/`<|endoftext|>`, `</s>`) come from the
//! file's post-processor and are kept when truncating. The pad token is, in order: the
//! policy's [`TextPolicy::pad_token`], `pad_token` of `tokenizer_config.json` or
//! `special_tokens_map.json` next to the file (as transformers does), the file's own padding
//! section, then the family default (`[PAD]`, `<|endoftext|>`, `</s>`).
//!
//! BERT tokenizers are normalized as transformers 5's `BertTokenizer` builds them: when a
//! `tokenizer_config.json` of a BERT tokenizer sits next to the file, its `do_lower_case`
//! (default true), `strip_accents` and `tokenize_chinese_chars` decide the `BertNormalizer`, and
//! the normalizer stored in `tokenizer.json` is not used (they agree in every Hub checkpoint we
//! know; a file re-saved by sentence-transformers 6 with `do_lower_case` can differ, and
//! transformers then does not lowercase).
//!
//! The pad token only pads. LAION / OpenCLIP checkpoints converted to Hugging Face layout name
//! `"!"` as their pad token (OpenCLIP pads with id 0, which is `!` in the CLIP vocabulary);
//! transformers registers a pad token as a special token, so a literal `!` in a caption becomes
//! id 0 instead of the text token `!</w>` (and `!!` two such ids instead of `!!</w>`). OpenCLIP,
//! which trained these checkpoints, tokenizes `!` as text, and so does bindscope: for the CLIP
//! family a pad token that is an ordinary entry of the BPE vocabulary is not matched in the text,
//! even when `tokenizer.json` lists it among its added tokens (files re-saved by transformers ≥
//! 4.34 do). Captions without `!` are tokenized as transformers does; OpenAI CLIP checkpoints
//! (pad `<|endoftext|>`) are not affected.
//!
//! A checkpoint that is a sentence-transformers model ([`TextPolicy::from_checkpoint`], from
//! `bindscope_core::sentence`) truncates at its `max_seq_length` (256 for all-MiniLM-L6-v2, not the
//! model's 512) and, with `do_lower_case`, lowercases before the tokenizer's own normalizer, as
//! `SentenceTransformer(dir).encode` does.
//!
//! Not reproduced: OpenAI CLIP's ftfy / HTML-unescape text cleaning (HF `CLIPTokenizerFast` does
//! not run it either) and the slow `SiglipTokenizer`'s punctuation canonicalisation.
//!
//! ```no_run
//! use bindscope_data::text::{TextPolicy, Tokenizer};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tok = Tokenizer::from_file("minilm/tokenizer.json", TextPolicy::bert())?;
//! let enc = tok.encode_batch(&["a photo of a cat", "a dog"])?;
//! let (input_ids, attention_mask) = enc.tensors(&burn::tensor::Device::flex()); // [2, T] each
//! # Ok(()) }
//! ```

use burn::prelude::*;
use std::path::{Path, PathBuf};
use tokenizers::{
    PaddingDirection, PaddingParams, PaddingStrategy, TruncationDirection, TruncationParams,
    TruncationStrategy,
};

/// Why a tokenizer could not be built or could not encode.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// The tokenizer file (or a JSON file next to it) is missing, unreadable or malformed, or
    /// lacks a token the policy needs.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// The tokenizer failed on an input.
    #[error("{path}: tokenization failed: {message}")]
    Encode {
        /// The tokenizer file.
        path: PathBuf,
        /// The tokenizers crate's message.
        message: String,
    },
    /// A checkpoint file (`config.json`, the sentence-transformers files) could not be read or
    /// describes something not implemented.
    #[error(transparent)]
    Checkpoint(#[from] bindscope_core::CheckpointError),
    /// No policy for this `model_type`.
    #[error(
        "no tokenization policy for model_type '{0}' (known: bert, clip, clip_text_model, siglip, siglip_text_model)"
    )]
    UnknownModelType(String),
}

/// The tokenizer of a Hugging Face `tokenizer.json` file, as the file configures it.
///
/// # Errors
/// [`TextError::File`] naming the file when it is missing or not a valid tokenizer.
pub(crate) fn read_tokenizer_json(path: &Path) -> Result<tokenizers::Tokenizer, TextError> {
    let bad = |m: String| TextError::File {
        path: path.to_path_buf(),
        message: m,
    };
    if !path.is_file() {
        return Err(bad(
            "tokenizer file not found (expected a Hugging Face tokenizer.json)".into(),
        ));
    }
    tokenizers::Tokenizer::from_file(path)
        .map_err(|e| bad(format!("not a valid tokenizer.json: {e}")))
}

/// Text-encoder family, which decides the default padding and truncation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextFamily {
    /// BERT / MiniLM / sentence-transformers (WordPiece, `[CLS] … [SEP]`).
    Bert,
    /// CLIP text tower (byte-level BPE, `<|startoftext|> … <|endoftext|>`, context 77).
    Clip,
    /// SigLIP text tower (SentencePiece, `… </s>`, padded to 64).
    Siglip,
}

impl TextFamily {
    /// The family's default pad token (used only when neither the policy nor the files next to
    /// `tokenizer.json` name one).
    pub fn default_pad_token(self) -> &'static str {
        match self {
            Self::Bert => "[PAD]",
            Self::Clip => "<|endoftext|>",
            Self::Siglip => "</s>",
        }
    }
}

/// How the sequences of a batch are padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Padding {
    /// To the longest sequence of the batch (transformers `padding=True`).
    Longest,
    /// Always to [`TextPolicy::max_length`] (transformers `padding="max_length"`).
    MaxLength,
}

/// Padding and truncation rules of one text-encoder family.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TextPolicy {
    /// The family.
    pub family: TextFamily,
    /// Maximum number of tokens, special tokens included; longer inputs are truncated on the
    /// right, the closing special token kept last.
    pub max_length: usize,
    /// Padding rule (always on the right).
    pub padding: Padding,
    /// Pad token overriding the one found next to the tokenizer file.
    #[serde(default)]
    pub pad_token: Option<String>,
    /// Lowercase the text before the tokenizer's own normalizer (sentence-transformers'
    /// `do_lower_case`; a no-op when the normalizer already is or contains `Lowercase`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub lowercase: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl TextPolicy {
    /// BERT / MiniLM: truncate at 512, pad to the longest in the batch. (sentence-transformers'
    /// all-MiniLM-L6-v2 truncates at 256: [`TextPolicy::from_checkpoint`] reads that from its
    /// `sentence_bert_config.json`.)
    pub fn bert() -> Self {
        Self {
            family: TextFamily::Bert,
            max_length: 512,
            padding: Padding::Longest,
            pad_token: None,
            lowercase: false,
        }
    }

    /// CLIP: context 77 (EOT kept last), pad to the longest in the batch. The CLIP text tower
    /// pools the EOT token through the attention mask, so dynamic padding gives the same
    /// embeddings as padding to 77 ([`TextPolicy::clip_max_length`]).
    pub fn clip() -> Self {
        Self {
            family: TextFamily::Clip,
            max_length: 77,
            padding: Padding::Longest,
            pad_token: None,
            lowercase: false,
        }
    }

    /// CLIP padded to the full context of 77 tokens.
    pub fn clip_max_length() -> Self {
        Self {
            padding: Padding::MaxLength,
            ..Self::clip()
        }
    }

    /// SigLIP: pad and truncate to 64 (SigLIP was trained on sequences padded to 64 and its
    /// text tower reads the last position, so the padding is part of the input).
    pub fn siglip() -> Self {
        Self {
            family: TextFamily::Siglip,
            max_length: 64,
            padding: Padding::MaxLength,
            pad_token: None,
            lowercase: false,
        }
    }

    /// Same policy, another maximum length.
    pub fn with_max_length(self, max_length: usize) -> Self {
        Self { max_length, ..self }
    }

    /// Same policy, another padding rule.
    pub fn with_padding(self, padding: Padding) -> Self {
        Self { padding, ..self }
    }

    /// Same policy, an explicit pad token.
    pub fn with_pad_token(self, pad_token: impl Into<String>) -> Self {
        Self {
            pad_token: Some(pad_token.into()),
            ..self
        }
    }

    /// Same policy, lowercasing the text first (sentence-transformers' `do_lower_case`).
    pub fn with_lowercase(self, lowercase: bool) -> Self {
        Self { lowercase, ..self }
    }

    /// The default policy of a checkpoint's `model_type` (`bert`, `clip`, `clip_text_model`,
    /// `siglip`, `siglip_text_model`).
    ///
    /// # Errors
    /// [`TextError::UnknownModelType`].
    pub fn for_model_type(model_type: &str) -> Result<Self, TextError> {
        match model_type {
            "bert" => Ok(Self::bert()),
            "clip" | "clip_text_model" => Ok(Self::clip()),
            "siglip" | "siglip_text_model" => Ok(Self::siglip()),
            other => Err(TextError::UnknownModelType(other.to_string())),
        }
    }

    /// The policy for a checkpoint's `config.json`: [`TextPolicy::for_model_type`], with
    /// `max_length` from `max_position_embeddings` (of `text_config` for two-tower configs)
    /// when present.
    ///
    /// # Errors
    /// [`TextError::UnknownModelType`], also when `model_type` is absent.
    pub fn from_config(config: &serde_json::Value) -> Result<Self, TextError> {
        let model_type = config
            .get("model_type")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        let policy = Self::for_model_type(model_type)?;
        let text = config.get("text_config").unwrap_or(config);
        match text.get("max_position_embeddings").and_then(|v| v.as_u64()) {
            Some(n) if n > 0 => Ok(policy.with_max_length(n as usize)),
            _ => Ok(policy),
        }
    }

    /// The policy of a checkpoint: [`TextPolicy::from_config`] of its `config.json`, then, when
    /// the checkpoint is a sentence-transformers model
    /// ([`Checkpoint::sentence_transformers`](bindscope_core::Checkpoint::sentence_transformers)),
    /// its `max_seq_length` (capped at `max_position_embeddings`: the model has no position
    /// beyond it) and `do_lower_case`.
    ///
    /// # Errors
    /// [`TextError::Checkpoint`] for an unreadable `config.json` or sentence-transformers file,
    /// or a sentence-transformers pipeline bindscope does not implement;
    /// [`TextError::UnknownModelType`].
    pub fn from_checkpoint(ckpt: &bindscope_core::Checkpoint) -> Result<Self, TextError> {
        let policy = Self::from_config(&ckpt.config_json()?)?;
        Ok(match ckpt.sentence_transformers()? {
            None => policy,
            Some(st) => {
                let cap = policy.max_length;
                policy
                    .with_max_length(st.max_seq_length.map_or(cap, |n| n.min(cap)))
                    .with_lowercase(st.do_lower_case)
            }
        })
    }
}

/// A tokenized batch, padded to a common length `T`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// `N` rows of `T` token ids.
    pub input_ids: Vec<Vec<i64>>,
    /// `N` rows of `T` flags, 1 = token, 0 = padding.
    pub attention_mask: Vec<Vec<i64>>,
}

impl Encoded {
    /// Number of sequences `N`.
    pub fn len(&self) -> usize {
        self.input_ids.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.input_ids.is_empty()
    }

    /// Common sequence length `T` (0 for an empty batch).
    pub fn seq_len(&self) -> usize {
        self.input_ids.first().map_or(0, Vec::len)
    }

    fn tensor(rows: &[Vec<i64>], t: usize, device: &Device) -> Tensor<2, Int> {
        let flat: Vec<i64> = rows.iter().flatten().copied().collect();
        Tensor::<1, Int>::from_ints(flat.as_slice(), device).reshape([rows.len(), t])
    }

    /// `(input_ids, attention_mask)` as `[N, T]` integer tensors.
    pub fn tensors(&self, device: &Device) -> (Tensor<2, Int>, Tensor<2, Int>) {
        let t = self.seq_len();
        (
            Self::tensor(&self.input_ids, t, device),
            Self::tensor(&self.attention_mask, t, device),
        )
    }
}

/// A `tokenizer.json` tokenizer with a family's padding and truncation policy.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    policy: TextPolicy,
    path: PathBuf,
    pad_token: String,
    pad_id: u32,
}

/// `pad_token` of a `tokenizer_config.json` / `special_tokens_map.json` (a string or an
/// `AddedToken` object with `content`).
fn pad_token_in(path: &Path) -> Result<Option<String>, TextError> {
    if !path.is_file() {
        return Ok(None);
    }
    let bad = |m: String| TextError::File {
        path: path.to_path_buf(),
        message: m,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("bad JSON: {e}")))?;
    Ok(match v.get("pad_token") {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(obj @ serde_json::Value::Object(_)) => obj
            .get("content")
            .and_then(|c| c.as_str())
            .map(str::to_string),
        _ => None,
    })
}

/// The `BertNormalizer` transformers 5's `BertTokenizer` builds from a `tokenizer_config.json`
/// (`do_lower_case` default true, `tokenize_chinese_chars` default true, `strip_accents` default
/// none), when the file is a BERT tokenizer's (`tokenizer_class` `BertTokenizer[Fast]` or absent).
fn bert_normalizer_in(path: &Path) -> Result<Option<tokenizers::NormalizerWrapper>, TextError> {
    if !path.is_file() {
        return Ok(None);
    }
    let bad = |m: String| TextError::File {
        path: path.to_path_buf(),
        message: m,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("bad JSON: {e}")))?;
    match v.get("tokenizer_class").and_then(|c| c.as_str()) {
        None | Some("BertTokenizer" | "BertTokenizerFast") => {}
        Some(_) => return Ok(None),
    }
    let flag = |key: &str| -> Result<Option<bool>, TextError> {
        match v.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(bad(format!("{key}: expected true or false, found {other}"))),
        }
    };
    let lowercase = flag("do_lower_case")?.unwrap_or(true);
    let chinese = flag("tokenize_chinese_chars")?.unwrap_or(true);
    let strip_accents = flag("strip_accents")?;
    Ok(Some(
        tokenizers::normalizers::BertNormalizer::new(true, chinese, strip_accents, lowercase)
            .into(),
    ))
}

/// Whether a normalizer is, or is a sequence holding, `Lowercase` (sentence-transformers then
/// adds none).
fn has_lowercase(n: &tokenizers::NormalizerWrapper) -> bool {
    use tokenizers::NormalizerWrapper as N;
    match n {
        N::Lowercase(_) => true,
        N::Sequence(seq) => seq.as_ref().iter().any(|m| matches!(m, N::Lowercase(_))),
        _ => false,
    }
}

/// Whether `pad` is an ordinary entry of the model's vocabulary that `tokenizer.json` also lists
/// as an added token, so that the tokenizer would match it inside the text (LAION / OpenCLIP's
/// `"!"` in a file re-saved by transformers).
fn pads_text(inner: &tokenizers::Tokenizer, pad: &str) -> bool {
    inner.get_vocab(false).contains_key(pad)
        && inner
            .get_added_tokens_decoder()
            .values()
            .any(|t| t.content == pad)
}

/// The tokenizer of `path` without `token` among its added tokens (it stays in the model's
/// vocabulary, with its id).
fn without_added_token(path: &Path, token: &str) -> Result<tokenizers::Tokenizer, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if let Some(list) = v.get_mut("added_tokens").and_then(|a| a.as_array_mut()) {
        list.retain(|t| t.get("content").and_then(|c| c.as_str()) != Some(token));
    }
    v.to_string()
        .parse::<tokenizers::Tokenizer>()
        .map_err(|e| e.to_string())
}

impl Tokenizer {
    /// Reads a `tokenizer.json` and applies `policy`.
    ///
    /// # Errors
    /// [`TextError::File`] naming the file when it is missing or not a valid tokenizer, when a
    /// neighbouring `tokenizer_config.json` / `special_tokens_map.json` is malformed, or when
    /// the pad token is not in the vocabulary.
    pub fn from_file(path: impl AsRef<Path>, policy: TextPolicy) -> Result<Self, TextError> {
        let path = path.as_ref().to_path_buf();
        let bad = |m: String| TextError::File {
            path: path.clone(),
            message: m,
        };
        if policy.max_length == 0 {
            return Err(bad("policy max_length must be positive".into()));
        }
        let mut inner = read_tokenizer_json(&path)?;

        let dir = path.parent().unwrap_or(Path::new("."));
        let mut pad_token = policy.pad_token.clone();
        for side in ["tokenizer_config.json", "special_tokens_map.json"] {
            if pad_token.is_none() {
                pad_token = pad_token_in(&dir.join(side))?;
            }
        }
        let pad_token = pad_token
            .or_else(|| inner.get_padding().map(|p| p.pad_token.clone()))
            .unwrap_or_else(|| policy.family.default_pad_token().to_string());
        if policy.family == TextFamily::Clip && pads_text(&inner, &pad_token) {
            inner = without_added_token(&path, &pad_token)
                .map_err(|e| bad(format!("not a valid tokenizer.json: {e}")))?;
        }
        if policy.family == TextFamily::Bert
            && let Some(n) = bert_normalizer_in(&dir.join("tokenizer_config.json"))?
        {
            inner.with_normalizer(Some(n));
        }
        if policy.lowercase && !inner.get_normalizer().is_some_and(has_lowercase) {
            let mut seq: Vec<tokenizers::NormalizerWrapper> =
                vec![tokenizers::normalizers::Lowercase.into()];
            match inner.get_normalizer().cloned() {
                Some(tokenizers::NormalizerWrapper::Sequence(s)) => seq.extend(s),
                Some(n) => seq.push(n),
                None => {}
            }
            inner.with_normalizer(Some(tokenizers::normalizers::Sequence::new(seq)));
        }
        let pad_id = inner
            .token_to_id(&pad_token)
            .ok_or_else(|| bad(format!("pad token '{pad_token}' is not in the vocabulary")))?;

        let added = inner
            .get_post_processor()
            .map_or(0, |pp| tokenizers::PostProcessor::added_tokens(pp, false));
        if added >= policy.max_length {
            return Err(bad(format!(
                "max_length {} leaves no room for text next to the {added} special tokens",
                policy.max_length
            )));
        }
        inner
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: policy.max_length,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| bad(format!("cannot set truncation: {e}")))?;
        inner.with_padding(Some(PaddingParams {
            strategy: match policy.padding {
                Padding::Longest => PaddingStrategy::BatchLongest,
                Padding::MaxLength => PaddingStrategy::Fixed(policy.max_length),
            },
            direction: PaddingDirection::Right,
            pad_to_multiple_of: None,
            pad_id,
            pad_type_id: 0,
            pad_token: pad_token.clone(),
        }));
        Ok(Self {
            inner,
            policy,
            path,
            pad_token,
            pad_id,
        })
    }

    /// Reads a checkpoint's `tokenizer.json` with the checkpoint's policy
    /// ([`TextPolicy::from_checkpoint`]: its `config.json` and sentence-transformers files).
    ///
    /// # Errors
    /// [`TextError::File`] when the checkpoint has no `tokenizer.json`; the errors of
    /// [`TextPolicy::from_checkpoint`] and [`Tokenizer::from_file`].
    pub fn from_checkpoint(ckpt: &bindscope_core::Checkpoint) -> Result<Self, TextError> {
        let policy = TextPolicy::from_checkpoint(ckpt)?;
        let path = ckpt.tokenizer.clone().ok_or_else(|| TextError::File {
            path: ckpt.dir().join("tokenizer.json"),
            message: "checkpoint has no tokenizer.json".into(),
        })?;
        Self::from_file(path, policy)
    }

    /// The policy in force.
    pub fn policy(&self) -> &TextPolicy {
        &self.policy
    }

    /// The `tokenizer.json` this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pad token and its id.
    pub fn pad(&self) -> (&str, u32) {
        (&self.pad_token, self.pad_id)
    }

    /// The underlying `tokenizers` tokenizer (with this policy's padding and truncation set).
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Tokenizes a batch with special tokens, truncation and padding.
    ///
    /// # Shapes
    /// `N` texts → [`Encoded`] with `N` rows of `T` ids, `T` = the longest sequence (at most
    /// `max_length`) or `max_length`, per the policy. An empty batch gives an empty [`Encoded`].
    ///
    /// # Errors
    /// [`TextError::Encode`] naming the tokenizer file.
    pub fn encode_batch(&self, texts: &[&str]) -> Result<Encoded, TextError> {
        if texts.is_empty() {
            return Ok(Encoded {
                input_ids: Vec::new(),
                attention_mask: Vec::new(),
            });
        }
        let encodings =
            self.inner
                .encode_batch(texts.to_vec(), true)
                .map_err(|e| TextError::Encode {
                    path: self.path.clone(),
                    message: e.to_string(),
                })?;
        let rows = |f: &dyn Fn(&tokenizers::Encoding) -> &[u32]| -> Vec<Vec<i64>> {
            encodings
                .iter()
                .map(|e| f(e).iter().map(|&x| x as i64).collect())
                .collect()
        };
        Ok(Encoded {
            input_ids: rows(&|e| e.get_ids()),
            attention_mask: rows(&|e| e.get_attention_mask()),
        })
    }
}
