//! Hub ids: the Hugging Face cache and downloads.
//!
//! The cache is the one `huggingface_hub` (Python) reads and writes, so a model downloaded by
//! either is found by the other: under the cache root ([`HubConfig::cache`]),
//! `models--<org>--<name>/` holds `blobs/<etag>` (the files, named by the Hub's etag: the
//! sha256 for LFS files), `snapshots/<commit>/<file>` (relative symlinks into `blobs/`),
//! `refs/<revision>` (the commit a branch or tag pointed to) and `.no_exist/<commit>/<file>`
//! (empty markers: the Hub said this optional file does not exist at that commit).
//!
//! A revision already in the cache with every file bindscope reads (present, or known to be
//! absent) is used as it is, without asking the Hub; otherwise the missing files are
//! downloaded with `hf-hub` (unless `HF_HUB_OFFLINE` is set). A cached branch is not checked for
//! newer commits: pin a commit (`org/name@<sha>`) or remove `models--org--name` to update.

use super::{Checkpoint, CheckpointError, INDEX, WEIGHTS, shards_from_index};
use sha2::{Digest, Sha256};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The Hub's address when `HF_ENDPOINT` is unset.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Files read beside `config.json` and the weights when a checkpoint has them: the image
/// processor, the tokenizer, a decoder's generation defaults and chat template, and the
/// sentence-transformers module list and settings (plus, once
/// `modules.json` is known, each module's `<path>/config.json`).
pub const OPTIONAL_FILES: &[&str] = &[
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
];

/// Where and how Hub ids are resolved: the environment variables `huggingface_hub` reads, with
/// its precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubConfig {
    /// The cache root: `HF_HUB_CACHE` (or the older `HUGGINGFACE_HUB_CACHE`), else
    /// `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
    /// `~/.cache/huggingface/hub`.
    pub cache: PathBuf,
    /// The Hub's base URL: `HF_ENDPOINT` without a trailing `/`, else [`DEFAULT_ENDPOINT`].
    pub endpoint: String,
    /// `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) is `1`, `ON`, `YES` or `TRUE` (any case):
    /// only the cache is read.
    pub offline: bool,
    /// The access token for private and gated repositories: `HF_TOKEN` (or the older
    /// `HUGGING_FACE_HUB_TOKEN`), else the file `HF_TOKEN_PATH`, else `$HF_HOME/token` (what
    /// `huggingface-cli login` writes).
    pub token: Option<String>,
}

fn is_true(v: &str) -> bool {
    ["1", "ON", "YES", "TRUE"]
        .iter()
        .any(|t| v.trim().eq_ignore_ascii_case(t))
}

impl HubConfig {
    /// The configuration of this process's environment ([`HubConfig::from_vars`] over
    /// `std::env::var`, with the home directory from the OS when `HOME` is unset).
    pub fn from_env() -> Self {
        Self::from_vars(|k| {
            std::env::var(k).ok().or_else(|| {
                (k == "HOME")
                    .then(std::env::home_dir)
                    .flatten()
                    .map(|h| h.display().to_string())
            })
        })
    }

    /// The configuration that the environment `var` describes (`var(name)` is the variable's
    /// value, `None` when unset; an empty value counts as unset). `~/` at the start of a path
    /// is the home directory (`HOME`).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let home = get("HOME").map(PathBuf::from);
        let path = |v: String| expand_home(&v, home.as_deref());
        let hf_home = get("HF_HOME").map(path).unwrap_or_else(|| {
            get("XDG_CACHE_HOME")
                .map(path)
                .or_else(|| home.as_ref().map(|h| h.join(".cache")))
                .unwrap_or_else(|| PathBuf::from(".cache"))
                .join("huggingface")
        });
        let cache = get("HF_HUB_CACHE")
            .or_else(|| get("HUGGINGFACE_HUB_CACHE"))
            .map(path)
            .unwrap_or_else(|| hf_home.join("hub"));
        let endpoint = get("HF_ENDPOINT")
            .map(|e| e.trim().trim_end_matches('/').to_string())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let offline = get("HF_HUB_OFFLINE")
            .or_else(|| get("TRANSFORMERS_OFFLINE"))
            .is_some_and(|v| is_true(&v));
        let clean = |t: String| Some(t.replace(['\r', '\n'], "").trim().to_string());
        let token = get("HF_TOKEN")
            .or_else(|| get("HUGGING_FACE_HUB_TOKEN"))
            .and_then(clean)
            .or_else(|| {
                let file = get("HF_TOKEN_PATH")
                    .map(path)
                    .unwrap_or_else(|| hf_home.join("token"));
                std::fs::read_to_string(file).ok().and_then(clean)
            })
            .filter(|t| !t.is_empty());
        Self {
            cache,
            endpoint,
            offline,
            token,
        }
    }
}

