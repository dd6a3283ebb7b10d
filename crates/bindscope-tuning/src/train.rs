//! Training: hinge triplet loss over cosine similarity, AdamW on the LoRA factors, constant
//! learning rate, optional attention-margin loss, and periodic atomic checkpoints to resume an
//! interrupted run.
//!
//! Loss of a batch of `B` triplets (anchor `a`, positive `p`, negative `n`):
//! `L = mean_b max(0, m − cos(a_b, p_b) + cos(a_b, n_b))` with margin `m = 0.05`, plus
//! `λ_attn · L_attn` when the attention loss is on ([`crate::attention::attention_loss`] over the
//! anchors and positives, `τ = 0.1`, `λ_attn = 0.1`). The `3B` texts go through the encoder in
//! one padded forward pass.
//!
//! Optimizer: AdamW (Loshchilov & Hutter, 2019) with torch's defaults set explicitly
//! (β = (0.9, 0.999), ε = 1e-8; burn's defaults are ε = 1e-5, weight decay 1e-4), weight decay
//! 0.01, learning rate 5e-5 constant, one epoch. Batches: the triplets shuffled with the seed
//! (ChaCha20 stream 200 + epoch), cut into `batch_size` chunks (the last one may be short).
//!
//! ## Checkpoints
//! Every `checkpoint_every` steps (and at the end) the trainer writes `step-NNNNNN/` with
//! `adapter.safetensors` (the LoRA factors by module path), `optimizer.bpk` (burn's AdamW state,
//! keyed by the factors' path-derived ids) and `state.json` (step, fingerprint), then replaces
//! `latest.json` atomically to point at it and removes older step directories. A run killed at
//! any moment resumes from the last complete checkpoint; the fingerprint (hash of the config and
//! of the triplet ids in order) makes a resume with other data or settings an error.

use crate::attention::{BindingWeights, attention_loss, binding_weights};
use crate::example::Triplet;
use crate::lora::{
    LoraConfig, TunableText, adapters, apply_lora, load_host_adapters, save_host_adapters,
    set_adapters,
};
use bindscope_data::text::Tokenizer;
use bindscope_models::ForwardOptions;
use bindscope_saber::generate::Rng;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;
use burn::tensor::activation::relu;
use std::path::{Path, PathBuf};

/// The optional attention-margin loss.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AttnLossConfig {
    /// Target margin `τ`.
    pub tau: f64,
    /// Weight `λ_attn`.
    pub lambda: f64,
    /// Layers `[start, end)` (0-based) the loss covers.
    pub layers: (usize, usize),
}

/// Every training setting.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainConfig {
    /// LoRA rank, α, init seed.
    pub lora: LoraConfig,
    /// Learning rate (constant).
    pub lr: f64,
    /// AdamW decoupled weight decay.
    pub weight_decay: f32,
    /// AdamW ε.
    pub epsilon: f32,
    /// AdamW β₁.
    pub beta1: f32,
    /// AdamW β₂.
    pub beta2: f32,
    /// Hinge margin.
    pub margin: f64,
    /// Triplets per step.
    pub batch_size: usize,
    /// Epochs.
    pub epochs: usize,
    /// Seed of the batch order.
    pub shuffle_seed: u64,
    /// Attention loss, off when `None`.
    pub attn: Option<AttnLossConfig>,
    /// Steps between checkpoints (0: only at the end).
    pub checkpoint_every: usize,
}

impl Default for TrainConfig {
    /// The recipe of the issue: r = 4, α = 4, lr 5e-5, weight decay 0.01, ε = 1e-8, margin
    /// 0.05, batch 32, one epoch, no attention loss; checkpoints every 25 steps.
    fn default() -> Self {
        Self {
            lora: LoraConfig::default(),
            lr: 5e-5,
            weight_decay: 0.01,
            epsilon: 1e-8,
            beta1: 0.9,
            beta2: 0.999,
            margin: 0.05,
            batch_size: 32,
            epochs: 1,
            shuffle_seed: 0,
            attn: None,
            checkpoint_every: 25,
        }
    }
}

