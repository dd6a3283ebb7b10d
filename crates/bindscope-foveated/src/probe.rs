//! Readouts over frozen features and the probes trained on them.
//!
//! # Readouts (a pooled vector `z` per image)
//! - **GAP**: mean of the patch tokens;
//! - **summary**: the model's summary token (CLS after the final norm / MAP head);
//! - **oracle**: mean of the patch tokens under the target's box
//!   ([`crate::features::oracle_patches`]);
//!   (these three are computed once at extraction, [`crate::features`]);
//! - **fovea** (learned): one query `q ∈ R^D`, initialised `N(0, 0.02²)`; the patch tokens
//!   `x_1..x_P` are keys and values, no temperature and no scaling:
//!   `a = softmax_i(q·x_i)`, `z = Σ_i a_i x_i`; `q` is trained jointly with the probe;
//! - **text-conditioned fovea** (GQA): `s_i = LN(t)ᵀ W_q LN(x_i) / T`, `a = softmax(s)`,
//!   `z = Σ a_i x_i` (raw patches), with `t` the question's text embedding, `LN` a layer norm
//!   without affine parameters (ε = 1e-5) used only for the scores, `W_q ∈ R^{d_text×d_patch}`
//!   initialised `N(0, 0.02²)`, and `T = exp(log T)` with `log T` a parameter initialised at
//!   `log √d_patch`. The study's "log T initialised at √d_patch" is read as "T starts at
//!   √d_patch" (the usual attention scale): taking `log T = √d_patch` literally would start at
//!   `T = e^{27.7}` for `d_patch = 768`, every score ≈ 0, uniform attention and a vanishing
//!   gradient for `W_q`. The layer norms are parameter-free because they only shape the
//!   scores, which `W_q` already scales per dimension.
//!
//! # Probes on `z`
//! `Linear(D→C)`, or an MLP `Linear(D→H)–act–[Dropout]–Linear(H→C)` (CSB / CSD: `H = 128`,
//! exact-erf GELU, no dropout; GQA: `H = 512`, ReLU, dropout chosen on validation). Linear
//! layers are initialised as torch's `nn.Linear` (weight and bias `U(−1/√fan_in, 1/√fan_in)`),
//! from a seeded host stream, so a probe's initialisation depends only on its seed.
//!
//! # Training recipe ([`TrainConfig`])
//! Adam with torch's defaults (β = (0.9, 0.999), ε = 1e-8 — set explicitly, burn's default ε is
//! 1e-5), coupled L2 weight decay as torch's `Adam(weight_decay=…)` (0 for CSB / CSD, 1e-4 for
//! GQA), a constant learning rate, mini-batches drawn from a seeded permutation each epoch (the
//! last batch may be smaller), cross-entropy (optionally class-weighted with torch's
//! `CrossEntropyLoss(weight)` mean: `Σ w_{y_i}·nll_i / Σ w_{y_i}`). After every epoch the
//! validation metric is computed (top-1, or paired accuracy for GQA) and the best epoch's
//! parameters are kept (ties keep the earlier epoch); training returns those.
//!
//! Features are extracted without autodiff; each mini-batch is created directly on the
//! autodiff device, so no frozen-model graph is ever recorded.

use crate::features::Features;
use crate::rng::{ns, stream};
use bindscope_core::rng::legacy::box_muller;
use bindscope_core::train::BestSoFar;
use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::activation::{gelu, log_softmax, relu, softmax};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::Rng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

/// MLP activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Act {
    /// Exact (erf) GELU.
    #[default]
    Gelu,
    /// ReLU.
    Relu,
}

/// The classifier on the pooled vector.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum HeadSpec {
    /// `Linear(D→C)`.
    Linear,
    /// `Linear(D→hidden)–act–Dropout(dropout)–Linear(hidden→C)`.
    Mlp {
        /// Hidden width.
        hidden: usize,
        /// Activation.
        act: Act,
        /// Dropout probability after the activation (0: none).
        dropout: f64,
    },
}

impl HeadSpec {
    /// CSB / CSD MLP: `Linear(D→128)–GELU–Linear(128→C)`.
    pub fn mlp128() -> Self {
        HeadSpec::Mlp {
            hidden: 128,
            act: Act::Gelu,
            dropout: 0.0,
        }
    }

    /// Short name (`linear`, `mlp`).
    pub fn name(&self) -> &'static str {
        match self {
            HeadSpec::Linear => "linear",
            HeadSpec::Mlp { .. } => "mlp",
        }
    }
}

