//! Frozen-encoder features, extracted once per encoder and scene set and cached as safetensors.
//!
//! # What is extracted
//! Each image goes through the vision tower once (no autodiff), at `side × side` pixels, rescaled
//! and normalized with the checkpoint's `preprocessor_config.json` (mean / std / rescale factor;
//! the processor's resize and center crop are *not* applied — scenes are rendered directly at
//! the encoder's input size, and a crop would cut objects off). From that forward pass:
//! - `patch` `[n, P, D]`: the final layer's patch tokens (after the final norm,
//!   [`VisionEncoder::final_norm`], which for CLIP is `post_layernorm`; prefix tokens — CLS,
//!   registers — removed), stored as **f16** (halves the cache; relative rounding error
//!   ≤ 2⁻¹¹, seen only by the learned fovea);
//! - `summary` `[n, E]`: the model's summary token ([`VisionReadout::Summary`]: CLS after the
//!   final norm, SigLIP's MAP head output), f32;
//! - `gap` `[n, D]`: the mean of the patch tokens, f32 (from the f32 tokens);
//! - `oracle` `[n, D]`: the mean of the patch tokens whose patch cell overlaps the target's box
//!   with positive area ([`oracle_patches`]), f32;
//! - `label` `[n]` i64 and `box` `[n, 4]` f32 (the target box, canvas units).
//!
//! # Patch grid
//! A `side × side` input with patch size `p` gives a `g × g` grid, `g = ⌊side / p⌋` (the patch
//! convolution drops a remainder); patch `k = gy·g + gx` covers pixels
//! `[gx·p, (gx+1)·p) × [gy·p, (gy+1)·p)`. A model whose token count after its prefix is not
//! `g²` has no usable patch grid: [`FeatureError::NoPatchGrid`].
//!
//! # Cache layout
//! `<dir>/manifest.json` (identity of the cache: model weights hash, generator, side, …) and
//! `<dir>/<set>/shard-00000.safetensors`, … of `shard_size` images each, written atomically; an
//! interrupted extraction resumes at the first missing shard. A shard holding fewer images than
//! its range needs (the last shard of a set that has since grown) is extracted again, and a
//! longer one is read in part, so one cache serves runs of different set sizes whose sets are
//! prefixes of each other.

use crate::scene::Scene;
use bindscope_data::image::{ImageProcessor, RgbImage};
use bindscope_models::{ForwardOptions, VisionEncoder, VisionReadout};
use burn::tensor::{Device, Tensor, TensorData, f16};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::path::{Path, PathBuf};

