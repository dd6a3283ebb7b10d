//! `preprocessor_config.json` → `pixel_values`, as the transformers image processors compute
//! them on their PIL backend (`CLIPImageProcessorPil`, `SiglipImageProcessorPil`,
//! `BitImageProcessorPil`, `ViTImageProcessorPil`, `ConvNextImageProcessorPil`,
//! `BeitImageProcessorPil` of transformers
//! 5.x, what `AutoImageProcessor.from_pretrained(dir, backend="pil")` returns; the same numbers
//! as 4.x's slow processors, `use_fast=False`), and torchvision's ImageNet evaluation transform
//! for PyTorch releases without a processor config ([`ProcessorKind::TorchvisionImageNet`]).
//!
//! Per image, in this order, each step only if its flag is set:
//! 1. resize with Pillow (uint8 in, uint8 out, [`resize`](super::resample::resize)): to
//!    `size = {height, width}` as given, or, for CLIP / Bit with `size = {shortest_edge: s}`, the
//!    short side to `s` and the long side to `int(s * long / short)` (Python truncation);
//! 2. center crop to `crop_size` (CLIP / Bit): offsets `(H - h) // 2`, `(W - w) // 2` (floor);
//!    an image smaller than the crop is zero-padded first, `ceil((h - H) / 2)` rows on top, as
//!    `transformers.image_transforms.center_crop` does;
//! 3. rescale: `f32(x as f64 * rescale_factor)` (numpy upcasts to float64, then downcasts);
//! 4. normalize: `(x - mean) / std` in f32 with mean / std cast to f32.
//!
//! The `image_processor_type` field (or the legacy `feature_extractor_type`) picks the class,
//! whose defaults fill the missing keys. A `...Fast` (4.x) or `...Pil` (5.x) type is treated
//! as its base class. Other classes are an error. `do_convert_rgb` is read but has no effect:
//! [`decode_file`](super::decode_file) always yields RGB (what 5.x's `convert_to_rgb` gives,
//! see [`Alpha`](super::Alpha) for transparency).
//!
//! # The torchvision backend
//! When torchvision is installed, transformers 5.x's `AutoImageProcessor.from_pretrained(dir)`
//! returns the torchvision backend (`CLIPImageProcessor`, `SiglipImageProcessor`,
//! `BitImageProcessor`, `ViTImageProcessor`: 4.x's "fast" processors) for CLIP, SigLIP,
//! DINOv2, ViT and ViT-MAE checkpoints; without torchvision it returns the PIL backend. Both
//! see the same RGB image (the same `convert_to_rgb`, transparency included); they differ in
//! the resize: torchvision's antialiased uint8 resize (`torchvision.transforms.v2.functional
//! .resize`, whose kernels depend on the CPU's instruction set and on the device) rounds
//! differently from Pillow's. Measured with transformers 5.24.0 / torchvision 0.29.2 on CPU at
//! the real checkpoints' settings (224 px, bicubic or bilinear, smooth noisy test images of
//! 80×100 to 1024×768): resized pixels differ by at most 1 uint8 level on 0.1–2.5 % of the
//! values, and by up to 4 levels on about 24 % of them where a resize to a fixed
//! `{height, width}` changes the aspect ratio (500×300 → 224×224, SigLIP, ViT-MAE bicubic); in
//! `pixel_values` at most 0.07. bindscope reproduces the PIL backend, which is deterministic
//! across machines; pass `backend="pil"` to transformers to compare bit for bit.
//! The torchvision backend also pads a crop larger than the image with the extra row at the
//! bottom (`(h - H) // 2` on top) where the PIL backend puts it on top.