/// How the pooled vector is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PoolSpec {
    /// A vector computed at extraction (GAP, summary, oracle).
    Fixed,
    /// Learned single-query attention over the patch tokens.
    Fovea,
    /// Text-conditioned attention (GQA); `d_text` is the text-embedding dimension.
    TextFovea {
        /// Text embedding dimension.
        d_text: usize,
    },
}

/// A probe: an optional learned pooling and a classifier.
#[derive(Module, Debug)]
pub struct Probe {
    /// Fovea query `q`, `[D]`.
    pub query: Option<Param<Tensor<1>>>,
    /// Text-fovea projection `W_q`, `[d_text, D]`.
    pub w_q: Option<Param<Tensor<2>>>,
    /// Text-fovea `log T`, `[1]`.
    pub log_t: Option<Param<Tensor<1>>>,
    /// First (or only) linear layer.
    pub fc1: Linear,
    /// Second linear layer of an MLP.
    pub fc2: Option<Linear>,
    /// MLP activation.
    #[module(skip)]
    pub act: Act,
    /// Dropout probability (training only).
    #[module(skip)]
    pub dropout: f64,
}

/// A mini-batch of inputs.
// The variants are tensor handles of one batch, built and consumed at once: boxing buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Input {
    /// Pooled vectors `[B, D]`.
    Pooled(Tensor<2>),
    /// Patch tokens `[B, P, D]`.
    Patches(Tensor<3>),
    /// Patch tokens `[B, P, D]` and text embeddings `[B, d_text]`.
    PatchesText(Tensor<3>, Tensor<2>),
}

/// Training / evaluation data of one readout.
#[derive(Debug, Clone, Copy)]
pub enum Data<'a> {
    /// Host matrix `[n, dim]`.
    Pooled {
        /// Row-major values.
        x: &'a [f32],
        /// Row length.
        dim: usize,
    },
    /// Cached patch tokens.
    Patches(&'a Features),
    /// Cached patch tokens and per-item text embeddings `[n, d_text]`.
    PatchesText {
        /// The features.
        feats: &'a Features,
        /// Row-major text embeddings.
        text: &'a [f32],
        /// Text dimension.
        d_text: usize,
    },
}

impl Data<'_> {
    /// Number of items.
    pub fn len(&self) -> usize {
        match self {
            Data::Pooled { x, dim } => x.len() / dim.max(&1),
            Data::Patches(f) | Data::PatchesText { feats: f, .. } => f.n,
        }
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Dimension of the pooled vector.
    pub fn dim(&self) -> usize {
        match self {
            Data::Pooled { dim, .. } => *dim,
            Data::Patches(f) | Data::PatchesText { feats: f, .. } => f.d,
        }
    }

    /// The items `idx` on `device`.
    pub fn batch(&self, idx: &[usize], device: &Device) -> Input {
        match self {
            Data::Pooled { x, dim } => Input::Pooled(Features::rows(x, *dim, idx, device)),
            Data::Patches(f) => Input::Patches(f.patch_batch(idx, device)),
            Data::PatchesText {
                feats,
                text,
                d_text,
            } => Input::PatchesText(
                feats.patch_batch(idx, device),
                Features::rows(text, *d_text, idx, device),
            ),
        }
    }
}

fn linear_init<R: Rng>(rng: &mut R, d_in: usize, d_out: usize, device: &Device) -> Linear {
    let bound = 1.0 / (d_in as f64).sqrt();
    let mut u = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| ((rng.random::<f64>() * 2.0 - 1.0) * bound) as f32)
            .collect()
    };
    // burn stores the weight as [d_in, d_out] (x·W); drawn row-major in that layout.
    let w = u(d_in * d_out);
    let b = u(d_out);
    Linear {
        weight: Param::from_tensor(Tensor::from_data(TensorData::new(w, [d_in, d_out]), device)),
        bias: Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(b, [d_out]),
            device,
        ))),
    }
}

/// Layer norm over the last dimension without affine parameters (ε = 1e-5).
fn layer_norm<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let mean = x.clone().mean_dim(D - 1);
    let centered = x - mean;
    let var = centered.clone().square().mean_dim(D - 1);
    centered / (var + 1e-5).sqrt()
}

