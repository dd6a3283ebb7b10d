//! Text fidelity and `embed` hardening (issue 12, items 2, 3 and 7): sentence-transformers
//! checkpoints embed through the CLI as `SentenceTransformer.encode` does; every reader of a
//! user's text file removes a leading byte-order mark and names the line of invalid UTF-8;
//! `embed` checks `--out` and its inputs before any model work, leaves no temporary file, and
//! names images by file.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::root;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("runs")
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    let text = crate::common::text(&o);
    assert!(o.status.success(), "experiments {args:?} failed:\n{text}");
    text
}

fn err(args: &[&str]) -> String {
    let o = run(args);
    let text = crate::common::text(&o);
    assert!(
        !o.status.success(),
        "experiments {args:?} should have failed:\n{text}"
    );
    text
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Names of the entries of `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn embed_checks_out_and_texts_before_resolving_the_model() {
    let d = tempfile::tempdir().unwrap();
    let texts = d.path().join("t.txt");
    std::fs::write(&texts, "red cube\n").unwrap();
    // A model that does not exist: every check below must come before it is looked up.
    let model = s(&d.path().join("no-such-model"));
    let embed = |texts: &Path, out: &Path| {
        err(&[
            "embed",
            "--model",
            &model,
            "--texts",
            &s(texts),
            "--out",
            &s(out),
        ])
    };

    let latin1 = d.path().join("latin1.txt");
    std::fs::write(&latin1, b"red cube\ncaf\xe9 sphere\n").unwrap();
    let t = embed(&latin1, &d.path().join("a.jsonl"));
    assert!(t.contains("--texts") && t.contains("latin1.txt:2:4"), "{t}");
    assert!(t.contains("not valid UTF-8"), "{t}");

    let t = embed(&texts, &d.path().join("missing/a.jsonl"));
    assert!(
        t.contains("--out") && t.contains("missing does not exist"),
        "{t}"
    );
    assert!(
        !d.path().join("missing").exists(),
        "the directory is not created"
    );

    std::fs::write(d.path().join("plainfile"), b"").unwrap();
    let t = embed(&texts, &d.path().join("plainfile/a.jsonl"));
    assert!(t.contains("plainfile is not a directory"), "{t}");
    assert!(!t.contains("os error 17"), "{t}");

    let t = embed(&texts, &d.path().join("a.txt"));
    assert!(t.contains("expected a .jsonl or .safetensors"), "{t}");

    for t in [&texts, &latin1] {
        assert!(!t.to_string_lossy().ends_with(".tmp"));
    }
    assert!(
        entries(d.path()).iter().all(|n| !n.ends_with(".tmp")),
        "{:?}",
        entries(d.path())
    );
}

#[test]
fn embed_batches_name_their_images_by_file() {
    let d = tempfile::tempdir().unwrap();
    // CLIP without center crop: a shortest-edge resize keeps the aspect ratio.
    let m = crate::common::clip_with_processor(&d.path().join("model"));
    let cfg_path = Path::new(&m).join("preprocessor_config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["do_center_crop"] = false.into();
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let (square, wide) = (d.path().join("square.png"), d.path().join("wide.png"));
    image::RgbImage::from_pixel(24, 24, image::Rgb([200, 10, 10]))
        .save(&square)
        .unwrap();
    image::RgbImage::from_pixel(48, 24, image::Rgb([10, 200, 10]))
        .save(&wide)
        .unwrap();
    let out = d.path().join("e.jsonl");
    let t = err(&[
        "embed",
        "--model",
        &m,
        "--images",
        &s(&square),
        &s(&wide),
        "--out",
        &s(&out),
    ]);
    assert!(
        t.contains("square.png") && t.contains("wide.png") && t.contains("--batch-size 1"),
        "{t}"
    );
    assert!(!t.contains("image 1"), "{t}");
    assert!(!out.exists());
    assert!(entries(d.path()).iter().all(|n| !n.ends_with(".tmp")));
}

/// The committed sentence-transformers fixture with one variant's files over it, in `dir`.
fn sentence_transformers_checkpoint(variant: &str, dir: &Path) {
    fn copy_tree(src: &Path, dst: &Path) {
        std::fs::create_dir_all(dst).unwrap();
        for e in std::fs::read_dir(src).unwrap() {
            let e = e.unwrap();
            if e.path().is_dir() {
                copy_tree(&e.path(), &dst.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
            }
        }
    }
    let base = root().join("tests/fixtures/sentence_transformers");
    std::fs::create_dir_all(dir).unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(base.join(f), dir.join(f)).unwrap();
    }
    copy_tree(&base.join("variants").join(variant), dir);
}

#[test]
fn embed_texts_of_a_sentence_transformers_model_match_its_encode() {
    let reference =
        std::fs::read(root().join("tests/fixtures/sentence_transformers/reference.safetensors"))
            .unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&reference).unwrap();
    let texts: Vec<String> =
        serde_json::from_str(&meta.metadata().as_ref().unwrap()["texts"]).unwrap();
    let st = safetensors::SafeTensors::deserialize(&reference).unwrap();
    let d = tempfile::tempdir().unwrap();
    let texts_file = d.path().join("texts.txt");
    // With a byte-order mark: it must not reach the first text.
    std::fs::write(&texts_file, format!("\u{feff}{}\n", texts.join("\n"))).unwrap();
    // cls pooling, no Normalize, do_lower_case, max_seq_length 12 < the model's 40.
    for variant in ["cls_lower", "max_legacy"] {
        let model = d.path().join(variant);
        sentence_transformers_checkpoint(variant, &model);
        let out = d.path().join(format!("{variant}.safetensors"));
        let t = ok(&[
            "embed",
            "--model",
            &s(&model),
            "--texts",
            &s(&texts_file),
            "--out",
            &s(&out),
            "--batch-size",
            "3",
        ]);
        assert!(t.contains("byte-order mark removed"), "{t}");
        let bytes = std::fs::read(&out).unwrap();
        let got = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let got = got.tensor("embeddings").unwrap();
        let want = st.tensor(&format!("{variant}.sentence_embedding")).unwrap();
        assert_eq!(got.shape(), want.shape(), "{variant}");
        let f = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        let worst = f(got.data())
            .iter()
            .zip(f(want.data()))
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 1e-4, "{variant}: max abs error {worst:e}");
    }
}

#[test]
fn saber_and_finetune_readers_remove_a_byte_order_mark_and_name_bad_utf8() {
    let d = tempfile::tempdir().unwrap();
    // `{}` passes as JSON and fails the schema: with the mark left in, line 1 is "not JSON".
    let bom = d.path().join("bom.jsonl");
    std::fs::write(&bom, "\u{feff}{}\n").unwrap();
    let read = bindscope_saber::jsonl::read_items(&bom).unwrap();
    assert_eq!(read.rejected.len(), 1);
    assert_eq!(
        (read.rejected[0].line, read.rejected[0].rule.as_str()),
        (1, "schema"),
        "{:?}",
        read.rejected
    );
    let mut seen = bindscope_tuning::import::Seen::default();
    let (_, report) = bindscope_tuning::import::import_file(&bom, &mut seen).unwrap();
    let rules: Vec<String> = report
        .rejections
        .iter()
        .map(|r| format!("{}:{}", r.line, r.rule))
        .collect();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert!(
        rules[0].starts_with("1:") && !rules[0].contains("json"),
        "{rules:?}"
    );

    let latin1 = d.path().join("latin1.jsonl");
    std::fs::write(&latin1, b"{}\n{\"id\": \"caf\xe9\"}\n").unwrap();
    let e = bindscope_saber::jsonl::read_items(&latin1).unwrap_err();
    assert!(e.to_string().contains("latin1.jsonl:2:"), "{e}");
    let e = bindscope_tuning::import::import_file(&latin1, &mut seen).unwrap_err();
    assert!(e.to_string().contains("latin1.jsonl:2:"), "{e}");
}
