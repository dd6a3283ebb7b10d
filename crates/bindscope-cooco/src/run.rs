//! `experiments cooco run`: LLaVA-OneVision names the object in the box of every image under
//! every noise condition (§4), the answers are scored with CLIP (§4.3), and the attention
//! allocation of App. C is measured on the way.
//!
//! **Conditions.** Every image × (area, level) of `areas × levels`. At level 0 the image is
//! the same for every area: it is generated once and recorded once per area, so each area's
//! curve and the mixed model's design have their level-0 rows.
//!
//! **One naming step** ([`Namer::name`]): the prepared image (resized, padded, noised as
//! `prepare` writes it), the region prompt of [`crate::prompt::Family::LlavaOnevision`] as the
//! user turn `[{"type": "image"}, {"type": "text", "text": question}]` under the checkpoint's
//! processor chat template (`chat_template.jinja` / `chat_template.json`), tokenized without
//! added special tokens; the image through `LlavaOnevisionImageProcessor` (PIL backend); greedy
//! decoding of at most `max_new_tokens` (10) tokens, stopping at `generation_config.json`'s EOS
//! ids; the answer is the decoded text without special tokens, trimmed.
//!
//! **Attention** (on by default): a first pass averages the base view's ViT attention maps
//! over the instances of the analysis (the dataset-mean map), the generation pass then computes
//! each instance's `r_l` ([`crate::attention`]). Only prepared images of 640 × 640 pixels enter
//! the analysis unless `attention_all_sizes` is set.
//!
//! **Before anything is written** every image is decoded and prepared (a truncated file or a
//! box the resize shrinks below a pixel is an error naming it, or is left out with
//! `skip_invalid`), and both checkpoints are loaded.
//!
//! **Run directory** ([`bindscope_core::run::run_dir`]): `config.json` (the identity: the
//! metadata's sha256, the checkpoints by content — weights, tokenizer, processor, chat template
//! and generation config — the conditions in a canonical order, the options), `vit_mean.safetensors` (the
//! dataset-mean maps, `layer.L` `[g², g²]` f64), `generations.jsonl` (one line per image ×
//! condition, appended as it is made: a second invocation resumes after the last complete
//! line), `scored.jsonl` (the same lines with their CLIP metrics, appended), and at the end
//! `items.jsonl` / `items.csv` (every line in dataset order), `summary.json`, the aggregates
//! and figures of [`crate::report`] and the attention heatmaps and table of
//! [`crate::report::attention_report`].

use crate::CoocoError;
use crate::attention::{self, Region};
use crate::dataset::{self, Record};
use crate::prepare::{NoiseArea, Prepared, apply_noise, noise_stream, prepare};
use crate::prompt::{Family, region_prompt};
use crate::score::{ClipScorer, ItemScores, Prediction};
use bindscope_core::run::{RunContext, append_jsonl, read_jsonl, run_dir, write_json};
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::image::{AnyresProcessor, DecodeOptions, RgbImage, decode_file};
use bindscope_data::lm::LmTokenizer;
use bindscope_models::generate::chat::{ChatTemplate, RenderOptions};
use bindscope_models::generate::{GenerateOptions, GenerationDefaults};
use bindscope_models::llava_onevision::{
    AttentionRequest, ImageInput, LlavaOnevisionForConditionalGeneration,
};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// What `run` does.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The dataset directory (`metadata.json`, `images/`).
    pub data: PathBuf,
    /// The LLaVA-OneVision checkpoint (a directory or a Hub id).
    pub model: String,
    /// The run directory (`None`: `runs/cooco/run-<model>-<time>`, or the newest run with the
    /// same identity).
    pub out: Option<PathBuf>,
    /// Start a new run even when one with this identity exists.
    pub fresh: bool,
    /// Noise areas (`target`, `context`, `all`).
    pub areas: Vec<NoiseArea>,
    /// Noise levels λ.
    pub levels: Vec<f64>,
    /// Only the first `limit` images (in file-name order).
    pub limit: Option<usize>,
    /// Seed of the noise streams.
    pub seed: u64,
    /// Most tokens per answer.
    pub max_new_tokens: usize,
    /// The CLIP checkpoint of the metrics.
    pub clip: String,
    /// Threshold of `correct` (strict).
    pub threshold: f64,
    /// Threshold of `correct_levenshtein` (strict).
    pub levenshtein_threshold: f64,
    /// Measure the attention allocation.
    pub attention: bool,
    /// Include every prepared size in the attention analysis, not only 640 × 640.
    pub attention_all_sizes: bool,
    /// Leave invalid records out (listed in `invalid.json`) instead of failing.
    pub skip_invalid: bool,
    /// Bootstrap resamples of the aggregates' intervals.
    pub bootstrap: usize,
    /// Seed of the bootstrap.
    pub bootstrap_seed: u64,
}

