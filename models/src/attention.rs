//! The attention core shared by every model in this crate: split and merge heads,
//! softmax(Q·Kᵀ·scale + bias)·V with grouped-query attention, masks (causal, padding, both),
//! rotary position embeddings in Hugging Face's rotate-half layout, and a per-layer KV cache.
//!
//! Each architecture keeps its own projection modules (their key names differ: CLIP's
//! `self_attn.q_proj`, ViT's `attention.attention.query`, BERT's `attention.self.query`,
//! Llama's `self_attn.{q,k,v,o}_proj`); this module only does the part they share.
//!
//! When attention probabilities are not requested, a fused kernel is used: this crate's CPU
//! kernel (`attention/cpu.rs`: blocks of query rows, causal key ranges skipped, vectorised
//! softmax) for f32 burn-flex tensors outside autodiff with no mask or a causal one, and
//! [`burn::tensor::module::attention`] for everything else; otherwise the probabilities are
//! materialised and returned (the switchable fallback timm also has).
//!
//! # Causal masks with a cache
//! Queries are the *last* `T_q` positions of the `T_k` keys (the keys are the cache followed by
//! the new tokens), so query `i` sits at position `T_k − T_q + i` and attends to keys
//! `j ≤ T_k − T_q + i`: transformers' causal mask for a query block after a cache. With
//! `T_q = T_k` this is the ordinary lower-triangular mask.

use burn::prelude::*;
use burn::tensor::DType;
use burn::tensor::activation::softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;

use crate::nn::{to_dtype, to_f32};

mod cpu;

/// Masking applied to attention scores before the softmax.
#[derive(Debug, Clone, Default)]
pub enum AttentionMask {
    /// Every query attends to every key.
    #[default]
    None,
    /// Query `i` attends to keys `j ≤ T_k − T_q + i` (CLIP text tower; decoders, with or without
    /// a cache).
    Causal,
    /// Padding mask `[N, T_k]` with 1 = keep, 0 = pad (BERT `attention_mask`; a decoder's mask
    /// over cache + new tokens). Padded keys get a bias of the most negative finite value of
    /// the scores' dtype (`f32::MIN` in f32), as transformers does (`torch.finfo(dtype).min`).
    Padding(Tensor<2, Int>),
    /// Causal and padding together.
    CausalPadding(Tensor<2, Int>),
    /// An additive bias on the scaled scores, `[1 or N, H, T_q, T_k]` (BEiT's relative
    /// position bias; transformers passes it as the `attention_mask` of
    /// `eager_attention_forward`). Cast to the scores' dtype.
    Bias(Tensor<4>),
}

/// Splits `[N, T, H·Dh]` into `[N, H, T, Dh]`.
pub fn split_heads(x: Tensor<3>, num_heads: usize) -> Tensor<4> {
    let [n, t, d] = x.dims();
    x.reshape([n, t, num_heads, d / num_heads]).swap_dims(1, 2)
}

/// Merges `[N, H, T, Dh]` back into `[N, T, H·Dh]`.
pub fn merge_heads(x: Tensor<4>) -> Tensor<3> {
    let [n, h, t, dh] = x.dims();
    x.swap_dims(1, 2).reshape([n, t, h * dh])
}

/// Repeats each of `Hkv` key/value heads `n_rep` times: `[N, Hkv, T, Dh]` → `[N, Hkv·n_rep, T,
/// Dh]`, head `h` of the result being kv head `h / n_rep` (transformers `repeat_kv`).
pub fn repeat_kv(x: Tensor<4>, n_rep: usize) -> Tensor<4> {
    if n_rep == 1 {
        return x;
    }
    let [n, hkv, t, dh] = x.dims();
    x.unsqueeze_dim::<5>(2)
        .expand([n, hkv, n_rep, t, dh])
        .reshape([n, hkv * n_rep, t, dh])
}

/// The most negative finite value of the float dtype `dtype` (`torch.finfo(dtype).min`), as an
/// f32: what masked scores get.
fn finite_min(dtype: DType) -> f32 {
    // (f32::MIN would round to -inf in either half type.)
    match dtype {
        DType::F16 => burn::tensor::f16::MIN.to_f32(),
        DType::BF16 => burn::tensor::bf16::MIN.to_f32(),
        _ => f32::MIN,
    }
}

