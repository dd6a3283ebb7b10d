//! The shape vocabulary and the colour palette of the CSB / CSD scenes.
//!
//! # Shapes
//! Every shape is defined in its own local frame `(u, v) ∈ [-1, 1]²` (u to the right, v down,
//! the frame scaled by the object's half-extent `r`), in one canonical orientation, never
//! rotated. Every shape lies inside that square, so inside the disc of radius `√2` (the
//! *circumradius* `ρ = √2·r` used for spacing). Membership tests are closed sets evaluated in
//! f64 with vertex tables written as literals (no trigonometry at run time), so rendering is
//! bit-identical on every platform.
//!
//! Two *class shapes* carry labels ([`Shape::Circle`], [`Shape::Triangle`], apex up); the other
//! 18 are *distractor-only* shapes and never carry a label: inverted, left- and right-pointing
//! triangles, square, 4-, 5-, 6- and 8-pointed stars, semicircles in 4 orientations, plus, latin
//! cross, chevron, parallelogram, diamond and ellipse. Several distractors are deliberate
//! near-misses of the class shapes (rotated triangles, semicircles, ellipse).

use serde::{Deserialize, Serialize};

/// One of the 20 shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Class shape: disc `u² + v² ≤ 1`.
    Circle,
    /// Class shape: isosceles triangle, apex `(0, -1)`, base `(-1, 1)`–`(1, 1)`.
    Triangle,
    /// Apex down: apex `(0, 1)`, base `(-1, -1)`–`(1, -1)`.
    TriangleDown,
    /// Apex left: apex `(-1, 0)`, base `(1, -1)`–`(1, 1)`.
    TriangleLeft,
    /// Apex right: apex `(1, 0)`, base `(-1, -1)`–`(-1, 1)`.
    TriangleRight,
    /// `|u| ≤ 1, |v| ≤ 1`.
    Square,
    /// 4-pointed star, outer radius 1, inner radius 0.4, a point up.
    Star4,
    /// 5-pointed star (regular pentagram outline, inner radius 0.382), a point up.
    Star5,
    /// 6-pointed star (hexagram outline, inner radius 1/√3), a point up.
    Star6,
    /// 8-pointed star, inner radius 0.5, a point up.
    Star8,
    /// Half disc, dome up: `u² + (v − ½)² ≤ 1, v ≤ ½`.
    SemicircleUp,
    /// Half disc, dome down: `u² + (v + ½)² ≤ 1, v ≥ −½`.
    SemicircleDown,
    /// Half disc, dome left: `(u − ½)² + v² ≤ 1, u ≤ ½`.
    SemicircleLeft,
    /// Half disc, dome right: `(u + ½)² + v² ≤ 1, u ≥ −½`.
    SemicircleRight,
    /// Plus: arms of half-width 0.3.
    Plus,
    /// Latin cross: vertical bar of half-width 0.25, cross bar `|v + 0.35| ≤ 0.25, |u| ≤ 0.7`.
    LatinCross,
    /// Chevron pointing up (an inverted V of thickness ~0.6).
    Chevron,
    /// Parallelogram slanted right: `(-0.5,-0.6), (1,-0.6), (0.5,0.6), (-1,0.6)`.
    Parallelogram,
    /// `|u| + |v| ≤ 1`.
    Diamond,
    /// Horizontal ellipse, semi-axes 1 and 0.5.
    Ellipse,
}

