//! Chat templates: the Jinja template a tokenizer ships to turn a conversation into the prompt
//! text a chat model was trained on.
//!
//! Reproduces transformers 5.24's `PreTrainedTokenizerBase.apply_chat_template(conversation,
//! tokenize=False, add_generation_prompt=…, **kwargs)` (`tokenization_utils_base.py`), which
//! renders through `render_jinja_template` and `_cached_compile_jinja_template` in
//! `utils/chat_template_utils.py`:
//!
//! - **Where the template comes from** ([`ChatTemplate::from_dir`], as
//!   `PreTrainedTokenizerBase._from_pretrained` loads it): `chat_template.jinja` (the default
//!   template) and `additional_chat_templates/NAME.jinja` (named ones) when any of them exist,
//!   otherwise `tokenizer_config.json`'s `chat_template`, a string (the default) or a list of
//!   `{"name", "template"}` objects. Without a name the `default` template is used
//!   (`get_chat_template`); several templates and none named `default` is an error naming them.
//! - **The Jinja environment**: an `ImmutableSandboxedEnvironment(trim_blocks=True,
//!   lstrip_blocks=True)` with loop controls (`{% break %}`, `{% continue %}`), Jinja2's default
//!   `Undefined` (printing an undefined name gives `""`, iterating it gives nothing, testing it
//!   is false, reading an attribute of it is an error: minijinja's
//!   [`UndefinedBehavior::Lenient`]), no autoescaping, one trailing newline of the template
//!   dropped, and transformers' globals `raise_exception(message)`, `strftime_now(format)` and
//!   its `tojson` filter (`json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//!   sort_keys=False)`: unlike Jinja's own it does not escape `<`, `>`, `&`, `'`). Python string
//!   and dict methods (`startswith`, `split`, `strip`, `items`, ...) come from minijinja-contrib's
//!   `pycompat`; values print as Python's `str()` prints them (`True`, `None`, `1.0`,
//!   `['a', 1]`).
//! - **The variables** (`render_jinja_template`): `messages`, `tools` and `documents` (`None`
//!   unless given in [`RenderOptions::extra`]), `add_generation_prompt`, the tokenizer's
//!   `special_tokens_map` (transformers 5.x: the named tokens `bos_token`, `eos_token`,
//!   `unk_token`, `sep_token`, `pad_token`, `cls_token`, `mask_token` that are set, as strings; no
//!   `additional_special_tokens`), then the caller's keyword arguments
//!   ([`RenderOptions::extra`], e.g. Qwen3's `enable_thinking`), which override special tokens
//!   of the same name.
//!
//! - **Messages**: [`ChatTemplate::render`] takes `{role, content}` strings;
//!   [`ChatTemplate::render_messages`] takes any JSON message dicts, such as a processor's
//!   content lists (`{"role": "user", "content": [{"type": "image"}, {"type": "text", "text":
//!   ...}]}`), as `ProcessorMixin.apply_chat_template` passes them to the template.
//! - **`{% generation %}` blocks** (transformers' `AssistantTracker` extension) render their
//!   body unchanged, as transformers renders them without `return_assistant_tokens_mask`.
//! - **A processor's template** ([`ChatTemplate::for_processor`], as `ProcessorMixin` loads
//!   it): `chat_template.jinja`, else the legacy `chat_template.json` (`{"chat_template": ...}`),
//!   else `processor_config.json`'s `chat_template`; never the tokenizer's.
//!
//! Not reproduced: `continue_final_message`, `return_assistant_tokens_mask` (the masks of
//! `{% generation %}` blocks), batched conversations, and transformers' choice of a `tool_use`
//! template when tools are given. Passing an unknown
//! template name is an error here, where transformers would render the name itself as a
//! template.