impl Probe {
    /// A freshly initialised probe for `dim`-dimensional pooled vectors and `classes` outputs.
    pub fn init(
        pool: PoolSpec,
        head: HeadSpec,
        dim: usize,
        classes: usize,
        seed: u64,
        device: &Device,
    ) -> Self {
        let mut rng = stream(seed, &[ns::PROBE_INIT]);
        let randn = |rng: &mut rand_chacha::ChaCha8Rng, n: usize, std: f64| -> Vec<f32> {
            (0..n).map(|_| (box_muller(rng) * std) as f32).collect()
        };
        let (query, w_q, log_t) = match pool {
            PoolSpec::Fixed => (None, None, None),
            PoolSpec::Fovea => {
                let q = randn(&mut rng, dim, 0.02);
                (
                    Some(Param::from_tensor(Tensor::from_data(
                        TensorData::new(q, [dim]),
                        device,
                    ))),
                    None,
                    None,
                )
            }
            PoolSpec::TextFovea { d_text } => {
                let w = randn(&mut rng, d_text * dim, 0.02);
                let lt = vec![(dim as f32).sqrt().ln()];
                (
                    None,
                    Some(Param::from_tensor(Tensor::from_data(
                        TensorData::new(w, [d_text, dim]),
                        device,
                    ))),
                    Some(Param::from_tensor(Tensor::from_data(
                        TensorData::new(lt, [1]),
                        device,
                    ))),
                )
            }
        };
        let (fc1, fc2, act, dropout) = match head {
            HeadSpec::Linear => (
                linear_init(&mut rng, dim, classes, device),
                None,
                Act::Gelu,
                0.0,
            ),
            HeadSpec::Mlp {
                hidden,
                act,
                dropout,
            } => (
                linear_init(&mut rng, dim, hidden, device),
                Some(linear_init(&mut rng, hidden, classes, device)),
                act,
                dropout,
            ),
        };
        Self {
            query,
            w_q,
            log_t,
            fc1,
            fc2,
            act,
            dropout,
        }
    }

    /// Pools a batch: `(z [B, D], attention [B, P] for the foveae)`.
    pub fn pool(&self, input: Input) -> (Tensor<2>, Option<Tensor<2>>) {
        match input {
            Input::Pooled(z) => (z, None),
            Input::Patches(x) => {
                let q = self
                    .query
                    .as_ref()
                    .expect("a fovea probe needs patch tokens and has a query")
                    .val();
                let [b, p, d] = x.dims();
                let scores = (x.clone() * q.reshape([1, 1, d]))
                    .sum_dim(2)
                    .reshape([b, p]);
                let a = softmax(scores, 1);
                let z = (x * a.clone().reshape([b, p, 1]))
                    .sum_dim(1)
                    .reshape([b, d]);
                (z, Some(a))
            }
            Input::PatchesText(x, t) => {
                let w = self.w_q.as_ref().expect("a text fovea probe has W_q").val();
                let log_t = self
                    .log_t
                    .as_ref()
                    .expect("a text fovea probe has log T")
                    .val();
                let [b, p, d] = x.dims();
                let qv = layer_norm(t).matmul(w); // [B, D]
                let scores = (layer_norm(x.clone()) * qv.reshape([b, 1, d]))
                    .sum_dim(2)
                    .reshape([b, p]);
                let scores = scores / log_t.exp().reshape([1, 1]);
                let a = softmax(scores, 1);
                let z = (x * a.clone().reshape([b, p, 1]))
                    .sum_dim(1)
                    .reshape([b, d]);
                (z, Some(a))
            }
        }
    }

    /// Logits `[B, C]` of pooled vectors; `keep` is the dropout keep-mask (already scaled by
    /// `1/(1−p)`) during training, `None` at evaluation.
    pub fn classify(&self, z: Tensor<2>, keep: Option<Tensor<2>>) -> Tensor<2> {
        let h = self.fc1.forward(z);
        match &self.fc2 {
            None => h,
            Some(fc2) => {
                let h = match self.act {
                    Act::Gelu => gelu(h),
                    Act::Relu => relu(h),
                };
                let h = match keep {
                    Some(m) => h * m,
                    None => h,
                };
                fc2.forward(h)
            }
        }
    }

    /// Hidden width of the MLP (0 for a linear probe).
    fn hidden(&self) -> usize {
        self.fc2
            .as_ref()
            .map(|l| l.weight.val().dims()[0])
            .unwrap_or(0)
    }
}

/// Which validation metric selects the checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Selection {
    /// Top-1 accuracy.
    Top1,
    /// Paired accuracy: the fraction of pairs `(i, j)` (validation indices) with both correct.
    Paired(Vec<(usize, usize)>),
    /// Paired accuracy over the pairs of adjacent validation items, `(2k, 2k + 1)` for
    /// `k < n / 2` ([`adjacent_pairs`]): GQA, whose pair members are adjacent.
    AdjacentPairs,
}

/// The pairs `(2k, 2k + 1)` of `n` items, `k < n / 2` (an odd last item is in none).
pub fn adjacent_pairs(n: usize) -> Vec<(usize, usize)> {
    (0..n / 2).map(|k| (2 * k, 2 * k + 1)).collect()
}

