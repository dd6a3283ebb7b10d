//! Readouts: how a frozen embedding answers the binding task (paper §5.1, App. D.5), and the
//! threshold rule of the Same/Different task.
//!
//! Every readout works on a [`Bank`]: the embeddings of a fixed set of images, here the 324
//! scenes of the grammar ([`crate::scene`]), indexed by scene id. Embeddings are first
//! L2-normalized (in f64), so "cosine" below is a dot product of unit vectors. The paper gives
//! the hyper-parameters of kNN (k = 60, cosine) and local PCA (32 components, 50 nearest
//! neighbours) but not how they score a candidate; the rules chosen here are:
//!
//! - **cosine** (default): `score(q, c) = cos(e_q, e_c)`.
//! - **kNN**, k nearest neighbours by cosine in the bank, the image itself excluded (`N_k(x)`):
//!   - [`KnnScore::Shared`] (default): shared-nearest-neighbour similarity
//!     `|N_k(q) ∩ N_k(c)| / k`, ties broken by `cos(e_q, e_c)`. The candidate is judged by whether
//!     it sits in the same region of the bank as the query, not by its raw similarity.
//!   - [`KnnScore::Mean`]: cosine between kNN-smoothed embeddings, `ê(x) = mean({e_x} ∪
//!     {e_n : n ∈ N_k(x)})`, `score = cos(ê_q, ê_c)`.
//! - **local PCA**, m components fitted on the query's `n` nearest neighbours (cosine, the
//!   query excluded): with `μ` their mean and `V` the top-m principal directions of the
//!   centred neighbours (eigenvectors of their covariance; fewer when the neighbourhood has
//!   rank < m),
//!   - [`PcaScore::ProjectedCosine`] (default): `cos(Vᵀ(e_q − μ), Vᵀ(e_c − μ))`, the cosine of
//!     query and candidate within the query's local principal subspace;
//!   - [`PcaScore::ProjectedDistance`]: `−‖Vᵀ(e_c − e_q)‖`, the Euclidean distance of query
//!     and candidate measured within the query's local principal subspace (directions the
//!     neighbourhood does not vary along are ignored).
//!
//! The highest score wins ([`pick`]); equal scores go to the earlier candidate in the trial's
//! (shuffled) order. Scores are `(primary, tie-break)` pairs compared lexicographically; only
//! the shared-neighbour kNN uses the tie-break.

use crate::tasks::{BindingTrial, CandidateKind, SameDiffPair};
use faer::Mat;
use faer::Side;
use std::collections::BTreeMap;

/// L2-normalized embeddings of a fixed image set, `n × d` row-major f64.
#[derive(Debug, Clone)]
pub struct Bank {
    n: usize,
    d: usize,
    unit: Vec<f64>,
}

impl Bank {
    /// From `n` embeddings of equal length (any float precision is widened to f64). A zero
    /// vector stays zero (its cosine with anything is 0).
    ///
    /// # Panics
    /// If the rows differ in length or there are none.
    pub fn new(rows: &[Vec<f32>]) -> Self {
        assert!(!rows.is_empty(), "Bank::new: no embeddings");
        let d = rows[0].len();
        let mut unit = Vec::with_capacity(rows.len() * d);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(
                r.len(),
                d,
                "Bank::new: row {i} has length {} instead of {d}",
                r.len()
            );
            let norm = r
                .iter()
                .map(|&x| (x as f64) * (x as f64))
                .sum::<f64>()
                .sqrt();
            let inv = if norm > 0.0 { 1.0 / norm } else { 0.0 };
            unit.extend(r.iter().map(|&x| x as f64 * inv));
        }
        Self {
            n: rows.len(),
            d,
            unit,
        }
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the bank is empty (never, by construction).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Embedding dimension.
    pub fn dim(&self) -> usize {
        self.d
    }

