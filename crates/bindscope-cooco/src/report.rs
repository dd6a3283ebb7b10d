//! What a COOCO run reports (§5–§7, App. C): the items, the aggregates with bootstrap
//! intervals, the figures, and the attention allocation.
//!
//! - `items.jsonl` / `items.csv`: one row per image × condition (the answer, its metrics, and
//!   `r_l` per vision layer where the instance is in the attention analysis).
//! - `summary.json`: the means over distinct answers (a level-0 answer, recorded once per
//!   area, counts once).
//! - `aggregates.csv` / `aggregates.json`: per relatedness (`rel_level`) × noise area × noise
//!   level, the count and for each metric (`clip_score`, `ref_clip_score`, `accuracy`,
//!   `accuracy_levenshtein`, `sim_target`, `sim_scene`) the mean and a 95% percentile
//!   bootstrap interval over the group's rows ([`bindscope_core::bootstrap`], numpy's
//!   percentile rule, COOCO's stream namespace, one stream per group and metric).
//! - `fig_accuracy.svg`, `fig_ref_clip_score.svg`, `fig_sim_scene.svg` (as the paper's
//!   Figures 3–5): one panel per noise area, the metric against the noise level, one line per
//!   relatedness with its intervals.
//! - The attention report ([`attention_report`]): `attention.csv` (the instances of the analysis, `r_l` per layer)
//!   and `attention_<area>.svg`: layer × noise level heatmaps of the mean `r_l` over all
//!   instances, the correct ones, the incorrect ones, and correct − incorrect on a diverging
//!   scale.

use crate::CoocoError;
use crate::run::ScoredRecord;
use anyhow::anyhow;
use bindscope_core::bootstrap::{Kind, Resampler, numpy_mean};
use bindscope_core::plot::{
    Axis, COLORS, DESC_FONT, LABEL_FONT, Mark, TITLE_FONT, render_sized, side_legend,
    side_legend_width, text_width,
};
use bindscope_core::run::{write_csv_table, write_json};
use plotters::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// `"cooco"`: the study's namespace in [`bindscope_core::rng::stream`] key paths.
pub const NAMESPACE: u64 = 0x0063_6f6f_636f;

/// The metrics aggregated, in output order.
pub const METRICS: [&str; 6] = [
    "clip_score",
    "ref_clip_score",
    "accuracy",
    "accuracy_levenshtein",
    "sim_target",
    "sim_scene",
];

/// The relatedness levels in the paper's order.
const REL_ORDER: [&str; 6] = ["original", "clean", "same_target", "high", "middle", "low"];

fn metric(r: &ScoredRecord, name: &str) -> f64 {
    let s = &r.scores;
    match name {
        "clip_score" => s.clip_score,
        "ref_clip_score" => s.ref_clip_score,
        "accuracy" => f64::from(u8::from(s.correct)),
        "accuracy_levenshtein" => f64::from(u8::from(s.correct_levenshtein)),
        "sim_target" => s.sim_target,
        "sim_scene" => s.sim_scene,
        _ => f64::NAN,
    }
}

/// The means over distinct answers.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Rows (image × condition; a level-0 answer has one row per area).
    pub rows: usize,
    /// Distinct answers (a level-0 answer counted once).
    pub answers: usize,
    /// Mean per metric of [`METRICS`] over the distinct answers.
    pub means: BTreeMap<String, f64>,
}

/// One metric of one group.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// The mean.
    pub mean: f64,
    /// The 95% interval `[lo, hi]` (`None` for a single row).
    pub ci95: Option<[f64; 2]>,
}

/// One relatedness × area × level group.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    /// `rel_level`.
    pub rel_level: String,
    /// The noise area.
    pub area: String,
    /// The noise level.
    pub level: f64,
    /// Rows.
    pub n: usize,
    /// Per metric.
    pub metrics: BTreeMap<String, Cell>,
}

fn rel_rank(r: &str) -> usize {
    REL_ORDER
        .iter()
        .position(|x| *x == r)
        .unwrap_or(REL_ORDER.len())
}

fn err(e: impl std::fmt::Display) -> CoocoError {
    CoocoError::Invalid(e.to_string())
}

