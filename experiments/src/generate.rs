//! `experiments generate`: text from a decoder language model (Llama, Qwen2, Qwen3).
//!
//! Every `--prompt` (or line of `--prompts FILE`) runs in one left-padded batch; greedy decoding
//! unless `--temperature` asks for seeded sampling. `--chat` renders each prompt as one user
//! message through the checkpoint's chat template (with `--system` as the system message; without
//! it the template's own default, as transformers' `apply_chat_template`) and adds the generation
//! prompt. Plain output is the generated text (special tokens skipped); with several prompts each
//! text follows a `== prompt N ==` line. `--json` prints one object per prompt per line. Nothing
//! is printed until every prompt is done.
//!
//! As transformers' `generate`, the checkpoint's `generation_config.json` supplies `top_k` /
//! `top_p` of a sampling run and the `repetition_penalty` (greedy too) unless the flags say
//! otherwise; its `do_sample` is not followed (decoding is greedy unless `--temperature` is
//! given), and a note says so.

use crate::common::ModelOpts;
use anyhow::{Context, Result, bail};
use bindscope_data::lm::LmTokenizer;
use bindscope_models::generate::chat::{ChatMessage, ChatTemplate, RenderOptions};
use bindscope_models::generate::{self, GenerateOptions, GenerationDefaults, Sampling};
use burn::tensor::Device;
use std::path::PathBuf;

/// Arguments of `experiments generate`.
#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// Hugging Face id or local checkpoint directory of a decoder LM (llama, qwen2, qwen3).
    #[arg(long)]
    model: String,
    /// A prompt (repeat for a batch).
    #[arg(long)]
    prompt: Vec<String>,
    /// A UTF-8 file with one prompt per line, added after the --prompt values (a leading
    /// byte-order mark is removed, CRLF line ends are fine, a blank line is an error).
    #[arg(long)]
    prompts: Option<PathBuf>,
    /// Render each prompt as a user message through the tokenizer's chat template and add the
    /// generation prompt.
    #[arg(long)]
    chat: bool,
    /// System message of --chat (without it, the template's own default, if it has one).
    #[arg(long)]
    system: Option<String>,
    /// A chat-template variable as KEY=VALUE, VALUE in JSON when it parses (e.g.
    /// enable_thinking=false for Qwen3; Python's True / False / None are read as JSON's), a
    /// string otherwise. Repeatable.
    #[arg(long = "template-var", value_name = "KEY=VALUE")]
    template_vars: Vec<String>,
    /// Most tokens generated per prompt (fewer, with a note, where the model's context ends
    /// first).
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Keep generating after an end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
    /// Sample at this temperature instead of decoding greedily.
    #[arg(long)]
    temperature: Option<f64>,
    /// Nucleus sampling: keep the most likely tokens up to this cumulative probability (with
    /// --temperature; default generation_config.json's top_p, else 1).
    #[arg(long)]
    top_p: Option<f64>,
    /// Keep the K most likely tokens before sampling (with --temperature; 0 = all; default
    /// generation_config.json's top_k, else 50, as transformers).
    #[arg(long)]
    top_k: Option<usize>,
    /// Divide the positive logits of ids already in the prompt or the output by this (multiply
    /// the negative ones); default generation_config.json's repetition_penalty, else 1 (off).
    #[arg(long)]
    repetition_penalty: Option<f64>,
    /// Seed of the sampling draws (with --temperature).
    #[arg(long)]
    seed: Option<u64>,
    /// One JSON object per prompt per line: prompt_ids, generated_ids, text (and top_logits).
    #[arg(long)]
    json: bool,
    /// With --json: the K highest [id, logit] pairs of every generated step.
    #[arg(long, value_name = "K")]
    top_logits: Option<usize>,
    #[command(flatten)]
    model_opts: ModelOpts,
}

/// The prompts of `--prompt` and `--prompts`, in that order.
fn read_prompts(args: &GenerateArgs) -> Result<Vec<String>> {
    let mut prompts = args.prompt.clone();
    if let Some(path) = &args.prompts {
        let file = bindscope_data::textfile::read_text_file(path).context("--prompts")?;
        if let Some(note) = file.bom_note() {
            eprintln!("{note}");
        }
        for (i, line) in file.text.lines().enumerate() {
            if line.trim().is_empty() {
                bail!(
                    "--prompts: {}:{}: empty line (one prompt per line; remove blank lines)",
                    path.display(),
                    i + 1
                );
            }
            prompts.push(line.to_string());
        }
        if file.text.lines().next().is_none() {
            bail!("--prompts: {}: no prompts", path.display());
        }
    }
    if prompts.is_empty() {
        bail!("no prompt: give --prompt TEXT (repeatable) or --prompts FILE");
    }
    // An empty user message is a valid chat turn; an empty plain prompt has no token to start from.
    if !args.chat
        && let Some(i) = prompts.iter().position(|p| p.is_empty())
    {
        bail!(
            "prompt {} is empty (a plain prompt needs at least one token)",
            i + 1
        );
    }
    Ok(prompts)
}

