//! The readout can learn to use its slot: on a task whose answer lies only in the embedding, a
//! trained readout answers held-out items from their matched embeddings and not from the zero
//! or the shuffled control. Every question is the same sentence and the answer is one digit
//! chosen by the item's class; the embedding is the class's prototype (uniform in ±1 per
//! coordinate) plus uniform noise of 0.3 times that range. A decoder that ignored its slot could
//! do no better than one class for every item (a quarter of the items).
//!
//! Two decoders run the same procedure ([`learn`]):
//! - the tiny random Llama of the `geb_readout` fixture, always, at lr 3e-3 for 8 epochs of 4
//!   steps of 16 (the tiny random decoder's rate, not the paper's: at 1e-4 it needs about 32
//!   epochs);
//! - opt-in, the real SmolLM2-135M-Instruct (`BINDSCOPE_REAL_MODELS=DIR`, the output of
//!   `shared/tools/real-models.sh`) at the paper's lr 1e-4, 4 epochs of 8 steps of 8 with the
//!   paper's hidden width 1024: the real decoder learns to read the slot within 32 steps.
//!
//! The whole path of the study is used: the chat template, visual-only sequences, training with
//! the paper's loss, evaluation prompts ([`ChatFormat::prompt`]) and greedy decoding
//! ([`answer_batch`]) with the controls arranged by [`arrange`].

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::lm::LmTokenizer;
use bindscope_geb::readout::adapter::{AdapterDims, EmbeddingAdapter};
use bindscope_geb::readout::chat::{ChatFormat, Mode, Sequence};
use bindscope_geb::readout::conversation::{Conversation, Turn};
use bindscope_geb::readout::eval::{Control, answer_batch, arrange};
use bindscope_geb::readout::model::GenerativeReadout;
use bindscope_geb::readout::train::{SlotTable, TrainConfig, TrainSet, Trainer};
use bindscope_models::generate::chat::ChatTemplate;
use bindscope_models::llama::LlamaForCausalLM;
use burn::prelude::*;
use rand::Rng;
use std::path::{Path, PathBuf};

const DIM: usize = 24;
const CLASSES: usize = 4;
const QUESTION: &str = "How many circles are there?";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/geb_readout")
}

/// `n` items from `offset`: (class, embedding). Classes cycle so each has `n / CLASSES` items;
/// the noise is seeded per item.
fn items(offset: usize, n: usize) -> Vec<(usize, Vec<f32>)> {
    let mut proto = bindscope_core::rng::stream(11, &[0]);
    let prototypes: Vec<Vec<f32>> = (0..CLASSES)
        .map(|_| (0..DIM).map(|_| proto.random_range(-1.0f32..1.0)).collect())
        .collect();
    (offset..offset + n)
        .map(|i| {
            let class = i % CLASSES;
            let mut rng = bindscope_core::rng::stream(11, &[1, i as u64]);
            let e = prototypes[class]
                .iter()
                .map(|&p| p + 0.3 * rng.random_range(-1.0f32..1.0))
                .collect();
            (class, e)
        })
        .collect()
}

fn answer(class: usize) -> String {
    (class + 2).to_string()
}

fn format(dir: &Path) -> ChatFormat {
    let tok = LmTokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    ChatFormat::new("t", &tok, ChatTemplate::from_dir(dir).unwrap(), &[2]).unwrap()
}

fn readout(dir: &Path, hidden: usize, device: &Device) -> GenerativeReadout {
    let ckpt = Checkpoint::from_dir("decoder", dir).unwrap();
    let decoder = LlamaForCausalLM::load_family(&ckpt, device, &LoadOptions::default()).unwrap();
    let mut rng = bindscope_core::rng::stream(42, &[3]);
    let dims = AdapterDims {
        embed: DIM,
        decoder: decoder.spec.hidden_size,
        hidden,
    };
    GenerativeReadout {
        decoder,
        adapters: vec![EmbeddingAdapter::init(dims, &mut rng, device)],
    }
}

