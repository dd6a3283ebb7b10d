//! Strict loading of safetensors weights into a burn module.
//!
//! Module field paths mirror the Hugging Face key names, so most checkpoints load with no
//! remapping. Loading goes through burn-store's [`SafetensorsStore`] with the
//! [`PyTorchToBurnAdapter`] (transposes `nn::Linear` weights, maps LayerNorm `weight`/`bias` to
//! `gamma`/`beta`) and, unless `keep_dtype` is set, a cast of every float tensor to f32.
//!
//! Strict by default: every parameter of the module must be found, every tensor of the file must
//! be used (except keys matching [`LoadOptions::benign_unused`], e.g. `embeddings.position_ids`),
//! and every shape must agree. All problems are collected into one [`LoadError`].

use burn::module::Module;
use burn::store::{
    ApplyError, FloatCastAdapter, KeyRemapper, ModuleAdapter, ModuleSnapshot, PyTorchToBurnAdapter,
    SafetensorsStore,
};
use burn::tensor::DType;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// How to load a checkpoint.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Regex → replacement pairs applied to file keys before matching module paths.
    pub remap: Vec<(String, String)>,
    /// Regexes of file keys that may be present without a matching parameter.
    pub benign_unused: Vec<String>,
    /// Keep the file's float dtype (f16/bf16) instead of casting to f32.
    pub keep_dtype: bool,
    /// Only load file keys matching one of these regexes (others count as ignored, not
    /// unexpected). Used to load one tower of a two-tower checkpoint. Empty = all keys.
    pub only: Vec<String>,
}

/// Everything that went wrong while loading, reported at once.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be opened or parsed.
    #[error("{path}: {message}")]
    File {
        /// The safetensors file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// A remap pattern is not a valid regex.
    #[error("invalid key remapping pattern '{0}': {1}")]
    Pattern(String, String),
    /// Keys and parameters do not match.
    #[error("{}", format_mismatch(files, missing, unexpected, errors))]
    Mismatch {
        /// The files read.
        files: Vec<PathBuf>,
        /// Module parameters no file provided: (path, module type).
        missing: Vec<(String, String)>,
        /// File keys no parameter consumed: (key, shape).
        unexpected: Vec<(String, Vec<usize>)>,
        /// Shape / dtype / conversion errors, one line each.
        errors: Vec<String>,
    },
}

fn format_mismatch(
    files: &[PathBuf],
    missing: &[(String, String)],
    unexpected: &[(String, Vec<usize>)],
    errors: &[String],
) -> String {
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let mut s = format!(
        "checkpoint {} does not match the model: {} missing, {} unexpected, {} errors",
        names.join(", "),
        missing.len(),
        unexpected.len(),
        errors.len()
    );
    for e in errors {
        s.push_str(&format!("\n  error: {e}"));
    }
    for (k, ty) in missing {
        s.push_str(&format!("\n  missing key: {k} (for {ty})"));
    }
    for (k, shape) in unexpected {
        s.push_str(&format!("\n  unexpected key: {k} {shape:?}"));
    }
    s
}

fn compile(patterns: &[String]) -> Result<Vec<regex::Regex>, LoadError> {
    patterns
        .iter()
        .map(|p| regex::Regex::new(p).map_err(|e| LoadError::Pattern(p.clone(), e.to_string())))
        .collect()
}

/// The JSON header of a safetensors file (tensor name → dtype, shape, offsets).
///
/// # Errors
/// [`LoadError::File`] naming the file and what is wrong with it.
pub fn read_safetensors_header(
    path: &Path,
) -> Result<serde_json::Map<String, serde_json::Value>, LoadError> {
    let file_err = |m: String| LoadError::File {
        path: path.to_path_buf(),
        message: m,
    };
    let mut f = std::fs::File::open(path).map_err(|e| file_err(e.to_string()))?;
    let mut len = [0u8; 8];
    std::io::Read::read_exact(&mut f, &mut len)
        .map_err(|e| file_err(format!("not a safetensors file: {e}")))?;
    let n = u64::from_le_bytes(len) as usize;
    if n > 100 << 20 {
        return Err(file_err(format!(
            "not a safetensors file: header length {n} is implausible"
        )));
    }
    let mut header = vec![0u8; n];
    std::io::Read::read_exact(&mut f, &mut header)
        .map_err(|e| file_err(format!("truncated header: {e}")))?;
    let mut v: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| file_err(format!("bad header JSON: {e}")))?;
    v.remove("__metadata__");
    Ok(v)
}

