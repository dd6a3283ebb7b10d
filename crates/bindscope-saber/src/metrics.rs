//! Ranking metrics over cosine scores, tie-aware (see the crate docs for the definitions).

/// Average precision of one query: `(1/|R|) Σ_{r ∈ R} P(s_r)` with
/// `P(s) = #{relevant with score ≥ s} / #{items with score ≥ s}`.
///
/// Equals the mean of precision@rank over the relevant items when scores are distinct, and
/// scikit-learn's `average_precision_score(relevant_mask, scores)` in general (tied items
/// share the rank of the last of them). NaN scores count as the lowest possible score.
///
/// # Panics
/// If `relevant` is empty or holds an index out of range.
pub fn average_precision(scores: &[f32], relevant: &[usize]) -> f64 {
    assert!(
        !relevant.is_empty(),
        "average precision needs at least one relevant item"
    );
    let key = |s: f32| if s.is_nan() { f32::NEG_INFINITY } else { s };
    let rel_scores: Vec<f32> = relevant.iter().map(|&r| key(scores[r])).collect();
    let mut sum = 0.0f64;
    for &s in &rel_scores {
        let at_or_above = scores.iter().filter(|&&x| key(x) >= s).count();
        let rel_at_or_above = rel_scores.iter().filter(|&&x| x >= s).count();
        sum += rel_at_or_above as f64 / at_or_above as f64;
    }
    sum / relevant.len() as f64
}

/// Credit of a multiple-choice answer: 1 when `scores[answer]` is the strict maximum, `1/k`
/// when it ties with `k − 1` others at the maximum, 0 otherwise.
pub fn mcq_credit(scores: &[f32], answer: usize) -> f64 {
    let key = |s: f32| if s.is_nan() { f32::NEG_INFINITY } else { s };
    let best = scores
        .iter()
        .copied()
        .map(key)
        .fold(f32::NEG_INFINITY, f32::max);
    if key(scores[answer]) < best {
        return 0.0;
    }
    1.0 / scores.iter().filter(|&&s| key(s) == best).count() as f64
}

/// Fractional "wins" of each option: the options tied at the maximum share one unit.
pub fn winners(scores: &[f32]) -> Vec<f64> {
    let key = |s: f32| if s.is_nan() { f32::NEG_INFINITY } else { s };
    let best = scores
        .iter()
        .copied()
        .map(key)
        .fold(f32::NEG_INFINITY, f32::max);
    let k = scores.iter().filter(|&&s| key(s) == best).count() as f64;
    scores
        .iter()
        .map(|&s| if key(s) == best { 1.0 / k } else { 0.0 })
        .collect()
}

/// Rank of item `i` (1-based, pessimistic for ties: 1 + number of items with a score ≥ its
/// score, other than itself).
pub fn rank_of(scores: &[f32], i: usize) -> usize {
    let key = |s: f32| if s.is_nan() { f32::NEG_INFINITY } else { s };
    let s = key(scores[i]);
    1 + scores
        .iter()
        .enumerate()
        .filter(|&(j, &x)| j != i && key(x) >= s)
        .count()
}
