//! The `experiments` binary on the device `BURN_DEVICE` names, against the CPU: `devices`,
//! `info`, `embed` of images and texts, and `jer`. With `BURN_DEVICE` unset (or `cpu`) the
//! "other" device is the CPU again and the comparisons demand byte-identical numbers, which is
//! the determinism promise; on a GPU backend they use the tolerances below.
//!
//! ```text
//! BURN_DEVICE=wgpu cargo test -p experiments --features wgpu --test integration devices::
//! ```
//!
//! Tolerances on another backend, with what Mesa lavapipe (the software Vulkan driver CI runs)
//! gave on the real DINOv2-S/14 and all-MiniLM-L6-v2 checkpoints: embeddings differ from the
//! CPU by float rounding in another summation order (1.1e-5 on DINOv2 image embeddings of
//! magnitude up to 7, 1.6e-7 on MiniLM's unit-norm text embeddings), so 1e-4 absolute; JER
//! singular values go through a batched backward pass of the whole network before the SVD, which
//! amplifies rounding (9.2e-4 relative on DINOv2, the JER itself 1.8e-4), so 2e-3 relative.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{fixture, root, text};

fn scratch(name: &str) -> PathBuf {
    crate::common::scratch("dev", name)
}

/// The device under test: `BURN_DEVICE`, or the CPU.
fn device() -> String {
    bindscope_core::device::spec_from_env()
        .expect("BURN_DEVICE")
        .to_string()
}

fn on_cpu() -> bool {
    !bindscope_core::device::testing_on_accelerator()
}

/// Runs the binary on `device` (`--device` given explicitly, so `BURN_DEVICE` cannot leak in).
fn run_on(device: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_experiments"))
        .arg("--device")
        .arg(device)
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("BURN_DEVICE")
        .output()
        .expect("runs")
}

fn ok_on(device: &str, args: &[&str]) -> String {
    let o = run_on(device, args);
    let t = text(&o);
    assert!(
        o.status.success(),
        "experiments --device {device} {args:?} failed ({}):\n{t}",
        o.status
    );
    t
}

/// Absolute tolerance of an embedding entry against the CPU.
fn embed_tol() -> f32 {
    if on_cpu() { 0.0 } else { 1e-4 }
}

/// Relative tolerance of a singular value or a JER against the CPU.
fn jer_tol() -> f64 {
    if on_cpu() { 0.0 } else { 2e-3 }
}

fn read_embeddings(path: &Path) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap();
    let t = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let e = t.tensor("embeddings").unwrap();
    let [n, d] = e.shape() else {
        panic!("embeddings of shape {:?}", e.shape())
    };
    let v: Vec<f32> = e
        .data()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (0..*n).map(|i| v[i * d..(i + 1) * d].to_vec()).collect()
}

fn assert_close_rows(got: &[Vec<f32>], want: &[Vec<f32>], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: row count");
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: row {r} width");
        for (j, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                a.is_finite() && (a - b).abs() <= tol,
                "{what}: row {r} entry {j}: {} {a} vs cpu {b} (tolerance {tol})",
                device()
            );
        }
    }
}

#[test]
fn devices_lists_the_cpu_and_the_device_under_test() {
    let out = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .arg("devices")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let first = t.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("cpu ") && first.contains("burn flex"),
        "{t}"
    );
    let spec = device();
    assert!(
        t.lines().any(|l| l.starts_with(&format!("{spec} "))),
        "`devices` does not list {spec}, the device the tests run on:\n{t}"
    );
}

#[test]
fn a_missing_device_is_an_error_before_any_work() {
    let out = scratch("missing");
    let o = out.display().to_string();
    for spec in ["wgpu:7", "cuda:7", "tpu"] {
        let r = run_on(
            spec,
            &[
                "jer",
                "--model",
                &fixture("jer"),
                "--images",
                "1",
                "--directions",
                "2",
                "--size",
                "16x16",
                "--out",
                &o,
            ],
        );
        let t = text(&r);
        assert!(!r.status.success(), "--device {spec} ran:\n{t}");
        assert!(t.contains(spec), "the error must name '{spec}':\n{t}");
        assert!(!t.contains("panicked"), "a panic, not an error:\n{t}");
        assert!(
            t.contains("not available")
                || t.contains("needs bindscope built with")
                || t.contains("unknown device"),
            "{t}"
        );
        assert!(!out.exists(), "--device {spec} left {o} behind");
    }
}

