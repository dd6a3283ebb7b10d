//! Exact Jacobian sketches by batched reverse-mode vector–Jacobian products.

use crate::probe::{self, ProbeSpec};
use crate::spectrum;
use bindscope_core::device::to_host_f32;
use bindscope_models::linearize::Linearization;
use burn::prelude::*;

/// Which sketch of the Jacobian to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Estimator {
    /// `Gᵀ·J`, `G ∈ R^{D×k}` standard Gaussian: k VJPs, one batched backward per chunk.
    #[default]
    OutputSketch,
    /// `J·V`, `V ∈ R^{M×k}` orthonormal (the paper's definition): all D rows of J by VJPs.
    InputSketch,
}

impl std::str::FromStr for Estimator {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "output-sketch" => Ok(Self::OutputSketch),
            "input-sketch" => Ok(Self::InputSketch),
            o => Err(format!(
                "unknown estimator '{o}': expected output-sketch or input-sketch"
            )),
        }
    }
}

impl std::fmt::Display for Estimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::OutputSketch => "output-sketch",
            Self::InputSketch => "input-sketch",
        })
    }
}

/// Why a JER computation failed.
#[derive(Debug, thiserror::Error)]
pub enum JerError {
    /// `k` outside `2..=D` (or `> M` for the input sketch).
    #[error(
        "--directions {k} is invalid for output {output} of dimension {dim}: need 2 ≤ k ≤ {dim}"
    )]
    Directions {
        /// Requested directions.
        k: usize,
        /// Output index (0 for the final output).
        output: usize,
        /// That output's dimension.
        dim: usize,
    },
    /// The Jacobian has NaN or infinite entries.
    #[error("non-finite Jacobian entries at probe image {image} (output {output}): stopping")]
    NonFinite {
        /// Probe image index.
        image: u64,
        /// Output index.
        output: usize,
    },
    /// The encoder returned no outputs or mismatching batch sizes.
    #[error("encoder output unusable: {0}")]
    Output(String),
    /// SVD failure.
    #[error("{0}")]
    Svd(String),
    /// The computation failed on its device (on a GPU, most often memory: see `--chunk`).
    #[error("{0} (--chunk bounds how many copies are differentiated at once)")]
    Device(#[from] bindscope_core::device::ReadError),
}

/// One VJP request: `vectorᵀ · J_output(x)`.
#[derive(Debug, Clone)]
pub struct Seed {
    /// Index into the encoder's outputs.
    pub output: usize,
    /// Cotangent, length = that output's dimension.
    pub vector: Vec<f32>,
}

/// Vector–Jacobian products `v_bᵀ J_{o_b}(x)` for every seed `b`, at one point `x`.
///
/// `f` maps a batch `[B, 3, H, W]` to its outputs (`[B, D_o]` each); it must treat batch rows
/// independently. Seeds are processed `chunk` at a time: the chunk's copies of `x` form one
/// batch, each copy's outputs are dotted with its seed (zero for the other outputs), and one
/// backward gives every copy's input gradient. Peak memory grows with `chunk`, not with the
/// number of seeds.
///
/// # Shapes
/// `x: [1, 3, H, W]` on an autodiff device; returns `[n_seeds, 3·H·W]` (no autodiff).
///
/// # Errors
/// [`JerError::Output`] when `f`'s outputs do not match the seeds.
pub fn batched_vjp(
    f: &dyn Fn(Tensor<4>) -> Vec<Tensor<2>>,
    x: &Tensor<4>,
    seeds: &[Seed],
    chunk: usize,
) -> Result<Tensor<2>, JerError> {
    let [_, c, h, w] = x.dims();
    let device = x.device();
    let inner = device.clone().without_autodiff();
    let mut rows: Vec<Tensor<2>> = Vec::with_capacity(seeds.len().div_ceil(chunk.max(1)));
    for group in seeds.chunks(chunk.max(1)) {
        let b = group.len();
        let xb = x.clone().detach().repeat_dim(0, b).require_grad();
        let outs = f(xb.clone());
        let mut loss: Option<Tensor<1>> = None;
        for (o, y) in outs.into_iter().enumerate() {
            let [yb, d] = y.dims();
            if yb != b {
                return Err(JerError::Output(format!(
                    "output {o} has batch {yb}, expected {b}"
                )));
            }
            if !group.iter().any(|s| s.output == o) {
                continue;
            }
            let mut cot = vec![0f32; b * d];
            for (i, s) in group.iter().enumerate().filter(|(_, s)| s.output == o) {
                if s.vector.len() != d {
                    return Err(JerError::Output(format!(
                        "seed for output {o} has length {}, output has {d}",
                        s.vector.len()
                    )));
                }
                cot[i * d..(i + 1) * d].copy_from_slice(&s.vector);
            }
            let cot = Tensor::<1>::from_floats(cot.as_slice(), &device).reshape([b, d]);
            let term = (y * cot).sum();
            loss = Some(match loss {
                Some(l) => l + term,
                None => term,
            });
        }
        let loss =
            loss.ok_or_else(|| JerError::Output("no seed refers to an existing output".into()))?;
        let grads = loss.backward();
        let g = xb
            .grad(&grads)
            .ok_or_else(|| JerError::Output("the outputs do not depend on the input".into()))?;
        rows.push(g.reshape([b, c * h * w]).to_device(&inner));
    }
    Ok(Tensor::cat(rows, 0))
}

