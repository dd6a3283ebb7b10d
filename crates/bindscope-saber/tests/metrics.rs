//! Ranking metrics against hand-computed values and against `fixtures/ap_cases.json`
//! (scikit-learn's `average_precision_score` restated with numpy in `fixtures/ap_reference.py`).

use bindscope_saber::metrics::{average_precision, mcq_credit, rank_of, winners};

#[test]
fn average_precision_hand_cases() {
    // Relevant at ranks 2 and 4: (1/2 + 2/4) / 2.
    assert_eq!(average_precision(&[0.9, 0.8, 0.7, 0.6], &[1, 3]), 0.5);
    // Relevant at ranks 1 and 3: (1/1 + 2/3) / 2.
    assert!(
        (average_precision(&[0.9, 0.1, 0.7, 0.6], &[0, 3]) - (1.0 + 2.0 / 3.0) / 2.0).abs() < 1e-12
    );
    // Single relevant item first / last of 4.
    assert_eq!(average_precision(&[0.1, 0.2, 0.3, 0.4], &[3]), 1.0);
    assert_eq!(average_precision(&[0.1, 0.2, 0.3, 0.4], &[0]), 0.25);
    // A tie with an irrelevant item shares the rank: precision 1/2 whichever order.
    assert_eq!(average_precision(&[0.5, 0.5, 0.3], &[0]), 0.5);
    assert_eq!(average_precision(&[0.5, 0.5, 0.3], &[1]), 0.5);
    // NaN counts as the lowest score.
    assert_eq!(average_precision(&[f32::NAN, 0.2, 0.3], &[0]), 1.0 / 3.0);
}

#[test]
fn average_precision_matches_sklearn_reference() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ap_cases.json");
    let cases: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(cases.len() > 50);
    for (i, c) in cases.iter().enumerate() {
        let scores: Vec<f32> = c["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let rel: Vec<usize> = c["relevant"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        let want = c["ap"].as_f64().unwrap();
        let got = average_precision(&scores, &rel);
        assert!(
            (got - want).abs() < 1e-12,
            "case {i}: got {got}, sklearn {want}"
        );
    }
}

#[test]
fn mcq_credit_and_ties() {
    assert_eq!(mcq_credit(&[0.9, 0.1, 0.2, 0.3], 0), 1.0);
    assert_eq!(mcq_credit(&[0.1, 0.9, 0.2, 0.3], 0), 0.0);
    assert_eq!(mcq_credit(&[0.9, 0.9, 0.2, 0.3], 0), 0.5);
    assert_eq!(mcq_credit(&[0.5, 0.5, 0.5, 0.5], 0), 0.25);
    assert_eq!(
        winners(&[0.5, 0.5, 0.1, 0.5]),
        vec![1.0 / 3.0, 1.0 / 3.0, 0.0, 1.0 / 3.0]
    );
    assert_eq!(rank_of(&[0.5, 0.5, 0.1, 0.7], 0), 3);
    assert_eq!(rank_of(&[0.5, 0.4, 0.1, 0.3], 0), 1);
}
