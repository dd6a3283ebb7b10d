//! Study 4's tests, one binary: the lmms-eval metrics and numpy bootstrap on committed cases, the
//! generative readout against transformers, its training and evaluation, and the mini-GEB
//! generator.
//!
//! One binary per package rather than one per file: every test binary links burn, wgpu and the
//! models, so separate binaries multiply the link time and the disk a clean build needs.

mod bootstrap_numpy;
mod common;
mod lmms_eval_cases;
mod readout_eval;
mod readout_learns;
mod readout_real_masks;
mod readout_reference;
mod readout_train;
mod synth;
