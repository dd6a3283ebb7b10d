//! Generation with a [`CausalLm`]: greedy decoding and seeded sampling over a KV cache, with
//! left-padded batches, stop ids and per-step top logits; and chat templates ([`chat`]).
//!
//! The loop is transformers' `GenerationMixin._sample` (transformers 5.24,
//! `generation/utils.py`) for one beam:
//! - the prompts are left-padded into one batch with `pad_token_id`; the attention mask marks
//!   the padding and `position_ids` count real tokens only (`attention_mask.cumsum(-1) - 1`,
//!   padding at 0), as transformers 5.x's `_prepare_position_ids_for_generation` computes them
//!   (4.x put padding at 1; padded positions are masked either way);
//! - one prefill pass over the batch, then one token per step through the cache (or, with
//!   [`GenerateOptions::use_cache`] off, a full re-forward of every position each step —
//!   transformers' `use_cache=False`);
//! - the next token is the argmax of the last position's logits (greedy; ties go to the lowest
//!   id, as `torch.argmax`), or a draw after temperature, top-k and top-p warping in that order
//!   (`TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper`);
//! - a row stops when it produces one of the EOS ids (the EOS is kept in its output, as
//!   transformers' `sequences` keep it); finished rows are fed `pad_token_id` until every row
//!   has stopped or `max_new_tokens` is reached.
//!
//! Sampling draws from [`bindscope_core::rng::stream`] keyed by the seed and the row's index in
//! the batch, so the same command gives the same tokens; it cannot reproduce torch's random
//! numbers.

pub mod chat;

use crate::attention::KvCache;
use crate::{CausalLm, ForwardOptions, LmInput, ModelError};
use bindscope_core::device::to_host_f32;
use burn::prelude::*;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `"generate"` in ASCII: the namespace of the sampling streams.
const GENERATE: u64 = 0x0067_656E_6572_6174;

/// Why generation failed.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The model refused an input (context too long, shapes).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// An option is out of range or the prompts are unusable.
    #[error("{0}")]
    Invalid(String),
    /// Reading results back from the device failed.
    #[error("reading logits back from the device: {0}")]
    Device(String),
}

/// Seeded sampling instead of greedy decoding (transformers' `do_sample=True`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// Logits are divided by it (> 0).
    pub temperature: f64,
    /// Nucleus: the smallest set of most likely tokens whose probabilities sum to at least
    /// `top_p` is kept (1 = off).
    pub top_p: f64,
    /// Only the `top_k` most likely tokens are kept (0 = off; transformers' default is 50).
    pub top_k: usize,
    /// Seed of the draws.
    pub seed: u64,
}

/// What [`generate`] does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateOptions {
    /// Most tokens generated per prompt.
    pub max_new_tokens: usize,
    /// Token ids that end a row (any of them).
    pub eos_token_ids: Vec<u32>,
    /// Keep generating after an EOS id (`max_new_tokens` tokens always).
    pub ignore_eos: bool,
    /// The EOS ids cannot be chosen before this many new tokens (their logits are set to −∞
    /// first: transformers' `min_new_tokens`, `MinNewTokensLengthLogitsProcessor`).
    pub min_new_tokens: usize,
    /// The id left padding and finished rows are filled with.
    pub pad_token_id: u32,
    /// Sampling instead of greedy decoding.
    pub sampling: Option<Sampling>,
    /// Record the `top_logits` highest `(id, logit)` pairs of every step (0 = none).
    pub top_logits: usize,
    /// Penalty of the ids already in the row (its prompt and what it generated): a positive
    /// logit is divided by it, a negative one multiplied (transformers'
    /// `RepetitionPenaltyLogitsProcessor`, Keskar et al. 2019, CTRL, eq. 1); 1 = off.
    /// transformers also penalises the pad ids of a left-padded row; this does not, so a batch
    /// still equals its prompts one by one.
    pub repetition_penalty: f64,
    /// Decode through the KV cache (true) or re-run every position each step (false).
    pub use_cache: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_new_tokens: 20,
            eos_token_ids: Vec::new(),
            ignore_eos: false,
            min_new_tokens: 0,
            pad_token_id: 0,
            sampling: None,
            top_logits: 0,
            repetition_penalty: 1.0,
            use_cache: true,
        }
    }
}

