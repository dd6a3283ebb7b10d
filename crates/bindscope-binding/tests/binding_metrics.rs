//! Hand-checked cases of the readouts, the same/different rule and the geometric metrics, and the
//! correlation statistics against scipy (`tests/fixtures/binding/stats.json`, written by
//! `tests/fixtures/gen/binding_stats.py`).

use bindscope_binding::geometry::{
    Cloud, choose_indices, covariance_eigenvalues, global_geometry, local_isotropy,
};
use bindscope_binding::readout::{
    Bank, KnnScore, PcaScore, Readout, evaluate_binding, evaluate_samediff, percentile, pick,
    threshold_accuracy,
};
use bindscope_binding::scene::{NUM_SCENES, Scene};
use bindscope_binding::stats::{correlate, ols, pearson};
use bindscope_binding::tasks::{binding_trials, samediff_pairs};
use std::path::PathBuf;

/// A "perfect binder": one-hot shape at LEFT ⊕ one-hot shape at RIGHT, plus a weak colour code.
fn binder_bank() -> Bank {
    let rows: Vec<Vec<f32>> = (0..NUM_SCENES)
        .map(|id| {
            let s = Scene::from_id(id);
            let mut v = vec![0f32; 18];
            v[s.left.shape.index()] = 1.0;
            v[3 + s.right.shape.index()] = 1.0;
            v[6 + s.left.color.index()] = 0.1;
            v[12 + s.right.color.index()] = 0.1;
            v
        })
        .collect();
    Bank::new(&rows)
}

/// A "bag of features": which colours and which shapes are present, not where.
fn bag_bank(shape_weight: f32) -> Bank {
    let rows: Vec<Vec<f32>> = (0..NUM_SCENES)
        .map(|id| {
            let s = Scene::from_id(id);
            let mut v = vec![0f32; 9];
            v[s.left.color.index()] += 1.0;
            v[s.right.color.index()] += 1.0;
            v[6 + s.left.shape.index()] += shape_weight;
            v[6 + s.right.shape.index()] += shape_weight;
            v
        })
        .collect();
    Bank::new(&rows)
}

#[test]
fn readouts_on_hand_built_embeddings() {
    let trials = binding_trials(42, 500);
    let bank = binder_bank();
    for r in Readout::paper() {
        let res = evaluate_binding(&bank, &trials, r).unwrap();
        assert_eq!(
            res.accuracy, 1.0,
            "{r:?}: a position-bound shape code always finds the target"
        );
    }
    // Colour-dominated bag of features: D1 carries the query's exact colours → always chosen.
    let res = evaluate_binding(&bag_bank(0.1), &trials, Readout::Cosine).unwrap();
    assert_eq!(res.accuracy, 0.0);
    assert_eq!(res.chosen_fraction["d1"], 1.0);
    // A constant embedding ties everywhere: the first candidate in the shuffled order wins, so
    // accuracy is the fraction of trials with the target first.
    let constant = Bank::new(&vec![vec![1f32, 2.0, 3.0]; NUM_SCENES]);
    let res = evaluate_binding(&constant, &trials, Readout::Cosine).unwrap();
    let first = trials.iter().filter(|t| t.target_index() == 0).count() as f64 / 500.0;
    assert_eq!(res.accuracy, first);
    // Alternative scoring rules run and also solve the perfect binder.
    for r in [
        Readout::Knn {
            k: 60,
            score: KnnScore::Mean,
        },
        Readout::LocalPca {
            components: 32,
            neighbours: 50,
            score: PcaScore::ProjectedDistance,
        },
    ] {
        let res = evaluate_binding(&bank, &trials, r).unwrap();
        assert!(res.accuracy > 0.9, "{r:?}: {}", res.accuracy);
    }
    // Neighbourhoods that do not fit the bank are refused.
    assert!(
        evaluate_binding(
            &bank,
            &trials,
            Readout::Knn {
                k: NUM_SCENES,
                score: KnnScore::Shared
            }
        )
        .is_err()
    );
}

#[test]
fn pick_is_lexicographic_and_first_on_ties() {
    assert_eq!(pick(&[(0.5, 0.0), (0.7, 0.0), (0.7, 0.0), (0.1, 0.0)]), 1);
    assert_eq!(pick(&[(0.5, 0.1), (0.5, 0.3), (0.5, 0.2), (0.1, 0.9)]), 1);
    assert_eq!(pick(&[(f64::NAN, 0.0), (0.2, 0.0)]), 1);
}

