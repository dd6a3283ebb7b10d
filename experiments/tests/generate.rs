//! `experiments generate` (and `info` on a decoder) end to end on the tiny Llama fixture with a
//! word-level tokenizer whose word `wN` is id `N`, so a prompt spells its ids: the greedy
//! tokens equal transformers' (`tests/fixtures/llama/reference.safetensors`), a batch equals
//! its prompts one by one, `--json` / `--top-logits` have the fields, `--chat` renders
//! the tokenizer's template, sampling repeats with its seed, and bad input is refused with the
//! reason, nothing on stdout.

use crate::common::{root, scratch, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VOCAB: usize = 160; // the llama fixture's vocab_size

fn experiments(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(args)
        .env_remove("BURN_DEVICE")
        .output()
        .unwrap()
}

/// A word-level `tokenizer.json` over the fixture's whole vocabulary: `<unk>` 0, `<s>` 1,
/// `</s>` 2, `<|im_start|>` 3, `<|im_end|>` 4 (special), then `wN` = N; whitespace split, no
/// post-processor (no BOS added), decoded words joined by spaces.
fn tokenizer_json() -> String {
    let specials = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"];
    let mut vocab = serde_json::Map::new();
    for (i, s) in specials.iter().enumerate() {
        vocab.insert(s.to_string(), (i as u64).into());
    }
    for i in specials.len()..VOCAB {
        vocab.insert(format!("w{i}"), (i as u64).into());
    }
    let added: Vec<serde_json::Value> = specials
        .iter()
        .enumerate()
        .map(|(i, s)| {
            serde_json::json!({"id": i, "content": s, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    })
    .to_string()
}

/// A ChatML-like template with a default system message, as SmolLM2's has.
const TEMPLATE: &str = "{% if messages[0]['role'] != 'system' %}<|im_start|> w10 <|im_end|> {% endif %}\
{% for m in messages %}<|im_start|> {{ m['content'] }} <|im_end|> {% endfor %}\
{% if add_generation_prompt %}<|im_start|> w11 {% endif %}";

/// The llama fixture with the tokenizer (and, when `chat`, a template) in a scratch dir.
fn checkpoint(tag: &str, chat: bool) -> PathBuf {
    let dir = scratch("generate", tag);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors", "generation_config.json"] {
        std::fs::copy(root().join("tests/fixtures/llama").join(f), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json()).unwrap();
    let mut cfg = serde_json::json!({"eos_token": "</s>", "bos_token": "<s>"});
    if chat {
        cfg["chat_template"] = TEMPLATE.into();
    }
    std::fs::write(dir.join("tokenizer_config.json"), cfg.to_string()).unwrap();
    dir
}

fn words(ids: &[i64]) -> String {
    ids.iter()
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn reference_ids(key: &str) -> (Vec<usize>, Vec<i64>) {
    let bytes = std::fs::read(root().join("tests/fixtures/llama/reference.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(key).unwrap();
    let v = t
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (t.shape().to_vec(), v)
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    assert!(o.status.success(), "{}", text(o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn refused(o: &Output, needle: &str) {
    assert!(!o.status.success(), "expected a refusal: {}", text(o));
    assert!(o.stdout.is_empty(), "partial output: {}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(needle), "'{needle}' not in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn greedy_tokens_equal_transformers_and_json_has_the_fields() {
    let dir = checkpoint("greedy", false);
    let (_, prompt) = reference_ids("greedy_prompt");
    let (_, want) = reference_ids("greedy_ids");
    let o = experiments(&[
        "generate",
        "--model",
        &s(&dir),
        "--prompt",
        &words(&prompt),
        "--max-new-tokens",
        "20",
        "--ignore-eos",
        "--json",
        "--top-logits",
        "3",
    ]);
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 1);
    let v = &lines[0];
    let ids: Vec<i64> = serde_json::from_value(v["prompt_ids"].clone()).unwrap();
    assert_eq!(ids, prompt);
    let got: Vec<i64> = serde_json::from_value(v["generated_ids"].clone()).unwrap();
    assert_eq!(got, want, "transformers' greedy tokens");
    assert_eq!(v["text"], words(&want));
    let top = v["top_logits"].as_array().unwrap();
    assert_eq!(top.len(), 20);
    for (step, pairs) in top.iter().enumerate() {
        let pairs = pairs.as_array().unwrap();
        assert_eq!(pairs.len(), 3);
        assert_eq!(pairs[0][0].as_i64().unwrap(), want[step], "greedy = top-1");
        let l: Vec<f64> = pairs.iter().map(|p| p[1].as_f64().unwrap()).collect();
        assert!(l[0] >= l[1] && l[1] >= l[2], "highest first: {l:?}");
    }
    // Plain output: the text alone.
    let o = experiments(&[
        "generate",
        "--model",
        &s(&dir),
        "--prompt",
        &words(&prompt),
        "--max-new-tokens",
        "20",
        "--ignore-eos",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim_end(), words(&want));
}

#[test]
fn a_batch_gives_what_each_prompt_gives_alone() {
    let dir = checkpoint("batch", false);
    let prompts = ["w20 w21 w22 w23 w24 w25 w26", "w40 w41", "w60 w61 w62 w63"];
    let mut args = vec!["generate", "--model"];
    let d = s(&dir);
    args.push(&d);
    for p in &prompts {
        args.extend(["--prompt", p]);
    }
    args.extend(["--max-new-tokens", "12", "--ignore-eos", "--json"]);
    let batch = json_lines(&experiments(&args));
    assert_eq!(batch.len(), 3);
    for (p, b) in prompts.iter().zip(&batch) {
        let alone = json_lines(&experiments(&[
            "generate",
            "--model",
            &d,
            "--prompt",
            p,
            "--max-new-tokens",
            "12",
            "--ignore-eos",
            "--json",
        ]));
        assert_eq!(alone[0]["generated_ids"], b["generated_ids"], "{p}");
        assert_eq!(b["prompt"], *p);
    }
    // --prompts FILE: the same batch.
    let file = dir.join("prompts.txt");
    std::fs::write(&file, prompts.join("\n") + "\n").unwrap();
    let from_file = json_lines(&experiments(&[
        "generate",
        "--model",
        &d,
        "--prompts",
        &s(&file),
        "--max-new-tokens",
        "12",
        "--ignore-eos",
        "--json",
    ]));
    assert_eq!(from_file, batch);
}

#[test]
fn chat_renders_the_template_with_its_default_or_the_given_system_message() {
    let dir = checkpoint("chat", true);
    let d = s(&dir);
    let run = |extra: &[&str]| {
        let mut a = vec!["generate", "--model", &d, "--chat", "--prompt", "w30 w31"];
        a.extend_from_slice(extra);
        a.extend(["--max-new-tokens", "2", "--json"]);
        json_lines(&experiments(&a))
    };
    let default = run(&[]);
    let ids: Vec<i64> = serde_json::from_value(default[0]["prompt_ids"].clone()).unwrap();
    // default system message, user turn, generation prompt — no BOS added to a chat.
    assert_eq!(ids, vec![3, 10, 4, 3, 30, 31, 4, 3, 11]);
    let system = run(&["--system", "w50"]);
    let ids: Vec<i64> = serde_json::from_value(system[0]["prompt_ids"].clone()).unwrap();
    assert_eq!(ids, vec![3, 50, 4, 3, 30, 31, 4, 3, 11]);
    // A template variable is accepted with --chat.
    let vars = run(&["--template-var", "enable_thinking=false"]);
    assert_eq!(vars[0]["prompt_ids"], default[0]["prompt_ids"]);
}

#[test]
fn sampling_repeats_with_its_seed() {
    let dir = checkpoint("sample", false);
    let d = s(&dir);
    let run = |seed: &str| {
        json_lines(&experiments(&[
            "generate",
            "--model",
            &d,
            "--prompt",
            "w7 w8 w9",
            "--temperature",
            "1.5",
            "--top-p",
            "0.9",
            "--seed",
            seed,
            "--max-new-tokens",
            "16",
            "--ignore-eos",
            "--json",
        ]))[0]["generated_ids"]
            .clone()
    };
    assert_eq!(run("3"), run("3"));
    let seeds: Vec<_> = ["1", "2", "3", "4"].iter().map(|s| run(s)).collect();
    assert!(
        seeds.iter().any(|x| *x != seeds[0]),
        "seeds all gave {:?}",
        seeds[0]
    );
}

#[test]
fn bad_input_is_refused_with_the_reason_and_no_output() {
    let dir = checkpoint("bad", false);
    let d = s(&dir);
    let run = |extra: &[&str]| {
        let mut a = vec!["generate", "--model", &d];
        a.extend_from_slice(extra);
        experiments(&a)
    };
    refused(&run(&["--prompt", "w5", "--chat"]), "no chat_template");
    refused(
        &run(&["--prompt", "w5", "--system", "w6"]),
        "--system needs --chat",
    );
    refused(
        &run(&["--prompt", "w5", "--top-p", "0.5"]),
        "--top-p needs --temperature",
    );
    refused(
        &run(&["--prompt", "w5", "--top-logits", "2"]),
        "--top-logits needs --json",
    );
    refused(
        &run(&["--prompt", "w5", "--temperature", "0"]),
        "--temperature must be positive",
    );
    refused(&run(&[]), "no prompt");
    // Longer than the context (max_position_embeddings 64), or filling it.
    let long = (0..70)
        .map(|i| format!("w{}", 5 + i))
        .collect::<Vec<_>>()
        .join(" ");
    refused(&run(&["--prompt", &long]), "context");
    let exact = (0..64)
        .map(|i| format!("w{}", 5 + i))
        .collect::<Vec<_>>()
        .join(" ");
    refused(&run(&["--prompt", &exact]), "leaves no room");
    // A prompts file that is not UTF-8: the line and column.
    let bad = dir.join("latin1.txt");
    std::fs::write(&bad, b"w5 w6\nw7 caf\xe9\n").unwrap();
    refused(&run(&["--prompts", &s(&bad)]), "latin1.txt:2:7");
    let blank = dir.join("blank.txt");
    std::fs::write(&blank, "w5\n\nw6\n").unwrap();
    refused(&run(&["--prompts", &s(&blank)]), "blank.txt:2: empty line");
    // No tokenizer.
    let bare = scratch("generate", "bare");
    crate::common::fixture_copy("llama", &bare);
    refused(
        &experiments(&["generate", "--model", &s(&bare), "--prompt", "w5"]),
        "tokenizer.json",
    );
    // Unknown model_type and rope type, named.
    let edit = |tag: &str, f: &dyn Fn(&mut serde_json::Value)| {
        let c = checkpoint(tag, false);
        let p = c.join("config.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&p, v.to_string()).unwrap();
        c
    };
    let mistral = edit("mistral", &|v| v["model_type"] = "mistral".into());
    refused(
        &experiments(&["generate", "--model", &s(&mistral), "--prompt", "w5"]),
        "model_type 'mistral' is not a decoder language model (generate takes llama, qwen2, qwen3)",
    );
    let longrope =
        edit(
            "longrope",
            &|v| {
                v["rope_parameters"] =
                    serde_json::json!({"rope_type": "longrope", "rope_theta": 1e4})
            },
        );
    refused(
        &experiments(&["generate", "--model", &s(&longrope), "--prompt", "w5"]),
        "rope type 'longrope' is not supported",
    );
}

#[test]
fn the_context_bounds_the_new_tokens_with_a_note() {
    let dir = checkpoint("context", false);
    let medium = (0..60)
        .map(|i| format!("w{}", 5 + i))
        .collect::<Vec<_>>()
        .join(" ");
    let o = experiments(&[
        "generate",
        "--model",
        &s(&dir),
        "--prompt",
        &medium,
        "--max-new-tokens",
        "10",
        "--ignore-eos",
        "--json",
    ]);
    let v = json_lines(&o);
    assert_eq!(v[0]["generated_ids"].as_array().unwrap().len(), 4);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("at most 4 new tokens"),
        "{}",
        text(&o)
    );
}

#[test]
fn generation_config_sampling_settings_apply_as_in_transformers() {
    // top_k 1 from generation_config.json: sampling at any temperature is greedy decoding.
    let dir = checkpoint("gencfg", false);
    let p = dir.join("generation_config.json");
    let mut g: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    g["do_sample"] = true.into();
    g["top_k"] = 1.into();
    g["temperature"] = 0.6.into();
    std::fs::write(&p, g.to_string()).unwrap();
    let d = s(&dir);
    let args = [
        "--model",
        &d,
        "--prompt",
        "w7 w8 w9",
        "--max-new-tokens",
        "12",
        "--ignore-eos",
        "--json",
    ];
    let greedy = experiments(&[&["generate"], &args[..]].concat());
    assert!(
        String::from_utf8_lossy(&greedy.stderr).contains("decoding greedily"),
        "{}",
        text(&greedy)
    );
    let sample = |extra: &[&str]| {
        let o = experiments(
            &[
                &["generate", "--temperature", "5", "--seed", "9"],
                extra,
                &args[..],
            ]
            .concat(),
        );
        json_lines(&o)[0]["generated_ids"].clone()
    };
    let want = json_lines(&greedy)[0]["generated_ids"].clone();
    assert_eq!(sample(&[]), want);
    // --top-k overrides the file.
    assert_ne!(sample(&["--top-k", "0"]), want);
    // A malformed field is named.
    g["eos_token_id"] = "2".into();
    std::fs::write(&p, g.to_string()).unwrap();
    refused(
        &experiments(&[&["generate"], &args[..]].concat()),
        "generation_config.json: eos_token_id must be a token id",
    );
}

#[test]
fn several_prompts_print_as_numbered_blocks() {
    let dir = checkpoint("blocks", false);
    let o = experiments(&[
        "generate",
        "--model",
        &s(&dir),
        "--prompt",
        "w7",
        "--prompt",
        "w8 w9",
        "--max-new-tokens",
        "3",
        "--ignore-eos",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0], "== prompt 1 ==");
    assert_eq!(lines[2], "== prompt 2 ==");
}

#[test]
fn python_booleans_are_template_booleans() {
    // A template that prints the variable's type through its truth value.
    let dir = checkpoint("pybool", true);
    let p = dir.join("tokenizer_config.json");
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    c["chat_template"] = "{% if flag %}w20{% else %}w21{% endif %}".into();
    std::fs::write(&p, c.to_string()).unwrap();
    let d = s(&dir);
    let ids = |v: &str| {
        let o = experiments(&[
            "generate",
            "--model",
            &d,
            "--chat",
            "--prompt",
            "w5",
            "--template-var",
            v,
            "--max-new-tokens",
            "1",
            "--json",
        ]);
        json_lines(&o)[0]["prompt_ids"].clone()
    };
    assert_eq!(ids("flag=False"), serde_json::json!([21]));
    assert_eq!(ids("flag=True"), serde_json::json!([20]));
    assert_eq!(ids("flag=false"), serde_json::json!([21]));
}

#[test]
fn info_reports_a_decoder() {
    let dir = checkpoint("info", false);
    let o = experiments(&["info", "--model", &s(&dir), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let towers = v["towers"].as_array().unwrap();
    assert_eq!(towers.len(), 1);
    assert_eq!(towers[0]["tower"], "decoder");
    assert_eq!(towers[0]["info"]["model_type"], "llama");
    assert_eq!(towers[0]["info"]["embed_dim"], VOCAB);
    assert_eq!(towers[0]["info"]["input_size"][0], 64);
}
