//! Image decoding and preprocessing that reproduce the Hugging Face image processors of
//! transformers 5.x on their PIL backend (`backend="pil"`, the successor of 4.x's
//! `use_fast=False` slow processors, the path the papers used) bit for bit.
//!
//! # Pipeline
//! 1. [`decode_file`] turns any readable file into 8-bit RGB ([`RgbImage`], `[H, W, 3]` u8),
//!    the array transformers 5.x's `convert_to_rgb(ImageOps.exif_transpose(Image.open(f)))`
//!    gives:
//!    - JPEG through libjpeg itself: the `mozjpeg` crate, whose decoder is libjpeg-turbo's (the
//!      library Pillow links), built from C without SIMD (no `nasm` needed) and left at the
//!      settings Pillow leaves: islow IDCT, fancy upsampling, the colour space libjpeg infers
//!      from the JFIF / Adobe markers. CMYK / YCCK JPEGs come out as CMYK with the Adobe
//!      inversion undone (Pillow's `CMYK;I`), then Pillow's `CMYK → RGB` formula. libjpeg's
//!      warnings (corrupt entropy data) are ignored as Pillow ignores them; a truncated file is
//!      an error, as in Pillow. Identical to Pillow on every valid JPEG tried; the one known
//!      difference is libjpeg-turbo's own: where an IDCT output falls far outside 0..=255
//!      (corrupt data, or crafted quantization tables with values in the tens of thousands) its
//!      C code wraps and its x86 SIMD code, which Pillow's wheels use, saturates. The `image`
//!      crate's JPEG decoder (zune-jpeg) differs from libjpeg by up to 3 levels and is not used
//!      for JPEG (see `image/decode.rs`).
//!    - PNG, TIFF, BMP, GIF, WebP through the `image` crate: grayscale replicated to RGB,
//!      palettes expanded, 16-bit samples reduced to their high byte (Pillow does this for
//!      16-bit RGB / RGBA / LA PNGs; for 16-bit grayscale Pillow's `I;16 → RGB` clips every
//!      value above 255 to white, which is not sane, so there we also take the high byte —
//!      a documented difference from Pillow).
//!    - Transparency ([`Alpha`]): an image with an alpha band (RGBA, LA, 16-bit ones included)
//!      or a `tRNS` transparency (palette, grayscale or RGB PNGs; GIF) is composited over
//!      opaque white with Pillow's `Image.alpha_composite` arithmetic, bit for bit: what
//!      transformers 5.x's `convert_to_rgb` does, in both its PIL and torchvision backends, and
//!      what [`DecodeOptions::default`] and [`DecodeOptions::hf`] select. transformers 4.x's
//!      `convert_to_rgb` instead dropped the alpha channel (`image.convert("RGB")`: the colour
//!      stored under transparent pixels shows); [`Alpha::Ignore`] reproduces that and
//!      [`DecodeOptions::hf_v4`] selects it. For a processor without `do_convert_rgb`
//!      (`ViTImageProcessor`) transformers raises on a non-RGB image; bindscope converts it
//!      the same way.
//!    - EXIF orientation (all 8 values, from JPEG APP1, PNG `eXIf`, TIFF or WebP) is applied
//!      as `ImageOps.exif_transpose` does. The HF processors do **not** apply it (a portrait
//!      phone photo reaches the model on its side); researchers expect it applied, so it is on
//!      by default in [`DecodeOptions::default`], [`DecodeOptions::hf`] and
//!      [`DecodeOptions::hf_v4`], and the references are `exif_transpose` + processor.
//!      Pillow's fallback to an XMP `tiff:Orientation` when EXIF has none is not reproduced.
//!    - ICC profiles are ignored, as in Pillow's `open` / `convert` and the HF processors.
//! 2. [`ImageProcessor::from_file`] reads `preprocessor_config.json` (CLIP, SigLIP, Bit/DINOv2,
//!    ViT classes) and [`ImageProcessor::preprocess_batch`] / [`ImageProcessor::pixel_values`]
//!    resize with Pillow's exact integer resampler ([`resize`]), center-crop, rescale and
//!    normalize into `pixel_values: [N, 3, H, W]` f32, as the PIL backend does (see
//!    [`ImageProcessor`] for how far transformers' default torchvision backend is from it).
//!
//! Errors name the file and what was wrong ([`ImageError`]); [`load_dir`] decodes every file
//! of a directory and reports each failure.
//!
//! ```no_run
//! use bindscope_data::image::{decode_file, DecodeOptions, ImageProcessor};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let proc = ImageProcessor::from_file("clip-vit-base-patch32/preprocessor_config.json")?;
//! let img = decode_file("cat.jpg", &DecodeOptions::hf())?;
//! let pixel_values = proc.pixel_values(&[img], &burn::tensor::Device::flex())?; // [1, 3, 224, 224]
//! # Ok(()) }
//! ```

