//! `geb train`: a readout trained on a data directory's `train.json` (§4.3; the recipe is
//! [`TrainConfig`]).
//!
//! The run directory holds `config.json` (every resolved option, the decoder's and the
//! embeddings' hashes), `checkpoints/` (resume: the same command continues from the newest one
//! and repeats the uninterrupted run's numbers), `train_log.jsonl` (one [`StepLog`] per step),
//! and at the end `readout.safetensors` with `readout.json` (what `geb eval` needs to rebuild
//! it) and `loss_curve.svg` (the loss per step, [`crate::study::plots::train_plots`]).
//! Adapters are initialised from the seed's stream (`[NAMESPACE, INIT, slot]`).

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::run::{Output, RunContext, write_json};
use bindscope_core::train::{Checkpoints, Fingerprint};
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::lm::LmTokenizer;
use bindscope_models::generate::GenerationDefaults;
use bindscope_models::generate::chat::ChatTemplate;
use bindscope_models::llama::LlamaForCausalLM;
use serde::{Deserialize, Serialize};

use super::embed::Needs;
use super::{DataDir, Embedder, SlotKind, file_sha256, rows_sha256, slot_files};
use crate::readout::adapter::{AdapterDims, EmbeddingAdapter, PAPER_HIDDEN};
use crate::readout::chat::{ChatFormat, Mode, Sequence};
use crate::readout::conversation::read_llava;
use crate::readout::model::GenerativeReadout;
use crate::readout::standardize::Standardizer;
use crate::readout::train::{
    NAMESPACE, SlotTable, StepLog, TrainConfig, TrainSet, Trainer, apply_decoder_lora,
};

/// The adapters' initialisation purpose in the seed's stream.
const INIT: u64 = 1;

/// Everything `geb train` computes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainRun {
    /// The data directory.
    pub data: PathBuf,
    /// The decoder (`--decoder`: a directory or `org/name`).
    pub decoder: String,
    /// Visual-only or VL-joint.
    pub mode: Mode,
    /// The embeddings.
    pub embedder: Embedder,
    /// The recipe.
    pub recipe: TrainConfig,
    /// The adapters' hidden width.
    pub adapter_hidden: usize,
    /// Images or texts per embedding batch.
    pub embed_batch: usize,
    /// Stop after this many optimizer steps (a shortened run; `None`: the whole schedule).
    pub max_steps: Option<usize>,
    /// Standardise each embedding dimension with the training rows' mean and standard deviation
    /// before the adapter ([`crate::readout::standardize`]; not in the paper). Absent from the
    /// record when off, so runs without it keep their identity.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub standardize: bool,
}

impl TrainRun {
    /// The defaults of the paper for `data`, `decoder`, `mode`, `embedder`.
    pub fn new(data: PathBuf, decoder: String, mode: Mode, embedder: Embedder) -> Self {
        Self {
            data,
            decoder,
            mode,
            embedder,
            recipe: TrainConfig::default(),
            adapter_hidden: PAPER_HIDDEN,
            embed_batch: 32,
            max_steps: None,
            standardize: false,
        }
    }
}

/// What `readout.json` records: enough to rebuild the readout for evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadoutRecord {
    /// The run's configuration.
    pub run: TrainRun,
    /// The slots in order.
    pub slots: Vec<SlotKind>,
    /// Each slot's adapter sizes.
    pub adapters: Vec<AdapterDims>,
    /// The decoder's weights hash.
    pub decoder_sha256: String,
    /// Each slot's embedding file hash.
    pub embeddings_sha256: Vec<String>,
    /// Steps trained.
    pub steps: usize,
    /// Steps of the whole schedule (`steps < total_steps`: a run stopped by `--max-steps`).
    pub total_steps: usize,
    /// Each slot's standardisation (`--standardize`; empty without it), which evaluation
    /// applies to its items' embeddings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub standardizers: Vec<Standardizer>,
}

