//! Run records: the one place that writes what a study run leaves behind.
//!
//! - [`run_dir`]: choose the run directory by identity — resume the run that has this
//!   configuration, refuse to overwrite one that has another, or start a new timestamped one;
//! - [`Provenance`]: the facts a `config.json` records beside the identity (build, crate
//!   versions, device, time), one schema written by one function;
//! - [`read_jsonl`] / [`append_jsonl`]: append-only JSON-lines resume logs that survive an
//!   interruption mid-line;
//! - [`write_json`], [`read_json`], [`write_csv`], [`write_csv_table`]: atomic outputs
//!   ([`crate::fsutil`]), CSV through the `csv` crate (quoting included) from serde rows, numbers
//!   in Rust's `{}` form through [`Plain`];
//! - [`RunContext`] (the device and build facts a study runs with) and [`Output`] (`--out`,
//!   `--fresh`).
//!
//! The identity of a run is the serialization of the typed value the study computes from: its
//! `Config` resolved for one model or scene bank (checkpoint sha256, normalization, sizes), as
//! each study's `study` module defines it. Two runs with equal identities compute the same
//! numbers, so a second invocation resumes the first.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::fsutil;

/// Why a run record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A file or directory could not be read, written or created.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A JSON file or a line of a JSON-lines log does not parse.
    #[error("{location}: {what}: {source}")]
    Json {
        /// `path` or `path:line`.
        location: String,
        /// What was expected there.
        what: String,
        /// The parser's message.
        source: serde_json::Error,
    },
    /// A CSV file could not be written.
    #[error("{path}: {source}")]
    Csv {
        /// The file.
        path: String,
        /// The writer's message.
        source: csv::Error,
    },
    /// `--out` names a run directory whose identity differs.
    #[error(
        "{dir} holds a run with another configuration ({difference}); nothing was overwritten: choose another --out or remove it"
    )]
    OtherRun {
        /// The directory.
        dir: String,
        /// The fields that differ, there vs now.
        difference: String,
    },
    /// `--fresh` with an `--out` that already holds a run: a fresh run needs a new directory.
    #[error(
        "--fresh: {dir} already holds a run of this configuration; nothing was overwritten: choose another --out for the fresh run, remove {dir}, or leave out --fresh to resume it"
    )]
    FreshIntoRun {
        /// The directory.
        dir: String,
    },
    /// `--out` names a non-empty directory that is not a run directory.
    #[error("{dir} exists, is not empty and holds no run config.json; nothing was overwritten")]
    NotARun {
        /// The directory.
        dir: String,
    },
    /// Another process is running in the run directory ([`lock_run_dir`]).
    #[error(
        "{dir} is in use by another process (it holds the lock {lock}); wait for that run to finish, or choose another --out"
    )]
    InUse {
        /// The directory.
        dir: String,
        /// The lock file.
        lock: String,
    },
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> RunError {
    move |source| RunError::Io { context, source }
}

/// UTC timestamp for run directory names and `created` fields, `YYYYmmdd-HHMMSS`.
pub fn timestamp() -> String {
    chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string()
}

/// `runs/<study>/` under the current directory: where runs go without `--out`.
pub fn runs_root(study: &str) -> PathBuf {
    PathBuf::from("runs").join(study)
}

/// Writes pretty JSON (with a final newline) atomically.
///
/// # Errors
/// [`RunError::Io`] naming the file.
pub fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), RunError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| RunError::Json {
        location: path.display().to_string(),
        what: "cannot serialize".into(),
        source,
    })? + "\n";
    fsutil::write_atomic(path, text.as_bytes()).map_err(io(format!("writing {}", path.display())))
}

/// Reads a JSON file.
///
/// # Errors
/// [`RunError::Io`] for an unreadable file, [`RunError::Json`] for invalid JSON.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, RunError> {
    let text = std::fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))?;
    serde_json::from_str(&text).map_err(|source| RunError::Json {
        location: path.display().to_string(),
        what: "invalid JSON".into(),
        source,
    })
}

/// A field written as its `Display` form: for `f64` (the default) Rust's `{}` (`1`, `0.25`,
/// `-2`, `NaN`), the text every bindscope CSV holds. Serde's own float form, which the `csv`
/// crate uses, would write `1.0`; wrap the number fields of a [`write_csv`] row in this to keep
/// the files' form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plain<T = f64>(pub T);