use minijinja::value::{Kwargs, Object, ObjectRepr, Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One message of a conversation, as transformers' chat dicts `{"role": ..., "content": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` (or whatever roles the template knows, e.g. `tool`).
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// What [`ChatTemplate::render`] passes the template besides the messages.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// `add_generation_prompt`: end with the header of an assistant turn so the model writes
    /// the reply.
    pub add_generation_prompt: bool,
    /// Further template variables, as transformers passes `apply_chat_template`'s `**kwargs`
    /// (e.g. `enable_thinking`; `tools` and `documents` replace their default `None`). They
    /// override special tokens of the same name. `messages` and `add_generation_prompt` are
    /// refused ([`ChatError::ReservedVariable`]). JSON objects reach the template with their
    /// keys in `serde_json::Map` order.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Why a chat template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `tokenizer_config.json` (or `special_tokens_map.json`) is not valid JSON.
    #[error("{}: not valid JSON: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// A key of `tokenizer_config.json` has the wrong shape.
    #[error("{}: `{key}` must be {expected}, found {found}", path.display())]
    BadField {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What transformers accepts there.
        expected: &'static str,
        /// What the file holds.
        found: String,
    },
    /// Several named templates and none called `default`, and no name was chosen.
    #[error(
        "{origin}: several chat templates and none named `default`: choose one by name (available: {})",
        available.join(", ")
    )]
    NoDefaultTemplate {
        /// Where the templates are.
        origin: String,
        /// Their names, sorted.
        available: Vec<String>,
    },
    /// The chosen template name does not exist.
    #[error("{origin}: no chat template named `{name}` (available: {})", available.join(", "))]
    UnknownTemplate {
        /// Where the templates are.
        origin: String,
        /// The name asked for.
        name: String,
        /// The names there are, sorted.
        available: Vec<String>,
    },
    /// The template does not parse.
    #[error("{origin}{}: chat template syntax error: {detail}", at_line(*line))]
    Syntax {
        /// The template's source (file, and key within it).
        origin: String,
        /// The line of the template (1-based), where known.
        line: Option<usize>,
        /// What is wrong.
        detail: String,
    },
    /// The template called `raise_exception(message)`: it refuses this conversation.
    #[error("{origin}{}: the chat template refused the conversation: {message}", at_line(*line))]
    Raised {
        /// The template's source.
        origin: String,
        /// The line of the `raise_exception` call, where known.
        line: Option<usize>,
        /// The template's message, verbatim.
        message: String,
    },
    /// Rendering failed otherwise (an attribute of an undefined value, a bad filter argument, ...).
    #[error("{origin}{}: rendering the chat template failed: {detail}", at_line(*line))]
    Render {
        /// The template's source.
        origin: String,
        /// The line of the template, where known.
        line: Option<usize>,
        /// What went wrong.
        detail: String,
    },
    /// No messages (transformers: "Cannot apply chat template to an empty conversation").
    #[error("cannot apply a chat template to an empty conversation: give at least one message")]
    EmptyConversation,
    /// [`RenderOptions::extra`] names a variable the renderer sets itself.
    #[error("`{name}` cannot be passed as an extra template variable: it is set by the renderer")]
    ReservedVariable {
        /// `messages` or `add_generation_prompt`.
        name: String,
    },
}

fn at_line(line: Option<usize>) -> String {
    line.map(|l| format!(" (line {l})")).unwrap_or_default()
}

/// The special-token attributes transformers 5.x puts in `special_tokens_map`
/// (`PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES`), in its order.
pub const SPECIAL_TOKEN_KEYS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// The name of the template a lone string `chat_template` / `chat_template.jinja` has.
const DEFAULT_NAME: &str = "default";

