//! The closed-answer scorers: MME (yes/no), CV-Bench (an option letter) and RealWorldQA (an
//! option letter or a short open answer), with lmms-eval 0.7.3's parsers.

use crate::pystr;

/// MME's yes/no parser (`lmms_eval/tasks/mme/utils.py`, `parse_pred_ans`, "brought from Otter
/// Eval"): the response lowercased, stripped and with every `.` removed; `yes` / `no` as is; a
/// single character `y` / `n` (any other single character is `other`); otherwise `yes` if the
/// first four code points contain `yes`, else `no` if they contain `no` (so `"nope"`, `"not
/// sure"` and `"know…"` parse as `no`), else `other`.
pub fn mme_label(prediction: &str) -> &'static str {
    let p = pystr::lower(prediction);
    let p = pystr::strip(&p).replace('.', "");
    if p == "yes" || p == "no" {
        return if p == "yes" { "yes" } else { "no" };
    }
    if pystr::len(&p) == 1 {
        return match p.as_str() {
            "y" => "yes",
            "n" => "no",
            _ => "other",
        };
    }
    let prefix: String = p.chars().take(4).collect();
    if prefix.contains("yes") {
        "yes"
    } else if prefix.contains("no") {
        "no"
    } else {
        "other"
    }
}

/// MME's gold label: the answer lowercased, stripped, `.` removed; lmms-eval asserts it is `yes`
/// or `no` (`None` otherwise).
pub fn mme_gold(answer: &str) -> Option<&'static str> {
    let a = pystr::lower(answer);
    match pystr::strip(&a).replace('.', "").as_str() {
        "yes" => Some("yes"),
        "no" => Some("no"),
        _ => None,
    }
}

/// MME per item (`mme_process_results`): 1 when the parsed label equals the gold label.
pub fn mme(prediction: &str, gold: &'static str) -> f64 {
    f64::from(u8::from(mme_label(prediction) == gold))
}

/// Whether Python's `re` with `IGNORECASE` matches `c` against the class `[A-Z]`: the ASCII
/// letters and the four characters whose simple case mapping lands on one (U+0130 `İ`,
/// U+0131 `ı`, U+017F `ſ`, U+212A Kelvin sign `K`).
fn ignorecase_ascii_letter(c: char) -> bool {
    c.is_ascii_alphabetic() || matches!(c, '\u{130}' | '\u{131}' | '\u{17f}' | '\u{212a}')
}

/// CV-Bench's letter parser (`lmms_eval/tasks/cv_bench/utils.py`, `_extract_answer_letter`):
/// the response stripped, then `re.match(r"[\(\s]*([A-Z])[\)\.\s]*", text, re.IGNORECASE)` —
/// the first character after any run of `(` and whitespace, if it is a letter, uppercased;
/// `""` otherwise. Any word counts: `"Yes"` parses as `Y`, `"blue"` as `B`.
pub fn cvbench_letter(prediction: &str) -> String {
    let text = pystr::strip(prediction);
    match text.chars().find(|&c| !(c == '(' || pystr::is_space(c))) {
        Some(c) if ignorecase_ascii_letter(c) => c.to_uppercase().collect(),
        _ => String::new(),
    }
}

/// CV-Bench's gold letter: the answer with `(` and `)` stripped from both ends
/// (`doc["answer"].strip("()")`, so `"(A)"` → `A`).
pub fn cvbench_gold(answer: &str) -> &str {
    pystr::strip_chars(answer, "()")
}

/// CV-Bench per item (`cv_bench_process_results`): 1 when the parsed letter equals the gold.
/// An answer of `"()"` is matched by a response without a letter (both are empty), as in
/// lmms-eval.
pub fn cvbench(prediction: &str, answer: &str) -> f64 {
    f64::from(u8::from(cvbench_letter(prediction) == cvbench_gold(answer)))
}

/// RealWorldQA per item as lmms-eval 0.7.3 scores it (`lmms_eval/tasks/realworldqa/utils.py`,
/// `realworldqa_process_results`; the task's YAML applies no filters in 0.7.3 — the number-word
/// and multiple-choice regex filters defined in the same file are unused, unlike 0.7.1 and
/// earlier): with the gold stripped, a gold whose uppercase is `A`–`D` is compared with
/// [`extract_mcq_answer`] over `A`–`D`; any other gold with the response lowercased, stripped
/// and with trailing periods removed, against the gold lowercased.
pub fn realworldqa(prediction: &str, answer: &str) -> f64 {
    let gold = pystr::strip(answer);
    let gold_upper = pystr::upper(gold);
    let hit = if matches!(gold_upper.as_str(), "A" | "B" | "C" | "D") {
        extract_mcq_answer(prediction, &["A", "B", "C", "D"]) == gold_upper
    } else {
        let p = pystr::lower(prediction);
        pystr::rstrip_chars(pystr::strip(&p), ".") == pystr::lower(gold)
    };
    f64::from(u8::from(hit))
}

/// The phrases after which `extract_mcq_answer` looks for a letter, in its order.
const ANSWER_PHRASES: [&str; 27] = [
    "the answer is",
    "answer is",
    "the correct answer is",
    "correct answer is",
    "the best answer is",
    "best answer is",
    "the correct option is",
    "correct option is",
    "the best option is",
    "best option is",
    "the choice is",
    "choice is",
    "the correct choice is",
    "correct choice is",
    "i choose",
    "i select",
    "i pick",
    "my answer is",
    "my choice is",
    "옵션",
    "정답은",
    "답은",
    "답:",
    "答案是",
    "答案为",
    "选",
    "答えは",
];

