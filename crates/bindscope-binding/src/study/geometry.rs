//! The geometry run (`experiments geometry`, and the geometry step of `probe-all`): global and
//! local geometry of an encoder's embeddings of natural images (paper §3.1, App. D.3): G.PR,
//! G.Iso and L.Iso (k ∈ {8, 16, 32}; variance, effective-rank and participation-ratio
//! formulations). Definitions in [`crate::geometry`].
//!
//! Input: a folder of images, searched recursively (ImageNet-val layout with class folders, or
//! flat), files with an image extension, sorted by path. When it holds more than `samples`
//! images (1,000), a seeded subset is used (`geometry_seed`, Fisher–Yates); with fewer, all are
//! used and the count is recorded. Preprocessing: resize the short side to 256 (Pillow
//! bicubic), center crop 224, ImageNet mean / std ([`Normalize::Imagenet`]), or the checkpoint's
//! own `preprocessor_config.json` ([`Normalize::Model`]). L.Iso anchors: a seeded subset of
//! `anchors` (500) of the samples.
//!
//! Run directory: `config.json`, `geometry_embeddings.jsonl` (cache / resume log: one line per
//! image), `results.json`, `eigenvalues.csv` (global covariance spectrum).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use bindscope_core::Checkpoint;
use bindscope_core::options::{Dtype, Normalize};
use bindscope_core::run::{Output, Plain, RunContext, progress, read_jsonl, write_csv, write_json};
use bindscope_data::image::{DecodeOptions, ImageProcessor, ProcessorKind, ResizeTo, decode_file};
use bindscope_jer::probe::{IMAGENET_MEAN, IMAGENET_STD};
use bindscope_models::{ModelInfo, VisionEncoder, VisionReadout};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{EncoderConfig, canonical_init, embed_images, open_run_dir};
use crate::geometry::{
    ANCHOR_STREAM, Cloud, GlobalGeometry, LocalIsotropy, SAMPLE_STREAM, choose_indices,
    covariance_eigenvalues, global_geometry, local_isotropy,
};
use bindscope_jer::study::canonical_spec;

/// The fewest images the metrics are defined on (a covariance, and an L.Iso neighbourhood of
/// two beside its anchor).
pub const MIN_SAMPLES: usize = 3;

/// Options of the geometric metrics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeometryOptions {
    /// Images used for the covariance (a seeded subset when the folder has more).
    pub samples: usize,
    /// L.Iso anchors (a seeded subset of the samples).
    pub anchors: usize,
    /// L.Iso neighbourhood sizes.
    #[serde(rename = "k")]
    pub ks: Vec<usize>,
    /// Seed of the sample and anchor selection.
    pub geometry_seed: u64,
    /// Preprocessing of the folder images.
    pub preprocess: Normalize,
}

impl GeometryOptions {
    /// Refuses options no folder can use, naming the flags.
    ///
    /// # Errors
    /// `--samples` below [`MIN_SAMPLES`], `--anchors 0` (L.Iso would be a mean over no anchor:
    /// NaN), no `--k`, a `k` below 2, a `k` given twice, or a `k` not below `--samples` (an
    /// anchor has only `samples − 1` neighbours).
    pub fn check(&self) -> Result<()> {
        if self.samples < MIN_SAMPLES {
            bail!(
                "--samples {}: the geometric metrics need at least {MIN_SAMPLES} images",
                self.samples
            );
        }
        if self.anchors == 0 {
            bail!("--anchors 0: L.Iso is a mean over anchors and needs at least 1");
        }
        if self.ks.is_empty() {
            bail!("--k: no neighbourhood size given");
        }
        for (i, &k) in self.ks.iter().enumerate() {
            if k < 2 {
                bail!("--k {k}: an L.Iso neighbourhood needs at least 2 neighbours");
            }
            if self.ks[..i].contains(&k) {
                bail!("--k: {k} is given twice");
            }
            if k >= self.samples {
                bail!(
                    "--k {k}: an anchor among --samples {} images has only {} neighbours",
                    self.samples,
                    self.samples - 1
                );
            }
        }
        Ok(())
    }
}

/// The identity of a geometry computation: the folder, what it held, and the options.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GeometryIdentity {
    /// The folder, canonical (the same folder given relative and absolute is one
    /// configuration).
    pub images: String,
    /// Image files found in it.
    pub files_found: usize,
    /// The options.
    #[serde(flatten)]
    pub options: GeometryOptions,
}

