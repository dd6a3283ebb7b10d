//! Attention maps of the fovea as images.

use crate::features::Grid;
use bindscope_data::image::RgbImage;

/// The scene and, to its right, the scene tinted by the fovea's attention: each patch cell is
/// blended towards red with opacity `0.85 · a_k / max_k a_k`, and the target box is outlined in
/// black. Output `2·side × side`.
///
/// # Panics
/// If `attention.len()` is not the grid's patch count or the image is not `side × side`.
pub fn attention_overlay(
    image: &RgbImage,
    grid: &Grid,
    attention: &[f32],
    bbox: [f64; 4],
) -> RgbImage {
    let side = grid.side;
    assert_eq!((image.width, image.height), (side, side), "image size");
    assert_eq!(attention.len(), grid.num_patches(), "one weight per patch");
    let max = attention.iter().copied().fold(f32::MIN_POSITIVE, f32::max);
    let w = 2 * side;
    let mut data = vec![255u8; w * side * 3];
    for y in 0..side {
        for x in 0..side {
            let src = &image.data[(y * side + x) * 3..][..3];
            data[(y * w + x) * 3..][..3].copy_from_slice(src);
            let (gx, gy) = (x / grid.patch, y / grid.patch);
            let alpha = if gx < grid.cells && gy < grid.cells {
                0.85 * attention[gy * grid.cells + gx] / max
            } else {
                0.0
            };
            let red = [255.0, 0.0, 0.0];
            for c in 0..3 {
                let v = src[c] as f32 * (1.0 - alpha) + red[c] * alpha;
                data[(y * w + side + x) * 3 + c] = v.round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    // Target box outline on the right panel.
    let s = side as f64;
    let [x0, y0, x1, y1] =
        bbox.map(|v| ((v * s).round() as i64).clamp(0, side as i64 - 1) as usize);
    for x in x0..=x1 {
        for y in [y0, y1] {
            data[(y * w + side + x) * 3..][..3].copy_from_slice(&[0, 0, 0]);
        }
    }
    for y in y0..=y1 {
        for x in [x0, x1] {
            data[(y * w + side + x) * 3..][..3].copy_from_slice(&[0, 0, 0]);
        }
    }
    RgbImage {
        width: w,
        height: side,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_tints_the_attended_cell() {
        let grid = Grid::new(4, 2); // 2 × 2 cells
        let img = RgbImage {
            width: 4,
            height: 4,
            data: vec![255; 48],
        };
        let out = attention_overlay(&img, &grid, &[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]);
        assert_eq!((out.width, out.height), (8, 4));
        let px = |x: usize, y: usize| &out.data[(y * 8 + x) * 3..][..3];
        assert_eq!(px(2, 2), &[255, 255, 255]); // left panel: the image
        assert_eq!(px(4 + 3, 1), &[255, 38, 38]); // cell (1, 0) at full weight: 0.85 red
        assert_eq!(px(4 + 1, 3), &[255, 255, 255]); // cell (0, 1): weight 0
    }
}
