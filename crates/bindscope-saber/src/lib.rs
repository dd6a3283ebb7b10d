//! # bindscope-saber
//!
//! SABER (Seeded Attribute–object Binding Evaluation by Ranking): a generated benchmark of
//! attribute–object binding for text and image embeddings, after the seed study "Stuck on
//! Shuffle" (issue 6 of this repository).
//!
//! Data flows one way:
//! [`vocab`] (data files) → [`generate`] (seeded MCQ items, text and generation forms,
//! text-to-image prompts) → [`jsonl`] (writing, and reading with per-row validation) →
//! [`embed`] (any [`bindscope_models::TextEncoder`] / [`bindscope_models::VisionEncoder`], cached per
//! unique text / image) → [`eval`] (cosine ranking: MCQ accuracy, large-gallery mAP,
//! containment) → [`report`] (run directory). [`study`] runs the two commands of
//! `experiments saber`: `generate` and `eval`, each from a serde config.
//!
//! ## An item
//! A query with `N` bindings (`N` = 2..10), e.g. "A striped cube, a transparent kite, and a red
//! ball.", and four candidates in one frame (candidate 1's pair order):
//!
//! | # | kind | construction |
//! |---|---|---|
//! | 1 | `bind` | the query's bindings, pairs reordered (never the query's order) |
//! | 2 | `attr_perm` | candidate 1's objects in place, attributes permuted |
//! | 3 | `obj_perm` | candidate 1's attributes in place, objects permuted |
//! | 4 | `both_perm` | both permuted (`N ≥ 3`); for `N = 2`: `replace`, one query binding kept and the other's object or attribute replaced by a new element |
//!
//! For `N ≥ 3` the four binding assignments are pairwise distinct (resampled otherwise). For
//! `N = 2` candidates 2 and 3 necessarily share one assignment (the swap) and differ in word
//! order, which is why candidate 4 replaces an element instead.
//!
//! ## Text
//! Noun phrases "a(n) ⟨attribute⟩ ⟨object⟩" joined as an English conjunction: two phrases with
//! "and" and no comma; three or more with commas and a serial (Oxford) comma before "and"
//! ("A striped cube, a transparent kite, and a red ball."). The serial comma keeps the list
//! unambiguous in the generation form, whose two-colour phrases contain an "and" of their own
//! ("a white and orange striped cube, a red glowing kite, and …"). The first letter is
//! capitalised, the sentence ends with a period. Articles follow pronunciation
//! ([`article`], table-driven).
//!
//! ## Metrics
//! Scores are cosine similarities. MCQ accuracy gives credit `1/k` when the correct candidate
//! ties with `k − 1` others at the top (the expected accuracy under random tie-breaking).
//! Average precision, per query over the gallery of all candidates:
//! `AP = (1/|R|) Σ_{r ∈ R} precision@rank(r)`, the mean over the relevant items of the
//! precision at each one's rank, where tied scores share a rank: precision at a score `s` is
//! `#{relevant with score ≥ s} / #{items with score ≥ s}`. Without ties this is the textbook
//! definition; with ties it is scikit-learn's `average_precision_score` (step-wise, threshold
//! based), which does not depend on the order of tied items. mAP is the mean over queries.

pub mod article;
pub mod embed;
pub mod eval;
pub mod generate;
pub mod jsonl;
pub mod metrics;
pub mod report;
pub mod study;
pub mod vocab;

pub use generate::{CandidateKind, Caption, GenerateConfig, McqItem, Pair, Source};
pub use vocab::Vocabulary;

use std::path::PathBuf;

/// Why a SABER step failed.
#[derive(Debug, thiserror::Error)]
pub enum SaberError {
    /// A vocabulary file breaks a rule.
    #[error("{file}:{line}: {message}")]
    Vocabulary {
        /// The file (`objects.tsv`, …).
        file: String,
        /// 1-based line (0: the file as a whole).
        line: usize,
        /// The rule broken.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The generator could not satisfy its constraints with this vocabulary.
    #[error("generator: {0}")]
    Generate(String),
    /// Tokenization failed.
    #[error(transparent)]
    Text(#[from] bindscope_data::text::TextError),
    /// Image decoding or preprocessing failed.
    #[error(transparent)]
    Image(#[from] bindscope_data::image::ImageError),
    /// A model could not be loaded.
    #[error(transparent)]
    Model(#[from] bindscope_models::ModelError),
    /// A computation failed on its device (on a GPU, most often memory).
    #[error(transparent)]
    Device(#[from] bindscope_core::device::ReadError),
    /// Anything else, with its explanation.
    #[error("{0}")]
    Invalid(String),
}

impl SaberError {
    pub(crate) fn vocab(file: &str, line: usize, message: impl Into<String>) -> Self {
        Self::Vocabulary {
            file: file.to_string(),
            line,
            message: message.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
