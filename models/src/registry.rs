//! Building the right model from a checkpoint's `config.json`: one table, one row per
//! `model_type` ([`ARCHITECTURES`]).
//!
//! | `model_type` | HF class | vision tower | text tower |
//! |---|---|---|---|
//! | `clip` | `CLIPModel` | [`crate::clip`] vision + `visual_projection` | [`crate::clip`] text + `text_projection` |
//! | `clip_vision_model` | `CLIPVisionModelWithProjection`, `CLIPVisionModel` | [`crate::clip::ClipVisionModel`] | — |
//! | `clip_text_model` | `CLIPTextModelWithProjection`, `CLIPTextModel` | — | [`crate::clip::ClipTextModel`] |
//! | `siglip` | `SiglipModel` | [`crate::siglip`] vision + MAP head | [`crate::siglip`] text + head |
//! | `siglip_vision_model` | `SiglipVisionModel` | [`crate::siglip::SiglipVisionModel`] | — |
//! | `siglip_text_model` | `SiglipTextModel` | — | [`crate::siglip::SiglipTextModel`] |
//! | `dinov2`, `dinov2_with_registers` | `Dinov2Model`, `Dinov2WithRegistersModel` | [`crate::dinov2::Dinov2Model`] | — |
//! | `vit` | `ViTModel` | [`crate::vit::ViTModel`] | — |
//! | `vit_mae` | `ViTMAEModel` | [`crate::vit_mae::ViTMAEModel`] | — |
//! | `ijepa` | `IJepaModel` | [`crate::ijepa::IJepaModel`] | — |
//! | `beit` | `BeitModel` (also the encoder of `BeitForMaskedImageModeling`, `BeitForImageClassification`) | [`crate::beit::BeitModel`] | — |
//! | `eva` | timm `Eva` (a timm repository whose `architecture` is `eva02_*` / `eva_*`; EVA-CLIP towers keep `head` as their projection) | [`crate::eva::EvaModel`] | — |
//! | `convnext` | `ConvNextModel` | [`crate::convnext::ConvNextModel`] | — |
//! | `resnet`, `resnet18` … `resnet152` | torchvision `ResNet` (a `.pth` without `config.json`: `--arch`, or inferred from its keys) | [`crate::resnet::ResNetModel`] | — |
//! | `bert` | `BertModel` | — | [`crate::bert::BertModel`] |
//!
//! and the decoder language models ([`CausalLm`], the `causal_lm` column):
//!
//! | `model_type` | HF class | decoder |
//! |---|---|---|
//! | `llama` | `LlamaForCausalLM` | [`crate::llama::LlamaForCausalLM`] |
//! | `qwen2` | `Qwen2ForCausalLM` | [`crate::qwen2`] (Llama blocks, q/k/v biases) |
//! | `qwen3` | `Qwen3ForCausalLM` | [`crate::qwen3`] (Llama blocks, per-head q/k norms) |
//!
//! A PyTorch pickle without `config.json` ([`Checkpoint::pytorch_file`]) is read as the
//! architecture [`LoadOptions::arch`] names (`--arch`), or the one its keys say it is
//! ([`crate::nn::model_type`]).
//!
//! A standalone tower is loaded in every key layout transformers 4.x and 5.x write for it (5.x
//! saves `CLIPVisionModel`, `CLIPTextModel`, `SiglipVisionModel`, `SiglipTextModel` without the
//! `vision_model.` / `text_model.` prefix), told apart by the keys present
//! ([`crate::clip::TowerLayout`]).
//!
//! The `model_type` strings are the model files' `MODEL_TYPE` constants; a new architecture adds
//! one row here.
//!
//! A model loaded onto an autodiff device is frozen ([`burn::module::Module::no_grad`]): its
//! parameters never collect gradients, so a backward pass costs only the input gradients.

