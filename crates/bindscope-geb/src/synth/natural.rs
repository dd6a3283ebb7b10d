//! `natural`: scenes of 1–5 coloured shapes on a plain, lightly tinted background.
//!
//! # Scene
//! The canvas (side `S`) is a 3 × 3 grid of cells; the `k` objects (`k` uniform in 1..=5) take
//! `k` distinct cells and distinct (shape, colour) pairs, so "the red circle" always names one
//! object. An object's size `r` is uniform in `[S/16, S/10]` (a circle's radius, a square's
//! half-width × 0.9, an upward triangle inscribed in the square of half-width `r`) and its
//! centre is jittered inside its cell by up to `cell/2 − r − 2` px. Objects in different
//! columns are at least half a cell apart horizontally (rows: vertically), which is what the
//! left/right and above/below questions rely on; they are only asked about such pairs.
//! Background: a gray level uniform in 175..=235 with each channel moved by up to ±10.
//!
//! # Questions
//! | kind | source | example |
//! |---|---|---|
//! | count | `cvbench`, 3–4 numeric options | How many red shapes are there? |
//! | colour | `cvbench`, 3–4 colour options (only for a shape that occurs once) | What color is the circle? |
//! | existence | `mme` | Is there a blue triangle in the image? |
//! | position | `mme` | Is the red circle to the left of the green square? |
//! | relation | `mme` | Is the yellow square above the blue circle? |
//!
//! A yes/no question is made for a wanted answer (the pair of objects is ordered to make it
//! true or false), so the answers are balanced by construction.

use super::qa::{self, Qa};
use super::raster::{self, Rgb};
use super::{Ctx, Unit, Want};
use rand::Rng;

/// The shapes, as questions name them.
pub const SHAPES: [&str; 3] = ["circle", "square", "triangle"];

/// The shape colours: names and RGB. A shape's interior pixels have exactly this colour (only
/// its anti-aliased edge is blended with the background).
pub const SHAPE_COLORS: [(&str, [u8; 3]); 6] = [
    ("red", [220, 40, 40]),
    ("green", [40, 160, 60]),
    ("blue", [40, 80, 220]),
    ("yellow", [235, 200, 20]),
    ("purple", [140, 60, 180]),
    ("orange", [240, 130, 20]),
];

/// One object of a scene.
#[derive(Debug, Clone, Copy)]
struct Obj {
    shape: usize,
    color: usize,
    cx: f64,
    cy: f64,
    r: f64,
    col: usize,
    row: usize,
}

impl Obj {
    fn name(&self) -> String {
        format!("{} {}", SHAPE_COLORS[self.color].0, SHAPES[self.shape])
    }
}

