//! Image preparation and noise as the study prepares its inputs (COOCO §4.1–§4.2).
//!
//! 1. **Resize.** An image wider than 640 px is resized to width 640 and height
//!    `int(h · 640 / w)` with Pillow's Lanczos filter (bit for bit, through
//!    `bindscope_data::image::resize`); the box is scaled by the same `640 / w` on both axes
//!    and each coordinate truncated to an integer. An image that is not resized keeps its
//!    box as stored (floats).
//! 2. **Pad.** The image is pasted on a grey (128, 128, 128) square of side `max(w, h)` at
//!    offset `((side − w) // 2, (side − h) // 2)`; the box moves with it.
//! 3. **Noise** (§4.2), on the padded image: every channel of every pixel of the area becomes
//!    `clip(x + N(0, (255·λ)²), 0, 255)` truncated to uint8, in float64. Areas: **target** (the
//!    box's pixels: rows `int(y) .. int(y + h)`, columns `int(x) .. int(x + w)`), **context**
//!    (every other pixel, the grey padding included), **all** (the target, then the context
//!    from a second draw). The draws are standard normals taken in numpy's order: for the
//!    target one per value of the box region (rows, columns, channels); for the context one
//!    per value of the whole image, those falling inside the box unused (a draw of the
//!    image's shape, masked). Each (image, area, level) has its own seeded stream
//!    ([`noise_stream`]); the study's code drew from numpy's unseeded global generator, so
//!    its noise cannot be reproduced, only its distribution.

use crate::CoocoError;
use bindscope_data::image::{Filter, RgbImage, resize};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

/// The width above which images are resized.
pub const MAX_WIDTH: usize = 640;
/// The padding colour.
pub const GREY: [u8; 3] = [128, 128, 128];

/// `"cooco"` in ASCII: the namespace of the noise streams.
const COOCO: u64 = 0x0063_6F6F_636F;

/// Where the noise goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseArea {
    /// No noise.
    None,
    /// Inside the target box.
    Target,
    /// Outside it.
    Context,
    /// Both, with two draws.
    All,
}

impl NoiseArea {
    /// The command-line and record spelling.
    pub fn name(self) -> &'static str {
        match self {
            NoiseArea::None => "none",
            NoiseArea::Target => "target",
            NoiseArea::Context => "context",
            NoiseArea::All => "all",
        }
    }

    /// From [`NoiseArea::name`].
    ///
    /// # Errors
    /// [`CoocoError::Invalid`] naming the four.
    pub fn parse(s: &str) -> Result<Self, CoocoError> {
        [Self::None, Self::Target, Self::Context, Self::All]
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                CoocoError::Invalid(format!(
                    "unknown noise area '{s}' (expected none, target, context or all)"
                ))
            })
    }
}

/// An image after resizing and padding, with its box.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The square image.
    pub image: RgbImage,
    /// The box `[x, y, w, h]` in its pixels.
    pub bbox: [f64; 4],
    /// Whether the image was resized (its box then holds integers).
    pub resized: bool,
    /// `[x, y]` where the (resized) image sits on the square.
    pub offset: [usize; 2],
    /// `[width, height]` of the (resized) image before padding.
    pub content: [usize; 2],
}

