//! The JER plots (SVG, plotters, on the shared canvas [`bindscope_core::plot::render`]).

use crate::Summary;
use anyhow::{Result, anyhow};
use bindscope_core::plot::{COLORS, render};
use plotters::prelude::*;
use std::path::Path;

/// Mean normalized singular-value spectrum σ_i/σ_1 (log scale), one line per `(name, spectrum)`
/// series, written to `path`.
///
/// # Errors
/// A plotters drawing error or the write of `path`.
pub fn spectrum_svg(path: &Path, series: &[(String, Vec<f64>)]) -> Result<()> {
    let k = series.iter().map(|s| s.1.len()).max().unwrap_or(1);
    let lo = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .filter(|v| *v > 0.0)
        .fold(1.0f64, f64::min);
    render(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                "Normalized Jacobian spectrum σᵢ/σ₁ (mean over images)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(1f64..k as f64, (lo * 0.8..1.05f64).log_scale())
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .x_desc("index i")
            .y_desc("σᵢ / σ₁")
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        for (n, (name, s)) in series.iter().enumerate() {
            let c = COLORS[n % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    s.iter().enumerate().map(|(i, v)| ((i + 1) as f64, *v)),
                    c.stroke_width(2),
                ))
                .map_err(|e| anyhow!("{e:?}"))?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        Ok(())
    })
}

/// JER (mean ± std over images) after every block of `model`: `profile[b]` is block `b + 1`.
///
/// # Errors
/// A plotters drawing error or the write of `path`.
pub fn depth_svg(path: &Path, model: &str, profile: &[Summary]) -> Result<()> {
    let hi = profile
        .iter()
        .map(|s| s.mean + s.std)
        .fold(1.0f64, f64::max);
    render(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(format!("JER vs depth — {model}"), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(0.5f64..profile.len() as f64 + 0.5, 0f64..hi * 1.1)
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .x_desc("block")
            .y_desc("JER")
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        let c = COLORS[0];
        chart
            .draw_series(LineSeries::new(
                profile
                    .iter()
                    .enumerate()
                    .map(|(b, s)| ((b + 1) as f64, s.mean)),
                c.stroke_width(2),
            ))
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .draw_series(profile.iter().enumerate().map(|(b, s)| {
                ErrorBar::new_vertical(
                    (b + 1) as f64,
                    s.mean - s.std,
                    s.mean,
                    s.mean + s.std,
                    c.filled(),
                    6,
                )
            }))
            .map_err(|e| anyhow!("{e:?}"))?;
        Ok(())
    })
}
