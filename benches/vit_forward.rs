//! ViT-B/16 forward (CLIP vision tower + projection, the real `openai/clip-vit-base-patch16`
//! config in `benches/configs/`, random weights), batch 8, 224×224, f32, on the device
//! `BURN_DEVICE` names (CPU by default).
//! PyTorch counterpart: `benches/pytorch_vit_forward.py`. Results: `benches/README.md`.

use bindscope_models::clip::{ClipConfig, ClipVisionModel};
use bindscope_models::{VisionEncoder, VisionReadout, randomize};
use burn::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;
use std::time::Duration;

fn vit_b16_forward(c: &mut Criterion) {
    bindscope_core::alloc::keep_freed_memory();
    let device = bindscope_core::device::test_device();
    let cfg: ClipConfig =
        serde_json::from_str(include_str!("configs/clip-vit-base-patch16.json")).expect("config");
    let file = Path::new("benches/configs/clip-vit-base-patch16.json");
    let model = randomize(
        ClipVisionModel::new(&cfg.vision_config, cfg.projection_dim, file, &device).expect("model"),
        0.02,
        0,
    );
    device.seed(1);
    let x = Tensor::<4>::random(
        [8, 3, 224, 224],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let mut g = c.benchmark_group("vit_forward");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(40))
        .warm_up_time(Duration::from_secs(5));
    g.bench_function("clip_vit_b16_forward_b8", |b| {
        b.iter(|| model.embed(x.clone(), VisionReadout::Pooled).into_data())
    });
    g.finish();
}

criterion_group!(benches, vit_b16_forward);
criterion_main!(benches);
