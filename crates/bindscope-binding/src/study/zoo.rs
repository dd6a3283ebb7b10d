//! The whole Table 3 in one run (`experiments probe-all --zoo jer21`): every row of a
//! [`crate::zoo`] registry through [`super::probe_all::run`], one resumable run directory per
//! model, then [`crate::correlate`] (Table 2 and the Figure 1 scatter plots) over the rows that
//! finished.
//!
//! Rows whose weights cannot be found are listed, with where to get them, instead of stopping
//! the run; a row that fails once found (a load or a step error) is reported and the run goes
//! on to the next. Re-running the same command resumes every row where it stopped.
//!
//! Layout of the output directory: `<slug>/` per row (the `probe-all` run directory, with its
//! `row.json`), `correlate/` (Table 2, plots), `zoo.json` (which rows finished, which are
//! missing and why, which failed).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use bindscope_core::Checkpoint;
use bindscope_core::checkpoint::HubConfig;
use bindscope_core::run::{Output, RunContext, write_json};
use bindscope_models::VisionReadout;
use serde::Serialize;

use super::probe_all::{self, ProbeAllConfig};
use super::{Encoder, EncoderConfig};
use crate::correlate::{self, CorrelateConfig};
use crate::zoo::{Source, ZooEntry};

/// Where a row's weights are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Located {
    /// Found: the checkpoint spec to load (a local path or a Hub id).
    Found {
        /// The spec.
        spec: String,
    },
    /// Something is under the row's local name, but it is not a checkpoint bindscope reads.
    Unreadable {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
    /// Not found.
    Missing {
        /// Why, in words.
        reason: String,
    },
}

/// Finds the weights of `entry`: `weights_dir/<local>` first (which must then be a
/// checkpoint), then (Hub rows) the Hugging Face cache and, unless `offline`, the Hub (which
/// downloads them).
pub fn locate(entry: &ZooEntry, weights_dir: Option<&Path>, offline: bool) -> Located {
    if let Some(dir) = weights_dir {
        let p = dir.join(entry.local);
        if p.exists() {
            let spec = p.display().to_string();
            return match Checkpoint::resolve(&spec) {
                Ok(_) => Located::Found { spec },
                Err(e) => Located::Unreadable {
                    path: spec,
                    reason: e.to_string(),
                },
            };
        }
    }
    let looked = match weights_dir {
        Some(d) => format!("not in {}", d.join(entry.local).display()),
        None => "no --weights-dir".to_string(),
    };
    match entry.source {
        Source::Hub { id } => {
            let mut hub = HubConfig::from_env();
            hub.offline |= offline;
            match Checkpoint::resolve_with(id, &hub) {
                Ok(_) => Located::Found {
                    spec: id.to_string(),
                },
                Err(e) => Located::Missing {
                    reason: format!("{looked}; {e}"),
                },
            }
        }
        Source::Release { .. } => Located::Missing {
            reason: format!("{looked} (a .pth release, never downloaded by bindscope)"),
        },
    }
}

/// Checks that `--weights-dir` names a directory.
///
/// # Errors
/// A message naming the path.
pub fn check_weights_dir(dir: Option<&Path>) -> Result<()> {
    if let Some(d) = dir
        && !d.is_dir()
    {
        anyhow::bail!(
            "--weights-dir {}: {}",
            d.display(),
            if d.exists() {
                "not a directory"
            } else {
                "no such directory"
            }
        );
    }
    Ok(())
}

/// The architecture the checkpoint `spec` holds, checked against the row's: a checkpoint of
/// another family under a row's name would otherwise enter the table under that row's label.
fn check_architecture(entry: &ZooEntry, spec: &str) -> Result<()> {
    let ckpt = Checkpoint::resolve(spec)?.with_arch(entry.arch)?;
    let found = bindscope_models::registry::model_type(&ckpt)?;
    if found != entry.architecture {
        anyhow::bail!(
            "{spec} holds a '{found}' checkpoint; the row '{}' is a '{}' ({})",
            entry.label,
            entry.architecture,
            entry.where_to_get()
        );
    }
    Ok(())
}

/// A row that did not run.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// The row's label.
    pub label: String,
    /// Why.
    pub reason: String,
    /// Where to get the weights.
    pub source: String,
}

/// What a zoo run did.
#[derive(Debug, Clone, Serialize)]
pub struct ZooReport {
    /// The output directory.
    pub dir: PathBuf,
    /// `row.json` of every row that finished, in registry order.
    pub finished: Vec<PathBuf>,
    /// Rows whose weights were not found.
    pub missing: Vec<Skipped>,
    /// Rows that were found but failed.
    pub failed: Vec<Skipped>,
    /// The correlation run's directory (`None` with no finished row).
    pub correlate: Option<PathBuf>,
}

