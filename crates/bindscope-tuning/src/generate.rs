//! The template generator of triplet examples, for the seven construction types.
//!
//! Per type, `per_type` examples; each one:
//! 1. picks its words under the frequency caps: 2 objects (3 for `triple_bind_*`) and one
//!    attribute per object (two for `attr_bundle`, from two categories written in adjective
//!    order, "a small red cube"); with `same_category` the single attributes of one example
//!    share a category ("red" vs "blue", not "red" vs "wooden");
//! 2. picks a register (template), a scene (probability `scene_prob`, when the template has a
//!    slot) and a distractor pair (probability `distractor_prob`, idem);
//! 3. renders the anchor with the pairs in order 1..n and the positive with the pairs reversed,
//!    and each negative from the same template and pair order with the attributes permuted:
//!    swapped (2 pairs, and the bundles of `attr_bundle`), cycled (`triple_bind_cycle`,
//!    direction at random), or two of three swapped (`triple_bind_swap`, the third pair kept and
//!    not queried). Articles are chosen by pronunciation, so every negative is a word-level
//!    permutation of its positive up to a/an;
//! 4. keeps the render if the anchor's word count falls in the target length band (bands taken
//!    in turn) and its binding distance (largest word distance between a queried attribute and
//!    its object) in the allowed range; otherwise it redraws (step 2, then step 1), up to
//!    `max_attempts` times; when the band cannot be met the example takes any band and the
//!    fallback is counted.
//!
//! Every example then goes through the [`crate::validate`] rules like an imported row; the
//! tests check the generator's output is kept entirely. Seeded and deterministic: type `t`
//! draws from ChaCha20 stream `t` of the seed, so changing `per_type` of one type leaves the
//! others unchanged.

use crate::example::{Construction, Example};
use crate::vocab::{Template, TemplateVocab};
use crate::words::{capitalize, word_strings};
use bindscope_saber::article::with_article;
use bindscope_saber::generate::Rng;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A length band: anchors with `min..=max` words.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LengthBand {
    /// Name ("short").
    pub name: String,
    /// Fewest words.
    pub min: usize,
    /// Most words.
    pub max: usize,
}

impl LengthBand {
    /// `short` ≤ 9 words, `medium` 10–14, `long` ≥ 15.
    pub fn defaults() -> Vec<Self> {
        vec![
            Self {
                name: "short".into(),
                min: 1,
                max: 9,
            },
            Self {
                name: "medium".into(),
                min: 10,
                max: 14,
            },
            Self {
                name: "long".into(),
                min: 15,
                max: usize::MAX,
            },
        ]
    }
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GeneratorConfig {
    /// Master seed.
    pub seed: u64,
    /// Examples per construction type.
    pub per_type: usize,
    /// Construction types to generate (default: all seven).
    pub types: Vec<Construction>,
    /// Registers allowed (empty: all).
    pub registers: Vec<String>,
    /// Probability of a scene phrase where the template has a slot.
    pub scene_prob: f64,
    /// Probability of a distractor pair where the template has a slot.
    pub distractor_prob: f64,
    /// Target length bands, taken in turn.
    pub length_bands: Vec<LengthBand>,
    /// Allowed binding distance `[min, max]` in words (largest over the queried bindings of the
    /// anchor); `None`: any.
    pub binding_distance: Option<(usize, usize)>,
    /// Frequency cap: most examples one attribute or object word may appear in (`None`: 1.25 ×
    /// the mean use of an attribute word, at least 4).
    pub max_word_uses: Option<usize>,
    /// Single attributes of one example come from one category.
    pub same_category: bool,
    /// Redraws per example before giving up on the band (then on the example).
    pub max_attempts: usize,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            per_type: 400,
            types: Construction::ALL.to_vec(),
            registers: Vec::new(),
            scene_prob: 0.5,
            distractor_prob: 0.3,
            length_bands: LengthBand::defaults(),
            binding_distance: None,
            max_word_uses: None,
            same_category: true,
            max_attempts: 200,
        }
    }
}

/// Counts the generator reports.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GeneratorStats {
    /// Examples per type.
    pub per_type: BTreeMap<String, usize>,
    /// Examples per `type/band`.
    pub per_band: BTreeMap<String, usize>,
    /// Examples per `type/register`.
    pub per_register: BTreeMap<String, usize>,
    /// Examples per binding distance.
    pub per_distance: BTreeMap<usize, usize>,
    /// Examples that could not meet their target band.
    pub band_fallbacks: usize,
    /// The frequency cap in force.
    pub max_word_uses: usize,
    /// Most uses of any attribute / object word.
    pub max_observed_uses: usize,
    /// Examples with a scene / with a distractor.
    pub with_scene: usize,
    /// Examples with a distractor pair.
    pub with_distractor: usize,
}

