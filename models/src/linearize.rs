//! Vector–Jacobian products of a frozen pre-norm ViT for many cotangents over one forward pass.
//!
//! The JER output sketch `Gᵀ·J(x)` needs `k` vector–Jacobian products at one image `x`. With
//! burn's autodiff (reverse mode, one cotangent per backward) that means `k` copies of the
//! image in one batch: `k` identical forward passes, then one backward. Here the forward pass
//! runs once, at batch 1, keeping what the derivatives need (normalised inputs and inverse
//! standard deviations of every LayerNorm, the attention heads and probabilities, the
//! activation's derivative), and the backward is written out per layer type so that it
//! carries a batch of `k` cotangents against those shared activations. Only input gradients
//! are formed: the model is frozen.
//!
//! Covered: the pre-norm ViT block (`x + λ₁ ⊙ attn(norm1(x))`, `x + λ₂ ⊙ mlp(norm2(x))`) with
//! optional layer scale and a constant additive attention bias, a patch convolution with
//! kernel = stride, an optional norm after the embeddings (CLIP's `pre_layrnorm`), and a readout
//! of one token, the mean of the patch tokens or an attention pooling head, before or after a
//! LayerNorm, with an optional projection. That is ViT, DINOv2 (plain MLP), CLIP, SigLIP (MAP
//! head), ViT-MAE, I-JEPA and BEiT (relative position bias): each builds [`VitParts`] in
//! [`crate::VisionEncoder::linearize`]; everything else goes through autodiff.
//!
//! The derivatives (per token; `x̂ = (x − μ)·r`, `r = (σ² + ε)^-½`, `ḡ` the mean over the
//! features):
//! - LayerNorm: `∂x = r · (g_x̂ − ḡ_x̂ − x̂ · mean(g_x̂ ⊙ x̂))` with `g_x̂ = γ ⊙ g`;
//! - linear `y = x W + b` (burn's `W: [in, out]`): `∂x = g Wᵀ`;
//! - attention `P = softmax(s · Q Kᵀ + B)` (B constant), `C = P V`: `∂V = Pᵀ ∂C`, `∂P = ∂C Vᵀ`,
//!   `∂S = P ⊙ (∂P − rowsum(∂P ⊙ P))`, `∂Q = s · ∂S K`, `∂K = s · ∂Sᵀ Q`;
//! - element-wise activations: `∂u = g ⊙ act'(u)` (exact GELU `Φ(u) + u φ(u)`, quick_gelu,
//!   tanh-GELU, ReLU, SiLU, tanh);
//! - attention pooling (SigLIP): as attention, with a constant query, so only `∂K` and `∂V`;
//! - patch convolution (kernel = stride = p, no overlap): each patch token's gradient times the
//!   flattened kernel `[D, C·p·p]`, folded back onto its `p × p` pixels; pixels beyond the last
//!   full patch get zero, as the convolution never reads them.

use crate::attention::{merge_heads, split_heads};
use crate::nn::{Activation, softmax_vjp};
use burn::nn::{LayerNorm, Linear};
use burn::prelude::*;
use burn::tensor::activation::softmax;

/// Why a vector–Jacobian product was refused.
#[derive(Debug, thiserror::Error)]
pub enum VjpError {
    /// The output index is not one of the linearization's outputs.
    #[error("output {output} does not exist: the encoder has {count} output(s)")]
    Output {
        /// The index asked for.
        output: usize,
        /// How many outputs there are.
        count: usize,
    },
    /// The cotangents' width is not the output's dimension.
    #[error("cotangents of width {got} for output {output} of dimension {expected}")]
    Width {
        /// The output.
        output: usize,
        /// Its dimension.
        expected: usize,
        /// The cotangents' width.
        got: usize,
    },
}

/// A LayerNorm as plain tensors (no autodiff).
#[derive(Debug, Clone)]
pub struct NormParts {
    /// `γ: [D]`.
    pub gamma: Tensor<1>,
    /// `β: [D]`, when the norm has one.
    pub beta: Option<Tensor<1>>,
    /// `ε`, the config's `layer_norm_eps`.
    pub eps: f64,
}

