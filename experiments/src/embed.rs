//! `experiments embed`: embeddings of images or texts, written to `.jsonl` or `.safetensors`.
//!
//! `.jsonl`: one `{"input": ..., "embedding": [...]}` per line, in input order.
//! `.safetensors`: tensor `embeddings` `[N, D]` (f32) and the inputs as a JSON list in the
//! header metadata under `inputs`. The file is written atomically (temp file + rename): an
//! interrupted or failed run leaves no partial output and no temporary file.
//!
//! Every option is checked before the model is resolved or anything is embedded: `--out` (its
//! extension decides the format; its directory must exist and be writable; it must not be a
//! directory), `--batch-size`, and the inputs themselves (`--texts` read as UTF-8, a leading
//! byte-order mark removed, by `bindscope_data::textfile`; every `--images` file listed).

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
    /// Hugging Face id, local checkpoint directory (transformers layout, or a timm repository of BEiT / EVA-02), or PyTorch .pth/.pt file (a torchvision ResNet; see --arch).
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
    /// Transparent images (RGBA, LA, palette with transparency): `white` composites them over
    /// white, as transformers 5.x's image processors do; `ignore` drops the alpha channel, as
    /// transformers 4.x did (the colour stored under transparent pixels shows).
    #[arg(long, value_enum, default_value = "white", conflicts_with = "texts")]
    alpha: AlphaArg,
    #[command(flatten)]
    model_opts: ModelOpts,
}

/// `--alpha`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum AlphaArg {
    /// Composite over opaque white (transformers 5.x).
    White,
    /// Drop the alpha channel (transformers 4.x).
    Ignore,
}

enum Format {
    Jsonl,
    Safetensors,
}

/// The format `--out` asks for, once it is known that the file can be written: its extension
/// is `.jsonl` or `.safetensors`, it is not a directory, and its directory exists and takes a
/// new file ([`bindscope_core::fsutil::check_writable`]).
fn check_out(out: &Path) -> Result<Format> {
    let format = match out.extension().and_then(|e| e.to_str()) {
        Some("jsonl") => Format::Jsonl,
        Some("safetensors") => Format::Safetensors,
        _ => bail!(
            "--out {}: expected a .jsonl or .safetensors file name",
            out.display()
        ),
    };
    if out.is_dir() {
        bail!(
            "--out {} is a directory: expected a .jsonl or .safetensors file name",
            out.display()
        );
    }
    // Its directory must exist and take a new file.
    bindscope_core::fsutil::check_writable(out).context("--out")?;
    Ok(format)
}

/// The inputs of a run, read and listed before any model work.
enum Inputs {
    /// The lines of `--texts`.
    Texts(Vec<String>),
    /// The image files.
    Images(Vec<PathBuf>),
}

pub fn run(args: EmbedArgs, device: &Device) -> Result<()> {
    let format = check_out(&args.out)?;
    if args.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let inputs = match &args.texts {
        Some(path) => Inputs::Texts(read_texts(path)?),
        None => Inputs::Images(list_images(&args)?),
    };
    let ckpt = common::resolve(&args.model)?;
    let opts = args.model_opts.load_options();
    let (inputs, rows, dim) = match inputs {
        Inputs::Texts(lines) => embed_texts(&ckpt, lines, &args, device, &opts)?,
        Inputs::Images(files) => embed_images(&ckpt, files, &args, device, &opts)?,
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

/// The lines of a `--texts` file: UTF-8 (an invalid byte is reported by line), a leading
/// byte-order mark removed and said, no blank line, at least one line.
fn read_texts(path: &Path) -> Result<Vec<String>> {
    let file = bindscope_data::textfile::read_text_file(path).context("--texts")?;
    if let Some(note) = file.bom_note() {
        eprintln!("{note}");
    }
    let lines: Vec<String> = file.text.lines().map(str::to_string).collect();
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
    Ok(lines)
}

fn embed_texts(
    ckpt: &bindscope_core::Checkpoint,
    lines: Vec<String>,
    args: &EmbedArgs,
    device: &Device,
    opts: &bindscope_core::LoadOptions,
) -> Result<(Vec<String>, Vec<f32>, usize)> {
    // The model first: a checkpoint without a text tower is named as such, not as a
    // tokenization problem.
    let model = bindscope_models::registry::load_text(ckpt, device, opts)?;
    let tok = Tokenizer::from_checkpoint(ckpt)?;
    let pb = common::progress(lines.len() as u64, "texts");
    let mut rows = Vec::new();
    let mut dim = 0;
    for (b, batch) in lines.chunks(args.batch_size).enumerate() {
        let first = b * args.batch_size + 1;
        let span = || {
            format!(
                "embedding lines {first}-{} of --texts (--batch-size {})",
                first + batch.len() - 1,
                args.batch_size
            )
        };
        let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
        let (ids, mask) = tok.encode_batch(&refs).with_context(span)?.tensors(device);
        let e = model.embed_text(ids, mask);
        dim = e.dims()[1];
        rows.extend(bindscope_core::device::to_host_f32(e).with_context(span)?);
        pb.inc(batch.len() as u64);
    }
    pb.finish_and_clear();
    Ok((lines, rows, dim))
}

fn decode_options(args: &EmbedArgs) -> DecodeOptions {
    match args.alpha {
        AlphaArg::White => DecodeOptions::hf(),
        AlphaArg::Ignore => DecodeOptions::hf_v4(),
    }
}

/// The image files of `--images` (directories expanded); unreadable files are listed and stop
/// the run unless `--skip-unreadable`.
fn list_images(args: &EmbedArgs) -> Result<Vec<PathBuf>> {
    let decode = decode_options(args);
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
    Ok(files)
}

/// `a.png, b.png, …` for messages.
fn names(files: &[PathBuf]) -> String {
    let shown: Vec<String> = files
        .iter()
        .take(4)
        .map(|f| f.display().to_string())
        .collect();
    match files.len() {
        n if n > 4 => format!("{} and {} more", shown.join(", "), n - 4),
        _ => shown.join(", "),
    }
}

fn embed_images(
    ckpt: &bindscope_core::Checkpoint,
    files: Vec<PathBuf>,
    args: &EmbedArgs,
    device: &Device,
    opts: &bindscope_core::LoadOptions,
) -> Result<(Vec<String>, Vec<f32>, usize)> {
    let decode = decode_options(args);
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
        // A processor without center crop keeps the aspect ratio: a batch must share one size.
        let size = |i: &RgbImage| processor.output_size(i.width, i.height);
        if let Some(k) = imgs.iter().position(|i| size(i) != size(&imgs[0])) {
            let ((h0, w0), (hk, wk)) = (size(&imgs[0]), size(&imgs[k]));
            bail!(
                "{} ({}x{}) preprocesses to {w0}x{h0} but {} ({}x{}) to {wk}x{hk}: images of one \
                 batch must come out at one size (this model's processor has no center crop); \
                 pass --batch-size 1",
                batch[0].display(),
                imgs[0].width,
                imgs[0].height,
                batch[k].display(),
                imgs[k].width,
                imgs[k].height
            );
        }
        let span = || {
            format!(
                "embedding {} (--batch-size {})",
                names(batch),
                args.batch_size
            )
        };
        let x = processor.pixel_values(&imgs, device).with_context(span)?;
        let e = model.embed(x, args.output);
        dim = e.dims()[1];
        rows.extend(bindscope_core::device::to_host_f32(e).with_context(span)?);
        pb.inc(batch.len() as u64);
    }
    pb.finish_and_clear();
    Ok((
        files.iter().map(|f| f.display().to_string()).collect(),
        rows,
        dim,
    ))
}
