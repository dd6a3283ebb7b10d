//! # ViT — `ViTModel` (DINO v1 checkpoints)
//!
//! The plain Vision Transformer of Dosovitskiy et al., *An Image is Worth 16x16 Words*
//! (<https://arxiv.org/abs/2010.11929>), as Hugging Face transformers implements it in
//! `ViTModel` (`model_type: "vit"`). The self-supervised DINO v1 checkpoints (Caron et al.,
//! *Emerging Properties in Self-Supervised Vision Transformers*, <https://arxiv.org/abs/2104.14294>,
//! e.g. `facebook/dino-vits16`) use this class.
//!
//! Architecture: a stride-`patch` convolution turns the image into patch tokens, a learned CLS
//! token is prepended and learned position embeddings are added (resampled bicubically when the
//! input is not the configured size), then `L` pre-norm blocks
//! (`x + attn(layernorm_before(x))`, `x + mlp(layernorm_after(x))`), a final `layernorm`, and
//! optionally the pooler `tanh(dense(CLS))`.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bindscope_core::{Checkpoint, LoadOptions};
//! use bindscope_models::{ForwardOptions, vit::ViTModel};
//! let device = burn::tensor::Device::flex();
//! let ckpt = Checkpoint::resolve("facebook/dino-vits16")?;
//! let model = ViTModel::load(&ckpt, &device, &LoadOptions::default())?;
//! let pixels = burn::tensor::Tensor::<4>::zeros([1, 3, 224, 224], &device);
//! let out = model.forward(pixels, ForwardOptions::default());
//! assert_eq!(out.last_hidden_state.dims(), [1, 197, 384]);
//! # Ok(()) }
//! ```
//!
//! Key names are the Hub's: `embeddings.{cls_token,position_embeddings,patch_embeddings.projection}`,
//! `encoder.layer.N.{attention.attention.{query,key,value},attention.output.dense,
//! intermediate.dense,output.dense,layernorm_before,layernorm_after}`, `layernorm`, optional
//! `pooler.dense`. Checkpoints saved from `ViTForImageClassification` carry a `vit.` prefix and
//! a `classifier` head: the prefix is stripped and the `classifier.*` keys are ignored (this
//! crate only extracts features). The pooler is built exactly when the checkpoint has
//! `pooler.dense.weight` (transformers' `add_pooling_layer`).
//!
//! The layer building blocks ([`ViTEmbeddings`], [`ViTEncoder`]) are shared with
//! [`crate::vit_mae`], and the torch-exact bicubic resampling of position grids
//! ([`crate::nn::interpolate_pos_grid`]) with [`crate::dinov2`], [`crate::clip`] and
//! [`crate::siglip`].

use std::path::Path;

/// `model_type` of a `ViTModel` checkpoint.
pub const MODEL_TYPE: &str = "vit";

use bindscope_core::{Checkpoint, LoadOptions, load_strict};
use burn::module::Param;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Initializer, LayerNorm, LayerNormConfig, Linear};
use burn::prelude::*;
use serde::Deserialize;

use crate::attention::{AttentionMask, multi_head_attention};
use crate::linearize::{
    BlockParts, HeadParts, LinearParts, Linearization, NormParts, Outputs, Pool, VitParts,
};
use crate::nn::{
    Activation, check_sizes, checkpoint_shapes, de_image_size, interpolate_pos_grid, linear,
    mean_patch, run_stack, to_dtype, to_f32, token,
};
use crate::{EncoderOutput, ForwardOptions, ModelError, ModelInfo, VisionEncoder, VisionReadout};

// ---------------------------------------------------------------------------------------------
// Config
// ---------------------------------------------------------------------------------------------

/// `config.json` of a transformers `ViTModel` (`ViTConfig`); missing fields take the
/// transformers defaults (ViT-B/16 at 224).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ViTConfig {
    /// `"vit"`.
    pub model_type: String,
    /// Width `D` of the transformer.
    pub hidden_size: usize,
    /// Number of blocks `L`.
    pub num_hidden_layers: usize,
    /// Number of attention heads `H`.
    pub num_attention_heads: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// MLP activation (`gelu` = exact erf GELU).
    pub hidden_act: String,
    /// Epsilon of every LayerNorm.
    pub layer_norm_eps: f64,
    /// Configured input size `[H, W]` (an integer in `config.json` means a square image).
    #[serde(deserialize_with = "de_image_size")]
    pub image_size: [usize; 2],
    /// Side of the square patches.
    pub patch_size: usize,
    /// Input channels.
    pub num_channels: usize,
    /// Whether the query/key/value projections have a bias.
    pub qkv_bias: bool,
    /// Output width of the pooler (`None` = `hidden_size`).
    pub pooler_output_size: Option<usize>,
    /// Pooler activation (`tanh`).
    pub pooler_act: String,
}

