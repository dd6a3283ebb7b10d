//! `geb eval`: a trained readout answers a manifest's items under the controls, and every
//! answer is scored through [`crate::score`] (lmms-eval 0.7.3's metrics, bootstrap intervals):
//! `predictions-<control>.jsonl`, `score-<control>/` and, per control other than matched,
//! `predictions-matched-for-<control>.jsonl` (the matched predictions of the items that control
//! answered, in its order: the mismatch control may leave items out) and
//! `score-matched-vs-<control>/` with the paired gap matched − control over those items,
//! `eval.json` ([`EvalReport`], gaps as [`PairedGap`]), and the figures `categories.svg` and
//! `control_gaps.svg` ([`crate::study::plots::eval_plots`]). The text-only control is a run
//! of its own: train with `--text-only` and evaluate that run; `geb score --pair` then gives
//! the gap.
//!
//! With a project encoder (`--embedder`), every image is checked against the item's `sha256`
//! before anything else; imported embeddings (`--embeddings`) read no image, so none is
//! checked.
//!
//! Items are answered in manifest order in batches of `batch` (≥ 2: the shuffled control
//! shifts within a batch). The mismatch control (VL-joint with a question slot) leaves out the
//! items with no other question about their image; they are counted and listed in
//! `eval.json`.
//!
//! Resume: the evaluation directory is chosen by identity (the options, the readout's,
//! manifest's and embeddings' hashes). A finished evaluation (its `eval.json` written) is not
//! recomputed: the command prints its report. An interrupted one keeps every control whose
//! `predictions-<control>.jsonl` was written (with its `predictions-<control>.seconds.json`
//! timing) and answers the rest.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::LoadOptions;
use bindscope_core::run::{Output, RunContext, read_json, write_json};
use bindscope_models::llama::LlamaForCausalLM;
use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::embed::Needs;
use super::train::{ReadoutRecord, open_decoder};
use super::{DataDir, Embedder, SlotKind, file_sha256, rows_sha256, slot_files};
use crate::readout::adapter::EmbeddingAdapter;
use crate::readout::eval::{
    Control, ManifestItem, answer_batch, arrange, max_new_tokens, mismatch_partners, read_manifest,
    shifted_rows,
};
use crate::readout::model::GenerativeReadout;
use crate::score::{self, ScoreConfig};

/// Everything `geb eval` computes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRun {
    /// The `geb train` run directory.
    pub run: PathBuf,
    /// The manifest split (`dev`, `test`).
    pub split: String,
    /// The data directory (default: the training run's).
    pub data: Option<PathBuf>,
    /// The embeddings (default: the training run's).
    pub embedder: Option<Embedder>,
    /// The controls besides matched (`None`: zero and shuffled, or none for a text-only
    /// readout).
    pub controls: Option<Vec<Control>>,
    /// Items per generation batch (≥ 2).
    pub batch: usize,
    /// Marginal / paired bootstrap resamples and seed.
    pub resamples: usize,
    /// Paired resamples.
    pub paired_resamples: usize,
    /// Bootstrap seed.
    pub seed: u64,
    /// Evaluate the first `limit` items only.
    pub limit: Option<usize>,
}

/// One scored condition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConditionScore {
    /// The control.
    pub control: Control,
    /// Items answered.
    pub items: usize,
    /// Overall score, % (with its interval when bootstrapped).
    pub score: f64,
    /// 95% interval, %.
    pub ci95: Option<[f64; 2]>,
    /// The paired gap matched − this control (`None` for matched itself).
    pub gap: Option<PairedGap>,
}

/// The paired gap of a control: matched − control over the control's items, in percentage
/// points, with the paired bootstrap's 95% interval ([`crate::score`]'s `paired`; `None` when
/// the run asked for no paired resamples). In `eval.json`:
/// `{"matched_minus_control_pp": 2.0, "ci95": [-0.67, 4.67]}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairedGap {
    /// Matched score − control score, percentage points.
    pub matched_minus_control_pp: f64,
    /// 95% paired bootstrap interval of the gap, points.
    pub ci95: Option<[f64; 2]>,
}

