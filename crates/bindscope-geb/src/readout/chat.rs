//! Conversations rendered for the decoder: the embedding slots, the native chat template, the
//! token ids and the assistant-only labels (§3: "the loss is computed on assistant tokens
//! only").
//!
//! - **Slots.** [`EMBED_PAD`] is added to the decoder's tokenizer as a special token (so it is
//!   one token wherever it stands; its id is the tokenizer's size, as transformers'
//!   `add_tokens(..., special_tokens=True)` gives). The first user turn starts with one
//!   `<EMBED_PAD>` per slot, then `\n`, then the question — where LLaVA's preprocessing puts
//!   `<image>\n`. The decoder's embedding matrix is not resized: a slot's input embedding is
//!   always replaced by the adapter's output ([`super::inject`]) and no label is ever a slot, so
//!   the logits stay over the decoder's own vocabulary (transformers' `resize_token_embeddings`
//!   would add one output row with a random initialisation; leaving it out keeps runs exact and
//!   is the only difference).
//! - **Template.** The messages are rendered with the decoder's own chat template
//!   ([`bindscope_models::generate::chat::ChatTemplate`], transformers' `apply_chat_template`
//!   text) and tokenized as a whole without added special tokens, as transformers 5 tokenizes a
//!   chat.
//! - **Labels.** An assistant turn `i` is supervised over the text the assistant writes: from
//!   the end of `render(messages[..i], add_generation_prompt=true)` to the end of the first
//!   end-of-turn token (the generation config's EOS tokens, e.g. `<|im_end|>`) after its
//!   content, so the model learns to stop; template text after it (a newline) is not. A token
//!   is supervised when its characters overlap that span, which is what transformers'
//!   `return_assistant_tokens_mask` gives for a template that wraps exactly that text in
//!   `{% generation %}` (checked against it in `tests/readout_reference.rs`). The template must
//!   render each shorter conversation as a prefix of the longer one; one that rewrites earlier
//!   turns (Qwen3 drops the reasoning of earlier turns) is refused with the turn named.
//! - **Modes.** Visual-only: one sequence per conversation, every assistant turn supervised.
//!   VL-joint: one sequence per assistant turn `k`: the turns up to `k` in the text context,
//!   only answer `k` supervised (the embedding is of the image and question `k`).

use bindscope_data::lm::LmTokenizer;
use bindscope_models::generate::chat::{ChatMessage, ChatTemplate, RenderOptions};
use tokenizers::AddedToken;

use super::conversation::Conversation;

/// The embedding slot token of the readout (the paper's `<EMBED_PAD>`).
pub const EMBED_PAD: &str = "<EMBED_PAD>";

/// transformers' `ignore_index`: a position left out of the loss.
pub const IGNORE: i64 = bindscope_core::train::IGNORE_INDEX;

/// How the embedding is formed and which turns are supervised (§3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One embedding of the image per conversation; every assistant turn supervised.
    VisualOnly,
    /// One embedding of the image and the current question per assistant turn; only that
    /// answer supervised.
    VlJoint,
}

/// Token ids, labels and slot positions of one rendering ([`ChatFormat::supervise`]).
pub type Tokens = (Vec<u32>, Vec<i64>, Vec<usize>);

/// One training (or evaluation) sequence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sequence {
    /// The conversation's id.
    pub conversation: String,
    /// VL-joint: the supervised turn; visual-only: `None`.
    pub turn: Option<usize>,
    /// Token ids, slots included as the slot token's id.
    pub input_ids: Vec<u32>,
    /// Per position: the id where supervised, else [`IGNORE`].
    pub labels: Vec<i64>,
    /// The positions of the slots, in order.
    pub slots: Vec<usize>,
}

/// Why a conversation could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatFormatError {
    /// The decoder has no chat template.
    #[error(
        "the decoder '{0}' has no chat template (tokenizer_config.json `chat_template` or chat_template.jinja): the readout renders conversations with the decoder's native template"
    )]
    NoTemplate(String),
    /// The template or tokenizer failed on one conversation.
    #[error("conversation {id:?}: {message}")]
    Item {
        /// The conversation's id.
        id: String,
        /// What failed.
        message: String,
    },
    /// The tokenizer could not be extended.
    #[error("{0}")]
    Tokenizer(String),
}