/// A compiled chat template with the special tokens it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    origin: String,
    source: String,
    special_tokens: BTreeMap<String, String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("special_tokens", &self.special_tokens)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles template text `source`. `origin` names it in errors (e.g.
    /// `DIR/tokenizer_config.json (chat_template)`); `special_tokens` are the variables
    /// transformers passes as `**special_tokens_map` (`bos_token` → `<|im_start|>`, ...).
    ///
    /// Errors: [`ChatError::Syntax`] with the line of the first syntax error.
    pub fn new(
        origin: impl Into<String>,
        source: impl Into<String>,
        special_tokens: BTreeMap<String, String>,
    ) -> Result<Self, ChatError> {
        let origin = origin.into();
        let source = source.into();
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| ChatError::Syntax {
                origin: origin.clone(),
                line: None,
                detail: describe(&e),
            })?;
        env.set_syntax(syntax);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", tojson_filter);
        env.add_filter("string", |v: &Value| py_str(v));
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(origin.clone(), generation_blocks_as_plain(&source))
            .map_err(|e| ChatError::Syntax {
                origin: origin.clone(),
                line: e.line(),
                detail: describe(&e),
            })?;
        Ok(Self {
            env,
            origin,
            source,
            special_tokens,
        })
    }

    /// The default chat template of the tokenizer in `dir`, with its special tokens; `None` when
    /// the tokenizer has none (no `chat_template.jinja`, no `additional_chat_templates/`, no
    /// `chat_template` in `tokenizer_config.json`). See [`ChatTemplate::from_dir_named`].
    pub fn from_dir(dir: &Path) -> Result<Option<Self>, ChatError> {
        Self::from_dir_named(dir, None)
    }

    /// The chat template called `name` (`None`: the default one) of the tokenizer in `dir`.
    ///
    /// Templates, as transformers 5.24 loads them: `chat_template.jinja` (named `default`) and
    /// `additional_chat_templates/NAME.jinja` when any exist, and then `tokenizer_config.json`'s
    /// `chat_template` is ignored; otherwise that key, a string (named `default`) or a list of
    /// `{"name", "template"}` objects. Special tokens: the keys of [`SPECIAL_TOKEN_KEYS`] in
    /// `tokenizer_config.json`, strings or AddedToken objects `{"content": ...}` (null: not
    /// set), a key the config lacks taken from `special_tokens_map.json` where present.
    ///
    /// Errors: unreadable files, invalid JSON, a `chat_template` or special token of the wrong
    /// shape, [`ChatError::NoDefaultTemplate`] / [`ChatError::UnknownTemplate`] naming the
    /// templates there are, [`ChatError::Syntax`].
    pub fn from_dir_named(dir: &Path, name: Option<&str>) -> Result<Option<Self>, ChatError> {
        let config_path = dir.join("tokenizer_config.json");
        let config = read_json(&config_path)?;
        let special_tokens = special_tokens_of(dir)?;

        // (name, origin, source), the jinja files first as transformers gives them priority.
        let mut templates: Vec<(String, String, String)> = Vec::new();
        let jinja = dir.join("chat_template.jinja");
        if jinja.is_file() {
            templates.push((
                DEFAULT_NAME.into(),
                jinja.display().to_string(),
                read(&jinja)?,
            ));
        }
        let extra_dir = dir.join("additional_chat_templates");
        if extra_dir.is_dir() {
            let entries = std::fs::read_dir(&extra_dir).map_err(|source| ChatError::Io {
                path: extra_dir.clone(),
                source,
            })?;
            let mut files = Vec::new();
            for entry in entries {
                let path = entry
                    .map_err(|source| ChatError::Io {
                        path: extra_dir.clone(),
                        source,
                    })?
                    .path();
                if path.is_file() && path.extension().is_some_and(|e| e == "jinja") {
                    files.push(path);
                }
            }
            files.sort();
            for path in files {
                let stem = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                templates.push((stem, path.display().to_string(), read(&path)?));
            }
        }
        if templates.is_empty() {
            match config.as_ref().and_then(|c| c.get("chat_template")) {
                None | Some(serde_json::Value::Null) => {}
                Some(serde_json::Value::String(s)) => templates.push((
                    DEFAULT_NAME.into(),
                    format!("{} (chat_template)", config_path.display()),
                    s.clone(),
                )),
                Some(serde_json::Value::Array(items)) => {
                    for item in items {
                        let named = item
                            .get("name")
                            .and_then(|n| n.as_str())
                            .zip(item.get("template").and_then(|t| t.as_str()));
                        let Some((n, t)) = named else {
                            return Err(bad_template_field(&config_path, item));
                        };
                        templates.push((
                            n.to_string(),
                            format!("{} (chat_template `{n}`)", config_path.display()),
                            t.to_string(),
                        ));
                    }
                }
                Some(other) => return Err(bad_template_field(&config_path, other)),
            }
        }
        if templates.is_empty() {
            return Ok(None);
        }

        let mut available: Vec<String> = templates.iter().map(|(n, _, _)| n.clone()).collect();
        available.sort();
        available.dedup();
        let wanted = name.unwrap_or(DEFAULT_NAME);
        let Some((_, origin, source)) = templates.into_iter().find(|(n, _, _)| n == wanted) else {
            let origin = dir.display().to_string();
            return Err(match name {
                None => ChatError::NoDefaultTemplate { origin, available },
                Some(n) => ChatError::UnknownTemplate {
                    origin,
                    name: n.to_string(),
                    available,
                },
            });
        };
        Self::new(origin, source, special_tokens).map(Some)
    }

    /// The chat template of the processor in `dir`, as transformers 5's `ProcessorMixin`
    /// loads it: `chat_template.jinja`, else `chat_template.json` (`{"chat_template": "..."}`,
    /// the legacy file), else `processor_config.json`'s `chat_template`; `None` when there is
    /// none (transformers then refuses `apply_chat_template`). The tokenizer's own template is
    /// not a fallback. Special tokens as [`Self::from_dir_named`].
    ///
    /// Errors: unreadable files, invalid JSON, a `chat_template` that is not a string,
    /// [`ChatError::Syntax`].
    pub fn for_processor(dir: &Path) -> Result<Option<Self>, ChatError> {
        if dir.join("chat_template.jinja").is_file() {
            return Self::from_dir(dir);
        }
        for (file, key) in [
            ("chat_template.json", "chat_template"),
            ("processor_config.json", "chat_template"),
        ] {
            let path = dir.join(file);
            let Some(json) = read_json(&path)? else {
                continue;
            };
            match json.get(key) {
                None | Some(serde_json::Value::Null) => continue,
                Some(serde_json::Value::String(source)) => {
                    return Self::new(
                        format!("{} ({key})", path.display()),
                        source.clone(),
                        special_tokens_of(dir)?,
                    )
                    .map(Some);
                }
                Some(other) => {
                    return Err(ChatError::BadField {
                        path,
                        key: key.into(),
                        expected: "a string (the Jinja template)",
                        found: short_json(other),
                    });
                }
            }
        }
        Ok(None)
    }

    /// Where the template came from (the name errors use).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The special tokens passed to the template (`bos_token` → its string, ...).
    pub fn special_tokens(&self) -> &BTreeMap<String, String> {
        &self.special_tokens
    }

    /// The prompt text for `messages`: transformers'
    /// `apply_chat_template(messages, tokenize=False, add_generation_prompt=…, **extra)`.
    ///
    /// Errors: [`ChatError::EmptyConversation`], [`ChatError::ReservedVariable`],
    /// [`ChatError::Raised`] with the template's own message when it calls
    /// `raise_exception`, [`ChatError::Render`] for any other failure.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        opts: &RenderOptions,
    ) -> Result<String, ChatError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                PyDict::value(vec![
                    ("role".into(), Value::from(m.role.as_str())),
                    ("content".into(), Value::from(m.content.as_str())),
                ])
            })
            .collect();
        self.render_values(messages, opts)
    }

    /// The prompt text for message dicts of any shape (`{"role": ..., "content": [...]}` as a
    /// processor's chat template expects), passed to the template as they are (objects keep
    /// their keys in `serde_json::Map` order). Otherwise as [`Self::render`].
    ///
    /// Errors: as [`Self::render`].
    pub fn render_messages(
        &self,
        messages: &[serde_json::Value],
        opts: &RenderOptions,
    ) -> Result<String, ChatError> {
        self.render_values(messages.iter().map(json_to_value).collect(), opts)
    }

    fn render_values(
        &self,
        messages: Vec<Value>,
        opts: &RenderOptions,
    ) -> Result<String, ChatError> {
        if messages.is_empty() {
            return Err(ChatError::EmptyConversation);
        }
        let mut vars: Vec<(String, Value)> = Vec::new();
        let set = |vars: &mut Vec<(String, Value)>, key: &str, value: Value| match vars
            .iter_mut()
            .find(|(k, _)| k == key)
        {
            Some(slot) => slot.1 = value,
            None => vars.push((key.to_string(), value)),
        };
        set(&mut vars, "messages", Value::from(messages));
        set(&mut vars, "tools", Value::from(()));
        set(&mut vars, "documents", Value::from(()));
        set(
            &mut vars,
            "add_generation_prompt",
            Value::from(opts.add_generation_prompt),
        );
        for (k, v) in &self.special_tokens {
            set(&mut vars, k, Value::from(v.as_str()));
        }
        for (k, v) in &opts.extra {
            if k == "messages" || k == "add_generation_prompt" {
                return Err(ChatError::ReservedVariable { name: k.clone() });
            }
            set(&mut vars, k, json_to_value(v));
        }
        let ctx = PyDict::value(vars);
        let template = self
            .env
            .get_template(&self.origin)
            .map_err(|e| self.render_error(&e))?;
        template.render(ctx).map_err(|e| self.render_error(&e))
    }

    fn render_error(&self, e: &Error) -> ChatError {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cause {
            if let Some(r) = c.downcast_ref::<TemplateRaised>() {
                return ChatError::Raised {
                    origin: self.origin.clone(),
                    line: e.line(),
                    message: r.0.clone(),
                };
            }
            cause = c.source();
        }
        ChatError::Render {
            origin: self.origin.clone(),
            line: e.line(),
            detail: describe(e),
        }
    }
}