/// The aggregates of `items` (see the [module docs](self)).
pub fn aggregate(items: &[ScoredRecord], resamples: usize, seed: u64) -> Vec<Group> {
    let mut groups: BTreeMap<(usize, String, String, u64), Vec<&ScoredRecord>> = BTreeMap::new();
    for r in items {
        let g = &r.generation;
        groups
            .entry((
                rel_rank(&g.rel_level),
                g.rel_level.clone(),
                g.area.name().to_string(),
                g.level.to_bits(),
            ))
            .or_default()
            .push(r);
    }
    let mut out = Vec::new();
    for (gi, ((_, rel, area, level), rows)) in groups.into_iter().enumerate() {
        let mut metrics = BTreeMap::new();
        for (mi, name) in METRICS.iter().enumerate() {
            let v: Vec<f64> = rows.iter().map(|r| metric(r, name)).collect();
            let ci95 = (v.len() > 1 && resamples > 0).then(|| {
                let i = Resampler::new(
                    NAMESPACE,
                    seed,
                    Kind::Marginal,
                    (gi * METRICS.len() + mi) as u64,
                    v.len(),
                    resamples,
                )
                .marginal(&v);
                [i.lo, i.hi]
            });
            metrics.insert(
                name.to_string(),
                Cell {
                    mean: numpy_mean(&v),
                    ci95,
                },
            );
        }
        out.push(Group {
            rel_level: rel,
            area,
            level: f64::from_bits(level),
            n: rows.len(),
            metrics,
        });
    }
    out
}

/// Writes every report file of the [module docs](self) into `dir`.
///
/// # Errors
/// [`CoocoError::Invalid`] for an empty run or a failed write or plot.
pub fn write(
    dir: &Path,
    items: &[ScoredRecord],
    resamples: usize,
    seed: u64,
) -> Result<Summary, CoocoError> {
    if items.is_empty() {
        return Err(err(format!("{}: no scored rows to report", dir.display())));
    }
    let mut text = String::new();
    for r in items {
        text.push_str(&serde_json::to_string(r).expect("serializes"));
        text.push('\n');
    }
    let p = dir.join("items.jsonl");
    bindscope_core::fsutil::write_atomic(&p, text.as_bytes())
        .map_err(|source| CoocoError::Io { path: p, source })?;
    let layers = items
        .iter()
        .map(|r| r.generation.ratios.len())
        .max()
        .unwrap_or(0);
    let mut header: Vec<String> = [
        "image",
        "area",
        "level",
        "rel_level",
        "scene",
        "target",
        "expected",
        "output",
        "stopped_on_eos",
        "clip_score",
        "ref_clip_score",
        "sim_target",
        "sim_scene",
        "correct",
        "levenshtein",
        "correct_levenshtein",
        "in_attention",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    header.extend((0..layers).map(|l| format!("ratio_l{l}")));
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| x.to_string());
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|r| {
            let (g, s) = (&r.generation, &r.scores);
            let mut row = vec![
                g.image.clone(),
                g.area.name().into(),
                g.level.to_string(),
                g.rel_level.clone(),
                g.scene.clone(),
                g.target.clone(),
                g.expected.clone(),
                g.output.clone(),
                g.stopped_on_eos.to_string(),
                s.clip_score.to_string(),
                s.ref_clip_score.to_string(),
                s.sim_target.to_string(),
                s.sim_scene.to_string(),
                s.correct.to_string(),
                s.levenshtein.to_string(),
                s.correct_levenshtein.to_string(),
                g.in_attention.to_string(),
            ];
            row.extend((0..layers).map(|l| opt(g.ratios.get(l).copied().flatten())));
            row
        })
        .collect();
    write_csv_table(&dir.join("items.csv"), &header, &rows).map_err(err)?;

    // The means over distinct answers: a level-0 answer is recorded once per area but
    // counted once here.
    let mut seen = std::collections::HashSet::new();
    let distinct: Vec<&ScoredRecord> = items
        .iter()
        .filter(|r| {
            let g = &r.generation;
            let area = if g.level == 0.0 {
                "none"
            } else {
                g.area.name()
            };
            seen.insert((g.image.clone(), area, g.level.to_bits()))
        })
        .collect();
    let means: BTreeMap<String, f64> = METRICS
        .iter()
        .map(|m| {
            let v: Vec<f64> = distinct.iter().map(|r| metric(r, m)).collect();
            (m.to_string(), numpy_mean(&v))
        })
        .collect();
    let summary = Summary {
        rows: items.len(),
        answers: distinct.len(),
        means,
    };
    write_json(&dir.join("summary.json"), &summary).map_err(err)?;

    let groups = aggregate(items, resamples, seed);
    write_json(&dir.join("aggregates.json"), &groups).map_err(err)?;
    let header = [
        "rel_level",
        "area",
        "level",
        "n",
        "metric",
        "mean",
        "ci95_lo",
        "ci95_hi",
    ];
    let mut rows = Vec::new();
    for g in &groups {
        for (m, c) in &g.metrics {
            rows.push(vec![
                g.rel_level.clone(),
                g.area.clone(),
                g.level.to_string(),
                g.n.to_string(),
                m.clone(),
                c.mean.to_string(),
                c.ci95.map_or(String::new(), |i| i[0].to_string()),
                c.ci95.map_or(String::new(), |i| i[1].to_string()),
            ]);
        }
    }
    write_csv_table(&dir.join("aggregates.csv"), &header, &rows).map_err(err)?;
    for (m, label) in [
        ("accuracy", "accuracy (CLIP text similarity > threshold)"),
        ("ref_clip_score", "RefCLIPScore"),
        ("sim_scene", "output–scene similarity"),
    ] {
        metric_figure(&dir.join(format!("fig_{m}.svg")), &groups, m, label).map_err(err)?;
    }
    attention_report(dir, items)?;
    Ok(summary)
}