    /// Unit embedding of image `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.unit[i * self.d..(i + 1) * self.d]
    }

    /// Cosine similarity of images `i` and `j`.
    pub fn cos(&self, i: usize, j: usize) -> f64 {
        dot(self.row(i), self.row(j))
    }

    /// The `k` nearest images to `i` by cosine, `i` excluded, most similar first (ties: lower
    /// index first).
    pub fn neighbours(&self, i: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<(f64, usize)> = (0..self.n)
            .filter(|&j| j != i)
            .map(|j| (self.cos(i, j), j))
            .collect();
        all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        all.into_iter().take(k).map(|(_, j)| j).collect()
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let (na, nb) = (dot(a, a).sqrt(), dot(b, b).sqrt());
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot(a, b) / (na * nb)
    }
}

/// How the kNN readout scores a candidate (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KnnScore {
    /// `|N_k(q) ∩ N_k(c)| / k`, ties by cosine.
    #[default]
    Shared,
    /// Cosine of kNN-smoothed embeddings.
    Mean,
}

/// How the local-PCA readout scores a candidate (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PcaScore {
    /// Cosine within the query's local principal subspace.
    #[default]
    ProjectedCosine,
    /// Minus the distance to the query within that subspace.
    ProjectedDistance,
}

impl std::str::FromStr for KnnScore {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "shared" => Ok(Self::Shared),
            "mean" => Ok(Self::Mean),
            o => Err(format!("unknown kNN score '{o}': expected shared or mean")),
        }
    }
}

impl std::str::FromStr for PcaScore {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "projected-cosine" => Ok(Self::ProjectedCosine),
            "projected-distance" => Ok(Self::ProjectedDistance),
            o => Err(format!(
                "unknown local-PCA score '{o}': expected projected-cosine or projected-distance"
            )),
        }
    }
}

/// A readout and its hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "readout", rename_all = "kebab-case")]
pub enum Readout {
    /// Cosine similarity.
    Cosine,
    /// k nearest neighbours (paper: k = 60).
    Knn {
        /// Neighbours per image.
        k: usize,
        /// Scoring rule.
        score: KnnScore,
    },
    /// Local PCA (paper: 32 components, 50 neighbours).
    LocalPca {
        /// Principal components kept.
        components: usize,
        /// Neighbours of the query the PCA is fitted on.
        neighbours: usize,
        /// Scoring rule.
        score: PcaScore,
    },
}

impl Readout {
    /// The paper's three readouts with the default scoring rules.
    pub fn paper() -> [Readout; 3] {
        [
            Readout::Cosine,
            Readout::Knn {
                k: 60,
                score: KnnScore::Shared,
            },
            Readout::LocalPca {
                components: 32,
                neighbours: 50,
                score: PcaScore::ProjectedCosine,
            },
        ]
    }

    /// Checks the hyper-parameters against a bank of `bank` images, naming the command-line
    /// flags (`--knn-k`, `--pca-neighbours`, `--pca-components`): neighbourhoods exclude the
    /// image itself, so at most `bank − 1` neighbours exist.
    ///
    /// # Errors
    /// A `k` or `components` of 0, fewer than 2 local-PCA neighbours, or a neighbourhood larger
    /// than the bank minus one.
    pub fn check(&self, bank: usize) -> Result<(), String> {
        let avail = bank.saturating_sub(1);
        match *self {
            Readout::Cosine => {}
            Readout::Knn { k, .. } => {
                if k == 0 || k > avail {
                    return Err(format!(
                        "--knn-k {k}: kNN needs 1 ≤ k ≤ {avail} (a bank of {bank} images, the query excluded)"
                    ));
                }
            }
            Readout::LocalPca {
                components,
                neighbours,
                ..
            } => {
                if neighbours < 2 || neighbours > avail {
                    return Err(format!(
                        "--pca-neighbours {neighbours}: local PCA needs 2 ≤ n ≤ {avail} (a bank of {bank} images, the query excluded)"
                    ));
                }
                if components == 0 {
                    return Err("--pca-components 0: local PCA needs at least 1 component".into());
                }
            }
        }
        Ok(())
    }

    /// Short name: `cosine`, `knn`, `local_pca`.
    pub fn name(&self) -> &'static str {
        match self {
            Readout::Cosine => "cosine",
            Readout::Knn { .. } => "knn",
            Readout::LocalPca { .. } => "local_pca",
        }
    }
}

