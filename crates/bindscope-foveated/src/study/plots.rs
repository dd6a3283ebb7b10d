//! The run's SVG plots: grouped bars per (readout, probe) and validation curves per epoch, on
//! the shared canvas and axes of [`bindscope_core::plot`].
//!
//! Bars: one group per readout (its name under the group), one bar per probe in each group
//! (one colour per probe, named in the legend), gaps between bars and between groups, a
//! whisker of ± the standard deviation over seeds when there are several, the y axis named,
//! and an optional dashed reference line named in the legend (chance, NSR = 1).

use crate::probe::EpochLog;
use anyhow::{Result, anyhow};
use bindscope_core::plot::{
    Axis, COLORS, DESC_FONT, LABEL_FONT, Mark, TITLE_FONT, render_sized, side_legend,
    side_legend_width,
};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// The font size of the value printed above each bar.
const VALUE_FONT: u32 = 12;

/// A bar's value: three significant digits (`0.167`, `13.6`, `0.0430`).
fn value_label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.digits$}")
}

/// The canvas of every plot of the study (pixels).
const SIZE: (u32, u32) = (760, 440);

/// One bar: its group (readout), its series (probe), the mean and std over seeds (std 0 or
/// NaN: no whisker).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Bar {
    pub(super) readout: String,
    pub(super) probe: String,
    pub(super) mean: f64,
    pub(super) std: f64,
}

/// A bar chart's y axis and reference line.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BarAxis<'a> {
    /// What the y axis shows.
    pub(super) label: &'a str,
    /// An optional reference line and its legend name.
    pub(super) reference: Option<(f64, &'a str)>,
    /// The top of the axis; `None`: 1.15 × the largest bar (or reference).
    pub(super) top: Option<f64>,
}

/// The distinct values of `items` in first-seen order.
fn distinct<'a>(items: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in items {
        if !out.iter().any(|o| o == s) {
            out.push(s.to_string());
        }
    }
    out
}

