//! Feature extraction end to end on the tiny random DINOv2 fixture (`tests/fixtures/dinov2`,
//! 24-px input, 4-px patches): cached shards, resume, readout definitions, bad models.

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::image::{ImageProcessor, ProcessorKind};
use bindscope_foveated::csb::CsbConfig;
use bindscope_foveated::features::{Cache, Extractor, FeatureError, Item, oracle_patches};
use bindscope_foveated::split::Split;
use bindscope_models::VisionReadout;
use burn::tensor::{Tensor, TensorData};
use std::path::PathBuf;

fn checkpoint() -> Checkpoint {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/dinov2");
    Checkpoint::from_dir(dir.to_str().unwrap(), &dir).unwrap()
}

fn items(n: usize, side: usize) -> Vec<Item> {
    let cfg = CsbConfig::default();
    (0..n)
        .map(|i| Item::from_scene(&cfg.base(42, Split::Train, i), side, 2))
        .collect()
}

#[test]
fn extraction_matches_the_readout_definitions_and_resumes() {
    let device = bindscope_core::device::test_device();
    let ckpt = checkpoint();
    let model =
        bindscope_models::registry::load_vision(&ckpt, &device, &LoadOptions::default()).unwrap();
    let proc = ImageProcessor::defaults(ProcessorKind::Bit);
    let side = 24;
    let ex = Extractor::new(model.as_ref(), "tiny-dinov2", proc.clone(), side, &device).unwrap();
    assert_eq!((ex.grid.cells, ex.grid.num_patches()), (6, 36));
    let its = items(10, side);

    // Readouts against independent computations.
    let f = ex.run(&its[..3]).unwrap();
    assert_eq!((f.n, f.p, f.d, f.e), (3, 36, 32, 32));
    let mut pix = Vec::new();
    for it in &its[..3] {
        pix.extend(proc.normalize(&it.image).data);
    }
    let x = Tensor::<4>::from_data(TensorData::new(pix, [3, 3, side, side]), &device);
    let summary: Vec<f32> = model
        .embed(x.clone(), VisionReadout::Summary)
        .into_data()
        .convert::<f32>()
        .try_to_vec()
        .unwrap();
    let close = |a: &[f32], b: &[f32], tol: f32| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol);
    assert!(
        close(&f.summary, &summary, 1e-5),
        "summary = the model's Summary readout"
    );
    let mean_patch: Vec<f32> = model
        .embed(x.clone(), VisionReadout::MeanPatch)
        .into_data()
        .convert::<f32>()
        .try_to_vec()
        .unwrap();
    assert!(
        close(&f.gap, &mean_patch, 1e-5),
        "gap = mean of the patch tokens"
    );
    let patches: Vec<f32> = model
        .patch_tokens(x)
        .into_data()
        .convert::<f32>()
        .try_to_vec()
        .unwrap();
    let as_f16: Vec<f32> = f.patch.iter().map(|h| h.to_f32()).collect();
    assert!(
        close(
            &as_f16,
            &patches,
            2e-3 * patches.iter().fold(1f32, |m, v| m.max(v.abs()))
        ),
        "patch tokens stored as f16"
    );
    for i in 0..3 {
        let cells = oracle_patches(&ex.grid, its[i].bbox);
        let mut want = vec![0f32; 32];
        for &k in &cells {
            for (w, v) in want
                .iter_mut()
                .zip(&patches[(i * 36 + k) * 32..(i * 36 + k + 1) * 32])
            {
                *w += v / cells.len() as f32;
            }
        }
        assert!(
            close(&f.oracle[i * 32..(i + 1) * 32], &want, 1e-5),
            "oracle = mean of the box's patches"
        );
    }

    // Cache: 10 items in shards of 4, resumable.
    let dir = tempfile::tempdir().unwrap();
    let id = serde_json::json!({ "test": 1 });
    let cache = Cache::open(dir.path(), &id, 4).unwrap();
    let make =
        |r: std::ops::Range<usize>| -> Result<Vec<Item>, FeatureError> { Ok(its[r].to_vec()) };
    let mut seen = 0;
    cache
        .extract(&ex, "train", 10, 3, &make, &mut |k| seen += k)
        .unwrap();
    assert_eq!(seen, 10);
    assert_eq!(cache.num_shards(10), 3);
    let labels: Vec<usize> = its.iter().map(|i| i.label).collect();
    let all = cache.load("train", &labels, true).unwrap();
    assert_eq!(all.n, 10);
    assert_eq!(
        &all.summary[..3 * 32],
        &f.summary[..],
        "batching does not change features"
    );
    std::fs::remove_file(cache.shard_path("train", 1)).unwrap();
    assert_eq!(cache.missing("train", 10), vec![1]);
    let mut seen = 0;
    cache
        .extract(&ex, "train", 10, 3, &make, &mut |k| seen += k)
        .unwrap();
    assert_eq!(seen, 4, "only the missing shard is re-encoded");
    assert_eq!(cache.load("train", &labels, true).unwrap().gap, all.gap);
    // A wrong label list is caught; a foreign identity is refused.
    let mut wrong = labels.clone();
    wrong[0] += 1;
    assert!(cache.load("train", &wrong, false).is_err());
    assert!(Cache::open(dir.path(), &serde_json::json!({ "test": 2 }), 4).is_err());
    // An input error is passed through with its message.
    let failing = |_: std::ops::Range<usize>| -> Result<Vec<Item>, FeatureError> {
        Err(FeatureError::Input("image 7 is broken".into()))
    };
    let err = cache
        .extract(&ex, "val", 2, 2, &failing, &mut |_| {})
        .unwrap_err();
    assert!(err.to_string().contains("image 7"), "{err}");
}

