//! Opt-in: the real HuggingFaceTB/SmolLM2-135M-Instruct against transformers 5.24.
//!
//! Set `BINDSCOPE_REAL_MODELS=DIR` (the output of `shared/tools/real-models.sh`); the test loads
//! `DIR/smollm2-135m-instruct` as `experiments generate` does (registry, tokenizer, chat template)
//! and compares with `tests/fixtures/real/smollm2_135m_instruct.json` (made by
//! `tests/fixtures/gen/decoders.py` with transformers, f32, eager attention) for a plain prompt
//! and two chat prompts (the template's default system message, and an explicit one):
//! - the rendered chat text and the prompt ids equal transformers' exactly;
//! - the 10 highest last-position logits: the same ids in the same order, values ≤ 1e-3;
//! - 20 greedy ids identical (transformers ran with `min_new_tokens=20`, so the EOS id is
//!   suppressed as there).
//!
//! Without the variable the test prints a note and returns.

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::lm::LmTokenizer;
use bindscope_models::generate::chat::{ChatMessage, ChatTemplate, RenderOptions};
use bindscope_models::generate::{GenerateOptions, generate};
use bindscope_models::registry;
use std::path::PathBuf;

fn real_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("BINDSCOPE_REAL_MODELS")?;
    Some(PathBuf::from(dir).join("smollm2-135m-instruct"))
}

#[test]
fn smollm2_matches_transformers_on_plain_and_chat_prompts() {
    let Some(dir) = real_dir() else {
        eprintln!("BINDSCOPE_REAL_MODELS not set: skipping the real SmolLM2-135M-Instruct test");
        return;
    };
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/real/smollm2_135m_instruct.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let device = bindscope_core::device::test_device();
    let ckpt = Checkpoint::from_dir(&dir.display().to_string(), &dir).unwrap();
    let tokenizer = LmTokenizer::from_checkpoint(&ckpt).unwrap();
    let template = ChatTemplate::from_dir(&dir)
        .unwrap()
        .expect("a chat template");
    let model = registry::load_causal_lm(&ckpt, &device, &LoadOptions::default()).unwrap();
    let eos: Vec<u32> = serde_json::from_value(reference["eos_token_ids"].clone()).unwrap();
    for case in reference["cases"].as_array().unwrap() {
        let kind = case["kind"].as_str().unwrap();
        let ids = if kind == "plain" {
            tokenizer
                .encode(case["prompt"].as_str().unwrap(), true)
                .unwrap()
        } else {
            let messages: Vec<ChatMessage> = case["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap())
                })
                .collect();
            let text = template
                .render(
                    &messages,
                    &RenderOptions {
                        add_generation_prompt: true,
                        extra: Default::default(),
                    },
                )
                .unwrap();
            assert_eq!(text, case["rendered"].as_str().unwrap(), "{kind}: rendered");
            tokenizer.encode(&text, false).unwrap()
        };
        let want_ids: Vec<u32> = serde_json::from_value(case["prompt_ids"].clone()).unwrap();
        assert_eq!(ids, want_ids, "{kind}: prompt ids");
        let opts = GenerateOptions {
            max_new_tokens: 20,
            min_new_tokens: 20,
            eos_token_ids: eos.clone(),
            pad_token_id: eos[0],
            top_logits: 10,
            ..GenerateOptions::default()
        };
        let g = generate(model.as_ref(), &[ids], &opts, &device).unwrap();
        let top: Vec<(u32, f32)> = case["top10"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
            .collect();
        let got = &g[0].top_logits[0];
        let mut worst = 0f32;
        for ((gi, gl), (wi, wl)) in got.iter().zip(&top) {
            assert_eq!(gi, wi, "{kind}: top-10 ids {got:?} vs {top:?}");
            worst = worst.max((gl - wl).abs());
        }
        println!("{kind}: top-10 last-position logits max abs {worst:.2e}");
        assert!(worst <= 1e-3, "{kind}: top-10 logits max abs {worst:e}");
        let want: Vec<u32> = serde_json::from_value(case["greedy_ids"].clone()).unwrap();
        assert_eq!(g[0].generated_ids, want, "{kind}: greedy ids");
        let text = tokenizer.decode(&g[0].generated_ids, true).unwrap();
        assert_eq!(text, case["text"].as_str().unwrap(), "{kind}: decoded text");
    }
}
