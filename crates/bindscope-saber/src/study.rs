//! The SABER runs of `experiments saber`: [`generate`] writes the benchmark files, [`eval`]
//! evaluates an encoder into a run directory ([`crate::report`]).
//!
//! `generate` writes `saber.jsonl` (the MCQ items), `prompts.jsonl` (the images to render) and
//! `manifest.json` (generator, counts, sha256 of the items, vocabulary, provenance) into
//! [`Output::dir`] (default `runs/saber/data-seed<SEED>`). `eval` reads and validates items
//! ([`EvalConfig::items`]) or generates them in memory, embeds them (and, with
//! [`EvalConfig::images`], the rendered images), scores every pairing that can run and writes
//! `runs/saber/<model>-<timestamp>/` (or [`Output::dir`]). Rows of `data` that break a rule are
//! rejected with their line number and rule, listed in `results.json` and counted;
//! [`EvalConfig::strict`] makes any rejection fatal.

use crate::embed::{ImageCoverage, embed_item_images, embed_items_text, tokenizer_for};
use crate::eval::{EvalOutput, PairingResults, Tables, evaluate};
use crate::generate::{GenerateConfig, McqItem, generate as generate_items, prompts};
use crate::jsonl::{read_items, write_items, write_prompts};
use crate::report::{InputSummary, write_run};
use crate::vocab::Vocabulary;
use anyhow::{Context, Result, bail};
use bindscope_core::options::Dtype;
use bindscope_core::run::{
    Output, RunContext, new_run_dir, progress, runs_root, slug, timestamp, write_json,
};
use bindscope_data::image::ImageProcessor;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::time::Instant;

/// What [`generate`] wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GenerateReport {
    /// The output directory.
    pub dir: PathBuf,
    /// MCQ items.
    pub items: usize,
    /// Candidates (four per item).
    pub candidates: usize,
    /// Rows of `prompts.jsonl` (images to render).
    pub prompts: usize,
    /// sha256 of `saber.jsonl` as [`items_sha256`] computes it.
    pub saber_jsonl_sha256: String,
}

