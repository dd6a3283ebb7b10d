//! `document`: bar charts and small tables of integers, drawn with the bundled font.
//!
//! # Bar chart (half the images)
//! 3–5 vertical bars with distinct labels from [`BAR_LABELS`] and distinct integer values in
//! 1..=99, one fill colour; a value axis from 0 to the maximum rounded up to a multiple of 10
//! (at most 5 steps) or 20, with a tick and label at each step and light gridlines; the labels
//! under the bars. Half the charts also print each value above its bar. Margins, font sizes and
//! the background tint (each channel in 240..=255) are jittered.
//!
//! # Table (the other half)
//! A header row of 2–3 column names ([`COLUMN_LABELS`]) over 2–4 rows, each a row name
//! ([`ROW_LABELS`]) and integers in 1..=99; a shaded header, grid lines, centred text.
//!
//! # Questions
//! | image | kind | source |
//! |---|---|---|
//! | chart | What is the value of the <label> bar? | `chartqa` |
//! | chart | Which bar is taller, <a> or <b>? (values at least 5 apart where possible) | `cvbench`, options `(A) a`, `(B) b` in random order |
//! | table | What is the value in row <r>, column <c>? | `chartqa` |
//! | chart | How many bars are in the chart? | `chartqa` |
//! | chart | Which bar is the tallest? | `cvbench`, the tallest and 2–3 other labels |
//! | table | How many rows of data does the table have? | `chartqa` |
//!
//! An evaluation chart carries two items (value and comparison) or one (value, comparison, the
//! number of bars or the tallest bar, a quarter each); a table two cells, or one item: a cell,
//! or a third of the time its number of rows. The counts and the tallest bar are what one
//! embedding of the image can hold without reading its numbers. Training conversations ask all
//! of these and whether one bar's (cell's) value is greater than another's (`mme`).

use super::qa::{self, Qa};
use super::raster::{self, Align, Rgb};
use super::{Ctx, Unit, Want};
use ab_glyph::FontRef;
use image::RgbImage;
use rand::Rng;

/// The bar labels.
pub const BAR_LABELS: [&str; 16] = [
    "apple", "pear", "plum", "kiwi", "lime", "fig", "mango", "grape", "lemon", "melon", "peach",
    "cherry", "olive", "date", "guava", "berry",
];

/// The table's row names.
pub const ROW_LABELS: [&str; 8] = [
    "Alpha", "Beta", "Gamma", "Delta", "Kappa", "Sigma", "Omega", "Theta",
];

/// The table's column names.
pub const COLUMN_LABELS: [&str; 6] = ["North", "South", "East", "West", "Central", "Coast"];

/// Bar fill colours.
const BAR_COLORS: [Rgb; 6] = [
    [60, 110, 190],
    [200, 80, 60],
    [70, 150, 90],
    [150, 90, 170],
    [220, 150, 40],
    [60, 150, 160],
];

const INK: Rgb = [25, 25, 25];
const GRID: Rgb = [215, 215, 215];

/// A bar chart's data.
struct Chart {
    labels: Vec<String>,
    values: Vec<u32>,
}

/// A table's data: `cells[r][c]`.
struct Table {
    rows: Vec<String>,
    cols: Vec<String>,
    cells: Vec<Vec<u32>>,
}

enum Doc {
    Chart(Chart),
    Table(Table),
}

fn background<R: Rng>(rng: &mut R) -> Rgb {
    std::array::from_fn(|_| rng.random_range(240..=255u8))
}

/// The axis maximum and step for values up to `max`: a multiple of 10 in at most 5 steps, else
/// of 20.
fn axis(max: u32) -> (u32, u32) {
    let top10 = max.div_ceil(10) * 10;
    if top10 / 10 <= 5 {
        (top10, 10)
    } else {
        (max.div_ceil(20) * 20, 20)
    }
}