/// The additive bias `[N or 1, 1, T_q, T_k]` of `mask` in `dtype` (`None` for
/// [`AttentionMask::None`]; `[1 or N, H, T_q, T_k]` for [`AttentionMask::Bias`]); masked
/// positions get [`finite_min`] of `dtype`.
fn additive_bias(
    mask: &AttentionMask,
    [n, tq, tk]: [usize; 3],
    dtype: DType,
    device: &Device,
) -> Option<Tensor<4>> {
    let min = finite_min(dtype);
    let causal = || {
        // true where key j lies after query i's position tk - tq + i
        let future: Tensor<2, Bool> =
            Tensor::<2, Bool>::tril_mask([tq, tk], tk as i64 - tq as i64, device);
        Tensor::<2>::zeros([tq, tk], device)
            .mask_fill(future, min)
            .reshape([1, 1, tq, tk])
    };
    let padding = |m: &Tensor<2, Int>| {
        let keep = m.clone().float().reshape([n, 1, 1, tk]);
        (keep.neg() + 1.0) * min
    };
    let bias = match mask {
        AttentionMask::None => return None,
        AttentionMask::Causal => causal(),
        AttentionMask::Padding(m) => padding(m),
        // The sum of two minima would overflow to -inf; take the minimum instead.
        AttentionMask::CausalPadding(m) => causal()
            .expand([n, 1, tq, tk])
            .min_pair(padding(m).expand([n, 1, tq, tk])),
        AttentionMask::Bias(b) => b.clone(),
    };
    Some(to_dtype(bias, dtype))
}

/// Scaled dot-product attention on per-head tensors, with grouped-query attention.
///
/// # Shapes
/// - `q`: `[N, H, T_q, Dh]`; `k`, `v`: `[N, H_kv, T_k, Dh]` with `H` a multiple of `H_kv`
///   (query head `h` reads kv head `h / (H / H_kv)`, as transformers' `repeat_kv`);
/// - returns the context `[N, H, T_q, Dh]` and, when `need_probs`, the probabilities
///   `[N, H, T_q, T_k]`.
///
/// The scale is `Dh^-0.5` unless `scale` is given. Masks as [`AttentionMask`]; a padding mask
/// is `[N, T_k]`.
///
/// # Dtypes
/// `q`, `k`, `v` share one float dtype, which the context comes back in. With probabilities
/// requested, the scores are computed in that dtype and the softmax in f32 (transformers'
/// `softmax(…, dtype=torch.float32)`); the probabilities come back in f32. The fused kernel
/// gets the mask in the inputs' dtype (burn's CPU kernel computes f16 / bf16 in f32).
///
/// # Panics
/// When `H` is not a multiple of `H_kv` (a config error the model constructors refuse first).
pub fn scaled_dot_product_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: &AttentionMask,
    scale: Option<f64>,
    need_probs: bool,
) -> (Tensor<4>, Option<Tensor<4>>) {
    let device = q.device();
    let [n, h, tq, dh] = q.dims();
    let [_, hkv, tk, _] = k.dims();
    assert!(
        hkv > 0 && h.is_multiple_of(hkv),
        "{h} query heads are not a multiple of {hkv} key/value heads"
    );
    let scale = scale.unwrap_or(1.0 / (dh as f64).sqrt());
    let cpu_mask = match mask {
        AttentionMask::None => Some(cpu::CpuMask::None),
        AttentionMask::Causal => Some(cpu::CpuMask::Causal),
        _ => None,
    };
    if !need_probs
        && let Some(cpu_mask) = cpu_mask
        && let Some(ctx) = cpu::attention(&q, &k, &v, cpu_mask, scale as f32)
    {
        return (ctx, None);
    }
    let (k, v) = (repeat_kv(k, h / hkv), repeat_kv(v, h / hkv));
    let dtype = q.dtype();
    if !need_probs {
        // A square causal block (a prompt without a cache) goes to the kernel's own causal
        // masking, which also skips the future keys, with at most the padding as a bias; a
        // block after a cache keeps the explicit bias.
        let fused_causal = tq == tk
            && matches!(
                mask,
                AttentionMask::Causal | AttentionMask::CausalPadding(_)
            );
        let bias = match mask {
            AttentionMask::Causal if fused_causal => None,
            AttentionMask::CausalPadding(m) if fused_causal => additive_bias(
                &AttentionMask::Padding(m.clone()),
                [n, tq, tk],
                dtype,
                &device,
            ),
            _ => additive_bias(mask, [n, tq, tk], dtype, &device),
        }
        .map(|b| b.expand([n, h, tq, tk]));
        let opts = AttentionModuleOptions {
            scale: Some(scale),
            softcap: None,
            is_causal: fused_causal,
        };
        return (attention(q, k, v, None, bias, opts), None);
    }
    let mut scores = to_f32(q.matmul(k.swap_dims(2, 3))) * scale; // [N, H, Tq, Tk]
    if let Some(b) = additive_bias(mask, [n, tq, tk], dtype, &device) {
        scores = scores + to_f32(b);
    }
    let probs = softmax(scores, 3);
    let ctx = to_dtype(probs.clone(), dtype).matmul(v);
    (ctx, Some(probs))
}