#[test]
fn samediff_rule() {
    let pairs = samediff_pairs(42, 500);
    // The binder separates same (distance ≈ 0.01) from different (≥ 0.5) perfectly.
    let res = evaluate_samediff(&binder_bank(), &pairs);
    assert_eq!(res.accuracy, 1.0);
    // Colours only, all B colours new: every distance is 1 → every threshold calls all pairs
    // "same" → 50%.
    let res = evaluate_samediff(&bag_bank(0.0), &pairs);
    assert_eq!(res.accuracy, 0.5);
    assert!(res.distances.iter().all(|d| (*d - 1.0).abs() < 1e-12));
    // Hand case: percentile 30 gives 0.19 (only the first pair "same", 75%); 35 gives 0.23 (100%).
    let r = threshold_accuracy(&[0.1, 0.2, 0.8, 0.9], &[true, true, false, false]);
    assert_eq!(r.accuracy, 1.0);
    assert_eq!(r.best_percentile, 35.0);
    assert!((r.threshold - 0.23).abs() < 1e-12);
    assert_eq!(r.sweep.len(), 21);
    assert!((r.sweep[6].2 - 0.75).abs() < 1e-12);
}

#[test]
fn global_metrics_hand_cases() {
    // ±c·e_i for every axis: covariance exactly (2c²/(2D−1))·I → G.Iso = 1 − 1/D, G.PR = 1.
    for d in [4usize, 16, 64] {
        let rows: Vec<Vec<f64>> = (0..2 * d)
            .map(|j| {
                let mut v = vec![0.0; d];
                v[j / 2] = if j % 2 == 0 { 3.0 } else { -3.0 };
                v
            })
            .collect();
        let g = global_geometry(&Cloud::from_rows(&rows)).unwrap();
        assert!(
            (g.g_iso - (1.0 - 1.0 / d as f64)).abs() < 1e-12,
            "D={d}: {g:?}"
        );
        assert!((g.g_pr - 1.0).abs() < 1e-12, "D={d}: {g:?}");
        assert!((g.total_variance - d as f64 * 18.0 / (2 * d - 1) as f64).abs() < 1e-9);
    }
    // A rank-1 cloud t·v: G.PR = 1/D, G.Iso = 0.
    let d = 32;
    let v: Vec<f64> = (0..d).map(|i| (i as f64 * 0.37).sin() + 0.1).collect();
    let rows: Vec<Vec<f64>> = (0..50)
        .map(|t| v.iter().map(|x| x * (t as f64 - 20.0) * 0.3).collect())
        .collect();
    let g = global_geometry(&Cloud::from_rows(&rows)).unwrap();
    assert!((g.g_pr - 1.0 / d as f64).abs() < 1e-10, "{g:?}");
    assert!(g.g_iso.abs() < 1e-10, "{g:?}");
    // An isotropic Gaussian cloud: G.Iso close to 1 − 1/D (sampling noise only).
    let mut rng = bindscope_binding::tasks::item_rng(7, 9, 0);
    use rand::Rng;
    let d = 8;
    let rows: Vec<Vec<f64>> = (0..20_000)
        .map(|_| {
            (0..d)
                .map(|_| (0..12).map(|_| rng.random::<f64>()).sum::<f64>() - 6.0)
                .collect()
        })
        .collect();
    let g = global_geometry(&Cloud::from_rows(&rows)).unwrap();
    assert!((g.g_iso - (1.0 - 1.0 / d as f64)).abs() < 0.01, "{g:?}");
    assert!(g.g_pr > 0.99, "{g:?}");
    // More dimensions than points: the n×n route gives the same eigenvalues.
    let rows: Vec<Vec<f64>> = (0..5)
        .map(|i| {
            (0..40)
                .map(|j| ((i * 40 + j) as f64 * 0.618).fract())
                .collect()
        })
        .collect();
    let c = Cloud::from_rows(&rows);
    let ev = covariance_eigenvalues(&c, &[0, 1, 2, 3, 4]).unwrap();
    assert_eq!(ev.len(), 5);
    assert!(
        ev[4].abs() < 1e-12,
        "centred 5 points have rank ≤ 4: {ev:?}"
    );
    let trace: f64 = {
        let mean: Vec<f64> = (0..40)
            .map(|j| rows.iter().map(|r| r[j]).sum::<f64>() / 5.0)
            .collect();
        rows.iter()
            .map(|r| {
                r.iter()
                    .zip(&mean)
                    .map(|(a, m)| (a - m).powi(2))
                    .sum::<f64>()
            })
            .sum::<f64>()
            / 4.0
    };
    assert!((ev.iter().sum::<f64>() - trace).abs() < 1e-10);
}