/// One panel per area: `metric` against the noise level, one line per relatedness.
fn metric_figure(path: &Path, groups: &[Group], metric: &str, label: &str) -> anyhow::Result<()> {
    let mut areas: Vec<&str> = groups.iter().map(|g| g.area.as_str()).collect();
    areas.sort_by_key(|a| ["target", "context", "all"].iter().position(|x| x == a));
    areas.dedup();
    let mut rels: Vec<&str> = groups.iter().map(|g| g.rel_level.as_str()).collect();
    rels.sort_by_key(|r| rel_rank(r));
    rels.dedup();
    let levels: Vec<f64> = groups.iter().map(|g| g.level).collect();
    let (lmin, lmax) = levels
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &l| {
            (a.min(l), b.max(l))
        });
    let x = Axis::linear(lmin, lmax);
    let vals = groups.iter().flat_map(|g| {
        let c = &g.metrics[metric];
        let (lo, hi) = c.ci95.map_or((c.mean, c.mean), |i| (i[0], i[1]));
        [lo, hi]
    });
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let pad = 0.05 * (hi - lo).max(1e-3);
    let y = Axis::linear(lo - pad, hi + pad);
    let names: Vec<String> = rels.iter().map(|r| r.to_string()).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let legend = side_legend_width(&refs);
    let panel_w = 300u32;
    let width = panel_w * areas.len() as u32 + legend + 16;
    render_sized(path, (width, 420), |root| {
        root.draw(&Text::new(
            label.to_string(),
            (12, 8),
            TextStyle::from(("sans-serif", TITLE_FONT).into_font()),
        ))
        .map_err(|e| anyhow!("{e:?}"))?;
        let (plots, side) = root.split_horizontally(width - legend);
        let panels = plots.margin(32, 0, 0, 0).split_evenly((1, areas.len()));
        for (panel, area) in panels.iter().zip(&areas) {
            let mut chart = ChartBuilder::on(panel)
                .caption(format!("noise on {area}"), ("sans-serif", DESC_FONT))
                .margin(8)
                .x_label_area_size(44)
                .y_label_area_size(y.label_area())
                .build_cartesian_2d(x.clone(), y.clone())
                .map_err(|e| anyhow!("{e:?}"))?;
            chart
                .configure_mesh()
                .label_style(("sans-serif", LABEL_FONT))
                .axis_desc_style(("sans-serif", DESC_FONT))
                .x_desc("noise level λ")
                .draw()
                .map_err(|e| anyhow!("{e:?}"))?;
            for (ri, rel) in rels.iter().enumerate() {
                let c = COLORS[ri % COLORS.len()];
                let mut pts: Vec<&Group> = groups
                    .iter()
                    .filter(|g| g.area == *area && g.rel_level == *rel)
                    .collect();
                pts.sort_by(|a, b| a.level.total_cmp(&b.level));
                chart
                    .draw_series(LineSeries::new(
                        pts.iter().map(|g| (g.level, g.metrics[metric].mean)),
                        c.stroke_width(2),
                    ))
                    .map_err(|e| anyhow!("{e:?}"))?;
                chart
                    .draw_series(pts.iter().filter_map(|g| {
                        let cell = &g.metrics[metric];
                        cell.ci95.map(|[l, h]| {
                            ErrorBar::new_vertical(g.level, l, cell.mean, h, c.filled(), 6)
                        })
                    }))
                    .map_err(|e| anyhow!("{e:?}"))?;
            }
        }
        let items: Vec<(String, RGBColor, Mark)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), COLORS[i % COLORS.len()], Mark::Line))
            .collect();
        side_legend(&side, (4, 48), &items)
    })
}