/// sha256 of the items as `saber.jsonl` lines (compact JSON, one `\n` after each).
///
/// # Errors
/// An item that does not serialize.
pub fn items_sha256(items: &[McqItem]) -> Result<String> {
    let mut h = Sha256::new();
    for it in items {
        h.update(serde_json::to_string(it)?.as_bytes());
        h.update(b"\n");
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Generates the benchmark of `config` with the built-in vocabulary and writes its files.
/// Computes nothing on a device (the manifest has no device record).
///
/// The output directory must be new, empty, or hold the benchmark of this very `config`
/// (checked before generating; another seed's benchmark is never overwritten).
///
/// # Errors
/// A generator that cannot satisfy its constraints, no item to generate (`--independent` and
/// `--chains` both 0), an output directory holding another benchmark or other files, or a
/// failed write.
pub fn generate(
    config: &GenerateConfig,
    output: &Output,
    ctx: &RunContext,
) -> Result<GenerateReport> {
    let out = output
        .dir
        .clone()
        .unwrap_or_else(|| runs_root("saber").join(format!("data-seed{}", config.seed)));
    if config.independent_per_n == 0 && config.chains == 0 {
        bail!("--independent and --chains are both 0: no item to generate");
    }
    check_generate_out(&out, config)?;
    let vocab = Vocabulary::builtin();
    let t0 = Instant::now();
    let items = generate_items(&vocab, config)?;
    if items.is_empty() {
        bail!("--independent and --chains are both 0: no item to generate");
    }
    let rows = prompts(&items, config.seed);
    write_items(&out.join("saber.jsonl"), &items)?;
    write_prompts(&out.join("prompts.jsonl"), &rows)?;
    let [standalone, single, two, variant] = vocab.kind_counts();
    let candidates = items.iter().map(|i| i.candidates.len()).sum::<usize>();
    let sha = items_sha256(&items)?;
    let manifest = serde_json::json!({
        "benchmark": "SABER",
        "generator": config,
        "items": items.len(),
        "candidates": candidates,
        "images_to_render": rows.len(),
        "saber_jsonl_sha256": sha,
        "vocabulary": {
            "objects": vocab.objects.len(),
            "attributes": vocab.attributes.len(),
            "attribute_types": {"standalone": standalone, "single-color": single, "two-color": two, "fixed-variant": variant},
            "palette": vocab.palette,
        },
        "prompts": "render each row of prompts.jsonl, mirror it left-right when hflip is true, save it as <id>.png in one folder, pass that folder to `saber eval --images`",
    });
    write_json(
        &out.join("manifest.json"),
        &ctx.config_json_no_device(manifest),
    )?;
    eprintln!(
        "wrote {} items ({} candidates) and {} prompts to {} in {:.1}s",
        items.len(),
        items.len() * 4,
        rows.len(),
        out.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(GenerateReport {
        dir: out,
        items: items.len(),
        candidates,
        prompts: rows.len(),
        saber_jsonl_sha256: sha,
    })
}

/// Checks that `generate` may write into `out`: a new or empty directory, or one holding the
/// benchmark of this very generator configuration (written again, byte for byte the same).
/// Another generator's benchmark (another `--seed`, other sizes) or files that are not a
/// benchmark are never overwritten.
///
/// # Errors
/// `out` holds another generator's benchmark (the differing settings named), is not a
/// directory, or is a non-empty directory without `manifest.json`.
fn check_generate_out(out: &std::path::Path, config: &GenerateConfig) -> Result<()> {
    if !out.exists() {
        return Ok(());
    }
    if !out.is_dir() {
        bail!("--out {}: not a directory", out.display());
    }
    let manifest = out.join("manifest.json");
    if manifest.is_file() {
        let m: serde_json::Value = bindscope_core::run::read_json(&manifest)?;
        let there = m.get("generator").cloned().unwrap_or_default();
        let now = serde_json::to_value(config)?;
        if there != now {
            bail!(
                "{} holds the SABER benchmark of another generator ({}); nothing was overwritten: choose another --out or remove it",
                out.display(),
                bindscope_core::run::describe_difference(&there, &now)
            );
        }
        return Ok(());
    }
    let mut entries =
        std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))?;
    if entries.next().is_some() {
        bail!(
            "{} exists, is not empty and holds no manifest.json (not a SABER benchmark); nothing was overwritten: choose another --out",
            out.display()
        );
    }
    Ok(())
}

/// Everything that decides the numbers of a SABER evaluation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EvalConfig {
    /// Hugging Face id or local checkpoint directory.
    pub model: String,
    /// The MCQ items.
    pub items: Items,
    /// Folder of rendered images `<caption id>.png|jpg|jpeg|webp`: adds the text→image,
    /// image→text and image→image pairings (the model needs a vision tower).
    pub images: Option<PathBuf>,
    /// `tokenizer.json` instead of the checkpoint's.
    pub tokenizer: Option<PathBuf>,
    /// Maximum tokens per text (`None`: [`tokenizer_for`]'s default).
    pub max_length: Option<usize>,
    /// Texts / images per forward pass (changes no number).
    pub batch_size: usize,
    /// Fail when any row of `data` is rejected.
    pub strict: bool,
    /// The float type of the weights.
    pub dtype: Dtype,
    /// The architecture of a PyTorch pickle without `config.json` (`--arch`,
    /// [`bindscope_core::LoadOptions::arch`]); `None` reads it off the keys.
    #[serde(default)]
    pub arch: Option<String>,
}

/// Where the items of an evaluation come from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Items {
    /// A `saber.jsonl` (or a directory holding one), every row validated
    /// ([`crate::jsonl::read_items`]).
    Data(PathBuf),
    /// Generated in memory with the built-in vocabulary.
    Generated(GenerateConfig),
}

/// Wall times of an evaluation, in seconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Timings {
    /// Resolving, hashing and loading the text encoder.
    pub load_model: f64,
    /// Embedding the unique texts.
    pub embed_texts: f64,
    /// Embedding the images (0 without images).
    pub embed_images: f64,
    /// Scoring.
    pub evaluate: f64,
    /// The whole run.
    pub total: f64,
}

/// What [`eval`] computed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EvalReport {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Where the items came from, what was rejected, image coverage.
    pub input: InputSummary,
    /// Every pairing that ran, per `N` and overall.
    pub pairings: Vec<PairingResults>,
    /// Wall times.
    pub timings: Timings,
}