/// `--template-var KEY=VALUE` as template variables.
fn template_vars(vars: &[String]) -> Result<serde_json::Map<String, serde_json::Value>> {
    let mut out = serde_json::Map::new();
    for v in vars {
        let Some((k, val)) = v.split_once('=') else {
            bail!("--template-var '{v}': expected KEY=VALUE (e.g. enable_thinking=false)");
        };
        if k.is_empty() {
            bail!("--template-var '{v}': empty KEY");
        }
        let value = match val {
            "True" => serde_json::Value::Bool(true),
            "False" => serde_json::Value::Bool(false),
            "None" => serde_json::Value::Null,
            _ => serde_json::from_str(val).unwrap_or(serde_json::Value::String(val.into())),
        };
        out.insert(k.to_string(), value);
    }
    Ok(out)
}

/// Checks the flags against each other before anything is loaded.
fn check_flags(args: &GenerateArgs) -> Result<Option<f64>> {
    if args.system.is_some() && !args.chat {
        bail!("--system needs --chat (a system message is rendered by the chat template)");
    }
    if !args.template_vars.is_empty() && !args.chat {
        bail!("--template-var needs --chat");
    }
    if args.top_logits.is_some() && !args.json {
        bail!("--top-logits needs --json (the pairs are a field of the JSON output)");
    }
    if args.top_logits == Some(0) {
        bail!("--top-logits must be at least 1");
    }
    if args.max_new_tokens == 0 {
        bail!("--max-new-tokens must be at least 1");
    }
    if let Some(p) = args.repetition_penalty
        && !(p > 0.0 && p.is_finite())
    {
        bail!("--repetition-penalty must be positive, got {p}");
    }
    let Some(temperature) = args.temperature else {
        for (flag, given) in [
            ("--top-p", args.top_p.is_some()),
            ("--top-k", args.top_k.is_some()),
            ("--seed", args.seed.is_some()),
        ] {
            if given {
                bail!("{flag} needs --temperature (without it decoding is greedy)");
            }
        }
        return Ok(None);
    };
    if !(temperature > 0.0 && temperature.is_finite()) {
        bail!("--temperature must be positive, got {temperature}");
    }
    if let Some(top_p) = args.top_p
        && !(top_p > 0.0 && top_p <= 1.0)
    {
        bail!("--top-p must be in (0, 1], got {top_p}");
    }
    Ok(Some(temperature))
}

