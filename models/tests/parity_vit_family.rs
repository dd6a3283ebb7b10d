//! Parity of the native ViT, DINOv2 (with and without registers), ViT-MAE and I-JEPA encoders
//! with transformers, on the tiny seeded fixtures of
//! `tests/fixtures/gen/{vit,dinov2,vit_mae,ijepa}.py`.
//!
//! Every hidden state, attention map, `last_hidden_state` and pooled output must match the
//! PyTorch reference to 1e-4 max abs error on the CPU device, at the configured input size and
//! at a non-square size that exercises the bicubic position-embedding resampling.

use crate::common::{
    Reference, checkpoint, device, fixture, max_abs_diff, scratch, scratch_config,
};
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_models::dinov2::Dinov2Model;
use bindscope_models::ijepa::IJepaModel;
use bindscope_models::vit::ViTModel;
use bindscope_models::vit_mae::ViTMAEModel;
use bindscope_models::{ForwardOptions, ModelError, VisionEncoder, VisionReadout, registry};
use burn::prelude::*;

const TOL: f32 = 1e-4;

fn ckpt(name: &str) -> Checkpoint {
    checkpoint(&fixture(name))
}

/// The fused-attention path (no probabilities requested) gives the same output.
fn check_fused(r: &Reference, model: &dyn VisionEncoder, pixels: Tensor<4>) {
    let out = model.forward_vision(pixels, ForwardOptions::default());
    assert!(out.hidden_states.is_none() && out.attentions.is_none());
    r.assert_close("vision.last_hidden_state", out.last_hidden_state, TOL);
}

/// `[N, T, D]` reference → token `i` / mean of tokens `from..`.
fn ref_token(r: &Reference, key: &str, i: usize) -> Tensor<2> {
    let t: Tensor<3> = r.tensor(key, &device());
    let [n, _, d] = t.dims();
    t.slice([0..n, i..i + 1, 0..d]).reshape([n, d])
}

fn ref_mean_from(r: &Reference, key: &str, from: usize) -> Tensor<2> {
    let t: Tensor<3> = r.tensor(key, &device());
    let [n, tt, d] = t.dims();
    t.slice([0..n, from..tt, 0..d]).mean_dim(1).reshape([n, d])
}

// ---------------------------------------------------------------------------------------------
// ViT
// ---------------------------------------------------------------------------------------------

#[test]
fn vit_matches_transformers() {
    let d = device();
    let r = Reference::open("vit");
    let model = ViTModel::load(&ckpt("vit"), &d, &LoadOptions::default()).unwrap();
    assert!(model.pooler.is_some(), "the fixture has pooler.dense");
    let out = model.forward(r.tensor("pixel_values", &d), ForwardOptions::all());
    r.assert_encoder_output("vision", &out, 2, true, TOL);
    check_fused(&r, &model, r.tensor("pixel_values", &d));

    // Readout on the last hidden state (before the final norm) reproduces the outputs.
    let last = out.hidden_states.unwrap().pop().unwrap();
    r.assert_close(
        "vision.pooler_output",
        model.readout(last.clone(), VisionReadout::Pooled),
        TOL,
    );
    let cls = model.readout(last.clone(), VisionReadout::Summary);
    assert!(max_abs_diff(cls, ref_token(&r, "vision.last_hidden_state", 0)) <= TOL);
    let mean = model.readout(last, VisionReadout::MeanPatch);
    assert!(max_abs_diff(mean, ref_mean_from(&r, "vision.last_hidden_state", 1)) <= TOL);
    r.assert_close(
        "vision.pooler_output",
        model.embed(r.tensor("pixel_values", &d), VisionReadout::Pooled),
        TOL,
    );
}

#[test]
fn vit_interpolates_position_embeddings() {
    let d = device();
    let r = Reference::open("vit");
    let model = ViTModel::load(&ckpt("vit"), &d, &LoadOptions::default()).unwrap();
    let out = model.forward(
        r.tensor("interp.pixel_values", &d),
        ForwardOptions {
            output_hidden_states: true,
            output_attentions: false,
            attention_last_rows: None,
        },
    );
    r.assert_interpolated(out, true, TOL);
}

