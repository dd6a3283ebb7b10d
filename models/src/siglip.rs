//! SigLIP: image–text pre-training with a sigmoid loss; vision tower with a multi-head
//! attention-pooling (MAP) head, text tower pooled at the last token.
//!
//! - Paper: Zhai et al., *Sigmoid Loss for Language Image Pre-Training* (2023),
//!   <https://arxiv.org/abs/2303.15343>.
//! - Reference implementation: Hugging Face transformers `SiglipModel`
//!   (`models/siglip/modeling_siglip.py`): `SiglipVisionTransformer` with
//!   `SiglipMultiheadAttentionPoolingHead`, `SiglipTextTransformer`.
//!
//! The blocks are CLIP's ([`ClipEncoder`]: same structure and key names, pre-norm,
//! `self_attn.{q,k,v,out}_proj`); what differs is handled here:
//! - vision: patch convolution *with* bias, position embeddings without a class token, no
//!   pre-norm, `post_layernorm` applied to every token of `last_hidden_state`, and
//!   `pooler_output` = MAP head (`vision_model.head`: a learned `probe` query attending over the
//!   tokens through a `torch.nn.MultiheadAttention` whose packed `in_proj_weight` is split here by
//!   hand, then `x + mlp(layernorm(x))`);
//! - text: no causal mask, `final_layer_norm`, `pooler_output = head(last_hidden_state[:, -1])`
//!   (SigLIP is trained with text padded to `max_position_embeddings` and no attention mask).
//!
//! ```no_run
//! use bindscope_core::{Checkpoint, LoadOptions};
//! use bindscope_models::siglip::{SiglipModel, SiglipVisionModel};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let device = burn::tensor::Device::default();
//! let ckpt = Checkpoint::resolve("google/siglip-base-patch16-224")?;
//! let siglip = SiglipModel::load(&ckpt, &device, &LoadOptions::default())?;
//! let vision = SiglipVisionModel::load(&ckpt, &device, &LoadOptions::default())?; // vision keys only
//! # let _ = (siglip, vision); Ok(()) }
//! ```
//!
//! # Checkpoint layouts
//!
//! `SiglipModel` (`siglip`) stores `vision_model.*`, `text_model.*`, `logit_scale`,
//! `logit_bias` in transformers 4.x and 5.x alike. A standalone `SiglipVisionModel`
//! (`siglip_vision_model`) / `SiglipTextModel` (`siglip_text_model`) stores its tower under
//! `vision_model.` / `text_model.` when saved by transformers 4.x, and bare (`embeddings.*`,
//! `encoder.*`, `post_layernorm.*` / `final_layer_norm.*`, `head.*`) when saved by 5.x. The
//! loaders take both, told apart by the keys present ([`TowerLayout`]); error messages name
//! the keys as the file stores them.
//!
//! **Attention mask of the text tower.** transformers' `SiglipModel.get_text_features` applies
//! an `attention_mask` only when the caller passes one; the original model (big_vision,
//! open_clip) never masks, and is meant to be fed text padded to the maximum length. The
//! [`TextEncoder`] implementation therefore ignores the mask it is given unless
//! [`SiglipTextModel::apply_attention_mask`] is set; [`SiglipTextTransformer::forward`] takes
//! the mask as an `Option`, exactly as transformers does.

use crate::attention::{AttentionMask, multi_head_attention};
use crate::clip::{
    BENIGN, ClipEncoder, ClipMlp, ClipTextEmbeddings, EncoderDims, TowerLayout, block_parts,
};
use crate::linearize::{
    HeadParts, LinearParts, Linearization, MapParts, NormParts, Outputs, Pool, VitParts,
};
use crate::nn::{
    Activation, check_model_type, check_sizes, embedding, interpolate_square_grid, layer_norm,
    linear, load_module, model_type, read_scalar, to_dtype, to_f32,
};
use crate::{
    EncoderOutput, ForwardOptions, ModelError, ModelInfo, TextEncoder, VisionEncoder, VisionReadout,
};
use bindscope_core::{Checkpoint, LoadOptions};
use burn::module::Param;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Embedding, Initializer, LayerNorm, Linear};
use burn::prelude::*;
use serde::Deserialize;
use std::path::Path;

