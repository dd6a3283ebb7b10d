//! The one validator both the template generator and the JSONL importer go through.
//!
//! Rules, checked in this order (the first broken one is reported, with its [`Rule`] name):
//!
//! | rule | what is checked |
//! |---|---|
//! | `json` | the line is one JSON object (importer) |
//! | `schema` | the fields of [`Example`], no others; a known construction type |
//! | `single_word` | every attribute and object is one lowercase word (`[a-z][a-z'-]*`) |
//! | `distinct` | attributes pairwise distinct, objects pairwise distinct, no word both; `queried` ⊆ `bindings`; at least two bindings |
//! | `mentions` | after article repair, every attribute and object occurs exactly once in each of the four texts |
//! | `structure` | the per-type constraints (below) hold in all four texts |
//! | `bindings` | the bindings read from anchor and positive are exactly `bindings` |
//! | `identical` | anchor and positive differ (as word sequences) |
//! | `permutation` | each negative is a word-level permutation of its positive, `a` ≡ `an` |
//! | `unbroken` | no queried binding survives in a negative |
//! | `distractor_moved` | every non-queried binding survives in both negatives |
//! | `duplicate` | id or anchor text seen before (importer) |
//!
//! Article repair: every `a`/`an` is set to what the next word's pronunciation asks for
//! ([`crate::words::repair_articles`]) before the checks; the repaired texts are kept and the
//! number of repaired articles is counted.
//!
//! Bindings are *read from the text* by a per-type parser over the declared attribute and object
//! words (other words are ignored):
//! - adjacent types (`pair_swap`, `triple_bind_*`, `attr_bundle`): a run of attributes binds to
//!   the object that directly follows it; an attribute followed by any other word breaks
//!   `structure`. `pair_swap`: 2 objects with 1 attribute each; `triple_bind_*`: 3 objects with 1
//!   attribute each; `attr_bundle`: ≥ 2 objects with ≥ 2 attributes each.
//! - `predicative`: an attribute binds to the nearest object before it and is never adjacent to
//!   an object word (either side); ≥ 2 objects, 1 attribute each.
//! - deferred types: every attribute comes after every object. `deferred_bind_anaphoric`: an
//!   attribute binds to the object named by the last anaphor before it (`former`/`first` → 1st
//!   object mentioned, `second` → 2nd, `third` → 3rd, `latter`/`last` → last);
//!   `deferred_bind_respective`: the text contains `respectively` after the objects and the
//!   attributes bind in mention order. ≥ 2 objects, 1 attribute each.
//!
//! Queried bindings: `triple_bind_swap` queries exactly 2 of its 3 bindings, every other type
//! queries all of them.

use crate::example::{Construction, Example};
use crate::words::{bag_of_words, repair_articles, word_strings};
use std::collections::{BTreeSet, HashMap, HashSet};

/// A validator rule (the name is what reports count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The line is not a JSON object.
    Json,
    /// Missing / unknown fields, wrong types, unknown construction type.
    Schema,
    /// An attribute or object is not a single lowercase word.
    SingleWord,
    /// Repeated attributes or objects, a word used as both, `queried` ⊄ `bindings`.
    Distinct,
    /// An attribute or object does not occur exactly once in a text.
    Mentions,
    /// A per-type structural constraint is broken.
    Structure,
    /// The anchor or positive does not express exactly the declared bindings.
    Bindings,
    /// Anchor and positive are the same text.
    Identical,
    /// A negative is not a word-level permutation of its positive.
    Permutation,
    /// A negative keeps a queried binding.
    Unbroken,
    /// A negative changes a non-queried binding.
    DistractorMoved,
    /// The id or the anchor was seen before.
    Duplicate,
}

impl Rule {
    /// All rules in check order.
    pub const ALL: [Self; 12] = [
        Self::Json,
        Self::Schema,
        Self::SingleWord,
        Self::Distinct,
        Self::Mentions,
        Self::Structure,
        Self::Bindings,
        Self::Identical,
        Self::Permutation,
        Self::Unbroken,
        Self::DistractorMoved,
        Self::Duplicate,
    ];

    /// Snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Schema => "schema",
            Self::SingleWord => "single_word",
            Self::Distinct => "distinct",
            Self::Mentions => "mentions",
            Self::Structure => "structure",
            Self::Bindings => "bindings",
            Self::Identical => "identical",
            Self::Permutation => "permutation",
            Self::Unbroken => "unbroken",
            Self::DistractorMoved => "distractor_moved",
            Self::Duplicate => "duplicate",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A broken rule and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// What was found.
    pub message: String,
}

