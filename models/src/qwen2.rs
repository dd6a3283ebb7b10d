//! # Qwen2 — `Qwen2ForCausalLM`
//!
//! Qwen Team, *Qwen2 Technical Report* (<https://arxiv.org/abs/2407.10671>), as transformers
//! implements it in `models/qwen2/modeling_qwen2.py` (`model_type: "qwen2"`; Qwen2 / Qwen2.5
//! and the language model of LLaVA-OneVision). Llama's blocks ([`crate::llama`]) with biases on
//! the q/k/v projections (always) and none on `o_proj` or the feed-forward layer; `head_dim` is
//! the config's when given, else `hidden_size / num_attention_heads`.
//!
//! Sliding-window attention (`use_sliding_window: true`, or `layer_types` naming
//! `sliding_attention`) is refused by name: the released Qwen2 / Qwen2.5 checkpoints and
//! LLaVA-OneVision's decoder run full attention.
//!
//! Keys are Llama's ([`crate::llama`]).

use crate::ModelError;
use crate::llama::{
    BlockPieces, CommonFields, DecoderSpec, LlamaForCausalLM, TokenIds, load_decoder,
};
use bindscope_core::{Checkpoint, LoadOptions};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `model_type` of a `Qwen2ForCausalLM` checkpoint.
pub const MODEL_TYPE: &str = "qwen2";

/// The model class: Llama's blocks with Qwen2's biases.
pub type Qwen2ForCausalLM = LlamaForCausalLM;

fn default_model_type() -> String {
    MODEL_TYPE.into()
}
pub(crate) fn default_vocab_size() -> usize {
    151936
}
pub(crate) fn default_hidden_size() -> usize {
    4096
}
pub(crate) fn default_intermediate_size() -> usize {
    22016
}
pub(crate) fn default_num_layers() -> usize {
    32
}
pub(crate) fn default_num_heads() -> usize {
    32
}
pub(crate) fn default_num_kv_heads() -> Option<usize> {
    Some(32)
}
pub(crate) fn default_hidden_act() -> String {
    "silu".into()
}
pub(crate) fn default_max_positions() -> usize {
    32768
}
pub(crate) fn default_rms_norm_eps() -> f64 {
    1e-6
}

/// `config.json` of a Qwen2 checkpoint (HF `Qwen2Config`: field names and defaults as there;
/// rotary settings read by [`crate::attention::rope_from_config`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Qwen2Config {
    /// `"qwen2"`.
    #[serde(default = "default_model_type")]
    pub model_type: String,
    /// Vocabulary size `V`.
    #[serde(default = "default_vocab_size")]
    pub vocab_size: usize,
    /// Hidden width `D`.
    #[serde(default = "default_hidden_size")]
    pub hidden_size: usize,
    /// Feed-forward width.
    #[serde(default = "default_intermediate_size")]
    pub intermediate_size: usize,
    /// Blocks `L`.
    #[serde(default = "default_num_layers")]
    pub num_hidden_layers: usize,
    /// Query heads `H`.
    #[serde(default = "default_num_heads")]
    pub num_attention_heads: usize,
    /// Key/value heads `H_kv`; `num_attention_heads` when null.
    #[serde(default = "default_num_kv_heads")]
    pub num_key_value_heads: Option<usize>,
    /// Per-head width; `hidden_size / num_attention_heads` when absent.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Gate activation.
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    /// Longest context.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// RMSNorm epsilon.
    #[serde(default = "default_rms_norm_eps")]
    pub rms_norm_eps: f64,
    /// Whether `lm_head` is the token embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Sliding-window attention (refused when true).
    #[serde(default)]
    pub use_sliding_window: bool,
    /// Per-layer attention kinds (only `full_attention` is implemented).
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    /// Beginning-of-sequence id.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence id(s).
    #[serde(default)]
    pub eos_token_id: Option<TokenIds>,
    /// Padding id.
    #[serde(default)]
    pub pad_token_id: Option<u32>,
}

/// Refuses sliding-window attention (Qwen2 and Qwen3 configs share the fields).
pub(crate) fn refuse_sliding_window(
    file: &Path,
    use_sliding_window: bool,
    layer_types: Option<&[String]>,
) -> Result<(), ModelError> {
    let err = |m: String| ModelError::Unsupported {
        file: file.display().to_string(),
        message: m,
    };
    if use_sliding_window {
        return Err(err(
            "use_sliding_window: true (sliding-window attention is not implemented; \
             only full attention is)"
                .into(),
        ));
    }
    if let Some(t) = layer_types
        && let Some((i, kind)) = t.iter().enumerate().find(|(_, k)| *k != "full_attention")
    {
        return Err(err(format!(
            "layer_types[{i}] is '{kind}' (only 'full_attention' is implemented)"
        )));
    }
    Ok(())
}

impl Qwen2Config {
    /// The decoder this config describes.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` and the field, as [`crate::llama::LlamaConfig::spec`],
    /// and for sliding-window attention.
    pub fn spec(&self, file: &Path, raw: &serde_json::Value) -> Result<DecoderSpec, ModelError> {
        refuse_sliding_window(file, self.use_sliding_window, self.layer_types.as_deref())?;
        let common = CommonFields {
            model_type: &self.model_type,
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            num_key_value_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            hidden_act: &self.hidden_act,
            max_position_embeddings: self.max_position_embeddings,
            rms_norm_eps: self.rms_norm_eps,
            tie_word_embeddings: self.tie_word_embeddings,
            bos_token_id: self.bos_token_id,
            eos_token_id: self.eos_token_id.as_ref(),
            pad_token_id: self.pad_token_id,
        };
        let pieces = BlockPieces {
            qkv_bias: true,
            o_bias: false,
            mlp_bias: false,
            qk_norm: false,
        };
        DecoderSpec::from_fields(file, raw, MODEL_TYPE, common, pieces)
    }
}

/// Loads a `Qwen2ForCausalLM` checkpoint (`model_type: "qwen2"`).
///
/// # Errors
/// As [`LlamaForCausalLM::load`].
pub fn load(
    ckpt: &Checkpoint,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Qwen2ForCausalLM, ModelError> {
    let config: Qwen2Config = ckpt.read_config()?;
    let spec = config.spec(&ckpt.config, &ckpt.config_json()?)?;
    load_decoder(spec, ckpt, device, opts)
}