/// One attribute–object pair of an example: one or two attributes (bundle), one object.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pair {
    attrs: Vec<String>,
    object: String,
}

/// Slot fillers shared by the four texts of an example.
struct Frame<'a> {
    template: &'a Template,
    scene: Option<&'a str>,
    distractor: Option<String>,
}

fn render(frame: &Frame<'_>, pairs: &[Pair], order: &[usize]) -> String {
    let mut s = frame.template.text.clone();
    for (slot, &i) in order.iter().enumerate() {
        let p = &pairs[i];
        let k = slot + 1;
        let np = with_article(&format!("{} {}", p.attrs.join(" "), p.object));
        s = s.replace(&format!("{{NP{k}}}"), &np);
        s = s.replace(&format!("{{DO{k}}}"), &with_article(&p.object));
        s = s.replace(&format!("{{A{k}}}"), &p.attrs.join(" "));
        s = s.replace(&format!("{{O{k}}}"), &p.object);
    }
    let scene = frame.scene.map(|p| format!(" {p}")).unwrap_or_default();
    let lead = frame.scene.map(|p| format!("{p}, ")).unwrap_or_default();
    s = s
        .replace("{SCENE}", &scene)
        .replace("{LEAD}", &lead)
        .replace("{DIST}", frame.distractor.as_deref().unwrap_or(""));
    capitalize(&s)
}

/// Largest word distance between a queried attribute and its object in `text`.
pub fn binding_distance(text: &str, queried: &[[String; 2]]) -> usize {
    let ws = word_strings(text);
    let pos = |w: &str| ws.iter().position(|x| x == w);
    queried
        .iter()
        .filter_map(|[a, o]| Some(pos(a)?.abs_diff(pos(o)?)))
        .max()
        .unwrap_or(0)
}

struct Picker<'a> {
    vocab: &'a TemplateVocab,
    cap: usize,
    uses: HashMap<String, usize>,
}

impl Picker<'_> {
    fn free(&self, w: &str) -> bool {
        self.uses.get(w).copied().unwrap_or(0) < self.cap
    }

    /// `k` distinct objects under the cap.
    fn objects(&self, rng: &mut Rng, k: usize) -> Option<Vec<String>> {
        let pool: Vec<&str> = self
            .vocab
            .objects
            .iter()
            .map(|o| o.word.as_str())
            .filter(|w| self.free(w))
            .collect();
        pick(rng, &pool, k)
    }

    /// `k` distinct attributes under the cap, from one category when `same`, else any; with
    /// `exclude_category`, not from that one.
    fn attributes(
        &self,
        rng: &mut Rng,
        k: usize,
        same: bool,
        exclude_category: Option<&str>,
    ) -> Option<(Vec<String>, String)> {
        let cats: Vec<String> = self
            .vocab
            .categories()
            .into_iter()
            .filter(|c| Some(c.as_str()) != exclude_category)
            .collect();
        let free_in = |c: &str| -> Vec<&str> {
            self.vocab
                .attributes
                .iter()
                .filter(|a| a.category == c && self.free(&a.word))
                .map(|a| a.word.as_str())
                .collect()
        };
        if same {
            let ok: Vec<&String> = cats.iter().filter(|c| free_in(c).len() >= k).collect();
            if ok.is_empty() {
                return None;
            }
            let c = ok[rng.below(ok.len())].clone();
            let words = pick(rng, &free_in(&c), k)?;
            Some((words, c))
        } else {
            let pool: Vec<&str> = self
                .vocab
                .attributes
                .iter()
                .filter(|a| Some(a.category.as_str()) != exclude_category && self.free(&a.word))
                .map(|a| a.word.as_str())
                .collect();
            Some((pick(rng, &pool, k)?, String::new()))
        }
    }

    fn commit(&mut self, words: impl IntoIterator<Item = String>) {
        for w in words {
            *self.uses.entry(w).or_default() += 1;
        }
    }
}

fn pick(rng: &mut Rng, pool: &[&str], k: usize) -> Option<Vec<String>> {
    if pool.len() < k {
        return None;
    }
    let idx = rng.distinct(pool.len(), k, &HashSet::new()).ok()?;
    Some(idx.into_iter().map(|i| pool[i].to_string()).collect())
}

fn attr_rank(vocab: &TemplateVocab, w: &str) -> u32 {
    vocab
        .attributes
        .iter()
        .find(|a| a.word == w)
        .map_or(0, |a| a.order)
}

