//! # ConvNeXt — `ConvNextModel`
//!
//! Liu et al., *A ConvNet for the 2020s* (CVPR 2022, <https://arxiv.org/abs/2201.03545>), as
//! transformers implements it in `ConvNextModel` (`model_type: "convnext"`, e.g.
//! `facebook/convnext-base-224`), used as a frozen feature extractor.
//!
//! ```text
//! stem:   patch_embeddings (k×k/k conv) → layernorm (channels-first, eps 1e-6)
//! stage:  [downsampling_layer: layernorm (channels-first) → 2×2/2 conv]  (stages 2..4)
//!         layers: x + γ ⊙ pwconv2(GELU(pwconv1(LN(dwconv₇ₓ₇(x)))))    (LN channels-last, eps 1e-6)
//! pool:   layernorm(mean over H×W)                                    (eps = layer_norm_eps)
//! ```
//!
//! ## Readout and outputs
//! A stage's feature map `[N, C, h, w]` is handed out as tokens `[N, h·w, C]` (row-major over
//! `h, w`, no prefix tokens), as [`crate::resnet`] does. `pooler_output` and every
//! [`VisionReadout`] is transformers' `pooler_output`, the final `layernorm` of the global average
//! of the last stage (what `ConvNextForImageClassification` classifies). `hidden_states` are the
//! stem's output and each stage's output (`num_stages + 1` tensors, as transformers returns
//! them); [`VisionEncoder::readout`] pools a hidden state the same way, the final `layernorm`
//! applied only when its width is the last stage's.
//!
//! ## Keys
//! `embeddings.{patch_embeddings,layernorm}`, `encoder.stages.S.downsampling_layer.{0,1}` (the
//! layernorm, the conv), `encoder.stages.S.layers.L.{dwconv,layernorm,pwconv1,pwconv2,
//! layer_scale_parameter}`, `layernorm`. A `ConvNextForImageClassification` checkpoint (the Hub's
//! `facebook/convnext-*`) carries a `convnext.` prefix and a `classifier`: the prefix is
//! stripped, `classifier.*` ignored.

use bindscope_core::{Checkpoint, LoadOptions, load_strict};
use burn::module::Param;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Initializer, LayerNorm, Linear};
use burn::prelude::*;
use serde::Deserialize;

use crate::nn::{
    Activation, check_model_type, checkpoint_shapes, classification_layout, de_image_size,
    feature_map_tokens as to_tokens, layer_norm, linear, to_dtype, to_f32,
};
use crate::{EncoderOutput, ForwardOptions, ModelError, ModelInfo, VisionEncoder, VisionReadout};

/// `model_type` of a `ConvNextModel` checkpoint.
pub const MODEL_TYPE: &str = "convnext";

/// The eps of every layernorm but the final one (fixed in transformers' `ConvNextLayer`,
/// `ConvNextEmbeddings` and the downsampling layers).
pub const INNER_LAYER_NORM_EPS: f64 = 1e-6;

/// `config.json` of `ConvNextModel` (`ConvNextConfig`); missing fields take the transformers
/// defaults (ConvNeXt-T).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ConvNextConfig {
    /// `"convnext"`.
    pub model_type: String,
    /// Input channels.
    pub num_channels: usize,
    /// Stem convolution's kernel and stride.
    pub patch_size: usize,
    /// Number of stages.
    pub num_stages: usize,
    /// Channels of each stage.
    pub hidden_sizes: Vec<usize>,
    /// Blocks of each stage.
    pub depths: Vec<usize>,
    /// Activation of the block MLP.
    pub hidden_act: String,
    /// eps of the final (pooler) layernorm.
    pub layer_norm_eps: f64,
    /// Initial value of the layer scale γ; 0 means the blocks have none.
    pub layer_scale_init_value: f64,
    /// Configured input size `[H, W]` (any size runs; this is what `info` reports).
    #[serde(deserialize_with = "de_image_size")]
    pub image_size: [usize; 2],
}

impl Default for ConvNextConfig {
    fn default() -> Self {
        Self {
            model_type: MODEL_TYPE.into(),
            num_channels: 3,
            patch_size: 4,
            num_stages: 4,
            hidden_sizes: vec![96, 192, 384, 768],
            depths: vec![3, 3, 9, 3],
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-12,
            layer_scale_init_value: 1e-6,
            image_size: [224, 224],
        }
    }
}

/// A layernorm over the channels of `[N, C, H, W]` (transformers' `data_format="channels_first"`).
fn norm_channels_first(norm: &LayerNorm, x: Tensor<4>) -> Tensor<4> {
    norm.forward(x.permute([0, 2, 3, 1])).permute([0, 3, 1, 2])
}

fn conv(
    cin: usize,
    cout: usize,
    k: usize,
    stride: usize,
    groups: usize,
    pad: usize,
    device: &Device,
) -> Conv2d {
    Conv2dConfig::new([cin, cout], [k, k])
        .with_stride([stride, stride])
        .with_groups(groups)
        .with_padding(burn::nn::PaddingConfig2d::Explicit(pad, pad, pad, pad))
        .with_bias(true)
        .with_initializer(Initializer::Zeros)
        .init(device)
}

