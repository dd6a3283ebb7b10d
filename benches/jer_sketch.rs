//! Output-sketch JER of one 224×224 probe image, k = 32, then the SVD, with the shared backward
//! (`_shared`: one forward pass, 32 cotangents through the written-out backward, the default) and
//! with autodiff (`_autodiff`: one batched backward over 32 copies of the image), for ViT-S/14 (DINOv2-small config) and ViT-B/16 (CLIP B/16 config), random
//! weights, on the device `BURN_DEVICE` names (CPU by default). PyTorch counterpart doing the
//! paper's method (`torch.func.jvp` vmapped over 32 tangents): `benches/pytorch_jer.py`.
//! Results: `benches/README.md`.

use bindscope_jer::probe::ProbeSpec;
use bindscope_jer::sketch::Linearize;
use bindscope_jer::{Estimator, jer_at_with};
use bindscope_models::clip::{ClipConfig, ClipVisionModel};
use bindscope_models::dinov2::{Dinov2Config, Dinov2Model};
use bindscope_models::linearize::Outputs;
use bindscope_models::{VisionEncoder, VisionReadout, randomize};
use burn::module::Module;
use burn::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;
use std::time::Duration;

fn bench_model(
    g: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    name: &str,
    model: &dyn VisionEncoder,
    dim: usize,
) {
    let device = bindscope_core::device::test_device();
    let spec = ProbeSpec::paper(224, 224);
    let f = |x: Tensor<4>| vec![model.embed(x, VisionReadout::Pooled)];
    let lin = |x: Tensor<4>| model.linearize(x, VisionReadout::Pooled, Outputs::Final);
    let probe = Tensor::<4>::zeros([1, 3, 224, 224], &device);
    assert!(lin(probe).is_some(), "{name} has no shared backward");
    for (backward, linearize) in [("shared", Some(&lin as Linearize<'_>)), ("autodiff", None)] {
        g.bench_function(format!("{name}_{backward}"), |b| {
            b.iter(|| {
                jer_at_with(
                    &f,
                    linearize,
                    &spec,
                    &[dim],
                    32,
                    Estimator::OutputSketch,
                    42,
                    0,
                    32,
                    &device,
                )
                .expect("jer")
            })
        });
    }
}

fn jer_sketch(c: &mut Criterion) {
    bindscope_core::alloc::keep_freed_memory();
    let ad = bindscope_core::device::test_device().autodiff();
    let dino_cfg: Dinov2Config =
        serde_json::from_str(include_str!("configs/dinov2-small.json")).expect("config");
    let dino = Dinov2Model::init_random(&dino_cfg, &ad)
        .expect("dinov2")
        .no_grad();
    let clip_cfg: ClipConfig =
        serde_json::from_str(include_str!("configs/clip-vit-base-patch16.json")).expect("config");
    let file = Path::new("benches/configs/clip-vit-base-patch16.json");
    let clip = randomize(
        ClipVisionModel::new(&clip_cfg.vision_config, clip_cfg.projection_dim, file, &ad)
            .expect("clip"),
        0.02,
        0,
    )
    .no_grad();
    let mut g = c.benchmark_group("jer_sketch");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(60))
        .warm_up_time(Duration::from_secs(5));
    bench_model(
        &mut g,
        "jer_sketch_vit_s14_dinov2",
        &dino,
        dino_cfg.hidden_size,
    );
    bench_model(
        &mut g,
        "jer_sketch_vit_b16_clip",
        &clip,
        clip_cfg.projection_dim,
    );
    g.finish();
}

criterion_group!(benches, jer_sketch);
criterion_main!(benches);
