//! SABER evaluation by cosine ranking: MCQ 4-way accuracy, large-gallery retrieval (mAP) and
//! containment, for each query → gallery pairing of text and images, broken down by `N`.
//!
//! - **MCQ**: the query against its own four candidates; credit 1 when candidate 1 scores
//!   highest (`1/k` for a `k`-way tie at the top); chance 25%. The fractional wins of each
//!   candidate kind are reported too.
//! - **Retrieval**: each query against the gallery of all candidates of all evaluated items
//!   (7,200 for the full benchmark). Relevant items: for an independent query its own
//!   candidate 1; for a chain query at step `N`, candidate 1 of its own step and of every later
//!   step `N' > N` of the same chain (they contain all the query's bindings). Average precision
//!   as defined in the crate docs; mAP = mean over queries; `hit@1` = share of the top-ranked
//!   gallery item (tie-shared) that is relevant; the pessimistic rank of the exact match.
//! - **Containment**: with binding sets compared as sets of `(attribute, object)` text forms, a
//!   gallery candidate is a *subset* candidate of a query when its bindings are a strict
//!   subset of the query's, a *superset* candidate when a strict superset. Reported: how many
//!   (query, candidate) pairs there are and in how many the candidate scores strictly above the
//!   exact match (the query's own candidate 1), the ties, and the share of queries with at
//!   least one such candidate ranked above the exact match.
//!
//! Items enter a pairing only when all five of their embeddings exist in the tables the
//! pairing reads (texts always do; images may be missing): the number left out is reported.

use crate::embed::{EmbeddingTable, dot};
use crate::generate::{CandidateKind, Caption, McqItem, Source};
use crate::metrics::{average_precision, mcq_credit, rank_of, winners};
use std::collections::{BTreeMap, HashMap};

/// What is embedded: the caption's text, or its image (keyed by caption id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Modality {
    /// The text form.
    Text,
    /// The image `<id>.png`.
    Image,
}

/// Query modality → gallery (candidate) modality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pairing {
    /// What the query is.
    pub query: Modality,
    /// What the candidates are.
    pub gallery: Modality,
}

impl Pairing {
    /// text→text, text→image, image→text, image→image.
    pub const ALL: [Pairing; 4] = [
        Pairing {
            query: Modality::Text,
            gallery: Modality::Text,
        },
        Pairing {
            query: Modality::Text,
            gallery: Modality::Image,
        },
        Pairing {
            query: Modality::Image,
            gallery: Modality::Text,
        },
        Pairing {
            query: Modality::Image,
            gallery: Modality::Image,
        },
    ];

    /// `text->image` etc.
    pub fn name(self) -> &'static str {
        match (self.query, self.gallery) {
            (Modality::Text, Modality::Text) => "text->text",
            (Modality::Text, Modality::Image) => "text->image",
            (Modality::Image, Modality::Text) => "image->text",
            (Modality::Image, Modality::Image) => "image->image",
        }
    }
}

/// The embedding tables: texts keyed by text, images keyed by caption id.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tables<'a> {
    /// Text embeddings.
    pub text: Option<&'a EmbeddingTable>,
    /// Image embeddings.
    pub image: Option<&'a EmbeddingTable>,
}

impl<'a> Tables<'a> {
    fn table(&self, m: Modality) -> Option<&'a EmbeddingTable> {
        match m {
            Modality::Text => self.text,
            Modality::Image => self.image,
        }
    }
}

fn key(c: &Caption, m: Modality) -> &str {
    match m {
        Modality::Text => &c.text,
        Modality::Image => &c.id,
    }
}

/// Cosine scores of an item's query against its four candidates, or `None` when an embedding
/// is missing. With a text table for both sides this scores an item with any text encoder
/// (see [`crate::embed::embed_items_text`]).
pub fn mcq_scores(
    item: &McqItem,
    query: &EmbeddingTable,
    gallery: &EmbeddingTable,
    pairing: Pairing,
) -> Option<[f32; 4]> {
    let q = query.get(key(&item.query, pairing.query))?;
    let mut s = [0.0; 4];
    for (k, c) in item.candidates.iter().enumerate().take(4) {
        s[k] = dot(q, gallery.get(key(c, pairing.gallery))?);
    }
    Some(s)
}