/// Output sketch `Gᵀ·J_o(x)` for output `o`.
///
/// # Shapes
/// `x: [1, 3, H, W]` (autodiff device), `g: [D_o, k]` → `[k, M]` with `M = 3·H·W`.
///
/// # Errors
/// As [`batched_vjp`].
pub fn output_sketch(
    f: &dyn Fn(Tensor<4>) -> Vec<Tensor<2>>,
    x: &Tensor<4>,
    output: usize,
    g: Tensor<2>,
    chunk: usize,
) -> Result<Tensor<2>, JerError> {
    let [d, k] = g.dims();
    let g = to_host_f32(g)?;
    let seeds: Vec<Seed> = (0..k)
        .map(|j| Seed {
            output,
            vector: (0..d).map(|i| g[i * k + j]).collect(),
        })
        .collect();
    batched_vjp(f, x, &seeds, chunk)
}

/// Input sketch `J_o(x)·V` for output `o` of dimension `d`: the rows of `J_o` come from VJPs
/// with the output basis vectors, `chunk` at a time, each chunk multiplied by `V` right away so
/// the full Jacobian is never stored.
///
/// # Shapes
/// `x: [1, 3, H, W]` (autodiff device), `v: [M, k]` (any device) → `[D_o, k]`.
///
/// # Errors
/// As [`batched_vjp`].
pub fn input_sketch(
    f: &dyn Fn(Tensor<4>) -> Vec<Tensor<2>>,
    x: &Tensor<4>,
    output: usize,
    d: usize,
    v: Tensor<2>,
    chunk: usize,
) -> Result<Tensor<2>, JerError> {
    let inner = x.device().without_autodiff();
    let v = v.to_device(&inner);
    let mut parts = Vec::new();
    let rows: Vec<usize> = (0..d).collect();
    for block in rows.chunks(chunk.max(1)) {
        let seeds: Vec<Seed> = block
            .iter()
            .map(|&i| {
                let mut e = vec![0f32; d];
                e[i] = 1.0;
                Seed { output, vector: e }
            })
            .collect();
        let j = batched_vjp(f, x, &seeds, chunk)?; // [rows, M]
        parts.push(j.matmul(v.clone())); // [rows, k]
    }
    Ok(Tensor::cat(parts, 0))
}

/// Output sketch `Gᵀ·J_o(x)` from a [`Linearization`]: the forward pass is shared, the rows of
/// `Gᵀ` are carried through the hand-written backward `chunk` at a time. The same numbers as
/// [`output_sketch`] (to rounding), without its `k` forward passes.
///
/// # Shapes
/// `g: [D_o, k]` → `[k, M]`, on `g`'s device.
///
/// # Errors
/// [`JerError::Output`] when output `o` does not exist or has another dimension.
pub fn output_sketch_linearized(
    lin: &Linearization,
    output: usize,
    g: Tensor<2>,
    chunk: usize,
) -> Result<Tensor<2>, JerError> {
    let [_, k] = g.dims();
    let gt = g.transpose();
    let d = gt.dims()[1];
    let mut rows = Vec::with_capacity(k.div_ceil(chunk.max(1)));
    for start in (0..k).step_by(chunk.max(1)) {
        let end = (start + chunk.max(1)).min(k);
        let cot = gt.clone().slice([start..end, 0..d]);
        rows.push(
            lin.vjp(output, cot)
                .map_err(|e| JerError::Output(e.to_string()))?,
        );
    }
    Ok(Tensor::cat(rows, 0))
}

