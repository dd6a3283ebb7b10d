//! The linear mixed-effects model of COOCO's output–scene analysis (§6): random intercepts for
//! the scene label, fitted by restricted maximum likelihood (REML), as statsmodels `MixedLM`
//! (`fit(reml=True)`) and lme4 fit it.
//!
//! `y = Xβ + Z u + ε`, `u ~ N(0, σ_u² I)` one intercept per group, `ε ~ N(0, σ² I)`. With
//! `γ = σ_u² / σ²` each group's covariance is `σ² (I + γ 11ᵀ)`, whose inverse and determinant
//! are closed-form, so the REML log-likelihood profiled over `β` and `σ²`,
//!
//! `ℓ_R(γ) = −½ [(N − p)(log(2π σ̂²) + 1) + Σ_g log(1 + n_g γ) + log |Xᵀ V⁻¹ X|]`,
//! `σ̂² = rᵀ V⁻¹ r / (N − p)`,
//!
//! is maximised over `γ ≥ 0` alone (a coarse scan of `√γ`, then golden-section search), and
//! `β̂ = (Xᵀ V⁻¹ X)⁻¹ Xᵀ V⁻¹ y` (generalised least squares). Standard errors are statsmodels':
//! from the inverse of the negative Hessian of its profiled REML log-likelihood in `(β, γ)`,
//! cross terms included (with balanced groups they equal lme4's `√diag(σ̂² (Xᵀ V⁻¹ X)⁻¹)`;
//! with unbalanced ones they differ slightly); the `z` statistics are `β̂ / SE` with normal
//! two-sided p-values, as statsmodels reports them. No maintained Rust crate fits mixed models today, hence this
//! module; the small `p × p` systems go through faer's Cholesky factorisation.
//!
//! R² (Nakagawa & Schielzeth 2013, eq. 26 and 29): the fixed-effect variance `σ_f²` is the
//! sample variance (n − 1) of `Xβ̂`; marginal `σ_f² / (σ_f² + σ_u² + σ²)`, conditional
//! `(σ_f² + σ_u²) / (σ_f² + σ_u² + σ²)`.

use crate::CoocoError;
use faer::Side;
use faer::linalg::solvers::DenseSolveCore;
use faer::prelude::*;
use serde::Serialize;

/// A fixed-effects design: column names and the rows of `X`.
#[derive(Debug, Clone, PartialEq)]
pub struct Design {
    /// Column names (patsy's spelling for the study's model).
    pub names: Vec<String>,
    /// `N` rows of `p` values.
    pub rows: Vec<Vec<f64>>,
}

/// A fitted random-intercept model.
#[derive(Debug, Clone, Serialize)]
pub struct MixedLmFit {
    /// The fixed effects' names.
    pub names: Vec<String>,
    /// `β̂`.
    pub coef: Vec<f64>,
    /// Their standard errors.
    pub se: Vec<f64>,
    /// `β̂ / SE` (statsmodels' `tvalues`, normal reference).
    pub z: Vec<f64>,
    /// Two-sided normal p-values.
    pub p: Vec<f64>,
    /// `σ_u²`: the variance of the group intercepts.
    pub group_var: f64,
    /// `σ²`: the residual variance.
    pub residual_var: f64,
    /// The REML log-likelihood at the optimum.
    pub reml_loglik: f64,
    /// Nakagawa's marginal R².
    pub r2_marginal: f64,
    /// Nakagawa's conditional R².
    pub r2_conditional: f64,
    /// Observations.
    pub n_obs: usize,
    /// Groups.
    pub n_groups: usize,
}

/// Per-group sums that the likelihood needs for any `γ`.
struct GroupSums {
    n: f64,
    sx: Vec<f64>,
    sy: f64,
}

