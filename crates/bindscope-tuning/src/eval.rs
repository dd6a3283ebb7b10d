//! Evaluation of a (finetuned) text encoder: triplet accuracy and per-layer attention binding
//! margins. SABER text→text accuracy comes from `bindscope-saber`.
//!
//! Triplet accuracy: the share of triplets whose positive is closer to the anchor than the
//! negative (cosine of the model's sentence embeddings; an exact tie counts ½). Chance is 50 %.

use crate::attention::{MarginStats, binding_weights, caption_margins, margins};
use crate::example::Triplet;
use bindscope_data::text::Tokenizer;
use bindscope_models::{ForwardOptions, TextEncoder};
use bindscope_saber::embed::{EmbeddingTable, EncoderEmbedder, embed_texts_cached};
use burn::prelude::*;
use std::collections::BTreeMap;

/// Embeds every distinct text (sorted by length, `batch` per forward pass).
///
/// # Errors
/// Tokenization errors.
pub fn embed_texts(
    model: &dyn TextEncoder,
    tokenizer: &Tokenizer,
    device: &Device,
    texts: &[&str],
    batch: usize,
) -> Result<EmbeddingTable, String> {
    let mut table = EmbeddingTable::default();
    let embedder = EncoderEmbedder {
        tokenizer,
        model,
        device,
    };
    embed_texts_cached(&embedder, texts, &mut table, batch, &mut |_, _| {})
        .map_err(|e| e.to_string())?;
    Ok(table)
}

/// Triplet accuracy, overall and per construction type.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TripletAccuracy {
    /// Triplets scored.
    pub triplets: usize,
    /// Share correct (ties ½).
    pub accuracy: f64,
    /// Mean `cos(a, p) − cos(a, n)`.
    pub mean_gap: f64,
    /// `(type, accuracy)`.
    pub per_type: BTreeMap<String, f64>,
}

/// Scores triplets against a table holding all their texts.
///
/// # Panics
/// When a text is missing from the table (embed the triplets' texts first).
pub fn triplet_accuracy(triplets: &[Triplet], table: &EmbeddingTable) -> TripletAccuracy {
    let mut per: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    let (mut credit, mut gap) = (0.0, 0.0);
    for t in triplets {
        let cos = |x: &str, y: &str| {
            f64::from(
                table
                    .cosine(x, y)
                    .unwrap_or_else(|| panic!("text not embedded: '{x}' / '{y}'")),
            )
        };
        let (p, n) = (cos(&t.anchor, &t.positive), cos(&t.anchor, &t.negative));
        let c = if p > n {
            1.0
        } else if p == n {
            0.5
        } else {
            0.0
        };
        credit += c;
        gap += p - n;
        let e = per.entry(t.construction.name().to_string()).or_default();
        e.0 += 1;
        e.1 += c;
    }
    let k = triplets.len().max(1) as f64;
    TripletAccuracy {
        triplets: triplets.len(),
        accuracy: credit / k,
        mean_gap: gap / k,
        per_type: per
            .into_iter()
            .map(|(k, (n, c))| (k, c / n as f64))
            .collect(),
    }
}

/// Embeds a set of triplets and scores them.
///
/// # Errors
/// Tokenization errors.
pub fn evaluate_triplets(
    model: &dyn TextEncoder,
    tokenizer: &Tokenizer,
    device: &Device,
    triplets: &[Triplet],
    batch: usize,
) -> Result<TripletAccuracy, String> {
    let texts: Vec<&str> = triplets
        .iter()
        .flat_map(|t| [t.anchor.as_str(), t.positive.as_str(), t.negative.as_str()])
        .collect();
    let table = embed_texts(model, tokenizer, device, &texts, batch)?;
    Ok(triplet_accuracy(triplets, &table))
}

/// Mean attention binding margin per layer over the anchors and positives of `triplets` (each
/// distinct text once; see [`crate::attention`]).
///
/// # Errors
/// Tokenization errors.
pub fn attention_margins(
    model: &dyn TextEncoder,
    tokenizer: &Tokenizer,
    device: &Device,
    triplets: &[Triplet],
    batch: usize,
) -> Result<MarginStats, String> {
    let mut seen = std::collections::HashSet::new();
    let captions: Vec<(&str, &[[String; 2]])> = triplets
        .iter()
        .flat_map(|t| {
            [
                (t.anchor.as_str(), t.bindings.as_slice()),
                (t.positive.as_str(), t.bindings.as_slice()),
            ]
        })
        .filter(|(s, _)| seen.insert(*s))
        .collect();
    let mut stats = MarginStats::default();
    for chunk in captions.chunks(batch.max(1)) {
        let texts: Vec<&str> = chunk.iter().map(|c| c.0).collect();
        let binds: Vec<&[[String; 2]]> = chunk.iter().map(|c| c.1).collect();
        let enc = tokenizer.encode_batch(&texts).map_err(|e| e.to_string())?;
        let w = binding_weights(tokenizer, &texts, &binds, enc.seq_len())?;
        let (ids, mask) = enc.tensors(device);
        let out = model.forward_text(
            ids,
            mask,
            ForwardOptions {
                output_hidden_states: false,
                output_attentions: true,
                attention_last_rows: None,
            },
        );
        let atts = out
            .attentions
            .ok_or("the model returned no attention maps")?;
        for (l, a) in atts.into_iter().enumerate() {
            stats.add(l, &caption_margins(margins(a, &w), &w));
        }
    }
    Ok(stats)
}
