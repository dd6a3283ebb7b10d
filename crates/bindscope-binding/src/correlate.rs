//! The correlation run (`experiments correlate runs/**/row.json`): the paper's Table 2 and
//! Figure 1 from many `probe-all` rows.
//!
//! For every metric of the rows (every key of `metrics` except the `binding_*` targets) against
//! the target (default `binding_cosine`): Pearson r and two-sided p, the partial correlation
//! controlling for the covariates (default embedding dimension and parameter count), and the
//! leave-one-out jackknife (how many of the n subsets keep p < 0.05). Then the OLS of the
//! target on the predictors (default `jer,same_diff`) with in-sample and leave-one-out CV R². A
//! metric is evaluated on the rows that have it (a row without `--images` has no geometry).
//! Statistics are defined in [`crate::stats`] and checked against scipy.
//!
//! Inputs may be `row.json` files or directories (searched recursively for `row.json`).
//! Output (`--out`, default `runs/correlate/<timestamp>/`): `table2.csv`, `correlate.json`,
//! `rows.csv` (the assembled table) and one `scatter_<metric>.svg` per metric (target vs
//! metric, one labelled point per model, least-squares line).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::plot::{Axis, COLORS, DESC_FONT, LABEL_FONT, TITLE_FONT, render, short_labels};
use bindscope_core::run::{
    Output, RunContext, new_run_dir, read_json, timestamp, write_csv_table, write_json,
};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::stats::{MetricCorrelation, Regression, correlate, lstsq, ols};

/// The configuration of a correlation run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorrelateConfig {
    /// `row.json` files or directories holding them (searched recursively).
    pub rows: Vec<PathBuf>,
    /// The binding accuracy every metric is correlated with.
    pub target: String,
    /// Covariates of the partial correlation (row fields or metrics).
    pub covariates: Vec<String>,
    /// Predictors of the OLS regression.
    pub ols: Vec<String>,
}

/// What a correlation run computed.
#[derive(Debug, Clone, Serialize)]
pub struct CorrelateReport {
    /// The output directory.
    pub dir: PathBuf,
    /// The rows read.
    pub rows: Vec<PathBuf>,
    /// One entry per metric with at least 3 rows.
    pub correlations: Vec<MetricCorrelation>,
    /// The OLS, when there were enough rows.
    pub ols: Option<Regression>,
}

struct Row {
    label: String,
    path: PathBuf,
    value: serde_json::Value,
}

impl Row {
    /// A metric, or a top-level numeric field (embed_dim, num_params).
    fn get(&self, key: &str) -> Option<f64> {
        self.value["metrics"]
            .get(key)
            .and_then(|v| v.as_f64())
            .or_else(|| self.value.get(key).and_then(|v| v.as_f64()))
            .filter(|v| v.is_finite())
    }
}

