//! Training pieces every study that fits something shares: optimizers with PyTorch's defaults
//! (burn's differ: its Adam epsilon is 1e-5 and its AdamW weight decay 1e-4), best-validation
//! selection, a seeded batch order, and fingerprinted checkpoints to resume an interrupted run
//! ([`Checkpoints`]).
//!
//! The foveated probes (Adam) and the LoRA finetuning (AdamW, checkpoints) train through these;
//! a new training study (the generative readout) should too.
//!
//! ## Checkpoints
//! A checkpoint directory holds `step-NNNNNN/` (the step, six digits) with the caller's files
//! and `state.json` (`{"fingerprint":…,"step":…}`), and `latest.json`
//! (`{"dir":"step-NNNNNN","step":…}`) naming the newest complete one. [`Checkpoints::save`]
//! fills a fresh temporary directory beside the others, moves it into place, then replaces
//! `latest.json` atomically and removes older step directories: a run killed at any moment
//! leaves `latest.json` naming a complete checkpoint. The fingerprint ([`Fingerprint`]: a hash
//! of the run's settings and of its data in order) makes a resume with other data or settings an
//! error naming the checkpoint.

use std::path::{Path, PathBuf};

use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, AdamWConfig};
use burn::prelude::*;
use burn::tensor::DType;
use rand::seq::SliceRandom;

use crate::fsutil;

/// The label value left out of [`next_token_cross_entropy`] (PyTorch's `ignore_index`).
pub const IGNORE_INDEX: i64 = -100;

/// The language-modelling loss of a decoder: the cross-entropy of the logits at position `t`
/// against the label at `t + 1`, averaged over the targets that are not [`IGNORE_INDEX`]
/// (transformers' `ForCausalLMLoss` with `labels`, `reduction="mean"`; the logits are
/// upcast to f32 first, as there). The last position has no target.
///
/// # Shapes
/// `logits: [N, T, V]`, `labels: [N, T]` (ids, or [`IGNORE_INDEX`]) → `[1]`. NaN when every
/// target is ignored, as torch gives.
pub fn next_token_cross_entropy(logits: Tensor<3>, labels: Tensor<2, Int>) -> Tensor<1> {
    let [n, t, _] = logits.dims();
    let logits = logits.cast(burn::tensor::FloatDType::F32);
    // Labels shifted one to the left, the last position ignored: the logits tensor is used
    // whole (no [N, T-1, V] copy), and only the cheap label tensor moves.
    let device = labels.device();
    let targets = Tensor::cat(
        vec![
            labels.slice([0..n, 1..t]),
            Tensor::<2, Int>::full([n, 1], IGNORE_INDEX, &device),
        ],
        1,
    ); // [N, T]
    let keep = targets.clone().not_equal_elem(IGNORE_INDEX);
    let safe = targets.mask_fill(keep.clone().bool_not(), 0);
    // −log softmax(z)_y = logsumexp(z) − z_y, with the row maximum (a constant for the
    // gradient) subtracted before exp.
    let max = logits.clone().detach().max_dim(2); // [N, T, 1]
    let lse = (logits.clone() - max.clone()).exp().sum_dim(2).log() + max; // [N, T, 1]
    let picked = logits.gather(2, safe.reshape([n, t, 1])); // [N, T, 1]
    let keep = keep.float();
    let total = ((lse - picked).reshape([n, t]) * keep.clone()).sum();
    total / keep.sum()
}

/// The mean cross-entropy of `logits` rows against `targets`: `mean_m(logsumexp(z_m) − z_m[y_m])`
/// in f32 — [`next_token_cross_entropy`] over rows already gathered at the supervised
/// positions, so a caller that knows them can run the LM head on those rows only (the head is
/// the widest product of a small decoder's training step; transformers' `logits_to_keep` plays
/// the same part at generation).
///
/// # Shapes
/// `logits: [M, V]`, `targets: [M]` (ids in `0..V`) → `[1]`. NaN when `M = 0`, as torch's mean
/// over no targets gives.
///
/// # Computation
/// The value and the gradient come from one softmax `p` of the logits outside the autodiff
/// graph (the backend's fused, row-parallel kernel): the value is `mean(−ln p_y)` (exactly
/// `logsumexp(z) − z_y` where `p_y` underflows), and the gradient
/// `∂/∂z = (p − onehot(y)) / M` — the cross-entropy's own — enters the graph through
/// `Σ z·G − (Σ z·G)ₓ`, which is 0 in value (`ₓ`: detached). burn's autodiff has no fused
/// softmax, so the textbook graph (`max`, `exp`, `sum`, `log` and their backward) costs about
/// ten element-wise passes over `[M, V]` with a scalar `exp` per element: 50 M of them for a
/// SmolLM2 batch of 8 × 128 tokens.
pub fn token_cross_entropy(logits: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    let [m, _] = logits.dims();
    if m == 0 {
        // torch's mean over no targets; GPU kernels are not launched on empty tensors.
        return Tensor::full([1], f32::NAN, &logits.device());
    }
    let logits = logits.cast(burn::tensor::FloatDType::F32);
    let targets = targets.reshape([m, 1]).inner();
    let z = logits.clone().inner();
    // The fused kernel sums each row's exponentials one by one in f32 (off by up to ~5e-5 of
    // the sum over 49,152 logits); dividing by the row sums of its output, which the backend
    // reduces lane-wise, leaves the normalisation torch's lane-wise sum gives.
    let p = burn::tensor::activation::softmax(z.clone(), 1); // [M, V]
    let p = p.clone() / p.sum_dim(1);
    let p_y = p.clone().gather(1, targets.clone()); // [M, 1]
    // −ln p_y loses nothing until p_y leaves the normal f32 range (a loss above ~87).
    let underflow = p_y.clone().min().into_scalar::<f32>() < f32::MIN_POSITIVE;
    let rows = if underflow {
        let max = z.clone().max_dim(1);
        let lse = (z.clone() - max.clone()).exp().sum_dim(1).log() + max;
        lse - z.gather(1, targets.clone())
    } else {
        p_y.log().neg()
    };
    let value = rows.mean().reshape([1]);
    if !logits.is_autodiff() {
        return value;
    }
    let minus_one = Tensor::<2>::full([m, 1], -1.0, &p.device());
    let g = p.scatter(1, targets, minus_one, burn::tensor::IndexingUpdateOp::Add);
    let dot = (logits * Tensor::from_inner(g)).sum();
    Tensor::from_inner(value) + (dot.clone() - dot.detach()) / m as f64
}

