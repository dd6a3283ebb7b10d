//! The seeded SABER generator: MCQ items with `N` bindings (independent and nested chains),
//! their text and generation forms, and the text-to-image prompts.
//!
//! # Determinism
//! Every random choice comes from a ChaCha20 stream (`rand_chacha`, whose output is specified
//! bit for bit and independent of the platform) keyed by the seed (little-endian in the first
//! eight bytes of the 32-byte key, the rest zero) and a stream number that names what is
//! drawn: independent item `k` of size `N` is stream `1·2³² + N·2¹⁶ + k`, chain `c` is stream
//! `2·2³² + c`, the prompts are stream `3·2³²`. Integers in `[0, n)` are drawn by rejection
//! from 64-bit outputs and permutations by Fisher–Yates, both written here, so the output does
//! not depend on the sampling algorithms of any `rand` version. One item can thus be
//! regenerated alone and the items do not depend on the order they are generated in.
//!
//! # Chains
//! A chain starts with two bindings and adds one new binding (an object and an attribute not
//! yet in the chain) per step up to `N = 10`; at every step the query's pair order is drawn
//! afresh and the candidates are built anew. An attribute keeps its instantiation (colours,
//! variant) along the whole chain, so every later step contains every binding of an earlier
//! step verbatim.

use crate::SaberError;
use crate::article::with_article;
use crate::vocab::{AttributeKind, Vocabulary};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::RngCore;
use std::collections::HashSet;

/// One attribute–object binding.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pair {
    /// The attribute's text form: `striped`.
    pub attribute: String,
    /// The object: `cube`.
    pub object: String,
    /// The attribute's instantiated generation form: `white and orange striped`.
    pub attribute_gen: String,
}

impl Pair {
    /// `a striped cube`.
    pub fn text_phrase(&self) -> String {
        with_article(&format!("{} {}", self.attribute, self.object))
    }

    /// `a white and orange striped cube`.
    pub fn gen_phrase(&self) -> String {
        with_article(&format!("{} {}", self.attribute_gen, self.object))
    }

    /// The binding `(attribute, object)` (text forms).
    pub fn binding(&self) -> (&str, &str) {
        (&self.attribute, &self.object)
    }
}

/// Joins noun phrases as an English conjunction: `"X."`, `"X and Y."`, `"X, Y, and Z."`
/// (serial comma), first letter capitalised.
pub fn conjunction(phrases: &[String]) -> String {
    let body = match phrases {
        [] => String::new(),
        [one] => one.clone(),
        [a, b] => format!("{a} and {b}"),
        [init @ .., last] => format!("{}, and {last}", init.join(", ")),
    };
    let mut chars = body.chars();
    let mut out: String = match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    };
    out.push('.');
    out
}

/// The text form of a list of pairs: `"A striped cube and a transparent kite."`.
pub fn render_text(pairs: &[Pair]) -> String {
    conjunction(&pairs.iter().map(Pair::text_phrase).collect::<Vec<_>>())
}

/// The generation form: `"A white and orange striped cube and a transparent kite."`.
pub fn render_gen(pairs: &[Pair]) -> String {
    conjunction(&pairs.iter().map(Pair::gen_phrase).collect::<Vec<_>>())
}

/// What a candidate is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateKind {
    /// Candidate 1: the query's bindings, pairs reordered (the correct answer).
    Bind,
    /// Candidate 2: attributes permuted across candidate 1's objects.
    AttrPerm,
    /// Candidate 3: objects permuted under candidate 1's attributes.
    ObjPerm,
    /// Candidate 4 for `N ≥ 3`: both permuted.
    BothPerm,
    /// Candidate 4 for `N = 2`: one binding kept, the other's object or attribute replaced.
    Replace,
}

impl CandidateKind {
    /// The snake_case name used in the JSONL and the reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bind => "bind",
            Self::AttrPerm => "attr_perm",
            Self::ObjPerm => "obj_perm",
            Self::BothPerm => "both_perm",
            Self::Replace => "replace",
        }
    }

    /// The kinds of candidates 1–4 for `n` bindings.
    pub fn for_n(n: usize) -> [Self; 4] {
        [
            Self::Bind,
            Self::AttrPerm,
            Self::ObjPerm,
            if n == 2 {
                Self::Replace
            } else {
                Self::BothPerm
            },
        ]
    }
}

