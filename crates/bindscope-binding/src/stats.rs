//! Correlation statistics across models (paper Table 2): Pearson correlation with a two-sided
//! p-value, partial correlation controlling for covariates, OLS with in-sample and
//! leave-one-out R², and a leave-one-out jackknife of significance.
//!
//! Definitions (all checked against scipy / numpy in `tests/binding_stats.rs` on a committed
//! table):
//! - **Pearson**: `r = Σ(x−x̄)(y−ȳ) / √(Σ(x−x̄)² Σ(y−ȳ)²)`; two-sided p from Student's t with
//!   `n − 2` degrees of freedom, `t = r √((n−2)/(1−r²))`, `p = 2·F_t(−|t|)` (equal to
//!   `scipy.stats.pearsonr`'s exact beta-distribution p). `|r| = 1` gives `p = 0`.
//! - **Partial correlation** of x and y given covariates `Z` (here: embedding dimension and
//!   parameter count): the Pearson r of the residuals of x and of y after an OLS fit on
//!   `[1, Z]`; p from Student's t with `n − 2 − |Z|` degrees of freedom (the convention of
//!   pingouin's `partial_corr`).
//! - **OLS** of y on `[1, X]` by QR least squares (faer); in-sample `R² = 1 − SS_res/SS_tot`;
//!   **leave-one-out CV R²** `= 1 − Σ(y_i − ŷ_(−i))² / Σ(y_i − ȳ)²`, where `ŷ_(−i)` is the
//!   prediction for model `i` of the fit on the other `n − 1` models and `ȳ` the mean over all
//!   `n` (what `r2_score(y, cross_val_predict(LinearRegression(), X, y, cv=LeaveOneOut()))`
//!   gives).
//! - **Jackknife**: for each of the `n` leave-one-out subsets, the Pearson p-value on the
//!   remaining `n − 1` models; reported is how many stay below α = 0.05, and the range of r.
//!
//! p-values use statrs' Student-t distribution.

use faer::Mat;
use faer::prelude::SolveLstsq;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// A correlation coefficient with its two-sided p-value.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Corr {
    /// Number of observations.
    pub n: usize,
    /// The coefficient.
    pub r: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// Degrees of freedom of the t test.
    pub df: f64,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Two-sided p-value of a correlation `r` with `df` degrees of freedom.
pub fn corr_p_value(r: f64, df: f64) -> f64 {
    if df.is_nan() || df <= 0.0 || r.is_nan() {
        return f64::NAN;
    }
    if r.abs() >= 1.0 {
        return 0.0;
    }
    let t = r * (df / (1.0 - r * r)).sqrt();
    match StudentsT::new(0.0, 1.0, df) {
        Ok(dist) => (2.0 * dist.cdf(-t.abs())).min(1.0),
        Err(_) => f64::NAN,
    }
}

