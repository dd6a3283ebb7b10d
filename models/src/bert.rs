//! BERT encoder (Devlin et al., 2019, "BERT: Pre-training of Deep Bidirectional Transformers for
//! Language Understanding", <https://arxiv.org/abs/1810.04805>), as Hugging Face's `BertModel`,
//! with the sentence-transformers sentence embedding.
//!
//! The sentence embedding ([`BertModel::sentence_embedding`], [`TextEncoder::embed_text`]) is
//! the checkpoint's own when it is a sentence-transformers model (`modules.json`, read by
//! [`bindscope_core::sentence`]): its `Pooling` modes (cls, max, mean, mean_sqrt_len_tokens,
//! weightedmean, lasttoken, concatenated when several) and whether a `Normalize` follows, as
//! `SentenceTransformer(dir).encode` computes it. Without those files it is mean pooling over
//! the attention mask then L2 normalization (the recipe of
//! `sentence-transformers/all-MiniLM-L6-v2`, Wang et al., 2020, "MiniLM",
//! <https://arxiv.org/abs/2002.10957>).
//!
//! Post-norm blocks: `x = LN(x + Attn(x))`, `x = LN(x + FFN(x))`, with padding masked out of the
//! attention keys.
//!
//! ```no_run
//! use bindscope_core::{Checkpoint, LoadOptions};
//! use bindscope_models::bert::BertModel;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let device = burn::tensor::Device::flex();
//! let ckpt = Checkpoint::resolve("sentence-transformers/all-MiniLM-L6-v2")?;
//! let model = BertModel::load(&ckpt, &device, &LoadOptions::default())?;
//! # Ok(()) }
//! ```
//!
//! Checkpoints whose keys carry a `bert.` prefix (`BertForMaskedLM`, `BertForSequenceClassification`,
//! ...) load too: the prefix is stripped, and their task heads (`cls.*`, `classifier.*`) are
//! reported as unexpected keys unless [`TASK_HEADS`] is added to
//! [`LoadOptions::benign_unused`].

use crate::attention::{AttentionMask, multi_head_attention};
use crate::{EncoderOutput, ForwardOptions, ModelError, ModelInfo, TextEncoder};
use bindscope_core::sentence::{PoolingMode, SentencePooling};
use bindscope_core::{Checkpoint, LoadOptions, load_strict};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::tanh;

use crate::nn::{ACTIVATION_NAMES, Activation, Unpadded};

/// `model_type` of a `BertModel` checkpoint.
pub const MODEL_TYPE: &str = "bert";

/// Regex of the task-head keys of `BertFor*` checkpoints (`cls.*` of `BertForMaskedLM` /
/// `BertForPreTraining`, `classifier.*`, `qa_outputs.*`). Add it to
/// [`LoadOptions::benign_unused`] to load such a checkpoint's encoder and ignore its head.
pub const TASK_HEADS: &str = r"^(cls|classifier|qa_outputs)\.";

/// File keys that are buffers, not parameters (`embeddings.position_ids`, after prefix removal).
const BENIGN: &str = r"^embeddings\.position_ids$";

/// Remapping of HF key names onto this module's field names: `attention.self` (`self` is a Rust
/// keyword) and `LayerNorm` (a Rust field is snake case).
const REMAP: [(&str, &str); 2] = [
    (r"\.attention\.self\.", ".attention.self_attn."),
    (r"(^|\.)LayerNorm\.", "${1}layer_norm."),
];

fn default_model_type() -> String {
    MODEL_TYPE.into()
}
fn default_vocab_size() -> usize {
    30522
}
fn default_hidden_size() -> usize {
    768
}
fn default_num_hidden_layers() -> usize {
    12
}
fn default_num_attention_heads() -> usize {
    12
}
fn default_intermediate_size() -> usize {
    3072
}
fn default_hidden_act() -> String {
    "gelu".into()
}
fn default_max_position_embeddings() -> usize {
    512
}
fn default_type_vocab_size() -> usize {
    2
}
fn default_layer_norm_eps() -> f64 {
    1e-12
}
fn default_position_embedding_type() -> String {
    "absolute".into()
}

