//! `experiments finetune`: textual attribute–object binding finetuning (issue 6, "Stuck on
//! Shuffle"), with `bindscope-tuning`.
//!
//! ```text
//! experiments finetune data  --out runs/finetune/data [--per-type 400] [--seed 0] [--import rows.jsonl]
//! experiments finetune train --model sentence-transformers/all-MiniLM-L6-v2 --data runs/finetune/data --out runs/finetune/minilm
//! ```
//!
//! `data` generates template examples of the seven construction types and/or imports external
//! JSONL, validates everything with one rule set (rejections with line numbers and rules in
//! `data_report.json` and `rejected.jsonl`, never kept), and writes the 80/10/10 split with both
//! deferred_bind types held out (`splits/<name>.jsonl`).
//!
//! `train` measures the base model, trains LoRA (r 4, α 4) on q/k/v/o of every layer with the
//! hinge triplet loss (margin 0.05, AdamW lr 5e-5, weight decay 0.01, ε 1e-8, constant, one
//! epoch), applies LiNeS (α 0.5, β 0.5), measures the finetuned model with and without LiNeS, and
//! exports `adapter/` (PEFT, LiNeS folded in), `adapter_no_lines/` (PEFT) and `merged/` (HF
//! layout). Metrics: triplet accuracy on the test split and each held-out type, SABER text→text
//! MCQ accuracy, per-layer attention binding margins. Everything lands in `report.json` /
//! `report.md`. Re-running `train` with the same `--out` resumes an interrupted run from its last
//! checkpoint (`checkpoints/`).

use crate::common;
use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::text::Tokenizer;
use bindscope_models::TextEncoder;
use bindscope_tuning::attention::MarginStats;
use bindscope_tuning::eval::{attention_margins, evaluate_triplets};
use bindscope_tuning::example::{Example, Triplet};
use bindscope_tuning::generate::{GeneratorConfig, generate};
use bindscope_tuning::import::{ImportReport, Seen, import_file, validate_rows};
use bindscope_tuning::lora::{
    LinesConfig, LoraConfig, TunableText, adapters, checkpoint_stems, lines_scaled, set_adapters,
    write_merged, write_peft_adapter,
};
use bindscope_tuning::split::{Splits, split, triplets};
use bindscope_tuning::train::{AttnLossConfig, StepLog, TrainConfig, Trainer, run as train_run};
use bindscope_tuning::vocab::TemplateVocab;
use burn::tensor::Device;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `experiments finetune`.
#[derive(clap::Args, Debug)]
pub struct FinetuneArgs {
    #[command(subcommand)]
    cmd: FinetuneCmd,
}

#[derive(clap::Subcommand, Debug)]
enum FinetuneCmd {
    /// Generate and/or import triplet examples, validate, split.
    Data(DataArgs),
    /// Train LoRA on a text encoder, apply LiNeS, evaluate, export.
    Train(TrainArgs),
}

/// Arguments of `finetune data`.
#[derive(clap::Args, Debug, Clone)]
pub struct DataArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Template examples per construction type (0: none).
    #[arg(long, default_value_t = 400)]
    per_type: usize,
    /// Seed of the generator and of the split.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// External JSONL files to import (after the generated examples).
    #[arg(long = "import")]
    imports: Vec<PathBuf>,
    /// Probability of a scene phrase.
    #[arg(long, default_value_t = 0.5)]
    scene_prob: f64,
    /// Probability of a distractor pair.
    #[arg(long, default_value_t = 0.3)]
    distractor_prob: f64,
    /// Frequency cap per attribute / object word (default: 1.25 × the mean use of an attribute, at least 4).
    #[arg(long)]
    max_word_uses: Option<usize>,
    /// Allowed binding distance `MIN:MAX` (words).
    #[arg(long)]
    binding_distance: Option<String>,
    /// Registers allowed (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    registers: Vec<String>,
}