impl NormParts {
    /// The parameters of `norm` (its `ε` is not public in burn: the config's value is passed).
    pub fn new(norm: &LayerNorm, eps: f64) -> Self {
        Self {
            gamma: norm.gamma.val().without_autodiff(),
            beta: norm.beta.as_ref().map(|b| b.val().without_autodiff()),
            eps,
        }
    }
}

/// A linear layer as plain tensors (no autodiff).
#[derive(Debug, Clone)]
pub struct LinearParts {
    /// `W: [in, out]` (burn's layout).
    pub weight: Tensor<2>,
    /// `b: [out]`.
    pub bias: Option<Tensor<1>>,
}

impl LinearParts {
    /// The parameters of `lin`.
    pub fn new(lin: &Linear) -> Self {
        Self {
            weight: lin.weight.val().without_autodiff(),
            bias: lin.bias.as_ref().map(|b| b.val().without_autodiff()),
        }
    }
}

/// One pre-norm block: `x = x + λ₁ ⊙ o(attn(norm1(x)))`, `x = x + λ₂ ⊙ fc2(act(fc1(norm2(x))))`
/// (λ = 1 without layer scale).
#[derive(Debug, Clone)]
pub struct BlockParts {
    /// Norm before the attention.
    pub norm1: NormParts,
    /// Query projection `D → D`.
    pub query: LinearParts,
    /// Key projection `D → D`.
    pub key: LinearParts,
    /// Value projection `D → D`.
    pub value: LinearParts,
    /// Output projection `D → D`.
    pub output: LinearParts,
    /// Number of heads; the scale is `(D / H)^-½`.
    pub num_heads: usize,
    /// A constant added to the attention scores, `[1, H, T, T]` (BEiT's relative position
    /// bias for the input's patch grid).
    pub attn_bias: Option<Tensor<4>>,
    /// Layer scale of the attention branch, `[D]`.
    pub layer_scale1: Option<Tensor<1>>,
    /// Norm before the MLP.
    pub norm2: NormParts,
    /// `D → F`.
    pub fc1: LinearParts,
    /// The MLP's activation.
    pub act: Activation,
    /// `F → D`.
    pub fc2: LinearParts,
    /// Layer scale of the MLP branch, `[D]`.
    pub layer_scale2: Option<Tensor<1>>,
}

/// Which tokens the readout pools, after the final norm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// Token `i` (0: CLS).
    Token(usize),
    /// The mean of the tokens after the first `prefix` (the patch tokens).
    MeanPatch {
        /// Leading tokens left out.
        prefix: usize,
    },
}

/// A multi-head attention pooling head (SigLIP's `head`, transformers
/// `SiglipMultiheadAttentionPoolingHead`): a learned query attends over the tokens, then
/// `x + fc2(act(fc1(norm(x))))`.
#[derive(Debug, Clone)]
pub struct MapParts {
    /// The learned query `probe: [D]`.
    pub probe: Tensor<1>,
    /// Query projection (of the probe).
    pub query: LinearParts,
    /// Key projection.
    pub key: LinearParts,
    /// Value projection.
    pub value: LinearParts,
    /// Output projection.
    pub output: LinearParts,
    /// Number of heads.
    pub num_heads: usize,
    /// Norm before the MLP.
    pub norm: NormParts,
    /// `D → F`.
    pub fc1: LinearParts,
    /// The MLP's activation.
    pub act: Activation,
    /// `F → D`.
    pub fc2: LinearParts,
}

/// The readout applied to a hidden state: final norm, pooling (the mean of the kept tokens, or
/// an attention pooling head), a norm of the pooled vector, optional projection.
#[derive(Debug, Clone)]
pub struct HeadParts {
    /// The final norm (token-wise, before pooling).
    pub norm: Option<NormParts>,
    /// Which tokens are kept.
    pub pool: Pool,
    /// An attention pooling head over the kept tokens instead of their mean.
    pub map: Option<MapParts>,
    /// A norm of the pooled vector (BEiT's `pooler.layernorm` after mean pooling).
    pub pooled_norm: Option<NormParts>,
    /// A projection `D → E` (CLIP's `visual_projection`).
    pub projection: Option<LinearParts>,
}

/// Which outputs a [`Linearization`] has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outputs {
    /// The readout of the last block only.
    Final,
    /// The readout of every block's output, block 1 … L (L being the final output).
    EveryBlock,
}