impl<T: std::fmt::Display> Serialize for Plain<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// Writes `rows` as CSV atomically: a header from the first row's field names, then one
/// record per row, quoted where a field needs it (RFC 4180, the `csv` crate).
///
/// # Errors
/// [`RunError::Csv`] / [`RunError::Io`] naming the file.
pub fn write_csv<T: Serialize>(path: &Path, rows: &[T]) -> Result<(), RunError> {
    let mut buf = Vec::new();
    {
        let mut w = csv::Writer::from_writer(&mut buf);
        for r in rows {
            w.serialize(r).map_err(|source| RunError::Csv {
                path: path.display().to_string(),
                source,
            })?;
        }
        w.flush()
            .map_err(io(format!("writing {}", path.display())))?;
    }
    fsutil::write_atomic(path, &buf).map_err(io(format!("writing {}", path.display())))
}

/// Writes a CSV table whose columns are known only at run time atomically: `header`, then one
/// record per row (each as long as the header), quoted where a field needs it.
///
/// # Errors
/// [`RunError::Csv`] (e.g. a row of another length than the header) / [`RunError::Io`] naming
/// the file.
pub fn write_csv_table<H: AsRef<[u8]>, F: AsRef<[u8]>>(
    path: &Path,
    header: &[H],
    rows: &[Vec<F>],
) -> Result<(), RunError> {
    let mut buf = Vec::new();
    {
        let mut w = csv::Writer::from_writer(&mut buf);
        let csv_err = |source| RunError::Csv {
            path: path.display().to_string(),
            source,
        };
        w.write_record(header).map_err(csv_err)?;
        for r in rows {
            w.write_record(r).map_err(csv_err)?;
        }
        w.flush()
            .map_err(io(format!("writing {}", path.display())))?;
    }
    fsutil::write_atomic(path, &buf).map_err(io(format!("writing {}", path.display())))
}

/// Reads a JSON-lines resume log of `what` records. A final line cut off by an interruption (no
/// trailing newline) is dropped and the file truncated to its last complete line; any other bad
/// line is an error naming the file and line. A missing file is an empty log.
///
/// # Errors
/// [`RunError::Io`] for an unreadable file, [`RunError::Json`] naming `path:line`.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path, what: &str) -> Result<Vec<T>, RunError> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))?;
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    if complete.len() != text.len() {
        fsutil::write_atomic(path, complete.as_bytes())
            .map_err(io(format!("truncating {}", path.display())))?;
    }
    complete
        .lines()
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l).map_err(|source| RunError::Json {
                location: format!("{}:{}", path.display(), n + 1),
                what: format!("not a {what} record"),
                source,
            })
        })
        .collect()
}

/// Appends one record to a JSON-lines resume log (one line, written and fsynced at once:
/// [`fsutil::append_line`]).
///
/// # Errors
/// [`RunError::Io`] naming the file.
pub fn append_jsonl<T: Serialize>(path: &Path, record: &T) -> Result<(), RunError> {
    let line = serde_json::to_string(record).map_err(|source| RunError::Json {
        location: path.display().to_string(),
        what: "cannot serialize".into(),
        source,
    })?;
    fsutil::append_line(path, &line).map_err(io(format!("appending to {}", path.display())))
}

/// Where a run writes, as the user chose it (`--out`, `--fresh`): not part of the run's
/// identity, since it changes no number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// The run directory; `None`: the newest matching run under [`runs_root`], or a new one.
    pub dir: Option<PathBuf>,
    /// Start a new run directory even if a matching one exists.
    pub fresh: bool,
}

impl Output {
    /// The output `--out dir` (`None`: the default place) with `--fresh`.
    pub fn new(dir: Option<PathBuf>, fresh: bool) -> Self {
        Self { dir, fresh }
    }

    /// [`run_dir`] for a run of `study` named `name` with `identity`, in this output.
    ///
    /// # Errors
    /// As [`run_dir`].
    pub fn run_dir(
        &self,
        study: &str,
        name: &str,
        identity: &serde_json::Value,
    ) -> Result<PathBuf, RunError> {
        run_dir(study, name, self.dir.clone(), identity, self.fresh)
    }
}

