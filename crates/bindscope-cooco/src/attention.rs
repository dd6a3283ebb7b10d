//! Attention allocation (COOCO App. C): how much of the model's attention, traced back through
//! the vision tower, lands on the target box rather than on its context.
//!
//! For one instance (an image under one noise condition) and vision layer `l`:
//! 1. **ViT map.** The base (full-image) view's attention `[H_v, g², g²]`, mean over heads,
//!    rows renormalised ([`head_mean_rows`]); minus the *dataset-mean map* of that layer (the
//!    mean of these maps over every instance of the analysis), then ReLU: `V_l` `[g², g²]`.
//! 2. **LLM weights.** For each output token `i` (the EOS that ends the answer excluded), the
//!    attention row of the decoder pass that produced it (the prompt pass's last row for the
//!    first token, the pass over token `i − 1` after that), per layer mean over heads, column 0
//!    zeroed (the attention sink on the first position), renormalised, then the mean over
//!    layers; its entries at the base view's `g²` image positions (the first `g²` image tokens:
//!    LLaVA-OneVision packs the base view first), normalised to sum 1: `Â_i` ([`llm_weights`]).
//! 3. **Image map.** `m_l = Σ_j Â̄_j V_l[j, ·]` with `Â̄` the mean of `Â_i` over output tokens
//!    (the mean over tokens of `Σ_j Â_ij V_j`, which is linear in `Â_i`), a `g × g` map over
//!    the base view, upsampled to the prepared image's `side × side` pixels by nearest
//!    neighbour (torch's `interpolate(mode="nearest")` index rule, [`nearest_index`]).
//! 4. **Allocation.** `a_target` = the map's sum over the box (rows `int(y)..int(y + h)`,
//!    columns `int(x)..int(x + w)`, as the noise), `a_context` = its sum over the image before
//!    padding outside the box; `r_l = a_target / a_context` ([`allocation`]); `None` when
//!    `a_context` is 0 (nothing to divide by) or the answer has no output token.
//!
//! The ratios of a condition are the mean of `r_l` over its instances. The study's script
//! averaged the attention maps pairwise (a running mean of two, so later instances weigh more);
//! this computes the plain mean the paper describes. By default only prepared images of
//! 640 × 640 pixels enter the analysis, as in the study.
//!
//! Checked against a numpy implementation over transformers' eager attentions on a tiny
//! LLaVA-OneVision (`tests/fixtures/gen/cooco_llava.py`).

use crate::prepare::box_pixels;

/// `[H, Q, K]` attention probabilities (row-major) → the `[Q, K]` mean over heads with every
/// row divided by its sum, in f64.
///
/// # Panics
/// When `a.len() != heads · q · k`.
pub fn head_mean_rows(a: &[f32], heads: usize, q: usize, k: usize) -> Vec<f64> {
    assert_eq!(a.len(), heads * q * k, "attention of [{heads}, {q}, {k}]");
    let mut m = vec![0f64; q * k];
    for h in 0..heads {
        for (acc, &x) in m.iter_mut().zip(&a[h * q * k..(h + 1) * q * k]) {
            *acc += x as f64;
        }
    }
    for row in m.chunks_mut(k) {
        for x in row.iter_mut() {
            *x /= heads as f64;
        }
        let s: f64 = row.iter().sum();
        if s > 0.0 {
            for x in row.iter_mut() {
                *x /= s;
            }
        }
    }
    m
}

/// The weights `Â_i` `[g²]` of one output token over the base view's image positions
/// `base` (step 2 of the [module docs](self)) from its query row in every decoder layer:
/// `rows[l]` is `[H, S]` (row-major) over the `S` keys. `None` when the row puts no weight on
/// the image positions.
///
/// # Panics
/// When a row is not `heads · S` long or `base` is outside `S`.
pub fn llm_weights(
    rows: &[Vec<f32>],
    heads: usize,
    base: std::ops::Range<usize>,
) -> Option<Vec<f64>> {
    let s = rows.first().map_or(0, |r| r.len() / heads.max(1));
    let mut mean = vec![0f64; s];
    for r in rows {
        let mut m = head_mean_rows(r, heads, 1, s);
        m[0] = 0.0;
        let total: f64 = m.iter().sum();
        if total > 0.0 {
            for (acc, x) in mean.iter_mut().zip(&m) {
                *acc += x / total;
            }
        }
    }
    let mut w: Vec<f64> = mean[base].iter().map(|x| x / rows.len() as f64).collect();
    let total: f64 = w.iter().sum();
    if total > 0.0 {
        w.iter_mut().for_each(|x| *x /= total);
        Some(w)
    } else {
        None
    }
}

