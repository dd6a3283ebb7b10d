//! The attention core shared by every model in this crate: split and merge heads,
//! softmax(Q·Kᵀ·scale + bias)·V with grouped-query attention, masks (causal, padding, both),
//! rotary position embeddings in Hugging Face's rotate-half layout, and a per-layer KV cache.
//!
//! Each architecture keeps its own projection modules (their key names differ: CLIP's
//! `self_attn.q_proj`, ViT's `attention.attention.query`, BERT's `attention.self.query`,
//! Llama's `self_attn.{q,k,v,o}_proj`); this module only does the part they share.
//!
//! When attention probabilities are not requested, the fused kernel
//! [`burn::tensor::module::attention`] is used; otherwise the probabilities are materialised and
//! returned (the switchable fallback timm also has).
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
/// [`AttentionMask::None`]); masked positions get [`finite_min`] of `dtype`.
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
    let (k, v) = (repeat_kv(k, h / hkv), repeat_kv(v, h / hkv));
    let scale = scale.unwrap_or(1.0 / (dh as f64).sqrt());
    let dtype = q.dtype();
    if !need_probs {
        let bias =
            additive_bias(mask, [n, tq, tk], dtype, &device).map(|b| b.expand([n, h, tq, tk]));
        let opts = AttentionModuleOptions {
            scale: Some(scale),
            softcap: None,
            is_causal: false,
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

/// How the rotary frequencies are derived from `rope_theta` (transformers'
/// `ROPE_INIT_FUNCTIONS` in `modeling_rope_utils.py`, the rope types whose frequencies do not
/// depend on the sequence length).
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// `default`: `inv_freq[i] = 1 / θ^(2i / Dh)`.
    Default,
    /// `linear`: positions divided by `factor` (the default frequencies divided by `factor`).
    Linear {
        /// The scaling factor.
        factor: f64,
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

/// The inverse frequencies `[Dh / 2]` of rotary embeddings over `rotary_dim` dimensions.
///
/// Computed in f32 in transformers' order of operations
/// (`1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`, then the scaling rule), so the
/// frequencies equal transformers' to within an ulp (torch divides by multiplying with a
/// reciprocal in places where this divides).
///
/// Source: transformers `modeling_rope_utils.py`, `_compute_default_rope_parameters`,
/// `_compute_linear_scaling_rope_parameters`, `_compute_llama3_parameters`.
pub fn rope_inv_freq(rotary_dim: usize, rope_theta: f64, scaling: &RopeScaling) -> Vec<f32> {
    let base = rope_theta as f32;
    let default: Vec<f32> = (0..rotary_dim)
        .step_by(2)
        .map(|i| 1.0f32 / base.powf(i as f32 / rotary_dim as f32))
        .collect();
    match *scaling {
        RopeScaling::Default => default,
        RopeScaling::Linear { factor } => default.iter().map(|f| f / factor as f32).collect(),
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
            default
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

/// Rotary position embeddings in Hugging Face's rotate-half layout (Su et al., *RoFormer*,
/// <https://arxiv.org/abs/2104.09864>, eq. 34; transformers `LlamaRotaryEmbedding` and
/// `apply_rotary_pos_emb`): dimension `i < Dh/2` pairs with `i + Dh/2`, not with its neighbour
/// as burn's `RotaryEncoding` pairs them.
#[derive(Debug, Clone)]
pub struct RotaryEmbedding {
    /// Inverse frequencies `[Dh / 2]` ([`rope_inv_freq`]).
    pub inv_freq: Vec<f32>,
    /// Multiplier of cos and sin (transformers' `attention_scaling`; 1 for the rope types
    /// here).
    pub attention_scaling: f32,
}

impl RotaryEmbedding {
    /// Rotary embeddings over `head_dim` dimensions with base `rope_theta`.
    pub fn new(head_dim: usize, rope_theta: f64, scaling: &RopeScaling) -> Self {
        Self {
            inv_freq: rope_inv_freq(head_dim, rope_theta, scaling),
            attention_scaling: 1.0,
        }
    }

    /// `cos` and `sin` of the angles `position · inv_freq`, duplicated to the full head width
    /// (`cat([freqs, freqs])`) and scaled by `attention_scaling`.
    ///
    /// # Shapes
    /// `position_ids: [N, T]` → two tensors `[N, T, Dh]`.
    pub fn cos_sin(&self, position_ids: Tensor<2, Int>) -> (Tensor<3>, Tensor<3>) {
        let device = position_ids.device();
        let [n, t] = position_ids.dims();
        let half = self.inv_freq.len();
        let inv = Tensor::<1>::from_floats(self.inv_freq.as_slice(), &device).reshape([1, 1, half]);
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
