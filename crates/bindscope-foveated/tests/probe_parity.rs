//! The fovea and text-fovea probes against PyTorch: attention, logits, (weighted) cross-entropy
//! and the gradient of the loss with respect to every parameter, for fixed inputs and
//! parameters. Reference: `tests/fixtures/probe_reference.py` (torch, float64, stored as f32).
//! Tolerance: 1e-5 absolute on every tensor on the CPU; 1e-4 on a GPU backend (`BURN_DEVICE`),
//! whose reductions sum in another order (workgroup trees) and whose `exp`/`log` are the
//! shader's: the query gradient, a sum over every item and patch, is 4.3e-5 off on lavapipe.

use bindscope_foveated::probe::{Act, HeadSpec, Input, PoolSpec, Probe, cross_entropy};
use burn::module::Param;
use burn::tensor::{Device, Tensor, TensorData};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::PathBuf;

fn tol() -> f32 {
    if bindscope_core::device::testing_on_accelerator() {
        1e-4
    } else {
        1e-5
    }
}

struct Reference {
    tensors: HashMap<String, (Vec<usize>, Vec<f32>)>,
    labels: Vec<usize>,
}

fn reference() -> Reference {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/probe_reference.safetensors");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    let mut tensors = HashMap::new();
    let mut labels = Vec::new();
    for (name, view) in st.tensors() {
        let shape = view.shape().to_vec();
        match view.dtype() {
            safetensors::Dtype::F32 => {
                let v = view
                    .data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                tensors.insert(name.to_string(), (shape, v));
            }
            safetensors::Dtype::I64 => {
                labels = view
                    .data()
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as usize)
                    .collect();
            }
            other => panic!("{name}: unexpected dtype {other:?}"),
        }
    }
    Reference { tensors, labels }
}

impl Reference {
    fn get(&self, name: &str) -> &(Vec<usize>, Vec<f32>) {
        self.tensors
            .get(name)
            .unwrap_or_else(|| panic!("reference has no {name}"))
    }

    fn tensor<const D: usize>(&self, name: &str, device: &Device) -> Tensor<D> {
        let (shape, v) = self.get(name);
        Tensor::from_data(TensorData::new(v.clone(), shape.clone()), device)
    }

    /// A torch `nn.Linear` weight `[out, in]` as burn's `[in, out]`.
    fn linear_weight(&self, name: &str, device: &Device) -> Param<Tensor<2>> {
        Param::from_tensor(self.tensor::<2>(name, device).transpose())
    }

    fn set_head(&self, probe: &mut Probe, prefix: &str, device: &Device) {
        probe.fc1.weight = self.linear_weight(&format!("{prefix}.fc1.weight"), device);
        probe.fc1.bias = Some(Param::from_tensor(
            self.tensor(&format!("{prefix}.fc1.bias"), device),
        ));
        let fc2 = probe.fc2.as_mut().expect("an MLP head");
        fc2.weight = self.linear_weight(&format!("{prefix}.fc2.weight"), device);
        fc2.bias = Some(Param::from_tensor(
            self.tensor(&format!("{prefix}.fc2.bias"), device),
        ));
    }
}

fn assert_close<const D: usize>(what: &str, got: Tensor<D>, want: &(Vec<usize>, Vec<f32>)) {
    assert_eq!(got.dims().to_vec(), want.0, "{what}: shape");
    let got: Vec<f32> = got
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .unwrap();
    let err = got
        .iter()
        .zip(&want.1)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let tol = tol();
    assert!(err <= tol, "{what}: max abs error {err} > {tol}");
}

fn grad<const D: usize>(p: &Param<Tensor<D>>, grads: &burn::tensor::Gradients) -> Tensor<D> {
    p.val().grad(grads).expect("the parameter has a gradient")
}

