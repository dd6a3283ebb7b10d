//! The generative readout against PyTorch / transformers 5.24 (`tests/fixtures/gen/
//! geb_readout.py`): the token ids and assistant masks of every visual-only and VL-joint
//! instance (transformers' `return_assistant_tokens_mask` on the same template with
//! `{% generation %}` markers), the adapter's output, the logits and loss with the embeddings
//! injected through `inputs_embeds`, the gradients, and one AdamW step.

use bindscope_core::train::AdamW;
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::lm::LmTokenizer;
use bindscope_geb::readout::adapter::{AdapterDims, EmbeddingAdapter};
use bindscope_geb::readout::chat::{ChatFormat, Mode, Sequence};
use bindscope_geb::readout::conversation::read_llava;
use bindscope_geb::readout::inject::HostBatch;
use bindscope_geb::readout::model::GenerativeReadout;
use bindscope_models::generate::chat::ChatTemplate;
use bindscope_models::llama::LlamaForCausalLM;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/geb_readout")
}

struct Reference(Vec<u8>);

impl Reference {
    fn open() -> Self {
        Self(std::fs::read(dir().join("reference.safetensors")).unwrap())
    }
    fn f32(&self, key: &str) -> (Vec<usize>, Vec<f32>) {
        let st = safetensors::SafeTensors::deserialize(&self.0).unwrap();
        let t = st.tensor(key).unwrap_or_else(|_| panic!("no '{key}'"));
        assert_eq!(t.dtype(), safetensors::Dtype::F32, "{key}");
        (
            t.shape().to_vec(),
            t.data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        )
    }
    fn i64(&self, key: &str) -> (Vec<usize>, Vec<i64>) {
        let st = safetensors::SafeTensors::deserialize(&self.0).unwrap();
        let t = st.tensor(key).unwrap_or_else(|_| panic!("no '{key}'"));
        assert_eq!(t.dtype(), safetensors::Dtype::I64, "{key}");
        (
            t.shape().to_vec(),
            t.data()
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        )
    }
    fn tensor(&self, key: &str, device: &Device) -> Tensor<2> {
        let (s, v) = self.f32(key);
        Tensor::<1>::from_floats(v.as_slice(), device).reshape([s[0], s[1]])
    }
}

fn format() -> ChatFormat {
    let tok = LmTokenizer::from_file(dir().join("tokenizer.json")).unwrap();
    let template = ChatTemplate::from_dir(&dir()).unwrap();
    ChatFormat::new("geb_readout", &tok, template, &[2]).unwrap()
}

fn reference_json() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("reference.json")).unwrap()).unwrap()
}

/// Every sequence of the fixture's conversations, in the generator's order.
fn sequences(fmt: &ChatFormat) -> Vec<(Mode, usize, Sequence)> {
    crate::common::sequences(fmt, &read_llava(&dir().join("train.json")).unwrap())
}

#[test]
fn ids_and_assistant_masks_match_transformers() {
    let fmt = format();
    let r = reference_json();
    assert_eq!(
        u64::from(fmt.embed_pad_id()),
        r["embed_pad_id"].as_u64().unwrap()
    );
    let supervised =
        crate::common::check_instances(&fmt, &sequences(&fmt), r["instances"].as_array().unwrap());
    assert!(supervised > 40, "{supervised} supervised tokens");
}