const STAR4: [(f64, f64); 8] = [
    (0.0, -1.0),
    (0.282842712475, -0.282842712475),
    (1.0, 0.0),
    (0.282842712475, 0.282842712475),
    (0.0, 1.0),
    (-0.282842712475, 0.282842712475),
    (-1.0, 0.0),
    (-0.282842712475, -0.282842712475),
];
const STAR5: [(f64, f64); 10] = [
    (0.0, -1.0),
    (0.22451398829, -0.309016994375),
    (0.951056516295, -0.309016994375),
    (0.363271264003, 0.11803398875),
    (0.587785252292, 0.809016994375),
    (0.0, 0.38196601125),
    (-0.587785252292, 0.809016994375),
    (-0.363271264003, 0.11803398875),
    (-0.951056516295, -0.309016994375),
    (-0.22451398829, -0.309016994375),
];
const STAR6: [(f64, f64); 12] = [
    (0.0, -1.0),
    (0.288675134595, -0.5),
    (0.866025403784, -0.5),
    (0.57735026919, 0.0),
    (0.866025403784, 0.5),
    (0.288675134595, 0.5),
    (0.0, 1.0),
    (-0.288675134595, 0.5),
    (-0.866025403784, 0.5),
    (-0.57735026919, 0.0),
    (-0.866025403784, -0.5),
    (-0.288675134595, -0.5),
];
// The study's own vertex table, 12 decimals; the exact `FRAC_1_SQRT_2` would move rendered pixels
// and every committed scene.
#[allow(clippy::approx_constant)]
const STAR8: [(f64, f64); 16] = [
    (0.0, -1.0),
    (0.191341716183, -0.461939766256),
    (0.707106781187, -0.707106781187),
    (0.461939766256, -0.191341716183),
    (1.0, 0.0),
    (0.461939766256, 0.191341716183),
    (0.707106781187, 0.707106781187),
    (0.191341716183, 0.461939766256),
    (0.0, 1.0),
    (-0.191341716183, 0.461939766256),
    (-0.707106781187, 0.707106781187),
    (-0.461939766256, 0.191341716183),
    (-1.0, 0.0),
    (-0.461939766256, -0.191341716183),
    (-0.707106781187, -0.707106781187),
    (-0.191341716183, -0.461939766256),
];
const CHEVRON: [(f64, f64); 6] = [
    (0.0, -1.0),
    (1.0, 0.2),
    (1.0, 0.9),
    (0.0, -0.3),
    (-1.0, 0.9),
    (-1.0, 0.2),
];
const PARALLELOGRAM: [(f64, f64); 4] = [(-0.5, -0.6), (1.0, -0.6), (0.5, 0.6), (-1.0, 0.6)];

/// Even–odd point-in-polygon test (points on an edge may fall either way; the polygon tables
/// are fixed, so the answer is deterministic).
fn in_polygon(poly: &[(f64, f64)], u: f64, v: f64) -> bool {
    let mut inside = false;
    let n = poly.len();
    let mut j = n - 1;
    for i in 0..n {
        let (xi, yi) = poly[i];
        let (xj, yj) = poly[j];
        if (yi > v) != (yj > v) {
            let x_cross = xi + (v - yi) * (xj - xi) / (yj - yi);
            if u < x_cross {
                inside = !inside;
            }
        }
        j = i;
    }
    inside
}

impl Shape {
    /// All 20 shapes: the two class shapes first, then the 18 distractor-only shapes.
    pub const ALL: [Shape; 20] = [
        Shape::Circle,
        Shape::Triangle,
        Shape::TriangleDown,
        Shape::TriangleLeft,
        Shape::TriangleRight,
        Shape::Square,
        Shape::Star4,
        Shape::Star5,
        Shape::Star6,
        Shape::Star8,
        Shape::SemicircleUp,
        Shape::SemicircleDown,
        Shape::SemicircleLeft,
        Shape::SemicircleRight,
        Shape::Plus,
        Shape::LatinCross,
        Shape::Chevron,
        Shape::Parallelogram,
        Shape::Diamond,
        Shape::Ellipse,
    ];

    /// The two label-carrying shapes, in class order.
    pub const CLASS: [Shape; 2] = [Shape::Circle, Shape::Triangle];

