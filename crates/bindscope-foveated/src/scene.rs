//! Scenes (objects on a white canvas), their placement rule and their exact rasterisation.
//!
//! # Coordinates
//! Positions and sizes are in units of the canvas side (`[0, 1]`, x right, y down), so one
//! scene renders at any resolution. An object is a [`Shape`] with half-extent `r` centred at
//! `(cx, cy)`; it occupies the square `[cx − r, cx + r] × [cy − r, cy + r]` (its *box*) and lies
//! inside the disc of radius `ρ = √2·r` (its *circumradius*).
//!
//! # Placement (both tasks)
//! Objects are placed one after another by rejection sampling: a centre is drawn uniformly in
//! `[ρ, 1 − ρ]²` (the edge margin keeps the whole circumdisc on the canvas) and accepted when
//! its distance to every placed centre is at least `ρ_i + ρ_j + gap` — discs never overlap, so
//! objects never touch. CSB uses `gap = 0` with equal sizes (minimum centre distance twice the
//! extent `ρ`); CSD adds its fixed 14-pixel safety margin (see [`crate::csd`]).
//!
//! # Rasterisation
//! Pixel `(x, y)` of an `S × S` image covers `[x, x+1) × [y, y+1)`; it is sampled at the
//! `n × n` sub-pixel centres `((x + (i + ½)/n)/S, (y + (j + ½)/n)/S)` and each channel is the
//! rounded mean of the samples' colours, in integers: `(Σ + n²/2) div n²` (`n = 1`: no
//! anti-aliasing, a pixel takes an object's colour iff its centre is inside). Membership is
//! tested in the object's local frame `((X − cx)/r, (Y − cy)/r)` with [`Shape::contains`].
//! Objects never overlap, so drawing order does not matter and no sample is claimed twice.

use crate::shapes::{BACKGROUND, Paint, Shape};
use bindscope_data::image::RgbImage;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Which generator made a scene.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// Colour–shape binding, 6 classes ([`crate::csb`]).
    Csb,
    /// Small-shape detection, 2 classes ([`crate::csd`]).
    Csd,
}

impl Task {
    /// Number of classes.
    pub fn num_classes(self) -> usize {
        match self {
            Task::Csb => crate::csb::NUM_CLASSES,
            Task::Csd => crate::csd::NUM_CLASSES,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Task::Csb => "csb",
            Task::Csd => "csd",
        }
    }
}

/// Why an object is in a scene (how the generator sampled it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The labelled object (always `objects[0]`).
    Target,
    /// CSB: the target's shape in a non-class colour.
    ShapeLure,
    /// CSB: the other class shape in a non-class colour.
    CounterpartLure,
    /// CSB: the target's colour on a distractor-only shape.
    ColourLure,
    /// CSB: another class colour on a distractor-only shape.
    CrossColourLure,
    /// CSB: a clutter object (distractor-only shape, any palette colour).
    Noise,
    /// CSD: a black distractor-only shape of 1–11.5× the target's size.
    Distractor,
}

/// One shape on the canvas.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Object {
    /// Its shape.
    pub shape: Shape,
    /// Its fill colour.
    pub paint: Paint,
    /// Centre x in `[0, 1]`.
    pub cx: f64,
    /// Centre y in `[0, 1]` (down).
    pub cy: f64,
    /// Half-extent `r` (half the side of its box), in canvas units.
    pub half: f64,
    /// How it was sampled.
    pub role: Role,
}

impl Object {
    /// Circumradius `ρ = √2·r`: the object lies in the disc of this radius.
    pub fn circumradius(&self) -> f64 {
        self.half * std::f64::consts::SQRT_2
    }

    /// Box `[x0, y0, x1, y1]` in canvas units.
    pub fn bbox(&self) -> [f64; 4] {
        [
            self.cx - self.half,
            self.cy - self.half,
            self.cx + self.half,
            self.cy + self.half,
        ]
    }
}

/// Counts of objects by role (requested by the sampler, or realised on the canvas).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleCounts {
    /// [`Role::ShapeLure`].
    pub shape_lures: usize,
    /// [`Role::CounterpartLure`].
    pub counterpart_lures: usize,
    /// [`Role::ColourLure`].
    pub colour_lures: usize,
    /// [`Role::CrossColourLure`].
    pub cross_colour_lures: usize,
    /// [`Role::Noise`].
    pub noise: usize,
    /// [`Role::Distractor`].
    pub distractors: usize,
}

