//! Against the numpy / Pillow / transformers reference of `tests/fixtures/gen/cooco.py`
//! (fixture `tests/fixtures/cooco`): preparation byte for byte, boxes, prompts and KOSMOS-2
//! cells exactly, noise byte for byte given numpy's draws; the dataset checks and the
//! `prepare` run on the fixture and on broken copies of it.

use crate::dataset::{self, RelLevel};
use crate::prepare::{NoiseArea, apply_noise_with, prepare};
use crate::prompt::{Family, kosmos_patch_indices, normalized_box, region_prompt};
use crate::{PrepareConfig, PromptLine, run_prepare};
use bindscope_data::image::{DecodeOptions, decode_file};
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/cooco")
}

fn reference() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join("reference.json")).unwrap())
        .unwrap()
}

#[test]
fn the_fixture_loads_with_its_excluded_record_counted() {
    let ds = dataset::load(&fixture(), false).unwrap();
    let files: Vec<&str> = ds.records.iter().map(|r| r.file.as_str()).collect();
    assert_eq!(
        files,
        [
            "1001_kitchen_cup_high.jpg",
            "1002_street_car_clean.jpg",
            "1003_bedroom_lamp_low.jpg"
        ]
    );
    assert_eq!(ds.excluded, 1);
    assert_eq!(ds.records[0].rel_level, RelLevel::High);
    assert_eq!(ds.records[0].expected_label(), "bowl");
    assert_eq!(ds.records[1].expected_label(), "car");
    assert_eq!(ds.records[0].size, [660, 120]);
}

