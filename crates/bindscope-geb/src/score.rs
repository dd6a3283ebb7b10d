//! `geb score`: score a prediction file made anywhere, with lmms-eval 0.7.3's per-item metrics,
//! means over items and percentile-bootstrap intervals; with a second file on the same items,
//! the paired gap.
//!
//! The run writes into its `--out` directory (refused when it holds another run; see
//! [`bindscope_core::run::run_dir`]):
//! - `items.jsonl`: every input record with `score` (in [0, 1]) and, where the record named
//!   none, `category` added (keys in alphabetical order);
//! - `summary.json`: [`Summary`] — the overall score (mean over all items, not over sources),
//!   per category and per source, as percentages, each with its 95% interval; with a pair, the
//!   control's scores, the gaps `score − control` in percentage points and their intervals;
//! - `summary.csv`: the same table, two decimals;
//! - `config.json`: the run's identity (input hashes, seed, resamples, reasoning tags) and
//!   provenance;
//! - with `export_resamples`, `resamples/<kind>-<group>.safetensors`: the resample indices of
//!   every interval ([`crate::bootstrap::Resampler::export`]).
//!
//! Nothing is written when an input is refused.

use crate::bootstrap::{self, Interval, Kind};
use crate::metrics::{self, Category, LMMS_EVAL_VERSION, Source, reasoning::TagPair};
use crate::records::{self, Record, RecordsError};
use bindscope_core::run::{RunContext, RunError, run_dir, write_csv_table, write_json};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Settings of a `geb score` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreConfig {
    /// The prediction file (JSONL, [`crate::records`]).
    pub predictions: PathBuf,
    /// A second prediction file on the same ids (the control of a paired comparison).
    pub pair: Option<PathBuf>,
    /// The output directory.
    pub out: PathBuf,
    /// Resamples of each marginal interval (0: no intervals).
    pub resamples: usize,
    /// Resamples of each paired interval (0: no intervals).
    pub paired_resamples: usize,
    /// The bootstrap seed.
    pub seed: u64,
    /// Reasoning tag pairs stripped before scoring (`None`: no stripping).
    pub reasoning_tags: Option<Vec<TagPair>>,
    /// Also write every interval's resample indices.
    pub export_resamples: bool,
}

impl ScoreConfig {
    /// The defaults of the command line for `predictions` → `out`: 10,000 / 20,000 resamples,
    /// seed 20260722, lmms-eval's default reasoning tags.
    pub fn new(predictions: PathBuf, out: PathBuf) -> Self {
        Self {
            predictions,
            pair: None,
            out,
            resamples: bootstrap::MARGINAL_RESAMPLES,
            paired_resamples: bootstrap::PAIRED_RESAMPLES,
            seed: bootstrap::DEFAULT_SEED,
            reasoning_tags: Some(metrics::reasoning::default_tags()),
            export_resamples: false,
        }
    }
}

/// Why a `geb score` run failed.
#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    /// A prediction file was refused.
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// The two files do not hold the same items.
    #[error("--pair {pair}: {problem}; a paired comparison needs the same ids in both files")]
    Pair {
        /// The pair file.
        pair: PathBuf,
        /// What differs.
        problem: String,
    },
    /// The run directory or a result file.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Exporting resample indices.
    #[error("{0}")]
    Export(String),
}

/// An input file as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputFile {
    /// The path given.
    pub path: PathBuf,
    /// SHA-256 of its bytes, hex.
    pub sha256: String,
    /// Records read.
    pub items: usize,
}

/// One group's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupScore {
    /// `overall`, a category or a source name.
    pub name: String,
    /// Items in the group.
    pub items: usize,
    /// Mean item score, percent.
    pub score: f64,
    /// 95% percentile-bootstrap interval of the mean, percent (`None` without resamples).
    pub ci95: Option<[f64; 2]>,
}

/// One group's paired comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupGap {
    /// `overall`, a category or a source name.
    pub name: String,
    /// Items in the group.
    pub items: usize,
    /// Mean score of the predictions, percent.
    pub score: f64,
    /// Mean score of the pair (control), percent.
    pub control: f64,
    /// `score − control`, percentage points.
    pub gap: f64,
    /// 95% percentile-bootstrap interval of the gap over the same resampled items, points.
    pub ci95: Option<[f64; 2]>,
}

