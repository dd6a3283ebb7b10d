//! `geb synth` → `geb train` → `geb eval` end to end on tiny models (the `dinov2` fixture as the
//! embedder, with a preprocessor config written here; the `geb_readout` fixture as the
//! decoder): a run stopped early and continued ends with the weights of an uninterrupted run,
//! evaluation writes every control's predictions and scores, and bad inputs are refused with
//! the item named and nothing written.

use crate::common::{fixture, root, scratch, text};
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_experiments"));
    c.current_dir(root());
    c
}

fn embedder(dir: &Path) -> PathBuf {
    let d = dir.join("dino");
    std::fs::create_dir_all(&d).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(Path::new(&fixture("dinov2")).join(f), d.join(f)).unwrap();
    }
    // DINOv2's processor (BitImageProcessor) at the fixture's 24-pixel input.
    std::fs::write(
        d.join("preprocessor_config.json"),
        r#"{"image_processor_type": "BitImageProcessor", "do_resize": true, "size": {"shortest_edge": 24}, "resample": 3, "do_center_crop": true, "crop_size": {"height": 24, "width": 24}, "do_rescale": true, "rescale_factor": 0.00392156862745098, "do_normalize": true, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225], "do_convert_rgb": true}"#,
    )
    .unwrap();
    d
}

