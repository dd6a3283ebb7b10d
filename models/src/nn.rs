//! The shared model kernel: what every architecture file builds on.
//!
//! - [`Activation`]: the one enum for transformers' `hidden_act` / `pooler_act` names;
//! - layer builders ([`linear`], [`layer_norm`], [`rms_norm`], [`embedding`]) that take the
//!   checkpoint's epsilon and an explicit initializer;
//! - position-embedding resampling as transformers' `interpolate_pos_encoding` does it
//!   ([`interpolate_pos_grid`], [`interpolate_square_grid`], [`bicubic_aa_weights`]);
//! - token pooling ([`token`], [`mean_patch`], [`gather_tokens`]) and the block-stack runner
//!   that collects hidden states and attentions ([`run_stack`]);
//! - load helpers: the one `model_type` reader ([`model_type`]), size and type checks, checkpoint
//!   shapes, scalars stored beside the weights, and the strict load with a family's benign keys
//!   ([`load_module`]);
//! - float dtypes ([`to_dtype`], [`to_f32`]): a model loaded with its checkpoint's f16 / bf16
//!   (`LoadOptions::keep_dtype`) computes in that dtype; its float inputs are cast to the dtype
//!   of its weights at the model's entry and its outputs handed back in f32.
//!
//! The attention core (heads, masks, grouped-query attention, rotary embeddings, KV cache) is
//! [`crate::attention`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bindscope_core::{Checkpoint, LoadOptions, load_strict};
use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn::module::Module;
use burn::nn::{
    Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig,
    RmsNorm, RmsNormConfig,
};
use burn::prelude::*;
use burn::tensor::activation;
use burn::tensor::module::interpolate;
use burn::tensor::ops::{InterpolateMode, InterpolateOptions};
use burn::tensor::{DType, FloatDType, TensorData};
use serde::Deserialize;

use crate::{ForwardOptions, ModelError, vmath};

// ---------------------------------------------------------------------------------------------
// Activation
// ---------------------------------------------------------------------------------------------

/// The activations transformers names in `hidden_act` / `pooler_act` (its `ACT2FN` table) that
/// this crate implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `"quick_gelu"`: `x · sigmoid(1.702 x)` (OpenAI CLIP).
    QuickGelu,
    /// `"gelu"`: exact, erf-based GELU.
    Gelu,
    /// `"gelu_new"`, `"gelu_pytorch_tanh"`: tanh approximation of GELU.
    GeluTanh,
    /// `"relu"`.
    Relu,
    /// `"silu"` / `"swish"`: `x · sigmoid(x)` (Llama, Qwen MLPs; DINOv2's SwiGLU).
    Silu,
    /// `"tanh"` (poolers).
    Tanh,
}

/// Every name [`Activation::from_hf`] accepts, for error messages.
pub const ACTIVATION_NAMES: &str =
    "quick_gelu, gelu, gelu_new, gelu_pytorch_tanh, relu, silu, swish, tanh";

