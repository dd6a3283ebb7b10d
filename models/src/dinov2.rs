//! # DINOv2 — `Dinov2Model` and `Dinov2WithRegistersModel`
//!
//! Oquab et al., *DINOv2: Learning Robust Visual Features without Supervision*
//! (<https://arxiv.org/abs/2304.07193>), and Darcet et al., *Vision Transformers Need Registers*
//! (<https://arxiv.org/abs/2309.16588>), as transformers implements them in `Dinov2Model`
//! (`model_type: "dinov2"`, e.g. `facebook/dinov2-small`) and `Dinov2WithRegistersModel`
//! (`model_type: "dinov2_with_registers"`, e.g. `facebook/dinov2-with-registers-small`).
//!
//! Architecture: ViT patch embedding, CLS token, learned position embeddings for the
//! configured grid (37×37 at 518 px for the Hub checkpoints) that are always resampled
//! bicubically to the input's grid, optional register tokens inserted after CLS (after the
//! position embeddings were added: registers carry none), then `L` pre-norm blocks with layer
//! scale: `x + λ₁·attn(norm1(x))`, `x + λ₂·mlp(norm2(x))`, where the MLP is `fc2(gelu(fc1))` or
//! SwiGLU (`use_swiglu_ffn`, the giant models). `pooler_output` is the CLS token after the
//! final `layernorm`.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bindscope_core::{Checkpoint, LoadOptions};
//! use bindscope_models::{ForwardOptions, dinov2::Dinov2Model};
//! let device = burn::tensor::Device::flex();
//! let ckpt = Checkpoint::resolve("facebook/dinov2-small")?;
//! let model = Dinov2Model::load(&ckpt, &device, &LoadOptions::default())?;
//! let pixels = burn::tensor::Tensor::<4>::zeros([1, 3, 224, 224], &device);
//! let out = model.forward(pixels, ForwardOptions::default());
//! assert_eq!(out.last_hidden_state.dims(), [1, 1 + 16 * 16, 384]);
//! # Ok(()) }
//! ```
//!
//! ## Position interpolation
//! Exactly transformers 4.x `interpolate_pos_encoding`: `interpolate(size=(H/p, W/p),
//! mode="bicubic", align_corners=False)` on the patch part of the position embeddings, in f32,
//! skipped when the grid is the configured one. `Dinov2Model` calls it without antialiasing
//! (Keys cubic, `A = -0.75`); `Dinov2WithRegistersModel` passes `antialias=True` (PIL-style
//! cubic, `A = -0.5`, widened support when shrinking). Both go through
//! [`crate::nn::interpolate_pos_grid`] (burn's bicubic `interpolate`, and
//! [`crate::nn::bicubic_aa_weights`] for the antialiased kernel burn lacks). Known gap: torch's antialiased kernel gives different results when the
//! output grid is exactly one patch wide (`W < 2p` for a taller image) — a degenerate input.
//!
//! ## Keys
//! The Hub / transformers 4.x names: `embeddings.{cls_token,mask_token,position_embeddings,
//! register_tokens,patch_embeddings.projection}`, `encoder.layer.N.{norm1,
//! attention.attention.{query,key,value},attention.output.dense,layer_scale1.lambda1,norm2,
//! mlp.{fc1,fc2} | mlp.{weights_in,weights_out},layer_scale2.lambda1}`, `layernorm`.
//! `embeddings.mask_token` (used only for masked-image pre-training) is accepted and ignored.
//! Checkpoints of the `…ForImageClassification` classes (`dinov2.` /
//! `dinov2_with_registers.` prefix, `classifier.*` head) load with the prefix stripped and the
//! head ignored.

use bindscope_core::{Checkpoint, LoadOptions, load_strict};
use burn::module::Param;
use burn::nn::{Initializer, LayerNorm, LayerNormConfig, Linear};
use burn::prelude::*;
use burn::tensor::activation::silu;
use serde::Deserialize;
use std::path::Path;