impl RoleCounts {
    /// Adds one object of `role` (the target is not counted).
    pub fn add(&mut self, role: Role) {
        match role {
            Role::Target => {}
            Role::ShapeLure => self.shape_lures += 1,
            Role::CounterpartLure => self.counterpart_lures += 1,
            Role::ColourLure => self.colour_lures += 1,
            Role::CrossColourLure => self.cross_colour_lures += 1,
            Role::Noise => self.noise += 1,
            Role::Distractor => self.distractors += 1,
        }
    }

    /// Counts of a list of objects.
    pub fn of(objects: &[Object]) -> Self {
        let mut c = Self::default();
        for o in objects {
            c.add(o.role);
        }
        c
    }

    /// Total number of non-target objects.
    pub fn total(&self) -> usize {
        self.shape_lures
            + self.counterpart_lures
            + self.colour_lures
            + self.cross_colour_lures
            + self.noise
            + self.distractors
    }
}

/// What a scene is, relative to the base scene it derives from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Variant {
    /// A base scene.
    Base,
    /// A counterfactual: same objects, attributes swapped so the label becomes another class.
    Counterfactual {
        /// Index of the base scene in its split.
        base: usize,
    },
    /// A nuisance variant: same target, K and λ, everything else resampled.
    Nuisance {
        /// Index of the base scene in its split.
        base: usize,
        /// Variant number `0..16`.
        variant: usize,
    },
}

/// One generated scene with its metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scene {
    /// The generator.
    pub task: Task,
    /// Class index (`0..C`).
    pub label: usize,
    /// Every object; `objects[0]` is the target.
    pub objects: Vec<Object>,
    /// Clutter level K (CSB: number of noise objects requested; CSD: number of distractors).
    pub clutter: usize,
    /// λ (CSB: probability that a noise object takes a class colour; CSD: exponent of the
    /// distractor size law). See the generator modules.
    pub lambda: f64,
    /// Objects the sampler asked for, by role.
    pub requested: RoleCounts,
    /// Objects actually on the canvas, by role (CSB drops unplaceable distractors).
    pub realized: RoleCounts,
    /// How many times the whole scene was resampled because a required object did not fit.
    pub regenerations: usize,
    /// CSD: total number of shrink steps applied to distractors that did not fit.
    pub shrink_steps: usize,
    /// Base, counterfactual or nuisance variant.
    pub variant: Variant,
    /// Counterfactuals: indices of the objects whose attributes were swapped with the target.
    pub partners: Vec<usize>,
}

impl Scene {
    /// The target object.
    pub fn target(&self) -> &Object {
        &self.objects[0]
    }

    /// Renders at `side × side` with `supersample²` samples per pixel.
    pub fn render(&self, side: usize, supersample: usize) -> RgbImage {
        render(&self.objects, side, supersample)
    }
}

/// Draws `objects` on a white `side × side` canvas (see the module docs for the exact rule).
///
/// # Panics
/// If `side` or `supersample` is 0.
pub fn render(objects: &[Object], side: usize, supersample: usize) -> RgbImage {
    assert!(
        side > 0 && supersample > 0,
        "render: side and supersample must be positive"
    );
    let n = supersample;
    let nn = (n * n) as i64;
    let mut acc: Vec<i64> = Vec::with_capacity(side * side * 3);
    for _ in 0..side * side {
        acc.extend(BACKGROUND.iter().map(|&b| b as i64 * nn));
    }
    let s = side as f64;
    for o in objects {
        let rgb = o.paint.rgb();
        let delta = [0, 1, 2].map(|c| rgb[c] as i64 - BACKGROUND[c] as i64);
        let [x0, y0, x1, y1] = o.bbox();
        let px0 = ((x0 * s).floor().max(0.0)) as usize;
        let py0 = ((y0 * s).floor().max(0.0)) as usize;
        let px1 = ((x1 * s).ceil().min(s)) as usize;
        let py1 = ((y1 * s).ceil().min(s)) as usize;
        for py in py0..py1 {
            for px in px0..px1 {
                let mut hits = 0i64;
                for j in 0..n {
                    let y = (py as f64 + (j as f64 + 0.5) / n as f64) / s;
                    let v = (y - o.cy) / o.half;
                    for i in 0..n {
                        let x = (px as f64 + (i as f64 + 0.5) / n as f64) / s;
                        let u = (x - o.cx) / o.half;
                        hits += o.shape.contains(u, v) as i64;
                    }
                }
                if hits > 0 {
                    let k = (py * side + px) * 3;
                    for c in 0..3 {
                        acc[k + c] += delta[c] * hits;
                    }
                }
            }
        }
    }
    let data = acc
        .into_iter()
        .map(|a| ((a + nn / 2) / nn).clamp(0, 255) as u8)
        .collect();
    RgbImage {
        width: side,
        height: side,
        data,
    }
}