/// The `row.json` files named by `paths` (files as given, directories searched recursively),
/// sorted, without duplicates.
///
/// # Errors
/// A path that does not exist, or an unreadable directory.
pub fn find_rows(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut stack = vec![p.clone()];
            while let Some(d) = stack.pop() {
                for e in
                    std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))?
                {
                    let q = e?.path();
                    if q.is_dir() {
                        stack.push(q);
                    } else if q.file_name().is_some_and(|n| n == "row.json") {
                        out.push(q);
                    }
                }
            }
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            bail!("{}: no such file or directory", p.display());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Checks that `--target`, every `--covariates` and every `--ols` name is a metric or numeric
/// field of at least one row, before anything is written; an unknown name is an error naming
/// its flag and listing what the rows have.
fn check_names(config: &CorrelateConfig, rows: &[Row]) -> Result<()> {
    let known = |key: &str| rows.iter().any(|r| r.get(key).is_some());
    let metrics: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.value["metrics"].as_object())
        .flat_map(|m| m.iter())
        .filter(|(_, v)| v.as_f64().is_some_and(f64::is_finite))
        .map(|(k, _)| k.as_str())
        .collect();
    let fields: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.value.as_object())
        .flat_map(|m| m.iter())
        .filter(|(k, v)| *k != "metrics" && v.as_f64().is_some_and(f64::is_finite))
        .map(|(k, _)| k.as_str())
        .collect();
    let list = |set: &BTreeSet<&str>| {
        if set.is_empty() {
            "none".to_string()
        } else {
            set.iter().copied().collect::<Vec<_>>().join(", ")
        }
    };
    if !known(&config.target) {
        let targets: BTreeSet<&str> = metrics
            .iter()
            .copied()
            .filter(|k| k.starts_with("binding_"))
            .collect();
        bail!(
            "--target {}: no row has this metric; the rows' binding accuracies are {} (other metrics: {})",
            config.target,
            list(&targets),
            list(
                &metrics
                    .iter()
                    .copied()
                    .filter(|k| !k.starts_with("binding_"))
                    .collect()
            )
        );
    }
    for (flag, names) in [("--covariates", &config.covariates), ("--ols", &config.ols)] {
        let mut seen = BTreeSet::new();
        for n in names {
            if !seen.insert(n.as_str()) {
                bail!("{flag}: '{n}' is given twice");
            }
            if !known(n) {
                bail!(
                    "{flag}: no row has '{n}' (metrics: {}; row fields: {})",
                    list(&metrics),
                    list(&fields)
                );
            }
            if *n == config.target {
                bail!("{flag}: '{n}' is the target (--target)");
            }
        }
    }
    Ok(())
}

fn fmt(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v != 0.0 && v.abs() < 1e-3 {
        format!("{v:.2e}")
    } else {
        format!("{v:.4}")
    }
}

