//! Paired colour questions built from GQA scene graphs.
//!
//! # Input
//! A directory with the official scene graphs `train_sceneGraphs.json` and
//! `val_sceneGraphs.json` (merged; an image id present in both is an error) and the images as
//! `images/<image_id>.jpg`. A scene graph maps image ids to
//! `{width, height, objects: {object_id: {name, x, y, w, h, attributes, …}}}`.
//!
//! # Rules
//! 1. An object is *colour-bearing* if both box sides are ≥ 8 px and exactly one word of the
//!    15-colour vocabulary [`COLOURS`] is among its attributes (literal, case-sensitive match;
//!    an object with two vocabulary colours is rejected as multi-coloured).
//! 2. A category (object `name`) of an image yields a *pair* if the image has exactly two
//!    colour-bearing objects of that name, their colours differ, and their box centres are at
//!    least 20 px apart along the axis of larger displacement (`|dx| ≥ |dy|`: horizontal, ties
//!    horizontal). That axis sets the relation: the object with the smaller centre x is *left*,
//!    the other *right*; vertically the smaller centre y (image y points down) is *above*, the
//!    other *below*. Each member becomes one question, "What color is the {name}
//!    {on the left|on the right|above|below}?", whose answer is its colour.
//! 3. Pairs are kept only if both answers are among the 10 [`LABELS`] (white, black, blue, red,
//!    brown, green, gray, yellow, orange, pink); the others are counted in the report.
//! 4. Images with at least one kept pair are split 80 / 10 / 10 into train / val / test by a
//!    seeded shuffle of their sorted ids (image-disjoint; both members of a pair share their
//!    image and therefore their split).
//!
//! # Images
//! Each image is resized anisotropically to `side × side` (boxes scaled by `side/width`,
//! `side/height`); the oracle input is the target's box cropped from the original image and
//! stretched to `side × side`. Both resizes use Pillow's bicubic filter
//! ([`bindscope_data::image::resize`]).
//!
//! # Bad input
//! A missing scene-graph file, an unparsable file, a box that leaves its image (strict mode),
//! and an image referenced by a kept pair but absent from `images/` are errors naming the file,
//! image and object. In lenient mode, objects with bad boxes are skipped and counted
//! ([`BuildReport::bad_boxes`]). Every other rejection is counted in the [`BuildReport`].

use crate::rng::{ns, stream};
use crate::split::Split;
use bindscope_data::image::{DecodeOptions, Filter, RgbImage, decode_file, resize};
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The 15 colour words an attribute may match.
pub const COLOURS: [&str; 15] = [
    "white", "black", "blue", "red", "brown", "green", "gray", "yellow", "orange", "pink",
    "purple", "tan", "silver", "beige", "gold",
];

/// The 10 answer classes, in label order.
pub const LABELS: [&str; 10] = [
    "white", "black", "blue", "red", "brown", "green", "gray", "yellow", "orange", "pink",
];

/// Minimum box side of a colour-bearing object, in pixels.
pub const MIN_SIDE: f64 = 8.0;

/// Minimum centre separation of a pair along its axis, in pixels.
pub const MIN_SEPARATION: f64 = 20.0;

