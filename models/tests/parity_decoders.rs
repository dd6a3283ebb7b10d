//! The decoder language models against transformers 5.24 (`tests/fixtures/gen/decoders.py`):
//! tiny random-initialised `LlamaForCausalLM` (untied, tied with `head_dim` ≠ D/H and one kv
//! head, each rope type: default, linear, dynamic, yarn with and without mscale, llama3, and a
//! config in the 4.x `rope_scaling` layout), `Qwen2ForCausalLM` (q/k/v biases) and
//! `Qwen3ForCausalLM` (per-head q/k norms, explicit `head_dim`).
//!
//! For each: logits at every position, the `L + 1` hidden states and the `L` attention maps of a
//! left-padded batch with transformers' position ids (compared where the attention mask is 1:
//! transformers' values at padded query positions are not meaningful), ≤ 1e-4 max abs;
//! `inputs_embeds` equal to the embedded ids gives the same logits; 20 greedy tokens equal
//! transformers' `generate` (`min_new_tokens=20`, so the EOS ids are suppressed as there) with
//! the cache and with a full re-forward each step (dynamic NTK: the cache only, see the test),
//! their per-step logits ≤ 1e-4; a left-padded batch of three prompts equals transformers'
//! batched `generate` and each prompt generated alone; a sharded checkpoint (index + two shards)
//! loads to the same model; bad inputs and configs are refused naming what is wrong.

use crate::common::{Reference, checkpoint, device, fixture};
use bindscope_core::LoadOptions;
use bindscope_models::attention::KvCache;
use bindscope_models::generate::{GenerateOptions, GenerationDefaults, generate};
use bindscope_models::{CausalLm, ForwardOptions, LmInput, registry};
use burn::prelude::*;

const FIXTURES: &[&str] = &[
    "llama",
    "llama_tied",
    "llama_linear",
    "llama_dynamic",
    "llama_yarn",
    "llama_yarn_mscale",
    "llama_legacy_rope",
    "qwen2",
    "qwen3",
];

/// 1e-4 as the issue asks; GPU backends reorder reductions (the values are O(1–10)).
fn tol() -> f32 {
    if bindscope_core::device::testing_on_accelerator() {
        5e-4
    } else {
        1e-4
    }
}

