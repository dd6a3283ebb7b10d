//! CLIP: contrastive image–text pre-training, vision and text towers with their projections.
//!
//! - Paper: Radford et al., *Learning Transferable Visual Models From Natural Language
//!   Supervision* (2021), <https://arxiv.org/abs/2103.00020>.
//! - Reference implementation: Hugging Face transformers `CLIPModel`
//!   (`models/clip/modeling_clip.py`): `CLIPVisionTransformer`, `CLIPTextTransformer`,
//!   `visual_projection`, `text_projection`.
//!
//! Module field paths mirror the checkpoint keys (`vision_model.pre_layrnorm`, sic;
//! `text_model.encoder.layers.N.self_attn.q_proj`, ...), so a `CLIPModel` checkpoint loads with
//! no remapping:
//!
//! ```no_run
//! use bindscope_core::{Checkpoint, LoadOptions};
//! use bindscope_models::clip::{ClipModel, ClipVisionModel};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let device = burn::tensor::Device::default();
//! let ckpt = Checkpoint::resolve("openai/clip-vit-base-patch32")?;
//! // Both towers:
//! let clip = ClipModel::load(&ckpt, &device, &LoadOptions::default())?;
//! // Only the vision tower (the text keys of the file are ignored):
//! let vision = ClipVisionModel::load(&ckpt, &device, &LoadOptions::default())?;
//! # let _ = (clip, vision); Ok(()) }
//! ```
//!
//! Behaviour that matches transformers exactly:
//! - the activation comes from `hidden_act` (`quick_gelu` for OpenAI CLIP, `gelu` for others);
//! - the vision `last_hidden_state` is the encoder output *without* `post_layernorm`;
//!   `pooler_output = post_layernorm(CLS)`, `image_embeds = visual_projection(pooler_output)`;
//! - other image sizes interpolate the patch position embeddings bicubically
//!   (`align_corners=False`), as `interpolate_pos_encoding=True` does;
//! - the text tower uses a causal mask plus the padding mask, applies `final_layer_norm` to
//!   `last_hidden_state`, and pools the EOS token: at `argmax(input_ids)` when the config's
//!   `eos_token_id == 2` (legacy configs), otherwise at the first position holding
//!   `eos_token_id`.
//!
//! # Checkpoint layouts
//!
//! What `save_pretrained` writes depends on the class and on the transformers version; the
//! loaders take every layout, told apart by the keys present ([`TowerLayout`]), not by the
//! version:
//!
//! | class (`model_type`) | transformers 4.x keys | transformers 5.x keys |
//! |---|---|---|
//! | `CLIPModel` (`clip`) | `vision_model.*`, `visual_projection.*`, `text_model.*`, `text_projection.*`, `logit_scale` | same |
//! | `CLIPVisionModelWithProjection` (`clip_vision_model`) | `vision_model.*`, `visual_projection.*` | same |
//! | `CLIPVisionModel` (`clip_vision_model`) | `vision_model.*` | bare: `embeddings.*`, `pre_layrnorm.*`, `encoder.*`, `post_layernorm.*` |
//! | `CLIPTextModelWithProjection` (`clip_text_model`) | `text_model.*`, `text_projection.*` | same |
//! | `CLIPTextModel` (`clip_text_model`) | `text_model.*` | bare: `embeddings.*`, `encoder.*`, `final_layer_norm.*` |
//!
//! A bare tower is loaded as if its keys had the `vision_model.` / `text_model.` prefix (error
//! messages name the keys as the file stores them). A checkpoint without the projection (a
//! `CLIPVisionModel` / `CLIPTextModel`) embeds as `pooler_output` (`[N, D]`), as those classes
//! do; the config's `projection_dim`, which transformers writes even then, is not used. The
//! projection is required when its key is stored or `architectures` names the
//! `...WithProjection` class.
//!
//! [`SiglipModel`](crate::siglip) reuses this file's encoder ([`ClipEncoder`]): the two
//! families share block structure and key names.

use crate::attention::{AttentionMask, multi_head_attention};
use crate::linearize::{
    BlockParts, HeadParts, LinearParts, Linearization, NormParts, Outputs, Pool, VitParts,
};
use crate::nn::{
    Activation, StackOutput, check_model_type, check_sizes, checkpoint_shapes, embedding,
    gather_tokens, interpolate_square_grid, layer_norm, linear, load_module, model_type,
    read_scalar, run_stack, to_dtype, to_f32, token,
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

/// `model_type` of a two-tower `CLIPModel` checkpoint.
pub const MODEL_TYPE: &str = "clip";
/// `model_type` of a standalone `CLIPVisionModel(WithProjection)` checkpoint.
pub const VISION_MODEL_TYPE: &str = "clip_vision_model";
/// `model_type` of a standalone `CLIPTextModel(WithProjection)` checkpoint.
pub const TEXT_MODEL_TYPE: &str = "clip_text_model";

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// The top-level `config.json` of a `CLIPModel` checkpoint (transformers `CLIPConfig`).
#[derive(Debug, Clone, Deserialize)]
pub struct ClipConfig {
    /// `"clip"`.
    #[serde(default = "default_clip_type")]
    pub model_type: String,
    /// Dimension of the shared image–text embedding space (`visual_projection` /
    /// `text_projection` output).
    #[serde(default = "d512")]
    pub projection_dim: usize,
    /// The vision tower.
    #[serde(default)]
    pub vision_config: ClipVisionConfig,
    /// The text tower.
    #[serde(default)]
    pub text_config: ClipTextConfig,
}

/// transformers `CLIPVisionConfig`; defaults are transformers' (ViT-B/32).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ClipVisionConfig {
    /// `"clip_vision_model"` for a standalone vision checkpoint.
    pub model_type: String,
    /// Width `D` of the transformer.
    pub hidden_size: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Output size of `visual_projection` (used by standalone `CLIPVisionModelWithProjection`
    /// checkpoints; a `CLIPModel` uses the top-level `projection_dim`).
    pub projection_dim: usize,
    /// Number of blocks `L`.
    pub num_hidden_layers: usize,
    /// Number of attention heads `H`.
    pub num_attention_heads: usize,
    /// Input channels.
    pub num_channels: usize,
    /// Training image size (square).
    pub image_size: usize,
    /// Patch size (square).
    pub patch_size: usize,
    /// MLP activation (`quick_gelu`, `gelu`, `gelu_new`, `gelu_pytorch_tanh`, `relu`).
    pub hidden_act: String,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
}

impl Default for ClipVisionConfig {
    fn default() -> Self {
        Self {
            model_type: VISION_MODEL_TYPE.into(),
            hidden_size: 768,
            intermediate_size: 3072,
            projection_dim: 512,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            image_size: 224,
            patch_size: 32,
            hidden_act: "quick_gelu".into(),
            layer_norm_eps: 1e-5,
        }
    }
}

/// transformers `CLIPTextConfig`; defaults are transformers'.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ClipTextConfig {
    /// `"clip_text_model"` for a standalone text checkpoint.
    pub model_type: String,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width `D` of the transformer.
    pub hidden_size: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Output size of `text_projection` for standalone `CLIPTextModelWithProjection`
    /// checkpoints.
    pub projection_dim: usize,
    /// Number of blocks `L`.
    pub num_hidden_layers: usize,
    /// Number of attention heads `H`.
    pub num_attention_heads: usize,
    /// Maximum sequence length.
    pub max_position_embeddings: usize,
    /// MLP activation.
    pub hidden_act: String,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Padding token id.
    pub pad_token_id: Option<i64>,
    /// Beginning-of-sequence token id.
    pub bos_token_id: Option<i64>,
    /// End-of-sequence token id; `2` selects the legacy `argmax(input_ids)` pooling rule.
    pub eos_token_id: Option<i64>,
}

