//! The trainable readout: the decoder and one adapter per embedding slot, as one burn module
//! (what the optimizer steps and a checkpoint saves). The embedder is not part of it: it is
//! frozen and its embeddings are computed beforehand.

use bindscope_core::train::{next_token_cross_entropy, token_cross_entropy};
use bindscope_models::llama::LlamaForCausalLM;
use bindscope_models::{CausalLm, LmInput, ModelError};
use burn::module::Module;
use burn::prelude::*;

use super::adapter::EmbeddingAdapter;
use super::inject::HostBatch;

/// A decoder with one [`EmbeddingAdapter`] per slot (visual-only: one; VL-joint with a
/// two-tower embedder: image and question; the text-only control: none).
#[derive(Module, Debug)]
pub struct GenerativeReadout {
    /// The decoder LM (every weight trainable unless LoRA wraps it).
    pub decoder: LlamaForCausalLM,
    /// `adapters[k]` maps slot `k`'s embedding.
    pub adapters: Vec<EmbeddingAdapter>,
}

impl GenerativeReadout {
    /// The slots' decoder input embeddings: `adapters[k]` applied to `embeddings[k]` (`[N, d_k]`
    /// each) → `[N, D]` each.
    ///
    /// # Panics
    /// When `embeddings` does not hold one tensor per adapter (a caller bug).
    pub fn slot_embeddings(&self, embeddings: &[Tensor<2>]) -> Vec<Tensor<2>> {
        assert_eq!(
            embeddings.len(),
            self.adapters.len(),
            "one embedding per adapter"
        );
        self.adapters
            .iter()
            .zip(embeddings)
            .map(|(a, e)| a.forward(e.clone()))
            .collect()
    }

    /// Logits `[N, T, V]` of `batch` with `embeddings` injected.
    ///
    /// # Errors
    /// The decoder's (a batch longer than its context).
    pub fn logits(
        &self,
        batch: &HostBatch,
        embeddings: &[Tensor<2>],
        device: &Device,
    ) -> Result<Tensor<3>, ModelError> {
        let h = self.slot_embeddings(embeddings);
        Ok(batch.forward(&self.decoder, &h, device)?.logits)
    }

    /// The assistant-only next-token loss of `batch` (the mean over its supervised targets):
    /// transformers' `ForCausalLMLoss` over the full logits, computed with the LM head applied
    /// to the supervised positions only ([`HostBatch::supervised`]) — the same value, without
    /// the `[N, T, V]` logits of the masked system, user and template positions.
    ///
    /// # Errors
    /// As [`GenerativeReadout::logits`].
    pub fn loss(
        &self,
        batch: &HostBatch,
        embeddings: &[Tensor<2>],
        device: &Device,
    ) -> Result<Tensor<1>, ModelError> {
        let h = self.slot_embeddings(embeddings);
        let embeds = batch.inputs_embeds(&self.decoder, &h, device);
        let mut cache = self.decoder.new_cache();
        let x = self.decoder.final_hidden(
            LmInput::Embeds(embeds),
            Some(batch.attention_mask(device)),
            None,
            &mut cache,
        )?; // [N, T, D]
        let [n, t, d] = x.dims();
        let (rows, targets) = batch.supervised();
        let m = rows.len();
        let rows = Tensor::<1, Int>::from_ints(rows.as_slice(), device);
        let picked = x.reshape([n * t, d]).select(0, rows).reshape([1, m, d]);
        let logits = self.decoder.lm_logits(picked); // [1, M, V]
        let [_, _, v] = logits.dims();
        let logits = logits.reshape([m, v]);
        let targets = Tensor::<1, Int>::from_ints(targets.as_slice(), device);
        Ok(token_cross_entropy(logits, targets))
    }

    /// [`GenerativeReadout::loss`] from the full `[N, T, V]` logits
    /// ([`next_token_cross_entropy`]), as transformers computes it; the reference the
    /// supervised-rows path is checked against.
    ///
    /// # Errors
    /// As [`GenerativeReadout::logits`].
    pub fn loss_full_logits(
        &self,
        batch: &HostBatch,
        embeddings: &[Tensor<2>],
        device: &Device,
    ) -> Result<Tensor<1>, ModelError> {
        let logits = self.logits(batch, embeddings, device)?;
        Ok(next_token_cross_entropy(logits, batch.labels(device)))
    }
}
