//! Strict loading of safetensors weights into a burn module.
//!
//! Module field paths mirror the Hugging Face key names, so most checkpoints load with no
//! remapping. Loading goes through burn-store's [`SafetensorsStore`] with the
//! [`PyTorchToBurnAdapter`] (transposes `nn::Linear` weights, maps LayerNorm `weight`/`bias` to
//! `gamma`/`beta`) and a cast of every float tensor to f32, or, with `keep_dtype`, to the one
//! float dtype the checkpoint stores.
//!
//! Strict by default: every parameter of the module must be found, every tensor of the file must
//! be used (except keys matching [`LoadOptions::benign_unused`], e.g. `embeddings.position_ids`),
//! and every shape and dtype must agree. Before anything is read, the files' headers are checked
//! against the module and all problems are collected into one [`LoadError`], in the
//! checkpoint's terms: its key names as stored (a missing key under the name the file would
//! store it, key remapping undone), shapes in the file's layout (`[out, in]` for a Linear
//! weight) and dtypes in words (`int64`, `bfloat16`).

use burn::module::Module;
use burn::store::{
    ApplyError, BurnToPyTorchAdapter, FloatCastAdapter, KeyRemapper, ModuleAdapter, ModuleSnapshot,
    PyTorchToBurnAdapter, SafetensorsStore, bridge,
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
    /// Keep the file's float dtype (f16/bf16) instead of casting to f32 (`--dtype keep`). The
    /// tensors the module takes must then share one float dtype, and the device must support it.
    pub keep_dtype: bool,
    /// Only load file keys matching one of these regexes (others count as ignored, not
    /// unexpected). Used to load one tower of a two-tower checkpoint. Empty = all keys.
    pub only: Vec<String>,
    /// The architecture to read a PyTorch pickle without `config.json` as (`--arch resnet50`,
    /// [`crate::Checkpoint::with_arch`]); `None` lets the model registry infer it from the keys.
    pub arch: Option<String>,
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
    #[error("{}", format_mismatch(files, missing, unexpected, errors, hints))]
    Mismatch {
        /// The files read.
        files: Vec<PathBuf>,
        /// Keys the module needs that no file stores, each as the file would name it, with the
        /// shape (in the file's layout) and kind the module expects, e.g.
        /// `layernorm.weight (float [32])`.
        missing: Vec<String>,
        /// Keys of the files that no parameter takes, as stored, with their shape and dtype,
        /// e.g. `cls.predictions.bias [30522] float32`.
        unexpected: Vec<String>,
        /// Shape and dtype disagreements, one line each, naming the key as stored, what the file
        /// stores and what the module expects.
        errors: Vec<String>,
        /// What the stored keys suggest went wrong, when something does: the missing keys
        /// found under a prefix the loader does not strip, or the file in another library's
        /// layout (timm, torchvision, transformers).
        hints: Vec<String>,
    },
    /// `keep_dtype` was asked for but cannot be honoured.
    #[error("{}: --dtype keep: {message}", display_files(files))]
    KeepDtype {
        /// The files read.
        files: Vec<PathBuf>,
        /// Why (several float dtypes stored; a dtype the device cannot compute in).
        message: String,
    },
}