/// Arguments of `finetune train`.
#[derive(clap::Args, Debug, Clone)]
pub struct TrainArgs {
    /// Hugging Face id or local checkpoint directory of a text encoder (BERT/MiniLM, CLIP, SigLIP).
    #[arg(long)]
    model: String,
    /// Directory written by `finetune data` (default: generate into `<out>/data`).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Run directory (default `runs/finetune/<model>-<time>`); an existing one is resumed.
    #[arg(long)]
    out: Option<PathBuf>,
    /// With no `--data`: template examples per type to generate (an error with `--data`).
    #[arg(long, default_value_t = 400, conflicts_with = "data")]
    per_type: usize,
    /// Seed of generation / split (no `--data`), batch order and LoRA init.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Use only the first N training triplets (0: all).
    #[arg(long, default_value_t = 0)]
    max_train_triplets: usize,
    /// Triplets per step.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Learning rate (constant).
    #[arg(long, default_value_t = 5e-5)]
    lr: f64,
    /// AdamW weight decay.
    #[arg(long, default_value_t = 0.01)]
    weight_decay: f32,
    /// Hinge margin.
    #[arg(long, default_value_t = 0.05)]
    margin: f64,
    /// LoRA rank.
    #[arg(long, default_value_t = 4)]
    rank: usize,
    /// LoRA α.
    #[arg(long, default_value_t = 4.0)]
    lora_alpha: f64,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    epochs: usize,
    /// LiNeS α (scale of the first layer).
    #[arg(long, default_value_t = 0.5)]
    lines_alpha: f64,
    /// LiNeS β (added linearly up to the last layer).
    #[arg(long, default_value_t = 0.5)]
    lines_beta: f64,
    /// Add the attention-margin loss.
    #[arg(long)]
    attn_loss: bool,
    /// Attention loss target margin τ.
    #[arg(long, default_value_t = 0.1)]
    attn_tau: f64,
    /// Attention loss weight λ_attn.
    #[arg(long, default_value_t = 0.1)]
    attn_lambda: f64,
    /// Attention loss layers `START:END` (0-based, end exclusive; default all).
    #[arg(long)]
    attn_layers: Option<String>,
    /// Steps between checkpoints.
    #[arg(long, default_value_t = 25)]
    checkpoint_every: usize,
    /// Stop after this many steps in total (simulates an interruption; rerun to resume).
    #[arg(long)]
    max_steps: Option<usize>,
    /// SABER items per N for each of independent and chain items (0: skip SABER).
    #[arg(long, default_value_t = 100)]
    saber_per_n: usize,
    /// Texts per forward pass in evaluation.
    #[arg(long, default_value_t = 64)]
    eval_batch: usize,
}

/// Whether the subcommand computes on a device (`data` only writes data files).
pub fn needs_device(args: &FinetuneArgs) -> bool {
    !matches!(args.cmd, FinetuneCmd::Data(_))
}

pub fn run(args: FinetuneArgs, device: &Device, device_spec: &str) -> Result<()> {
    match args.cmd {
        FinetuneCmd::Data(a) => run_data(&a).map(|_| ()),
        FinetuneCmd::Train(a) => run_train(&a, device, device_spec),
    }
}

fn parse_range(s: &str, what: &str) -> Result<(usize, usize)> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| anyhow!("{what}: expected START:END, got '{s}'"))?;
    Ok((
        a.trim().parse().with_context(|| format!("{what}: '{a}'"))?,
        b.trim().parse().with_context(|| format!("{what}: '{b}'"))?,
    ))
}

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

/// Generates / imports, validates, splits and writes a data directory; returns the splits.
fn run_data(a: &DataArgs) -> Result<Splits> {
    if a.out.exists() && std::fs::read_dir(&a.out)?.next().is_some() {
        bail!(
            "{} exists and is not empty; nothing was overwritten: choose another --out or remove it",
            a.out.display()
        );
    }
    let created = !a.out.exists();
    let result = write_data(a);
    if result.is_err() && created {
        // No partial data directory: a failed run leaves nothing behind.
        let _ = std::fs::remove_dir_all(&a.out);
    }
    result
}

