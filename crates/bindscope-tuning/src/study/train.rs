//! `finetune train`: LoRA finetuning of a text encoder for attribute–object binding, LiNeS,
//! evaluation and export.
//!
//! The run, in named steps ([`run`]): check the settings and the model (before anything is
//! written, so a wrong model leaves no run directory behind); read or generate the data;
//! write `config.json`; measure the base model; train (or resume) the adapters, checkpointing
//! in `checkpoints/` and logging every step to `train_log.jsonl`; measure the finetuned model
//! without and with LiNeS; export `adapter/` (PEFT, LiNeS folded in), `adapter_no_lines/`
//! (PEFT) and `merged/` (HF layout); check that the merged checkpoint loads strictly and gives
//! the LiNeS model's embeddings (`probe_embeddings.json`); write `report.json` / `report.md`.
//!
//! With `max_steps` the run stops after that many steps in total, leaving a checkpoint; the
//! same call with the same output directory resumes it.

use super::data;
use super::markdown;
use super::measure::{Measurement, measure};
use crate::example::Triplet;
use crate::lora::{
    HostAdapters, LinesConfig, TunableText, adapters, checkpoint_stems, lines_scaled, set_adapters,
    trainable_params, write_merged, write_peft_adapter,
};
use crate::split::{Splits, triplets};
use crate::train::{StepLog, TrainConfig, Trainer, schedule};
use anyhow::{Context, Result, anyhow, bail};
use bindscope_core::run::{Output, RunContext, append_jsonl, new_run_dir, slug, timestamp};
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::text::Tokenizer;
use bindscope_models::TextEncoder;
use bindscope_models::{bert, clip, siglip};
use bindscope_saber::McqItem;
use burn::tensor::Device;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the examples come from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum DataSource {
    /// A data directory written by `finetune data` (recorded as its path).
    Dir(PathBuf),
    /// Generated into `<run>/data` (read from there when an earlier invocation of the run made
    /// it).
    Generate(data::Config),
}

/// Every setting of `finetune train`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Config {
    /// Hugging Face id or local checkpoint directory of a text encoder (BERT/MiniLM, CLIP,
    /// SigLIP).
    pub model: String,
    /// The examples.
    pub data: DataSource,
    /// Train on the first N training triplets only (0: all).
    pub max_train_triplets: usize,
    /// LoRA, optimizer, loss, batches, checkpoints.
    pub train: TrainConfig,
    /// LiNeS coefficients.
    pub lines: LinesConfig,
    /// Stop after this many steps in total (an interruption; the run resumes when called again).
    pub max_steps: Option<usize>,
    /// SABER items per N for each of independent and chain items (0: no SABER).
    pub saber_per_n: usize,
    /// Texts per forward pass in evaluation.
    pub eval_batch: usize,
}

impl Config {
    /// Refuses degenerate settings (in the terms of the command line).
    fn check(&self) -> Result<()> {
        let t = &self.train;
        for (flag, v) in [
            ("--rank", t.lora.rank),
            ("--batch-size", t.batch_size),
            ("--epochs", t.epochs),
            ("--eval-batch", self.eval_batch),
        ] {
            if v == 0 {
                bail!("{flag} must be at least 1 (got 0)");
            }
        }
        for (flag, v) in [("--lora-alpha", t.lora.alpha), ("--lr", t.lr)] {
            if !(v.is_finite() && v > 0.0) {
                bail!("{flag} must be a positive number (got {v})");
            }
        }
        Ok(())
    }
}

/// The LiNeS scaling as applied: the coefficients and each layer's scale.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LinesScales {
    /// Scale of the first layer.
    pub alpha: f64,
    /// Added linearly up to the last layer.
    pub beta: f64,
    /// `s_ℓ` of each layer (0-based), [`LinesConfig::scale`].
    pub scales: Vec<f64>,
}

/// Wall-clock seconds of the parts of a run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct WallSeconds {
    /// Measuring the base model (loading included).
    pub base_eval: f64,
    /// Training (loading and resuming included).
    pub train: f64,
    /// Measuring the finetuned model without and with LiNeS.
    pub finetuned_eval: f64,
    /// The whole run after the data was read.
    pub total: f64,
}