pub mod anyres;
mod decode;
mod processor;
mod resample;

pub use anyres::{AnyresPixels, AnyresProcessor};
pub use processor::{
    ImageProcessor, PixelBatch, PixelValues, ProcessorKind, ResizeTo, center_crop,
};
pub use resample::{Filter, resize};

use std::path::{Path, PathBuf};

/// An 8-bit RGB image, row-major, interleaved: `data[(y * width + x) * 3 + c]`, i.e. `[H, W, 3]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// `height * width * 3` bytes.
    pub data: Vec<u8>,
}

impl RgbImage {
    /// Wraps `[H, W, 3]` bytes.
    ///
    /// # Errors
    /// [`ImageError::Config`] if `data.len() != width * height * 3`.
    pub fn new(width: usize, height: usize, data: Vec<u8>) -> Result<Self, ImageError> {
        if data.len() != width * height * 3 {
            return Err(ImageError::Config {
                path: None,
                message: format!(
                    "{} bytes for a {width}x{height} RGB image (expected {})",
                    data.len(),
                    width * height * 3
                ),
            });
        }
        Ok(Self {
            width,
            height,
            data,
        })
    }
}

/// What to do with an alpha channel (RGBA, LA, palette, grayscale or RGB with `tRNS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpha {
    /// Drop it, keeping the stored colour of transparent pixels: Pillow's `convert("RGB")`,
    /// which transformers 4.x's `convert_to_rgb` called ([`DecodeOptions::hf_v4`]).
    Ignore,
    /// Composite over an opaque background colour with Pillow's `Image.alpha_composite`
    /// arithmetic. Over white (`[255, 255, 255]`, [`Alpha::WHITE`], the default) this is
    /// transformers 5.x's `convert_to_rgb`.
    Composite([u8; 3]),
}

impl Alpha {
    /// Composite over opaque white: transformers 5.x's `convert_to_rgb`.
    pub const WHITE: Alpha = Alpha::Composite([255, 255, 255]);
}

impl Default for Alpha {
    fn default() -> Self {
        Alpha::WHITE
    }
}

/// Decoding choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Transparency handling (default: composite on white, as transformers 5.x).
    pub alpha: Alpha,
    /// Apply the EXIF orientation tag (default: true).
    pub exif_orientation: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            alpha: Alpha::default(),
            exif_orientation: true,
        }
    }
}

impl DecodeOptions {
    /// What the HF processors of the current transformers (5.x) see after
    /// `ImageOps.exif_transpose`: transparency composited over white ([`Alpha::WHITE`], as
    /// 5.x's `convert_to_rgb` does), EXIF orientation applied. The same as
    /// [`DecodeOptions::default`].
    pub fn hf() -> Self {
        Self {
            alpha: Alpha::WHITE,
            exif_orientation: true,
        }
    }

    /// What the HF processors of transformers 4.x saw after `ImageOps.exif_transpose`: alpha
    /// dropped ([`Alpha::Ignore`], as 4.x's `convert_to_rgb` did, so the colour stored under
    /// transparent pixels shows), EXIF orientation applied. Only images with transparency
    /// decode differently from [`DecodeOptions::hf`].
    pub fn hf_v4() -> Self {
        Self {
            alpha: Alpha::Ignore,
            exif_orientation: true,
        }
    }
}

/// Why an image or a processor config could not be used. Every variant about a file names it.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file could not be written.
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O or encoding error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid image (truncated, corrupt, empty).
    #[error("{}: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// The file is an image in a format or variant that is not supported.
    #[error("{}: {message}", path.display())]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What is unsupported.
        message: String,
    },
    /// A preprocessor config (or a call) asks for something invalid or unsupported.
    #[error("{}{message}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Config {
        /// The config file, when there is one.
        path: Option<PathBuf>,
        /// What was wrong.
        message: String,
    },
    /// Some files of a directory failed ([`DirLoad::into_result`]).
    #[error("{}: {failed} of {total} files could not be decoded; first: {first}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Number of failures.
        failed: usize,
        /// Number of files tried.
        total: usize,
        /// The first failure's message.
        first: String,
    },
}

/// Decodes an image file to RGB (see the module docs for the conversions).
///
/// # Errors
/// [`ImageError::Io`], [`ImageError::Corrupt`] or [`ImageError::Unsupported`], naming `path`.
pub fn decode_file(path: impl AsRef<Path>, opts: &DecodeOptions) -> Result<RgbImage, ImageError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    decode::decode(&bytes, path, opts)
}