impl Default for ViTConfig {
    fn default() -> Self {
        Self {
            model_type: MODEL_TYPE.into(),
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-12,
            image_size: [224, 224],
            patch_size: 16,
            num_channels: 3,
            qkv_bias: true,
            pooler_output_size: None,
            pooler_act: "tanh".into(),
        }
    }
}

/// transformers' `initializer_range` for ViT: the standard deviation of its normal
/// initialisation, recorded by [`ViTConfig::to_hf_json`] (and the `std` the random-init studies
/// pass to [`ViTModel::init_seeded`]).
pub const INITIALIZER_RANGE: f64 = 0.02;

impl ViTConfig {
    /// The `encoder` (every block) and the final `layernorm` of a ViT-like model with these
    /// sizes, parameters drawn from `init` (shared by [`ViTModel`],
    /// [`crate::vit_mae::ViTMAEModel`] and [`crate::ijepa::IJepaModel`]).
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` for an unknown `hidden_act`, a zero size or
    /// a `hidden_size` the heads do not divide.
    pub fn encoder_and_norm(
        &self,
        init: &Initializer,
        device: &Device,
        file: &str,
    ) -> Result<(ViTEncoder, LayerNorm), ModelError> {
        check_sizes(
            Path::new(file),
            self.hidden_size,
            self.num_attention_heads,
            &[
                ("patch_size", self.patch_size),
                ("hidden_size", self.hidden_size),
                ("intermediate_size", self.intermediate_size),
                ("num_channels", self.num_channels),
            ],
        )?;
        let spec = ViTBlockSpec {
            hidden_size: self.hidden_size,
            num_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            act: Activation::parse(&self.hidden_act, "hidden_act", Path::new(file))?,
            layer_norm_eps: self.layer_norm_eps,
            qkv_bias: self.qkv_bias,
        };
        let encoder = ViTEncoder::new(self.num_hidden_layers, &spec, init, device);
        let layernorm = LayerNormConfig::new(self.hidden_size)
            .with_epsilon(self.layer_norm_eps)
            .init(device);
        Ok((encoder, layernorm))
    }

    /// ViT-B/16 at 224 × 224: transformers' `ViTConfig()` defaults (the same values as
    /// [`ViTConfig::default`], named for `--random-init vit-b16`): `D = 768`, 12 blocks of 12
    /// heads, MLP 3072, 16 × 16 patches.
    pub fn vit_b16() -> Self {
        Self::default()
    }

    /// This config as the `config.json` of a transformers `ViTModel` checkpoint, which
    /// [`ViTModel::load`] and transformers read back to the same architecture:
    /// `architectures: ["ViTModel"]`, `model_type` and every size of this struct
    /// (`image_size` an integer when square, `[H, W]` otherwise), dropouts 0,
    /// `initializer_range` [`INITIALIZER_RANGE`]; `pooler_output_size` and `pooler_act` only
    /// when they differ from transformers' defaults (`None`, `tanh`).
    pub fn to_hf_json(&self) -> serde_json::Value {
        let [h, w] = self.image_size;
        let mut v = serde_json::json!({
            "architectures": ["ViTModel"],
            "model_type": self.model_type,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "initializer_range": INITIALIZER_RANGE,
            "layer_norm_eps": self.layer_norm_eps,
            "image_size": if h == w { serde_json::json!(h) } else { serde_json::json!([h, w]) },
            "patch_size": self.patch_size,
            "num_channels": self.num_channels,
            "qkv_bias": self.qkv_bias,
        });
        if let Some(p) = self.pooler_output_size {
            v["pooler_output_size"] = p.into();
        }
        if self.pooler_act != "tanh" {
            v["pooler_act"] = self.pooler_act.clone().into();
        }
        v
    }
}

// ---------------------------------------------------------------------------------------------
// Embeddings
// ---------------------------------------------------------------------------------------------

/// `embeddings.patch_embeddings`: a `patch × patch` convolution with stride `patch`.
#[derive(Module, Debug)]
pub struct PatchEmbeddings {
    /// `projection`: `Conv2d(C, D, kernel = stride = patch)`.
    pub projection: Conv2d,
}

impl PatchEmbeddings {
    /// New patch embedding with the given initializer.
    pub fn new(
        channels: usize,
        hidden: usize,
        patch: usize,
        init: &Initializer,
        device: &Device,
    ) -> Self {
        let projection = Conv2dConfig::new([channels, hidden], [patch, patch])
            .with_stride([patch, patch])
            .with_initializer(init.clone())
            .init(device);
        Self { projection }
    }

    /// `[N, C, H, W]` → patch tokens `[N, h·w, D]` (row-major over the `h × w` grid, as
    /// `flatten(2).transpose(1, 2)`) and the grid `[h, w]`. Pixels beyond the last full patch
    /// are dropped, as torch's convolution does. The pixels are cast to the projection's dtype
    /// (transformers: `pixel_values.to(dtype=target_dtype)`); the tokens come out in it.
    pub fn forward(&self, pixel_values: Tensor<4>) -> (Tensor<3>, [usize; 2]) {
        let pixel_values = to_dtype(pixel_values, self.projection.weight.dtype());
        let [_, c, _, _] = pixel_values.dims();
        let expected = self.projection.weight.dims()[1];
        assert_eq!(
            c, expected,
            "pixel_values has {c} channels, the patch embedding expects {expected}"
        );
        let x = self.projection.forward(pixel_values); // [N, D, h, w]
        let [n, d, h, w] = x.dims();
        (x.reshape([n, d, h * w]).swap_dims(1, 2), [h, w])
    }
}

/// `embeddings` of `ViTModel` / `ViTMAEModel`: CLS token, patch embedding, learned (ViT) or
/// fixed sin-cos (ViT-MAE, stored in the checkpoint) position embeddings.
#[derive(Module, Debug)]
pub struct ViTEmbeddings {
    /// `cls_token`: `[1, 1, D]`.
    pub cls_token: Param<Tensor<3>>,
    /// `position_embeddings`: `[1, 1 + Gh·Gw, D]` for the configured grid.
    pub position_embeddings: Param<Tensor<3>>,
    /// `patch_embeddings.projection`.
    pub patch_embeddings: PatchEmbeddings,
    /// The configured position grid `[Gh, Gw]`.
    #[module(skip)]
    pub grid: [usize; 2],
}

impl ViTEmbeddings {
    /// New embeddings for `image_size / patch` grids.
    pub fn new(
        channels: usize,
        hidden: usize,
        image_size: [usize; 2],
        patch: usize,
        init: &Initializer,
        device: &Device,
    ) -> Self {
        let grid = [image_size[0] / patch, image_size[1] / patch];
        Self {
            cls_token: init.init([1, 1, hidden], device),
            position_embeddings: init.init([1, 1 + grid[0] * grid[1], hidden], device),
            patch_embeddings: PatchEmbeddings::new(channels, hidden, patch, init, device),
            grid,
        }
    }

    /// Position embeddings for a `[h, w]` patch grid, `[1, 1 + h·w, D]`. The configured grid is
    /// returned as is; any other grid gets the patch part resampled bicubically
    /// (transformers' `interpolate_pos_encoding`, `size=(h, w)`, `align_corners=False`).
    pub fn position_embeddings_for(&self, hw: [usize; 2]) -> Tensor<3> {
        let pos = self.position_embeddings.val();
        if hw == self.grid {
            return pos;
        }
        let [_, t, d] = pos.dims();
        let cls = pos.clone().slice([0..1, 0..1, 0..d]);
        let patches = pos.slice([0..1, 1..t, 0..d]);
        let patches = interpolate_pos_grid(patches, self.grid, hw, false);
        Tensor::cat(vec![cls, patches], 1)
    }

    /// `[N, C, H, W]` → `[N, 1 + h·w, D]`: `[CLS; patches] + position embeddings`.
    pub fn forward(&self, pixel_values: Tensor<4>) -> Tensor<3> {
        let (patches, hw) = self.patch_embeddings.forward(pixel_values);
        let [n, _, d] = patches.dims();
        let cls = self.cls_token.val().expand([n, 1, d]);
        let x = Tensor::cat(vec![cls, patches], 1);
        x + self.position_embeddings_for(hw)
    }
}

// ---------------------------------------------------------------------------------------------
// Encoder
// ---------------------------------------------------------------------------------------------

/// Sizes of one ViT block.
#[derive(Debug, Clone, Copy)]
pub struct ViTBlockSpec {
    /// Width `D`.
    pub hidden_size: usize,
    /// Heads `H`.
    pub num_heads: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// MLP activation.
    pub act: Activation,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Bias on query/key/value.
    pub qkv_bias: bool,
}

/// `attention.attention`: the query/key/value projections.
#[derive(Module, Debug)]
pub struct ViTSelfAttention {
    /// `query`: `D → D`.
    pub query: Linear,
    /// `key`: `D → D`.
    pub key: Linear,
    /// `value`: `D → D`.
    pub value: Linear,
    /// Number of heads.
    #[module(skip)]
    pub num_heads: usize,
}

impl ViTSelfAttention {
    /// New projections.
    pub fn new(spec: &ViTBlockSpec, init: &Initializer, device: &Device) -> Self {
        let d = spec.hidden_size;
        Self {
            query: linear(d, d, spec.qkv_bias, init, device),
            key: linear(d, d, spec.qkv_bias, init, device),
            value: linear(d, d, spec.qkv_bias, init, device),
            num_heads: spec.num_heads,
        }
    }

    /// `[N, T, D]` → context `[N, T, D]` (before `attention.output.dense`) and, when
    /// `need_probs`, the probabilities `[N, H, T, T]`.
    pub fn forward(&self, x: Tensor<3>, need_probs: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let q = self.query.forward(x.clone());
        let k = self.key.forward(x.clone());
        let v = self.value.forward(x);
        multi_head_attention(
            q,
            k,
            v,
            self.num_heads,
            &AttentionMask::None,
            None,
            need_probs,
        )
    }
}

/// A module with a single `dense` linear layer (`attention.output`, `output`, `pooler`).
#[derive(Module, Debug)]
pub struct Dense {
    /// `dense`.
    pub dense: Linear,
}

/// `attention`: self-attention and its output projection.
#[derive(Module, Debug)]
pub struct ViTAttention {
    /// `attention.attention`.
    pub attention: ViTSelfAttention,
    /// `attention.output.dense`: `D → D`.
    pub output: Dense,
}

impl ViTAttention {
    /// The query, key, value and output projections as plain tensors ([`crate::linearize`]).
    pub(crate) fn projection_parts(&self) -> [LinearParts; 4] {
        let a = &self.attention;
        [&a.query, &a.key, &a.value, &self.output.dense].map(LinearParts::new)
    }

    /// New self-attention with output projection (`D → D` each).
    pub fn new(spec: &ViTBlockSpec, init: &Initializer, device: &Device) -> Self {
        let d = spec.hidden_size;
        Self {
            attention: ViTSelfAttention::new(spec, init, device),
            output: Dense {
                dense: linear(d, d, true, init, device),
            },
        }
    }

    /// `[N, T, D]` → `output.dense(attention(x))`, `[N, T, D]`, with the probabilities
    /// `[N, H, T, T]` when `need_probs`.
    pub fn forward(&self, x: Tensor<3>, need_probs: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let (ctx, probs) = self.attention.forward(x, need_probs);
        (self.output.dense.forward(ctx), probs)
    }
}

/// `intermediate`: `dense` (`D → intermediate`) then the activation.
#[derive(Module, Debug)]
pub struct ViTIntermediate {
    /// `dense`.
    pub dense: Linear,
    /// `hidden_act`.
    #[module(skip)]
    pub act: Activation,
}

/// One pre-norm ViT block (`ViTLayer`):
/// `x = x + attn(layernorm_before(x))`, `x = x + output.dense(act(intermediate.dense(layernorm_after(x))))`.
#[derive(Module, Debug)]
pub struct ViTLayer {
    /// `attention`.
    pub attention: ViTAttention,
    /// `intermediate`.
    pub intermediate: ViTIntermediate,
    /// `output.dense`: `intermediate → D`.
    pub output: Dense,
    /// `layernorm_before`.
    pub layernorm_before: LayerNorm,
    /// `layernorm_after`.
    pub layernorm_after: LayerNorm,
}

impl ViTLayer {
    /// New block.
    pub fn new(spec: &ViTBlockSpec, init: &Initializer, device: &Device) -> Self {
        let d = spec.hidden_size;
        let ln = || {
            LayerNormConfig::new(d)
                .with_epsilon(spec.layer_norm_eps)
                .init(device)
        };
        Self {
            attention: ViTAttention::new(spec, init, device),
            intermediate: ViTIntermediate {
                dense: linear(d, spec.intermediate_size, true, init, device),
                act: spec.act,
            },
            output: Dense {
                dense: linear(spec.intermediate_size, d, true, init, device),
            },
            layernorm_before: ln(),
            layernorm_after: ln(),
        }
    }

    /// `[N, T, D]` → `[N, T, D]`, with the attention probabilities `[N, H, T, T]` when asked.
    pub fn forward(&self, x: Tensor<3>, need_probs: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let (a, probs) = self
            .attention
            .forward(self.layernorm_before.forward(x.clone()), need_probs);
        let x = a + x;
        let h = self.intermediate.act.forward(
            self.intermediate
                .dense
                .forward(self.layernorm_after.forward(x.clone())),
        );
        (self.output.dense.forward(h) + x, probs)
    }
}

/// `encoder`: the stack of blocks.
#[derive(Module, Debug)]
pub struct ViTEncoder {
    /// `layer.N`.
    pub layer: Vec<ViTLayer>,
}

impl ViTEncoder {
    /// `num_layers` new blocks.
    pub fn new(
        num_layers: usize,
        spec: &ViTBlockSpec,
        init: &Initializer,
        device: &Device,
    ) -> Self {
        Self {
            layer: (0..num_layers)
                .map(|_| ViTLayer::new(spec, init, device))
                .collect(),
        }
    }

    /// Runs every block on the embeddings output `x: [N, T, D]`.
    pub fn forward(
        &self,
        x: Tensor<3>,
        opts: ForwardOptions,
    ) -> (Tensor<3>, Option<Vec<Tensor<3>>>, Option<Vec<Tensor<4>>>) {
        run_stack(&self.layer, x, opts, |l, x, p| l.forward(x, p))
    }
}

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------

/// `ViTPooler`: `act(dense(CLS))`.
#[derive(Module, Debug)]
pub struct ViTPooler {
    /// `pooler.dense`: `D → pooler_output_size`.
    pub dense: Linear,
    /// `pooler_act` (tanh).
    #[module(skip)]
    pub act: Activation,
}

/// transformers' `ViTModel`.
#[derive(Module, Debug)]
pub struct ViTModel {
    /// `embeddings`.
    pub embeddings: ViTEmbeddings,
    /// `encoder`.
    pub encoder: ViTEncoder,
    /// `layernorm`: the final norm.
    pub layernorm: LayerNorm,
    /// `pooler`, when the checkpoint has one.
    pub pooler: Option<ViTPooler>,
    /// The config the model was built from.
    #[module(skip)]
    pub config: ViTConfig,
}

impl ViTModel {
    /// Builds the module tree for `config` with parameters drawn from `init`.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for an unknown activation or inconsistent sizes.
    pub fn new(
        config: &ViTConfig,
        with_pooler: bool,
        init: &Initializer,
        device: &Device,
        file: &str,
    ) -> Result<Self, ModelError> {
        let (encoder, layernorm) = config.encoder_and_norm(init, device, file)?;
        let pooler = if with_pooler {
            let out = config.pooler_output_size.unwrap_or(config.hidden_size);
            Some(ViTPooler {
                dense: linear(config.hidden_size, out, true, init, device),
                act: Activation::parse(&config.pooler_act, "pooler_act", Path::new(file))?,
            })
        } else {
            None
        };
        Ok(Self {
            embeddings: ViTEmbeddings::new(
                config.num_channels,
                config.hidden_size,
                config.image_size,
                config.patch_size,
                init,
                device,
            ),
            encoder,
            layernorm,
            pooler,
            config: config.clone(),
        })
    }

    /// A randomly initialized model (normal, std 0.02, as transformers' `initializer_range`),
    /// with a pooler; for benchmarks and tests.
    ///
    /// # Errors
    /// As [`ViTModel::new`].
    pub fn init_random(config: &ViTConfig, device: &Device) -> Result<Self, ModelError> {
        Self::new(
            config,
            true,
            &Initializer::Normal {
                mean: 0.0,
                std: 0.02,
            },
            device,
            "<config>",
        )
    }

    /// A random initialisation with its seed and initializer explicit: the module for `config`
    /// with a pooler, built with `init` (which sets the rank-1 parameters: every bias from
    /// `init`; LayerNorm γ = 1, β = 0), then every parameter of rank ≥ 2 (patch projection, CLS
    /// token, position embeddings, every Linear weight) redrawn normal(0, `std`) in module order
    /// after `device.seed(seed)` ([`crate::randomize`]).
    ///
    /// With a deterministic `init` (`Zeros`, `Constant`) the model is a function of
    /// `(config, std, seed)` and the device's RNG. A random `init` (what the random-init
    /// studies pass: `Normal(0, 0.02)`, as [`ViTModel::init_random`]) is lazy in burn: each
    /// bias is drawn from the seeded stream when first used (read, saved), so the same
    /// sequence of calls — build, then save — gives the same biases, but a random draw in
    /// between changes them.
    ///
    /// # Errors
    /// As [`ViTModel::new`].
    pub fn init_seeded(
        config: &ViTConfig,
        init: &Initializer,
        std: f64,
        seed: u64,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let model = Self::new(config, true, init, device, "<config>")?;
        Ok(crate::randomize(model, std, seed))
    }

    /// Saves the weights as a Hugging Face `model.safetensors` ([`save_hf`]): what
    /// [`ViTModel::load`] (with [`ViTConfig::to_hf_json`] as `config.json`) and transformers'
    /// `ViTModel.from_pretrained` read back.
    ///
    /// # Errors
    /// As [`save_hf`].
    pub fn save_hf(&self, path: &Path) -> Result<(), burn::store::SafetensorsStoreError> {
        save_hf(self, path)
    }

    /// Loads a `ViTModel` (or the `vit.` backbone of a `ViTForImageClassification`) strictly.
    ///
    /// Besides `opts`, the loader strips a `vit.` prefix when the checkpoint has one, then ignores
    /// `classifier.*` (the classification head) and `*.position_ids` buffers. The pooler is built
    /// when `pooler.dense.weight` is present.
    ///
    /// # Errors
    /// [`ModelError::Checkpoint`] for a bad `config.json`, [`ModelError::Unsupported`] for an
    /// unsupported setting, [`ModelError::Load`] listing every missing / unexpected key and
    /// every shape mismatch (with the model's and the file's shapes).
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        let config: ViTConfig = ckpt.read_config()?;
        let shapes = checkpoint_shapes(ckpt)?;
        let mut opts = opts.clone();
        let prefixed = !shapes.contains_key("embeddings.cls_token")
            && shapes.contains_key("vit.embeddings.cls_token");
        if prefixed {
            opts.remap.push(("^vit\\.".into(), String::new()));
            opts.benign_unused.push("^classifier\\.".into());
        }
        opts.benign_unused.push("(^|\\.)position_ids$".into());
        let with_pooler = shapes.contains_key(if prefixed {
            "vit.pooler.dense.weight"
        } else {
            "pooler.dense.weight"
        });
        let model = Self::new(
            &config,
            with_pooler,
            &Initializer::Zeros,
            device,
            &ckpt.config.display().to_string(),
        )?;
        Ok(load_strict(model, &ckpt.weights, &opts)?)
    }

    /// Full forward pass.
    ///
    /// # Shapes
    /// `pixel_values: [N, C, H, W]` (any size ≥ one patch; position embeddings are resampled
    /// for sizes other than the configured one — transformers requires
    /// `interpolate_pos_encoding=True` for that) → `last_hidden_state: [N, 1 + h·w, D]`
    /// (after the final layernorm), `pooler_output: [N, D']` (`tanh(dense(CLS))`; without a
    /// pooler in the checkpoint, the CLS token of `last_hidden_state`), `hidden_states`:
    /// `L + 1` tensors `[N, T, D]` (before the final layernorm, as transformers), `attentions`:
    /// `L` tensors `[N, H, T, T]`. Computed in the weights' dtype, returned in f32.
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        let x = self.embeddings.forward(pixel_values);
        let (x, hidden_states, attentions) = self.encoder.forward(x, opts);
        let last_hidden_state = self.layernorm.forward(x);
        let pooler_output = self.pool(last_hidden_state.clone());
        EncoderOutput {
            last_hidden_state,
            pooler_output,
            hidden_states,
            attentions,
        }
        .into_f32()
    }

