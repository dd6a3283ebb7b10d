//! Training conversations in the LLaVA format (the LLaVA-NeXT 738K release):
//!
//! ```json
//! [{"id": "…", "image": "relative/path.jpg",
//!   "conversations": [{"from": "human", "value": "<image>\nQuestion?"},
//!                     {"from": "gpt", "value": "Answer."}, …]}]
//! ```
//!
//! Turns alternate `human` / `gpt`, starting with `human` and ending with `gpt`; the `<image>`
//! placeholder appears exactly once, in the first human turn. As LLaVA's
//! `preprocess_multimodal` does (`mm_use_im_start_end = False`), the placeholder is moved to
//! the front of that turn wherever it stands: the turn becomes `<image>\n` + the rest with the
//! placeholder removed and `str.strip()`-ped; the readout then puts its embedding slots where
//! the placeholder is ([`super::chat`]).
//!
//! The file is checked as a whole: every bad conversation is named (by position and `id`, the
//! first 20 listed) and nothing is returned when any is bad, so no conversation is skipped
//! silently.

use std::path::Path;

use serde_json::Value;

/// LLaVA's image placeholder.
pub const IMAGE_TOKEN: &str = "<image>";

/// One question and its answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Turn {
    /// The human turn's text (the first turn's without the placeholder).
    pub question: String,
    /// The gpt turn's text.
    pub answer: String,
}

/// One training conversation about one image.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Conversation {
    /// The record's `id`.
    pub id: String,
    /// The record's `image`, relative to the image root.
    pub image: String,
    /// The turns in order.
    pub turns: Vec<Turn>,
}

/// Why a conversation file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConversationError {
    /// The file could not be read or is not a JSON array.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Some conversations are malformed; nothing was read.
    #[error("{path}: {count} of {total} conversations are malformed (nothing was read):\n{}", shown.join("\n"))]
    Items {
        /// The file.
        path: String,
        /// How many are bad.
        count: usize,
        /// How many the file holds.
        total: usize,
        /// The first 20, each `conversation N (id …): problem`.
        shown: Vec<String>,
    },
}

/// The most bad conversations an error lists.
const SHOWN: usize = 20;

/// Python's `str.strip()` (the Unicode whitespace set).
fn py_strip(s: &str) -> &str {
    crate::pystr::strip(s)
}

/// Checks one record and returns it as a [`Conversation`], or the problem in the file's terms.
pub fn parse_record(record: &Value) -> Result<Conversation, String> {
    let obj = record
        .as_object()
        .ok_or_else(|| format!("expected an object, found {}", kind(record)))?;
    let text = |key: &str| -> Result<String, String> {
        match obj.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::String(_)) => Err(format!("`{key}` is empty")),
            Some(v) => Err(format!("`{key}` must be a string, found {}", kind(v))),
            None => Err(format!("no `{key}`")),
        }
    };
    let id = text("id")?;
    let image = text("image")?;
    let turns = match obj.get("conversations") {
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(format!(
                "`conversations` must be an array, found {}",
                kind(v)
            ));
        }
        None => return Err("no `conversations`".into()),
    };
    for (i, t) in turns.iter().enumerate() {
        match t.get("from").and_then(Value::as_str) {
            Some("human" | "gpt") => {}
            Some(other) => {
                return Err(format!(
                    "turn {i}: `from` is {other:?}; expected \"human\" or \"gpt\""
                ));
            }
            None => return Err(format!("turn {i}: `from` must be \"human\" or \"gpt\"")),
        }
    }
    if !turns
        .iter()
        .any(|t| t.get("from") == Some(&Value::from("human")))
    {
        return Err("no human turn".into());
    }
    let mut placeholders = 0usize;
    let mut out = Vec::new();
    let mut question: Option<String> = None;
    for (i, t) in turns.iter().enumerate() {
        let from = t
            .get("from")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("turn {i}: `from` must be \"human\" or \"gpt\""))?;
        let value = t
            .get("value")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("turn {i}: `value` must be a string"))?;
        placeholders += value.matches(IMAGE_TOKEN).count();
        let want = if i % 2 == 0 { "human" } else { "gpt" };
        if from != want {
            return Err(format!(
                "turn {i} is from \"{from}\": turns must alternate human, gpt, … starting with human"
            ));
        }
        if from == "human" {
            if i > 0 && value.contains(IMAGE_TOKEN) {
                return Err(format!(
                    "turn {i}: `{IMAGE_TOKEN}` must appear only in the first human turn"
                ));
            }
            question = Some(if i == 0 {
                py_strip(&value.replace(IMAGE_TOKEN, "")).to_string()
            } else {
                value.to_string()
            });
        } else {
            let q = question.take().unwrap_or_default();
            out.push(Turn {
                question: q,
                answer: value.to_string(),
            });
        }
    }
    match placeholders {
        0 => return Err(format!("no `{IMAGE_TOKEN}` in the first human turn")),
        1 => {}
        n => return Err(format!("`{IMAGE_TOKEN}` appears {n} times (expected once)")),
    }
    if question.is_some() {
        return Err("ends with a human turn (every question needs a gpt answer)".into());
    }
    Ok(Conversation {
        id,
        image,
        turns: out,
    })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads a LLaVA-format file (module docs).
///
/// # Errors
/// [`ConversationError::File`] for an unreadable file, invalid JSON, a non-array top level or an
/// empty array; [`ConversationError::Items`] naming every malformed conversation (also a
/// repeated `id`).
pub fn read_llava(path: &Path) -> Result<Vec<Conversation>, ConversationError> {
    let p = path.display().to_string();
    let file = |message: String| ConversationError::File {
        path: p.clone(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| file(e.to_string()))?;
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| file(format!("not valid JSON: {e}")))?;
    let Value::Array(records) = value else {
        return Err(file(format!(
            "expected a JSON array of conversations, found {}",
            kind(&value)
        )));
    };
    if records.is_empty() {
        return Err(file("no conversations".into()));
    }
    let mut seen = std::collections::HashMap::new();
    let mut bad = Vec::new();
    let mut out = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let label = match r.get("id").and_then(Value::as_str) {
            Some(id) => format!("conversation {i} (id {id:?})"),
            None => format!("conversation {i}"),
        };
        match parse_record(r) {
            Ok(c) => {
                if let Some(first) = seen.insert(c.id.clone(), i) {
                    bad.push(format!("{label}: repeats the id of conversation {first}"));
                } else {
                    out.push(c);
                }
            }
            Err(e) => bad.push(format!("{label}: {e}")),
        }
    }
    if !bad.is_empty() {
        return Err(ConversationError::Items {
            path: p,
            count: bad.len(),
            total: records.len(),
            shown: bad.into_iter().take(SHOWN).collect(),
        });
    }
    Ok(out)
}