/// One prompt's generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    /// The prompt's ids (without padding).
    pub prompt_ids: Vec<u32>,
    /// The new ids, an ending EOS included.
    pub generated_ids: Vec<u32>,
    /// Whether the row ended on an EOS id (false: `max_new_tokens` reached).
    pub stopped_on_eos: bool,
    /// Per generated step, the highest `(id, logit)` pairs of the raw logits, highest first.
    pub top_logits: Vec<Vec<(u32, f32)>>,
}

/// What a checkpoint says about generating, as transformers reads it: `generation_config.json`
/// when the checkpoint has one, else `config.json`, field by field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationDefaults {
    /// `eos_token_id` (a list allowed).
    pub eos_token_ids: Vec<u32>,
    /// `pad_token_id`.
    pub pad_token_id: Option<u32>,
    /// `bos_token_id`.
    pub bos_token_id: Option<u32>,
    /// `do_sample` (transformers samples by default when true).
    pub do_sample: Option<bool>,
    /// `temperature`.
    pub temperature: Option<f64>,
    /// `top_k` (transformers' default when absent: 50).
    pub top_k: Option<usize>,
    /// `top_p` (default 1).
    pub top_p: Option<f64>,
    /// `repetition_penalty` (default 1: none).
    pub repetition_penalty: Option<f64>,
}

/// `v[key]` as token ids (one or a list), `None` when absent or null.
fn ids_field(v: &serde_json::Value, key: &str, file: &Path) -> Result<Option<Vec<u32>>, String> {
    let bad = || {
        format!(
            "{}: {key} must be a token id or a list of token ids, got {}",
            file.display(),
            v[key]
        )
    };
    let id = |x: &serde_json::Value| {
        x.as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(bad)
    };
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Array(a)) => a.iter().map(id).collect::<Result<_, _>>().map(Some),
        Some(x) => id(x).map(|i| Some(vec![i])),
    }
}

/// `v[key]` as a number, `None` when absent or null.
fn number_field(v: &serde_json::Value, key: &str, file: &Path) -> Result<Option<f64>, String> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(x) => x
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("{}: {key} must be a number, got {x}", file.display())),
    }
}

impl GenerationDefaults {
    /// Reads `generation_config.json` beside `config` (when present), falling back field by
    /// field to `config` (`config.json`).
    ///
    /// # Errors
    /// A message naming the file (and the key) when a file exists but is not valid JSON, or a
    /// field has the wrong type (an `eos_token_id` that is a string, a `top_p` that is not a
    /// number).
    pub fn read(config: &Path) -> Result<Self, String> {
        let read = |p: &Path| -> Result<Option<serde_json::Value>, String> {
            if !p.is_file() {
                return Ok(None);
            }
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| format!("{}: not valid JSON: {e}", p.display()))
        };
        let dir = config.parent().unwrap_or(Path::new("."));
        let gen_path = dir.join("generation_config.json");
        let files: Vec<(serde_json::Value, &Path)> = [
            read(&gen_path)?.map(|v| (v, gen_path.as_path())),
            read(config)?.map(|v| (v, config)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let ids = |key: &str| -> Result<Option<Vec<u32>>, String> {
            for (v, f) in &files {
                if let Some(ids) = ids_field(v, key, f)? {
                    return Ok(Some(ids));
                }
            }
            Ok(None)
        };
        // Sampling settings live in generation_config.json only (transformers 5 no longer reads
        // them from config.json).
        let gen_only = files.first().filter(|(_, f)| *f == gen_path.as_path());
        let num = |key: &str| -> Result<Option<f64>, String> {
            match gen_only {
                Some((v, f)) => number_field(v, key, f),
                None => Ok(None),
            }
        };
        let do_sample = match gen_only.and_then(|(v, _)| v.get("do_sample")) {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Bool(b)) => Some(*b),
            Some(x) => {
                return Err(format!(
                    "{}: do_sample must be true or false, got {x}",
                    gen_path.display()
                ));
            }
        };
        Ok(Self {
            eos_token_ids: ids("eos_token_id")?.unwrap_or_default(),
            pad_token_id: ids("pad_token_id")?.and_then(|v| v.first().copied()),
            bos_token_id: ids("bos_token_id")?.and_then(|v| v.first().copied()),
            do_sample,
            temperature: num("temperature")?,
            top_k: num("top_k")?.map(|k| k.max(0.0) as usize),
            top_p: num("top_p")?,
            repetition_penalty: num("repetition_penalty")?,
        })
    }
}

