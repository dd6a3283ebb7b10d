//! Chat templates against transformers 5.24's `apply_chat_template(messages, tokenize=False,
//! add_generation_prompt=…, **extra)`.
//!
//! The references are in `tests/fixtures/chat/` (made by `tests/fixtures/gen/chat.py`; exact
//! string equality everywhere, no tolerance):
//! - `smollm2.json`, `qwen3.json`: the real SmolLM2-135M-Instruct and Qwen3 templates and
//!   special tokens (committed, Apache-2.0) and their renderings: with and without a system
//!   message and a generation prompt, multi-turn, Qwen3's `enable_thinking` and its handling of
//!   `<think>` reasoning in earlier and final assistant turns;
//! - `probes.json`: small templates probing the Jinja environment transformers builds
//!   (whitespace control, loop controls, undefined values, `raise_exception`, `tojson`, Python
//!   string methods, slicing, how values print, errors);
//! - `tojson.json`: Python's `json.dumps(value, ensure_ascii=False, ...)` for awkward strings,
//!   floats and nesting;
//! - `dirs.json`: tokenizer directories and which template transformers picks from them.
//!
//! With `BINDSCOPE_REAL_MODELS=DIR` the real tokenizer directories are loaded with
//! `ChatTemplate::from_dir` as well and must give the same renderings; without it that test
//! prints a note and returns.

use bindscope_models::generate::chat::{ChatError, ChatMessage, ChatTemplate, RenderOptions};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Deserialize)]
struct TemplateFixture {
    source: String,
    license: String,
    chat_template: String,
    special_tokens: BTreeMap<String, String>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    #[serde(default)]
    template: Option<String>,
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    extra: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    expected: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    error_line: Option<usize>,
}

impl Case {
    fn options(&self) -> RenderOptions {
        RenderOptions {
            add_generation_prompt: self.add_generation_prompt,
            extra: self.extra.clone(),
        }
    }
}

#[derive(Deserialize)]
struct Probes {
    special_tokens: BTreeMap<String, String>,
    cases: Vec<Case>,
}

fn chat_fixture(file: &str) -> PathBuf {
    crate::common::fixture("chat").join(file)
}

fn load<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = chat_fixture(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn template_fixture(file: &str) -> TemplateFixture {
    let f: TemplateFixture = load(file);
    assert_eq!(f.license, "Apache-2.0", "{file}: {}", f.source);
    f
}

fn case<'a>(f: &'a TemplateFixture, name: &str) -> &'a Case {
    f.cases
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("fixture has no case '{name}'"))
}

/// Renders every case of `f` with `template` and compares with transformers' string.
fn check_cases(f: &TemplateFixture, template: &ChatTemplate, expected_names: &[&str]) {
    let names: Vec<&str> = f.cases.iter().map(|c| c.name.as_str()).collect();
    for n in expected_names {
        assert!(
            names.contains(n),
            "fixture lacks case '{n}' (has {names:?})"
        );
    }
    for c in &f.cases {
        let expected = c
            .expected
            .as_deref()
            .unwrap_or_else(|| panic!("{}: no expected rendering", c.name));
        let got = template
            .render(&c.messages, &c.options())
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(got, expected, "case '{}' ({})", c.name, template.origin());
    }
}

const COMMON: &[&str] = &[
    "user",
    "user_gen",
    "system_user",
    "system_user_gen",
    "multi_turn",
    "multi_turn_gen",
    "system_multi_turn_gen",
    "ends_with_assistant",
];

#[test]
fn smollm2_template_matches_transformers() {
    let f = template_fixture("smollm2.json");
    let t = ChatTemplate::new(
        "smollm2.json",
        f.chat_template.clone(),
        f.special_tokens.clone(),
    )
    .unwrap();
    check_cases(&f, &t, COMMON);
}

#[test]
fn smollm2_inserts_its_default_system_prompt() {
    // SmolLM2's template adds its own system message when the conversation has none, and
    // none when it has one: the reference shows both, and so must the rendering.
    let f = template_fixture("smollm2.json");
    let t = ChatTemplate::new(
        "smollm2.json",
        f.chat_template.clone(),
        f.special_tokens.clone(),
    )
    .unwrap();
    let default_system = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, \
                          trained by Hugging Face<|im_end|>\n";
    let user = case(&f, "user_gen");
    assert!(
        user.expected
            .as_deref()
            .unwrap()
            .starts_with(default_system)
    );
    let got = t.render(&user.messages, &user.options()).unwrap();
    assert!(got.starts_with(default_system), "{got:?}");
    assert!(got.ends_with("<|im_start|>assistant\n"), "{got:?}");
    let system = case(&f, "system_user_gen");
    let got = t.render(&system.messages, &system.options()).unwrap();
    assert!(!got.contains("SmolLM"), "{got:?}");
    assert!(got.starts_with("<|im_start|>system\nYou are a terse assistant.<|im_end|>\n"));
}

