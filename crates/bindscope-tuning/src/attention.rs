//! Attention binding margin: how much more a word attends to its own binding partner than to
//! the other objects' partners, per layer, from the attention probabilities of
//! `ForwardOptions { output_attentions: true, .. }`.
//!
//! For a caption with bindings `(aᵢ, oᵢ)`, let `Att(w → v)` be the attention from a *later* word
//! `w` to an *earlier* word `v`: the probabilities summed over `v`'s sub-tokens, averaged over
//! `w`'s sub-tokens and over heads. For binding `i`, let `w` be the later of `aᵢ`, `oᵢ` and `v`
//! the earlier (adjacent and bundle types: `w` = the object, `v` = its attribute; predicative and
//! deferred types: `w` = the attribute, `v` = its object). The others are the words in `v`'s role
//! (attributes, or objects) of *other objects'* bindings that come before `w`:
//!
//! `marginᵢ = Att(w → v) − mean_{v' ∈ others} Att(w → v')`
//!
//! (for an object: own attribute minus the other objects' attributes). A binding with no other
//! before `w` (e.g. the first object of "a red cube and a blue ball") has no margin. The caption's
//! margin is the mean over its bindings with a margin, and a layer's margin the mean over
//! captions that have one. Words are mapped to sub-tokens through the tokenizer's byte offsets
//! ([`crate::words`] spans), so sub-word pieces, special tokens and padding are handled alike;
//! words cut by truncation drop out.
//!
//! Computed as tensors so the same code gives the metric and the optional attention loss
//! (hinge `max(0, τ − marginᵢ)` over a band of layers): with `Q[n, m, t]` the averaging weights
//! of binding `m`'s later word and `K[n, m, t]` = +1 on the earlier word's sub-tokens and
//! `−1/|others|` on each other's, `margin[n, m] = Σ_{q,k} Q[n,m,q]·Ā[n,q,k]·K[n,m,k]` with
//! `Ā` the head-averaged attention.

use crate::words::words;
use bindscope_data::text::Tokenizer;
use burn::prelude::*;
use burn::tensor::TensorData;

/// The per-binding query and key weights of a batch (host side).
#[derive(Debug, Clone, PartialEq)]
pub struct BindingWeights {
    /// Captions `N`.
    pub n: usize,
    /// Bindings per caption (padded) `M`.
    pub m: usize,
    /// Sequence length `T`.
    pub t: usize,
    /// `[N, M, T]` averaging weights of the later word.
    pub q: Vec<f32>,
    /// `[N, M, T]` +1 own / −1/|others| others.
    pub k: Vec<f32>,
    /// `[N, M]` 1 where binding `m` of caption `n` has a margin.
    pub valid: Vec<f32>,
}

/// Sub-token positions of each word of `text` (byte-offset overlap), positions `< t` only.
///
/// # Errors
/// The tokenizer's error.
pub fn word_tokens(tokenizer: &Tokenizer, text: &str, t: usize) -> Result<Vec<Vec<usize>>, String> {
    let enc = tokenizer
        .inner()
        .encode(text, true)
        .map_err(|e| e.to_string())?;
    let offsets = enc.get_offsets();
    let special = enc.get_special_tokens_mask();
    let ws = words(text);
    Ok(ws
        .iter()
        .map(|w| {
            (0..offsets.len().min(t))
                .filter(|&i| special.get(i).copied().unwrap_or(0) == 0)
                .filter(|&i| {
                    let (s, e) = offsets[i];
                    e > s && s < w.span.1 && e > w.span.0
                })
                .collect()
        })
        .collect())
}