/// Draws a centre for an object of circumradius `rho`, uniformly in `[rho, 1 − rho]²`, up to
/// `attempts` times, accepting the first one at distance `≥ rho + ρ_j + gap` from every placed
/// object `j`. `None` when every attempt failed (or the object cannot fit the canvas).
pub fn try_place<R: Rng>(
    rng: &mut R,
    placed: &[Object],
    rho: f64,
    gap: f64,
    attempts: usize,
) -> Option<(f64, f64)> {
    let lo = rho;
    let hi = 1.0 - rho;
    if hi < lo {
        return None;
    }
    for _ in 0..attempts {
        let cx = lo + (hi - lo) * rng.random::<f64>();
        let cy = lo + (hi - lo) * rng.random::<f64>();
        let ok = placed.iter().all(|p| {
            let d2 = (p.cx - cx) * (p.cx - cx) + (p.cy - cy) * (p.cy - cy);
            let min = rho + p.circumradius() + gap;
            d2 >= min * min
        });
        if ok {
            return Some((cx, cy));
        }
    }
    None
}

/// Uniform element of a non-empty slice.
pub(crate) fn pick<T: Copy, R: Rng>(rng: &mut R, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

/// Writes an image as PNG.
///
/// # Errors
/// I/O or encoding errors, naming the file.
pub fn save_png(img: &RgbImage, path: &std::path::Path) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    {
        use image::ImageEncoder;
        let enc = image::codecs::png::PngEncoder::new(&mut bytes);
        enc.write_image(
            &img.data,
            img.width as u32,
            img.height as u32,
            image::ExtendedColorType::Rgb8,
        )
        .map_err(|e| {
            std::io::Error::other(format!("{}: PNG encoding failed: {e}", path.display()))
        })?;
    }
    bindscope_core::fsutil::write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(shape: Shape, cx: f64, cy: f64, half: f64) -> Object {
        Object {
            shape,
            paint: Paint::Red,
            cx,
            cy,
            half,
            role: Role::Target,
        }
    }

    #[test]
    fn square_rasterises_to_its_pixel_box() {
        // Square of half-extent 0.25 at the centre of an 8-pixel canvas: pixels 2..6 exactly.
        let img = render(&[obj(Shape::Square, 0.5, 0.5, 0.25)], 8, 1);
        for y in 0..8 {
            for x in 0..8 {
                let inside = (2..6).contains(&x) && (2..6).contains(&y);
                let px: [u8; 3] = img.data[(y * 8 + x) * 3..][..3].try_into().unwrap();
                assert_eq!(
                    px,
                    if inside { Paint::Red.rgb() } else { BACKGROUND },
                    "pixel ({x}, {y})"
                );
            }
        }
    }

    #[test]
    fn antialiasing_averages_samples() {
        // Square covering exactly the left half of a single pixel: 2 of 4 sub-samples per row.
        let img = render(&[obj(Shape::Square, 0.25, 0.5, 0.25)], 1, 2);
        // mean of (229, 255) = 242; (25, 255) = 140.
        assert_eq!(img.data, vec![242, 140, 140]);
    }

    #[test]
    fn placement_respects_margin_and_spacing() {
        let mut rng = crate::rng::stream(3, &[99]);
        let mut placed: Vec<Object> = Vec::new();
        for _ in 0..30 {
            if let Some((cx, cy)) = try_place(&mut rng, &placed, 0.05, 0.01, 200) {
                placed.push(obj(Shape::Circle, cx, cy, 0.05 / std::f64::consts::SQRT_2));
            }
        }
        assert!(placed.len() > 10);
        for (i, a) in placed.iter().enumerate() {
            assert!(a.cx >= 0.05 && a.cx <= 0.95 && a.cy >= 0.05 && a.cy <= 0.95);
            for b in &placed[..i] {
                assert!(((a.cx - b.cx).powi(2) + (a.cy - b.cy).powi(2)).sqrt() >= 0.11 - 1e-12);
            }
        }
    }
}
