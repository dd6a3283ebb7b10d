//! Training the readout: an interrupted run resumes to the same parameters bit for bit, gradient
//! accumulation gives the step one large batch gives (the loss is the token mean over the
//! effective batch), every epoch visits every sequence once, the cosine schedule, and the loss
//! falls. On the `geb_readout` fixture (tiny Llama decoder, two adapters, VL-joint sequences).

use bindscope_core::train::Checkpoints;
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::lm::LmTokenizer;
use bindscope_geb::readout::adapter::{AdapterDims, EmbeddingAdapter};
use bindscope_geb::readout::chat::{ChatFormat, Mode, Sequence};
use bindscope_geb::readout::conversation::read_llava;
use bindscope_geb::readout::model::GenerativeReadout;
use bindscope_geb::readout::train::{SlotTable, TrainConfig, TrainSet, Trainer};
use bindscope_models::generate::chat::ChatTemplate;
use bindscope_models::llama::LlamaForCausalLM;
use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;
use rand::Rng;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/geb_readout")
}

fn data() -> TrainSet {
    let tok = LmTokenizer::from_file(dir().join("tokenizer.json")).unwrap();
    let fmt = ChatFormat::new("t", &tok, ChatTemplate::from_dir(&dir()).unwrap(), &[2]).unwrap();
    let convs = read_llava(&dir().join("train.json")).unwrap();
    let seqs: Vec<Sequence> = convs
        .iter()
        .flat_map(|c| fmt.sequences(c, Mode::VlJoint, 2).unwrap())
        .collect();
    let mut rng = bindscope_core::rng::stream(7, &[1]);
    let mut table = |d: usize| SlotTable {
        dim: d,
        rows: (0..seqs.len() * d)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect(),
    };
    let slots = vec![table(24), table(16)];
    TrainSet::new(seqs, slots, 1024).unwrap()
}

fn readout(device: &Device) -> GenerativeReadout {
    let ckpt = Checkpoint::from_dir("geb_readout", &dir()).unwrap();
    let decoder = LlamaForCausalLM::load_family(&ckpt, device, &LoadOptions::default()).unwrap();
    let mut rng = bindscope_core::rng::stream(42, &[3]);
    let adapters = [24, 16]
        .into_iter()
        .map(|d| {
            EmbeddingAdapter::init(
                AdapterDims {
                    embed: d,
                    hidden: 32,
                    decoder: 64,
                },
                &mut rng,
                device,
            )
        })
        .collect();
    GenerativeReadout { decoder, adapters }
}

fn flat<M: Module>(m: &M) -> Vec<f32> {
    struct F(Vec<f32>);
    impl ModuleVisitor for F {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            self.0.extend(
                p.val()
                    .into_data()
                    .convert::<f32>()
                    .try_to_vec::<f32>()
                    .unwrap(),
            );
        }
    }
    let mut f = F(Vec::new());
    m.visit(&mut f);
    f.0
}

fn cfg(micro: usize, accum: usize, epochs: usize) -> TrainConfig {
    TrainConfig {
        lr: 1e-3,
        epochs,
        micro_batch: micro,
        grad_accum: accum,
        ..TrainConfig::default()
    }
}

