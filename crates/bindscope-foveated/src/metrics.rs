//! The study's metrics, defined exactly.
//!
//! # Top-1 accuracy
//! `top1 = #{i : ŷ_i = y_i} / n`, `ŷ_i` the arg-max logit (first maximum on ties).
//!
//! # Counterfactual flip rate
//! Over all counterfactual test images `k` (CSB: up to 5 per base scene; CSD: one), with
//! counterfactual label `y'_k`: `flip = #{k : ŷ'_k = y'_k} / #counterfactuals` — the fraction
//! of counterfactuals on which the prediction *follows the new label*. Also reported:
//! - `flip_given_base_correct`: the same over counterfactuals whose base scene was classified
//!   correctly (a readout cannot "follow" a change it never saw);
//! - `stay`: `#{k : ŷ'_k = ŷ_{base(k)}} / #counterfactuals`, how often the prediction ignores
//!   the swap. Since swaps preserve the shape and colour histograms, a readout that keeps only
//!   those histograms has `stay = 1` and `flip = 0`.
//!
//! # Nuisance-to-signal ratio (NSR)
//! For a readout `z(·) ∈ R^D` (the pooled vector the probe sees; for the fovea, pooled with the
//! trained query) and the set `B` of test scenes that have at least two nuisance variants and at
//! least one counterfactual:
//! - nuisance spread of scene `b` with variants `v_1..v_V`:
//!   `N_b = (1/V) Σ_j ‖z(v_j) − z̄_b‖²`, `z̄_b = (1/V) Σ_j z(v_j)` (the total variance of the
//!   readout when everything but the target, K and λ is resampled);
//! - signal of scene `b` with counterfactuals `c_1..c_M`:
//!   `S_b = (1/M) Σ_k ‖z(c_k) − z(b)‖²` (the mean squared change when only the binding changes);
//! - `NSR = (Σ_{b∈B} N_b) / (Σ_{b∈B} S_b)`.
//!
//! Both terms are squared Euclidean distances of the same readout, so NSR is invariant to a
//! rescaling of `z`. `NSR ≫ 1`: the readout moves far more with irrelevant clutter than with the
//! label-defining change; a histogram-only readout has `S_b = 0` (NSR = ∞, reported as `null`
//! in JSON).

use serde::{Deserialize, Deserializer, Serialize};

pub use crate::probe::{paired_accuracy, top1};

/// Counterfactual statistics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlipStats {
    /// Number of counterfactuals.
    pub n: usize,
    /// Fraction whose prediction equals the counterfactual label.
    #[serde(deserialize_with = "nan_if_null")]
    pub flip: f64,
    /// Number of counterfactuals whose base scene was classified correctly.
    pub n_base_correct: usize,
    /// Flip rate among those (NaN when no base scene was classified correctly).
    #[serde(deserialize_with = "nan_if_null")]
    pub flip_given_base_correct: f64,
    /// Fraction whose prediction equals the base scene's prediction.
    #[serde(deserialize_with = "nan_if_null")]
    pub stay: f64,
}

/// A rate as a resume log holds it: serde_json writes NaN (an undefined rate, e.g. no base
/// scene classified correctly) as `null`, which reads back as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Flip statistics; `base_of[k]` is the index (into `base_pred` / `base_y`) of counterfactual
/// `k`'s base scene.
///
/// # Panics
/// If the lengths of the counterfactual arrays differ.
pub fn flip_stats(
    cf_pred: &[usize],
    cf_y: &[usize],
    base_of: &[usize],
    base_pred: &[usize],
    base_y: &[usize],
) -> FlipStats {
    assert!(
        cf_pred.len() == cf_y.len() && cf_y.len() == base_of.len(),
        "counterfactual arrays differ in length"
    );
    let n = cf_pred.len();
    let frac = |a: usize, b: usize| {
        if b == 0 {
            f64::NAN
        } else {
            a as f64 / b as f64
        }
    };
    let mut flips = 0;
    let mut stays = 0;
    let mut nbc = 0;
    let mut flips_bc = 0;
    for k in 0..n {
        let b = base_of[k];
        let flipped = cf_pred[k] == cf_y[k];
        flips += flipped as usize;
        stays += (cf_pred[k] == base_pred[b]) as usize;
        if base_pred[b] == base_y[b] {
            nbc += 1;
            flips_bc += flipped as usize;
        }
    }
    FlipStats {
        n,
        flip: frac(flips, n),
        n_base_correct: nbc,
        flip_given_base_correct: frac(flips_bc, nbc),
        stay: frac(stays, n),
    }
}

/// Nuisance-to-signal statistics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NsrStats {
    /// Number of base scenes in `B`.
    pub scenes: usize,
    /// `mean_b N_b`.
    pub nuisance: f64,
    /// `mean_b S_b`.
    pub signal: f64,
    /// `Σ N_b / Σ S_b`; `None` when the signal is 0 or `B` is empty.
    pub nsr: Option<f64>,
}

fn sq_dist(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum()
}

