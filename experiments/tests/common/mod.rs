//! Helpers shared by the `experiments` CLI test files.

#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::Output;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `tests/fixtures/<name>` as a string argument.
pub fn fixture(name: &str) -> String {
    root()
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// A fresh (removed, not created) scratch path `bindscope-<tag>-<pid>-<name>` in the temp dir.
pub fn scratch(tag: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bindscope-{tag}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// stdout then stderr of a finished command.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A checkpoint directory at `dir`: the tiny CLIP fixture plus a CLIP preprocessor config.
pub fn clip_with_processor(dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(root().join("tests/fixtures/clip").join(f), dir.join(f)).unwrap();
    }
    std::fs::copy(
        root().join("tests/fixtures/images/clip/preprocessor_config.json"),
        dir.join("preprocessor_config.json"),
    )
    .unwrap();
    dir.display().to_string()
}
