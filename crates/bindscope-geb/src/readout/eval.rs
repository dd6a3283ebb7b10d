//! Evaluation of a trained readout (§5, Table 5): GEB manifests, the prompts, greedy decoding
//! with each source task's generation budget, and the controls.
//!
//! ## Manifest (JSONL, one item per line)
//! | field | type | |
//! |---|---|---|
//! | `id` | string | unique |
//! | `source` | string | one of the eight sources of [`crate::metrics::Source`] |
//! | `category` | string | optional: `natural`, `scene_text`, `document` (default by source) |
//! | `question` | string | the prompt text, as the source task writes it |
//! | `answers` | list of strings | as in a prediction file ([`crate::records`]) |
//! | `image` | string | path under the image root |
//! | `image_group` | string | items about the same image share it |
//! | `sha256` | string | the image file's SHA-256, 64 hex digits |
//! | `options` | list of strings | optional (lettered choices, already in `question`) |
//! | `dataset` | string | optional, OCRBench's |
//!
//! ## Prompt
//! One user turn, `<EMBED_PAD>`×slots + `\n` + question, under the decoder's chat template with
//! the generation prompt (the shape of the first training turn); greedy decoding until an EOS
//! id or [`max_new_tokens`].
//!
//! ## Controls
//! - [`Control::Matched`]: each item with its own embedding.
//! - [`Control::Zero`]: every embedding replaced by the zero vector (the adapter then gives a
//!   constant: its LayerNorm's bias through the MLP). For a `--standardize` run the zero vector
//!   is the standardised input, i.e. the training mean embedding ([`super::standardize`]).
//! - [`Control::Shuffled`]: within each evaluation batch the embeddings are cyclically shifted
//!   by one position (`torch.roll(e, 1, dims=0)`: row `i` takes row `i − 1`), as the paper
//!   does. A batch of one item is its own shift: evaluation batches of the shuffled control are
//!   at least 2 items, and the rows that still receive an embedding of their own image group
//!   are counted ([`shifted_rows`]).
//! - [`Control::Mismatch`] (VL-joint): the question slot takes the embedding of another
//!   question about the same image (the next item of its `image_group`, cyclically); an item
//!   alone in its group has no partner and is left out of that control, counted and listed.
//! - The text-only control is a decoder trained with no slot ([`super::chat::ChatFormat::
//!   messages`] with 0 slots), evaluated with the same prompts minus the slots.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::Value;

use crate::metrics::{self, Category, Item, Source};

/// The generation budget of a source task: lmms-eval 0.7.3's `generation_kwargs.max_new_tokens`
/// (`mme.yaml`, `realworldqa.yaml`, `chartqa.yaml` 16; `ocrbench.yaml` 128;
/// `docvqa`/`infovqa` templates 32; `cv_bench/_default_template_yaml` 1024; TextVQA's template
/// sets none, and lmms-eval's models then default to 1024).
pub fn max_new_tokens(source: Source) -> usize {
    match source {
        Source::Mme | Source::Realworldqa | Source::Chartqa => 16,
        Source::Ocrbench => 128,
        Source::Docvqa | Source::Infovqa => 32,
        Source::Cvbench | Source::Textvqa => 1024,
    }
}

/// One evaluation item of a GEB manifest (module docs).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ManifestItem {
    /// `id`.
    pub id: String,
    /// `source`.
    pub source: Source,
    /// `category` (given or the source's default).
    pub category: Category,
    /// `question`.
    pub question: String,
    /// `answers`.
    pub answers: Vec<String>,
    /// `image`.
    pub image: String,
    /// `image_group`.
    pub image_group: String,
    /// `sha256`.
    pub sha256: String,
    /// `options`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<String>>,
    /// `dataset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
}

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Unreadable or empty.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The file could not be read (the message names it).
    #[error("{0}")]
    Read(String),
    /// Bad lines; nothing was read.
    #[error("{path}: {count} bad line(s) (nothing was read):\n{}", shown.join("\n"))]
    Lines {
        /// The file.
        path: String,
        /// How many.
        count: usize,
        /// The first 20, `line N: problem`.
        shown: Vec<String>,
    },
}

fn string_field(o: &serde_json::Map<String, Value>, key: &str) -> Result<String, String> {
    match o.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(format!("`{key}` is empty")),
        Some(_) => Err(format!("`{key}` must be a string")),
        None => Err(format!("no `{key}`")),
    }
}