impl Activation {
    /// Parses a transformers activation name; `None` when unsupported.
    pub fn from_hf(name: &str) -> Option<Self> {
        match name {
            "quick_gelu" => Some(Self::QuickGelu),
            "gelu" => Some(Self::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" => Some(Self::GeluTanh),
            "relu" => Some(Self::Relu),
            "silu" | "swish" => Some(Self::Silu),
            "tanh" => Some(Self::Tanh),
            _ => None,
        }
    }

    /// Parses `name`, the value of config field `field` in `file`.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming the field, the value and every supported name.
    pub fn parse(name: &str, field: &str, file: &Path) -> Result<Self, ModelError> {
        Self::from_hf(name).ok_or_else(|| ModelError::Unsupported {
            file: file.display().to_string(),
            message: format!("{field} '{name}' is not implemented (supported: {ACTIVATION_NAMES})"),
        })
    }

    /// Applies the activation element-wise.
    ///
    /// On the CPU (burn-flex, f32) the activation runs in one pass over all of rayon's threads
    /// (burn-flex's element-wise ops run on one thread). Without autodiff that pass writes the
    /// values, in place when `x` is not shared. Under autodiff it writes the values `y` and the
    /// derivatives `d = act'(x)` of the same elements, and the result is `x·d + (y − x·d)` with
    /// `d` and `y − x·d` constants: the value is `y` (up to one rounding of `x·d + c`) and the
    /// backward pass multiplies by `d` instead of evaluating burn's activation backward on one
    /// thread. A non-finite input gives NaN there. Every other tensor (another dtype or device)
    /// takes burn's activation ops.
    pub fn forward<const D: usize>(self, x: Tensor<D>) -> Tensor<D> {
        let x = if x.dtype() != DType::F32 {
            x
        } else if x.is_autodiff() {
            match cpu_value_and_derivative(&x, self.pair_kernel()) {
                Some((y, _)) => return y,
                None => x,
            }
        } else {
            match cpu_map(x, self.map_kernel()) {
                Ok(y) => return y,
                Err(x) => *x,
            }
        };
        match self {
            Self::QuickGelu => x.clone() * activation::sigmoid(x * 1.702),
            Self::Gelu => activation::gelu(x),
            Self::GeluTanh => activation::gelu_approximate(x),
            Self::Relu => activation::relu(x),
            Self::Silu => activation::silu(x),
            Self::Tanh => activation::tanh(x),
        }
    }

    /// `(act(u), act'(u))`, element-wise: the value as [`Self::forward`] gives it (tracked
    /// when `u` is) and the derivative PyTorch's backward uses, as a constant. On the CPU
    /// (burn-flex, f32) both come from one parallel pass; elsewhere from burn's tensor ops.
    ///
    /// # Shapes
    /// `u: [...]` → two tensors of `u`'s shape.
    pub fn forward_with_derivative<const D: usize>(self, u: Tensor<D>) -> (Tensor<D>, Tensor<D>) {
        if u.dtype() == DType::F32
            && let Some(pair) = cpu_value_and_derivative(&u, self.pair_kernel())
        {
            return pair;
        }
        let (y, d) = match self {
            Self::Gelu => {
                // Φ(u) + u φ(u)
                let cdf = ((u.clone() * std::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5;
                let pdf = (u.clone().square() * -0.5).exp()
                    * (0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2);
                (u.clone() * cdf.clone(), cdf + u * pdf)
            }
            Self::QuickGelu => {
                let s = activation::sigmoid(u.clone() * 1.702);
                let grad = s.clone() + u.clone() * s.clone() * (s.clone().neg() + 1.0) * 1.702;
                (u * s, grad)
            }
            Self::GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                let u3 = u.clone().powi_scalar(3);
                let t = ((u.clone() + u3 * 0.044715) * c).tanh();
                let dt = (t.clone().square().neg() + 1.0)
                    * ((u.clone().square() * (3.0 * 0.044715) + 1.0) * c);
                let y = u.clone() * (t.clone() + 1.0) * 0.5;
                (y, (t + 1.0) * 0.5 + u * dt * 0.5)
            }
            Self::Relu => {
                let pos = u.clone().greater_elem(0.0).float();
                (u * pos.clone(), pos)
            }
            Self::Silu => {
                let s = activation::sigmoid(u.clone());
                let grad = s.clone() * (u.clone() * (s.clone().neg() + 1.0) + 1.0);
                (u * s, grad)
            }
            Self::Tanh => {
                let t = u.tanh();
                (t.clone(), t.square().neg() + 1.0)
            }
        };
        (y, d.detach())
    }

    /// The activation applied in place to a slice of f32, in one vectorised loop
    /// ([`vmath::sigmoid`]; tanh-GELU as `x·σ(2u)`, which is `x·(1 + tanh u)/2`; the exact GELU
    /// with [`vmath::erf`], PyTorch's CPU formula), and with libm's `tanhf` for `tanh`.
    fn map_kernel(self) -> fn(&mut [f32]) {
        macro_rules! map {
            ($f:expr) => {
                |xs: &mut [f32]| vmath::vectorized(|| xs.iter_mut().for_each(|x| *x = $f(*x)))
            };
        }
        match self {
            Self::QuickGelu => map!(|x: f32| x * vmath::sigmoid(x * 1.702)),
            Self::Gelu => map!(|x: f32| 0.5 * x * (1.0 + vmath::erf(x / std::f32::consts::SQRT_2))),
            Self::GeluTanh => map!(|x: f32| x * vmath::sigmoid(2.0 * gelu_tanh_u(x))),
            Self::Relu => map!(|x: f32| if x.is_nan() || x > 0.0 { x } else { 0.0 }),
            Self::Silu => map!(|x: f32| x * vmath::sigmoid(x)),
            Self::Tanh => map!(f32::tanh),
        }
    }

    /// The activation and its derivative over a slice (PyTorch's backward formulas:
    /// `Φ(x) + x φ(x)` for GELU, `s + 1.702 x s (1 − s)` for quick_gelu, `s (1 + x (1 − s))` for
    /// SiLU, `1 − y²` for tanh, the tanh-GELU's chain rule with `(1 + t)/2 = σ(2u)`, ReLU's step
    /// with 0 at 0): `(y[i], d[i]) = (act(x[i]), act'(x[i]))`, vectorised as
    /// [`Self::map_kernel`].
    fn pair_kernel(self) -> PairKernel {
        macro_rules! pair {
            ($f:expr) => {
                |xs: &[f32], ys: &mut [f32], ds: &mut [f32]| {
                    vmath::vectorized(|| {
                        for ((&x, y), d) in xs.iter().zip(ys.iter_mut()).zip(ds.iter_mut()) {
                            (*y, *d) = $f(x);
                        }
                    })
                }
            };
        }
        match self {
            Self::QuickGelu => pair!(|x: f32| {
                let s = vmath::sigmoid(x * 1.702);
                (x * s, s + 1.702 * x * s * (1.0 - s))
            }),
            Self::Gelu => pair!(|x: f32| {
                /// 1/√(2π).
                const INV_SQRT_2PI: f32 = 0.398_942_3;
                let cdf = 0.5 * (1.0 + vmath::erf(x / std::f32::consts::SQRT_2));
                let pdf = INV_SQRT_2PI * vmath::exp_nonpositive(-0.5 * x * x);
                // x·cdf rounds as burn's 0.5·x·(1 + erf): halving is exact.
                (x * cdf, cdf + x * pdf)
            }),
            Self::GeluTanh => pair!(|x: f32| {
                // (1 + t)/2 = σ(2u) and 1 − t² = 4 σ(2u) (1 − σ(2u)).
                let s = vmath::sigmoid(2.0 * gelu_tanh_u(x));
                let du = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
                (x * s, s + 2.0 * x * s * (1.0 - s) * du)
            }),
            Self::Relu => pair!(|x: f32| {
                if x.is_nan() || x > 0.0 {
                    (x, 1.0)
                } else {
                    (0.0, 0.0)
                }
            }),
            Self::Silu => pair!(|x: f32| {
                let s = vmath::sigmoid(x);
                (x * s, s * (1.0 + x * (1.0 - s)))
            }),
            Self::Tanh => pair!(|x: f32| {
                let y = x.tanh();
                (y, 1.0 - y * y)
            }),
        }
    }
}

/// A slice kernel of [`Activation::pair_kernel`]: `(x, y, d)`.
type PairKernel = fn(&[f32], &mut [f32], &mut [f32]);

/// √(2/π), as burn's `gelu_approximate` has it (an f64 constant, applied in f32).
const SQRT_2_OVER_PI: f32 =
    (std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as f32;

/// The tanh-GELU's argument `√(2/π) (x + 0.044715 x³)`, in burn's order of operations (the
/// cube as two products, as PyTorch's vectorised kernel computes it).
#[inline(always)]
fn gelu_tanh_u(x: f32) -> f32 {
    (x + x * x * x * 0.044715) * SQRT_2_OVER_PI
}

/// Elements per rayon task of the CPU element-wise passes.
const MAP_CHUNK: usize = 1 << 14;

/// The f32 burn-flex storage of `t` as one contiguous slice (a copy when it is a strided
/// view), with its shape.
fn dense_f32(t: FlexTensor) -> (FlexTensor, usize, burn::tensor::Shape) {
    let t = if t.is_contiguous() {
        t
    } else {
        t.to_contiguous()
    };
    let shape = t.layout().shape().clone();
    let start = t.layout().start_offset();
    (t, start, shape)
}

/// The in-place slice kernel `f` applied to every element of an f32 burn-flex tensor not
/// tracked by autodiff, split over rayon's threads, in place when the storage is not shared;
/// `Err(x)`, untouched, for any other tensor.
fn cpu_map<const D: usize>(x: Tensor<D>, f: fn(&mut [f32])) -> Result<Tensor<D>, Box<Tensor<D>>> {
    use rayon::prelude::*;
    let Ok(mut t) = x.clone().try_into_primitive::<Flex>() else {
        return Err(Box::new(x));
    };
    drop(x);
    let n = t.layout().num_elements();
    if t.is_contiguous()
        && t.layout().start_offset() == 0
        && let Some(data) = t.try_storage_mut::<f32>()
    {
        data[..n].par_chunks_mut(MAP_CHUNK).for_each(f);
        return Ok(Tensor::from_primitive::<Flex>(t));
    }
    let (t, start, shape) = dense_f32(t);
    let src = &t.storage::<f32>()[start..start + n];
    let mut out = src.to_vec();
    out.par_chunks_mut(MAP_CHUNK).for_each(f);
    Ok(Tensor::from_primitive::<Flex>(FlexTensor::from_data(
        TensorData::new(out, shape),
    )))
}

/// The activation values and derivatives `(y, d)` of an f32 burn-flex tensor from the slice
/// kernel `f`, in one rayon-parallel pass; `None` when `x` (its autodiff-free inner tensor) is
/// not on burn-flex. With `linearized`, the pair returned is `(d, y − x·d)` instead.
fn cpu_pair<const D: usize>(
    x: &Tensor<D>,
    f: PairKernel,
    linearized: bool,
) -> Option<(Tensor<D>, Tensor<D>)> {
    use rayon::prelude::*;
    let t = x.clone().inner().try_into_primitive::<Flex>().ok()?;
    let n = t.layout().num_elements();
    let (t, start, shape) = dense_f32(t);
    let src = &t.storage::<f32>()[start..start + n];
    let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
    a.par_chunks_mut(MAP_CHUNK)
        .zip(b.par_chunks_mut(MAP_CHUNK))
        .zip(src.par_chunks(MAP_CHUNK))
        .for_each(|((a, b), x)| {
            f(x, a, b);
            if linearized {
                for ((a, b), &x) in a.iter_mut().zip(b.iter_mut()).zip(x) {
                    (*a, *b) = (*b, *a - x * *b);
                }
            }
        });
    let tensor = |v: Vec<f32>| {
        Tensor::<D>::from_primitive::<Flex>(FlexTensor::from_data(TensorData::new(
            v,
            shape.clone(),
        )))
    };
    Some((tensor(a), tensor(b)))
}

/// `(act(x), act'(x))` for an f32 tensor on burn-flex from one parallel pass; `None` on any
/// other device. Under autodiff the value is `x·d + c` with `d = act'(x)` and
/// `c = act(x) − x·d` held as constants: the same value up to one rounding, and a backward that
/// is one product.
fn cpu_value_and_derivative<const D: usize>(
    x: &Tensor<D>,
    f: PairKernel,
) -> Option<(Tensor<D>, Tensor<D>)> {
    if !x.is_autodiff() {
        return cpu_pair(x, f, false);
    }
    let (d, c) = cpu_pair(x, f, true)?;
    Some((x.clone() * d.clone() + c, d))
}

// ---------------------------------------------------------------------------------------------
// Float dtypes
// ---------------------------------------------------------------------------------------------

/// `x` in the float dtype `dtype` (returned as is when it already is): how a model brings a
/// float input (pixel values, a hidden state handed back to a readout) to the dtype of its
/// weights, as transformers casts `pixel_values` to the patch embedding's dtype.
pub fn to_dtype<const D: usize>(x: Tensor<D>, dtype: DType) -> Tensor<D> {
    if x.dtype() == dtype {
        x
    } else {
        x.cast(FloatDType::from(dtype))
    }
}

/// `x` in f32 (as is when it already is): every model hands its outputs back in f32, whatever
/// dtype it computes in.
pub fn to_f32<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    to_dtype(x, DType::F32)
}

// ---------------------------------------------------------------------------------------------
// Layer builders
// ---------------------------------------------------------------------------------------------

/// `nn.Linear(d_in, d_out, bias)` with the given initializer (`Initializer::Zeros` for a
/// module whose weights come from a checkpoint). Weight layout `[d_in, d_out]` (burn's; the
/// checkpoint's `[d_out, d_in]` is transposed on load).
pub fn linear(
    d_in: usize,
    d_out: usize,
    bias: bool,
    init: &Initializer,
    device: &Device,
) -> Linear {
    LinearConfig::new(d_in, d_out)
        .with_bias(bias)
        .with_initializer(init.clone())
        .init(device)
}

/// `lin(x)` for `x: [..., d_in]` computed as one `[rows, d_in] @ [d_in, d_out]` product over
/// the flattened leading dims, then reshaped back to `[..., d_out]`. The same numbers as
/// `lin.forward(x)` up to the summation order; faster under autodiff, where burn's batched
/// form broadcasts the weight to `[batch, d_in, d_out]` and its backward materialises and
/// reduces one weight-gradient per batch entry.
pub fn linear_rows<const D: usize>(lin: &Linear, x: Tensor<D>) -> Tensor<D> {
    let mut dims = x.dims();
    let d_in = dims[D - 1];
    let rows = dims[..D - 1].iter().product::<usize>();
    let x = x.reshape([rows, d_in]);
    let y = if rows <= FEW_ROWS {
        let y = matmul_2d(x, lin.weight.val());
        match &lin.bias {
            Some(b) => y + b.val().unsqueeze(),
            None => y,
        }
    } else {
        lin.forward(x)
    };
    dims[D - 1] = y.dims()[1];
    y.reshape(dims)
}

/// Row counts up to which [`matmul_2d`] hands a CPU f32 product to faer: burn-flex's gemm runs
/// a product of one or a few rows (a decoding step's projections and LM head) on one core.
pub const FEW_ROWS: usize = 16;

/// `lhs @ rhs` for `lhs: [m, k]`, `rhs: [k, n]` → `[m, n]`. On the CPU (burn-flex, f32, no
/// autodiff) with `m ≤` [`FEW_ROWS`] the product runs in faer over all of rayon's threads,
/// reading both operands in place (any positive strides, e.g. a transposed weight): burn-flex's
/// gemm keeps such matrix–vector products on one core. Elsewhere — more rows, another dtype or
/// device, a tensor tracked by autodiff — it is `lhs.matmul(rhs)`. The two paths agree up to the
/// summation order.
///
/// # Panics
/// When the inner dimensions differ (as `Tensor::matmul`).
pub fn matmul_2d(lhs: Tensor<2>, rhs: Tensor<2>) -> Tensor<2> {
    let ([m, k], [k2, n]) = (lhs.dims(), rhs.dims());
    assert_eq!(k, k2, "matmul_2d: [{m}, {k}] @ [{k2}, {n}]");
    if m <= FEW_ROWS
        && lhs.dtype() == DType::F32
        && rhs.dtype() == DType::F32
        && let (Ok(a), Ok(b)) = (
            lhs.clone().try_into_primitive::<Flex>(),
            rhs.clone().try_into_primitive::<Flex>(),
        )
        && let Some(out) = few_rows_product(&a, &b)
    {
        return Tensor::from_primitive::<Flex>(out);
    }
    lhs.matmul(rhs)
}

/// The f32 storage, start offset, dims and strides of a rank-`N` burn-flex tensor whose every
/// element lies in its storage: `None` for another rank, a negative stride (a flipped view), an
/// empty dimension, or a layout that would read past the storage. What makes an unchecked
/// strided read of it (a faer view, the CPU attention kernel's blocks) sound.
pub(crate) fn strided_f32<const N: usize>(t: &FlexTensor) -> Option<Strided<'_, N>> {
    let layout = t.layout();
    let shape = layout.shape();
    if shape.num_dims() != N || layout.strides().iter().any(|&s| s < 0) {
        return None;
    }
    let dims: [usize; N] = std::array::from_fn(|i| shape[i]);
    let strides: [usize; N] = std::array::from_fn(|i| layout.strides()[i] as usize);
    let data: &[f32] = t.storage();
    let start = layout.start_offset();
    let last = start
        + dims
            .iter()
            .zip(&strides)
            .map(|(&d, &s)| d.saturating_sub(1) * s)
            .sum::<usize>();
    if dims.contains(&0) || last >= data.len() {
        return None;
    }
    Some(Strided {
        data,
        start,
        dims,
        strides,
    })
}

/// A checked strided f32 layout ([`strided_f32`]): element `(i₀, …)` is at
/// `data[start + Σ iₖ·strides[k]]`, every one of them within `data`.
pub(crate) struct Strided<'a, const N: usize> {
    /// The tensor's whole storage.
    pub data: &'a [f32],
    /// Offset of element `(0, …, 0)`.
    pub start: usize,
    /// Extent of each dimension, all nonzero.
    pub dims: [usize; N],
    /// Step of each dimension, in elements.
    pub strides: [usize; N],
}

