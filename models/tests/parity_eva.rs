//! Parity of the native EVA-02 image tower with timm 1.0.31's `Eva` on the tiny seeded fixtures
//! of `tests/fixtures/gen/eva.py`, to 1e-4 max abs error: every hidden state, attention map, the
//! last hidden state, the pooled output and the CLIP projection of an `eva02_base_patch16_clip_224`
//! (rotary embeddings, SwiGLU with its norm, sub-LayerNorm, separate q/k/v) at its configured
//! 32×32 and at 48×40 (timm's `dynamic_img_size=True`); the fused-`qkv`, layer-scale, GELU,
//! average-pooled variant; the parameter count; the errors a user can hit.

use crate::common::{Reference, checkpoint, device, fixture, scratch};
use bindscope_core::LoadOptions;
use bindscope_models::eva::{EvaModel, MODEL_TYPE};
use bindscope_models::{ForwardOptions, VisionEncoder, VisionReadout, registry};
use burn::tensor::Tensor;

const TOL: f32 = 1e-4;

fn load(name: &str) -> EvaModel {
    EvaModel::load(
        &checkpoint(&fixture(name)),
        &device(),
        &LoadOptions::default(),
    )
    .unwrap()
}

/// The registry's load error of a scratch checkpoint directory, which is removed.
fn load_error(dir: &std::path::Path) -> String {
    let err = registry::load_vision(&checkpoint(dir), &device(), &LoadOptions::default())
        .err()
        .expect("the checkpoint is refused")
        .to_string();
    std::fs::remove_dir_all(dir).ok();
    err
}

#[test]
fn eva02_clip_matches_timm() {
    let r = Reference::open("eva");
    let model = load("eva");
    let pixels = r.tensor::<4>("pixel_values", &device());
    let out = model.forward(pixels.clone(), ForwardOptions::all());
    r.assert_encoder_output("vision", &out, 2, true, TOL);
    // Through the registry, as every command loads it: the readouts.
    let boxed = registry::load_vision(
        &checkpoint(&fixture("eva")),
        &device(),
        &LoadOptions::default(),
    )
    .unwrap();
    r.assert_close(
        "vision.image_embeds",
        boxed.embed(pixels.clone(), VisionReadout::Pooled),
        TOL,
    );
    let seq = r.tensor::<3>("vision.last_hidden_state", &device());
    let [n, t, d] = seq.dims();
    let cls: Tensor<2> = seq.clone().slice([0..n, 0..1, 0..d]).reshape([n, d]);
    let mean: Tensor<2> = seq.slice([0..n, 1..t, 0..d]).mean_dim(1).reshape([n, d]);
    for (readout, want) in [
        (VisionReadout::Summary, cls),
        (VisionReadout::MeanPatch, mean),
    ] {
        let got = boxed.embed(pixels.clone(), readout);
        let diff = (got - want).abs().max().into_scalar::<f32>();
        assert!(diff <= TOL, "{readout:?}: max abs diff {diff}");
    }
    let info = boxed.info();
    assert_eq!(info.model_type, MODEL_TYPE);
    assert_eq!(info.embed_dim, 6);
    assert_eq!(
        (info.hidden_size, info.num_layers, info.num_heads),
        (16, 2, 2)
    );
    assert_eq!((info.input_size, info.patch_size), ([32, 32], 8));
    assert_eq!(info.num_params, r.i64("num_params").1[0] as usize);
}

#[test]
fn eva02_other_sizes_match_timm_dynamic_img_size() {
    // 48 × 40: a 6 × 5 grid, the position table resampled from 4 × 4, rotary tables rebuilt.
    let r = Reference::open("eva");
    let model = load("eva");
    let pixels = r.tensor::<4>("odd.pixel_values", &device());
    let out = model.forward(pixels.clone(), ForwardOptions::default());
    r.assert_close("odd.vision.last_hidden_state", out.last_hidden_state, TOL);
    r.assert_close(
        "odd.vision.image_embeds",
        model.embed(pixels, VisionReadout::Pooled),
        TOL,
    );
}

#[test]
fn eva_fused_qkv_layer_scale_avg_pool_matches_timm() {
    let r = Reference::open("eva/layer_scale_fused");
    let model = load("eva/layer_scale_fused");
    let pixels = r.tensor::<4>("pixel_values", &device());
    let out = model.forward(pixels.clone(), ForwardOptions::default());
    r.assert_close("vision.last_hidden_state", out.last_hidden_state, TOL);
    r.assert_close("vision.pooler_output", out.pooler_output, TOL);
    // No head: the pooled readout is `forward_head(pre_logits=True)`.
    r.assert_close(
        "vision.pooler_output",
        model.embed(pixels, VisionReadout::Pooled),
        TOL,
    );
    assert_eq!(model.info().embed_dim, 16);
}

#[test]
fn eva_missing_key_is_named_by_its_timm_name() {
    let dir = scratch(
        "eva",
        "missing",
        |_| {},
        |k| k != "blocks.1.attn.k_proj.weight",
    );
    let err = load_error(&dir);
    assert!(
        err.contains("1 missing") && err.contains("blocks.1.attn.k_proj.weight"),
        "{err}"
    );
    let dir = scratch(
        "eva/layer_scale_fused",
        "missing-bias",
        |_| {},
        |k| k != "blocks.0.attn.v_bias",
    );
    let err = load_error(&dir);
    assert!(err.contains("blocks.0.attn.v_bias"), "{err}");
}

#[test]
fn eva_heads_must_be_known() {
    // An architecture timm has but bindscope has no head count for, and no model_args.
    let dir = scratch(
        "eva",
        "heads",
        |c| {
            c["architecture"] = "eva02_small_patch14_224.mim_in22k".into();
            c.as_object_mut().unwrap().remove("model_args");
        },
        |_| true,
    );
    let err = load_error(&dir);
    assert!(
        err.contains("model_args.num_heads") && err.contains("eva02_base_patch16_clip_224"),
        "{err}"
    );
    // The heads alone do not do: whether the architecture has rotary embeddings (and their
    // reference grid) is not in the weights either, and is never assumed.
    let dir = scratch(
        "eva",
        "rope",
        |c| {
            c["architecture"] = "eva02_small_patch14_224.mim_in22k".into();
            c["model_args"] = serde_json::json!({"num_heads": 2, "img_size": 32});
        },
        |_| true,
    );
    let err = load_error(&dir);
    assert!(
        err.contains("model_args.use_rot_pos_emb, model_args.ref_feat_shape"),
        "{err}"
    );
    let dir = scratch(
        "eva",
        "heads-bad",
        |c| c["model_args"]["num_heads"] = "2".into(),
        |_| true,
    );
    let err = load_error(&dir);
    assert!(
        err.contains("model_args.num_heads must be a positive integer"),
        "{err}"
    );
}

#[test]
fn eva_unsupported_variants_are_refused() {
    let dir = scratch("eva", "pool", |c| c["global_pool"] = "map".into(), |_| true);
    let err = load_error(&dir);
    assert!(err.contains("global_pool 'map'"), "{err}");
    let dir = scratch("eva", "no-cls", |_| {}, |k| k != "cls_token");
    let err = load_error(&dir);
    assert!(err.contains("cls_token"), "{err}");
    let dir = scratch(
        "eva",
        "heads-odd",
        |c| c["model_args"]["num_heads"] = 3.into(),
        |_| true,
    );
    let err = load_error(&dir);
    assert!(err.contains("16") && err.contains("3"), "{err}");
}