/// What a finished run computed: the contents of `report.json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Results {
    /// The model as given.
    pub model: String,
    /// Training triplets.
    pub train_triplets: usize,
    /// Optimizer steps of the whole run.
    pub steps: usize,
    /// Trainable (LoRA) parameters.
    pub trainable_params: usize,
    /// Losses of the last (up to) 10 steps of the whole run, in step order, read back from
    /// `train_log.jsonl` (a resumed run included the steps before its interruption).
    pub final_losses: Vec<f64>,
    /// The base model.
    pub base: Measurement,
    /// The finetuned model, raw LoRA update.
    pub finetuned_no_lines: Measurement,
    /// The finetuned model with LiNeS.
    pub finetuned_lines: Measurement,
    /// The LiNeS scaling.
    pub lines: LinesScales,
    /// Max |merged checkpoint − adapter model| over the embeddings of 16 test anchors.
    pub merged_vs_adapter_max_abs_diff: f32,
    /// Timings.
    pub wall_seconds: WallSeconds,
}

/// How a `finetune train` run ended.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Report {
    /// Stopped at `max_steps`, with a checkpoint; calling again resumes.
    Stopped {
        /// The run directory.
        dir: PathBuf,
        /// Steps done.
        step: usize,
        /// Steps of the whole run.
        total_steps: usize,
    },
    /// Trained, measured and exported.
    Finished {
        /// The run directory.
        dir: PathBuf,
        /// `report.json`.
        results: Box<Results>,
    },
}

/// The text towers finetuning supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tower {
    Bert,
    Clip,
    Siglip,
}

/// The tower of `ckpt` and its `model_type`.
fn tower_of(ckpt: &Checkpoint, model: &str) -> Result<(Tower, String)> {
    let mt = bindscope_models::registry::model_type(ckpt)?;
    let tower = match mt.as_str() {
        "bert" => Tower::Bert,
        clip::MODEL_TYPE | clip::TEXT_MODEL_TYPE => Tower::Clip,
        siglip::MODEL_TYPE | siglip::TEXT_MODEL_TYPE => Tower::Siglip,
        _ => bail!(
            "{model}: model_type '{mt}': finetuning supports bert, clip, siglip text encoders"
        ),
    };
    Ok((tower, mt))
}

