//! The controlled vocabularies of the triplet generator, as data files in
//! `crates/bindscope-tuning/data/` (compiled in; [`TemplateVocab::parse`] reads others):
//!
//! | file | rows | columns |
//! |---|---|---|
//! | `attributes.tsv` | 48 single-word attributes in 6 categories (size, texture, state, pattern, color, material) | word, category, adjective-order rank |
//! | `objects.tsv` | 81 single-word count nouns | word, category |
//! | `scenes.tsv` | 16 locations | name, phrase |
//! | `distractors.tsv` | 10 never-queried attribute–object pairs | preposition, attribute, object |
//! | `templates.tsv` | sentence templates per construction type and register | type, register, template |
//!
//! Checked at parse time: headers, single lowercase words, no duplicates, and disjointness:
//! no attribute or object word occurs in a scene phrase, a distractor pair, or the fixed words
//! of a template (the validator reads bindings from those words, so they must be unambiguous).
//! Every construction type has at least one template, and templates use only the placeholders
//! of their type.

use crate::example::Construction;
use crate::words::word_strings;
use std::collections::HashSet;

/// An attribute word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// The word.
    pub word: String,
    /// Semantic category.
    pub category: String,
    /// Adjective-order rank of the category (smaller comes first in a bundle).
    pub order: u32,
}

/// An object word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// The word.
    pub word: String,
    /// Coarse category (reporting only).
    pub category: String,
}

/// A scene phrase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scene {
    /// Short name.
    pub name: String,
    /// "on the kitchen counter".
    pub phrase: String,
}

/// A distractor pair (never queried).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Distractor {
    /// "near".
    pub preposition: String,
    /// "old".
    pub attribute: String,
    /// "tree".
    pub object: String,
}

/// A sentence template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// Construction type.
    pub construction: Construction,
    /// Register (style) name.
    pub register: String,
    /// Template text with placeholders (see `templates.tsv`).
    pub text: String,
}

impl Template {
    /// Whether the template has a `{SCENE}` or `{LEAD}` slot.
    pub fn has_scene(&self) -> bool {
        self.text.contains("{SCENE}") || self.text.contains("{LEAD}")
    }

    /// Whether the template has a `{DIST}` slot.
    pub fn has_distractor(&self) -> bool {
        self.text.contains("{DIST}")
    }
}

/// Every vocabulary of the generator.
#[derive(Debug, Clone)]
pub struct TemplateVocab {
    /// Attributes.
    pub attributes: Vec<Attribute>,
    /// Objects.
    pub objects: Vec<Object>,
    /// Scenes.
    pub scenes: Vec<Scene>,
    /// Distractor pairs.
    pub distractors: Vec<Distractor>,
    /// Templates.
    pub templates: Vec<Template>,
}

const ATTRIBUTES: &str = include_str!("../data/attributes.tsv");
const OBJECTS: &str = include_str!("../data/objects.tsv");
const SCENES: &str = include_str!("../data/scenes.tsv");
const DISTRACTORS: &str = include_str!("../data/distractors.tsv");
const TEMPLATES: &str = include_str!("../data/templates.tsv");

/// Rows of a TSV with `#` comments and a header that must equal `header`.
fn rows<'a>(
    file: &str,
    text: &'a str,
    header: &[&str],
) -> Result<Vec<(usize, Vec<&'a str>)>, String> {
    let mut out = Vec::new();
    let mut seen_header = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        if !seen_header {
            if f != header {
                return Err(format!(
                    "{file}:{}: expected the header {}",
                    i + 1,
                    header.join("\\t")
                ));
            }
            seen_header = true;
            continue;
        }
        if f.len() != header.len() {
            return Err(format!(
                "{file}:{}: expected {} tab-separated fields, got {}",
                i + 1,
                header.len(),
                f.len()
            ));
        }
        out.push((i + 1, f));
    }
    if !seen_header {
        return Err(format!("{file}: no header"));
    }
    Ok(out)
}

fn single_word(file: &str, line: usize, w: &str) -> Result<String, String> {
    let ok = w.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && w.chars().all(|c| c.is_ascii_lowercase() || c == '-');
    if ok {
        Ok(w.to_string())
    } else {
        Err(format!(
            "{file}:{line}: '{w}' is not a single lowercase word"
        ))
    }
}

/// Placeholders of a template (`{NP1}` → `NP1`).
pub fn placeholders(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find('{') {
        let Some(j) = rest[i..].find('}') else {
            return Err(format!("unclosed '{{' in '{text}'"));
        };
        out.push(rest[i + 1..i + j].to_string());
        rest = &rest[i + j + 1..];
    }
    Ok(out)
}

fn allowed_placeholder(c: Construction, p: &str) -> bool {
    if matches!(p, "SCENE" | "LEAD" | "DIST") {
        return true;
    }
    let n = match c {
        Construction::TripleBindCycle | Construction::TripleBindSwap => 3,
        _ => 2,
    };
    let (kind, k) = p.split_at(p.find(|ch: char| ch.is_ascii_digit()).unwrap_or(p.len()));
    let Ok(k) = k.parse::<usize>() else {
        return false;
    };
    if k == 0 || k > n {
        return false;
    }
    match c {
        c if c.is_adjacent() => kind == "NP",
        Construction::Predicative => kind == "A" || kind == "O",
        _ => kind == "DO" || kind == "A",
    }
}

