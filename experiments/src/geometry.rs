//! `experiments geometry`: global and local geometry of an encoder's embeddings of natural
//! images (paper §3.1, App. D.3): G.PR, G.Iso and L.Iso (k ∈ {8, 16, 32}; variance,
//! effective-rank and participation-ratio formulations). Definitions in
//! `bindscope_binding::geometry`.
//!
//! Input: a folder of images, searched recursively (ImageNet-val layout with class folders, or
//! flat), files with an image extension, sorted by path. When it holds more than `--samples`
//! images (1,000), a seeded subset is used (`--geometry-seed`, Fisher–Yates); with fewer, all
//! are used and the count is recorded. Preprocessing: resize the short side to 256 (Pillow
//! bicubic), center crop 224, ImageNet mean / std (`--preprocess imagenet`), or the
//! checkpoint's own `preprocessor_config.json` (`--preprocess model`). L.Iso anchors: a seeded
//! subset of `--anchors` (500) of the samples.
//!
//! Run directory: `config.json`, `geometry_embeddings.jsonl` (cache / resume log: one line per
//! image), `results.json`, `eigenvalues.csv` (global covariance spectrum).

use crate::binding::{self, ModelSource};
use crate::common::{self, Normalize};
use anyhow::{Context, Result, bail};
use bindscope_binding::geometry::{
    ANCHOR_STREAM, Cloud, SAMPLE_STREAM, choose_indices, covariance_eigenvalues, global_geometry,
    local_isotropy,
};
use bindscope_data::image::{DecodeOptions, ImageProcessor, ProcessorKind, ResizeTo, decode_file};
use bindscope_jer::probe::{IMAGENET_MEAN, IMAGENET_STD};
use bindscope_models::{VisionEncoder, VisionReadout};
use burn::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Options of the geometric metrics (shared with `probe-all`).
#[derive(clap::Args, Debug, Clone)]
pub struct GeometryOpts {
    /// Images used for the covariance (a seeded subset when the folder has more).
    #[arg(long, default_value_t = 1000)]
    pub samples: usize,
    /// L.Iso anchors (a seeded subset of the samples).
    #[arg(long, default_value_t = 500)]
    pub anchors: usize,
    /// L.Iso neighbourhood sizes.
    #[arg(long = "k", value_delimiter = ',', default_value = "8,16,32")]
    pub ks: Vec<usize>,
    /// Seed of the sample and anchor selection.
    #[arg(long, default_value_t = 42)]
    pub geometry_seed: u64,
    /// Preprocessing of the folder images: imagenet (resize 256 bicubic, center crop 224,
    /// ImageNet mean/std) or model (the checkpoint's preprocessor_config.json).
    #[arg(long, value_enum, default_value_t = Normalize::Imagenet)]
    pub preprocess: Normalize,
}

/// Arguments of `experiments geometry`.
#[derive(clap::Args, Debug)]
pub struct GeometryArgs {
    #[command(flatten)]
    source: ModelSource,
    /// Folder of images (searched recursively).
    #[arg(long)]
    images: PathBuf,
    #[command(flatten)]
    geometry: GeometryOpts,
    /// Which embedding: pooled, summary, mean-patch.
    #[arg(long, default_value = "pooled")]
    output: VisionReadout,
    /// Images per forward pass.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Run directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a new run directory even if a matching one exists.
    #[arg(long)]
    fresh: bool,
}

const EXTENSIONS: [&str; 9] = [
    "jpg", "jpeg", "png", "bmp", "gif", "webp", "tif", "tiff", "jpe",
];

/// Image files under `dir`, recursively, sorted.
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