/// Text→text MCQ accuracy of a set of items (overall and per `N`) from a text table: the
/// quick number a training loop tracks. Items with a missing text are an error in the caller
/// and are skipped here.
pub fn text_mcq_accuracy(items: &[McqItem], texts: &EmbeddingTable) -> McqSummary {
    let pairing = Pairing::ALL[0];
    let mut per_n: BTreeMap<usize, (usize, f64)> = BTreeMap::new();
    for it in items {
        if let Some(s) = mcq_scores(it, texts, texts, pairing) {
            let e = per_n.entry(it.n).or_default();
            e.0 += 1;
            e.1 += mcq_credit(&s, it.answer);
        }
    }
    let items_n: usize = per_n.values().map(|v| v.0).sum();
    let correct: f64 = per_n.values().map(|v| v.1).sum();
    McqSummary {
        items: items_n,
        accuracy: if items_n > 0 {
            correct / items_n as f64
        } else {
            f64::NAN
        },
        per_n: per_n
            .into_iter()
            .map(|(n, (k, c))| (n, c / k as f64))
            .collect(),
    }
}

/// Overall and per-`N` MCQ accuracy.
#[derive(Debug, Clone, serde::Serialize)]
pub struct McqSummary {
    /// Items scored.
    pub items: usize,
    /// Mean credit.
    pub accuracy: f64,
    /// `(N, accuracy)`.
    pub per_n: Vec<(usize, f64)>,
}

/// MCQ statistics of a group of items.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct McqStats {
    /// Items.
    pub items: usize,
    /// Mean credit (fraction correct, ties shared); `None` without items.
    pub accuracy: Option<f64>,
    /// Fractional wins per candidate kind (`bind` = correct).
    pub wins: BTreeMap<String, f64>,
    /// Chance level (0.25).
    pub chance: f64,
}

/// Retrieval statistics of a group of queries.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MapStats {
    /// Queries.
    pub queries: usize,
    /// Mean average precision.
    pub map: Option<f64>,
    /// Mean share of the top-ranked gallery item that is relevant (ties shared).
    pub hit_at_1: Option<f64>,
    /// Mean number of relevant gallery items per query.
    pub mean_relevant: Option<f64>,
    /// Mean (pessimistic) rank of the exact match (own candidate 1) in the gallery.
    pub mean_exact_rank: Option<f64>,
}

/// Subset- or superset-candidate statistics of a group of queries.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ContainStats {
    /// Queries with at least one such candidate in the gallery.
    pub queries_with: usize,
    /// (query, candidate) pairs.
    pub pairs: usize,
    /// Pairs where the candidate scores strictly above the exact match.
    pub above: usize,
    /// Pairs where it scores exactly the same.
    pub tied: usize,
    /// `above / pairs`.
    pub pair_rate: Option<f64>,
    /// Queries with at least one such candidate strictly above the exact match.
    pub queries_any_above: usize,
    /// `queries_any_above / queries_with`.
    pub query_rate: Option<f64>,
}

/// Containment statistics.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Containment {
    /// Candidates whose bindings are a strict subset of the query's.
    pub subset: ContainStats,
    /// Candidates whose bindings are a strict superset of the query's.
    pub superset: ContainStats,
    /// Gallery candidates other than the query's own candidate 1 with exactly the query's
    /// bindings (normally 0).
    pub other_exact: usize,
}

/// All numbers for one `N` (or all `N` together).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Breakdown {
    /// `N`, or `None` for all items together.
    pub n: Option<usize>,
    /// MCQ over all items.
    pub mcq: McqStats,
    /// MCQ over the independent items.
    pub mcq_independent: McqStats,
    /// MCQ over the chain items.
    pub mcq_chain: McqStats,
    /// Retrieval for independent queries (relevant: own candidate 1).
    pub retrieval_independent: MapStats,
    /// Retrieval for chain queries (relevant: candidate 1 of this and every later step).
    pub retrieval_nested: MapStats,
    /// Containment.
    pub containment: Containment,
}

