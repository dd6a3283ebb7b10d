//! sentence-transformers models embed as `SentenceTransformer(dir).encode` does: the references
//! in `tests/fixtures/sentence_transformers/` come from sentence-transformers itself
//! (`tests/fixtures/gen/sentence_transformers.py`; versions in its `meta.json`).
//!
//! One tiny random BERT checkpoint, and per variant (`variants/<name>/`) the files of one
//! sentence-transformers pipeline over it: every pooling mode in the current and the legacy
//! configuration form, two modes concatenated, `Normalize` on and off, `max_seq_length`
//! truncation below the model's 40 positions, `do_lower_case` over a tokenizer that does not
//! lowercase, and the files as the current release re-saves them. Each variant is assembled in
//! a scratch directory and read through the entry points every study uses
//! (`Tokenizer::from_checkpoint`, `registry::load_text`).

use crate::common::fixture;
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::text::Tokenizer;
use bindscope_models::{ModelError, registry};
use std::path::Path;

/// Max abs error against sentence-transformers (the project's parity tolerance).
const TOL: f32 = 1e-4;

/// Every variant under `variants/`, each with references `<name>.*`.
const VARIANTS: [&str; 9] = [
    "mean_normalize",
    "cls_lower",
    "max_legacy",
    "mean_sqrt_len_legacy",
    "weightedmean",
    "lasttoken",
    "cls_mean",
    "legacy_cls_mean",
    "resaved",
];

struct Reference {
    bytes: Vec<u8>,
}

impl Reference {
    fn load() -> Self {
        let path = fixture("sentence_transformers").join("reference.safetensors");
        Self {
            bytes: std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        }
    }

    fn st(&self) -> safetensors::SafeTensors<'_> {
        safetensors::SafeTensors::deserialize(&self.bytes).expect("reference.safetensors")
    }

    fn texts(&self) -> Vec<String> {
        let (_, meta) = safetensors::SafeTensors::read_metadata(&self.bytes).unwrap();
        let texts = meta.metadata().as_ref().unwrap()["texts"].clone();
        serde_json::from_str(&texts).unwrap()
    }

    fn ids(&self, key: &str) -> Vec<Vec<i64>> {
        let st = self.st();
        let t = st
            .tensor(key)
            .unwrap_or_else(|_| panic!("no reference '{key}'"));
        assert_eq!(t.dtype(), safetensors::Dtype::I64, "{key}");
        let flat: Vec<i64> = t
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        flat.chunks(t.shape()[1]).map(<[i64]>::to_vec).collect()
    }

    fn floats(&self, key: &str) -> (Vec<usize>, Vec<f32>) {
        let st = self.st();
        let t = st
            .tensor(key)
            .unwrap_or_else(|_| panic!("no reference '{key}'"));
        assert_eq!(t.dtype(), safetensors::Dtype::F32, "{key}");
        let v = t
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        (t.shape().to_vec(), v)
    }
}

fn copy_tree(src: &Path, dst: &Path) {
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&to).unwrap();
            copy_tree(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), to).unwrap();
        }
    }
}

/// The base checkpoint with `variant`'s files laid over it (`None`: the base alone), in a
/// scratch directory.
fn assemble(variant: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let base = fixture("sentence_transformers");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(base.join(f), dir.path().join(f)).unwrap();
    }
    if let Some(v) = variant {
        copy_tree(&base.join("variants").join(v), dir.path());
    }
    dir
}

fn checkpoint(dir: &Path) -> Checkpoint {
    Checkpoint::from_dir(&dir.display().to_string(), dir).expect("checkpoint")
}

