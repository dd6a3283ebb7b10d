//! The triplet-data record: one *example* of a construction type, as a JSONL row, and the two
//! triplets it yields.
//!
//! ```json
//! {"id": "pair_swap-00001", "type": "pair_swap",
//!  "bindings": [["red", "cube"], ["blue", "ball"]],
//!  "anchor": "A red cube and a blue ball.",
//!  "positive": "A blue ball and a red cube.",
//!  "anchor_negative": "A blue cube and a red ball.",
//!  "positive_negative": "A red ball and a blue cube.",
//!  "meta": {"register": "plain"}}
//! ```
//!
//! - `bindings`: every (attribute, object) pair the anchor and the positive express;
//! - `queried` (optional, default: all of `bindings`): the bindings the negatives must break;
//!   the others (only `triple_bind_swap` has one) must stay bound in the negatives;
//! - `anchor`, `positive`: two texts with the same bindings (the pairs in another order);
//! - `anchor_negative` / `positive_negative`: a word-level permutation (a/an equivalent) of the
//!   anchor / positive that breaks every queried binding;
//! - `meta`: free-form (the generator records scene, register, length band, binding distance).
//!
//! Triplets (anchor, positive, negative): `(anchor, positive, positive_negative)` and
//! `(positive, anchor, anchor_negative)`: in both, the negative is a permutation of the
//! triplet's positive, so a bag-of-words encoder cannot tell them apart.

use serde::{Deserialize, Serialize};

/// The seven construction types of the seed study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Construction {
    /// Two adjacent attribute–object pairs, the negative swaps the attributes.
    PairSwap,
    /// Three adjacent pairs, the negative cycles the attributes (every binding broken).
    TripleBindCycle,
    /// Three adjacent pairs, the negative swaps two attributes (two queried bindings broken,
    /// the third kept).
    TripleBindSwap,
    /// Two objects with two adjacent attributes each, the negative swaps the bundles.
    AttrBundle,
    /// "The cube is red and the ball is blue": attributes never adjacent to an object.
    Predicative,
    /// "A cube and a ball; the former is red, the latter blue": attributes after both objects,
    /// bound by anaphora. Held out of training.
    DeferredBindAnaphoric,
    /// "A cube and a ball, red and blue respectively": attributes after both objects, bound by
    /// order. Held out of training.
    DeferredBindRespective,
}

impl Construction {
    /// All seven, in the order of the issue.
    pub const ALL: [Self; 7] = [
        Self::PairSwap,
        Self::TripleBindCycle,
        Self::TripleBindSwap,
        Self::AttrBundle,
        Self::Predicative,
        Self::DeferredBindAnaphoric,
        Self::DeferredBindRespective,
    ];

    /// The snake-case name used in files.
    pub fn name(self) -> &'static str {
        match self {
            Self::PairSwap => "pair_swap",
            Self::TripleBindCycle => "triple_bind_cycle",
            Self::TripleBindSwap => "triple_bind_swap",
            Self::AttrBundle => "attr_bundle",
            Self::Predicative => "predicative",
            Self::DeferredBindAnaphoric => "deferred_bind_anaphoric",
            Self::DeferredBindRespective => "deferred_bind_respective",
        }
    }

    /// Whether the type is held out of training (both deferred_bind types).
    pub fn is_held_out(self) -> bool {
        matches!(
            self,
            Self::DeferredBindAnaphoric | Self::DeferredBindRespective
        )
    }

    /// Whether attributes must stand directly before their object.
    pub fn is_adjacent(self) -> bool {
        matches!(
            self,
            Self::PairSwap | Self::TripleBindCycle | Self::TripleBindSwap | Self::AttrBundle
        )
    }
}

impl std::str::FromStr for Construction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown construction type '{s}' (expected one of {})",
                    Self::ALL.map(Self::name).join(", ")
                )
            })
    }
}

impl std::fmt::Display for Construction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One example (a JSONL row). See the module docs for the fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Example {
    /// Unique id.
    pub id: String,
    /// Construction type.
    #[serde(rename = "type")]
    pub construction: Construction,
    /// `(attribute, object)` pairs expressed by the anchor and the positive.
    pub bindings: Vec<[String; 2]>,
    /// The bindings the negatives must break (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queried: Option<Vec<[String; 2]>>,
    /// Anchor text.
    pub anchor: String,
    /// Binding-preserving paraphrase of the anchor.
    pub positive: String,
    /// Permutation of the anchor breaking the queried bindings.
    pub anchor_negative: String,
    /// Permutation of the positive breaking the queried bindings.
    pub positive_negative: String,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub meta: serde_json::Value,
}

impl Example {
    /// The queried bindings (`queried`, or all of `bindings`).
    pub fn queried_bindings(&self) -> &[[String; 2]] {
        self.queried.as_deref().unwrap_or(&self.bindings)
    }

    /// The two triplets: `(anchor, positive, positive_negative)` and
    /// `(positive, anchor, anchor_negative)`.
    pub fn triplets(&self) -> [Triplet; 2] {
        [
            Triplet {
                id: format!("{}#0", self.id),
                construction: self.construction,
                anchor: self.anchor.clone(),
                positive: self.positive.clone(),
                negative: self.positive_negative.clone(),
                bindings: self.bindings.clone(),
            },
            Triplet {
                id: format!("{}#1", self.id),
                construction: self.construction,
                anchor: self.positive.clone(),
                positive: self.anchor.clone(),
                negative: self.anchor_negative.clone(),
                bindings: self.bindings.clone(),
            },
        ]
    }
}

/// An (anchor, positive, negative) text triple for the hinge triplet loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Triplet {
    /// `<example id>#0` or `#1`.
    pub id: String,
    /// Construction type of the example.
    pub construction: Construction,
    /// Anchor text.
    pub anchor: String,
    /// Text with the anchor's bindings.
    pub positive: String,
    /// Permutation of the positive with the queried bindings broken.
    pub negative: String,
    /// The `(attribute, object)` bindings of anchor and positive (for attention margins).
    pub bindings: Vec<[String; 2]>,
}