/// How the intervals were computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BootstrapSettings {
    /// `percentile`.
    pub method: String,
    /// Resamples of a marginal interval.
    pub resamples: usize,
    /// Resamples of a paired interval.
    pub paired_resamples: usize,
    /// The seed.
    pub seed: u64,
    /// The interval's percentiles.
    pub percentiles: [f64; 2],
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The metrics' reference: `lmms-eval 0.7.3`.
    pub reference: String,
    /// Reasoning tag pairs stripped before scoring (`null`: none).
    pub reasoning_tags: Option<Vec<TagPair>>,
    /// The prediction file.
    pub predictions: InputFile,
    /// The pair (control) file.
    pub pair: Option<InputFile>,
    /// The intervals' settings.
    pub bootstrap: BootstrapSettings,
    /// All items.
    pub overall: GroupScore,
    /// Per category present, in the order natural, scene_text, document.
    pub categories: Vec<GroupScore>,
    /// Per source present, in [`Source::ALL`] order.
    pub sources: Vec<GroupScore>,
    /// With a pair: the gaps, overall, per category, per source.
    pub paired: Option<PairedSummary>,
}

/// The paired part of [`Summary`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedSummary {
    /// All items.
    pub overall: GroupGap,
    /// Per category.
    pub categories: Vec<GroupGap>,
    /// Per source.
    pub sources: Vec<GroupGap>,
}

/// What a run returns.
#[derive(Debug, Clone)]
pub struct ScoreReport {
    /// The output directory.
    pub dir: PathBuf,
    /// The summary written.
    pub summary: Summary,
}

/// Python's `sum(values) / len(values)` (lmms-eval's `mean` aggregation): a running sum in
/// order.
fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

fn sha256_hex(path: &Path) -> Result<String, ScoreError> {
    let bytes = std::fs::read(path).map_err(|source| {
        ScoreError::Run(RunError::Io {
            context: format!("reading {}", path.display()),
            source,
        })
    })?;
    Ok(format!("{:x}", sha2::Sha256::digest(&bytes)))
}

/// A group of items: its name, its stable stream number, the indices of its items.
struct Group {
    name: String,
    stream: u64,
    items: Vec<usize>,
}

/// The overall group, then the categories and the sources present (stream numbers: 0
/// overall, 1 + category, 16 + source).
fn groups(records: &[Record]) -> (Group, Vec<Group>, Vec<Group>) {
    let overall = Group {
        name: "overall".into(),
        stream: 0,
        items: (0..records.len()).collect(),
    };
    let group = |name: &str, stream: u64, member: &dyn Fn(&Record) -> bool| Group {
        name: name.into(),
        stream,
        items: (0..records.len())
            .filter(|&i| member(&records[i]))
            .collect(),
    };
    let cats = Category::ALL
        .iter()
        .enumerate()
        .map(|(k, &c)| group(c.name(), 1 + k as u64, &|r| r.category == c))
        .filter(|g| !g.items.is_empty())
        .collect();
    let sources = Source::ALL
        .iter()
        .enumerate()
        .map(|(k, &s)| group(s.name(), 16 + k as u64, &|r| r.source == s))
        .filter(|g| !g.items.is_empty())
        .collect();
    (overall, cats, sources)
}

fn pct(i: Interval) -> [f64; 2] {
    [i.lo * 100.0, i.hi * 100.0]
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Marginal => "marginal",
        Kind::Paired => "paired",
    }
}