/// The mean of `r_l` per (level, layer) over `rows`, `None` where no ratio is defined.
fn ratio_grid(rows: &[&ScoredRecord], levels: &[f64], layers: usize) -> Vec<Vec<Option<f64>>> {
    levels
        .iter()
        .map(|&lv| {
            (0..layers)
                .map(|l| {
                    let v: Vec<f64> = rows
                        .iter()
                        .filter(|r| r.generation.level == lv)
                        .filter_map(|r| r.generation.ratios.get(l).copied().flatten())
                        .collect();
                    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
                })
                .collect()
        })
        .collect()
}

/// `attention.csv` and `attention_<area>.svg` (see the [module docs](self)) from the rows in
/// the analysis; returns how many there are (nothing is written when there are none).
///
/// # Errors
/// [`CoocoError::Invalid`] for a failed write or plot.
pub fn attention_report(dir: &Path, items: &[ScoredRecord]) -> Result<usize, CoocoError> {
    let rows: Vec<&ScoredRecord> = items
        .iter()
        .filter(|r| r.generation.in_attention && !r.generation.ratios.is_empty())
        .collect();
    let Some(layers) = rows.iter().map(|r| r.generation.ratios.len()).max() else {
        return Ok(0);
    };
    let mut header: Vec<String> = ["image", "area", "level", "rel_level", "output", "correct"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    header.extend((0..layers).map(|l| format!("ratio_l{l}")));
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let g = &r.generation;
            let mut row = vec![
                g.image.clone(),
                g.area.name().into(),
                g.level.to_string(),
                g.rel_level.clone(),
                g.output.clone(),
                r.scores.correct.to_string(),
            ];
            row.extend((0..layers).map(|l| {
                g.ratios
                    .get(l)
                    .copied()
                    .flatten()
                    .map_or(String::new(), |x| x.to_string())
            }));
            row
        })
        .collect();
    write_csv_table(&dir.join("attention.csv"), &header, &table).map_err(err)?;
    let mut areas: Vec<_> = rows.iter().map(|r| r.generation.area).collect();
    areas.sort();
    areas.dedup();
    for area in areas {
        let here: Vec<&ScoredRecord> = rows
            .iter()
            .copied()
            .filter(|r| r.generation.area == area)
            .collect();
        let mut levels: Vec<f64> = here.iter().map(|r| r.generation.level).collect();
        levels.sort_by(f64::total_cmp);
        levels.dedup();
        let all = ratio_grid(&here, &levels, layers);
        let correct: Vec<&ScoredRecord> =
            here.iter().copied().filter(|r| r.scores.correct).collect();
        let wrong: Vec<&ScoredRecord> =
            here.iter().copied().filter(|r| !r.scores.correct).collect();
        let c = ratio_grid(&correct, &levels, layers);
        let w = ratio_grid(&wrong, &levels, layers);
        let diff: Vec<Vec<Option<f64>>> = c
            .iter()
            .zip(&w)
            .map(|(a, b)| a.iter().zip(b).map(|(x, y)| Some((*x)? - (*y)?)).collect())
            .collect();
        let panels = [
            (format!("all ({})", here.len()), all, false),
            (format!("correct ({})", correct.len()), c, false),
            (format!("incorrect ({})", wrong.len()), w, false),
            ("correct − incorrect".to_string(), diff, true),
        ];
        heatmaps(
            &dir.join(format!("attention_{}.svg", area.name())),
            &format!("r_l = a_target / a_context, noise on {}", area.name()),
            &levels,
            layers,
            &panels,
        )
        .map_err(err)?;
    }
    Ok(rows.len())
}

/// White → blue for `t ∈ [0, 1]`.
fn sequential(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(mix(255.0, 31.0), mix(255.0, 119.0), mix(255.0, 180.0))
}