/// `model_type` of a two-tower `SiglipModel` checkpoint.
pub const MODEL_TYPE: &str = "siglip";
/// `model_type` of a standalone `SiglipVisionModel` checkpoint.
pub const VISION_MODEL_TYPE: &str = "siglip_vision_model";
/// `model_type` of a standalone `SiglipTextModel` checkpoint.
pub const TEXT_MODEL_TYPE: &str = "siglip_text_model";

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// The top-level `config.json` of a `SiglipModel` checkpoint (transformers `SiglipConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct SiglipConfig {
    /// `"siglip"`.
    #[serde(default)]
    pub model_type: String,
    /// The vision tower.
    #[serde(default, deserialize_with = "null_as_default")]
    pub vision_config: SiglipVisionConfig,
    /// The text tower.
    #[serde(default, deserialize_with = "null_as_default")]
    pub text_config: SiglipTextConfig,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// transformers `SiglipVisionConfig`; defaults are transformers' (base, patch 16, 224).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct SiglipVisionConfig {
    /// `"siglip_vision_model"` for a standalone vision checkpoint.
    pub model_type: String,
    /// Width `D`.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Number of blocks `L`.
    pub num_hidden_layers: usize,
    /// Number of heads `H` (also of the MAP head).
    pub num_attention_heads: usize,
    /// Input channels.
    pub num_channels: usize,
    /// Training image size (square).
    pub image_size: usize,
    /// Patch size (square).
    pub patch_size: usize,
    /// MLP activation (`gelu_pytorch_tanh`).
    pub hidden_act: String,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Whether the tower has the MAP head (transformers treats a missing field as `true`).
    pub vision_use_head: bool,
}

impl Default for SiglipVisionConfig {
    fn default() -> Self {
        Self {
            model_type: VISION_MODEL_TYPE.into(),
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            image_size: 224,
            patch_size: 16,
            hidden_act: "gelu_pytorch_tanh".into(),
            layer_norm_eps: 1e-6,
            vision_use_head: true,
        }
    }
}

/// transformers `SiglipTextConfig`; defaults are transformers'.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct SiglipTextConfig {
    /// `"siglip_text_model"` for a standalone text checkpoint.
    pub model_type: String,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width `D`.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Number of blocks `L`.
    pub num_hidden_layers: usize,
    /// Number of heads `H`.
    pub num_attention_heads: usize,
    /// Maximum (and training) sequence length.
    pub max_position_embeddings: usize,
    /// MLP activation.
    pub hidden_act: String,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Padding token id.
    pub pad_token_id: Option<i64>,
    /// Beginning-of-sequence token id.
    pub bos_token_id: Option<i64>,
    /// End-of-sequence token id.
    pub eos_token_id: Option<i64>,
    /// Output size of the text `head`; `None` = `hidden_size`.
    pub projection_size: Option<usize>,
}

impl Default for SiglipTextConfig {
    fn default() -> Self {
        Self {
            model_type: TEXT_MODEL_TYPE.into(),
            vocab_size: 32000,
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            max_position_embeddings: 64,
            hidden_act: "gelu_pytorch_tanh".into(),
            layer_norm_eps: 1e-6,
            pad_token_id: Some(1),
            bos_token_id: Some(49406),
            eos_token_id: Some(49407),
            projection_size: None,
        }
    }
}

impl SiglipVisionConfig {
    fn dims(&self, file: &Path) -> Result<EncoderDims, ModelError> {
        let dims = self.encoder_dims(file)?;
        if !self.image_size.is_multiple_of(self.patch_size) {
            return Err(ModelError::Unsupported {
                file: file.display().to_string(),
                message: format!(
                    "vision patch_size {} does not divide image_size {}",
                    self.patch_size, self.image_size
                ),
            });
        }
        if !self.vision_use_head {
            return Err(ModelError::Unsupported {
                file: file.display().to_string(),
                message:
                    "vision_use_head = false (no MAP head, hence no pooled output) is not supported"
                        .into(),
            });
        }
        Ok(dims)
    }

