//! Two-object scenes and their pixel-exact rendering (paper App. C).
//!
//! # The scene grammar
//! A [`Scene`] holds one [`Object`] at [`Position::Left`] and one at [`Position::Right`]; an
//! object is a [`Shape`] (circle, square, triangle) in one of six [`Color`]s. There are
//! `18 × 18 = 324` scenes ([`Scene::id`] numbers them `0..324`); every probe image of the
//! binding and same/different tasks is one of them, which is why a run embeds each image once.
//!
//! # Geometry (canvas side `S`, default 224)
//! - background RGB (200, 200, 200);
//! - object centres: LEFT at `(S/4, S/2)`, RIGHT at `(3S/4, S/2)` (x to the right, y down,
//!   in pixel units where pixel `(x, y)` covers `[x, x+1) × [y, y+1)`);
//! - size `r = S/6`: the radius of a circle, the half-width of a square;
//! - the triangle is isosceles and points up, inscribed in the square of half-width `r`: apex
//!   `(cx, cy − r)`, base corners `(cx − r, cy + r)` and `(cx + r, cy + r)` (base `2r`, height `2r`);
//! - shapes are closed sets (boundary inside), filled with the object's colour, no outline.
//!
//! # Rasterization (exact, integer arithmetic)
//! Without anti-aliasing (the default, `antialias = 1`) pixel `(x, y)` takes the object's
//! colour iff its centre `(x + ½, y + ½)` lies in the shape. With `antialias = n > 1`, the pixel
//! is sampled at the `n × n` sub-pixel centres `(x + (2i+1)/(2n), y + (2j+1)/(2n))` and each
//! channel is the rounded mean `(Σ + n²/2) div n²` of the samples' colours.
//!
//! All coordinates are multiplied by `F = 12n`, which makes every quantity an integer for any
//! `S`: sample `X = 12n·x + 6(2i+1)`, centres `CX = 3nS` (LEFT) / `9nS` (RIGHT), `CY = 6nS`,
//! `R = 2nS`. The tests are then exact comparisons of `i64`s:
//! - circle: `(X−CX)² + (Y−CY)² ≤ R²`;
//! - square: `|X−CX| ≤ R` and `|Y−CY| ≤ R`;
//! - triangle: `CY−R ≤ Y ≤ CY+R` and `2·|X−CX| ≤ Y − (CY−R)`.
//!
//! No floating point is involved, so images are identical on every platform. For `S = 224` a
//! square spans columns 19..=92 (LEFT) and rows 75..=148: 74 × 74 pixels.

use bindscope_data::image::RgbImage;
use std::path::Path;

/// The three shapes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// Disc of radius `r`.
    Circle,
    /// Axis-aligned square of half-width `r`.
    Square,
    /// Upward isosceles triangle, base `2r`, height `2r` (see the module docs).
    Triangle,
}

impl Shape {
    /// All shapes, in index order.
    pub const ALL: [Shape; 3] = [Shape::Circle, Shape::Square, Shape::Triangle];

    /// Index `0..3` in [`Shape::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The shape with index `i` (`i < 3`).
    pub fn from_index(i: usize) -> Shape {
        Self::ALL[i]
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Circle => "circle",
            Shape::Square => "square",
            Shape::Triangle => "triangle",
        }
    }
}

/// The six colours of the probes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Color {
    /// RGB (220, 60, 60).
    Red,
    /// RGB (60, 180, 60).
    Green,
    /// RGB (60, 60, 220).
    Blue,
    /// RGB (220, 220, 60).
    Yellow,
    /// RGB (160, 60, 200).
    Purple,
    /// RGB (60, 200, 200).
    Cyan,
}

impl Color {
    /// All colours, in index order.
    pub const ALL: [Color; 6] = [
        Color::Red,
        Color::Green,
        Color::Blue,
        Color::Yellow,
        Color::Purple,
        Color::Cyan,
    ];

    /// Index `0..6` in [`Color::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The colour with index `i` (`i < 6`).
    pub fn from_index(i: usize) -> Color {
        Self::ALL[i]
    }

    /// 8-bit RGB value.
    pub fn rgb(self) -> [u8; 3] {
        match self {
            Color::Red => [220, 60, 60],
            Color::Green => [60, 180, 60],
            Color::Blue => [60, 60, 220],
            Color::Yellow => [220, 220, 60],
            Color::Purple => [160, 60, 200],
            Color::Cyan => [60, 200, 200],
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Color::Red => "red",
            Color::Green => "green",
            Color::Blue => "blue",
            Color::Yellow => "yellow",
            Color::Purple => "purple",
            Color::Cyan => "cyan",
        }
    }
}

/// Background colour of every probe image.
pub const BACKGROUND: [u8; 3] = [200, 200, 200];

/// The two object positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Position {
    /// Centre `(S/4, S/2)`.
    Left,
    /// Centre `(3S/4, S/2)`.
    Right,
}

/// A coloured shape.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Object {
    /// Its shape.
    pub shape: Shape,
    /// Its fill colour.
    pub color: Color,
}

