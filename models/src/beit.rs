//! # BEiT — `BeitModel`
//!
//! Bao et al., *BEiT: BERT Pre-Training of Image Transformers*
//! (<https://arxiv.org/abs/2106.08254>), as transformers implements it in `BeitModel`
//! (`model_type: "beit"`, e.g. `microsoft/beit-base-patch16-224-pt22k`), used here as a frozen
//! feature extractor.
//!
//! A pre-norm ViT ([`crate::vit`]'s patch embedding, MLP and key names) with three additions,
//! each switched by `config.json`:
//! - **relative position bias** (§2.6 of the paper): a learned table of
//!   `(2·Gh − 1)(2·Gw − 1) + 3` rows × `H` heads, indexed by the offset between two patches (plus
//!   three rows for CLS→patch, patch→CLS and CLS→CLS), added to the scaled attention scores;
//!   one table per block (`use_relative_position_bias`, the fine-tuned checkpoints) or one
//!   shared by every block (`use_shared_relative_position_bias`, the pre-training checkpoints);
//!   absolute position embeddings only with `use_absolute_position_embeddings`;
//! - **layer scale** (`layer_scale_init_value > 0`): each residual branch multiplied by a
//!   learned per-channel `lambda_1` / `lambda_2`;
//! - **mean pooling** (`use_mean_pooling`, the default): no final `layernorm`; the pooler is
//!   `pooler.layernorm(mean of the patch tokens)`. Without it, a final `layernorm` and the CLS
//!   token.
//!
//! The key projection has no bias (the query and value have one).
//!
//! ## Other input sizes
//! For an input whose patch grid differs from the configured one, every relative position
//! table is resampled as `BeitRelativePositionBias.forward` does for any input: the first
//! `(2·Gh − 1)(2·Gw − 1)` rows, viewed as a grid, bilinearly (`align_corners=False`) to the new
//! window's `(2·h − 1) × (2·w − 1)`, the three CLS rows kept; the grid is read as
//! transformers reads it (`reshape(1, 2·Gw − 1, 2·Gh − 1, H)`, which is exact for the square
//! windows of every released checkpoint). Absolute position embeddings are resampled
//! bicubically ([`crate::nn::interpolate_pos_grid`]).
//!
//! ## Pre-training checkpoints
//! `BeitForMaskedImageModeling` checkpoints (the `-pt22k` releases) store the encoder under
//! `beit.`, beside the head's `layernorm` and `lm_head`, and have no pooler. Loaded as a
//! `BeitModel`, transformers initialises the missing `pooler.layernorm` to γ = 1, β = 0 (and
//! warns); [`BeitModel::load`] does the same, so `pooler_output` is the parameter-free
//! LayerNorm of the mean patch token, as `BeitModel.from_pretrained(...)` computes it, and
//! [`BeitModel::pooler_initialised`] says so. `BeitForImageClassification` checkpoints load
//! the same way (`beit.` stripped, `classifier.*` ignored), pooler included.
//!
//! ## timm checkpoints (BEiT v2)
//! A checkpoint in timm's `Beit` layout (Peng et al., *BEiT v2*, <https://arxiv.org/abs/2208.06366>,
//! e.g. `timm/beitv2_base_patch16_224.in1k_ft_in22k_in1k`: timm's `config.json` with
//! `architecture` and `pretrained_cfg`, weights under timm's names) loads through a key map
//! ([`TIMM_KEY_MAP`]) onto the same modules, not a conversion: the config is read off the
//! weights ([`BeitConfig::from_timm`]), timm's fused `qkv` projection is kept as
//! [`FusedQkv`] (sliced into query, key and value in the forward pass), `gamma_1` / `gamma_2`
//! are the layer scales, `fc_norm` the pooler's LayerNorm, `head.*` is ignored. Outputs are
//! timm's: `last_hidden_state` is `forward_features`, `pooler_output` is
//! `forward_head(pre_logits=True)`. The image processor comes from `pretrained_cfg`
//! (`ImageProcessor::from_timm_config` in `bindscope-data`). timm runs these models at their
//! configured size only; other sizes resample the tables as above.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bindscope_core::{Checkpoint, LoadOptions};
//! use bindscope_models::{ForwardOptions, beit::BeitModel};
//! let device = burn::tensor::Device::flex();
//! let ckpt = Checkpoint::resolve("microsoft/beit-base-patch16-224-pt22k")?;
//! let model = BeitModel::load(&ckpt, &device, &LoadOptions::default())?;
//! let pixels = burn::tensor::Tensor::<4>::zeros([1, 3, 224, 224], &device);
//! let out = model.forward(pixels, ForwardOptions::default());
//! assert_eq!(out.last_hidden_state.dims(), [1, 197, 768]);
//! # Ok(()) }
//! ```
//!
//! ## Keys
//! `embeddings.{cls_token,mask_token,position_embeddings,patch_embeddings.projection}`,
//! `encoder.relative_position_bias.relative_position_bias_table` (shared),
//! `encoder.layer.N.{attention.attention.{query,key,value,relative_position_bias
//! .relative_position_bias_table},attention.output.dense,intermediate.dense,output.dense,
//! layernorm_before,layernorm_after,lambda_1,lambda_2}`, `layernorm`, `pooler.layernorm`: the
//! layout transformers 4 and 5 both write. `relative_position_index` buffers (older
//! checkpoints store them) are ignored: the index is recomputed for every window.

use std::path::Path;

use bindscope_core::{Checkpoint, LoadOptions, load_strict};
use burn::module::Param;
use burn::nn::{Initializer, LayerNorm, Linear};
use burn::prelude::*;
use burn::tensor::TensorData;
use serde::Deserialize;

