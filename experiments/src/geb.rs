//! `experiments geb …`: the Generative Embedding Benchmark's commands. `synth` writes the
//! mini-GEB (`bindscope_geb::synth`), `train` / `eval` run the generative readout
//! (`bindscope_geb::study`), `audit` checks the splits for shared images, and `score` scores a
//! prediction file made anywhere with lmms-eval 0.7.3's per-item metrics, item means and
//! percentile-bootstrap intervals (`bindscope_geb::score`). This module maps the arguments to
//! the configs.

use anyhow::Result;
use bindscope_core::run::Output;
use bindscope_core::run::RunContext;
use bindscope_geb::bootstrap;
use bindscope_geb::metrics::reasoning;
use bindscope_geb::readout::chat::Mode;
use bindscope_geb::readout::eval::Control;
use bindscope_geb::readout::train::TrainConfig;
use bindscope_geb::score::{self, ScoreConfig};
use bindscope_geb::study::Embedder;
use bindscope_geb::study::evaluate::EvalRun;
use bindscope_geb::study::train::TrainRun;
use bindscope_geb::synth::{self, SynthConfig};
use std::path::PathBuf;

/// Arguments of `experiments geb`.
#[derive(clap::Args, Debug)]
pub struct GebArgs {
    #[command(subcommand)]
    command: GebCommand,
}

#[derive(clap::Subcommand, Debug)]
enum GebCommand {
    /// Score predictions (JSONL: id, source, prediction, answers[, question, category,
    /// dataset]) with lmms-eval 0.7.3's metrics: items.jsonl, summary.json, summary.csv.
    Score(ScoreArgs),
    /// Write the seeded synthetic mini-GEB: train.json (LLaVA format), dev.jsonl and
    /// test.jsonl (GEB manifests), images/, synth.json.
    Synth(SynthArgs),
    /// Train a decoder to answer from one frozen embedding (the paper's recipe by default).
    Train(TrainArgs),
    /// Answer a manifest with a trained readout under the controls and score every condition.
    Eval(EvalArgs),
    /// Leakage audit: images shared between train, dev and test (decoded-pixel SHA-256 and a
    /// perceptual hash); prints the counts and writes audit.json with every offender.
    Audit(AuditArgs),
}

/// Arguments of `experiments geb audit`.
#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// The data directory (train.json, dev.jsonl, test.jsonl, images/).
    #[arg(long)]
    data: PathBuf,
    /// Images whose perceptual hashes (64 bits) differ in at most this many bits are reported
    /// as near-duplicates (0: identical hashes only).
    #[arg(long, default_value_t = 0)]
    max_distance: u32,
    /// Where to write the report (default: DATA/audit.json).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Whether the command trains (and so may run data-parallel on several devices).
pub fn trains(args: &GebArgs) -> bool {
    matches!(args.command, GebCommand::Train(_))
}

/// `true` for the commands that compute on a device.
pub fn needs_device(args: &GebArgs) -> bool {
    matches!(args.command, GebCommand::Train(_) | GebCommand::Eval(_))
}

/// Arguments of `experiments geb synth`.
#[derive(clap::Args, Debug)]
pub struct SynthArgs {
    /// Output directory (must not exist or be empty).
    #[arg(long)]
    out: PathBuf,
    /// Training conversations (one image each).
    #[arg(long, default_value_t = SynthConfig::default().conversations)]
    conversations: usize,
    /// Test items, split evenly over natural, scene_text and document.
    #[arg(long, default_value_t = SynthConfig::default().items)]
    items: usize,
    /// Dev items, split like the test items.
    #[arg(long, default_value_t = SynthConfig::default().dev_items)]
    dev_items: usize,
    /// Seed of every random choice.
    #[arg(long, default_value_t = SynthConfig::default().seed)]
    seed: u64,
    /// Side of the square images, pixels.
    #[arg(long, default_value_t = SynthConfig::default().image_size)]
    image_size: u32,
}

