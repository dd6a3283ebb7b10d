//! Building the right encoder from a checkpoint's `config.json`.
//!
//! Dispatches on `model_type`:
//!
//! | `model_type` | vision tower | text tower |
//! |---|---|---|
//! | `clip` | [`crate::clip`] vision + `visual_projection` | [`crate::clip`] text + `text_projection` |
//! | `siglip` | [`crate::siglip`] vision + MAP head | [`crate::siglip`] text + head |
//! | `dinov2`, `dinov2_with_registers` | [`crate::dinov2::Dinov2Model`] | — |
//! | `vit` | [`crate::vit::ViTModel`] | — |
//! | `vit_mae` | [`crate::vit_mae::ViTMAEModel`] | — |
//! | `bert` | — | [`crate::bert::BertModel`] |
//!
//! A model loaded onto an autodiff device is frozen ([`burn::module::Module::no_grad`]): its
//! parameters never collect gradients, so a backward pass costs only the input gradients.

use crate::{ModelError, ModelInfo, TextEncoder, VisionEncoder};
use bindscope_core::{Checkpoint, LoadOptions};
use burn::module::Module;
use burn::tensor::Device;

/// `model_type` of `config.json`.
///
/// # Errors
/// [`ModelError::Checkpoint`] when the file is unreadable; [`ModelError::Unsupported`] when the
/// field is missing.
pub fn model_type(ckpt: &Checkpoint) -> Result<String, ModelError> {
    let v = ckpt.config_json()?;
    v.get("model_type")
        .and_then(|m| m.as_str())
        .map(str::to_string)
        .ok_or_else(|| ModelError::Unsupported {
            file: ckpt.config.display().to_string(),
            message: "no 'model_type' field: cannot tell the architecture".into(),
        })
}

fn freeze<M: Module>(m: M, device: &Device) -> M {
    if device.is_autodiff() { m.no_grad() } else { m }
}

fn unsupported(ckpt: &Checkpoint, mt: &str, what: &str, known: &str) -> ModelError {
    ModelError::Unsupported {
        file: ckpt.config.display().to_string(),
        message: format!("model_type '{mt}' has no {what} here (supported: {known})"),
    }
}

const VISION_TYPES: &str = "clip, siglip, dinov2, dinov2_with_registers, vit, vit_mae";
const TEXT_TYPES: &str = "clip, siglip, bert";

/// Loads the vision encoder of a checkpoint (for two-tower models only the vision tower's
/// weights are read; the text tower's keys are ignored, not reported).
///
/// # Errors
/// [`ModelError`] for unreadable configs, unsupported architectures or mismatching weights.
pub fn load_vision(
    ckpt: &Checkpoint,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Box<dyn VisionEncoder>, ModelError> {
    let mt = model_type(ckpt)?;
    Ok(match mt.as_str() {
        "clip" | "clip_vision_model" => Box::new(freeze(
            crate::clip::ClipVisionModel::load(ckpt, device, opts)?,
            device,
        )),
        "siglip" | "siglip_vision_model" => Box::new(freeze(
            crate::siglip::SiglipVisionModel::load(ckpt, device, opts)?,
            device,
        )),
        "dinov2" | "dinov2_with_registers" => Box::new(freeze(
            crate::dinov2::Dinov2Model::load(ckpt, device, opts)?,
            device,
        )),
        "vit" => Box::new(freeze(
            crate::vit::ViTModel::load(ckpt, device, opts)?,
            device,
        )),
        "vit_mae" => Box::new(freeze(
            crate::vit_mae::ViTMAEModel::load(ckpt, device, opts)?,
            device,
        )),
        other => return Err(unsupported(ckpt, other, "vision encoder", VISION_TYPES)),
    })
}

/// Loads the text encoder of a checkpoint.
///
/// # Errors
/// [`ModelError`] for unreadable configs, unsupported architectures or mismatching weights.
pub fn load_text(
    ckpt: &Checkpoint,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Box<dyn TextEncoder>, ModelError> {
    let mt = model_type(ckpt)?;
    Ok(match mt.as_str() {
        "clip" | "clip_text_model" => Box::new(freeze(
            crate::clip::ClipTextModel::load(ckpt, device, opts)?,
            device,
        )),
        "siglip" | "siglip_text_model" => Box::new(freeze(
            crate::siglip::SiglipTextModel::load(ckpt, device, opts)?,
            device,
        )),
        "bert" => Box::new(freeze(
            crate::bert::BertModel::load(ckpt, device, opts)?,
            device,
        )),
        other => return Err(unsupported(ckpt, other, "text encoder", TEXT_TYPES)),
    })
}

/// Loads every tower the checkpoint has and returns `(tower, info)` pairs (`"vision"`,
/// `"text"`), for `experiments info`.
///
/// # Errors
/// As [`load_vision`] / [`load_text`]; an architecture with neither tower is
/// [`ModelError::Unsupported`].
pub fn load_any(
    ckpt: &Checkpoint,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Vec<(String, ModelInfo)>, ModelError> {
    let mt = model_type(ckpt)?;
    let mut out = Vec::new();
    let has_vision = [
        "clip",
        "clip_vision_model",
        "siglip",
        "siglip_vision_model",
        "dinov2",
        "dinov2_with_registers",
        "vit",
        "vit_mae",
    ]
    .contains(&mt.as_str());
    let has_text = [
        "clip",
        "clip_text_model",
        "siglip",
        "siglip_text_model",
        "bert",
    ]
    .contains(&mt.as_str());
    if has_vision {
        out.push((
            "vision".to_string(),
            load_vision(ckpt, device, opts)?.info(),
        ));
    }
    if has_text {
        out.push(("text".to_string(), load_text(ckpt, device, opts)?.info()));
    }
    if out.is_empty() {
        return Err(unsupported(
            ckpt,
            &mt,
            "encoder",
            &format!("{VISION_TYPES}, bert"),
        ));
    }
    Ok(out)
}
