//! GEB's generative readout (§3): a decoder LM that never sees the image reads one frozen
//! embedding through an adapter and answers from it.
//!
//! [`conversation`] (LLaVA-format training data, checked as a whole) → [`chat`] (the slot
//! token, the decoder's native chat template, assistant-only labels per [`chat::Mode`]) →
//! [`inject`] (right-padded batches; the adapter's output in place of each slot through
//! `inputs_embeds`) with [`adapter`] (eq. 1–3). The loss is
//! [`bindscope_core::train::next_token_cross_entropy`] over the labels.

pub mod adapter;
pub mod chat;
pub mod conversation;
pub mod embeddings;
pub mod eval;
pub mod inject;
pub mod model;
pub mod standardize;
pub mod train;
