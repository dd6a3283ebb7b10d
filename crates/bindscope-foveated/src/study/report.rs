//! The reports of a run: `results.json`, `summary.csv`, `readout-<name>.csv`, the plots and
//! the console table.

use super::gqa_run::GqaRecord;
use super::scenes::ProbeRecord;
use super::{ProbeKey, mean_std, plots, seed_records};
use crate::dataset::Generator;
use crate::gqa::{self, BuildReport};
use crate::metrics::NsrStats;
use crate::scene::Task;
use anyhow::Result;
use bindscope_core::plot::short_label;
use bindscope_core::run::{Plain, write_csv, write_json};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `" (mean ± std over N probe seeds)"` for a title when every bar has N > 1 seeds, `""` for
/// one seed (no whiskers).
fn seeds_note(counts: impl Iterator<Item = usize>) -> String {
    let n = counts.max().unwrap_or(1);
    if n > 1 {
        format!(" (mean ± std over {n} probe seeds)")
    } else {
        String::new()
    }
}

/// Mean and sample standard deviation of a metric over the seeds of a (readout, probe), the
/// non-finite values left out (`NaN` — JSON `null` — when none is finite).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stat {
    /// Mean.
    pub mean: f64,
    /// Standard deviation (n − 1; 0 for one seed).
    pub std: f64,
    /// Seeds (CSB / CSD rows only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
}

impl Stat {
    fn of(values: impl Iterator<Item = f64>, with_n: bool) -> Self {
        let v: Vec<f64> = values.collect();
        let (mean, std) = mean_std(&v);
        Self {
            mean,
            std,
            n: with_n.then_some(v.len()),
        }
    }
}

/// One (readout, probe) of a CSB / CSD run over its seeds: a row of `results.json`.
#[derive(Debug, Clone, Serialize)]
pub struct ScenesRow {
    /// The readout.
    pub readout: String,
    /// The probe.
    pub probe: String,
    /// Its seeds.
    pub seeds: Vec<u64>,
    /// Test top-1.
    pub test_top1: Stat,
    /// Mean test top-1 per clutter level K.
    pub test_top1_by_clutter: BTreeMap<usize, f64>,
    /// Validation top-1 of the selected epoch.
    pub val_top1: Stat,
    /// Counterfactual flip rate.
    pub flip_rate: Stat,
    /// Flip rate among counterfactuals whose base scene was classified correctly.
    pub flip_rate_given_base_correct: Stat,
    /// Fraction of counterfactuals predicted as their base scene.
    pub stay_rate: Stat,
    /// Counterfactuals evaluated (first seed).
    pub counterfactuals: usize,
    /// Nuisance-to-signal ratio.
    pub nsr: Stat,
    /// Its parts per seed.
    pub nsr_detail: Vec<Option<NsrStats>>,
    /// Top-1 over the nuisance variants.
    pub nuisance_top1: Stat,
    /// Top-1 over CSD's clean split.
    pub clean_top1: Stat,
    /// Selected epoch per seed.
    pub best_epoch: Vec<usize>,
    /// Training wall time per seed (seconds).
    pub train_seconds: Vec<f64>,
}

/// `results.json` of a CSB / CSD run.
#[derive(Debug, Clone, Serialize)]
pub struct ScenesResults {
    /// The encoder as given.
    pub model: String,
    /// CSB or CSD.
    pub task: Task,
    /// Class names in label order.
    pub classes: Vec<String>,
    /// Chance top-1, `1 / classes`.
    pub chance: f64,
    /// One row per (readout, probe).
    pub results: Vec<ScenesRow>,
    /// Realised scene statistics per set.
    pub scenes: serde_json::Value,
    /// Feature extraction wall time of this invocation (seconds).
    pub extract_seconds_this_invocation: f64,
    /// Probe training wall time of this invocation (seconds).
    pub train_seconds_this_invocation: f64,
}

