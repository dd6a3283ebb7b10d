//! Pillow's `Image.resize` on 8-bit RGB images, reproduced to the last bit.
//!
//! The Hugging Face slow image processors resize through `PIL.Image.resize(size, resample)` on a
//! uint8 image, so matching them means matching Pillow's integer pipeline (`libImaging/Resample.c`,
//! read for its arithmetic, written anew here), not a textbook resampler:
//! - For every output column (then row) the filter is centred at `in0 + (i + 0.5) * scale` and
//!   stretched by `max(scale, 1)` when downscaling (antialiasing); the taps cover
//!   `[trunc(center - support + 0.5), trunc(center + support + 0.5))` clamped to the image, the
//!   weights are evaluated at `(j - center + 0.5) / filterscale` in f64, normalized to sum 1,
//!   then rounded half away from zero to 22-bit fixed point (`PRECISION_BITS = 32 - 8 - 2`).
//! - Two passes, each only if its side changes, each writing uint8 (accumulator seeded with
//!   `1 << 21`, shifted right by 22, clamped to 0..=255). Horizontal first, except — since
//!   Pillow 13 (python-pillow/Pillow#9549) — when the height shrinks by more than twice as many
//!   pixels as the width does (`H - h > 2 * (W - w)`, `h < H`): then vertical first. The order
//!   changes the rounding of the intermediate image, so it is reproduced; with Pillow < 13 the
//!   horizontal pass always came first, and results differ by one level at some pixels.
//! - `NEAREST` is not a convolution: Pillow maps it to an affine transform whose source
//!   coordinate starts at `scale / 2` and accumulates `+= scale` in f64, truncated.
//!
//! Filters and their Pillow codes (`PIL.Image.Resampling`, the `resample` field of
//! `preprocessor_config.json`): 0 nearest, 1 Lanczos (a = 3), 2 bilinear, 3 bicubic
//! (Keys a = -0.5), 4 box, 5 Hamming.

use super::{ImageError, RgbImage};

/// A Pillow resampling filter (`PIL.Image.Resampling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// `NEAREST` (0).
    Nearest,
    /// `LANCZOS` (1), windowed sinc with 3 lobes.
    Lanczos,
    /// `BILINEAR` (2), triangle filter.
    Bilinear,
    /// `BICUBIC` (3), Keys cubic with a = -0.5.
    Bicubic,
    /// `BOX` (4).
    Box,
    /// `HAMMING` (5).
    Hamming,
}

impl Filter {
    /// From Pillow's integer code (the `resample` value in `preprocessor_config.json`).
    ///
    /// # Errors
    /// [`ImageError::Config`] for a code outside 0..=5.
    pub fn from_pil(code: i64) -> Result<Self, ImageError> {
        Ok(match code {
            0 => Filter::Nearest,
            1 => Filter::Lanczos,
            2 => Filter::Bilinear,
            3 => Filter::Bicubic,
            4 => Filter::Box,
            5 => Filter::Hamming,
            _ => {
                return Err(ImageError::Config {
                    path: None,
                    message: format!("resample = {code} is not a PIL filter (0..=5)"),
                });
            }
        })
    }

    /// Pillow's integer code.
    pub fn pil_code(self) -> i64 {
        match self {
            Filter::Nearest => 0,
            Filter::Lanczos => 1,
            Filter::Bilinear => 2,
            Filter::Bicubic => 3,
            Filter::Box => 4,
            Filter::Hamming => 5,
        }
    }