/// A read-only faer view of a rank-2 f32 burn-flex tensor, `None` where [`strided_f32`] is.
fn faer_view(t: &FlexTensor) -> Option<faer::MatRef<'_, f32>> {
    let Strided {
        data,
        start,
        dims: [rows, cols],
        strides: [rs, cs],
    } = strided_f32::<2>(t)?;
    // SAFETY: every element `start + i·rs + j·cs` (i < rows, j < cols) lies in `data`, checked
    // by `strided_f32` against the largest one; the view borrows `t`, which owns the storage.
    Some(unsafe {
        faer::MatRef::from_raw_parts(
            data.as_ptr().add(start),
            rows,
            cols,
            rs as isize,
            cs as isize,
        )
    })
}

fn few_rows_product(a: &FlexTensor, b: &FlexTensor) -> Option<FlexTensor> {
    let (lhs, rhs) = (faer_view(a)?, faer_view(b)?);
    let (m, n) = (lhs.nrows(), rhs.ncols());
    let mut out = vec![0f32; m * n];
    faer::linalg::matmul::matmul(
        faer::MatMut::from_row_major_slice_mut(&mut out, m, n),
        faer::Accum::Replace,
        lhs,
        rhs,
        1.0f32,
        faer::Par::rayon(0),
    );
    Some(FlexTensor::from_data(TensorData::new(out, [m, n])))
}