/// A frozen pre-norm ViT as plain tensors, from [`crate::VisionEncoder::linearize`].
#[derive(Debug, Clone)]
pub struct VitParts {
    /// The patch convolution's weight `[D, C, p, p]` (kernel = stride = p).
    pub patch_weight: Tensor<4>,
    /// Tokens before the patch tokens (CLS, registers).
    pub prefix: usize,
    /// A norm applied to the embeddings (CLIP's `pre_layrnorm`).
    pub pre_norm: Option<NormParts>,
    /// The blocks.
    pub blocks: Vec<BlockParts>,
    /// The readout.
    pub head: HeadParts,
}

#[derive(Debug, Clone)]
struct NormCache {
    /// `x̂: [1, T, D]`.
    xhat: Tensor<3>,
    /// `r: [1, T, 1]`.
    rstd: Tensor<3>,
}

#[derive(Debug, Clone)]
struct BlockCache {
    n1: NormCache,
    /// `[1, H, T, Dh]` each.
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    /// `[1, H, T, T]`.
    probs: Tensor<4>,
    n2: NormCache,
    /// `act'(fc1(norm2(x))): [1, T, F]`.
    act_grad: Tensor<3>,
}

#[derive(Debug, Clone)]
struct MapCache {
    /// The probe's query heads `[1, H, 1, Dh]` and the values `[1, H, T, Dh]` (the keys'
    /// gradient needs no keys: the query is constant).
    q: Tensor<4>,
    v: Tensor<4>,
    /// `[1, H, 1, T]`.
    probs: Tensor<4>,
    norm: NormCache,
    act_grad: Tensor<3>,
}

#[derive(Debug, Clone)]
struct HeadCache {
    norm: Option<NormCache>,
    /// Tokens of the hidden state, and of them the pooled ones.
    tokens: usize,
    kept: usize,
    map: Option<MapCache>,
    pooled_norm: Option<NormCache>,
}

/// The forward pass of a [`VitParts`] at one input, kept for vector–Jacobian products.
#[derive(Debug, Clone)]
pub struct Linearization {
    parts: VitParts,
    /// `[1, C, H, W]`.
    input: [usize; 4],
    pre_norm: Option<NormCache>,
    blocks: Vec<BlockCache>,
    /// Per output: how many blocks it reads after, and the head's cache.
    heads: Vec<(usize, HeadCache)>,
    outputs: Vec<Tensor<2>>,
}

fn scaled(x: Tensor<3>, scale: &Option<Tensor<1>>) -> Tensor<3> {
    match scale {
        Some(l) => {
            let d = l.dims()[0];
            x * l.clone().reshape([1, 1, d])
        }
        None => x,
    }
}

fn linear(l: &LinearParts, x: Tensor<3>) -> Tensor<3> {
    let [n, t, d] = x.dims();
    let out = l.weight.dims()[1];
    let y = x.reshape([n * t, d]).matmul(l.weight.clone());
    let y = match &l.bias {
        Some(b) => y + b.clone().reshape([1, out]),
        None => y,
    };
    y.reshape([n, t, out])
}

/// `g Wᵀ`: `[K, T, out]` → `[K, T, in]`.
fn linear_vjp(l: &LinearParts, g: Tensor<3>) -> Tensor<3> {
    let [n, t, out] = g.dims();
    let d_in = l.weight.dims()[0];
    g.reshape([n * t, out])
        .matmul(l.weight.clone().transpose())
        .reshape([n, t, d_in])
}

fn norm_forward(p: &NormParts, x: Tensor<3>) -> (Tensor<3>, NormCache) {
    let d = p.gamma.dims()[0];
    let xc = x.clone() - x.mean_dim(2);
    let var = xc.clone().square().mean_dim(2);
    let rstd = (var + p.eps).sqrt().recip();
    let xhat = xc * rstd.clone();
    let y = xhat.clone() * p.gamma.clone().reshape([1, 1, d]);
    let y = match &p.beta {
        Some(b) => y + b.clone().reshape([1, 1, d]),
        None => y,
    };
    (y, NormCache { xhat, rstd })
}

