//! The shared attention kernel against transformers' own Llama functions
//! (`tests/fixtures/gen/attention.py`): rotary frequencies of the `default`, `linear`,
//! `dynamic`, `yarn` and `llama3` rope types and yarn's attention factor, `LlamaRotaryEmbedding`
//! (with `dynamic` regrowing its frequencies past the original length, and `yarn` scaling cos
//! and sin), the rope parameters of config.json files in the transformers 5.x and 4.x layouts
//! as transformers reads them, and the refusal of what is not implemented;
//! `apply_rotary_pos_emb` (rotate-half), and
//! `eager_attention_forward` with grouped-query attention over a KV cache under the causal +
//! left-padding mask transformers builds for a query block after the cache. Then the cache
//! itself: decoding position by position gives what one causal pass over all positions gives.

use crate::common::Reference;
use bindscope_models::attention::{
    AttentionMask, KvCache, RopeScaling, RotaryEmbedding, dynamic_ntk_inv_freq, rope_from_config,
    rope_inv_freq, scaled_dot_product_attention,
};
use burn::prelude::*;

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
        let got = rope_inv_freq(64, theta, &scaling);
        assert_frequencies(&r, &format!("inv_freq.{name}"), &got);
    }
}

/// Relative difference at most 1e-6 for every frequency (an ulp or two of f32: torch's
/// vectorised `pow` and Rust's `powf` may round differently).
fn assert_frequencies(r: &Reference, key: &str, got: &[f32]) {
    let (_, expected) = r.f32(key);
    assert_eq!(got.len(), expected.len(), "{key}: length");
    for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
        let rel = ((a - b) / b).abs();
        assert!(rel <= 1e-6, "{key}: inv_freq[{i}] {a} vs {b} (rel {rel:e})");
    }
}

/// A scalar the generator stored as a one-element f32 tensor (from a Python float), against
/// ours rounded to f32: relative difference at most 1e-7.
fn assert_scalar(r: &Reference, key: &str, got: f64) {
    let (_, expected) = r.f32(key);
    let (a, b) = (got as f32, expected[0]);
    let rel = ((a - b) / b).abs();
    assert!(rel <= 1e-7, "{key}: {a} vs {b} (rel {rel:e})");
}

const DYNAMIC: RopeScaling = RopeScaling::Dynamic {
    factor: 4.0,
    original_max_position_embeddings: 32.0,
};

/// `_compute_dynamic_ntk_parameters` (head_dim 64, θ 10⁴, factor 4, original length 32): the
/// default frequencies at initialisation and for a sequence of 20 ≤ 32; for 100 > 32, those of
/// the grown base (which differ from the default ones: checked, so the comparison can fail).
#[test]
fn dynamic_ntk_frequencies_match_transformers_below_and_above_the_original_length() {
    let r = Reference::open("attention");
    let rope = RotaryEmbedding::new(64, 10000.0, &DYNAMIC);
    assert_eq!(rope.attention_scaling, 1.0);
    assert_frequencies(&r, "inv_freq.dynamic.init", &rope.inv_freq);
    assert_frequencies(
        &r,
        "inv_freq.dynamic.init",
        &rope_inv_freq(64, 10000.0, &DYNAMIC),
    );
    assert_frequencies(&r, "inv_freq.dynamic.s20", &rope.inv_freq_for(20));
    assert_frequencies(&r, "inv_freq.dynamic.s20", &rope.inv_freq_for(32));
    assert_frequencies(&r, "inv_freq.dynamic.s100", &rope.inv_freq_for(100));
    assert_frequencies(
        &r,
        "inv_freq.dynamic.s100",
        &dynamic_ntk_inv_freq(64, 10000.0, 4.0, 32.0, 100),
    );
    let (_, default) = r.f32("inv_freq.default");
    let (_, grown) = r.f32("inv_freq.dynamic.s100");
    assert!(
        default[1..]
            .iter()
            .zip(&grown[1..])
            .all(|(d, g)| (d - g).abs() > 1e-3 * d),
        "the reference's grown frequencies should differ from the default ones"
    );
}