/// Left-pads `prompts` into `[N, P]` ids, the attention mask and transformers' position ids.
fn left_pad(prompts: &[Vec<u32>], pad: u32) -> (Vec<i64>, Vec<i64>, Vec<i64>, usize) {
    let p = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let (mut ids, mut mask, mut pos) = (Vec::new(), Vec::new(), Vec::new());
    for row in prompts {
        let pad_n = p - row.len();
        ids.extend(std::iter::repeat_n(pad as i64, pad_n));
        ids.extend(row.iter().map(|&i| i as i64));
        mask.extend(std::iter::repeat_n(0, pad_n));
        mask.extend(std::iter::repeat_n(1, row.len()));
        pos.extend(std::iter::repeat_n(0, pad_n));
        pos.extend(0..row.len() as i64);
    }
    (ids, mask, pos, p)
}

fn int2(v: Vec<i64>, shape: [usize; 2], device: &Device) -> Tensor<2, Int> {
    Tensor::<1, Int>::from_ints(v.as_slice(), device).reshape(shape)
}

/// The `k` highest `(id, logit)` pairs of `row`, highest first (ties: lower id first).
pub fn top_k_pairs(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..row.len() as u32).collect();
    let k = k.min(row.len());
    let cmp = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
    if k < idx.len() {
        idx.select_nth_unstable_by(k, cmp);
        idx.truncate(k);
    }
    idx.sort_by(cmp);
    idx.into_iter().map(|i| (i, row[i as usize])).collect()
}

/// `argmax` with ties to the lowest index (`torch.argmax`).
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// One draw after temperature, top-k and top-p warping (transformers' order).
fn sample(row: &[f32], s: &Sampling, rng: &mut impl Rng) -> u32 {
    let t = s.temperature as f32;
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    let mut keep = order.len();
    if s.top_k > 0 {
        keep = keep.min(s.top_k);
    }
    let scaled: Vec<f32> = order[..keep].iter().map(|&i| row[i] / t).collect();
    let max = scaled[0];
    let exp: Vec<f64> = scaled.iter().map(|&v| ((v - max) as f64).exp()).collect();
    let total: f64 = exp.iter().sum();
    let probs: Vec<f64> = exp.iter().map(|e| e / total).collect();
    if s.top_p < 1.0 {
        // TopPLogitsWarper: drop the least likely tokens whose cumulative probability (summed
        // from the least likely upwards) is at most 1 - top_p; keep at least one.
        let mut cum = 0.0;
        let mut dropped = 0;
        for p in probs.iter().rev() {
            cum += p;
            if cum <= 1.0 - s.top_p {
                dropped += 1;
            } else {
                break;
            }
        }
        keep = (probs.len() - dropped).max(1);
    } else {
        keep = probs.len();
    }
    let total: f64 = probs[..keep].iter().sum();
    let mut u: f64 = rng.random::<f64>() * total;
    for (j, p) in probs[..keep].iter().enumerate() {
        if u < *p {
            return order[j] as u32;
        }
        u -= p;
    }
    order[keep - 1] as u32
}