/// The report of `geb eval`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalReport {
    /// The run directory.
    pub dir: PathBuf,
    /// Per condition.
    pub conditions: Vec<ConditionScore>,
    /// Mean seconds per evaluated item (matched).
    pub seconds_per_item: f64,
    /// Items left out of the mismatch control (no partner).
    pub mismatch_left_out: Vec<String>,
    /// Rows of the shuffled control that still got an embedding of their own image group.
    pub shuffled_same_image: usize,
}

/// Loads the trained readout of `dir` on `device`.
///
/// # Errors
/// Missing or foreign files, named.
pub fn load_readout(
    dir: &Path,
    record: &ReadoutRecord,
    device: &Device,
) -> Result<GenerativeReadout> {
    let dec = open_decoder(&record.run.decoder)?;
    if dec.sha256 != record.decoder_sha256 {
        bail!(
            "{}: trained on decoder weights {} but --decoder {} now has {}",
            dir.display(),
            record.decoder_sha256,
            record.run.decoder,
            dec.sha256
        );
    }
    let decoder = LlamaForCausalLM::load_family(&dec.checkpoint, device, &LoadOptions::default())?;
    let adapters = record
        .adapters
        .iter()
        .map(|&d| EmbeddingAdapter::init(d, &mut bindscope_core::rng::stream(0, &[]), device))
        .collect();
    let fresh = GenerativeReadout { decoder, adapters };
    let file = dir.join("readout.safetensors");
    bindscope_core::load::load_strict(fresh, std::slice::from_ref(&file), &LoadOptions::default())
        .with_context(|| format!("{}", file.display()))
}

