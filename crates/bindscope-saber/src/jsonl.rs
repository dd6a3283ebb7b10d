//! SABER files: writing items and prompts as JSONL (atomically), and reading items back with
//! every row checked against the generator's rules.
//!
//! A row that breaks a rule is rejected with its line number and the rule's name
//! ([`Rejection`]); it is never kept, and the count goes into the evaluation report. The rules:
//!
//! | rule | what is checked |
//! |---|---|
//! | `json` | the line is valid JSON |
//! | `schema` | the fields of [`McqItem`] and nothing else, with the right types |
//! | `n-range` | `2 ≤ n ≤ 10` |
//! | `duplicate-id` | item, query and candidate ids unique in the file |
//! | `ids` | query id `<item>-q`, candidate ids `<item>-c1` … `<item>-c4` |
//! | `source` | chain items name their chain, independent items do not |
//! | `pair-count` | the query and every candidate have `n` pairs |
//! | `words` | attributes, objects and generation forms are non-empty, single-spaced lowercase |
//! | `distinct-elements` | no caption repeats an object or an attribute |
//! | `candidates` | four candidates, kinds [`CandidateKind::for_n`], `answer` = 0 |
//! | `bind` | candidate 1 has the query's bindings in a different order |
//! | `same-elements` | candidates 2–4 (3 for `n = 2`) use exactly the query's objects and attributes |
//! | `frame` | candidate 2 keeps candidate 1's objects in place, candidate 3 its attributes |
//! | `distinct-assignments` | `n ≥ 3`: the four binding assignments are pairwise distinct |
//! | `replacement` | `n = 2`: candidate 4 keeps exactly one query binding and replaces one element of the other by a new one |
//! | `instantiation` | an attribute has one generation form throughout the item |
//! | `text` / `gen-text` | `text` and `gen_text` are the renderings of `pairs` |

use crate::SaberError;
use crate::generate::{
    CandidateKind, Caption, McqItem, Pair, PromptRow, Source, render_gen, render_text,
};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;

/// A rejected row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rejection {
    /// 1-based line number.
    pub line: usize,
    /// The rule broken (see the module table).
    pub rule: String,
    /// What exactly was wrong.
    pub message: String,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: [{}] {}", self.line, self.rule, self.message)
    }
}

/// The accepted items and the rejected rows of a file.
#[derive(Debug, Clone, Default)]
pub struct ReadOutcome {
    /// Rows that passed every rule, in file order.
    pub items: Vec<McqItem>,
    /// Rows that did not (blank lines are skipped and not counted).
    pub rejected: Vec<Rejection>,
    /// Non-blank lines read.
    pub rows: usize,
}

/// Writes rows as JSONL atomically (temporary file + rename).
///
/// # Errors
/// [`SaberError::Io`] naming the file.
pub fn write_jsonl<T: serde::Serialize>(path: &Path, rows: &[T]) -> Result<(), SaberError> {
    bindscope_core::fsutil::write_atomic_with(path, |w| {
        for r in rows {
            serde_json::to_writer(&mut *w, r).map_err(std::io::Error::other)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    })
    .map_err(|e| SaberError::io(path, e))
}

/// Writes the items (`saber.jsonl`).
///
/// # Errors
/// [`SaberError::Io`].
pub fn write_items(path: &Path, items: &[McqItem]) -> Result<(), SaberError> {
    write_jsonl(path, items)
}

/// Writes the prompts (`prompts.jsonl`).
///
/// # Errors
/// [`SaberError::Io`].
pub fn write_prompts(path: &Path, rows: &[PromptRow]) -> Result<(), SaberError> {
    write_jsonl(path, rows)
}

/// Reads and validates a `saber.jsonl`.
///
/// The file is read by [`bindscope_data::textfile::read_text_file`]: UTF-8, a leading
/// byte-order mark removed (and said on stderr).
///
/// # Errors
/// [`SaberError::Io`] when the file cannot be read, [`SaberError::Invalid`] naming the line of
/// the first byte that is not UTF-8; bad rows are not errors but [`ReadOutcome::rejected`].
pub fn read_items(path: &Path) -> Result<ReadOutcome, SaberError> {
    use bindscope_data::textfile::{TextFileError, read_text_file};
    let file = read_text_file(path).map_err(|e| match e {
        TextFileError::Io { path, source } => SaberError::io(path, source),
        e => SaberError::Invalid(e.to_string()),
    })?;
    if let Some(note) = file.bom_note() {
        eprintln!("{note}");
    }
    Ok(parse_items(&file.text))
}

/// Parses and validates JSONL text (see the module table for the rules).
pub fn parse_items(text: &str) -> ReadOutcome {
    let mut out = ReadOutcome::default();
    let mut ids: HashSet<String> = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        out.rows += 1;
        let reject = |rule: &str, message: String| Rejection {
            line: line_no,
            rule: rule.to_string(),
            message,
        };
        let value: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                out.rejected
                    .push(reject("json", format!("not valid JSON: {e}")));
                continue;
            }
        };
        let item: McqItem = match serde_json::from_value(value) {
            Ok(v) => v,
            Err(e) => {
                out.rejected.push(reject("schema", e.to_string()));
                continue;
            }
        };
        if let Err((rule, message)) = validate_item(&item) {
            out.rejected
                .push(reject(rule, format!("{}: {message}", item.id)));
            continue;
        }
        let row_ids: Vec<&str> = std::iter::once(item.id.as_str())
            .chain(std::iter::once(item.query.id.as_str()))
            .chain(item.candidates.iter().map(|c| c.id.as_str()))
            .collect();
        if let Some(dup) = row_ids.iter().find(|id| ids.contains(**id)) {
            out.rejected.push(reject(
                "duplicate-id",
                format!("id '{dup}' already used by an earlier row"),
            ));
            continue;
        }
        ids.extend(row_ids.iter().map(|s| s.to_string()));
        out.items.push(item);
    }
    out
}