/// A query or a candidate: id, pairs in text order, both forms.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Caption {
    /// `<item>-q` for the query, `<item>-c1` … `<item>-c4` for the candidates; the image of
    /// this caption is `<id>.png` (or `.jpg`, `.jpeg`, `.webp`).
    pub id: String,
    /// Candidate kind (absent for the query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<CandidateKind>,
    /// The pairs in text order.
    pub pairs: Vec<Pair>,
    /// Text form ([`render_text`]).
    pub text: String,
    /// Generation form ([`render_gen`]).
    pub gen_text: String,
}

impl Caption {
    fn new(id: String, kind: Option<CandidateKind>, pairs: Vec<Pair>) -> Self {
        let text = render_text(&pairs);
        let gen_text = render_gen(&pairs);
        Self {
            id,
            kind,
            pairs,
            text,
            gen_text,
        }
    }

    /// The set of bindings, sorted.
    pub fn bindings(&self) -> Vec<(&str, &str)> {
        let mut b: Vec<_> = self.pairs.iter().map(Pair::binding).collect();
        b.sort_unstable();
        b
    }
}

/// How an item was sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Sampled on its own.
    Independent,
    /// A step of a nested chain.
    Chain,
}

/// One multiple-choice item (one JSONL row).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McqItem {
    /// `saber-n03-ind-007` or `saber-n03-chain-012`.
    pub id: String,
    /// Number of bindings.
    pub n: usize,
    /// Independent or chain.
    pub source: Source,
    /// The chain id (`saber-chain-012`) for chain items.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<String>,
    /// The query.
    pub query: Caption,
    /// Candidates 1–4 (kinds [`CandidateKind::for_n`]).
    pub candidates: Vec<Caption>,
    /// Index of the correct candidate (always 0: candidate 1).
    pub answer: usize,
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GenerateConfig {
    /// Master seed.
    pub seed: u64,
    /// Smallest number of bindings (≥ 2).
    pub n_min: usize,
    /// Largest number of bindings.
    pub n_max: usize,
    /// Independent items per `N`.
    pub independent_per_n: usize,
    /// Number of nested chains (each gives one item per `N`).
    pub chains: usize,
}

impl Default for GenerateConfig {
    /// The benchmark of the issue: `N` = 2..10, 100 independent + 100 chain items per `N`,
    /// seed 42 (1,800 items, 7,200 candidates).
    fn default() -> Self {
        Self {
            seed: 42,
            n_min: 2,
            n_max: 10,
            independent_per_n: 100,
            chains: 100,
        }
    }
}

/// A deterministic random source: ChaCha20 with platform-independent integer sampling.
pub struct Rng(ChaCha20Rng);

impl Rng {
    /// Stream `stream` of `seed` (see the module docs).
    pub fn new(seed: u64, stream: u64) -> Self {
        Self(bindscope_core::rng::legacy::saber(seed, stream))
    }

    /// Uniform in `[0, n)`, `n ≥ 1`, by rejection sampling of 64-bit outputs.
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "below(0)");
        let n = n as u64;
        let zone = u64::MAX - (u64::MAX % n); // accept x < zone: zone is a multiple of n
        loop {
            let x = self.0.next_u64();
            if x < zone {
                return (x % n) as usize;
            }
        }
    }

    /// A fair coin.
    pub fn coin(&mut self) -> bool {
        self.below(2) == 1
    }

    /// Fisher–Yates shuffle (from the back).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }

    /// A uniform permutation of `0..n`.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        self.shuffle(&mut p);
        p
    }

    /// A uniform non-identity permutation of `0..n` (`n ≥ 2`), by rejection.
    pub fn non_identity_permutation(&mut self, n: usize) -> Vec<usize> {
        assert!(n >= 2, "no non-identity permutation of {n} elements");
        loop {
            let p = self.permutation(n);
            if p.iter().enumerate().any(|(i, &x)| i != x) {
                return p;
            }
        }
    }

    /// `k` distinct indices of `0..n` not in `exclude`, in random order (partial Fisher–Yates
    /// over the allowed indices in increasing order).
    pub fn distinct(
        &mut self,
        n: usize,
        k: usize,
        exclude: &HashSet<usize>,
    ) -> Result<Vec<usize>, SaberError> {
        let mut pool: Vec<usize> = (0..n).filter(|i| !exclude.contains(i)).collect();
        if pool.len() < k {
            return Err(SaberError::Generate(format!(
                "need {k} distinct elements, only {} available",
                pool.len()
            )));
        }
        for i in 0..k {
            let j = i + self.below(pool.len() - i);
            pool.swap(i, j);
        }
        pool.truncate(k);
        Ok(pool)
    }

    /// The next raw 64-bit output (for recorded per-image seeds).
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
}

