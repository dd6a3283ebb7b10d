//! Seeded random streams: every random decision of the study draws from a ChaCha8 stream keyed
//! by the run seed and the item it is about, so any single scene (or any probe's
//! initialisation) can be regenerated on its own, in any order, on any platform.

/// A ChaCha8 stream keyed by `seed` and a path of keys (e.g. `[task, split, index, purpose]`):
/// [`bindscope_core::rng::legacy::foveated`], the derivation of
/// [`bindscope_core::rng::stream`] under this study's own domain.
pub use bindscope_core::rng::legacy::foveated as stream;

/// Stream-key namespaces (first key of every path), so no two uses share a stream.
pub mod ns {
    /// CSB scenes.
    pub const CSB: u64 = 1;
    /// CSD scenes.
    pub const CSD: u64 = 2;
    /// Probe initialisation.
    pub const PROBE_INIT: u64 = 10;
    /// Mini-batch order.
    pub const PROBE_SHUFFLE: u64 = 11;
    /// Dropout masks.
    pub const PROBE_DROPOUT: u64 = 12;
    /// GQA split assignment.
    pub const GQA_SPLIT: u64 = 20;
}
