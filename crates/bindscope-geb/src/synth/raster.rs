//! The drawing primitives of the generator: filled rectangles, anti-aliased shapes by
//! supersampling, and text rasterised with `ab_glyph` from the bundled DejaVu Sans Mono Bold.
//!
//! Coordinates are pixels, x to the right and y down; pixel `(x, y)` covers
//! `[x, x+1) × [y, y+1)`. Everything is clipped to the canvas, so a layout that does not fit a
//! small `image_size` draws less instead of panicking. Colour blending is
//! `round(bg·(1−c) + fg·c)` per channel for a coverage `c ∈ [0, 1]`; all arithmetic is IEEE
//! `f32` / `f64` without platform-dependent functions, so images are identical everywhere.

use ab_glyph::{Font, FontRef, PxScale, Rect, ScaleFont, point};
use image::RgbImage;

/// An RGB colour.
pub(crate) type Rgb = [u8; 3];

/// The bundled font (DejaVu Sans Mono Bold 2.37; licence in `assets/DejaVu-LICENSE.txt`).
pub(crate) const FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSansMono-Bold.ttf");

/// The bundled font, parsed.
pub(crate) fn font() -> FontRef<'static> {
    FontRef::try_from_slice(FONT_BYTES).expect("the bundled DejaVu font parses")
}

/// A canvas of `size × size` pixels filled with `bg`.
pub(crate) fn canvas(size: u32, bg: Rgb) -> RgbImage {
    RgbImage::from_pixel(size, size, image::Rgb(bg))
}

/// Blends `fg` over the pixel at `(x, y)` with coverage `c` (ignored outside the canvas).
pub(crate) fn blend(img: &mut RgbImage, x: i64, y: i64, fg: Rgb, c: f32) {
    if x < 0 || y < 0 || x >= i64::from(img.width()) || y >= i64::from(img.height()) {
        return;
    }
    let c = c.clamp(0.0, 1.0);
    if c <= 0.0 {
        return;
    }
    let p = img.get_pixel_mut(x as u32, y as u32);
    for (ch, &f) in p.0.iter_mut().zip(&fg) {
        let v = f32::from(*ch) * (1.0 - c) + f32::from(f) * c;
        *ch = v.round().clamp(0.0, 255.0) as u8;
    }
}

/// Fills the pixels of `[x0, x1) × [y0, y1)` with `c` (clipped).
pub(crate) fn fill_rect(img: &mut RgbImage, x0: i64, y0: i64, x1: i64, y1: i64, c: Rgb) {
    let (w, h) = (i64::from(img.width()), i64::from(img.height()));
    for y in y0.max(0)..y1.min(h) {
        for x in x0.max(0)..x1.min(w) {
            img.put_pixel(x as u32, y as u32, image::Rgb(c));
        }
    }
}

/// Samples per pixel side of [`fill_shape`] (16 samples a pixel).
const SUPERSAMPLE: u32 = 4;

/// Fills the set `inside(x, y)` (continuous pixel coordinates) within the bounding box
/// `[x0, x1] × [y0, y1]`, each pixel covered by the fraction of its `4 × 4` sub-pixel centres
/// inside.
pub(crate) fn fill_shape(
    img: &mut RgbImage,
    bbox: (f64, f64, f64, f64),
    color: Rgb,
    inside: impl Fn(f64, f64) -> bool,
) {
    let (x0, y0, x1, y1) = bbox;
    let n = SUPERSAMPLE;
    for py in (y0.floor() as i64)..=(y1.ceil() as i64) {
        for px in (x0.floor() as i64)..=(x1.ceil() as i64) {
            let mut hits = 0u32;
            for j in 0..n {
                for i in 0..n {
                    let sx = px as f64 + (2 * i + 1) as f64 / (2 * n) as f64;
                    let sy = py as f64 + (2 * j + 1) as f64 / (2 * n) as f64;
                    hits += u32::from(inside(sx, sy));
                }
            }
            if hits > 0 {
                blend(img, px, py, color, hits as f32 / (n * n) as f32);
            }
        }
    }
}