#[test]
fn preparation_boxes_and_prompts_match_the_python_reference() {
    let ds = dataset::load(&fixture(), false).unwrap();
    let r = reference();
    for rec in &ds.records {
        let want = &r[&rec.file];
        let img = decode_file(ds.image_path(rec), &DecodeOptions::hf()).unwrap();
        let p = prepare(&img, rec.target_bbox).unwrap();
        let stem = rec.file.trim_end_matches(".jpg");
        let pillow = decode_file(
            fixture().join(format!("prepared/{stem}.png")),
            &DecodeOptions::hf(),
        )
        .unwrap();
        assert_eq!(p.image, pillow, "{}: prepared pixels", rec.file);
        let boxes: Vec<f64> = want["box"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(p.bbox.to_vec(), boxes, "{}: box", rec.file);
        assert_eq!(p.resized, want["resized"].as_bool().unwrap());
        let size = [p.image.width, p.image.height];
        let norm: Vec<f64> = want["box_normalized"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(normalized_box(p.bbox, size).to_vec(), norm, "{}", rec.file);
        assert_eq!(
            region_prompt(Family::LlavaOnevision, p.bbox, size),
            want["llava_prompt"].as_str().unwrap(),
            "{}",
            rec.file
        );
        let (w, h) = (size[0] as f64, size[1] as f64);
        let b = p.bbox;
        let cells = kosmos_patch_indices(
            [b[0] / w, b[1] / h, (b[0] + b[2]) / w, (b[1] + b[3]) / h],
            32,
        );
        let want_cells: Vec<usize> = want["kosmos_patch_index"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(cells.to_vec(), want_cells, "{}: KOSMOS-2 cells", rec.file);
        let kosmos = region_prompt(Family::Kosmos2, p.bbox, size);
        assert!(
            kosmos.contains(&format!("<patch_index_{:04}>", cells[0])),
            "{kosmos}"
        );
    }
}

#[test]
fn noise_matches_numpy_given_the_same_draws() {
    let ds = dataset::load(&fixture(), false).unwrap();
    let rec = &ds.records[1];
    let img = decode_file(ds.image_path(rec), &DecodeOptions::hf()).unwrap();
    let p = prepare(&img, rec.target_bbox).unwrap();
    let bytes = std::fs::read(fixture().join("noise.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for (area, name) in [
        (NoiseArea::Target, "target"),
        (NoiseArea::Context, "context"),
        (NoiseArea::All, "all"),
    ] {
        let draws: Vec<f64> = st
            .tensor(&format!("{name}.draws"))
            .unwrap()
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
            .collect();
        let want = st
            .tensor(&format!("{name}.noised"))
            .unwrap()
            .data()
            .to_vec();
        let mut img = p.image.clone();
        let mut it = draws.iter().copied();
        apply_noise_with(&mut img, p.bbox, area, 0.5, &mut || {
            it.next().expect("enough draws")
        });
        assert!(it.next().is_none(), "{name}: every draw used");
        assert_eq!(img.data, want, "{name}: noised pixels");
        // The other area's pixels are untouched.
        let changed = img
            .data
            .iter()
            .zip(&p.image.data)
            .filter(|(a, b)| a != b)
            .count();
        assert!(changed > 0, "{name}: noise changed nothing");
    }
    let mut img = p.image.clone();
    apply_noise_with(
        &mut img,
        p.bbox,
        NoiseArea::All,
        0.0,
        &mut || unreachable!(),
    );
    assert_eq!(img, p.image, "level 0 draws nothing and changes nothing");
}

/// A copy of the fixture's dataset with `metadata.json` edited.
fn broken(edit: impl FnOnce(&mut serde_json::Value, &Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("images")).unwrap();
    for e in std::fs::read_dir(fixture().join("images")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join("images").join(e.file_name())).unwrap();
    }
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("metadata.json")).unwrap())
            .unwrap();
    edit(&mut meta, dir.path());
    std::fs::write(dir.path().join("metadata.json"), meta.to_string()).unwrap();
    dir
}

#[test]
fn invalid_records_are_named_or_skipped_and_listed() {
    let dir = broken(|m, root| {
        m["1001_kitchen_cup_high.jpg"]["target_bbox"] = serde_json::json!([600, 10, 100, 10]);
        m["1002_street_car_clean.jpg"]["rel_level"] = "medium".into();
        m["1003_bedroom_lamp_low.jpg"]["target_bbox"] = serde_json::json!([1, 1, 0, 5]);
        m["9999_park_dog_low.jpg"] = m["1003_bedroom_lamp_low.jpg"].clone();
        m["9998_park_dog_high.jpg"] = m["1003_bedroom_lamp_low.jpg"].clone();
        m["9998_park_dog_high.jpg"]["target_bbox"] = serde_json::json!([1, 1, 2, 2]);
        std::fs::write(root.join("images/9998_park_dog_high.jpg"), b"not an image").unwrap();
    });
    let err = dataset::load(dir.path(), false).unwrap_err().to_string();
    for needle in [
        "5 invalid record(s)",
        "1001_kitchen_cup_high.jpg: target_bbox [600.0, 10.0, 100.0, 10.0]",
        "not inside the 660x120 image",
        "unknown rel_level 'medium'",
        "1003_bedroom_lamp_low.jpg: target_bbox [1.0, 1.0, 0.0, 5.0] must be finite with a positive",
        "9999_park_dog_low.jpg: image",
        "is missing",
        "9998_park_dog_high.jpg: image",
        "not readable",
    ] {
        assert!(err.contains(needle), "missing '{needle}' in:\n{err}");
    }
    // With skip_invalid nothing usable is left: an error, not an empty run.
    let err = dataset::load(dir.path(), true).unwrap_err().to_string();
    assert!(err.contains("no usable record"), "{err}");
    let dir = broken(|m, _| {
        m["1003_bedroom_lamp_low.jpg"]["rel_level"] = "medium".into();
    });
    let ds = dataset::load(dir.path(), true).unwrap();
    assert_eq!(ds.records.len(), 2);
    assert_eq!(ds.invalid.len(), 1);
    assert_eq!(ds.invalid[0].file, "1003_bedroom_lamp_low.jpg");
    // Labels the prompts and the scoring read must say something.
    let dir = broken(|m, _| {
        m["1003_bedroom_lamp_low.jpg"]["scene"] = "  ".into();
        m["1002_street_car_clean.jpg"]["target"] = "".into();
    });
    let err = dataset::load(dir.path(), false).unwrap_err().to_string();
    assert!(
        err.contains("1003_bedroom_lamp_low.jpg: scene is empty")
            && err.contains("1002_street_car_clean.jpg: target is empty"),
        "{err}"
    );
    let dir = broken(|m, _| *m = serde_json::json!([1, 2]));
    let err = dataset::load(dir.path(), false).unwrap_err().to_string();
    assert!(
        err.contains("metadata.json") && err.contains("keyed by image file name"),
        "{err}"
    );
}

#[test]
fn prepare_run_writes_images_and_prompts_deterministically() {
    let run = |area: NoiseArea, seed: u64| {
        let out = tempfile::tempdir().unwrap();
        let cfg = PrepareConfig {
            data: fixture(),
            out: out.path().to_path_buf(),
            family: Family::LlavaOnevision,
            area,
            level: 0.5,
            seed,
            skip_invalid: false,
        };
        let s = run_prepare(&cfg).unwrap();
        assert_eq!((s.prepared, s.excluded), (3, 1));
        let lines: Vec<PromptLine> = std::fs::read_to_string(&s.prompts)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let png = std::fs::read(out.path().join(&lines[1].prepared)).unwrap();
        // A second run into the same directory is refused.
        assert!(
            run_prepare(&cfg)
                .unwrap_err()
                .to_string()
                .contains("exists")
        );
        (lines, png)
    };
    let (lines, a) = run(NoiseArea::Target, 1);
    assert_eq!(lines.len(), 3);
    let r = reference();
    assert_eq!(
        lines[1].prompt,
        r["1002_street_car_clean.jpg"]["llava_prompt"]
            .as_str()
            .unwrap()
    );
    assert_eq!(lines[1].size, [64, 64]);
    assert_eq!(
        (lines[0].expected.as_str(), lines[0].rel_level.as_str()),
        ("bowl", "high")
    );
    let (_, b) = run(NoiseArea::Target, 1);
    assert_eq!(a, b, "same seed, same noise");
    let (_, c) = run(NoiseArea::Target, 2);
    assert_ne!(a, c, "another seed, other noise");
    let bad = PrepareConfig {
        data: fixture(),
        out: tempfile::tempdir().unwrap().path().join("x"),
        family: Family::Molmo,
        area: NoiseArea::All,
        level: -1.0,
        seed: 0,
        skip_invalid: false,
    };
    assert!(
        run_prepare(&bad)
            .unwrap_err()
            .to_string()
            .contains("noise level -1")
    );
}

#[test]
fn clip_scores_match_transformers_on_a_tiny_clip() {
    use crate::score::{ScoreConfig, read_predictions, run_score};
    let dir = fixture().join("../cooco_clip");
    let want: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let out = tempfile::tempdir().unwrap();
    let cfg = ScoreConfig {
        predictions: dir.join("predictions.jsonl"),
        clip: dir.display().to_string(),
        out: out.path().to_path_buf(),
        threshold: 0.9,
        levenshtein_threshold: 0.9,
    };
    let device = bindscope_core::device::test_device();
    let summary = run_score(&cfg, &device).unwrap();
    assert_eq!(summary.items, want.len());
    let items: Vec<serde_json::Value> = std::fs::read_to_string(out.path().join("items.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // f32 features on the device against transformers' f32 features: 1e-5 on the CPU.
    let tol = if bindscope_core::device::testing_on_accelerator() {
        1e-4
    } else {
        1e-5
    };
    let preds = read_predictions(&cfg.predictions).unwrap();
    for (i, (got, w)) in items.iter().zip(&want).enumerate() {
        for key in ["clip_score", "ref_clip_score", "sim_target", "sim_scene"] {
            let (g, e) = (got[key].as_f64().unwrap(), w[key].as_f64().unwrap());
            assert!((g - e).abs() <= tol, "item {i} {key}: {g} vs {e}");
        }
        let (g, e) = (
            got["levenshtein"].as_f64().unwrap(),
            w["levenshtein"].as_f64().unwrap(),
        );
        assert!((g - e).abs() <= 1e-12, "item {i} levenshtein: {g} vs {e}");
        assert_eq!(got["correct"], w["correct"], "item {i}");
        assert_eq!(
            got["prediction"],
            serde_json::Value::from(preds[i].prediction.clone())
        );
    }
    let acc = want
        .iter()
        .filter(|w| w["correct"].as_bool().unwrap())
        .count() as f64
        / want.len() as f64;
    assert!((summary.accuracy - acc).abs() < 1e-12);
    // A missing CLIP checkpoint is named under this command's flag.
    let missing = ScoreConfig {
        clip: out.path().join("no-clip").display().to_string(),
        ..cfg.clone()
    };
    let err = run_score(&missing, &device).unwrap_err().to_string();
    assert!(
        err.starts_with("--clip ") && !err.contains("--model"),
        "{err}"
    );
    // A malformed line is named.
    let bad = out.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"image\": \"x.png\", \"prediction\": \"cup\"}\n").unwrap();
    let err = read_predictions(&bad).unwrap_err().to_string();
    assert!(
        err.contains("line 1") && err.contains("missing field"),
        "{err}"
    );
}

/// The rows of one of the fixture's tables: scenes, areas, levels, outcomes.
type Table = (Vec<String>, Vec<String>, Vec<f64>, Vec<f64>);

fn lme_table(file: &str) -> Table {
    let table = std::fs::read_to_string(fixture().join("../cooco_lme").join(file)).unwrap();
    let (mut scenes, mut areas, mut levels, mut y) = (vec![], vec![], vec![], vec![]);
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        scenes.push(f[0].to_string());
        areas.push(f[1].to_string());
        levels.push(f[2].parse::<f64>().unwrap());
        y.push(f[3].parse::<f64>().unwrap());
    }
    (scenes, areas, levels, y)
}

#[test]
fn mixed_model_matches_statsmodels_reml() {
    use crate::lme::{fit_random_intercept, study_design};
    let all: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture().join("../cooco_lme/reference.json")).unwrap(),
    )
    .unwrap();
    for (key, file) in [
        ("balanced", "table.csv"),
        ("unbalanced", "table_unbalanced.csv"),
    ] {
        let want = &all[key];
        let (scenes, areas, levels, y) = lme_table(file);
        let design = study_design(&levels, &areas).unwrap();
        let names: Vec<String> = want["names"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(design.names, names);
        let fit = fit_random_intercept(&y, &design, &scenes).unwrap();
        let rel = |got: f64, want: f64| (got - want).abs() / want.abs().max(1e-300);
        let vec = |k: &str| -> Vec<f64> {
            want[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        };
        for (k, got) in [
            ("fe_params", &fit.coef),
            ("bse_fe", &fit.se),
            ("tvalues", &fit.z),
        ] {
            for (i, (g, w)) in got.iter().zip(vec(k)).enumerate() {
                assert!(rel(*g, w) <= 1e-6, "{key} {k} {i}: {g} vs {w}");
            }
        }
        // d ln p / dz ≈ −z: a relative error e in z becomes about z²·e in p.
        for (i, ((g, w), z)) in fit.p.iter().zip(vec("pvalues")).zip(&fit.z).enumerate() {
            assert!(
                rel(*g, w) <= 1e-6 * z.powi(2).max(1.0),
                "{key} p {i}: {g} vs {w}"
            );
        }
        for (g, k) in [
            (fit.group_var, "cov_re"),
            (fit.residual_var, "scale"),
            (fit.reml_loglik, "llf"),
            (fit.r2_marginal, "r2_marginal"),
            (fit.r2_conditional, "r2_conditional"),
        ] {
            let w = want[k].as_f64().unwrap();
            assert!(rel(g, w) <= 1e-6, "{key} {k}: {g} vs {w}");
        }
        assert_eq!(fit.n_obs, want["rows"].as_u64().unwrap() as usize);
        assert_eq!(fit.n_groups, 14);
    }
    // Bad input is refused by name.
    let (scenes, areas, levels, y) = lme_table("table.csv");
    let design = study_design(&levels, &areas).unwrap();
    let _ = scenes;
    let one = vec!["s".to_string(); y.len()];
    let e = fit_random_intercept(&y, &design, &one)
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least two"), "{e}");
    let no_all: Vec<String> = areas
        .iter()
        .map(|a| {
            if a == "all" {
                "target".into()
            } else {
                a.clone()
            }
        })
        .collect();
    assert!(
        study_design(&levels, &no_all)
            .unwrap_err()
            .to_string()
            .contains("\"all\"")
    );
    let flat = vec![0.5; levels.len()];
    assert!(
        study_design(&flat, &areas)
            .unwrap_err()
            .to_string()
            .contains("constant")
    );
}

#[test]
fn a_box_the_resize_truncates_below_a_pixel_is_refused() {
    let img = bindscope_data::image::RgbImage::new(1280, 20, vec![9; 1280 * 20 * 3]).unwrap();
    // 1.5 px wide at 1280 → 0.75 px at 640: int() makes it 0.
    let e = prepare(&img, [10.0, 2.0, 1.5, 10.0])
        .unwrap_err()
        .to_string();
    assert!(e.contains("less than a pixel"), "{e}");
    assert!(prepare(&img, [10.0, 2.0, 4.0, 10.0]).is_ok());
}

// ---- The run, end to end, against tests/fixtures/gen/cooco_llava.py ----

fn llava_dir() -> PathBuf {
    fixture().join("../cooco_llava")
}

fn llava_reference() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(llava_dir().join("reference.json")).unwrap())
        .unwrap()
}