/// Draws a scene and its image.
fn scene<R: Rng>(rng: &mut R, size: u32) -> (Vec<Obj>, image::RgbImage) {
    let s = f64::from(size);
    let gray: i32 = rng.random_range(175..=235);
    let bg: Rgb = std::array::from_fn(|_| (gray + rng.random_range(-10..=10)) as u8);
    let k = rng.random_range(1..=5usize);
    let cells = qa::sample(rng, &(0..9).collect::<Vec<usize>>(), k);
    let pairs = qa::sample(rng, &(0..18).collect::<Vec<usize>>(), k);
    let cell = s / 3.0;
    let mut objs = Vec::with_capacity(k);
    for (&c, &p) in cells.iter().zip(&pairs) {
        let (col, row) = (c % 3, c / 3);
        let r = rng.random_range(s / 16.0..=s / 10.0);
        let slack = (cell / 2.0 - r - 2.0).max(0.0);
        let jx = rng.random_range(-slack..=slack);
        let jy = rng.random_range(-slack..=slack);
        objs.push(Obj {
            shape: p / 6,
            color: p % 6,
            cx: cell * (col as f64 + 0.5) + jx,
            cy: cell * (row as f64 + 0.5) + jy,
            r,
            col,
            row,
        });
    }
    let mut img = raster::canvas(size, bg);
    for o in &objs {
        let (cx, cy, r) = (o.cx, o.cy, o.r);
        let bbox = (cx - r - 1.0, cy - r - 1.0, cx + r + 1.0, cy + r + 1.0);
        let color = SHAPE_COLORS[o.color].1;
        match o.shape {
            0 => raster::fill_shape(&mut img, bbox, color, |x, y| {
                (x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r
            }),
            1 => {
                let h = r * 0.9;
                raster::fill_shape(&mut img, bbox, color, |x, y| {
                    (x - cx).abs() <= h && (y - cy).abs() <= h
                })
            }
            _ => raster::fill_shape(&mut img, bbox, color, |x, y| {
                y >= cy - r && y <= cy + r && 2.0 * (x - cx).abs() <= y - (cy - r)
            }),
        }
    }
    (objs, img)
}

/// `n` distinct numbers of `0..=6` other than `not`, in random order.
fn other_counts<R: Rng>(rng: &mut R, not: usize, n: usize) -> Vec<String> {
    let pool: Vec<usize> = (0..=6).filter(|&v| v != not).collect();
    qa::sample(rng, &pool, n)
        .into_iter()
        .map(|v| v.to_string())
        .collect()
}

/// A counting question (all shapes, one colour present or one shape present).
fn count<R: Rng>(rng: &mut R, objs: &[Obj]) -> Qa {
    let mut targets: Vec<(String, usize)> =
        vec![("How many shapes are there in the image?".into(), objs.len())];
    for (c, (name, _)) in SHAPE_COLORS.iter().enumerate() {
        let n = objs.iter().filter(|o| o.color == c).count();
        if n > 0 {
            targets.push((format!("How many {name} shapes are there?"), n));
        }
    }
    for (s, name) in SHAPES.iter().enumerate() {
        let n = objs.iter().filter(|o| o.shape == s).count();
        if n > 0 {
            targets.push((format!("How many {name}s are there?"), n));
        }
    }
    let (q, n) = qa::pick(rng, &targets).clone();
    let extra = rng.random_range(2..=3);
    let distractors = other_counts(rng, n, extra);
    qa::cvbench(rng, &q, &n.to_string(), &distractors)
}

/// A colour question about a shape that occurs once, if there is one.
fn color<R: Rng>(rng: &mut R, objs: &[Obj]) -> Option<Qa> {
    let unique: Vec<&Obj> = (0..SHAPES.len())
        .filter_map(|s| {
            let of: Vec<&Obj> = objs.iter().filter(|o| o.shape == s).collect();
            (of.len() == 1).then(|| of[0])
        })
        .collect();
    if unique.is_empty() {
        return None;
    }
    let o = *qa::pick(rng, &unique);
    let others: Vec<String> = (0..SHAPE_COLORS.len())
        .filter(|&c| c != o.color)
        .map(|c| SHAPE_COLORS[c].0.to_string())
        .collect();
    let extra = rng.random_range(2..=3);
    let distractors = qa::sample(rng, &others, extra);
    Some(qa::cvbench(
        rng,
        &format!("What color is the {}?", SHAPES[o.shape]),
        SHAPE_COLORS[o.color].0,
        &distractors,
    ))
}

/// An existence question with the answer `yes` (an object of the scene) or not (a (colour,
/// shape) pair absent from it).
fn existence<R: Rng>(rng: &mut R, objs: &[Obj], yes: bool) -> Qa {
    let name = if yes {
        qa::pick(rng, objs).name()
    } else {
        let absent: Vec<String> = (0..18)
            .filter(|&p| !objs.iter().any(|o| o.shape == p / 6 && o.color == p % 6))
            .map(|p| format!("{} {}", SHAPE_COLORS[p % 6].0, SHAPES[p / 6]))
            .collect();
        qa::pick(rng, &absent).clone()
    };
    qa::mme(
        &format!("Is there {} in the image?", qa::with_article(&name)),
        yes,
    )
}

/// A left/right (`horizontal`) or above/below question with the answer `yes`, about two objects
/// in different columns (rows); `None` when there are no such two.
fn spatial<R: Rng>(rng: &mut R, objs: &[Obj], yes: bool, horizontal: bool) -> Option<Qa> {
    let mut pairs = Vec::new();
    for (i, a) in objs.iter().enumerate() {
        for b in &objs[i + 1..] {
            if (horizontal && a.col != b.col) || (!horizontal && a.row != b.row) {
                pairs.push((*a, *b));
            }
        }
    }
    if pairs.is_empty() {
        return None;
    }
    let (mut a, mut b) = *qa::pick(rng, &pairs);
    let first = rng.random_bool(0.5); // "left of" / "above" rather than "right of" / "below"
    let (rel, holds): (&str, fn(&Obj, &Obj) -> bool) = match (horizontal, first) {
        (true, true) => ("to the left of", |a: &Obj, b: &Obj| a.cx < b.cx),
        (true, false) => ("to the right of", |a: &Obj, b: &Obj| a.cx > b.cx),
        (false, true) => ("above", |a: &Obj, b: &Obj| a.cy < b.cy),
        (false, false) => ("below", |a: &Obj, b: &Obj| a.cy > b.cy),
    };
    if holds(&a, &b) != yes {
        std::mem::swap(&mut a, &mut b);
    }
    Some(qa::mme(
        &format!("Is the {} {rel} the {}?", a.name(), b.name()),
        yes,
    ))
}

/// A yes/no question of a random feasible kind (existence, position, relation).
fn yes_no<R: Rng>(rng: &mut R, objs: &[Obj], yes: bool) -> Qa {
    loop {
        let q = match rng.random_range(0..3) {
            0 => Some(existence(rng, objs, yes)),
            1 => spatial(rng, objs, yes, true),
            _ => spatial(rng, objs, yes, false),
        };
        if let Some(q) = q {
            return q;
        }
    }
}

/// A lettered-choice question of a random feasible kind (count, colour).
fn choice<R: Rng>(rng: &mut R, objs: &[Obj]) -> Qa {
    if rng.random_bool(0.5)
        && let Some(q) = color(rng, objs)
    {
        return q;
    }
    count(rng, objs)
}

/// One image and its questions. Evaluation units are a yes/no pair (one `Yes`, one `No`, MME
/// style) or, half the time and whenever only one item is left, one lettered question; a
/// training conversation has 2–4 questions of any kind, yes/no answers by a fair coin.
pub(super) fn unit(ctx: &Ctx, s: &super::Streams, want: Want) -> Unit {
    let (objs, image) = scene(&mut s.image(), ctx.size);
    let mut plan = s.plan();
    let mut rng = s.questions();
    let qas = match want {
        Want::Eval { max_items } => {
            if max_items >= 2 && plan.random_bool(0.5) {
                let yes = yes_no(&mut rng, &objs, true);
                let no = yes_no(&mut rng, &objs, false);
                if plan.random_bool(0.5) {
                    vec![yes, no]
                } else {
                    vec![no, yes]
                }
            } else {
                vec![choice(&mut rng, &objs)]
            }
        }
        Want::Train => {
            let turns = plan.random_range(2..=4);
            let mut qas = qa::distinct(&mut rng, turns, 64, |r| match r.random_range(0..5) {
                0 => Some(count(r, &objs)),
                1 => color(r, &objs),
                kind => {
                    let yes = r.random_bool(0.5);
                    match kind {
                        2 => Some(existence(r, &objs, yes)),
                        3 => spatial(r, &objs, yes, true),
                        _ => spatial(r, &objs, yes, false),
                    }
                }
            });
            if qas.len() < 2 {
                // Unreachable in practice (existence yes/no always differ); keeps the 2-turn floor.
                qas = vec![existence(&mut rng, &objs, true), count(&mut rng, &objs)];
            }
            qas
        }
    };
    Unit { image, qas }
}