/// NSR of a readout (see the module docs). `base` is `[n_base, dim]`; `cf` / `nuisance` are
/// `[m, dim]` with `cf_base[k]` / `nuisance_base[k]` naming each row's base scene.
pub fn nsr(
    dim: usize,
    base: &[f32],
    cf: &[f32],
    cf_base: &[usize],
    nuisance: &[f32],
    nuisance_base: &[usize],
) -> NsrStats {
    let row = |m: &[f32], i: usize| -> Vec<f32> { m[i * dim..(i + 1) * dim].to_vec() };
    let n_base = base.len() / dim.max(1);
    let mut variants: Vec<Vec<usize>> = vec![Vec::new(); n_base];
    for (k, &b) in nuisance_base.iter().enumerate() {
        variants[b].push(k);
    }
    let mut cfs: Vec<Vec<usize>> = vec![Vec::new(); n_base];
    for (k, &b) in cf_base.iter().enumerate() {
        cfs[b].push(k);
    }
    let (mut sum_n, mut sum_s, mut scenes) = (0.0, 0.0, 0);
    for b in 0..n_base {
        if variants[b].len() < 2 || cfs[b].is_empty() {
            continue;
        }
        let v = variants[b].len() as f64;
        let mut mean = vec![0f64; dim];
        for &k in &variants[b] {
            for (m, x) in mean.iter_mut().zip(&nuisance[k * dim..(k + 1) * dim]) {
                *m += *x as f64 / v;
            }
        }
        // Variance computed in f64 around the f64 mean.
        let nb: f64 = variants[b]
            .iter()
            .map(|&k| {
                nuisance[k * dim..(k + 1) * dim]
                    .iter()
                    .zip(&mean)
                    .map(|(x, m)| (*x as f64 - m).powi(2))
                    .sum::<f64>()
            })
            .sum::<f64>()
            / v;
        let zb = row(base, b);
        let sb: f64 = cfs[b]
            .iter()
            .map(|&k| sq_dist(&cf[k * dim..(k + 1) * dim], &zb))
            .sum::<f64>()
            / cfs[b].len() as f64;
        sum_n += nb;
        sum_s += sb;
        scenes += 1;
    }
    let denom = scenes.max(1) as f64;
    NsrStats {
        scenes,
        nuisance: sum_n / denom,
        signal: sum_s / denom,
        nsr: (scenes > 0 && sum_s > 0.0).then(|| sum_n / sum_s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undefined_flip_rate_survives_the_resume_log() {
        // No base scene classified correctly: the conditional rate is NaN, written as null.
        let s = flip_stats(&[0, 0], &[1, 1], &[0, 1], &[0, 0], &[1, 1]);
        assert!(s.flip_given_base_correct.is_nan());
        let line = serde_json::to_string(&s).unwrap();
        assert!(line.contains("\"flip_given_base_correct\":null"), "{line}");
        let back: FlipStats = serde_json::from_str(&line).unwrap();
        assert!(back.flip_given_base_correct.is_nan());
        assert_eq!((back.n, back.flip, back.stay), (s.n, s.flip, s.stay));
    }

    #[test]
    fn flip_rate_by_hand() {
        // Two base scenes: 0 correct (pred 1 = y 1), 1 wrong (pred 0, y 2).
        let base_pred = [1, 0];
        let base_y = [1, 2];
        // Four counterfactuals: of base 0 with labels 3 (pred 3: flip), 4 (pred 1: stay);
        // of base 1 with labels 5 (pred 5: flip), 0 (pred 0: stay, and equals the new label!).
        let s = flip_stats(
            &[3, 1, 5, 0],
            &[3, 4, 5, 0],
            &[0, 0, 1, 1],
            &base_pred,
            &base_y,
        );
        assert_eq!(s.n, 4);
        assert_eq!(s.flip, 3.0 / 4.0);
        assert_eq!(s.n_base_correct, 2);
        assert_eq!(s.flip_given_base_correct, 0.5);
        assert_eq!(s.stay, 2.0 / 4.0);
    }

    #[test]
    fn nsr_by_hand() {
        // dim 2; base scene 0 at (0,0) with nuisance variants (1,0), (-1,0) → N = 1;
        // counterfactuals (2,0), (0,2) → S = 4. Base scene 1 has no variants: excluded.
        let base = [0.0, 0.0, 9.0, 9.0];
        let nu = [1.0, 0.0, -1.0, 0.0];
        let cf = [2.0, 0.0, 0.0, 2.0, 5.0, 5.0];
        let s = nsr(2, &base, &cf, &[0, 0, 1], &nu, &[0, 0]);
        assert_eq!(s.scenes, 1);
        assert_eq!(s.nuisance, 1.0);
        assert_eq!(s.signal, 4.0);
        assert_eq!(s.nsr, Some(0.25));
        // Scale invariance.
        let k = 3.0f32;
        let sc = |v: &[f32]| v.iter().map(|x| x * k).collect::<Vec<_>>();
        let t = nsr(2, &sc(&base), &sc(&cf), &[0, 0, 1], &sc(&nu), &[0, 0]);
        assert!((t.nsr.unwrap() - 0.25).abs() < 1e-12);
        // A readout blind to the swap has no signal: NSR undefined.
        let u = nsr(
            2,
            &base,
            &[0.0, 0.0, 0.0, 0.0, 9.0, 9.0],
            &[0, 0, 1],
            &nu,
            &[0, 0],
        );
        assert_eq!(u.signal, 0.0);
        assert_eq!(u.nsr, None);
    }

    #[test]
    fn top1_and_paired() {
        assert_eq!(top1(&[0, 1, 2, 2], &[0, 1, 1, 2]), 0.75);
        // Pairs (0,1) both right, (2,3) one wrong.
        assert_eq!(
            paired_accuracy(&[0, 1, 2, 2], &[0, 1, 1, 2], &[(0, 1), (2, 3)]),
            0.5
        );
    }
}
