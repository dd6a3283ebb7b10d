//! # bindscope-models
//!
//! Native burn implementations of the encoders bindscope studies and of the decoder language
//! models that read embeddings out, one file per architecture,
//! with module paths that mirror the Hugging Face checkpoint keys and config structs that
//! deserialize the checkpoint's own `config.json`:
//!
//! | file | architecture | HF class |
//! |---|---|---|
//! | [`clip`] | CLIP vision + text towers, projections | `CLIPModel` |
//! | [`siglip`] | SigLIP vision (MAP head) + text towers | `SiglipModel` |
//! | [`dinov2`] | DINOv2 with layer scale, bicubic position interpolation | `Dinov2Model` |
//! | [`vit`] | generic ViT (DINO v1 checkpoints) | `ViTModel` |
//! | [`vit_mae`] | ViT-MAE encoder, masking off | `ViTMAEModel` |
//! | [`ijepa`] | I-JEPA context encoder, mean-pooled | `IJepaModel` |
//! | [`beit`] | BEiT: relative position bias, layer scale, mean pooling | `BeitModel` |
//! | [`eva`] | EVA-02 / EVA-CLIP image tower: 2-D rotary embeddings, SwiGLU, sub-LayerNorm | timm `Eva` |
//! | [`convnext`] | ConvNeXt, layernormed global average | `ConvNextModel` |
//! | [`resnet`] | ResNet-18 … 152, BatchNorm in eval mode, global average pool | torchvision `ResNet` |
//! | [`bert`] | BERT encoder, sentence-transformers mean pooling | `BertModel` |
//! | [`llama`] | Llama decoder (the blocks Qwen2 / Qwen3 share), tied or untied head | `LlamaForCausalLM` |
//! | [`qwen2`] | Llama blocks with q/k/v biases | `Qwen2ForCausalLM` |
//! | [`qwen3`] | Llama blocks with per-head q/k RMSNorm | `Qwen3ForCausalLM` |
//!
//! [`linearize`] holds the hand-written input derivatives of the pre-norm ViT block, which the
//! JER estimators use to take many vector–Jacobian products over one forward pass.
//!
//! Every vision model implements [`VisionEncoder`], every text model [`TextEncoder`], every
//! decoder language model [`CausalLm`] ([`generate`] decodes with one and renders chat
//! templates); [`registry`] builds the right one from a checkpoint's `config.json`
//! (`model_type`, one table row per architecture).
//!
//! What the architectures share is the kernel: [`nn`] (activations, layer builders,
//! position-embedding resampling, pooling, load helpers) and [`attention`] (heads, masks,
//! grouped-query attention, rotary embeddings, KV cache).

pub mod attention;
pub mod beit;
pub mod bert;
pub mod clip;
pub mod convnext;
pub mod dinov2;
pub mod eva;
pub mod generate;
pub mod ijepa;
pub mod linearize;
pub mod llama;
pub mod llava_onevision;
pub mod nn;
pub mod qwen2;
pub mod qwen3;
pub mod registry;
pub mod resnet;
pub mod siglip;
pub mod vit;
pub mod vit_mae;
mod vmath;

use bindscope_core::{CheckpointError, LoadError};
use burn::prelude::*;

/// Why a model could not be built from a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// `config.json` (or another JSON file) is missing or malformed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The weights do not match the architecture.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The config asks for something this implementation does not support.
    #[error("{file}: unsupported configuration: {message}")]
    Unsupported {
        /// The config file.
        file: String,
        /// What is unsupported and what is.
        message: String,
    },
}