/// Reads the rows and writes `rows.csv`, `table2.csv`, `correlate.json` and the scatter plots
/// into `output.dir` (default `runs/correlate/<timestamp>/`); prints Table 2 and the OLS.
/// Uses no device.
///
/// # Errors
/// No `row.json` found, a file that is not a `probe-all` row, a `--target`, `--covariates` or
/// `--ols` name no row has (listing the rows' metrics; checked before anything is written),
/// or a write.
pub fn run(
    config: &CorrelateConfig,
    output: &Output,
    _ctx: &RunContext,
) -> Result<CorrelateReport> {
    let files = find_rows(&config.rows)?;
    if files.is_empty() {
        bail!("no row.json found under {:?}", config.rows);
    }
    let rows: Vec<Row> = files
        .iter()
        .map(|p| {
            let value: serde_json::Value = read_json(p)?;
            if !value["metrics"].is_object() {
                bail!(
                    "{}: not a probe-all row (expected a \"metrics\" object)",
                    p.display()
                );
            }
            let label = value["label"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| p.display().to_string());
            Ok(Row {
                label,
                path: p.clone(),
                value,
            })
        })
        .collect::<Result<_>>()?;
    let target = &config.target;
    check_names(config, &rows)?;
    let with_target: Vec<&Row> = rows.iter().filter(|r| r.get(target).is_some()).collect();
    for r in rows.iter().filter(|r| r.get(target).is_none()) {
        eprintln!(
            "correlate: {} has no '{}': left out of the correlations",
            r.path.display(),
            target
        );
    }
    if with_target.len() < 3 {
        eprintln!(
            "correlate: only {} row(s) with '{}': p-values need n ≥ 3 (partial correlations n ≥ {}, OLS with LOO n ≥ {})",
            with_target.len(),
            target,
            config.covariates.len() + 3,
            config.ols.len() + 2
        );
    }
    let metric_names: BTreeSet<String> = rows
        .iter()
        .filter_map(|r| r.value["metrics"].as_object())
        .flat_map(|m| m.keys().cloned())
        .filter(|k| !k.starts_with("binding_") && k != target)
        .collect();
    let dir = match &output.dir {
        Some(d) => d.clone(),
        None => new_run_dir("correlate", &timestamp())?,
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    // The assembled table.
    let mut cols: Vec<String> = vec![target.clone()];
    cols.extend(metric_names.iter().cloned());
    cols.extend(config.covariates.iter().cloned());
    let header: Vec<String> = std::iter::once("label".to_string())
        .chain(cols.iter().cloned())
        .chain(std::iter::once("row".to_string()))
        .collect();
    let records: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            std::iter::once(r.label.clone())
                .chain(
                    cols.iter()
                        .map(|c| r.get(c).map_or(String::new(), |v| v.to_string())),
                )
                .chain(std::iter::once(r.path.display().to_string()))
                .collect()
        })
        .collect();
    write_csv_table(&dir.join("rows.csv"), &header, &records)?;

    // Per-metric statistics.
    let mut table: Vec<MetricCorrelation> = Vec::new();
    let mut t2: Vec<Vec<String>> = Vec::new();
    println!(
        "\nTable 2 — correlation with {} ({} rows)",
        target,
        with_target.len()
    );
    println!(
        "{:<24} {:>3} {:>8} {:>10} {:>9} {:>10} {:>9}",
        "metric", "n", "r", "p", "partial r", "partial p", "jackknife"
    );
    for m in &metric_names {
        let used: Vec<&&Row> = with_target
            .iter()
            .filter(|r| r.get(m).is_some() && config.covariates.iter().all(|c| r.get(c).is_some()))
            .collect();
        if used.len() < 3 {
            println!("{m:<24} {:>3}  (too few rows)", used.len());
            continue;
        }
        let x: Vec<f64> = used.iter().map(|r| r.get(m).expect("filtered")).collect();
        let y: Vec<f64> = used
            .iter()
            .map(|r| r.get(target).expect("filtered"))
            .collect();
        let covs: Vec<Vec<f64>> = config
            .covariates
            .iter()
            .map(|c| used.iter().map(|r| r.get(c).expect("filtered")).collect())
            .collect();
        let cov_refs: Vec<&[f64]> = covs.iter().map(Vec::as_slice).collect();
        let c = correlate(m, &x, &y, &cov_refs);
        let (pr, pp, pdf) = c
            .partial
            .map_or((f64::NAN, f64::NAN, f64::NAN), |p| (p.r, p.p, p.df));
        println!(
            "{m:<24} {:>3} {:>8} {:>10} {:>9} {:>10} {:>5}/{:<3}",
            c.pearson.n,
            fmt(c.pearson.r),
            fmt(c.pearson.p),
            fmt(pr),
            fmt(pp),
            c.jackknife.significant,
            c.jackknife.subsets
        );
        t2.push(
            [
                m.clone(),
                c.pearson.n.to_string(),
                c.pearson.r.to_string(),
                c.pearson.p.to_string(),
                pr.to_string(),
                pp.to_string(),
                pdf.to_string(),
                c.jackknife.significant.to_string(),
                c.jackknife.subsets.to_string(),
                c.jackknife.r_min.to_string(),
                c.jackknife.r_max.to_string(),
            ]
            .to_vec(),
        );
        let labels: Vec<String> = used.iter().map(|r| r.label.clone()).collect();
        scatter_svg(
            &dir.join(format!("scatter_{m}.svg")),
            &Scatter {
                metric: m,
                target,
                x: &x,
                y: &y,
                labels: &labels,
                r: c.pearson.r,
                p: c.pearson.p,
            },
        )?;
        table.push(c);
    }
    write_csv_table(&dir.join("table2.csv"), &TABLE2_HEADER, &t2)?;

    // OLS of the target on the chosen predictors.
    let predictors = &config.ols;
    let used: Vec<&&Row> = with_target
        .iter()
        .filter(|r| predictors.iter().all(|p| r.get(p).is_some()))
        .collect();
    let regression = if used.len() >= predictors.len() + 2 {
        let cols: Vec<Vec<f64>> = predictors
            .iter()
            .map(|p| used.iter().map(|r| r.get(p).expect("filtered")).collect())
            .collect();
        let refs: Vec<&[f64]> = cols.iter().map(Vec::as_slice).collect();
        let y: Vec<f64> = used
            .iter()
            .map(|r| r.get(target).expect("filtered"))
            .collect();
        let reg = ols(&refs, &y);
        println!(
            "\nOLS {} ~ 1 + {}: n = {}, R² = {}, leave-one-out CV R² = {}, coefficients {:?}",
            target,
            predictors.join(" + "),
            reg.n,
            fmt(reg.r2),
            fmt(reg.loo_r2),
            reg.coef.iter().map(|c| fmt(*c)).collect::<Vec<_>>()
        );
        Some(reg)
    } else {
        println!(
            "\nOLS: {} rows with {}: too few (need ≥ {})",
            used.len(),
            predictors.join(", "),
            predictors.len() + 2
        );
        None
    };
    write_json(
        &dir.join("correlate.json"),
        &json!({
            "target": target,
            "covariates": config.covariates,
            "rows": rows.iter().map(|r| json!({"label": r.label, "path": r.path})).collect::<Vec<_>>(),
            "correlations": table,
            "ols": regression.as_ref().map(|r| json!({ "predictors": predictors, "n": r.n, "coef": r.coef, "r2": r.r2, "loo_r2": r.loo_r2, "loo_predictions": r.loo_predictions })),
        }),
    )?;
    println!("output: {}", dir.display());
    Ok(CorrelateReport {
        dir,
        rows: files,
        correlations: table,
        ols: regression,
    })
}