    /// The pooler on a normalized sequence, or its CLS token when there is no pooler.
    fn pool(&self, normed: Tensor<3>) -> Tensor<2> {
        let cls = token(normed, 0);
        match &self.pooler {
            Some(p) => p.act.forward(p.dense.forward(cls)),
            None => cls,
        }
    }
}

/// The parts of a network in ViT's layout (`embeddings.patch_embeddings`, `encoder.layer.N`,
/// `layernorm`: ViT, ViT-MAE, I-JEPA) that [`linearize_vit_layout`] reads.
pub(crate) struct VitLayout<'a> {
    pub patch: &'a PatchEmbeddings,
    pub prefix: usize,
    pub encoder: &'a ViTEncoder,
    pub layernorm: &'a LayerNorm,
    pub eps: f64,
}

/// [`crate::VisionEncoder::linearize`] of a network in ViT's layout, from the model's own
/// embedding of the input (`embed`, called once the dtype is known to be f32; dims
/// `pixel_values`) and the readout `pool` after the final layernorm; `None` for weights in
/// another dtype than f32.
pub(crate) fn linearize_vit_layout(
    m: VitLayout<'_>,
    pool: Pool,
    pixel_values: [usize; 4],
    embed: impl FnOnce() -> Tensor<3>,
    outputs: Outputs,
) -> Option<Linearization> {
    if m.layernorm.gamma.dtype() != burn::tensor::DType::F32 {
        return None;
    }
    let norm = |n: &LayerNorm| NormParts::new(n, m.eps);
    let blocks = m
        .encoder
        .layer
        .iter()
        .map(|l| {
            let [query, key, value, output] = l.attention.projection_parts();
            BlockParts {
                norm1: norm(&l.layernorm_before),
                query,
                key,
                value,
                output,
                num_heads: l.attention.attention.num_heads,
                attn_bias: None,
                layer_scale1: None,
                norm2: norm(&l.layernorm_after),
                fc1: LinearParts::new(&l.intermediate.dense),
                act: l.intermediate.act,
                fc2: LinearParts::new(&l.output.dense),
                layer_scale2: None,
            }
        })
        .collect();
    let parts = VitParts {
        patch_weight: m.patch.projection.weight.val().without_autodiff(),
        prefix: m.prefix,
        pre_norm: None,
        blocks,
        head: HeadParts {
            norm: Some(norm(m.layernorm)),
            pool,
            map: None,
            pooled_norm: None,
            projection: None,
        },
    };
    parts.linearize(pixel_values, embed(), outputs)
}

