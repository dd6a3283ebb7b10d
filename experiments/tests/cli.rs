//! End-to-end tests of the `experiments` binary on the committed tiny fixtures: run
//! directories, resume, refusal to overwrite another configuration, comparison tables, depth
//! profiles, argument errors, and `embed` outputs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{fixture, root};

fn scratch(name: &str) -> PathBuf {
    crate::common::scratch("cli", name)
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("runs")
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "experiments {args:?} failed:\n{text}");
    text
}

fn err(args: &[&str]) -> String {
    let o = run(args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !o.status.success(),
        "experiments {args:?} should have failed:\n{text}"
    );
    text
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

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

#[test]
fn jer_writes_a_run_directory_and_resumes() {
    let out = scratch("jer");
    let o = out.display().to_string();
    let model = fixture("jer");
    let mut args = JER.to_vec();
    args.extend(["--model", &model, "--out", &o]);
    ok(&args);
    for f in [
        "config.json",
        "results.json",
        "per_image.csv",
        "spectrum.csv",
        "per_image.jsonl",
        "spectrum.svg",
    ] {
        assert!(out.join(f).is_file(), "missing {f}");
    }
    let per_image = read(&out.join("per_image.csv"));
    assert_eq!(
        per_image.lines().count(),
        4,
        "header + 3 images:\n{per_image}"
    );
    let config: serde_json::Value = serde_json::from_str(&read(&out.join("config.json"))).unwrap();
    assert_eq!(config["identity"]["directions"], 4);
    assert_eq!(
        config["identity"]["weights_sha256"].as_str().unwrap().len(),
        64
    );
    assert!(config["crate_versions"]["burn"].is_string());

    // Interrupt after image 1: drop the last record (and a half-written line), re-run.
    let log = out.join("per_image.jsonl");
    let full = read(&log);
    let mut lines: Vec<&str> = full.lines().collect();
    let last = lines.pop().unwrap();
    std::fs::write(
        &log,
        format!("{}\n{}", lines.join("\n"), &last[..last.len() / 2]),
    )
    .unwrap();
    std::fs::remove_file(out.join("results.json")).unwrap();
    let text = ok(&args);
    assert!(text.contains("resuming: 2 of 3"), "{text}");
    assert_eq!(
        read(&out.join("per_image.csv")),
        per_image,
        "the resumed run must give the same numbers"
    );
}

#[test]
fn jer_refuses_a_directory_holding_another_configuration() {
    let out = scratch("jer-conflict");
    let o = out.display().to_string();
    let model = fixture("jer");
    let mut args = JER.to_vec();
    args.extend(["--model", &model, "--out", &o]);
    ok(&args);
    let before = read(&out.join("config.json"));
    let mut other = args.clone();
    other[4] = "3"; // --directions 3
    let text = err(&other);
    assert!(
        text.contains("another configuration") && text.contains("directions"),
        "{text}"
    );
    assert_eq!(
        read(&out.join("config.json")),
        before,
        "nothing may be overwritten"
    );
}

#[test]
fn jer_compares_models_and_profiles_depth() {
    let out = scratch("jer-compare");
    let o = out.display().to_string();
    let (a, b) = (fixture("jer"), fixture("vit"));
    let mut args = JER.to_vec();
    args.extend(["--depth", "--model", &a, &b, "--out", &o]);
    let text = ok(&args);
    assert!(text.contains("JER (mean±std)"), "{text}");
    let table = read(&out.join("comparison.csv"));
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(out.join("spectrum.svg").is_file());
    let depth_dir = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.join("depth.csv").is_file());
    let depth = read(
        &depth_dir
            .expect("a model directory with depth.csv")
            .join("depth.csv"),
    );
    // 3 images × 2 blocks + header.
    assert_eq!(depth.lines().count(), 7, "{depth}");
}