/// Generates / imports, validates, splits and writes into the (new or empty) `a.out`.
fn write_data(a: &DataArgs) -> Result<Splits> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut seen = Seen::default();
    let mut kept: Vec<Example> = Vec::new();
    let mut reports: Vec<ImportReport> = Vec::new();
    let mut gen_stats = serde_json::Value::Null;
    let cfg = GeneratorConfig {
        seed: a.seed,
        per_type: a.per_type,
        scene_prob: a.scene_prob,
        distractor_prob: a.distractor_prob,
        max_word_uses: a.max_word_uses,
        binding_distance: a
            .binding_distance
            .as_deref()
            .map(|s| parse_range(s, "--binding-distance"))
            .transpose()?,
        registers: a.registers.clone(),
        ..Default::default()
    };
    if a.per_type > 0 {
        let (examples, stats) =
            generate(&TemplateVocab::builtin(), &cfg).map_err(|e| anyhow!("generator: {e}"))?;
        write_jsonl(&a.out.join("generated.jsonl"), &examples)?;
        let (k, r) = validate_rows(
            "generator",
            examples.into_iter().enumerate().map(|(i, e)| (i + 1, e)),
            &mut seen,
        );
        kept.extend(k);
        reports.push(r);
        gen_stats = serde_json::to_value(&stats)?;
    }
    for path in &a.imports {
        let (k, r) = import_file(path, &mut seen)
            .with_context(|| format!("importing {}", path.display()))?;
        eprintln!(
            "{}: {} rows, {} kept, {} rejected",
            path.display(),
            r.rows,
            r.kept,
            r.rejected
        );
        for rej in r.rejections.iter().take(10) {
            eprintln!("  {rej}");
        }
        kept.extend(k);
        reports.push(r);
    }
    if kept.is_empty() {
        bail!("no example kept (generate with --per-type > 0 or import valid rows)");
    }
    let rejected: Vec<serde_json::Value> = reports
        .iter()
        .flat_map(|r| r.rejections.iter().map(move |x| serde_json::json!({ "source": r.source, "line": x.line, "rule": x.rule, "message": x.message, "id": x.id })))
        .collect();
    write_jsonl(&a.out.join("rejected.jsonl"), &rejected)?;
    let splits = split(&kept, a.seed);
    std::fs::create_dir_all(a.out.join("splits"))?;
    let mut sizes = serde_json::Map::new();
    for (name, ex) in splits.named() {
        write_jsonl(&a.out.join("splits").join(format!("{name}.jsonl")), ex)?;
        sizes.insert(
            name.into(),
            serde_json::json!({ "examples": ex.len(), "triplets": 2 * ex.len() }),
        );
    }
    let report = serde_json::json!({
        "generator": if a.per_type > 0 { serde_json::to_value(&cfg)? } else { serde_json::Value::Null },
        "generator_stats": gen_stats,
        "imports": reports.iter().map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            if let Some(o) = v.as_object_mut() { o.remove("rejections"); }
            v
        }).collect::<Vec<_>>(),
        "rejected_total": rejected.len(),
        "kept": kept.len(),
        "splits": sizes,
        "split_rule": "80/10/10 per trainable type (seeded shuffle of ids); deferred_bind_anaphoric and deferred_bind_respective held out entirely",
    });
    let report = common::config_json(report, None);
    common::write_json(&a.out.join("data_report.json"), &report)?;
    eprintln!(
        "data: {} examples kept, {} rejected → {} (train {}, val {}, test {}, held-out {} + {})",
        kept.len(),
        rejected.len(),
        a.out.display(),
        splits.train.len(),
        splits.val.len(),
        splits.test.len(),
        splits.heldout_anaphoric.len(),
        splits.heldout_respective.len()
    );
    Ok(splits)
}

