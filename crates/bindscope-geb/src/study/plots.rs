//! The SVG figures of the GEB runs, on the shared canvas and axes of
//! [`bindscope_core::plot`]:
//!
//! - [`train_plots`] (`geb train`): `loss_curve.svg`, the training loss per optimizer step,
//!   from `train_log.jsonl`;
//! - [`eval_plots`] (`geb eval`): `categories.svg`, the score per category and overall of
//!   every condition (matched and each control) with its 95% bootstrap interval, and
//!   `control_gaps.svg`, the paired gap matched − control (overall) of every control with its
//!   95% paired interval, from `eval.json` and the conditions' `score-<control>/summary.json`.
//!
//! Only what the records hold is drawn: a value without an interval is a bar without a
//! whisker (and its legend entry or label says `no CI`). Models are named by
//! [`short_label`], never by a machine path.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use bindscope_core::plot::{
    self, Axis, COLORS, DESC_FONT, LABEL_FONT, Mark, TITLE_FONT, render, render_sized, short_label,
    side_legend, side_legend_width, text_width,
};
use bindscope_core::run::read_json;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Deserialize;

use crate::metrics::Category;
use crate::readout::eval::Control;
use crate::readout::train::StepLog;
use crate::score::Summary;

/// The font size of the value printed at each bar.
const VALUE_FONT: u32 = 12;

/// The canvas of `categories.svg` (pixels): wider than [`plot::SIZE`], for up to four bars in
/// each of four groups and the legend.
const CATEGORY_SIZE: (u32, u32) = (860, 460);

/// The loss curve marks every step with a dot up to this many steps.
const MAX_DOTS: usize = 40;

/// Draws `<run>/loss_curve.svg`: the training loss of every optimizer step of a `geb train`
/// run directory, read from `<run>/train_log.jsonl` (one [`StepLog`] per line).
///
/// The x axis is the optimizer step (integers, [`StepLog::step`]); the y axis, linear, is
/// [`StepLog::loss`]: the cross-entropy in nats per supervised token (the token mean over the
/// step's effective batch). A step whose loss is not finite (`null` in the log) leaves a gap
/// in the line. The title names the embedder, the decoder and the mode as `<run>/config.json`
/// records them (short names only), or nothing more when that file is missing or unreadable.
///
/// Returns the files written: `[loss_curve.svg]`, or nothing when the log is missing or holds
/// no step (a run stopped before its first step).
///
/// # Errors
/// An unreadable log, a line that is not a [`StepLog`] (named: `…/train_log.jsonl line 7:
/// …`), a plotters drawing error or the write of the SVG.
pub fn train_plots(run: &Path) -> Result<Vec<PathBuf>> {
    let log = run.join("train_log.jsonl");
    if !log.is_file() {
        return Ok(Vec::new());
    }
    let mut steps = read_log(&log)?;
    if steps.is_empty() {
        return Ok(Vec::new());
    }
    steps.sort_by_key(|s| s.step);
    let path = run.join("loss_curve.svg");
    loss_curve(&path, &train_title(run), &steps)?;
    Ok(vec![path])
}

/// Every record of the training log `path`, each line checked (blank lines skipped).
fn read_log(path: &Path) -> Result<Vec<StepLog>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            parse_step(l).map_err(|e| {
                anyhow!(
                    "{} line {}: not a training-log record ({e})",
                    path.display(),
                    n + 1
                )
            })
        })
        .collect()
}

/// One line of the training log: a [`StepLog`], its loss `null` when it was not finite
/// (serde_json writes NaN and infinities as `null`), read back as NaN.
fn parse_step(line: &str) -> serde_json::Result<StepLog> {
    let mut v: serde_json::Value = serde_json::from_str(line)?;
    let null_loss = v.get("loss").is_some_and(serde_json::Value::is_null);
    if null_loss {
        v["loss"] = serde_json::Value::from(0.0);
    }
    let mut step: StepLog = serde_json::from_value(v)?;
    if null_loss {
        step.loss = f64::NAN;
    }
    Ok(step)
}

