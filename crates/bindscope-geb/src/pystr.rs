//! Python 3 `str` semantics that lmms-eval's scorers rely on, so the metrics give Python's answer
//! on every input: the whitespace set of `str.isspace` / `str.strip()` / `str.split()`, the
//! character classes of `re`'s `\s`, `\d` and `\w` on `str` patterns, `str.isalpha`, `float()`
//! parsing, and lengths in code points.
//!
//! Character properties come from the Unicode tables of `unicode-properties` (Unicode 16) and of
//! Rust's standard library; CPython carries its own tables (Unicode 14 in Python 3.11, 15 in 3.12,
//! 15.1 in 3.13). They differ only on characters assigned after Python's version.

use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

/// `str.isspace()` for one character, which is also `re`'s `\s` on a `str` pattern and the set
/// `str.strip()` / `str.split()` remove: Unicode `White_Space` plus U+001C–U+001F (the file,
/// group, record and unit separators, which CPython counts as whitespace through their
/// bidirectional class).
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `str.isalpha()` for one character: general category `Lu`, `Ll`, `Lt`, `Lm` or `Lo`.
pub fn is_alpha(c: char) -> bool {
    c.general_category_group() == GeneralCategoryGroup::Letter
}

/// `str.isdecimal()` for one character, which is also `re`'s `\d` on a `str` pattern: general
/// category `Nd`.
pub fn is_decimal(c: char) -> bool {
    c.general_category() == unicode_properties::GeneralCategory::DecimalNumber
}

/// `re`'s `\w` on a `str` pattern: `str.isalnum()` (letters and every numeric category, `Nd`,
/// `Nl`, `No`) or `_`. Unlike Rust's `regex` `\w`, combining marks are not word characters.
pub fn is_word(c: char) -> bool {
    c == '_'
        || matches!(
            c.general_category_group(),
            GeneralCategoryGroup::Letter | GeneralCategoryGroup::Number
        )
}

/// `s.strip()`: leading and trailing [`is_space`] characters removed.
pub fn strip(s: &str) -> &str {
    s.trim_matches(is_space)
}

/// `s.strip(chars)`: leading and trailing characters of `chars` removed.
pub fn strip_chars<'a>(s: &'a str, chars: &str) -> &'a str {
    s.trim_matches(|c| chars.contains(c))
}

/// `s.rstrip(chars)`.
pub fn rstrip_chars<'a>(s: &'a str, chars: &str) -> &'a str {
    s.trim_end_matches(|c| chars.contains(c))
}

/// `s.split()`: the runs of non-[`is_space`] characters.
pub fn split(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_space).filter(|w| !w.is_empty())
}

/// `" ".join(s.split())`: whitespace runs collapsed to one space, ends trimmed.
pub fn collapse_spaces(s: &str) -> String {
    split(s).collect::<Vec<_>>().join(" ")
}

/// `len(s)`: the number of code points.
pub fn len(s: &str) -> usize {
    s.chars().count()
}

/// `s.lower()`: full Unicode lowercase mapping (`İ` → `i̇`, final sigma), as Rust's
/// `str::to_lowercase`.
pub fn lower(s: &str) -> String {
    s.to_lowercase()
}

/// `s.upper()`: full Unicode uppercase mapping (`ß` → `SS`), as Rust's `str::to_uppercase`.
pub fn upper(s: &str) -> String {
    s.to_uppercase()
}

/// The code-point index of the byte offset `byte` of `s`.
pub fn char_index(s: &str, byte: usize) -> usize {
    s[..byte].chars().count()
}

/// The byte offset of the code-point index `index` of `s`; `None` past the end.
pub fn byte_offset(s: &str, index: usize) -> Option<usize> {
    s.char_indices()
        .map(|(b, _)| b)
        .chain(std::iter::once(s.len()))
        .nth(index)
}