/// The folder processor: resize 256 / crop 224 / ImageNet, or the checkpoint's.
pub fn folder_processor(
    ckpt: &bindscope_core::Checkpoint,
    mode: Normalize,
) -> Result<ImageProcessor> {
    if mode == Normalize::Model {
        return binding::scene_processor(ckpt, Normalize::Model);
    }
    Ok(ImageProcessor {
        size: ResizeTo::ShortestEdge(256),
        do_center_crop: true,
        crop_size: (224, 224),
        image_mean: IMAGENET_MEAN,
        image_std: IMAGENET_STD,
        ..ImageProcessor::defaults(ProcessorKind::Bit)
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct EmbLine {
    file: String,
    embedding: Vec<f32>,
}

/// The identity fields of a geometry computation.
pub fn geometry_identity(
    folder: &Path,
    files: &[PathBuf],
    opts: &GeometryOpts,
) -> serde_json::Value {
    json!({
        "images": folder.display().to_string(),
        "files_found": files.len(),
        "samples": opts.samples,
        "anchors": opts.anchors,
        "k": opts.ks,
        "geometry_seed": opts.geometry_seed,
        "preprocess": opts.preprocess,
    })
}

/// The selected sample files (sorted) of a folder listing.
pub fn select_samples(files: &[PathBuf], opts: &GeometryOpts) -> Vec<PathBuf> {
    let mut idx = choose_indices(files.len(), opts.samples, opts.geometry_seed, SAMPLE_STREAM);
    idx.sort_unstable();
    idx.into_iter().map(|i| files[i].clone()).collect()
}

/// Embeds the selected files (cached in `cache`) and computes the metrics; writes
/// `eigenvalues.csv` into `dir`. Returns the `geometry` JSON object.
#[allow(clippy::too_many_arguments)]
pub fn compute(
    dir: &Path,
    model: &dyn VisionEncoder,
    proc: &ImageProcessor,
    samples: &[PathBuf],
    opts: &GeometryOpts,
    output: VisionReadout,
    batch_size: usize,
    device: &Device,
) -> Result<serde_json::Value> {
    if samples.len() < 3 {
        bail!("geometry needs at least 3 images, got {}", samples.len());
    }
    let cache = dir.join("geometry_embeddings.jsonl");
    let mut have: BTreeMap<String, Vec<f32>> = BTreeMap::new();
    for l in common::read_jsonl::<EmbLine>(&cache, "embedding")? {
        have.insert(l.file, l.embedding);
    }
    let key = |p: &PathBuf| p.display().to_string();
    let todo: Vec<&PathBuf> = samples
        .iter()
        .filter(|p| !have.contains_key(&key(p)))
        .collect();
    if !todo.is_empty() {
        let pb = common::progress(samples.len() as u64, "images");
        pb.set_position((samples.len() - todo.len()) as u64);
        let decode = DecodeOptions::hf();
        for chunk in todo.chunks(batch_size.max(1)) {
            let imgs = chunk
                .iter()
                .map(|p| {
                    decode_file(p, &decode).with_context(|| format!("decoding {}", p.display()))
                })
                .collect::<Result<Vec<_>>>()?;
            let rows = binding::embed_images(model, proc, &imgs, output, device)?;
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
    let mut csv = String::from("index,eigenvalue,fraction\n");
    let total: f64 = ev.iter().sum();
    for (i, l) in ev.iter().enumerate() {
        csv.push_str(&format!("{},{},{}\n", i + 1, l, l / total));
    }
    bindscope_core::fsutil::write_atomic(&dir.join("eigenvalues.csv"), csv.as_bytes())?;
    let anchors = choose_indices(cloud.n, opts.anchors, opts.geometry_seed, ANCHOR_STREAM);
    let ks: Vec<usize> = opts.ks.iter().copied().filter(|&k| k < cloud.n).collect();
    if ks.len() < opts.ks.len() {
        eprintln!(
            "geometry: only {} samples: L.Iso skips k ≥ {}",
            cloud.n, cloud.n
        );
    }
    let local = local_isotropy(&cloud, &anchors, &ks).map_err(|e| anyhow::anyhow!(e))?;
    Ok(
        json!({ "samples_used": cloud.n, "anchors_used": anchors.len(), "global": global, "local": local }),
    )
}

/// Flat metric names of a `geometry` JSON object (for `row.json`).
pub fn flat_metrics(
    geometry: &serde_json::Value,
    out: &mut serde_json::Map<String, serde_json::Value>,
) {
    out.insert("g_pr".into(), geometry["global"]["g_pr"].clone());
    out.insert("g_iso".into(), geometry["global"]["g_iso"].clone());
    if let Some(local) = geometry["local"].as_array() {
        for l in local {
            let k = l["k"].as_u64().unwrap_or(0);
            out.insert(format!("l_iso_variance_k{k}"), l["variance"].clone());
            out.insert(format!("l_iso_erank_k{k}"), l["effective_rank"].clone());
            out.insert(format!("l_iso_pr_k{k}"), l["participation_ratio"].clone());
        }
    }
}

pub fn run(args: GeometryArgs, device: &Device, device_spec: &str) -> Result<()> {
    let spec = args.source.spec(device)?;
    let ckpt = common::resolve(&spec)?;
    let sha = ckpt.weights_sha256()?;
    let files = list_images(&args.images)?;
    let samples = select_samples(&files, &args.geometry);
    let identity = json!({
        "model": spec,
        "weights_sha256": sha,
        "random_init": args.source.random_init,
        "dtype": args.source.model_opts.dtype,
        "output": args.output,
        "geometry": geometry_identity(&args.images, &files, &args.geometry),
    });
    let dir = common::run_dir(
        "geometry",
        &common::slug(&spec),
        args.out.clone(),
        &identity,
        args.fresh,
    )?;
    binding::write_config(
        &dir,
        "geometry",
        &identity,
        json!({ "files": samples }),
        device,
        device_spec,
    )?;
    eprintln!(
        "geometry: {spec}, {} of {} images → {}",
        samples.len(),
        files.len(),
        dir.display()
    );
    let model = bindscope_models::registry::load_vision(
        &ckpt,
        device,
        &args.source.model_opts.load_options(),
    )
    .with_context(|| format!("loading vision encoder of '{spec}'"))?;
    let proc = folder_processor(&ckpt, args.geometry.preprocess)?;
    let g = compute(
        &dir,
        model.as_ref(),
        &proc,
        &samples,
        &args.geometry,
        args.output,
        args.batch_size,
        device,
    )?;
    common::write_json(
        &dir.join("results.json"),
        &json!({ "model": spec, "model_info": model.info(), "geometry": g }),
    )?;
    println!(
        "{spec}: G.PR = {:.4}, G.Iso = {:.4} (n = {}, D = {})",
        g["global"]["g_pr"].as_f64().unwrap_or(f64::NAN),
        g["global"]["g_iso"].as_f64().unwrap_or(f64::NAN),
        g["global"]["n"],
        g["global"]["dim"]
    );
    for l in g["local"].as_array().into_iter().flatten() {
        println!(
            "  L.Iso k={:>2}: variance {:.4}, effective rank {:.4}, participation ratio {:.4}",
            l["k"],
            l["variance"].as_f64().unwrap_or(f64::NAN),
            l["effective_rank"].as_f64().unwrap_or(f64::NAN),
            l["participation_ratio"].as_f64().unwrap_or(f64::NAN)
        );
    }
    println!("results: {}", dir.display());
    Ok(())
}
