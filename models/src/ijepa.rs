//! # I-JEPA — `IJepaModel`
//!
//! Assran et al., *Self-Supervised Learning from Images with a Joint-Embedding Predictive
//! Architecture* (<https://arxiv.org/abs/2301.08243>), the context encoder as transformers
//! implements it in `IJepaModel` (`model_type: "ijepa"`, e.g. `facebook/ijepa_vith14_1k`), used
//! here as a frozen feature extractor.
//!
//! A plain pre-norm ViT ([`crate::vit`]'s blocks, same key names) without a CLS token: the
//! patch tokens get learned position embeddings (`[1, Gh·Gw, D]`, resampled bicubically when the
//! input is not the configured size, as transformers with `interpolate_pos_encoding=True`),
//! then `L` blocks and a final `layernorm`.
//!
//! ## Readout
//! [`VisionReadout::Pooled`], [`VisionReadout::MeanPatch`] and `pooler_output` are the mean of
//! every token after the final `layernorm`: I-JEPA has no CLS token, its paper evaluates the
//! average-pooled encoder output, and transformers' `IJepaForImageClassification` pools the
//! same way (`sequence_output.mean(dim=1)`). `IJepaModel`'s optional pooler (`tanh(dense(·))`
//! of the first *patch* token, off by default) is not used; its keys, when a checkpoint has
//! them, are ignored. [`VisionReadout::Summary`] is the same mean (there is no summary token).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bindscope_core::{Checkpoint, LoadOptions};
//! use bindscope_models::{ForwardOptions, ijepa::IJepaModel};
//! let device = burn::tensor::Device::flex();
//! let ckpt = Checkpoint::resolve("facebook/ijepa_vith14_1k")?;
//! let model = IJepaModel::load(&ckpt, &device, &LoadOptions::default())?;
//! let pixels = burn::tensor::Tensor::<4>::zeros([1, 3, 224, 224], &device);
//! let out = model.forward(pixels, ForwardOptions::default());
//! assert_eq!(out.last_hidden_state.dims(), [1, 256, 1280]);
//! # Ok(()) }
//! ```
//!
//! ## Keys
//! `embeddings.{position_embeddings,patch_embeddings.projection}`, `encoder.layer.N.*` as in
//! [`crate::vit`], `layernorm`. Checkpoints saved from `IJepaForImageClassification` carry an
//! `ijepa.` prefix and a `classifier`: the prefix is stripped and `classifier.*` ignored.

use bindscope_core::{Checkpoint, LoadOptions, load_strict};
use burn::module::Param;
use burn::nn::{Initializer, LayerNorm};
use burn::prelude::*;

/// `model_type` of an `IJepaModel` checkpoint.
pub const MODEL_TYPE: &str = "ijepa";

use crate::linearize::{Linearization, Outputs, Pool};
use crate::nn::{
    checkpoint_shapes, classification_layout, interpolate_pos_grid, mean_patch, to_dtype, to_f32,
};
use crate::vit::{PatchEmbeddings, ViTConfig, ViTEncoder, VitLayout, linearize_vit_layout};
use crate::{EncoderOutput, ForwardOptions, ModelError, ModelInfo, VisionEncoder, VisionReadout};

/// `config.json` of `IJepaModel`: transformers' `IJepaConfig` has exactly the fields of
/// `ViTConfig`, read by [`ViTConfig`] (its `Default` is ViT-B/16 with `model_type` `"vit"`;
/// `pooler_output_size` and `pooler_act` are not used, see the module docs).
pub type IJepaConfig = ViTConfig;

/// `embeddings` of `IJepaModel`: patch embedding plus learned position embeddings, no CLS token.
#[derive(Module, Debug)]
pub struct IJepaEmbeddings {
    /// `position_embeddings`: `[1, Gh·Gw, D]` for the configured grid.
    pub position_embeddings: Param<Tensor<3>>,
    /// `patch_embeddings.projection`.
    pub patch_embeddings: PatchEmbeddings,
    /// The configured position grid `[Gh, Gw]`.
    #[module(skip)]
    pub grid: [usize; 2],
}

impl IJepaEmbeddings {
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
            position_embeddings: init.init([1, grid[0] * grid[1], hidden], device),
            patch_embeddings: PatchEmbeddings::new(channels, hidden, patch, init, device),
            grid,
        }
    }

    /// `[N, C, H, W]` → `[N, h·w, D]`: patch tokens plus position embeddings (the configured
    /// table, or resampled to the `h × w` grid).
    pub fn forward(&self, pixel_values: Tensor<4>) -> Tensor<3> {
        let (patches, hw) = self.patch_embeddings.forward(pixel_values);
        let pos = self.position_embeddings.val();
        let pos = if hw == self.grid {
            pos
        } else {
            interpolate_pos_grid(pos, self.grid, hw, false)
        };
        patches + pos
    }
}