/// `torch.optim.Adam(params, lr, weight_decay=weight_decay)`: β = (0.9, 0.999), ε = 1e-8, and
/// L2 weight decay added to the gradient (coupled, as torch's Adam does) when `weight_decay > 0`.
pub fn adam(weight_decay: f64) -> AdamConfig {
    let adam = AdamConfig::new()
        .with_beta_1(0.9)
        .with_beta_2(0.999)
        .with_epsilon(1e-8);
    if weight_decay > 0.0 {
        adam.with_weight_decay(Some(WeightDecayConfig::new(weight_decay as f32)))
    } else {
        adam
    }
}

/// The settings of `torch.optim.AdamW` (decoupled weight decay); [`Default`] is torch's:
/// β = (0.9, 0.999), ε = 1e-8, weight decay 0.01.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamW {
    /// β₁.
    pub beta1: f32,
    /// β₂.
    pub beta2: f32,
    /// ε.
    pub epsilon: f32,
    /// Decoupled weight decay λ (the update subtracts `lr · λ · θ`).
    pub weight_decay: f32,
}

impl Default for AdamW {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: 0.01,
        }
    }
}

impl AdamW {
    /// burn's optimizer config with exactly these settings. Training code steps with
    /// [`AdamW::init`] instead: burn's update rounds differently (its bias corrections in f32,
    /// `1 − β₂` from the f32 β₂, off by 1.3e-5 of itself), so a run started with one and resumed
    /// with the other does not continue bit for bit.
    pub fn config(&self) -> AdamWConfig {
        AdamWConfig::new()
            .with_beta_1(self.beta1)
            .with_beta_2(self.beta2)
            .with_epsilon(self.epsilon)
            .with_weight_decay(self.weight_decay)
    }

    /// An optimizer over a whole module that steps every parameter with [`TorchAdamW`]:
    /// torch's update, one fused pass per parameter on the CPU. Its state is burn's
    /// `AdamWState`, so checkpoints of [`AdamW::config`]`.init()` load into it and back.
    pub fn init(&self) -> burn::optim::ModuleOptimizer {
        burn::optim::ModuleOptimizer::from(TorchAdamW { settings: *self })
    }
}

/// `torch.optim.AdamW`'s update of one parameter (torch 2.x, its single-tensor
/// implementation, which the CPU uses), step `t` counted from 1:
///
/// ```text
/// θ ← θ · (1 − lr·λ)
/// m ← m + (1 − β₁)·(g − m)                       (lerp)
/// v ← β₂·v + (1 − β₂)·g²
/// θ ← θ − lr/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)
/// ```
///
/// On the CPU (burn flex, f32 parameters) the four tensors are updated in one pass over their
/// buffers, in parallel over chunks, in place where burn holds the only reference (a shared
/// buffer is copied first, so no other holder sees the change). burn's `AdamW` spends about
/// 15 element-wise passes, each a new buffer, on the same update: 0.8 s of a 10 s SmolLM2-135M
/// training step (`benches/geb_train_step.rs`). Elsewhere (GPUs, other float dtypes) the same
/// formula runs as tensor operations. The bias corrections are computed in f64, as torch's
/// Python scalars are; burn's `AdamW` computes them in f32 and divides `m` and `v` instead.
///
/// Source: Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (ICLR 2019),
/// Algorithm 2, as `torch.optim.AdamW` implements it.
#[derive(Debug, Clone, Copy)]
pub struct TorchAdamW {
    /// β, ε and the decoupled weight decay.
    pub settings: AdamW,
}

/// Elements per parallel chunk of the fused CPU step (a chunk's four slices stay in L2).
const ADAMW_CHUNK: usize = 1 << 14;

/// The scalars of one AdamW step, in f32 as torch's float kernels apply them.
#[derive(Debug, Clone, Copy)]
struct AdamWScalars {
    /// `1 − lr·λ`, or `None` without weight decay.
    decay: Option<f32>,
    /// The lerp weight `1 − β₁`.
    w1: f32,
    beta2: f32,
    /// `1 − β₂`.
    w2: f32,
    /// `√(1 − β₂ᵗ)`.
    bc2_sqrt: f32,
    eps: f32,
    /// `−lr / (1 − β₁ᵗ)`.
    neg_step: f32,
}

