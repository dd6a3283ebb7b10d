//! # Llama — `LlamaForCausalLM`, and the decoder blocks Qwen2 and Qwen3 share
//!
//! Touvron et al., *LLaMA: Open and Efficient Foundation Language Models*
//! (<https://arxiv.org/abs/2302.13971>) and *Llama 2* (<https://arxiv.org/abs/2307.09288>), as
//! transformers implements them in `models/llama/modeling_llama.py` (`model_type: "llama"`:
//! SmolLM2, TinyLlama, Llama 2 / 3.x). Pre-norm blocks:
//!
//! ```text
//! h = x + o_proj(Attn(rope(q_proj(RMSNorm(x))), rope(k_proj(·)), v_proj(·)))
//! y = h + down_proj(silu(gate_proj(RMSNorm(h))) · up_proj(RMSNorm(h)))
//! ```
//!
//! with grouped-query attention (`num_key_value_heads` ≤ `num_attention_heads`), rotary position
//! embeddings in the rotate-half layout ([`crate::attention::RotaryEmbedding`], every
//! `rope_scaling` type of [`crate::attention::rope_from_config`]), an explicit `head_dim` when
//! the config gives one, and a final RMSNorm before `lm_head` — or before the transposed token
//! embedding when the embeddings are tied (`tie_word_embeddings`, or a checkpoint without
//! `lm_head.weight`).
//!
//! The blocks here are the ones [`crate::qwen2`] (q/k/v biases, no o_proj bias) and
//! [`crate::qwen3`] (per-head RMSNorm of queries and keys before the rotation) load into: the
//! three architectures differ only in [`DecoderSpec`], which each file builds from its own
//! `config.json` (the factoring transformers' `modular_qwen2.py` / `modular_qwen3.py` make
//! visible).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bindscope_core::{Checkpoint, LoadOptions};
//! use bindscope_models::{CausalLm, ForwardOptions, LmInput, llama::LlamaForCausalLM};
//! let device = burn::tensor::Device::flex();
//! let ckpt = Checkpoint::resolve("HuggingFaceTB/SmolLM2-135M-Instruct")?;
//! let model = LlamaForCausalLM::load(&ckpt, &device, &LoadOptions::default())?;
//! let ids = burn::tensor::Tensor::<2, burn::tensor::Int>::from_ints([[1, 504, 3458]], &device);
//! let mut cache = model.new_cache();
//! let out = model.forward_causal(LmInput::Ids(ids), None, None, &mut cache, ForwardOptions::default())?;
//! assert_eq!(out.logits.dims(), [1, 3, 49152]);
//! # Ok(()) }
//! ```
//!
//! ## Keys
//! `model.embed_tokens`, `model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj[,
//! self_attn.{q,k}_norm], post_attention_layernorm, mlp.{gate,up,down}_proj}`, `model.norm`,
//! `lm_head` (absent when tied). Old checkpoints' `rotary_emb.inv_freq` buffers are ignored.

use crate::attention::{
    AttentionMask, KvCache, RotaryEmbedding, merge_heads, rope_from_config,
    scaled_dot_product_attention,
};
use crate::nn::{
    ACTIVATION_NAMES, Activation, checkpoint_shapes, embedding, linear, linear_rows, matmul_2d,
    rms_norm, rms_norm_hf, to_dtype, to_f32,
};
use crate::{CausalLm, CausalLmOutput, ForwardOptions, LmInput, ModelError, ModelInfo};
use bindscope_core::{Checkpoint, LoadOptions, load_strict};
use burn::nn::{Embedding, Initializer, Linear, RmsNorm};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `model_type` of a `LlamaForCausalLM` checkpoint.
pub const MODEL_TYPE: &str = "llama";

/// File keys that are buffers, not parameters (rotary frequencies saved by old transformers).
const BENIGN: &str = r"rotary_emb\.inv_freq$";

/// Token ids given as one integer or a list (`eos_token_id` of `config.json` and
/// `generation_config.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TokenIds {
    /// One id.
    One(u32),
    /// Several ids (any of them ends generation).
    Many(Vec<u32>),
}