#[test]
fn an_interrupted_run_resumes_to_the_same_parameters() {
    let device = bindscope_core::device::test_device().autodiff();
    let data = data();
    let n = data.sequences.len();
    let c = cfg(2, 1, 2);
    let mut full = Trainer::new(readout(&device), c.clone(), n, 2, device.clone());
    let total = full.total_steps();
    assert_eq!(total, 6, "5 sequences in steps of 2, two epochs");
    let mut losses = Vec::new();
    for _ in 0..total {
        losses.push(full.train_step(&data).unwrap().loss);
    }
    let tmp = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::new(tmp.path().join("ckpt"), "fp");
    let mut first = Trainer::new(readout(&device), c.clone(), n, 2, device.clone());
    let mut resumed_losses = Vec::new();
    for _ in 0..3 {
        resumed_losses.push(first.train_step(&data).unwrap().loss);
    }
    first.save(&ckpts).unwrap();
    drop(first);
    let mut second = Trainer::new(readout(&device), c, n, 2, device.clone());
    assert!(second.resume(&ckpts).unwrap());
    assert_eq!(second.step, 3);
    for _ in 3..total {
        resumed_losses.push(second.train_step(&data).unwrap().loss);
    }
    assert_eq!(resumed_losses, losses, "the loss curve");
    let (a, b) = (flat(&full.model.valid()), flat(&second.model.valid()));
    assert_eq!(a.len(), b.len());
    let differ = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    assert_eq!(differ, 0, "{differ} parameters differ after resuming");
    // Training at lr 1e-3 fits these five sequences: the second epoch's loss is lower.
    let (e1, e2): (f64, f64) = (losses[..3].iter().sum(), losses[3..].iter().sum());
    assert!(e2 < e1, "epoch losses {e1} → {e2}");
}

#[test]
fn gradient_accumulation_takes_the_step_of_one_large_batch() {
    let device = bindscope_core::device::test_device().autodiff();
    let data = data();
    let n = data.sequences.len();
    let mut big = Trainer::new(readout(&device), cfg(4, 1, 1), n, 2, device.clone());
    let mut acc = Trainer::new(readout(&device), cfg(1, 4, 1), n, 2, device.clone());
    assert_eq!(big.step_indices(0), acc.step_indices(0));
    let lb = big.train_step(&data).unwrap();
    let la = acc.train_step(&data).unwrap();
    assert_eq!(lb.targets, la.targets);
    assert!(
        (lb.loss - la.loss).abs() <= 1e-5,
        "{} vs {}",
        lb.loss,
        la.loss
    );
    let (a, b) = (flat(&big.model.valid()), flat(&acc.model.valid()));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    // Adam's first step is ±lr where the gradient is clear of ε; the two sums differ in rounding.
    assert!(worst <= 1e-5, "parameters differ by {worst:e}");
}

#[test]
fn every_epoch_visits_every_sequence_once_in_a_seeded_order() {
    let device = bindscope_core::device::test_device();
    let c = cfg(3, 2, 3);
    let t = Trainer::new(readout(&device), c.clone(), 20, 2, device.clone());
    // 20 sequences in steps of 6: four steps per epoch, the last one of 2.
    assert_eq!(t.total_steps(), 12);
    assert_eq!(t.step_indices(3).len(), 2);
    for epoch in 0..3 {
        let mut seen: Vec<usize> = (0..4).flat_map(|k| t.step_indices(epoch * 4 + k)).collect();
        assert_eq!(seen.len(), 20);
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
    }
    assert_ne!(
        t.step_indices(0),
        t.step_indices(4),
        "each epoch reshuffles"
    );
    let other = Trainer::new(
        readout(&device),
        TrainConfig { seed: 43, ..c },
        20,
        2,
        device.clone(),
    );
    assert_ne!(t.step_indices(0), other.step_indices(0));
}

#[test]
fn cosine_schedule_is_transformers_without_warmup() {
    let c = TrainConfig::default();
    assert_eq!(c.effective_batch(), 512);
    assert_eq!(c.lr_at(0, 10), 1e-4);
    assert!((c.lr_at(5, 10) - 5e-5).abs() < 1e-18);
    // get_cosine_schedule_with_warmup(num_warmup_steps=0, num_training_steps=10) at step 9:
    // max(0, 0.5 · (1 + cos(π · 0.9))) = 0.024471741852423234.
    assert!((c.lr_at(9, 10) / 1e-4 - 0.024_471_741_852_423_234).abs() < 1e-15);
}

