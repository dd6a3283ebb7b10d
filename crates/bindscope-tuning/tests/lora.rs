//! LoRA on the tiny BERT fixture (`tests/fixtures/bert`, hidden 32, 2 layers, 4 heads) with a
//! tiny WordPiece tokenizer (`tests/fixtures/tiny-wordpiece`): which parameters train, PEFT
//! names and shapes, the merged checkpoint, LiNeS, the triplet loss, attention margins, and
//! resume equivalence.

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::text::{TextPolicy, Tokenizer};
use bindscope_models::TextEncoder;
use bindscope_models::bert::BertModel;
use bindscope_tuning::attention::{binding_weights, caption_margins, margins, word_tokens};
use bindscope_tuning::example::{Construction, Triplet};
use bindscope_tuning::lora::{
    HostAdapters, LinesConfig, LoraConfig, adapters, apply_lora, checkpoint_stems, layer_of,
    lines_scaled, peft_tensors, read_f32_safetensors, set_adapters, trainable_params, write_merged,
    write_peft_adapter,
};
use bindscope_tuning::train::{TrainConfig, Trainer, run, triplet_loss};
use burn::module::Module;
use burn::prelude::*;
use burn::tensor::TensorData;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A checkpoint directory: the tiny BERT weights and config with the tiny tokenizer.
fn tiny_ckpt(dir: &Path) -> Checkpoint {
    let src = root().join("tests/fixtures/bert");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tiny-wordpiece/tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    Checkpoint::from_dir("tiny-bert", dir).unwrap()
}

fn tokenizer(ckpt: &Checkpoint) -> Tokenizer {
    Tokenizer::from_file(
        ckpt.tokenizer.as_ref().unwrap(),
        TextPolicy::bert().with_max_length(40),
    )
    .unwrap()
}

fn triplet(i: usize, a: &str, p: &str, n: &str, b: &[(&str, &str)]) -> Triplet {
    Triplet {
        id: format!("t{i}"),
        construction: Construction::PairSwap,
        anchor: a.into(),
        positive: p.into(),
        negative: n.into(),
        bindings: b
            .iter()
            .map(|(x, y)| [x.to_string(), y.to_string()])
            .collect(),
    }
}

fn triplets() -> Vec<Triplet> {
    let pairs = [
        ("red", "box"),
        ("blue", "ball"),
        ("green", "cup"),
        ("small", "kite"),
        ("large", "cube"),
    ];
    let mut out = Vec::new();
    for i in 0..pairs.len() {
        for j in 0..pairs.len() {
            if i == j || out.len() >= 12 {
                continue;
            }
            let ((a1, o1), (a2, o2)) = (pairs[i], pairs[j]);
            out.push(triplet(
                out.len(),
                &format!("a {a1} {o1} and a {a2} {o2}."),
                &format!("a {a2} {o2} and a {a1} {o1}."),
                &format!("a {a1} {o2} and a {a2} {o1}."),
                &[(a1, o1), (a2, o2)],
            ));
        }
    }
    out
}

const TARGETS: [&str; 8] = [
    "encoder.layer.0.attention.output.dense.weight",
    "encoder.layer.0.attention.self_attn.key.weight",
    "encoder.layer.0.attention.self_attn.query.weight",
    "encoder.layer.0.attention.self_attn.value.weight",
    "encoder.layer.1.attention.output.dense.weight",
    "encoder.layer.1.attention.self_attn.key.weight",
    "encoder.layer.1.attention.self_attn.query.weight",
    "encoder.layer.1.attention.self_attn.value.weight",
];