use super::resample::{Filter, resize};
use super::{ImageError, RgbImage};
use burn::tensor::{Device, Tensor, TensorData};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The transformers image processor class being reproduced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessorKind {
    /// `CLIPImageProcessor`: shortest-edge bicubic resize, center crop (defaults 224 / 224),
    /// OpenAI CLIP mean / std.
    Clip,
    /// `SiglipImageProcessor`: resize to `{height, width}` (no aspect preservation, default
    /// bicubic), mean / std 0.5, no crop.
    Siglip,
    /// `BitImageProcessor` (DINOv2 checkpoints): as CLIP (DINOv2 configs: shortest edge 256,
    /// crop 224, ImageNet mean / std).
    Bit,
    /// `ViTImageProcessor` (ViT, ViT-MAE): resize to `{height, width}` (default bilinear 224),
    /// mean / std 0.5, no crop.
    Vit,
    /// `ConvNextImageProcessor` (ConvNeXt): `size = {shortest_edge: s}` with `crop_pct`
    /// (default 224 / 256): below 384 the short side is resized to `int(s / crop_pct)` and
    /// the center `s × s` cropped; from 384 on the image is resized to `s × s`. Read into the
    /// equivalent resize and crop (the fields of [`ImageProcessor`]). Default bicubic, mean /
    /// std 0.5.
    ConvNext,
    /// `BeitImageProcessor` (BEiT): resize to `{height, width}` (an integer `size` is a square;
    /// default bicubic 224), optional center crop (default off, 224), mean / std 0.5.
    Beit,
    /// torchvision's ImageNet evaluation transform on a PIL image, for checkpoints that come
    /// without a processor config (a `.pth` release): `Resize(256)` (short side, Pillow
    /// bilinear), `CenterCrop(224)` (offsets `int(round((H - h) / 2))`, Python's half-to-even
    /// rounding; a too-small side zero-padded `(h - H) // 2` on top), `ToTensor()` (`x / 255`
    /// in f32), `Normalize` with the ImageNet mean / std. Not read from a config file: see
    /// [`ImageProcessor::for_checkpoint`].
    TorchvisionImageNet,
    /// `LlavaOnevisionImageProcessor` (PIL backend): its base view, a resize to
    /// `{height, width}` (default bicubic 384 x 384, no aspect preservation), OpenAI CLIP
    /// mean / std, no crop. Only [`super::anyres::AnyresProcessor`] builds it (with the tiles
    /// around the base view): the class name alone is refused, as a plain processor would hand
    /// out the base view only.
    LlavaOnevision,
}

impl ProcessorKind {
    /// From `image_processor_type` / `feature_extractor_type`.
    ///
    /// # Errors
    /// [`ImageError::Config`] for a class this module does not reproduce.
    pub fn from_type_name(name: &str) -> Result<Self, ImageError> {
        let base = name
            .strip_suffix("Fast")
            .or_else(|| name.strip_suffix("Pil"))
            .unwrap_or(name);
        Ok(match base {
            "CLIPImageProcessor" | "CLIPFeatureExtractor" => Self::Clip,
            "SiglipImageProcessor" => Self::Siglip,
            "BitImageProcessor" => Self::Bit,
            "ViTImageProcessor" | "ViTFeatureExtractor" => Self::Vit,
            "ConvNextImageProcessor" | "ConvNextFeatureExtractor" => Self::ConvNext,
            "BeitImageProcessor" | "BeitFeatureExtractor" => Self::Beit,
            _ => {
                return Err(ImageError::Config {
                    path: None,
                    message: format!(
                        "image processor '{name}' is not supported (CLIPImageProcessor, SiglipImageProcessor, \
                         BitImageProcessor, ViTImageProcessor, ConvNextImageProcessor, BeitImageProcessor; LlavaOnevisionImageProcessor is read by AnyresProcessor)"
                    ),
                });
            }
        })
    }
}

/// Target of the resize step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeTo {
    /// `{"shortest_edge": s}`: short side to `s`, aspect kept (CLIP, Bit).
    ShortestEdge(usize),
    /// `{"height": h, "width": w}`: exactly this size.
    Exact {
        /// Output height.
        height: usize,
        /// Output width.
        width: usize,
    },
}

/// A transformers slow image processor, as read from `preprocessor_config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    /// The class reproduced.
    pub kind: ProcessorKind,
    /// `do_resize`.
    pub do_resize: bool,
    /// `size`.
    pub size: ResizeTo,
    /// `resample` (Pillow filter code).
    pub resample: Filter,
    /// `do_center_crop` (always false for Siglip / ViT).
    pub do_center_crop: bool,
    /// `crop_size` as `(height, width)`.
    pub crop_size: (usize, usize),
    /// `do_rescale`.
    pub do_rescale: bool,
    /// `rescale_factor` (f64, as Python keeps it).
    pub rescale_factor: f64,
    /// `do_normalize`.
    pub do_normalize: bool,
    /// `image_mean` (cast to f32 as numpy does).
    pub image_mean: [f32; 3],
    /// `image_std` (cast to f32 as numpy does).
    pub image_std: [f32; 3],
    /// `do_convert_rgb` (read for completeness; decoding always yields RGB).
    pub do_convert_rgb: bool,
}

const OPENAI_CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
const OPENAI_CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];
const IMAGENET_STANDARD: [f64; 3] = [0.5, 0.5, 0.5];
const IMAGENET_MEAN: [f64; 3] = [0.485, 0.456, 0.406];
const IMAGENET_STD: [f64; 3] = [0.229, 0.224, 0.225];

