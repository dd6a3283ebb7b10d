//! Standalone towers in every key layout transformers writes (`tests/fixtures/gen/hf5_layouts.py`):
//! `CLIPVisionModel`, `CLIPVisionModelWithProjection`, `CLIPTextModel`,
//! `CLIPTextModelWithProjection`, `SiglipVisionModel`, `SiglipTextModel`, each saved by
//! transformers 5 (the four classes without a projection store their keys bare, `embeddings.*`)
//! and, with the same weights, by transformers 4.x (`transformers4/`: keys under
//! `vision_model.` / `text_model.`). Both directories load through the registry, as the studies
//! and `experiments info` do, and match the transformers 5 forward pass within 1e-4; the layout
//! is told apart by the keys (`TowerLayout`); a file missing a key is reported under the key's
//! stored name. The `config.json` of every class names the `model_type` the registry dispatches
//! on, also for the classes whose layout did not change (their fixtures are the parity ones).

use crate::common::{Reference, checkpoint, device, fixture};
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_models::clip::{self, ClipTextModel, ClipVisionModel, TowerLayout};
use bindscope_models::{ForwardOptions, ModelError, VisionReadout, registry, siglip};
use std::path::{Path, PathBuf};

const TOL: f32 = 1e-4;

/// Both layouts of fixture `hf5_layouts/<name>`: `(label, directory)`.
fn layouts(name: &str) -> [(&'static str, PathBuf); 2] {
    let dir = fixture(&format!("hf5_layouts/{name}"));
    [
        ("transformers 5", dir.clone()),
        ("transformers 4", dir.join("transformers4")),
    ]
}

fn reference(name: &str) -> Reference {
    Reference::open(&format!("hf5_layouts/{name}"))
}

fn spec(dir: &Path) -> String {
    dir.display().to_string()
}

/// The vision tower of every layout of `name` through `registry::open_vision` matches
/// transformers 5: hidden states, attentions, last hidden state, pooler output, the pooled
/// embedding and the parameter count.
fn check_vision(name: &str) {
    let r = reference(name);
    let px = r.tensor::<4>("pixel_values", &device());
    let (_, num_params) = r.i64("num_params");
    let (embed_shape, _) = r.f32("image_embeds");
    for (label, dir) in layouts(name) {
        let opened = registry::open_vision(&spec(&dir), &device(), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{name} ({label}): {e}"));
        let model = opened.model;
        println!("{name} ({label})");
        let out = model.forward_vision(px.clone(), ForwardOptions::all());
        r.assert_encoder_output("vision", &out, 2, true, TOL);
        r.assert_close(
            "image_embeds",
            model.embed(px.clone(), VisionReadout::Pooled),
            TOL,
        );
        let info = model.info();
        assert_eq!(info.num_params as i64, num_params[0], "{name} ({label})");
        assert_eq!(info.embed_dim, embed_shape[1], "{name} ({label})");
        // `experiments info` loads every tower of the checkpoint.
        let towers = registry::load_any(&opened.checkpoint, &device(), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{name} ({label}): {e}"));
        assert_eq!(towers.len(), 1, "{name} ({label})");
        assert_eq!(towers[0].0, "vision");
        assert_eq!(towers[0].1.num_params as i64, num_params[0]);
    }
}

/// [`check_vision`] for the text tower (`registry::open_text`, `embed_text` with the fixture's
/// mask; SigLIP's text encoder ignores it, as its reference does).
fn check_text(name: &str) {
    let r = reference(name);
    let (ids, mask) = r.text_inputs(&device());
    let (_, num_params) = r.i64("num_params");
    let (embed_shape, _) = r.f32("text_embeds");
    for (label, dir) in layouts(name) {
        let opened = registry::open_text(&spec(&dir), &device(), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{name} ({label}): {e}"));
        let model = opened.model;
        println!("{name} ({label})");
        let out = model.forward_text(ids.clone(), mask.clone(), ForwardOptions::all());
        r.assert_encoder_output("text", &out, 2, true, TOL);
        r.assert_close(
            "text_embeds",
            model.embed_text(ids.clone(), mask.clone()),
            TOL,
        );
        let info = model.info();
        assert_eq!(info.num_params as i64, num_params[0], "{name} ({label})");
        assert_eq!(info.embed_dim, embed_shape[1], "{name} ({label})");
        let towers = registry::load_any(&opened.checkpoint, &device(), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{name} ({label}): {e}"));
        assert_eq!(towers.len(), 1, "{name} ({label})");
        assert_eq!(towers[0].0, "text");
    }
}

#[test]
fn clip_vision_model_loads_in_both_layouts() {
    check_vision("clip_vision_model");
}

#[test]
fn clip_vision_model_with_projection_loads_in_both_layouts() {
    check_vision("clip_vision_model_projection");
}

#[test]
fn clip_text_model_loads_in_both_layouts() {
    check_text("clip_text_model");
}

#[test]
fn clip_text_model_with_projection_loads_in_both_layouts() {
    check_text("clip_text_model_projection");
}

#[test]
fn siglip_vision_model_loads_in_both_layouts() {
    check_vision("siglip_vision_model");
}

#[test]
fn siglip_text_model_loads_in_both_layouts() {
    check_text("siglip_text_model");
}

#[test]
fn layouts_are_told_apart_by_their_keys() {
    // (fixture, prefix, projection, bare in transformers 5, has a projection)
    let vision_proj = Some(("visual_projection", "CLIPVisionModelWithProjection"));
    let text_proj = Some(("text_projection", "CLIPTextModelWithProjection"));
    let cases = [
        (
            "clip_vision_model",
            "vision_model",
            vision_proj,
            true,
            false,
        ),
        (
            "clip_vision_model_projection",
            "vision_model",
            vision_proj,
            false,
            true,
        ),
        ("clip_text_model", "text_model", text_proj, true, false),
        (
            "clip_text_model_projection",
            "text_model",
            text_proj,
            false,
            true,
        ),
        ("siglip_vision_model", "vision_model", None, true, false),
        ("siglip_text_model", "text_model", None, true, false),
    ];
    for (name, prefix, projection, bare5, with_projection) in cases {
        for (label, dir) in layouts(name) {
            let layout = TowerLayout::detect(&checkpoint(&dir), prefix, projection).unwrap();
            let bare = bare5 && label == "transformers 5";
            assert_eq!(
                layout,
                TowerLayout {
                    bare,
                    projection: with_projection
                },
                "{name} ({label})"
            );
        }
    }
    // The concrete towers: a projection exactly where the class has one.
    for (label, dir) in layouts("clip_vision_model") {
        let m = ClipVisionModel::load(&checkpoint(&dir), &device(), &LoadOptions::default());
        assert!(m.unwrap().visual_projection.is_none(), "{label}");
    }
    for (label, dir) in layouts("clip_text_model_projection") {
        let m = ClipTextModel::load(&checkpoint(&dir), &device(), &LoadOptions::default());
        assert!(m.unwrap().text_projection.is_some(), "{label}");
    }
}

/// `config.json` of `dir`.
fn config(dir: &Path) -> serde_json::Value {
    let path = dir.join("config.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn configs_name_the_model_type_the_registry_dispatches_on() {
    // (fixture, transformers class, model_type it writes, tower) as transformers 5.24 saves
    // them; the hf5_layouts fixtures also as transformers 4.x does.
    let cases = [
        (
            "hf5_layouts/clip_vision_model",
            "CLIPVisionModel",
            clip::VISION_MODEL_TYPE,
            "vision",
        ),
        (
            "hf5_layouts/clip_vision_model_projection",
            "CLIPVisionModelWithProjection",
            clip::VISION_MODEL_TYPE,
            "vision",
        ),
        (
            "hf5_layouts/clip_text_model",
            "CLIPTextModel",
            clip::TEXT_MODEL_TYPE,
            "text",
        ),
        (
            "hf5_layouts/clip_text_model_projection",
            "CLIPTextModelWithProjection",
            clip::TEXT_MODEL_TYPE,
            "text",
        ),
        (
            "hf5_layouts/siglip_vision_model",
            "SiglipVisionModel",
            siglip::VISION_MODEL_TYPE,
            "vision",
        ),
        (
            "hf5_layouts/siglip_text_model",
            "SiglipTextModel",
            siglip::TEXT_MODEL_TYPE,
            "text",
        ),
        ("clip", "CLIPModel", clip::MODEL_TYPE, "both"),
        ("siglip", "SiglipModel", siglip::MODEL_TYPE, "both"),
        ("dinov2", "Dinov2Model", "dinov2", "vision"),
        (
            "dinov2_registers",
            "Dinov2WithRegistersModel",
            "dinov2_with_registers",
            "vision",
        ),
        ("vit", "ViTModel", "vit", "vision"),
        ("vit_mae", "ViTMAEModel", "vit_mae", "vision"),
        (
            "vit_mae/pretraining",
            "ViTMAEForPreTraining",
            "vit_mae",
            "vision",
        ),
    ];
    for (name, class, model_type, tower) in cases {
        let dir = fixture(name);
        let mut dirs = vec![dir.clone()];
        if dir.join("transformers4").is_dir() {
            dirs.push(dir.join("transformers4"));
        }
        for d in dirs {
            let c = config(&d);
            let what = d.display().to_string();
            assert_eq!(c["model_type"], model_type, "{what}");
            assert_eq!(c["architectures"], serde_json::json!([class]), "{what}");
            let row = registry::find(model_type).unwrap_or_else(|| panic!("{what}: no row"));
            assert_eq!(row.vision.is_some(), tower != "text", "{what}");
            assert_eq!(row.text.is_some(), tower != "vision", "{what}");
            let ckpt = checkpoint(&d);
            let towers = registry::load_any(&ckpt, &device(), &LoadOptions::default())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(towers.len(), if tower == "both" { 2 } else { 1 }, "{what}");
        }
    }
}

/// A copy of `src` (`config.json`, `model.safetensors`) in `dir`, with only the tensors `keep`
/// accepts plus the `extra` ones (each `[2]`, zeros).
fn copy_with(src: &Path, dir: &Path, keep: impl Fn(&str) -> bool, extra: &[&str]) -> Checkpoint {
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let zeros = vec![0u8; 8];
    let mut tensors: Vec<(String, safetensors::tensor::TensorView<'_>)> =
        st.tensors().into_iter().filter(|(k, _)| keep(k)).collect();
    for k in extra {
        let t = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &zeros);
        tensors.push((k.to_string(), t.unwrap()));
    }
    std::fs::write(
        dir.join("model.safetensors"),
        safetensors::serialize(tensors, None).unwrap(),
    )
    .unwrap();
    checkpoint(dir)
}

fn vision_error(ckpt: &Checkpoint) -> String {
    match registry::load_vision(ckpt, &device(), &LoadOptions::default()) {
        Ok(_) => panic!("{}: loaded", ckpt.config.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_bare_file_is_checked_key_by_key_under_its_own_names() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("hf5_layouts/clip_vision_model");
    let missing = "encoder.layers.1.mlp.fc2.weight";
    let ckpt = copy_with(&src, tmp.path(), |k| k != missing, &["extra.bias"]);
    let err = vision_error(&ckpt);
    assert!(
        err.contains("1 missing, 1 unexpected"),
        "one missing and one unexpected key: {err}"
    );
    assert!(
        err.contains(&format!("missing key: {missing} ")),
        "named as stored: {err}"
    );
    assert!(err.contains("extra.bias"), "{err}");
    assert!(
        !err.contains("vision_model."),
        "no prefix the file lacks: {err}"
    );

    // SigLIP's text tower, bare.
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("hf5_layouts/siglip_text_model");
    let ckpt = copy_with(&src, tmp.path(), |k| k != "head.bias", &[]);
    let err = match registry::load_text(&ckpt, &device(), &LoadOptions::default()) {
        Ok(_) => panic!("loaded without head.bias"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("missing key: head.bias "), "{err}");
}

#[test]
fn a_projection_class_without_its_projection_is_a_missing_key() {
    // `architectures` says CLIPVisionModelWithProjection: dropping the projection is an error,
    // not a CLIPVisionModel.
    for (label, src) in layouts("clip_vision_model_projection") {
        let tmp = tempfile::tempdir().unwrap();
        let ckpt = copy_with(&src, tmp.path(), |k| k != "visual_projection.weight", &[]);
        let err = vision_error(&ckpt);
        assert!(
            err.contains("missing key: visual_projection.weight "),
            "{label}: {err}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("hf5_layouts/clip_text_model_projection");
    let ckpt = copy_with(&src, tmp.path(), |k| k != "text_projection.weight", &[]);
    let err = match ClipTextModel::load(&ckpt, &device(), &LoadOptions::default()) {
        Err(ModelError::Load(e)) => e.to_string(),
        other => panic!("expected a load error, got {:?}", other.map(|_| ())),
    };
    assert!(
        err.contains("missing key: text_projection.weight "),
        "{err}"
    );
}
