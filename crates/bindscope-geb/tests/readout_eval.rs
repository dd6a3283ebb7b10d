//! Evaluation pieces of the readout: the controls are what they claim (zero is zero, the
//! shuffled control is a fixed-point-free permutation within each batch, the mismatch control
//! takes another question about the same image), manifests refuse bad items by line, and
//! batched greedy answers with injected embeddings equal the answers of each prompt alone.

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_data::lm::LmTokenizer;
use bindscope_geb::metrics::{Category, Source};
use bindscope_geb::readout::adapter::{AdapterDims, EmbeddingAdapter};
use bindscope_geb::readout::chat::ChatFormat;
use bindscope_geb::readout::eval::{
    Control, ManifestItem, answer_batch, arrange, max_new_tokens, mismatch_partners, parse_item,
    read_manifest, roll_one, shifted_rows,
};
use bindscope_geb::readout::model::GenerativeReadout;
use bindscope_models::generate::chat::ChatTemplate;
use bindscope_models::llama::LlamaForCausalLM;
use burn::prelude::*;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/geb_readout")
}

fn item(id: &str, group: &str, question: &str) -> ManifestItem {
    ManifestItem {
        id: id.into(),
        source: Source::Mme,
        category: Category::Natural,
        question: question.into(),
        answers: vec!["Yes".into()],
        image: format!("{group}.png"),
        image_group: group.into(),
        sha256: "0".repeat(64),
        options: None,
        dataset: None,
    }
}

#[test]
fn roll_is_torch_roll_by_one_and_moves_every_row() {
    assert_eq!(roll_one(4), vec![3, 0, 1, 2]);
    assert_eq!(roll_one(1), vec![0]);
    for n in 2..40 {
        let r = roll_one(n);
        let mut s = r.clone();
        s.sort_unstable();
        assert_eq!(s, (0..n).collect::<Vec<_>>(), "a permutation");
        assert!(
            r.iter().enumerate().all(|(i, &j)| i != j),
            "no fixed point at {n}"
        );
    }
}