/// The loss curve's title: the embedder, decoder and mode of `<run>/config.json`
/// (`identity.run`), as much of it as fits on the canvas.
fn train_title(run: &Path) -> String {
    const BASE: &str = "Readout training loss";
    let config: Option<serde_json::Value> = std::fs::read_to_string(run.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let Some(config) = config else {
        return BASE.to_string();
    };
    let r = &config["identity"]["run"];
    let decoder = r["decoder"].as_str().map(short_label);
    let mode = r["mode"].as_str().map(str::to_string);
    let e = &r["embedder"];
    let embedder = if e.as_str() == Some("text-only") {
        Some("no embedding".to_string())
    } else if let Some(vision) = e["models"]["vision"].as_str() {
        Some(match e["models"]["text"].as_str() {
            Some(text) => format!("{} + {}", short_label(vision), short_label(text)),
            None => short_label(vision),
        })
    } else {
        e["files"]["embeddings"].as_str().map(short_label)
    };
    let mode = mode.map(|m| format!(" ({m})")).unwrap_or_default();
    let mut candidates = Vec::new();
    if let Some(d) = &decoder {
        if let Some(emb) = &embedder {
            candidates.push(format!("{BASE} — {emb} → {d}{mode}"));
        }
        candidates.push(format!("{BASE} — {d}{mode}"));
    }
    let room = f64::from(plot::SIZE.0) - 48.0;
    candidates
        .into_iter()
        .find(|t| text_width(t, TITLE_FONT) <= room)
        .unwrap_or_else(|| BASE.to_string())
}

/// Draws the loss of `steps` (sorted by step) per step to `path`.
fn loss_curve(path: &Path, title: &str, steps: &[StepLog]) -> Result<()> {
    let first = steps.first().map_or(1, |s| s.step) as f64;
    let last = steps.last().map_or(1, |s| s.step) as f64;
    let x = if last > first {
        Axis::integer(first, last)
    } else {
        Axis::integer(first - 0.5, first + 0.5)
    };
    let finite = || steps.iter().map(|s| s.loss).filter(|v| v.is_finite());
    let lo = finite().fold(f64::INFINITY, f64::min);
    let hi = finite().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo <= hi {
        let pad = 0.05 * (hi - lo);
        ((lo - pad).max(0.0), hi + pad)
    } else {
        (0.0, 1.0)
    };
    let y = Axis::linear(lo, hi);
    // Runs of finite losses: a non-finite step breaks the line.
    let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for s in steps {
        if s.loss.is_finite() {
            if let Some(seg) = segments.last_mut() {
                seg.push((s.step as f64, s.loss));
            }
        } else if segments.last().is_some_and(|seg| !seg.is_empty()) {
            segments.push(Vec::new());
        }
    }
    segments.retain(|seg| !seg.is_empty());
    let dots = steps.len() <= MAX_DOTS;
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
            .x_desc("optimizer step")
            .y_desc("loss (nats per supervised token)")
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        let c = COLORS[0];
        for seg in &segments {
            chart
                .draw_series(LineSeries::new(seg.iter().copied(), c.stroke_width(2)))
                .map_err(|e| anyhow!("{e:?}"))?;
            if dots {
                chart
                    .draw_series(seg.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(|e| anyhow!("{e:?}"))?;
            }
        }
        Ok(())
    })
}

/// One condition of `eval.json` as [`super::evaluate::ConditionScore`] writes it (the report
/// types are write-only; this reads the same fields).
#[derive(Debug, Clone, Deserialize)]
struct ConditionRecord {
    control: Control,
    items: usize,
    score: f64,
    ci95: Option<[f64; 2]>,
    gap: Option<super::evaluate::PairedGap>,
}

/// The part of `eval.json` ([`super::evaluate::EvalReport`]) the plots read.
#[derive(Debug, Clone, Deserialize)]
struct EvalRecord {
    conditions: Vec<ConditionRecord>,
}

/// One bar of `categories.svg`: its group (0: overall, then the categories), its condition,
/// the score (%) and its interval.
#[derive(Debug, Clone, PartialEq)]
struct Bar {
    group: usize,
    series: usize,
    value: f64,
    ci: Option<[f64; 2]>,
}

