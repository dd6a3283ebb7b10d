//! The JER estimators against PyTorch (`torch.func.jvp` / `torch.func.vjp`) and against central
//! finite differences in float64, on the tiny ViT of `tests/fixtures/jer` (see
//! `tests/fixtures/gen/jer.py`), plus their agreement in distribution and their error paths.

use crate::common::Reference;
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_jer::probe::ProbeSpec;
use bindscope_jer::sketch::{
    input_sketch, input_sketch_linearized, output_sketch, output_sketch_linearized,
};
use bindscope_jer::{Estimator, JerError, jer_at, jer_at_with, summarize};
use bindscope_models::linearize::Outputs;
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
    let f = |x: Tensor<4>| vec![m.embed(x, VisionReadout::Pooled)];
    check_sketches_against_torch_func("ResNet", &f, &x, &r, 128);
}

/// The autodiff sketches Gᵀ·J and J·V of `f`'s output (dimension `d`) at `x` against the
/// fixture's `jer.GtJ` / `jer.JV` (torch.func.vjp / jvp with `jer.G` / `jer.V`), every chunking.
fn check_sketches_against_torch_func(
    what: &str,
    f: &dyn Fn(Tensor<4>) -> Vec<Tensor<2>>,
    x: &Tensor<4>,
    r: &Reference,
    d: usize,
) {
    let inner = bindscope_core::device::test_device();
    let g = r.tensor::<2>("jer.G", &inner);
    let v = r.tensor::<2>("jer.V", &inner);
    let tol = if bindscope_core::device::testing_on_accelerator() {
        3e-4
    } else {
        1e-4
    };
    for chunk in [4, 3, 1] {
        let gtj = host(output_sketch(f, x, 0, g.clone(), chunk).unwrap());
        let e = relative_error(&gtj, &r.f32("jer.GtJ").1);
        assert!(
            e <= tol,
            "{what} Gᵀ·J vs torch.func.vjp: relative error {e:e} (chunk {chunk})"
        );
    }
    for chunk in [4, 3] {
        let jv = host(input_sketch(f, x, 0, d, v.clone(), chunk).unwrap());
        let e = relative_error(&jv, &r.f32("jer.JV").1);
        assert!(
            e <= tol,
            "{what} J·V vs torch.func.jvp: relative error {e:e} (chunk {chunk})"
        );
    }
}

#[test]
fn eva_sketches_match_torch_func() {
    // The EVA-02 CLIP tower (rotary embeddings, SwiGLU) has no written-out backward: both
    // sketches of its image embedding through burn's autodiff, against torch.func.vjp / jvp.
    // The output sketch's batched copies are independent rows, so every chunking agrees.
    let ad = bindscope_core::device::test_device().autodiff();
    let m = fixture_model("eva", &ad);
    let r = Reference::open("eva");
    let x = r.tensor::<4>("jer.x", &ad);
    assert!(
        m.linearize(x.clone(), VisionReadout::Pooled, Outputs::Final)
            .is_none()
    );
    let f = |x: Tensor<4>| vec![m.embed(x, VisionReadout::Pooled)];
    check_sketches_against_torch_func("EVA", &f, &x, &r, 6);
}

// ---------------------------------------------------------------------------------------------
// The shared backward (`bindscope_models::linearize`): one forward pass, hand-written VJPs.
// ---------------------------------------------------------------------------------------------

#[test]
fn linearized_sketches_match_torch_func() {
    // The shared-forward estimators against the same torch.func.vjp / jvp references as the
    // autodiff ones above, every chunking.
    let ad = bindscope_core::device::test_device().autodiff();
    let m = model(&ad);
    let r = Reference::open("jer");
    let x = r.tensor::<4>("x", &ad);
    let inner = bindscope_core::device::test_device();
    let g = r.tensor::<2>("G", &inner);
    let v = r.tensor::<2>("V", &inner);
    let lin = m
        .linearize(x, VisionReadout::Summary, Outputs::Final)
        .expect("a ViT without pooler linearizes");
    // Measured: 2.7e-7 (CPU) and 4.8e-7 (wgpu on lavapipe) for Gᵀ·J. 3e-4 on a GPU backend, as
    // for the autodiff estimators (other summation orders; CUDA may multiply in TF32).
    let tol = if bindscope_core::device::testing_on_accelerator() {
        3e-4
    } else {
        1e-4
    };
    for chunk in [4, 3, 1] {
        let gtj = host(output_sketch_linearized(&lin, 0, g.clone(), chunk).unwrap());
        let e = relative_error(&gtj, &r.f32("GtJ").1);
        assert!(
            e <= tol,
            "shared Gᵀ·J vs torch.func.vjp: relative error {e:e} (chunk {chunk})"
        );
    }
    for chunk in [16, 5] {
        let jv = host(input_sketch_linearized(&lin, 0, 16, v.clone(), chunk).unwrap());
        let e = relative_error(&jv, &r.f32("JV").1);
        assert!(
            e <= tol,
            "shared J·V vs torch.func.jvp: relative error {e:e} (chunk {chunk})"
        );
    }
}

