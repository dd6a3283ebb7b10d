//! `experiments correlate runs/**/row.json`: the paper's Table 2 and Figure 1 from many
//! `probe-all` rows.
//!
//! For every metric of the rows (every key of `metrics` except the `binding_*` targets) against
//! the target (`--target`, default `binding_cosine`): Pearson r and two-sided p, the partial
//! correlation controlling for `--covariates` (default embedding dimension and parameter
//! count), and the leave-one-out jackknife (how many of the n subsets keep p < 0.05). Then the
//! OLS of the target on `--ols` (default `jer,same_diff`) with in-sample and leave-one-out CV
//! R². A metric is evaluated on the rows that have it (a row without `--images` has no
//! geometry). Statistics are defined in `bindscope_binding::stats` and checked against scipy.
//!
//! Arguments may be `row.json` files or directories (searched recursively for `row.json`).
//! Output (`--out`, default `runs/correlate/<timestamp>/`): `table2.csv`, `correlate.json`,
//! `rows.csv` (the assembled table) and one `scatter_<metric>.svg` per metric (target vs
//! metric, one labelled point per model, least-squares line).

use crate::common;
use anyhow::{Context, Result, anyhow, bail};
use bindscope_binding::stats::{MetricCorrelation, correlate, lstsq, ols};
use plotters::prelude::*;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Arguments of `experiments correlate`.
#[derive(clap::Args, Debug)]
pub struct CorrelateArgs {
    /// row.json files or directories holding them (searched recursively).
    #[arg(required = true, num_args = 1..)]
    rows: Vec<PathBuf>,
    /// The binding accuracy every metric is correlated with.
    #[arg(long, default_value = "binding_cosine")]
    target: String,
    /// Covariates of the partial correlation (row fields or metrics).
    #[arg(long, value_delimiter = ',', default_value = "embed_dim,num_params")]
    covariates: Vec<String>,
    /// Predictors of the OLS regression.
    #[arg(long, value_delimiter = ',', default_value = "jer,same_diff")]
    ols: Vec<String>,
    /// Output directory.
    #[arg(long)]
    out: Option<PathBuf>,
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

fn find_rows(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
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

fn fmt(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v != 0.0 && v.abs() < 1e-3 {
        format!("{v:.2e}")
    } else {
        format!("{v:.4}")
    }
}

pub fn run(args: CorrelateArgs, _ctx: &bindscope_core::run::RunContext) -> Result<()> {
    let files = find_rows(&args.rows)?;
    if files.is_empty() {
        bail!("no row.json found under {:?}", args.rows);
    }
    let rows: Vec<Row> = files
        .iter()
        .map(|p| {
            let value: serde_json::Value = common::read_json(p)?;
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
    let with_target: Vec<&Row> = rows
        .iter()
        .filter(|r| r.get(&args.target).is_some())
        .collect();
    for r in rows.iter().filter(|r| r.get(&args.target).is_none()) {
        eprintln!(
            "correlate: {} has no '{}': left out of the correlations",
            r.path.display(),
            args.target
        );
    }
    if with_target.len() < 3 {
        eprintln!(
            "correlate: only {} row(s) with '{}': p-values need n ≥ 3 (partial correlations n ≥ {}, OLS with LOO n ≥ {})",
            with_target.len(),
            args.target,
            args.covariates.len() + 3,
            args.ols.len() + 2
        );
    }
    let metric_names: BTreeSet<String> = rows
        .iter()
        .filter_map(|r| r.value["metrics"].as_object())
        .flat_map(|m| m.keys().cloned())
        .filter(|k| !k.starts_with("binding_") && *k != args.target)
        .collect();
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| common::runs_root("correlate").join(common::timestamp()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    // The assembled table.
    let mut cols: Vec<String> = vec![args.target.clone()];
    cols.extend(metric_names.iter().cloned());
    cols.extend(args.covariates.iter().cloned());
    let mut csv = format!("label,{},row\n", cols.join(","));
    for r in &rows {
        let vals: Vec<String> = cols
            .iter()
            .map(|c| r.get(c).map_or(String::new(), |v| v.to_string()))
            .collect();
        csv.push_str(&format!(
            "{},{},{}\n",
            r.label,
            vals.join(","),
            r.path.display()
        ));
    }
    bindscope_core::fsutil::write_atomic(&dir.join("rows.csv"), csv.as_bytes())?;

    // Per-metric statistics.
    let mut table: Vec<MetricCorrelation> = Vec::new();
    let mut t2 = String::from(
        "metric,n,pearson_r,pearson_p,partial_r,partial_p,partial_df,jackknife_significant,jackknife_subsets,jackknife_r_min,jackknife_r_max\n",
    );
    println!(
        "\nTable 2 — correlation with {} ({} rows)",
        args.target,
        with_target.len()
    );
    println!(
        "{:<24} {:>3} {:>8} {:>10} {:>9} {:>10} {:>9}",
        "metric", "n", "r", "p", "partial r", "partial p", "jackknife"
    );
    for m in &metric_names {
        let used: Vec<&&Row> = with_target
            .iter()
            .filter(|r| r.get(m).is_some() && args.covariates.iter().all(|c| r.get(c).is_some()))
            .collect();
        if used.len() < 3 {
            println!("{m:<24} {:>3}  (too few rows)", used.len());
            continue;
        }
        let x: Vec<f64> = used.iter().map(|r| r.get(m).expect("filtered")).collect();
        let y: Vec<f64> = used
            .iter()
            .map(|r| r.get(&args.target).expect("filtered"))
            .collect();
        let covs: Vec<Vec<f64>> = args
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
        t2.push_str(&format!(
            "{m},{},{},{},{},{},{},{},{},{},{}\n",
            c.pearson.n,
            c.pearson.r,
            c.pearson.p,
            pr,
            pp,
            pdf,
            c.jackknife.significant,
            c.jackknife.subsets,
            c.jackknife.r_min,
            c.jackknife.r_max
        ));
        let labels: Vec<String> = used.iter().map(|r| r.label.clone()).collect();
        scatter_svg(
            &dir.join(format!("scatter_{m}.svg")),
            m,
            &args.target,
            &x,
            &y,
            &labels,
            c.pearson.r,
            c.pearson.p,
        )?;
        table.push(c);
    }
    bindscope_core::fsutil::write_atomic(&dir.join("table2.csv"), t2.as_bytes())?;

    // OLS of the target on the chosen predictors.
    let used: Vec<&&Row> = with_target
        .iter()
        .filter(|r| args.ols.iter().all(|p| r.get(p).is_some()))
        .collect();
    let regression = if used.len() >= args.ols.len() + 2 {
        let cols: Vec<Vec<f64>> = args
            .ols
            .iter()
            .map(|p| used.iter().map(|r| r.get(p).expect("filtered")).collect())
            .collect();
        let refs: Vec<&[f64]> = cols.iter().map(Vec::as_slice).collect();
        let y: Vec<f64> = used
            .iter()
            .map(|r| r.get(&args.target).expect("filtered"))
            .collect();
        let reg = ols(&refs, &y);
        println!(
            "\nOLS {} ~ 1 + {}: n = {}, R² = {}, leave-one-out CV R² = {}, coefficients {:?}",
            args.target,
            args.ols.join(" + "),
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
            args.ols.join(", "),
            args.ols.len() + 2
        );
        None
    };
    common::write_json(
        &dir.join("correlate.json"),
        &json!({
            "target": args.target,
            "covariates": args.covariates,
            "rows": rows.iter().map(|r| json!({"label": r.label, "path": r.path})).collect::<Vec<_>>(),
            "correlations": table,
            "ols": regression.map(|r| json!({ "predictors": args.ols, "n": r.n, "coef": r.coef, "r2": r.r2, "loo_r2": r.loo_r2, "loo_predictions": r.loo_predictions })),
        }),
    )?;
    println!("output: {}", dir.display());
    Ok(())
}

/// Target vs metric, one labelled point per model, least-squares line.
#[allow(clippy::too_many_arguments)]
fn scatter_svg(
    path: &Path,
    metric: &str,
    target: &str,
    x: &[f64],
    y: &[f64],
    labels: &[String],
    r: f64,
    p: f64,
) -> Result<()> {
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
    let (x0, x1) = span(x);
    let (y0, y1) = span(y);
    let coef = lstsq(&[x], y);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{target} vs {metric}   (r = {}, p = {})", fmt(r), fmt(p)),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .x_desc(metric)
            .y_desc(target)
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        let line = RGBColor(214, 39, 40);
        chart
            .draw_series(LineSeries::new(
                [(x0, coef[0] + coef[1] * x0), (x1, coef[0] + coef[1] * x1)],
                line.stroke_width(2),
            ))
            .map_err(|e| anyhow!("{e:?}"))?;
        let dot = RGBColor(31, 119, 180);
        chart
            .draw_series(x.iter().zip(y).zip(labels).map(|((a, b), l)| {
                EmptyElement::at((*a, *b))
                    + Circle::new((0, 0), 5, dot.filled())
                    + Text::new(l.clone(), (7, -7), ("sans-serif", 12).into_font())
            }))
            .map_err(|e| anyhow!("{e:?}"))?;
        root.present().map_err(|e| anyhow!("{e:?}"))?;
    }
    bindscope_core::fsutil::write_atomic(path, svg.as_bytes())?;
    Ok(())
}