/// Row-wise cosine similarity.
///
/// # Shapes
/// `a, b: [N, E]` → `[N]`.
pub fn cosine_rows(a: Tensor<2>, b: Tensor<2>) -> Tensor<1> {
    let [n, _] = a.dims();
    let norm = |x: Tensor<2>| {
        let l = x.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
        x / l
    };
    (norm(a) * norm(b)).sum_dim(1).reshape([n])
}

/// `mean_b max(0, margin − cos(a_b, p_b) + cos(a_b, n_b))`.
///
/// # Shapes
/// `a, p, n: [B, E]` → `[1]`.
pub fn triplet_loss(a: Tensor<2>, p: Tensor<2>, n: Tensor<2>, margin: f64) -> Tensor<1> {
    let pos = cosine_rows(a.clone(), p);
    let neg = cosine_rows(a, n);
    relu(neg - pos + margin).mean()
}

/// One step's numbers.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StepLog {
    /// 1-based step.
    pub step: usize,
    /// Total loss.
    pub loss: f64,
    /// Triplet part.
    pub triplet_loss: f64,
    /// Attention part (before `λ`).
    pub attn_loss: Option<f64>,
    /// Triplets in the batch.
    pub batch: usize,
    /// Wall seconds of the step.
    pub seconds: f64,
}

/// The run's AdamW ([`bindscope_core::train::AdamW`] with this config's settings).
fn adamw(cfg: &TrainConfig) -> burn::optim::AdamWConfig {
    bindscope_core::train::AdamW {
        beta1: cfg.beta1,
        beta2: cfg.beta2,
        epsilon: cfg.epsilon,
        weight_decay: cfg.weight_decay,
    }
    .config()
}

/// The batches of a run: triplet indices, every epoch shuffled.
pub fn schedule(n: usize, cfg: &TrainConfig) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for e in 0..cfg.epochs {
        let mut idx: Vec<usize> = (0..n).collect();
        Rng::new(cfg.shuffle_seed, 200 + e as u64).shuffle(&mut idx);
        out.extend(idx.chunks(cfg.batch_size.max(1)).map(<[usize]>::to_vec));
    }
    out
}

/// A LoRA model on an autodiff device with its optimizer.
pub struct Trainer<M: TunableText> {
    /// The model with adapters (autodiff device).
    pub model: M,
    optim: ModuleOptimizer,
    /// Steps done.
    pub step: usize,
    /// Settings.
    pub cfg: TrainConfig,
    tokenizer: Tokenizer,
    device: Device,
}

impl<M: TunableText> Trainer<M> {
    /// Attaches adapters to `model` (loaded on `device`, an autodiff device) and builds AdamW.
    ///
    /// # Errors
    /// A non-autodiff device, or no LoRA target.
    pub fn new(
        model: M,
        cfg: TrainConfig,
        tokenizer: Tokenizer,
        device: &Device,
    ) -> Result<Self, String> {
        if !device.is_autodiff() {
            return Err("training needs an autodiff device (device.autodiff())".into());
        }
        let model = apply_lora(model, &cfg.lora)?;
        let optim = adamw(&cfg).init();
        Ok(Self {
            model,
            optim,
            step: 0,
            cfg,
            tokenizer,
            device: device.clone(),
        })
    }

