//! The document scorers: ChartQA's relaxed accuracy and the ANLS of DocVQA and InfographicVQA
//! (lmms-eval 0.7.3).

use crate::pystr;

/// ChartQA's tolerance: 5% relative change.
pub const MAX_RELATIVE_CHANGE: f64 = 0.05;

/// `_to_float` of `relaxed_correctness`: a text ending in `%` has every trailing `%` removed and
/// is divided by 100; any text is parsed with Python's `float()` ([`pystr::parse_float`]:
/// `1_000`, `inf`, `nan`, Unicode digits and surrounding whitespace are numbers; `1,000` and
/// `50% ` are not).
pub fn chartqa_float(text: &str) -> Option<f64> {
    if text.ends_with('%') {
        pystr::parse_float(pystr::rstrip_chars(text, "%")).map(|v| v / 100.0)
    } else {
        pystr::parse_float(text)
    }
}

/// ChartQA per item (`lmms_eval/tasks/chartqa/utils.py`, `relaxed_correctness`, from Qwen-VL's
/// evaluation): when the response is a number and the gold a non-zero number (NaN counts as
/// non-zero, as Python's truthiness has it), 1 iff `|p − t| / |t| ≤ 0.05` (so a NaN or an
/// infinity on either side fails); otherwise 1 iff the two texts are equal after lowercasing
/// (a gold of `0` is compared as text: `"0.0"` does not match `"0"`).
pub fn chartqa(prediction: &str, answer: &str) -> f64 {
    let hit = match (chartqa_float(prediction), chartqa_float(answer)) {
        (Some(p), Some(t)) if t != 0.0 => (p - t).abs() / t.abs() <= MAX_RELATIVE_CHANGE,
        _ => pystr::lower(prediction) == pystr::lower(answer),
    };
    f64::from(u8::from(hit))
}

/// The ANLS threshold.
pub const ANLS_THRESHOLD: f64 = 0.5;

/// ANLS per item (`lmms_eval/api/metrics.py`, `anls`, from Qwen-VL's InfographicVQA
/// evaluation), after the generic `generate_until` path has stripped the response
/// (`lmms_eval/api/task.py`): for each reference, the Levenshtein distance (code points,
/// `strsim::levenshtein`) between the reference and the response, each stripped, lowercased
/// and with whitespace runs collapsed, divided by `max(len(reference.upper()),
/// len(response.upper()))` — the lengths of the *unnormalized* texts, uppercased, so `ß`
/// counts twice and surrounding spaces count — or 0 when that length is 0; the score is
/// `1 − min` over references, set to 0 below 0.5 (the threshold applies after the max over
/// references). `answers` must not be empty.
pub fn anls(prediction: &str, answers: &[String]) -> f64 {
    let pred = pystr::strip(prediction);
    let det = pystr::collapse_spaces(&pystr::lower(pystr::strip(pred)));
    let pred_len = pystr::len(&pystr::upper(pred));
    let min = answers
        .iter()
        .map(|answer| {
            let gt = pystr::collapse_spaces(&pystr::lower(pystr::strip(answer)));
            let dist = strsim::levenshtein(&gt, &det);
            let length = pystr::len(&pystr::upper(answer)).max(pred_len);
            if length == 0 {
                0.0
            } else {
                dist as f64 / length as f64
            }
        })
        .fold(f64::INFINITY, f64::min);
    let result = 1.0 - min;
    if result < ANLS_THRESHOLD { 0.0 } else { result }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relaxed_accuracy() {
        assert_eq!(chartqa("10.4", "10"), 1.0);
        assert_eq!(chartqa("10.6", "10"), 0.0);
        assert_eq!(chartqa("50%", "0.5"), 1.0);
        assert_eq!(chartqa("0.0", "0"), 0.0);
        assert_eq!(chartqa("Blue", "blue"), 1.0);
        assert_eq!(chartqa("nan", "nan"), 0.0);
    }

    #[test]
    fn anls_cases() {
        let a = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(anls("hello", &a(&["hello"])), 1.0);
        assert_eq!(anls("hellp", &a(&["hello"])), 0.8);
        assert_eq!(anls("xyz", &a(&["hello"])), 0.0);
        assert_eq!(anls("", &a(&[""])), 1.0);
        assert_eq!(anls("helo", &a(&["abc", "hello"])), 0.8);
    }
}
