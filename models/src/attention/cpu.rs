//! Scaled dot-product attention on the CPU for f32 burn-flex tensors outside autodiff: the
//! forward passes of every encoder and decoder when no attention probabilities are requested.
//!
//! burn-flex's `attention` runs one (batch, head) per task: a naive kernel up to 256 K scores
//! per head and, above that, a flash kernel over 64-key tiles that multiplies every query row
//! by every key tile, including the tiles a causal mask removes, and takes `exp` one element at
//! a time. Here each task is a block of [`BLOCK_Q`] query rows of one head:
//! 1. `S = Q_blk · K[..k_end]ᵀ` (faer, on the task's thread), where `k_end` is the last key a
//!    row of the block may see (all keys without a mask; under a causal mask the keys past the
//!    block's last query are never multiplied);
//! 2. per row, the exact softmax of `S·scale` over its visible keys — the row maximum, `exp` in
//!    a form the compiler vectorises (`crate::vmath`), the sum in 16 lanes — and
//!    zeros for the keys a causal mask hides inside the block;
//! 3. `O_blk = P · V[..k_end]` (faer), written straight into the output.
//!
//! The score rows of one block stay in the cache, and only the block's `[BLOCK_Q, k_end]`
//! scores exist at a time. Grouped-query attention reads key/value head `h / (H / H_kv)` in
//! place (no repeated copy), and any non-negative strides are read in place (the heads split
//! out of `[N, T, H·Dh]` are strided views).
//!
//! The result equals softmax(Q·Kᵀ·scale)·V up to float rounding (summation order and `exp`
//! within 2 ulp, `crate::vmath`): checked against burn's kernel and a direct
//! f64 evaluation in this module's tests, and by the model parity suites.

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn::prelude::*;
use burn::tensor::{DType, TensorData};
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

use crate::vmath::{exp_nonpositive, vectorized};

/// Query rows per task.
const BLOCK_Q: usize = 64;

/// The masks this kernel takes; every other mask goes to burn's kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CpuMask {
    /// Every query sees every key.
    None,
    /// Query `i` sees keys `j ≤ T_k − T_q + i` (requires `T_k ≥ T_q`, so that every row sees at
    /// least one key).
    Causal,
}

/// A read-only strided view of a rank-4 f32 burn-flex tensor, checked by
/// [`crate::nn::strided_f32`] (`None` for a negative stride or a layout that reads past the
/// storage).
type View<'a> = crate::nn::Strided<'a, 4>;

impl<'a> View<'a> {
    /// Rows `rows` of the `[T, D]` matrix of batch `n`, head `h`.
    fn matrix(&self, n: usize, h: usize, rows: std::ops::Range<usize>) -> MatRef<'a, f32> {
        debug_assert!(rows.end <= self.dims[2]);
        let offset =
            self.start + n * self.strides[0] + h * self.strides[1] + rows.start * self.strides[2];
        // SAFETY: every element read lies at or below the view's last element, which
        // `strided_f32` checked against the storage's length; the view borrows the tensor that owns it.
        unsafe {
            MatRef::from_raw_parts(
                self.data.as_ptr().add(offset),
                rows.len(),
                self.dims[3],
                self.strides[2] as isize,
                self.strides[3] as isize,
            )
        }
    }
}