fn run_config(out: &Path) -> crate::run::RunConfig {
    let mut cfg = crate::run::RunConfig::new(fixture(), llava_dir().display().to_string());
    cfg.clip = fixture().join("../cooco_clip").display().to_string();
    cfg.out = Some(out.to_path_buf());
    cfg.areas = vec![NoiseArea::Target, NoiseArea::Context];
    cfg.levels = vec![0.0];
    cfg.attention_all_sizes = true;
    cfg.bootstrap = 200;
    cfg
}

fn context() -> bindscope_core::run::RunContext {
    let device = bindscope_core::device::test_device();
    bindscope_core::run::RunContext::new(
        device,
        "test",
        bindscope_core::run::BuildInfo {
            version: "test",
            git_commit: "test",
            git_dirty: None,
            dependencies: &[],
        },
    )
}

fn generations(dir: &Path) -> Vec<crate::run::GenerationRecord> {
    bindscope_core::run::read_jsonl(&dir.join("generations.jsonl"), "generation").unwrap()
}

#[test]
fn the_processor_chat_template_renders_as_transformers() {
    use bindscope_models::generate::chat::{ChatTemplate, RenderOptions};
    let t = ChatTemplate::for_processor(&llava_dir()).unwrap().unwrap();
    assert!(
        t.origin().ends_with("chat_template.json (chat_template)"),
        "{}",
        t.origin()
    );
    for case in llava_reference()["chat_cases"].as_array().unwrap() {
        let messages = case["messages"].as_array().unwrap().clone();
        let opts = RenderOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
            ..RenderOptions::default()
        };
        let got = t.render_messages(&messages, &opts).unwrap();
        assert_eq!(got, case["expected"].as_str().unwrap());
    }
}