/// Runs `geb eval`.
///
/// # Errors
/// A training run that is incomplete, a bad manifest (every bad line named), embeddings that
/// do not cover the items, model or device failures.
pub fn run(cfg: &EvalRun, out: &Output, ctx: &RunContext) -> Result<EvalReport> {
    let rec_path = cfg.run.join("readout.json");
    if !rec_path.is_file() {
        bail!(
            "--run {}: no readout.json (is the training run finished?)",
            cfg.run.display()
        );
    }
    let record: ReadoutRecord = read_json(&rec_path)?;
    let data = DataDir::open(cfg.data.as_deref().unwrap_or(&record.run.data))?;
    let embedder = cfg
        .embedder
        .clone()
        .unwrap_or_else(|| record.run.embedder.clone());
    let slots = embedder.slots(record.run.mode)?;
    if slots != record.slots {
        bail!(
            "the embeddings give slots {:?}, the readout of {} was trained on {:?}",
            slots,
            cfg.run.display(),
            record.slots
        );
    }
    // A --standardize run's statistics: one per slot, of the adapter's width.
    if record.run.standardize
        && (record.standardizers.len() != record.adapters.len()
            || record
                .standardizers
                .iter()
                .zip(&record.adapters)
                .any(|(s, a)| s.dim() != a.embed))
    {
        bail!(
            "{}: a --standardize run, but its standardizers ({} of widths {:?}) are not one per adapter of widths {:?}",
            rec_path.display(),
            record.standardizers.len(),
            record
                .standardizers
                .iter()
                .map(|s| s.dim())
                .collect::<Vec<_>>(),
            record.adapters.iter().map(|a| a.embed).collect::<Vec<_>>()
        );
    }
    let mut items = read_manifest(&data.manifest(&cfg.split))?;
    if let Some(l) = cfg.limit {
        if l == 0 {
            bail!("--limit 0: nothing to evaluate");
        }
        items.truncate(l);
    }
    if matches!(embedder, Embedder::Models { .. }) {
        check_image_hashes(&items, &data.images(), &data.manifest(&cfg.split))?;
    }
    if record.steps < record.total_steps {
        eprintln!(
            "warning: {} was trained for {} of its {} steps (stopped by --max-steps)",
            cfg.run.display(),
            record.steps,
            record.total_steps
        );
    }
    // Every check before the run directory exists: a refused evaluation leaves nothing behind.
    let question_slot = slots
        .iter()
        .position(|&s| s == SlotKind::Question && slots.len() > 1);
    let partners = mismatch_partners(&items);
    let asked = cfg.controls.clone().unwrap_or_else(|| {
        if slots.is_empty() {
            Vec::new()
        } else {
            vec![Control::Zero, Control::Shuffled]
        }
    });
    let mut controls = vec![Control::Matched];
    for c in asked {
        if c == Control::Mismatch && question_slot.is_none() {
            bail!(
                "the mismatch control needs a VL-joint readout with a separate question embedding"
            );
        }
        if c == Control::Mismatch && partners.iter().all(Option::is_none) {
            bail!(
                "the mismatch control: no item of {} has another question about its image",
                data.manifest(&cfg.split).display()
            );
        }
        if !controls.contains(&c) {
            controls.push(c);
        }
    }
    if slots.is_empty() && controls.len() > 1 {
        bail!("a text-only readout has no embedding to replace: evaluate it with --controls none");
    }
    if controls.contains(&Control::Shuffled) && cfg.batch < 2 {
        bail!(
            "--batch {}: the shuffled control shifts within a batch, so it must be at least 2",
            cfg.batch
        );
    }
    let mut needs = Needs::default();
    for it in &items {
        needs.images.insert(it.image.clone());
        needs.question(&it.image, &it.question);
    }
    let files = slot_files(&embedder, &slots, &data, &needs, 32, ctx)?;
    let mut tables = Vec::new();
    let mut hashes = Vec::new();
    for ((f, path), &slot) in files.iter().zip(&slots) {
        let keys: Vec<String> = items
            .iter()
            .map(|it| slot.key(&it.image, &it.question))
            .collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut rows = f
            .lookup(&refs, &path.display().to_string())
            .map_err(anyhow::Error::msg)?;
        if f.dim != record.adapters[tables.len()].embed {
            bail!(
                "{}: {}-dimensional embeddings, the readout's adapter {} takes {}",
                path.display(),
                f.dim,
                tables.len(),
                record.adapters[tables.len()].embed
            );
        }
        hashes.push(rows_sha256(&keys, &rows));
        // A --standardize run: the training rows' statistics, on these rows too.
        if let Some(st) = record.standardizers.get(tables.len()) {
            st.apply(&mut rows);
        }
        tables.push(rows);
    }
    let identity = serde_json::json!({
        "command": "geb eval",
        "eval": cfg,
        "readout_sha256": file_sha256(&cfg.run.join("readout.safetensors"))?,
        "manifest_sha256": file_sha256(&data.manifest(&cfg.split))?,
        "embeddings_sha256": hashes,
    });
    let dir = out.run_dir("geb", "eval", &identity)?;
    let report_path = dir.join("eval.json");
    if report_path.is_file() {
        // The same evaluation finished before: its report stands (nothing is recomputed). A
        // report this version cannot read (an older layout) is made again.
        match read_json::<EvalReport>(&report_path) {
            Ok(report) => {
                eprintln!(
                    "{}: this evaluation is already finished; its report follows",
                    dir.display()
                );
                return Ok(report);
            }
            Err(e) => eprintln!("warning: {e}; evaluating again"),
        }
    }
    write_json(
        &dir.join("config.json"),
        &ctx.config_json(serde_json::json!({"study": "geb", "identity": identity})),
    )?;
    let dec = open_decoder(&record.run.decoder)?;
    let readout = load_readout(&cfg.run, &record, &ctx.device)?;
    let prompts: Vec<_> = items
        .iter()
        .map(|it| dec.format.prompt(&it.id, &it.question, slots.len()))
        .collect::<Result<_, _>>()?;
    let mut seconds_per_item = 0.0;
    let mut left_out = Vec::new();
    let mut files_out: Vec<(Control, PathBuf)> = Vec::new();
    for &control in &controls {
        let keep: Vec<usize> = (0..items.len())
            .filter(|&i| control != Control::Mismatch || partners[i].is_some())
            .collect();
        if control == Control::Mismatch {
            left_out = (0..items.len())
                .filter(|&i| partners[i].is_none())
                .map(|i| items[i].id.clone())
                .collect();
        }
        let path = dir.join(format!("predictions-{}.jsonl", control.name()));
        let timing = dir.join(format!("predictions-{}.seconds.json", control.name()));
        // Resume: a control whose predictions and timing were written (atomically, so whole)
        // for these items is kept.
        if let (Ok(done), Ok(t)) = (
            std::fs::read_to_string(&path),
            read_json::<ControlTiming>(&timing),
        ) && done.lines().count() == keep.len()
            && t.items == keep.len()
        {
            if control == Control::Matched {
                seconds_per_item = t.seconds_per_item;
            }
            files_out.push((control, path));
            continue;
        }
        let t0 = std::time::Instant::now();
        let bar = bindscope_core::run::progress(keep.len() as u64, control.name());
        let mut lines = String::new();
        for chunk in keep.chunks(cfg.batch) {
            let embeddings: Vec<Tensor<2>> = tables
                .iter()
                .enumerate()
                .map(|(k, rows)| {
                    let d = record.adapters[k].embed;
                    let v = arrange(control, k, question_slot, rows, d, chunk, &partners)
                        .map_err(anyhow::Error::msg)?;
                    Ok(Tensor::<1>::from_floats(v.as_slice(), &ctx.device)
                        .reshape([chunk.len(), d]))
                })
                .collect::<Result<_>>()?;
            let ps: Vec<_> = chunk.iter().map(|&i| &prompts[i]).collect();
            let budgets: Vec<usize> = chunk
                .iter()
                .map(|&i| max_new_tokens(items[i].source))
                .collect();
            let answers = answer_batch(
                &readout,
                &dec.format,
                &ps,
                &embeddings,
                &budgets,
                dec.fill,
                &ctx.device,
            )
            .map_err(anyhow::Error::msg)?;
            for (&i, a) in chunk.iter().zip(answers) {
                lines.push_str(&serde_json::to_string(&prediction(&items[i], &a, control))?);
                lines.push('\n');
            }
            bar.inc(chunk.len() as u64);
        }
        bar.finish_and_clear();
        let per_item = t0.elapsed().as_secs_f64() / keep.len().max(1) as f64;
        if control == Control::Matched {
            seconds_per_item = per_item;
        }
        bindscope_core::fsutil::write_atomic(&path, lines.as_bytes())?;
        write_json(
            &timing,
            &ControlTiming {
                seconds_per_item: per_item,
                items: keep.len(),
            },
        )?;
        files_out.push((control, path));
    }
    let matched = files_out[0].1.clone();
    let mut conditions = Vec::new();
    for (control, path) in &files_out {
        let mut sc = ScoreConfig::new(path.clone(), dir.join(format!("score-{}", control.name())));
        sc.resamples = cfg.resamples;
        sc.paired_resamples = cfg.paired_resamples;
        sc.seed = cfg.seed;
        let alone = score::run(&sc, ctx).map_err(|e| anyhow!("{e}"))?;
        let gap = if *control == Control::Matched {
            None
        } else {
            // Paired over the control's items (the mismatch control may hold fewer).
            let matched_subset =
                dir.join(format!("predictions-matched-for-{}.jsonl", control.name()));
            subset(&matched, path, &matched_subset)?;
            let mut pc = ScoreConfig::new(
                matched_subset,
                dir.join(format!("score-matched-vs-{}", control.name())),
            );
            pc.pair = Some(path.clone());
            pc.resamples = cfg.resamples;
            pc.paired_resamples = cfg.paired_resamples;
            pc.seed = cfg.seed;
            let r = score::run(&pc, ctx).map_err(|e| anyhow!("{e}"))?;
            r.summary.paired.map(|p| PairedGap {
                matched_minus_control_pp: p.overall.gap,
                ci95: p.overall.ci95,
            })
        };
        conditions.push(ConditionScore {
            control: *control,
            items: alone.summary.overall.items,
            score: alone.summary.overall.score,
            ci95: alone.summary.overall.ci95,
            gap,
        });
    }
    let shuffled_same_image = if controls.contains(&Control::Shuffled) {
        shifted_rows(&items, cfg.batch)
    } else {
        0
    };
    let report = EvalReport {
        dir: dir.clone(),
        conditions,
        seconds_per_item,
        mismatch_left_out: left_out,
        shuffled_same_image,
    };
    write_json(&dir.join("eval.json"), &report)?;
    super::plots::eval_plots(&dir)?;
    Ok(report)
}

