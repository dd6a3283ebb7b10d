//! The seeded synthetic "mini-GEB": training conversations and dev / test manifests over
//! generated images, in the formats the GEB readout trains on and scores, so the whole study
//! can run end to end without downloading a benchmark.
//!
//! [`generate`] writes into a new directory `out`:
//!
//! | file | content |
//! |---|---|
//! | `images/{train,dev,test}/NNNNNN.png` | RGB PNGs, `image_size × image_size`, one per image, numbered per split |
//! | `train.json` | [`TrainRecord`]s, a JSON array in the LLaVA conversation format (2–4 question/answer turns, `<image>\n` at the front of the first human turn) |
//! | `dev.jsonl`, `test.jsonl` | [`ManifestItem`]s, one JSON object a line |
//! | `synth.json` | [`SynthSummary`]: the config and the counts |
//!
//! # Categories and sources
//! Each split is divided evenly over GEB's three categories; each category's items use the
//! answer forms of real sources, so `crate::metrics` scores them as lmms-eval scores those
//! sources:
//!
//! | category | images | sources (questions) |
//! |---|---|---|
//! | `natural` | 1–5 coloured circles / squares / triangles on a plain background | `mme` (existence, left/right, above/below; `Yes`/`No`), `cvbench` (count, colour; `(A)`…) |
//! | `scene_text` | one word or 2–4-digit number drawn large on a coloured background | `ocrbench` (the text), `cvbench` (its colour), `chartqa` (its number of letters / digits) |
//! | `document` | bar charts (3–5 bars, values 1–99, value axis) and tables (2–4 rows × 2–3 columns) | `chartqa` (a bar's or a cell's value; the number of bars / rows), `cvbench` (which of two bars is taller; the tallest bar) |
//!
//! Prompts and answer forms are in the table below. Training conversations ask the same
//! kinds of questions in the same forms and a few more (counts of bars / rows, text colour,
//! yes/no about a word, …), with the answer a model should produce: `Yes`/`No`, the bare
//! option letter (`B`; CV-Bench's scorer reads the first letter after any `(` or space, so
//! `B`, `(B)` and `B. 3` all score), the text, the number. A scene-text conversation always
//! starts with the reading question.
//!
//! | source | prompt | gold | training answer |
//! |---|---|---|---|
//! | `mme` | question + ` Please answer yes or no.` | `Yes` / `No` | `Yes` / `No` |
//! | `cvbench` | question, `(A) …` lines, `Answer with the option's letter from the given choices directly.` | `(B)` | `B` |
//! | `ocrbench` | `What word is written in the image?` / `What number …` | the text as drawn | the text |
//! | `chartqa` | question + `\nAnswer the question using a single word or phrase.` | `42` | `42` |
//!
//! # Splits, images and items
//! - `items` test items and `dev_items` dev items are divided evenly over the categories in
//!   report order (`natural`, `scene_text`, `document`); a remainder `n mod 3` goes one each
//!   to the first categories (`items = 10` → 4, 3, 3).
//! - An image carries one or two items, as in MME (two questions per image) and the chart
//!   benchmarks; `image_group` names it (`test-000017`), an item is `<image_group>-<k>`.
//!   Natural images carry either a yes/no pair (one `Yes`, one `No`: the answers are exactly
//!   balanced) or one lettered question; scene-text images one item; charts and tables one or
//!   two. A category's last image takes only the items left.
//! - Training conversation `i` is about image `train/{i:06}.png` of category `i mod 3`.
//! - The correct option of a lettered question is at a uniform position among its options
//!   (3–4 for the natural questions, the text colour and the tallest bar, 2 for the bar
//!   comparison), so over a split `(A)` and `(B)` are more frequent golds than `(C)` and
//!   `(D)`; `synth.json` counts them.
//!
//! # Randomness
//! Every draw comes from [`bindscope_core::rng::stream`]`(seed, [NAMESPACE, split, category,
//! index, purpose, …])`, `index` counting the category's images within the split: the image
//! content ([`PURPOSE_IMAGE`], followed by the attempt number), the layout of the image's
//! questions ([`PURPOSE_PLAN`]) and the questions themselves ([`PURPOSE_QUESTIONS`]). An image
//! therefore depends only on the seed and its place, not on the other counts: a run with more
//! conversations has the same test set. The same config writes byte-identical files.
//!
//! # Uniqueness
//! No two images of a run are pixel-identical (so the splits share no image): every image has
//! its own background tint and jittered layout, and the raw pixels' SHA-256 is checked
//! against every image drawn before; a repeat is redrawn from the next attempt's stream
//! (attempt 1, 2, …; [`MAX_ATTEMPTS`]). The test split is drawn first, then dev, then train,
//! so a (vanishingly rare) redraw never touches the test set.
//!
//! # Writing
//! `out` must not exist or be an empty directory ([`SynthError::OutputNotEmpty`]). Everything
//! is written into a temporary directory beside it (`.<name>.synth-XXXXXX`) and renamed into
//! place at the end, so a failed run leaves no partial output.
//!
//! # Choices
//! - Text is rasterised with `ab_glyph` from the bundled DejaVu Sans Mono Bold 2.37
//!   (`assets/DejaVuSansMono-Bold.ttf`, the smallest DejaVu face; licence in
//!   `assets/DejaVu-LICENSE.txt`). Charts and tables are drawn with the same primitives rather
//!   than with plotters: plotters' `ab_glyph` feature replaces its font back end for every
//!   crate of a build, so the SVG plots of the other studies (built in the same `experiments`
//!   binary) would then need a registered font and lay their text out differently.
//! - Shapes are anti-aliased by 4 × 4 supersampling; text by the glyph coverage.
//! - Text sizes scale with `image_size`: at the default 224 px chart and table labels are
//!   set at 11–14 px; below about 160 px they become hard to read (64 px, the smallest size
//!   allowed, is meant for tests).
//! - The per-module docs (`natural`, `scene_text`, `document` in the source) give every
//!   drawing range and question template.