/// A minijinja error in words: its kind and detail, then its causes'.
fn describe(e: &Error) -> String {
    let mut out = match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let _ = write!(out, ": {c}");
        cause = c.source();
    }
    out
}

fn read(path: &Path) -> Result<String, ChatError> {
    std::fs::read_to_string(path).map_err(|source| ChatError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The special tokens of the tokenizer in `dir`: the keys of [`SPECIAL_TOKEN_KEYS`] in
/// `tokenizer_config.json` (strings or AddedToken objects; null: not set), a key it lacks taken
/// from `special_tokens_map.json` where present.
fn special_tokens_of(dir: &Path) -> Result<BTreeMap<String, String>, ChatError> {
    let config_path = dir.join("tokenizer_config.json");
    let config = read_json(&config_path)?;
    let map_path = dir.join("special_tokens_map.json");
    let special_map = read_json(&map_path)?;
    let mut special_tokens = BTreeMap::new();
    for key in SPECIAL_TOKEN_KEYS {
        let from_config = config.as_ref().and_then(|c| c.get(key));
        let (path, value) = match from_config {
            Some(v) => (&config_path, v),
            None => match special_map.as_ref().and_then(|m| m.get(key)) {
                Some(v) => (&map_path, v),
                None => continue,
            },
        };
        if let Some(token) = token_string(path, key, value)? {
            special_tokens.insert(key.to_string(), token);
        }
    }
    Ok(special_tokens)
}

/// The template source with transformers' `{% generation %}` / `{% endgeneration %}` tags
/// (its `AssistantTracker` extension, which renders the body unchanged) turned into a block
/// that always renders: `{% if true %}` / `{% endif %}`, whitespace control kept.
fn generation_blocks_as_plain(source: &str) -> String {
    static TAG: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\{%(-|\+)?\s*(end)?generation\s*(-|\+)?%\}").expect("a valid regex")
    });
    TAG.replace_all(source, |c: &regex::Captures<'_>| {
        let open = c.get(1).map_or("", |m| m.as_str());
        let close = c.get(3).map_or("", |m| m.as_str());
        let body = if c.get(2).is_some() {
            "endif"
        } else {
            "if true"
        };
        format!("{{%{open} {body} {close}%}}")
    })
    .into_owned()
}