/// Results of one pairing.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PairingResults {
    /// `text->text` etc.
    pub pairing: String,
    /// Items evaluated.
    pub items: usize,
    /// Items left out because an embedding was missing.
    pub items_missing_embeddings: usize,
    /// Gallery size (4 × items).
    pub gallery: usize,
    /// Per `N`, increasing.
    pub by_n: Vec<Breakdown>,
    /// All items.
    pub overall: Breakdown,
}

/// Per-item outcome (one row of `items.jsonl` in the run directory).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ItemRow {
    /// Pairing name.
    pub pairing: String,
    /// Item id.
    pub id: String,
    /// `N`.
    pub n: usize,
    /// Independent or chain.
    pub source: Source,
    /// Cosine of the query with candidates 1–4.
    pub scores: [f32; 4],
    /// MCQ credit.
    pub credit: f64,
    /// Average precision in the gallery.
    pub ap: f64,
    /// Relevant gallery items.
    pub relevant: usize,
    /// Pessimistic rank of candidate 1 in the gallery.
    pub exact_rank: usize,
    /// Subset candidates in the gallery / of them above the exact match.
    pub subset: [usize; 2],
    /// Superset candidates in the gallery / of them above the exact match.
    pub superset: [usize; 2],
}

/// Everything [`evaluate`] computes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EvalOutput {
    /// One entry per pairing that could run.
    pub pairings: Vec<PairingResults>,
    /// Per-item rows of all pairings.
    #[serde(skip)]
    pub rows: Vec<ItemRow>,
}

struct QueryRec {
    n: usize,
    source: Source,
    credit: f64,
    wins: [f64; 4],
    kinds: [CandidateKind; 4],
    ap: f64,
    hit1: f64,
    relevant: usize,
    exact_rank: usize,
    sub: [usize; 3],
    sup: [usize; 3],
    other_exact: usize,
}

/// Evaluates every pairing whose tables are given (text→text with a text table; the image
/// pairings with an image table, and with both for the cross-modal ones). Scores are computed
/// on the host (deterministic, exact ties for identical embeddings).
pub fn evaluate(items: &[McqItem], tables: Tables<'_>) -> EvalOutput {
    let mut pairings = Vec::new();
    let mut rows = Vec::new();
    for p in Pairing::ALL {
        let (Some(qt), Some(gt)) = (tables.table(p.query), tables.table(p.gallery)) else {
            continue;
        };
        let usable: Vec<&McqItem> = items
            .iter()
            .filter(|it| {
                qt.contains(key(&it.query, p.query))
                    && it.candidates.iter().all(|c| gt.contains(key(c, p.gallery)))
            })
            .collect();
        if usable.is_empty() {
            continue;
        }
        let (res, mut r) = evaluate_pairing(p, &usable, qt, gt, items.len() - usable.len());
        pairings.push(res);
        rows.append(&mut r);
    }
    EvalOutput { pairings, rows }
}

/// `[m, d] · [g, d]ᵀ` on the host, row-major, split over the available cores. Every score is
/// the same [`dot`] of two rows, so identical embeddings give bit-identical scores (exact
/// ties), whatever the machine.
fn score_matrix(q: &[f32], m: usize, g: &[f32], gn: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; m * gn];
    if m == 0 || gn == 0 {
        return out;
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(m);
    let rows_per = m.div_ceil(threads);
    std::thread::scope(|s| {
        for (t, chunk) in out.chunks_mut(rows_per * gn).enumerate() {
            s.spawn(move || {
                for (r, row) in chunk.chunks_mut(gn).enumerate() {
                    let i = t * rows_per + r;
                    let qi = &q[i * d..(i + 1) * d];
                    for (j, x) in row.iter_mut().enumerate() {
                        *x = dot(qi, &g[j * d..(j + 1) * d]);
                    }
                }
            });
        }
    });
    out
}