use crate::attention::{AttentionMask, multi_head_attention};
use crate::linearize::{
    BlockParts, HeadParts, LinearParts, Linearization, NormParts, Outputs, Pool, VitParts,
};
use crate::nn::{
    Activation, check_sizes, checkpoint_shapes, count_blocks, de_image_size, interpolate_pos_grid,
    layer_norm, layer_scale, linear, mean_patch, run_stack, to_dtype, to_f32, token,
};
use crate::vit::{Dense, PatchEmbeddings, ViTIntermediate};
use crate::{EncoderOutput, ForwardOptions, ModelError, ModelInfo, VisionEncoder, VisionReadout};

/// `model_type` of a `BeitModel` checkpoint.
pub const MODEL_TYPE: &str = "beit";

// ---------------------------------------------------------------------------------------------
// Config
// ---------------------------------------------------------------------------------------------

/// `config.json` of a transformers `BeitModel` (`BeitConfig`); missing fields take the
/// transformers defaults (BEiT-B/16 at 224, no position embeddings of either kind, layer scale
/// 0.1, mean pooling). The semantic-segmentation fields are not read.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct BeitConfig {
    /// `"beit"`.
    pub model_type: String,
    /// Width `D`.
    pub hidden_size: usize,
    /// Number of blocks `L`.
    pub num_hidden_layers: usize,
    /// Number of attention heads `H`.
    pub num_attention_heads: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// MLP activation.
    pub hidden_act: String,
    /// Epsilon of every LayerNorm.
    pub layer_norm_eps: f64,
    /// Configured input size `[H, W]`; sets the patch grid `[Gh, Gw]` of the position tables.
    #[serde(deserialize_with = "de_image_size")]
    pub image_size: [usize; 2],
    /// Side of the square patches.
    pub patch_size: usize,
    /// Input channels.
    pub num_channels: usize,
    /// Whether `embeddings.mask_token` exists (pre-training checkpoints; unused without a mask).
    pub use_mask_token: bool,
    /// Learned absolute position embeddings `[1, 1 + Gh·Gw, D]`.
    pub use_absolute_position_embeddings: bool,
    /// One relative position table per block.
    pub use_relative_position_bias: bool,
    /// One relative position table shared by every block.
    pub use_shared_relative_position_bias: bool,
    /// Layer scale: `lambda_1` / `lambda_2` exist when this is positive.
    pub layer_scale_init_value: f64,
    /// Mean pooling with `pooler.layernorm` and no final `layernorm`; otherwise a final
    /// `layernorm` and the CLS token.
    pub use_mean_pooling: bool,
    /// timm's attention layout: one fused `qkv` projection `[3·D, D]` without bias, plus
    /// `q_bias` and `v_bias` (the key gets none). Not a transformers field: set by
    /// [`BeitConfig::from_timm`].
    #[serde(skip)]
    pub fused_qkv: bool,
}

impl Default for BeitConfig {
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
            use_mask_token: false,
            use_absolute_position_embeddings: false,
            use_relative_position_bias: false,
            use_shared_relative_position_bias: false,
            layer_scale_init_value: 0.1,
            use_mean_pooling: true,
            fused_qkv: false,
        }
    }
}

impl BeitConfig {
    /// The config of a checkpoint in timm's `Beit` layout (`beit_*`, `beitv2_*` models; timm
    /// 1.0), read off the weights and timm's `config.json`: `D` from `cls_token`, `L` from the
    /// `blocks.N` present, `H` and the window from a relative position table, the MLP width
    /// from `mlp.fc1`, the patch from `patch_embed.proj`; the image size from
    /// `pretrained_cfg.input_size` (else the table's window); each option from the keys present
    /// (`pos_embed`, per-block or shared tables, `gamma_1` for layer scale, `fc_norm` for mean
    /// pooling, `norm` for the CLS token, as `global_pool` — default `avg` — asks); timm's
    /// LayerNorm eps 1e-6 and exact GELU.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` when a key the layout needs is missing, or the
    /// checkpoint uses a variant this file does not implement (SwiGLU or scaled MLPs).
    pub fn from_timm(
        config: &serde_json::Value,
        shapes: &std::collections::BTreeMap<String, Vec<usize>>,
        file: &str,
    ) -> Result<Self, ModelError> {
        let err = |message: String| ModelError::Unsupported {
            file: file.to_string(),
            message,
        };
        let dims = |key: &str, rank: usize| -> Result<&[usize], ModelError> {
            match shapes.get(key) {
                Some(s) if s.len() == rank => Ok(s),
                Some(s) => Err(err(format!(
                    "timm BEiT layout: '{key}' has shape {s:?}, expected rank {rank}"
                ))),
                None => Err(err(format!("timm BEiT layout: no '{key}' in the weights"))),
            }
        };
        for unsupported in ["blocks.0.mlp.fc1_g.weight", "blocks.0.mlp.norm.weight"] {
            if shapes.contains_key(unsupported) {
                return Err(err(format!(
                    "timm BEiT variant with '{unsupported}' (SwiGLU / scaled MLP) is not supported"
                )));
            }
        }
        let hidden_size = dims("cls_token", 3)?[2];
        let num_hidden_layers = count_blocks(shapes, "blocks.");
        let patch = dims("patch_embed.proj.weight", 4)?;
        let (num_channels, patch_size) = (patch[1], patch[3]);
        let intermediate_size = dims("blocks.0.mlp.fc1.weight", 2)?[0];
        let per_block = "blocks.0.attn.relative_position_bias_table";
        let shared = "rel_pos_bias.relative_position_bias_table";
        let table = if shapes.contains_key(per_block) {
            dims(per_block, 2)?
        } else {
            dims(shared, 2)?
        };
        let num_attention_heads = table[1];
        let image_size = match config
            .pointer("/pretrained_cfg/input_size")
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_u64()).collect::<Vec<_>>())
        {
            Some(v) if v.len() == 3 => [v[1] as usize, v[2] as usize],
            _ => {
                // A square window: (2g − 1)² + 3 rows.
                let g =
                    ((((table[0].saturating_sub(3)) as f64).sqrt() + 1.0) / 2.0).round() as usize;
                [g * patch_size, g * patch_size]
            }
        };
        // timm pools as `global_pool` says (default "avg"), with `fc_norm` after an average and
        // `norm` before the CLS token; the two combinations transformers' BEiT also has.
        let global_pool = config
            .get("global_pool")
            .and_then(|v| v.as_str())
            .unwrap_or("avg");
        let fc_norm = shapes.contains_key("fc_norm.weight");
        let norm = shapes.contains_key("norm.weight");
        let use_mean_pooling = match (global_pool, fc_norm, norm) {
            ("avg", true, false) => true,
            ("token", false, true) => false,
            (pool, fc_norm, norm) => {
                let has = |b: bool, k: &str| format!("{}'{k}'", if b { "" } else { "no " });
                return Err(err(format!(
                    "timm BEiT layout: global_pool '{pool}' with {} and {}; bindscope reads \
                     'avg' with 'fc_norm' (no 'norm') and 'token' with 'norm' (no 'fc_norm')",
                    has(fc_norm, "fc_norm"),
                    has(norm, "norm"),
                )));
            }
        };
        Ok(Self {
            model_type: MODEL_TYPE.into(),
            hidden_size,
            num_hidden_layers,
            num_attention_heads,
            intermediate_size,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-6,
            image_size,
            patch_size,
            num_channels,
            use_mask_token: false,
            use_absolute_position_embeddings: shapes.contains_key("pos_embed"),
            use_relative_position_bias: shapes.contains_key(per_block),
            use_shared_relative_position_bias: shapes.contains_key(shared),
            layer_scale_init_value: if shapes.contains_key("blocks.0.gamma_1") {
                1.0
            } else {
                0.0
            },
            use_mean_pooling,
            fused_qkv: true,
        })
    }

    /// The configured patch grid `[Gh, Gw]`.
    pub fn grid(&self) -> [usize; 2] {
        [
            self.image_size[0] / self.patch_size,
            self.image_size[1] / self.patch_size,
        ]
    }
}