fn synth(dir: &Path) -> PathBuf {
    let data = dir.join("data");
    let o = bin()
        .args([
            "geb",
            "synth",
            "--conversations",
            "16",
            "--items",
            "6",
            "--dev-items",
            "3",
        ])
        .args(["--image-size", "96", "--out"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    data
}

fn train(data: &Path, emb: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    train_from(data, "--embedder", emb, out, extra)
}

/// `geb train` with the embeddings named by `flag` (`--embedder` or `--embeddings`).
fn train_from(
    data: &Path,
    flag: &str,
    emb: &Path,
    out: &Path,
    extra: &[&str],
) -> std::process::Output {
    bin()
        .args(["geb", "train", "--data"])
        .arg(data)
        .args([
            "--decoder",
            &fixture("geb_readout"),
            "--mode",
            "visual-only",
            flag,
        ])
        .arg(emb)
        .args([
            "--micro-batch",
            "2",
            "--grad-accum",
            "2",
            "--adapter-hidden",
            "16",
        ])
        .args([
            "--lr",
            "1e-3",
            "--max-tokens",
            "200",
            "--checkpoint-every",
            "1",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// `geb eval` of the run `run` into `out`, with small bootstraps.
fn eval_run(run: &Path, out: &Path) -> std::process::Output {
    bin()
        .args(["geb", "eval", "--run"])
        .arg(run)
        .args([
            "--batch",
            "3",
            "--bootstrap",
            "100",
            "--paired-bootstrap",
            "100",
            "--out",
        ])
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn train_resume_and_eval_end_to_end() {
    let dir = scratch("geb-readout", "e2e");
    std::fs::create_dir_all(&dir).unwrap();
    let data = synth(&dir);
    let emb = embedder(&dir);
    let whole = dir.join("whole");
    let o = train(&data, &emb, &whole, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("4 steps over 16 sequences"),
        "{}",
        text(&o)
    );
    let log = std::fs::read_to_string(whole.join("train_log.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 4);
    // Stopped after 2 steps, then the same command continues from the checkpoint.
    let split = dir.join("split");
    let o = train(&data, &emb, &split, &["--max-steps", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = train(&data, &emb, &split, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("resuming at step 2"), "{}", text(&o));
    // Tensor by tensor, bit for bit (burn orders the header's metadata map differently from
    // run to run, so the files' bytes may differ).
    assert_eq!(
        tensors(&whole.join("readout.safetensors")),
        tensors(&split.join("readout.safetensors")),
        "a continued run ends with the uninterrupted run's weights"
    );
    assert_eq!(
        std::fs::read_to_string(split.join("train_log.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["loss"].as_f64().unwrap()
            })
            .collect::<Vec<_>>(),
        log.lines()
            .map(
                |l| serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"]
                    .as_f64()
                    .unwrap()
            )
            .collect::<Vec<_>>(),
        "the same loss curve"
    );

    let eval = dir.join("eval");
    let o = eval_run(&whole, &eval);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    for c in [
        "matched",
        "zero",
        "shuffled",
        "matched − zero",
        "matched − shuffled",
    ] {
        assert!(out.contains(c), "{c}: {out}");
    }
    for c in ["matched", "zero", "shuffled"] {
        let p = std::fs::read_to_string(eval.join(format!("predictions-{c}.jsonl"))).unwrap();
        assert_eq!(p.lines().count(), 6, "{c}");
        assert!(eval.join(format!("score-{c}/summary.json")).is_file());
    }
    assert!(eval.join("score-matched-vs-zero/summary.json").is_file());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(eval.join("eval.json")).unwrap()).unwrap();
    assert_eq!(report["conditions"].as_array().unwrap().len(), 3);
    let zero_gap = &report["conditions"][1]["gap"];
    assert!(
        zero_gap["matched_minus_control_pp"].is_f64() && zero_gap["ci95"].is_array(),
        "{report}"
    );

    // The same evaluation again: the finished report is printed, nothing is recomputed.
    let before = std::fs::metadata(eval.join("predictions-matched.jsonl"))
        .unwrap()
        .modified()
        .unwrap();
    let o = eval_run(&whole, &eval);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already finished"), "{}", text(&o));
    assert!(text(&o).contains("matched − zero"), "{}", text(&o));
    let after = std::fs::metadata(eval.join("predictions-matched.jsonl"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after, "a finished evaluation is not recomputed");

    // Interrupted after the matched and zero controls: only shuffled is answered again.
    let report_before = std::fs::read_to_string(eval.join("eval.json")).unwrap();
    std::fs::remove_file(eval.join("eval.json")).unwrap();
    std::fs::remove_file(eval.join("predictions-shuffled.jsonl")).unwrap();
    let o = eval_run(&whole, &eval);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("already finished"), "{}", text(&o));
    let kept = std::fs::metadata(eval.join("predictions-matched.jsonl"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, kept, "a written control is kept on resume");
    let shuffled = std::fs::read_to_string(eval.join("predictions-shuffled.jsonl")).unwrap();
    assert_eq!(shuffled.lines().count(), 6);
    assert_eq!(
        std::fs::read_to_string(eval.join("eval.json")).unwrap(),
        report_before,
        "the resumed evaluation reports what the uninterrupted one did"
    );

    // The mismatch control needs a question slot.
    let o = bin()
        .args(["geb", "eval", "--run"])
        .arg(&whole)
        .args(["--controls", "mismatch", "--out"])
        .arg(dir.join("eval-mismatch"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("mismatch control needs a VL-joint readout"),
        "{}",
        text(&o)
    );
    assert!(
        !dir.join("eval-mismatch").exists(),
        "a refused evaluation leaves nothing"
    );

    // The text-only control: trained without a slot, evaluated without controls by default.
    let to = dir.join("text-only");
    let o = bin()
        .args(["geb", "train", "--data"])
        .arg(&data)
        .args([
            "--decoder",
            &fixture("geb_readout"),
            "--mode",
            "visual-only",
            "--text-only",
        ])
        .args([
            "--micro-batch",
            "2",
            "--grad-accum",
            "2",
            "--max-tokens",
            "200",
            "--out",
        ])
        .arg(&to)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = bin()
        .args(["geb", "eval", "--run"])
        .arg(&to)
        .args(["--bootstrap", "0", "--paired-bootstrap", "0", "--out"])
        .arg(dir.join("eval-text-only"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        dir.join("eval-text-only/predictions-matched.jsonl")
            .is_file()
    );
    assert!(!dir.join("eval-text-only/predictions-zero.jsonl").exists());
    // The cache is keyed by the embedder's identity: another model in a directory of the same
    // name gets its own file.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let renamed = embedder(&other);
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(renamed.join("config.json")).unwrap())
            .unwrap();
    cfg["layer_norm_eps"] = serde_json::Value::from(1e-5);
    std::fs::write(renamed.join("config.json"), cfg.to_string()).unwrap();
    std::fs::write(
        renamed.join("preprocessor_config.json"),
        std::fs::read_to_string(emb.join("preprocessor_config.json"))
            .unwrap()
            .replace("0.485", "0.5"),
    )
    .unwrap();
    let o = train(&data, &renamed, &dir.join("renamed"), &["--max-steps", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    let caches: Vec<_> = std::fs::read_dir(data.join("embeddings"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("dino-") && n.ends_with(".image.safetensors"))
        .collect();
    assert_eq!(caches.len(), 2, "{caches:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_training_inputs_are_refused_by_name() {
    let dir = scratch("geb-readout", "bad");
    std::fs::create_dir_all(&dir).unwrap();
    let data = synth(&dir);
    let emb = embedder(&dir);
    // No embedder named.
    let o = bin()
        .args(["geb", "train", "--data"])
        .arg(&data)
        .args([
            "--decoder",
            &fixture("geb_readout"),
            "--mode",
            "visual-only",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--embedder MODEL, --embeddings FILE or --text-only"),
        "{}",
        text(&o)
    );
    // VL-joint with a vision encoder alone.
    let o = bin()
        .args(["geb", "train", "--data"])
        .arg(&data)
        .args([
            "--decoder",
            &fixture("geb_readout"),
            "--mode",
            "vl-joint",
            "--embedder",
        ])
        .arg(&emb)
        .output()
        .unwrap();
    assert!(text(&o).contains("needs --text-embedder"), "{}", text(&o));
    // Conversations with problems: each named, nothing trained.
    let bad = dir.join("bad");
    std::fs::create_dir_all(bad.join("images")).unwrap();
    std::fs::write(
        bad.join("train.json"),
        r#"[{"id": "a", "image": "x.png", "conversations": [{"from": "gpt", "value": "hi"}]},
            {"id": "b", "image": "x.png", "conversations": [{"from": "human", "value": "no image"}, {"from": "gpt", "value": "x"}]},
            {"id": "c", "image": "x.png", "conversations": [{"from": "human", "value": "<image>\n<image> twice"}, {"from": "gpt", "value": "x"}]}]"#,
    )
    .unwrap();
    let out = dir.join("never");
    let o = train(&bad, &emb, &out, &[]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("3 of 3 conversations are malformed"), "{t}");
    assert!(
        t.contains("conversation 0 (id \"a\"): no human turn"),
        "{t}"
    );
    assert!(t.contains("conversation 1 (id \"b\"): no `<image>`"), "{t}");
    assert!(
        t.contains("conversation 2 (id \"c\"): `<image>` appears 2 times"),
        "{t}"
    );
    assert!(!out.exists(), "nothing written");
    // An imported embedding file that does not cover the images.
    let partial = dir.join("partial.safetensors");
    bindscope_geb_file(&partial);
    let o = bin()
        .args(["geb", "train", "--data"])
        .arg(&data)
        .args([
            "--decoder",
            &fixture("geb_readout"),
            "--mode",
            "visual-only",
            "--embeddings",
        ])
        .arg(&partial)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("no embedding for 16 of the 16 ids"),
        "{}",
        text(&o)
    );
    assert!(!out.exists(), "nothing written");
    // A missing image.
    let broken = dir.join("broken");
    std::fs::create_dir_all(broken.join("images")).unwrap();
    std::fs::copy(data.join("train.json"), broken.join("train.json")).unwrap();
    let o = train(&broken, &emb, &out, &[]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("16 of 16 image(s) could not be read"),
        "{}",
        text(&o)
    );
    assert!(!out.exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An embedding file (safetensors `embeddings` + `ids` metadata) for ids that are not in the
/// data.
fn bindscope_geb_file(path: &Path) {
    let ids = ["elsewhere/1.png".to_string(), "elsewhere/2.png".to_string()];
    write_embeddings(path, &ids, 4, &[0.5; 8]);
}

#[test]
fn a_lora_run_resumes_and_saves_a_merged_readout_that_evaluates() {
    let dir = scratch("geb-readout", "lora");
    std::fs::create_dir_all(&dir).unwrap();
    let data = synth(&dir);
    let emb = embedder(&dir);
    let lora = ["--lora", "2"];
    let whole = dir.join("whole");
    let o = train(&data, &emb, &whole, &lora);
    assert!(o.status.success(), "{}", text(&o));
    let split = dir.join("split");
    let o = train(&data, &emb, &split, &["--lora", "2", "--max-steps", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = train(&data, &emb, &split, &lora);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("resuming at step 2"), "{}", text(&o));
    let saved = tensors(&whole.join("readout.safetensors"));
    assert_eq!(saved, tensors(&split.join("readout.safetensors")));
    // The saved readout is merged: the plain readout's keys, no factors.
    assert!(
        saved.keys().all(|k| !k.contains("lora")),
        "{:?}",
        saved.keys()
    );
    assert!(saved.contains_key("decoder.model.layers.0.self_attn.q_proj.weight"));
    // The recipe is recorded (α defaults to 2R) and differs from a full-finetuning run's.
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(whole.join("config.json")).unwrap()).unwrap();
    let recorded = &cfg["identity"]["run"]["recipe"]["lora"];
    assert_eq!(recorded["rank"], 2, "{cfg}");
    assert_eq!(recorded["alpha"], 4.0, "{cfg}");
    let eval = dir.join("eval");
    let o = eval_run(&whole, &eval);
    assert!(o.status.success(), "{}", text(&o));
    assert!(eval.join("predictions-matched.jsonl").is_file());
    // --lora-alpha needs --lora; a rank of 0 is refused.
    let o = train(&data, &emb, &dir.join("bad"), &["--lora-alpha", "8"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("--lora"), "{}", text(&o));
    let o = train(&data, &emb, &dir.join("bad"), &["--lora", "0"]);
    assert!(!o.status.success());
    for bad in [
        ["--lora-alpha", "-1"].as_slice(),
        &["--lora-alpha", "0"],
        &["--adapter-lr", "-1e-3"],
        &["--adapter-lr", "NaN"],
    ] {
        let args: Vec<&str> = if bad[0] == "--lora-alpha" {
            [&["--lora", "2"], bad].concat()
        } else {
            bad.to_vec()
        };
        let o = train(&data, &emb, &dir.join("bad"), &args);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            text(&o).contains("expected a finite number"),
            "{}",
            text(&o)
        );
    }
    assert!(!dir.join("bad").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every tensor of a safetensors file: name → (shape, bytes).
fn tensors(path: &Path) -> std::collections::BTreeMap<String, (Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(k, v)| (k, (v.shape().to_vec(), v.data().to_vec())))
        .collect()
}

#[test]
fn audit_finds_a_test_image_copied_into_train_and_a_wrong_manifest_hash() {
    let dir = scratch("geb-readout", "audit");
    std::fs::create_dir_all(&dir).unwrap();
    let data = synth(&dir);
    let audit = |extra: &[&str]| {
        bin()
            .args(["geb", "audit", "--data"])
            .arg(&data)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = audit(&[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("no overlaps"), "{}", text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("audit.json")).unwrap()).unwrap();
    assert_eq!(report["images"]["train"], 16);
    // A test image re-saved as a training image: the same pixels, whatever the file.
    let img = image::open(data.join("images/test/000000.png")).unwrap();
    img.save(data.join("images/train/000005.png")).unwrap();
    let o = audit(&[]);
    let t = text(&o);
    assert!(t.contains("train-test  exact    1"), "{t}");
    assert!(
        t.contains("exact train/train/000005.png ~ test/test/000000.png"),
        "{t}"
    );
    assert!(t.contains("overlaps found"), "{t}");
    // A manifest line whose sha256 is not its file's.
    let m = std::fs::read_to_string(data.join("dev.jsonl")).unwrap();
    let mut lines: Vec<serde_json::Value> = m
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let id = lines[0]["id"].as_str().unwrap().to_string();
    lines[0]["sha256"] = serde_json::Value::from("0".repeat(64));
    let text_out: String = lines.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(data.join("dev.jsonl"), text_out).unwrap();
    let o = audit(&[]);
    assert!(
        text(&o).contains(&format!(
            "1 manifest items whose sha256 is not their file's: dev/{id}"
        )),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each step's loss of a run's `train_log.jsonl`.
fn losses(run: &Path) -> Vec<f64> {
    std::fs::read_to_string(run.join("train_log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"]
                .as_f64()
                .unwrap()
        })
        .collect()
}

/// Writes `rows` (`[ids.len(), d]`) as an embedding file.
fn write_embeddings(path: &Path, ids: &[String], d: usize, rows: &[f32]) {
    let bytes: Vec<u8> = rows.iter().flat_map(|x| x.to_le_bytes()).collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![ids.len(), d], &bytes)
            .unwrap();
    let meta =
        std::collections::HashMap::from([("ids".to_string(), serde_json::to_string(ids).unwrap())]);
    std::fs::write(
        path,
        safetensors::serialize([("embeddings", view)], Some(meta)).unwrap(),
    )
    .unwrap();
}

/// `--standardize` removes each dimension's training mean and scale: a run on embeddings moved
/// by a per-dimension affine map `a·e + b` (a > 0) trains and evaluates as the run on `e` (the
/// same loss curve, the same predictions), its recorded statistics are `a·μ + b` and `a·σ`,
/// and without `--standardize` the same move changes the loss curve.
#[test]
fn standardize_is_fit_on_training_rows_and_applied_at_evaluation() {
    let dir = scratch("geb-readout", "standardize");
    std::fs::create_dir_all(&dir).unwrap();
    let data = synth(&dir);
    let emb = embedder(&dir);
    let std_flag = ["--standardize"];
    let raw = dir.join("raw");
    let o = train(&data, &emb, &raw, &std_flag);
    assert!(o.status.success(), "{}", text(&o));
    let eval_raw = dir.join("eval-raw");
    let o = eval_run(&raw, &eval_raw);
    assert!(o.status.success(), "{}", text(&o));

    // The cache now holds every split's image embeddings; move them.
    let cache = std::fs::read_dir(data.join("embeddings"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".image.safetensors"))
        .unwrap();
    let bytes = std::fs::read(&cache).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let ids: Vec<String> = serde_json::from_str(&meta.metadata().as_ref().unwrap()["ids"]).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor("embeddings").unwrap();
    let d = t.shape()[1];
    let e: Vec<f32> = t
        .data()
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let a = |j: usize| 0.5 + 0.25 * (j % 7) as f32;
    let b = |j: usize| 3.0 - 0.5 * (j % 5) as f32;
    let moved_rows: Vec<f32> = e
        .iter()
        .enumerate()
        .map(|(i, v)| a(i % d) * v + b(i % d))
        .collect();
    let moved = dir.join("moved.safetensors");
    write_embeddings(&moved, &ids, d, &moved_rows);

    let run = dir.join("moved");
    let o = train_from(&data, "--embeddings", &moved, &run, &std_flag);
    assert!(o.status.success(), "{}", text(&o));
    let (l0, l1) = (losses(&raw), losses(&run));
    assert_eq!(l0.len(), l1.len());
    for (x, y) in l0.iter().zip(&l1) {
        assert!((x - y).abs() <= 1e-4 * x.abs().max(1.0), "{l0:?} vs {l1:?}");
    }
    let record = |r: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(r.join("readout.json")).unwrap()).unwrap()
    };
    let floats = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (r0, r1) = (record(&raw), record(&run));
    assert_eq!(r0["standardizers"].as_array().unwrap().len(), 1);
    let (m0, s0) = (
        floats(&r0["standardizers"][0]["mean"]),
        floats(&r0["standardizers"][0]["scale"]),
    );
    let (m1, s1) = (
        floats(&r1["standardizers"][0]["mean"]),
        floats(&r1["standardizers"][0]["scale"]),
    );
    assert_eq!(m0.len(), d);
    for j in 0..d {
        let (aj, bj) = (f64::from(a(j)), f64::from(b(j)));
        assert!((aj * m0[j] + bj - m1[j]).abs() < 1e-4, "mean {j}");
        assert!(
            (aj * s0[j] - s1[j]).abs() < 1e-4 * s1[j].max(1.0),
            "scale {j}"
        );
    }
    assert_eq!(r0["run"]["standardize"], true);
    // Fitted on the distinct training images (population std), not on every cached row.
    let train_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("train.json")).unwrap()).unwrap();
    let train_images: std::collections::BTreeSet<&str> = train_json
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["image"].as_str().unwrap())
        .collect();
    let stats = |keep: &dyn Fn(&str) -> bool| -> (Vec<f64>, Vec<f64>) {
        let rows: Vec<&[f32]> = ids
            .iter()
            .zip(e.chunks(d))
            .filter(|(id, _)| keep(id))
            .map(|(_, r)| r)
            .collect();
        let n = rows.len() as f64;
        let mean: Vec<f64> = (0..d)
            .map(|j| rows.iter().map(|r| f64::from(r[j])).sum::<f64>() / n)
            .collect();
        let sd = (0..d)
            .map(|j| {
                (rows
                    .iter()
                    .map(|r| (f64::from(r[j]) - mean[j]).powi(2))
                    .sum::<f64>()
                    / n)
                    .sqrt()
            })
            .collect();
        (mean, sd)
    };
    let (want_m, want_s) = stats(&|id| train_images.contains(id));
    assert_eq!(
        train_images.len() + 6,
        ids.len(),
        "the cache also holds the test images"
    );
    for j in 0..d {
        assert!(
            (m0[j] - want_m[j]).abs() < 1e-5 * want_m[j].abs().max(1.0),
            "mean {j}"
        );
        assert!(
            (s0[j] - want_s[j]).abs() < 1e-5 * want_s[j].max(1.0),
            "scale {j}"
        );
    }
    let (all_m, _) = stats(&|_| true);
    assert!(
        (0..d).any(|j| (all_m[j] - m0[j]).abs() > 1e-4),
        "the test rows would move the mean"
    );

    // Evaluation applies the stored statistics: the moved run on moved embeddings answers as
    // the raw run on raw ones, under every control.
    let eval_moved = dir.join("eval-moved");
    let o = eval_run(&run, &eval_moved);
    assert!(o.status.success(), "{}", text(&o));
    for c in ["matched", "zero", "shuffled"] {
        let answers = |e: &Path| -> Vec<String> {
            std::fs::read_to_string(e.join(format!("predictions-{c}.jsonl")))
                .unwrap()
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    v["prediction"].to_string()
                })
                .collect()
        };
        assert_eq!(answers(&eval_raw), answers(&eval_moved), "{c}");
    }

    // Without --standardize the move shows (the invariance above is the flag's doing), and the
    // run's record has no standardisation.
    let plain_raw = dir.join("plain-raw");
    let o = train(&data, &emb, &plain_raw, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let plain = dir.join("plain");
    let o = train_from(&data, "--embeddings", &moved, &plain, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let (l2, l3) = (losses(&plain_raw), losses(&plain));
    assert!(
        l2.iter().zip(&l3).any(|(x, y)| (x - y).abs() > 1e-3),
        "{l2:?} vs {l3:?}"
    );
    let r2 = record(&plain);
    assert!(r2.get("standardizers").is_none() && r2["run"].get("standardize").is_none());

    // A --standardize record without its statistics is refused, not evaluated raw.
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    for f in ["readout.safetensors", "config.json"] {
        std::fs::copy(run.join(f), broken.join(f)).unwrap();
    }
    let mut r = r1.clone();
    r.as_object_mut().unwrap().remove("standardizers");
    std::fs::write(broken.join("readout.json"), r.to_string()).unwrap();
    let o = eval_run(&broken, &dir.join("eval-broken"));
    assert!(!o.status.success());
    assert!(text(&o).contains("a --standardize run"), "{}", text(&o));
    assert!(!dir.join("eval-broken").exists(), "nothing written");
    // The text-only control has no embedding to standardise.
    let o = bin()
        .args(["geb", "train", "--data"])
        .arg(&data)
        .args([
            "--decoder",
            &fixture("geb_readout"),
            "--mode",
            "visual-only",
        ])
        .args(["--text-only", "--standardize", "--out"])
        .arg(dir.join("text"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("--standardize"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--device cpu,cpu`: data-parallel training over two devices (here two copies on the CPU)
/// ends with the one-device run's weights, bit for bit; too few micro-batches for the devices,
/// and several devices for a command that does not train, are refused before any work.
#[test]
fn data_parallel_training_gives_the_one_device_weights() {
    let dir = scratch("geb-readout", "data-parallel");
    std::fs::create_dir_all(&dir).unwrap();
    let data = synth(&dir);
    let emb = embedder(&dir);
    // Two micro-batches per step (`train`'s --grad-accum 2): one on each device.
    let (one, two) = (dir.join("one"), dir.join("two"));
    let o = train(&data, &emb, &one, &["--device", "cpu"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = train(&data, &emb, &two, &["--device", "cpu,cpu"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        tensors(&one.join("readout.safetensors")),
        tensors(&two.join("readout.safetensors"))
    );
    assert_eq!(losses(&one), losses(&two));
    let bad = dir.join("bad");
    let o = train(&data, &emb, &bad, &["--device", "cpu,cpu,cpu"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("--grad-accum is 2"), "{}", text(&o));
    assert!(!bad.exists(), "nothing written");
    let o = bin()
        .args(["geb", "eval", "--device", "cpu,cpu", "--run"])
        .arg(&one)
        .arg("--out")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("several devices"), "{}", text(&o));
    assert!(!bad.exists(), "nothing written");
    // A stray comma does not add a CPU device.
    let o = train(&data, &emb, &bad, &["--device", "cpu,"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("an empty device"), "{}", text(&o));
    assert!(!bad.exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&dir);
}