impl Default for ClipTextConfig {
    fn default() -> Self {
        Self {
            model_type: TEXT_MODEL_TYPE.into(),
            vocab_size: 49408,
            hidden_size: 512,
            intermediate_size: 2048,
            projection_dim: 512,
            num_hidden_layers: 12,
            num_attention_heads: 8,
            max_position_embeddings: 77,
            hidden_act: "quick_gelu".into(),
            layer_norm_eps: 1e-5,
            pad_token_id: Some(1),
            bos_token_id: Some(49406),
            eos_token_id: Some(49407),
        }
    }
}

fn default_clip_type() -> String {
    MODEL_TYPE.into()
}
fn d512() -> usize {
    512
}

// ---------------------------------------------------------------------------------------------
// Shared building blocks (also used by SigLIP)
// ---------------------------------------------------------------------------------------------

/// Sizes of one transformer encoder (CLIP / SigLIP tower).
#[derive(Debug, Clone, Copy)]
pub struct EncoderDims {
    /// Width `D`.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Number of blocks.
    pub num_layers: usize,
    /// Number of heads.
    pub num_heads: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// MLP activation.
    pub act: Activation,
}

/// Multi-head self-attention with separate projections (`self_attn.{q,k,v,out}_proj`;
/// transformers `CLIPAttention`, `SiglipAttention`). Scale `Dh^-0.5`.
#[derive(Module, Debug)]
pub struct ClipAttention {
    /// Query projection `D → D`.
    pub q_proj: Linear,
    /// Key projection `D → D`.
    pub k_proj: Linear,
    /// Value projection `D → D`.
    pub v_proj: Linear,
    /// Output projection `D → D`.
    pub out_proj: Linear,
    /// Number of heads.
    pub num_heads: usize,
}

impl ClipAttention {
    fn new(dims: &EncoderDims, device: &Device) -> Self {
        let d = dims.hidden_size;
        Self {
            q_proj: linear(d, d, true, &Initializer::Zeros, device),
            k_proj: linear(d, d, true, &Initializer::Zeros, device),
            v_proj: linear(d, d, true, &Initializer::Zeros, device),
            out_proj: linear(d, d, true, &Initializer::Zeros, device),
            num_heads: dims.num_heads,
        }
    }

    /// `[N, T, D]` → `[N, T, D]` and, when `need_probs`, the probabilities `[N, H, T, T]`.
    pub fn forward(
        &self,
        x: Tensor<3>,
        mask: &AttentionMask,
        need_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let q = self.q_proj.forward(x.clone());
        let k = self.k_proj.forward(x.clone());
        let v = self.v_proj.forward(x);
        let (ctx, probs) = multi_head_attention(q, k, v, self.num_heads, mask, None, need_probs);
        (self.out_proj.forward(ctx), probs)
    }
}

/// Two-layer MLP `fc1 → act → fc2` (transformers `CLIPMLP`, `SiglipMLP`).
#[derive(Module, Debug)]
pub struct ClipMlp {
    /// `D → intermediate`.
    pub fc1: Linear,
    /// `intermediate → D`.
    pub fc2: Linear,
    /// Activation from `hidden_act`.
    #[module(skip)]
    pub act: Activation,
}

impl ClipMlp {
    pub(crate) fn new(d: usize, inner: usize, act: Activation, device: &Device) -> Self {
        Self {
            fc1: linear(d, inner, true, &Initializer::Zeros, device),
            fc2: linear(inner, d, true, &Initializer::Zeros, device),
            act,
        }
    }

    /// `[.., D]` → `[.., D]`.
    pub fn forward<const K: usize>(&self, x: Tensor<K>) -> Tensor<K> {
        self.fc2.forward(self.act.forward(self.fc1.forward(x)))
    }
}

/// One pre-norm block: `x + attn(ln1(x))`, then `x + mlp(ln2(x))` (transformers
/// `CLIPEncoderLayer`, `SiglipEncoderLayer`).
#[derive(Module, Debug)]
pub struct ClipEncoderLayer {
    /// Self-attention.
    pub self_attn: ClipAttention,
    /// Norm before the attention.
    pub layer_norm1: LayerNorm,
    /// MLP.
    pub mlp: ClipMlp,
    /// Norm before the MLP.
    pub layer_norm2: LayerNorm,
}

