//! The data split: 80 / 10 / 10 train / val / test over the trainable construction types, with
//! both deferred_bind types held out entirely (never trained on; each is its own evaluation set).
//!
//! Per construction type, the examples are sorted by id, shuffled with the seed (ChaCha20 stream
//! 100 + type index) and cut at `floor(0.8·n)` and `floor(0.9·n)`: stratified by type,
//! deterministic, and independent of the order the rows were read in.

use crate::example::{Construction, Example, Triplet};
use bindscope_saber::generate::Rng;

/// The splits.
#[derive(Debug, Clone, Default)]
pub struct Splits {
    /// 80 % of each trainable type.
    pub train: Vec<Example>,
    /// 10 %.
    pub val: Vec<Example>,
    /// 10 %.
    pub test: Vec<Example>,
    /// Every `deferred_bind_anaphoric` example.
    pub heldout_anaphoric: Vec<Example>,
    /// Every `deferred_bind_respective` example.
    pub heldout_respective: Vec<Example>,
}

impl Splits {
    /// `(name, examples)` for every split, in a fixed order.
    pub fn named(&self) -> [(&'static str, &[Example]); 5] {
        [
            ("train", &self.train),
            ("val", &self.val),
            ("test", &self.test),
            ("heldout_anaphoric", &self.heldout_anaphoric),
            ("heldout_respective", &self.heldout_respective),
        ]
    }
}

/// Splits examples (see the module docs).
pub fn split(examples: &[Example], seed: u64) -> Splits {
    let mut s = Splits::default();
    for (ti, c) in Construction::ALL.into_iter().enumerate() {
        let mut of_type: Vec<&Example> = examples.iter().filter(|e| e.construction == c).collect();
        of_type.sort_by(|a, b| a.id.cmp(&b.id));
        match c {
            Construction::DeferredBindAnaphoric => {
                s.heldout_anaphoric.extend(of_type.into_iter().cloned())
            }
            Construction::DeferredBindRespective => {
                s.heldout_respective.extend(of_type.into_iter().cloned())
            }
            _ => {
                Rng::new(seed, 100 + ti as u64).shuffle(&mut of_type);
                let n = of_type.len();
                let (a, b) = (n * 8 / 10, n * 9 / 10);
                for (i, e) in of_type.into_iter().enumerate() {
                    let dst = if i < a {
                        &mut s.train
                    } else if i < b {
                        &mut s.val
                    } else {
                        &mut s.test
                    };
                    dst.push(e.clone());
                }
            }
        }
    }
    s
}

/// Both triplets of every example, in example order.
pub fn triplets(examples: &[Example]) -> Vec<Triplet> {
    examples.iter().flat_map(|e| e.triplets()).collect()
}
