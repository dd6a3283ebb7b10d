//! GQA pair builder on the synthetic scene graphs of `tests/fixtures/foveated/gqa/`.
//!
//! The fixture (written by hand, see the case comments below) holds, in `train_sceneGraphs.json`:
//! 1: a white car left of a black car (pair), a 7-px-high red car (too small), a green tree (no
//!    partner), a red+white sign (multi-colour), a 5-px-wide cup (too small);
//! 2: a blue shirt above a red shirt (vertical pair); 3: two brown bags (same colour);
//! 4: balls 10 px apart (too close); 5: three chairs (more than two); 6: purple / pink flowers
//!    (purple is not an answer class); 7: bikes "Red" / "blue" ("Red" is not a literal match);
//! 11: cats exactly 20 px apart (kept); 12: hats 19.5 px apart (too close); 13: cones with
//!    |dx| = |dy| (horizontal); and in `val_sceneGraphs.json` 20 images with a black dog left of
//!    a brown dog.

use bindscope_data::image::RgbImage;
use bindscope_foveated::gqa::{
    self, BuildReport, GqaError, LABELS, Relation, build_pairs, check_images, class_weights,
    load_scene_graphs,
};
use bindscope_foveated::split::Split;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/foveated/gqa")
}

fn label(name: &str) -> usize {
    LABELS.iter().position(|l| *l == name).unwrap()
}

#[test]
fn builder_applies_every_rule() {
    let graphs = load_scene_graphs(&fixture()).unwrap();
    assert_eq!(graphs.len(), 30);
    let out = build_pairs(&graphs, 42, true).unwrap();
    let r = &out.report;
    assert_eq!(
        *r,
        BuildReport {
            images: 30,
            objects: 65,
            too_small: 2,
            no_colour: 1,
            multi_colour: 1,
            colour_bearing: 61,
            bad_boxes: 0,
            groups_over_two: 1,
            same_colour: 1,
            too_close: 2,
            outside_labels: 1,
            pairs: 24,
            pair_images: 24,
            pairs_per_split: [19, 2, 3],
        }
    );
    let by_image: BTreeMap<&str, Vec<&gqa::Question>> =
        out.questions.iter().fold(BTreeMap::new(), |mut m, q| {
            m.entry(q.image_id.as_str())
                .or_insert_with(Vec::new)
                .push(q);
            m
        });
    let pair = |id: &str| -> Vec<(&str, Relation, usize)> {
        by_image[id]
            .iter()
            .map(|q| (q.object_id.as_str(), q.relation, q.label))
            .collect()
    };
    assert_eq!(
        pair("1"),
        vec![
            ("10", Relation::Left, label("white")),
            ("11", Relation::Right, label("black"))
        ]
    );
    assert_eq!(
        pair("2"),
        vec![
            ("20", Relation::Above, label("blue")),
            ("21", Relation::Below, label("red"))
        ]
    );
    assert_eq!(
        pair("11"),
        vec![
            ("110", Relation::Left, label("gray")),
            ("111", Relation::Right, label("white"))
        ]
    );
    assert_eq!(
        pair("13"),
        vec![
            ("130", Relation::Left, label("orange")),
            ("131", Relation::Right, label("yellow"))
        ]
    );
    assert_eq!(
        pair("100"),
        vec![
            ("1000", Relation::Right, label("brown")),
            ("1001", Relation::Left, label("black"))
        ]
    );
    for id in ["3", "4", "5", "6", "7", "12"] {
        assert!(!by_image.contains_key(id), "image {id} must yield no pair");
    }
    let q = &by_image["1"][0];
    assert_eq!(q.text, "What color is the car on the left?");
    assert_eq!(q.bbox, [5.0, 30.0, 25.0, 40.0]);
    assert_eq!(by_image["2"][1].text, "What color is the shirt below?");
}

#[test]
fn split_is_image_disjoint_and_seeded() {
    let graphs = load_scene_graphs(&fixture()).unwrap();
    let a = build_pairs(&graphs, 42, true).unwrap();
    // Pair members adjacent, on one image and in one split.
    for p in a.questions.chunks(2) {
        assert_eq!(p[0].image_id, p[1].image_id);
        assert_eq!(p[0].split, p[1].split);
        assert_ne!(p[0].label, p[1].label);
    }
    let mut split_of: BTreeMap<&str, Split> = BTreeMap::new();
    for q in &a.questions {
        assert_eq!(
            *split_of.entry(q.image_id.as_str()).or_insert(q.split),
            q.split,
            "image {} in two splits",
            q.image_id
        );
    }
    let count = |s: Split| split_of.values().filter(|&&x| x == s).count();
    assert_eq!(
        (count(Split::Train), count(Split::Val), count(Split::Test)),
        (19, 2, 3)
    );
    assert_eq!(a.split_indices(Split::Val).len(), 4);
    // Deterministic per seed; another seed moves images between splits.
    assert_eq!(a, build_pairs(&graphs, 42, true).unwrap());
    let b = build_pairs(&graphs, 7, true).unwrap();
    assert_ne!(
        a.questions.iter().map(|q| q.split).collect::<Vec<_>>(),
        b.questions.iter().map(|q| q.split).collect::<Vec<_>>()
    );
}

