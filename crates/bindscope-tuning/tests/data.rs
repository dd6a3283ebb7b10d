//! Triplet data: the validator's rules (each accepted and rejected, with line numbers through
//! the JSONL importer), the generator's determinism and per-type constraints, and the split.

use bindscope_tuning::example::{Construction, Example};
use bindscope_tuning::generate::{GeneratorConfig, generate};
use bindscope_tuning::import::{Seen, import_str, validate_rows};
use bindscope_tuning::split::{split, triplets};
use bindscope_tuning::validate::{Rule, parse_bindings, validate};
use bindscope_tuning::vocab::TemplateVocab;
use bindscope_tuning::words::{bag_of_words, word_strings};
use std::collections::HashSet;

fn row(t: &str, bindings: &[(&str, &str)], texts: [&str; 4]) -> serde_json::Value {
    serde_json::json!({
        "id": format!("{t}-{}", texts[0]),
        "type": t,
        "bindings": bindings.iter().map(|(a, o)| [a, o]).collect::<Vec<_>>(),
        "anchor": texts[0],
        "positive": texts[1],
        "anchor_negative": texts[2],
        "positive_negative": texts[3],
    })
}

fn good_pair_swap() -> serde_json::Value {
    row(
        "pair_swap",
        &[("red", "cube"), ("blue", "ball")],
        [
            "A red cube and a blue ball.",
            "A blue ball and a red cube.",
            "A blue cube and a red ball.",
            "A red ball and a blue cube.",
        ],
    )
}

/// One accepted row of every construction type, written by hand.
fn good_rows() -> Vec<serde_json::Value> {
    let mut swap = row(
        "triple_bind_swap",
        &[("red", "cube"), ("blue", "ball"), ("green", "cup")],
        [
            "A red cube, a blue ball, and a green cup.",
            "A green cup, a blue ball, and a red cube.",
            "A blue cube, a red ball, and a green cup.",
            "A green cup, a red ball, and a blue cube.",
        ],
    );
    swap["queried"] = serde_json::json!([["red", "cube"], ["blue", "ball"]]);
    vec![
        good_pair_swap(),
        row(
            "triple_bind_cycle",
            &[("red", "cube"), ("blue", "ball"), ("green", "cup")],
            [
                "A red cube, a blue ball, and a green cup.",
                "A green cup, a blue ball, and a red cube.",
                "A blue cube, a green ball, and a red cup.",
                "A red cup, a green ball, and a blue cube.",
            ],
        ),
        swap,
        row(
            "attr_bundle",
            &[
                ("small", "cube"),
                ("red", "cube"),
                ("large", "ball"),
                ("blue", "ball"),
            ],
            [
                "A small red cube and a large blue ball.",
                "A large blue ball and a small red cube.",
                "A large blue cube and a small red ball.",
                "A small red ball and a large blue cube.",
            ],
        ),
        row(
            "predicative",
            &[("red", "cube"), ("blue", "ball")],
            [
                "The cube is red and the ball is blue.",
                "The ball is blue and the cube is red.",
                "The cube is blue and the ball is red.",
                "The ball is red and the cube is blue.",
            ],
        ),
        row(
            "deferred_bind_anaphoric",
            &[("red", "cube"), ("blue", "ball")],
            [
                "There is a cube and a ball; the former is red and the latter is blue.",
                "There is a ball and a cube; the former is blue and the latter is red.",
                "There is a cube and a ball; the former is blue and the latter is red.",
                "There is a ball and a cube; the former is red and the latter is blue.",
            ],
        ),
        row(
            "deferred_bind_respective",
            &[("red", "cube"), ("blue", "ball")],
            [
                "A cube and a ball, red and blue respectively.",
                "A ball and a cube, blue and red respectively.",
                "A cube and a ball, blue and red respectively.",
                "A ball and a cube, red and blue respectively.",
            ],
        ),
    ]
}