/// Multi-head attention on already-projected queries, keys and values (as many key/value
/// heads as query heads: the encoders).
///
/// # Shapes
/// - `q`: `[N, T_q, H·Dh]`, `k`, `v`: `[N, T_k, H·Dh]`
/// - returns the context `[N, T_q, H·Dh]` (before the output projection) and, when
///   `need_probs`, the attention probabilities `[N, H, T_q, T_k]`.
///
/// The scale is `Dh^-0.5` unless `scale` is given.
pub fn multi_head_attention(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    num_heads: usize,
    mask: &AttentionMask,
    scale: Option<f64>,
    need_probs: bool,
) -> (Tensor<3>, Option<Tensor<4>>) {
    let (ctx, probs) = scaled_dot_product_attention(
        split_heads(q, num_heads),
        split_heads(k, num_heads),
        split_heads(v, num_heads),
        mask,
        scale,
        need_probs,
    );
    (merge_heads(ctx), probs)
}

// ---------------------------------------------------------------------------------------------
// Rotary position embeddings
// ---------------------------------------------------------------------------------------------

/// The rope types [`RopeScaling::from_hf_config`] reads, in the order error messages list them.
pub const SUPPORTED_ROPE_TYPES: [&str; 5] = ["default", "linear", "dynamic", "yarn", "llama3"];

/// How the rotary frequencies are derived from `rope_theta`: transformers' rope types
/// (`rope_type` in `rope_parameters`, `ROPE_INIT_FUNCTIONS` in `modeling_rope_utils.py`).
///
/// Every field holds the value transformers computes with, defaults and derived values already
/// resolved ([`RopeScaling::from_hf_config`] resolves them from a config.json); lengths are in
/// positions, stored as `f64` as transformers' Python arithmetic uses them.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// `default`: `inv_freq[i] = 1 / θ^(2i / Dh)`.
    Default,
    /// `linear`: positions divided by `factor` (the default frequencies divided by `factor`).
    Linear {
        /// The scaling factor.
        factor: f64,
    },
    /// `dynamic` (dynamic NTK): below `original_max_position_embeddings` the default
    /// frequencies; for a sequence of `L` longer than that, the default frequencies of the base
    /// `θ · (factor · L / L₀ − (factor − 1))^(Dh / (Dh − 2))`, `L₀ =
    /// original_max_position_embeddings` (transformers `_compute_dynamic_ntk_parameters` and the
    /// `dynamic_rope_update` decorator; see [`RotaryEmbedding::cos_sin`]).
    Dynamic {
        /// `factor`.
        factor: f64,
        /// `L₀`: the model config's `max_position_embeddings`. transformers reads no
        /// `original_max_position_embeddings` for this type (it ignores one in
        /// `rope_parameters`, with a warning); the field is named after its role
        /// (`LlamaRotaryEmbedding.original_max_seq_len`).
        original_max_position_embeddings: f64,
    },
    /// `yarn` (Peng et al., *YaRN*, <https://arxiv.org/abs/2309.00071>: "NTK-by-parts"
    /// interpolation and the attention temperature `0.1 ln s + 1`): dimensions that turn fewer
    /// than `beta_slow` times over the original context are interpolated (divided by
    /// `factor`), those turning more than `beta_fast` times are kept, a linear ramp blends the
    /// band between; cos and sin are multiplied by the attention factor
    /// ([`RopeScaling::attention_factor`]). transformers `_compute_yarn_parameters`.
    Yarn {
        /// `factor`; transformers uses `max_position_embeddings /
        /// original_max_position_embeddings` when the config's is `null`.
        factor: f64,
        /// `original_max_position_embeddings` (the pre-training context); transformers
        /// defaults it to `max_position_embeddings`.
        original_max_position_embeddings: f64,
        /// `beta_fast` (default 32; transformers also replaces `0` by 32).
        beta_fast: f64,
        /// `beta_slow` (default 1; transformers also replaces `0` by 1).
        beta_slow: f64,
        /// `mscale`: with `mscale_all_dim`, the attention factor is
        /// `(0.1 · mscale · ln factor + 1) / (0.1 · mscale_all_dim · ln factor + 1)`. `None`
        /// (or 0, which transformers treats as absent) leaves `0.1 · ln factor + 1`.
        mscale: Option<f64>,
        /// `mscale_all_dim` (see `mscale`).
        mscale_all_dim: Option<f64>,
        /// `attention_factor`: when given, the multiplier of cos and sin, overriding the
        /// `mscale` rule.
        attention_factor: Option<f64>,
        /// `truncate` (default `true`): round the correction range outwards to whole
        /// dimensions (`floor` / `ceil`).
        truncate: bool,
    },
    /// `llama3` (Llama 3.1+): wavelengths longer than `original_max_position_embeddings /
    /// low_freq_factor` are divided by `factor`, shorter than `… / high_freq_factor` kept, and
    /// the band between interpolated smoothly.
    Llama3 {
        /// `factor`.
        factor: f64,
        /// `low_freq_factor`.
        low_freq_factor: f64,
        /// `high_freq_factor`.
        high_freq_factor: f64,
        /// `original_max_position_embeddings`.
        original_max_position_embeddings: f64,
    },
}

