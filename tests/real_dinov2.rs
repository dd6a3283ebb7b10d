//! Opt-in parity test on a real pretrained DINOv2 ViT-S/14 backbone.
//!
//! Runs only when `BINDSCOPE_REAL_MODELS=DIR` is set, `DIR` holding `dinov2-small-imgfocus/`
//! as built by `shared/tools/real-models.sh` (a 12-layer × 384 `Dinov2Model` with a 37×37
//! position grid, so a 224×224 input exercises the bicubic resampling to 16×16). Otherwise it
//! prints a skip message and passes.
//!
//! Reference: `tests/fixtures/real/dinov2_small_imgfocus.safetensors`, written by
//! `gen/dinov2.py::generate_real` with transformers' `Dinov2Model` for the closed-form input
//! [`real_input`] (the same formula in both languages, so the 600 KB input is not stored; a
//! corner of it and its per-channel means are, to check that the two agree).

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_models::dinov2::Dinov2Model;
use bindscope_models::{ForwardOptions, VisionEncoder, VisionReadout};
use burn::prelude::*;
use burn::tensor::TensorData;

/// `x[c, i, j] = 2·sin(0.05·(c+1)·i + 0.03·j) · cos(0.02·i − 0.07·(c+1)·j + c)` in f64, rounded
/// to f32: `[1, 3, 224, 224]`, values in [-2, 2] like normalized pixels.
fn real_input(device: &Device) -> Tensor<4> {
    let mut v = Vec::with_capacity(3 * 224 * 224);
    for c in 0..3 {
        let (cf, k) = (c as f64, (c + 1) as f64);
        for i in 0..224 {
            for j in 0..224 {
                let (i, j) = (i as f64, j as f64);
                v.push(
                    (2.0 * (0.05 * k * i + 0.03 * j).sin() * (0.02 * i - 0.07 * k * j + cf).cos())
                        as f32,
                );
            }
        }
    }
    Tensor::from_data(TensorData::new(v, [1, 3, 224, 224]), device)
}

/// Tokens `0..9` of `[1, T, D]`.
fn first9(x: Tensor<3>) -> Tensor<3> {
    let [n, _, d] = x.dims();
    x.slice([0..n, 0..9, 0..d])
}

#[test]
fn real_dinov2_small_matches_transformers() {
    let Some(dir) = std::env::var_os("BINDSCOPE_REAL_MODELS") else {
        println!(
            "skipping real_dinov2: set BINDSCOPE_REAL_MODELS=DIR (DIR/dinov2-small-imgfocus from shared/tools/real-models.sh)"
        );
        return;
    };
    let model_dir = std::path::Path::new(&dir).join("dinov2-small-imgfocus");
    let device = bindscope_core::device::test_device();
    let ckpt =
        Checkpoint::from_dir("dinov2-small-imgfocus", &model_dir).unwrap_or_else(|e| panic!("{e}"));
    let model = Dinov2Model::load(&ckpt, &device, &LoadOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let r = crate::common::Reference::from_file(
        &crate::common::fixture("real").join("dinov2_small_imgfocus.safetensors"),
        "real dinov2-small",
    );

    let x = real_input(&device);
    let [n, c, _, _] = x.dims();
    r.assert_close(
        "pixel_values.corner",
        x.clone().slice([0..n, 0..c, 0..8, 0..8]),
        1e-6,
    );
    r.assert_close(
        "pixel_values.mean",
        x.clone().mean_dims(&[2, 3]).reshape([n, c]),
        1e-6,
    );

    let out = model.forward(
        x.clone(),
        ForwardOptions {
            output_hidden_states: true,
            output_attentions: false,
            attention_last_rows: None,
        },
    );
    assert_eq!(out.last_hidden_state.dims(), [1, 1 + 16 * 16, 384]);
    let tol = 1e-4;
    r.assert_close(
        "hidden_states.0.slice",
        first9(out.hidden_states.unwrap()[0].clone()),
        tol,
    );
    r.assert_close(
        "last_hidden_state.slice",
        first9(out.last_hidden_state.clone()),
        tol,
    );
    r.assert_close(
        "last_hidden_state.mean",
        out.last_hidden_state.mean_dim(1).reshape([1, 384]),
        tol,
    );
    r.assert_close("pooler_output", out.pooler_output, tol);
    r.assert_close("pooler_output", model.embed(x, VisionReadout::Pooled), tol);
}