/// Reads the header of a safetensors file: key → shape.
///
/// # Errors
/// [`LoadError::File`] naming the file.
pub fn read_safetensors_shapes(path: &Path) -> Result<BTreeMap<String, Vec<usize>>, LoadError> {
    Ok(read_safetensors_header(path)?
        .into_iter()
        .map(|(k, t)| {
            let shape = t
                .get("shape")
                .and_then(|s| s.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|d| d.as_u64().map(|d| d as usize))
                        .collect()
                })
                .unwrap_or_default();
            (k, shape)
        })
        .collect())
}

/// Loads `files` (one file or the shards of one checkpoint) into `module`, strictly.
///
/// # Errors
/// [`LoadError::Mismatch`] listing every missing key (with its module type), every unexpected
/// key (with its shape) and every shape or dtype mismatch; [`LoadError::File`] when a file
/// cannot be read.
pub fn load_strict<M: Module>(
    mut module: M,
    files: &[PathBuf],
    opts: &LoadOptions,
) -> Result<M, LoadError> {
    let benign = compile(&opts.benign_unused)?;
    let only = compile(&opts.only)?;
    let remapper = KeyRemapper::from_patterns(
        opts.remap
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect(),
    )
    .map_err(|e| LoadError::Pattern(format!("{:?}", opts.remap), e.to_string()))?;

    let mut applied: BTreeSet<String> = BTreeSet::new();
    let mut missing: BTreeMap<String, String> = BTreeMap::new();
    let mut unexpected: Vec<(String, Vec<usize>)> = Vec::new();
    let mut errors: Vec<String> = Vec::new();

    for file in files {
        let shapes = read_safetensors_shapes(file)?;
        let store = SafetensorsStore::from_file(file)
            .remap(remapper.clone())
            .allow_partial(true)
            .validate(false);
        let mut store = if opts.keep_dtype {
            store.with_from_adapter(PyTorchToBurnAdapter)
        } else {
            store.with_from_adapter(PyTorchToBurnAdapter.chain(FloatCastAdapter::to(DType::F32)))
        };
        if !only.is_empty() {
            // Filter on the remapped key; anything filtered out is neither applied nor unexpected.
            let pats: Vec<String> = opts.only.clone();
            store = store.with_regexes(pats);
        }
        let result = module.load_from(&mut store).map_err(|e| LoadError::File {
            path: file.clone(),
            message: e.to_string(),
        })?;
        for e in &result.errors {
            errors.push(describe(e));
        }
        applied.extend(result.applied.iter().cloned());
        for (p, ty) in &result.missing {
            missing.insert(p.clone(), ty.clone());
        }
        // Map remapped names back to file names for the shape lookup.
        let remapped: BTreeMap<String, String> = shapes
            .keys()
            .map(|k| (remap_one(&remapper, k), k.clone()))
            .collect();
        for key in &result.unused {
            if benign.iter().any(|r| r.is_match(key)) {
                continue;
            }
            if !only.is_empty() && !only.iter().any(|r| r.is_match(key)) {
                continue;
            }
            let orig = remapped.get(key).cloned().unwrap_or_else(|| key.clone());
            let shape = shapes.get(&orig).cloned().unwrap_or_default();
            let shown = if orig != *key {
                format!("{orig} (remapped to {key})")
            } else {
                orig
            };
            unexpected.push((shown, shape));
        }
    }
    // A parameter provided by any shard is not missing.
    let missing: Vec<(String, String)> = missing
        .into_iter()
        .filter(|(p, _)| !applied.contains(p))
        .collect();
    if !missing.is_empty() || !unexpected.is_empty() || !errors.is_empty() {
        return Err(LoadError::Mismatch {
            files: files.to_vec(),
            missing,
            unexpected,
            errors,
        });
    }
    Ok(module)
}

fn remap_one(remapper: &KeyRemapper, key: &str) -> String {
    let mut k = key.to_string();
    for (re, rep) in remapper.to_regex_pairs() {
        k = re.replace_all(&k, rep.as_str()).into_owned();
    }
    k
}

fn describe(e: &ApplyError) -> String {
    match e {
        ApplyError::ShapeMismatch {
            path,
            expected,
            found,
        } => {
            format!(
                "shape mismatch for {path}: model expects {:?}, file has {:?}",
                expected.to_vec(),
                found.to_vec()
            )
        }
        other => format!("{other:?}"),
    }
}

/// The distinct dtypes stored in `files` (e.g. `["BF16"]`), from their headers.
///
/// # Errors
/// [`LoadError::File`] naming the file.
pub fn file_dtypes(files: &[PathBuf]) -> Result<Vec<String>, LoadError> {
    let mut out = BTreeSet::new();
    for path in files {
        for t in read_safetensors_header(path)?.values() {
            if let Some(d) = t.get("dtype").and_then(|d| d.as_str()) {
                out.insert(d.to_string());
            }
        }
    }
    Ok(out.into_iter().collect())
}
