//! The Hub path (`--model org/name`), provenance and progress, as a user meets them.
//!
//! Hub: each test starts its own mock of the Hugging Face Hub's HTTP API on loopback
//! (`tiny_http` on 127.0.0.1, a free port), points `HF_ENDPOINT` at it and `HF_HUB_CACHE` at a
//! scratch cache, and runs the `experiments` binary as a child process (the environment is the
//! child's: no `set_var` in this multithreaded test binary). The mock answers as the Hub does
//! for `hf-hub` 0.4: `GET /{repo}/resolve/{revision}/{file}` with `Range: bytes=0-0` for the
//! metadata (`x-repo-commit`, `etag`, or for LFS files `x-linked-etag` = the sha256 and a 302
//! to a CDN URL), `Content-Range` for the size, then the body (resumed with `Range: bytes=N-`);
//! errors as `x-error-code` `RepoNotFound`, `RevisionNotFound`, `EntryNotFound` (with
//! `x-repo-commit`) and `GatedRepo` (401 without an accepted token).
//!
//! Set `BINDSCOPE_PYTHON` to a Python with `huggingface_hub` to also check that Python reads the
//! cache bindscope wrote (`try_to_load_from_cache`, `scan_cache_dir`); without it that part is
//! skipped with a note.

use crate::common::{root, text};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MAIN: &str = "1111111111111111111111111111111111111111";
const V2: &str = "2222222222222222222222222222222222222222";
const TOKEN: &str = "hf_mock_granted";