impl TokenIds {
    /// The ids as a list.
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            Self::One(i) => vec![*i],
            Self::Many(v) => v.clone(),
        }
    }
}

fn default_llama_model_type() -> String {
    MODEL_TYPE.into()
}
fn default_vocab_size() -> usize {
    32000
}
fn default_hidden_size() -> usize {
    4096
}
fn default_intermediate_size() -> usize {
    11008
}
fn default_num_layers() -> usize {
    32
}
fn default_num_heads() -> usize {
    32
}
fn default_hidden_act() -> String {
    "silu".into()
}
fn default_llama_max_positions() -> usize {
    2048
}
fn default_rms_norm_eps() -> f64 {
    1e-6
}
fn default_bos() -> Option<u32> {
    Some(1)
}
fn default_eos() -> Option<TokenIds> {
    Some(TokenIds::One(2))
}

/// `config.json` of a Llama checkpoint (HF `LlamaConfig`: field names and defaults as there).
/// The rotary settings (`rope_theta`, `rope_scaling` / `rope_parameters`) are read from the
/// same file by [`rope_from_config`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LlamaConfig {
    /// `"llama"`.
    #[serde(default = "default_llama_model_type")]
    pub model_type: String,
    /// Vocabulary size `V` (rows of `embed_tokens`).
    #[serde(default = "default_vocab_size")]
    pub vocab_size: usize,
    /// Width `D` of the hidden states.
    #[serde(default = "default_hidden_size")]
    pub hidden_size: usize,
    /// Width of the gated feed-forward layer.
    #[serde(default = "default_intermediate_size")]
    pub intermediate_size: usize,
    /// Number of blocks `L`.
    #[serde(default = "default_num_layers")]
    pub num_hidden_layers: usize,
    /// Query heads `H`.
    #[serde(default = "default_num_heads")]
    pub num_attention_heads: usize,
    /// Key/value heads `H_kv` (grouped-query attention); `num_attention_heads` when absent.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Per-head width `Dh`; `hidden_size / num_attention_heads` when absent.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Activation of the gate (`silu`).
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    /// The longest context (positions) the model takes.
    #[serde(default = "default_llama_max_positions")]
    pub max_position_embeddings: usize,
    /// Epsilon of every RMSNorm.
    #[serde(default = "default_rms_norm_eps")]
    pub rms_norm_eps: f64,
    /// Whether `lm_head` is the transposed token embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Biases on q/k/v/o projections.
    #[serde(default)]
    pub attention_bias: bool,
    /// Biases on the feed-forward projections.
    #[serde(default)]
    pub mlp_bias: bool,
    /// Beginning-of-sequence id.
    #[serde(default = "default_bos")]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence id(s).
    #[serde(default = "default_eos")]
    pub eos_token_id: Option<TokenIds>,
    /// Padding id.
    #[serde(default)]
    pub pad_token_id: Option<u32>,
}

/// What distinguishes the decoders of this family, resolved from a checkpoint's config: the
/// sizes, and which optional pieces the blocks have. Built by each architecture file
/// ([`LlamaConfig::spec`], [`crate::qwen2::Qwen2Config::spec`],
/// [`crate::qwen3::Qwen3Config::spec`]).
#[derive(Debug, Clone)]
pub struct DecoderSpec {
    /// The checkpoint's `model_type`.
    pub model_type: String,
    /// Vocabulary size `V`.
    pub vocab_size: usize,
    /// Hidden width `D`.
    pub hidden_size: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Blocks `L`.
    pub num_layers: usize,
    /// Query heads `H`.
    pub num_heads: usize,
    /// Key/value heads `H_kv` (divides `H`).
    pub num_kv_heads: usize,
    /// Per-head width `Dh`.
    pub head_dim: usize,
    /// Gate activation.
    pub act: Activation,
    /// Longest context.
    pub max_position_embeddings: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Whether `lm_head` is the token embedding (`tie_word_embeddings`).
    pub tie_word_embeddings: bool,
    /// Biases on q/k/v.
    pub qkv_bias: bool,
    /// Bias on o_proj.
    pub o_bias: bool,
    /// Biases on gate/up/down.
    pub mlp_bias: bool,
    /// Per-head RMSNorm of queries and keys before the rotation (Qwen3's `q_norm` / `k_norm`).
    pub qk_norm: bool,
    /// Rotary embeddings of every layer.
    pub rope: RotaryEmbedding,
    /// `bos_token_id` of `config.json`.
    pub bos_token_id: Option<u32>,
    /// `eos_token_id` of `config.json` (a list allowed).
    pub eos_token_id: Vec<u32>,
    /// `pad_token_id` of `config.json`.
    pub pad_token_id: Option<u32>,
}

