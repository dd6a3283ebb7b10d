//! The JER estimators against PyTorch (`torch.func.jvp` / `torch.func.vjp`) and against central
//! finite differences in float64, on the tiny ViT of `tests/fixtures/jer` (see
//! `tests/fixtures/gen/jer.py`), plus their agreement in distribution and their error paths.

use crate::common::Reference;
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_jer::probe::ProbeSpec;
use bindscope_jer::sketch::{input_sketch, output_sketch};
use bindscope_jer::{Estimator, JerError, jer_at, summarize};
use bindscope_models::vit::ViTModel;
use bindscope_models::{VisionEncoder, VisionReadout};
use burn::module::Module;
use burn::prelude::*;

fn model(device: &Device) -> ViTModel {
    let dir = crate::common::fixture("jer");
    let ckpt = Checkpoint::from_dir("jer", &dir).unwrap();
    ViTModel::load(&ckpt, device, &LoadOptions::default())
        .unwrap()
        .no_grad()
}

fn host(t: Tensor<2>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// max |a − b| / max |b|.
fn relative_error(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn input_sketch_matches_torch_jvp_and_finite_differences() {
    let ad = bindscope_core::device::test_device().autodiff();
    let m = model(&ad);
    let r = Reference::open("jer");
    let x = r.tensor::<4>("x", &ad);
    let v = r.tensor::<2>("V", &bindscope_core::device::test_device());
    let f = |x: Tensor<4>| vec![m.embed(x, VisionReadout::Summary)];
    // 1e-4 on the CPU; 3e-4 on a GPU backend, whose f32 products and reductions sum in another
    // order (wgpu on lavapipe: 1.1e-4 against torch.func.jvp).
    let tol = if bindscope_core::device::testing_on_accelerator() {
        3e-4
    } else {
        1e-4
    };
    for chunk in [16, 5] {
        let jv = host(input_sketch(&f, &x, 0, 16, v.clone(), chunk).unwrap());
        let e_jvp = relative_error(&jv, &r.f32("JV").1);
        let e_fd = relative_error(&jv, &r.f32("JV_fd").1);
        assert!(
            e_jvp <= tol,
            "J·V vs torch.func.jvp: relative error {e_jvp:e} (chunk {chunk})"
        );
        assert!(
            e_fd <= tol,
            "J·V vs float64 finite differences: relative error {e_fd:e} (chunk {chunk})"
        );
    }
}

#[test]
fn output_sketch_matches_torch_vjp_and_finite_differences() {
    let ad = bindscope_core::device::test_device().autodiff();
    let m = model(&ad);
    let r = Reference::open("jer");
    let x = r.tensor::<4>("x", &ad);
    let g = r.tensor::<2>("G", &bindscope_core::device::test_device());
    let f = |x: Tensor<4>| vec![m.embed(x, VisionReadout::Summary)];
    // One chunk holding every direction, and chunks that split them: same numbers.
    for chunk in [4, 3, 1] {
        let gtj = host(output_sketch(&f, &x, 0, g.clone(), chunk).unwrap());
        let e_vjp = relative_error(&gtj, &r.f32("GtJ").1);
        let e_fd = relative_error(&gtj, &r.f32("GtJ_fd").1);
        assert!(
            e_vjp <= 1e-4,
            "Gᵀ·J vs torch.func.vjp: relative error {e_vjp:e} (chunk {chunk})"
        );
        assert!(
            e_fd <= 1e-4,
            "Gᵀ·J vs float64 finite differences: relative error {e_fd:e} (chunk {chunk})"
        );
    }
}

#[test]
fn estimators_agree_in_distribution() {
    let cpu = bindscope_core::device::test_device();
    let m = model(&cpu.clone().autodiff());
    let f = |x: Tensor<4>| vec![m.embed(x, VisionReadout::Summary)];
    let spec = ProbeSpec::paper(16, 16);
    let (k, draws) = (6, 120);
    let mut out = Vec::new();
    let mut inp = Vec::new();
    for i in 0..draws {
        out.push(
            jer_at(&f, &spec, &[16], k, Estimator::OutputSketch, 7, i, 8, &cpu).unwrap()[0].jer,
        );
        inp.push(
            jer_at(&f, &spec, &[16], k, Estimator::InputSketch, 7, i, 8, &cpu).unwrap()[0].jer,
        );
    }
    let (a, b) = (summarize(&out), summarize(&inp));
    let se = (a.sem.powi(2) + b.sem.powi(2)).sqrt();
    assert!(
        (a.mean - b.mean).abs() <= 3.0 * se,
        "mean JER output-sketch {:.4} vs input-sketch {:.4} differ by more than 3 standard errors ({se:.4})",
        a.mean,
        b.mean
    );
    // Sanity: a non-degenerate spectrum, and draws that are not all identical.
    assert!(a.mean > 1.0 && a.mean < k as f64 && a.std > 0.0, "{a:?}");
}

#[test]
fn jer_is_deterministic_per_seed_and_image() {
    let cpu = bindscope_core::device::test_device();
    let m = model(&cpu.clone().autodiff());
    let f = |x: Tensor<4>| vec![m.embed(x, VisionReadout::Summary)];
    let spec = ProbeSpec::paper(16, 16);
    let a = jer_at(&f, &spec, &[16], 4, Estimator::OutputSketch, 42, 3, 2, &cpu).unwrap();
    let b = jer_at(&f, &spec, &[16], 4, Estimator::OutputSketch, 42, 3, 4, &cpu).unwrap();
    let c = jer_at(&f, &spec, &[16], 4, Estimator::OutputSketch, 42, 4, 4, &cpu).unwrap();
    for (x, y) in a[0].sigma.iter().zip(&b[0].sigma) {
        assert!(
            (x - y).abs() <= 1e-5 * x.abs(),
            "chunking changed σ: {x} vs {y}"
        );
    }
    assert_ne!(
        a[0].sigma, c[0].sigma,
        "different images gave the same spectrum"
    );
}

#[test]
fn bad_directions_and_non_finite_jacobians_are_errors() {
    let cpu = bindscope_core::device::test_device();
    let m = model(&cpu.clone().autodiff());
    let f = |x: Tensor<4>| vec![m.embed(x, VisionReadout::Summary)];
    let spec = ProbeSpec::paper(16, 16);
    for k in [0, 1, 17] {
        let e = jer_at(&f, &spec, &[16], k, Estimator::OutputSketch, 42, 0, 4, &cpu).unwrap_err();
        assert!(matches!(e, JerError::Directions { .. }), "k = {k}: {e}");
    }
    let nan = |x: Tensor<4>| vec![m.embed(x, VisionReadout::Summary).sqrt().log()]; // log of negatives → NaN
    let e = jer_at(
        &nan,
        &spec,
        &[16],
        4,
        Estimator::OutputSketch,
        42,
        5,
        4,
        &cpu,
    )
    .unwrap_err();
    assert!(matches!(e, JerError::NonFinite { image: 5, .. }), "{e}");
    assert!(e.to_string().contains("image 5"), "{e}");
}

/// The tiny torchvision ResNet of `tests/fixtures/resnet` (bottleneck blocks, eval-mode
/// BatchNorm), read from its `.pth.tar` training checkpoint.
fn resnet(device: &Device) -> bindscope_models::resnet::ResNetModel {
    let path = crate::common::fixture("resnet").join("bottleneck.pth.tar");
    let ckpt = Checkpoint::resolve(&path.display().to_string()).unwrap();
    bindscope_models::resnet::ResNetModel::load(&ckpt, device, &LoadOptions::default())
        .unwrap()
        .no_grad()
}

#[test]
fn resnet_sketches_match_torch_func() {
    // Both sketches of the pooled (global-average) output against torch.func.vjp / jvp. The
    // output sketch runs its directions as batched copies of the image: eval-mode BatchNorm
    // keeps the copies independent, so every chunking gives the same numbers.
    let ad = bindscope_core::device::test_device().autodiff();
    let m = resnet(&ad);
    let r = Reference::open("resnet");
    let x = r.tensor::<4>("jer.x", &ad);
    let g = r.tensor::<2>("jer.G", &bindscope_core::device::test_device());
    let v = r.tensor::<2>("jer.V", &bindscope_core::device::test_device());
    let f = |x: Tensor<4>| vec![m.embed(x, VisionReadout::Pooled)];
    let tol = if bindscope_core::device::testing_on_accelerator() {
        3e-4
    } else {
        1e-4
    };
    for chunk in [4, 3, 1] {
        let gtj = host(output_sketch(&f, &x, 0, g.clone(), chunk).unwrap());
        let e = relative_error(&gtj, &r.f32("jer.GtJ").1);
        assert!(
            e <= tol,
            "ResNet Gᵀ·J vs torch.func.vjp: relative error {e:e} (chunk {chunk})"
        );
    }
    for chunk in [4, 3] {
        let jv = host(input_sketch(&f, &x, 0, 128, v.clone(), chunk).unwrap());
        let e = relative_error(&jv, &r.f32("jer.JV").1);
        assert!(
            e <= tol,
            "ResNet J·V vs torch.func.jvp: relative error {e:e} (chunk {chunk})"
        );
    }
}
