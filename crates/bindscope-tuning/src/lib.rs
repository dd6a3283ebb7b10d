//! # bindscope-tuning
//!
//! Textual attribute–object binding finetuning, after the seed study "Stuck on Shuffle"
//! (issue 6): triplet data, LoRA training of a text encoder's attention projections, LiNeS
//! post-training layer scaling, PEFT-compatible export, and attention binding margins.
//!
//! Data flows one way:
//! [`vocab`] (data files) → [`generate`] (template examples) / [`import`] (external JSONL) →
//! [`validate`] (one rule set for both) → [`split`] (80/10/10, deferred types held out) →
//! training → evaluation → export.
//!
//! [`study`] holds the runs of `experiments finetune` (`data`, `train`): serde configs, run
//! directories, reports.

pub mod attention;
pub mod eval;
pub mod example;
pub mod generate;
pub mod import;
pub mod lora;
pub mod split;
pub mod study;
pub mod train;
pub mod validate;
pub mod vocab;
pub mod words;

pub use example::{Construction, Example, Triplet};
