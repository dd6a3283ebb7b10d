//! Reasoning-block stripping, the step lmms-eval's command line applies to every response before
//! a task scores it (`lmms_eval/api/reasoning.py`, `strip_reasoning_tags`; called from
//! `evaluator.py` `_process_document_results` when `--reasoning_tags` is not `none`).

/// The tag pairs of lmms-eval's `--reasoning_tags` default (`lmms_eval/__main__.py`):
/// `[["<think>", "</think>"], ["<analysis>", "</analysis>"]]`.
pub const DEFAULT_TAGS: [(&str, &str); 2] =
    [("<think>", "</think>"), ("<analysis>", "</analysis>")];

/// A reasoning tag pair `(start, end)`, both non-empty.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TagPair(pub String, pub String);

/// The default pairs as owned [`TagPair`]s.
pub fn default_tags() -> Vec<TagPair> {
    DEFAULT_TAGS
        .iter()
        .map(|(s, e)| TagPair(s.to_string(), e.to_string()))
        .collect()
}

/// Parses a `--reasoning-tags` value as lmms-eval does: `none` (no stripping) or a JSON list of
/// `[start, end]` string pairs. An empty tag is refused (lmms-eval would loop forever on it).
///
/// # Errors
/// A message naming what is wrong with the value.
pub fn parse_tags(value: &str) -> Result<Option<Vec<TagPair>>, String> {
    if value == "none" {
        return Ok(None);
    }
    let pairs: Vec<Vec<String>> = serde_json::from_str(value).map_err(|e| {
        format!(
            "--reasoning-tags {value:?}: expected `none` or a JSON list of [start, end] string \
             pairs, e.g. '[[\"<think>\", \"</think>\"]]' ({e})"
        )
    })?;
    pairs
        .into_iter()
        .enumerate()
        .map(|(i, p)| match <[String; 2]>::try_from(p) {
            Ok([s, e]) if !s.is_empty() && !e.is_empty() => Ok(TagPair(s, e)),
            Ok(_) => Err(format!("--reasoning-tags: pair {} has an empty tag", i + 1)),
            Err(p) => Err(format!(
                "--reasoning-tags: pair {} has {} strings, expected 2 ([start, end])",
                i + 1,
                p.len()
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `strip_reasoning_tags(text, tag_pairs)`, then the surrounding whitespace removed. For each
/// pair in order: while both tags occur, the span from the first start tag to the first end tag
/// after it is cut (when the end tag occurs only before every start tag, the loop stops); then,
/// if an end tag remains and no start tag does (a template that pre-fills the opening tag), only
/// the text after the last end tag is kept. Matching is case-sensitive and an unclosed start tag
/// stays. Finally Python's `str.strip()`.
pub fn strip_reasoning(text: &str, pairs: &[TagPair]) -> String {
    let mut result = text.to_string();
    for TagPair(start_tag, end_tag) in pairs {
        while result.contains(start_tag.as_str()) && result.contains(end_tag.as_str()) {
            let start = result.find(start_tag.as_str()).expect("contains");
            match result[start..].find(end_tag.as_str()) {
                Some(rel) => {
                    let end = start + rel + end_tag.len();
                    result.replace_range(start..end, "");
                }
                None => break,
            }
        }
        if result.contains(end_tag.as_str()) && !result.contains(start_tag.as_str()) {
            let at = result.rfind(end_tag.as_str()).expect("contains");
            result = result[at + end_tag.len()..].to_string();
        }
    }
    crate::pystr::strip(&result).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_cut_as_lmms_eval_does() {
        let t = default_tags();
        assert_eq!(strip_reasoning("<think>x</think> B", &t), "B");
        assert_eq!(
            strip_reasoning("<think>unclosed B", &t),
            "<think>unclosed B"
        );
        assert_eq!(strip_reasoning("prefilled</think> A", &t), "A");
        assert_eq!(
            strip_reasoning("a</think>b<think>c", &t),
            "a</think>b<think>c"
        );
        assert_eq!(
            strip_reasoning("<THINK>x</THINK> B", &t),
            "<THINK>x</THINK> B"
        );
        assert_eq!(
            strip_reasoning("<think>1</think>A<analysis>2</analysis>B", &t),
            "AB"
        );
        assert_eq!(parse_tags("none").unwrap(), None);
        assert!(parse_tags("[[\"<a>\", \"\"]]").is_err());
        assert!(parse_tags("[[\"<a>\"]]").is_err());
        assert!(parse_tags("<think>").is_err());
    }
}