/// Grouped bars (module docs), written to `path`.
pub(super) fn bars(path: &Path, title: &str, bars: &[Bar], axis: &BarAxis) -> Result<()> {
    let groups = distinct(bars.iter().map(|b| b.readout.as_str()));
    let series = distinct(bars.iter().map(|b| b.probe.as_str()));
    let top = |b: &Bar| b.mean + if b.std.is_finite() { b.std } else { 0.0 };
    let hi = axis
        .top
        .unwrap_or_else(|| {
            bars.iter()
                .map(top)
                .filter(|v| v.is_finite())
                .fold(axis.reference.map_or(0.0, |r| r.0), f64::max)
                * 1.15
        })
        .max(1e-9);
    let x = Axis::categories(&groups);
    let y = Axis::linear(0.0, hi);
    // The legend: one entry per probe, then the reference line.
    let mut legend: Vec<(String, RGBColor, Mark)> = series
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), COLORS[i % COLORS.len()], Mark::Box))
        .collect();
    if let Some((_, name)) = axis.reference {
        legend.push((name.to_string(), BLACK, Mark::Dashed));
    }
    let names: Vec<&str> = legend.iter().map(|l| l.0.as_str()).collect();
    let legend_width = side_legend_width(&names);
    let slot = 0.8 / series.len().max(1) as f64;
    render_sized(path, SIZE, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", TITLE_FONT))
            .margin(16)
            .margin_right(legend_width + 8)
            .x_label_area_size(48)
            .y_label_area_size(y.label_area())
            .build_cartesian_2d(x.clone(), y.clone())
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .label_style(("sans-serif", LABEL_FONT))
            .axis_desc_style(("sans-serif", DESC_FONT))
            .x_desc("readout")
            .y_desc(axis.label)
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        for (si, probe) in series.iter().enumerate() {
            let c = COLORS[si % COLORS.len()];
            let placed: Vec<(f64, &Bar)> = bars
                .iter()
                .filter(|b| &b.probe == probe && b.mean.is_finite())
                .filter_map(|b| {
                    let g = groups.iter().position(|g| *g == b.readout)?;
                    Some((g as f64 + 0.1 + si as f64 * slot, b))
                })
                .collect();
            chart
                .draw_series(placed.iter().map(|(x0, b)| {
                    Rectangle::new(
                        [(x0 + slot * 0.08, 0.0), (x0 + slot * 0.92, b.mean.min(hi))],
                        c.mix(0.85).filled(),
                    )
                }))
                .map_err(|e| anyhow!("{e:?}"))?;
            // Whiskers: ± std over seeds, a vertical line with caps.
            let cap = slot * 0.15;
            for (x0, b) in placed
                .iter()
                .filter(|(_, b)| b.std.is_finite() && b.std > 0.0)
            {
                let xc = x0 + slot / 2.0;
                let (lo, top) = ((b.mean - b.std).max(0.0), (b.mean + b.std).min(hi));
                let segments = [
                    vec![(xc, lo), (xc, top)],
                    vec![(xc - cap, lo), (xc + cap, lo)],
                    vec![(xc - cap, top), (xc + cap, top)],
                ];
                chart
                    .draw_series(
                        segments
                            .into_iter()
                            .map(|seg| PathElement::new(seg, BLACK.stroke_width(1))),
                    )
                    .map_err(|e| anyhow!("{e:?}"))?;
            }
            // The value above each bar (so a bar too small to see still reads).
            chart
                .draw_series(placed.iter().map(|(x0, b)| {
                    let above = if b.std.is_finite() {
                        b.mean + b.std
                    } else {
                        b.mean
                    };
                    EmptyElement::at((x0 + slot / 2.0, above.min(hi)))
                        + Text::new(
                            value_label(b.mean),
                            (0, -3),
                            TextStyle::from(("sans-serif", VALUE_FONT).into_font())
                                .pos(Pos::new(HPos::Center, VPos::Bottom)),
                        )
                }))
                .map_err(|e| anyhow!("{e:?}"))?;
        }
        if let Some((r, _)) = axis.reference {
            let n = groups.len().max(1) as f64;
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(0.0, r), (n, r)],
                    6,
                    4,
                    BLACK.stroke_width(1),
                ))
                .map_err(|e| anyhow!("{e:?}"))?;
        }
        side_legend(root, (SIZE.0 as i32 - legend_width as i32, 56), &legend)
    })
}

/// Validation top-1 per epoch, one line per `(seed, history)` (epochs on an integer axis).
pub(super) fn curves(path: &Path, title: &str, runs: &[(u64, &[EpochLog])]) -> Result<()> {
    let epochs = runs.iter().map(|r| r.1.len()).max().unwrap_or(1).max(1);
    let x = if epochs > 1 {
        Axis::integer(1.0, epochs as f64)
    } else {
        Axis::integer(0.5, 1.5)
    };
    let y = Axis::linear(0.0, 1.0);
    let legend: Vec<(String, RGBColor, Mark)> = runs
        .iter()
        .enumerate()
        .map(|(i, (seed, _))| {
            (
                format!("probe seed {seed}"),
                COLORS[i % COLORS.len()],
                Mark::Line,
            )
        })
        .collect();
    let names: Vec<&str> = legend.iter().map(|l| l.0.as_str()).collect();
    let legend_width = side_legend_width(&names);
    render_sized(path, SIZE, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", TITLE_FONT))
            .margin(16)
            .margin_right(legend_width + 8)
            .x_label_area_size(48)
            .y_label_area_size(y.label_area())
            .build_cartesian_2d(x.clone(), y.clone())
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .label_style(("sans-serif", LABEL_FONT))
            .axis_desc_style(("sans-serif", DESC_FONT))
            .x_desc("epoch")
            .y_desc("validation top-1")
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        for (i, (_, history)) in runs.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let points: Vec<(f64, f64)> = history
                .iter()
                .map(|h| (h.epoch as f64, h.val_top1))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
                .map_err(|e| anyhow!("{e:?}"))?;
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(|e| anyhow!("{e:?}"))?;
        }
        side_legend(root, (SIZE.0 as i32 - legend_width as i32, 56), &legend)
    })
}
