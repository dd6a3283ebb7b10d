//! Element-wise f32 functions written so that the compiler vectorises loops over them, and
//! [`vectorized`], which compiles such a loop for the widest vector extension the CPU has
//! (through `pulp`'s runtime dispatch: AVX-512 or AVX2 + FMA on x86-64, the baseline
//! elsewhere).
//!
//! libm's `expf`, `tanhf` and `erff` are calls the compiler cannot vectorise: in a loop over an
//! activation or a softmax row they cost one call per element. [`exp_nonpositive`] and
//! [`sigmoid`] are branch-free arithmetic instead, within a few ulp of the correctly rounded
//! value (tested below against f64).

/// Runs `f` compiled for the best instruction set the CPU supports (detected at run time);
/// `f` should be a loop over slices calling the `#[inline(always)]` functions of this module.
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    pulp::Arch::new().dispatch(f)
}

/// `e^x` for `x ≤ 0` (NaN stays NaN; `x < ln 2⁻¹²⁶ ≈ −87.34`, where `e^x` is below the
/// smallest normal f32, gives 0), within 2 ulp of the correctly rounded value:
/// `x = n·ln 2 + r` with `n` rounded to nearest by the 1.5·2²³ shift, `|r| ≤ ln 2 / 2`, `e^r`
/// by the polynomial of Cephes' `expf` (S. L. Moshier, Cephes Math Library, `expf.c`), and
/// `2^n` built in the exponent bits.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const SHIFT: f32 = 12_582_912.0; // 1.5 · 2^23
    // ln 2^-126: below it e^x is not a normal f32.
    const MIN_ARG: f32 = -87.336_54;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ];
    // (A comparison, not `max`, so that NaN passes through.)
    let xc = if x < MIN_ARG { MIN_ARG } else { x };
    let t = xc * LOG2E + SHIFT;
    let n = t - SHIFT;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let mut p = P[0];
    for c in &P[1..] {
        p = p * r + c;
    }
    let er = 1.0 + r + r * r * p;
    // t's low mantissa bits hold n + 2^22 in two's complement: the exponent field of 2^n.
    let bits = (t.to_bits() as i32 - 0x4B40_0000 + 127) << 23;
    let y = er * f32::from_bits(bits as u32);
    if x < MIN_ARG { 0.0 } else { y }
}

/// The logistic function `1 / (1 + e^{−z})` without overflow: `1 / (1 + e^{−|z|})` for
/// `z ≥ 0` and `e^{−|z|} / (1 + e^{−|z|})` below; within 3 ulp of the exact value.
#[inline(always)]
pub(crate) fn sigmoid(z: f32) -> f32 {
    let e = exp_nonpositive(-z.abs());
    let r = 1.0 / (1.0 + e);
    if z >= 0.0 { r } else { e * r }
}

/// The error function. For `|x| ≥ 1/2` Abramowitz & Stegun's formula 7.1.26 (Handbook of
/// Mathematical Functions, 1964): `erf(x) = sign(x) · (1 − t·(a₁ + t(a₂ + t(a₃ + t(a₄ +
/// t a₅))))·e^{−x²})`, `t = 1 / (1 + p|x|)`, absolute error below 1.5e-7 — the formula of
/// PyTorch's vectorised CPU `erf` (ATen's `Vectorized<float>::erf`), which its exact GELU uses.
/// Below `1/2`, where `1 − t·(…)·e^{−x²}` cancels in f32, the Maclaurin series
/// `(2/√π) Σ (−1)ⁿ x²ⁿ⁺¹ / (n! (2n + 1))` to `x¹¹` (truncation below 2e-8 relative). Absolute
/// error below 3e-7 in f32 (tested against f64); NaN stays NaN.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    /// `(2/√π) (−1)ⁿ / (n! (2n + 1))`, n = 0…5.
    const C: [f32; 6] = [
        std::f32::consts::FRAC_2_SQRT_PI,
        -0.376_126_4,
        0.112_837_92,
        -0.026_866_17,
        0.005_223_977_6,
        -8.548_327e-4,
    ];
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152_1,
        1.061_405_4,
    ];
    let ax = x.abs();
    let t = 1.0 / (1.0 + P * ax);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let y = 1.0 - poly * exp_nonpositive(-(ax * ax));
    let large = if x < 0.0 { -y } else { y };
    let x2 = x * x;
    let small = x * (C[0] + x2 * (C[1] + x2 * (C[2] + x2 * (C[3] + x2 * (C[4] + x2 * C[5])))));
    if ax < 0.5 { small } else { large }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// |got − want| in units of f32's epsilon at `want`.
    fn ulps(got: f32, want: f64) -> f64 {
        (got as f64 - want).abs() / (f32::EPSILON as f64 * want.abs().max(f32::MIN_POSITIVE as f64))
    }

    #[test]
    fn exp_is_within_two_ulp_of_the_exact_value() {
        let mut worst: f64 = 0.0;
        let mut x = -87.3f32;
        while x <= 0.0 {
            worst = worst.max(ulps(exp_nonpositive(x), (x as f64).exp()));
            x += 1.3e-3;
        }
        for x in [-0.0f32, -1e-8, -0.5 * std::f32::consts::LN_2, -87.0, -87.33] {
            worst = worst.max(ulps(exp_nonpositive(x), (x as f64).exp()));
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-100.0), 0.0);
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert!(exp_nonpositive(f32::NAN).is_nan());
    }

    #[test]
    fn sigmoid_is_within_three_ulp_of_the_exact_value() {
        let mut worst: f64 = 0.0;
        let mut z = -80.0f32;
        while z <= 80.0 {
            let want = 1.0 / (1.0 + (-(z as f64)).exp());
            worst = worst.max(ulps(sigmoid(z), want));
            z += 7.1e-3;
        }
        assert!(worst <= 3.0, "worst error {worst} ulp");
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert!(sigmoid(f32::NAN).is_nan());
    }

    /// Within 3e-7 of the f64 error function: A&S 7.1.26's bound (1.5e-7) plus f32
    /// rounding.
    #[test]
    fn erf_is_within_the_formulas_bound() {
        let mut worst: f64 = 0.0;
        let mut x = -6.0f32;
        while x <= 6.0 {
            worst = worst.max((erf(x) as f64 - libm::erf(x as f64)).abs());
            x += 1.1e-3;
        }
        assert!(worst <= 3e-7, "worst absolute error {worst:e}");
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
        assert!(erf(f32::NAN).is_nan());
    }

    /// The dispatched loop computes what the plain loop computes.
    #[test]
    fn vectorized_loops_equal_scalar_loops() {
        let xs: Vec<f32> = (0..1000).map(|i| -(i as f32) * 0.0917).collect();
        let mut ys = xs.clone();
        vectorized(|| ys.iter_mut().for_each(|y| *y = exp_nonpositive(*y)));
        for (x, y) in xs.iter().zip(&ys) {
            assert_eq!(*y, exp_nonpositive(*x));
        }
    }
}