fn display_files(files: &[PathBuf]) -> String {
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

fn format_mismatch(
    files: &[PathBuf],
    missing: &[String],
    unexpected: &[String],
    errors: &[String],
    hints: &[String],
) -> String {
    let mut s = format!(
        "checkpoint {} does not match the model: {} missing, {} unexpected, {} mismatched",
        display_files(files),
        missing.len(),
        unexpected.len(),
        errors.len()
    );
    for e in errors {
        s.push_str(&format!("\n  {e}"));
    }
    for k in missing {
        s.push_str(&format!("\n  missing key: {k}"));
    }
    for k in unexpected {
        s.push_str(&format!("\n  unexpected key: {k}"));
    }
    for h in hints {
        s.push_str(&format!("\n  hint: {h}"));
    }
    s
}

/// Marker keys of the layouts libraries save vision models in, for [`layout_of`].
const LAYOUTS: &[(&str, &str)] = &[
    (
        "patch_embed.proj.weight",
        "timm's ViT layout (patch_embed.proj, blocks.N.attn.qkv), not the transformers layout",
    ),
    (
        "stem.0.weight",
        "timm's ConvNeXt layout (stem.0, stages.N.blocks.M)",
    ),
    (
        "embeddings.patch_embeddings.weight",
        "the transformers ConvNeXt layout (embeddings.patch_embeddings, encoder.stages.N)",
    ),
    (
        "layer1.0.conv1.weight",
        "torchvision's ResNet layout (conv1, bn1, layer1..4)",
    ),
    (
        "embeddings.patch_embeddings.projection.weight",
        "the transformers layout (embeddings.patch_embeddings, encoder.layer.N)",
    ),
    (
        "vision_model.embeddings.patch_embedding.weight",
        "the transformers CLIP / SigLIP layout (vision_model.embeddings.patch_embedding)",
    ),
];

/// The layout of [`LAYOUTS`] a set of keys is in, told by its marker key (at the top level or
/// under any prefix), in words; `None` when no marker is among them.
pub fn layout_of<'a>(keys: impl Iterator<Item = &'a str> + Clone) -> Option<&'static str> {
    LAYOUTS
        .iter()
        .find(|(marker, _)| {
            keys.clone()
                .any(|k| k == *marker || k.ends_with(&format!(".{marker}")))
        })
        .map(|(_, description)| *description)
}

/// Why the `missing` module keys (PyTorch naming) are not among the `stored` keys, when the
/// stored keys say: most of them stored under one unknown prefix (`encoder_q.conv1.weight` for
/// `conv1.weight`), or the file in another library's layout than the module's.
fn layout_hints(
    stored: &BTreeSet<&str>,
    missing: &[&str],
    expected: &BTreeSet<&str>,
) -> Vec<String> {
    let mut hints = Vec::new();
    if missing.is_empty() {
        return hints;
    }
    let mut prefixes: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for m in missing {
        let suffix = format!(".{m}");
        if let Some(k) = stored.iter().find(|k| k.ends_with(&suffix)) {
            let prefix = &k[..k.len() - m.len()];
            let e = prefixes
                .entry(prefix.to_string())
                .or_insert_with(|| (0, k.to_string()));
            e.0 += 1;
        }
    }
    if let Some((prefix, (n, example))) = prefixes.iter().max_by_key(|(_, (n, _))| *n)
        && *n * 2 >= missing.len()
    {
        hints.push(format!(
            "{n} of the {} missing keys are stored under the prefix '{prefix}' (e.g. {example}), \
             which is not a wrapper this loader strips (module., backbone., encoder., model.); \
             extract the model's own state dict, or remap the prefix away",
            missing.len()
        ));
        return hints;
    }
    match (
        layout_of(stored.iter().copied()),
        layout_of(expected.iter().copied()),
    ) {
        (Some(f), Some(w)) if f != w => {
            hints.push(format!("the file is in {f}; this model reads {w}"));
        }
        (Some(f), None) => hints.push(format!(
            "the file is in {f}, which this model does not read"
        )),
        _ => {}
    }
    hints
}

/// A burn dtype in words, as torch names it (`float32`, `float16`, `bfloat16`, `int64`, …).
pub fn dtype_name(dtype: DType) -> String {
    match dtype {
        DType::F64 => "float64".into(),
        DType::F32 | DType::Flex32 => "float32".into(),
        DType::F16 => "float16".into(),
        DType::BF16 => "bfloat16".into(),
        DType::I64 => "int64".into(),
        DType::I32 => "int32".into(),
        DType::I16 => "int16".into(),
        DType::I8 => "int8".into(),
        DType::U64 => "uint64".into(),
        DType::U32 => "uint32".into(),
        DType::U16 => "uint16".into(),
        DType::U8 => "uint8".into(),
        DType::Bool(_) => "bool".into(),
        DType::QFloat(_) => "quantized".into(),
    }
}

/// A safetensors header dtype (`"F16"`, `"BF16"`, `"I64"`, …) in words, as torch names it
/// (`float16`, `bfloat16`, `int64`); an unknown tag is returned as it is.
pub fn stored_dtype_name(tag: &str) -> String {
    match tag {
        "F64" => "float64",
        "F32" => "float32",
        "F16" => "float16",
        "BF16" => "bfloat16",
        "F8_E4M3" => "float8_e4m3fn",
        "F8_E5M2" => "float8_e5m2",
        "I64" => "int64",
        "I32" => "int32",
        "I16" => "int16",
        "I8" => "int8",
        "U64" => "uint64",
        "U32" => "uint32",
        "U16" => "uint16",
        "U8" => "uint8",
        "BOOL" => "bool",
        other => other,
    }
    .to_string()
}

