//! The two synthetic tasks: Attribute Binding trials and Same/Different pairs (paper App. C).
//!
//! # Randomness
//! Trial (or pair) `i` draws from its own ChaCha8 stream: `ChaCha8Rng::seed_from_u64(seed)`
//! with stream `(task << 32) | i` (`task` 1 = binding, 2 = same/different). Trial `i` is thus
//! the same whatever the number of trials, and on every platform. Integers are drawn with
//! [`below`] (a `u32` range of `rand`'s portable uniform sampler) and permutations with an
//! explicit Fisher–Yates shuffle ([`shuffle`]), so the streams do not depend on `usize` width.
//!
//! # Attribute Binding (default 500 trials, seed 42)
//! Per trial: two different shapes `s1 ≠ s2` (`s1` uniform, `s2` uniform among the other two),
//! then a uniformly random permutation of the six colours whose first four entries are
//! `c1q, c2q, c1t, c2t` (so the four are pairwise different). The query and the four
//! candidates are
//!
//! | image | LEFT | RIGHT | what it tests |
//! |---|---|---|---|
//! | query | `s1, c1q` | `s2, c2q` | |
//! | target | `s1, c1t` | `s2, c2t` | same shape–position binding, colours disjoint from the query |
//! | D1 shape swap | `s2, c1q` | `s1, c2q` | the query's colours at their positions, shapes exchanged |
//! | D2 shape swap, different colours | `s2, c1t` | `s1, c2t` | the target's colours, shapes exchanged |
//! | D3 partial match | `s1, c1t` | `s1, c2t` | `s1` at both positions (LEFT right, RIGHT wrong) |
//!
//! The four candidates are then put in a uniformly random order. A readout scores each
//! candidate against the query; the highest score wins (ties: the earlier candidate in the
//! shuffled order); the trial is correct when the target wins. Chance is 25%. A model that only
//! sees which colours are present prefers D1; one that only sees which shapes are present cannot
//! separate the target from D1 or D2; D3 shares the target's colours and LEFT object.
//!
//! # Same/Different (default 500 pairs, seed 42)
//! Pair `i` is *same* when `i` is even, *different* when odd (exactly 250/250 for 500); among
//! the different pairs, pair `i` is a *shape swap* when `(i − 1)/2` is even and a *shape change*
//! otherwise (125/125). Draws: `s1 ≠ s2` as above, a colour permutation whose first four entries
//! are `c1, c2, c1', c2'`, and for a shape change the position `p` (LEFT/RIGHT, uniform).
//!
//! | kind | A | B |
//! |---|---|---|
//! | same | `s1,c1 \| s2,c2` | `s1,c1' \| s2,c2'` (same shapes and positions, new distinct colours) |
//! | shape swap | `s1,c1 \| s2,c2` | `s2,c1' \| s1,c2'` |
//! | shape change | `s1,c1 \| s2,c2` | the shape at `p` replaced by the third shape `s3`, colours `c1', c2'` |
//!
//! B always has colours disjoint from A's, so colour never tells the classes apart.

use crate::scene::{Color, Object, Scene, Shape};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Stream tag of the binding task.
pub const BINDING_STREAM: u64 = 1;
/// Stream tag of the same/different task.
pub const SAMEDIFF_STREAM: u64 = 2;

/// The RNG of item `index` of task `task`: [`bindscope_core::rng::legacy::binding`]
/// (ChaCha8, stream `task · 2³² + index`).
pub use bindscope_core::rng::legacy::binding as item_rng;

/// Uniform integer in `0..n` (`n ≥ 1`), portable across platforms.
pub fn below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    rng.random_range(0..n as u32) as usize
}

/// Fisher–Yates shuffle: for `i` from the last index down to 1, swap `v[i]` with `v[below(i+1)]`.
pub fn shuffle<T>(v: &mut [T], rng: &mut ChaCha8Rng) {
    for i in (1..v.len()).rev() {
        let j = below(rng, i + 1);
        v.swap(i, j);
    }
}

/// Two different shapes: `s1` uniform, `s2` uniform among the other two.
fn two_shapes(rng: &mut ChaCha8Rng) -> (Shape, Shape) {
    let a = below(rng, 3);
    let b = (a + 1 + below(rng, 2)) % 3;
    (Shape::from_index(a), Shape::from_index(b))
}

/// A uniformly random permutation of the six colours.
fn color_permutation(rng: &mut ChaCha8Rng) -> [Color; 6] {
    let mut c = Color::ALL;
    shuffle(&mut c, rng);
    c
}

