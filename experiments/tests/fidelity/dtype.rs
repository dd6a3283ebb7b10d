//! `--dtype keep` and load errors through the CLI (issue "Fidelity and hardening", items 5 and
//! 6): `info` reports the dtype the weights were loaded in (from the loaded model, in words),
//! `embed --dtype keep` runs on f16 / bf16 checkpoints and agrees with the f32 run to the
//! dtype's precision, and a broken checkpoint is refused with its own key names.

use std::path::Path;
use std::process::Command;

use crate::common::{bert_with_tokenizer, clip_with_processor, fixture_copy, root};

fn exec(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    (o.status.success(), crate::common::text(&o))
}

/// Rewrites `dir/model.safetensors` with every float32 tensor stored as bfloat16 (`bf16`) or
/// float16.
fn to_half(dir: &Path, bf16: bool) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(k, t)| {
            if t.dtype() != safetensors::Dtype::F32 {
                return (k, t.dtype(), t.shape().to_vec(), t.data().to_vec());
            }
            let v = t
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            let (d, data): (_, Vec<u8>) = if bf16 {
                (
                    safetensors::Dtype::BF16,
                    v.flat_map(|x| burn::tensor::bf16::from_f32(x).to_le_bytes())
                        .collect(),
                )
            } else {
                (
                    safetensors::Dtype::F16,
                    v.flat_map(|x| burn::tensor::f16::from_f32(x).to_le_bytes())
                        .collect(),
                )
            };
            (k, d, t.shape().to_vec(), data)
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(k, d, s, b)| {
            (
                k.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// Whether the test device (`BURN_DEVICE`, which the binary reads too) computes in bf16 / f16
/// (the CPU: both; wgpu on lavapipe: f16 only).
fn runs_in(bf16: bool) -> bool {
    let dtype = if bf16 {
        burn::tensor::DType::BF16
    } else {
        burn::tensor::DType::F16
    };
    bindscope_core::device::test_device().supports_dtype(dtype)
}

/// `--dtype keep` on a device without the checkpoint's dtype: refused, naming the fix.
fn assert_refused(ok: bool, text: &str, dtype: &str) {
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!("the weights are {dtype} and device"))
            && text.contains("does not compute in it (use --dtype f32)")
            && !text.contains("panicked"),
        "{text}"
    );
}

fn info_json(model: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["info", "--model", model, "--json"];
    args.extend_from_slice(extra);
    let (ok, text) = exec(&args);
    assert!(ok, "{text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn info_reports_the_dtype_the_weights_were_loaded_in() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture_copy("clip", tmp.path());
    // bf16 where the device computes in it, else f16 (and bf16 must be refused).
    let bf16 = runs_in(true);
    let half = if bf16 { "bfloat16" } else { "float16" };
    if !bf16 {
        to_half(&dir, true);
        let model = dir.display().to_string();
        let (ok, text) = exec(&["info", "--model", &model, "--dtype", "keep"]);
        assert_refused(ok, &text, "bfloat16");
        fixture_copy("clip", tmp.path());
    }
    to_half(&dir, bf16);
    let model = dir.display().to_string();

    let kept = info_json(&model, &["--dtype", "keep"]);
    assert_eq!(kept["file_dtypes"], serde_json::json!([half]), "{kept}");
    assert_eq!(kept["loaded_dtype"], half, "{kept}");
    for tower in kept["towers"].as_array().unwrap() {
        assert_eq!(tower["info"]["dtype"], half, "{kept}");
    }
    let cast = info_json(&model, &[]);
    assert_eq!(cast["loaded_dtype"], "float32", "{cast}");
    // An f32 checkpoint kept is f32.
    let f32 = info_json(&crate::common::fixture("clip"), &["--dtype", "keep"]);
    assert_eq!(f32["loaded_dtype"], "float32", "{f32}");
    assert_eq!(f32["file_dtypes"], serde_json::json!(["float32"]), "{f32}");
}

/// The embeddings of a `.jsonl` written by `embed`.
fn embeddings(path: &Path) -> Vec<Vec<f32>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

/// `max |a − b|` over every embedding, and the largest `|a|`.
fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f32, f32) {
    assert_eq!(a.len(), b.len());
    let mut d = 0f32;
    let mut s = 0f32;
    for (x, y) in a.iter().zip(b) {
        for (p, q) in x.iter().zip(y) {
            d = d.max((p - q).abs());
            s = s.max(p.abs());
        }
    }
    (d, s)
}

/// `embed` with `model` on `input` (`--images DIR` or `--texts FILE`), f32 and kept.
fn embed_both(model: &str, input: [&str; 2], tmp: &Path) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let mut outs = Vec::new();
    for (i, dtype) in ["f32", "keep"].iter().enumerate() {
        let out = tmp.join(format!("{i}.jsonl"));
        let out_s = out.display().to_string();
        let (ok, text) = exec(&[
            "embed", "--model", model, input[0], input[1], "--out", &out_s, "--dtype", dtype,
        ]);
        assert!(ok, "--dtype {dtype}: {text}");
        outs.push(embeddings(&out));
    }
    let keep = outs.pop().unwrap();
    (outs.pop().unwrap(), keep)
}