/// What a forward pass should return besides the final output.
#[derive(Debug, Clone, Copy, Default)]
pub struct ForwardOptions {
    /// Return the hidden state after the embeddings and after every block (`L + 1` tensors, as
    /// transformers' `output_hidden_states=True`).
    pub output_hidden_states: bool,
    /// Return every block's attention probabilities (`L` tensors, transformers'
    /// `output_attentions=True`). Disables the fused-attention fast path.
    pub output_attentions: bool,
    /// With `output_attentions`, keep only the last `k` query rows of each attention tensor
    /// (`[N, H, k, S]` instead of `[N, H, T, S]`), dropping each layer's full matrix as soon as
    /// it is computed: the rows a decoding step reads, without holding `L` full `T × T`
    /// matrices. `None` keeps every row (transformers). Honoured by the decoders
    /// (`LlamaForCausalLM`); encoders return every row.
    pub attention_last_rows: Option<usize>,
}

impl ForwardOptions {
    /// Hidden states and attentions.
    pub fn all() -> Self {
        Self {
            output_hidden_states: true,
            output_attentions: true,
            attention_last_rows: None,
        }
    }
}

/// The output of a transformer encoder, named as in transformers.
#[derive(Debug, Clone)]
pub struct EncoderOutput {
    /// `[N, T, D]`: final hidden states, after the final norm where the HF model applies one
    /// (CLIP vision: `post_layernorm` is *not* applied here, as in transformers).
    pub last_hidden_state: Tensor<3>,
    /// `[N, D]`: transformers' `pooler_output`.
    pub pooler_output: Tensor<2>,
    /// `L + 1` tensors `[N, T, D]`: embeddings output, then the output of each block.
    pub hidden_states: Option<Vec<Tensor<3>>>,
    /// `L` tensors `[N, H, T, T]`: attention probabilities of each block.
    pub attentions: Option<Vec<Tensor<4>>>,
}

impl EncoderOutput {
    /// Every tensor in f32 (a no-op for a model computing in f32): how the models hand their
    /// outputs back when they compute in a checkpoint's f16 / bf16.
    pub fn into_f32(self) -> Self {
        Self {
            last_hidden_state: nn::to_f32(self.last_hidden_state),
            pooler_output: nn::to_f32(self.pooler_output),
            hidden_states: self
                .hidden_states
                .map(|h| h.into_iter().map(nn::to_f32).collect()),
            attentions: self
                .attentions
                .map(|a| a.into_iter().map(nn::to_f32).collect()),
        }
    }
}

/// Which vector of a vision encoder a study reads out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VisionReadout {
    /// The model's standard image embedding: CLIP `image_embeds` (projected; `pooler_output`
    /// for a `CLIPVisionModel` checkpoint, which has no projection), SigLIP / DINOv2 / ViT
    /// `pooler_output`, ViT-MAE mean of patch tokens after the final layernorm.
    #[default]
    Pooled,
    /// The summary token: CLS after the final norm (CLIP: `post_layernorm(CLS)`), SigLIP's MAP
    /// head output.
    Summary,
    /// Mean of the patch tokens of `last_hidden_state` (CLS / register tokens excluded).
    MeanPatch,
}

impl std::str::FromStr for VisionReadout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pooled" => Ok(Self::Pooled),
            "summary" => Ok(Self::Summary),
            "mean-patch" => Ok(Self::MeanPatch),
            other => Err(format!(
                "unknown output '{other}': expected pooled, summary or mean-patch"
            )),
        }
    }
}

/// Static facts about a loaded model, for `experiments info` and run configs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelInfo {
    /// HF `model_type` (`clip`, `siglip`, `dinov2`, `vit`, `vit_mae`, `ijepa`, `bert`).
    pub model_type: String,
    /// The float dtype the weights are held and computed in, in words (`float32`, or the
    /// checkpoint's `float16` / `bfloat16` when loaded with `keep_dtype`); inputs and outputs
    /// are f32 whatever it is.
    pub dtype: String,
    /// Hidden size of the transformer.
    pub hidden_size: usize,
    /// Dimension of the pooled embedding ([`VisionReadout::Pooled`] / text embedding).
    pub embed_dim: usize,
    /// Number of blocks.
    pub num_layers: usize,
    /// Number of attention heads.
    pub num_heads: usize,
    /// Number of parameters (all towers that were loaded).
    pub num_params: usize,
    /// Expected input image size `[H, W]` (vision) or maximum sequence length `[T, 0]` (text).
    pub input_size: [usize; 2],
    /// Patch size (vision), 0 for text.
    pub patch_size: usize,
}