/// The JSON in `path`, `None` when there is no such file.
fn read_json(path: &Path) -> Result<Option<serde_json::Value>, ChatError> {
    if !path.is_file() {
        return Ok(None);
    }
    serde_json::from_str(&read(path)?)
        .map(Some)
        .map_err(|source| ChatError::Json {
            path: path.to_path_buf(),
            source,
        })
}

fn short_json(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

fn bad_template_field(path: &Path, found: &serde_json::Value) -> ChatError {
    ChatError::BadField {
        path: path.to_path_buf(),
        key: "chat_template".into(),
        expected: "a string or a list of {\"name\": ..., \"template\": ...} objects",
        found: short_json(found),
    }
}

/// A special token's string: a string, or an AddedToken object's `content`; `None` for null.
fn token_string(
    path: &Path,
    key: &str,
    value: &serde_json::Value,
) -> Result<Option<String>, ChatError> {
    match value {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => Ok(Some(s.clone())),
        serde_json::Value::Object(o) => match o.get("content") {
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(ChatError::BadField {
                path: path.to_path_buf(),
                key: key.into(),
                expected: "a string, null or an AddedToken object with a string `content`",
                found: short_json(value),
            }),
        },
        other => Err(ChatError::BadField {
            path: path.to_path_buf(),
            key: key.into(),
            expected: "a string, null or an AddedToken object with a string `content`",
            found: short_json(other),
        }),
    }
}

/// A map that keeps its keys in insertion order, as a Python dict does (minijinja's own maps
/// are built from Rust maps; this one is built from ordered pairs).
#[derive(Debug)]
struct PyDict(Vec<(String, Value)>);

impl PyDict {
    fn value(pairs: Vec<(String, Value)>) -> Value {
        Value::from_object(PyDict(pairs))
    }
}

impl Object for PyDict {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let key = key.as_str()?;
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Values(
            self.0
                .iter()
                .map(|(k, _)| Value::from(k.as_str()))
                .collect(),
        )
    }
}