/// The model-name prefixes of timm's `Beit` class (`timm.models.beit`): a timm `config.json`
/// whose `architecture` starts with one of them reads as `model_type` `beit`.
pub const TIMM_ARCHITECTURES: [&str; 2] = ["beit_", "beitv2_"];

/// timm's `Beit` key names → transformers' (applied in order; [`BeitModel::load`]). The fused
/// `qkv` keeps its own module ([`FusedQkv`]); `head.*` is ignored.
pub const TIMM_KEY_MAP: [(&str, &str); 15] = [
    ("^cls_token$", "embeddings.cls_token"),
    ("^pos_embed$", "embeddings.position_embeddings"),
    (
        "^patch_embed\\.proj\\.",
        "embeddings.patch_embeddings.projection.",
    ),
    (
        "^rel_pos_bias\\.relative_position_bias_table$",
        "encoder.relative_position_bias.relative_position_bias_table",
    ),
    (
        "^blocks\\.(\\d+)\\.norm1\\.",
        "encoder.layer.$1.layernorm_before.",
    ),
    (
        "^blocks\\.(\\d+)\\.norm2\\.",
        "encoder.layer.$1.layernorm_after.",
    ),
    (
        "^blocks\\.(\\d+)\\.attn\\.proj\\.",
        "encoder.layer.$1.attention.output.dense.",
    ),
    (
        "^blocks\\.(\\d+)\\.attn\\.relative_position_bias_table$",
        "encoder.layer.$1.attention.attention.relative_position_bias.relative_position_bias_table",
    ),
    (
        "^blocks\\.(\\d+)\\.attn\\.qkv\\.weight$",
        "encoder.layer.$1.attention.attention.qkv.weight",
    ),
    (
        "^blocks\\.(\\d+)\\.attn\\.(q_bias|v_bias)$",
        "encoder.layer.$1.attention.attention.qkv.$2",
    ),
    (
        "^blocks\\.(\\d+)\\.mlp\\.fc1\\.",
        "encoder.layer.$1.intermediate.dense.",
    ),
    (
        "^blocks\\.(\\d+)\\.mlp\\.fc2\\.",
        "encoder.layer.$1.output.dense.",
    ),
    (
        "^blocks\\.(\\d+)\\.gamma_(1|2)$",
        "encoder.layer.$1.lambda_$2",
    ),
    ("^fc_norm\\.", "pooler.layernorm."),
    ("^norm\\.", "layernorm."),
];

/// `Some("beit")` for a timm `architecture` in [`TIMM_ARCHITECTURES`].
pub fn timm_model_type(architecture: &str) -> Option<&'static str> {
    TIMM_ARCHITECTURES
        .iter()
        .any(|p| architecture.starts_with(p))
        .then_some(MODEL_TYPE)
}

// ---------------------------------------------------------------------------------------------
// Relative position bias
// ---------------------------------------------------------------------------------------------

/// Rows of the relative position table of a `[Gh, Gw]` window: `(2·Gh − 1)(2·Gw − 1) + 3`.
pub fn num_relative_distance([gh, gw]: [usize; 2]) -> usize {
    (2 * gh - 1) * (2 * gw - 1) + 3
}