/// Why the GQA data could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GqaError {
    /// A required file is missing.
    #[error("{}: missing ({what})", path.display())]
    MissingFile {
        /// The file.
        path: PathBuf,
        /// What it should hold.
        what: String,
    },
    /// A scene-graph file is not valid JSON of the expected shape.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// An image id occurs in two scene-graph files.
    #[error("image {image_id} appears in more than one scene-graph file")]
    DuplicateImage {
        /// The image id.
        image_id: String,
    },
    /// A box leaves its image or is degenerate.
    #[error("image {image_id}, object {object_id} ('{name}'): {detail}")]
    BadBox {
        /// The image id.
        image_id: String,
        /// The object id.
        object_id: String,
        /// Its name.
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// An image used by a pair is not in the image directory.
    #[error(
        "image {image_id} (used by {pairs} pair(s)) not found: {} ({missing} of {needed} images missing)",
        path.display()
    )]
    MissingImage {
        /// The first missing image id.
        image_id: String,
        /// Pairs that need it.
        pairs: usize,
        /// Where it was looked for.
        path: PathBuf,
        /// Images missing in all.
        missing: usize,
        /// Images the pairs need.
        needed: usize,
    },
    /// A decoded image's size differs from its scene graph's `width` × `height`, so the boxes
    /// would not fit it.
    #[error("image {image_id}: decoded {got_w}×{got_h} px, the scene graph says {want_w}×{want_h}")]
    SizeMismatch {
        /// The image id.
        image_id: String,
        /// Decoded width, px.
        got_w: usize,
        /// Decoded height, px.
        got_h: usize,
        /// Scene-graph width, px.
        want_w: f64,
        /// Scene-graph height, px.
        want_h: f64,
    },
    /// An image could not be decoded.
    #[error(transparent)]
    Image(#[from] bindscope_data::image::ImageError),
}

/// One object of a scene graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GqaObject {
    /// Category name.
    pub name: String,
    /// Box left, px.
    pub x: f64,
    /// Box top, px.
    pub y: f64,
    /// Box width, px.
    pub w: f64,
    /// Box height, px.
    pub h: f64,
    /// Attribute words.
    #[serde(default)]
    pub attributes: Vec<String>,
}

/// One image's scene graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SceneGraph {
    /// Image width, px.
    pub width: f64,
    /// Image height, px.
    pub height: f64,
    /// Objects by id.
    #[serde(default)]
    pub objects: BTreeMap<String, GqaObject>,
}

/// Reads one scene-graph file.
///
/// # Errors
/// [`GqaError::MissingFile`] or [`GqaError::Parse`], naming the file.
pub fn read_scene_graphs(path: &Path) -> Result<BTreeMap<String, SceneGraph>, GqaError> {
    if !path.is_file() {
        return Err(GqaError::MissingFile {
            path: path.to_path_buf(),
            what: "GQA scene graphs".into(),
        });
    }
    let file = std::fs::File::open(path).map_err(|e| GqaError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    serde_json::from_reader(std::io::BufReader::new(file)).map_err(|e| GqaError::Parse {
        path: path.to_path_buf(),
        message: format!("not a GQA scene-graph file: {e}"),
    })
}

/// Reads and merges `train_sceneGraphs.json` and `val_sceneGraphs.json` of `dir`.
///
/// # Errors
/// As [`read_scene_graphs`]; [`GqaError::DuplicateImage`].
pub fn load_scene_graphs(dir: &Path) -> Result<BTreeMap<String, SceneGraph>, GqaError> {
    let mut all = BTreeMap::new();
    for name in ["train_sceneGraphs.json", "val_sceneGraphs.json"] {
        for (id, g) in read_scene_graphs(&dir.join(name))? {
            if all.insert(id.clone(), g).is_some() {
                return Err(GqaError::DuplicateImage { image_id: id });
            }
        }
    }
    Ok(all)
}

/// Spatial relation of a pair member to its partner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Relation {
    /// Smaller centre x.
    Left,
    /// Larger centre x.
    Right,
    /// Smaller centre y (image y points down).
    Above,
    /// Larger centre y.
    Below,
}

impl Relation {
    /// The relation's words in the question: "on the left", "on the right", "above", "below".
    pub fn phrase(self) -> &'static str {
        match self {
            Relation::Left => "on the left",
            Relation::Right => "on the right",
            Relation::Above => "above",
            Relation::Below => "below",
        }
    }
}

