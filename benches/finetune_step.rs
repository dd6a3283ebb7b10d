//! Training-step time of the binding finetuning recipe: all-MiniLM-L6-v2 with LoRA (r 4, α 4)
//! on q/k/v/o of every layer, a batch of 32 triplets (96 texts, one padded forward pass), hinge
//! triplet loss over cosine, backward, AdamW step. Counterpart: `benches/pytorch_finetune_step.py`
//! (PyTorch + PEFT, same batch from `benches/configs/finetune_batch.json`).
//!
//! ```text
//! BINDSCOPE_REAL_MODELS=DIR cargo bench --bench finetune_step
//! ```
//! Without `BINDSCOPE_REAL_MODELS` the tiny BERT fixture is timed instead (a smoke run, not a
//! comparison). `BURN_DEVICE` picks the device as everywhere else.

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::text::{TextPolicy, Tokenizer};
use bindscope_models::bert::BertModel;
use bindscope_tuning::example::{Construction, Triplet};
use bindscope_tuning::train::{TrainConfig, Trainer};
use criterion::{Criterion, criterion_group, criterion_main};
use std::path::PathBuf;

fn batch() -> Vec<Triplet> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/configs/finetune_batch.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("finetune_batch.json"))
            .expect("JSON");
    v["triplets"]
        .as_array()
        .expect("triplets")
        .iter()
        .enumerate()
        .map(|(i, t)| Triplet {
            id: format!("b{i}"),
            construction: Construction::PairSwap,
            anchor: t["anchor"].as_str().unwrap().into(),
            positive: t["positive"].as_str().unwrap().into(),
            negative: t["negative"].as_str().unwrap().into(),
            bindings: Vec::new(),
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    bindscope_core::alloc::keep_freed_memory();
    let device = bindscope_core::device::test_device();
    let ad = device.autodiff();
    let (ckpt, tok, name) = match std::env::var_os("BINDSCOPE_REAL_MODELS") {
        Some(root) => {
            let dir = PathBuf::from(root).join("minilm-l6-v2");
            let ckpt = Checkpoint::from_dir("all-MiniLM-L6-v2", &dir).expect("MiniLM checkpoint");
            // sentence-transformers truncates at 256 (sentence_bert_config.json).
            let tok = Tokenizer::from_file(
                dir.join("tokenizer.json"),
                TextPolicy::bert().with_max_length(256),
            )
            .expect("tokenizer");
            (ckpt, tok, "finetune_step/minilm-l6-v2/batch32")
        }
        None => {
            eprintln!("BINDSCOPE_REAL_MODELS is not set: timing the tiny BERT fixture (smoke run)");
            let dir = tempfile_dir();
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            for f in ["config.json", "model.safetensors"] {
                std::fs::copy(root.join("tests/fixtures/bert").join(f), dir.join(f)).expect("copy");
            }
            std::fs::copy(
                root.join("crates/bindscope-tuning/tests/fixtures/tiny-wordpiece/tokenizer.json"),
                dir.join("tokenizer.json"),
            )
            .expect("copy");
            let ckpt = Checkpoint::from_dir("tiny-bert", &dir).expect("tiny checkpoint");
            let tok = Tokenizer::from_file(
                dir.join("tokenizer.json"),
                TextPolicy::bert().with_max_length(40),
            )
            .expect("tokenizer");
            (ckpt, tok, "finetune_step/tiny-bert/batch32")
        }
    };
    let model = BertModel::load(&ckpt, &ad, &LoadOptions::default()).expect("load");
    let mut trainer = Trainer::new(model, TrainConfig::default(), tok, &ad).expect("trainer");
    let triplets = batch();
    let refs: Vec<&Triplet> = triplets.iter().collect();
    assert_eq!(refs.len(), 32);
    let mut g = c.benchmark_group("finetune");
    g.sample_size(10)
        .measurement_time(std::time::Duration::from_secs(40));
    g.bench_function(name, |b| {
        b.iter(|| trainer.train_step(&refs).expect("step"))
    });
    g.finish();
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("bindscope-finetune-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

criterion_group!(benches, bench);
criterion_main!(benches);
