//! Region prompts per model family (COOCO §4.3): how each family is asked to name the object in
//! a box. The LLaVA-OneVision prompt is the study's; the others follow each family's own
//! grounding syntax so that outputs of models bindscope does not run can be imported and scored
//! the same way.

use crate::CoocoError;
use serde::{Deserialize, Serialize};

/// A model family's region syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// LLaVA-OneVision: the box divided by the padded image's width and height, 4 decimals.
    LlavaOnevision,
    /// Qwen2.5-VL: absolute pixel coordinates of the prepared image (Python's `round`, half to
    /// even).
    #[serde(rename = "qwen2.5-vl")]
    Qwen25Vl,
    /// KOSMOS-2: location tokens on a 32 × 32 grid (`<patch_index_NNNN>`).
    Kosmos2,
    /// Molmo: the box's centre as a point on [0, 100] (one decimal).
    Molmo,
}

impl Family {
    /// The command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            Family::LlavaOnevision => "llava-onevision",
            Family::Qwen25Vl => "qwen2.5-vl",
            Family::Kosmos2 => "kosmos-2",
            Family::Molmo => "molmo",
        }
    }

    /// From [`Family::name`].
    ///
    /// # Errors
    /// [`CoocoError::Invalid`] naming the four.
    pub fn parse(s: &str) -> Result<Self, CoocoError> {
        [
            Self::LlavaOnevision,
            Self::Qwen25Vl,
            Self::Kosmos2,
            Self::Molmo,
        ]
        .into_iter()
        .find(|f| f.name() == s)
        .ok_or_else(|| {
            CoocoError::Invalid(format!(
                "unknown family '{s}' (expected llava-onevision, qwen2.5-vl, kosmos-2 or molmo)"
            ))
        })
    }
}

/// The answer instruction every family's prompt ends with.
pub const INSTRUCTION: &str = "Answer with the object's name only. No extra text.";

/// KOSMOS-2's location grid side (`num_patch_index_tokens = 32²`).
pub const KOSMOS_GRID: usize = 32;

