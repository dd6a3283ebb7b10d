//! What `finetune train` measures on each model (base, finetuned without and with LiNeS):
//! triplet accuracy and per-layer attention binding margins on every evaluation set
//! ([`crate::eval`]), and SABER text→text MCQ accuracy (`bindscope-saber`).

use crate::eval::{TripletAccuracy, attention_margins, evaluate_triplets};
use crate::example::Triplet;
use anyhow::{Result, anyhow};
use bindscope_data::text::Tokenizer;
use bindscope_models::TextEncoder;
use bindscope_saber::McqItem;
use bindscope_saber::eval::McqSummary;
use burn::tensor::Device;
use std::collections::BTreeMap;

/// The mean attention binding margin of each layer over a set ([`crate::attention`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AttentionMargin {
    /// Per layer (0-based), `None` where no caption had a margin.
    pub per_layer: Vec<Option<f64>>,
    /// Captions with a margin in the first layer.
    pub captions: usize,
}

/// Everything measured on one model.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measurement {
    /// Triplet accuracy per evaluation set.
    pub triplet_accuracy: BTreeMap<String, TripletAccuracy>,
    /// Attention binding margins per evaluation set.
    pub attention_margin: BTreeMap<String, AttentionMargin>,
    /// SABER text→text MCQ accuracy, `None` without SABER items.
    pub saber_text_to_text: Option<McqSummary>,
}

/// Measures `model` on every named set of `sets` and on the SABER items (`batch` texts per
/// forward pass).
///
/// # Errors
/// Tokenization and embedding errors.
pub fn measure(
    model: &dyn TextEncoder,
    tok: &Tokenizer,
    device: &Device,
    sets: &[(&str, Vec<Triplet>)],
    saber: &[McqItem],
    batch: usize,
) -> Result<Measurement> {
    let mut triplet_accuracy = BTreeMap::new();
    let mut attention_margin = BTreeMap::new();
    for (name, t) in sets {
        triplet_accuracy.insert(
            (*name).to_string(),
            evaluate_triplets(model, tok, device, t, batch).map_err(|e| anyhow!(e))?,
        );
        let m = attention_margins(model, tok, device, t, batch).map_err(|e| anyhow!(e))?;
        attention_margin.insert(
            (*name).to_string(),
            AttentionMargin {
                per_layer: m.means(),
                captions: m.count.first().copied().unwrap_or(0),
            },
        );
    }
    let saber_text_to_text = if saber.is_empty() {
        None
    } else {
        let table = bindscope_saber::embed::embed_items_text(
            saber,
            tok,
            model,
            device,
            batch,
            &mut |_, _| {},
        )?;
        Some(bindscope_saber::eval::text_mcq_accuracy(saber, &table))
    };
    Ok(Measurement {
        triplet_accuracy,
        attention_margin,
        saber_text_to_text,
    })
}