/// Where a readout's embeddings come from (`geb train`, `geb eval`).
#[derive(clap::Args, Debug, Clone)]
pub struct EmbedderArgs {
    /// A project vision encoder (directory or `org/name`); its pooled (projected) image
    /// embedding, cached under DATA/embeddings/.
    #[arg(long, conflicts_with_all = ["embeddings", "text_only"])]
    embedder: Option<String>,
    /// VL-joint with a two-tower pair: the text encoder of the question slot.
    #[arg(long, requires = "embedder")]
    text_embedder: Option<String>,
    /// Embeddings computed elsewhere: safetensors `embeddings` F32 [N, d] with header metadata
    /// `ids` (a JSON list of N strings): image paths for visual-only; for VL-joint alone, a
    /// joint embedder's rows keyed `<image>#<sha256(question)[:16]>`.
    #[arg(long, conflicts_with = "text_only")]
    embeddings: Option<PathBuf>,
    /// VL-joint with imported two-tower embeddings: the question slot's file.
    #[arg(long, requires = "embeddings")]
    question_embeddings: Option<PathBuf>,
    /// The text-only control: no embedding slot.
    #[arg(long)]
    text_only: bool,
}

impl EmbedderArgs {
    fn resolve(&self) -> Option<Embedder> {
        if self.text_only {
            return Some(Embedder::TextOnly);
        }
        if let Some(v) = &self.embedder {
            return Some(Embedder::Models {
                vision: v.clone(),
                text: self.text_embedder.clone(),
            });
        }
        self.embeddings.as_ref().map(|e| Embedder::Files {
            embeddings: e.clone(),
            questions: self.question_embeddings.clone(),
        })
    }
}

/// Arguments of `experiments geb train`.
#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// The data directory (train.json, images/).
    #[arg(long)]
    data: PathBuf,
    /// The decoder LM (Llama, Qwen2 or Qwen3 family; directory or `org/name`).
    #[arg(long)]
    decoder: String,
    /// visual-only: one image embedding, every assistant turn supervised; vl-joint: one
    /// instance per turn, the embedding of the image and the current question.
    #[arg(long, value_parser = parse_mode)]
    mode: Mode,
    #[command(flatten)]
    embedder: EmbedderArgs,
    /// Peak learning rate (cosine decay, no warmup).
    #[arg(long, default_value_t = TrainConfig::default().lr)]
    lr: f64,
    /// The adapters' own peak learning rate (LLaVA's mm_projector_lr), same schedule; unset:
    /// --lr, as in the paper.
    #[arg(long, value_parser = non_negative, allow_hyphen_values = true)]
    adapter_lr: Option<f64>,
    /// Train rank-R LoRA factors on the decoder's attention and MLP projections instead of all
    /// its weights (the paper's LoRA ablation); the embedding adapters stay fully trainable.
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u64).range(1..))]
    lora: Option<u64>,
    /// LoRA's α (the update is scaled by α/R); default 2R (LLaVA-1.5's LoRA setting).
    #[arg(long, requires = "lora", value_parser = positive, allow_hyphen_values = true)]
    lora_alpha: Option<f64>,
    /// Standardise each embedding dimension with the training embeddings' mean and standard
    /// deviation before the adapter (stored with the run, applied at evaluation; not in the
    /// paper: see the README's GEB known limit).
    #[arg(long, conflicts_with = "text_only")]
    standardize: bool,
    /// Epochs.
    #[arg(long, default_value_t = TrainConfig::default().epochs)]
    epochs: usize,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = TrainConfig::default().micro_batch)]
    micro_batch: usize,
    /// Micro-batches per optimizer step (effective batch = micro-batch × grad-accum).
    #[arg(long, default_value_t = TrainConfig::default().grad_accum)]
    grad_accum: usize,
    /// Longest sequence, tokens (longer ones are cut and counted).
    #[arg(long, default_value_t = TrainConfig::default().max_tokens)]
    max_tokens: usize,
    /// Seed of the adapters' initialisation and the data order.
    #[arg(long, default_value_t = TrainConfig::default().seed)]
    seed: u64,
    /// AdamW decoupled weight decay.
    #[arg(long, default_value_t = TrainConfig::default().adamw.weight_decay)]
    weight_decay: f32,
    /// Optimizer steps between checkpoints (0: only at the end).
    #[arg(long, default_value_t = TrainConfig::default().checkpoint_every)]
    checkpoint_every: usize,
    /// Hidden width of each adapter (the paper's is 1024).
    #[arg(long, default_value_t = bindscope_geb::readout::adapter::PAPER_HIDDEN)]
    adapter_hidden: usize,
    /// Stop after this many optimizer steps (the schedule still spans the whole run).
    #[arg(long)]
    max_steps: Option<usize>,
    /// Output directory (a run with these settings resumes; another run is refused).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a new run even if a matching one exists.
    #[arg(long)]
    fresh: bool,
}

