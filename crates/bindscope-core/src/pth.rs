//! PyTorch pickle checkpoints (`.pth`, `.pt`, `.pth.tar`, `.ckpt`, `.bin`) read as a flat
//! state dict.
//!
//! The self-supervised ResNet releases (Barlow Twins, VICReg, SwAV, SimCLR conversions) are
//! `torch.save` pickles, not safetensors, and wrap their weights in two ways this module
//! undoes, so the keys reach the strict loader ([`crate::load::load_strict`]) as the bare
//! model's `state_dict()` names them:
//!
//! 1. **A nested state dict.** A training checkpoint (`{"epoch": …, "state_dict": {…},
//!    "optimizer": {…}}`) keeps the weights under one top-level key. The first of
//!    [`NESTED_KEYS`] that the file's root maps to a dictionary holding tensors is taken, and
//!    every tensor outside it (optimizer buffers, EMA copies) is left out. (A flat state dict
//!    whose keys merely start with `model.` is not nested: its root maps `"model.conv.weight"`
//!    to a tensor.)
//! 2. **Wrapper prefixes.** `nn.DataParallel` / `DistributedDataParallel` save every key under
//!    `module.`, self-supervised training code under `backbone.` or `encoder.`, PyTorch
//!    Lightning's `.ckpt` under the attribute holding the network (`model.`). A leading
//!    [`WRAPPER_PREFIXES`] component shared by *every* key is stripped, repeatedly
//!    (`module.backbone.conv1.weight` → `conv1.weight`). A prefix only some keys have is left
//!    alone: then it names a submodule, not a wrapper.
//!
//! Containers are read by burn-store's PyTorch reader (the `pytorch-reader` crate): ZIP
//! (PyTorch ≥ 1.6), the legacy stream and TAR formats, and a whole pickled model
//! (`torch.save(model)`), read as that module's `state_dict()`. Tensor bytes are read only when
//! loaded.

use crate::load::LoadError;
use burn::store::pytorch_reader::{
    DType as PtDType, PickleValue, PytorchReader, Tensor as PtTensor,
};
use std::path::Path;

/// Top-level keys a training checkpoint keeps its model weights under, in the order they are
/// tried.
pub const NESTED_KEYS: &[&str] = &["state_dict", "model_state_dict", "model", "net", "network"];

/// Leading key components that wrap a whole model and are stripped when every key has one.
pub const WRAPPER_PREFIXES: &[&str] = &["module", "backbone", "encoder", "model"];

/// Whether `path` is named like a PyTorch pickle checkpoint: `.pth`, `.pt`, `.pth.tar`, `.ckpt`
/// or `.bin` (transformers' `pytorch_model.bin`).
pub fn is_pytorch_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    [".pth", ".pt", ".pth.tar", ".ckpt", ".bin"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

/// A PyTorch checkpoint's tensors, named as the bare model's `state_dict()` names them.
#[derive(Debug)]
pub struct PthStateDict {
    /// The tensors, each renamed to its state-dict key (nested key and wrappers removed).
    pub tensors: Vec<PtTensor>,
    /// The top-level key the weights were nested under (`state_dict`), if any.
    pub nested_key: Option<String>,
    /// The wrapper prefixes stripped from every key, outermost first (`["module"]`).
    pub stripped: Vec<String>,
    /// How many tensors of the file lay outside the nested state dict and were left out.
    pub left_out: usize,
}

/// The safetensors header tag of a PyTorch dtype (`F32`, `BF16`, `I64`, …), so both formats
/// are described alike.
pub fn dtype_tag(d: PtDType) -> &'static str {
    match d {
        PtDType::F64 => "F64",
        PtDType::F32 => "F32",
        PtDType::F16 => "F16",
        PtDType::BF16 => "BF16",
        PtDType::I64 => "I64",
        PtDType::I32 => "I32",
        PtDType::I16 => "I16",
        PtDType::I8 => "I8",
        PtDType::U64 => "U64",
        PtDType::U32 => "U32",
        PtDType::U16 => "U16",
        PtDType::U8 => "U8",
        PtDType::Bool => "BOOL",
    }
}

