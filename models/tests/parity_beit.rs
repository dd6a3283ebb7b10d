//! Parity of the native BEiT with transformers' `BeitModel` on the tiny seeded fixtures of
//! `tests/fixtures/gen/beit.py`, to 1e-4 max abs error: every hidden state, attention map, the
//! last hidden state and the pooled output of a fine-tuning-style model (relative position
//! table per block, layer scale, mean pooling) at its configured 32×32 and at 48×40 (tables
//! resampled); a pre-training checkpoint (`BeitForMaskedImageModeling`: `beit.` prefix, one
//! shared table, mask token, no pooler) read as `BeitModel.from_pretrained` reads it; absolute
//! position embeddings with CLS pooling; parameter counts as `sum(p.numel())`.

use crate::common::{Reference, checkpoint, device, fixture, scratch};
use bindscope_core::LoadOptions;
use bindscope_models::beit::BeitModel;
use bindscope_models::{ForwardOptions, VisionEncoder, VisionReadout, registry};
use burn::tensor::Tensor;

const TOL: f32 = 1e-4;

fn load(name: &str) -> BeitModel {
    BeitModel::load(
        &checkpoint(&fixture(name)),
        &device(),
        &LoadOptions::default(),
    )
    .unwrap()
}

/// The load error of a scratch checkpoint directory, which is removed.
fn load_error(dir: &std::path::Path) -> String {
    let err = BeitModel::load(&checkpoint(dir), &device(), &LoadOptions::default())
        .unwrap_err()
        .to_string();
    std::fs::remove_dir_all(dir).ok();
    err
}

fn num_params(r: &Reference) -> usize {
    r.i64("num_params").1[0] as usize
}

/// The readouts against the reference sequence output: `Pooled` = `pooler_output`,
/// `Summary` = its CLS token, `MeanPatch` = the mean of its patch tokens.
fn check_readouts(r: &Reference, model: &dyn VisionEncoder, prefix: &str) {
    let pixels = r.tensor::<4>(&format!("{prefix}pixel_values"), &device());
    let seq = r.tensor::<3>(&format!("{prefix}vision.last_hidden_state"), &device());
    let [n, t, d] = seq.dims();
    r.assert_close(
        &format!("{prefix}vision.pooler_output"),
        model.embed(pixels.clone(), VisionReadout::Pooled),
        TOL,
    );
    let cls: Tensor<2> = seq.clone().slice([0..n, 0..1, 0..d]).reshape([n, d]);
    let mean: Tensor<2> = seq.slice([0..n, 1..t, 0..d]).mean_dim(1).reshape([n, d]);
    for (readout, want) in [
        (VisionReadout::Summary, cls),
        (VisionReadout::MeanPatch, mean),
    ] {
        let got = model.embed(pixels.clone(), readout);
        let diff = (got - want).abs().max().into_scalar::<f32>();
        assert!(diff <= TOL, "{prefix}{readout:?}: max abs diff {diff}");
    }
}

#[test]
fn beit_matches_transformers() {
    let r = Reference::open("beit");
    let model = load("beit");
    let out = model.forward(
        r.tensor::<4>("pixel_values", &device()),
        ForwardOptions::all(),
    );
    r.assert_encoder_output("vision", &out, 2, true, TOL);
    check_readouts(&r, &model, "");
    // 48 × 40: a 6 × 5 window, every block's table resampled from 7 × 7 to 11 × 9.
    let odd = model.forward(
        r.tensor::<4>("odd.pixel_values", &device()),
        ForwardOptions::default(),
    );
    r.assert_close("odd.vision.last_hidden_state", odd.last_hidden_state, TOL);
    r.assert_close("odd.vision.pooler_output", odd.pooler_output, TOL);
    check_readouts(&r, &model, "odd.");
    let info = model.info();
    assert_eq!(info.num_params, num_params(&r));
    assert_eq!(
        (info.embed_dim, info.patch_size, info.input_size),
        (16, 8, [32, 32])
    );
    assert!(!model.pooler_initialised);
}

#[test]
fn pretraining_checkpoint_reads_as_transformers_from_pretrained() {
    let r = Reference::open("beit/pretraining");
    let ckpt = checkpoint(&fixture("beit/pretraining"));
    let model = BeitModel::load(&ckpt, &device(), &LoadOptions::default()).unwrap();
    assert!(model.pooler_initialised);
    assert!(model.encoder.relative_position_bias.is_some());
    assert!(model.embeddings.mask_token.is_some());
    let out = model.forward(
        r.tensor::<4>("pixel_values", &device()),
        ForwardOptions {
            output_hidden_states: true,
            output_attentions: false,
            attention_last_rows: None,
        },
    );
    for (i, h) in out.hidden_states.unwrap().into_iter().enumerate() {
        r.assert_close(&format!("vision.hidden_states.{i}"), h, TOL);
    }
    r.assert_close("vision.last_hidden_state", out.last_hidden_state, TOL);
    r.assert_close("vision.pooler_output", out.pooler_output, TOL);
    assert_eq!(model.info().num_params, num_params(&r));
    // Through the registry, as the studies load it.
    let boxed = registry::load_vision(&ckpt, &device(), &LoadOptions::default()).unwrap();
    check_readouts(&r, boxed.as_ref(), "");
}

