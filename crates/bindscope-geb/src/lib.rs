//! # bindscope-geb
//!
//! The Generative Embedding Benchmark (GEB, "How Much Information Survives in a Dense
//! Embedding?"): a decoder that never sees the image answers visual questions from one frozen
//! embedding, and its answers are scored with the metrics of eight source tasks exactly as
//! **lmms-eval 0.7.3** implements them.
//!
//! This crate holds the scoring half, which needs no model:
//! [`records`] (prediction files, checked line by line) → [`metrics`] (per-item scores in
//! [0, 1], lmms-eval's command-line path: reasoning blocks stripped, then the task's scorer) →
//! [`bootstrap`] (percentile intervals over items, numpy-exact given the indices) → [`score`]
//! (the `geb score` run: `items.jsonl`, `summary.json`, `summary.csv`). [`pystr`] holds the
//! Python string semantics the scorers depend on.
//!
//! Scores are averaged over items, not over tasks: the overall score is the mean of every
//! item's score, a category's the mean over its items.

pub mod bootstrap;
pub mod metrics;
pub mod pystr;
pub mod readout;
pub mod records;
pub mod score;
pub mod study;
pub mod synth;
