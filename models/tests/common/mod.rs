//! Helpers shared by the parity tests (`models/tests`, and the root package's tests through
//! `#[path]`): read a fixture's `reference.safetensors` and compare
//! burn tensors with the PyTorch reference under an explicit tolerance.
#![allow(dead_code)]

use burn::prelude::*;
use std::path::PathBuf;

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
    pub fn open(name: &str) -> Self {
        let path = fixture(name).join("reference.safetensors");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
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

    /// Asserts `actual` matches reference `key` in shape and to `max |a - b| <= tol`.
    pub fn assert_close<const D: usize>(&self, key: &str, actual: Tensor<D>, tol: f32) {
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
        assert!(
            worst <= tol,
            "{}: {key} max abs error {worst:e} > {tol:e} at flat index {at} ({} vs {})",
            self.name,
            got[at],
            expected[at]
        );
    }
}