fn unsupported(file: &Path, message: impl Into<String>) -> ModelError {
    ModelError::Unsupported {
        file: file.display().to_string(),
        message: message.into(),
    }
}

/// The fields every config of the family has, under the same Hugging Face names, as each
/// architecture's config struct read them with its own defaults.
pub(crate) struct CommonFields<'a> {
    pub model_type: &'a str,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub hidden_act: &'a str,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<&'a TokenIds>,
    pub pad_token_id: Option<u32>,
}

/// Which optional pieces an architecture's blocks have (see [`DecoderSpec`]).
pub(crate) struct BlockPieces {
    pub qkv_bias: bool,
    pub o_bias: bool,
    pub mlp_bias: bool,
    pub qk_norm: bool,
}

impl DecoderSpec {
    /// The spec of `c` and `pieces` after the checks every decoder of the family shares: the
    /// `model_type` is `expected`, sizes are positive, kv heads divide heads, `head_dim`
    /// (default `D / H`) is even, the activation and the rope settings of `raw` (the whole
    /// `config.json`) are supported.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` and the offending field.
    pub(crate) fn from_fields(
        file: &Path,
        raw: &serde_json::Value,
        expected: &str,
        c: CommonFields<'_>,
        pieces: BlockPieces,
    ) -> Result<Self, ModelError> {
        crate::nn::check_model_type_in(file, c.model_type, &[expected])?;
        for (name, v) in [
            ("vocab_size", c.vocab_size),
            ("hidden_size", c.hidden_size),
            ("intermediate_size", c.intermediate_size),
            ("num_hidden_layers", c.num_hidden_layers),
            ("num_attention_heads", c.num_attention_heads),
            ("max_position_embeddings", c.max_position_embeddings),
        ] {
            if v == 0 {
                return Err(unsupported(file, format!("{name} must be positive")));
            }
        }
        let (heads, hidden) = (c.num_attention_heads, c.hidden_size);
        let kv = c.num_key_value_heads.unwrap_or(heads);
        if kv == 0 || !heads.is_multiple_of(kv) {
            return Err(unsupported(
                file,
                format!(
                    "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}"
                ),
            ));
        }
        let head_dim = match c.head_dim {
            Some(0) => return Err(unsupported(file, "head_dim must be positive")),
            Some(d) => d,
            None if hidden.is_multiple_of(heads) => hidden / heads,
            None => {
                return Err(unsupported(
                    file,
                    format!(
                        "hidden_size {hidden} is not a multiple of num_attention_heads {heads} \
                         and no head_dim is given"
                    ),
                ));
            }
        };
        if !head_dim.is_multiple_of(2) {
            return Err(unsupported(
                file,
                format!("head_dim {head_dim} is odd: rotary embeddings rotate pairs"),
            ));
        }
        let act = Activation::from_hf(c.hidden_act).ok_or_else(|| {
            unsupported(
                file,
                format!(
                    "hidden_act '{}' (implemented: {ACTIVATION_NAMES})",
                    c.hidden_act
                ),
            )
        })?;
        let rope = rope_from_config(raw, head_dim, c.max_position_embeddings)
            .map_err(|m| unsupported(file, format!("{expected}: {m}")))?;
        Ok(DecoderSpec {
            model_type: c.model_type.to_string(),
            vocab_size: c.vocab_size,
            hidden_size: hidden,
            intermediate_size: c.intermediate_size,
            num_layers: c.num_hidden_layers,
            num_heads: heads,
            num_kv_heads: kv,
            head_dim,
            act,
            max_position_embeddings: c.max_position_embeddings,
            rms_norm_eps: c.rms_norm_eps,
            tie_word_embeddings: c.tie_word_embeddings,
            qkv_bias: pieces.qkv_bias,
            o_bias: pieces.o_bias,
            mlp_bias: pieces.mlp_bias,
            qk_norm: pieces.qk_norm,
            rope,
            bos_token_id: c.bos_token_id,
            eos_token_id: c.eos_token_id.map(TokenIds::to_vec).unwrap_or_default(),
            pad_token_id: c.pad_token_id,
        })
    }
}

