//! `scene_text`: one word or number drawn large on a coloured background.
//!
//! # Image
//! Half the images show a word of [`WORDS`] (100 common English words) in lower case, upper
//! case or title case (a third each), half a number of 2, 3 or 4 digits (a third each, then uniform, no leading zero). The
//! text colour is one of eight named colours ([`TEXT_COLORS`]); the background is a uniform
//! random RGB colour redrawn until its contrast ratio with the text is at least 4.5 (WCAG AA;
//! after 64 draws, a dark or light gray). The text's height is drawn in `[S/6, S/3.5]` px,
//! shrunk to fit 88% of the width, and its position is uniform over the places where its ink
//! keeps a 4% margin.
//!
//! # Questions
//! Half the evaluation items read the text: "What word is written in the image?" / "What number
//! is written in the image?" (`ocrbench`, the gold is the text as drawn; OCRBench's scorer is
//! case-insensitive); a quarter ask the colour of the text (`cvbench`) and a quarter how many
//! letters/digits it has (`chartqa`), what one embedding of the image can hold without reading
//! it. Training conversations start with the reading question and also ask whether a given
//! word/number is written (`mme`), which of 3–4 is written (`cvbench`), the colour and the
//! length.

use super::qa::{self, Qa};
use super::raster::{self, Align, Rgb};
use super::{Ctx, Unit, Want};
use rand::Rng;

/// The words of the word images: 100 common English words, lower case.
pub const WORDS: [&str; 100] = [
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world",
    "school", "state", "family", "student", "group", "country", "problem", "hand", "part", "place",
    "case", "week", "company", "system", "program", "question", "work", "number", "night", "point",
    "home", "water", "room", "mother", "area", "money", "story", "fact", "month", "right", "study",
    "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service",
    "friend", "father", "power", "hour", "game", "line", "member", "law", "car", "city", "name",
    "team", "minute", "idea", "body", "back", "parent", "face", "level", "office", "door",
    "health", "person", "art", "war", "history", "party", "result", "change", "morning", "reason",
    "research", "girl", "moment", "air", "teacher", "force", "apple", "river", "music", "garden",
    "window", "bread", "train", "summer", "market", "letter",
];

/// The text colours: names and RGB.
pub const TEXT_COLORS: [(&str, [u8; 3]); 8] = [
    ("black", [20, 20, 20]),
    ("white", [250, 250, 250]),
    ("red", [200, 30, 30]),
    ("blue", [30, 60, 200]),
    ("green", [20, 130, 40]),
    ("yellow", [245, 215, 0]),
    ("orange", [240, 130, 0]),
    ("purple", [130, 40, 170]),
];

/// The least contrast ratio between text and background.
const MIN_CONTRAST: f64 = 4.5;

/// What an image shows.
struct Text {
    /// As drawn.
    shown: String,
    /// A number (else a word).
    number: bool,
    /// Index in [`TEXT_COLORS`].
    color: usize,
}

impl Text {
    fn noun(&self) -> &'static str {
        if self.number { "number" } else { "word" }
    }
}

/// A word in the case style `style` (0 lower, 1 upper, 2 title).
fn styled(word: &str, style: u32) -> String {
    match style {
        0 => word.to_string(),
        1 => word.to_uppercase(),
        _ => {
            let mut c = word.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect())
                .unwrap_or_default()
        }
    }
}

/// Draws the text content and the image.
fn draw<R: Rng>(rng: &mut R, ctx: &Ctx) -> (Text, image::RgbImage) {
    let number = rng.random_bool(0.5);
    let shown = if number {
        let digits = rng.random_range(2..=4u32);
        rng.random_range(10u32.pow(digits - 1)..10u32.pow(digits))
            .to_string()
    } else {
        let w = *qa::pick(rng, &WORDS);
        styled(w, rng.random_range(0..3))
    };
    let color = rng.random_range(0..TEXT_COLORS.len());
    let fg = TEXT_COLORS[color].1;
    let mut bg = None;
    for _ in 0..64 {
        let c: Rgb = std::array::from_fn(|_| rng.random_range(0..=255u8));
        if raster::contrast(c, fg) >= MIN_CONTRAST {
            bg = Some(c);
            break;
        }
    }
    let bg = bg.unwrap_or(if raster::luminance(fg) > 0.2 {
        [40, 40, 40]
    } else {
        [225, 225, 225]
    });
    let s = ctx.size as f32;
    let px = rng.random_range(s / 6.0..=s / 3.5);
    let px = raster::fit_px(&ctx.font, px, &shown, 0.88 * s);
    let ink = raster::text_ink(&ctx.font, px, &shown).expect("words and numbers have ink");
    let (w, h) = (ink.max.x - ink.min.x, ink.max.y - ink.min.y);
    let margin = 0.04 * s;
    let x = rng.random_range(margin..=(s - margin - w).max(margin));
    let y = rng.random_range(margin + h / 2.0..=(s - margin - h / 2.0).max(margin + h / 2.0));
    let mut img = raster::canvas(ctx.size, bg);
    raster::draw_text_at(&mut img, &ctx.font, px, &shown, (x, y), Align::Left, fg);
    (
        Text {
            shown,
            number,
            color,
        },
        img,
    )
}