impl RopeScaling {
    /// `yarn` with transformers' defaults for everything but the two required values:
    /// `beta_fast` 32, `beta_slow` 1, no `mscale` / `mscale_all_dim` / `attention_factor`,
    /// `truncate` true.
    pub fn yarn(factor: f64, original_max_position_embeddings: f64) -> Self {
        RopeScaling::Yarn {
            factor,
            original_max_position_embeddings,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: None,
            mscale_all_dim: None,
            attention_factor: None,
            truncate: true,
        }
    }

    /// The rope type's name in config.json (`rope_type`).
    pub fn rope_type(&self) -> &'static str {
        match self {
            RopeScaling::Default => "default",
            RopeScaling::Linear { .. } => "linear",
            RopeScaling::Dynamic { .. } => "dynamic",
            RopeScaling::Yarn { .. } => "yarn",
            RopeScaling::Llama3 { .. } => "llama3",
        }
    }

    /// The multiplier of cos and sin (transformers' `attention_scaling`, the second value of
    /// every `ROPE_INIT_FUNCTIONS` entry): 1 except for `yarn`, where it is `attention_factor`
    /// when given, else `get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)` when
    /// both are non-zero, else `get_mscale(factor)`, with `get_mscale(s, m) = 0.1 · m · ln s + 1`
    /// (1 for `s ≤ 1`). Computed in f64, as transformers computes it in Python floats.
    pub fn attention_factor(&self) -> f64 {
        let RopeScaling::Yarn {
            factor,
            mscale,
            mscale_all_dim,
            attention_factor,
            ..
        } = *self
        else {
            return 1.0;
        };
        if let Some(a) = attention_factor {
            return a;
        }
        let get_mscale = |scale: f64, m: f64| {
            if scale <= 1.0 {
                1.0
            } else {
                0.1 * m * scale.ln() + 1.0
            }
        };
        match (
            mscale.filter(|&m| m != 0.0),
            mscale_all_dim.filter(|&m| m != 0.0),
        ) {
            (Some(m), Some(all)) => get_mscale(factor, m) / get_mscale(factor, all),
            _ => get_mscale(factor, 1.0),
        }
    }

    /// `(rope_theta, scaling)` from a Hugging Face config.json, read as transformers 5.24 reads
    /// it (`RotaryEmbeddingConfigMixin.convert_rope_params_to_dict` and
    /// `standardize_rope_params` in `modeling_rope_utils.py`, then the `ROPE_INIT_FUNCTIONS`
    /// entry of the type), in both layouts:
    ///
    /// - transformers 5.x writes `"rope_parameters": {"rope_type": …, "rope_theta": …,
    ///   "factor": …, …}`;
    /// - transformers 4.x wrote `"rope_theta"` at the top level and `"rope_scaling"`: `null`
    ///   or `{"type" | "rope_type": …, "factor": …, …}` (`type` is the older key name).
    ///
    /// The parameters are `rope_scaling` when it is a non-empty object (it wins over
    /// `rope_parameters`, as in transformers), else `rope_parameters`, else none (`default`).
    /// The type is `rope_type`, else `type`, else `default`; `rope_theta` is the parameters',
    /// else the top-level one, else 10000 (`default_theta`). For `yarn` and `llama3`,
    /// `original_max_position_embeddings` is a top-level key of that name when there is one
    /// (transformers gives it priority, for Phi-3), else the parameters', else
    /// `max_position_embeddings`; yarn's `factor: null` becomes `max_position_embeddings /
    /// original_max_position_embeddings`. For `dynamic`, the original length is
    /// `max_position_embeddings`. Keys a type does not use are ignored (transformers warns).
    ///
    /// `max_position_embeddings` is the model config's (the caller's default when config.json
    /// has none).
    ///
    /// # Errors
    /// A message naming the key, for the caller to prefix with the file: an unsupported type
    /// (`rope type 'longrope' is not supported (supported: default, linear, dynamic, yarn,
    /// llama3)`), a required parameter missing (`rope_scaling.low_freq_factor is missing
    /// (required by rope type 'llama3')`), a value of the wrong kind, a
    /// `partial_rotary_factor` other than 1 (partial rotary embeddings are not implemented;
    /// Llama and Qwen do not use them), and per-layer-type parameters (`rope_parameters` nested
    /// under layer types, which Llama and Qwen do not read either).
    pub fn from_hf_config(
        config: &serde_json::Value,
        max_position_embeddings: usize,
    ) -> Result<(f64, RopeScaling), String> {
        use serde_json::Value;
        let top = |key: &str| config.get(key).filter(|v| !v.is_null());
        let scaling = match config.get("rope_scaling") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) if m.is_empty() => None,
            Some(Value::Object(m)) => Some(("rope_scaling", m)),
            Some(other) => {
                return Err(format!(
                    "rope_scaling must be an object or null, got {other}"
                ));
            }
        };
        let params = match scaling {
            Some(found) => Some(found),
            None => match config.get("rope_parameters") {
                None | Some(Value::Null) => None,
                Some(Value::Object(m)) => Some(("rope_parameters", m)),
                Some(other) => {
                    return Err(format!(
                        "rope_parameters must be an object or null, got {other}"
                    ));
                }
            },
        };
        let empty = serde_json::Map::new();
        let (section, params) = params.unwrap_or(("rope_parameters", &empty));
        if let Some((key, _)) = params.iter().find(|(_, v)| v.is_object()) {
            return Err(format!(
                "{section}.{key}: rope parameters per layer type are not supported (expected \
                 one set of parameters with rope_type, rope_theta, ...)"
            ));
        }
        let number = |value: &Value, name: &str| -> Result<f64, String> {
            value
                .as_f64()
                .ok_or_else(|| format!("{name} must be a number, got {value}"))
        };
        let rope_type = match params.get("rope_type").or_else(|| params.get("type")) {
            None => "default",
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                let key = if params.contains_key("rope_type") {
                    "rope_type"
                } else {
                    "type"
                };
                return Err(format!("{section}.{key} must be a string, got {other}"));
            }
        };
        let theta = match params.get("rope_theta") {
            Some(v) => number(v, &format!("{section}.rope_theta"))?,
            None => match config.get("rope_theta") {
                Some(v) => number(v, "rope_theta")?,
                None => 10000.0,
            },
        };
        for (name, value) in [
            (
                format!("{section}.partial_rotary_factor"),
                params.get("partial_rotary_factor"),
            ),
            (
                "partial_rotary_factor".to_string(),
                top("partial_rotary_factor"),
            ),
        ] {
            if let Some(value) = value.filter(|v| !v.is_null()) {
                let p = number(value, &name)?;
                if p != 1.0 {
                    return Err(format!(
                        "{name} {p} is not supported (rotary embeddings over part of the head \
                         are not implemented; only 1.0)"
                    ));
                }
            }
        }
        let supported = || {
            format!(
                "rope type '{rope_type}' is not supported (supported: {})",
                SUPPORTED_ROPE_TYPES.join(", ")
            )
        };
        if !SUPPORTED_ROPE_TYPES.contains(&rope_type) {
            return Err(supported());
        }
        // A value present and non-null, or an error naming the key.
        let required = |key: &str| -> Result<f64, String> {
            match params.get(key) {
                None => Err(format!(
                    "{section}.{key} is missing (required by rope type '{rope_type}')"
                )),
                Some(v) => number(v, &format!("{section}.{key}")),
            }
        };
        // `null` and absent alike: None.
        let optional = |key: &str| -> Result<Option<f64>, String> {
            match params.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => number(v, &format!("{section}.{key}")).map(Some),
            }
        };
        let max_pos = max_position_embeddings as f64;
        let original = || -> Result<f64, String> {
            if let Some(v) = top("original_max_position_embeddings") {
                return number(v, "original_max_position_embeddings");
            }
            Ok(optional("original_max_position_embeddings")?.unwrap_or(max_pos))
        };
        let scaling = match rope_type {
            "default" => RopeScaling::Default,
            "linear" => RopeScaling::Linear {
                factor: required("factor")?,
            },
            "dynamic" => RopeScaling::Dynamic {
                factor: required("factor")?,
                original_max_position_embeddings: max_pos,
            },
            "yarn" => {
                let original_max_position_embeddings = original()?;
                let factor = match params.get("factor") {
                    Some(Value::Null) => max_pos / original_max_position_embeddings,
                    _ => required("factor")?,
                };
                let truncate = match params.get("truncate") {
                    None => true,
                    // transformers tests the value's truth: `null` does not truncate.
                    Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(other) => {
                        return Err(format!(
                            "{section}.truncate must be true or false, got {other}"
                        ));
                    }
                };
                // `rope_parameters.get("beta_fast") or 32`: absent, null and 0 alike.
                let or_default =
                    |v: Option<f64>, default: f64| v.filter(|&b| b != 0.0).unwrap_or(default);
                RopeScaling::Yarn {
                    factor,
                    original_max_position_embeddings,
                    beta_fast: or_default(optional("beta_fast")?, 32.0),
                    beta_slow: or_default(optional("beta_slow")?, 1.0),
                    mscale: optional("mscale")?,
                    mscale_all_dim: optional("mscale_all_dim")?,
                    attention_factor: optional("attention_factor")?,
                    truncate,
                }
            }
            "llama3" => RopeScaling::Llama3 {
                factor: required("factor")?,
                low_freq_factor: required("low_freq_factor")?,
                high_freq_factor: required("high_freq_factor")?,
                original_max_position_embeddings: original()?,
            },
            _ => return Err(supported()),
        };
        Ok((theta, scaling))
    }
}