/// `finetune train` (module docs): trains in `output.dir` (default
/// `runs/finetune/<model>-<time>`), resuming the run an existing directory holds.
///
/// # Errors
/// Degenerate settings, an unsupported model, unreadable data, an empty train split, a
/// checkpoint of another run, a non-finite loss, I/O errors.
pub fn run(config: &Config, output: &Output, ctx: &RunContext) -> Result<Report> {
    config.check()?;
    let ckpt = Checkpoint::resolve(&config.model)?;
    // Checked before anything is written, so a wrong model leaves no run directory behind.
    let (tower, model_type) = tower_of(&ckpt, &config.model)?;
    let dir = match &output.dir {
        Some(d) => d.clone(),
        None => new_run_dir(
            "finetune",
            &format!("{}-{}", slug(&config.model), timestamp()),
        )?,
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let splits = read_data(config, &dir, ctx)?;
    let session = Session::new(config, &ckpt, &model_type, &dir, ctx, &splits)?;
    match tower {
        Tower::Bert => session.run::<bert::BertModel>(),
        Tower::Clip => session.run::<clip::ClipTextModel>(),
        Tower::Siglip => session.run::<siglip::SiglipTextModel>(),
    }
}

/// The splits: read from `--data`, or from `<dir>/data`, generated there first if needed.
fn read_data(config: &Config, dir: &Path, ctx: &RunContext) -> Result<Splits> {
    match &config.data {
        DataSource::Dir(d) => data::read_splits(d),
        DataSource::Generate(generate) => {
            let d = dir.join("data");
            if data::has_splits(&d) {
                data::read_splits(&d)
            } else {
                Ok(data::write_new(generate, &d, ctx)?.data)
            }
        }
    }
}

/// One run's settings, model, data and evaluation sets.
struct Session<'a> {
    config: &'a Config,
    ckpt: &'a Checkpoint,
    model_type: &'a str,
    dir: &'a Path,
    ctx: &'a RunContext,
    tok: Tokenizer,
    train: Vec<Triplet>,
    /// `test` first: its anchors are the merged-checkpoint probe.
    sets: Vec<(&'static str, Vec<Triplet>)>,
    saber: Vec<McqItem>,
    started: Instant,
}

/// How training ended.
enum Trained<M> {
    /// Stopped at `max_steps` after `step` of `total_steps` steps.
    Stopped { step: usize, total_steps: usize },
    /// Every step done.
    Done(Finetuned<M>),
}

/// The adapters after training.
struct Finetuned<M> {
    /// The finetuned model (raw LoRA update), off the autodiff device.
    model: M,
    /// The LoRA factors.
    adapters: HostAdapters,
    trainable: usize,
    total_steps: usize,
    /// The losses of every step of the run, in step order ([`run_losses`]).
    losses: Vec<f64>,
}

impl<'a> Session<'a> {
    /// Reads the tokenizer, the training triplets (`max_train_triplets`), the evaluation sets
    /// and the SABER items.
    fn new(
        config: &'a Config,
        ckpt: &'a Checkpoint,
        model_type: &'a str,
        dir: &'a Path,
        ctx: &'a RunContext,
        splits: &Splits,
    ) -> Result<Self> {
        let started = Instant::now();
        let tok = bindscope_saber::embed::tokenizer_for(ckpt, None, None)?;
        let mut train = triplets(&splits.train);
        if config.max_train_triplets > 0 {
            train.truncate(config.max_train_triplets);
        }
        if train.is_empty() {
            bail!(
                "the train split is empty: nothing to train on (check the data report of `finetune data`)"
            );
        }
        for w in data::split_warnings(splits) {
            eprintln!("warning: {w}");
        }
        let sets = vec![
            ("test", triplets(&splits.test)),
            ("heldout_anaphoric", triplets(&splits.heldout_anaphoric)),
            ("heldout_respective", triplets(&splits.heldout_respective)),
        ];
        let saber = if config.saber_per_n > 0 {
            let cfg = bindscope_saber::GenerateConfig {
                independent_per_n: config.saber_per_n,
                chains: config.saber_per_n,
                ..Default::default()
            };
            bindscope_saber::generate::generate(&bindscope_saber::Vocabulary::builtin(), &cfg)?
        } else {
            Vec::new()
        };
        Ok(Self {
            config,
            ckpt,
            model_type,
            dir,
            ctx,
            tok,
            train,
            sets,
            saber,
            started,
        })
    }

    fn device(&self) -> &Device {
        &self.ctx.device
    }

    fn measure(&self, model: &dyn TextEncoder) -> Result<Measurement> {
        measure(
            model,
            &self.tok,
            self.device(),
            &self.sets,
            &self.saber,
            self.config.eval_batch,
        )
    }

    /// The whole run on the tower `M`.
    fn run<M: TunableText>(&self) -> Result<Report> {
        self.write_config()?;

        let t0 = Instant::now();
        let base = M::load_tower(self.ckpt, self.device(), &LoadOptions::default())?;
        let num_layers = base.info().num_layers;
        eprintln!("measuring the base model ...");
        let base_m = self.measure(&base)?;
        drop(base);
        let t_base = t0.elapsed().as_secs_f64();

        let t0 = Instant::now();
        let trained = match self.train::<M>()? {
            Trained::Done(t) => t,
            Trained::Stopped { step, total_steps } => {
                return Ok(Report::Stopped {
                    dir: self.dir.to_path_buf(),
                    step,
                    total_steps,
                });
            }
        };
        let t_train = t0.elapsed().as_secs_f64();

        let t0 = Instant::now();
        let lines = &self.config.lines;
        let scaled = lines_scaled(&trained.adapters, lines, num_layers).map_err(|e| anyhow!(e))?;
        eprintln!("measuring the finetuned model without LiNeS ...");
        let no_lines_m = self.measure(&trained.model)?;
        let with_lines = set_adapters(trained.model, &scaled).map_err(|e| anyhow!(e))?;
        eprintln!("measuring the finetuned model with LiNeS ...");
        let lines_m = self.measure(&with_lines)?;
        let t_eval = t0.elapsed().as_secs_f64();

        self.export::<M>(&trained.adapters, &scaled)?;
        let diff = self.check_merged::<M>(&with_lines)?;

        let results = Results {
            model: self.config.model.clone(),
            train_triplets: self.train.len(),
            steps: trained.total_steps,
            trainable_params: trained.trainable,
            final_losses: last(&trained.losses, 10).to_vec(),
            base: base_m,
            finetuned_no_lines: no_lines_m,
            finetuned_lines: lines_m,
            lines: LinesScales {
                alpha: lines.alpha,
                beta: lines.beta,
                scales: (0..num_layers)
                    .map(|l| lines.scale(l, num_layers))
                    .collect(),
            },
            merged_vs_adapter_max_abs_diff: diff,
            wall_seconds: WallSeconds {
                base_eval: t_base,
                train: t_train,
                finetuned_eval: t_eval,
                total: self.started.elapsed().as_secs_f64(),
            },
        };
        self.write_report(&results)?;
        Ok(Report::Finished {
            dir: self.dir.to_path_buf(),
            results: Box::new(results),
        })
    }

    /// `config.json`: the run's [`Config`] as its identity, what was derived from it (the
    /// model's type and weights, the sizes of the data), and the provenance.
    fn write_config(&self) -> Result<()> {
        #[derive(serde::Serialize)]
        struct Recorded<'r> {
            study: &'static str,
            identity: &'r Config,
            model_type: &'r str,
            weights_sha256: Option<String>,
            lines_formula: &'static str,
            train_triplets: usize,
            eval_sets: BTreeMap<&'static str, usize>,
            saber_items: usize,
        }
        let recorded = Recorded {
            study: "finetune",
            identity: self.config,
            model_type: self.model_type,
            weights_sha256: self.ckpt.weights_sha256().ok(),
            lines_formula: "s_l = alpha + beta*(l-1)/(L-1), l = 1..L (Wang et al. 2024, arXiv:2410.17146); lambda (merging coefficient) = 1",
            train_triplets: self.train.len(),
            eval_sets: self.sets.iter().map(|(n, t)| (*n, t.len())).collect(),
            saber_items: self.saber.len(),
        };
        let config = self.ctx.config_json(serde_json::to_value(&recorded)?);
        bindscope_core::run::write_json(&self.dir.join("config.json"), &config)?;
        Ok(())
    }

    /// Trains (or resumes) the adapters, up to `max_steps` in total.
    fn train<M: TunableText>(&self) -> Result<Trained<M>> {
        let cfg = &self.config.train;
        let ad = self.device().clone().autodiff();
        let model = M::load_tower(self.ckpt, &ad, &LoadOptions::default())?;
        let mut trainer =
            Trainer::new(model, cfg.clone(), self.tok.clone(), &ad).map_err(|e| anyhow!(e))?;
        let trainable = trainable_params(&trainer.model);
        let ckpt_dir = self.dir.join("checkpoints");
        std::fs::create_dir_all(&ckpt_dir)?;
        let log_path = self.dir.join("train_log.jsonl");
        let total_steps = schedule(self.train.len(), cfg).len();
        let pb = bindscope_core::run::progress(total_steps as u64, "finetune");
        let mut losses: Vec<f64> = Vec::new();
        let mut first = true;
        let done = crate::train::run(
            &mut trainer,
            &self.train,
            &ckpt_dir,
            self.config.max_steps,
            &mut |log: &StepLog| {
                if first {
                    // Drop log lines past the step we resumed from (written after the last checkpoint).
                    truncate_log(&log_path, log.step - 1);
                    pb.set_position((log.step - 1) as u64);
                    first = false;
                }
                let _ = append_jsonl(&log_path, log);
                losses.push(log.loss);
                pb.set_position(log.step as u64);
                pb.set_message(format!("loss {:.4}", log.loss));
            },
        )
        .map_err(|e| anyhow!(e))?;
        pb.finish_and_clear();
        if !done {
            eprintln!(
                "stopped after step {} of {total_steps} (--max-steps); run again with --out {} to resume",
                trainer.step,
                self.dir.display()
            );
            return Ok(Trained::Stopped {
                step: trainer.step,
                total_steps,
            });
        }
        let adapters = adapters(&trainer.model, &cfg.lora);
        Ok(Trained::Done(Finetuned {
            model: trainer.model.valid(),
            adapters,
            trainable,
            total_steps,
            losses: run_losses(&log_path, total_steps, &losses)?,
        }))
    }

    /// Writes `adapter/` (LiNeS folded in), `adapter_no_lines/` and `merged/`.
    fn export<M: TunableText>(&self, raw: &HostAdapters, scaled: &HostAdapters) -> Result<()> {
        let lora = &self.config.train.lora;
        let model = &self.config.model;
        let stems =
            checkpoint_stems::<M>(self.ckpt, raw.keys().cloned()).map_err(|e| anyhow!(e))?;
        let peft = |dir: &str, adapters: &HostAdapters, what: &str| {
            write_peft_adapter::<M>(&self.dir.join(dir), adapters, &stems, lora, model, what)
                .map_err(|e| anyhow!(e))
        };
        peft("adapter", scaled, "LiNeS-scaled update folded into lora_B")?;
        peft("adapter_no_lines", raw, "raw LoRA update (no LiNeS)")?;
        write_merged(self.ckpt, &self.dir.join("merged"), scaled, &stems)
            .map_err(|e| anyhow!(e))?;
        Ok(())
    }

    /// Loads `merged/` strictly and embeds the first 16 test anchors with it and with
    /// `with_lines`; writes `probe_embeddings.json` (the LiNeS model's embeddings) and returns
    /// the largest absolute difference.
    fn check_merged<M: TunableText>(&self, with_lines: &M) -> Result<f32> {
        let device = self.device();
        let merged_dir = self.dir.join("merged");
        let merged_ckpt = Checkpoint::from_dir(&merged_dir.display().to_string(), &merged_dir)?;
        let merged = M::load_tower(&merged_ckpt, device, &LoadOptions::default())?;
        let probe: Vec<&str> = self.sets[0]
            .1
            .iter()
            .take(16)
            .map(|t| t.anchor.as_str())
            .collect();
        let (ids, mask) = self.tok.encode_batch(&probe)?.tensors(device);
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
            "max_length": self.tok.policy().max_length,
            "model": "finetuned_lines",
        });
        bindscope_core::run::write_json(&self.dir.join("probe_embeddings.json"), &probe_json)?;
        Ok(diff)
    }

    /// `report.json`, `report.md` (also printed).
    fn write_report(&self, results: &Results) -> Result<()> {
        // Through a JSON value, as before: its object keys are sorted.
        bindscope_core::run::write_json(
            &self.dir.join("report.json"),
            &serde_json::to_value(results)?,
        )?;
        let md = markdown::report(results);
        bindscope_core::fsutil::write_atomic(&self.dir.join("report.md"), md.as_bytes())?;
        println!("{md}");
        eprintln!("wrote {}", self.dir.display());
        Ok(())
    }
}