use crate::{CausalLm, ModelError, ModelInfo, TextEncoder, VisionEncoder};
use crate::{
    beit, bert, clip, convnext, dinov2, eva, ijepa, llama, qwen2, qwen3, resnet, siglip, vit,
    vit_mae,
};
use bindscope_core::{Checkpoint, LoadOptions};
use burn::module::Module;
use burn::tensor::Device;

pub use crate::nn::model_type;

/// Loads a vision tower from a checkpoint.
pub type VisionLoader =
    fn(&Checkpoint, &Device, &LoadOptions) -> Result<Box<dyn VisionEncoder>, ModelError>;
/// Loads a text tower from a checkpoint.
pub type TextLoader =
    fn(&Checkpoint, &Device, &LoadOptions) -> Result<Box<dyn TextEncoder>, ModelError>;

/// Loads a decoder language model from a checkpoint.
pub type CausalLmLoader =
    fn(&Checkpoint, &Device, &LoadOptions) -> Result<Box<dyn CausalLm>, ModelError>;

/// One row of the registry: the `model_type`s a Hugging Face class writes and the towers this
/// crate builds from them.
#[derive(Debug, Clone, Copy)]
pub struct Architecture {
    /// `model_type` values of `config.json` this row handles.
    pub model_types: &'static [&'static str],
    /// The transformers class the weights come from (for messages and `info`).
    pub hf_class: &'static str,
    /// The vision tower, if the architecture has one.
    pub vision: Option<VisionLoader>,
    /// The text tower, if the architecture has one.
    pub text: Option<TextLoader>,
    /// The decoder language model, if the architecture is one.
    pub causal_lm: Option<CausalLmLoader>,
}

fn freeze<M: Module>(m: M, device: &Device) -> M {
    if device.is_autodiff() { m.no_grad() } else { m }
}

fn boxed_vision<M: VisionEncoder + Module + 'static>(
    m: Result<M, ModelError>,
    device: &Device,
) -> Result<Box<dyn VisionEncoder>, ModelError> {
    Ok(Box::new(freeze(m?, device)))
}

fn boxed_lm<M: CausalLm + Module + 'static>(
    m: Result<M, ModelError>,
    device: &Device,
) -> Result<Box<dyn CausalLm>, ModelError> {
    Ok(Box::new(freeze(m?, device)))
}

fn boxed_text<M: TextEncoder + Module + 'static>(
    m: Result<M, ModelError>,
    device: &Device,
) -> Result<Box<dyn TextEncoder>, ModelError> {
    Ok(Box::new(freeze(m?, device)))
}

const CLIP_VISION: VisionLoader = |c, d, o| boxed_vision(clip::ClipVisionModel::load(c, d, o), d);
const CLIP_TEXT: TextLoader = |c, d, o| boxed_text(clip::ClipTextModel::load(c, d, o), d);
const SIGLIP_VISION: VisionLoader =
    |c, d, o| boxed_vision(siglip::SiglipVisionModel::load(c, d, o), d);
const SIGLIP_TEXT: TextLoader = |c, d, o| boxed_text(siglip::SiglipTextModel::load(c, d, o), d);