/// softmax(Q·Kᵀ·scale + mask)·V for `q: [N, H, T_q, Dh]`, `k`, `v: [N, H_kv, T_k, Dh]`
/// (f32, on burn-flex, not tracked by autodiff), returned as `[N, H, T_q, Dh]`; `None` for
/// anything else (another device or dtype, autodiff, a causal mask with more queries than keys,
/// a layout with negative strides), which the caller hands to burn.
pub(super) fn attention(
    q: &Tensor<4>,
    k: &Tensor<4>,
    v: &Tensor<4>,
    mask: CpuMask,
    scale: f32,
) -> Option<Tensor<4>> {
    let [n, h, tq, dh] = q.dims();
    let [_, hkv, tk, _] = k.dims();
    let eligible = [q, k, v]
        .iter()
        .all(|t| t.dtype() == DType::F32 && !t.is_autodiff())
        && hkv > 0
        && h % hkv == 0
        && tq > 0
        && tk > 0
        && dh > 0
        && v.dims()[3] == dh
        && !(mask == CpuMask::Causal && tk < tq);
    if !eligible {
        return None;
    }
    let qp = q.clone().try_into_primitive::<Flex>().ok()?;
    let kp = k.clone().try_into_primitive::<Flex>().ok()?;
    let vp = v.clone().try_into_primitive::<Flex>().ok()?;
    let (qv, kv, vv) = (
        crate::nn::strided_f32::<4>(&qp)?,
        crate::nn::strided_f32::<4>(&kp)?,
        crate::nn::strided_f32::<4>(&vp)?,
    );
    let group = h / hkv;
    let offset = tk - if mask == CpuMask::Causal { tq } else { tk };
    let mut out = vec![0f32; n * h * tq * dh];
    out.par_chunks_mut(tq * dh)
        .enumerate()
        .for_each(|(head, out_head)| {
            let (b, hq) = (head / h, head % h);
            out_head
                .par_chunks_mut(BLOCK_Q * dh)
                .enumerate()
                .for_each_init(Vec::new, |scores, (blk, out_blk)| {
                    let q0 = blk * BLOCK_Q;
                    let rows = out_blk.len() / dh;
                    // The last key any row of the block sees, exclusive.
                    let k_end = match mask {
                        CpuMask::None => tk,
                        CpuMask::Causal => offset + q0 + rows,
                    };
                    scores.clear();
                    scores.resize(rows * k_end, 0.0);
                    let mut s = MatMut::from_row_major_slice_mut(scores, rows, k_end);
                    faer::linalg::matmul::matmul(
                        s.as_mut(),
                        Accum::Replace,
                        qv.matrix(b, hq, q0..q0 + rows),
                        kv.matrix(b, hq / group, 0..k_end).transpose(),
                        1.0f32,
                        Par::Seq,
                    );
                    for (i, row) in scores.chunks_exact_mut(k_end).enumerate() {
                        let visible = match mask {
                            CpuMask::None => k_end,
                            CpuMask::Causal => offset + q0 + i + 1,
                        };
                        softmax_row(row, visible, scale);
                    }
                    faer::linalg::matmul::matmul(
                        MatMut::from_row_major_slice_mut(out_blk, rows, dh),
                        Accum::Replace,
                        MatRef::from_row_major_slice(scores, rows, k_end),
                        vv.matrix(b, hq / group, 0..k_end),
                        1.0f32,
                        Par::Seq,
                    );
                });
        });
    Some(Tensor::from_primitive::<Flex>(FlexTensor::from_data(
        TensorData::new(out, [n, h, tq, dh]),
    )))
}

/// `row[..visible]` ← softmax(`row[..visible]`·scale), `row[visible..]` ← 0; vectorised for
/// the CPU's widest extension, the reductions in [`LANES`] independent accumulators.
fn softmax_row(row: &mut [f32], visible: usize, scale: f32) {
    vectorized(|| {
        let (head, tail) = row.split_at_mut(visible);
        tail.fill(0.0);
        for x in head.iter_mut() {
            *x *= scale;
        }
        let mut lanes = [f32::NEG_INFINITY; LANES];
        let mut chunks = head.chunks_exact(LANES);
        for c in &mut chunks {
            for (m, &x) in lanes.iter_mut().zip(c) {
                *m = if x > *m { x } else { *m };
            }
        }
        let max = chunks
            .remainder()
            .iter()
            .chain(&lanes)
            .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
        for x in head.iter_mut() {
            *x = exp_nonpositive(*x - max);
        }
        let mut sums = [0f32; LANES];
        let mut chunks = head.chunks_exact(LANES);
        for c in &mut chunks {
            for (s, &x) in sums.iter_mut().zip(c) {
                *s += x;
            }
        }
        let sum: f32 = sums.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>();
        let inv = 1.0 / sum;
        for x in head.iter_mut() {
            *x *= inv;
        }
    })
}

