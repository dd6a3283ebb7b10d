//! The JER plots (SVG, plotters, on the shared canvas and axes of [`bindscope_core::plot`]).
//!
//! Models are named by [`short_labels`] (the model's name, never a machine path); spectra are
//! on a log axis covering every value; indices and blocks are integers.

use crate::Summary;
use anyhow::{Result, anyhow};
use bindscope_core::plot::{Axis, COLORS, DESC_FONT, LABEL_FONT, TITLE_FONT, render, short_labels};
use plotters::prelude::*;
use std::path::Path;

/// Mean normalized singular-value spectrum σ_i/σ_1 on a log axis covering every positive
/// value, one line per `(model, spectrum)` series (the legend names each model by its short
/// name), written to `path`. Non-positive values (an exactly zero singular value) are left
/// out of the lines.
///
/// # Errors
/// A plotters drawing error or the write of `path`.
pub fn spectrum_svg(path: &Path, series: &[(String, Vec<f64>)]) -> Result<()> {
    let k = series.iter().map(|s| s.1.len()).max().unwrap_or(1).max(2);
    let positive = || {
        series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    let lo = positive().fold(1.0f64, f64::min);
    let hi = positive().fold(1.0f64, f64::max);
    let specs: Vec<&str> = series.iter().map(|s| s.0.as_str()).collect();
    let names = short_labels(&specs);
    let title = match names.as_slice() {
        [one] => format!("Normalized Jacobian spectrum σᵢ/σ₁ — {one}"),
        _ => "Normalized Jacobian spectrum σᵢ/σ₁ (mean over images)".to_string(),
    };
    let x = Axis::integer(1.0, k as f64);
    let y = Axis::log(lo, hi);
    render(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", TITLE_FONT))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(y.label_area())
            .build_cartesian_2d(x.clone(), y.clone())
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .label_style(("sans-serif", LABEL_FONT))
            .axis_desc_style(("sans-serif", DESC_FONT))
            .x_desc("index i of the singular value")
            .y_desc("σᵢ / σ₁ (mean over images)")
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        for (n, ((_, s), name)) in series.iter().zip(&names).enumerate() {
            let c = COLORS[n % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    s.iter()
                        .enumerate()
                        .filter(|(_, v)| v.is_finite() && **v > 0.0)
                        .map(|(i, v)| ((i + 1) as f64, *v)),
                    c.stroke_width(2),
                ))
                .map_err(|e| anyhow!("{e:?}"))?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
        }
        // Spectra fall from the top left: the top right is free.
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", LABEL_FONT))
            .background_style(WHITE.mix(0.9))
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
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max);
    let name = short_labels(&[model]).remove(0);
    let x = Axis::integer(0.5, profile.len().max(1) as f64 + 0.5);
    let y = Axis::linear(0.0, hi * 1.1);
    render(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("JER after each block — {name}"),
                ("sans-serif", TITLE_FONT),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(y.label_area())
            .build_cartesian_2d(x.clone(), y.clone())
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .label_style(("sans-serif", LABEL_FONT))
            .axis_desc_style(("sans-serif", DESC_FONT))
            .x_desc("block")
            .y_desc("JER (mean ± std over images)")
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
                    8,
                )
            }))
            .map_err(|e| anyhow!("{e:?}"))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bindscope_core::plot::{audit_svg, svg_text_contents};

    fn summary(mean: f64, std: f64) -> Summary {
        Summary {
            n: 3,
            mean,
            std,
            ci95_low: f64::NAN,
            ci95_high: f64::NAN,
            cv: std / mean,
            sem: std,
        }
    }

    /// The spectrum of the issue (down to 0.033, two models named by paths): a log axis that
    /// reaches below the smallest value, integer indices, legend and title without paths, and
    /// every text on the canvas.
    #[test]
    fn spectrum_plots_read() {
        let dir = tempfile::tempdir().unwrap();
        let decay = |r: f64| (0..30).map(|i| r.powi(i)).collect::<Vec<f64>>();
        let series = vec![
            ("/home/someone/models/dinov2-small".to_string(), decay(0.89)),
            ("/home/someone/models/clip-vit-b32".to_string(), decay(0.8)),
        ];
        assert!(series[0].1[29] < 0.04);
        let path = dir.path().join("spectrum.svg");
        spectrum_svg(&path, &series).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(audit_svg(&svg).is_empty(), "{:?}", audit_svg(&svg));
        let texts = svg_text_contents(&svg);
        assert!(!svg.contains("/home/someone"), "{texts:?}");
        assert!(texts.contains(&"dinov2-small".to_string()), "{texts:?}");
        // The smallest value is 0.8^29 ≈ 0.0015: the axis goes down to 0.001.
        assert!(texts.contains(&"0.001".to_string()), "{texts:?}");
        assert!(texts.contains(&"25".to_string()), "{texts:?}");
        assert!(
            !texts
                .iter()
                .any(|t| t.contains("000000") || t.ends_with(".0")),
            "{texts:?}"
        );
        // One model: its name in the title.
        spectrum_svg(&path, &series[..1]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(audit_svg(&svg).is_empty(), "{:?}", audit_svg(&svg));
        assert!(svg.contains("— dinov2-small"));
    }

    #[test]
    fn depth_plots_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("depth.svg");
        depth_svg(
            &path,
            "/home/someone/models/dinov2-small",
            &[summary(9.9, 0.4), summary(12.9, 0.5)],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(audit_svg(&svg).is_empty(), "{:?}", audit_svg(&svg));
        let texts = svg_text_contents(&svg);
        assert!(!svg.contains("/home/someone"), "{texts:?}");
        // Two blocks: the x ticks are 1 and 2, nothing in between.
        assert!(texts.contains(&"1".to_string()) && texts.contains(&"2".to_string()));
        assert!(
            !texts
                .iter()
                .any(|t| t == "1.5" || t == "1.0" || t.ends_with(".0")),
            "{texts:?}"
        );
    }
}