/// Pearson correlation coefficient alone (NaN when a variable is constant).
pub fn pearson_r(x: &[f64], y: &[f64]) -> f64 {
    assert_eq!(x.len(), y.len(), "pearson: x and y differ in length");
    let (mx, my) = (mean(x), mean(y));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        let (dx, dy) = (a - mx, b - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    let r = sxy / (sxx * syy).sqrt();
    r.clamp(-1.0, 1.0)
}

/// Pearson r and two-sided p (`n − 2` degrees of freedom).
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn pearson(x: &[f64], y: &[f64]) -> Corr {
    let n = x.len();
    let r = if n >= 2 { pearson_r(x, y) } else { f64::NAN };
    let df = n as f64 - 2.0;
    Corr {
        n,
        r,
        p: corr_p_value(r, df),
        df,
    }
}

/// Least-squares fit of `y` on `[1, columns…]`: coefficients `[intercept, b_1, …]`.
///
/// Columns are centred and scaled before the QR solve (for conditioning: parameter counts are
/// ~1e8), and the coefficients are mapped back to the original scale.
///
/// # Panics
/// If lengths differ or there are fewer observations than coefficients.
pub fn lstsq(columns: &[&[f64]], y: &[f64]) -> Vec<f64> {
    let n = y.len();
    let p = columns.len();
    assert!(
        columns.iter().all(|c| c.len() == n),
        "lstsq: columns and y differ in length"
    );
    assert!(n > p, "lstsq: {n} observations for {} coefficients", p + 1);
    let centre: Vec<f64> = columns.iter().map(|c| mean(c)).collect();
    let scale: Vec<f64> = columns
        .iter()
        .zip(&centre)
        .map(|(c, m)| {
            let s = (c.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n as f64).sqrt();
            if s > 0.0 { s } else { 1.0 }
        })
        .collect();
    let a = Mat::<f64>::from_fn(n, p + 1, |i, j| {
        if j == 0 {
            1.0
        } else {
            (columns[j - 1][i] - centre[j - 1]) / scale[j - 1]
        }
    });
    let b = Mat::<f64>::from_fn(n, 1, |i, _| y[i]);
    let sol = a.qr().solve_lstsq(&b);
    let mut coef = vec![0f64; p + 1];
    coef[0] = sol[(0, 0)];
    for j in 0..p {
        coef[j + 1] = sol[(j + 1, 0)] / scale[j];
        coef[0] -= coef[j + 1] * centre[j];
    }
    coef
}

/// Predictions `[1, columns] · coef` for every row.
pub fn predict(columns: &[&[f64]], coef: &[f64]) -> Vec<f64> {
    let n = columns.first().map_or(0, |c| c.len());
    (0..n)
        .map(|i| {
            coef[0]
                + columns
                    .iter()
                    .enumerate()
                    .map(|(j, c)| coef[j + 1] * c[i])
                    .sum::<f64>()
        })
        .collect()
}

/// Residuals of `y` after an OLS fit on `[1, columns]`.
pub fn residualize(y: &[f64], columns: &[&[f64]]) -> Vec<f64> {
    let coef = lstsq(columns, y);
    y.iter()
        .zip(predict(columns, &coef))
        .map(|(a, b)| a - b)
        .collect()
}

/// Partial correlation of `x` and `y` given `covariates` (see the module docs).
pub fn partial_correlation(x: &[f64], y: &[f64], covariates: &[&[f64]]) -> Corr {
    let n = x.len();
    let k = covariates.len();
    if n < k + 3 {
        return Corr {
            n,
            r: f64::NAN,
            p: f64::NAN,
            df: n as f64 - 2.0 - k as f64,
        };
    }
    let rx = residualize(x, covariates);
    let ry = residualize(y, covariates);
    let r = pearson_r(&rx, &ry);
    let df = n as f64 - 2.0 - k as f64;
    Corr {
        n,
        r,
        p: corr_p_value(r, df),
        df,
    }
}

/// An OLS regression with in-sample and leave-one-out R².
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Regression {
    /// Number of observations.
    pub n: usize,
    /// `[intercept, b_1, …]`.
    pub coef: Vec<f64>,
    /// In-sample `1 − SS_res/SS_tot`.
    pub r2: f64,
    /// Leave-one-out cross-validated R².
    pub loo_r2: f64,
    /// Leave-one-out predictions, in row order.
    pub loo_predictions: Vec<f64>,
}

/// OLS of `y` on `[1, columns]` with in-sample and leave-one-out R².
///
/// # Panics
/// If there are fewer than `columns.len() + 2` observations (a leave-one-out fit would be
/// under-determined).
pub fn ols(columns: &[&[f64]], y: &[f64]) -> Regression {
    let n = y.len();
    assert!(
        n >= columns.len() + 2,
        "ols: {n} observations are too few for {} predictors with leave-one-out",
        columns.len()
    );
    let coef = lstsq(columns, y);
    let fit = predict(columns, &coef);
    let my = mean(y);
    let ss_tot: f64 = y.iter().map(|v| (v - my) * (v - my)).sum();
    let ss_res: f64 = y.iter().zip(&fit).map(|(a, b)| (a - b) * (a - b)).sum();
    let mut loo = Vec::with_capacity(n);
    for i in 0..n {
        let keep: Vec<usize> = (0..n).filter(|&j| j != i).collect();
        let cols: Vec<Vec<f64>> = columns
            .iter()
            .map(|c| keep.iter().map(|&j| c[j]).collect())
            .collect();
        let col_refs: Vec<&[f64]> = cols.iter().map(|c| c.as_slice()).collect();
        let yy: Vec<f64> = keep.iter().map(|&j| y[j]).collect();
        let b = lstsq(&col_refs, &yy);
        loo.push(
            b[0] + columns
                .iter()
                .enumerate()
                .map(|(j, c)| b[j + 1] * c[i])
                .sum::<f64>(),
        );
    }
    let press: f64 = y.iter().zip(&loo).map(|(a, b)| (a - b) * (a - b)).sum();
    Regression {
        n,
        coef,
        r2: 1.0 - ss_res / ss_tot,
        loo_r2: 1.0 - press / ss_tot,
        loo_predictions: loo,
    }
}

/// Leave-one-out jackknife of a Pearson correlation.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Jackknife {
    /// Number of leave-one-out subsets (`n`).
    pub subsets: usize,
    /// How many of them keep `p < alpha`.
    pub significant: usize,
    /// The threshold.
    pub alpha: f64,
    /// Smallest r over the subsets.
    pub r_min: f64,
    /// Largest r over the subsets.
    pub r_max: f64,
    /// Largest p over the subsets.
    pub p_max: f64,
}

/// Drops each observation in turn and recomputes the Pearson correlation.
pub fn jackknife(x: &[f64], y: &[f64], alpha: f64) -> Jackknife {
    let n = x.len();
    let (mut sig, mut r_min, mut r_max, mut p_max) =
        (0, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY);
    for i in 0..n {
        let xs: Vec<f64> = (0..n).filter(|&j| j != i).map(|j| x[j]).collect();
        let ys: Vec<f64> = (0..n).filter(|&j| j != i).map(|j| y[j]).collect();
        let c = pearson(&xs, &ys);
        if c.p < alpha {
            sig += 1;
        }
        r_min = r_min.min(c.r);
        r_max = r_max.max(c.r);
        p_max = p_max.max(c.p);
    }
    Jackknife {
        subsets: n,
        significant: sig,
        alpha,
        r_min,
        r_max,
        p_max,
    }
}

/// One metric's row of the correlation table.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MetricCorrelation {
    /// The metric.
    pub metric: String,
    /// Pearson correlation with the target.
    pub pearson: Corr,
    /// Partial correlation given the covariates (None when there are too few models).
    pub partial: Option<Corr>,
    /// Leave-one-out jackknife of the Pearson correlation.
    pub jackknife: Jackknife,
}

/// Pearson, partial correlation (given `covariates`) and jackknife of `x` vs `y`.
pub fn correlate(metric: &str, x: &[f64], y: &[f64], covariates: &[&[f64]]) -> MetricCorrelation {
    let partial = (x.len() >= covariates.len() + 3).then(|| partial_correlation(x, y, covariates));
    MetricCorrelation {
        metric: metric.to_string(),
        pearson: pearson(x, y),
        partial,
        jackknife: jackknife(x, y, 0.05),
    }
}