#[test]
fn a_model_without_a_patch_grid_is_a_named_error() {
    let device = bindscope_core::device::test_device();
    let ckpt = checkpoint();
    let model =
        bindscope_models::registry::load_vision(&ckpt, &device, &LoadOptions::default()).unwrap();
    let err = Extractor::new(
        model.as_ref(),
        "tiny-dinov2",
        ImageProcessor::defaults(ProcessorKind::Bit),
        3,
        &device,
    )
    .err()
    .expect("3 px is smaller than a patch");
    let msg = err.to_string();
    assert!(
        matches!(err, FeatureError::NoPatchGrid { .. }) && msg.contains("tiny-dinov2"),
        "{msg}"
    );
}

#[test]
fn clip_patch_tokens_go_through_post_layernorm() {
    // transformers' CLIP `last_hidden_state` has no final norm; the cached patch tokens (and so
    // GAP, oracle and the fovea) must be normed like every other model's.
    let device = bindscope_core::device::test_device();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/clip");
    let ckpt = Checkpoint::from_dir(dir.to_str().unwrap(), &dir).unwrap();
    let model =
        bindscope_models::registry::load_vision(&ckpt, &device, &LoadOptions::default()).unwrap();
    let proc = ImageProcessor::defaults(ProcessorKind::Clip);
    let side = 32;
    let ex = Extractor::new(model.as_ref(), "tiny-clip", proc.clone(), side, &device).unwrap();
    let its = items(2, side);
    let f = ex.run(&its).unwrap();
    assert_eq!((f.n, f.p, f.d), (2, 16, 32));
    let mut pix = Vec::new();
    for it in &its {
        pix.extend(proc.normalize(&it.image).data);
    }
    let x = Tensor::<4>::from_data(TensorData::new(pix, [2, 3, side, side]), &device);
    let to_vec =
        |t: Tensor<3>| -> Vec<f32> { t.into_data().convert::<f32>().try_to_vec().unwrap() };
    let normed = to_vec(model.patch_tokens(x.clone()));
    let out = model.forward_vision(x, bindscope_models::ForwardOptions::default());
    let raw = to_vec(out.last_hidden_state.slice([0..2, 1..17, 0..32]));
    let max_dev = |a: &[f32]| -> f32 {
        f.gap
            .iter()
            .enumerate()
            .map(|(j, g)| {
                let (i, c) = (j / 32, j % 32);
                let mean = (0..16).map(|k| a[(i * 16 + k) * 32 + c]).sum::<f32>() / 16.0;
                (g - mean).abs()
            })
            .fold(0.0, f32::max)
    };
    assert!(
        max_dev(&normed) < 1e-5,
        "gap = mean of the normed patch tokens"
    );
    assert!(
        max_dev(&raw) > 1e-2,
        "the raw tokens differ, so the check can fail"
    );
}
