//! The JER and binding-study subcommands as a new user meets them (issue "Fidelity and
//! hardening", items 8, 10, 11, 12's geometry part and 14's geometry part), on the tiny
//! committed JER fixture (a 2-layer ViT, hidden 16, 4-pixel patches):
//!
//! - adding outputs (`--depth` block profiles, more images, more seeds) never moves another
//!   output's numbers: the final-layer JER is the same to the bit;
//! - sizes that cannot run (smaller than a patch, larger than the memory) and options that
//!   cannot be used (`--knn-k 0`, `--anchors 0`, …) are refused before any work, naming the
//!   flag, with no run directory left behind that would block the corrected command;
//! - `--fresh` is not ignored when `--out` is given; a path given relative or absolute is one
//!   configuration; `--random-init` materialises where the user says; a readout named twice is
//!   computed once; the printed effective rank says it is normalised.

use std::path::Path;
use std::process::Command;

use crate::common::{fixture, root};

/// Runs the binary in `cwd`: (success, stdout + stderr).
fn exec(cwd: &Path, args: &[&str]) -> (bool, String) {
    exec_env(cwd, args, &[])
}

fn exec_env(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_experiments"));
    c.args(args)
        .current_dir(cwd)
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("BINDSCOPE_RANDOM_INIT_DIR");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("runs");
    (o.status.success(), crate::common::text(&o))
}

fn ok(cwd: &Path, args: &[&str]) -> String {
    let (good, text) = exec(cwd, args);
    assert!(good, "experiments {args:?} failed:\n{text}");
    text
}

/// The command fails, its message contains `want`, it does not panic, and `out` was not
/// created.
fn refused(cwd: &Path, args: &[&str], want: &str, out: &Path) {
    let (good, text) = exec(cwd, args);
    assert!(!good, "experiments {args:?} succeeded:\n{text}");
    assert!(text.contains(want), "{args:?}: wanted '{want}' in:\n{text}");
    assert!(!text.contains("panicked"), "{args:?} panicked:\n{text}");
    assert!(
        !out.exists(),
        "{args:?} left {} behind:\n{text}",
        out.display()
    );
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

/// `per_image.jsonl` of a JER run: `(seed, image) → outputs`.
fn per_image(dir: &Path) -> Vec<((u64, u64), Vec<serde_json::Value>)> {
    std::fs::read_to_string(dir.join("per_image.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                (v["seed"].as_u64().unwrap(), v["image"].as_u64().unwrap()),
                v["outputs"].as_array().unwrap().clone(),
            )
        })
        .collect()
}

/// A small JER run of the fixture into `out` with extra flags.
fn jer(cwd: &Path, out: &Path, extra: &[&str]) -> String {
    let model = fixture("jer");
    let o = out.display().to_string();
    let mut args = vec![
        "jer",
        "--model",
        &model,
        "--image-size",
        "16x16",
        "--directions",
        "4",
        "--chunk",
        "2",
        "--out",
        &o,
    ];
    args.extend(extra);
    ok(cwd, &args)
}

/// Item 8: `--depth` adds block outputs; the final output's spectrum (and so the headline
/// JER) is the one of the run without it, to the bit.
#[test]
fn depth_does_not_move_the_headline_jer() {
    let tmp = tempfile::tempdir().unwrap();
    let (plain, deep) = (tmp.path().join("plain"), tmp.path().join("deep"));
    jer(tmp.path(), &plain, &["--images", "2"]);
    jer(tmp.path(), &deep, &["--images", "2", "--depth"]);
    let (a, b) = (per_image(&plain), per_image(&deep));
    assert_eq!(a.len(), 2);
    for ((ka, oa), (kb, ob)) in a.iter().zip(&b) {
        assert_eq!(ka, kb);
        assert_eq!(oa.len(), 1);
        assert_eq!(ob.len(), 2, "one output per block of the 2-layer fixture");
        assert_eq!(
            oa[0], ob[1],
            "image {ka:?}: the final output with --depth differs"
        );
        assert_ne!(
            ob[0], ob[1],
            "block 1 and the final output are different maps"
        );
    }
    assert_eq!(
        json(&plain.join("results.json"))["jer"],
        json(&deep.join("results.json"))["jer"]
    );
}