fn norm_vjp(p: &NormParts, c: &NormCache, g: Tensor<3>) -> Tensor<3> {
    let d = p.gamma.dims()[0];
    let gx = g * p.gamma.clone().reshape([1, 1, d]);
    let m1 = gx.clone().mean_dim(2);
    let m2 = (gx.clone() * c.xhat.clone()).mean_dim(2);
    (gx - m1 - c.xhat.clone() * m2) * c.rstd.clone()
}

fn block_forward(b: &BlockParts, x: Tensor<3>) -> (Tensor<3>, BlockCache) {
    let [_, _, d] = x.dims();
    let h = b.num_heads;
    let scale = ((d / h) as f64).powf(-0.5);
    let (h1, n1) = norm_forward(&b.norm1, x.clone());
    let q = split_heads(linear(&b.query, h1.clone()), h);
    let k = split_heads(linear(&b.key, h1.clone()), h);
    let v = split_heads(linear(&b.value, h1), h);
    let scores = q.clone().matmul(k.clone().swap_dims(2, 3)) * scale;
    let scores = match &b.attn_bias {
        Some(bias) => scores + bias.clone(),
        None => scores,
    };
    let probs = softmax(scores, 3);
    let ctx = merge_heads(probs.clone().matmul(v.clone()));
    let x = x + scaled(linear(&b.output, ctx), &b.layer_scale1);
    let (h2, n2) = norm_forward(&b.norm2, x.clone());
    let (a, act_grad) = b.act.forward_with_derivative(linear(&b.fc1, h2));
    let y = x + scaled(linear(&b.fc2, a), &b.layer_scale2);
    (
        y,
        BlockCache {
            n1,
            q,
            k,
            v,
            probs,
            n2,
            act_grad,
        },
    )
}

/// `[K, T, D]` cotangents of the block's output → of its input.
fn block_vjp(b: &BlockParts, c: &BlockCache, g: Tensor<3>) -> Tensor<3> {
    let [_, _, d] = g.dims();
    let h = b.num_heads;
    let scale = ((d / h) as f64).powf(-0.5);
    // MLP branch.
    let gu = linear_vjp(&b.fc2, scaled(g.clone(), &b.layer_scale2)) * c.act_grad.clone();
    let g = g + norm_vjp(&b.norm2, &c.n2, linear_vjp(&b.fc1, gu));
    // Attention branch.
    let gctx = split_heads(linear_vjp(&b.output, scaled(g.clone(), &b.layer_scale1)), h); // [K, H, T, Dh]
    let gp = gctx.clone().matmul(c.v.clone().swap_dims(2, 3)); // [K, H, T, T]
    let gv = c.probs.clone().swap_dims(2, 3).matmul(gctx);
    let gs = softmax_vjp(gp, c.probs.clone(), scale);
    let gq = gs.clone().matmul(c.k.clone());
    let gk = gs.swap_dims(2, 3).matmul(c.q.clone());
    let gh = linear_vjp(&b.query, merge_heads(gq))
        + linear_vjp(&b.key, merge_heads(gk))
        + linear_vjp(&b.value, merge_heads(gv));
    g + norm_vjp(&b.norm1, &c.n1, gh)
}

fn pool_tokens(pool: Pool, x: Tensor<3>) -> Tensor<3> {
    let [n, t, d] = x.dims();
    match pool {
        Pool::Token(i) => x.slice([0..n, i..i + 1, 0..d]),
        Pool::MeanPatch { prefix } => x.slice([0..n, prefix..t, 0..d]),
    }
}

/// `[1, T, D]` → `[1, 1, D]`.
fn map_forward(m: &MapParts, z: Tensor<3>) -> (Tensor<3>, MapCache) {
    let [_, _, d] = z.dims();
    let h = m.num_heads;
    let scale = ((d / h) as f64).powf(-0.5);
    let q = split_heads(linear(&m.query, m.probe.clone().reshape([1, 1, d])), h);
    let k = split_heads(linear(&m.key, z.clone()), h);
    let v = split_heads(linear(&m.value, z), h);
    let probs = softmax(q.clone().matmul(k.clone().swap_dims(2, 3)) * scale, 3);
    let a = linear(&m.output, merge_heads(probs.clone().matmul(v.clone())));
    let (an, norm) = norm_forward(&m.norm, a.clone());
    let (u, act_grad) = m.act.forward_with_derivative(linear(&m.fc1, an));
    let y = a + linear(&m.fc2, u);
    (
        y,
        MapCache {
            q,
            v,
            probs,
            norm,
            act_grad,
        },
    )
}