/// The loss of every step of a finished run of `total_steps` steps, in step order: the
/// training log `log` (one [`StepLog`] per step; a resumed run re-did the steps after its
/// checkpoint, the later line of a step counts), `this_invocation`'s losses (the last steps) as
/// a fallback when the log is missing.
///
/// # Errors
/// An unreadable log or a line that is not a step record (named by file and line).
fn run_losses(log: &Path, total_steps: usize, this_invocation: &[f64]) -> Result<Vec<f64>> {
    let logged: Vec<StepLog> = bindscope_core::run::read_jsonl(log, "training step")?;
    let mut by_step: BTreeMap<usize, f64> = BTreeMap::new();
    for l in logged {
        if (1..=total_steps).contains(&l.step) {
            by_step.insert(l.step, l.loss);
        }
    }
    if by_step.is_empty() {
        return Ok(this_invocation.to_vec());
    }
    Ok(by_step.into_values().collect())
}

/// The last `n` items of `v` (all of them when there are fewer).
fn last<T>(v: &[T], n: usize) -> &[T] {
    &v[v.len().saturating_sub(n)..]
}

/// Keeps the lines of the JSON-lines log at `path` whose `step` is at most `keep_steps` (a
/// resumed run re-does the steps after its checkpoint). A missing log is left alone.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(data: DataSource) -> Config {
        Config {
            model: "m".into(),
            data,
            max_train_triplets: 0,
            train: TrainConfig::default(),
            lines: LinesConfig::default(),
            max_steps: Some(3),
            saber_per_n: 0,
            eval_batch: 64,
        }
    }

    /// `config.json` records the config; it must read back as the same value, whichever the
    /// data source (the untagged enum tells a path from a generator config).
    #[test]
    fn configs_read_back_from_their_json() {
        for data in [
            DataSource::Dir("runs/finetune/data".into()),
            DataSource::Generate(data::Config::generated(5, 2)),
        ] {
            let c = config(data);
            let v = serde_json::to_value(&c).unwrap();
            assert_eq!(serde_json::from_value::<Config>(v).unwrap(), c);
        }
        let v = serde_json::to_value(config(DataSource::Dir("d".into()))).unwrap();
        assert_eq!(v["data"], "d", "a data directory is recorded as its path");
    }

    #[test]
    fn degenerate_settings_name_their_flags() {
        let mut c = config(DataSource::Dir("d".into()));
        c.train.batch_size = 0;
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("--batch-size"), "{e}");
        let mut c = config(DataSource::Dir("d".into()));
        c.train.lr = f64::NAN;
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("--lr"), "{e}");
        // Each message names the one flag that is wrong, not a list of candidates.
        let mut c = config(DataSource::Dir("d".into()));
        c.train.epochs = 0;
        let e = c.check().unwrap_err().to_string();
        assert_eq!(e, "--epochs must be at least 1 (got 0)");
        let mut c = config(DataSource::Dir("d".into()));
        c.train.lora.alpha = -1.0;
        let e = c.check().unwrap_err().to_string();
        assert_eq!(e, "--lora-alpha must be a positive number (got -1)");
        let mut c = config(DataSource::Dir("d".into()));
        c.eval_batch = 0;
        assert!(
            c.check()
                .unwrap_err()
                .to_string()
                .starts_with("--eval-batch")
        );
        assert!(config(DataSource::Dir("d".into())).check().is_ok());
    }

    /// A resumed run's losses come from the whole log, not from the steps after the resume;
    /// a step re-done after the checkpoint counts once, with its later loss.
    #[test]
    fn final_losses_cover_the_whole_run() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("train_log.jsonl");
        let step = |s: usize, loss: f64| StepLog {
            step: s,
            loss,
            triplet_loss: loss,
            attn_loss: None,
            batch: 2,
            seconds: 0.0,
        };
        // First invocation: steps 1–4 (stopped); the resume re-does step 4 and runs 5–12.
        for s in 1..=4 {
            append_jsonl(&log, &step(s, s as f64)).unwrap();
        }
        append_jsonl(&log, &step(4, 40.0)).unwrap();
        let this: Vec<f64> = (5..=12).map(|s| s as f64).collect();
        for (i, l) in this.iter().enumerate() {
            append_jsonl(&log, &step(i + 5, *l)).unwrap();
        }
        let all = run_losses(&log, 12, &this).unwrap();
        assert_eq!(all.len(), 12);
        assert_eq!(all[3], 40.0);
        assert_eq!(
            last(&all, 10),
            &[3.0, 40.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
        );
        // No log: this invocation's losses.
        assert_eq!(
            run_losses(&dir.path().join("none"), 12, &this).unwrap(),
            this
        );
    }

    #[test]
    fn last_keeps_the_tail() {
        assert_eq!(last(&[1, 2, 3], 2), &[2, 3]);
        assert_eq!(last(&[1, 2, 3], 10), &[1, 2, 3]);
        assert!(last::<u8>(&[], 10).is_empty());
    }
}