/// Scores `config.predictions` (and `config.pair`) and writes the run directory.
///
/// # Errors
/// [`ScoreError`]: a refused input (every bad line named), a pair file whose ids differ, an
/// `--out` holding another run, an I/O error. Inputs are checked before anything is written.
pub fn run(config: &ScoreConfig, ctx: &RunContext) -> Result<ScoreReport, ScoreError> {
    let tags = config.reasoning_tags.as_deref();
    let records = records::read_predictions(&config.predictions)?;
    let scores = score_records(&records, tags);
    let pair = match &config.pair {
        None => None,
        Some(path) => {
            let other = records::read_predictions(path)?;
            let aligned = align(path, &records, other)?;
            let other_scores = score_records(&aligned, tags);
            Some((path.clone(), aligned, other_scores))
        }
    };
    let predictions = InputFile {
        path: config.predictions.clone(),
        sha256: sha256_hex(&config.predictions)?,
        items: records.len(),
    };
    let pair_file = match &pair {
        Some((path, recs, _)) => Some(InputFile {
            path: path.clone(),
            sha256: sha256_hex(path)?,
            items: recs.len(),
        }),
        None => None,
    };

    let identity = serde_json::json!({
        "command": "geb score",
        "reference": format!("lmms-eval {LMMS_EVAL_VERSION}"),
        "predictions_sha256": predictions.sha256,
        "pair_sha256": pair_file.as_ref().map(|p| p.sha256.clone()),
        "reasoning_tags": config.reasoning_tags,
        "seed": config.seed,
        "resamples": config.resamples,
        "paired_resamples": config.paired_resamples,
    });
    let dir = run_dir("geb", "score", Some(config.out.clone()), &identity, false)?;
    let export_dir = dir.join("resamples");
    if config.export_resamples {
        std::fs::create_dir_all(&export_dir).map_err(|source| RunError::Io {
            context: format!("creating {}", export_dir.display()),
            source,
        })?;
    }
    let export = |kind: Kind, g: &Group, resamples: usize| -> Result<(), ScoreError> {
        if !config.export_resamples || resamples == 0 {
            return Ok(());
        }
        let path = export_dir.join(format!("{}-{}.safetensors", kind_name(kind), g.name));
        bootstrap::resampler(config.seed, kind, g.stream, g.items.len(), resamples)
            .export(&path)
            .map_err(ScoreError::Export)
    };

    let (overall, cats, sources) = groups(&records);
    let marginal = |g: &Group| -> Result<GroupScore, ScoreError> {
        let s: Vec<f64> = g.items.iter().map(|&i| scores[i]).collect();
        let ci95 = (config.resamples > 0).then(|| {
            pct(bootstrap::resampler(
                config.seed,
                Kind::Marginal,
                g.stream,
                s.len(),
                config.resamples,
            )
            .marginal(&s))
        });
        export(Kind::Marginal, g, config.resamples)?;
        Ok(GroupScore {
            name: g.name.clone(),
            items: s.len(),
            score: mean(&s) * 100.0,
            ci95,
        })
    };
    let overall_score = marginal(&overall)?;
    let category_scores = cats.iter().map(marginal).collect::<Result<Vec<_>, _>>()?;
    let source_scores = sources
        .iter()
        .map(marginal)
        .collect::<Result<Vec<_>, _>>()?;

    let paired = match &pair {
        None => None,
        Some((_, _, other)) => {
            let gap = |g: &Group| -> Result<GroupGap, ScoreError> {
                let a: Vec<f64> = g.items.iter().map(|&i| scores[i]).collect();
                let b: Vec<f64> = g.items.iter().map(|&i| other[i]).collect();
                let ci95 = (config.paired_resamples > 0).then(|| {
                    pct(bootstrap::resampler(
                        config.seed,
                        Kind::Paired,
                        g.stream,
                        a.len(),
                        config.paired_resamples,
                    )
                    .paired(&a, &b))
                });
                export(Kind::Paired, g, config.paired_resamples)?;
                let (sa, sb) = (mean(&a) * 100.0, mean(&b) * 100.0);
                Ok(GroupGap {
                    name: g.name.clone(),
                    items: a.len(),
                    score: sa,
                    control: sb,
                    gap: sa - sb,
                    ci95,
                })
            };
            Some(PairedSummary {
                overall: gap(&overall)?,
                categories: cats.iter().map(gap).collect::<Result<Vec<_>, _>>()?,
                sources: sources.iter().map(gap).collect::<Result<Vec<_>, _>>()?,
            })
        }
    };

    let summary = Summary {
        reference: format!("lmms-eval {LMMS_EVAL_VERSION}"),
        reasoning_tags: config.reasoning_tags.clone(),
        predictions,
        pair: pair_file,
        bootstrap: BootstrapSettings {
            method: "percentile".into(),
            resamples: config.resamples,
            paired_resamples: config.paired_resamples,
            seed: config.seed,
            percentiles: bootstrap::PERCENTILES,
        },
        overall: overall_score,
        categories: category_scores,
        sources: source_scores,
        paired,
    };

    let mut lines = String::new();
    for (r, &s) in records.iter().zip(&scores) {
        let mut fields = r.fields.clone();
        fields
            .entry("category")
            .or_insert_with(|| r.category.name().into());
        fields.insert("score".into(), s.into());
        lines.push_str(&serde_json::Value::Object(fields).to_string());
        lines.push('\n');
    }
    let items_path = dir.join("items.jsonl");
    bindscope_core::fsutil::write_atomic(&items_path, lines.as_bytes()).map_err(|source| {
        RunError::Io {
            context: format!("writing {}", items_path.display()),
            source,
        }
    })?;
    write_json(&dir.join("summary.json"), &summary)?;
    let (header, rows) = csv_table(&summary);
    write_csv_table(&dir.join("summary.csv"), &header, &rows)?;
    let mut cfg = serde_json::json!({
        "study": "geb",
        "identity": identity,
        "config": config,
    });
    cfg = ctx.config_json_no_device(cfg);
    write_json(&dir.join("config.json"), &cfg)?;
    Ok(ScoreReport { dir, summary })
}