/// Every architecture this crate loads, one row per Hugging Face class.
pub const ARCHITECTURES: &[Architecture] = &[
    Architecture {
        model_types: &[clip::MODEL_TYPE],
        hf_class: "CLIPModel",
        vision: Some(CLIP_VISION),
        text: Some(CLIP_TEXT),
        causal_lm: None,
    },
    Architecture {
        model_types: &[clip::VISION_MODEL_TYPE],
        hf_class: "CLIPVisionModelWithProjection / CLIPVisionModel",
        vision: Some(CLIP_VISION),
        text: None,
        causal_lm: None,
    },
    Architecture {
        model_types: &[clip::TEXT_MODEL_TYPE],
        hf_class: "CLIPTextModelWithProjection / CLIPTextModel",
        vision: None,
        text: Some(CLIP_TEXT),
        causal_lm: None,
    },
    Architecture {
        model_types: &[siglip::MODEL_TYPE],
        hf_class: "SiglipModel",
        vision: Some(SIGLIP_VISION),
        text: Some(SIGLIP_TEXT),
        causal_lm: None,
    },
    Architecture {
        model_types: &[siglip::VISION_MODEL_TYPE],
        hf_class: "SiglipVisionModel",
        vision: Some(SIGLIP_VISION),
        text: None,
        causal_lm: None,
    },
    Architecture {
        model_types: &[siglip::TEXT_MODEL_TYPE],
        hf_class: "SiglipTextModel",
        vision: None,
        text: Some(SIGLIP_TEXT),
        causal_lm: None,
    },
    Architecture {
        model_types: dinov2::MODEL_TYPES,
        hf_class: "Dinov2Model",
        vision: Some(|c, d, o| boxed_vision(dinov2::Dinov2Model::load(c, d, o), d)),
        text: None,
        causal_lm: None,
    },
    Architecture {
        model_types: &[vit::MODEL_TYPE],
        hf_class: "ViTModel",
        vision: Some(|c, d, o| boxed_vision(vit::ViTModel::load(c, d, o), d)),
        text: None,
        causal_lm: None,
    },
    Architecture {
        model_types: &[vit_mae::MODEL_TYPE],
        hf_class: "ViTMAEModel",
        vision: Some(|c, d, o| boxed_vision(vit_mae::ViTMAEModel::load(c, d, o), d)),
        text: None,
        causal_lm: None,
    },
    Architecture {
        model_types: &[ijepa::MODEL_TYPE],
        hf_class: "IJepaModel",
        vision: Some(|c, d, o| boxed_vision(ijepa::IJepaModel::load(c, d, o), d)),
        text: None,
        causal_lm: None,
    },
    Architecture {
        model_types: &[beit::MODEL_TYPE],
        hf_class: "BeitModel",
        vision: Some(|c, d, o| boxed_vision(beit::BeitModel::load(c, d, o), d)),
        text: None,
        causal_lm: None,
    },
    Architecture {
        model_types: &[eva::MODEL_TYPE],
        hf_class: "timm.models.eva.Eva",
        vision: Some(|c, d, o| boxed_vision(eva::EvaModel::load(c, d, o), d)),
        text: None,
        causal_lm: None,
    },
    Architecture {
        model_types: &[convnext::MODEL_TYPE],
        hf_class: "ConvNextModel",
        vision: Some(|c, d, o| boxed_vision(convnext::ConvNextModel::load(c, d, o), d)),
        text: None,
        causal_lm: None,
    },
    Architecture {
        model_types: resnet::MODEL_TYPES,
        hf_class: "torchvision.models.ResNet",
        vision: Some(|c, d, o| boxed_vision(resnet::ResNetModel::load(c, d, o), d)),
        text: None,
        causal_lm: None,
    },
    Architecture {
        model_types: &[bert::MODEL_TYPE],
        hf_class: "BertModel",
        vision: None,
        text: Some(|c, d, o| boxed_text(bert::BertModel::load(c, d, o), d)),
        causal_lm: None,
    },
    Architecture {
        model_types: &[llama::MODEL_TYPE],
        hf_class: "LlamaForCausalLM",
        vision: None,
        text: None,
        causal_lm: Some(|c, d, o| boxed_lm(llama::LlamaForCausalLM::load(c, d, o), d)),
    },
    Architecture {
        model_types: &[qwen2::MODEL_TYPE],
        hf_class: "Qwen2ForCausalLM",
        vision: None,
        text: None,
        causal_lm: Some(|c, d, o| boxed_lm(qwen2::load(c, d, o), d)),
    },
    Architecture {
        model_types: &[qwen3::MODEL_TYPE],
        hf_class: "Qwen3ForCausalLM",
        vision: None,
        text: None,
        causal_lm: Some(|c, d, o| boxed_lm(qwen3::load(c, d, o), d)),
    },
];