impl LlamaConfig {
    /// The decoder this config describes.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` and the offending field: a `model_type` other
    /// than `llama`, heads that do not divide, an unknown activation or rope type.
    pub fn spec(&self, file: &Path, raw: &serde_json::Value) -> Result<DecoderSpec, ModelError> {
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
            qkv_bias: self.attention_bias,
            o_bias: self.attention_bias,
            mlp_bias: self.mlp_bias,
            qk_norm: false,
        };
        DecoderSpec::from_fields(file, raw, MODEL_TYPE, common, pieces)
    }
}

/// Self-attention of one block (HF `LlamaAttention` / `Qwen2Attention` / `Qwen3Attention`).
#[derive(Module, Debug)]
pub struct LlamaAttention {
    /// `D → H·Dh`.
    pub q_proj: Linear,
    /// `D → H_kv·Dh`.
    pub k_proj: Linear,
    /// `D → H_kv·Dh`.
    pub v_proj: Linear,
    /// `H·Dh → D`.
    pub o_proj: Linear,
    /// Qwen3: RMSNorm over each query head's `Dh` values, before the rotation.
    pub q_norm: Option<RmsNorm>,
    /// Qwen3: RMSNorm over each key head's `Dh` values, before the rotation.
    pub k_norm: Option<RmsNorm>,
    /// `H`.
    pub num_heads: usize,
    /// `H_kv`.
    pub num_kv_heads: usize,
    /// `Dh`.
    pub head_dim: usize,
}

impl LlamaAttention {
    /// `[N, T, D]` → `[N, H, T, Dh]`-style heads: projection, optional per-head norm, rotation.
    fn heads(
        &self,
        x: Tensor<3>,
        proj: &Linear,
        norm: Option<&RmsNorm>,
        heads: usize,
        rope: Option<(&Tensor<3>, &Tensor<3>)>,
    ) -> Tensor<4> {
        let [n, t, _] = x.dims();
        let mut h = linear_rows(proj, x).reshape([n, t, heads, self.head_dim]);
        if let Some(norm) = norm {
            h = rms_norm_hf(norm, h);
        }
        let h = h.swap_dims(1, 2); // [N, heads, T, Dh]
        match rope {
            Some((cos, sin)) => RotaryEmbedding::apply(h, cos, sin),
            None => h,
        }
    }

    /// One attention pass over `x: [N, T, D]` after what `cache` holds, appending to it.
    /// `cos`, `sin: [N, T, Dh]`; returns `[N, T, D]` and, when `need_probs`, the probabilities
    /// `[N, H, T, P + T]` (f32).
    pub fn forward(
        &self,
        x: Tensor<3>,
        cos: &Tensor<3>,
        sin: &Tensor<3>,
        mask: &AttentionMask,
        cache: &mut KvCache,
        need_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let q = self.heads(
            x.clone(),
            &self.q_proj,
            self.q_norm.as_ref(),
            self.num_heads,
            Some((cos, sin)),
        );
        let k = self.heads(
            x.clone(),
            &self.k_proj,
            self.k_norm.as_ref(),
            self.num_kv_heads,
            Some((cos, sin)),
        );
        let v = self.heads(x, &self.v_proj, None, self.num_kv_heads, None);
        let (k, v) = cache.append(k, v);
        let (ctx, probs) = scaled_dot_product_attention(q, k, v, mask, None, need_probs);
        (linear_rows(&self.o_proj, merge_heads(ctx)), probs)
    }
}