/// The table row each (query, key) pair of a `[Gh, Gw]` window reads, `(1 + Gh·Gw)²` entries,
/// row-major over (query, key), token 0 being CLS (transformers'
/// `BeitRelativePositionBias.generate_relative_position_index`): for patches at `(y, x)` and
/// `(y', x')`, `(y − y' + Gh − 1)·(2·Gw − 1) + (x − x' + Gw − 1)`; CLS→patch reads row `R − 3`,
/// patch→CLS `R − 2`, CLS→CLS `R − 1`, `R` = [`num_relative_distance`].
pub fn relative_position_index([gh, gw]: [usize; 2]) -> Vec<i64> {
    let area = gh * gw;
    let t = area + 1;
    let r = num_relative_distance([gh, gw]) as i64;
    let mut idx = vec![0i64; t * t];
    for i in 0..area {
        for j in 0..area {
            let dy = (i / gw) as i64 - (j / gw) as i64 + gh as i64 - 1;
            let dx = (i % gw) as i64 - (j % gw) as i64 + gw as i64 - 1;
            idx[(i + 1) * t + j + 1] = dy * (2 * gw as i64 - 1) + dx;
        }
    }
    idx[..t].fill(r - 3); // CLS → every token
    for row in idx.chunks_mut(t) {
        row[0] = r - 2; // every token → CLS
    }
    idx[0] = r - 1; // CLS → CLS
    idx
}

/// Weights `[out, in]` of torch's 1-D linear resampling inside `upsample_bilinear2d` with
/// `align_corners=False` and an explicit output size: output `i` reads the source position
/// `max((i + ½)·in/out − ½, 0)`, split between its floor and the next index (clamped).
fn bilinear_weights(input: usize, output: usize) -> Vec<f32> {
    let scale = input as f64 / output as f64;
    let mut w = vec![0f32; output * input];
    for i in 0..output {
        let src = ((i as f64 + 0.5) * scale - 0.5).max(0.0);
        let i0 = (src.floor() as usize).min(input - 1);
        let i1 = if i0 < input - 1 { i0 + 1 } else { i0 };
        let l1 = (src - i0 as f64).clamp(0.0, 1.0);
        w[i * input + i0] += (1.0 - l1) as f32;
        w[i * input + i1] += l1 as f32;
    }
    w
}

/// `relative_position_bias.relative_position_bias_table`: `[R, H]` for the configured window.
#[derive(Module, Debug)]
pub struct BeitRelativePositionBias {
    /// `relative_position_bias_table`: `[(2·Gh − 1)(2·Gw − 1) + 3, H]`.
    pub relative_position_bias_table: Param<Tensor<2>>,
    /// The configured window `[Gh, Gw]`.
    #[module(skip)]
    pub window: [usize; 2],
}

impl BeitRelativePositionBias {
    /// A table for `window` and `heads` heads, drawn from `init`.
    pub fn new(window: [usize; 2], heads: usize, init: &Initializer, device: &Device) -> Self {
        Self {
            relative_position_bias_table: init.init([num_relative_distance(window), heads], device),
            window,
        }
    }

    /// The table for a `[h, w]` window: the stored one, or its patch rows resampled bilinearly
    /// (see the module docs), `[(2h − 1)(2w − 1) + 3, H]`.
    fn table_for(&self, window: [usize; 2]) -> Tensor<2> {
        let table = self.relative_position_bias_table.val();
        if window == self.window {
            return table;
        }
        let device = table.device();
        let dtype = table.dtype();
        let [rows, heads] = table.dims();
        // transformers: reshape(1, old_width, old_height, -1), interpolated to
        // (new_height, new_width).
        let (a, b) = (2 * self.window[1] - 1, 2 * self.window[0] - 1);
        let (na, nb) = (2 * window[0] - 1, 2 * window[1] - 1);
        let grid = table
            .clone()
            .slice([0..rows - 3, 0..heads])
            .reshape([a, b, heads])
            .permute([2, 0, 1]); // [H, a, b]
        let wa = Tensor::<2>::from_data(TensorData::new(bilinear_weights(a, na), [na, a]), &device);
        let wb = Tensor::<2>::from_data(TensorData::new(bilinear_weights(b, nb), [nb, b]), &device);
        let wa = to_dtype(wa, dtype)
            .unsqueeze_dim::<3>(0)
            .expand([heads, na, a]);
        let wb = to_dtype(wb.transpose(), dtype)
            .unsqueeze_dim::<3>(0)
            .expand([heads, b, nb]);
        let resized = wa.matmul(grid).matmul(wb); // [H, na, nb]
        let resized = resized.permute([1, 2, 0]).reshape([na * nb, heads]);
        Tensor::cat(vec![resized, table.slice([rows - 3..rows, 0..heads])], 0)
    }

    /// The additive attention bias for a `[h, w]` patch grid, `[1, H, 1 + h·w, 1 + h·w]`, given
    /// that grid's [`relative_position_index`] on the table's device (`index`, `(1 + h·w)²`
    /// entries; built once per forward pass and shared by every table).
    pub fn bias(&self, window: [usize; 2], index: &Tensor<1, Int>) -> Tensor<4> {
        let table = self.table_for(window);
        let [_, heads] = table.dims();
        let t = window[0] * window[1] + 1;
        table
            .select(0, index.clone())
            .reshape([t, t, heads])
            .permute([2, 0, 1])
            .unsqueeze_dim::<4>(0)
    }
}

// ---------------------------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------------------------

/// timm's fused projection (`attn.qkv.weight`, `attn.q_bias`, `attn.v_bias`): one
/// `[3·D, D]` weight in torch's layout, biases for the query and the value only.
#[derive(Module, Debug)]
pub struct FusedQkv {
    /// `qkv.weight`: `[3·D, D]`, rows query | key | value.
    pub weight: Param<Tensor<2>>,
    /// `q_bias`: `[D]`.
    pub q_bias: Option<Param<Tensor<1>>>,
    /// `v_bias`: `[D]`.
    pub v_bias: Option<Param<Tensor<1>>>,
}

impl FusedQkv {
    /// `[N, T, D]` → query, key, value, each `[N, T, D]`: `x·Wᵀ + [q_bias | 0 | v_bias]`.
    pub fn forward(&self, x: Tensor<3>) -> [Tensor<3>; 3] {
        let [n, t, d] = x.dims();
        let w = self.weight.val();
        let y = x.reshape([n * t, d]).matmul(w.transpose()); // [N·T, 3D]
        let part = |i: usize, bias: &Option<Param<Tensor<1>>>| {
            let p = y.clone().slice([0..n * t, i * d..(i + 1) * d]);
            let p = match bias {
                Some(b) => p + b.val().reshape([1, d]),
                None => p,
            };
            p.reshape([n, t, d])
        };
        [part(0, &self.q_bias), part(1, &None), part(2, &self.v_bias)]
    }
}

