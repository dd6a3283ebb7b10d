//! Image decoding and preprocessing against Pillow + the transformers 5.x image processors on
//! their PIL backend (fixture `tests/fixtures/images`, generator `tests/fixtures/gen/images.py`,
//! versions in its `meta.json`).
//!
//! - decoded RGB arrays must be equal byte for byte (JPEG included: the decoder follows
//!   libjpeg-turbo, which Pillow links);
//! - `pixel_values` must match to 1e-4 for every image x processor, which is far below one uint8
//!   level after normalization (1 / 255 / std >= 0.015), i.e. the resize is uint8-exact.

use crate::common::fixture;
use bindscope_data::image::{
    Alpha, DecodeOptions, Filter, ImageError, ImageProcessor, ProcessorKind, ResizeTo, RgbImage,
    decode_file, exif_orientation, load_dir,
};
use std::path::PathBuf;

const FILES: [&str; 15] = [
    "cmyk.jpg",
    "gray.png",
    "gray16.png",
    "gray_alpha.png",
    "gray_alpha16.png",
    "gray_jpeg.jpg",
    "gray_trns.png",
    "palette.png",
    "palette_alpha.png",
    "rgb16.png",
    "rgb_exif6.jpg",
    "rgb_prog_exif3.jpg",
    "rgb_trns.png",
    "rgba.png",
    "rgba16.png",
];
/// Files with an alpha band or a `tRNS` transparency (transformers 5.x composites them).
const ALPHA_FILES: [&str; 8] = [
    "gray_alpha.png",
    "gray_alpha16.png",
    "gray_trns.png",
    "palette.png",
    "palette_alpha.png",
    "rgb_trns.png",
    "rgba.png",
    "rgba16.png",
];
/// Transparency variants preprocessed by one processor only (`bit`, DINOv2 style).
const ALPHA_VARIANTS: [&str; 5] = [
    "gray_alpha16.png",
    "gray_trns.png",
    "palette_alpha.png",
    "rgb_trns.png",
    "rgba16.png",
];
const PROCESSORS: [&str; 6] = ["clip", "siglip", "bit", "vit", "clip_pad", "vit_lanczos"];
/// Max abs error allowed on pixel_values (uint8-exact resize; f32 rounding only).
const TOL: f32 = 1e-4;

fn files_dir() -> PathBuf {
    fixture("images").join("files")
}

fn stem(file: &str) -> &str {
    file.rsplit_once('.').unwrap().0
}

/// The reference tensors (uint8 ones are read here; f32 ones through `crate::common::Reference`).
struct Fixture {
    bytes: Vec<u8>,
}

impl Fixture {
    fn open() -> Self {
        let path = fixture("images").join("reference.safetensors");
        Self {
            bytes: std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        }
    }

    fn has(&self, key: &str) -> bool {
        safetensors::SafeTensors::deserialize(&self.bytes)
            .unwrap()
            .tensor(key)
            .is_ok()
    }

    /// A uint8 `[H, W, 3]` reference as an image.
    fn rgb(&self, key: &str) -> RgbImage {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).unwrap();
        let t = st
            .tensor(key)
            .unwrap_or_else(|_| panic!("no tensor '{key}' in the images reference"));
        assert_eq!(t.dtype(), safetensors::Dtype::U8, "{key} is not uint8");
        let s = t.shape();
        assert_eq!((s.len(), s[2]), (3, 3), "{key}: shape {s:?}");
        RgbImage::new(s[1], s[0], t.data().to_vec()).unwrap()
    }

    /// An f32 reference: shape and values.
    fn f32(&self, key: &str) -> (Vec<usize>, Vec<f32>) {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).unwrap();
        let t = st
            .tensor(key)
            .unwrap_or_else(|_| panic!("no tensor '{key}' in the images reference"));
        assert_eq!(t.dtype(), safetensors::Dtype::F32, "{key} is not f32");
        let v = t
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        (t.shape().to_vec(), v)
    }
}