/// One bar of `control_gaps.svg`: its label, colour, gap (points) and paired interval.
#[derive(Debug, Clone, PartialEq)]
struct GapBar {
    name: String,
    color: RGBColor,
    gap: f64,
    ci: Option<[f64; 2]>,
}

/// Draws the figures of a `geb eval` run directory `eval_dir` from its `eval.json`
/// ([`super::evaluate::EvalReport`]):
///
/// - `categories.svg`: grouped bars, one group for `overall` then one per category (in the
///   order natural, scene_text, document, those present), one bar per condition (matched and
///   each control, in the report's order, one colour each, named in the legend with its item
///   count). Bars are the mean item score in percent (lmms-eval 0.7.3's metrics), whiskers
///   the 95% percentile-bootstrap interval in percent. The overall bars come from
///   `eval.json`; a condition's category bars from its `score-<control>/summary.json`
///   ([`Summary::categories`]), left out when that file is missing.
/// - `control_gaps.svg` (only when the report holds a control with a gap): one bar per
///   control, the paired gap matched − control over all its items in percentage points, the
///   whisker its 95% paired-bootstrap interval, and a line at 0.
///
/// A value without an interval (no resamples) is drawn without a whisker, and its legend entry
/// (categories) or label (gaps) says `no CI`. Returns the files written (none when the report
/// holds no condition).
///
/// # Errors
/// A missing or unreadable `eval.json` or `summary.json` (named), a plotters drawing error or
/// the write of an SVG.
pub fn eval_plots(eval_dir: &Path) -> Result<Vec<PathBuf>> {
    let report: EvalRecord = read_json(&eval_dir.join("eval.json"))?;
    let conds = &report.conditions;
    if conds.is_empty() {
        return Ok(Vec::new());
    }
    let summaries: Vec<Option<Summary>> = conds
        .iter()
        .map(|c| {
            let p = eval_dir
                .join(format!("score-{}", c.control.name()))
                .join("summary.json");
            if p.is_file() {
                read_json::<Summary>(&p)
                    .map(Some)
                    .map_err(anyhow::Error::from)
            } else {
                Ok(None)
            }
        })
        .collect::<Result<_>>()?;
    let colors: Vec<RGBColor> = (0..conds.len()).map(|i| COLORS[i % COLORS.len()]).collect();

    // The categories present in any condition, in report order (unknown names last).
    let mut cats: Vec<String> = Vec::new();
    for s in summaries.iter().flatten() {
        for g in &s.categories {
            if !cats.contains(&g.name) {
                cats.push(g.name.clone());
            }
        }
    }
    let rank = |n: &str| {
        Category::ALL
            .iter()
            .position(|c| c.name() == n)
            .unwrap_or(Category::ALL.len())
    };
    cats.sort_by_key(|n| rank(n.as_str()));
    let groups: Vec<String> = std::iter::once("overall".to_string())
        .chain(cats.iter().cloned())
        .collect();
    let mut bars = Vec::new();
    for (si, (c, s)) in conds.iter().zip(&summaries).enumerate() {
        bars.push(Bar {
            group: 0,
            series: si,
            value: c.score,
            ci: c.ci95,
        });
        for g in s.iter().flat_map(|s| &s.categories) {
            if let Some(k) = cats.iter().position(|n| *n == g.name) {
                bars.push(Bar {
                    group: k + 1,
                    series: si,
                    value: g.score,
                    ci: g.ci95,
                });
            }
        }
    }
    let series: Vec<(String, RGBColor)> = conds
        .iter()
        .zip(&colors)
        .map(|(c, &color)| {
            let no_ci = if c.ci95.is_none() { ", no CI" } else { "" };
            (
                format!("{} ({} items{no_ci})", c.control.name(), c.items),
                color,
            )
        })
        .collect();
    let mut written = Vec::new();
    let path = eval_dir.join("categories.svg");
    categories_svg(&path, &groups, &series, &bars)?;
    written.push(path);

    let gaps: Vec<GapBar> = conds
        .iter()
        .zip(&colors)
        .filter(|(c, _)| c.control != Control::Matched)
        .filter_map(|(c, &color)| {
            let super::evaluate::PairedGap {
                matched_minus_control_pp: gap,
                ci95: ci,
            } = c.gap?;
            let name = if ci.is_some() {
                c.control.name().to_string()
            } else {
                format!("{} (no CI)", c.control.name())
            };
            Some(GapBar {
                name,
                color,
                gap,
                ci,
            })
        })
        .collect();
    if !gaps.is_empty() {
        let path = eval_dir.join("control_gaps.svg");
        gaps_svg(&path, &gaps)?;
        written.push(path);
    }
    Ok(written)
}