/// `1 / base^(i / dim)` for `i = 0, 2, …, dim − 2` in f32: transformers'
/// `1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`.
fn default_inv_freq(rotary_dim: usize, base: f32) -> Vec<f32> {
    (0..rotary_dim)
        .step_by(2)
        .map(|i| 1.0f32 / base.powf(i as f32 / rotary_dim as f32))
        .collect()
}

/// The inverse frequencies `[Dh / 2]` of rotary embeddings over `rotary_dim` dimensions; for
/// `dynamic`, those below the original length (the default ones: transformers' formula at
/// `seq_len = max_position_embeddings`, computed in f64 as at the module's initialisation;
/// [`dynamic_ntk_inv_freq`] for longer sequences).
///
/// Computed in f32 in transformers' order of operations
/// (`1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`, then the scaling rule, Python
/// scalars rounded to f32 where torch rounds them), so the frequencies equal transformers' to
/// within an ulp (torch's vectorised `pow` and Rust's `powf` may round differently).
///
/// Source: transformers `modeling_rope_utils.py`, `_compute_default_rope_parameters`,
/// `_compute_linear_scaling_rope_parameters`, `_compute_dynamic_ntk_parameters`,
/// `_compute_yarn_parameters`, `_compute_llama3_parameters`.
pub fn rope_inv_freq(rotary_dim: usize, rope_theta: f64, scaling: &RopeScaling) -> Vec<f32> {
    let base = rope_theta as f32;
    match *scaling {
        RopeScaling::Default => default_inv_freq(rotary_dim, base),
        RopeScaling::Linear { factor } => default_inv_freq(rotary_dim, base)
            .iter()
            .map(|f| f / factor as f32)
            .collect(),
        RopeScaling::Dynamic {
            factor,
            original_max_position_embeddings: old_ctx,
        } => {
            // At initialisation `seq_len` is the Python int max_position_embeddings: the new
            // base is a Python float (exactly θ for the usual factors).
            let dim = rotary_dim as f64;
            let scaled = theta_times(
                rope_theta,
                (factor * old_ctx / old_ctx) - (factor - 1.0),
                dim,
            );
            default_inv_freq(rotary_dim, scaled as f32)
        }
        RopeScaling::Yarn {
            factor,
            original_max_position_embeddings: old_ctx,
            beta_fast,
            beta_slow,
            truncate,
            ..
        } => {
            let dim = rotary_dim as f64;
            // Python floats: the dimensions where the wavelength turns `rotations` times over
            // the original context (YaRN eq. 17), the ramp between them.
            let correction_dim = |rotations: f64| {
                (dim * (old_ctx / (rotations * 2.0 * std::f64::consts::PI)).ln())
                    / (2.0 * rope_theta.ln())
            };
            let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
            if truncate {
                (low, high) = (low.floor(), high.ceil());
            }
            let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
            if low == high {
                high += 0.001; // transformers' guard against a zero-width ramp
            }
            let (low32, width) = (low as f32, (high - low) as f32);
            let factor = factor as f32;
            (0..rotary_dim)
                .step_by(2)
                .enumerate()
                .map(|(j, i)| {
                    let pos_freq = base.powf(i as f32 / rotary_dim as f32);
                    let extrapolation = 1.0 / pos_freq;
                    let interpolation = 1.0 / (factor * pos_freq);
                    let ramp = ((j as f32 - low32) / width).clamp(0.0, 1.0);
                    let extrapolation_factor = 1.0 - ramp;
                    interpolation * (1.0 - extrapolation_factor)
                        + extrapolation * extrapolation_factor
                })
                .collect()
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: old_ctx,
        } => {
            // transformers computes the two wavelength bounds in Python floats, then compares
            // and blends in f32 tensors (Python scalars become f32 operands).
            let low_freq_wavelen = (old_ctx / low_freq_factor) as f32;
            let high_freq_wavelen = (old_ctx / high_freq_factor) as f32;
            let band = (high_freq_factor - low_freq_factor) as f32;
            let (factor, low, old_ctx) = (factor as f32, low_freq_factor as f32, old_ctx as f32);
            default_inv_freq(rotary_dim, base)
                .iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f32::consts::PI / f;
                    let scaled = if wavelen > low_freq_wavelen {
                        f / factor
                    } else {
                        f
                    };
                    let smooth = (old_ctx / wavelen - low) / band;
                    let smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled;
                    let medium = (high_freq_wavelen..=low_freq_wavelen).contains(&wavelen);
                    if medium { smoothed } else { scaled }
                })
                .collect()
        }
    }
}