fn read_splits(dir: &Path) -> Result<Splits> {
    let mut seen = Seen::default();
    let mut read = |name: &str| -> Result<Vec<Example>> {
        let p = dir.join("splits").join(format!("{name}.jsonl"));
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

fn run_train(a: &TrainArgs, device: &Device, device_spec: &str) -> Result<()> {
    if a.rank == 0 || a.batch_size == 0 || a.epochs == 0 {
        bail!("--rank, --batch-size and --epochs must be at least 1");
    }
    if !(a.lora_alpha.is_finite() && a.lora_alpha > 0.0 && a.lr.is_finite() && a.lr > 0.0) {
        bail!("--lora-alpha and --lr must be positive numbers");
    }
    let ckpt = common::resolve(&a.model)?;
    // Checked before anything is written, so a wrong model leaves no run directory behind.
    let mt = bindscope_models::registry::model_type(&ckpt)?;
    if !matches!(
        mt.as_str(),
        "bert" | "clip" | "clip_text_model" | "siglip" | "siglip_text_model"
    ) {
        bail!(
            "{}: model_type '{mt}': finetuning supports bert, clip, siglip text encoders",
            a.model
        )
    }
    let out = a.out.clone().unwrap_or_else(|| {
        common::runs_root("finetune").join(format!(
            "{}-{}",
            common::slug(&a.model),
            common::timestamp()
        ))
    });
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let splits = match &a.data {
        Some(d) => read_splits(d)?,
        None => {
            let d = out.join("data");
            if d.join("splits").is_dir() {
                read_splits(&d)?
            } else {
                run_data(&DataArgs {
                    out: d,
                    per_type: a.per_type,
                    seed: a.seed,
                    imports: Vec::new(),
                    scene_prob: 0.5,
                    distractor_prob: 0.3,
                    max_word_uses: None,
                    binding_distance: None,
                    registers: Vec::new(),
                })?
            }
        }
    };
    match mt.as_str() {
        "bert" => train_tower::<bindscope_models::bert::BertModel>(
            a,
            &ckpt,
            &splits,
            &out,
            device,
            device_spec,
        ),
        "clip" | "clip_text_model" => train_tower::<bindscope_models::clip::ClipTextModel>(
            a,
            &ckpt,
            &splits,
            &out,
            device,
            device_spec,
        ),
        "siglip" | "siglip_text_model" => train_tower::<bindscope_models::siglip::SiglipTextModel>(
            a,
            &ckpt,
            &splits,
            &out,
            device,
            device_spec,
        ),
        other => {
            bail!("model_type '{other}': finetuning supports bert, clip, siglip text encoders")
        }
    }
}

/// Everything measured on one model.
fn measure(
    model: &dyn TextEncoder,
    tok: &Tokenizer,
    device: &Device,
    sets: &[(&str, Vec<Triplet>)],
    saber: &[bindscope_saber::McqItem],
    batch: usize,
) -> Result<serde_json::Value> {
    let mut acc = serde_json::Map::new();
    let mut att = serde_json::Map::new();
    for (name, t) in sets {
        acc.insert(
            (*name).into(),
            serde_json::to_value(
                evaluate_triplets(model, tok, device, t, batch).map_err(|e| anyhow!(e))?,
            )?,
        );
        let m: MarginStats =
            attention_margins(model, tok, device, t, batch).map_err(|e| anyhow!(e))?;
        att.insert((*name).into(), serde_json::json!({ "per_layer": m.means(), "captions": m.count.first().copied().unwrap_or(0) }));
    }
    let saber_v = if saber.is_empty() {
        serde_json::Value::Null
    } else {
        let table = bindscope_saber::embed::embed_items_text(
            saber,
            tok,
            model,
            device,
            batch,
            &mut |_, _| {},
        )?;
        serde_json::to_value(bindscope_saber::eval::text_mcq_accuracy(saber, &table))?
    };
    Ok(
        serde_json::json!({ "triplet_accuracy": acc, "attention_margin": att, "saber_text_to_text": saber_v }),
    )
}

fn train_tower<M: TunableText>(
    a: &TrainArgs,
    ckpt: &Checkpoint,
    splits: &Splits,
    out: &Path,
    device: &Device,
    device_spec: &str,
) -> Result<()> {
    let t_start = Instant::now();
    let tok = bindscope_saber::embed::tokenizer_for(ckpt, None, None)?;
    let opts = LoadOptions::default();
    let mut train_t = triplets(&splits.train);
    if a.max_train_triplets > 0 {
        train_t.truncate(a.max_train_triplets);
    }
    if train_t.is_empty() {
        bail!(
            "the train split is empty: nothing to train on (check the data report of `finetune data`)"
        );
    }
    let sets: Vec<(&str, Vec<Triplet>)> = vec![
        ("test", triplets(&splits.test)),
        ("heldout_anaphoric", triplets(&splits.heldout_anaphoric)),
        ("heldout_respective", triplets(&splits.heldout_respective)),
    ];
    let saber = if a.saber_per_n > 0 {
        let cfg = bindscope_saber::GenerateConfig {
            independent_per_n: a.saber_per_n,
            chains: a.saber_per_n,
            ..Default::default()
        };
        bindscope_saber::generate::generate(&bindscope_saber::Vocabulary::builtin(), &cfg)?
    } else {
        Vec::new()
    };
    let attn = if a.attn_loss {
        let layers = a
            .attn_layers
            .as_deref()
            .map(|s| parse_range(s, "--attn-layers"))
            .transpose()?
            .unwrap_or((0, usize::MAX));
        Some(AttnLossConfig {
            tau: a.attn_tau,
            lambda: a.attn_lambda,
            layers,
        })
    } else {
        None
    };
    let cfg = TrainConfig {
        lora: LoraConfig {
            rank: a.rank,
            alpha: a.lora_alpha,
            seed: a.seed,
        },
        lr: a.lr,
        weight_decay: a.weight_decay,
        margin: a.margin,
        batch_size: a.batch_size,
        epochs: a.epochs,
        shuffle_seed: a.seed,
        attn,
        checkpoint_every: a.checkpoint_every,
        ..Default::default()
    };
    let lines = LinesConfig {
        alpha: a.lines_alpha,
        beta: a.lines_beta,
    };
    let config = serde_json::json!({
        "model": a.model,
        "model_type": bindscope_models::registry::model_type(ckpt)?,
        "weights_sha256": ckpt.weights_sha256().ok(),
        "train": cfg,
        "lines": lines,
        "lines_formula": "s_l = alpha + beta*(l-1)/(L-1), l = 1..L (Wang et al. 2024, arXiv:2410.17146); lambda (merging coefficient) = 1",
        "data": a.data,
        "train_triplets": train_t.len(),
        "eval_sets": sets.iter().map(|(n, t)| (n.to_string(), t.len())).collect::<std::collections::BTreeMap<_, _>>(),
        "saber_items": saber.len(),
    });
    let config = common::config_json(config, Some((device_spec, device)));
    common::write_json(&out.join("config.json"), &config)?;

    // Base model.
    let t0 = Instant::now();
    let base = M::load_tower(ckpt, device, &opts)?;
    let num_layers = base.info().num_layers;
    eprintln!("measuring the base model ...");
    let base_m = measure(&base, &tok, device, &sets, &saber, a.eval_batch)?;
    drop(base);
    let t_base = t0.elapsed().as_secs_f64();

    // Training.
    let t0 = Instant::now();
    let ad = device.clone().autodiff();
    let model = M::load_tower(ckpt, &ad, &opts)?;
    let mut trainer = Trainer::new(model, cfg.clone(), tok.clone(), &ad).map_err(|e| anyhow!(e))?;
    let trainable = bindscope_tuning::lora::trainable_params(&trainer.model);
    let ckpt_dir = out.join("checkpoints");
    std::fs::create_dir_all(&ckpt_dir)?;
    let log_path = out.join("train_log.jsonl");
    let total_steps = bindscope_tuning::train::schedule(train_t.len(), &cfg).len();
    let pb = common::progress(total_steps as u64, "finetune");
    let mut losses: Vec<f64> = Vec::new();
    let mut first = true;
    let done = train_run(
        &mut trainer,
        &train_t,
        &ckpt_dir,
        a.max_steps,
        &mut |log: &StepLog| {
            if first {
                // Drop log lines past the step we resumed from (written after the last checkpoint).
                truncate_log(&log_path, log.step - 1);
                pb.set_position((log.step - 1) as u64);
                first = false;
            }
            let _ = bindscope_core::fsutil::append_line(
                &log_path,
                &serde_json::to_string(log).unwrap_or_default(),
            );
            losses.push(log.loss);
            pb.set_position(log.step as u64);
            pb.set_message(format!("loss {:.4}", log.loss));
        },
    )
    .map_err(|e| anyhow!(e))?;
    pb.finish_and_clear();
    let t_train = t0.elapsed().as_secs_f64();
    if !done {
        eprintln!(
            "stopped after step {} of {total_steps} (--max-steps); run again with --out {} to resume",
            trainer.step,
            out.display()
        );
        return Ok(());
    }

    // Finetuned, with and without LiNeS.
    let t0 = Instant::now();
    let raw = adapters(&trainer.model, &cfg.lora);
    let scaled = lines_scaled(&raw, &lines, num_layers).map_err(|e| anyhow!(e))?;
    let no_lines = trainer.model.valid();
    drop(trainer);
    eprintln!("measuring the finetuned model without LiNeS ...");
    let no_lines_m = measure(&no_lines, &tok, device, &sets, &saber, a.eval_batch)?;
    let with_lines = set_adapters(no_lines, &scaled).map_err(|e| anyhow!(e))?;
    eprintln!("measuring the finetuned model with LiNeS ...");
    let lines_m = measure(&with_lines, &tok, device, &sets, &saber, a.eval_batch)?;
    let t_eval = t0.elapsed().as_secs_f64();

    // Export.
    let stems = checkpoint_stems::<M>(ckpt, raw.keys().cloned()).map_err(|e| anyhow!(e))?;
    write_peft_adapter::<M>(
        &out.join("adapter"),
        &scaled,
        &stems,
        &cfg.lora,
        &a.model,
        "LiNeS-scaled update folded into lora_B",
    )
    .map_err(|e| anyhow!(e))?;
    write_peft_adapter::<M>(
        &out.join("adapter_no_lines"),
        &raw,
        &stems,
        &cfg.lora,
        &a.model,
        "raw LoRA update (no LiNeS)",
    )
    .map_err(|e| anyhow!(e))?;
    write_merged(ckpt, &out.join("merged"), &scaled, &stems).map_err(|e| anyhow!(e))?;
    // The merged checkpoint must load strictly and give the LiNeS model's embeddings.
    let merged_ckpt = Checkpoint::from_dir(
        &out.join("merged").display().to_string(),
        &out.join("merged"),
    )?;
    let merged = M::load_tower(&merged_ckpt, device, &opts)?;
    let probe: Vec<&str> = sets[0]
        .1
        .iter()
        .take(16)
        .map(|t| t.anchor.as_str())
        .collect();
    let (ids, mask) = tok.encode_batch(&probe)?.tensors(device);
    let ours = with_lines.embed_text(ids.clone(), mask.clone());
    let diff = (merged.embed_text(ids, mask) - ours.clone())
        .abs()
        .max()
        .into_scalar::<f32>();
    let [_, e] = ours.dims();
    let flat = bindscope_core::device::to_host_f32(ours)?;
    let probe_json = serde_json::json!({
        "texts": probe,
        "embeddings": flat.chunks(e).collect::<Vec<_>>(),
        "max_length": tok.policy().max_length,
        "model": "finetuned_lines",
    });
    common::write_json(&out.join("probe_embeddings.json"), &probe_json)?;

    let report = serde_json::json!({
        "model": a.model,
        "train_triplets": train_t.len(),
        "steps": total_steps,
        "trainable_params": trainable,
        "final_losses": losses.iter().rev().take(10).rev().collect::<Vec<_>>(),
        "base": base_m,
        "finetuned_no_lines": no_lines_m,
        "finetuned_lines": lines_m,
        "lines": { "alpha": lines.alpha, "beta": lines.beta, "scales": (0..num_layers).map(|l| lines.scale(l, num_layers)).collect::<Vec<_>>() },
        "merged_vs_adapter_max_abs_diff": diff,
        "wall_seconds": { "base_eval": t_base, "train": t_train, "finetuned_eval": t_eval, "total": t_start.elapsed().as_secs_f64() },
    });
    common::write_json(&out.join("report.json"), &report)?;
    let md = report_md(&report);
    bindscope_core::fsutil::write_atomic(&out.join("report.md"), md.as_bytes())?;
    println!("{md}");
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn truncate_log(path: &Path, keep_steps: usize) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["step"].as_u64())
                .is_some_and(|s| s as usize <= keep_steps)
        })
        .collect();
    let mut body = kept.join("\n");
    if !body.is_empty() {
        body.push('\n');
    }
    let _ = bindscope_core::fsutil::write_atomic(path, body.as_bytes());
}

