//! OCRBench's normalized containment (`lmms_eval/tasks/ocrbench/utils.py`,
//! `ocrbench_process_results`, lmms-eval 0.7.3).

use crate::pystr;

/// The dataset whose items OCRBench scores with the handwritten-mathematical-expression rule.
pub const HME100K: &str = "HME100k";

/// `_fold_fullwidth_ascii`: U+FF01–U+FF5E to their ASCII counterparts and the ideographic space
/// U+3000 to a space; nothing else (no NFKC).
pub fn fold_fullwidth_ascii(text: &str) -> String {
    text.chars()
        .map(|c| match c as u32 {
            0xFF01..=0xFF5E => char::from_u32(c as u32 - 0xFEE0).expect("ASCII"),
            0x3000 => ' ',
            _ => c,
        })
        .collect()
}

/// OCRBench per item: 1 when any reference, normalized, is a substring of the normalized
/// response (the response stripped first). For the `HME100k` dataset both sides are stripped,
/// newlines turned into spaces and every ASCII space removed (case kept); for any other dataset
/// both are fullwidth-folded, lowercased, stripped, and newlines turned into spaces (inner
/// whitespace kept as is). An empty reference is contained in every response (score 1), as in
/// lmms-eval.
pub fn ocrbench(prediction: &str, answers: &[String], dataset: Option<&str>) -> f64 {
    let pred = pystr::strip(prediction);
    let hme = dataset == Some(HME100K);
    let norm = |s: &str| -> String {
        if hme {
            pystr::strip(s).replace('\n', " ").replace(' ', "")
        } else {
            let folded = pystr::lower(&fold_fullwidth_ascii(s));
            pystr::strip(&folded).replace('\n', " ")
        }
    };
    let predict = norm(pred);
    f64::from(u8::from(
        answers.iter().any(|a| predict.contains(norm(a).as_str())),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containment_after_normalization() {
        let a = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            ocrbench("The word is ＨＥＬＬＯ", &a(&["hello"]), None),
            1.0
        );
        assert_eq!(ocrbench("x + y", &a(&["x+y"]), Some(HME100K)), 1.0);
        assert_eq!(ocrbench("x + y", &a(&["x+y"]), None), 0.0);
        assert_eq!(ocrbench("anything", &a(&[""]), None), 1.0);
    }
}
