//! File bytes → 8-bit RGB, as Pillow + `ImageOps.exif_transpose` + `convert("RGB")` give them.

use super::{Alpha, DecodeOptions, ImageError, RgbImage};
use ::image::{DynamicImage, ImageFormat, ImageReader};
use mozjpeg::ColorSpace;
use std::cell::Cell;
use std::io::{BufRead, Cursor, Read};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;

/// Decodes `bytes` (the content of `path`, used only in error messages).
pub(super) fn decode(
    bytes: &[u8],
    path: &Path,
    opts: &DecodeOptions,
) -> Result<RgbImage, ImageError> {
    let corrupt = |message: String| ImageError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    let unsupported = |message: String| ImageError::Unsupported {
        path: path.to_path_buf(),
        message,
    };
    if bytes.is_empty() {
        return Err(corrupt("empty file".into()));
    }
    let img = if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        let j = decode_jpeg(bytes).map_err(|e| match e {
            JpegError::Corrupt(m) => corrupt(format!("corrupt JPEG: {m}")),
            JpegError::Unsupported(m) => unsupported(format!("unsupported JPEG: {m}")),
        })?;
        let (w, h) = (j.width, j.height);
        match j.pixels {
            JpegPixels::Gray(g) => gray_to_rgb(w, h, &g),
            JpegPixels::Rgb(data) => RgbImage {
                width: w,
                height: h,
                data,
            },
            JpegPixels::Cmyk(c) => cmyk_to_rgb(w, h, &c),
        }
    } else {
        let reader = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| corrupt(format!("cannot read: {e}")))?;
        let Some(format) = reader.format() else {
            return Err(unsupported(
                "unrecognized image format (not PNG, JPEG, TIFF, BMP, GIF or WebP)".into(),
            ));
        };
        let dynamic = reader.decode().map_err(|e| match e {
            ::image::ImageError::Unsupported(_) | ::image::ImageError::Limits(_) => {
                unsupported(format!("{}: {e}", format_name(format)))
            }
            _ => corrupt(format!("{}: {e}", format_name(format))),
        })?;
        dynamic_to_rgb(dynamic, opts.alpha)
    };
    if img.width == 0 || img.height == 0 {
        return Err(corrupt("image has zero width or height".into()));
    }
    Ok(if opts.exif_orientation {
        orient(img, exif_orientation(bytes))
    } else {
        img
    })
}

fn format_name(f: ImageFormat) -> String {
    format!("{f:?}").to_uppercase()
}

/// Why libjpeg could not decode a JPEG (the message is libjpeg's, or ours for the checks below).
enum JpegError {
    /// Damaged or truncated data.
    Corrupt(String),
    /// A valid JPEG variant this build does not decode (arithmetic coding, lossless, 12-bit, ...).
    Unsupported(String),
}

/// libjpeg's output, interleaved, row-major, `width * height * channels` bytes.
enum JpegPixels {
    /// One channel (`JCS_GRAYSCALE`, Pillow mode `L`).
    Gray(Vec<u8>),
    /// R, G, B (`JCS_RGB`, Pillow mode `RGB`).
    Rgb(Vec<u8>),
    /// C, M, Y, K with the Adobe inversion undone (Pillow mode `CMYK` read with raw mode `CMYK;I`).
    Cmyk(Vec<u8>),
}

struct JpegImage {
    width: usize,
    height: usize,
    pixels: JpegPixels,
}

/// Pillow refuses images above twice `Image.MAX_IMAGE_PIXELS` (`DecompressionBombError`).
const MAX_PIXELS: usize = 2 * 89_478_485;

/// The file's bytes as libjpeg's data source, remembering whether libjpeg asked for more than
/// there is. The `mozjpeg` source manager answers the end of data with a fake EOI marker and a
/// warning (libjpeg's `JWRN_JPEG_EOF`), so a truncated file would come back grey-filled; Pillow
/// feeds libjpeg through a suspending source and raises "image file is truncated" instead, so
/// we turn that case into an error.
struct EofReader<'a> {
    rest: &'a [u8],
    hit_eof: &'a Cell<bool>,
}