fn strings(o: &serde_json::Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("`{key}` must hold strings only"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(format!("`{key}` must be a list of strings")),
    }
}

/// Parses one manifest line.
///
/// # Errors
/// The problem, in the manifest's field names.
pub fn parse_item(line: &str) -> Result<ManifestItem, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let o = v.as_object().ok_or("expected a JSON object")?;
    let source_name = string_field(o, "source")?;
    let source = Source::from_name(&source_name).ok_or_else(|| {
        format!("unknown source {source_name:?} (mme, cvbench, realworldqa, ocrbench, textvqa, chartqa, docvqa, infovqa)")
    })?;
    let category = match o.get("category") {
        None | Some(Value::Null) => source.default_category(),
        Some(Value::String(c)) => Category::from_name(c)
            .ok_or_else(|| format!("unknown category {c:?} (natural, scene_text, document)"))?,
        Some(_) => return Err("`category` must be a string".into()),
    };
    let answers = strings(o, "answers")?.ok_or("no `answers`")?;
    let dataset = match o.get("dataset") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("`dataset` must be a string".into()),
    };
    metrics::check(&Item {
        source,
        prediction: "",
        answers: &answers,
        dataset: dataset.as_deref(),
    })
    .map_err(|e| e.to_string())?;
    let sha256 = string_field(o, "sha256")?;
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("`sha256` must be 64 hex digits, found {sha256:?}"));
    }
    Ok(ManifestItem {
        id: string_field(o, "id")?,
        source,
        category,
        question: string_field(o, "question")?,
        answers,
        image: string_field(o, "image")?,
        image_group: string_field(o, "image_group")?,
        sha256: sha256.to_ascii_lowercase(),
        options: strings(o, "options")?,
        dataset,
    })
}

/// Reads a GEB manifest (module docs), checked as a whole.
///
/// # Errors
/// [`ManifestError::File`] for an unreadable or empty file; [`ManifestError::Lines`] naming
/// every bad line (also a repeated `id`, with the line of its first use).
pub fn read_manifest(path: &Path) -> Result<Vec<ManifestItem>, ManifestError> {
    let p = path.display().to_string();
    let text = bindscope_data::textfile::read_text_file(path)
        .map_err(|e| ManifestError::Read(e.to_string()))?
        .text;
    let mut items = Vec::new();
    let mut bad = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if crate::pystr::strip(line).is_empty() {
            continue;
        }
        match parse_item(line) {
            Ok(it) => {
                if let Some(first) = seen.insert(it.id.clone(), i + 1) {
                    bad.push(format!(
                        "line {}: duplicate id {:?} (first on line {first})",
                        i + 1,
                        it.id
                    ));
                } else {
                    items.push(it);
                }
            }
            Err(e) => bad.push(format!("line {}: {e}", i + 1)),
        }
    }
    if !bad.is_empty() {
        return Err(ManifestError::Lines {
            path: p,
            count: bad.len(),
            shown: bad.into_iter().take(20).collect(),
        });
    }
    if items.is_empty() {
        return Err(ManifestError::File {
            path: p,
            message: "no items".into(),
        });
    }
    Ok(items)
}

/// An evaluation condition (module docs).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Control {
    /// Each item's own embedding.
    Matched,
    /// Zero embeddings.
    Zero,
    /// Embeddings shifted by one within each batch.
    Shuffled,
    /// VL-joint: another question's embedding about the same image.
    Mismatch,
}

impl Control {
    /// The name used in files.
    pub fn name(self) -> &'static str {
        match self {
            Control::Matched => "matched",
            Control::Zero => "zero",
            Control::Shuffled => "shuffled",
            Control::Mismatch => "mismatch",
        }
    }
}

/// The shuffled control's source rows of a batch of `n`: row `i` takes row `(i + n − 1) mod n`
/// (`torch.roll(e, 1, dims=0)`).
pub fn roll_one(n: usize) -> Vec<usize> {
    (0..n).map(|i| (i + n - 1) % n).collect()
}

/// How many rows of the shuffled control's batches (consecutive runs of `batch` items) still
/// receive an embedding of their own image group.
pub fn shifted_rows(items: &[ManifestItem], batch: usize) -> usize {
    items
        .chunks(batch.max(1))
        .map(|c| {
            roll_one(c.len())
                .iter()
                .enumerate()
                .filter(|&(i, &j)| c[i].image_group == c[j].image_group)
                .count()
        })
        .sum()
}