/// The f64 of the shortest decimal that reads back as `x`: `0.999f32` → `0.999`, where
/// `f64::from` gives 0.99900001287…, so `1 − β₂` would be off by 1.3e-5 of itself against
/// torch's Python float.
fn decimal(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

impl AdamWScalars {
    fn new(s: &AdamW, lr: f64, t: usize) -> Self {
        let t = i32::try_from(t).unwrap_or(i32::MAX);
        let (b1, b2, wd) = (decimal(s.beta1), decimal(s.beta2), decimal(s.weight_decay));
        Self {
            decay: (wd != 0.0).then_some((1.0 - lr * wd) as f32),
            w1: (1.0 - b1) as f32,
            beta2: s.beta2,
            w2: (1.0 - b2) as f32,
            bc2_sqrt: (1.0 - b2.powi(t)).sqrt() as f32,
            eps: s.epsilon,
            neg_step: (-lr / (1.0 - b1.powi(t))) as f32,
        }
    }

    /// torch's element-wise kernels in order: `mul_`, `lerp_` (weight < 0.5:
    /// `m + w·(g − m)`; otherwise `g − (g − m)·(1 − w)`), `mul_().addcmul_`, `sqrt / c + ε`,
    /// `addcdiv_`.
    #[inline]
    fn apply(&self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
        for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            if let Some(d) = self.decay {
                *p *= d;
            }
            *m = if self.w1 < 0.5 {
                *m + self.w1 * (g - *m)
            } else {
                g - (g - *m) * (1.0 - self.w1)
            };
            *v = *v * self.beta2 + self.w2 * g * g;
            let denom = v.sqrt() / self.bc2_sqrt + self.eps;
            *p += self.neg_step * *m / denom;
        }
    }
}

impl TorchAdamW {
    /// The tensor-operation form of [`AdamWScalars::apply`] (any device and dtype).
    fn step_tensors<const D: usize>(
        c: &AdamWScalars,
        p: Tensor<D>,
        g: Tensor<D>,
        m: Tensor<D>,
        v: Tensor<D>,
    ) -> [Tensor<D>; 3] {
        let p = match c.decay {
            Some(d) => p.mul_scalar(d),
            None => p,
        };
        let m = if c.w1 < 0.5 {
            m.clone() + (g.clone() - m).mul_scalar(c.w1)
        } else {
            g.clone() - (g.clone() - m).mul_scalar(1.0 - c.w1)
        };
        let v = v.mul_scalar(c.beta2) + g.square().mul_scalar(c.w2);
        let denom = v.clone().sqrt().div_scalar(c.bc2_sqrt).add_scalar(c.eps);
        let p = p + m.clone().mul_scalar(c.neg_step).div(denom);
        [p, m, v]
    }

    /// Whether the fused pass on host buffers applies: every tensor f32 on the CPU.
    fn on_host<const D: usize>(p: &Tensor<D>, g: &Tensor<D>, m: &Tensor<D>, v: &Tensor<D>) -> bool {
        let cpu = Device::flex();
        [p, g, m, v]
            .iter()
            .all(|t| t.dtype() == DType::F32 && t.device() == cpu)
    }
}

impl burn::optim::Optimizer for TorchAdamW {
    type State<const D: usize> = burn::optim::AdamWState<D>;

    fn step<const D: usize>(
        &self,
        lr: burn::optim::LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        self.step_with(lr, tensor, grad, state, true)
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        let burn::optim::AdaptiveMomentumState {
            time,
            moment_1,
            moment_2,
            max_moment_2,
        } = state.momentum;
        let mut momentum = burn::optim::AdaptiveMomentumState::new(
            time,
            moment_1.to_device(device),
            moment_2.to_device(device),
        );
        momentum.max_moment_2 = max_moment_2.map(|t| t.to_device(device));
        burn::optim::AdamWState::new(momentum)
    }
}

impl TorchAdamW {
    /// [`burn::optim::Optimizer::step`], with the fused host pass allowed or not (the tests
    /// compare both forms).
    fn step_with<const D: usize>(
        &self,
        lr: f64,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<burn::optim::AdamWState<D>>,
        fused: bool,
    ) -> (Tensor<D>, Option<burn::optim::AdamWState<D>>) {
        let (time, m, v) = match state {
            Some(s) => (
                s.momentum.time + 1,
                s.momentum.moment_1,
                s.momentum.moment_2,
            ),
            None => (1, grad.zeros_like(), grad.zeros_like()),
        };
        let c = AdamWScalars::new(&self.settings, lr, time);
        let [p, m, v] = if fused && Self::on_host(&tensor, &grad, &m, &v) {
            let device = tensor.device();
            let shape = tensor.shape();
            let host = |t: Tensor<D>| t.into_data();
            let (mut pd, gd, mut md, mut vd) = (host(tensor), host(grad), host(m), host(v));
            {
                use rayon::prelude::*;
                let (ps, gs, ms, vs) = (
                    pd.as_mut_slice::<f32>().expect("f32 checked"),
                    gd.as_slice::<f32>().expect("f32 checked"),
                    md.as_mut_slice::<f32>().expect("f32 checked"),
                    vd.as_mut_slice::<f32>().expect("f32 checked"),
                );
                ps.par_chunks_mut(ADAMW_CHUNK)
                    .zip(gs.par_chunks(ADAMW_CHUNK))
                    .zip(ms.par_chunks_mut(ADAMW_CHUNK))
                    .zip(vs.par_chunks_mut(ADAMW_CHUNK))
                    .for_each(|(((p, g), m), v)| c.apply(p, g, m, v));
            }
            let back = |d: burn::tensor::TensorData| {
                Tensor::<D>::from_data(d, (&device, DType::F32)).reshape(shape.clone())
            };
            [back(pd), back(md), back(vd)]
        } else {
            Self::step_tensors(&c, tensor, grad, m, v)
        };
        let momentum = burn::optim::AdaptiveMomentumState::new(time, m, v);
        (p, Some(burn::optim::AdamWState::new(momentum)))
    }
}

