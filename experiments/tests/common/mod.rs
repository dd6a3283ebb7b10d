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

/// A fresh (removed, not created) scratch path `bindscope-<tag>-<pid>-<name>` under Cargo's
/// per-target scratch directory (`CARGO_TARGET_TMPDIR`, inside `target/`), so test runs leave
/// nothing in the system's temp dir.
pub fn scratch(tag: &str, name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bindscope-{tag}-{}-{name}", std::process::id()));
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

/// A copy of the checkpoint `tests/fixtures/<name>` (`config.json`, `model.safetensors`) in
/// `dir`, for tests that add files next to it.
pub fn fixture_copy(name: &str, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(
            root().join("tests/fixtures").join(name).join(f),
            dir.join(f),
        )
        .unwrap();
    }
    dir.to_path_buf()
}

/// The checkpoint `tests/fixtures/<name>` in `dir` with the preprocessor config of
/// `tests/fixtures/images/<processor>`.
pub fn fixture_with_processor(name: &str, processor: &str, dir: &Path) -> String {
    let dir = fixture_copy(name, dir);
    std::fs::copy(
        root()
            .join("tests/fixtures/images")
            .join(processor)
            .join("preprocessor_config.json"),
        dir.join("preprocessor_config.json"),
    )
    .unwrap();
    dir.display().to_string()
}

/// A checkpoint directory at `dir`: the tiny CLIP fixture plus a CLIP preprocessor config.
pub fn clip_with_processor(dir: &Path) -> String {
    fixture_with_processor("clip", "clip", dir)
}

/// A checkpoint directory at `dir`: the tiny BERT fixture (vocabulary of 99) with
/// [`word_level_tokenizer`].
pub fn bert_with_tokenizer(dir: &Path) -> String {
    let dir = fixture_copy("bert", dir);
    std::fs::write(dir.join("tokenizer.json"), word_level_tokenizer()).unwrap();
    dir.display().to_string()
}

/// A BERT-style `tokenizer.json`: lower-casing, whitespace split, a word-level vocabulary with
/// ids below 99, `[CLS] … [SEP]`.
pub fn word_level_tokenizer() -> String {
    let words = [
        "a", "red", "cube", "left", "of", "blue", "sphere", "photo", "dog",
    ];
    let mut vocab = serde_json::Map::new();
    for (i, w) in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
        .iter()
        .chain(words.iter())
        .enumerate()
    {
        vocab.insert(w.to_string(), (i as u64).into());
    }
    let special = |id: u64, content: &str| {
        serde_json::json!({"id": id, "content": content, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true})
    };
    let tok =
        |t: &str, type_id: u64| serde_json::json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let seq =
        |s: &str, type_id: u64| serde_json::json!({"Sequence": {"id": s, "type_id": type_id}});
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, "[PAD]"), special(1, "[UNK]"), special(2, "[CLS]"), special(3, "[SEP]")],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [tok("[CLS]", 0), seq("A", 0), tok("[SEP]", 0)],
            "pair": [tok("[CLS]", 0), seq("A", 0), tok("[SEP]", 0), seq("B", 1), tok("[SEP]", 1)],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}
            }
        },
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    })
    .to_string()
}