/// Item 8: image i's spectrum does not depend on how many images follow it, nor on which
/// other seeds the run has.
#[test]
fn an_image_does_not_depend_on_the_image_count_or_other_seeds() {
    let tmp = tempfile::tempdir().unwrap();
    let (two, three, seeds) = (
        tmp.path().join("two"),
        tmp.path().join("three"),
        tmp.path().join("seeds"),
    );
    jer(tmp.path(), &two, &["--images", "2"]);
    jer(tmp.path(), &three, &["--images", "3"]);
    jer(tmp.path(), &seeds, &["--images", "2", "--seeds", "7,42"]);
    let (a, b, c) = (per_image(&two), per_image(&three), per_image(&seeds));
    assert_eq!(b.len(), 3);
    assert_eq!(a[..], b[..2], "images 0 and 1 moved when image 2 was added");
    for r in &a {
        assert!(c.contains(r), "seed 42 image {:?} moved beside seed 7", r.0);
    }
}

/// Item 10: a probe or canvas smaller than a patch, or too large for the memory, is refused
/// before a run directory exists (no panic in the convolution, no abort on an allocation).
#[test]
fn sizes_that_cannot_run_are_refused_before_any_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let out = cwd.join("out");
    let o = out.display().to_string();
    let (jer_model, vit) = (fixture("jer"), fixture("vit"));
    let jer_args = |size: &'static str| -> Vec<String> {
        [
            "jer",
            "--model",
            &jer_model,
            "--image-size",
            size,
            "--out",
            &o,
        ]
        .map(String::from)
        .to_vec()
    };
    let run = |args: Vec<String>, want: &str| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(cwd, &a, want, &out);
    };
    run(
        jer_args("3x3"),
        "--image-size 3x3 is smaller than one 4×4 patch",
    );
    run(jer_args("100000x100000"), "reduce --image-size or --chunk");
    run(jer_args("100000x100000"), "needs at least");
    let binding = |model: &str, size: &str| -> Vec<String> {
        [
            "binding",
            "--model",
            model,
            "--image-size",
            size,
            "--trials",
            "4",
            "--out",
            &o,
        ]
        .map(String::from)
        .to_vec()
    };
    run(
        binding(&vit, "6"),
        "--image-size 6 is smaller than one 8×8 patch",
    );
    run(
        binding(&jer_model, "100000"),
        "reduce --image-size or --batch-size",
    );
    run(
        [
            "probe-all",
            "--model",
            &jer_model,
            "--jer-image-size",
            "2x2",
            "--out",
            &o,
        ]
        .map(String::from)
        .to_vec(),
        "--jer-image-size 2x2 is smaller than one 4×4 patch",
    );
    assert!(!cwd.join("runs").exists(), "nothing under runs/ either");
}

/// Item 11: readout options that cannot fit the 324-scene bank are refused before the scenes
/// are embedded, with no run directory left; the corrected command then runs into the same
/// `--out`.
#[test]
fn binding_options_are_refused_before_embedding() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let out = cwd.join("out");
    let (o, model) = (out.display().to_string(), fixture("jer"));
    let base = [
        "binding",
        "--model",
        &model,
        "--image-size",
        "8",
        "--trials",
        "4",
        "--out",
        &o,
    ];
    for (flag, value, want) in [
        ("--knn-k", "0", "--knn-k 0: kNN needs 1 ≤ k ≤ 323"),
        ("--knn-k", "324", "--knn-k 324"),
        ("--pca-components", "0", "--pca-components 0"),
        ("--pca-neighbours", "1", "--pca-neighbours 1"),
        ("--batch-size", "0", "--batch-size must be at least 1"),
    ] {
        let mut args = base.to_vec();
        args.extend([flag, value]);
        refused(cwd, &args, want, &out);
    }
    let samediff = ["samediff", "--model", &model, "--pairs", "1", "--out", &o];
    refused(cwd, &samediff, "--pairs must be at least 2", &out);
    ok(cwd, &base);
    assert!(out.join("results.json").is_file());
}

