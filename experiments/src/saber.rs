//! `experiments saber`: the SABER attribute–object binding benchmark (crate `bindscope-saber`).
//!
//! ```text
//! # the benchmark files: saber.jsonl (1,800 MCQ items), prompts.jsonl (9,000 images to render), manifest.json
//! cargo run --release -p experiments -- saber generate --seed 42 --out runs/saber/data-seed42
//! # evaluate a text encoder (text→text); items generated in memory with --seed unless --data is given
//! cargo run --release -p experiments -- saber eval --model /path/to/all-MiniLM-L6-v2
//! # with rendered images (DIR/<caption id>.png): text→image, image→text, image→image as well
//! cargo run --release -p experiments -- saber eval --model openai/clip-vit-base-patch32 --data runs/saber/data-seed42 --images DIR
//! ```
//!
//! `eval` writes `runs/saber/<model>-<timestamp>/` (or `--out`): `config.json`, `results.json`,
//! `per_n.csv`, `items.jsonl` (see `bindscope_saber::report`). Rows of `--data` that break a
//! rule are rejected with their line number and rule, listed in `results.json` and counted;
//! `--strict` makes any rejection fatal.

use crate::common::{self, ModelOpts};
use anyhow::{Context, Result, bail};
use bindscope_saber::embed::{embed_item_images, embed_items_text, tokenizer_for};
use bindscope_saber::eval::{Tables, evaluate};
use bindscope_saber::generate::{GenerateConfig, McqItem, generate, prompts};
use bindscope_saber::jsonl::{read_items, write_items, write_prompts};
use bindscope_saber::report::{InputSummary, write_run};
use bindscope_saber::vocab::Vocabulary;
use burn::tensor::Device;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `experiments saber`.
#[derive(clap::Args, Debug)]
pub struct SaberArgs {
    #[command(subcommand)]
    command: SaberCommand,
}

#[derive(clap::Subcommand, Debug)]
enum SaberCommand {
    /// Generate the benchmark: saber.jsonl, prompts.jsonl (text-to-image), manifest.json.
    Generate(GenerateArgs),
    /// Evaluate an encoder: MCQ accuracy, gallery mAP, containment, per N.
    Eval(EvalArgs),
}

/// The generator's size options (defaults: the benchmark of issue 6).
#[derive(clap::Args, Debug, Clone)]
struct SizeArgs {
    /// Master seed of the generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Smallest number of bindings.
    #[arg(long, default_value_t = 2)]
    n_min: usize,
    /// Largest number of bindings.
    #[arg(long, default_value_t = 10)]
    n_max: usize,
    /// Independently sampled items per N.
    #[arg(long, default_value_t = 100)]
    independent: usize,
    /// Nested chains (one item per N each).
    #[arg(long, default_value_t = 100)]
    chains: usize,
}

impl SizeArgs {
    fn config(&self) -> GenerateConfig {
        GenerateConfig {
            seed: self.seed,
            n_min: self.n_min,
            n_max: self.n_max,
            independent_per_n: self.independent,
            chains: self.chains,
        }
    }
}

#[derive(clap::Args, Debug)]
struct GenerateArgs {
    #[command(flatten)]
    size: SizeArgs,
    /// Output directory (default runs/saber/data-seed<SEED>).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct EvalArgs {
    /// Hugging Face id or local checkpoint directory.
    #[arg(long)]
    model: String,
    /// A saber.jsonl (or a directory holding one) from `saber generate` or elsewhere; without
    /// it the items are generated in memory from the size options.
    #[arg(long)]
    data: Option<PathBuf>,
    #[command(flatten)]
    size: SizeArgs,
    /// Folder of rendered images named <caption id>.png|jpg|jpeg|webp: adds the text→image,
    /// image→text and image→image pairings (the model needs a vision tower).
    #[arg(long)]
    images: Option<PathBuf>,
    /// tokenizer.json to use instead of the checkpoint's.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Maximum tokens per text (default: sentence_bert_config.json's max_seq_length when the
    /// checkpoint has one, else the model's maximum).
    #[arg(long)]
    max_length: Option<usize>,
    /// Texts / images per forward pass.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Fail when any row of --data is rejected (default: evaluate the valid rows and report the
    /// rejected ones).
    #[arg(long)]
    strict: bool,
    /// Run directory (default runs/saber/<model>-<timestamp>).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    model_opts: ModelOpts,
}

/// Whether the subcommand computes on a device (`generate` only writes data files).
pub fn needs_device(args: &SaberArgs) -> bool {
    !matches!(args.command, SaberCommand::Generate(_))
}