    /// The block stack's sizes, with or without the MAP head (a tower inside a vision–language
    /// model, such as LLaVA-OneVision's, has none). A patch size that does not divide the
    /// image size is accepted here, as the convolution floors the grid (SigLIP-SO400M/14 at
    /// 384: 27 × 27); the standalone tower refuses it.
    pub(crate) fn encoder_dims(&self, file: &Path) -> Result<EncoderDims, ModelError> {
        check_sizes(file, self.hidden_size, self.num_attention_heads, &[])?;
        if self.patch_size == 0 || self.patch_size > self.image_size {
            return Err(ModelError::Unsupported {
                file: file.display().to_string(),
                message: format!(
                    "vision patch_size {} must be between 1 and image_size {}",
                    self.patch_size, self.image_size
                ),
            });
        }
        Ok(EncoderDims {
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            layer_norm_eps: self.layer_norm_eps,
            act: Activation::parse(&self.hidden_act, "hidden_act", file)?,
        })
    }
}

impl SiglipTextConfig {
    fn dims(&self, file: &Path) -> Result<EncoderDims, ModelError> {
        check_sizes(file, self.hidden_size, self.num_attention_heads, &[])?;
        Ok(EncoderDims {
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            layer_norm_eps: self.layer_norm_eps,
            act: Activation::parse(&self.hidden_act, "hidden_act", file)?,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Vision tower
// ---------------------------------------------------------------------------------------------

/// Patch and position embeddings, `vision_model.embeddings` (transformers
/// `SiglipVisionEmbeddings`).
#[derive(Module, Debug)]
pub struct SiglipVisionEmbeddings {
    /// Patchify convolution `3 → D`, kernel = stride = patch size, with bias.
    pub patch_embedding: Conv2d,
    /// Learned positions `[g², D]` for the training grid `g = image_size / patch`.
    pub position_embedding: Embedding,
}

impl SiglipVisionEmbeddings {
    /// Zero-initialised embeddings for `cfg`'s channels, width, patch and training grid.
    pub(crate) fn new(cfg: &SiglipVisionConfig, device: &Device) -> Self {
        let d = cfg.hidden_size;
        let grid = cfg.image_size / cfg.patch_size;
        Self {
            patch_embedding: Conv2dConfig::new(
                [cfg.num_channels, d],
                [cfg.patch_size, cfg.patch_size],
            )
            .with_stride([cfg.patch_size, cfg.patch_size])
            .with_bias(true)
            .with_initializer(Initializer::Zeros)
            .init(device),
            position_embedding: embedding(grid * grid, d, device),
        }
    }

    /// `[N, C, H, W]` → `[N, (H/p)·(W/p), D]`; positions are interpolated bicubically when the
    /// grid differs from the training grid (transformers `interpolate_pos_encoding=True`). The
    /// pixels are cast to the patch embedding's dtype; the tokens come out in it.
    pub fn forward(&self, pixel_values: Tensor<4>) -> Tensor<3> {
        let pixel_values = to_dtype(pixel_values, self.patch_embedding.weight.dtype());
        let patches = self.patch_embedding.forward(pixel_values); // [N, D, gh, gw]
        let [n, d, gh, gw] = patches.dims();
        let x = patches.reshape([n, d, gh * gw]).swap_dims(1, 2); // [N, P, D]
        let pos = self.position_embedding.weight.val(); // [g², D]
        let grid = (pos.dims()[0] as f64).sqrt().round() as usize;
        x + interpolate_square_grid(pos, grid, [gh, gw]).unsqueeze_dim::<3>(0)
    }
}

/// `torch.nn.MultiheadAttention` as stored in the checkpoint: packed `in_proj_weight [3D, D]`
/// (rows: query, key, value; torch `[out, in]` layout, not transposed by the loader),
/// `in_proj_bias [3D]`, `out_proj` Linear.
#[derive(Module, Debug)]
pub struct TorchMultiheadAttention {
    /// `[3D, D]`, torch layout.
    pub in_proj_weight: Param<Tensor<2>>,
    /// `[3D]`.
    pub in_proj_bias: Param<Tensor<1>>,
    /// `D → D`.
    pub out_proj: Linear,
    /// Number of heads.
    pub num_heads: usize,
}

impl TorchMultiheadAttention {
    fn new(d: usize, heads: usize, device: &Device) -> Self {
        Self {
            in_proj_weight: Param::from_tensor(Tensor::zeros([3 * d, d], device)),
            in_proj_bias: Param::from_tensor(Tensor::zeros([3 * d], device)),
            out_proj: linear(d, d, true, &Initializer::Zeros, device),
            num_heads: heads,
        }
    }

    /// Projection `i` (0 = query, 1 = key, 2 = value) of `x: [N, T, D]`.
    fn project(&self, x: Tensor<3>, i: usize) -> Tensor<3> {
        let [_, d] = self.in_proj_weight.dims();
        let w = self
            .in_proj_weight
            .val()
            .slice([i * d..(i + 1) * d, 0..d])
            .transpose(); // [D_in, D_out]
        let b = self.in_proj_bias.val().narrow(0, i * d, d);
        burn::tensor::module::linear(x, w, Some(b))
    }

    /// `query: [N, Tq, D]`, `key_value: [N, T, D]` → `[N, Tq, D]` and, when `need_probs`, the
    /// probabilities `[N, H, Tq, T]` (torch averages them over heads; these are per head).
    pub fn forward(
        &self,
        query: Tensor<3>,
        key_value: Tensor<3>,
        need_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let q = self.project(query, 0);
        let k = self.project(key_value.clone(), 1);
        let v = self.project(key_value, 2);
        let (ctx, probs) = multi_head_attention(
            q,
            k,
            v,
            self.num_heads,
            &AttentionMask::None,
            None,
            need_probs,
        );
        (self.out_proj.forward(ctx), probs)
    }
}

/// Multi-head attention pooling, `vision_model.head` (transformers
/// `SiglipMultiheadAttentionPoolingHead`): `x = MHA(probe, tokens, tokens)`, then
/// `x + mlp(layernorm(x))`, first (only) query.
#[derive(Module, Debug)]
pub struct SiglipMapHead {
    /// The learned query `[1, 1, D]`.
    pub probe: Param<Tensor<3>>,
    /// torch `nn.MultiheadAttention`.
    pub attention: TorchMultiheadAttention,
    /// Norm before the MLP.
    pub layernorm: LayerNorm,
    /// MLP.
    pub mlp: ClipMlp,
}

impl SiglipMapHead {
    /// `[N, T, D]` (after `post_layernorm`) → `[N, D]`.
    pub fn forward(&self, tokens: Tensor<3>) -> Tensor<2> {
        let [n, _, d] = tokens.dims();
        let probe = self.probe.val().expand([n, 1, d]);
        let (x, _) = self.attention.forward(probe, tokens, false);
        let x = x.clone() + self.mlp.forward(self.layernorm.forward(x)); // [N, 1, D]
        x.reshape([n, d])
    }
}

/// `vision_model` (transformers `SiglipVisionTransformer`).
#[derive(Module, Debug)]
pub struct SiglipVisionTransformer {
    /// Patch + position embeddings.
    pub embeddings: SiglipVisionEmbeddings,
    /// The blocks.
    pub encoder: ClipEncoder,
    /// Final LayerNorm, applied to every token.
    pub post_layernorm: LayerNorm,
    /// MAP head.
    pub head: SiglipMapHead,
}

impl SiglipVisionTransformer {
    fn new(cfg: &SiglipVisionConfig, dims: &EncoderDims, device: &Device) -> Self {
        let d = cfg.hidden_size;
        Self {
            embeddings: SiglipVisionEmbeddings::new(cfg, device),
            encoder: ClipEncoder::new(dims, device),
            post_layernorm: layer_norm(d, cfg.layer_norm_eps, device),
            head: SiglipMapHead {
                probe: Param::from_tensor(Tensor::zeros([1, 1, d], device)),
                attention: TorchMultiheadAttention::new(d, cfg.num_attention_heads, device),
                layernorm: layer_norm(d, cfg.layer_norm_eps, device),
                mlp: ClipMlp::new(d, cfg.intermediate_size, dims.act, device),
            },
        }
    }

    /// transformers `SiglipVisionTransformer.forward`: `[N, 3, H, W]` →
    /// `last_hidden_state = post_layernorm(encoder(x)) [N, P, D]`, `pooler_output =
    /// head(last_hidden_state) [N, D]`; hidden state 0 is the embeddings output. Computed in the
    /// weights' dtype, returned in f32.
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        let x = self.embeddings.forward(pixel_values);
        let (last, hidden_states, attentions) = self.encoder.forward(x, &AttentionMask::None, opts);
        let last = self.post_layernorm.forward(last);
        let pooler_output = self.head.forward(last.clone());
        EncoderOutput {
            last_hidden_state: last,
            pooler_output,
            hidden_states,
            attentions,
        }
        .into_f32()
    }

    /// Readout of a hidden state of any depth: `post_layernorm`, then the MAP head (`Pooled`,
    /// `Summary`) or the mean over tokens (`MeanPatch`); `hidden` is cast to the weights' dtype,
    /// the readout returned in f32.
    pub fn readout(&self, hidden: Tensor<3>, readout: VisionReadout) -> Tensor<2> {
        let hidden = to_dtype(hidden, self.post_layernorm.gamma.dtype());
        let x = self.post_layernorm.forward(hidden);
        to_f32(match readout {
            VisionReadout::Pooled | VisionReadout::Summary => self.head.forward(x),
            VisionReadout::MeanPatch => {
                let [n, _, d] = x.dims();
                x.mean_dim(1).reshape([n, d])
            }
        })
    }
}

/// The SigLIP vision tower (transformers `SiglipVisionModel`, or the vision half of
/// `SiglipModel`): keys `vision_model.*`.
#[derive(Module, Debug)]
pub struct SiglipVisionModel {
    /// The vision transformer.
    pub vision_model: SiglipVisionTransformer,
    /// The vision config.
    #[module(skip)]
    pub config: SiglipVisionConfig,
}

impl SiglipVisionModel {
    /// A zero-initialised vision tower.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for an unknown activation, indivisible sizes or
    /// `vision_use_head = false`.
    pub fn new(
        cfg: &SiglipVisionConfig,
        config_file: &Path,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let dims = cfg.dims(config_file)?;
        Ok(Self {
            vision_model: SiglipVisionTransformer::new(cfg, &dims, device),
            config: cfg.clone(),
        })
    }

    /// Loads the vision tower from a `SiglipModel` checkpoint (`siglip`; text keys ignored
    /// unless `opts.only` says otherwise) or a `SiglipVisionModel` checkpoint
    /// (`siglip_vision_model`) in either layout ([module docs](self#checkpoint-layouts)).
    /// Strict.
    ///
    /// # Errors
    /// [`ModelError`] naming the config field or the missing / unexpected keys (as the file
    /// names them).
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        let mut opts = opts.clone();
        let cfg = match model_type(ckpt)?.as_str() {
            VISION_MODEL_TYPE => {
                TowerLayout::detect(ckpt, "vision_model", None)?.remap(
                    &mut opts,
                    "vision_model",
                    None,
                );
                ckpt.read_config::<SiglipVisionConfig>()?
            }
            other => {
                check_model_type(ckpt, other, &[MODEL_TYPE])?;
                ckpt.read_config::<SiglipConfig>()?.vision_config
            }
        };
        let model = Self::new(&cfg, &ckpt.config, device)?;
        load_module(model, ckpt, &opts, BENIGN, &[r"^vision_model\."])
    }

    /// See [`SiglipVisionTransformer::forward`].
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.vision_model.forward(pixel_values, opts)
    }
}

impl VisionEncoder for SiglipVisionModel {
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.forward(pixel_values, opts)
    }

