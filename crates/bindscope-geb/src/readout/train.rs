//! Training the readout (§4.3): the paper's recipe as [`TrainConfig::default`] — AdamW, lr
//! 1e-4 with cosine decay, one epoch, an effective batch of 512 sequences by gradient
//! accumulation, dynamic padding, truncation at 32,768 tokens, seed 42 for the initialisation
//! and the data order; the decoder and every adapter trainable, the embedder never (its
//! embeddings are precomputed inputs).
//!
//! - **Steps.** Epoch `e`'s order is [`bindscope_core::train::epoch_order`]`(seed, NAMESPACE,
//!   e, n)`; optimizer step `s` takes the `s`-th run of `micro_batch · grad_accum` sequences of
//!   its epoch (the last step of an epoch may be shorter), in micro-batches of `micro_batch`,
//!   each padded to its own longest sequence. What a step sees depends on the step number
//!   alone, so a resumed run repeats the uninterrupted one.
//! - **Loss.** The mean over the supervised targets of the whole effective batch: each
//!   micro-batch's token mean is weighted by its share of the step's targets before its
//!   backward pass (transformers' `Trainer` since 4.46, which divides by `num_items_in_batch`;
//!   a mean of micro-batch means would weight short answers up).
//! - **Schedule.** `lr_s = lr · ½ (1 + cos(π s / S))` for step `s` of `S` (transformers'
//!   `get_cosine_schedule_with_warmup` with no warmup).
//! - **Adapter learning rate.** [`TrainConfig::adapter_lr`] gives the adapters their own peak
//!   rate on the same schedule (LLaVA's `mm_projector_lr`); unset, they share `lr` as in the
//!   paper.
//! - **LoRA** ([`TrainConfig::lora`], the paper's LoRA ablation): the decoder's attention and MLP
//!   projections ([`LORA_TARGETS`]: q/k/v/o, gate/up/down of every layer, the linear layers
//!   LLaVA's LoRA recipe adapts) get rank-`r` factors through
//!   [`bindscope_tuning::lora::apply_lora_to`] (`b = 0`, `a` seeded as PEFT's default); every other
//!   decoder weight (token embeddings, norms, the tied head) is frozen; the embedding adapters
//!   stay fully trainable. The default `α = 2r` is LLaVA-1.5's LoRA setting (`r = 128`,
//!   `α = 256`); the paper does not give its own. A checkpoint's weights file holds each
//!   adapted weight's frozen base under its own key and the factors as `<key>.lora.a` /
//!   `<key>.lora.b` (burn-store's names), so a run resumes with its factors; the study saves
//!   the merged decoder at the end, so an evaluation reads a LoRA run as any other.
//! - **Weight decay** 0 (the paper does not give one; transformers' `TrainingArguments` default,
//!   and LLaVA's recipe).
//! - **Checkpoints** through [`bindscope_core::train::Checkpoints`]: the readout's weights
//!   (`readout.safetensors`, the module's own paths in PyTorch layout), the AdamW state and the
//!   parameters' ids (the optimizer's state is keyed by them; `param_ids.json`), so a resumed
//!   run continues bit for bit.

use std::path::Path;

use bindscope_core::train::{AdamW, Checkpoints, epoch_order};
use burn::lr_scheduler::module_lr_scheduler::{ModuleLearningRate, ModuleLrScheduler};
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamGroup, ParamId};
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::prelude::*;

use bindscope_models::llama::LlamaForCausalLM;
use bindscope_tuning::lora::{LoraConfig, apply_lora_to};

use super::chat::{IGNORE, Sequence};
use super::inject::HostBatch;
use super::model::GenerativeReadout;

/// The data-order namespace of [`epoch_order`] (`"gebtrain"`).
pub const NAMESPACE: u64 = 0x6765_6274_7261_696E;

