//! The synthetic mini-GEB generator (`bindscope_geb::synth`): determinism, unique and disjoint
//! images, the manifest and LLaVA formats, balance, answer forms scored by the crate's own
//! scorers, and the refused inputs.

use bindscope_geb::metrics::{self, Category, Item, Source};
use bindscope_geb::synth::{self, ManifestItem, SynthConfig, SynthError, SynthSummary};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

fn small() -> SynthConfig {
    SynthConfig {
        conversations: 12,
        items: 9,
        dev_items: 6,
        seed: 7,
        image_size: 96,
    }
}

/// Generates `cfg` into a fresh temporary directory; returns it and the output path.
fn run(cfg: &SynthConfig) -> (tempfile::TempDir, PathBuf, SynthSummary) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("mini-geb");
    let summary = synth::generate(cfg, &out).unwrap();
    (tmp, out, summary)
}

/// Every file under `root`, by relative path.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The lines of a manifest, as raw objects and as items.
fn manifest(path: &Path) -> Vec<(serde_json::Map<String, Value>, ManifestItem)> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.ends_with('\n'), "{}", path.display());
    text.lines()
        .map(|line| {
            let Value::Object(raw) = serde_json::from_str::<Value>(line).unwrap() else {
                panic!("not an object: {line}");
            };
            (raw, serde_json::from_str::<ManifestItem>(line).unwrap())
        })
        .collect()
}

#[test]
fn same_config_gives_identical_files_and_seeds_differ() {
    let cfg = small();
    let (_a, out_a, sum_a) = run(&cfg);
    let (_b, out_b, sum_b) = run(&cfg);
    let (fa, fb) = (files(&out_a), files(&out_b));
    assert_eq!(sum_a, sum_b);
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    for (name, bytes) in &fa {
        assert!(bytes == &fb[name], "{name} differs between two runs");
    }
    // 12 + test and dev images + four files.
    let pngs = fa.keys().filter(|k| k.ends_with(".png")).count();
    assert_eq!(
        fa.len(),
        pngs + 4,
        "{:?}",
        fa.keys()
            .filter(|k| !k.ends_with(".png"))
            .collect::<Vec<_>>()
    );
    for f in ["train.json", "dev.jsonl", "test.jsonl", "synth.json"] {
        assert!(fa.contains_key(f), "{f} missing");
    }

    let other = SynthConfig { seed: 8, ..cfg };
    let (_c, out_c, _) = run(&other);
    let fc = files(&out_c);
    assert_ne!(fa["test.jsonl"], fc["test.jsonl"]);
    assert_ne!(fa["images/train/000000.png"], fc["images/train/000000.png"]);
}

#[test]
fn test_split_does_not_depend_on_the_other_counts() {
    let (_a, out_a, _) = run(&small());
    let (_b, out_b, _) = run(&SynthConfig {
        conversations: 15,
        dev_items: 9,
        ..small()
    });
    let (fa, fb) = (files(&out_a), files(&out_b));
    assert_eq!(fa["test.jsonl"], fb["test.jsonl"]);
    for (name, bytes) in fa.iter().filter(|(k, _)| k.starts_with("images/test/")) {
        assert!(bytes == &fb[name], "{name}");
    }
    // The first training images are the same too; the dev split grew at its end.
    assert_eq!(fa["images/train/000011.png"], fb["images/train/000011.png"]);
    assert_ne!(fa["dev.jsonl"], fb["dev.jsonl"]);
}

