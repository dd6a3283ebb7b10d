//! # ViT-MAE encoder — `ViTMAEModel` with masking off
//!
//! He et al., *Masked Autoencoders Are Scalable Vision Learners*
//! (<https://arxiv.org/abs/2111.06377>), as transformers implements the encoder in
//! `ViTMAEModel` (`model_type: "vit_mae"`, e.g. `facebook/vit-mae-base`), used here as a frozen
//! feature extractor.
//!
//! The encoder is a plain pre-norm ViT ([`crate::vit`]'s blocks, same key names) whose position
//! embeddings are the fixed 2D sin-cos table stored in the checkpoint. No pooler.
//!
//! ## Masking is off
//! `ViTMAEModel` always runs `random_masking`: it keeps `int(L · (1 − mask_ratio))` patch tokens in
//! the order of `argsort(noise)`, with fresh random noise unless `noise` is passed — so even at
//! `mask_ratio = 0` transformers returns the patch tokens *shuffled*. This implementation keeps
//! every patch in image order (row-major after the CLS token), whatever `mask_ratio` the config
//! says; that equals transformers called with `mask_ratio = 0` and
//! `noise = arange(L)` for every image (the identity shuffle), which is how the parity reference
//! is produced.
//!
//! ## Readout
//! [`VisionReadout::Pooled`] (and `pooler_output`) is the mean of the patch tokens after the
//! final `layernorm` — the MAE paper's linear-probing feature is an average of the encoder's
//! patch tokens, and `ViTMAEModel` has no pooler of its own. `Summary` is the normalized CLS token.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bindscope_core::{Checkpoint, LoadOptions};
//! use bindscope_models::{ForwardOptions, vit_mae::ViTMAEModel};
//! let device = burn::tensor::Device::flex();
//! let ckpt = Checkpoint::resolve("facebook/vit-mae-base")?;
//! let model = ViTMAEModel::load(&ckpt, &device, &LoadOptions::default())?;
//! let pixels = burn::tensor::Tensor::<4>::zeros([1, 3, 224, 224], &device);
//! let out = model.forward(pixels, ForwardOptions::default());
//! assert_eq!(out.pooler_output.dims(), [1, 768]);
//! # Ok(()) }
//! ```
//!
//! ## Keys
//! `embeddings.{cls_token,position_embeddings,patch_embeddings.projection}`,
//! `encoder.layer.N.*` as in [`crate::vit`], `layernorm`. The Hub checkpoints are saved from
//! `ViTMAEForPreTraining`: their `vit.` prefix is stripped and the pixel decoder
//! (`decoder.*`) is ignored.

use bindscope_core::{Checkpoint, LoadOptions, load_strict};
use burn::nn::{Initializer, LayerNorm};
use burn::prelude::*;
use serde::Deserialize;

/// `model_type` of a `ViTMAEModel` checkpoint.
pub const MODEL_TYPE: &str = "vit_mae";

use crate::linearize::{Linearization, Outputs, Pool};
use crate::nn::{checkpoint_shapes, de_image_size, mean_patch, to_dtype, to_f32, token};
use crate::vit::{ViTConfig, ViTEmbeddings, ViTEncoder, VitLayout, linearize_vit_layout};
use crate::{EncoderOutput, ForwardOptions, ModelError, ModelInfo, VisionEncoder, VisionReadout};

/// `config.json` of `ViTMAEModel` (`ViTMAEConfig`), encoder fields only (the decoder fields and
/// `mask_ratio` are ignored); missing fields take the transformers defaults (ViT-B/16).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ViTMAEConfig {
    /// `"vit_mae"`.
    pub model_type: String,
    /// Width `D`.
    pub hidden_size: usize,
    /// Number of blocks `L`.
    pub num_hidden_layers: usize,
    /// Number of heads `H`.
    pub num_attention_heads: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// MLP activation.
    pub hidden_act: String,
    /// Epsilon of every LayerNorm.
    pub layer_norm_eps: f64,
    /// Configured input size `[H, W]`.
    #[serde(deserialize_with = "de_image_size")]
    pub image_size: [usize; 2],
    /// Patch side.
    pub patch_size: usize,
    /// Input channels.
    pub num_channels: usize,
    /// Bias on query/key/value.
    pub qkv_bias: bool,
    /// Pre-training mask ratio: read for the record, not applied (see the module docs).
    pub mask_ratio: f64,
}

impl Default for ViTMAEConfig {
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
            mask_ratio: 0.75,
        }
    }
}

impl ViTMAEConfig {
    /// The encoder's sizes as a [`ViTConfig`] (no pooler), for the blocks shared with ViT.
    pub fn vit(&self) -> ViTConfig {
        ViTConfig {
            model_type: self.model_type.clone(),
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            hidden_act: self.hidden_act.clone(),
            layer_norm_eps: self.layer_norm_eps,
            image_size: self.image_size,
            patch_size: self.patch_size,
            num_channels: self.num_channels,
            qkv_bias: self.qkv_bias,
            ..ViTConfig::default()
        }
    }
}