fn prediction(it: &ManifestItem, answer: &str, control: Control) -> serde_json::Value {
    let mut v = serde_json::json!({
        "id": it.id,
        "source": it.source.name(),
        "category": it.category.name(),
        "question": it.question,
        "answers": it.answers,
        "prediction": answer,
        "control": control.name(),
        "image": it.image,
    });
    if let Some(d) = &it.dataset {
        v["dataset"] = serde_json::Value::from(d.clone());
    }
    v
}

/// `predictions-<control>.seconds.json`: how long a control's answers took, kept so a resumed
/// evaluation reports the matched control's time per item.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct ControlTiming {
    /// Wall seconds per item answered.
    seconds_per_item: f64,
    /// Items answered.
    items: usize,
}

/// Checks that every image the items name is the file the manifest describes: its SHA-256
/// equals the item's `sha256` (an image replaced after the manifest was written would be
/// scored against another image's answers). Each image is hashed once.
///
/// # Errors
/// The first missing or unreadable image, or a mismatch, naming the item, the file and both
/// hashes.
fn check_image_hashes(items: &[ManifestItem], images: &Path, manifest: &Path) -> Result<()> {
    let mut seen: std::collections::HashMap<&str, String> = std::collections::HashMap::new();
    for it in items {
        let found = match seen.get(it.image.as_str()) {
            Some(h) => h.clone(),
            None => {
                let path = images.join(&it.image);
                let h = file_sha256(&path).with_context(|| {
                    format!("{}: item {}: image {}", manifest.display(), it.id, it.image)
                })?;
                seen.insert(&it.image, h.clone());
                h
            }
        };
        if found != it.sha256 {
            bail!(
                "{}: item {}: image {} has SHA-256 {found}, the manifest says {} (was the image replaced after the manifest was written?)",
                manifest.display(),
                it.id,
                images.join(&it.image).display(),
                it.sha256
            );
        }
    }
    Ok(())
}