#[test]
fn vit_classification_checkpoint_loads_without_pooler() {
    // `vit.` prefix, `classifier.*` head, no pooler: same encoder weights as tests/fixtures/vit.
    let d = device();
    let r = Reference::open("vit");
    let model = ViTModel::load(&ckpt("vit/cls"), &d, &LoadOptions::default()).unwrap();
    assert!(model.pooler.is_none());
    let out = model.forward(r.tensor("pixel_values", &d), ForwardOptions::all());
    r.assert_close("vision.last_hidden_state", out.last_hidden_state, TOL);
    r.assert_close(
        "vision.attentions.1",
        out.attentions.unwrap()[1].clone(),
        TOL,
    );
    // Without a pooler, pooler_output is the normalized CLS token.
    assert!(
        max_abs_diff(
            out.pooler_output,
            ref_token(&r, "vision.last_hidden_state", 0)
        ) <= TOL
    );
}

// ---------------------------------------------------------------------------------------------
// DINOv2
// ---------------------------------------------------------------------------------------------

fn dinov2_case(name: &str, registers: usize) {
    let d = device();
    let r = Reference::open(name);
    let model = Dinov2Model::load(&ckpt(name), &d, &LoadOptions::default()).unwrap();
    assert_eq!(model.num_prefix_tokens(), 1 + registers);
    let out = model.forward(r.tensor("pixel_values", &d), ForwardOptions::all());
    r.assert_encoder_output("vision", &out, 2, true, TOL);
    check_fused(&r, &model, r.tensor("pixel_values", &d));

    let last = out.hidden_states.unwrap().pop().unwrap();
    r.assert_close(
        "vision.pooler_output",
        model.readout(last.clone(), VisionReadout::Pooled),
        TOL,
    );
    r.assert_close(
        "vision.pooler_output",
        model.readout(last.clone(), VisionReadout::Summary),
        TOL,
    );
    let mean = model.readout(last, VisionReadout::MeanPatch);
    assert!(
        max_abs_diff(
            mean,
            ref_mean_from(&r, "vision.last_hidden_state", 1 + registers)
        ) <= TOL
    );

    // Non-square input of another size: the position grid is resampled bicubically.
    let out = model.forward(
        r.tensor("interp.pixel_values", &d),
        ForwardOptions {
            output_hidden_states: true,
            output_attentions: false,
            attention_last_rows: None,
        },
    );
    r.assert_interpolated(out, true, TOL);
}

#[test]
fn dinov2_matches_transformers() {
    dinov2_case("dinov2", 0);
}

#[test]
fn dinov2_with_registers_swiglu_matches_transformers() {
    dinov2_case("dinov2_registers", 2);
}

// ---------------------------------------------------------------------------------------------
// ViT-MAE
// ---------------------------------------------------------------------------------------------

#[test]
fn vit_mae_matches_transformers() {
    let d = device();
    let r = Reference::open("vit_mae");
    let model = ViTMAEModel::load(&ckpt("vit_mae"), &d, &LoadOptions::default()).unwrap();
    let out = model.forward(r.tensor("pixel_values", &d), ForwardOptions::all());
    r.assert_encoder_output("vision", &out, 2, false, TOL);
    r.assert_close("vision.mean_patch", out.pooler_output.clone(), TOL);
    check_fused(&r, &model, r.tensor("pixel_values", &d));

    let last = out.hidden_states.unwrap().pop().unwrap();
    r.assert_close(
        "vision.mean_patch",
        model.readout(last.clone(), VisionReadout::Pooled),
        TOL,
    );
    r.assert_close(
        "vision.mean_patch",
        model.readout(last.clone(), VisionReadout::MeanPatch),
        TOL,
    );
    let cls = model.readout(last, VisionReadout::Summary);
    assert!(max_abs_diff(cls, ref_token(&r, "vision.last_hidden_state", 0)) <= TOL);

    let out = model.forward(
        r.tensor("interp.pixel_values", &d),
        ForwardOptions {
            output_hidden_states: true,
            output_attentions: false,
            attention_last_rows: None,
        },
    );
    r.assert_interpolated(out, false, TOL);
}

#[test]
fn vit_mae_pretraining_checkpoint_loads_encoder() {
    // `vit.` prefix and a `decoder.*` the loader ignores, as facebook/vit-mae-* on the Hub.
    let d = device();
    let r = Reference::open("vit_mae");
    let model =
        ViTMAEModel::load(&ckpt("vit_mae/pretraining"), &d, &LoadOptions::default()).unwrap();
    let out = model.forward(r.tensor("pixel_values", &d), ForwardOptions::default());
    r.assert_close("vision.last_hidden_state", out.last_hidden_state, TOL);
}

// ---------------------------------------------------------------------------------------------
// I-JEPA
// ---------------------------------------------------------------------------------------------