    /// The 18 distractor-only shapes.
    pub fn distractors() -> &'static [Shape] {
        &Self::ALL[2..]
    }

    /// Whether this is a class shape.
    pub fn is_class(self) -> bool {
        Self::CLASS.contains(&self)
    }

    /// The other class shape (the *counterpart*); `None` for a distractor-only shape.
    pub fn counterpart(self) -> Option<Shape> {
        match self {
            Shape::Circle => Some(Shape::Triangle),
            Shape::Triangle => Some(Shape::Circle),
            _ => None,
        }
    }

    /// Kebab-case name (as serialized).
    pub fn name(self) -> &'static str {
        match self {
            Shape::Circle => "circle",
            Shape::Triangle => "triangle",
            Shape::TriangleDown => "triangle-down",
            Shape::TriangleLeft => "triangle-left",
            Shape::TriangleRight => "triangle-right",
            Shape::Square => "square",
            Shape::Star4 => "star4",
            Shape::Star5 => "star5",
            Shape::Star6 => "star6",
            Shape::Star8 => "star8",
            Shape::SemicircleUp => "semicircle-up",
            Shape::SemicircleDown => "semicircle-down",
            Shape::SemicircleLeft => "semicircle-left",
            Shape::SemicircleRight => "semicircle-right",
            Shape::Plus => "plus",
            Shape::LatinCross => "latin-cross",
            Shape::Chevron => "chevron",
            Shape::Parallelogram => "parallelogram",
            Shape::Diamond => "diamond",
            Shape::Ellipse => "ellipse",
        }
    }

    /// Whether the local point `(u, v)` (in units of the half-extent, v down) is in the shape.
    pub fn contains(self, u: f64, v: f64) -> bool {
        if !(-1.0..=1.0).contains(&u) || !(-1.0..=1.0).contains(&v) {
            return false;
        }
        match self {
            Shape::Circle => u * u + v * v <= 1.0,
            // Apex (0,-1), base at v = 1: |u| ≤ (v + 1) / 2.
            Shape::Triangle => 2.0 * u.abs() <= v + 1.0,
            Shape::TriangleDown => 2.0 * u.abs() <= 1.0 - v,
            Shape::TriangleLeft => 2.0 * v.abs() <= u + 1.0,
            Shape::TriangleRight => 2.0 * v.abs() <= 1.0 - u,
            Shape::Square => true,
            Shape::Star4 => in_polygon(&STAR4, u, v),
            Shape::Star5 => in_polygon(&STAR5, u, v),
            Shape::Star6 => in_polygon(&STAR6, u, v),
            Shape::Star8 => in_polygon(&STAR8, u, v),
            Shape::SemicircleUp => v <= 0.5 && u * u + (v - 0.5) * (v - 0.5) <= 1.0,
            Shape::SemicircleDown => v >= -0.5 && u * u + (v + 0.5) * (v + 0.5) <= 1.0,
            Shape::SemicircleLeft => u <= 0.5 && (u - 0.5) * (u - 0.5) + v * v <= 1.0,
            Shape::SemicircleRight => u >= -0.5 && (u + 0.5) * (u + 0.5) + v * v <= 1.0,
            Shape::Plus => u.abs() <= 0.3 || v.abs() <= 0.3,
            Shape::LatinCross => u.abs() <= 0.25 || ((v + 0.35).abs() <= 0.25 && u.abs() <= 0.7),
            Shape::Chevron => in_polygon(&CHEVRON, u, v),
            Shape::Parallelogram => in_polygon(&PARALLELOGRAM, u, v),
            Shape::Diamond => u.abs() + v.abs() <= 1.0,
            Shape::Ellipse => u * u + 4.0 * v * v <= 1.0,
        }
    }
}

/// A fill colour: the six-colour palette of CSB, or black (CSD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Paint {
    /// `#E51919`.
    Red,
    /// `#FF7F00`.
    Orange,
    /// `#E5CC00`.
    Yellow,
    /// `#00B200`.
    Green,
    /// `#1919E5`.
    Blue,
    /// `#990099`.
    Purple,
    /// `#000000` (every CSD object).
    Black,
}

impl Paint {
    /// The six palette colours.
    pub const PALETTE: [Paint; 6] = [
        Paint::Red,
        Paint::Orange,
        Paint::Yellow,
        Paint::Green,
        Paint::Blue,
        Paint::Purple,
    ];

    /// The three label-carrying CSB colours, in class order.
    pub const CLASS: [Paint; 3] = [Paint::Red, Paint::Green, Paint::Blue];

    /// The three CSB colours that never carry a label (each a near neighbour of a class colour).
    pub const NON_CLASS: [Paint; 3] = [Paint::Orange, Paint::Yellow, Paint::Purple];

    /// 8-bit sRGB value.
    pub fn rgb(self) -> [u8; 3] {
        match self {
            Paint::Red => [0xE5, 0x19, 0x19],
            Paint::Orange => [0xFF, 0x7F, 0x00],
            Paint::Yellow => [0xE5, 0xCC, 0x00],
            Paint::Green => [0x00, 0xB2, 0x00],
            Paint::Blue => [0x19, 0x19, 0xE5],
            Paint::Purple => [0x99, 0x00, 0x99],
            Paint::Black => [0, 0, 0],
        }
    }

