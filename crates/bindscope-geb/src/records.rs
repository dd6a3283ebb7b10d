//! Prediction files: one JSON object per line, read and checked as a whole before anything is
//! scored or written.
//!
//! | field | type | |
//! |---|---|---|
//! | `id` | string or integer | unique in the file |
//! | `source` | string | `mme`, `cvbench`, `realworldqa`, `ocrbench`, `textvqa`, `chartqa`, `docvqa`, `infovqa` |
//! | `prediction` | string | the model's response, as generated |
//! | `answers` | list of strings, not empty | the gold first for `mme` (`Yes`/`No`), `cvbench` (`(A)`), `realworldqa`, `chartqa` (only the first is scored); all ten for `textvqa`; every accepted answer for `ocrbench`, `docvqa`, `infovqa` |
//! | `question` | string | optional |
//! | `category` | string | optional: `natural`, `scene_text`, `document`; default by source ([`Source::default_category`]) |
//! | `dataset` | string | optional, `ocrbench` only: `HME100k` selects the math-expression rule |
//!
//! Any other field (model, mode, condition, …) is carried into the scored records unchanged.
//! Blank lines are skipped. Every problem is reported with its line (the first 20 of them), and
//! nothing is scored when there is one.

use crate::metrics::{self, Category, Item, Source};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A checked prediction record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// 1-based line in its file.
    pub line: usize,
    /// The id as written (string or integer).
    pub id: Value,
    /// The id as a string (the key that matches records of two files).
    pub key: String,
    /// The source task.
    pub source: Source,
    /// The category (given, or the source's default).
    pub category: Category,
    /// The response.
    pub prediction: String,
    /// The references.
    pub answers: Vec<String>,
    /// OCRBench's `dataset`.
    pub dataset: Option<String>,
    /// The whole input object, every field as written.
    pub fields: Map<String, Value>,
}

impl Record {
    /// The record as a scorer sees it.
    pub fn item(&self) -> Item<'_> {
        Item {
            source: self.source,
            prediction: &self.prediction,
            answers: &self.answers,
            dataset: self.dataset.as_deref(),
        }
    }
}

/// Why a prediction file was refused.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// The file could not be read or is not UTF-8.
    #[error(transparent)]
    Read(#[from] bindscope_data::textfile::TextFileError),
    /// The file holds no record.
    #[error("{0}: no prediction records (the file is empty or only blank lines)")]
    Empty(PathBuf),
    /// Lines that break the format.
    #[error("{path}: {count} bad line(s); nothing was scored or written:\n{lines}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// How many problems.
        count: usize,
        /// The first problems, one per line, `line N: …`.
        lines: String,
    },
}

/// How many problems an error lists.
const SHOWN: usize = 20;

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Checks one line's object. `Err` is the problem, without the line number.
fn parse_record(line: usize, text: &str) -> Result<Record, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON ({e})"))?;
    let Value::Object(fields) = value else {
        return Err(format!(
            "expected a JSON object, found {}",
            type_name(&value)
        ));
    };
    let field = |name: &str| fields.get(name);
    let id = match field("id") {
        None => return Err("missing field `id`".into()),
        Some(v @ Value::String(_)) => v.clone(),
        Some(v @ Value::Number(n)) if n.is_i64() || n.is_u64() => v.clone(),
        Some(v) => {
            return Err(format!(
                "`id` must be a string or an integer, found {}",
                type_name(v)
            ));
        }
    };
    let key = match &id {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let string = |name: &str, required: bool| -> Result<Option<String>, String> {
        match field(name) {
            None if required => Err(format!("missing field `{name}`")),
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(format!("`{name}` must be a string, found {}", type_name(v))),
        }
    };
    let source_name = string("source", true)?.expect("required");
    let source = Source::from_name(&source_name).ok_or_else(|| {
        format!(
            "unknown source {source_name:?}; expected one of {}",
            Source::ALL.map(Source::name).join(", ")
        )
    })?;
    let prediction = string("prediction", true)?.expect("required");
    let answers = match field("answers") {
        None => return Err("missing field `answers`".into()),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                v => Err(format!(
                    "`answers[{i}]` must be a string, found {}",
                    type_name(v)
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(v) => {
            return Err(format!(
                "`answers` must be a list of strings, found {}",
                type_name(v)
            ));
        }
    };
    string("question", false)?;
    let category = match string("category", false)? {
        None => source.default_category(),
        Some(c) => Category::from_name(&c).ok_or_else(|| {
            format!(
                "unknown category {c:?}; expected one of {}",
                Category::ALL.map(Category::name).join(", ")
            )
        })?,
    };
    let dataset = string("dataset", false)?;
    let record = Record {
        line,
        id,
        key,
        source,
        category,
        prediction,
        answers,
        dataset,
        fields,
    };
    metrics::check(&record.item()).map_err(|e| e.to_string())?;
    Ok(record)
}

/// Parses the text of a prediction file (`path` names it in errors).
///
/// # Errors
/// [`RecordsError::Empty`], or [`RecordsError::Invalid`] listing each bad line (JSON, missing or
/// mistyped fields, unknown source or category, an item lmms-eval cannot score, a duplicate id
/// with the line of its first use).
pub fn parse_predictions(path: &Path, text: &str) -> Result<Vec<Record>, RecordsError> {
    let mut records = Vec::new();
    let mut problems = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if crate::pystr::strip(line).is_empty() {
            continue;
        }
        match parse_record(n, line) {
            Ok(r) => {
                if let Some(first) = seen.get(&r.key) {
                    problems.push(format!(
                        "line {n}: duplicate id {} (first on line {first})",
                        r.id
                    ));
                } else {
                    seen.insert(r.key.clone(), n);
                    records.push(r);
                }
            }
            Err(e) => problems.push(format!("line {n}: {e}")),
        }
    }
    if !problems.is_empty() {
        let mut lines = problems
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        if problems.len() > SHOWN {
            lines.push_str(&format!("\n… and {} more", problems.len() - SHOWN));
        }
        return Err(RecordsError::Invalid {
            path: path.to_path_buf(),
            count: problems.len(),
            lines,
        });
    }
    if records.is_empty() {
        return Err(RecordsError::Empty(path.to_path_buf()));
    }
    Ok(records)
}

/// Reads and checks a prediction file ([`parse_predictions`]).
///
/// # Errors
/// [`RecordsError`], naming the file (and line).
pub fn read_predictions(path: &Path) -> Result<Vec<Record>, RecordsError> {
    let file = bindscope_data::textfile::read_text_file(path)?;
    parse_predictions(path, &file.text)
}