/// Input sketch `J_o(x)·V` from a [`Linearization`]: the rows of `J_o` by vector–Jacobian
/// products with the output basis vectors, `chunk` at a time over the one forward pass, each
/// chunk multiplied by `V` right away. The same numbers as [`input_sketch`] (to rounding).
///
/// # Shapes
/// `v: [M, k]` → `[D_o, k]`, on `v`'s device.
///
/// # Errors
/// As [`output_sketch_linearized`].
pub fn input_sketch_linearized(
    lin: &Linearization,
    output: usize,
    d: usize,
    v: Tensor<2>,
    chunk: usize,
) -> Result<Tensor<2>, JerError> {
    let device = v.device();
    let mut parts = Vec::with_capacity(d.div_ceil(chunk.max(1)));
    for start in (0..d).step_by(chunk.max(1)) {
        let end = (start + chunk.max(1)).min(d);
        let mut e = vec![0f32; (end - start) * d];
        for (r, i) in (start..end).enumerate() {
            e[r * d + i] = 1.0;
        }
        let basis = Tensor::<1>::from_floats(e.as_slice(), &device).reshape([end - start, d]);
        let j = lin
            .vjp(output, basis)
            .map_err(|e| JerError::Output(e.to_string()))?; // [rows, M]
        parts.push(j.matmul(v.clone()));
    }
    Ok(Tensor::cat(parts, 0))
}

/// How the vector–Jacobian products of the sketches are taken.
///
/// The two agree to rounding on the CPU. On a GPU backend burn's autodiff differentiates the
/// exact (erf) GELU with the derivative of its tanh approximation (burn-backend 0.22's default
/// `gelu_backward`), so there the autodiff sketch of a GELU model is off by up to ~1e-4
/// relative and the shared one is exact (4.8e-7 from torch.func on the `jer` fixture on wgpu).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backward {
    /// One forward pass at batch 1 and the hand-written backward of
    /// [`bindscope_models::linearize`] where the model offers it
    /// ([`bindscope_models::VisionEncoder::linearize`]), burn's autodiff over copies of the image
    /// otherwise.
    #[default]
    Shared,
    /// Always burn's autodiff over `chunk` copies of the image per backward.
    Autodiff,
}

impl std::str::FromStr for Backward {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "shared" => Ok(Self::Shared),
            "autodiff" => Ok(Self::Autodiff),
            o => Err(format!(
                "unknown backward '{o}': expected shared or autodiff"
            )),
        }
    }
}

impl std::fmt::Display for Backward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Shared => "shared",
            Self::Autodiff => "autodiff",
        })
    }
}

/// The spectrum of one output at one probe image.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct OutputSpectrum {
    /// Singular values of the sketch, non-increasing.
    pub sigma: Vec<f64>,
    /// (Σσ)²/Σσ².
    pub jer: f64,
    /// exp(H(σ/Σσ)).
    pub entropy_rank: f64,
}

impl OutputSpectrum {
    fn from_sigma(sigma: Vec<f64>) -> Self {
        Self {
            jer: spectrum::jer(&sigma),
            entropy_rank: spectrum::entropy_effective_rank(&sigma),
            sigma,
        }
    }
}

/// Computes the sketch spectra of every output of `f` at probe image `image`.
///
/// `dims[o]` is output `o`'s dimension: `[D]` for the final output alone, or one per block for a
/// depth profile (block 1, …, block L, the last being the final output). Directions for output
/// `o` come from the seeded stream `(seed, image, purpose)` with the purpose of
/// [`probe::directions_stream`]: `G_o` (D_o × k, Gaussian) for the output sketch, `V_o` (M × k,
/// orthonormal) for the input sketch. The purpose names the output (final, block `b`), so the
/// final output's spectrum is the same, to the bit, whether block outputs are computed beside
/// it or not, and image `i`'s does not depend on how many images a run has.
///
/// # Errors
/// [`JerError::Directions`] for k outside `2..=D_o`; [`JerError::NonFinite`] when the sketch
/// has NaN/inf entries; [`JerError::Output`] / [`JerError::Svd`] otherwise.
#[allow(clippy::too_many_arguments)]
pub fn jer_at(
    f: &dyn Fn(Tensor<4>) -> Vec<Tensor<2>>,
    spec: &ProbeSpec,
    dims: &[usize],
    k: usize,
    estimator: Estimator,
    seed: u64,
    image: u64,
    chunk: usize,
    device: &Device,
) -> Result<Vec<OutputSpectrum>, JerError> {
    jer_at_with(
        f, None, spec, dims, k, estimator, seed, image, chunk, device,
    )
}