/// The burn float dtype of a safetensors header dtype, `None` for anything but the four float
/// types burn computes in.
fn stored_float_dtype(tag: &str) -> Option<DType> {
    match tag {
        "F64" => Some(DType::F64),
        "F32" => Some(DType::F32),
        "F16" => Some(DType::F16),
        "BF16" => Some(DType::BF16),
        _ => None,
    }
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

/// Every tensor of a weight file as `(key, dtype tag, shape)`: a safetensors file from its
/// header, a PyTorch pickle ([`crate::pth::is_pytorch_file`]) as [`crate::pth::read_state_dict`]
/// reads it (nested state dict and wrapper prefixes undone), with its dtypes given the
/// safetensors tags (`F32`, `I64`, …).
///
/// # Errors
/// [`LoadError::File`] naming the file.
pub fn read_entries(path: &Path) -> Result<Vec<(String, String, Vec<usize>)>, LoadError> {
    if crate::pth::is_pytorch_file(path) {
        return Ok(crate::pth::read_state_dict(path)?
            .tensors
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    crate::pth::dtype_tag(t.dtype()).to_string(),
                    t.shape().to_vec(),
                )
            })
            .collect());
    }
    Ok(read_safetensors_header(path)?
        .into_iter()
        .map(|(key, t)| {
            let dtype = t
                .get("dtype")
                .and_then(|d| d.as_str())
                .unwrap_or("?")
                .to_string();
            let shape = header_shape(&t);
            (key, dtype, shape)
        })
        .collect())
}

/// Key → shape of every tensor of a weight file, safetensors or PyTorch ([`read_entries`]).
///
/// # Errors
/// [`LoadError::File`] naming the file.
pub fn read_weight_shapes(path: &Path) -> Result<BTreeMap<String, Vec<usize>>, LoadError> {
    Ok(read_entries(path)?
        .into_iter()
        .map(|(k, _, shape)| (k, shape))
        .collect())
}

/// Reads the header of a safetensors file: key → shape.
///
/// # Errors
/// [`LoadError::File`] naming the file.
pub fn read_safetensors_shapes(path: &Path) -> Result<BTreeMap<String, Vec<usize>>, LoadError> {
    Ok(read_safetensors_header(path)?
        .into_iter()
        .map(|(k, t)| (k, header_shape(&t)))
        .collect())
}

/// The `shape` of one safetensors header entry (empty when malformed).
fn header_shape(t: &serde_json::Value) -> Vec<usize> {
    t.get("shape")
        .and_then(|s| s.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|d| d.as_u64().map(|d| d as usize))
                .collect()
        })
        .unwrap_or_default()
}

/// One tensor of a checkpoint as its file's header describes it.
struct Stored {
    /// The key as stored.
    key: String,
    /// Index into the files.
    file: usize,
    /// The safetensors dtype tag (`F32`, `BF16`, `I64`, …).
    dtype: String,
    /// The shape as stored.
    shape: Vec<usize>,
}

/// One parameter of the module, named and shaped as a PyTorch checkpoint stores it.
struct Expected {
    /// Its burn dtype (float or not is what matters).
    dtype: DType,
    /// The shape in the file's layout (`[out, in]` for a Linear weight).
    shape: Vec<usize>,
}