    fn num_prefix_tokens(&self) -> usize {
        0
    }

    /// `Pooled` and `Summary`: the MAP head output (`pooler_output`, SigLIP's image embedding)
    /// after `post_layernorm`; `MeanPatch`: mean over all tokens after `post_layernorm`.
    fn readout(&self, hidden: Tensor<3>, readout: VisionReadout) -> Tensor<2> {
        self.vision_model.readout(hidden, readout)
    }

    /// f32 weights: every readout, the MAP head's included.
    fn linearize(
        &self,
        pixel_values: Tensor<4>,
        readout: VisionReadout,
        outputs: Outputs,
    ) -> Option<Linearization> {
        let vm = &self.vision_model;
        if vm.post_layernorm.gamma.dtype() != burn::tensor::DType::F32 {
            return None;
        }
        let eps = self.config.layer_norm_eps;
        let norm = |n: &LayerNorm| NormParts::new(n, eps);
        let map = match readout {
            VisionReadout::Pooled | VisionReadout::Summary => {
                let h = &vm.head;
                let att = &h.attention;
                let w = att.in_proj_weight.val().without_autodiff(); // [3D, D], torch layout
                let b = att.in_proj_bias.val().without_autodiff();
                let d = w.dims()[1];
                let part = |i: usize| LinearParts {
                    weight: w.clone().slice([i * d..(i + 1) * d, 0..d]).transpose(),
                    bias: Some(b.clone().narrow(0, i * d, d)),
                };
                Some(MapParts {
                    probe: h.probe.val().without_autodiff().reshape([d]),
                    query: part(0),
                    key: part(1),
                    value: part(2),
                    output: LinearParts::new(&att.out_proj),
                    num_heads: att.num_heads,
                    norm: norm(&h.layernorm),
                    fc1: LinearParts::new(&h.mlp.fc1),
                    act: h.mlp.act,
                    fc2: LinearParts::new(&h.mlp.fc2),
                })
            }
            VisionReadout::MeanPatch => None,
        };
        let parts = VitParts {
            patch_weight: vm
                .embeddings
                .patch_embedding
                .weight
                .val()
                .without_autodiff(),
            prefix: 0,
            pre_norm: None,
            blocks: block_parts(&vm.encoder, eps),
            head: HeadParts {
                norm: Some(norm(&vm.post_layernorm)),
                pool: Pool::MeanPatch { prefix: 0 },
                map,
                pooled_norm: None,
                projection: None,
            },
        };
        let dims = pixel_values.dims();
        let embeddings = vm.embeddings.forward(pixel_values.detach());
        parts.linearize(dims, embeddings, outputs)
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            model_type: MODEL_TYPE.into(),
            dtype: bindscope_core::load::dtype_name(self.vision_model.post_layernorm.gamma.dtype()),
            hidden_size: c.hidden_size,
            embed_dim: c.hidden_size,
            num_layers: c.num_hidden_layers,
            num_heads: c.num_attention_heads,
            num_params: self.num_params(),
            input_size: [c.image_size, c.image_size],
            patch_size: c.patch_size,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Text tower
// ---------------------------------------------------------------------------------------------

/// `text_model` (transformers `SiglipTextTransformer`).
#[derive(Module, Debug)]
pub struct SiglipTextTransformer {
    /// Token + position embeddings.
    pub embeddings: ClipTextEmbeddings,
    /// The blocks (bidirectional).
    pub encoder: ClipEncoder,
    /// Final LayerNorm, applied to every token of `last_hidden_state`.
    pub final_layer_norm: LayerNorm,
    /// `D → projection_size`, with bias, applied to the last token.
    pub head: Linear,
}

impl SiglipTextTransformer {
    /// transformers `SiglipTextTransformer.forward`: `input_ids [N, T]` and an optional padding
    /// mask `[N, T]` (applied to the keys only when given, as transformers does) →
    /// `last_hidden_state [N, T, D]` (after `final_layer_norm`), `pooler_output =
    /// head(last_hidden_state[:, -1]) [N, E]`. Computed in the weights' dtype, returned in f32.
    pub fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Option<Tensor<2, Int>>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        let x = self.embeddings.forward(input_ids);
        let mask = attention_mask.map_or(AttentionMask::None, AttentionMask::Padding);
        let (last, hidden_states, attentions) = self.encoder.forward(x, &mask, opts);
        let last = self.final_layer_norm.forward(last);
        let [n, t, d] = last.dims();
        let pooled = last.clone().slice([0..n, t - 1..t, 0..d]).reshape([n, d]);
        EncoderOutput {
            last_hidden_state: last,
            pooler_output: self.head.forward(pooled),
            hidden_states,
            attentions,
        }
        .into_f32()
    }
}

/// The SigLIP text tower (transformers `SiglipTextModel`, or the text half of `SiglipModel`):
/// keys `text_model.*`.
#[derive(Module, Debug)]
pub struct SiglipTextModel {
    /// The text transformer.
    pub text_model: SiglipTextTransformer,
    /// The text config.
    #[module(skip)]
    pub config: SiglipTextConfig,
    /// Whether [`TextEncoder::forward_text`] / [`TextEncoder::embed_text`] apply the padding
    /// mask they are given. Default `false`: SigLIP is trained and used without a mask, on text
    /// padded to `max_position_embeddings` (the model card's `padding="max_length"`).
    #[module(skip)]
    pub apply_attention_mask: bool,
}

impl SiglipTextModel {
    /// A zero-initialised text tower.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for an unknown activation or indivisible sizes.
    pub fn new(
        cfg: &SiglipTextConfig,
        config_file: &Path,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let dims = cfg.dims(config_file)?;
        let d = cfg.hidden_size;
        Ok(Self {
            text_model: SiglipTextTransformer {
                embeddings: ClipTextEmbeddings::new(
                    cfg.vocab_size,
                    cfg.max_position_embeddings,
                    d,
                    device,
                ),
                encoder: ClipEncoder::new(&dims, device),
                final_layer_norm: layer_norm(d, cfg.layer_norm_eps, device),
                head: linear(
                    d,
                    cfg.projection_size.unwrap_or(d),
                    true,
                    &Initializer::Zeros,
                    device,
                ),
            },
            config: cfg.clone(),
            apply_attention_mask: false,
        })
    }