/// A JSON value as a template value (objects keep their `serde_json::Map` order).
fn json_to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => Value::from(a.iter().map(json_to_value).collect::<Vec<_>>()),
        serde_json::Value::Object(o) => PyDict::value(
            o.iter()
                .map(|(k, v)| (k.clone(), json_to_value(v)))
                .collect(),
        ),
    }
}

/// Marks the error `raise_exception` returns so [`ChatTemplate::render`] can tell it apart.
#[derive(Debug)]
struct TemplateRaised(String);

impl std::fmt::Display for TemplateRaised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TemplateRaised {}

/// transformers' `raise_exception(message)`: `raise jinja2.exceptions.TemplateError(message)`.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(TemplateRaised(message)))
}

/// transformers' `strftime_now(format)`: `datetime.now().strftime(format)`, local time.
fn strftime_now(format: &str) -> Result<String, Error> {
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        )
    })?;
    Ok(out)
}

/// Prints values as Python's `str()` does, which is what Jinja2 writes for `{{ value }}`.
fn python_formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Seq | ValueKind::Map => out
            .write_str(&py_repr(value))
            .map_err(|_| Error::new(ErrorKind::WriteFailure, "write failed")),
        ValueKind::Number if !value.is_integer() => out
            .write_str(&py_repr(value))
            .map_err(|_| Error::new(ErrorKind::WriteFailure, "write failed")),
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// Python's `str()` of a template value (Jinja2's `string` filter).
fn py_str(value: &Value) -> String {
    match value.kind() {
        ValueKind::String => value.as_str().unwrap_or_default().to_string(),
        ValueKind::Undefined => String::new(),
        _ => py_repr(value),
    }
}

/// Python's `repr()` of a template value (strings quoted; `True`, `None`, lists, dicts, tuples).
fn py_repr(value: &Value) -> String {
    match value.kind() {
        ValueKind::Undefined => "Undefined".into(),
        ValueKind::None => "None".into(),
        ValueKind::Bool => if value.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number => match (value.is_integer(), f64::try_from(value.clone())) {
            (false, Ok(f)) => py_float_repr(f),
            _ => value.to_string(),
        },
        ValueKind::String => py_str_repr(value.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            let items: Vec<String> = value
                .try_iter()
                .map(|it| it.map(|v| py_repr(&v)).collect())
                .unwrap_or_default();
            if value.is_tuple() {
                if items.len() == 1 {
                    format!("({},)", items[0])
                } else {
                    format!("({})", items.join(", "))
                }
            } else {
                format!("[{}]", items.join(", "))
            }
        }
        ValueKind::Map => {
            let pairs: Vec<String> = value
                .as_object()
                .and_then(|o| o.try_iter_pairs())
                .map(|it| {
                    it.map(|(k, v)| format!("{}: {}", py_repr(&k), py_repr(&v)))
                        .collect()
                })
                .unwrap_or_default();
            format!("{{{}}}", pairs.join(", "))
        }
        _ => value.to_string(),
    }
}