/// The ink box of `text` at `px` pixels with the pen at `(0, 0)` on the baseline (y down, so
/// `min.y < 0` above the baseline); `None` for text without ink (spaces only).
pub(crate) fn text_ink(font: &FontRef<'_>, px: f32, text: &str) -> Option<Rect> {
    let mut ink: Option<Rect> = None;
    layout(font, px, text, 0.0, 0.0, |g| {
        if let Some(o) = font.outline_glyph(g) {
            let b = o.px_bounds();
            ink = Some(match ink {
                None => b,
                Some(r) => Rect {
                    min: point(r.min.x.min(b.min.x), r.min.y.min(b.min.y)),
                    max: point(r.max.x.max(b.max.x), r.max.y.max(b.max.y)),
                },
            });
        }
    });
    ink
}

/// Lays `text` out on one line from the pen position `(x, baseline)` with the font's advances
/// and kerning, handing each positioned glyph to `f`.
fn layout(
    font: &FontRef<'_>,
    px: f32,
    text: &str,
    x: f32,
    baseline: f32,
    mut f: impl FnMut(ab_glyph::Glyph),
) {
    let scaled = font.as_scaled(PxScale::from(px));
    let mut pen = x;
    let mut prev = None;
    for ch in text.chars() {
        let id = scaled.glyph_id(ch);
        if let Some(p) = prev {
            pen += scaled.kern(p, id);
        }
        f(id.with_scale_and_position(px, point(pen, baseline)));
        pen += scaled.h_advance(id);
        prev = Some(id);
    }
}

/// Draws `text` at `px` pixels with the pen starting at `(x, baseline)`, anti-aliased by the
/// glyphs' coverage.
pub(crate) fn draw_text(
    img: &mut RgbImage,
    font: &FontRef<'_>,
    px: f32,
    text: &str,
    x: f32,
    baseline: f32,
    color: Rgb,
) {
    let mut glyphs = Vec::new();
    layout(font, px, text, x, baseline, |g| glyphs.push(g));
    for g in glyphs {
        if let Some(o) = font.outline_glyph(g) {
            let b = o.px_bounds();
            let (bx, by) = (b.min.x as i64, b.min.y as i64);
            o.draw(|gx, gy, c| blend(img, bx + i64::from(gx), by + i64::from(gy), color, c));
        }
    }
}

/// Where a text's ink is placed relative to an anchor point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    /// Ink's left edge at the anchor's x.
    Left,
    /// Ink centred on the anchor's x.
    Center,
    /// Ink's right edge at the anchor's x.
    Right,
}

/// Draws `text` with its ink box aligned horizontally at `x` as `align` says and centred
/// vertically on `cy`. Returns the ink width (0 for text without ink).
pub(crate) fn draw_text_at(
    img: &mut RgbImage,
    font: &FontRef<'_>,
    px: f32,
    text: &str,
    (x, cy): (f32, f32),
    align: Align,
    color: Rgb,
) -> f32 {
    let Some(ink) = text_ink(font, px, text) else {
        return 0.0;
    };
    let w = ink.max.x - ink.min.x;
    let left = match align {
        Align::Left => x,
        Align::Center => x - w / 2.0,
        Align::Right => x - w,
    };
    let pen_x = left - ink.min.x;
    let baseline = cy - (ink.min.y + ink.max.y) / 2.0;
    draw_text(img, font, px, text, pen_x, baseline, color);
    w
}

/// The largest pixel size `≤ px` at which the ink of `text` is at most `max_w` wide (never
/// below 1).
pub(crate) fn fit_px(font: &FontRef<'_>, px: f32, text: &str, max_w: f32) -> f32 {
    match text_ink(font, px, text) {
        Some(ink) if ink.max.x - ink.min.x > max_w && max_w > 0.0 => {
            (px * max_w / (ink.max.x - ink.min.x)).max(1.0)
        }
        _ => px,
    }
}

/// Relative luminance of an sRGB colour, with the sRGB curve approximated by a square (WCAG
/// 2's weights; a power of 2 instead of 2.4 keeps it to exact arithmetic, so a threshold on it
/// decides the same on every platform).
pub(crate) fn luminance(c: Rgb) -> f64 {
    let lin = |v: u8| {
        let s = f64::from(v) / 255.0;
        s * s
    };
    0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2])
}

/// The WCAG 2 contrast ratio of two colours (with [`luminance`]), in [1, 21].
pub(crate) fn contrast(a: Rgb, b: Rgb) -> f64 {
    let (la, lb) = (luminance(a), luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}