/// Blue (−1) → white (0) → red (+1).
fn diverging(t: f64) -> RGBColor {
    let t = t.clamp(-1.0, 1.0);
    let mix = |a: f64, b: f64, s: f64| (a + (b - a) * s).round() as u8;
    if t < 0.0 {
        let s = -t;
        RGBColor(
            mix(255.0, 31.0, s),
            mix(255.0, 119.0, s),
            mix(255.0, 180.0, s),
        )
    } else {
        RGBColor(
            mix(255.0, 214.0, t),
            mix(255.0, 39.0, t),
            mix(255.0, 40.0, t),
        )
    }
}

type Panel = (String, Vec<Vec<Option<f64>>>, bool);

/// Heatmaps of layer (rows, top = layer 0) × level (columns), each cell labelled with its
/// value; the sequential panels share one scale, the diverging one is symmetric around 0.
fn heatmaps(
    path: &Path,
    title: &str,
    levels: &[f64],
    layers: usize,
    panels: &[Panel],
) -> anyhow::Result<()> {
    let cell_w = 64i32;
    let cell_h = (360 / layers.max(1) as i32).clamp(14, 28);
    let left = 56i32;
    let top = 64i32;
    let widest_name = panels
        .iter()
        .map(|p| text_width(&p.0, LABEL_FONT))
        .fold(0.0, f64::max)
        .ceil() as i32;
    let panel_w = left + (cell_w * levels.len() as i32).max(widest_name) + 24;
    let width = (panel_w * panels.len() as i32 + 16)
        .max(text_width(title, TITLE_FONT).ceil() as i32 + 32) as u32;
    let height = (top + cell_h * layers as i32 + 64) as u32;
    let seq_max = panels
        .iter()
        .filter(|p| !p.2)
        .flat_map(|p| p.1.iter().flatten().flatten().copied())
        .fold(0.0f64, f64::max);
    let div_max = panels
        .iter()
        .filter(|p| p.2)
        .flat_map(|p| p.1.iter().flatten().flatten().map(|v| v.abs()))
        .fold(0.0f64, f64::max);
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e:?}");
    render_sized(path, (width, height), |root| {
        let font = |s: u32| TextStyle::from(("sans-serif", s).into_font());
        let centred = |s: u32| {
            font(s).pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Center,
            ))
        };
        root.draw(&Text::new(title.to_string(), (12, 8), font(TITLE_FONT)))
            .map_err(e)?;
        for (pi, (name, grid, div)) in panels.iter().enumerate() {
            let x0 = 8 + pi as i32 * panel_w + left;
            root.draw(&Text::new(name.clone(), (x0, top - 22), font(LABEL_FONT)))
                .map_err(e)?;
            for l in 0..layers {
                let y = top + l as i32 * cell_h;
                root.draw(&Text::new(
                    format!("L{l}"),
                    (x0 - 36, y + cell_h / 2 - 6),
                    font(LABEL_FONT - 2),
                ))
                .map_err(e)?;
                for (li, row) in grid.iter().enumerate() {
                    let x = x0 + li as i32 * cell_w;
                    let v = row.get(l).copied().flatten();
                    let fill = match (v, div) {
                        (None, _) => RGBColor(235, 235, 235),
                        (Some(v), true) => diverging(if div_max > 0.0 { v / div_max } else { 0.0 }),
                        (Some(v), false) => {
                            sequential(if seq_max > 0.0 { v / seq_max } else { 0.0 })
                        }
                    };
                    root.draw(&Rectangle::new(
                        [(x, y), (x + cell_w - 1, y + cell_h - 1)],
                        fill.filled(),
                    ))
                    .map_err(e)?;
                    if cell_h >= 14 {
                        let label = v.map_or("–".to_string(), |v| format!("{v:.2}"));
                        root.draw(&Text::new(
                            label,
                            (x + cell_w / 2, y + cell_h / 2),
                            centred(LABEL_FONT - 4),
                        ))
                        .map_err(e)?;
                    }
                }
            }
            for (li, lv) in levels.iter().enumerate() {
                let x = x0 + li as i32 * cell_w + cell_w / 2;
                let y = top + layers as i32 * cell_h + 14;
                root.draw(&Text::new(
                    format!("λ {lv}"),
                    (x, y),
                    centred(LABEL_FONT - 2),
                ))
                .map_err(e)?;
            }
        }
        Ok(())
    })
}