/// The naming step and the attention ratios against transformers + numpy (level 0, every
/// prepared size in the analysis), resuming, and the report files.
#[test]
fn the_run_matches_transformers_and_resumes() {
    let want = llava_reference();
    let out = tempfile::tempdir().unwrap();
    let cfg = run_config(out.path());
    let ctx = context();
    let s = crate::run::run(&cfg, &ctx).unwrap();
    assert_eq!((s.rows, s.generated, s.summary.answers), (6, 3, 3));
    assert_eq!(s.attention_rows, 6);
    let gens = generations(out.path());
    assert_eq!(gens.len(), 6);
    let tol = if bindscope_core::device::testing_on_accelerator() {
        2e-3
    } else {
        1e-4
    };
    let items = want["items"].as_array().unwrap();
    for w in items {
        let image = w["image"].as_str().unwrap();
        let rows: Vec<_> = gens.iter().filter(|g| g.image == image).collect();
        assert_eq!(rows.len(), 2, "{image}: one row per area at level 0");
        let ids: Vec<u32> = serde_json::from_value(w["generated_ids"].clone()).unwrap();
        let ratios: Vec<f64> = serde_json::from_value(w["ratios"].clone()).unwrap();
        for g in rows {
            assert_eq!(g.generated_ids, ids, "{image}: greedy ids");
            assert_eq!(g.output, w["answer"].as_str().unwrap(), "{image}: answer");
            assert_eq!(g.stopped_on_eos, ids.last() == Some(&258));
            assert!(g.in_attention);
            assert_eq!(g.ratios.len(), ratios.len());
            for (l, (got, e)) in g.ratios.iter().zip(&ratios).enumerate() {
                let got = got.unwrap();
                assert!(
                    (got - e).abs() <= tol * e.abs().max(1.0),
                    "{image} layer {l}: r = {got}, transformers + numpy {e}"
                );
            }
        }
    }
    // The exact prompt, its tokens.
    let ckpt = bindscope_core::Checkpoint::resolve(&llava_dir().display().to_string()).unwrap();
    let namer = crate::run::Namer::load(&ckpt, 10, &ctx.device).unwrap();
    let user = &gens[0].prompt;
    let text = namer.chat_text(user).unwrap();
    let w0 = items
        .iter()
        .find(|w| w["image"] == gens[0].image.as_str())
        .unwrap();
    assert_eq!(text, w0["prompt"].as_str().unwrap());

    for f in [
        "config.json",
        "vit_mean.safetensors",
        "items.jsonl",
        "items.csv",
        "summary.json",
        "aggregates.csv",
        "aggregates.json",
        "fig_accuracy.svg",
        "fig_ref_clip_score.svg",
        "fig_sim_scene.svg",
        "attention.csv",
        "attention_target.svg",
        "attention_context.svg",
    ] {
        assert!(out.path().join(f).is_file(), "{f} written");
    }
    for f in ["fig_accuracy.svg", "attention_target.svg"] {
        let svg = std::fs::read_to_string(out.path().join(f)).unwrap();
        let problems = bindscope_core::plot::audit_svg(&svg);
        assert!(problems.is_empty(), "{f}: {problems:?}");
    }
    let items_csv = std::fs::read_to_string(out.path().join("items.csv")).unwrap();
    assert_eq!(items_csv.lines().count(), 7);
    assert!(
        items_csv
            .lines()
            .next()
            .unwrap()
            .ends_with("ratio_l0,ratio_l1")
    );
    let first: Vec<crate::run::ScoredRecord> =
        bindscope_core::run::read_jsonl(&out.path().join("items.jsonl"), "item").unwrap();

    // A second invocation resumes: nothing to generate, the same items; config.json keeps
    // when the run was created and says when it was resumed.
    let config = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p.join("config.json")).unwrap()).unwrap()
    };
    let created = config(out.path())["created"].clone();
    let again = crate::run::run(&cfg, &ctx).unwrap();
    assert_eq!(again.generated, 0);
    assert_eq!(config(out.path())["created"], created);
    assert!(config(out.path())["resumed"].is_string());
    // An interruption mid-line: the cut line is dropped and its image generated again.
    let gp = out.path().join("generations.jsonl");
    let text = std::fs::read_to_string(&gp).unwrap();
    let keep: Vec<&str> = text.lines().take(2).collect();
    std::fs::write(&gp, format!("{}\n{{\"image\": \"10", keep.join("\n"))).unwrap();
    std::fs::remove_file(out.path().join("scored.jsonl")).unwrap();
    let resumed = crate::run::run(&cfg, &ctx).unwrap();
    assert_eq!(resumed.generated, 2);
    let second: Vec<crate::run::ScoredRecord> =
        bindscope_core::run::read_jsonl(&out.path().join("items.jsonl"), "item").unwrap();
    assert_eq!(first, second);

    // Another configuration in the same directory is refused, naming the difference.
    let mut other = run_config(out.path());
    other.seed = 5;
    let e = crate::run::run(&other, &ctx).unwrap_err().to_string();
    assert!(e.contains("seed"), "{e}");
    // The same checkpoint written another way, the conditions in another order: a resume.
    let mut same = run_config(out.path());
    same.model = format!("{}/", llava_dir().display());
    same.areas = vec![NoiseArea::Context, NoiseArea::Target];
    assert_eq!(crate::run::run(&same, &ctx).unwrap().generated, 0);
    // Another chat template is another run.
    let edited = out.path().join("edited");
    std::fs::create_dir_all(&edited).unwrap();
    for f in std::fs::read_dir(llava_dir()).unwrap() {
        let p = f.unwrap().path();
        std::fs::copy(&p, edited.join(p.file_name().unwrap())).unwrap();
    }
    let t = std::fs::read_to_string(edited.join("chat_template.json")).unwrap();
    std::fs::write(
        edited.join("chat_template.json"),
        t.replace("'<|im_start|>assistant", "'Well. <|im_start|>assistant"),
    )
    .unwrap();
    let mut other = run_config(out.path());
    other.model = edited.display().to_string();
    let e = crate::run::run(&other, &ctx).unwrap_err().to_string();
    assert!(e.contains("chat_template_sha256"), "{e}");
}