/// A decoder's tokenizer and chat template, with the slot token added.
#[derive(Debug)]
pub struct ChatFormat {
    tokenizer: tokenizers::Tokenizer,
    template: ChatTemplate,
    embed_pad_id: u32,
    eos: Vec<String>,
    eos_ids: Vec<u32>,
}

impl ChatFormat {
    /// The format of a decoder: its tokenizer (to which [`EMBED_PAD`] is added), its chat
    /// template and its end-of-turn ids (`generation_config.json` `eos_token_id`).
    ///
    /// # Errors
    /// [`ChatFormatError::NoTemplate`] when `template` is `None` (named by `decoder`);
    /// [`ChatFormatError::Tokenizer`] when an EOS id is not in the vocabulary or the slot token
    /// is already a different token.
    pub fn new(
        decoder: &str,
        tokenizer: &LmTokenizer,
        template: Option<ChatTemplate>,
        eos_ids: &[u32],
    ) -> Result<Self, ChatFormatError> {
        let template = template.ok_or_else(|| ChatFormatError::NoTemplate(decoder.into()))?;
        let mut tok = tokenizer.inner().clone();
        let before = tok.get_vocab_size(true) as u32;
        let existing = tok.token_to_id(EMBED_PAD);
        tok.add_special_tokens(&[AddedToken::from(EMBED_PAD, true)]);
        let embed_pad_id = tok.token_to_id(EMBED_PAD).ok_or_else(|| {
            ChatFormatError::Tokenizer(format!(
                "{}: could not add {EMBED_PAD}",
                tokenizer.path().display()
            ))
        })?;
        if existing.is_none() && embed_pad_id != before {
            return Err(ChatFormatError::Tokenizer(format!(
                "{}: {EMBED_PAD} got id {embed_pad_id}, expected the tokenizer's size {before}",
                tokenizer.path().display()
            )));
        }
        let eos = eos_ids
            .iter()
            .map(|&id| {
                tok.id_to_token(id).ok_or_else(|| {
                    ChatFormatError::Tokenizer(format!(
                        "{}: eos_token_id {id} is not in the vocabulary",
                        tokenizer.path().display()
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            tokenizer: tok,
            template,
            embed_pad_id,
            eos,
            eos_ids: eos_ids.to_vec(),
        })
    }

    /// The end-of-turn ids (what generation stops at).
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// The slot token's id.
    pub fn embed_pad_id(&self) -> u32 {
        self.embed_pad_id
    }

    /// The tokenizer with the slot token.
    pub fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tokenizer
    }

    /// The chat messages of `turns` (user, assistant, …) with `slots` embedding slots at the
    /// start of the first user turn (module docs). `slots = 0` gives the text-only control's
    /// messages (the question alone).
    pub fn messages(turns: &[super::conversation::Turn], slots: usize) -> Vec<ChatMessage> {
        let mut out = Vec::with_capacity(2 * turns.len());
        for (i, t) in turns.iter().enumerate() {
            let q = if i == 0 && slots > 0 {
                format!("{}\n{}", EMBED_PAD.repeat(slots), t.question)
            } else {
                t.question.clone()
            };
            out.push(ChatMessage::new("user", q));
            out.push(ChatMessage::new("assistant", t.answer.clone()));
        }
        out
    }

    fn render(&self, m: &[ChatMessage], generation_prompt: bool) -> Result<String, String> {
        self.template
            .render(
                m,
                &RenderOptions {
                    add_generation_prompt: generation_prompt,
                    ..Default::default()
                },
            )
            .map_err(|e| e.to_string())
    }

    /// Tokenizes `messages` and supervises the assistant messages at the indices `supervised`
    /// (module docs).
    ///
    /// # Errors
    /// A template failure, a template that is not prefix-stable, or a tokenizer failure, as
    /// text.
    pub fn supervise(
        &self,
        messages: &[ChatMessage],
        supervised: &[usize],
    ) -> Result<Tokens, String> {
        let full = self.render(messages, false)?;
        let mut spans = Vec::new();
        for &i in supervised {
            let m = &messages[i];
            if m.role != "assistant" {
                return Err(format!("message {i} is not an assistant message"));
            }
            let prefix = if i == 0 {
                String::new()
            } else {
                self.render(&messages[..i], true)?
            };
            let upto = self.render(&messages[..=i], false)?;
            if !upto.starts_with(&prefix) || !full.starts_with(&upto) {
                return Err(format!(
                    "the chat template does not render turn {} as a continuation of the turns before it, so its assistant tokens cannot be told apart",
                    i / 2
                ));
            }
            let start = prefix.len();
            let delta = &upto[start..];
            let from = if delta.starts_with(&m.content) {
                m.content.len()
            } else {
                0
            };
            let end = self
                .eos
                .iter()
                .filter_map(|e| delta[from..].find(e.as_str()).map(|p| from + p + e.len()))
                .min()
                .unwrap_or(delta.len());
            spans.push((start, start + end));
        }
        let enc = self
            .tokenizer
            .encode(full.as_str(), false)
            .map_err(|e| format!("tokenizer: {e}"))?;
        let ids = enc.get_ids().to_vec();
        let labels = ids
            .iter()
            .zip(enc.get_offsets())
            .map(|(&id, &(a, b))| {
                let inside = spans.iter().any(|&(s, e)| a < e && s < b);
                if inside { i64::from(id) } else { IGNORE }
            })
            .collect();
        let slots = ids
            .iter()
            .enumerate()
            .filter(|&(_, &id)| id == self.embed_pad_id)
            .map(|(p, _)| p)
            .collect();
        Ok((ids, labels, slots))
    }

    /// The evaluation prompt of `question` with `slots` slots: one user turn (the shape of the
    /// first training turn) under the template with the generation prompt. The labels are all
    /// [`IGNORE`].
    ///
    /// # Errors
    /// [`ChatFormatError::Item`] naming `id`.
    pub fn prompt(
        &self,
        id: &str,
        question: &str,
        slots: usize,
    ) -> Result<Sequence, ChatFormatError> {
        let item = |message: String| ChatFormatError::Item {
            id: id.to_string(),
            message,
        };
        let turn = super::conversation::Turn {
            question: question.to_string(),
            answer: String::new(),
        };
        let mut m = Self::messages(std::slice::from_ref(&turn), slots);
        m.truncate(1);
        let text = self.render(&m, true).map_err(&item)?;
        let enc = self
            .tokenizer
            .encode(text.as_str(), false)
            .map_err(|e| item(format!("tokenizer: {e}")))?;
        let input_ids = enc.get_ids().to_vec();
        let found: Vec<usize> = input_ids
            .iter()
            .enumerate()
            .filter(|&(_, &t)| t == self.embed_pad_id)
            .map(|(p, _)| p)
            .collect();
        if found.len() != slots {
            return Err(item(format!(
                "{} {EMBED_PAD} tokens in the prompt, expected {slots} (the question must not contain {EMBED_PAD})",
                found.len()
            )));
        }
        Ok(Sequence {
            conversation: id.to_string(),
            turn: None,
            labels: vec![IGNORE; input_ids.len()],
            input_ids,
            slots: found,
        })
    }

    /// The sequences of one conversation in `mode` with `slots` slots per sequence (module
    /// docs).
    ///
    /// # Errors
    /// [`ChatFormatError::Item`] naming the conversation.
    pub fn sequences(
        &self,
        conv: &Conversation,
        mode: Mode,
        slots: usize,
    ) -> Result<Vec<Sequence>, ChatFormatError> {
        let item = |message: String| ChatFormatError::Item {
            id: conv.id.clone(),
            message,
        };
        let messages = Self::messages(&conv.turns, slots);
        let cuts: Vec<(Option<usize>, &[ChatMessage], Vec<usize>)> = match mode {
            Mode::VisualOnly => vec![(
                None,
                &messages[..],
                (0..conv.turns.len()).map(|k| 2 * k + 1).collect(),
            )],
            Mode::VlJoint => (0..conv.turns.len())
                .map(|k| (Some(k), &messages[..2 * k + 2], vec![2 * k + 1]))
                .collect(),
        };
        cuts.into_iter()
            .map(|(turn, m, sup)| {
                let (input_ids, labels, found) = self.supervise(m, &sup).map_err(&item)?;
                if found.len() != slots {
                    return Err(item(format!(
                        "{} {EMBED_PAD} tokens after rendering, expected {slots} (the text must not contain {EMBED_PAD})",
                        found.len()
                    )));
                }
                Ok(Sequence {
                    conversation: conv.id.clone(),
                    turn,
                    input_ids,
                    labels,
                    slots: found,
                })
            })
            .collect()
    }
}
