//! Issue 12, items 12 and 13, end to end on the committed tiny fixtures: options that made no
//! sense and were accepted (`correlate --target`, `foveated --epochs 0`, repeated `--seeds`,
//! combined messages, an empty finetune validation split, `final_losses` after a resume,
//! `saber generate` over another seed's benchmark, `config.json` of a resumed foveated run),
//! and every plot the studies write (JER spectrum and depth, foveated bars and curves, GQA
//! paired accuracy, correlate scatter): no text off the canvas, no overlapping labels, no
//! machine path, no float noise in tick labels.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bindscope_core::plot::{audit_svg, svg_text_contents};

use crate::common::{fixture, fixture_copy, fixture_with_processor, root, word_level_tokenizer};

fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(args)
        .current_dir(dir)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("runs")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let o = run_in(dir, args);
    let text = crate::common::text(&o);
    assert!(o.status.success(), "experiments {args:?} failed:\n{text}");
    text
}

fn err(dir: &Path, args: &[&str]) -> String {
    let o = run_in(dir, args);
    let text = crate::common::text(&o);
    assert!(
        !o.status.success(),
        "experiments {args:?} should have failed:\n{text}"
    );
    text
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&read(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Checks that the SVG at `path` reads: every text on the canvas, no two overlapping, no
/// text naming a directory of `paths`, tick labels without float noise.
fn assert_plot_reads(path: &Path, paths: &[&Path]) {
    let svg = read(path);
    let problems = audit_svg(&svg);
    assert!(problems.is_empty(), "{}: {problems:?}", path.display());
    for t in svg_text_contents(&svg) {
        for p in paths {
            let p = p.display().to_string();
            assert!(!t.contains(&p), "{}: '{t}' names a path", path.display());
        }
        assert!(
            !t.contains("0000000") && !t.contains("9999999"),
            "{}: float noise in '{t}'",
            path.display()
        );
    }
}

/// Every `*.svg` in `dir` (not recursive), sorted.
fn svgs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        .collect();
    v.sort();
    v
}

#[test]
fn jer_plots_read() {
    let d = tempfile::tempdir().unwrap();
    let dino = fixture("dinov2");
    let vit = fixture("vit");
    ok(
        d.path(),
        &[
            "jer",
            "--model",
            &dino,
            "--model",
            &vit,
            "--images",
            "2",
            "--directions",
            "24",
            "--size",
            "28x28",
            "--depth",
            "--out",
            "j",
        ],
    );
    let fixtures = root().join("tests/fixtures");
    let j = d.path().join("j");
    let mut n = 0;
    for dir in [j.clone(), j.join("dinov2"), j.join("vit")] {
        for svg in svgs(&dir) {
            assert_plot_reads(&svg, &[&fixtures]);
            n += 1;
        }
    }
    assert_eq!(n, 5, "comparison spectrum, and spectrum + depth per model");
    let texts = svg_text_contents(&read(&j.join("dinov2/depth.svg")));
    assert!(!texts.iter().any(|t| t.ends_with(".0")), "{texts:?}");
}

/// The JER console line: no "NaN–NaN" at n = 1, the reason instead.
#[test]
fn jer_with_one_image_says_why_there_is_no_interval() {
    let d = tempfile::tempdir().unwrap();
    let text = ok(
        d.path(),
        &[
            "jer",
            "--model",
            &fixture("vit"),
            "--images",
            "1",
            "--directions",
            "4",
            "--size",
            "16x16",
            "--output",
            "summary",
            "--out",
            "j",
        ],
    );
    assert!(!text.contains("NaN"), "{text}");
    assert!(text.contains("no 95% CI at n = 1"), "{text}");
}

/// The tiny ViT fixture with a ViT preprocessor config, in `dir/model`.
fn tiny_vit(dir: &Path) -> String {
    fixture_with_processor("jer", "vit", &dir.join("model"))
}

fn foveated_args<'a>(model: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "foveated",
        "--task",
        "csb",
        "--model",
        model,
        "--image-size",
        "32",
        "--supersample",
        "2",
        "--train",
        "24",
        "--val",
        "12",
        "--test",
        "6",
        "--nuisance-scenes",
        "2",
        "--epochs",
        "2",
        "--attention-maps",
        "1",
        "--cache-dir",
        "cache",
        "--out",
        out,
    ];
    // A flag of `extra` replaces the base value.
    for pair in extra.chunks(2) {
        match a.iter().position(|x| *x == pair[0]) {
            Some(i) => a[i + 1] = pair[1],
            None => a.extend_from_slice(pair),
        }
    }
    a
}