/// `model_type` of a `Dinov2Model` checkpoint.
pub const MODEL_TYPE: &str = "dinov2";
/// `model_type` of a `Dinov2WithRegistersModel` checkpoint.
pub const WITH_REGISTERS_MODEL_TYPE: &str = "dinov2_with_registers";
/// Every `model_type` this file loads.
pub const MODEL_TYPES: &[&str] = &[MODEL_TYPE, WITH_REGISTERS_MODEL_TYPE];

use crate::linearize::{
    BlockParts, HeadParts, LinearParts, Linearization, NormParts, Outputs, Pool, VitParts,
};
use crate::nn::{
    Activation, check_sizes, checkpoint_shapes, de_image_size, interpolate_pos_grid, linear,
    mean_patch, run_stack, to_dtype, to_f32, token,
};
use crate::vit::{PatchEmbeddings, ViTAttention, ViTBlockSpec};
use crate::{EncoderOutput, ForwardOptions, ModelError, ModelInfo, VisionEncoder, VisionReadout};

/// `config.json` of `Dinov2Model` / `Dinov2WithRegistersModel` (`Dinov2Config`,
/// `Dinov2WithRegistersConfig`); missing fields take the transformers defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Dinov2Config {
    /// `"dinov2"` or `"dinov2_with_registers"`.
    pub model_type: String,
    /// Width `D`.
    pub hidden_size: usize,
    /// Number of blocks `L`.
    pub num_hidden_layers: usize,
    /// Number of heads `H`.
    pub num_attention_heads: usize,
    /// MLP width = `int(hidden_size · mlp_ratio)`.
    pub mlp_ratio: f64,
    /// MLP activation (`gelu` = exact erf GELU; unused by SwiGLU).
    pub hidden_act: String,
    /// Epsilon of every LayerNorm.
    pub layer_norm_eps: f64,
    /// Configured input size `[H, W]`: the position grid is `image_size / patch_size`.
    #[serde(deserialize_with = "de_image_size")]
    pub image_size: [usize; 2],
    /// Patch side; `None` = the class default (14 for `dinov2`, 16 for
    /// `dinov2_with_registers`). See [`Dinov2Config::patch`].
    pub patch_size: Option<usize>,
    /// Input channels.
    pub num_channels: usize,
    /// Bias on query/key/value.
    pub qkv_bias: bool,
    /// Initial layer-scale value (only used by [`Dinov2Model::init_random`]).
    pub layerscale_value: f64,
    /// SwiGLU feed-forward instead of the GELU MLP.
    pub use_swiglu_ffn: bool,
    /// Register tokens of `dinov2_with_registers` (`None` = 4); ignored for `dinov2`, whose
    /// class has none. See [`Dinov2Config::registers`].
    pub num_register_tokens: Option<usize>,
}

impl Default for Dinov2Config {
    fn default() -> Self {
        Self {
            model_type: MODEL_TYPE.into(),
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            mlp_ratio: 4.0,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-6,
            image_size: [224, 224],
            patch_size: None,
            num_channels: 3,
            qkv_bias: true,
            layerscale_value: 1.0,
            use_swiglu_ffn: false,
            num_register_tokens: None,
        }
    }
}

impl Dinov2Config {
    fn with_registers(&self) -> bool {
        self.model_type == WITH_REGISTERS_MODEL_TYPE
    }

    /// The patch side, with the class default.
    pub fn patch(&self) -> usize {
        self.patch_size
            .unwrap_or(if self.with_registers() { 16 } else { 14 })
    }

    /// Number of register tokens (0 for `dinov2`).
    pub fn registers(&self) -> usize {
        if self.with_registers() {
            self.num_register_tokens.unwrap_or(4)
        } else {
            0
        }
    }

    /// Width of the feed-forward hidden layer: `int(D · mlp_ratio)`, and for SwiGLU
    /// `(int(that · 2/3) + 7) / 8 · 8`, as `Dinov2SwiGLUFFN`.
    pub fn ffn_hidden(&self) -> usize {
        let h = (self.hidden_size as f64 * self.mlp_ratio) as usize;
        if self.use_swiglu_ffn {
            ((h as f64 * 2.0 / 3.0) as usize).div_ceil(8) * 8
        } else {
            h
        }
    }
}

