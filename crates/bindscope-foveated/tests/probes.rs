//! Probe training sanity on synthetic feature sets with known structure.

use bindscope_foveated::features::Features;
use bindscope_foveated::probe::{
    Data, HeadSpec, PoolSpec, TrainConfig, cross_entropy, predict, top1, train,
};
use burn::tensor::{Tensor, TensorData, f16};
use rand::Rng;

fn gauss<R: Rng>(rng: &mut R) -> f32 {
    bindscope_core::rng::legacy::box_muller(rng) as f32
}

/// `n` points of `classes` well-separated Gaussian blobs in `dim` dimensions.
fn blobs(n: usize, classes: usize, dim: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
    let mut rng = bindscope_foveated::rng::stream(seed, &[1000]);
    let mut centres = bindscope_foveated::rng::stream(0, &[1001]);
    let mu: Vec<Vec<f32>> = (0..classes)
        .map(|_| (0..dim).map(|_| 3.0 * gauss(&mut centres)).collect())
        .collect();
    let mut x = Vec::new();
    let mut y = Vec::new();
    for i in 0..n {
        let c = i % classes;
        x.extend(mu[c].iter().map(|m| m + 0.5 * gauss(&mut rng)));
        y.push(c);
    }
    (x, y)
}

/// XOR of the signs of the first two coordinates (not linearly separable), plus noise dims.
fn xor(n: usize, dim: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
    let mut rng = bindscope_foveated::rng::stream(seed, &[2000]);
    let mut x = Vec::new();
    let mut y = Vec::new();
    for _ in 0..n {
        let a: f32 = rng.random::<f32>() * 2.0 - 1.0;
        let b: f32 = rng.random::<f32>() * 2.0 - 1.0;
        x.push(a * 2.0);
        x.push(b * 2.0);
        for _ in 2..dim {
            x.push(0.1 * gauss(&mut rng));
        }
        y.push(((a > 0.0) != (b > 0.0)) as usize);
    }
    (x, y)
}

fn cfg(seed: u64, epochs: usize, batch: usize, lr: f64) -> TrainConfig {
    TrainConfig {
        epochs,
        batch,
        lr,
        ..TrainConfig::synthetic(seed)
    }
}

/// The exact CSB / CSD recipe (Adam 1e-3, batch 512, 30 epochs) on a training set of the
/// study's size reaches ~100 % on separable data.
#[test]
fn linear_probe_separates_blobs() {
    let device = bindscope_core::device::test_device();
    let (xt, yt) = blobs(6000, 6, 16, 1);
    let (xv, yv) = blobs(300, 6, 16, 2);
    let (xs, ys) = blobs(300, 6, 16, 3);
    let (tr, va, te) = (
        Data::Pooled { x: &xt, dim: 16 },
        Data::Pooled { x: &xv, dim: 16 },
        Data::Pooled { x: &xs, dim: 16 },
    );
    let out = train(
        PoolSpec::Fixed,
        HeadSpec::Linear,
        6,
        &tr,
        &yt,
        &va,
        &yv,
        &TrainConfig::synthetic(7),
        &device,
    );
    let acc = top1(&predict(&out.probe, &te, &device, false).predictions(), &ys);
    assert!(acc >= 0.99, "linear probe on separable blobs: {acc}");
    // The returned probe is the best-validation epoch.
    let best = out
        .history
        .iter()
        .map(|h| h.val_selection)
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(out.best_val, best);
    assert_eq!(out.history[out.best_epoch - 1].val_selection, best);
    let val_acc = top1(&predict(&out.probe, &va, &device, false).predictions(), &yv);
    assert_eq!(
        val_acc, best,
        "restored checkpoint reproduces its validation accuracy"
    );
    assert_eq!(out.history.len(), 30);
}

#[test]
fn mlp_solves_xor_that_linear_cannot() {
    let device = bindscope_core::device::test_device();
    let (xt, yt) = xor(2000, 8, 1);
    let (xv, yv) = xor(500, 8, 2);
    let (tr, va) = (
        Data::Pooled { x: &xt, dim: 8 },
        Data::Pooled { x: &xv, dim: 8 },
    );
    let c = cfg(3, 60, 64, 1e-2);
    let mlp = train(
        PoolSpec::Fixed,
        HeadSpec::mlp128(),
        2,
        &tr,
        &yt,
        &va,
        &yv,
        &c,
        &device,
    );
    let lin = train(
        PoolSpec::Fixed,
        HeadSpec::Linear,
        2,
        &tr,
        &yt,
        &va,
        &yv,
        &c,
        &device,
    );
    assert!(mlp.best_val >= 0.95, "MLP on XOR: {}", mlp.best_val);
    assert!(lin.best_val <= 0.75, "linear on XOR: {}", lin.best_val);
}

