//! CSB / CSD generators: golden pixels, placement and role constraints, counterfactual and
//! nuisance rules, determinism.
//!
//! Golden images live in `tests/fixtures/foveated/`; regenerate them (after an intended
//! change of the generator) with
//! `BINDSCOPE_BLESS=1 cargo test -p bindscope-foveated --test integration scenes::`.

use bindscope_foveated::csb::{self, CsbConfig};
use bindscope_foveated::csd::CsdConfig;
use bindscope_foveated::dataset::{Generator, SetName};
use bindscope_foveated::scene::{Role, Scene, Task, Variant, save_png};
use bindscope_foveated::shapes::{Paint, Shape};
use bindscope_foveated::split::{Split, SplitSizes};
use std::collections::BTreeMap;
use std::path::PathBuf;

const SEED: u64 = 42;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/foveated")
}

fn decode_png(path: &std::path::Path) -> (usize, usize, Vec<u8>) {
    let img = image::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_rgb8();
    (img.width() as usize, img.height() as usize, img.into_raw())
}

/// Compares a rendered scene with its golden PNG (or writes it when blessing).
fn golden(name: &str, scene: &Scene, side: usize, ss: usize) {
    let img = scene.render(side, ss);
    let path = fixtures().join(format!("{name}.png"));
    if std::env::var("BINDSCOPE_BLESS").is_ok() {
        save_png(&img, &path).unwrap();
        return;
    }
    let (w, h, data) = decode_png(&path);
    assert_eq!((w, h), (side, side), "{name}: size");
    let diff = data.iter().zip(&img.data).filter(|(a, b)| a != b).count();
    assert_eq!(
        diff,
        0,
        "{name}: {diff} bytes differ from the golden image {}",
        path.display()
    );
}

/// Colour of the pixel containing canvas point `(x, y)`.
fn pixel_at(scene: &Scene, side: usize, x: f64, y: f64) -> [u8; 3] {
    let img = scene.render(side, 1);
    let (px, py) = ((x * side as f64) as usize, (y * side as f64) as usize);
    let k = (py * side + px) * 3;
    [img.data[k], img.data[k + 1], img.data[k + 2]]
}

#[test]
fn golden_pixels() {
    let csb = CsbConfig::default();
    let csd = CsdConfig::default();
    let b = csb.base(SEED, Split::Train, 0);
    golden("csb_train_0", &b, 128, 2);
    golden("csb_test_3", &csb.base(SEED, Split::Test, 3), 128, 2);
    let t = csb.base(SEED, Split::Test, 3);
    let cfs = csb.counterfactuals(SEED, Split::Test, 3, &t);
    golden("csb_test_3_cf0", &cfs[0], 128, 2);
    golden("csd_train_1", &csd.base(SEED, Split::Train, 1), 128, 2);
    golden("csd_clean_0", &csd.base(SEED, Split::Clean, 0), 64, 1);
    // Independent check: the target's centre pixel carries its colour, a corner is white.
    for s in [&b, &t, &cfs[0]] {
        let o = s.target();
        assert_eq!(pixel_at(s, 384, o.cx, o.cy), o.paint.rgb());
    }
}

#[test]
fn rendering_at_two_resolutions_agrees_on_object_colours() {
    let s = CsbConfig::default().base(SEED, Split::Val, 5);
    for o in &s.objects {
        // The centre of every shape except those with a hole at the centre is inside it.
        if o.shape.contains(0.0, 0.0) {
            assert_eq!(
                pixel_at(&s, 224, o.cx, o.cy),
                o.paint.rgb(),
                "{:?}",
                o.shape
            );
            assert_eq!(
                pixel_at(&s, 512, o.cx, o.cy),
                o.paint.rgb(),
                "{:?}",
                o.shape
            );
        }
    }
}