/// `embeddings` of DINOv2: CLS, optional registers, patch embedding and resampled position
/// embeddings.
#[derive(Module, Debug)]
pub struct Dinov2Embeddings {
    /// `cls_token`: `[1, 1, D]`.
    pub cls_token: Param<Tensor<3>>,
    /// `position_embeddings`: `[1, 1 + Gh·Gw, D]`.
    pub position_embeddings: Param<Tensor<3>>,
    /// `register_tokens`: `[1, R, D]` (`dinov2_with_registers` only).
    pub register_tokens: Option<Param<Tensor<3>>>,
    /// `patch_embeddings.projection`.
    pub patch_embeddings: PatchEmbeddings,
    /// Configured grid `[Gh, Gw]`.
    #[module(skip)]
    pub grid: [usize; 2],
    /// Whether the position resampling is antialiased (`dinov2_with_registers`).
    #[module(skip)]
    pub antialias: bool,
}

impl Dinov2Embeddings {
    /// Position embeddings for a `[h, w]` patch grid: `[1, 1 + h·w, D]`.
    pub fn position_embeddings_for(&self, hw: [usize; 2]) -> Tensor<3> {
        let pos = self.position_embeddings.val();
        if hw == self.grid {
            return pos;
        }
        let [_, t, d] = pos.dims();
        let cls = pos.clone().slice([0..1, 0..1, 0..d]);
        let patches =
            interpolate_pos_grid(pos.slice([0..1, 1..t, 0..d]), self.grid, hw, self.antialias);
        Tensor::cat(vec![cls, patches], 1)
    }

    /// `[N, C, H, W]` → `[N, 1 + R + h·w, D]`: `[CLS; patches] + pos`, registers inserted after CLS.
    pub fn forward(&self, pixel_values: Tensor<4>) -> Tensor<3> {
        let (patches, hw) = self.patch_embeddings.forward(pixel_values);
        let [n, p, d] = patches.dims();
        let cls = self.cls_token.val().expand([n, 1, d]);
        let x = Tensor::cat(vec![cls, patches], 1) + self.position_embeddings_for(hw);
        match &self.register_tokens {
            None => x,
            Some(r) => {
                let r = r.val();
                let nr = r.dims()[1];
                let cls = x.clone().slice([0..n, 0..1, 0..d]);
                let rest = x.slice([0..n, 1..1 + p, 0..d]);
                Tensor::cat(vec![cls, r.expand([n, nr, d]), rest], 1)
            }
        }
    }
}

/// `layer_scaleK`: multiplies by a learned per-channel `lambda1: [D]`.
#[derive(Module, Debug)]
pub struct LayerScale {
    /// `lambda1`: `[D]`.
    pub lambda1: Param<Tensor<1>>,
}

impl LayerScale {
    /// `[N, T, D]` → `[N, T, D]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let l = self.lambda1.val();
        let d = l.dims()[0];
        x * l.reshape([1, 1, d])
    }
}

/// `mlp`: `fc2(act(fc1(x)))` (`Dinov2MLP`) or, with `use_swiglu_ffn`,
/// `weights_out(silu(a) · b)` with `[a, b] = weights_in(x)` (`Dinov2SwiGLUFFN`). Exactly one pair
/// of layers is present.
#[derive(Module, Debug)]
pub struct Dinov2Mlp {
    /// `fc1`: `D → F`.
    pub fc1: Option<Linear>,
    /// `fc2`: `F → D`.
    pub fc2: Option<Linear>,
    /// `weights_in`: `D → 2F`.
    pub weights_in: Option<Linear>,
    /// `weights_out`: `F → D`.
    pub weights_out: Option<Linear>,
    /// `hidden_act` of the plain MLP.
    #[module(skip)]
    pub act: Activation,
}