impl ClipEncoderLayer {
    /// `[N, T, D]` → `[N, T, D]`, with the attention probabilities when `need_probs`.
    pub fn forward(
        &self,
        x: Tensor<3>,
        mask: &AttentionMask,
        need_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let (a, probs) =
            self.self_attn
                .forward(self.layer_norm1.forward(x.clone()), mask, need_probs);
        let x = x + a;
        let x = x.clone() + self.mlp.forward(self.layer_norm2.forward(x));
        (x, probs)
    }
}

/// The stack of blocks, `encoder.layers.N` (transformers `CLIPEncoder`, `SiglipEncoder`).
#[derive(Module, Debug)]
pub struct ClipEncoder {
    /// The blocks.
    pub layers: Vec<ClipEncoderLayer>,
}

impl ClipEncoder {
    /// A zero-initialised encoder of the given sizes (weights come from the checkpoint).
    pub fn new(dims: &EncoderDims, device: &Device) -> Self {
        let layers = (0..dims.num_layers)
            .map(|_| ClipEncoderLayer {
                self_attn: ClipAttention::new(dims, device),
                layer_norm1: layer_norm(dims.hidden_size, dims.layer_norm_eps, device),
                mlp: ClipMlp::new(dims.hidden_size, dims.intermediate_size, dims.act, device),
                layer_norm2: layer_norm(dims.hidden_size, dims.layer_norm_eps, device),
            })
            .collect();
        Self { layers }
    }

    /// Runs every block on `x: [N, T, D]`, collecting hidden states (`L + 1`, the input
    /// first) and attentions (`L`) as `opts` asks.
    pub fn forward(&self, x: Tensor<3>, mask: &AttentionMask, opts: ForwardOptions) -> StackOutput {
        run_stack(&self.layers, x, opts, |l, x, p| l.forward(x, mask, p))
    }
}

/// Keys every CLIP / SigLIP checkpoint may hold without a parameter: buffers and the
/// contrastive temperature / bias (read separately, see [`ClipModel::logit_scale`]).
pub const BENIGN: &[&str] = &[r"position_ids$", r"^logit_scale$", r"^logit_bias$"];

/// How a standalone tower checkpoint (`clip_vision_model`, `clip_text_model`,
/// `siglip_vision_model`, `siglip_text_model`) stores its keys, told apart by the keys
/// present (see the [module docs](self#checkpoint-layouts)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TowerLayout {
    /// The tower's keys are stored without their `vision_model.` / `text_model.` prefix
    /// (`embeddings.*`, `encoder.layers.N.*`: transformers 5's `CLIPVisionModel`,
    /// `CLIPTextModel`, `SiglipVisionModel`, `SiglipTextModel`).
    pub bare: bool,
    /// The checkpoint holds the tower's projection (`visual_projection.weight` /
    /// `text_projection.weight`: the `...WithProjection` classes), or its `architectures` names
    /// a class with one.
    pub projection: bool,
}

impl TowerLayout {
    /// Reads the layout of `ckpt` for the tower stored under `prefix` (`vision_model`,
    /// `text_model`). `projection` is the projection's module name and the transformers class
    /// that has it (`("visual_projection", "CLIPVisionModelWithProjection")`), `None` for a
    /// family without one (SigLIP).
    ///
    /// The keys are *bare* when no key starts with `prefix.` and some key starts with
    /// `embeddings.` or `encoder.`; otherwise they are prefixed (and a file holding neither
    /// is reported by the strict load under the prefixed names). The projection is expected
    /// when `<projection>.weight` is stored or `config.json`'s `architectures` names the class
    /// with it, so that a `...WithProjection` file without it is a missing key, not a
    /// different model.
    ///
    /// # Errors
    /// [`ModelError::Load`] for an unreadable weight file header, [`ModelError::Checkpoint`]
    /// for an unreadable `config.json`.
    pub fn detect(
        ckpt: &Checkpoint,
        prefix: &str,
        projection: Option<(&str, &str)>,
    ) -> Result<Self, ModelError> {
        let shapes = checkpoint_shapes(ckpt)?;
        let under = format!("{prefix}.");
        let prefixed = shapes.keys().any(|k| k.starts_with(&under));
        let bare = !prefixed
            && shapes
                .keys()
                .any(|k| k.starts_with("embeddings.") || k.starts_with("encoder."));
        let projection = match projection {
            None => false,
            Some((module, class)) => {
                let names_class = ckpt
                    .config_json()?
                    .get("architectures")
                    .and_then(|a| a.as_array())
                    .is_some_and(|a| a.iter().any(|c| c.as_str() == Some(class)));
                names_class || shapes.contains_key(&format!("{module}.weight"))
            }
        };
        Ok(Self { bare, projection })
    }

