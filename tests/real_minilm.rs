//! Opt-in: the real sentence-transformers/all-MiniLM-L6-v2 against transformers.
//!
//! Set `BINDSCOPE_REAL_MODELS=DIR` (the output of `shared/tools/real-models.sh`); the test loads
//! `DIR/minilm-l6-v2`, tokenizes three sentences with bindscope's tokenizer and compares the ids
//! and the sentence embeddings with `tests/fixtures/real/minilm_l6_v2.safetensors` (computed by
//! `tests/fixtures/gen/bert.py` with transformers: mean pooling + L2 normalization), within
//! 1e-4 max abs. Without the variable the test prints a note and returns.
//!
//! The second test reads the checkpoint as every study does (`Tokenizer::from_checkpoint`,
//! `registry::load_text`: its sentence-transformers files included) and embeds a 400-word text
//! (472 WordPiece tokens) against `tests/fixtures/real/minilm_l6_v2_st.safetensors`, the
//! embedding `SentenceTransformer(dir).encode` gives (made by
//! `tests/fixtures/gen/sentence_transformers.py`; it truncates at `max_seq_length` 256).

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::text::{TextPolicy, Tokenizer};
use bindscope_models::TextEncoder;
use bindscope_models::bert::BertModel;
use std::path::PathBuf;

/// `tests/fixtures/real/minilm_l6_v2.safetensors`: (shape, raw little-endian bytes) of `key`.
fn reference(key: &str) -> (Vec<usize>, safetensors::Dtype, Vec<u8>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/real/minilm_l6_v2.safetensors");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid safetensors");
    let t = st
        .tensor(key)
        .unwrap_or_else(|_| panic!("{}: no tensor '{key}'", path.display()));
    (t.shape().to_vec(), t.dtype(), t.data().to_vec())
}

fn reference_i64(key: &str) -> Vec<i64> {
    let (_, dtype, data) = reference(key);
    assert_eq!(dtype, safetensors::Dtype::I64, "{key}");
    data.chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Must equal `REAL_SENTENCES` in `tests/fixtures/gen/bert.py`.
const SENTENCES: [&str; 3] = [
    "A man is playing a guitar on the street.",
    "Two dogs run across a snowy field.",
    "The quarterly report shows a 12% increase in revenue, mostly from Europe.",
];

#[test]
fn real_minilm_sentence_embeddings_match_transformers() {
    let Some(root) = std::env::var_os("BINDSCOPE_REAL_MODELS") else {
        eprintln!(
            "skipped: set BINDSCOPE_REAL_MODELS=DIR (from shared/tools/real-models.sh) to test the real all-MiniLM-L6-v2"
        );
        return;
    };
    let dir = PathBuf::from(root).join("minilm-l6-v2");
    let device = bindscope_core::device::test_device();
    let ckpt =
        Checkpoint::from_dir(&dir.display().to_string(), &dir).expect("real MiniLM checkpoint");
    let model = BertModel::load(&ckpt, &device, &LoadOptions::default()).expect("strict load");
    assert!(model.pooler.is_some());
    let info = model.info();
    assert_eq!(
        (info.hidden_size, info.num_layers, info.num_heads),
        (384, 6, 12)
    );

    let tok =
        Tokenizer::from_file(dir.join("tokenizer.json"), TextPolicy::bert()).expect("tokenizer");
    let enc = tok.encode_batch(&SENTENCES).expect("encode");

    assert_eq!(
        enc.input_ids.concat(),
        reference_i64("input_ids"),
        "input_ids differ from transformers"
    );
    assert_eq!(
        enc.attention_mask.concat(),
        reference_i64("attention_mask"),
        "attention_mask differs from transformers"
    );

    let (ids, mask) = enc.tensors(&device);
    let got = model.embed_text(ids, mask);
    let (shape, dtype, data) = reference("sentence_embedding");
    assert_eq!(dtype, safetensors::Dtype::F32);
    assert_eq!(got.dims().to_vec(), shape, "sentence_embedding shape");
    let want: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let got: Vec<f32> = got
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .unwrap();
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(got.iter().all(|x| x.is_finite()), "non-finite embedding");
    assert!(
        worst <= 1e-4,
        "sentence_embedding max abs error {worst:e} > 1e-4"
    );
    eprintln!("real all-MiniLM-L6-v2: sentence_embedding max abs error {worst:e}");
}

#[test]
fn real_minilm_long_text_matches_sentence_transformers_encode() {
    let Some(root) = std::env::var_os("BINDSCOPE_REAL_MODELS") else {
        eprintln!(
            "skipped: set BINDSCOPE_REAL_MODELS=DIR (from shared/tools/real-models.sh) to test the real all-MiniLM-L6-v2"
        );
        return;
    };
    let dir = PathBuf::from(root).join("minilm-l6-v2");
    let device = bindscope_core::device::test_device();
    let ckpt =
        Checkpoint::from_dir(&dir.display().to_string(), &dir).expect("real MiniLM checkpoint");

    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/real/minilm_l6_v2_st.safetensors");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).expect("header");
    let text = meta.metadata().as_ref().expect("metadata")["text"].clone();
    assert_eq!(text.split(' ').count(), 400);
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let want: Vec<f32> = st
        .tensor("sentence_embedding")
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();

    let tok = Tokenizer::from_checkpoint(&ckpt).expect("tokenizer");
    assert_eq!(
        tok.policy().max_length,
        256,
        "sentence_bert_config.json max_seq_length"
    );
    let enc = tok.encode_batch(&[text.as_str()]).expect("encode");
    assert_eq!(enc.seq_len(), 256);
    let model = bindscope_models::registry::load_text(&ckpt, &device, &LoadOptions::default())
        .expect("load");
    let (ids, mask) = enc.tensors(&device);
    let got = bindscope_core::device::to_host_f32(model.embed_text(ids, mask)).unwrap();
    assert_eq!(got.len(), want.len());
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let cosine: f32 = got.iter().zip(&want).map(|(a, b)| a * b).sum();
    assert!(
        worst <= 1e-4,
        "400-word text: max abs error {worst:e} > 1e-4 against sentence-transformers (cosine {cosine})"
    );
    eprintln!("real all-MiniLM-L6-v2, 400 words: max abs error {worst:e}, cosine {cosine}");
}