impl Violation {
    fn new(rule: Rule, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.rule, self.message)
    }
}

/// A valid example (texts article-repaired) and how many articles were repaired.
#[derive(Debug, Clone, PartialEq)]
pub struct Validated {
    /// The example as kept.
    pub example: Example,
    /// Articles changed by the repair.
    pub articles_repaired: usize,
}

/// A set of `(attribute, object)` bindings.
pub type Bindings = BTreeSet<(String, String)>;

fn is_single_word(w: &str) -> bool {
    let mut c = w.chars();
    c.next().is_some_and(|f| f.is_ascii_lowercase())
        && c.all(|ch| ch.is_ascii_lowercase() || ch == '-' || ch == '\'')
}

const ANAPHORS: [&str; 6] = ["former", "first", "second", "third", "latter", "last"];

/// Reads the bindings of one text by the rules of its construction type (module docs).
///
/// # Errors
/// A `structure` message naming the word and the constraint.
pub fn parse_bindings(
    construction: Construction,
    text: &str,
    attributes: &HashSet<&str>,
    objects: &HashSet<&str>,
) -> Result<Bindings, String> {
    let ws = word_strings(text);
    let mut bound: Vec<(String, String)> = Vec::new();
    let obj_positions: Vec<usize> = (0..ws.len())
        .filter(|&i| objects.contains(ws[i].as_str()))
        .collect();
    let attr_positions: Vec<usize> = (0..ws.len())
        .filter(|&i| attributes.contains(ws[i].as_str()))
        .collect();
    let name = construction.name();
    if construction.is_adjacent() {
        let mut run: Vec<&str> = Vec::new();
        for w in &ws {
            if attributes.contains(w.as_str()) {
                run.push(w);
            } else if objects.contains(w.as_str()) {
                for a in run.drain(..) {
                    bound.push((a.to_string(), w.clone()));
                }
            } else if let Some(a) = run.first() {
                return Err(format!(
                    "{name}: attribute '{a}' is followed by '{w}', not directly by its object"
                ));
            }
        }
        if let Some(a) = run.first() {
            return Err(format!(
                "{name}: attribute '{a}' ends the text without an object"
            ));
        }
    } else if construction == Construction::Predicative {
        for &i in &attr_positions {
            let adjacent = [i.checked_sub(1), Some(i + 1)]
                .into_iter()
                .flatten()
                .filter_map(|j| ws.get(j))
                .find(|w| objects.contains(w.as_str()));
            if let Some(o) = adjacent {
                return Err(format!(
                    "{name}: attribute '{}' is adjacent to object '{o}'",
                    ws[i]
                ));
            }
            let Some(&j) = obj_positions.iter().rev().find(|&&j| j < i) else {
                return Err(format!(
                    "{name}: attribute '{}' comes before any object",
                    ws[i]
                ));
            };
            bound.push((ws[i].clone(), ws[j].clone()));
        }
    } else {
        let last_obj = obj_positions.last().copied().unwrap_or(0);
        if let (Some(&first_attr), false) = (attr_positions.first(), obj_positions.is_empty())
            && first_attr < last_obj
        {
            return Err(format!(
                "{name}: attribute '{}' comes before object '{}' (deferred: attributes only after every object)",
                ws[first_attr], ws[last_obj]
            ));
        }
        let objs: Vec<&String> = obj_positions.iter().map(|&j| &ws[j]).collect();
        if construction == Construction::DeferredBindAnaphoric {
            for &i in &attr_positions {
                let anaphor = (last_obj + 1..i)
                    .rev()
                    .map(|j| ws[j].as_str())
                    .find(|w| ANAPHORS.contains(w));
                let Some(anaphor) = anaphor else {
                    return Err(format!(
                        "{name}: no anaphor ({}) before attribute '{}'",
                        ANAPHORS.join("/"),
                        ws[i]
                    ));
                };
                let k = match anaphor {
                    "former" | "first" => 0,
                    "second" => 1,
                    "third" => 2,
                    _ => objs.len().saturating_sub(1),
                };
                let Some(o) = objs.get(k) else {
                    return Err(format!(
                        "{name}: anaphor '{anaphor}' names object {} of {}",
                        k + 1,
                        objs.len()
                    ));
                };
                bound.push((ws[i].clone(), (*o).clone()));
            }
        } else {
            let resp = ws.iter().position(|w| w == "respectively");
            match resp {
                Some(r) if r > last_obj => {}
                _ => return Err(format!("{name}: no 'respectively' after the objects")),
            }
            if attr_positions.len() != objs.len() {
                return Err(format!(
                    "{name}: {} attributes for {} objects",
                    attr_positions.len(),
                    objs.len()
                ));
            }
            for (&i, o) in attr_positions.iter().zip(&objs) {
                bound.push((ws[i].clone(), (*o).clone()));
            }
        }
    }
    // Per-type counts.
    let mut per_obj: HashMap<&str, usize> = HashMap::new();
    for (_, o) in &bound {
        *per_obj.entry(o.as_str()).or_default() += 1;
    }
    for &j in &obj_positions {
        if !per_obj.contains_key(ws[j].as_str()) {
            return Err(format!("{name}: object '{}' has no attribute", ws[j]));
        }
    }
    let n_obj = obj_positions.len();
    let (min_obj, max_obj, attrs_per_obj): (usize, usize, (usize, usize)) = match construction {
        Construction::PairSwap => (2, 2, (1, 1)),
        Construction::TripleBindCycle | Construction::TripleBindSwap => (3, 3, (1, 1)),
        Construction::AttrBundle => (2, usize::MAX, (2, usize::MAX)),
        _ => (2, usize::MAX, (1, 1)),
    };
    if n_obj < min_obj || n_obj > max_obj {
        let want = if min_obj == max_obj {
            format!("{min_obj}")
        } else {
            format!("at least {min_obj}")
        };
        return Err(format!("{name}: {n_obj} objects (expected {want})"));
    }
    for (o, k) in &per_obj {
        if *k < attrs_per_obj.0 || *k > attrs_per_obj.1 {
            let want = if attrs_per_obj.0 == attrs_per_obj.1 {
                format!("{}", attrs_per_obj.0)
            } else {
                format!("at least {}", attrs_per_obj.0)
            };
            return Err(format!(
                "{name}: object '{o}' has {k} attributes (expected {want})"
            ));
        }
    }
    Ok(bound.into_iter().collect())
}