impl ModelInfo {
    /// Whether a vision input of `[H, W]` pixels holds at least one patch along each side (the
    /// patch convolution has no output otherwise). Always true for text models.
    pub fn holds_a_patch(&self, [h, w]: [usize; 2]) -> bool {
        h >= self.patch_size && w >= self.patch_size
    }
}

/// A frozen image encoder.
///
/// Input is the preprocessed pixel tensor `pixel_values: [N, 3, H, W]` (already normalized);
/// models with position-embedding interpolation accept sizes other than the configured one.
///
/// Float inputs of any dtype are cast to the dtype of the weights ([`ModelInfo::dtype`]) at
/// the entry of every method; every float output is f32.
pub trait VisionEncoder: Send + Sync {
    /// Full forward pass of the vision tower.
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput;

    /// Number of leading non-patch tokens in the sequence (1 for CLS, 0 for SigLIP, 1 + registers).
    fn num_prefix_tokens(&self) -> usize;

    /// Applies the readout to a hidden state of any depth, the way the final output is pooled
    /// (final norm, then CLS / MAP head / mean of patches, then projection for
    /// [`VisionReadout::Pooled`] where the model has one). Used for JER-vs-depth profiles.
    ///
    /// # Shapes
    /// `hidden: [N, T, D]` → `[N, E]`.
    fn readout(&self, hidden: Tensor<3>, readout: VisionReadout) -> Tensor<2>;

    /// `forward_vision` followed by [`VisionEncoder::readout`] on the last block's output:
    /// `[N, 3, H, W]` → `[N, E]`.
    fn embed(&self, pixel_values: Tensor<4>, readout: VisionReadout) -> Tensor<2> {
        let out = self.forward_vision(
            pixel_values,
            ForwardOptions {
                output_hidden_states: true,
                output_attentions: false,
                attention_last_rows: None,
            },
        );
        let last = out
            .hidden_states
            .and_then(|mut h| h.pop())
            .expect("hidden states were requested");
        self.readout(last, readout)
    }

    /// The model's final norm applied token-wise to its `last_hidden_state`, `[N, T, D]` →
    /// `[N, T, D]`. The identity for models whose `last_hidden_state` is already normed (ViT,
    /// DINOv2, ViT-MAE, SigLIP); CLIP overrides it, because transformers applies CLIP's
    /// `post_layernorm` to the pooled CLS token only.
    fn final_norm(&self, last_hidden_state: Tensor<3>) -> Tensor<3> {
        last_hidden_state
    }

    /// Patch tokens of the final layer after the final norm ([`VisionEncoder::final_norm`]),
    /// prefix tokens removed: `[N, 3, H, W]` → `[N, P, D]`.
    fn patch_tokens(&self, pixel_values: Tensor<4>) -> Tensor<3> {
        let out = self.forward_vision(pixel_values, ForwardOptions::default());
        let [n, t, d] = out.last_hidden_state.dims();
        let p = self.num_prefix_tokens();
        self.final_norm(out.last_hidden_state.slice([0..n, p..t, 0..d]))
    }

    /// Static facts about the model.
    fn info(&self) -> ModelInfo;

