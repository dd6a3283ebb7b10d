//! SVG plots with plotters: the palette, the canvas, the axes and the labels every study's
//! plots share.
//!
//! - [`render`] / [`render_sized`]: a white SVG canvas, written atomically.
//! - [`Axis`]: a plotters coordinate whose ticks are chosen here and labelled without float
//!   noise: [`Axis::linear`] (1–2–5 steps, labels with exactly the decimals the step needs:
//!   `0.3`, never `0.30000000000000004`), [`Axis::integer`] (counts, indices, epochs: `5`,
//!   never `5.0`), [`Axis::log`] (whole decades covering the data, for spectra) and
//!   [`Axis::categories`] (bar charts). Pass it to `build_cartesian_2d`; its labels need no
//!   formatter, and [`Axis::label_area`] is the room its tick labels take.
//! - [`short_labels`]: the name of a model for a title or legend (the last path component, or
//!   as many as tell the models apart), never a machine path.
//! - [`interval`]: a 95% confidence interval as a reader should see it, with the reason when
//!   there is none.
//! - [`audit_svg`]: what a reader could not read in a written plot (text off the canvas, tick
//!   labels on top of each other); the plot tests of every study run it.

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use std::ops::Range;
use std::path::Path;

/// The tab10 palette's first eight colours, shared by every plot.
pub const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The default canvas size in pixels (width, height).
pub const SIZE: (u32, u32) = (720, 480);

/// The font size (plotters units) of tick labels, legends and point labels.
pub const LABEL_FONT: u32 = 14;

/// The font size (plotters units) of axis descriptions.
pub const DESC_FONT: u32 = 15;

/// The font size (plotters units) of titles.
pub const TITLE_FONT: u32 = 18;

/// The pixel size plotters' SVG backend writes for a font of `size` units (it scales every
/// font by 0.8065: a 12-unit label is 9.68 px).
pub fn font_px(size: u32) -> f64 {
    f64::from(size) / 1.24
}

/// The width in pixels of `text` at `size` font units, estimated (sans-serif averages about
/// 0.6 em per character, digits included); used to size label areas and by [`audit_svg`].
pub fn text_width(text: &str, size: u32) -> f64 {
    text.chars().count() as f64 * 0.6 * font_px(size)
}

/// Draws a [`SIZE`] SVG with `draw` on a white canvas and writes it atomically to `path`.
///
/// # Errors
/// What `draw` returns, a plotters drawing error, or the write of `path`.
pub fn render(
    path: &Path,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>,
) -> Result<()> {
    render_sized(path, SIZE, draw)
}

/// Draws an SVG of `size` pixels with `draw` on a white canvas and writes it atomically.
///
/// # Errors
/// What `draw` returns, a plotters drawing error, or the write of `path`.
pub fn render_sized(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>,
) -> Result<()> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
        draw(&root)?;
        root.present().map_err(|e| anyhow!("{e:?}"))?;
    }
    crate::fsutil::write_atomic(path, svg.as_bytes())?;
    Ok(())
}

/// How an [`Axis`] maps values to pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    Linear,
    Log,
}

/// How a [`side_legend`] entry is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A filled box (bars).
    Box,
    /// A line (curves).
    Line,
    /// A dashed line (a reference value).
    Dashed,
}

/// The width in pixels a [`side_legend`] with these names takes (for `ChartBuilder::margin_right`).
pub fn side_legend_width(names: &[&str]) -> u32 {
    let widest = names
        .iter()
        .map(|n| text_width(n, LABEL_FONT))
        .fold(0.0, f64::max);
    (widest + 44.0).ceil() as u32
}