fn load(name: &str) -> Box<dyn CausalLm> {
    let ckpt = checkpoint(&fixture(name));
    registry::load_causal_lm(&ckpt, &device(), &LoadOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn host(t: Tensor<3>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

fn host4(t: Tensor<4>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// Max abs difference between `got` and reference `key` (`[N, T, ...]`, row-major) over the
/// `(n, t)` where `mask[n·T + t] = 1`.
fn masked_max_diff(r: &Reference, key: &str, got: &[f32], mask: &[i64], n: usize, t: usize) -> f32 {
    let (shape, want) = r.f32(key);
    assert_eq!(
        shape[0] * shape[1],
        n * t,
        "{}: {key} shape {shape:?}",
        r.name
    );
    assert_eq!(got.len(), want.len(), "{}: {key} size", r.name);
    let inner = want.len() / (n * t);
    let mut worst = 0f32;
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        if mask[i / inner] == 1 {
            let d = (a - b).abs();
            assert!(d.is_finite(), "{}: {key}[{i}] {a} vs {b}", r.name);
            worst = worst.max(d);
        }
    }
    worst
}

#[test]
fn logits_hidden_states_and_attentions_match_transformers_on_a_left_padded_batch() {
    let dev = device();
    for &name in FIXTURES {
        let r = Reference::open(name);
        let model = load(name);
        let ids = r.int_tensor::<2>("input_ids", &dev);
        let [n, t] = ids.dims();
        let (_, mask) = r.i64("attention_mask");
        let mut cache = model.new_cache();
        let out = model
            .forward_causal(
                LmInput::Ids(ids.clone()),
                Some(r.int_tensor::<2>("attention_mask", &dev)),
                Some(r.int_tensor::<2>("position_ids", &dev)),
                &mut cache,
                ForwardOptions::all(),
            )
            .unwrap();
        let d = masked_max_diff(&r, "logits", &host(out.logits), &mask, n, t);
        println!("{name}: logits max abs {d:.2e}");
        assert!(d <= tol(), "{name}: logits max abs {d:e}");
        let hidden = out.hidden_states.unwrap();
        let layers = model.info().num_layers;
        assert_eq!(hidden.len(), layers + 1, "{name}: hidden states");
        for (i, h) in hidden.into_iter().enumerate() {
            let d = masked_max_diff(&r, &format!("hidden_states.{i}"), &host(h), &mask, n, t);
            assert!(d <= tol(), "{name}: hidden_states.{i} max abs {d:e}");
        }
        let attns = out.attentions.unwrap();
        assert_eq!(attns.len(), layers, "{name}: attentions");
        for (i, a) in attns.into_iter().enumerate() {
            // [N, H, T, T]: query rows of padded positions are left out.
            let [_, h, _, _] = a.dims();
            let got = host4(a.swap_dims(1, 2)); // [N, T, H, T]
            let key = format!("attentions.{i}");
            let want = r.tensor::<4>(&key, &dev).swap_dims(1, 2);
            let want = host4(want);
            let inner = h * t;
            let mut worst = 0f32;
            for (j, (x, y)) in got.iter().zip(&want).enumerate() {
                if mask[j / inner] == 1 {
                    worst = worst.max((x - y).abs());
                }
            }
            assert!(worst <= tol(), "{name}: {key} max abs {worst:e}");
        }
        // inputs_embeds = the embedded ids: the same logits.
        let embeds = model.embed_tokens(ids);
        let mut cache = model.new_cache();
        let out2 = model
            .forward_causal(
                LmInput::Embeds(embeds),
                Some(r.int_tensor::<2>("attention_mask", &dev)),
                Some(r.int_tensor::<2>("position_ids", &dev)),
                &mut cache,
                ForwardOptions::default(),
            )
            .unwrap();
        // (through the fused kernel: compared with transformers where the mask is 1)
        let d = masked_max_diff(&r, "embeds_logits", &host(out2.logits), &mask, n, t);
        assert!(d <= tol(), "{name}: inputs_embeds logits max abs {d:e}");
    }
}

/// The EOS ids transformers' `generate` used (the fixture's generation_config.json).
fn eos(name: &str) -> Vec<u32> {
    let d = GenerationDefaults::read(&fixture(name).join("config.json")).unwrap();
    assert!(!d.eos_token_ids.is_empty(), "{name}: no eos_token_id");
    d.eos_token_ids
}

fn ids_of(r: &Reference, key: &str) -> Vec<Vec<u32>> {
    let (shape, v) = r.i64(key);
    v.chunks(shape[1])
        .map(|c| c.iter().map(|&i| i as u32).collect())
        .collect()
}

#[test]
fn greedy_decoding_matches_transformers_with_and_without_the_cache() {
    let dev = device();
    for &name in FIXTURES {
        let r = Reference::open(name);
        if !r.has("greedy_ids") {
            continue;
        }
        let model = load(name);
        let prompt = ids_of(&r, "greedy_prompt");
        let want = ids_of(&r, "greedy_ids");
        // Dynamic NTK rotates by the current length: through the cache, keys keep the rotation
        // of the step that cached them (transformers does the same), so a full re-forward past
        // the original context rotates them differently, in transformers as here; the cache
        // path is the one `generate` takes and the one checked.
        let modes: &[bool] = if name == "llama_dynamic" {
            &[true]
        } else {
            &[true, false]
        };
        for &use_cache in modes {
            let opts = GenerateOptions {
                max_new_tokens: 20,
                min_new_tokens: 20,
                eos_token_ids: eos(name),
                top_logits: 160,
                use_cache,
                ..GenerateOptions::default()
            };
            let g = generate(model.as_ref(), &prompt, &opts, &dev).unwrap();
            assert_eq!(
                g[0].generated_ids, want[0],
                "{name}: greedy ids (use_cache {use_cache})"
            );
            // Per-step logits: the top pairs cover the whole (tiny) vocabulary.
            let (shape, logits) = r.f32("greedy_logits");
            let v = shape[1];
            let mut worst = 0f32;
            for (step, pairs) in g[0].top_logits.iter().enumerate() {
                for &(id, l) in pairs {
                    if (id as usize) < v {
                        worst = worst.max((l - logits[step * v + id as usize]).abs());
                    }
                }
            }
            assert!(
                worst <= tol(),
                "{name}: greedy step logits max abs {worst:e}"
            );
        }
    }
}

#[test]
fn a_left_padded_batch_generates_what_transformers_and_each_prompt_alone_generate() {
    let dev = device();
    for &name in FIXTURES {
        let r = Reference::open(name);
        if !r.has("batch_generated") {
            continue;
        }
        let model = load(name);
        let (shape, padded) = r.i64("batch_prompt_ids");
        let (_, mask) = r.i64("batch_attention_mask");
        let prompts: Vec<Vec<u32>> = (0..shape[0])
            .map(|row| {
                (0..shape[1])
                    .filter(|&j| mask[row * shape[1] + j] == 1)
                    .map(|j| padded[row * shape[1] + j] as u32)
                    .collect()
            })
            .collect();
        let want = ids_of(&r, "batch_generated");
        let opts = GenerateOptions {
            max_new_tokens: 20,
            min_new_tokens: 20,
            eos_token_ids: eos(name),
            ..GenerateOptions::default()
        };
        // Whether transformers' rows equal each prompt generated alone (meta.json): not for
        // dynamic NTK, whose frequencies follow the longest row of the batch.
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixture(name).join("meta.json")).unwrap(),
        )
        .unwrap();
        let alone_equal = &meta["batch_rows_equal_alone"];
        let batch = generate(model.as_ref(), &prompts, &opts, &dev).unwrap();
        for (row, g) in batch.iter().enumerate() {
            assert_eq!(g.generated_ids, want[row], "{name}: batch row {row}");
            if alone_equal[row] != serde_json::json!(false) {
                let alone = generate(model.as_ref(), &prompts[row..row + 1], &opts, &dev).unwrap();
                assert_eq!(
                    alone[0].generated_ids, g.generated_ids,
                    "{name}: row {row} alone"
                );
            }
        }
    }
}

#[test]
fn decoding_through_the_cache_equals_one_causal_pass() {
    // Position by position through the cache gives the logits of one pass over all positions.
    let dev = device();
    let r = Reference::open("qwen3");
    let model = load("qwen3");
    let ids = r.int_tensor::<2>("greedy_prompt", &dev);
    let [_, t] = ids.dims();
    let mut cache = model.new_cache();
    let full = model
        .forward_causal(
            LmInput::Ids(ids.clone()),
            None,
            None,
            &mut cache,
            ForwardOptions::default(),
        )
        .unwrap()
        .logits;
    let mut cache: Vec<KvCache> = model.new_cache();
    for i in 0..t {
        let step = model
            .forward_causal(
                LmInput::Ids(ids.clone().slice([0..1, i..i + 1])),
                None,
                None,
                &mut cache,
                ForwardOptions::default(),
            )
            .unwrap()
            .logits;
        let v = step.dims()[2];
        let want = full.clone().slice([0..1, i..i + 1, 0..v]);
        let d = (step - want).abs().max().into_scalar::<f32>();
        assert!(d <= tol(), "position {i}: {d:e}");
    }
    assert_eq!(cache[0].len(), t);
}

#[test]
fn bad_inputs_are_refused_with_the_reason() {
    let dev = device();
    let model = load("llama");
    let ctx = model.info().input_size[0];
    // A prompt longer than the context.
    let long = vec![vec![5u32; ctx + 1]];
    let e = generate(model.as_ref(), &long, &GenerateOptions::default(), &dev).unwrap_err();
    assert!(e.to_string().contains("context"), "{e}");
    // Running past the context through the cache.
    let ids = Tensor::<2, Int>::ones([1, ctx], &dev);
    let mut cache = model.new_cache();
    model
        .forward_causal(
            LmInput::Ids(ids.clone()),
            None,
            None,
            &mut cache,
            ForwardOptions::default(),
        )
        .unwrap();
    let e = model
        .forward_causal(
            LmInput::Ids(ids.slice([0..1, 0..1])),
            None,
            None,
            &mut cache,
            ForwardOptions::default(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("context"), "{e}");
    // An id outside the vocabulary.
    let e = generate(
        model.as_ref(),
        &[vec![1, 100_000]],
        &GenerateOptions::default(),
        &dev,
    )
    .unwrap_err();
    assert!(e.to_string().contains("vocabulary"), "{e}");
    // Embeddings of the wrong width.
    let mut cache = model.new_cache();
    let e = model
        .forward_causal(
            LmInput::Embeds(Tensor::zeros([1, 2, 3], &dev)),
            None,
            None,
            &mut cache,
            ForwardOptions::default(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("hidden_size"), "{e}");
}

#[test]
fn unknown_model_types_and_rope_types_are_named() {
    let dev = device();
    let dir = crate::common::scratch_config("llama", "longrope", |c| {
        c["rope_parameters"] = serde_json::json!({"rope_type": "longrope", "rope_theta": 10000.0});
    });
    let e = registry::load_causal_lm(&checkpoint(&dir), &dev, &LoadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("longrope") && e.contains("config.json"), "{e}");
    let dir = crate::common::scratch_config("llama", "mistral", |c| {
        c["model_type"] = serde_json::json!("mistral");
    });
    let e = registry::load_causal_lm(&checkpoint(&dir), &dev, &LoadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("'mistral'") && e.contains("llama, qwen2, qwen3"),
        "{e}"
    );
    let dir = crate::common::scratch_config("qwen2", "sliding", |c| {
        c["use_sliding_window"] = serde_json::json!(true);
    });
    let e = registry::load_causal_lm(&checkpoint(&dir), &dev, &LoadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("use_sliding_window"), "{e}");
}

#[test]
fn missing_and_unexpected_keys_are_listed_under_the_checkpoint_names() {
    let dev = device();
    let dir = crate::common::scratch(
        "llama",
        "missing",
        |_| {},
        |k| k != "model.layers.1.mlp.up_proj.weight" && k != "model.norm.weight",
    );
    let e = registry::load_causal_lm(&checkpoint(&dir), &dev, &LoadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("model.layers.1.mlp.up_proj.weight") && e.contains("model.norm.weight"),
        "{e}"
    );
}

#[test]
fn tied_checkpoints_have_no_lm_head_and_count_the_embedding_once() {
    // The parameter count equals the checkpoint's stored values (transformers'
    // `num_parameters()` counts a tied matrix once), with and without lm_head.weight.
    for name in ["llama_tied", "llama"] {
        let shapes = bindscope_models::nn::checkpoint_shapes(&checkpoint(&fixture(name))).unwrap();
        assert_eq!(
            shapes.contains_key("lm_head.weight"),
            name == "llama",
            "{name}"
        );
        let stored: usize = shapes.values().map(|s| s.iter().product::<usize>()).sum();
        assert_eq!(load(name).info().num_params, stored, "{name}");
    }
}

#[test]
fn a_sharded_checkpoint_loads_to_the_same_model() {
    // model.safetensors split in two shards named by model.safetensors.index.json.
    let dev = device();
    let src = fixture("llama");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bindscope-sharded-llama-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
    names.sort();
    let (a, b) = names.split_at(names.len() / 2);
    let mut weight_map = serde_json::Map::new();
    for (i, part) in [a, b].into_iter().enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", i + 1);
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = part
            .iter()
            .map(|k| (k.clone(), st.tensor(k).unwrap()))
            .collect();
        std::fs::write(
            dir.join(&file),
            safetensors::serialize(views, None).unwrap(),
        )
        .unwrap();
        for k in part {
            weight_map.insert(k.clone(), file.clone().into());
        }
    }
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::json!({"metadata": {}, "weight_map": weight_map}).to_string(),
    )
    .unwrap();
    let sharded =
        registry::load_causal_lm(&checkpoint(&dir), &dev, &LoadOptions::default()).unwrap();
    let whole = load("llama");
    let r = Reference::open("llama");
    let logits = |m: &dyn CausalLm| {
        let mut cache = m.new_cache();
        m.forward_causal(
            LmInput::Ids(r.int_tensor::<2>("greedy_prompt", &dev)),
            None,
            None,
            &mut cache,
            ForwardOptions::default(),
        )
        .unwrap()
        .logits
    };
    let d = (logits(sharded.as_ref()) - logits(whole.as_ref()))
        .abs()
        .max()
        .into_scalar::<f32>();
    assert_eq!(d, 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn repetition_penalty_decodes_as_transformers() {
    // transformers' greedy `generate` with `repetition_penalty` (> 1 and < 1) and
    // `min_new_tokens` on one unpadded prompt (`tests/fixtures/gen/decoder_processors.py`).
    let dev = device();
    let r = Reference::open("decoder_processors");
    for name in ["llama", "qwen3"] {
        let model = load(name);
        let prompt = ids_of(&r, &format!("{name}.prompt"));
        let want = ids_of(&r, &format!("{name}.generated"));
        let (_, penalty) = r.f32(&format!("{name}.repetition_penalty"));
        let opts = GenerateOptions {
            max_new_tokens: 24,
            min_new_tokens: 24,
            eos_token_ids: eos(name),
            repetition_penalty: penalty[0] as f64,
            ..GenerateOptions::default()
        };
        let g = generate(model.as_ref(), &prompt, &opts, &dev).unwrap();
        assert_eq!(
            g[0].generated_ids, want[0],
            "{name}: penalty {}",
            penalty[0]
        );
        // The penalty changes the tokens (the test can fail).
        let plain = GenerateOptions {
            repetition_penalty: 1.0,
            ..opts
        };
        let g1 = generate(model.as_ref(), &prompt, &plain, &dev).unwrap();
        assert_ne!(
            g1[0].generated_ids, want[0],
            "{name}: penalty without effect"
        );
    }
}