    /// Loads the text tower from a `SiglipModel` checkpoint (`siglip`; vision keys ignored
    /// unless `opts.only` says otherwise) or a `SiglipTextModel` checkpoint
    /// (`siglip_text_model`) in either layout ([module docs](self#checkpoint-layouts)).
    /// Strict.
    ///
    /// # Errors
    /// [`ModelError`] naming the config field or the missing / unexpected keys (as the file
    /// names them).
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        let mut opts = opts.clone();
        let cfg = match model_type(ckpt)?.as_str() {
            TEXT_MODEL_TYPE => {
                TowerLayout::detect(ckpt, "text_model", None)?.remap(&mut opts, "text_model", None);
                ckpt.read_config::<SiglipTextConfig>()?
            }
            other => {
                check_model_type(ckpt, other, &[MODEL_TYPE])?;
                ckpt.read_config::<SiglipConfig>()?.text_config
            }
        };
        let model = Self::new(&cfg, &ckpt.config, device)?;
        load_module(model, ckpt, &opts, BENIGN, &[r"^text_model\."])
    }

    /// Sets [`SiglipTextModel::apply_attention_mask`].
    pub fn with_attention_mask(mut self, apply: bool) -> Self {
        self.apply_attention_mask = apply;
        self
    }

    /// See [`SiglipTextTransformer::forward`].
    pub fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Option<Tensor<2, Int>>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        self.text_model.forward(input_ids, attention_mask, opts)
    }
}