#[test]
fn ijepa_matches_transformers() {
    let d = device();
    let r = Reference::open("ijepa");
    let model = IJepaModel::load(&ckpt("ijepa"), &d, &LoadOptions::default()).unwrap();
    let out = model.forward(r.tensor("pixel_values", &d), ForwardOptions::all());
    r.assert_encoder_output("vision", &out, 2, false, TOL);
    r.assert_close("vision.mean", out.pooler_output.clone(), TOL);
    check_fused(&r, &model, r.tensor("pixel_values", &d));

    // Every readout of the last hidden state (before the final norm) is the token mean.
    let last = out.hidden_states.unwrap().pop().unwrap();
    for readout in [
        VisionReadout::Pooled,
        VisionReadout::MeanPatch,
        VisionReadout::Summary,
    ] {
        r.assert_close("vision.mean", model.readout(last.clone(), readout), TOL);
    }
    assert_eq!(model.num_prefix_tokens(), 0);

    let out = model.forward(
        r.tensor("interp.pixel_values", &d),
        ForwardOptions {
            output_hidden_states: true,
            output_attentions: false,
            attention_last_rows: None,
        },
    );
    r.assert_interpolated(out, false, TOL);
}

#[test]
fn ijepa_loads_through_the_registry_and_from_a_classification_checkpoint() {
    // `ijepa.` prefix and a `classifier` the loader ignores (IJepaForImageClassification).
    let d = device();
    let r = Reference::open("ijepa");
    for dir in ["ijepa", "ijepa/classification"] {
        let model = registry::open_vision(
            &fixture(dir).display().to_string(),
            &d,
            &LoadOptions::default(),
        )
        .unwrap()
        .model;
        assert_eq!(model.info().model_type, "ijepa", "{dir}");
        let out = model.forward_vision(r.tensor("pixel_values", &d), ForwardOptions::default());
        r.assert_close("vision.last_hidden_state", out.last_hidden_state, TOL);
        r.assert_close("vision.mean", out.pooler_output, TOL);
    }
}

#[test]
fn ijepa_classification_checkpoint_missing_a_key_names_it() {
    let dir = scratch(
        "ijepa/classification",
        "missing-pos",
        |_| {},
        |k| k != "ijepa.embeddings.position_embeddings",
    );
    let err = IJepaModel::load(&checkpoint(&dir), &device(), &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("1 missing, 0 unexpected") && err.contains("embeddings.position_embeddings"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

#[test]
fn wrong_config_size_names_key_and_both_shapes() {
    // image_size 40 instead of 32: the model expects a 5x5 position grid, the file has 4x4.
    let dir = scratch_config("vit", "vit-bad-size", |c| c["image_size"] = 40.into());
    let ck = Checkpoint::from_dir("bad", &dir).unwrap();
    let err = ViTModel::load(&ck, &device(), &LoadOptions::default()).unwrap_err();
    std::fs::remove_dir_all(&dir).ok();
    let msg = err.to_string();
    assert!(matches!(err, ModelError::Load(_)), "{msg}");
    assert!(msg.contains("embeddings.position_embeddings"), "{msg}");
    assert!(
        msg.contains("[1, 26, 32]") && msg.contains("[1, 17, 32]"),
        "{msg}"
    );

    // A wrong MLP width in DINOv2: fc1 / fc2 are named with their shapes.
    let dir = scratch_config("dinov2", "dinov2-bad-mlp", |c| c["mlp_ratio"] = 3.into());
    let ck = Checkpoint::from_dir("bad", &dir).unwrap();
    let err = Dinov2Model::load(&ck, &device(), &LoadOptions::default()).unwrap_err();
    std::fs::remove_dir_all(&dir).ok();
    let msg = err.to_string();
    assert!(msg.contains("encoder.layer.0.mlp.fc1.weight"), "{msg}");
    assert!(msg.contains("96") && msg.contains("64"), "{msg}");
}

#[test]
fn unsupported_activation_is_an_error() {
    let dir = scratch_config("dinov2", "dinov2-bad-act", |c| {
        c["hidden_act"] = "mish".into()
    });
    let ck = Checkpoint::from_dir("bad", &dir).unwrap();
    let err = Dinov2Model::load(&ck, &device(), &LoadOptions::default()).unwrap_err();
    std::fs::remove_dir_all(&dir).ok();
    let msg = err.to_string();
    assert!(matches!(err, ModelError::Unsupported { .. }), "{msg}");
    assert!(msg.contains("hidden_act") && msg.contains("mish"), "{msg}");
}