/// Item 11: a readout named twice is computed once (one row per trial, one summary).
#[test]
fn a_readout_named_twice_is_computed_once() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (o, model) = (out.display().to_string(), fixture("jer"));
    let text = ok(
        tmp.path(),
        &[
            "binding",
            "--model",
            &model,
            "--image-size",
            "8",
            "--trials",
            "5",
            "--readouts",
            "cosine,knn,cosine",
            "--knn-k",
            "10",
            "--out",
            &o,
        ],
    );
    assert!(
        text.contains("cosine is given twice; computed once"),
        "{text}"
    );
    let r = json(&out.join("results.json"));
    let names: Vec<&str> = r["binding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cosine", "knn"]);
    let rows = std::fs::read_to_string(out.join("binding_trials.csv"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(rows, 1 + 5 * 2, "header + 5 trials × 2 readouts");
}

/// Four 16×16 PNGs of different colours in `dir`.
fn photos(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..4u8 {
        let img = image::RgbImage::from_fn(16, 16, |x, y| {
            image::Rgb([i * 60, (x * 15) as u8, (y * 15) as u8 ^ (i * 40)])
        });
        img.save(dir.join(format!("p{i}.png"))).unwrap();
    }
}

/// The JER fixture with a processor that resizes photos to 16×16, for `--preprocess model`.
fn small_input_model(dir: &Path) -> String {
    let m = crate::common::fixture_copy("jer", dir);
    let processor = serde_json::json!({
        "image_processor_type": "ViTImageProcessor",
        "do_resize": true, "size": {"height": 16, "width": 16}, "resample": 2,
        "do_rescale": true, "rescale_factor": 1.0 / 255.0,
        "do_normalize": true, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]
    });
    std::fs::write(m.join("preprocessor_config.json"), processor.to_string()).unwrap();
    m.display().to_string()
}

/// Item 12 (geometry) and 14 (geometry): `--anchors 0` (all-NaN L.Iso before), `--samples 0`
/// and `--k 0` are refused up front naming the flag; the printed effective rank says it is the
/// normalised one.
#[test]
fn geometry_refuses_unusable_options_and_names_the_normalised_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let imgs = cwd.join("photos");
    photos(&imgs);
    let model = small_input_model(&cwd.join("model"));
    let out = cwd.join("out");
    let (o, i) = (out.display().to_string(), imgs.display().to_string());
    let base = [
        "geometry",
        "--model",
        &model,
        "--images",
        &i,
        "--preprocess",
        "model",
        "--samples",
        "4",
        "--anchors",
        "2",
        "--k",
        "2,3",
        "--out",
        &o,
    ];
    let with = |flag: &str, value: &'static str| {
        let mut a: Vec<&str> = base.to_vec();
        let at = a.iter().position(|x| *x == flag).unwrap() + 1;
        a[at] = value;
        a
    };
    refused(cwd, &with("--anchors", "0"), "--anchors 0", &out);
    refused(cwd, &with("--samples", "0"), "--samples 0", &out);
    refused(cwd, &with("--k", "0"), "--k 0", &out);
    refused(cwd, &with("--k", "2,4"), "--k 4", &out);
    let text = ok(cwd, &base);
    assert!(
        text.contains("normalised effective rank exp(H(λ/Σλ))/m"),
        "{text}"
    );
    assert!(
        text.contains("L.Iso k=3 (m = 2): variance"),
        "the normaliser of each k is printed: {text}"
    );
    let r = json(&out.join("results.json"));
    for l in r["geometry"]["local"].as_array().unwrap() {
        let e = l["effective_rank"].as_f64().unwrap();
        assert!((0.0..=1.0 + 1e-12).contains(&e), "normalised erank {e}");
    }
}

