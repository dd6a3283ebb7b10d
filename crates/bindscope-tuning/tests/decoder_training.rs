//! The decoder LMs train under autodiff: the next-token loss and its gradients against
//! transformers 5.24 (`tests/fixtures/gen/decoder_train.py`: `model(input_ids, labels=labels)
//! .loss.backward()` on the `llama_tied` and `qwen3` fixtures, eager attention, f32), full
//! fine-tuning (every weight moves, the tied embedding takes both uses' gradients), and LoRA on
//! chosen projections through [`bindscope_tuning::lora::apply_lora_to`] (only the adapters
//! train; the adapted model starts equal to the base).

use bindscope_core::train::{AdamW, next_token_cross_entropy};
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_models::llama::LlamaForCausalLM;
use bindscope_models::{CausalLm, ForwardOptions, LmInput};
use bindscope_tuning::lora::{LoraConfig, adapters, apply_lora_to, trainable_params};
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

struct Reference(Vec<u8>);

impl Reference {
    fn open() -> Self {
        Self(std::fs::read(fixtures().join("decoder_train/reference.safetensors")).unwrap())
    }
    fn get(&self, key: &str) -> (Vec<usize>, safetensors::Dtype, Vec<u8>) {
        let st = safetensors::SafeTensors::deserialize(&self.0).unwrap();
        let t = st.tensor(key).unwrap_or_else(|_| panic!("no '{key}'"));
        (t.shape().to_vec(), t.dtype(), t.data().to_vec())
    }
    fn f32(&self, key: &str) -> (Vec<usize>, Vec<f32>) {
        let (s, d, b) = self.get(key);
        assert_eq!(d, safetensors::Dtype::F32);
        (
            s,
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        )
    }
    fn ints(&self, key: &str, device: &Device) -> Tensor<2, Int> {
        let (s, d, b) = self.get(key);
        assert_eq!(d, safetensors::Dtype::I64);
        let v: Vec<i64> = b
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        Tensor::<1, Int>::from_ints(v.as_slice(), device).reshape([s[0], s[1]])
    }
}

fn ckpt(name: &str) -> Checkpoint {
    let dir = fixtures().join(name);
    Checkpoint::from_dir(name, &dir).unwrap()
}

/// Every float parameter's gradient on the host, by module path, in the checkpoint's layout
/// (burn's `[in, out]` linear weights transposed back to `[out, in]`; `gamma` named `weight`).
fn grads_by_path(
    model: &LlamaForCausalLM,
    grads: &burn::tensor::Gradients,
) -> BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    struct Collect<'a> {
        path: Vec<String>,
        grads: &'a burn::tensor::Gradients,
        out: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    }
    impl ModuleVisitor for Collect<'_> {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let Some(g) = param.val().grad(self.grads) else {
                return;
            };
            let path = self.path.join(".").replace(".gamma", ".weight");
            let linear = path.ends_with("proj.weight") || path == "lm_head.weight";
            let (shape, data) = if D == 2 && linear {
                let dev = g.device();
                let g2: Tensor<2> = Tensor::from_data(g.into_data(), &dev);
                let g2 = g2.transpose();
                (g2.dims().to_vec(), g2.into_data())
            } else {
                (g.dims().to_vec(), g.into_data())
            };
            self.out.insert(
                path,
                (shape, data.convert::<f32>().try_to_vec::<f32>().unwrap()),
            );
        }
    }
    let mut c = Collect {
        path: Vec::new(),
        grads,
        out: BTreeMap::new(),
    };
    model.visit(&mut c);
    c.out
}

fn loss_of(model: &LlamaForCausalLM, ids: Tensor<2, Int>, labels: Tensor<2, Int>) -> Tensor<1> {
    let mut cache = model.new_cache();
    let out = model
        .forward_causal(
            LmInput::Ids(ids),
            None,
            None,
            &mut cache,
            ForwardOptions::default(),
        )
        .unwrap();
    next_token_cross_entropy(out.logits, labels)
}

#[test]
fn loss_and_gradients_match_transformers() {
    let r = Reference::open();
    let device = bindscope_core::device::test_device().autodiff();
    // GPU backends reorder the reductions; the gradients are O(0.01–1).
    let tol = if bindscope_core::device::testing_on_accelerator() {
        5e-4
    } else {
        1e-4
    };
    for name in ["llama_tied", "qwen3"] {
        let model = LlamaForCausalLM::load_family(&ckpt(name), &device, &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let ids = r.ints(&format!("{name}.input_ids"), &device);
        let labels = r.ints(&format!("{name}.labels"), &device);
        let loss = loss_of(&model, ids, labels);
        let (_, want) = r.f32(&format!("{name}.loss"));
        let got = loss.clone().into_scalar::<f32>();
        assert!(
            (got - want[0]).abs() <= 1e-5,
            "{name}: loss {got} vs {}",
            want[0]
        );
        let grads = loss.backward();
        let all = grads_by_path(&model, &grads);
        let st = safetensors::SafeTensors::deserialize(&r.0).unwrap();
        let prefix = format!("{name}.grad.");
        let mut checked = 0;
        for key in st.names() {
            let Some(param) = key.strip_prefix(&prefix) else {
                continue;
            };
            let (shape, want) = r.f32(key);
            let (gshape, got) = all
                .get(param)
                .unwrap_or_else(|| panic!("{name}: no gradient for {param}"));
            assert_eq!(gshape, &shape, "{name}: {param} gradient shape");
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst <= tol, "{name}: d loss / d {param} max abs {worst:e}");
            checked += 1;
        }
        assert!(checked >= 5, "{name}: {checked} gradients checked");
    }
}