fn jsonl(rows: &[serde_json::Value]) -> String {
    rows.iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_construction_type_has_an_accepted_hand_written_row() {
    let rows = good_rows();
    let (kept, report) = import_str("t", &jsonl(&rows), &mut Seen::default());
    assert_eq!(report.rejections, vec![], "hand-written rows must pass");
    assert_eq!(kept.len(), 7);
    let types: HashSet<Construction> = kept.iter().map(|e| e.construction).collect();
    assert_eq!(types.len(), 7);
}

/// Line 1 is a valid row; line 2 the broken one. The report must name line 2 and `rule`.
fn assert_rejected(bad: serde_json::Value, rule: Rule) {
    assert_rejected_text(&bad.to_string(), rule);
}

fn assert_rejected_text(bad_line: &str, rule: Rule) {
    let mut ok = good_pair_swap();
    ok["id"] = "first".into();
    ok["anchor"] = "A green cup and a white box.".into();
    ok["positive"] = "A white box and a green cup.".into();
    ok["anchor_negative"] = "A white cup and a green box.".into();
    ok["positive_negative"] = "A green box and a white cup.".into();
    ok["bindings"] = serde_json::json!([["green", "cup"], ["white", "box"]]);
    let text = format!("{ok}\n{bad_line}\n");
    let (kept, report) = import_str("t", &text, &mut Seen::default());
    assert_eq!(
        kept.len(),
        1,
        "only line 1 is kept: {:?}",
        report.rejections
    );
    assert_eq!(report.rejected, 1);
    let r = &report.rejections[0];
    assert_eq!((r.line, r.rule), (2, rule), "{r}");
    assert_eq!(report.rejected_by_rule[rule.name()], 1);
}

#[test]
fn json_and_schema_rules() {
    assert_rejected_text("{\"id\": \"x\", \"type\": ", Rule::Json);
    assert_rejected_text("[1, 2]", Rule::Json);
    let mut missing = good_pair_swap();
    missing.as_object_mut().unwrap().remove("positive");
    assert_rejected(missing, Rule::Schema);
    let mut unknown_type = good_pair_swap();
    unknown_type["type"] = "pair_shuffle".into();
    assert_rejected(unknown_type, Rule::Schema);
    let mut extra = good_pair_swap();
    extra["caption"] = "x".into();
    assert_rejected(extra, Rule::Schema);
}

#[test]
fn single_word_and_distinct_rules() {
    let mut two_words = good_pair_swap();
    two_words["bindings"] = serde_json::json!([["dark red", "cube"], ["blue", "ball"]]);
    assert_rejected(two_words, Rule::SingleWord);
    let mut upper = good_pair_swap();
    upper["bindings"] = serde_json::json!([["Red", "cube"], ["blue", "ball"]]);
    assert_rejected(upper, Rule::SingleWord);
    let mut same_attr = good_pair_swap();
    same_attr["bindings"] = serde_json::json!([["red", "cube"], ["red", "ball"]]);
    assert_rejected(same_attr, Rule::Distinct);
    let mut same_obj = good_pair_swap();
    same_obj["bindings"] = serde_json::json!([["red", "cube"], ["blue", "cube"]]);
    assert_rejected(same_obj, Rule::Distinct);
    let mut both = good_pair_swap();
    both["bindings"] = serde_json::json!([["red", "cube"], ["cube", "ball"]]);
    assert_rejected(both, Rule::Distinct);
    let mut one = good_pair_swap();
    one["bindings"] = serde_json::json!([["red", "cube"]]);
    assert_rejected(one, Rule::Distinct);
    let mut queried = good_pair_swap();
    queried["queried"] = serde_json::json!([["green", "cube"]]);
    assert_rejected(queried, Rule::Distinct);
}

#[test]
fn mentions_rule() {
    let mut twice = good_pair_swap();
    twice["anchor"] = "A red cube and a blue ball and a red kite.".into();
    assert_rejected(twice, Rule::Mentions);
    let mut absent = good_pair_swap();
    absent["positive_negative"] = "A red ball and a cube.".into();
    assert_rejected(absent, Rule::Mentions);
}

#[test]
fn structure_rules_per_type() {
    // pair_swap: attribute not adjacent to its object.
    let mut gap = good_pair_swap();
    gap["anchor"] = "A red big cube and a blue ball.".into();
    assert_rejected(gap, Rule::Structure);
    // predicative: attribute adjacent to an object.
    let mut adj = good_rows()[4].clone();
    adj["anchor"] = "The red cube is here and the ball is blue.".into();
    assert_rejected(adj, Rule::Structure);
    // deferred: an attribute before the second object.
    let mut early = good_rows()[5].clone();
    early["anchor"] = "There is a cube, the former is red, and a ball; the latter is blue.".into();
    assert_rejected(early, Rule::Structure);
    // respective without "respectively".
    let mut resp = good_rows()[6].clone();
    resp["positive"] = "A ball and a cube, blue and red.".into();
    assert_rejected(resp, Rule::Structure);
    // triple_bind_cycle with two objects.
    let mut cyc = good_rows()[1].clone();
    cyc["bindings"] = serde_json::json!([["red", "cube"], ["blue", "ball"]]);
    cyc["anchor"] = "A red cube and a blue ball.".into();
    assert_rejected(cyc, Rule::Structure);
    // triple_bind_swap must query exactly two bindings.
    let mut swap = good_rows()[2].clone();
    swap.as_object_mut().unwrap().remove("queried");
    assert_rejected(swap, Rule::Structure);
    // attr_bundle: an object with a single attribute.
    let mut bundle = good_rows()[3].clone();
    bundle["bindings"] = serde_json::json!([["small", "cube"], ["red", "cube"], ["blue", "ball"]]);
    bundle["anchor"] = "A small red cube and a blue ball.".into();
    assert_rejected(bundle, Rule::Structure);
}

#[test]
fn bindings_identical_permutation_unbroken_and_distractor_rules() {
    // anchor binds blue-cube: not the declared bindings.
    let mut wrong = good_pair_swap();
    wrong["anchor"] = "A blue cube and a red ball.".into();
    assert_rejected(wrong, Rule::Bindings);
    let mut same = good_pair_swap();
    same["positive"] = "A red cube and a blue ball!".into();
    same["positive_negative"] = "A blue cube and a red ball.".into();
    assert_rejected(same, Rule::Identical);
    let mut perm = good_pair_swap();
    perm["positive_negative"] = "A red ball and one blue cube.".into();
    assert_rejected(perm, Rule::Permutation);
    // The negative is the positive reordered without breaking anything.
    let mut unbroken = good_pair_swap();
    unbroken["positive_negative"] = "A red cube and a blue ball.".into();
    assert_rejected(unbroken, Rule::Unbroken);
    // triple_bind_swap: the non-queried green cup moves to the ball.
    let mut moved = good_rows()[2].clone();
    moved["anchor_negative"] = "A blue cube, a green ball, and a red cup.".into();
    assert_rejected(moved, Rule::DistractorMoved);
}

#[test]
fn duplicates_are_rejected_and_articles_repaired() {
    let text = format!("{}\n\n{}\n", good_pair_swap(), good_pair_swap());
    let (kept, report) = import_str("t", &text, &mut Seen::default());
    assert_eq!((kept.len(), report.blank_lines), (1, 1));
    assert_eq!(
        (report.rejections[0].line, report.rejections[0].rule),
        (3, Rule::Duplicate)
    );

    let mut apple = good_pair_swap();
    apple["bindings"] = serde_json::json!([["red", "apple"], ["orange", "ball"]]);
    apple["anchor"] = "A red apple and a orange ball.".into();
    apple["positive"] = "An orange ball and a red apple.".into();
    apple["anchor_negative"] = "A orange apple and a red ball.".into();
    apple["positive_negative"] = "A red ball and an orange apple.".into();
    let (kept, report) = import_str("t", &apple.to_string(), &mut Seen::default());
    assert_eq!(report.rejections, vec![]);
    assert_eq!(report.articles_repaired, 2);
    assert_eq!(kept[0].anchor, "A red apple and an orange ball.");
    assert_eq!(kept[0].anchor_negative, "An orange apple and a red ball.");
}

#[test]
fn parser_reads_bindings_by_type() {
    let a: HashSet<&str> = ["red", "blue"].into();
    let o: HashSet<&str> = ["cube", "ball"].into();
    let b = parse_bindings(
        Construction::DeferredBindAnaphoric,
        "A cube and a ball: the latter is red, the former is blue.",
        &a,
        &o,
    )
    .unwrap();
    assert_eq!(
        b,
        [
            ("blue".to_string(), "cube".to_string()),
            ("red".to_string(), "ball".to_string())
        ]
        .into()
    );
    let b = parse_bindings(
        Construction::Predicative,
        "The ball we bought is blue and the cube we bought is red.",
        &a,
        &o,
    )
    .unwrap();
    assert_eq!(
        b,
        [
            ("blue".to_string(), "ball".to_string()),
            ("red".to_string(), "cube".to_string())
        ]
        .into()
    );
}

fn small_cfg(seed: u64) -> GeneratorConfig {
    GeneratorConfig {
        seed,
        per_type: 30,
        ..Default::default()
    }
}

#[test]
fn vocabularies_parse_and_are_disjoint() {
    let v = TemplateVocab::builtin();
    assert_eq!(v.attributes.len(), 48);
    assert!(v.objects.len() >= 80);
    assert_eq!(
        v.categories(),
        ["size", "texture", "state", "pattern", "color", "material"]
    );
    let bad = TemplateVocab::parse(
        "word\tcategory\torder\nred\tcolor\t1\n",
        "word\tcategory\nred\tx\n",
        "name\tphrase\na\tb\n",
        "preposition\tattribute\tobject\nnear\told\ttree\n",
        "type\tregister\ttemplate\n",
    );
    assert!(
        bad.unwrap_err().contains("objects.tsv:2"),
        "a word both attribute and object is refused"
    );
}

#[test]
fn generator_is_deterministic_and_every_row_validates() {
    let v = TemplateVocab::builtin();
    let (a, stats) = generate(&v, &small_cfg(7)).unwrap();
    let (b, _) = generate(&v, &small_cfg(7)).unwrap();
    let (c, _) = generate(&v, &small_cfg(8)).unwrap();
    assert_eq!(a, b, "same seed, same examples");
    assert_ne!(a, c, "another seed, other examples");
    assert_eq!(a.len(), 7 * 30);
    assert_eq!(stats.per_type.len(), 7);
    assert!(stats.max_observed_uses <= stats.max_word_uses);

    let (kept, report) = validate_rows(
        "generator",
        a.iter().cloned().enumerate().map(|(i, e)| (i + 1, e)),
        &mut Seen::default(),
    );
    assert_eq!(
        report.rejections,
        vec![],
        "the generator's output must pass the validator"
    );
    assert_eq!(
        report.articles_repaired, 0,
        "the generator writes correct articles"
    );
    assert_eq!(kept.len(), a.len());

    // Changing one type's count leaves the others unchanged (one stream per type).
    let cfg = GeneratorConfig {
        types: vec![Construction::Predicative],
        ..small_cfg(7)
    };
    let (only, _) = generate(&v, &cfg).unwrap();
    let from_all: Vec<&Example> = a
        .iter()
        .filter(|e| e.construction == Construction::Predicative)
        .collect();
    assert_eq!(only.iter().collect::<Vec<_>>().len(), from_all.len());
}

#[test]
fn generated_examples_keep_the_per_type_constraints() {
    let v = TemplateVocab::builtin();
    let (examples, _) = generate(&v, &small_cfg(3)).unwrap();
    let is_attr = |w: &str| v.attributes.iter().any(|a| a.word == w);
    let is_obj = |w: &str| v.objects.iter().any(|a| a.word == w);
    for e in &examples {
        for t in [
            &e.anchor,
            &e.positive,
            &e.anchor_negative,
            &e.positive_negative,
        ] {
            let ws = word_strings(t);
            let attrs: Vec<usize> = (0..ws.len()).filter(|&i| is_attr(&ws[i])).collect();
            let objs: Vec<usize> = (0..ws.len()).filter(|&i| is_obj(&ws[i])).collect();
            match e.construction {
                c if c.is_adjacent() => {
                    for &i in &attrs {
                        assert!(is_attr(&ws[i + 1]) || is_obj(&ws[i + 1]), "{c}: '{t}'");
                    }
                }
                Construction::Predicative => {
                    for &i in &attrs {
                        assert!(
                            !is_obj(&ws[i - 1]) && !ws.get(i + 1).is_some_and(|w| is_obj(w)),
                            "predicative: '{t}'"
                        );
                    }
                }
                _ => assert!(attrs.iter().min() > objs.iter().max(), "deferred: '{t}'"),
            }
        }
        assert_eq!(bag_of_words(&e.anchor), bag_of_words(&e.anchor_negative));
        assert_eq!(
            bag_of_words(&e.positive),
            bag_of_words(&e.positive_negative)
        );
        assert!(validate(e.clone()).is_ok());
        let expected_pairs = match e.construction {
            Construction::TripleBindCycle | Construction::TripleBindSwap => 3,
            Construction::AttrBundle => 4,
            _ => 2,
        };
        assert_eq!(e.bindings.len(), expected_pairs, "{}", e.id);
        assert_eq!(
            e.queried.is_some(),
            e.construction == Construction::TripleBindSwap
        );
    }
    // Every band and several registers are used.
    let bands: HashSet<&str> = examples
        .iter()
        .filter_map(|e| e.meta["length_band"].as_str())
        .collect();
    assert_eq!(bands.len(), 3, "{bands:?}");
}

#[test]
fn binding_distance_and_caps_are_enforced() {
    let v = TemplateVocab::builtin();
    let cfg = GeneratorConfig {
        types: vec![Construction::Predicative],
        binding_distance: Some((4, 4)),
        ..small_cfg(1)
    };
    let (ex, _) = generate(&v, &cfg).unwrap();
    assert!(
        ex.iter()
            .all(|e| e.meta["binding_distance"] == 4 && e.meta["register"] == "narrative")
    );
    let cfg = GeneratorConfig {
        max_word_uses: Some(16),
        ..small_cfg(1)
    };
    let (_, stats) = generate(&v, &cfg).unwrap();
    assert!(stats.max_observed_uses <= 16 && stats.max_word_uses == 16);
    let cfg = GeneratorConfig {
        max_word_uses: Some(1),
        per_type: 200,
        ..small_cfg(1)
    };
    assert!(generate(&v, &cfg).unwrap_err().contains("frequency cap"));
}

#[test]
fn split_is_80_10_10_with_deferred_types_held_out() {
    let v = TemplateVocab::builtin();
    let (examples, _) = generate(
        &v,
        &GeneratorConfig {
            per_type: 50,
            ..small_cfg(0)
        },
    )
    .unwrap();
    let s = split(&examples, 0);
    assert_eq!(
        (s.train.len(), s.val.len(), s.test.len()),
        (5 * 40, 5 * 5, 5 * 5)
    );
    assert_eq!(
        (s.heldout_anaphoric.len(), s.heldout_respective.len()),
        (50, 50)
    );
    assert!(
        s.train
            .iter()
            .chain(&s.val)
            .chain(&s.test)
            .all(|e| !e.construction.is_held_out())
    );
    let ids = |v: &[Example]| v.iter().map(|e| e.id.clone()).collect::<HashSet<_>>();
    assert!(ids(&s.train).is_disjoint(&ids(&s.test)));
    // Deterministic and independent of input order.
    let mut rev = examples.clone();
    rev.reverse();
    assert_eq!(split(&rev, 0).train, s.train);
    assert_ne!(split(&examples, 1).train, s.train);
    // Two triplets per example, each negative a permutation of its positive.
    let t = triplets(&s.test);
    assert_eq!(t.len(), 2 * s.test.len());
    assert!(
        t.iter()
            .all(|t| bag_of_words(&t.positive) == bag_of_words(&t.negative)
                && t.anchor != t.positive)
    );
}