/// The images are part of a run's identity by content; one process at a time per run
/// directory.
#[test]
fn a_replaced_image_is_another_run_and_a_running_directory_is_locked() {
    let data = broken(|_, _| {});
    let out = tempfile::tempdir().unwrap();
    let ctx = context();
    let mut cfg = run_config(out.path());
    cfg.data = data.path().to_path_buf();
    cfg.levels = vec![0.0];
    cfg.attention = false;
    cfg.limit = Some(1);
    crate::run::run(&cfg, &ctx).unwrap();
    // Held by another process (here another open file description of the same lock).
    let lock = bindscope_core::run::lock_run_dir(out.path()).unwrap();
    let e = crate::run::run(&cfg, &ctx).unwrap_err().to_string();
    assert!(e.contains("in use by another process"), "{e}");
    drop(lock);
    assert_eq!(crate::run::run(&cfg, &ctx).unwrap().generated, 0);
    // The first image replaced under its name: one pixel changed, the size and box kept.
    let ds = dataset::load(data.path(), false).unwrap();
    let path = ds.image_path(&ds.records[0]);
    let mut img = image::open(&path).unwrap().to_rgb8();
    img.put_pixel(0, 0, image::Rgb([255, 0, 0]));
    img.save(&path).unwrap();
    let e = crate::run::run(&cfg, &ctx).unwrap_err().to_string();
    assert!(e.contains("images_sha256"), "{e}");
}

