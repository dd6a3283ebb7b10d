//! Shared plumbing of the subcommands: loading models, the binary's build facts, and the run
//! records of `bindscope_core::run` (run directories, resume logs, provenance, atomic JSON).

use anyhow::Result;
use bindscope_core::run::{BuildInfo, DeviceRecord, Provenance};
use bindscope_core::{Checkpoint, LoadOptions};
use burn::tensor::Device;
use std::path::Path;

pub use bindscope_core::run::{read_json, read_jsonl, run_dir, runs_root, timestamp, write_json};

/// `--dtype`: the float type the weights are computed in.
#[derive(clap::ValueEnum, serde::Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// Cast every float weight to f32 (the default; what the parity tests check).
    F32,
    /// Keep the checkpoint's float dtype (f16 / bf16).
    Keep,
}

/// `--normalize`: the mean / std a synthetic probe or scene is normalized with.
#[derive(clap::ValueEnum, serde::Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Normalize {
    /// ImageNet mean / std (the papers' setting, every model).
    Imagenet,
    /// The checkpoint's own `preprocessor_config.json`.
    Model,
}

/// Options every model-loading subcommand takes.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelOpts {
    /// Keep the checkpoint's float dtype (f16/bf16) instead of casting to f32.
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
}

impl ModelOpts {
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            keep_dtype: self.dtype == Dtype::Keep,
            ..Default::default()
        }
    }
}

/// Resolves `--model` to its checkpoint files.
pub fn resolve(spec: &str) -> Result<Checkpoint> {
    Ok(Checkpoint::resolve(spec)?)
}

/// A file-system-safe name for a model spec (`openai/clip-vit-base-patch32` →
/// `openai--clip-vit-base-patch32`; a directory → its last component).
pub fn slug(spec: &str) -> String {
    let p = Path::new(spec);
    let base = if p.is_dir() {
        p.canonicalize()
            .ok()
            .and_then(|c| c.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| spec.to_string())
    } else {
        spec.replace('/', "--")
    };
    base.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
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

/// `fields` (a JSON object: study, identity, options) with the run's provenance added — the
/// one schema of every `config.json` ([`Provenance`]). `device` is the device as requested
/// (`--device`) and as opened; `None` for commands that compute nothing on a device.
pub fn config_json(
    mut fields: serde_json::Value,
    device: Option<(&str, &Device)>,
) -> serde_json::Value {
    let device = device.map(|(spec, d)| DeviceRecord::new(spec, d));
    Provenance::new(&build_info(), device).insert_into(&mut fields);
    fields
}

/// The device record of `info` and `embed` outputs ([`DeviceRecord`]).
pub fn device_json(spec: &str, device: &Device) -> serde_json::Value {
    serde_json::to_value(DeviceRecord::new(spec, device)).unwrap_or_default()
}

/// A progress bar with items/s, drawn on stderr.
pub fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {what} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} ({{per_sec}}, eta {{eta}})"
        ))
        .expect("valid template"),
    );
    pb
}