fn load_readout(device: &Device) -> GenerativeReadout {
    let ckpt = Checkpoint::from_dir("geb_readout", &dir()).unwrap();
    let decoder = LlamaForCausalLM::load_family(&ckpt, device, &LoadOptions::default()).unwrap();
    let image = EmbeddingAdapter::load(
        &dir().join("adapter_image.safetensors"),
        AdapterDims {
            embed: 24,
            hidden: 48,
            decoder: 64,
        },
        device,
    )
    .unwrap();
    let question = EmbeddingAdapter::load(
        &dir().join("adapter_question.safetensors"),
        AdapterDims {
            embed: 16,
            hidden: 48,
            decoder: 64,
        },
        device,
    )
    .unwrap();
    GenerativeReadout {
        decoder,
        adapters: vec![image, question],
    }
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// Logits compared at real (unpadded) positions only: padded rows differ in what they attend.
fn compare_logits(label: &str, got: Tensor<3>, want: (Vec<usize>, Vec<f32>), mask: &[i64]) {
    let [n, t, v] = got.dims();
    assert_eq!(want.0, vec![n, t, v], "{label}: logits shape");
    let got = bindscope_core::device::to_host_f32(got).unwrap();
    let mut worst = 0f32;
    let mut compared = 0;
    for p in 0..n * t {
        if mask[p] == 1 {
            worst = worst.max(max_abs(
                &got[p * v..(p + 1) * v],
                &want.1[p * v..(p + 1) * v],
            ));
            compared += 1;
        }
    }
    assert!(compared > 100, "{label}: {compared} positions");
    assert!(worst <= 1e-4, "{label}: logits max abs {worst:e}");
}

fn tol_loss() -> f32 {
    if bindscope_core::device::testing_on_accelerator() {
        // GPU reductions are reordered; the loss is O(5).
        1e-4
    } else {
        1e-5
    }
}

#[test]
fn vl_joint_logits_and_loss_match_pytorch() {
    let device = bindscope_core::device::test_device();
    let r = Reference::open();
    let fmt = format();
    let readout = load_readout(&device);
    let vl: Vec<(usize, Sequence)> = sequences(&fmt)
        .into_iter()
        .filter(|(m, _, _)| *m == Mode::VlJoint)
        .map(|(_, c, s)| (c, s))
        .collect();
    let seqs: Vec<&Sequence> = vl.iter().map(|(_, s)| s).collect();
    let batch = HostBatch::new(&seqs, 2);
    let (_, want_labels) = r.i64("vl.labels");
    assert_eq!(batch.labels, want_labels);
    let (_, want_mask) = r.i64("vl.attention_mask");
    assert_eq!(batch.attention_mask, want_mask);
    let e_image = r.tensor("e_image", &device);
    let conv: Vec<i64> = vl.iter().map(|(c, _)| *c as i64).collect();
    let e_image = e_image.select(0, Tensor::<1, Int>::from_ints(conv.as_slice(), &device));
    let e_q = r.tensor("e_question", &device);
    let logits = readout
        .logits(&batch, &[e_image.clone(), e_q.clone()], &device)
        .unwrap();
    compare_logits(
        "vl-joint",
        logits,
        r.f32("vl.logits"),
        &batch.attention_mask,
    );
    let want = r.f32("vl.loss").1[0];
    // The training loss (head on the supervised rows only) and the full-logits loss
    // transformers computes both equal the reference.
    let loss = readout
        .loss(&batch, &[e_image.clone(), e_q.clone()], &device)
        .unwrap()
        .into_scalar::<f32>();
    assert!((loss - want).abs() <= tol_loss(), "loss {loss} vs {want}");
    let full = readout
        .loss_full_logits(&batch, &[e_image, e_q], &device)
        .unwrap()
        .into_scalar::<f32>();
    assert!(
        (full - want).abs() <= tol_loss(),
        "full-logits loss {full} vs {want}"
    );
}

/// Every float parameter by checkpoint-style path: the decoder's under its HF names, adapter 0
/// as `adapter_image.*`, adapter 1 as `adapter_question.*`; linear weights as `[out, in]`.
fn params_by_path<M: Module>(m: &M) -> BTreeMap<String, Vec<f32>> {
    struct Flat {
        path: Vec<String>,
        out: BTreeMap<String, Vec<f32>>,
    }
    impl ModuleVisitor for Flat {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let path = checkpoint_name(&self.path.join("."));
            let t = param.val();
            let v = if D == 2 && path.ends_with(".weight") && !path.contains("embed_tokens") {
                let t2: Tensor<2> = Tensor::from_data(t.into_data(), &param.val().device());
                t2.transpose().into_data()
            } else {
                t.into_data()
            };
            self.out
                .insert(path, v.convert::<f32>().try_to_vec::<f32>().unwrap());
        }
    }
    let mut f = Flat {
        path: Vec::new(),
        out: BTreeMap::new(),
    };
    m.visit(&mut f);
    f.out
}

fn checkpoint_name(path: &str) -> String {
    path.replace("decoder.", "")
        .replace("adapters.0.", "adapter_image.")
        .replace("adapters.1.", "adapter_question.")
        .replace(".gamma", ".weight")
        .replace(".beta", ".bias")
}

