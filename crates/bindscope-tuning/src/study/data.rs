//! `finetune data`: generate and/or import triplet examples, validate, split, and write a data
//! directory:
//!
//! - `generated.jsonl`: the generator's examples as generated (when `per_type > 0`);
//! - `rejected.jsonl`: every rejected row (`source`, `line`, `rule`, `message`, `id`);
//! - `splits/<name>.jsonl`: the kept examples of each split ([`Splits::named`]);
//! - `data_report.json`: the [`Report`] with the run's provenance (no device).
//!
//! A data directory is never overwritten, and a failed run leaves none behind.

use crate::example::Example;
use crate::generate::{GeneratorConfig, GeneratorStats, generate};
use crate::import::{ImportReport, Seen, import_file, validate_rows};
use crate::split::{Splits, split};
use crate::vocab::TemplateVocab;
use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::run::{Output, RunContext, runs_root, timestamp, write_json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What `finetune data` makes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Config {
    /// The template generator; `per_type == 0`: no generated examples.
    pub generator: GeneratorConfig,
    /// External JSONL files, imported after the generated examples.
    pub imports: Vec<PathBuf>,
    /// Seed of the split ([`split`]).
    pub split_seed: u64,
}

impl Config {
    /// Generated examples only: `per_type` per construction type, `seed` for the generator and
    /// the split, every other generator setting at its default.
    pub fn generated(per_type: usize, seed: u64) -> Self {
        Self {
            generator: GeneratorConfig {
                seed,
                per_type,
                ..Default::default()
            },
            imports: Vec::new(),
            split_seed: seed,
        }
    }

    fn generates(&self) -> bool {
        self.generator.per_type > 0
    }
}

/// The rule [`split`] applies, as `data_report.json` states it.
pub const SPLIT_RULE: &str = "80/10/10 per trainable type (seeded shuffle of ids); deferred_bind_anaphoric and deferred_bind_respective held out entirely";

/// The size of one split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SplitSize {
    /// Examples.
    pub examples: usize,
    /// Triplets (two per example).
    pub triplets: usize,
}

/// What a data run kept and rejected: the contents of `data_report.json` (its provenance
/// aside), and the splits themselves.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The generator's settings, `None` when nothing was generated.
    pub generator: Option<GeneratorConfig>,
    /// The generator's counts, `None` when nothing was generated.
    pub generator_stats: Option<GeneratorStats>,
    /// One report per source (the generator first, then each import), without the rejections
    /// themselves (those are in `rejected.jsonl`).
    #[serde(serialize_with = "without_rejections")]
    pub imports: Vec<ImportReport>,
    /// Rows rejected over every source.
    pub rejected_total: usize,
    /// Examples kept.
    pub kept: usize,
    /// Size of each split by name.
    pub splits: BTreeMap<String, SplitSize>,
    /// [`SPLIT_RULE`].
    pub split_rule: &'static str,
    /// Empty evaluation splits ([`split_warnings`]), also printed.
    pub warnings: Vec<String>,
    /// The data directory.
    #[serde(skip)]
    pub dir: PathBuf,
    /// The kept examples, split.
    #[serde(skip)]
    pub data: Splits,
}

fn without_rejections<S: serde::Serializer>(
    imports: &[ImportReport],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    let rows: Vec<serde_json::Value> = imports
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.remove("rejections");
            }
            v
        })
        .collect();
    rows.serialize(s)
}

/// `finetune data`: writes the data directory `output.dir` (default
/// `runs/finetune/data-<time>`), which must be new or empty.
///
/// # Errors
/// A non-empty output directory (nothing is overwritten), a generator or import failure, no
/// example kept, I/O errors; the directory is removed again when the run created it.
pub fn run(config: &Config, output: &Output, ctx: &RunContext) -> Result<Report> {
    let dir = output
        .dir
        .clone()
        .unwrap_or_else(|| runs_root("finetune").join(format!("data-{}", timestamp())));
    write_new(config, &dir, ctx)
}

/// Writes a data directory into the new or empty `dir`; a failed run leaves nothing behind.
pub(crate) fn write_new(config: &Config, dir: &Path, ctx: &RunContext) -> Result<Report> {
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        bail!(
            "{} exists and is not empty; nothing was overwritten: choose another --out or remove it",
            dir.display()
        );
    }
    let created = !dir.exists();
    let result = write(config, dir, ctx);
    if result.is_err() && created {
        // No partial data directory: a failed run leaves nothing behind.
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

/// The examples kept so far over every source, and what each source gave.
#[derive(Default)]
struct Sources {
    seen: Seen,
    kept: Vec<Example>,
    reports: Vec<ImportReport>,
}

fn write(config: &Config, dir: &Path, ctx: &RunContext) -> Result<Report> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut sources = Sources::default();
    let generator_stats = if config.generates() {
        Some(generate_into(config, dir, &mut sources)?)
    } else {
        None
    };
    for path in &config.imports {
        import_into(path, &mut sources)?;
    }
    let Sources { kept, reports, .. } = sources;
    if kept.is_empty() {
        bail!("no example kept (generate with --per-type > 0 or import valid rows)");
    }
    let rejected_total = write_rejections(dir, &reports)?;
    let splits = split(&kept, config.split_seed);
    let sizes = write_splits(dir, &splits)?;
    let warnings = split_warnings(&splits);
    let report = Report {
        generator: config.generates().then(|| config.generator.clone()),
        generator_stats,
        imports: reports,
        rejected_total,
        kept: kept.len(),
        splits: sizes,
        split_rule: SPLIT_RULE,
        warnings,
        dir: dir.to_path_buf(),
        data: splits,
    };
    let recorded = ctx.config_json_no_device(serde_json::to_value(&report)?);
    write_json(&dir.join("data_report.json"), &recorded)?;
    let s = &report.data;
    eprintln!(
        "data: {} examples kept, {} rejected → {} (train {}, val {}, test {}, held-out {} + {})",
        report.kept,
        report.rejected_total,
        dir.display(),
        s.train.len(),
        s.val.len(),
        s.test.len(),
        s.heldout_anaphoric.len(),
        s.heldout_respective.len()
    );
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    Ok(report)
}