/// Resizes and pads `img` and moves `bbox` (`[x, y, w, h]`) with it (steps 1–2 of the
/// [module docs](self)).
///
/// # Errors
/// [`CoocoError::Invalid`] for an empty image, a box outside it, or a box that the resize
/// truncates to less than a pixel.
pub fn prepare(img: &RgbImage, bbox: [f64; 4]) -> Result<Prepared, CoocoError> {
    let (w, h) = (img.width, img.height);
    if w == 0 || h == 0 {
        return Err(CoocoError::Invalid(format!(
            "cannot prepare a {w}x{h} image"
        )));
    }
    let (img, bbox, resized) = if w > MAX_WIDTH {
        let nh = ((h * MAX_WIDTH) as f64 / w as f64) as usize;
        let nh = nh.max(1);
        let out = resize(img, MAX_WIDTH, nh, Filter::Lanczos)
            .map_err(|e| CoocoError::Invalid(e.to_string()))?;
        let s = MAX_WIDTH as f64 / w as f64;
        (out, bbox.map(|c| (c * s).trunc()), true)
    } else {
        (img.clone(), bbox, false)
    };
    if bbox[2] < 1.0 || bbox[3] < 1.0 {
        let after = if resized {
            format!(" after the resize to width {MAX_WIDTH}")
        } else {
            String::new()
        };
        return Err(CoocoError::Invalid(format!(
            "the box is {} x {} px{after}: less than a pixel wide or high",
            bbox[2], bbox[3]
        )));
    }
    if bbox[0] + bbox[2] > img.width as f64 || bbox[1] + bbox[3] > img.height as f64 {
        return Err(CoocoError::Invalid(format!(
            "the box {bbox:?} ([x, y, w, h]) is not inside the {}x{} image",
            img.width, img.height
        )));
    }
    let side = img.width.max(img.height);
    let (ox, oy) = ((side - img.width) / 2, (side - img.height) / 2);
    let mut data = Vec::with_capacity(side * side * 3);
    for _ in 0..side * side {
        data.extend_from_slice(&GREY);
    }
    for y in 0..img.height {
        let src = &img.data[y * img.width * 3..(y + 1) * img.width * 3];
        let at = ((y + oy) * side + ox) * 3;
        data[at..at + src.len()].copy_from_slice(src);
    }
    Ok(Prepared {
        content: [img.width, img.height],
        image: RgbImage {
            width: side,
            height: side,
            data,
        },
        bbox: [bbox[0] + ox as f64, bbox[1] + oy as f64, bbox[2], bbox[3]],
        resized,
        offset: [ox, oy],
    })
}

/// The box's pixel rectangle `[x0, y0, x1, y1)`: `int()` of `x`, `y`, `x + w`, `y + h`,
/// clamped to the image.
pub fn box_pixels(bbox: [f64; 4], width: usize, height: usize) -> [usize; 4] {
    let c = |v: f64, max: usize| (v.max(0.0) as usize).min(max);
    [
        c(bbox[0], width),
        c(bbox[1], height),
        c(bbox[0] + bbox[2], width),
        c(bbox[1] + bbox[3], height),
    ]
}

/// The seeded stream of one (image, area, level) condition: keyed by the image's file name,
/// the area and the level's bits.
pub fn noise_stream(seed: u64, file: &str, area: NoiseArea, level: f64) -> ChaCha8Rng {
    // FNV-1a of the name: a stable key independent of the platform.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in file.bytes() {
        hash = (hash ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    bindscope_core::rng::stream(seed, &[COOCO, hash, area as u64, level.to_bits()])
}

fn noisy(x: u8, sigma: f64, z: f64) -> u8 {
    (x as f64 + sigma * z).clamp(0.0, 255.0) as u8
}

/// Adds noise of level `level` (λ) to `area` of `img` (step 3 of the [module docs](self)),
/// taking the standard-normal draws from `draw` in numpy's order. λ = 0 or area `none` leave
/// the image as it is and draw nothing.
pub fn apply_noise_with(
    img: &mut RgbImage,
    bbox: [f64; 4],
    area: NoiseArea,
    level: f64,
    draw: &mut dyn FnMut() -> f64,
) {
    if area == NoiseArea::None || level == 0.0 {
        return;
    }
    let sigma = 255.0 * level;
    let (w, h) = (img.width, img.height);
    let [x0, y0, x1, y1] = box_pixels(bbox, w, h);
    let inside = |x: usize, y: usize| x >= x0 && x < x1 && y >= y0 && y < y1;
    if matches!(area, NoiseArea::Target | NoiseArea::All) {
        for y in y0..y1 {
            for x in x0..x1 {
                for c in 0..3 {
                    let i = (y * w + x) * 3 + c;
                    img.data[i] = noisy(img.data[i], sigma, draw());
                }
            }
        }
    }
    if matches!(area, NoiseArea::Context | NoiseArea::All) {
        for y in 0..h {
            for x in 0..w {
                for c in 0..3 {
                    let z = draw();
                    if !inside(x, y) {
                        let i = (y * w + x) * 3 + c;
                        img.data[i] = noisy(img.data[i], sigma, z);
                    }
                }
            }
        }
    }
}

/// [`apply_noise_with`] drawing from `rng` (a [`noise_stream`]).
pub fn apply_noise(
    img: &mut RgbImage,
    bbox: [f64; 4],
    area: NoiseArea,
    level: f64,
    rng: &mut ChaCha8Rng,
) {
    apply_noise_with(img, bbox, area, level, &mut || rng.sample(StandardNormal));
}