/// Noise conditions: level 0 generated once and recorded per area, noisy levels per area, the
/// default attention analysis on 640 x 640 images only.
#[test]
fn noise_conditions_and_the_default_attention_sizes() {
    let out = tempfile::tempdir().unwrap();
    let mut cfg = run_config(out.path());
    cfg.areas = vec![NoiseArea::Target, NoiseArea::All];
    cfg.levels = vec![0.0, 0.5];
    cfg.attention_all_sizes = false;
    cfg.limit = Some(2);
    let s = crate::run::run(&cfg, &context()).unwrap();
    // 2 images: level 0 once (2 rows), level 0.5 per area (2 rows).
    assert_eq!((s.rows, s.generated), (8, 6));
    let gens = generations(out.path());
    let reference = llava_reference();
    for g in &gens {
        let big = g.size == [640, 640];
        assert_eq!(g.in_attention, big, "{}: only 640 x 640 images", g.image);
        assert_eq!(g.ratios.is_empty(), !big);
        if g.level == 0.0 {
            let w = reference["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["image"] == g.image.as_str())
                .unwrap();
            assert_eq!(g.output, w["answer"].as_str().unwrap());
        }
    }
    let agg = std::fs::read_to_string(out.path().join("aggregates.csv")).unwrap();
    // rel_level high and clean x areas target, all x levels 0, 0.5, six metrics each.
    assert_eq!(agg.lines().count(), 1 + 2 * 2 * 2 * 6);
    // The mixed model reads the run's items.
    let fit =
        crate::lme::run_lme(&out.path().join("items.jsonl"), &out.path().join("lme")).unwrap();
    assert_eq!((fit.n_obs, fit.n_groups), (8, 2));
}

#[test]
fn run_options_and_checkpoints_are_checked() {
    let out = tempfile::tempdir().unwrap();
    let ctx = context();
    let mut cfg = run_config(&out.path().join("a"));
    cfg.areas = vec![];
    assert!(
        crate::run::run(&cfg, &ctx)
            .unwrap_err()
            .to_string()
            .contains("--areas")
    );
    let mut cfg = run_config(&out.path().join("b"));
    cfg.levels = vec![0.5, 0.5];
    let e = crate::run::run(&cfg, &ctx).unwrap_err().to_string();
    assert!(e.contains("--levels: 0.5 is given twice"), "{e}");
    let mut cfg = run_config(&out.path().join("b2"));
    cfg.threshold = f64::NAN;
    let e = crate::run::run(&cfg, &ctx).unwrap_err().to_string();
    assert!(e.contains("--threshold"), "{e}");
    // Similarities live in [−1, 1] (cosine) and [0, 1] (Levenshtein ratio); percentiles need
    // resamples.
    let mut cfg = run_config(&out.path().join("b3"));
    cfg.levenshtein_threshold = 2.0;
    let e = crate::run::run(&cfg, &ctx).unwrap_err().to_string();
    assert!(
        e.contains("--levenshtein-threshold must be a number in [0, 1]"),
        "{e}"
    );
    let mut cfg = run_config(&out.path().join("b4"));
    cfg.threshold = 1.5;
    let e = crate::run::run(&cfg, &ctx).unwrap_err().to_string();
    assert!(e.contains("--threshold must be a number in [-1, 1]"), "{e}");
    let mut cfg = run_config(&out.path().join("b5"));
    cfg.bootstrap = 0;
    let e = crate::run::run(&cfg, &ctx).unwrap_err().to_string();
    assert!(e.contains("--bootstrap must be at least 2"), "{e}");
    for d in ["b3", "b4", "b5"] {
        assert!(!out.path().join(d).exists(), "nothing written for {d}");
    }
    // A truncated image and a box the resize shrinks below a pixel: named before anything is
    // written, or left out with skip_invalid.
    let data = out.path().join("data");
    std::fs::create_dir_all(data.join("images")).unwrap();
    for f in std::fs::read_dir(fixture().join("images")).unwrap() {
        let p = f.unwrap().path();
        std::fs::copy(&p, data.join("images").join(p.file_name().unwrap())).unwrap();
    }
    let full = std::fs::read(fixture().join("images/1002_street_car_clean.jpg")).unwrap();
    std::fs::write(
        data.join("images/1002_street_car_clean.jpg"),
        &full[..full.len() / 2],
    )
    .unwrap();
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("metadata.json")).unwrap())
            .unwrap();
    meta["1001_kitchen_cup_high.jpg"]["target_bbox"] = serde_json::json!([10.9, 10.0, 1.0, 1.0]);
    std::fs::write(data.join("metadata.json"), meta.to_string()).unwrap();
    let mut cfg = run_config(&out.path().join("bad"));
    cfg.data = data.clone();
    let e = crate::run::run(&cfg, &ctx).unwrap_err().to_string();
    assert!(
        e.contains("2 image(s) cannot be prepared")
            && e.contains("1001_kitchen_cup_high.jpg: the box is 0 x 0 px after the resize")
            && e.contains("1002_street_car_clean.jpg"),
        "{e}"
    );
    assert!(!out.path().join("bad").exists(), "nothing written");
    cfg.skip_invalid = true;
    let s = crate::run::run(&cfg, &ctx).unwrap();
    assert_eq!((s.rows, s.invalid.len(), s.excluded), (2, 2, 1));
    let listed: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("bad/invalid.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(listed.len(), 2);
    // A checkpoint without a processor chat template.
    let bare = out.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    for f in std::fs::read_dir(llava_dir()).unwrap() {
        let p = f.unwrap().path();
        if p.file_name().unwrap() != "chat_template.json" {
            std::fs::copy(&p, bare.join(p.file_name().unwrap())).unwrap();
        }
    }
    let mut cfg = run_config(&out.path().join("c"));
    cfg.model = bare.display().to_string();
    let e = crate::run::run(&cfg, &ctx).unwrap_err().to_string();
    assert!(e.contains("no processor chat template"), "{e}");
    assert!(
        !out.path().join("c").exists(),
        "nothing written for a bad checkpoint"
    );
    // A CLIP checkpoint that is not one.
    let mut cfg = run_config(&out.path().join("d"));
    cfg.clip = llava_dir().display().to_string();
    let e = crate::run::run(&cfg, &ctx).unwrap_err().to_string();
    assert!(e.contains("--clip"), "{e}");
    assert!(!out.path().join("d").exists());
}

