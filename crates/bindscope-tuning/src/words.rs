//! Words of a caption: the unit every rule of the validator and every attention readout works
//! on, and the article repair.
//!
//! A *word* is a whitespace-separated chunk with its leading and trailing punctuation removed
//! (everything that is not a letter, a digit, `-` or `'`), compared lowercased. "A red cube, and
//! a blue ball." has the words `a red cube and a blue ball`. Each word keeps its byte span in
//! the text so that sub-tokens can be mapped back to it through tokenizer offsets.

use bindscope_saber::article::indefinite_article;

/// One word of a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// Lowercased word without surrounding punctuation.
    pub norm: String,
    /// Byte range of the word (without the punctuation) in the text.
    pub span: (usize, usize),
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '-' || c == '\''
}

/// The words of `text`, in order.
pub fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut pos = 0;
    for chunk in text.split_inclusive(char::is_whitespace) {
        let start_chunk = pos;
        pos += chunk.len();
        let trimmed_start = chunk.find(is_word_char);
        let Some(s) = trimmed_start else { continue };
        let e = chunk
            .rfind(is_word_char)
            .map(|i| i + chunk[i..].chars().next().map_or(1, char::len_utf8))
            .unwrap_or(s);
        let w = &chunk[s..e];
        out.push(Word {
            norm: w.to_lowercase(),
            span: (start_chunk + s, start_chunk + e),
        });
    }
    out
}

/// The lowercased words of `text` (see [`words`]).
pub fn word_strings(text: &str) -> Vec<String> {
    words(text).into_iter().map(|w| w.norm).collect()
}

/// The multiset of a text's words with `a` and `an` counted as the same word: sorted list.
/// Two texts are word-level permutations of each other (a/an equivalent) when these are equal.
pub fn bag_of_words(text: &str) -> Vec<String> {
    let mut v: Vec<String> = words(text)
        .into_iter()
        .map(|w| {
            if w.norm == "an" {
                "a".to_string()
            } else {
                w.norm
            }
        })
        .collect();
    v.sort_unstable();
    v
}

/// Sets every indefinite article (`a` / `an`, any case) to the one the pronunciation of the next
/// word asks for ([`bindscope_saber::article`], table-driven), keeping the article's
/// capitalisation. Returns the repaired text and the number of articles changed.
pub fn repair_articles(text: &str) -> (String, usize) {
    let ws = words(text);
    let mut out = String::with_capacity(text.len() + 4);
    let mut last = 0;
    let mut changed = 0;
    for (i, w) in ws.iter().enumerate() {
        if w.norm != "a" && w.norm != "an" {
            continue;
        }
        let Some(next) = ws.get(i + 1) else { continue };
        let want = indefinite_article(&next.norm);
        if want == w.norm {
            continue;
        }
        let orig = &text[w.span.0..w.span.1];
        let capital = orig.chars().next().is_some_and(char::is_uppercase);
        let mut rep = want.to_string();
        if capital {
            rep = capitalize(&rep);
        }
        out.push_str(&text[last..w.span.0]);
        out.push_str(&rep);
        last = w.span.1;
        changed += 1;
    }
    out.push_str(&text[last..]);
    (out, changed)
}

/// `text` with its first character uppercased.
pub fn capitalize(text: &str) -> String {
    let mut c = text.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_strip_punctuation_and_keep_spans() {
        let t = "A red cube, and an apple!";
        let w = words(t);
        assert_eq!(
            w.iter().map(|w| w.norm.as_str()).collect::<Vec<_>>(),
            ["a", "red", "cube", "and", "an", "apple"]
        );
        assert_eq!(&t[w[2].span.0..w[2].span.1], "cube");
        assert_eq!(&t[w[5].span.0..w[5].span.1], "apple");
    }

    #[test]
    fn article_repair_follows_pronunciation() {
        assert_eq!(
            repair_articles("A apple and an red cube."),
            ("An apple and a red cube.".to_string(), 2)
        );
        assert_eq!(
            repair_articles("an umbrella and a ball"),
            ("an umbrella and a ball".to_string(), 0)
        );
        assert_eq!(
            bag_of_words("An orange cube."),
            bag_of_words("a cube orange")
        );
    }
}