/// Reads (or generates) the items of `config`, returning them with their input summary and
/// the generator used (`None` for read items).
fn load_items(config: &EvalConfig) -> Result<(Vec<McqItem>, InputSummary, Option<GenerateConfig>)> {
    let p = match &config.items {
        Items::Data(p) => p,
        Items::Generated(cfg) => {
            let cfg = cfg.clone();
            let items = generate_items(&Vocabulary::builtin(), &cfg)?;
            let input = InputSummary {
                source: format!("generated in memory (seed {})", cfg.seed),
                rows: items.len(),
                accepted: items.len(),
                rejected_count: 0,
                rejected: Vec::new(),
                images: None,
            };
            return Ok((items, input, Some(cfg)));
        }
    };
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
        if config.strict {
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
    Ok((read.items, input, None))
}

/// Scores every pairing the tables allow; when the image and text embeddings live in
/// different spaces, text→text and image→image separately.
fn score(
    items: &[McqItem],
    texts: &crate::embed::EmbeddingTable,
    images: Option<&crate::embed::EmbeddingTable>,
) -> EvalOutput {
    let cross_ok = images.is_some_and(|i| i.dim() == texts.dim());
    if images.is_some() && !cross_ok {
        let mut o = evaluate(
            items,
            Tables {
                text: Some(texts),
                image: None,
            },
        );
        let img = evaluate(
            items,
            Tables {
                text: None,
                image: images,
            },
        );
        o.pairings.extend(img.pairings);
        o.rows.extend(img.rows);
        o
    } else {
        evaluate(
            items,
            Tables {
                text: Some(texts),
                image: images,
            },
        )
    }
}

/// Evaluates the encoder of `config` on `ctx`'s device and writes its run directory; prints
/// each pairing's table on stdout, progress on stderr.
///
/// # Errors
/// `--batch-size` 0, unreadable or (with `strict`) rejected data, a model or tokenizer that
/// does not load, an images folder that is not a directory or a model without a preprocessor
/// or vision tower for it, a failed computation or write.
pub fn eval(config: &EvalConfig, output: &Output, ctx: &RunContext) -> Result<EvalReport> {
    if config.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let device = &ctx.device;
    let t_start = Instant::now();
    let (items, mut input, gen_cfg) = load_items(config)?;

    let opts = bindscope_core::LoadOptions {
        arch: config.arch.clone(),
        ..config.dtype.load_options()
    };
    let t_load = Instant::now();
    let opened = bindscope_models::registry::open_text(&config.model, device, &opts)?;
    let load_s = t_load.elapsed().as_secs_f64();
    let (ckpt, text_model) = (&opened.checkpoint, opened.model.as_ref());
    let tok = tokenizer_for(ckpt, config.tokenizer.as_deref(), config.max_length)?;
    // --images is checked before any embedding: a bad folder or a model without a processor
    // fails at once, not after the texts.
    let processor = match &config.images {
        None => None,
        Some(dir) => {
            if !dir.is_dir() {
                bail!("--images {}: not a directory", dir.display());
            }
            Some(
                ImageProcessor::for_checkpoint(ckpt)
                    .context("--images: cannot preprocess images for this model")?,
            )
        }
    };

    let t_text = Instant::now();
    let pb = progress(0, "texts");
    let texts = embed_items_text(
        &items,
        &tok,
        text_model,
        device,
        config.batch_size,
        &mut |done, total| {
            pb.set_length(total as u64);
            pb.set_position(done as u64);
        },
    )?;
    pb.finish_and_clear();
    let text_s = t_text.elapsed().as_secs_f64();
    eprintln!("embedded {} unique texts in {text_s:.1}s", texts.len());

    let mut image_s = 0.0;
    let images = match (&config.images, &processor) {
        (Some(dir), Some(processor)) => {
            let vision = bindscope_models::registry::load_vision(ckpt, device, &opts)
                .context("--images needs a model with a vision tower (CLIP, SigLIP) in the text embeddings' space")?;
            let t_img = Instant::now();
            let pb = progress(0, "images");
            let (table, cov) = embed_item_images(
                &items,
                dir,
                processor,
                vision.as_ref(),
                device,
                config.batch_size,
                &mut |done, total| {
                    pb.set_length(total as u64);
                    pb.set_position(done as u64);
                },
            )?;
            pb.finish_and_clear();
            image_s = t_img.elapsed().as_secs_f64();
            report_coverage(&cov, image_s);
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
        _ => None,
    };

    let t_eval = Instant::now();
    let out = score(&items, &texts, images.as_ref());
    let eval_s = t_eval.elapsed().as_secs_f64();

    let model_slug = slug(&config.model);
    let dir = match &output.dir {
        Some(d) => d.clone(),
        None => new_run_dir("saber", &format!("{model_slug}-{}", timestamp()))?,
    };
    let record = serde_json::json!({
        "study": "saber",
        "identity": config,
        "command": std::env::args().collect::<Vec<_>>(),
        "model": config.model,
        "model_slug": model_slug,
        "weights_sha256": opened.weights_sha256,
        "text_model": text_model.info(),
        "weights": ckpt.weights.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "tokenizer": tok.path().display().to_string(),
        "tokenizer_policy": tok.policy(),
        "dtype": config.dtype,
        "data": match &config.items {
            Items::Data(p) => Some(p.display().to_string()),
            Items::Generated(_) => None,
        },
        "generator": gen_cfg,
        "items": items.len(),
        "items_sha256": items_sha256(&items)?,
        "images": config.images.as_ref().map(|p| p.display().to_string()),
        "batch_size": config.batch_size,
        "scoring": "cosine similarity of L2-normalised embeddings (text: the model's sentence embedding; image: pooled readout)",
    });
    let record = ctx.config_json(record);
    let timings = Timings {
        load_model: load_s,
        embed_texts: text_s,
        embed_images: image_s,
        evaluate: eval_s,
        total: t_start.elapsed().as_secs_f64(),
    };
    write_run(&dir, &record, &input, &out, &serde_json::to_value(timings)?)?;
    print_tables(&out.pairings);
    println!("wrote {} ({:.1}s)", dir.display(), timings.total);
    Ok(EvalReport {
        run_dir: dir,
        input,
        pairings: out.pairings,
        timings,
    })
}

fn report_coverage(cov: &ImageCoverage, seconds: f64) {
    for (id, e) in &cov.unreadable {
        eprintln!("unreadable image for {id}: {e}");
    }
    eprintln!(
        "images: {} embedded, {} missing, {} unreadable ({seconds:.1}s)",
        cov.embedded,
        cov.missing,
        cov.unreadable.len()
    );
}

/// Each pairing's headline numbers per `N` and overall, on stdout.
fn print_tables(pairings: &[PairingResults]) {
    let pct =
        |x: Option<f64>| x.map_or_else(|| "     -".to_string(), |v| format!("{:6.1}%", 100.0 * v));
    for p in pairings {
        println!("{} ({} items, gallery {}):", p.pairing, p.items, p.gallery);
        println!("   N   MCQ acc   mAP ind   mAP nested   subset>exact   superset>exact");
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use bindscope_core::run::BuildInfo;

    fn ctx() -> RunContext {
        const BUILD: BuildInfo = BuildInfo {
            version: "0.0.0",
            git_commit: "test",
            git_dirty: None,
            dependencies: &[],
        };
        RunContext::new(burn::tensor::Device::flex(), "cpu", BUILD)
    }

    #[test]
    fn generate_writes_the_benchmark_and_reports_it() {
        let dir = tempfile::tempdir().unwrap();
        let out = Output {
            dir: Some(dir.path().join("data")),
            fresh: false,
        };
        let config = GenerateConfig {
            seed: 3,
            n_min: 2,
            n_max: 3,
            independent_per_n: 2,
            chains: 1,
        };
        let r = generate(&config, &out, &ctx()).unwrap();
        assert_eq!(r.items, 2 * 2 + 2);
        assert_eq!(r.candidates, 4 * r.items);
        let manifest: serde_json::Value =
            bindscope_core::run::read_json(&r.dir.join("manifest.json")).unwrap();
        assert_eq!(manifest["generator"]["seed"], 3);
        assert_eq!(
            manifest["saber_jsonl_sha256"],
            r.saber_jsonl_sha256.as_str()
        );
        assert!(manifest.get("device").is_none(), "generate uses no device");
        let read = read_items(&r.dir.join("saber.jsonl")).unwrap();
        assert_eq!(items_sha256(&read.items).unwrap(), r.saber_jsonl_sha256);
        let none = GenerateConfig {
            independent_per_n: 0,
            chains: 0,
            ..config
        };
        let e = generate(&none, &out, &ctx()).unwrap_err();
        assert!(e.to_string().contains("no item to generate"), "{e}");
    }

    #[test]
    fn items_are_tagged_by_source() {
        let v = serde_json::to_value(Items::Data("a/saber.jsonl".into())).unwrap();
        assert_eq!(v, serde_json::json!({"data": "a/saber.jsonl"}));
        let g = Items::Generated(GenerateConfig::default());
        let v = serde_json::to_value(&g).unwrap();
        assert_eq!(v["generated"]["n_max"], 10);
        assert_eq!(serde_json::from_value::<Items>(v).unwrap(), g);
    }
}