fn check_csb_scene(s: &Scene, cfg: &CsbConfig) {
    let r = cfg.half_extent;
    let rho = r * std::f64::consts::SQRT_2;
    // Uniqueness: exactly the target binds a class shape to a class colour, and it is the label.
    let binders: Vec<usize> = (0..s.objects.len())
        .filter(|&i| csb::label_of(s.objects[i].shape, s.objects[i].paint).is_some())
        .collect();
    assert_eq!(
        binders,
        vec![0],
        "only the target may bind a class shape and a class colour"
    );
    assert_eq!(
        csb::label_of(s.target().shape, s.target().paint),
        Some(s.label)
    );
    assert_eq!(s.target().role, Role::Target);
    // Placement.
    for (i, a) in s.objects.iter().enumerate() {
        assert_eq!(a.half, r);
        assert!(
            a.cx >= rho && a.cx <= 1.0 - rho && a.cy >= rho && a.cy <= 1.0 - rho,
            "edge margin"
        );
        for b in &s.objects[..i] {
            let d = ((a.cx - b.cx).powi(2) + (a.cy - b.cy).powi(2)).sqrt();
            assert!(
                d >= 2.0 * rho - 1e-12,
                "centres {d} apart < 2ρ = {}",
                2.0 * rho
            );
        }
    }
    // Roles.
    for o in &s.objects[1..] {
        match o.role {
            Role::ShapeLure | Role::CounterpartLure => {
                assert!(o.shape.is_class() && !o.paint.is_class())
            }
            Role::ColourLure | Role::CrossColourLure | Role::Noise => assert!(!o.shape.is_class()),
            other => panic!("unexpected role {other:?} in CSB"),
        }
    }
    assert!(cfg.clutter_levels.contains(&s.clutter) && cfg.lambdas.contains(&s.lambda));
    assert_eq!(s.requested.noise, s.clutter);
    assert_eq!(
        s.realized.noise
            + s.realized.shape_lures
            + s.realized.counterpart_lures
            + s.realized.colour_lures
            + s.realized.cross_colour_lures,
        s.objects.len() - 1
    );
    assert!(s.realized.noise <= s.requested.noise);
}

fn check_csb_groups(s: &Scene) {
    // Requested group sizes in 1..=3 (the target counts in its own shape and colour groups).
    let q = &s.requested;
    assert!((0..=2).contains(&q.shape_lures));
    assert!((1..=3).contains(&q.counterpart_lures));
    assert!((0..=2).contains(&q.colour_lures));
    assert!((2..=6).contains(&q.cross_colour_lures));
}

#[test]
fn csb_base_scenes_meet_the_design() {
    let cfg = CsbConfig::default();
    for i in 0..120 {
        let s = cfg.base(SEED, Split::Train, i);
        assert_eq!(s.label, i % 6, "labels are balanced: i mod 6");
        assert_eq!(s.variant, Variant::Base);
        check_csb_scene(&s, &cfg);
        check_csb_groups(&s);
        assert_eq!(
            s,
            cfg.base(SEED, Split::Train, i),
            "regeneration is deterministic"
        );
    }
    assert_ne!(
        cfg.base(SEED, Split::Train, 0),
        cfg.base(SEED + 1, Split::Train, 0)
    );
    assert_ne!(
        cfg.base(SEED, Split::Train, 0).objects,
        cfg.base(SEED, Split::Val, 0).objects
    );
}

/// Mean count of each class shape and class colour, split by the label's shape / colour: the
/// design makes the histograms independent of the label (a leaky design — lures only of the
/// target's attributes — differs by ≥ 1 object).
#[test]
fn csb_histograms_do_not_reveal_the_label() {
    let cfg = CsbConfig::default();
    let n = 1800;
    // own[a] / other[a]: count of attribute a when it is / is not the label's attribute.
    let mut own_shape = (0.0, 0usize);
    let mut other_shape = (0.0, 0usize);
    let mut own_colour = (0.0, 0usize);
    let mut other_colour = (0.0, 0usize);
    for i in 0..n {
        let s = cfg.base(SEED, Split::Train, i);
        let (ts, tc) = csb::class_of(s.label);
        for cs in Shape::CLASS {
            let c = s.objects.iter().filter(|o| o.shape == cs).count() as f64;
            let acc = if cs == ts {
                &mut own_shape
            } else {
                &mut other_shape
            };
            acc.0 += c;
            acc.1 += 1;
        }
        for cp in Paint::CLASS {
            let c = s.objects.iter().filter(|o| o.paint == cp).count() as f64;
            let acc = if cp == tc {
                &mut own_colour
            } else {
                &mut other_colour
            };
            acc.0 += c;
            acc.1 += 1;
        }
    }
    let m = |a: (f64, usize)| a.0 / a.1 as f64;
    assert!(
        (m(own_shape) - m(other_shape)).abs() < 0.15,
        "shape counts: own {} vs other {}",
        m(own_shape),
        m(other_shape)
    );
    assert!(
        (m(own_colour) - m(other_colour)).abs() < 0.2,
        "colour counts: own {} vs other {}",
        m(own_colour),
        m(other_colour)
    );
}