/// Patch sets where one marked patch (dimension 0 = 4) carries the class as a one-hot code and
/// `P − 1` unmarked patches carry random class codes: pooling everything blurs the label, a
/// query that finds the marker reads it exactly.
fn marked_patches(n: usize, p: usize, classes: usize, seed: u64) -> Features {
    let d = classes + 1;
    let mut rng = bindscope_foveated::rng::stream(seed, &[3000]);
    let mut patch = Vec::new();
    let mut label = Vec::new();
    let mut gap = Vec::new();
    for i in 0..n {
        let y = i % classes;
        let target = rng.random_range(0..p);
        let mut mean = vec![0f32; d];
        for k in 0..p {
            let mut v = vec![0f32; d];
            if k == target {
                v[0] = 4.0;
                v[1 + y] = 1.0;
            } else {
                v[1 + rng.random_range(0..classes)] = 1.0;
            }
            for (m, x) in mean.iter_mut().zip(&v) {
                *m += x / p as f32;
            }
            patch.extend(v.into_iter().map(f16::from_f32));
        }
        gap.extend(mean);
        label.push(y);
    }
    Features {
        n,
        p,
        d,
        e: 0,
        patch,
        gap,
        label,
        ..Default::default()
    }
}

#[test]
fn fovea_finds_the_marked_patch() {
    let device = bindscope_core::device::test_device();
    let (p, c) = (12, 4);
    let ft = marked_patches(1200, p, c, 1);
    let fv = marked_patches(400, p, c, 2);
    let conf = cfg(5, 30, 128, 1e-2);
    let fovea = train(
        PoolSpec::Fovea,
        HeadSpec::Linear,
        c,
        &Data::Patches(&ft),
        &ft.label,
        &Data::Patches(&fv),
        &fv.label,
        &conf,
        &device,
    );
    assert!(fovea.best_val >= 0.98, "fovea accuracy {}", fovea.best_val);
    let out = predict(&fovea.probe, &Data::Patches(&fv), &device, true);
    assert_eq!(out.attention.len(), fv.n * p);
    // Mean attention mass on the marked patch.
    let mut mass = 0.0;
    for i in 0..fv.n {
        let target = (0..p)
            .find(|&k| fv.patch[(i * p + k) * (c + 1)].to_f32() == 4.0)
            .unwrap();
        mass += out.attention[i * p + target] as f64;
    }
    mass /= fv.n as f64;
    assert!(mass > 0.5, "attention on the marked patch {mass}");
    // GAP of the same tokens is worse: the random codes blur the class.
    let gap = train(
        PoolSpec::Fixed,
        HeadSpec::Linear,
        c,
        &Data::Pooled {
            x: &ft.gap,
            dim: c + 1,
        },
        &ft.label,
        &Data::Pooled {
            x: &fv.gap,
            dim: c + 1,
        },
        &fv.label,
        &conf,
        &device,
    );
    assert!(
        gap.best_val < fovea.best_val - 0.1,
        "gap {} vs fovea {}",
        gap.best_val,
        fovea.best_val
    );
}

#[test]
fn training_is_deterministic_per_seed() {
    let device = bindscope_core::device::test_device();
    let (xt, yt) = blobs(200, 3, 8, 1);
    let (xv, yv) = blobs(100, 3, 8, 2);
    let (tr, va) = (
        Data::Pooled { x: &xt, dim: 8 },
        Data::Pooled { x: &xv, dim: 8 },
    );
    let c = cfg(11, 3, 32, 1e-3);
    let run = |seed: u64| {
        let out = train(
            PoolSpec::Fixed,
            HeadSpec::mlp128(),
            3,
            &tr,
            &yt,
            &va,
            &yv,
            &TrainConfig { seed, ..c.clone() },
            &device,
        );
        predict(&out.probe, &va, &device, false).logits
    };
    assert_eq!(run(11), run(11));
    assert_ne!(run(11), run(12));
}

#[test]
fn cross_entropy_matches_hand_values() {
    let device = bindscope_core::device::test_device();
    // Row 0: p = (1/4, 3/4), y = 0 → ln 4. Row 1: p = (1/2, 1/2), y = 1 → ln 2.
    let logits = Tensor::<2>::from_data(
        TensorData::new(vec![0.0, 3f32.ln(), 0.0, 0.0], [2, 2]),
        &device,
    );
    let plain = cross_entropy(logits.clone(), &[0, 1], None, &device).into_scalar::<f32>() as f64;
    assert!(
        (plain - (4f64.ln() + 2f64.ln()) / 2.0).abs() < 1e-6,
        "{plain}"
    );
    // Weights (3, 1): (3·ln 4 + 1·ln 2) / 4, torch's weighted mean.
    let w = cross_entropy(logits, &[0, 1], Some(&[3.0, 1.0]), &device).into_scalar::<f32>() as f64;
    assert!(
        (w - (3.0 * 4f64.ln() + 2f64.ln()) / 4.0).abs() < 1e-6,
        "{w}"
    );
}
