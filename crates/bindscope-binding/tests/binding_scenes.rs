//! Golden tests of the scene renderer and the trial structure.
//!
//! The reference PNGs in `tests/fixtures/binding/scenes/` were rendered by
//! `tests/fixtures/gen/binding_scenes.py`, an independent exact-rational implementation of the
//! documented geometry; every pixel must match.

use bindscope_binding::scene::{
    BACKGROUND, Color, NUM_SCENES, Object, RenderSpec, Scene, Shape, render,
};
use bindscope_binding::tasks::{
    CandidateKind, PairKind, binding_trials, samediff_pairs, scenes_used,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/binding/scenes")
}

fn shape(s: &str) -> Shape {
    *Shape::ALL
        .iter()
        .find(|x| x.name() == s)
        .expect("known shape")
}

fn color(s: &str) -> Color {
    *Color::ALL
        .iter()
        .find(|x| x.name() == s)
        .expect("known colour")
}

#[test]
fn rendering_matches_reference_pixels() {
    let listing: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("scenes.json")).unwrap())
            .unwrap();
    assert!(listing.len() >= 5);
    for entry in listing {
        let obj = |k: &str| {
            Object::new(
                shape(entry[k]["shape"].as_str().unwrap()),
                color(entry[k]["color"].as_str().unwrap()),
            )
        };
        let scene = Scene::new(obj("left"), obj("right"));
        let spec = RenderSpec {
            image_size: entry["image_size"].as_u64().unwrap() as usize,
            antialias: entry["antialias"].as_u64().unwrap() as usize,
        };
        let file = fixtures().join(entry["file"].as_str().unwrap());
        let reference = image::open(&file).unwrap().to_rgb8();
        let ours = render(&scene, &spec);
        assert_eq!(
            (ours.width as u32, ours.height as u32),
            reference.dimensions(),
            "{}",
            file.display()
        );
        let diff = ours
            .data
            .iter()
            .zip(reference.as_raw())
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(diff, 0, "{}: {diff} channel values differ", file.display());
    }
}

#[test]
fn hand_checked_geometry_at_224() {
    // Square at LEFT: |12x + 6 − 672| ≤ 448  ⇔  x ∈ 19..=92; rows likewise |12y + 6 − 1344| ≤ 448 ⇔ y ∈ 75..=148.
    let sq = Scene::new(
        Object::new(Shape::Square, Color::Red),
        Object::new(Shape::Circle, Color::Blue),
    );
    let img = render(&sq, &RenderSpec::default());
    let px = |x: usize, y: usize| -> [u8; 3] {
        let o = (y * 224 + x) * 3;
        [img.data[o], img.data[o + 1], img.data[o + 2]]
    };
    let red_left = (0..224 * 112)
        .filter(|i| px(i % 112, i / 112) == Color::Red.rgb())
        .count();
    assert_eq!(red_left, 74 * 74);
    assert_eq!(px(19, 75), Color::Red.rgb());
    assert_eq!(px(92, 148), Color::Red.rgb());
    assert_eq!(px(18, 100), BACKGROUND);
    assert_eq!(px(93, 100), BACKGROUND);
    assert_eq!(px(50, 74), BACKGROUND);
    // Circle at RIGHT, centre (168, 112), r = 37⅓: the centre pixel and the pixel 37 to the
    // right ((205.5 − 168)² = 1406.25 > 1393.8 → outside; 204.5: 1332.25 → inside).
    assert_eq!(px(168, 112), Color::Blue.rgb());
    assert_eq!(px(204, 111), Color::Blue.rgb());
    assert_eq!(px(205, 111), BACKGROUND);
    // Corners are background.
    assert_eq!(px(0, 0), BACKGROUND);
    assert_eq!(px(223, 223), BACKGROUND);

    // Triangle at LEFT: apex y = 74⅔; row 75 (centre 75.5) has half-width (75.5 − 74.667)/2 =
    // 0.4167 < 0.5 → empty; row 76 has half-width 0.9167 → pixels 55 and 56 (centres 55.5, 56.5).
    let tri = Scene::new(
        Object::new(Shape::Triangle, Color::Green),
        Object::new(Shape::Square, Color::Cyan),
    );
    let img = render(&tri, &RenderSpec::default());
    let row = |y: usize| -> Vec<usize> {
        (0..112)
            .filter(|&x| img.data[(y * 224 + x) * 3..(y * 224 + x) * 3 + 3] == Color::Green.rgb())
            .collect()
    };
    assert!(row(75).is_empty());
    assert_eq!(row(76), vec![55, 56]);
    // Base row y = 148 (centre 148.5 ≤ 149⅓) spans |x + ½ − 56| ≤ 37⅓ → 19..=92; row 149 is outside.
    assert_eq!(row(148), (19..=92).collect::<Vec<_>>());
    assert!(row(149).is_empty());
}