impl RunConfig {
    /// The defaults of the study: areas target, context, all; levels 0, 0.5, 1; 10 new tokens;
    /// `openai/clip-vit-base-patch32`; threshold 0.9; attention on, 640 × 640 only.
    pub fn new(data: PathBuf, model: String) -> Self {
        Self {
            data,
            model,
            out: None,
            fresh: false,
            areas: vec![NoiseArea::Target, NoiseArea::Context, NoiseArea::All],
            levels: vec![0.0, 0.5, 1.0],
            limit: None,
            seed: 0,
            max_new_tokens: 10,
            clip: "openai/clip-vit-base-patch32".into(),
            threshold: 0.9,
            levenshtein_threshold: 0.9,
            attention: true,
            attention_all_sizes: false,
            skip_invalid: false,
            bootstrap: 1000,
            bootstrap_seed: 0,
        }
    }
}

/// One image × condition of a run (a line of `generations.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationRecord {
    /// The metadata file name.
    pub image: String,
    /// The noise area.
    pub area: NoiseArea,
    /// The noise level λ.
    pub level: f64,
    /// `rel_level`.
    pub rel_level: String,
    /// The scene label.
    pub scene: String,
    /// The record's `target`.
    pub target: String,
    /// The label a correct answer names (`swapped_object`, else `target`).
    pub expected: String,
    /// The user text (the `<image>` marker included).
    pub prompt: String,
    /// The answer: decoded without special tokens, trimmed.
    pub output: String,
    /// The generated ids (the EOS included when the answer stopped on it).
    pub generated_ids: Vec<u32>,
    /// Whether decoding stopped on an EOS id.
    pub stopped_on_eos: bool,
    /// `[W, H]` of the prepared image.
    pub size: [usize; 2],
    /// The box `[x, y, w, h]` in the prepared image.
    pub r#box: [f64; 4],
    /// Whether the instance is in the attention analysis.
    pub in_attention: bool,
    /// `r_l` per vision layer (`None` where undefined); empty outside the analysis.
    pub ratios: Vec<Option<f64>>,
}

impl GenerationRecord {
    fn key(&self) -> (String, NoiseArea, u64) {
        (self.image.clone(), self.area, self.level.to_bits())
    }
}

/// A generation record with its CLIP metrics (a line of `scored.jsonl` and `items.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoredRecord {
    /// The generation.
    #[serde(flatten)]
    pub generation: GenerationRecord,
    /// Its metrics.
    #[serde(flatten)]
    pub scores: ItemScores,
}

/// One distinct generation: an image at one (area, level); level 0 stands for every area.
#[derive(Debug, Clone, PartialEq)]
struct Instance {
    record: usize,
    area: NoiseArea,
    level: f64,
    /// The areas recorded from this generation.
    rows: Vec<NoiseArea>,
}

fn instances(n: usize, areas: &[NoiseArea], levels: &[f64]) -> Vec<Instance> {
    let mut out = Vec::new();
    for record in 0..n {
        for &level in levels {
            if level == 0.0 {
                out.push(Instance {
                    record,
                    area: NoiseArea::None,
                    level,
                    rows: areas.to_vec(),
                });
            } else {
                for &area in areas {
                    out.push(Instance {
                        record,
                        area,
                        level,
                        rows: vec![area],
                    });
                }
            }
        }
    }
    out
}

/// LLaVA-OneVision with its tokenizer, processor and chat template: one naming step.
pub struct Namer {
    /// The model.
    pub model: LlavaOnevisionForConditionalGeneration,
    tokenizer: LmTokenizer,
    processor: AnyresProcessor,
    /// The processor chat template.
    pub template: ChatTemplate,
    opts: GenerateOptions,
    device: Device,
}

/// The answer to one prompt, with the attention the analysis reads.
#[derive(Debug, Clone)]
pub struct Named {
    /// The exact prompt text after the chat template.
    pub text: String,
    /// Its ids (one `<image>` placeholder).
    pub prompt_ids: Vec<u32>,
    /// The generated ids.
    pub generated_ids: Vec<u32>,
    /// Whether decoding stopped on EOS.
    pub stopped_on_eos: bool,
    /// The decoded answer, trimmed.
    pub output: String,
    /// Per vision layer, the base view's head-mean, row-renormalised map `[g², g²]` (empty
    /// without attention).
    pub vit: Vec<Vec<f64>>,
    /// The mean over output tokens of their weights on the base view (`None` without attention
    /// or without an output token).
    pub abar: Option<Vec<f64>>,
    /// The base view's grid side `g`.
    pub grid: usize,
}

