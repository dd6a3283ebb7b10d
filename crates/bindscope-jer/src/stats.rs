//! Summary statistics over probe images and seeds.

use statrs::distribution::{ContinuousCDF, StudentsT};

/// Mean, sample standard deviation (n − 1), Student-t 95% confidence interval of the mean and
/// coefficient of variation of a set of per-image values.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (ddof = 1); 0 for n = 1.
    pub std: f64,
    /// Lower end of the 95% CI of the mean (mean − t₀.₉₇₅,ₙ₋₁ · std/√n).
    pub ci95_low: f64,
    /// Upper end of the 95% CI of the mean.
    pub ci95_high: f64,
    /// Coefficient of variation std / mean.
    pub cv: f64,
    /// Standard error std / √n.
    pub sem: f64,
}

/// Summarizes `values`.
///
/// # Panics
/// Never for n ≥ 1; n = 0 gives NaN fields.
pub fn summarize(values: &[f64]) -> Summary {
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n as f64;
    let std = if n > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    let sem = std / (n as f64).sqrt();
    let t = if n > 1 {
        StudentsT::new(0.0, 1.0, (n - 1) as f64)
            .map(|d| d.inverse_cdf(0.975))
            .unwrap_or(f64::NAN)
    } else {
        f64::NAN
    };
    Summary {
        n,
        mean,
        std,
        ci95_low: mean - t * sem,
        ci95_high: mean + t * sem,
        cv: std / mean,
        sem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_scipy() {
        // Values from scipy 1.17.1: x = [1, 2, 3, 4, 10]; x.std(ddof=1) = 3.5355339059327378,
        // stats.t.ppf(0.975, 4) = 2.7764451051977934 → CI half-width 4.389969...
        let s = summarize(&[1.0, 2.0, 3.0, 4.0, 10.0]);
        assert!((s.mean - 4.0).abs() < 1e-12);
        assert!((s.std - 3.5355339059327378).abs() < 1e-12);
        let half = 2.7764451051977934 * 3.5355339059327378 / 5f64.sqrt();
        assert!((s.ci95_high - (4.0 + half)).abs() < 1e-9, "{s:?}");
        assert!((s.cv - 3.5355339059327378 / 4.0).abs() < 1e-12);
    }
}