#[test]
fn fovea_mlp_matches_pytorch() {
    let r = reference();
    let device = bindscope_core::device::test_device().autodiff();
    let (b, c) = (r.labels.len(), r.get("fovea.logits").0[1]);
    let dims = &r.get("x").0;
    let (d, hidden) = (dims[2], r.get("fovea.fc1.bias").0[0]);
    let head = HeadSpec::Mlp {
        hidden,
        act: Act::Gelu,
        dropout: 0.0,
    };
    let mut probe = Probe::init(PoolSpec::Fovea, head, d, c, 0, &device);
    probe.query = Some(Param::from_tensor(r.tensor("fovea.query", &device)));
    r.set_head(&mut probe, "fovea", &device);

    let (z, a) = probe.pool(Input::Patches(r.tensor("x", &device)));
    assert_close(
        "attention",
        a.expect("fovea attention"),
        r.get("fovea.attention"),
    );
    let logits = probe.classify(z, None);
    assert_close("logits", logits.clone(), r.get("fovea.logits"));
    assert_eq!(logits.dims(), [b, c]);
    let loss = cross_entropy(logits, &r.labels, None, &device);
    assert_close("loss", loss.clone(), r.get("fovea.loss"));

    let grads = loss.backward();
    let q = probe.query.as_ref().unwrap();
    assert_close("grad query", grad(q, &grads), r.get("grad.fovea.query"));
    let fc1 = &probe.fc1;
    let fc2 = probe.fc2.as_ref().unwrap();
    assert_close(
        "grad fc1.weight",
        grad(&fc1.weight, &grads).transpose(),
        r.get("grad.fovea.fc1.weight"),
    );
    assert_close(
        "grad fc1.bias",
        grad(fc1.bias.as_ref().unwrap(), &grads),
        r.get("grad.fovea.fc1.bias"),
    );
    assert_close(
        "grad fc2.weight",
        grad(&fc2.weight, &grads).transpose(),
        r.get("grad.fovea.fc2.weight"),
    );
    assert_close(
        "grad fc2.bias",
        grad(fc2.bias.as_ref().unwrap(), &grads),
        r.get("grad.fovea.fc2.bias"),
    );
}

#[test]
fn text_fovea_mlp_with_class_weights_matches_pytorch() {
    let r = reference();
    let device = bindscope_core::device::test_device().autodiff();
    let c = r.get("text.logits").0[1];
    let d = r.get("x").0[2];
    let d_text = r.get("t").0[1];
    let hidden = r.get("text.fc1.bias").0[0];
    let head = HeadSpec::Mlp {
        hidden,
        act: Act::Relu,
        dropout: 0.0,
    };
    let mut probe = Probe::init(PoolSpec::TextFovea { d_text }, head, d, c, 0, &device);
    probe.w_q = Some(Param::from_tensor(r.tensor("text.w_q", &device)));
    probe.log_t = Some(Param::from_tensor(r.tensor("text.log_t", &device)));
    r.set_head(&mut probe, "text", &device);

    let input = Input::PatchesText(r.tensor("x", &device), r.tensor("t", &device));
    let (z, a) = probe.pool(input);
    assert_close(
        "attention",
        a.expect("text fovea attention"),
        r.get("text.attention"),
    );
    let logits = probe.classify(z, None);
    assert_close("logits", logits.clone(), r.get("text.logits"));
    let weights = r.get("class_weights").1.clone();
    let loss = cross_entropy(logits, &r.labels, Some(&weights), &device);
    assert_close("loss", loss.clone(), r.get("text.loss"));

    let grads = loss.backward();
    assert_close(
        "grad w_q",
        grad(probe.w_q.as_ref().unwrap(), &grads),
        r.get("grad.text.w_q"),
    );
    assert_close(
        "grad log_t",
        grad(probe.log_t.as_ref().unwrap(), &grads),
        r.get("grad.text.log_t"),
    );
    assert_close(
        "grad fc1.weight",
        grad(&probe.fc1.weight, &grads).transpose(),
        r.get("grad.text.fc1.weight"),
    );
    let fc2 = probe.fc2.as_ref().unwrap();
    assert_close(
        "grad fc2.bias",
        grad(fc2.bias.as_ref().unwrap(), &grads),
        r.get("grad.text.fc2.bias"),
    );
}