/// `attention.attention`: query (bias), key (no bias), value (bias) — or timm's [`FusedQkv`]
/// — and the block's own relative position table when `use_relative_position_bias`.
#[derive(Module, Debug)]
pub struct BeitSelfAttention {
    /// `query`: `D → D` (transformers' layout).
    pub query: Option<Linear>,
    /// `key`: `D → D`, no bias (transformers' layout).
    pub key: Option<Linear>,
    /// `value`: `D → D` (transformers' layout).
    pub value: Option<Linear>,
    /// `qkv` (timm's layout).
    pub qkv: Option<FusedQkv>,
    /// `relative_position_bias`.
    pub relative_position_bias: Option<BeitRelativePositionBias>,
    /// Number of heads.
    #[module(skip)]
    pub num_heads: usize,
}

/// `attention`: self-attention and its output projection.
#[derive(Module, Debug)]
pub struct BeitAttention {
    /// `attention.attention`.
    pub attention: BeitSelfAttention,
    /// `attention.output.dense`: `D → D`.
    pub output: Dense,
}

/// One block (`BeitLayer`): `x = x + λ₁ ⊙ attn(layernorm_before(x))`,
/// `x = x + λ₂ ⊙ mlp(layernorm_after(x))`, λ = 1 without layer scale.
#[derive(Module, Debug)]
pub struct BeitLayer {
    /// `attention`.
    pub attention: BeitAttention,
    /// `intermediate`: `dense` (`D → intermediate`) and the activation.
    pub intermediate: ViTIntermediate,
    /// `output.dense`: `intermediate → D`.
    pub output: Dense,
    /// `layernorm_before`.
    pub layernorm_before: LayerNorm,
    /// `layernorm_after`.
    pub layernorm_after: LayerNorm,
    /// `lambda_1`: `[D]`, when `layer_scale_init_value > 0`.
    pub lambda_1: Option<Param<Tensor<1>>>,
    /// `lambda_2`: `[D]`, when `layer_scale_init_value > 0`.
    pub lambda_2: Option<Param<Tensor<1>>>,
}

impl BeitLayer {
    fn new(config: &BeitConfig, act: Activation, init: &Initializer, device: &Device) -> Self {
        let d = config.hidden_size;
        let ln = || layer_norm(d, config.layer_norm_eps, device);
        let lambda = || (config.layer_scale_init_value > 0.0).then(|| init.init([d], device));
        let separate = !config.fused_qkv;
        Self {
            attention: BeitAttention {
                attention: BeitSelfAttention {
                    query: separate.then(|| linear(d, d, true, init, device)),
                    key: separate.then(|| linear(d, d, false, init, device)),
                    value: separate.then(|| linear(d, d, true, init, device)),
                    qkv: config.fused_qkv.then(|| FusedQkv {
                        weight: init.init([3 * d, d], device),
                        q_bias: Some(init.init([d], device)),
                        v_bias: Some(init.init([d], device)),
                    }),
                    relative_position_bias: config.use_relative_position_bias.then(|| {
                        BeitRelativePositionBias::new(
                            config.grid(),
                            config.num_attention_heads,
                            init,
                            device,
                        )
                    }),
                    num_heads: config.num_attention_heads,
                },
                output: Dense {
                    dense: linear(d, d, true, init, device),
                },
            },
            intermediate: ViTIntermediate {
                dense: linear(d, config.intermediate_size, true, init, device),
                act,
            },
            output: Dense {
                dense: linear(config.intermediate_size, d, true, init, device),
            },
            layernorm_before: ln(),
            layernorm_after: ln(),
            lambda_1: lambda(),
            lambda_2: lambda(),
        }
    }

    /// `[N, T, D]` → `[N, T, D]` on a `window` grid (its relative position `index`), with the
    /// shared bias `[1, H, T, T]` when the model has one; the attention probabilities when
    /// asked.
    fn forward(
        &self,
        x: Tensor<3>,
        shared: Option<&Tensor<4>>,
        window: [usize; 2],
        index: &Tensor<1, Int>,
        need_probs: bool,
    ) -> (Tensor<3>, Option<Tensor<4>>) {
        let sa = &self.attention.attention;
        let own = sa
            .relative_position_bias
            .as_ref()
            .map(|r| r.bias(window, index));
        let mask = match (own, shared) {
            (Some(o), Some(s)) => AttentionMask::Bias(o + s.clone()),
            (Some(o), None) => AttentionMask::Bias(o),
            (None, Some(s)) => AttentionMask::Bias(s.clone()),
            (None, None) => AttentionMask::None,
        };
        let h = self.layernorm_before.forward(x.clone());
        let [q, k, v] = match (&sa.qkv, &sa.query, &sa.key, &sa.value) {
            (Some(f), ..) => f.forward(h),
            (None, Some(q), Some(k), Some(v)) => {
                [q.forward(h.clone()), k.forward(h.clone()), v.forward(h)]
            }
            _ => unreachable!("BeitSelfAttention is built with one projection layout"),
        };
        let (ctx, probs) = multi_head_attention(q, k, v, sa.num_heads, &mask, None, need_probs);
        let x = layer_scale(self.attention.output.dense.forward(ctx), &self.lambda_1) + x;
        let h = self.intermediate.act.forward(
            self.intermediate
                .dense
                .forward(self.layernorm_after.forward(x.clone())),
        );
        (
            layer_scale(self.output.dense.forward(h), &self.lambda_2) + x,
            probs,
        )
    }
}