/// The images of a folder a geometry computation uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// What the computation depends on.
    pub identity: GeometryIdentity,
    /// The selected files, sorted.
    pub samples: Vec<PathBuf>,
}

impl Selection {
    /// Lists the image files under `folder` ([`list_images`], on its canonical path: the files
    /// and the identity do not depend on how the folder was written) and selects the samples
    /// ([`select_samples`]).
    ///
    /// # Errors
    /// A folder that does not exist, as [`list_images`], or fewer than [`MIN_SAMPLES`] images.
    pub fn new(folder: &Path, options: &GeometryOptions) -> Result<Self> {
        let folder = folder
            .canonicalize()
            .with_context(|| format!("--images {}", folder.display()))?;
        let files = list_images(&folder)?;
        if files.len() < MIN_SAMPLES {
            bail!(
                "--images {}: {} image file(s); the geometric metrics need at least {MIN_SAMPLES}",
                folder.display(),
                files.len()
            );
        }
        let samples = select_samples(&files, options);
        Ok(Self {
            identity: GeometryIdentity {
                images: folder.display().to_string(),
                files_found: files.len(),
                options: options.clone(),
            },
            samples,
        })
    }
}

const EXTENSIONS: [&str; 9] = [
    "jpg", "jpeg", "png", "bmp", "gif", "webp", "tif", "tiff", "jpe",
];

/// Image files (by extension, case-insensitive) under `dir`, recursively, sorted.
///
/// # Errors
/// An unreadable directory, or no image file at all.
pub fn list_images(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| EXTENSIONS.contains(&x.to_ascii_lowercase().as_str()))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    if out.is_empty() {
        bail!(
            "{}: no image files found (searched recursively for {})",
            dir.display(),
            EXTENSIONS.join(", ")
        );
    }
    Ok(out)
}

/// The selected sample files (sorted) of a folder listing: a seeded subset of `samples` files
/// (all of them when there are fewer).
pub fn select_samples(files: &[PathBuf], options: &GeometryOptions) -> Vec<PathBuf> {
    let mut idx = choose_indices(
        files.len(),
        options.samples,
        options.geometry_seed,
        SAMPLE_STREAM,
    );
    idx.sort_unstable();
    idx.into_iter().map(|i| files[i].clone()).collect()
}

/// The folder processor: resize the short side to 256, center crop 224, ImageNet mean / std;
/// or ([`Normalize::Model`]) the checkpoint's own ([`ImageProcessor::for_checkpoint`]).
///
/// # Errors
/// As [`ImageProcessor::for_checkpoint`], under `--preprocess model`.
pub fn folder_processor(ckpt: &Checkpoint, mode: Normalize) -> Result<ImageProcessor> {
    match mode {
        Normalize::Model => ImageProcessor::for_checkpoint(ckpt).context("--preprocess model"),
        Normalize::Imagenet => Ok(ImageProcessor {
            size: ResizeTo::ShortestEdge(256),
            do_center_crop: true,
            crop_size: (224, 224),
            image_mean: IMAGENET_MEAN,
            image_std: IMAGENET_STD,
            ..ImageProcessor::defaults(ProcessorKind::Bit)
        }),
    }
}

/// One line of `geometry_embeddings.jsonl`.
#[derive(Serialize, Deserialize)]
struct EmbLine {
    file: String,
    embedding: Vec<f32>,
}

/// The geometry of one cloud of embeddings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeometryResult {
    /// Embeddings used.
    pub samples_used: usize,
    /// L.Iso anchors used.
    pub anchors_used: usize,
    /// G.PR, G.Iso.
    pub global: GlobalGeometry,
    /// L.Iso for every neighbourhood size below the number of samples.
    pub local: Vec<LocalIsotropy>,
}

impl GeometryResult {
    /// The flat metric names of `row.json`: `g_pr`, `g_iso`, `l_iso_{variance,erank,pr}_k<k>`.
    pub fn flat_metrics(&self) -> Vec<(String, f64)> {
        let mut out = vec![
            ("g_pr".to_string(), self.global.g_pr),
            ("g_iso".to_string(), self.global.g_iso),
        ];
        for l in &self.local {
            let k = l.k;
            out.push((format!("l_iso_variance_k{k}"), l.variance));
            out.push((format!("l_iso_erank_k{k}"), l.effective_rank));
            out.push((format!("l_iso_pr_k{k}"), l.participation_ratio));
        }
        out
    }
}

