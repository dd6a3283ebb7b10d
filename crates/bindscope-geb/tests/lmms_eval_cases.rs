//! Every per-item case scored by lmms-eval 0.7.3's own functions
//! (`tests/fixtures/lmms_eval_cases.py`, run by hand with `pip install lmms-eval==0.7.3`) is
//! matched: `score` on lmms-eval's command-line path (default reasoning tags stripped first),
//! `score_bare` with `--reasoning_tags none`.

use bindscope_geb::metrics::{self, Item, Source, reasoning};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    source: String,
    prediction: String,
    answers: Vec<String>,
    dataset: Option<String>,
    score: f64,
    score_bare: f64,
    note: String,
}

fn cases() -> Vec<Case> {
    let text = include_str!("fixtures/lmms_eval_cases.jsonl");
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("case line {}: {e}", i + 1))
        })
        .collect()
}

/// The tolerance of the comparison (scores are ratios of small integers or exact 0/1).
const TOL: f64 = 1e-12;

#[test]
fn every_case_matches_lmms_eval() {
    let cases = cases();
    assert!(cases.len() >= 300, "{} cases", cases.len());
    let tags = reasoning::default_tags();
    let mut failures = Vec::new();
    let mut per_source = std::collections::BTreeMap::<&str, usize>::new();
    for (i, c) in cases.iter().enumerate() {
        let source = Source::from_name(&c.source).expect("known source");
        *per_source.entry(source.name()).or_default() += 1;
        let item = Item {
            source,
            prediction: &c.prediction,
            answers: &c.answers,
            dataset: c.dataset.as_deref(),
        };
        let got = metrics::score(&item, Some(&tags)).expect("scorable");
        let bare = metrics::score(&item, None).expect("scorable");
        if (got - c.score).abs() > TOL || (bare - c.score_bare).abs() > TOL {
            failures.push(format!(
                "line {} [{}] {:?} vs {:?}: got {got} / bare {bare}, lmms-eval {} / {} ({})",
                i + 1,
                c.source,
                c.prediction,
                c.answers,
                c.score,
                c.score_bare,
                c.note
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    for s in Source::ALL {
        assert!(
            per_source.get(s.name()).copied().unwrap_or(0) >= 30,
            "too few {} cases",
            s.name()
        );
    }
}

#[test]
fn the_cases_exercise_the_reasoning_strip() {
    let differ = cases().iter().filter(|c| c.score != c.score_bare).count();
    assert!(differ >= 20, "only {differ} cases where stripping matters");
}
