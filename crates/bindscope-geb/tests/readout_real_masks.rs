//! Opt-in: the readout's token ids and assistant-only labels under the real
//! SmolLM2-135M-Instruct tokenizer and chat template, against transformers 5.24
//! (`tests/fixtures/real/geb_smollm2_masks.json`, made by `tests/fixtures/gen/
//! geb_smollm2_masks.py` with `apply_chat_template(..., return_assistant_tokens_mask=True)`).
//!
//! Twelve mini-GEB training conversations (natural, scene-text and document scenes, 2–4 turns):
//! every visual-only instance (all assistant turns supervised) and every VL-joint instance
//! (only the current answer) must have transformers' ids, its mask as labels, and the
//! `<EMBED_PAD>` slots at the start of the first user turn.
//!
//! Set `BINDSCOPE_REAL_MODELS=DIR` (the output of `shared/tools/real-models.sh`); without it the
//! test prints a note and returns.

use bindscope_data::lm::LmTokenizer;
use bindscope_geb::readout::chat::{ChatFormat, Mode};
use bindscope_geb::readout::conversation::read_llava;
use bindscope_models::generate::chat::ChatTemplate;
use std::path::PathBuf;

#[test]
fn smollm2_ids_and_assistant_masks_match_transformers() {
    let Some(root) = std::env::var_os("BINDSCOPE_REAL_MODELS") else {
        eprintln!("BINDSCOPE_REAL_MODELS not set: skipping the real SmolLM2 mask reference");
        return;
    };
    let dir = PathBuf::from(root).join("smollm2-135m-instruct");
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures/real/geb_smollm2_masks.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let train = tmp.path().join("train.json");
    std::fs::write(&train, reference["conversations"].to_string()).unwrap();
    let convs = read_llava(&train).unwrap();
    let tok = LmTokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let fmt = ChatFormat::new(
        "smollm2-135m-instruct",
        &tok,
        ChatTemplate::from_dir(&dir).unwrap(),
        &[2],
    )
    .unwrap();
    assert_eq!(
        u64::from(fmt.embed_pad_id()),
        reference["embed_pad_id"].as_u64().unwrap()
    );
    let got = crate::common::sequences(&fmt, &convs);
    crate::common::check_instances(&fmt, &got, reference["instances"].as_array().unwrap());
    let vo = got
        .iter()
        .filter(|(m, _, _)| *m == Mode::VisualOnly)
        .count();
    assert_eq!(vo, 12);
    assert!(
        got.len() - vo >= 24,
        "{} VL-joint instances",
        got.len() - vo
    );
}