/// One scatter plot: target vs metric with the Pearson r and p of its caption.
struct Scatter<'a> {
    metric: &'a str,
    target: &'a str,
    x: &'a [f64],
    y: &'a [f64],
    labels: &'a [String],
    r: f64,
    p: f64,
}

/// Target vs metric, one point per model labelled with its short name ([`short_labels`]; a
/// label in the right third of the plot is written to the left of its point, so it stays on
/// the canvas), least-squares line (the shared canvas and axes of [`bindscope_core::plot`]).
fn scatter_svg(path: &Path, s: &Scatter) -> Result<()> {
    let span = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pad = if hi > lo {
            (hi - lo) * 0.08
        } else {
            lo.abs().max(1.0) * 0.05
        };
        (lo - pad, hi + pad)
    };
    let (x0, x1) = span(s.x);
    let (y0, y1) = span(s.y);
    let xa = Axis::linear(x0, x1);
    let ya = Axis::linear(y0, y1);
    let coef = lstsq(&[s.x], s.y);
    let labels: Vec<&str> = s.labels.iter().map(String::as_str).collect();
    let labels = short_labels(&labels);
    render(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!(
                    "{} vs {}   (r = {}, p = {}, n = {})",
                    s.target,
                    s.metric,
                    fmt(s.r),
                    fmt(s.p),
                    s.x.len()
                ),
                ("sans-serif", TITLE_FONT),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(ya.label_area())
            .build_cartesian_2d(xa.clone(), ya.clone())
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .label_style(("sans-serif", LABEL_FONT))
            .axis_desc_style(("sans-serif", DESC_FONT))
            .x_desc(s.metric)
            .y_desc(s.target)
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        // tab10 red line, tab10 blue points.
        chart
            .draw_series(LineSeries::new(
                [(x0, coef[0] + coef[1] * x0), (x1, coef[0] + coef[1] * x1)],
                COLORS[3].stroke_width(2),
            ))
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .draw_series(s.x.iter().zip(s.y).zip(&labels).map(|((a, b), l)| {
                let right = (a - x0) / (x1 - x0) > 0.66;
                let (offset, pos) = if right {
                    ((-8, -6), Pos::new(HPos::Right, VPos::Bottom))
                } else {
                    ((8, -6), Pos::new(HPos::Left, VPos::Bottom))
                };
                EmptyElement::at((*a, *b))
                    + Circle::new((0, 0), 5, COLORS[0].filled())
                    + Text::new(
                        l.clone(),
                        offset,
                        TextStyle::from(("sans-serif", LABEL_FONT).into_font()).pos(pos),
                    )
            }))
            .map_err(|e| anyhow!("{e:?}"))?;
        Ok(())
    })
}

/// The columns of `table2.csv`: one row per metric, its correlation with the target.
const TABLE2_HEADER: [&str; 11] = [
    "metric",
    "n",
    "pearson_r",
    "pearson_p",
    "partial_r",
    "partial_p",
    "partial_df",
    "jackknife_significant",
    "jackknife_subsets",
    "jackknife_r_min",
    "jackknife_r_max",
];