/// `θ · x^(dim / (dim − 2))` in f64 (the dynamic NTK base at initialisation).
fn theta_times(theta: f64, x: f64, dim: f64) -> f64 {
    theta * x.powf(dim / (dim - 2.0))
}

/// The `dynamic` (NTK) inverse frequencies `[rotary_dim / 2]` for a sequence of `seq_len`
/// positions: the default frequencies of the base `θ · (factor · L / L₀ − (factor − 1))^(d /
/// (d − 2))`, `L = max(seq_len, L₀)`, `L₀ = original_max_position_embeddings`, `d =
/// rotary_dim`.
///
/// The new base is computed as transformers computes it in the forward pass, where `seq_len`
/// is the int64 tensor `max(position_ids) + 1`: in f32 (`factor · L` in f32, divided by `L₀`,
/// minus `factor − 1` rounded to f32), the power in f64 on the f32 value (torch's scalar `pow`
/// of a 0-d f32 tensor by a Python float; a square when the exponent is 2), the product with θ
/// in f32. Source: transformers `_compute_dynamic_ntk_parameters`.
pub fn dynamic_ntk_inv_freq(
    rotary_dim: usize,
    rope_theta: f64,
    factor: f64,
    original_max_position_embeddings: f64,
    seq_len: usize,
) -> Vec<f32> {
    let old_ctx = original_max_position_embeddings;
    let seq_len = (seq_len as f64).max(old_ctx) as f32;
    let x = (factor as f32) * seq_len / old_ctx as f32 - (factor - 1.0) as f32;
    let exponent = rotary_dim as f64 / (rotary_dim as f64 - 2.0);
    let power = if exponent == 2.0 {
        x * x
    } else {
        (x as f64).powf(exponent) as f32
    };
    default_inv_freq(rotary_dim, rope_theta as f32 * power)
}