/// The run directory for a run with `identity`: `out` if given (empty, or holding a run with
/// this identity, which `fresh` refuses), else the newest `runs/<study>/<name>-*` with this
/// identity (unless `fresh`), else a new `runs/<study>/<name>-<timestamp>` (with `-2`, `-3`, … when a run started in the
/// same second took that name). The identity is compared with the
/// `"identity"` field of each candidate's `config.json`.
///
/// # Errors
/// [`RunError::OtherRun`] naming the differing fields, [`RunError::NotARun`],
/// [`RunError::FreshIntoRun`], or an I/O error.
pub fn run_dir(
    study: &str,
    name: &str,
    out: Option<PathBuf>,
    identity: &serde_json::Value,
    fresh: bool,
) -> Result<PathBuf, RunError> {
    let recorded = |dir: &Path| -> Result<Option<serde_json::Value>, RunError> {
        let cfg = dir.join("config.json");
        if !cfg.exists() {
            return Ok(None);
        }
        let v: serde_json::Value = read_json(&cfg)?;
        Ok(Some(
            v.get("identity")
                .cloned()
                .unwrap_or(serde_json::Value::Null),
        ))
    };
    if let Some(dir) = out {
        match recorded(&dir)? {
            Some(there) if &there == identity && fresh => {
                return Err(RunError::FreshIntoRun {
                    dir: dir.display().to_string(),
                });
            }
            Some(there) if &there == identity => return Ok(dir),
            Some(there) => {
                return Err(RunError::OtherRun {
                    dir: dir.display().to_string(),
                    difference: describe_difference(&there, identity),
                });
            }
            None => {
                let listing = dir.exists().then(|| std::fs::read_dir(&dir));
                if let Some(entries) = listing {
                    let mut entries = entries.map_err(io(format!("reading {}", dir.display())))?;
                    if entries.next().is_some() {
                        return Err(RunError::NotARun {
                            dir: dir.display().to_string(),
                        });
                    }
                }
                std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
                return Ok(dir);
            }
        }
    }
    let root = runs_root(study);
    let prefix = format!("{name}-");
    if !fresh && root.is_dir() {
        let mut cands: Vec<PathBuf> = std::fs::read_dir(&root)
            .map_err(io(format!("reading {}", root.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_dir()
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
            })
            .collect();
        cands.sort();
        for c in cands.into_iter().rev() {
            if recorded(&c)?.as_ref() == Some(identity) {
                eprintln!("resuming {}", c.display());
                return Ok(c);
            }
        }
    }
    new_dir(&root, &format!("{prefix}{}", timestamp()))
}

/// A new, empty run directory `runs/<study>/<name>` (`name` usually ends in a [`timestamp`]),
/// never one another run already took: `-2`, `-3`, … are appended when the name is taken.
///
/// # Errors
/// [`RunError::Io`] when the directory cannot be created.
pub fn new_run_dir(study: &str, name: &str) -> Result<PathBuf, RunError> {
    new_dir(&runs_root(study), name)
}

/// Creates a directory `root/<base>` that did not exist before (`root/<base>-2`, `-3`, … when
/// the name is taken: two runs started in the same second must not share a directory).
fn new_dir(root: &Path, base: &str) -> Result<PathBuf, RunError> {
    std::fs::create_dir_all(root).map_err(io(format!("creating {}", root.display())))?;
    for n in 1u32.. {
        let dir = if n == 1 {
            root.join(base)
        } else {
            root.join(format!("{base}-{n}"))
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(format!("creating {}", dir.display()))(e)),
        }
    }
    unreachable!("a free directory name exists below u32::MAX")
}

/// The fields in which two run identities differ, as `key: <there> there vs <now> now; …`.
/// Nested objects are compared field by field, named by their dotted path
/// (`run.recipe.lr: 0.0001 there vs 0.001 now`), so only what changed is printed.
pub fn describe_difference(old: &serde_json::Value, new: &serde_json::Value) -> String {
    if !(old.is_object() && new.is_object()) {
        return "unreadable identity".into();
    }
    let mut diffs = Vec::new();
    collect_differences("", old, new, &mut diffs);
    diffs.join("; ")
}