/// The local principal subspace of one query.
#[derive(Debug, Clone)]
struct LocalBasis {
    mean: Vec<f64>,
    /// Orthonormal principal directions, each of length d.
    dirs: Vec<Vec<f64>>,
}

impl LocalBasis {
    fn fit(bank: &Bank, rows: &[usize], components: usize) -> Self {
        let d = bank.dim();
        let m = rows.len();
        let mut mean = vec![0f64; d];
        for &r in rows {
            for (a, b) in mean.iter_mut().zip(bank.row(r)) {
                *a += b / m as f64;
            }
        }
        let centred: Vec<Vec<f64>> = rows
            .iter()
            .map(|&r| {
                bank.row(r)
                    .iter()
                    .zip(&mean)
                    .map(|(x, mu)| x - mu)
                    .collect()
            })
            .collect();
        // Eigenvectors of the m×m Gram matrix give the principal directions of the d×d
        // covariance: v = Xᵀu / √λ (unit length since ‖Xᵀu‖² = λ).
        let gram = Mat::<f64>::from_fn(m, m, |i, j| dot(&centred[i], &centred[j]));
        let mut dirs = Vec::new();
        if let Ok(evd) = gram.self_adjoint_eigen(Side::Lower) {
            let s = evd.S();
            let u = evd.U();
            let lam: Vec<f64> = (0..m).map(|i| s[i]).collect();
            let top = lam.iter().copied().fold(0.0f64, f64::max);
            // Eigenvalues come in non-decreasing order: walk from the largest.
            for idx in (0..m).rev() {
                if dirs.len() == components || lam[idx] <= top * 1e-12 || lam[idx] <= 0.0 {
                    break;
                }
                let inv = 1.0 / lam[idx].sqrt();
                let mut v = vec![0f64; d];
                for (row, x) in centred.iter().enumerate() {
                    let w = u[(row, idx)] * inv;
                    for (a, b) in v.iter_mut().zip(x) {
                        *a += w * b;
                    }
                }
                dirs.push(v);
            }
        }
        Self { mean, dirs }
    }

    /// Coordinates of `x − μ` along the principal directions.
    fn coords(&self, x: &[f64]) -> Vec<f64> {
        let z: Vec<f64> = x.iter().zip(&self.mean).map(|(a, b)| a - b).collect();
        self.dirs.iter().map(|v| dot(v, &z)).collect()
    }
}

/// Scores candidates against queries for one [`Readout`] over one [`Bank`], caching what it
/// can (neighbour sets, smoothed embeddings, local bases).
pub struct Scorer<'a> {
    bank: &'a Bank,
    readout: Readout,
    knn: BTreeMap<usize, Vec<usize>>,
    smoothed: BTreeMap<usize, Vec<f64>>,
    bases: BTreeMap<usize, LocalBasis>,
}

impl<'a> Scorer<'a> {
    /// A scorer. Fails when a neighbourhood size does not fit the bank.
    ///
    /// # Errors
    /// As [`Readout::check`] for this bank.
    pub fn new(bank: &'a Bank, readout: Readout) -> Result<Self, String> {
        readout.check(bank.len())?;
        Ok(Self {
            bank,
            readout,
            knn: BTreeMap::new(),
            smoothed: BTreeMap::new(),
            bases: BTreeMap::new(),
        })
    }

    fn knn_of(&mut self, i: usize, k: usize) -> &Vec<usize> {
        let bank = self.bank;
        self.knn.entry(i).or_insert_with(|| bank.neighbours(i, k))
    }

    fn smoothed_of(&mut self, i: usize, k: usize) -> Vec<f64> {
        if let Some(v) = self.smoothed.get(&i) {
            return v.clone();
        }
        let nn = self.knn_of(i, k).clone();
        let mut v = self.bank.row(i).to_vec();
        for j in nn {
            for (a, b) in v.iter_mut().zip(self.bank.row(j)) {
                *a += b;
            }
        }
        self.smoothed.insert(i, v.clone());
        v
    }