#[test]
fn lora_trains_only_q_k_v_o_of_every_layer() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = tiny_ckpt(dir.path());
    let device = bindscope_core::device::test_device().autodiff();
    let base = BertModel::load(&ckpt, &device, &LoadOptions::default()).unwrap();
    let total = base.num_params();
    let model = apply_lora(base, &LoraConfig::default()).unwrap();
    // 2 layers × 4 projections × (a: 32×4 + b: 4×32).
    assert_eq!(trainable_params(&model), 2 * 4 * (32 * 4 + 4 * 32));
    assert_eq!(model.num_params(), total + 2048);
    let ad = adapters(&model, &LoraConfig::default());
    assert_eq!(ad.keys().map(String::as_str).collect::<Vec<_>>(), TARGETS);
    for h in ad.values() {
        assert!(h.b.iter().all(|&x| x == 0.0), "b starts at zero");
        let bound = 1.0 / (h.d_in as f32).sqrt();
        assert!(
            h.a.iter().all(|x| x.abs() <= bound) && h.a.iter().any(|&x| x != 0.0),
            "a ~ U(±1/√in) as PEFT"
        );
    }

    // One step changes the adapters and nothing else.
    let cfg = TrainConfig {
        lr: 1e-2,
        ..Default::default()
    };
    let tok = tokenizer(&ckpt);
    let fresh = BertModel::load(&ckpt, &device, &LoadOptions::default()).unwrap();
    let before = fresh.valid();
    let mut trainer = Trainer::new(fresh, cfg, tok, &device).unwrap();
    let t = triplets();
    let log = trainer
        .train_step(&t.iter().take(4).collect::<Vec<_>>())
        .unwrap();
    assert!(log.loss.is_finite());
    let after = trainer.model.valid();
    let moved = adapters(&after, &LoraConfig::default());
    assert!(
        moved.values().all(|h| h.b.iter().any(|&x| x != 0.0)),
        "every adapter received a gradient"
    );
    let merged_free = after.clone().materialize();
    // Non-target parameters are unchanged.
    let eq = |x: Tensor<2>, y: Tensor<2>| (x - y).abs().max().into_scalar::<f32>();
    assert_eq!(
        eq(
            before.embeddings.word_embeddings.weight.val(),
            merged_free.embeddings.word_embeddings.weight.val()
        ),
        0.0
    );
    assert_eq!(
        eq(
            before.encoder.layer[1].intermediate.dense.weight.val(),
            merged_free.encoder.layer[1].intermediate.dense.weight.val()
        ),
        0.0
    );
    let lb = |m: &BertModel| m.encoder.layer[0].output.layer_norm.gamma.val();
    assert_eq!(
        (lb(&before) - lb(&merged_free))
            .abs()
            .max()
            .into_scalar::<f32>(),
        0.0
    );
    // Target bases are frozen: the adapted weight's base is the original.
    assert_eq!(
        eq(
            before.encoder.layer[0]
                .attention
                .self_attn
                .query
                .weight
                .val(),
            after.encoder.layer[0]
                .attention
                .self_attn
                .query
                .weight
                .base()
        ),
        0.0
    );
    assert!(
        eq(
            before.encoder.layer[0]
                .attention
                .self_attn
                .query
                .weight
                .val(),
            merged_free.encoder.layer[0]
                .attention
                .self_attn
                .query
                .weight
                .val()
        ) > 0.0
    );
}

fn random_adapters(model: &BertModel, seed: u64) -> HostAdapters {
    let mut ad = adapters(model, &LoraConfig::default());
    let mut s = seed;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 0.2
    };
    for h in ad.values_mut() {
        h.a.iter_mut().for_each(|x| *x = next());
        h.b.iter_mut().for_each(|x| *x = next());
    }
    ad
}

/// The trainer's loss (which skips the padding: no attention loss) equals the loss of the
/// padded forward pass computed by hand, with non-zero adapters in the pass.
#[test]
fn the_trainers_unpadded_loss_is_the_padded_one() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = tiny_ckpt(dir.path());
    let device = bindscope_core::device::test_device().autodiff();
    let base = BertModel::load(&ckpt, &device, &LoadOptions::default()).unwrap();
    let tok = tokenizer(&ckpt);
    let mut trainer = Trainer::new(base, TrainConfig::default(), tok.clone(), &device).unwrap();
    let random = random_adapters(&trainer.model, 11);
    trainer.model = set_adapters(trainer.model.clone(), &random).unwrap();
    let t = triplets();
    let batch: Vec<&Triplet> = t.iter().take(4).collect();
    let (loss, _, _) = trainer.loss(&batch).unwrap();

    let texts: Vec<&str> = batch
        .iter()
        .map(|x| x.anchor.as_str())
        .chain(batch.iter().map(|x| x.positive.as_str()))
        .chain(batch.iter().map(|x| x.negative.as_str()))
        .collect();
    let (ids, mask) = tok.encode_batch(&texts).unwrap().tensors(&device);
    let real = mask.clone().sum().into_scalar::<i64>() as usize;
    assert!(
        real < mask.dims().iter().product::<usize>(),
        "the batch must be padded"
    );
    let out = trainer.model.forward(
        ids,
        mask.clone(),
        None,
        bindscope_models::ForwardOptions::default(),
    );
    let emb = trainer.model.pool_sentence(out.last_hidden_state, mask);
    let [_, e] = emb.dims();
    let part = |i: usize| emb.clone().slice([4 * i..4 * (i + 1), 0..e]);
    let padded = triplet_loss(part(0), part(1), part(2), trainer.cfg.margin);
    let (got, want) = (loss.into_scalar::<f32>(), padded.into_scalar::<f32>());
    assert!(want > 0.0, "a loss that takes part: {want}");
    assert!(
        (got - want).abs() <= 1e-6 * want.abs().max(1.0),
        "{got} vs {want}"
    );
}