#[test]
fn absolute_positions_and_cls_pooling_match_transformers() {
    let r = Reference::open("beit/absolute_cls");
    let model = load("beit/absolute_cls");
    assert!(model.layernorm.is_some() && model.pooler.is_none());
    assert!(model.encoder.layer[0].lambda_1.is_none());
    for prefix in ["", "odd."] {
        let out = model.forward(
            r.tensor::<4>(&format!("{prefix}pixel_values"), &device()),
            ForwardOptions::default(),
        );
        r.assert_close(
            &format!("{prefix}vision.last_hidden_state"),
            out.last_hidden_state,
            TOL,
        );
        r.assert_close(
            &format!("{prefix}vision.pooler_output"),
            out.pooler_output,
            TOL,
        );
        check_readouts(&r, &model, prefix);
    }
    assert_eq!(model.info().num_params, num_params(&r));
}

#[test]
fn missing_shared_table_is_named_in_the_checkpoints_terms() {
    let key = "beit.encoder.relative_position_bias.relative_position_bias_table";
    let dir = scratch("beit/pretraining", "missing-table", |_| {}, |k| k != key);
    let err = load_error(&dir);
    assert!(
        err.contains("1 missing, 0 unexpected") && err.contains(key),
        "{err}"
    );
}

#[test]
fn a_table_of_the_wrong_window_is_a_shape_error() {
    // image_size 40 in config.json makes a 5 × 5 window (84 rows); the file's tables have 52.
    let dir = scratch(
        "beit",
        "wrong-window",
        |c| c["image_size"] = 40.into(),
        |_| true,
    );
    let err = load_error(&dir);
    assert!(
        err.contains("encoder.layer.0.attention.attention.relative_position_bias.relative_position_bias_table")
            && err.contains("52"),
        "{err}"
    );
}

/// timm's `Beit` (BEiT v2 layout: fused `qkv` with `q_bias` / `v_bias`, `gamma_1/2`, `fc_norm`)
/// loaded through the registry from timm's `config.json` and key names: `forward_features`
/// and `forward_head(pre_logits=True)` of timm 1.0.31 to 1e-4, the parameter count without
/// the classifier head.
#[test]
fn timm_beitv2_matches_timm() {
    let r = Reference::open("beit/timm_beitv2");
    let ckpt = checkpoint(&fixture("beit/timm_beitv2"));
    assert_eq!(registry::model_type(&ckpt).unwrap(), "beit");
    let model = BeitModel::load(&ckpt, &device(), &LoadOptions::default()).unwrap();
    let c = &model.config;
    assert!(c.fused_qkv && c.use_relative_position_bias && c.use_mean_pooling);
    assert_eq!(
        (
            c.hidden_size,
            c.num_hidden_layers,
            c.num_attention_heads,
            c.intermediate_size
        ),
        (16, 2, 2, 24)
    );
    assert_eq!(
        (c.image_size, c.patch_size, c.layer_norm_eps),
        ([32, 32], 8, 1e-6)
    );
    let out = model.forward(
        r.tensor::<4>("pixel_values", &device()),
        ForwardOptions::default(),
    );
    r.assert_close("vision.last_hidden_state", out.last_hidden_state, TOL);
    r.assert_close("vision.pooler_output", out.pooler_output, TOL);
    assert_eq!(model.info().num_params, num_params(&r));
    let boxed = registry::load_vision(&ckpt, &device(), &LoadOptions::default()).unwrap();
    check_readouts(&r, boxed.as_ref(), "");
}

#[test]
fn timm_missing_key_is_named_by_its_timm_name() {
    let dir = scratch(
        "beit/timm_beitv2",
        "missing-qkv",
        |_| {},
        |k| k != "blocks.1.attn.qkv.weight",
    );
    let err = load_error(&dir);
    assert!(
        err.contains("1 missing, 0 unexpected") && err.contains("blocks.1.attn.qkv.weight"),
        "{err}"
    );
}

#[test]
fn timm_config_of_another_family_is_refused_by_name() {
    let dir = scratch(
        "beit/timm_beitv2",
        "deit",
        |c| c["architecture"] = "deit_base_patch16_224".into(),
        |_| true,
    );
    let err = registry::load_vision(&checkpoint(&dir), &device(), &LoadOptions::default())
        .err()
        .expect("a DeiT architecture is not read as BEiT")
        .to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        err.contains("deit_base_patch16_224")
            && err.contains("beit_*, beitv2_*")
            && err.contains("eva02_*"),
        "{err}"
    );
}

#[test]
fn timm_pooling_that_the_weights_do_not_have_is_refused() {
    // `global_pool: token` pools the CLS token after `norm`; this checkpoint has `fc_norm`.
    let dir = scratch(
        "beit/timm_beitv2",
        "token-pool",
        |c| c["global_pool"] = "token".into(),
        |_| true,
    );
    let err = load_error(&dir);
    assert!(
        err.contains("global_pool 'token' with 'fc_norm' and no 'norm'"),
        "{err}"
    );
}

#[test]
fn a_lone_pooler_key_reports_its_missing_partner() {
    let dir = scratch(
        "beit",
        "lone-pooler-bias",
        |_| {},
        |k| k != "pooler.layernorm.weight",
    );
    let err = load_error(&dir);
    assert!(
        err.contains("1 missing, 0 unexpected") && err.contains("pooler.layernorm.weight"),
        "{err}"
    );
}
