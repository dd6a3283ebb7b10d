//! The embedding adapter of GEB's generative readout (§3, eq. 1–3): the frozen embedding `e` is
//! L2-normalised, then `h = W₂ · GELU(W₁ · LN(e))` maps it to one input embedding of the
//! decoder.
//!
//! The module is PyTorch's `nn.Sequential`-free spelling of the same thing, and its file is
//! what `torch.nn.Module.state_dict()` of this module saves:
//!
//! | key | shape | torch |
//! |---|---|---|
//! | `norm.weight`, `norm.bias` | `[d]` | `nn.LayerNorm(d)` (ε = 1e-5) |
//! | `linear_1.weight`, `linear_1.bias` | `[hidden, d]`, `[hidden]` | `nn.Linear(d, hidden)` |
//! | `linear_2.weight`, `linear_2.bias` | `[d_dec, hidden]`, `[d_dec]` | `nn.Linear(hidden, d_dec)` |
//!
//! The GELU is the exact (erf) one, `nn.GELU()`'s default; the normalisation is
//! `F.normalize(e, dim=-1)`, `e / max(‖e‖₂, 1e-12)`.

use std::path::Path;

use bindscope_core::load::{LoadOptions, load_strict, read_safetensors_shapes};
use burn::module::{Module, Param};
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::gelu;
use rand::Rng;

/// A tensor on the host: shape and row-major values.
type HostTensor = (Vec<usize>, Vec<f32>);

/// The paper's hidden width of the adapter (`W₁: d → 1024`).
pub const PAPER_HIDDEN: usize = 1024;

/// `F.normalize`'s ε: the norm is clamped below at this value.
const NORMALIZE_EPS: f64 = 1e-12;

/// `nn.LayerNorm`'s default ε.
const LAYER_NORM_EPS: f64 = 1e-5;

/// Sizes of an [`EmbeddingAdapter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AdapterDims {
    /// `d`: the embedding's width.
    pub embed: usize,
    /// The hidden width (the paper's is [`PAPER_HIDDEN`]).
    pub hidden: usize,
    /// `d_dec`: the decoder's `hidden_size`.
    pub decoder: usize,
}

/// `h = linear_2(GELU(linear_1(norm(e / ‖e‖))))` (module docs).
#[derive(Module, Debug)]
pub struct EmbeddingAdapter {
    /// `LN`, over `d`.
    pub norm: LayerNorm,
    /// `W₁: d → hidden`, with bias.
    pub linear_1: Linear,
    /// `W₂: hidden → d_dec`, with bias.
    pub linear_2: Linear,
}

/// Why an adapter file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// The file is unreadable or not an adapter.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong, in the file's key names.
        message: String,
    },
}

fn uniform_tensor<R: Rng, const D: usize>(
    rng: &mut R,
    shape: [usize; D],
    bound: f64,
    device: &Device,
) -> Tensor<D> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| rng.random_range(-bound..bound) as f32)
        .collect();
    Tensor::<1>::from_floats(v.as_slice(), device).reshape(shape)
}

fn torch_linear<R: Rng>(rng: &mut R, d_in: usize, d_out: usize, device: &Device) -> Linear {
    // nn.Linear's reset_parameters: kaiming_uniform(a=√5) on the weight, which is
    // U(−1/√fan_in, 1/√fan_in), and the same bound for the bias.
    let bound = 1.0 / (d_in as f64).sqrt();
    let mut l = LinearConfig::new(d_in, d_out).init(device);
    l.weight = Param::from_tensor(uniform_tensor(rng, [d_in, d_out], bound, device));
    l.bias = Some(Param::from_tensor(uniform_tensor(
        rng,
        [d_out],
        bound,
        device,
    )));
    l
}

impl EmbeddingAdapter {
    /// A fresh adapter drawn from `rng`: LayerNorm γ = 1, β = 0, and each linear layer from
    /// PyTorch's default distribution `U(−1/√fan_in, 1/√fan_in)` (weight, then bias; `linear_1`
    /// first). The values are this project's draw, not torch's.
    pub fn init<R: Rng>(dims: AdapterDims, rng: &mut R, device: &Device) -> Self {
        let norm = LayerNormConfig::new(dims.embed)
            .with_epsilon(LAYER_NORM_EPS)
            .init(device);
        let linear_1 = torch_linear(rng, dims.embed, dims.hidden, device);
        let linear_2 = torch_linear(rng, dims.hidden, dims.decoder, device);
        Self {
            norm,
            linear_1,
            linear_2,
        }
    }