/// The whisker of an interval `lo..hi` at `xc`: a vertical line with caps `cap` wide each side.
fn whisker(xc: f64, cap: f64, lo: f64, hi: f64) -> [PathElement<(f64, f64)>; 3] {
    let style = BLACK.stroke_width(1);
    [
        PathElement::new(vec![(xc, lo), (xc, hi)], style),
        PathElement::new(vec![(xc - cap, lo), (xc + cap, lo)], style),
        PathElement::new(vec![(xc - cap, hi), (xc + cap, hi)], style),
    ]
}

/// `interval` when both ends are finite.
fn finite_interval(interval: Option<[f64; 2]>) -> Option<[f64; 2]> {
    interval.filter(|[lo, hi]| lo.is_finite() && hi.is_finite())
}

/// Grouped bars of scores (%) with interval whiskers ([`eval_plots`]), written to `path`.
fn categories_svg(
    path: &Path,
    groups: &[String],
    series: &[(String, RGBColor)],
    bars: &[Bar],
) -> Result<()> {
    let top = bars
        .iter()
        .flat_map(|b| std::iter::once(b.value).chain(finite_interval(b.ci).map(|c| c[1])))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let hi = (top * 1.12).max(1.0);
    let x = Axis::categories(groups);
    let y = Axis::linear(0.0, hi);
    let legend: Vec<(String, RGBColor, Mark)> = series
        .iter()
        .map(|(name, c)| (name.clone(), *c, Mark::Box))
        .collect();
    let names: Vec<&str> = legend.iter().map(|l| l.0.as_str()).collect();
    let legend_width = side_legend_width(&names);
    let slot = 0.8 / series.len().max(1) as f64;
    let cap = slot * 0.15;
    render_sized(path, CATEGORY_SIZE, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("GEB score per category", ("sans-serif", TITLE_FONT))
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
            .x_desc("category")
            .y_desc("score (%), whiskers: 95% bootstrap CI")
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        for b in bars.iter().filter(|b| b.value.is_finite()) {
            let c = series[b.series].1;
            let x0 = b.group as f64 + 0.1 + b.series as f64 * slot;
            let xc = x0 + slot / 2.0;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [
                        (x0 + slot * 0.08, 0.0),
                        (x0 + slot * 0.92, b.value.clamp(0.0, hi)),
                    ],
                    c.mix(0.85).filled(),
                )))
                .map_err(|e| anyhow!("{e:?}"))?;
            let mut above = b.value;
            if let Some([lo, up]) = finite_interval(b.ci) {
                chart
                    .draw_series(whisker(xc, cap, lo.clamp(0.0, hi), up.clamp(0.0, hi)))
                    .map_err(|e| anyhow!("{e:?}"))?;
                above = above.max(up);
            }
            // The value above the bar and its whisker (a bar too small to see still reads).
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((xc, above.clamp(0.0, hi)))
                        + Text::new(
                            format!("{:.1}", b.value),
                            (0, -3),
                            TextStyle::from(("sans-serif", VALUE_FONT).into_font())
                                .pos(Pos::new(HPos::Center, VPos::Bottom)),
                        ),
                ))
                .map_err(|e| anyhow!("{e:?}"))?;
        }
        side_legend(
            root,
            (CATEGORY_SIZE.0 as i32 - legend_width as i32, 56),
            &legend,
        )
    })
}