impl Read for EofReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.fill_buf()?.len().min(buf.len());
        buf[..n].copy_from_slice(&self.rest[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for EofReader<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.rest.is_empty() {
            self.hit_eof.set(true);
        }
        Ok(self.rest)
    }

    fn consume(&mut self, n: usize) {
        self.rest = &self.rest[n.min(self.rest.len())..];
    }
}

/// Decodes a JPEG with libjpeg (the `mozjpeg` crate: mozjpeg's decoder is libjpeg-turbo's, the
/// library Pillow links), configured as Pillow's `JpegDecode.c` leaves it: islow IDCT, fancy
/// upsampling, the colour space libjpeg infers from the JFIF / Adobe markers and component ids,
/// output `JCS_GRAYSCALE`, `JCS_RGB` or `JCS_CMYK` by component count (Pillow modes `L`, `RGB`,
/// `CMYK`). libjpeg warnings (corrupt entropy data and the like) are ignored as Pillow ignores
/// them; running out of data and libjpeg's fatal errors are errors.
///
/// Built without SIMD, libjpeg-turbo's C IDCT wraps outputs far outside 0..=255 (through its
/// range-limit table) where its x86 SIMD kernels, which Pillow's wheels use, saturate: only
/// corrupt entropy data or absurd quantization tables get there, and there the pixels differ
/// from Pillow's.
///
/// The crate reports libjpeg's fatal errors by unwinding (`resume_unwind` from the C error
/// handler, its documented mechanism), so the whole decode runs under `catch_unwind`.
fn decode_jpeg(bytes: &[u8]) -> Result<JpegImage, JpegError> {
    let hit_eof = Cell::new(false);
    let truncated = || JpegError::Corrupt("premature end of data (truncated file)".into());
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| libjpeg_decode(bytes, &hit_eof)));
    match outcome {
        Ok(Ok(img)) => Ok(img),
        // An error after libjpeg ran out of data comes from the truncation.
        Ok(Err(_)) | Err(_) if hit_eof.get() => Err(truncated()),
        Ok(Err(e)) => Err(e),
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("libjpeg error");
            let msg = msg
                .strip_prefix("libjpeg fatal error: ")
                .unwrap_or(msg)
                .to_string();
            let lower = msg.to_lowercase();
            // libjpeg's JERR_SOF_UNSUPPORTED, JERR_BAD_PRECISION, JERR_ARITH_NOTIMPL,
            // JERR_NOT_COMPILED, JERR_CONVERSION_NOTIMPL.
            let unsupported = [
                "unsupported",
                "not supported",
                "omitted at compile time",
                "not implemented",
            ]
            .iter()
            .any(|k| lower.contains(k));
            Err(if unsupported {
                JpegError::Unsupported(msg)
            } else {
                JpegError::Corrupt(msg)
            })
        }
    }
}

