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
use bindscope_geb::readout::chat::{ChatFormat, IGNORE, Mode};
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
    let want = reference["instances"].as_array().unwrap();
    let mut got = Vec::new();
    for (ci, c) in convs.iter().enumerate() {
        for (mode, slots) in [(Mode::VisualOnly, 1), (Mode::VlJoint, 2)] {
            for s in fmt.sequences(c, mode, slots).unwrap() {
                got.push((mode, ci, s));
            }
        }
    }
    assert_eq!(got.len(), want.len(), "instances");
    let (mut vo, mut vl) = (0, 0);
    for ((mode, ci, s), w) in got.iter().zip(want) {
        let label = format!("{mode:?} conversation {ci} turn {:?}", s.turn);
        assert_eq!(serde_json::to_value(mode).unwrap(), w["mode"], "{label}");
        assert_eq!(w["conversation"].as_u64(), Some(*ci as u64), "{label}");
        assert_eq!(w["turn"].as_u64().map(|t| t as usize), s.turn, "{label}");
        let ids: Vec<u32> = w["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(s.input_ids, ids, "{label}: ids");
        let mask: Vec<bool> = w["assistant_mask"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() == 1)
            .collect();
        let ours: Vec<bool> = s.labels.iter().map(|&l| l != IGNORE).collect();
        assert_eq!(ours, mask, "{label}: assistant mask");
        for (&l, &id) in s.labels.iter().zip(&s.input_ids) {
            assert!(
                l == IGNORE || l == i64::from(id),
                "{label}: label is not the id"
            );
        }
        for &p in &s.slots {
            assert_eq!(s.input_ids[p], fmt.embed_pad_id(), "{label}: slot");
        }
        match mode {
            Mode::VisualOnly => vo += 1,
            Mode::VlJoint => vl += 1,
        }
    }
    assert_eq!(vo, 12);
    assert!(vl >= 24, "{vl} VL-joint instances");
}
