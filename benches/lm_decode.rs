//! Decoder LM speed: SmolLM2-135M (`LlamaForCausalLM`, 30 layers × 576, 9 query / 3 key-value
//! heads, tied 49152-token head), f32, batch 1, on the device `BURN_DEVICE` names (CPU by
//! default). Counterpart: `benches/pytorch_lm_decode.py` (transformers, same prompt ids).
//! Results: `benches/README.md`.
//!
//! - `decode`: greedy generation through the KV cache from a 32-token prompt, 64 new tokens,
//!   EOS suppressed (`min_new_tokens` 64, as the transformers side) — one prefill pass + 63
//!   one-token steps, each reading the last position's logits back to the host. Criterion's
//!   throughput is the end-to-end tokens/s (64 / time of the whole call); `decode/prefill_32`
//!   times the prefill alone so that the per-step rate is `63 / (generate − prefill_32)`.
//! - `prefill_512`: one forward pass over 512 tokens with a fresh cache, the logits of every
//!   position computed (`[1, 512, 49152]`, as transformers' `model(input_ids)`), the last
//!   position's read back.
//!
//! ```text
//! BINDSCOPE_REAL_MODELS=DIR cargo bench --bench lm_decode   # DIR/smollm2-135m-instruct
//! ```
//! Without `BINDSCOPE_REAL_MODELS` the same architecture (the real config,
//! `benches/configs/smollm2_135m.json`) is timed with random N(0, 0.02²) weights: the same
//! work per token, other generated ids.
//!
//! The prompt ids are `benches/pytorch_lm_decode.py`'s: 512 ids from a 64-bit LCG in
//! `17..49152` (past SmolLM2's 17 special tokens), the decode prompt being the first 32.

use bindscope_core::device::to_host_f32;
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_models::generate::{GenerateOptions, generate};
use bindscope_models::llama::LlamaConfig;
use bindscope_models::{CausalLm, ForwardOptions, LmInput, randomize};
use burn::prelude::*;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::path::{Path, PathBuf};
use std::time::Duration;

const PROMPT: usize = 32;
const NEW_TOKENS: usize = 64;
const PREFILL: usize = 512;
/// SmolLM2's `eos_token_id` (`<|endoftext|>`; also its `pad_token_id`).
const EOS: u32 = 2;

/// `n` ids in `17..vocab`: `x ← x · 6364136223846793005 + 1442695040888963407 (mod 2⁶⁴)`,
/// id = `17 + (x >> 33) mod (vocab − 17)`, from `x = 0` (the Python script's generator).
fn prompt_ids(n: usize, vocab: usize) -> Vec<u32> {
    let mut x: u64 = 0;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (17 + (x >> 33) % (vocab as u64 - 17)) as u32
        })
        .collect()
}

fn model(device: &Device) -> (Box<dyn CausalLm>, &'static str) {
    match std::env::var_os("BINDSCOPE_REAL_MODELS") {
        Some(root) => {
            let dir = PathBuf::from(root).join("smollm2-135m-instruct");
            let ckpt = Checkpoint::from_dir("SmolLM2-135M-Instruct", &dir)
                .unwrap_or_else(|e| panic!("SmolLM2 checkpoint in {}: {e}", dir.display()));
            let model =
                bindscope_models::registry::load_causal_lm(&ckpt, device, &LoadOptions::default())
                    .expect("load SmolLM2");
            (model, "smollm2-135m")
        }
        None => {
            eprintln!(
                "BINDSCOPE_REAL_MODELS is not set: timing SmolLM2-135M's architecture with \
                 random weights"
            );
            let text = include_str!("configs/smollm2_135m.json");
            let file = Path::new("benches/configs/smollm2_135m.json");
            let cfg: LlamaConfig = serde_json::from_str(text).expect("config");
            let raw: serde_json::Value = serde_json::from_str(text).expect("config");
            let spec = cfg.spec(file, &raw).expect("spec");
            let model = randomize(spec.init(cfg.tie_word_embeddings, device), 0.02, 0);
            (Box::new(model), "smollm2-135m-random")
        }
    }
}

fn ids_tensor(ids: &[u32], device: &Device) -> Tensor<2, Int> {
    let v: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
    Tensor::<1, Int>::from_ints(v.as_slice(), device).reshape([1, ids.len()])
}

/// One forward pass over `ids` with a fresh cache; the last position's logits on the host
/// (what generation reads; forces the whole pass on asynchronous backends).
fn prefill(model: &dyn CausalLm, ids: &[u32], device: &Device) -> Vec<f32> {
    let mut cache = model.new_cache();
    let out = model
        .forward_causal(
            LmInput::Ids(ids_tensor(ids, device)),
            None,
            None,
            &mut cache,
            ForwardOptions::default(),
        )
        .expect("forward");
    let [n, t, v] = out.logits.dims();
    to_host_f32(out.logits.slice([0..n, t - 1..t, 0..v])).expect("read back")
}

fn lm_decode(c: &mut Criterion) {
    bindscope_core::alloc::keep_freed_memory();
    let device = bindscope_core::device::test_device();
    let (model, name) = model(&device);
    let vocab = model.info().embed_dim;
    let ids = prompt_ids(PREFILL, vocab);
    let prompt = vec![ids[..PROMPT].to_vec()];
    let opts = GenerateOptions {
        max_new_tokens: NEW_TOKENS,
        min_new_tokens: NEW_TOKENS,
        ignore_eos: true,
        eos_token_ids: vec![EOS],
        pad_token_id: EOS,
        sampling: None,
        top_logits: 0,
        use_cache: true,
        ..GenerateOptions::default()
    };
    // The generated ids, to compare with the transformers script's (real weights).
    let first = generate(model.as_ref(), &prompt, &opts, &device).expect("generate");
    assert_eq!(first[0].generated_ids.len(), NEW_TOKENS);
    eprintln!("{name}: generated ids {:?}", first[0].generated_ids);

    let mut g = c.benchmark_group("decode");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(30))
        .warm_up_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(NEW_TOKENS as u64));
    g.bench_function(format!("{name}/prompt{PROMPT}_new{NEW_TOKENS}"), |b| {
        b.iter(|| generate(model.as_ref(), &prompt, &opts, &device).expect("generate"))
    });
    g.throughput(Throughput::Elements(PROMPT as u64));
    g.bench_function(format!("{name}/prefill_{PROMPT}"), |b| {
        b.iter(|| prefill(model.as_ref(), &prompt[0], &device))
    });
    g.finish();

    let mut g = c.benchmark_group("prefill_512");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(30))
        .warm_up_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(PREFILL as u64));
    g.bench_function(format!("{name}/tokens{PREFILL}"), |b| {
        b.iter(|| prefill(model.as_ref(), &ids, &device))
    });
    g.finish();
}

criterion_group!(benches, lm_decode);
criterion_main!(benches);