#[test]
fn jer_rejects_bad_arguments_with_clear_errors() {
    let model = fixture("jer");
    for (k, what) in [("1", "need 2 ≤ k"), ("17", "dimension 16")] {
        let mut args = JER.to_vec();
        args[4] = k;
        let o = scratch("bad").display().to_string();
        args.extend(["--model", &model, "--out", &o]);
        let text = err(&args);
        assert!(text.contains(what), "--directions {k}: {text}");
    }
    let text = err(&["jer", "--model", "nobody/no-such-model"]);
    assert!(
        text.contains("not found") && text.contains("config.json"),
        "{text}"
    );
    let text = err(&["--device", "tpu", "jer", "--model", &model]);
    assert!(text.contains("unknown device"), "{text}");
    let o = scratch("dup-seeds");
    let mut args = JER.to_vec();
    let out = o.display().to_string();
    args.extend(["--model", &model, "--seeds", "42,7,42", "--out", &out]);
    let text = err(&args);
    assert!(text.contains("seed 42 is given twice"), "{text}");
    assert!(!o.exists(), "nothing written for a refused command");
}

#[test]
fn info_describes_both_towers() {
    let text = ok(&["info", "--model", &fixture("clip")]);
    assert!(
        text.contains("vision") && text.contains("text") && text.contains("2 layers"),
        "{text}"
    );
}

/// `info` on a LLaVA-OneVision checkpoint: the SigLIP tower (with the projector) and the
/// decoder, whose parameter counts add up to the file's (every stored tensor is a parameter of
/// this untied fixture, as transformers' `num_parameters()` counts them), and the anyres
/// preprocessing.
#[test]
fn info_describes_llava_onevision() {
    let model = fixture("llava_onevision");
    let text = ok(&["info", "--model", &model]);
    assert!(
        text.contains("vision       siglip_vision_model: 2 layers")
            && text.contains("decoder      qwen2: 2 layers")
            && text.contains("anyres: the base view and 32×32 tiles"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["info", "--json", "--model", &model])).unwrap();
    let params: u64 = json["towers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["info"]["num_params"].as_u64().unwrap())
        .sum();
    let bytes =
        std::fs::read(root().join("tests/fixtures/llava_onevision/model.safetensors")).unwrap();
    let stored: usize = safetensors::SafeTensors::deserialize(&bytes)
        .unwrap()
        .tensors()
        .iter()
        .map(|(_, t)| t.shape().iter().product::<usize>())
        .sum();
    assert_eq!(params, stored as u64, "{json}");
    assert_eq!(json["preprocess"]["kind"], "LlavaOnevision", "{json}");
    assert_eq!(
        json["preprocess"]["image_grid_pinpoints"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{json}"
    );

    // Without its preprocessor_config.json (which `cooco run` requires) no preprocessing is
    // claimed.
    let dir = scratch("info-llava-no-processor");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(
            root().join("tests/fixtures/llava_onevision").join(f),
            dir.join(f),
        )
        .unwrap();
    }
    let text = ok(&["info", "--model", &dir.display().to_string()]);
    assert!(text.contains("preprocess   none"), "{text}");
}

/// `info` reads the preprocessing `embed` would use and refuses a broken one as `embed` does
/// (a timm `pretrained_cfg` whose `input_size` is not `[3, H, W]`); a checkpoint without one
/// says so.
#[test]
fn info_shows_the_preprocessing_and_refuses_a_broken_one() {
    // The tiny EVA-02 timm fixture: pretrained_cfg input_size [3, 32, 32], crop_pct 0.9,
    // bicubic, OpenAI CLIP statistics (timm's resize is floor(32 / 0.9) = 35).
    let text = ok(&["info", "--model", &fixture("eva")]);
    assert!(
        text.contains(
            "preprocess   TorchvisionImageNet: resize short side to 35 (Bicubic), center crop \
             32×32, rescale ×1/255, normalize mean"
        ),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["info", "--json", "--model", &fixture("eva")])).unwrap();
    assert_eq!(json["preprocess"]["crop_size"]["height"], 32, "{json}");
    assert_eq!(
        json["preprocess"]["image_mean"][0], 0.48145466f32 as f64,
        "{json}"
    );

    let dir = scratch("info-broken-cfg");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(root().join("tests/fixtures/eva").join(f), dir.join(f)).unwrap();
    }
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    cfg["pretrained_cfg"]["input_size"] = serde_json::json!([3, 32]);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let model = dir.display().to_string();
    let image = root()
        .join("tests/fixtures/images/files/gray.png")
        .display()
        .to_string();
    let out = dir.join("out.jsonl").display().to_string();
    for cmd in ["info", "embed"] {
        let mut args = vec![cmd, "--model", &model];
        if cmd == "embed" {
            args.extend(["--images", &image, "--out", &out]);
        }
        let text = err(&args);
        assert!(
            text.contains("pretrained_cfg.input_size") && text.contains("config.json"),
            "{cmd}: {text}"
        );
    }

    // A vision checkpoint with no preprocessing config at all: info still describes it.
    let text = ok(&["info", "--model", &fixture("clip")]);
    assert!(text.contains("preprocess   none"), "{text}");
}