impl TextEncoder for SiglipTextModel {
    /// The mask is ignored unless [`SiglipTextModel::apply_attention_mask`] is set.
    fn forward_text(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        let mask = self.apply_attention_mask.then_some(attention_mask);
        self.forward(input_ids, mask, opts)
    }

    /// `pooler_output` (`get_text_features`): the last token through `head`, `[N, E]`.
    fn embed_text(&self, input_ids: Tensor<2, Int>, attention_mask: Tensor<2, Int>) -> Tensor<2> {
        self.forward_text(input_ids, attention_mask, ForwardOptions::default())
            .pooler_output
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            model_type: MODEL_TYPE.into(),
            dtype: bindscope_core::load::dtype_name(self.text_model.final_layer_norm.gamma.dtype()),
            hidden_size: c.hidden_size,
            embed_dim: c.projection_size.unwrap_or(c.hidden_size),
            num_layers: c.num_hidden_layers,
            num_heads: c.num_attention_heads,
            num_params: self.num_params(),
            input_size: [c.max_position_embeddings, 0],
            patch_size: 0,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Both towers
// ---------------------------------------------------------------------------------------------

/// transformers `SiglipModel`: both towers under the checkpoint's key names, plus the
/// checkpoint's `logit_scale` / `logit_bias`. Split it with [`SiglipModel::into_towers`] to use
/// the [`VisionEncoder`] / [`TextEncoder`] traits.
#[derive(Module, Debug)]
pub struct SiglipModel {
    /// Vision transformer.
    pub vision_model: SiglipVisionTransformer,
    /// Text transformer.
    pub text_model: SiglipTextTransformer,
    /// The config.
    #[module(skip)]
    pub config: SiglipConfig,
    /// `logit_scale` (log temperature) from the checkpoint.
    #[module(skip)]
    pub logit_scale: Option<f32>,
    /// `logit_bias` from the checkpoint.
    #[module(skip)]
    pub logit_bias: Option<f32>,
}

impl SiglipModel {
    /// Loads a `SiglipModel` checkpoint strictly (`position_ids`, `logit_scale` and
    /// `logit_bias` are not parameters; the latter two are read into fields).
    ///
    /// # Errors
    /// [`ModelError`] naming the config field or the missing / unexpected keys.
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        check_model_type(ckpt, &model_type(ckpt)?, &[MODEL_TYPE])?;
        let cfg: SiglipConfig = ckpt.read_config()?;
        let v = SiglipVisionModel::new(&cfg.vision_config, &ckpt.config, device)?;
        let t = SiglipTextModel::new(&cfg.text_config, &ckpt.config, device)?;
        let model = Self {
            vision_model: v.vision_model,
            text_model: t.text_model,
            config: cfg,
            logit_scale: None,
            logit_bias: None,
        };
        let mut model = load_module(model, ckpt, opts, BENIGN, &[])?;
        model.logit_scale = read_scalar(&ckpt.weights, "logit_scale");
        model.logit_bias = read_scalar(&ckpt.weights, "logit_bias");
        Ok(model)
    }

    /// Splits into the vision and text towers (the text tower ignores attention masks, see
    /// [`SiglipTextModel::apply_attention_mask`]).
    pub fn into_towers(self) -> (SiglipVisionModel, SiglipTextModel) {
        (
            SiglipVisionModel {
                vision_model: self.vision_model,
                config: self.config.vision_config,
            },
            SiglipTextModel {
                text_model: self.text_model,
                config: self.config.text_config,
                apply_attention_mask: false,
            },
        )
    }

    /// Vision forward pass, see [`SiglipVisionTransformer::forward`].
    pub fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.vision_model.forward(pixel_values, opts)
    }

    /// Text forward pass, see [`SiglipTextTransformer::forward`].
    pub fn forward_text(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Option<Tensor<2, Int>>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        self.text_model.forward(input_ids, attention_mask, opts)
    }

    /// `get_image_features`: the MAP head output `[N, D]`.
    pub fn image_embeds(&self, pixel_values: Tensor<4>) -> Tensor<2> {
        self.forward_vision(pixel_values, ForwardOptions::default())
            .pooler_output
    }

    /// `get_text_features`: the head output of the last token `[N, E]`.
    pub fn text_embeds(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Option<Tensor<2, Int>>,
    ) -> Tensor<2> {
        self.forward_text(input_ids, attention_mask, ForwardOptions::default())
            .pooler_output
    }
}
