//! # bindscope
//!
//! A pure-Rust research framework on burn for measuring what vision and vision–language
//! embeddings keep. This crate re-exports the workspace crates; the studies run through the
//! `experiments` binary. See `ARCHITECTURE.md` for the layout.

pub use bindscope_core as core;
pub use bindscope_data as data;
pub use bindscope_jer as jer;
pub use bindscope_models as models;
