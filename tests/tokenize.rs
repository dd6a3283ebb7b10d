//! Tokenization against the transformers fast tokenizers (`tests/fixtures/gen/text.py`): ids and
//! attention masks must be exactly equal for every case of `tests/fixtures/text/cases.json`.
//!
//! Cases on the committed small tokenizers (`text/bert-small`, `text/clip-small`, derived from the
//! real MiniLM and CLIP files) always run; cases on the real files run when
//! `BINDSCOPE_REAL_MODELS=DIR` points at the output of `shared/tools/real-models.sh`.

use crate::common::fixture;
use bindscope_data::text::{Padding, TextError, TextFamily, TextPolicy, Tokenizer};
use serde_json::Value;
use std::path::PathBuf;

fn cases() -> Value {
    let path = fixture("text").join("cases.json");
    serde_json::from_str(
        &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .expect("cases.json")
}

fn real_dir() -> Option<PathBuf> {
    std::env::var_os("BINDSCOPE_REAL_MODELS").map(PathBuf::from)
}

/// Runs every case whose tokenizer is `<kind>:…`; returns how many ran.
fn run_cases(kind: &str, root: &std::path::Path) -> usize {
    let all = cases();
    let mut ran = 0;
    for case in all["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let spec = case["tokenizer"].as_str().unwrap();
        let Some(rel) = spec.strip_prefix(&format!("{kind}:")) else {
            continue;
        };
        let policy: TextPolicy = serde_json::from_value(case["policy"].clone()).expect("policy");
        let texts: Vec<&str> = all["texts"][case["texts"].as_str().unwrap()]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let expected_ids: Vec<Vec<i64>> =
            serde_json::from_value(case["input_ids"].clone()).unwrap();
        let lengths: Vec<usize> = serde_json::from_value(case["lengths"].clone()).unwrap();
        let tok = Tokenizer::from_file(root.join(rel), policy.clone())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let enc = tok
            .encode_batch(&texts)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(enc.len(), texts.len(), "{name}");
        for (i, (got, want)) in enc.input_ids.iter().zip(&expected_ids).enumerate() {
            assert_eq!(got, want, "{name}: input_ids of text {i} ({:?})", texts[i]);
        }
        for (i, (got, &n)) in enc.attention_mask.iter().zip(&lengths).enumerate() {
            let t = expected_ids[i].len();
            let want: Vec<i64> = (0..t).map(|j| i64::from(j < n)).collect();
            assert_eq!(got, &want, "{name}: attention_mask of text {i}");
        }
        if policy.padding == Padding::MaxLength {
            assert_eq!(enc.seq_len(), policy.max_length, "{name}");
        }
        ran += 1;
    }
    ran
}

#[test]
fn committed_tokenizers_match_transformers_exactly() {
    let ran = run_cases("fixture", &fixture("text"));
    assert_eq!(ran, 11, "every committed case must run");
}

#[test]
fn real_tokenizers_match_transformers_exactly() {
    let Some(root) = real_dir() else {
        eprintln!(
            "skipped: set BINDSCOPE_REAL_MODELS=DIR (from shared/tools/real-models.sh) to test the real MiniLM and CLIP tokenizer files"
        );
        return;
    };
    let ran = run_cases("real", &root);
    assert_eq!(ran, 8, "every real-file case must run");
}

#[test]
fn tokenizer_json_padding_and_truncation_are_ignored() {
    // bert-small keeps MiniLM's `"padding": Fixed(128)` / `"truncation": 128` sections.
    let path = fixture("text").join("bert-small/tokenizer.json");
    let raw: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        raw["padding"]["strategy"]["Fixed"], 128,
        "fixture should carry the 128 padding"
    );
    let tok = Tokenizer::from_file(&path, TextPolicy::bert()).unwrap();
    let enc = tok.encode_batch(&["the", "the world"]).unwrap();
    assert_eq!(
        enc.seq_len(),
        4,
        "[CLS] the world [SEP]: padded to the longest, not to 128"
    );
    assert_eq!(enc.attention_mask, vec![vec![1, 1, 1, 0], vec![1, 1, 1, 1]]);
    assert_eq!(enc.input_ids[0][3], 0, "[PAD] is id 0");
    let long = "word ".repeat(300);
    let enc = tok.encode_batch(&[long.as_str()]).unwrap();
    assert_eq!(
        enc.seq_len(),
        302,
        "300 words + 2 specials: not truncated at 128"
    );
    assert_eq!(*enc.input_ids[0].last().unwrap(), 102, "[SEP] last");
}

#[test]
fn clip_truncation_keeps_end_of_text_and_pads_with_the_configured_token() {
    let path = fixture("text").join("clip-small/tokenizer.json");
    let tok = Tokenizer::from_file(&path, TextPolicy::clip()).unwrap();
    assert_eq!(
        tok.pad(),
        ("<|endoftext|>", 49407),
        "pad token from tokenizer_config.json"
    );
    let long = "a photo of a cat ".repeat(40);
    let enc = tok.encode_batch(&[long.as_str(), "a dog"]).unwrap();
    assert_eq!(enc.seq_len(), 77);
    assert_eq!(enc.input_ids[0][0], 49406);
    assert_eq!(enc.input_ids[0][76], 49407);
    assert_eq!(
        enc.attention_mask[1].iter().sum::<i64>(),
        4,
        "<sot> a dog <eot>"
    );
    let explicit =
        Tokenizer::from_file(&path, TextPolicy::clip_max_length().with_pad_token("!")).unwrap();
    assert_eq!(explicit.pad(), ("!", 0));
    let enc = explicit.encode_batch(&["a dog"]).unwrap();
    assert_eq!(enc.seq_len(), 77);
    assert_eq!(enc.input_ids[0][4..], vec![0; 73][..]);
}