/// Decodes an image held in memory; `name` stands for the file in error messages.
///
/// # Errors
/// As [`decode_file`].
pub fn decode_bytes(
    bytes: &[u8],
    name: impl AsRef<Path>,
    opts: &DecodeOptions,
) -> Result<RgbImage, ImageError> {
    decode::decode(bytes, name.as_ref(), opts)
}

/// The EXIF orientation (1..=8) stored in an image file's bytes; 1 when absent.
pub fn exif_orientation(bytes: &[u8]) -> u8 {
    decode::exif_orientation(bytes)
}

/// Applies an EXIF orientation (1..=8) to an image as `ImageOps.exif_transpose` does.
pub fn apply_orientation(img: RgbImage, orientation: u8) -> RgbImage {
    decode::orient(img, orientation)
}

/// The outcome of [`load_dir`]: one result per regular file, in file-name order.
#[derive(Debug)]
pub struct DirLoad {
    /// The directory.
    pub dir: PathBuf,
    /// Every regular file (hidden ones included) with its decoded image or its error.
    pub results: Vec<(PathBuf, Result<RgbImage, ImageError>)>,
    /// Entries that are not regular files (sub-directories, broken links), not descended into.
    pub not_files: Vec<PathBuf>,
}

impl DirLoad {
    /// Number of files decoded.
    pub fn ok_count(&self) -> usize {
        self.results.iter().filter(|(_, r)| r.is_ok()).count()
    }

    /// Number of files that failed.
    pub fn failure_count(&self) -> usize {
        self.results.len() - self.ok_count()
    }

    /// The failures.
    pub fn failures(&self) -> impl Iterator<Item = (&Path, &ImageError)> {
        self.results
            .iter()
            .filter_map(|(p, r)| r.as_ref().err().map(|e| (p.as_path(), e)))
    }

    /// The decoded images.
    pub fn images(&self) -> impl Iterator<Item = (&Path, &RgbImage)> {
        self.results
            .iter()
            .filter_map(|(p, r)| r.as_ref().ok().map(|i| (p.as_path(), i)))
    }

    /// One line: `"<dir>: 7 of 8 files decoded, 1 failed (a.jpg: ...); 1 sub-directory not read"`.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{}: {} of {} files decoded, {} failed",
            self.dir.display(),
            self.ok_count(),
            self.results.len(),
            self.failure_count()
        );
        let msgs: Vec<String> = self.failures().map(|(_, e)| e.to_string()).collect();
        if !msgs.is_empty() {
            s.push_str(&format!(" ({})", msgs.join("; ")));
        }
        if !self.not_files.is_empty() {
            s.push_str(&format!(
                "; {} entries that are not files not read",
                self.not_files.len()
            ));
        }
        s
    }

    /// All images, or [`ImageError::Dir`] with the failure count if any file failed.
    ///
    /// # Errors
    /// [`ImageError::Dir`].
    pub fn into_result(self) -> Result<Vec<(PathBuf, RgbImage)>, ImageError> {
        let failed = self.failure_count();
        if failed > 0 {
            let first = self
                .failures()
                .next()
                .map(|(_, e)| e.to_string())
                .unwrap_or_default();
            return Err(ImageError::Dir {
                dir: self.dir,
                failed,
                total: self.results.len(),
                first,
            });
        }
        Ok(self
            .results
            .into_iter()
            .map(|(p, r)| (p, r.expect("no failures")))
            .collect())
    }
}

/// Decodes every regular file of `dir` (not recursive), sorted by file name. Nothing is skipped
/// silently: files that are not images come back as errors, other entries in
/// [`DirLoad::not_files`].
///
/// # Errors
/// [`ImageError::Io`] if the directory itself cannot be listed.
pub fn load_dir(dir: impl AsRef<Path>, opts: &DecodeOptions) -> Result<DirLoad, ImageError> {
    let dir = dir.as_ref();
    let io = |source| ImageError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    let mut not_files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_file() {
            files.push(path);
        } else {
            not_files.push(path);
        }
    }
    files.sort();
    not_files.sort();
    let results = files
        .into_iter()
        .map(|p| {
            let r = decode_file(&p, opts);
            (p, r)
        })
        .collect();
    Ok(DirLoad {
        dir: dir.to_path_buf(),
        results,
        not_files,
    })
}

/// Writes `img` as an 8-bit RGB PNG (the `image` crate's encoder, default compression).
///
/// # Errors
/// [`ImageError::Write`] naming `path` when encoding or writing fails.
pub fn save_png(img: &RgbImage, path: impl AsRef<Path>) -> Result<(), ImageError> {
    let path = path.as_ref();
    let io = |e: String| ImageError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    };
    image::save_buffer_with_format(
        path,
        &img.data,
        img.width as u32,
        img.height as u32,
        image::ExtendedColorType::Rgb8,
        image::ImageFormat::Png,
    )
    .map_err(|e| io(e.to_string()))
}