    /// `(primary, tie-break)` score of bank image `candidate` for bank image `query`.
    pub fn score(&mut self, query: usize, candidate: usize) -> (f64, f64) {
        match self.readout {
            Readout::Cosine => (self.bank.cos(query, candidate), 0.0),
            Readout::Knn {
                k,
                score: KnnScore::Shared,
            } => {
                let a = self.knn_of(query, k).clone();
                let b = self.knn_of(candidate, k);
                let shared = a.iter().filter(|x| b.contains(x)).count();
                (shared as f64 / k as f64, self.bank.cos(query, candidate))
            }
            Readout::Knn {
                k,
                score: KnnScore::Mean,
            } => {
                let a = self.smoothed_of(query, k);
                let b = self.smoothed_of(candidate, k);
                (cosine(&a, &b), 0.0)
            }
            Readout::LocalPca {
                components,
                neighbours,
                score,
            } => {
                let bank = self.bank;
                let basis = self.bases.entry(query).or_insert_with(|| {
                    let nn = bank.neighbours(query, neighbours);
                    LocalBasis::fit(bank, &nn, components)
                });
                let c = basis.coords(bank.row(candidate));
                let q = basis.coords(bank.row(query));
                match score {
                    PcaScore::ProjectedCosine => (cosine(&q, &c), 0.0),
                    PcaScore::ProjectedDistance => (
                        -q.iter()
                            .zip(&c)
                            .map(|(a, b)| (a - b) * (a - b))
                            .sum::<f64>()
                            .sqrt(),
                        0.0,
                    ),
                }
            }
        }
    }
}

/// Index of the highest score, comparing `(primary, tie-break)` lexicographically; on a full
/// tie the earliest index wins. NaN scores never win.
pub fn pick(scores: &[(f64, f64)]) -> usize {
    let mut best = 0;
    for (i, s) in scores.iter().enumerate().skip(1) {
        let b = scores[best];
        let better = if b.0.is_nan() {
            !s.0.is_nan()
        } else {
            s.0 > b.0 || (s.0 == b.0 && s.1 > b.1)
        };
        if better {
            best = i;
        }
    }
    best
}

/// Outcome of one binding trial under one readout.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrialOutcome {
    /// Trial index.
    pub trial: usize,
    /// The four `(primary, tie-break)` scores in presentation order.
    pub scores: [(f64, f64); 4],
    /// Position of the chosen candidate.
    pub chosen: usize,
    /// What was chosen.
    pub chosen_kind: CandidateKind,
}

/// Binding accuracy and the choice distribution of one readout.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BindingResult {
    /// The readout.
    pub readout: Readout,
    /// Number of trials.
    pub trials: usize,
    /// Fraction of trials where the target won.
    pub accuracy: f64,
    /// Fraction of trials each candidate kind won (target, d1, d2, d3).
    pub chosen_fraction: BTreeMap<String, f64>,
    /// Per-trial outcomes.
    pub outcomes: Vec<TrialOutcome>,
}

/// Runs the binding trials; `bank` rows are indexed by scene id.
///
/// # Errors
/// As [`Scorer::new`].
pub fn evaluate_binding(
    bank: &Bank,
    trials: &[BindingTrial],
    readout: Readout,
) -> Result<BindingResult, String> {
    let mut scorer = Scorer::new(bank, readout)?;
    let mut outcomes = Vec::with_capacity(trials.len());
    let mut counts: BTreeMap<String, usize> = ["target", "d1", "d2", "d3"]
        .iter()
        .map(|k| (k.to_string(), 0))
        .collect();
    let mut correct = 0usize;
    for t in trials {
        let q = t.query.id();
        let scores = t.candidates.map(|c| scorer.score(q, c.id()));
        let chosen = pick(&scores);
        let kind = t.kinds[chosen];
        if kind == CandidateKind::Target {
            correct += 1;
        }
        *counts.get_mut(kind_name(kind)).expect("known kind") += 1;
        outcomes.push(TrialOutcome {
            trial: t.index,
            scores,
            chosen,
            chosen_kind: kind,
        });
    }
    let n = trials.len().max(1) as f64;
    Ok(BindingResult {
        readout,
        trials: trials.len(),
        accuracy: correct as f64 / n,
        chosen_fraction: counts.into_iter().map(|(k, v)| (k, v as f64 / n)).collect(),
        outcomes,
    })
}