impl Dinov2Mlp {
    /// `[N, T, D]` → `[N, T, D]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        match (&self.fc1, &self.fc2, &self.weights_in, &self.weights_out) {
            (Some(fc1), Some(fc2), _, _) => fc2.forward(self.act.forward(fc1.forward(x))),
            (_, _, Some(win), Some(wout)) => {
                let h = win.forward(x);
                let [n, t, f2] = h.dims();
                let f = f2 / 2;
                let a = h.clone().slice([0..n, 0..t, 0..f]);
                let b = h.slice([0..n, 0..t, f..f2]);
                wout.forward(silu(a) * b)
            }
            _ => unreachable!("Dinov2Mlp is built with either fc1/fc2 or weights_in/weights_out"),
        }
    }
}

/// One DINOv2 block (`Dinov2Layer`).
#[derive(Module, Debug)]
pub struct Dinov2Layer {
    /// `norm1`.
    pub norm1: LayerNorm,
    /// `attention` (`attention.attention.{query,key,value}`, `attention.output.dense`).
    pub attention: ViTAttention,
    /// `layer_scale1`.
    pub layer_scale1: LayerScale,
    /// `norm2`.
    pub norm2: LayerNorm,
    /// `mlp`.
    pub mlp: Dinov2Mlp,
    /// `layer_scale2`.
    pub layer_scale2: LayerScale,
}

impl Dinov2Layer {
    /// `[N, T, D]` → `[N, T, D]`, with the attention probabilities `[N, H, T, T]` when asked.
    pub fn forward(&self, x: Tensor<3>, need_probs: bool) -> (Tensor<3>, Option<Tensor<4>>) {
        let (a, probs) = self
            .attention
            .forward(self.norm1.forward(x.clone()), need_probs);
        let x = self.layer_scale1.forward(a) + x;
        let m = self.mlp.forward(self.norm2.forward(x.clone()));
        (self.layer_scale2.forward(m) + x, probs)
    }
}

/// `encoder`.
#[derive(Module, Debug)]
pub struct Dinov2Encoder {
    /// `layer.N`.
    pub layer: Vec<Dinov2Layer>,
}

/// transformers' `Dinov2Model` / `Dinov2WithRegistersModel`.
#[derive(Module, Debug)]
pub struct Dinov2Model {
    /// `embeddings`.
    pub embeddings: Dinov2Embeddings,
    /// `encoder`.
    pub encoder: Dinov2Encoder,
    /// `layernorm`: the final norm.
    pub layernorm: LayerNorm,
    /// The config the model was built from.
    #[module(skip)]
    pub config: Dinov2Config,
}

impl Dinov2Model {
    /// Builds the module tree for `config`; parameters are drawn from `init`, layer scales are
    /// `layerscale_value`.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for an unknown `model_type` or activation, or inconsistent sizes.
    pub fn new(
        config: &Dinov2Config,
        init: &Initializer,
        device: &Device,
        file: &str,
    ) -> Result<Self, ModelError> {
        if !MODEL_TYPES.contains(&config.model_type.as_str()) {
            return Err(ModelError::Unsupported {
                file: file.into(),
                message: format!(
                    "model_type \"{}\" is not a DINOv2 (expected dinov2 or dinov2_with_registers)",
                    config.model_type
                ),
            });
        }
        let (d, patch) = (config.hidden_size, config.patch());
        check_sizes(
            Path::new(file),
            d,
            config.num_attention_heads,
            &[
                ("patch_size", patch),
                ("hidden_size", d),
                ("mlp_ratio · hidden_size", config.ffn_hidden()),
                ("num_channels", config.num_channels),
            ],
        )?;
        let act = Activation::parse(&config.hidden_act, "hidden_act", Path::new(file))?;
        let spec = ViTBlockSpec {
            hidden_size: d,
            num_heads: config.num_attention_heads,
            intermediate_size: config.ffn_hidden(),
            act,
            layer_norm_eps: config.layer_norm_eps,
            qkv_bias: config.qkv_bias,
        };
        let ln = || {
            LayerNormConfig::new(d)
                .with_epsilon(config.layer_norm_eps)
                .init(device)
        };
        let ls = || LayerScale {
            lambda1: Initializer::Constant {
                value: config.layerscale_value,
            }
            .init([d], device),
        };
        let f = config.ffn_hidden();
        let layer = (0..config.num_hidden_layers)
            .map(|_| {
                let mlp = if config.use_swiglu_ffn {
                    Dinov2Mlp {
                        fc1: None,
                        fc2: None,
                        weights_in: Some(linear(d, 2 * f, true, init, device)),
                        weights_out: Some(linear(f, d, true, init, device)),
                        act,
                    }
                } else {
                    Dinov2Mlp {
                        fc1: Some(linear(d, f, true, init, device)),
                        fc2: Some(linear(f, d, true, init, device)),
                        weights_in: None,
                        weights_out: None,
                        act,
                    }
                };
                Dinov2Layer {
                    norm1: ln(),
                    attention: ViTAttention::new(&spec, init, device),
                    layer_scale1: ls(),
                    norm2: ln(),
                    mlp,
                    layer_scale2: ls(),
                }
            })
            .collect();
        let grid = [config.image_size[0] / patch, config.image_size[1] / patch];
        let r = config.registers();
        let embeddings = Dinov2Embeddings {
            cls_token: init.init([1, 1, d], device),
            position_embeddings: init.init([1, 1 + grid[0] * grid[1], d], device),
            register_tokens: (r > 0).then(|| init.init([1, r, d], device)),
            patch_embeddings: PatchEmbeddings::new(config.num_channels, d, patch, init, device),
            grid,
            antialias: config.with_registers(),
        };
        Ok(Self {
            embeddings,
            encoder: Dinov2Encoder { layer },
            layernorm: ln(),
            config: config.clone(),
        })
    }