#[test]
fn foveated_refuses_nonsense_before_any_work_naming_the_flag() {
    let d = tempfile::tempdir().unwrap();
    let model = tiny_vit(d.path());
    let cases: &[(&[&str], &str)] = &[
        (&["--epochs", "0"], "--epochs must be at least 1"),
        (&["--seeds", "1,1"], "--seeds: 1 is given twice"),
        (&["--readouts", "gap,gap"], "--readouts: gap is given twice"),
        (
            &["--probes", "mlp,linear,mlp"],
            "--probes: mlp is given twice",
        ),
        (&["--batch", "0"], "--batch must be at least 1"),
        (&["--supersample", "0"], "--supersample must be at least 1"),
        (&["--image-size", "0"], "--image-size must be at least 1"),
        (&["--val", "0"], "--val must be at least 1"),
        (
            &["--nuisance-scenes", "7"],
            "--nuisance-scenes 7 exceeds --test 6",
        ),
    ];
    for (extra, want) in cases {
        let text = err(d.path(), &foveated_args(&model, "run", extra));
        assert!(text.contains(want), "{extra:?}: {text}");
        // The message names one flag, not a list of candidates.
        assert!(!text.contains(" and --"), "{extra:?}: {text}");
        assert!(
            !d.path().join("run").exists(),
            "{extra:?} left a run directory"
        );
        assert!(!d.path().join("cache").exists(), "{extra:?} left a cache");
    }
}

/// A CSB run with three seeds writes plots that read, and `config.json` records the seeds of
/// the invocation that ran, also when the directory already existed.
#[test]
fn foveated_plots_read_and_config_records_what_ran() {
    let d = tempfile::tempdir().unwrap();
    let model = tiny_vit(d.path());
    ok(d.path(), &foveated_args(&model, "run", &["--seeds", "0"]));
    let run = d.path().join("run");
    let first = json(&run.join("config.json"));
    assert_eq!(first["seeds"], serde_json::json!([0]));
    // The same run directory with more seeds: resumed (the identity is the same), and
    // config.json says which seeds the results are over.
    ok(
        d.path(),
        &foveated_args(&model, "run", &["--seeds", "0,1,2"]),
    );
    let again = json(&run.join("config.json"));
    assert_eq!(again["seeds"], serde_json::json!([0, 1, 2]));
    assert_eq!(
        again["created"], first["created"],
        "the first invocation's time"
    );
    assert!(again["updated"].is_string(), "{again}");
    let results = json(&run.join("results.json"));
    assert_eq!(results["results"][0]["seeds"], serde_json::json!([0, 1, 2]));

    let plots = svgs(&run);
    for f in ["top1.svg", "flip.svg", "nsr.svg", "curves-gap-linear.svg"] {
        assert!(plots.contains(&run.join(f)), "{f} missing: {plots:?}");
    }
    for p in &plots {
        assert_plot_reads(p, &[d.path()]);
    }
    // A bar chart names its y axis, has a legend per probe and the chance line, and labels
    // each readout once.
    let texts = svg_text_contents(&read(&run.join("top1.svg")));
    for t in ["test top-1", "linear", "mlp", "gap", "fovea"] {
        assert!(texts.iter().any(|x| x == t), "'{t}' missing: {texts:?}");
    }
    assert!(texts.iter().any(|x| x.starts_with("chance")), "{texts:?}");
    assert_eq!(texts.iter().filter(|x| *x == "gap").count(), 1, "{texts:?}");
    assert!(!texts.iter().any(|x| x.contains('+')), "{texts:?}");
    // Epochs are integers.
    let texts = svg_text_contents(&read(&run.join("curves-gap-linear.svg")));
    assert!(texts.iter().any(|x| x == "2"), "{texts:?}");
    assert!(!texts.iter().any(|x| x == "1.5" || x == "2.0"), "{texts:?}");
}