/// Instantiates an attribute's generation form: one colour / two distinct colours / one variant.
pub fn instantiate(vocab: &Vocabulary, attribute: usize, rng: &mut Rng) -> String {
    let a = &vocab.attributes[attribute];
    let pal = &vocab.palette;
    match a.kind {
        AttributeKind::Standalone => a.generation.clone(),
        AttributeKind::SingleColor => a.generation.replace("{color}", &pal[rng.below(pal.len())]),
        AttributeKind::TwoColor => {
            let c = rng
                .distinct(pal.len(), 2, &HashSet::new())
                .expect("palette has ≥ 2 colours (checked at load)");
            a.generation
                .replace("{color1}", &pal[c[0]])
                .replace("{color2}", &pal[c[1]])
        }
        AttributeKind::FixedVariant => a
            .generation
            .replace("{variant}", &a.variants[rng.below(a.variants.len())]),
    }
}

/// An attribute with its instantiation (moves as a unit when attributes are permuted).
#[derive(Debug, Clone)]
struct Attr {
    index: usize,
    name: String,
    gen_form: String,
}

fn pair(a: &Attr, object: &str) -> Pair {
    Pair {
        attribute: a.name.clone(),
        object: object.to_string(),
        attribute_gen: a.gen_form.clone(),
    }
}

/// The query's pairs as `(attribute, object index)`.
struct Binding {
    attr: Attr,
    object: usize,
}

/// `f[j]` = the object position bound to the attribute at position `j`, from the positions
/// `(attribute, object)` of each text slot.
fn assignment(slots: &[(usize, usize)]) -> Vec<usize> {
    let mut f = vec![0; slots.len()];
    for &(a, o) in slots {
        f[a] = o;
    }
    f
}

/// Builds one item from the query's pairs (in query order).
fn build_item(
    vocab: &Vocabulary,
    id: String,
    source: Source,
    chain: Option<String>,
    query: &[Binding],
    rng: &mut Rng,
) -> Result<McqItem, SaberError> {
    let n = query.len();
    let obj = |i: usize| vocab.objects[i].name.as_str();
    let q_pairs: Vec<Pair> = query.iter().map(|b| pair(&b.attr, obj(b.object))).collect();

    // Candidate 1's frame: the query's pairs in a different order.
    let pi = rng.non_identity_permutation(n);
    let frame: Vec<&Binding> = pi.iter().map(|&k| &query[k]).collect();
    let attrs: Vec<&Attr> = frame.iter().map(|b| &b.attr).collect();
    let objs: Vec<usize> = frame.iter().map(|b| b.object).collect();
    let slots_pairs = |slots: &[(usize, usize)]| -> Vec<Pair> {
        slots
            .iter()
            .map(|&(a, o)| pair(attrs[a], obj(objs[o])))
            .collect()
    };

    let c1: Vec<(usize, usize)> = (0..n).map(|k| (k, k)).collect();
    let (c2, c3, c4, kinds) = if n >= 3 {
        // Resample until the four attribute→object assignments are pairwise distinct.
        let mut tries = 0;
        loop {
            tries += 1;
            if tries > 10_000 {
                return Err(SaberError::Generate(format!(
                    "{id}: no distinct assignments after 10000 draws"
                )));
            }
            let sigma = rng.non_identity_permutation(n);
            let tau = rng.non_identity_permutation(n);
            let alpha = rng.non_identity_permutation(n);
            let beta = rng.non_identity_permutation(n);
            let c2: Vec<(usize, usize)> = (0..n).map(|k| (sigma[k], k)).collect();
            let c3: Vec<(usize, usize)> = (0..n).map(|k| (k, tau[k])).collect();
            let c4: Vec<(usize, usize)> = (0..n).map(|k| (alpha[k], beta[k])).collect();
            let f = [
                assignment(&c1),
                assignment(&c2),
                assignment(&c3),
                assignment(&c4),
            ];
            let distinct = (0..4).all(|i| (i + 1..4).all(|j| f[i] != f[j]));
            if distinct {
                break (
                    slots_pairs(&c2),
                    slots_pairs(&c3),
                    slots_pairs(&c4),
                    CandidateKind::for_n(n),
                );
            }
        }
    } else {
        // N = 2: candidates 2 and 3 are the two word orders of the one swapped assignment;
        // candidate 4 keeps one binding and replaces the other's object or attribute.
        let c2 = slots_pairs(&[(1, 0), (0, 1)]);
        let c3 = slots_pairs(&[(0, 1), (1, 0)]);
        let keep = rng.below(2);
        let other = 1 - keep;
        let mut c4 = slots_pairs(&c1);
        if rng.coin() {
            let used: HashSet<usize> = query.iter().map(|b| b.attr.index).collect();
            let a = rng.distinct(vocab.attributes.len(), 1, &used)?[0];
            let new = Attr {
                index: a,
                name: vocab.attributes[a].name.clone(),
                gen_form: instantiate(vocab, a, rng),
            };
            c4[other] = pair(&new, obj(objs[other]));
        } else {
            let used: HashSet<usize> = query.iter().map(|b| b.object).collect();
            let o = rng.distinct(vocab.objects.len(), 1, &used)?[0];
            c4[other] = pair(attrs[other], obj(o));
        }
        (c2, c3, c4, CandidateKind::for_n(n))
    };
    let cands = [slots_pairs(&c1), c2, c3, c4];
    let candidates = cands
        .into_iter()
        .zip(kinds)
        .enumerate()
        .map(|(i, (pairs, kind))| Caption::new(format!("{id}-c{}", i + 1), Some(kind), pairs))
        .collect();
    Ok(McqItem {
        query: Caption::new(format!("{id}-q"), None, q_pairs),
        id,
        n,
        source,
        chain,
        candidates,
        answer: 0,
    })
}