#[test]
fn embed_dtype_keep_runs_on_f16_and_bf16_checkpoints() {
    // Tolerance: 16 unit roundoffs of the dtype times max(1, max |embedding|), as
    // `models/tests/dtype_keep.rs` derives it from transformers' own f16 / bf16 deviation (4×
    // on a GPU backend, as there). A dtype the device does not compute in must be refused.
    let gpu = if bindscope_core::device::testing_on_accelerator() {
        4.0
    } else {
        1.0
    };
    for (bf16, u) in [(false, gpu * 2f32.powi(-11)), (true, gpu * 2f32.powi(-8))] {
        let tmp = tempfile::tempdir().unwrap();
        if !runs_in(bf16) {
            let clip = clip_with_processor(&tmp.path().join("clip"));
            to_half(Path::new(&clip), bf16);
            let out = tmp.path().join("o.jsonl").display().to_string();
            let src = root().join("tests/fixtures/images/files/gray.png");
            let (ok, text) = exec(&[
                "embed",
                "--model",
                &clip,
                "--images",
                &src.display().to_string(),
                "--out",
                &out,
                "--dtype",
                "keep",
            ]);
            assert_refused(ok, &text, if bf16 { "bfloat16" } else { "float16" });
            assert!(!Path::new(&out).exists());
            continue;
        }
        let images = tmp.path().join("images");
        std::fs::create_dir(&images).unwrap();
        for f in ["gray.png", "rgb16.png", "cmyk.jpg", "palette.png"] {
            let src = root().join("tests/fixtures/images/files").join(f);
            std::fs::copy(src, images.join(f)).unwrap();
        }
        let images = images.display().to_string();
        let clip = clip_with_processor(&tmp.path().join("clip"));
        to_half(Path::new(&clip), bf16);
        let (f32_run, kept) = embed_both(&clip, ["--images", &images], tmp.path());
        let (d, s) = worst(&f32_run, &kept);
        assert!(
            d <= 16.0 * u * s.max(1.0),
            "CLIP bf16={bf16}: {d} (scale {s})"
        );

        let bert = bert_with_tokenizer(&tmp.path().join("bert"));
        to_half(Path::new(&bert), bf16);
        let texts = tmp.path().join("texts.txt");
        std::fs::write(
            &texts,
            "a red cube left of a blue sphere\na photo of a dog\n",
        )
        .unwrap();
        let texts = texts.display().to_string();
        let (f32_run, kept) = embed_both(&bert, ["--texts", &texts], tmp.path());
        let (d, s) = worst(&f32_run, &kept);
        assert!(
            d <= 16.0 * u * s.max(1.0),
            "BERT bf16={bf16}: {d} (scale {s})"
        );
    }
}

#[test]
fn a_broken_checkpoint_is_refused_in_its_own_terms() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture_copy("dinov2", tmp.path());
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .filter(|(k, _)| k != "layernorm.weight")
        .collect();
    let data = safetensors::serialize(kept, None).unwrap();
    std::fs::write(&path, data).unwrap();
    let model = dir.display().to_string();
    let (ok, text) = exec(&["info", "--model", &model]);
    assert!(!ok, "{text}");
    assert!(text.contains("missing key: layernorm.weight"), "{text}");
    assert!(
        !text.contains("gamma") && !text.contains("panicked"),
        "{text}"
    );
}