/// Exact-match accuracy of greedy answers on `test` under `control`, in batches of 8.
fn accuracy(
    model: &GenerativeReadout,
    fmt: &ChatFormat,
    test: &[(usize, Vec<f32>)],
    control: Control,
    device: &Device,
) -> f64 {
    let prompts: Vec<Sequence> = (0..test.len())
        .map(|i| fmt.prompt(&format!("test-{i}"), QUESTION, 1).unwrap())
        .collect();
    let rows: Vec<f32> = test.iter().flat_map(|(_, e)| e.clone()).collect();
    let mut right = 0;
    for start in (0..test.len()).step_by(8) {
        let batch: Vec<usize> = (start..(start + 8).min(test.len())).collect();
        let e = arrange(control, 0, None, &rows, DIM, &batch, &[]).unwrap();
        let e = Tensor::<1>::from_floats(e.as_slice(), device).reshape([batch.len(), DIM]);
        let p: Vec<&Sequence> = batch.iter().map(|&i| &prompts[i]).collect();
        let out = answer_batch(model, fmt, &p, &[e], &vec![4; batch.len()], 2, device).unwrap();
        right += batch
            .iter()
            .zip(&out)
            .filter(|(i, a)| a.trim() == answer(test[**i].0))
            .count();
    }
    right as f64 / test.len() as f64
}

/// The recipe of one run of the task.
struct Recipe {
    lr: f64,
    epochs: usize,
    micro_batch: usize,
    hidden: usize,
}

/// Trains a readout on `decoder_dir` with `recipe` over 64 items and returns the losses and the
/// exact-match accuracy of 32 held-out items under matched, zero and shuffled embeddings.
fn learn(decoder_dir: &Path, recipe: &Recipe) -> (Vec<f64>, [f64; 3]) {
    let device = bindscope_core::device::test_device().autodiff();
    let fmt = format(decoder_dir);
    let train = items(0, 64);
    let test = items(1000, 32);
    let seqs: Vec<Sequence> = train
        .iter()
        .enumerate()
        .flat_map(|(i, (class, _))| {
            let conv = Conversation {
                id: format!("train-{i}"),
                image: format!("{i}.png"),
                turns: vec![Turn {
                    question: QUESTION.to_string(),
                    answer: answer(*class),
                }],
            };
            fmt.sequences(&conv, Mode::VisualOnly, 1).unwrap()
        })
        .collect();
    let slots = vec![SlotTable {
        dim: DIM,
        rows: train.iter().flat_map(|(_, e)| e.clone()).collect(),
    }];
    let data = TrainSet::new(seqs, slots, 1024).unwrap();
    let cfg = TrainConfig {
        lr: recipe.lr,
        epochs: recipe.epochs,
        micro_batch: recipe.micro_batch,
        grad_accum: 1,
        ..TrainConfig::default()
    };
    let model = readout(decoder_dir, recipe.hidden, &device);
    let mut trainer = Trainer::new(model, cfg, data.sequences.len(), 2, device.clone());
    let mut losses = Vec::new();
    for _ in 0..trainer.total_steps() {
        losses.push(trainer.train_step(&data).unwrap().loss);
    }
    let model = trainer.model.valid();
    let inner = bindscope_core::device::test_device();
    let acc = [Control::Matched, Control::Zero, Control::Shuffled]
        .map(|c| accuracy(&model, &fmt, &test, c, &inner));
    (losses, acc)
}

/// The assertions both decoders must pass.
fn check(losses: &[f64], [matched, zero, shuffled]: [f64; 3]) {
    let last: f64 = losses[losses.len() - 4..].iter().sum::<f64>() / 4.0;
    assert!(last < losses[0] / 4.0, "loss {} → {last}", losses[0]);
    assert!(
        matched >= 0.9,
        "matched accuracy {matched} (losses {losses:?})"
    );
    // Without its own embedding the readout can at best guess one class for all (0.25), and
    // the shuffled control hands every item its neighbour's class (always another class here).
    assert!(zero <= 0.25 + 1e-9, "zero-embedding accuracy {zero}");
    assert!(shuffled <= 0.25 + 1e-9, "shuffled accuracy {shuffled}");
}

#[test]
fn a_trained_readout_answers_from_its_matched_embedding_only() {
    let recipe = Recipe {
        lr: 3e-3,
        epochs: 8,
        micro_batch: 16,
        hidden: 32,
    };
    let (losses, acc) = learn(&dir(), &recipe);
    check(&losses, acc);
}

#[test]
fn smollm2_at_the_papers_rate_learns_to_read_its_slot() {
    let Some(root) = std::env::var_os("BINDSCOPE_REAL_MODELS") else {
        eprintln!("BINDSCOPE_REAL_MODELS not set: skipping the SmolLM2-135M-Instruct readout run");
        return;
    };
    let recipe = Recipe {
        lr: 1e-4,
        epochs: 4,
        micro_batch: 8,
        hidden: bindscope_geb::readout::adapter::PAPER_HIDDEN,
    };
    let (losses, acc) = learn(&PathBuf::from(root).join("smollm2-135m-instruct"), &recipe);
    eprintln!("SmolLM2-135M-Instruct: losses {losses:?}, matched/zero/shuffled {acc:?}");
    check(&losses, acc);
}
