//! Probe inputs and random directions, all derived from one explicit seed.
//!
//! Every random draw is a ChaCha8 stream keyed by `(seed, image index, purpose)`, so image `i`
//! is the same whether it is computed first, last, or after a resume, on every platform, and
//! however many images, seeds or outputs a run has: each output's directions have their own
//! purpose ([`directions_stream`]), fixed by what the output is (the final embedding, block
//! `b`), never by where it sits in a run's list of outputs.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// ImageNet channel mean, the paper's normalization for every model.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet channel standard deviation.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// What a probe image looks like.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProbeSpec {
    /// Image height in pixels.
    pub height: usize,
    /// Image width in pixels.
    pub width: usize,
    /// Per-pixel mean before clipping (paper: 0.45).
    pub pixel_mean: f32,
    /// Per-pixel standard deviation before clipping (paper: 0.225).
    pub pixel_std: f32,
    /// Channel mean subtracted after clipping.
    pub norm_mean: [f32; 3],
    /// Channel std divided after clipping.
    pub norm_std: [f32; 3],
}

impl ProbeSpec {
    /// The paper's probe: N(0.45, 0.225²) per pixel, clipped to [0, 1], ImageNet normalization.
    pub fn paper(height: usize, width: usize) -> Self {
        Self {
            height,
            width,
            pixel_mean: 0.45,
            pixel_std: 0.225,
            norm_mean: IMAGENET_MEAN,
            norm_std: IMAGENET_STD,
        }
    }

    /// Input dimension `M = 3·H·W`.
    pub fn dim(&self) -> usize {
        3 * self.height * self.width
    }
}

/// Purposes of the random streams of one image.
#[derive(Debug, Clone, Copy)]
#[repr(u64)]
pub enum Stream {
    /// The probe image's pixels.
    Pixels = 0,
    /// The sketch directions (G or V) of the final output; block `b`'s (1-based) use
    /// `Directions + b` ([`directions_stream`]).
    Directions = 1,
}

/// The stream purpose of the sketch directions of output `output` of a map with `outputs`
/// outputs, the last of which is the encoder's final output (a depth profile lists block 1,
/// …, block L − 1, then the final output, which is block L read out):
///
/// - the final output: [`Stream::Directions`], the purpose it has always had, so the headline
///   JER of a run with `--depth` equals, to the bit, that of the same run without it;
/// - block `b = output + 1 < L`: `Directions + b`.
///
/// # Panics
/// If `output ≥ outputs`, or `outputs` reaches the 2²⁰ purposes of an image
/// ([`bindscope_core::rng::legacy::jer`]).
pub fn directions_stream(output: usize, outputs: usize) -> u64 {
    assert!(
        output < outputs,
        "directions_stream: output {output} of {outputs}"
    );
    assert!(
        outputs < 1 << 20,
        "directions_stream: {outputs} outputs exceed the 2^20 purposes of an image"
    );
    if output + 1 == outputs {
        Stream::Directions as u64
    } else {
        Stream::Directions as u64 + 1 + output as u64
    }
}

/// The RNG for `(seed, image, purpose)`: [`bindscope_core::rng::legacy::jer`] (ChaCha8,
/// stream `image · 2²⁰ + purpose`).
pub use bindscope_core::rng::legacy::jer as rng;

/// Probe image `index`: `[3, H, W]` row-major, normalized (what the encoder receives).
pub fn probe_image(spec: &ProbeSpec, seed: u64, index: u64) -> Vec<f32> {
    let mut r = rng(seed, index, Stream::Pixels as u64);
    let hw = spec.height * spec.width;
    let mut out = Vec::with_capacity(3 * hw);
    for c in 0..3 {
        for _ in 0..hw {
            let z: f32 = r.sample(StandardNormal);
            let p = (spec.pixel_mean + spec.pixel_std * z).clamp(0.0, 1.0);
            out.push((p - spec.norm_mean[c]) / spec.norm_std[c]);
        }
    }
    out
}

/// A `rows × cols` standard Gaussian matrix, row-major.
pub fn gaussian(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..rows * cols)
        .map(|_| StandardNormal.sample(rng))
        .collect()
}

/// A `rows × cols` matrix with orthonormal columns (thin Q of a Gaussian matrix, computed in
/// f64 with faer), row-major f32. Requires `cols ≤ rows`.
pub fn orthonormal(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    assert!(
        cols <= rows,
        "orthonormal: {cols} columns need at least as many rows, got {rows}"
    );
    let g = faer::Mat::<f64>::from_fn(rows, cols, |_, _| StandardNormal.sample(rng));
    let q = g.qr().compute_thin_Q();
    let mut out = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        for j in 0..cols {
            out.push(q[(i, j)] as f32);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_is_deterministic_clipped_and_normalized() {
        let spec = ProbeSpec::paper(8, 8);
        let a = probe_image(&spec, 42, 3);
        assert_eq!(a, probe_image(&spec, 42, 3));
        assert_ne!(a, probe_image(&spec, 42, 4));
        assert_ne!(a, probe_image(&spec, 43, 3));
        for (c, chunk) in a.chunks(64).enumerate() {
            for v in chunk {
                let p = v * IMAGENET_STD[c] + IMAGENET_MEAN[c];
                assert!(
                    (-1e-6..=1.0 + 1e-6).contains(&p),
                    "pixel {p} outside [0, 1]"
                );
            }
        }
    }

    /// The final output keeps its purpose however many block outputs precede it; every output
    /// of a depth profile has its own, distinct from the pixels'.
    #[test]
    fn direction_streams_depend_on_the_output_not_its_position() {
        assert_eq!(directions_stream(0, 1), Stream::Directions as u64);
        for layers in [2, 12, 40] {
            assert_eq!(
                directions_stream(layers - 1, layers),
                directions_stream(0, 1),
                "{layers} layers"
            );
            let mut all: Vec<u64> = (0..layers).map(|o| directions_stream(o, layers)).collect();
            // Block b has the same stream in a 12- and a 40-layer profile.
            assert_eq!(all[0], Stream::Directions as u64 + 1);
            all.push(Stream::Pixels as u64);
            all.sort_unstable();
            all.dedup();
            assert_eq!(
                all.len(),
                layers + 1,
                "distinct purposes for {layers} layers"
            );
        }
    }

    #[test]
    fn orthonormal_columns() {
        let mut r = rng(1, 0, 1);
        let (m, k) = (50, 6);
        let q = orthonormal(m, k, &mut r);
        for a in 0..k {
            for b in 0..k {
                let dot: f64 = (0..m)
                    .map(|i| q[i * k + a] as f64 * q[i * k + b] as f64)
                    .sum();
                let want = if a == b { 1.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-5, "Q^T Q [{a},{b}] = {dot}");
            }
        }
    }
}
