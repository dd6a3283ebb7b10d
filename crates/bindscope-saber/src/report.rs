//! The run directory of `experiments saber eval`:
//!
//! | file | content |
//! |---|---|
//! | `config.json` | everything the numbers depend on (written by the caller) |
//! | `results.json` | input summary (rows read, rejected rows with line and rule, image coverage), every pairing's [`PairingResults`](crate::eval::PairingResults) per `N` and overall, timings |
//! | `per_n.csv` | one row per pairing and `N` (and `all`): the headline numbers |
//! | `items.jsonl` | one row per item and pairing ([`ItemRow`](crate::eval::ItemRow)) |
//!
//! Every file is written atomically.

use crate::SaberError;
use crate::embed::ImageCoverage;
use crate::eval::{Breakdown, EvalOutput};
use crate::jsonl::{Rejection, write_jsonl};
use std::path::Path;

/// Where the items came from and what was rejected.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InputSummary {
    /// `generated (seed 42)` or the JSONL path.
    pub source: String,
    /// Non-blank rows read (or items generated).
    pub rows: usize,
    /// Items evaluated.
    pub accepted: usize,
    /// Number of rejected rows.
    pub rejected_count: usize,
    /// Each rejected row: line, rule, message.
    pub rejected: Vec<Rejection>,
    /// Images found, missing and unreadable (when an images folder was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageCoverage>,
}

/// The columns of `per_n.csv`.
pub const PER_N_COLUMNS: [&str; 24] = [
    "pairing",
    "n",
    "items",
    "mcq_accuracy",
    "mcq_accuracy_independent",
    "mcq_accuracy_chain",
    "win_bind",
    "win_attr_perm",
    "win_obj_perm",
    "win_both_perm",
    "win_replace",
    "map_independent",
    "map_nested",
    "hit1_independent",
    "hit1_nested",
    "mean_exact_rank_independent",
    "subset_queries",
    "subset_pairs",
    "subset_above_rate",
    "subset_query_rate",
    "superset_queries",
    "superset_pairs",
    "superset_above_rate",
    "superset_query_rate",
];

/// A rate with 6 decimals; empty when undefined.
fn f(x: Option<f64>) -> String {
    x.map_or_else(String::new, |v| format!("{v:.6}"))
}

/// One record of `per_n.csv` ([`PER_N_COLUMNS`]).
fn csv_row(pairing: &str, b: &Breakdown) -> Vec<String> {
    let n = b.n.map_or_else(|| "all".to_string(), |n| n.to_string());
    let win = |k: &str| -> String {
        match (b.mcq.wins.get(k), b.mcq.items) {
            (Some(w), items) if items > 0 => format!("{:.6}", w / items as f64),
            _ => String::new(),
        }
    };
    let c = &b.containment;
    vec![
        pairing.to_string(),
        n,
        b.mcq.items.to_string(),
        f(b.mcq.accuracy),
        f(b.mcq_independent.accuracy),
        f(b.mcq_chain.accuracy),
        win("bind"),
        win("attr_perm"),
        win("obj_perm"),
        win("both_perm"),
        win("replace"),
        f(b.retrieval_independent.map),
        f(b.retrieval_nested.map),
        f(b.retrieval_independent.hit_at_1),
        f(b.retrieval_nested.hit_at_1),
        f(b.retrieval_independent.mean_exact_rank),
        c.subset.queries_with.to_string(),
        c.subset.pairs.to_string(),
        f(c.subset.pair_rate),
        f(c.subset.query_rate),
        c.superset.queries_with.to_string(),
        c.superset.pairs.to_string(),
        f(c.superset.pair_rate),
        f(c.superset.query_rate),
    ]
}

/// The records of `per_n.csv`: per pairing, one row per `N` then the `all` row.
pub fn per_n_rows(out: &EvalOutput) -> Vec<Vec<String>> {
    out.pairings
        .iter()
        .flat_map(|p| {
            p.by_n
                .iter()
                .chain(std::iter::once(&p.overall))
                .map(|b| csv_row(&p.pairing, b))
        })
        .collect()
}

/// Writes `per_n.csv` atomically through the `csv` crate (quoted where a field needs it).
///
/// # Errors
/// [`SaberError::Invalid`] with the writer's message, which names the file.
pub fn write_per_n_csv(path: &Path, out: &EvalOutput) -> Result<(), SaberError> {
    bindscope_core::run::write_csv_table(path, &PER_N_COLUMNS, &per_n_rows(out))
        .map_err(|e| SaberError::Invalid(e.to_string()))
}

fn write_json(path: &Path, v: &serde_json::Value) -> Result<(), SaberError> {
    let text =
        serde_json::to_string_pretty(v).map_err(|e| SaberError::Invalid(e.to_string()))? + "\n";
    bindscope_core::fsutil::write_atomic(path, text.as_bytes()).map_err(|e| SaberError::io(path, e))
}

/// Writes `config.json`, `results.json`, `per_n.csv` and `items.jsonl` into `dir` (created).
///
/// # Errors
/// [`SaberError::Io`] naming the file.
pub fn write_run(
    dir: &Path,
    config: &serde_json::Value,
    input: &InputSummary,
    out: &EvalOutput,
    timings: &serde_json::Value,
) -> Result<(), SaberError> {
    std::fs::create_dir_all(dir).map_err(|e| SaberError::io(dir, e))?;
    write_json(&dir.join("config.json"), config)?;
    let results = serde_json::json!({
        "input": input,
        "pairings": out.pairings,
        "timings_s": timings,
        "definitions": {
            "mcq_accuracy": "mean credit: 1 if candidate 1 scores strictly highest of the four, 1/k if tied with k-1 others at the top; chance 0.25",
            "average_precision": "(1/|R|) * sum over relevant r of #{relevant with score >= s_r} / #{gallery items with score >= s_r}; equals the mean of precision@rank over relevant items without ties and sklearn's average_precision_score with ties",
            "relevant_independent": "the query's own candidate 1",
            "relevant_nested": "candidate 1 of the query's chain step and of every later step of the same chain",
            "containment": "subset/superset candidates: gallery candidates whose (attribute, object) binding set is a strict subset/superset of the query's; above = scores strictly higher than the query's own candidate 1",
        },
    });
    write_json(&dir.join("results.json"), &results)?;
    write_per_n_csv(&dir.join("per_n.csv"), out)?;
    write_jsonl(&dir.join("items.jsonl"), &out.rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::PairingResults;

    /// `per_n.csv` is written by the `csv` crate: a field with a comma or a quote is quoted,
    /// so every record has the header's columns when read back.
    #[test]
    fn per_n_csv_quotes_what_needs_quoting() {
        let dir = tempfile::tempdir().unwrap();
        let out = EvalOutput {
            pairings: vec![PairingResults {
                pairing: "text->text, \"odd\"".into(),
                items: 0,
                items_missing_embeddings: 0,
                gallery: 0,
                by_n: vec![Breakdown {
                    n: Some(2),
                    ..Default::default()
                }],
                overall: Breakdown::default(),
            }],
            rows: Vec::new(),
        };
        let path = dir.path().join("per_n.csv");
        write_per_n_csv(&path, &out).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("pairing,n,items,mcq_accuracy,"), "{text}");
        assert!(text.contains("\"text->text, \"\"odd\"\"\",2,0,"), "{text}");
        let mut r = csv::Reader::from_path(&path).unwrap();
        let records: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        assert!(records.iter().all(|rec| rec.len() == PER_N_COLUMNS.len()));
        assert_eq!(&records[0][0], "text->text, \"odd\"");
        assert_eq!(&records[1][1], "all");
    }
}