fn collect_differences(
    path: &str,
    old: &serde_json::Value,
    new: &serde_json::Value,
    out: &mut Vec<String>,
) {
    match (old.as_object(), new.as_object()) {
        (Some(o), Some(n)) => {
            let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
            keys.sort();
            keys.dedup();
            let null = serde_json::Value::Null;
            for k in keys {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                collect_differences(
                    &child,
                    o.get(k).unwrap_or(&null),
                    n.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        _ if old != new => out.push(format!("{path}: {old} there vs {new} now")),
        _ => {}
    }
}

/// Facts about the program that were fixed when it was built: its version, the commit of the
/// source tree it was built from, and the versions of the crates that decide its numbers. The
/// binary fills this in from its build script (it is the leaf that knows them).
#[derive(Debug, Clone, Copy)]
pub struct BuildInfo {
    /// The package version (`CARGO_PKG_VERSION`).
    pub version: &'static str,
    /// The commit the binary was built from (`git rev-parse HEAD` at build time), or
    /// `"unknown"` when the source was not a git checkout.
    pub git_commit: &'static str,
    /// Whether the working tree had uncommitted changes at build time (`None` when unknown).
    pub git_dirty: Option<bool>,
    /// `(crate, version)` of every package in the build's `Cargo.lock`; [`Provenance`] records
    /// those named in [`RECORDED_CRATES`] (several versions of one crate joined by ", ").
    pub dependencies: &'static [(&'static str, &'static str)],
}

/// The crates whose versions decide a study's numbers: recorded in every `config.json`.
pub const RECORDED_CRATES: &[&str] = &[
    "burn",
    "burn-flex",
    "burn-store",
    "faer",
    "image",
    "tokenizers",
];

/// The device of a run as recorded: as requested, its canonical spec, the adapter or GPU, and
/// burn's own description.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceRecord {
    /// The spec as the user wrote it (`--device` or `BURN_DEVICE`).
    pub requested: String,
    /// The canonical spec ([`crate::DeviceSpec`]'s display form).
    pub spec: String,
    /// The adapter or GPU name.
    pub name: String,
    /// burn's `Debug` form of the device.
    pub burn: String,
}

impl DeviceRecord {
    /// The record of `device`, opened from `spec`.
    pub fn new(spec: &str, device: &burn::tensor::Device) -> Self {
        Self {
            requested: spec.to_string(),
            spec: spec
                .parse::<crate::DeviceSpec>()
                .map_or_else(|_| spec.to_string(), |s| s.to_string()),
            name: crate::device::device_name(device),
            burn: format!("{device:?}"),
        }
    }
}

/// What every `config.json` records beside the run's identity: one schema for every study.
///
/// Serialized as top-level fields of `config.json`: `bindscope_version`, `git_commit`,
/// `git_dirty`, `crate_versions` (an object `crate → version`), `device`
/// ([`DeviceRecord`], absent for runs that use no device) and `created`.
#[derive(Debug, Clone, Serialize)]
pub struct Provenance {
    /// The program's version.
    pub bindscope_version: String,
    /// The commit the program was built from.
    pub git_commit: String,
    /// Whether that tree had uncommitted changes.
    pub git_dirty: Option<bool>,
    /// Versions of the crates that decide the numbers, bindscope's own first.
    pub crate_versions: serde_json::Map<String, serde_json::Value>,
    /// The device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceRecord>,
    /// When the run directory was created (UTC, [`timestamp`]).
    pub created: String,
}

impl Provenance {
    /// The provenance of a run of the program described by `build` on `device` (`None` for a
    /// run that computes nothing on a device).
    pub fn new(build: &BuildInfo, device: Option<DeviceRecord>) -> Self {
        let mut crate_versions = serde_json::Map::new();
        crate_versions.insert("bindscope".into(), build.version.into());
        for name in RECORDED_CRATES {
            // Cargo.lock may hold several versions of one crate: record them all.
            let versions: Vec<&str> = build
                .dependencies
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| *v)
                .collect();
            if !versions.is_empty() {
                crate_versions.insert((*name).into(), versions.join(", ").into());
            }
        }
        Self {
            bindscope_version: build.version.to_string(),
            git_commit: build.git_commit.to_string(),
            git_dirty: build.git_dirty,
            crate_versions,
            device,
            created: timestamp(),
        }
    }

    /// Adds these fields to a `config.json` object (`config` must be a JSON object).
    pub fn insert_into(&self, config: &mut serde_json::Value) {
        if let (Some(obj), Ok(serde_json::Value::Object(fields))) =
            (config.as_object_mut(), serde_json::to_value(self))
        {
            obj.extend(fields);
        }
    }
}

/// Where and how a study runs: the device (as requested and as opened) and the build facts
/// of the program, which every `config.json` records ([`Provenance`]).
///
/// The binary builds one from `--device` and its build script; a study's `run` takes it
/// beside the study's `Config`.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The opened device.
    pub device: burn::tensor::Device,
    /// The device as the user wrote it (`--device` or `BURN_DEVICE`).
    pub device_spec: String,
    /// The program's build facts.
    pub build: BuildInfo,
    /// Further opened devices of a data-parallel run (`--device cuda:0,cuda:1`: `cuda:1`);
    /// empty for one device. Only commands that train data-parallel accept them.
    pub replicas: Vec<burn::tensor::Device>,
}