/// Keeps the best of a sequence of candidates by validation score: the first candidate, then
/// any whose score is strictly greater than the best so far (ties keep the earlier one).
#[derive(Debug, Clone)]
pub struct BestSoFar<T> {
    best: Option<(usize, f64, T)>,
}

impl<T> Default for BestSoFar<T> {
    fn default() -> Self {
        Self { best: None }
    }
}

impl<T> BestSoFar<T> {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers the candidate of step (or epoch) `at` with validation `score`; returns whether it
    /// is now the best.
    pub fn offer(&mut self, at: usize, score: f64, candidate: T) -> bool {
        let better = self.best.as_ref().is_none_or(|(_, s, _)| score > *s);
        if better {
            self.best = Some((at, score, candidate));
        }
        better
    }

    /// `(at, score, candidate)` of the best, `None` when nothing was offered.
    pub fn into_best(self) -> Option<(usize, f64, T)> {
        self.best
    }
}

/// The order of `n` training items in one epoch for new code: `0..n` shuffled by
/// `rand`'s `SliceRandom::shuffle` with the stream `rng::stream(seed, &[namespace, epoch])`.
pub fn epoch_order(seed: u64, namespace: u64, epoch: u64, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut crate::rng::stream(seed, &[namespace, epoch]));
    order
}

/// A 64-bit FNV-1a hash of a sequence of strings, each followed by a 0 byte (so `["ab", "c"]`
/// and `["a", "bc"]` differ): the resume guard of [`Checkpoints`]. Feed it the run's settings
/// (their JSON) and its data in order; [`Fingerprint::hex`] is what `state.json` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(u64);

impl Default for Fingerprint {
    /// The FNV-1a offset basis (nothing hashed yet).
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fingerprint {
    /// Nothing hashed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hashes `s` and a terminating 0 byte.
    pub fn text(&mut self, s: &str) -> &mut Self {
        for b in s.bytes().chain(std::iter::once(0)) {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self
    }

    /// Hashes the compact JSON of `value` ([`Self::text`]; an unserializable value hashes as
    /// the empty string).
    pub fn json<T: serde::Serialize + ?Sized>(&mut self, value: &T) -> &mut Self {
        self.text(&serde_json::to_string(value).unwrap_or_default())
    }

    /// The hash as 16 lowercase hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

/// Why a checkpoint could not be saved or resumed. The messages name the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointsError {
    /// A file or directory could not be read, created, moved or listed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An I/O error whose message is complete as it is (the atomic writes name their file).
    #[error("{0}")]
    Write(std::io::Error),
    /// `latest.json` or `state.json` is not JSON.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        source: serde_json::Error,
    },
    /// `latest.json` or `state.json` lacks a field.
    #[error("{file}: no {field}")]
    Incomplete {
        /// `latest.json` or `state.json`.
        file: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// The checkpoint was written by a run with another fingerprint.
    #[error(
        "{}: checkpoint of another run (different data or settings); use a new output directory",
        dir.display()
    )]
    OtherRun {
        /// The checkpoint's step directory.
        dir: PathBuf,
    },
    /// The caller's files could not be written (its message).
    #[error("{0}")]
    Files(String),
}

/// A complete checkpoint, as [`Checkpoints::latest`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    /// The step it holds (steps done).
    pub step: usize,
    /// Its `step-NNNNNN/` directory, where the caller's files are.
    pub dir: PathBuf,
}

/// `latest.json`: the pointer to the newest complete checkpoint.
const LATEST: &str = "latest.json";
/// `state.json`: step and fingerprint, in every step directory.
const STATE: &str = "state.json";
/// Step directories are `step-NNNNNN`; temporary ones start with `.step-`.
const STEP_PREFIX: &str = "step-";

/// The checkpoints of one training run: a directory and the run's fingerprint (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoints {
    dir: PathBuf,
    fingerprint: String,
}

impl Checkpoints {
    /// The checkpoints in `dir` (created on the first save) of the run whose fingerprint is
    /// `fingerprint` (e.g. [`Fingerprint::hex`]).
    pub fn new(dir: impl Into<PathBuf>, fingerprint: impl Into<String>) -> Self {
        Self {
            dir: dir.into(),
            fingerprint: fingerprint.into(),
        }
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The run's fingerprint.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Saves the checkpoint of `step`: `write` puts the caller's files into the directory it
    /// is given (a temporary one), then `state.json` is added, the directory becomes
    /// `step-NNNNNN/` (replacing an earlier save of the same step), `latest.json` is replaced
    /// atomically, and every other step directory is removed. If anything fails, the last
    /// complete checkpoint stays as it was. Returns the step directory.
    ///
    /// # Errors
    /// [`CheckpointsError::Files`] with `write`'s message, or an I/O error naming the path.
    pub fn save(
        &self,
        step: usize,
        write: impl FnOnce(&Path) -> Result<(), String>,
    ) -> Result<PathBuf, CheckpointsError> {
        let name = format!("{STEP_PREFIX}{step:06}");
        let step_dir = self.dir.join(&name);
        let at = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CheckpointsError::Io { path, source }
        };
        std::fs::create_dir_all(&self.dir).map_err(at(&step_dir))?;
        // Dropped (and removed) on any early return: a failed save leaves no debris.
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempdir_in(&self.dir)
            .map_err(at(&step_dir))?;
        write(tmp.path()).map_err(CheckpointsError::Files)?;
        let state = serde_json::json!({ "step": step, "fingerprint": self.fingerprint });
        fsutil::write_atomic(&tmp.path().join(STATE), state.to_string().as_bytes())
            .map_err(CheckpointsError::Write)?;
        self.publish(tmp, &step_dir)?;
        let latest = serde_json::json!({ "step": step, "dir": name });
        fsutil::write_atomic(&self.dir.join(LATEST), latest.to_string().as_bytes())
            .map_err(CheckpointsError::Write)?;
        self.remove_others(&step_dir)?;
        Ok(step_dir)
    }