fn f32x3(v: [f64; 3]) -> [f32; 3] {
    v.map(|x| x as f32)
}

/// One image after preprocessing: `[3, height, width]` f32, channel-first.
#[derive(Debug, Clone, PartialEq)]
pub struct PixelValues {
    /// Output height.
    pub height: usize,
    /// Output width.
    pub width: usize,
    /// `3 * height * width` values, channel-first (`[c][y][x]`).
    pub data: Vec<f32>,
}

/// A batch: `pixel_values` `[N, 3, H, W]` on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct PixelBatch {
    /// `[N, 3, H, W]`.
    pub shape: [usize; 4],
    /// `N * 3 * H * W` values, row-major.
    pub data: Vec<f32>,
}

impl PixelBatch {
    /// As a burn tensor `[N, 3, H, W]` (f32) on `device`.
    pub fn to_tensor(&self, device: &Device) -> Tensor<4> {
        Tensor::from_data(TensorData::new(self.data.clone(), self.shape), device)
    }
}

/// Reads the JSON file `path` and parses it with `parse`; a config error without a file (from
/// `parse`, or the JSON itself) is reported naming `path`.
pub(super) fn read_config_file<T>(
    path: &Path,
    parse: impl FnOnce(&Value) -> Result<T, ImageError>,
) -> Result<T, ImageError> {
    let text = std::fs::read_to_string(path).map_err(|source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| cfg_err(Some(path), format!("invalid JSON: {e}")))?;
    parse(&v).map_err(|e| match e {
        ImageError::Config {
            path: None,
            message,
        } => cfg_err(Some(path), message),
        e => e,
    })
}

fn cfg_err(path: Option<&Path>, message: impl Into<String>) -> ImageError {
    ImageError::Config {
        path: path.map(Path::to_path_buf),
        message: message.into(),
    }
}

impl ImageProcessor {
    /// The class defaults (what `XImageProcessor()` gives with no arguments).
    pub fn defaults(kind: ProcessorKind) -> Self {
        let (size, resample, crop, mean, std) = match kind {
            ProcessorKind::Clip | ProcessorKind::Bit => (
                ResizeTo::ShortestEdge(224),
                Filter::Bicubic,
                true,
                OPENAI_CLIP_MEAN,
                OPENAI_CLIP_STD,
            ),
            ProcessorKind::Siglip | ProcessorKind::Beit => (
                ResizeTo::Exact {
                    height: 224,
                    width: 224,
                },
                Filter::Bicubic,
                false,
                IMAGENET_STANDARD,
                IMAGENET_STANDARD,
            ),
            ProcessorKind::Vit => (
                ResizeTo::Exact {
                    height: 224,
                    width: 224,
                },
                Filter::Bilinear,
                false,
                IMAGENET_STANDARD,
                IMAGENET_STANDARD,
            ),
            ProcessorKind::ConvNext => (
                ResizeTo::ShortestEdge(384),
                Filter::Bicubic,
                false,
                IMAGENET_STANDARD,
                IMAGENET_STANDARD,
            ),
            ProcessorKind::LlavaOnevision => (
                ResizeTo::Exact {
                    height: 384,
                    width: 384,
                },
                Filter::Bicubic,
                false,
                OPENAI_CLIP_MEAN,
                OPENAI_CLIP_STD,
            ),
            ProcessorKind::TorchvisionImageNet => (
                ResizeTo::ShortestEdge(256),
                Filter::Bilinear,
                true,
                IMAGENET_MEAN,
                IMAGENET_STD,
            ),
        };
        Self {
            kind,
            do_resize: true,
            size,
            resample,
            do_center_crop: crop,
            crop_size: (224, 224),
            do_rescale: true,
            rescale_factor: 1.0 / 255.0,
            do_normalize: true,
            image_mean: f32x3(mean),
            image_std: f32x3(std),
            // transformers 5.x class defaults: True except ViT (None).
            do_convert_rgb: kind != ProcessorKind::Vit,
        }
    }

