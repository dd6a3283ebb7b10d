//! One COOCO naming step of LLaVA-OneVision, f32, on the device `BURN_DEVICE` names (CPU by
//! default). Counterpart: `benches/pytorch_cooco_naming.py` (transformers, same ids and image).
//! Results: `benches/README.md`.
//!
//! The step, timed from the decoded 640 × 640 RGB image to the generated ids: the AnyRes
//! preprocessing (`LlavaOnevisionImageProcessor`, PIL backend), the vision tower on every view,
//! the projector and the packing, the `<image>` expansion and `inputs_embeds`, the prompt pass
//! and 10 greedy tokens through the KV cache (EOS suppressed: `min_new_tokens` 10, as the
//! transformers side), without attentions (`naming`) and with the attention the COOCO analysis
//! reads (`naming_attention`: the base view's ViT attention and the decoder's last query row).
//!
//! - `tiny`: the tiny fixture checkpoint (`tests/fixtures/cooco_llava`).
//! - `0.5b`: `llava-hf/llava-onevision-qwen2-0.5b-*`'s configuration
//!   (`benches/configs/llava_onevision_0.5b.json`: SigLIP-SO400M/14 at 384, Qwen2-0.5B,
//!   `anyres_max_9`, the 36 default pinpoints) with random N(0, 0.02²) weights: a 640 × 640
//!   image takes a 2 × 2 tile grid, 3,699 image tokens.
//!
//! ```text
//! cargo bench --bench cooco_naming             # both
//! cargo bench --bench cooco_naming -- tiny     # one
//! ```
//! Each model prints the process's peak resident memory (`VmHWM`) after one step without and
//! one with attention (run one model per process to read its own peak).
//!
//! The prompt is 24 ids from the 64-bit LCG of `benches/pytorch_lm_decode.py` in `17..vocab`
//! with the image token at position 3; the image is `(x·255/639, y·255/639, (x+y)·255/1278)`
//! in integer arithmetic, shared by both sides.

use bindscope_core::LoadOptions;
use bindscope_core::checkpoint::Checkpoint;
use bindscope_data::image::{AnyresProcessor, RgbImage};
use bindscope_models::generate::GenerateOptions;
use bindscope_models::llava_onevision::{
    AttentionRequest, ImageInput, LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration,
};
use bindscope_models::randomize;
use burn::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;
use std::time::Duration;

const SIDE: usize = 640;
const PROMPT: usize = 24;
const NEW_TOKENS: usize = 10;

fn image() -> RgbImage {
    let mut data = Vec::with_capacity(SIDE * SIDE * 3);
    for y in 0..SIDE {
        for x in 0..SIDE {
            data.push((x * 255 / (SIDE - 1)) as u8);
            data.push((y * 255 / (SIDE - 1)) as u8);
            data.push(((x + y) * 255 / (2 * (SIDE - 1))) as u8);
        }
    }
    RgbImage::new(SIDE, SIDE, data).expect("an image")
}

fn prompt_ids(vocab: usize, image_token: u32) -> Vec<u32> {
    let mut x: u64 = 0;
    let mut ids: Vec<u32> = (0..PROMPT)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (17 + (x >> 33) % (vocab as u64 - 17)) as u32
        })
        .collect();
    ids[3] = image_token;
    ids
}

fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "VmHWM unknown".into())
}

fn model(
    which: &str,
    device: &Device,
) -> (LlavaOnevisionForConditionalGeneration, AnyresProcessor) {
    if which == "tiny" {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cooco_llava");
        let ckpt = Checkpoint::from_dir("cooco_llava", &dir).expect("the tiny checkpoint");
        let model =
            LlavaOnevisionForConditionalGeneration::load(&ckpt, device, &LoadOptions::default())
                .expect("load");
        let proc =
            AnyresProcessor::from_file(dir.join("preprocessor_config.json")).expect("processor");
        (model, proc)
    } else {
        let text = include_str!("configs/llava_onevision_0.5b.json");
        let cfg: LlavaOnevisionConfig = serde_json::from_str(text).expect("config");
        let file = Path::new("benches/configs/llava_onevision_0.5b.json");
        let model = LlavaOnevisionForConditionalGeneration::from_config(&cfg, file, device)
            .expect("the 0.5B configuration");
        (randomize(model, 0.02, 0), AnyresProcessor::defaults())
    }
}

fn naming(c: &mut Criterion) {
    bindscope_core::alloc::keep_freed_memory();
    let device = bindscope_core::device::test_device();
    let img = image();
    for which in ["tiny", "0.5b"] {
        if !c_filter_allows(which) {
            continue;
        }
        let (model, proc) = model(which, &device);
        let vocab = model.language_model.spec.vocab_size;
        let ids = prompt_ids(vocab, model.image_token_id());
        // The checkpoint's EOS (`<|im_end|>`), suppressed for 10 tokens as transformers'
        // min_new_tokens does: both sides generate the same ids.
        let eos = if which == "tiny" { 258 } else { 151645 };
        let opts = GenerateOptions {
            max_new_tokens: NEW_TOKENS,
            min_new_tokens: NEW_TOKENS,
            eos_token_ids: vec![eos],
            pad_token_id: eos,
            ..GenerateOptions::default()
        };
        let step = |request: AttentionRequest| {
            let px = proc.preprocess(&img).expect("preprocess");
            let input = ImageInput {
                pixel_values: px.pixel_values.to_tensor(&device),
                image_size: px.image_size,
            };
            model
                .generate(&ids, std::slice::from_ref(&input), &opts, request)
                .expect("generate")
        };
        let first = step(AttentionRequest::None);
        eprintln!(
            "{which}: {} prompt tokens, generated ids {:?}; peak resident memory after one \
             step: {}",
            first.generation.prompt_ids.len(),
            first.generation.generated_ids,
            peak_rss()
        );
        step(AttentionRequest::LastQuery);
        eprintln!(
            "{which}: peak resident memory after one step with attention: {}",
            peak_rss()
        );
        let (samples, time) = if which == "tiny" { (20, 5) } else { (10, 60) };
        let mut g = c.benchmark_group("cooco");
        g.sample_size(samples)
            .measurement_time(Duration::from_secs(time))
            .warm_up_time(Duration::from_secs(1));
        g.bench_function(format!("{which}/naming"), |b| {
            b.iter(|| step(AttentionRequest::None))
        });
        g.bench_function(format!("{which}/naming_attention"), |b| {
            b.iter(|| step(AttentionRequest::LastQuery))
        });
        g.finish();
    }
}

/// Whether the command line's filter (the first free argument, as criterion reads it) names
/// this model: a model is loaded only when one of its benches will run.
fn c_filter_allows(which: &str) -> bool {
    match std::env::args().skip(1).find(|a| !a.starts_with('-')) {
        Some(f) => format!("cooco/{which}/naming").contains(&f) || f.contains(which),
        None => true,
    }
}

criterion_group!(benches, naming);
criterion_main!(benches);