#[test]
fn bad_input_is_named() {
    let dir = tempfile::tempdir().unwrap();
    // Missing scene-graph file.
    std::fs::copy(
        fixture().join("train_sceneGraphs.json"),
        dir.path().join("train_sceneGraphs.json"),
    )
    .unwrap();
    let err = load_scene_graphs(dir.path()).unwrap_err();
    assert!(matches!(err, GqaError::MissingFile { .. }));
    assert!(err.to_string().contains("val_sceneGraphs.json"), "{err}");
    // Unparsable file.
    std::fs::write(
        dir.path().join("val_sceneGraphs.json"),
        b"{\"1\": {\"width\": 3}",
    )
    .unwrap();
    let err = load_scene_graphs(dir.path()).unwrap_err().to_string();
    assert!(err.contains("val_sceneGraphs.json"), "{err}");
    // Box outside its image: an error in strict mode naming image and object, counted otherwise.
    let bad = r#"{"900": {"width": 50, "height": 50, "objects": {
        "1": {"name": "kite", "x": 45, "y": 0, "w": 10, "h": 10, "attributes": ["red"]},
        "2": {"name": "kite", "x": 0, "y": 0, "w": 10, "h": 10, "attributes": ["blue"]}}}}"#;
    std::fs::write(dir.path().join("val_sceneGraphs.json"), bad).unwrap();
    let graphs = load_scene_graphs(dir.path()).unwrap();
    let err = build_pairs(&graphs, 1, true).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, GqaError::BadBox { .. }));
    assert!(
        msg.contains("image 900") && msg.contains("object 1") && msg.contains("kite"),
        "{msg}"
    );
    let lenient = build_pairs(&graphs, 1, false).unwrap();
    assert_eq!(lenient.report.bad_boxes, 1);
    assert!(lenient.questions.iter().all(|q| q.image_id != "900"));
    // Duplicate image across the two files.
    std::fs::write(
        dir.path().join("val_sceneGraphs.json"),
        r#"{"1": {"width": 10, "height": 10, "objects": {}}}"#,
    )
    .unwrap();
    assert!(matches!(
        load_scene_graphs(dir.path()).unwrap_err(),
        GqaError::DuplicateImage { .. }
    ));
    // An image referenced by a pair but absent.
    let graphs = load_scene_graphs(&fixture()).unwrap();
    let out = build_pairs(&graphs, 42, true).unwrap();
    let err = check_images(dir.path(), &out.questions).unwrap_err();
    let needed: std::collections::BTreeSet<&str> =
        out.questions.iter().map(|q| q.image_id.as_str()).collect();
    assert!(
        matches!(err, GqaError::MissingImage { missing, needed: n, .. } if missing == n && n == needed.len()),
        "{err}"
    );
    assert!(err.to_string().contains("image 1 "), "{err}");
}

#[test]
fn inputs_scale_the_box_and_crop_the_target() {
    // 40×20 image, white, with a red block at x 10..20, y 5..15.
    let (w, h) = (40, 20);
    let mut data = vec![255u8; w * h * 3];
    for y in 5..15 {
        for x in 10..20 {
            data[(y * w + x) * 3..][..3].copy_from_slice(&[200, 0, 0]);
        }
    }
    let img = RgbImage {
        width: w,
        height: h,
        data,
    };
    let graphs = load_scene_graphs(&fixture()).unwrap();
    let mut q = build_pairs(&graphs, 42, true).unwrap().questions[0].clone();
    q.bbox = [10.0, 5.0, 20.0, 15.0];
    // An image of another size than its scene graph's is refused, naming the image.
    let err = gqa::inputs(&img, &q, 32).unwrap_err();
    assert!(
        matches!(err, GqaError::SizeMismatch { .. }) && err.to_string().contains(&q.image_id),
        "{err}"
    );
    q.image_size = (40.0, 20.0);
    let (full, bbox, crop) = gqa::inputs(&img, &q, 32).unwrap();
    assert_eq!(
        (full.width, full.height, crop.width, crop.height),
        (32, 32, 32, 32)
    );
    assert_eq!(bbox, [0.25, 0.25, 0.5, 0.75]);
    // The crop is the block alone: uniformly red.
    assert!(
        crop.data.chunks_exact(3).all(|p| p == [200, 0, 0]),
        "crop must be the target box"
    );
    // Anisotropic: the block's centre lands at (0.375, 0.5) of the square image.
    let px = |x: usize, y: usize| &full.data[(y * 32 + x) * 3..][..3];
    assert_eq!(px(12, 16), &[200, 0, 0]);
    assert_eq!(px(2, 2), &[255, 255, 255]);
}

#[test]
fn inverse_frequency_weights() {
    let w = class_weights(&[0, 0, 0, 1]);
    assert_eq!(w.len(), 10);
    assert!((w[0] - 4.0 / 30.0).abs() < 1e-7 && (w[1] - 4.0 / 10.0).abs() < 1e-7 && w[2] == 0.0);
}