fn invalid(m: impl Into<String>) -> CoocoError {
    CoocoError::Invalid(m.into())
}

fn host(t: Tensor<4>) -> Result<Vec<f32>, CoocoError> {
    bindscope_core::device::to_host_f32(t).map_err(|e| invalid(e.to_string()))
}

impl Namer {
    /// Loads a LLaVA-OneVision checkpoint with its `tokenizer.json`, `preprocessor_config.json`,
    /// processor chat template and `generation_config.json`.
    ///
    /// # Errors
    /// [`CoocoError::Invalid`] naming the checkpoint and what is missing or wrong.
    pub fn load(
        ckpt: &Checkpoint,
        max_new_tokens: usize,
        device: &Device,
    ) -> Result<Self, CoocoError> {
        let err = |e: String| invalid(format!("--model {}: {e}", ckpt.spec));
        let model =
            LlavaOnevisionForConditionalGeneration::load(ckpt, device, &LoadOptions::default())
                .map_err(|e| err(e.to_string()))?;
        let tokenizer = LmTokenizer::from_checkpoint(ckpt).map_err(|e| err(e.to_string()))?;
        let pre = ckpt
            .preprocessor_config
            .as_ref()
            .ok_or_else(|| err("no preprocessor_config.json".into()))?;
        let processor = AnyresProcessor::from_file(pre).map_err(|e| err(e.to_string()))?;
        let dir = ckpt.dir().to_path_buf();
        let template = ChatTemplate::for_processor(&dir)
            .map_err(|e| err(e.to_string()))?
            .ok_or_else(|| {
                err(
                    "no processor chat template (chat_template.jinja, chat_template.json or \
                     processor_config.json's chat_template)"
                        .into(),
                )
            })?;
        let image_token = model.image_token_id();
        match tokenizer.token_to_id("<image>") {
            Some(id) if id == image_token => {}
            other => {
                return Err(err(format!(
                    "the tokenizer's <image> token is {other:?}; config.json's image_token_index \
                     is {image_token}"
                )));
            }
        }
        let defaults = GenerationDefaults::read(&ckpt.config).map_err(err)?;
        let eos = if defaults.eos_token_ids.is_empty() {
            use bindscope_models::CausalLm;
            model.language_model.eos_token_ids()
        } else {
            defaults.eos_token_ids.clone()
        };
        if eos.is_empty() {
            return Err(err(
                "no eos_token_id in generation_config.json or config.json".into(),
            ));
        }
        let opts = GenerateOptions {
            max_new_tokens,
            pad_token_id: defaults.pad_token_id.unwrap_or(eos[0]),
            eos_token_ids: eos,
            ..GenerateOptions::default()
        };
        Ok(Self {
            model,
            tokenizer,
            processor,
            template,
            opts,
            device: device.clone(),
        })
    }

    /// The prompt text for a user turn `user` that starts with `<image>\n` (a region prompt):
    /// the image item, then the rest as the text item.
    ///
    /// # Errors
    /// [`CoocoError::Invalid`] for a template that fails.
    pub fn chat_text(&self, user: &str) -> Result<String, CoocoError> {
        let question = user.strip_prefix("<image>\n").unwrap_or(user);
        let messages = [serde_json::json!({
            "role": "user",
            "content": [{"type": "image"}, {"type": "text", "text": question}],
        })];
        self.template
            .render_messages(
                &messages,
                &RenderOptions {
                    add_generation_prompt: true,
                    ..RenderOptions::default()
                },
            )
            .map_err(|e| invalid(e.to_string()))
    }

    /// The base view's per-layer ViT maps ([`attention::head_mean_rows`]) of `image`.
    ///
    /// # Errors
    /// [`CoocoError::Image`] when the processor refuses the image.
    pub fn vit_maps(&self, image: &RgbImage) -> Result<Vec<Vec<f64>>, CoocoError> {
        let px = self
            .processor
            .base
            .pixel_values(std::slice::from_ref(image), &self.device)?;
        let (_, a) = self.model.vision_features(px, true);
        a.unwrap_or_default().into_iter().map(vit_map).collect()
    }