/// `[K, 1, D]` → `[K, T, D]`.
fn map_vjp(m: &MapParts, c: &MapCache, g: Tensor<3>) -> Tensor<3> {
    let [_, _, d] = g.dims();
    let h = m.num_heads;
    let scale = ((d / h) as f64).powf(-0.5);
    let gu = linear_vjp(&m.fc2, g.clone()) * c.act_grad.clone();
    let ga = g + norm_vjp(&m.norm, &c.norm, linear_vjp(&m.fc1, gu));
    let gctx = split_heads(linear_vjp(&m.output, ga), h); // [K, H, 1, Dh]
    let gp = gctx.clone().matmul(c.v.clone().swap_dims(2, 3)); // [K, H, 1, T]
    let gv = c.probs.clone().swap_dims(2, 3).matmul(gctx); // [K, H, T, Dh]
    let gs = softmax_vjp(gp, c.probs.clone(), scale);
    let gk = gs.swap_dims(2, 3).matmul(c.q.clone()); // [K, H, T, Dh]
    linear_vjp(&m.key, merge_heads(gk)) + linear_vjp(&m.value, merge_heads(gv))
}

fn head_forward(p: &HeadParts, x: Tensor<3>) -> (Tensor<2>, HeadCache) {
    let tokens = x.dims()[1];
    let mut y = pool_tokens(p.pool, x);
    let [n, kept, d] = y.dims();
    let norm = p.norm.as_ref().map(|nm| {
        let (z, c) = norm_forward(nm, y.clone());
        y = z;
        c
    });
    let (mut pooled, map) = match &p.map {
        Some(m) => {
            let (y, c) = map_forward(m, y);
            (y, Some(c))
        }
        None => (y.mean_dim(1), None),
    }; // [1, 1, D]
    let pooled_norm = p.pooled_norm.as_ref().map(|nm| {
        let (z, c) = norm_forward(nm, pooled.clone());
        pooled = z;
        c
    });
    let pooled = pooled.reshape([n, d]);
    let out = match &p.projection {
        Some(l) => linear(l, pooled.unsqueeze_dim(1)).squeeze_dim(1),
        None => pooled,
    };
    (
        out,
        HeadCache {
            norm,
            tokens,
            kept,
            map,
            pooled_norm,
        },
    )
}

/// `[K, E]` → `[K, T, D]`.
fn head_vjp(p: &HeadParts, c: &HeadCache, g: Tensor<2>) -> Tensor<3> {
    let g = match &p.projection {
        Some(l) => linear_vjp(l, g.unsqueeze_dim(1)).squeeze_dim(1),
        None => g,
    };
    let [k, d] = g.dims();
    let device = g.device();
    let kept = c.kept;
    let mut g = g.reshape([k, 1, d]);
    if let (Some(nm), Some(nc)) = (&p.pooled_norm, &c.pooled_norm) {
        g = norm_vjp(nm, nc, g);
    }
    let g = match (&p.map, &c.map) {
        (Some(m), Some(mc)) => map_vjp(m, mc, g),
        _ => (g / kept as f64).expand([k, kept, d]),
    };
    let gz = match (&p.norm, &c.norm) {
        (Some(nm), Some(nc)) => norm_vjp(nm, nc, g),
        _ => g,
    };
    let (before, after) = match p.pool {
        Pool::Token(i) => (i, c.tokens - i - 1),
        Pool::MeanPatch { prefix } => (prefix, 0),
    };
    let mut parts = Vec::with_capacity(3);
    if before > 0 {
        parts.push(Tensor::zeros([k, before, d], &device));
    }
    parts.push(gz);
    if after > 0 {
        parts.push(Tensor::zeros([k, after, d], &device));
    }
    Tensor::cat(parts, 1)
}