#[test]
fn sequences_without_a_supervised_token_within_max_tokens_are_left_out_and_listed() {
    let full = data();
    let n = full.sequences.len();
    let set = TrainSet::new(full.sequences.clone(), full.slots.clone(), 70).unwrap();
    assert!(
        !set.skipped.is_empty(),
        "late VL-joint turns lie past 70 tokens"
    );
    assert_eq!(set.sequences.len() + set.skipped.len(), n);
    for (t, d) in set.slots.iter().zip([24, 16]) {
        assert_eq!(
            t.rows.len(),
            set.sequences.len() * d,
            "slot rows follow the sequences"
        );
    }
    // The kept rows are the kept sequences' own rows.
    let kept: Vec<usize> = full
        .sequences
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            let name = match s.turn {
                Some(t) => format!("{}#{t}", s.conversation),
                None => s.conversation.clone(),
            };
            !set.skipped.contains(&name)
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(kept.len(), set.sequences.len());
    for (j, &i) in kept.iter().enumerate() {
        assert_eq!(
            set.slots[0].rows[j * 24..(j + 1) * 24],
            full.slots[0].rows[i * 24..(i + 1) * 24]
        );
    }
    for s in &set.sequences {
        assert!(s.input_ids.len() <= 70);
        assert!(
            s.labels
                .iter()
                .skip(1)
                .any(|&l| l != bindscope_geb::readout::chat::IGNORE)
        );
    }
    assert!(
        TrainSet::new(full.sequences, full.slots, 2).is_err(),
        "nothing left"
    );
}

#[test]
fn the_adapter_learning_rate_applies_to_the_adapters_only() {
    let device = bindscope_core::device::test_device().autodiff();
    let data = data();
    let n = data.sequences.len();
    let run = |adapter_lr: Option<f64>| {
        let c = TrainConfig {
            adapter_lr,
            ..cfg(2, 1, 1)
        };
        let mut t = Trainer::new(readout(&device), c, n, 2, device.clone());
        t.train_step(&data).unwrap();
        let m = t.model.valid();
        (flat(&m.decoder), flat(&m.adapters))
    };
    let init = readout(&device).valid();
    let (dec0, ad0) = (flat(&init.decoder), flat(&init.adapters));
    let (dec_none, ad_none) = run(None);
    // The same rate given explicitly is the paper's recipe, bit for bit.
    let (dec_same, ad_same) = run(Some(1e-3));
    assert_eq!(dec_same, dec_none);
    assert_eq!(ad_same, ad_none);
    // Rate 0 (AdamW with no weight decay) freezes the adapters and leaves the decoder's first
    // step as it was (the gradients of the first step do not depend on the rates).
    let (dec_zero, ad_zero) = run(Some(0.0));
    assert_eq!(ad_zero, ad0, "adapters moved at adapter_lr 0");
    assert_ne!(dec_zero, dec0, "the decoder did not train");
    assert_eq!(
        dec_zero, dec_none,
        "the decoder's updates depend only on lr"
    );
    // A larger adapter rate moves the adapters further.
    let (_, ad_big) = run(Some(1e-2));
    let dist = |a: &[f32]| -> f32 { a.iter().zip(&ad0).map(|(x, y)| (x - y).powi(2)).sum() };
    assert!(dist(&ad_big) > dist(&ad_none));
}