    /// One naming step on `image` with the user text `user` (see the [module docs](self)).
    ///
    /// # Errors
    /// [`CoocoError::Invalid`] for a prompt, image or generation the model refuses.
    pub fn name(&self, image: &RgbImage, user: &str, attention: bool) -> Result<Named, CoocoError> {
        let text = self.chat_text(user)?;
        let prompt_ids = self
            .tokenizer
            .encode(&text, false)
            .map_err(|e| invalid(e.to_string()))?;
        let px = self.processor.preprocess(image)?;
        let input = ImageInput {
            pixel_values: px.pixel_values.to_tensor(&self.device),
            image_size: px.image_size,
        };
        let request = if attention {
            AttentionRequest::LastQuery
        } else {
            AttentionRequest::None
        };
        let g = self
            .model
            .generate(
                &prompt_ids,
                std::slice::from_ref(&input),
                &self.opts,
                request,
            )
            .map_err(|e| invalid(e.to_string()))?;
        let ids = &g.generation.generated_ids;
        let output = self
            .tokenizer
            .decode(ids, true)
            .map_err(|e| invalid(e.to_string()))?
            .trim()
            .to_string();
        let grid = self.model.spec.grid();
        let (mut vit, mut abar) = (Vec::new(), None);
        if attention {
            for a in g.vision_attentions.into_iter().next().unwrap_or_default() {
                vit.push(vit_map(a)?);
            }
            let n_out = ids.len() - usize::from(g.generation.stopped_on_eos);
            let start = g.image_positions.first().map_or(0, |r| r.start);
            let base = start..start + grid * grid;
            let mut tokens = Vec::new();
            for pass in g.llm_attentions.iter().take(n_out) {
                let mut rows = Vec::with_capacity(pass.len());
                let mut heads = 0;
                for a in pass {
                    let [_, h, q, s] = a.dims();
                    heads = h;
                    let a = a.clone().slice([0..1, 0..h, q - 1..q, 0..s]);
                    rows.push(host(a)?);
                }
                if let Some(w) = attention::llm_weights(&rows, heads, base.clone()) {
                    tokens.push(w);
                }
            }
            abar = attention::mean_weights(&tokens);
        }
        Ok(Named {
            text,
            prompt_ids,
            generated_ids: ids.clone(),
            stopped_on_eos: g.generation.stopped_on_eos,
            output,
            vit,
            abar,
            grid,
        })
    }
}

/// A layer's `[1, H, g², g²]` attention → its head-mean, row-renormalised `[g², g²]` map.
fn vit_map(a: Tensor<4>) -> Result<Vec<f64>, CoocoError> {
    let [_, _, q, k] = a.dims();
    let m = a.mean_dim(1);
    Ok(attention::head_mean_rows(&host(m)?, 1, q, k))
}

/// The prepared and noised image of `r` under one condition, with its region.
fn condition_image(
    ds: &dataset::Dataset,
    r: &Record,
    area: NoiseArea,
    level: f64,
    seed: u64,
) -> Result<(Prepared, Region), CoocoError> {
    let img = decode_file(ds.image_path(r), &DecodeOptions::hf())?;
    let mut p = prepare(&img, r.target_bbox).map_err(|e| invalid(format!("{}: {e}", r.file)))?;
    let mut rng = noise_stream(seed, &r.file, area, level);
    apply_noise(&mut p.image, p.bbox, area, level, &mut rng);
    let region = Region {
        side: p.image.width,
        bbox: p.bbox,
        content: [p.offset[0], p.offset[1], p.content[0], p.content[1]],
    };
    Ok((p, region))
}

/// What a run wrote.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// The run directory.
    pub dir: PathBuf,
    /// Image × condition rows.
    pub rows: usize,
    /// Distinct generations made by this invocation (0 when everything was resumed).
    pub generated: usize,
    /// Rows in the attention analysis (0 without attention, or when no prepared image is
    /// 640 × 640 and `attention_all_sizes` is off).
    pub attention_rows: usize,
    /// Records the metadata marks `excluded`.
    pub excluded: usize,
    /// Records left out as invalid (with `skip_invalid`).
    pub invalid: Vec<dataset::Invalid>,
    /// The metric means.
    pub summary: crate::report::Summary,
}