fn bindings(pairs: &[Pair]) -> Vec<(&str, &str)> {
    let mut b: Vec<_> = pairs.iter().map(Pair::binding).collect();
    b.sort_unstable();
    b
}

fn sorted<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = it.collect();
    v.sort_unstable();
    v
}

fn is_phrase(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(' ')
        && !s.ends_with(' ')
        && !s.contains("  ")
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == ' ')
}

/// Checks one item against the generator's rules; `Err((rule, message))` on the first broken one.
///
/// # Errors
/// The rule's name (module table) and what was wrong.
pub fn validate_item(item: &McqItem) -> Result<(), (&'static str, String)> {
    let n = item.n;
    if !(2..=10).contains(&n) {
        return Err(("n-range", format!("n = {n}, expected 2..=10")));
    }
    if item.id.is_empty() || item.query.id != format!("{}-q", item.id) {
        return Err((
            "ids",
            format!("query id '{}' should be '{}-q'", item.query.id, item.id),
        ));
    }
    match (item.source, &item.chain) {
        (Source::Chain, None) => return Err(("source", "a chain item needs a 'chain' id".into())),
        (Source::Independent, Some(c)) => {
            return Err(("source", format!("an independent item has chain '{c}'")));
        }
        _ => {}
    }
    if item.candidates.len() != 4 {
        return Err((
            "candidates",
            format!("{} candidates, expected 4", item.candidates.len()),
        ));
    }
    if item.answer != 0 {
        return Err((
            "candidates",
            format!("answer = {}, expected 0 (candidate 1)", item.answer),
        ));
    }
    let kinds = CandidateKind::for_n(n);
    for (i, c) in item.candidates.iter().enumerate() {
        if c.id != format!("{}-c{}", item.id, i + 1) {
            return Err((
                "ids",
                format!(
                    "candidate {} has id '{}', expected '{}-c{}'",
                    i + 1,
                    c.id,
                    item.id,
                    i + 1
                ),
            ));
        }
        if c.kind != Some(kinds[i]) {
            return Err((
                "candidates",
                format!(
                    "candidate {} has kind {}, expected {}",
                    i + 1,
                    c.kind
                        .map_or("(none)".to_string(), |k| format!("'{}'", k.name())),
                    kinds[i].name()
                ),
            ));
        }
    }
    if item.query.kind.is_some() {
        return Err(("candidates", "the query has a 'kind'".into()));
    }
    let captions: Vec<&Caption> = std::iter::once(&item.query)
        .chain(&item.candidates)
        .collect();
    for c in &captions {
        if c.pairs.len() != n {
            return Err((
                "pair-count",
                format!("'{}' has {} pairs, n = {n}", c.id, c.pairs.len()),
            ));
        }
        for p in &c.pairs {
            for (what, s) in [
                ("attribute", &p.attribute),
                ("object", &p.object),
                ("attribute_gen", &p.attribute_gen),
            ] {
                if !is_phrase(s) || (what != "attribute_gen" && s.contains(' ')) {
                    return Err((
                        "words",
                        format!(
                            "'{}': {what} '{s}' is not a lowercase word{}",
                            c.id,
                            if what == "attribute_gen" {
                                " sequence"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
            }
        }
    }
    for c in &captions {
        let objs = sorted(c.pairs.iter().map(|p| p.object.as_str()));
        let attrs = sorted(c.pairs.iter().map(|p| p.attribute.as_str()));
        if objs.windows(2).any(|w| w[0] == w[1]) || attrs.windows(2).any(|w| w[0] == w[1]) {
            return Err((
                "distinct-elements",
                format!("'{}' repeats an object or an attribute", c.id),
            ));
        }
    }
    let q = &item.query.pairs;
    let q_objs = sorted(q.iter().map(|p| p.object.as_str()));
    let q_attrs = sorted(q.iter().map(|p| p.attribute.as_str()));
    // One generation form per attribute across the item.
    let mut gen_of: HashMap<&str, &str> = HashMap::new();
    for c in &captions {
        for p in &c.pairs {
            if let Some(prev) = gen_of.insert(&p.attribute, &p.attribute_gen)
                && prev != p.attribute_gen
            {
                return Err((
                    "instantiation",
                    format!(
                        "attribute '{}' is '{prev}' and '{}'",
                        p.attribute, p.attribute_gen
                    ),
                ));
            }
        }
    }
    for c in &captions {
        if c.text != render_text(&c.pairs) {
            return Err((
                "text",
                format!(
                    "'{}': text '{}' is not the rendering '{}'",
                    c.id,
                    c.text,
                    render_text(&c.pairs)
                ),
            ));
        }
        if c.gen_text != render_gen(&c.pairs) {
            return Err((
                "gen-text",
                format!(
                    "'{}': gen_text '{}' is not the rendering '{}'",
                    c.id,
                    c.gen_text,
                    render_gen(&c.pairs)
                ),
            ));
        }
    }
    let c1 = &item.candidates[0].pairs;
    if bindings(c1) != bindings(q) {
        return Err((
            "bind",
            "candidate 1 does not have the query's bindings".into(),
        ));
    }
    if c1 == q {
        return Err((
            "bind",
            "candidate 1 has the query's pair order (it must be reordered)".into(),
        ));
    }
    let with_same_elements = if n == 2 { 1..3 } else { 1..4 };
    for i in with_same_elements {
        let c = &item.candidates[i].pairs;
        if sorted(c.iter().map(|p| p.object.as_str())) != q_objs
            || sorted(c.iter().map(|p| p.attribute.as_str())) != q_attrs
        {
            return Err((
                "same-elements",
                format!(
                    "candidate {} does not use exactly the query's objects and attributes",
                    i + 1
                ),
            ));
        }
    }
    let objs_of = |ps: &[Pair]| ps.iter().map(|p| p.object.clone()).collect::<Vec<_>>();
    let attrs_of = |ps: &[Pair]| ps.iter().map(|p| p.attribute.clone()).collect::<Vec<_>>();
    if objs_of(&item.candidates[1].pairs) != objs_of(c1) {
        return Err((
            "frame",
            "candidate 2 must keep candidate 1's objects in place".into(),
        ));
    }
    if attrs_of(&item.candidates[2].pairs) != attrs_of(c1) {
        return Err((
            "frame",
            "candidate 3 must keep candidate 1's attributes in place".into(),
        ));
    }
    let assignments: Vec<Vec<(&str, &str)>> =
        item.candidates.iter().map(|c| bindings(&c.pairs)).collect();
    if n >= 3 {
        for i in 0..4 {
            for j in i + 1..4 {
                if assignments[i] == assignments[j] {
                    return Err((
                        "distinct-assignments",
                        format!("candidates {} and {} have the same bindings", i + 1, j + 1),
                    ));
                }
            }
        }
    } else {
        if assignments[1] == assignments[0] || assignments[2] == assignments[0] {
            return Err((
                "distinct-assignments",
                "candidates 2 and 3 must swap the bindings".into(),
            ));
        }
        let c4 = &item.candidates[3].pairs;
        let qb = bindings(q);
        let kept = c4.iter().filter(|p| qb.contains(&p.binding())).count();
        let new_elems = c4
            .iter()
            .filter(|p| !q_objs.contains(&p.object.as_str()))
            .count()
            + c4.iter()
                .filter(|p| !q_attrs.contains(&p.attribute.as_str()))
                .count();
        if kept != 1 || new_elems != 1 {
            return Err((
                "replacement",
                format!(
                    "candidate 4 keeps {kept} query binding(s) and has {new_elems} new element(s); expected 1 and 1"
                ),
            ));
        }
    }
    Ok(())
}