/// Another word (same case style) or number than the one shown.
fn other<R: Rng>(rng: &mut R, t: &Text) -> String {
    loop {
        let o = if t.number {
            let digits = t.shown.len() as u32;
            rng.random_range(10u32.pow(digits - 1)..10u32.pow(digits))
                .to_string()
        } else {
            let w = *qa::pick(rng, &WORDS);
            let style = if t.shown.chars().all(|c| c.is_lowercase()) {
                0
            } else if t.shown.chars().all(|c| c.is_uppercase()) {
                1
            } else {
                2
            };
            styled(w, style)
        };
        if o.to_lowercase() != t.shown.to_lowercase() {
            return o;
        }
    }
}

/// The reading question (`ocrbench`).
fn read(t: &Text) -> Qa {
    qa::ocrbench(
        &format!("What {} is written in the image?", t.noun()),
        &t.shown,
    )
}

/// The text's colour, as a lettered choice among it and 2–3 other text colours.
fn colour_q<R: Rng>(r: &mut R, t: &Text) -> Qa {
    let others: Vec<String> = (0..TEXT_COLORS.len())
        .filter(|&c| c != t.color)
        .map(|c| TEXT_COLORS[c].0.to_string())
        .collect();
    let n = r.random_range(2..=3);
    let ds = qa::sample(r, &others, n);
    let q = format!("What color is the {} written in?", t.noun());
    qa::cvbench(r, &q, TEXT_COLORS[t.color].0, &ds)
}

/// The number of digits or letters shown.
fn length_q(t: &Text) -> Qa {
    let q = if t.number {
        "How many digits does the number in the image have?"
    } else {
        "How many letters does the word in the image have?"
    };
    qa::chartqa(q, t.shown.chars().count() as u32)
}

/// One image and its questions: one item for evaluation (reading the text half the time, its
/// colour or its length a quarter each); for training the reading question and 1–3 others.
pub(super) fn unit(ctx: &Ctx, s: &super::Streams, want: Want) -> Unit {
    let (t, image) = draw(&mut s.image(), ctx);
    let qas = match want {
        // Half the items read the text (OCRBench's task); the others ask what the image's one
        // embedding can hold without reading: the text's colour or its length.
        Want::Eval { .. } => vec![match s.plan().random_range(0..4) {
            0 => colour_q(&mut s.questions(), &t),
            1 => length_q(&t),
            _ => read(&t),
        }],
        Want::Train => {
            let turns = s.plan().random_range(2..=4);
            let mut rng = s.questions();
            // The reading question first (the evaluation task), then 1–3 others.
            let mut qas = vec![read(&t)];
            qas.extend(qa::distinct(&mut rng, turns - 1, 64, |r| {
                match r.random_range(1..5) {
                    1 => {
                        let yes = r.random_bool(0.5);
                        let x = if yes { t.shown.clone() } else { other(r, &t) };
                        let q = if t.number {
                            format!("Is the number {x} written in the image?")
                        } else {
                            format!("Is the word \"{x}\" written in the image?")
                        };
                        Some(qa::mme(&q, yes))
                    }
                    2 => {
                        let n = r.random_range(2..=3);
                        let mut ds: Vec<String> = Vec::new();
                        while ds.len() < n {
                            let o = other(r, &t);
                            if !ds.contains(&o) {
                                ds.push(o);
                            }
                        }
                        let q = format!("Which {} is written in the image?", t.noun());
                        Some(qa::cvbench(r, &q, &t.shown, &ds))
                    }
                    3 => Some(colour_q(r, &t)),
                    _ => Some(length_q(&t)),
                }
            }));
            if qas.len() < 2 {
                // Unreachable in practice (four other kinds); keeps the 2-turn floor.
                qas.push(qa::mme(
                    &format!("Is there a {} in the image?", t.noun()),
                    true,
                ));
            }
            qas
        }
    };
    Unit { image, qas }
}