    /// Adds to `opts` the key remapping that puts a bare tower under `prefix` (every key gains
    /// `prefix.`, except the projection `projection.*`, which is top-level in every layout);
    /// nothing for a prefixed one. Error messages still name the keys as the file stores them.
    pub fn remap(&self, opts: &mut LoadOptions, prefix: &str, projection: Option<&str>) {
        if !self.bare {
            return;
        }
        opts.remap.push(("^".into(), format!("{prefix}.")));
        if let Some(p) = projection {
            opts.remap
                .push((format!(r"^{prefix}\.{p}\."), format!("{p}.")));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Vision tower
// ---------------------------------------------------------------------------------------------

/// Patch, class and position embeddings, `vision_model.embeddings` (transformers
/// `CLIPVisionEmbeddings`).
#[derive(Module, Debug)]
pub struct ClipVisionEmbeddings {
    /// The class token `[D]`.
    pub class_embedding: Param<Tensor<1>>,
    /// Patchify convolution `3 → D`, kernel = stride = patch size, no bias.
    pub patch_embedding: Conv2d,
    /// Learned positions `[1 + g², D]` (CLS first) for the training grid `g = image_size / patch`.
    pub position_embedding: Embedding,
    /// Patch size.
    pub patch_size: usize,
}

impl ClipVisionEmbeddings {
    /// `[N, C, H, W]` → `[N, 1 + (H/p)·(W/p), D]`. Position embeddings are interpolated
    /// bicubically when the patch grid differs from the training grid. The pixels are cast to
    /// the patch embedding's dtype (transformers: `pixel_values.to(dtype=target_dtype)`); the
    /// tokens come out in it.
    pub fn forward(&self, pixel_values: Tensor<4>) -> Tensor<3> {
        let pixel_values = to_dtype(pixel_values, self.patch_embedding.weight.dtype());
        let patches = self.patch_embedding.forward(pixel_values); // [N, D, gh, gw]
        let [n, d, gh, gw] = patches.dims();
        let patches = patches.reshape([n, d, gh * gw]).swap_dims(1, 2); // [N, P, D]
        let cls = self
            .class_embedding
            .val()
            .reshape([1, 1, d])
            .expand([n, 1, d]);
        let x = Tensor::cat(vec![cls, patches], 1); // [N, 1 + P, D]
        let pos = self.position_embedding.weight.val(); // [1 + g², D]
        let num_pos = pos.dims()[0] - 1;
        let grid = (num_pos as f64).sqrt().round() as usize;
        let cls_pos = pos.clone().slice([0..1, 0..d]);
        let patch_pos = interpolate_square_grid(pos.slice([1..num_pos + 1, 0..d]), grid, [gh, gw]);
        let pos = Tensor::cat(vec![cls_pos, patch_pos], 0); // [1 + P, D]
        x + pos.unsqueeze_dim::<3>(0)
    }
}

/// `vision_model` (transformers `CLIPVisionTransformer`).
#[derive(Module, Debug)]
pub struct ClipVisionTransformer {
    /// Patch + class + position embeddings.
    pub embeddings: ClipVisionEmbeddings,
    /// LayerNorm applied to the embeddings (sic: the checkpoint key is `pre_layrnorm`).
    pub pre_layrnorm: LayerNorm,
    /// The blocks.
    pub encoder: ClipEncoder,
    /// LayerNorm applied to the CLS token for `pooler_output`.
    pub post_layernorm: LayerNorm,
}

impl ClipVisionTransformer {
    fn new(cfg: &ClipVisionConfig, act: Activation, device: &Device) -> Self {
        let d = cfg.hidden_size;
        let grid = cfg.image_size / cfg.patch_size;
        let dims = EncoderDims {
            hidden_size: d,
            intermediate_size: cfg.intermediate_size,
            num_layers: cfg.num_hidden_layers,
            num_heads: cfg.num_attention_heads,
            layer_norm_eps: cfg.layer_norm_eps,
            act,
        };
        Self {
            embeddings: ClipVisionEmbeddings {
                class_embedding: Param::from_tensor(Tensor::zeros([d], device)),
                patch_embedding: Conv2dConfig::new(
                    [cfg.num_channels, d],
                    [cfg.patch_size, cfg.patch_size],
                )
                .with_stride([cfg.patch_size, cfg.patch_size])
                .with_bias(false)
                .with_initializer(Initializer::Zeros)
                .init(device),
                position_embedding: embedding(grid * grid + 1, d, device),
                patch_size: cfg.patch_size,
            },
            pre_layrnorm: layer_norm(d, cfg.layer_norm_eps, device),
            encoder: ClipEncoder::new(&dims, device),
            post_layernorm: layer_norm(d, cfg.layer_norm_eps, device),
        }
    }

    /// transformers `CLIPVisionTransformer.forward`: `[N, 3, H, W]` →
    /// `last_hidden_state [N, 1 + P, D]` (no `post_layernorm`), `pooler_output =
    /// post_layernorm(CLS) [N, D]`; hidden state 0 is the embeddings after `pre_layrnorm`.
    /// Computed in the weights' dtype, returned in f32.
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        let x = self
            .pre_layrnorm
            .forward(self.embeddings.forward(pixel_values));
        let (last, hidden_states, attentions) = self.encoder.forward(x, &AttentionMask::None, opts);
        let pooler_output = self.post_layernorm.forward(token(last.clone(), 0));
        EncoderOutput {
            last_hidden_state: last,
            pooler_output,
            hidden_states,
            attentions,
        }
        .into_f32()
    }
}

/// The CLIP vision tower, with its projection (transformers `CLIPVisionModelWithProjection`, or
/// the vision half of `CLIPModel`: keys `vision_model.*` and `visual_projection.weight`) or
/// without (transformers `CLIPVisionModel`: `vision_model.*` as 4.x saves it, bare `embeddings.*`,
/// `encoder.*`, ... as 5.x does; see [`TowerLayout`]).
#[derive(Module, Debug)]
pub struct ClipVisionModel {
    /// The vision transformer.
    pub vision_model: ClipVisionTransformer,
    /// `D → E` projection into the joint space, no bias; `None` for a `CLIPVisionModel`
    /// checkpoint, whose image embedding is `pooler_output` itself.
    pub visual_projection: Option<Linear>,
    /// The vision config.
    #[module(skip)]
    pub config: ClipVisionConfig,
}

impl ClipVisionModel {
    /// Builds a zero-initialised vision tower projecting to `projection_dim`.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for an unknown `hidden_act` or a patch size that does not
    /// divide the image size.
    pub fn new(
        cfg: &ClipVisionConfig,
        projection_dim: usize,
        config_file: &std::path::Path,
        device: &Device,
    ) -> Result<Self, ModelError> {
        Self::with_projection(cfg, Some(projection_dim), config_file, device)
    }

    /// Builds a zero-initialised vision tower projecting to `projection_dim`, or without a
    /// projection (`None`, transformers `CLIPVisionModel`).
    ///
    /// # Errors
    /// As [`ClipVisionModel::new`].
    pub fn with_projection(
        cfg: &ClipVisionConfig,
        projection_dim: Option<usize>,
        config_file: &std::path::Path,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let act = Activation::parse(&cfg.hidden_act, "hidden_act", config_file)?;
        check_sizes(config_file, cfg.hidden_size, cfg.num_attention_heads, &[])?;
        if cfg.patch_size == 0 || !cfg.image_size.is_multiple_of(cfg.patch_size) {
            return Err(ModelError::Unsupported {
                file: config_file.display().to_string(),
                message: format!(
                    "vision patch_size {} does not divide image_size {}",
                    cfg.patch_size, cfg.image_size
                ),
            });
        }
        Ok(Self {
            vision_model: ClipVisionTransformer::new(cfg, act, device),
            visual_projection: projection_dim
                .map(|e| linear(cfg.hidden_size, e, false, &Initializer::Zeros, device)),
            config: cfg.clone(),
        })
    }

    /// Loads the vision tower from a `CLIPModel` checkpoint (`model_type` `clip`; the text keys
    /// are ignored unless `opts.only` says otherwise) or a standalone `CLIPVisionModel` /
    /// `CLIPVisionModelWithProjection` checkpoint (`clip_vision_model`) in any layout
    /// transformers writes ([`TowerLayout`]). Strict: every vision key must be present and
    /// used.
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
        let (cfg, proj) = match model_type(ckpt)?.as_str() {
            VISION_MODEL_TYPE => {
                let c: ClipVisionConfig = ckpt.read_config()?;
                let projection = ("visual_projection", "CLIPVisionModelWithProjection");
                let layout = TowerLayout::detect(ckpt, "vision_model", Some(projection))?;
                layout.remap(&mut opts, "vision_model", Some("visual_projection"));
                let p = layout.projection.then_some(c.projection_dim);
                (c, p)
            }
            other => {
                check_model_type(ckpt, other, &[MODEL_TYPE])?;
                let c = ClipConfig::from_checkpoint(ckpt)?;
                (c.vision_config, Some(c.projection_dim))
            }
        };
        let model = Self::with_projection(&cfg, proj, &ckpt.config, device)?;
        load_module(
            model,
            ckpt,
            &opts,
            BENIGN,
            &[r"^vision_model\.", r"^visual_projection\."],
        )
    }

    /// The full vision forward pass (transformers `CLIPVisionTransformer.forward`, with
    /// position interpolation for other sizes).
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.vision_model.forward(pixel_values, opts)
    }