/// What a CSB / CSD run computed.
#[derive(Debug, Clone, Serialize)]
pub struct ScenesReport {
    /// The run directory.
    pub dir: PathBuf,
    /// Its `results.json`.
    pub results: ScenesResults,
}

/// One (readout, probe) of a GQA run over its seeds: a row of `results.json`.
#[derive(Debug, Clone, Serialize)]
pub struct GqaRow {
    /// The readout.
    pub readout: String,
    /// The probe.
    pub probe: String,
    /// Its seeds.
    pub seeds: Vec<u64>,
    /// Test accuracy.
    pub test_accuracy: Stat,
    /// Test paired accuracy (both questions of a pair right).
    pub test_paired_accuracy: Stat,
    /// Validation paired accuracy.
    pub val_paired_accuracy: Stat,
    /// The MLP dropout chosen per seed (`None` for linear probes).
    pub dropout: Vec<Option<f64>>,
}

/// `results.json` of a GQA run.
#[derive(Debug, Clone, Serialize)]
pub struct GqaResults {
    /// The encoder as given.
    pub model: String,
    /// `"gqa"`.
    pub task: &'static str,
    /// The answer classes.
    pub labels: [&'static str; 10],
    /// What the pair-building rules kept and dropped.
    pub build_report: BuildReport,
    /// One row per (readout, probe).
    pub results: Vec<GqaRow>,
    /// Feature extraction wall time of this invocation (seconds).
    pub extract_seconds_this_invocation: f64,
    /// Probe training wall time of this invocation (seconds).
    pub train_seconds_this_invocation: f64,
}

/// What a GQA run computed.
#[derive(Debug, Clone, Serialize)]
pub struct GqaReport {
    /// The run directory.
    pub dir: PathBuf,
    /// Its `results.json`.
    pub results: GqaResults,
}

/// Writes `results.json` through a JSON value, whose object keys are sorted: the layout the
/// file has always had.
fn write_results<T: Serialize>(dir: &Path, results: &T) -> Result<()> {
    write_json(&dir.join("results.json"), &serde_json::to_value(results)?)?;
    Ok(())
}

fn plain(v: Option<f64>) -> Option<Plain> {
    v.map(Plain)
}

/// A row of a CSB / CSD `summary.csv`.
#[derive(Serialize)]
struct ScenesSummaryRow<'a> {
    readout: &'a str,
    probe: &'a str,
    seeds: usize,
    test_top1_mean: Plain,
    test_top1_std: Plain,
    flip_mean: Plain,
    flip_std: Plain,
    flip_given_base_correct_mean: Plain,
    stay_mean: Plain,
    nsr_mean: Plain,
    nuisance_top1_mean: Plain,
    clean_top1_mean: Plain,
    val_top1_mean: Plain,
}

/// A row of a CSB / CSD `readout-<name>.csv`.
#[derive(Serialize)]
struct ScenesReadoutRow<'a> {
    probe: &'a str,
    seed: u64,
    best_epoch: usize,
    val_top1: Plain,
    test_top1: Plain,
    flip: Plain,
    flip_given_base_correct: Plain,
    stay: Plain,
    counterfactuals: usize,
    nsr: Option<Plain>,
    nsr_nuisance: Option<Plain>,
    nsr_signal: Option<Plain>,
    nuisance_top1: Option<Plain>,
    clean_top1: Option<Plain>,
    train_seconds: Plain,
}