/// `nn.LayerNorm(d, eps)`: γ = 1, β = 0 (checkpoint values replace them).
pub fn layer_norm(d: usize, eps: f64, device: &Device) -> LayerNorm {
    LayerNormConfig::new(d).with_epsilon(eps).init(device)
}

/// The input gradient of a softmax over the last axis, scaled: `(g − Σ_j g_j p_j) ⊙ p · scale`
/// for the cotangent `g` of `p = softmax(s · scale)`: `g` times the softmax Jacobian
/// `diag(p) − p pᵀ`, times `scale` (the attention scores' VJP of the shared JER backward).
///
/// On the CPU (burn-flex, f32, no autodiff) the rows run in one rayon-parallel pass, in place in
/// `g` when it is not shared; elsewhere it is burn's element-wise ops (about five passes over
/// `g`, on one thread on burn-flex).
///
/// # Shapes
/// `g: [..., T]`, `p`: the same shape, or the same with a leading 1 (one set of probabilities
/// for every cotangent of a batch) → `g`'s shape.
pub fn softmax_vjp<const D: usize>(g: Tensor<D>, p: Tensor<D>, scale: f64) -> Tensor<D> {
    let (gd, pd) = (g.dims(), p.dims());
    let broadcast = pd[0] == 1 && gd[1..] == pd[1..];
    if (gd == pd || broadcast)
        && g.dtype() == DType::F32
        && p.dtype() == DType::F32
        && let Ok(pt) = p.clone().try_into_primitive::<Flex>()
    {
        match cpu_softmax_vjp(g, &pt, scale as f32) {
            Ok(out) => return out,
            Err(g) => return softmax_vjp_ops(*g, p, scale),
        }
    }
    softmax_vjp_ops(g, p, scale)
}

fn softmax_vjp_ops<const D: usize>(g: Tensor<D>, p: Tensor<D>, scale: f64) -> Tensor<D> {
    let row = (g.clone() * p.clone()).sum_dim(D - 1);
    (g - row) * p * scale
}

/// [`softmax_vjp`]'s CPU pass; `Err(g)` when `g` is not an f32 burn-flex tensor.
fn cpu_softmax_vjp<const D: usize>(
    g: Tensor<D>,
    p: &FlexTensor,
    scale: f32,
) -> Result<Tensor<D>, Box<Tensor<D>>> {
    use rayon::prelude::*;
    let Ok(gt) = g.clone().try_into_primitive::<Flex>() else {
        return Err(Box::new(g));
    };
    drop(g);
    let t = gt.layout().shape()[D - 1];
    let (pt, p_start, _) = dense_f32(p.clone());
    let p_len = pt.layout().num_elements();
    let probs = &pt.storage::<f32>()[p_start..p_start + p_len];
    let row = |g: &mut [f32], i: usize| {
        let p = &probs[(i * t) % p_len..][..t];
        let dot: f32 = g.iter().zip(p).map(|(a, b)| a * b).sum();
        for (g, &p) in g.iter_mut().zip(p) {
            *g = (*g - dot) * p * scale;
        }
    };
    let (mut gt, g_start, shape) = dense_f32(gt);
    let n = gt.layout().num_elements();
    if g_start == 0
        && let Some(data) = gt.try_storage_mut::<f32>()
    {
        data[..n]
            .par_chunks_mut(t)
            .enumerate()
            .for_each(|(i, g)| row(g, i));
        return Ok(Tensor::from_primitive::<Flex>(gt));
    }
    let mut out = gt.storage::<f32>()[g_start..g_start + n].to_vec();
    out.par_chunks_mut(t)
        .enumerate()
        .for_each(|(i, g)| row(g, i));
    Ok(Tensor::from_primitive::<Flex>(FlexTensor::from_data(
        TensorData::new(out, shape),
    )))
}

/// RMSNorm `x / sqrt(mean(x²) + eps) · γ` (transformers `LlamaRMSNorm`), γ = 1.
pub fn rms_norm(d: usize, eps: f64, device: &Device) -> RmsNorm {
    RmsNormConfig::new(d).with_epsilon(eps).init(device)
}

/// RMSNorm applied as transformers' `LlamaRMSNorm.forward` computes it: the mean of squares and
/// the normalisation in f32, the result cast back to the input's dtype, then multiplied by γ
/// (burn's `RmsNorm::forward` divides in the input's dtype, which differs in f16 / bf16).
///
/// # Shapes
/// `x: [..., d]` → `[..., d]`, `d` = the norm's width.
pub fn rms_norm_hf<const D: usize>(norm: &RmsNorm, x: Tensor<D>) -> Tensor<D> {
    let dtype = x.dtype();
    let xf = to_f32(x);
    let var = xf.clone().square().mean_dim(D - 1);
    let normed = xf * (var + norm.epsilon).sqrt().recip();
    to_dtype(normed, dtype) * norm.gamma.val().unsqueeze()
}

/// `nn.Embedding(n, d)`, zero-initialised (the table comes from the checkpoint).
pub fn embedding(n: usize, d: usize, device: &Device) -> Embedding {
    EmbeddingConfig::new(n, d)
        .with_initializer(Initializer::Zeros)
        .init(device)
}

