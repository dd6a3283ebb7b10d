//! BERT parity against PyTorch (`tests/fixtures/gen/bert.py`): a tiny seeded `BertModel`, three
//! right-padded sentences, every hidden state, every attention map, the pooler and the
//! sentence-transformers sentence embedding within 1e-4; the `BertForMaskedLM` layout
//! (`bert.` prefix, `cls.*` head, no pooler); strict-loading and config errors.

use crate::common::{Reference, checkpoint, device, fixture, scratch_config};
use bindscope_core::LoadOptions;
use bindscope_models::bert::{BertModel, TASK_HEADS};
use bindscope_models::{ForwardOptions, ModelError, TextEncoder};
use burn::prelude::*;

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

/// `max |a - b|` over every element.
fn max_abs<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

#[test]
fn unpadded_forward_matches_pytorch_at_real_tokens_and_zeroes_padding() {
    let r = Reference::open("bert");
    let dev = device();
    let model = load(&fixture("bert"), &LoadOptions::default()).unwrap();
    let (ids, mask) = r.text_inputs(&dev);
    let [n, t] = mask.dims();
    let real = mask.clone().sum().into_scalar::<i64>() as usize;
    assert!(real < n * t, "the fixture's sentences must be padded");
    let out = model.forward_unpadded(ids, mask.clone(), None, ForwardOptions::all());
    let m3 = mask.clone().float().reshape([n, t, 1]);
    let hs = out.hidden_states.expect("hidden states");
    assert_eq!(hs.len(), 3);
    for (i, h) in hs.into_iter().enumerate() {
        let want = r.tensor::<3>(&format!("text.hidden_states.{i}"), &dev);
        let err = max_abs(h * m3.clone(), want * m3.clone());
        assert!(err <= TOL, "hidden state {i} at real tokens: {err:e}");
    }
    let last = out.last_hidden_state;
    let want = r.tensor::<3>("text.last_hidden_state", &dev);
    let err = max_abs(last.clone() * m3.clone(), want * m3.clone());
    assert!(err <= TOL, "last hidden state at real tokens: {err:e}");
    let at_padding = (last * (m3.neg() + 1.0)).abs().max().into_scalar::<f32>();
    assert_eq!(at_padding, 0.0, "padded positions are zeros");
    // Attention rows of real queries (position 0 is a real token of every row, so the pooler
    // reads a real token too).
    let rows = mask.clone().float().reshape([n, 1, t, 1]);
    for (i, a) in out.attentions.expect("attentions").into_iter().enumerate() {
        let want = r.tensor::<4>(&format!("text.attentions.{i}"), &dev);
        let err = max_abs(a * rows.clone(), want * rows.clone());
        assert!(err <= TOL, "attention {i}, real query rows: {err:e}");
    }
    r.assert_close("text.pooler_output", out.pooler_output, TOL);
    r.assert_close(
        "sentence_embedding",
        model.sentence_embedding(r.text_inputs(&dev).0, mask),
        TOL,
    );
}

#[test]
fn unpadded_forward_has_the_padded_forwards_gradients() {
    let r = Reference::open("bert");
    let ad = device().autodiff();
    let model =
        BertModel::load(&checkpoint(&fixture("bert")), &ad, &LoadOptions::default()).unwrap();
    let (ids, mask) = r.text_inputs(&ad);
    let [n, _] = mask.dims();
    let e = model.config.hidden_size;
    // A loss over the sentence embeddings with fixed, uneven weights.
    let w = Tensor::<1, Int>::arange(0..(n * e) as i64, &ad)
        .float()
        .reshape([n, e])
        .mul_scalar(0.37)
        .sin();
    let grads = |unpadded: bool| {
        let out = if unpadded {
            model.forward_unpadded(ids.clone(), mask.clone(), None, ForwardOptions::default())
        } else {
            model.forward(ids.clone(), mask.clone(), None, ForwardOptions::default())
        };
        let pooled = model.pool_sentence(out.last_hidden_state, mask.clone());
        (pooled * w.clone()).sum().backward()
    };
    let (padded, skipped) = (grads(false), grads(true));
    let layer = &model.encoder.layer;
    let params = [
        (
            "embeddings.word_embeddings.weight",
            &model.embeddings.word_embeddings.weight,
        ),
        (
            "encoder.layer.0.attention.self.query.weight",
            &layer[0].attention.self_attn.query.weight,
        ),
        (
            "encoder.layer.0.intermediate.dense.weight",
            &layer[0].intermediate.dense.weight,
        ),
        (
            "encoder.layer.1.output.dense.weight",
            &layer[1].output.dense.weight,
        ),
    ];
    for (name, p) in params {
        let want = p
            .val()
            .grad(&padded)
            .expect("gradient of the padded forward");
        let got = p
            .val()
            .grad(&skipped)
            .expect("gradient of the unpadded forward");
        let scale = want.clone().abs().max().into_scalar::<f32>();
        assert!(scale > 0.0, "{name}: zero gradient");
        let err = max_abs(got, want);
        assert!(
            err <= 1e-5 * scale,
            "{name}: gradient differs by {err:e} (max {scale:e})"
        );
    }
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
