//! Every committed reference was made by the reference stack `tests/fixtures/requirements.txt`
//! pins: each fixture directory holding a reference (`*.safetensors` other than model weights)
//! has a `meta.json` (written by `gen/common.py::write_meta`) recording the transformers and
//! torch versions, and the transformers version is within the pinned range. A regenerated
//! fixture from another transformers major, or a reference without its versions, fails here.

use std::path::{Path, PathBuf};

/// `(lower bound, exclusive upper bound)` of `transformers>=A.B,<C` in requirements.txt, as
/// `(major, minor)` pairs.
fn pinned_transformers(root: &Path) -> ((u64, u64), (u64, u64)) {
    let path = root.join("requirements.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("transformers"))
        .unwrap_or_else(|| panic!("{}: no transformers requirement", path.display()));
    let spec = line.trim_start_matches("transformers");
    let mut lower = None;
    let mut upper = None;
    for part in spec.split(',').map(str::trim) {
        if let Some(v) = part.strip_prefix(">=") {
            lower = Some(major_minor(v));
        } else if let Some(v) = part.strip_prefix('<') {
            upper = Some(major_minor(v));
        }
    }
    match (lower, upper) {
        (Some(l), Some(u)) => (l, u),
        _ => panic!(
            "{}: expected transformers>=A.B,<C, got {line}",
            path.display()
        ),
    }
}

fn major_minor(v: &str) -> (u64, u64) {
    let mut it = v.trim().split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u64>()
            .unwrap_or(0)
    });
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Fixture directories (recursively) that hold a reference file.
fn reference_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut has_reference = false;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n != "gen" && n != "__pycache__")
            {
                reference_dirs(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "safetensors")
            && path.file_name().is_some_and(|n| n != "model.safetensors")
        {
            has_reference = true;
        }
    }
    if has_reference {
        out.push(dir.to_path_buf());
    }
}

#[test]
fn every_reference_records_the_pinned_transformers() {
    let root = crate::common::fixture("");
    let (lower, upper) = pinned_transformers(&root);
    assert!(lower < upper, "requirements.txt: empty transformers range");
    let mut dirs = Vec::new();
    reference_dirs(&root, &mut dirs);
    assert!(
        dirs.len() >= 10,
        "only {} fixture directories with references",
        dirs.len()
    );
    let mut problems = Vec::new();
    for dir in &dirs {
        let meta_path = dir.join("meta.json");
        let Ok(text) = std::fs::read_to_string(&meta_path) else {
            problems.push(format!("{}: no meta.json", dir.display()));
            continue;
        };
        let meta: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("{}: {e}", meta_path.display()));
                continue;
            }
        };
        for key in ["transformers", "torch"] {
            if !meta.get(key).is_some_and(serde_json::Value::is_string) {
                problems.push(format!("{}: no \"{key}\" version", meta_path.display()));
            }
        }
        if let Some(v) = meta.get("transformers").and_then(serde_json::Value::as_str) {
            let mm = major_minor(v);
            if !(lower <= mm && mm < upper) {
                problems.push(format!(
                    "{}: transformers {v}, requirements.txt pins >={}.{},<{}.{}",
                    meta_path.display(),
                    lower.0,
                    lower.1,
                    upper.0,
                    upper.1
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
