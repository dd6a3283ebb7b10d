//! Parity of the native ConvNeXt with transformers' `ConvNextModel` on the tiny seeded fixtures
//! of `tests/fixtures/gen/convnext.py`: every stage's feature map (as tokens), the last one and
//! the pooled output to 1e-4 max abs error, at 64×64 and at 72×88; the backbone of a
//! `ConvNextForImageClassification` checkpoint; blocks without layer scale.

use crate::common::{Reference, checkpoint, device, fixture, scratch};
use bindscope_core::LoadOptions;
use bindscope_models::convnext::ConvNextModel;
use bindscope_models::{ForwardOptions, VisionEncoder, VisionReadout, registry};

const TOL: f32 = 1e-4;

fn load(name: &str) -> ConvNextModel {
    ConvNextModel::load(
        &checkpoint(&fixture(name)),
        &device(),
        &LoadOptions::default(),
    )
    .unwrap()
}

fn check(r: &Reference, model: &dyn VisionEncoder, prefix: &str, stages: usize) {
    let pixels = r.tensor::<4>(&format!("{prefix}pixel_values"), &device());
    let out = model.forward_vision(
        pixels.clone(),
        ForwardOptions {
            output_hidden_states: stages > 0,
            output_attentions: false,
            attention_last_rows: None,
        },
    );
    r.assert_close(
        &format!("{prefix}vision.last_hidden_state"),
        out.last_hidden_state,
        TOL,
    );
    r.assert_close(
        &format!("{prefix}vision.pooler_output"),
        out.pooler_output,
        TOL,
    );
    if stages > 0 {
        let hidden = out.hidden_states.unwrap();
        assert_eq!(hidden.len(), stages + 1);
        for (i, h) in hidden.into_iter().enumerate() {
            r.assert_close(&format!("{prefix}vision.hidden_states.{i}"), h, TOL);
        }
    }
    for readout in [
        VisionReadout::Pooled,
        VisionReadout::Summary,
        VisionReadout::MeanPatch,
    ] {
        let e = model.embed(pixels.clone(), readout);
        r.assert_close(&format!("{prefix}vision.pooler_output"), e, TOL);
    }
}

#[test]
fn convnext_matches_transformers() {
    let r = Reference::open("convnext");
    let model = load("convnext");
    check(&r, &model, "", 4);
    check(&r, &model, "odd.", 4);
    let info = model.info();
    assert_eq!((info.embed_dim, info.patch_size), (24, 32));
}

#[test]
fn classification_checkpoint_loads_the_backbone() {
    let r = Reference::open("convnext");
    let ckpt = checkpoint(&fixture("convnext/classification"));
    let model = registry::load_vision(&ckpt, &device(), &LoadOptions::default()).unwrap();
    check(&r, model.as_ref(), "", 4);
}

#[test]
fn blocks_without_layer_scale_match_transformers() {
    let r = Reference::open("convnext/no_layer_scale");
    let model = load("convnext/no_layer_scale");
    assert!(
        model.encoder.stages[0].layers[0]
            .layer_scale_parameter
            .is_none()
    );
    check(&r, &model, "", 0);
}

#[test]
fn missing_key_is_named_in_the_checkpoints_terms() {
    let dir = scratch(
        "convnext/classification",
        "missing-ds",
        |_| {},
        |k| k != "convnext.encoder.stages.2.downsampling_layer.1.weight",
    );
    let err = ConvNextModel::load(&checkpoint(&dir), &device(), &LoadOptions::default())
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        err.contains("1 missing, 0 unexpected")
            && err.contains("convnext.encoder.stages.2.downsampling_layer.1.weight"),
        "{err}"
    );
}