    /// `image_embeds = visual_projection(pooler_output)`: `[N, 3, H, W]` → `[N, E]`
    /// (transformers `CLIPModel.get_image_features`); `pooler_output` `[N, D]` itself without a
    /// projection (`CLIPVisionModel`).
    pub fn image_embeds(&self, pixel_values: Tensor<4>) -> Tensor<2> {
        let out = self.forward(pixel_values, ForwardOptions::default());
        project(self.visual_projection.as_ref(), out.pooler_output)
    }

    /// Width `E` of [`ClipVisionModel::image_embeds`]: the projection's output, `hidden_size`
    /// without one.
    pub fn embed_dim(&self) -> usize {
        match &self.visual_projection {
            Some(p) => p.weight.dims()[1],
            None => self.config.hidden_size,
        }
    }
}

/// `proj(x)` for an f32 `x` from a forward pass: computed in the projection's dtype, returned
/// in f32; `x` itself without a projection.
fn project(proj: Option<&Linear>, x: Tensor<2>) -> Tensor<2> {
    match proj {
        Some(proj) => to_f32(proj.forward(to_dtype(x, proj.weight.dtype()))),
        None => x,
    }
}

/// The vision tower as plain tensors for [`crate::linearize`], with the readout `pool` after
/// `post_layernorm` and `projection`.
fn vision_parts(
    vm: &ClipVisionTransformer,
    eps: f64,
    pool: Pool,
    projection: Option<LinearParts>,
) -> VitParts {
    let norm = |n: &LayerNorm| NormParts::new(n, eps);
    VitParts {
        patch_weight: vm
            .embeddings
            .patch_embedding
            .weight
            .val()
            .without_autodiff(),
        prefix: 1,
        pre_norm: Some(norm(&vm.pre_layrnorm)),
        blocks: block_parts(&vm.encoder, eps),
        head: HeadParts {
            norm: Some(norm(&vm.post_layernorm)),
            pool,
            map: None,
            pooled_norm: None,
            projection,
        },
    }
}

/// The blocks of `encoder` (CLIP's, SigLIP's) as plain tensors for [`crate::linearize`].
pub(crate) fn block_parts(encoder: &ClipEncoder, eps: f64) -> Vec<BlockParts> {
    let norm = |n: &LayerNorm| NormParts::new(n, eps);
    encoder
        .layers
        .iter()
        .map(|l| BlockParts {
            norm1: norm(&l.layer_norm1),
            query: LinearParts::new(&l.self_attn.q_proj),
            key: LinearParts::new(&l.self_attn.k_proj),
            value: LinearParts::new(&l.self_attn.v_proj),
            output: LinearParts::new(&l.self_attn.out_proj),
            num_heads: l.self_attn.num_heads,
            attn_bias: None,
            layer_scale1: None,
            norm2: norm(&l.layer_norm2),
            fc1: LinearParts::new(&l.mlp.fc1),
            act: l.mlp.act,
            fc2: LinearParts::new(&l.mlp.fc2),
            layer_scale2: None,
        })
        .collect()
}

fn vision_readout(
    vm: &ClipVisionTransformer,
    proj: Option<&Linear>,
    hidden: Tensor<3>,
    readout: VisionReadout,
) -> Tensor<2> {
    let hidden = to_dtype(hidden, vm.post_layernorm.gamma.dtype());
    to_f32(match readout {
        VisionReadout::Pooled => {
            let pooled = vm.post_layernorm.forward(token(hidden, 0));
            match proj {
                Some(proj) => proj.forward(pooled),
                None => pooled,
            }
        }
        VisionReadout::Summary => vm.post_layernorm.forward(token(hidden, 0)),
        VisionReadout::MeanPatch => {
            let [n, t, d] = hidden.dims();
            let patches = vm.post_layernorm.forward(hidden.slice([0..n, 1..t, 0..d]));
            patches.mean_dim(1).reshape([n, d])
        }
    })
}

