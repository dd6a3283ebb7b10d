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
//! Optimizer: AdamW (Loshchilov & Hutter, 2019) with torch's defaults
//! ([`bindscope_core::train::AdamW`]: β = (0.9, 0.999), ε = 1e-8; burn's defaults are ε = 1e-5,
//! weight decay 1e-4), weight decay 0.01, learning rate 5e-5 constant, one epoch. Batches: the
//! triplets shuffled with the seed (ChaCha20 stream 200 + epoch), cut into `batch_size` chunks
//! (the last one may be short).
//!
//! ## Checkpoints
//! Every `checkpoint_every` steps (and at the end) the trainer saves a checkpoint through
//! [`bindscope_core::train::Checkpoints`] (`step-NNNNNN/`, `state.json`, `latest.json`; a run
//! killed at any moment resumes from the last complete one). Its files here are
//! `adapter.safetensors` (the LoRA factors by module path) and `optimizer.bpk` (burn's AdamW
//! state, keyed by the factors' path-derived ids). The fingerprint ([`fingerprint`]: a hash of
//! the config and of the triplets in order) makes a resume with other data or settings an error.

use crate::attention::{BindingWeights, attention_loss, binding_weights};
use crate::example::Triplet;
use crate::lora::{
    LoraConfig, TunableText, adapters, apply_lora, load_host_adapters, save_host_adapters,
    set_adapters,
};
use bindscope_core::train::{AdamW, Checkpoints, Fingerprint};
use bindscope_data::text::Tokenizer;
use bindscope_models::ForwardOptions;
use bindscope_saber::generate::Rng;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;
use burn::tensor::activation::relu;
use std::path::{Path, PathBuf};

/// The files of a checkpoint step directory.
const ADAPTER_FILE: &str = "adapter.safetensors";
/// burn's optimizer record.
const OPTIMIZER_FILE: &str = "optimizer.bpk";

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
    /// AdamW ε (torch's default: [`AdamW::default`]).
    pub epsilon: f32,
    /// AdamW β₁ (torch's default).
    pub beta1: f32,
    /// AdamW β₂ (torch's default).
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
    /// The recipe of the issue: r = 4, α = 4, lr 5e-5, AdamW with torch's defaults (weight
    /// decay 0.01, ε = 1e-8, β = (0.9, 0.999)), margin 0.05, batch 32, one epoch, no attention
    /// loss; checkpoints every 25 steps.
    fn default() -> Self {
        let adamw = AdamW::default();
        Self {
            lora: LoraConfig::default(),
            lr: 5e-5,
            weight_decay: adamw.weight_decay,
            epsilon: adamw.epsilon,
            beta1: adamw.beta1,
            beta2: adamw.beta2,
            margin: 0.05,
            batch_size: 32,
            epochs: 1,
            shuffle_seed: 0,
            attn: None,
            checkpoint_every: 25,
        }
    }
}

impl TrainConfig {
    /// The optimizer's settings.
    pub fn adamw(&self) -> AdamW {
        AdamW {
            beta1: self.beta1,
            beta2: self.beta2,
            epsilon: self.epsilon,
            weight_decay: self.weight_decay,
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
        let optim = cfg.adamw().init();
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
        let opts = ForwardOptions {
            output_hidden_states: false,
            output_attentions: want_attn,
            attention_last_rows: None,
        };
        // The triplet loss reads the last hidden state through the mask (sentence pooling), so
        // the padded positions can be skipped; the attention loss keeps the full layout.
        let out = if want_attn {
            self.model.forward_text(ids, mask.clone(), opts)
        } else {
            self.model.forward_text_unpadded(ids, mask.clone(), opts)
        };
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

    /// Saves a checkpoint of the adapters and the optimizer state at the current step (module
    /// docs).
    ///
    /// # Errors
    /// I/O errors.
    pub fn save_checkpoint(&self, checkpoints: &Checkpoints) -> Result<PathBuf, String> {
        checkpoints
            .save(self.step, |dir| {
                save_host_adapters(
                    &dir.join(ADAPTER_FILE),
                    &adapters(&self.model, &self.cfg.lora),
                )?;
                self.optim
                    .save(dir.join(OPTIMIZER_FILE))
                    .map_err(|e| format!("optimizer state: {e:?}"))
            })
            .map_err(|e| e.to_string())
    }

    /// Restores the adapters, the optimizer state and the step from the latest checkpoint.
    /// Returns `false` when there is none.
    ///
    /// # Errors
    /// Unreadable files, or a checkpoint of another run (fingerprint).
    pub fn resume(&mut self, checkpoints: &Checkpoints) -> Result<bool, String> {
        let Some(saved) = checkpoints.latest().map_err(|e| e.to_string())? else {
            return Ok(false);
        };
        let adapters = load_host_adapters(&saved.dir.join(ADAPTER_FILE))?;
        self.model = set_adapters(self.model.clone(), &adapters)?;
        self.optim = self
            .cfg
            .adamw()
            .init()
            .load(saved.dir.join(OPTIMIZER_FILE))
            .map_err(|e| format!("optimizer state: {e:?}"))?;
        self.step = saved.step;
        Ok(true)
    }
}

/// The resume guard ([`Fingerprint`]): the settings' JSON (checkpoint frequency left out: it
/// may change across a resume), then each triplet's id, anchor and negative in order.
pub fn fingerprint(cfg: &TrainConfig, triplets: &[Triplet]) -> String {
    let mut c = cfg.clone();
    c.checkpoint_every = 0;
    let mut h = Fingerprint::new();
    h.json(&c);
    for t in triplets {
        h.text(&t.id).text(&t.anchor).text(&t.negative);
    }
    h.hex()
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
    let checkpoints = Checkpoints::new(ckpt_dir, fingerprint(&trainer.cfg, triplets));
    trainer.resume(&checkpoints)?;
    let batches = schedule(triplets.len(), &trainer.cfg);
    let total = batches.len();
    while trainer.step < total {
        if stop_after.is_some_and(|s| trainer.step >= s) {
            trainer.save_checkpoint(&checkpoints)?;
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
            trainer.save_checkpoint(&checkpoints)?;
        }
    }
    trainer.save_checkpoint(&checkpoints)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::Construction;

    /// The fingerprint is what `state.json` records: it must not move, or every checkpoint
    /// written before would stop resuming.
    #[test]
    fn fingerprint_is_stable() {
        let t = |i: usize| Triplet {
            id: format!("e{i}#0"),
            construction: Construction::PairSwap,
            anchor: format!("a red box {i}"),
            positive: "a box that is red".into(),
            negative: "a blue box".into(),
            bindings: vec![["red".into(), "box".into()]],
        };
        let cfg = TrainConfig::default();
        assert_eq!(fingerprint(&cfg, &[t(0), t(1)]), "79fd6ff9b032a8a7");
        let other = TrainConfig {
            checkpoint_every: 3,
            attn: Some(AttnLossConfig {
                tau: 0.1,
                lambda: 0.1,
                layers: (0, usize::MAX),
            }),
            ..cfg
        };
        assert_eq!(fingerprint(&other, &[t(0)]), "1d9ae15b8c42fe5d");
    }
}
