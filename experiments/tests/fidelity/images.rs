//! `embed --images` on transparent images (issue "Fidelity and hardening", item 1): by default
//! transparency is composited over white as transformers 5.x's `convert_to_rgb` does, so a
//! transparent PNG embeds exactly like transformers' own RGB conversion of it
//! (`tests/fixtures/images/alpha_table/white.png`, written by transformers 5.24 from
//! `alpha_table/rgba.png`); `--alpha ignore` keeps transformers 4.x's dropped alpha.

use std::path::Path;
use std::process::Command;

use crate::common::root;

fn exec(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    (o.status.success(), crate::common::text(&o))
}

/// Embeds one image with the tiny CLIP fixture; `extra` are further flags.
fn embed(model: &str, image: &Path, out: &Path, extra: &[&str]) -> Vec<f32> {
    let image = image.display().to_string();
    let out_s = out.display().to_string();
    let mut args = vec![
        "embed", "--model", model, "--images", &image, "--out", &out_s,
    ];
    args.extend_from_slice(extra);
    let (ok, text) = exec(&args);
    assert!(ok, "{text}");
    let line: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(out)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    line["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn transparent_images_embed_as_transformers_5_composites_them() {
    let tmp = tempfile::tempdir().unwrap();
    let model = crate::common::clip_with_processor(&tmp.path().join("model"));
    let table = root().join("tests/fixtures/images/alpha_table");
    let default = embed(
        &model,
        &table.join("rgba.png"),
        &tmp.path().join("a.jsonl"),
        &[],
    );
    let white = embed(
        &model,
        &table.join("rgba.png"),
        &tmp.path().join("w.jsonl"),
        &["--alpha", "white"],
    );
    let reference = embed(
        &model,
        &table.join("white.png"),
        &tmp.path().join("r.jsonl"),
        &[],
    );
    assert_eq!(
        default, reference,
        "default --alpha vs transformers 5's convert_to_rgb"
    );
    assert_eq!(white, reference, "--alpha white");
    let ignored = embed(
        &model,
        &table.join("rgba.png"),
        &tmp.path().join("i.jsonl"),
        &["--alpha", "ignore"],
    );
    let diff = ignored
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        diff > 1e-3,
        "--alpha ignore changed nothing (max diff {diff})"
    );
}

#[test]
fn alpha_flag_is_documented_and_checked() {
    let (ok, help) = exec(&["embed", "--help"]);
    assert!(ok, "{help}");
    assert!(
        help.contains("--alpha")
            && help.contains("transformers 5")
            && help.contains("transformers 4"),
        "{help}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let texts = tmp.path().join("t.txt");
    std::fs::write(&texts, "a photo\n").unwrap();
    let out = tmp.path().join("o.jsonl");
    let (ok, text) = exec(&[
        "embed",
        "--model",
        &crate::common::fixture("bert"),
        "--texts",
        &texts.display().to_string(),
        "--alpha",
        "ignore",
        "--out",
        &out.display().to_string(),
    ]);
    assert!(!ok && text.contains("--alpha"), "{text}");
    let (ok, text) = exec(&[
        "embed", "--model", "m", "--images", "x.png", "--out", "o.jsonl", "--alpha", "black",
    ]);
    assert!(
        !ok && text.contains("black") && text.contains("white"),
        "{text}"
    );
    assert!(!out.exists());
}
