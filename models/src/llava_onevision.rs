//! LLaVA-OneVision (transformers `LlavaOnevisionForConditionalGeneration`, `model_type:
//! "llava_onevision"`; Li et al. 2024, "LLaVA-OneVision: Easy Visual Task Transfer", §3): a
//! SigLIP vision tower, a two-layer projector and a Qwen2 decoder, composed from this crate's
//! SigLIP kernels ([`crate::siglip`]) and decoder ([`crate::llama`]).
//!
//! # The image path (single-image AnyRes)
//! 1. `pixel_values: [1 + tiles, 3, S, S]` from `bindscope_data::image::AnyresProcessor`:
//!    the base view, then the tiles of the best grid resolution, row-major.
//! 2. The vision tower's hidden state `vision_feature_layer` (index into the `L + 1` hidden
//!    states, negative from the end; a list concatenates several along the width), before
//!    `post_layernorm`: `[1 + tiles, g², D_v]`, `g = S / patch`.
//! 3. The projector `linear_2(act(linear_1(x)))` → `[1 + tiles, g², D]`.
//! 4. Packing (transformers' `pack_image_features`): the tiles are laid out as one
//!    `[D, g·rows, g·cols]` map; the rows or columns the processor's padding produced are cut
//!    (`unpad_image`); when the map is larger than `max_num_patches` (from
//!    `vision_aspect_ratio = "anyres_max_N"`) views by more than 10% (`ratio =
//!    √(h·w / (N·g²)) > 1.1`), it is resized bilinearly (`align_corners=False`, no antialias)
//!    to `[⌊h / ratio⌋, ⌊w / ratio⌋]`; `image_newline` is appended after every row. The
//!    features are the base view's `g²` tokens, then the map's rows: `F = g² + h·(w + 1)`.
//! 5. Each `<image>` token of the prompt (`image_token_index`) stands for one image; it is
//!    expanded to `F` tokens ([`LlavaOnevisionForConditionalGeneration::expand_image_tokens`],
//!    what `LlavaOnevisionProcessor` does) and their embeddings are replaced by the features.
//!
//! # Checkpoint layouts
//! The Hub releases (`llava-hf/llava-onevision-qwen2-*-hf`) store `vision_tower.vision_model.*`,
//! `multi_modal_projector.*`, `image_newline`, `language_model.model.*` and
//! `language_model.lm_head.weight`; transformers 5 saves the vision tower without
//! `vision_model.`; its in-memory names (`model.vision_tower.*`, `model.language_model.*`,
//! `lm_head.weight`) are read too. The head is tied to the embedding when `tie_word_embeddings`
//! (top level or `text_config`) says so or no head is stored.
//!
//! # Not supported
//! Several images per prompt (transformers then skips the tiling), video, and
//! `vision_feature_select_strategy = "default"` (it drops a CLS token SigLIP does not have;
//! transformers fails on such a config for tiled images) are refused by name.

use crate::attention::AttentionMask;
use crate::clip::{BENIGN as CLIP_BENIGN, ClipEncoder};
use crate::generate::{GenerateError, GenerateOptions, Generation, generate_from_embeds_observed};
use crate::llama::{DecoderSpec, LlamaForCausalLM};
use crate::nn::{
    Activation, check_model_type, checkpoint_shapes, layer_norm, linear, linear_rows, model_type,
    to_dtype, to_f32,
};
use crate::qwen2::Qwen2Config;
use crate::siglip::{SiglipVisionConfig, SiglipVisionEmbeddings};
use crate::{CausalLm, CausalLmOutput, ForwardOptions, LmInput, ModelError};
use bindscope_core::{Checkpoint, LoadOptions};
use burn::module::Param;
use burn::nn::{Initializer, LayerNorm, Linear};
use burn::prelude::*;
use serde::Deserialize;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// `model_type` of the composite config.
pub const MODEL_TYPE: &str = "llava_onevision";

/// `vision_feature_layer`: one hidden-state index or several (concatenated along the width).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum FeatureLayer {
    /// One index into the `L + 1` hidden states (negative from the end).
    One(i64),
    /// Several, concatenated in this order.
    Many(Vec<i64>),
}