/// Tokenizes and embeds the reference texts as `embed`, `saber` and `finetune` do and compares
/// with the references `<name>.*`.
fn check(dir: &Path, name: &str, reference: &Reference) {
    let device = crate::common::device();
    let ckpt = checkpoint(dir);
    let texts = reference.texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let tok = Tokenizer::from_checkpoint(&ckpt).unwrap_or_else(|e| panic!("{name}: {e}"));
    let enc = tok.encode_batch(&refs).unwrap();
    assert_eq!(
        enc.input_ids,
        reference.ids(&format!("{name}.input_ids")),
        "{name}: input_ids differ from sentence-transformers"
    );
    assert_eq!(
        enc.attention_mask,
        reference.ids(&format!("{name}.attention_mask")),
        "{name}: attention_mask differs from sentence-transformers"
    );
    let model = registry::load_text(&ckpt, &device, &LoadOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let (ids, mask) = enc.tensors(&device);
    let got = model.embed_text(ids, mask);
    let (shape, want) = reference.floats(&format!("{name}.sentence_embedding"));
    assert_eq!(got.dims().to_vec(), shape, "{name}: embedding shape");
    assert_eq!(model.info().embed_dim, shape[1], "{name}: info().embed_dim");
    let got = bindscope_core::device::to_host_f32(got).unwrap();
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        got.iter().all(|x| x.is_finite()),
        "{name}: non-finite embedding"
    );
    assert!(
        worst <= TOL,
        "{name}: sentence_embedding max abs error {worst:e} > {TOL:e}"
    );
}

#[test]
fn every_pipeline_embeds_as_sentence_transformers() {
    let reference = Reference::load();
    let mut on_disk: Vec<String> = std::fs::read_dir(fixture("sentence_transformers/variants"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = VARIANTS.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "every committed variant is tested");
    for name in VARIANTS {
        let dir = assemble(Some(name));
        check(dir.path(), name, &reference);
    }
}

#[test]
fn without_sentence_transformers_files_the_transformers_defaults_hold() {
    // max_position_embeddings (40) truncation, mean pooling, L2 normalization.
    let dir = assemble(None);
    check(dir.path(), "default", &Reference::load());
}

#[test]
fn the_readings_that_matter_change_the_numbers() {
    // Guard against a fixture in which the settings happen not to matter.
    let r = Reference::load();
    let ids = |v: &str| r.ids(&format!("{v}.input_ids"));
    let emb = |v: &str| r.floats(&format!("{v}.sentence_embedding")).1;
    assert_ne!(
        ids("mean_normalize"),
        ids("default"),
        "max_seq_length truncates"
    );
    assert_ne!(ids("cls_lower"), ids("mean_normalize"), "do_lower_case");
    let norm = |e: &[f32], d: usize| -> Vec<f32> {
        e.chunks(d)
            .map(|row| row.iter().map(|x| x * x).sum::<f32>().sqrt())
            .collect()
    };
    assert!(
        norm(&emb("max_legacy"), 32)
            .iter()
            .all(|n| (n - 1.0).abs() > 0.1)
    );
    assert!(
        norm(&emb("lasttoken"), 32)
            .iter()
            .all(|n| (n - 1.0).abs() < 1e-5)
    );
}

#[test]
fn unsupported_pipelines_are_refused_by_every_reader() {
    let device = crate::common::device();
    let dir = assemble(Some("mean_normalize"));
    std::fs::write(
        dir.path().join("modules.json"),
        r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#,
    )
    .unwrap();
    let ckpt = checkpoint(dir.path());
    let e = Tokenizer::from_checkpoint(&ckpt).unwrap_err().to_string();
    assert!(
        e.contains("modules.json") && e.contains("sentence_transformers.models.Dense"),
        "{e}"
    );
    let e = registry::load_text(&ckpt, &device, &LoadOptions::default())
        .err()
        .expect("a Dense module is refused")
        .to_string();
    assert!(e.contains("sentence_transformers.models.Dense"), "{e}");

    // A sentence-transformers pipeline over a text tower other than BERT.
    let clip = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture("clip").join(f), clip.path().join(f)).unwrap();
    }
    copy_tree(
        &fixture("sentence_transformers/variants/mean_normalize"),
        clip.path(),
    );
    let err = registry::load_text(&checkpoint(clip.path()), &device, &LoadOptions::default())
        .err()
        .expect("refused");
    assert!(matches!(err, ModelError::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("modules.json"), "{err}");
}