/// Draws a legend on `root` in the column right of the plot: entries from the top-left pixel
/// `(x, y)` down, each a mark in its colour and its name. With `margin_right` of
/// [`side_legend_width`] the legend never covers data.
///
/// # Errors
/// A plotters drawing error.
pub fn side_legend(
    root: &DrawingArea<SVGBackend, Shift>,
    (x, y): (i32, i32),
    items: &[(String, RGBColor, Mark)],
) -> Result<()> {
    let line = (font_px(LABEL_FONT) * 1.8).round() as i32;
    for (i, (name, c, mark)) in items.iter().enumerate() {
        let cy = y + i as i32 * line + line / 2;
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e:?}");
        match mark {
            Mark::Box => root
                .draw(&Rectangle::new([(x, cy - 6), (x + 16, cy + 6)], c.filled()))
                .map_err(e)?,
            Mark::Line => root
                .draw(&PathElement::new(
                    vec![(x, cy), (x + 18, cy)],
                    c.stroke_width(2),
                ))
                .map_err(e)?,
            Mark::Dashed => {
                for k in 0..3 {
                    root.draw(&PathElement::new(
                        vec![(x + k * 7, cy), (x + k * 7 + 4, cy)],
                        c.stroke_width(1),
                    ))
                    .map_err(e)?;
                }
            }
        }
        root.draw(&Text::new(
            name.clone(),
            (x + 24, cy),
            TextStyle::from(("sans-serif", LABEL_FONT).into_font()).pos(
                plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Left,
                    plotters::style::text_anchor::VPos::Center,
                ),
            ),
        ))
        .map_err(e)?;
    }
    Ok(())
}

/// An axis with its own ticks and labels: a plotters coordinate (`Ranged<ValueType = f64>`)
/// for `ChartBuilder::build_cartesian_2d`, labelled through [`Axis::label`].
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    lo: f64,
    hi: f64,
    scale: Scale,
    ticks: Vec<f64>,
    minor: Vec<f64>,
    /// Decimals of a linear axis' labels.
    decimals: usize,
    /// Category names, one per tick ([`Axis::categories`]).
    names: Option<Vec<String>>,
}

/// The 1–2–5 step (`m · 10^e`, `m ∈ {1, 2, 5}`) that cuts `span` into at most `max` steps,
/// with its exponent `e`.
fn nice_step(span: f64, max: usize) -> (f64, i32) {
    let raw = span / max.max(1) as f64;
    let mut e = raw.log10().floor() as i32;
    loop {
        for m in [1.0, 2.0, 5.0] {
            let step = m * 10f64.powi(e);
            if step >= raw * (1.0 - 1e-9) {
                return (step, e);
            }
        }
        e += 1;
    }
}