/// Checks `opts` against the model before any work.
fn validate(
    model: &dyn CausalLm,
    n: usize,
    prompt_len: usize,
    opts: &GenerateOptions,
) -> Result<(), GenerateError> {
    let info = model.info();
    if n == 0 {
        return Err(GenerateError::Invalid("no prompts to generate from".into()));
    }
    if prompt_len == 0 {
        return Err(GenerateError::Invalid("a prompt has no tokens".into()));
    }
    if let Some(s) = &opts.sampling {
        if !(s.temperature > 0.0 && s.temperature.is_finite()) {
            return Err(GenerateError::Invalid(format!(
                "temperature must be positive, got {}",
                s.temperature
            )));
        }
        if !(s.top_p > 0.0 && s.top_p <= 1.0) {
            return Err(GenerateError::Invalid(format!(
                "top_p must be in (0, 1], got {}",
                s.top_p
            )));
        }
    }
    let context = info.input_size[0];
    if prompt_len > context {
        return Err(GenerateError::Invalid(format!(
            "the prompt has {prompt_len} tokens; the model's context (max_position_embeddings) is {context}"
        )));
    }
    if !(opts.repetition_penalty > 0.0 && opts.repetition_penalty.is_finite()) {
        return Err(GenerateError::Invalid(format!(
            "repetition_penalty must be positive, got {}",
            opts.repetition_penalty
        )));
    }
    // The pad id is fed only to a batch (left padding, finished rows).
    if n > 1 && (opts.pad_token_id as usize) >= info.embed_dim {
        return Err(GenerateError::Invalid(format!(
            "pad_token_id {} is outside the vocabulary ({} ids)",
            opts.pad_token_id, info.embed_dim
        )));
    }
    Ok(())
}

/// The last position's logits of `logits: [N, T, V]` on the host, one `Vec` per row.
fn last_logits(logits: Tensor<3>) -> Result<Vec<Vec<f32>>, GenerateError> {
    let [n, t, v] = logits.dims();
    let last = logits.slice([0..n, t - 1..t, 0..v]).reshape([n, v]);
    let host = to_host_f32(last).map_err(|e| GenerateError::Device(e.to_string()))?;
    Ok(host.chunks(v).map(<[f32]>::to_vec).collect())
}

/// Generates from token-id prompts, all of them in one left-padded batch.
///
/// # Errors
/// [`GenerateError::Invalid`] for empty prompts, a prompt longer than the context or bad
/// sampling settings (checked before any forward pass); [`GenerateError::Model`] when prompt +
/// new tokens run past `max_position_embeddings` (the cache is bounded there).
pub fn generate(
    model: &dyn CausalLm,
    prompts: &[Vec<u32>],
    opts: &GenerateOptions,
    device: &Device,
) -> Result<Vec<Generation>, GenerateError> {
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    if let Some(r) = prompts.iter().position(Vec::is_empty) {
        return Err(GenerateError::Invalid(format!(
            "prompt {} has no tokens",
            r + 1
        )));
    }
    validate(model, prompts.len(), longest, opts)?;
    let vocab = model.info().embed_dim;
    if let Some((r, &bad)) = prompts
        .iter()
        .enumerate()
        .find_map(|(r, p)| p.iter().find(|&&i| i as usize >= vocab).map(|i| (r, i)))
    {
        return Err(GenerateError::Invalid(format!(
            "prompt {} holds token id {bad}, outside the model's vocabulary of {vocab} ids \
             (config.json vocab_size): is the tokenizer this checkpoint's?",
            r + 1
        )));
    }
    let n = prompts.len();
    let (ids, mask, pos, p) = left_pad(prompts, opts.pad_token_id);
    let prefix = LmInput::Ids(int2(ids, [n, p], device));
    decode_loop(
        model,
        prefix,
        prompts,
        mask,
        pos,
        [n, p],
        opts,
        device,
        None,
    )
}