// ---------------------------------------------------------------------------------------------
// Position-embedding resampling
// ---------------------------------------------------------------------------------------------

/// One axis of torch's *antialiased* bicubic resampling (`_upsample_bicubic2d_aa`,
/// `align_corners=False`) as a dense `[out_size, in_size]` row-major matrix: PIL-style cubic
/// with `A = -0.5`, support widened by the scale when downsampling, weights normalized to sum 1.
/// burn's `interpolate` has no antialiased mode; the plain bicubic goes through it.
pub fn bicubic_aa_weights(in_size: usize, out_size: usize) -> Vec<f32> {
    let mut w = vec![0f32; out_size * in_size];
    let scale = in_size as f64 / out_size as f64;
    let a = -0.5f64;
    let filter = |x: f64| {
        let x = x.abs();
        if x < 1.0 {
            ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        } else if x < 2.0 {
            ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
        } else {
            0.0
        }
    };
    let support = if scale >= 1.0 { 2.0 * scale } else { 2.0 };
    let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    for i in 0..out_size {
        let center = scale * (i as f64 + 0.5);
        let xmin = ((center - support + 0.5) as i64).max(0);
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64);
        let ws: Vec<f64> = (xmin..xmax)
            .map(|j| filter((j as f64 - center + 0.5) * invscale))
            .collect();
        let total: f64 = ws.iter().sum();
        for (k, j) in (xmin..xmax).enumerate() {
            let v = if total != 0.0 { ws[k] / total } else { ws[k] };
            w[i * in_size + j as usize] = v as f32;
        }
    }
    w
}

/// Resamples a grid of position embeddings the way transformers' `interpolate_pos_encoding`
/// does: `F.interpolate(mode="bicubic", size=dst, align_corners=False)` (Keys cubic `A = -0.75`,
/// through burn's `interpolate`), or with `antialias=True` (`Dinov2WithRegistersModel`) as two
/// small matrix products of [`bicubic_aa_weights`]. Shared by every ViT-like model here.
/// Computed in f32 for any dtype of `grid` (transformers casts to float32 for it), returned in
/// the dtype of `grid`.
///
/// # Shapes
/// `grid: [1, Gh·Gw, D]` (row-major grid) → `[1, h·w, D]`.
pub fn interpolate_pos_grid(
    grid: Tensor<3>,
    src: [usize; 2],
    dst: [usize; 2],
    antialias: bool,
) -> Tensor<3> {
    let [_, _, d] = grid.dims();
    let [gh, gw] = src;
    let [h, w] = dst;
    if src == dst {
        return grid;
    }
    // In f32 whatever the weights' dtype, as transformers does, then back.
    let dtype = grid.dtype();
    let g = to_f32(grid).reshape([gh, gw, d]).permute([2, 0, 1]); // [D, Gh, Gw]
    let out = if antialias {
        let device = g.device();
        let wh =
            Tensor::<2>::from_data(TensorData::new(bicubic_aa_weights(gh, h), [h, gh]), &device)
                .reshape([1, h, gh]);
        let wwt =
            Tensor::<2>::from_data(TensorData::new(bicubic_aa_weights(gw, w), [w, gw]), &device)
                .transpose()
                .reshape([1, gw, w]);
        wh.matmul(g).matmul(wwt) // [D, h, w]
    } else {
        let opts = InterpolateOptions::new(InterpolateMode::Bicubic)
            .with_align_corners(false)
            .with_output_size([h, w]);
        interpolate(g.unsqueeze_dim::<4>(0), opts).reshape([d, h, w])
    };
    to_dtype(out.permute([1, 2, 0]).reshape([1, h * w, d]), dtype)
}

/// Resamples a square grid of position embeddings `[g·g, D]` to `[gh·gw, D]` (bicubic,
/// `align_corners=False`, no antialiasing: CLIP's and SigLIP's `interpolate_pos_encoding`),
/// through [`interpolate_pos_grid`].
pub fn interpolate_square_grid(pos: Tensor<2>, grid: usize, target: [usize; 2]) -> Tensor<2> {
    let [_, d] = pos.dims();
    interpolate_pos_grid(pos.unsqueeze_dim(0), [grid, grid], target, false)
        .reshape([target[0] * target[1], d])
}

// ---------------------------------------------------------------------------------------------
// Token pooling and the block stack
// ---------------------------------------------------------------------------------------------

/// Mean of the tokens after the first `prefix`: `[N, T, D]` → `[N, D]`.
pub fn mean_patch(x: Tensor<3>, prefix: usize) -> Tensor<2> {
    let [n, t, d] = x.dims();
    x.slice([0..n, prefix..t, 0..d]).mean_dim(1).reshape([n, d])
}

/// `x ⊙ γ` with a per-channel layer scale `γ: [D]` broadcast over `[N, T, D]`; `x` without one.
pub fn layer_scale(x: Tensor<3>, gamma: &Option<burn::module::Param<Tensor<1>>>) -> Tensor<3> {
    match gamma {
        Some(g) => {
            let d = g.dims()[0];
            x * g.val().reshape([1, 1, d])
        }
        None => x,
    }
}