/// The yarn cases of the generator (head_dim 64, θ 10⁴, factor 4, original length 32).
fn yarn_cases() -> Vec<(&'static str, RopeScaling)> {
    let with = |edit: &dyn Fn(&mut RopeScaling)| {
        let mut s = RopeScaling::yarn(4.0, 32.0);
        edit(&mut s);
        s
    };
    vec![
        ("defaults", RopeScaling::yarn(4.0, 32.0)),
        (
            "mscale",
            with(&|s| {
                if let RopeScaling::Yarn {
                    mscale,
                    mscale_all_dim,
                    beta_fast,
                    beta_slow,
                    ..
                } = s
                {
                    (*mscale, *mscale_all_dim) = (Some(1.0), Some(0.5));
                    (*beta_fast, *beta_slow) = (16.0, 2.0);
                }
            }),
        ),
        (
            "untruncated",
            with(&|s| {
                if let RopeScaling::Yarn { truncate, .. } = s {
                    *truncate = false;
                }
            }),
        ),
        (
            "attention_factor",
            with(&|s| {
                if let RopeScaling::Yarn {
                    attention_factor, ..
                } = s
                {
                    *attention_factor = Some(1.5);
                }
            }),
        ),
    ]
}

/// `_compute_yarn_parameters`: frequencies and attention factor with the defaults (factor 4 ⇒
/// 0.1·ln 4 + 1), with `mscale`/`mscale_all_dim` and other betas, with `truncate: false`, and
/// with an explicit `attention_factor`.
#[test]
fn yarn_frequencies_and_attention_factor_match_transformers() {
    let r = Reference::open("attention");
    for (case, scaling) in yarn_cases() {
        let rope = RotaryEmbedding::new(64, 10000.0, &scaling);
        assert_frequencies(&r, &format!("inv_freq.yarn.{case}"), &rope.inv_freq);
        assert_scalar(
            &r,
            &format!("attention_factor.yarn.{case}"),
            scaling.attention_factor(),
        );
        assert_eq!(rope.attention_scaling, scaling.attention_factor() as f32);
    }
    // The untruncated ramp is a different reference (so truncate is tested).
    let (_, a) = r.f32("inv_freq.yarn.defaults");
    let (_, b) = r.f32("inv_freq.yarn.untruncated");
    assert_ne!(a, b);
}

fn assert_cos_sin(r: &Reference, prefix: &str, rope: &RotaryEmbedding) {
    let dev = device();
    let (cos, sin) = rope.cos_sin(r.int_tensor::<2>(&format!("{prefix}.position_ids"), &dev));
    r.assert_close(&format!("{prefix}.cos"), cos, 1e-6);
    r.assert_close(&format!("{prefix}.sin"), sin, 1e-6);
}

/// A fresh dynamic `LlamaRotaryEmbedding` (head_dim 16, original length 32) called on positions
/// up to 47 regrows its frequencies for 48 positions; on positions up to 11 it keeps the default
/// ones. `cos_sin` reads the length from the positions the same way.
#[test]
fn dynamic_cos_sin_regrow_past_the_original_length_as_transformers() {
    let r = Reference::open("attention");
    let rope = RotaryEmbedding::new(16, 10000.0, &DYNAMIC);
    assert_cos_sin(&r, "dynamic.long", &rope);
    assert_frequencies(&r, "dynamic.long.inv_freq", &rope.inv_freq_for(48));
    assert_cos_sin(&r, "dynamic.short", &rope);
    assert_frequencies(&r, "dynamic.short.inv_freq", &rope.inv_freq);
    // The long call must not pass with the default frequencies.
    let plain = RotaryEmbedding::new(16, 10000.0, &RopeScaling::Default);
    let (cos, _) = plain.cos_sin(r.int_tensor::<2>("dynamic.long.position_ids", &device()));
    let diff = crate::common::max_abs_diff(cos, r.tensor("dynamic.long.cos", &device()));
    assert!(diff > 1e-2, "default frequencies came within {diff:e}");
}

/// yarn's cos and sin are multiplied by the attention factor (head_dim 16, positions up to 99).
#[test]
fn yarn_cos_sin_are_scaled_as_transformers() {
    let r = Reference::open("attention");
    let rope = RotaryEmbedding::new(16, 10000.0, &RopeScaling::yarn(4.0, 32.0));
    assert!(rope.attention_scaling > 1.1);
    assert_cos_sin(&r, "yarn", &rope);
}

