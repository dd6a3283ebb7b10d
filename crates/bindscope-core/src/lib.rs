//! # bindscope-core
//!
//! What every study needs before it touches a model:
//! - [`device`]: parse and acquire `--device cpu|cuda[:N]|wgpu[:…]` (or `BURN_DEVICE`) as a burn
//!   [`Device`](burn::tensor::Device), list the devices a build can use, and give the test suite its device;
//! - [`checkpoint`]: resolve a local directory in HF layout or a Hugging Face id
//!   (`org/name[@revision]`, through the cache Python's `huggingface_hub` shares and the Hub's
//!   HTTP API, [`HubConfig`](checkpoint::HubConfig)) to its files;
//! - [`load`]: strict safetensors loading through burn-store, with every missing key, unexpected
//!   key and shape mismatch reported by name in one error;
//! - [`fsutil`]: atomic writes (temp file + rename) so no run leaves a partial output;
//! - [`run`]: run records — run directories chosen by identity, resume logs, provenance (one
//!   schema), atomic JSON and CSV outputs, the [`RunContext`](run::RunContext) a study runs in,
//!   progress (a bar on a terminal, plain lines without one);
//! - [`sentence`]: a checkpoint's sentence-transformers description (`modules.json`: pooling,
//!   normalization, maximum length, lowercasing);
//! - [`options`]: the options several studies share (`Dtype`, `Normalize`);
//! - [`plot`]: the SVG canvas and palette of every study's plots;
//! - [`train`]: optimizers with PyTorch's defaults, best-validation selection, seeded batch
//!   order, fingerprinted checkpoints and resume;
//! - [`rng`]: the seeded random streams every study draws from (and the studies' legacy
//!   derivations, kept bit for bit).

pub mod alloc;
pub mod anyres;
pub mod bootstrap;
pub mod checkpoint;
pub mod device;
pub mod fsutil;
pub mod load;
pub mod options;
pub mod plot;
pub mod pth;
pub mod rng;
pub mod run;
pub mod sentence;
pub mod train;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use device::{DeviceError, DeviceSpec, open_device, parse_device};
pub use load::{LoadError, LoadOptions, load_strict};
