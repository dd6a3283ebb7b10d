//! CSD — small-shape detection, `C = 2` classes.
//!
//! # Classes
//! One small black target, a circle (label 0) or an apex-up triangle (label 1), among larger
//! black distractors; labels are balanced exactly (scene `i` has label `i mod 2`). Same white
//! canvas, shape vocabulary and orientations as CSB; every object is solid black.
//!
//! # Sizes
//! Target half-extent `r_t = 0.02` of the canvas side (≈ 8 px at 384). A distractor is a
//! uniform distractor-only shape with half-extent `m·r_t`, `m = 1 + 10.5·u^{1/λ}`,
//! `u ~ Uniform(0, 1)`: `m ∈ [1, 11.5]`. `λ ∈ {0.5, 1, 2}` is drawn per scene (recorded):
//! `λ = 1` gives uniform sizes, `λ = 0.5` concentrates distractors near the target's size (the
//! hard regime), `λ = 2` near the large end.
//!
//! # Clutter K
//! `K ∈ {2, 4, 8, 16}` distractors, drawn uniformly per scene (train / val / test); the clean
//! split has `K = 0` (the target alone, 500 scenes by default).
//!
//! # Safety circles
//! Each object owns a safety circle of radius `ρ + δ` around its centre, `ρ = √2·r` its
//! circumradius and `δ` a fixed margin of 14 px at the 384-px reference canvas (`14/384` of the
//! side at any resolution). Two objects are compatible when their centres are at least
//! `ρ_i + ρ_j + δ` apart (neither object enters the other's safety circle). Centres are
//! uniform in `[ρ, 1 − ρ]²`, 200 attempts per try. A distractor that does not fit is *shrunk*
//! (`m ← max(1, 0.8·m)`, counted in `shrink_steps`) and retried, never dropped, so every scene
//! keeps its K; only if it still does not fit at `m = 1` is the whole scene resampled (counted
//! in `regenerations`).
//!
//! # Counterfactuals and nuisance variants
//! Exactly one counterfactual per test scene: the target's shape flipped in place (circle ↔
//! triangle, same position and size — both shapes fill the same box). Nuisance variant `j`
//! (16 per base scene) keeps the target, K and λ and resamples every distractor.
//!
//! # Determinism
//! Base scene `i` of split `s`: `rng::stream(seed, [CSD, s, i, 0])`; nuisance variant `j`:
//! `[CSD, s, i, 2, j]`.

use crate::rng::{ns, stream};
use crate::scene::{Object, Role, RoleCounts, Scene, Task, Variant, pick, try_place};
use crate::shapes::{Paint, Shape};
use crate::split::Split;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Number of CSD classes.
pub const NUM_CLASSES: usize = 2;

/// Class names in label order.
pub const CLASS_NAMES: [&str; NUM_CLASSES] = ["circle", "triangle"];

/// CSD generator settings (defaults: the documented design).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CsdConfig {
    /// Target half-extent in canvas units (0.02).
    pub target_half_extent: f64,
    /// Largest distractor size as a multiple of the target's (11.5).
    pub max_scale: f64,
    /// Clutter levels K, drawn uniformly per scene ({2, 4, 8, 16}).
    pub clutter_levels: Vec<usize>,
    /// λ values (size-law exponents), drawn uniformly per scene ({0.5, 1, 2}).
    pub lambdas: Vec<f64>,
    /// Safety margin δ in pixels of the reference canvas (14).
    pub margin_px: f64,
    /// Side of the reference canvas the margin is expressed in (384).
    pub reference_side: f64,
    /// Placement attempts per try (200).
    pub attempts: usize,
    /// Shrink factor applied to a distractor that does not fit (0.8).
    pub shrink: f64,
    /// Nuisance variants per base scene (16).
    pub nuisance_variants: usize,
}

impl Default for CsdConfig {
    fn default() -> Self {
        Self {
            target_half_extent: 0.02,
            max_scale: 11.5,
            clutter_levels: vec![2, 4, 8, 16],
            lambdas: vec![0.5, 1.0, 2.0],
            margin_px: 14.0,
            reference_side: 384.0,
            attempts: 200,
            shrink: 0.8,
            nuisance_variants: 16,
        }
    }
}

const MAX_REGENERATIONS: usize = 10_000;