/// Python's `repr(str)`: single quotes unless the text has `'` and no `"`.
fn py_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr(float)`: the shortest digits that round-trip, positional for exponents
/// −4 ≤ e < 16 (always with a fractional part, `2.0`), else `1e+16` / `1.5e-05`.
fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if f == 0.0 {
        return format!("{sign}0.0");
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                format!("{sign}{digits}{}.0", "0".repeat(int_len - digits.len()))
            } else {
                format!("{sign}{}.{}", &digits[..int_len], &digits[int_len..])
            }
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let m = if digits.len() == 1 {
            digits
        } else {
            format!("{}.{}", &digits[..1], &digits[1..])
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{esign}{:02}", exp.abs())
    }
}

/// How [`to_json`] lays out its output: Python `json.dumps`' keyword arguments.
#[derive(Debug, Clone)]
struct JsonOptions {
    /// `ensure_ascii`: escape every character outside printable ASCII as `\uXXXX`.
    ensure_ascii: bool,
    /// `indent`: `None` for one line, else the text of one level of indentation.
    indent: Option<String>,
    /// `separators[0]`: between items (default `", "` on one line, `","` when indenting).
    item_separator: String,
    /// `separators[1]`: between a key and its value (default `": "`).
    key_separator: String,
    /// `sort_keys`: objects' keys in sorted order.
    sort_keys: bool,
}

impl Default for JsonOptions {
    /// transformers' `tojson` defaults: `json.dumps(x, ensure_ascii=False)`.
    fn default() -> Self {
        Self {
            ensure_ascii: false,
            indent: None,
            item_separator: ", ".into(),
            key_separator: ": ".into(),
            sort_keys: false,
        }
    }
}

/// transformers' `tojson` filter: `json.dumps(value, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)` with Python's layout (`", "` and `": "` separators,
/// floats as `repr`, `NaN` / `Infinity`, only `"`, `\` and control characters escaped unless
/// `ensure_ascii`). Errors for values JSON cannot hold (undefined, functions, ...), as
/// `json.dumps` raises `TypeError`.
fn to_json(value: &Value, opts: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    dump_json(value, opts, 0, &mut out)?;
    Ok(out)
}

fn dump_json(value: &Value, o: &JsonOptions, level: usize, out: &mut String) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => match (value.is_integer(), f64::try_from(value.clone())) {
            (false, Ok(f)) if f.is_nan() => out.push_str("NaN"),
            (false, Ok(f)) if f.is_infinite() => {
                out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" })
            }
            (false, Ok(f)) => out.push_str(&py_float_repr(f)),
            _ => out.push_str(&value.to_string()),
        },
        ValueKind::String => json_string(value.as_str().unwrap_or_default(), o.ensure_ascii, out),
        ValueKind::Seq => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, o, level, '[', ']', items.len(), |out, i| {
                dump_json(&items[i], o, level + 1, out)
            })?;
        }
        ValueKind::Map => {
            let mut pairs: Vec<(String, Value)> = Vec::new();
            let iter = value
                .as_object()
                .and_then(|obj| obj.try_iter_pairs())
                .ok_or_else(|| not_serializable(value))?;
            for (k, v) in iter {
                pairs.push((json_key(&k)?, v));
            }
            if o.sort_keys {
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(out, o, level, '{', '}', pairs.len(), |out, i| {
                json_string(&pairs[i].0, o.ensure_ascii, out);
                out.push_str(&o.key_separator);
                dump_json(&pairs[i].1, o, level + 1, out)
            })?;
        }
        _ => return Err(not_serializable(value)),
    }
    Ok(())
}

fn not_serializable(value: &Value) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "tojson: object of type {} is not JSON serializable",
            value.kind()
        ),
    )
}

/// `[a, b]` / `{..}` with Python's indentation: items on their own lines, `[]` when empty.
fn write_container(
    out: &mut String,
    o: &JsonOptions,
    level: usize,
    open: char,
    close: char,
    len: usize,
    mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    let newline = |out: &mut String, depth: usize| {
        if let Some(ind) = &o.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    };
    newline(out, level + 1);
    for i in 0..len {
        if i > 0 {
            out.push_str(&o.item_separator);
            newline(out, level + 1);
        }
        item(out, i)?;
    }
    newline(out, level);
    out.push(close);
    Ok(())
}