impl RunContext {
    /// A context for `device`, opened from `device_spec`, in the program `build` describes.
    pub fn new(device: burn::tensor::Device, device_spec: &str, build: BuildInfo) -> Self {
        Self {
            device,
            device_spec: device_spec.to_string(),
            build,
            replicas: Vec::new(),
        }
    }

    /// The context with `replicas` as the further devices of a data-parallel run.
    pub fn with_replicas(mut self, replicas: Vec<burn::tensor::Device>) -> Self {
        self.replicas = replicas;
        self
    }

    /// The device record of this run.
    pub fn device_record(&self) -> DeviceRecord {
        DeviceRecord::new(&self.device_spec, &self.device)
    }

    /// `fields` (a JSON object: study, identity, options) with the run's provenance added: the
    /// one schema of every `config.json`.
    pub fn config_json(&self, fields: serde_json::Value) -> serde_json::Value {
        self.with_provenance(fields, true)
    }

    /// [`Self::config_json`] for a run that computes nothing on a device (no `device`
    /// record).
    pub fn config_json_no_device(&self, fields: serde_json::Value) -> serde_json::Value {
        self.with_provenance(fields, false)
    }

    fn with_provenance(&self, mut fields: serde_json::Value, device: bool) -> serde_json::Value {
        let device = device.then(|| self.device_record());
        Provenance::new(&self.build, device).insert_into(&mut fields);
        fields
    }
}

/// A held lock on a run directory ([`lock_run_dir`]); released when dropped or when the
/// process ends.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