#[test]
fn a_lora_run_trains_only_the_factors_and_the_adapters_and_resumes_to_the_same_parameters() {
    use bindscope_geb::readout::train::apply_decoder_lora;
    use bindscope_tuning::lora::{LoraConfig, adapters, trainable_params};
    let device = bindscope_core::device::test_device().autodiff();
    let data = data();
    let n = data.sequences.len();
    let lora = LoraConfig {
        rank: 2,
        alpha: 4.0,
        seed: 42,
    };
    let c = TrainConfig {
        lora: Some(lora),
        ..cfg(2, 1, 2)
    };
    let lora_readout = || {
        let mut r = readout(&device);
        r.decoder = apply_decoder_lora(r.decoder, &lora).unwrap();
        r
    };
    // The fixture decoder's 2 layers × 7 projections.
    let init = lora_readout();
    let layers = init.decoder.spec.num_layers;
    assert_eq!(adapters(&init.decoder, &lora).len(), 7 * layers);
    let base0 = flat(&init.decoder.clone().valid().materialize());
    // Trainable: the factors and the embedding adapters, nothing else of the decoder.
    let factor_params: usize = adapters(&init.decoder, &lora)
        .values()
        .map(|h| h.rank * (h.d_in + h.d_out))
        .sum();
    assert_eq!(
        trainable_params(&init),
        factor_params + flat(&init.adapters).len()
    );
    let mut full = Trainer::new(lora_readout(), c.clone(), n, 2, device.clone());
    let total = full.total_steps();
    for _ in 0..total {
        full.train_step(&data).unwrap();
    }
    // The merged decoder moved: the factors trained.
    let trained = full.model.clone().valid();
    let merged = flat(&trained.decoder.clone().materialize());
    assert_ne!(merged, base0, "the LoRA factors did not train");
    let factors = adapters(&trained.decoder, &lora);
    assert!(factors.values().all(|h| h.b.iter().any(|&x| x != 0.0)));
    let ad0 = flat(&init.adapters);
    assert_ne!(
        flat(&trained.adapters),
        ad0,
        "the embedding adapters did not train"
    );
    // Resume: 3 steps, save, a fresh LoRA readout resumes and finishes.
    let tmp = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::new(tmp.path().join("ckpt"), "fp");
    let mut first = Trainer::new(lora_readout(), c.clone(), n, 2, device.clone());
    for _ in 0..3 {
        first.train_step(&data).unwrap();
    }
    first.save(&ckpts).unwrap();
    drop(first);
    let mut second = Trainer::new(lora_readout(), c, n, 2, device.clone());
    assert!(second.resume(&ckpts).unwrap());
    for _ in 3..total {
        second.train_step(&data).unwrap();
    }
    let resumed = second.model.valid();
    assert_eq!(
        flat(&resumed.decoder.clone().materialize()),
        merged,
        "merged decoder after resume"
    );
    assert_eq!(flat(&resumed.adapters), flat(&trained.adapters));
}

#[test]
fn data_parallel_steps_are_the_one_device_steps() {
    let device = bindscope_core::device::test_device().autodiff();
    let data = data();
    let n = data.sequences.len();
    // 5 sequences, micro-batches of 1, 3 per step, two epochs: steps of 3 and 2 micro-batches,
    // so rounds of 2 devices and 1 (an uneven last round) and a round short of 3 devices.
    let run = |replicas: Vec<Device>| {
        let mut t = Trainer::new(readout(&device), cfg(1, 3, 2), n, 2, device.clone())
            .with_replicas(replicas)
            .unwrap();
        let losses: Vec<f64> = (0..3).map(|_| t.train_step(&data).unwrap().loss).collect();
        assert_eq!(
            t.model.devices(),
            vec![device.clone()],
            "the model stays on the first"
        );
        (losses, flat(&t.model.valid()))
    };
    let (l1, p1) = run(Vec::new());
    // On a GPU test device, a second device of another backend (the CPU): the gradients cross
    // devices, and agree up to float rounding.
    if device != Device::flex().autodiff() {
        let (lx, px) = run(vec![Device::flex().autodiff()]);
        for (a, b) in l1.iter().zip(&lx) {
            assert!((a - b).abs() <= 1e-5, "{l1:?} vs {lx:?}");
        }
        let worst = p1
            .iter()
            .zip(&px)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 1e-5, "parameters differ by {worst:e}");
    }
    let (l2, p2) = run(vec![device.clone()]);
    let (l3, p3) = run(vec![device.clone(), device.clone()]);
    assert_eq!(l1, l2);
    assert_eq!(
        p1, p2,
        "two devices: the one-device parameters, bit for bit"
    );
    assert_eq!(l1, l3);
    assert_eq!(p1, p3, "three devices");
    assert_ne!(p1, flat(&readout(&device).valid()), "it trained");
    // A device with no micro-batch is refused.
    let e = Trainer::new(readout(&device), cfg(1, 1, 1), n, 2, device.clone())
        .with_replicas(vec![device.clone()])
        .err()
        .unwrap();
    assert!(e.contains("--grad-accum is 1"), "{e}");
}
