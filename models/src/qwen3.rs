//! # Qwen3 — `Qwen3ForCausalLM`
//!
//! Qwen Team, *Qwen3 Technical Report* (<https://arxiv.org/abs/2505.09388>), as transformers
//! implements it in `models/qwen3/modeling_qwen3.py` (`model_type: "qwen3"`). Llama's blocks
//! ([`crate::llama`]) with an RMSNorm over each query and key head (`self_attn.q_norm`,
//! `self_attn.k_norm`, width `head_dim`) applied before the rotation, an explicit `head_dim`
//! (128 by default, independent of `hidden_size / num_attention_heads`), and biases on all four
//! attention projections only when `attention_bias` (false in the released checkpoints).
//!
//! Sliding-window attention is refused by name, as for [`crate::qwen2`].

use crate::ModelError;
use crate::llama::{
    BlockPieces, CommonFields, DecoderSpec, LlamaForCausalLM, TokenIds, load_decoder,
};
use crate::qwen2::{
    default_hidden_act, default_hidden_size, default_intermediate_size, default_max_positions,
    default_num_heads, default_num_kv_heads, default_num_layers, default_rms_norm_eps,
    default_vocab_size, refuse_sliding_window,
};
use bindscope_core::{Checkpoint, LoadOptions};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `model_type` of a `Qwen3ForCausalLM` checkpoint.
pub const MODEL_TYPE: &str = "qwen3";

/// The model class: Llama's blocks with Qwen3's per-head query/key norms.
pub type Qwen3ForCausalLM = LlamaForCausalLM;

fn default_model_type() -> String {
    MODEL_TYPE.into()
}
fn default_head_dim() -> usize {
    128
}

/// `config.json` of a Qwen3 checkpoint (HF `Qwen3Config`: field names and defaults as there;
/// rotary settings read by [`crate::attention::rope_from_config`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Qwen3Config {
    /// `"qwen3"`.
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
    /// Per-head width `Dh`.
    #[serde(default = "default_head_dim")]
    pub head_dim: usize,
    /// Gate activation.
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    /// Longest context.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// RMSNorm epsilon (also of `q_norm` / `k_norm`).
    #[serde(default = "default_rms_norm_eps")]
    pub rms_norm_eps: f64,
    /// Whether `lm_head` is the token embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Biases on q/k/v/o.
    #[serde(default)]
    pub attention_bias: bool,
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

impl Qwen3Config {
    /// The decoder this config describes.
    ///
    /// # Errors
    /// As [`crate::qwen2::Qwen2Config::spec`].
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
            head_dim: Some(self.head_dim),
            hidden_act: &self.hidden_act,
            max_position_embeddings: self.max_position_embeddings,
            rms_norm_eps: self.rms_norm_eps,
            tie_word_embeddings: self.tie_word_embeddings,
            bos_token_id: self.bos_token_id,
            eos_token_id: self.eos_token_id.as_ref(),
            pad_token_id: self.pad_token_id,
        };
        let pieces = BlockPieces {
            qkv_bias: self.attention_bias,
            o_bias: self.attention_bias,
            mlp_bias: false,
            qk_norm: true,
        };
        DecoderSpec::from_fields(file, raw, MODEL_TYPE, common, pieces)
    }
}

/// Loads a `Qwen3ForCausalLM` checkpoint (`model_type: "qwen3"`).
///
/// # Errors
/// As [`LlamaForCausalLM::load`].
pub fn load(
    ckpt: &Checkpoint,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Qwen3ForCausalLM, ModelError> {
    let config: Qwen3Config = ckpt.read_config()?;
    let spec = config.spec(&ckpt.config, &ckpt.config_json()?)?;
    load_decoder(spec, ckpt, device, opts)
}