/// The multiples of `step` in `[lo, hi]`, each computed as `k · step` (no accumulated error).
fn multiples(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// `lo..hi` made usable: finite, ordered, not empty (a single value gets ±0.5, or ±5%).
fn usable(lo: f64, hi: f64) -> (f64, f64) {
    let (lo, hi) = match (lo.is_finite(), hi.is_finite()) {
        (true, true) => (lo.min(hi), lo.max(hi)),
        (true, false) => (lo, lo),
        (false, true) => (hi, hi),
        (false, false) => (0.0, 1.0),
    };
    if hi > lo {
        (lo, hi)
    } else {
        let pad = if lo == 0.0 { 0.5 } else { lo.abs() * 0.05 };
        (lo - pad, hi + pad)
    }
}

impl Axis {
    /// A linear axis over `lo..hi` with 1–2–5 ticks (at most 8) inside it.
    pub fn linear(lo: f64, hi: f64) -> Self {
        let (lo, hi) = usable(lo, hi);
        let (step, e) = nice_step(hi - lo, 8);
        Self {
            lo,
            hi,
            scale: Scale::Linear,
            ticks: multiples(lo, hi, step),
            minor: Vec::new(),
            decimals: (-e).max(0) as usize,
            names: None,
        }
    }

    /// A linear axis over `lo..hi` for whole numbers (blocks, epochs, indices): ticks at
    /// integers only (step 1, 2, 5, 10, …; at most 10), labelled without decimals.
    pub fn integer(lo: f64, hi: f64) -> Self {
        let (lo, hi) = usable(lo, hi);
        let (step, _) = nice_step(hi - lo, 10);
        let step = step.max(1.0).round();
        Self {
            lo,
            hi,
            scale: Scale::Linear,
            ticks: multiples(lo, hi, step),
            minor: Vec::new(),
            decimals: 0,
            names: None,
        }
    }

    /// A log axis covering the positive data range `lo..hi` with whole decades
    /// (`10^⌊log₁₀ lo⌋ ..= 10^⌈log₁₀ hi⌉`), so the smallest and largest value are inside it.
    /// Ticks at every decade, also at 2× and 5× when the axis spans at most two decades;
    /// light grid lines at 2…9× each decade. Non-positive bounds are replaced by the other one
    /// (or 1).
    pub fn log(lo: f64, hi: f64) -> Self {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        let (lo, hi) = match (pos(lo), pos(hi)) {
            (true, true) => (lo.min(hi), lo.max(hi)),
            (true, false) => (lo, lo),
            (false, true) => (hi, hi),
            (false, false) => (1.0, 1.0),
        };
        let e0 = (lo.log10() + 1e-9).floor() as i32;
        let mut e1 = (hi.log10() - 1e-9).ceil() as i32;
        if e1 <= e0 {
            e1 = e0 + 1;
        }
        let few = e1 - e0 <= 2;
        let mut ticks = Vec::new();
        let mut minor = Vec::new();
        for e in e0..=e1 {
            let d = 10f64.powi(e);
            ticks.push(d);
            if e < e1 {
                for m in 2..=9 {
                    let v = f64::from(m) * d;
                    if few && (m == 2 || m == 5) {
                        ticks.push(v);
                    } else {
                        minor.push(v);
                    }
                }
            }
        }
        Self {
            lo: 10f64.powi(e0),
            hi: 10f64.powi(e1),
            scale: Scale::Log,
            ticks,
            minor,
            decimals: 0,
            names: None,
        }
    }

    /// A category axis `0..names.len()`: category `i` occupies `i..i + 1`, its name is the
    /// label at its centre `i + 0.5`.
    pub fn categories(names: &[String]) -> Self {
        let n = names.len().max(1) as f64;
        Self {
            lo: 0.0,
            hi: n,
            scale: Scale::Linear,
            ticks: (0..names.len()).map(|i| i as f64 + 0.5).collect(),
            minor: Vec::new(),
            decimals: 0,
            names: Some(names.to_vec()),
        }
    }

    /// The axis range (a log axis: the covering decades).
    pub fn bounds(&self) -> (f64, f64) {
        (self.lo, self.hi)
    }

    /// The tick positions.
    pub fn ticks(&self) -> &[f64] {
        &self.ticks
    }

    /// The label of the tick at `v`: as many decimals as the axis' step needs (a log axis: as
    /// many as the value needs, `1e-5` style below 10⁻⁴ and from 10⁶), no `-0`, a category's
    /// name.
    pub fn label(&self, v: f64) -> String {
        if let Some(names) = &self.names {
            let i = (v - 0.5).round();
            return if i >= 0.0 && (v - 0.5 - i).abs() < 1e-6 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            };
        }
        let s = match self.scale {
            Scale::Linear => format!("{v:.*}", self.decimals),
            Scale::Log => log_label(v),
        };
        if s.strip_prefix('-')
            .is_some_and(|r| r.chars().all(|c| c == '0' || c == '.'))
        {
            s[1..].to_string()
        } else {
            s
        }
    }

    /// The widest tick label in pixels at [`LABEL_FONT`].
    pub fn widest_label(&self) -> f64 {
        self.ticks
            .iter()
            .map(|&t| text_width(&self.label(t), LABEL_FONT))
            .fold(0.0, f64::max)
    }

    /// The room (pixels) a y axis' tick labels and its [`DESC_FONT`] description take: for
    /// `ChartBuilder::y_label_area_size`.
    pub fn label_area(&self) -> u32 {
        (self.widest_label() + 2.0 * font_px(DESC_FONT) + 14.0).ceil() as u32
    }

    fn fraction(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => (v - self.lo) / (self.hi - self.lo),
            Scale::Log => {
                let v = if v > 0.0 { v } else { self.lo };
                (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
            }
        }
    }
}