/// Loads `files` (one file or the shards of one checkpoint) into `module`, strictly.
///
/// The headers are checked against the module first (keys after `opts.remap`, shapes in the
/// file's layout, dtypes), so a mismatched checkpoint is refused before any tensor is read.
///
/// # Errors
/// [`LoadError::Mismatch`] listing every missing key (as the file would store it, with the
/// expected shape), every unexpected key (with its shape and dtype) and every shape or dtype
/// disagreement (the file's and the model's); [`LoadError::KeepDtype`] when `keep_dtype` is set
/// but the tensors the module takes are stored in more than one float dtype, or in one the
/// device cannot compute in; [`LoadError::File`] when a file cannot be read.
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

    // What the files store, by key after remapping (the module's naming, PyTorch style).
    let mut stored: BTreeMap<String, Stored> = BTreeMap::new();
    // Every key of the files after remapping, the ones `only` leaves out included (for hints).
    let mut every_key: BTreeSet<String> = BTreeSet::new();
    let mut errors: Vec<String> = Vec::new();
    let file_name = |i: usize| files[i].display().to_string();
    for (i, file) in files.iter().enumerate() {
        for (key, dtype, shape) in read_entries(file)? {
            let remapped = remap_one(&remapper, &key);
            every_key.insert(remapped.clone());
            if !only.is_empty() && !only.iter().any(|r| r.is_match(&remapped)) {
                continue;
            }
            if let Some(first) = stored.get(&remapped) {
                errors.push(format!(
                    "{} in {} and {key} in {} both provide {remapped}",
                    first.key,
                    file_name(first.file),
                    file_name(i)
                ));
                continue;
            }
            stored.insert(
                remapped,
                Stored {
                    key,
                    file: i,
                    dtype,
                    shape,
                },
            );
        }
    }
    let located = |t: &Stored| {
        if files.len() > 1 {
            format!("{} (in {})", t.key, file_name(t.file))
        } else {
            t.key.clone()
        }
    };

    // What the module takes, named and shaped the way a PyTorch checkpoint stores it.
    let expected: BTreeMap<String, Expected> = module
        .collect(None, Some(Box::new(BurnToPyTorchAdapter)), false)
        .into_iter()
        .map(|t| {
            let e = Expected {
                dtype: t.dtype,
                shape: t.shape.to_vec(),
            };
            (t.name, e)
        })
        .collect();

    let mut missing = Vec::new();
    let mut float_dtypes: BTreeMap<String, (DType, Vec<&str>)> = BTreeMap::new();
    for (name, e) in &expected {
        let Some(t) = stored.get(name) else {
            let kind = if e.dtype.is_float() {
                "float"
            } else {
                "integer"
            };
            missing.push(format!(
                "{} ({kind} {:?})",
                unremap(&opts.remap, &remapper, name),
                e.shape
            ));
            continue;
        };
        let float = stored_float_dtype(&t.dtype);
        if e.dtype.is_float() != float.is_some() {
            let needs = if e.dtype.is_float() {
                "a floating-point tensor (float32, float16, bfloat16 or float64)"
            } else {
                "an integer tensor"
            };
            errors.push(format!(
                "wrong dtype for {}: the file stores {} {:?}, the model needs {needs}",
                located(t),
                stored_dtype_name(&t.dtype),
                t.shape
            ));
        } else if t.shape != e.shape {
            let transposed =
                t.shape.len() == 2 && t.shape[0] == e.shape[1] && t.shape[1] == e.shape[0];
            errors.push(format!(
                "shape mismatch for {}: the file stores {:?}, the model expects {:?}{}",
                located(t),
                t.shape,
                e.shape,
                if transposed { " (the transpose)" } else { "" }
            ));
        }
        if let Some(d) = float {
            float_dtypes
                .entry(dtype_name(d))
                .or_insert_with(|| (d, Vec::new()))
                .1
                .push(&t.key);
        }
    }
    let unexpected: Vec<String> = stored
        .iter()
        .filter(|(name, _)| {
            !expected.contains_key(*name) && !benign.iter().any(|r| r.is_match(name))
        })
        .map(|(_, t)| {
            format!(
                "{} {:?} {}",
                located(t),
                t.shape,
                stored_dtype_name(&t.dtype)
            )
        })
        .collect();
    if !missing.is_empty() || !unexpected.is_empty() || !errors.is_empty() {
        let missing_names: Vec<&str> = expected
            .keys()
            .filter(|k| !stored.contains_key(*k))
            .map(String::as_str)
            .collect();
        let expected_keys: BTreeSet<&str> = expected.keys().map(String::as_str).collect();
        let every_key: BTreeSet<&str> = every_key.iter().map(String::as_str).collect();
        let hints = layout_hints(&every_key, &missing_names, &expected_keys);
        return Err(LoadError::Mismatch {
            files: files.to_vec(),
            missing,
            unexpected,
            errors,
            hints,
        });
    }

    let target = if opts.keep_dtype {
        keep_target(files, &float_dtypes, &module)?
    } else {
        DType::F32
    };

    let mut burn_errors: Vec<String> = Vec::new();
    let mut applied: BTreeSet<String> = BTreeSet::new();
    let mut burn_missing: BTreeSet<String> = BTreeSet::new();
    for file in files {
        let adapter = PyTorchToBurnAdapter.chain(FloatCastAdapter::to(target));
        let result = if crate::pth::is_pytorch_file(file) {
            let tensors: Vec<_> = crate::pth::read_state_dict(file)?
                .tensors
                .into_iter()
                .map(bridge::from_pytorch)
                .collect();
            let (tensors, _) = remapper.remap(tensors);
            let tensors = tensors
                .into_iter()
                .filter(|t| only.is_empty() || only.iter().any(|r| r.is_match(&t.name)))
                .collect();
            module.apply(tensors, None, Some(Box::new(adapter)), true)
        } else {
            let store = SafetensorsStore::from_file(file)
                .remap(remapper.clone())
                .allow_partial(true)
                .validate(false)
                .with_from_adapter(adapter);
            let mut store = if only.is_empty() {
                store
            } else {
                store.with_regexes(opts.only.clone())
            };
            module.load_from(&mut store).map_err(|e| LoadError::File {
                path: file.clone(),
                message: e.to_string(),
            })?
        };
        burn_errors.extend(
            result
                .errors
                .iter()
                .map(|e| format!("{}: {}", file.display(), describe(e))),
        );
        applied.extend(result.applied.iter().cloned());
        burn_missing.extend(result.missing.iter().map(|(p, _)| p.clone()));
    }
    // The header check above found every key; anything burn-store still reports (a tensor
    // whose data cannot be read, say) is an error all the same.
    let burn_missing: Vec<String> = burn_missing
        .into_iter()
        .filter(|p| !applied.contains(p))
        .map(|p| format!("{p} (module path; not loaded by burn-store)"))
        .collect();
    if !burn_errors.is_empty() || !burn_missing.is_empty() {
        return Err(LoadError::Mismatch {
            files: files.to_vec(),
            missing: burn_missing,
            unexpected: Vec::new(),
            errors: burn_errors,
            hints: Vec::new(),
        });
    }
    Ok(module)
}

