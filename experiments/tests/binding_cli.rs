//! End-to-end tests of the binding-study subcommands (`binding`, `samediff`, `geometry`,
//! `probe-all`, `correlate`) on the tiny committed JER fixture (a 2-layer ViT, hidden 16):
//! run directories and their files, resume, refusal to overwrite another configuration,
//! random initialisation, and the correlation table over several rows.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::root;

fn scratch(name: &str) -> PathBuf {
    let d = crate::common::scratch("binding-cli", name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the binary in `cwd` (random-init checkpoints and default run directories go there).
fn exec(cwd: &Path, args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(args)
        .current_dir(cwd)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("runs");
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

fn ok(cwd: &Path, args: &[&str]) -> String {
    let (good, text) = exec(cwd, args);
    assert!(good, "experiments {args:?} failed:\n{text}");
    text
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

/// The JER fixture with a `preprocessor_config.json` that resizes photos to 32×32 (ImageNet
/// mean / std), for `--preprocess model`: the default ImageNet path crops 224 px, which gives the
/// fixture's 4-px patches 3,137 tokens and one image an attention map of 157 MB, past the 128 MiB
/// storage-buffer limit of Mesa's lavapipe where attention is materialised (wgpu).
fn small_input_model(dir: &Path) -> PathBuf {
    let m = crate::common::fixture_copy("jer", &dir.join("model"));
    let processor = serde_json::json!({
        "image_processor_type": "ViTImageProcessor",
        "do_resize": true, "size": {"height": 32, "width": 32}, "resample": 2,
        "do_rescale": true, "rescale_factor": 1.0 / 255.0,
        "do_normalize": true, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]
    });
    std::fs::write(m.join("preprocessor_config.json"), processor.to_string()).unwrap();
    m
}

/// Small sizes: 48-pixel scenes, 40 trials / pairs, 2 JER images at 16×16.
const SMALL: &[&str] = &[
    "--image-size",
    "48",
    "--trials",
    "40",
    "--pairs",
    "40",
    "--jer-images",
    "2",
    "--jer-size",
    "16x16",
    "--jer-directions",
    "4",
    "--jer-chunk",
    "2",
    "--knn-k",
    "20",
    "--pca-neighbours",
    "20",
    "--pca-components",
    "8",
];

#[test]
fn probe_all_writes_a_row_resumes_and_refuses_other_configs() {
    let dir = scratch("probe");
    let model = small_input_model(&dir).display().to_string();
    let scenes = dir.join("scenes");
    let out = dir.join("run");
    let (s, o) = (scenes.display().to_string(), out.display().to_string());
    let mut args = vec![
        "probe-all",
        "--model",
        &model,
        "--label",
        "tiny",
        "--dump-images",
        &s,
        "--images",
        &s,
    ];
    args.extend([
        "--samples",
        "60",
        "--anchors",
        "20",
        "--k",
        "8,16",
        "--preprocess",
        "model",
        "--out",
        &o,
    ]);
    args.extend(SMALL);
    ok(&dir, &args);
    assert_eq!(
        std::fs::read_dir(&scenes).unwrap().count(),
        324,
        "every scene dumped as PNG"
    );
    for f in [
        "config.json",
        "row.json",
        "scenes.jsonl",
        "binding_trials.csv",
        "samediff_pairs.csv",
        "samediff_sweep.csv",
        "geometry_embeddings.jsonl",
        "eigenvalues.csv",
        "jer/results.json",
    ] {
        assert!(out.join(f).is_file(), "missing {f}");
    }
    let row = json(&out.join("row.json"));
    assert_eq!(row["label"], "tiny");
    assert_eq!(row["embed_dim"], 16);
    let m = &row["metrics"];
    for k in [
        "binding_cosine",
        "binding_knn",
        "binding_local_pca",
        "same_diff",
        "g_iso",
        "l_iso_variance_k8",
        "l_iso_pr_k16",
        "l_iso_erank_k16",
    ] {
        let v = m[k]
            .as_f64()
            .unwrap_or_else(|| panic!("metric {k} missing: {m}"));
        assert!((0.0..=1.0).contains(&v), "{k} = {v}");
    }
    assert!(
        m["jer"].as_f64().unwrap() >= 1.0 && m["jer"].as_f64().unwrap() <= 4.0,
        "JER of a k = 4 sketch lies in [1, 4]"
    );
    // 40 trials × 3 readouts + header.
    assert_eq!(
        std::fs::read_to_string(out.join("binding_trials.csv"))
            .unwrap()
            .lines()
            .count(),
        121
    );
    let scene_lines = std::fs::read_to_string(out.join("scenes.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(scene_lines, 324);

    // Resume: the same command reuses the cached embeddings and reproduces the row.
    ok(&dir, &args);
    let again = json(&out.join("row.json"));
    assert_eq!(again["metrics"], row["metrics"]);
    assert_eq!(
        std::fs::read_to_string(out.join("scenes.jsonl"))
            .unwrap()
            .lines()
            .count(),
        324
    );

    // Another configuration into the same directory is refused.
    let mut other = args.clone();
    let at = other.iter().position(|a| *a == "--trials").unwrap() + 1;
    other[at] = "41";
    let (good, text) = exec(&dir, &other);
    assert!(!good && text.contains("another configuration"), "{text}");

    // The standalone subcommands agree with probe-all on the same scenes.
    let b = dir.join("binding").display().to_string();
    ok(
        &dir,
        &[
            "binding",
            "--model",
            &model,
            "--image-size",
            "48",
            "--trials",
            "40",
            "--readouts",
            "cosine",
            "--out",
            &b,
        ],
    );
    let br = json(&dir.join("binding/results.json"));
    assert_eq!(br["binding"][0]["accuracy"], m["binding_cosine"]);
    let sd = dir.join("samediff").display().to_string();
    ok(
        &dir,
        &[
            "samediff",
            "--model",
            &model,
            "--image-size",
            "48",
            "--pairs",
            "40",
            "--out",
            &sd,
        ],
    );
    assert_eq!(
        json(&dir.join("samediff/results.json"))["samediff"]["accuracy"],
        m["same_diff"]
    );
    let g = dir.join("geometry").display().to_string();
    ok(
        &dir,
        &[
            "geometry",
            "--model",
            &model,
            "--images",
            &s,
            "--samples",
            "60",
            "--anchors",
            "20",
            "--k",
            "8,16",
            "--preprocess",
            "model",
            "--out",
            &g,
        ],
    );
    assert_eq!(
        json(&dir.join("geometry/results.json"))["geometry"]["global"]["g_iso"],
        m["g_iso"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn random_init_rows_and_correlation_table() {
    let dir = scratch("correlate");
    let cfg = root()
        .join("tests/fixtures/jer/config.json")
        .display()
        .to_string();
    for seed in ["1", "2", "3", "4", "5"] {
        let out = format!("rows/r{seed}");
        let mut args = vec![
            "probe-all",
            "--random-init",
            &cfg,
            "--init-seed",
            seed,
            "--label",
            seed,
            "--out",
            &out,
        ];
        args.extend(SMALL);
        ok(&dir, &args);
        assert!(
            dir.join(format!(
                "runs/random-init/jer-random-seed{seed}/model.safetensors"
            ))
            .is_file()
        );
    }
    let text = ok(&dir, &["correlate", "rows", "--out", "table"]);
    assert!(text.contains("Table 2"), "{text}");
    let t = dir.join("table");
    for f in [
        "table2.csv",
        "rows.csv",
        "correlate.json",
        "scatter_jer.svg",
        "scatter_same_diff.svg",
    ] {
        assert!(t.join(f).is_file(), "missing {f}");
    }
    let c = json(&t.join("correlate.json"));
    assert_eq!(c["rows"].as_array().unwrap().len(), 5);
    let jer = c["correlations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["metric"] == "jer")
        .expect("jer row");
    assert_eq!(jer["pearson"]["n"], 5);
    assert_eq!(jer["jackknife"]["subsets"], 5);
    assert_eq!(c["ols"]["n"], 5);
    assert_eq!(c["ols"]["loo_predictions"].as_array().unwrap().len(), 5);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn zoo_runs_the_rows_it_finds_lists_the_rest_and_correlates() {
    // A weights folder with three tiny fixtures under their rows' names, and a torchvision
    // ResNet that is not a ResNet-50 under Barlow Twins' name (found, then refused by
    // --arch resnet50); every other row is missing (offline, empty Hub cache).
    let dir = scratch("zoo");
    let weights = dir.join("weights");
    crate::common::fixture_copy("jer", &weights.join("dino-vits16"));
    crate::common::fixture_copy("dinov2", &weights.join("dinov2-small"));
    crate::common::fixture_copy("eva", &weights.join("eva02_base_patch16_clip_224.merged2b"));
    std::fs::copy(
        root().join("tests/fixtures/resnet/bottleneck.pth.tar"),
        weights.join("barlowtwins-resnet50.pth"),
    )
    .unwrap();
    // Another family under a row's name, and an empty directory: both failed rows.
    crate::common::fixture_copy("eva", &weights.join("dino-vitb16"));
    std::fs::create_dir_all(weights.join("vit-mae-base")).unwrap();
    let (w, o) = (
        weights.display().to_string(),
        dir.join("zoo").display().to_string(),
    );
    let mut args = vec![
        "probe-all",
        "--zoo",
        "jer21",
        "--weights-dir",
        &w,
        "--out",
        &o,
    ];
    args.extend(SMALL);
    let (good, text) = exec(&dir, &args);
    assert!(!good && text.contains("3 of 22 rows failed"), "{text}");
    assert!(
        text.contains("holds a 'eva' checkpoint; the row 'DINO ViT-B/16' is a 'vit'"),
        "{text}"
    );
    assert!(
        text.contains("missing  VICReg ResNet-50")
            && text.contains("https://dl.fbaipublicfiles.com/vicreg/resnet50.pth"),
        "{text}"
    );
    let report = json(&dir.join("zoo/zoo.json"));
    assert_eq!(report["finished"].as_array().unwrap().len(), 3, "{report}");
    assert_eq!(report["missing"].as_array().unwrap().len(), 16, "{report}");
    let failed: Vec<&str> = report["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["label"].as_str().unwrap())
        .collect();
    assert_eq!(
        failed,
        ["MAE ViT-B/16", "DINO ViT-B/16", "Barlow Twins ResNet-50"],
        "{report}"
    );
    for slug in ["dino-vit-s-16", "dinov2-vit-s-14", "eva-clip-vit-b-16"] {
        let row = json(&dir.join("zoo").join(slug).join("row.json"));
        assert!(row["metrics"]["jer"].as_f64().unwrap() > 0.0, "{slug}");
    }
    assert!(dir.join("zoo/correlate/correlate.json").is_file());
    // The listing sees the weights and the finished rows' parameter counts, offline.
    let list = ok(
        &dir,
        &["zoo", "--list", "--json", "--weights-dir", &w, "--out", &o],
    );
    let rows: Vec<serde_json::Value> = list
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 22);
    let eva = rows
        .iter()
        .find(|r| r["label"] == "EVA-CLIP ViT-B/16")
        .unwrap();
    assert_eq!(eva["num_params"], 10246, "{eva}");
    assert_eq!(eva["weights"]["status"], "found", "{eva}");
    assert_eq!(rows[2]["weights"]["status"], "missing");
    // A stale table never stands for a run whose rows are all refused (another --trials).
    let mut other = args.clone();
    let at = other.iter().position(|a| *a == "--trials").unwrap() + 1;
    other[at] = "41";
    let (good, _) = exec(&dir, &other);
    assert!(!good);
    assert!(!dir.join("zoo/correlate").exists());
    // An image of --images that does not decode stops the run before any row.
    let photos = dir.join("photos");
    std::fs::create_dir_all(&photos).unwrap();
    for f in ["a", "b", "c"] {
        std::fs::copy(
            root().join(format!("tests/fixtures/resnet/preprocess/{f}.png")),
            photos.join(format!("{f}.png")),
        )
        .unwrap();
    }
    std::fs::write(photos.join("z.png"), b"not a png").unwrap();
    let p = photos.display().to_string();
    let mut with_photos = args.clone();
    with_photos.extend(["--images", &p]);
    let (good, text) = exec(&dir, &with_photos);
    assert!(
        !good && text.contains("--images: decoding") && text.contains("z.png"),
        "{text}"
    );
    assert!(!text.contains("zoo: row"), "no row ran:\n{text}");
    // Unknown registries, a missing --weights-dir and flags that make no sense with --zoo are
    // refused.
    let (good, text) = exec(
        &dir,
        &["probe-all", "--zoo", "jer21", "--weights-dir", "nowhere"],
    );
    assert!(
        !good && text.contains("--weights-dir nowhere: no such directory"),
        "{text}"
    );
    let (good, text) = exec(&dir, &["probe-all", "--zoo", "all"]);
    assert!(!good && text.contains("unknown zoo 'all'"), "{text}");
    let (good, text) = exec(&dir, &["probe-all", "--zoo", "jer21", "--model", "x"]);
    assert!(!good && text.contains("cannot be used with"), "{text}");
}
