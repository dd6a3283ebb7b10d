//! `experiments cooco …`: the COOCO study's commands. `run` is the study with LLaVA-OneVision
//! (`bindscope_cooco::run`); `prepare` writes the study's prepared images (resized, padded,
//! noised) and the region prompts of one model family (`bindscope_cooco::run_prepare`), so any
//! other model's answers can be scored (`score`, `bindscope_cooco::score`); `attention` and
//! `lme` are the analyses. This module maps the arguments to the configs.

use anyhow::Result;
use bindscope_cooco::prepare::NoiseArea;
use bindscope_cooco::prompt::Family;
use bindscope_cooco::run::RunConfig;
use bindscope_cooco::score::{ScoreConfig, run_score};
use bindscope_cooco::{PrepareConfig, run_prepare};
use bindscope_core::run::RunContext;
use std::path::PathBuf;

/// Arguments of `experiments cooco`.
#[derive(clap::Args, Debug)]
pub struct CoocoArgs {
    #[command(subcommand)]
    command: CoocoCommand,
}

#[derive(clap::Subcommand, Debug)]
enum CoocoCommand {
    /// The study: LLaVA-OneVision names the object in the box of every image under every
    /// noise condition (greedy, at most 10 tokens, the checkpoint's chat template); the answers
    /// are scored with CLIP, aggregated with bootstrap intervals and plotted; the attention
    /// allocation (App. C) is measured per vision layer. Resumes an interrupted run.
    Run(RunArgs),
    /// The attention-allocation report of a finished run (attention.csv, attention_<area>.svg)
    /// from its items.jsonl.
    Attention(AttentionArgs),
    /// Prepare every image for one noise condition: OUT/images/*.png (resized to at most 640
    /// wide with Lanczos, padded to a grey square, noised) and OUT/prompts.jsonl (image,
    /// prepared, family, prompt, box, box_normalized, size, area, level, scene, target,
    /// expected, rel_level).
    Prepare(PrepareArgs),
    /// Score predictions made by any model (JSONL: image, prediction, target, scene,
    /// references) with a CLIP checkpoint: CLIPScore, RefCLIPScore, text similarity to the
    /// target and the scene, accuracy (CLIP and Levenshtein): OUT/items.jsonl, OUT/summary.json.
    Score(ScoreArgs),
    /// The output–scene mixed model (§6): sim_scene ~ level_z * C(area, Treatment("all")) +
    /// (1 | scene) by REML, from JSONL lines with scene, area, level, sim_scene (a `score`
    /// items.jsonl): OUT/lme.json, OUT/lme.csv.
    Lme(LmeArgs),
}

/// Arguments of `experiments cooco run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The dataset directory: metadata.json and images/ (COOCO's release layout).
    #[arg(long)]
    data: PathBuf,
    /// The LLaVA-OneVision checkpoint (a directory or a Hub id, e.g.
    /// llava-hf/llava-onevision-qwen2-0.5b-si-hf).
    #[arg(long)]
    model: String,
    /// Noise areas, comma-separated: target, context, all.
    #[arg(long, value_delimiter = ',', default_value = "target,context,all")]
    areas: Vec<String>,
    /// Noise levels λ, comma-separated (level 0 is generated once and recorded for every area).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,0.5,1",
        allow_negative_numbers = true
    )]
    levels: Vec<f64>,
    /// Only the first N images (in file-name order).
    #[arg(long)]
    limit: Option<usize>,
    /// Seed of the per-(image, area, level) noise streams.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Most new tokens per answer.
    #[arg(long, default_value_t = 10)]
    max_new_tokens: usize,
    /// The CLIP checkpoint of the metrics (a directory or a Hub id).
    #[arg(long, default_value = "openai/clip-vit-base-patch32")]
    clip: String,
    /// An answer is correct when its CLIP text similarity to the expected label
    /// (swapped_object, else target) is strictly greater.
    #[arg(long, default_value_t = 0.9, allow_negative_numbers = true)]
    threshold: f64,
    /// The Levenshtein variant is correct when the normalized similarity is strictly greater.
    #[arg(long, default_value_t = 0.9, allow_negative_numbers = true)]
    levenshtein_threshold: f64,
    /// Skip the attention-allocation analysis.
    #[arg(long)]
    no_attention: bool,
    /// Every prepared size in the attention analysis, not only 640 x 640 images (the study).
    #[arg(long)]
    attention_all_sizes: bool,
    /// Leave invalid records out (listed in invalid.json) instead of failing.
    #[arg(long)]
    skip_invalid: bool,
    /// Bootstrap resamples of the aggregates' 95% intervals.
    #[arg(long, default_value_t = 1000)]
    bootstrap: usize,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0)]
    bootstrap_seed: u64,
    /// The run directory (default: runs/cooco/run-<model>-<time>, or the newest run with the
    /// same configuration, which is resumed).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start a new run even when one with this configuration exists.
    #[arg(long)]
    fresh: bool,
}

