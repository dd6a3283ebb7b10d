//! Questions and answers in each source's form, and the small random helpers the categories
//! share.
//!
//! | source | prompt | gold (test / dev) | training answer |
//! |---|---|---|---|
//! | `mme` | the question + ` Please answer yes or no.` (as MME's own questions end) | `Yes` / `No` | `Yes` / `No` |
//! | `cvbench` | the question, one `(A) …` line per option, then `Answer with the option's letter from the given choices directly.` (lmms-eval's CV-Bench post-prompt) | `(B)` (CV-Bench's form) | the bare letter `B`, which [`crate::metrics::choice::cvbench_letter`] reads as `B` |
//! | `ocrbench` | the question as is | the text as drawn | the text |
//! | `chartqa` | the question + `\nAnswer the question using a single word or phrase.` (lmms-eval's ChartQA post-prompt) | the number, plain (`42`) | the number |

use crate::metrics::Source;
use rand::Rng;

/// MME's yes/no instruction, appended after a space.
pub(crate) const MME_SUFFIX: &str = "Please answer yes or no.";
/// lmms-eval's CV-Bench post-prompt, on its own line after the options.
pub(crate) const CVBENCH_SUFFIX: &str =
    "Answer with the option's letter from the given choices directly.";
/// lmms-eval's ChartQA post-prompt, on its own line.
pub(crate) const CHARTQA_SUFFIX: &str = "Answer the question using a single word or phrase.";

/// One question about an image, in the form of its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Qa {
    /// Whose scorer the answer gets.
    pub source: Source,
    /// The full prompt (options and instruction included).
    pub question: String,
    /// The gold answer as the manifest records it.
    pub gold: String,
    /// The answer of a training conversation's gpt turn.
    pub train_answer: String,
    /// CV-Bench's options (`(A) …`), `None` for the other sources.
    pub options: Option<Vec<String>>,
}

/// A yes/no question (`mme`).
pub(crate) fn mme(question: &str, yes: bool) -> Qa {
    let answer = if yes { "Yes" } else { "No" };
    Qa {
        source: Source::Mme,
        question: format!("{question} {MME_SUFFIX}"),
        gold: answer.into(),
        train_answer: answer.into(),
        options: None,
    }
}

/// The letter of option `i` (`0 → A`).
pub(crate) fn letter(i: usize) -> char {
    char::from(b'A' + u8::try_from(i).expect("at most 26 options"))
}

/// A lettered choice (`cvbench`): `correct` is put at a uniformly drawn position among the
/// `distractors` (which keep their order around it).
pub(crate) fn cvbench<R: Rng>(
    rng: &mut R,
    question: &str,
    correct: &str,
    distractors: &[String],
) -> Qa {
    let pos = rng.random_range(0..=distractors.len());
    let mut texts: Vec<String> = distractors.to_vec();
    texts.insert(pos, correct.to_string());
    cvbench_at(question, &texts, pos)
}

/// A lettered choice (`cvbench`) over `texts` in this order, the correct one at `correct`.
pub(crate) fn cvbench_at(question: &str, texts: &[String], correct: usize) -> Qa {
    let options: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| format!("({}) {t}", letter(i)))
        .collect();
    let l = letter(correct);
    Qa {
        source: Source::Cvbench,
        question: format!("{question}\n{}\n{CVBENCH_SUFFIX}", options.join("\n")),
        gold: format!("({l})"),
        train_answer: l.to_string(),
        options: Some(options),
    }
}

/// A text to read (`ocrbench`).
pub(crate) fn ocrbench(question: &str, text: &str) -> Qa {
    Qa {
        source: Source::Ocrbench,
        question: question.into(),
        gold: text.into(),
        train_answer: text.into(),
        options: None,
    }
}

/// A number to give (`chartqa`).
pub(crate) fn chartqa(question: &str, value: u32) -> Qa {
    Qa {
        source: Source::Chartqa,
        question: format!("{question}\n{CHARTQA_SUFFIX}"),
        gold: value.to_string(),
        train_answer: value.to_string(),
        options: None,
    }
}

/// `phrase` with its English indefinite article: `an` before a vowel letter (`an orange
/// circle`), `a` otherwise (`a red square`). Enough for the synthetic vocabulary, whose words
/// all sound as they are spelled.
pub(crate) fn with_article(phrase: &str) -> String {
    let vowel = phrase
        .chars()
        .next()
        .is_some_and(|c| "aeiouAEIOU".contains(c));
    format!("{} {phrase}", if vowel { "an" } else { "a" })
}

/// A uniformly drawn element of a non-empty slice.
pub(crate) fn pick<'a, T, R: Rng>(rng: &mut R, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

/// `k` distinct elements of `items` in random order (Fisher–Yates on indices; `k ≤ len`).
pub(crate) fn sample<T: Clone, R: Rng>(rng: &mut R, items: &[T], k: usize) -> Vec<T> {
    let mut idx: Vec<usize> = (0..items.len()).collect();
    for i in 0..k.min(idx.len()) {
        let j = rng.random_range(i..idx.len());
        idx.swap(i, j);
    }
    idx[..k.min(items.len())]
        .iter()
        .map(|&i| items[i].clone())
        .collect()
}

/// A prompt's first line: the question without options or instruction.
pub(crate) fn stem(question: &str) -> &str {
    question.split('\n').next().unwrap_or(question)
}

/// Up to `want` questions made by `make` (each call may give `None` when its draw is not
/// possible for the image), with distinct [`stem`]s (so a conversation never asks the same
/// thing twice with other options); at most `tries` calls.
pub(crate) fn distinct<R: Rng>(
    rng: &mut R,
    want: usize,
    tries: usize,
    mut make: impl FnMut(&mut R) -> Option<Qa>,
) -> Vec<Qa> {
    let mut out: Vec<Qa> = Vec::new();
    for _ in 0..tries {
        if out.len() == want {
            break;
        }
        if let Some(qa) = make(rng)
            && !out.iter().any(|q| stem(&q.question) == stem(&qa.question))
        {
            out.push(qa);
        }
    }
    out
}