/// Asserts two images are identical, reporting the first differing pixel and the max difference.
fn assert_same_image(what: &str, got: &RgbImage, want: &RgbImage) {
    assert_eq!(
        (got.width, got.height),
        (want.width, want.height),
        "{what}: size (width, height)"
    );
    let diffs: Vec<(usize, i32)> = got
        .data
        .iter()
        .zip(&want.data)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| (i, (*a as i32 - *b as i32).abs()))
        .collect();
    if let Some(&(i, _)) = diffs.first() {
        let max = diffs.iter().map(|d| d.1).max().unwrap();
        let (px, c) = (i / 3, i % 3);
        panic!(
            "{what}: {} of {} samples differ (max {max}); first at x={} y={} c={c}: {} vs {}",
            diffs.len(),
            want.data.len(),
            px % want.width,
            px / want.width,
            got.data[i],
            want.data[i]
        );
    }
}

fn max_abs_err(what: &str, got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = 0f32;
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let d = (a - b).abs();
        assert!(d.is_finite(), "{what}[{i}]: {a} vs {b}");
        worst = worst.max(d);
    }
    worst
}

#[test]
fn decoded_rgb_equals_pillow() {
    let fx = Fixture::open();
    for file in FILES {
        let got = decode_file(files_dir().join(file), &DecodeOptions::hf())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_same_image(file, &got, &fx.rgb(&format!("decoded.{}", stem(file))));
    }
}

/// transformers 5.x composites transparency over white (`decoded.*`, made by its own
/// `convert_to_rgb`); [`DecodeOptions::hf_v4`] keeps 4.x's dropped alpha (`decoded_v4.*`).
#[test]
fn transparency_follows_transformers_5_and_4() {
    let fx = Fixture::open();
    assert_eq!(DecodeOptions::hf(), DecodeOptions::default());
    for file in ALPHA_FILES {
        let (v5, v4) = (
            format!("decoded.{}", stem(file)),
            format!("decoded_v4.{}", stem(file)),
        );
        assert!(fx.has(&v4), "fixture lacks {v4}");
        let got = decode_file(files_dir().join(file), &DecodeOptions::hf()).unwrap();
        assert_same_image(&format!("{file} (transformers 5)"), &got, &fx.rgb(&v5));
        let white = decode_file(
            files_dir().join(file),
            &DecodeOptions {
                alpha: Alpha::WHITE,
                exif_orientation: true,
            },
        )
        .unwrap();
        assert_eq!(white, got, "{file}: Alpha::WHITE");
        let dropped = decode_file(files_dir().join(file), &DecodeOptions::hf_v4()).unwrap();
        assert_same_image(&format!("{file} (transformers 4)"), &dropped, &fx.rgb(&v4));
        assert_ne!(got, dropped, "{file}: compositing changed nothing");
    }
    // Files without transparency decode the same either way.
    for file in FILES.iter().filter(|f| !ALPHA_FILES.contains(f)) {
        let key = format!("decoded_v4.{}", stem(file));
        assert!(!fx.has(&key), "{key} for a file without transparency");
        assert_eq!(
            decode_file(files_dir().join(file), &DecodeOptions::hf()).unwrap(),
            decode_file(files_dir().join(file), &DecodeOptions::hf_v4()).unwrap(),
            "{file}"
        );
    }
}

/// Every (value, alpha) pair: `alpha_table/rgba.png` decoded with [`DecodeOptions::hf`] equals
/// `alpha_table/white.png`, transformers' `convert_to_rgb` of it (Pillow's `alpha_composite`).
#[test]
fn alpha_composite_equals_pillow_on_every_value_and_alpha() {
    let dir = fixture("images").join("alpha_table");
    let got = decode_file(dir.join("rgba.png"), &DecodeOptions::hf()).unwrap();
    let want = decode_file(dir.join("white.png"), &DecodeOptions::hf()).unwrap();
    assert_eq!((got.width, got.height), (256, 256));
    assert_same_image("alpha_table", &got, &want);
    // The table is what it claims: alpha 0 gives white, alpha 255 the stored values.
    let dropped = decode_file(dir.join("rgba.png"), &DecodeOptions::hf_v4()).unwrap();
    assert_eq!(&got.data[..3], &[255, 255, 255]);
    let last_row = 255 * 256 * 3;
    assert_eq!(&got.data[last_row..], &dropped.data[last_row..]);
}