/// `config.json` of a BERT checkpoint (HF `BertConfig`; field names and defaults as there).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
pub struct BertConfig {
    /// `"bert"`.
    #[serde(default = "default_model_type")]
    pub model_type: String,
    /// Vocabulary size (rows of `word_embeddings`).
    #[serde(default = "default_vocab_size")]
    pub vocab_size: usize,
    /// Width `D` of the hidden states.
    #[serde(default = "default_hidden_size")]
    pub hidden_size: usize,
    /// Number of blocks `L`.
    #[serde(default = "default_num_hidden_layers")]
    pub num_hidden_layers: usize,
    /// Number of attention heads `H` (`D` must be divisible by `H`).
    #[serde(default = "default_num_attention_heads")]
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    #[serde(default = "default_intermediate_size")]
    pub intermediate_size: usize,
    /// Feed-forward activation, a transformers name ([`Activation::from_hf`]).
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    /// Maximum sequence length (rows of `position_embeddings`).
    #[serde(default = "default_max_position_embeddings")]
    pub max_position_embeddings: usize,
    /// Number of token types (rows of `token_type_embeddings`).
    #[serde(default = "default_type_vocab_size")]
    pub type_vocab_size: usize,
    /// Epsilon of every LayerNorm.
    #[serde(default = "default_layer_norm_eps")]
    pub layer_norm_eps: f64,
    /// Only `"absolute"` is supported.
    #[serde(default = "default_position_embedding_type")]
    pub position_embedding_type: String,
    /// Decoder configurations are not supported.
    #[serde(default)]
    pub is_decoder: bool,
    /// Cross-attention is not supported.
    #[serde(default)]
    pub add_cross_attention: bool,
}

impl BertConfig {
    /// Checks that this implementation supports the configuration and returns the activation.
    ///
    /// # Errors
    /// A message naming the unsupported setting and what is supported.
    pub fn validate(&self) -> Result<Activation, String> {
        if self.model_type != MODEL_TYPE {
            return Err(format!("model_type '{}' is not 'bert'", self.model_type));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type '{}' (only 'absolute' is implemented)",
                self.position_embedding_type
            ));
        }
        if self.is_decoder || self.add_cross_attention {
            return Err(
                "is_decoder / add_cross_attention (only the bidirectional encoder is implemented)"
                    .into(),
            );
        }
        Activation::from_hf(&self.hidden_act).ok_or_else(|| {
            format!(
                "hidden_act '{}' (implemented: {ACTIVATION_NAMES})",
                self.hidden_act
            )
        })
    }

    /// Builds a randomly initialised model (weights are meant to be loaded afterwards), with or
    /// without `pooler.dense`.
    ///
    /// # Errors
    /// The message of [`BertConfig::validate`].
    pub fn init(&self, with_pooler: bool, device: &Device) -> Result<BertModel, String> {
        let act = self.validate()?;
        let d = self.hidden_size;
        let ln = || {
            LayerNormConfig::new(d)
                .with_epsilon(self.layer_norm_eps)
                .init(device)
        };
        let embeddings = BertEmbeddings {
            word_embeddings: EmbeddingConfig::new(self.vocab_size, d).init(device),
            position_embeddings: EmbeddingConfig::new(self.max_position_embeddings, d).init(device),
            token_type_embeddings: EmbeddingConfig::new(self.type_vocab_size, d).init(device),
            layer_norm: ln(),
        };
        let layer = (0..self.num_hidden_layers)
            .map(|_| BertLayer {
                attention: BertAttention {
                    self_attn: BertSelfAttention {
                        query: LinearConfig::new(d, d).init(device),
                        key: LinearConfig::new(d, d).init(device),
                        value: LinearConfig::new(d, d).init(device),
                        num_heads: self.num_attention_heads,
                    },
                    output: BertSelfOutput {
                        dense: LinearConfig::new(d, d).init(device),
                        layer_norm: ln(),
                    },
                },
                intermediate: BertIntermediate {
                    dense: LinearConfig::new(d, self.intermediate_size).init(device),
                    act,
                },
                output: BertOutput {
                    dense: LinearConfig::new(self.intermediate_size, d).init(device),
                    layer_norm: ln(),
                },
            })
            .collect();
        let pooler = with_pooler.then(|| BertPooler {
            dense: LinearConfig::new(d, d).init(device),
        });
        Ok(BertModel {
            embeddings,
            encoder: BertEncoder { layer },
            pooler,
            config: self.clone(),
            sentence: SentencePooling::mean_normalized(),
        })
    }
}

