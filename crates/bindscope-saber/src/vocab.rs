//! The SABER vocabulary: objects, attributes (with their generation forms) and the colour
//! palette, read from the tab-separated files in `crates/bindscope-saber/data/`.
//!
//! The built-in vocabulary ([`Vocabulary::builtin`]) is compiled into the binary with
//! `include_str!`, so a generated benchmark does not depend on the working directory;
//! [`Vocabulary::parse`] reads any other set of files with the same layout and the same checks.
//!
//! | file | content |
//! |---|---|
//! | `objects.tsv` | 232 everyday objects (`object`, `group`) |
//! | `attributes.tsv` | 50 attributes (`attribute`, `category`, `type`, `generation`, `variants`) |
//! | `palette.tsv` | 9 colours |
//! | `articles.tsv` | the a/an exceptions table ([`crate::article`]) |
//!
//! Attribute categories (semantic, for documentation and per-category analyses): `light`
//! (colour and light: glowing, transparent, golden, …), `pattern` (striped, checkered, …),
//! `material` (wooden, marble, porcelain, …), `texture` (furry, fluffy, spiky, …), `condition`
//! (rusty, frozen, cracked, …), `style` (pixelated, origami, one-eyed, …).
//!
//! Attribute types decide the generation form (what a text-to-image model is asked to draw):
//!
//! | type | count | text form | generation form |
//! |---|---|---|---|
//! | [`AttributeKind::Standalone`] | 27 | `soap-bubble` | fixed phrase: `iridescent soap-bubble` |
//! | [`AttributeKind::SingleColor`] | 4 | `glowing` | `{color} glowing` → `red glowing` |
//! | [`AttributeKind::TwoColor`] | 6 | `striped` | `{color1} and {color2} striped`, two distinct colours |
//! | [`AttributeKind::FixedVariant`] | 13 | `wooden` | `{variant} wooden`, variant from a fixed list |

use crate::SaberError;
use std::collections::HashSet;

const OBJECTS_TSV: &str = include_str!("../data/objects.tsv");
const ATTRIBUTES_TSV: &str = include_str!("../data/attributes.tsv");
const PALETTE_TSV: &str = include_str!("../data/palette.tsv");

/// How an attribute's generation form is instantiated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttributeKind {
    /// A fixed generation phrase (which contains the attribute word).
    Standalone,
    /// `{color}` filled with one palette colour.
    SingleColor,
    /// `{color1}` and `{color2}` filled with two distinct palette colours.
    TwoColor,
    /// `{variant}` filled with one of [`Attribute::variants`].
    FixedVariant,
}

impl AttributeKind {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "standalone" => Self::Standalone,
            "single-color" => Self::SingleColor,
            "two-color" => Self::TwoColor,
            "fixed-variant" => Self::FixedVariant,
            _ => return None,
        })
    }
}

/// The six semantic categories of `attributes.tsv`.
pub const CATEGORIES: [&str; 6] = [
    "light",
    "pattern",
    "material",
    "texture",
    "condition",
    "style",
];

/// One attribute of the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Attribute {
    /// Text form, one lowercase word (hyphens allowed): `striped`.
    pub name: String,
    /// Semantic category, one of [`CATEGORIES`].
    pub category: String,
    /// Instantiation type.
    pub kind: AttributeKind,
    /// Generation template: the fixed phrase (standalone) or a template with `{color}`,
    /// `{color1}`/`{color2}` or `{variant}`.
    pub generation: String,
    /// Allowed `{variant}` values (fixed-variant only, at least two).
    pub variants: Vec<String>,
}

/// One object of the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Object {
    /// The object word: `cube`.
    pub name: String,
    /// Documentation group (`shape`, `kitchen`, …).
    pub group: String,
}

/// Objects, attributes and palette.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Vocabulary {
    /// Objects, in file order.
    pub objects: Vec<Object>,
    /// Attributes, in file order.
    pub attributes: Vec<Attribute>,
    /// Palette colours, in file order.
    pub palette: Vec<String>,
}