impl Object {
    /// `Object { shape, color }`.
    pub fn new(shape: Shape, color: Color) -> Self {
        Self { shape, color }
    }

    /// Index `shape·6 + color` in `0..18`.
    pub fn id(self) -> usize {
        self.shape.index() * Color::ALL.len() + self.color.index()
    }

    /// Inverse of [`Object::id`].
    pub fn from_id(id: usize) -> Self {
        Self {
            shape: Shape::from_index(id / Color::ALL.len()),
            color: Color::from_index(id % Color::ALL.len()),
        }
    }
}

/// One object at LEFT and one at RIGHT.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Scene {
    /// The object centred at `(S/4, S/2)`.
    pub left: Object,
    /// The object centred at `(3S/4, S/2)`.
    pub right: Object,
}

/// Number of distinct scenes, `18²`.
pub const NUM_SCENES: usize = 324;

impl Scene {
    /// A scene from its two objects.
    pub fn new(left: Object, right: Object) -> Self {
        Self { left, right }
    }

    /// Index `left.id()·18 + right.id()` in `0..324`.
    pub fn id(self) -> usize {
        self.left.id() * 18 + self.right.id()
    }

    /// Inverse of [`Scene::id`] (`id < 324`).
    pub fn from_id(id: usize) -> Self {
        Self {
            left: Object::from_id(id / 18),
            right: Object::from_id(id % 18),
        }
    }

    /// Every scene, in id order.
    pub fn all() -> Vec<Scene> {
        (0..NUM_SCENES).map(Scene::from_id).collect()
    }

    /// A readable file-system-safe name, e.g. `circle-red_square-blue`.
    pub fn name(self) -> String {
        format!(
            "{}-{}_{}-{}",
            self.left.shape.name(),
            self.left.color.name(),
            self.right.shape.name(),
            self.right.color.name()
        )
    }
}

/// How to draw scenes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RenderSpec {
    /// Canvas side `S` in pixels (square canvas). Default 224.
    pub image_size: usize,
    /// Sub-samples per axis: 1 = no anti-aliasing (default); `n` = `n × n` supersampling.
    pub antialias: usize,
}

impl Default for RenderSpec {
    fn default() -> Self {
        Self {
            image_size: 224,
            antialias: 1,
        }
    }
}

/// Whether the scaled sample `(x, y)` lies in `shape` centred at `(cx, cy)` with size `r`
/// (all in the integer coordinates of the module docs).
fn inside(shape: Shape, x: i64, y: i64, cx: i64, cy: i64, r: i64) -> bool {
    let (dx, dy) = (x - cx, y - cy);
    match shape {
        Shape::Circle => dx * dx + dy * dy <= r * r,
        Shape::Square => dx.abs() <= r && dy.abs() <= r,
        Shape::Triangle => (-r..=r).contains(&dy) && 2 * dx.abs() <= dy + r,
    }
}

/// Renders `scene` into a `S × S` RGB image.
///
/// # Panics
/// If `spec.image_size` or `spec.antialias` is 0.
pub fn render(scene: &Scene, spec: &RenderSpec) -> RgbImage {
    let s = spec.image_size;
    let n = spec.antialias;
    assert!(
        s > 0 && n > 0,
        "render: image_size and antialias must be positive"
    );
    let (si, ni) = (s as i64, n as i64);
    let r = 2 * ni * si;
    let cy = 6 * ni * si;
    let objects = [(scene.left, 3 * ni * si), (scene.right, 9 * ni * si)];
    let samples = (n * n) as u32;
    let mut data = vec![0u8; s * s * 3];
    for py in 0..s {
        for px in 0..s {
            let mut sum = [0u32; 3];
            for j in 0..ni {
                let y = 12 * ni * py as i64 + 6 * (2 * j + 1);
                for i in 0..ni {
                    let x = 12 * ni * px as i64 + 6 * (2 * i + 1);
                    // Objects never overlap (their boxes are S/2 apart): the first hit wins.
                    let c = objects
                        .iter()
                        .find(|(o, cx)| inside(o.shape, x, y, *cx, cy, r))
                        .map_or(BACKGROUND, |(o, _)| o.color.rgb());
                    for ch in 0..3 {
                        sum[ch] += c[ch] as u32;
                    }
                }
            }
            let o = (py * s + px) * 3;
            for ch in 0..3 {
                data[o + ch] = ((sum[ch] + samples / 2) / samples) as u8;
            }
        }
    }
    RgbImage {
        width: s,
        height: s,
        data,
    }
}

/// Writes an image as PNG (for `--dump-images`), through [`bindscope_data::image::save_png`].
///
/// # Errors
/// Any encoding or I/O error, as a message naming the file.
pub fn save_png(img: &RgbImage, path: &Path) -> Result<(), String> {
    bindscope_data::image::save_png(img, path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for id in 0..NUM_SCENES {
            assert_eq!(Scene::from_id(id).id(), id);
        }
        for id in 0..18 {
            assert_eq!(Object::from_id(id).id(), id);
        }
    }
}