/// The dtype a `keep_dtype` load computes in: the one float dtype of the tensors the module
/// takes, if the module's device supports it.
fn keep_target<M: Module>(
    files: &[PathBuf],
    float_dtypes: &BTreeMap<String, (DType, Vec<&str>)>,
    module: &M,
) -> Result<DType, LoadError> {
    let err = |message: String| LoadError::KeepDtype {
        files: files.to_vec(),
        message,
    };
    let target = match float_dtypes.values().collect::<Vec<_>>().as_slice() {
        [] => return Ok(DType::F32),
        [(one, _)] => *one,
        _ => {
            let parts: Vec<String> = float_dtypes
                .iter()
                .map(|(name, (_, keys))| {
                    format!("{name} ({} tensors, e.g. {})", keys.len(), keys[0])
                })
                .collect();
            return Err(err(format!(
                "the weights are stored in more than one float dtype: {}; a model computes in \
                 one (use --dtype f32 to cast them all to float32)",
                parts.join(", ")
            )));
        }
    };
    if let Some(device) = module.devices().first()
        && !device.supports_dtype(target)
    {
        return Err(err(format!(
            "the weights are {} and device {} does not compute in it (use --dtype f32)",
            dtype_name(target),
            crate::device::device_name(device)
        )));
    }
    Ok(target)
}

fn remap_one(remapper: &KeyRemapper, key: &str) -> String {
    let mut k = key.to_string();
    for (re, rep) in remapper.to_regex_pairs() {
        k = re.replace_all(&k, rep.as_str()).into_owned();
    }
    k
}

/// The file key that `remap` would turn into `name`: the name a missing parameter would have
/// in the file. Each (pattern, replacement) pair is inverted when it is simple (literals,
/// `^` / `$` anchors, capture groups the replacement copies with `$n` / `${n}`, as every
/// remapping of this workspace is) and the result is checked by remapping it again; `name`
/// itself when that fails.
fn unremap(remap: &[(String, String)], remapper: &KeyRemapper, name: &str) -> String {
    let mut key = name.to_string();
    for (pattern, replacement) in remap.iter().rev() {
        let Some((re, rep)) = invert_remap(pattern, replacement) else {
            return name.to_string();
        };
        key = re.replace_all(&key, rep.as_str()).into_owned();
    }
    if remap_one(remapper, &key) == name {
        key
    } else {
        name.to_string()
    }
}

