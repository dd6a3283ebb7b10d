//! The per-item metrics of GEB's eight source tasks, exactly as **lmms-eval 0.7.3**
//! (`pip install lmms-eval==0.7.3`) scores an item when run from its command line: the response
//! first goes through [`reasoning::strip_reasoning`] (the default `--reasoning_tags`), then the
//! task's scorer. Every score is in [0, 1].
//!
//! | source | scorer | lmms-eval file |
//! |---|---|---|
//! | `mme` | [`choice::mme`]: yes/no parsing, binary | `tasks/mme/utils.py` |
//! | `cvbench` | [`choice::cvbench`]: option letter, binary | `tasks/cv_bench/utils.py` |
//! | `realworldqa` | [`choice::realworldqa`]: letter (`extract_mcq_answer`) or open answer, binary | `tasks/realworldqa/utils.py`, `tasks/_task_utils/mcq_extract.py` |
//! | `ocrbench` | [`ocrbench::ocrbench`]: normalized containment, binary | `tasks/ocrbench/utils.py` |
//! | `textvqa` | [`vqa::textvqa`]: VQA consensus accuracy with the EvalAI processor | `tasks/textvqa/utils.py`, `tasks/_task_utils/vqa_eval_metric.py` |
//! | `chartqa` | [`document::chartqa`]: relaxed accuracy (5%), binary | `tasks/chartqa/utils.py` |
//! | `docvqa`, `infovqa` | [`document::anls`]: ANLS with the 0.5 threshold | `api/metrics.py` (`anls`), `api/task.py` |
//!
//! The quirks reproduced on purpose are written at each scorer (e.g. `PERIOD_STRIP`'s count of
//! 32, CV-Bench taking the first letter of any word, ANLS's denominator from the unnormalized
//! texts). The per-item cases in `tests/fixtures/lmms_eval_cases.jsonl` were scored by
//! lmms-eval's own functions (`tests/fixtures/lmms_eval_cases.py`) and are matched exactly.

pub mod choice;
pub mod document;
pub mod ocrbench;
pub mod reasoning;
pub mod vqa;

use serde::{Deserialize, Serialize};

/// The lmms-eval release the metrics reproduce.
pub const LMMS_EVAL_VERSION: &str = "0.7.3";

/// A GEB source task: which lmms-eval scorer an item gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// MME (yes/no).
    Mme,
    /// CV-Bench (lettered choice).
    Cvbench,
    /// RealWorldQA (lettered choice or short answer).
    Realworldqa,
    /// OCRBench (text reading).
    Ocrbench,
    /// TextVQA (scene-text VQA, ten references).
    Textvqa,
    /// ChartQA (chart values).
    Chartqa,
    /// DocVQA (documents, ANLS).
    Docvqa,
    /// InfographicVQA (infographics, ANLS).
    Infovqa,
}

impl Source {
    /// Every source, in report order.
    pub const ALL: [Source; 8] = [
        Source::Mme,
        Source::Cvbench,
        Source::Realworldqa,
        Source::Ocrbench,
        Source::Textvqa,
        Source::Chartqa,
        Source::Docvqa,
        Source::Infovqa,
    ];

    /// The name used in prediction files (`mme`, `cvbench`, …).
    pub fn name(self) -> &'static str {
        match self {
            Source::Mme => "mme",
            Source::Cvbench => "cvbench",
            Source::Realworldqa => "realworldqa",
            Source::Ocrbench => "ocrbench",
            Source::Textvqa => "textvqa",
            Source::Chartqa => "chartqa",
            Source::Docvqa => "docvqa",
            Source::Infovqa => "infovqa",
        }
    }

    /// The source named `name` (exact, lowercase).
    pub fn from_name(name: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The category an item of this source belongs to when its record names none: MME,
    /// CV-Bench, RealWorldQA → `natural`; OCRBench, TextVQA → `scene_text`; ChartQA, DocVQA,
    /// InfographicVQA → `document`.
    pub fn default_category(self) -> Category {
        match self {
            Source::Mme | Source::Cvbench | Source::Realworldqa => Category::Natural,
            Source::Ocrbench | Source::Textvqa => Category::SceneText,
            Source::Chartqa | Source::Docvqa | Source::Infovqa => Category::Document,
        }
    }

    /// Whether only the first answer is the gold (MME, CV-Bench, RealWorldQA, ChartQA); the
    /// other sources accept every answer.
    pub fn single_answer(self) -> bool {
        matches!(
            self,
            Source::Mme | Source::Cvbench | Source::Realworldqa | Source::Chartqa
        )
    }
}

/// A GEB item category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Natural images.
    Natural,
    /// Scene text.
    SceneText,
    /// Documents, charts, infographics.
    Document,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 3] = [Category::Natural, Category::SceneText, Category::Document];

    /// `natural`, `scene_text`, `document`.
    pub fn name(self) -> &'static str {
        match self {
            Category::Natural => "natural",
            Category::SceneText => "scene_text",
            Category::Document => "document",
        }
    }

    /// The category named `name`.
    pub fn from_name(name: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// Why an item cannot be scored (what lmms-eval would raise on).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ItemError {
    /// `answers` is empty.
    #[error("`answers` is empty; {0} needs at least one reference")]
    NoAnswers(&'static str),
    /// An MME gold answer that is not yes/no.
    #[error("mme: the gold answer {0:?} is not Yes or No (lmms-eval asserts it is)")]
    MmeGold(String),
}

/// An item as a scorer sees it: the response and the references.
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    /// The source task.
    pub source: Source,
    /// The model's response, as generated.
    pub prediction: &'a str,
    /// The references (the gold first for single-answer sources).
    pub answers: &'a [String],
    /// OCRBench's `dataset` field (`HME100k` selects the math-expression rule).
    pub dataset: Option<&'a str>,
}

/// Checks what lmms-eval needs of an item before scoring it (non-empty `answers`; MME's gold
/// yes/no).
///
/// # Errors
/// [`ItemError`].
pub fn check(item: &Item) -> Result<(), ItemError> {
    let Some(first) = item.answers.first() else {
        return Err(ItemError::NoAnswers(item.source.name()));
    };
    if item.source == Source::Mme && choice::mme_gold(first).is_none() {
        return Err(ItemError::MmeGold(first.clone()));
    }
    Ok(())
}

/// The item's score in [0, 1] as lmms-eval 0.7.3 gives it: the prediction stripped of the
/// reasoning blocks of `tags` (`None`: `--reasoning_tags none`, no stripping), then the
/// source's scorer.
///
/// # Errors
/// [`ItemError`] as [`check`].
pub fn score(item: &Item, tags: Option<&[reasoning::TagPair]>) -> Result<f64, ItemError> {
    check(item)?;
    let stripped;
    let pred = match tags {
        Some(t) => {
            stripped = reasoning::strip_reasoning(item.prediction, t);
            stripped.as_str()
        }
        None => item.prediction,
    };
    let gold = &item.answers[0];
    Ok(match item.source {
        Source::Mme => choice::mme(pred, choice::mme_gold(gold).expect("checked")),
        Source::Cvbench => choice::cvbench(pred, gold),
        Source::Realworldqa => choice::realworldqa(pred, gold),
        Source::Ocrbench => ocrbench::ocrbench(pred, item.answers, item.dataset),
        Source::Textvqa => vqa::textvqa(pred, item.answers),
        Source::Chartqa => document::chartqa(pred, gold),
        Source::Docvqa | Source::Infovqa => document::anls(pred, item.answers),
    })
}
