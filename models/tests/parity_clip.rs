//! CLIP parity against PyTorch (`tests/fixtures/gen/clip.py`): a tiny seeded `CLIPModel`
//! (quick_gelu vision, gelu text), every hidden state and attention map of both towers, the
//! pooled outputs and both projections within 1e-4, on the materialised and the fused attention
//! paths; bicubic position interpolation for a 40×24 input; the EOS pooling rule taken from the
//! config (legacy `eos_token_id == 2` → argmax of ids, otherwise first eos id), on a fixture where
//! the two rules disagree; per-tower loading; strict-loading and config errors.

use crate::common::{Reference, checkpoint, device, fixture, max_abs_diff, scratch};
use bindscope_core::LoadOptions;
use bindscope_models::clip::{ClipModel, ClipTextModel, ClipVisionModel, EosPooling};
use bindscope_models::{ForwardOptions, ModelError, TextEncoder, VisionEncoder, VisionReadout};
use burn::prelude::*;
use std::path::Path;

const TOL: f32 = 1e-4;

fn load(dir: &Path) -> Result<ClipModel, ModelError> {
    ClipModel::load(&checkpoint(dir), &device(), &LoadOptions::default())
}

fn positions(r: &Reference, key: &str) -> Vec<usize> {
    r.i64(key).1.into_iter().map(|p| p as usize).collect()
}

/// `x[n, pos[n], :]` of a reference tensor, as the expected pooled output at given positions.
fn rows_at(x: Tensor<3>, pos: &[usize]) -> Tensor<2> {
    let [n, t, d] = x.dims();
    let idx: Vec<i64> = pos
        .iter()
        .enumerate()
        .map(|(i, &p)| (i * t + p) as i64)
        .collect();
    x.reshape([n * t, d])
        .select(0, Tensor::<1, Int>::from_ints(idx.as_slice(), &device()))
}

#[test]
fn vision_tower_matches_pytorch() {
    let r = Reference::open("clip");
    let model = load(&fixture("clip")).unwrap();
    let px = r.tensor::<4>("pixel_values", &device());
    let out = model.forward_vision(px.clone(), ForwardOptions::all());
    r.assert_encoder_output("vision", &out, 2, true, TOL);
    r.assert_close("image_embeds", model.image_embeds(px.clone()), TOL);

    // Fused attention path (no probabilities requested).
    let fused = model.forward_vision(px, ForwardOptions::default());
    assert!(fused.hidden_states.is_none() && fused.attentions.is_none());
    r.assert_close("vision.last_hidden_state", fused.last_hidden_state, TOL);
    r.assert_close("vision.pooler_output", fused.pooler_output, TOL);
}

#[test]
fn text_tower_matches_pytorch() {
    let r = Reference::open("clip");
    let model = load(&fixture("clip")).unwrap();
    let (ids, mask) = r.text_inputs(&device());
    let out = model.forward_text(ids.clone(), mask.clone(), ForwardOptions::all());
    r.assert_encoder_output("text", &out, 2, true, TOL);
    r.assert_close(
        "text_embeds",
        model.text_embeds(ids.clone(), mask.clone()),
        TOL,
    );

    let fused = model.forward_text(ids, mask, ForwardOptions::default());
    r.assert_close("text.last_hidden_state", fused.last_hidden_state, TOL);
    r.assert_close("text.pooler_output", fused.pooler_output, TOL);
}

#[test]
fn position_embeddings_are_interpolated_bicubically() {
    let r = Reference::open("clip");
    let model = load(&fixture("clip")).unwrap();
    let px = r.tensor::<4>("interp.pixel_values", &device());
    assert_eq!(
        px.dims(),
        [2, 3, 40, 24],
        "a 5x3 grid against the 4x4 training grid"
    );
    let out = model.forward_vision(
        px.clone(),
        ForwardOptions {
            output_hidden_states: true,
            output_attentions: false,
            attention_last_rows: None,
        },
    );
    r.assert_interpolated(out, true, TOL);
    r.assert_close("interp.image_embeds", model.image_embeds(px), TOL);
}

