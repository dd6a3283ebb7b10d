//! Load errors in the checkpoint's terms: broken copies of the tiny fixtures (a key deleted, a
//! weight stored transposed, an int64 tensor, an extra bf16 tensor) are refused with one error
//! that names every key as the file stores it (or would store it), the file's shape in the
//! file's layout (`[out, in]` for a Linear weight) and dtypes in words — not burn's module paths
//! (`layernorm.gamma`), burn's transposed Linear layout or Rust debug output.

use crate::common::{checkpoint, device, fixture};
use bindscope_core::LoadOptions;
use bindscope_models::bert::BertModel;
use bindscope_models::dinov2::Dinov2Model;
use bindscope_models::registry::load_vision;
use safetensors::Dtype;
use std::path::Path;

/// One tensor of a broken copy: key, dtype, shape, little-endian bytes.
type Raw = (String, Dtype, Vec<usize>, Vec<u8>);

/// The tensors of `tests/fixtures/<name>/model.safetensors`.
fn tensors(name: &str) -> Vec<Raw> {
    let bytes = std::fs::read(fixture(name).join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<Raw> = st
        .tensors()
        .into_iter()
        .map(|(k, t)| (k, t.dtype(), t.shape().to_vec(), t.data().to_vec()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A scratch checkpoint: the JSON files of fixture `name` and `tensors` as its weights.
fn broken(name: &str, tensors: &[Raw]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture(name);
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    write(&dir.path().join("model.safetensors"), tensors);
    dir
}

fn write(path: &Path, tensors: &[Raw]) {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(k, d, s, b)| {
            (
                k.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn position(t: &[Raw], key: &str) -> usize {
    t.iter()
        .position(|x| x.0 == key)
        .unwrap_or_else(|| panic!("fixture has no {key}"))
}

/// `t[key]` stored transposed (`[r, c]` → `[c, r]`, data transposed too).
fn transpose(t: &mut [Raw], key: &str) {
    let i = position(t, key);
    let (_, dtype, shape, data) = &mut t[i];
    assert_eq!(*dtype, Dtype::F32);
    let (r, c) = (shape[0], shape[1]);
    let v: Vec<[u8; 4]> = data
        .chunks_exact(4)
        .map(|x| x.try_into().unwrap())
        .collect();
    let mut out = Vec::with_capacity(data.len());
    for j in 0..c {
        for k in 0..r {
            out.extend_from_slice(&v[k * c + j]);
        }
    }
    *shape = vec![c, r];
    *data = out;
}

/// `t[key]` stored as int64 (its values truncated).
fn to_int64(t: &mut [Raw], key: &str) {
    let i = position(t, key);
    let (_, dtype, _, data) = &mut t[i];
    *data = data
        .chunks_exact(4)
        .flat_map(|x| (f32::from_le_bytes(x.try_into().unwrap()) as i64).to_le_bytes())
        .collect();
    *dtype = Dtype::I64;
}

fn remove(t: &mut Vec<Raw>, key: &str) {
    let i = position(t, key);
    t.remove(i);
}

fn dinov2_error(t: &[Raw]) -> String {
    let dir = broken("dinov2", t);
    Dinov2Model::load(&checkpoint(dir.path()), &device(), &LoadOptions::default())
        .expect_err("a broken checkpoint is refused")
        .to_string()
}

/// No trace of burn's naming or debug output.
fn assert_in_checkpoint_terms(err: &str) {
    for burn in ["gamma", "beta", "Struct:", "DType", "{"] {
        assert!(!err.contains(burn), "burn's '{burn}' in: {err}");
    }
}

#[test]
fn a_missing_layernorm_weight_is_named_as_the_file_stores_it() {
    let mut t = tensors("dinov2");
    let [d] = t[position(&t, "layernorm.weight")].2[..] else {
        panic!("layernorm.weight is rank 1")
    };
    remove(&mut t, "layernorm.weight");
    let err = dinov2_error(&t);
    assert!(
        err.contains(&format!("missing key: layernorm.weight (float [{d}])")),
        "{err}"
    );
    assert!(
        err.contains("1 missing, 0 unexpected, 0 mismatched"),
        "{err}"
    );
    assert_in_checkpoint_terms(&err);
}

#[test]
fn a_transposed_linear_weight_is_reported_in_the_files_layout() {
    let mut t = tensors("dinov2");
    let key = "encoder.layer.0.mlp.fc1.weight";
    let [out, inp] = t[position(&t, key)].2[..] else {
        panic!("{key} is rank 2")
    };
    transpose(&mut t, key);
    let err = dinov2_error(&t);
    // The file stores [in, out]; the model (as torch) expects [out, in].
    assert!(
        err.contains(&format!(
            "shape mismatch for {key}: the file stores [{inp}, {out}], the model expects \
             [{out}, {inp}] (the transpose)"
        )),
        "{err}"
    );
    assert_in_checkpoint_terms(&err);
}

#[test]
fn an_int64_tensor_is_reported_with_its_dtype_in_words() {
    let mut t = tensors("dinov2");
    let key = "encoder.layer.1.norm2.bias";
    let shape = t[position(&t, key)].2.clone();
    to_int64(&mut t, key);
    let err = dinov2_error(&t);
    assert!(
        err.contains(&format!(
            "wrong dtype for {key}: the file stores int64 {shape:?}, the model needs a \
             floating-point tensor"
        )),
        "{err}"
    );
    assert_in_checkpoint_terms(&err);
}

#[test]
fn every_problem_comes_in_one_error() {
    let mut t = tensors("dinov2");
    remove(&mut t, "layernorm.weight");
    transpose(&mut t, "encoder.layer.0.mlp.fc1.weight");
    to_int64(&mut t, "encoder.layer.1.norm2.bias");
    // An extra tensor, in bfloat16: its dtype in words.
    t.push(("extra.scale".into(), Dtype::BF16, vec![2, 3], vec![0; 12]));
    let err = dinov2_error(&t);
    assert!(
        err.contains("1 missing, 1 unexpected, 2 mismatched"),
        "{err}"
    );
    assert!(err.contains("missing key: layernorm.weight"), "{err}");
    assert!(
        err.contains("unexpected key: extra.scale [2, 3] bfloat16"),
        "{err}"
    );
    assert!(
        err.contains("shape mismatch for encoder.layer.0.mlp.fc1.weight"),
        "{err}"
    );
    assert!(
        err.contains("wrong dtype for encoder.layer.1.norm2.bias"),
        "{err}"
    );
    assert!(
        err.contains("model.safetensors"),
        "the file is named: {err}"
    );
    assert_in_checkpoint_terms(&err);
}

#[test]
fn a_missing_query_bias_is_one_missing_key_not_its_siblings_unexpected() {
    // EVA reads whether the attention has biases from block 0: the value bias alone says so, so
    // a deleted `q_proj.bias` (or fused `q_bias`) is the one missing key.
    for (name, key) in [
        ("eva", "blocks.0.attn.q_proj.bias"),
        ("eva/layer_scale_fused", "blocks.0.attn.q_bias"),
    ] {
        let mut t = tensors(name);
        remove(&mut t, key);
        let dir = broken(name, &t);
        let err = load_vision(&checkpoint(dir.path()), &device(), &LoadOptions::default())
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains(&format!("missing key: {key} ")),
            "{name}: {err}"
        );
        assert!(
            err.contains("1 missing, 0 unexpected, 0 mismatched"),
            "{name}: {err}"
        );
        assert_in_checkpoint_terms(&err);
    }
}

#[test]
fn missing_keys_of_a_remapped_checkpoint_carry_the_files_names() {
    // BERT's keys are remapped onto the module (`LayerNorm` → `layer_norm`,
    // `attention.self` → `attention.self_attn`); a missing key is named as the file has it.
    let mut t = tensors("bert");
    let ln = "encoder.layer.1.attention.output.LayerNorm.weight";
    let q = "encoder.layer.0.attention.self.query.weight";
    remove(&mut t, ln);
    remove(&mut t, q);
    let dir = broken("bert", &t);
    let err = BertModel::load(&checkpoint(dir.path()), &device(), &LoadOptions::default())
        .expect_err("refused")
        .to_string();
    assert!(err.contains(&format!("missing key: {ln} ")), "{err}");
    assert!(err.contains(&format!("missing key: {q} ")), "{err}");
    assert!(
        !err.contains("layer_norm") && !err.contains("self_attn"),
        "{err}"
    );
    assert_in_checkpoint_terms(&err);

    // A `BertForMaskedLM` checkpoint: the `bert.` prefix stripped on load is put back.
    let mlm = "mlm";
    let mut t = tensors(&format!("bert/{mlm}"));
    let key = "bert.encoder.layer.1.attention.self.key.weight";
    remove(&mut t, key);
    let dir = broken(&format!("bert/{mlm}"), &t);
    let opts = LoadOptions {
        benign_unused: vec![bindscope_models::bert::TASK_HEADS.into()],
        ..Default::default()
    };
    let err = BertModel::load(&checkpoint(dir.path()), &device(), &opts)
        .expect_err("refused")
        .to_string();
    assert!(err.contains(&format!("missing key: {key} ")), "{err}");
}

#[test]
fn a_shard_names_its_file() {
    // The dinov2 fixture split in two shards, one weight transposed in the second.
    let mut t = tensors("dinov2");
    let key = "encoder.layer.1.mlp.fc2.weight";
    transpose(&mut t, key);
    let dir = broken("dinov2", &[]);
    let half = t.len() / 2;
    let second = t.split_off(half);
    assert!(second.iter().any(|x| x.0 == key));
    let names = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    write(&dir.path().join(names[0]), &t);
    write(&dir.path().join(names[1]), &second);
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let map: serde_json::Map<String, serde_json::Value> = t
        .iter()
        .map(|x| (x.0.clone(), names[0].into()))
        .chain(second.iter().map(|x| (x.0.clone(), names[1].into())))
        .collect();
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        serde_json::json!({"metadata": {}, "weight_map": map}).to_string(),
    )
    .unwrap();
    let err = load_vision(&checkpoint(dir.path()), &device(), &LoadOptions::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains(&format!("shape mismatch for {key} (in ")) && err.contains(names[1]),
        "{err}"
    );
}