/// `~/rest` → `home/rest` (and `~` → `home`); any other path as given.
pub(crate) fn expand_home(p: &str, home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix('~'), home) {
        (Some(""), Some(h)) => h.to_path_buf(),
        (Some(rest), Some(h)) if rest.starts_with('/') => h.join(&rest[1..]),
        _ => PathBuf::from(p),
    }
}

/// A Hub model id and the revision to read: `org/name` (branch `main`) or
/// `org/name@<revision>` (a branch, tag or commit sha; `org/name@refs/pr/1` for a pull request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubId {
    /// `org/name` (or a legacy one-part `name`).
    pub repo: String,
    /// The branch, tag or commit; `main` when the spec names none.
    pub revision: String,
}

fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A name the Hub accepts as one part of a repo id: ASCII letters, digits, `-`, `_`, `.`, not
/// starting or ending with `-` or `.`, at most 96 characters.
fn is_repo_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
        && !s.contains("..")
}

impl HubId {
    /// Parses `org/name[@revision]`; `None` when `spec` is not a Hub id.
    pub fn parse(spec: &str) -> Option<Self> {
        let (repo, revision) = match spec.split_once('@') {
            Some((r, rev)) => (r, rev),
            None => (spec, "main"),
        };
        let parts: Vec<&str> = repo.split('/').collect();
        let revision_ok = !revision.is_empty()
            && !revision
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
            && !revision.contains(['\\', ' ', '@']);
        (parts.len() <= 2 && parts.iter().all(|p| is_repo_part(p)) && revision_ok).then(|| Self {
            repo: repo.to_string(),
            revision: revision.to_string(),
        })
    }

    /// `org/name`, or `org/name@revision` for another revision than `main`.
    pub fn display(&self) -> String {
        if self.revision == "main" {
            self.repo.clone()
        } else {
            format!("{}@{}", self.repo, self.revision)
        }
    }

    /// The `huggingface-cli download` command that fills the cache with this revision.
    fn cli_download(&self) -> String {
        if self.revision == "main" {
            format!("huggingface-cli download {}", self.repo)
        } else {
            format!(
                "huggingface-cli download {} --revision {}",
                self.repo, self.revision
            )
        }
    }
}

/// One repository's folder in the cache.
struct CacheRepo {
    dir: PathBuf,
}

/// What the cache knows about one file at one commit.
enum Entry {
    /// In the snapshot.
    Present(PathBuf),
    /// The Hub said it does not exist (`.no_exist` marker).
    Absent,
    /// Not known.
    Unknown,
}

impl CacheRepo {
    fn new(cache: &Path, id: &HubId) -> Self {
        Self {
            dir: cache.join(format!("models--{}", id.repo.replace('/', "--"))),
        }
    }

    /// The commit `revision` names in the cache: `refs/<revision>`, or the revision itself
    /// when it is a commit sha with a snapshot.
    fn commit(&self, revision: &str) -> Option<String> {
        let from_ref = std::fs::read_to_string(self.dir.join("refs").join(revision))
            .ok()
            .map(|c| c.trim().to_string())
            .filter(|c| is_commit(c));
        from_ref.or_else(|| {
            (is_commit(revision) && self.dir.join("snapshots").join(revision).is_dir())
                .then(|| revision.to_string())
        })
    }

    fn entry(&self, commit: &str, file: &str) -> Entry {
        let p = self.dir.join("snapshots").join(commit).join(file);
        if p.is_file() {
            Entry::Present(p)
        } else if self.dir.join(".no_exist").join(commit).join(file).is_file() {
            Entry::Absent
        } else {
            Entry::Unknown
        }
    }

    /// Records that `file` does not exist at `commit` (and that `revision` is that commit), as
    /// huggingface_hub does; failures only cost a request next time.
    fn mark_absent(&self, revision: &str, commit: &str, file: &str) {
        let marker = self.dir.join(".no_exist").join(commit).join(file);
        if let Some(parent) = marker.parent()
            && std::fs::create_dir_all(parent).is_ok()
        {
            let _ = std::fs::write(&marker, b"");
        }
        if revision != commit {
            let r = self.dir.join("refs").join(revision);
            if !r.exists()
                && let Some(parent) = r.parent()
                && std::fs::create_dir_all(parent).is_ok()
            {
                let _ = std::fs::write(&r, commit);
            }
        }
    }
}