impl VitParts {
    /// Runs the forward pass once from `embeddings` (the model's own embedding of the input of
    /// dims `pixel_values`, `[1, C, H, W]`: `[1, T, D]` tokens before any pre-norm, the patch
    /// tokens after the first `prefix`) and keeps what the derivatives need. `None` for a batch
    /// of more than one image: the kept activations are one image's.
    ///
    /// # Panics
    /// When `embeddings` is not `[1, prefix + ⌊H/p⌋·⌊W/p⌋, D]` for these parts (a model's
    /// `linearize` passing another model's embeddings).
    pub fn linearize(
        self,
        pixel_values: [usize; 4],
        embeddings: Tensor<3>,
        outputs: Outputs,
    ) -> Option<Linearization> {
        let [n, _, hgt, wid] = pixel_values;
        if n != 1 {
            return None;
        }
        let [_, _, ph, pw] = self.patch_weight.dims();
        let [en, t, _] = embeddings.dims();
        assert!(
            en == 1 && t == self.prefix + (hgt / ph) * (wid / pw),
            "embeddings {:?} do not fit a {hgt}×{wid} input with {} prefix tokens",
            embeddings.dims(),
            self.prefix
        );
        let mut x = embeddings.without_autodiff();
        let pre_norm = self.pre_norm.as_ref().map(|p| {
            let (y, c) = norm_forward(p, x.clone());
            x = y;
            c
        });
        let mut blocks = Vec::with_capacity(self.blocks.len());
        let mut heads = Vec::new();
        let mut outs = Vec::new();
        let depth = self.blocks.len();
        for (i, b) in self.blocks.iter().enumerate() {
            let (y, c) = block_forward(b, x);
            blocks.push(c);
            x = y;
            if outputs == Outputs::EveryBlock || i + 1 == depth {
                let (o, hc) = head_forward(&self.head, x.clone());
                heads.push((i + 1, hc));
                outs.push(o);
            }
        }
        Some(Linearization {
            parts: self,
            input: pixel_values,
            pre_norm,
            blocks,
            heads,
            outputs: outs,
        })
    }
}

impl Linearization {
    /// The outputs at the input, `[1, E_o]` each (f32, no autodiff).
    pub fn outputs(&self) -> &[Tensor<2>] {
        &self.outputs
    }