fn histogram(s: &Scene) -> (BTreeMap<Shape, usize>, BTreeMap<Paint, usize>) {
    let mut sh = BTreeMap::new();
    let mut co = BTreeMap::new();
    for o in &s.objects {
        *sh.entry(o.shape).or_insert(0) += 1;
        *co.entry(o.paint).or_insert(0) += 1;
    }
    (sh, co)
}

#[test]
fn csb_counterfactuals_swap_attributes_and_keep_histograms() {
    let cfg = CsbConfig::default();
    let mut counts = BTreeMap::new();
    for i in 0..300 {
        let b = cfg.base(SEED, Split::Test, i);
        let cfs = cfg.counterfactuals(SEED, Split::Test, i, &b);
        *counts.entry(cfs.len()).or_insert(0) += 1;
        // 1 + 2k, k = other class colours present among the noise objects.
        let (_, c) = csb::class_of(b.label);
        let k = Paint::CLASS
            .iter()
            .filter(|&&p| {
                p != c
                    && b.objects
                        .iter()
                        .any(|o| o.role == Role::Noise && o.paint == p)
            })
            .count();
        assert!(b.realized.counterpart_lures > 0);
        assert_eq!(cfs.len(), 1 + 2 * k, "scene {i}");
        let mut labels: Vec<usize> = cfs.iter().map(|s| s.label).collect();
        labels.dedup();
        assert_eq!(labels.len(), cfs.len(), "one counterfactual per class");
        for cf in &cfs {
            assert_ne!(cf.label, b.label);
            assert_eq!(cf.variant, Variant::Counterfactual { base: i });
            assert_eq!(
                histogram(cf),
                histogram(&b),
                "swaps preserve the shape and colour histograms"
            );
            check_csb_scene(cf, &cfg);
            // Positions and sizes unchanged; only the target and its partners change.
            let changed: Vec<usize> = (0..b.objects.len())
                .filter(|&j| b.objects[j] != cf.objects[j])
                .collect();
            let mut expect = cf.partners.clone();
            expect.insert(0, 0);
            expect.sort();
            assert_eq!(changed, expect);
            for (x, y) in b.objects.iter().zip(&cf.objects) {
                assert_eq!((x.cx, x.cy, x.half), (y.cx, y.cy, y.half));
            }
            let (s_new, c_new) = csb::class_of(cf.label);
            let (s_old, c_old) = csb::class_of(b.label);
            assert_eq!(
                cf.partners.len(),
                (s_new != s_old) as usize + (c_new != c_old) as usize
            );
        }
    }
    // Every allowed count occurs and nothing else.
    assert!(counts.keys().all(|k| [1, 3, 5].contains(k)), "{counts:?}");
    assert_eq!(counts.len(), 3, "{counts:?}");
}

#[test]
fn csb_nuisance_variants_fix_target_k_and_lambda() {
    let cfg = CsbConfig::default();
    for i in 0..20 {
        let b = cfg.base(SEED, Split::Test, i);
        let vs: Vec<Scene> = (0..cfg.nuisance_variants)
            .map(|j| cfg.nuisance(SEED, Split::Test, i, &b, j))
            .collect();
        assert_eq!(vs.len(), 16);
        for (j, v) in vs.iter().enumerate() {
            assert_eq!(v.target(), b.target());
            assert_eq!(
                (v.label, v.clutter, v.lambda),
                (b.label, b.clutter, b.lambda)
            );
            assert_eq!(
                v.variant,
                Variant::Nuisance {
                    base: i,
                    variant: j
                }
            );
            check_csb_scene(v, &cfg);
            check_csb_groups(v);
            assert_ne!(
                v.objects[1..],
                b.objects[1..],
                "non-target objects are resampled"
            );
        }
        assert_ne!(vs[0].objects, vs[1].objects);
    }
}