/// transformers' `ViTMAEModel` encoder, masking off.
#[derive(Module, Debug)]
pub struct ViTMAEModel {
    /// `embeddings`.
    pub embeddings: ViTEmbeddings,
    /// `encoder`.
    pub encoder: ViTEncoder,
    /// `layernorm`: the final norm.
    pub layernorm: LayerNorm,
    /// The config the model was built from.
    #[module(skip)]
    pub config: ViTMAEConfig,
}

impl ViTMAEModel {
    /// Builds the module tree for `config` with parameters drawn from `init`.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for an unknown activation or inconsistent sizes.
    pub fn new(
        config: &ViTMAEConfig,
        init: &Initializer,
        device: &Device,
        file: &str,
    ) -> Result<Self, ModelError> {
        let c = config;
        let (encoder, layernorm) = c.vit().encoder_and_norm(init, device, file)?;
        Ok(Self {
            embeddings: ViTEmbeddings::new(
                c.num_channels,
                c.hidden_size,
                c.image_size,
                c.patch_size,
                init,
                device,
            ),
            encoder,
            layernorm,
            config: c.clone(),
        })
    }

    /// A randomly initialized model (normal, std 0.02, including the position table), for
    /// benchmarks and tests.
    ///
    /// # Errors
    /// As [`ViTMAEModel::new`].
    pub fn init_random(config: &ViTMAEConfig, device: &Device) -> Result<Self, ModelError> {
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

    /// Loads a `ViTMAEModel` checkpoint, or the encoder of a `ViTMAEForPreTraining` one (`vit.`
    /// prefix stripped, `decoder.*` ignored), strictly.
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
        let config: ViTMAEConfig = ckpt.read_config()?;
        let shapes = checkpoint_shapes(ckpt)?;
        let mut opts = opts.clone();
        if !shapes.contains_key("embeddings.cls_token")
            && shapes.contains_key("vit.embeddings.cls_token")
        {
            opts.remap.push(("^vit\\.".into(), String::new()));
            opts.benign_unused.push("^decoder\\.".into());
        }
        let model = Self::new(
            &config,
            &Initializer::Zeros,
            device,
            &ckpt.config.display().to_string(),
        )?;
        Ok(load_strict(model, &ckpt.weights, &opts)?)
    }

    /// Full forward pass, every patch kept in image order.
    ///
    /// # Shapes
    /// `pixel_values: [N, C, H, W]` (other sizes than the configured one get the position table
    /// resampled bicubically, as transformers with `interpolate_pos_encoding=True`) →
    /// `last_hidden_state: [N, 1 + h·w, D]` (after the final layernorm), `pooler_output: [N, D]`
    /// (mean of its patch tokens), `hidden_states`: `L + 1` tensors `[N, T, D]` (before the
    /// final layernorm), `attentions`: `L` tensors `[N, H, T, T]`. Computed in the weights'
    /// dtype, returned in f32.
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        let x = self.embeddings.forward(pixel_values);
        let (x, hidden_states, attentions) = self.encoder.forward(x, opts);
        let last_hidden_state = self.layernorm.forward(x);
        let pooler_output = mean_patch(last_hidden_state.clone(), 1);
        EncoderOutput {
            last_hidden_state,
            pooler_output,
            hidden_states,
            attentions,
        }
        .into_f32()
    }
}

impl VisionEncoder for ViTMAEModel {
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.forward(pixel_values, opts)
    }

    fn num_prefix_tokens(&self) -> usize {
        1
    }

    /// Final layernorm, then: `Pooled` and `MeanPatch` = mean of the patch tokens,
    /// `Summary` = CLS.
    fn readout(&self, hidden: Tensor<3>, readout: VisionReadout) -> Tensor<2> {
        let hidden = to_dtype(hidden, self.layernorm.gamma.dtype());
        let normed = self.layernorm.forward(hidden);
        to_f32(match readout {
            VisionReadout::Pooled | VisionReadout::MeanPatch => mean_patch(normed, 1),
            VisionReadout::Summary => token(normed, 0),
        })
    }

    /// f32 weights: every readout.
    fn linearize(
        &self,
        pixel_values: Tensor<4>,
        readout: VisionReadout,
        outputs: Outputs,
    ) -> Option<Linearization> {
        let pool = match readout {
            VisionReadout::Pooled | VisionReadout::MeanPatch => Pool::MeanPatch { prefix: 1 },
            VisionReadout::Summary => Pool::Token(0),
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
            embed_dim: c.hidden_size,
            num_layers: c.num_hidden_layers,
            num_heads: c.num_attention_heads,
            num_params: self.num_params(),
            input_size: c.image_size,
            patch_size: c.patch_size,
        }
    }
}