/// One bar per control: the paired gap (points) with its whisker and a line at 0
/// ([`eval_plots`]), written to `path`.
fn gaps_svg(path: &Path, gaps: &[GapBar]) -> Result<()> {
    let values = || {
        gaps.iter()
            .flat_map(|g| std::iter::once(g.gap).chain(finite_interval(g.ci).into_iter().flatten()))
            .filter(|v| v.is_finite())
    };
    let min = values().fold(0.0f64, f64::min);
    let max = values().fold(0.0f64, f64::max);
    let span = max - min;
    let lo = if min < 0.0 { min - 0.15 * span } else { 0.0 };
    let hi = if max > 0.0 { max + 0.15 * span } else { 0.0 };
    let names: Vec<String> = gaps.iter().map(|g| g.name.clone()).collect();
    let x = Axis::categories(&names);
    let y = Axis::linear(lo, hi);
    // The axis' own range (a zero span is widened by the axis).
    let (y_lo, y_hi) = y.bounds();
    let n = gaps.len() as f64;
    render(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("Gap matched − control, overall", ("sans-serif", TITLE_FONT))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(y.label_area())
            .build_cartesian_2d(x.clone(), y.clone())
            .map_err(|e| anyhow!("{e:?}"))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .label_style(("sans-serif", LABEL_FONT))
            .axis_desc_style(("sans-serif", DESC_FONT))
            .x_desc("control")
            .y_desc("gap (points), whiskers: 95% paired CI")
            .draw()
            .map_err(|e| anyhow!("{e:?}"))?;
        for (i, g) in gaps.iter().enumerate().filter(|(_, g)| g.gap.is_finite()) {
            let xc = i as f64 + 0.5;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(xc - 0.25, 0.0), (xc + 0.25, g.gap.clamp(y_lo, y_hi))],
                    g.color.mix(0.85).filled(),
                )))
                .map_err(|e| anyhow!("{e:?}"))?;
            let (mut low_end, mut high_end) = (g.gap, g.gap);
            if let Some([l, h]) = finite_interval(g.ci) {
                chart
                    .draw_series(whisker(xc, 0.06, l.clamp(y_lo, y_hi), h.clamp(y_lo, y_hi)))
                    .map_err(|e| anyhow!("{e:?}"))?;
                low_end = low_end.min(l);
                high_end = high_end.max(h);
            }
            // The value beyond the bar's end and its whisker: above a gain, below a loss.
            let (at, dy, v) = if g.gap >= 0.0 {
                (high_end, -3, VPos::Bottom)
            } else {
                (low_end, 3, VPos::Top)
            };
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((xc, at.clamp(y_lo, y_hi)))
                        + Text::new(
                            format!("{:+.1}", g.gap),
                            (0, dy),
                            TextStyle::from(("sans-serif", VALUE_FONT).into_font())
                                .pos(Pos::new(HPos::Center, v)),
                        ),
                ))
                .map_err(|e| anyhow!("{e:?}"))?;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, 0.0), (n, 0.0)],
                BLACK.stroke_width(1),
            )))
            .map_err(|e| anyhow!("{e:?}"))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::{BootstrapSettings, GroupScore, InputFile};
    use crate::study::evaluate::{ConditionScore, EvalReport, PairedGap};
    use bindscope_core::plot::{audit_svg, svg_text_contents};

    fn step(step: usize, loss: f64) -> StepLog {
        StepLog {
            step,
            loss,
            lr: 2e-4,
            sequences: 8,
            tokens: 900,
            targets: 120,
            seconds: 0.5,
        }
    }

    fn write_log(dir: &Path, steps: &[StepLog]) {
        let text: String = steps
            .iter()
            .map(|s| serde_json::to_string(s).unwrap() + "\n")
            .collect();
        std::fs::write(dir.join("train_log.jsonl"), text).unwrap();
    }

    /// The SVG at `path`, checked to read (every text on the canvas, no overlaps).
    fn read_svg(path: &Path) -> String {
        let svg = std::fs::read_to_string(path).unwrap();
        let problems = audit_svg(&svg);
        assert!(problems.is_empty(), "{}: {problems:?}", path.display());
        svg
    }

    #[test]
    fn the_loss_curve_reads_and_names_no_path() {
        let dir = tempfile::tempdir().unwrap();
        let mut steps: Vec<StepLog> = (1..=60)
            .map(|s| step(s, 3.0 / (1.0 + 0.1 * s as f64) + 0.4))
            .collect();
        // A non-finite step breaks the line and does not stretch the axis.
        steps[30].loss = f64::NAN;
        write_log(dir.path(), &steps);
        let config = serde_json::json!({
            "study": "geb",
            "identity": {
                "command": "geb train",
                "run": {
                    "data": "/home/someone/geb-data",
                    "decoder": "/home/someone/models/SmolLM2-135M-Instruct",
                    "mode": "visual-only",
                    "embedder": {"models": {"vision": "/home/someone/models/dinov2-small", "text": null}},
                },
            },
        });
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        let written = train_plots(dir.path()).unwrap();
        assert_eq!(written, vec![dir.path().join("loss_curve.svg")]);
        let svg = read_svg(&written[0]);
        let texts = svg_text_contents(&svg);
        assert!(!svg.contains("/home/someone"), "{texts:?}");
        assert!(
            texts.iter().any(|t| t.contains("SmolLM2-135M-Instruct")
                && t.contains("dinov2-small")
                && t.contains("visual-only")),
            "{texts:?}"
        );
        assert!(texts.contains(&"60".to_string()), "{texts:?}");
        assert!(
            texts
                .iter()
                .any(|t| t.contains("nats per supervised token")),
            "{texts:?}"
        );
        assert!(!texts.iter().any(|t| t.contains("NaN")), "{texts:?}");

        // One step, no config.json: a plain title, the step on the axis.
        let one = tempfile::tempdir().unwrap();
        write_log(one.path(), &[step(1, 2.5)]);
        let written = train_plots(one.path()).unwrap();
        let svg = read_svg(&written[0]);
        let texts = svg_text_contents(&svg);
        assert!(
            texts.contains(&"Readout training loss".to_string()),
            "{texts:?}"
        );
        assert!(texts.contains(&"1".to_string()), "{texts:?}");

        // No log: nothing to draw.
        let none = tempfile::tempdir().unwrap();
        assert!(train_plots(none.path()).unwrap().is_empty());
    }

    #[test]
    fn a_malformed_log_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let good = serde_json::to_string(&step(1, 2.0)).unwrap();
        std::fs::write(
            dir.path().join("train_log.jsonl"),
            format!("{good}\n{{\"step\": 2, \"loss\": \n{good}\n"),
        )
        .unwrap();
        let err = train_plots(dir.path()).unwrap_err().to_string();
        assert!(err.contains("train_log.jsonl line 2"), "{err}");
        assert!(!dir.path().join("loss_curve.svg").exists());
    }

    fn group(name: &str, items: usize, score: f64, ci95: Option<[f64; 2]>) -> GroupScore {
        GroupScore {
            name: name.into(),
            items,
            score,
            ci95,
        }
    }

    /// Writes `<dir>/score-<control>/summary.json` as `geb score` does.
    fn write_summary(
        dir: &Path,
        control: Control,
        overall: GroupScore,
        categories: Vec<GroupScore>,
    ) {
        let items = overall.items;
        let summary = Summary {
            reference: "lmms-eval 0.7.3".into(),
            reasoning_tags: None,
            predictions: InputFile {
                path: dir.join(format!("predictions-{}.jsonl", control.name())),
                sha256: "0".repeat(64),
                items,
            },
            pair: None,
            bootstrap: BootstrapSettings {
                method: "percentile".into(),
                resamples: 1000,
                paired_resamples: 2000,
                seed: 7,
                percentiles: [2.5, 97.5],
            },
            overall,
            categories,
            sources: Vec::new(),
            paired: None,
        };
        let d = dir.join(format!("score-{}", control.name()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("summary.json"),
            serde_json::to_string_pretty(&summary).unwrap(),
        )
        .unwrap();
    }

    fn write_report(dir: &Path, conditions: Vec<ConditionScore>) {
        let report = EvalReport {
            dir: PathBuf::from("/home/someone/runs/geb/eval-1"),
            conditions,
            seconds_per_item: 0.2,
            mismatch_left_out: Vec::new(),
            shuffled_same_image: 0,
        };
        std::fs::write(
            dir.join("eval.json"),
            serde_json::to_string_pretty(&report).unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn eval_plots_draw_categories_and_gaps() {
        let dir = tempfile::tempdir().unwrap();
        write_report(
            dir.path(),
            vec![
                ConditionScore {
                    control: Control::Matched,
                    items: 30,
                    score: 46.7,
                    ci95: Some([30.0, 63.3]),
                    gap: None,
                },
                ConditionScore {
                    control: Control::Zero,
                    items: 30,
                    score: 20.0,
                    ci95: Some([6.7, 36.7]),
                    gap: Some(PairedGap {
                        matched_minus_control_pp: 26.7,
                        ci95: Some([10.0, 43.3]),
                    }),
                },
                // No intervals (no resamples): bars without whiskers.
                ConditionScore {
                    control: Control::Shuffled,
                    items: 30,
                    score: 50.0,
                    ci95: None,
                    gap: Some(PairedGap {
                        matched_minus_control_pp: -3.3,
                        ci95: None,
                    }),
                },
            ],
        );
        write_summary(
            dir.path(),
            Control::Matched,
            group("overall", 30, 46.7, Some([30.0, 63.3])),
            vec![
                // Out of report order on purpose: the plot orders categories itself.
                group("document", 10, 40.0, Some([10.0, 70.0])),
                group("natural", 10, 60.0, Some([30.0, 90.0])),
                group("scene_text", 10, 40.0, Some([20.0, 70.0])),
            ],
        );
        write_summary(
            dir.path(),
            Control::Zero,
            group("overall", 30, 20.0, Some([6.7, 36.7])),
            vec![
                group("natural", 10, 30.0, Some([10.0, 60.0])),
                group("scene_text", 10, 10.0, Some([0.0, 30.0])),
                group("document", 10, 20.0, Some([0.0, 50.0])),
            ],
        );
        // The shuffled condition has no summary: its overall bar only.
        let written = eval_plots(dir.path()).unwrap();
        assert_eq!(
            written,
            vec![
                dir.path().join("categories.svg"),
                dir.path().join("control_gaps.svg")
            ]
        );

        let svg = read_svg(&written[0]);
        let texts = svg_text_contents(&svg);
        assert!(!svg.contains("/home/someone"), "{texts:?}");
        for t in ["overall", "natural", "scene_text", "document"] {
            assert!(texts.contains(&t.to_string()), "{t}: {texts:?}");
        }
        let at = |t: &str| texts.iter().position(|x| x == t).unwrap();
        assert!(at("overall") < at("natural") && at("natural") < at("scene_text"));
        assert!(
            texts.contains(&"shuffled (30 items, no CI)".to_string()),
            "{texts:?}"
        );
        assert!(texts.contains(&"46.7".to_string()), "{texts:?}");

        let svg = read_svg(&written[1]);
        let texts = svg_text_contents(&svg);
        assert!(texts.contains(&"zero".to_string()), "{texts:?}");
        assert!(texts.contains(&"shuffled (no CI)".to_string()), "{texts:?}");
        assert!(texts.contains(&"+26.7".to_string()), "{texts:?}");
        assert!(texts.contains(&"-3.3".to_string()), "{texts:?}");
        assert!(!texts.iter().any(|t| t == "matched"), "{texts:?}");
    }

    /// A text-only readout is evaluated without controls: the categories only, no gap plot.
    #[test]
    fn eval_plots_without_controls_draw_no_gaps() {
        let dir = tempfile::tempdir().unwrap();
        write_report(
            dir.path(),
            vec![ConditionScore {
                control: Control::Matched,
                items: 12,
                score: 25.0,
                ci95: Some([8.3, 50.0]),
                gap: None,
            }],
        );
        let written = eval_plots(dir.path()).unwrap();
        assert_eq!(written, vec![dir.path().join("categories.svg")]);
        read_svg(&written[0]);
        assert!(!dir.path().join("control_gaps.svg").exists());

        // A missing eval.json is named.
        let empty = tempfile::tempdir().unwrap();
        let err = eval_plots(empty.path()).unwrap_err().to_string();
        assert!(err.contains("eval.json"), "{err}");
    }
}
