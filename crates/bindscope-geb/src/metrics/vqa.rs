//! TextVQA's VQA consensus accuracy with the EvalAI answer processor
//! (`lmms_eval/tasks/_task_utils/vqa_eval_metric.py`, `EvalAIAnswerProcessor`, itself from
//! MMF; `lmms_eval/tasks/textvqa/utils.py`, `textvqa_process_results`; lmms-eval 0.7.3).

use crate::pystr;

/// The processor's contraction table, verbatim (capitalised keys such as `Im` can never match a
/// lowercased word; `somebody'd` maps to `somebodyd`: both kept as in the source).
const CONTRACTIONS: &[(&str, &str)] = &[
    ("aint", "ain't"),
    ("arent", "aren't"),
    ("cant", "can't"),
    ("couldve", "could've"),
    ("couldnt", "couldn't"),
    ("couldn'tve", "couldn't've"),
    ("couldnt've", "couldn't've"),
    ("didnt", "didn't"),
    ("doesnt", "doesn't"),
    ("dont", "don't"),
    ("hadnt", "hadn't"),
    ("hadnt've", "hadn't've"),
    ("hadn'tve", "hadn't've"),
    ("hasnt", "hasn't"),
    ("havent", "haven't"),
    ("hed", "he'd"),
    ("hed've", "he'd've"),
    ("he'dve", "he'd've"),
    ("hes", "he's"),
    ("howd", "how'd"),
    ("howll", "how'll"),
    ("hows", "how's"),
    ("Id've", "I'd've"),
    ("I'dve", "I'd've"),
    ("Im", "I'm"),
    ("Ive", "I've"),
    ("isnt", "isn't"),
    ("itd", "it'd"),
    ("itd've", "it'd've"),
    ("it'dve", "it'd've"),
    ("itll", "it'll"),
    ("let's", "let's"),
    ("maam", "ma'am"),
    ("mightnt", "mightn't"),
    ("mightnt've", "mightn't've"),
    ("mightn'tve", "mightn't've"),
    ("mightve", "might've"),
    ("mustnt", "mustn't"),
    ("mustve", "must've"),
    ("neednt", "needn't"),
    ("notve", "not've"),
    ("oclock", "o'clock"),
    ("oughtnt", "oughtn't"),
    ("ow's'at", "'ow's'at"),
    ("'ows'at", "'ow's'at"),
    ("'ow'sat", "'ow's'at"),
    ("shant", "shan't"),
    ("shed've", "she'd've"),
    ("she'dve", "she'd've"),
    ("she's", "she's"),
    ("shouldve", "should've"),
    ("shouldnt", "shouldn't"),
    ("shouldnt've", "shouldn't've"),
    ("shouldn'tve", "shouldn't've"),
    ("somebody'd", "somebodyd"),
    ("somebodyd've", "somebody'd've"),
    ("somebody'dve", "somebody'd've"),
    ("somebodyll", "somebody'll"),
    ("somebodys", "somebody's"),
    ("someoned", "someone'd"),
    ("someoned've", "someone'd've"),
    ("someone'dve", "someone'd've"),
    ("someonell", "someone'll"),
    ("someones", "someone's"),
    ("somethingd", "something'd"),
    ("somethingd've", "something'd've"),
    ("something'dve", "something'd've"),
    ("somethingll", "something'll"),
    ("thats", "that's"),
    ("thered", "there'd"),
    ("thered've", "there'd've"),
    ("there'dve", "there'd've"),
    ("therere", "there're"),
    ("theres", "there's"),
    ("theyd", "they'd"),
    ("theyd've", "they'd've"),
    ("they'dve", "they'd've"),
    ("theyll", "they'll"),
    ("theyre", "they're"),
    ("theyve", "they've"),
    ("twas", "'twas"),
    ("wasnt", "wasn't"),
    ("wed've", "we'd've"),
    ("we'dve", "we'd've"),
    ("weve", "we've"),
    ("werent", "weren't"),
    ("whatll", "what'll"),
    ("whatre", "what're"),
    ("whats", "what's"),
    ("whatve", "what've"),
    ("whens", "when's"),
    ("whered", "where'd"),
    ("wheres", "where's"),
    ("whereve", "where've"),
    ("whod", "who'd"),
    ("whod've", "who'd've"),
    ("who'dve", "who'd've"),
    ("wholl", "who'll"),
    ("whos", "who's"),
    ("whove", "who've"),
    ("whyll", "why'll"),
    ("whyre", "why're"),
    ("whys", "why's"),
    ("wont", "won't"),
    ("wouldve", "would've"),
    ("wouldnt", "wouldn't"),
    ("wouldnt've", "wouldn't've"),
    ("wouldn'tve", "wouldn't've"),
    ("yall", "y'all"),
    ("yall'll", "y'all'll"),
    ("y'allll", "y'all'll"),
    ("yall'd've", "y'all'd've"),
    ("y'alld've", "y'all'd've"),
    ("y'all'dve", "y'all'd've"),
    ("youd", "you'd"),
    ("youd've", "you'd've"),
    ("you'dve", "you'd've"),
    ("youll", "you'll"),
    ("youre", "you're"),
    ("youve", "you've"),
];