fn draw_chart<R: Rng>(rng: &mut R, font: &FontRef<'_>, size: u32) -> (Chart, RgbImage) {
    let n = rng.random_range(3..=5usize);
    let labels: Vec<String> = qa::sample(rng, &BAR_LABELS, n)
        .into_iter()
        .map(String::from)
        .collect();
    let values: Vec<u32> = qa::sample(rng, &(1..=99).collect::<Vec<u32>>(), n);
    let color = *qa::pick(rng, &BAR_COLORS);
    let annotate = rng.random_bool(0.5);
    let s = size as f32;
    let fs = s * rng.random_range(0.050..=0.062f32);
    let left = s * rng.random_range(0.13..=0.17f32);
    let right = s - s * rng.random_range(0.03..=0.06f32);
    let top = s * rng.random_range(0.07..=0.11f32);
    let bottom = s - s * rng.random_range(0.11..=0.14f32);
    let mut img = raster::canvas(size, background(rng));

    let (amax, step) = axis(*values.iter().max().expect("3..=5 bars"));
    let y_of = |v: u32| bottom - (bottom - top) * v as f32 / amax as f32;
    for t in (0..=amax).step_by(step as usize) {
        let y = y_of(t).round() as i64;
        if t > 0 {
            raster::fill_rect(&mut img, left as i64 + 1, y, right as i64, y + 1, GRID);
        }
        raster::fill_rect(&mut img, left as i64 - 3, y, left as i64, y + 1, INK);
        raster::draw_text_at(
            &mut img,
            font,
            fs,
            &t.to_string(),
            (left - 5.0, y as f32 + 0.5),
            Align::Right,
            INK,
        );
    }
    let slot = (right - left) / n as f32;
    for (i, (label, &v)) in labels.iter().zip(&values).enumerate() {
        let cx = left + slot * (i as f32 + 0.5);
        let half = slot * 0.3;
        let yt = y_of(v);
        raster::fill_rect(
            &mut img,
            (cx - half).round() as i64,
            yt.round() as i64,
            (cx + half).round() as i64,
            bottom.round() as i64,
            color,
        );
        let lpx = raster::fit_px(font, fs, label, slot * 0.95);
        raster::draw_text_at(
            &mut img,
            font,
            lpx,
            label,
            (cx, bottom + fs * 0.9),
            Align::Center,
            INK,
        );
        if annotate {
            raster::draw_text_at(
                &mut img,
                font,
                fs,
                &v.to_string(),
                (cx, yt - fs * 0.6),
                Align::Center,
                INK,
            );
        }
    }
    // Axes over the bars' edges.
    raster::fill_rect(
        &mut img,
        left as i64,
        top as i64,
        left as i64 + 1,
        bottom as i64 + 1,
        INK,
    );
    raster::fill_rect(
        &mut img,
        left as i64,
        bottom as i64,
        right as i64,
        bottom as i64 + 1,
        INK,
    );
    (Chart { labels, values }, img)
}

fn draw_table<R: Rng>(rng: &mut R, font: &FontRef<'_>, size: u32) -> (Table, RgbImage) {
    let nr = rng.random_range(2..=4usize);
    let nc = rng.random_range(2..=3usize);
    let rows: Vec<String> = qa::sample(rng, &ROW_LABELS, nr)
        .into_iter()
        .map(String::from)
        .collect();
    let cols: Vec<String> = qa::sample(rng, &COLUMN_LABELS, nc)
        .into_iter()
        .map(String::from)
        .collect();
    let cells: Vec<Vec<u32>> = (0..nr)
        .map(|_| (0..nc).map(|_| rng.random_range(1..=99)).collect())
        .collect();
    let s = size as f32;
    let width = s * rng.random_range(0.80..=0.90f32);
    let row_h = (s * 0.8 / (nr + 1) as f32).min(s * rng.random_range(0.12..=0.15f32));
    let height = row_h * (nr + 1) as f32;
    let x0 = rng.random_range(0.02 * s..=(s - width - 0.02 * s).max(0.02 * s));
    let y0 = rng.random_range(0.03 * s..=(s - height - 0.03 * s).max(0.03 * s));
    // The name column is 1.4 times a value column.
    let unit = width / (1.4 + nc as f32);
    let col_x = |c: usize| x0 + if c == 0 { 0.0 } else { unit * (0.4 + c as f32) };
    let header = {
        let g = rng.random_range(205..=230u8);
        [g, g, g.saturating_add(8)]
    };
    let fs = (row_h * 0.5).min(s * 0.065);
    let mut img = raster::canvas(size, background(rng));
    raster::fill_rect(
        &mut img,
        x0.round() as i64,
        y0.round() as i64,
        (x0 + width).round() as i64,
        (y0 + row_h).round() as i64,
        header,
    );
    for r in 0..=nr + 1 {
        let y = (y0 + row_h * r as f32).round() as i64;
        raster::fill_rect(
            &mut img,
            x0.round() as i64,
            y,
            (x0 + width).round() as i64 + 1,
            y + 1,
            INK,
        );
    }
    for c in 0..=nc + 1 {
        let x = if c == nc + 1 { x0 + width } else { col_x(c) }.round() as i64;
        raster::fill_rect(
            &mut img,
            x,
            y0.round() as i64,
            x + 1,
            (y0 + height).round() as i64 + 1,
            INK,
        );
    }
    let center = |c: usize| {
        let right = if c == nc { x0 + width } else { col_x(c + 1) };
        (col_x(c) + right) / 2.0
    };
    let cell_w = |c: usize| {
        let right = if c == nc { x0 + width } else { col_x(c + 1) };
        (right - col_x(c)) * 0.8
    };
    let mid = |r: usize| y0 + row_h * (r as f32 + 0.5);
    for (c, name) in cols.iter().enumerate() {
        let px = raster::fit_px(font, fs, name, cell_w(c + 1));
        raster::draw_text_at(
            &mut img,
            font,
            px,
            name,
            (center(c + 1), mid(0)),
            Align::Center,
            INK,
        );
    }
    for (r, name) in rows.iter().enumerate() {
        let px = raster::fit_px(font, fs, name, cell_w(0));
        raster::draw_text_at(
            &mut img,
            font,
            px,
            name,
            (center(0), mid(r + 1)),
            Align::Center,
            INK,
        );
        for (c, v) in cells[r].iter().enumerate() {
            raster::draw_text_at(
                &mut img,
                font,
                fs,
                &v.to_string(),
                (center(c + 1), mid(r + 1)),
                Align::Center,
                INK,
            );
        }
    }
    (Table { rows, cols, cells }, img)
}