/// A log-axis tick label: `0.001`, `0.02`, `1`, `50`, `1000`; `1e-5`, `2e6` beyond.
fn log_label(v: f64) -> String {
    if v <= 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let e = (v.log10() + 1e-9).floor() as i32;
    let m = (v / 10f64.powi(e)).round();
    if !(-4..6).contains(&e) {
        format!("{m}e{e}")
    } else {
        format!("{v:.*}", (-e).max(0) as usize)
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let f = self.fraction(*value);
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.minor.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format_ext(&self, value: &f64) -> String {
        self.label(*value)
    }
}

/// Short names for `specs` (model ids or paths) in titles and legends: each spec's last path
/// component, or its last two, three, … when the last ones do not tell the specs apart.
/// `facebook/dinov2-small` → `dinov2-small`; `runs/a/model`, `runs/b/model` → `a/model`,
/// `b/model`.
pub fn short_labels(specs: &[&str]) -> Vec<String> {
    let parts: Vec<Vec<&str>> = specs
        .iter()
        .map(|s| {
            s.split(['/', '\\'])
                .filter(|p| !p.is_empty() && *p != ".")
                .collect()
        })
        .collect();
    let tail = |p: &Vec<&str>, k: usize| p[p.len().saturating_sub(k)..].join("/");
    let longest = parts.iter().map(Vec::len).max().unwrap_or(1).max(1);
    for k in 1..=longest {
        let names: Vec<String> = parts.iter().map(|p| tail(p, k)).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.len() == names.len() {
            return names;
        }
    }
    parts.iter().map(|p| tail(p, longest)).collect()
}

/// The short name of one model spec ([`short_labels`] of one).
pub fn short_label(spec: &str) -> String {
    short_labels(&[spec]).remove(0)
}

/// A 95% confidence interval of a mean as a reader should see it, from the values computed
/// (`low`, `high`, `n`; `decimals` after the point):
///
/// - `n = 0`: `no 95% CI (no values)`; `n = 1`: `no 95% CI at n = 1 (one value has no
///   spread)` — the t-interval is undefined there, which the numbers hold as NaN;
/// - a non-finite end otherwise: `no 95% CI (its ends are not finite)`;
/// - `floor`: the least value the quantity can take (0 for a rate, 1 for an effective rank).
///   A t-interval reaching below it (small n, large spread) is shown clipped to the floor and
///   says so, with the end as computed: `95% CI 1.000 to 5.310 (t-interval from -2.120,
///   clipped at 1)`. The record files keep the ends as computed.
///
/// Ends are joined by ` to ` (a dash between two negative numbers reads as a minus).
pub fn interval(low: f64, high: f64, n: usize, floor: Option<f64>, decimals: usize) -> String {
    let f = |v: f64| format!("{v:.decimals$}");
    match n {
        0 => return "no 95% CI (no values)".into(),
        1 => return "no 95% CI at n = 1 (one value has no spread)".into(),
        _ => {}
    }
    if !(low.is_finite() && high.is_finite()) {
        return "no 95% CI (its ends are not finite)".into();
    }
    match floor {
        Some(fl) if low < fl => format!(
            "95% CI {} to {} (t-interval from {}, clipped at {fl})",
            f(fl),
            f(high.max(fl)),
            f(low),
        ),
        _ => format!("95% CI {} to {}", f(low), f(high)),
    }
}

/// One `<text>` element of an SVG as plotters writes it.
#[derive(Debug, Clone)]
struct SvgText {
    x: f64,
    y: f64,
    size: f64,
    anchor: String,
    rotated: bool,
    text: String,
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let i = tag.find(&key)? + key.len();
    let j = tag[i..].find('"')? + i;
    Some(tag[i..j].to_string())
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

fn svg_texts(svg: &str) -> Vec<SvgText> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<text") {
        let Some(close) = rest[i..].find('>') else {
            break;
        };
        let tag = &rest[i..i + close];
        let body_start = i + close + 1;
        let Some(end) = rest[body_start..].find("</text>") else {
            break;
        };
        let text = unescape(rest[body_start..body_start + end].trim());
        let num = |n: &str| attr(tag, n).and_then(|v| v.parse::<f64>().ok());
        out.push(SvgText {
            x: num("x").unwrap_or(0.0),
            y: num("y").unwrap_or(0.0),
            size: num("font-size").unwrap_or(10.0),
            anchor: attr(tag, "text-anchor").unwrap_or_else(|| "start".into()),
            rotated: attr(tag, "transform").is_some_and(|t| t.contains("rotate")),
            text,
        });
        rest = &rest[body_start + end..];
    }
    out
}