#[test]
fn local_isotropy_hand_case() {
    // Two clusters in orthogonal directions. Cluster A: the anchor 10·e_1 and 2D points
    // 10·e_1 ± e_i; likewise B around 10·e_2. The anchor's 2D nearest neighbours by cosine are its
    // cluster's ± points, whose covariance is (2/(2D−1))·I: variance isotropy 1 − 1/D, normalized
    // effective rank and participation ratio 1 (m = min(2D − 1, D) = D).
    let d = 4;
    let mut rows: Vec<Vec<f64>> = Vec::new();
    for axis in [0usize, 1] {
        let mut c = vec![0.0; d];
        c[axis] = 10.0;
        rows.push(c.clone());
        for i in 0..d {
            for sgn in [1.0, -1.0] {
                let mut p = c.clone();
                p[i] += sgn;
                rows.push(p);
            }
        }
    }
    let cloud = Cloud::from_rows(&rows);
    let anchors = [0usize, 2 * d + 1];
    let li = local_isotropy(&cloud, &anchors, &[2 * d]).unwrap();
    let l = li[0];
    assert!((l.variance - (1.0 - 1.0 / d as f64)).abs() < 1e-12, "{l:?}");
    assert!((l.effective_rank - 1.0).abs() < 1e-12, "{l:?}");
    assert!((l.participation_ratio - 1.0).abs() < 1e-12, "{l:?}");
    assert!(local_isotropy(&cloud, &anchors, &[1]).is_err());
    // Anchor selection: seeded, distinct, stable.
    let a = choose_indices(1000, 500, 42, 3);
    let mut s = a.clone();
    s.sort_unstable();
    s.dedup();
    assert_eq!(s.len(), 500);
    assert_eq!(a, choose_indices(1000, 500, 42, 3));
    assert_eq!(choose_indices(10, 500, 42, 3).len(), 10);
}

fn stats_fixture() -> serde_json::Value {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/binding/stats.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn col(v: &serde_json::Value, k: &str) -> Vec<f64> {
    v["inputs"][k]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(a: f64, b: f64, tol: f64, what: &str) {
    assert!(
        (a - b).abs() <= tol * (1.0 + b.abs()),
        "{what}: {a} vs scipy {b}"
    );
}

#[test]
fn statistics_match_scipy() {
    let fx = stats_fixture();
    let y = col(&fx, "binding");
    let dims = col(&fx, "embed_dim");
    let params = col(&fx, "num_params");
    for m in ["jer", "same_diff", "g_iso"] {
        let x = col(&fx, m);
        let e = &fx["metrics"][m];
        let c = correlate(m, &x, &y, &[&dims, &params]);
        let f = |k: &str| e[k].as_f64().unwrap();
        close(
            c.pearson.r,
            f("pearson_r"),
            1e-12,
            &format!("{m} pearson r"),
        );
        close(c.pearson.p, f("pearson_p"), 1e-9, &format!("{m} pearson p"));
        let pc = c.partial.expect("12 models are enough");
        close(pc.r, f("partial_r"), 1e-9, &format!("{m} partial r"));
        close(pc.p, f("partial_p"), 1e-8, &format!("{m} partial p"));
        assert_eq!(
            c.jackknife.significant as u64,
            e["jackknife_significant"].as_u64().unwrap(),
            "{m} jackknife"
        );
        assert_eq!(c.jackknife.subsets, 12);
        close(
            c.jackknife.r_min,
            f("jackknife_r_min"),
            1e-12,
            &format!("{m} jackknife r_min"),
        );
        close(
            c.jackknife.r_max,
            f("jackknife_r_max"),
            1e-12,
            &format!("{m} jackknife r_max"),
        );
    }
    let jer = col(&fx, "jer");
    let sd = col(&fx, "same_diff");
    let reg = ols(&[&jer, &sd], &y);
    let e = &fx["ols"];
    for (a, b) in reg.coef.iter().zip(e["coef"].as_array().unwrap()) {
        close(*a, b.as_f64().unwrap(), 1e-9, "ols coef");
    }
    close(reg.r2, e["r2"].as_f64().unwrap(), 1e-10, "ols r2");
    close(reg.loo_r2, e["loo_r2"].as_f64().unwrap(), 1e-9, "loo r2");
    for (a, b) in reg
        .loo_predictions
        .iter()
        .zip(e["loo_predictions"].as_array().unwrap())
    {
        close(*a, b.as_f64().unwrap(), 1e-10, "loo prediction");
    }
    // numpy's linear percentile.
    let pc = &fx["percentiles"];
    let vals: Vec<f64> = pc["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    for (p, want) in pc["p"]
        .as_array()
        .unwrap()
        .iter()
        .zip(pc["expected"].as_array().unwrap())
    {
        close(
            percentile(&vals, p.as_f64().unwrap()),
            want.as_f64().unwrap(),
            1e-14,
            "percentile",
        );
    }
    // Perfect correlation: p = 0; constant variable: NaN.
    assert_eq!(pearson(&[1.0, 2.0, 3.0, 4.0], &[2.0, 4.0, 6.0, 8.0]).p, 0.0);
    assert!(pearson(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]).r.is_nan());
}
