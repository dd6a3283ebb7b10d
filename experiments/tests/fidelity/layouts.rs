//! Checkpoint layouts through the CLI (issue #12, "follow the current transformers release"):
//! a standalone `SiglipVisionModel` / `CLIPVisionModel` saved by transformers 5 stores its keys
//! without the `vision_model.` prefix (`tests/fixtures/hf5_layouts/`, written by
//! `gen/hf5_layouts.py`); `info` and `embed` take it, and the same weights saved by
//! transformers 4.x (`transformers4/`) embed to the same vector. Parity with transformers is
//! checked in `models/tests/hf5_layouts.rs`.

use std::process::Command;

use crate::common::{fixture, fixture_with_processor, root};

fn exec(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        crate::common::text(&o),
    )
}

/// `num_params` of a fixture's reference (the transformers model's parameter count).
fn reference_num_params(name: &str) -> u64 {
    let path = root()
        .join("tests/fixtures")
        .join(name)
        .join("reference.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor("num_params").unwrap();
    i64::from_le_bytes(t.data()[..8].try_into().unwrap()) as u64
}

#[test]
fn info_reads_both_layouts_of_the_standalone_vision_towers() {
    for name in ["siglip_vision_model", "clip_vision_model"] {
        let fixture_name = format!("hf5_layouts/{name}");
        let params = reference_num_params(&fixture_name);
        for dir in [
            fixture_name.clone(),
            format!("{fixture_name}/transformers4"),
        ] {
            let model = fixture(&dir);
            let (ok, stdout, all) = exec(&["info", "--model", &model, "--json"]);
            assert!(ok, "{dir}: {all}");
            let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            let towers = v["towers"].as_array().unwrap();
            assert_eq!(towers.len(), 1, "{dir}: {stdout}");
            assert_eq!(towers[0]["tower"], "vision", "{dir}");
            assert_eq!(towers[0]["info"]["num_params"], params, "{dir}");
            assert_eq!(towers[0]["info"]["embed_dim"], 8, "{dir}");
        }
    }
}

#[test]
fn embed_gives_one_vector_for_both_layouts() {
    let tmp = tempfile::tempdir().unwrap();
    let image = root()
        .join("tests/fixtures/images/files/gray.png")
        .display()
        .to_string();
    let mut vectors = Vec::new();
    for (tag, dir) in [
        ("v5", "hf5_layouts/siglip_vision_model"),
        ("v4", "hf5_layouts/siglip_vision_model/transformers4"),
    ] {
        let model = fixture_with_processor(dir, "siglip", &tmp.path().join(tag));
        let out = tmp.path().join(format!("{tag}.jsonl"));
        let out_s = out.display().to_string();
        let (ok, _, all) = exec(&[
            "embed", "--model", &model, "--images", &image, "--out", &out_s,
        ]);
        assert!(ok, "{dir}: {all}");
        let text = std::fs::read_to_string(&out).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        let v: Vec<f64> = line["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(v.len(), 8, "{dir}");
        assert!(v.iter().any(|x| x.abs() > 1e-3), "{dir}: a real embedding");
        vectors.push(v);
    }
    assert_eq!(vectors[0], vectors[1], "same weights, same embedding");
}