fn new_bindings(
    vocab: &Vocabulary,
    k: usize,
    used_attrs: &HashSet<usize>,
    used_objs: &HashSet<usize>,
    rng: &mut Rng,
) -> Result<Vec<Binding>, SaberError> {
    let objects = rng.distinct(vocab.objects.len(), k, used_objs)?;
    let attributes = rng.distinct(vocab.attributes.len(), k, used_attrs)?;
    Ok(attributes
        .into_iter()
        .zip(objects)
        .map(|(a, o)| {
            let gen_form = instantiate(vocab, a, rng);
            Binding {
                attr: Attr {
                    index: a,
                    name: vocab.attributes[a].name.clone(),
                    gen_form,
                },
                object: o,
            }
        })
        .collect())
}

/// Stream numbers (see the module docs).
const STREAM_INDEPENDENT: u64 = 1 << 32;
const STREAM_CHAIN: u64 = 2 << 32;
const STREAM_PROMPTS: u64 = 3 << 32;

/// Item id: `saber-n03-ind-007` / `saber-n03-chain-012`.
pub fn item_id(n: usize, source: Source, k: usize) -> String {
    match source {
        Source::Independent => format!("saber-n{n:02}-ind-{k:03}"),
        Source::Chain => format!("saber-n{n:02}-chain-{k:03}"),
    }
}

/// Chain id: `saber-chain-012`.
pub fn chain_id(c: usize) -> String {
    format!("saber-chain-{c:03}")
}

/// Generates the benchmark: for each `N` in `n_min..=n_max`, the independent items then the
/// chain items, each group in index order.
///
/// # Errors
/// [`SaberError::Generate`] when the configuration is impossible (`n_min < 2`, `n_max <
/// n_min`, or a vocabulary too small for `n_max` bindings).
pub fn generate(vocab: &Vocabulary, cfg: &GenerateConfig) -> Result<Vec<McqItem>, SaberError> {
    if cfg.n_min < 2 || cfg.n_max < cfg.n_min {
        return Err(SaberError::Generate(format!(
            "N range {}..={} (need 2 ≤ n_min ≤ n_max)",
            cfg.n_min, cfg.n_max
        )));
    }
    if cfg.n_max >= 1 << 16 || cfg.independent_per_n >= 1 << 16 || cfg.chains >= 1 << 32 {
        return Err(SaberError::Generate(
            "sizes too large for the stream numbering".into(),
        ));
    }
    if vocab.objects.len() <= cfg.n_max || vocab.attributes.len() <= cfg.n_max {
        return Err(SaberError::Generate(format!(
            "{} objects and {} attributes: N = {} needs at least {} of each",
            vocab.objects.len(),
            vocab.attributes.len(),
            cfg.n_max,
            cfg.n_max + 1
        )));
    }
    let span = cfg.n_max - cfg.n_min + 1;
    let mut per_n: Vec<Vec<McqItem>> = vec![Vec::new(); span];

    for (slot, n) in (cfg.n_min..=cfg.n_max).enumerate() {
        for k in 0..cfg.independent_per_n {
            let mut rng = Rng::new(cfg.seed, STREAM_INDEPENDENT + ((n as u64) << 16) + k as u64);
            let query = new_bindings(vocab, n, &HashSet::new(), &HashSet::new(), &mut rng)?;
            per_n[slot].push(build_item(
                vocab,
                item_id(n, Source::Independent, k),
                Source::Independent,
                None,
                &query,
                &mut rng,
            )?);
        }
    }
    let mut chain_items: Vec<Vec<McqItem>> = vec![Vec::new(); span];
    for c in 0..cfg.chains {
        let mut rng = Rng::new(cfg.seed, STREAM_CHAIN + c as u64);
        let mut chain: Vec<Binding> = Vec::new();
        for n in 2..=cfg.n_max {
            let used_a: HashSet<usize> = chain.iter().map(|b| b.attr.index).collect();
            let used_o: HashSet<usize> = chain.iter().map(|b| b.object).collect();
            let add = if chain.is_empty() { 2 } else { 1 };
            chain.extend(new_bindings(vocab, add, &used_a, &used_o, &mut rng)?);
            // Reshuffle the pair order of this step's query.
            let order = rng.permutation(chain.len());
            let query: Vec<Binding> = order
                .iter()
                .map(|&i| Binding {
                    attr: chain[i].attr.clone(),
                    object: chain[i].object,
                })
                .collect();
            let item = build_item(
                vocab,
                item_id(n, Source::Chain, c),
                Source::Chain,
                Some(chain_id(c)),
                &query,
                &mut rng,
            )?;
            if n >= cfg.n_min {
                chain_items[n - cfg.n_min].push(item);
            }
        }
    }
    Ok(per_n
        .into_iter()
        .zip(chain_items)
        .flat_map(|(mut a, b)| {
            a.extend(b);
            a
        })
        .collect())
}