pub fn run(args: SaberArgs, device: &Device, device_spec: &str) -> Result<()> {
    match args.command {
        SaberCommand::Generate(a) => run_generate(a),
        SaberCommand::Eval(a) => run_eval(a, device, device_spec),
    }
}

fn items_sha256(items: &[McqItem]) -> Result<String> {
    let mut h = Sha256::new();
    for it in items {
        h.update(serde_json::to_string(it)?.as_bytes());
        h.update(b"\n");
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn run_generate(a: GenerateArgs) -> Result<()> {
    let cfg = a.size.config();
    let out = a
        .out
        .unwrap_or_else(|| common::runs_root("saber").join(format!("data-seed{}", cfg.seed)));
    let vocab = Vocabulary::builtin();
    let t0 = Instant::now();
    let items = generate(&vocab, &cfg)?;
    if items.is_empty() {
        bail!("--independent and --chains are both 0: no item to generate");
    }
    let rows = prompts(&items, cfg.seed);
    write_items(&out.join("saber.jsonl"), &items)?;
    write_prompts(&out.join("prompts.jsonl"), &rows)?;
    let [standalone, single, two, variant] = vocab.kind_counts();
    let manifest = serde_json::json!({
        "benchmark": "SABER",
        "generator": cfg,
        "items": items.len(),
        "candidates": items.iter().map(|i| i.candidates.len()).sum::<usize>(),
        "images_to_render": rows.len(),
        "saber_jsonl_sha256": items_sha256(&items)?,
        "vocabulary": {
            "objects": vocab.objects.len(),
            "attributes": vocab.attributes.len(),
            "attribute_types": {"standalone": standalone, "single-color": single, "two-color": two, "fixed-variant": variant},
            "palette": vocab.palette,
        },
        "prompts": "render each row of prompts.jsonl, mirror it left-right when hflip is true, save it as <id>.png in one folder, pass that folder to `saber eval --images`",
    });
    let manifest = common::config_json(manifest, None);
    common::write_json(&out.join("manifest.json"), &manifest)?;
    eprintln!(
        "wrote {} items ({} candidates) and {} prompts to {} in {:.1}s",
        items.len(),
        items.len() * 4,
        rows.len(),
        out.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn run_eval(a: EvalArgs, device: &Device, device_spec: &str) -> Result<()> {
    if a.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let t_start = Instant::now();
    // Items: read and validated, or generated.
    let (items, input, gen_cfg) = match &a.data {
        Some(p) => {
            let file = if p.is_dir() {
                p.join("saber.jsonl")
            } else {
                p.clone()
            };
            let read = read_items(&file)?;
            for r in &read.rejected {
                eprintln!("{}: rejected {r}", file.display());
            }
            if !read.rejected.is_empty() {
                eprintln!(
                    "{}: {} of {} rows rejected (listed above and in results.json)",
                    file.display(),
                    read.rejected.len(),
                    read.rows
                );
                if a.strict {
                    bail!(
                        "{}: {} rejected row(s) and --strict",
                        file.display(),
                        read.rejected.len()
                    );
                }
            }
            if read.items.is_empty() {
                bail!("{}: no valid items", file.display());
            }
            let input = InputSummary {
                source: file.display().to_string(),
                rows: read.rows,
                accepted: read.items.len(),
                rejected_count: read.rejected.len(),
                rejected: read.rejected,
                images: None,
            };
            (read.items, input, None)
        }
        None => {
            let cfg = a.size.config();
            let items = generate(&Vocabulary::builtin(), &cfg)?;
            let input = InputSummary {
                source: format!("generated in memory (seed {})", cfg.seed),
                rows: items.len(),
                accepted: items.len(),
                rejected_count: 0,
                rejected: Vec::new(),
                images: None,
            };
            (items, input, Some(cfg))
        }
    };
    let mut input = input;

    let ckpt = common::resolve(&a.model)?;
    let opts = a.model_opts.load_options();
    let tok = tokenizer_for(&ckpt, a.tokenizer.as_deref(), a.max_length)?;
    let t_load = Instant::now();
    let text_model = bindscope_models::registry::load_text(&ckpt, device, &opts)?;
    let load_s = t_load.elapsed().as_secs_f64();

    let t_text = Instant::now();
    let pb = common::progress(0, "texts");
    let texts = embed_items_text(
        &items,
        &tok,
        text_model.as_ref(),
        device,
        a.batch_size,
        &mut |done, total| {
            pb.set_length(total as u64);
            pb.set_position(done as u64);
        },
    )?;
    pb.finish_and_clear();
    let text_s = t_text.elapsed().as_secs_f64();
    eprintln!("embedded {} unique texts in {text_s:.1}s", texts.len());

    let mut image_s = 0.0;
    let images = match &a.images {
        None => None,
        Some(dir) => {
            if !dir.is_dir() {
                bail!("--images {}: not a directory", dir.display());
            }
            let pp = ckpt.preprocessor_config.as_ref().with_context(|| {
                format!(
                    "{}: no preprocessor_config.json: cannot preprocess images for this model",
                    ckpt.dir().display()
                )
            })?;
            let processor = bindscope_data::image::ImageProcessor::from_file(pp)?;
            let vision = bindscope_models::registry::load_vision(&ckpt, device, &opts)
                .context("--images needs a model with a vision tower (CLIP, SigLIP) in the text embeddings' space")?;
            let t_img = Instant::now();
            let pb = common::progress(0, "images");
            let (table, cov) = embed_item_images(
                &items,
                dir,
                &processor,
                vision.as_ref(),
                device,
                a.batch_size,
                &mut |done, total| {
                    pb.set_length(total as u64);
                    pb.set_position(done as u64);
                },
            )?;
            pb.finish_and_clear();
            image_s = t_img.elapsed().as_secs_f64();
            for (id, e) in &cov.unreadable {
                eprintln!("unreadable image for {id}: {e}");
            }
            eprintln!(
                "images: {} embedded, {} missing, {} unreadable ({image_s:.1}s)",
                cov.embedded,
                cov.missing,
                cov.unreadable.len()
            );
            if table.is_empty() {
                eprintln!(
                    "no usable image in {}: image pairings skipped",
                    dir.display()
                );
            } else if table.dim() != texts.dim() {
                eprintln!(
                    "image embeddings have dimension {} and text embeddings {}: only image->image can run",
                    table.dim(),
                    texts.dim()
                );
            }
            input.images = Some(cov);
            Some(table)
        }
    };

    let t_eval = Instant::now();
    let cross_ok = images.as_ref().is_some_and(|i| i.dim() == texts.dim());
    let out = if images.is_some() && !cross_ok {
        // Different spaces: text->text and image->image separately.
        let mut o = evaluate(
            &items,
            Tables {
                text: Some(&texts),
                image: None,
            },
        );
        let img = evaluate(
            &items,
            Tables {
                text: None,
                image: images.as_ref(),
            },
        );
        o.pairings.extend(img.pairings);
        o.rows.extend(img.rows);
        o
    } else {
        evaluate(
            &items,
            Tables {
                text: Some(&texts),
                image: images.as_ref(),
            },
        )
    };
    let eval_s = t_eval.elapsed().as_secs_f64();

    let slug = common::slug(&a.model);
    let dir = a.out.clone().unwrap_or_else(|| {
        common::runs_root("saber").join(format!("{slug}-{}", common::timestamp()))
    });
    let config = serde_json::json!({
        "study": "saber",
        "command": std::env::args().collect::<Vec<_>>(),
        "model": a.model,
        "model_slug": slug,
        "text_model": text_model.info(),
        "weights": ckpt.weights.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "tokenizer": tok.path().display().to_string(),
        "tokenizer_policy": tok.policy(),
        "dtype": a.model_opts.dtype,
        "data": a.data.as_ref().map(|p| p.display().to_string()),
        "generator": gen_cfg,
        "items": items.len(),
        "items_sha256": items_sha256(&items)?,
        "images": a.images.as_ref().map(|p| p.display().to_string()),
        "batch_size": a.batch_size,
        "scoring": "cosine similarity of L2-normalised embeddings (text: the model's sentence embedding; image: pooled readout)",
    });
    let config = common::config_json(config, Some((device_spec, device)));
    let total_s = t_start.elapsed().as_secs_f64();
    let timings = serde_json::json!({
        "load_model": load_s, "embed_texts": text_s, "embed_images": image_s, "evaluate": eval_s, "total": total_s,
    });
    write_run(&dir, &config, &input, &out, &timings)?;

    for p in &out.pairings {
        println!("{} ({} items, gallery {}):", p.pairing, p.items, p.gallery);
        println!("   N   MCQ acc   mAP ind   mAP nested   subset>exact   superset>exact");
        let pct = |x: Option<f64>| {
            x.map_or_else(|| "     -".to_string(), |v| format!("{:6.1}%", 100.0 * v))
        };
        for b in p.by_n.iter().chain([&p.overall]) {
            let n = b.n.map_or_else(|| "all".to_string(), |n| n.to_string());
            println!(
                "{n:>4}   {}   {}   {}      {}         {}",
                pct(b.mcq.accuracy),
                pct(b.retrieval_independent.map),
                pct(b.retrieval_nested.map),
                pct(b.containment.subset.pair_rate),
                pct(b.containment.superset.pair_rate),
            );
        }
    }
    println!("wrote {} ({total_s:.1}s)", dir.display());
    Ok(())
}