impl VisionEncoder for ClipVisionModel {
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.forward(pixel_values, opts)
    }

    fn num_prefix_tokens(&self) -> usize {
        1
    }

    /// `Pooled`: `visual_projection(post_layernorm(CLS))` (= `image_embeds` on the last
    /// layer; `post_layernorm(CLS)` without a projection); `Summary`: `post_layernorm(CLS)` (= `pooler_output`); `MeanPatch`: mean over
    /// the patch tokens after `post_layernorm` (CLIP's final norm, applied token-wise).
    fn readout(&self, hidden: Tensor<3>, readout: VisionReadout) -> Tensor<2> {
        vision_readout(
            &self.vision_model,
            self.visual_projection.as_ref(),
            hidden,
            readout,
        )
    }

    /// f32 weights: every readout.
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
        let (pool, projection) = match readout {
            VisionReadout::Pooled => (
                Pool::Token(0),
                self.visual_projection.as_ref().map(LinearParts::new),
            ),
            VisionReadout::Summary => (Pool::Token(0), None),
            VisionReadout::MeanPatch => (Pool::MeanPatch { prefix: 1 }, None),
        };
        let parts = vision_parts(vm, self.config.layer_norm_eps, pool, projection);
        let dims = pixel_values.dims();
        let embeddings = vm.embeddings.forward(pixel_values.detach());
        parts.linearize(dims, embeddings, outputs)
    }

    /// `post_layernorm` token-wise (CLIP's `last_hidden_state` has no final norm): `[N, T, D]`.
    fn final_norm(&self, last_hidden_state: Tensor<3>) -> Tensor<3> {
        let norm = &self.vision_model.post_layernorm;
        to_f32(norm.forward(to_dtype(last_hidden_state, norm.gamma.dtype())))
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            model_type: MODEL_TYPE.into(),
            dtype: bindscope_core::load::dtype_name(self.vision_model.post_layernorm.gamma.dtype()),
            hidden_size: c.hidden_size,
            embed_dim: self.embed_dim(),
            num_layers: c.num_hidden_layers,
            num_heads: c.num_attention_heads,
            num_params: self.num_params(),
            input_size: [c.image_size, c.image_size],
            patch_size: c.patch_size,
        }
    }
}

