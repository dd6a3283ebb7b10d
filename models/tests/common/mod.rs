//! Helpers shared by the parity tests (`models/tests`, and the root package's tests through
//! `#[path]`): read a fixture's `reference.safetensors` and compare burn tensors with the
//! PyTorch reference under an explicit tolerance; open a fixture checkpoint, or a scratch copy
//! of one with its config edited or weights dropped.
#![allow(dead_code)]

use bindscope_core::Checkpoint;
use bindscope_models::EncoderOutput;
use burn::prelude::*;
use std::path::{Path, PathBuf};

/// The device the suite runs on (`BURN_DEVICE`, default the CPU).
pub fn device() -> Device {
    bindscope_core::device::test_device()
}

/// The checkpoint in directory `dir`, named by its path.
pub fn checkpoint(dir: &Path) -> Checkpoint {
    Checkpoint::from_dir(&dir.display().to_string(), dir).expect("fixture checkpoint")
}

/// `max |a − b|` over all elements.
pub fn max_abs_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

/// A scratch copy of fixture `name` (`tests/fixtures/<name>`, `model.safetensors` and
/// `config.json`) in the temporary directory, unique to this process and `tag`, with
/// `config.json` edited by `edit` and only the weights whose key `keep` accepts.
pub fn scratch(
    name: &str,
    tag: &str,
    edit: impl FnOnce(&mut serde_json::Value),
    keep: impl Fn(&str) -> bool,
) -> PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "bindscope-parity-{}-{}-{tag}",
        name.replace('/', "-"),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixture(name);
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView<'_>)> =
        st.tensors().into_iter().filter(|(k, _)| keep(k)).collect();
    std::fs::write(
        dir.join("model.safetensors"),
        safetensors::serialize(kept, None).unwrap(),
    )
    .unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string(&cfg).unwrap(),
    )
    .unwrap();
    dir
}

/// [`scratch`] keeping every weight: only `config.json` is edited.
pub fn scratch_config(name: &str, tag: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    scratch(name, tag, edit, |_| true)
}

/// `tests/fixtures/<name>` of the workspace (the fixtures are shared by the model parity tests
/// in `models/tests`, the root package's tests and the CLI tests).
pub fn fixture(name: &str) -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = if here.join("tests/fixtures").is_dir() {
        here
    } else {
        here.parent()
            .expect("a crate inside the workspace")
            .to_path_buf()
    };
    root.join("tests/fixtures").join(name)
}

/// The tensors of `tests/fixtures/<name>/reference.safetensors`.
pub struct Reference {
    bytes: Vec<u8>,
    pub name: String,
}

impl Reference {
    /// `tests/fixtures/<name>/reference.safetensors`.
    pub fn open(name: &str) -> Self {
        Self::from_file(&fixture(name).join("reference.safetensors"), name)
    }

    /// The reference tensors of the safetensors file `path`, named `name` in messages.
    pub fn from_file(path: &Path, name: &str) -> Self {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self {
            bytes,
            name: name.to_string(),
        }
    }