fn value_q<R: Rng>(rng: &mut R, ch: &Chart) -> Qa {
    let i = rng.random_range(0..ch.labels.len());
    qa::chartqa(
        &format!("What is the value of the {} bar?", ch.labels[i]),
        ch.values[i],
    )
}

/// The bar pairs to compare: values at least 5 apart, else the most distant pair.
fn compare_pairs(ch: &Chart) -> Vec<(usize, usize)> {
    let n = ch.labels.len();
    let all: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .collect();
    let gap = |&(i, j): &(usize, usize)| ch.values[i].abs_diff(ch.values[j]);
    let wide: Vec<(usize, usize)> = all.iter().copied().filter(|p| gap(p) >= 5).collect();
    if wide.is_empty() {
        vec![*all.iter().max_by_key(|p| gap(p)).expect("3..=5 bars")]
    } else {
        wide
    }
}

/// "Which bar is taller, a or b?" with the options in the question's order, which is random,
/// so the correct letter is uniform over A and B.
fn compare_q<R: Rng>(rng: &mut R, ch: &Chart) -> Qa {
    let (i, j) = *qa::pick(rng, &compare_pairs(ch));
    let (a, b) = if rng.random_bool(0.5) { (i, j) } else { (j, i) };
    let q = format!("Which bar is taller, {} or {}?", ch.labels[a], ch.labels[b]);
    let options = [ch.labels[a].clone(), ch.labels[b].clone()];
    qa::cvbench_at(&q, &options, usize::from(ch.values[b] > ch.values[a]))
}

/// How many bars the chart has.
fn bars_q(ch: &Chart) -> Qa {
    qa::chartqa("How many bars are in the chart?", ch.labels.len() as u32)
}

/// The tallest bar, as a lettered choice among it and 2–3 others.
fn tallest_q<R: Rng>(r: &mut R, ch: &Chart) -> Qa {
    let top = (0..ch.values.len())
        .max_by_key(|&i| ch.values[i])
        .expect("3..=5 bars");
    let others: Vec<String> = (0..ch.labels.len())
        .filter(|&i| i != top)
        .map(|i| ch.labels[i].clone())
        .collect();
    let n = r.random_range(2..=3).min(others.len());
    let ds = qa::sample(r, &others, n);
    qa::cvbench(r, "Which bar is the tallest?", &ch.labels[top], &ds)
}

/// How many rows of data the table has.
fn rows_q(t: &Table) -> Qa {
    qa::chartqa(
        "How many rows of data does the table have?",
        t.rows.len() as u32,
    )
}

fn table_cell_q(t: &Table, r: usize, c: usize) -> Qa {
    qa::chartqa(
        &format!(
            "What is the value in row {}, column {}?",
            t.rows[r], t.cols[c]
        ),
        t.cells[r][c],
    )
}