fn check(cfg: &RunConfig) -> Result<(), CoocoError> {
    if cfg.areas.is_empty() || cfg.areas.contains(&NoiseArea::None) {
        return Err(invalid(
            "--areas: give one or more of target, context, all (level 0 is the clean image)",
        ));
    }
    if cfg.levels.is_empty() {
        return Err(invalid("--levels: give one or more noise levels"));
    }
    for &l in &cfg.levels {
        if !l.is_finite() || !(0.0..=10.0).contains(&l) {
            return Err(invalid(format!(
                "--levels: {l} is outside [0, 10] (λ: the standard deviation in units of 255)"
            )));
        }
    }
    let mut seen = HashSet::new();
    if let Some(l) = cfg.levels.iter().find(|l| !seen.insert(l.to_bits())) {
        return Err(invalid(format!("--levels: {l} is given twice")));
    }
    let mut seen = HashSet::new();
    if let Some(a) = cfg.areas.iter().find(|a| !seen.insert(**a)) {
        return Err(invalid(format!("--areas: {} is given twice", a.name())));
    }
    // A cosine similarity lies in [−1, 1], a normalised Levenshtein similarity in [0, 1]: a
    // threshold outside makes every answer right or every answer wrong.
    for (flag, v, range) in [
        ("--threshold", cfg.threshold, -1.0..=1.0),
        (
            "--levenshtein-threshold",
            cfg.levenshtein_threshold,
            0.0..=1.0,
        ),
    ] {
        if !v.is_finite() || !range.contains(&v) {
            return Err(invalid(format!(
                "{flag} must be a number in [{}, {}] (a similarity), got {v}",
                range.start(),
                range.end()
            )));
        }
    }
    if cfg.bootstrap < 2 {
        return Err(invalid(format!(
            "--bootstrap must be at least 2 resamples (the intervals are percentiles of them), \
             got {}",
            cfg.bootstrap
        )));
    }
    if cfg.max_new_tokens == 0 {
        return Err(invalid("--max-new-tokens must be at least 1"));
    }
    if cfg.limit == Some(0) {
        return Err(invalid("--limit must be at least 1"));
    }
    Ok(())
}

fn resolve(spec: &str, flag: &str) -> Result<Checkpoint, CoocoError> {
    Checkpoint::resolve(spec).map_err(|e| invalid(e.to_string().replace("--model", flag)))
}