    /// The sizes, read from the weights.
    pub fn dims(&self) -> AdapterDims {
        let [embed, hidden] = self.linear_1.weight.dims();
        let [_, decoder] = self.linear_2.weight.dims();
        AdapterDims {
            embed,
            hidden,
            decoder,
        }
    }

    /// `[N, d]` embeddings → `[N, d_dec]` decoder input embeddings (eq. 1–3), in f32.
    pub fn forward(&self, e: Tensor<2>) -> Tensor<2> {
        let norm = e
            .clone()
            .powi_scalar(2)
            .sum_dim(1)
            .sqrt()
            .clamp_min(NORMALIZE_EPS);
        let e = e / norm;
        self.linear_2
            .forward(gelu(self.linear_1.forward(self.norm.forward(e))))
    }

    /// Loads an adapter saved in the layout of the module docs, checking its sizes first.
    ///
    /// # Errors
    /// [`AdapterError::File`] when the file is unreadable, lacks a key, or its sizes are not
    /// `dims` (the message names the key and both sizes: a saved adapter trained for another
    /// embedder or decoder).
    pub fn load(path: &Path, dims: AdapterDims, device: &Device) -> Result<Self, AdapterError> {
        let bad = |message: String| AdapterError::File {
            path: path.display().to_string(),
            message,
        };
        let shapes = read_safetensors_shapes(path).map_err(|e| bad(e.to_string()))?;
        let want: [(&str, Vec<usize>, &str); 6] = [
            ("norm.weight", vec![dims.embed], "the embedding width"),
            ("norm.bias", vec![dims.embed], "the embedding width"),
            (
                "linear_1.weight",
                vec![dims.hidden, dims.embed],
                "[hidden, embedding width]",
            ),
            ("linear_1.bias", vec![dims.hidden], "[hidden]"),
            (
                "linear_2.weight",
                vec![dims.decoder, dims.hidden],
                "[decoder hidden_size, hidden]",
            ),
            ("linear_2.bias", vec![dims.decoder], "[decoder hidden_size]"),
        ];
        let mut problems = Vec::new();
        for (key, shape, what) in &want {
            match shapes.get(*key) {
                None => problems.push(format!("no '{key}'")),
                Some(s) if s != shape => problems.push(format!(
                    "'{key}' is {s:?}, this run needs {shape:?} ({what}: embedding {}, hidden {}, decoder {})",
                    dims.embed, dims.hidden, dims.decoder
                )),
                Some(_) => {}
            }
        }
        if !problems.is_empty() {
            return Err(bad(format!(
                "not an adapter for this run: {}",
                problems.join("; ")
            )));
        }
        let fresh = Self::init(dims, &mut bindscope_core::rng::stream(0, &[]), device);
        load_strict(fresh, &[path.to_path_buf()], &LoadOptions::default())
            .map_err(|e| bad(e.to_string()))
    }

    /// Writes the adapter in the layout of the module docs (f32, torch's `[out, in]` linear
    /// weights), atomically.
    ///
    /// # Errors
    /// A failed read-back from the device or a failed write, as text naming the file.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let host = |t: Tensor<2>| -> Result<HostTensor, String> {
            let dims = t.dims().to_vec();
            Ok((
                dims,
                bindscope_core::device::to_host_f32(t).map_err(|e| e.to_string())?,
            ))
        };
        let row = |t: Tensor<1>| host(t.unsqueeze_dim(0)).map(|(s, v)| (vec![s[1]], v));
        let tensors: Vec<(&str, HostTensor)> = vec![
            ("norm.weight", row(self.norm.gamma.val())?),
            (
                "norm.bias",
                row(self
                    .norm
                    .beta
                    .as_ref()
                    .map(|b| b.val())
                    .ok_or("LayerNorm without bias")?)?,
            ),
            (
                "linear_1.weight",
                host(self.linear_1.weight.val().transpose())?,
            ),
            (
                "linear_1.bias",
                row(self.linear_1.bias.as_ref().ok_or("no bias")?.val())?,
            ),
            (
                "linear_2.weight",
                host(self.linear_2.weight.val().transpose())?,
            ),
            (
                "linear_2.bias",
                row(self.linear_2.bias.as_ref().ok_or("no bias")?.val())?,
            ),
        ];
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .into_iter()
            .map(|(k, (s, v))| {
                (
                    k.to_string(),
                    s,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                )
            })
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
            .iter()
            .map(|(k, s, b)| {
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                    .map(|v| (k.clone(), v))
                    .map_err(|e| format!("{}: {e}", path.display()))
            })
            .collect::<Result<_, _>>()?;
        let data = safetensors::serialize(views, None).map_err(|e| format!("{e}"))?;
        bindscope_core::fsutil::write_atomic(path, &data)
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}