/// Arguments of `experiments geb eval`.
#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// The `geb train` run directory.
    #[arg(long)]
    run: PathBuf,
    /// The manifest split: dev or test.
    #[arg(long, default_value = "test", value_parser = ["dev", "test"])]
    split: String,
    /// Another data directory (default: the training run's).
    #[arg(long)]
    data: Option<PathBuf>,
    #[command(flatten)]
    embedder: EmbedderArgs,
    /// Controls besides matched, comma-separated: zero, shuffled, mismatch (VL-joint), or
    /// none. Default: zero,shuffled (none for a text-only readout).
    #[arg(long, value_parser = parse_controls)]
    controls: Option<Controls>,
    /// Items per generation batch (≥ 2: the shuffled control shifts within a batch).
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Resamples of each marginal 95% interval (0: none).
    #[arg(long, default_value_t = bootstrap::MARGINAL_RESAMPLES)]
    bootstrap: usize,
    /// Resamples of each paired 95% interval (0: none).
    #[arg(long, default_value_t = bootstrap::PAIRED_RESAMPLES)]
    paired_bootstrap: usize,
    /// Bootstrap seed.
    #[arg(long, default_value_t = bootstrap::DEFAULT_SEED)]
    seed: u64,
    /// Evaluate the first N items only.
    #[arg(long)]
    limit: Option<usize>,
    /// Output directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a new run even if a matching one exists.
    #[arg(long)]
    fresh: bool,
}

/// A finite number ≥ 0 (a learning rate; 0 freezes what it applies to).
fn non_negative(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("expected a finite number ≥ 0, got '{s}'")),
    }
}

/// A finite number > 0.
fn positive(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("expected a finite number > 0, got '{s}'")),
    }
}

fn parse_mode(s: &str) -> std::result::Result<Mode, String> {
    match s {
        "visual-only" => Ok(Mode::VisualOnly),
        "vl-joint" => Ok(Mode::VlJoint),
        _ => Err(format!("'{s}': expected visual-only or vl-joint")),
    }
}

/// A parsed `--controls` list.
#[derive(Debug, Clone)]
struct Controls(Vec<Control>);

fn parse_controls(s: &str) -> std::result::Result<Controls, String> {
    if s == "none" {
        return Ok(Controls(Vec::new()));
    }
    s.split(',')
        .map(|c| match c {
            "zero" => Ok(Control::Zero),
            "shuffled" => Ok(Control::Shuffled),
            "mismatch" => Ok(Control::Mismatch),
            "matched" => Ok(Control::Matched),
            _ => Err(format!(
                "'{c}': expected zero, shuffled or mismatch (comma-separated), or none"
            )),
        })
        .collect::<std::result::Result<_, _>>()
        .map(Controls)
}

