//! Reading triplet examples from JSONL (external, e.g. LLM-written, or the generator's own
//! output) through the [`crate::validate`] rules.
//!
//! Every non-blank line is one row. A row that is not JSON, does not fit the [`Example`] schema,
//! breaks a validator rule, or repeats an id or the anchor text of an example of the same type is rejected with its 1-based line
//! number and the rule it broke; rejections are counted per rule in the [`ImportReport`] and
//! never kept. Blank lines are skipped and counted.

use crate::example::Example;
use crate::validate::{Rule, Violation, validate};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// One rejected row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rejection {
    /// 1-based line number in the source.
    pub line: usize,
    /// The rule broken.
    pub rule: Rule,
    /// What was wrong.
    pub message: String,
    /// The row's id, when it could be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}: {}", self.line, self.rule, self.message)
    }
}

/// What an import kept and rejected.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ImportReport {
    /// Where the rows came from (a path, or `generator`).
    pub source: String,
    /// Non-blank lines read.
    pub rows: usize,
    /// Blank lines skipped.
    pub blank_lines: usize,
    /// Rows kept.
    pub kept: usize,
    /// Rows rejected.
    pub rejected: usize,
    /// Rejections per rule name (every rule listed, zeros included).
    pub rejected_by_rule: BTreeMap<String, usize>,
    /// Articles changed by the repair, over the kept rows.
    pub articles_repaired: usize,
    /// Kept rows with at least one repaired article.
    pub rows_repaired: usize,
    /// Every rejection, in line order.
    pub rejections: Vec<Rejection>,
}

impl ImportReport {
    fn new(source: &str) -> Self {
        Self {
            source: source.to_string(),
            rejected_by_rule: Rule::ALL
                .iter()
                .map(|r| (r.name().to_string(), 0))
                .collect(),
            ..Default::default()
        }
    }

    fn reject(&mut self, line: usize, v: Violation, id: Option<String>) {
        self.rejected += 1;
        *self
            .rejected_by_rule
            .entry(v.rule.name().to_string())
            .or_default() += 1;
        self.rejections.push(Rejection {
            line,
            rule: v.rule,
            message: v.message,
            id,
        });
    }
}

/// Duplicate detection over the rows of one or more sources.
#[derive(Debug, Default)]
pub struct Seen {
    ids: HashSet<String>,
    anchors: HashSet<String>,
}

/// Validates a sequence of already-parsed rows (`(line, row)`), e.g. the generator's output,
/// with duplicate detection through `seen`.
pub fn validate_rows(
    source: &str,
    rows: impl IntoIterator<Item = (usize, Example)>,
    seen: &mut Seen,
) -> (Vec<Example>, ImportReport) {
    let mut report = ImportReport::new(source);
    let mut kept = Vec::new();
    for (line, ex) in rows {
        report.rows += 1;
        accept(line, ex, seen, &mut report, &mut kept);
    }
    (kept, report)
}

fn accept(
    line: usize,
    ex: Example,
    seen: &mut Seen,
    report: &mut ImportReport,
    kept: &mut Vec<Example>,
) {
    let id = ex.id.clone();
    match validate(ex) {
        Err(v) => report.reject(line, v, Some(id)),
        Ok(valid) => {
            let ex = valid.example;
            let anchor_key = format!(
                "{}:{}",
                ex.construction,
                crate::words::word_strings(&ex.anchor).join(" ")
            );
            if seen.ids.contains(&ex.id) {
                report.reject(
                    line,
                    Violation {
                        rule: Rule::Duplicate,
                        message: format!("id '{}' seen before", ex.id),
                    },
                    Some(id),
                );
            } else if seen.anchors.contains(&anchor_key) {
                report.reject(
                    line,
                    Violation {
                        rule: Rule::Duplicate,
                        message: format!("anchor '{}' seen before", ex.anchor),
                    },
                    Some(id),
                );
            } else {
                seen.ids.insert(ex.id.clone());
                seen.anchors.insert(anchor_key);
                report.kept += 1;
                report.articles_repaired += valid.articles_repaired;
                report.rows_repaired += usize::from(valid.articles_repaired > 0);
                kept.push(ex);
            }
        }
    }
}

/// Parses and validates JSONL text.
pub fn import_str(source: &str, text: &str, seen: &mut Seen) -> (Vec<Example>, ImportReport) {
    let mut report = ImportReport::new(source);
    let mut kept = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            report.blank_lines += 1;
            continue;
        }
        report.rows += 1;
        let value: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                report.reject(
                    line_no,
                    Violation {
                        rule: Rule::Json,
                        message: format!("not valid JSON: {e}"),
                    },
                    None,
                );
                continue;
            }
        };
        if !value.is_object() {
            report.reject(
                line_no,
                Violation {
                    rule: Rule::Json,
                    message: "not a JSON object".into(),
                },
                None,
            );
            continue;
        }
        let id = value.get("id").and_then(|v| v.as_str()).map(str::to_string);
        let ex: Example = match serde_json::from_value(value) {
            Ok(ex) => ex,
            Err(e) => {
                report.reject(
                    line_no,
                    Violation {
                        rule: Rule::Schema,
                        message: e.to_string(),
                    },
                    id,
                );
                continue;
            }
        };
        accept(line_no, ex, seen, &mut report, &mut kept);
    }
    (kept, report)
}

/// Reads and validates a JSONL file, read by [`bindscope_data::textfile::read_text_file`]
/// (UTF-8, a leading byte-order mark removed and said on stderr).
///
/// # Errors
/// The file cannot be read, or is not UTF-8 (the message names the line); bad rows are not
/// errors: they are in the report.
pub fn import_file(path: &Path, seen: &mut Seen) -> std::io::Result<(Vec<Example>, ImportReport)> {
    use bindscope_data::textfile::{TextFileError, read_text_file};
    let file = read_text_file(path).map_err(|e| match &e {
        TextFileError::Io { source, .. } => std::io::Error::new(source.kind(), e.to_string()),
        TextFileError::NotUtf8 { .. } => {
            std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
        }
    })?;
    if let Some(note) = file.bom_note() {
        eprintln!("{note}");
    }
    Ok(import_str(&path.display().to_string(), &file.text, seen))
}