/// The row that handles `model_type`, if any.
pub fn find(model_type: &str) -> Option<&'static Architecture> {
    ARCHITECTURES
        .iter()
        .find(|a| a.model_types.contains(&model_type))
}

/// `ckpt` read as `opts.arch` when one is given ([`Checkpoint::with_arch`]).
///
/// # Errors
/// [`ModelError::Unsupported`] for an `--arch` no PyTorch pickle is read as
/// ([`PICKLE_ARCHES`]); as [`Checkpoint::with_arch`] for a checkpoint with `config.json`.
fn with_arch(ckpt: &Checkpoint, opts: &LoadOptions) -> Result<Checkpoint, ModelError> {
    if let Some(arch) = &opts.arch
        && !PICKLE_ARCHES.contains(&arch.as_str())
    {
        return Err(ModelError::Unsupported {
            file: ckpt.config.display().to_string(),
            message: format!(
                "--arch {arch}: a PyTorch checkpoint without config.json is read as one of \
                 {PICKLE_ARCHES:?}"
            ),
        });
    }
    Ok(ckpt.clone().with_arch(opts.arch.as_deref())?)
}

/// The architectures a PyTorch pickle without `config.json` can be read as (`--arch`).
pub const PICKLE_ARCHES: &[&str] = resnet::MODEL_TYPES;