/// One question (a member of a pair).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// Image id.
    pub image_id: String,
    /// Object id of the target.
    pub object_id: String,
    /// Category.
    pub name: String,
    /// Relation to the partner.
    pub relation: Relation,
    /// "What color is the {name} {on the left | on the right | above | below}?".
    pub text: String,
    /// Answer class (index into [`LABELS`]).
    pub label: usize,
    /// Target box `[x0, y0, x1, y1]` in original image pixels.
    pub bbox: [f64; 4],
    /// Original image size `(width, height)`.
    pub image_size: (f64, f64),
    /// Split of its image.
    pub split: Split,
}

/// What the builder saw and rejected.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildReport {
    /// Images read.
    pub images: usize,
    /// Objects read.
    pub objects: usize,
    /// Objects with a box side under 8 px.
    pub too_small: usize,
    /// Objects with no vocabulary colour.
    pub no_colour: usize,
    /// Objects with two or more vocabulary colours.
    pub multi_colour: usize,
    /// Colour-bearing objects.
    pub colour_bearing: usize,
    /// Objects skipped for a box outside their image (lenient mode only).
    pub bad_boxes: usize,
    /// (image, category) groups with more than two colour-bearing objects.
    pub groups_over_two: usize,
    /// Two-object groups with equal colours.
    pub same_colour: usize,
    /// Two-object groups closer than 20 px along the main axis.
    pub too_close: usize,
    /// Pairs with an answer outside the 10 labels.
    pub outside_labels: usize,
    /// Kept pairs.
    pub pairs: usize,
    /// Images with a kept pair.
    pub pair_images: usize,
    /// Pairs per split (train, val, test).
    pub pairs_per_split: [usize; 3],
}

/// The questions (pair members adjacent: items `2k` and `2k+1` form pair `k`) and the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GqaPairs {
    /// Questions in pair order.
    pub questions: Vec<Question>,
    /// Counts.
    pub report: BuildReport,
}

impl GqaPairs {
    /// Indices (into `questions`) of a split's members, pairs adjacent.
    pub fn split_indices(&self, split: Split) -> Vec<usize> {
        (0..self.questions.len())
            .filter(|&i| self.questions[i].split == split)
            .collect()
    }
}

fn colour_of(o: &GqaObject) -> Result<&'static str, usize> {
    let mut found: Vec<&'static str> = COLOURS
        .iter()
        .copied()
        .filter(|c| o.attributes.iter().any(|a| a == c))
        .collect();
    found.dedup();
    match found.len() {
        1 => Ok(found[0]),
        n => Err(n),
    }
}

fn check_box(id: &str, oid: &str, o: &GqaObject, g: &SceneGraph) -> Result<(), GqaError> {
    let bad = |detail: String| GqaError::BadBox {
        image_id: id.into(),
        object_id: oid.into(),
        name: o.name.clone(),
        detail,
    };
    if !(o.x.is_finite() && o.y.is_finite() && o.w.is_finite() && o.h.is_finite())
        || o.w <= 0.0
        || o.h <= 0.0
    {
        return Err(bad(format!(
            "degenerate box x={} y={} w={} h={}",
            o.x, o.y, o.w, o.h
        )));
    }
    if o.x < 0.0 || o.y < 0.0 || o.x + o.w > g.width || o.y + o.h > g.height {
        return Err(bad(format!(
            "box [{}, {}, {}, {}] leaves the {}×{} image",
            o.x,
            o.y,
            o.x + o.w,
            o.y + o.h,
            g.width,
            g.height
        )));
    }
    Ok(())
}