/// A piece of a simple regex: a literal character or a capture group's source.
enum Piece {
    Lit(char),
    Group(usize),
}

/// Inverts `pattern → replacement` (see [`unremap`]); `None` for anything not simple.
fn invert_remap(pattern: &str, replacement: &str) -> Option<(regex::Regex, String)> {
    // The pattern: [^] (literal | \punct | (group))* [$]
    let mut chars = pattern.chars().peekable();
    let start = chars.peek() == Some(&'^');
    if start {
        chars.next();
    }
    let mut pieces = Vec::new();
    let mut groups: Vec<String> = Vec::new();
    let mut end = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) if e.is_ascii_punctuation() => pieces.push(Piece::Lit(e)),
                _ => return None,
            },
            '(' => {
                let mut depth = 1;
                let mut src = String::new();
                loop {
                    let g = chars.next()?;
                    match g {
                        '\\' => {
                            src.push(g);
                            src.push(chars.next()?);
                            continue;
                        }
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    src.push(g);
                }
                if src.starts_with('?') {
                    return None; // non-capturing or named: not handled
                }
                groups.push(src);
                pieces.push(Piece::Group(groups.len()));
            }
            '$' if chars.peek().is_none() => end = true,
            '.' | '*' | '+' | '?' | '[' | ']' | '{' | '}' | '|' | '^' | '$' | ')' => return None,
            c => pieces.push(Piece::Lit(c)),
        }
    }
    // The replacement: literal | $$ | $n | ${n}
    let mut inv_pattern = String::from(if start { "^" } else { "" });
    let mut inv_group_of: BTreeMap<usize, usize> = BTreeMap::new();
    let mut n_inv = 0;
    let mut rchars = replacement.chars().peekable();
    while let Some(c) = rchars.next() {
        if c != '$' {
            inv_pattern.push_str(&regex::escape(&c.to_string()));
            continue;
        }
        let name: String = if rchars.peek() == Some(&'$') {
            rchars.next();
            inv_pattern.push_str(&regex::escape("$"));
            continue;
        } else if rchars.peek() == Some(&'{') {
            rchars.next();
            let mut n = String::new();
            loop {
                match rchars.next()? {
                    '}' => break,
                    d => n.push(d),
                }
            }
            n
        } else {
            let mut n = String::new();
            while let Some(&d) = rchars.peek() {
                if d.is_ascii_alphanumeric() || d == '_' {
                    n.push(d);
                    rchars.next();
                } else {
                    break;
                }
            }
            n
        };
        let g: usize = name.parse().ok()?;
        let src = groups.get(g.checked_sub(1)?)?;
        n_inv += 1;
        inv_group_of.entry(g).or_insert(n_inv);
        inv_pattern.push('(');
        inv_pattern.push_str(src);
        inv_pattern.push(')');
    }
    if end {
        inv_pattern.push('$');
    }
    let mut inv_replacement = String::new();
    for p in pieces {
        match p {
            Piece::Lit('$') => inv_replacement.push_str("$$"),
            Piece::Lit(c) => inv_replacement.push(c),
            Piece::Group(g) => inv_replacement.push_str(&format!("${{{}}}", inv_group_of.get(&g)?)),
        }
    }
    Some((regex::Regex::new(&inv_pattern).ok()?, inv_replacement))
}

fn describe(e: &ApplyError) -> String {
    match e {
        ApplyError::ShapeMismatch {
            path,
            expected,
            found,
        } => format!(
            "shape mismatch for {path} (burn's layout): model expects {:?}, file has {:?}",
            expected.to_vec(),
            found.to_vec()
        ),
        ApplyError::DTypeMismatch {
            path,
            expected,
            found,
        } => format!(
            "wrong dtype for {path}: the file stores {}, the model needs {}",
            dtype_name(*found),
            dtype_name(*expected)
        ),
        ApplyError::AdapterError { path, message } | ApplyError::LoadError { path, message } => {
            format!("{path}: {message}")
        }
    }
}