/// The `model_type`s of the rows `has` selects, comma-separated, for error messages.
fn supported(has: impl Fn(&Architecture) -> bool) -> String {
    ARCHITECTURES
        .iter()
        .filter(|a| has(a))
        .flat_map(|a| a.model_types.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

fn unsupported(ckpt: &Checkpoint, mt: &str, what: &str, known: &str) -> ModelError {
    ModelError::Unsupported {
        file: ckpt.config.display().to_string(),
        message: format!("model_type '{mt}' has no {what} here (supported: {known})"),
    }
}

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
    let ckpt = &with_arch(ckpt, opts)?;
    let mt = model_type(ckpt)?;
    match find(&mt).and_then(|a| a.vision) {
        Some(load) => load(ckpt, device, opts),
        None => Err(unsupported(
            ckpt,
            &mt,
            "vision encoder",
            &supported(|a| a.vision.is_some()),
        )),
    }
}

/// Loads the text encoder of a checkpoint. A sentence-transformers checkpoint
/// ([`Checkpoint::sentence_transformers`]) embeds as its modules say (BERT only: see
/// [`crate::bert`]).
///
/// # Errors
/// [`ModelError`] for unreadable configs, unsupported architectures or mismatching weights; a
/// sentence-transformers pipeline over another architecture than BERT is
/// [`ModelError::Unsupported`] (naming its `modules.json`) rather than silently embedded another
/// way.
pub fn load_text(
    ckpt: &Checkpoint,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Box<dyn TextEncoder>, ModelError> {
    let ckpt = &with_arch(ckpt, opts)?;
    let mt = model_type(ckpt)?;
    if mt != bert::MODEL_TYPE
        && let Some(st) = ckpt.sentence_transformers()?
    {
        return Err(ModelError::Unsupported {
            file: st.modules_file.display().to_string(),
            message: format!(
                "a sentence-transformers pipeline over model_type '{mt}' is not implemented \
                 (only over {}); remove modules.json to use the model's own text embedding",
                bert::MODEL_TYPE
            ),
        });
    }
    match find(&mt).and_then(|a| a.text) {
        Some(load) => load(ckpt, device, opts),
        None => Err(unsupported(
            ckpt,
            &mt,
            "text encoder",
            &supported(|a| a.text.is_some()),
        )),
    }
}

/// Loads the decoder language model of a checkpoint.
///
/// # Errors
/// [`ModelError`] for unreadable configs, unsupported architectures (naming the `model_type`s
/// that are decoders) or mismatching weights.
pub fn load_causal_lm(
    ckpt: &Checkpoint,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Box<dyn CausalLm>, ModelError> {
    let ckpt = &with_arch(ckpt, opts)?;
    let mt = model_type(ckpt)?;
    match find(&mt).and_then(|a| a.causal_lm) {
        Some(load) => load(ckpt, device, opts),
        None => Err(unsupported(
            ckpt,
            &mt,
            "decoder language model",
            &supported(|a| a.causal_lm.is_some()),
        )),
    }
}

/// A model opened from a `--model` spec (a Hugging Face id or a local directory), with what a
/// study records beside it: the resolved checkpoint files and the sha256 of its weights.
pub struct Opened<M> {
    /// The resolved checkpoint.
    pub checkpoint: Checkpoint,
    /// [`Checkpoint::weights_sha256`] of its weight files.
    pub weights_sha256: String,
    /// The loaded model.
    pub model: M,
}

/// The load sequence of every study: resolve `spec`, hash its weights, load its vision
/// encoder on `device`.
///
/// # Errors
/// [`ModelError::Checkpoint`] when `spec` does not resolve or a weight file cannot be read;
/// otherwise as [`load_vision`].
pub fn open_vision(
    spec: &str,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Opened<Box<dyn VisionEncoder>>, ModelError> {
    let checkpoint = Checkpoint::resolve(spec)?;
    let weights_sha256 = checkpoint.weights_sha256()?;
    let model = load_vision(&checkpoint, device, opts)?;
    Ok(Opened {
        checkpoint,
        weights_sha256,
        model,
    })
}

/// [`open_vision`] for the text encoder ([`load_text`]).
///
/// # Errors
/// As [`open_vision`] and [`load_text`].
pub fn open_text(
    spec: &str,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Opened<Box<dyn TextEncoder>>, ModelError> {
    let checkpoint = Checkpoint::resolve(spec)?;
    let weights_sha256 = checkpoint.weights_sha256()?;
    let model = load_text(&checkpoint, device, opts)?;
    Ok(Opened {
        checkpoint,
        weights_sha256,
        model,
    })
}

/// [`open_vision`] for the decoder language model ([`load_causal_lm`]).
///
/// # Errors
/// As [`open_vision`] and [`load_causal_lm`].
pub fn open_causal_lm(
    spec: &str,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Opened<Box<dyn CausalLm>>, ModelError> {
    let checkpoint = Checkpoint::resolve(spec)?;
    let weights_sha256 = checkpoint.weights_sha256()?;
    let model = load_causal_lm(&checkpoint, device, opts)?;
    Ok(Opened {
        checkpoint,
        weights_sha256,
        model,
    })
}

/// Loads every tower the checkpoint has and returns `(tower, info)` pairs (`"vision"`,
/// `"text"`, `"decoder"`), for `experiments info`.
///
/// # Errors
/// As [`load_vision`] / [`load_text`]; an architecture with neither tower is
/// [`ModelError::Unsupported`].
pub fn load_any(
    ckpt: &Checkpoint,
    device: &Device,
    opts: &LoadOptions,
) -> Result<Vec<(String, ModelInfo)>, ModelError> {
    let ckpt = &with_arch(ckpt, opts)?;
    let mt = model_type(ckpt)?;
    let Some(arch) = find(&mt) else {
        return Err(unsupported(ckpt, &mt, "model", &supported(|_| true)));
    };
    let mut out = Vec::new();
    if let Some(load) = arch.vision {
        out.push(("vision".to_string(), load(ckpt, device, opts)?.info()));
    }
    if let Some(load) = arch.text {
        out.push(("text".to_string(), load(ckpt, device, opts)?.info()));
    }
    if let Some(load) = arch.causal_lm {
        out.push(("decoder".to_string(), load(ckpt, device, opts)?.info()));
    }
    Ok(out)
}