/// A warning for each empty evaluation split (`val`, `test`, the two held-out sets): the
/// split rule cuts each trainable type at ⌊0.8·n⌋ and ⌊0.9·n⌋, so fewer than 10 examples of a
/// type give it no validation example, and a split can end up empty. Training still runs (it
/// needs only `train`), but what the empty split would measure is missing.
pub fn split_warnings(splits: &Splits) -> Vec<String> {
    splits
        .named()
        .iter()
        .filter(|(name, ex)| *name != "train" && ex.is_empty())
        .map(|(name, _)| {
            let why = match *name {
                "val" | "test" => {
                    "each trainable construction type puts 10% of its examples there, rounded down: use at least 10 per type (--per-type) or import more rows"
                }
                _ => "no example of this deferred-binding type was kept",
            };
            format!("the {name} split is empty: {why}")
        })
        .collect()
}

/// Generates the template examples, writes them as generated (`generated.jsonl`) and validates
/// them like imported rows.
fn generate_into(config: &Config, dir: &Path, sources: &mut Sources) -> Result<GeneratorStats> {
    let (examples, stats) = generate(&TemplateVocab::builtin(), &config.generator)
        .map_err(|e| anyhow!("generator: {e}"))?;
    write_jsonl(&dir.join("generated.jsonl"), &examples)?;
    let (kept, report) = validate_rows(
        "generator",
        examples.into_iter().enumerate().map(|(i, e)| (i + 1, e)),
        &mut sources.seen,
    );
    sources.kept.extend(kept);
    sources.reports.push(report);
    Ok(stats)
}

/// Imports one JSONL file, printing its counts and first rejections.
fn import_into(path: &Path, sources: &mut Sources) -> Result<()> {
    let (kept, report) = import_file(path, &mut sources.seen)
        .with_context(|| format!("importing {}", path.display()))?;
    eprintln!(
        "{}: {} rows, {} kept, {} rejected",
        path.display(),
        report.rows,
        report.kept,
        report.rejected
    );
    for rej in report.rejections.iter().take(10) {
        eprintln!("  {rej}");
    }
    sources.kept.extend(kept);
    sources.reports.push(report);
    Ok(())
}

/// Writes `rejected.jsonl`; returns the number of rejections.
fn write_rejections(dir: &Path, reports: &[ImportReport]) -> Result<usize> {
    let rejected: Vec<serde_json::Value> = reports
        .iter()
        .flat_map(|r| {
            r.rejections.iter().map(move |x| {
                serde_json::json!({ "source": r.source, "line": x.line, "rule": x.rule, "message": x.message, "id": x.id })
            })
        })
        .collect();
    write_jsonl(&dir.join("rejected.jsonl"), &rejected)?;
    Ok(rejected.len())
}

/// Writes `splits/<name>.jsonl`; returns the size of each split.
fn write_splits(dir: &Path, splits: &Splits) -> Result<BTreeMap<String, SplitSize>> {
    std::fs::create_dir_all(dir.join("splits"))?;
    let mut sizes = BTreeMap::new();
    for (name, ex) in splits.named() {
        write_jsonl(&split_path(dir, name), ex)?;
        sizes.insert(
            name.into(),
            SplitSize {
                examples: ex.len(),
                triplets: 2 * ex.len(),
            },
        );
    }
    Ok(sizes)
}

fn split_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("splits").join(format!("{name}.jsonl"))
}

/// Whether `dir` holds the splits of a data directory.
pub fn has_splits(dir: &Path) -> bool {
    dir.join("splits").is_dir()
}

/// Reads the splits of a data directory written by [`run`].
///
/// # Errors
/// A missing or unreadable split file, or one with an invalid row (the first is named).
pub fn read_splits(dir: &Path) -> Result<Splits> {
    let mut seen = Seen::default();
    let mut read = |name: &str| -> Result<Vec<Example>> {
        let p = split_path(dir, name);
        let (kept, report) =
            import_file(&p, &mut seen).with_context(|| format!("reading {}", p.display()))?;
        if report.rejected > 0 {
            bail!(
                "{}: {} invalid rows (first: {})",
                p.display(),
                report.rejected,
                report.rejections[0]
            );
        }
        Ok(kept)
    };
    Ok(Splits {
        train: read("train")?,
        val: read("val")?,
        test: read("test")?,
        heldout_anaphoric: read("heldout_anaphoric")?,
        heldout_respective: read("heldout_respective")?,
    })
}

/// Writes one compact JSON line per row, atomically.
fn write_jsonl<T: serde::Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    bindscope_core::fsutil::write_atomic_with(path, |w| {
        use std::io::Write;
        for r in rows {
            writeln!(
                w,
                "{}",
                serde_json::to_string(r).map_err(std::io::Error::other)?
            )?;
        }
        Ok(())
    })
    .with_context(|| format!("writing {}", path.display()))
}