/// The decoder, its chat format, its EOS ids and the fill id, opened for training or
/// evaluation.
pub struct OpenedDecoder {
    /// The checkpoint.
    pub checkpoint: Checkpoint,
    /// Its weights' hash.
    pub sha256: String,
    /// The chat format with the slot token.
    pub format: ChatFormat,
    /// End-of-turn ids (`generation_config.json` `eos_token_id`).
    pub eos: Vec<u32>,
    /// The id at padding (`pad_token_id`, else the first EOS id).
    pub fill: u32,
}

/// Opens the decoder `spec`'s files (not its weights).
///
/// # Errors
/// In the flags' terms: an unresolvable spec, no tokenizer, no chat template, no EOS id.
pub fn open_decoder(spec: &str) -> Result<OpenedDecoder> {
    let checkpoint = Checkpoint::resolve(spec).with_context(|| format!("--decoder {spec}"))?;
    let sha256 = checkpoint.weights_sha256()?;
    let tok = LmTokenizer::from_checkpoint(&checkpoint)?;
    let template = ChatTemplate::from_dir(checkpoint.dir()).map_err(|e| anyhow!("{e}"))?;
    let defaults = GenerationDefaults::read(&checkpoint.config).map_err(anyhow::Error::msg)?;
    if defaults.eos_token_ids.is_empty() {
        bail!(
            "--decoder {spec}: no eos_token_id in generation_config.json or config.json (the readout supervises and stops at it)"
        );
    }
    let format = ChatFormat::new(spec, &tok, template, &defaults.eos_token_ids)?;
    let fill = defaults.pad_token_id.unwrap_or(defaults.eos_token_ids[0]);
    Ok(OpenedDecoder {
        checkpoint,
        sha256,
        format,
        eos: defaults.eos_token_ids,
        fill,
    })
}

/// The report of a training run.
#[derive(Debug, Clone, Serialize)]
pub struct TrainReport {
    /// The run directory.
    pub dir: PathBuf,
    /// Steps done.
    pub steps: usize,
    /// Training sequences.
    pub sequences: usize,
    /// Sequences cut at `max_tokens` (conversation id, length).
    pub truncated: Vec<(String, usize)>,
    /// Sequences left out: no supervised token within `max_tokens`.
    pub skipped: Vec<String>,
    /// Mean seconds per optimizer step of this invocation.
    pub seconds_per_step: f64,
    /// The last step's loss.
    pub last_loss: Option<f64>,
}