/// Centres and scales `x` by its mean and sample standard deviation (R's `scale()`).
///
/// # Errors
/// [`CoocoError::Invalid`] for fewer than two values or a constant column.
pub fn scale_center(x: &[f64]) -> Result<Vec<f64>, CoocoError> {
    let n = x.len() as f64;
    if x.len() < 2 {
        return Err(CoocoError::Invalid(
            "cannot scale fewer than two values".into(),
        ));
    }
    let mean = x.iter().sum::<f64>() / n;
    let sd = (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    if sd == 0.0 {
        return Err(CoocoError::Invalid(
            "the noise level is constant: nothing to scale (the model needs several levels)".into(),
        ));
    }
    Ok(x.iter().map(|v| (v - mean) / sd).collect())
}

/// The study's design, `level_z * C(area, Treatment("all"))`: intercept, one treatment dummy per
/// area other than `all` (in sorted order), `level_z`, and its interaction with each dummy,
/// named as patsy names them.
///
/// # Errors
/// [`CoocoError::Invalid`] when the lengths differ, `all` is missing, or the level is constant.
pub fn study_design(levels: &[f64], areas: &[String]) -> Result<Design, CoocoError> {
    if levels.len() != areas.len() {
        return Err(CoocoError::Invalid(
            "levels and areas differ in length".into(),
        ));
    }
    let mut others: Vec<&str> = areas.iter().map(String::as_str).collect();
    others.sort_unstable();
    others.dedup();
    if !others.contains(&"all") {
        return Err(CoocoError::Invalid(
            "no row with area \"all\": the reference level of the area contrast".into(),
        ));
    }
    others.retain(|a| *a != "all");
    let z = scale_center(levels)?;
    let dummy = |a: &str| format!("C(area, Treatment(\"all\"))[T.{a}]");
    let mut names = vec!["Intercept".to_string()];
    names.extend(others.iter().map(|a| dummy(a)));
    names.push("level_z".into());
    names.extend(others.iter().map(|a| format!("level_z:{}", dummy(a))));
    let rows = areas
        .iter()
        .zip(&z)
        .map(|(a, &zi)| {
            let d: Vec<f64> = others.iter().map(|o| (a == o) as u8 as f64).collect();
            let mut r = vec![1.0];
            r.extend(&d);
            r.push(zi);
            r.extend(d.iter().map(|v| v * zi));
            r
        })
        .collect();
    Ok(Design { names, rows })
}

struct Profile {
    loglik: f64,
    beta: Vec<f64>,
    sigma2: f64,
    /// `Xᵀ V⁻¹ X` with `V` in units of `σ²`.
    xtvx: Mat<f64>,
    /// Its inverse.
    cov_unscaled: Mat<f64>,
}

/// statsmodels' covariance of the fixed effects: the inverse of the negative Hessian of its
/// profiled REML log-likelihood in `(β, γ)` (`MixedLM.hessian`, random intercept: `dV/dγ =
/// 11ᵀ`), cross terms included, so that the standard errors are statsmodels' also when the
/// groups are unbalanced (where they differ from lme4's `σ̂² (Xᵀ V⁻¹ X)⁻¹`).
fn statsmodels_cov(sums: &[GroupSums], fit: &Profile, gamma: f64, dof: f64) -> Mat<f64> {
    let p = fit.beta.len();
    // Q = rᵀ V⁻¹ r.
    let a_inv = &fit.cov_unscaled;
    let q = fit.sigma2 * dof;
    let mut h = vec![0.0; p];
    let (mut b, mut d, mut hre) = (0.0, 0.0, 0.0);
    let mut xtax = Mat::<f64>::zeros(p, p);
    let mut f = Mat::<f64>::zeros(p, p);
    for g in sums {
        let k = 1.0 / (1.0 + g.n * gamma);
        let c = g.n * k;
        let r_sum = g.sy - g.sx.iter().zip(&fit.beta).map(|(x, b)| x * b).sum::<f64>();
        let sg = r_sum * k;
        let a: Vec<f64> = g.sx.iter().map(|x| x * k).collect();
        for i in 0..p {
            h[i] += a[i] * sg;
            for j in 0..p {
                xtax[(i, j)] += a[i] * a[j];
                f[(i, j)] += 2.0 * c * a[i] * a[j];
            }
        }
        b += sg * sg;
        d += 2.0 * c * sg * sg;
        hre += c * c / 2.0;
    }
    let a = &fit.xtvx;
    let ql = a_inv * &xtax;
    let ainv_f = a_inv * &f;
    let (mut tr_qq, mut tr_af) = (0.0, 0.0);
    for i in 0..p {
        tr_af += ainv_f[(i, i)];
        for j in 0..p {
            tr_qq += ql[(i, j)] * ql[(j, i)];
        }
    }
    let h_rr = hre - 0.5 * dof * (d / q - b * b / (q * q)) + 0.5 * (tr_qq - tr_af);
    let mut neg = Mat::<f64>::zeros(p + 1, p + 1);
    for i in 0..p {
        for j in 0..p {
            neg[(i, j)] = dof * a[(i, j)] / q;
        }
        neg[(i, p)] = dof * h[i] / q;
        neg[(p, i)] = dof * h[i] / q;
    }
    neg[(p, p)] = -h_rr;
    neg.partial_piv_lu().inverse()
}

/// Fits `y ~ X + (1 | group)` by REML (see the [module docs](self)).
///
/// # Errors
/// [`CoocoError::Invalid`] for mismatched lengths, no more observations than fixed effects,
/// a single group, non-finite values, or a rank-deficient design.
pub fn fit_random_intercept(
    y: &[f64],
    design: &Design,
    groups: &[String],
) -> Result<MixedLmFit, CoocoError> {
    let n = y.len();
    let p = design.names.len();
    if design.rows.len() != n || groups.len() != n {
        return Err(CoocoError::Invalid(format!(
            "{n} outcomes, {} design rows, {} group labels: they must match",
            design.rows.len(),
            groups.len()
        )));
    }
    if let Some(i) = design.rows.iter().position(|r| r.len() != p) {
        return Err(CoocoError::Invalid(format!(
            "design row {i} has the wrong width"
        )));
    }
    if n <= p {
        return Err(CoocoError::Invalid(format!(
            "{n} observations for {p} fixed effects: REML needs more"
        )));
    }
    if y.iter()
        .chain(design.rows.iter().flatten())
        .any(|v| !v.is_finite())
    {
        return Err(CoocoError::Invalid(
            "non-finite outcome or design value".into(),
        ));
    }
    let mut labels: Vec<&str> = groups.iter().map(String::as_str).collect();
    labels.sort_unstable();
    labels.dedup();
    if labels.len() < 2 {
        return Err(CoocoError::Invalid(format!(
            "{} group(s): a random intercept needs at least two",
            labels.len()
        )));
    }
    // Whole-sample cross products and per-group sums.
    let mut xtx = Mat::<f64>::zeros(p, p);
    let mut xty = vec![0.0; p];
    let mut yty = 0.0;
    let mut sums: Vec<GroupSums> = labels
        .iter()
        .map(|_| GroupSums {
            n: 0.0,
            sx: vec![0.0; p],
            sy: 0.0,
        })
        .collect();
    for ((row, &yi), g) in design.rows.iter().zip(y).zip(groups) {
        let gi = labels.binary_search(&g.as_str()).expect("a known label");
        let s = &mut sums[gi];
        s.n += 1.0;
        s.sy += yi;
        for a in 0..p {
            s.sx[a] += row[a];
            xty[a] += row[a] * yi;
            for b in 0..p {
                xtx[(a, b)] += row[a] * row[b];
            }
        }
        yty += yi * yi;
    }
    let dof = (n - p) as f64;
    let profile = |gamma: f64| -> Option<Profile> {
        let mut a = xtx.clone();
        let mut b = xty.clone();
        let mut c = yty;
        let mut logdet_v = 0.0;
        for s in &sums {
            let w = gamma / (1.0 + s.n * gamma);
            logdet_v += (1.0 + s.n * gamma).ln();
            for i in 0..p {
                b[i] -= w * s.sx[i] * s.sy;
                for j in 0..p {
                    a[(i, j)] -= w * s.sx[i] * s.sx[j];
                }
            }
            c -= w * s.sy * s.sy;
        }
        let llt = a.llt(Side::Lower).ok()?;
        let rhs = Mat::from_fn(p, 1, |i, _| b[i]);
        let beta_m = llt.solve(&rhs);
        let beta: Vec<f64> = (0..p).map(|i| beta_m[(i, 0)]).collect();
        let q = c - beta.iter().zip(&b).map(|(x, y)| x * y).sum::<f64>();
        if q <= 0.0 {
            return None;
        }
        let l = llt.L();
        let logdet_a: f64 = (0..p).map(|i| 2.0 * l[(i, i)].ln()).sum();
        let sigma2 = q / dof;
        let loglik =
            -0.5 * (dof * ((2.0 * std::f64::consts::PI * sigma2).ln() + 1.0) + logdet_v + logdet_a);
        Some(Profile {
            loglik,
            beta,
            sigma2,
            cov_unscaled: llt.inverse(),
            xtvx: a,
        })
    };
    let ll = |s: f64| profile(s * s).map_or(f64::NEG_INFINITY, |p| p.loglik);
    if !ll(0.0).is_finite() {
        return Err(CoocoError::Invalid(
            "the design is rank-deficient (a column is constant or repeats another) or the \
             outcome is fitted exactly"
                .into(),
        ));
    }
    // Scan √γ on a log grid (and 0), then golden-section search around the best point.
    let mut grid = vec![0.0];
    grid.extend((0..=80).map(|k| 10f64.powf(-4.0 + k as f64 * 0.1)));
    let (mut best, mut best_ll) = (0, ll(0.0));
    for (i, &s) in grid.iter().enumerate().skip(1) {
        let v = ll(s);
        if v > best_ll {
            (best, best_ll) = (i, v);
        }
    }
    let (mut lo, mut hi) = (
        grid[best.saturating_sub(1)],
        grid[(best + 1).min(grid.len() - 1)],
    );
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    let (mut x1, mut x2) = (hi - phi * (hi - lo), lo + phi * (hi - lo));
    let (mut f1, mut f2) = (ll(x1), ll(x2));
    for _ in 0..200 {
        if hi - lo <= 1e-14 * hi.max(1e-300) {
            break;
        }
        if f1 < f2 {
            lo = x1;
            (x1, f1) = (x2, f2);
            x2 = lo + phi * (hi - lo);
            f2 = ll(x2);
        } else {
            hi = x2;
            (x2, f2) = (x1, f1);
            x1 = hi - phi * (hi - lo);
            f1 = ll(x1);
        }
    }
    let mut s_opt = 0.5 * (lo + hi);
    if best_ll > ll(s_opt) {
        s_opt = grid[best];
    }
    let gamma = s_opt * s_opt;
    let fit = profile(gamma).expect("the optimum is finite");
    let cov = statsmodels_cov(&sums, &fit, gamma, dof);
    let se: Vec<f64> = (0..p).map(|i| cov[(i, i)].sqrt()).collect();
    let z: Vec<f64> = fit.beta.iter().zip(&se).map(|(b, s)| b / s).collect();
    let pv: Vec<f64> = z
        .iter()
        .map(|z| statrs::function::erf::erfc(z.abs() / std::f64::consts::SQRT_2))
        .collect();
    let fitted: Vec<f64> = design
        .rows
        .iter()
        .map(|r| r.iter().zip(&fit.beta).map(|(x, b)| x * b).sum())
        .collect();
    let mean = fitted.iter().sum::<f64>() / n as f64;
    let var_f = fitted.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0);
    let var_u = s_opt * s_opt * fit.sigma2;
    let total = var_f + var_u + fit.sigma2;
    Ok(MixedLmFit {
        names: design.names.clone(),
        coef: fit.beta,
        se,
        z,
        p: pv,
        group_var: var_u,
        residual_var: fit.sigma2,
        reml_loglik: fit.loglik,
        r2_marginal: var_f / total,
        r2_conditional: (var_f + var_u) / total,
        n_obs: n,
        n_groups: labels.len(),
    })
}