impl CsdConfig {
    /// The safety margin δ in canvas units.
    pub fn gap(&self) -> f64 {
        self.margin_px / self.reference_side
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// A message naming the bad field.
    pub fn validate(&self) -> Result<(), String> {
        let rho_max = self.target_half_extent * self.max_scale * std::f64::consts::SQRT_2;
        if !(self.target_half_extent > 0.0 && self.max_scale >= 1.0 && rho_max < 0.5) {
            return Err(format!(
                "target_half_extent {} × max_scale {} does not fit the canvas",
                self.target_half_extent, self.max_scale
            ));
        }
        if self.clutter_levels.is_empty()
            || self.lambdas.is_empty()
            || self.lambdas.iter().any(|&l| l <= 0.0)
        {
            return Err("clutter_levels must not be empty; λ values must be positive".into());
        }
        if !(0.0 < self.shrink && self.shrink < 1.0) || self.attempts == 0 {
            return Err("shrink must be in (0, 1) and attempts at least 1".into());
        }
        Ok(())
    }

    /// Base scene `index` of `split` (`Split::Clean`: K = 0).
    ///
    /// # Panics
    /// If a scene cannot be laid out in 10,000 resamplings (impossible for valid settings).
    pub fn base(&self, seed: u64, split: Split, index: usize) -> Scene {
        let mut rng = stream(seed, &[ns::CSD, split.id(), index as u64, 0]);
        let label = index % NUM_CLASSES;
        let clutter = if split == Split::Clean {
            0
        } else {
            pick(&mut rng, &self.clutter_levels)
        };
        let lambda = pick(&mut rng, &self.lambdas);
        for regenerations in 0..MAX_REGENERATIONS {
            if let Some(mut scene) = self.layout(&mut rng, label, None, clutter, lambda) {
                scene.regenerations = regenerations;
                return scene;
            }
        }
        panic!(
            "CSD: scene {index} of {} could not be laid out in {MAX_REGENERATIONS} attempts",
            split.name()
        );
    }

    fn layout(
        &self,
        rng: &mut ChaCha8Rng,
        label: usize,
        target_at: Option<(f64, f64)>,
        clutter: usize,
        lambda: f64,
    ) -> Option<Scene> {
        let gap = self.gap();
        let rt = self.target_half_extent;
        let rho_t = rt * std::f64::consts::SQRT_2;
        let (cx, cy) = match target_at {
            Some(p) => p,
            None => try_place(rng, &[], rho_t, gap, self.attempts)?,
        };
        let mut objects = vec![Object {
            shape: Shape::CLASS[label],
            paint: Paint::Black,
            cx,
            cy,
            half: rt,
            role: Role::Target,
        }];
        let mut requested = RoleCounts::default();
        let mut shrink_steps = 0;
        for _ in 0..clutter {
            requested.add(Role::Distractor);
            let shape = pick(rng, Shape::distractors());
            let u: f64 = rng.random();
            let mut m = 1.0 + (self.max_scale - 1.0) * u.powf(1.0 / lambda);
            loop {
                let half = rt * m;
                if let Some((x, y)) = try_place(
                    rng,
                    &objects,
                    half * std::f64::consts::SQRT_2,
                    gap,
                    self.attempts,
                ) {
                    objects.push(Object {
                        shape,
                        paint: Paint::Black,
                        cx: x,
                        cy: y,
                        half,
                        role: Role::Distractor,
                    });
                    break;
                }
                if m <= 1.0 {
                    return None;
                }
                m = (m * self.shrink).max(1.0);
                shrink_steps += 1;
            }
        }
        Some(Scene {
            task: Task::Csd,
            label,
            realized: RoleCounts::of(&objects),
            objects,
            clutter,
            lambda,
            requested,
            regenerations: 0,
            shrink_steps,
            variant: Variant::Base,
            partners: Vec::new(),
        })
    }

    /// The single counterfactual of a base scene: the target's shape flipped in place.
    pub fn counterfactual(&self, index: usize, base: &Scene) -> Scene {
        let mut objects = base.objects.clone();
        let new_label = 1 - base.label;
        objects[0].shape = Shape::CLASS[new_label];
        Scene {
            label: new_label,
            objects,
            variant: Variant::Counterfactual { base: index },
            ..base.clone()
        }
    }

    /// Nuisance variant `variant` of base scene `index`: same target, K and λ; distractors
    /// resampled.
    ///
    /// # Panics
    /// If the distractors cannot be laid out around the fixed target in 10,000 resamplings.
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
            &[ns::CSD, split.id(), index as u64, 2, variant as u64],
        );
        let t = base.target();
        for regenerations in 0..MAX_REGENERATIONS {
            if let Some(mut scene) = self.layout(
                &mut rng,
                base.label,
                Some((t.cx, t.cy)),
                base.clutter,
                base.lambda,
            ) {
                scene.regenerations = regenerations;
                scene.variant = Variant::Nuisance {
                    base: index,
                    variant,
                };
                return scene;
            }
        }
        panic!("CSD: nuisance variant {variant} of scene {index} could not be laid out");
    }
}