/// Generates after `inputs_embeds: [N, T, D]` (an injected embedding, an image's tokens, or a
/// prompt embedded by the caller) with `attention_mask: [N, T]` (1 = token; padding on the
/// left), position ids counting the unmasked positions. `prompt_ids` of the results are empty.
///
/// # Errors
/// As [`generate`]; also when the mask's shape is not `[N, T]`.
pub fn generate_from_embeds(
    model: &dyn CausalLm,
    inputs_embeds: Tensor<3>,
    attention_mask: &[Vec<u8>],
    opts: &GenerateOptions,
) -> Result<Vec<Generation>, GenerateError> {
    generate_from_embeds_observed(model, inputs_embeds, attention_mask, opts, None, false)
}

/// The attention probabilities of one forward pass of the decoding loop: `L` tensors
/// `[N, H, T, P + T]` (f32), one per layer. Step 0 is the prompt (`T` = its length, `P` = 0);
/// step `s ≥ 1` is the pass over the `s`-th generated token (`T` = 1 through the cache; without
/// it, `use_cache = false`, the whole sequence again), what transformers'
/// `generate(output_attentions=True, return_dict_in_generate=True).attentions[s]` holds.
pub type AttentionObserver<'a> = &'a mut dyn FnMut(usize, Vec<Tensor<4>>);

/// [`generate_from_embeds`], handing every forward pass's attention probabilities to
/// `observer` (see [`AttentionObserver`]) when one is given: the passes then compute the
/// probabilities explicitly (no fused attention). The generated ids are the same. With
/// `last_row_only` each tensor keeps only its last query row, `[N, H, 1, P + T]`: the row that
/// chose the next token (step 0's full `T × T` matrices are dropped layer by layer).
///
/// # Errors
/// As [`generate_from_embeds`].
pub fn generate_from_embeds_observed(
    model: &dyn CausalLm,
    inputs_embeds: Tensor<3>,
    attention_mask: &[Vec<u8>],
    opts: &GenerateOptions,
    observer: Option<AttentionObserver<'_>>,
    last_row_only: bool,
) -> Result<Vec<Generation>, GenerateError> {
    let [n, t, _] = inputs_embeds.dims();
    validate(model, n, t, opts)?;
    if attention_mask.len() != n || attention_mask.iter().any(|r| r.len() != t) {
        return Err(GenerateError::Invalid(format!(
            "attention_mask must be {n} rows of {t} entries, one per inputs_embeds position"
        )));
    }
    let device = inputs_embeds.device();
    let mut mask = Vec::with_capacity(n * t);
    let mut pos = Vec::with_capacity(n * t);
    for row in attention_mask {
        let mut count = 0i64;
        for &m in row {
            mask.push(m as i64);
            if m != 0 {
                pos.push(count);
                count += 1;
            } else {
                pos.push(0);
            }
        }
    }
    decode_loop(
        model,
        LmInput::Embeds(inputs_embeds),
        &vec![Vec::new(); n],
        mask,
        pos,
        [n, t],
        opts,
        &device,
        observer.map(|o| (o, last_row_only)),
    )
}