mod document;
mod natural;
mod qa;
mod raster;
mod scene_text;

pub use document::{BAR_LABELS, COLUMN_LABELS, ROW_LABELS};
pub use natural::{SHAPE_COLORS, SHAPES};
pub use scene_text::{TEXT_COLORS, WORDS};

use crate::metrics::{Category, Source};
use ab_glyph::FontRef;
use image::RgbImage;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// `"geb-synt"` in ASCII: the first key of every stream of the generator.
pub const NAMESPACE: u64 = 0x6765_622D_7379_6E74;
/// Split key of the training conversations.
pub const SPLIT_TRAIN: u64 = 0;
/// Split key of the dev items.
pub const SPLIT_DEV: u64 = 1;
/// Split key of the test items.
pub const SPLIT_TEST: u64 = 2;
/// Purpose: an image's content (followed by the attempt number).
pub const PURPOSE_IMAGE: u64 = 1;
/// Purpose: how many items or turns an image gets and of which kind.
pub const PURPOSE_PLAN: u64 = 2;
/// Purpose: the questions of an image.
pub const PURPOSE_QUESTIONS: u64 = 3;
/// The most attempts at a pixel-unique image before [`SynthError::Duplicate`].
pub const MAX_ATTEMPTS: u64 = 64;
/// The version of the output layout, recorded in `synth.json`.
pub const FORMAT_VERSION: u32 = 1;
/// The bundled font, as recorded in `synth.json`.
pub const FONT: &str = "DejaVu Sans Mono Bold 2.37";

/// LLaVA's image placeholder, at the front of a conversation's first human turn.
pub const IMAGE_TOKEN: &str = "<image>";

/// The most images (and items) of one split: names have six digits.
pub const MAX_COUNT: usize = 1_000_000;
/// The smallest image side in pixels.
pub const MIN_IMAGE_SIZE: u32 = 64;
/// The largest image side in pixels.
pub const MAX_IMAGE_SIZE: u32 = 2048;