pub fn run(args: GenerateArgs, device: &Device) -> Result<()> {
    let temperature = check_flags(&args)?;
    let vars = template_vars(&args.template_vars)?;
    let prompts = read_prompts(&args)?;
    let ckpt = crate::common::resolve(&args.model)?;
    // A decoder before its tokenizer: an encoder checkpoint is named as such.
    let model_type = bindscope_models::registry::model_type(&ckpt)?;
    if bindscope_models::registry::find(&model_type).is_none_or(|a| a.causal_lm.is_none()) {
        let decoders: Vec<&str> = bindscope_models::registry::ARCHITECTURES
            .iter()
            .filter(|a| a.causal_lm.is_some())
            .flat_map(|a| a.model_types.iter().copied())
            .collect();
        bail!(
            "{}: model_type '{model_type}' is not a decoder language model (generate takes {})",
            ckpt.config.display(),
            decoders.join(", ")
        );
    }
    let defaults = GenerationDefaults::read(&ckpt.config).map_err(anyhow::Error::msg)?;
    let tokenizer = LmTokenizer::from_checkpoint(&ckpt)?;
    let dir = ckpt
        .config
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    let template = if args.chat {
        match ChatTemplate::from_dir(&dir)? {
            Some(t) => Some(t),
            None if !dir.join("tokenizer_config.json").is_file() => bail!(
                "{}: not found, and no chat_template.jinja beside it: the checkpoint has no chat \
                 template; drop --chat",
                dir.join("tokenizer_config.json").display()
            ),
            None => bail!(
                "{}: no chat_template (and no chat_template.jinja beside it): this tokenizer has \
                 no chat format; drop --chat",
                dir.join("tokenizer_config.json").display()
            ),
        }
    } else {
        None
    };
    let mut prompt_ids = Vec::with_capacity(prompts.len());
    for p in &prompts {
        let ids = match &template {
            Some(t) => {
                let mut messages = Vec::new();
                if let Some(s) = &args.system {
                    messages.push(ChatMessage::new("system", s));
                }
                messages.push(ChatMessage::new("user", p));
                let text = t.render(
                    &messages,
                    &RenderOptions {
                        add_generation_prompt: true,
                        extra: vars.clone(),
                    },
                )?;
                tokenizer.encode(&text, false)?
            }
            None => tokenizer.encode(p, true)?,
        };
        prompt_ids.push(ids);
    }
    let model =
        bindscope_models::registry::load_causal_lm(&ckpt, device, &args.model_opts.load_options())?;
    let info = model.info();
    let context = info.input_size[0];
    let (longest_at, longest) = prompt_ids
        .iter()
        .enumerate()
        .map(|(i, ids)| (i, ids.len()))
        .max_by_key(|&(_, l)| l)
        .unwrap_or((0, 0));
    if longest >= context {
        bail!(
            "prompt {} has {longest} token{}: the model's context is {context} positions \
             (max_position_embeddings, or what its rope scaling extends it to), which leaves no \
             room for a new token; shorten it",
            longest_at + 1,
            if longest == 1 { "" } else { "s" },
        );
    }
    let max_new_tokens = args.max_new_tokens.min(context - longest);
    if max_new_tokens < args.max_new_tokens {
        eprintln!(
            "note: prompt {} has {longest} tokens and the model's context is {context} positions: \
             at most {max_new_tokens} new tokens (--max-new-tokens {})",
            longest_at + 1,
            args.max_new_tokens
        );
    }
    let sampling = temperature.map(|temperature| Sampling {
        temperature,
        top_p: args.top_p.or(defaults.top_p).unwrap_or(1.0),
        top_k: args.top_k.or(defaults.top_k).unwrap_or(50),
        seed: args.seed.unwrap_or(0),
    });
    if temperature.is_none() && defaults.do_sample == Some(true) {
        eprintln!(
            "note: generation_config.json sets do_sample (temperature {}, top_k {}, top_p {}); \
             decoding greedily — give --temperature to sample",
            defaults.temperature.map_or("1".into(), |t| t.to_string()),
            defaults.top_k.map_or("50".into(), |t| t.to_string()),
            defaults.top_p.map_or("1".into(), |t| t.to_string()),
        );
    }
    let eos = if defaults.eos_token_ids.is_empty() {
        model.eos_token_ids()
    } else {
        defaults.eos_token_ids.clone()
    };
    // transformers pads with pad_token_id, else the first EOS id.
    let pad = defaults
        .pad_token_id
        .or(model.pad_token_id())
        .or(eos.first().copied())
        .unwrap_or(0);
    if prompt_ids.len() > 1 && (pad as usize) >= info.embed_dim {
        bail!(
            "pad_token_id {pad} (generation_config.json / config.json) is outside the model's \
             vocabulary of {} ids: a batch cannot be padded with it",
            info.embed_dim
        );
    }
    let opts = GenerateOptions {
        max_new_tokens,
        eos_token_ids: eos,
        ignore_eos: args.ignore_eos,
        min_new_tokens: 0,
        pad_token_id: pad,
        sampling,
        top_logits: args.top_logits.unwrap_or(0),
        repetition_penalty: args
            .repetition_penalty
            .or(defaults.repetition_penalty)
            .unwrap_or(1.0),
        use_cache: true,
    };
    let gens = generate::generate(model.as_ref(), &prompt_ids, &opts, device)?;
    let mut lines = Vec::with_capacity(gens.len());
    for (prompt, g) in prompts.iter().zip(&gens) {
        let text = tokenizer.decode(&g.generated_ids, true)?;
        if args.json {
            let mut v = serde_json::json!({
                "prompt": prompt,
                "prompt_ids": g.prompt_ids,
                "generated_ids": g.generated_ids,
                "text": text,
                "stopped_on_eos": g.stopped_on_eos,
            });
            if args.top_logits.is_some() {
                v["top_logits"] = serde_json::json!(
                    g.top_logits
                        .iter()
                        .map(|step| step
                            .iter()
                            .map(|(id, l)| serde_json::json!([id, l]))
                            .collect::<Vec<_>>())
                        .collect::<Vec<_>>()
                );
            }
            lines.push(serde_json::to_string(&v)?);
        } else {
            lines.push(text);
        }
    }
    let several = lines.len() > 1 && !args.json;
    for (i, l) in lines.iter().enumerate() {
        if several {
            println!("== prompt {} ==", i + 1);
        }
        println!("{l}");
    }
    Ok(())
}