/// A model's linearization at one image (`[1, 3, H, W]` on the autodiff device), `None` where
/// it has none ([`bindscope_models::VisionEncoder::linearize`]).
pub type Linearize<'a> = &'a dyn Fn(Tensor<4>) -> Option<Linearization>;

/// [`jer_at`], with the vector–Jacobian products taken over one shared forward pass
/// ([`output_sketch_linearized`], [`input_sketch_linearized`]) when `linearize` gives a
/// linearization of the probe image; `f` is differentiated with autodiff otherwise. The
/// numbers are the same either way, to rounding on the CPU ([`Backward`] for GPU backends).
///
/// # Errors
/// As [`jer_at`]; [`JerError::Output`] also when the linearization's outputs do not have the
/// dimensions `dims`.
#[allow(clippy::too_many_arguments)]
pub fn jer_at_with(
    f: &dyn Fn(Tensor<4>) -> Vec<Tensor<2>>,
    linearize: Option<Linearize<'_>>,
    spec: &ProbeSpec,
    dims: &[usize],
    k: usize,
    estimator: Estimator,
    seed: u64,
    image: u64,
    chunk: usize,
    device: &Device,
) -> Result<Vec<OutputSpectrum>, JerError> {
    for (o, &d) in dims.iter().enumerate() {
        if k < 2 || k > d || k > spec.dim() {
            return Err(JerError::Directions {
                k,
                output: o,
                dim: d.min(spec.dim()),
            });
        }
    }
    let ad = device.clone().autodiff();
    let pixels = probe::probe_image(spec, seed, image);
    let x =
        Tensor::<1>::from_floats(pixels.as_slice(), &ad).reshape([1, 3, spec.height, spec.width]);
    let m = spec.dim();
    let inner = device.clone().without_autodiff();
    let lin = linearize.and_then(|l| l(x.clone()));
    if let Some(lin) = &lin {
        let got: Vec<usize> = lin.outputs().iter().map(|y| y.dims()[1]).collect();
        if got != dims {
            return Err(JerError::Output(format!(
                "the linearized encoder has outputs of dimensions {got:?}, expected {dims:?}"
            )));
        }
    }
    let mut out = Vec::with_capacity(dims.len());
    for (o, &d) in dims.iter().enumerate() {
        let mut r = probe::rng(seed, image, probe::directions_stream(o, dims.len()));
        let (sketch, rows, cols) = match estimator {
            Estimator::OutputSketch => {
                let g = Tensor::<1>::from_floats(probe::gaussian(d, k, &mut r).as_slice(), &inner)
                    .reshape([d, k]);
                let s = match &lin {
                    Some(lin) => output_sketch_linearized(lin, o, g, chunk)?,
                    None => output_sketch(f, &x, o, g, chunk)?,
                };
                (s, k, m)
            }
            Estimator::InputSketch => {
                let v =
                    Tensor::<1>::from_floats(probe::orthonormal(m, k, &mut r).as_slice(), &inner)
                        .reshape([m, k]);
                let s = match &lin {
                    Some(lin) => input_sketch_linearized(lin, o, d, v, chunk)?,
                    None => input_sketch(f, &x, o, d, v, chunk)?,
                };
                (s, d, k)
            }
        };
        let s = to_host_f32(sketch)?;
        if s.iter().any(|v| !v.is_finite()) {
            return Err(JerError::NonFinite { image, output: o });
        }
        out.push(OutputSpectrum::from_sigma(
            spectrum::singular_values(&s, rows, cols).map_err(JerError::Svd)?,
        ));
    }
    Ok(out)
}