#[test]
fn qwen3_template_matches_transformers() {
    let f = template_fixture("qwen3.json");
    assert!(
        !f.special_tokens.contains_key("bos_token"),
        "Qwen3 has no BOS"
    );
    let t = ChatTemplate::new(
        "qwen3.json",
        f.chat_template.clone(),
        f.special_tokens.clone(),
    )
    .unwrap();
    let mut names = COMMON.to_vec();
    names.extend([
        "thinking_false_gen",
        "thinking_true_gen",
        "thinking_false_no_gen",
        "system_multi_turn_thinking_false_gen",
        "think_earlier_turn_gen",
        "think_last_turn",
        "plain_last_turn",
        "system_not_first",
    ]);
    check_cases(&f, &t, &names);
}

#[test]
fn qwen3_reasoning_and_thinking_switch() {
    // What the Qwen3 cases exercise, checked on the renderings themselves.
    let f = template_fixture("qwen3.json");
    let t = ChatTemplate::new(
        "qwen3.json",
        f.chat_template.clone(),
        f.special_tokens.clone(),
    )
    .unwrap();
    let render = |name: &str| {
        let c = case(&f, name);
        t.render(&c.messages, &c.options()).unwrap()
    };
    // enable_thinking=False pre-fills an empty think block; True (or unset) does not.
    assert!(
        render("thinking_false_gen").ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    );
    assert!(render("thinking_true_gen").ends_with("<|im_start|>assistant\n"));
    assert_eq!(render("thinking_true_gen"), render("user_gen"));
    // Reasoning of a turn before the last user query is dropped ...
    let earlier = render("think_earlier_turn_gen");
    assert!(!earlier.contains("The user asks about France"), "{earlier}");
    assert!(
        earlier.contains("<|im_start|>assistant\nParis.<|im_end|>"),
        "{earlier}"
    );
    // ... and kept for the turn after it.
    let last = render("think_last_turn");
    assert!(!last.contains("The user asks about France"), "{last}");
    assert!(
        last.contains("<|im_start|>assistant\n<think>\nJapan's capital is Tokyo.\n</think>\n\nTokyo.<|im_end|>"),
        "{last}"
    );
}

#[test]
fn probes_match_transformers_jinja_environment() {
    let p: Probes = load("probes.json");
    assert!(
        p.cases.len() >= 20,
        "probes.json has {} cases",
        p.cases.len()
    );
    for c in &p.cases {
        let source = c.template.clone().expect("probe template");
        let origin = format!("probe {}", c.name);
        let compiled = ChatTemplate::new(origin.clone(), source, p.special_tokens.clone());
        match (&c.expected, c.error_type.as_deref()) {
            (Some(expected), _) => {
                let t = compiled.unwrap_or_else(|e| panic!("{}: {e}", c.name));
                let got = t
                    .render(&c.messages, &c.options())
                    .unwrap_or_else(|e| panic!("{}: {e}", c.name));
                assert_eq!(&got, expected, "probe '{}'", c.name);
            }
            (None, Some("TemplateSyntaxError")) => match compiled {
                Err(ChatError::Syntax {
                    origin: o, line, ..
                }) => {
                    assert_eq!(o, origin);
                    assert_eq!(line, c.error_line, "probe '{}': line", c.name);
                }
                other => panic!("probe '{}': expected a syntax error, got {other:?}", c.name),
            },
            (None, Some(kind)) => {
                let t = compiled.unwrap_or_else(|e| panic!("{}: {e}", c.name));
                let err = t.render(&c.messages, &c.options()).unwrap_err();
                match (kind, &err) {
                    // raise_exception raises jinja2's bare TemplateError with the message.
                    (
                        "TemplateError",
                        ChatError::Raised {
                            message, origin: o, ..
                        },
                    ) => {
                        assert_eq!(Some(message), c.error.as_ref(), "probe '{}'", c.name);
                        assert_eq!(o, &origin);
                        let shown = err.to_string();
                        assert!(
                            shown.contains(message.as_str()) && shown.contains(&origin),
                            "{shown}"
                        );
                    }
                    (
                        "UndefinedError",
                        ChatError::Render {
                            origin: o, detail, ..
                        },
                    ) => {
                        assert_eq!(o, &origin);
                        assert!(detail.contains("undefined"), "{detail}");
                    }
                    _ => panic!(
                        "probe '{}': transformers raised {kind}, got {err:?}",
                        c.name
                    ),
                }
            }
            (None, None) => panic!("probe '{}': neither expected nor error", c.name),
        }
    }
}