/// Rotary position embeddings in Hugging Face's rotate-half layout (Su et al., *RoFormer*,
/// <https://arxiv.org/abs/2104.09864>, eq. 34; transformers `LlamaRotaryEmbedding` and
/// `apply_rotary_pos_emb`): dimension `i < Dh/2` pairs with `i + Dh/2`, not with its neighbour
/// as burn's `RotaryEncoding` pairs them.
#[derive(Debug, Clone)]
pub struct RotaryEmbedding {
    /// Inverse frequencies `[Dh / 2]` ([`rope_inv_freq`]); for `dynamic`, those of sequences
    /// up to the original length ([`RotaryEmbedding::inv_freq_for`] gives the others).
    pub inv_freq: Vec<f32>,
    /// Multiplier of cos and sin (transformers' `attention_scaling`,
    /// [`RopeScaling::attention_factor`]: 1 except for `yarn`).
    pub attention_scaling: f32,
    rope_theta: f64,
    scaling: RopeScaling,
}

impl RotaryEmbedding {
    /// Rotary embeddings over `head_dim` dimensions with base `rope_theta`.
    pub fn new(head_dim: usize, rope_theta: f64, scaling: &RopeScaling) -> Self {
        Self {
            inv_freq: rope_inv_freq(head_dim, rope_theta, scaling),
            attention_scaling: scaling.attention_factor() as f32,
            rope_theta,
            scaling: scaling.clone(),
        }
    }

    /// The rotary embeddings a Hugging Face config.json describes, over `head_dim` dimensions
    /// ([`RopeScaling::from_hf_config`], then [`RotaryEmbedding::new`]).
    ///
    /// # Errors
    /// Those of [`RopeScaling::from_hf_config`].
    pub fn from_hf_config(
        config: &serde_json::Value,
        head_dim: usize,
        max_position_embeddings: usize,
    ) -> Result<Self, String> {
        let (theta, scaling) = RopeScaling::from_hf_config(config, max_position_embeddings)?;
        Ok(Self::new(head_dim, theta, &scaling))
    }

    /// `rope_theta`.
    pub fn rope_theta(&self) -> f64 {
        self.rope_theta
    }

    /// The rope type and its parameters.
    pub fn scaling(&self) -> &RopeScaling {
        &self.scaling
    }