/// `embeddings`: the patchify stem.
#[derive(Module, Debug)]
pub struct ConvNextEmbeddings {
    /// `patch_embeddings`: `patch_size`×`patch_size` conv, stride `patch_size`.
    pub patch_embeddings: Conv2d,
    /// `layernorm` (channels-first).
    pub layernorm: LayerNorm,
}

/// `downsampling_layer` of stages 2..: stored as `.0` (layernorm) and `.1` (conv).
#[derive(Module, Debug)]
pub struct Downsampling {
    /// `downsampling_layer.0`: channels-first layernorm.
    pub norm: LayerNorm,
    /// `downsampling_layer.1`: 2×2 conv, stride 2.
    pub conv: Conv2d,
}

/// `ConvNextLayer`: the inverted-bottleneck block.
#[derive(Module, Debug)]
pub struct ConvNextLayer {
    /// `dwconv`: 7×7 depthwise conv.
    pub dwconv: Conv2d,
    /// `layernorm` (channels-last).
    pub layernorm: LayerNorm,
    /// `pwconv1`: `C → 4C`.
    pub pwconv1: Linear,
    /// `pwconv2`: `4C → C`.
    pub pwconv2: Linear,
    /// `layer_scale_parameter` γ, `[C]`, when `layer_scale_init_value > 0`.
    pub layer_scale_parameter: Option<Param<Tensor<1>>>,
    /// The MLP activation.
    #[module(skip)]
    pub act: Activation,
}

impl ConvNextLayer {
    fn new(dim: usize, act: Activation, layer_scale: bool, device: &Device) -> Self {
        Self {
            dwconv: conv(dim, dim, 7, 1, dim, 3, device),
            layernorm: layer_norm(dim, INNER_LAYER_NORM_EPS, device),
            pwconv1: linear(dim, 4 * dim, true, &Initializer::Zeros, device),
            pwconv2: linear(4 * dim, dim, true, &Initializer::Zeros, device),
            layer_scale_parameter: layer_scale
                .then(|| Param::from_tensor(Tensor::ones([dim], device))),
            act,
        }
    }

    /// `[N, C, H, W]` → `[N, C, H, W]`.
    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let h = self.dwconv.forward(x.clone()).permute([0, 2, 3, 1]);
        let h = self.layernorm.forward(h);
        let h = self
            .pwconv2
            .forward(self.act.forward(self.pwconv1.forward(h)));
        let h = match &self.layer_scale_parameter {
            Some(g) => {
                let c = g.dims()[0];
                h * g.val().reshape([1, 1, 1, c])
            }
            None => h,
        };
        x + h.permute([0, 3, 1, 2])
    }
}

/// `ConvNextStage`: an optional downsampling layer, then the blocks.
#[derive(Module, Debug)]
pub struct ConvNextStage {
    /// `downsampling_layer` (absent in the first stage).
    pub downsampling_layer: Option<Downsampling>,
    /// `layers`.
    pub layers: Vec<ConvNextLayer>,
}

/// `encoder`.
#[derive(Module, Debug)]
pub struct ConvNextEncoder {
    /// `stages`.
    pub stages: Vec<ConvNextStage>,
}

/// transformers' `ConvNextModel`.
#[derive(Module, Debug)]
pub struct ConvNextModel {
    /// `embeddings`.
    pub embeddings: ConvNextEmbeddings,
    /// `encoder`.
    pub encoder: ConvNextEncoder,
    /// `layernorm`: the pooler's norm.
    pub layernorm: LayerNorm,
    /// The config the model was built from.
    #[module(skip)]
    pub config: ConvNextConfig,
}