/// The training recipe.
///
/// Serializes as a run records its recipe (`config.json`): every field but `seed`, since the
/// probes of one run share the recipe and each trains with its own seed (recorded beside it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainConfig {
    /// Epochs (30 for CSB / CSD, 50 for GQA).
    pub epochs: usize,
    /// Mini-batch size (512; GQA 256).
    pub batch: usize,
    /// Constant learning rate (1e-3).
    pub lr: f64,
    /// Coupled L2 weight decay (0; GQA 1e-4).
    pub weight_decay: f64,
    /// Per-class loss weights (GQA: inverse frequency), `None` for unweighted.
    pub class_weights: Option<Vec<f32>>,
    /// Seed of initialisation, batch order and dropout masks (not serialized).
    #[serde(skip_serializing)]
    pub seed: u64,
    /// Checkpoint selection on validation.
    pub selection: Selection,
}

impl TrainConfig {
    /// The CSB / CSD recipe: Adam lr 1e-3, batch 512, 30 epochs, no weight decay, unweighted,
    /// best validation top-1.
    pub fn synthetic(seed: u64) -> Self {
        Self {
            epochs: 30,
            batch: 512,
            lr: 1e-3,
            weight_decay: 0.0,
            class_weights: None,
            seed,
            selection: Selection::Top1,
        }
    }

    /// The optimizer [`train`] uses: Adam with torch's defaults and this coupled weight decay
    /// ([`bindscope_core::train::adam`]).
    pub fn optimizer(&self) -> AdamConfig {
        bindscope_core::train::adam(self.weight_decay)
    }
}

/// One epoch of the training log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpochLog {
    /// 1-based epoch.
    pub epoch: usize,
    /// Mean training loss over the epoch's batches.
    pub train_loss: f64,
    /// Validation top-1.
    pub val_top1: f64,
    /// Validation selection metric (top-1 or paired accuracy).
    pub val_selection: f64,
}

/// A trained probe (on the plain device) and its log.
#[derive(Debug)]
pub struct Trained {
    /// The best-validation probe.
    pub probe: Probe,
    /// Its epoch (1-based; 0 when no epoch ran).
    pub best_epoch: usize,
    /// Its validation selection metric.
    pub best_val: f64,
    /// Per-epoch log.
    pub history: Vec<EpochLog>,
}

/// Predictions of a probe over a data set.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// `[n, C]` logits.
    pub logits: Vec<f32>,
    /// Number of classes.
    pub classes: usize,
    /// `[n, D]` pooled vectors (the readout).
    pub pooled: Vec<f32>,
    /// Pooled dimension.
    pub dim: usize,
    /// `[n, P]` attention weights (foveae only; empty otherwise).
    pub attention: Vec<f32>,
}

impl Outputs {
    /// Arg-max class of each item (first maximum on ties).
    pub fn predictions(&self) -> Vec<usize> {
        self.logits
            .chunks_exact(self.classes)
            .map(|row| {
                let mut best = 0;
                for (k, v) in row.iter().enumerate() {
                    if *v > row[best] {
                        best = k;
                    }
                }
                best
            })
            .collect()
    }
}

fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32 data")
}

/// Runs a probe (on a plain device) over data in chunks.
pub fn predict(probe: &Probe, data: &Data, device: &Device, keep_attention: bool) -> Outputs {
    let n = data.len();
    let chunk = 256;
    let mut out = Outputs {
        dim: data.dim(),
        ..Default::default()
    };
    let mut start = 0;
    while start < n {
        let idx: Vec<usize> = (start..(start + chunk).min(n)).collect();
        let (z, a) = probe.pool(data.batch(&idx, device));
        let logits = probe.classify(z.clone(), None);
        out.classes = logits.dims()[1];
        out.logits.extend(to_vec(logits));
        out.pooled.extend(to_vec(z));
        if keep_attention && let Some(a) = a {
            out.attention.extend(to_vec(a));
        }
        start += chunk;
    }
    out
}

/// Weighted (or plain) mean cross-entropy of logits `[B, C]` against `y` (torch's
/// `CrossEntropyLoss(weight)` with mean reduction).
pub fn cross_entropy(
    logits: Tensor<2>,
    y: &[usize],
    weights: Option<&[f32]>,
    device: &Device,
) -> Tensor<1> {
    let b = y.len();
    let logp = log_softmax(logits, 1);
    let yt = Tensor::<2, Int>::from_data(
        TensorData::new(y.iter().map(|&v| v as i64).collect::<Vec<_>>(), [b, 1]),
        device,
    );
    let nll = logp.gather(1, yt).neg().reshape([b]);
    match weights {
        None => nll.mean(),
        Some(w) => {
            let wi: Vec<f32> = y.iter().map(|&c| w[c]).collect();
            let total: f32 = wi.iter().sum();
            let wt = Tensor::<1>::from_data(TensorData::new(wi, [b]), device);
            (nll * wt).sum() / total
        }
    }
}