/// `encoder`: the shared relative position table (when configured) and the blocks.
#[derive(Module, Debug)]
pub struct BeitEncoder {
    /// `relative_position_bias` (`use_shared_relative_position_bias`).
    pub relative_position_bias: Option<BeitRelativePositionBias>,
    /// `layer.N`.
    pub layer: Vec<BeitLayer>,
}

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------

/// `embeddings`: CLS token, optional mask token (stored, unused), optional absolute position
/// embeddings, patch embedding.
#[derive(Module, Debug)]
pub struct BeitEmbeddings {
    /// `cls_token`: `[1, 1, D]`.
    pub cls_token: Param<Tensor<3>>,
    /// `mask_token`: `[1, 1, D]` (`use_mask_token`).
    pub mask_token: Option<Param<Tensor<3>>>,
    /// `position_embeddings`: `[1, 1 + Gh·Gw, D]` (`use_absolute_position_embeddings`).
    pub position_embeddings: Option<Param<Tensor<3>>>,
    /// `patch_embeddings.projection`.
    pub patch_embeddings: PatchEmbeddings,
    /// The configured grid `[Gh, Gw]`.
    #[module(skip)]
    pub grid: [usize; 2],
}

impl BeitEmbeddings {
    /// `[N, C, H, W]` → `[N, 1 + h·w, D]` and the patch grid `[h, w]`.
    fn forward(&self, pixel_values: Tensor<4>) -> (Tensor<3>, [usize; 2]) {
        let (patches, hw) = self.patch_embeddings.forward(pixel_values);
        let [n, _, d] = patches.dims();
        let cls = self.cls_token.val().expand([n, 1, d]);
        let x = Tensor::cat(vec![cls, patches], 1);
        let x = match &self.position_embeddings {
            None => x,
            Some(p) if hw == self.grid => x + p.val(),
            Some(p) => {
                let pos = p.val();
                let [_, t, d] = pos.dims();
                let cls = pos.clone().slice([0..1, 0..1, 0..d]);
                let grid =
                    interpolate_pos_grid(pos.slice([0..1, 1..t, 0..d]), self.grid, hw, false);
                x + Tensor::cat(vec![cls, grid], 1)
            }
        };
        (x, hw)
    }
}

/// `pooler` with mean pooling: `layernorm(mean of the patch tokens)`.
#[derive(Module, Debug)]
pub struct BeitPooler {
    /// `pooler.layernorm`.
    pub layernorm: LayerNorm,
}

/// transformers' `BeitModel`.
#[derive(Module, Debug)]
pub struct BeitModel {
    /// `embeddings`.
    pub embeddings: BeitEmbeddings,
    /// `encoder`.
    pub encoder: BeitEncoder,
    /// `layernorm`: the final norm, without mean pooling.
    pub layernorm: Option<LayerNorm>,
    /// `pooler`, with mean pooling.
    pub pooler: Option<BeitPooler>,
    /// The config the model was built from.
    #[module(skip)]
    pub config: BeitConfig,
    /// Whether `pooler.layernorm` was not in the checkpoint and holds transformers'
    /// initialisation (γ = 1, β = 0), as for a pre-training checkpoint.
    #[module(skip)]
    pub pooler_initialised: bool,
}

impl BeitModel {
    /// Builds the module tree for `config` with parameters drawn from `init` (the pooler's
    /// LayerNorm γ = 1, β = 0), with or without the pooler.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` for an unknown `hidden_act` or inconsistent
    /// sizes.
    pub fn new(
        config: &BeitConfig,
        with_pooler: bool,
        init: &Initializer,
        device: &Device,
        file: &str,
    ) -> Result<Self, ModelError> {
        check_sizes(
            Path::new(file),
            config.hidden_size,
            config.num_attention_heads,
            &[
                ("patch_size", config.patch_size),
                ("hidden_size", config.hidden_size),
                ("intermediate_size", config.intermediate_size),
                ("num_channels", config.num_channels),
                (
                    "image_size / patch_size",
                    config.grid()[0].min(config.grid()[1]),
                ),
            ],
        )?;
        let act = Activation::parse(&config.hidden_act, "hidden_act", Path::new(file))?;
        let d = config.hidden_size;
        let grid = config.grid();
        let embeddings = BeitEmbeddings {
            cls_token: init.init([1, 1, d], device),
            mask_token: config.use_mask_token.then(|| init.init([1, 1, d], device)),
            position_embeddings: config
                .use_absolute_position_embeddings
                .then(|| init.init([1, 1 + grid[0] * grid[1], d], device)),
            patch_embeddings: PatchEmbeddings::new(
                config.num_channels,
                d,
                config.patch_size,
                init,
                device,
            ),
            grid,
        };
        let encoder = BeitEncoder {
            relative_position_bias: config.use_shared_relative_position_bias.then(|| {
                BeitRelativePositionBias::new(grid, config.num_attention_heads, init, device)
            }),
            layer: (0..config.num_hidden_layers)
                .map(|_| BeitLayer::new(config, act, init, device))
                .collect(),
        };
        let ln = || layer_norm(d, config.layer_norm_eps, device);
        Ok(Self {
            embeddings,
            encoder,
            layernorm: (!config.use_mean_pooling).then(ln),
            pooler: (config.use_mean_pooling && with_pooler)
                .then(|| BeitPooler { layernorm: ln() }),
            config: config.clone(),
            pooler_initialised: false,
        })
    }