/// The records grouped by (readout, probe), groups in order of first appearance.
fn group_records<'a>(records: &[&'a ProbeRecord]) -> Vec<((String, String), Vec<&'a ProbeRecord>)> {
    let mut groups: Vec<((String, String), Vec<&ProbeRecord>)> = Vec::new();
    for r in records {
        let key = (r.readout.clone(), r.probe.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    groups
}

fn scenes_row(readout: &str, probe: &str, rs: &[&ProbeRecord]) -> ScenesRow {
    let stat = |f: &dyn Fn(&ProbeRecord) -> f64| Stat::of(rs.iter().map(|r| f(r)), true);
    let mut ks: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for r in rs {
        for (k, v) in &r.test_top1_by_k {
            ks.entry(*k).or_default().push(*v);
        }
    }
    ScenesRow {
        readout: readout.to_string(),
        probe: probe.to_string(),
        seeds: rs.iter().map(|r| r.seed).collect(),
        test_top1: stat(&|r| r.test_top1),
        test_top1_by_clutter: ks.iter().map(|(k, v)| (*k, mean_std(v).0)).collect(),
        val_top1: stat(&|r| r.val_top1),
        flip_rate: stat(&|r| r.flip.flip),
        flip_rate_given_base_correct: stat(&|r| r.flip.flip_given_base_correct),
        stay_rate: stat(&|r| r.flip.stay),
        counterfactuals: rs[0].flip.n,
        nsr: stat(&|r| r.nsr.and_then(|n| n.nsr).unwrap_or(f64::NAN)),
        nsr_detail: rs.iter().map(|r| r.nsr).collect(),
        nuisance_top1: stat(&|r| r.nuisance_top1.unwrap_or(f64::NAN)),
        clean_top1: stat(&|r| r.clean_top1.unwrap_or(f64::NAN)),
        best_epoch: rs.iter().map(|r| r.best_epoch).collect(),
        train_seconds: rs.iter().map(|r| r.train_seconds).collect(),
    }
}

/// The reports of a CSB / CSD run over `records` (in grid order); prints the console table.
pub(super) fn scenes(
    dir: &Path,
    spec: &str,
    generator: &Generator,
    records: &[&ProbeRecord],
    scene_stats: serde_json::Value,
    extract_seconds: f64,
    train_seconds: f64,
) -> Result<ScenesResults> {
    let groups = group_records(records);
    let rows: Vec<ScenesRow> = groups
        .iter()
        .map(|((r, p), rs)| scenes_row(r, p, rs))
        .collect();
    let summary: Vec<ScenesSummaryRow> = rows
        .iter()
        .map(|t| ScenesSummaryRow {
            readout: &t.readout,
            probe: &t.probe,
            seeds: t.seeds.len(),
            test_top1_mean: Plain(t.test_top1.mean),
            test_top1_std: Plain(t.test_top1.std),
            flip_mean: Plain(t.flip_rate.mean),
            flip_std: Plain(t.flip_rate.std),
            flip_given_base_correct_mean: Plain(t.flip_rate_given_base_correct.mean),
            stay_mean: Plain(t.stay_rate.mean),
            nsr_mean: Plain(t.nsr.mean),
            nuisance_top1_mean: Plain(t.nuisance_top1.mean),
            clean_top1_mean: Plain(t.clean_top1.mean),
            val_top1_mean: Plain(t.val_top1.mean),
        })
        .collect();
    write_csv(&dir.join("summary.csv"), &summary)?;
    let mut by_readout: BTreeMap<&str, Vec<ScenesReadoutRow>> = BTreeMap::new();
    for r in records {
        by_readout
            .entry(&r.readout)
            .or_default()
            .push(ScenesReadoutRow {
                probe: &r.probe,
                seed: r.seed,
                best_epoch: r.best_epoch,
                val_top1: Plain(r.val_top1),
                test_top1: Plain(r.test_top1),
                flip: Plain(r.flip.flip),
                flip_given_base_correct: Plain(r.flip.flip_given_base_correct),
                stay: Plain(r.flip.stay),
                counterfactuals: r.flip.n,
                nsr: plain(r.nsr.and_then(|n| n.nsr)),
                nsr_nuisance: plain(r.nsr.map(|n| n.nuisance)),
                nsr_signal: plain(r.nsr.map(|n| n.signal)),
                nuisance_top1: plain(r.nuisance_top1),
                clean_top1: plain(r.clean_top1),
                train_seconds: Plain(r.train_seconds),
            });
    }
    for (readout, csv) in &by_readout {
        write_csv(&dir.join(format!("readout-{readout}.csv")), csv)?;
    }
    let chance = 1.0 / generator.num_classes() as f64;
    let results = ScenesResults {
        model: spec.to_string(),
        task: generator.task,
        classes: generator.class_names(),
        chance,
        results: rows,
        scenes: scene_stats,
        extract_seconds_this_invocation: extract_seconds,
        train_seconds_this_invocation: train_seconds,
    };
    write_results(dir, &results)?;

    // Plots.
    let rows = &results.results;
    let bars = |f: &dyn Fn(&ScenesRow) -> Stat| -> Vec<plots::Bar> {
        rows.iter()
            .map(|t| {
                let s = f(t);
                plots::Bar {
                    readout: t.readout.clone(),
                    probe: t.probe.clone(),
                    mean: s.mean,
                    std: s.std,
                }
            })
            .collect()
    };
    let model = short_label(spec);
    let seeds = seeds_note(rows.iter().map(|t| t.seeds.len()));
    let chance_name = format!("chance ({chance:.3})");
    plots::bars(
        &dir.join("top1.svg"),
        &format!("Test top-1 — {model}, {}{seeds}", generator.task.name()),
        &bars(&|t| t.test_top1),
        &plots::BarAxis {
            label: "test top-1",
            reference: Some((chance, &chance_name)),
            top: Some(1.0),
        },
    )?;
    plots::bars(
        &dir.join("flip.svg"),
        &format!("Counterfactual flip rate — {model}{seeds}"),
        &bars(&|t| t.flip_rate),
        &plots::BarAxis {
            label: "flip rate",
            reference: None,
            top: Some(1.0),
        },
    )?;
    let nsr_bars = bars(&|t| t.nsr);
    if nsr_bars.iter().any(|b| b.mean.is_finite()) {
        plots::bars(
            &dir.join("nsr.svg"),
            &format!("Nuisance-to-signal ratio — {model}{seeds}"),
            &nsr_bars,
            &plots::BarAxis {
                label: "NSR (nuisance / signal variance)",
                reference: Some((1.0, "NSR = 1")),
                top: None,
            },
        )?;
    }
    for ((r, p), rs) in &groups {
        let curves: Vec<(u64, &[crate::probe::EpochLog])> =
            rs.iter().map(|r| (r.seed, r.history.as_slice())).collect();
        plots::curves(
            &dir.join(format!("curves-{r}-{p}.svg")),
            &format!("{r} + {p}: validation top-1 per epoch — {model}"),
            &curves,
        )?;
    }

    // Console table.
    println!(
        "\n{:<10} {:<7} {:>16} {:>16} {:>10}",
        "readout", "probe", "test top-1", "flip rate", "NSR"
    );
    for t in rows {
        println!(
            "{:<10} {:<7} {:>8.4} ± {:<5.4} {:>8.4} ± {:<5.4} {:>10.3}",
            t.readout,
            t.probe,
            t.test_top1.mean,
            t.test_top1.std,
            t.flip_rate.mean,
            t.flip_rate.std,
            t.nsr.mean
        );
    }
    Ok(results)
}

/// A row of a GQA `summary.csv`.
#[derive(Serialize)]
struct GqaSummaryRow<'a> {
    readout: &'a str,
    probe: &'a str,
    seeds: usize,
    test_accuracy_mean: Plain,
    test_accuracy_std: Plain,
    test_paired_mean: Plain,
    test_paired_std: Plain,
    val_paired_mean: Plain,
}

/// A row of a GQA `readout-<name>.csv`.
#[derive(Serialize)]
struct GqaReadoutRow<'a> {
    probe: &'a str,
    seed: u64,
    dropout: Option<Plain>,
    best_epoch: usize,
    val_accuracy: Plain,
    val_paired_accuracy: Plain,
    test_accuracy: Plain,
    test_paired_accuracy: Plain,
    train_seconds: Plain,
}

