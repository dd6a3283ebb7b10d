//! The root package's integration tests, one binary (each module is one area): JER estimators
//! against torch.func, image preprocessing and tokenization against transformers and torchvision,
//! sentence-transformers pooling, and the opt-in real-checkpoint checks (`real_*`, run when
//! `BINDSCOPE_REAL_MODELS` is set).
//!
//! One binary per package rather than one per file: every test binary links burn, wgpu and the
//! models, so separate binaries multiply the link time and the disk a clean build needs.

#[path = "../models/tests/common/mod.rs"]
mod common;
mod jer_estimators;
mod preprocess;
mod real_dinov2;
mod real_minilm;
mod real_smollm2;
mod sentence_transformers;
mod tokenize;