impl TemplateVocab {
    /// The vocabularies compiled in from `data/` (panics only if those files are malformed,
    /// which the tests rule out).
    pub fn builtin() -> Self {
        Self::parse(ATTRIBUTES, OBJECTS, SCENES, DISTRACTORS, TEMPLATES)
            .expect("crates/bindscope-tuning/data is valid (tested)")
    }

    /// Parses the five files.
    ///
    /// # Errors
    /// `file:line: problem` for the first problem found.
    pub fn parse(
        attributes: &str,
        objects: &str,
        scenes: &str,
        distractors: &str,
        templates: &str,
    ) -> Result<Self, String> {
        let mut v = Self {
            attributes: Vec::new(),
            objects: Vec::new(),
            scenes: Vec::new(),
            distractors: Vec::new(),
            templates: Vec::new(),
        };
        let mut words: HashSet<String> = HashSet::new();
        for (line, f) in rows("attributes.tsv", attributes, &["word", "category", "order"])? {
            let word = single_word("attributes.tsv", line, f[0])?;
            let order = f[2].parse::<u32>().map_err(|_| {
                format!("attributes.tsv:{line}: order '{}' is not an integer", f[2])
            })?;
            if !words.insert(word.clone()) {
                return Err(format!("attributes.tsv:{line}: '{word}' repeated"));
            }
            v.attributes.push(Attribute {
                word,
                category: f[1].to_string(),
                order,
            });
        }
        for (line, f) in rows("objects.tsv", objects, &["word", "category"])? {
            let word = single_word("objects.tsv", line, f[0])?;
            if !words.insert(word.clone()) {
                return Err(format!(
                    "objects.tsv:{line}: '{word}' repeated or also an attribute"
                ));
            }
            v.objects.push(Object {
                word,
                category: f[1].to_string(),
            });
        }
        let clash = |file: &str, line: usize, text: &str| -> Result<(), String> {
            match word_strings(text).into_iter().find(|w| words.contains(w)) {
                Some(w) => Err(format!(
                    "{file}:{line}: '{w}' is an attribute or object word"
                )),
                None => Ok(()),
            }
        };
        for (line, f) in rows("scenes.tsv", scenes, &["name", "phrase"])? {
            clash("scenes.tsv", line, f[1])?;
            v.scenes.push(Scene {
                name: f[0].to_string(),
                phrase: f[1].to_string(),
            });
        }
        for (line, f) in rows(
            "distractors.tsv",
            distractors,
            &["preposition", "attribute", "object"],
        )? {
            clash("distractors.tsv", line, &f.join(" "))?;
            v.distractors.push(Distractor {
                preposition: f[0].to_string(),
                attribute: single_word("distractors.tsv", line, f[1])?,
                object: single_word("distractors.tsv", line, f[2])?,
            });
        }
        for (line, f) in rows(
            "templates.tsv",
            templates,
            &["type", "register", "template"],
        )? {
            let construction: Construction = f[0]
                .parse()
                .map_err(|e| format!("templates.tsv:{line}: {e}"))?;
            for p in placeholders(f[2]).map_err(|e| format!("templates.tsv:{line}: {e}"))? {
                if !allowed_placeholder(construction, &p) {
                    return Err(format!(
                        "templates.tsv:{line}: placeholder {{{p}}} is not allowed for {construction}"
                    ));
                }
            }
            let fixed: String = {
                let mut s = f[2].to_string();
                for p in placeholders(f[2])? {
                    s = s.replace(&format!("{{{p}}}"), " ");
                }
                s
            };
            clash("templates.tsv", line, &fixed)?;
            v.templates.push(Template {
                construction,
                register: f[1].to_string(),
                text: f[2].to_string(),
            });
        }
        for c in Construction::ALL {
            if !v.templates.iter().any(|t| t.construction == c) {
                return Err(format!("templates.tsv: no template for {c}"));
            }
        }
        if v.scenes.is_empty() || v.distractors.is_empty() {
            return Err("scenes.tsv and distractors.tsv need at least one row each".into());
        }
        Ok(v)
    }

    /// Attribute categories in adjective order.
    pub fn categories(&self) -> Vec<String> {
        let mut cats: Vec<(u32, String)> = self
            .attributes
            .iter()
            .map(|a| (a.order, a.category.clone()))
            .collect();
        cats.sort();
        cats.dedup();
        cats.into_iter().map(|(_, c)| c).collect()
    }

    /// Registers available for a construction type.
    pub fn registers(&self, c: Construction) -> Vec<&str> {
        self.templates
            .iter()
            .filter(|t| t.construction == c)
            .map(|t| t.register.as_str())
            .collect()
    }
}