/// What [`generate`] makes. Every field changes the output; the defaults are the study's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SynthConfig {
    /// Training conversations (= training images), ≥ 1 (default 2000).
    pub conversations: usize,
    /// Test items, ≥ 3, divided evenly over the three categories (default 300: 100 each).
    pub items: usize,
    /// Dev items, ≥ 3, divided like `items` (default 150).
    pub dev_items: usize,
    /// The seed of every stream (default 20260722).
    pub seed: u64,
    /// The side of the square images in pixels, 64..=2048 (default 224).
    pub image_size: u32,
}

impl Default for SynthConfig {
    fn default() -> Self {
        Self {
            conversations: 2000,
            items: 300,
            dev_items: 150,
            seed: 20260722,
            image_size: 224,
        }
    }
}

impl SynthConfig {
    /// Checks the config, naming the command-line option at fault.
    ///
    /// # Errors
    /// [`SynthError::Config`].
    pub fn validate(&self) -> Result<(), SynthError> {
        let bad =
            |option: &'static str, message: String| Err(SynthError::Config { option, message });
        if self.conversations == 0 {
            return bad("--conversations", "must be at least 1 (got 0)".to_string());
        }
        for (option, n) in [("--items", self.items), ("--dev-items", self.dev_items)] {
            if n < 3 {
                return bad(
                    option,
                    format!("must be at least 3, one item per category (got {n})"),
                );
            }
        }
        for (option, n) in [
            ("--conversations", self.conversations),
            ("--items", self.items),
            ("--dev-items", self.dev_items),
        ] {
            if n >= MAX_COUNT {
                return bad(option, format!("must be below {MAX_COUNT} (got {n})"));
            }
        }
        if !(MIN_IMAGE_SIZE..=MAX_IMAGE_SIZE).contains(&self.image_size) {
            return bad(
                "--image-size",
                format!(
                    "must be between {MIN_IMAGE_SIZE} and {MAX_IMAGE_SIZE} pixels (got {})",
                    self.image_size
                ),
            );
        }
        Ok(())
    }
}

/// Why [`generate`] failed. Nothing is left at `out` in any case.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// An option is out of range.
    #[error("{option}: {message}")]
    Config {
        /// The command-line option (`--items`, …).
        option: &'static str,
        /// What is wrong.
        message: String,
    },
    /// `out` holds files already.
    #[error(
        "{}: the output directory exists and is not empty; give a new --out or remove it",
        .0.display()
    )]
    OutputNotEmpty(PathBuf),
    /// `out` exists and is not a directory.
    #[error("{}: exists and is not a directory", .0.display())]
    OutputNotDirectory(PathBuf),
    /// A file system operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path operated on.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A PNG could not be encoded.
    #[error("{}: cannot encode the PNG: {source}", path.display())]
    Png {
        /// The image's path under `images/`.
        path: PathBuf,
        /// The encoder's error.
        source: image::ImageError,
    },
    /// No pixel-unique image was found (not expected to happen: see the module docs).
    #[error(
        "{split} image {index} of {category}: every one of {MAX_ATTEMPTS} attempts repeats an earlier image"
    )]
    Duplicate {
        /// `train`, `dev` or `test`.
        split: &'static str,
        /// The category.
        category: &'static str,
        /// The image's index within its category and split.
        index: usize,
    },
}

/// One turn of a LLaVA conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `human` or `gpt`.
    pub from: String,
    /// The text (the first human turn starts with `<image>\n`).
    pub value: String,
}

/// One record of `train.json` (LLaVA format).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainRecord {
    /// `train-NNNNNN`.
    pub id: String,
    /// The image, relative to `images/` (`train/NNNNNN.png`).
    pub image: String,
    /// 2–4 human/gpt pairs, alternating, starting with human and ending with gpt.
    pub conversations: Vec<Message>,
}