/// The number of blocks a checkpoint holds under `prefix` (`blocks.` for `blocks.0.…`,
/// `blocks.1.…`): one more than the largest index, 0 without any.
pub fn count_blocks(shapes: &BTreeMap<String, Vec<usize>>, prefix: &str) -> usize {
    shapes
        .keys()
        .filter_map(|k| {
            k.strip_prefix(prefix)?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max()
        .map_or(0, |n| n + 1)
}

/// Token `i` of every sequence: `[N, T, D]` → `[N, D]`.
pub fn token(x: Tensor<3>, i: usize) -> Tensor<2> {
    let [n, _, d] = x.dims();
    x.slice([0..n, i..i + 1, 0..d]).reshape([n, d])
}

/// Picks `x[n, pos[n], :]`: `[N, T, D]` → `[N, D]` (`pos.len() == N`).
pub fn gather_tokens(x: Tensor<3>, pos: &[usize]) -> Tensor<2> {
    let [n, t, d] = x.dims();
    let device = x.device();
    let flat: Vec<i64> = pos
        .iter()
        .enumerate()
        .map(|(i, &p)| (i * t + p) as i64)
        .collect();
    let idx = Tensor::<1, Int>::from_ints(flat.as_slice(), &device);
    x.reshape([n * t, d]).select(0, idx)
}

/// Where the real tokens of a padded batch sit, so that the per-token layers of an encoder
/// (projections, feed-forward, LayerNorms, residuals) run on those tokens alone and only the
/// attention sees the padded `[N, T]` layout: the "unpadding" of FlashAttention's `unpad_input`
/// and of transformers' `_upad_input`. A batch of 96 short sentences padded to its longest
/// sentence is about one third padding; transformers' eager and sdpa BERT compute it.
///
/// The values of the real tokens are those of the padded computation up to rounding (a row of a
/// matrix product does not depend on the other rows; the attention masks the padded keys either
/// way). Gradients are too: padded query rows are dropped before anything reads them, and padded
/// keys get probability exactly 0.
pub struct Unpadded {
    n: usize,
    t: usize,
    m: usize,
    /// `[M]`: flat position `i·T + j` of each real token, row-major.
    keep: Tensor<1, Int>,
    /// `[N·T]`: the row of `[M + 1]` (the packed tokens, then one zero row) that each position
    /// reads back.
    spread: Tensor<1, Int>,
}

impl Unpadded {
    /// The real tokens of `attention_mask: [N, T]` (non-zero = token, 0 = padding, as
    /// transformers' `attention_mask`). `None` when no position is padded (there is nothing to
    /// skip) or when a row has no token at all (its poolings read padded positions). Reads the
    /// mask back to the host (one synchronisation on a GPU device).
    ///
    /// # Panics
    /// When the device cannot hand the mask back (a failed device, as every host read of the
    /// models' forward passes).
    pub fn from_mask(attention_mask: &Tensor<2, Int>) -> Option<Self> {
        let [n, t] = attention_mask.dims();
        let mask: Vec<i64> = attention_mask
            .to_data()
            .convert::<i64>()
            .try_into_vec::<i64>()
            .expect("an Int tensor reads back as i64");
        let keep: Vec<i64> = (0..n * t)
            .filter(|&i| mask[i] != 0)
            .map(|i| i as i64)
            .collect();
        let m = keep.len();
        // A row without tokens keeps the padded computation: poolings fall back to one of its
        // padded positions there (CLS pooling reads position 0, as torch's argmax does).
        let empty_row = mask.chunks(t.max(1)).any(|row| row.iter().all(|&v| v == 0));
        if m == n * t || empty_row {
            return None;
        }
        let mut next = 0i64;
        let spread: Vec<i64> = mask
            .iter()
            .map(|&v| {
                if v != 0 {
                    next += 1;
                    next - 1
                } else {
                    m as i64
                }
            })
            .collect();
        let device = attention_mask.device();
        Some(Self {
            n,
            t,
            m,
            keep: Tensor::<1, Int>::from_ints(keep.as_slice(), &device),
            spread: Tensor::<1, Int>::from_ints(spread.as_slice(), &device),
        })
    }

    /// Number of real tokens `M`.
    pub fn tokens(&self) -> usize {
        self.m
    }

    /// The real tokens of a padded tensor: `[N, T, D]` → `[M, D]`, in row-major order.
    ///
    /// # Panics
    /// When `[N, T]` is not the mask's.
    pub fn pack(&self, x: Tensor<3>) -> Tensor<2> {
        let [n, t, d] = x.dims();
        assert_eq!([n, t], [self.n, self.t], "unpadding: [N, T] of the mask");
        x.reshape([n * t, d]).select(0, self.keep.clone())
    }

    /// Back to the padded layout: `[M, D]` → `[N, T, D]`, zeros at the padded positions (in
    /// `x`'s dtype).
    ///
    /// # Panics
    /// When `M` is not the mask's number of tokens.
    pub fn unpack(&self, x: Tensor<2>) -> Tensor<3> {
        let [m, d] = x.dims();
        assert_eq!(m, self.m, "unpadding: M of the mask");
        let zero = x.clone().slice([0..1, 0..d]).zeros_like().detach();
        Tensor::cat(vec![x, zero], 0)
            .select(0, self.spread.clone())
            .reshape([self.n, self.t, d])
    }
}

/// What [`run_stack`] returns: the last output `[N, T, D]` and, on request, every hidden state
/// (`L + 1` tensors `[N, T, D]`, the input first, as transformers' `output_hidden_states`) and
/// every block's attention probabilities (`L` tensors `[N, H, T_q, T_k]`).
pub type StackOutput = (Tensor<3>, Option<Vec<Tensor<3>>>, Option<Vec<Tensor<4>>>);

/// Runs `layers` in order on `x: [N, T, D]`; `f(layer, x, need_probs)` is one block's forward.
pub fn run_stack<L>(
    layers: &[L],
    mut x: Tensor<3>,
    opts: ForwardOptions,
    mut f: impl FnMut(&L, Tensor<3>, bool) -> (Tensor<3>, Option<Tensor<4>>),
) -> StackOutput {
    let mut hidden = opts.output_hidden_states.then(Vec::new);
    let mut attns = opts.output_attentions.then(Vec::new);
    for l in layers {
        if let Some(h) = hidden.as_mut() {
            h.push(x.clone());
        }
        let (y, p) = f(l, x, opts.output_attentions);
        x = y;
        if let (Some(a), Some(p)) = (attns.as_mut(), p) {
            a.push(p);
        }
    }
    if let Some(h) = hidden.as_mut() {
        h.push(x.clone());
    }
    (x, hidden, attns)
}

// ---------------------------------------------------------------------------------------------
// Configs and loading
// ---------------------------------------------------------------------------------------------

/// Deserializes an image size given as `224` or `[224, 224]` into `[H, W]`.
pub fn de_image_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[usize; 2], D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        One(usize),
        Two([usize; 2]),
    }
    Ok(match Size::deserialize(d)? {
        Size::One(s) => [s, s],
        Size::Two(s) => s,
    })
}

/// `model_type` of the checkpoint's `config.json`: the one reader every loader and the registry
/// use.
///
/// # Errors
/// [`ModelError::Checkpoint`] when the file is unreadable; [`ModelError::Unsupported`] when the
/// field is missing or not a string.
pub fn model_type(ckpt: &Checkpoint) -> Result<String, ModelError> {
    if ckpt.is_pytorch_file() {
        if let Some(arch) = &ckpt.arch {
            return Ok(arch.clone());
        }
        // No config.json: the layouts this crate reads from bare PyTorch pickles.
        let shapes = checkpoint_shapes(ckpt)?;
        return crate::resnet::infer_arch(&shapes)
            .map(str::to_string)
            .ok_or_else(|| ModelError::Unsupported {
                file: ckpt.config.display().to_string(),
                message: format!(
                    "a PyTorch checkpoint without config.json, in no layout bindscope reads \
                     from one: {}",
                    crate::resnet::describe_keys(&shapes)
                ),
            });
    }
    let v = ckpt.config_json()?;
    // A timm repository's config.json names the timm model instead (`architecture`).
    if v.get("model_type").is_none()
        && let Some(arch) = v.get("architecture")
    {
        let Some(arch) = arch.as_str() else {
            return Err(ModelError::Unsupported {
                file: ckpt.config.display().to_string(),
                message: format!("'architecture' must be a timm model name (a string), got {arch}"),
            });
        };
        return crate::beit::timm_model_type(arch)
            .or_else(|| crate::eva::timm_model_type(arch))
            .map(str::to_string)
            .ok_or_else(|| ModelError::Unsupported {
                file: ckpt.config.display().to_string(),
                message: format!(
                    "a timm checkpoint ('{arch}'): bindscope reads timm's layout for the models \
                     named {}*, eva02_*, eva_*",
                    crate::beit::TIMM_ARCHITECTURES.join("*, ")
                ),
            });
    }
    v.get("model_type")
        .and_then(|m| m.as_str())
        .map(str::to_string)
        .ok_or_else(|| ModelError::Unsupported {
            file: ckpt.config.display().to_string(),
            message: "no 'model_type' field: cannot tell the architecture".into(),
        })
}

