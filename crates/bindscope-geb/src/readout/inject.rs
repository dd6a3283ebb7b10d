//! The injection path (§3, eq. 3): a batch of [`Sequence`]s padded on the right to its longest
//! member (dynamic padding), the token embeddings looked up, and at every slot the adapter's
//! output put in place of the slot token's embedding, through the decoder's `inputs_embeds`.
//!
//! The replacement is arithmetic on one-hot position masks, `E · (1 − Σₖ Pₖ) + Σₖ Pₖ ⊗ hₖ`, so
//! it is exact (products with 0 and 1) and differentiable in both the decoder's embeddings and
//! the adapters.

use bindscope_models::{CausalLm, CausalLmOutput, ForwardOptions, LmInput, ModelError};
use burn::prelude::*;

use super::chat::{IGNORE, Sequence};

/// A right-padded batch on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBatch {
    /// `N` rows of `T` ids; slot positions and padding hold `fill` (a valid id).
    pub input_ids: Vec<i64>,
    /// `[N, T]`: 1 = token, 0 = padding.
    pub attention_mask: Vec<i64>,
    /// `[N, T]`: targets, [`IGNORE`] at unsupervised positions and padding.
    pub labels: Vec<i64>,
    /// `slots[k][i]`: the position of slot `k` in row `i`.
    pub slots: Vec<Vec<usize>>,
    /// Rows.
    pub n: usize,
    /// Padded length.
    pub t: usize,
    /// Supervised targets in the batch (positions after the first whose label is not
    /// [`IGNORE`]): the loss's denominator.
    pub targets: usize,
}

impl HostBatch {
    /// Pads `seqs` (each with the same number of slots) on the right; `fill` is the id put at
    /// padding and slot positions (any valid id: neither is looked at).
    ///
    /// # Panics
    /// Never for sequences built by [`super::chat::ChatFormat::sequences`]; an empty batch or
    /// rows with different slot counts are caller bugs and panic.
    pub fn new(seqs: &[&Sequence], fill: u32) -> Self {
        assert!(!seqs.is_empty(), "empty batch");
        let n = seqs.len();
        let k = seqs[0].slots.len();
        assert!(
            seqs.iter().all(|s| s.slots.len() == k),
            "rows with different slot counts"
        );
        let t = seqs.iter().map(|s| s.input_ids.len()).max().unwrap_or(0);
        let mut input_ids = vec![i64::from(fill); n * t];
        let mut attention_mask = vec![0; n * t];
        let mut labels = vec![IGNORE; n * t];
        let mut slots = vec![Vec::with_capacity(n); k];
        let mut targets = 0;
        for (i, s) in seqs.iter().enumerate() {
            for (p, (&id, &l)) in s.input_ids.iter().zip(&s.labels).enumerate() {
                input_ids[i * t + p] = i64::from(id);
                attention_mask[i * t + p] = 1;
                labels[i * t + p] = l;
                if p > 0 && l != IGNORE {
                    targets += 1;
                }
            }
            for (j, &p) in s.slots.iter().enumerate() {
                input_ids[i * t + p] = i64::from(fill);
                slots[j].push(p);
            }
        }
        Self {
            input_ids,
            attention_mask,
            labels,
            slots,
            n,
            t,
            targets,
        }
    }

    /// Pads prompts on the left (for generation: every row's last position is its last
    /// token), with [`HostBatch::new`]'s conventions otherwise.
    ///
    /// # Panics
    /// As [`HostBatch::new`].
    pub fn left_padded(seqs: &[&Sequence], fill: u32) -> Self {
        let t = seqs.iter().map(|s| s.input_ids.len()).max().unwrap_or(0);
        let shifted: Vec<Sequence> = seqs
            .iter()
            .map(|s| {
                let pad = t - s.input_ids.len();
                Sequence {
                    conversation: s.conversation.clone(),
                    turn: s.turn,
                    input_ids: std::iter::repeat_n(fill, pad)
                        .chain(s.input_ids.iter().copied())
                        .collect(),
                    labels: std::iter::repeat_n(IGNORE, pad)
                        .chain(s.labels.iter().copied())
                        .collect(),
                    slots: s.slots.iter().map(|&p| p + pad).collect(),
                }
            })
            .collect();
        let refs: Vec<&Sequence> = shifted.iter().collect();
        let mut b = Self::new(&refs, fill);
        for (i, s) in seqs.iter().enumerate() {
            let pad = t - s.input_ids.len();
            for p in 0..t {
                b.attention_mask[i * t + p] = i64::from(p >= pad);
            }
        }
        b
    }