/// Runs the study (see the [module docs](self)): generation, attention, scoring, report.
///
/// # Errors
/// Bad options, an invalid dataset or checkpoint, a run directory that holds another run, an
/// image the model refuses (named), an I/O failure.
pub fn run(cfg: &RunConfig, ctx: &RunContext) -> Result<RunSummary, CoocoError> {
    check(cfg)?;
    // The conditions in one order whatever order they were given in (every condition has
    // its own noise stream, so the order changes no number).
    let mut areas = cfg.areas.clone();
    areas.sort();
    let mut levels = cfg.levels.clone();
    levels.sort_by(f64::total_cmp);
    let device = &ctx.device;
    let mut ds = dataset::load(&cfg.data, cfg.skip_invalid)?;
    // Every image decoded and prepared before anything is written: a truncated file or a box
    // the resize shrinks below a pixel is named now (or left out with skip_invalid), not
    // half-way through the run.
    let n_records = cfg
        .limit
        .map_or(ds.records.len(), |l| l.min(ds.records.len()));
    let mut records = Vec::with_capacity(n_records);
    let mut bad = Vec::new();
    for r in &ds.records[..n_records] {
        let checked = decode_file(ds.image_path(r), &DecodeOptions::hf())
            .map_err(|e| e.to_string())
            .and_then(|img| prepare(&img, r.target_bbox).map_err(|e| e.to_string()));
        match checked {
            Ok(_) => records.push(r.clone()),
            Err(reason) => bad.push(dataset::Invalid {
                file: r.file.clone(),
                reason,
            }),
        }
    }
    if !bad.is_empty() && !cfg.skip_invalid {
        let list: Vec<String> = bad
            .iter()
            .map(|b| format!("  {}: {}", b.file, b.reason))
            .collect();
        return Err(invalid(format!(
            "{}: {} image(s) cannot be prepared (--skip-invalid leaves them out):\n{}",
            ds.metadata.display(),
            bad.len(),
            list.join("\n")
        )));
    }
    ds.invalid.extend(bad);
    if records.is_empty() {
        return Err(invalid(format!(
            "{}: no image left to run (every one is invalid)",
            ds.metadata.display()
        )));
    }
    let records = &records[..];
    let ckpt = resolve(&cfg.model, "--model")?;
    let clip = resolve(&cfg.clip, "--clip")?;
    let sha = |c: &Checkpoint| c.weights_sha256().map_err(|e| invalid(e.to_string()));
    let file_sha = |p: Option<&Path>| -> Result<Option<String>, CoocoError> {
        use sha2::Digest;
        p.map(|p| {
            std::fs::read(p)
                .map(|b| format!("{:x}", sha2::Sha256::digest(&b)))
                .map_err(|source| CoocoError::Io {
                    path: p.to_path_buf(),
                    source,
                })
        })
        .transpose()
    };
    let metadata_sha = {
        use sha2::Digest;
        let bytes = std::fs::read(&ds.metadata).map_err(|source| CoocoError::Io {
            path: ds.metadata.clone(),
            source,
        })?;
        format!("{:x}", sha2::Sha256::digest(&bytes))
    };
    // The images by content, in the run's order: a file replaced under the same name is
    // another run.
    let images_sha = {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        for r in records {
            h.update(r.file.as_bytes());
            h.update([0]);
            h.update(r.sha256.as_bytes());
            h.update([b'\n']);
        }
        format!("{:x}", h.finalize())
    };
    // Both models before the run directory: a checkpoint that cannot be used leaves nothing.
    let namer = Namer::load(&ckpt, cfg.max_new_tokens, device)?;
    let mut scorer = ClipScorer::load(&clip, device)?;
    scorer.threshold = cfg.threshold;
    scorer.levenshtein_threshold = cfg.levenshtein_threshold;
    let template_sha = {
        use sha2::Digest;
        format!(
            "{:x}",
            sha2::Sha256::digest(namer.template.source().as_bytes())
        )
    };
    let generation_config = ckpt.config.with_file_name("generation_config.json");
    // The checkpoints by content (weights, tokenizer, processor, chat template, generation
    // config), not by how their path was written; the specs are recorded beside the identity.
    let identity = serde_json::json!({
        "command": "cooco run",
        "data": {
            "metadata_sha256": metadata_sha,
            "images_sha256": images_sha,
            "limit": cfg.limit,
            "skip_invalid": cfg.skip_invalid,
        },
        "model": {
            "weights_sha256": sha(&ckpt)?,
            "tokenizer_sha256": file_sha(ckpt.tokenizer.as_deref())?,
            "preprocessor_config_sha256": file_sha(ckpt.preprocessor_config.as_deref())?,
            "chat_template_sha256": template_sha,
            "generation_config_sha256": file_sha(Some(generation_config.as_path()).filter(|p| p.is_file()))?,
        },
        "clip": {
            "weights_sha256": sha(&clip)?,
            "tokenizer_sha256": file_sha(clip.tokenizer.as_deref())?,
            "preprocessor_config_sha256": file_sha(clip.preprocessor_config.as_deref())?,
        },
        "areas": areas.iter().map(|a| a.name()).collect::<Vec<_>>(),
        "levels": levels,

        "seed": cfg.seed,
        "family": Family::LlavaOnevision.name(),
        "max_new_tokens": cfg.max_new_tokens,
        "decoding": "greedy",
        "threshold": cfg.threshold,
        "levenshtein_threshold": cfg.levenshtein_threshold,
        "attention": cfg.attention,
        "attention_all_sizes": cfg.attention_all_sizes,
        "bootstrap": {"resamples": cfg.bootstrap, "seed": cfg.bootstrap_seed},
    });
    let name = format!("run-{}", bindscope_core::run::slug(&cfg.model));
    let dir = run_dir("cooco", &name, cfg.out.clone(), &identity, cfg.fresh)
        .map_err(|e| invalid(e.to_string()))?;
    // One process per run directory: a second one would interleave the resume logs.
    let _lock = bindscope_core::run::lock_run_dir(&dir).map_err(|e| invalid(e.to_string()))?;
    let mut config = ctx.config_json(serde_json::json!({
        "identity": identity,
        "model": cfg.model,
        "clip": cfg.clip,
        "data": cfg.data,
        "images": records.len(),
        "excluded": ds.excluded,
        "invalid": ds.invalid.len(),
    }));
    bindscope_core::run::keep_created(&dir.join("config.json"), &mut config);
    write_json(&dir.join("config.json"), &config).map_err(|e| invalid(e.to_string()))?;
    if cfg.skip_invalid {
        write_json(&dir.join("invalid.json"), &ds.invalid).map_err(|e| invalid(e.to_string()))?;
    }

    let insts = instances(records.len(), &areas, &levels);
    let gen_path = dir.join("generations.jsonl");
    let done: Vec<GenerationRecord> =
        read_jsonl(&gen_path, "generation").map_err(|e| invalid(e.to_string()))?;
    let done_keys: HashSet<_> = done.iter().map(GenerationRecord::key).collect();
    let key =
        |i: &Instance, area: NoiseArea| (records[i.record].file.clone(), area, i.level.to_bits());
    let todo: Vec<&Instance> = insts
        .iter()
        .filter(|i| i.rows.iter().any(|&a| !done_keys.contains(&key(i, a))))
        .collect();

    let mut generated = 0;
    if !todo.is_empty() {
        let included =
            |region: &Region| cfg.attention && (cfg.attention_all_sizes || region.side == 640);
        let mean = if cfg.attention {
            Some(vit_mean(
                &namer, &ds, records, &insts, cfg, &dir, &included,
            )?)
        } else {
            None
        };
        // The whole run's length first: the first line after a resume shows its position in
        // the run, not in what is left.
        let progress = bindscope_core::run::progress(insts.len() as u64, "generations");
        progress.set_position((insts.len() - todo.len()) as u64);
        for inst in todo {
            let r = &records[inst.record];
            let (p, region) = condition_image(&ds, r, inst.area, inst.level, cfg.seed)?;
            let size = [p.image.width, p.image.height];
            let user = region_prompt(Family::LlavaOnevision, p.bbox, size);
            let in_attention = included(&region);
            let named = namer.name(&p.image, &user, in_attention).map_err(|e| {
                invalid(format!(
                    "{} ({}, λ {}): {e}",
                    r.file,
                    inst.area.name(),
                    inst.level
                ))
            })?;
            let ratios = match (&mean, &named.abar) {
                (Some(m), Some(abar)) if in_attention => {
                    attention::ratios(&named.vit, m, abar, named.grid, &region)
                }
                (Some(m), None) if in_attention => vec![None; m.len()],
                _ => Vec::new(),
            };
            for &area in &inst.rows {
                if done_keys.contains(&key(inst, area)) {
                    continue;
                }
                let rec = GenerationRecord {
                    image: r.file.clone(),
                    area,
                    level: inst.level,
                    rel_level: r.rel_level.name().into(),
                    scene: r.scene.clone(),
                    target: r.target.clone(),
                    expected: r.expected_label().into(),
                    prompt: user.clone(),
                    output: named.output.clone(),
                    generated_ids: named.generated_ids.clone(),
                    stopped_on_eos: named.stopped_on_eos,
                    size,
                    r#box: p.bbox,
                    in_attention,
                    ratios: ratios.clone(),
                };
                append_jsonl(&gen_path, &rec).map_err(|e| invalid(e.to_string()))?;
            }
            generated += 1;
            progress.inc(1);
        }
        progress.finish_and_clear();
    }

    // Scoring, resumable the same way.
    let gens: Vec<GenerationRecord> =
        read_jsonl(&gen_path, "generation").map_err(|e| invalid(e.to_string()))?;
    let scored_path = dir.join("scored.jsonl");
    let scored: Vec<ScoredRecord> =
        read_jsonl(&scored_path, "scored item").map_err(|e| invalid(e.to_string()))?;
    let scored_keys: HashSet<_> = scored.iter().map(|s| s.generation.key()).collect();
    let to_score: Vec<&GenerationRecord> = gens
        .iter()
        .filter(|g| !scored_keys.contains(&g.key()))
        .collect();
    if !to_score.is_empty() {
        let by_file: BTreeMap<&str, &Record> =
            records.iter().map(|r| (r.file.as_str(), r)).collect();
        let progress = bindscope_core::run::progress(gens.len() as u64, "scores");
        progress.set_position((gens.len() - to_score.len()) as u64);
        for g in to_score {
            let r = by_file.get(g.image.as_str()).ok_or_else(|| {
                invalid(format!(
                    "{}: {} is not in the dataset (generations.jsonl of another dataset?)",
                    gen_path.display(),
                    g.image
                ))
            })?;
            let noise_area = if g.level == 0.0 {
                NoiseArea::None
            } else {
                g.area
            };
            let (p, _) = condition_image(&ds, r, noise_area, g.level, cfg.seed)?;
            let v = scorer.image_embedding(&p.image)?;
            let pred = Prediction {
                image: g.image.clone(),
                prediction: g.output.clone(),
                target: g.expected.clone(),
                scene: g.scene.clone(),
                references: vec![g.expected.clone()],
                extra: serde_json::Map::new(),
            };
            let scores = scorer.score_embedded(&pred, &v)?;
            append_jsonl(
                &scored_path,
                &ScoredRecord {
                    generation: g.clone(),
                    scores,
                },
            )
            .map_err(|e| invalid(e.to_string()))?;
            progress.inc(1);
        }
        progress.finish_and_clear();
    }

    // Every row in dataset × condition order.
    let scored: Vec<ScoredRecord> =
        read_jsonl(&scored_path, "scored item").map_err(|e| invalid(e.to_string()))?;
    let mut by_key: BTreeMap<_, ScoredRecord> = scored
        .into_iter()
        .map(|s| (s.generation.key(), s))
        .collect();
    let mut items = Vec::new();
    for inst in &insts {
        let mut rows = inst.rows.clone();
        rows.sort();
        for area in rows {
            if let Some(s) = by_key.remove(&key(inst, area)) {
                items.push(s);
            }
        }
    }
    let summary = crate::report::write(&dir, &items, cfg.bootstrap, cfg.bootstrap_seed)?;
    Ok(RunSummary {
        dir,
        rows: items.len(),
        generated,
        attention_rows: items
            .iter()
            .filter(|r| r.generation.in_attention && !r.generation.ratios.is_empty())
            .count(),
        excluded: ds.excluded,
        invalid: ds.invalid.clone(),
        summary,
    })
}