    /// The forward pass at one image, kept for many vector–Jacobian products
    /// ([`linearize::Linearization::vjp`]): the readout `readout` of the last block
    /// ([`linearize::Outputs::Final`], as [`VisionEncoder::embed`]) or of every block
    /// ([`linearize::Outputs::EveryBlock`], as [`VisionEncoder::readout`] on hidden states
    /// 1 … L).
    ///
    /// `None` where the model's derivatives are not written out (the default): architectures
    /// other than the pre-norm ViT block, weights in another dtype than f32, readouts through
    /// other heads. Callers then differentiate with burn's autodiff.
    ///
    /// # Shapes
    /// `pixel_values: [1, 3, H, W]` on the model's device (autodiff or not; no gradient is
    /// recorded).
    fn linearize(
        &self,
        pixel_values: Tensor<4>,
        readout: VisionReadout,
        outputs: linearize::Outputs,
    ) -> Option<linearize::Linearization> {
        let _ = (pixel_values, readout, outputs);
        None
    }
}

/// A frozen text encoder over token ids. Computes in the dtype of its weights
/// ([`ModelInfo::dtype`]); every float output is f32.
pub trait TextEncoder: Send + Sync {
    /// Full forward pass of the text tower.
    ///
    /// # Shapes
    /// `input_ids, attention_mask: [N, T]` (mask 1 = token, 0 = padding).
    fn forward_text(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        opts: ForwardOptions,
    ) -> EncoderOutput;

    /// [`TextEncoder::forward_text`] for a caller that reads the outputs only at unpadded
    /// positions (through `attention_mask`, as sentence pooling and a loss over pooled
    /// embeddings do): the model may skip the padded positions in its per-token layers
    /// ([`nn::Unpadded`]). Values at unpadded positions, and their gradients, are
    /// `forward_text`'s up to rounding; at padded positions the outputs are unspecified. The
    /// default is `forward_text`; BERT skips ([`bert::BertModel::forward_unpadded`]).
    fn forward_text_unpadded(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        self.forward_text(input_ids, attention_mask, opts)
    }

    /// The model's sentence embedding `[N, E]`: CLIP `text_embeds` (projected EOS token), SigLIP
    /// `pooler_output` (last token through the head), BERT mean pooling + L2 normalization.
    fn embed_text(&self, input_ids: Tensor<2, Int>, attention_mask: Tensor<2, Int>) -> Tensor<2>;

    /// Static facts about the model.
    fn info(&self) -> ModelInfo;
}

/// The input of a [`CausalLm`] forward pass: token ids, or embeddings that replace the token
/// embedding lookup (transformers' `inputs_embeds`: where an embedding from another model is
/// injected).
#[derive(Debug, Clone)]
pub enum LmInput {
    /// `input_ids: [N, T]`.
    Ids(Tensor<2, Int>),
    /// `inputs_embeds: [N, T, D]` (`D` = the decoder's `hidden_size`).
    Embeds(Tensor<3>),
}

/// What a [`CausalLm`] forward pass returns, named as in transformers' `CausalLMOutputWithPast`.
#[derive(Debug, Clone)]
pub struct CausalLmOutput {
    /// `[N, T, V]`: next-token logits at every input position.
    pub logits: Tensor<3>,
    /// `L + 1` tensors `[N, T, D]`: the input embeddings, then the output of each block (the
    /// last one after the final norm, as transformers reports it).
    pub hidden_states: Option<Vec<Tensor<3>>>,
    /// `L` tensors `[N, H, T, P + T]`: attention probabilities of each block over the cached
    /// and the new positions.
    pub attentions: Option<Vec<Tensor<4>>>,
}

