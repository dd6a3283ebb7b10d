//! `experiments embed`: embeddings of images or texts, written to `.jsonl` or `.safetensors`.
//!
//! `.jsonl`: one `{"input": ..., "embedding": [...]}` per line, in input order.
//! `.safetensors`: tensor `embeddings` `[N, D]` (f32) and the inputs as a JSON list in the
//! header metadata under `inputs`. The file is written atomically (temp file + rename): an
//! interrupted or failed run leaves no partial output.

use crate::common::{self, ModelOpts};
use anyhow::{Context, Result, bail};
use bindscope_data::image::{DecodeOptions, ImageProcessor, RgbImage, decode_file, load_dir};
use bindscope_data::text::Tokenizer;
use bindscope_models::VisionReadout;
use burn::prelude::*;
use std::path::{Path, PathBuf};

/// Arguments of `experiments embed`.
#[derive(clap::Args, Debug)]
pub struct EmbedArgs {
    /// Hugging Face id or local checkpoint directory.
    #[arg(long)]
    model: String,
    /// Image files or directories (every file of a directory, sorted by name).
    #[arg(long, num_args = 1.., conflicts_with = "texts", required_unless_present = "texts")]
    images: Vec<PathBuf>,
    /// A UTF-8 text file, one input per line.
    #[arg(long)]
    texts: Option<PathBuf>,
    /// Output file: `.jsonl` or `.safetensors`.
    #[arg(long)]
    out: PathBuf,
    /// Inputs per forward pass.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Image embedding to write: pooled (projected for CLIP), summary, mean-patch.
    #[arg(long, default_value = "pooled")]
    output: VisionReadout,
    /// Embed the readable images of a directory and list the unreadable ones, instead of
    /// stopping at the first failure.
    #[arg(long)]
    skip_unreadable: bool,
    #[command(flatten)]
    model_opts: ModelOpts,
}

enum Format {
    Jsonl,
    Safetensors,
}

pub fn run(args: EmbedArgs, device: &Device) -> Result<()> {
    let format = match args.out.extension().and_then(|e| e.to_str()) {
        Some("jsonl") => Format::Jsonl,
        Some("safetensors") => Format::Safetensors,
        _ => bail!(
            "--out {}: expected a .jsonl or .safetensors file name",
            args.out.display()
        ),
    };
    // The output must be writable as a file before any embedding work is done.
    if args.out.is_dir() {
        bail!(
            "--out {} is a directory: expected a .jsonl or .safetensors file name",
            args.out.display()
        );
    }
    if args.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let ckpt = common::resolve(&args.model)?;
    let opts = args.model_opts.load_options();
    let (inputs, rows, dim) = if let Some(texts) = &args.texts {
        embed_texts(&ckpt, texts, &args, device, &opts)?
    } else {
        embed_images(&ckpt, &args, device, &opts)?
    };
    match format {
        Format::Jsonl => {
            bindscope_core::fsutil::write_atomic_with(&args.out, |w| {
                use std::io::Write;
                for (input, row) in inputs.iter().zip(rows.chunks(dim)) {
                    let line = serde_json::json!({ "input": input, "embedding": row });
                    writeln!(w, "{line}")?;
                }
                Ok(())
            })?;
        }
        Format::Safetensors => {
            let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
            let view = safetensors::tensor::TensorView::new(
                safetensors::Dtype::F32,
                vec![inputs.len(), dim],
                &bytes,
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            let meta = std::collections::HashMap::from([(
                "inputs".to_string(),
                serde_json::to_string(&inputs)?,
            )]);
            let data = safetensors::serialize([("embeddings", view)], Some(meta))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            bindscope_core::fsutil::write_atomic(&args.out, &data)?;
        }
    }
    eprintln!(
        "wrote {} embeddings of dimension {dim} to {}",
        inputs.len(),
        args.out.display()
    );
    Ok(())
}

fn embed_texts(
    ckpt: &bindscope_core::Checkpoint,
    path: &Path,
    args: &EmbedArgs,
    device: &Device,
    opts: &bindscope_core::LoadOptions,
) -> Result<(Vec<String>, Vec<f32>, usize)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --texts {}", path.display()))?;
    // A byte-order mark is an encoding marker, not text (editors on Windows write one).
    let text = match text.strip_prefix('\u{feff}') {
        Some(rest) => {
            eprintln!("{}: UTF-8 byte-order mark removed", path.display());
            rest
        }
        None => text.as_str(),
    };
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    if let Some(n) = lines.iter().position(|l| l.trim().is_empty()) {
        bail!(
            "{}:{}: empty line (one input per line; remove blank lines)",
            path.display(),
            n + 1
        );
    }
    if lines.is_empty() {
        bail!("{}: no inputs", path.display());
    }
    let tok = Tokenizer::from_checkpoint(ckpt)?;
    let model = bindscope_models::registry::load_text(ckpt, device, opts)?;
    let pb = common::progress(lines.len() as u64, "texts");
    let mut rows = Vec::new();
    let mut dim = 0;
    for batch in lines.chunks(args.batch_size) {
        let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
        let (ids, mask) = tok.encode_batch(&refs)?.tensors(device);
        let e = model.embed_text(ids, mask);
        dim = e.dims()[1];
        rows.extend(
            bindscope_core::device::to_host_f32(e).context("embedding a batch (--batch-size)")?,
        );
        pb.inc(batch.len() as u64);
    }
    pb.finish_and_clear();
    Ok((lines, rows, dim))
}

