//! # bindscope-core
//!
//! What every study needs before it touches a model:
//! - [`device`]: parse `--device cpu|cuda[:N]|wgpu[:N]` (or `BURN_DEVICE`) into a burn [`Device`](burn::tensor::Device);
//! - [`checkpoint`]: resolve a Hugging Face id or a local directory in HF layout to its files;
//! - [`load`]: strict safetensors loading through burn-store, with every missing key, unexpected
//!   key and shape mismatch reported by name in one error;
//! - [`fsutil`]: atomic writes (temp file + rename) so no run leaves a partial output.

pub mod checkpoint;
pub mod device;
pub mod fsutil;
pub mod load;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use device::{DeviceError, parse_device};
pub use load::{LoadError, LoadOptions, load_strict};