/// Word + position + token-type embeddings, then LayerNorm (HF `BertEmbeddings`).
#[derive(Module, Debug)]
pub struct BertEmbeddings {
    /// `[vocab_size, D]`.
    pub word_embeddings: Embedding,
    /// `[max_position_embeddings, D]`.
    pub position_embeddings: Embedding,
    /// `[type_vocab_size, D]`.
    pub token_type_embeddings: Embedding,
    /// HF `embeddings.LayerNorm`.
    pub layer_norm: LayerNorm,
}

impl BertEmbeddings {
    /// `input_ids, token_type_ids: [N, T]` → `[N, T, D]`; positions are `0..T`.
    pub fn forward(&self, input_ids: Tensor<2, Int>, token_type_ids: Tensor<2, Int>) -> Tensor<3> {
        let [_, t] = input_ids.dims();
        let device = input_ids.device();
        let positions = Tensor::<1, Int>::arange(0..t as i64, &device).reshape([1, t]);
        let x = self.word_embeddings.forward(input_ids)
            + self.token_type_embeddings.forward(token_type_ids)
            + self.position_embeddings.forward(positions); // [N, T, D] + [1, T, D]
        self.layer_norm.forward(x)
    }
}

/// Query / key / value projections (HF `BertSelfAttention`, key `attention.self`).
#[derive(Module, Debug)]
pub struct BertSelfAttention {
    /// `D → D`.
    pub query: Linear,
    /// `D → D`.
    pub key: Linear,
    /// `D → D`.
    pub value: Linear,
    /// Number of heads `H`.
    pub num_heads: usize,
}

/// Output projection, residual and LayerNorm after attention (HF `BertSelfOutput`).
#[derive(Module, Debug)]
pub struct BertSelfOutput {
    /// `D → D`.
    pub dense: Linear,
    /// HF `attention.output.LayerNorm`.
    pub layer_norm: LayerNorm,
}

/// Self-attention sub-block (HF `BertAttention`).
#[derive(Module, Debug)]
pub struct BertAttention {
    /// HF `attention.self`.
    pub self_attn: BertSelfAttention,
    /// HF `attention.output`.
    pub output: BertSelfOutput,
}

impl BertAttention {
    /// `x: [N, T, D]`, `mask: [N, T]` (1 = token) → `LN(x + Wo·Attn(x))` `[N, T, D]` and, when
    /// `need_probs`, the probabilities `[N, H, T, T]`.
    pub fn forward(
        &self,
        x: Tensor<3>,
        mask: &AttentionMask,
        need_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let heads = self.self_attn.num_heads;
        self.forward_with(x, |q, k, v| {
            multi_head_attention(q, k, v, heads, mask, None, need_probs)
        })
    }

    /// The sub-block on tokens of any layout (`[N, T, D]`, or the packed `[M, D]` of
    /// [`Unpadded`]): the projections, residual and LayerNorm are per token; `attend(q, k, v)`
    /// gives the merged-heads context in the same layout and the probabilities.
    fn forward_with<const R: usize>(
        &self,
        x: Tensor<R>,
        attend: impl FnOnce(Tensor<R>, Tensor<R>, Tensor<R>) -> (Tensor<R>, Option<Tensor<4>>),
    ) -> (Tensor<R>, Option<Tensor<4>>) {
        let s = &self.self_attn;
        let q = s.query.forward(x.clone());
        let k = s.key.forward(x.clone());
        let v = s.value.forward(x.clone());
        let (ctx, probs) = attend(q, k, v);
        let out = self
            .output
            .layer_norm
            .forward(self.output.dense.forward(ctx) + x);
        (out, probs)
    }
}

/// First feed-forward layer and activation (HF `BertIntermediate`).
#[derive(Module, Debug)]
pub struct BertIntermediate {
    /// `D → intermediate_size`.
    pub dense: Linear,
    /// `hidden_act`.
    #[module(skip)]
    pub act: Activation,
}

/// Second feed-forward layer, residual and LayerNorm (HF `BertOutput`).
#[derive(Module, Debug)]
pub struct BertOutput {
    /// `intermediate_size → D`.
    pub dense: Linear,
    /// HF `output.LayerNorm`.
    pub layer_norm: LayerNorm,
}