/// The gated feed-forward layer (HF `LlamaMLP`): `down(act(gate(x)) · up(x))`.
#[derive(Module, Debug)]
pub struct LlamaMlp {
    /// `D → intermediate`.
    pub gate_proj: Linear,
    /// `D → intermediate`.
    pub up_proj: Linear,
    /// `intermediate → D`.
    pub down_proj: Linear,
    /// `hidden_act`.
    #[module(skip)]
    pub act: Activation,
}

impl LlamaMlp {
    /// `[N, T, D]` → `[N, T, D]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let gate = self.act.forward(linear_rows(&self.gate_proj, x.clone()));
        linear_rows(&self.down_proj, gate * linear_rows(&self.up_proj, x))
    }
}

/// One pre-norm block (HF `LlamaDecoderLayer`).
#[derive(Module, Debug)]
pub struct LlamaDecoderLayer {
    /// Norm before attention.
    pub input_layernorm: RmsNorm,
    /// Attention.
    pub self_attn: LlamaAttention,
    /// Norm before the feed-forward layer.
    pub post_attention_layernorm: RmsNorm,
    /// Feed-forward layer.
    pub mlp: LlamaMlp,
}

impl LlamaDecoderLayer {
    /// `[N, T, D]` → `[N, T, D]` (and the attention probabilities on request).
    pub fn forward(
        &self,
        x: Tensor<3>,
        cos: &Tensor<3>,
        sin: &Tensor<3>,
        mask: &AttentionMask,
        cache: &mut KvCache,
        need_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let (a, probs) = self.self_attn.forward(
            rms_norm_hf(&self.input_layernorm, x.clone()),
            cos,
            sin,
            mask,
            cache,
            need_probs,
        );
        let h = x + a;
        let y = h.clone()
            + self
                .mlp
                .forward(rms_norm_hf(&self.post_attention_layernorm, h));
        (y, probs)
    }
}

/// The decoder stack (HF `LlamaModel`, key prefix `model.`).
#[derive(Module, Debug)]
pub struct LlamaModel {
    /// `[V, D]`.
    pub embed_tokens: Embedding,
    /// `L` blocks.
    pub layers: Vec<LlamaDecoderLayer>,
    /// The final RMSNorm.
    pub norm: RmsNorm,
}

/// A decoder LM of the Llama family with its head (HF `LlamaForCausalLM`; also what
/// [`crate::qwen2`] and [`crate::qwen3`] load into).
#[derive(Module, Debug)]
pub struct LlamaForCausalLM {
    /// HF `model`.
    pub model: LlamaModel,
    /// HF `lm_head` `D → V`; `None` when tied to `model.embed_tokens`.
    pub lm_head: Option<Linear>,
    /// The resolved configuration.
    #[module(skip)]
    pub spec: DecoderSpec,
}

