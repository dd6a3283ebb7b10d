//! SigLIP parity against PyTorch (`tests/fixtures/gen/siglip.py`): a tiny seeded `SiglipModel`,
//! every hidden state and attention map of both towers, the MAP-head pooled image embedding
//! (packed `in_proj_weight` split by hand) and the last-token text embedding within 1e-4, on the
//! materialised and the fused attention paths; the text tower with and without the attention
//! mask (transformers applies it only when passed; the `TextEncoder` ignores it by default);
//! bicubic position interpolation; per-tower loading; `logit_scale` / `logit_bias`; strict
//! loading and config errors.

use crate::common::{Reference, checkpoint, device, fixture, max_abs_diff, scratch};
use bindscope_core::LoadOptions;
use bindscope_models::siglip::{SiglipModel, SiglipTextModel, SiglipVisionModel};
use bindscope_models::{ForwardOptions, ModelError, TextEncoder, VisionEncoder, VisionReadout};
use std::path::Path;

const TOL: f32 = 1e-4;

fn load(dir: &Path) -> Result<SiglipModel, ModelError> {
    SiglipModel::load(&checkpoint(dir), &device(), &LoadOptions::default())
}

#[test]
fn vision_tower_matches_pytorch() {
    let r = Reference::open("siglip");
    let model = load(&fixture("siglip")).unwrap();
    let px = r.tensor::<4>("pixel_values", &device());
    let out = model.forward_vision(px.clone(), ForwardOptions::all());
    r.assert_encoder_output("vision", &out, 2, true, TOL);
    r.assert_close("image_embeds", model.image_embeds(px.clone()), TOL);

    let fused = model.forward_vision(px, ForwardOptions::default());
    assert!(fused.hidden_states.is_none() && fused.attentions.is_none());
    r.assert_close("vision.last_hidden_state", fused.last_hidden_state, TOL);
    r.assert_close("vision.pooler_output", fused.pooler_output, TOL);
}

#[test]
fn text_tower_without_mask_matches_pytorch() {
    let r = Reference::open("siglip");
    let model = load(&fixture("siglip")).unwrap();
    let (ids, _) = r.text_inputs(&device());
    let out = model.forward_text(ids.clone(), None, ForwardOptions::all());
    r.assert_encoder_output("text", &out, 2, true, TOL);
    r.assert_close("text_embeds", model.text_embeds(ids.clone(), None), TOL);

    let fused = model.forward_text(ids, None, ForwardOptions::default());
    r.assert_close("text.last_hidden_state", fused.last_hidden_state, TOL);
    r.assert_close("text.pooler_output", fused.pooler_output, TOL);
}

#[test]
fn text_tower_with_mask_matches_pytorch() {
    let r = Reference::open("siglip");
    let model = load(&fixture("siglip")).unwrap();
    let (ids, mask) = r.text_inputs(&device());
    let out = model.forward_text(ids.clone(), Some(mask.clone()), ForwardOptions::all());
    for (i, a) in out.attentions.unwrap().into_iter().enumerate() {
        r.assert_close(&format!("text_masked.attentions.{i}"), a, TOL);
    }
    r.assert_close("text_masked.last_hidden_state", out.last_hidden_state, TOL);
    r.assert_close("text_masked.pooler_output", out.pooler_output, TOL);
    let fused = model.forward_text(ids, Some(mask), ForwardOptions::default());
    r.assert_close("text_masked.pooler_output", fused.pooler_output, TOL);
}

#[test]
fn text_encoder_ignores_the_mask_unless_asked() {
    let r = Reference::open("siglip");
    let c = checkpoint(&fixture("siglip"));
    let text = SiglipTextModel::load(&c, &device(), &LoadOptions::default()).unwrap();
    assert!(!text.apply_attention_mask);
    let (ids, mask) = r.text_inputs(&device());
    r.assert_close(
        "text_embeds",
        text.embed_text(ids.clone(), mask.clone()),
        TOL,
    );
    let masked = text.with_attention_mask(true);
    r.assert_close(
        "text_masked.pooler_output",
        masked.embed_text(ids, mask),
        TOL,
    );
    assert!(
        max_abs_diff(
            r.tensor::<2>("text_embeds", &device()),
            r.tensor::<2>("text_masked.pooler_output", &device())
        ) > 1e-2,
        "the fixture tells the two apart"
    );
    let info = TextEncoder::info(&masked);
    assert_eq!(
        (info.hidden_size, info.embed_dim, info.input_size),
        (24, 32, [12, 0])
    );
}