impl ClipConfig {
    /// Reads `config.json`, merging the legacy `vision_config_dict` / `text_config_dict` over
    /// `vision_config` / `text_config` as transformers' `CLIPConfig.__init__` does.
    ///
    /// # Errors
    /// [`ModelError::Checkpoint`] naming the file and field.
    pub fn from_checkpoint(ckpt: &Checkpoint) -> Result<Self, ModelError> {
        let mut v = ckpt.config_json()?;
        if let Some(obj) = v.as_object_mut() {
            for tower in ["vision", "text"] {
                if obj
                    .get(&format!("{tower}_config"))
                    .is_some_and(|c| c.is_null())
                {
                    obj.remove(&format!("{tower}_config"));
                }
                let legacy = obj.get(&format!("{tower}_config_dict")).cloned();
                if let Some(serde_json::Value::Object(extra)) = legacy {
                    let entry = obj
                        .entry(format!("{tower}_config"))
                        .or_insert_with(|| serde_json::Value::Object(Default::default()));
                    if entry.is_null() {
                        *entry = serde_json::Value::Object(Default::default());
                    }
                    if let Some(base) = entry.as_object_mut() {
                        for (k, val) in extra {
                            base.insert(k, val);
                        }
                    }
                }
            }
        }
        serde_json::from_value(v).map_err(|e| {
            ModelError::Checkpoint(bindscope_core::CheckpointError::BadJson {
                path: ckpt.config.clone(),
                message: e.to_string(),
            })
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Text tower
// ---------------------------------------------------------------------------------------------

/// Token + position embeddings, `text_model.embeddings` (transformers `CLIPTextEmbeddings`,
/// `SiglipTextEmbeddings`).
#[derive(Module, Debug)]
pub struct ClipTextEmbeddings {
    /// `[vocab, D]`.
    pub token_embedding: Embedding,
    /// `[max_positions, D]`.
    pub position_embedding: Embedding,
}

impl ClipTextEmbeddings {
    pub(crate) fn new(vocab: usize, max_pos: usize, d: usize, device: &Device) -> Self {
        Self {
            token_embedding: embedding(vocab, d, device),
            position_embedding: embedding(max_pos, d, device),
        }
    }

    /// `[N, T]` → `[N, T, D]` with positions `0..T`.
    ///
    /// # Panics
    /// When `T` exceeds the number of position embeddings (as transformers raises).
    pub fn forward(&self, input_ids: Tensor<2, Int>) -> Tensor<3> {
        let [_, t] = input_ids.dims();
        let [max_pos, d] = self.position_embedding.weight.dims();
        assert!(
            t <= max_pos,
            "sequence length {t} exceeds max_position_embeddings {max_pos}"
        );
        let pos = self
            .position_embedding
            .weight
            .val()
            .slice([0..t, 0..d])
            .unsqueeze_dim::<3>(0);
        self.token_embedding.forward(input_ids) + pos
    }
}

/// `text_model` (transformers `CLIPTextTransformer`).
#[derive(Module, Debug)]
pub struct ClipTextTransformer {
    /// Token + position embeddings.
    pub embeddings: ClipTextEmbeddings,
    /// The blocks (causal).
    pub encoder: ClipEncoder,
    /// Final LayerNorm, applied to every token of `last_hidden_state`.
    pub final_layer_norm: LayerNorm,
    /// `eos_token_id` of the config (`2` = legacy argmax pooling).
    pub eos_token_id: Option<i64>,
}

/// How CLIP's text tower finds the token to pool (transformers `CLIPTextTransformer.forward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EosPooling {
    /// Legacy configs (`eos_token_id == 2`): the position of the largest token id (the EOT
    /// token has the largest id in the OpenAI vocabulary); first one on ties.
    ArgmaxId,
    /// The first position whose id equals this `eos_token_id` (position 0 if there is none,
    /// as `argmax` of an all-false row).
    FirstEos(i64),
}

impl EosPooling {
    /// The rule transformers applies for a config's `eos_token_id`.
    pub fn from_eos_token_id(eos: Option<i64>) -> Self {
        match eos {
            Some(2) => Self::ArgmaxId,
            Some(id) => Self::FirstEos(id),
            // transformers compares with None: never equal, so argmax of zeros = position 0.
            None => Self::FirstEos(i64::MIN),
        }
    }

    /// The pooled position of each row of `ids` (`[N][T]`, row-major).
    pub fn positions(self, ids: &[i64], t: usize) -> Vec<usize> {
        ids.chunks(t.max(1))
            .map(|row| match self {
                Self::ArgmaxId => {
                    let mut best = 0;
                    for (i, &v) in row.iter().enumerate() {
                        if v > row[best] {
                            best = i;
                        }
                    }
                    best
                }
                Self::FirstEos(id) => row.iter().position(|&v| v == id).unwrap_or(0),
            })
            .collect()
    }
}

impl ClipTextTransformer {
    fn new(cfg: &ClipTextConfig, act: Activation, device: &Device) -> Self {
        let d = cfg.hidden_size;
        let dims = EncoderDims {
            hidden_size: d,
            intermediate_size: cfg.intermediate_size,
            num_layers: cfg.num_hidden_layers,
            num_heads: cfg.num_attention_heads,
            layer_norm_eps: cfg.layer_norm_eps,
            act,
        };
        Self {
            embeddings: ClipTextEmbeddings::new(
                cfg.vocab_size,
                cfg.max_position_embeddings,
                d,
                device,
            ),
            encoder: ClipEncoder::new(&dims, device),
            final_layer_norm: layer_norm(d, cfg.layer_norm_eps, device),
            eos_token_id: cfg.eos_token_id,
        }
    }

    /// The pooling rule of this config.
    pub fn eos_pooling(&self) -> EosPooling {
        EosPooling::from_eos_token_id(self.eos_token_id)
    }

    /// transformers `CLIPTextTransformer.forward`: `input_ids, attention_mask: [N, T]` →
    /// `last_hidden_state [N, T, D]` (after `final_layer_norm`), `pooler_output [N, D]` (the
    /// EOS token, see [`EosPooling`]); causal + padding mask. Computed in the weights' dtype,
    /// returned in f32.
    pub fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        let [_, t] = input_ids.dims();
        let ids: Vec<i64> = input_ids
            .to_data()
            .convert::<i64>()
            .try_into_vec::<i64>()
            .expect("integer input_ids");
        let x = self.embeddings.forward(input_ids);
        let mask = AttentionMask::CausalPadding(attention_mask);
        let (last, hidden_states, attentions) = self.encoder.forward(x, &mask, opts);
        let last = self.final_layer_norm.forward(last);
        let pos = self.eos_pooling().positions(&ids, t);
        let pooler_output = gather_tokens(last.clone(), &pos);
        EncoderOutput {
            last_hidden_state: last,
            pooler_output,
            hidden_states,
            attentions,
        }
        .into_f32()
    }
}

/// The CLIP text tower, with its projection (transformers `CLIPTextModelWithProjection`, or the
/// text half of `CLIPModel`: keys `text_model.*` and `text_projection.weight`) or without
/// (transformers `CLIPTextModel`: `text_model.*` as 4.x saves it, bare `embeddings.*`,
/// `encoder.*`, `final_layer_norm.*` as 5.x does; see [`TowerLayout`]).
#[derive(Module, Debug)]
pub struct ClipTextModel {
    /// The text transformer.
    pub text_model: ClipTextTransformer,
    /// `D → E` projection into the joint space, no bias; `None` for a `CLIPTextModel`
    /// checkpoint, whose text embedding is `pooler_output` itself.
    pub text_projection: Option<Linear>,
    /// The text config.
    #[module(skip)]
    pub config: ClipTextConfig,
}

impl ClipTextModel {
    /// Builds a zero-initialised text tower projecting to `projection_dim`.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for an unknown `hidden_act` or indivisible head count.
    pub fn new(
        cfg: &ClipTextConfig,
        projection_dim: usize,
        config_file: &std::path::Path,
        device: &Device,
    ) -> Result<Self, ModelError> {
        Self::with_projection(cfg, Some(projection_dim), config_file, device)
    }

    /// Builds a zero-initialised text tower projecting to `projection_dim`, or without a
    /// projection (`None`, transformers `CLIPTextModel`).
    ///
    /// # Errors
    /// As [`ClipTextModel::new`].
    pub fn with_projection(
        cfg: &ClipTextConfig,
        projection_dim: Option<usize>,
        config_file: &std::path::Path,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let act = Activation::parse(&cfg.hidden_act, "hidden_act", config_file)?;
        check_sizes(config_file, cfg.hidden_size, cfg.num_attention_heads, &[])?;
        Ok(Self {
            text_model: ClipTextTransformer::new(cfg, act, device),
            text_projection: projection_dim
                .map(|e| linear(cfg.hidden_size, e, false, &Initializer::Zeros, device)),
            config: cfg.clone(),
        })
    }

    /// Loads the text tower from a `CLIPModel` checkpoint (`clip`; vision keys ignored unless
    /// `opts.only` says otherwise) or a standalone `CLIPTextModel` /
    /// `CLIPTextModelWithProjection` checkpoint (`clip_text_model`) in any layout transformers
    /// writes ([`TowerLayout`]). Strict.
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
        let (cfg, proj) = match model_type(ckpt)?.as_str() {
            TEXT_MODEL_TYPE => {
                let c: ClipTextConfig = ckpt.read_config()?;
                let projection = ("text_projection", "CLIPTextModelWithProjection");
                let layout = TowerLayout::detect(ckpt, "text_model", Some(projection))?;
                layout.remap(&mut opts, "text_model", Some("text_projection"));
                let p = layout.projection.then_some(c.projection_dim);
                (c, p)
            }
            other => {
                check_model_type(ckpt, other, &[MODEL_TYPE])?;
                let c = ClipConfig::from_checkpoint(ckpt)?;
                (c.text_config, Some(c.projection_dim))
            }
        };
        let model = Self::with_projection(&cfg, proj, &ckpt.config, device)?;
        load_module(
            model,
            ckpt,
            &opts,
            BENIGN,
            &[r"^text_model\.", r"^text_projection\."],
        )
    }

    /// The full text forward pass (see [`ClipTextTransformer::forward`]).
    pub fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        self.text_model.forward(input_ids, attention_mask, opts)
    }