#[test]
fn peft_names_shapes_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = tiny_ckpt(dir.path());
    let device = bindscope_core::device::test_device();
    let model = apply_lora(
        BertModel::load(&ckpt, &device, &LoadOptions::default()).unwrap(),
        &LoraConfig::default(),
    )
    .unwrap();
    let ad = random_adapters(&model, 1);
    let stems = checkpoint_stems::<BertModel>(&ckpt, ad.keys().cloned()).unwrap();
    assert_eq!(
        stems["encoder.layer.1.attention.self_attn.value.weight"],
        "encoder.layer.1.attention.self.value"
    );
    assert_eq!(
        stems["encoder.layer.0.attention.output.dense.weight"],
        "encoder.layer.0.attention.output.dense"
    );
    let t = peft_tensors(&ad, &stems, &LoraConfig::default());
    assert_eq!(t.len(), 16);
    let get = |k: &str| {
        t.iter()
            .find(|x| x.0 == k)
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let a = get("base_model.model.encoder.layer.0.attention.self.query.lora_A.weight");
    let b = get("base_model.model.encoder.layer.0.attention.self.query.lora_B.weight");
    assert_eq!((a.1.clone(), b.1.clone()), (vec![4, 32], vec![32, 4]));
    let h = &ad["encoder.layer.0.attention.self_attn.query.weight"];
    // lora_A[k, i] = a[i, k];  lora_B[o, k] = b[k, o].
    assert_eq!(a.2[3 * 32 + 7], h.a[7 * 4 + 3]);
    assert_eq!(b.2[9 * 4 + 2], h.b[2 * 32 + 9]);

    let out = dir.path().join("adapter");
    write_peft_adapter::<BertModel>(
        &out,
        &ad,
        &stems,
        &LoraConfig::default(),
        "tiny-bert",
        "test",
    )
    .unwrap();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("adapter_config.json")).unwrap())
            .unwrap();
    assert_eq!(
        (
            cfg["peft_type"].as_str(),
            cfg["r"].as_u64(),
            cfg["lora_alpha"].as_f64()
        ),
        (Some("LORA"), Some(4), Some(4.0))
    );
    let re = regex::Regex::new(&format!(
        "^(?:{})$",
        cfg["target_modules"].as_str().unwrap()
    ))
    .unwrap();
    for s in stems.values() {
        assert!(re.is_match(s), "target_modules must match {s}");
    }
    assert!(
        !re.is_match("encoder.layer.0.intermediate.dense")
            && !re.is_match("encoder.layer.0.output.dense")
    );
    let saved = read_f32_safetensors(&out.join("adapter_model.safetensors")).unwrap();
    assert_eq!(saved.len(), 16);
    assert_eq!(
        saved["base_model.model.encoder.layer.0.attention.self.query.lora_A.weight"].1,
        a.2
    );
}