/// The `<path>/config.json` of each sentence-transformers module `modules.json` lists (a
/// module without a path, or with one that is not a plain relative folder name, is skipped).
fn module_configs(modules: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(modules) else {
        return Vec::new();
    };
    let Ok(serde_json::Value::Array(list)) = serde_json::from_str::<serde_json::Value>(&text)
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|m| m.get("path")?.as_str())
        .filter(|p| !p.is_empty() && p.split('/').all(is_repo_part))
        .map(|p| format!("{p}/config.json"))
        .collect()
}

/// Resolves `id` from the cache, downloading what is missing unless offline.
pub(crate) fn resolve(
    spec: &str,
    id: &HubId,
    cfg: &HubConfig,
) -> Result<Checkpoint, CheckpointError> {
    let repo = CacheRepo::new(&cfg.cache, id);
    if let Some(commit) = repo.commit(&id.revision)
        && let Some(ck) = from_snapshot(spec, &repo, &commit, cfg.offline)?
    {
        return Ok(ck);
    }
    if cfg.offline {
        return Err(CheckpointError::NotFound {
            spec: spec.to_string(),
            files: format!("config.json and {WEIGHTS} (or {INDEX})"),
            where_: format!(
                "of revision '{}' in the Hugging Face cache ({}); HF_HUB_OFFLINE is set, so nothing was downloaded",
                id.revision,
                repo.dir.display()
            ),
            fix: format!(
                "download it once while online (unset HF_HUB_OFFLINE, or `{}`)",
                id.cli_download()
            ),
        });
    }
    download(spec, id, cfg, &repo)
}

/// The checkpoint of `commit` in the cache when it has the config, every weight file and an
/// answer (present or absent) for every optional file; `Ok(None)` when something must still be
/// asked of the Hub. Offline, an optional file the cache knows nothing about counts as absent
/// (as transformers does offline), with a note for those that change the numbers.
fn from_snapshot(
    spec: &str,
    repo: &CacheRepo,
    commit: &str,
    offline: bool,
) -> Result<Option<Checkpoint>, CheckpointError> {
    let present = |f: &str| match repo.entry(commit, f) {
        Entry::Present(p) => Some(p),
        _ => None,
    };
    let Some(config) = present("config.json") else {
        return Ok(None);
    };
    let weights = if let Some(w) = present(WEIGHTS) {
        vec![w]
    } else if let Some(idx) = present(INDEX) {
        match shards_from_index(&idx)?
            .iter()
            .map(|s| present(s))
            .collect::<Option<Vec<_>>>()
        {
            Some(w) => w,
            None => return Ok(None),
        }
    } else {
        return Ok(None);
    };
    let mut optional: Vec<String> = OPTIONAL_FILES.iter().map(|s| s.to_string()).collect();
    if let Some(m) = present("modules.json") {
        optional.extend(module_configs(&m));
    }
    for f in &optional {
        if let Entry::Unknown = repo.entry(commit, f) {
            if !offline {
                return Ok(None);
            }
            if ["preprocessor_config.json", "tokenizer.json"].contains(&f.as_str()) {
                eprintln!(
                    "note: {spec}: {f} is not in the cache (HF_HUB_OFFLINE is set, so the Hub was not asked); treated as absent"
                );
            }
        }
    }
    Ok(Some(Checkpoint {
        spec: spec.to_string(),
        config,
        weights,
        preprocessor_config: present("preprocessor_config.json"),
        tokenizer: present("tokenizer.json"),
        arch: None,
    }))
}

/// Why one file could not be fetched.
enum Failure {
    /// The Hub says the file does not exist at this commit (`EntryNotFound`).
    Missing { commit: Option<String> },
    /// Any other answer, already in the user's terms.
    Error(String),
}