#[derive(Deserialize)]
struct ToJsonCase {
    name: String,
    value: serde_json::Value,
    kwargs: serde_json::Map<String, serde_json::Value>,
    expected: String,
}

#[test]
fn tojson_matches_python_json_dumps() {
    #[derive(Deserialize)]
    struct File {
        cases: Vec<ToJsonCase>,
    }
    let f: File = load("tojson.json");
    assert!(f.cases.iter().any(|c| c.name == "non_ascii_and_html"));
    for c in &f.cases {
        // The filter's keyword arguments as Jinja source: `ensure_ascii=true, indent=2, ...`.
        let args: Vec<String> = c.kwargs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let call = if args.is_empty() {
            "tojson".to_string()
        } else {
            format!("tojson({})", args.join(", "))
        };
        let t = ChatTemplate::new(
            format!("tojson {}", c.name),
            format!("{{{{ value | {call} }}}}"),
            BTreeMap::new(),
        )
        .unwrap();
        let mut extra = serde_json::Map::new();
        extra.insert("value".into(), c.value.clone());
        let opts = RenderOptions {
            add_generation_prompt: false,
            extra,
        };
        let got = t
            .render(&[ChatMessage::new("user", "x")], &opts)
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(got, c.expected, "tojson case '{}'", c.name);
    }
    // Jinja's own tojson would write `\u003c` for `<`; transformers' (and ours) does not.
    let html = &f
        .cases
        .iter()
        .find(|c| c.name == "non_ascii_and_html")
        .unwrap()
        .expected;
    assert!(
        html.contains("<b>bold</b> & 'quote'") && html.contains("東京"),
        "{html}"
    );
}

#[derive(Deserialize)]
struct DirCase {
    name: String,
    files: serde_json::Map<String, serde_json::Value>,
    renders: Vec<DirRender>,
}