fn embed_images(
    ckpt: &bindscope_core::Checkpoint,
    args: &EmbedArgs,
    device: &Device,
    opts: &bindscope_core::LoadOptions,
) -> Result<(Vec<String>, Vec<f32>, usize)> {
    let decode = DecodeOptions::hf();
    // Expand directories; every failure is reported, none is skipped silently.
    let mut files: Vec<PathBuf> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for p in &args.images {
        if p.is_dir() {
            let d = load_dir(p, &decode)?;
            for (f, r) in &d.results {
                match r {
                    Ok(_) => files.push(f.clone()),
                    Err(e) => failures.push(e.to_string()),
                }
            }
            if !d.not_files.is_empty() {
                eprintln!(
                    "{}: {} entries that are not files were not read",
                    p.display(),
                    d.not_files.len()
                );
            }
        } else {
            files.push(p.clone());
        }
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("unreadable: {f}");
        }
        if !args.skip_unreadable {
            bail!(
                "{} unreadable image(s) (listed above); nothing written. Pass --skip-unreadable to embed the rest",
                failures.len()
            );
        }
        eprintln!(
            "{} unreadable image(s) skipped (--skip-unreadable)",
            failures.len()
        );
    }
    if files.is_empty() {
        bail!("no images to embed");
    }
    let processor =
        ImageProcessor::for_checkpoint(ckpt).context("cannot preprocess images for this model")?;
    let model = bindscope_models::registry::load_vision(ckpt, device, opts)?;
    let pb = common::progress(files.len() as u64, "images");
    let mut rows = Vec::new();
    let mut dim = 0;
    for batch in files.chunks(args.batch_size) {
        let imgs: Vec<RgbImage> = batch
            .iter()
            .map(|f| decode_file(f, &decode))
            .collect::<Result<_, _>>()?;
        let x = processor.pixel_values(&imgs, device)?;
        let e = model.embed(x, args.output);
        dim = e.dims()[1];
        rows.extend(
            bindscope_core::device::to_host_f32(e).context("embedding a batch (--batch-size)")?,
        );
        pb.inc(batch.len() as u64);
    }
    pb.finish_and_clear();
    Ok((
        files.iter().map(|f| f.display().to_string()).collect(),
        rows,
        dim,
    ))
}