/// Applies the rules of the module docs.
///
/// `strict`: a bad box is an error (otherwise the object is skipped and counted).
///
/// # Errors
/// [`GqaError::BadBox`] in strict mode.
pub fn build_pairs(
    graphs: &BTreeMap<String, SceneGraph>,
    seed: u64,
    strict: bool,
) -> Result<GqaPairs, GqaError> {
    let mut report = BuildReport {
        images: graphs.len(),
        ..Default::default()
    };
    // (image, pair members) before the split.
    let mut pairs: Vec<(String, [Question; 2])> = Vec::new();
    for (id, g) in graphs {
        let mut by_name: BTreeMap<&str, Vec<(&str, &GqaObject, &'static str)>> = BTreeMap::new();
        for (oid, o) in &g.objects {
            report.objects += 1;
            if let Err(e) = check_box(id, oid, o, g) {
                if strict {
                    return Err(e);
                }
                report.bad_boxes += 1;
                continue;
            }
            if o.w < MIN_SIDE || o.h < MIN_SIDE {
                report.too_small += 1;
                continue;
            }
            match colour_of(o) {
                Ok(c) => {
                    report.colour_bearing += 1;
                    by_name
                        .entry(o.name.as_str())
                        .or_default()
                        .push((oid.as_str(), o, c));
                }
                Err(0) => report.no_colour += 1,
                Err(_) => report.multi_colour += 1,
            }
        }
        for (name, objs) in by_name {
            if objs.len() > 2 {
                report.groups_over_two += 1;
                continue;
            }
            if objs.len() < 2 {
                continue;
            }
            let (a, b) = (objs[0], objs[1]);
            if a.2 == b.2 {
                report.same_colour += 1;
                continue;
            }
            let centre = |o: &GqaObject| (o.x + o.w / 2.0, o.y + o.h / 2.0);
            let (ca, cb) = (centre(a.1), centre(b.1));
            let (dx, dy) = (cb.0 - ca.0, cb.1 - ca.1);
            let horizontal = dx.abs() >= dy.abs();
            let sep = if horizontal { dx.abs() } else { dy.abs() };
            if sep < MIN_SEPARATION {
                report.too_close += 1;
                continue;
            }
            let (la, lb) = (
                LABELS.iter().position(|l| *l == a.2),
                LABELS.iter().position(|l| *l == b.2),
            );
            let (Some(la), Some(lb)) = (la, lb) else {
                report.outside_labels += 1;
                continue;
            };
            let (ra, rb) = match (horizontal, if horizontal { dx > 0.0 } else { dy > 0.0 }) {
                (true, true) => (Relation::Left, Relation::Right),
                (true, false) => (Relation::Right, Relation::Left),
                (false, true) => (Relation::Above, Relation::Below),
                (false, false) => (Relation::Below, Relation::Above),
            };
            let q = |oid: &str, o: &GqaObject, rel: Relation, label: usize| Question {
                image_id: id.clone(),
                object_id: oid.to_string(),
                name: name.to_string(),
                relation: rel,
                text: format!("What color is the {name} {}?", rel.phrase()),
                label,
                bbox: [o.x, o.y, o.x + o.w, o.y + o.h],
                image_size: (g.width, g.height),
                split: Split::Train,
            };
            pairs.push((id.clone(), [q(a.0, a.1, ra, la), q(b.0, b.1, rb, lb)]));
        }
    }
    // Image-disjoint 80/10/10 split by a seeded shuffle of the sorted image ids.
    let mut images: Vec<String> = pairs.iter().map(|p| p.0.clone()).collect();
    images.sort();
    images.dedup();
    let mut shuffled = images.clone();
    shuffled.shuffle(&mut stream(seed, &[ns::GQA_SPLIT]));
    let n = shuffled.len();
    let (n_train, n_val) = ((n * 8) / 10, n / 10);
    let split_of: BTreeMap<&str, Split> = shuffled
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let s = if i < n_train {
                Split::Train
            } else if i < n_train + n_val {
                Split::Val
            } else {
                Split::Test
            };
            (id.as_str(), s)
        })
        .collect();
    let mut questions = Vec::with_capacity(pairs.len() * 2);
    for (id, mut members) in pairs {
        let s = split_of[id.as_str()];
        report.pairs_per_split[s.id() as usize] += 1;
        for m in members.iter_mut() {
            m.split = s;
        }
        questions.extend(members);
    }
    report.pairs = questions.len() / 2;
    report.pair_images = n;
    Ok(GqaPairs { questions, report })
}

/// Path of an image.
pub fn image_path(dir: &Path, image_id: &str) -> PathBuf {
    dir.join("images").join(format!("{image_id}.jpg"))
}