/// The decoding loop shared by [`generate`] and [`generate_from_embeds`]: `prefix` `[N, P]`
/// (its rows' ids in `prompt_ids`, empty for embeddings) with its host-side mask and position
/// ids (row-major).
#[allow(clippy::too_many_arguments)]
fn decode_loop(
    model: &dyn CausalLm,
    prefix: LmInput,
    prompt_ids: &[Vec<u32>],
    mut mask: Vec<i64>,
    pos: Vec<i64>,
    [n, p]: [usize; 2],
    opts: &GenerateOptions,
    device: &Device,
    mut observer: Option<(AttentionObserver<'_>, bool)>,
) -> Result<Vec<Generation>, GenerateError> {
    let fwd = ForwardOptions {
        output_hidden_states: false,
        output_attentions: observer.is_some(),
        attention_last_rows: observer.as_ref().and_then(|(_, last)| last.then_some(1)),
    };
    let mut observe = |step: usize, attentions: Option<Vec<Tensor<4>>>| {
        if let (Some((o, _)), Some(a)) = (observer.as_mut(), attentions) {
            o(step, a);
        }
    };
    let mut out: Vec<Generation> = (0..n)
        .map(|r| Generation {
            prompt_ids: prompt_ids[r].clone(),
            generated_ids: Vec::new(),
            stopped_on_eos: false,
            top_logits: Vec::new(),
        })
        .collect();
    if opts.max_new_tokens == 0 {
        return Ok(out);
    }
    let mut rngs: Vec<_> = (0..n)
        .map(|r| {
            opts.sampling
                .map(|s| bindscope_core::rng::stream(s.seed, &[GENERATE, r as u64]))
        })
        .collect();
    // The next position of each row: its last position + 1.
    let mut next_pos: Vec<i64> = (0..n).map(|r| pos[r * p + p - 1] + 1).collect();
    let mut finished = vec![false; n];
    let mut fed: Vec<Vec<i64>> = vec![Vec::new(); n]; // tokens fed after the prefix, per row

    // Without padding the mask and positions are the defaults (all ones, `P..P + T`): passing
    // none lets the model skip building the padding bias in every layer.
    let padded = mask.contains(&0);
    let ints = |v: Vec<i64>, shape: [usize; 2]| padded.then(|| int2(v, shape, device));
    let mut cache: Vec<KvCache> = model.new_cache();
    let first = model.forward_causal_keep(
        prefix.clone(),
        ints(mask.clone(), [n, p]),
        ints(pos.clone(), [n, p]),
        &mut cache,
        fwd,
        1,
    )?;
    observe(0, first.attentions);
    let mut logits = last_logits(first.logits)?;
    let mut width = p;
    for step in 0..opts.max_new_tokens {
        let mut tokens = Vec::with_capacity(n);
        for r in 0..n {
            if finished[r] {
                tokens.push(opts.pad_token_id);
                continue;
            }
            let raw = &logits[r];
            let penalise = opts.repetition_penalty != 1.0;
            let processed;
            let row = if step < opts.min_new_tokens || penalise {
                let mut l = raw.clone();
                if penalise {
                    let p = opts.repetition_penalty as f32;
                    let mut seen: Vec<u32> = prompt_ids[r].clone();
                    seen.extend_from_slice(&out[r].generated_ids);
                    seen.sort_unstable();
                    seen.dedup();
                    for id in seen {
                        if let Some(v) = l.get_mut(id as usize) {
                            *v = if *v < 0.0 { *v * p } else { *v / p };
                        }
                    }
                }
                if step < opts.min_new_tokens {
                    for &e in &opts.eos_token_ids {
                        if let Some(v) = l.get_mut(e as usize) {
                            *v = f32::NEG_INFINITY;
                        }
                    }
                }
                processed = l;
                &processed
            } else {
                raw
            };
            let tok = match (&opts.sampling, rngs[r].as_mut()) {
                (Some(s), Some(rng)) => sample(row, s, rng),
                _ => argmax(row),
            };
            if opts.top_logits > 0 {
                // The model's logits, before any processing (transformers' `output_logits`).
                out[r].top_logits.push(top_k_pairs(raw, opts.top_logits));
            }
            out[r].generated_ids.push(tok);
            if !opts.ignore_eos && opts.eos_token_ids.contains(&tok) {
                finished[r] = true;
                out[r].stopped_on_eos = true;
            }
            tokens.push(tok);
        }
        if step + 1 == opts.max_new_tokens || finished.iter().all(|&f| f) {
            break;
        }
        // Append the new tokens: mask 1 for every row (transformers extends the mask of
        // finished rows too), positions one past each row's last.
        let mut new_mask = Vec::with_capacity(n * (width + 1));
        for r in 0..n {
            new_mask.extend_from_slice(&mask[r * width..(r + 1) * width]);
            new_mask.push(1);
            fed[r].push(tokens[r] as i64);
        }
        mask = new_mask;
        width += 1;
        let step_pos: Vec<i64> = next_pos.clone();
        for np in next_pos.iter_mut() {
            *np += 1;
        }
        let step_ids = int2(tokens.iter().map(|&t| t as i64).collect(), [n, 1], device);
        let res = if opts.use_cache {
            model.forward_causal_keep(
                LmInput::Ids(step_ids),
                ints(mask.clone(), [n, width]),
                ints(step_pos, [n, 1]),
                &mut cache,
                fwd,
                1,
            )?
        } else {
            // Everything again from the start: the prefix, then every fed token.
            let k = fed[0].len();
            let fed_ids = int2(fed.concat(), [n, k], device);
            let full = match &prefix {
                LmInput::Ids(ids) => LmInput::Ids(Tensor::cat(vec![ids.clone(), fed_ids], 1)),
                LmInput::Embeds(e) => {
                    LmInput::Embeds(Tensor::cat(vec![e.clone(), model.embed_tokens(fed_ids)], 1))
                }
            };
            let mut all_pos = Vec::with_capacity(n * width);
            for r in 0..n {
                all_pos.extend_from_slice(&pos[r * p..(r + 1) * p]);
                let start = pos[r * p + p - 1] + 1;
                all_pos.extend(start..start + k as i64);
            }
            let mut fresh = model.new_cache();
            model.forward_causal_keep(
                full,
                ints(mask.clone(), [n, width]),
                ints(all_pos, [n, width]),
                &mut fresh,
                fwd,
                1,
            )?
        };
        observe(step + 1, res.attentions);
        logits = last_logits(res.logits)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_pairs_are_highest_first_with_ties_to_the_lower_id() {
        let row = [0.5, 2.0, -1.0, 2.0, 1.0];
        assert_eq!(top_k_pairs(&row, 3), vec![(1, 2.0), (3, 2.0), (4, 1.0)]);
        assert_eq!(top_k_pairs(&row, 10).len(), 5);
        assert_eq!(argmax(&row), 1);
    }

    #[test]
    fn left_padding_counts_positions_of_real_tokens() {
        let (ids, mask, pos, p) = left_pad(&[vec![5, 6, 7], vec![8]], 0);
        assert_eq!(p, 3);
        assert_eq!(ids, vec![5, 6, 7, 0, 0, 8]);
        assert_eq!(mask, vec![1, 1, 1, 0, 0, 1]);
        assert_eq!(pos, vec![0, 1, 2, 0, 0, 0]);
    }

    #[test]
    fn top_p_keeps_the_nucleus_and_top_k_the_k_most_likely() {
        // probabilities ∝ exp(logit): [0.0, ln 2, ln 4] → 1/7, 2/7, 4/7.
        let row = [0.0f32, 2f32.ln(), 4f32.ln()];
        let mut rng = bindscope_core::rng::stream(0, &[1]);
        let only_top = Sampling {
            temperature: 1.0,
            top_p: 0.5,
            top_k: 0,
            seed: 0,
        };
        // 4/7 ≥ 0.5: the nucleus is token 2 alone.
        assert!((0..200).all(|_| sample(&row, &only_top, &mut rng) == 2));
        let k2 = Sampling {
            top_p: 1.0,
            top_k: 2,
            ..only_top
        };
        let draws: Vec<u32> = (0..400).map(|_| sample(&row, &k2, &mut rng)).collect();
        assert!(draws.iter().all(|&t| t != 0));
        assert!(draws.contains(&1) && draws.contains(&2));
    }
}