/// Draws the pairs of one example.
fn draw_pairs(
    c: Construction,
    picker: &Picker<'_>,
    rng: &mut Rng,
    same_category: bool,
) -> Option<Vec<Pair>> {
    let n = match c {
        Construction::TripleBindCycle | Construction::TripleBindSwap => 3,
        _ => 2,
    };
    let objects = picker.objects(rng, n)?;
    if c == Construction::AttrBundle {
        let (first, cat) = picker.attributes(rng, n, true, None)?;
        let (second, _) = picker.attributes(rng, n, true, Some(&cat))?;
        Some(
            objects
                .into_iter()
                .zip(first.into_iter().zip(second))
                .map(|(object, (a, b))| {
                    let mut attrs = vec![a, b];
                    attrs.sort_by_key(|w| attr_rank(picker.vocab, w));
                    Pair { attrs, object }
                })
                .collect(),
        )
    } else {
        let (attrs, _) = picker.attributes(rng, n, same_category, None)?;
        Some(
            objects
                .into_iter()
                .zip(attrs)
                .map(|(object, a)| Pair {
                    attrs: vec![a],
                    object,
                })
                .collect(),
        )
    }
}

/// The attribute permutation of the negatives: `neg[i].attrs = pairs[sigma[i]].attrs`, and the
/// index of the kept (non-queried) pair for `triple_bind_swap`.
fn negative_permutation(c: Construction, n: usize, rng: &mut Rng) -> (Vec<usize>, Option<usize>) {
    match c {
        Construction::TripleBindCycle => {
            if rng.coin() {
                (vec![1, 2, 0], None)
            } else {
                (vec![2, 0, 1], None)
            }
        }
        Construction::TripleBindSwap => {
            let keep = rng.below(3);
            let others: Vec<usize> = (0..3).filter(|&i| i != keep).collect();
            let mut s = vec![0, 1, 2];
            s[others[0]] = others[1];
            s[others[1]] = others[0];
            (s, Some(keep))
        }
        _ => ((0..n).map(|i| (i + 1) % n).collect(), None),
    }
}