/// One line of `dev.jsonl` / `test.jsonl`: the GEB manifest item `geb eval` reads (written
/// without `dataset`; `options` for CV-Bench items only).
pub use crate::readout::eval::ManifestItem;

/// The counts of one evaluation split.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitCounts {
    /// Items.
    pub items: usize,
    /// Images.
    pub images: usize,
    /// Items per category name.
    pub by_category: BTreeMap<String, usize>,
    /// Items per source name.
    pub by_source: BTreeMap<String, usize>,
    /// `mme` items per gold answer (`Yes`, `No`).
    pub mme_answers: BTreeMap<String, usize>,
    /// `cvbench` items per gold letter (`(A)`, …).
    pub cvbench_answers: BTreeMap<String, usize>,
}

/// The counts of the training conversations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainCounts {
    /// Conversations (one image each).
    pub conversations: usize,
    /// Question/answer turns over all conversations.
    pub turns: usize,
    /// Conversations per category name.
    pub by_category: BTreeMap<String, usize>,
    /// Turns per answer form (the source whose form the answer takes).
    pub by_source: BTreeMap<String, usize>,
}

/// What a run wrote: the content of `synth.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SynthSummary {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// [`FONT`].
    pub font: String,
    /// The config of the run.
    pub config: SynthConfig,
    /// `train.json`.
    pub train: TrainCounts,
    /// `dev.jsonl`.
    pub dev: SplitCounts,
    /// `test.jsonl`.
    pub test: SplitCounts,
}

/// What a category generator is asked for.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// A training conversation: 2–4 turns.
    Train,
    /// Evaluation items: 1..=min(2, `max_items`).
    Eval { max_items: usize },
}

/// One image and its questions.
struct Unit {
    image: RgbImage,
    qas: Vec<qa::Qa>,
}

/// What every drawing needs.
struct Ctx {
    size: u32,
    font: FontRef<'static>,
}

/// The streams of one image.
struct Streams {
    seed: u64,
    split: u64,
    category: u64,
    index: u64,
    attempt: u64,
}

impl Streams {
    fn rng(&self, purpose: u64) -> ChaCha8Rng {
        bindscope_core::rng::stream(
            self.seed,
            &[NAMESPACE, self.split, self.category, self.index, purpose],
        )
    }
    fn image(&self) -> ChaCha8Rng {
        bindscope_core::rng::stream(
            self.seed,
            &[
                NAMESPACE,
                self.split,
                self.category,
                self.index,
                PURPOSE_IMAGE,
                self.attempt,
            ],
        )
    }
    fn plan(&self) -> ChaCha8Rng {
        self.rng(PURPOSE_PLAN)
    }
    fn questions(&self) -> ChaCha8Rng {
        self.rng(PURPOSE_QUESTIONS)
    }
}

/// The number of a split's `n` items that go to category `c` (0, 1, 2): `n / 3`, plus one for
/// the first `n mod 3` categories.
pub fn category_share(n: usize, c: usize) -> usize {
    n / 3 + usize::from(c < n % 3)
}

fn split_name(split: u64) -> &'static str {
    match split {
        SPLIT_TRAIN => "train",
        SPLIT_DEV => "dev",
        _ => "test",
    }
}