impl DecoderSpec {
    /// A model with these sizes, zero-initialised (weights are meant to be loaded), with an
    /// `lm_head` unless `tied`.
    pub fn init(&self, tied: bool, device: &Device) -> LlamaForCausalLM {
        let z = Initializer::Zeros;
        let (d, dh) = (self.hidden_size, self.head_dim);
        let layers = (0..self.num_layers)
            .map(|_| LlamaDecoderLayer {
                input_layernorm: rms_norm(d, self.rms_norm_eps, device),
                self_attn: LlamaAttention {
                    q_proj: linear(d, self.num_heads * dh, self.qkv_bias, &z, device),
                    k_proj: linear(d, self.num_kv_heads * dh, self.qkv_bias, &z, device),
                    v_proj: linear(d, self.num_kv_heads * dh, self.qkv_bias, &z, device),
                    o_proj: linear(self.num_heads * dh, d, self.o_bias, &z, device),
                    q_norm: self
                        .qk_norm
                        .then(|| rms_norm(dh, self.rms_norm_eps, device)),
                    k_norm: self
                        .qk_norm
                        .then(|| rms_norm(dh, self.rms_norm_eps, device)),
                    num_heads: self.num_heads,
                    num_kv_heads: self.num_kv_heads,
                    head_dim: dh,
                },
                post_attention_layernorm: rms_norm(d, self.rms_norm_eps, device),
                mlp: LlamaMlp {
                    gate_proj: linear(d, self.intermediate_size, self.mlp_bias, &z, device),
                    up_proj: linear(d, self.intermediate_size, self.mlp_bias, &z, device),
                    down_proj: linear(self.intermediate_size, d, self.mlp_bias, &z, device),
                    act: self.act,
                },
            })
            .collect();
        LlamaForCausalLM {
            model: LlamaModel {
                embed_tokens: embedding(self.vocab_size, d, device),
                layers,
                norm: rms_norm(d, self.rms_norm_eps, device),
            },
            lm_head: (!tied).then(|| linear(d, self.vocab_size, false, &z, device)),
            spec: self.clone(),
        }
    }
}

impl DecoderSpec {
    /// The longest context the model takes, in positions: `max_position_embeddings`, or for the
    /// rope types that extend a pre-training context, `factor · original_max_position_embeddings`
    /// when that is longer (`dynamic`: transformers' NTK rule keeps extrapolating past it, but
    /// the factor names the length it was chosen for; `yarn`: the length the factor stretches
    /// the original context to).
    pub fn context(&self) -> usize {
        use crate::attention::RopeScaling;
        let extended = match self.rope.scaling() {
            RopeScaling::Dynamic {
                factor,
                original_max_position_embeddings,
            }
            | RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                ..
            } => (factor * original_max_position_embeddings).floor() as usize,
            _ => 0,
        };
        self.max_position_embeddings.max(extended)
    }
}

/// Loads `spec`'s decoder from `ckpt` strictly: every parameter present, every file key used
/// (old `rotary_emb.inv_freq` buffers and, when tied, a stored `lm_head.weight` excepted). The
/// head is tied when `tie_word_embeddings` says so or the checkpoint has no `lm_head.weight`.
pub(crate) fn load_decoder(
    spec: DecoderSpec,
    ckpt: &Checkpoint,
    device: &Device,
    opts: &LoadOptions,
) -> Result<LlamaForCausalLM, ModelError> {
    let shapes = checkpoint_shapes(ckpt)?;
    let tied = spec.tie_word_embeddings || !shapes.contains_key("lm_head.weight");
    let model = spec.init(tied, device);
    let mut opts = opts.clone();
    opts.benign_unused.push(BENIGN.into());
    if tied {
        // transformers ties it to the embedding whatever the file stores.
        opts.benign_unused.push(r"^lm_head\.weight$".into());
    }
    Ok(load_strict(model, &ckpt.weights, &opts)?)
}

