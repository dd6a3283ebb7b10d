//! Shared plumbing of the subcommands: loading models, run directories, provenance.

use anyhow::{Context, Result, bail};
use bindscope_core::{Checkpoint, LoadOptions};
use burn::tensor::Device;
use std::path::{Path, PathBuf};

/// Options every model-loading subcommand takes.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelOpts {
    /// Keep the checkpoint's float dtype (f16/bf16) instead of casting to f32.
    #[arg(long, value_parser = ["f32", "keep"], default_value = "f32")]
    pub dtype: String,
}

impl ModelOpts {
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            keep_dtype: self.dtype == "keep",
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

/// Versions of bindscope and the crates that decide its numbers, read from the Cargo.lock the
/// binary was built with.
pub fn crate_versions() -> serde_json::Value {
    const LOCK: &str = include_str!("../../Cargo.lock");
    let mut out = serde_json::Map::new();
    out.insert("bindscope".into(), env!("CARGO_PKG_VERSION").into());
    let mut name: Option<&str> = None;
    for line in LOCK.lines() {
        if let Some(n) = line.strip_prefix("name = \"") {
            name = n.strip_suffix('"');
        } else if let (Some(n), Some(v)) = (name, line.strip_prefix("version = \"")) {
            if [
                "burn",
                "burn-flex",
                "burn-store",
                "faer",
                "image",
                "tokenizers",
            ]
            .contains(&n)
            {
                out.insert(n.into(), v.trim_end_matches('"').into());
            }
            name = None;
        }
    }
    serde_json::Value::Object(out)
}

/// `git rev-parse HEAD` of the working directory, or "unknown".
pub fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The device as it was requested, its canonical spec, the adapter or GPU it is, and burn's own
/// description.
pub fn device_json(spec: &str, device: &Device) -> serde_json::Value {
    serde_json::json!({
        "requested": spec,
        "spec": canonical_device(spec),
        "name": bindscope_core::device::device_name(device),
        "burn": format!("{device:?}"),
    })
}

/// The canonical form of a device spec (`" Wgpu:CPU "` → `wgpu:cpu`, `""` → `cpu`); the spec
/// as given if it does not parse (`main` has refused those already).
pub fn canonical_device(spec: &str) -> String {
    spec.parse::<bindscope_core::DeviceSpec>()
        .map_or_else(|_| spec.to_string(), |s| s.to_string())
}

/// UTC timestamp for run directory names, `YYYYmmdd-HHMMSS`.
pub fn timestamp() -> String {
    chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string()
}

/// Writes pretty JSON atomically.
pub fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    bindscope_core::fsutil::write_atomic(path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Reads JSON.
pub fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: invalid JSON", path.display()))
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

/// `runs/<study>/` under the current directory.
pub fn runs_root(study: &str) -> PathBuf {
    PathBuf::from("runs").join(study)
}

/// Reads a JSON-lines resume log of `what` records. A final line cut off by an interruption (no
/// trailing newline) is dropped and the file truncated to its last complete line; any other bad
/// line is an error naming the file and line. A missing file is an empty log.
pub fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<Vec<T>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    if complete.len() != text.len() {
        bindscope_core::fsutil::write_atomic(path, complete.as_bytes())?;
    }
    complete
        .lines()
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not a {what} record", path.display(), n + 1))
        })
        .collect()
}

/// `--out` if given (empty, or holding a run with this identity), else the newest
/// `runs/<study>/<name>-*` with this identity, else a new timestamped directory.
pub fn run_dir(
    study: &str,
    name: &str,
    out: Option<PathBuf>,
    identity: &serde_json::Value,
    fresh: bool,
) -> Result<PathBuf> {
    let matches = |dir: &Path| -> Result<Option<bool>> {
        let cfg = dir.join("config.json");
        if !cfg.exists() {
            return Ok(None);
        }
        Ok(Some(read_json(&cfg)?.get("identity") == Some(identity)))
    };
    if let Some(dir) = out {
        match matches(&dir)? {
            Some(true) => return Ok(dir),
            Some(false) => {
                let there = read_json(&dir.join("config.json"))?;
                let diff = describe_difference(
                    there.get("identity").unwrap_or(&serde_json::Value::Null),
                    identity,
                );
                bail!(
                    "{} holds a run with another configuration ({diff}); nothing was overwritten: choose another --out or remove it",
                    dir.display()
                )
            }
            None => {
                if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
                    bail!(
                        "{} exists, is not empty and holds no run config.json; nothing was overwritten",
                        dir.display()
                    );
                }
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                return Ok(dir);
            }
        }
    }
    let root = runs_root(study);
    let prefix = format!("{name}-");
    if !fresh && root.is_dir() {
        let mut cands: Vec<PathBuf> = std::fs::read_dir(&root)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_dir()
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
            })
            .collect();
        cands.sort();
        for c in cands.into_iter().rev() {
            if matches(&c)? == Some(true) {
                eprintln!("resuming {}", c.display());
                return Ok(c);
            }
        }
    }
    let dir = root.join(format!("{prefix}{}", timestamp()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The fields in which two run identities differ, as `key: <there> there vs <now> now; …`.
fn describe_difference(old: &serde_json::Value, new: &serde_json::Value) -> String {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return "unreadable identity".into();
    };
    let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    let null = serde_json::Value::Null;
    let diffs: Vec<String> = keys
        .into_iter()
        .filter(|k| o.get(*k) != n.get(*k))
        .map(|k| {
            format!(
                "{k}: {} there vs {} now",
                o.get(k).unwrap_or(&null),
                n.get(k).unwrap_or(&null)
            )
        })
        .collect();
    diffs.join("; ")
}