/// Data rows of a TSV file: comments (`#`) and blank lines skipped, the header checked and
/// dropped. Yields `(1-based line number, fields)`.
fn rows<'a>(
    file: &str,
    text: &'a str,
    header: &[&str],
) -> Result<Vec<(usize, Vec<&'a str>)>, SaberError> {
    let mut out = Vec::new();
    let mut seen_header = false;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        if !seen_header {
            if fields != header {
                return Err(SaberError::vocab(
                    file,
                    line_no,
                    format!("expected the header '{}'", header.join("\\t")),
                ));
            }
            seen_header = true;
            continue;
        }
        if fields.len() != header.len() {
            return Err(SaberError::vocab(
                file,
                line_no,
                format!(
                    "{} tab-separated fields, expected {} ({})",
                    fields.len(),
                    header.len(),
                    header.join(", ")
                ),
            ));
        }
        out.push((line_no, fields));
    }
    if !seen_header {
        return Err(SaberError::vocab(
            file,
            0,
            format!("no header line '{}'", header.join("\\t")),
        ));
    }
    Ok(out)
}

/// A vocabulary word: lowercase ASCII letters, digits and inner hyphens.
fn is_word(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl Vocabulary {
    /// The vocabulary shipped in `crates/bindscope-saber/data/` (232 objects, 50 attributes,
    /// 9 colours).
    pub fn builtin() -> Self {
        Self::parse(OBJECTS_TSV, ATTRIBUTES_TSV, PALETTE_TSV)
            .expect("the built-in vocabulary files are valid (tested)")
    }

    /// Parses the three files (their contents) and checks them: headers, field counts, word
    /// syntax, no duplicates, objects / attributes / colours pairwise disjoint, known
    /// categories and types, templates with exactly the placeholders of their type, at least
    /// two variants for fixed-variant attributes and at least two colours.
    ///
    /// # Errors
    /// [`SaberError::Vocabulary`] naming the file, the line and the rule broken.
    pub fn parse(
        objects_tsv: &str,
        attributes_tsv: &str,
        palette_tsv: &str,
    ) -> Result<Self, SaberError> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut check_word = |file: &str,
                              line: usize,
                              w: &str,
                              what: &str|
         -> Result<(), SaberError> {
            if !is_word(w) {
                return Err(SaberError::vocab(
                    file,
                    line,
                    format!("{what} '{w}' is not a lowercase word (a-z, 0-9, inner '-')"),
                ));
            }
            if !seen.insert(w.to_string()) {
                return Err(SaberError::vocab(
                    file,
                    line,
                    format!(
                        "{what} '{w}' appears twice in the vocabulary (objects, attributes and colours must be distinct)"
                    ),
                ));
            }
            Ok(())
        };

        let mut palette = Vec::new();
        for (line, f) in rows("palette.tsv", palette_tsv, &["color"])? {
            check_word("palette.tsv", line, f[0], "colour")?;
            palette.push(f[0].to_string());
        }
        if palette.len() < 2 {
            return Err(SaberError::vocab(
                "palette.tsv",
                0,
                "two-color attributes need at least two colours",
            ));
        }

        let mut objects = Vec::new();
        for (line, f) in rows("objects.tsv", objects_tsv, &["object", "group"])? {
            check_word("objects.tsv", line, f[0], "object")?;
            if f[1].is_empty() {
                return Err(SaberError::vocab("objects.tsv", line, "empty group"));
            }
            objects.push(Object {
                name: f[0].to_string(),
                group: f[1].to_string(),
            });
        }

        let mut attributes = Vec::new();
        let file = "attributes.tsv";
        for (line, f) in rows(
            file,
            attributes_tsv,
            &["attribute", "category", "type", "generation", "variants"],
        )? {
            let name = f[0];
            check_word(file, line, name, "attribute")?;
            if !CATEGORIES.contains(&f[1]) {
                return Err(SaberError::vocab(
                    file,
                    line,
                    format!(
                        "unknown category '{}' (expected one of {})",
                        f[1],
                        CATEGORIES.join(", ")
                    ),
                ));
            }
            let kind = AttributeKind::parse(f[2]).ok_or_else(|| {
                SaberError::vocab(
                    file,
                    line,
                    format!(
                        "unknown type '{}' (standalone, single-color, two-color, fixed-variant)",
                        f[2]
                    ),
                )
            })?;
            let generation = if f[3] == "-" {
                name.to_string()
            } else {
                f[3].to_string()
            };
            let variants: Vec<String> = if f[4] == "-" {
                Vec::new()
            } else {
                f[4].split('|').map(str::to_string).collect()
            };
            let placeholders = ["{color}", "{color1}", "{color2}", "{variant}"];
            let expected: &[&str] = match kind {
                AttributeKind::Standalone => &[],
                AttributeKind::SingleColor => &["{color}"],
                AttributeKind::TwoColor => &["{color1}", "{color2}"],
                AttributeKind::FixedVariant => &["{variant}"],
            };
            for p in placeholders {
                let n = generation.matches(p).count();
                let want = usize::from(expected.contains(&p));
                if n != want {
                    return Err(SaberError::vocab(
                        file,
                        line,
                        format!(
                            "a {} attribute's generation template must contain {p} {want} time(s), found {n}",
                            f[2]
                        ),
                    ));
                }
            }
            if generation.contains('{') && expected.is_empty() {
                return Err(SaberError::vocab(
                    file,
                    line,
                    "a standalone generation phrase has no placeholders",
                ));
            }
            if !generation.split(' ').any(|w| {
                w == name || w.ends_with(&format!("-{name}")) || w.starts_with(&format!("{name}-"))
            }) {
                return Err(SaberError::vocab(
                    file,
                    line,
                    format!(
                        "the generation form '{generation}' must contain the attribute word '{name}'"
                    ),
                ));
            }
            match kind {
                AttributeKind::FixedVariant if variants.len() < 2 => {
                    return Err(SaberError::vocab(
                        file,
                        line,
                        "a fixed-variant attribute needs at least two variants (a|b)",
                    ));
                }
                AttributeKind::FixedVariant => {
                    if let Some(v) = variants.iter().find(|v| !is_word(v)) {
                        return Err(SaberError::vocab(
                            file,
                            line,
                            format!("variant '{v}' is not a lowercase word"),
                        ));
                    }
                }
                _ if !variants.is_empty() => {
                    return Err(SaberError::vocab(
                        file,
                        line,
                        "only fixed-variant attributes have variants (use '-')",
                    ));
                }
                _ => {}
            }
            attributes.push(Attribute {
                name: name.to_string(),
                category: f[1].to_string(),
                kind,
                generation,
                variants,
            });
        }
        if objects.len() < 12 || attributes.len() < 12 {
            return Err(SaberError::vocab(
                "objects.tsv/attributes.tsv",
                0,
                format!(
                    "{} objects and {} attributes: N = 10 bindings plus one replacement need at least 12 of each",
                    objects.len(),
                    attributes.len()
                ),
            ));
        }
        Ok(Self {
            objects,
            attributes,
            palette,
        })
    }

    /// Counts per attribute type, `[standalone, single-color, two-color, fixed-variant]`.
    pub fn kind_counts(&self) -> [usize; 4] {
        let mut c = [0; 4];
        for a in &self.attributes {
            c[match a.kind {
                AttributeKind::Standalone => 0,
                AttributeKind::SingleColor => 1,
                AttributeKind::TwoColor => 2,
                AttributeKind::FixedVariant => 3,
            }] += 1;
        }
        c
    }

    /// Index of an attribute by its text form.
    pub fn attribute(&self, name: &str) -> Option<usize> {
        self.attributes.iter().position(|a| a.name == name)
    }

    /// Index of an object by name.
    pub fn object(&self, name: &str) -> Option<usize> {
        self.objects.iter().position(|o| o.name == name)
    }
}