/// Checks that `found` (a `model_type`) is one of `expected`.
///
/// # Errors
/// [`ModelError::Unsupported`] naming both.
pub fn check_model_type(
    ckpt: &Checkpoint,
    found: &str,
    expected: &[&str],
) -> Result<(), ModelError> {
    check_model_type_in(&ckpt.config, found, expected)
}

/// Checks that the `model_type` a config struct read from `file` is one of `expected`.
///
/// # Errors
/// [`ModelError::Unsupported`] naming both.
pub fn check_model_type_in(file: &Path, found: &str, expected: &[&str]) -> Result<(), ModelError> {
    if expected.contains(&found) {
        Ok(())
    } else {
        Err(ModelError::Unsupported {
            file: file.display().to_string(),
            message: format!("model_type '{found}' is not one of {expected:?}"),
        })
    }
}

/// Checks the sizes every transformer config needs: `hidden_size` a multiple of
/// `num_attention_heads`, and every named size in `positive` (patch size, layer counts, …)
/// non-zero.
///
/// # Errors
/// [`ModelError::Unsupported`] naming the offending field.
pub fn check_sizes(
    file: &Path,
    hidden: usize,
    heads: usize,
    positive: &[(&str, usize)],
) -> Result<(), ModelError> {
    let err = |m: String| {
        Err(ModelError::Unsupported {
            file: file.display().to_string(),
            message: m,
        })
    };
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return err(format!(
            "hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
        ));
    }
    for (name, v) in positive {
        if *v == 0 {
            return err(format!("{name} must be positive"));
        }
    }
    Ok(())
}

/// Shapes of every tensor of a checkpoint (all shards), as the files store them.
///
/// # Errors
/// [`ModelError::Load`] for an unreadable or malformed weight file.
pub fn checkpoint_shapes(ckpt: &Checkpoint) -> Result<BTreeMap<String, Vec<usize>>, ModelError> {
    let mut out = BTreeMap::new();
    for f in &ckpt.weights {
        out.extend(bindscope_core::load::read_weight_shapes(f)?);
    }
    Ok(out)
}

/// A convolutional feature map as tokens, the way the studies read a ViT's patch tokens:
/// `[N, C, h, w]` → `[N, h·w, C]`, row-major over `h, w`.
pub fn feature_map_tokens(x: Tensor<4>) -> Tensor<3> {
    let [n, c, h, w] = x.dims();
    x.reshape([n, c, h * w]).swap_dims(1, 2)
}

/// Reads a `XForImageClassification` checkpoint as its backbone: when no key starts with
/// `root` (`embeddings.`) and some start with `prefix` (`ijepa.`, `convnext.`), `prefix` is
/// stripped from every key and the classification `head` (`^classifier\.`) ignored. Told
/// apart by any prefixed key, so a missing key is still reported by its stored name.
pub fn classification_layout(
    shapes: &BTreeMap<String, Vec<usize>>,
    opts: &mut LoadOptions,
    root: &str,
    prefix: &str,
    head: &str,
) {
    if !shapes.keys().any(|k| k.starts_with(root)) && shapes.keys().any(|k| k.starts_with(prefix)) {
        opts.remap
            .push((format!("^{}", regex::escape(prefix)), String::new()));
        opts.benign_unused.push(head.to_string());
    }
}

/// Reads a scalar (rank-0 or one-element) float tensor, e.g. CLIP's `logit_scale`, from the
/// weight files; `None` when no file holds `key`.
pub fn read_scalar(files: &[PathBuf], key: &str) -> Option<f32> {
    use burn::store::{ModuleStore, SafetensorsStore, bridge};
    for f in files {
        let mut store = SafetensorsStore::from_file(f);
        if let Ok(Some(t)) = store.get_tensor(key) {
            let data = bridge::to_data(t).ok()?;
            return data
                .convert::<f32>()
                .try_to_vec::<f32>()
                .ok()?
                .first()
                .copied();
        }
    }
    None
}