#[test]
fn images_are_unique_disjoint_rgb_and_all_referenced() {
    let cfg = small();
    let (_t, out, summary) = run(&cfg);
    let all = files(&out);
    let mut file_hashes = HashSet::new();
    let mut pixel_hashes = HashSet::new();
    let mut per_split: HashMap<String, BTreeSet<String>> = HashMap::new();
    for (name, bytes) in all.iter().filter(|(k, _)| k.ends_with(".png")) {
        assert!(file_hashes.insert(hex(&Sha256::digest(bytes))), "{name}");
        let img = image::load_from_memory(bytes).unwrap();
        assert_eq!(img.color(), image::ColorType::Rgb8, "{name}");
        assert_eq!((img.width(), img.height()), (96, 96), "{name}");
        assert!(
            pixel_hashes.insert(hex(&Sha256::digest(img.as_bytes()))),
            "{name} repeats another image's pixels"
        );
        let rel = name.strip_prefix("images/").unwrap();
        let (split, file) = rel.split_once('/').unwrap();
        assert!(
            file.len() == 10
                && file.ends_with(".png")
                && file[..6].bytes().all(|b| b.is_ascii_digit()),
            "{name}"
        );
        per_split
            .entry(split.to_string())
            .or_default()
            .insert(rel.to_string());
    }
    let mut splits: Vec<&String> = per_split.keys().collect();
    splits.sort();
    assert_eq!(splits, ["dev", "test", "train"]);
    assert_eq!(per_split["train"].len(), cfg.conversations);
    assert_eq!(per_split["test"].len(), summary.test.images);
    assert_eq!(per_split["dev"].len(), summary.dev.images);

    // Every image is referenced by its own split and only there.
    for split in ["dev", "test"] {
        let items = manifest(&out.join(format!("{split}.jsonl")));
        let used: BTreeSet<String> = items.iter().map(|(_, it)| it.image.clone()).collect();
        assert_eq!(used, per_split[split], "{split}");
    }
    let train: Vec<Value> =
        serde_json::from_slice(&std::fs::read(out.join("train.json")).unwrap()).unwrap();
    let used: BTreeSet<String> = train
        .iter()
        .map(|r| r["image"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(used.len(), train.len(), "a training image is used twice");
    assert_eq!(used, per_split["train"]);
}

#[test]
fn manifests_have_every_field_and_matching_hashes() {
    let (_t, out, _) = run(&small());
    for split in ["dev", "test"] {
        let items = manifest(&out.join(format!("{split}.jsonl")));
        let mut ids = HashSet::new();
        let mut group_of_image: HashMap<String, String> = HashMap::new();
        for (raw, it) in &items {
            for key in [
                "id",
                "source",
                "category",
                "question",
                "answers",
                "image",
                "image_group",
                "sha256",
            ] {
                assert!(raw.contains_key(key), "{split} {}: no `{key}`", it.id);
            }
            assert_eq!(
                raw.contains_key("options"),
                it.source == Source::Cvbench,
                "{}",
                it.id
            );
            assert!(ids.insert(it.id.clone()), "repeated id {}", it.id);
            assert!(
                it.id.starts_with(&format!("{}-", it.image_group)),
                "{}",
                it.id
            );
            assert!(it.image.starts_with(&format!("{split}/")), "{}", it.image);
            assert!(
                it.image_group.starts_with(&format!("{split}-")),
                "{}",
                it.id
            );
            // One group per image and one image per group.
            let g = group_of_image
                .entry(it.image.clone())
                .or_insert_with(|| it.image_group.clone());
            assert_eq!(g, &it.image_group);
            let bytes = std::fs::read(out.join("images").join(&it.image)).unwrap();
            assert_eq!(hex(&Sha256::digest(&bytes)), it.sha256, "{}", it.id);
            assert_eq!(it.answers.len(), 1, "{}", it.id);
            let allowed: &[Source] = match it.category {
                Category::Natural => &[Source::Mme, Source::Cvbench],
                Category::SceneText => &[Source::Ocrbench, Source::Cvbench, Source::Chartqa],
                Category::Document => &[Source::Chartqa, Source::Cvbench],
            };
            assert!(allowed.contains(&it.source), "{}: {:?}", it.id, it.source);
        }
        let groups: HashSet<&String> = group_of_image.values().collect();
        assert_eq!(
            groups.len(),
            group_of_image.len(),
            "{split}: a group spans images"
        );
    }
}

#[test]
fn training_conversations_are_llava() {
    let (_t, out, summary) = run(&small());
    let path = out.join("train.json");
    let raw: Vec<Value> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(raw.len(), 12);
    let mut turns = 0;
    for (i, r) in raw.iter().enumerate() {
        assert_eq!(r["id"], format!("train-{i:06}"));
        assert_eq!(r["image"], format!("train/{i:06}.png"));
        let conv = r["conversations"].as_array().unwrap();
        assert!(
            conv.len() % 2 == 0 && (4..=8).contains(&conv.len()),
            "{}: {} messages",
            r["id"],
            conv.len()
        );
        let mut prompts = HashSet::new();
        for (k, m) in conv.iter().enumerate() {
            let from = m["from"].as_str().unwrap();
            let value = m["value"].as_str().unwrap();
            assert_eq!(
                from,
                if k % 2 == 0 { "human" } else { "gpt" },
                "{}",
                r["id"]
            );
            assert!(!value.trim().is_empty());
            if k == 0 {
                assert!(value.starts_with("<image>\n"), "{value:?}");
                assert_eq!(value.matches("<image>").count(), 1, "{value:?}");
            } else {
                assert!(!value.contains("<image>"), "{value:?}");
            }
            if k % 2 == 0 {
                assert!(
                    prompts.insert(value.trim_start_matches("<image>\n")),
                    "repeated {value:?}"
                );
            }
        }
        // Answers in their scorer's form.
        for pair in conv.chunks(2) {
            let q = pair[0]["value"].as_str().unwrap();
            let a = pair[1]["value"].as_str().unwrap();
            if q.ends_with(metrics_suffix::MME) {
                assert!(a == "Yes" || a == "No", "{q:?} → {a:?}");
            } else if q.ends_with(metrics_suffix::CVBENCH) {
                assert!(
                    a.len() == 1 && q.contains(&format!("\n({a}) ")),
                    "{q:?} → {a:?}"
                );
            } else if q.ends_with(metrics_suffix::CHARTQA) {
                assert!(a.parse::<u32>().is_ok(), "{q:?} → {a:?}");
            } else {
                assert!(
                    q.contains("written in the image?") && !a.is_empty(),
                    "{q:?}"
                );
            }
        }
        turns += conv.len() / 2;
    }
    assert_eq!(summary.train.turns, turns);

    // The readout's own reader takes the file.
    let convs = bindscope_geb::readout::conversation::read_llava(&path).unwrap();
    assert_eq!(convs.len(), 12);
    assert_eq!(
        convs[0].turns.len() * 2,
        raw[0]["conversations"].as_array().unwrap().len()
    );
}

/// The prompt endings of the sources with a fixed instruction.
mod metrics_suffix {
    pub const MME: &str = " Please answer yes or no.";
    pub const CVBENCH: &str = "\nAnswer with the option's letter from the given choices directly.";
    pub const CHARTQA: &str = "\nAnswer the question using a single word or phrase.";
}

#[test]
fn categories_are_balanced_and_counted() {
    let (_t, out, summary) = run(&small());
    let written: SynthSummary =
        serde_json::from_slice(&std::fs::read(out.join("synth.json")).unwrap()).unwrap();
    assert_eq!(written, summary);
    assert_eq!(written.config, small());
    for (split, n, counts) in [("test", 9, &summary.test), ("dev", 6, &summary.dev)] {
        let items = manifest(&out.join(format!("{split}.jsonl")));
        assert_eq!(items.len(), n);
        assert_eq!(counts.items, n);
        let mut by_cat: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_src: BTreeMap<String, usize> = BTreeMap::new();
        for (_, it) in &items {
            *by_cat.entry(it.category.name().into()).or_default() += 1;
            *by_src.entry(it.source.name().into()).or_default() += 1;
        }
        for c in Category::ALL {
            assert_eq!(by_cat.get(c.name()), Some(&(n / 3)), "{split} {}", c.name());
        }
        assert_eq!(by_cat, counts.by_category);
        assert_eq!(by_src, counts.by_source);
        let images: HashSet<&str> = items.iter().map(|(_, it)| it.image.as_str()).collect();
        assert_eq!(images.len(), counts.images);
        // Items come in category order.
        let cats: Vec<Category> = items.iter().map(|(_, it)| it.category).collect();
        assert!(cats.windows(2).all(|w| w[0] <= w[1]), "{cats:?}");
    }
    assert_eq!(summary.train.conversations, 12);
    assert_eq!(
        summary
            .train
            .by_category
            .values()
            .copied()
            .collect::<Vec<_>>(),
        vec![4, 4, 4]
    );

    // A remainder goes to the first categories: 10 → 4, 3, 3.
    assert_eq!(
        (0..3)
            .map(|c| synth::category_share(10, c))
            .collect::<Vec<_>>(),
        vec![4, 3, 3]
    );
    let (_u, out10, s10) = run(&SynthConfig {
        items: 10,
        dev_items: 4,
        conversations: 1,
        ..small()
    });
    assert_eq!(manifest(&out10.join("test.jsonl")).len(), 10);
    assert_eq!(s10.test.by_category["natural"], 4);
    assert_eq!(s10.test.by_category["scene_text"], 3);
    assert_eq!(s10.dev.by_category["natural"], 2);
    assert_eq!(s10.dev.by_category["document"], 1);
}

/// A response the source's scorer must reject for `it`.
fn wrong_answer(it: &ManifestItem) -> String {
    let gold = &it.answers[0];
    match it.source {
        Source::Mme => if gold == "Yes" { "No" } else { "Yes" }.into(),
        Source::Cvbench => {
            let letter = gold.trim_matches(|c| c == '(' || c == ')');
            let other = it
                .options
                .as_ref()
                .unwrap()
                .iter()
                .map(|o| o[1..2].to_string())
                .find(|l| l != letter)
                .unwrap();
            format!("({other})")
        }
        Source::Chartqa => (gold.parse::<u32>().unwrap() * 2 + 10).to_string(),
        _ => "qqqq".into(),
    }
}

#[test]
fn answers_are_well_formed_and_scored_by_the_crate() {
    let cfg = SynthConfig {
        items: 60,
        dev_items: 3,
        conversations: 1,
        image_size: 64,
        seed: 11,
    };
    let (_t, out, summary) = run(&cfg);
    let items = manifest(&out.join("test.jsonl"));
    let tags = metrics::reasoning::default_tags();
    let mut yes = 0;
    let mut no = 0;
    let mut letters = BTreeSet::new();
    for (_, it) in &items {
        let gold = &it.answers[0];
        match it.source {
            Source::Mme => {
                assert!(
                    it.question.ends_with(metrics_suffix::MME),
                    "{}",
                    it.question
                );
                match gold.as_str() {
                    "Yes" => yes += 1,
                    "No" => no += 1,
                    g => panic!("mme gold {g:?}"),
                }
            }
            Source::Cvbench => {
                let options = it.options.as_ref().unwrap();
                assert!((2..=4).contains(&options.len()), "{}", it.id);
                for (i, o) in options.iter().enumerate() {
                    let l = char::from(b'A' + i as u8);
                    assert!(o.starts_with(&format!("({l}) ")), "{o:?}");
                    assert!(it.question.contains(&format!("\n{o}\n")), "{}", it.question);
                }
                assert!(it.question.ends_with(metrics_suffix::CVBENCH));
                assert!(
                    options.iter().any(|o| o.starts_with(&format!("{gold} "))),
                    "{}: gold {gold:?} is not an option's letter",
                    it.id
                );
                letters.insert(gold.clone());
                // The training form (the bare letter) scores too.
                let bare = gold.trim_matches(|c| c == '(' || c == ')');
                let item = Item {
                    source: it.source,
                    prediction: bare,
                    answers: &it.answers,
                    dataset: None,
                };
                assert_eq!(metrics::score(&item, Some(&tags)).unwrap(), 1.0);
            }
            Source::Ocrbench => {
                assert_eq!(it.category, Category::SceneText);
                if it.question == "What number is written in the image?" {
                    assert!(
                        (2..=4).contains(&gold.len()) && gold.bytes().all(|b| b.is_ascii_digit()),
                        "{gold:?}"
                    );
                    assert!(!gold.starts_with('0'), "{gold:?}");
                } else {
                    assert_eq!(it.question, "What word is written in the image?");
                    assert!(
                        synth::WORDS.contains(&gold.to_lowercase().as_str()),
                        "{gold:?}"
                    );
                }
            }
            Source::Chartqa => {
                assert!(it.question.ends_with(metrics_suffix::CHARTQA));
                let v: u32 = gold.parse().unwrap();
                assert!((1..=99).contains(&v), "{gold:?}");
            }
            s => panic!("unexpected source {s:?}"),
        }
        let right = Item {
            source: it.source,
            prediction: gold,
            answers: &it.answers,
            dataset: None,
        };
        assert_eq!(
            metrics::score(&right, Some(&tags)).unwrap(),
            1.0,
            "{}",
            it.id
        );
        let wrong_text = wrong_answer(it);
        let wrong = Item {
            prediction: &wrong_text,
            ..right
        };
        assert_eq!(
            metrics::score(&wrong, Some(&tags)).unwrap(),
            0.0,
            "{}: {wrong_text:?}",
            it.id
        );
    }
    // Yes/No come in pairs on one image; the letters vary.
    assert!(yes > 0, "no mme items among 60");
    assert_eq!(yes, no);
    assert_eq!(summary.test.mme_answers["Yes"], yes);
    assert!(letters.len() >= 2, "{letters:?}");
    for source in ["mme", "cvbench", "ocrbench", "chartqa"] {
        assert!(
            summary.test.by_source.contains_key(source),
            "{source} missing"
        );
    }
}

#[test]
fn refused_inputs_leave_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let listing = |p: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };

    // An existing non-empty directory.
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("keep.txt"), b"mine").unwrap();
    let err = synth::generate(&small(), &full).unwrap_err();
    assert!(
        matches!(err, SynthError::OutputNotEmpty(ref p) if p == &full),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&full.display().to_string()),
        "{err}"
    );
    assert_eq!(listing(&full), vec!["keep.txt"]);

    // A file.
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = synth::generate(&small(), &file).unwrap_err();
    assert!(matches!(err, SynthError::OutputNotDirectory(_)), "{err:?}");

    // Options out of range, named as on the command line.
    let fresh = tmp.path().join("fresh");
    for (cfg, option) in [
        (
            SynthConfig {
                items: 0,
                ..small()
            },
            "--items",
        ),
        (
            SynthConfig {
                items: 2,
                ..small()
            },
            "--items",
        ),
        (
            SynthConfig {
                dev_items: 1,
                ..small()
            },
            "--dev-items",
        ),
        (
            SynthConfig {
                conversations: 0,
                ..small()
            },
            "--conversations",
        ),
        (
            SynthConfig {
                image_size: 32,
                ..small()
            },
            "--image-size",
        ),
    ] {
        let err = synth::generate(&cfg, &fresh).unwrap_err();
        match &err {
            SynthError::Config { option: o, .. } => assert_eq!(*o, option),
            e => panic!("{e:?}"),
        }
        assert!(err.to_string().starts_with(option), "{err}");
    }
    assert_eq!(listing(tmp.path()), vec!["file", "full"]);

    // An empty directory is taken, and no temporary directory is left beside it.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    synth::generate(
        &SynthConfig {
            conversations: 3,
            items: 3,
            dev_items: 3,
            ..small()
        },
        &empty,
    )
    .unwrap();
    assert!(empty.join("synth.json").is_file());
    assert_eq!(listing(tmp.path()), vec!["empty", "file", "full"]);

    // The defaults are the study's and pass validation.
    let d = SynthConfig::default();
    assert_eq!(
        (d.conversations, d.items, d.dev_items, d.seed, d.image_size),
        (2000, 300, 150, 20260722, 224)
    );
    d.validate().unwrap();
    let parsed: SynthConfig = serde_json::from_str(r#"{"items": 30}"#).unwrap();
    assert_eq!(parsed, SynthConfig { items: 30, ..d });
    assert!(serde_json::from_str::<SynthConfig>(r#"{"itemz": 30}"#).is_err());
}

/// A shape found in an image: colour name, shape name, centroid.
struct Found {
    color: &'static str,
    shape: &'static str,
    x: f64,
    y: f64,
}

/// The shapes of a natural image, found from its pixels alone: 4-connected components of
/// exactly one of [`synth::SHAPE_COLORS`] (a shape's interior), classified by how much of
/// their bounding box they fill (square ≈ 1, circle ≈ π/4, triangle ≈ 1/2).
fn find_shapes(img: &image::RgbImage) -> Vec<Found> {
    let (w, h) = img.dimensions();
    let mut seen = vec![false; (w * h) as usize];
    let mut found = Vec::new();
    for y0 in 0..h {
        for x0 in 0..w {
            let Some(&(color, rgb)) = synth::SHAPE_COLORS
                .iter()
                .find(|(_, rgb)| img.get_pixel(x0, y0).0 == *rgb)
            else {
                continue;
            };
            if seen[(y0 * w + x0) as usize] {
                continue;
            }
            let mut stack = vec![(x0, y0)];
            seen[(y0 * w + x0) as usize] = true;
            let mut pixels = Vec::new();
            while let Some((x, y)) = stack.pop() {
                pixels.push((x, y));
                let next = [
                    (x.wrapping_sub(1), y),
                    (x + 1, y),
                    (x, y.wrapping_sub(1)),
                    (x, y + 1),
                ];
                for (nx, ny) in next {
                    if nx < w
                        && ny < h
                        && !seen[(ny * w + nx) as usize]
                        && img.get_pixel(nx, ny).0 == rgb
                    {
                        seen[(ny * w + nx) as usize] = true;
                        stack.push((nx, ny));
                    }
                }
            }
            if pixels.len() < 8 {
                continue; // a stray edge pixel, not a shape
            }
            let (xs, ys): (Vec<u32>, Vec<u32>) = pixels.iter().copied().unzip();
            let bw = f64::from(xs.iter().max().unwrap() - xs.iter().min().unwrap() + 1);
            let bh = f64::from(ys.iter().max().unwrap() - ys.iter().min().unwrap() + 1);
            let fill = pixels.len() as f64 / (bw * bh);
            let shape = if fill > 0.9 {
                "square"
            } else if fill > 0.64 {
                "circle"
            } else {
                "triangle"
            };
            let n = pixels.len() as f64;
            found.push(Found {
                color,
                shape,
                x: xs.iter().map(|&v| f64::from(v)).sum::<f64>() / n,
                y: ys.iter().map(|&v| f64::from(v)).sum::<f64>() / n,
            });
        }
    }
    found
}

/// The answer to a natural question as text (`Yes`/`No`, a number, a colour), from the
/// shapes found in the image.
fn natural_truth(question: &str, shapes: &[Found]) -> String {
    let stem = question.split('\n').next().unwrap();
    let stem = stem.trim_end_matches(" Please answer yes or no.");
    let yes_no = |b: bool| if b { "Yes" } else { "No" }.to_string();
    let find = |desc: &str| -> &Found {
        let (c, s) = desc.split_once(' ').unwrap();
        let of: Vec<&Found> = shapes
            .iter()
            .filter(|f| f.color == c && f.shape == s)
            .collect();
        assert_eq!(of.len(), 1, "{question:?}: {desc} is not one shape");
        of[0]
    };
    if stem == "How many shapes are there in the image?" {
        return shapes.len().to_string();
    }
    if let Some(rest) = stem.strip_prefix("How many ") {
        let rest = rest.strip_suffix(" are there?").unwrap();
        return match rest.strip_suffix(" shapes") {
            Some(color) => shapes.iter().filter(|f| f.color == color).count(),
            None => {
                let shape = rest.strip_suffix('s').unwrap();
                shapes.iter().filter(|f| f.shape == shape).count()
            }
        }
        .to_string();
    }
    if let Some(shape) = stem
        .strip_prefix("What color is the ")
        .and_then(|r| r.strip_suffix('?'))
    {
        let of: Vec<&Found> = shapes.iter().filter(|f| f.shape == shape).collect();
        assert_eq!(of.len(), 1, "{question:?}");
        return of[0].color.to_string();
    }
    if let Some(desc) = stem
        .strip_prefix("Is there an ")
        .or_else(|| stem.strip_prefix("Is there a "))
        .and_then(|r| r.strip_suffix(" in the image?"))
    {
        let article = if stem.starts_with("Is there an ") {
            "an"
        } else {
            "a"
        };
        let vowel = desc.starts_with(['a', 'e', 'i', 'o', 'u']);
        assert_eq!(article == "an", vowel, "article in {question:?}");
        let (c, s) = desc.split_once(' ').unwrap();
        return yes_no(shapes.iter().any(|f| f.color == c && f.shape == s));
    }
    let body = stem
        .strip_prefix("Is the ")
        .and_then(|r| r.strip_suffix('?'))
        .unwrap_or_else(|| panic!("unknown natural question {question:?}"));
    for (rel, holds) in [
        (
            " to the left of the ",
            (|a: &Found, b: &Found| a.x < b.x) as fn(&Found, &Found) -> bool,
        ),
        (" to the right of the ", |a, b| a.x > b.x),
        (" above the ", |a, b| a.y < b.y),
        (" below the ", |a, b| a.y > b.y),
    ] {
        if let Some((a, b)) = body.split_once(rel) {
            return yes_no(holds(find(a), find(b)));
        }
    }
    panic!("unknown relation in {question:?}");
}

/// The option text a (gold or training) letter answer picks in a CV-Bench prompt.
fn option_text(question: &str, answer: &str) -> String {
    let letter = answer.trim_matches(|c| c == '(' || c == ')');
    question
        .lines()
        .find_map(|l| l.strip_prefix(&format!("({letter}) ")))
        .unwrap_or_else(|| panic!("{answer:?} is not an option of {question:?}"))
        .to_string()
}

/// Checks one natural question's answer against the image: the one true option for a
/// lettered question, the truth for a yes/no one.
fn check_natural(question: &str, answer: &str, img: &image::RgbImage, what: &str) {
    let shapes = find_shapes(img);
    assert!(
        (1..=5).contains(&shapes.len()),
        "{what}: {} shapes",
        shapes.len()
    );
    let truth = natural_truth(question, &shapes);
    if question.ends_with(metrics_suffix::CVBENCH) {
        assert_eq!(option_text(question, answer), truth, "{what}: {question:?}");
        let options: Vec<&str> = question.lines().filter(|l| l.starts_with('(')).collect();
        let right = options
            .iter()
            .filter(|o| o.ends_with(&format!(") {truth}")))
            .count();
        assert_eq!(right, 1, "{what}: {question:?}");
    } else {
        assert_eq!(answer, truth, "{what}: {question:?}");
    }
}

#[test]
fn natural_answers_are_true_of_the_pixels() {
    let cfg = SynthConfig {
        conversations: 30,
        items: 60,
        dev_items: 3,
        image_size: 160,
        seed: 5,
    };
    let (_t, out, _) = run(&cfg);
    let load = |rel: &str| image::open(out.join("images").join(rel)).unwrap().to_rgb8();
    let mut checked = 0;
    for (_, it) in manifest(&out.join("test.jsonl")) {
        if it.category == Category::Natural {
            check_natural(&it.question, &it.answers[0], &load(&it.image), &it.id);
            checked += 1;
        }
    }
    assert_eq!(checked, 20);
    let train: Vec<synth::TrainRecord> =
        serde_json::from_slice(&std::fs::read(out.join("train.json")).unwrap()).unwrap();
    for r in train.iter().step_by(3) {
        let img = load(&r.image);
        for pair in r.conversations.chunks(2) {
            let q = pair[0].value.trim_start_matches("<image>\n");
            check_natural(q, &pair[1].value, &img, &r.id);
            checked += 1;
        }
    }
    assert!(checked >= 20 + 20, "{checked}");
}