#[test]
fn lines_scale_follows_the_formula() {
    let l = LinesConfig {
        alpha: 0.3,
        beta: 0.6,
    };
    assert!((l.scale(0, 6) - 0.3).abs() < 1e-12);
    assert!((l.scale(5, 6) - 0.9).abs() < 1e-12);
    assert!((l.scale(2, 6) - (0.3 + 0.6 * 2.0 / 5.0)).abs() < 1e-12);
    assert!((l.scale(0, 1) - 0.9).abs() < 1e-12);
    assert_eq!(LinesConfig::identity().scale(3, 12), 1.0);
    assert_eq!(
        layer_of("encoder.layer.11.attention.self_attn.query.weight"),
        Some(11)
    );
    assert_eq!(
        layer_of("text_model.encoder.layers.3.self_attn.q_proj.weight"),
        Some(3)
    );

    let dir = tempfile::tempdir().unwrap();
    let ckpt = tiny_ckpt(dir.path());
    let model = apply_lora(
        BertModel::load(
            &ckpt,
            &bindscope_core::device::test_device(),
            &LoadOptions::default(),
        )
        .unwrap(),
        &LoraConfig::default(),
    )
    .unwrap();
    let ad = random_adapters(&model, 2);
    let scaled = lines_scaled(&ad, &LinesConfig::default(), 2).unwrap();
    for (k, h) in &scaled {
        let s = if k.contains("layer.0.") { 0.5 } else { 1.0 };
        assert_eq!(h.a, ad[k].a);
        assert!(
            h.b.iter()
                .zip(&ad[k].b)
                .all(|(x, y)| (x - y * s).abs() < 1e-7),
            "{k}"
        );
    }
}

#[test]
fn merged_checkpoint_is_base_plus_scaled_ba_and_loads() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = tiny_ckpt(dir.path());
    let device = bindscope_core::device::test_device();
    let model = apply_lora(
        BertModel::load(&ckpt, &device, &LoadOptions::default()).unwrap(),
        &LoraConfig::default(),
    )
    .unwrap();
    let ad = random_adapters(&model, 3);
    let scaled = lines_scaled(&ad, &LinesConfig::default(), 2).unwrap();
    let stems = checkpoint_stems::<BertModel>(&ckpt, ad.keys().cloned()).unwrap();
    let out = dir.path().join("merged");
    write_merged(&ckpt, &out, &scaled, &stems).unwrap();
    assert!(out.join("config.json").is_file() && out.join("tokenizer.json").is_file());

    let base = read_f32_safetensors(&ckpt.weights[0]).unwrap();
    let merged = read_f32_safetensors(&out.join("model.safetensors")).unwrap();
    assert_eq!(
        base.keys().collect::<Vec<_>>(),
        merged.keys().collect::<Vec<_>>(),
        "same keys"
    );
    let peft = peft_tensors(&ad, &stems, &LoraConfig::default());
    for (k, (shape, w)) in &base {
        let m = &merged[k].1;
        let stem = k.strip_suffix(".weight").unwrap_or(k);
        let a = peft
            .iter()
            .find(|t| t.0 == format!("base_model.model.{stem}.lora_A.weight"));
        let b = peft
            .iter()
            .find(|t| t.0 == format!("base_model.model.{stem}.lora_B.weight"));
        match (a, b) {
            (Some(a), Some(b)) => {
                // W' = W + s_l · (α/r) · B·A, with B, A the unscaled PEFT factors.
                let s = if k.contains("layer.0.") { 0.5 } else { 1.0 };
                let (out_d, in_d) = (shape[0], shape[1]);
                for o in 0..out_d {
                    for i in 0..in_d {
                        let ba: f32 = (0..4).map(|r| b.2[o * 4 + r] * a.2[r * in_d + i]).sum();
                        let want = w[o * in_d + i] + s * ba;
                        assert!(
                            (m[o * in_d + i] - want).abs() < 1e-6,
                            "{k}[{o},{i}]: {} vs {want}",
                            m[o * in_d + i]
                        );
                    }
                }
            }
            _ => assert_eq!(m, w, "{k} must be copied unchanged"),
        }
    }

    // Our loader reads the merged checkpoint strictly, and it computes what the adapters do.
    let merged_ckpt = Checkpoint::from_dir("merged", &out).unwrap();
    let loaded = BertModel::load(&merged_ckpt, &device, &LoadOptions::default()).unwrap();
    let with = set_adapters(model, &scaled).unwrap();
    let tok = tokenizer(&ckpt);
    let (ids, mask) = tok
        .encode_batch(&["a red box and a blue ball.", "the cup is green."])
        .unwrap()
        .tensors(&device);
    let d = (loaded.embed_text(ids.clone(), mask.clone()) - with.embed_text(ids, mask))
        .abs()
        .max()
        .into_scalar::<f32>();
    assert!(d < 1e-5, "merged vs adapter embeddings differ by {d}");
}