fn evaluate_pairing(
    p: Pairing,
    items: &[&McqItem],
    qt: &EmbeddingTable,
    gt: &EmbeddingTable,
    missing: usize,
) -> (PairingResults, Vec<ItemRow>) {
    let m = items.len();
    let g = 4 * m;
    let d = qt.dim();
    assert_eq!(
        d,
        gt.dim(),
        "{}: query and gallery embeddings have different dimensions",
        p.name()
    );
    let mut qv = Vec::with_capacity(m * d);
    let mut gv = Vec::with_capacity(g * d);
    for it in items {
        qv.extend_from_slice(qt.get(key(&it.query, p.query)).expect("checked"));
        for c in &it.candidates {
            gv.extend_from_slice(gt.get(key(c, p.gallery)).expect("checked"));
        }
    }
    let scores = score_matrix(&qv, m, &gv, g, d);

    // Nested relevance: chain id → (N, item index).
    let mut chains: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    for (i, it) in items.iter().enumerate() {
        if let (Source::Chain, Some(c)) = (it.source, &it.chain) {
            chains.entry(c.as_str()).or_default().push((it.n, i));
        }
    }
    // Binding sets: interned (attribute, object) ids, with an inverted index over the gallery.
    let mut intern: HashMap<(&str, &str), u32> = HashMap::new();
    let gallery_sets: Vec<Vec<u32>> = items
        .iter()
        .flat_map(|it| it.candidates.iter())
        .map(|c| binding_set(&mut intern, c))
        .collect();
    let query_sets: Vec<Vec<u32>> = items
        .iter()
        .map(|it| binding_set(&mut intern, &it.query))
        .collect();
    let mut postings: HashMap<u32, Vec<usize>> = HashMap::new();
    for (j, s) in gallery_sets.iter().enumerate() {
        for &b in s {
            postings.entry(b).or_default().push(j);
        }
    }

    let mut recs = Vec::with_capacity(m);
    let mut rows = Vec::with_capacity(m);
    let mut count = vec![0usize; g];
    for (i, it) in items.iter().enumerate() {
        let row = &scores[i * g..(i + 1) * g];
        let own = &row[4 * i..4 * i + 4];
        let credit = mcq_credit(own, it.answer);
        let w = winners(own);
        let kinds = CandidateKind::for_n(it.n);

        let relevant: Vec<usize> = match (it.source, &it.chain) {
            (Source::Chain, Some(c)) => chains[c.as_str()]
                .iter()
                .filter(|(n, _)| *n >= it.n)
                .map(|&(_, j)| 4 * j)
                .collect(),
            _ => vec![4 * i],
        };
        let ap = average_precision(row, &relevant);
        let top = winners(row);
        let hit1: f64 = relevant.iter().map(|&r| top[r]).sum();
        let exact = 4 * i;
        let exact_rank = rank_of(row, exact);

        // Containment: count, per gallery candidate, how many of its bindings are in the query.
        let q = &query_sets[i];
        let mut touched: Vec<usize> = Vec::new();
        for b in q {
            for &j in postings.get(b).map_or(&[][..], Vec::as_slice) {
                if count[j] == 0 {
                    touched.push(j);
                }
                count[j] += 1;
            }
        }
        let (mut sub, mut sup, mut other_exact) = ([0usize; 3], [0usize; 3], 0);
        let s_exact = row[exact];
        for &j in &touched {
            let bj = gallery_sets[j].len();
            let c = count[j];
            let cell = if c == bj && bj < q.len() {
                Some(&mut sub)
            } else if c == q.len() && bj > q.len() {
                Some(&mut sup)
            } else {
                if c == bj && bj == q.len() && j != exact {
                    other_exact += 1;
                }
                None
            };
            if let Some(cell) = cell {
                cell[0] += 1;
                if row[j] > s_exact {
                    cell[1] += 1;
                } else if row[j] == s_exact {
                    cell[2] += 1;
                }
            }
            count[j] = 0;
        }
        rows.push(ItemRow {
            pairing: p.name().to_string(),
            id: it.id.clone(),
            n: it.n,
            source: it.source,
            scores: [own[0], own[1], own[2], own[3]],
            credit,
            ap,
            relevant: relevant.len(),
            exact_rank,
            subset: [sub[0], sub[1]],
            superset: [sup[0], sup[1]],
        });
        recs.push(QueryRec {
            n: it.n,
            source: it.source,
            credit,
            wins: [w[0], w[1], w[2], w[3]],
            kinds,
            ap,
            hit1,
            relevant: relevant.len(),
            exact_rank,
            sub,
            sup,
            other_exact,
        });
    }

    let mut ns: Vec<usize> = recs.iter().map(|r| r.n).collect();
    ns.sort_unstable();
    ns.dedup();
    let by_n = ns
        .iter()
        .map(|&n| breakdown(Some(n), recs.iter().filter(|r| r.n == n)))
        .collect();
    let overall = breakdown(None, recs.iter());
    (
        PairingResults {
            pairing: p.name().to_string(),
            items: m,
            items_missing_embeddings: missing,
            gallery: g,
            by_n,
            overall,
        },
        rows,
    )
}