/// The distinct dtypes stored in `files` (e.g. `["BF16"]`), from their headers.
///
/// # Errors
/// [`LoadError::File`] naming the file.
pub fn file_dtypes(files: &[PathBuf]) -> Result<Vec<String>, LoadError> {
    let mut out = BTreeSet::new();
    for path in files {
        for (_, dtype, _) in read_entries(path)? {
            out.insert(dtype);
        }
    }
    Ok(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// The module path `name` mapped back to the file key through `remap`.
    fn back(remap: &[(&str, &str)], name: &str) -> String {
        let remap = pairs(remap);
        let remapper = KeyRemapper::from_patterns(
            remap
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect(),
        )
        .unwrap();
        unremap(&remap, &remapper, name)
    }

    #[test]
    fn layout_hints_name_an_unknown_prefix_or_another_layout() {
        let set = |k: &[&'static str]| k.iter().copied().collect::<BTreeSet<&str>>();
        // MoCo's query encoder: every missing key stored under `encoder_q.`.
        let stored = set(&["encoder_q.conv1.weight", "encoder_q.bn1.weight", "queue"]);
        let expected = set(&["conv1.weight", "bn1.weight", "layer1.0.conv1.weight"]);
        let hints = layout_hints(&stored, &["conv1.weight", "bn1.weight"], &expected);
        assert_eq!(hints.len(), 1);
        assert!(
            hints[0]
                .starts_with("2 of the 2 missing keys are stored under the prefix 'encoder_q.'")
                && hints[0].contains("(e.g. encoder_q.conv1.weight)"),
            "{hints:?}"
        );
        // A timm ViT passed to a transformers ViT.
        let stored = set(&["patch_embed.proj.weight", "blocks.0.attn.qkv.weight"]);
        let expected = set(&["embeddings.patch_embeddings.projection.weight"]);
        let hints = layout_hints(
            &stored,
            &["embeddings.patch_embeddings.projection.weight"],
            &expected,
        );
        assert_eq!(
            hints,
            [format!(
                "the file is in {}; this model reads {}",
                LAYOUTS[0].1, LAYOUTS[4].1
            )]
        );
        // Nothing to say: no missing key, or no layout recognised.
        assert!(layout_hints(&stored, &[], &expected).is_empty());
        assert!(layout_hints(&set(&["a.b"]), &["c"], &set(&["c"])).is_empty());
    }

    #[test]
    fn remapping_is_undone_for_missing_keys() {
        // A prefix strip (classification checkpoints).
        assert_eq!(
            back(&[(r"^dinov2\.", "")], "layernorm.weight"),
            "dinov2.layernorm.weight"
        );
        // BERT's renames, with a capture group copied by the replacement, after its prefix.
        let bert = [
            (r"^bert\.", ""),
            (r"\.attention\.self\.", ".attention.self_attn."),
            (r"(^|\.)LayerNorm\.", "${1}layer_norm."),
        ];
        assert_eq!(
            back(&bert, "encoder.layer.0.attention.self_attn.query.weight"),
            "bert.encoder.layer.0.attention.self.query.weight"
        );
        assert_eq!(
            back(&bert, "embeddings.layer_norm.weight"),
            "bert.embeddings.LayerNorm.weight"
        );
        assert_eq!(back(&bert[2..], "layer_norm.bias"), "LayerNorm.bias");
        // No remapping: the name itself.
        assert_eq!(back(&[], "a.b"), "a.b");
    }

    #[test]
    fn a_remapping_that_cannot_be_inverted_keeps_the_module_name() {
        // A character class: not inverted.
        assert_eq!(back(&[(r"^h\.[0-9]+\.", "layer.")], "layer.w"), "layer.w");
        // A group the replacement drops cannot be restored.
        assert_eq!(back(&[(r"^(a|b)\.", "")], "x"), "x");
        // An inversion that does not remap back is not used: `a → b` undone on `bb_a` gives
        // `aa_a`, which remaps to `bb_b`.
        assert_eq!(back(&[("a", "b")], "bb_a"), "bb_a");
        assert_eq!(back(&[("a", "b")], "bb"), "aa");
    }

    #[test]
    fn dtypes_are_named_in_words() {
        assert_eq!(stored_dtype_name("BF16"), "bfloat16");
        assert_eq!(stored_dtype_name("I64"), "int64");
        assert_eq!(stored_dtype_name("F8_E4M3"), "float8_e4m3fn");
        assert_eq!(dtype_name(DType::F16), "float16");
        assert_eq!(dtype_name(DType::F32), "float32");
    }
}