/// Embeds the `samples` (cached in `dir/geometry_embeddings.jsonl`, resumable) and computes the
/// metrics; writes `eigenvalues.csv` (the global covariance spectrum) into `dir`.
///
/// # Errors
/// Fewer than 3 samples, an image that does not decode, an embedding failure, a degenerate
/// cloud.
#[allow(clippy::too_many_arguments)]
pub fn compute(
    dir: &Path,
    model: &dyn VisionEncoder,
    proc: &ImageProcessor,
    samples: &[PathBuf],
    options: &GeometryOptions,
    output: VisionReadout,
    batch_size: usize,
    device: &Device,
) -> Result<GeometryResult> {
    if samples.len() < 3 {
        bail!("geometry needs at least 3 images, got {}", samples.len());
    }
    let cache = dir.join("geometry_embeddings.jsonl");
    let mut have: BTreeMap<String, Vec<f32>> = BTreeMap::new();
    for l in read_jsonl::<EmbLine>(&cache, "embedding")? {
        have.insert(l.file, l.embedding);
    }
    let key = |p: &PathBuf| p.display().to_string();
    let todo: Vec<&PathBuf> = samples
        .iter()
        .filter(|p| !have.contains_key(&key(p)))
        .collect();
    if !todo.is_empty() {
        let pb = progress(samples.len() as u64, "images");
        pb.set_position((samples.len() - todo.len()) as u64);
        let decode = DecodeOptions::hf();
        for chunk in todo.chunks(batch_size.max(1)) {
            let imgs = chunk
                .iter()
                .map(|p| {
                    decode_file(p, &decode).with_context(|| format!("decoding {}", p.display()))
                })
                .collect::<Result<Vec<_>>>()?;
            let rows = embed_images(model, proc, &imgs, output, device)?;
            let mut text = String::new();
            for (p, e) in chunk.iter().zip(&rows) {
                text.push_str(&serde_json::to_string(&EmbLine {
                    file: key(p),
                    embedding: e.clone(),
                })?);
                text.push('\n');
            }
            bindscope_core::fsutil::append_line(&cache, text.trim_end_matches('\n'))?;
            for (p, e) in chunk.iter().zip(rows) {
                have.insert(key(p), e);
            }
            pb.inc(chunk.len() as u64);
        }
        pb.finish_and_clear();
    }
    let rows: Vec<Vec<f32>> = samples.iter().map(|p| have[&key(p)].clone()).collect();
    let cloud = Cloud::from_rows(&rows);
    let global = global_geometry(&cloud).map_err(|e| anyhow::anyhow!(e))?;
    let all: Vec<usize> = (0..cloud.n).collect();
    let ev = covariance_eigenvalues(&cloud, &all).map_err(|e| anyhow::anyhow!(e))?;
    let total: f64 = ev.iter().sum();
    let eigen: Vec<EigenRow> = ev
        .iter()
        .enumerate()
        .map(|(i, &l)| EigenRow {
            index: i + 1,
            eigenvalue: Plain(l),
            fraction: Plain(l / total),
        })
        .collect();
    write_csv(&dir.join("eigenvalues.csv"), &eigen)?;
    let anchors = choose_indices(
        cloud.n,
        options.anchors,
        options.geometry_seed,
        ANCHOR_STREAM,
    );
    let ks: Vec<usize> = options
        .ks
        .iter()
        .copied()
        .filter(|&k| k < cloud.n)
        .collect();
    if ks.len() < options.ks.len() {
        eprintln!(
            "geometry: only {} samples: L.Iso skips k ≥ {}",
            cloud.n, cloud.n
        );
    }
    let local = local_isotropy(&cloud, &anchors, &ks).map_err(|e| anyhow::anyhow!(e))?;
    Ok(GeometryResult {
        samples_used: cloud.n,
        anchors_used: anchors.len(),
        global,
        local,
    })
}

