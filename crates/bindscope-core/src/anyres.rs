//! LLaVA-NeXT / LLaVA-OneVision's AnyRes grid arithmetic, shared by the image processor
//! (`bindscope-data`) and the model (`bindscope-models`), which must agree on the tile grid.
//! Source: transformers 5.x `image_processing_utils.select_best_resolution` and
//! `get_patch_output_size`.

/// transformers' default `image_grid_pinpoints` of LLaVA-OneVision: every `[384·i, 384·j]`,
/// `i, j ∈ 1..=6`, row by row.
pub fn default_pinpoints() -> Vec<[usize; 2]> {
    let mut out = Vec::with_capacity(36);
    for i in 1..=6 {
        for j in 1..=6 {
            out.push([384 * i, 384 * j]);
        }
    }
    out
}

/// transformers' `select_best_resolution`: among `pinpoints` (`[height, width]`), the one where
/// an aspect-preserving fit of an image of `size = [height, width]` keeps the most pixels
/// (`min(⌊w·s⌋·⌊h·s⌋, w·h)` with `s = min(W/w, H/h)`), ties broken by the least padding; the
/// first such in list order. `None` for an empty list or an empty image.
pub fn select_best_resolution(size: [usize; 2], pinpoints: &[[usize; 2]]) -> Option<[usize; 2]> {
    let [oh, ow] = size;
    if oh == 0 || ow == 0 {
        return None;
    }
    let mut best = None;
    let (mut best_eff, mut best_waste) = (0u64, u64::MAX);
    for &[h, w] in pinpoints {
        let scale = (w as f64 / ow as f64).min(h as f64 / oh as f64);
        let (dw, dh) = ((ow as f64 * scale) as u64, (oh as f64 * scale) as u64);
        let eff = (dw * dh).min((ow * oh) as u64);
        let waste = (w * h) as u64 - eff.min((w * h) as u64);
        if eff > best_eff || (eff == best_eff && waste < best_waste) {
            (best_eff, best_waste) = (eff, waste);
            best = Some([h, w]);
        }
    }
    best
}

/// transformers' `get_patch_output_size`: the `[height, width]` an image of `size` is resized
/// to before padding to `target = [height, width]` (the side with the smaller scale fills the
/// target; the other is `min(⌈side · scale⌉, target)`).
pub fn patch_output_size(size: [usize; 2], target: [usize; 2]) -> [usize; 2] {
    let [oh, ow] = size;
    let [th, tw] = target;
    let (sw, sh) = (tw as f64 / ow as f64, th as f64 / oh as f64);
    if sw < sh {
        [((oh as f64 * sw).ceil() as usize).min(th), tw]
    } else {
        [th, ((ow as f64 * sh).ceil() as usize).min(tw)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_resolution_keeps_most_pixels_then_wastes_least() {
        let pins = [[32, 64], [64, 64]];
        // 60x14 (w x h): both keep 64·14 pixels; [32, 64] wastes less.
        assert_eq!(select_best_resolution([14, 60], &pins), Some([32, 64]));
        // 40x30 → [32, 64] keeps 42·32 capped at 1200, as [64, 64]; less waste wins.
        assert_eq!(select_best_resolution([30, 40], &pins), Some([32, 64]));
        // A tall image fills [64, 64] better than [32, 64].
        assert_eq!(select_best_resolution([100, 40], &pins), Some([64, 64]));
        assert_eq!(select_best_resolution([0, 4], &pins), None);
        assert_eq!(patch_output_size([14, 60], [32, 64]), [15, 64]);
        assert_eq!(patch_output_size([30, 40], [32, 64]), [32, 43]);
    }
}