/// transformers `LlavaOnevisionConfig` (the fields the image path reads); defaults are
/// transformers'.
#[derive(Debug, Clone, Deserialize)]
pub struct LlavaOnevisionConfig {
    /// `"llava_onevision"`.
    pub model_type: String,
    /// The SigLIP tower's config (`siglip_vision_model`).
    pub vision_config: serde_json::Value,
    /// The decoder's config (`qwen2`).
    pub text_config: serde_json::Value,
    /// The `<image>` placeholder id (`image_token_index`; `image_token_id` accepted).
    #[serde(alias = "image_token_id", default = "default_image_token")]
    pub image_token_index: u32,
    /// `projector_hidden_act`.
    #[serde(default = "default_projector_act")]
    pub projector_hidden_act: String,
    /// `multimodal_projector_bias`.
    #[serde(default = "default_true")]
    pub multimodal_projector_bias: bool,
    /// `vision_feature_select_strategy` (`"full"`).
    #[serde(default = "default_strategy")]
    pub vision_feature_select_strategy: String,
    /// `vision_feature_layer`.
    #[serde(default = "default_feature_layer")]
    pub vision_feature_layer: FeatureLayer,
    /// `vision_aspect_ratio` (`"anyres_max_N"`).
    #[serde(default = "default_aspect")]
    pub vision_aspect_ratio: String,
    /// `image_grid_pinpoints` (`[height, width]`); transformers' 36 defaults when absent.
    #[serde(default)]
    pub image_grid_pinpoints: Option<Vec<[usize; 2]>>,
    /// `tie_word_embeddings` (top level; `text_config`'s counts too).
    #[serde(default)]
    pub tie_word_embeddings: bool,
}

fn default_image_token() -> u32 {
    151646
}
fn default_projector_act() -> String {
    "gelu".into()
}
fn default_true() -> bool {
    true
}
fn default_strategy() -> String {
    "full".into()
}
fn default_feature_layer() -> FeatureLayer {
    FeatureLayer::One(-1)
}
fn default_aspect() -> String {
    "anyres_max_9".into()
}

/// What the image path needs from the config, resolved and checked.
#[derive(Debug, Clone)]
pub struct LlavaOnevisionSpec {
    /// `image_token_index`.
    pub image_token_id: u32,
    /// Hidden-state indices (into `L + 1`, non-negative) concatenated for the features.
    pub feature_layers: Vec<usize>,
    /// `N` of `anyres_max_N`.
    pub max_num_patches: usize,
    /// Candidate grid resolutions `[height, width]`.
    pub image_grid_pinpoints: Vec<[usize; 2]>,
    /// The vision tower's config (its `image_size` is the tile side `S`).
    pub vision: SiglipVisionConfig,
}

impl LlavaOnevisionSpec {
    /// The tile side `S`: the vision tower's `image_size`.
    pub fn image_size(&self) -> usize {
        self.vision.image_size
    }

    /// `g = ⌊image_size / patch_size⌋`: the side of one view's token grid.
    pub fn grid(&self) -> usize {
        self.vision.image_size / self.vision.patch_size
    }

    /// The tile grid `[rows, cols]` an image of `[height, width]` is cut into (transformers'
    /// `get_anyres_image_grid_shape`).
    pub fn tile_grid(&self, image_size: [usize; 2]) -> Option<[usize; 2]> {
        let best =
            bindscope_core::anyres::select_best_resolution(image_size, &self.image_grid_pinpoints)?;
        let s = self.image_size();
        Some([best[0] / s, best[1] / s])
    }
}

/// The SigLIP tower without its head (`vision_tower.*`): embeddings, blocks, and the final
/// LayerNorm, which the checkpoint stores but the features (a hidden state) do not use.
#[derive(Module, Debug)]
pub struct LlavaVisionTower {
    /// Patch and position embeddings.
    pub embeddings: SiglipVisionEmbeddings,
    /// The blocks.
    pub encoder: ClipEncoder,
    /// `post_layernorm` (loaded, unused by the features).
    pub post_layernorm: LayerNorm,
}

/// `multi_modal_projector`: `linear_2(act(linear_1(x)))`, `D_v·layers → D → D`.
#[derive(Module, Debug)]
pub struct LlavaOnevisionMultiModalProjector {
    /// `D_v·layers → D`.
    pub linear_1: Linear,
    /// `D → D`.
    pub linear_2: Linear,
    /// `projector_hidden_act`.
    #[module(skip)]
    pub act: Activation,
}

impl LlavaOnevisionMultiModalProjector {
    /// `[..., D_v·layers]` → `[..., D]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        linear_rows(
            &self.linear_2,
            self.act.forward(linear_rows(&self.linear_1, x)),
        )
    }
}

/// The features of one image and, on request, the vision tower's attention.
#[derive(Debug, Clone)]
pub struct ImageFeatures {
    /// `[F, D]`: the base view's tokens, then the packed tiles with `image_newline` per row
    /// (see the [module docs](self)).
    pub features: Tensor<2>,
    /// `L_v` tensors `[1 + tiles, H_v, g², g²]` (f32): every view's attention probabilities per
    /// layer; view 0 is the base (full-image) view.
    pub vision_attentions: Option<Vec<Tensor<4>>>,
    /// `[h, w]`: the packed tile map's size after unpadding and downsampling (the `h` rows of
    /// `w` tokens each followed by `image_newline`).
    pub map_size: [usize; 2],
}

/// One image for a prompt: `pixel_values` `[1 + tiles, 3, S, S]` and the original
/// `[height, width]`.
#[derive(Debug, Clone)]
pub struct ImageInput {
    /// `[1 + tiles, 3, S, S]`.
    pub pixel_values: Tensor<4>,
    /// `[height, width]` of the image before preprocessing (`image_sizes`).
    pub image_size: [usize; 2],
}

