//! Writing and reading SABER JSONL: round trip, and every malformed row rejected with its line
//! number and the rule it breaks, the good rows kept.

use bindscope_saber::generate::{GenerateConfig, McqItem, generate};
use bindscope_saber::jsonl::{parse_items, read_items, write_items};
use bindscope_saber::vocab::Vocabulary;

fn small() -> Vec<McqItem> {
    let cfg = GenerateConfig {
        independent_per_n: 3,
        chains: 2,
        ..Default::default()
    };
    generate(&Vocabulary::builtin(), &cfg).unwrap()
}

#[test]
fn round_trip_is_lossless() {
    let items = small();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("saber.jsonl");
    write_items(&path, &items).unwrap();
    let back = read_items(&path).unwrap();
    assert!(back.rejected.is_empty(), "{:?}", back.rejected);
    assert_eq!(back.rows, items.len());
    assert_eq!(back.items, items);
    let missing = read_items(&dir.path().join("nope.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("nope.jsonl"), "{missing}");
}

/// Serialises `item` after `edit` changed its JSON.
fn mutated(item: &McqItem, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v = serde_json::to_value(item).unwrap();
    edit(&mut v);
    serde_json::to_string(&v).unwrap()
}

#[test]
fn malformed_rows_are_rejected_with_line_and_rule() {
    let items = small();
    let n2 = items.iter().find(|i| i.n == 2).unwrap();
    let n3 = items.iter().find(|i| i.n == 3).unwrap();
    let n5 = items
        .iter()
        .find(|i| i.n == 5 && i.chain.is_some())
        .unwrap();
    let good = serde_json::to_string(&items[items.len() - 1]).unwrap();

    // (row, expected rule or None for a good row)
    let rows: Vec<(String, Option<&str>)> = vec![
        (serde_json::to_string(n2).unwrap(), None),
        ("{not json".into(), Some("json")),
        (mutated(n3, |v| v["extra"] = 1.into()), Some("schema")),
        (
            mutated(n3, |v| {
                v.as_object_mut()
                    .unwrap()
                    .remove("query")
                    .map(|_| ())
                    .unwrap()
            }),
            Some("schema"),
        ),
        (mutated(n3, |v| v["n"] = 11.into()), Some("n-range")),
        (mutated(n3, |v| v["n"] = 4.into()), Some("pair-count")),
        (
            mutated(n3, |v| v["candidates"].as_array_mut().unwrap().truncate(3)),
            Some("candidates"),
        ),
        (mutated(n3, |v| v["answer"] = 2.into()), Some("candidates")),
        (
            mutated(n3, |v| v["query"]["id"] = "x-q".into()),
            Some("ids"),
        ),
        (
            mutated(n3, |v| v["source"] = "chain".into()),
            Some("source"),
        ),
        // Candidate 1 in the query's order.
        (
            mutated(n3, |v| {
                v["candidates"][0]["pairs"] = v["query"]["pairs"].clone()
            }),
            None,
        )
            .rerender(),
        // Candidate 2 = candidate 1 (same assignment).
        (
            mutated(n3, |v| {
                v["candidates"][1]["pairs"] = v["candidates"][0]["pairs"].clone()
            }),
            None,
        )
            .rerender(),
        // Inconsistent instantiation of one attribute.
        (
            mutated(n3, |v| {
                v["candidates"][2]["pairs"][0]["attribute_gen"] = "sparkly".into()
            }),
            None,
        )
            .rerender(),
        // Text that is not the rendering of the pairs.
        (
            mutated(n3, |v| v["candidates"][1]["text"] = "A cube.".into()),
            Some("text"),
        ),
        (
            mutated(n3, |v| v["query"]["gen_text"] = "A cube.".into()),
            Some("gen-text"),
        ),
        // N = 2 candidate 4 keeping both bindings.
        (
            mutated(n2, |v| {
                v["candidates"][3]["pairs"] = v["candidates"][0]["pairs"].clone()
            }),
            None,
        )
            .rerender(),
        (
            mutated(n3, |v| v["query"]["pairs"][0]["object"] = "Big Cube".into()),
            Some("words"),
        ),
        (good.clone(), None),
        (good, Some("duplicate-id")),
        (serde_json::to_string(n5).unwrap(), None),
    ];
    // Rows whose rule depends on re-rendered texts get their expected rule here.
    let rerendered_rules = [
        "bind",
        "distinct-assignments",
        "instantiation",
        "replacement",
    ];
    let mut k = 0;
    let mut text = String::new();
    let mut expected: Vec<(usize, &str)> = Vec::new();
    for (i, (row, rule)) in rows.iter().enumerate() {
        text.push_str(row);
        text.push('\n');
        if i == 3 {
            text.push('\n'); // a blank line: skipped, not counted, line numbers still count it
        }
        let line = i + 1 + usize::from(i > 3);
        match rule {
            Some(r) if *r == "rerender" => {
                expected.push((line, rerendered_rules[k]));
                k += 1;
            }
            Some(r) => expected.push((line, r)),
            None => {}
        }
    }
    let out = parse_items(&text);
    assert_eq!(out.rows, rows.len());
    let got: Vec<(usize, &str)> = out
        .rejected
        .iter()
        .map(|r| (r.line, r.rule.as_str()))
        .collect();
    assert_eq!(got, expected, "{:#?}", out.rejected);
    assert_eq!(out.items.len(), rows.len() - expected.len());
    assert_eq!(out.items[0], *n2);
    assert!(out.rejected.iter().all(|r| !r.message.is_empty()));
    assert!(out.rejected[0].to_string().starts_with("line 2: [json]"));
}

/// Re-renders `text` / `gen_text` of every caption after a pair edit so that only the intended
/// rule is broken, and marks the row as "rerender".
trait Rerender {
    fn rerender(self) -> (String, Option<&'static str>);
}

impl Rerender for (String, Option<&'static str>) {
    fn rerender(self) -> (String, Option<&'static str>) {
        let mut item: McqItem = serde_json::from_str(&self.0).unwrap();
        for c in std::iter::once(&mut item.query).chain(item.candidates.iter_mut()) {
            c.text = bindscope_saber::generate::render_text(&c.pairs);
            c.gen_text = bindscope_saber::generate::render_gen(&c.pairs);
        }
        (serde_json::to_string(&item).unwrap(), Some("rerender"))
    }
}