#[derive(Deserialize)]
struct DirRender {
    template_name: Option<String>,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    expected: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

fn scratch_dir(tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bindscope-chat-{}-{tag}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `files` (name → JSON object, or text) into `dir`.
fn write_files(dir: &Path, files: &serde_json::Map<String, serde_json::Value>) {
    for (name, content) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let text = match content {
            serde_json::Value::String(s) => s.clone(),
            other => serde_json::to_string_pretty(other).unwrap(),
        };
        std::fs::write(&path, text).unwrap();
    }
}

#[test]
fn template_selection_in_a_directory_matches_transformers() {
    #[derive(Deserialize)]
    struct File {
        cases: Vec<DirCase>,
    }
    let f: File = load("dirs.json");
    let names: Vec<&str> = f.cases.iter().map(|c| c.name.as_str()).collect();
    for n in [
        "named_templates",
        "named_templates_no_default",
        "jinja_file_wins",
        "jinja_files_with_named_dir",
        "string_template_null_tokens",
    ] {
        assert!(names.contains(&n), "dirs.json lacks '{n}'");
    }
    for c in &f.cases {
        let dir = scratch_dir(&c.name);
        write_files(&dir, &c.files);
        for r in &c.renders {
            let what = format!("{} / {:?}", c.name, r.template_name);
            let loaded = ChatTemplate::from_dir_named(&dir, r.template_name.as_deref());
            match (&r.expected, &r.error) {
                (Some(expected), _) => {
                    let t = loaded
                        .unwrap_or_else(|e| panic!("{what}: {e}"))
                        .unwrap_or_else(|| panic!("{what}: no template found"));
                    let got = t
                        .render(&r.messages, &RenderOptions::default())
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(&got, expected, "{what}");
                }
                (None, Some(error)) => {
                    // transformers: "... Available template names are ['rag', 'tool_use']."
                    let err = loaded.unwrap_err();
                    match &err {
                        ChatError::NoDefaultTemplate { available, .. } => {
                            let listed = format!(
                                "[{}]",
                                available
                                    .iter()
                                    .map(|n| format!("'{n}'"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            );
                            assert!(error.contains(&listed), "{what}: {error} vs {listed}");
                            let shown = err.to_string();
                            assert!(shown.contains("rag, tool_use"), "{shown}");
                        }
                        other => panic!("{what}: expected NoDefaultTemplate, got {other:?}"),
                    }
                }
                (None, None) => panic!("{what}: neither expected nor error"),
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn no_template_is_none_and_unknown_names_are_refused() {
    let empty = scratch_dir("empty");
    assert!(ChatTemplate::from_dir(&empty).unwrap().is_none());

    let dir = scratch_dir("no-template");
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"eos_token": "</s>", "chat_template": null}"#,
    )
    .unwrap();
    assert!(ChatTemplate::from_dir(&dir).unwrap().is_none());

    let dir = scratch_dir("one-template");
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"eos_token": {"content": "</s>", "special": true}, "chat_template": "{{ eos_token }}"}"#,
    )
    .unwrap();
    let t = ChatTemplate::from_dir(&dir).unwrap().unwrap();
    assert_eq!(
        t.special_tokens().get("eos_token").map(String::as_str),
        Some("</s>")
    );
    assert!(
        t.origin()
            .ends_with("tokenizer_config.json (chat_template)"),
        "{}",
        t.origin()
    );
    match ChatTemplate::from_dir_named(&dir, Some("tool_use")) {
        Err(ChatError::UnknownTemplate {
            name, available, ..
        }) => {
            assert_eq!(name, "tool_use");
            assert_eq!(available, vec!["default".to_string()]);
        }
        other => panic!("expected UnknownTemplate, got {other:?}"),
    }

    let dir = scratch_dir("bad-template");
    std::fs::write(dir.join("tokenizer_config.json"), r#"{"chat_template": 3}"#).unwrap();
    let err = ChatTemplate::from_dir(&dir).unwrap_err();
    assert!(matches!(err, ChatError::BadField { .. }), "{err:?}");
    assert!(err.to_string().contains("tokenizer_config.json"), "{err}");

    let dir = scratch_dir("bad-json");
    std::fs::write(dir.join("tokenizer_config.json"), "{").unwrap();
    let err = ChatTemplate::from_dir(&dir).unwrap_err();
    assert!(matches!(err, ChatError::Json { .. }), "{err:?}");
}

#[test]
fn errors_name_the_template_file_and_line() {
    let dir = scratch_dir("syntax");
    std::fs::write(
        dir.join("chat_template.jinja"),
        "{% for m in messages %}\n{{ m.role }\n{% endfor %}\n",
    )
    .unwrap();
    let err = ChatTemplate::from_dir(&dir).unwrap_err();
    let shown = err.to_string();
    assert!(
        matches!(err, ChatError::Syntax { line: Some(2), .. }),
        "{err:?}"
    );
    assert!(
        shown.contains("chat_template.jinja") && shown.contains("line 2"),
        "{shown}"
    );

    let t = ChatTemplate::new("t", "{{ messages[0].content }}", BTreeMap::new()).unwrap();
    assert!(matches!(
        t.render(&[], &RenderOptions::default()),
        Err(ChatError::EmptyConversation)
    ));
    let mut extra = serde_json::Map::new();
    extra.insert("messages".into(), serde_json::json!([]));
    let opts = RenderOptions {
        add_generation_prompt: false,
        extra,
    };
    assert!(matches!(
        t.render(&[ChatMessage::new("user", "hi")], &opts),
        Err(ChatError::ReservedVariable { .. })
    ));
}

#[test]
fn strftime_now_is_local_time() {
    let t = ChatTemplate::new("t", "{{ strftime_now('%Y-%m-%d %B') }}", BTreeMap::new()).unwrap();
    let before = chrono::Local::now().format("%Y-%m-%d %B").to_string();
    let got = t
        .render(&[ChatMessage::new("user", "hi")], &RenderOptions::default())
        .unwrap();
    let after = chrono::Local::now().format("%Y-%m-%d %B").to_string();
    assert!(got == before || got == after, "{got} vs {before}");
    let bad = ChatTemplate::new("t", "{{ strftime_now('%Q') }}", BTreeMap::new()).unwrap();
    let err = bad
        .render(&[ChatMessage::new("user", "hi")], &RenderOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("strftime_now"), "{err}");
}

#[test]
fn real_tokenizer_directories_render_as_transformers() {
    let Some(root) = std::env::var_os("BINDSCOPE_REAL_MODELS") else {
        eprintln!("BINDSCOPE_REAL_MODELS not set: skipping the real tokenizer directories");
        return;
    };
    let root = PathBuf::from(root);
    for (file, sub) in [
        ("smollm2.json", "smollm2-135m-instruct"),
        ("qwen3.json", "tokenizers/qwen3"),
    ] {
        let f = template_fixture(file);
        let dir = root.join(sub);
        let t = ChatTemplate::from_dir(&dir)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("{}: no chat template", dir.display()));
        assert_eq!(
            t.source(),
            f.chat_template,
            "{file}: committed template differs"
        );
        assert_eq!(
            t.special_tokens(),
            &f.special_tokens,
            "{file}: special tokens"
        );
        check_cases(&f, &t, COMMON);
    }
}