#[test]
fn position_embeddings_are_interpolated_bicubically() {
    let r = Reference::open("siglip");
    let model = load(&fixture("siglip")).unwrap();
    let px = r.tensor::<4>("interp.pixel_values", &device());
    assert_eq!(
        px.dims(),
        [1, 3, 40, 24],
        "a 5x3 grid against the 4x4 training grid"
    );
    let out = model.forward_vision(
        px,
        ForwardOptions {
            output_hidden_states: true,
            output_attentions: false,
            attention_last_rows: None,
        },
    );
    r.assert_interpolated(out, true, TOL);
}

#[test]
fn vision_tower_loads_alone_and_reads_out_any_depth() {
    let r = Reference::open("siglip");
    let c = checkpoint(&fixture("siglip"));
    let vision = SiglipVisionModel::load(&c, &device(), &LoadOptions::default()).unwrap();
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
    // readout applies post_layernorm then the head: on the encoder output (hidden state 2) it
    // gives pooler_output.
    let enc = r.tensor::<3>("vision.hidden_states.2", &device());
    r.assert_close(
        "vision.pooler_output",
        vision.readout(enc, VisionReadout::Pooled),
        TOL,
    );
    let mid = vision.readout(
        r.tensor::<3>("vision.hidden_states.1", &device()),
        VisionReadout::Summary,
    );
    assert_eq!(mid.dims(), [2, 32]);
    assert_eq!(vision.num_prefix_tokens(), 0);
    let patches = vision.patch_tokens(px.clone());
    r.assert_close("vision.last_hidden_state", patches.clone(), TOL);
    let err = max_abs_diff(
        vision.embed(px, VisionReadout::MeanPatch),
        patches.mean_dim(1).reshape([2, 32]),
    );
    assert!(
        err <= 1e-6,
        "MeanPatch is the mean of patch_tokens ({err:e})"
    );
    let info = VisionEncoder::info(&vision);
    assert_eq!(
        (
            info.hidden_size,
            info.embed_dim,
            info.num_layers,
            info.num_heads,
            info.patch_size
        ),
        (32, 32, 2, 4, 8)
    );

    let (v2, t2) = load(&fixture("siglip")).unwrap().into_towers();
    r.assert_close(
        "image_embeds",
        v2.embed(
            r.tensor::<4>("pixel_values", &device()),
            VisionReadout::Pooled,
        ),
        TOL,
    );
    let (ids, mask) = r.text_inputs(&device());
    r.assert_close("text_embeds", t2.embed_text(ids, mask), TOL);
}

#[test]
fn logit_scale_and_bias_are_read() {
    let r = Reference::open("siglip");
    let model = load(&fixture("siglip")).unwrap();
    assert_eq!(model.logit_scale, Some(r.f32("logit_scale").1[0]));
    assert_eq!(model.logit_bias, Some(r.f32("logit_bias").1[0]));
}

#[test]
fn missing_key_is_named() {
    let key = "vision_model.head.attention.in_proj_weight";
    let dir = scratch("siglip", "missing", |_| {}, |k| k != key);
    let err = load(&dir).unwrap_err().to_string();
    assert!(err.contains(key) && err.contains("missing"), "{err}");
    // The text tower alone does not need it.
    assert!(SiglipTextModel::load(&checkpoint(&dir), &device(), &LoadOptions::default()).is_ok());
    let err = SiglipVisionModel::load(&checkpoint(&dir), &device(), &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains(key), "{err}");
    std::fs::remove_dir_all(&dir).ok();

    let key = "text_model.head.bias";
    let dir = scratch("siglip", "missing-text", |_| {}, |k| k != key);
    let err = load(&dir).unwrap_err().to_string();
    assert!(err.contains(key), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_configs_are_reported() {
    let dir = scratch(
        "siglip",
        "act",
        |c| c["text_config"]["hidden_act"] = "mish".into(),
        |_| true,
    );
    let err = load(&dir).unwrap_err().to_string();
    assert!(
        err.contains("hidden_act 'mish'") && err.contains("config.json"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();

    let dir = scratch(
        "siglip",
        "nohead",
        |c| c["vision_config"]["vision_use_head"] = false.into(),
        |_| true,
    );
    let err = load(&dir).unwrap_err().to_string();
    assert!(err.contains("vision_use_head"), "{err}");
    std::fs::remove_dir_all(&dir).ok();

    // projection_size disagreeing with the weights: a named shape mismatch.
    let dir = scratch(
        "siglip",
        "proj",
        |c| c["text_config"]["projection_size"] = 16.into(),
        |_| true,
    );
    let err = load(&dir).unwrap_err().to_string();
    assert!(
        err.contains("text_model.head.weight") && err.contains("shape"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