/// A decoder-only language model (Llama, Qwen2, Qwen3, …): the readout of the generative
/// studies. Implementations build on [`attention::scaled_dot_product_attention`],
/// [`attention::RotaryEmbedding`] and one [`attention::KvCache`] per layer.
pub trait CausalLm: Send + Sync {
    /// One forward pass over `input` after the `cache.len()` positions already in `cache`
    /// (empty for a fresh prompt), appending the new keys and values to it.
    ///
    /// # Shapes
    /// - `input`: `[N, T]` ids or `[N, T, D]` embeddings;
    /// - `attention_mask`: `[N, P + T]`, 1 = token, 0 = padding (left padding for batches);
    ///   `None` means no padding;
    /// - `position_ids`: `[N, T]`; `None` means `P..P + T` for every row;
    /// - `cache`: one [`attention::KvCache`] per layer ([`CausalLm::new_cache`]).
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] when `P + T` exceeds the model's context
    /// (`max_position_embeddings`, or what a `dynamic` / `yarn` rope scaling extends it to), or
    /// when the shapes disagree with the model.
    fn forward_causal(
        &self,
        input: LmInput,
        attention_mask: Option<Tensor<2, Int>>,
        position_ids: Option<Tensor<2, Int>>,
        cache: &mut [attention::KvCache],
        opts: ForwardOptions,
    ) -> Result<CausalLmOutput, ModelError> {
        self.forward_causal_keep(input, attention_mask, position_ids, cache, opts, 0)
    }

    /// [`CausalLm::forward_causal`] with the logits of the last `logits_to_keep` positions
    /// only, `[N, logits_to_keep, V]` (0 = every position; transformers' `logits_to_keep`):
    /// generation needs the last one, and the head is the widest product of a decode step.
    ///
    /// # Errors
    /// As [`CausalLm::forward_causal`].
    fn forward_causal_keep(
        &self,
        input: LmInput,
        attention_mask: Option<Tensor<2, Int>>,
        position_ids: Option<Tensor<2, Int>>,
        cache: &mut [attention::KvCache],
        opts: ForwardOptions,
        logits_to_keep: usize,
    ) -> Result<CausalLmOutput, ModelError>;

    /// The token embedding lookup `[N, T]` → `[N, T, D]` (`embed_tokens`), so a caller can
    /// build `inputs_embeds` that mix token and injected embeddings.
    fn embed_tokens(&self, input_ids: Tensor<2, Int>) -> Tensor<3>;

    /// An empty cache: one [`attention::KvCache`] per layer.
    fn new_cache(&self) -> Vec<attention::KvCache>;

    /// Static facts about the model (`input_size` = `[context, 0]`, the context being
    /// `max_position_embeddings` or what the rope scaling extends it to, `embed_dim` =
    /// vocabulary size).
    fn info(&self) -> ModelInfo;

    /// `eos_token_id` of the checkpoint's `config.json` (empty when it has none). Generation
    /// prefers `generation_config.json`'s ([`generate::GenerationDefaults`]).
    fn eos_token_ids(&self) -> Vec<u32>;

    /// `pad_token_id` of the checkpoint's `config.json`.
    fn pad_token_id(&self) -> Option<u32>;
}

/// Re-initialises every weight matrix / kernel / embedding table (float parameters of rank ≥ 2)
/// of `module` with N(0, `std`²), keeping rank-1 parameters (biases, LayerNorm γ/β, layer
/// scales, class embeddings) as the constructor set them. The standard "random-initialised
/// encoder" floor of the binding studies (timm / transformers use std 0.02), and random weights
/// for benchmarks.
///
/// Deterministic for a given `seed` on a given device (burn's device RNG is seeded first).
pub fn randomize<M: burn::module::Module>(module: M, std: f64, seed: u64) -> M {
    struct Randomizer {
        std: f64,
    }
    impl burn::module::ModuleMapper for Randomizer {
        fn map_float<const D: usize>(
            &mut self,
            param: burn::module::Param<Tensor<D>>,
        ) -> burn::module::Param<Tensor<D>> {
            if D < 2 {
                return param;
            }
            let std = self.std;
            param.map(|t| {
                let device = t.device();
                Tensor::random(
                    t.shape(),
                    burn::tensor::Distribution::Normal(0.0, std),
                    &device,
                )
            })
        }
    }
    if let Some(device) = module.devices().first() {
        device.seed(seed);
    }
    module.map(&mut Randomizer { std })
}
