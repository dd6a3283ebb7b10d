//! Training-step time of GEB's generative readout: SmolLM2-135M-Instruct with the embedding
//! adapter (384 → 1024 → 576), the adapter's output injected at position 1 through
//! `inputs_embeds`, a micro-batch of 8 sequences × 128 tokens (every target after the slot
//! supervised), next-token loss, backward, AdamW step (lr 1e-4, weight decay 0) over the
//! decoder and the adapter. Counterpart: `benches/pytorch_geb_train_step.py` (transformers,
//! eager attention, same shapes).
//!
//! ```text
//! BINDSCOPE_REAL_MODELS=DIR cargo bench --bench geb_train_step
//! ```
//! Without `BINDSCOPE_REAL_MODELS` the tiny `geb_readout` fixture decoder is timed instead (a
//! smoke run, not a comparison). `BURN_DEVICE` picks the device.

use bindscope_core::train::AdamW;
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_geb::readout::adapter::{AdapterDims, EmbeddingAdapter, PAPER_HIDDEN};
use bindscope_geb::readout::chat::{IGNORE, Sequence};
use bindscope_geb::readout::inject::HostBatch;
use bindscope_geb::readout::model::GenerativeReadout;
use bindscope_models::llama::LlamaForCausalLM;
use burn::optim::GradientsParams;
use burn::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use rand::Rng;
use std::path::PathBuf;

const N: usize = 8;
const T: usize = 128;
const D_EMBED: usize = 384;

fn bench(c: &mut Criterion) {
    bindscope_core::alloc::keep_freed_memory();
    let device = bindscope_core::device::test_device().autodiff();
    let (dir, name) = match std::env::var_os("BINDSCOPE_REAL_MODELS") {
        Some(root) => (
            PathBuf::from(root).join("smollm2-135m-instruct"),
            "smollm2-135m/8x128",
        ),
        None => {
            eprintln!(
                "BINDSCOPE_REAL_MODELS is not set: timing the tiny fixture decoder (smoke run)"
            );
            (
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/geb_readout"),
                "tiny/8x128",
            )
        }
    };
    let ckpt = Checkpoint::from_dir("decoder", &dir).expect("decoder checkpoint");
    let decoder =
        LlamaForCausalLM::load_family(&ckpt, &device, &LoadOptions::default()).expect("load");
    let (vocab, d_dec) = (decoder.spec.vocab_size, decoder.spec.hidden_size);
    let t = T.min(decoder.spec.context());
    let mut rng = bindscope_core::rng::stream(0, &[1]);
    let adapter = EmbeddingAdapter::init(
        AdapterDims {
            embed: D_EMBED,
            hidden: PAPER_HIDDEN,
            decoder: d_dec,
        },
        &mut rng,
        &device,
    );
    let seqs: Vec<Sequence> = (0..N)
        .map(|i| {
            let ids: Vec<u32> = (0..t).map(|_| rng.random_range(0..vocab as u32)).collect();
            let labels = ids
                .iter()
                .enumerate()
                .map(|(p, &id)| if p < 2 { IGNORE } else { i64::from(id) })
                .collect();
            Sequence {
                conversation: i.to_string(),
                turn: None,
                input_ids: ids,
                labels,
                slots: vec![1],
            }
        })
        .collect();
    let batch = HostBatch::new(&seqs.iter().collect::<Vec<_>>(), 0);
    let e: Vec<f32> = (0..N * D_EMBED)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let e = Tensor::<1>::from_floats(e.as_slice(), &device).reshape([N, D_EMBED]);
    let mut model = Some(GenerativeReadout {
        decoder,
        adapters: vec![adapter],
    });
    let mut optim = AdamW {
        weight_decay: 0.0,
        ..AdamW::default()
    }
    .init();
    let mut g = c.benchmark_group("geb_train_step");
    g.sample_size(10);
    g.bench_function(name, |b| {
        b.iter(|| {
            let m = model.take().expect("model");
            let loss = m
                .loss(&batch, std::slice::from_ref(&e), &device)
                .expect("loss");
            let grads = GradientsParams::from_grads(loss.backward(), &m);
            model = Some(optim.step(1e-4, m, grads));
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