/// Item 11: `--fresh` with an `--out` holding the run is refused (it was ignored: the run
/// resumed), for every study that takes both; the run there is untouched.
#[test]
fn fresh_is_not_ignored_when_out_is_given() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let model = small_input_model(&cwd.join("model"));
    let imgs = cwd.join("photos");
    photos(&imgs);
    let i = imgs.display().to_string();
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "jer",
            vec![
                "jer",
                "--model",
                &model,
                "--image-size",
                "16x16",
                "--images",
                "1",
                "--directions",
                "4",
            ],
        ),
        (
            "binding",
            vec![
                "binding",
                "--model",
                &model,
                "--image-size",
                "8",
                "--trials",
                "4",
                "--readouts",
                "cosine",
            ],
        ),
        (
            "geometry",
            vec![
                "geometry",
                "--model",
                &model,
                "--images",
                &i,
                "--preprocess",
                "model",
                "--samples",
                "4",
                "--anchors",
                "2",
                "--k",
                "2",
            ],
        ),
        (
            "probe-all",
            vec![
                "probe-all",
                "--model",
                &model,
                "--skip-jer",
                "--image-size",
                "8",
                "--trials",
                "4",
                "--pairs",
                "4",
                "--readouts",
                "cosine",
            ],
        ),
    ];
    for (name, args) in cases {
        let out = cwd.join(name).display().to_string();
        let mut first = args.clone();
        first.extend(["--out", &out]);
        ok(cwd, &first);
        let config = std::fs::read(Path::new(&out).join("config.json")).unwrap();
        // Without --fresh the same command resumes …
        ok(cwd, &first);
        // … with it, it is refused, and the run there is left as it was.
        let mut fresh = first.clone();
        fresh.push("--fresh");
        let (good, text) = exec(cwd, &fresh);
        assert!(!good, "{name} --fresh --out resumed:\n{text}");
        assert!(
            text.contains("--fresh") && text.contains("already holds a run"),
            "{name}: {text}"
        );
        assert_eq!(
            std::fs::read(Path::new(&out).join("config.json")).unwrap(),
            config
        );
    }
}

/// Item 11: the same checkpoint directory or image folder given relative and absolute is one
/// configuration (the second command resumes the first's `--out` instead of refusing it).
#[test]
fn relative_and_absolute_paths_are_one_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let abs_model = small_input_model(&cwd.join("model"));
    photos(&cwd.join("photos"));
    let abs_photos = cwd.join("photos").display().to_string();
    let runs: [(&str, &[&str]); 3] = [
        (
            "jer",
            &[
                "--image-size",
                "16x16",
                "--images",
                "1",
                "--directions",
                "4",
            ],
        ),
        (
            "binding",
            &["--image-size", "8", "--trials", "4", "--readouts", "cosine"],
        ),
        (
            "geometry",
            &[
                "--preprocess",
                "model",
                "--samples",
                "4",
                "--anchors",
                "2",
                "--k",
                "2",
            ],
        ),
    ];
    for (study, extra) in runs {
        let out = format!("out-{study}");
        for (model, photos) in [
            (abs_model.as_str(), abs_photos.as_str()),
            ("./model", "photos"),
        ] {
            let mut args = vec![study, "--model", model];
            if study == "geometry" {
                args.extend(["--images", photos]);
            }
            args.extend(extra);
            args.extend(["--out", &out]);
            let (good, text) = exec(cwd, &args);
            assert!(good, "{args:?}:\n{text}");
        }
        let id = &json(&cwd.join(&out).join("config.json"))["identity"];
        assert_eq!(
            id["model"].as_str(),
            Some(
                Path::new(&abs_model)
                    .canonicalize()
                    .unwrap()
                    .display()
                    .to_string()
                    .as_str()
            ),
            "{study}: {id}"
        );
    }
}

/// Item 11: `--random-init` materialises into `--random-init-dir` (or
/// `BINDSCOPE_RANDOM_INIT_DIR`), not into `./runs` whatever `--out` says.
#[test]
fn random_init_goes_where_the_user_says() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let cfg = root()
        .join("tests/fixtures/jer/config.json")
        .display()
        .to_string();
    let cache = cwd.join("cache");
    let c = cache.display().to_string();
    let common = [
        "binding",
        "--random-init",
        &cfg,
        "--image-size",
        "8",
        "--trials",
        "4",
        "--readouts",
        "cosine",
    ];
    let mut args = common.to_vec();
    args.extend(["--random-init-dir", &c, "--out", "a"]);
    ok(cwd, &args);
    assert!(cache.join("jer-random-seed0/model.safetensors").is_file());
    let env_cache = cwd.join("env-cache");
    let mut args = common.to_vec();
    args.extend(["--out", "b"]);
    let (good, text) = exec_env(
        cwd,
        &args,
        &[(
            "BINDSCOPE_RANDOM_INIT_DIR",
            env_cache.display().to_string().as_str(),
        )],
    );
    assert!(good, "{text}");
    assert!(
        env_cache
            .join("jer-random-seed0/model.safetensors")
            .is_file()
    );
    assert!(
        !cwd.join("runs").exists(),
        "nothing was written under ./runs"
    );
    // The same initialisation under two caches gives the same numbers.
    assert_eq!(
        json(&cwd.join("a/results.json"))["binding"],
        json(&cwd.join("b/results.json"))["binding"]
    );
}
