//! BERT parity against PyTorch (`tests/fixtures/gen/bert.py`): a tiny seeded `BertModel`, three
//! right-padded sentences, every hidden state, every attention map, the pooler and the
//! sentence-transformers sentence embedding within 1e-4; the `BertForMaskedLM` layout
//! (`bert.` prefix, `cls.*` head, no pooler); strict-loading and config errors.

use crate::common::{Reference, checkpoint, device, fixture, scratch_config};
use bindscope_core::LoadOptions;
use bindscope_models::bert::{BertModel, TASK_HEADS};
use bindscope_models::{ForwardOptions, ModelError, TextEncoder};

const TOL: f32 = 1e-4;

fn load(dir: &std::path::Path, opts: &LoadOptions) -> Result<BertModel, ModelError> {
    BertModel::load(&checkpoint(dir), &device(), opts)
}

#[test]
fn hidden_states_attentions_and_pooler_match_pytorch() {
    let r = Reference::open("bert");
    let model = load(&fixture("bert"), &LoadOptions::default()).unwrap();
    let (ids, mask) = r.text_inputs(&device());
    let out = model.forward(ids, mask, None, ForwardOptions::all());
    r.assert_encoder_output("text", &out, 2, true, TOL);
}

#[test]
fn fused_attention_path_matches_pytorch() {
    let r = Reference::open("bert");
    let model = load(&fixture("bert"), &LoadOptions::default()).unwrap();
    let (ids, mask) = r.text_inputs(&device());
    let out = model.forward_text(ids, mask, ForwardOptions::default());
    assert!(out.hidden_states.is_none() && out.attentions.is_none());
    r.assert_close("text.last_hidden_state", out.last_hidden_state, TOL);
    r.assert_close("text.pooler_output", out.pooler_output, TOL);
}

#[test]
fn sentence_embedding_is_mean_pooled_and_normalized_as_sentence_transformers() {
    let r = Reference::open("bert");
    let model = load(&fixture("bert"), &LoadOptions::default()).unwrap();
    let (ids, mask) = r.text_inputs(&device());
    r.assert_close(
        "sentence_embedding",
        model.sentence_embedding(ids.clone(), mask.clone()),
        TOL,
    );
    let via_trait: &dyn TextEncoder = &model;
    r.assert_close("sentence_embedding", via_trait.embed_text(ids, mask), TOL);
}

#[test]
fn token_type_ids_are_used() {
    let r = Reference::open("bert");
    let model = load(&fixture("bert"), &LoadOptions::default()).unwrap();
    let (ids, mask) = r.text_inputs(&device());
    let tt = r.int_tensor::<2>("token_type_ids", &device());
    let out = model.forward(ids, mask, Some(tt), ForwardOptions::default());
    r.assert_close("tt.last_hidden_state", out.last_hidden_state, TOL);
    r.assert_close("tt.pooler_output", out.pooler_output, TOL);
}

#[test]
fn masked_lm_checkpoint_reports_its_head_unless_task_heads_are_ignored() {
    let dir = fixture("bert").join("mlm");
    let err = load(&dir, &LoadOptions::default()).unwrap_err().to_string();
    assert!(err.contains("unexpected key: cls."), "{err}");
    assert!(
        !err.contains("missing key"),
        "the `bert.` prefix must be remapped: {err}"
    );

    let opts = LoadOptions {
        benign_unused: vec![TASK_HEADS.into()],
        ..Default::default()
    };
    let model = load(&dir, &opts).unwrap();
    assert!(model.pooler.is_none(), "BertForMaskedLM has no pooler");
    let r = Reference::open("bert");
    let (ids, mask) = r.text_inputs(&device());
    let out = model.forward(ids.clone(), mask.clone(), None, ForwardOptions::default());
    // Without a pooler, pooler_output is the CLS hidden state.
    let [n, _, d] = out.last_hidden_state.dims();
    let cls = out
        .last_hidden_state
        .clone()
        .slice([0..n, 0..1, 0..d])
        .reshape([n, d]);
    let diff: f32 = (out.pooler_output - cls).abs().max().into_scalar();
    assert_eq!(diff, 0.0);
    r.assert_close("text.last_hidden_state", out.last_hidden_state, TOL);
    r.assert_close(
        "sentence_embedding",
        model.sentence_embedding(ids, mask),
        TOL,
    );
}

#[test]
fn config_weight_mismatch_lists_missing_keys() {
    let dir = scratch_config("bert", "layers", |c| c["num_hidden_layers"] = 3.into());
    let err = load(&dir, &LoadOptions::default()).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(err.contains("missing key: encoder.layer.2."), "{err}");
    assert!(err.contains("model.safetensors"), "{err}");
}

#[test]
fn unsupported_activation_is_an_error_naming_the_config() {
    let dir = scratch_config("bert", "act", |c| c["hidden_act"] = "mish".into());
    let err = load(&dir, &LoadOptions::default()).unwrap_err();
    std::fs::remove_dir_all(&dir).ok();
    assert!(matches!(err, ModelError::Unsupported { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("config.json") && msg.contains("mish"), "{msg}");
}

#[test]
fn info_reports_the_config() {
    let model = load(&fixture("bert"), &LoadOptions::default()).unwrap();
    let info = model.info();
    assert_eq!(info.model_type, "bert");
    assert_eq!(
        (
            info.hidden_size,
            info.embed_dim,
            info.num_layers,
            info.num_heads
        ),
        (32, 32, 2, 4)
    );
    assert_eq!(info.input_size, [40, 0]);
    // embeddings (99+40+2)·32 + 2·32, per block 4·(32·32+32) + 2·2·32 + 2·(32·64) + 64 + 32, pooler 32·32+32
    let blocks = 4 * (32 * 32 + 32) + 4 * 32 + 2 * 32 * 64 + 64 + 32;
    assert_eq!(info.num_params, 141 * 32 + 64 + 2 * blocks + 32 * 32 + 32);
}