/// Runs `geb train`.
///
/// # Errors
/// Bad data (every bad conversation named), embeddings that do not cover the data, model or
/// device failures, a run directory of another run.
pub fn run(cfg: &TrainRun, out: &Output, ctx: &RunContext) -> Result<TrainReport> {
    let devices = 1 + ctx.replicas.len();
    if devices > 1 && cfg.recipe.grad_accum < devices {
        bail!(
            "--device {}: {devices} devices need at least {devices} micro-batches per step, and --grad-accum is {}",
            ctx.device_spec,
            cfg.recipe.grad_accum
        );
    }
    let data = DataDir::open(&cfg.data)?;
    let slots = cfg.embedder.slots(cfg.mode)?;
    let convs = read_llava(&data.train())?;
    let dec = open_decoder(&cfg.decoder)?;
    let device = ctx.device.clone().autodiff();
    let decoder = LlamaForCausalLM::load_family(&dec.checkpoint, &device, &LoadOptions::default())
        .with_context(|| format!("--decoder {}", cfg.decoder))?;
    let decoder = match &cfg.recipe.lora {
        None => decoder,
        Some(lora) => apply_decoder_lora(decoder, lora)
            .map_err(|e| anyhow!("--lora on --decoder {}: {e}", cfg.decoder))?,
    };
    let context = decoder.spec.context();
    // Sequences are cut at the shorter of --max-tokens and the decoder's context.
    let max_tokens = cfg.recipe.max_tokens.min(context);
    if max_tokens < cfg.recipe.max_tokens {
        eprintln!(
            "note: cutting sequences at the decoder's context of {context} tokens (--max-tokens {})",
            cfg.recipe.max_tokens
        );
    }
    let mut sequences: Vec<Sequence> = Vec::new();
    let mut keys: Vec<Vec<String>> = vec![Vec::new(); slots.len()];
    let mut needs = Needs::default();
    for c in &convs {
        let seqs = dec.format.sequences(c, cfg.mode, slots.len())?;
        for s in seqs {
            let k = s.turn.unwrap_or(0);
            let q = &c.turns[k].question;
            for (j, slot) in slots.iter().enumerate() {
                keys[j].push(slot.key(&c.image, q));
            }
            sequences.push(s);
        }
        needs.images.insert(c.image.clone());
        for t in &c.turns {
            needs.question(&c.image, &t.question);
        }
    }
    let files = slot_files(&cfg.embedder, &slots, &data, &needs, cfg.embed_batch, ctx)?;
    let mut tables = Vec::new();
    let mut hashes = Vec::new();
    let mut standardizers = Vec::new();
    for ((f, path), k) in files.iter().zip(&keys) {
        let refs: Vec<&str> = k.iter().map(String::as_str).collect();
        let mut rows = f
            .lookup(&refs, &path.display().to_string())
            .map_err(anyhow::Error::msg)?;
        hashes.push(rows_sha256(k, &rows));
        if cfg.standardize {
            // The statistics of the distinct embeddings: an image counts once, however many
            // turns its conversation has.
            let mut seen = std::collections::HashSet::new();
            let distinct: Vec<f32> = k
                .iter()
                .zip(rows.chunks(f.dim))
                .filter(|(key, _)| seen.insert(key.as_str()))
                .flat_map(|(_, r)| r.iter().copied())
                .collect();
            let s = Standardizer::fit(&distinct, f.dim)
                .map_err(|e| anyhow!("--standardize on {}: {e}", path.display()))?;
            s.apply(&mut rows);
            standardizers.push(s);
        }
        tables.push(SlotTable { dim: f.dim, rows });
    }
    let set = TrainSet::new(sequences, tables, max_tokens).map_err(anyhow::Error::msg)?;
    let train_sha = file_sha256(&data.train())?;
    // `max_steps` only says where this invocation stops (the schedule spans the whole run):
    // a shortened run and its continuation are one run.
    let whole = TrainRun {
        max_steps: None,
        ..cfg.clone()
    };
    // How often checkpoints are written changes no number: a run resumes under another
    // `--checkpoint-every` (config.json records the value in force).
    let mut run_json = serde_json::to_value(&whole)?;
    if let Some(recipe) = run_json.get_mut("recipe").and_then(|r| r.as_object_mut()) {
        recipe.remove("checkpoint_every");
    }
    let identity = serde_json::json!({
        "command": "geb train",
        "run": run_json,
        "slots": slots,
        "decoder_sha256": dec.sha256,
        "embeddings_sha256": hashes,
        "train_sha256": train_sha,
    });
    let dir = out.run_dir("geb", "train", &identity)?;
    // One process per run directory: a second would overwrite the other's checkpoints.
    let _lock = bindscope_core::run::lock_run_dir(&dir)?;
    write_json(
        &dir.join("config.json"),
        &ctx.config_json(serde_json::json!({
            "study": "geb",
            "identity": identity,
            "sequences": set.sequences.len(),
            "truncated": set.truncated,
            "skipped": set.skipped,
            "max_tokens_used": max_tokens,
            "checkpoint_every": cfg.recipe.checkpoint_every,
            // Data-parallel: the devices after the first (the `device` record's).
            "replicas": ctx.replicas.iter().map(|d| format!("{d:?}")).collect::<Vec<_>>(),
        })),
    )?;
    let d_dec = decoder.spec.hidden_size;
    let adapters: Vec<EmbeddingAdapter> = set
        .slots
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let mut rng =
                bindscope_core::rng::stream(cfg.recipe.seed, &[NAMESPACE, INIT, k as u64]);
            EmbeddingAdapter::init(
                AdapterDims {
                    embed: t.dim,
                    hidden: cfg.adapter_hidden,
                    decoder: d_dec,
                },
                &mut rng,
                &device,
            )
        })
        .collect();
    let dims: Vec<AdapterDims> = adapters.iter().map(EmbeddingAdapter::dims).collect();
    let model = GenerativeReadout { decoder, adapters };
    let n = set.sequences.len();
    let replicas = ctx.replicas.iter().map(|d| d.clone().autodiff()).collect();
    let mut trainer = Trainer::new(model, cfg.recipe.clone(), n, dec.fill, device)
        .with_replicas(replicas)
        .map_err(anyhow::Error::msg)?;
    let mut fp = Fingerprint::new();
    fp.json(&identity);
    let ckpts = Checkpoints::new(dir.join("checkpoints"), fp.hex());
    let log = dir.join("train_log.jsonl");
    if trainer.resume(&ckpts).map_err(anyhow::Error::msg)? {
        eprintln!("resuming at step {}", trainer.step);
        // Keep the log lines of the steps the checkpoint holds.
        if log.is_file() {
            let kept: Vec<StepLog> = bindscope_core::run::read_jsonl(&log, "training log")?
                .into_iter()
                .filter(|l: &StepLog| l.step <= trainer.step)
                .collect();
            let text: String = kept
                .iter()
                .map(|l| serde_json::to_string(l).map(|s| s + "\n"))
                .collect::<Result<_, _>>()?;
            bindscope_core::fsutil::write_atomic(&log, text.as_bytes())?;
        }
    } else if log.is_file() {
        std::fs::remove_file(&log)?;
    }
    let total = cfg
        .max_steps
        .map_or(trainer.total_steps(), |m| m.min(trainer.total_steps()));
    let bar = bindscope_core::run::progress(total as u64, "training");
    bar.set_position(trainer.step as u64);
    let (mut secs, mut done, mut last) = (0.0, 0usize, None);
    while trainer.step < total {
        let l = trainer.train_step(&set).map_err(anyhow::Error::msg)?;
        secs += l.seconds;
        done += 1;
        bar.set_message(format!(
            "loss {:.4}, {:.0} tokens/s",
            l.loss,
            l.tokens as f64 / l.seconds.max(1e-9)
        ));
        bar.inc(1);
        bindscope_core::run::append_jsonl(&log, &l)?;
        last = Some(l.loss);
        let every = cfg.recipe.checkpoint_every;
        if every > 0 && trainer.step.is_multiple_of(every) && trainer.step < total {
            trainer.save(&ckpts).map_err(anyhow::Error::msg)?;
        }
    }
    bar.finish_and_clear();
    trainer.save(&ckpts).map_err(anyhow::Error::msg)?;
    {
        use burn::module::Module;
        use burn::store::{BurnToPyTorchAdapter, ModuleSnapshot, SafetensorsStore};
        let tmp = dir.join("readout.safetensors.tmp");
        let mut store = SafetensorsStore::from_file(&tmp).with_to_adapter(BurnToPyTorchAdapter);
        // LoRA factors merged into the decoder's weights (a no-op without LoRA): the saved
        // readout is a plain one, whatever the recipe.
        trainer
            .model
            .clone()
            .materialize()
            .save_into(&mut store)
            .map_err(|e| anyhow!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, dir.join("readout.safetensors"))?;
    }
    write_json(
        &dir.join("readout.json"),
        &ReadoutRecord {
            run: cfg.clone(),
            slots,
            adapters: dims,
            decoder_sha256: dec.sha256,
            embeddings_sha256: hashes,
            steps: trainer.step,
            total_steps: trainer.total_steps(),
            standardizers,
        },
    )?;
    super::plots::train_plots(&dir)?;
    Ok(TrainReport {
        dir,
        steps: trainer.step,
        sequences: n,
        truncated: set.truncated,
        skipped: set.skipped,
        seconds_per_step: if done > 0 { secs / done as f64 } else { 0.0 },
        last_loss: last,
    })
}
