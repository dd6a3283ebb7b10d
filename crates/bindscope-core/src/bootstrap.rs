//! Percentile-bootstrap 95% intervals over items, computed as numpy computes them from the same
//! resample indices: each resample's mean is `scores[idx].mean()` (numpy's pairwise summation,
//! then one division), the interval is `np.percentile(means, [2.5, 97.5])` (numpy's default
//! `linear` method, its `_lerp` included). Given the indices, the bounds are numpy's to the bit;
//! `crates/bindscope-geb/tests/bootstrap_numpy.rs` checks it against numpy 2.4 on exported
//! indices.
//!
//! The indices come from the project's seeded streams ([`crate::rng::stream`], keyed by the
//! study's namespace, the seed, the kind of interval and the group): resample `b` is `n` draws of
//! `random_range(0..n)` (`rand` 0.9, uniform over `u32`) in order. [`Resampler::export`] writes
//! them (safetensors, `indices` `[B, n]` `U32`) so any other implementation can reuse them.

use crate::rng;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Resamples of a marginal interval (`--bootstrap`).
pub const MARGINAL_RESAMPLES: usize = 10_000;
/// Resamples of a paired-difference interval (`--paired-bootstrap`).
pub const PAIRED_RESAMPLES: usize = 20_000;
/// The interval's percentiles: a central 95% interval.
pub const PERCENTILES: [f64; 2] = [2.5, 97.5];

/// The bootstrap's part of a stream's key path, after the study's namespace.
const BOOTSTRAP: u64 = 1;

/// Which interval a resample stream serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One set of scores.
    Marginal,
    /// The difference of two score sets on the same items.
    Paired,
}

/// A 95% percentile interval, in the units of the scores (fractions in [0, 1] for a marginal
/// interval, differences in [−1, 1] for a paired one).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The 2.5th percentile.
    pub lo: f64,
    /// The 97.5th percentile.
    pub hi: f64,
}