fn rope_configs() -> serde_json::Map<String, serde_json::Value> {
    let path = crate::common::fixture("attention").join("rope_configs.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    match serde_json::from_str(&text).expect("rope_configs.json is JSON") {
        serde_json::Value::Object(m) => m,
        other => panic!("rope_configs.json: expected an object, got {other}"),
    }
}

fn usize_key(config: &serde_json::Value, key: &str) -> usize {
    config[key].as_u64().unwrap_or_else(|| panic!("{key}")) as usize
}

/// Every config.json of the fixture (transformers 5.x `rope_parameters`, 4.x `rope_theta` +
/// `rope_scaling` with `type` or `rope_type`, null, absent, defaults, a top-level
/// `original_max_position_embeddings`, `rope_scaling` over `rope_parameters`, and two saved by
/// `save_pretrained`) gives the frequencies and attention scaling transformers built from it,
/// and the rope type and parameters expected (frequencies alone cannot tell `dynamic` from
/// `default` below the original length).
#[test]
fn config_json_rope_parameters_in_both_layouts_read_as_transformers_reads_them() {
    let r = Reference::open("attention");
    let yarn = |factor, original, edit: &dyn Fn(&mut RopeScaling)| {
        let mut s = RopeScaling::yarn(factor, original);
        edit(&mut s);
        s
    };
    let llama3 = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 32.0,
    };
    let expected: Vec<(&str, f64, RopeScaling)> = vec![
        ("v5_default", 1e4, RopeScaling::Default),
        ("v5_linear", 1e4, RopeScaling::Linear { factor: 4.0 }),
        (
            "v5_dynamic",
            1e4,
            RopeScaling::Dynamic {
                factor: 4.0,
                original_max_position_embeddings: 128.0,
            },
        ),
        (
            "v5_yarn",
            1e6,
            yarn(4.0, 32.0, &|s| {
                if let RopeScaling::Yarn {
                    mscale,
                    mscale_all_dim,
                    ..
                } = s
                {
                    (*mscale, *mscale_all_dim) = (Some(1.0), Some(0.5));
                }
            }),
        ),
        ("v5_llama3", 5e5, llama3.clone()),
        ("v5_yarn_derived", 5e5, yarn(8.0, 16.0, &|_| {})),
        ("v5_yarn_no_original", 1e4, yarn(2.0, 128.0, &|_| {})),
        ("v4_null", 5e5, RopeScaling::Default),
        ("v4_no_rope_keys", 1e4, RopeScaling::Default),
        ("v4_type_linear", 1e4, RopeScaling::Linear { factor: 4.0 }),
        ("v4_rope_type_default", 1e5, RopeScaling::Default),
        ("v4_llama3", 5e5, llama3.clone()),
        ("v4_type_yarn", 1e6, yarn(4.0, 32.0, &|_| {})),
        (
            "v4_type_dynamic",
            1e4,
            RopeScaling::Dynamic {
                factor: 2.0,
                original_max_position_embeddings: 128.0,
            },
        ),
        ("v4_yarn_top_level_original", 1e4, yarn(4.0, 16.0, &|_| {})),
        (
            "v4_scaling_over_parameters",
            1e4,
            RopeScaling::Linear { factor: 2.0 },
        ),
        (
            "saved_llama_yarn",
            1e4,
            yarn(4.0, 32.0, &|s| {
                if let RopeScaling::Yarn { beta_fast, .. } = s {
                    *beta_fast = 16.0;
                }
            }),
        ),
        ("saved_qwen2_llama3", 5e5, llama3),
    ];
    let configs = rope_configs();
    let names: Vec<&str> = expected.iter().map(|(n, ..)| *n).collect();
    for name in configs.keys() {
        assert!(
            names.contains(&name.as_str()),
            "rope_configs.json: {name} has no expectation here"
        );
    }
    for (name, theta, scaling) in expected {
        let config = configs
            .get(name)
            .unwrap_or_else(|| panic!("rope_configs.json has no {name}"));
        let head_dim = usize_key(config, "head_dim");
        let max_pos = usize_key(config, "max_position_embeddings");
        let rope =
            rope_from_config(config, head_dim, max_pos).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(rope.rope_theta(), theta, "{name}: rope_theta");
        assert_eq!(rope.scaling(), &scaling, "{name}: rope type and parameters");
        assert_frequencies(&r, &format!("config.{name}.inv_freq"), &rope.inv_freq);
        assert_scalar(
            &r,
            &format!("config.{name}.attention_scaling"),
            rope.attention_scaling as f64,
        );
        assert_eq!(
            RopeScaling::from_hf_config(config, max_pos),
            Ok((theta, scaling)),
            "{name}"
        );
    }
}