/// The training recipe (module docs). Every field changes the numbers.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// Passes over the training sequences.
    pub epochs: usize,
    /// Sequences per forward pass.
    pub micro_batch: usize,
    /// Micro-batches per optimizer step.
    pub grad_accum: usize,
    /// Longest sequence in tokens; longer ones are cut (and counted).
    pub max_tokens: usize,
    /// Seed of the data order (and, in the study, of the adapters' initialisation).
    pub seed: u64,
    /// The optimizer (torch's AdamW settings; weight decay 0 by default here).
    pub adamw: AdamW,
    /// Optimizer steps between checkpoints (0 = only at the end).
    pub checkpoint_every: usize,
    /// The adapters' own peak learning rate (LLaVA's `mm_projector_lr`), on the same cosine
    /// schedule; `None` (the paper's recipe) trains them at [`TrainConfig::lr`]. Left out of the
    /// serialised config when `None`, so runs recorded before it existed keep their identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_lr: Option<f64>,
    /// LoRA on the decoder instead of training all its weights (module docs); `None` (the
    /// paper's main recipe) trains every decoder weight. Left out of the serialised config when
    /// `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            lr: 1e-4,
            epochs: 1,
            micro_batch: 8,
            grad_accum: 64,
            max_tokens: 32_768,
            seed: 42,
            adamw: AdamW {
                weight_decay: 0.0,
                ..AdamW::default()
            },
            checkpoint_every: 100,
            adapter_lr: None,
            lora: None,
        }
    }
}

/// The decoder weights LoRA adapts (a regex over module paths): the q/k/v/o attention and the
/// gate/up/down MLP projections of every layer.
pub const LORA_TARGETS: &str = r"layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|o_proj)|mlp\.(gate_proj|up_proj|down_proj))\.weight$";

/// `decoder` with LoRA factors on [`LORA_TARGETS`] and every other weight frozen (module docs).
///
/// # Errors
/// When no weight matches (not a Llama-family decoder).
pub fn apply_decoder_lora(
    decoder: LlamaForCausalLM,
    lora: &LoraConfig,
) -> Result<LlamaForCausalLM, String> {
    apply_lora_to(decoder, lora, LORA_TARGETS)
}

impl TrainConfig {
    /// Sequences per optimizer step.
    pub fn effective_batch(&self) -> usize {
        self.micro_batch * self.grad_accum
    }

    /// Optimizer steps per epoch over `n` sequences.
    pub fn steps_per_epoch(&self, n: usize) -> usize {
        n.div_ceil(self.effective_batch())
    }

    /// Optimizer steps of the whole run over `n` sequences.
    pub fn total_steps(&self, n: usize) -> usize {
        self.epochs * self.steps_per_epoch(n)
    }

    /// The learning rate of step `s` (0-based) of `total` (module docs).
    pub fn lr_at(&self, s: usize, total: usize) -> f64 {
        self.lr * self.cosine(s, total)
    }

    /// The adapters' learning rate at step `s` of `total`: [`TrainConfig::adapter_lr`] (or
    /// [`TrainConfig::lr`]) on the same schedule.
    pub fn adapter_lr_at(&self, s: usize, total: usize) -> f64 {
        self.adapter_lr.unwrap_or(self.lr) * self.cosine(s, total)
    }

    fn cosine(&self, s: usize, total: usize) -> f64 {
        let progress = s as f64 / total.max(1) as f64;
        0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}

/// One slot's embeddings: row `i` belongs to training sequence `i`.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotTable {
    /// The embedding width `d`.
    pub dim: usize,
    /// `[n, d]` row-major.
    pub rows: Vec<f32>,
}

impl SlotTable {
    fn gather(&self, idx: &[usize], device: &Device) -> Tensor<2> {
        let mut v = Vec::with_capacity(idx.len() * self.dim);
        for &i in idx {
            v.extend_from_slice(&self.rows[i * self.dim..(i + 1) * self.dim]);
        }
        Tensor::<1>::from_floats(v.as_slice(), device).reshape([idx.len(), self.dim])
    }
}

/// The training sequences and their slots' embeddings.
#[derive(Debug, Clone)]
pub struct TrainSet {
    /// The sequences (already truncated to `max_tokens`: [`TrainSet::new`]).
    pub sequences: Vec<Sequence>,
    /// One table per slot, in slot order.
    pub slots: Vec<SlotTable>,
    /// The ids of the conversations whose sequences were cut at `max_tokens`, with their
    /// original lengths.
    pub truncated: Vec<(String, usize)>,
    /// Sequences left out because no supervised token is left within `max_tokens` (a late
    /// VL-joint turn of a long conversation): `conversation` or `conversation#turn`.
    pub skipped: Vec<String>,
}