fn pct(v: &serde_json::Value) -> String {
    v.as_f64()
        .map_or("—".into(), |x| format!("{:.1}", 100.0 * x))
}

fn report_md(r: &serde_json::Value) -> String {
    let models = [
        ("base", "base"),
        ("finetuned (no LiNeS)", "finetuned_no_lines"),
        ("finetuned + LiNeS", "finetuned_lines"),
    ];
    let mut s = format!(
        "# Binding finetuning: {}\n\n{} training triplets, {} steps, {} trainable parameters; wall time {:.0} s (train {:.0} s).\n\n",
        r["model"].as_str().unwrap_or("?"),
        r["train_triplets"],
        r["steps"],
        r["trainable_params"],
        r["wall_seconds"]["total"].as_f64().unwrap_or(0.0),
        r["wall_seconds"]["train"].as_f64().unwrap_or(0.0)
    );
    s += "| model | triplet acc test (%) | held-out anaphoric (%) | held-out respective (%) | SABER text→text (%) |\n|---|---|---|---|---|\n";
    for (label, key) in models {
        let m = &r[key];
        s += &format!(
            "| {label} | {} | {} | {} | {} |\n",
            pct(&m["triplet_accuracy"]["test"]["accuracy"]),
            pct(&m["triplet_accuracy"]["heldout_anaphoric"]["accuracy"]),
            pct(&m["triplet_accuracy"]["heldout_respective"]["accuracy"]),
            pct(&m["saber_text_to_text"]["accuracy"])
        );
    }
    s += "\nAttention binding margin per layer (test split):\n\n| model | per layer |\n|---|---|\n";
    for (label, key) in models {
        let layers: Vec<String> = r[key]["attention_margin"]["test"]["per_layer"]
            .as_array()
            .map(|v| {
                v.iter()
                    .map(|x| x.as_f64().map_or("—".into(), |x| format!("{x:+.4}")))
                    .collect()
            })
            .unwrap_or_default();
        s += &format!("| {label} | {} |\n", layers.join(" "));
    }
    s += &format!(
        "\nMerged checkpoint vs adapter model, max abs embedding difference: {}\n",
        r["merged_vs_adapter_max_abs_diff"]
    );
    s
}
