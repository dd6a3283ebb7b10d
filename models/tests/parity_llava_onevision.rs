//! LLaVA-OneVision against transformers 5.25 (`tests/fixtures/gen/llava_onevision.py`): a tiny
//! random `LlavaOnevisionForConditionalGeneration` with two pinpoint grids and
//! `anyres_max_1`, on two images whose tile features are unpadded (one also downsampled
//! bilinearly), fed the processor's `pixel_values` from the reference.
//!
//! For each image: the packed image features (base view, unpadded tiles, `image_newline`
//! rows), the vision tower's attention of every view, the logits at every prompt position and
//! the decoder's attention per layer and head ≤ 1e-4 max abs; 10 greedy ids equal
//! `generate(min_new_tokens=10)`'s and the decoder's attention of every generated step
//! ≤ 1e-4. The three checkpoint layouts (the Hub's, transformers 5's saved and in-memory
//! names) load to the same logits; bad configs, prompts and pixel shapes are refused by name.

use crate::common::{Reference, checkpoint, device, fixture};
use bindscope_core::LoadOptions;
use bindscope_models::ForwardOptions;
use bindscope_models::generate::GenerateOptions;
use bindscope_models::llava_onevision::{
    AttentionRequest, ImageInput, LlavaOnevisionForConditionalGeneration,
};
use burn::prelude::*;
use std::path::{Path, PathBuf};

const NAME: &str = "llava_onevision";

/// 1e-4 as the issue asks; GPU backends reorder reductions.
fn tol() -> f32 {
    if bindscope_core::device::testing_on_accelerator() {
        5e-4
    } else {
        1e-4
    }
}