    /// `Gᵀ·J_o(x)`: the vector–Jacobian products of output `output` with each row of
    /// `cotangents`, against the one forward pass.
    ///
    /// # Shapes
    /// `cotangents: [K, E_o]` (on the model's device, autodiff or not) → `[K, C·H·W]` (the
    /// input's flattening), without autodiff.
    ///
    /// # Errors
    /// [`VjpError`] for an output that does not exist or cotangents of the wrong width.
    pub fn vjp(&self, output: usize, cotangents: Tensor<2>) -> Result<Tensor<2>, VjpError> {
        let (depth, head) = self.heads.get(output).ok_or(VjpError::Output {
            output,
            count: self.heads.len(),
        })?;
        let expected = self.outputs[output].dims()[1];
        let [k, got] = cotangents.dims();
        if got != expected {
            return Err(VjpError::Width {
                output,
                expected,
                got,
            });
        }
        let p = &self.parts;
        let mut g = head_vjp(&p.head, head, cotangents.without_autodiff());
        for (b, c) in p.blocks[..*depth].iter().zip(&self.blocks).rev() {
            g = block_vjp(b, c, g);
        }
        if let (Some(n), Some(c)) = (&p.pre_norm, &self.pre_norm) {
            g = norm_vjp(n, c, g);
        }
        // The patch convolution.
        let [_, ch, hgt, wid] = self.input;
        let [d, _, ph, pw] = p.patch_weight.dims();
        let [_, t, _] = g.dims();
        let (gh, gw) = (hgt / ph, wid / pw);
        let patches = g.slice([0..k, p.prefix..t, 0..d]).reshape([k * gh * gw, d]);
        let w = p.patch_weight.clone().reshape([d, ch * ph * pw]);
        let px = patches
            .matmul(w)
            .reshape([k, gh, gw, ch, ph, pw])
            .permute([0, 3, 1, 4, 2, 5])
            .reshape([k, ch, gh * ph, gw * pw]);
        let px = if gh * ph == hgt && gw * pw == wid {
            px
        } else {
            let device = px.device();
            Tensor::zeros([k, ch, hgt, wid], &device)
                .slice_assign([0..k, 0..ch, 0..gh * ph, 0..gw * pw], px)
        };
        Ok(px.reshape([k, ch * hgt * wid]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::module::conv2d;
    use burn::tensor::ops::ConvOptions;
    use rand::Rng;
    use rand_chacha::ChaCha8Rng;

    /// Seeded uniform values in [-0.7, 0.7) (not burn's global generator, which other tests
    /// of this binary seed).
    struct Gen(ChaCha8Rng);

    impl Gen {
        fn new(seed: u64) -> Self {
            Self(bindscope_core::rng::stream(seed, &[]))
        }

        fn t<const D: usize>(&mut self, shape: [usize; D], device: &Device) -> Tensor<D> {
            let n = shape.iter().product::<usize>();
            let v: Vec<f32> = (0..n)
                .map(|_| (self.0.random::<f32>() - 0.5) * 1.4)
                .collect();
            Tensor::<1>::from_floats(v.as_slice(), device).reshape(shape)
        }
    }

    fn lin(g: &mut Gen, d_in: usize, d_out: usize, device: &Device) -> LinearParts {
        LinearParts {
            weight: g.t([d_in, d_out], device),
            bias: Some(g.t([d_out], device)),
        }
    }

    fn norm(g: &mut Gen, d: usize, device: &Device) -> NormParts {
        NormParts {
            gamma: g.t([d], device) + 1.0,
            beta: Some(g.t([d], device)),
            eps: 1e-6,
        }
    }

    /// Width 8, 2 heads, MLP 12, two blocks with layer scale, patch 4, two prefix tokens, a
    /// pre-norm, mean pooling (or an attention pooling head) and a projection to 5.
    fn parts(g: &mut Gen, act: Activation, pool: Pool, map: bool, device: &Device) -> VitParts {
        let d = 8;
        let block = |g: &mut Gen| BlockParts {
            norm1: norm(g, d, device),
            query: lin(g, d, d, device),
            key: lin(g, d, d, device),
            value: lin(g, d, d, device),
            output: lin(g, d, d, device),
            num_heads: 2,
            attn_bias: None,
            layer_scale1: Some(g.t([d], device)),
            norm2: norm(g, d, device),
            fc1: lin(g, d, 12, device),
            act,
            fc2: lin(g, 12, d, device),
            layer_scale2: Some(g.t([d], device)),
        };
        VitParts {
            patch_weight: g.t([d, 3, 4, 4], device),
            prefix: 2,
            pre_norm: Some(norm(g, d, device)),
            blocks: vec![block(g), block(g)],
            head: HeadParts {
                norm: Some(norm(g, d, device)),
                pool,
                map: map.then(|| MapParts {
                    probe: g.t([d], device),
                    query: lin(g, d, d, device),
                    key: lin(g, d, d, device),
                    value: lin(g, d, d, device),
                    output: lin(g, d, d, device),
                    num_heads: 2,
                    norm: norm(g, d, device),
                    fc1: lin(g, d, 12, device),
                    act,
                    fc2: lin(g, 12, d, device),
                }),
                pooled_norm: None,
                projection: Some(lin(g, d, 5, device)),
            },
        }
    }

    /// The embeddings: two constant prefix tokens, then the patch convolution's tokens.
    fn embed(p: &VitParts, prefix: &Tensor<3>, x: Tensor<4>) -> Tensor<3> {
        let n = x.dims()[0];
        let y = conv2d(
            x,
            p.patch_weight.clone(),
            None,
            ConvOptions::new([4, 4], [0, 0], [1, 1], 1),
        );
        let [_, d, gh, gw] = y.dims();
        let tokens = y.reshape([n, d, gh * gw]).swap_dims(1, 2);
        Tensor::cat(vec![prefix.clone().expand([n, 2, d]), tokens], 1)
    }

    /// The same network through the forward functions, on any batch.
    fn forward(p: &VitParts, prefix: &Tensor<3>, x: Tensor<4>, depth: usize) -> Tensor<2> {
        let mut h = embed(p, prefix, x);
        if let Some(n) = &p.pre_norm {
            h = norm_forward(n, h).0;
        }
        for b in &p.blocks[..depth] {
            h = block_forward(b, h).0;
        }
        head_forward(&p.head, h).0
    }

    #[test]
    fn vjp_matches_burn_autodiff() {
        let device = bindscope_core::device::test_device();
        let mut g = Gen::new(11);
        let acts = [
            Activation::Gelu,
            Activation::QuickGelu,
            Activation::GeluTanh,
            Activation::Relu,
            Activation::Silu,
            Activation::Tanh,
        ];
        let pools = [
            Pool::MeanPatch { prefix: 2 },
            Pool::Token(0),
            Pool::Token(3),
        ];
        // Each activation with one pooling; then an attention pooling head over every token.
        // Then BEiT's shape: an attention bias, no token-wise final norm, a norm of the mean.
        let cases = acts
            .into_iter()
            .enumerate()
            .map(|(i, a)| (a, pools[i % pools.len()], false, false))
            .chain([
                (Activation::Gelu, Pool::MeanPatch { prefix: 0 }, true, false),
                (Activation::Gelu, Pool::MeanPatch { prefix: 1 }, false, true),
            ]);
        for (act, pool, map, beit) in cases {
            let mut p = parts(&mut g, act, pool, map, &device);
            if beit {
                // 2 prefix tokens + a 3 × 2 patch grid.
                for b in &mut p.blocks {
                    b.attn_bias = Some(g.t([1, 2, 8, 8], &device));
                }
                p.head.norm = None;
                p.head.pooled_norm = Some(norm(&mut g, 8, &device));
            }
            let prefix = g.t([1, 2, 8], &device);
            // 13 × 10 pixels: a 3 × 2 patch grid and pixels no patch reads.
            let x = g.t([1, 3, 13, 10], &device);
            let lin = p
                .clone()
                .linearize(
                    [1, 3, 13, 10],
                    embed(&p, &prefix, x.clone()),
                    Outputs::EveryBlock,
                )
                .unwrap();
            for (o, depth) in [1, 2].into_iter().enumerate() {
                let y = forward(&p, &prefix, x.clone(), depth);
                let e = (lin.outputs()[o].clone() - y)
                    .abs()
                    .max()
                    .into_scalar::<f32>();
                assert!(e < 1e-5, "{act:?}: output {o} differs by {e}");
                let k = 4;
                let cot = g.t([k, 5], &device);
                let xb = x.clone().autodiff().repeat_dim(0, k).require_grad();
                let yb = forward(&p, &prefix, xb.clone(), depth);
                let grads = (yb * cot.clone().autodiff()).sum().backward();
                let want = xb
                    .grad(&grads)
                    .unwrap()
                    .reshape([k, 3 * 13 * 10])
                    .without_autodiff();
                let got = lin.vjp(o, cot).unwrap();
                let scale = want.clone().abs().max().into_scalar::<f32>();
                let e = (got - want).abs().max().into_scalar::<f32>() / scale;
                assert!(
                    e < 1e-5,
                    "{act:?}, {pool:?}, map {map}, beit {beit}, output {o}: relative error {e}"
                );
            }
        }
    }

    #[test]
    fn bad_requests_are_errors() {
        let device = bindscope_core::device::test_device();
        let mut g = Gen::new(12);
        let p = parts(&mut g, Activation::Gelu, Pool::Token(0), false, &device);
        let prefix = g.t([1, 2, 8], &device);
        let x = g.t([1, 3, 8, 8], &device);
        let x2 = g.t([2, 3, 8, 8], &device);
        let two = embed(&p, &prefix, x2);
        assert!(
            p.clone()
                .linearize([2, 3, 8, 8], two, Outputs::Final)
                .is_none(),
            "a batch of two images"
        );
        let lin = p
            .clone()
            .linearize([1, 3, 8, 8], embed(&p, &prefix, x), Outputs::Final)
            .unwrap();
        let e = lin.vjp(1, g.t([2, 5], &device)).unwrap_err();
        assert!(
            matches!(
                e,
                VjpError::Output {
                    output: 1,
                    count: 1
                }
            ),
            "{e}"
        );
        let e = lin.vjp(0, g.t([2, 4], &device)).unwrap_err();
        assert!(
            e.to_string().contains("width 4") && e.to_string().contains("dimension 5"),
            "{e}"
        );
    }
}
