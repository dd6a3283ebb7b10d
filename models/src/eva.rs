//! # EVA-02 — timm's `Eva` (EVA-CLIP image towers)
//!
//! Fang et al., *EVA-02: A Visual Representation for Neon Genesis*
//! (<https://arxiv.org/abs/2303.11331>) and Sun et al., *EVA-CLIP: Improved Training Techniques
//! for CLIP at Scale* (<https://arxiv.org/abs/2303.15389>), as timm 1.0 implements them in
//! `timm.models.eva.Eva` (`eva02_base_patch16_clip_224`, the image tower open_clip's `EVA02-B-16`
//! wraps), used here as a frozen feature extractor.
//!
//! A pre-norm ViT with a CLS token and four changes, each read off the checkpoint's keys:
//! - **2-D rotary position embeddings** on the patch tokens' queries and keys (the CLS token is
//!   left alone), timm's `RotaryEmbeddingCat` with interleaved pairs: for a patch at grid row
//!   `r`, column `c` of an `h × w` grid, the coordinates are `t_r = r / h · R_h` and
//!   `t_c = c / w · R_w` (`R` = `ref_feat_shape`, the pre-training grid; `t = r, c` without
//!   one), the `Dh / 4` frequencies `ω_j = 10000^(−j / (Dh/4))`, and the head dimension's
//!   pairs `(2i, 2i + 1)` rotate by `t_r·ω_i` (`i < Dh/4`) or `t_c·ω_{i − Dh/4}`:
//!   `x·cos + rot(x)·sin`, `rot(x₀, x₁) = (−x₁, x₀)`;
//! - **SwiGLU MLP** (`mlp.fc1_g`, `mlp.fc1_x`, `mlp.fc2`): `fc2(norm(SiLU(fc1_g(x)) ⊙ fc1_x(x)))`
//!   with the inner LayerNorm `mlp.norm` when present (`scale_mlp`); a plain GELU MLP
//!   (`mlp.fc1`, `mlp.fc2`) otherwise;
//! - **sub-LayerNorm in attention** (`attn.norm`, `scale_attn_inner`): a LayerNorm on the
//!   merged heads before `attn.proj`;
//! - separate `q_proj` (bias), `k_proj` (no bias), `v_proj` (bias), or timm's fused `qkv` with
//!   `q_bias` / `v_bias`; optional layer scale `gamma_1` / `gamma_2`.
//!
//! The pooled output is timm's `forward_head(pre_logits=True)`: the CLS token after `norm`
//! (`global_pool` `token`, the CLIP towers) or `fc_norm` of the mean patch token (`avg`). An
//! EVA-CLIP tower's `head` is its CLIP projection (open_clip builds the trunk with
//! `num_classes = embed_dim`), and [`VisionReadout::Pooled`] goes through it, as CLIP's does
//! through `visual_projection`: the image embedding open_clip's `encode_image` returns. Other
//! architectures' `head` is a classifier and is ignored.
//!
//! ## Config
//! timm's Hub repositories carry the model's name (`architecture`), optional `model_args` (the
//! keyword arguments `timm.create_model` passes on) and `pretrained_cfg` (preprocessing), not
//! the sizes: [`EvaConfig::from_timm`] reads the sizes and options off the weights, and the
//! two things the weights cannot tell — the number of heads and `ref_feat_shape` — from
//! `model_args`, else from timm's registration of the architecture ([`TIMM_ARCHITECTURES`]).
//!
//! ## Other input sizes
//! timm runs these models at their configured size unless built with `dynamic_img_size=True`;
//! for other sizes bindscope does what that option does: the absolute position table's patch
//! rows are resampled bicubically with antialiasing (timm's `resample_abs_pos_embed`; the CLS
//! row kept) and the rotary tables are rebuilt for the new grid with the same `ref_feat_shape`
//! scaling.
//!
//! ## JER
//! The written-out backward ([`crate::linearize`]) does not cover the rotary and SwiGLU blocks:
//! [`VisionEncoder::linearize`] is `None` and the JER estimators use burn's autodiff.
//!
//! ## Keys
//! timm's names, except `patch_embed.proj` (stored as `patch_embed.projection`) and the fused
//! projection's `attn.q_bias` / `attn.v_bias` (stored under `attn.qkv.`); a missing key is
//! reported under timm's name. `rope.*` buffers are ignored (recomputed).

use std::collections::BTreeMap;
use std::path::Path;

use bindscope_core::{Checkpoint, LoadOptions, load_strict};
use burn::module::Param;
use burn::nn::{Initializer, LayerNorm, Linear};
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::attention::{AttentionMask, multi_head_attention};
use crate::beit::FusedQkv;
use crate::nn::{
    Activation, check_sizes, checkpoint_shapes, count_blocks, interpolate_pos_grid, layer_norm,
    layer_scale, linear, mean_patch, run_stack, to_dtype, to_f32, token,
};
use crate::vit::PatchEmbeddings;
use crate::{EncoderOutput, ForwardOptions, ModelError, ModelInfo, VisionEncoder, VisionReadout};

/// `model_type` bindscope gives a checkpoint in timm's `Eva` layout.
pub const MODEL_TYPE: &str = "eva";

