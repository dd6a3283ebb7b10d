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
pub fn token_cross_entropy(logits: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    let [m, _] = logits.dims();
    let logits = logits.cast(burn::tensor::FloatDType::F32);
    let max = logits.clone().detach().max_dim(1); // [M, 1]
    let lse = (logits.clone() - max.clone()).exp().sum_dim(1).log() + max; // [M, 1]
    let picked = logits.gather(1, targets.reshape([m, 1])); // [M, 1]
    (lse - picked).mean().reshape([1])
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
    /// burn's optimizer config with exactly these settings.
    pub fn config(&self) -> AdamWConfig {
        AdamWConfig::new()
            .with_beta_1(self.beta1)
            .with_beta_2(self.beta2)
            .with_epsilon(self.epsilon)
            .with_weight_decay(self.weight_decay)
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