    /// Forward and loss of a batch (no update): `(total, triplet, attention)`.
    ///
    /// # Errors
    /// Tokenization errors.
    pub fn loss(
        &self,
        batch: &[&Triplet],
    ) -> Result<(Tensor<1>, Tensor<1>, Option<Tensor<1>>), String> {
        let b = batch.len();
        let texts: Vec<&str> = batch
            .iter()
            .map(|t| t.anchor.as_str())
            .chain(batch.iter().map(|t| t.positive.as_str()))
            .chain(batch.iter().map(|t| t.negative.as_str()))
            .collect();
        let enc = self
            .tokenizer
            .encode_batch(&texts)
            .map_err(|e| e.to_string())?;
        let (ids, mask) = enc.tensors(&self.device);
        let want_attn = self.cfg.attn.is_some();
        let out = self.model.forward_text(
            ids,
            mask.clone(),
            ForwardOptions {
                output_hidden_states: false,
                output_attentions: want_attn,
            },
        );
        let emb = self.model.embedding_from(&out, mask);
        let [_, e] = emb.dims();
        let a = emb.clone().slice([0..b, 0..e]);
        let p = emb.clone().slice([b..2 * b, 0..e]);
        let n = emb.slice([2 * b..3 * b, 0..e]);
        let tl = triplet_loss(a, p, n, self.cfg.margin);
        let mut total = tl.clone();
        let mut al = None;
        if let (Some(cfg), Some(atts)) = (&self.cfg.attn, out.attentions.as_ref()) {
            let t = enc.seq_len();
            let bind: Vec<&[[String; 2]]> = batch
                .iter()
                .map(|t| t.bindings.as_slice())
                .chain(batch.iter().map(|t| t.bindings.as_slice()))
                .collect();
            let w: BindingWeights = binding_weights(&self.tokenizer, &texts[..2 * b], &bind, t)?;
            // Attention maps of anchors and positives only: rows 0..2B.
            let atts2: Vec<Tensor<4>> = atts
                .iter()
                .map(|x| {
                    let [_, h, tq, tk] = x.dims();
                    x.clone().slice([0..2 * b, 0..h, 0..tq, 0..tk])
                })
                .collect();
            let end = cfg.layers.1.min(atts2.len());
            if let Some(l) = attention_loss(&atts2, cfg.layers.0.min(end)..end, &w, cfg.tau) {
                total = total + l.clone() * cfg.lambda;
                al = Some(l);
            }
        }
        Ok((total, tl, al))
    }

