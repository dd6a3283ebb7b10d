//! Training pieces every study that fits something shares: optimizers with PyTorch's defaults
//! (burn's differ: its Adam epsilon is 1e-5 and its AdamW weight decay 1e-4), best-validation
//! selection, and a seeded batch order.
//!
//! The foveated probes (Adam) and the LoRA finetuning (AdamW) train through these; a new
//! training study (the generative readout) should too.

use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, AdamWConfig};
use rand::seq::SliceRandom;

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
}
