//! `experiments geb score`: score a prediction file made anywhere with lmms-eval 0.7.3's
//! per-item metrics, item means and percentile-bootstrap intervals. The run is
//! `bindscope_geb::score`; this module maps the arguments to its config.

use anyhow::Result;
use bindscope_core::run::RunContext;
use bindscope_geb::bootstrap;
use bindscope_geb::metrics::reasoning;
use bindscope_geb::score::{self, ScoreConfig};
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
    }
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