/// One post-norm transformer block (HF `BertLayer`).
#[derive(Module, Debug)]
pub struct BertLayer {
    /// Attention sub-block.
    pub attention: BertAttention,
    /// `dense` + activation.
    pub intermediate: BertIntermediate,
    /// `dense` + residual + LayerNorm.
    pub output: BertOutput,
}

impl BertLayer {
    /// `[N, T, D]` → `[N, T, D]` and optionally the attention probabilities `[N, H, T, T]`.
    pub fn forward(
        &self,
        x: Tensor<3>,
        mask: &AttentionMask,
        need_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let (h, probs) = self.attention.forward(x, mask, need_probs);
        (self.feed_forward(h), probs)
    }

    /// The block on the real tokens only: `x: [M, D]` (the packed tokens of `unpadded`) →
    /// `[M, D]`; the attention runs on the padded layout with `mask` (probabilities `[N, H, T,
    /// T]`, rows of padded queries unspecified).
    pub fn forward_unpadded(
        &self,
        x: Tensor<2>,
        unpadded: &Unpadded,
        mask: &AttentionMask,
        need_probs: bool,
    ) -> (Tensor<2>, Option<Tensor<4>>) {
        let heads = self.attention.self_attn.num_heads;
        let (h, probs) = self.attention.forward_with(x, |q, k, v| {
            let (ctx, probs) = multi_head_attention(
                unpadded.unpack(q),
                unpadded.unpack(k),
                unpadded.unpack(v),
                heads,
                mask,
                None,
                need_probs,
            );
            (unpadded.pack(ctx), probs)
        });
        (self.feed_forward(h), probs)
    }

    /// `LN(h + W₂·act(W₁·h))`, per token.
    fn feed_forward<const R: usize>(&self, h: Tensor<R>) -> Tensor<R> {
        let ff = self
            .intermediate
            .act
            .forward(self.intermediate.dense.forward(h.clone()));
        self.output
            .layer_norm
            .forward(self.output.dense.forward(ff) + h)
    }
}

/// The stack of blocks (HF `BertEncoder`, key `encoder.layer.N`).
#[derive(Module, Debug)]
pub struct BertEncoder {
    /// `L` blocks.
    pub layer: Vec<BertLayer>,
}

/// `tanh(dense(h[:, 0]))` (HF `BertPooler`).
#[derive(Module, Debug)]
pub struct BertPooler {
    /// `D → D`.
    pub dense: Linear,
}

/// HF `BertModel`: embeddings, `L` post-norm blocks, optional pooler.
#[derive(Module, Debug)]
pub struct BertModel {
    /// HF `embeddings`.
    pub embeddings: BertEmbeddings,
    /// HF `encoder`.
    pub encoder: BertEncoder,
    /// HF `pooler` (absent when the checkpoint was saved with `add_pooling_layer=False`).
    pub pooler: Option<BertPooler>,
    /// The checkpoint's configuration.
    #[module(skip)]
    pub config: BertConfig,
    /// How [`BertModel::sentence_embedding`] pools: the checkpoint's sentence-transformers
    /// `Pooling` / `Normalize` modules, else [`SentencePooling::mean_normalized`].
    #[module(skip)]
    pub sentence: SentencePooling,
}

impl BertModel {
    /// Loads a BERT checkpoint strictly: every parameter must be present and every file key
    /// used, except the `embeddings.position_ids` buffer and whatever `opts.benign_unused`
    /// allows. A `bert.` key prefix is stripped; the pooler is built only when the checkpoint has
    /// `pooler.dense`. Add [`TASK_HEADS`] to `opts.benign_unused` to ignore the heads of a
    /// `BertFor*` checkpoint. The sentence embedding follows the checkpoint's
    /// sentence-transformers modules when it has them ([`Checkpoint::sentence_transformers`]).
    ///
    /// # Errors
    /// [`ModelError::Checkpoint`] for a bad `config.json` or sentence-transformers file (also a
    /// pipeline that is not `Transformer → Pooling [→ Normalize]`), [`ModelError::Unsupported`]
    /// for a configuration this implementation does not cover, [`ModelError::Load`] listing
    /// every missing / unexpected key and shape mismatch.
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        let config: BertConfig = ckpt.read_config()?;
        let sentence = ckpt
            .sentence_transformers()?
            .map_or_else(SentencePooling::mean_normalized, |st| st.pooling);
        let mut keys = Vec::new();
        for file in &ckpt.weights {
            keys.extend(bindscope_core::load::read_safetensors_shapes(file)?.into_keys());
        }
        // `BertFor*` checkpoints nest the encoder under `bert.`.
        let prefixed = !keys.iter().any(|k| k.starts_with("embeddings."))
            && keys.iter().any(|k| k.starts_with("bert.embeddings."));
        let prefix = if prefixed { "bert." } else { "" };
        let with_pooler = keys
            .iter()
            .any(|k| *k == format!("{prefix}pooler.dense.weight"));
        let mut model =
            config
                .init(with_pooler, device)
                .map_err(|message| ModelError::Unsupported {
                    file: ckpt.config.display().to_string(),
                    message,
                })?;
        model.sentence = sentence;

