//! Scaled dot-product multi-head attention shared by every encoder in this crate.
//!
//! Each architecture keeps its own projection modules (their key names differ: CLIP's
//! `self_attn.q_proj`, ViT's `attention.attention.query`, BERT's `attention.self.query`); this
//! module only does the part they share: split heads, softmax(Q·Kᵀ·scale + bias)·V, merge heads.
//!
//! When attention probabilities are not requested, the fused kernel
//! [`burn::tensor::module::attention`] is used; otherwise the probabilities are materialised and
//! returned (the switchable fallback timm also has).

use burn::prelude::*;
use burn::tensor::activation::softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;

/// Masking applied to attention scores before the softmax.
#[derive(Debug, Clone, Default)]
pub enum AttentionMask {
    /// Every query attends to every key.
    #[default]
    None,
    /// Query i attends to keys j ≤ i (CLIP text tower).
    Causal,
    /// Padding mask `[N, T_k]` with 1 = keep, 0 = pad (BERT `attention_mask`). Padded keys get a
    /// bias of `f32::MIN`, as transformers does.
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

fn additive_bias(
    mask: &AttentionMask,
    n: usize,
    tq: usize,
    tk: usize,
    device: &Device,
) -> Option<Tensor<4>> {
    let causal = || {
        let tri: Tensor<2, Bool> = Tensor::<2, Bool>::tril_mask([tq, tk], 0, device); // true above diagonal
        Tensor::<2>::zeros([tq, tk], device)
            .mask_fill(tri, f32::MIN)
            .reshape([1, 1, tq, tk])
    };
    let padding = |m: &Tensor<2, Int>| {
        let keep = m.clone().float().reshape([n, 1, 1, tk]);
        (keep.neg() + 1.0) * f32::MIN
    };
    match mask {
        AttentionMask::None => None,
        AttentionMask::Causal => Some(causal()),
        AttentionMask::Padding(m) => Some(padding(m)),
        AttentionMask::CausalPadding(m) => {
            // Sum of two f32::MIN would overflow to -inf; take the minimum instead.
            Some(
                causal()
                    .expand([n, 1, tq, tk])
                    .min_pair(padding(m).expand([n, 1, tq, tk])),
            )
        }
    }
}

/// Multi-head attention on already-projected queries, keys and values.
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
    let device = q.device();
    let [n, tq, d] = q.dims();
    let tk = k.dims()[1];
    let dh = d / num_heads;
    let scale = scale.unwrap_or(1.0 / (dh as f64).sqrt());
    let (q, k, v) = (
        split_heads(q, num_heads),
        split_heads(k, num_heads),
        split_heads(v, num_heads),
    );
    let bias = additive_bias(mask, n, tq, tk, &device);
    if !need_probs {
        let bias = bias.map(|b| b.expand([n, num_heads, tq, tk]));
        let opts = AttentionModuleOptions {
            scale: Some(scale),
            softcap: None,
            is_causal: false,
        };
        let ctx = attention(q, k, v, None, bias, opts);
        return (merge_heads(ctx), None);
    }
    let mut scores = q.matmul(k.swap_dims(2, 3)) * scale; // [N, H, Tq, Tk]
    if let Some(b) = bias {
        scores = scores + b;
    }
    let probs = softmax(scores, 3);
    let ctx = probs.clone().matmul(v);
    (merge_heads(ctx), Some(probs))
}