fn load_dir(dir: &Path) -> LlavaOnevisionForConditionalGeneration {
    LlavaOnevisionForConditionalGeneration::load(
        &checkpoint(dir),
        &device(),
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn tensor<const D: usize>(r: &Reference, key: &str) -> Tensor<D> {
    let (shape, data) = r.f32(key);
    Tensor::from_data(TensorData::new(data, shape), &device())
}

fn image(r: &Reference, key: &str) -> ImageInput {
    let (_, size) = r.i64(&format!("{key}.image_sizes"));
    ImageInput {
        pixel_values: tensor(r, &format!("{key}.pixel_values")),
        image_size: [size[0] as usize, size[1] as usize],
    }
}

fn ids(r: &Reference, key: &str) -> Vec<u32> {
    r.i64(key).1.into_iter().map(|i| i as u32).collect()
}

fn diff<const D: usize>(r: &Reference, key: &str, got: Tensor<D>) -> f32 {
    let want: Tensor<D> = tensor(r, key);
    assert_eq!(got.dims(), want.dims(), "{key}: shape");
    (got - want).abs().max().into_scalar::<f32>()
}

#[test]
fn features_logits_attentions_and_greedy_ids_match_transformers() {
    let r = Reference::open(NAME);
    let model = load_dir(&fixture(NAME));
    for key in ["a", "b"] {
        let im = image(&r, key);
        let f = model.image_features(&im, true).unwrap();
        let d = diff(&r, &format!("{key}.image_features"), f.features.clone());
        assert!(d <= tol(), "{key}: image features differ by {d}");
        for (i, a) in f.vision_attentions.unwrap().into_iter().enumerate() {
            let d = diff(&r, &format!("{key}.vision.attentions.{i}"), a);
            assert!(d <= tol(), "{key}: vision attention {i} differs by {d}");
        }
        let prompt = ids(&r, &format!("{key}.input_ids"));
        let out = model
            .forward(
                &prompt,
                std::slice::from_ref(&im),
                ForwardOptions {
                    output_hidden_states: false,
                    output_attentions: true,
                    attention_last_rows: None,
                },
            )
            .unwrap();
        let d = diff(&r, &format!("{key}.logits"), out.logits);
        assert!(d <= tol(), "{key}: logits differ by {d}");
        for (i, a) in out.attentions.unwrap().into_iter().enumerate() {
            let d = diff(&r, &format!("{key}.attentions.{i}"), a);
            assert!(d <= tol(), "{key}: decoder attention {i} differs by {d}");
        }

        // The prompt with one `<image>` placeholder, as a caller writes it.
        let tok = model.image_token_id();
        let mut short: Vec<u32> = prompt.iter().copied().filter(|&i| i != tok).collect();
        short.insert(2, tok);
        let opts = GenerateOptions {
            max_new_tokens: 10,
            min_new_tokens: 10,
            eos_token_ids: vec![2],
            ..GenerateOptions::default()
        };
        let g = model
            .generate(
                &short,
                std::slice::from_ref(&im),
                &opts,
                AttentionRequest::Full,
            )
            .unwrap();
        assert_eq!(g.generation.prompt_ids, prompt, "{key}: expanded prompt");
        assert_eq!(g.image_positions, vec![2..2 + f.features.dims()[0]]);
        let want: Vec<u32> = ids(&r, &format!("{key}.greedy_ids"));
        assert_eq!(g.generation.generated_ids, want, "{key}: greedy ids");
        assert_eq!(
            g.llm_attentions.len(),
            10,
            "{key}: one attention set per forward pass"
        );
        for s in 1..10 {
            for (i, a) in g.llm_attentions[s].iter().enumerate() {
                let d = diff(&r, &format!("{key}.step_attentions.{s}.{i}"), a.clone());
                assert!(
                    d <= tol(),
                    "{key}: step {s} layer {i} attention differs by {d}"
                );
            }
        }
        // Pass 0 is the prompt's attention; the base view's vision attention is view 0's.
        let d = diff(
            &r,
            &format!("{key}.attentions.0"),
            g.llm_attentions[0][0].clone(),
        );
        assert!(
            d <= tol(),
            "{key}: prompt attention in generate differs by {d}"
        );
        let v0: Tensor<4> = tensor(&r, &format!("{key}.vision.attentions.1"));
        let [_, h, p, q] = v0.dims();
        let base = v0.slice([0..1, 0..h, 0..p, 0..q]);
        let got = g.vision_attentions[0][1].clone();
        assert!((got - base).abs().max().into_scalar::<f32>() <= tol());
        // The last query rows only: the same rows, the same ids, the same vision attention.
        let last = model
            .generate(
                &short,
                std::slice::from_ref(&im),
                &opts,
                AttentionRequest::LastQuery,
            )
            .unwrap();
        assert_eq!(last.generation.generated_ids, want);
        let t = prompt.len();
        for (i, a) in last.llm_attentions[0].iter().enumerate() {
            assert_eq!(a.dims(), [1, 4, 1, t], "{key}: last-row prompt attention");
            let full = g.llm_attentions[0][i]
                .clone()
                .slice([0..1, 0..4, t - 1..t, 0..t]);
            let d = (a.clone() - full).abs().max().into_scalar::<f32>();
            assert!(d <= 1e-6, "{key}: layer {i} last row differs by {d}");
        }
        for s in 1..10 {
            for (a, b) in last.llm_attentions[s].iter().zip(&g.llm_attentions[s]) {
                assert!((a.clone() - b.clone()).abs().max().into_scalar::<f32>() <= 1e-6);
            }
        }
        let got = last.vision_attentions[0][1].clone();
        let want_v = g.vision_attentions[0][1].clone();
        assert!((got - want_v).abs().max().into_scalar::<f32>() <= 1e-5);
        // Without attentions: the same ids.
        let plain = model
            .generate(&short, &[im], &opts, AttentionRequest::None)
            .unwrap();
        assert_eq!(plain.generation.generated_ids, want);
        assert!(plain.llm_attentions.is_empty() && plain.vision_attentions.is_empty());
    }
}

/// A copy of the fixture with every weight key renamed by `rename`.
fn renamed(tag: &str, rename: impl Fn(&str) -> String) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bindscope-llava-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixture(NAME);
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let tensors: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .map(|(k, v)| (rename(&k), v))
        .collect();
    std::fs::write(
        dir.join("model.safetensors"),
        safetensors::serialize(tensors, None).unwrap(),
    )
    .unwrap();
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    dir
}

#[test]
fn every_checkpoint_layout_loads_to_the_same_logits() {
    let r = Reference::open(NAME);
    let im = image(&r, "a");
    let prompt = ids(&r, "a.input_ids");
    let hub = renamed("hub", |k| {
        k.replace("vision_tower.", "vision_tower.vision_model.")
    });
    let memory = renamed("memory", |k| {
        if let Some(rest) = k.strip_prefix("language_model.model.") {
            format!("model.language_model.{rest}")
        } else if let Some(rest) = k.strip_prefix("language_model.") {
            rest.to_string()
        } else {
            format!(
                "model.{}",
                k.replace("vision_tower.", "vision_tower.vision_model.")
            )
        }
    });
    for dir in [hub, memory] {
        let model = load_dir(&dir);
        let out = model
            .forward(
                &prompt,
                std::slice::from_ref(&im),
                ForwardOptions::default(),
            )
            .unwrap();
        let d = diff(&r, "a.logits", out.logits);
        assert!(d <= tol(), "{}: logits differ by {d}", dir.display());
    }
    // A missing weight is named as the file names it.
    let hub_missing = renamed("missing", |k| {
        if k == "multi_modal_projector.linear_1.weight" {
            "unrelated.weight".into()
        } else {
            k.replace("vision_tower.", "vision_tower.vision_model.")
        }
    });
    let err = LlavaOnevisionForConditionalGeneration::load(
        &checkpoint(&hub_missing),
        &device(),
        &LoadOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("multi_modal_projector.linear_1.weight"),
        "{err}"
    );
    assert!(err.contains("unrelated.weight"), "{err}");
}

#[test]
fn bad_configs_prompts_and_pixels_are_refused_by_name() {
    let edit = |tag: &str, f: &dyn Fn(&mut serde_json::Value)| {
        let dir = crate::common::scratch_config(NAME, tag, |c| f(c));
        LlavaOnevisionForConditionalGeneration::load(
            &checkpoint(&dir),
            &device(),
            &LoadOptions::default(),
        )
        .unwrap_err()
        .to_string()
    };
    let e = edit("strategy", &|c| {
        c["vision_feature_select_strategy"] = "default".into()
    });
    assert!(e.contains("vision_feature_select_strategy"), "{e}");
    let e = edit("aspect", &|c| c["vision_aspect_ratio"] = "anyres".into());
    assert!(e.contains("vision_aspect_ratio"), "{e}");
    let e = edit("layer", &|c| c["vision_feature_layer"] = (-5).into());
    assert!(e.contains("vision_feature_layer -5"), "{e}");
    let e = edit("text", &|c| c["text_config"]["model_type"] = "llama".into());
    assert!(e.contains("text_config.model_type"), "{e}");
    let e = edit("pins", &|c| {
        c["image_grid_pinpoints"] = serde_json::json!([[32, 40]])
    });
    assert!(e.contains("image_grid_pinpoints"), "{e}");

    let r = Reference::open(NAME);
    let model = load_dir(&fixture(NAME));
    let im = image(&r, "a");
    let tok = model.image_token_id();
    let e = model
        .generate(
            &[5, tok, tok, 6],
            std::slice::from_ref(&im),
            &GenerateOptions::default(),
            AttentionRequest::None,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("2 <image> tokens") && e.contains("1 images"),
        "{e}"
    );
    let e = model
        .generate(
            &[5, tok, tok, 6],
            &[im.clone(), im.clone()],
            &GenerateOptions::default(),
            AttentionRequest::None,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 images in one prompt"), "{e}");
    let wrong = ImageInput {
        image_size: [30, 40],
        ..im.clone()
    };
    // Same tile grid, so the shape passes; a taller image needs 4 tiles.
    assert!(model.image_features(&wrong, false).is_ok());
    let tall = ImageInput {
        image_size: [100, 40],
        ..im
    };
    let e = model.image_features(&tall, false).unwrap_err().to_string();
    assert!(e.contains("needs [5, 3, 32, 32]"), "{e}");
}