/// A model of `tests/fixtures/<name>` through the registry, frozen on the autodiff device.
fn fixture_model(name: &str, device: &Device) -> Box<dyn VisionEncoder> {
    let dir = crate::common::fixture(name);
    bindscope_models::registry::open_vision(
        &dir.display().to_string(),
        device,
        &LoadOptions::default(),
    )
    .unwrap()
    .model
}

/// How far the autodiff estimators may be from the shared backward: 1e-4 on the CPU. On a GPU
/// backend burn's autodiff differentiates the exact (erf) GELU with the derivative of its tanh
/// approximation (burn-backend's default `gelu_backward`): on the `jer` fixture on wgpu the
/// autodiff Gᵀ·J is 8.1e-5 from torch.func.vjp and the shared one 4.8e-7, and the two differ by
/// up to 4.8e-4 on the GELU fixtures here.
fn autodiff_tolerance() -> f32 {
    if bindscope_core::device::testing_on_accelerator() {
        2e-3
    } else {
        1e-4
    }
}

/// Every readout, final output and every block, odd probe sizes: the shared backward gives the
/// outputs of the model's own forward pass and the output and input sketches of the autodiff
/// estimators.
fn check_shared_against_autodiff(name: &str, readouts: &[VisionReadout], sizes: &[[usize; 2]]) {
    let inner = bindscope_core::device::test_device();
    let ad = inner.clone().autodiff();
    let m = fixture_model(name, &ad);
    for &readout in readouts {
        for &[h, w] in sizes {
            for kind in [Outputs::Final, Outputs::EveryBlock] {
                let depth = kind == Outputs::EveryBlock;
                let pixels = bindscope_jer::probe::probe_image(&ProbeSpec::paper(h, w), 3, 1);
                let x = Tensor::<1>::from_floats(pixels.as_slice(), &ad).reshape([1, 3, h, w]);
                let f = |x: Tensor<4>| bindscope_jer::study::outputs(m.as_ref(), x, readout, depth);
                let lin = m
                    .linearize(x.clone(), readout, kind)
                    .unwrap_or_else(|| panic!("{name} {readout:?} does not linearize"));
                let reference = f(x.clone());
                assert_eq!(lin.outputs().len(), reference.len());
                let what = format!("{name}, {readout:?}, {h}×{w}, {kind:?}");
                for (o, (a, b)) in lin.outputs().iter().zip(&reference).enumerate() {
                    let e = relative_error(&host(a.clone()), &host(b.clone().without_autodiff()));
                    assert!(e <= 1e-5, "{what}: output {o} differs by {e:e}");
                }
                for (o, y) in reference.iter().enumerate() {
                    let d = y.dims()[1];
                    let k = 5.min(d);
                    let mut r = bindscope_core::rng::stream(5, &[o as u64]);
                    let g = Tensor::<1>::from_floats(
                        bindscope_jer::probe::gaussian(d, k, &mut r).as_slice(),
                        &inner,
                    )
                    .reshape([d, k]);
                    let shared = host(output_sketch_linearized(&lin, o, g.clone(), 2).unwrap());
                    let auto = host(output_sketch(&f, &x, o, g, 3).unwrap());
                    let e = relative_error(&shared, &auto);
                    assert!(
                        e <= autodiff_tolerance(),
                        "{what}: Gᵀ·J of output {o}: relative error {e:e}"
                    );
                    let v = Tensor::<1>::from_floats(
                        bindscope_jer::probe::gaussian(3 * h * w, 3, &mut r).as_slice(),
                        &inner,
                    )
                    .reshape([3 * h * w, 3]);
                    let shared = host(input_sketch_linearized(&lin, o, d, v.clone(), 7).unwrap());
                    let auto = host(input_sketch(&f, &x, o, d, v, 16).unwrap());
                    let e = relative_error(&shared, &auto);
                    assert!(
                        e <= autodiff_tolerance(),
                        "{what}: J·V of output {o}: relative error {e:e}"
                    );
                }
            }
        }
    }
}

const READOUTS: [VisionReadout; 3] = [
    VisionReadout::Pooled,
    VisionReadout::Summary,
    VisionReadout::MeanPatch,
];