        let mut opts = opts.clone();
        let mut remap: Vec<(String, String)> = Vec::new();
        if prefixed {
            remap.push((r"^bert\.".into(), String::new()));
        }
        remap.extend(REMAP.iter().map(|(a, b)| (a.to_string(), b.to_string())));
        remap.append(&mut opts.remap);
        opts.remap = remap;
        opts.benign_unused.push(BENIGN.into());
        Ok(load_strict(model, &ckpt.weights, &opts)?)
    }

    /// Full forward pass.
    ///
    /// # Shapes
    /// - `input_ids`, `attention_mask` (1 = token, 0 = padding), `token_type_ids` (zeros when
    ///   `None`): `[N, T]` with `T <= max_position_embeddings`;
    /// - returns `last_hidden_state: [N, T, D]`, `pooler_output: [N, D]` (`tanh(dense(CLS))`, or
    ///   the CLS hidden state when the checkpoint has no pooler), and on request `L + 1` hidden
    ///   states `[N, T, D]` and `L` attention maps `[N, H, T, T]`.
    ///
    /// # Panics
    /// When `T` exceeds `max_position_embeddings` or the shapes disagree.
    pub fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        token_type_ids: Option<Tensor<2, Int>>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        self.forward_impl(input_ids, attention_mask, token_type_ids, opts, false)
    }

    /// [`BertModel::forward`] with the blocks run on the real tokens only ([`Unpadded`]): the
    /// outputs at unpadded positions are `forward`'s up to rounding, and so are their gradients.
    /// At padded positions `last_hidden_state` and the hidden states after the embeddings are
    /// zeros, the attention rows of padded queries are unspecified, and `pooler_output` (which
    /// reads position 0) is unspecified for a row whose position 0 is padding. For callers that
    /// read the outputs through the mask: sentence pooling, the finetuning loss.
    ///
    /// # Shapes and panics
    /// As [`BertModel::forward`].
    pub fn forward_unpadded(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        token_type_ids: Option<Tensor<2, Int>>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        self.forward_impl(input_ids, attention_mask, token_type_ids, opts, true)
    }

    fn forward_impl(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        token_type_ids: Option<Tensor<2, Int>>,
        opts: ForwardOptions,
        unpad: bool,
    ) -> EncoderOutput {
        let [n, t] = input_ids.dims();
        assert!(
            t <= self.config.max_position_embeddings,
            "BERT: sequence length {t} exceeds max_position_embeddings {} (truncate the input)",
            self.config.max_position_embeddings
        );
        assert_eq!(
            attention_mask.dims(),
            [n, t],
            "BERT: attention_mask must have the shape of input_ids"
        );
        let device = input_ids.device();
        let token_type_ids =
            token_type_ids.unwrap_or_else(|| Tensor::<2, Int>::zeros([n, t], &device));
        assert_eq!(
            token_type_ids.dims(),
            [n, t],
            "BERT: token_type_ids must have the shape of input_ids"
        );

        let unpadded = if unpad {
            Unpadded::from_mask(&attention_mask)
        } else {
            None
        };
        let mask = AttentionMask::Padding(attention_mask);
        let mut x = self.embeddings.forward(input_ids, token_type_ids);
        let mut hidden_states = opts.output_hidden_states.then(|| vec![x.clone()]);
        let mut attentions = opts.output_attentions.then(Vec::new);
        let mut keep = |h: &dyn Fn() -> Tensor<3>, probs: Option<Tensor<4>>| {
            if let Some(hs) = hidden_states.as_mut() {
                hs.push(h());
            }
            if let (Some(a), Some(p)) = (attentions.as_mut(), probs) {
                a.push(p);
            }
        };
        match &unpadded {
            None => {
                for layer in &self.encoder.layer {
                    let (y, probs) = layer.forward(x, &mask, opts.output_attentions);
                    x = y;
                    keep(&|| x.clone(), probs);
                }
            }
            Some(u) => {
                let mut packed = u.pack(x);
                for layer in &self.encoder.layer {
                    let (y, probs) =
                        layer.forward_unpadded(packed, u, &mask, opts.output_attentions);
                    packed = y;
                    keep(&|| u.unpack(packed.clone()), probs);
                }
                x = u.unpack(packed);
            }
        }
        let pooler_output = self.pool_cls(x.clone());
        // Computed in the weights' dtype, returned in f32 (see `ModelInfo::dtype`).
        EncoderOutput {
            last_hidden_state: x,
            pooler_output,
            hidden_states,
            attentions,
        }
        .into_f32()
    }

    /// `[N, T, D]` → `[N, D]`: the pooler applied to the first (CLS) token, or the CLS token
    /// itself when there is no pooler.
    pub fn pool_cls(&self, hidden: Tensor<3>) -> Tensor<2> {
        let [n, _, d] = hidden.dims();
        let cls = hidden.slice([0..n, 0..1, 0..d]).reshape([n, d]);
        match &self.pooler {
            Some(p) => tanh(p.dense.forward(cls)),
            None => cls,
        }
    }

    /// The sentence embedding: [`BertModel::pool_sentence`] of the forward pass's
    /// `last_hidden_state` (computed with [`BertModel::forward_unpadded`], since the pooling reads
    /// it through the mask).
    ///
    /// # Shapes
    /// `input_ids, attention_mask: [N, T]` → `[N, E]`, `E = k·D` for `k` pooling modes (unit
    /// rows when normalized).
    pub fn sentence_embedding(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
    ) -> Tensor<2> {
        let out = self.forward_unpadded(
            input_ids,
            attention_mask.clone(),
            None,
            ForwardOptions::default(),
        );
        self.pool_sentence(out.last_hidden_state, attention_mask)
    }

    /// sentence-transformers' `Pooling` (each of [`BertModel::sentence`]'s modes by
    /// [`pool`], concatenated) then, when the pipeline has it, `Normalize` ([`l2_normalize`]).
    ///
    /// # Shapes
    /// `hidden: [N, T, D]`, `attention_mask: [N, T]` → `[N, k·D]`.
    pub fn pool_sentence(&self, hidden: Tensor<3>, attention_mask: Tensor<2, Int>) -> Tensor<2> {
        let parts: Vec<Tensor<2>> = self
            .sentence
            .modes
            .iter()
            .map(|&m| pool(m, hidden.clone(), attention_mask.clone()))
            .collect();
        let pooled = if parts.len() == 1 {
            parts.into_iter().next().expect("one mode")
        } else {
            Tensor::cat(parts, 1)
        };
        if self.sentence.normalize {
            l2_normalize(pooled)
        } else {
            pooled
        }
    }
}