/// Why features could not be extracted or read.
#[derive(Debug, thiserror::Error)]
pub enum FeatureError {
    /// The model's output has no square patch grid matching the input.
    #[error("model '{model}' has no patch grid for a {side}×{side} input: {detail}")]
    NoPatchGrid {
        /// The model.
        model: String,
        /// Input side.
        side: usize,
        /// What was found.
        detail: String,
    },
    /// A cache file is unreadable or inconsistent.
    #[error("{}: {message}", path.display())]
    Cache {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// An input item could not be built (e.g. an image failed to decode).
    #[error("{0}")]
    Input(String),
    /// The encoder failed on its device (on a GPU, most often memory).
    #[error(transparent)]
    Device(#[from] bindscope_core::device::ReadError),
    /// I/O error.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn cache_err(path: &Path, message: impl Into<String>) -> FeatureError {
    FeatureError::Cache {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The patch grid of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Grid {
    /// Input side in pixels.
    pub side: usize,
    /// Patch size in pixels.
    pub patch: usize,
    /// Patches per row / column (`⌊side / patch⌋`).
    pub cells: usize,
}

impl Grid {
    /// The grid of a `side × side` input with `patch`-pixel patches.
    pub fn new(side: usize, patch: usize) -> Self {
        Self {
            side,
            patch,
            cells: side / patch.max(1),
        }
    }

    /// Number of patches `P = cells²`.
    pub fn num_patches(&self) -> usize {
        self.cells * self.cells
    }
}

/// Patches (indices `gy·g + gx`) whose cell overlaps the box `[x0, y0, x1, y1]` (canvas units)
/// with positive area. When none does (a box entirely in the cropped remainder), the cell
/// nearest to the box centre.
pub fn oracle_patches(grid: &Grid, bbox: [f64; 4]) -> Vec<usize> {
    let s = grid.side as f64;
    let p = grid.patch as f64;
    let [x0, y0, x1, y1] = bbox.map(|v| v * s);
    let mut out = Vec::new();
    for gy in 0..grid.cells {
        let (cy0, cy1) = (gy as f64 * p, (gy + 1) as f64 * p);
        if !(cy0 < y1 && cy1 > y0) {
            continue;
        }
        for gx in 0..grid.cells {
            let (cx0, cx1) = (gx as f64 * p, (gx + 1) as f64 * p);
            if cx0 < x1 && cx1 > x0 {
                out.push(gy * grid.cells + gx);
            }
        }
    }
    if out.is_empty() && grid.cells > 0 {
        let clamp = |v: f64| ((v / p).floor().max(0.0) as usize).min(grid.cells - 1);
        out.push(clamp((y0 + y1) / 2.0) * grid.cells + clamp((x0 + x1) / 2.0));
    }
    out
}

/// One image to encode, with its label and target box.
#[derive(Debug, Clone)]
pub struct Item {
    /// The image, already at the encoder's input size.
    pub image: RgbImage,
    /// Class index.
    pub label: usize,
    /// Target box `[x0, y0, x1, y1]` in units of the image side.
    pub bbox: [f64; 4],
}

impl Item {
    /// A scene rendered at `side` with `supersample²` samples per pixel.
    pub fn from_scene(scene: &Scene, side: usize, supersample: usize) -> Self {
        Self {
            image: scene.render(side, supersample),
            label: scene.label,
            bbox: scene.target().bbox(),
        }
    }
}

/// Features of a batch of images, on the host (row-major).
#[derive(Debug, Clone, Default)]
pub struct Features {
    /// Number of images.
    pub n: usize,
    /// Patches per image.
    pub p: usize,
    /// Patch-token dimension.
    pub d: usize,
    /// Summary dimension.
    pub e: usize,
    /// `[n, P, D]` patch tokens (f16), empty when not loaded.
    pub patch: Vec<f16>,
    /// `[n, E]`.
    pub summary: Vec<f32>,
    /// `[n, D]`.
    pub gap: Vec<f32>,
    /// `[n, D]`.
    pub oracle: Vec<f32>,
    /// `[n]`.
    pub label: Vec<usize>,
    /// `[n]` target boxes.
    pub bbox: Vec<[f32; 4]>,
}

impl Features {
    /// Appends another batch (same dimensions).
    pub fn extend(&mut self, other: Features) {
        if self.n == 0 {
            *self = other;
            return;
        }
        assert_eq!(
            (self.p, self.d, self.e),
            (other.p, other.d, other.e),
            "feature dimensions differ"
        );
        self.n += other.n;
        self.patch.extend(other.patch);
        self.summary.extend(other.summary);
        self.gap.extend(other.gap);
        self.oracle.extend(other.oracle);
        self.label.extend(other.label);
        self.bbox.extend(other.bbox);
    }

    /// Keeps the first `n` items (no-op when there are at most `n`).
    pub fn truncate(&mut self, n: usize) {
        if n >= self.n {
            return;
        }
        self.patch.truncate(n * self.p * self.d);
        self.summary.truncate(n * self.e);
        self.gap.truncate(n * self.d);
        self.oracle.truncate(n * self.d);
        self.label.truncate(n);
        self.bbox.truncate(n);
        self.n = n;
    }

    /// Patch tokens of items `idx` as an f32 tensor `[idx.len(), P, D]` on `device`.
    ///
    /// # Panics
    /// If patch tokens were not loaded.
    pub fn patch_batch(&self, idx: &[usize], device: &Device) -> Tensor<3> {
        assert!(
            !self.patch.is_empty() || self.n == 0,
            "patch tokens were not loaded"
        );
        let per = self.p * self.d;
        let mut v = Vec::with_capacity(idx.len() * per);
        for &i in idx {
            v.extend(
                self.patch[i * per..(i + 1) * per]
                    .iter()
                    .map(|h| h.to_f32()),
            );
        }
        Tensor::from_data(TensorData::new(v, [idx.len(), self.p, self.d]), device)
    }

    /// Rows `idx` of a `[n, dim]` host matrix as a tensor `[idx.len(), dim]`.
    pub fn rows(data: &[f32], dim: usize, idx: &[usize], device: &Device) -> Tensor<2> {
        let mut v = Vec::with_capacity(idx.len() * dim);
        for &i in idx {
            v.extend_from_slice(&data[i * dim..(i + 1) * dim]);
        }
        Tensor::from_data(TensorData::new(v, [idx.len(), dim]), device)
    }
}

/// Runs a frozen encoder over images.
pub struct Extractor<'a> {
    /// The encoder (on a device without autodiff).
    pub model: &'a dyn VisionEncoder,
    /// Name for error messages.
    pub model_name: String,
    /// Rescale / normalize settings (only `normalize` is used).
    pub processor: ImageProcessor,
    /// The patch grid of the input.
    pub grid: Grid,
    /// Device of the model.
    pub device: Device,
}

impl<'a> Extractor<'a> {
    /// Builds an extractor and checks that `model` yields a `g × g` patch grid at `side`.
    ///
    /// # Errors
    /// [`FeatureError::NoPatchGrid`] for a model without patch tokens (or a non-square grid).
    pub fn new(
        model: &'a dyn VisionEncoder,
        model_name: &str,
        processor: ImageProcessor,
        side: usize,
        device: &Device,
    ) -> Result<Self, FeatureError> {
        let info = model.info();
        let no_grid = |detail: String| FeatureError::NoPatchGrid {
            model: model_name.to_string(),
            side,
            detail,
        };
        if info.patch_size == 0 {
            return Err(no_grid(format!(
                "model_type '{}' reports no patch size",
                info.model_type
            )));
        }
        let grid = Grid::new(side, info.patch_size);
        if grid.cells == 0 {
            return Err(no_grid(format!(
                "the input is smaller than one {}-pixel patch",
                info.patch_size
            )));
        }
        let ex = Self {
            model,
            model_name: model_name.to_string(),
            processor,
            grid,
            device: device.clone(),
        };
        // One probe forward pass to check the token layout.
        let out = model.forward_vision(
            Tensor::<4>::zeros([1, 3, side, side], device),
            ForwardOptions::default(),
        );
        let [_, t, _] = out.last_hidden_state.dims();
        let prefix = model.num_prefix_tokens();
        if t < prefix || t - prefix != grid.num_patches() {
            return Err(no_grid(format!(
                "{t} tokens with {prefix} prefix tokens, expected {} patch tokens ({}×{} grid of {}-pixel patches)",
                grid.num_patches(),
                grid.cells,
                grid.cells,
                info.patch_size
            )));
        }
        Ok(ex)
    }

    /// Encodes a batch of items (each `side × side`).
    ///
    /// # Errors
    /// [`FeatureError::Cache`] (as a generic input error) if an image has the wrong size.
    pub fn run(&self, items: &[Item]) -> Result<Features, FeatureError> {
        let side = self.grid.side;
        let n = items.len();
        if n == 0 {
            return Ok(Features::default());
        }
        let mut pix = Vec::with_capacity(n * 3 * side * side);
        for (i, it) in items.iter().enumerate() {
            if (it.image.width, it.image.height) != (side, side) {
                return Err(cache_err(
                    Path::new(&self.model_name),
                    format!(
                        "item {i} is {}×{}, the encoder input is {side}×{side}",
                        it.image.width, it.image.height
                    ),
                ));
            }
            pix.extend(self.processor.normalize(&it.image).data);
        }
        let x = Tensor::<4>::from_data(TensorData::new(pix, [n, 3, side, side]), &self.device);
        let out = self.model.forward_vision(
            x,
            ForwardOptions {
                output_hidden_states: true,
                output_attentions: false,
                attention_last_rows: None,
            },
        );
        let last = out
            .hidden_states
            .and_then(|mut h| h.pop())
            .expect("hidden states were requested");
        let summary_t = self.model.readout(last, VisionReadout::Summary);
        let [_, t, d] = out.last_hidden_state.dims();
        let prefix = self.model.num_prefix_tokens();
        let patches_t = self
            .model
            .final_norm(out.last_hidden_state.slice([0..n, prefix..t, 0..d]));
        let p = t - prefix;
        let patches: Vec<f32> = bindscope_core::device::to_host_f32(patches_t)?;
        let e = summary_t.dims()[1];
        let summary: Vec<f32> = bindscope_core::device::to_host_f32(summary_t)?;
        let mut gap = vec![0f32; n * d];
        let mut oracle = vec![0f32; n * d];
        for (i, it) in items.iter().enumerate() {
            let tok = &patches[i * p * d..(i + 1) * p * d];
            let g = &mut gap[i * d..(i + 1) * d];
            for row in tok.chunks_exact(d) {
                for (a, v) in g.iter_mut().zip(row) {
                    *a += v;
                }
            }
            g.iter_mut().for_each(|a| *a /= p as f32);
            let cells = oracle_patches(&self.grid, it.bbox);
            let o = &mut oracle[i * d..(i + 1) * d];
            for &k in &cells {
                for (a, v) in o.iter_mut().zip(&tok[k * d..(k + 1) * d]) {
                    *a += v;
                }
            }
            o.iter_mut().for_each(|a| *a /= cells.len() as f32);
        }
        Ok(Features {
            n,
            p,
            d,
            e,
            patch: patches.iter().map(|&v| f16::from_f32(v)).collect(),
            summary,
            gap,
            oracle,
            label: items.iter().map(|it| it.label).collect(),
            bbox: items.iter().map(|it| it.bbox.map(|v| v as f32)).collect(),
        })
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes features as one safetensors file (atomically).
///
/// # Errors
/// [`FeatureError::Io`].
pub fn write_shard(path: &Path, f: &Features) -> Result<(), FeatureError> {
    let io = |source: std::io::Error| FeatureError::Io {
        path: path.to_path_buf(),
        source,
    };
    let patch: Vec<u8> = f
        .patch
        .iter()
        .flat_map(|h| h.to_bits().to_le_bytes())
        .collect();
    let summary = f32_bytes(&f.summary);
    let gap = f32_bytes(&f.gap);
    let oracle = f32_bytes(&f.oracle);
    let label: Vec<u8> = f
        .label
        .iter()
        .flat_map(|&l| (l as i64).to_le_bytes())
        .collect();
    let bbox: Vec<u8> = f
        .bbox
        .iter()
        .flat_map(|b| b.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>())
        .collect();
    fn view(dtype: Dtype, shape: Vec<usize>, data: &[u8]) -> Result<TensorView<'_>, String> {
        TensorView::new(dtype, shape, data).map_err(|e| e.to_string())
    }
    let view =
        |dtype, shape, data| view(dtype, shape, data).map_err(|e| io(std::io::Error::other(e)));
    let tensors = vec![
        ("patch", view(Dtype::F16, vec![f.n, f.p, f.d], &patch)?),
        ("summary", view(Dtype::F32, vec![f.n, f.e], &summary)?),
        ("gap", view(Dtype::F32, vec![f.n, f.d], &gap)?),
        ("oracle", view(Dtype::F32, vec![f.n, f.d], &oracle)?),
        ("label", view(Dtype::I64, vec![f.n], &label)?),
        ("box", view(Dtype::F32, vec![f.n, 4], &bbox)?),
    ];
    let bytes = safetensors::serialize(tensors, None)
        .map_err(|e| io(std::io::Error::other(e.to_string())))?;
    bindscope_core::fsutil::write_atomic(path, &bytes).map_err(io)
}

/// Number of images in a shard, read from its safetensors header (the `label` shape) without
/// reading the tensors; `None` for an absent or unreadable file.
pub fn shard_len(path: &Path) -> Option<usize> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).ok()?;
    let len = usize::try_from(u64::from_le_bytes(len)).ok()?;
    if len > 100_000_000 {
        return None;
    }
    let mut header = vec![0u8; len];
    file.read_exact(&mut header).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&header).ok()?;
    let shape = v.get("label")?.get("shape")?.as_array()?;
    match shape.as_slice() {
        [n] => n.as_u64().and_then(|n| usize::try_from(n).ok()),
        _ => None,
    }
}

/// Reads one shard; `with_patches = false` skips the (large) patch tokens.
///
/// # Errors
/// [`FeatureError::Io`] or [`FeatureError::Cache`] for a missing, truncated or inconsistent file.
pub fn read_shard(path: &Path, with_patches: bool) -> Result<Features, FeatureError> {
    let bytes = std::fs::read(path).map_err(|source| FeatureError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| cache_err(path, format!("not a valid safetensors file: {e}")))?;
    let get = |name: &str, dtype: Dtype, rank: usize| -> Result<TensorView<'_>, FeatureError> {
        let t = st
            .tensor(name)
            .map_err(|_| cache_err(path, format!("no tensor '{name}'")))?;
        if t.dtype() != dtype || t.shape().len() != rank {
            return Err(cache_err(
                path,
                format!(
                    "tensor '{name}' is {:?} {:?}, expected {dtype:?} of rank {rank}",
                    t.dtype(),
                    t.shape()
                ),
            ));
        }
        Ok(t)
    };
    let f32s = |t: &TensorView| -> Vec<f32> {
        t.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let patch = get("patch", Dtype::F16, 3)?;
    let [n, p, d] = [patch.shape()[0], patch.shape()[1], patch.shape()[2]];
    let summary = get("summary", Dtype::F32, 2)?;
    let e = summary.shape()[1];
    let gap = get("gap", Dtype::F32, 2)?;
    let oracle = get("oracle", Dtype::F32, 2)?;
    let label = get("label", Dtype::I64, 1)?;
    let bbox = get("box", Dtype::F32, 2)?;
    if summary.shape()[0] != n
        || gap.shape() != [n, d]
        || oracle.shape() != [n, d]
        || label.shape() != [n]
        || bbox.shape() != [n, 4]
    {
        return Err(cache_err(path, "tensor shapes disagree"));
    }
    let bb = f32s(&bbox);
    Ok(Features {
        n,
        p,
        d,
        e,
        patch: if with_patches {
            patch
                .data()
                .chunks_exact(2)
                .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])))
                .collect()
        } else {
            Vec::new()
        },
        summary: f32s(&summary),
        gap: f32s(&gap),
        oracle: f32s(&oracle),
        label: label
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as usize)
            .collect(),
        bbox: bb
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
    })
}