/// Draws the unit of `(split, category, index)`, redrawing its image from the next attempt
/// while its pixels repeat an earlier image's.
fn draw_unique(
    ctx: &Ctx,
    seen: &mut HashSet<[u8; 32]>,
    seed: u64,
    (split, category, index): (u64, Category, usize),
    want: Want,
) -> Result<Unit, SynthError> {
    let cat = Category::ALL
        .iter()
        .position(|&c| c == category)
        .expect("a category") as u64;
    for attempt in 0..MAX_ATTEMPTS {
        let s = Streams {
            seed,
            split,
            category: cat,
            index: index as u64,
            attempt,
        };
        let unit = match category {
            Category::Natural => natural::unit(ctx, &s, want),
            Category::SceneText => scene_text::unit(ctx, &s, want),
            Category::Document => document::unit(ctx, &s, want),
        };
        let digest: [u8; 32] = Sha256::digest(unit.image.as_raw()).into();
        if seen.insert(digest) {
            return Ok(unit);
        }
    }
    Err(SynthError::Duplicate {
        split: split_name(split),
        category: category.name(),
        index,
    })
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SynthError + '_ {
    move |source| SynthError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Encodes `img` as PNG, writes it to `root/images/rel` and returns the file's hex SHA-256.
fn write_png(root: &Path, rel: &str, img: &RgbImage) -> Result<String, SynthError> {
    let mut bytes = Vec::new();
    image::DynamicImage::ImageRgb8(img.clone())
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .map_err(|source| SynthError::Png {
            path: PathBuf::from(rel),
            source,
        })?;
    let path = root.join("images").join(rel);
    std::fs::write(&path, &bytes).map_err(io_err(&path))?;
    Ok(hex(&Sha256::digest(&bytes)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes one evaluation split's images and manifest lines; returns its counts.
fn eval_split(
    ctx: &Ctx,
    seen: &mut HashSet<[u8; 32]>,
    seed: u64,
    split: u64,
    n: usize,
    root: &Path,
) -> Result<(String, SplitCounts), SynthError> {
    let name = split_name(split);
    let mut lines = String::new();
    let mut counts = SplitCounts::default();
    let mut image_no = 0usize;
    for (ci, &category) in Category::ALL.iter().enumerate() {
        let mut left = category_share(n, ci);
        let mut index = 0usize;
        while left > 0 {
            let want = Want::Eval { max_items: left };
            let unit = draw_unique(ctx, seen, seed, (split, category, index), want)?;
            let rel = format!("{name}/{image_no:06}.png");
            let sha256 = write_png(root, &rel, &unit.image)?;
            let group = format!("{name}-{image_no:06}");
            for (k, q) in unit.qas.into_iter().take(left).enumerate() {
                let item = ManifestItem {
                    id: format!("{group}-{k}"),
                    source: q.source,
                    category,
                    question: q.question,
                    answers: vec![q.gold.clone()],
                    options: q.options,
                    image: rel.clone(),
                    image_group: group.clone(),
                    sha256: sha256.clone(),
                    dataset: None,
                };
                lines.push_str(&serde_json::to_string(&item).expect("serializable"));
                lines.push('\n');
                counts.items += 1;
                left -= 1;
                *counts
                    .by_category
                    .entry(category.name().into())
                    .or_default() += 1;
                *counts.by_source.entry(q.source.name().into()).or_default() += 1;
                match q.source {
                    Source::Mme => *counts.mme_answers.entry(q.gold).or_default() += 1,
                    Source::Cvbench => *counts.cvbench_answers.entry(q.gold).or_default() += 1,
                    _ => {}
                }
            }
            counts.images += 1;
            image_no += 1;
            index += 1;
        }
    }
    Ok((lines, counts))
}

/// Writes the training images and returns `train.json`'s records and counts.
fn train_split(
    ctx: &Ctx,
    seen: &mut HashSet<[u8; 32]>,
    seed: u64,
    n: usize,
    root: &Path,
) -> Result<(Vec<TrainRecord>, TrainCounts), SynthError> {
    let mut records = Vec::with_capacity(n);
    let mut counts = TrainCounts::default();
    for i in 0..n {
        let category = Category::ALL[i % 3];
        let unit = draw_unique(ctx, seen, seed, (SPLIT_TRAIN, category, i / 3), Want::Train)?;
        let rel = format!("train/{i:06}.png");
        write_png(root, &rel, &unit.image)?;
        let mut conversations = Vec::with_capacity(2 * unit.qas.len());
        for (t, q) in unit.qas.iter().enumerate() {
            let value = if t == 0 {
                format!("{}\n{}", IMAGE_TOKEN, q.question)
            } else {
                q.question.clone()
            };
            conversations.push(Message {
                from: "human".into(),
                value,
            });
            conversations.push(Message {
                from: "gpt".into(),
                value: q.train_answer.clone(),
            });
            *counts.by_source.entry(q.source.name().into()).or_default() += 1;
        }
        counts.conversations += 1;
        counts.turns += unit.qas.len();
        *counts
            .by_category
            .entry(category.name().into())
            .or_default() += 1;
        records.push(TrainRecord {
            id: format!("train-{i:06}"),
            image: rel,
            conversations,
        });
    }
    Ok((records, counts))
}

/// Refuses an `out` that exists and is not an empty directory.
fn check_out(out: &Path) -> Result<(), SynthError> {
    match std::fs::metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(out)(e)),
        Ok(m) if !m.is_dir() => Err(SynthError::OutputNotDirectory(out.to_path_buf())),
        Ok(_) => {
            let mut entries = std::fs::read_dir(out).map_err(io_err(out))?;
            if entries.next().is_some() {
                Err(SynthError::OutputNotEmpty(out.to_path_buf()))
            } else {
                Ok(())
            }
        }
    }
}

/// Generates the mini-GEB described by `cfg` into the new directory `out` (module docs):
/// `images/`, `train.json`, `dev.jsonl`, `test.jsonl` and `synth.json`. Returns what
/// `synth.json` holds.
///
/// `out`'s parent directories are created if missing; `out` itself appears only when
/// everything is written (a temporary directory beside it is renamed into place).
///
/// # Errors
/// [`SynthError::Config`] for an option out of range and [`SynthError::OutputNotEmpty`] /
/// [`SynthError::OutputNotDirectory`] for an `out` in the way, both before anything is
/// drawn; I/O and encoding errors with the path. No partial output is left on error.
pub fn generate(cfg: &SynthConfig, out: &Path) -> Result<SynthSummary, SynthError> {
    cfg.validate()?;
    check_out(out)?;
    let parent = match out.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => p.to_path_buf(),
        None => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(io_err(&parent))?;
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{name}.synth-");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix);
    #[cfg(unix)]
    {
        // The umask applies, as for a directory made by `mkdir` (tempfile's default is 0o700).
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o777));
    }
    let tmp = builder.tempdir_in(&parent).map_err(io_err(&parent))?;
    let root = tmp.path();
    for split in ["train", "dev", "test"] {
        let dir = root.join("images").join(split);
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    }

    let ctx = Ctx {
        size: cfg.image_size,
        font: raster::font(),
    };
    let mut seen = HashSet::new();
    let (test_lines, test) = eval_split(&ctx, &mut seen, cfg.seed, SPLIT_TEST, cfg.items, root)?;
    let (dev_lines, dev) = eval_split(&ctx, &mut seen, cfg.seed, SPLIT_DEV, cfg.dev_items, root)?;
    let (records, train) = train_split(&ctx, &mut seen, cfg.seed, cfg.conversations, root)?;

    let summary = SynthSummary {
        format_version: FORMAT_VERSION,
        font: FONT.into(),
        config: cfg.clone(),
        train,
        dev,
        test,
    };
    let files: [(&str, Vec<u8>); 4] = [
        ("test.jsonl", test_lines.into_bytes()),
        ("dev.jsonl", dev_lines.into_bytes()),
        ("train.json", pretty(&records)),
        ("synth.json", pretty(&summary)),
    ];
    for (file, bytes) in files {
        let path = root.join(file);
        std::fs::write(&path, bytes).map_err(io_err(&path))?;
    }

    // Into place: an empty `out` is removed first (rename onto a directory is not portable).
    if out.is_dir() {
        std::fs::remove_dir(out).map_err(io_err(out))?;
    }
    let kept = tmp.keep();
    std::fs::rename(&kept, out).map_err(|e| {
        let _ = std::fs::remove_dir_all(&kept);
        io_err(out)(e)
    })?;
    Ok(summary)
}

/// Pretty JSON with a final newline.
fn pretty<T: Serialize>(value: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(value).expect("serializable");
    v.push(b'\n');
    v
}