/// One sentence-transformers pooling mode over the tokens where `attention_mask` is 1 (the
/// formulas of [`PoolingMode`]; `Pooling._forward_padded` of sentence-transformers 6.2).
///
/// # Shapes
/// `hidden: [N, T, D]`, `attention_mask: [N, T]` → `[N, D]`.
pub fn pool(mode: PoolingMode, hidden: Tensor<3>, attention_mask: Tensor<2, Int>) -> Tensor<2> {
    let [n, t, d] = hidden.dims();
    let device = hidden.device();
    // Index of the first and of the last unmasked token of each row (0 and T-1 for an empty
    // row, as torch's argmax and sentence-transformers' fallback give).
    let positions = || Tensor::<1, Int>::arange(0..t as i64, &device).reshape([1, t]);
    // torch's `mask.argmax(1)`: the first unmasked position, 0 when there is none.
    let first_unmasked = || -> Tensor<2, Int> {
        let unmasked = attention_mask.clone().equal_elem(0);
        let first = positions()
            .expand([n, t])
            .mask_fill(unmasked, t as i64)
            .min_dim(1); // [N, 1]
        first.clone().mask_fill(first.equal_elem(t as i64), 0)
    };
    let gather_row = |idx: Tensor<2, Int>| -> Tensor<2> {
        let idx = idx.reshape([n, 1, 1]).expand([n, 1, d]);
        hidden.clone().gather(1, idx).reshape([n, d])
    };
    match mode {
        PoolingMode::Mean => mean_pool(hidden, attention_mask),
        PoolingMode::MeanSqrtLenTokens => {
            let m = attention_mask.float().reshape([n, t, 1]);
            let sum = (hidden * m.clone()).sum_dim(1).reshape([n, d]);
            sum / m.sum_dim(1).reshape([n, 1]).clamp_min(1e-9).sqrt()
        }
        PoolingMode::Max => {
            let masked = attention_mask
                .equal_elem(0)
                .reshape([n, t, 1])
                .expand([n, t, d]);
            hidden
                .mask_fill(masked, f32::NEG_INFINITY)
                .max_dim(1)
                .reshape([n, d])
        }
        PoolingMode::WeightedMean => {
            let w = (positions() + 1 - first_unmasked()).float(); // [N, T]
            let wm = (attention_mask.float() * w).reshape([n, t, 1]);
            let sum = (hidden * wm.clone()).sum_dim(1).reshape([n, d]);
            sum / wm.sum_dim(1).reshape([n, 1]).clamp_min(1e-9)
        }
        PoolingMode::Cls => gather_row(first_unmasked()),
        PoolingMode::LastToken => {
            // Last unmasked index = T-1 - argmax over the reversed mask; an all-padding row
            // reads position T-1 (zeroed by the mask, as in sentence-transformers).
            let any = attention_mask.clone().sum_dim(1).greater_elem(0); // [N, 1]
            let last = (positions() * attention_mask.clone()).max_dim(1); // [N, 1]
            let last = last.mask_where(any.bool_not(), Tensor::full([n, 1], t as i64 - 1, &device));
            let m = attention_mask.float().reshape([n, t, 1]);
            let hidden = hidden * m;
            let idx = last.reshape([n, 1, 1]).expand([n, 1, d]);
            hidden.gather(1, idx).reshape([n, d])
        }
    }
}