impl LlamaForCausalLM {
    /// Loads a `LlamaForCausalLM` checkpoint (`model_type: "llama"`).
    ///
    /// # Errors
    /// [`ModelError::Checkpoint`] for a bad `config.json`; [`ModelError::Unsupported`] for a
    /// configuration outside [`LlamaConfig::spec`]; [`ModelError::Load`] listing every missing,
    /// unexpected or mis-shaped key under the checkpoint's names.
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        let config: LlamaConfig = ckpt.read_config()?;
        let spec = config.spec(&ckpt.config, &ckpt.config_json()?)?;
        load_decoder(spec, ckpt, device, opts)
    }

    /// Loads any decoder of the family by its `model_type` (`llama`, `qwen2`, `qwen3`) as the
    /// concrete module, not frozen: what a training study fine-tunes (the registry's
    /// [`crate::registry::load_causal_lm`] hands back a frozen `Box<dyn CausalLm>`).
    ///
    /// # Errors
    /// As [`LlamaForCausalLM::load`]; another `model_type` is [`ModelError::Unsupported`]
    /// naming the three.
    pub fn load_family(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        let mt = crate::nn::model_type(ckpt)?;
        match mt.as_str() {
            MODEL_TYPE => Self::load(ckpt, device, opts),
            crate::qwen2::MODEL_TYPE => crate::qwen2::load(ckpt, device, opts),
            crate::qwen3::MODEL_TYPE => crate::qwen3::load(ckpt, device, opts),
            other => Err(unsupported(
                &ckpt.config,
                format!(
                    "model_type '{other}' is not a decoder of the Llama family (llama, qwen2, qwen3)"
                ),
            )),
        }
    }

    /// The float dtype the weights are held and computed in.
    pub fn dtype(&self) -> burn::tensor::DType {
        self.model.embed_tokens.weight.val().dtype()
    }

    /// The final hidden state `[N, T, D]` (after the final norm) → logits `[N, T, V]` in f32.
    pub fn lm_logits(&self, hidden: Tensor<3>) -> Tensor<3> {
        let logits = match &self.lm_head {
            Some(head) => linear_rows(head, hidden),
            None => {
                let [n, t, d] = hidden.dims();
                let w = self.model.embed_tokens.weight.val(); // [V, D]
                let v = w.dims()[0];
                matmul_2d(hidden.reshape([n * t, d]), w.transpose()).reshape([n, t, v])
            }
        };
        to_f32(logits)
    }
}

/// The decoder stack's outputs before the LM head.
type StackOutput = (Tensor<3>, Option<Vec<Tensor<3>>>, Option<Vec<Tensor<4>>>);

impl LlamaForCausalLM {
    /// The decoder stack without the LM head: the final hidden state `[N, T, D]` after the
    /// final norm, in the weights' dtype (transformers' `outputs.last_hidden_state` of
    /// `LlamaModel`). A training loss that needs logits at a few positions only gathers those
    /// rows and applies [`LlamaForCausalLM::lm_logits`] to them.
    ///
    /// # Errors
    /// As [`CausalLm::forward_causal`].
    pub fn final_hidden(
        &self,
        input: LmInput,
        attention_mask: Option<Tensor<2, Int>>,
        position_ids: Option<Tensor<2, Int>>,
        cache: &mut [KvCache],
    ) -> Result<Tensor<3>, ModelError> {
        let (x, _, _) = self.stack(
            input,
            attention_mask,
            position_ids,
            cache,
            ForwardOptions::default(),
        )?;
        Ok(x)
    }