/// What timm's registration of an architecture fixes that the weights do not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimmRegistration {
    /// The architecture's name (`timm.create_model`'s first argument).
    pub name: &'static str,
    /// `num_heads`.
    pub num_heads: usize,
    /// `ref_feat_shape`.
    pub ref_feat_shape: Option<[usize; 2]>,
    /// `use_rot_pos_emb`.
    pub use_rot_pos_emb: bool,
    /// `img_size` (square).
    pub img_size: usize,
}

const fn registration(
    name: &'static str,
    num_heads: usize,
    ref_feat_shape: Option<[usize; 2]>,
    use_rot_pos_emb: bool,
    img_size: usize,
) -> TimmRegistration {
    TimmRegistration {
        name,
        num_heads,
        ref_feat_shape,
        use_rot_pos_emb,
        img_size,
    }
}

/// timm's registrations of the EVA CLIP image towers this file reads by name. `model_args` in
/// `config.json` overrides them, and admits any other `eva*` architecture when it gives
/// `num_heads`, `use_rot_pos_emb` and (with rotary embeddings) `ref_feat_shape`.
pub const TIMM_ARCHITECTURES: [TimmRegistration; 4] = [
    registration("eva02_base_patch16_clip_224", 12, Some([16, 16]), true, 224),
    registration(
        "eva02_large_patch14_clip_224",
        16,
        Some([16, 16]),
        true,
        224,
    ),
    registration(
        "eva02_large_patch14_clip_336",
        16,
        Some([16, 16]),
        true,
        336,
    ),
    registration("eva_giant_patch14_clip_224", 16, None, false, 224),
];

/// timm's `Eva` key names → this file's modules (applied in order; [`EvaModel::load`]).
pub const TIMM_KEY_MAP: [(&str, &str); 2] = [
    ("^patch_embed\\.proj\\.", "patch_embed.projection."),
    (
        "^blocks\\.(\\d+)\\.attn\\.(q_bias|v_bias)$",
        "blocks.$1.attn.qkv.$2",
    ),
];

/// `Some("eva")` for a timm `architecture` named `eva02_*` or `eva_*` (a `.tag` suffix
/// allowed).
pub fn timm_model_type(architecture: &str) -> Option<&'static str> {
    (architecture.starts_with("eva02_") || architecture.starts_with("eva_")).then_some(MODEL_TYPE)
}

/// How the sequence is pooled (timm's `global_pool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvaPool {
    /// `"token"`: the CLS token.
    Token,
    /// `"avg"`: the mean of the patch tokens.
    Avg,
}

/// The configuration of a timm `Eva` checkpoint, read by [`EvaConfig::from_timm`].
#[derive(Debug, Clone)]
pub struct EvaConfig {
    /// timm's `architecture` (without a `.tag`).
    pub architecture: String,
    /// `embed_dim`, `D`.
    pub hidden_size: usize,
    /// `depth`, `L`.
    pub num_hidden_layers: usize,
    /// `num_heads`, `H`.
    pub num_attention_heads: usize,
    /// The MLP's hidden width (`fc1_g` / `fc1` rows).
    pub intermediate_size: usize,
    /// `swiglu_mlp` (split `fc1_g` / `fc1_x`), else a GELU MLP.
    pub swiglu_mlp: bool,
    /// `scale_mlp`: LayerNorm inside the MLP.
    pub scale_mlp: bool,
    /// `scale_attn_inner`: LayerNorm on the attention output before `proj`.
    pub scale_attn_inner: bool,
    /// `qkv_fused`: one `qkv` weight with `q_bias` / `v_bias`.
    pub qkv_fused: bool,
    /// Whether the query and value projections have biases.
    pub qkv_bias: bool,
    /// Layer scale (`gamma_1`, `gamma_2`).
    pub layer_scale: bool,
    /// `use_abs_pos_emb`.
    pub use_abs_pos_emb: bool,
    /// `no_embed_class`: the absolute table has no CLS row.
    pub no_embed_class: bool,
    /// `use_rot_pos_emb`.
    pub use_rot_pos_emb: bool,
    /// `ref_feat_shape`: the grid the rotary coordinates are scaled to.
    pub ref_feat_shape: Option<[usize; 2]>,
    /// `rope_temperature` (10000).
    pub rope_temperature: f64,
    /// `img_size` `[H, W]`.
    pub image_size: [usize; 2],
    /// `patch_size`.
    pub patch_size: usize,
    /// Input channels.
    pub num_channels: usize,
    /// `global_pool`.
    pub pool: EvaPool,
    /// The final `norm` (before pooling).
    pub norm: bool,
    /// `fc_norm` (after pooling).
    pub fc_norm: bool,
    /// Rows of the `head` projection, when it is one (CLIP towers).
    pub projection_dim: Option<usize>,
    /// LayerNorm epsilon (timm's 1e-6).
    pub layer_norm_eps: f64,
}