#[test]
fn embed_images_to_jsonl_and_safetensors() {
    let m = crate::common::clip_with_processor(&scratch("embed-model"));
    let files = root().join("tests/fixtures/images/files");
    let (a, b) = (
        files.join("gray.png").display().to_string(),
        files.join("rgba.png").display().to_string(),
    );

    let out = scratch("embed-out");
    std::fs::create_dir_all(&out).unwrap();
    let jsonl = out.join("e.jsonl").display().to_string();
    ok(&[
        "embed",
        "--model",
        &m,
        "--images",
        &a,
        &b,
        "--out",
        &jsonl,
        "--batch-size",
        "1",
    ]);
    let lines: Vec<serde_json::Value> = read(Path::new(&jsonl))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[0]["embedding"].as_array().unwrap().len(),
        16,
        "CLIP projection_dim"
    );
    assert!(lines[1]["input"].as_str().unwrap().ends_with("rgba.png"));

    let st = out.join("e.safetensors").display().to_string();
    ok(&["embed", "--model", &m, "--images", &a, &b, "--out", &st]);
    let bytes = std::fs::read(&st).unwrap();
    let t = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(t.tensor("embeddings").unwrap().shape(), &[2, 16]);
    // Same numbers whatever the batch size and the format.
    let v: Vec<f32> = t
        .tensor("embeddings")
        .unwrap()
        .data()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let first: Vec<f32> = lines[0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    for (x, y) in v[..16].iter().zip(&first) {
        assert!((x - y).abs() < 1e-5, "{x} vs {y}");
    }

    // A directory with a corrupt file: reported, nothing written.
    let bad = out.join("bad.jsonl");
    let text = err(&[
        "embed",
        "--model",
        &m,
        "--images",
        &files.display().to_string(),
        "--out",
        &bad.display().to_string(),
    ]);
    assert!(
        text.contains("corrupt.jpg") && text.contains("unreadable"),
        "{text}"
    );
    assert!(!bad.exists(), "no partial output");
}

/// Field `key` of every line of an `embed` JSON-lines output.
fn jsonl_field(path: &Path, key: &str) -> Vec<serde_json::Value> {
    read(path)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()[key].clone())
        .collect()
}