/// Number words mapped to digits (`none` counts as `0`).
const NUMBER_MAP: &[(&str, &str)] = &[
    ("none", "0"),
    ("zero", "0"),
    ("one", "1"),
    ("two", "2"),
    ("three", "3"),
    ("four", "4"),
    ("five", "5"),
    ("six", "6"),
    ("seven", "7"),
    ("eight", "8"),
    ("nine", "9"),
    ("ten", "10"),
];

const ARTICLES: [&str; 3] = ["a", "an", "the"];

/// The punctuation marks, in the processor's order (the order matters: each is replaced in
/// the text the previous ones left).
const PUNCTUATIONS: [char; 21] = [
    ';', '/', '[', ']', '"', '{', '}', '(', ')', '=', '+', '\\', '_', '-', '>', '<', '@', '`', ',',
    '?', '!',
];

/// How many periods `PERIOD_STRIP.sub("", text, re.UNICODE)` removes at most: the processor
/// passes `re.UNICODE` (32) where `Pattern.sub` takes its `count`.
const PERIOD_STRIP_COUNT: usize = 32;

/// `COMMA_STRIP.search(text)` for `(?<=\d)(\,)+(?=\d)`: a run of commas between two decimal
/// digits.
fn comma_between_digits(text: &str) -> bool {
    let c: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < c.len() {
        if c[i] == ',' && i > 0 && pystr::is_decimal(c[i - 1]) {
            let mut j = i;
            while j < c.len() && c[j] == ',' {
                j += 1;
            }
            if j < c.len() && pystr::is_decimal(c[j]) {
                return true;
            }
            i = j;
        } else {
            i += 1;
        }
    }
    false
}

/// `process_punctuation`. Each mark is deleted when it touches a space in the input text (or
/// the input has commas between digits), replaced by a space otherwise. Then `PERIOD_STRIP`,
/// `(?!<=\d)(\.)(?!\d)`, whose first group is a negative look-ahead for the two characters
/// `<=` (a mistyped look-behind, always true before a `.`): the first 32 periods not followed
/// by a decimal digit are deleted.
fn process_punctuation(in_text: &str) -> String {
    let mut out = in_text.to_string();
    let commas = comma_between_digits(in_text);
    for p in PUNCTUATIONS {
        let touches = in_text.contains(&format!("{p} ")) || in_text.contains(&format!(" {p}"));
        out = if touches || commas {
            out.replace(p, "")
        } else {
            out.replace(p, " ")
        };
    }
    let chars: Vec<char> = out.chars().collect();
    let mut result = String::with_capacity(out.len());
    let mut removed = 0;
    for (i, &c) in chars.iter().enumerate() {
        let next_is_digit = chars.get(i + 1).is_some_and(|&n| pystr::is_decimal(n));
        if c == '.' && !next_is_digit && removed < PERIOD_STRIP_COUNT {
            removed += 1;
        } else {
            result.push(c);
        }
    }
    result
}

/// `process_digit_article`: lowercased, split on whitespace, number words to digits, articles
/// dropped, contractions restored, joined with single spaces.
fn process_digit_article(in_text: &str) -> String {
    let lowered = pystr::lower(in_text);
    let words: Vec<&str> = pystr::split(&lowered)
        .map(|w| {
            NUMBER_MAP
                .iter()
                .find(|(k, _)| *k == w)
                .map_or(w, |(_, v)| *v)
        })
        .filter(|w| !ARTICLES.contains(w))
        .map(|w| {
            CONTRACTIONS
                .iter()
                .find(|(k, _)| *k == w)
                .map_or(w, |(_, v)| *v)
        })
        .collect();
    words.join(" ")
}