/// Number words for the prompts.
fn number_word(n: usize) -> String {
    const W: [&str; 11] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ];
    W.get(n).map_or_else(|| n.to_string(), |w| w.to_string())
}

/// One image to generate (one row of `prompts.jsonl`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PromptRow {
    /// The caption id; save the image as `<id>.png` in the images folder.
    pub id: String,
    /// The item id.
    pub item: String,
    /// `query`, `c1`, …, `c4`.
    pub role: String,
    /// The full prompt.
    pub prompt: String,
    /// A negative prompt for models that take one.
    pub negative_prompt: String,
    /// The objects as generation-form noun phrases, in text order.
    pub objects: Vec<String>,
    /// Mirror the generated image left–right before saving it (drawn with p = 0.5), so that
    /// the left-to-right layout does not follow the text order.
    pub hflip: bool,
    /// A seed for the text-to-image sampler (recorded for reproducibility).
    pub seed: u64,
}

/// The negative prompt of every row.
pub const NEGATIVE_PROMPT: &str = "duplicate objects, extra objects, merged or touching objects, overlapping objects, \
attributes mixed between objects, text, letters, watermark, people, hands, cluttered background, busy background";

/// The prompt for one caption: a CLEVR-style 3D scene on neutral gray, separated objects,
/// each exactly once, no attribute bleeding.
pub fn prompt_text(caption: &Caption) -> String {
    let phrases: Vec<String> = caption.pairs.iter().map(Pair::gen_phrase).collect();
    let list = conjunction(&phrases);
    let list = list.trim_end_matches('.');
    let mut l = list.chars();
    let list: String = l
        .next()
        .map(|c| c.to_lowercase().chain(l).collect())
        .unwrap_or_default();
    format!(
        "A CLEVR-style 3D render of exactly {} separate objects standing on a plain neutral gray floor \
against a neutral gray background: {list}. Each object appears exactly once, the objects are spread \
apart and do not touch or overlap, and each object's color, pattern and material belong to that object \
only, with no attribute bleeding onto the other objects. No other objects and no text. Soft even studio \
lighting, gentle shadows, camera slightly above, whole scene in view.",
        number_word(caption.pairs.len())
    )
}

/// The prompt rows of all items (query, then candidates 1–4 of each item), flips and sampler
/// seeds drawn from the prompts stream of `seed`.
pub fn prompts(items: &[McqItem], seed: u64) -> Vec<PromptRow> {
    let mut rng = Rng::new(seed, STREAM_PROMPTS);
    let mut out = Vec::with_capacity(items.len() * 5);
    for item in items {
        let caps = std::iter::once(("query".to_string(), &item.query)).chain(
            item.candidates
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("c{}", i + 1), c)),
        );
        for (role, cap) in caps {
            let hflip = rng.coin();
            let seed = rng.next_u64() >> 1; // fits in a signed 64-bit integer for any sampler
            out.push(PromptRow {
                id: cap.id.clone(),
                item: item.id.clone(),
                role,
                prompt: prompt_text(cap),
                negative_prompt: NEGATIVE_PROMPT.to_string(),
                objects: cap.pairs.iter().map(Pair::gen_phrase).collect(),
                hflip,
                seed,
            });
        }
    }
    out
}