    /// Moves the filled temporary directory to `step_dir`. An earlier save of the same step is
    /// first moved aside (two renames, no copy), then removed.
    fn publish(&self, tmp: tempfile::TempDir, step_dir: &Path) -> Result<(), CheckpointsError> {
        let aside = step_dir.exists().then(|| {
            let mut name = std::ffi::OsString::from(".");
            name.push(step_dir.file_name().unwrap_or_default());
            name.push(".old");
            self.dir.join(name)
        });
        if let Some(aside) = &aside {
            if aside.exists() {
                std::fs::remove_dir_all(aside).map_err(|source| CheckpointsError::Io {
                    path: aside.clone(),
                    source,
                })?;
            }
            std::fs::rename(step_dir, aside).map_err(|source| CheckpointsError::Io {
                path: step_dir.to_path_buf(),
                source,
            })?;
        }
        let filled = tmp.keep();
        if let Err(source) = std::fs::rename(&filled, step_dir) {
            let _ = std::fs::remove_dir_all(&filled);
            if let Some(aside) = &aside {
                let _ = std::fs::rename(aside, step_dir);
            }
            return Err(CheckpointsError::Io {
                path: step_dir.to_path_buf(),
                source,
            });
        }
        if let Some(aside) = &aside {
            let _ = std::fs::remove_dir_all(aside);
        }
        Ok(())
    }

    /// Removes every step directory but `keep`, and what interrupted saves left behind.
    fn remove_others(&self, keep: &Path) -> Result<(), CheckpointsError> {
        let entries = std::fs::read_dir(&self.dir).map_err(CheckpointsError::Write)?;
        for entry in entries.flatten() {
            let p = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with(STEP_PREFIX)
                || name
                    .strip_prefix('.')
                    .is_some_and(|n| n.starts_with(STEP_PREFIX));
            if p != keep && p.is_dir() && ours {
                let _ = std::fs::remove_dir_all(&p);
            }
        }
        Ok(())
    }