#[test]
fn controls_arrange_the_embeddings_they_claim() {
    let d = 3;
    let rows: Vec<f32> = (0..5 * d).map(|x| x as f32 + 1.0).collect();
    let batch = [4, 1, 2];
    let items: Vec<ManifestItem> = [
        ("a", "q1"),
        ("b", "q1"),
        ("a", "q2"),
        ("c", "q1"),
        ("b", "q2"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (g, q))| item(&i.to_string(), g, q))
    .collect();
    let partners = mismatch_partners(&items);
    assert_eq!(partners, vec![Some(2), Some(4), Some(0), None, Some(1)]);
    let m = arrange(Control::Matched, 0, None, &rows, d, &batch, &partners).unwrap();
    assert_eq!(m, [13.0, 14.0, 15.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    let z = arrange(Control::Zero, 0, None, &rows, d, &batch, &partners).unwrap();
    assert!(z.iter().all(|&x| x == 0.0) && z.len() == 9);
    let s = arrange(Control::Shuffled, 0, None, &rows, d, &batch, &partners).unwrap();
    // Row i takes row i − 1 of the batch: items 2, 4, 1.
    assert_eq!(s, [7.0, 8.0, 9.0, 13.0, 14.0, 15.0, 4.0, 5.0, 6.0]);
    // Mismatch: the question slot (1) takes the partner's row, the image slot (0) its own.
    let q = arrange(Control::Mismatch, 1, Some(1), &rows, d, &batch, &partners).unwrap();
    assert_eq!(q, [4.0, 5.0, 6.0, 13.0, 14.0, 15.0, 1.0, 2.0, 3.0]);
    let i = arrange(Control::Mismatch, 0, Some(1), &rows, d, &batch, &partners).unwrap();
    assert_eq!(i, m);
    assert!(arrange(Control::Mismatch, 1, Some(1), &rows, d, &[3], &partners).is_err());
    // Items 0 and 2 share image a: in one batch of [0, 2, 1] the roll gives item 0 item 1's
    // (group b), item 2 item 0's (same group a), item 1 item 2's.
    let trio = vec![items[0].clone(), items[2].clone(), items[1].clone()];
    assert_eq!(shifted_rows(&trio, 3), 1);
}

#[test]
fn generation_budgets_are_lmms_eval_s() {
    assert_eq!(max_new_tokens(Source::Mme), 16);
    assert_eq!(max_new_tokens(Source::Chartqa), 16);
    assert_eq!(max_new_tokens(Source::Ocrbench), 128);
    assert_eq!(max_new_tokens(Source::Docvqa), 32);
    assert_eq!(max_new_tokens(Source::Cvbench), 1024);
}

#[test]
fn manifests_refuse_bad_items_by_line() {
    let good = r#"{"id":"1","source":"mme","question":"Is it red?","answers":["Yes"],"image":"a.png","image_group":"a","sha256":"ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"}"#;
    let it = parse_item(good).unwrap();
    assert_eq!(it.category, Category::Natural);
    assert_eq!(&it.sha256[..6], "abcdef");
    for (line, needle) in [
        (
            good.replace(r#""source":"mme""#, r#""source":"vqav2""#),
            "unknown source",
        ),
        (
            good.replace(r#","image_group":"a""#, ""),
            "no `image_group`",
        ),
        (good.replace(r#"["Yes"]"#, r#"["Maybe"]"#), "not Yes or No"),
        (
            good.replace(r#""sha256":"ABCDEF"#, r#""sha256":"XYZ"#),
            "64 hex digits",
        ),
        (good.replace(r#"["Yes"]"#, "[]"), "`answers` is empty"),
        ("[1]".to_string(), "expected a JSON object"),
    ] {
        let e = parse_item(&line).unwrap_err();
        assert!(e.contains(needle), "{e} (wanted {needle})");
    }
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("test.jsonl");
    std::fs::write(&p, format!("{good}\n\n{good}\n{{\n")).unwrap();
    let e = read_manifest(&p).unwrap_err().to_string();
    assert!(
        e.contains("line 3: duplicate id \"1\" (first on line 1)"),
        "{e}"
    );
    assert!(e.contains("line 4: not valid JSON"), "{e}");
    assert!(e.contains("test.jsonl"), "{e}");
    std::fs::write(&p, format!("{good}\n")).unwrap();
    assert_eq!(read_manifest(&p).unwrap().len(), 1);
}

#[test]
fn batched_answers_equal_each_prompt_alone() {
    let device = bindscope_core::device::test_device();
    let tok = LmTokenizer::from_file(dir().join("tokenizer.json")).unwrap();
    let fmt = ChatFormat::new("t", &tok, ChatTemplate::from_dir(&dir()).unwrap(), &[2]).unwrap();
    let ckpt = Checkpoint::from_dir("geb_readout", &dir()).unwrap();
    let decoder = LlamaForCausalLM::load_family(&ckpt, &device, &LoadOptions::default()).unwrap();
    let image = EmbeddingAdapter::load(
        &dir().join("adapter_image.safetensors"),
        AdapterDims {
            embed: 24,
            hidden: 48,
            decoder: 64,
        },
        &device,
    )
    .unwrap();
    let readout = GenerativeReadout {
        decoder,
        adapters: vec![image],
    };
    let questions = [
        "How many red circles are there?",
        "Is the square blue?",
        "What word is written here?",
    ];
    let prompts: Vec<_> = questions
        .iter()
        .enumerate()
        .map(|(i, q)| fmt.prompt(&i.to_string(), q, 1).unwrap())
        .collect();
    assert_ne!(
        prompts[0].input_ids.len(),
        prompts[1].input_ids.len(),
        "padding is exercised"
    );
    let e: Vec<f32> = (0..3 * 24)
        .map(|x| ((x * 37 % 11) as f32 - 5.0) / 3.0)
        .collect();
    let t = |rows: &[f32], n: usize| Tensor::<1>::from_floats(rows, &device).reshape([n, 24]);
    let budgets = [6, 9, 4];
    let refs: Vec<_> = prompts.iter().collect();
    let together = answer_batch(&readout, &fmt, &refs, &[t(&e, 3)], &budgets, 2, &device).unwrap();
    for i in 0..3 {
        let alone = answer_batch(
            &readout,
            &fmt,
            &[&prompts[i]],
            &[t(&e[i * 24..(i + 1) * 24], 1)],
            &budgets[i..=i],
            2,
            &device,
        )
        .unwrap();
        assert_eq!(alone[0], together[i], "prompt {i}");
    }
    // The embedding reaches the answer: another embedding changes at least one of them.
    let other: Vec<f32> = e.iter().map(|x| -x * 3.0).collect();
    let changed =
        answer_batch(&readout, &fmt, &refs, &[t(&other, 3)], &budgets, 2, &device).unwrap();
    assert_ne!(changed, together);
}

#[test]
fn embedding_files_written_by_python_are_read_and_checked() {
    use bindscope_geb::readout::embeddings::{EmbeddingFile, question_key};
    let f = EmbeddingFile::read(&dir().join("embeddings_py.safetensors")).unwrap();
    assert_eq!(f.ids, ["img-a", "img-b", "ünïcode"]);
    assert_eq!(f.dim, 4);
    assert_eq!(
        f.lookup(&["ünïcode", "img-a"], "f").unwrap(),
        [2.0, 2.25, 2.5, 2.75, 0.0, 0.25, 0.5, 0.75]
    );
    let e = f
        .lookup(&["img-a", "nope", "gone"], "emb.safetensors")
        .unwrap_err();
    assert!(
        e.contains("emb.safetensors: no embedding for 2 of the 3 ids"),
        "{e}"
    );
    assert!(e.contains("\"nope\", \"gone\""), "{e}");
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("e.safetensors");
    f.write(&p).unwrap();
    assert_eq!(EmbeddingFile::read(&p).unwrap(), f);
    let mut dup = f.clone();
    dup.ids[2] = "img-a".into();
    dup.write(&p).unwrap();
    let e = EmbeddingFile::read(&p).unwrap_err();
    assert!(e.contains("\"img-a\" is on rows 0 and 2"), "{e}");
    let mut nan = f.clone();
    nan.rows[5] = f32::NAN;
    nan.write(&p).unwrap();
    assert!(
        EmbeddingFile::read(&p)
            .unwrap_err()
            .contains("\"img-b\" holds a non-finite")
    );
    assert_eq!(
        question_key("img", "Is it red?"),
        question_key("img", "Is it red?")
    );
    assert_ne!(
        question_key("img", "Is it red?"),
        question_key("img", "Is it blue?")
    );
    // hashlib.sha256(b"").hexdigest()[:16]
    assert_eq!(question_key("img", ""), "img#e3b0c44298fc1c14");
}