#[test]
fn csd_scenes_meet_the_design() {
    let cfg = CsdConfig::default();
    let gap = 14.0 / 384.0;
    let mut shrunk = 0;
    for (split, n) in [(Split::Train, 200), (Split::Clean, 20)] {
        for i in 0..n {
            let s = cfg.base(SEED, split, i);
            assert_eq!(s.label, i % 2);
            let t = s.target();
            assert_eq!(t.shape, Shape::CLASS[s.label]);
            assert_eq!(t.half, 0.02);
            assert!(s.objects.iter().all(|o| o.paint == Paint::Black));
            if split == Split::Clean {
                assert_eq!(s.clutter, 0);
            } else {
                assert!(cfg.clutter_levels.contains(&s.clutter));
            }
            assert_eq!(s.objects.len(), s.clutter + 1, "every scene keeps its K");
            assert_eq!(s.realized, s.requested);
            shrunk += s.shrink_steps;
            for (j, a) in s.objects.iter().enumerate() {
                let ra = a.circumradius();
                assert!(a.cx >= ra - 1e-12 && a.cx <= 1.0 - ra + 1e-12);
                if j > 0 {
                    assert!(!a.shape.is_class() && a.role == Role::Distractor);
                    let m = a.half / 0.02;
                    assert!((1.0 - 1e-12..=11.5 + 1e-12).contains(&m), "scale {m}");
                }
                for b in &s.objects[..j] {
                    let d = ((a.cx - b.cx).powi(2) + (a.cy - b.cy).powi(2)).sqrt();
                    assert!(
                        d >= ra + b.circumradius() + gap - 1e-12,
                        "safety circles violated"
                    );
                }
            }
        }
    }
    assert!(shrunk > 0, "large distractors must sometimes be shrunk");
    let b = cfg.base(SEED, Split::Test, 7);
    let cf = cfg.counterfactual(7, &b);
    assert_eq!(cf.label, 1 - b.label);
    assert_eq!(cf.target().shape, Shape::CLASS[cf.label]);
    assert_eq!(
        (cf.target().cx, cf.target().cy, cf.target().half),
        (b.target().cx, b.target().cy, b.target().half)
    );
    assert_eq!(cf.objects[1..], b.objects[1..]);
    let v = cfg.nuisance(SEED, Split::Test, 7, &b, 3);
    assert_eq!(
        (v.target(), v.clutter, v.lambda),
        (b.target(), b.clutter, b.lambda)
    );
    assert_ne!(v.objects[1..], b.objects[1..]);
}

#[test]
fn generator_sets_have_the_documented_sizes() {
    let mut g = Generator::new(Task::Csb, SEED);
    g.sizes = SplitSizes {
        train: 12,
        val: 6,
        test: 6,
        clean: 4,
    };
    g.nuisance_scenes = 2;
    g.validate().unwrap();
    assert_eq!(
        g.sets(),
        vec![
            SetName::Train,
            SetName::Val,
            SetName::Test,
            SetName::TestCf,
            SetName::TestNuisance
        ]
    );
    assert_eq!(g.scenes(SetName::Train).len(), 12);
    assert_eq!(g.scenes(SetName::TestNuisance).len(), 32);
    let cf = g.scenes(SetName::TestCf);
    assert!(
        cf.iter()
            .all(|s| matches!(s.variant, Variant::Counterfactual { base } if base < 6))
    );
    let mut d = Generator::new(Task::Csd, SEED);
    d.sizes = SplitSizes {
        train: 4,
        val: 2,
        test: 3,
        clean: 5,
    };
    d.nuisance_scenes = 0;
    assert_eq!(
        d.sets(),
        vec![
            SetName::Train,
            SetName::Val,
            SetName::Test,
            SetName::TestCf,
            SetName::Clean
        ]
    );
    assert_eq!(
        d.scenes(SetName::TestCf).len(),
        3,
        "exactly one counterfactual per CSD test scene"
    );
    assert_eq!(d.scenes(SetName::Clean).len(), 5);
    d.nuisance_scenes = 4;
    assert!(
        d.validate().is_err(),
        "more nuisance scenes than test scenes"
    );
}