/// Arguments of `experiments geb score`.
#[derive(clap::Args, Debug)]
pub struct ScoreArgs {
    /// The prediction file: one JSON object per line with `id` (string or integer), `source`
    /// (mme, cvbench, realworldqa, ocrbench, textvqa, chartqa, docvqa, infovqa), `prediction`
    /// (string), `answers` (list of strings: the gold answer first for MME, CV-Bench,
    /// RealWorldQA and ChartQA; all ten for TextVQA; every accepted answer otherwise), and
    /// optionally `question`, `category` (natural, scene_text, document) and, for OCRBench,
    /// `dataset`. Other fields are kept in items.jsonl.
    #[arg(long)]
    predictions: PathBuf,
    /// A control prediction file on the same ids: adds the paired gap (predictions − control)
    /// and its interval.
    #[arg(long)]
    pair: Option<PathBuf>,
    /// Output directory (created; refused when it holds a different run).
    #[arg(long)]
    out: PathBuf,
    /// Resamples of each marginal 95% interval (0: no intervals).
    #[arg(long, default_value_t = bootstrap::MARGINAL_RESAMPLES)]
    bootstrap: usize,
    /// Resamples of each paired-difference 95% interval (0: no intervals).
    #[arg(long, default_value_t = bootstrap::PAIRED_RESAMPLES)]
    paired_bootstrap: usize,
    /// Bootstrap seed.
    #[arg(long, default_value_t = bootstrap::DEFAULT_SEED)]
    seed: u64,
    /// Reasoning blocks cut from each prediction before scoring, as lmms-eval's
    /// `--reasoning_tags`: a JSON list of [start, end] pairs, or `none`. Default: lmms-eval's,
    /// [["<think>", "</think>"], ["<analysis>", "</analysis>"]].
    #[arg(long, conflicts_with = "no_strip_reasoning")]
    reasoning_tags: Option<String>,
    /// Score the bare predictions (lmms-eval's `--reasoning_tags none`).
    #[arg(long)]
    no_strip_reasoning: bool,
    /// Also write the resample indices of every interval to resamples/<kind>-<group>.safetensors
    /// (`indices`, U32 [resamples, items], indices into the group's items in file order).
    #[arg(long)]
    export_resamples: bool,
}

pub fn run(args: GebArgs, ctx: &RunContext) -> Result<()> {
    match args.command {
        GebCommand::Score(a) => run_score(a, ctx),
        GebCommand::Synth(a) => run_synth(a),
        GebCommand::Train(a) => run_train(a, ctx),
        GebCommand::Eval(a) => run_eval(a, ctx),
        GebCommand::Audit(a) => run_audit(a),
    }
}