/// Python's `repr(float)` for a finite value: the shortest string that reads back to it, with
/// `.0` on integral values (`0.1`, `0.2534`, `1.0`). Exponent forms (|x| ≥ 1e16 or < 1e-4)
/// are not needed here and come out in Rust's notation.
pub fn py_float_repr(x: f64) -> String {
    let s = format!("{x}");
    if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// Python's `round(x, digits)`: the exact value rounded half to even at `digits` decimals,
/// then the nearest double.
pub fn py_round(x: f64, digits: usize) -> f64 {
    format!("{x:.digits$}")
        .parse()
        .expect("a formatted float parses")
}

/// The box `[x, y, w, h]` as `[x1, y1, x2, y2]` divided by the image's width and height and
/// rounded to 4 decimals (LLaVA-OneVision's form).
pub fn normalized_box(bbox: [f64; 4], size: [usize; 2]) -> [f64; 4] {
    let (w, h) = (size[0] as f64, size[1] as f64);
    [
        py_round(bbox[0] / w, 4),
        py_round(bbox[1] / h, 4),
        py_round((bbox[0] + bbox[2]) / w, 4),
        py_round((bbox[1] + bbox[3]) / h, 4),
    ]
}

/// KOSMOS-2's `coordinate_to_patch_index` on a `grid × grid` layout for a normalized
/// `[x1, y1, x2, y2]`: the upper-left cell `⌊x1·P⌋, ⌊y1·P⌋` and the lower-right
/// `⌈x2·P − 1⌉, ⌈y2·P − 1⌉` (clamped at 0), as row-major indices.
pub fn kosmos_patch_indices(norm: [f64; 4], grid: usize) -> [usize; 2] {
    let p = grid as f64;
    let ul_x = (norm[0] * p).floor().max(0.0) as usize;
    let ul_y = (norm[1] * p).floor().max(0.0) as usize;
    let lr_x = (norm[2] * p - 1.0).ceil().max(0.0) as usize;
    let lr_y = (norm[3] * p - 1.0).ceil().max(0.0) as usize;
    let clamp = |v: usize| v.min(grid - 1);
    [
        clamp(ul_y) * grid + clamp(ul_x),
        clamp(lr_y) * grid + clamp(lr_x),
    ]
}

/// The user text for `family` asking for the object in `bbox` (`[x, y, w, h]` in pixels of a
/// prepared image of `size = [width, height]`), with an `<image>` marker where the image goes.
/// KOSMOS-2's processor adds its image tokens itself: drop the marker before handing it the
/// text.
pub fn region_prompt(family: Family, bbox: [f64; 4], size: [usize; 2]) -> String {
    let norm = normalized_box(bbox, size);
    match family {
        Family::LlavaOnevision => format!(
            "<image>\nWhat is the object in this part of the image [{}]? {INSTRUCTION}",
            norm.map(py_float_repr).join(", ")
        ),
        Family::Qwen25Vl => {
            let px = [bbox[0], bbox[1], bbox[0] + bbox[2], bbox[1] + bbox[3]]
                .map(|v| (py_round(v, 0) as i64).to_string());
            format!(
                "<image>\nWhat is the object in this part of the image [{}]? {INSTRUCTION}",
                px.join(", ")
            )
        }
        Family::Kosmos2 => {
            let (w, h) = (size[0] as f64, size[1] as f64);
            let exact = [
                bbox[0] / w,
                bbox[1] / h,
                (bbox[0] + bbox[2]) / w,
                (bbox[1] + bbox[3]) / h,
            ];
            let [a, b] = kosmos_patch_indices(exact, KOSMOS_GRID);
            format!(
                "<image><grounding> What is the object in <phrase>this part</phrase>\
                 <object><patch_index_{a:04}><patch_index_{b:04}></object> of the image? \
                 {INSTRUCTION}"
            )
        }
        Family::Molmo => {
            let cx = (bbox[0] + bbox[2] / 2.0) / size[0] as f64 * 100.0;
            let cy = (bbox[1] + bbox[3] / 2.0) / size[1] as f64 * 100.0;
            format!(
                "<image>\nWhat is the object at the point <point x=\"{cx:.1}\" y=\"{cy:.1}\" \
                 alt=\"object\">object</point>? {INSTRUCTION}"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_python_prints_them() {
        assert_eq!(py_float_repr(0.1), "0.1");
        assert_eq!(py_float_repr(0.2534), "0.2534");
        assert_eq!(py_float_repr(1.0), "1.0");
        assert_eq!(py_float_repr(0.0), "0.0");
        // round(0.12345, 4) is 0.1235 in Python (the double is above the tie).
        assert_eq!(py_round(0.12345, 4), 0.1235);
        assert_eq!(py_round(2.0 / 3.0, 4), 0.6667);
        assert_eq!(py_round(0.5, 0), 0.0);
    }

    #[test]
    fn llava_onevision_prompt_is_the_studys() {
        let p = region_prompt(
            Family::LlavaOnevision,
            [64.0, 128.0, 64.0, 32.0],
            [640, 640],
        );
        assert_eq!(
            p,
            "<image>\nWhat is the object in this part of the image [0.1, 0.2, 0.2, 0.25]? \
             Answer with the object's name only. No extra text."
        );
    }

    #[test]
    fn kosmos_cells_follow_its_processor() {
        // The whole image: cells 0 and 32² − 1.
        assert_eq!(kosmos_patch_indices([0.0, 0.0, 1.0, 1.0], 32), [0, 1023]);
        // [0.25, 0.5, 0.5, 0.75] → (8, 16) and (15, 23).
        assert_eq!(
            kosmos_patch_indices([0.25, 0.5, 0.5, 0.75], 32),
            [16 * 32 + 8, 23 * 32 + 15]
        );
    }
}