/// Which attention probabilities [`LlavaOnevisionForConditionalGeneration::generate`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionRequest {
    /// None (the fused attention path).
    None,
    /// As transformers' `generate(output_attentions=True)`: the prompt pass's full
    /// `[1, H, T, T]` per layer, then `[1, H, 1, T + s]` per generated step; the base view's
    /// vision attention.
    Full,
    /// Only the rows that chose a token: the prompt pass's last query row `[1, H, 1, T]` (each
    /// layer's full matrix is dropped as soon as it is computed), then `[1, H, 1, T + s]` per
    /// step; the base view's vision attention. What the attention-allocation analysis reads,
    /// at a fraction of `Full`'s memory on long image prompts.
    LastQuery,
}

/// Which views' attention the vision tower returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ViewAttentions {
    None,
    All,
    Base,
}

/// A generation with the attention it was asked for.
#[derive(Debug, Clone)]
pub struct LlavaGeneration {
    /// The ids: `prompt_ids` are the prompt *after* image-token expansion.
    pub generation: Generation,
    /// Where each image's features sit in the expanded prompt.
    pub image_positions: Vec<Range<usize>>,
    /// Per image, the features' packed map size `[h, w]` (see [`ImageFeatures::map_size`]).
    pub map_sizes: Vec<[usize; 2]>,
    /// Per image, the vision tower's attention of the base view: `L_v` tensors
    /// `[1, H_v, g², g²]` (f32). Empty unless asked for.
    pub vision_attentions: Vec<Vec<Tensor<4>>>,
    /// Per forward pass of the decoder, its `L` attention tensors `[1, H, T, P + T]` (f32): pass 0
    /// is the prompt, pass `s ≥ 1` the `s`-th generated token (as
    /// [`crate::generate::AttentionObserver`]); with [`AttentionRequest::LastQuery`] pass 0 holds
    /// its last row only (`T` = 1). Empty unless asked for.
    pub llm_attentions: Vec<Vec<Tensor<4>>>,
}

/// transformers `LlavaOnevisionForConditionalGeneration` (see the [module docs](self)).
#[derive(Module, Debug)]
pub struct LlavaOnevisionForConditionalGeneration {
    /// The SigLIP tower.
    pub vision_tower: LlavaVisionTower,
    /// The projector.
    pub multi_modal_projector: LlavaOnevisionMultiModalProjector,
    /// `image_newline` `[D]`.
    pub image_newline: Param<Tensor<1>>,
    /// The decoder and its head.
    pub language_model: LlamaForCausalLM,
    /// The resolved image-path settings.
    #[module(skip)]
    pub spec: LlavaOnevisionSpec,
}

fn unsupported(file: &Path, message: impl Into<String>) -> ModelError {
    ModelError::Unsupported {
        file: file.display().to_string(),
        message: message.into(),
    }
}

/// The `N` of `"anyres_max_N"` (transformers: `int(s.strip("anyres_max_"))`).
fn parse_aspect(file: &Path, s: &str) -> Result<usize, ModelError> {
    s.strip_prefix("anyres_max_")
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            unsupported(
                file,
                format!("vision_aspect_ratio '{s}': expected \"anyres_max_N\" with N ≥ 1"),
            )
        })
}