fn run_audit(a: AuditArgs) -> Result<()> {
    let r = bindscope_geb::study::audit::run(&a.data, a.max_distance, a.out.as_deref())?;
    let images: Vec<String> = r.images.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("images: {}", images.join(", "));
    for (pair, c) in &r.counts {
        println!(
            "{pair:<11} exact {:>4}  near (≤ {} bits) {:>4}",
            c.get("exact").copied().unwrap_or(0),
            r.max_distance,
            c.get("near").copied().unwrap_or(0)
        );
    }
    for o in r.overlaps.iter().take(20) {
        println!("  {} {} ~ {} (distance {})", o.kind, o.a, o.b, o.distance);
    }
    if r.overlaps.len() > 20 {
        println!("  … {} more in audit.json", r.overlaps.len() - 20);
    }
    if !r.sha256_mismatches.is_empty() {
        println!(
            "{} manifest items whose sha256 is not their file's: {}",
            r.sha256_mismatches.len(),
            r.sha256_mismatches
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!(
        "{}",
        if r.overlaps.is_empty() && r.sha256_mismatches.is_empty() {
            "no overlaps"
        } else {
            "overlaps found"
        }
    );
    Ok(())
}

fn run_synth(a: SynthArgs) -> Result<()> {
    let cfg = SynthConfig {
        conversations: a.conversations,
        items: a.items,
        dev_items: a.dev_items,
        seed: a.seed,
        image_size: a.image_size,
    };
    let summary = synth::generate(&cfg, &a.out)?;
    println!(
        "{} training conversations, {} dev and {} test items",
        summary.train.conversations, summary.dev.items, summary.test.items
    );
    println!("wrote {}", a.out.display());
    Ok(())
}

fn run_train(a: TrainArgs, ctx: &RunContext) -> Result<()> {
    let embedder = a.embedder.resolve().ok_or_else(|| {
        anyhow::anyhow!("name the embeddings: --embedder MODEL, --embeddings FILE or --text-only")
    })?;
    let mut cfg = TrainRun::new(a.data, a.decoder, a.mode, embedder);
    cfg.recipe = TrainConfig {
        lr: a.lr,
        epochs: a.epochs,
        micro_batch: a.micro_batch,
        grad_accum: a.grad_accum,
        max_tokens: a.max_tokens,
        seed: a.seed,
        adamw: bindscope_core::train::AdamW {
            weight_decay: a.weight_decay,
            ..TrainConfig::default().adamw
        },
        checkpoint_every: a.checkpoint_every,
        adapter_lr: a.adapter_lr,
        lora: a.lora.map(|r| bindscope_tuning::lora::LoraConfig {
            rank: r as usize,
            alpha: a.lora_alpha.unwrap_or(2.0 * r as f64),
            seed: a.seed,
        }),
    };
    cfg.adapter_hidden = a.adapter_hidden;
    cfg.max_steps = a.max_steps;
    cfg.standardize = a.standardize;
    let r = bindscope_geb::study::train::run(&cfg, &Output::new(a.out, a.fresh), ctx)?;
    if !r.skipped.is_empty() {
        println!(
            "{} sequences left out (no supervised token within --max-tokens): {}{}",
            r.skipped.len(),
            r.skipped
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            if r.skipped.len() > 20 { ", …" } else { "" }
        );
    }
    println!(
        "{} steps over {} sequences ({} truncated), {:.3} s/step, last loss {}",
        r.steps,
        r.sequences,
        r.truncated.len(),
        r.seconds_per_step,
        r.last_loss.map_or("-".into(), |l| format!("{l:.4}"))
    );
    println!("wrote {}", r.dir.display());
    Ok(())
}

fn run_eval(a: EvalArgs, ctx: &RunContext) -> Result<()> {
    let cfg = EvalRun {
        run: a.run,
        split: a.split,
        data: a.data,
        embedder: a.embedder.resolve(),
        controls: a.controls.map(|c| c.0),
        batch: a.batch,
        resamples: a.bootstrap,
        paired_resamples: a.paired_bootstrap,
        seed: a.seed,
        limit: a.limit,
    };
    let r = bindscope_geb::study::evaluate::run(&cfg, &Output::new(a.out, a.fresh), ctx)?;
    let ci = |c: Option<[f64; 2]>| c.map_or(String::new(), |[l, h]| format!(" [{l:.1}, {h:.1}]"));
    for c in &r.conditions {
        print!(
            "{:<9} {:>5} items  {:6.2}%{}",
            c.control.name(),
            c.items,
            c.score,
            ci(c.ci95)
        );
        if let Some(g) = c.gap {
            print!(
                "   matched − {}: {:+.2} pp{}",
                c.control.name(),
                g.matched_minus_control_pp,
                ci(g.ci95)
            );
        }
        println!();
    }
    if r.shuffled_same_image > 0 {
        println!(
            "shuffled: {} items still received an embedding of their own image (a batch of one, or neighbours sharing an image)",
            r.shuffled_same_image
        );
    }
    if !r.mismatch_left_out.is_empty() {
        println!(
            "mismatch: {} items left out (no other question about their image)",
            r.mismatch_left_out.len()
        );
    }
    println!(
        "{:.3} s per item; wrote {}",
        r.seconds_per_item,
        r.dir.display()
    );
    Ok(())
}

fn run_score(args: ScoreArgs, ctx: &RunContext) -> Result<()> {
    let reasoning_tags = if args.no_strip_reasoning {
        None
    } else {
        match &args.reasoning_tags {
            Some(v) => reasoning::parse_tags(v).map_err(anyhow::Error::msg)?,
            None => Some(reasoning::default_tags()),
        }
    };
    let config = ScoreConfig {
        pair: args.pair,
        resamples: args.bootstrap,
        paired_resamples: args.paired_bootstrap,
        seed: args.seed,
        reasoning_tags,
        export_resamples: args.export_resamples,
        ..ScoreConfig::new(args.predictions, args.out)
    };
    let report = score::run(&config, ctx)?;
    print!("{}", score::table(&report.summary));
    println!("wrote {}", report.dir.display());
    Ok(())
}