/// The synthetic GQA scene graphs of `tests/fixtures/foveated/gqa` with a grey JPEG per image.
fn synthetic_gqa(dir: &Path) {
    let src = root().join("tests/fixtures/foveated/gqa");
    std::fs::create_dir_all(dir.join("images")).unwrap();
    for f in ["train_sceneGraphs.json", "val_sceneGraphs.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
        for (id, g) in json(&src.join(f)).as_object().unwrap() {
            let (w, h) = (
                g["width"].as_f64().unwrap() as u32,
                g["height"].as_f64().unwrap() as u32,
            );
            image::RgbImage::from_pixel(w, h, image::Rgb([128, 128, 128]))
                .save(dir.join("images").join(format!("{id}.jpg")))
                .unwrap();
        }
    }
}

#[test]
fn foveated_gqa_plot_reads_and_fovea_twice_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let model = tiny_vit(d.path());
    synthetic_gqa(&d.path().join("gqa"));
    let args = |readouts: &'static str| {
        vec![
            "foveated",
            "--task",
            "gqa",
            "--gqa-dir",
            "gqa",
            "--model",
            &model,
            "--image-size",
            "32",
            "--epochs",
            "2",
            "--readouts",
            readouts,
            "--cache-dir",
            "cache",
            "--out",
            "run",
        ]
    };
    let text = err(d.path(), &args("fovea,text-fovea"));
    assert!(text.contains("--readouts: fovea and text-fovea"), "{text}");
    // The text-conditioned fovea of a checkpoint without a text tower fails before any
    // image is encoded or the run directory made.
    let text = err(d.path(), &args("gap,fovea"));
    assert!(text.contains("the text-conditioned fovea needs"), "{text}");
    assert!(!text.contains("encoding"), "{text}");
    assert!(
        !d.path().join("run").exists(),
        "a run directory was left behind"
    );
    ok(d.path(), &args("gap,summary,oracle-box"));
    assert_plot_reads(&d.path().join("run/paired.svg"), &[d.path()]);
}

/// A `probe-all` row with these metrics.
fn row(dir: &Path, label: &str, metrics: serde_json::Value, dim: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let v = serde_json::json!({
        "label": label, "metrics": metrics, "embed_dim": dim, "num_params": dim * 1000,
    });
    std::fs::write(dir.join("row.json"), v.to_string()).unwrap();
}

fn correlate_rows(d: &Path) {
    let models = [
        ("/data/models/dinov2-small", 0.61, 9.0, 0.20, 384),
        ("/data/models/dinov2-base", 0.66, 11.5, 0.27, 768),
        ("/data/models/clip-b32", 0.52, 7.2, 0.15, 512),
        ("/data/models/siglip-b16", 0.57, 8.1, 0.31, 768),
        ("/data/models/vit-b16", 0.49, 6.4, 0.12, 768),
    ];
    for (i, (label, b, jer, sd, dim)) in models.iter().enumerate() {
        row(
            &d.join(format!("rows/r{i}")),
            label,
            serde_json::json!({
                "binding_cosine": b, "binding_knn": b - 0.05, "jer": jer, "same_diff": sd,
            }),
            *dim,
        );
    }
}

#[test]
fn correlate_refuses_an_unknown_target_listing_the_valid_ones() {
    let d = tempfile::tempdir().unwrap();
    correlate_rows(d.path());
    let text = err(
        d.path(),
        &["correlate", "rows", "--target", "foo", "--out", "t"],
    );
    assert!(text.contains("--target foo"), "{text}");
    assert!(text.contains("binding_cosine, binding_knn"), "{text}");
    assert!(
        !d.path().join("t").exists(),
        "a failed run left its directory"
    );
    let text = err(
        d.path(),
        &["correlate", "rows", "--ols", "jer,nope", "--out", "t"],
    );
    assert!(text.contains("--ols: no row has 'nope'"), "{text}");
    let text = err(
        d.path(),
        &[
            "correlate",
            "rows",
            "--covariates",
            "embed_dims",
            "--out",
            "t",
        ],
    );
    assert!(
        text.contains("--covariates: no row has 'embed_dims'"),
        "{text}"
    );
    assert!(text.contains("embed_dim"), "the fields are listed: {text}");
    assert!(!d.path().join("t").exists());
    // A known non-default target works.
    ok(
        d.path(),
        &["correlate", "rows", "--target", "binding_knn", "--out", "t"],
    );
}