    fn stack(
        &self,
        input: LmInput,
        attention_mask: Option<Tensor<2, Int>>,
        position_ids: Option<Tensor<2, Int>>,
        cache: &mut [KvCache],
        opts: ForwardOptions,
    ) -> Result<StackOutput, ModelError> {
        let s = &self.spec;
        let err = |m: String| ModelError::Unsupported {
            file: format!("{} model", s.model_type),
            message: m,
        };
        let x = match input {
            LmInput::Ids(ids) => self.embed_tokens(ids),
            LmInput::Embeds(e) => to_dtype(e, self.dtype()),
        };
        let [n, t, d] = x.dims();
        if d != s.hidden_size {
            return Err(err(format!(
                "inputs_embeds have width {d}; the model's hidden_size is {}",
                s.hidden_size
            )));
        }
        if t == 0 {
            return Err(err("the input has no positions".into()));
        }
        if cache.len() != s.num_layers {
            return Err(err(format!(
                "the cache has {} layers; the model has {}",
                cache.len(),
                s.num_layers
            )));
        }
        let past = cache[0].len();
        if past + t > s.context() {
            return Err(err(format!(
                "{past} cached + {t} new positions exceed the model's context of {} positions \
                 (max_position_embeddings {}, rope type {})",
                s.context(),
                s.max_position_embeddings,
                s.rope.scaling().rope_type()
            )));
        }
        let device = x.device();
        let mask = match attention_mask {
            Some(m) => {
                if m.dims() != [n, past + t] {
                    return Err(err(format!(
                        "attention_mask has shape {:?}; expected [{n}, {}] (cached + new positions)",
                        m.dims(),
                        past + t
                    )));
                }
                AttentionMask::CausalPadding(m)
            }
            None if t == 1 => AttentionMask::None,
            None => AttentionMask::Causal,
        };
        let position_ids = match position_ids {
            Some(p) => {
                if p.dims() != [n, t] {
                    return Err(err(format!(
                        "position_ids has shape {:?}; expected [{n}, {t}]",
                        p.dims()
                    )));
                }
                p
            }
            None => Tensor::<1, Int>::arange(past as i64..(past + t) as i64, &device)
                .reshape([1, t])
                .expand([n, t]),
        };
        let (cos, sin) = s.rope.cos_sin(position_ids);
        let mut hidden = opts.output_hidden_states.then(Vec::new);
        let mut attns = opts.output_attentions.then(Vec::new);
        let mut x = x;
        for (layer, c) in self.model.layers.iter().zip(cache.iter_mut()) {
            if let Some(h) = hidden.as_mut() {
                h.push(x.clone());
            }
            let (y, p) = layer.forward(x, &cos, &sin, &mask, c, opts.output_attentions);
            x = y;
            if let (Some(a), Some(p)) = (attns.as_mut(), p) {
                a.push(match opts.attention_last_rows {
                    Some(k) if k < t => {
                        let [pn, ph, _, ps] = p.dims();
                        let rows = p.slice([0..pn, 0..ph, t - k..t, 0..ps]);
                        // A slice is a view of the whole `[N, H, T, S]` buffer on some backends
                        // (burn-flex): copy the rows out so that the buffer is freed now.
                        let device = rows.device();
                        let data = rows.try_into_data().map_err(|e| {
                            err(format!("reading the last attention rows back: {e}"))
                        })?;
                        Tensor::from_data(data, &device)
                    }
                    _ => p,
                });
            }
        }
        let x = rms_norm_hf(&self.model.norm, x);
        if let Some(h) = hidden.as_mut() {
            h.push(x.clone());
        }
        Ok((x, hidden, attns))
    }
}

impl CausalLm for LlamaForCausalLM {
    fn forward_causal_keep(
        &self,
        input: LmInput,
        attention_mask: Option<Tensor<2, Int>>,
        position_ids: Option<Tensor<2, Int>>,
        cache: &mut [KvCache],
        opts: ForwardOptions,
        logits_to_keep: usize,
    ) -> Result<CausalLmOutput, ModelError> {
        let (x, hidden, attns) = self.stack(input, attention_mask, position_ids, cache, opts)?;
        let [n, t, d] = x.dims();
        let kept = if logits_to_keep == 0 || logits_to_keep >= t {
            x
        } else {
            x.slice([0..n, t - logits_to_keep..t, 0..d])
        };
        Ok(CausalLmOutput {
            logits: self.lm_logits(kept),
            hidden_states: hidden.map(|h| h.into_iter().map(to_f32).collect()),
            attentions: attns.map(|a| a.into_iter().map(to_f32).collect()),
        })
    }

    fn embed_tokens(&self, input_ids: Tensor<2, Int>) -> Tensor<3> {
        self.model.embed_tokens.forward(input_ids)
    }

    fn new_cache(&self) -> Vec<KvCache> {
        (0..self.spec.num_layers).map(|_| KvCache::new()).collect()
    }

    fn info(&self) -> ModelInfo {
        let s = &self.spec;
        ModelInfo {
            model_type: s.model_type.clone(),
            dtype: bindscope_core::load::dtype_name(self.dtype()),
            hidden_size: s.hidden_size,
            embed_dim: s.vocab_size,
            num_layers: s.num_layers,
            num_heads: s.num_heads,
            num_params: self.num_params(),
            input_size: [s.context(), 0],
            patch_size: 0,
        }
    }

    fn eos_token_ids(&self) -> Vec<u32> {
        self.spec.eos_token_id.clone()
    }

    fn pad_token_id(&self) -> Option<u32> {
        self.spec.pad_token_id
    }
}