/// Saves any module of this crate (ViT, DINOv2, …) as a safetensors file in the Hugging Face
/// layout, through burn-store's `BurnToPyTorchAdapter`: key names are the module paths (the
/// Hub's, since the modules are named as in transformers), Linear weights are transposed back
/// to torch's `[out, in]`, LayerNorm `gamma` / `beta` become `weight` / `bias`. The tensors are
/// stored in the module's float type; the header's metadata order (hence the file's sha256) is
/// not fixed.
///
/// # Errors
/// burn-store's error when `path` cannot be written.
pub fn save_hf<M: burn::module::Module>(
    module: &M,
    path: &Path,
) -> Result<(), burn::store::SafetensorsStoreError> {
    use burn::store::{BurnToPyTorchAdapter, ModuleSnapshot, SafetensorsStore};
    let mut store = SafetensorsStore::from_file(path).with_to_adapter(BurnToPyTorchAdapter);
    module.save_into(&mut store)
}

impl VisionEncoder for ViTModel {
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.forward(pixel_values, opts)
    }

    fn num_prefix_tokens(&self) -> usize {
        1
    }

    /// Final layernorm, then: `Pooled` = pooler output (CLS when the checkpoint has no pooler),
    /// `Summary` = CLS, `MeanPatch` = mean of the patch tokens.
    fn readout(&self, hidden: Tensor<3>, readout: VisionReadout) -> Tensor<2> {
        let hidden = to_dtype(hidden, self.layernorm.gamma.dtype());
        let normed = self.layernorm.forward(hidden);
        to_f32(match readout {
            VisionReadout::Pooled => self.pool(normed),
            VisionReadout::Summary => token(normed, 0),
            VisionReadout::MeanPatch => mean_patch(normed, 1),
        })
    }

    /// f32 weights; `Pooled` only without a pooler (its `dense` + tanh head is not written out).
    fn linearize(
        &self,
        pixel_values: Tensor<4>,
        readout: VisionReadout,
        outputs: Outputs,
    ) -> Option<Linearization> {
        let pool = match readout {
            VisionReadout::Pooled if self.pooler.is_some() => return None,
            VisionReadout::Pooled | VisionReadout::Summary => Pool::Token(0),
            VisionReadout::MeanPatch => Pool::MeanPatch { prefix: 1 },
        };
        let dims = pixel_values.dims();
        let embed = || self.embeddings.forward(pixel_values.detach());
        linearize_vit_layout(
            VitLayout {
                patch: &self.embeddings.patch_embeddings,
                prefix: 1,
                encoder: &self.encoder,
                layernorm: &self.layernorm,
                eps: self.config.layer_norm_eps,
            },
            pool,
            dims,
            embed,
            outputs,
        )
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            model_type: MODEL_TYPE.into(),
            dtype: bindscope_core::load::dtype_name(self.layernorm.gamma.dtype()),
            hidden_size: c.hidden_size,
            embed_dim: self
                .pooler
                .as_ref()
                .map_or(c.hidden_size, |p| p.dense.weight.dims()[1]),
            num_layers: c.num_hidden_layers,
            num_heads: c.num_attention_heads,
            num_params: self.num_params(),
            input_size: c.image_size,
            patch_size: c.patch_size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A 2-block ViT of width 8 on 8 × 8 images (4 × 4 patches, so 1 + 4 tokens).
    fn tiny() -> ViTConfig {
        ViTConfig {
            hidden_size: 8,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            intermediate_size: 16,
            image_size: [8, 8],
            patch_size: 4,
            ..ViTConfig::vit_b16()
        }
    }

    #[test]
    fn vit_b16_preset_is_the_transformers_default_config() {
        // The `config.json` `--random-init vit-b16` has always written (transformers'
        // `ViTConfig()` defaults).
        let want: serde_json::Value = serde_json::from_str(
            r#"{
  "architectures": ["ViTModel"],
  "model_type": "vit",
  "hidden_size": 768,
  "num_hidden_layers": 12,
  "num_attention_heads": 12,
  "intermediate_size": 3072,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.0,
  "attention_probs_dropout_prob": 0.0,
  "initializer_range": 0.02,
  "layer_norm_eps": 1e-12,
  "image_size": 224,
  "patch_size": 16,
  "num_channels": 3,
  "qkv_bias": true
}"#,
        )
        .unwrap();
        assert_eq!(ViTConfig::vit_b16().to_hf_json(), want);
        let back: ViTConfig = serde_json::from_value(want.clone()).unwrap();
        assert_eq!(
            back.to_hf_json(),
            want,
            "the export reads back to the same config"
        );
        let wide = ViTConfig {
            image_size: [8, 12],
            pooler_output_size: Some(4),
            ..tiny()
        };
        let v = wide.to_hf_json();
        assert_eq!(v["image_size"], serde_json::json!([8, 12]));
        assert_eq!(v["pooler_output_size"], 4);
        let back: ViTConfig = serde_json::from_value(v).unwrap();
        assert_eq!(back.image_size, [8, 12]);
    }

    /// The HF export has the Hub's key names and torch's shapes, and loads back into the same
    /// model (same forward output); a seed reproduces every tensor when the initializer is
    /// deterministic.
    #[test]
    fn hf_export_has_hub_key_names_and_shapes_and_loads_back() {
        let device = Device::flex();
        let cfg = tiny();
        let dir = std::env::temp_dir().join(format!("bindscope-vit-export-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let model = ViTModel::init_seeded(&cfg, &Initializer::Zeros, 0.02, 7, &device).unwrap();
        let weights = dir.join("model.safetensors");
        model.save_hf(&weights).unwrap();
        std::fs::write(dir.join("config.json"), cfg.to_hf_json().to_string()).unwrap();

        let bytes = std::fs::read(&weights).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let got: BTreeMap<String, Vec<usize>> = st
            .tensors()
            .into_iter()
            .map(|(k, v)| (k, v.shape().to_vec()))
            .collect();
        let mut want: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut put = |k: &str, s: &[usize]| want.insert(k.to_string(), s.to_vec());
        put("embeddings.cls_token", &[1, 1, 8]);
        put("embeddings.position_embeddings", &[1, 5, 8]);
        put(
            "embeddings.patch_embeddings.projection.weight",
            &[8, 3, 4, 4],
        );
        put("embeddings.patch_embeddings.projection.bias", &[8]);
        for l in 0..2 {
            let p = format!("encoder.layer.{l}");
            for q in ["query", "key", "value"] {
                put(&format!("{p}.attention.attention.{q}.weight"), &[8, 8]);
                put(&format!("{p}.attention.attention.{q}.bias"), &[8]);
            }
            put(&format!("{p}.attention.output.dense.weight"), &[8, 8]);
            put(&format!("{p}.attention.output.dense.bias"), &[8]);
            put(&format!("{p}.intermediate.dense.weight"), &[16, 8]);
            put(&format!("{p}.intermediate.dense.bias"), &[16]);
            put(&format!("{p}.output.dense.weight"), &[8, 16]);
            put(&format!("{p}.output.dense.bias"), &[8]);
            for n in ["layernorm_before", "layernorm_after"] {
                put(&format!("{p}.{n}.weight"), &[8]);
                put(&format!("{p}.{n}.bias"), &[8]);
            }
        }
        put("layernorm.weight", &[8]);
        put("layernorm.bias", &[8]);
        put("pooler.dense.weight", &[8, 8]);
        put("pooler.dense.bias", &[8]);
        assert_eq!(got, want);

        let ckpt = Checkpoint::resolve(dir.to_str().unwrap()).unwrap();
        let back = ViTModel::load(&ckpt, &device, &LoadOptions::default()).unwrap();
        let x = Tensor::<4>::random(
            [2, 3, 8, 8],
            burn::tensor::Distribution::Normal(0.0, 1.0),
            &device,
        );
        let a = model.forward(x.clone(), ForwardOptions::default());
        let b = back.forward(x, ForwardOptions::default());
        assert_eq!(
            a.pooler_output.into_data().try_to_vec::<f32>().unwrap(),
            b.pooler_output.into_data().try_to_vec::<f32>().unwrap()
        );

        let again = ViTModel::init_seeded(&cfg, &Initializer::Zeros, 0.02, 7, &device).unwrap();
        let other = ViTModel::init_seeded(&cfg, &Initializer::Zeros, 0.02, 8, &device).unwrap();
        let q = |m: &ViTModel| {
            m.encoder.layer[1]
                .attention
                .attention
                .query
                .weight
                .val()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap()
        };
        assert_eq!(q(&model), q(&again), "one seed, one model");
        assert_ne!(q(&model), q(&other));

        // A random initializer is lazy: the biases are drawn from the seeded stream when first
        // used, so the same sequence of calls gives the same biases.
        let normal = Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        };
        let bias = |m: &ViTModel| {
            let b = m.encoder.layer[0].attention.attention.query.bias.as_ref();
            b.unwrap().val().into_data().try_to_vec::<f32>().unwrap()
        };
        let a = ViTModel::init_seeded(&cfg, &normal, 0.02, 7, &device).unwrap();
        let bias_a = bias(&a);
        let b = ViTModel::init_seeded(&cfg, &normal, 0.02, 7, &device).unwrap();
        assert_eq!(bias_a, bias(&b));
        assert!(bias_a.iter().any(|v| *v != 0.0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
