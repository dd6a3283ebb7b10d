//! The one home for randomness: every random choice of a study draws from a stream keyed by the
//! run's seed and a path naming what is drawn, so any single item can be regenerated on its own,
//! in any order, on any platform, and adding draws for one purpose never moves another's.
//!
//! New code uses [`stream`]. The derivations the studies used before this module existed are
//! kept, bit for bit, in [`legacy`]: every committed golden file and every number already
//! reported depends on them.
//!
//! Reproducibility rests on two facts: ChaCha's output is specified (`rand_chacha` follows the
//! reference implementation), and the key derivation below is integer arithmetic only.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// SplitMix64 step: a bijective 64-bit mixer (Steele, Lea & Flood, *Fast splittable
/// pseudorandom number generators*, OOPSLA 2014).
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// ChaCha8 keyed by `domain`, `seed` and the key path: a running SplitMix64 hash of the seed
/// (salted with `domain`) and each key with its position, expanded to the 256-bit key by four
/// more SplitMix64 steps.
fn keyed(domain: u64, seed: u64, keys: &[u64]) -> ChaCha8Rng {
    let mut h = splitmix64(seed ^ domain);
    for (i, &k) in keys.iter().enumerate() {
        h = splitmix64(h ^ splitmix64(k.wrapping_add(i as u64 + 1)));
    }
    let mut key = [0u8; 32];
    let mut s = h;
    for chunk in key.chunks_exact_mut(8) {
        s = splitmix64(s);
        chunk.copy_from_slice(&s.to_le_bytes());
    }
    ChaCha8Rng::from_seed(key)
}

/// `"bindscop"` in ASCII: the domain of [`stream`].
const BINDSCOPE: u64 = 0x6269_6E64_7363_6F70;

/// The stream of `seed` for the key path `keys` (e.g. `[study, split, item, purpose]`): a
/// ChaCha8 generator whose 256-bit key is derived from the seed and every key with its
/// position, so paths that differ anywhere (value, order or length) give unrelated streams.
///
/// Name the path's parts with constants in the study crate (one namespace constant first), and
/// give every purpose its own path: then a new kind of draw never shifts an old one.
pub fn stream(seed: u64, keys: &[u64]) -> ChaCha8Rng {
    keyed(BINDSCOPE, seed, keys)
}

/// The derivations the studies used before [`stream`], kept bit for bit (their golden files and
/// reported numbers depend on them). Do not use them in new code.
pub mod legacy {
    use rand::{Rng, SeedableRng};
    use rand_chacha::{ChaCha8Rng, ChaCha20Rng};

    /// `"foveated"` in ASCII.
    const FOVEATED: u64 = 0x666F_7665_6174_6564;

    /// The JER study's probe streams (`bindscope-jer`): ChaCha8 seeded with `seed` through
    /// `rand`'s `seed_from_u64`, stream number `image · 2²⁰ + purpose` (2²⁰ purposes per image:
    /// pixels, then one direction set per readout).
    pub fn jer(seed: u64, image: u64, purpose: u64) -> ChaCha8Rng {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        r.set_stream((image << 20) | purpose);
        r
    }

    /// The binding study's item streams (`bindscope-binding`): ChaCha8 seeded with `seed`
    /// through `seed_from_u64`, stream number `task · 2³² + index`.
    pub fn binding(seed: u64, task: u64, index: u64) -> ChaCha8Rng {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        r.set_stream((task << 32) | index);
        r
    }

    /// The foveated study's streams (`bindscope-foveated`): [`super::stream`]'s derivation
    /// with the domain `"foveated"` instead of `"bindscop"`.
    pub fn foveated(seed: u64, keys: &[u64]) -> ChaCha8Rng {
        super::keyed(FOVEATED, seed, keys)
    }

    /// The SABER generator's and the binding finetuning's streams (`bindscope-saber`,
    /// `bindscope-tuning`): ChaCha20 keyed by the seed's eight little-endian bytes (the other 24
    /// key bytes zero), stream number `stream`.
    pub fn saber(seed: u64, stream: u64) -> ChaCha20Rng {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        let mut r = ChaCha20Rng::from_seed(key);
        r.set_stream(stream);
        r
    }

    /// A standard normal by the Box–Muller transform of two uniforms, `u₁ ∈ (0, 1]` drawn
    /// first: the foveated probes' initialisation. New code samples `rand_distr::StandardNormal`.
    pub fn box_muller<R: Rng>(rng: &mut R) -> f64 {
        let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
        let u2: f64 = rng.random();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4).map(|_| stream(7, &[1, 2, 3]).random()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let x: u64 = stream(7, &[1, 2, 3]).random();
        for other in [
            stream(7, &[1, 2, 4]),
            stream(8, &[1, 2, 3]),
            stream(7, &[1, 2]),
            stream(7, &[2, 1, 3]),
            legacy::foveated(7, &[1, 2, 3]),
        ] {
            let mut other = other;
            assert_ne!(x, other.random::<u64>());
        }
    }

    /// First outputs of each legacy derivation, recorded from the study crates before they were
    /// moved here: a change to any of them would silently change published numbers.
    #[test]
    fn legacy_streams_are_unchanged() {
        let first = |mut r: ChaCha8Rng| r.random::<u64>();
        assert_eq!(first(legacy::jer(42, 3, 1)), LEGACY_JER);
        assert_eq!(first(legacy::binding(0, 1, 5)), LEGACY_BINDING);
        assert_eq!(first(legacy::foveated(0, &[1, 0, 2, 0])), LEGACY_FOVEATED);
        let mut saber = legacy::saber(42, 7);
        assert_eq!(saber.random::<u64>(), LEGACY_SABER);
        // The SABER generator's `Rng::below(2^63)` before the move: the first draw below 2^63.
        let below = std::iter::repeat_with(|| saber.random::<u64>()).find(|&x| x < 1 << 63);
        assert_eq!(below, Some(3275028933438852211));
    }

    const LEGACY_JER: u64 = 4805075906321038850;
    const LEGACY_BINDING: u64 = 1459037631373208169;
    const LEGACY_FOVEATED: u64 = 9938113764126276892;
    const LEGACY_SABER: u64 = 13048024944330311655;
}