#[test]
fn eos_pooling_rule_comes_from_the_config() {
    // Main fixture: eos_token_id 50, so the first position holding 50 is pooled; the argmax of
    // the ids is elsewhere in every row.
    let r = Reference::open("clip");
    let first = positions(&r, "text.pool_positions");
    let argmax = positions(&r, "text.argmax_positions");
    assert!(
        first.iter().zip(&argmax).all(|(a, b)| a != b),
        "fixture must separate the rules"
    );
    let model = load(&fixture("clip")).unwrap();
    assert_eq!(model.text_model.eos_pooling(), EosPooling::FirstEos(50));
    let ids: Vec<i64> = r.i64("input_ids").1;
    assert_eq!(model.text_model.eos_pooling().positions(&ids, 10), first);

    // The same weights with eos_token_id 2 in config.json: the legacy argmax rule.
    let dir = scratch(
        "clip",
        "eos2",
        |c| c["text_config"]["eos_token_id"] = 2.into(),
        |_| true,
    );
    let legacy = load(&dir).unwrap();
    assert_eq!(legacy.text_model.eos_pooling(), EosPooling::ArgmaxId);
    let (ids, mask) = r.text_inputs(&device());
    let out = legacy.forward_text(ids, mask, ForwardOptions::default());
    r.assert_close("text.last_hidden_state", out.last_hidden_state.clone(), TOL);
    let expected = rows_at(r.tensor::<3>("text.last_hidden_state", &device()), &argmax);
    let err = max_abs_diff(out.pooler_output.clone(), expected);
    assert!(
        err <= TOL,
        "legacy rule must pool at argmax(input_ids): max abs error {err:e}"
    );
    let wrong = max_abs_diff(
        out.pooler_output,
        r.tensor::<2>("text.pooler_output", &device()),
    );
    assert!(
        wrong > 1e-2,
        "pooling at the eos-id positions would have been caught ({wrong:e})"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn legacy_eos_fixture_pools_at_argmax() {
    // Standalone CLIPTextModelWithProjection (model_type clip_text_model) with eos_token_id 2;
    // token 2 occurs earlier than the largest id in both rows.
    let r = Reference::open("clip_legacy_eos");
    let model = ClipTextModel::load(
        &checkpoint(&fixture("clip_legacy_eos")),
        &device(),
        &LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(model.text_model.eos_pooling(), EosPooling::ArgmaxId);
    let argmax = positions(&r, "text.pool_positions");
    let first = positions(&r, "text.first_eos_positions");
    assert!(
        argmax.iter().zip(&first).all(|(a, b)| a != b),
        "fixture must separate the rules"
    );
    let ids: Vec<i64> = r.i64("input_ids").1;
    assert_eq!(model.text_model.eos_pooling().positions(&ids, 8), argmax);

    let (ids, mask) = r.text_inputs(&device());
    let out = model.forward_text(ids.clone(), mask.clone(), ForwardOptions::all());
    for (i, h) in out.hidden_states.unwrap().into_iter().enumerate() {
        r.assert_close(&format!("text.hidden_states.{i}"), h, TOL);
    }
    for (i, a) in out.attentions.unwrap().into_iter().enumerate() {
        r.assert_close(&format!("text.attentions.{i}"), a, TOL);
    }
    r.assert_close("text.last_hidden_state", out.last_hidden_state, TOL);
    r.assert_close("text.pooler_output", out.pooler_output.clone(), TOL);
    r.assert_close("text_embeds", model.embed_text(ids, mask), TOL);
    let at_first_eos = rows_at(r.tensor::<3>("text.last_hidden_state", &device()), &first);
    assert!(
        max_abs_diff(out.pooler_output, at_first_eos) > 1e-2,
        "the rules give different outputs"
    );
}

#[test]
fn towers_load_alone_and_read_out_any_depth() {
    let r = Reference::open("clip");
    let c = checkpoint(&fixture("clip"));
    let vision = ClipVisionModel::load(&c, &device(), &LoadOptions::default()).unwrap();
    let text = ClipTextModel::load(&c, &device(), &LoadOptions::default()).unwrap();
    let px = r.tensor::<4>("pixel_values", &device());

    r.assert_close(
        "image_embeds",
        vision.embed(px.clone(), VisionReadout::Pooled),
        TOL,
    );
    r.assert_close(
        "vision.pooler_output",
        vision.embed(px.clone(), VisionReadout::Summary),
        TOL,
    );
    // readout on the reference's last hidden state (any depth goes through the same path).
    let last = r.tensor::<3>("vision.last_hidden_state", &device());
    // final_norm is post_layernorm token-wise: on the CLS token it gives transformers'
    // pooler_output.
    let normed = vision.final_norm(last.clone());
    assert_eq!(normed.dims(), [2, 17, 32]);
    r.assert_close(
        "vision.pooler_output",
        normed.slice([0..2, 0..1, 0..32]).reshape([2, 32]),
        TOL,
    );
    r.assert_close(
        "image_embeds",
        vision.readout(last.clone(), VisionReadout::Pooled),
        TOL,
    );
    r.assert_close(
        "vision.pooler_output",
        vision.readout(last, VisionReadout::Summary),
        TOL,
    );
    let mid = vision.readout(
        r.tensor::<3>("vision.hidden_states.1", &device()),
        VisionReadout::Pooled,
    );
    assert_eq!(mid.dims(), [2, 16]);
    let mean = vision.embed(px.clone(), VisionReadout::MeanPatch);
    let patches = vision.patch_tokens(px);
    assert_eq!(patches.dims(), [2, 16, 32], "4x4 patches, CLS dropped");
    let err = max_abs_diff(mean, patches.mean_dim(1).reshape([2, 32]));
    assert!(
        err <= 1e-6,
        "MeanPatch is the mean of patch_tokens ({err:e})"
    );
    assert_eq!(vision.num_prefix_tokens(), 1);
    let info = VisionEncoder::info(&vision);
    assert_eq!(
        (
            info.hidden_size,
            info.embed_dim,
            info.num_layers,
            info.patch_size
        ),
        (32, 16, 2, 8)
    );

    let (ids, mask) = r.text_inputs(&device());
    r.assert_close("text_embeds", text.embed_text(ids, mask), TOL);
    assert_eq!(TextEncoder::info(&text).embed_dim, 16);

    // The split of a whole model is the same.
    let (v2, _) = load(&fixture("clip")).unwrap().into_towers();
    r.assert_close(
        "image_embeds",
        v2.embed(
            r.tensor::<4>("pixel_values", &device()),
            VisionReadout::Pooled,
        ),
        TOL,
    );

    // An explicit `only` filter selects the same keys.
    let opts = LoadOptions {
        only: vec![r"^vision_model\.".into(), r"^visual_projection\.".into()],
        ..Default::default()
    };
    let v3 = ClipVisionModel::load(&c, &device(), &opts).unwrap();
    r.assert_close(
        "image_embeds",
        v3.embed(
            r.tensor::<4>("pixel_values", &device()),
            VisionReadout::Pooled,
        ),
        TOL,
    );
}

#[test]
fn logit_scale_is_read() {
    let model = load(&fixture("clip")).unwrap();
    let s = model.logit_scale.expect("logit_scale in the checkpoint");
    assert!((s - 2.6592).abs() < 1e-4, "logit_scale_init_value, got {s}");
}

#[test]
fn missing_key_is_named() {
    let key = "vision_model.post_layernorm.weight";
    let dir = scratch("clip", "missing", |_| {}, |k| k != key);
    let err = load(&dir).unwrap_err().to_string();
    assert!(
        err.contains("vision_model.post_layernorm.gamma") || err.contains(key),
        "{err}"
    );
    assert!(err.contains("missing"), "{err}");
    // The text tower alone does not need it.
    assert!(ClipTextModel::load(&checkpoint(&dir), &device(), &LoadOptions::default()).is_ok());
    std::fs::remove_dir_all(&dir).ok();

    let key = "text_model.encoder.layers.1.mlp.fc2.weight";
    let dir = scratch("clip", "missing-text", |_| {}, |k| k != key);
    let err = ClipTextModel::load(&checkpoint(&dir), &device(), &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains(key), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_configs_are_reported() {
    let dir = scratch(
        "clip",
        "act",
        |c| c["vision_config"]["hidden_act"] = "mish".into(),
        |_| true,
    );
    let err = load(&dir).unwrap_err().to_string();
    assert!(
        err.contains("hidden_act 'mish'") && err.contains("config.json"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();

    let dir = scratch(
        "clip",
        "type",
        |c| c["model_type"] = "siglip".into(),
        |_| true,
    );
    let err = load(&dir).unwrap_err().to_string();
    assert!(err.contains("model_type 'siglip'"), "{err}");
    std::fs::remove_dir_all(&dir).ok();

    // A vision width that disagrees with the weights: shape mismatch, named.
    let dir = scratch(
        "clip",
        "width",
        |c| c["projection_dim"] = 12.into(),
        |_| true,
    );
    let err = load(&dir).unwrap_err().to_string();
    assert!(
        err.contains("visual_projection.weight") && err.contains("shape"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