/// Generates examples (not yet validated: run them through [`crate::import::validate_rows`]).
///
/// # Errors
/// A message when the vocabulary or the caps cannot satisfy the configuration.
pub fn generate(
    vocab: &TemplateVocab,
    cfg: &GeneratorConfig,
) -> Result<(Vec<Example>, GeneratorStats), String> {
    if cfg.length_bands.is_empty() {
        return Err("at least one length band is needed".into());
    }
    // Default frequency cap: 1.25 × the mean number of examples an attribute word appears in
    // (attributes are the scarcer words: 48 for 81 objects).
    let attr_slots: usize = cfg
        .types
        .iter()
        .map(|c| match c {
            Construction::TripleBindCycle | Construction::TripleBindSwap => 3,
            Construction::AttrBundle => 4,
            _ => 2,
        })
        .sum::<usize>()
        * cfg.per_type;
    let mean_use = attr_slots as f64 / vocab.attributes.len().max(1) as f64;
    let cap = cfg
        .max_word_uses
        .unwrap_or_else(|| ((1.25 * mean_use).ceil() as usize).max(4));
    let mut stats = GeneratorStats {
        max_word_uses: cap,
        ..Default::default()
    };
    let mut picker = Picker {
        vocab,
        cap,
        uses: HashMap::new(),
    };
    let mut out = Vec::new();
    let mut anchors: HashSet<String> = HashSet::new();
    for &c in &cfg.types {
        let stream = Construction::ALL.iter().position(|&x| x == c).unwrap_or(0) as u64;
        let mut rng = Rng::new(cfg.seed, stream);
        let templates: Vec<&Template> = vocab
            .templates
            .iter()
            .filter(|t| {
                t.construction == c
                    && (cfg.registers.is_empty() || cfg.registers.contains(&t.register))
            })
            .collect();
        if templates.is_empty() {
            return Err(format!(
                "no template of {c} in the registers {:?}",
                cfg.registers
            ));
        }
        for k in 0..cfg.per_type {
            let band = &cfg.length_bands[k % cfg.length_bands.len()];
            let mut made = None;
            let mut fallback = None;
            for attempt in 0..cfg.max_attempts.max(1) {
                let Some(pairs) = draw_pairs(c, &picker, &mut rng, cfg.same_category) else {
                    return Err(format!(
                        "{c}: the frequency cap {cap} leaves too few words (raise max_word_uses)"
                    ));
                };
                let template = templates[rng.below(templates.len())];
                let scene = (template.has_scene()
                    && rng.below(1000) < (cfg.scene_prob * 1000.0) as usize)
                    .then(|| &vocab.scenes[rng.below(vocab.scenes.len())]);
                let distractor = (template.has_distractor()
                    && rng.below(1000) < (cfg.distractor_prob * 1000.0) as usize)
                    .then(|| &vocab.distractors[rng.below(vocab.distractors.len())]);
                let frame = Frame {
                    template,
                    scene: scene.map(|s| s.phrase.as_str()),
                    distractor: distractor.map(|d| {
                        format!(
                            ", {} {}",
                            d.preposition,
                            with_article(&format!("{} {}", d.attribute, d.object))
                        )
                    }),
                };
                let n = pairs.len();
                let forward: Vec<usize> = (0..n).collect();
                let reverse: Vec<usize> = (0..n).rev().collect();
                let (sigma, keep) = negative_permutation(c, n, &mut rng);
                let neg_pairs: Vec<Pair> = (0..n)
                    .map(|i| Pair {
                        attrs: pairs[sigma[i]].attrs.clone(),
                        object: pairs[i].object.clone(),
                    })
                    .collect();
                let anchor = render(&frame, &pairs, &forward);
                let bindings: Vec<[String; 2]> = pairs
                    .iter()
                    .flat_map(|p| p.attrs.iter().map(|a| [a.clone(), p.object.clone()]))
                    .collect();
                let queried: Option<Vec<[String; 2]>> = keep.map(|kp| {
                    pairs
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != kp)
                        .flat_map(|(_, p)| p.attrs.iter().map(|a| [a.clone(), p.object.clone()]))
                        .collect()
                });
                let words_n = word_strings(&anchor).len();
                let dist = binding_distance(&anchor, queried.as_deref().unwrap_or(&bindings));
                let key = word_strings(&anchor).join(" ");
                if anchors.contains(&key) {
                    continue;
                }
                if let Some((lo, hi)) = cfg.binding_distance
                    && (dist < lo || dist > hi)
                {
                    continue;
                }
                let ex = Example {
                    id: format!("{}-{:05}", c.name(), k),
                    construction: c,
                    bindings,
                    queried,
                    anchor: anchor.clone(),
                    positive: render(&frame, &pairs, &reverse),
                    anchor_negative: render(&frame, &neg_pairs, &forward),
                    positive_negative: render(&frame, &neg_pairs, &reverse),
                    meta: serde_json::Value::Null,
                };
                let actual_band = cfg
                    .length_bands
                    .iter()
                    .find(|b| (b.min..=b.max).contains(&words_n))
                    .map(|b| b.name.clone());
                let meta = |band_name: &str| {
                    serde_json::json!({
                        "source": "template",
                        "register": template.register,
                        "scene": scene.map(|s| s.name.clone()),
                        "distractor": distractor.map(|d| format!("{} {}", d.attribute, d.object)),
                        "length_band": band_name,
                        "words": words_n,
                        "binding_distance": dist,
                        "seed": cfg.seed,
                        "attempts": attempt + 1,
                    })
                };
                if words_n >= band.min && words_n <= band.max {
                    let mut ex = ex;
                    ex.meta = meta(&band.name);
                    made = Some((ex, key, scene.is_some(), distractor.is_some()));
                    break;
                }
                if fallback.is_none()
                    && let Some(b) = actual_band
                {
                    let mut ex = ex;
                    ex.meta = meta(&b);
                    fallback = Some((ex, key, scene.is_some(), distractor.is_some()));
                }
            }
            let (ex, key, has_scene, has_dist) = match (made, fallback) {
                (Some(m), _) => m,
                (None, Some(f)) => {
                    stats.band_fallbacks += 1;
                    f
                }
                (None, None) => {
                    return Err(format!(
                        "{c}: no example within the length bands and binding-distance range after {} attempts",
                        cfg.max_attempts
                    ));
                }
            };
            anchors.insert(key);
            let mut used: Vec<String> = ex.bindings.iter().map(|b| b[0].clone()).collect();
            let mut objs: Vec<String> = ex.bindings.iter().map(|b| b[1].clone()).collect();
            objs.dedup();
            used.extend(objs);
            picker.commit(used);
            *stats.per_type.entry(c.name().into()).or_default() += 1;
            let band_name = ex.meta["length_band"].as_str().unwrap_or("?").to_string();
            *stats
                .per_band
                .entry(format!("{c}/{band_name}"))
                .or_default() += 1;
            *stats
                .per_register
                .entry(format!(
                    "{c}/{}",
                    ex.meta["register"].as_str().unwrap_or("?")
                ))
                .or_default() += 1;
            *stats
                .per_distance
                .entry(ex.meta["binding_distance"].as_u64().unwrap_or(0) as usize)
                .or_default() += 1;
            stats.with_scene += usize::from(has_scene);
            stats.with_distractor += usize::from(has_dist);
            out.push(ex);
        }
    }
    stats.max_observed_uses = picker.uses.values().copied().max().unwrap_or(0);
    Ok((out, stats))
}
