//! End-to-end tests of `experiments geb score`: the committed lmms-eval 0.7.3 cases scored
//! through the command line (per-item scores, means over items, per source and category), the
//! paired gap, same seed → same bits, and every refused input naming its line with nothing
//! written.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{root, text};

fn scratch(name: &str) -> PathBuf {
    crate::common::scratch("geb", name)
}

/// `geb score --predictions PREDS [--pair PAIR] --out OUT EXTRA…`.
fn score_args(preds: &Path, pair: Option<&Path>, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["geb", "score", "--predictions"].map(String::from).into();
    args.push(preds.display().to_string());
    if let Some(p) = pair {
        args.push("--pair".into());
        args.push(p.display().to_string());
    }
    args.push("--out".into());
    args.push(out.display().to_string());
    args.extend(extra.iter().map(|e| e.to_string()));
    args
}

fn run(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(args)
        .output()
        .expect("runs")
}

fn ok(args: &[String]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "experiments {args:?} failed:\n{}",
        text(&o)
    );
    text(&o)
}

fn err(args: &[String]) -> String {
    let o = run(args);
    assert!(
        !o.status.success(),
        "experiments {args:?} should have failed:\n{}",
        text(&o)
    );
    text(&o)
}

fn read_json(p: &Path) -> Value {
    let t = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The lmms-eval cases (`crates/bindscope-geb/tests/fixtures/lmms_eval_cases.jsonl`) as
/// prediction records with ids `c1`, `c2`, …, and the score lmms-eval gave each.
fn cases() -> Vec<(Value, f64)> {
    let path = root().join("crates/bindscope-geb/tests/fixtures/lmms_eval_cases.jsonl");
    let t = std::fs::read_to_string(&path).unwrap();
    t.lines()
        .enumerate()
        .map(|(i, l)| {
            let c: Value = serde_json::from_str(l).unwrap();
            let mut rec = serde_json::json!({
                "id": format!("c{}", i + 1),
                "source": c["source"],
                "prediction": c["prediction"],
                "answers": c["answers"],
                "model": "fixture",
            });
            if let Some(d) = c.get("dataset").filter(|d| !d.is_null()) {
                rec["dataset"] = d.clone();
            }
            (rec, c["score"].as_f64().unwrap())
        })
        .collect()
}

fn write_records(path: &Path, records: &[Value]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let body: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, body).unwrap();
}

fn default_category(source: &str) -> &'static str {
    match source {
        "mme" | "cvbench" | "realworldqa" => "natural",
        "ocrbench" | "textvqa" => "scene_text",
        _ => "document",
    }
}

/// `sum(v) / len(v)` in order, percent.
fn mean_pct(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64 * 100.0
}

fn group<'a>(summary: &'a Value, list: &str, name: &str) -> &'a Value {
    summary[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("{list} has no {name}: {summary}"))
}