impl TrainSet {
    /// Cuts every sequence longer than `max_tokens` (labels and slots with it; a sequence whose
    /// slots would be cut is an error naming it). A sequence with no supervised token left is
    /// left out with its slot rows, and listed in [`TrainSet::skipped`].
    ///
    /// # Errors
    /// As above, a table whose row count is not the number of sequences, or nothing left.
    pub fn new(
        mut sequences: Vec<Sequence>,
        slots: Vec<SlotTable>,
        max_tokens: usize,
    ) -> Result<Self, String> {
        for (k, t) in slots.iter().enumerate() {
            if t.rows.len() != sequences.len() * t.dim {
                return Err(format!(
                    "slot {k}: {} embeddings for {} sequences",
                    t.rows.len() / t.dim.max(1),
                    sequences.len()
                ));
            }
        }
        let mut truncated = Vec::new();
        for s in &mut sequences {
            if s.input_ids.len() > max_tokens {
                truncated.push((s.conversation.clone(), s.input_ids.len()));
                s.input_ids.truncate(max_tokens);
                s.labels.truncate(max_tokens);
                if s.slots.iter().any(|&p| p >= max_tokens) {
                    return Err(format!(
                        "conversation {:?}: its embedding slot lies past --max-tokens {max_tokens}",
                        s.conversation
                    ));
                }
            }
        }
        let keep: Vec<bool> = sequences
            .iter()
            .map(|s| s.labels.iter().skip(1).any(|&l| l != IGNORE))
            .collect();
        let skipped: Vec<String> = sequences
            .iter()
            .zip(&keep)
            .filter(|(_, k)| !**k)
            .map(|(s, _)| match s.turn {
                Some(t) => format!("{}#{t}", s.conversation),
                None => s.conversation.clone(),
            })
            .collect();
        if skipped.len() == sequences.len() {
            return Err(format!(
                "no sequence has a supervised token within --max-tokens {max_tokens}"
            ));
        }
        let slots = slots
            .into_iter()
            .map(|t| SlotTable {
                dim: t.dim,
                rows: t
                    .rows
                    .chunks(t.dim.max(1))
                    .zip(&keep)
                    .filter(|(_, k)| **k)
                    .flat_map(|(r, _)| r.to_vec())
                    .collect(),
            })
            .collect();
        let sequences = sequences
            .into_iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(s, _)| s)
            .collect();
        Ok(Self {
            sequences,
            slots,
            truncated,
            skipped,
        })
    }
}

/// What one optimizer step did.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepLog {
    /// The step number after it (1-based).
    pub step: usize,
    /// The token-mean loss over the effective batch.
    pub loss: f64,
    /// The learning rate used.
    pub lr: f64,
    /// Sequences in the step.
    pub sequences: usize,
    /// Real (unpadded) tokens in the step.
    pub tokens: usize,
    /// Supervised targets in the step.
    pub targets: usize,
    /// Wall time of the step.
    pub seconds: f64,
}

/// A training run in progress: the readout on an autodiff device, the optimizer and the step.
pub struct Trainer {
    /// The readout being trained.
    pub model: GenerativeReadout,
    optim: ModuleOptimizer,
    /// Optimizer steps done.
    pub step: usize,
    cfg: TrainConfig,
    n: usize,
    device: Device,
    /// Further devices of data-parallel training (empty: one device).
    replicas: Vec<Device>,
    fill: u32,
}

/// The checkpoint files.
const WEIGHTS: &str = "readout.safetensors";
const OPTIMIZER: &str = "optimizer.bpk";
const IDS: &str = "param_ids.json";

impl Trainer {
    /// A run over `n` sequences starting at step 0; `fill` is the id put at padding (any valid
    /// id). `device` must be an autodiff device.
    pub fn new(
        model: GenerativeReadout,
        cfg: TrainConfig,
        n: usize,
        fill: u32,
        device: Device,
    ) -> Self {
        let optim = cfg.adamw.init();
        Self {
            model,
            optim,
            step: 0,
            cfg,
            n,
            device,
            replicas: Vec::new(),
            fill,
        }
    }

    /// Data-parallel training over the trainer's device and `more` (autodiff devices): each
    /// step's micro-batches go round-robin to the devices, which compute their losses and
    /// gradients at the same time on copies of the readout (forked from the first device's at
    /// every step); the gradients are moved to the first device and summed there in micro-batch
    /// order, and the optimizer steps there. The sum is the one-device step's, term for term:
    /// the numbers are one device's bit for bit where every device computes as the first does
    /// (one device listed twice, as the tests do), and equal up to float rounding across
    /// devices that may pick other kernels (two GPUs each autotune their own).
    ///
    /// # Errors
    /// A step with fewer micro-batches (`grad_accum`) than devices: a device would have nothing
    /// to do.
    pub fn with_replicas(mut self, more: Vec<Device>) -> Result<Self, String> {
        let devices = more.len() + 1;
        if devices > 1 && self.cfg.grad_accum < devices {
            return Err(format!(
                "{devices} devices need at least {devices} micro-batches per step: --grad-accum is {}",
                self.cfg.grad_accum
            ));
        }
        self.replicas = more;
        Ok(self)
    }