impl LlavaOnevisionConfig {
    /// The image-path spec and the decoder's spec.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` and the field.
    pub fn specs(&self, file: &Path) -> Result<(LlavaOnevisionSpec, DecoderSpec), ModelError> {
        crate::nn::check_model_type_in(file, &self.model_type, &[MODEL_TYPE])?;
        let vision: SiglipVisionConfig = serde_json::from_value(self.vision_config.clone())
            .map_err(|e| unsupported(file, format!("vision_config: {e}")))?;
        let vt = vision.model_type.as_str();
        if vt != crate::siglip::VISION_MODEL_TYPE {
            return Err(unsupported(
                file,
                format!("vision_config.model_type '{vt}': only siglip_vision_model is supported"),
            ));
        }
        vision.encoder_dims(file)?;
        let tt = self
            .text_config
            .get("model_type")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        if tt != crate::qwen2::MODEL_TYPE {
            return Err(unsupported(
                file,
                format!("text_config.model_type '{tt}': only qwen2 is supported"),
            ));
        }
        let text: Qwen2Config = serde_json::from_value(self.text_config.clone())
            .map_err(|e| unsupported(file, format!("text_config: {e}")))?;
        let text_file = PathBuf::from(format!("{} (text_config)", file.display()));
        let mut dec = text.spec(&text_file, &self.text_config)?;
        dec.tie_word_embeddings |= self.tie_word_embeddings;
        if self.vision_feature_select_strategy != "full" {
            return Err(unsupported(
                file,
                format!(
                    "vision_feature_select_strategy '{}': only \"full\" is supported (\"default\" \
                     drops a CLS token the SigLIP tower does not have)",
                    self.vision_feature_select_strategy
                ),
            ));
        }
        let n_states = vision.num_hidden_layers as i64 + 1;
        let layers = match &self.vision_feature_layer {
            FeatureLayer::One(i) => vec![*i],
            FeatureLayer::Many(v) => v.clone(),
        };
        if layers.is_empty() {
            return Err(unsupported(file, "vision_feature_layer is an empty list"));
        }
        let feature_layers = layers
            .iter()
            .map(|&i| {
                let j = if i < 0 { n_states + i } else { i };
                if (0..n_states).contains(&j) {
                    Ok(j as usize)
                } else {
                    Err(unsupported(
                        file,
                        format!(
                            "vision_feature_layer {i} is outside the {n_states} hidden states of a \
                             {}-layer tower",
                            vision.num_hidden_layers
                        ),
                    ))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pinpoints = match &self.image_grid_pinpoints {
            Some(p) => p.clone(),
            None => bindscope_core::anyres::default_pinpoints(),
        };
        if pinpoints.is_empty()
            || pinpoints.iter().any(|&[h, w]| {
                h == 0
                    || w == 0
                    || !h.is_multiple_of(vision.image_size)
                    || !w.is_multiple_of(vision.image_size)
            })
        {
            return Err(unsupported(
                file,
                format!(
                    "image_grid_pinpoints must be [height, width] pairs, positive multiples of the \
                     vision image_size {}",
                    vision.image_size
                ),
            ));
        }
        let spec = LlavaOnevisionSpec {
            image_token_id: self.image_token_index,
            feature_layers,
            max_num_patches: parse_aspect(file, &self.vision_aspect_ratio)?,
            image_grid_pinpoints: pinpoints,
            vision,
        };
        if spec.image_token_id as usize >= dec.vocab_size {
            return Err(unsupported(
                file,
                format!(
                    "image_token_index {} is outside the decoder's vocabulary of {}",
                    spec.image_token_id, dec.vocab_size
                ),
            ));
        }
        Ok((spec, dec))
    }
}

/// transformers tiles an image only when it is its prompt's only one (`batch_num_images = 1`);
/// several images per prompt take another path (one padded square view each), not built here.
fn one_image_at_most(images: &[ImageInput]) -> Result<(), ModelError> {
    if images.len() > 1 {
        return Err(ModelError::Unsupported {
            file: "llava_onevision prompt".into(),
            message: format!(
                "{} images in one prompt: only one image per prompt is supported (transformers \
                 does not tile several images of one prompt; that path is not built)",
                images.len()
            ),
        });
    }
    Ok(())
}

/// Python's `a // b` for positive floats (`math.floor` of the quotient as CPython computes it,
/// through `fmod`).
fn py_floordiv(a: f64, b: f64) -> f64 {
    let m = a % b;
    let div = (a - m) / b;
    let fl = div.floor();
    if div - fl > 0.5 { fl + 1.0 } else { fl }
}

/// Python's `round(x, 7)` for the sizes `unpad_image` computes.
fn round7(x: f64) -> f64 {
    (x * 1e7).round() / 1e7
}

/// torch's `F.interpolate(mode="bilinear", align_corners=False)` along one axis as a
/// `[out, in]` weight matrix (source `max((i + ½)·in/out − ½, 0)`, the upper neighbour clamped).
fn bilinear_weights(n_in: usize, n_out: usize) -> Vec<f32> {
    let scale = n_in as f32 / n_out as f32;
    let mut w = vec![0f32; n_out * n_in];
    for i in 0..n_out {
        let src = (scale * (i as f32 + 0.5) - 0.5).max(0.0);
        let i0 = (src as usize).min(n_in - 1);
        let i1 = (i0 + 1).min(n_in - 1);
        let l1 = src - i0 as f32;
        w[i * n_in + i0] += 1.0 - l1;
        w[i * n_in + i1] += l1;
    }
    w
}

impl LlavaOnevisionForConditionalGeneration {
    /// Loads a checkpoint strictly (every parameter present, every stored key used, except
    /// SigLIP's `position_ids`, the decoder's `rotary_emb.inv_freq`, a stored head when tied and
    /// a MAP head when `vision_use_head` is set).
    ///
    /// # Errors
    /// [`ModelError::Checkpoint`] for a bad `config.json`, [`ModelError::Unsupported`] naming
    /// the field, [`ModelError::Load`] listing the missing, unexpected or mis-shaped keys under
    /// the checkpoint's names.
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        check_model_type(ckpt, &model_type(ckpt)?, &[MODEL_TYPE])?;
        let config: LlavaOnevisionConfig = ckpt.read_config()?;
        let (spec, dec) = config.specs(&ckpt.config)?;
        let shapes = checkpoint_shapes(ckpt)?;
        let mut opts = opts.clone();
        // The layout: transformers 5's in-memory names, then the vision tower's prefix.
        if shapes.keys().any(|k| k.starts_with("model.")) {
            opts.remap.extend([
                (
                    r"^model\.language_model\.".into(),
                    "language_model.model.".into(),
                ),
                (r"^lm_head\.".into(), "language_model.lm_head.".into()),
                (r"^model\.".into(), String::new()),
            ]);
        }
        let remapped_vision = |k: &str| {
            k.starts_with("vision_tower.vision_model.")
                || k.starts_with("model.vision_tower.vision_model.")
        };
        if shapes.keys().any(|k| remapped_vision(k)) {
            opts.remap.push((
                r"^vision_tower\.vision_model\.".into(),
                "vision_tower.".into(),
            ));
        }
        let head = shapes
            .keys()
            .any(|k| k == "lm_head.weight" || k == "language_model.lm_head.weight");
        let tied = dec.tie_word_embeddings || !head;
        if tied {
            opts.benign_unused
                .push(r"^language_model\.lm_head\.weight$".into());
        }
        opts.benign_unused
            .extend(CLIP_BENIGN.iter().map(|s| s.to_string()));
        opts.benign_unused.push(r"rotary_emb\.inv_freq$".into());
        opts.benign_unused.push(r"^vision_tower\.head\.".into());
        let model = Self::init(spec, dec, tied, &config, &ckpt.config, device)?;
        Ok(bindscope_core::load::load_strict(
            model,
            &ckpt.weights,
            &opts,
        )?)
    }

    /// The architecture of `config` (read from `file`, which errors name) with its weights
    /// as the constructor leaves them (zero matrices, unit norms): a start for random weights
    /// ([`crate::randomize`]), e.g. to time a released configuration without its checkpoint.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming the field the configuration gets wrong.
    pub fn from_config(
        config: &LlavaOnevisionConfig,
        file: &Path,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let (spec, dec) = config.specs(file)?;
        let tied = dec.tie_word_embeddings;
        Self::init(spec, dec, tied, config, file, device)
    }

    fn init(
        spec: LlavaOnevisionSpec,
        dec: DecoderSpec,
        tied: bool,
        config: &LlavaOnevisionConfig,
        file: &Path,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let v = &spec.vision;
        let dims = v.encoder_dims(file)?;
        let d = dec.hidden_size;
        let zeros = Initializer::Zeros;
        let bias = config.multimodal_projector_bias;
        let d_in = v.hidden_size * spec.feature_layers.len();
        Ok(Self {
            vision_tower: LlavaVisionTower {
                embeddings: SiglipVisionEmbeddings::new(v, device),
                encoder: ClipEncoder::new(&dims, device),
                post_layernorm: layer_norm(v.hidden_size, v.layer_norm_eps, device),
            },
            multi_modal_projector: LlavaOnevisionMultiModalProjector {
                linear_1: linear(d_in, d, bias, &zeros, device),
                linear_2: linear(d, d, bias, &zeros, device),
                act: Activation::parse(&config.projector_hidden_act, "projector_hidden_act", file)?,
            },
            image_newline: Param::from_tensor(Tensor::zeros([d], device)),
            language_model: dec.init(tied, device),
            spec,
        })
    }

    /// The image token id (`image_token_index`).
    pub fn image_token_id(&self) -> u32 {
        self.spec.image_token_id
    }

    /// The vision tower on `[V, 3, S, S]`: the selected hidden states concatenated along the
    /// width `[V, g², D_v·layers]` and, when asked, every layer's attention `[V, H_v, g², g²]`.
    pub fn vision_features(
        &self,
        pixel_values: Tensor<4>,
        output_attentions: bool,
    ) -> (Tensor<3>, Option<Vec<Tensor<4>>>) {
        let t = &self.vision_tower;
        let x = t.embeddings.forward(pixel_values);
        let last = self.spec.vision.num_hidden_layers;
        let only_last = self.spec.feature_layers.iter().all(|&i| i == last);
        let opts = ForwardOptions {
            output_hidden_states: !only_last,
            output_attentions,
            attention_last_rows: None,
        };
        let (out, hidden, attns) = t.encoder.forward(x, &AttentionMask::None, opts);
        let selected = if only_last {
            vec![out; self.spec.feature_layers.len()]
        } else {
            let hidden = hidden.expect("hidden states were asked for");
            self.spec
                .feature_layers
                .iter()
                .map(|&i| hidden[i].clone())
                .collect()
        };
        let x = if selected.len() == 1 {
            selected.into_iter().next().expect("one layer")
        } else {
            Tensor::cat(selected, 2)
        };
        (x, attns.map(|a| a.into_iter().map(to_f32).collect()))
    }

    /// One image's features `[F, D]` (transformers' `get_image_features` then
    /// `pack_image_features`, see the [module docs](self)).
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] when `pixel_values` is not `[1 + tiles, 3, S, S]` for the
    /// tile grid `image_size` selects, or the image is empty.
    pub fn image_features(
        &self,
        image: &ImageInput,
        output_attentions: bool,
    ) -> Result<ImageFeatures, ModelError> {
        let views = if output_attentions {
            ViewAttentions::All
        } else {
            ViewAttentions::None
        };
        self.image_features_with(image, views)
    }

    fn image_features_with(
        &self,
        image: &ImageInput,
        views: ViewAttentions,
    ) -> Result<ImageFeatures, ModelError> {
        let s = &self.spec;
        let [v, c, h, w] = image.pixel_values.dims();
        let err = |m: String| ModelError::Unsupported {
            file: "llava_onevision image".into(),
            message: m,
        };
        let [nph, npw] = s.tile_grid(image.image_size).ok_or_else(|| {
            err(format!(
                "image of size {:?} (height, width) is empty",
                image.image_size
            ))
        })?;
        if v != 1 + nph * npw || c != 3 || h != s.image_size() || w != s.image_size() {
            return Err(err(format!(
                "pixel_values are [{v}, {c}, {h}, {w}]; an image of {}x{} (width x height) needs \
                 [{}, 3, {}, {}]: the base view and a {nph}x{npw} grid of tiles",
                image.image_size[1],
                image.image_size[0],
                1 + nph * npw,
                s.image_size(),
                s.image_size()
            )));
        }
        let (x, vision_attentions) = match views {
            ViewAttentions::None => self.vision_features(image.pixel_values.clone(), false),
            ViewAttentions::All => self.vision_features(image.pixel_values.clone(), true),
            // The base view with its attention, the tiles without: the same features (every
            // view is encoded on its own), and only one view's matrices held.
            ViewAttentions::Base => {
                let px = &image.pixel_values;
                let (base, a) =
                    self.vision_features(px.clone().slice([0..1, 0..c, 0..h, 0..w]), true);
                let x = if v > 1 {
                    let (tiles, _) =
                        self.vision_features(px.clone().slice([1..v, 0..c, 0..h, 0..w]), false);
                    Tensor::cat(vec![base, tiles], 0)
                } else {
                    base
                };
                (x, a)
            }
        };
        let x = to_dtype(x, self.language_model.dtype());
        let feats = self.multi_modal_projector.forward(x); // [V, g², D]
        let g = s.grid();
        let d = feats.dims()[2];
        let base = feats
            .clone()
            .slice([0..1, 0..g * g, 0..d])
            .reshape([g * g, d]);
        let tiles: Tensor<5> = feats
            .slice([1..v, 0..g * g, 0..d])
            .reshape([nph, npw, g, g, d]);
        let mut map = tiles
            .permute([4, 0, 2, 1, 3])
            .reshape([d, nph * g, npw * g]);
        // unpad_image
        let [oh, ow] = image.image_size;
        let (ch, cw) = (nph * g, npw * g);
        if ow as f64 / oh as f64 > cw as f64 / ch as f64 {
            let new_h = round7(oh as f64 * (cw as f64 / ow as f64)) as usize;
            let pad = (ch.saturating_sub(new_h)) / 2;
            map = map.slice([0..d, pad..ch - pad, 0..cw]);
        } else {
            let new_w = round7(ow as f64 * (ch as f64 / oh as f64)) as usize;
            let pad = (cw.saturating_sub(new_w)) / 2;
            map = map.slice([0..d, 0..ch, pad..cw - pad]);
        }
        let [_, mut mh, mut mw] = map.dims();
        if mh == 0 || mw == 0 {
            return Err(err(format!(
                "an image of {ow}x{oh} (width x height) leaves no tile features after unpadding"
            )));
        }
        let ratio = ((mh * mw) as f64 / (s.max_num_patches * g * g) as f64).sqrt();
        if ratio > 1.1 {
            let th = py_floordiv(mh as f64, ratio) as usize;
            let tw = py_floordiv(mw as f64, ratio) as usize;
            if th == 0 || tw == 0 {
                return Err(err(format!(
                    "an image of {ow}x{oh} (width x height) downsamples its {mh}x{mw} tile map to \
                     {th}x{tw}"
                )));
            }
            let device = map.device();
            let dtype = map.dtype();
            let wh = Tensor::<2>::from_data(
                TensorData::new(bilinear_weights(mh, th), [th, mh]),
                &device,
            );
            let ww = Tensor::<2>::from_data(
                TensorData::new(bilinear_weights(mw, tw), [tw, mw]),
                &device,
            );
            let f = to_f32(map);
            let out = wh
                .reshape([1, th, mh])
                .matmul(f)
                .matmul(ww.transpose().reshape([1, mw, tw]));
            map = to_dtype(out, dtype);
            (mh, mw) = (th, tw);
        }
        let newline = self
            .image_newline
            .val()
            .reshape([d, 1, 1])
            .expand([d, mh, 1]);
        let map = Tensor::cat(vec![map, to_dtype(newline, base.dtype())], 2);
        let rows = map.reshape([d, mh * (mw + 1)]).transpose();
        Ok(ImageFeatures {
            features: Tensor::cat(vec![base, rows], 0),
            vision_attentions,
            map_size: [mh, mw],
        })
    }

    /// Replaces each `<image>` id of `ids` by `counts[k]` copies (the `k`-th placeholder), as
    /// `LlavaOnevisionProcessor` expands the prompt.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] when the prompt holds another number of placeholders.
    pub fn expand_image_tokens(
        &self,
        ids: &[u32],
        counts: &[usize],
    ) -> Result<Vec<u32>, ModelError> {
        let tok = self.spec.image_token_id;
        let found = ids.iter().filter(|&&i| i == tok).count();
        if found != counts.len() {
            return Err(ModelError::Unsupported {
                file: "llava_onevision prompt".into(),
                message: format!(
                    "the prompt holds {found} <image> tokens (id {tok}) for {} images",
                    counts.len()
                ),
            });
        }
        let mut out = Vec::with_capacity(ids.len() + counts.iter().sum::<usize>());
        let mut k = 0;
        for &i in ids {
            if i == tok {
                out.extend(std::iter::repeat_n(tok, counts[k]));
                k += 1;
            } else {
                out.push(i);
            }
        }
        Ok(out)
    }

    /// The decoder's input embeddings `[1, T, D]` for an expanded prompt: token embeddings, with
    /// the image-token positions filled by `features` in order (transformers' `masked_scatter`).
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] when the number of image-token positions differs from the
    /// features' rows, or an id is outside the vocabulary.
    pub fn inputs_embeds(
        &self,
        ids: &[u32],
        features: &[Tensor<2>],
    ) -> Result<Tensor<3>, ModelError> {
        let tok = self.spec.image_token_id;
        let err = |m: String| ModelError::Unsupported {
            file: "llava_onevision prompt".into(),
            message: m,
        };
        let vocab = self.language_model.spec.vocab_size;
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(err(format!(
                "token id {bad} is outside the decoder's vocabulary of {vocab}"
            )));
        }
        let n_img = ids.iter().filter(|&&i| i == tok).count();
        let n_feat: usize = features.iter().map(|f| f.dims()[0]).sum();
        if n_img != n_feat {
            return Err(err(format!(
                "image features and image tokens do not match: {n_img} tokens, {n_feat} feature rows"
            )));
        }
        let device = self.image_newline.val().device();
        let ids_t = Tensor::<2, Int>::from_data(
            TensorData::new(
                ids.iter().map(|&i| i as i64).collect::<Vec<_>>(),
                [1, ids.len()],
            ),
            &device,
        );
        let text = self.language_model.embed_tokens(ids_t); // [1, T, D]
        if n_img == 0 {
            return Ok(text);
        }
        let d = text.dims()[2];
        let feats = to_dtype(Tensor::cat(features.to_vec(), 0), text.dtype());
        let mut pieces = Vec::new();
        let (mut i, mut f) = (0, 0);
        while i < ids.len() {
            let is_img = ids[i] == tok;
            let mut j = i;
            while j < ids.len() && (ids[j] == tok) == is_img {
                j += 1;
            }
            if is_img {
                pieces.push(
                    feats
                        .clone()
                        .slice([f..f + (j - i), 0..d])
                        .reshape([1, j - i, d]),
                );
                f += j - i;
            } else {
                pieces.push(text.clone().slice([0..1, i..j, 0..d]));
            }
            i = j;
        }
        Ok(Tensor::cat(pieces, 1))
    }

    /// One forward pass over an expanded prompt and its images: logits `[1, T, V]` and, when
    /// asked, the decoder's hidden states and attention (transformers' `forward(input_ids,
    /// pixel_values, image_sizes)`).
    ///
    /// # Errors
    /// As [`Self::image_features`] and [`Self::inputs_embeds`]; more than one image.
    pub fn forward(
        &self,
        ids: &[u32],
        images: &[ImageInput],
        opts: ForwardOptions,
    ) -> Result<CausalLmOutput, ModelError> {
        one_image_at_most(images)?;
        let feats = images
            .iter()
            .map(|im| self.image_features(im, false).map(|f| f.features))
            .collect::<Result<Vec<_>, _>>()?;
        let embeds = self.inputs_embeds(ids, &feats)?;
        let mut cache = self.language_model.new_cache();
        self.language_model
            .forward_causal(LmInput::Embeds(embeds), None, None, &mut cache, opts)
    }

    /// Generates after a prompt whose `<image>` placeholders (one per image, unexpanded) stand
    /// for `images`. Unless `attentions` is [`AttentionRequest::None`], the base view's vision
    /// attention per image and the decoder's attention of every forward pass are returned too
    /// (see [`AttentionRequest`] for their shapes).
    ///
    /// # Errors
    /// [`GenerateError::Model`] as [`Self::image_features`] and
    /// [`Self::expand_image_tokens`]; otherwise as [`crate::generate::generate_from_embeds`].
    pub fn generate(
        &self,
        prompt_ids: &[u32],
        images: &[ImageInput],
        opts: &GenerateOptions,
        attentions: AttentionRequest,
    ) -> Result<LlavaGeneration, GenerateError> {
        one_image_at_most(images)?;
        let want = attentions != AttentionRequest::None;
        let views = if want {
            ViewAttentions::Base
        } else {
            ViewAttentions::None
        };
        let mut feats = Vec::new();
        let mut vision_attentions = Vec::new();
        let mut map_sizes = Vec::new();
        for im in images {
            let f = self.image_features_with(im, views)?;
            if let Some(a) = f.vision_attentions {
                vision_attentions.push(a);
            }
            map_sizes.push(f.map_size);
            feats.push(f.features);
        }
        let counts: Vec<usize> = feats.iter().map(|f| f.dims()[0]).collect();
        let ids = self.expand_image_tokens(prompt_ids, &counts)?;
        let mut image_positions = Vec::new();
        let tok = self.spec.image_token_id;
        let mut i = 0;
        while i < ids.len() {
            if ids[i] == tok {
                let start = i;
                while i < ids.len() && ids[i] == tok {
                    i += 1;
                }
                image_positions.push(start..i);
            } else {
                i += 1;
            }
        }
        let embeds = self.inputs_embeds(&ids, &feats)?;
        let t = ids.len();
        let mut llm_attentions = Vec::new();
        let mut record = |_step: usize, a: Vec<Tensor<4>>| llm_attentions.push(a);
        let observer: Option<crate::generate::AttentionObserver<'_>> =
            if want { Some(&mut record) } else { None };
        let mut gens = generate_from_embeds_observed(
            &self.language_model,
            embeds,
            &[vec![1u8; t]],
            opts,
            observer,
            attentions == AttentionRequest::LastQuery,
        )?;
        let mut generation = gens.remove(0);
        generation.prompt_ids = ids;
        Ok(LlavaGeneration {
            generation,
            image_positions,
            map_sizes,
            vision_attentions,
            llm_attentions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_weights_follow_torchs_half_pixel_rule() {
        // 4 → 3: sources 1/6, 3/2, 17/6.
        let w = bilinear_weights(4, 3);
        let want = [
            [5.0 / 6.0, 1.0 / 6.0, 0.0, 0.0],
            [0.0, 0.5, 0.5, 0.0],
            [0.0, 0.0, 1.0 / 6.0, 5.0 / 6.0],
        ];
        for (r, row) in want.iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                assert!((w[r * 4 + c] - v).abs() < 1e-6, "{r},{c}: {}", w[r * 4 + c]);
            }
        }
        // Upsampling clamps the first source at 0 and the upper neighbour at the edge.
        let w = bilinear_weights(2, 4);
        assert_eq!(&w[0..2], &[1.0, 0.0]);
        assert_eq!(&w[6..8], &[0.0, 1.0]);
    }

    /// The released `llava-hf/llava-onevision-qwen2-0.5b-ov-hf` configuration (its fields as
    /// stored; SigLIP-SO400M/14 at 384, whose 14 does not divide 384) resolves: a 27 × 27 grid
    /// per view, the 36 default pinpoints, a 640 × 480 image on a 2 × 2 tile grid.
    #[test]
    fn the_released_configuration_resolves() {
        let cfg: LlavaOnevisionConfig = serde_json::from_value(serde_json::json!({
            "model_type": "llava_onevision",
            "image_token_index": 151646,
            "projector_hidden_act": "gelu",
            "tie_word_embeddings": false,
            "use_image_newline_parameter": true,
            "vision_aspect_ratio": "anyres_max_9",
            "vision_feature_layer": -1,
            "vision_feature_select_strategy": "full",
            "vision_config": {
                "hidden_size": 1152, "image_size": 384, "intermediate_size": 4304,
                "model_type": "siglip_vision_model", "num_attention_heads": 16,
                "num_hidden_layers": 26, "patch_size": 14, "vision_use_head": false
            },
            "text_config": {
                "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
                "rope_theta": 1000000.0, "vocab_size": 152000, "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-6, "tie_word_embeddings": true
            }
        }))
        .unwrap();
        let (spec, dec) = cfg.specs(Path::new("config.json")).unwrap();
        assert_eq!(spec.grid(), 27);
        assert_eq!(spec.image_grid_pinpoints.len(), 36);
        assert_eq!(spec.feature_layers, vec![26]);
        assert_eq!(spec.max_num_patches, 9);
        assert_eq!(spec.tile_grid([480, 640]), Some([2, 2]));
        assert!(dec.tie_word_embeddings, "text_config's tie counts");
    }

    #[test]
    fn python_floor_division_and_aspect_parsing() {
        assert_eq!(py_floordiv(4.0, 1.224744871391589), 3.0);
        assert_eq!(py_floordiv(6.0, 1.224744871391589), 4.0);
        assert_eq!(py_floordiv(6.0, 2.0), 3.0);
        let f = Path::new("config.json");
        assert_eq!(parse_aspect(f, "anyres_max_9").unwrap(), 9);
        assert!(parse_aspect(f, "anyres").is_err());
        assert!(parse_aspect(f, "anyres_max_0").is_err());
    }
}