fn pair_set(v: &[[String; 2]]) -> Bindings {
    v.iter().map(|[a, o]| (a.clone(), o.clone())).collect()
}

fn fmt_binding(b: &(String, String)) -> String {
    format!("{} {}", b.0, b.1)
}

/// Checks every rule except `json`, `schema` (the caller parsed the row) and `duplicate` (needs
/// the rest of the file), repairing articles first.
///
/// # Errors
/// The first [`Violation`].
pub fn validate(mut ex: Example) -> Result<Validated, Violation> {
    // single_word
    for [a, o] in ex.bindings.iter().chain(ex.queried.iter().flatten()) {
        for (what, w) in [("attribute", a), ("object", o)] {
            if !is_single_word(w) {
                return Err(Violation::new(
                    Rule::SingleWord,
                    format!("{what} '{w}' is not a single lowercase word"),
                ));
            }
        }
    }
    // distinct
    if ex.bindings.len() < 2 {
        return Err(Violation::new(
            Rule::Distinct,
            format!("{} binding(s): at least two are needed", ex.bindings.len()),
        ));
    }
    let attributes: HashSet<&str> = ex.bindings.iter().map(|b| b[0].as_str()).collect();
    let objects: HashSet<&str> = ex.bindings.iter().map(|b| b[1].as_str()).collect();
    if attributes.len() != ex.bindings.len() {
        return Err(Violation::new(
            Rule::Distinct,
            "an attribute is repeated across bindings (attributes must be distinct)",
        ));
    }
    if let Some(w) = attributes.intersection(&objects).next() {
        return Err(Violation::new(
            Rule::Distinct,
            format!("'{w}' is both an attribute and an object"),
        ));
    }
    let declared = pair_set(&ex.bindings);
    // Objects are distinct unless a bundle gives one object several attributes.
    let mut per_obj: HashMap<&str, usize> = HashMap::new();
    for b in &ex.bindings {
        *per_obj.entry(b[1].as_str()).or_default() += 1;
    }
    if ex.construction != Construction::AttrBundle
        && let Some((o, _)) = per_obj.iter().find(|(_, k)| **k > 1)
    {
        return Err(Violation::new(
            Rule::Distinct,
            format!("object '{o}' is repeated (objects must be distinct)"),
        ));
    }
    let queried = pair_set(ex.queried_bindings());
    if let Some(q) = queried.difference(&declared).next() {
        return Err(Violation::new(
            Rule::Distinct,
            format!(
                "queried binding '{}' is not among the bindings",
                fmt_binding(q)
            ),
        ));
    }
    if queried.is_empty() {
        return Err(Violation::new(Rule::Distinct, "no queried binding"));
    }

    // article repair
    let mut repaired = 0;
    for t in [
        &mut ex.anchor,
        &mut ex.positive,
        &mut ex.anchor_negative,
        &mut ex.positive_negative,
    ] {
        let (r, n) = repair_articles(t);
        *t = r;
        repaired += n;
    }
    let texts = [
        ("anchor", ex.anchor.as_str()),
        ("positive", ex.positive.as_str()),
        ("anchor_negative", ex.anchor_negative.as_str()),
        ("positive_negative", ex.positive_negative.as_str()),
    ];

    // mentions
    for (field, t) in texts {
        let ws = word_strings(t);
        for w in attributes.iter().chain(objects.iter()) {
            let k = ws.iter().filter(|x| x == w).count();
            if k != 1 {
                return Err(Violation::new(
                    Rule::Mentions,
                    format!("{field}: '{w}' occurs {k} times (exactly once required)"),
                ));
            }
        }
    }

    // structure (all four texts) and queried-set shape
    let c = ex.construction;
    let mut parsed: Vec<Bindings> = Vec::with_capacity(4);
    for (field, t) in texts {
        parsed.push(
            parse_bindings(c, t, &attributes, &objects)
                .map_err(|m| Violation::new(Rule::Structure, format!("{field}: {m}")))?,
        );
    }
    match c {
        Construction::TripleBindSwap => {
            if queried.len() != 2 || declared.len() != 3 {
                return Err(Violation::new(
                    Rule::Structure,
                    format!(
                        "triple_bind_swap queries 2 of 3 bindings (got {} of {})",
                        queried.len(),
                        declared.len()
                    ),
                ));
            }
        }
        _ => {
            if queried != declared {
                return Err(Violation::new(
                    Rule::Structure,
                    format!(
                        "{c} queries every binding (got {} of {})",
                        queried.len(),
                        declared.len()
                    ),
                ));
            }
        }
    }

    // bindings
    for (i, field) in [(0, "anchor"), (1, "positive")] {
        if parsed[i] != declared {
            let missing: Vec<String> = declared.difference(&parsed[i]).map(fmt_binding).collect();
            let extra: Vec<String> = parsed[i].difference(&declared).map(fmt_binding).collect();
            return Err(Violation::new(
                Rule::Bindings,
                format!(
                    "{field} does not express the declared bindings (missing [{}], extra [{}])",
                    missing.join(", "),
                    extra.join(", ")
                ),
            ));
        }
    }
    // identical
    if word_strings(&ex.anchor) == word_strings(&ex.positive) {
        return Err(Violation::new(
            Rule::Identical,
            "anchor and positive are the same text",
        ));
    }
    // permutation
    for (neg, pos, nf, pf) in [
        (&ex.anchor_negative, &ex.anchor, "anchor_negative", "anchor"),
        (
            &ex.positive_negative,
            &ex.positive,
            "positive_negative",
            "positive",
        ),
    ] {
        if bag_of_words(neg) != bag_of_words(pos) {
            return Err(Violation::new(
                Rule::Permutation,
                format!("{nf} is not a word-level permutation of {pf}"),
            ));
        }
    }
    // unbroken / distractor_moved
    for (i, field) in [(2, "anchor_negative"), (3, "positive_negative")] {
        if let Some(b) = parsed[i].intersection(&queried).next() {
            return Err(Violation::new(
                Rule::Unbroken,
                format!("{field} keeps the queried binding '{}'", fmt_binding(b)),
            ));
        }
        if let Some(b) = declared
            .difference(&queried)
            .find(|b| !parsed[i].contains(*b))
        {
            return Err(Violation::new(
                Rule::DistractorMoved,
                format!(
                    "{field} changes the non-queried binding '{}'",
                    fmt_binding(b)
                ),
            ));
        }
    }
    Ok(Validated {
        example: ex,
        articles_repaired: repaired,
    })
}