/// `float(s)` as CPython parses a `str` (`PyFloat_FromString`), `None` where Python raises
/// `ValueError`:
/// 1. every non-ASCII whitespace character becomes a space and every non-ASCII decimal digit
///    (any `Nd` character: `٣`, `５`) its ASCII digit; any other non-ASCII character makes the
///    string invalid;
/// 2. underscores are allowed only between two ASCII digits (`1_000`, `1e1_0`) and removed;
/// 3. leading and trailing ASCII whitespace is stripped; the rest must be a decimal literal
///    (`1`, `-1.5`, `.5`, `5.`, `1e-3`) or `inf`, `infinity`, `nan` in any case, with an
///    optional sign. Overflow gives `±inf` (`1e400`), as in Python.
pub fn parse_float(s: &str) -> Option<f64> {
    let mut ascii = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else if is_space(c) {
            ascii.push(' ');
        } else if let Some(d) = decimal_value(c) {
            ascii.push(char::from(b'0' + d));
        } else {
            return None;
        }
    }
    let text = if ascii.contains('_') {
        let mut out = String::with_capacity(ascii.len());
        let mut prev = '\0';
        for c in ascii.chars() {
            if c == '_' {
                if !prev.is_ascii_digit() {
                    return None;
                }
            } else {
                if prev == '_' && !c.is_ascii_digit() {
                    return None;
                }
                out.push(c);
            }
            prev = c;
        }
        if prev == '_' {
            return None;
        }
        out
    } else {
        ascii
    };
    // CPython strips `Py_ISSPACE`: space, \t, \n, \v, \f, \r.
    let t = text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r'));
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    // Rust's grammar for `f64::from_str` is Python's: optional sign, then `inf`, `infinity`,
    // `nan` (any case) or digits with an optional fraction and exponent, correctly rounded.
    t.parse::<f64>().ok()
}

/// The decimal digit value of a `Nd` character (`Py_UNICODE_TODECIMAL`): every `Nd` block of
/// Unicode is ten consecutive code points from 0 to 9.
fn decimal_value(c: char) -> Option<u8> {
    if !is_decimal(c) {
        return None;
    }
    let code = c as u32;
    // Runs are aligned blocks of ten (Unicode's stability policy for `Nd`); adjacent blocks
    // (the mathematical digits U+1D7CE–U+1D7FF) make a longer run split at multiples of ten.
    let mut run_start = code;
    while let Some(p) = char::from_u32(run_start.wrapping_sub(1)) {
        if run_start == 0 || !is_decimal(p) {
            break;
        }
        run_start -= 1;
    }
    Some(((code - run_start) % 10) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_is_pythons() {
        for c in [
            '\u{1c}', '\u{1f}', '\u{85}', '\u{a0}', '\u{2028}', '\u{3000}', '\t',
        ] {
            assert!(is_space(c), "{c:?}");
        }
        for c in ['\u{180e}', '\u{200b}', '\u{feff}', 'a'] {
            assert!(!is_space(c), "{c:?}");
        }
        assert_eq!(strip("\u{1c} a b\u{3000}"), "a b");
        assert_eq!(split(" a\u{85}b  c ").collect::<Vec<_>>(), ["a", "b", "c"]);
    }

    #[test]
    fn floats_parse_as_in_python() {
        let cases: &[(&str, Option<f64>)] = &[
            ("1", Some(1.0)),
            (" 1.5\n", Some(1.5)),
            ("\u{3000}2\u{a0}", Some(2.0)),
            ("1_000", Some(1000.0)),
            ("1__0", None),
            ("_1", None),
            ("1_", None),
            ("1_.5", None),
            ("1e1_0", Some(1e10)),
            ("inf", Some(f64::INFINITY)),
            ("-Infinity", Some(f64::NEG_INFINITY)),
            ("٣", Some(3.0)),
            ("５０", Some(50.0)),
            ("𝟗", Some(9.0)),
            ("1,000", None),
            ("", None),
            (" ", None),
            ("1 0", None),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            (".", None),
            ("1e400", Some(f64::INFINITY)),
            ("0x10", None),
            ("+5", Some(5.0)),
        ];
        for (s, want) in cases {
            assert_eq!(parse_float(s), *want, "{s:?}");
        }
        assert!(parse_float("nan").unwrap().is_nan());
        assert!(parse_float("-NaN").unwrap().is_nan());
    }

    #[test]
    fn decimal_values_follow_their_block() {
        assert_eq!(decimal_value('0'), Some(0));
        assert_eq!(decimal_value('٩'), Some(9));
        // U+1D7CE..U+1D7FF: five blocks of mathematical digits back to back.
        assert_eq!(decimal_value('\u{1d7ce}'), Some(0));
        assert_eq!(decimal_value('\u{1d7d8}'), Some(0));
        assert_eq!(decimal_value('\u{1d7ff}'), Some(9));
        assert_eq!(decimal_value('x'), None);
    }

    #[test]
    fn classes_are_pythons() {
        assert!(is_word('_') && is_word('é') && is_word('Ⅳ') && is_word('²'));
        assert!(!is_word('\u{301}'), "a combining mark is not \\w in Python");
        assert!(is_alpha('ß') && !is_alpha('Ⅳ') && !is_alpha('1'));
        assert!(is_decimal('٣') && !is_decimal('²'));
    }
}