/// The reports of a GQA run over the records of the grid `(readouts, probes, seeds)`; prints
/// the console table.
pub(super) fn gqa(
    dir: &Path,
    spec: &str,
    build_report: &BuildReport,
    done: &BTreeMap<ProbeKey, GqaRecord>,
    (readouts, probes, seeds): (&[String], &[String], &[u64]),
    extract_seconds: f64,
    train_seconds: f64,
) -> Result<GqaResults> {
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    let mut by_readout: BTreeMap<&str, Vec<GqaReadoutRow>> = BTreeMap::new();
    for readout in readouts {
        for pname in probes {
            let rs = seed_records(done, readout, pname, seeds);
            if rs.is_empty() {
                continue;
            }
            let stat = |f: &dyn Fn(&GqaRecord) -> f64| Stat::of(rs.iter().map(|r| f(r)), false);
            let row = GqaRow {
                readout: readout.clone(),
                probe: pname.clone(),
                seeds: rs.iter().map(|r| r.seed).collect(),
                test_accuracy: stat(&|r| r.test_accuracy),
                test_paired_accuracy: stat(&|r| r.test_paired_accuracy),
                val_paired_accuracy: stat(&|r| r.val_paired_accuracy),
                dropout: rs.iter().map(|r| r.dropout).collect(),
            };
            summary.push(GqaSummaryRow {
                readout,
                probe: pname,
                seeds: rs.len(),
                test_accuracy_mean: Plain(row.test_accuracy.mean),
                test_accuracy_std: Plain(row.test_accuracy.std),
                test_paired_mean: Plain(row.test_paired_accuracy.mean),
                test_paired_std: Plain(row.test_paired_accuracy.std),
                val_paired_mean: Plain(row.val_paired_accuracy.mean),
            });
            rows.push(row);
            by_readout
                .entry(readout)
                .or_default()
                .extend(rs.iter().map(|r| GqaReadoutRow {
                    probe: &r.probe,
                    seed: r.seed,
                    dropout: plain(r.dropout),
                    best_epoch: r.best_epoch,
                    val_accuracy: Plain(r.val_accuracy),
                    val_paired_accuracy: Plain(r.val_paired_accuracy),
                    test_accuracy: Plain(r.test_accuracy),
                    test_paired_accuracy: Plain(r.test_paired_accuracy),
                    train_seconds: Plain(r.train_seconds),
                }));
        }
    }
    write_csv(&dir.join("summary.csv"), &summary)?;
    for (r, csv) in &by_readout {
        write_csv(&dir.join(format!("readout-{r}.csv")), csv)?;
    }
    let bars: Vec<plots::Bar> = rows
        .iter()
        .map(|t| plots::Bar {
            readout: t.readout.clone(),
            probe: t.probe.clone(),
            mean: t.test_paired_accuracy.mean,
            std: t.test_paired_accuracy.std,
        })
        .collect();
    plots::bars(
        &dir.join("paired.svg"),
        &format!(
            "GQA paired accuracy — {}{}",
            short_label(spec),
            seeds_note(rows.iter().map(|t| t.seeds.len()))
        ),
        &bars,
        &plots::BarAxis {
            label: "test paired accuracy",
            reference: None,
            top: Some(1.0),
        },
    )?;
    let results = GqaResults {
        model: spec.to_string(),
        task: "gqa",
        labels: gqa::LABELS,
        build_report: build_report.clone(),
        results: rows,
        extract_seconds_this_invocation: extract_seconds,
        train_seconds_this_invocation: train_seconds,
    };
    write_results(dir, &results)?;
    println!(
        "\n{:<12} {:<7} {:>10} {:>10}",
        "readout", "probe", "accuracy", "paired"
    );
    for t in &results.results {
        println!(
            "{:<12} {:<7} {:>10.4} {:>10.4}",
            t.readout, t.probe, t.test_accuracy.mean, t.test_paired_accuracy.mean
        );
    }
    Ok(results)
}
