//! GEB's bootstrap intervals: [`bindscope_core::bootstrap`] (numpy-exact percentile intervals
//! over seeded resample indices) in GEB's stream namespace, with its default seed.

pub use bindscope_core::bootstrap::{
    Interval, Kind, MARGINAL_RESAMPLES, PAIRED_RESAMPLES, PERCENTILES, Resampler, numpy_mean,
    numpy_percentile, numpy_sum,
};

/// The default seed of the intervals (`--seed`).
pub const DEFAULT_SEED: u64 = 20260722;

/// `"geb"`: the study's namespace in [`bindscope_core::rng::stream`] key paths.
pub const NAMESPACE: u64 = 0x0067_6562;

/// The resampler of GEB's group `group` for an interval of `kind` over `n ≥ 1` items
/// ([`Resampler::new`] in GEB's namespace).
///
/// # Panics
/// When `n` is 0 or exceeds `u32::MAX`.
pub fn resampler(seed: u64, kind: Kind, group: u64, n: usize, resamples: usize) -> Resampler {
    Resampler::new(NAMESPACE, seed, kind, group, n, resamples)
}