/// The weights of [`margins`] for captions with their `(attribute, object)` bindings, padded
/// to `t` tokens.
///
/// # Errors
/// The tokenizer's error.
pub fn binding_weights(
    tokenizer: &Tokenizer,
    texts: &[&str],
    bindings: &[&[[String; 2]]],
    t: usize,
) -> Result<BindingWeights, String> {
    let n = texts.len();
    let m = bindings.iter().map(|b| b.len()).max().unwrap_or(0).max(1);
    let mut out = BindingWeights {
        n,
        m,
        t,
        q: vec![0.0; n * m * t],
        k: vec![0.0; n * m * t],
        valid: vec![0.0; n * m],
    };
    for (ni, (text, binds)) in texts.iter().zip(bindings).enumerate() {
        let toks = word_tokens(tokenizer, text, t)?;
        let ws: Vec<String> = words(text).into_iter().map(|w| w.norm).collect();
        let pos = |w: &str| ws.iter().position(|x| x == w);
        for (mi, [a, o]) in binds.iter().enumerate() {
            let (Some(ia), Some(io)) = (pos(a), pos(o)) else {
                continue;
            };
            let (later, earlier, attr_role) = if io > ia {
                (io, ia, true)
            } else {
                (ia, io, false)
            };
            // Earlier-role words of other objects' bindings, before the later word.
            let mut others: Vec<usize> = binds
                .iter()
                .filter(|[_, o2]| o2 != o)
                .filter_map(|[a2, o2]| pos(if attr_role { a2 } else { o2 }))
                .filter(|&j| j < later)
                .collect();
            others.sort_unstable();
            others.dedup();
            let (lt, et) = (&toks[later], &toks[earlier]);
            let others: Vec<&Vec<usize>> = others
                .iter()
                .map(|&j| &toks[j])
                .filter(|v| !v.is_empty())
                .collect();
            if lt.is_empty() || et.is_empty() || others.is_empty() {
                continue;
            }
            let base = (ni * m + mi) * t;
            for &p in lt {
                out.q[base + p] += 1.0 / lt.len() as f32;
            }
            for &p in et {
                out.k[base + p] += 1.0;
            }
            for v in &others {
                for &p in *v {
                    out.k[base + p] -= 1.0 / others.len() as f32;
                }
            }
            out.valid[ni * m + mi] = 1.0;
        }
    }
    Ok(out)
}

/// Per-binding margins of one layer.
///
/// # Shapes
/// `attn: [N, H, T, T]` → `[N, M]` (0 where not valid).
pub fn margins(attn: Tensor<4>, w: &BindingWeights) -> Tensor<2> {
    let device = attn.device();
    let [n, h, t, _] = attn.dims();
    assert_eq!(
        (n, t),
        (w.n, w.t),
        "attention map and binding weights disagree"
    );
    let mean = attn.sum_dim(1).reshape([n, t, t]) / h as f64; // [N, T, T]
    let q = Tensor::<3>::from_data(TensorData::new(w.q.clone(), [n, w.m, t]), &device);
    let k = Tensor::<3>::from_data(TensorData::new(w.k.clone(), [n, w.m, t]), &device);
    let valid = Tensor::<2>::from_data(TensorData::new(w.valid.clone(), [n, w.m]), &device);
    (q.matmul(mean) * k).sum_dim(2).reshape([n, w.m]) * valid
}

/// Caption margins (mean over valid bindings) on the host: `None` for captions without one.
pub fn caption_margins(per_binding: Tensor<2>, w: &BindingWeights) -> Vec<Option<f64>> {
    let v = per_binding
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32");
    (0..w.n)
        .map(|i| {
            let k: f32 = w.valid[i * w.m..(i + 1) * w.m].iter().sum();
            (k > 0.0)
                .then(|| f64::from(v[i * w.m..(i + 1) * w.m].iter().sum::<f32>()) / f64::from(k))
        })
        .collect()
}

/// The attention hinge loss over the given layers: mean over layers and valid bindings of
/// `max(0, τ − marginᵢ)`; zero when no binding is valid.
pub fn attention_loss(
    attentions: &[Tensor<4>],
    layers: std::ops::Range<usize>,
    w: &BindingWeights,
    tau: f64,
) -> Option<Tensor<1>> {
    let n_valid: f32 = w.valid.iter().sum();
    if n_valid == 0.0 || layers.is_empty() {
        return None;
    }
    let device = attentions[0].device();
    let valid = Tensor::<2>::from_data(TensorData::new(w.valid.clone(), [w.n, w.m]), &device);
    let nl = layers.len();
    let mut total: Option<Tensor<1>> = None;
    for l in layers {
        let m = margins(attentions[l].clone(), w);
        let hinge = (m.neg() + tau).clamp_min(0.0) * valid.clone();
        let s = hinge.sum();
        total = Some(match total {
            Some(t) => t + s,
            None => s,
        });
    }
    total.map(|t| t / (f64::from(n_valid) * nl as f64))
}

/// Mean per-layer margins over a set of captions, accumulated batch by batch.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MarginStats {
    /// Per layer: sum of caption margins.
    pub sum: Vec<f64>,
    /// Per layer: captions with a margin.
    pub count: Vec<usize>,
}

impl MarginStats {
    /// Adds the caption margins of one layer.
    pub fn add(&mut self, layer: usize, caption: &[Option<f64>]) {
        if self.sum.len() <= layer {
            self.sum.resize(layer + 1, 0.0);
            self.count.resize(layer + 1, 0);
        }
        for m in caption.iter().flatten() {
            self.sum[layer] += m;
            self.count[layer] += 1;
        }
    }

    /// Mean margin per layer (`None` without captions).
    pub fn means(&self) -> Vec<Option<f64>> {
        self.sum
            .iter()
            .zip(&self.count)
            .map(|(s, &c)| (c > 0).then(|| s / c as f64))
            .collect()
    }
}