/// The dataset-mean ViT map per layer over the instances of the analysis, read from
/// `vit_mean.safetensors` when a previous invocation finished it; otherwise computed (partial
/// sums are saved every 32 instances to `vit_mean.partial.safetensors` and resumed).
fn vit_mean(
    namer: &Namer,
    ds: &dataset::Dataset,
    records: &[Record],
    insts: &[Instance],
    cfg: &RunConfig,
    dir: &Path,
    included: &dyn Fn(&Region) -> bool,
) -> Result<Vec<Vec<f64>>, CoocoError> {
    let final_path = dir.join("vit_mean.safetensors");
    if let Some(saved) = read_maps(&final_path)? {
        return Ok(saved.maps);
    }
    // Partial sums: the instances before `position` are in them, `count` of them included.
    let partial = dir.join("vit_mean.partial.safetensors");
    let saved = read_maps(&partial)?.unwrap_or(SavedMaps {
        maps: Vec::new(),
        position: 0,
        count: 0,
    });
    let (mut sum, mut start, mut count) = (saved.maps, saved.position, saved.count);
    let progress = bindscope_core::run::progress(insts.len() as u64, "mean attention maps");
    progress.set_position(start as u64);
    while start < insts.len() {
        let inst = &insts[start];
        let r = &records[inst.record];
        let (p, region) = condition_image(ds, r, inst.area, inst.level, cfg.seed)?;
        if included(&region) {
            let maps = namer.vit_maps(&p.image)?;
            if sum.is_empty() {
                sum = vec![vec![0f64; maps[0].len()]; maps.len()];
            }
            for (s, m) in sum.iter_mut().zip(&maps) {
                for (a, x) in s.iter_mut().zip(m) {
                    *a += x;
                }
            }
            count += 1;
        }
        start += 1;
        progress.inc(1);
        if start % 32 == 0 && start < insts.len() {
            write_maps(&partial, &sum, start, count)?;
        }
    }
    progress.finish_and_clear();
    let mean: Vec<Vec<f64>> = sum
        .into_iter()
        .map(|s| s.into_iter().map(|x| x / count.max(1) as f64).collect())
        .collect();
    write_maps(&final_path, &mean, insts.len(), count)?;
    let _ = std::fs::remove_file(&partial);
    Ok(mean)
}

