//! The shared attention kernel against transformers' own Llama functions
//! (`tests/fixtures/gen/attention.py`): rotary frequencies of the `default`, `linear` and
//! `llama3` rope types, `LlamaRotaryEmbedding` + `apply_rotary_pos_emb` (rotate-half), and
//! `eager_attention_forward` with grouped-query attention over a KV cache under the causal +
//! left-padding mask transformers builds for a query block after the cache. Then the cache
//! itself: decoding position by position gives what one causal pass over all positions gives.

mod common;

use bindscope_models::attention::{
    AttentionMask, KvCache, RopeScaling, RotaryEmbedding, rope_inv_freq,
    scaled_dot_product_attention,
};
use burn::prelude::*;
use common::Reference;

fn device() -> Device {
    bindscope_core::device::test_device()
}

/// 1e-5 on the CPU; GPU backends reorder the reductions of the softmax and the products.
fn tol() -> f32 {
    if bindscope_core::device::testing_on_accelerator() {
        1e-4
    } else {
        1e-5
    }
}

#[test]
fn rope_frequencies_match_transformers_for_each_rope_type() {
    let r = Reference::open("attention");
    let cases = [
        ("default", 10000.0, RopeScaling::Default),
        ("linear", 10000.0, RopeScaling::Linear { factor: 4.0 }),
        (
            "llama3",
            500000.0,
            RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 32.0,
            },
        ),
    ];
    for (name, theta, scaling) in cases {
        let (_, expected) = r.f32(&format!("inv_freq.{name}"));
        let got = rope_inv_freq(64, theta, &scaling);
        assert_eq!(got.len(), expected.len(), "{name}");
        for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
            let rel = ((a - b) / b).abs();
            assert!(
                rel <= 1e-6,
                "{name}: inv_freq[{i}] {a} vs {b} (rel {rel:e})"
            );
        }
    }
}

#[test]
fn rotary_embedding_is_rotate_half_as_transformers() {
    let r = Reference::open("attention");
    let dev = device();
    let rope = RotaryEmbedding::new(8, 10000.0, &RopeScaling::Default);
    let (cos, sin) = rope.cos_sin(r.int_tensor::<2>("position_ids", &dev));
    r.assert_close("cos", cos.clone(), 1e-6);
    r.assert_close("sin", sin.clone(), 1e-6);
    let q = RotaryEmbedding::apply(r.tensor::<4>("q", &dev), &cos, &sin);
    let k = RotaryEmbedding::apply(r.tensor::<4>("k_new", &dev), &cos, &sin);
    r.assert_close("q_rot", q, tol());
    r.assert_close("k_rot", k, tol());
}

#[test]
fn grouped_query_attention_over_a_cache_with_left_padding_matches_transformers() {
    let r = Reference::open("attention");
    let dev = device();
    let mut cache = KvCache::new();
    cache.append(r.tensor("k_past", &dev), r.tensor("v_past", &dev));
    assert_eq!(cache.len(), 3);
    let (k, v) = cache.append(r.tensor("k_rot", &dev), r.tensor("v_new", &dev));
    assert_eq!(cache.len(), 8);
    let mask = AttentionMask::CausalPadding(r.int_tensor("attention_mask", &dev));
    let q = r.tensor::<4>("q_rot", &dev);
    let (ctx, probs) =
        scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &mask, None, true);
    r.assert_close("context", ctx, tol());
    r.assert_close("probs", probs.expect("probabilities were requested"), tol());
    // The fused kernel (no probabilities) gives the same context.
    let (fused, none) = scaled_dot_product_attention(q, k, v, &mask, None, false);
    assert!(none.is_none());
    r.assert_close("context", fused, tol());
}

#[test]
fn causal_attention_without_a_cache_matches_transformers() {
    let r = Reference::open("attention");
    let dev = device();
    let (ctx, probs) = scaled_dot_product_attention(
        r.tensor("q_rot", &dev),
        r.tensor("k_rot", &dev),
        r.tensor("v_new", &dev),
        &AttentionMask::Causal,
        None,
        true,
    );
    r.assert_close("context_nocache", ctx, tol());
    r.assert_close("probs_nocache", probs.unwrap(), tol());
}

fn positions(x: Tensor<4>, range: std::ops::Range<usize>) -> Tensor<4> {
    let [n, h, _, d] = x.dims();
    x.slice([0..n, 0..h, range, 0..d])
}

/// Prefill 3 positions, then one position per step: every step's output equals the same row of
/// one causal pass over all 8 positions (the causal mask of a 1-query block after a cache must
/// let it see every cached key). A mask built from position 0 fails this at every step.
#[test]
fn decoding_step_by_step_with_the_cache_equals_one_causal_pass() {
    let r = Reference::open("attention");
    let dev = device();
    let keys = Tensor::cat(vec![r.tensor("k_past", &dev), r.tensor("k_rot", &dev)], 2);
    let values = Tensor::cat(vec![r.tensor("v_past", &dev), r.tensor("v_new", &dev)], 2);
    let q5 = r.tensor::<4>("q_rot", &dev);
    let queries = Tensor::cat(vec![positions(q5.clone(), 0..3), q5], 2); // [N, H, 8, Dh]
    let (full, _) = scaled_dot_product_attention(
        queries.clone(),
        keys.clone(),
        values.clone(),
        &AttentionMask::Causal,
        None,
        false,
    );
    let mut cache = KvCache::new();
    let (k, v) = cache.append(
        positions(keys.clone(), 0..3),
        positions(values.clone(), 0..3),
    );
    let (prefill, _) = scaled_dot_product_attention(
        positions(queries.clone(), 0..3),
        k,
        v,
        &AttentionMask::Causal,
        None,
        false,
    );
    let mut outs = vec![prefill];
    for p in 3..8 {
        let (k, v) = cache.append(
            positions(keys.clone(), p..p + 1),
            positions(values.clone(), p..p + 1),
        );
        let (step, probs) = scaled_dot_product_attention(
            positions(queries.clone(), p..p + 1),
            k,
            v,
            &AttentionMask::Causal,
            None,
            true,
        );
        // The newest query sees all p + 1 keys.
        let probs: Vec<f32> = probs
            .unwrap()
            .into_data()
            .convert::<f32>()
            .try_to_vec()
            .unwrap();
        assert!(
            probs.iter().all(|&w| w > 0.0),
            "step {p}: a cached key was masked"
        );
        outs.push(step);
    }
    let stepped = Tensor::cat(outs, 2);
    let diff = (stepped - full).abs().max().into_scalar::<f32>();
    assert!(
        diff <= tol(),
        "step-by-step vs one pass: max abs diff {diff:e}"
    );
}
