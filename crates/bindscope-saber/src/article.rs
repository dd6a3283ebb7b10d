//! Indefinite articles by pronunciation ("an hour", "a unicorn", "an umbrella", "a one-way
//! sign"), driven by the table `crates/bindscope-saber/data/articles.tsv`.
//!
//! Rule: take the first word of the phrase, lowercased; the longest table prefix it starts with
//! decides; a word that matches no prefix takes "an" when it starts with a vowel letter
//! (`a e i o u`) and "a" otherwise. Hyphenated words are matched as written (`one-eyed` starts
//! with `one`).

use std::sync::OnceLock;

const ARTICLES_TSV: &str = include_str!("../data/articles.tsv");

/// One row of the exceptions table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArticleRule {
    /// Lowercase word prefix.
    pub prefix: String,
    /// `"a"` or `"an"`.
    pub article: &'static str,
    /// A word the rule is for (checked by the tests).
    pub example: String,
}

/// The parsed exceptions table (panics only if the compiled-in file is malformed, which the
/// tests rule out).
pub fn rules() -> &'static [ArticleRule] {
    static RULES: OnceLock<Vec<ArticleRule>> = OnceLock::new();
    RULES.get_or_init(|| parse_rules(ARTICLES_TSV).expect("data/articles.tsv is valid (tested)"))
}

/// Parses an `articles.tsv` (header `prefix\tarticle\texample`, `#` comments).
///
/// # Errors
/// A message naming the line and the problem.
pub fn parse_rules(text: &str) -> Result<Vec<ArticleRule>, String> {
    let mut out = Vec::new();
    let mut header = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        if !header {
            if f != ["prefix", "article", "example"] {
                return Err(format!(
                    "articles.tsv:{}: expected the header prefix\\tarticle\\texample",
                    i + 1
                ));
            }
            header = true;
            continue;
        }
        let [prefix, article, example] = f[..] else {
            return Err(format!(
                "articles.tsv:{}: expected 3 tab-separated fields",
                i + 1
            ));
        };
        let article = match article {
            "a" => "a",
            "an" => "an",
            other => {
                return Err(format!(
                    "articles.tsv:{}: article '{other}' (expected a or an)",
                    i + 1
                ));
            }
        };
        if prefix.is_empty() || prefix != prefix.to_lowercase() || !example.starts_with(prefix) {
            return Err(format!(
                "articles.tsv:{}: prefix '{prefix}' must be lowercase and start its example '{example}'",
                i + 1
            ));
        }
        out.push(ArticleRule {
            prefix: prefix.to_string(),
            article,
            example: example.to_string(),
        });
    }
    Ok(out)
}

/// `"a"` or `"an"` for a phrase, by the pronunciation of its first word.
pub fn indefinite_article(phrase: &str) -> &'static str {
    let word = phrase
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_lowercase();
    let best = rules()
        .iter()
        .filter(|r| word.starts_with(r.prefix.as_str()))
        .max_by_key(|r| r.prefix.len());
    match best {
        Some(r) => r.article,
        None if word.starts_with(['a', 'e', 'i', 'o', 'u']) => "an",
        None => "a",
    }
}

/// `"a striped cube"` / `"an orange glowing cube"`: the phrase with its article.
pub fn with_article(phrase: &str) -> String {
    format!("{} {phrase}", indefinite_article(phrase))
}