/// Mean of the token vectors where `attention_mask` is 1 (sentence-transformers `Pooling` with
/// `pooling_mode_mean_tokens`): `Σ_t m_t·h_t / max(Σ_t m_t, 1e-9)`.
///
/// # Shapes
/// `hidden: [N, T, D]`, `attention_mask: [N, T]` → `[N, D]`.
pub fn mean_pool(hidden: Tensor<3>, attention_mask: Tensor<2, Int>) -> Tensor<2> {
    let [n, t, d] = hidden.dims();
    let m = attention_mask.float().reshape([n, t, 1]);
    let sum = (hidden * m.clone()).sum_dim(1).reshape([n, d]);
    let count = m.sum_dim(1).reshape([n, 1]).clamp_min(1e-9);
    sum / count
}

/// Rows divided by their Euclidean norm, `x / max(‖x‖₂, 1e-12)` (torch `F.normalize`).
///
/// # Shapes
/// `[N, D]` → `[N, D]`.
pub fn l2_normalize(x: Tensor<2>) -> Tensor<2> {
    let norm = x.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12); // [N, 1]
    x / norm
}

impl TextEncoder for BertModel {
    fn forward_text(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        self.forward(input_ids, attention_mask, None, opts)
    }

    fn forward_text_unpadded(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        self.forward_unpadded(input_ids, attention_mask, None, opts)
    }

    fn embed_text(&self, input_ids: Tensor<2, Int>, attention_mask: Tensor<2, Int>) -> Tensor<2> {
        self.sentence_embedding(input_ids, attention_mask)
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            model_type: c.model_type.clone(),
            dtype: bindscope_core::load::dtype_name(self.embeddings.word_embeddings.weight.dtype()),
            hidden_size: c.hidden_size,
            embed_dim: c.hidden_size * self.sentence.modes.len(),
            num_layers: c.num_hidden_layers,
            num_heads: c.num_attention_heads,
            num_params: self.num_params(),
            input_size: [c.max_position_embeddings, 0],
            patch_size: 0,
        }
    }
}
