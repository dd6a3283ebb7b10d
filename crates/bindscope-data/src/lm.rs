//! Tokenization for decoder language models: a checkpoint's `tokenizer.json` used as
//! transformers' fast tokenizer uses it for generation — the file's own pre-tokenizer,
//! post-processor (whether a BOS is added is the file's business) and decoder, with no padding
//! and no truncation (a batch is left-padded by the generator, not the tokenizer).
//!
//! - [`LmTokenizer::encode`] with `add_special_tokens = true` is `tokenizer(text)["input_ids"]`;
//!   with `false` it is what `apply_chat_template(..., tokenize=True)` does to the rendered
//!   template text (transformers 5.x tokenizes a chat with `add_special_tokens=False`: the
//!   template writes the special tokens itself).
//! - [`LmTokenizer::decode`] is `tokenizer.decode(ids, skip_special_tokens=...)`.

use crate::text::TextError;
use std::path::{Path, PathBuf};

/// A decoder LM's tokenizer (`tokenizer.json`).
#[derive(Debug, Clone)]
pub struct LmTokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl LmTokenizer {
    /// Reads `path` (a Hugging Face `tokenizer.json`), with padding and truncation switched off.
    ///
    /// # Errors
    /// [`TextError::File`] naming the file when it is missing or not a valid tokenizer.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TextError> {
        let path = path.as_ref().to_path_buf();
        let bad = |m: String| TextError::File {
            path: path.clone(),
            message: m,
        };
        let mut inner = crate::text::read_tokenizer_json(&path)?;
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| bad(format!("cannot switch truncation off: {e}")))?;
        Ok(Self { inner, path })
    }

    /// The tokenizer of a checkpoint directory (`tokenizer.json` beside `config.json`).
    ///
    /// # Errors
    /// [`TextError::File`] naming the expected file when the checkpoint has no tokenizer.json.
    pub fn from_checkpoint(ckpt: &bindscope_core::Checkpoint) -> Result<Self, TextError> {
        match &ckpt.tokenizer {
            Some(p) => Self::from_file(p),
            None => Err(TextError::File {
                path: ckpt
                    .config
                    .parent()
                    .unwrap_or(Path::new("."))
                    .join("tokenizer.json"),
                message: format!(
                    "checkpoint '{}' has no tokenizer.json (a decoder needs one to read a prompt)",
                    ckpt.spec
                ),
            }),
        }
    }

    /// The file this tokenizer was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Token ids of `text`; `add_special_tokens` applies the file's post-processor (BOS/EOS
    /// templates).
    ///
    /// # Errors
    /// [`TextError::Encode`] when the tokenizer fails.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TextError> {
        self.inner
            .encode(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TextError::Encode {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }

    /// The text of `ids`, special tokens left out when `skip_special_tokens`.
    ///
    /// # Errors
    /// [`TextError::Encode`] when an id is outside the vocabulary or decoding fails.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TextError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| TextError::Encode {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }

    /// The id of `token` (a vocabulary entry or an added token), if it has one.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}