/// Strict load ([`bindscope_core::load_strict`]) with a family's `benign` unused keys (buffers
/// such as `position_ids`, scalars read separately) added and, when the caller gave no `only`
/// filter, the tower's own key prefixes `default_only` (so one tower loads from a two-tower
/// file).
///
/// # Errors
/// [`ModelError::Load`] listing every missing, unexpected and mis-shaped key.
pub fn load_module<M: Module>(
    module: M,
    ckpt: &Checkpoint,
    opts: &LoadOptions,
    benign: &[&str],
    default_only: &[&str],
) -> Result<M, ModelError> {
    let mut opts = opts.clone();
    opts.benign_unused
        .extend(benign.iter().map(|s| s.to_string()));
    if opts.only.is_empty() {
        opts.only = default_only.iter().map(|s| s.to_string()).collect();
    }
    Ok(load_strict(module, &ckpt.weights, &opts)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// `n` seeded values in `[-scale, scale)`.
    fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
        let mut rng = bindscope_core::rng::stream(seed, &[]);
        (0..n)
            .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * scale)
            .collect()
    }

    fn close(got: Tensor<2>, want: Tensor<2>, rel: f32) {
        let (g, w): (Vec<f32>, Vec<f32>) = (
            got.into_data().try_into_vec::<f32>().unwrap(),
            want.into_data().try_into_vec::<f32>().unwrap(),
        );
        assert_eq!(g.len(), w.len());
        let scale = w.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!((a - b).abs() <= rel * scale, "element {i}: {a} vs {b}");
        }
    }

    /// burn's own activation ops, which the CPU paths stand in for.
    fn burn_activation(act: Activation, x: Tensor<2>) -> Tensor<2> {
        match act {
            Activation::QuickGelu => x.clone() * activation::sigmoid(x * 1.702),
            Activation::Gelu => activation::gelu(x),
            Activation::GeluTanh => activation::gelu_approximate(x),
            Activation::Relu => activation::relu(x),
            Activation::Silu => activation::silu(x),
            Activation::Tanh => activation::tanh(x),
        }
    }

    const ACTIVATIONS: [Activation; 6] = [
        Activation::QuickGelu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Relu,
        Activation::Silu,
        Activation::Tanh,
    ];

    /// The CPU path of every activation against burn's ops on a dense, a shared and a
    /// transposed input; the shared input is left as it was.
    #[test]
    fn cpu_activations_match_burns_ops() {
        let flex = Device::flex();
        let v = values(3, 40 * 70, 12.0);
        let x = || Tensor::<1>::from_floats(v.as_slice(), &flex).reshape([40, 70]);
        let xt = || {
            Tensor::<1>::from_floats(v.as_slice(), &flex)
                .reshape([70, 40])
                .transpose()
        };
        for act in ACTIVATIONS {
            let want = burn_activation(act, x());
            close(act.forward(x()), want.clone(), 1e-6);
            let kept = x();
            close(act.forward(kept.clone()), want, 1e-6);
            close(kept, x(), 0.0);
            close(act.forward(xt()), burn_activation(act, xt()), 1e-6);
        }
    }

    /// Under autodiff the linearised CPU path gives burn's values and burn's input gradient
    /// (`∂ Σ w ⊙ act(x) / ∂x`), and `forward_with_derivative` gives burn's value and derivative,
    /// on a dense and on a transposed input.
    #[test]
    fn cpu_activations_under_autodiff_match_burns_values_and_gradients() {
        let flex = Device::flex();
        let device = flex.clone().autodiff();
        let v = values(7, 40 * 70, 8.0);
        let w =
            Tensor::<1>::from_floats(values(8, 40 * 70, 1.0).as_slice(), &device).reshape([40, 70]);
        for act in ACTIVATIONS {
            for transposed in [false, true] {
                let input = || {
                    let x = Tensor::<1>::from_floats(v.as_slice(), &device);
                    if transposed {
                        x.reshape([70, 40]).transpose()
                    } else {
                        x.reshape([40, 70])
                    }
                    .require_grad()
                };
                let run = |ours: bool| {
                    let x = input();
                    let y = if ours {
                        act.forward(x.clone())
                    } else {
                        burn_activation(act, x.clone())
                    };
                    let grads = (y.clone() * w.clone()).sum().backward();
                    let g = x.grad(&grads).expect("x's gradient");
                    let flex = Device::flex();
                    (
                        Tensor::<2>::from_data(y.inner().into_data(), &flex),
                        Tensor::<2>::from_data(g.into_data(), &flex),
                    )
                };
                let ((y, g), (y_ref, g_ref)) = (run(true), run(false));
                close(y.clone(), y_ref.clone(), 1e-6);
                close(g, g_ref, 1e-5);
                // The value and derivative of one pass, against burn's value and its gradient
                // with unit weights.
                let x = input();
                let grads = burn_activation(act, x.clone()).sum().backward();
                let d_ref = Tensor::<2>::from_data(x.grad(&grads).unwrap().into_data(), &flex);
                let (y, d) = act.forward_with_derivative(x);
                close(Tensor::from_data(y.into_data(), &flex), y_ref, 1e-6);
                close(Tensor::from_data(d.into_data(), &flex), d_ref, 1e-5);
            }
        }
    }

    /// The softmax VJP's CPU pass against burn's ops, with probabilities of the same shape and
    /// broadcast over the leading axis, and a shared cotangent left as it was.
    #[test]
    fn softmax_vjp_matches_burns_ops() {
        let flex = Device::flex();
        let (k, h, t) = (3, 2, 37);
        let g = || {
            Tensor::<1>::from_floats(values(11, k * h * t * t, 2.0).as_slice(), &flex)
                .reshape([k, h, t, t])
        };
        for lead in [1, k] {
            let s = Tensor::<1>::from_floats(values(12, lead * h * t * t, 4.0).as_slice(), &flex)
                .reshape([lead, h, t, t]);
            let p = activation::softmax(s, 3);
            let want = softmax_vjp_ops(g(), p.clone(), 0.125);
            let kept = g();
            let got = softmax_vjp(kept.clone(), p.clone(), 0.125);
            let flat = |x: Tensor<4>| x.reshape([k * h * t, t]);
            close(flat(got), flat(want.clone()), 1e-6);
            close(flat(kept), flat(g()), 0.0);
            close(flat(softmax_vjp(g(), p, 0.125)), flat(want), 1e-6);
        }
    }

    /// The faer product of a few rows against burn's gemm: plain and transposed weights, one to
    /// `FEW_ROWS` rows, and a sliced (offset) left operand.
    #[test]
    fn few_row_products_match_burns_matmul() {
        let flex = Device::flex();
        let (k, n) = (96, 130);
        let w = Tensor::<1>::from_floats(values(5, k * n, 1.0).as_slice(), &flex).reshape([k, n]);
        let wt = Tensor::<1>::from_floats(values(6, k * n, 1.0).as_slice(), &flex)
            .reshape([n, k])
            .transpose();
        for m in [1, 3, FEW_ROWS] {
            let x = Tensor::<1>::from_floats(values(m as u64, (m + 2) * k, 1.0).as_slice(), &flex)
                .reshape([m + 2, k])
                .slice(1..m + 1);
            for rhs in [w.clone(), wt.clone()] {
                let a = x.clone().try_into_primitive::<Flex>().unwrap();
                let b = rhs.clone().try_into_primitive::<Flex>().unwrap();
                assert!(few_rows_product(&a, &b).is_some(), "m = {m}: the faer path");
                let want = x.clone().matmul(rhs.clone());
                close(matmul_2d(x.clone(), rhs), want, 1e-6);
            }
        }
    }

    #[test]
    fn unpadded_packs_the_real_tokens_and_unpacks_zeros_at_padding() {
        let device = bindscope_core::device::test_device();
        // Right, left and no padding in one batch: [N, T] = [3, 4].
        let mask = Tensor::<2, Int>::from_ints([[1, 1, 0, 0], [0, 1, 1, 1], [1, 1, 1, 1]], &device);
        let u = Unpadded::from_mask(&mask).expect("padded");
        assert_eq!(u.tokens(), 9);
        let x = Tensor::<1>::from_floats(values(5, 3 * 4 * 2, 1.0).as_slice(), &device)
            .reshape([3, 4, 2]);
        let packed = u.pack(x.clone());
        assert_eq!(packed.dims(), [9, 2]);
        let keep = [0usize, 1, 5, 6, 7, 8, 9, 10, 11];
        let flat: Vec<f32> = x.clone().into_data().try_into_vec().unwrap();
        let want: Vec<f32> = keep
            .iter()
            .flat_map(|&i| [flat[2 * i], flat[2 * i + 1]])
            .collect();
        assert_eq!(
            packed.clone().into_data().try_into_vec::<f32>().unwrap(),
            want
        );
        let back = u.unpack(packed);
        let m3 = mask.clone().float().reshape([3, 4, 1]);
        let want = (x * m3).into_data().try_into_vec::<f32>().unwrap();
        assert_eq!(back.into_data().try_into_vec::<f32>().unwrap(), want);

        let full = Tensor::<2, Int>::ones([2, 3], &device);
        assert!(Unpadded::from_mask(&full).is_none(), "nothing to skip");
        let empty = Tensor::<2, Int>::zeros([2, 3], &device);
        assert!(Unpadded::from_mask(&empty).is_none(), "no token to keep");
        let one_empty = Tensor::<2, Int>::from_ints([[1, 1, 0], [0, 0, 0]], &device);
        assert!(
            Unpadded::from_mask(&one_empty).is_none(),
            "a row without tokens"
        );
    }
}
