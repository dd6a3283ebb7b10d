//! `experiments cooco …`: the COOCO study's commands. `prepare` writes the study's prepared
//! images (resized, padded, noised) and the region prompts of one model family
//! (`bindscope_cooco::run_prepare`); `score` scores any model's answers with a CLIP checkpoint
//! (`bindscope_cooco::score`). This module maps the arguments to the config.

use anyhow::Result;
use bindscope_cooco::prepare::NoiseArea;
use bindscope_cooco::prompt::Family;
use bindscope_cooco::score::{ScoreConfig, run_score};
use bindscope_cooco::{PrepareConfig, run_prepare};
use std::path::PathBuf;

/// Arguments of `experiments cooco`.
#[derive(clap::Args, Debug)]
pub struct CoocoArgs {
    #[command(subcommand)]
    command: CoocoCommand,
}

#[derive(clap::Subcommand, Debug)]
enum CoocoCommand {
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
    matches!(args.command, CoocoCommand::Score(_))
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

/// Runs `experiments cooco …` (`score` on `device`; `prepare` reads and writes files).
///
/// # Errors
/// Bad options, an invalid dataset, unreadable images.
pub fn run(args: CoocoArgs, device: &burn::tensor::Device) -> Result<()> {
    match args.command {
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