    fn view(&self, key: &str) -> (Vec<usize>, safetensors::Dtype, Vec<u8>) {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).expect("valid safetensors");
        let t = st
            .tensor(key)
            .unwrap_or_else(|_| panic!("{}: no tensor '{key}' in reference", self.name));
        (t.shape().to_vec(), t.dtype(), t.data().to_vec())
    }

    pub fn has(&self, key: &str) -> bool {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).expect("valid safetensors");
        st.tensor(key).is_ok()
    }

    /// Shape and f32 values.
    pub fn f32(&self, key: &str) -> (Vec<usize>, Vec<f32>) {
        let (shape, dtype, data) = self.view(key);
        assert_eq!(dtype, safetensors::Dtype::F32, "{key} is not f32");
        let v = data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        (shape, v)
    }

    /// Shape and i64 values.
    pub fn i64(&self, key: &str) -> (Vec<usize>, Vec<i64>) {
        let (shape, dtype, data) = self.view(key);
        assert_eq!(dtype, safetensors::Dtype::I64, "{key} is not i64");
        let v = data
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        (shape, v)
    }

    pub fn tensor<const D: usize>(&self, key: &str, device: &Device) -> Tensor<D> {
        let (shape, v) = self.f32(key);
        Tensor::<1>::from_floats(v.as_slice(), device)
            .reshape(<[usize; D]>::try_from(shape).expect("rank"))
    }

    pub fn int_tensor<const D: usize>(&self, key: &str, device: &Device) -> Tensor<D, Int> {
        let (shape, v) = self.i64(key);
        Tensor::<1, Int>::from_ints(v.as_slice(), device)
            .reshape(<[usize; D]>::try_from(shape).expect("rank"))
    }

    /// `(input_ids, attention_mask)`: the text inputs of a fixture, `[N, T]` each.
    pub fn text_inputs(&self, device: &Device) -> (Tensor<2, Int>, Tensor<2, Int>) {
        (
            self.int_tensor::<2>("input_ids", device),
            self.int_tensor::<2>("attention_mask", device),
        )
    }

    /// Checks every tensor of a full forward (`ForwardOptions::all()`) against the reference
    /// keys under `prefix`: `layers + 1` hidden states, `layers` attention maps, the last
    /// hidden state and (when `pooled`) the pooler output, each within `tol`.
    pub fn assert_encoder_output(
        &self,
        prefix: &str,
        out: &EncoderOutput,
        layers: usize,
        pooled: bool,
        tol: f32,
    ) {
        let hs = out.hidden_states.as_ref().expect("hidden states");
        let at = out.attentions.as_ref().expect("attentions");
        assert_eq!(
            hs.len(),
            layers + 1,
            "{}: number of hidden states",
            self.name
        );
        assert_eq!(at.len(), layers, "{}: number of attention maps", self.name);
        for (i, h) in hs.iter().enumerate() {
            self.assert_close(&format!("{prefix}.hidden_states.{i}"), h.clone(), tol);
        }
        for (i, a) in at.iter().enumerate() {
            self.assert_close(&format!("{prefix}.attentions.{i}"), a.clone(), tol);
        }
        self.assert_close(
            &format!("{prefix}.last_hidden_state"),
            out.last_hidden_state.clone(),
            tol,
        );
        if pooled {
            self.assert_close(
                &format!("{prefix}.pooler_output"),
                out.pooler_output.clone(),
                tol,
            );
        }
    }

    /// Checks a forward of the fixture's interpolation input (`interp.pixel_values`, another
    /// size than the position grid, run with hidden states) against `interp.vision.*`: the
    /// embeddings' output (where the resampled positions enter), the last hidden state and,
    /// when `pooled`, the pooler output.
    pub fn assert_interpolated(&self, out: EncoderOutput, pooled: bool, tol: f32) {
        let mut hs = out.hidden_states.expect("hidden states");
        self.assert_close("interp.vision.hidden_states.0", hs.remove(0), tol);
        self.assert_close(
            "interp.vision.last_hidden_state",
            out.last_hidden_state,
            tol,
        );
        if pooled {
            self.assert_close("interp.vision.pooler_output", out.pooler_output, tol);
        }
    }

    /// Asserts `actual` matches reference `key` in shape and to `max |a - b| <= tol`; prints
    /// and returns the max abs error (run with `--nocapture` to see it).
    pub fn assert_close<const D: usize>(&self, key: &str, actual: Tensor<D>, tol: f32) -> f32 {
        let (shape, expected) = self.f32(key);
        assert_eq!(
            actual.dims().to_vec(),
            shape,
            "{}: shape of {key}",
            self.name
        );
        let got: Vec<f32> = actual
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap();
        let (mut worst, mut at) = (0f32, 0usize);
        for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
            let d = (a - b).abs();
            assert!(
                d.is_finite(),
                "{}: {key}[{i}] not finite: {a} vs {b}",
                self.name
            );
            if d > worst {
                worst = d;
                at = i;
            }
        }
        let scale = expected.iter().map(|v| v.abs()).fold(0f32, f32::max);
        println!(
            "{}: {key}: max abs error {worst:.3e} (max |reference| {scale:.3})",
            self.name
        );
        assert!(
            worst <= tol,
            "{}: {key} max abs error {worst:e} > {tol:e} at flat index {at} ({} vs {})",
            self.name,
            got[at],
            expected[at]
        );
        worst
    }
}
