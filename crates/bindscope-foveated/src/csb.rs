//! CSB — colour–shape binding, `C = 6` classes.
//!
//! # Classes
//! A class is a conjunction of a *class shape* and a *class colour*:
//! `label = 3·shape + colour` with shapes (circle, triangle) and colours (red, green, blue), so
//! 0 = red circle, 1 = green circle, 2 = blue circle, 3 = red triangle, 4 = green triangle,
//! 5 = blue triangle. The other three palette colours (orange, yellow, purple) and the 18
//! distractor-only shapes never carry a label. Labels are balanced exactly: base scene `i` of a
//! split has label `i mod 6`.
//!
//! # The uniqueness rule
//! In every scene exactly one object — the target — has both a class shape and a class colour:
//! every other class-shape object wears a non-class colour, every other class-colour object sits
//! on a distractor-only shape. The label is therefore defined only by the *binding* of shape
//! and colour on one object.
//!
//! # Lures: histograms carry no label information
//! For a target of shape `s` and colour `c` (`s'` the other class shape, `x₁, x₂` the other
//! class colours), five lure groups have sizes `n_i ~ Uniform{1, 2, 3}`, drawn independently:
//! - shape group of `s`: the target plus `n₁ − 1` *shape lures* (`s`, non-class colour);
//! - counterpart group: `n₂` *counterpart lures* (`s'`, non-class colour);
//! - colour group of `c`: the target plus `n₃ − 1` *colour lures* (`c`, distractor-only shape);
//! - cross-colour groups: `n₄` objects of colour `x₁` and `n₅` of colour `x₂`, each on a
//!   distractor-only shape (*cross-colour lures*).
//!
//! The target counts as a member of its own shape and colour groups, so every class shape and
//! every class colour is carried by `Uniform{1, 2, 3}` lure-group objects whatever the label:
//! the shape histogram and the colour histogram of a scene are independent of its label. A
//! readout that keeps only "which shapes" and "which colours" (no binding) is at chance
//! (1/6) on base scenes and, because counterfactuals preserve both histograms, cannot follow a
//! counterfactual's new label.
//!
//! # Clutter K and λ
//! Each scene draws a clutter level `K ∈ {4, 8, 16, 24}` and `λ ∈ {0.25, 0.5, 0.75}` uniformly
//! (both recorded in the scene). `K` *noise* objects are added: a uniform distractor-only shape
//! in a class colour (uniform over the three) with probability `λ`, otherwise in a non-class
//! colour (uniform over the three). Noise is label-independent, so it keeps the histogram
//! property; `λ` sets how much class colour the clutter carries and with it how many colour
//! counterfactuals a scene admits.
//!
//! # Geometry
//! One size for every object: half-extent `r = 0.037` of the canvas side (≈ 14 px at 384,
//! ≈ 8 px at 224), extent `ρ = √2·r` (the circumradius, see [`crate::scene`]); centres uniform
//! in `[ρ, 1 − ρ]²` (edge margin `ρ`), minimum centre distance `2ρ` (twice the extent), 200
//! attempts per object. Objects are placed in the order target, shape lures, counterpart
//! lures, colour lures, cross-colour lures, noise. An object that does not fit after 200
//! attempts is dropped (`requested` vs `realized` counts in the scene); the whole scene is
//! resampled only if the target fails to place (counted in `regenerations`).
//!
//! # Counterfactuals (up to 5 per base scene)
//! For each other class `(s*, c*)`, in class order: a colour change `c → c*` swaps colours with
//! a *noise* object of colour `c*` (the partner, drawn uniformly among the candidates, takes
//! `c`); a shape change `s → s*` swaps shapes with a *counterpart lure* (which then wears `s`).
//! A counterfactual is generated only when every partner it needs exists. Counterpart lures
//! always exist (`n₂ ≥ 1`), so a scene has `1 + 2k` counterfactuals, `k` the number of other
//! class colours present among its noise objects: 5, 3 or 1. Swaps exchange attributes between
//! objects in place: positions, the shape histogram, the colour histogram and the uniqueness
//! rule are preserved; only the binding changes.
//!
//! # Nuisance variants (16 per base scene)
//! Variant `j` keeps the target (shape, colour, position), `K` and `λ`, and resamples every
//! other object — group sizes, shapes, colours, positions — under the same rules.
//!
//! # Determinism
//! Base scene `i` of split `s` draws from `rng::stream(seed, [CSB, s, i, 0])`; its
//! counterfactual towards class `t` from `[CSB, s, i, 1, t]`; nuisance variant `j` from
//! `[CSB, s, i, 2, j]`. Any scene can be regenerated alone.