/// Writes the lines of `all` whose ids appear in `like` to `to`.
fn subset(all: &Path, like: &Path, to: &Path) -> Result<()> {
    let ids: std::collections::HashSet<String> = std::fs::read_to_string(like)?
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect();
    let text: String = std::fs::read_to_string(all)?
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["id"].as_str().map(|s| ids.contains(s)))
                .unwrap_or(false)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    bindscope_core::fsutil::write_atomic(to, text.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, image: &str, sha256: &str) -> ManifestItem {
        serde_json::from_value(serde_json::json!({
            "id": id, "source": "mme", "category": "natural", "question": "Is it? Please answer yes or no.",
            "answers": ["Yes"], "image": image, "image_group": image, "sha256": sha256,
        }))
        .unwrap()
    }

    /// A replaced or missing image is refused, naming the item and the file.
    #[test]
    fn image_hashes_are_checked_against_the_manifest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.png"), b"image a").unwrap();
        let good = file_sha256(&dir.path().join("a.png")).unwrap();
        let manifest = dir.path().join("test.jsonl");
        let ok = [item("q-0", "a.png", &good), item("q-1", "a.png", &good)];
        check_image_hashes(&ok, dir.path(), &manifest).unwrap();

        let bad = [
            item("q-0", "a.png", &good),
            item("q-1", "a.png", &"0".repeat(64)),
        ];
        let e = check_image_hashes(&bad, dir.path(), &manifest).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("item q-1") && msg.contains("a.png"), "{msg}");
        assert!(
            msg.contains(&good) && msg.contains(&"0".repeat(64)),
            "{msg}"
        );

        let missing = [item("q-2", "b.png", &good)];
        let e = check_image_hashes(&missing, dir.path(), &manifest).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("item q-2") && msg.contains("b.png"), "{msg}");
    }
}