    /// Reads a `preprocessor_config.json`.
    ///
    /// # Errors
    /// [`ImageError::Io`] if unreadable, [`ImageError::Config`] (naming the file) if malformed,
    /// of an unsupported class, or with a setting the class would reject.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ImageError> {
        read_config_file(path.as_ref(), |v| Self::from_json(v, None))
    }

    /// The checkpoint's own processor, from its `preprocessor_config.json`: what
    /// `--normalize model` reads (its `image_mean` / `image_std`, and its resize and crop) and
    /// what real images are preprocessed with. Callers name their flag in the error's context.
    ///
    /// # Errors
    /// [`ImageError::Config`] naming the checkpoint directory when it has no
    /// `preprocessor_config.json`; otherwise as [`ImageProcessor::for_checkpoint_if_any`].
    pub fn for_checkpoint(ckpt: &bindscope_core::Checkpoint) -> Result<Self, ImageError> {
        Self::for_checkpoint_if_any(ckpt)?.ok_or_else(|| {
            cfg_err(
                None,
                if ckpt
                    .config_json()
                    .is_ok_and(|v| v.get("architecture").is_some())
                {
                    format!(
                        "{} has no preprocessor_config.json, and its timm config.json no \
                         pretrained_cfg (where timm keeps the evaluation transform)",
                        ckpt.dir().display()
                    )
                } else {
                    format!("{} has no preprocessor_config.json", ckpt.dir().display())
                },
            )
        })
    }

    /// As [`ImageProcessor::for_checkpoint`], with `Ok(None)` for a checkpoint that carries no
    /// preprocessing at all: no `preprocessor_config.json`, no timm `pretrained_cfg`, and not a
    /// PyTorch `.pth` release (which gets torchvision's ImageNet transform).
    ///
    /// # Errors
    /// As [`ImageProcessor::from_file`] for a `preprocessor_config.json`, as
    /// [`ImageProcessor::from_timm_config`] (naming `config.json`) for a `pretrained_cfg`.
    pub fn for_checkpoint_if_any(
        ckpt: &bindscope_core::Checkpoint,
    ) -> Result<Option<Self>, ImageError> {
        match &ckpt.preprocessor_config {
            Some(p) => Self::from_file(p).map(Some),
            // A timm repository: its `config.json` carries the evaluation transform.
            None if !ckpt.is_pytorch_file()
                && ckpt
                    .config_json()
                    .is_ok_and(|v| v.get("pretrained_cfg").is_some()) =>
            {
                let v = ckpt
                    .config_json()
                    .map_err(|e| cfg_err(None, e.to_string()))?;
                Self::from_timm_config(&v).map(Some).map_err(|e| match e {
                    ImageError::Config {
                        path: None,
                        message,
                    } => cfg_err(Some(&ckpt.config), message),
                    e => e,
                })
            }
            // A bare PyTorch release: the transform its authors evaluate with.
            None if ckpt.is_pytorch_file() => {
                Ok(Some(Self::defaults(ProcessorKind::TorchvisionImageNet)))
            }
            None => Ok(None),
        }
    }

    /// timm's evaluation transform (`timm.data.resolve_data_config` + `create_transform`, timm
    /// 1.0) from the `pretrained_cfg` of a timm `config.json`: with `crop_mode` `center` (the
    /// default) and `crop_pct` (default 0.875), resize to `floor(side / crop_pct)` — the short
    /// side for a square `input_size`, both sides otherwise — with the `interpolation` filter
    /// (default bicubic) on the PIL image, center crop to `input_size` (torchvision's offsets),
    /// `ToTensor` (`x / 255` in f32), `Normalize(mean, std)` (default ImageNet). Reproduced
    /// as [`ProcessorKind::TorchvisionImageNet`] with those sizes, filter and statistics.
    ///
    /// # Errors
    /// [`ImageError::Config`] for a missing `pretrained_cfg`, another `crop_mode`, an unknown
    /// `interpolation` or a malformed field.
    pub fn from_timm_config(config: &Value) -> Result<Self, ImageError> {
        let cfg = config
            .get("pretrained_cfg")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                cfg_err(
                    None,
                    "no pretrained_cfg object (a timm config.json has one)",
                )
            })?;
        let mut p = Self::defaults(ProcessorKind::TorchvisionImageNet);
        let [h, w] = match cfg.get("input_size").filter(|v| !v.is_null()) {
            None => [224, 224],
            Some(v) => {
                let dims: Option<Vec<usize>> = v.as_array().map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_u64().map(|n| n as usize))
                        .collect()
                });
                match dims.as_deref() {
                    Some([3, h, w]) if *h > 0 && *w > 0 => [*h, *w],
                    _ => {
                        return Err(cfg_err(
                            None,
                            format!("pretrained_cfg.input_size must be [3, H, W], got {v}"),
                        ));
                    }
                }
            }
        };
        let crop_mode = cfg
            .get("crop_mode")
            .and_then(Value::as_str)
            .unwrap_or("center");
        if crop_mode != "center" {
            return Err(cfg_err(
                None,
                format!("pretrained_cfg.crop_mode '{crop_mode}' is not supported (center)"),
            ));
        }
        let crop_pct = match cfg.get("crop_pct").filter(|v| !v.is_null()) {
            None => 0.875,
            Some(v) => v.as_f64().filter(|c| *c > 0.0).ok_or_else(|| {
                cfg_err(
                    None,
                    format!("pretrained_cfg.crop_pct must be a positive number, got {v}"),
                )
            })?,
        };
        let scale = |side: usize| (side as f64 / crop_pct).floor() as usize;
        p.size = if h == w {
            ResizeTo::ShortestEdge(scale(h))
        } else {
            ResizeTo::Exact {
                height: scale(h),
                width: scale(w),
            }
        };
        p.crop_size = (h, w);
        p.resample = match cfg
            .get("interpolation")
            .and_then(Value::as_str)
            .unwrap_or("bicubic")
        {
            "bicubic" => Filter::Bicubic,
            "bilinear" => Filter::Bilinear,
            "nearest" => Filter::Nearest,
            "lanczos" => Filter::Lanczos,
            "box" => Filter::Box,
            "hamming" => Filter::Hamming,
            other => {
                return Err(cfg_err(
                    None,
                    format!("pretrained_cfg.interpolation '{other}' is not a PIL filter"),
                ));
            }
        };
        if let Some(m) = cfg.get("mean").filter(|v| !v.is_null()) {
            p.image_mean = triple(m, "pretrained_cfg.mean")?;
        }
        if let Some(s) = cfg.get("std").filter(|v| !v.is_null()) {
            p.image_std = triple(s, "pretrained_cfg.std")?;
        }
        if p.image_std.contains(&0.0) {
            return Err(cfg_err(None, "pretrained_cfg.std contains 0"));
        }
        Ok(p)
    }

    /// From a parsed config; `kind` overrides the `image_processor_type` field (required when
    /// the config has none).
    ///
    /// # Errors
    /// [`ImageError::Config`] as [`ImageProcessor::from_file`].
    pub fn from_json(v: &Value, kind: Option<ProcessorKind>) -> Result<Self, ImageError> {
        let obj = v
            .as_object()
            .ok_or_else(|| cfg_err(None, "preprocessor config is not a JSON object"))?;
        let kind = match kind {
            Some(k) => k,
            None => {
                let name = obj
                    .get("image_processor_type")
                    .or_else(|| obj.get("feature_extractor_type"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        cfg_err(None, "no image_processor_type (or feature_extractor_type)")
                    })?;
                ProcessorKind::from_type_name(name)?
            }
        };
        let mut p = Self::defaults(kind);
        let flag = |key: &str, default: bool| -> Result<bool, ImageError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(Value::Bool(b)) => Ok(*b),
                Some(other) => Err(cfg_err(
                    None,
                    format!("{key} must be a boolean, got {other}"),
                )),
            }
        };
        p.do_resize = flag("do_resize", p.do_resize)?;
        p.do_rescale = flag("do_rescale", p.do_rescale)?;
        p.do_normalize = flag("do_normalize", p.do_normalize)?;
        p.do_convert_rgb = flag("do_convert_rgb", p.do_convert_rgb)?;
        let crop_class = matches!(
            kind,
            ProcessorKind::Clip
                | ProcessorKind::Bit
                | ProcessorKind::Beit
                | ProcessorKind::TorchvisionImageNet
        );
        if crop_class {
            p.do_center_crop = flag("do_center_crop", p.do_center_crop)?;
        }
        if let Some(r) = obj.get("resample").filter(|v| !v.is_null()) {
            let code = r
                .as_i64()
                .ok_or_else(|| cfg_err(None, format!("resample must be an integer, got {r}")))?;
            p.resample = Filter::from_pil(code)?;
        }
        if let Some(f) = obj.get("rescale_factor").filter(|v| !v.is_null()) {
            p.rescale_factor = f.as_f64().ok_or_else(|| {
                cfg_err(None, format!("rescale_factor must be a number, got {f}"))
            })?;
        }
        if let Some(m) = obj.get("image_mean").filter(|v| !v.is_null()) {
            p.image_mean = triple(m, "image_mean")?;
        }
        if let Some(s) = obj.get("image_std").filter(|v| !v.is_null()) {
            p.image_std = triple(s, "image_std")?;
        }
        // `size`: an int means shortest_edge for CLIP / Bit / Siglip (get_size_dict with
        // default_to_square=False) and a square for ViT / BEiT; a list is (height, width).
        if let Some(s) = obj.get("size").filter(|v| !v.is_null()) {
            let square = matches!(kind, ProcessorKind::Vit | ProcessorKind::Beit);
            p.size = parse_size(s, square, "size")?;
            if obj.get("use_square_size").and_then(Value::as_bool) == Some(true)
                && let ResizeTo::ShortestEdge(e) = p.size
            {
                p.size = ResizeTo::Exact {
                    height: e,
                    width: e,
                };
            }
        }
        if matches!(
            kind,
            ProcessorKind::Siglip | ProcessorKind::Vit | ProcessorKind::LlavaOnevision
        ) && matches!(p.size, ResizeTo::ShortestEdge(_))
        {
            return Err(cfg_err(
                None,
                if kind == ProcessorKind::LlavaOnevision {
                    "LlavaOnevision processor: only size {height, width} is supported (the \
                     released checkpoints' form); size {shortest_edge} is not"
                        .to_string()
                } else {
                    format!(
                        "{kind:?} processor needs size {{height, width}}; shortest_edge is rejected by transformers"
                    )
                },
            ));
        }
        if crop_class && let Some(c) = obj.get("crop_size").filter(|v| !v.is_null()) {
            match parse_size(c, true, "crop_size")? {
                ResizeTo::Exact { height, width } => p.crop_size = (height, width),
                ResizeTo::ShortestEdge(_) => {
                    return Err(cfg_err(None, "crop_size must have height and width"));
                }
            }
        }
        if kind == ProcessorKind::ConvNext {
            p.convnext_crop_pct(obj)?;
        }
        if p.do_normalize && p.image_std.contains(&0.0) {
            return Err(cfg_err(None, "image_std contains 0"));
        }
        Ok(p)
    }

    /// `ConvNextImageProcessor`'s `crop_pct` resize as the equivalent shortest-edge resize and
    /// center crop (see [`ProcessorKind::ConvNext`]).
    fn convnext_crop_pct(
        &mut self,
        obj: &serde_json::Map<String, Value>,
    ) -> Result<(), ImageError> {
        let crop_pct = match obj.get("crop_pct").filter(|v| !v.is_null()) {
            None => 224.0 / 256.0,
            Some(v) => v.as_f64().filter(|c| *c > 0.0).ok_or_else(|| {
                cfg_err(None, format!("crop_pct must be a positive number, got {v}"))
            })?,
        };
        if obj.get("do_center_crop").and_then(Value::as_bool) == Some(true) {
            return Err(cfg_err(
                None,
                "do_center_crop true on top of ConvNextImageProcessor's crop_pct resize is not \
                 supported",
            ));
        }
        let ResizeTo::ShortestEdge(s) = self.size else {
            return Err(cfg_err(
                None,
                "ConvNextImageProcessor needs size {shortest_edge}; transformers rejects others",
            ));
        };
        if s < 384 {
            self.size = ResizeTo::ShortestEdge((s as f64 / crop_pct) as usize);
            self.do_center_crop = self.do_resize;
            self.crop_size = (s, s);
        } else {
            self.size = ResizeTo::Exact {
                height: s,
                width: s,
            };
        }
        Ok(())
    }

    /// Size `(height, width)` after the resize step for an input of `width x height`.
    pub fn resized_size(&self, width: usize, height: usize) -> (usize, usize) {
        if !self.do_resize {
            return (height, width);
        }
        match self.size {
            ResizeTo::Exact { height, width } => (height, width),
            ResizeTo::ShortestEdge(s) => {
                let (short, long) = if width <= height {
                    (width, height)
                } else {
                    (height, width)
                };
                let new_long = ((s as u64 * long as u64) as f64 / short as f64) as usize;
                if width <= height {
                    (new_long, s)
                } else {
                    (s, new_long)
                }
            }
        }
    }

    /// Output `(height, width)` for an input of `width x height`.
    pub fn output_size(&self, width: usize, height: usize) -> (usize, usize) {
        if self.do_center_crop {
            self.crop_size
        } else {
            self.resized_size(width, height)
        }
    }

    /// Resize and center crop: the uint8 image the processor normalizes.
    ///
    /// # Errors
    /// [`ImageError::Config`] for an empty (0-pixel) image.
    pub fn geometry(&self, img: &RgbImage) -> Result<RgbImage, ImageError> {
        let mut out = if self.do_resize {
            let (h, w) = self.resized_size(img.width, img.height);
            resize(img, w, h, self.resample)?
        } else {
            img.clone()
        };
        if self.do_center_crop {
            out = if self.kind == ProcessorKind::TorchvisionImageNet {
                center_crop_torchvision(&out, self.crop_size.0, self.crop_size.1)
            } else {
                center_crop(&out, self.crop_size.0, self.crop_size.1)
            };
        }
        Ok(out)
    }

    /// Rescale and normalize a uint8 image to `[3, H, W]` f32.
    pub fn normalize(&self, img: &RgbImage) -> PixelValues {
        let (h, w) = (img.height, img.width);
        let mut data = vec![0f32; 3 * h * w];
        for (i, px) in img.data.chunks_exact(3).enumerate() {
            for c in 0..3 {
                let mut x = if self.do_rescale && self.kind == ProcessorKind::TorchvisionImageNet {
                    // ToTensor: uint8 → float32, then a float32 division.
                    px[c] as f32 / (1.0 / self.rescale_factor) as f32
                } else if self.do_rescale {
                    (px[c] as f64 * self.rescale_factor) as f32
                } else {
                    px[c] as f32
                };
                if self.do_normalize {
                    x = (x - self.image_mean[c]) / self.image_std[c];
                }
                data[c * h * w + i] = x;
            }
        }
        PixelValues {
            height: h,
            width: w,
            data,
        }
    }

    /// The full pipeline on one decoded image.
    ///
    /// # Errors
    /// As [`ImageProcessor::geometry`].
    pub fn preprocess(&self, img: &RgbImage) -> Result<PixelValues, ImageError> {
        Ok(self.normalize(&self.geometry(img)?))
    }

    /// A batch on the host: `[N, 3, H, W]`.
    ///
    /// # Errors
    /// [`ImageError::Config`] for an empty batch or images that come out at different sizes
    /// (a shortest-edge resize without center crop), otherwise as [`ImageProcessor::geometry`].
    pub fn preprocess_batch(&self, imgs: &[RgbImage]) -> Result<PixelBatch, ImageError> {
        let Some(first) = imgs.first() else {
            return Err(cfg_err(None, "empty image batch"));
        };
        let mut data = Vec::new();
        let (mut h0, mut w0) = (0, 0);
        for (i, img) in imgs.iter().enumerate() {
            let pv = self.preprocess(img)?;
            if i == 0 {
                (h0, w0) = (pv.height, pv.width);
                data.reserve(imgs.len() * pv.data.len());
            } else if (pv.height, pv.width) != (h0, w0) {
                return Err(cfg_err(
                    None,
                    format!(
                        "image {i} ({}x{}) preprocesses to {}x{}, image 0 ({}x{}) to {w0}x{h0}: cannot stack a batch",
                        img.width, img.height, pv.width, pv.height, first.width, first.height
                    ),
                ));
            }
            data.extend_from_slice(&pv.data);
        }
        Ok(PixelBatch {
            shape: [imgs.len(), 3, h0, w0],
            data,
        })
    }

    /// `pixel_values` `[N, 3, H, W]` as a burn tensor on `device`.
    ///
    /// # Errors
    /// As [`ImageProcessor::preprocess_batch`].
    pub fn pixel_values(
        &self,
        imgs: &[RgbImage],
        device: &Device,
    ) -> Result<Tensor<4>, ImageError> {
        Ok(self.preprocess_batch(imgs)?.to_tensor(device))
    }

    /// Decodes files (with `opts`) and preprocesses them into `[N, 3, H, W]`.
    ///
    /// # Errors
    /// The first decoding error (naming its file), or as [`ImageProcessor::preprocess_batch`].
    pub fn pixel_values_from_files(
        &self,
        paths: &[PathBuf],
        opts: &super::DecodeOptions,
        device: &Device,
    ) -> Result<Tensor<4>, ImageError> {
        let imgs = paths
            .iter()
            .map(|p| super::decode_file(p, opts))
            .collect::<Result<Vec<_>, _>>()?;
        self.pixel_values(&imgs, device)
    }
}