#[test]
fn exif_orientation_all_eight_values() {
    let fx = Fixture::open();
    let dir = fixture("images").join("orient");
    for k in 1..=8u8 {
        let path = dir.join(format!("o{k}.png"));
        assert_eq!(
            exif_orientation(&std::fs::read(&path).unwrap()),
            k,
            "{}",
            path.display()
        );
        let got = decode_file(&path, &DecodeOptions::hf()).unwrap();
        assert_same_image(&format!("o{k}.png"), &got, &fx.rgb(&format!("orient.o{k}")));
    }
    // Orientation off: the stored pixels, as the HF processors see a file without exif_transpose.
    let raw = decode_file(
        files_dir().join("rgb_exif6.jpg"),
        &DecodeOptions {
            exif_orientation: false,
            ..DecodeOptions::hf()
        },
    )
    .unwrap();
    assert_same_image(
        "rgb_exif6.jpg without orientation",
        &raw,
        &fx.rgb("raw.rgb_exif6"),
    );
}

#[test]
fn pixel_values_match_transformers_pil_processors() {
    let fx = Fixture::open();
    let device = bindscope_core::device::test_device();
    let mut checked = 0;
    for proc_name in PROCESSORS {
        let cfg = fixture("images")
            .join(proc_name)
            .join("preprocessor_config.json");
        let proc = ImageProcessor::from_file(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let mut worst = 0f32;
        let mut batch_imgs = Vec::new();
        let mut batch_refs = Vec::new();
        for file in FILES {
            let key = format!("pixel_values.{proc_name}.{}", stem(file));
            if !fx.has(&key) {
                assert!(
                    proc_name.contains('_')
                        || (ALPHA_VARIANTS.contains(&file) && proc_name != "bit"),
                    "fixture lacks {key}"
                );
                continue;
            }
            let (shape, want) = fx.f32(&key);
            // From the reference decoded array: tests resize / crop / normalize alone.
            let from_ref = proc
                .preprocess(&fx.rgb(&format!("decoded.{}", stem(file))))
                .unwrap();
            assert_eq!(
                vec![1, 3, from_ref.height, from_ref.width],
                shape,
                "{key}: shape"
            );
            let e1 = max_abs_err(&key, &from_ref.data, &want);
            // End to end from the file.
            let img = decode_file(files_dir().join(file), &DecodeOptions::hf()).unwrap();
            let from_file = proc.preprocess(&img).unwrap();
            let e2 = max_abs_err(&key, &from_file.data, &want);
            assert!(
                e1 <= TOL && e2 <= TOL,
                "{key}: max abs error {e1:e} (from array), {e2:e} (from file) > {TOL:e}"
            );
            worst = worst.max(e1).max(e2);
            batch_imgs.push(img);
            batch_refs.extend_from_slice(&want);
            checked += 1;
        }
        // The batched burn tensor [N, 3, H, W] holds the same values in order.
        let t = proc.pixel_values(&batch_imgs, &device).unwrap();
        let dims = t.dims();
        assert_eq!(dims[0], batch_imgs.len(), "{proc_name}: batch size");
        let got: Vec<f32> = t.into_data().try_into_vec::<f32>().unwrap();
        let eb = max_abs_err(proc_name, &got, &batch_refs);
        assert!(eb <= TOL, "{proc_name}: batch tensor max abs error {eb:e}");
        println!(
            "{proc_name}: {} images, max abs error {worst:e}",
            batch_imgs.len()
        );
    }
    assert_eq!(
        checked,
        4 * (FILES.len() - ALPHA_VARIANTS.len()) + ALPHA_VARIANTS.len() + 2 * 3,
        "image x processor cases checked"
    );
}

#[test]
fn corrupt_file_error_names_the_file() {
    let path = files_dir().join("corrupt.jpg");
    let err = decode_file(&path, &DecodeOptions::default()).expect_err("truncated JPEG decoded");
    let msg = err.to_string();
    assert!(matches!(err, ImageError::Corrupt { .. }), "{msg}");
    assert!(msg.contains("corrupt.jpg") && msg.contains("JPEG"), "{msg}");

    // Not an image at all.
    let json = fixture("images")
        .join("clip")
        .join("preprocessor_config.json");
    let err = decode_file(&json, &DecodeOptions::default()).expect_err("JSON decoded as an image");
    assert!(matches!(err, ImageError::Unsupported { .. }), "{err}");
    assert!(
        err.to_string().contains("preprocessor_config.json"),
        "{err}"
    );

    // Missing file.
    let err = decode_file(files_dir().join("missing.png"), &DecodeOptions::default()).unwrap_err();
    assert!(
        matches!(err, ImageError::Io { .. }) && err.to_string().contains("missing.png"),
        "{err}"
    );
}

#[test]
fn load_dir_reports_every_failure() {
    let load = load_dir(files_dir(), &DecodeOptions::hf()).unwrap();
    assert_eq!(load.results.len(), FILES.len() + 1, "{}", load.summary());
    assert_eq!(load.ok_count(), FILES.len());
    assert_eq!(load.failure_count(), 1, "{}", load.summary());
    let failed: Vec<_> = load
        .failures()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(failed, ["corrupt.jpg"]);
    let summary = load.summary();
    assert!(
        summary.contains("15 of 16 files decoded, 1 failed") && summary.contains("corrupt.jpg"),
        "{summary}"
    );
    match load.into_result() {
        Err(ImageError::Dir {
            failed: 1,
            total: 16,
            first,
            ..
        }) => assert!(first.contains("corrupt.jpg"), "{first}"),
        other => panic!("expected a Dir error, got {other:?}"),
    }
    // The orientation directory has no failures.
    let ok = load_dir(fixture("images").join("orient"), &DecodeOptions::hf()).unwrap();
    assert_eq!((ok.ok_count(), ok.failure_count()), (8, 0));
    assert_eq!(ok.into_result().unwrap().len(), 8);
}

#[test]
fn processor_configs_follow_transformers_rules() {
    let parse = |s: &str| ImageProcessor::from_json(&serde_json::from_str(s).unwrap(), None);
    // Class defaults.
    let clip = parse(r#"{"image_processor_type": "CLIPImageProcessor"}"#).unwrap();
    assert_eq!(
        (clip.size, clip.crop_size, clip.do_center_crop),
        (ResizeTo::ShortestEdge(224), (224, 224), true)
    );
    assert_eq!(clip.image_mean, [0.48145466, 0.4578275, 0.40821073]);
    let vit = parse(r#"{"feature_extractor_type": "ViTFeatureExtractor"}"#).unwrap();
    assert_eq!(
        (vit.kind, vit.size, vit.do_center_crop),
        (
            ProcessorKind::Vit,
            ResizeTo::Exact {
                height: 224,
                width: 224
            },
            false
        )
    );
    // Int sizes: shortest edge for CLIP / Bit, square for ViT; crop_size int is square; lists are (h, w).
    let bit = parse(
        r#"{"image_processor_type": "BitImageProcessorFast", "size": 256, "crop_size": 224}"#,
    )
    .unwrap();
    assert_eq!(
        (bit.kind, bit.size, bit.crop_size),
        (ProcessorKind::Bit, ResizeTo::ShortestEdge(256), (224, 224))
    );
    // transformers 5.x's PIL backend class names (`...Pil`) name the same processors.
    let pil = parse(r#"{"image_processor_type": "BitImageProcessorPil"}"#).unwrap();
    assert_eq!(pil.kind, ProcessorKind::Bit);
    let vit = parse(r#"{"image_processor_type": "ViTImageProcessor", "size": 384}"#).unwrap();
    assert_eq!(
        vit.size,
        ResizeTo::Exact {
            height: 384,
            width: 384
        }
    );
    let sig = parse(
        r#"{"image_processor_type": "SiglipImageProcessor", "size": [20, 30], "image_mean": 0.5}"#,
    )
    .unwrap();
    assert_eq!(
        (sig.size, sig.image_mean),
        (
            ResizeTo::Exact {
                height: 20,
                width: 30
            },
            [0.5; 3]
        )
    );
    // Size dicts must have exactly one of transformers' key sets; longest_edge is ignored by CLIP.
    let le = parse(r#"{"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 64, "longest_edge": 99}}"#).unwrap();
    assert_eq!(le.size, ResizeTo::ShortestEdge(64));
    // Shortest-edge output size: int(s * long / short), as Python truncates.
    assert_eq!(clip.resized_size(37, 23), (224, 360));
    assert_eq!(clip.resized_size(23, 37), (360, 224));
    // Errors.
    for bad in [
        r#"{"image_processor_type": "DeiTImageProcessor"}"#,
        r#"{"image_processor_type": "SiglipImageProcessor", "size": {"shortest_edge": 224}}"#,
        r#"{"image_processor_type": "CLIPImageProcessor", "resample": 7}"#,
        r#"{"image_processor_type": "CLIPImageProcessor", "image_mean": [0.5, 0.5]}"#,
        r#"{"size": 224}"#,
        r#"{"image_processor_type": "CLIPImageProcessor", "size": {"height": 8, "width": 8, "shortest_edge": 8}}"#,
        r#"{"image_processor_type": "ViTImageProcessor", "size": {"longest_edge": 224}}"#,
        r#"{"image_processor_type": "CLIPImageProcessor", "crop_size": {"shortest_edge": 224}}"#,
        r#"{"image_processor_type": "CLIPImageProcessor", "size": 0}"#,
    ] {
        assert!(
            matches!(parse(bad), Err(ImageError::Config { .. })),
            "accepted {bad}"
        );
    }
    // A batch whose images come out at different sizes cannot be stacked.
    let nocrop = parse(
        r#"{"image_processor_type": "CLIPImageProcessor", "size": 8, "do_center_crop": false}"#,
    )
    .unwrap();
    let a = RgbImage::new(10, 20, vec![0; 600]).unwrap();
    let b = RgbImage::new(20, 10, vec![0; 600]).unwrap();
    assert!(matches!(
        nocrop.preprocess_batch(&[a, b]),
        Err(ImageError::Config { .. })
    ));
}

#[test]
fn damaged_files_error_without_panicking() {
    use bindscope_data::image::decode_bytes;
    // Every JPEG / PNG fixture, truncated at many offsets and with single bytes changed: decoding
    // must return (an image or an error naming the file), never panic. Truncation right after
    // the header must be an error.
    let mut errors = 0;
    for file in FILES {
        let bytes = std::fs::read(files_dir().join(file)).unwrap();
        let name = format!("damaged-{file}");
        for cut in (2..bytes.len()).step_by(37) {
            if let Err(e) = decode_bytes(&bytes[..cut], &name, &DecodeOptions::default()) {
                assert!(e.to_string().contains(&name), "{e}");
                errors += 1;
            }
        }
        for pos in (0..bytes.len()).step_by(53) {
            let mut b = bytes.clone();
            b[pos] ^= 0x5A;
            let _ = decode_bytes(&b, &name, &DecodeOptions::default());
        }
        assert!(
            decode_bytes(
                &bytes[..bytes.len().min(120)],
                &name,
                &DecodeOptions::default()
            )
            .is_err(),
            "{file}"
        );
    }
    assert!(errors > 0);
}

/// `p` on `tests/fixtures/resnet/preprocess/{a,b,c,d}.png` against `preprocess.{name}` of `r`.
fn check_preprocess_images(p: &ImageProcessor, r: &crate::common::Reference, tol: f32) {
    for name in ["a", "b", "c", "d"] {
        let path = fixture("resnet")
            .join("preprocess")
            .join(format!("{name}.png"));
        let img = decode_file(&path, &DecodeOptions::hf()).unwrap();
        let got = p.preprocess(&img).unwrap();
        let (shape, want) = r.f32(&format!("preprocess.{name}"));
        assert_eq!(shape, [3, got.height, got.width], "{name}");
        let worst = got
            .data
            .iter()
            .zip(&want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(worst <= tol, "{name}: max |Δ| {worst:e}");
    }
}

/// torchvision's ImageNet evaluation transform (`Resize`, `CenterCrop`, `ToTensor`,
/// `Normalize`) on PIL images, the preprocessing of `.pth` releases without a processor config
/// (fixture `tests/fixtures/resnet`, torchvision 0.29.2): run at `Resize(24)`,
/// `CenterCrop(20)` on sizes whose crop offset rounds half to even (29×25 → 27×24: left 4
/// where transformers' floor gives 3). Uint8-exact, so 1e-6.
#[test]
fn torchvision_imagenet_transform_matches_torchvision() {
    let r = crate::common::Reference::open("resnet");
    let defaults = ImageProcessor::defaults(ProcessorKind::TorchvisionImageNet);
    assert_eq!(
        (defaults.size, defaults.crop_size),
        (ResizeTo::ShortestEdge(256), (224, 224))
    );
    assert_eq!(defaults.image_mean, [0.485, 0.456, 0.406]);
    assert_eq!(defaults.image_std, [0.229, 0.224, 0.225]);
    let p = ImageProcessor {
        size: ResizeTo::ShortestEdge(24),
        crop_size: (20, 20),
        ..defaults
    };
    check_preprocess_images(&p, &r, 1e-6);
}

/// A timm repository has no `preprocessor_config.json`: its `config.json`'s `pretrained_cfg`
/// gives timm's evaluation transform (timm 1.0.31's `resolve_data_config` + `create_transform`
/// on PIL images: short side to floor(32 / 0.9) = 35 bicubic, center crop 32, ImageNet
/// mean / std), fixture `tests/fixtures/beit/timm_beitv2`. Uint8-exact resize, so 1e-6.
#[test]
fn timm_checkpoints_preprocess_like_timm() {
    let r = crate::common::Reference::open("beit/timm_beitv2");
    let ckpt =
        bindscope_core::Checkpoint::resolve(&fixture("beit/timm_beitv2").display().to_string())
            .unwrap();
    let p = ImageProcessor::for_checkpoint(&ckpt).unwrap();
    assert_eq!(
        (p.kind, p.size, p.crop_size, p.resample),
        (
            ProcessorKind::TorchvisionImageNet,
            ResizeTo::ShortestEdge(35),
            (32, 32),
            Filter::Bicubic
        )
    );
    check_preprocess_images(&p, &r, 1e-6);
    let squash = serde_json::json!({"pretrained_cfg": {"crop_mode": "squash"}});
    let err = ImageProcessor::from_timm_config(&squash)
        .unwrap_err()
        .to_string();
    assert!(err.contains("crop_mode 'squash'"), "{err}");
}

/// An EVA-CLIP tower in timm's layout: the same transform with OpenAI CLIP's mean / std
/// (`tests/fixtures/eva`, timm 1.0.31).
#[test]
fn timm_eva_clip_preprocesses_like_timm() {
    let r = crate::common::Reference::open("eva");
    let ckpt = bindscope_core::Checkpoint::resolve(&fixture("eva").display().to_string()).unwrap();
    let p = ImageProcessor::for_checkpoint(&ckpt).unwrap();
    assert_eq!(
        (p.size, p.crop_size),
        (ResizeTo::ShortestEdge(35), (32, 32))
    );
    check_preprocess_images(&p, &r, 1e-6);
}

/// A `.pth` checkpoint has no `preprocessor_config.json`: it is preprocessed with torchvision's
/// ImageNet transform.
#[test]
fn pth_checkpoints_preprocess_like_torchvision() {
    let path = fixture("resnet").join("basic.pth");
    let ckpt = bindscope_core::Checkpoint::resolve(&path.display().to_string()).unwrap();
    let p = ImageProcessor::for_checkpoint(&ckpt).unwrap();
    assert_eq!(
        p,
        ImageProcessor::defaults(ProcessorKind::TorchvisionImageNet)
    );
}

/// `BeitImageProcessor` (transformers 5.24's PIL backend): an integer `size` is a square
/// (28 × 28, bicubic), then the center 24 × 24 crop, mean / std 0.5; fixture
/// `tests/fixtures/beit`. The Hub's `-pt22k` config (`BeitFeatureExtractor`, size 224, no crop)
/// reads to a plain 224 × 224 resize.
#[test]
fn beit_processor_matches_transformers() {
    let r = crate::common::Reference::open("beit");
    let p = ImageProcessor::from_file(fixture("beit").join("preprocessor_config.json")).unwrap();
    assert_eq!(p.kind, ProcessorKind::Beit);
    assert_eq!(
        (p.size, p.do_center_crop, p.crop_size),
        (
            ResizeTo::Exact {
                height: 28,
                width: 28
            },
            true,
            (24, 24)
        )
    );
    check_preprocess_images(&p, &r, 1e-4);
    let hub: serde_json::Value = serde_json::json!({
        "feature_extractor_type": "BeitFeatureExtractor", "size": 224, "crop_size": 224,
        "do_center_crop": false, "resample": 2, "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5]
    });
    let p = ImageProcessor::from_json(&hub, None).unwrap();
    assert_eq!(
        (p.size, p.do_center_crop, p.resample),
        (
            ResizeTo::Exact {
                height: 224,
                width: 224
            },
            false,
            Filter::Bilinear
        )
    );
}

/// `ConvNextImageProcessor` (transformers 5.24's PIL backend): `crop_pct` resize below 384
/// (`size 24`, `crop_pct 0.8`: short side 30, bicubic, center 24×24), fixture
/// `tests/fixtures/convnext`.
#[test]
fn convnext_processor_matches_transformers() {
    let r = crate::common::Reference::open("convnext");
    let p =
        ImageProcessor::from_file(fixture("convnext").join("preprocessor_config.json")).unwrap();
    assert_eq!(p.kind, ProcessorKind::ConvNext);
    assert_eq!(
        (p.size, p.crop_size),
        (ResizeTo::ShortestEdge(30), (24, 24))
    );
    check_preprocess_images(&p, &r, 1e-4);
    // From 384 on, a plain s × s resize; the Hub's convnext-*-224 configs give 256 then 224.
    let big: serde_json::Value = serde_json::json!({
        "image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 384}
    });
    let p = ImageProcessor::from_json(&big, None).unwrap();
    assert_eq!(
        (p.size, p.do_center_crop),
        (
            ResizeTo::Exact {
                height: 384,
                width: 384
            },
            false
        )
    );
    let hub: serde_json::Value = serde_json::json!({
        "feature_extractor_type": "ConvNextFeatureExtractor", "size": 224, "crop_pct": 0.875,
        "resample": 3, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]
    });
    let p = ImageProcessor::from_json(&hub, None).unwrap();
    assert_eq!(
        (p.size, p.crop_size, p.do_center_crop),
        (ResizeTo::ShortestEdge(256), (224, 224), true)
    );
}

/// `LlavaOnevisionImageProcessorPil` (fixture `llava_onevision`, `gen/llava_onevision.py`): the
/// base view and the AnyRes tiles of two images on a tiny config (one padded top and bottom,
/// one left and right) and of a 200x150 image on the class defaults (384, 36 pinpoints;
/// compared on every 7th row and column), each to 1e-5, with the image sizes.
#[test]
fn llava_onevision_anyres_matches_transformers_pil_processor() {
    use bindscope_data::image::AnyresProcessor;
    let dir = fixture("llava_onevision");
    let r = crate::common::Reference::open("llava_onevision");
    let tiny = AnyresProcessor::from_file(dir.join("preprocessor_config.json")).unwrap();
    assert_eq!(tiny.image_grid_pinpoints, vec![[32, 64], [64, 64]]);
    for key in ["a", "b"] {
        let img = decode_file(dir.join(format!("image_{key}.png")), &DecodeOptions::hf()).unwrap();
        let got = tiny.preprocess(&img).unwrap();
        let (shape, want) = r.f32(&format!("{key}.pixel_values"));
        assert_eq!(got.pixel_values.shape.to_vec(), shape, "{key}: shape");
        let err = max_abs_err(key, &got.pixel_values.data, &want);
        assert!(err <= 1e-5, "{key}: pixel_values differ by {err}");
        let (_, size) = r.i64(&format!("{key}.image_sizes"));
        assert_eq!(
            got.image_size.map(|s| s as i64).to_vec(),
            size,
            "{key}: image_sizes"
        );
    }
    let real = AnyresProcessor::defaults();
    let img = decode_file(dir.join("real.png"), &DecodeOptions::hf()).unwrap();
    let got = real.preprocess(&img).unwrap();
    let (shape, want) = r.f32("real.pixel_values_sub");
    let [v, c, h, w] = got.pixel_values.shape;
    assert_eq!(
        shape,
        vec![v, c, h.div_ceil(7), w.div_ceil(7)],
        "default processor: views"
    );
    let mut sub = Vec::with_capacity(want.len());
    for i in 0..v * c {
        for y in (0..h).step_by(7) {
            for x in (0..w).step_by(7) {
                sub.push(got.pixel_values.data[(i * h + y) * w + x]);
            }
        }
    }
    let err = max_abs_err("real", &sub, &want);
    assert!(
        err <= 1e-5,
        "default processor: pixel_values differ by {err}"
    );
    let (_, size) = r.i64("real.image_sizes");
    assert_eq!(got.image_size.map(|s| s as i64).to_vec(), size);
}

/// Bad `image_grid_pinpoints` and sizes are refused naming the field.
#[test]
fn llava_onevision_processor_config_errors_name_the_field() {
    use bindscope_data::image::AnyresProcessor;
    let base = serde_json::json!({"size": {"height": 32, "width": 32}});
    let with = |k: &str, v: serde_json::Value| {
        let mut c = base.clone();
        c[k] = v;
        AnyresProcessor::from_json(&c).unwrap_err().to_string()
    };
    assert!(
        with("image_grid_pinpoints", serde_json::json!([[32, 48]]))
            .contains("image_grid_pinpoints[0]")
    );
    assert!(with("image_grid_pinpoints", serde_json::json!([])).contains("empty"));
    assert!(with("size", serde_json::json!({"height": 32, "width": 64})).contains("square"));
    assert!(with("size", serde_json::json!({"shortest_edge": 32})).contains("shortest_edge"));
    // A plain processor would hand out the base view only: the class alone is refused.
    let err =
        ImageProcessor::from_file(fixture("llava_onevision").join("preprocessor_config.json"))
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("AnyresProcessor") && err.contains("preprocessor_config.json"),
        "{err}"
    );
}

/// `save_png` round-trips through the decoder, and a failed write names the file.
#[test]
fn save_png_round_trips_and_names_a_failed_file() {
    use bindscope_data::image::save_png;
    let dir = tempfile::tempdir().unwrap();
    let img = RgbImage::new(3, 2, (0..18).collect()).unwrap();
    let path = dir.path().join("a.png");
    save_png(&img, &path).unwrap();
    assert_eq!(decode_file(&path, &DecodeOptions::hf()).unwrap(), img);
    let bad = dir.path().join("missing-dir/b.png");
    let err = save_png(&img, &bad).unwrap_err();
    assert!(matches!(err, ImageError::Write { .. }), "{err}");
    assert!(
        err.to_string().contains("missing-dir/b.png: cannot write"),
        "{err}"
    );
}