/// `EvalAIAnswerProcessor()(answer)`: lowercase; `,` and `?` removed and `'s` → ` 's`; strip;
/// newlines and tabs to spaces; strip; [punctuation](process_punctuation); then
/// [digits and articles](process_digit_article).
pub fn evalai_normalize(answer: &str) -> String {
    let item = pystr::lower(answer)
        .replace([',', '?'], "")
        .replace("'s", " 's");
    let item = pystr::strip(&item).replace(['\n', '\t'], " ");
    let item = process_punctuation(pystr::strip(&item));
    process_digit_article(&item)
}

/// TextVQA per item: with the response and the references normalized by
/// [`evalai_normalize`], the mean over each reference `i` left out of `min(1, m_i / 3)`, `m_i`
/// the number of the other references equal to the response (10 references: the VQA
/// consensus accuracy). The mean is Python's `statistics.mean`: the exact sum of the float
/// terms divided by their count, rounded once. One reference gives 0 (no other reference can
/// agree), as in lmms-eval. `answers` must not be empty.
pub fn textvqa(prediction: &str, answers: &[String]) -> f64 {
    let res = evalai_normalize(prediction);
    let gts: Vec<String> = answers.iter().map(|a| evalai_normalize(a)).collect();
    let total = gts.iter().filter(|g| **g == res).count();
    // Left-out reference i: m_i = total − [gt_i == res]. Terms are 0, fl(1/3), fl(2/3) and 1.
    let (mut thirds, mut ones) = (0u128, 0u128);
    for g in &gts {
        let m = total - usize::from(*g == res);
        match m {
            0 => {}
            1 => thirds += 1,
            2 => thirds += 2,
            _ => ones += 1,
        }
    }
    exact_mean_of_thirds(thirds, ones, gts.len() as u128)
}

/// `(thirds · fl(1/3) + ones) / n`, rounded once to the nearest double (ties to even), as
/// Python's `statistics.mean` computes the mean of such terms: `fl(2/3)` is exactly
/// `2 · fl(1/3)`, so the exact sum is `thirds · fl(1/3) + ones`.
fn exact_mean_of_thirds(thirds: u128, ones: u128, n: u128) -> f64 {
    // fl(1/3) = M · 2⁻⁵⁴ with M = 0x15555555555555.
    const M: u128 = 0x15_5555_5555_5555;
    let num = thirds * M + (ones << 54);
    if num == 0 {
        return 0.0;
    }
    // q = ⌊num · 2⁶⁴ / n⌋ carries at least 60 significant bits (the mean is 0 or at least
    // fl(1/3)/n); a non-zero remainder sets the sticky bit so that rounding to 53 bits is exact.
    let shifted = num << 64;
    let (q, r) = (shifted / n, shifted % n);
    let q = q | u128::from(r != 0);
    (q as f64) * 2f64.powi(-64) * 2f64.powi(-54)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evalai_processor_cases() {
        assert_eq!(evalai_normalize("The Cat's toy."), "cat 's toy");
        assert_eq!(evalai_normalize("two dogs"), "2 dogs");
        assert_eq!(evalai_normalize("dont"), "don't");
        assert_eq!(evalai_normalize("3.5"), "3.5");
        // `-` becomes a space, then the article `a` is dropped.
        assert_eq!(evalai_normalize("a-b"), "b");
        assert_eq!(evalai_normalize("x-y"), "x y");
        let many = ".".repeat(40);
        assert_eq!(
            evalai_normalize(&format!("x{many}")),
            format!("x{}", ".".repeat(8))
        );
    }

    #[test]
    fn consensus_mean_is_pythons() {
        // statistics.mean([2/3]*6 + [1.0]*4) == 0.7999999999999999 (0x1.9999999999999p-1)
        assert_eq!(exact_mean_of_thirds(12, 4, 10), 0.7999999999999999);
        // statistics.mean([1/3]*3 + [0.0]*7) == 0.09999999999999999 (0x1.9999999999999p-4)
        assert_eq!(exact_mean_of_thirds(3, 0, 10), 0.09999999999999999);
        assert_eq!(exact_mean_of_thirds(0, 10, 10), 1.0);
        let a: Vec<String> = ["yes"; 10].iter().map(|s| s.to_string()).collect();
        assert_eq!(textvqa("Yes", &a), 1.0);
        assert_eq!(textvqa("no", &a), 0.0);
        assert_eq!(textvqa("yes", &a[..1]), 0.0);
    }
}