/// The per-item scores of `records` (already checked, so scoring cannot fail).
fn score_records(records: &[Record], tags: Option<&[TagPair]>) -> Vec<f64> {
    records
        .iter()
        .map(|r| metrics::score(&r.item(), tags).expect("records are checked when read"))
        .collect()
}

/// The pair's records in the order of `records`, refusing a different set of ids or an item
/// whose source differs.
fn align(path: &Path, records: &[Record], other: Vec<Record>) -> Result<Vec<Record>, ScoreError> {
    let err = |problem: String| ScoreError::Pair {
        pair: path.to_path_buf(),
        problem,
    };
    let mut by_key: HashMap<String, Record> =
        other.into_iter().map(|r| (r.key.clone(), r)).collect();
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let Some(o) = by_key.remove(&r.key) else {
            return Err(err(format!(
                "id {} (line {} of the predictions) is missing",
                r.id, r.line
            )));
        };
        if o.source != r.source {
            return Err(err(format!(
                "id {} is {} here (line {}) but {} in the predictions",
                r.id,
                o.source.name(),
                o.line,
                r.source.name()
            )));
        }
        out.push(o);
    }
    if let Some(extra) = by_key.values().min_by_key(|r| r.line) {
        return Err(err(format!(
            "{} id(s) are not in the predictions, e.g. {} (line {})",
            by_key.len(),
            extra.id,
            extra.line
        )));
    }
    Ok(out)
}

fn two(v: f64) -> String {
    format!("{v:.2}")
}

/// The rows of `summary.csv` (and of the printed table): `scope, name, items, score, ci_lo,
/// ci_hi`, and with a pair `control, gap, gap_lo, gap_hi`; two decimals.
fn csv_table(summary: &Summary) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let mut header = vec!["scope", "name", "items", "score", "ci_lo", "ci_hi"];
    if summary.paired.is_some() {
        header.extend(["control", "gap", "gap_lo", "gap_hi"]);
    }
    let ci = |c: Option<[f64; 2]>| match c {
        Some([lo, hi]) => [two(lo), two(hi)],
        None => [String::new(), String::new()],
    };
    let mut rows = Vec::new();
    let scoped = std::iter::once(("overall", &summary.overall))
        .chain(summary.categories.iter().map(|g| ("category", g)))
        .chain(summary.sources.iter().map(|g| ("source", g)));
    let gaps: Vec<&GroupGap> = match &summary.paired {
        Some(p) => std::iter::once(&p.overall)
            .chain(&p.categories)
            .chain(&p.sources)
            .collect(),
        None => Vec::new(),
    };
    for (k, (scope, g)) in scoped.enumerate() {
        let [lo, hi] = ci(g.ci95);
        let mut row = vec![
            scope.to_string(),
            g.name.clone(),
            g.items.to_string(),
            two(g.score),
            lo,
            hi,
        ];
        if let Some(p) = gaps.get(k) {
            let [glo, ghi] = ci(p.ci95);
            row.extend([two(p.control), two(p.gap), glo, ghi]);
        }
        rows.push(row);
    }
    (header, rows)
}

/// The console table of a summary: one row per group, percentages with two decimals.
pub fn table(summary: &Summary) -> String {
    let (_, rows) = csv_table(summary);
    let paired = summary.paired.is_some();
    let mut out = format!(
        "GEB scores ({}; {} items; 95% percentile bootstrap, {} resamples{}, seed {})\n",
        summary.reference,
        summary.overall.items,
        summary.bootstrap.resamples,
        if paired {
            format!(", {} paired", summary.bootstrap.paired_resamples)
        } else {
            String::new()
        },
        summary.bootstrap.seed
    );
    out.push_str(&format!(
        "{:<14} {:>6} {:>7}  {:<16}",
        "group", "items", "score", "95% CI"
    ));
    if paired {
        out.push_str(&format!(
            " {:>7} {:>7}  {:<16}",
            "control", "gap", "gap 95% CI"
        ));
    }
    out.push('\n');
    for r in rows {
        let indent = if r[0] == "overall" { "" } else { "  " };
        let ci = if r[4].is_empty() {
            "-".to_string()
        } else {
            format!("[{}, {}]", r[4], r[5])
        };
        out.push_str(&format!(
            "{:<14} {:>6} {:>7}  {:<16}",
            format!("{indent}{}", r[1]),
            r[2],
            r[3],
            ci
        ));
        if paired {
            let gci = if r[8].is_empty() {
                "-".to_string()
            } else {
                format!("[{}, {}]", r[8], r[9])
            };
            out.push_str(&format!(" {:>7} {:>7}  {:<16}", r[6], r[7], gci));
        }
        out.push('\n');
    }
    out.trim_end_matches(' ').to_string()
}