/// Takes the lock of the run directory `dir` (the file `dir/.lock`, an advisory lock of the
/// operating system): two processes resuming one run directory would interleave its resume
/// logs. The lock is released when the returned guard is dropped, and by the operating system
/// when the process ends, however it ends.
///
/// # Errors
/// [`RunError::Io`] when the lock file cannot be created; [`RunError::InUse`] when another
/// process holds the lock.
pub fn lock_run_dir(dir: &Path) -> Result<RunLock, RunError> {
    let path = dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(format!("creating {}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(RunLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(RunError::InUse {
            dir: dir.display().to_string(),
            lock: path.display().to_string(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(io(format!("locking {}", path.display()))(e)),
    }
}

/// Keeps the `created` time of an existing `config.json` at `path` in the new `config` (a
/// resumed run rewrites its config; it was created when it was first started), and records
/// the resumption's time as `resumed`. Nothing changes when there is no readable earlier file.
pub fn keep_created(path: &Path, config: &mut serde_json::Value) {
    let earlier = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("created").cloned());
    if let (Some(created), Some(obj)) = (earlier, config.as_object_mut())
        && let Some(now) = obj.insert("created".into(), created)
    {
        obj.insert("resumed".into(), now);
    }
}

/// A file-system-safe name for a model spec: a Hub id has its `/` replaced by `--`
/// (`openai/clip-vit-base-patch32` → `openai--clip-vit-base-patch32`), a directory gives its
/// last component; any other character outside `[A-Za-z0-9._-]` becomes `_`.
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

/// Progress of `len` items named `what` on stderr: an indicatif bar (items/s, ETA) when stderr
/// is a terminal, otherwise plain lines ([`Progress`]).
pub fn progress(len: u64, what: &str) -> Progress {
    if std::io::stderr().is_terminal() {
        let pb = indicatif::ProgressBar::new(len);
        pb.set_style(
            indicatif::ProgressStyle::with_template(&format!(
                "{{spinner}} {what} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} ({{per_sec}}, eta {{eta}}) {{msg}}"
            ))
            .expect("valid template"),
        );
        Progress {
            inner: ProgressInner::Bar(pb),
        }
    } else {
        Progress::lines(len, what, Box::new(|l: &str| eprintln!("{l}")))
    }
}

/// How often [`Progress`] writes a line when stderr is not a terminal: at most one per this
/// many seconds, plus the first and the last item.
pub const PROGRESS_LINE_INTERVAL_S: f64 = 1.0;

/// Progress of a run over items: a bar on a terminal; without one (a log file, a batch job, a
/// pipe) a plain line per unit of work, at most one a second
/// ([`PROGRESS_LINE_INTERVAL_S`]), always the first and the last:
///
/// ```text
/// images 3/100 (3%), elapsed 0:01:12, eta 0:38:48
/// images 100/100 done in 0:40:02
/// ```
///
/// The rate behind the ETA counts only the items done by this process (a resumed run's earlier
/// items do not shorten it). Methods take `&self`, like indicatif's.
pub struct Progress {
    inner: ProgressInner,
}

enum ProgressInner {
    Bar(indicatif::ProgressBar),
    Lines(std::sync::Mutex<Lines>),
}

type LineSink = Box<dyn FnMut(&str) + Send>;

struct Lines {
    what: String,
    len: u64,
    pos: u64,
    /// When this process started counting, and the position then.
    start: std::time::Instant,
    base: Option<u64>,
    last_line: Option<std::time::Instant>,
    last_pos: Option<u64>,
    message: String,
    finished: bool,
    sink: LineSink,
}

/// `h:mm:ss`.
fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

impl Lines {
    /// The position is now `new_pos`; `first_base` is where this process starts counting if
    /// this is the first update (a resumed run's items done before).
    fn moved(&mut self, new_pos: u64, first_base: u64) {
        if self.base.is_none() {
            self.base = Some(first_base);
            self.start = std::time::Instant::now();
        }
        self.pos = new_pos;
        let due = self
            .last_line
            .is_none_or(|t| t.elapsed().as_secs_f64() >= PROGRESS_LINE_INTERVAL_S);
        let last = self.len > 0 && self.pos >= self.len;
        if self.pos > 0 && self.last_pos != Some(self.pos) && (due || last) {
            let line = self.line();
            (self.sink)(&line);
            self.last_line = Some(std::time::Instant::now());
            self.last_pos = Some(self.pos);
        }
    }

    fn line(&self) -> String {
        let elapsed = self.start.elapsed().as_secs_f64();
        let mut l = if self.len > 0 {
            format!(
                "{} {}/{} ({}%), elapsed {}",
                self.what,
                self.pos,
                self.len,
                self.pos * 100 / self.len,
                clock(elapsed)
            )
        } else {
            format!("{} {}, elapsed {}", self.what, self.pos, clock(elapsed))
        };
        let done_here = self.pos.saturating_sub(self.base.unwrap_or(0));
        if self.len > self.pos && done_here > 0 {
            let eta = elapsed / done_here as f64 * (self.len - self.pos) as f64;
            l.push_str(&format!(", eta {}", clock(eta)));
        }
        if !self.message.is_empty() {
            l.push_str(&format!(" ({})", self.message));
        }
        l
    }

    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        // Nothing was done by this process: nothing to report.
        let Some(base) = self.base else { return };
        if self.pos > base {
            let line = format!(
                "{} {}{} done in {}",
                self.what,
                self.pos,
                if self.len > 0 {
                    format!("/{}", self.len)
                } else {
                    String::new()
                },
                clock(self.start.elapsed().as_secs_f64())
            );
            (self.sink)(&line);
        }
    }
}

impl Progress {
    /// Progress written as plain lines to `sink` (what [`progress`] does when stderr is not a
    /// terminal).
    pub fn lines(len: u64, what: &str, sink: Box<dyn FnMut(&str) + Send>) -> Self {
        Self {
            inner: ProgressInner::Lines(std::sync::Mutex::new(Lines {
                what: what.to_string(),
                len,
                pos: 0,
                start: std::time::Instant::now(),
                base: None,
                last_line: None,
                last_pos: None,
                message: String::new(),
                finished: false,
                sink,
            })),
        }
    }