    /// A randomly initialized model (normal, std 0.02; layer scales `layerscale_value`), for
    /// benchmarks and tests.
    ///
    /// # Errors
    /// As [`Dinov2Model::new`].
    pub fn init_random(config: &Dinov2Config, device: &Device) -> Result<Self, ModelError> {
        Self::new(
            config,
            &Initializer::Normal {
                mean: 0.0,
                std: 0.02,
            },
            device,
            "<config>",
        )
    }

    /// Loads a `Dinov2Model` / `Dinov2WithRegistersModel` checkpoint strictly.
    ///
    /// Besides `opts`: `embeddings.mask_token` is ignored; a `dinov2.` /
    /// `dinov2_with_registers.` prefix (classification checkpoints) is stripped and their
    /// `classifier.*` head ignored.
    ///
    /// # Errors
    /// [`ModelError::Checkpoint`] for a bad `config.json`, [`ModelError::Unsupported`] for an
    /// unsupported setting, [`ModelError::Load`] naming every missing / unexpected key and
    /// every shape mismatch (model and file shapes).
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        let config: Dinov2Config = ckpt.read_config()?;
        let shapes = checkpoint_shapes(ckpt)?;
        let mut opts = opts.clone();
        if !shapes.contains_key("embeddings.cls_token") {
            // transformers names the base-model attribute of the classification classes after
            // the model type (`dinov2.`, `dinov2_with_registers.`).
            for prefix in MODEL_TYPES {
                if shapes.contains_key(&format!("{prefix}.embeddings.cls_token")) {
                    opts.remap.push((format!("^{prefix}\\."), String::new()));
                    opts.benign_unused.push("^classifier\\.".into());
                }
            }
        }
        opts.benign_unused.push("^embeddings\\.mask_token$".into());
        let model = Self::new(
            &config,
            &Initializer::Zeros,
            device,
            &ckpt.config.display().to_string(),
        )?;
        Ok(load_strict(model, &ckpt.weights, &opts)?)
    }

    /// Number of leading non-patch tokens: CLS plus registers.
    pub fn num_prefix_tokens(&self) -> usize {
        1 + self.config.registers()
    }

    /// Full forward pass.
    ///
    /// # Shapes
    /// `pixel_values: [N, C, H, W]` (any size of at least one patch) →
    /// `last_hidden_state: [N, 1 + R + h·w, D]` (after the final layernorm),
    /// `pooler_output: [N, D]` (its CLS token), `hidden_states`: `L + 1` tensors `[N, T, D]`
    /// (before the final layernorm), `attentions`: `L` tensors `[N, H, T, T]`. Computed in the
    /// weights' dtype, returned in f32.
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        let x = self.embeddings.forward(pixel_values);
        let (x, hidden_states, attentions) =
            run_stack(&self.encoder.layer, x, opts, |l, x, p| l.forward(x, p));
        let last_hidden_state = self.layernorm.forward(x);
        let pooler_output = token(last_hidden_state.clone(), 0);
        EncoderOutput {
            last_hidden_state,
            pooler_output,
            hidden_states,
            attentions,
        }
        .into_f32()
    }
}