    /// The inverse frequencies `[Dh / 2]` used for a call whose largest position is
    /// `seq_len − 1`: [`RotaryEmbedding::inv_freq`], except for `dynamic` with `seq_len` above
    /// the original length, where they are [`dynamic_ntk_inv_freq`] at `seq_len`.
    pub fn inv_freq_for(&self, seq_len: usize) -> std::borrow::Cow<'_, [f32]> {
        match self.scaling {
            RopeScaling::Dynamic {
                factor,
                original_max_position_embeddings: old_ctx,
            } if seq_len as f64 > old_ctx => std::borrow::Cow::Owned(dynamic_ntk_inv_freq(
                self.inv_freq.len() * 2,
                self.rope_theta,
                factor,
                old_ctx,
                seq_len,
            )),
            _ => std::borrow::Cow::Borrowed(&self.inv_freq),
        }
    }

    /// `cos` and `sin` of the angles `position · inv_freq`, duplicated to the full head width
    /// (`cat([freqs, freqs])`) and scaled by `attention_scaling`.
    ///
    /// For `dynamic` the frequencies depend on `seq_len = max(position_ids) + 1` over the whole
    /// batch (read back to the host: one scalar; no read for the other types):
    /// [`RotaryEmbedding::inv_freq_for`]. This is stateless, where transformers'
    /// `dynamic_rope_update` keeps the frequencies of the longest sequence seen so far
    /// (`max_seq_len_cached`) and resets them only when a call's `seq_len` is *below* the
    /// original length. The two agree on a fresh module and whenever `seq_len` never decreases
    /// across calls (one generation: prefill, then one step per token), and differ after a
    /// call of length `S₁` for a later call of length `S₂` with `L₀ ≤ S₂ < S₁` (`L₀` the
    /// original length): transformers still uses the frequencies of `S₁`, this uses those of
    /// `S₂` (the default ones when `S₂ = L₀`). Keys already in a KV cache keep the rotation
    /// they were given, as in transformers.
    ///
    /// # Shapes
    /// `position_ids: [N, T]` → two tensors `[N, T, Dh]`.
    pub fn cos_sin(&self, position_ids: Tensor<2, Int>) -> (Tensor<3>, Tensor<3>) {
        let device = position_ids.device();
        let [n, t] = position_ids.dims();
        let half = self.inv_freq.len();
        let inv_freq = match self.scaling {
            RopeScaling::Dynamic { .. } if n * t > 0 => {
                let max = position_ids.clone().max().into_scalar::<i64>();
                self.inv_freq_for(usize::try_from(max + 1).unwrap_or(0))
            }
            _ => std::borrow::Cow::Borrowed(self.inv_freq.as_slice()),
        };
        let inv = Tensor::<1>::from_floats(inv_freq.as_ref(), &device).reshape([1, 1, half]);
        let freqs = position_ids.float().reshape([n, t, 1]) * inv; // [N, T, Dh/2]
        let emb = Tensor::cat(vec![freqs.clone(), freqs], 2);
        let (cos, sin) = (emb.clone().cos(), emb.sin());
        if self.attention_scaling == 1.0 {
            (cos, sin)
        } else {
            (cos * self.attention_scaling, sin * self.attention_scaling)
        }
    }

    /// `x · cos + rotate_half(x) · sin` for every head, in the dtype of `x` (`cos` and `sin`,
    /// computed in f32, are cast to it, as transformers does).
    ///
    /// # Shapes
    /// `x: [N, H, T, Dh]`, `cos`, `sin: [N, T, Dh]` → `[N, H, T, Dh]`.
    pub fn apply(x: Tensor<4>, cos: &Tensor<3>, sin: &Tensor<3>) -> Tensor<4> {
        let [n, t, dh] = cos.dims();
        let dtype = x.dtype();
        let cos = to_dtype(cos.clone(), dtype).reshape([n, 1, t, dh]);
        let sin = to_dtype(sin.clone(), dtype).reshape([n, 1, t, dh]);
        x.clone() * cos + rotate_half(x) * sin
    }
}

/// The rotary embeddings a Hugging Face config.json describes
/// ([`RotaryEmbedding::from_hf_config`]): `head_dim` is the model's, `max_position_embeddings`
/// the config's (or the model's default).
///
/// # Errors
/// Those of [`RopeScaling::from_hf_config`]: a message naming the config key.
pub fn rope_from_config(
    config: &serde_json::Value,
    head_dim: usize,
    max_position_embeddings: usize,
) -> Result<RotaryEmbedding, String> {
    RotaryEmbedding::from_hf_config(config, head_dim, max_position_embeddings)
}

/// `cat([-x₂, x₁])` over the last dimension, `x = cat([x₁, x₂])` (transformers `rotate_half`).
pub fn rotate_half(x: Tensor<4>) -> Tensor<4> {
    let [n, h, t, dh] = x.dims();
    let x1 = x.clone().slice([0..n, 0..h, 0..t, 0..dh / 2]);
    let x2 = x.slice([0..n, 0..h, 0..t, dh / 2..dh]);
    Tensor::cat(vec![x2.neg(), x1], 3)
}

// ---------------------------------------------------------------------------------------------
// KV cache
// ---------------------------------------------------------------------------------------------

/// The keys and values one attention layer has seen, for incremental decoding: prefill once,
/// then one token per step.
///
/// # Shapes
/// Keys and values `[N, H_kv, P, Dh]` after rotary embedding, `P` = positions cached so far.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    k: Option<Tensor<4>>,
    v: Option<Tensor<4>>,
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Positions cached so far (`P`).
    pub fn len(&self) -> usize {
        self.k.as_ref().map_or(0, |k| k.dims()[2])
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the new keys and values `[N, H_kv, T, Dh]` and returns everything cached,
    /// `[N, H_kv, P + T, Dh]`, to attend over.
    pub fn append(&mut self, k: Tensor<4>, v: Tensor<4>) -> (Tensor<4>, Tensor<4>) {
        let k = match self.k.take() {
            Some(old) => Tensor::cat(vec![old, k], 2),
            None => k,
        };
        let v = match self.v.take() {
            Some(old) => Tensor::cat(vec![old, v], 2),
            None => v,
        };
        self.k = Some(k.clone());
        self.v = Some(v.clone());
        (k, v)
    }
}
