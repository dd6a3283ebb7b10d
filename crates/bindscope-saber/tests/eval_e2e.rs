//! End-to-end evaluation: the full benchmark through the tiny random BERT of
//! `tests/fixtures/bert` (plumbing: batching, padding, caching, report files), synthetic
//! embedders with known answers (random → chance; a binding oracle → perfect; a binding-blind
//! bag of words → exact ties at 1/4 and 1/3), bad rows counted in the report, and the image
//! pairings through the tiny CLIP vision tower with a partly filled images folder.

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_saber::SaberError;
use bindscope_saber::embed::{
    EmbeddingTable, TextEmbed, embed_item_images, embed_items_text, embed_texts_cached, host_rows,
    item_texts, tokenizer_for,
};
use bindscope_saber::eval::{
    EvalOutput, Pairing, PairingResults, Tables, evaluate, mcq_scores, text_mcq_accuracy,
};
use bindscope_saber::generate::{GenerateConfig, McqItem, Source, generate};
use bindscope_saber::jsonl::{parse_items, write_items};
use bindscope_saber::report::{InputSummary, write_run};
use bindscope_saber::vocab::Vocabulary;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn benchmark() -> &'static [McqItem] {
    static B: OnceLock<Vec<McqItem>> = OnceLock::new();
    B.get_or_init(|| generate(&Vocabulary::builtin(), &GenerateConfig::default()).unwrap())
}

/// A character-level WordPiece `tokenizer.json` whose ids fit the tiny BERT's 99-token
/// vocabulary: specials 0–4, `a`–`z`, `##a`–`##z`, punctuation, "an" and "and".
fn write_char_tokenizer(dir: &Path) -> PathBuf {
    let mut vocab: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .map(String::from)
        .to_vec();
    vocab.extend(('a'..='z').map(|c| c.to_string()));
    vocab.extend(('a'..='z').map(|c| format!("##{c}")));
    vocab.extend(["-", ",", ".", "an", "and"].map(String::from));
    assert!(vocab.len() < 99);
    let v: serde_json::Map<String, serde_json::Value> = vocab
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i.into()))
        .collect();
    let added: Vec<serde_json::Value> = (0..5)
        .map(|i| serde_json::json!({"id": i, "special": true, "content": vocab[i], "single_word": false, "lstrip": false, "rstrip": false, "normalized": false}))
        .collect();
    let special = |t: &str| serde_json::json!({"SpecialToken": {"id": t, "type_id": 0}});
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
            "single": [special("[CLS]"), {"Sequence": {"id": "A", "type_id": 0}}, special("[SEP]")],
            "pair": [special("[CLS]"), {"Sequence": {"id": "A", "type_id": 0}}, special("[SEP]"), {"Sequence": {"id": "B", "type_id": 1}}, special("[SEP]")],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": v},
    });
    let p = dir.join("tokenizer.json");
    std::fs::write(&p, serde_json::to_string(&tok).unwrap()).unwrap();
    p
}

fn text_pairing(out: &EvalOutput) -> &PairingResults {
    out.pairings
        .iter()
        .find(|p| p.pairing == "text->text")
        .expect("text->text evaluated")
}

