//! Study 2's tests, one binary: scenes, GQA pairs, patch-token extraction and the probes against
//! PyTorch.
//!
//! One binary per package rather than one per file: every test binary links burn, wgpu and the
//! models, so separate binaries multiply the link time and the disk a clean build needs.

mod extract;
mod gqa;
mod probe_parity;
mod probes;
mod real_extract;
mod scenes;