/// One image and its questions.
pub(super) fn unit(ctx: &Ctx, s: &super::Streams, want: Want) -> Unit {
    let mut irng = s.image();
    let chart = irng.random_bool(0.5);
    let (doc, image) = if chart {
        let (c, img) = draw_chart(&mut irng, &ctx.font, ctx.size);
        (Doc::Chart(c), img)
    } else {
        let (t, img) = draw_table(&mut irng, &ctx.font, ctx.size);
        (Doc::Table(t), img)
    };
    let mut plan = s.plan();
    let mut rng = s.questions();
    let qas = match (want, &doc) {
        (Want::Eval { max_items }, Doc::Chart(ch)) => {
            if max_items >= 2 && plan.random_bool(0.5) {
                vec![value_q(&mut rng, ch), compare_q(&mut rng, ch)]
            } else {
                // One item: ChartQA's two tasks, or what one embedding of the chart can hold
                // without reading its numbers (how many bars, which is tallest).
                vec![match plan.random_range(0..4) {
                    0 => value_q(&mut rng, ch),
                    1 => compare_q(&mut rng, ch),
                    2 => bars_q(ch),
                    _ => tallest_q(&mut rng, ch),
                }]
            }
        }
        (Want::Eval { max_items }, Doc::Table(t)) => {
            let k = if max_items >= 2 && plan.random_bool(0.5) {
                2
            } else {
                1
            };
            // A single item asks a third of the time how many rows the table has.
            if k == 1 && plan.random_range(0..3) == 0 {
                return Unit {
                    image,
                    qas: vec![rows_q(t)],
                };
            }
            let cells: Vec<(usize, usize)> = (0..t.rows.len())
                .flat_map(|r| (0..t.cols.len()).map(move |c| (r, c)))
                .collect();
            qa::sample(&mut rng, &cells, k)
                .into_iter()
                .map(|(r, c)| table_cell_q(t, r, c))
                .collect()
        }
        (Want::Train, Doc::Chart(ch)) => {
            let turns = plan.random_range(2..=4);
            let qas = qa::distinct(&mut rng, turns, 64, |r| {
                Some(match r.random_range(0..5) {
                    0 => value_q(r, ch),
                    1 => compare_q(r, ch),
                    2 => bars_q(ch),
                    3 => tallest_q(r, ch),
                    _ => {
                        let (i, j) = *qa::pick(r, &compare_pairs(ch));
                        let (i, j) = if r.random_bool(0.5) { (i, j) } else { (j, i) };
                        qa::mme(
                            &format!(
                                "Is the value of the {} bar greater than the value of the {} bar?",
                                ch.labels[i], ch.labels[j]
                            ),
                            ch.values[i] > ch.values[j],
                        )
                    }
                })
            });
            floor_two(
                qas,
                (0..ch.labels.len()).map(|i| {
                    qa::chartqa(
                        &format!("What is the value of the {} bar?", ch.labels[i]),
                        ch.values[i],
                    )
                }),
            )
        }
        (Want::Train, Doc::Table(t)) => {
            let turns = plan.random_range(2..=4);
            let qas = qa::distinct(&mut rng, turns, 64, |r| {
                let rr = r.random_range(0..t.rows.len());
                let cc = r.random_range(0..t.cols.len());
                match r.random_range(0..3) {
                    0 => Some(table_cell_q(t, rr, cc)),
                    1 => Some(rows_q(t)),
                    _ => {
                        let r2 = r.random_range(0..t.rows.len());
                        let c2 = r.random_range(0..t.cols.len());
                        let (a, b) = (t.cells[rr][cc], t.cells[r2][c2]);
                        (a != b).then(|| {
                            qa::mme(
                                &format!(
                                    "Is the value in row {}, column {} greater than the value in row {}, column {}?",
                                    t.rows[rr], t.cols[cc], t.rows[r2], t.cols[c2]
                                ),
                                a > b,
                            )
                        })
                    }
                }
            });
            floor_two(qas, (0..t.rows.len()).map(|r| table_cell_q(t, r, 0)))
        }
    };
    Unit { image, qas }
}

/// `qas` completed from `candidates` (those with a new prompt) to at least two turns; the
/// candidates hold at least two distinct prompts, and in practice `qas` already has two.
fn floor_two(mut qas: Vec<Qa>, candidates: impl IntoIterator<Item = Qa>) -> Vec<Qa> {
    for c in candidates {
        if qas.len() >= 2 {
            break;
        }
        if !qas
            .iter()
            .any(|q| qa::stem(&q.question) == qa::stem(&c.question))
        {
            qas.push(c);
        }
    }
    qas
}