#[test]
fn encoded_batch_converts_to_tensors() {
    let tok = Tokenizer::from_file(
        fixture("text").join("bert-small/tokenizer.json"),
        TextPolicy::bert(),
    )
    .unwrap();
    let enc = tok.encode_batch(&["a", "a b c"]).unwrap();
    let (ids, mask) = enc.tensors(&bindscope_core::device::test_device());
    assert_eq!(ids.dims(), [2, 5]);
    assert_eq!(mask.dims(), [2, 5]);
    let flat: Vec<i64> = ids
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .unwrap();
    assert_eq!(flat, enc.input_ids.concat());
    let flat: Vec<i64> = mask
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .unwrap();
    assert_eq!(flat, enc.attention_mask.concat());
    let empty = tok.encode_batch(&[]).unwrap();
    assert!(empty.is_empty() && empty.seq_len() == 0);
}

#[test]
fn policies_by_model_type() {
    let p = TextPolicy::for_model_type("bert").unwrap();
    assert_eq!(
        (p.family, p.max_length, p.padding),
        (TextFamily::Bert, 512, Padding::Longest)
    );
    let p = TextPolicy::for_model_type("clip").unwrap();
    assert_eq!(
        (p.family, p.max_length, p.padding),
        (TextFamily::Clip, 77, Padding::Longest)
    );
    let p = TextPolicy::for_model_type("siglip").unwrap();
    assert_eq!(
        (p.family, p.max_length, p.padding),
        (TextFamily::Siglip, 64, Padding::MaxLength)
    );
    let err = TextPolicy::for_model_type("gpt2").unwrap_err();
    assert!(
        matches!(err, TextError::UnknownModelType(_)) && err.to_string().contains("gpt2"),
        "{err}"
    );
    let cfg =
        serde_json::json!({"model_type": "siglip", "text_config": {"max_position_embeddings": 16}});
    assert_eq!(TextPolicy::from_config(&cfg).unwrap().max_length, 16);
    let cfg = serde_json::json!({"model_type": "bert", "max_position_embeddings": 128});
    assert_eq!(
        TextPolicy::from_config(&cfg).unwrap(),
        TextPolicy::bert().with_max_length(128)
    );
}

#[test]
fn missing_tokenizer_file_is_an_error_naming_the_file() {
    let path = std::env::temp_dir().join("bindscope-no-such-dir/tokenizer.json");
    let err = Tokenizer::from_file(&path, TextPolicy::bert()).unwrap_err();
    assert!(matches!(err, TextError::File { .. }));
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn malformed_tokenizer_file_is_an_error_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("bindscope-tokenize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, "{\"not\": \"a tokenizer\"}").unwrap();
    let err = Tokenizer::from_file(&path, TextPolicy::clip())
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(err.contains(&path.display().to_string()), "{err}");
}

#[test]
fn pad_token_missing_from_vocabulary_is_an_error() {
    let path = fixture("text").join("clip-small/tokenizer.json");
    let err = Tokenizer::from_file(
        &path,
        TextPolicy::siglip().with_pad_token("<no-such-token>"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("<no-such-token>") && err.contains("clip-small"),
        "{err}"
    );
}

/// LAION / OpenCLIP checkpoints in Hugging Face layout name `"!"` as their pad token. OpenCLIP,
/// which trained them, tokenizes a literal `!` as text: `open_clip.tokenize("! !! !!!")` is
/// `[49406, 256, 748, 995, 49407, 0, …]` (`!</w>`, `!!</w>`, `!!!</w>`; huggingface/diffusers
/// issue 4153), where transformers 5.24 gives `[49406, 0, 0, 0, 0, 0, 0, 49407, …]`. bindscope
/// follows OpenCLIP whether or not `tokenizer.json` lists `!` among its added tokens.
#[test]
fn a_laion_pad_token_is_not_matched_in_captions() {
    let src = fixture("text").join("clip-small");
    let tj: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("tokenizer.json")).unwrap())
            .unwrap();
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("tokenizer_config.json")).unwrap())
            .unwrap();
    cfg["pad_token"] = "!".into();
    // As converted (`!` only in tokenizer_config.json), and as re-saved by transformers (`!` an
    // added special token of tokenizer.json too).
    let mut resaved = tj.clone();
    resaved["added_tokens"].as_array_mut().unwrap().insert(
        0,
        serde_json::json!({"id": 0, "content": "!", "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true}),
    );
    for (name, tokenizer) in [("converted", &tj), ("resaved", &resaved)] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), tokenizer.to_string()).unwrap();
        std::fs::write(dir.path().join("tokenizer_config.json"), cfg.to_string()).unwrap();
        let tok = Tokenizer::from_file(
            dir.path().join("tokenizer.json"),
            TextPolicy::clip()
                .with_max_length(12)
                .with_padding(Padding::MaxLength),
        )
        .unwrap();
        assert_eq!(tok.pad(), ("!", 0), "{name}");
        let enc = tok.encode_batch(&["! !! !!!", "a dog"]).unwrap();
        assert_eq!(
            enc.input_ids[0],
            [49406, 256, 748, 995, 49407, 0, 0, 0, 0, 0, 0, 0],
            "{name}: `!` is text, as in OpenCLIP"
        );
        assert_eq!(
            enc.attention_mask[0],
            [1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0],
            "{name}"
        );
        assert_eq!(enc.input_ids[1][4..], [0; 8], "{name}: padded with id 0");
    }
}