    /// Support radius at scale 1 (Pillow's `struct filter`), `None` for nearest.
    fn support(self) -> Option<f64> {
        match self {
            Filter::Nearest => None,
            Filter::Box => Some(0.5),
            Filter::Bilinear | Filter::Hamming => Some(1.0),
            Filter::Bicubic => Some(2.0),
            Filter::Lanczos => Some(3.0),
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Nearest => unreachable!("nearest has no kernel"),
            Filter::Box => {
                if x > -0.5 && x <= 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 { 1.0 - x } else { 0.0 }
            }
            Filter::Hamming => {
                let x = x.abs();
                if x == 0.0 {
                    1.0
                } else if x >= 1.0 {
                    0.0
                } else {
                    let x = x * std::f64::consts::PI;
                    // Pillow writes these two constants as C floats (0.54f, 0.46f).
                    x.sin() / x * (0.54f32 as f64 + 0.46f32 as f64 * x.cos())
                }
            }
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Filter::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let x = x * std::f64::consts::PI;
        x.sin() / x
    }
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Per output sample: first input index and fixed-point weights.
struct Coeffs {
    start: Vec<usize>,
    weights: Vec<Vec<i32>>,
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for the box `[0, in_size)`.
fn precompute(in_size: usize, out_size: usize, filter: Filter) -> Coeffs {
    let support0 = filter.support().expect("convolution filter");
    let (in0, in1) = (0.0f32, in_size as f32);
    let scale = (in1 - in0) as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = support0 * filterscale;
    let ss = 1.0 / filterscale;
    let mut start = Vec::with_capacity(out_size);
    let mut weights = Vec::with_capacity(out_size);
    for xx in 0..out_size {
        let center = in0 as f64 + (xx as f64 + 0.5) * scale;
        // C casts truncate toward zero.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64)
            .min(in_size as i64)
            .max(xmin as i64) as usize;
        let mut k: Vec<f64> = (xmin..xmax)
            .map(|x| filter.weight((x as f64 - center + 0.5) * ss))
            .collect();
        let ww: f64 = k.iter().sum();
        if ww != 0.0 {
            for w in &mut k {
                *w /= ww;
            }
        }
        let fixed = k
            .iter()
            .map(|&w| {
                let v = w * (1u32 << PRECISION_BITS) as f64;
                if w < 0.0 {
                    (-0.5 + v) as i32
                } else {
                    (0.5 + v) as i32
                }
            })
            .collect();
        start.push(xmin);
        weights.push(fixed);
    }
    Coeffs { start, weights }
}

#[inline]
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

fn horizontal(img: &RgbImage, out_w: usize, filter: Filter) -> RgbImage {
    let c = precompute(img.width, out_w, filter);
    let mut data = vec![0u8; out_w * img.height * 3];
    for y in 0..img.height {
        let src = &img.data[y * img.width * 3..(y + 1) * img.width * 3];
        let dst = &mut data[y * out_w * 3..(y + 1) * out_w * 3];
        for (xx, (s, w)) in c.start.iter().zip(&c.weights).enumerate() {
            let mut acc = [1i32 << (PRECISION_BITS - 1); 3];
            for (j, &k) in w.iter().enumerate() {
                let p = &src[(s + j) * 3..(s + j) * 3 + 3];
                for ch in 0..3 {
                    acc[ch] += p[ch] as i32 * k;
                }
            }
            for ch in 0..3 {
                dst[xx * 3 + ch] = clip8(acc[ch]);
            }
        }
    }
    RgbImage {
        width: out_w,
        height: img.height,
        data,
    }
}

fn vertical(img: &RgbImage, out_h: usize, filter: Filter) -> RgbImage {
    let c = precompute(img.height, out_h, filter);
    let row = img.width * 3;
    let mut data = vec![0u8; row * out_h];
    let mut acc = vec![0i32; row];
    for (yy, (s, w)) in c.start.iter().zip(&c.weights).enumerate() {
        acc.fill(1i32 << (PRECISION_BITS - 1));
        for (j, &k) in w.iter().enumerate() {
            let src = &img.data[(s + j) * row..(s + j + 1) * row];
            for (a, &p) in acc.iter_mut().zip(src) {
                *a += p as i32 * k;
            }
        }
        for (d, &a) in data[yy * row..(yy + 1) * row].iter_mut().zip(&acc) {
            *d = clip8(a);
        }
    }
    RgbImage {
        width: img.width,
        height: out_h,
        data,
    }
}

/// Pillow's nearest-neighbour resize (`ImagingScaleAffine` via `ImagingTransform`).
fn nearest(img: &RgbImage, out_w: usize, out_h: usize) -> RgbImage {
    let index = |in_size: usize, out_size: usize| -> Vec<usize> {
        let a = in_size as f32 as f64 / out_size as f64;
        let mut pos = a * 0.5;
        (0..out_size)
            .map(|_| {
                let i = if pos < 0.0 {
                    0
                } else {
                    (pos as usize).min(in_size - 1)
                };
                pos += a;
                i
            })
            .collect()
    };
    let xs = index(img.width, out_w);
    let ys = index(img.height, out_h);
    let mut data = Vec::with_capacity(out_w * out_h * 3);
    for &y in &ys {
        let src = &img.data[y * img.width * 3..(y + 1) * img.width * 3];
        for &x in &xs {
            data.extend_from_slice(&src[x * 3..x * 3 + 3]);
        }
    }
    RgbImage {
        width: out_w,
        height: out_h,
        data,
    }
}

/// Resizes to `width x height` exactly as `PIL.Image.resize((width, height), filter)` does on an
/// RGB image.
///
/// # Errors
/// [`ImageError::Config`] if a target side is 0 or the image is empty.
pub fn resize(
    img: &RgbImage,
    width: usize,
    height: usize,
    filter: Filter,
) -> Result<RgbImage, ImageError> {
    if width == 0 || height == 0 || img.width == 0 || img.height == 0 {
        return Err(ImageError::Config {
            path: None,
            message: format!(
                "cannot resize {}x{} to {width}x{height}",
                img.width, img.height
            ),
        });
    }
    if width == img.width && height == img.height {
        return Ok(img.clone());
    }
    if filter == Filter::Nearest {
        return Ok(nearest(img, width, height));
    }
    let (w0, h0) = (img.width as i64, img.height as i64);
    let vertical_first = (height as i64) < h0 && h0 - height as i64 > 2 * (w0 - width as i64);
    let out = if vertical_first {
        let v = vertical(img, height, filter);
        if width != img.width {
            horizontal(&v, width, filter)
        } else {
            v
        }
    } else {
        let h = if width != img.width {
            horizontal(img, width, filter)
        } else {
            img.clone()
        };
        if height != img.height {
            vertical(&h, height, filter)
        } else {
            h
        }
    };
    Ok(out)
}