#[test]
fn an_empty_burn_device_is_the_cpu_and_file_only_commands_ignore_the_device() {
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(["info", "--model", &fixture("jer")])
        .env("BURN_DEVICE", " ")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("device       cpu: CPU (burn flex)"),
        "{}",
        text(&o)
    );
    // `saber generate` computes nothing: a device this build or machine lacks does not stop it,
    // a name that is no device does.
    let out = scratch("saber");
    let o = out.display().to_string();
    let small = ["--independent", "2", "--chains", "2", "--n-max", "3"];
    let mut args = vec!["saber", "generate", "--out", &o];
    args.extend(small);
    let r = run_on("cuda:7", &args);
    assert!(r.status.success(), "{}", text(&r));
    assert!(out.join("saber.jsonl").is_file());
    let r = run_on("tpu", &["saber", "generate", "--out", &format!("{o}-2")]);
    assert!(
        !r.status.success() && text(&r).contains("unknown device 'tpu'"),
        "{}",
        text(&r)
    );
}

#[test]
fn info_runs_on_the_device() {
    let t = ok_on(&device(), &["info", "--model", &fixture("clip")]);
    assert!(t.contains("vision") && t.contains("2 layers"), "{t}");
}

#[test]
fn embed_images_and_texts_match_the_cpu() {
    let m = crate::common::clip_with_processor(&scratch("model"));
    let files = root().join("tests/fixtures/images/files");
    let images: Vec<String> = ["gray.png", "rgba.png"]
        .iter()
        .map(|f| files.join(f).display().to_string())
        .collect();
    let out = scratch("embed");
    std::fs::create_dir_all(&out).unwrap();

    let mut rows = Vec::new();
    for (i, dev) in ["cpu".to_string(), device()].iter().enumerate() {
        let path = out.join(format!("images-{i}.safetensors"));
        let p = path.display().to_string();
        let mut args = vec!["embed", "--model", &m, "--out", &p, "--images"];
        args.extend(images.iter().map(String::as_str));
        ok_on(dev, &args);
        rows.push(read_embeddings(&path));
    }
    assert_eq!(rows[0].len(), 2);
    assert_close_rows(&rows[1], &rows[0], embed_tol(), "image embeddings");

    // Texts through the tiny BERT fixture (vocabulary of 99) with a word-level tokenizer
    // written here, whose ids stay inside that vocabulary.
    let b = crate::common::bert_with_tokenizer(&scratch("bert"));
    let texts = out.join("texts.txt");
    std::fs::write(
        &texts,
        "a red cube left of a blue sphere\na photo of a dog\n",
    )
    .unwrap();
    let t = texts.display().to_string();
    let mut rows = Vec::new();
    for (i, dev) in ["cpu".to_string(), device()].iter().enumerate() {
        let path = out.join(format!("texts-{i}.safetensors"));
        let p = path.display().to_string();
        ok_on(dev, &["embed", "--model", &b, "--texts", &t, "--out", &p]);
        rows.push(read_embeddings(&path));
    }
    assert_eq!(rows[0].len(), 2);
    assert_ne!(rows[0][0], rows[0][1], "two texts, two embeddings");
    assert_close_rows(&rows[1], &rows[0], embed_tol(), "text embeddings");
}

fn jer_records(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("per_image.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn jer_matches_the_cpu() {
    let mut runs = Vec::new();
    for (i, dev) in ["cpu".to_string(), device()].iter().enumerate() {
        let out = scratch(&format!("jer-{i}"));
        let o = out.display().to_string();
        ok_on(
            dev,
            &[
                "jer",
                "--model",
                &fixture("jer"),
                "--images",
                "2",
                "--directions",
                "8",
                "--size",
                "32x32",
                "--out",
                &o,
            ],
        );
        runs.push(jer_records(&out));
    }
    let (cpu, dev) = (&runs[0], &runs[1]);
    assert_eq!(cpu.len(), 2);
    assert_eq!(dev.len(), 2);
    let rel = |a: f64, b: f64| (a - b).abs() / b.abs().max(1e-12);
    for (c, d) in cpu.iter().zip(dev) {
        assert_eq!(c["image"], d["image"]);
        let (c, d) = (&c["outputs"][0], &d["outputs"][0]);
        let (cs, ds) = (
            c["sigma"].as_array().unwrap(),
            d["sigma"].as_array().unwrap(),
        );
        assert_eq!(cs.len(), 8);
        assert_eq!(cs.len(), ds.len());
        for (a, b) in ds.iter().zip(cs) {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            assert!(
                rel(a, b) <= jer_tol(),
                "σ {a} on {} vs {b} on cpu (relative tolerance {})",
                device(),
                jer_tol()
            );
        }
        let (a, b) = (d["jer"].as_f64().unwrap(), c["jer"].as_f64().unwrap());
        assert!(rel(a, b) <= jer_tol(), "JER {a} vs cpu {b}");
    }
}