/// transformers' `IJepaModel` (no pooler).
#[derive(Module, Debug)]
pub struct IJepaModel {
    /// `embeddings`.
    pub embeddings: IJepaEmbeddings,
    /// `encoder`.
    pub encoder: ViTEncoder,
    /// `layernorm`: the final norm.
    pub layernorm: LayerNorm,
    /// The config the model was built from.
    #[module(skip)]
    pub config: IJepaConfig,
}

impl IJepaModel {
    /// Builds the module tree for `config` with parameters drawn from `init`.
    ///
    /// # Errors
    /// As [`ViTConfig::encoder_and_norm`].
    pub fn new(
        config: &IJepaConfig,
        init: &Initializer,
        device: &Device,
        file: &str,
    ) -> Result<Self, ModelError> {
        let (encoder, layernorm) = config.encoder_and_norm(init, device, file)?;
        Ok(Self {
            embeddings: IJepaEmbeddings::new(
                config.num_channels,
                config.hidden_size,
                config.image_size,
                config.patch_size,
                init,
                device,
            ),
            encoder,
            layernorm,
            config: config.clone(),
        })
    }

    /// Loads an `IJepaModel` checkpoint, or the encoder of an `IJepaForImageClassification`
    /// one (`ijepa.` prefix stripped, `classifier.*` ignored), strictly; `pooler.*` keys are
    /// ignored.
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
        let config: IJepaConfig = ckpt.read_config()?;
        let shapes = checkpoint_shapes(ckpt)?;
        let mut opts = opts.clone();
        // The classification layout: every encoder key under `ijepa.` (told apart by any of
        // them, so a missing key is still reported by its stored name).
        classification_layout(
            &shapes,
            &mut opts,
            "embeddings.",
            "ijepa.",
            "^classifier\\.",
        );
        opts.benign_unused.push("^(ijepa\\.)?pooler\\.".into());
        let model = Self::new(
            &config,
            &Initializer::Zeros,
            device,
            &ckpt.config.display().to_string(),
        )?;
        Ok(load_strict(model, &ckpt.weights, &opts)?)
    }

    /// Full forward pass.
    ///
    /// # Shapes
    /// `pixel_values: [N, C, H, W]` → `last_hidden_state: [N, h·w, D]` (after the final
    /// layernorm), `pooler_output: [N, D]` (mean of its tokens), `hidden_states`: `L + 1`
    /// tensors `[N, h·w, D]` (before the final layernorm), `attentions`: `L` tensors
    /// `[N, H, h·w, h·w]`. Computed in the weights' dtype, returned in f32.
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        let x = self.embeddings.forward(pixel_values);
        let (x, hidden_states, attentions) = self.encoder.forward(x, opts);
        let last_hidden_state = self.layernorm.forward(x);
        let pooler_output = mean_patch(last_hidden_state.clone(), 0);
        EncoderOutput {
            last_hidden_state,
            pooler_output,
            hidden_states,
            attentions,
        }
        .into_f32()
    }
}

impl VisionEncoder for IJepaModel {
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.forward(pixel_values, opts)
    }

    fn num_prefix_tokens(&self) -> usize {
        0
    }

    /// Final layernorm, then the mean of every token, whatever the readout.
    fn readout(&self, hidden: Tensor<3>, _readout: VisionReadout) -> Tensor<2> {
        let hidden = to_dtype(hidden, self.layernorm.gamma.dtype());
        to_f32(mean_patch(self.layernorm.forward(hidden), 0))
    }

    /// f32 weights: every readout (all the mean of every token).
    fn linearize(
        &self,
        pixel_values: Tensor<4>,
        readout: VisionReadout,
        outputs: Outputs,
    ) -> Option<Linearization> {
        let _ = readout;
        let dims = pixel_values.dims();
        let embed = || self.embeddings.forward(pixel_values.detach());
        linearize_vit_layout(
            VitLayout {
                patch: &self.embeddings.patch_embeddings,
                prefix: 0,
                encoder: &self.encoder,
                layernorm: &self.layernorm,
                eps: self.config.layer_norm_eps,
            },
            Pool::MeanPatch { prefix: 0 },
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
            num_params: self.num_params(),
            num_heads: c.num_attention_heads,
            input_size: c.image_size,
            patch_size: c.patch_size,
        }
    }
}