    /// One optimizer step on `batch`.
    ///
    /// # Errors
    /// Tokenization errors.
    pub fn train_step(&mut self, batch: &[&Triplet]) -> Result<StepLog, String> {
        let t0 = std::time::Instant::now();
        let (total, tl, al) = self.loss(batch)?;
        let scalar = |x: &Tensor<1>| f64::from(x.clone().into_scalar::<f32>());
        let (loss, triplet_loss, attn_loss) =
            (scalar(&total), scalar(&tl), al.as_ref().map(scalar));
        if !loss.is_finite() {
            return Err(format!(
                "step {}: the loss is {loss} (not finite); training stopped and nothing was exported",
                self.step + 1
            ));
        }
        let grads = total.backward();
        let grads = GradientsParams::from_grads(grads, &self.model);
        let model = self.model.clone();
        self.model = self.optim.step(self.cfg.lr, model, grads);
        self.step += 1;
        Ok(StepLog {
            step: self.step,
            loss,
            triplet_loss,
            attn_loss,
            batch: batch.len(),
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    /// Writes a checkpoint (module docs) under `dir`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn save_checkpoint(&self, dir: &Path, fingerprint: &str) -> Result<PathBuf, String> {
        let step_dir = dir.join(format!("step-{:06}", self.step));
        if step_dir.exists() {
            std::fs::remove_dir_all(&step_dir)
                .map_err(|e| format!("{}: {e}", step_dir.display()))?;
        }
        std::fs::create_dir_all(&step_dir).map_err(|e| format!("{}: {e}", step_dir.display()))?;
        save_host_adapters(
            &step_dir.join("adapter.safetensors"),
            &adapters(&self.model, &self.cfg.lora),
        )?;
        self.optim
            .save(step_dir.join("optimizer.bpk"))
            .map_err(|e| format!("optimizer state: {e:?}"))?;
        let state = serde_json::json!({ "step": self.step, "fingerprint": fingerprint });
        bindscope_core::fsutil::write_atomic(
            &step_dir.join("state.json"),
            state.to_string().as_bytes(),
        )
        .map_err(|e| e.to_string())?;
        let latest = serde_json::json!({ "step": self.step, "dir": step_dir.file_name().map(|n| n.to_string_lossy().into_owned()) });
        bindscope_core::fsutil::write_atomic(
            &dir.join("latest.json"),
            latest.to_string().as_bytes(),
        )
        .map_err(|e| e.to_string())?;
        for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())?.flatten() {
            let p = entry.path();
            if p != step_dir
                && p.is_dir()
                && entry.file_name().to_string_lossy().starts_with("step-")
            {
                let _ = std::fs::remove_dir_all(&p);
            }
        }
        Ok(step_dir)
    }

    /// Restores the adapters, the optimizer state and the step from the checkpoint `latest.json`
    /// in `dir` points at. Returns `false` when there is no checkpoint.
    ///
    /// # Errors
    /// Unreadable files, or a checkpoint of another run (fingerprint).
    pub fn resume(&mut self, dir: &Path, fingerprint: &str) -> Result<bool, String> {
        let latest = dir.join("latest.json");
        if !latest.is_file() {
            return Ok(false);
        }
        let read_json = |p: &Path| -> Result<serde_json::Value, String> {
            let t = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            serde_json::from_str(&t).map_err(|e| format!("{}: {e}", p.display()))
        };
        let l = read_json(&latest)?;
        let step_dir = dir.join(
            l["dir"]
                .as_str()
                .ok_or_else(|| "latest.json: no dir".to_string())?,
        );
        let state = read_json(&step_dir.join("state.json"))?;
        if state["fingerprint"].as_str() != Some(fingerprint) {
            return Err(format!(
                "{}: checkpoint of another run (different data or settings); use a new output directory",
                step_dir.display()
            ));
        }
        let saved = load_host_adapters(&step_dir.join("adapter.safetensors"))?;
        self.model = set_adapters(self.model.clone(), &saved)?;
        let optim = adamw(&self.cfg).init();
        self.optim = optim
            .load(step_dir.join("optimizer.bpk"))
            .map_err(|e| format!("optimizer state: {e:?}"))?;
        self.step = state["step"]
            .as_u64()
            .ok_or_else(|| "state.json: no step".to_string())? as usize;
        Ok(true)
    }
}

/// A hash of the settings and of the triplet ids in order (resume guard).
pub fn fingerprint(cfg: &TrainConfig, triplets: &[Triplet]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |s: &str| {
        for b in s.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    let mut c = cfg.clone();
    c.checkpoint_every = 0; // checkpoint frequency may change across a resume
    eat(&serde_json::to_string(&c).unwrap_or_default());
    for t in triplets {
        eat(&t.id);
        eat(&t.anchor);
        eat(&t.negative);
    }
    format!("{h:016x}")
}

/// Runs (or resumes) training over `triplets`, checkpointing in `ckpt_dir`; stops after
/// `stop_after` steps in total when given (an interruption, for tests and `--max-steps`).
/// `on_step` sees every step's log (e.g. to append it to a file).
///
/// # Errors
/// Tokenization, I/O, or resume errors.
pub fn run<M: TunableText>(
    trainer: &mut Trainer<M>,
    triplets: &[Triplet],
    ckpt_dir: &Path,
    stop_after: Option<usize>,
    on_step: &mut dyn FnMut(&StepLog),
) -> Result<bool, String> {
    let fp = fingerprint(&trainer.cfg, triplets);
    trainer.resume(ckpt_dir, &fp)?;
    let batches = schedule(triplets.len(), &trainer.cfg);
    let total = batches.len();
    while trainer.step < total {
        if stop_after.is_some_and(|s| trainer.step >= s) {
            trainer.save_checkpoint(ckpt_dir, &fp)?;
            return Ok(false);
        }
        let batch: Vec<&Triplet> = batches[trainer.step]
            .iter()
            .map(|&i| &triplets[i])
            .collect();
        let log = trainer.train_step(&batch)?;
        on_step(&log);
        let every = trainer.cfg.checkpoint_every;
        if every > 0 && trainer.step.is_multiple_of(every) && trainer.step < total {
            trainer.save_checkpoint(ckpt_dir, &fp)?;
        }
    }
    trainer.save_checkpoint(ckpt_dir, &fp)?;
    Ok(true)
}