#[test]
fn tiny_bert_end_to_end_with_report_and_bad_rows() {
    let device = bindscope_core::device::test_device();
    let dir = tempfile::tempdir().unwrap();
    let bert = repo().join("tests/fixtures/bert");
    let ckpt = Checkpoint::from_dir("tiny-bert", &bert).unwrap();
    let tok_path = write_char_tokenizer(dir.path());
    let tok = tokenizer_for(&ckpt, Some(&tok_path), None).unwrap();
    assert_eq!(
        tok.policy().max_length,
        40,
        "max_position_embeddings of the tiny config"
    );
    // No position embedding past 40: a longer --max-length is refused (it was a panic in the
    // forward pass), 40 itself is accepted.
    let Err(err) = tokenizer_for(&ckpt, Some(&tok_path), Some(41)) else {
        panic!("41 > max_position_embeddings must be refused");
    };
    let err = err.to_string();
    assert!(
        err.contains("--max-length 41") && err.contains("1 to 40"),
        "{err}"
    );
    assert!(tokenizer_for(&ckpt, Some(&tok_path), Some(40)).is_ok());
    let model =
        bindscope_models::registry::load_text(&ckpt, &device, &LoadOptions::default()).unwrap();

    // The benchmark goes through a JSONL file with two bad rows appended.
    let data = dir.path().join("saber.jsonl");
    write_items(&data, benchmark()).unwrap();
    let mut text = std::fs::read_to_string(&data).unwrap();
    text.push_str("{\"id\": 3}\n");
    text.push_str(
        &serde_json::to_string(&benchmark()[5])
            .unwrap()
            .replace("\"answer\":0", "\"answer\":1"),
    );
    text.push('\n');
    let read = parse_items(&text);
    assert_eq!(read.items.len(), 1800);
    assert_eq!(
        read.rejected
            .iter()
            .map(|r| (r.line, r.rule.as_str()))
            .collect::<Vec<_>>(),
        [(1801, "schema"), (1802, "candidates")]
    );

    let mut calls = 0;
    let table = embed_items_text(
        &read.items,
        &tok,
        model.as_ref(),
        &device,
        64,
        &mut |_, _| calls += 1,
    )
    .unwrap();
    assert_eq!(table.len(), item_texts(&read.items).len());
    assert_eq!(calls, table.len().div_ceil(64));
    assert_eq!(table.dim(), 32);

    let out = evaluate(
        &read.items,
        Tables {
            text: Some(&table),
            image: None,
        },
    );
    assert_eq!(out.pairings.len(), 1, "no images: text->text only");
    let p = text_pairing(&out);
    assert_eq!(
        (p.items, p.gallery, p.items_missing_embeddings),
        (1800, 7200, 0)
    );
    assert_eq!(p.by_n.len(), 9);
    for b in &p.by_n {
        let n = b.n.unwrap();
        assert_eq!(b.mcq.items, 200);
        assert_eq!((b.mcq_independent.items, b.mcq_chain.items), (100, 100));
        let acc = b.mcq.accuracy.unwrap();
        assert!((0.0..=1.0).contains(&acc));
        assert_eq!(b.retrieval_independent.queries, 100);
        assert_eq!(b.retrieval_independent.mean_relevant, Some(1.0));
        assert_eq!(
            b.retrieval_nested.mean_relevant,
            Some((11 - n) as f64),
            "N = {n}: own step and every later step"
        );
        let map = b.retrieval_independent.map.unwrap();
        assert!(map > 0.0 && map <= 1.0);
        // Chain structure: a step-N query has exactly N - 2 strict-subset candidates (candidate 1
        // of steps 2..N-1) and at least 10 - N strict-superset ones.
        assert_eq!(b.containment.subset.pairs, 100 * (n - 2), "N = {n}");
        assert!(b.containment.superset.pairs >= 100 * (10 - n), "N = {n}");
        assert_eq!(b.containment.other_exact, 0);
        let wins: f64 = b.mcq.wins.values().sum();
        assert!((wins - 200.0).abs() < 1e-9);
    }

    // Batched, padded, cached scores equal unbatched single-text embeddings.
    for it in read.items.iter().step_by(197) {
        let single = |t: &str| {
            let (ids, mask) = tok.encode_batch(&[t]).unwrap().tensors(&device);
            host_rows(model.embed_text(ids, mask)).unwrap().remove(0)
        };
        let q = single(&it.query.text);
        let row = out.rows.iter().find(|r| r.id == it.id).unwrap();
        for (k, c) in it.candidates.iter().enumerate() {
            let e = single(&c.text);
            let cos = bindscope_saber::embed::dot(&q, &e)
                / (bindscope_saber::embed::dot(&q, &q).sqrt()
                    * bindscope_saber::embed::dot(&e, &e).sqrt());
            assert!(
                (cos - row.scores[k]).abs() < 1e-4,
                "{} candidate {}: {cos} vs {}",
                it.id,
                k + 1,
                row.scores[k]
            );
        }
    }
    // The quick accuracy a training loop uses agrees with the full evaluation.
    let quick = text_mcq_accuracy(&read.items, &table);
    assert!((quick.accuracy - p.overall.mcq.accuracy.unwrap()).abs() < 1e-12);

    // Report.
    let run = dir.path().join("run");
    let input = InputSummary {
        source: data.display().to_string(),
        rows: read.rows,
        accepted: read.items.len(),
        rejected_count: read.rejected.len(),
        rejected: read.rejected.clone(),
        images: None,
    };
    write_run(
        &run,
        &serde_json::json!({"model": "tiny-bert"}),
        &input,
        &out,
        &serde_json::json!({"total": 1.0}),
    )
    .unwrap();
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["input"]["rejected_count"], 2);
    assert_eq!(results["input"]["rejected"][0]["line"], 1801);
    assert_eq!(results["input"]["rejected"][1]["rule"], "candidates");
    assert_eq!(results["pairings"][0]["by_n"].as_array().unwrap().len(), 9);
    let csv = std::fs::read_to_string(run.join("per_n.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 11);
    assert!(lines[1].starts_with("text->text,2,200,"));
    assert!(lines[10].starts_with("text->text,all,1800,"));
    let cols = lines[0].split(',').count();
    assert!(lines.iter().all(|l| l.split(',').count() == cols));
    assert_eq!(
        std::fs::read_to_string(run.join("items.jsonl"))
            .unwrap()
            .lines()
            .count(),
        1800
    );
    assert!(run.join("config.json").is_file());
}

/// Pseudo-random unit-variance vector of a string (FNV-1a seed, xorshift).
fn hashed(s: &str, dim: usize) -> Vec<f32> {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
    }
    (0..dim)
        .map(|_| {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            ((h >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

/// `(attribute, object)` pairs of a text form ("A x y, a z w, and an u v.").
fn parse_pairs(text: &str) -> Vec<(String, String)> {
    let t = text
        .trim_end_matches('.')
        .to_lowercase()
        .replace(", and ", ", ");
    let phrases: Vec<&str> = if t.contains(", ") {
        t.split(", ").collect()
    } else {
        t.split(" and ").collect()
    };
    phrases
        .iter()
        .map(|p| {
            let w: Vec<&str> = p.split_whitespace().collect();
            assert_eq!(w.len(), 3, "{p}");
            (w[1].to_string(), w[2].to_string())
        })
        .collect()
}

enum Fake {
    Random,
    BindingOracle,
    BagOfWords,
}

impl TextEmbed for Fake {
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, SaberError> {
        const D: usize = 64;
        Ok(texts
            .iter()
            .map(|t| {
                let keys: Vec<String> = match self {
                    Fake::Random => vec![t.to_string()],
                    Fake::BindingOracle => parse_pairs(t)
                        .into_iter()
                        .map(|(a, o)| format!("{a}|{o}"))
                        .collect(),
                    Fake::BagOfWords => {
                        let mut w: Vec<String> = parse_pairs(t)
                            .into_iter()
                            .flat_map(|(a, o)| [a, o])
                            .collect();
                        w.sort();
                        w
                    }
                };
                let mut v = vec![0.0f32; D];
                for k in keys {
                    for (x, y) in v.iter_mut().zip(hashed(&k, D)) {
                        *x += y;
                    }
                }
                v
            })
            .collect())
    }
}

fn fake_table(f: Fake) -> EmbeddingTable {
    let mut table = EmbeddingTable::default();
    embed_texts_cached(
        &f,
        &item_texts(benchmark()),
        &mut table,
        500,
        &mut |_, _| {},
    )
    .unwrap();
    table
}

#[test]
fn random_embeddings_score_at_chance() {
    let table = fake_table(Fake::Random);
    let out = evaluate(
        benchmark(),
        Tables {
            text: Some(&table),
            image: None,
        },
    );
    let p = text_pairing(&out);
    // 1800 items at p = 1/4: sd 0.0102; ±5 sd.
    let acc = p.overall.mcq.accuracy.unwrap();
    assert!((acc - 0.25).abs() < 0.051, "accuracy {acc}");
    for b in &p.by_n {
        let a = b.mcq.accuracy.unwrap();
        assert!((0.09..=0.41).contains(&a), "N = {:?}: {a}", b.n);
    }
    // One relevant item among 7200 at a random rank: E[AP] = H(7200)/7200 ≈ 0.0013.
    let map = p.overall.retrieval_independent.map.unwrap();
    assert!(map < 0.02, "random mAP {map}");
}

#[test]
fn binding_oracle_is_perfect() {
    let table = fake_table(Fake::BindingOracle);
    let out = evaluate(
        benchmark(),
        Tables {
            text: Some(&table),
            image: None,
        },
    );
    let p = text_pairing(&out);
    for b in p.by_n.iter().chain([&p.overall]) {
        assert_eq!(b.mcq.accuracy, Some(1.0), "N = {:?}", b.n);
        assert_eq!(b.retrieval_independent.map, Some(1.0));
        assert_eq!(b.retrieval_independent.hit_at_1, Some(1.0));
        assert_eq!(b.retrieval_independent.mean_exact_rank, Some(1.0));
        // The exact match has cosine 1: no subset or superset candidate can rank above it.
        assert_eq!(b.containment.subset.above, 0);
        assert_eq!(b.containment.superset.above, 0);
    }
    // Nested queries: the exact match first, the supersets (cos sqrt(N/N')) after the exact match.
    let b2 = &p.by_n[0];
    let m = b2.retrieval_nested.map.unwrap();
    assert!(m > 0.1 && m < 1.0, "nested mAP at N = 2: {m}");
    assert_eq!(
        p.by_n[8].retrieval_nested.map,
        Some(1.0),
        "N = 10: only the own step is relevant"
    );
}

#[test]
fn binding_blind_bag_of_words_ties_exactly() {
    let table = fake_table(Fake::BagOfWords);
    let out = evaluate(
        benchmark(),
        Tables {
            text: Some(&table),
            image: None,
        },
    );
    let p = text_pairing(&out);
    for b in &p.by_n {
        let n = b.n.unwrap();
        // N >= 3: the four candidates have the same words: a four-way tie, credit 1/4 each.
        // N = 2: candidates 1-3 tie, candidate 4 (one word replaced) is lower: credit 1/3.
        let want = if n == 2 { 1.0 / 3.0 } else { 0.25 };
        assert!(
            (b.mcq.accuracy.unwrap() - want).abs() < 1e-12,
            "N = {n}: {:?}",
            b.mcq.accuracy
        );
        assert!(
            (b.retrieval_independent.map.unwrap() - want).abs() < 1e-12,
            "N = {n}: tied group at the top"
        );
        let w = &b.mcq.wins;
        if n == 2 {
            assert_eq!(w.get("replace"), Some(&0.0));
        } else {
            assert!((w["both_perm"] - 50.0).abs() < 1e-9);
        }
    }
}

#[test]
fn image_pairings_with_tiny_clip_and_partial_folder() {
    let device = bindscope_core::device::test_device();
    let dir = tempfile::tempdir().unwrap();
    let items = benchmark();
    // Images for the first three items; an unreadable file for the fourth item's query.
    let mut seed = 1u8;
    for it in &items[..3] {
        for c in std::iter::once(&it.query).chain(&it.candidates) {
            let img = image::RgbImage::from_fn(40, 36, |x, y| {
                image::Rgb([
                    seed.wrapping_mul(37).wrapping_add(x as u8),
                    (y as u8).wrapping_mul(5),
                    seed.wrapping_mul(11),
                ])
            });
            img.save(dir.path().join(format!("{}.png", c.id))).unwrap();
            seed += 1;
        }
    }
    std::fs::write(
        dir.path().join(format!("{}.png", items[3].query.id)),
        b"not a png",
    )
    .unwrap();

    let ckpt = Checkpoint::from_dir("tiny-clip", &repo().join("tests/fixtures/clip")).unwrap();
    let vision =
        bindscope_models::registry::load_vision(&ckpt, &device, &LoadOptions::default()).unwrap();
    let processor = bindscope_data::image::ImageProcessor::from_json(
        &serde_json::json!({"size": {"shortest_edge": 32}, "crop_size": {"height": 32, "width": 32}}),
        Some(bindscope_data::image::ProcessorKind::Clip),
    )
    .unwrap();
    let (images, cov) = embed_item_images(
        items,
        dir.path(),
        &processor,
        vision.as_ref(),
        &device,
        4,
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(cov.embedded, 15);
    assert_eq!(cov.unreadable.len(), 1);
    assert_eq!(cov.unreadable[0].0, items[3].query.id);
    assert_eq!(cov.missing, 9000 - 16);
    assert_eq!(images.dim(), 16, "CLIP projection_dim");

    // Text side of the same dimension (the projection space) from a fake embedder.
    struct Hash16;
    impl TextEmbed for Hash16 {
        fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, SaberError> {
            Ok(texts.iter().map(|t| hashed(t, 16)).collect())
        }
    }
    let mut texts = EmbeddingTable::default();
    embed_texts_cached(&Hash16, &item_texts(items), &mut texts, 256, &mut |_, _| {}).unwrap();

    let out = evaluate(
        items,
        Tables {
            text: Some(&texts),
            image: Some(&images),
        },
    );
    let names: Vec<&str> = out.pairings.iter().map(|p| p.pairing.as_str()).collect();
    assert_eq!(
        names,
        ["text->text", "text->image", "image->text", "image->image"]
    );
    for p in &out.pairings[1..] {
        assert_eq!(
            (p.items, p.items_missing_embeddings, p.gallery),
            (3, 1797, 12),
            "{}",
            p.pairing
        );
        assert_eq!(p.by_n.len(), 1);
        assert_eq!(p.by_n[0].n, Some(2));
    }
    // MCQ scores of an image pairing are the cosines of the stored embeddings.
    let it = &items[1];
    let s = mcq_scores(it, &images, &images, Pairing::ALL[3]).unwrap();
    let row = out
        .rows
        .iter()
        .find(|r| r.pairing == "image->image" && r.id == it.id)
        .unwrap();
    assert_eq!(s, row.scores);
    let direct = images.cosine(&it.query.id, &it.candidates[2].id).unwrap();
    assert_eq!(direct, s[2]);
    assert!(
        out.rows
            .iter()
            .filter(|r| r.pairing == "text->image")
            .all(|r| r.source == Source::Independent)
    );
}