/// The dataset-mean maps resume from partial sums: the sums saved after the first instance are
/// taken as they are (here the first map doubled, so that a pass that ignored them and started
/// over would be caught: the mean is then the whole pass's plus a third of the first map).
#[test]
fn the_mean_attention_maps_resume_from_partial_sums() {
    let out = tempfile::tempdir().unwrap();
    let cfg = run_config(out.path());
    let ctx = context();
    crate::run::run(&cfg, &ctx).unwrap();
    let whole = crate::run::read_maps(&out.path().join("vit_mean.safetensors"))
        .unwrap()
        .unwrap();
    assert_eq!((whole.position, whole.count), (3, 3));
    // The partial sums after instance 0 (the first image, clean), then a resumed pass.
    let ckpt = bindscope_core::Checkpoint::resolve(&llava_dir().display().to_string()).unwrap();
    let namer = crate::run::Namer::load(&ckpt, 10, &ctx.device).unwrap();
    let ds = dataset::load(&fixture(), false).unwrap();
    let img = decode_file(ds.image_path(&ds.records[0]), &DecodeOptions::hf()).unwrap();
    let p = prepare(&img, ds.records[0].target_bbox).unwrap();
    let first = namer.vit_maps(&p.image).unwrap();
    let doubled: Vec<Vec<f64>> = first
        .iter()
        .map(|m| m.iter().map(|x| 2.0 * x).collect())
        .collect();
    crate::run::write_maps(
        &out.path().join("vit_mean.partial.safetensors"),
        &doubled,
        1,
        1,
    )
    .unwrap();
    for f in ["vit_mean.safetensors", "generations.jsonl", "scored.jsonl"] {
        std::fs::remove_file(out.path().join(f)).unwrap();
    }
    crate::run::run(&cfg, &ctx).unwrap();
    let resumed = crate::run::read_maps(&out.path().join("vit_mean.safetensors"))
        .unwrap()
        .unwrap();
    assert_eq!((resumed.position, resumed.count), (3, 3));
    assert!(!out.path().join("vit_mean.partial.safetensors").exists());
    let mut moved = 0.0f64;
    for ((a, b), f) in whole.maps.iter().zip(&resumed.maps).zip(&first) {
        for ((x, y), z) in a.iter().zip(b).zip(f) {
            assert!((x + z / 3.0 - y).abs() <= 1e-12, "{x} + {z}/3 vs {y}");
            moved = moved.max((x - y).abs());
        }
    }
    assert!(moved > 1e-3, "the partial sums were used");
}