impl EvaConfig {
    /// The config of a checkpoint in timm's `Eva` layout, read off the weights' `shapes` and
    /// timm's `config.json` (`architecture`, `model_args`, `global_pool`,
    /// `pretrained_cfg.input_size`).
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` when a key the layout needs is missing or has
    /// the wrong rank, the number of heads is neither in `model_args` nor known for the
    /// architecture, or the checkpoint uses a variant this file does not implement (register
    /// tokens, no CLS token, the packed `GluMlp`, post-norm blocks, pooling other than `token`
    /// and `avg`).
    pub fn from_timm(
        config: &serde_json::Value,
        shapes: &BTreeMap<String, Vec<usize>>,
        file: &str,
    ) -> Result<Self, ModelError> {
        let err = |message: String| ModelError::Unsupported {
            file: file.to_string(),
            message: format!("timm Eva layout: {message}"),
        };
        let dims = |key: &str, rank: usize| -> Result<&[usize], ModelError> {
            match shapes.get(key) {
                Some(s) if s.len() == rank => Ok(s),
                Some(s) => Err(err(format!(
                    "'{key}' has shape {s:?}, expected rank {rank}"
                ))),
                None => Err(err(format!("no '{key}' in the weights"))),
            }
        };
        let full = config
            .get("architecture")
            .and_then(|a| a.as_str())
            .unwrap_or_default();
        let architecture = full.split('.').next().unwrap_or_default().to_string();
        let args = config
            .get("model_args")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let known = TIMM_ARCHITECTURES.iter().find(|a| a.name == architecture);
        if !args.is_null() && !args.is_object() {
            return Err(err(format!("model_args must be an object, got {args}")));
        }
        let arg_bool = |k: &str| -> Result<Option<bool>, ModelError> {
            match args.get(k) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => v
                    .as_bool()
                    .map(Some)
                    .ok_or_else(|| err(format!("model_args.{k} must be true or false, got {v}"))),
            }
        };
        let positive = |v: &serde_json::Value| v.as_u64().filter(|&n| n > 0).map(|n| n as usize);
        // An int (a square) or [h, w]; `null` stays `Some(None)`; absent is `None`.
        let arg_pair = |k: &str| -> Result<Option<Option<[usize; 2]>>, ModelError> {
            let Some(v) = args.get(k) else {
                return Ok(None);
            };
            if v.is_null() {
                return Ok(Some(None));
            }
            if let Some(n) = positive(v) {
                return Ok(Some(Some([n, n])));
            }
            match v
                .as_array()
                .map(|a| a.iter().map(positive).collect::<Vec<_>>())
            {
                Some(p) if p.len() == 2 && p.iter().all(Option::is_some) => {
                    Ok(Some(Some([p[0].unwrap(), p[1].unwrap()])))
                }
                _ => Err(err(format!(
                    "model_args.{k} must be a positive integer or [height, width], got {v}"
                ))),
            }
        };
        let known_list = || {
            TIMM_ARCHITECTURES
                .iter()
                .map(|a| a.name)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let num_heads = match args.get("num_heads") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(positive(v).ok_or_else(|| {
                err(format!(
                    "model_args.num_heads must be a positive integer, got {v}"
                ))
            })?),
        };
        let use_rot = arg_bool("use_rot_pos_emb")?;
        let reference = arg_pair("ref_feat_shape")?;
        // What the weights cannot tell: timm's registration of the architecture, or model_args.
        let (num_attention_heads, use_rot_pos_emb, ref_feat_shape) = match known {
            Some(k) => (
                num_heads.unwrap_or(k.num_heads),
                use_rot.unwrap_or(k.use_rot_pos_emb),
                reference.unwrap_or(k.ref_feat_shape),
            ),
            None => {
                let rope = use_rot.unwrap_or(false);
                let mut missing = Vec::new();
                if num_heads.is_none() {
                    missing.push("num_heads");
                }
                if use_rot.is_none() {
                    missing.push("use_rot_pos_emb");
                }
                // Unknown whether the model has rotary embeddings: their grid is asked for too
                // (`null` without them).
                if (rope || use_rot.is_none()) && reference.is_none() {
                    missing.push("ref_feat_shape");
                }
                if !missing.is_empty() {
                    return Err(err(format!(
                        "architecture '{full}': bindscope does not know timm's settings for it, \
                         and the weights do not hold {}; give model_args.{} in config.json (the \
                         values timm's registration of '{architecture}' passes), or use one of \
                         {}",
                        missing.join(", "),
                        missing.join(", model_args."),
                        known_list()
                    )));
                }
                (num_heads.unwrap_or(0), rope, reference.flatten())
            }
        };
        if shapes.contains_key("reg_token") {
            return Err(err("'reg_token': register tokens are not supported".into()));
        }
        if !shapes.contains_key("cls_token") {
            return Err(err(
                "no 'cls_token' in the weights: models without a class token are not supported"
                    .into(),
            ));
        }
        if arg_bool("use_post_norm")? == Some(true) {
            return Err(err(
                "model_args.use_post_norm: post-norm blocks are not supported".into(),
            ));
        }
        let hidden_size = dims("cls_token", 3)?[2];
        let num_hidden_layers = count_blocks(shapes, "blocks.");
        let patch = dims("patch_embed.proj.weight", 4)?;
        let (num_channels, patch_size) = (patch[1], patch[3]);
        let swiglu_mlp = shapes.contains_key("blocks.0.mlp.fc1_g.weight");
        if !swiglu_mlp && arg_bool("swiglu_mlp")? == Some(true) {
            return Err(err(
                "a SwiGLU MLP with packed 'mlp.fc1' (timm's GluMlp) is not supported".into(),
            ));
        }
        let intermediate_size = if swiglu_mlp {
            dims("blocks.0.mlp.fc1_g.weight", 2)?[0]
        } else if shapes.contains_key("blocks.0.mlp.fc1.weight") {
            dims("blocks.0.mlp.fc1.weight", 2)?[0]
        } else {
            return Err(err(
                "no MLP input weight for block 0: expected 'blocks.0.mlp.fc1_g.weight' and \
                 'blocks.0.mlp.fc1_x.weight' (SwiGLU) or 'blocks.0.mlp.fc1.weight' (GELU MLP)"
                    .into(),
            ));
        };
        let qkv_fused = shapes.contains_key("blocks.0.attn.qkv.weight");
        // Either bias of block 0 says the attention has them (timm's `qkv_bias`), so one that
        // is missing is reported as missing rather than its siblings as unexpected.
        let qkv_bias = if qkv_fused {
            shapes.contains_key("blocks.0.attn.q_bias")
                || shapes.contains_key("blocks.0.attn.v_bias")
        } else {
            dims("blocks.0.attn.q_proj.weight", 2)?;
            shapes.contains_key("blocks.0.attn.q_proj.bias")
                || shapes.contains_key("blocks.0.attn.v_proj.bias")
        };
        let grid_tokens = |s: [usize; 2]| (s[0] / patch_size) * (s[1] / patch_size);
        // The size timm builds the model at: model_args.img_size, else the registration's, else
        // the data config's input_size, else a square absolute table.
        let input_size = match config.pointer("/pretrained_cfg/input_size") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => match v
                .as_array()
                .map(|a| a.iter().map(positive).collect::<Vec<_>>())
            {
                Some(p) if p.len() == 3 && p.iter().all(Option::is_some) => {
                    Some([p[1].unwrap(), p[2].unwrap()])
                }
                _ => {
                    return Err(err(format!(
                        "pretrained_cfg.input_size must be [channels, height, width], got {v}"
                    )));
                }
            },
        };
        let image_size = match (arg_pair("img_size")?.flatten(), known, input_size) {
            (Some(s), ..) => s,
            (None, Some(k), _) => [k.img_size, k.img_size],
            (None, None, Some(s)) => s,
            (None, None, None) => {
                let rows = match shapes.get("pos_embed") {
                    Some(_) => dims("pos_embed", 3)?[1],
                    None => 0,
                };
                let side = (rows as f64).sqrt().floor() as usize;
                if side == 0 {
                    return Err(err(
                        "the input size is nowhere: give model_args.img_size or \
                         pretrained_cfg.input_size"
                            .into(),
                    ));
                }
                [side * patch_size, side * patch_size]
            }
        };
        let use_abs_pos_emb = shapes.contains_key("pos_embed");
        let no_embed_class = if use_abs_pos_emb {
            let rows = dims("pos_embed", 3)?[1];
            let g = grid_tokens(image_size);
            if rows == g + 1 {
                false
            } else if rows == g {
                true
            } else {
                return Err(err(format!(
                    "'pos_embed' has {rows} rows; the model's {}×{} input (model_args.img_size, \
                     else timm's registration, else pretrained_cfg.input_size) at patch \
                     {patch_size} has {g} patches (expected {g} or {})",
                    image_size[0],
                    image_size[1],
                    g + 1
                )));
            }
        } else {
            false
        };
        let pool_field = |v: Option<&serde_json::Value>, name: &str| match v {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(p)) => Ok(Some(p.clone())),
            Some(other) => Err(err(format!("{name} must be a string, got {other}"))),
        };
        // timm's default is "avg"; the CLIP towers' registrations pass "token".
        let global_pool = match pool_field(config.get("global_pool"), "global_pool")? {
            Some(p) => p,
            None => pool_field(args.get("global_pool"), "model_args.global_pool")?
                .unwrap_or_else(|| if known.is_some() { "token" } else { "avg" }.into()),
        };
        let pool = match global_pool.as_str() {
            "token" => EvaPool::Token,
            "avg" => EvaPool::Avg,
            other => {
                return Err(err(format!(
                    "global_pool '{other}': bindscope reads 'token' and 'avg'"
                )));
            }
        };
        let projection_dim = if architecture.contains("_clip") {
            match shapes.get("head.weight") {
                Some(s) if s.len() == 2 => Some(s[0]),
                Some(s) => {
                    return Err(err(format!(
                        "'head.weight' has shape {s:?}, expected rank 2"
                    )));
                }
                None => None,
            }
        } else {
            None
        };
        Ok(Self {
            architecture,
            hidden_size,
            num_hidden_layers,
            num_attention_heads,
            intermediate_size,
            swiglu_mlp,
            scale_mlp: shapes.contains_key("blocks.0.mlp.norm.weight"),
            scale_attn_inner: shapes.contains_key("blocks.0.attn.norm.weight"),
            qkv_fused,
            qkv_bias,
            layer_scale: shapes.contains_key("blocks.0.gamma_1"),
            use_abs_pos_emb,
            no_embed_class,
            use_rot_pos_emb,
            ref_feat_shape,
            rope_temperature: args
                .get("rope_temperature")
                .and_then(|v| v.as_f64())
                .unwrap_or(10000.0),
            image_size,
            patch_size,
            num_channels,
            pool,
            norm: shapes.contains_key("norm.weight"),
            fc_norm: shapes.contains_key("fc_norm.weight"),
            projection_dim,
            layer_norm_eps: 1e-6,
        })
    }

    /// The configured patch grid `[Gh, Gw]`.
    pub fn grid(&self) -> [usize; 2] {
        [
            self.image_size[0] / self.patch_size,
            self.image_size[1] / self.patch_size,
        ]
    }

    /// Head dimension `Dh = D / H`.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

// ---------------------------------------------------------------------------------------------
// Rotary position embeddings
// ---------------------------------------------------------------------------------------------

/// timm's `RotaryEmbeddingCat` tables for an `[h, w]` grid and head dimension `dh` (a multiple
/// of 4), as `build_rotary_pos_embed(in_pixels=False, grid_indexing="ij")` computes them in
/// f32: `(sin, cos)`, each `h·w × dh` row-major, each value repeated for the two entries of its
/// pair (see the module docs).
pub fn rope_tables(
    grid: [usize; 2],
    dh: usize,
    reference: Option<[usize; 2]>,
    temperature: f64,
) -> (Vec<f32>, Vec<f32>) {
    let nb = dh / 4;
    let bands: Vec<f32> = (0..nb)
        .map(|j| {
            let e = j as f32 / nb as f32;
            1.0 / (temperature as f32).powf(e)
        })
        .collect();
    let coord = |i: usize, axis: usize| -> f32 {
        let t = i as f32;
        match reference {
            Some(r) => t / grid[axis] as f32 * r[axis] as f32,
            None => t,
        }
    };
    let p = grid[0] * grid[1];
    let (mut sin, mut cos) = (vec![0f32; p * dh], vec![0f32; p * dh]);
    for r in 0..grid[0] {
        for c in 0..grid[1] {
            let row = (r * grid[1] + c) * dh;
            for (axis, t) in [(0, coord(r, 0)), (1, coord(c, 1))] {
                for (j, b) in bands.iter().enumerate() {
                    let angle = t * b;
                    let (s, co) = ((angle as f64).sin() as f32, (angle as f64).cos() as f32);
                    let k = row + 2 * (axis * nb + j);
                    sin[k] = s;
                    sin[k + 1] = s;
                    cos[k] = co;
                    cos[k + 1] = co;
                }
            }
        }
    }
    (sin, cos)
}

/// The rotary tables of one forward pass, `[1, P, 1, Dh]` each.
#[derive(Clone)]
struct Rope {
    sin: Tensor<4>,
    cos: Tensor<4>,
}

impl Rope {
    fn new(config: &EvaConfig, grid: [usize; 2], device: &Device) -> Self {
        let dh = config.head_dim();
        let p = grid[0] * grid[1];
        let (sin, cos) = rope_tables(grid, dh, config.ref_feat_shape, config.rope_temperature);
        let t = |v: Vec<f32>| Tensor::<4>::from_data(TensorData::new(v, [1, p, 1, dh]), device);
        Self {
            sin: t(sin),
            cos: t(cos),
        }
    }

    /// `x·cos + rot(x)·sin` on the tokens after the `prefix` ones: `[N, T, H·Dh]` →
    /// `[N, T, H·Dh]`, computed in f32 and returned in `x`'s dtype (timm's `.type_as(v)`).
    fn apply(&self, x: Tensor<3>, heads: usize, prefix: usize) -> Tensor<3> {
        let dtype = x.dtype();
        let [n, t, d] = x.dims();
        let dh = d / heads;
        let p = t - prefix;
        let x4 = to_f32(x).reshape([n, t, heads, dh]);
        let pre = x4.clone().slice([0..n, 0..prefix, 0..heads, 0..dh]);
        let pat = x4.slice([0..n, prefix..t, 0..heads, 0..dh]);
        let pairs = pat.clone().reshape([n, p, heads, dh / 2, 2]);
        let even = pairs.clone().slice([0..n, 0..p, 0..heads, 0..dh / 2, 0..1]);
        let odd = pairs.slice([0..n, 0..p, 0..heads, 0..dh / 2, 1..2]);
        let rot = Tensor::cat(vec![odd.neg(), even], 4).reshape([n, p, heads, dh]);
        let out = pat * self.cos.clone() + rot * self.sin.clone();
        to_dtype(Tensor::cat(vec![pre, out], 1).reshape([n, t, d]), dtype)
    }
}

// ---------------------------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------------------------

/// `attn`: `EvaAttention`.
#[derive(Module, Debug)]
pub struct EvaAttention {
    /// `q_proj`: `D → D` (bias with `qkv_bias`).
    pub q_proj: Option<Linear>,
    /// `k_proj`: `D → D`, no bias.
    pub k_proj: Option<Linear>,
    /// `v_proj`: `D → D` (bias with `qkv_bias`).
    pub v_proj: Option<Linear>,
    /// `qkv` with `q_bias` / `v_bias` (`qkv_fused`).
    pub qkv: Option<FusedQkv>,
    /// `norm`: LayerNorm on the merged heads (`scale_attn_inner`).
    pub norm: Option<LayerNorm>,
    /// `proj`: `D → D`.
    pub proj: Linear,
    /// Number of heads.
    #[module(skip)]
    pub num_heads: usize,
}

/// `mlp`: timm's `SwiGLU` (`fc1_g`, `fc1_x`) or `Mlp` (`fc1`), optional inner `norm`, `fc2`.
#[derive(Module, Debug)]
pub struct EvaMlp {
    /// `fc1_g`: `D → hidden`, the gate (SwiGLU).
    pub fc1_g: Option<Linear>,
    /// `fc1_x`: `D → hidden` (SwiGLU).
    pub fc1_x: Option<Linear>,
    /// `fc1`: `D → hidden` (GELU MLP).
    pub fc1: Option<Linear>,
    /// `norm`: LayerNorm over the hidden width (`scale_mlp`).
    pub norm: Option<LayerNorm>,
    /// `fc2`: `hidden → D`.
    pub fc2: Linear,
}

impl EvaMlp {
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let h = match (&self.fc1_g, &self.fc1_x, &self.fc1) {
            (Some(g), Some(v), _) => Activation::Silu.forward(g.forward(x.clone())) * v.forward(x),
            (_, _, Some(fc1)) => Activation::Gelu.forward(fc1.forward(x)),
            _ => unreachable!("EvaMlp is built with one layout"),
        };
        let h = match &self.norm {
            Some(n) => n.forward(h),
            None => h,
        };
        self.fc2.forward(h)
    }
}

/// One block (`EvaBlock`): `x = x + γ₁ ⊙ attn(norm1(x))`, `x = x + γ₂ ⊙ mlp(norm2(x))`, γ = 1
/// without layer scale.
#[derive(Module, Debug)]
pub struct EvaBlock {
    /// `norm1`.
    pub norm1: LayerNorm,
    /// `attn`.
    pub attn: EvaAttention,
    /// `gamma_1`: `[D]` (layer scale).
    pub gamma_1: Option<Param<Tensor<1>>>,
    /// `norm2`.
    pub norm2: LayerNorm,
    /// `mlp`.
    pub mlp: EvaMlp,
    /// `gamma_2`: `[D]` (layer scale).
    pub gamma_2: Option<Param<Tensor<1>>>,
}

impl EvaBlock {
    fn new(config: &EvaConfig, init: &Initializer, device: &Device) -> Self {
        let d = config.hidden_size;
        let hidden = config.intermediate_size;
        let ln = |w: usize| layer_norm(w, config.layer_norm_eps, device);
        let gamma = || config.layer_scale.then(|| init.init([d], device));
        let separate = !config.qkv_fused;
        Self {
            norm1: ln(d),
            attn: EvaAttention {
                q_proj: separate.then(|| linear(d, d, config.qkv_bias, init, device)),
                k_proj: separate.then(|| linear(d, d, false, init, device)),
                v_proj: separate.then(|| linear(d, d, config.qkv_bias, init, device)),
                qkv: config.qkv_fused.then(|| FusedQkv {
                    weight: init.init([3 * d, d], device),
                    q_bias: config.qkv_bias.then(|| init.init([d], device)),
                    v_bias: config.qkv_bias.then(|| init.init([d], device)),
                }),
                norm: config.scale_attn_inner.then(|| ln(d)),
                proj: linear(d, d, true, init, device),
                num_heads: config.num_attention_heads,
            },
            gamma_1: gamma(),
            norm2: ln(d),
            mlp: EvaMlp {
                fc1_g: config
                    .swiglu_mlp
                    .then(|| linear(d, hidden, true, init, device)),
                fc1_x: config
                    .swiglu_mlp
                    .then(|| linear(d, hidden, true, init, device)),
                fc1: (!config.swiglu_mlp).then(|| linear(d, hidden, true, init, device)),
                norm: config.scale_mlp.then(|| ln(hidden)),
                fc2: linear(hidden, d, true, init, device),
            },
            gamma_2: gamma(),
        }
    }

    /// `[N, T, D]` → `[N, T, D]`; the attention probabilities when asked.
    fn forward(
        &self,
        x: Tensor<3>,
        rope: Option<&Rope>,
        need_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let a = &self.attn;
        let h = self.norm1.forward(x.clone());
        let [q, k, v] = match (&a.qkv, &a.q_proj, &a.k_proj, &a.v_proj) {
            (Some(f), ..) => f.forward(h),
            (None, Some(q), Some(k), Some(v)) => {
                [q.forward(h.clone()), k.forward(h.clone()), v.forward(h)]
            }
            _ => unreachable!("EvaAttention is built with one projection layout"),
        };
        let (q, k) = match rope {
            Some(r) => (r.apply(q, a.num_heads, 1), r.apply(k, a.num_heads, 1)),
            None => (q, k),
        };
        let (ctx, probs) =
            multi_head_attention(q, k, v, a.num_heads, &AttentionMask::None, None, need_probs);
        let ctx = match &a.norm {
            Some(n) => n.forward(ctx),
            None => ctx,
        };
        let x = layer_scale(a.proj.forward(ctx), &self.gamma_1) + x;
        let m = self.mlp.forward(self.norm2.forward(x.clone()));
        (layer_scale(m, &self.gamma_2) + x, probs)
    }
}

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------

/// timm's `Eva` (image tower; `head` kept as the CLIP projection where it is one).
#[derive(Module, Debug)]
pub struct EvaModel {
    /// `cls_token`: `[1, 1, D]`.
    pub cls_token: Param<Tensor<3>>,
    /// `pos_embed`: `[1, 1 + Gh·Gw, D]` (`[1, Gh·Gw, D]` with `no_embed_class`).
    pub pos_embed: Option<Param<Tensor<3>>>,
    /// `patch_embed.proj` (stored as `patch_embed.projection`).
    pub patch_embed: PatchEmbeddings,
    /// `blocks.N`.
    pub blocks: Vec<EvaBlock>,
    /// `norm`: the final norm, before pooling.
    pub norm: Option<LayerNorm>,
    /// `fc_norm`: the norm after pooling.
    pub fc_norm: Option<LayerNorm>,
    /// `head`: the CLIP projection `D → E` (EVA-CLIP towers).
    pub head: Option<Linear>,
    /// The config the model was built from.
    #[module(skip)]
    pub config: EvaConfig,
}

impl EvaModel {
    /// Builds the module tree for `config` with parameters drawn from `init`.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` for inconsistent sizes (`D` not a multiple
    /// of `H`, a head dimension not a multiple of 4 with rotary embeddings).
    pub fn new(
        config: &EvaConfig,
        init: &Initializer,
        device: &Device,
        file: &str,
    ) -> Result<Self, ModelError> {
        let grid = config.grid();
        check_sizes(
            Path::new(file),
            config.hidden_size,
            config.num_attention_heads,
            &[
                ("patch_size", config.patch_size),
                ("embed_dim", config.hidden_size),
                ("mlp hidden width", config.intermediate_size),
                ("num_channels", config.num_channels),
                ("img_size / patch_size", grid[0].min(grid[1])),
            ],
        )?;
        if config.use_rot_pos_emb && !config.head_dim().is_multiple_of(4) {
            return Err(ModelError::Unsupported {
                file: file.to_string(),
                message: format!(
                    "rotary position embeddings need a head dimension divisible by 4; \
                     embed_dim {} / num_heads {} = {}",
                    config.hidden_size,
                    config.num_attention_heads,
                    config.head_dim()
                ),
            });
        }
        let d = config.hidden_size;
        let rows = grid[0] * grid[1] + usize::from(!config.no_embed_class);
        let ln = || layer_norm(d, config.layer_norm_eps, device);
        Ok(Self {
            cls_token: init.init([1, 1, d], device),
            pos_embed: config
                .use_abs_pos_emb
                .then(|| init.init([1, rows, d], device)),
            patch_embed: PatchEmbeddings::new(
                config.num_channels,
                d,
                config.patch_size,
                init,
                device,
            ),
            blocks: (0..config.num_hidden_layers)
                .map(|_| EvaBlock::new(config, init, device))
                .collect(),
            norm: config.norm.then(ln),
            fc_norm: config.fc_norm.then(ln),
            head: config
                .projection_dim
                .map(|e| linear(d, e, true, init, device)),
            config: config.clone(),
        })
    }

    /// Loads a checkpoint in timm's `Eva` layout (timm's `config.json` with `architecture`;
    /// weights under timm's names), strictly. `rope.*` buffers and, outside the CLIP towers,
    /// `head.*` are ignored.
    ///
    /// # Errors
    /// [`ModelError::Checkpoint`] for an unreadable `config.json`, [`ModelError::Unsupported`]
    /// as [`EvaConfig::from_timm`], [`ModelError::Load`] naming every missing / unexpected key
    /// (timm's names) and every shape mismatch.
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        let shapes = checkpoint_shapes(ckpt)?;
        let file = ckpt.config.display().to_string();
        let raw = ckpt.config_json()?;
        if raw.get("architecture").is_none() {
            return Err(ModelError::Unsupported {
                file,
                message: "model_type 'eva' is read from timm's layout: config.json needs timm's \
                          'architecture' (e.g. \"eva02_base_patch16_clip_224\")"
                    .into(),
            });
        }
        let config = EvaConfig::from_timm(&raw, &shapes, &file)?;
        let mut opts = opts.clone();
        opts.remap.extend(
            TIMM_KEY_MAP
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string())),
        );
        opts.benign_unused.push("^rope\\.".into());
        if config.projection_dim.is_none() {
            opts.benign_unused.push("^head\\.".into());
        }
        let model = Self::new(&config, &Initializer::Zeros, device, &file)?;
        Ok(load_strict(model, &ckpt.weights, &opts)?)
    }

    /// `[N, C, H, W]` → tokens `[N, 1 + h·w, D]` (CLS, position embeddings added) and the
    /// grid `[h, w]`.
    fn embed_tokens(&self, pixel_values: Tensor<4>) -> (Tensor<3>, [usize; 2]) {
        let (patches, hw) = self.patch_embed.forward(pixel_values);
        let [n, _, d] = patches.dims();
        let cls = self.cls_token.val().expand([n, 1, d]);
        let grid = self.config.grid();
        let resample = |p: Tensor<3>| {
            if hw == grid {
                p
            } else {
                interpolate_pos_grid(p, grid, hw, true)
            }
        };
        let x = match &self.pos_embed {
            None => Tensor::cat(vec![cls, patches], 1),
            Some(p) if self.config.no_embed_class => {
                Tensor::cat(vec![cls, patches + resample(p.val())], 1)
            }
            Some(p) => {
                let pos = p.val();
                let [_, t, d] = pos.dims();
                let head = pos.clone().slice([0..1, 0..1, 0..d]);
                let rows = resample(pos.slice([0..1, 1..t, 0..d]));
                Tensor::cat(vec![cls, patches], 1) + Tensor::cat(vec![head, rows], 1)
            }
        };
        (x, hw)
    }

    /// Full forward pass.
    ///
    /// # Shapes
    /// `pixel_values: [N, C, H, W]` (any size of at least one patch, see the module docs) →
    /// `last_hidden_state: [N, 1 + h·w, D]` (timm's `forward_features`: after `norm` where the
    /// model has one), `pooler_output: [N, D]` (`forward_head(pre_logits=True)`: the CLS token,
    /// or `fc_norm` of the mean patch token), `hidden_states`: `L + 1` tensors `[N, T, D]`
    /// (the input of each block, then the last block's output, before `norm`), `attentions`:
    /// `L` tensors `[N, H, T, T]`. Computed in the weights' dtype, returned in f32.
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        let (x, hw) = self.embed_tokens(pixel_values);
        let rope = self
            .config
            .use_rot_pos_emb
            .then(|| Rope::new(&self.config, hw, &x.device()));
        let (x, hidden_states, attentions) = run_stack(&self.blocks, x, opts, |b, x, p| {
            b.forward(x, rope.as_ref(), p)
        });
        let last_hidden_state = self.sequence_output(x);
        let pooler_output = self.pool(last_hidden_state.clone());
        EncoderOutput {
            last_hidden_state,
            pooler_output,
            hidden_states,
            attentions,
        }
        .into_f32()
    }

    /// The final `norm` when the model has one.
    fn sequence_output(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.norm {
            Some(n) => n.forward(x),
            None => x,
        }
    }

    /// `forward_head(pre_logits=True)` of a sequence output.
    fn pool(&self, seq: Tensor<3>) -> Tensor<2> {
        let pooled = match self.config.pool {
            EvaPool::Token => token(seq, 0),
            EvaPool::Avg => mean_patch(seq, 1),
        };
        match &self.fc_norm {
            Some(n) => n.forward(pooled),
            None => pooled,
        }
    }

    fn float_dtype(&self) -> burn::tensor::DType {
        self.cls_token.val().dtype()
    }
}