fn triple(v: &Value, key: &str) -> Result<[f32; 3], ImageError> {
    if let Some(x) = v.as_f64() {
        return Ok([x as f32; 3]);
    }
    let arr = v
        .as_array()
        .ok_or_else(|| cfg_err(None, format!("{key} must be a number or a list of 3")))?;
    if arr.len() != 3 {
        return Err(cfg_err(
            None,
            format!("{key} must have 3 values (RGB), got {}", arr.len()),
        ));
    }
    let mut out = [0f32; 3];
    for (o, x) in out.iter_mut().zip(arr) {
        *o = x
            .as_f64()
            .ok_or_else(|| cfg_err(None, format!("{key} has a non-number {x}")))?
            as f32;
    }
    Ok(out)
}

/// transformers' `get_size_dict`: int → square (`square_int`) or shortest edge, list →
/// (height, width); a dict must have exactly the keys `{height, width}`, `{shortest_edge}` or
/// `{shortest_edge, longest_edge}` (the CLIP / Bit resize ignores `longest_edge`). Other key
/// sets that transformers accepts (`{longest_edge}`, `{max_height, max_width}`) are rejected
/// by these four processors' resize, so they are errors here.
fn parse_size(v: &Value, square_int: bool, key: &str) -> Result<ResizeTo, ImageError> {
    let positive = |x: &Value, what: &str| -> Result<usize, ImageError> {
        x.as_u64()
            .filter(|&n| n > 0)
            .map(|n| n as usize)
            .ok_or_else(|| {
                cfg_err(
                    None,
                    format!("{key}.{what} must be a positive integer, got {x}"),
                )
            })
    };
    match v {
        Value::Number(_) => {
            let n = positive(v, "value")?;
            Ok(if square_int {
                ResizeTo::Exact {
                    height: n,
                    width: n,
                }
            } else {
                ResizeTo::ShortestEdge(n)
            })
        }
        Value::Array(a) if a.len() == 2 => Ok(ResizeTo::Exact {
            height: positive(&a[0], "0")?,
            width: positive(&a[1], "1")?,
        }),
        Value::Object(o) => {
            let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
            keys.sort_unstable();
            match keys.as_slice() {
                ["height", "width"] => Ok(ResizeTo::Exact {
                    height: positive(&o["height"], "height")?,
                    width: positive(&o["width"], "width")?,
                }),
                ["shortest_edge"] | ["longest_edge", "shortest_edge"] => Ok(
                    ResizeTo::ShortestEdge(positive(&o["shortest_edge"], "shortest_edge")?),
                ),
                _ => Err(cfg_err(
                    None,
                    format!(
                        "{key} must have the keys {{height, width}} or {{shortest_edge}}; got {v}"
                    ),
                )),
            }
        }
        _ => Err(cfg_err(
            None,
            format!("{key} must be an int, [height, width] or a dict; got {v}"),
        )),
    }
}