#[test]
fn cases_scored_through_the_cli_match_lmms_eval_and_aggregate_over_items() {
    let dir = scratch("cases");
    let cases = cases();
    let preds = dir.join("in/predictions.jsonl");
    let records: Vec<Value> = cases.iter().map(|(r, _)| r.clone()).collect();
    write_records(&preds, &records);
    let out = dir.join("out");
    let printed = ok(&score_args(&preds, None, &out, &["--bootstrap", "500"]));
    assert!(printed.contains("overall"), "{printed}");
    assert!(printed.contains("lmms-eval 0.7.3"), "{printed}");

    // items.jsonl: every input line, in order, with its fields, category and score.
    let items = std::fs::read_to_string(out.join("items.jsonl")).unwrap();
    let items: Vec<Value> = items
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(items.len(), cases.len());
    for (item, (rec, score)) in items.iter().zip(&cases) {
        for (k, v) in rec.as_object().unwrap() {
            assert_eq!(&item[k], v, "{k} of {item}");
        }
        let s = item["score"].as_f64().unwrap();
        assert!((s - score).abs() <= 1e-12, "{item}: lmms-eval gave {score}");
        let src = rec["source"].as_str().unwrap();
        assert_eq!(item["category"], default_category(src));
    }

    // summary.json: the overall mean over items, not over sources; each source and category.
    let summary = read_json(&out.join("summary.json"));
    let all: Vec<f64> = cases.iter().map(|(_, s)| *s).collect();
    let overall = summary["overall"]["score"].as_f64().unwrap();
    assert!((overall - mean_pct(&all)).abs() < 1e-9, "{overall}");
    assert_eq!(summary["overall"]["items"], cases.len());
    let mut source_means = Vec::new();
    for src in [
        "mme",
        "cvbench",
        "realworldqa",
        "ocrbench",
        "textvqa",
        "chartqa",
        "docvqa",
        "infovqa",
    ] {
        let s: Vec<f64> = cases
            .iter()
            .filter(|(r, _)| r["source"] == src)
            .map(|(_, s)| *s)
            .collect();
        let g = group(&summary, "sources", src);
        assert_eq!(g["items"], s.len(), "{src}");
        assert!((g["score"].as_f64().unwrap() - mean_pct(&s)).abs() < 1e-9);
        source_means.push(mean_pct(&s));
        let [lo, hi] = [0, 1].map(|k| g["ci95"][k].as_f64().unwrap());
        assert!(lo <= mean_pct(&s) && mean_pct(&s) <= hi, "{src}: {g}");
    }
    let over_sources = source_means.iter().sum::<f64>() / source_means.len() as f64;
    assert!(
        (overall - over_sources).abs() > 1e-6,
        "the fixture cannot tell a mean over items from a mean over sources"
    );
    for cat in ["natural", "scene_text", "document"] {
        let s: Vec<f64> = cases
            .iter()
            .filter(|(r, _)| default_category(r["source"].as_str().unwrap()) == cat)
            .map(|(_, s)| *s)
            .collect();
        let g = group(&summary, "categories", cat);
        assert!((g["score"].as_f64().unwrap() - mean_pct(&s)).abs() < 1e-9);
    }
    assert_eq!(summary["bootstrap"]["resamples"], 500);
    assert_eq!(summary["bootstrap"]["seed"], 20260722u64);

    // summary.csv: the same numbers, two decimals.
    let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next().unwrap(), "scope,name,items,score,ci_lo,ci_hi");
    let first = lines.next().unwrap();
    assert_eq!(
        first,
        format!(
            "overall,overall,{},{:.2},{:.2},{:.2}",
            cases.len(),
            overall,
            summary["overall"]["ci95"][0].as_f64().unwrap(),
            summary["overall"]["ci95"][1].as_f64().unwrap()
        )
    );
    assert_eq!(lines.count(), 3 + 8);
    let config = read_json(&out.join("config.json"));
    assert_eq!(config["study"], "geb");
}

#[test]
fn the_bare_path_scores_without_reasoning_stripping() {
    let dir = scratch("bare");
    let path = root().join("crates/bindscope-geb/tests/fixtures/lmms_eval_cases.jsonl");
    let t = std::fs::read_to_string(&path).unwrap();
    let mut records = Vec::new();
    let mut bare = Vec::new();
    for (i, l) in t.lines().enumerate() {
        let c: Value = serde_json::from_str(l).unwrap();
        if c["score"] == c["score_bare"] {
            continue;
        }
        let mut rec = serde_json::json!({
            "id": i, "source": c["source"], "prediction": c["prediction"], "answers": c["answers"],
        });
        if let Some(d) = c.get("dataset").filter(|d| !d.is_null()) {
            rec["dataset"] = d.clone();
        }
        records.push(rec);
        bare.push(c["score_bare"].as_f64().unwrap());
    }
    assert!(records.len() > 20, "{} cases differ", records.len());
    let preds = dir.join("in/p.jsonl");
    write_records(&preds, &records);
    let out = dir.join("out");
    ok(&score_args(
        &preds,
        None,
        &out,
        &["--bootstrap", "0", "--no-strip-reasoning"],
    ));
    let items = std::fs::read_to_string(out.join("items.jsonl")).unwrap();
    for (l, want) in items.lines().zip(&bare) {
        let v: Value = serde_json::from_str(l).unwrap();
        assert!((v["score"].as_f64().unwrap() - want).abs() <= 1e-12, "{v}");
    }
    let summary = read_json(&out.join("summary.json"));
    assert!(summary["overall"]["ci95"].is_null());
    assert!(summary["reasoning_tags"].is_null());
}

/// Ten MME items: the predictions get 7 right, the control 4, on the same ids in another order.
fn pair_files(dir: &Path) -> (PathBuf, PathBuf) {
    let rec = |id: usize, pred: &str, gold: &str| serde_json::json!({"id": id, "source": "mme", "prediction": pred, "answers": [gold]});
    let gold = ["Yes", "No"];
    let a: Vec<Value> = (0..10)
        .map(|i| {
            let g = gold[i % 2];
            let p = if i < 7 { g } else { gold[(i + 1) % 2] };
            rec(i, p, g)
        })
        .collect();
    let b: Vec<Value> = (0..10)
        .rev()
        .map(|i| {
            let g = gold[i % 2];
            let p = if i < 4 { g } else { gold[(i + 1) % 2] };
            rec(i, p, g)
        })
        .collect();
    let (pa, pb) = (dir.join("in/matched.jsonl"), dir.join("in/control.jsonl"));
    write_records(&pa, &a);
    write_records(&pb, &b);
    (pa, pb)
}