fn libjpeg_decode(bytes: &[u8], hit_eof: &Cell<bool>) -> Result<JpegImage, JpegError> {
    let io_err = |e: std::io::Error| JpegError::Corrupt(e.to_string());
    let reader = EofReader {
        rest: bytes,
        hit_eof,
    };
    let dec = mozjpeg::Decompress::builder()
        .from_reader(reader)
        .map_err(io_err)?;
    let (width, height) = dec.size();
    if width == 0 || height == 0 {
        return Err(JpegError::Corrupt("image has zero width or height".into()));
    }
    if width.saturating_mul(height) > MAX_PIXELS {
        return Err(JpegError::Unsupported(format!(
            "{width}x{height} exceeds {MAX_PIXELS} pixels (Pillow's decompression-bomb limit)"
        )));
    }
    let ncomp = dec.components().len();
    let out = match ncomp {
        1 => ColorSpace::JCS_GRAYSCALE,
        3 => ColorSpace::JCS_RGB,
        4 => ColorSpace::JCS_CMYK,
        n => {
            return Err(JpegError::Unsupported(format!(
                "{n} components (Pillow reads 1, 3 or 4)"
            )));
        }
    };
    let mut started = dec.to_colorspace(out).map_err(io_err)?;
    let data: Vec<u8> = started.read_scanlines().map_err(io_err)?;
    if hit_eof.get() {
        return Err(JpegError::Corrupt(
            "premature end of data (truncated file)".into(),
        ));
    }
    if data.len() != width * height * ncomp {
        return Err(JpegError::Corrupt(format!(
            "libjpeg returned {} bytes for {width}x{height}x{ncomp}",
            data.len()
        )));
    }
    // Read on to EOI as Pillow does; running out of data only here, after every scanline, is
    // not an error (Pillow ignores the suspension there too).
    started.finish().map_err(io_err)?;
    let pixels = match ncomp {
        1 => JpegPixels::Gray(data),
        3 => JpegPixels::Rgb(data),
        // libjpeg returns the stored (Adobe-inverted) CMYK; Pillow's `CMYK;I` raw mode inverts.
        _ => JpegPixels::Cmyk(data.into_iter().map(|v| 255 - v).collect()),
    };
    Ok(JpegImage {
        width,
        height,
        pixels,
    })
}

fn gray_to_rgb(w: usize, h: usize, g: &[u8]) -> RgbImage {
    RgbImage {
        width: w,
        height: h,
        data: g.iter().flat_map(|&v| [v, v, v]).collect(),
    }
}

/// Pillow's `CMYK → RGB` (`Convert.c` `cmyk2rgb`): `x = (255 - k) - round((255 - k) * c / 255)`
/// with its shift-based division by 255.
fn cmyk_to_rgb(w: usize, h: usize, c: &[u8]) -> RgbImage {
    let mut data = Vec::with_capacity(w * h * 3);
    for p in c.chunks_exact(4) {
        let nk = 255 - p[3] as i32;
        for &v in &p[..3] {
            let t = v as i32 * nk + 128;
            let mul = ((t >> 8) + t) >> 8;
            data.push((nk - mul).clamp(0, 255) as u8);
        }
    }
    RgbImage {
        width: w,
        height: h,
        data,
    }
}

/// Pillow's `Image.alpha_composite` of a pixel over an opaque background
/// (`AlphaComposite.c`, 7-bit extra precision, shift-based division by 255).
#[inline]
fn composite(c: [u8; 3], a: u8, bg: [u8; 3]) -> [u8; 3] {
    if a == 0 {
        return bg;
    }
    const PREC: u32 = 7;
    let a = a as u32;
    let blend = 255 * (255 - a);
    let outa255 = a * 255 + blend;
    let coef1 = a * 255 * 255 * (1 << PREC) / outa255;
    let coef2 = 255 * (1 << PREC) - coef1;
    let div255 = |x: u32| ((x >> 8) + x) >> 8;
    std::array::from_fn(|i| {
        let t = c[i] as u32 * coef1 + bg[i] as u32 * coef2;
        (div255(t + (0x80 << PREC)) >> PREC) as u8
    })
}

fn with_alpha(
    w: usize,
    h: usize,
    px: impl Iterator<Item = ([u8; 3], u8)>,
    alpha: Alpha,
) -> RgbImage {
    let mut data = Vec::with_capacity(w * h * 3);
    for (c, a) in px {
        let out = match alpha {
            Alpha::Ignore => c,
            Alpha::Composite(bg) => composite(c, a, bg),
        };
        data.extend_from_slice(&out);
    }
    RgbImage {
        width: w,
        height: h,
        data,
    }
}

/// 16 → 8 bits: the high byte, as Pillow reads 16-bit RGB(A) / LA PNGs (`RGB;16B` raw modes).
#[inline]
fn hi(v: u16) -> u8 {
    (v >> 8) as u8
}