/// `np.add.reduce` of a contiguous `float64` row: numpy's pairwise summation
/// (`numpy/_core/src/umath/loops_utils.h.src`, `pairwise_sum`): below 8 values a running sum
/// from 0; up to 128 values eight interleaved partial sums combined as
/// `((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))`, then the remainder added in order; above 128 the two
/// halves (the first a multiple of 8 long) summed recursively.
pub fn numpy_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0;
        for &x in a {
            res += x;
        }
        res
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let full = n - n % 8;
        let mut i = 8;
        while i < full {
            for j in 0..8 {
                r[j] += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &x in &a[full..] {
            res += x;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        numpy_sum(&a[..n2]) + numpy_sum(&a[n2..])
    }
}

/// `np.mean` of a contiguous row: [`numpy_sum`] divided by the count.
pub fn numpy_mean(a: &[f64]) -> f64 {
    numpy_sum(a) / a.len() as f64
}

/// `np.percentile(values, p)` with numpy's default `linear` method, `values` sorted ascending
/// and not empty: `q = p / 100`, virtual index `h = (n − 1)·q`, `g = h − ⌊h⌋`, and numpy's
/// `_lerp` — `a + (b − a)·g` for `g < 0.5`, `b − (b − a)·(1 − g)` otherwise; `h ≥ n − 1` gives
/// the last value.
///
/// # Panics
/// On an empty slice.
pub fn numpy_percentile(sorted: &[f64], p: f64) -> f64 {
    assert!(!sorted.is_empty(), "percentile of nothing");
    let n = sorted.len();
    let q = p / 100.0;
    let h = (n - 1) as f64 * q;
    if h >= (n - 1) as f64 {
        return sorted[n - 1];
    }
    if h < 0.0 {
        return sorted[0];
    }
    let lo = h.floor();
    let g = h - lo;
    let (a, b) = (sorted[lo as usize], sorted[lo as usize + 1]);
    let d = b - a;
    if g >= 0.5 {
        b - d * (1.0 - g)
    } else {
        a + d * g
    }
}

/// The interval of `stats` (the resample statistics, any order).
fn interval(mut stats: Vec<f64>) -> Interval {
    stats.sort_by(f64::total_cmp);
    Interval {
        lo: numpy_percentile(&stats, PERCENTILES[0]),
        hi: numpy_percentile(&stats, PERCENTILES[1]),
    }
}

/// The resample indices of one interval: `resamples` rows of `n` item indices.
pub struct Resampler {
    rng: rand_chacha::ChaCha8Rng,
    n: usize,
    resamples: usize,
}

impl Resampler {
    /// The resampler of the group `group` (a caller-chosen stable number) for an interval of
    /// `kind` over `n ≥ 1` items, in the stream namespace of a study (`namespace`, e.g. the
    /// study's name as bytes; streams of different studies never coincide).
    ///
    /// # Panics
    /// When `n` is 0 or exceeds `u32::MAX`.
    pub fn new(
        namespace: u64,
        seed: u64,
        kind: Kind,
        group: u64,
        n: usize,
        resamples: usize,
    ) -> Self {
        assert!(
            n > 0 && u32::try_from(n).is_ok(),
            "bootstrap over {n} items"
        );
        let kind = match kind {
            Kind::Marginal => 0,
            Kind::Paired => 1,
        };
        Self {
            rng: rng::stream(seed, &[namespace, BOOTSTRAP, kind, group]),
            n,
            resamples,
        }
    }

    /// Fills `row` with the next resample's indices.
    fn next_row(&mut self, row: &mut [u32]) {
        let n = self.n as u32;
        for r in row.iter_mut() {
            *r = self.rng.random_range(0..n);
        }
    }

    /// Every row, in order, as one `[resamples · n]` buffer.
    pub fn all(mut self) -> Vec<u32> {
        let mut out = vec![0u32; self.resamples * self.n];
        for row in out.chunks_exact_mut(self.n) {
            self.next_row(row);
        }
        out
    }

    /// Writes every row to `path` as safetensors (`indices`: `U32` `[resamples, n]`).
    ///
    /// # Errors
    /// A message naming the file.
    pub fn export(self, path: &std::path::Path) -> Result<(), String> {
        let (b, n) = (self.resamples, self.n);
        let idx = self.all();
        let bytes: Vec<u8> = idx.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::U32, vec![b, n], &bytes)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        let data = safetensors::serialize([("indices", view)], None)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        crate::fsutil::write_atomic(path, &data)
            .map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// The marginal interval of `scores` (one per item, `n` of them).
    ///
    /// # Panics
    /// When `scores.len()` is not the resampler's `n`.
    pub fn marginal(mut self, scores: &[f64]) -> Interval {
        assert_eq!(scores.len(), self.n);
        let mut row = vec![0u32; self.n];
        let mut picked = vec![0f64; self.n];
        let mut stats = Vec::with_capacity(self.resamples);
        for _ in 0..self.resamples {
            self.next_row(&mut row);
            for (p, &i) in picked.iter_mut().zip(&row) {
                *p = scores[i as usize];
            }
            stats.push(numpy_mean(&picked));
        }
        interval(stats)
    }

    /// The interval of `mean(a) − mean(b)` over the same resampled items
    /// (`a[idx].mean() − b[idx].mean()` per resample).
    ///
    /// # Panics
    /// When the lengths are not the resampler's `n`.
    pub fn paired(mut self, a: &[f64], b: &[f64]) -> Interval {
        assert_eq!(a.len(), self.n);
        assert_eq!(b.len(), self.n);
        let mut row = vec![0u32; self.n];
        let (mut pa, mut pb) = (vec![0f64; self.n], vec![0f64; self.n]);
        let mut stats = Vec::with_capacity(self.resamples);
        for _ in 0..self.resamples {
            self.next_row(&mut row);
            for ((x, y), &i) in pa.iter_mut().zip(pb.iter_mut()).zip(&row) {
                *x = a[i as usize];
                *y = b[i as usize];
            }
            stats.push(numpy_mean(&pa) - numpy_mean(&pb));
        }
        interval(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_follows_numpys_lerp() {
        let v = [0.0, 1.0, 2.0, 3.0];
        assert_eq!(numpy_percentile(&v, 50.0), 1.5);
        assert_eq!(numpy_percentile(&v, 100.0), 3.0);
        assert_eq!(numpy_percentile(&v, 0.0), 0.0);
        assert_eq!(numpy_percentile(&[7.0], 2.5), 7.0);
    }

    #[test]
    fn same_seed_same_bits() {
        let s: Vec<f64> = (0..37).map(|i| f64::from(i % 3) / 2.0).collect();
        let a = Resampler::new(7, 1, Kind::Marginal, 0, s.len(), 500).marginal(&s);
        let b = Resampler::new(7, 1, Kind::Marginal, 0, s.len(), 500).marginal(&s);
        assert_eq!(a, b);
        let c = Resampler::new(7, 2, Kind::Marginal, 0, s.len(), 500).marginal(&s);
        assert_ne!(a, c);
    }
}