use crate::rng::{ns, stream};
use crate::scene::{Object, Role, RoleCounts, Scene, Task, Variant, pick, try_place};
use crate::shapes::{Paint, Shape};
use crate::split::Split;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Number of CSB classes.
pub const NUM_CLASSES: usize = 6;

/// Class names in label order.
pub const CLASS_NAMES: [&str; NUM_CLASSES] = [
    "red circle",
    "green circle",
    "blue circle",
    "red triangle",
    "green triangle",
    "blue triangle",
];

/// `(shape, colour)` of a class.
pub fn class_of(label: usize) -> (Shape, Paint) {
    (Shape::CLASS[label / 3], Paint::CLASS[label % 3])
}

/// Class of a `(shape, colour)` conjunction, if both are class attributes.
pub fn label_of(shape: Shape, paint: Paint) -> Option<usize> {
    let s = Shape::CLASS.iter().position(|&x| x == shape)?;
    let c = Paint::CLASS.iter().position(|&x| x == paint)?;
    Some(s * 3 + c)
}

/// CSB generator settings (defaults: the documented design).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CsbConfig {
    /// Half-extent `r` of every object, in canvas units (0.037).
    pub half_extent: f64,
    /// Clutter levels K, drawn uniformly per scene ({4, 8, 16, 24}).
    pub clutter_levels: Vec<usize>,
    /// λ values, drawn uniformly per scene ({0.25, 0.5, 0.75}).
    pub lambdas: Vec<f64>,
    /// Largest lure-group size; sizes are `Uniform{1..=max_group}` (3).
    pub max_group: usize,
    /// Placement attempts per object (200).
    pub attempts: usize,
    /// Nuisance variants per base scene (16).
    pub nuisance_variants: usize,
}

impl Default for CsbConfig {
    fn default() -> Self {
        Self {
            half_extent: 0.037,
            clutter_levels: vec![4, 8, 16, 24],
            lambdas: vec![0.25, 0.5, 0.75],
            max_group: 3,
            attempts: 200,
            nuisance_variants: 16,
        }
    }
}

/// Resampling a scene this many times without placing its target is a configuration error.
const MAX_REGENERATIONS: usize = 10_000;