#[test]
fn a_byte_order_mark_is_not_part_of_the_first_text() {
    let m = crate::common::bert_with_tokenizer(&scratch("bom-model"));
    let out = scratch("bom");
    std::fs::create_dir_all(&out).unwrap();
    let (plain, bom) = (out.join("plain.txt"), out.join("bom.txt"));
    std::fs::write(&plain, "red cube\nblue sphere\n").unwrap();
    std::fs::write(&bom, "\u{feff}red cube\nblue sphere\n").unwrap();
    let mut rows = Vec::new();
    for (texts, name) in [(&plain, "plain.jsonl"), (&bom, "bom.jsonl")] {
        let o = out.join(name);
        let t = ok(&[
            "embed",
            "--model",
            &m,
            "--texts",
            &texts.display().to_string(),
            "--out",
            &o.display().to_string(),
        ]);
        assert_eq!(
            t.contains("byte-order mark removed"),
            name == "bom.jsonl",
            "{t}"
        );
        rows.push(jsonl_field(&o, "embedding"));
    }
    // Without the fix the mark is an unknown token of the first text only.
    assert_eq!(rows[0], rows[1]);
    let first = jsonl_field(&out.join("bom.jsonl"), "input");
    assert_eq!(
        first[0], "red cube",
        "the recorded input has no mark either"
    );
}

#[test]
fn embed_refuses_a_directory_as_out_before_any_work_and_leaves_no_temp_file() {
    let out = scratch("outdir");
    let target = out.join("emb.jsonl");
    std::fs::create_dir_all(target.join("inside")).unwrap();
    let texts = out.join("t.txt");
    std::fs::write(&texts, "red cube\n").unwrap();
    let t = err(&[
        "embed",
        "--model",
        // A model that does not exist: the --out check must come first.
        &out.join("no-such-model").display().to_string(),
        "--texts",
        &texts.display().to_string(),
        "--out",
        &target.display().to_string(),
    ]);
    assert!(t.contains("emb.jsonl is a directory"), "{t}");
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!left.iter().any(|n| n.ends_with(".tmp")), "{left:?}");
}