#[test]
fn correlate_scatter_plots_read() {
    let d = tempfile::tempdir().unwrap();
    correlate_rows(d.path());
    ok(d.path(), &["correlate", "rows", "--out", "t"]);
    let t = d.path().join("t");
    let plots = svgs(&t);
    assert_eq!(plots.len(), 2, "{plots:?}");
    for p in &plots {
        assert_plot_reads(p, &[Path::new("/data/models")]);
    }
    let texts = svg_text_contents(&read(&t.join("scatter_jer.svg")));
    assert!(texts.iter().any(|x| x == "dinov2-small"), "{texts:?}");
}

/// A BERT checkpoint with a word-level tokenizer in `dir`.
fn bert(dir: &Path) -> String {
    let dir = fixture_copy("bert", dir);
    std::fs::write(dir.join("tokenizer.json"), word_level_tokenizer()).unwrap();
    dir.display().to_string()
}

#[test]
fn finetune_warns_of_an_empty_validation_split_and_reports_the_whole_runs_losses() {
    let d = tempfile::tempdir().unwrap();
    // 3 examples per type: 10% rounds down to 0, the val split is empty.
    let text = ok(
        d.path(),
        &["finetune", "data", "--out", "data", "--per-type", "3"],
    );
    assert!(text.contains("warning: the val split is empty"), "{text}");
    let report = json(&d.path().join("data/data_report.json"));
    assert!(
        report["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("val split is empty")),
        "{report}"
    );

    let model = bert(&d.path().join("bert"));
    let train = |extra: &[&str]| {
        let mut a = vec![
            "finetune",
            "train",
            "--model",
            &model,
            "--data",
            "data",
            "--out",
            "run",
            "--batch-size",
            "4",
            "--saber-per-n",
            "0",
            "--checkpoint-every",
            "2",
        ];
        a.extend_from_slice(extra);
        ok(d.path(), &a)
    };
    let text = train(&["--max-steps", "3"]);
    assert!(text.contains("warning: the val split is empty"), "{text}");
    train(&[]);
    let run = d.path().join("run");
    let report = json(&run.join("report.json"));
    let steps = report["steps"].as_u64().unwrap() as usize;
    assert!(steps > 3, "{report}");
    let logged: Vec<f64> = read(&run.join("train_log.jsonl"))
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert_eq!(logged.len(), steps);
    let want: Vec<f64> = logged[logged.len().saturating_sub(10)..].to_vec();
    let got: Vec<f64> = report["final_losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(
        got, want,
        "final_losses must span the steps before the resume too"
    );
}

#[test]
fn finetune_names_the_one_wrong_flag() {
    let d = tempfile::tempdir().unwrap();
    let model = bert(&d.path().join("bert"));
    for (flag, value) in [("--epochs", "0"), ("--rank", "0"), ("--lr", "-1")] {
        let arg = format!("{flag}={value}");
        let text = err(
            d.path(),
            &["finetune", "train", "--model", &model, "--out", "run", &arg],
        );
        assert!(text.contains(&format!("{flag} must be")), "{text}");
        assert!(!text.contains(" and --"), "{text}");
    }
}

#[test]
fn saber_generate_never_overwrites_another_seeds_benchmark() {
    let d = tempfile::tempdir().unwrap();
    let generate = |seed: &'static str| {
        vec![
            "saber",
            "generate",
            "--seed",
            seed,
            "--independent",
            "2",
            "--chains",
            "2",
            "--out",
            "data",
        ]
    };
    ok(d.path(), &generate("1"));
    let items = read(&d.path().join("data/saber.jsonl"));
    let text = err(d.path(), &generate("2"));
    assert!(text.contains("another generator"), "{text}");
    assert!(text.contains("seed"), "the difference is named: {text}");
    assert_eq!(
        read(&d.path().join("data/saber.jsonl")),
        items,
        "overwritten"
    );
    // The same generator again is allowed (the same files).
    ok(d.path(), &generate("1"));
    assert_eq!(read(&d.path().join("data/saber.jsonl")), items);
    // A directory that is not a benchmark is left alone.
    std::fs::create_dir_all(d.path().join("other")).unwrap();
    std::fs::write(d.path().join("other/notes.txt"), "mine").unwrap();
    let mut a = generate("1");
    *a.last_mut().unwrap() = "other";
    let text = err(d.path(), &a);
    assert!(text.contains("not a SABER benchmark"), "{text}");
}