fn sha256(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn fixture_bytes(rel: &str) -> Vec<u8> {
    let p = root().join("tests/fixtures").join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// One revision of a mock repository: its commit and files.
struct Revision {
    commit: &'static str,
    files: HashMap<String, Vec<u8>>,
}

/// A request the mock saw.
#[derive(Debug, Clone)]
struct Seen {
    url: String,
    range: Option<String>,
    auth: Option<String>,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    /// Send LFS bodies through the broken CDN.
    break_lfs: bool,
}

/// A CDN whose connections break mid-body: it answers each request for `data` with headers
/// that promise the whole requested range, sends `cut` bytes of it and closes the connection.
/// (tiny_http cannot close a connection mid-response: this one case is a bare socket.)
struct BrokenCdn {
    url: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BrokenCdn {
    fn start(data: Vec<u8>, cut: usize) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let rng = head.lines().find_map(|l| {
                    l.strip_prefix("Range: ")
                        .or_else(|| l.strip_prefix("range: "))
                });
                let (a, b) = range(rng, data.len());
                let reply = format!(
                    "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {a}-{b}/{}\r\n\r\n",
                    b + 1 - a,
                    data.len()
                );
                let _ = conn.write_all(reply.as_bytes());
                let _ = conn.write_all(&data[a..(a + cut).min(b)]);
                let _ = conn.flush();
                let _ = conn.shutdown(std::net::Shutdown::Both);
            }
        });
        Self {
            url,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for BrokenCdn {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.url.trim_start_matches("http://"));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The mock Hub: `org/tiny` (branch `main` = the DINOv2 fixture with a BiT preprocessor, branch
/// `v2` = the DINOv2-with-registers fixture), `org/gated` (gated: needs `TOKEN`), nothing else.
struct MockHub {
    url: String,
    /// The broken CDN ([`MockHub::break_lfs_downloads`]), serving the DINOv2 fixture's weights.
    _broken: BrokenCdn,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
    state: Arc<Mutex<State>>,
}

fn tiny_main() -> Revision {
    Revision {
        commit: MAIN,
        files: HashMap::from([
            ("config.json".into(), fixture_bytes("dinov2/config.json")),
            (
                "model.safetensors".into(),
                fixture_bytes("dinov2/model.safetensors"),
            ),
            (
                "preprocessor_config.json".into(),
                fixture_bytes("images/bit/preprocessor_config.json"),
            ),
        ]),
    }
}

fn tiny_v2() -> Revision {
    Revision {
        commit: V2,
        files: HashMap::from([
            (
                "config.json".into(),
                fixture_bytes("dinov2_registers/config.json"),
            ),
            (
                "model.safetensors".into(),
                fixture_bytes("dinov2_registers/model.safetensors"),
            ),
        ]),
    }
}

impl MockHub {
    fn start() -> Self {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind loopback"));
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let url = format!("http://127.0.0.1:{port}");
        let state = Arc::new(Mutex::new(State::default()));
        // repo → revision name or commit → files
        let mut repos: HashMap<&str, HashMap<String, Arc<Revision>>> = HashMap::new();
        let (main, v2) = (Arc::new(tiny_main()), Arc::new(tiny_v2()));
        repos.insert(
            "org/tiny",
            HashMap::from([
                ("main".into(), main.clone()),
                (MAIN.into(), main.clone()),
                ("v2".into(), v2.clone()),
                (V2.into(), v2),
            ]),
        );
        repos.insert(
            "org/gated",
            HashMap::from([("main".into(), main.clone()), (MAIN.into(), main)]),
        );
        let broken = BrokenCdn::start(fixture_bytes("dinov2/model.safetensors"), 10_000);
        let (srv, st, base, cdn) = (
            server.clone(),
            state.clone(),
            url.clone(),
            broken.url.clone(),
        );
        let thread = std::thread::spawn(move || {
            for rq in srv.incoming_requests() {
                handle(rq, &repos, &st, &base, &cdn);
            }
        });
        Self {
            url,
            _broken: broken,
            server,
            thread: Some(thread),
            state,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// `true`: LFS downloads break after 10,000 bytes (the broken CDN).
    fn break_lfs_downloads(&self, on: bool) {
        self.state.lock().unwrap().break_lfs = on;
    }
}

impl Drop for MockHub {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("valid header")
}

fn error(status: u16, code: &str, message: &str, commit: Option<&str>) -> tiny_http::ResponseBox {
    let mut r = tiny_http::Response::from_string(message.to_string())
        .with_status_code(status)
        .with_header(header("x-error-code", code))
        .with_header(header("x-error-message", message));
    if let Some(c) = commit {
        r = r.with_header(header("x-repo-commit", c));
    }
    r.boxed()
}

/// `bytes=a-b` / `bytes=a-` → (a, b inclusive) within `len`.
fn range(spec: Option<&str>, len: usize) -> (usize, usize) {
    let Some(r) = spec.and_then(|s| s.strip_prefix("bytes=")) else {
        return (0, len.saturating_sub(1));
    };
    let (a, b) = r.split_once('-').unwrap_or((r, ""));
    let a: usize = a.parse().unwrap_or(0);
    let b: usize = b.parse().unwrap_or(len.saturating_sub(1));
    (a, b.min(len.saturating_sub(1)))
}

/// The body `data[a..=b]` as a 206 (or 200 without a range), with `extra` headers.
fn body(
    data: &[u8],
    rq_range: Option<&str>,
    extra: Vec<tiny_http::Header>,
) -> tiny_http::ResponseBox {
    let (a, b) = range(rq_range, data.len());
    let mut r = tiny_http::Response::from_data(data[a..=b].to_vec())
        .with_status_code(if rq_range.is_some() { 206 } else { 200 });
    if rq_range.is_some() {
        r = r.with_header(header(
            "Content-Range",
            &format!("bytes {a}-{b}/{}", data.len()),
        ));
    }
    for h in extra {
        r = r.with_header(h);
    }
    r.boxed()
}

fn handle(
    rq: tiny_http::Request,
    repos: &HashMap<&str, HashMap<String, Arc<Revision>>>,
    state: &Mutex<State>,
    base: &str,
    broken_cdn: &str,
) {
    let get = |name: &'static str| {
        rq.headers()
            .iter()
            .find(|h| h.field.equiv(name))
            .map(|h| h.value.as_str().to_string())
    };
    let (rng, auth) = (get("Range"), get("Authorization"));
    let url = rq.url().to_string();
    let broken = {
        let mut s = state.lock().unwrap();
        s.seen.push(Seen {
            url: url.clone(),
            range: rng.clone(),
            auth: auth.clone(),
        });
        s.break_lfs
    };
    // The CDN: LFS content by sha256.
    if let Some(sha) = url.strip_prefix("/cdn/") {
        let data = repos
            .values()
            .flat_map(|revs| revs.values())
            .flat_map(|r| r.files.values())
            .find(|d| sha256(d) == sha)
            .cloned();
        let Some(data) = data else {
            let _ = rq.respond(error(404, "EntryNotFound", "no such object", None));
            return;
        };
        let _ = rq.respond(body(&data, rng.as_deref(), vec![]));
        return;
    }
    // /{org}/{name}/resolve/{revision}/{file…}
    let parts: Vec<&str> = url.trim_start_matches('/').splitn(5, '/').collect();
    if parts.len() < 5 || parts[2] != "resolve" {
        let _ = rq.respond(error(404, "", "not a Hub URL", None));
        return;
    }
    let repo = format!("{}/{}", parts[0], parts[1]);
    let revision = parts[3].replace("%2F", "/");
    let file = parts[4];
    let Some(revs) = repos.get(repo.as_str()) else {
        let m = format!("Repository Not Found for url: {base}{url}.");
        let _ = rq.respond(error(404, "RepoNotFound", &m, None));
        return;
    };
    if repo == "org/gated" && auth.as_deref() != Some(&format!("Bearer {TOKEN}")) {
        let m = format!(
            "Access to model {repo} is restricted. You must have access to it and be authenticated to access it. Please log in."
        );
        let _ = rq.respond(error(401, "GatedRepo", &m, None));
        return;
    }
    let Some(rev) = revs.get(&revision) else {
        let m = format!("Invalid rev id: {revision}");
        let _ = rq.respond(error(404, "RevisionNotFound", &m, None));
        return;
    };
    let cdn = broken.then_some(broken_cdn);
    let Some(data) = rev.files.get(file) else {
        let m = format!("Entry not found for url: {base}{url}.");
        let _ = rq.respond(error(404, "EntryNotFound", &m, Some(rev.commit)));
        return;
    };
    if file.ends_with(".safetensors") {
        // LFS: the Hub redirects to its CDN; the etag is the content's sha256.
        let sha = sha256(data);
        // The metadata probe always gets the working CDN; a body, the broken one when set.
        let cdn = match cdn {
            Some(broken) if rng.as_deref() != Some("bytes=0-0") => broken.to_string(),
            _ => format!("{base}/cdn"),
        };
        let r = tiny_http::Response::empty(302)
            .with_header(header("Location", &format!("{cdn}/{sha}")))
            .with_header(header("x-repo-commit", rev.commit))
            .with_header(header("x-linked-etag", &format!("\"{sha}\"")))
            .with_header(header("x-linked-size", &data.len().to_string()))
            .with_header(header("etag", "\"pointer-etag\""));
        let _ = rq.respond(r);
        return;
    }
    // A regular git file: the etag stands for its git blob sha1 (any 40 hex do for the cache).
    let etag = sha256(data)[..40].to_string();
    let extra = vec![
        header("x-repo-commit", rev.commit),
        header("etag", &format!("\"{etag}\"")),
    ];
    let _ = rq.respond(body(data, rng.as_deref(), extra));
}

/// Runs `experiments args` with the Hub environment `env` (everything Hub-related of this
/// process's environment removed first), killed after 120 s.
fn experiments(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_experiments"));
    cmd.args(args);
    for k in [
        "HF_ENDPOINT",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HOME",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_TOKEN_PATH",
        "XDG_CACHE_HOME",
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ] {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("runs experiments");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("experiments {args:?} hung (killed after 120 s)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// A scratch Hub environment: a cache and an empty `HF_HOME` (no token file) in `dir`.
struct Env {
    dir: tempfile::TempDir,
    endpoint: String,
}

impl Env {
    fn new(hub: &MockHub) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Self {
            dir,
            endpoint: hub.url.clone(),
        }
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    fn vars(&self, extra: &[(&'static str, &'static str)]) -> Vec<(String, String)> {
        let mut v = vec![
            ("HF_ENDPOINT".to_string(), self.endpoint.clone()),
            ("HF_HUB_CACHE".into(), self.cache().display().to_string()),
            (
                "HF_HOME".into(),
                self.dir.path().join("home").display().to_string(),
            ),
        ];
        v.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        v
    }

    fn run(&self, args: &[&str], extra: &[(&'static str, &'static str)]) -> Output {
        let vars = self.vars(extra);
        let refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        experiments(args, &refs)
    }

    fn ok(&self, args: &[&str], extra: &[(&'static str, &'static str)]) -> String {
        let o = self.run(args, extra);
        assert!(o.status.success(), "experiments {args:?}: {}", text(&o));
        text(&o)
    }

    /// stdout of a run that must succeed.
    fn ok_stdout(&self, args: &[&str], extra: &[(&'static str, &'static str)]) -> String {
        let o = self.run(args, extra);
        assert!(o.status.success(), "experiments {args:?}: {}", text(&o));
        stdout_of(&o)
    }

    fn fails(&self, args: &[&str], extra: &[(&'static str, &'static str)]) -> String {
        let o = self.run(args, extra);
        assert!(
            !o.status.success(),
            "experiments {args:?} should fail: {}",
            text(&o)
        );
        let t = text(&o);
        assert!(!t.contains("panicked"), "{t}");
        eprintln!("experiments {args:?}:\n{t}");
        t
    }
}

/// `info --json`'s weight files.
fn info_files(json: &str) -> Vec<PathBuf> {
    let start = json.find('{').expect("JSON on stdout");
    let v: serde_json::Value = serde_json::from_str(&json[start..]).expect("info --json");
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| PathBuf::from(f.as_str().unwrap()))
        .collect()
}

fn stdout_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn image() -> String {
    root()
        .join("tests/fixtures/images/files/gray.png")
        .display()
        .to_string()
}

/// Relative symlink target of a snapshot entry, as huggingface_hub writes it.
fn link(p: &Path) -> PathBuf {
    std::fs::read_link(p).unwrap_or_else(|e| panic!("{} is not a symlink: {e}", p.display()))
}

#[test]
fn first_download_fills_the_standard_cache_and_a_second_run_is_offline() {
    let hub = MockHub::start();
    let env = Env::new(&hub);
    let o = env.run(&["info", "--json", "--model", "org/tiny"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    // Without a terminal a download says so in plain lines.
    assert!(
        err.contains("downloading org/tiny model.safetensors (84.6 kB)")
            && err.contains("downloaded org/tiny model.safetensors"),
        "{err}"
    );

    // The cache layout huggingface_hub reads.
    let repo = env.cache().join("models--org--tiny");
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        MAIN
    );
    let snap = repo.join("snapshots").join(MAIN);
    let weights = fixture_bytes("dinov2/model.safetensors");
    let w_sha = sha256(&weights);
    assert_eq!(
        link(&snap.join("model.safetensors")),
        PathBuf::from(format!("../../blobs/{w_sha}"))
    );
    assert_eq!(
        std::fs::read(repo.join("blobs").join(&w_sha)).unwrap(),
        weights
    );
    let cfg_etag = sha256(&fixture_bytes("dinov2/config.json"))[..40].to_string();
    assert_eq!(
        link(&snap.join("config.json")),
        PathBuf::from(format!("../../blobs/{cfg_etag}"))
    );
    assert!(snap.join("preprocessor_config.json").is_file());
    // Files the repository does not have are remembered as absent, as huggingface_hub does.
    for absent in ["tokenizer.json", "modules.json"] {
        assert!(
            repo.join(".no_exist").join(MAIN).join(absent).is_file(),
            "{absent}"
        );
    }
    let files = info_files(&stdout_of(&o));
    assert_eq!(files, vec![snap.join("model.safetensors")]);
    // hf-hub's request sequence: a 1-byte probe for the metadata, then the body; the LFS file
    // through the CDN redirect.
    let seen = hub.seen();
    assert!(
        seen.iter()
            .any(|s| s.url == "/org/tiny/resolve/main/config.json"
                && s.range.as_deref() == Some("bytes=0-0")),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|s| s.url == format!("/cdn/{w_sha}") && s.range.as_deref() == Some("bytes=0-")),
        "{seen:?}"
    );
    assert!(
        seen.iter().all(|s| s.auth.is_none()),
        "no token was given: {seen:?}"
    );

    python_reads_the_cache(&env.cache(), &snap);

    // Embeddings from the Hub id, online (the cache answers: no request), offline (no request),
    // and from the same files as a local directory: byte-identical.
    let out = env.dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let embed = |name: &str, model: &str, extra: &[(&'static str, &'static str)]| {
        let p = out.join(name);
        env.ok(
            &[
                "embed",
                "--model",
                model,
                "--images",
                &image(),
                "--out",
                p.to_str().unwrap(),
            ],
            extra,
        );
        std::fs::read(&p).unwrap()
    };
    let before = hub.seen().len();
    let online = embed("online.safetensors", "org/tiny", &[]);
    assert_eq!(
        hub.seen().len(),
        before,
        "a complete cache is used as it is"
    );
    let offline = embed(
        "offline.safetensors",
        "org/tiny",
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert_eq!(
        hub.seen().len(),
        before,
        "HF_HUB_OFFLINE=1 sends no request"
    );
    assert_eq!(online, offline);
    let local = embed("local.safetensors", snap.to_str().unwrap(), &[]);
    assert_eq!(
        online, local,
        "the Hub path embeds as the local directory does"
    );
    let o = env.run(
        &["info", "--json", "--model", "org/tiny"],
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert!(o.status.success(), "{}", text(&o));
    let off_files = info_files(&stdout_of(&o));
    assert_eq!(sha256(&std::fs::read(&off_files[0]).unwrap()), w_sha);
    assert_eq!(hub.seen().len(), before);
}

/// huggingface_hub (Python) finds the files bindscope downloaded and sees a clean cache.
fn python_reads_the_cache(cache: &Path, snap: &Path) {
    let Ok(python) = std::env::var("BINDSCOPE_PYTHON") else {
        eprintln!(
            "note: BINDSCOPE_PYTHON unset: huggingface_hub's reading of the cache not checked"
        );
        return;
    };
    let script = r#"
import sys, json
from huggingface_hub import try_to_load_from_cache, scan_cache_dir, __version__
from huggingface_hub.file_download import _CACHED_NO_EXIST
cache = sys.argv[1]
info = scan_cache_dir(cache)
repos = [(r.repo_id, r.repo_type, sorted(r.refs), [rev.commit_hash for rev in r.revisions],
          sorted(f.file_name for rev in r.revisions for f in rev.files)) for r in info.repos]
print(json.dumps({
    "version": __version__,
    "config": try_to_load_from_cache("org/tiny", "config.json", cache_dir=cache),
    "weights": try_to_load_from_cache("org/tiny", "model.safetensors", cache_dir=cache),
    "tokenizer_absent": try_to_load_from_cache("org/tiny", "tokenizer.json", cache_dir=cache) is _CACHED_NO_EXIST,
    "warnings": [str(w) for w in info.warnings],
    "repos": repos,
}))
"#;
    let o = Command::new(&python)
        .args(["-c", script, cache.to_str().unwrap()])
        .output()
        .expect("runs BINDSCOPE_PYTHON");
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    eprintln!("huggingface_hub {} read the cache", v["version"]);
    assert_eq!(
        v["config"],
        snap.join("config.json").to_str().unwrap(),
        "{v}"
    );
    assert_eq!(
        v["weights"],
        snap.join("model.safetensors").to_str().unwrap(),
        "{v}"
    );
    assert_eq!(v["tokenizer_absent"], true, "{v}");
    assert_eq!(v["warnings"], serde_json::json!([]), "{v}");
    assert_eq!(
        v["repos"],
        serde_json::json!([[
            "org/tiny",
            "model",
            ["main"],
            [MAIN],
            [
                "config.json",
                "model.safetensors",
                "preprocessor_config.json"
            ]
        ]]),
        "{v}"
    );
}

#[test]
fn a_revision_picks_its_own_files() {
    let hub = MockHub::start();
    let env = Env::new(&hub);
    let sha_of = |json: &str| sha256(&std::fs::read(&info_files(json)[0]).unwrap());
    let main_sha = sha256(&fixture_bytes("dinov2/model.safetensors"));
    let v2_sha = sha256(&fixture_bytes("dinov2_registers/model.safetensors"));
    assert_ne!(main_sha, v2_sha);

    let o = env.ok_stdout(&["info", "--json", "--model", "org/tiny@v2"], &[]);
    assert_eq!(sha_of(&o), v2_sha);
    let repo = env.cache().join("models--org--tiny");
    assert_eq!(std::fs::read_to_string(repo.join("refs/v2")).unwrap(), V2);
    assert!(!repo.join("refs/main").exists(), "only v2 was asked for");
    assert!(
        hub.seen()
            .iter()
            .any(|s| s.url == "/org/tiny/resolve/v2/config.json"),
        "{:?}",
        hub.seen()
    );
    // A commit sha as the revision; then both offline, from the cache.
    let pinned = format!("org/tiny@{MAIN}");
    assert_eq!(
        sha_of(&env.ok_stdout(&["info", "--json", "--model", &pinned], &[])),
        main_sha
    );
    let offline = [("HF_HUB_OFFLINE", "1")];
    let before = hub.seen().len();
    assert_eq!(
        sha_of(&env.ok_stdout(&["info", "--json", "--model", "org/tiny@v2"], &offline)),
        v2_sha
    );
    assert_eq!(
        sha_of(&env.ok_stdout(&["info", "--json", "--model", &pinned], &offline)),
        main_sha
    );
    assert_eq!(hub.seen().len(), before);
    // The default branch was never downloaded: offline it is not there, and the error says how
    // to get it.
    let e = env.fails(&["info", "--model", "org/tiny"], &offline);
    assert!(
        e.contains("HF_HUB_OFFLINE") && e.contains("huggingface-cli download org/tiny"),
        "{e}"
    );
    // A revision the Hub does not have.
    let e = env.fails(&["info", "--model", "org/tiny@nope"], &[]);
    assert!(
        e.contains("revision 'nope' of model 'org/tiny' not found on the Hub")
            && e.contains("--model org/tiny@<revision>"),
        "{e}"
    );
}

#[test]
fn unknown_and_gated_repositories_say_what_to_do() {
    let hub = MockHub::start();
    let env = Env::new(&hub);
    let e = env.fails(&["info", "--model", "org/missing"], &[]);
    assert!(
        e.contains("model 'org/missing' not found on the Hub")
            && e.contains(&hub.url)
            && e.contains("HF_TOKEN"),
        "{e}"
    );
    let e = env.fails(&["info", "--model", "org/gated"], &[]);
    assert!(
        e.contains("'org/gated' is a gated repository")
            && e.contains(&format!("{}/org/gated", hub.url))
            && e.contains("set HF_TOKEN to a token of that account"),
        "{e}"
    );
    let e = env.fails(
        &["info", "--model", "org/gated"],
        &[("HF_TOKEN", "hf_wrong")],
    );
    assert!(e.contains("the token given (HF_TOKEN"), "{e}");
    // Nothing of the failed repositories is left in the cache.
    for r in ["models--org--missing", "models--org--gated"] {
        assert!(
            !env.cache().join(r).join("snapshots").exists(),
            "{r} left a snapshot"
        );
    }
    // With the granted token the gated model downloads; the token is sent as a bearer token.
    env.ok(&["info", "--model", "org/gated"], &[("HF_TOKEN", TOKEN)]);
    assert!(
        hub.seen()
            .iter()
            .any(|s| s.auth.as_deref() == Some(&format!("Bearer {TOKEN}"))),
        "{:?}",
        hub.seen()
    );
}

#[test]
fn an_interrupted_download_leaves_no_corrupt_file_and_a_rerun_completes() {
    let hub = MockHub::start();
    let env = Env::new(&hub);
    let weights = fixture_bytes("dinov2/model.safetensors");
    let w_sha = sha256(&weights);
    hub.break_lfs_downloads(true);
    let e = env.fails(&["info", "--model", "org/tiny"], &[]);
    assert!(
        e.contains("downloading model.safetensors of 'org/tiny'")
            && e.contains("run the command again to resume"),
        "{e}"
    );
    let repo = env.cache().join("models--org--tiny");
    assert!(
        !repo.join("blobs").join(&w_sha).exists(),
        "a partial blob under its final name"
    );
    assert!(
        !repo
            .join("snapshots")
            .join(MAIN)
            .join("model.safetensors")
            .exists(),
        "a snapshot entry for a partial download"
    );
    // An offline run does not take the partial file for the model.
    let e = env.fails(&["info", "--model", "org/tiny"], &[("HF_HUB_OFFLINE", "1")]);
    assert!(e.contains("not found"), "{e}");

    hub.break_lfs_downloads(false);
    let o = env.ok_stdout(&["info", "--json", "--model", "org/tiny"], &[]);
    let files = info_files(&o);
    assert_eq!(std::fs::read(&files[0]).unwrap(), weights);
    assert_eq!(
        std::fs::read(repo.join("blobs").join(&w_sha)).unwrap(),
        weights
    );
    // The rerun resumed where the broken transfer stopped.
    assert!(
        hub.seen().iter().any(|s| s.url == format!("/cdn/{w_sha}")
            && s.range.as_deref() == Some("bytes=10000-")),
        "{:?}",
        hub.seen()
    );
}

/// The `jer` arguments of a quick run on the `jer` fixture.
const JER: &[&str] = &[
    "jer",
    "--images",
    "3",
    "--directions",
    "4",
    "--size",
    "16x16",
    "--output",
    "summary",
    "--chunk",
    "2",
];

/// Item 9: `config.json` records the commit the binary was built from even when it runs inside
/// another git repository (whose HEAD it must not take).
#[test]
fn provenance_is_the_build_commit_inside_another_repository() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other-project");
    std::fs::create_dir_all(&other).unwrap();
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(&other)
            .output();
        o.ok().filter(|o| o.status.success())
    };
    if git(&["init", "-q"]).is_none() {
        eprintln!("note: no git: provenance inside another repository not checked");
        return;
    }
    std::fs::write(other.join("f"), "x").unwrap();
    git(&["add", "f"]).expect("git add");
    git(&["commit", "-q", "-m", "other"]).expect("git commit");
    let other_head = git(&["rev-parse", "HEAD"])
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap();
    let model = crate::common::fixture("jer");
    let mut args = JER.to_vec();
    args.extend(["--model", &model, "--out", "run"]);
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(&args)
        .current_dir(&other)
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(other.join("run/config.json")).unwrap())
            .unwrap();
    assert_ne!(config["git_commit"], other_head.as_str(), "{config}");
    let source_head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match source_head {
        Some(head) => assert_eq!(config["git_commit"], head.as_str(), "{config}"),
        None => assert_eq!(config["git_commit"], "unknown", "{config}"),
    }
}

/// Item 14: without a terminal (stderr is a pipe here) a run reports progress as plain lines,
/// one per image with the count, and a closing line.
#[test]
fn progress_without_a_terminal_is_a_line_per_unit_of_work() {
    let dir = tempfile::tempdir().unwrap();
    let model = crate::common::fixture("jer");
    let out = dir.path().join("run");
    let mut args = JER.to_vec();
    args.extend(["--model", &model, "--out", out.to_str().unwrap()]);
    let o = experiments(&args, &[("HF_HUB_OFFLINE", "1")]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("images 1/3 (33%), elapsed "), "{err}");
    assert!(err.contains("images 3/3 (100%), elapsed "), "{err}");
    assert!(err.contains("images 3/3 done in "), "{err}");
}