    /// Steps of the whole run.
    pub fn total_steps(&self) -> usize {
        self.cfg.total_steps(self.n)
    }

    /// The sequence indices of step `s` (module docs).
    pub fn step_indices(&self, s: usize) -> Vec<usize> {
        let per = self.cfg.steps_per_epoch(self.n);
        let (epoch, k) = (s / per, s % per);
        let order = epoch_order(self.cfg.seed, NAMESPACE, epoch as u64, self.n);
        let b = self.cfg.effective_batch();
        order[k * b..((k + 1) * b).min(self.n)].to_vec()
    }

    /// One optimizer step over the next effective batch of `data`.
    ///
    /// # Errors
    /// A decoder error (a sequence past its context) or a failed read-back from the device, as
    /// text.
    pub fn train_step(&mut self, data: &TrainSet) -> Result<StepLog, String> {
        let t0 = std::time::Instant::now();
        let idx = self.step_indices(self.step);
        let micro: Vec<&[usize]> = idx.chunks(self.cfg.micro_batch).collect();
        let batches: Vec<HostBatch> = micro
            .iter()
            .map(|m| {
                let seqs: Vec<&Sequence> = m.iter().map(|&i| &data.sequences[i]).collect();
                HostBatch::new(&seqs, self.fill)
            })
            .collect();
        let targets: usize = batches.iter().map(|b| b.targets).sum();
        let tokens: usize = batches.iter().map(HostBatch::tokens).sum();
        let mut acc = GradientsAccumulator::<GenerativeReadout>::new();
        let mut loss_sum = 0f64;
        // One micro-batch's share of the loss and its gradients, on `model`'s device.
        let micro_step = |model: &GenerativeReadout,
                          device: &Device,
                          m: &[usize],
                          batch: &HostBatch|
         -> Result<(f64, GradientsParams), String> {
            let embeddings: Vec<Tensor<2>> =
                data.slots.iter().map(|t| t.gather(m, device)).collect();
            let loss = model
                .loss(batch, &embeddings, device)
                .map_err(|e| e.to_string())?;
            let weighted = loss * (batch.targets as f64 / targets as f64);
            let value = bindscope_core::device::to_host_f32(weighted.clone())
                .map_err(|e| e.to_string())?[0];
            Ok((
                f64::from(value),
                GradientsParams::from_grads(weighted.backward(), model),
            ))
        };
        let work: Vec<(&[usize], &HostBatch)> = micro
            .iter()
            .zip(&batches)
            .filter(|(_, b)| b.targets > 0)
            .map(|(m, b)| (*m, b))
            .collect();
        if self.replicas.is_empty() {
            for (m, batch) in work {
                let (value, grads) = micro_step(&self.model, &self.device, m, batch)?;
                loss_sum += value;
                acc.accumulate(&self.model, grads);
            }
        } else {
            let devices: Vec<Device> = std::iter::once(self.device.clone())
                .chain(self.replicas.iter().cloned())
                .collect();
            let copies: Vec<GenerativeReadout> = std::iter::once(self.model.clone())
                .chain(self.replicas.iter().map(|d| self.model.clone().fork(d)))
                .collect();
            // Rounds of one micro-batch per device, computed at the same time; the gradients
            // are summed on the first device in micro-batch order.
            for round in work.chunks(devices.len()) {
                let results: Vec<Result<(f64, GradientsParams), String>> =
                    std::thread::scope(|scope| {
                        let handles: Vec<_> = round
                            .iter()
                            .zip(copies.iter().zip(&devices))
                            .map(|(&(m, batch), (model, device))| {
                                let micro_step = &micro_step;
                                scope.spawn(move || micro_step(model, device, m, batch))
                            })
                            .collect();
                        handles
                            .into_iter()
                            .zip(&devices)
                            .map(|(h, d)| {
                                h.join().unwrap_or_else(|p| {
                                    let why = p
                                        .downcast_ref::<&str>()
                                        .map(|s| s.to_string())
                                        .or_else(|| p.downcast_ref::<String>().cloned())
                                        .unwrap_or_default();
                                    Err(format!("the worker on {d:?} panicked: {why}"))
                                })
                            })
                            .collect()
                    });
                for r in results {
                    let (value, grads) = r?;
                    loss_sum += value;
                    acc.accumulate(&self.model, grads.to_device(&self.device, &self.model));
                }
            }
        }
        let lr = self.cfg.lr_at(self.step, self.total_steps());
        let policy: ModuleLearningRate = match self.cfg.adapter_lr {
            None => lr.into(),
            Some(_) => {
                let adapters = ParamGroup::ids_from_module(self.model.adapters.clone());
                let adapter_lr = self.cfg.adapter_lr_at(self.step, self.total_steps());
                ModuleLrScheduler::new(lr)
                    .with_group(adapters, adapter_lr)
                    .step()
            }
        };
        let model = self.model.clone();
        self.model = self.optim.step(policy, model, acc.grads());
        self.step += 1;
        Ok(StepLog {
            step: self.step,
            loss: loss_sum,
            lr,
            sequences: idx.len(),
            tokens,
            targets,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    /// Saves the weights, the optimizer state and the parameter ids at the current step.
    ///
    /// # Errors
    /// I/O or serialisation errors, as text naming the checkpoint.
    pub fn save(&self, checkpoints: &Checkpoints) -> Result<(), String> {
        checkpoints
            .save(self.step, |dir| {
                use burn::store::{BurnToPyTorchAdapter, ModuleSnapshot, SafetensorsStore};
                let mut store = SafetensorsStore::from_file(dir.join(WEIGHTS))
                    .with_to_adapter(BurnToPyTorchAdapter);
                self.model
                    .save_into(&mut store)
                    .map_err(|e| format!("weights: {e}"))?;
                self.optim
                    .save(dir.join(OPTIMIZER))
                    .map_err(|e| format!("optimizer state: {e:?}"))?;
                let ids = param_ids(&self.model);
                std::fs::write(
                    dir.join(IDS),
                    serde_json::to_vec(&ids).map_err(|e| e.to_string())?,
                )
                .map_err(|e| e.to_string())
            })
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Restores the latest checkpoint, if any; `false` when there is none.
    ///
    /// # Errors
    /// Unreadable files, or a checkpoint of another run (its fingerprint).
    pub fn resume(&mut self, checkpoints: &Checkpoints) -> Result<bool, String> {
        let Some(saved) = checkpoints.latest().map_err(|e| e.to_string())? else {
            return Ok(false);
        };
        let file = saved.dir.join(WEIGHTS);
        let model = bindscope_core::load::load_strict(
            self.model.clone(),
            std::slice::from_ref(&file),
            &bindscope_core::LoadOptions::default(),
        )
        .map_err(|e| e.to_string())?;
        let ids: Vec<u64> = serde_json::from_slice(
            &std::fs::read(saved.dir.join(IDS))
                .map_err(|e| format!("{}: {e}", saved.dir.display()))?,
        )
        .map_err(|e| format!("{}: {e}", saved.dir.join(IDS).display()))?;
        self.model = set_param_ids(model, &ids)?;
        self.optim = self
            .cfg
            .adamw
            .init()
            .load(saved.dir.join(OPTIMIZER))
            .map_err(|e| format!("optimizer state: {e:?}"))?;
        self.step = saved.step;
        Ok(true)
    }

    /// The run's configuration.
    pub fn config(&self) -> &TrainConfig {
        &self.cfg
    }
}

/// The ids of every float parameter in visit order.
fn param_ids<M: Module>(m: &M) -> Vec<u64> {
    struct Ids(Vec<u64>);
    impl ModuleVisitor for Ids {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.id.val());
        }
    }
    let mut v = Ids(Vec::new());
    m.visit(&mut v);
    v.0
}

fn set_param_ids<M: Module>(m: M, ids: &[u64]) -> Result<M, String> {
    struct Set<'a>(&'a [u64], usize);
    impl ModuleMapper for Set<'_> {
        fn map_float<const D: usize>(&mut self, mut param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            if let Some(&id) = self.0.get(self.1) {
                param.id = ParamId::from(id);
            }
            self.1 += 1;
            param
        }
    }
    let mut s = Set(ids, 0);
    let m = m.map(&mut s);
    if s.1 != ids.len() {
        return Err(format!(
            "checkpoint names {} parameters, the readout has {}",
            ids.len(),
            s.1
        ));
    }
    Ok(m)
}

/// The path of a checkpoint's weights file (for hashing into a run's record).
pub fn weights_file(dir: &Path) -> std::path::PathBuf {
    dir.join(WEIGHTS)
}