/// Downloads what the cache lacks of `id`.
fn download(
    spec: &str,
    id: &HubId,
    cfg: &HubConfig,
    repo: &CacheRepo,
) -> Result<Checkpoint, CheckpointError> {
    let hub_err = |message: String| CheckpointError::Hub {
        spec: spec.to_string(),
        message,
    };
    let api = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(cfg.cache.clone()))
        .with_endpoint(cfg.endpoint.clone())
        .with_token(cfg.token.clone())
        .with_progress(false)
        .build()
        .map_err(|e| hub_err(format!("cannot set up the Hub client: {e}")))?;
    let remote = api.repo(hf_hub::Repo::with_revision(
        id.repo.clone(),
        hf_hub::RepoType::Model,
        id.revision.clone(),
    ));
    // One file: from the cache when the snapshot has it, else from the Hub; `None` when the
    // Hub says it does not exist.
    let fetch = |file: &str| -> Result<Option<PathBuf>, CheckpointError> {
        if let Some(commit) = repo.commit(&id.revision) {
            match repo.entry(&commit, file) {
                Entry::Present(p) => return Ok(Some(p)),
                Entry::Absent => return Ok(None),
                Entry::Unknown => {}
            }
        }
        let progress = DownloadProgress::new(&id.display());
        match remote.download_with_progress(file, progress) {
            Ok(p) => {
                verify_blob(&p).map_err(|m| hub_err(format!("{file}: {m}")))?;
                Ok(Some(p))
            }
            Err(e) => match classify(e, id, cfg, file) {
                Failure::Missing { commit } => {
                    if let Some(c) = commit.filter(|c| is_commit(c)) {
                        repo.mark_absent(&id.revision, &c, file);
                    }
                    Ok(None)
                }
                Failure::Error(m) => Err(hub_err(m)),
            },
        }
    };
    let absent = |what: &str| {
        hub_err(format!(
            "revision '{}' of '{}' on the Hub ({}) has no {what}; bindscope reads Hugging Face \
             checkpoints with config.json and safetensors weights ({WEIGHTS} or a sharded \
             {INDEX})",
            id.revision, id.repo, cfg.endpoint
        ))
    };
    let config = fetch("config.json")?.ok_or_else(|| absent("config.json"))?;
    let weights = match fetch(WEIGHTS)? {
        Some(w) => vec![w],
        None => match fetch(INDEX)? {
            Some(idx) => {
                let mut out = Vec::new();
                for s in shards_from_index(&idx)? {
                    out.push(fetch(&s)?.ok_or_else(|| absent(&format!("{s} (named by {INDEX})")))?);
                }
                out
            }
            None => return Err(absent(&format!("{WEIGHTS} (nor {INDEX})"))),
        },
    };
    let mut found = std::collections::HashMap::new();
    for f in OPTIONAL_FILES {
        found.insert(*f, fetch(f)?);
    }
    if let Some(Some(m)) = found.get("modules.json") {
        for f in module_configs(m) {
            fetch(&f)?;
        }
    }
    Ok(Checkpoint {
        spec: spec.to_string(),
        config,
        weights,
        preprocessor_config: found.remove("preprocessor_config.json").flatten(),
        tokenizer: found.remove("tokenizer.json").flatten(),
        arch: None,
    })
}

/// A freshly downloaded LFS file (its blob named by its sha256, as the Hub's etag is) must
/// have that sha256: a wrong one is removed from the cache (blob and snapshot link).
fn verify_blob(snapshot_file: &Path) -> Result<(), String> {
    let Ok(target) = std::fs::read_link(snapshot_file) else {
        return Ok(());
    };
    let Some(etag) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(());
    };
    if etag.len() != 64 || !etag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(());
    }
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(snapshot_file).map_err(|e| e.to_string())?;
    std::io::copy(&mut f, &mut h).map_err(|e| e.to_string())?;
    let got: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if got.eq_ignore_ascii_case(&etag) {
        return Ok(());
    }
    let blob = snapshot_file
        .parent()
        .map(|d| d.join(&target))
        .unwrap_or_else(|| target.clone());
    let _ = std::fs::remove_file(snapshot_file);
    let _ = std::fs::remove_file(&blob);
    Err(format!(
        "the download is corrupt (sha256 {got}, the Hub's etag says {etag}); it was removed \
         from the cache: run the command again"
    ))
}