    /// The checkpoint `latest.json` names, `None` when there is none (a fresh run).
    ///
    /// # Errors
    /// Unreadable or incomplete `latest.json` / `state.json`, or
    /// [`CheckpointsError::OtherRun`] when the checkpoint's fingerprint is not this run's.
    pub fn latest(&self) -> Result<Option<Saved>, CheckpointsError> {
        let latest = self.dir.join(LATEST);
        if !latest.is_file() {
            return Ok(None);
        }
        let pointer = read_json(&latest)?;
        let dir = pointer["dir"]
            .as_str()
            .ok_or(CheckpointsError::Incomplete {
                file: LATEST,
                field: "dir",
            })?;
        let step_dir = self.dir.join(dir);
        let state = read_json(&step_dir.join(STATE))?;
        if state["fingerprint"].as_str() != Some(self.fingerprint.as_str()) {
            return Err(CheckpointsError::OtherRun { dir: step_dir });
        }
        let step = state["step"].as_u64().ok_or(CheckpointsError::Incomplete {
            file: STATE,
            field: "step",
        })?;
        Ok(Some(Saved {
            step: step as usize,
            dir: step_dir,
        }))
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value, CheckpointsError> {
    let text = std::fs::read_to_string(path).map_err(|source| CheckpointsError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| CheckpointsError::Json {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings burn's configs hold (read through their serde form: the fields are private).
    fn settings<C: serde::Serialize>(c: &C) -> serde_json::Value {
        serde_json::to_value(c).unwrap()
    }

    #[test]
    fn presets_carry_torch_defaults() {
        let a = AdamW::default();
        assert_eq!(
            (a.beta1, a.beta2, a.epsilon, a.weight_decay),
            (0.9, 0.999, 1e-8, 0.01)
        );
        let c = settings(&a.config());
        for (key, want) in [
            ("beta_1", 0.9),
            ("beta_2", 0.999),
            ("epsilon", 1e-8),
            ("weight_decay", 0.01),
        ] {
            let got = c[key].as_f64().unwrap();
            assert!((got - want).abs() <= want * 1e-6, "AdamW {key}: {got}");
        }
        let plain = settings(&adam(0.0));
        for (key, want) in [("beta_1", 0.9), ("beta_2", 0.999), ("epsilon", 1e-8)] {
            let got = plain[key].as_f64().unwrap();
            assert!((got - want).abs() <= want * 1e-6, "Adam {key}: {got}");
        }
        assert!(plain["weight_decay"].is_null());
        let decayed = settings(&adam(1e-4));
        let wd = decayed["weight_decay"]["penalty"].as_f64().unwrap();
        assert!((wd - 1e-4).abs() <= 1e-10, "{decayed}");
    }

    /// `torch.optim.AdamW` (torch 2.15.0, CPU) on one parameter of 12 elements,
    /// `θ₀[i] = sin(0.7 i)`, gradient at step t (from 0) `g[i] = 0.1 (t + 1) cos(1.3 i + t)`:
    /// `(β₁, λ, lr, steps)` and θ, `exp_avg`, `exp_avg_sq` after the last step.
    #[allow(clippy::type_complexity, clippy::excessive_precision)]
    const TORCH_ADAMW: [((f32, f32, f64, usize), [[f32; 12]; 3]); 2] = [
        (
            (0.9, 0.01, 1e-2, 3),
            [
                [
                    -0.021777935,
                    0.64773643,
                    1.0131389,
                    0.8699305,
                    0.3067986,
                    -0.36929384,
                    -0.86577296,
                    -0.9559065,
                    -0.6298454,
                    -0.011708596,
                    0.64158845,
                    1.0146849,
                ],
                [
                    0.0053410376,
                    -0.039450623,
                    -0.026447028,
                    0.025301527,
                    0.039983284,
                    -0.0039105606,
                    -0.042075425,
                    -0.018599693,
                    0.03212463,
                    0.035786293,
                    -0.012979048,
                    -0.042730052,
                ],
                [
                    3.7231435e-05,
                    0.000106213796,
                    4.059481e-05,
                    8.40688e-05,
                    7.518304e-05,
                    4.6937254e-05,
                    0.000104229999,
                    3.428877e-05,
                    9.685974e-05,
                    5.9568250e-05,
                    6.0906594e-05,
                    9.590445e-05,
                ],
            ],
        ),
        (
            (0.3, 0.0, 5e-2, 4),
            [
                [
                    -0.006672859,
                    0.7586988,
                    1.0672610,
                    0.77566266,
                    0.18656114,
                    -0.33315745,
                    -0.7672586,
                    -0.9307423,
                    -0.7412885,
                    -0.10512863,
                    0.6981496,
                    1.1741345,
                ],
                [
                    -0.2947173,
                    -0.1823245,
                    0.19717415,
                    0.2878122,
                    -0.043195296,
                    -0.31092158,
                    -0.12314703,
                    0.2450382,
                    0.25424191,
                    -0.1090194,
                    -0.31256703,
                    -0.058203224,
                ],
                [
                    0.00019400784,
                    0.00013180998,
                    0.00013679461,
                    0.00019044994,
                    9.351202e-05,
                    0.00020598668,
                    0.00011016803,
                    0.00016190522,
                    0.00016905785,
                    0.00010506265,
                    0.00020758357,
                    9.588072e-05,
                ],
            ],
        ),
    ];

    fn host(t: Tensor<1>) -> Vec<f32> {
        t.into_data().try_to_vec::<f32>().unwrap()
    }

    /// The fused CPU pass, the tensor form on the CPU and the step on the test device (the
    /// tensor form on a GPU) against torch; a parameter whose buffer is shared is copied, not
    /// changed under its other holder.
    #[test]
    fn torch_adamw_matches_torch() {
        let n = 12;
        for ((beta1, wd, lr, steps), [want_p, want_m, want_v]) in TORCH_ADAMW {
            let opt = TorchAdamW {
                settings: AdamW {
                    beta1,
                    weight_decay: wd,
                    ..AdamW::default()
                },
            };
            let cpu = Device::flex();
            for (device, fused) in [
                (cpu.clone(), true),
                (cpu, false),
                (crate::device::test_device(), true),
            ] {
                let theta0: Vec<f32> = (0..n).map(|i| (i as f64 * 0.7).sin() as f32).collect();
                let mut p = Tensor::<1>::from_floats(theta0.as_slice(), &device);
                let held = p.clone();
                let mut state = None;
                for t in 0..steps {
                    let g: Vec<f32> = (0..n)
                        .map(|i| {
                            ((i as f64 * 1.3 + t as f64).cos() * 0.1 * (t as f64 + 1.0)) as f32
                        })
                        .collect();
                    let g = Tensor::<1>::from_floats(g.as_slice(), &device);
                    (p, state) = opt.step_with(lr, p, g, state, fused);
                }
                assert_eq!(host(held), theta0, "a shared parameter buffer was changed");
                let s = state.unwrap().momentum;
                assert_eq!(s.time, steps);
                let label = format!("beta1 {beta1}, wd {wd}, {device:?}, fused {fused}");
                for (name, got, want) in [
                    ("param", host(p), want_p),
                    ("exp_avg", host(s.moment_1), want_m),
                    ("exp_avg_sq", host(s.moment_2), want_v),
                ] {
                    for (i, (g, w)) in got.iter().zip(want).enumerate() {
                        assert!(
                            (g - w).abs() <= 2e-6 * w.abs().max(1e-3),
                            "{label}: {name}[{i}] {g} vs torch {w}"
                        );
                    }
                }
            }
        }
    }

    /// `F.cross_entropy(z, y)` (torch 2.15.0, f32) over a vocabulary of SmolLM2's size,
    /// `z[i][j] = 3 sin(0.7 j + 1.3 i) + 2 sin(0.0137 j)` (computed in f64, then f32),
    /// `y = [5, 100, 30000, 49151]`: the row sums of 49,152 exponentials must be accumulated as
    /// accurately as torch's.
    #[test]
    fn token_cross_entropy_matches_torch_over_a_wide_vocabulary() {
        let (m, v) = (4usize, 49_152usize);
        let z: Vec<f32> = (0..m * v)
            .map(|k| {
                let (i, j) = ((k / v) as f64, (k % v) as f64);
                (3.0 * (0.7 * j + 1.3 * i).sin() + 2.0 * (0.0137 * j).sin()) as f32
            })
            .collect();
        for device in [crate::device::test_device(), Device::flex()] {
            let zt = Tensor::<1>::from_floats(z.as_slice(), &device.clone().autodiff())
                .reshape([m, v])
                .require_grad();
            let y = Tensor::<1, Int>::from_ints([5, 100, 30000, 49151], &zt.device());
            let got = token_cross_entropy(zt, y).into_scalar::<f32>();
            let want = 12.095_369_f32; // torch printed 12.095369338989258 (this f32)
            assert!(
                (got - want).abs() <= 4e-6,
                "{device:?}: {got} vs torch {want}"
            );
        }
    }

    /// `F.cross_entropy(z, y)` and its gradient (torch 2.15.0) for
    /// `z[i][j] = 3 sin(1.7 i + 0.3 j)`, `z[2][4] = −200` (a target whose softmax underflows),
    /// `y = [1, 5, 4]`.
    #[test]
    #[allow(clippy::excessive_precision)] // torch's printed values, kept as printed
    fn token_cross_entropy_matches_torch() {
        let want_loss = 69.04593658447266f32;
        let want_grad: [[f32; 6]; 3] = [
            [
                0.005987769924104214,
                -0.3188024163246155,
                0.03257829695940018,
                0.06278397887945175,
                0.0980851873755455,
                0.11936715245246887,
            ],
            [
                0.12595996260643005,
                0.09838240593671799,
                0.06022486090660095,
                0.03018888458609581,
                0.01318022608757019,
                -0.3279363214969635,
            ],
            [
                0.17431752383708954,
                0.07655376940965652,
                0.03874858468770981,
                0.024022813886404037,
                -0.3333333432674408,
                0.01969064772129059,
            ],
        ];
        let mut z: Vec<f32> = (0..18)
            .map(|k| 3.0 * (1.7 * (k / 6) as f64 + 0.3 * (k % 6) as f64).sin() as f32)
            .collect();
        z[2 * 6 + 4] = -200.0;
        for device in [crate::device::test_device(), Device::flex()] {
            let ad = device.clone().autodiff();
            let zt = Tensor::<1>::from_floats(z.as_slice(), &ad)
                .reshape([3, 6])
                .require_grad();
            let y = Tensor::<1, Int>::from_ints([1, 5, 4], &ad);
            let loss = token_cross_entropy(zt.clone(), y.clone());
            let got = loss.clone().into_scalar::<f32>();
            assert!((got - want_loss).abs() <= 1e-4, "{device:?}: loss {got}");
            let grads = loss.backward();
            let g = zt
                .grad(&grads)
                .unwrap()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            for (i, (a, b)) in g.iter().zip(want_grad.as_flattened()).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-6,
                    "{device:?}: grad[{i}] {a} vs torch {b}"
                );
            }
            // Without autodiff: the value alone; with no underflow, −ln p_y.
            let plain = Tensor::<1>::from_floats(z.as_slice(), &device).reshape([3, 6]);
            let y = Tensor::<1, Int>::from_ints([1, 5, 4], &device);
            let v = token_cross_entropy(plain.clone(), y).into_scalar::<f32>();
            assert!((v - want_loss).abs() <= 1e-4, "{device:?}: plain loss {v}");
            let y2 = Tensor::<1, Int>::from_ints([1, 5], &device);
            let two =
                token_cross_entropy(plain.clone().slice([0..2, 0..6]), y2).into_scalar::<f32>();
            // torch: F.cross_entropy(z[:2], [1, 5]) = 3.628079414367676.
            let want_two = 3.628_079_4_f32;
            assert!(
                (two - want_two).abs() <= 1e-5,
                "{device:?}: {two} vs torch {want_two}"
            );
            // No targets: NaN, as torch's mean over none gives (and no panic).
            let none = token_cross_entropy(
                plain.slice([0..0, 0..6]),
                Tensor::<1, Int>::from_ints([0i64; 0], &device),
            );
            assert!(none.into_scalar::<f32>().is_nan(), "{device:?}: M = 0");
        }
    }

    #[test]
    fn best_keeps_the_first_of_equal_scores() {
        let mut b = BestSoFar::new();
        assert!(b.offer(1, 0.5, "a"));
        assert!(!b.offer(2, 0.5, "b"));
        assert!(b.offer(3, 0.7, "c"));
        assert!(!b.offer(4, 0.1, "d"));
        assert_eq!(b.into_best(), Some((3, 0.7, "c")));
    }

    #[test]
    fn epoch_orders_are_seeded_permutations() {
        let a = epoch_order(3, 1, 0, 50);
        assert_eq!(a, epoch_order(3, 1, 0, 50));
        assert_ne!(a, epoch_order(3, 1, 1, 50));
        let mut s = a.clone();
        s.sort();
        assert_eq!(s, (0..50).collect::<Vec<_>>());
    }

    fn put(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
        std::fs::write(dir.join(name), bytes).map_err(|e| e.to_string())
    }

    /// Everything in a checkpoint directory, `dir/file` per line, sorted.
    fn listing(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                for f in std::fs::read_dir(e.path()).unwrap() {
                    out.push(format!(
                        "{name}/{}",
                        f.unwrap().file_name().to_string_lossy()
                    ));
                }
            } else {
                out.push(name);
            }
        }
        out.sort();
        out
    }

