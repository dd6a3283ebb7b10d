//! The training tests, one binary: data, LoRA against PEFT, and decoder training steps.
//!
//! One binary per package rather than one per file: every test binary links burn, wgpu and the
//! models, so separate binaries multiply the link time and the disk a clean build needs.

mod data;
mod decoder_training;
mod lora;