/// Top-1 accuracy of predictions.
pub fn top1(pred: &[usize], y: &[usize]) -> f64 {
    if y.is_empty() {
        return f64::NAN;
    }
    pred.iter().zip(y).filter(|(p, t)| p == t).count() as f64 / y.len() as f64
}

/// Paired accuracy: fraction of pairs with both members correct.
pub fn paired_accuracy(pred: &[usize], y: &[usize], pairs: &[(usize, usize)]) -> f64 {
    if pairs.is_empty() {
        return f64::NAN;
    }
    pairs
        .iter()
        .filter(|&&(i, j)| pred[i] == y[i] && pred[j] == y[j])
        .count() as f64
        / pairs.len() as f64
}

/// Trains a probe with the recipe of [`TrainConfig`] (see the module docs).
///
/// `device` is the plain (non-autodiff) device; training runs on `device.autodiff()`.
///
/// # Panics
/// If the training set is empty or the data and label lengths differ.
#[allow(clippy::too_many_arguments)]
pub fn train(
    pool: PoolSpec,
    head: HeadSpec,
    classes: usize,
    train: &Data,
    y_train: &[usize],
    val: &Data,
    y_val: &[usize],
    cfg: &TrainConfig,
    device: &Device,
) -> Trained {
    assert!(
        !train.is_empty() && train.len() == y_train.len() && val.len() == y_val.len(),
        "probe data and labels disagree"
    );
    let ad = device.clone().autodiff();
    let mut model = Probe::init(pool, head, train.dim(), classes, cfg.seed, &ad);
    let mut optim = cfg.optimizer().init();

    let adjacent = adjacent_pairs(y_val.len());
    let evaluate = |m: &Probe| -> (f64, f64) {
        let out = predict(m, val, device, false);
        let pred = out.predictions();
        let t1 = top1(&pred, y_val);
        let sel = match &cfg.selection {
            Selection::Top1 => t1,
            Selection::Paired(pairs) => paired_accuracy(&pred, y_val, pairs),
            Selection::AdjacentPairs => paired_accuracy(&pred, y_val, &adjacent),
        };
        (t1, sel)
    };
    let mut best = BestSoFar::new();
    let mut history = Vec::new();
    let n = train.len();
    let mut order: Vec<usize> = (0..n).collect();
    let hidden = model.hidden();
    for epoch in 1..=cfg.epochs {
        let mut rng = stream(cfg.seed, &[ns::PROBE_SHUFFLE, epoch as u64]);
        order.shuffle(&mut rng);
        let mut loss_sum = 0.0;
        let mut batches = 0;
        for (step, idx) in order.chunks(cfg.batch.max(1)).enumerate() {
            let input = train.batch(idx, &ad);
            let y: Vec<usize> = idx.iter().map(|&i| y_train[i]).collect();
            let keep = (model.dropout > 0.0 && hidden > 0).then(|| {
                let p = model.dropout;
                let mut r = stream(cfg.seed, &[ns::PROBE_DROPOUT, epoch as u64, step as u64]);
                let m: Vec<f32> = (0..idx.len() * hidden)
                    .map(|_| {
                        if r.random::<f64>() < p {
                            0.0
                        } else {
                            (1.0 / (1.0 - p)) as f32
                        }
                    })
                    .collect();
                Tensor::<2>::from_data(TensorData::new(m, [idx.len(), hidden]), &ad)
            });
            let (z, _) = model.pool(input);
            let logits = model.classify(z, keep);
            let loss = cross_entropy(logits, &y, cfg.class_weights.as_deref(), &ad);
            loss_sum += loss.clone().into_scalar::<f32>() as f64;
            batches += 1;
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(cfg.lr, model, grads);
        }
        let current = model.valid();
        let (t1, sel) = evaluate(&current);
        history.push(EpochLog {
            epoch,
            train_loss: loss_sum / batches.max(1) as f64,
            val_top1: t1,
            val_selection: sel,
        });
        best.offer(epoch, sel, current);
    }
    let (best_epoch, best_val, probe) = best
        .into_best()
        .unwrap_or_else(|| (0, f64::NEG_INFINITY, model.valid()));
    Trained {
        probe,
        best_epoch,
        best_val,
        history,
    }
}