/// Checks that every image of the questions exists.
///
/// # Errors
/// [`GqaError::MissingImage`] naming the first missing image (in image-id order) and counting
/// all missing ones.
pub fn check_images(dir: &Path, questions: &[Question]) -> Result<(), GqaError> {
    let mut pairs_per_image: BTreeMap<&str, usize> = BTreeMap::new();
    for q in questions.iter().step_by(2) {
        *pairs_per_image.entry(q.image_id.as_str()).or_default() += 1;
    }
    let needed = pairs_per_image.len();
    let missing: Vec<(&str, usize)> = pairs_per_image
        .into_iter()
        .filter(|(id, _)| !image_path(dir, id).is_file())
        .collect();
    if let Some(&(id, pairs)) = missing.first() {
        return Err(GqaError::MissingImage {
            image_id: id.to_string(),
            pairs,
            path: image_path(dir, id),
            missing: missing.len(),
            needed,
        });
    }
    Ok(())
}

/// The two encoder inputs of a question: the whole image stretched to `side × side` with the
/// scaled box (in units of the side), and the oracle crop of the box stretched to `side × side`.
///
/// # Errors
/// [`GqaError::SizeMismatch`] when the image is not the scene graph's size; resizing errors.
pub fn inputs(
    image: &RgbImage,
    q: &Question,
    side: usize,
) -> Result<(RgbImage, [f64; 4], RgbImage), GqaError> {
    let (want_w, want_h) = q.image_size;
    if image.width as f64 != want_w || image.height as f64 != want_h {
        return Err(GqaError::SizeMismatch {
            image_id: q.image_id.clone(),
            got_w: image.width,
            got_h: image.height,
            want_w,
            want_h,
        });
    }
    let full = resize(image, side, side, Filter::Bicubic)?;
    let (w, h) = (image.width as f64, image.height as f64);
    let [x0, y0, x1, y1] = q.bbox;
    let bbox = [x0 / w, y0 / h, x1 / w, y1 / h];
    // Crop on whole pixels covering the box (clamped to the image).
    let cx0 = (x0.floor().max(0.0) as usize).min(image.width - 1);
    let cy0 = (y0.floor().max(0.0) as usize).min(image.height - 1);
    let cx1 = (x1.ceil() as usize).clamp(cx0 + 1, image.width);
    let cy1 = (y1.ceil() as usize).clamp(cy0 + 1, image.height);
    let (cw, ch) = (cx1 - cx0, cy1 - cy0);
    let mut data = Vec::with_capacity(cw * ch * 3);
    for y in cy0..cy1 {
        data.extend_from_slice(
            &image.data[(y * image.width + cx0) * 3..(y * image.width + cx1) * 3],
        );
    }
    let crop = resize(
        &RgbImage {
            width: cw,
            height: ch,
            data,
        },
        side,
        side,
        Filter::Bicubic,
    )?;
    Ok((full, bbox, crop))
}

/// Decodes an image of the data set (EXIF orientation applied, alpha dropped as the HF
/// processors do).
///
/// # Errors
/// [`GqaError::Image`] naming the file.
pub fn load_image(dir: &Path, image_id: &str) -> Result<RgbImage, GqaError> {
    Ok(decode_file(
        image_path(dir, image_id),
        &DecodeOptions::hf(),
    )?)
}

/// Inverse-frequency class weights over the 10 labels, `w_c = n / (10 · n_c)` (classes absent
/// from `labels` get weight 0).
pub fn class_weights(labels: &[usize]) -> Vec<f32> {
    let mut counts = [0usize; LABELS.len()];
    for &l in labels {
        counts[l] += 1;
    }
    let n = labels.len() as f64;
    counts
        .iter()
        .map(|&c| {
            if c == 0 {
                0.0
            } else {
                (n / (LABELS.len() as f64 * c as f64)) as f32
            }
        })
        .collect()
}