/// The configuration of a geometry run (`experiments geometry`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeometryConfig {
    /// The encoder.
    pub encoder: EncoderConfig,
    /// Folder of images (searched recursively).
    pub images: PathBuf,
    /// The metrics' options.
    pub geometry: GeometryOptions,
    /// Which embedding.
    pub output: VisionReadout,
    /// Images per forward pass.
    pub batch_size: usize,
}

impl GeometryConfig {
    /// Checks every option that needs no model, naming the flags.
    ///
    /// # Errors
    /// As [`GeometryOptions::check`]; `--batch-size 0`.
    pub fn check(&self) -> Result<()> {
        self.geometry.check()?;
        if self.batch_size == 0 {
            bail!("--batch-size must be at least 1");
        }
        Ok(())
    }
}

/// The identity of a geometry run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GeometryRunIdentity {
    /// The checkpoint spec.
    pub model: String,
    /// sha256 of its weights.
    pub weights_sha256: String,
    /// `--random-init` as given.
    pub random_init: Option<String>,
    /// Weight dtype.
    pub dtype: Dtype,
    /// Which embedding.
    pub output: VisionReadout,
    /// The folder and the options.
    pub geometry: GeometryIdentity,
}

/// What a geometry run computed.
#[derive(Debug, Clone, Serialize)]
pub struct GeometryReport {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The checkpoint spec.
    pub model: String,
    /// The encoder's facts.
    pub model_info: ModelInfo,
    /// The metrics.
    pub geometry: GeometryResult,
}

/// `experiments geometry`: embeds the selected images of the folder and computes G.PR, G.Iso
/// and L.Iso. Writes `config.json` (with the selected `files`), `geometry_embeddings.jsonl`,
/// `eigenvalues.csv`, `results.json`; prints the metrics.
///
/// # Errors
/// As [`EncoderConfig::open`], [`Selection::new`], [`folder_processor`], [`open_run_dir`],
/// [`compute`].
pub fn run(config: &GeometryConfig, output: &Output, ctx: &RunContext) -> Result<GeometryReport> {
    config.check()?;
    let device = &ctx.device;
    let selection = Selection::new(&config.images, &config.geometry)?;
    let (spec, opened) = config.encoder.open(device)?;
    let proc = folder_processor(&opened.checkpoint, config.geometry.preprocess)?;
    let identity = GeometryRunIdentity {
        model: canonical_spec(&spec),
        weights_sha256: opened.weights_sha256.clone(),
        random_init: config.encoder.random_init().map(canonical_init),
        dtype: config.encoder.dtype,
        output: config.output,
        geometry: selection.identity.clone(),
    };
    let samples = &selection.samples;
    let dir = open_run_dir(
        output,
        "geometry",
        &spec,
        &identity,
        json!({ "files": samples }),
        ctx,
    )?;
    eprintln!(
        "geometry: {spec}, {} of {} images → {}",
        samples.len(),
        selection.identity.files_found,
        dir.display()
    );
    let g = compute(
        &dir,
        opened.model.as_ref(),
        &proc,
        samples,
        &config.geometry,
        config.output,
        config.batch_size,
        device,
    )?;
    let report = GeometryReport {
        run_dir: dir.clone(),
        model: spec.clone(),
        model_info: opened.model.info(),
        geometry: g,
    };
    write_json(
        &dir.join("results.json"),
        &json!({ "model": report.model, "model_info": report.model_info, "geometry": report.geometry }),
    )?;
    let g = &report.geometry;
    println!(
        "{spec}: G.PR = {:.4}, G.Iso = {:.4} (n = {}, D = {})",
        g.global.g_pr, g.global.g_iso, g.global.n, g.global.dim
    );
    print!("{}", local_table(&g.local, g.global.dim));
    println!("results: {}", dir.display());
    Ok(report)
}

/// The L.Iso lines of the printed summary: what each number is (the effective rank and the
/// participation ratio are normalised by `m = min(k − 1, D)`, the most non-zero eigenvalues a
/// neighbourhood of `k` has, so all three lie in [0, 1]), then one line per `k`.
pub fn local_table(local: &[LocalIsotropy], dim: usize) -> String {
    let mut out = String::new();
    if local.is_empty() {
        return out;
    }
    out.push_str(
        "  L.Iso (mean over anchors of the k-neighbourhood covariance; m = min(k − 1, D)): variance 1 − λ₁/Σλ, normalised effective rank exp(H(λ/Σλ))/m, normalised participation ratio (Σλ)²/(m·Σλ²)\n",
    );
    for l in local {
        // `k` unpadded, as the JSON value it was printed from.
        out.push_str(&format!(
            "  L.Iso k={} (m = {}): variance {:.4}, normalised effective rank {:.4}, normalised participation ratio {:.4}\n",
            l.k,
            (l.k - 1).min(dim),
            l.variance,
            l.effective_rank,
            l.participation_ratio
        ));
    }
    out
}

