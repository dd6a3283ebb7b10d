//! Geometric metrics of an embedding cloud (paper §3.1, App. D.3), in f64 on the host.
//!
//! For `n` embeddings `x_i ∈ R^D` with covariance `C = Σ (x_i − μ)(x_i − μ)ᵀ / (n − 1)` and
//! eigenvalues `λ_1 ≥ … ≥ λ_D ≥ 0`:
//!
//! ```text
//! G.PR  = (Σλ)² / (D · Σλ²)     global participation ratio, normalized by D: 1/D (rank 1) … 1 (isotropic)
//! G.Iso = 1 − λ_1 / Σλ          global isotropy: 0 (rank 1) … 1 − 1/D (isotropic)
//! ```
//!
//! **L.Iso** (local isotropy) is the mean over anchors of an isotropy of the covariance of each
//! anchor's `k` nearest neighbours (cosine similarity, the anchor itself excluded; the
//! covariance is over the `k` neighbours only, `/(k − 1)`). That covariance has at most
//! `m = min(k − 1, D)` non-zero eigenvalues; three formulations ([`LocalIsotropy`]):
//!
//! ```text
//! variance             1 − λ_1 / Σλ                     (G.Iso applied locally; max 1 − 1/m)
//! effective rank       exp(−Σ p_i ln p_i) / m,  p = λ/Σλ  (Roy & Vetterli 2007, normalized: max 1)
//! participation ratio  (Σλ)² / (m · Σλ²)                 (normalized: max 1)
//! ```
//!
//! Eigenvalues come from faer's symmetric eigensolver in f64, on the smaller of the `D × D`
//! covariance and the `n × n` centred Gram matrix (they share their non-zero eigenvalues);
//! tiny negative round-off eigenvalues are set to 0. A cloud with zero variance gives NaN.

use crate::tasks::{item_rng, shuffle};
use faer::{Mat, Side};

/// Stream tag of the anchor selection.
pub const ANCHOR_STREAM: u64 = 3;
/// Stream tag of the sample selection (which images of a folder are used).
pub const SAMPLE_STREAM: u64 = 4;

/// `n × d` row-major embeddings in f64.
#[derive(Debug, Clone)]
pub struct Cloud {
    /// Number of points.
    pub n: usize,
    /// Dimension.
    pub d: usize,
    /// `n * d` values.
    pub data: Vec<f64>,
}

impl Cloud {
    /// From rows of equal length.
    ///
    /// # Panics
    /// If rows differ in length or there are none.
    pub fn from_rows<T: Copy + Into<f64>>(rows: &[Vec<T>]) -> Self {
        assert!(!rows.is_empty(), "Cloud::from_rows: no rows");
        let d = rows[0].len();
        let mut data = Vec::with_capacity(rows.len() * d);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(
                r.len(),
                d,
                "Cloud::from_rows: row {i} has length {} instead of {d}",
                r.len()
            );
            data.extend(r.iter().map(|&x| x.into()));
        }
        Self {
            n: rows.len(),
            d,
            data,
        }
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.d..(i + 1) * self.d]
    }

    /// The sub-cloud of the given rows.
    pub fn select(&self, rows: &[usize]) -> Cloud {
        let mut data = Vec::with_capacity(rows.len() * self.d);
        for &r in rows {
            data.extend_from_slice(self.row(r));
        }
        Cloud {
            n: rows.len(),
            d: self.d,
            data,
        }
    }
}

/// Eigenvalues (non-increasing, ≥ 0) of the covariance of `rows` of `cloud` (`/(len − 1)`).
/// Only the first `min(len, D)` are returned (the rest are zero).
///
/// # Errors
/// When the eigensolver does not converge, or fewer than 2 rows are given.
pub fn covariance_eigenvalues(cloud: &Cloud, rows: &[usize]) -> Result<Vec<f64>, String> {
    let m = rows.len();
    let d = cloud.d;
    if m < 2 {
        return Err(format!("covariance of {m} point(s): need at least 2"));
    }
    let mut mean = vec![0f64; d];
    for &r in rows {
        for (a, b) in mean.iter_mut().zip(cloud.row(r)) {
            *a += b;
        }
    }
    mean.iter_mut().for_each(|a| *a /= m as f64);
    let xc = Mat::<f64>::from_fn(m, d, |i, j| cloud.row(rows[i])[j] - mean[j]);
    let scale = 1.0 / (m - 1) as f64;
    let small = if m <= d {
        &xc * xc.transpose()
    } else {
        xc.transpose() * &xc
    };
    let small = Mat::<f64>::from_fn(small.nrows(), small.ncols(), |i, j| small[(i, j)] * scale);
    let mut ev = small
        .self_adjoint_eigenvalues(Side::Lower)
        .map_err(|e| format!("eigendecomposition failed: {e:?}"))?;
    ev.iter_mut().for_each(|l| *l = l.max(0.0));
    ev.sort_by(|a, b| b.total_cmp(a));
    Ok(ev)
}

/// G.PR and G.Iso of a cloud.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GlobalGeometry {
    /// Points used.
    pub n: usize,
    /// Embedding dimension `D`.
    pub dim: usize,
    /// `(Σλ)² / (D·Σλ²)`.
    pub g_pr: f64,
    /// `1 − λ_1/Σλ`.
    pub g_iso: f64,
    /// Unnormalized participation ratio `(Σλ)²/Σλ²`.
    pub participation_ratio: f64,
    /// Total variance `Σλ`.
    pub total_variance: f64,
}