    /// Whether this is a CSB class colour.
    pub fn is_class(self) -> bool {
        Self::CLASS.contains(&self)
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Paint::Red => "red",
            Paint::Orange => "orange",
            Paint::Yellow => "yellow",
            Paint::Green => "green",
            Paint::Blue => "blue",
            Paint::Purple => "purple",
            Paint::Black => "black",
        }
    }
}

/// The canvas colour (white).
pub const BACKGROUND: [u8; 3] = [255, 255, 255];

#[cfg(test)]
mod tests {
    use super::*;

    /// Fraction of the `[-1, 1]²` square a shape covers, on a fine grid.
    fn coverage(s: Shape) -> f64 {
        let n = 400;
        let mut hits = 0;
        for i in 0..n {
            for j in 0..n {
                let u = -1.0 + (2 * i + 1) as f64 / n as f64;
                let v = -1.0 + (2 * j + 1) as f64 / n as f64;
                hits += s.contains(u, v) as usize;
            }
        }
        hits as f64 / (n * n) as f64
    }

    #[test]
    fn areas_match_the_definitions() {
        let pi = std::f64::consts::PI;
        let close = |s: Shape, want: f64| {
            let got = coverage(s) * 4.0;
            assert!(
                (got - want).abs() < 0.01,
                "{s:?}: area {got}, expected {want}"
            );
        };
        close(Shape::Circle, pi);
        close(Shape::Triangle, 2.0);
        close(Shape::TriangleDown, 2.0);
        close(Shape::TriangleLeft, 2.0);
        close(Shape::TriangleRight, 2.0);
        close(Shape::Square, 4.0);
        close(Shape::Diamond, 2.0);
        close(Shape::Ellipse, pi * 0.5);
        close(Shape::SemicircleUp, pi / 2.0);
        close(Shape::SemicircleLeft, pi / 2.0);
        close(Shape::Plus, 2.0 * 2.0 * 0.6 - 0.36);
        close(Shape::Parallelogram, 1.5 * 1.2);
        // Star with n points, outer radius 1, inner radius ri: 2n triangles of area ri·sin(π/n)/2.
        let star = |n: f64, ri: f64| n * ri * (pi / n).sin();
        close(Shape::Star4, star(4.0, 0.4));
        close(Shape::Star5, star(5.0, 0.381966011250105));
        close(Shape::Star6, star(6.0, 1.0 / 3f64.sqrt()));
        close(Shape::Star8, star(8.0, 0.5));
    }

    #[test]
    fn orientations_are_canonical() {
        assert!(Shape::Triangle.contains(0.0, -0.95) && !Shape::Triangle.contains(0.5, -0.5));
        assert!(Shape::Triangle.contains(0.9, 0.95) && !Shape::Triangle.contains(0.9, -0.95));
        assert!(
            Shape::TriangleDown.contains(0.9, -0.95) && !Shape::TriangleDown.contains(0.9, 0.95)
        );
        assert!(
            Shape::TriangleLeft.contains(0.95, 0.9) && !Shape::TriangleLeft.contains(-0.95, 0.9)
        );
        assert!(
            Shape::TriangleRight.contains(-0.95, 0.9) && !Shape::TriangleRight.contains(0.95, 0.9)
        );
        assert!(
            Shape::SemicircleUp.contains(0.0, -0.45) && !Shape::SemicircleUp.contains(0.0, 0.6)
        );
        assert!(
            Shape::SemicircleDown.contains(0.0, 0.45) && !Shape::SemicircleDown.contains(0.0, -0.6)
        );
        assert!(Shape::Star5.contains(0.0, -0.95) && !Shape::Star5.contains(0.0, 0.95));
        assert!(Shape::Chevron.contains(0.0, -0.9) && !Shape::Chevron.contains(0.0, 0.5));
        for s in Shape::ALL {
            assert!(
                !s.contains(1.01, 0.0) && !s.contains(0.0, -1.01),
                "{s:?} leaves its box"
            );
        }
        assert_eq!(Shape::distractors().len(), 18);
        assert!(Shape::distractors().iter().all(|s| !s.is_class()));
    }
}
