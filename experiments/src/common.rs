//! Shared plumbing of the subcommands: the options every model-loading subcommand takes, the
//! binary's build facts and the [`RunContext`] every study runs in.

use anyhow::Result;
use bindscope_core::run::{BuildInfo, DeviceRecord, Output, RunContext};
use bindscope_core::{Checkpoint, LoadOptions};
use burn::tensor::Device;
use std::path::PathBuf;

pub use bindscope_core::run::progress;

pub use bindscope_core::options::{Dtype, Normalize};

/// Options every model-loading subcommand takes.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelOpts {
    /// Keep the checkpoint's float dtype (f16/bf16) instead of casting to f32.
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    /// Architecture of a PyTorch .pth/.pt checkpoint without config.json (resnet50, resnet18,
    /// …, or resnet for any depth); checked against its weights. Without it the architecture
    /// is read off the keys.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(bindscope_models::registry::PICKLE_ARCHES))]
    pub arch: Option<String>,
}

impl ModelOpts {
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            arch: self.arch.clone(),
            ..self.dtype.load_options()
        }
    }
}

/// `--out` and `--fresh` of the subcommands that write a run directory.
#[derive(clap::Args, Debug, Clone)]
pub struct OutputArgs {
    /// Run directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Start a new run directory even if a matching one exists.
    #[arg(long)]
    pub fresh: bool,
}

impl OutputArgs {
    /// The run's [`Output`].
    pub fn output(&self) -> Output {
        Output::new(self.out.clone(), self.fresh)
    }
}

/// Resolves `--model` to its checkpoint files.
pub fn resolve(spec: &str) -> Result<Checkpoint> {
    Ok(Checkpoint::resolve(spec)?)
}

/// What `built` wrote at build time: `DEPENDENCIES`, every package of the build's Cargo.lock.
mod built_info {
    include!(concat!(env!("OUT_DIR"), "/built.rs"));
}

/// This binary's build facts ([`experiments/build.rs`]): version, the commit and dirty state of
/// the tree it was built from, and the crate versions of its Cargo.lock.
pub fn build_info() -> BuildInfo {
    // vergen writes a placeholder when git failed at build time (no checkout, no git).
    let known = |v: Option<&'static str>| v.filter(|s| !s.is_empty() && !s.starts_with("VERGEN"));
    BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        git_commit: known(option_env!("VERGEN_GIT_SHA")).unwrap_or("unknown"),
        git_dirty: known(option_env!("VERGEN_GIT_DIRTY")).map(|d| d == "true"),
        dependencies: &built_info::DEPENDENCIES,
    }
}

/// The context a study runs in: `device`, opened from `--device` `spec`, in this binary.
pub fn context(device: &Device, spec: &str) -> RunContext {
    RunContext::new(device.clone(), spec, build_info())
}

/// The device record of `info` and `embed` outputs ([`DeviceRecord`]).
pub fn device_json(spec: &str, device: &Device) -> serde_json::Value {
    serde_json::to_value(DeviceRecord::new(spec, device)).unwrap_or_default()
}