#[test]
fn full_fine_tuning_moves_every_weight_and_lowers_the_loss() {
    let r = Reference::open();
    let device = bindscope_core::device::test_device().autodiff();
    let mut model =
        LlamaForCausalLM::load_family(&ckpt("llama_tied"), &device, &LoadOptions::default())
            .unwrap();
    let ids = r.ints("llama_tied.input_ids", &device);
    let labels = r.ints("llama_tied.labels", &device);
    let before = model.clone().valid();
    let mut optim = AdamW::default().init();
    let first = loss_of(&model, ids.clone(), labels.clone());
    let l0 = first.clone().into_scalar::<f32>();
    for _ in 0..5 {
        let loss = loss_of(&model, ids.clone(), labels.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model, grads);
    }
    let l5 = loss_of(&model, ids, labels).into_scalar::<f32>();
    assert!(l5 < l0, "loss {l0} → {l5}");
    // Every parameter tensor moved (the tied embedding included).
    let after = model.valid();
    let a = flat_params(&before);
    let b = flat_params(&after);
    assert_eq!(a.len(), b.len());
    for ((path, x), (_, y)) in a.iter().zip(&b) {
        assert!(x != y, "{path} did not move");
    }
}

fn flat_params<M: Module>(m: &M) -> Vec<(String, Vec<f32>)> {
    struct Flat {
        path: Vec<String>,
        out: Vec<(String, Vec<f32>)>,
    }
    impl ModuleVisitor for Flat {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.out.push((
                self.path.join("."),
                param
                    .val()
                    .into_data()
                    .convert::<f32>()
                    .try_to_vec::<f32>()
                    .unwrap(),
            ));
        }
    }
    let mut f = Flat {
        path: Vec::new(),
        out: Vec::new(),
    };
    m.visit(&mut f);
    f.out
}

#[test]
fn lora_on_query_and_value_projections_trains_only_the_adapters() {
    let r = Reference::open();
    let device = bindscope_core::device::test_device().autodiff();
    let base =
        LlamaForCausalLM::load_family(&ckpt("qwen3"), &device, &LoadOptions::default()).unwrap();
    let ids = r.ints("qwen3.input_ids", &device);
    let labels = r.ints("qwen3.labels", &device);
    let base_loss = loss_of(&base, ids.clone(), labels.clone()).into_scalar::<f32>();
    let cfg = LoraConfig::default();
    let targets = r"self_attn\.(q_proj|v_proj)\.weight$";
    let mut model = apply_lora_to(base, &cfg, targets).unwrap();
    // q_proj 64→128 and v_proj 64→64 (qwen3 fixture: head_dim 32, 4 heads, 2 kv heads) per layer.
    let spec = model.spec.clone();
    let (d, q_out, v_out) = (
        spec.hidden_size,
        spec.num_heads * spec.head_dim,
        spec.num_kv_heads * spec.head_dim,
    );
    let per_layer = cfg.rank * (d + q_out) + cfg.rank * (d + v_out);
    assert_eq!(trainable_params(&model), spec.num_layers * per_layer);
    // b = 0: the adapted model computes what the base does.
    let l0 = loss_of(&model, ids.clone(), labels.clone()).into_scalar::<f32>();
    assert!((l0 - base_loss).abs() <= 1e-6, "{l0} vs {base_loss}");
    let frozen_before: Vec<_> = flat_params(&model.clone().valid())
        .into_iter()
        .filter(|(p, _)| !p.contains("lora"))
        .collect();
    let mut optim = AdamW::default().init();
    for _ in 0..5 {
        let loss = loss_of(&model, ids.clone(), labels.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    let l5 = loss_of(&model, ids, labels).into_scalar::<f32>();
    assert!(l5 < l0, "loss {l0} → {l5}");
    let after = model.valid();
    let frozen_after: Vec<_> = flat_params(&after)
        .into_iter()
        .filter(|(p, _)| !p.contains("lora"))
        .collect();
    assert_eq!(frozen_before, frozen_after, "only the adapters may move");
    let ad = adapters(&after, &cfg);
    assert_eq!(ad.len(), 2 * spec.num_layers);
    assert!(ad.values().all(|h| h.b.iter().any(|&x| x != 0.0)));
}