fn dynamic_to_rgb(img: DynamicImage, alpha: Alpha) -> RgbImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    match img {
        DynamicImage::ImageRgb8(b) => RgbImage {
            width: w,
            height: h,
            data: b.into_raw(),
        },
        DynamicImage::ImageLuma8(b) => gray_to_rgb(w, h, b.as_raw()),
        DynamicImage::ImageLumaA8(b) => with_alpha(
            w,
            h,
            b.as_raw().chunks_exact(2).map(|p| ([p[0]; 3], p[1])),
            alpha,
        ),
        DynamicImage::ImageRgba8(b) => with_alpha(
            w,
            h,
            b.as_raw()
                .chunks_exact(4)
                .map(|p| ([p[0], p[1], p[2]], p[3])),
            alpha,
        ),
        // Pillow opens a 16-bit grayscale PNG as mode `I;16` and its convert("RGB") clips every
        // value above 255 to white; we take the high byte instead, like its 16-bit RGB path.
        DynamicImage::ImageLuma16(b) => {
            let g: Vec<u8> = b.as_raw().iter().map(|&v| hi(v)).collect();
            gray_to_rgb(w, h, &g)
        }
        DynamicImage::ImageLumaA16(b) => with_alpha(
            w,
            h,
            b.as_raw()
                .chunks_exact(2)
                .map(|p| ([hi(p[0]); 3], hi(p[1]))),
            alpha,
        ),
        DynamicImage::ImageRgb16(b) => RgbImage {
            width: w,
            height: h,
            data: b.as_raw().iter().map(|&v| hi(v)).collect(),
        },
        DynamicImage::ImageRgba16(b) => with_alpha(
            w,
            h,
            b.as_raw()
                .chunks_exact(4)
                .map(|p| ([hi(p[0]), hi(p[1]), hi(p[2])], hi(p[3]))),
            alpha,
        ),
        // Float images (not produced by the enabled formats): the image crate's conversion.
        other => {
            let b = other.to_rgba8();
            with_alpha(
                w,
                h,
                b.as_raw()
                    .chunks_exact(4)
                    .map(|p| ([p[0], p[1], p[2]], p[3])),
                alpha,
            )
        }
    }
}

/// The EXIF orientation tag (1..=8) of a JPEG, PNG (`eXIf`), TIFF or WebP file; 1 if absent or
/// unreadable (as Pillow does).
pub(super) fn exif_orientation(bytes: &[u8]) -> u8 {
    let Ok(exif) = exif::Reader::new().read_from_container(&mut Cursor::new(bytes)) else {
        return 1;
    };
    exif.get_field(exif::Tag::Orientation, exif::In::PRIMARY)
        .and_then(|f| f.value.get_uint(0))
        .filter(|v| (1..=8).contains(v))
        .map_or(1, |v| v as u8)
}

/// Applies an EXIF orientation as `ImageOps.exif_transpose` does (2 mirror, 3 rotate 180,
/// 4 flip, 5 transpose, 6 rotate 90° clockwise, 7 transverse, 8 rotate 90° counter-clockwise).
pub(super) fn orient(img: RgbImage, orientation: u8) -> RgbImage {
    let (w, h) = (img.width, img.height);
    // (output width, height) and the source pixel of output (x, y).
    let swap = matches!(orientation, 5..=8);
    let (ow, oh) = if swap { (h, w) } else { (w, h) };
    let src = |x: usize, y: usize| -> (usize, usize) {
        match orientation {
            2 => (w - 1 - x, y),
            3 => (w - 1 - x, h - 1 - y),
            4 => (x, h - 1 - y),
            5 => (y, x),
            6 => (y, h - 1 - x),
            7 => (w - 1 - y, h - 1 - x),
            8 => (w - 1 - y, x),
            _ => (x, y),
        }
    };
    if !(2..=8).contains(&orientation) {
        return img;
    }
    let mut data = Vec::with_capacity(img.data.len());
    for y in 0..oh {
        for x in 0..ow {
            let (sx, sy) = src(x, y);
            let i = (sy * w + sx) * 3;
            data.extend_from_slice(&img.data[i..i + 3]);
        }
    }
    RgbImage {
        width: ow,
        height: oh,
        data,
    }
}