impl ConvNextModel {
    /// Builds the module tree for `config` (zero weights, unit norms and layer scales).
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` when `hidden_sizes` / `depths` do not have
    /// `num_stages` entries, a size is zero, or the activation is unknown.
    pub fn new(config: &ConvNextConfig, device: &Device, file: &str) -> Result<Self, ModelError> {
        let err = |message: String| ModelError::Unsupported {
            file: file.to_string(),
            message,
        };
        let s = config.num_stages;
        if s == 0 || config.hidden_sizes.len() != s || config.depths.len() != s {
            return Err(err(format!(
                "num_stages {s} needs that many hidden_sizes and depths (got {:?} and {:?})",
                config.hidden_sizes, config.depths
            )));
        }
        if config.patch_size == 0 || config.hidden_sizes.contains(&0) {
            return Err(err("patch_size and hidden_sizes must be positive".into()));
        }
        let act = Activation::parse(&config.hidden_act, "hidden_act", std::path::Path::new(file))?;
        let layer_scale = config.layer_scale_init_value > 0.0;
        let mut prev = config.hidden_sizes[0];
        let stages = (0..s)
            .map(|i| {
                let out = config.hidden_sizes[i];
                // transformers: `in_channels != out_channels or stride > 1`, which holds for every
                // stage but the first (stride 2, input = the previous stage's width).
                let downsampling_layer = (i > 0).then(|| Downsampling {
                    norm: layer_norm(prev, INNER_LAYER_NORM_EPS, device),
                    conv: conv(prev, out, 2, 2, 1, 0, device),
                });
                prev = out;
                ConvNextStage {
                    downsampling_layer,
                    layers: (0..config.depths[i])
                        .map(|_| ConvNextLayer::new(out, act, layer_scale, device))
                        .collect(),
                }
            })
            .collect();
        let first = config.hidden_sizes[0];
        Ok(Self {
            embeddings: ConvNextEmbeddings {
                patch_embeddings: conv(
                    config.num_channels,
                    first,
                    config.patch_size,
                    config.patch_size,
                    1,
                    0,
                    device,
                ),
                layernorm: layer_norm(first, INNER_LAYER_NORM_EPS, device),
            },
            encoder: ConvNextEncoder { stages },
            layernorm: layer_norm(prev, config.layer_norm_eps, device),
            config: config.clone(),
        })
    }

    /// Loads a `ConvNextModel` checkpoint, or the backbone of a
    /// `ConvNextForImageClassification` one (`convnext.` stripped, `classifier.*` ignored),
    /// strictly.
    ///
    /// # Errors
    /// [`ModelError::Checkpoint`] for a bad `config.json`, [`ModelError::Unsupported`] for an
    /// unsupported setting, [`ModelError::Load`] naming every missing / unexpected key and
    /// every shape mismatch.
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        let config: ConvNextConfig = ckpt.read_config()?;
        check_model_type(ckpt, &config.model_type, &[MODEL_TYPE])?;
        let shapes = checkpoint_shapes(ckpt)?;
        let mut opts = opts.clone();
        classification_layout(
            &shapes,
            &mut opts,
            "embeddings.",
            "convnext.",
            "^classifier\\.",
        );
        opts.remap.push((
            r"\.downsampling_layer\.0\.".into(),
            ".downsampling_layer.norm.".into(),
        ));
        opts.remap.push((
            r"\.downsampling_layer\.1\.".into(),
            ".downsampling_layer.conv.".into(),
        ));
        let model = Self::new(&config, device, &ckpt.config.display().to_string())?;
        Ok(load_strict(model, &ckpt.weights, &opts)?)
    }

    /// Full forward pass.
    ///
    /// # Shapes
    /// `pixel_values: [N, C, H, W]` → `last_hidden_state: [N, h·w, C_last]` (the last stage's
    /// map as tokens, `h = H / (patch · 2^(stages − 1))` as the convolutions floor),
    /// `pooler_output: [N, C_last]`, `hidden_states`: `num_stages + 1` tensors (stem, then each
    /// stage) as tokens; no attentions. Returned in f32.
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        let x = to_dtype(pixel_values, self.layernorm.gamma.dtype());
        let x = self.embeddings.patch_embeddings.forward(x);
        let mut x = norm_channels_first(&self.embeddings.layernorm, x);
        let mut hidden = opts
            .output_hidden_states
            .then(|| vec![to_tokens(x.clone())]);
        for stage in &self.encoder.stages {
            if let Some(d) = &stage.downsampling_layer {
                x = d.conv.forward(norm_channels_first(&d.norm, x));
            }
            for layer in &stage.layers {
                x = layer.forward(x);
            }
            if let Some(h) = hidden.as_mut() {
                h.push(to_tokens(x.clone()));
            }
        }
        let last_hidden_state = to_tokens(x);
        let pooler_output = self.pool(last_hidden_state.clone());
        EncoderOutput {
            last_hidden_state,
            pooler_output,
            hidden_states: hidden,
            attentions: None,
        }
        .into_f32()
    }

    /// Mean over the tokens, then the final layernorm when the width is the last stage's:
    /// `[N, T, C]` → `[N, C]`.
    fn pool(&self, tokens: Tensor<3>) -> Tensor<2> {
        let [n, _, c] = tokens.dims();
        let mean = tokens.mean_dim(1).reshape([n, c]);
        if c == self.layernorm.gamma.dims()[0] {
            self.layernorm.forward(mean)
        } else {
            mean
        }
    }
}

impl VisionEncoder for ConvNextModel {
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.forward(pixel_values, opts)
    }

    fn num_prefix_tokens(&self) -> usize {
        0
    }

    /// The pooler (mean over tokens, final layernorm), whatever the readout.
    fn readout(&self, hidden: Tensor<3>, _readout: VisionReadout) -> Tensor<2> {
        let hidden = to_dtype(hidden, self.layernorm.gamma.dtype());
        to_f32(self.pool(hidden))
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        let last = *c.hidden_sizes.last().unwrap_or(&0);
        ModelInfo {
            model_type: MODEL_TYPE.into(),
            dtype: bindscope_core::load::dtype_name(self.layernorm.gamma.dtype()),
            hidden_size: last,
            embed_dim: last,
            num_layers: c.depths.iter().sum(),
            num_heads: 0,
            num_params: self.num_params(),
            input_size: c.image_size,
            patch_size: c.patch_size << c.num_stages.saturating_sub(1),
        }
    }
}