impl VisionEncoder for EvaModel {
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.forward(pixel_values, opts)
    }

    fn num_prefix_tokens(&self) -> usize {
        1
    }

    /// The sequence output (`norm`, where the model has one), then: `Pooled` = the pooled
    /// output through the CLIP projection `head` where the model has one (open_clip's image
    /// embedding), else `forward_head(pre_logits=True)`; `Summary` = CLS; `MeanPatch` = mean of
    /// the patch tokens.
    fn readout(&self, hidden: Tensor<3>, readout: VisionReadout) -> Tensor<2> {
        let seq = self.sequence_output(to_dtype(hidden, self.float_dtype()));
        to_f32(match readout {
            VisionReadout::Pooled => {
                let pooled = self.pool(seq);
                match &self.head {
                    Some(h) => h.forward(pooled),
                    None => pooled,
                }
            }
            VisionReadout::Summary => token(seq, 0),
            VisionReadout::MeanPatch => mean_patch(seq, 1),
        })
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            model_type: MODEL_TYPE.into(),
            dtype: bindscope_core::load::dtype_name(self.float_dtype()),
            hidden_size: c.hidden_size,
            embed_dim: c.projection_dim.unwrap_or(c.hidden_size),
            num_layers: c.num_hidden_layers,
            num_params: self.num_params(),
            num_heads: c.num_attention_heads,
            input_size: c.image_size,
            patch_size: c.patch_size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// timm 1.0.31, `RotaryEmbeddingCat(dim=8, in_pixels=False, feat_shape=[2, 3],
    /// ref_feat_shape=[4, 4]).get_embed()`, rows 0 and 5 (sin | cos), printed with
    /// `torch.set_printoptions(precision=8)`.
    #[test]
    fn rope_tables_match_timm() {
        let (sin, cos) = rope_tables([2, 3], 8, Some([4, 4]), 10000.0);
        assert_eq!(sin.len(), 6 * 8);
        assert!(sin[..8].iter().all(|&v| v == 0.0));
        assert!(cos[..8].iter().all(|&v| v == 1.0));
        let row5: [f64; 16] = [
            0.909_297_41,
            0.909_297_41,
            0.019_998_67,
            0.019_998_67,
            0.457_272_56,
            0.457_272_56,
            0.026_663_51,
            0.026_663_51,
            -0.416_146_84,
            -0.416_146_84,
            0.999_800_03,
            0.999_800_03,
            -0.889_326_63,
            -0.889_326_63,
            0.999_644_46,
            0.999_644_46,
        ];
        for k in 0..8 {
            assert!(
                (f64::from(sin[5 * 8 + k]) - row5[k]).abs() < 1e-6,
                "sin[5, {k}]"
            );
            assert!(
                (f64::from(cos[5 * 8 + k]) - row5[8 + k]).abs() < 1e-6,
                "cos[5, {k}]"
            );
        }
    }
}