/// The Hub's answer in the user's terms.
fn classify(e: hf_hub::api::sync::ApiError, id: &HubId, cfg: &HubConfig, file: &str) -> Failure {
    use hf_hub::api::sync::ApiError;
    let repo = &id.repo;
    let endpoint = &cfg.endpoint;
    let has_token = cfg.token.is_some();
    let given = "the token given (HF_TOKEN, else the file HF_TOKEN_PATH or $HF_HOME/token) has no access to it";
    match e {
        ApiError::RequestError(boxed) => match *boxed {
            ureq::Error::Status(status, resp) => {
                let code = resp.header("x-error-code").map(str::to_string);
                let message = resp
                    .header("x-error-message")
                    .map(|m| format!(" (the Hub says: {m})"))
                    .unwrap_or_default();
                let commit = resp.header("x-repo-commit").map(str::to_string);
                match (status, code.as_deref()) {
                    (_, Some("EntryNotFound")) | (404, None) => Failure::Missing { commit },
                    (_, Some("GatedRepo")) => Failure::Error(format!(
                        "'{repo}' is a gated repository on the Hub ({endpoint}): accept its \
                         conditions at {endpoint}/{repo} while logged in, then set HF_TOKEN to \
                         a token of that account (or run `huggingface-cli login`){}{message}",
                        if has_token {
                            format!("; {given}")
                        } else {
                            String::new()
                        }
                    )),
                    (_, Some("RepoNotFound")) => Failure::Error(format!(
                        "model '{repo}' not found on the Hub ({endpoint}): check the id \
                         (org/name); if the repository is private, {}{message}",
                        if has_token {
                            given.to_string()
                        } else {
                            "set HF_TOKEN to a token with access to it".to_string()
                        }
                    )),
                    (_, Some("RevisionNotFound")) => Failure::Error(format!(
                        "revision '{}' of model '{repo}' not found on the Hub ({endpoint}): \
                         name a branch, tag or commit that exists (--model {repo}@<revision>){message}",
                        id.revision
                    )),
                    (401 | 403, _) => Failure::Error(format!(
                        "the Hub ({endpoint}) refused access to '{repo}' (HTTP {status}); {}{message}",
                        if has_token {
                            given.to_string()
                        } else {
                            "set HF_TOKEN to a token with access to it".to_string()
                        }
                    )),
                    _ => Failure::Error(format!(
                        "the Hub ({endpoint}) answered HTTP {status} for {file} of '{repo}' \
                         (revision '{}'){message}",
                        id.revision
                    )),
                }
            }
            ureq::Error::Transport(t) => Failure::Error(format!(
                "cannot reach the Hub at {endpoint} for '{repo}' ({t}): check the network and \
                 HF_ENDPOINT, or use the cache only (HF_HUB_OFFLINE=1) or a local directory \
                 (--model path/to/dir)"
            )),
        },
        other => Failure::Error(format!(
            "downloading {file} of '{repo}' from {endpoint} failed: {other}; nothing incomplete \
             is used: run the command again to resume (the part received so far waits in the \
             cache as blobs/<etag>.part)"
        )),
    }
}

/// Download progress: hf-hub's bar on a terminal, otherwise one line when a file starts and
/// one when it is done.
struct DownloadProgress {
    repo: String,
    bar: Option<indicatif::ProgressBar>,
    file: String,
    size: usize,
    done: usize,
    started: Option<Instant>,
}

impl DownloadProgress {
    fn new(repo: &str) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{elapsed_precise}] {bar:30} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
                )
                .expect("valid template"),
            );
            b
        });
        Self {
            repo: repo.to_string(),
            bar,
            file: String::new(),
            size: 0,
            done: 0,
            started: None,
        }
    }
}

/// `512 B`, `84.6 kB`, `88.2 MB`, `1.2 GB`.
fn human_size(bytes: usize) -> String {
    let b = bytes as f64;
    match bytes {
        0..1_000 => format!("{bytes} B"),
        1_000..1_000_000 => format!("{:.1} kB", b / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b / 1e6),
        _ => format!("{:.1} GB", b / 1e9),
    }
}

impl hf_hub::api::Progress for DownloadProgress {
    fn init(&mut self, size: usize, filename: &str) {
        // hf-hub calls this again when it resumes a partial download.
        if self.started.is_some() {
            return;
        }
        self.started = Some(Instant::now());
        self.file = filename.to_string();
        self.size = size;
        match &self.bar {
            Some(b) => {
                b.set_length(size as u64);
                b.set_message(format!("{} {filename}", self.repo));
            }
            None => eprintln!(
                "downloading {} {filename} ({})",
                self.repo,
                human_size(size)
            ),
        }
    }

    fn update(&mut self, size: usize) {
        self.done += size;
        if let Some(b) = &self.bar {
            b.inc(size as u64);
        }
    }