/// A row of `eigenvalues.csv`: the covariance spectrum, largest first.
#[derive(Serialize)]
struct EigenRow {
    index: usize,
    eigenvalue: Plain,
    fraction: Plain,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> GeometryOptions {
        GeometryOptions {
            samples: 60,
            anchors: 20,
            ks: vec![8, 16],
            geometry_seed: 42,
            preprocess: Normalize::Imagenet,
        }
    }

    #[test]
    fn options_no_folder_can_use_are_refused_naming_the_flag() {
        assert!(options().check().is_ok());
        let fails = |o: GeometryOptions, want: &str| {
            let e = o.check().unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}");
        };
        fails(
            GeometryOptions {
                anchors: 0,
                ..options()
            },
            "--anchors 0",
        );
        fails(
            GeometryOptions {
                samples: 0,
                ..options()
            },
            "--samples 0",
        );
        fails(
            GeometryOptions {
                ks: vec![8, 0],
                ..options()
            },
            "--k 0",
        );
        fails(
            GeometryOptions {
                ks: vec![8, 8],
                ..options()
            },
            "--k: 8 is given twice",
        );
        fails(
            GeometryOptions {
                ks: vec![60],
                ..options()
            },
            "--k 60",
        );
        fails(
            GeometryOptions {
                ks: vec![],
                ..options()
            },
            "--k: no",
        );
    }

    /// The printed L.Iso says which numbers are normalised and by what.
    #[test]
    fn the_printed_effective_rank_says_it_is_normalised() {
        let l = LocalIsotropy {
            k: 8,
            anchors: 20,
            variance: 0.1,
            effective_rank: 0.25,
            participation_ratio: 0.3,
        };
        let t = local_table(&[l], 16);
        assert!(
            t.contains("normalised effective rank exp(H(λ/Σλ))/m"),
            "{t}"
        );
        assert!(
            t.contains("L.Iso k=8 (m = 7): variance 0.1000, normalised effective rank 0.2500, normalised participation ratio 0.3000"),
            "{t}"
        );
        assert!(!t.contains(", effective rank"), "{t}");
        // A 4-dimensional embedding caps m at D.
        assert!(local_table(&[l], 4).contains("(m = 4)"));
    }

    #[test]
    fn identity_and_flat_metric_names_are_the_recorded_ones() {
        let options = GeometryOptions {
            samples: 60,
            anchors: 20,
            ks: vec![8, 16],
            geometry_seed: 42,
            preprocess: Normalize::Model,
        };
        let id = GeometryIdentity {
            images: "imgs".into(),
            files_found: 324,
            options,
        };
        assert_eq!(
            serde_json::to_value(&id).unwrap(),
            json!({ "images": "imgs", "files_found": 324, "samples": 60, "anchors": 20,
                    "k": [8, 16], "geometry_seed": 42, "preprocess": "model" })
        );
        let local = |k| LocalIsotropy {
            k,
            anchors: 20,
            variance: 0.1,
            effective_rank: 0.2,
            participation_ratio: 0.3,
        };
        let g = GeometryResult {
            samples_used: 60,
            anchors_used: 20,
            global: GlobalGeometry {
                n: 60,
                dim: 16,
                g_pr: 0.4,
                g_iso: 0.5,
                participation_ratio: 6.4,
                total_variance: 1.0,
            },
            local: vec![local(8), local(16)],
        };
        let names: Vec<String> = g.flat_metrics().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            names,
            [
                "g_pr",
                "g_iso",
                "l_iso_variance_k8",
                "l_iso_erank_k8",
                "l_iso_pr_k8",
                "l_iso_variance_k16",
                "l_iso_erank_k16",
                "l_iso_pr_k16"
            ]
        );
    }
}
