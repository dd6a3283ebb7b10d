//! Opt-in: feature extraction on a real DINOv2 ViT-S/14 (`BINDSCOPE_REAL_MODELS=DIR` with
//! `DIR/dinov2-small-imgfocus/`), printing the encoding rate; otherwise prints a skip message.

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::image::ImageProcessor;
use bindscope_foveated::csb::CsbConfig;
use bindscope_foveated::features::{Extractor, Item};
use bindscope_foveated::split::Split;
use std::time::Instant;

#[test]
fn real_dinov2_extraction_rate() {
    let Ok(root) = std::env::var("BINDSCOPE_REAL_MODELS") else {
        eprintln!(
            "skipped: set BINDSCOPE_REAL_MODELS to a directory holding dinov2-small-imgfocus/"
        );
        return;
    };
    let dir = std::path::Path::new(&root).join("dinov2-small-imgfocus");
    let ckpt = Checkpoint::from_dir(dir.to_str().unwrap(), &dir).unwrap();
    let device = bindscope_core::device::test_device();
    let model =
        bindscope_models::registry::load_vision(&ckpt, &device, &LoadOptions::default()).unwrap();
    let proc = ImageProcessor::from_file(ckpt.preprocessor_config.as_ref().unwrap()).unwrap();
    let ex = Extractor::new(model.as_ref(), "dinov2-small", proc, 224, &device).unwrap();
    assert_eq!(ex.grid.cells, 16);
    let cfg = CsbConfig::default();
    let items: Vec<Item> = (0..16)
        .map(|i| Item::from_scene(&cfg.base(42, Split::Train, i), 224, 4))
        .collect();
    let _ = ex.run(&items[..2]).unwrap(); // warm-up
    let t = Instant::now();
    let f = ex.run(&items).unwrap();
    let s = t.elapsed().as_secs_f64();
    println!(
        "dinov2-small @224: {:.2} images/s ({} images in {s:.2} s)",
        16.0 / s,
        f.n
    );
    assert_eq!((f.n, f.p, f.d, f.e), (16, 256, 384, 384));
    assert!(
        f.summary
            .iter()
            .chain(&f.gap)
            .chain(&f.oracle)
            .all(|v| v.is_finite())
    );
}