/// Arguments of `experiments cooco attention`.
#[derive(clap::Args, Debug)]
pub struct AttentionArgs {
    /// A run directory of `cooco run` (its items.jsonl).
    #[arg(long)]
    run: PathBuf,
    /// Where to write (default: the run directory).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Arguments of `experiments cooco lme`.
#[derive(clap::Args, Debug)]
pub struct LmeArgs {
    /// JSONL with scene, area, level and sim_scene on every line.
    #[arg(long)]
    items: PathBuf,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
}

/// Arguments of `experiments cooco score`.
#[derive(clap::Args, Debug)]
pub struct ScoreArgs {
    /// The predictions (JSONL; image paths relative to the file).
    #[arg(long)]
    predictions: PathBuf,
    /// The CLIP checkpoint (a directory or a Hub id).
    #[arg(long, default_value = "openai/clip-vit-base-patch32")]
    clip: String,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// An item is correct when the prediction–target text similarity is strictly greater.
    #[arg(long, default_value_t = 0.9)]
    threshold: f64,
    /// The Levenshtein variant is correct when the normalized similarity is strictly greater.
    #[arg(long, default_value_t = 0.9)]
    levenshtein_threshold: f64,
}

/// `true` for the commands that compute on a device.
pub fn needs_device(args: &CoocoArgs) -> bool {
    matches!(args.command, CoocoCommand::Score(_) | CoocoCommand::Run(_))
}

/// Arguments of `experiments cooco prepare`.
#[derive(clap::Args, Debug)]
pub struct PrepareArgs {
    /// The dataset directory: metadata.json and images/ (COOCO's release layout).
    #[arg(long)]
    data: PathBuf,
    /// Output directory (must not hold a prompts.jsonl).
    #[arg(long)]
    out: PathBuf,
    /// Region syntax of the prompts: llava-onevision, qwen2.5-vl, kosmos-2 or molmo.
    #[arg(long, default_value = "llava-onevision")]
    family: String,
    /// Where the noise goes: none, target, context or all.
    #[arg(long, default_value = "none")]
    area: String,
    /// Noise level λ: the standard deviation in units of 255 (the study: 0, 0.5, 1).
    #[arg(long, default_value_t = 0.0)]
    level: f64,
    /// Seed of the per-(image, area, level) noise streams.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Leave invalid records out (listed in OUT/invalid.json) instead of failing.
    #[arg(long)]
    skip_invalid: bool,
}

/// Runs `experiments cooco …` (`run` and `score` on the context's device; the others read and
/// write files).
///
/// # Errors
/// Bad options, an invalid dataset, unreadable images.
pub fn run(args: CoocoArgs, ctx: &RunContext) -> Result<()> {
    let device = &ctx.device;
    match args.command {
        CoocoCommand::Run(a) => {
            let mut cfg = RunConfig::new(a.data, a.model);
            cfg.out = a.out;
            cfg.fresh = a.fresh;
            cfg.areas = a
                .areas
                .iter()
                .map(|s| NoiseArea::parse(s.trim()))
                .collect::<Result<_, _>>()?;
            cfg.levels = a.levels;
            cfg.limit = a.limit;
            cfg.seed = a.seed;
            cfg.max_new_tokens = a.max_new_tokens;
            cfg.clip = a.clip;
            cfg.threshold = a.threshold;
            cfg.levenshtein_threshold = a.levenshtein_threshold;
            cfg.attention = !a.no_attention;
            cfg.attention_all_sizes = a.attention_all_sizes;
            cfg.skip_invalid = a.skip_invalid;
            cfg.bootstrap = a.bootstrap;
            cfg.bootstrap_seed = a.bootstrap_seed;
            let all_sizes = cfg.attention_all_sizes;
            let attention = cfg.attention;
            let s = bindscope_cooco::run::run(&cfg, ctx)?;
            let m = &s.summary.means;
            if s.excluded > 0 || !s.invalid.is_empty() {
                println!(
                    "left out: {} record(s) marked excluded, {} invalid{}",
                    s.excluded,
                    s.invalid.len(),
                    if s.invalid.is_empty() {
                        ""
                    } else {
                        " (listed in invalid.json)"
                    }
                );
                for i in &s.invalid {
                    println!("  {}: {}", i.file, i.reason);
                }
            }
            if attention && s.attention_rows == 0 {
                println!(
                    "attention: no row is in the analysis{} — no attention.csv or heatmaps",
                    if all_sizes {
                        ""
                    } else {
                        " (no prepared image is 640 x 640; --attention-all-sizes takes every size)"
                    }
                );
            } else if attention {
                println!("attention: {} rows in the analysis", s.attention_rows);
            }
            println!(
                "{} rows, {} distinct answers ({} generated now): accuracy {:.4}, RefCLIPScore \
                 {:.4}, CLIPScore {:.4}, output–scene similarity {:.4} -> {}",
                s.rows,
                s.summary.answers,
                s.generated,
                m["accuracy"],
                m["ref_clip_score"],
                m["clip_score"],
                m["sim_scene"],
                s.dir.display()
            );
            Ok(())
        }
        CoocoCommand::Attention(a) => {
            if !a.run.is_dir() {
                anyhow::bail!("--run {}: no such directory", a.run.display());
            }
            let items: Vec<bindscope_cooco::run::ScoredRecord> =
                bindscope_core::run::read_jsonl(&a.run.join("items.jsonl"), "item")?;
            if items.is_empty() {
                anyhow::bail!(
                    "{}: no items (is this a finished `cooco run` directory?)",
                    a.run.join("items.jsonl").display()
                );
            }
            let out = a.out.clone().unwrap_or_else(|| a.run.clone());
            std::fs::create_dir_all(&out)?;
            let n = bindscope_cooco::report::attention_report(&out, &items)?;
            if n == 0 {
                anyhow::bail!(
                    "{}: no item is in the attention analysis (a run with --no-attention, or \
                     without 640 x 640 images and without --attention-all-sizes)",
                    a.run.join("items.jsonl").display()
                );
            }
            println!("attention report of {n} rows -> {}", out.display());
            Ok(())
        }
        CoocoCommand::Lme(a) => {
            let fit = bindscope_cooco::lme::run_lme(&a.items, &a.out)?;
            println!(
                "{} observations, {} scenes: scene variance {:.6}, residual variance {:.6}, \
                 conditional R² {:.4}",
                fit.n_obs, fit.n_groups, fit.group_var, fit.residual_var, fit.r2_conditional
            );
            for i in 0..fit.names.len() {
                println!(
                    "  {:<50} {:>10.5} (SE {:.5}, z {:.3}, p {:.3e})",
                    fit.names[i], fit.coef[i], fit.se[i], fit.z[i], fit.p[i]
                );
            }
            Ok(())
        }
        CoocoCommand::Score(a) => {
            let cfg = ScoreConfig {
                predictions: a.predictions,
                clip: a.clip,
                out: a.out,
                threshold: a.threshold,
                levenshtein_threshold: a.levenshtein_threshold,
            };
            let s = run_score(&cfg, device)?;
            println!(
                "{} items: CLIPScore {:.4}, RefCLIPScore {:.4}, accuracy {:.4} (Levenshtein {:.4}) -> {}",
                s.items,
                s.clip_score,
                s.ref_clip_score,
                s.accuracy,
                s.accuracy_levenshtein,
                cfg.out.display()
            );
            Ok(())
        }
        CoocoCommand::Prepare(a) => {
            let cfg = PrepareConfig {
                data: a.data,
                out: a.out,
                family: Family::parse(&a.family)?,
                area: NoiseArea::parse(&a.area)?,
                level: a.level,
                seed: a.seed,
                skip_invalid: a.skip_invalid,
            };
            let s = run_prepare(&cfg)?;
            println!(
                "prepared {} images ({} excluded by the metadata, {} invalid left out) -> {}",
                s.prepared,
                s.excluded,
                s.invalid.len(),
                s.prompts.display()
            );
            for i in &s.invalid {
                println!("  left out {}: {}", i.file, i.reason);
            }
            Ok(())
        }
    }
}