    /// Loads a `BeitModel` checkpoint, or the encoder of a `BeitForMaskedImageModeling` /
    /// `BeitForImageClassification` one (`beit.` stripped; the head's `layernorm`, `lm_head.*`
    /// and `classifier.*` ignored), strictly. With mean pooling and no `pooler.layernorm` in
    /// the file, the pooler gets transformers' initialisation (γ = 1, β = 0; see the module
    /// docs). `relative_position_index` buffers are ignored.
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
        let shapes = checkpoint_shapes(ckpt)?;
        let file = ckpt.config.display().to_string();
        let raw = ckpt.config_json()?;
        if raw.get("model_type").is_none() && raw.get("architecture").is_some() {
            let config = BeitConfig::from_timm(&raw, &shapes, &file)?;
            let mut opts = opts.clone();
            opts.remap.extend(
                TIMM_KEY_MAP
                    .iter()
                    .map(|(a, b)| (a.to_string(), b.to_string())),
            );
            opts.benign_unused.push("^head\\.".into());
            opts.benign_unused
                .push("(^|\\.)relative_position_index$".into());
            let model = Self::new(
                &config,
                config.use_mean_pooling,
                &Initializer::Zeros,
                device,
                &file,
            )?;
            return Ok(load_strict(model, &ckpt.weights, &opts)?);
        }
        let config: BeitConfig = ckpt.read_config()?;
        let mut opts = opts.clone();
        let prefixed = !shapes.keys().any(|k| k.starts_with("embeddings."))
            && shapes.keys().any(|k| k.starts_with("beit."));
        if prefixed {
            // The masked-image-modelling head's own `layernorm` would otherwise take the
            // encoder's name once `beit.` is stripped.
            opts.remap
                .push(("^layernorm\\.".into(), "head_layernorm.".into()));
            opts.remap.push(("^beit\\.".into(), String::new()));
            opts.benign_unused
                .push("^(head_layernorm|lm_head|classifier)\\.".into());
        }
        opts.benign_unused
            .push("(^|\\.)relative_position_index$".into());
        // Either pooler key makes the pooler part of the checkpoint (a lone one is then
        // reported with its missing partner); neither is the pre-training layout.
        let prefix = if prefixed { "beit." } else { "" };
        let with_pooler = ["weight", "bias"]
            .iter()
            .any(|p| shapes.contains_key(&format!("{prefix}pooler.layernorm.{p}")));
        let model = Self::new(&config, with_pooler, &Initializer::Zeros, device, &file)?;
        let mut model = load_strict(model, &ckpt.weights, &opts)?;
        if config.use_mean_pooling && !with_pooler {
            let dtype = model.float_dtype();
            let unit = |v: f32| {
                Param::from_tensor(to_dtype(
                    Tensor::<1>::full([config.hidden_size], v, device),
                    dtype,
                ))
            };
            let mut layernorm = layer_norm(config.hidden_size, config.layer_norm_eps, device);
            layernorm.gamma = unit(1.0);
            layernorm.beta = Some(unit(0.0));
            model.pooler = Some(BeitPooler { layernorm });
            model.pooler_initialised = true;
            // transformers warns here too ("newly initialized"): the pooled output is then a
            // parameter-free LayerNorm, which a reader of the numbers should know.
            eprintln!(
                "note: {file}: the weights have no pooler.layernorm (a pre-training checkpoint); \
                 the pooled output uses γ = 1, β = 0, as transformers' BeitModel initialises it"
            );
        }
        Ok(model)
    }

    /// Full forward pass.
    ///
    /// # Shapes
    /// `pixel_values: [N, C, H, W]` (any size of at least one patch; position tables are
    /// resampled for other sizes, see the module docs) → `last_hidden_state: [N, 1 + h·w, D]`
    /// (after the final `layernorm`; the last block's output with mean pooling),
    /// `pooler_output: [N, D]` (`pooler.layernorm` of the mean patch token, or the CLS token
    /// without mean pooling), `hidden_states`: `L + 1` tensors `[N, T, D]`, `attentions`: `L`
    /// tensors `[N, H, T, T]`. Computed in the weights' dtype, returned in f32.
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        let (x, window) = self.embeddings.forward(pixel_values);
        let t = window[0] * window[1] + 1;
        let index = Tensor::<1, Int>::from_data(
            TensorData::new(relative_position_index(window), [t * t]),
            &x.device(),
        );
        let shared = self
            .encoder
            .relative_position_bias
            .as_ref()
            .map(|r| r.bias(window, &index));
        let (x, hidden_states, attentions) = run_stack(&self.encoder.layer, x, opts, |l, x, p| {
            l.forward(x, shared.as_ref(), window, &index, p)
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

    /// The final `layernorm` when the model has one.
    fn sequence_output(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.layernorm {
            Some(ln) => ln.forward(x),
            None => x,
        }
    }

    /// `pooler_output` of a sequence output: the pooler on the mean patch token, or CLS.
    fn pool(&self, seq: Tensor<3>) -> Tensor<2> {
        match &self.pooler {
            Some(p) => p.layernorm.forward(mean_patch(seq, 1)),
            // Mean pooling without a pooler happens only for a module built that way by hand
            // (`load` always adds one): the mean patch token.
            None if self.config.use_mean_pooling => mean_patch(seq, 1),
            None => token(seq, 0),
        }
    }

    fn float_dtype(&self) -> burn::tensor::DType {
        self.embeddings.cls_token.val().dtype()
    }
}

impl VisionEncoder for BeitModel {
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.forward(pixel_values, opts)
    }

    fn num_prefix_tokens(&self) -> usize {
        1
    }

    /// The sequence output (final `layernorm`, when there is one), then: `Pooled` =
    /// `pooler_output` (mean-pooled patches through `pooler.layernorm`, or CLS), `Summary` =
    /// CLS, `MeanPatch` = mean of the patch tokens.
    fn readout(&self, hidden: Tensor<3>, readout: VisionReadout) -> Tensor<2> {
        let seq = self.sequence_output(to_dtype(hidden, self.float_dtype()));
        to_f32(match readout {
            VisionReadout::Pooled => self.pool(seq),
            VisionReadout::Summary => token(seq, 0),
            VisionReadout::MeanPatch => mean_patch(seq, 1),
        })
    }

    /// f32 weights: every readout, either projection layout; the relative position biases are
    /// those of the input's patch grid, constants of the linearization.
    fn linearize(
        &self,
        pixel_values: Tensor<4>,
        readout: VisionReadout,
        outputs: Outputs,
    ) -> Option<Linearization> {
        if self.float_dtype() != burn::tensor::DType::F32 {
            return None;
        }
        let c = &self.config;
        let norm = |n: &LayerNorm| NormParts::new(n, c.layer_norm_eps);
        let dims = pixel_values.dims();
        let (embeddings, window) = self.embeddings.forward(pixel_values.detach());
        let t = window[0] * window[1] + 1;
        let device = embeddings.device();
        let index = Tensor::<1, Int>::from_data(
            TensorData::new(relative_position_index(window), [t * t]),
            &device,
        );
        let shared = self
            .encoder
            .relative_position_bias
            .as_ref()
            .map(|r| r.bias(window, &index));
        let value = |p: &Param<Tensor<1>>| p.val().without_autodiff();
        let blocks = self
            .encoder
            .layer
            .iter()
            .map(|l| {
                let sa = &l.attention.attention;
                let own = sa
                    .relative_position_bias
                    .as_ref()
                    .map(|r| r.bias(window, &index));
                let attn_bias = match (own, &shared) {
                    (Some(o), Some(s)) => Some(o + s.clone()),
                    (Some(o), None) => Some(o),
                    (None, Some(s)) => Some(s.clone()),
                    (None, None) => None,
                }
                .map(|b| b.without_autodiff());
                let (query, key, value_proj) = match (&sa.qkv, &sa.query, &sa.key, &sa.value) {
                    (Some(f), ..) => {
                        let w = f.weight.val().without_autodiff(); // [3D, D], torch layout
                        let d = w.dims()[1];
                        let part = |i: usize, bias: &Option<Param<Tensor<1>>>| LinearParts {
                            weight: w.clone().slice([i * d..(i + 1) * d, 0..d]).transpose(),
                            bias: bias.as_ref().map(value),
                        };
                        (part(0, &f.q_bias), part(1, &None), part(2, &f.v_bias))
                    }
                    (None, Some(q), Some(k), Some(v)) => (
                        LinearParts::new(q),
                        LinearParts::new(k),
                        LinearParts::new(v),
                    ),
                    _ => return None,
                };
                Some(BlockParts {
                    norm1: norm(&l.layernorm_before),
                    query,
                    key,
                    value: value_proj,
                    output: LinearParts::new(&l.attention.output.dense),
                    num_heads: sa.num_heads,
                    attn_bias,
                    layer_scale1: l.lambda_1.as_ref().map(value),
                    norm2: norm(&l.layernorm_after),
                    fc1: LinearParts::new(&l.intermediate.dense),
                    act: l.intermediate.act,
                    fc2: LinearParts::new(&l.output.dense),
                    layer_scale2: l.lambda_2.as_ref().map(value),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        // The sequence output is `layernorm(x)` (or `x` with mean pooling); `Pooled` is
        // `pooler.layernorm` of its mean patch token, or its CLS token.
        let (pool, pooled_norm) = match readout {
            VisionReadout::Pooled => match &self.pooler {
                Some(p) => (Pool::MeanPatch { prefix: 1 }, Some(norm(&p.layernorm))),
                None if c.use_mean_pooling => (Pool::MeanPatch { prefix: 1 }, None),
                None => (Pool::Token(0), None),
            },
            VisionReadout::Summary => (Pool::Token(0), None),
            VisionReadout::MeanPatch => (Pool::MeanPatch { prefix: 1 }, None),
        };
        let parts = VitParts {
            patch_weight: self
                .embeddings
                .patch_embeddings
                .projection
                .weight
                .val()
                .without_autodiff(),
            prefix: 1,
            pre_norm: None,
            blocks,
            head: HeadParts {
                norm: self.layernorm.as_ref().map(norm),
                pool,
                map: None,
                pooled_norm,
                projection: None,
            },
        };
        parts.linearize(dims, embeddings, outputs)
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            model_type: MODEL_TYPE.into(),
            dtype: bindscope_core::load::dtype_name(self.float_dtype()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// transformers' index for a 2 × 2 window (R = 3·3 + 3 = 12), as
    /// `BeitRelativePositionBias.generate_relative_position_index((2, 2))` returns it
    /// (transformers 5.24.0).
    #[test]
    fn relative_position_index_of_a_2x2_window() {
        let idx = relative_position_index([2, 2]);
        #[rustfmt::skip]
        let want: Vec<i64> = vec![
            11, 9, 9, 9, 9,
            10, 4, 3, 1, 0,
            10, 5, 4, 2, 1,
            10, 7, 6, 4, 3,
            10, 8, 7, 5, 4,
        ];
        assert_eq!(idx, want);
    }

    #[test]
    fn bilinear_weights_match_torch_align_corners_false() {
        // F.interpolate(torch.eye(3).reshape(3, 1, 1, 3), size=(1, 5), mode="bilinear",
        // align_corners=False) in torch 2.15.0: sources 0 (clamped from -0.2), 0.4, 1.0, 1.6,
        // 2.2 (clamped to the last index).
        let w = bilinear_weights(3, 5);
        let rows: Vec<&[f32]> = w.chunks(3).collect();
        let close = |a: &[f32], b: [f32; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        assert!(close(rows[0], [1.0, 0.0, 0.0]));
        assert!(close(rows[1], [0.6, 0.4, 0.0]));
        assert!(close(rows[2], [0.0, 1.0, 0.0]));
        assert!(close(rows[3], [0.0, 0.4, 0.6]));
        assert!(close(rows[4], [0.0, 0.0, 1.0]));
        // Same size: the identity.
        let id = bilinear_weights(4, 4);
        for i in 0..4 {
            for j in 0..4 {
                assert_eq!(id[i * 4 + j], if i == j { 1.0 } else { 0.0 });
            }
        }
    }
}