/// torch's `interpolate(size=out, mode="nearest")` source index of every output index:
/// `min(floor(i · (input / out)), input − 1)` with the scale and the product in f32, as torch
/// computes them.
pub fn nearest_index(input: usize, out: usize) -> Vec<usize> {
    let scale = input as f32 / out as f32;
    (0..out)
        .map(|i| ((i as f32 * scale).floor() as usize).min(input - 1))
        .collect()
}

/// Where the target and the image sit in the prepared square image.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Region {
    /// The prepared image's side in pixels.
    pub side: usize,
    /// The box `[x, y, w, h]` in its pixels.
    pub bbox: [f64; 4],
    /// The image before padding: `[x, y, width, height]`.
    pub content: [usize; 4],
}

/// `(a_target, a_context)` of a `g × g` map (row-major) upsampled to the region's image
/// (steps 3–4 of the [module docs](self)).
///
/// # Panics
/// When `map.len() != g²`.
pub fn allocation(map: &[f64], g: usize, region: &Region) -> (f64, f64) {
    assert_eq!(map.len(), g * g, "a {g} x {g} map");
    let side = region.side;
    let idx = nearest_index(g, side);
    let [x0, y0, x1, y1] = box_pixels(region.bbox, side, side);
    let [cx, cy, cw, ch] = region.content;
    let (mut target, mut context) = (0.0, 0.0);
    for (y, &r) in idx.iter().enumerate() {
        for (x, &c) in idx.iter().enumerate() {
            let v = map[r * g + c];
            if x >= x0 && x < x1 && y >= y0 && y < y1 {
                target += v;
            } else if x >= cx && x < cx + cw && y >= cy && y < cy + ch {
                context += v;
            }
        }
    }
    (target, context)
}

/// `r_l` for every vision layer: `vit[l]` the instance's [`head_mean_rows`] map `[g², g²]`,
/// `mean[l]` the dataset-mean map, `abar` the mean of the output tokens' [`llm_weights`].
///
/// # Panics
/// When the shapes disagree.
pub fn ratios(
    vit: &[Vec<f64>],
    mean: &[Vec<f64>],
    abar: &[f64],
    g: usize,
    region: &Region,
) -> Vec<Option<f64>> {
    let n = g * g;
    assert_eq!(abar.len(), n);
    vit.iter()
        .zip(mean)
        .map(|(v, m)| {
            let mut map = vec![0f64; n];
            for j in 0..n {
                let w = abar[j];
                if w == 0.0 {
                    continue;
                }
                let (row, mrow) = (&v[j * n..(j + 1) * n], &m[j * n..(j + 1) * n]);
                for k in 0..n {
                    map[k] += w * (row[k] - mrow[k]).max(0.0);
                }
            }
            let (t, c) = allocation(&map, g, region);
            (c > 0.0).then(|| t / c)
        })
        .collect()
}

/// The mean of the output tokens' weights, `None` when no token has any.
pub fn mean_weights(tokens: &[Vec<f64>]) -> Option<Vec<f64>> {
    let first = tokens.first()?;
    let mut m = vec![0f64; first.len()];
    for t in tokens {
        for (a, x) in m.iter_mut().zip(t) {
            *a += x;
        }
    }
    m.iter_mut().for_each(|x| *x /= tokens.len() as f64);
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_index_follows_torchs_f32_rule() {
        assert_eq!(nearest_index(2, 4), vec![0, 0, 1, 1]);
        // 4 / 72 in f32 rounds up, so 18 · scale reaches 1 (f64 would give 0.999…).
        assert_eq!(nearest_index(4, 72)[18], 1);
        assert_eq!(nearest_index(3, 2), vec![0, 1]);
    }

    #[test]
    fn allocation_splits_box_context_and_padding() {
        // A 2 x 2 map on an 8 x 8 image whose left two columns are padding.
        let map = [1.0, 2.0, 3.0, 4.0];
        let region = Region {
            side: 8,
            bbox: [4.0, 0.0, 4.0, 4.0], // the top-right cell
            content: [2, 0, 6, 8],
        };
        let (t, c) = allocation(&map, 2, &region);
        assert_eq!(t, 2.0 * 16.0);
        // The rest of the content: columns 2..4 of the top cell (8 px of 1.0), the bottom row
        // (columns 2..4: 8 px of 3.0; 4..8: 16 px of 4.0).
        assert_eq!(c, 8.0 + 24.0 + 64.0);
    }

    #[test]
    fn llm_weights_zero_the_first_column_and_renormalise() {
        // One layer, two heads, four keys; the image is keys 2..4.
        let rows = vec![vec![0.5, 0.1, 0.2, 0.2, 0.7, 0.1, 0.1, 0.1]];
        let w = llm_weights(&rows, 2, 2..4).unwrap();
        assert!((w[0] - 0.5).abs() < 1e-12 && (w[1] - 0.5).abs() < 1e-12);
        let none = llm_weights(&[vec![1.0, 0.0, 0.0]], 1, 1..3);
        assert!(none.is_none());
    }
}
