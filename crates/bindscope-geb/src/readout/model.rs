//! The trainable readout: the decoder and one adapter per embedding slot, as one burn module
//! (what the optimizer steps and a checkpoint saves). The embedder is not part of it: it is
//! frozen and its embeddings are computed beforehand.

use bindscope_core::train::next_token_cross_entropy;
use bindscope_models::ModelError;
use bindscope_models::llama::LlamaForCausalLM;
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

    /// The assistant-only next-token loss of `batch` (the mean over its supervised targets).
    ///
    /// # Errors
    /// As [`GenerativeReadout::logits`].
    pub fn loss(
        &self,
        batch: &HostBatch,
        embeddings: &[Tensor<2>],
        device: &Device,
    ) -> Result<Tensor<1>, ModelError> {
        let logits = self.logits(batch, embeddings, device)?;
        Ok(next_token_cross_entropy(logits, batch.labels(device)))
    }
}