/// Participation ratio `(Σλ)²/Σλ²` of eigenvalues.
pub fn participation_ratio(ev: &[f64]) -> f64 {
    let s1: f64 = ev.iter().sum();
    let s2: f64 = ev.iter().map(|l| l * l).sum();
    s1 * s1 / s2
}

/// `1 − λ_max/Σλ`.
pub fn variance_isotropy(ev: &[f64]) -> f64 {
    let s: f64 = ev.iter().sum();
    let top = ev.iter().copied().fold(0.0f64, f64::max);
    1.0 - top / s
}

/// Entropy effective rank `exp(−Σ p ln p)`, `p = λ/Σλ` (zero eigenvalues contribute 0).
pub fn effective_rank(ev: &[f64]) -> f64 {
    let s: f64 = ev.iter().sum();
    let h: f64 = ev
        .iter()
        .map(|l| l / s)
        .filter(|p| *p > 0.0)
        .map(|p| -p * p.ln())
        .sum();
    if s > 0.0 { h.exp() } else { f64::NAN }
}

/// G.PR and G.Iso of the whole cloud.
///
/// # Errors
/// As [`covariance_eigenvalues`].
pub fn global_geometry(cloud: &Cloud) -> Result<GlobalGeometry, String> {
    let all: Vec<usize> = (0..cloud.n).collect();
    let ev = covariance_eigenvalues(cloud, &all)?;
    let pr = participation_ratio(&ev);
    Ok(GlobalGeometry {
        n: cloud.n,
        dim: cloud.d,
        g_pr: pr / cloud.d as f64,
        g_iso: variance_isotropy(&ev),
        participation_ratio: pr,
        total_variance: ev.iter().sum(),
    })
}

/// L.Iso for one neighbourhood size, in the three formulations (means over anchors).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LocalIsotropy {
    /// Neighbours per anchor.
    pub k: usize,
    /// Number of anchors.
    pub anchors: usize,
    /// Mean of `1 − λ_1/Σλ`.
    pub variance: f64,
    /// Mean of `erank / min(k − 1, D)`.
    pub effective_rank: f64,
    /// Mean of `PR / min(k − 1, D)`.
    pub participation_ratio: f64,
}

/// `count` distinct indices of `0..n` (all of them when `count ≥ n`), chosen by a seeded
/// Fisher–Yates permutation of `0..n` (stream `stream`), returned in the permutation's order.
pub fn choose_indices(n: usize, count: usize, seed: u64, stream: u64) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    let mut rng = item_rng(seed, stream, 0);
    shuffle(&mut idx, &mut rng);
    idx.truncate(count.min(n));
    idx
}

/// Cosine-similarity matrix (n × n) of a cloud.
fn cosine_matrix(cloud: &Cloud) -> Mat<f64> {
    let norms: Vec<f64> = (0..cloud.n)
        .map(|i| cloud.row(i).iter().map(|x| x * x).sum::<f64>().sqrt())
        .collect();
    let u = Mat::<f64>::from_fn(cloud.n, cloud.d, |i, j| {
        if norms[i] > 0.0 {
            cloud.row(i)[j] / norms[i]
        } else {
            0.0
        }
    });
    &u * u.transpose()
}

/// The `k` nearest points to `i` by cosine (itself excluded; ties: lower index first).
fn nearest(sim: &Mat<f64>, i: usize, k: usize) -> Vec<usize> {
    let mut all: Vec<(f64, usize)> = (0..sim.nrows())
        .filter(|&j| j != i)
        .map(|j| (sim[(i, j)], j))
        .collect();
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    all.into_iter().take(k).map(|(_, j)| j).collect()
}

/// L.Iso for each `k` in `ks` over the given anchors.
///
/// # Errors
/// A `k` < 2 or ≥ n, or an eigensolver failure.
pub fn local_isotropy(
    cloud: &Cloud,
    anchors: &[usize],
    ks: &[usize],
) -> Result<Vec<LocalIsotropy>, String> {
    let sim = cosine_matrix(cloud);
    let kmax = ks.iter().copied().max().unwrap_or(0);
    for &k in ks {
        if k < 2 || k >= cloud.n {
            return Err(format!("L.Iso: k = {k} needs 2 ≤ k < n = {}", cloud.n));
        }
    }
    let mut out = Vec::new();
    let neighbour_lists: Vec<Vec<usize>> =
        anchors.iter().map(|&a| nearest(&sim, a, kmax)).collect();
    for &k in ks {
        let m = (k - 1).min(cloud.d) as f64;
        let (mut v, mut e, mut p) = (0.0, 0.0, 0.0);
        for nn in &neighbour_lists {
            let ev = covariance_eigenvalues(cloud, &nn[..k])?;
            v += variance_isotropy(&ev);
            e += effective_rank(&ev) / m;
            p += participation_ratio(&ev) / m;
        }
        let a = anchors.len() as f64;
        out.push(LocalIsotropy {
            k,
            anchors: anchors.len(),
            variance: v / a,
            effective_rank: e / a,
            participation_ratio: p / a,
        });
    }
    Ok(out)
}
