//! LLaVA-OneVision's AnyRes image preparation: transformers 5.x `LlavaOnevisionImageProcessor`
//! on its PIL backend (`LlavaOnevisionImageProcessorPil`), for one image per prompt (the
//! single-image path, `batch_num_images = 1`).
//!
//! 1. The best grid resolution among `image_grid_pinpoints` ([`select_best_resolution`]): the
//!    one that keeps most of the image's pixels after an aspect-preserving fit, then the one
//!    that wastes least.
//! 2. The image resized to fit it, aspect kept ([`patch_output_size`], Pillow bicubic), padded
//!    with black (0) around it, centred (`divmod(target − size, 2)`: the odd pixel goes right
//!    and bottom), and cut into `size × size` tiles, row-major.
//! 3. The *base view*: the whole image resized to `size` (no aspect preservation).
//! 4. `[base, tile₁, …]`, each rescaled and normalized with the CLIP mean / std, as
//!    `pixel_values: [1 + tiles, 3, size, size]`, with the original `(height, width)`
//!    (`image_sizes`), which the model needs to undo the padding.
//!
//! transformers' default torchvision backend resizes with torchvision's antialiased bicubic
//! kernel on tensors, which differs from Pillow's by a level here and there; this module is
//! the PIL backend's, bit for bit before normalization.

pub use bindscope_core::anyres::{default_pinpoints, patch_output_size, select_best_resolution};

use super::processor::{ImageProcessor, PixelBatch, ProcessorKind, ResizeTo, read_config_file};
use super::resample::resize;
use super::{ImageError, RgbImage};
use serde_json::Value;
use std::path::Path;

/// The processor: the base view's settings and the candidate grid resolutions.
#[derive(Debug, Clone, PartialEq)]
pub struct AnyresProcessor {
    /// Resize target of the base view and tile size (`size`), filter, rescale, normalize.
    pub base: ImageProcessor,
    /// `image_grid_pinpoints`: candidate resolutions `[height, width]` in pixels, multiples of
    /// the tile size.
    pub image_grid_pinpoints: Vec<[usize; 2]>,
}

/// One image prepared for LLaVA-OneVision.
#[derive(Debug, Clone, PartialEq)]
pub struct AnyresPixels {
    /// `[1 + tiles, 3, size, size]`: the base view, then the tiles row-major.
    pub pixel_values: PixelBatch,
    /// The original `[height, width]` (`image_sizes`).
    pub image_size: [usize; 2],
    /// The chosen grid resolution `[height, width]`.
    pub best_resolution: [usize; 2],
}

fn cfg_err(message: impl Into<String>) -> ImageError {
    ImageError::Config {
        path: None,
        message: message.into(),
    }
}

/// Pads `img` with black to `target = [height, width]`, centred as `np.pad` with
/// `divmod(target − size, 2)` (the odd row / column at the bottom / right).
fn pad_centred(img: &RgbImage, [th, tw]: [usize; 2]) -> RgbImage {
    let top = (th - img.height) / 2;
    let left = (tw - img.width) / 2;
    let mut data = vec![0u8; th * tw * 3];
    for y in 0..img.height {
        let src = &img.data[y * img.width * 3..(y + 1) * img.width * 3];
        let at = ((y + top) * tw + left) * 3;
        data[at..at + src.len()].copy_from_slice(src);
    }
    RgbImage {
        width: tw,
        height: th,
        data,
    }
}

fn crop(img: &RgbImage, y0: usize, x0: usize, h: usize, w: usize) -> RgbImage {
    let mut data = Vec::with_capacity(h * w * 3);
    for y in y0..y0 + h {
        data.extend_from_slice(&img.data[(y * img.width + x0) * 3..(y * img.width + x0 + w) * 3]);
    }
    RgbImage {
        width: w,
        height: h,
        data,
    }
}

impl AnyresProcessor {
    /// The class defaults: 384 × 384, bicubic, CLIP mean / std, transformers' 36 default
    /// pinpoints (every `[384·i, 384·j]`, `i, j ∈ 1..=6`).
    pub fn defaults() -> Self {
        Self {
            base: ImageProcessor::defaults(ProcessorKind::LlavaOnevision),
            image_grid_pinpoints: default_pinpoints(),
        }
    }

    /// The tile side (`size.height`): tiles are square.
    pub fn tile_size(&self) -> usize {
        match self.base.size {
            ResizeTo::Exact { height, .. } => height,
            ResizeTo::ShortestEdge(s) => s,
        }
    }