#[test]
fn rendering_is_deterministic_and_uses_only_palette_colours() {
    let palette: BTreeSet<[u8; 3]> = Color::ALL
        .iter()
        .map(|c| c.rgb())
        .chain([BACKGROUND])
        .collect();
    for id in (0..NUM_SCENES).step_by(37) {
        let s = Scene::from_id(id);
        let a = render(&s, &RenderSpec::default());
        assert_eq!(a, render(&s, &RenderSpec::default()));
        assert!(
            a.data
                .chunks_exact(3)
                .all(|p| palette.contains(&[p[0], p[1], p[2]])),
            "scene {id} has off-palette pixels"
        );
    }
    // Anti-aliasing produces blended edge pixels.
    let s = Scene::from_id(5);
    let aa = render(
        &s,
        &RenderSpec {
            image_size: 224,
            antialias: 4,
        },
    );
    assert!(
        aa.data
            .chunks_exact(3)
            .any(|p| !palette.contains(&[p[0], p[1], p[2]]))
    );
}

#[test]
fn binding_trial_structure() {
    let trials = binding_trials(42, 500);
    let mut target_pos = [0usize; 4];
    for t in &trials {
        let (q, [s1, s2]) = (t.query, [t.query.left.shape, t.query.right.shape]);
        assert_ne!(s1, s2);
        assert_ne!(q.left.color, q.right.color);
        let kinds: BTreeSet<_> = t.kinds.iter().map(|k| format!("{k:?}")).collect();
        assert_eq!(kinds.len(), 4, "each candidate kind exactly once");
        let get = |k: CandidateKind| t.candidates[t.kinds.iter().position(|x| *x == k).unwrap()];
        let (tg, d1, d2, d3) = (
            get(CandidateKind::Target),
            get(CandidateKind::D1),
            get(CandidateKind::D2),
            get(CandidateKind::D3),
        );
        let qc = [q.left.color, q.right.color];
        // Target: same shapes at the same positions, colours disjoint from the query, distinct.
        assert_eq!([tg.left.shape, tg.right.shape], [s1, s2]);
        assert!(!qc.contains(&tg.left.color) && !qc.contains(&tg.right.color));
        assert_ne!(tg.left.color, tg.right.color);
        // D1: shapes swapped, the query's colours at their positions.
        assert_eq!(
            d1,
            Scene::new(
                Object::new(s2, q.left.color),
                Object::new(s1, q.right.color)
            )
        );
        // D2: shapes swapped, colours different from the query (the target's).
        assert_eq!(
            d2,
            Scene::new(
                Object::new(s2, tg.left.color),
                Object::new(s1, tg.right.color)
            )
        );
        // D3: s1 at both positions.
        assert_eq!(
            d3,
            Scene::new(
                Object::new(s1, tg.left.color),
                Object::new(s1, tg.right.color)
            )
        );
        target_pos[t.target_index()] += 1;
    }
    // Shuffled: the target appears at every position, roughly uniformly (125 expected; 5σ ≈ 48).
    assert!(
        target_pos.iter().all(|&c| (77..=173).contains(&c)),
        "{target_pos:?}"
    );
    // Trial i does not depend on the number of trials; other seeds give other trials.
    assert_eq!(binding_trials(42, 7)[..], trials[..7]);
    assert_ne!(binding_trials(43, 7)[..], trials[..7]);
    // Every (s1, s2) ordered pair occurs.
    let pairs: BTreeSet<_> = trials
        .iter()
        .map(|t| (t.query.left.shape, t.query.right.shape))
        .collect();
    assert_eq!(pairs.len(), 6);
}

#[test]
fn samediff_structure_and_balance() {
    let pairs = samediff_pairs(42, 500);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for p in &pairs {
        *counts.entry(format!("{:?}", p.kind)).or_default() += 1;
        let (a, b) = (p.a, p.b);
        assert_ne!(a.left.shape, a.right.shape);
        let ac = [a.left.color, a.right.color];
        assert!(
            !ac.contains(&b.left.color) && !ac.contains(&b.right.color),
            "B's colours are new"
        );
        assert_ne!(b.left.color, b.right.color);
        match p.kind {
            PairKind::Same => {
                assert_eq!([b.left.shape, b.right.shape], [a.left.shape, a.right.shape])
            }
            PairKind::ShapeSwap => {
                assert_eq!([b.left.shape, b.right.shape], [a.right.shape, a.left.shape])
            }
            PairKind::ShapeChange => {
                let changed =
                    (a.left.shape != b.left.shape) as u8 + (a.right.shape != b.right.shape) as u8;
                assert_eq!(changed, 1);
                let new = if a.left.shape != b.left.shape {
                    b.left.shape
                } else {
                    b.right.shape
                };
                assert!(
                    new != a.left.shape && new != a.right.shape,
                    "the new shape is the third one"
                );
            }
        }
    }
    assert_eq!(counts["Same"], 250);
    assert_eq!(counts["ShapeSwap"], 125);
    assert_eq!(counts["ShapeChange"], 125);
    let used = scenes_used(&binding_trials(42, 500), &pairs);
    assert!(
        used.len() <= NUM_SCENES && used.len() > 200,
        "{}",
        used.len()
    );
}