fn refusal(config: serde_json::Value) -> String {
    match rope_from_config(&config, 64, 128) {
        Ok(rope) => panic!("{config} was accepted as {:?}", rope.scaling()),
        Err(e) => e,
    }
}

/// What is not implemented is refused with the key and the reason, never read as `default`.
#[test]
fn unsupported_rope_configurations_are_refused_naming_the_key() {
    use serde_json::json;
    let supported = "(supported: default, linear, dynamic, yarn, llama3)";
    assert_eq!(
        refusal(
            json!({"rope_scaling": {"rope_type": "longrope", "factor": 4.0,
            "short_factor": [1.0], "long_factor": [1.0]}})
        ),
        format!("rope type 'longrope' is not supported {supported}")
    );
    assert_eq!(
        refusal(json!({"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4}})),
        format!("rope type 'proportional' is not supported {supported}")
    );
    assert_eq!(
        refusal(json!({"rope_theta": 1e4, "rope_scaling": {"type": "su", "factor": 2.0}})),
        format!("rope type 'su' is not supported {supported}")
    );
    // transformers refuses it too: "Missing required keys ... 'llama3': {'low_freq_factor'}".
    assert_eq!(
        refusal(
            json!({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5,
            "factor": 8.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}})
        ),
        "rope_parameters.low_freq_factor is missing (required by rope type 'llama3')"
    );
    assert_eq!(
        refusal(json!({"rope_scaling": {"type": "yarn"}})),
        "rope_scaling.factor is missing (required by rope type 'yarn')"
    );
    assert_eq!(
        refusal(json!({"rope_scaling": {"type": "linear", "factor": null}})),
        "rope_scaling.factor must be a number, got null"
    );
    assert_eq!(
        refusal(json!({"rope_parameters": {"rope_type": "dynamic", "factor": "2"}})),
        "rope_parameters.factor must be a number, got \"2\""
    );
    assert_eq!(
        refusal(json!({"rope_theta": "big"})),
        "rope_theta must be a number, got \"big\""
    );
    assert_eq!(
        refusal(json!({"partial_rotary_factor": 0.5, "rope_theta": 1e4})),
        "partial_rotary_factor 0.5 is not supported (rotary embeddings over part of the head \
         are not implemented; only 1.0)"
    );
    assert!(
        refusal(
            json!({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25}})
        )
        .starts_with("rope_parameters.partial_rotary_factor 0.25 is not supported")
    );
    assert!(
        refusal(
            json!({"rope_parameters": {"full_attention": {"rope_type": "default"},
            "sliding_attention": {"rope_type": "default"}}})
        )
        .contains("rope parameters per layer type are not supported")
    );
    assert_eq!(
        refusal(json!({"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "truncate": 1}})),
        "rope_parameters.truncate must be true or false, got 1"
    );
    assert_eq!(
        refusal(json!({"rope_scaling": "yarn"})),
        "rope_scaling must be an object or null, got \"yarn\""
    );
    // partial_rotary_factor 1 is the full head, accepted.
    let rope = rope_from_config(&json!({"partial_rotary_factor": 1.0}), 64, 128).unwrap();
    assert_eq!(rope.scaling(), &RopeScaling::Default);
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
    // The fused kernel (on the CPU, this crate's blocked kernel) gives the same context.
    let (fused, _) = scaled_dot_product_attention(
        r.tensor("q_rot", &dev),
        r.tensor("k_rot", &dev),
        r.tensor("v_new", &dev),
        &AttentionMask::Causal,
        None,
        false,
    );
    r.assert_close("context_nocache", fused, tol());
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