    /// `text_embeds = text_projection(pooler_output)`: `[N, T]` → `[N, E]`
    /// (transformers `CLIPModel.get_text_features`); `pooler_output` `[N, D]` itself without a
    /// projection (`CLIPTextModel`).
    pub fn text_embeds(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
    ) -> Tensor<2> {
        let out = self.forward(input_ids, attention_mask, ForwardOptions::default());
        self.project(out.pooler_output)
    }

    /// `text_projection(pooled)` (`pooled` itself without a projection): `[N, D]` → `[N, E]`.
    pub fn project(&self, pooled: Tensor<2>) -> Tensor<2> {
        project(self.text_projection.as_ref(), pooled)
    }

    /// Width `E` of [`ClipTextModel::text_embeds`]: the projection's output, `hidden_size`
    /// without one.
    pub fn embed_dim(&self) -> usize {
        match &self.text_projection {
            Some(p) => p.weight.dims()[1],
            None => self.config.hidden_size,
        }
    }
}

impl TextEncoder for ClipTextModel {
    fn forward_text(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        self.forward(input_ids, attention_mask, opts)
    }

    fn embed_text(&self, input_ids: Tensor<2, Int>, attention_mask: Tensor<2, Int>) -> Tensor<2> {
        self.text_embeds(input_ids, attention_mask)
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            model_type: MODEL_TYPE.into(),
            dtype: bindscope_core::load::dtype_name(self.text_model.final_layer_norm.gamma.dtype()),
            hidden_size: c.hidden_size,
            embed_dim: self.embed_dim(),
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

/// transformers `CLIPModel`: both towers and both projections, under the checkpoint's own key
/// names. Split it with [`ClipModel::into_towers`] to use the [`VisionEncoder`] /
/// [`TextEncoder`] traits.
#[derive(Module, Debug)]
pub struct ClipModel {
    /// Vision transformer.
    pub vision_model: ClipVisionTransformer,
    /// `D_v → E`, no bias.
    pub visual_projection: Linear,
    /// Text transformer.
    pub text_model: ClipTextTransformer,
    /// `D_t → E`, no bias.
    pub text_projection: Linear,
    /// The config.
    #[module(skip)]
    pub config: ClipConfig,
    /// The checkpoint's `logit_scale` (log of the inverse temperature), when present.
    #[module(skip)]
    pub logit_scale: Option<f32>,
}

impl ClipModel {
    /// Loads a `CLIPModel` checkpoint strictly (every key of both towers; `position_ids` and
    /// `logit_scale` are not parameters, `logit_scale` is read into [`ClipModel::logit_scale`]).
    ///
    /// # Errors
    /// [`ModelError`] naming the config field or the missing / unexpected keys.
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        check_model_type(ckpt, &model_type(ckpt)?, &[MODEL_TYPE])?;
        let cfg = ClipConfig::from_checkpoint(ckpt)?;
        let d = &ckpt.config;
        let v = ClipVisionModel::with_projection(&cfg.vision_config, None, d, device)?;
        let t = ClipTextModel::with_projection(&cfg.text_config, None, d, device)?;
        let projection = |tower_width| {
            linear(
                tower_width,
                cfg.projection_dim,
                false,
                &Initializer::Zeros,
                device,
            )
        };
        let model = Self {
            visual_projection: projection(cfg.vision_config.hidden_size),
            text_projection: projection(cfg.text_config.hidden_size),
            vision_model: v.vision_model,
            text_model: t.text_model,
            config: cfg,
            logit_scale: None,
        };
        let mut model = load_module(model, ckpt, opts, BENIGN, &[])?;
        model.logit_scale = read_scalar(&ckpt.weights, "logit_scale");
        Ok(model)
    }

    /// Splits into the vision and text towers.
    pub fn into_towers(self) -> (ClipVisionModel, ClipTextModel) {
        (
            ClipVisionModel {
                vision_model: self.vision_model,
                visual_projection: Some(self.visual_projection),
                config: self.config.vision_config,
            },
            ClipTextModel {
                text_model: self.text_model,
                text_projection: Some(self.text_projection),
                config: self.config.text_config,
            },
        )
    }

    /// Vision forward pass, see [`ClipVisionTransformer::forward`].
    pub fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.vision_model.forward(pixel_values, opts)
    }

    /// Text forward pass, see [`ClipTextTransformer::forward`].
    pub fn forward_text(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        opts: ForwardOptions,
    ) -> EncoderOutput {
        self.text_model.forward(input_ids, attention_mask, opts)
    }

    /// `image_embeds [N, E]` (transformers `get_image_features`).
    pub fn image_embeds(&self, pixel_values: Tensor<4>) -> Tensor<2> {
        project(
            Some(&self.visual_projection),
            self.forward_vision(pixel_values, ForwardOptions::default())
                .pooler_output,
        )
    }

    /// `text_embeds [N, E]` (transformers `get_text_features`).
    pub fn text_embeds(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
    ) -> Tensor<2> {
        project(
            Some(&self.text_projection),
            self.forward_text(input_ids, attention_mask, ForwardOptions::default())
                .pooler_output,
        )
    }

    /// Vision readout of a hidden state of any depth, as [`VisionEncoder::readout`].
    pub fn readout(&self, hidden: Tensor<3>, readout: VisionReadout) -> Tensor<2> {
        vision_readout(
            &self.vision_model,
            Some(&self.visual_projection),
            hidden,
            readout,
        )
    }
}
