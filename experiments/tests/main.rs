//! The `experiments` command line, one binary (each module is one area): the studies' commands end
//! to end, the CPU/wgpu device comparison (`devices`), and the fidelity and hardening checks
//! (`fidelity`).
//!
//! One binary per package rather than one per file: every test binary links burn, wgpu and the
//! models, so separate binaries multiply the link time and the disk a clean build needs.

mod binding_cli;
mod cli;
mod common;
mod devices;
mod fidelity;
mod geb_readout;
mod geb_score;
mod generate;