/// lmms-eval's shared multiple-choice extractor (`lmms_eval/tasks/_task_utils/mcq_extract.py`,
/// `extract_mcq_answer`). Candidates `(letter, position, format)` are collected from the
/// response (stripped, then each of `, . ! ? ; : ' "` stripped from both ends in turn, then
/// padded with one space on each side), positions in code points of that padded text:
///
/// | format | priority | rule (per choice, last occurrence) |
/// |---|---|---|
/// | start | 10 | the text starts with the letter and the next character is not a letter (`str.isalpha`) |
/// | end | 9 | the text ends with it and the previous character is not a letter (position: padded length − 1) |
/// | phrase | 7 | the first occurrence of a letter after an answer phrase (`"the answer is"`, `"答案是"`, …) |
/// | parentheses | 6 | `(A)` |
/// | period | 5 | `A.` |
/// | colon | 4 | `A:` |
/// | right_paren | 3 | `A)` |
/// | space | 2 | `A ` |
/// | fallback | 0 | only without any other candidate: the letter anywhere |
///
/// The best candidate is the highest priority, then the latest position (a stable sort, so on
/// equal keys the earlier-collected candidate wins); `""` without a candidate or for an empty
/// response. Matching is case-sensitive. Quirk kept: a phrase is found in the lowercased text
/// but its offset is used in the original, so a character whose lowercase is longer (`İ`)
/// shifts where the letter is looked for.
pub fn extract_mcq_answer(response: &str, choices: &[&str]) -> String {
    if pystr::strip(response).is_empty() {
        return String::new();
    }
    let mut text = pystr::strip(response);
    for ch in [',', '.', '!', '?', ';', ':', '\'', '"'] {
        text = text.trim_matches(ch);
    }
    let text = format!(" {text} ");
    let pos = |byte: usize| pystr::char_index(&text, byte);
    // (letter, position, priority)
    let mut candidates: Vec<(&str, usize, u8)> = Vec::new();
    for (before, after, priority) in [
        ("(", ")", 6),
        ("", ".", 5),
        ("", ":", 4),
        ("", ")", 3),
        ("", " ", 2),
    ] {
        for &ch in choices {
            if let Some(b) = text.rfind(&format!("{before}{ch}{after}")) {
                candidates.push((ch, pos(b), priority));
            }
        }
    }

    let text_lower = pystr::lower(&text);
    for phrase in ANSWER_PHRASES {
        if let Some(b) = text_lower.find(phrase) {
            let after = pystr::char_index(&text_lower, b) + pystr::len(phrase);
            if let Some(start) = pystr::byte_offset(&text, after) {
                for &ch in choices {
                    if let Some(rel) = text[start..].find(ch) {
                        candidates.push((ch, pos(start + rel), 7));
                    }
                }
            }
        }
    }

    let stripped = pystr::strip(&text);
    let chars: Vec<char> = stripped.chars().collect();
    for &ch in choices {
        if stripped.starts_with(ch) && (chars.len() == 1 || !pystr::is_alpha(chars[1])) {
            candidates.push((ch, 0, 10));
        }
    }
    let text_len = pystr::len(&text);
    for &ch in choices {
        if stripped.ends_with(ch) && (chars.len() == 1 || !pystr::is_alpha(chars[chars.len() - 2]))
        {
            candidates.push((ch, text_len - 1, 9));
        }
    }
    if candidates.is_empty() {
        for &ch in choices {
            if let Some(b) = text.rfind(ch) {
                candidates.push((ch, pos(b), 0));
            }
        }
    }
    candidates.sort_by_key(|c| std::cmp::Reverse((c.2, c.1)));
    candidates
        .first()
        .map(|c| c.0.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mme_parses_like_otter() {
        for (p, want) in [
            ("Yes", "yes"),
            ("No.", "no"),
            ("y", "yes"),
            ("N", "no"),
            ("x", "other"),
            ("nope", "no"),
            ("Not sure", "no"),
            ("yes, it is", "yes"),
            ("I think yes", "other"),
            ("", "other"),
        ] {
            assert_eq!(mme_label(p), want, "{p:?}");
        }
    }

    #[test]
    fn letters_parse_as_lmms_eval() {
        assert_eq!(cvbench_letter(" (b) blue"), "B");
        assert_eq!(cvbench_letter("Yes"), "Y");
        assert_eq!(cvbench_letter("((  "), "");
        assert_eq!(cvbench_letter("ſ"), "S");
        assert_eq!(cvbench_gold("(C)"), "C");
        assert_eq!(
            extract_mcq_answer("The correct answer is (B).", &["A", "B", "C", "D"]),
            "B"
        );
        assert_eq!(extract_mcq_answer("A", &["A", "B", "C", "D"]), "A");
        assert_eq!(extract_mcq_answer("答案是C", &["A", "B", "C", "D"]), "C");
        assert_eq!(extract_mcq_answer("  ", &["A", "B", "C", "D"]), "");
    }
}