/// A feature cache directory for one (encoder, generator, input) identity.
#[derive(Debug, Clone)]
pub struct Cache {
    /// The directory.
    pub dir: PathBuf,
    /// Images per shard.
    pub shard_size: usize,
}

impl Cache {
    /// Opens (creating) a cache directory whose `manifest.json` must equal `identity`: a
    /// directory holding another identity is an error, never overwritten.
    ///
    /// # Errors
    /// [`FeatureError::Cache`] for a foreign or unreadable manifest, [`FeatureError::Io`].
    pub fn open(
        dir: &Path,
        identity: &serde_json::Value,
        shard_size: usize,
    ) -> Result<Self, FeatureError> {
        let manifest = dir.join("manifest.json");
        let io = |source: std::io::Error| FeatureError::Io {
            path: manifest.clone(),
            source,
        };
        if manifest.exists() {
            let text = std::fs::read_to_string(&manifest).map_err(io)?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| cache_err(&manifest, format!("invalid JSON: {e}")))?;
            if v.get("identity") != Some(identity) {
                return Err(cache_err(
                    &manifest,
                    "this cache holds features of another model / generator configuration",
                ));
            }
            let stored = v.get("shard_size").and_then(|s| s.as_u64()).unwrap_or(0) as usize;
            if stored == 0 {
                return Err(cache_err(&manifest, "no shard_size"));
            }
            return Ok(Self {
                dir: dir.to_path_buf(),
                shard_size: stored,
            });
        }
        std::fs::create_dir_all(dir).map_err(io)?;
        let v = serde_json::json!({ "identity": identity, "shard_size": shard_size });
        bindscope_core::fsutil::write_atomic(
            &manifest,
            serde_json::to_string_pretty(&v)
                .unwrap_or_default()
                .as_bytes(),
        )
        .map_err(io)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            shard_size,
        })
    }

    /// Path of shard `k` of `set`.
    pub fn shard_path(&self, set: &str, k: usize) -> PathBuf {
        self.dir.join(set).join(format!("shard-{k:05}.safetensors"))
    }

    /// Number of shards of a set of `n` items.
    pub fn num_shards(&self, n: usize) -> usize {
        n.div_ceil(self.shard_size)
    }

    /// Images of shard `k` in a set of `n` items: `shard_size`, less for the last shard.
    pub fn shard_items(&self, k: usize, n: usize) -> usize {
        ((k + 1) * self.shard_size)
            .min(n)
            .saturating_sub(k * self.shard_size)
    }

    /// Shards of a set of `n` items that still have to be extracted: absent, or holding fewer
    /// images than their range (the last shard of a smaller run). A longer shard (written by a
    /// larger run) is kept and read in part.
    pub fn missing(&self, set: &str, n: usize) -> Vec<usize> {
        (0..self.num_shards(n))
            .filter(|&k| {
                shard_len(&self.shard_path(set, k)).is_none_or(|got| got < self.shard_items(k, n))
            })
            .collect()
    }

    /// Shard `k` of a set of `n` items, cut to the images of its range.
    ///
    /// # Errors
    /// [`FeatureError::Cache`] for a missing or short shard, errors of [`read_shard`].
    pub fn read(
        &self,
        set: &str,
        k: usize,
        n: usize,
        with_patches: bool,
    ) -> Result<Features, FeatureError> {
        let path = self.shard_path(set, k);
        if !path.exists() {
            return Err(cache_err(&path, "shard missing: extraction did not finish"));
        }
        let want = self.shard_items(k, n);
        let mut f = read_shard(&path, with_patches)?;
        if f.n < want {
            return Err(cache_err(
                &path,
                format!("{} images cached, {want} expected", f.n),
            ));
        }
        f.truncate(want);
        Ok(f)
    }

    /// Extracts the missing shards of a set. `make(range)` builds the items of a range of the
    /// set (or says why it cannot, [`FeatureError::Input`]); `progress(done)` is called after
    /// each batch with the number of items encoded.
    ///
    /// # Errors
    /// Extraction or I/O errors.
    pub fn extract(
        &self,
        ex: &Extractor,
        set: &str,
        n: usize,
        batch: usize,
        make: &dyn Fn(std::ops::Range<usize>) -> Result<Vec<Item>, FeatureError>,
        progress: &mut dyn FnMut(usize),
    ) -> Result<(), FeatureError> {
        for k in self.missing(set, n) {
            let range = k * self.shard_size..((k + 1) * self.shard_size).min(n);
            let mut feats = Features::default();
            let mut start = range.start;
            while start < range.end {
                let end = (start + batch.max(1)).min(range.end);
                let items = make(start..end)?;
                feats.extend(ex.run(&items)?);
                progress(end - start);
                start = end;
            }
            write_shard(&self.shard_path(set, k), &feats)?;
        }
        Ok(())
    }

    /// Loads a whole set of `n` items (shards concatenated) and checks its labels.
    ///
    /// # Errors
    /// [`FeatureError::Cache`] for a missing shard or a count / label mismatch.
    pub fn load(
        &self,
        set: &str,
        labels: &[usize],
        with_patches: bool,
    ) -> Result<Features, FeatureError> {
        let n = labels.len();
        let mut all = Features::default();
        for k in 0..self.num_shards(n) {
            all.extend(self.read(set, k, n, with_patches)?);
        }
        if all.n != n {
            return Err(cache_err(
                &self.dir.join(set),
                format!("{} items cached, {n} expected", all.n),
            ));
        }
        if all.label != labels {
            return Err(cache_err(
                &self.dir.join(set),
                "cached labels differ from the regenerated scenes",
            ));
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oracle_cells_overlap_the_box() {
        let g = Grid::new(224, 14); // 16 × 16
        // Box spanning pixels [20, 40) x [0, 10): cells x 1..=2, y 0.
        let b = [20.0 / 224.0, 0.0, 40.0 / 224.0, 10.0 / 224.0];
        assert_eq!(oracle_patches(&g, b), vec![1, 2]);
        // A box whose edge sits exactly on a cell border does not take the next cell.
        let b = [14.0 / 224.0, 14.0 / 224.0, 28.0 / 224.0, 28.0 / 224.0];
        assert_eq!(oracle_patches(&g, b), vec![16 + 1]);
        // Non-divisible side: 230 px → 16 cells, pixels 224..230 belong to no cell.
        let g = Grid::new(230, 14);
        let b = [225.0 / 230.0, 225.0 / 230.0, 229.0 / 230.0, 229.0 / 230.0];
        assert_eq!(oracle_patches(&g, b), vec![255]);
    }

    #[test]
    fn shards_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let f = Features {
            n: 2,
            p: 3,
            d: 2,
            e: 1,
            patch: (0..12).map(|i| f16::from_f32(i as f32 * 0.5)).collect(),
            summary: vec![1.0, 2.0],
            gap: vec![0.1, 0.2, 0.3, 0.4],
            oracle: vec![1.1, 1.2, 1.3, 1.4],
            label: vec![3, 5],
            bbox: vec![[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]],
        };
        let path = dir.path().join("s.safetensors");
        write_shard(&path, &f).unwrap();
        let g = read_shard(&path, true).unwrap();
        assert_eq!((g.n, g.p, g.d, g.e), (2, 3, 2, 1));
        assert_eq!(g.patch, f.patch);
        assert_eq!(
            (g.summary, g.gap, g.oracle, g.label, g.bbox),
            (
                f.summary.clone(),
                f.gap.clone(),
                f.oracle.clone(),
                f.label.clone(),
                f.bbox.clone()
            )
        );
        assert!(read_shard(&path, false).unwrap().patch.is_empty());
        assert_eq!(shard_len(&path), Some(2));
        // A cache of 2-image shards: the shards of a 3-image set are [0, 2) and [2, 3).
        let cache = Cache {
            dir: dir.path().to_path_buf(),
            shard_size: 2,
        };
        assert_eq!(cache.missing("a", 3), vec![0, 1]);
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        write_shard(&cache.shard_path("a", 0), &f).unwrap();
        let one = Features {
            n: 1,
            patch: f.patch[..6].to_vec(),
            summary: f.summary[..1].to_vec(),
            gap: f.gap[..2].to_vec(),
            oracle: f.oracle[..2].to_vec(),
            label: f.label[..1].to_vec(),
            bbox: f.bbox[..1].to_vec(),
            ..f.clone()
        };
        write_shard(&cache.shard_path("a", 1), &one).unwrap();
        assert!(cache.missing("a", 3).is_empty());
        // The set grows to 4 images: the 1-image last shard is extracted again, shard 0 kept.
        assert_eq!(cache.missing("a", 4), vec![1]);
        // A smaller set reads the first image of the 2-image shard 0.
        assert!(cache.missing("a", 1).is_empty());
        let part = cache.read("a", 0, 1, true).unwrap();
        assert_eq!(
            (part.n, part.label.clone(), part.patch.len()),
            (1, vec![3], 6)
        );
        assert_eq!(
            (part.summary, part.gap, part.bbox.len()),
            (vec![1.0], vec![0.1, 0.2], 1)
        );
        assert!(cache.read("a", 1, 4, false).is_err(), "short shard");
        std::fs::write(&path, b"garbage").unwrap();
        assert_eq!(shard_len(&path), None);
        let err = read_shard(&path, true).unwrap_err().to_string();
        assert!(err.contains("s.safetensors"), "{err}");
    }
}