fn grads_by_path(
    m: &GenerativeReadout,
    grads: &burn::tensor::Gradients,
) -> BTreeMap<String, Vec<f32>> {
    struct G<'a> {
        path: Vec<String>,
        grads: &'a burn::tensor::Gradients,
        out: BTreeMap<String, Vec<f32>>,
    }
    impl ModuleVisitor for G<'_> {
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
            let path = checkpoint_name(&self.path.join("."));
            let v = if D == 2 && path.ends_with(".weight") && !path.contains("embed_tokens") {
                let dev = g.device();
                let t2: Tensor<2> = Tensor::from_data(g.into_data(), &dev);
                t2.transpose().into_data()
            } else {
                g.into_data()
            };
            self.out
                .insert(path, v.convert::<f32>().try_to_vec::<f32>().unwrap());
        }
    }
    let mut c = G {
        path: Vec::new(),
        grads,
        out: BTreeMap::new(),
    };
    m.visit(&mut c);
    c.out
}

#[test]
fn visual_only_logits_loss_gradients_and_one_adamw_step_match_pytorch() {
    let device = bindscope_core::device::test_device().autodiff();
    let r = Reference::open();
    let fmt = format();
    let mut readout = load_readout(&device);
    let vo: Vec<Sequence> = sequences(&fmt)
        .into_iter()
        .filter(|(m, _, _)| *m == Mode::VisualOnly)
        .map(|(_, _, s)| s)
        .collect();
    let batch = HostBatch::new(&vo.iter().collect::<Vec<_>>(), 2);
    assert_eq!(batch.labels, r.i64("vo.labels").1);
    let e_image = r.tensor("e_image", &device);
    // The visual-only readout has the image adapter alone.
    let question = readout.adapters.pop().unwrap();
    let h = readout.slot_embeddings(std::slice::from_ref(&e_image));
    let worst = max_abs(
        &bindscope_core::device::to_host_f32(h[0].clone()).unwrap(),
        &r.f32("vo.h").1,
    );
    assert!(worst <= 1e-5, "adapter output max abs {worst:e}");
    let logits = readout
        .logits(&batch, std::slice::from_ref(&e_image), &device)
        .unwrap();
    compare_logits(
        "visual-only",
        logits,
        r.f32("vo.logits"),
        &batch.attention_mask,
    );
    let loss = readout
        .loss(&batch, std::slice::from_ref(&e_image), &device)
        .unwrap();
    let got = loss.clone().into_scalar::<f32>();
    let want = r.f32("vo.loss").1[0];
    assert!((got - want).abs() <= tol_loss(), "loss {got} vs {want}");

    let before = params_by_path(&readout.clone().valid());
    let grads = loss.backward();
    let all = grads_by_path(&readout, &grads);
    let st = safetensors::SafeTensors::deserialize(&r.0).unwrap();
    let mut checked = 0;
    for key in st.names() {
        let Some(p) = key.strip_prefix("vo.grad.") else {
            continue;
        };
        let g = all.get(p).unwrap_or_else(|| panic!("no gradient for {p}"));
        let worst = max_abs(g, &r.f32(key).1);
        assert!(worst <= 1e-4, "d loss / d {p}: max abs {worst:e}");
        checked += 1;
    }
    assert_eq!(checked, 8);

    let mut optim = AdamW {
        weight_decay: 0.0,
        ..AdamW::default()
    }
    .init();
    let grads = GradientsParams::from_grads(grads, &readout);
    readout = optim.step(1e-3, readout, grads);
    let after = params_by_path(&readout.clone().valid());
    let mut stepped = 0;
    for key in st.names() {
        let Some(p) = key.strip_prefix("vo.step.") else {
            continue;
        };
        let delta: Vec<f32> = after[p]
            .iter()
            .zip(&before[p])
            .map(|(a, b)| a - b)
            .collect();
        let want = r.f32(key).1;
        assert!(
            want.iter().any(|d| d.abs() > 5e-4),
            "{p}: the step moves it"
        );
        let worst = max_abs(&delta, &want);
        assert!(worst <= 1e-5, "{p}: one AdamW step, max abs {worst:e}");
        stepped += 1;
    }
    assert_eq!(stepped, 8);
    drop(question);
}