#[test]
fn shared_backward_matches_autodiff_dinov2() {
    // Layer scale, exact GELU, position embeddings resampled for 24×28 and a 26×30 probe whose
    // last pixel rows and columns no patch reads.
    check_shared_against_autodiff("dinov2", &READOUTS, &[[24, 28], [26, 30]]);
}

#[test]
fn shared_backward_matches_autodiff_clip() {
    // quick_gelu, pre_layrnorm, post_layernorm on the CLS token, visual_projection.
    check_shared_against_autodiff("clip", &READOUTS, &[[32, 32], [35, 33]]);
}

#[test]
fn shared_backward_matches_autodiff_vit() {
    // The pooler's dense + tanh head is not written out: Pooled falls back to autodiff there.
    check_shared_against_autodiff(
        "jer",
        &[VisionReadout::Summary, VisionReadout::MeanPatch],
        &[[16, 16], [18, 17]],
    );
}

#[test]
fn shared_backward_matches_autodiff_siglip() {
    // No CLS token; Pooled and Summary through the MAP head (a learned query attending over
    // every token after post_layernorm).
    check_shared_against_autodiff("siglip", &READOUTS, &[[32, 32], [29, 36]]);
}

#[test]
fn shared_backward_matches_autodiff_beit() {
    // Relative position biases per block (resampled for other grids), layer scale, mean pooling
    // through pooler.layernorm; the pre-training layout with one shared table and absolute
    // positions with a CLS readout; timm's fused qkv.
    check_shared_against_autodiff("beit", &READOUTS, &[[32, 32], [24, 41]]);
    check_shared_against_autodiff("beit/pretraining", &READOUTS, &[[32, 32], [40, 35]]);
    check_shared_against_autodiff("beit/absolute_cls", &READOUTS, &[[32, 32]]);
    check_shared_against_autodiff("beit/timm_beitv2", &READOUTS, &[[32, 32], [33, 30]]);
}

#[test]
fn shared_backward_matches_autodiff_vit_mae_and_ijepa() {
    check_shared_against_autodiff("vit_mae", &READOUTS, &[[32, 32], [40, 35]]);
    // No CLS token: every readout is the mean of all tokens.
    check_shared_against_autodiff("ijepa", &[VisionReadout::Pooled], &[[32, 32], [24, 41]]);
}

#[test]
fn jer_with_the_shared_backward_is_jer_with_autodiff() {
    let cpu = bindscope_core::device::test_device();
    let m = fixture_model("dinov2", &cpu.clone().autodiff());
    let spec = ProbeSpec::paper(24, 24);
    let f = |x: Tensor<4>| vec![m.embed(x, VisionReadout::Pooled)];
    let lin = |x: Tensor<4>| m.linearize(x, VisionReadout::Pooled, Outputs::Final);
    let d = m.info().embed_dim;
    for estimator in [Estimator::OutputSketch, Estimator::InputSketch] {
        let a = jer_at(&f, &spec, &[d], 6, estimator, 42, 2, 4, &cpu).unwrap();
        let b = jer_at_with(&f, Some(&lin), &spec, &[d], 6, estimator, 42, 2, 4, &cpu).unwrap();
        // 1e-5 on the CPU; on a GPU backend autodiff's GELU derivative is approximate
        // (`autodiff_tolerance`).
        let tol = if bindscope_core::device::testing_on_accelerator() {
            2e-3
        } else {
            1e-5
        };
        for (x, y) in a[0].sigma.iter().zip(&b[0].sigma) {
            assert!(
                (x - y).abs() <= tol * a[0].sigma[0],
                "{estimator}: σ {x} (autodiff) vs {y} (shared)"
            );
        }
        assert!(
            (a[0].jer - b[0].jer).abs() <= tol * a[0].jer,
            "{estimator}: JER {} vs {}",
            a[0].jer,
            b[0].jer
        );
    }
}

#[test]
fn models_without_written_out_derivatives_do_not_linearize() {
    let ad = bindscope_core::device::test_device().autodiff();
    let x = Tensor::<4>::zeros([1, 3, 24, 24], &ad);
    // SwiGLU DINOv2 (with registers) and a ViT pooler head.
    let m = fixture_model("dinov2_registers", &ad);
    assert!(
        m.linearize(x.clone(), VisionReadout::Pooled, Outputs::Final)
            .is_none()
    );
    let vit = fixture_model("vit", &ad);
    let size = vit.info().input_size;
    let x = Tensor::<4>::zeros([1, 3, size[0], size[1]], &ad);
    assert!(
        vit.linearize(x.clone(), VisionReadout::Pooled, Outputs::Final)
            .is_none()
    );
    // Its other readouts do not go through the pooler.
    assert!(
        vit.linearize(x, VisionReadout::Summary, Outputs::Final)
            .is_some()
    );
}
