//! The run's SVG plots: bars per (readout, probe) and validation curves per epoch.

use crate::probe::EpochLog;
use anyhow::{Result, anyhow};
use bindscope_core::plot::{COLORS, render_sized};
use plotters::prelude::*;
use std::path::Path;

/// The canvas of every plot of the study (pixels).
const SIZE: (u32, u32) = (760, 420);

/// One bar per (readout, probe) (two bars per colour); an optional reference line (chance,
/// NSR = 1); the axis up to `top`, or 1.15 × the largest bar (or reference).
pub(super) fn bars(
    path: &Path,
    title: &str,
    bars: &[(String, f64)],
    reference: Option<f64>,
    top: Option<f64>,
) -> Result<()> {
    let finite: Vec<f64> = bars.iter().map(|b| b.1).filter(|v| v.is_finite()).collect();
    let hi = top
        .unwrap_or_else(|| {
            finite
                .iter()
                .copied()
                .fold(reference.unwrap_or(0.0), f64::max)
                * 1.15
        })
        .max(1e-9);
    render_sized(path, SIZE, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((0..bars.len()).into_segmented(), 0f64..hi)
            .map_err(|e| anyhow!("{e:?}"))?;
        let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        chart
            .configure_mesh()
            .x_labels(bars.len())
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .draw_series(
                bars.iter()
                    .enumerate()
                    .filter(|(_, b)| b.1.is_finite())
                    .map(|(i, b)| {
                        let c = COLORS[i / 2 % COLORS.len()];
                        Rectangle::new(
                            [
                                (SegmentValue::Exact(i), 0.0),
                                (SegmentValue::Exact(i + 1), b.1.min(hi)),
                            ],
                            c.mix(0.8).filled(),
                        )
                    }),
            )
            .map_err(|e| anyhow!("{e:?}"))?;
        if let Some(r) = reference {
            chart
                .draw_series(LineSeries::new(
                    vec![
                        (SegmentValue::Exact(0), r),
                        (SegmentValue::Exact(bars.len()), r),
                    ],
                    BLACK.stroke_width(1),
                ))
                .map_err(|e| anyhow!("{e:?}"))?;
        }
        Ok(())
    })
}

/// Validation top-1 per epoch, one line per `(seed, history)`.
pub(super) fn curves(path: &Path, title: &str, runs: &[(u64, &[EpochLog])]) -> Result<()> {
    let epochs = runs.iter().map(|r| r.1.len()).max().unwrap_or(1).max(1);
    render_sized(path, SIZE, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(50)
            .build_cartesian_2d(1f64..epochs as f64, 0f64..1f64)
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .x_desc("epoch")
            .y_desc("val top-1")
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        for (i, (seed, history)) in runs.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    history.iter().map(|h| (h.epoch as f64, h.val_top1)),
                    c.stroke_width(2),
                ))
                .map_err(|e| anyhow!("{e:?}"))?
                .label(format!("seed {seed}"))
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