impl CsbConfig {
    fn rho(&self) -> f64 {
        self.half_extent * std::f64::consts::SQRT_2
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// A message naming the bad field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.half_extent > 0.0 && self.rho() < 0.5) {
            return Err(format!(
                "half_extent {} must be in (0, 0.5/√2)",
                self.half_extent
            ));
        }
        if self.clutter_levels.is_empty() || self.lambdas.is_empty() {
            return Err("clutter_levels and lambdas must not be empty".into());
        }
        if self.lambdas.iter().any(|l| !(0.0..=1.0).contains(l)) {
            return Err("CSB λ values are probabilities: each must be in [0, 1]".into());
        }
        if self.max_group == 0 || self.attempts == 0 {
            return Err("max_group and attempts must be at least 1".into());
        }
        Ok(())
    }

    /// Base scene `index` of `split`.
    ///
    /// # Panics
    /// If the target cannot be placed in 10,000 resamplings (impossible for valid settings).
    pub fn base(&self, seed: u64, split: Split, index: usize) -> Scene {
        let mut rng = stream(seed, &[ns::CSB, split.id(), index as u64, 0]);
        let label = index % NUM_CLASSES;
        let clutter = pick(&mut rng, &self.clutter_levels);
        let lambda = pick(&mut rng, &self.lambdas);
        let (shape, paint) = class_of(label);
        for regenerations in 0..MAX_REGENERATIONS {
            if let Some(mut scene) =
                self.layout(&mut rng, label, shape, paint, None, clutter, lambda)
            {
                scene.regenerations = regenerations;
                return scene;
            }
        }
        panic!(
            "CSB: target could not be placed in {MAX_REGENERATIONS} attempts (half_extent {})",
            self.half_extent
        );
    }

    /// Samples every object around a target (placed anew, or fixed at `target_at`).
    #[allow(clippy::too_many_arguments)]
    fn layout(
        &self,
        rng: &mut ChaCha8Rng,
        label: usize,
        shape: Shape,
        paint: Paint,
        target_at: Option<(f64, f64)>,
        clutter: usize,
        lambda: f64,
    ) -> Option<Scene> {
        let r = self.half_extent;
        let rho = self.rho();
        let (cx, cy) = match target_at {
            Some(p) => p,
            None => try_place(rng, &[], rho, 0.0, self.attempts)?,
        };
        let target = Object {
            shape,
            paint,
            cx,
            cy,
            half: r,
            role: Role::Target,
        };
        let counterpart = shape.counterpart().expect("class shape");
        let others: Vec<Paint> = Paint::CLASS
            .iter()
            .copied()
            .filter(|&p| p != paint)
            .collect();
        let mut group = || rng.random_range(1..=self.max_group);
        let (g_shape, g_counter, g_colour, g_x1, g_x2) =
            (group(), group(), group(), group(), group());

        // Attributes first (role order), then placement in the same order.
        let mut wanted: Vec<(Role, Shape, Paint)> = Vec::new();
        for _ in 1..g_shape {
            wanted.push((Role::ShapeLure, shape, pick(rng, &Paint::NON_CLASS)));
        }
        for _ in 0..g_counter {
            wanted.push((
                Role::CounterpartLure,
                counterpart,
                pick(rng, &Paint::NON_CLASS),
            ));
        }
        for _ in 1..g_colour {
            wanted.push((Role::ColourLure, pick(rng, Shape::distractors()), paint));
        }
        for (g, &x) in [g_x1, g_x2].iter().zip(&others) {
            for _ in 0..*g {
                wanted.push((Role::CrossColourLure, pick(rng, Shape::distractors()), x));
            }
        }
        for _ in 0..clutter {
            let s = pick(rng, Shape::distractors());
            let p = if rng.random::<f64>() < lambda {
                pick(rng, &Paint::CLASS)
            } else {
                pick(rng, &Paint::NON_CLASS)
            };
            wanted.push((Role::Noise, s, p));
        }

        let mut objects = vec![target];
        let mut requested = RoleCounts::default();
        for (role, s, p) in wanted {
            requested.add(role);
            if let Some((x, y)) = try_place(rng, &objects, rho, 0.0, self.attempts) {
                objects.push(Object {
                    shape: s,
                    paint: p,
                    cx: x,
                    cy: y,
                    half: r,
                    role,
                });
            }
        }
        let realized = RoleCounts::of(&objects);
        Some(Scene {
            task: Task::Csb,
            label,
            objects,
            clutter,
            lambda,
            requested,
            realized,
            regenerations: 0,
            shrink_steps: 0,
            variant: Variant::Base,
            partners: Vec::new(),
        })
    }

    /// The counterfactuals of base scene `index` (whose scene is `base`), in class order: one
    /// per other class whose swap partners all exist (see the module docs).
    pub fn counterfactuals(
        &self,
        seed: u64,
        split: Split,
        index: usize,
        base: &Scene,
    ) -> Vec<Scene> {
        let t = base.target();
        let mut out = Vec::new();
        for new_label in (0..NUM_CLASSES).filter(|&l| l != base.label) {
            let (s_new, c_new) = class_of(new_label);
            let mut rng = stream(
                seed,
                &[ns::CSB, split.id(), index as u64, 1, new_label as u64],
            );
            let mut partners = Vec::new();
            let mut objects = base.objects.clone();
            if c_new != t.paint {
                let cands: Vec<usize> = (1..objects.len())
                    .filter(|&i| objects[i].role == Role::Noise && objects[i].paint == c_new)
                    .collect();
                if cands.is_empty() {
                    continue;
                }
                let p = pick(&mut rng, &cands);
                objects[p].paint = t.paint;
                objects[0].paint = c_new;
                partners.push(p);
            }
            if s_new != t.shape {
                let cands: Vec<usize> = (1..objects.len())
                    .filter(|&i| {
                        objects[i].role == Role::CounterpartLure && objects[i].shape == s_new
                    })
                    .collect();
                if cands.is_empty() {
                    continue;
                }
                let p = pick(&mut rng, &cands);
                objects[p].shape = t.shape;
                objects[0].shape = s_new;
                partners.push(p);
            }
            out.push(Scene {
                label: new_label,
                objects,
                variant: Variant::Counterfactual { base: index },
                partners,
                ..base.clone()
            });
        }
        out
    }

    /// Nuisance variant `variant` of base scene `index`: same target, K and λ; everything else
    /// resampled.
    ///
    /// # Panics
    /// Never for valid settings (the target position is given, so the layout always succeeds).
    pub fn nuisance(
        &self,
        seed: u64,
        split: Split,
        index: usize,
        base: &Scene,
        variant: usize,
    ) -> Scene {
        let mut rng = stream(
            seed,
            &[ns::CSB, split.id(), index as u64, 2, variant as u64],
        );
        let t = base.target();
        let mut scene = self
            .layout(
                &mut rng,
                base.label,
                t.shape,
                t.paint,
                Some((t.cx, t.cy)),
                base.clutter,
                base.lambda,
            )
            .expect("a fixed target always places");
        scene.variant = Variant::Nuisance {
            base: index,
            variant,
        };
        scene
    }
}