/// Runs `rows` with the settings of `template` (its encoder is replaced by each row's) under
/// `dir`, then correlates the finished rows with `correlate`.
///
/// # Errors
/// Bad settings (checked before any row), an unwritable output directory, a failed
/// correlation. A missing or failing row is not an error of the run (see the module docs).
pub fn run(
    rows: &[ZooEntry],
    template: &ProbeAllConfig,
    weights_dir: Option<&Path>,
    correlate_config: &CorrelateConfig,
    dir: &Path,
    ctx: &RunContext,
) -> Result<ZooReport> {
    template.check()?;
    check_weights_dir(weights_dir)?;
    // The natural images once, before any row: a file that does not decode would otherwise
    // fail every row, each after its JER and binding work. (A folder the rows' own
    // `--dump-images` fills is listed by each row.)
    if let Some(folder) = &template.images
        && template.dump_images.as_deref() != Some(folder.as_path())
    {
        let selection = super::geometry::Selection::new(folder, &template.geometry)?;
        let decode = bindscope_data::image::DecodeOptions::hf();
        for p in &selection.samples {
            bindscope_data::image::decode_file(p, &decode)
                .with_context(|| format!("--images: decoding {}", p.display()))?;
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut report = ZooReport {
        dir: dir.to_path_buf(),
        finished: Vec::new(),
        missing: Vec::new(),
        failed: Vec::new(),
        correlate: None,
    };
    // Every row's weights first: the missing ones are known before hours of work.
    let located: Vec<_> = rows
        .iter()
        .map(|r| (r, locate(r, weights_dir, false)))
        .collect();
    for (r, l) in &located {
        match l {
            Located::Missing { reason } => report.missing.push(Skipped {
                label: r.label.into(),
                reason: reason.clone(),
                source: r.where_to_get(),
            }),
            Located::Unreadable { path, reason } => {
                eprintln!("zoo: {}: {path} is not a checkpoint: {reason}", r.label);
                report.failed.push(Skipped {
                    label: r.label.into(),
                    reason: format!("{path} is not a checkpoint: {reason}"),
                    source: r.where_to_get(),
                });
            }
            Located::Found { .. } => {}
        }
    }
    let found = located
        .iter()
        .filter(|(_, l)| matches!(l, Located::Found { .. }))
        .count();
    eprintln!(
        "zoo: weights found for {found} of {} rows ({} missing: listed at the end and, with \
         the reasons, in {})",
        rows.len(),
        report.missing.len(),
        dir.join("zoo.json").display()
    );
    for (i, (r, l)) in located.iter().enumerate() {
        let Located::Found { spec } = l else {
            continue;
        };
        eprintln!("zoo: row {}/{}: {} ← {spec}", i + 1, rows.len(), r.label);
        let config = ProbeAllConfig {
            encoder: EncoderConfig {
                source: Encoder::Checkpoint(spec.clone()),
                arch: r.arch.map(str::to_string),
                ..template.encoder.clone()
            },
            label: Some(r.label.to_string()),
            ..template.clone()
        };
        let output = Output {
            dir: Some(dir.join(r.slug())),
            fresh: false,
        };
        // A row that panics is a failed row, not the end of a run of hours.
        let result = check_architecture(r, spec).and_then(|()| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                probe_all::run(&config, &output, ctx)
            }))
            .unwrap_or_else(|p| {
                let what = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(anyhow::anyhow!("internal error (panic): {what}"))
            })
        });
        match result {
            Ok(row) => {
                if row.embed_dim != r.embed_dim && template.scenes.output == VisionReadout::Pooled {
                    eprintln!(
                        "zoo: note: {} has embedding dimension {} where the registry says {}",
                        r.label, row.embed_dim, r.embed_dim
                    );
                }
                report.finished.push(row.run_dir.join("row.json"));
            }
            Err(e) => {
                eprintln!("zoo: {} failed: {e:#}", r.label);
                report.failed.push(Skipped {
                    label: r.label.into(),
                    reason: format!("{e:#}"),
                    source: r.where_to_get(),
                });
            }
        }
    }
    // Rewritten whole from this run's rows: no table or plot of earlier rows may stand for it.
    let out = dir.join("correlate");
    if out.is_dir() {
        std::fs::remove_dir_all(&out)
            .with_context(|| format!("removing the earlier {}", out.display()))?;
    }
    if !report.finished.is_empty() {
        let config = CorrelateConfig {
            rows: report.finished.clone(),
            ..correlate_config.clone()
        };
        correlate::run(
            &config,
            &Output {
                dir: Some(out.clone()),
                fresh: false,
            },
            ctx,
        )?;
        report.correlate = Some(out);
    }
    write_json(&dir.join("zoo.json"), &serde_json::to_value(&report)?)?;
    eprintln!(
        "zoo: {} finished, {} missing, {} failed → {}",
        report.finished.len(),
        report.missing.len(),
        report.failed.len(),
        dir.join("zoo.json").display()
    );
    Ok(report)
}