    #[test]
    fn fingerprints_are_fnv1a_of_zero_terminated_parts() {
        // Values from an independent implementation (Python): `state.json` records them, so
        // they must never move.
        assert_eq!(Fingerprint::new().hex(), "cbf29ce484222325");
        assert_eq!(Fingerprint::new().text("a").hex(), "089be207b544f1e4");
        assert_eq!(
            Fingerprint::new()
                .text("settings")
                .text("x")
                .text("y")
                .hex(),
            "4fdef2c8ca2ddf21"
        );
        assert_ne!(
            Fingerprint::new().text("ab").text("c").hex(),
            Fingerprint::new().text("a").text("bc").hex()
        );
        assert_eq!(
            Fingerprint::new().json(&serde_json::json!({"lr": 1})).hex(),
            Fingerprint::new().text("{\"lr\":1}").hex()
        );
    }

    #[test]
    fn a_save_is_found_with_its_files_and_replaces_the_older_one() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Checkpoints::new(dir.path().join("checkpoints"), "0123abcd");
        assert_eq!(ck.latest().unwrap(), None, "no checkpoint yet");
        let two = ck.save(2, |d| put(d, "weights.bin", b"two")).unwrap();
        assert_eq!(two, ck.dir().join("step-000002"));
        assert_eq!(
            ck.latest().unwrap(),
            Some(Saved {
                step: 2,
                dir: two.clone()
            })
        );
        assert_eq!(std::fs::read(two.join("weights.bin")).unwrap(), b"two");
        // The exact bytes of the records (checkpoints of earlier builds must keep resuming).
        assert_eq!(
            std::fs::read_to_string(two.join("state.json")).unwrap(),
            r#"{"fingerprint":"0123abcd","step":2}"#
        );
        assert_eq!(
            std::fs::read_to_string(ck.dir().join("latest.json")).unwrap(),
            r#"{"dir":"step-000002","step":2}"#
        );
        let four = ck.save(4, |d| put(d, "weights.bin", b"four")).unwrap();
        assert_eq!(ck.latest().unwrap().unwrap().step, 4);
        assert_eq!(std::fs::read(four.join("weights.bin")).unwrap(), b"four");
        assert_eq!(
            listing(ck.dir()),
            [
                "latest.json",
                "step-000004/state.json",
                "step-000004/weights.bin"
            ],
            "the older step and every temporary directory are gone"
        );
        // Saving the same step again replaces it.
        ck.save(4, |d| put(d, "other.bin", b"again")).unwrap();
        assert_eq!(
            listing(ck.dir()),
            [
                "latest.json",
                "step-000004/other.bin",
                "step-000004/state.json"
            ]
        );
    }

    #[test]
    fn a_checkpoint_of_another_run_is_refused_naming_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Checkpoints::new(dir.path(), "aaaa");
        let saved = ck.save(3, |d| put(d, "w", b"x")).unwrap();
        let e = Checkpoints::new(dir.path(), "bbbb").latest().unwrap_err();
        assert!(matches!(e, CheckpointsError::OtherRun { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: checkpoint of another run (different data or settings); use a new output directory",
                saved.display()
            )
        );
        // A pointer without a directory, a state without a step.
        std::fs::write(dir.path().join("latest.json"), r#"{"step":3}"#).unwrap();
        assert_eq!(ck.latest().unwrap_err().to_string(), "latest.json: no dir");
        std::fs::write(
            dir.path().join("latest.json"),
            r#"{"dir":"step-000003","step":3}"#,
        )
        .unwrap();
        std::fs::write(saved.join("state.json"), r#"{"fingerprint":"aaaa"}"#).unwrap();
        assert_eq!(ck.latest().unwrap_err().to_string(), "state.json: no step");
    }

    #[test]
    fn an_interrupted_save_keeps_the_last_complete_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let ck = Checkpoints::new(dir.path(), "fp");
        let two = ck.save(2, |d| put(d, "w", b"two")).unwrap();
        let before = listing(dir.path());
        let fail = |d: &Path| -> Result<(), String> {
            put(d, "w", b"partial")?;
            Err("disk full".into())
        };
        // A failing save of a later step and of the same step: the error is the caller's, and
        // the complete checkpoint is untouched, with no debris beside it.
        for step in [4, 2] {
            let e = ck.save(step, fail).unwrap_err();
            assert_eq!(e.to_string(), "disk full");
            assert_eq!(
                ck.latest().unwrap(),
                Some(Saved {
                    step: 2,
                    dir: two.clone()
                })
            );
            assert_eq!(std::fs::read(two.join("w")).unwrap(), b"two");
            assert_eq!(listing(dir.path()), before);
        }
        // A process killed mid-save leaves its temporary directory: ignored on resume, removed
        // by the next save.
        let debris = dir.path().join(".step-000006.x1y2.tmp");
        std::fs::create_dir_all(&debris).unwrap();
        std::fs::write(debris.join("w"), b"half").unwrap();
        assert_eq!(ck.latest().unwrap().unwrap().step, 2);
        ck.save(6, |d| put(d, "w", b"six")).unwrap();
        assert_eq!(
            listing(dir.path()),
            ["latest.json", "step-000006/state.json", "step-000006/w"]
        );
    }
}