#[test]
fn paired_gap_and_same_seed_same_bits() {
    let dir = scratch("pair");
    let (a, b) = pair_files(&dir);
    let score = |out: &Path, seed: &str| {
        ok(&score_args(
            &a,
            Some(&b),
            out,
            &[
                "--seed",
                seed,
                "--bootstrap",
                "2000",
                "--paired-bootstrap",
                "3000",
            ],
        ))
    };
    let printed = score(&dir.join("o1"), "7");
    assert!(printed.contains("gap"), "{printed}");
    score(&dir.join("o2"), "7");
    score(&dir.join("o3"), "8");
    let s1 = read_json(&dir.join("o1/summary.json"));
    let s2 = read_json(&dir.join("o2/summary.json"));
    let s3 = read_json(&dir.join("o3/summary.json"));
    let p = &s1["paired"]["overall"];
    assert_eq!(p["items"], 10);
    assert!((p["score"].as_f64().unwrap() - 70.0).abs() < 1e-9, "{p}");
    assert!((p["control"].as_f64().unwrap() - 40.0).abs() < 1e-9, "{p}");
    assert!((p["gap"].as_f64().unwrap() - 30.0).abs() < 1e-9, "{p}");
    let [lo, hi] = [0, 1].map(|k| p["ci95"][k].as_f64().unwrap());
    assert!(lo < 30.0 && 30.0 < hi && lo >= -100.0 && hi <= 100.0, "{p}");
    // Same seed, same bits (the JSON holds shortest round-trip decimals).
    for key in ["overall", "paired"] {
        assert_eq!(s1[key], s2[key], "{key}");
    }
    // (Ten binary items leave few distinct intervals, so another seed may give the same one;
    // the seed reaching the resampler is checked by the unit tests and the numpy fixture.)
    assert_eq!(s3["bootstrap"]["seed"], 8);
    let csv = std::fs::read_to_string(dir.join("o1/summary.csv")).unwrap();
    assert!(
        csv.starts_with("scope,name,items,score,ci_lo,ci_hi,control,gap,gap_lo,gap_hi\n"),
        "{csv}"
    );
}

#[test]
fn export_resamples_writes_the_indices() {
    let dir = scratch("export");
    let (a, b) = pair_files(&dir);
    let out = dir.join("out");
    ok(&score_args(
        &a,
        Some(&b),
        &out,
        &[
            "--bootstrap",
            "50",
            "--paired-bootstrap",
            "60",
            "--export-resamples",
        ],
    ));
    for (name, rows) in [("marginal-overall", 50), ("paired-overall", 60)] {
        let bytes = std::fs::read(out.join(format!("resamples/{name}.safetensors"))).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let t = st.tensor("indices").unwrap();
        assert_eq!(t.dtype(), safetensors::Dtype::U32);
        assert_eq!(t.shape(), &[rows, 10]);
    }
    assert!(out.join("resamples/marginal-mme.safetensors").exists());
}

/// A file with `bad` among good lines, and the text its refusal must hold.
fn refused(name: &str, lines: &[&str], expect: &[&str]) {
    let dir = scratch(name);
    let preds = dir.join("in/p.jsonl");
    std::fs::create_dir_all(preds.parent().unwrap()).unwrap();
    std::fs::write(&preds, lines.join("\n")).unwrap();
    let out = dir.join("out");
    let msg = err(&score_args(&preds, None, &out, &[]));
    assert!(msg.contains("p.jsonl"), "{name}: {msg}");
    for e in expect {
        assert!(msg.contains(e), "{name}: expected {e:?} in:\n{msg}");
    }
    assert!(!msg.contains("panicked"), "{msg}");
    assert!(!out.exists(), "{name}: {} was created", out.display());
}

const GOOD: &str = r#"{"id": 1, "source": "mme", "prediction": "Yes", "answers": ["Yes"]}"#;