/// `target`, `d1`, `d2`, `d3`.
pub fn kind_name(kind: CandidateKind) -> &'static str {
    match kind {
        CandidateKind::Target => "target",
        CandidateKind::D1 => "d1",
        CandidateKind::D2 => "d2",
        CandidateKind::D3 => "d3",
    }
}

/// numpy's default (`linear`) percentile of `values` at `p` ∈ [0, 100]: with the values sorted
/// ascending and `h = (n − 1)·p/100`, `v[⌊h⌋] + (h − ⌊h⌋)·(v[⌊h⌋+1] − v[⌊h⌋])`.
///
/// # Panics
/// On an empty slice.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    assert!(!values.is_empty(), "percentile of nothing");
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let h = (v.len() - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

/// Same/Different accuracy with the best threshold.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SameDiffResult {
    /// Number of pairs.
    pub pairs: usize,
    /// Accuracy at the best threshold.
    pub accuracy: f64,
    /// The percentile (0, 5, …, 100) of the distances that gave it (the lowest on ties).
    pub best_percentile: f64,
    /// The threshold: "same" iff cosine distance ≤ threshold.
    pub threshold: f64,
    /// `(percentile, threshold, accuracy)` for every candidate threshold.
    pub sweep: Vec<(f64, f64, f64)>,
    /// Mean cosine distance of the same pairs.
    pub mean_distance_same: f64,
    /// Mean cosine distance of the different pairs.
    pub mean_distance_different: f64,
    /// Cosine distance of every pair, in pair order.
    pub distances: Vec<f64>,
}

/// Same/Different from cosine distances `1 − cos(a, b)`: the candidate thresholds are the
/// percentiles 0, 5, …, 100 of the distances ([`percentile`]); a pair is called "same" iff its
/// distance ≤ threshold; the reported accuracy is the best over the 21 thresholds (the lowest
/// percentile on ties). `bank` rows are indexed by scene id.
pub fn evaluate_samediff(bank: &Bank, pairs: &[SameDiffPair]) -> SameDiffResult {
    let distances: Vec<f64> = pairs
        .iter()
        .map(|p| 1.0 - bank.cos(p.a.id(), p.b.id()))
        .collect();
    let same: Vec<bool> = pairs.iter().map(|p| p.kind.is_same()).collect();
    threshold_accuracy(&distances, &same)
}

/// The threshold rule of [`evaluate_samediff`] on given distances and labels.
///
/// # Panics
/// If the slices differ in length or are empty.
pub fn threshold_accuracy(distances: &[f64], same: &[bool]) -> SameDiffResult {
    assert_eq!(distances.len(), same.len(), "one label per distance");
    let n = distances.len();
    let mut sweep = Vec::with_capacity(21);
    let mut best = (f64::NEG_INFINITY, 0.0, 0.0);
    for step in 0..=20 {
        let p = step as f64 * 5.0;
        let t = percentile(distances, p);
        let correct = distances
            .iter()
            .zip(same)
            .filter(|(d, s)| (**d <= t) == **s)
            .count();
        let acc = correct as f64 / n as f64;
        sweep.push((p, t, acc));
        if acc > best.0 {
            best = (acc, p, t);
        }
    }
    let mean_of = |want: bool| {
        let v: Vec<f64> = distances
            .iter()
            .zip(same)
            .filter(|(_, s)| **s == want)
            .map(|(d, _)| *d)
            .collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    SameDiffResult {
        pairs: n,
        accuracy: best.0,
        best_percentile: best.1,
        threshold: best.2,
        sweep,
        mean_distance_same: mean_of(true),
        mean_distance_different: mean_of(false),
        distances: distances.to_vec(),
    }
}