    fn with_lines(&self, f: impl FnOnce(&mut Lines)) {
        if let ProgressInner::Lines(l) = &self.inner {
            let mut guard = l.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard);
        }
    }

    /// `n` more items done.
    pub fn inc(&self, n: u64) {
        match &self.inner {
            ProgressInner::Bar(b) => b.inc(n),
            ProgressInner::Lines(_) => self.with_lines(|l| {
                let (from, to) = (l.pos, l.pos + n);
                l.moved(to, from);
            }),
        }
    }

    /// `pos` items done (a resumed run sets the items it found done).
    pub fn set_position(&self, pos: u64) {
        match &self.inner {
            ProgressInner::Bar(b) => b.set_position(pos),
            ProgressInner::Lines(_) => self.with_lines(|l| l.moved(pos, pos)),
        }
    }

    /// The number of items, once known.
    pub fn set_length(&self, len: u64) {
        match &self.inner {
            ProgressInner::Bar(b) => b.set_length(len),
            ProgressInner::Lines(_) => self.with_lines(|l| l.len = len),
        }
    }

    /// A short status shown with the count (e.g. the current loss).
    pub fn set_message(&self, message: impl Into<String>) {
        let message = message.into();
        match &self.inner {
            ProgressInner::Bar(b) => b.set_message(message),
            ProgressInner::Lines(_) => self.with_lines(|l| l.message = message),
        }
    }

    /// Done: the bar is removed; without a terminal a last line says how long it took.
    pub fn finish_and_clear(&self) {
        match &self.inner {
            ProgressInner::Bar(b) => b.finish_and_clear(),
            ProgressInner::Lines(_) => self.with_lines(Lines::finish),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Row<'a> {
        name: &'a str,
        value: f64,
    }

    #[test]
    fn a_run_directory_is_locked_by_one_holder_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock_run_dir(dir.path()).unwrap();
        let e = lock_run_dir(dir.path()).unwrap_err();
        assert!(matches!(e, RunError::InUse { .. }), "{e}");
        assert!(e.to_string().contains("in use by another process"), "{e}");
        drop(held);
        lock_run_dir(dir.path()).unwrap();
    }

    #[test]
    fn a_resumed_config_keeps_when_the_run_was_created() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        let mut first = serde_json::json!({"created": "20261207-100000", "a": 1});
        keep_created(&p, &mut first);
        assert_eq!(
            first,
            serde_json::json!({"created": "20261207-100000", "a": 1})
        );
        write_json(&p, &first).unwrap();
        let mut again = serde_json::json!({"created": "20261207-110000", "a": 1});
        keep_created(&p, &mut again);
        assert_eq!(
            again,
            serde_json::json!({"created": "20261207-100000", "resumed": "20261207-110000", "a": 1})
        );
    }

    #[test]
    fn csv_fields_are_quoted_where_needed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        write_csv(
            &p,
            &[
                Row {
                    name: "plain",
                    value: 1.5,
                },
                Row {
                    name: "a, \"b\"",
                    value: -2.0,
                },
            ],
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "name,value\nplain,1.5\n\"a, \"\"b\"\"\",-2.0\n"
        );
        // `Plain` keeps Rust's `{}` form of a number.
        #[derive(Serialize)]
        struct PlainRow {
            value: Plain,
        }
        let rows = [-2.0, 1.0, 0.25, f64::NAN, 1e-7].map(|v| PlainRow { value: Plain(v) });
        write_csv(&p, &rows).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "value\n-2\n1\n0.25\nNaN\n0.0000001\n"
        );
    }

    #[test]
    fn new_run_directories_are_never_shared() {
        let dir = tempfile::tempdir().unwrap();
        let a = new_dir(dir.path(), "m-20261201-120000").unwrap();
        let b = new_dir(dir.path(), "m-20261201-120000").unwrap();
        let c = new_dir(dir.path(), "m-20261201-120000").unwrap();
        assert_eq!(a, dir.path().join("m-20261201-120000"));
        assert_eq!(b, dir.path().join("m-20261201-120000-2"));
        assert_eq!(c, dir.path().join("m-20261201-120000-3"));
    }

    #[test]
    fn a_table_is_quoted_and_its_row_lengths_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        let header = ["label", "x"].map(String::from);
        write_csv_table(&p, &header, &[vec!["a,b", "1"]]).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "label,x\n\"a,b\",1\n");
        let err = write_csv_table(&p, &header, &[vec!["a"]]).unwrap_err();
        assert!(err.to_string().contains("t.csv"), "{err}");
    }

    #[test]
    fn a_log_cut_mid_line_is_truncated_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        append_jsonl(&p, &serde_json::json!({"i": 0})).unwrap();
        append_jsonl(&p, &serde_json::json!({"i": 1})).unwrap();
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push_str("{\"i\": 2");
        std::fs::write(&p, &text).unwrap();
        let rows: Vec<serde_json::Value> = read_jsonl(&p, "test").unwrap();
        assert_eq!(rows.len(), 2);
        assert!(std::fs::read_to_string(&p).unwrap().ends_with("}\n"));
        std::fs::write(&p, "{\"i\": 0}\nnot json\n").unwrap();
        let e = read_jsonl::<serde_json::Value>(&p, "test").unwrap_err();
        assert!(
            e.to_string().contains("log.jsonl:2: not a test record"),
            "{e}"
        );
    }

    #[test]
    fn run_dir_resumes_by_identity_and_refuses_another() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let id = serde_json::json!({"seed": 1, "images": 5});
        assert_eq!(
            run_dir("t", "m", Some(out.clone()), &id, false).unwrap(),
            out
        );
        write_json(
            &out.join("config.json"),
            &serde_json::json!({"identity": id}),
        )
        .unwrap();
        assert_eq!(
            run_dir("t", "m", Some(out.clone()), &id, false).unwrap(),
            out
        );
        let other = serde_json::json!({"seed": 2, "images": 5});
        let e = run_dir("t", "m", Some(out.clone()), &other, false).unwrap_err();
        assert!(e.to_string().contains("seed: 1 there vs 2 now"), "{e}");
        std::fs::write(dir.path().join("stray"), b"").unwrap();
        let e = run_dir("t", "m", Some(dir.path().to_path_buf()), &id, false).unwrap_err();
        assert!(matches!(e, RunError::NotARun { .. }), "{e}");
    }

    /// Nested identities name only the leaves that changed, by dotted path.
    #[test]
    fn describe_difference_names_nested_leaves() {
        let old = serde_json::json!({"command": "x", "run": {"recipe": {"lr": 1e-4, "epochs": 1}, "data": "d"}});
        let new = serde_json::json!({"command": "x", "run": {"recipe": {"lr": 1e-3, "epochs": 1}, "data": "d", "lora": 8}});
        assert_eq!(
            describe_difference(&old, &new),
            "run.lora: null there vs 8 now; run.recipe.lr: 0.0001 there vs 0.001 now"
        );
        assert_eq!(describe_difference(&old, &old), "");
    }

    /// Without a terminal, progress is a line per item (at most one a second, always the
    /// first and the last), the ETA from this process's rate, and a closing line.
    #[test]
    fn progress_without_a_terminal_writes_lines() {
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = lines.clone();
        let p = Progress::lines(
            4,
            "images",
            Box::new(move |l: &str| sink.lock().unwrap().push(l.to_string())),
        );
        p.set_position(1); // resumed: one done before
        p.inc(1);
        p.inc(1);
        p.set_message("loss 0.5");
        p.inc(1);
        p.finish_and_clear();
        drop(p);
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with("images 1/4 (25%), elapsed 0:00:00"),
            "{lines:?}"
        );
        assert!(!lines[0].contains("eta"), "no rate yet: {lines:?}");
        assert!(
            lines[1].starts_with("images 4/4 (100%), elapsed 0:00:00 (loss 0.5)"),
            "{lines:?}"
        );
        assert!(
            lines[2].starts_with("images 4/4 done in 0:00:00"),
            "{lines:?}"
        );
        assert_eq!(clock(3725.4), "1:02:05");
        // A fresh run writes no line for nothing done; its first item has a rate.
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = lines.clone();
        let p = Progress::lines(
            0,
            "texts",
            Box::new(move |l: &str| sink.lock().unwrap().push(l.to_string())),
        );
        p.set_position(0);
        p.set_length(3);
        p.inc(1);
        p.finish_and_clear();
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("texts 1/3 (33%), elapsed 0:00:00, eta 0:00:00"),
            "{lines:?}"
        );
    }

    #[test]
    fn provenance_has_one_schema() {
        const BUILD: BuildInfo = BuildInfo {
            version: "0.1.0",
            git_commit: "abc",
            git_dirty: Some(false),
            dependencies: &[
                ("burn", "0.22.1"),
                ("image", "0.24.9"),
                ("image", "0.25.10"),
                ("rand", "0.9.0"),
            ],
        };
        let mut cfg = serde_json::json!({"identity": {}});
        Provenance::new(&BUILD, None).insert_into(&mut cfg);
        assert_eq!(cfg["git_commit"], "abc");
        assert_eq!(cfg["crate_versions"]["burn"], "0.22.1");
        assert_eq!(cfg["crate_versions"]["bindscope"], "0.1.0");
        assert_eq!(cfg["crate_versions"]["image"], "0.24.9, 0.25.10");
        assert!(cfg["crate_versions"].get("rand").is_none());
        assert!(cfg.get("device").is_none());
    }
}