/// Per-layer `[g², g²]` maps (sums or means), saved after the instances before `position`, of
/// which `count` are in the analysis.
pub(crate) struct SavedMaps {
    pub(crate) maps: Vec<Vec<f64>>,
    pub(crate) position: usize,
    pub(crate) count: usize,
}

/// Writes maps `layer.L` (F64 `[n, n]`) with `position` and `count` in the metadata.
pub(crate) fn write_maps(
    path: &Path,
    maps: &[Vec<f64>],
    position: usize,
    count: usize,
) -> Result<(), CoocoError> {
    let bytes: Vec<Vec<u8>> = maps
        .iter()
        .map(|m| m.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let mut views = Vec::new();
    for (l, (m, b)) in maps.iter().zip(&bytes).enumerate() {
        let n = (m.len() as f64).sqrt() as usize;
        let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F64, vec![n, n], b)
            .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
        views.push((format!("layer.{l}"), view));
    }
    let meta = std::collections::HashMap::from([
        ("position".to_string(), position.to_string()),
        ("count".to_string(), count.to_string()),
    ]);
    let data = safetensors::serialize(views, Some(meta))
        .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    bindscope_core::fsutil::write_atomic(path, &data).map_err(|source| CoocoError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// What [`write_maps`] wrote, `None` when the file does not exist.
pub(crate) fn read_maps(path: &Path) -> Result<Option<SavedMaps>, CoocoError> {
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = std::fs::read(path).map_err(|source| CoocoError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |m: String| invalid(format!("{}: {m} (delete it to recompute)", path.display()));
    let (_, meta) =
        safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| bad(e.to_string()))?;
    let number = |key: &str| -> Result<usize, CoocoError> {
        meta.metadata()
            .as_ref()
            .and_then(|m| m.get(key))
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| bad(format!("no {key} in the metadata")))
    };
    let (position, count) = (number("position")?, number("count")?);
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
    let mut maps = Vec::new();
    for l in 0.. {
        let Ok(t) = st.tensor(&format!("layer.{l}")) else {
            break;
        };
        if t.dtype() != safetensors::Dtype::F64 {
            return Err(bad(format!("layer.{l} is not F64")));
        }
        maps.push(
            t.data()
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        );
    }
    Ok(Some(SavedMaps {
        maps,
        position,
        count,
    }))
}