    /// From a parsed `preprocessor_config.json`: the base settings as
    /// [`ImageProcessor::from_json`] reads them for `LlavaOnevisionImageProcessor`, and
    /// `image_grid_pinpoints` (the defaults when absent).
    ///
    /// # Errors
    /// [`ImageError::Config`] for malformed settings, a non-square `size`, a center crop, or
    /// pinpoints that are not `[height, width]` pairs of positive multiples of the tile size.
    pub fn from_json(v: &Value) -> Result<Self, ImageError> {
        let base = ImageProcessor::from_json(v, Some(ProcessorKind::LlavaOnevision))?;
        let mut p = Self {
            base,
            ..Self::defaults()
        };
        if let ResizeTo::Exact { height, width } = p.base.size
            && height != width
        {
            return Err(cfg_err(format!(
                "size {height}x{width}: LLaVA-OneVision tiles are square (size height = width)"
            )));
        }
        if let Some(pp) = v.get("image_grid_pinpoints").filter(|x| !x.is_null()) {
            let list = pp
                .as_array()
                .ok_or_else(|| cfg_err("image_grid_pinpoints must be a list of [height, width]"))?;
            let tile = p.tile_size();
            p.image_grid_pinpoints = list
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let pair = e
                        .as_array()
                        .filter(|a| a.len() == 2)
                        .and_then(|a| Some([a[0].as_u64()? as usize, a[1].as_u64()? as usize]));
                    match pair {
                        Some([h, w])
                            if h > 0
                                && w > 0
                                && h.is_multiple_of(tile)
                                && w.is_multiple_of(tile) =>
                        {
                            Ok([h, w])
                        }
                        _ => Err(cfg_err(format!(
                            "image_grid_pinpoints[{i}] = {e}: expected [height, width], positive \
                             multiples of the tile size {tile}"
                        ))),
                    }
                })
                .collect::<Result<_, _>>()?;
            if p.image_grid_pinpoints.is_empty() {
                return Err(cfg_err("image_grid_pinpoints is empty"));
            }
        }
        Ok(p)
    }

    /// Reads a `preprocessor_config.json` (see [`AnyresProcessor::from_json`]).
    ///
    /// # Errors
    /// [`ImageError::Io`] if unreadable; [`ImageError::Config`] naming the file otherwise.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ImageError> {
        read_config_file(path.as_ref(), Self::from_json)
    }

    /// The base view and the tiles of one image (see the [module docs](self)).
    ///
    /// # Errors
    /// [`ImageError::Config`] for an empty image.
    pub fn preprocess(&self, img: &RgbImage) -> Result<AnyresPixels, ImageError> {
        let size = [img.height, img.width];
        let best = select_best_resolution(size, &self.image_grid_pinpoints)
            .ok_or_else(|| cfg_err(format!("cannot tile a {}x{} image", img.width, img.height)))?;
        let tile = self.tile_size();
        let mut views = Vec::new();
        // The base view: the whole image at `size` (transformers resizes it whatever
        // `do_resize` says).
        views.push(resize(img, tile, tile, self.base.resample)?);
        let [rh, rw] = patch_output_size(size, best);
        let fitted = resize(img, rw, rh, self.base.resample)?;
        let padded = pad_centred(&fitted, best);
        for y in (0..best[0]).step_by(tile) {
            for x in (0..best[1]).step_by(tile) {
                // transformers resizes each tile to `size` too: a no-op at that size.
                views.push(crop(&padded, y, x, tile, tile));
            }
        }
        let mut data = Vec::with_capacity(views.len() * 3 * tile * tile);
        for v in &views {
            data.extend_from_slice(&self.base.normalize(v).data);
        }
        Ok(AnyresPixels {
            pixel_values: PixelBatch {
                shape: [views.len(), 3, tile, tile],
                data,
            },
            image_size: size,
            best_resolution: best,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_centres_with_the_odd_pixel_last() {
        let img = RgbImage::new(1, 1, vec![9, 9, 9]).unwrap();
        let p = pad_centred(&img, [2, 4]);
        // top 0 (1 // 2), left 1 (3 // 2).
        assert_eq!(&p.data[3..6], &[9, 9, 9]);
        assert_eq!(p.data.iter().filter(|&&b| b == 9).count(), 3);
    }
}