/// Lanes of the vectorised reductions.
const LANES: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut rng = bindscope_core::rng::stream(seed, &[]);
        (0..n).map(|_| rng.random::<f32>() * 4.0 - 2.0).collect()
    }

    /// softmax(Q·Kᵀ·scale + causal)·V in f64 on the host, `[N, H, T_q, Dh]` from contiguous
    /// `[N, H, T, Dh]` / `[N, H_kv, T, Dh]` data.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        [n, h, hkv, tq, tk, dh]: [usize; 6],
        causal: bool,
        scale: f64,
    ) -> Vec<f64> {
        let mut out = vec![0f64; n * h * tq * dh];
        for b in 0..n {
            for hq in 0..h {
                let kh = hq / (h / hkv);
                for i in 0..tq {
                    let qi = &q[((b * h + hq) * tq + i) * dh..][..dh];
                    let visible = if causal { tk - tq + i + 1 } else { tk };
                    let scores: Vec<f64> = (0..visible)
                        .map(|j| {
                            let kj = &k[((b * hkv + kh) * tk + j) * dh..][..dh];
                            qi.iter()
                                .zip(kj)
                                .map(|(&a, &c)| a as f64 * c as f64)
                                .sum::<f64>()
                                * scale
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let z: f64 = e.iter().sum();
                    let o = &mut out[((b * h + hq) * tq + i) * dh..][..dh];
                    for (j, w) in e.iter().enumerate() {
                        let vj = &v[((b * hkv + kh) * tk + j) * dh..][..dh];
                        for (o, &x) in o.iter_mut().zip(vj) {
                            *o += w / z * x as f64;
                        }
                    }
                }
            }
        }
        out
    }

    /// Several query blocks, a partial last block, grouped-query heads, a causal block after a
    /// cache (`T_k > T_q`), a single decoding row, and queries that are a strided view (heads
    /// split out of `[N, T, H·Dh]`): within 2e-6 of the f64 evaluation.
    #[test]
    fn blocked_attention_matches_a_direct_f64_evaluation() {
        let device = Device::flex();
        let cases = [
            // n, h, hkv, tq, tk, dh, causal
            (2, 4, 2, 150, 150, 16, true),
            (1, 6, 2, 70, 200, 8, true),
            (1, 3, 1, 1, 97, 32, true),
            (3, 2, 2, 130, 130, 24, false),
            (1, 2, 2, 5, 300, 12, false),
        ];
        for (seed, &(n, h, hkv, tq, tk, dh, causal)) in cases.iter().enumerate() {
            let seed = seed as u64 * 3;
            let (qd, kd, vd) = (
                values(seed, n * h * tq * dh),
                values(seed + 1, n * hkv * tk * dh),
                values(seed + 2, n * hkv * tk * dh),
            );
            // Q stored as [N, T, H, Dh] and viewed as [N, H, T, Dh], as `split_heads` gives it.
            let mut q_nthd = vec![0f32; qd.len()];
            for b in 0..n {
                for hq in 0..h {
                    for t in 0..tq {
                        for d in 0..dh {
                            q_nthd[((b * tq + t) * h + hq) * dh + d] =
                                qd[((b * h + hq) * tq + t) * dh + d];
                        }
                    }
                }
            }
            let q = Tensor::<4>::from_data(TensorData::new(q_nthd, [n, tq, h, dh]), &device)
                .swap_dims(1, 2);
            let k = Tensor::<4>::from_data(TensorData::new(kd.clone(), [n, hkv, tk, dh]), &device);
            let v = Tensor::<4>::from_data(TensorData::new(vd.clone(), [n, hkv, tk, dh]), &device);
            let scale = 1.0 / (dh as f64).sqrt();
            let mask = if causal {
                CpuMask::Causal
            } else {
                CpuMask::None
            };
            let got = attention(&q, &k, &v, mask, scale as f32)
                .unwrap_or_else(|| panic!("case {seed}: the kernel refused"));
            assert_eq!(got.dims(), [n, h, tq, dh]);
            let got: Vec<f32> = got.into_data().try_into_vec().unwrap();
            let want = reference(&qd, &kd, &vd, [n, h, hkv, tq, tk, dh], causal, scale);
            let worst = got
                .iter()
                .zip(&want)
                .map(|(&a, &b)| (a as f64 - b).abs())
                .fold(0.0, f64::max);
            assert!(worst <= 2e-6, "case {seed}: max abs error {worst:e}");
        }
    }

    /// Autodiff tensors, other dtypes and more queries than keys under a causal mask are left
    /// to burn's kernel.
    #[test]
    fn other_inputs_are_handed_back() {
        let device = Device::flex();
        let t = |tq: usize| Tensor::<4>::ones([1, 2, tq, 4], &device);
        assert!(attention(&t(5), &t(3), &t(3), CpuMask::Causal, 0.5).is_none());
        let half = t(3).cast(DType::F16);
        assert!(attention(&half, &half, &half, CpuMask::None, 0.5).is_none());
        let a = Tensor::<4>::ones([1, 2, 3, 4], &device.autodiff()).require_grad();
        assert!(attention(&a, &a, &a, CpuMask::None, 0.5).is_none());
    }
}