/// `torchvision.transforms.functional.center_crop` on a PIL image: along each side, an image
/// at least as large as the crop is cut from `int(round((H - h) / 2))` (Python's round, half to
/// even: 1.5 → 2, 2.5 → 2); a smaller one is zero-padded with `(h - H) // 2` rows on top and
/// the rest below.
pub fn center_crop_torchvision(img: &RgbImage, crop_h: usize, crop_w: usize) -> RgbImage {
    let offset = |size: usize, crop: usize| -> i64 {
        if crop > size {
            -(((crop - size) / 2) as i64)
        } else {
            let twice = size - crop; // offset = twice / 2, rounded half to even
            let (q, r) = (twice / 2, twice % 2);
            (if r == 1 && q % 2 == 1 { q + 1 } else { q }) as i64
        }
    };
    let (top, left) = (offset(img.height, crop_h), offset(img.width, crop_w));
    crop_at(img, top, left, crop_h, crop_w)
}

/// The `crop_h × crop_w` window of `img` whose top-left corner is at `(top, left)` (either may
/// be negative), pixels outside the image set to 0.
fn crop_at(img: &RgbImage, top: i64, left: i64, crop_h: usize, crop_w: usize) -> RgbImage {
    let (h, w) = (img.height as i64, img.width as i64);
    let mut data = vec![0u8; crop_h * crop_w * 3];
    for oy in 0..crop_h {
        let sy = top + oy as i64;
        if !(0..h).contains(&sy) {
            continue;
        }
        for ox in 0..crop_w {
            let sx = left + ox as i64;
            if !(0..w).contains(&sx) {
                continue;
            }
            let s = ((sy * w + sx) * 3) as usize;
            let d = (oy * crop_w + ox) * 3;
            data[d..d + 3].copy_from_slice(&img.data[s..s + 3]);
        }
    }
    RgbImage {
        width: crop_w,
        height: crop_h,
        data,
    }
}

/// `transformers.image_transforms.center_crop` on a uint8 image.
///
/// The output is always `crop_h x crop_w`. transformers slices from `top = (H - crop_h) // 2`
/// (floor); when the image is smaller than the crop it first pads it with zeros,
/// `ceil((crop_h - H) / 2)` rows on top, which amounts to the same offset with the rows outside
/// the image set to 0 (likewise for columns).
pub fn center_crop(img: &RgbImage, crop_h: usize, crop_w: usize) -> RgbImage {
    let (h, w) = (img.height as i64, img.width as i64);
    let top = (h - crop_h as i64).div_euclid(2);
    let left = (w - crop_w as i64).div_euclid(2);
    crop_at(img, top, left, crop_h, crop_w)
}
