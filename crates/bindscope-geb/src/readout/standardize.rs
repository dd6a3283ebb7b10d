//! Per-dimension standardisation of the embeddings before the adapter (`geb train
//! --standardize`): `z = (e − μ) / σ`, with `μ` and `σ` the mean and the population standard
//! deviation (ddof 0) of each dimension over the training embeddings: the rows of the distinct
//! keys of `train.json`'s conversations (an image counts once however many turns its
//! conversation has; a question embedding once per image and question text), sequences later
//! left out for length included. This is scikit-learn's `StandardScaler` (`with_mean`,
//! `with_std`): sums accumulated in f64, and a dimension indistinguishable from a constant
//! (`StandardScaler`'s `_is_constant_feature`: `var ≤ n·ε·var + (n·μ·ε)²`, ε the f64 machine
//! epsilon) scaled by 1. As with `StandardScaler`, a dimension nearly constant on the training
//! rows but varying at evaluation gives large `z` there; no floor is applied beyond that test.
//!
//! It is an opt-in departure from the paper's eq. 1–3, which feed the raw embedding to the
//! adapter. Why it exists: the adapter L2-normalises `e` and its LayerNorm normalises each row
//! *across* dimensions, so nothing in eq. 1–3 removes the mean embedding shared by all images or
//! evens out the dimensions' scales. For DINOv2-S pooled features the mean vector is most of
//! each row's norm, and answer-relevant directions (a text's colour) have small variance; a
//! readout then learns them slowly, while a linear probe on the same vectors finds them
//! (README, the GEB "Known limit" paragraph). The statistics are fixed from the training rows
//! and stored with the run (`readout.json`), and evaluation applies the same `μ`, `σ` to its
//! items' embeddings.
//!
//! Controls under standardisation: the zero control is the zero vector at the adapter's input,
//! i.e. `z = 0`, which is the training mean `μ` in the embedder's space — an embedding that
//! carries no information about any one image. The shuffled control permutes standardised rows,
//! which is the same as permuting raw rows.

use serde::{Deserialize, Serialize};

/// One slot's statistics: `z = (e − mean) / scale`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Standardizer {
    /// `μ`, `[d]`: each dimension's mean over the training rows.
    pub mean: Vec<f32>,
    /// `σ`, `[d]`: each dimension's population standard deviation (1 where it is 0).
    pub scale: Vec<f32>,
}

impl Standardizer {
    /// The statistics of `rows` (`[n, d]` row-major, `n ≥ 1`), accumulated in f64.
    ///
    /// # Errors
    /// No rows, a row count that is not a multiple of `d`, or a non-finite value (named by
    /// row and dimension).
    pub fn fit(rows: &[f32], d: usize) -> Result<Self, String> {
        if d == 0 || rows.is_empty() || !rows.len().is_multiple_of(d) {
            return Err(format!(
                "standardisation needs [n, d] rows with n ≥ 1: got {} values for d = {d}",
                rows.len()
            ));
        }
        let n = rows.len() / d;
        if let Some(i) = rows.iter().position(|v| !v.is_finite()) {
            return Err(format!(
                "embedding row {} dimension {} is {} (standardisation needs finite values)",
                i / d,
                i % d,
                rows[i]
            ));
        }
        let mut mean = vec![0f64; d];
        for r in rows.chunks(d) {
            for (m, &v) in mean.iter_mut().zip(r) {
                *m += f64::from(v);
            }
        }
        for m in &mut mean {
            *m /= n as f64;
        }
        let mut var = vec![0f64; d];
        for r in rows.chunks(d) {
            for ((s, &v), m) in var.iter_mut().zip(r).zip(&mean) {
                let c = f64::from(v) - m;
                *s += c * c;
            }
        }
        let nf = n as f64;
        let scale = var
            .iter()
            .zip(&mean)
            .map(|(s, m)| {
                let var = s / nf;
                let constant = var <= nf * f64::EPSILON * var + (nf * m * f64::EPSILON).powi(2);
                let sd = var.sqrt() as f32;
                if constant || !sd.is_normal() { 1.0 } else { sd }
            })
            .collect();
        Ok(Self {
            mean: mean.iter().map(|&m| m as f32).collect(),
            scale,
        })
    }

    /// The width `d`.
    pub fn dim(&self) -> usize {
        self.mean.len()
    }

    /// Standardises `rows` (`[n, d]` row-major) in place (each value computed in f64).
    ///
    /// # Panics
    /// When `rows.len()` is not a multiple of [`Standardizer::dim`] (a caller bug: widths are
    /// checked against the adapter first).
    pub fn apply(&self, rows: &mut [f32]) {
        let d = self.dim();
        assert!(
            d > 0 && rows.len().is_multiple_of(d),
            "rows of width {d} expected"
        );
        for r in rows.chunks_mut(d) {
            for ((v, m), s) in r.iter_mut().zip(&self.mean).zip(&self.scale) {
                *v = ((f64::from(*v) - f64::from(*m)) / f64::from(*s)) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values from `sklearn.preprocessing.StandardScaler().fit(X)` (scikit-learn 1.9.1):
    /// `X = [[1, 2, 5], [3, 2, -1], [8, 2, 2]]` gives `mean_ = [4, 2, 2]`,
    /// `scale_ = [2.943920288775949, 1, 2.449489742783178]` (the constant column scaled by 1),
    /// and `transform([[4, 2, 2], [1, 2, 5]]) = [[0, 0, 0], [-1.0190493307, 0, 1.2247448714]]`.
    #[test]
    fn matches_standard_scaler() {
        let x = [1.0, 2.0, 5.0, 3.0, 2.0, -1.0, 8.0, 2.0, 2.0];
        let s = Standardizer::fit(&x, 3).unwrap();
        assert_eq!(s.mean, vec![4.0, 2.0, 2.0]);
        let want = [2.943_920_3_f32, 1.0, 2.449_489_7];
        for (a, b) in s.scale.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        let mut rows = [4.0, 2.0, 2.0, 1.0, 2.0, 5.0];
        s.apply(&mut rows);
        let want = [0.0, 0.0, 0.0, -1.019_049_3, 0.0, 1.224_744_9];
        for (a, b) in rows.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn bad_rows_are_named() {
        assert!(Standardizer::fit(&[], 3).is_err());
        assert!(Standardizer::fit(&[1.0, 2.0], 3).is_err());
        let e = Standardizer::fit(&[1.0, 2.0, f32::NAN, 4.0], 2).unwrap_err();
        assert!(e.contains("row 1 dimension 0"), "{e}");
    }
}