    fn finish(&mut self) {
        match &self.bar {
            Some(b) => b.finish_and_clear(),
            None => eprintln!(
                "downloaded {} {} ({}) in {:.1} s",
                self.repo,
                self.file,
                human_size(self.size),
                self.started.map_or(0.0, |t| t.elapsed().as_secs_f64())
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> HubConfig {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HubConfig::from_vars(|k| m.get(k).cloned())
    }

    /// The precedence of huggingface_hub's `constants.py` (2.x): `HF_HUB_CACHE` over
    /// `HF_HOME/hub` over `XDG_CACHE_HOME/huggingface/hub` over `~/.cache/huggingface/hub`.
    #[test]
    fn cache_root_follows_huggingface_hub() {
        let home = [("HOME", "/home/u")];
        assert_eq!(
            cfg(&home).cache,
            PathBuf::from("/home/u/.cache/huggingface/hub")
        );
        assert_eq!(
            cfg(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/xdg")]).cache,
            PathBuf::from("/xdg/huggingface/hub")
        );
        assert_eq!(
            cfg(&[
                ("HOME", "/home/u"),
                ("XDG_CACHE_HOME", "/xdg"),
                ("HF_HOME", "~/hf")
            ])
            .cache,
            PathBuf::from("/home/u/hf/hub")
        );
        assert_eq!(
            cfg(&[("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/models")]).cache,
            PathBuf::from("/models")
        );
        assert_eq!(
            cfg(&[("HF_HOME", "/hf"), ("HUGGINGFACE_HUB_CACHE", "/old")]).cache,
            PathBuf::from("/old")
        );
        assert_eq!(
            cfg(&[("HF_HUB_CACHE", "")]).cache,
            PathBuf::from(".cache/huggingface/hub")
        );
    }

    #[test]
    fn endpoint_offline_and_token_follow_huggingface_hub() {
        let c = cfg(&[
            ("HF_ENDPOINT", "http://127.0.0.1:9/"),
            ("HF_HUB_OFFLINE", "yes"),
        ]);
        assert_eq!(c.endpoint, "http://127.0.0.1:9");
        assert!(c.offline);
        assert_eq!(cfg(&[]).endpoint, DEFAULT_ENDPOINT);
        for (v, off) in [
            ("1", true),
            ("ON", true),
            ("true", true),
            ("0", false),
            ("no", false),
        ] {
            assert_eq!(cfg(&[("HF_HUB_OFFLINE", v)]).offline, off, "{v}");
        }
        assert!(cfg(&[("TRANSFORMERS_OFFLINE", "1")]).offline);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "hf_file\n").unwrap();
        let home = dir.path().to_str().unwrap();
        assert_eq!(cfg(&[("HF_HOME", home)]).token.as_deref(), Some("hf_file"));
        assert_eq!(
            cfg(&[("HF_HOME", home), ("HF_TOKEN", " hf_env ")])
                .token
                .as_deref(),
            Some("hf_env")
        );
        let other = dir.path().join("other");
        std::fs::write(&other, "hf_path").unwrap();
        assert_eq!(
            cfg(&[
                ("HF_HOME", home),
                ("HF_TOKEN_PATH", other.to_str().unwrap())
            ])
            .token
            .as_deref(),
            Some("hf_path")
        );
        assert_eq!(cfg(&[("HF_HOME", "/nonexistent")]).token, None);
    }

    #[test]
    fn hub_ids_and_revisions_parse() {
        let id = HubId::parse("facebook/dinov2-small").unwrap();
        assert_eq!(
            (id.repo.as_str(), id.revision.as_str()),
            ("facebook/dinov2-small", "main")
        );
        let id = HubId::parse("org/name@v1.0").unwrap();
        assert_eq!(
            (id.repo.as_str(), id.revision.as_str()),
            ("org/name", "v1.0")
        );
        assert_eq!(id.display(), "org/name@v1.0");
        assert_eq!(
            HubId::parse("org/name@refs/pr/1").unwrap().revision,
            "refs/pr/1"
        );
        assert!(HubId::parse("gpt2").is_some());
        for bad in [
            "",
            "a/b/c",
            "org/",
            "/name",
            "org/name@",
            "org/na me",
            "org/..",
            "org/name@a/../b",
            "./x",
            "~/x",
        ] {
            assert!(HubId::parse(bad).is_none(), "{bad}");
        }
    }
}