/// What a binding candidate is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CandidateKind {
    /// Same shapes at the same positions, colours disjoint from the query.
    Target,
    /// Shape swap with the query's colours.
    D1,
    /// Shape swap with the target's colours.
    D2,
    /// `s1` at both positions, the target's colours.
    D3,
}

/// One Attribute Binding trial.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BindingTrial {
    /// Trial index.
    pub index: usize,
    /// The query scene.
    pub query: Scene,
    /// The four candidates in presentation (shuffled) order.
    pub candidates: [Scene; 4],
    /// What each candidate is, in the same order.
    pub kinds: [CandidateKind; 4],
}

impl BindingTrial {
    /// Position of the target among the candidates.
    pub fn target_index(&self) -> usize {
        self.kinds
            .iter()
            .position(|k| *k == CandidateKind::Target)
            .expect("every trial has a target")
    }
}

/// Trial `index` of the binding task for `seed`.
pub fn binding_trial(seed: u64, index: usize) -> BindingTrial {
    let mut rng = item_rng(seed, BINDING_STREAM, index as u64);
    let (s1, s2) = two_shapes(&mut rng);
    let c = color_permutation(&mut rng);
    let (c1q, c2q, c1t, c2t) = (c[0], c[1], c[2], c[3]);
    let o = Object::new;
    let query = Scene::new(o(s1, c1q), o(s2, c2q));
    let mut slots = [
        (Scene::new(o(s1, c1t), o(s2, c2t)), CandidateKind::Target),
        (Scene::new(o(s2, c1q), o(s1, c2q)), CandidateKind::D1),
        (Scene::new(o(s2, c1t), o(s1, c2t)), CandidateKind::D2),
        (Scene::new(o(s1, c1t), o(s1, c2t)), CandidateKind::D3),
    ];
    shuffle(&mut slots, &mut rng);
    BindingTrial {
        index,
        query,
        candidates: slots.map(|s| s.0),
        kinds: slots.map(|s| s.1),
    }
}

/// Trials `0..n` of the binding task.
pub fn binding_trials(seed: u64, n: usize) -> Vec<BindingTrial> {
    (0..n).map(|i| binding_trial(seed, i)).collect()
}

/// Kind of a Same/Different pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PairKind {
    /// Same shapes at the same positions, new colours.
    Same,
    /// The two shapes exchanged, new colours.
    ShapeSwap,
    /// One shape replaced by the third shape, new colours.
    ShapeChange,
}

impl PairKind {
    /// Whether the pair's ground truth is "same".
    pub fn is_same(self) -> bool {
        self == PairKind::Same
    }
}

/// One Same/Different pair.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SameDiffPair {
    /// Pair index.
    pub index: usize,
    /// First image.
    pub a: Scene,
    /// Second image.
    pub b: Scene,
    /// Ground truth.
    pub kind: PairKind,
}

/// Pair `index` of the same/different task for `seed`.
pub fn samediff_pair(seed: u64, index: usize) -> SameDiffPair {
    let kind = if index.is_multiple_of(2) {
        PairKind::Same
    } else if ((index - 1) / 2).is_multiple_of(2) {
        PairKind::ShapeSwap
    } else {
        PairKind::ShapeChange
    };
    let mut rng = item_rng(seed, SAMEDIFF_STREAM, index as u64);
    let (s1, s2) = two_shapes(&mut rng);
    let c = color_permutation(&mut rng);
    let o = Object::new;
    let a = Scene::new(o(s1, c[0]), o(s2, c[1]));
    let b = match kind {
        PairKind::Same => Scene::new(o(s1, c[2]), o(s2, c[3])),
        PairKind::ShapeSwap => Scene::new(o(s2, c[2]), o(s1, c[3])),
        PairKind::ShapeChange => {
            let s3 = Shape::from_index(3 - s1.index() - s2.index());
            if below(&mut rng, 2) == 0 {
                Scene::new(o(s3, c[2]), o(s2, c[3]))
            } else {
                Scene::new(o(s1, c[2]), o(s3, c[3]))
            }
        }
    };
    SameDiffPair { index, a, b, kind }
}

/// Pairs `0..n` of the same/different task.
pub fn samediff_pairs(seed: u64, n: usize) -> Vec<SameDiffPair> {
    (0..n).map(|i| samediff_pair(seed, i)).collect()
}

/// The distinct scenes a set of trials and pairs uses, sorted by id.
pub fn scenes_used(trials: &[BindingTrial], pairs: &[SameDiffPair]) -> Vec<Scene> {
    let mut ids: Vec<usize> = trials
        .iter()
        .flat_map(|t| std::iter::once(t.query).chain(t.candidates))
        .chain(pairs.iter().flat_map(|p| [p.a, p.b]))
        .map(Scene::id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter().map(Scene::from_id).collect()
}