#[test]
fn degenerate_sizes_are_errors_not_empty_results() {
    let d = scratch("degenerate");
    std::fs::create_dir_all(d.join("rows")).unwrap();
    let out = |n: &str| d.join(n).display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "finetune".into(),
                "train".into(),
                "--model".into(),
                fixture("bert"),
                "--rank".into(),
                "0".into(),
                "--out".into(),
                out("t"),
            ],
            "--rank must be at least 1 (got 0)",
        ),
        (
            vec![
                "foveated".into(),
                "--task".into(),
                "csb".into(),
                "--dump-only".into(),
                "--size".into(),
                "0".into(),
                "--out".into(),
                out("f"),
            ],
            "--image-size must be at least 1 (got 0)",
        ),
        (
            vec![
                "binding".into(),
                "--model".into(),
                fixture("jer"),
                "--trials".into(),
                "0".into(),
                "--out".into(),
                out("b"),
            ],
            "--trials must be at least 1",
        ),
        (
            vec![
                "saber".into(),
                "generate".into(),
                "--independent".into(),
                "0".into(),
                "--chains".into(),
                "0".into(),
                "--out".into(),
                out("s"),
            ],
            "no item to generate",
        ),
        (
            vec![
                "finetune".into(),
                "train".into(),
                "--model".into(),
                fixture("dinov2"),
                "--out".into(),
                out("v"),
            ],
            "finetuning supports bert, clip, siglip text encoders",
        ),
        // Options that would be ignored are refused.
        (
            vec![
                "finetune".into(),
                "train".into(),
                "--model".into(),
                fixture("bert"),
                "--data".into(),
                out("data-none"),
                "--per-type".into(),
                "5".into(),
                "--out".into(),
                out("p"),
            ],
            "cannot be used with",
        ),
        (
            vec![
                "foveated".into(),
                "--task".into(),
                "csb".into(),
                "--dump-only".into(),
                "--model".into(),
                fixture("dinov2"),
                "--out".into(),
                out("m"),
            ],
            "cannot be used with",
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let text = err(&args);
        assert!(
            text.contains(want),
            "{args:?}: expected '{want}' in:\n{text}"
        );
        assert!(!text.contains("panicked"), "{args:?} panicked:\n{text}");
    }
    for n in ["t", "f", "b", "s", "v", "p", "m"] {
        assert!(
            !d.join(n).exists(),
            "{n}: an output directory was left behind"
        );
    }
    let row = d.join("rows/row.json");
    std::fs::write(&row, "{}").unwrap();
    let text = err(&[
        "correlate",
        &d.join("rows").display().to_string(),
        "--out",
        &out("c"),
    ]);
    assert!(text.contains("not a probe-all row"), "{text}");
    // `finetune data` never overwrites a data directory, and a failed import leaves none.
    let data = out("data");
    ok(&["finetune", "data", "--out", &data, "--per-type", "2"]);
    let text = err(&["finetune", "data", "--out", &data, "--per-type", "3"]);
    assert!(text.contains("exists and is not empty"), "{text}");
    let missing = d.join("missing.jsonl").display().to_string();
    err(&[
        "finetune",
        "data",
        "--out",
        &out("data2"),
        "--import",
        &missing,
        "--per-type",
        "0",
    ]);
    assert!(
        !d.join("data2").exists(),
        "a failed `finetune data` left its directory"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A tiny ViT (patch 4) with a ViT preprocessor, in a scratch directory.
fn tiny_vit_with_processor(dir: &Path) -> String {
    crate::common::fixture_with_processor("jer", "vit", dir)
}

fn count_after(text: &str, prefix: &str) -> usize {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting '{prefix}' in:\n{text}"));
    line[prefix.len()..]
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no count in '{line}'"))
}

#[test]
fn foveated_writes_a_run_directory_resumes_and_shares_its_feature_cache() {
    let d = scratch("foveated");
    let model = tiny_vit_with_processor(&d.join("model"));
    let cache = d.join("cache").display().to_string();
    let args = |out: &str, test: &str| -> Vec<String> {
        [
            "foveated",
            "--task",
            "csb",
            "--model",
            &model,
            "--size",
            "32",
            "--supersample",
            "2",
            "--train",
            "24",
            "--val",
            "12",
            "--test",
            test,
            "--nuisance-scenes",
            "2",
            "--epochs",
            "3",
            "--attention-maps",
            "2",
            "--cache-dir",
            &cache,
            "--out",
            out,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let run1 = d.join("run1").display().to_string();
    let a1 = args(&run1, "6");
    let a1: Vec<&str> = a1.iter().map(String::as_str).collect();
    let text = ok(&a1);
    // Nothing cached yet: every image of the five sets is encoded.
    assert!(count_after(&text, "features: ") > 24 + 12 + 6, "{text}");
    assert!(text.contains("(0 cached)"), "{text}");
    let run = PathBuf::from(&run1);
    for f in [
        "config.json",
        "results.json",
        "summary.csv",
        "probes.jsonl",
        "readout-gap.csv",
        "readout-summary.csv",
        "readout-oracle.csv",
        "readout-fovea.csv",
        "top1.svg",
        "flip.svg",
    ] {
        assert!(run.join(f).is_file(), "{f} missing");
    }
    let results: serde_json::Value =
        serde_json::from_str(&read(&run.join("results.json"))).unwrap();
    let rows = results["results"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "4 readouts × 2 probes");
    for r in rows {
        let t = r["test_top1"]["mean"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&t), "{r}");
        assert!(r["nsr"]["mean"].as_f64().is_some(), "NSR missing: {r}");
    }
    let pngs = std::fs::read_dir(run.join("attention")).unwrap().count();
    assert!(pngs >= 2, "fovea attention maps: {pngs}");
    let probes = read(&run.join("probes.jsonl"));
    assert_eq!(probes.lines().count(), 8);

    // The same command again: every image and every probe is reused.
    let text = ok(&a1);
    assert!(text.contains("features: 0 of"), "{text}");
    assert_eq!(
        read(&run.join("probes.jsonl")),
        probes,
        "probes were retrained"
    );

    // Another recipe in the same directory is refused, naming the difference.
    let mut a2 = args(&run1, "6");
    let e = a2.iter().position(|s| s == "--epochs").unwrap();
    a2[e + 1] = "4".into();
    let a2: Vec<&str> = a2.iter().map(String::as_str).collect();
    let text = err(&a2);
    assert!(text.contains("epochs"), "{text}");

    // A larger test split in a new run shares the cache: train, val and the nuisance variants
    // of the first 2 test scenes are reused, the test and counterfactual sets are re-encoded.
    let run3 = d.join("run3").display().to_string();
    let a3 = args(&run3, "8");
    let a3: Vec<&str> = a3.iter().map(String::as_str).collect();
    let text = ok(&a3);
    assert!(
        text.contains(&format!("({} cached)", 24 + 12 + 2 * 16)),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// The synthetic GQA scene graphs of `tests/fixtures/foveated/gqa` with a JPEG per image: grey,
/// each object's box painted in its colour.
fn synthetic_gqa(dir: &Path) {
    let src = root().join("tests/fixtures/foveated/gqa");
    std::fs::create_dir_all(dir.join("images")).unwrap();
    for f in ["train_sceneGraphs.json", "val_sceneGraphs.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
        let graphs: serde_json::Value = serde_json::from_str(&read(&src.join(f))).unwrap();
        for (id, g) in graphs.as_object().unwrap() {
            let (w, h) = (
                g["width"].as_f64().unwrap() as u32,
                g["height"].as_f64().unwrap() as u32,
            );
            let mut img = image::RgbImage::from_pixel(w, h, image::Rgb([128, 128, 128]));
            for o in g["objects"].as_object().unwrap().values() {
                let colour = match o["attributes"].as_array().and_then(|a| a.first()) {
                    Some(a) if a == "red" => [220, 20, 20],
                    Some(a) if a == "blue" => [20, 20, 220],
                    Some(a) if a == "white" => [250, 250, 250],
                    Some(a) if a == "black" => [5, 5, 5],
                    _ => [120, 80, 40],
                };
                let (x, y) = (o["x"].as_f64().unwrap(), o["y"].as_f64().unwrap());
                let (bw, bh) = (o["w"].as_f64().unwrap(), o["h"].as_f64().unwrap());
                for py in (y as u32)..((y + bh) as u32).min(h) {
                    for px in (x as u32)..((x + bw) as u32).min(w) {
                        img.put_pixel(px, py, image::Rgb(colour));
                    }
                }
            }
            img.save(dir.join("images").join(format!("{id}.jpg")))
                .unwrap();
        }
    }
}

#[test]
fn foveated_gqa_runs_end_to_end_and_names_bad_input() {
    let d = scratch("gqa");
    let model = tiny_vit_with_processor(&d.join("model"));
    let gqa = d.join("gqa");
    synthetic_gqa(&gqa);
    let gqa_s = gqa.display().to_string();
    let cache = d.join("cache").display().to_string();
    let run = d.join("run");
    let run_s = run.display().to_string();
    let base = |readouts: &str, out: &str| -> Vec<String> {
        [
            "foveated",
            "--task",
            "gqa",
            "--gqa-dir",
            &gqa_s,
            "--model",
            &model,
            "--size",
            "32",
            "--epochs",
            "2",
            "--readouts",
            readouts,
            "--cache-dir",
            &cache,
            "--out",
            out,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let a = base("gap,summary,oracle,oracle-box", &run_s);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let text = ok(&a);
    assert!(text.contains("gqa: "), "{text}");
    let results: serde_json::Value =
        serde_json::from_str(&read(&run.join("results.json"))).unwrap();
    let rows = results["results"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "4 readouts × 2 probes: {results}");
    for r in rows {
        for k in ["test_accuracy", "test_paired_accuracy"] {
            let v = r[k]["mean"]
                .as_f64()
                .unwrap_or_else(|| panic!("{k} missing: {r}"));
            assert!((0.0..=1.0).contains(&v), "{r}");
        }
    }
    assert!(run.join("summary.csv").is_file() && run.join("paired.svg").is_file());

    // The default readouts include `fovea`, the text-conditioned fovea on GQA: accepted, and
    // refused only because this checkpoint has no text tower.
    let b = base(
        "gap,summary,oracle,fovea",
        &d.join("run-b").display().to_string(),
    );
    let b: Vec<&str> = b.iter().map(String::as_str).collect();
    let text = err(&b);
    assert!(!text.contains("unknown readout"), "{text}");
    assert!(text.contains("text-conditioned fovea"), "{text}");

    // A missing image is named, with the count of missing ones.
    std::fs::remove_file(gqa.join("images/1.jpg")).unwrap();
    let text = err(&a);
    assert!(text.contains("image 1 ") && text.contains("1 of"), "{text}");
    // An image of another size than its scene graph says is named.
    image::RgbImage::new(7, 7)
        .save(gqa.join("images/1.jpg"))
        .unwrap();
    let mut c = base("gap", &d.join("run-c").display().to_string());
    let k = c.iter().position(|s| s == "--cache-dir").unwrap();
    c[k + 1] = d.join("cache-c").display().to_string(); // nothing cached: the images are decoded
    let c: Vec<&str> = c.iter().map(String::as_str).collect();
    let text = err(&c);
    assert!(text.contains("image 1: decoded 7×7"), "{text}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `config.json` records the commit the binary was built from, not the repository (if any) of
/// the directory it runs in: run from a directory outside any checkout, the commit is still the
/// source tree's, and every provenance field of the one schema is there.
#[test]
fn provenance_records_the_build_not_the_working_directory() {
    let out = scratch("provenance");
    std::fs::create_dir_all(&out).unwrap();
    let model = fixture("jer");
    let mut args = JER.to_vec();
    args.extend(["--model", &model, "--out", "run"]);
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(&args)
        .current_dir(&out)
        .env("HF_HUB_OFFLINE", "1")
        .env("GIT_CEILING_DIRECTORIES", std::env::temp_dir())
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", crate::common::text(&o));
    let config: serde_json::Value =
        serde_json::from_str(&read(&out.join("run/config.json"))).unwrap();
    for key in [
        "bindscope_version",
        "git_commit",
        "git_dirty",
        "crate_versions",
        "device",
        "created",
    ] {
        assert!(
            config.get(key).is_some(),
            "config.json lacks {key}: {config}"
        );
    }
    let source_head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match source_head {
        // Built from a checkout (CI, a developer's clone): that commit.
        Some(head) => assert_eq!(config["git_commit"], head.as_str()),
        // Built from a source archive: no commit to record.
        None => assert_eq!(config["git_commit"], "unknown"),
    }
    assert_eq!(
        config["crate_versions"]["bindscope"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        config["crate_versions"]["burn-flex"].is_string(),
        "{config}"
    );
    std::fs::remove_dir_all(&out).ok();
}

/// `--image-size native` probes each model at its configured input size (the `jer` fixture's
/// `image_size` is 16, the `vit` fixture's 32) and records the size it used.
#[test]
fn jer_native_size_uses_each_models_configured_size() {
    for (name, size) in [("jer", 16), ("vit", 32)] {
        let out = scratch(&format!("jer-native-{name}"));
        let o = out.display().to_string();
        let model = fixture(name);
        ok(&[
            "jer",
            "--model",
            &model,
            "--images",
            "1",
            "--directions",
            "4",
            "--image-size",
            "native",
            "--out",
            &o,
        ]);
        let config: serde_json::Value =
            serde_json::from_str(&read(&out.join("config.json"))).unwrap();
        assert_eq!(
            config["identity"]["size"],
            serde_json::json!([size, size]),
            "{name}"
        );
    }
}