#[test]
fn triplet_loss_on_a_hand_checked_case() {
    let device = bindscope_core::device::test_device();
    let t = |v: [[f32; 2]; 2]| Tensor::<2>::from_data(TensorData::new(v.concat(), [2, 2]), &device);
    // Row 0: cos(a,p) = 1, cos(a,n) = 0 → max(0, 0.05 − 1 + 0) = 0.
    // Row 1: cos(a,p) = 0, cos(a,n) = 1/√2 → 0.05 + 0.70711 = 0.75711.
    let a = t([[1.0, 0.0], [3.0, 0.0]]);
    let p = t([[2.0, 0.0], [0.0, 5.0]]);
    let n = t([[0.0, 1.0], [1.0, 1.0]]);
    let l = triplet_loss(a, p, n, 0.05).into_scalar::<f32>();
    let want = (0.05 + std::f32::consts::FRAC_1_SQRT_2) / 2.0;
    assert!((l - want).abs() < 1e-6, "{l} vs {want}");
}

#[test]
fn attention_margin_on_a_hand_made_map() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = tiny_ckpt(dir.path());
    let tok = tokenizer(&ckpt);
    // [CLS] a red ball and a blue c ##u ##b ##e . [SEP]
    let text = "a red ball and a blue cube.";
    let wt = word_tokens(&tok, text, 13).unwrap();
    assert_eq!(
        wt,
        vec![
            vec![1],
            vec![2],
            vec![3],
            vec![4],
            vec![5],
            vec![6],
            vec![7, 8, 9, 10]
        ]
    );
    let binds = [
        ["red".to_string(), "ball".to_string()],
        ["blue".to_string(), "cube".to_string()],
    ];
    let w = binding_weights(&tok, &[text], &[&binds], 13).unwrap();
    // Binding 0 (red→ball): no other attribute before "ball" → no margin. Binding 1: cube's
    // sub-tokens → blue (6) minus → red (2).
    assert_eq!(w.valid, vec![0.0, 1.0]);
    let (h, t) = (2, 13);
    let mut att = vec![0f32; h * t * t];
    let vals = [(7, 0.5, 0.1), (8, 0.4, 0.2), (9, 0.3, 0.3), (10, 0.2, 0.0)]; // (q, to blue, to red), head 0
    for (q, blue, red) in vals {
        att[q * t + 6] = blue;
        att[q * t + 2] = red;
        att[t * t + q * t + 6] = blue / 2.0; // head 1: half
        att[t * t + q * t + 2] = red * 2.0; // head 1: double
    }
    let device = bindscope_core::device::test_device();
    let a = Tensor::<4>::from_data(TensorData::new(att, [1, h, t, t]), &device);
    let m = margins(a, &w);
    // Mean over heads then over cube's 4 sub-tokens of (blue − red).
    let want: f32 = vals
        .iter()
        .map(|(_, b, r)| ((b + b / 2.0) / 2.0) - ((r + r * 2.0) / 2.0))
        .sum::<f32>()
        / 4.0;
    let got = m.clone().into_data().try_to_vec::<f32>().unwrap();
    assert!(
        (got[1] - want).abs() < 1e-6 && got[0] == 0.0,
        "{got:?} vs {want}"
    );
    assert_eq!(caption_margins(m, &w), vec![Some(f64::from(got[1]))]);

    // Predicative: the attribute is the later word, the other objects are the contrast.
    let text = "the box is red and the ball is blue.";
    let binds = [
        ["red".to_string(), "box".to_string()],
        ["blue".to_string(), "ball".to_string()],
    ];
    let w = binding_weights(&tok, &[text], &[&binds], 12).unwrap();
    assert_eq!(w.valid, vec![0.0, 1.0]);
    let base = 12; // binding 1 row
    assert_eq!(w.q[base + 9], 1.0, "query: 'blue' (token 9)");
    assert_eq!(
        (w.k[base + 7], w.k[base + 2]),
        (1.0, -1.0),
        "own object 'ball' minus other object 'box'"
    );
}