/// The mismatch control's partners: for item `i`, the next item of its `image_group` in
/// manifest order (cyclically) whose question differs, or `None` when there is none.
pub fn mismatch_partners(items: &[ManifestItem]) -> Vec<Option<usize>> {
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, it) in items.iter().enumerate() {
        groups.entry(it.image_group.as_str()).or_default().push(i);
    }
    let mut out = vec![None; items.len()];
    for members in groups.values() {
        for (k, &i) in members.iter().enumerate() {
            out[i] = (1..members.len())
                .map(|d| members[(k + d) % members.len()])
                .find(|&j| items[j].question != items[i].question);
        }
    }
    out
}

/// Greedy answers of one evaluation batch: `prompts` (from
/// [`super::chat::ChatFormat::prompt`]) left-padded, `embeddings[k]` (`[n, d_k]`, already
/// arranged for the control) injected at slot `k`, decoded until an EOS id or each row's
/// `budgets[i]` new tokens (the decoder's end-of-turn ids, [`super::chat::ChatFormat::eos_ids`]),
/// and decoded to text without special tokens. A budget is bounded by the decoder's context:
/// at most `context − prompt length` new tokens (transformers would refuse the run instead).
///
/// # Errors
/// A generation or decoding failure, as text.
pub fn answer_batch(
    readout: &super::model::GenerativeReadout,
    fmt: &super::chat::ChatFormat,
    prompts: &[&super::chat::Sequence],
    embeddings: &[burn::Tensor<2>],
    budgets: &[usize],
    fill: u32,
    device: &burn::prelude::Device,
) -> Result<Vec<String>, String> {
    use bindscope_models::generate::{GenerateOptions, generate_from_embeds};
    let batch = super::inject::HostBatch::left_padded(prompts, fill);
    let h = readout.slot_embeddings(embeddings);
    let embeds = batch.inputs_embeds(&readout.decoder, &h, device);
    let room = readout.decoder.spec.context().saturating_sub(batch.t);
    if room == 0 {
        return Err(format!(
            "the prompts take {} positions, the decoder's whole context",
            batch.t
        ));
    }
    let opts = GenerateOptions {
        max_new_tokens: budgets.iter().copied().max().unwrap_or(1).min(room),
        eos_token_ids: fmt.eos_ids().to_vec(),
        pad_token_id: fill,
        ..GenerateOptions::default()
    };
    let out = generate_from_embeds(&readout.decoder, embeds, &batch.mask_rows(), &opts)
        .map_err(|e| e.to_string())?;
    out.iter()
        .zip(budgets)
        .map(|(g, &b)| {
            // Greedy decoding is row-independent: a row cut at its own budget is what a run
            // with that budget gives.
            let ids: Vec<u32> = g.generated_ids.iter().copied().take(b).collect();
            fmt.tokenizer()
                .decode(&ids, true)
                .map_err(|e| format!("decoding: {e}"))
        })
        .collect()
}

/// The embeddings of slot `slot` for the items `batch` (indices into the table `rows`, `[n, d]`
/// row-major) under `control` (module docs). `question_slot` is the slot the mismatch control
/// replaces (VL-joint's question embedding); `partners` are [`mismatch_partners`].
///
/// # Errors
/// The mismatch control for an item without a partner (callers leave those items out first).
pub fn arrange(
    control: Control,
    slot: usize,
    question_slot: Option<usize>,
    rows: &[f32],
    d: usize,
    batch: &[usize],
    partners: &[Option<usize>],
) -> Result<Vec<f32>, String> {
    let row = |i: usize| &rows[i * d..(i + 1) * d];
    let pick: Vec<usize> = match control {
        Control::Zero => return Ok(vec![0.0; batch.len() * d]),
        Control::Matched => batch.to_vec(),
        Control::Shuffled => roll_one(batch.len())
            .into_iter()
            .map(|j| batch[j])
            .collect(),
        Control::Mismatch if Some(slot) == question_slot => batch
            .iter()
            .map(|&i| partners[i].ok_or_else(|| format!("item {i} has no mismatch partner")))
            .collect::<Result<_, _>>()?,
        Control::Mismatch => batch.to_vec(),
    };
    Ok(pick.into_iter().flat_map(|i| row(i).to_vec()).collect())
}