/// Reads `scene`, `area`, `level` and `sim_scene` from every line of a JSONL file (the
/// `items.jsonl` of `cooco score` when the predictions carried `area` and `level`), fits the
/// study's model and writes `OUT/lme.json` (the fit) and `OUT/lme.csv` (term, coef, se, z, p).
///
/// # Errors
/// [`CoocoError::Invalid`] naming the line and field that is missing or of the wrong type;
/// as [`study_design`] and [`fit_random_intercept`].
pub fn run_lme(items: &std::path::Path, out: &std::path::Path) -> Result<MixedLmFit, CoocoError> {
    let text = std::fs::read_to_string(items).map_err(|source| CoocoError::Io {
        path: items.to_path_buf(),
        source,
    })?;
    let (mut scenes, mut areas, mut levels, mut y) = (vec![], vec![], vec![], vec![]);
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at =
            |m: String| CoocoError::Invalid(format!("{} line {}: {m}", items.display(), i + 1));
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| at(e.to_string()))?;
        let s = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| at(format!("{k} must be a string")))
        };
        let f = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_f64)
                .ok_or_else(|| at(format!("{k} must be a number")))
        };
        scenes.push(s("scene")?);
        areas.push(s("area")?);
        levels.push(f("level")?);
        y.push(f("sim_scene")?);
    }
    let design = study_design(&levels, &areas)?;
    let fit = fit_random_intercept(&y, &design, &scenes)?;
    std::fs::create_dir_all(out).map_err(|source| CoocoError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let write = |name: &str, bytes: &[u8]| {
        let p = out.join(name);
        bindscope_core::fsutil::write_atomic(&p, bytes)
            .map_err(|source| CoocoError::Io { path: p, source })
    };
    write(
        "lme.json",
        &serde_json::to_vec_pretty(&fit).expect("serializes"),
    )?;
    let mut csv = String::from("term,coef,se,z,p\n");
    for i in 0..fit.names.len() {
        csv.push_str(&format!(
            "\"{}\",{},{},{},{:e}\n",
            fit.names[i].replace('"', "\"\""),
            fit.coef[i],
            fit.se[i],
            fit.z[i],
            fit.p[i]
        ));
    }
    write("lme.csv", csv.as_bytes())?;
    Ok(fit)
}