/// A key as `json.dumps` writes it: strings as they are, numbers, booleans and None as text.
fn json_key(k: &Value) -> Result<String, Error> {
    Ok(match k.kind() {
        ValueKind::String => k.as_str().unwrap_or_default().to_string(),
        ValueKind::Bool => if k.is_true() { "true" } else { "false" }.into(),
        ValueKind::None => "null".into(),
        ValueKind::Number => {
            let mut s = String::new();
            dump_json(k, &JsonOptions::default(), 0, &mut s)?;
            s
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: keys must be str, int, float, bool or None, not {other}"),
            ));
        }
    })
}

/// A JSON string literal as Python's `json` encoder writes it.
fn json_string(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{:04x}", u);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The `tojson` filter: `value | tojson(ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, positionally or by keyword.
fn tojson_filter(value: &Value, positional: &[Value], kwargs: Kwargs) -> Result<String, Error> {
    if positional.len() > 4 {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            "tojson takes at most 4 arguments: ensure_ascii, indent, separators, sort_keys",
        ));
    }
    let mut positional = positional.iter().cloned();
    let mut pick = |name: &str| -> Result<Option<Value>, Error> {
        let pos = positional.next();
        let kw: Option<Value> = kwargs.get(name)?;
        Ok(kw.or(pos).filter(|v| !v.is_none()))
    };
    let ensure_ascii = pick("ensure_ascii")?;
    let indent = pick("indent")?;
    let separators = pick("separators")?;
    let sort_keys = pick("sort_keys")?;
    kwargs.assert_all_used()?;

    let mut o = JsonOptions {
        ensure_ascii: ensure_ascii.is_some_and(|v| v.is_true()),
        sort_keys: sort_keys.is_some_and(|v| v.is_true()),
        ..JsonOptions::default()
    };
    if let Some(ind) = indent {
        o.indent = Some(if let Some(s) = ind.as_str() {
            s.to_string()
        } else if let Some(n) = ind.as_i64() {
            " ".repeat(n.max(0) as usize)
        } else {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: indent must be an integer or a string, got {ind}"),
            ));
        });
        o.item_separator = ",".into();
    }
    if let Some(seps) = separators {
        let parts: Vec<Value> = seps.try_iter()?.collect();
        match parts.as_slice() {
            [item, key] if item.as_str().is_some() && key.as_str().is_some() => {
                o.item_separator = item.as_str().unwrap_or_default().to_string();
                o.key_separator = key.as_str().unwrap_or_default().to_string();
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: separators must be two strings, got {seps}"),
                ));
            }
        }
    }
    to_json(value, &o)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{% generation %}` blocks render their body as Jinja with transformers' extension does,
    /// whitespace control included.
    #[test]
    fn generation_blocks_render_their_body() {
        let t = ChatTemplate::new(
            "test",
            "{% for m in messages %}[{%- generation -%}  {{ m['content'] }}  {%- endgeneration -%}]\
             {% generation %}<{{ m['role'] }}>{% endgeneration %}{% endfor %}",
            BTreeMap::new(),
        )
        .unwrap();
        let got = t
            .render(&[ChatMessage::new("user", "hi")], &RenderOptions::default())
            .unwrap();
        assert_eq!(got, "[hi]<user>");
        assert_eq!(
            generation_blocks_as_plain("{%+ generation %}x{% endgeneration -%}"),
            "{%+ if true %}x{% endif -%}"
        );
    }

    /// Content-list messages reach the template as they are.
    #[test]
    fn message_dicts_of_any_shape_render() {
        let t = ChatTemplate::new(
            "test",
            "{% for m in messages %}{% for c in m['content'] | selectattr('type', 'equalto', 'image') %}<image>{% endfor %}\
             {% for c in m['content'] | selectattr('type', 'equalto', 'text') %}{{ c['text'] }}{% endfor %}{% endfor %}",
            BTreeMap::new(),
        )
        .unwrap();
        let m = serde_json::json!({"role": "user", "content": [
            {"type": "text", "text": "What?"}, {"type": "image"}]});
        let got = t.render_messages(&[m], &RenderOptions::default()).unwrap();
        assert_eq!(got, "<image>What?");
    }
}