/// The caption's bindings as sorted interned ids.
fn binding_set<'a>(intern: &mut HashMap<(&'a str, &'a str), u32>, c: &'a Caption) -> Vec<u32> {
    let mut v: Vec<u32> = c
        .pairs
        .iter()
        .map(|pr| {
            let len = intern.len() as u32;
            *intern
                .entry((pr.attribute.as_str(), pr.object.as_str()))
                .or_insert(len)
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (s, k) = v.fold((0.0, 0usize), |(s, k), x| (s + x, k + 1));
    (k > 0).then(|| s / k as f64)
}

fn mcq_stats<'a>(recs: impl Iterator<Item = &'a QueryRec> + Clone) -> McqStats {
    let mut wins: BTreeMap<String, f64> = BTreeMap::new();
    for r in recs.clone() {
        for (k, w) in r.kinds.iter().zip(r.wins) {
            *wins.entry(k.name().to_string()).or_default() += w;
        }
    }
    McqStats {
        items: recs.clone().count(),
        accuracy: mean(recs.map(|r| r.credit)),
        wins,
        chance: 0.25,
    }
}

fn map_stats<'a>(recs: impl Iterator<Item = &'a QueryRec> + Clone) -> MapStats {
    MapStats {
        queries: recs.clone().count(),
        map: mean(recs.clone().map(|r| r.ap)),
        hit_at_1: mean(recs.clone().map(|r| r.hit1)),
        mean_relevant: mean(recs.clone().map(|r| r.relevant as f64)),
        mean_exact_rank: mean(recs.map(|r| r.exact_rank as f64)),
    }
}

fn contain_stats<'a>(cells: impl Iterator<Item = &'a [usize; 3]>) -> ContainStats {
    let mut s = ContainStats::default();
    for c in cells {
        if c[0] > 0 {
            s.queries_with += 1;
            s.pairs += c[0];
            s.above += c[1];
            s.tied += c[2];
            if c[1] > 0 {
                s.queries_any_above += 1;
            }
        }
    }
    s.pair_rate = (s.pairs > 0).then(|| s.above as f64 / s.pairs as f64);
    s.query_rate = (s.queries_with > 0).then(|| s.queries_any_above as f64 / s.queries_with as f64);
    s
}

fn breakdown<'a>(n: Option<usize>, recs: impl Iterator<Item = &'a QueryRec> + Clone) -> Breakdown {
    let ind = recs.clone().filter(|r| r.source == Source::Independent);
    let chain = recs.clone().filter(|r| r.source == Source::Chain);
    Breakdown {
        n,
        mcq: mcq_stats(recs.clone()),
        mcq_independent: mcq_stats(ind.clone()),
        mcq_chain: mcq_stats(chain.clone()),
        retrieval_independent: map_stats(ind),
        retrieval_nested: map_stats(chain),
        containment: Containment {
            subset: contain_stats(recs.clone().map(|r| &r.sub)),
            superset: contain_stats(recs.clone().map(|r| &r.sup)),
            other_exact: recs.map(|r| r.other_exact).sum(),
        },
    }
}
