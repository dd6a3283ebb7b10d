//! Study 3's tests, one binary: the benchmark generator, JSONL files, metrics and the evaluation
//! end to end.
//!
//! One binary per package rather than one per file: every test binary links burn, wgpu and the
//! models, so separate binaries multiply the link time and the disk a clean build needs.

mod eval_e2e;
mod generator;
mod jsonl;
mod metrics;