/// Everything a reader could not read in the SVG `svg` as plotters writes it: a text element
/// (estimated at 0.6 em per character) reaching outside the canvas, and two unrotated texts
/// on top of each other (tick labels that overlap). Empty when the plot reads. For tests.
pub fn audit_svg(svg: &str) -> Vec<String> {
    let dim = |name: &str| {
        svg.find("<svg")
            .and_then(|i| attr(&svg[i..], name))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let (w, h) = (dim("width"), dim("height"));
    let texts: Vec<SvgText> = svg_texts(svg)
        .into_iter()
        .filter(|t| !t.text.is_empty())
        .collect();
    let extent = |t: &SvgText| {
        let len = t.text.chars().count() as f64 * 0.6 * t.size;
        let (a, b) = match t.anchor.as_str() {
            "middle" => (-len / 2.0, len / 2.0),
            "end" => (-len, 0.0),
            _ => (0.0, len),
        };
        if t.rotated {
            // rotate(270) about (x, y): the text runs upwards from y.
            ((t.x - t.size / 2.0, t.x + t.size / 2.0), (t.y - b, t.y - a))
        } else {
            ((t.x + a, t.x + b), (t.y - t.size / 2.0, t.y + t.size / 2.0))
        }
    };
    let mut problems = Vec::new();
    for t in &texts {
        let ((x0, x1), (y0, y1)) = extent(t);
        if x0 < -0.5 || x1 > w + 0.5 || y0 < -0.5 || y1 > h + 0.5 {
            problems.push(format!(
                "'{}' reaches outside the {w}×{h} canvas (x {x0:.0}..{x1:.0}, y {y0:.0}..{y1:.0})",
                t.text
            ));
        }
    }
    for (i, a) in texts.iter().enumerate() {
        for b in &texts[i + 1..] {
            if a.rotated || b.rotated || (a.y - b.y).abs() > 0.5 {
                continue;
            }
            let ((a0, a1), _) = extent(a);
            let ((b0, b1), _) = extent(b);
            if a0 < b1 - 1.0 && b0 < a1 - 1.0 {
                problems.push(format!("'{}' and '{}' overlap", a.text, b.text));
            }
        }
    }
    problems
}

/// The texts of the SVG `svg` (every `<text>` element's content), for tests.
pub fn svg_text_contents(svg: &str) -> Vec<String> {
    svg_texts(svg).into_iter().map(|t| t.text).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(a: &Axis) -> Vec<String> {
        a.ticks().iter().map(|&t| a.label(t)).collect()
    }

    #[test]
    fn linear_labels_have_no_float_noise() {
        let a = Axis::linear(0.0, 1.0);
        let l = labels(&a);
        assert_eq!(l, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        // 0.1 · 3 is 0.30000000000000004 in f64: the label is 0.3.
        let a = Axis::linear(0.0, 0.7);
        assert_eq!(
            labels(&a),
            ["0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7"]
        );
        let a = Axis::linear(-0.25, 0.25);
        assert!(
            labels(&a).iter().all(|l| l != "-0.0" && l != "-0"),
            "{:?}",
            labels(&a)
        );
        assert_eq!(Axis::linear(0.0, 14.3).label(10.0), "10");
        assert_eq!(labels(&Axis::linear(0.0, 0.0012)).last().unwrap(), "0.0012");
    }

    #[test]
    fn integer_axes_label_integers() {
        let a = Axis::integer(0.5, 12.5);
        let l = labels(&a);
        assert_eq!(l, ["2", "4", "6", "8", "10", "12"]);
        // Two blocks: ticks at 1 and 2 only, never 1.5.
        let a = Axis::integer(0.5, 2.5);
        assert_eq!(labels(&a), ["1", "2"]);
        let a = Axis::integer(1.0, 30.0);
        assert_eq!(labels(&a), ["5", "10", "15", "20", "25", "30"]);
        assert!(
            Axis::integer(1.0, 1000.0)
                .ticks()
                .iter()
                .all(|t| t.fract() == 0.0)
        );
    }

    #[test]
    fn log_axes_cover_the_data_range() {
        // The spectrum of the issue: values from 1 down to 0.033.
        let a = Axis::log(0.033, 1.0);
        let (lo, hi) = a.bounds();
        assert!(lo <= 0.033 && hi >= 1.0, "{lo}..{hi}");
        assert_eq!(
            labels(&a),
            ["0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1"]
        );
        let a = Axis::log(6e-5, 1.0);
        assert_eq!(a.bounds().0, 1e-5);
        assert_eq!(labels(&a), ["1e-5", "0.0001", "0.001", "0.01", "0.1", "1"]);
        // Non-positive data fall back to the positive bound.
        let a = Axis::log(0.0, 1.0);
        assert!(a.bounds().0 > 0.0);
        // Mapping: decades are evenly spaced.
        let a = Axis::log(0.01, 1.0);
        assert_eq!(a.map(&0.1, (0, 100)), 50);
    }

    #[test]
    fn categories_label_their_centres() {
        let a = Axis::categories(&["gap".into(), "fovea".into()]);
        assert_eq!(labels(&a), ["gap", "fovea"]);
        assert_eq!(a.label(1.0), "");
    }

    #[test]
    fn short_labels_drop_directories_and_tell_models_apart() {
        assert_eq!(
            short_labels(&["/data/models/dinov2", "facebook/dinov2-small"]),
            ["dinov2", "dinov2-small"]
        );
        assert_eq!(
            short_labels(&["/x/run1/model", "/x/run2/model/"]),
            ["run1/model", "run2/model"]
        );
        assert_eq!(short_label("./tiny"), "tiny");
    }

    #[test]
    fn intervals_say_why_there_is_none_and_never_pretend() {
        let one = interval(f64::NAN, f64::NAN, 1, Some(1.0), 3);
        assert_eq!(one, "no 95% CI at n = 1 (one value has no spread)");
        assert!(!one.contains("NaN"));
        assert_eq!(
            interval(f64::NAN, f64::NAN, 0, None, 3),
            "no 95% CI (no values)"
        );
        assert_eq!(interval(2.0, 3.5, 5, Some(1.0), 3), "95% CI 2.000 to 3.500");
        // n = 2 with a large spread: the t-interval reaches below the floor; the text says
        // so and shows the computed end.
        assert_eq!(
            interval(-2.12, 5.31, 2, Some(1.0), 2),
            "95% CI 1.00 to 5.31 (t-interval from -2.12, clipped at 1)"
        );
        // A rate (floor 0).
        assert_eq!(
            interval(-0.05, 0.4, 3, Some(0.0), 2),
            "95% CI 0.00 to 0.40 (t-interval from -0.05, clipped at 0)"
        );
        // Without a floor a negative end is printed as computed, ends joined by "to".
        assert_eq!(interval(-2.0, -1.0, 3, None, 1), "95% CI -2.0 to -1.0");
        assert!(interval(f64::INFINITY, 1.0, 3, None, 1).starts_with("no 95% CI"));
    }

    #[test]
    fn the_audit_finds_text_off_the_canvas_and_overlapping_labels() {
        let svg = r#"<svg width="100" height="50" viewBox="0 0 100 50" xmlns="http://www.w3.org/2000/svg">
<text x="2" y="10" dy="0.76em" text-anchor="start" font-size="10">/a/very/long/path/that/is/cut</text>
<text x="50" y="40" text-anchor="middle" font-size="10">ab</text>
<text x="55" y="40" text-anchor="middle" font-size="10">cd</text>
</svg>"#;
        let p = audit_svg(svg);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("outside"), "{p:?}");
        assert!(p[1].contains("overlap"), "{p:?}");
        let ok = r#"<svg width="100" height="50"><text x="50" y="20" text-anchor="middle" font-size="10">fine</text></svg>"#;
        assert!(audit_svg(ok).is_empty());
    }

    /// A plot drawn on an [`Axis`] pair: labels come from the axes, and the audit passes.
    #[test]
    fn a_chart_on_axes_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svg");
        let x = Axis::integer(1.0, 30.0);
        let y = Axis::log(0.033, 1.0);
        render(&path, |root| {
            let mut chart = ChartBuilder::on(root)
                .margin(16)
                .x_label_area_size(44)
                .y_label_area_size(y.label_area())
                .build_cartesian_2d(x.clone(), y.clone())
                .map_err(|e| anyhow!("{e:?}"))?;
            chart
                .configure_mesh()
                .label_style(("sans-serif", LABEL_FONT))
                .x_desc("index")
                .y_desc("value")
                .draw()
                .map_err(|e| anyhow!("{e:?}"))?;
            Ok(())
        })
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(audit_svg(&svg).is_empty(), "{:?}", audit_svg(&svg));
        let texts = svg_text_contents(&svg);
        assert!(texts.contains(&"0.02".to_string()), "{texts:?}");
        assert!(texts.contains(&"25".to_string()), "{texts:?}");
        assert!(!texts.iter().any(|t| t.ends_with(".0")), "{texts:?}");
    }
}