impl VisionEncoder for Dinov2Model {
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.forward(pixel_values, opts)
    }

    fn num_prefix_tokens(&self) -> usize {
        Dinov2Model::num_prefix_tokens(self)
    }

    /// Final layernorm, then: `Pooled` and `Summary` = CLS (transformers' `pooler_output`),
    /// `MeanPatch` = mean of the patch tokens (CLS and registers excluded).
    fn readout(&self, hidden: Tensor<3>, readout: VisionReadout) -> Tensor<2> {
        let hidden = to_dtype(hidden, self.layernorm.gamma.dtype());
        let normed = self.layernorm.forward(hidden);
        to_f32(match readout {
            VisionReadout::Pooled | VisionReadout::Summary => token(normed, 0),
            VisionReadout::MeanPatch => mean_patch(normed, self.num_prefix_tokens()),
        })
    }

    /// The plain-MLP blocks in f32 (not SwiGLU): every readout.
    fn linearize(
        &self,
        pixel_values: Tensor<4>,
        readout: VisionReadout,
        outputs: Outputs,
    ) -> Option<Linearization> {
        let c = &self.config;
        if c.use_swiglu_ffn || self.layernorm.gamma.dtype() != burn::tensor::DType::F32 {
            return None;
        }
        let eps = c.layer_norm_eps;
        let norm = |n: &LayerNorm| NormParts::new(n, eps);
        let blocks = self
            .encoder
            .layer
            .iter()
            .map(|l| {
                let [query, key, value, output] = l.attention.projection_parts();
                Some(BlockParts {
                    norm1: norm(&l.norm1),
                    query,
                    key,
                    value,
                    output,
                    num_heads: l.attention.attention.num_heads,
                    attn_bias: None,
                    layer_scale1: Some(l.layer_scale1.lambda1.val().without_autodiff()),
                    norm2: norm(&l.norm2),
                    fc1: LinearParts::new(l.mlp.fc1.as_ref()?),
                    act: l.mlp.act,
                    fc2: LinearParts::new(l.mlp.fc2.as_ref()?),
                    layer_scale2: Some(l.layer_scale2.lambda1.val().without_autodiff()),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let pool = match readout {
            VisionReadout::Pooled | VisionReadout::Summary => Pool::Token(0),
            VisionReadout::MeanPatch => Pool::MeanPatch {
                prefix: self.num_prefix_tokens(),
            },
        };
        let parts = VitParts {
            patch_weight: self
                .embeddings
                .patch_embeddings
                .projection
                .weight
                .val()
                .without_autodiff(),
            prefix: self.num_prefix_tokens(),
            pre_norm: None,
            blocks,
            head: HeadParts {
                norm: Some(norm(&self.layernorm)),
                pool,
                map: None,
                pooled_norm: None,
                projection: None,
            },
        };
        let dims = pixel_values.dims();
        let embeddings = self.embeddings.forward(pixel_values.detach());
        parts.linearize(dims, embeddings, outputs)
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            model_type: c.model_type.clone(),
            dtype: bindscope_core::load::dtype_name(self.layernorm.gamma.dtype()),
            hidden_size: c.hidden_size,
            embed_dim: c.hidden_size,
            num_layers: c.num_hidden_layers,
            num_heads: c.num_attention_heads,
            num_params: self.num_params(),
            input_size: c.image_size,
            patch_size: c.patch(),
        }
    }
}
