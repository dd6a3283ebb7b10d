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
use std::fmt::Write as _;
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

/// Header of `per_n.csv`.
pub const CSV_HEADER: &str = "pairing,n,items,mcq_accuracy,mcq_accuracy_independent,mcq_accuracy_chain,\
win_bind,win_attr_perm,win_obj_perm,win_both_perm,win_replace,\
map_independent,map_nested,hit1_independent,hit1_nested,mean_exact_rank_independent,\
subset_queries,subset_pairs,subset_above_rate,subset_query_rate,\
superset_queries,superset_pairs,superset_above_rate,superset_query_rate";

fn f(x: Option<f64>) -> String {
    x.map_or_else(String::new, |v| format!("{v:.6}"))
}

fn csv_row(out: &mut String, pairing: &str, b: &Breakdown) {
    let n = b.n.map_or_else(|| "all".to_string(), |n| n.to_string());
    let win = |k: &str| -> String {
        match (b.mcq.wins.get(k), b.mcq.items) {
            (Some(w), items) if items > 0 => format!("{:.6}", w / items as f64),
            _ => String::new(),
        }
    };
    let c = &b.containment;
    let _ = writeln!(
        out,
        "{pairing},{n},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        b.mcq.items,
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
        c.subset.queries_with,
        c.subset.pairs,
        f(c.subset.pair_rate),
        f(c.subset.query_rate),
        c.superset.queries_with,
        c.superset.pairs,
        f(c.superset.pair_rate),
        f(c.superset.query_rate),
    );
}

/// `per_n.csv`: per pairing, one row per `N` then the `all` row.
pub fn per_n_csv(out: &EvalOutput) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for p in &out.pairings {
        for b in p.by_n.iter().chain(std::iter::once(&p.overall)) {
            csv_row(&mut s, &p.pairing, b);
        }
    }
    s
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
    let csv = per_n_csv(out);
    let p = dir.join("per_n.csv");
    bindscope_core::fsutil::write_atomic(&p, csv.as_bytes()).map_err(|e| SaberError::io(&p, e))?;
    write_jsonl(&dir.join("items.jsonl"), &out.rows)
}