#[test]
fn bad_inputs_name_the_line_and_write_nothing() {
    refused(
        "unknown-source",
        &[
            GOOD,
            r#"{"id": 2, "source": "vqav2", "prediction": "a", "answers": ["a"]}"#,
        ],
        &["line 2", "unknown source \"vqav2\"", "textvqa"],
    );
    refused(
        "missing-fields",
        &[
            r#"{"id": 1, "source": "mme", "answers": ["Yes"]}"#,
            r#"{"source": "mme", "prediction": "Yes", "answers": ["Yes"]}"#,
            r#"{"id": 3, "source": "mme", "prediction": "Yes"}"#,
            r#"{"id": 4, "prediction": "Yes", "answers": ["Yes"]}"#,
        ],
        &[
            "line 1: missing field `prediction`",
            "line 2: missing field `id`",
            "line 3: missing field `answers`",
            "line 4: missing field `source`",
        ],
    );
    refused("empty", &[], &["no prediction records"]);
    refused("blank", &["", "   "], &["no prediction records"]);
    refused(
        "duplicate",
        &[
            GOOD,
            r#"{"id": 2, "source": "mme", "prediction": "No", "answers": ["No"]}"#,
            r#"{"id": 1, "source": "mme", "prediction": "No", "answers": ["No"]}"#,
        ],
        &["line 3: duplicate id 1 (first on line 1)"],
    );
    refused(
        "malformed",
        &[GOOD, r#"{"id": 2, "source": "mme", "#, "[1, 2]"],
        &["line 2: not valid JSON", "line 3: expected a JSON object"],
    );
    refused(
        "null-prediction",
        &[
            r#"{"id": 1, "source": "mme", "prediction": null, "answers": ["Yes"]}"#,
            r#"{"id": 2, "source": "mme", "prediction": 3, "answers": ["Yes"]}"#,
        ],
        &[
            "line 1: `prediction` must be a string, found null",
            "line 2: `prediction` must be a string, found a number",
        ],
    );
    refused(
        "bad-answers",
        &[
            r#"{"id": 1, "source": "mme", "prediction": "Yes", "answers": "Yes"}"#,
            r#"{"id": 2, "source": "textvqa", "prediction": "a", "answers": ["a", 2]}"#,
            r#"{"id": 3, "source": "docvqa", "prediction": "a", "answers": []}"#,
        ],
        &[
            "line 1:",
            "line 2: `answers[1]` must be a string",
            "line 3:",
        ],
    );
    refused(
        "bad-category",
        &[
            r#"{"id": 1, "source": "mme", "prediction": "Yes", "answers": ["Yes"], "category": "nature"}"#,
        ],
        &["line 1: unknown category \"nature\""],
    );
}

#[test]
fn pair_mismatches_and_bad_options_write_nothing() {
    let dir = scratch("pair-bad");
    let (a, _) = pair_files(&dir);
    let other = dir.join("in/other.jsonl");
    let check = |pair_lines: &[&str], expect: &str| {
        std::fs::write(&other, pair_lines.join("\n")).unwrap();
        let out = dir.join("out");
        let msg = err(&score_args(&a, Some(&other), &out, &[]));
        assert!(msg.contains(expect), "expected {expect:?} in:\n{msg}");
        assert!(!out.exists());
    };
    let full: Vec<String> = (0..10)
        .map(|i| {
            format!(r#"{{"id": {i}, "source": "mme", "prediction": "Yes", "answers": ["Yes"]}}"#)
        })
        .collect();
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    check(&refs[..9], "id 9 (line 10 of the predictions) is missing");
    let mut extra = refs.clone();
    let x = r#"{"id": 10, "source": "mme", "prediction": "Yes", "answers": ["Yes"]}"#;
    extra.push(x);
    check(
        &extra,
        "1 id(s) are not in the predictions, e.g. 10 (line 11)",
    );
    let mut swapped = refs.clone();
    let y = r#"{"id": 3, "source": "cvbench", "prediction": "(A)", "answers": ["(A)"]}"#;
    swapped[3] = y;
    check(
        &swapped,
        "id 3 is cvbench here (line 4) but mme in the predictions",
    );

    let out = dir.join("out");
    let msg = err(&score_args(
        &a,
        None,
        &out,
        &["--reasoning-tags", "[[\"<think>\"]]"],
    ));
    assert!(msg.contains("pair 1 has 1 strings"), "{msg}");
    assert!(!out.exists());
    let msg = err(&score_args(&dir.join("in/absent.jsonl"), None, &out, &[]));
    assert!(msg.contains("absent.jsonl"), "{msg}");
    assert!(!out.exists());
}