#[test]
fn an_interrupted_run_resumes_to_the_same_adapters() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = tiny_ckpt(dir.path());
    let device = bindscope_core::device::test_device().autodiff();
    let t = triplets();
    // 12 triplets, batch 4, 2 epochs: 6 steps.
    let cfg = TrainConfig {
        batch_size: 4,
        epochs: 2,
        lr: 5e-3,
        checkpoint_every: 2,
        ..Default::default()
    };
    let fresh = || {
        Trainer::new(
            BertModel::load(&ckpt, &device, &LoadOptions::default()).unwrap(),
            cfg.clone(),
            tokenizer(&ckpt),
            &device,
        )
        .unwrap()
    };

    let full_dir = dir.path().join("full");
    let mut full = fresh();
    let mut logs = Vec::new();
    assert!(run(&mut full, &t, &full_dir, None, &mut |l| logs.push(l.loss)).unwrap());
    assert_eq!((full.step, logs.len()), (6, 6));

    let cut_dir = dir.path().join("cut");
    let mut first = fresh();
    assert!(
        !run(&mut first, &t, &cut_dir, Some(3), &mut |_| {}).unwrap(),
        "stops at step 3"
    );
    drop(first);
    let mut second = fresh();
    let mut steps = Vec::new();
    assert!(run(&mut second, &t, &cut_dir, None, &mut |l| steps.push(l.step)).unwrap());
    assert_eq!(steps, vec![4, 5, 6], "resumes after the checkpoint");

    let (x, y) = (
        adapters(&full.model, &cfg.lora),
        adapters(&second.model, &cfg.lora),
    );
    let mut max = 0f32;
    for (k, h) in &x {
        for (u, v) in h.a.iter().chain(&h.b).zip(y[k].a.iter().chain(&y[k].b)) {
            max = max.max((u - v).abs());
        }
    }
    assert!(
        max < 1e-6,
        "resumed adapters differ from the uninterrupted run by {max}"
    );
    assert!(
        x.values().any(|h| h.b.iter().any(|&v| v.abs() > 1e-4)),
        "training moved the adapters"
    );

    // Without the optimizer state the continuation differs (the test can fail).
    std::fs::remove_dir_all(&cut_dir).unwrap();
    let mut third = fresh();
    run(&mut third, &t, &cut_dir, Some(3), &mut |_| {}).unwrap();
    let latest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cut_dir.join("latest.json")).unwrap())
            .unwrap();
    let step_dir = cut_dir.join(latest["dir"].as_str().unwrap());
    let saved =
        bindscope_tuning::lora::load_host_adapters(&step_dir.join("adapter.safetensors")).unwrap();
    let mut fourth = fresh();
    fourth.model = set_adapters(fourth.model.clone(), &saved).unwrap();
    fourth.step = 3;
    let sched = bindscope_tuning::train::schedule(t.len(), &cfg);
    for b in &sched[3..] {
        fourth
            .train_step(&b.iter().map(|&i| &t[i]).collect::<Vec<_>>())
            .unwrap();
    }
    let z = adapters(&fourth.model, &cfg.lora);
    let d: f32 = x
        .iter()
        .flat_map(|(k, h)| h.b.iter().zip(&z[k].b).map(|(u, v)| (u - v).abs()))
        .fold(0.0, f32::max);
    assert!(
        d > 1e-6,
        "a fresh optimizer should not reproduce the uninterrupted run"
    );

    // A checkpoint of other settings is refused.
    let other = TrainConfig {
        lr: 1e-3,
        ..cfg.clone()
    };
    let mut wrong = Trainer::new(
        BertModel::load(&ckpt, &device, &LoadOptions::default()).unwrap(),
        other,
        tokenizer(&ckpt),
        &device,
    )
    .unwrap();
    assert!(
        run(&mut wrong, &t, &cut_dir, None, &mut |_| {})
            .unwrap_err()
            .contains("another run")
    );
}

#[test]
fn attention_loss_trains() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = tiny_ckpt(dir.path());
    let device = bindscope_core::device::test_device().autodiff();
    let cfg = TrainConfig {
        attn: Some(bindscope_tuning::train::AttnLossConfig {
            tau: 0.1,
            lambda: 0.1,
            layers: (0, 2),
        }),
        ..Default::default()
    };
    let mut tr = Trainer::new(
        BertModel::load(&ckpt, &device, &LoadOptions::default()).unwrap(),
        cfg,
        tokenizer(&ckpt),
        &device,
    )
    .unwrap();
    let t = triplets();
    let log = tr
        .train_step(&t.iter().take(4).collect::<Vec<_>>())
        .unwrap();
    let attn = log.attn_loss.expect("attention loss computed");
    assert!(
        attn > 0.0 && (log.loss - (log.triplet_loss + 0.1 * attn)).abs() < 1e-5,
        "{log:?}"
    );
}