/// Reads `path` as a state dict, undoing a nested top-level key and wrapper prefixes (see the
/// module docs).
///
/// # Errors
/// [`LoadError::File`] naming the file when it is no PyTorch checkpoint the reader can parse
/// (its message says what was found), or when it holds no tensors.
pub fn read_state_dict(path: &Path) -> Result<PthStateDict, LoadError> {
    let err = |message: String| LoadError::File {
        path: path.to_path_buf(),
        message,
    };
    let reader = PytorchReader::new(path).map_err(|e| {
        err(format!(
            "not a PyTorch checkpoint holding a state dict (a dictionary of tensors, as \
             torch.save(model.state_dict()) writes): {e}"
        ))
    })?;
    let mut tensors: Vec<PtTensor> = reader.into_tensors().into_values().collect();
    if tensors.is_empty() {
        return Err(err(
            "holds no tensors: expected a state dict (torch.save(model.state_dict())) or a \
             checkpoint with one under 'state_dict'"
                .into(),
        ));
    }
    tensors.sort_by(|a, b| a.name.cmp(&b.name));

    let mut nested_key = None;
    let mut left_out = 0;
    // A flat state dict's keys hold their dots (`"model.conv.weight"` is one key), so a
    // candidate is a nested state dict only if the file's root maps it to a dictionary. The
    // root is parsed (again) only when some tensor name starts with a candidate.
    let candidates: Vec<&str> = NESTED_KEYS
        .iter()
        .copied()
        .filter(|k| {
            let prefix = format!("{k}.");
            tensors.iter().any(|t| t.name.starts_with(&prefix))
        })
        .collect();
    let root_dicts: Vec<&str> = if candidates.is_empty() {
        Vec::new()
    } else {
        match PytorchReader::read_pickle_data(path, None) {
            Ok(PickleValue::Dict(root)) => candidates
                .into_iter()
                .filter(|k| matches!(root.get(*k), Some(PickleValue::Dict(_))))
                .collect(),
            _ => Vec::new(),
        }
    };
    if let Some(k) = root_dicts.first() {
        let prefix = format!("{k}.");
        let before = tensors.len();
        tensors.retain(|t| t.name.starts_with(&prefix));
        left_out = before - tensors.len();
        for t in &mut tensors {
            t.name = t.name[prefix.len()..].to_string();
        }
        nested_key = Some(k.to_string());
    }

    let mut stripped = Vec::new();
    loop {
        let first = tensors[0].name.split('.').next().unwrap_or("").to_string();
        let prefix = format!("{first}.");
        if !WRAPPER_PREFIXES.contains(&first.as_str())
            || !tensors.iter().all(|t| t.name.starts_with(&prefix))
        {
            break;
        }
        for t in &mut tensors {
            t.name = t.name[prefix.len()..].to_string();
        }
        stripped.push(first);
    }
    Ok(PthStateDict {
        tensors,
        nested_key,
        stripped,
        left_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/resnet")
            .join(name)
    }

    #[test]
    fn zip_archive_root_of_21_characters_opens() {
        let sd = read_state_dict(&fixture("root_name_is_21_chars.pth")).unwrap();
        assert_eq!(sd.tensors.len(), 1);
        assert_eq!(sd.tensors[0].name, "w");
        let bytes = sd.tensors[0].read().unwrap();
        let v: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(v, [0.0, 1.0, 2.0]);
    }

    #[test]
    fn nested_state_dict_and_wrappers_are_undone() {
        let sd = read_state_dict(&fixture("bottleneck.pth.tar")).unwrap();
        assert_eq!(sd.nested_key.as_deref(), Some("state_dict"));
        assert_eq!(sd.stripped, ["module"]);
        assert!(
            sd.left_out > 0,
            "the optimizer's momentum buffers are left out"
        );
        assert!(sd.tensors.iter().any(|t| t.name == "layer1.0.conv1.weight"));
        let plain = read_state_dict(&fixture("basic.pth")).unwrap();
        assert!(plain.nested_key.is_none() && plain.stripped.is_empty());
    }

    #[test]
    fn pytorch_file_names() {
        for ok in [
            "a.pth",
            "b/resnet50.pth.tar",
            "c.PT",
            "pytorch_model.bin",
            "x.ckpt",
        ] {
            assert!(is_pytorch_file(Path::new(ok)), "{ok}");
        }
        for no in ["model.safetensors", "config.json", "dir", "a.tar"] {
            assert!(!is_pytorch_file(Path::new(no)), "{no}");
        }
    }
}