    /// The attention mask as rows of 0/1.
    pub fn mask_rows(&self) -> Vec<Vec<u8>> {
        self.attention_mask
            .chunks(self.t.max(1))
            .map(|r| r.iter().map(|&m| m as u8).collect())
            .collect()
    }

    /// Real (unpadded) tokens in the batch.
    pub fn tokens(&self) -> usize {
        self.attention_mask.iter().filter(|&&m| m == 1).count()
    }

    fn ints(&self, v: &[i64], device: &Device) -> Tensor<2, Int> {
        Tensor::<1, Int>::from_ints(v, device).reshape([self.n, self.t])
    }

    /// The supervised positions as rows of the flattened `[N·T, D]` hidden state and their
    /// targets: row `i·T + p` predicts `labels[i, p + 1]` wherever that is not [`IGNORE`]
    /// (the next-token shift). `targets` of them, in row-major order.
    pub fn supervised(&self) -> (Vec<i64>, Vec<i64>) {
        let mut rows = Vec::with_capacity(self.targets);
        let mut next = Vec::with_capacity(self.targets);
        for i in 0..self.n {
            for p in 1..self.t {
                let l = self.labels[i * self.t + p];
                if l != IGNORE {
                    rows.push((i * self.t + p - 1) as i64);
                    next.push(l);
                }
            }
        }
        (rows, next)
    }

    /// `[N, T]` attention mask on `device` (1 = token, 0 = padding).
    pub fn attention_mask(&self, device: &Device) -> Tensor<2, Int> {
        self.ints(&self.attention_mask, device)
    }

    /// `[N, T]` labels on `device`.
    pub fn labels(&self, device: &Device) -> Tensor<2, Int> {
        self.ints(&self.labels, device)
    }

    /// `inputs_embeds` `[N, T, D]`: the decoder's token embeddings with slot `k` of every row
    /// replaced by `h[k]`'s row (`h[k]: [N, D]`).
    ///
    /// # Panics
    /// When `h` does not hold one `[N, D]` tensor per slot (a caller bug).
    pub fn inputs_embeds(&self, lm: &dyn CausalLm, h: &[Tensor<2>], device: &Device) -> Tensor<3> {
        assert_eq!(h.len(), self.slots.len(), "one embedding per slot");
        let device = device.clone();
        let emb = lm.embed_tokens(self.ints(&self.input_ids, &device)); // [N, T, D]
        if h.is_empty() {
            return emb;
        }
        let [n, t, d] = emb.dims();
        let mut keep = vec![1f32; n * t];
        let mut out = None;
        for (k, hk) in h.iter().enumerate() {
            let mut onehot = vec![0f32; n * t];
            for (i, &p) in self.slots[k].iter().enumerate() {
                onehot[i * t + p] = 1.0;
                keep[i * t + p] = 0.0;
            }
            let pk = Tensor::<1>::from_floats(onehot.as_slice(), &device).reshape([n, t, 1]);
            let placed = pk * hk.clone().cast(emb.dtype()).reshape([n, 1, d]);
            out = Some(match out {
                None => placed,
                Some(o) => o + placed,
            });
        }
        let keep = Tensor::<1>::from_floats(keep.as_slice(), &device).reshape([n, t, 1]);
        emb * keep + out.expect("at least one slot")
    }

    /// The decoder's forward pass over the batch with `h` injected.
    ///
    /// # Errors
    /// The decoder's: a batch longer than its context.
    pub fn forward(
        &self,
        lm: &dyn CausalLm,
        h: &[Tensor<2>],
        device: &Device,
    ) -> Result<CausalLmOutput, ModelError> {
        let embeds = self.inputs_embeds(lm, h, device);
        let mut cache = lm.new_cache();
        lm.forward_causal(
            LmInput::Embeds(embeds),
            Some(self.attention_mask(device)),
            None,
            &mut cache,
            ForwardOptions::default(),
        )
    }
}
