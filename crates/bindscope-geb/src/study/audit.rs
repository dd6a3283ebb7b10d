//! `geb audit`: the leakage audit of a data directory (§5). Every image of `train.json`,
//! `dev.jsonl` and `test.jsonl` is decoded, and two images are the same when their decoded
//! pixels are (SHA-256 of width, height and the RGB bytes, so a re-encoded copy is caught), and
//! near-duplicates when their perceptual hashes (`image_hasher`'s gradient hash, 8 × 8 bits)
//! differ in at most `max_distance` bits. Overlaps are counted per pair of splits, and every
//! offending pair of files is listed. A manifest item whose `sha256` is not its file's is listed
//! too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use bindscope_data::image::{DecodeOptions, decode_file};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::DataDir;
use crate::readout::conversation::read_llava;
use crate::readout::eval::read_manifest;

/// An image as a split lists it: split, path, and for a manifest item its id and `sha256`.
type Listed = (&'static str, String, Option<(String, String)>);

/// One image of a split.
#[derive(Debug, Clone, Serialize)]
pub struct AuditedImage {
    /// `train`, `dev` or `test`.
    pub split: &'static str,
    /// The path as the data names it.
    pub image: String,
    /// SHA-256 of the decoded pixels.
    pub pixels_sha256: String,
    /// The perceptual hash, base64 as `image_hasher` writes it.
    pub phash: String,
}

/// An overlap between two images of different splits.
#[derive(Debug, Clone, Serialize)]
pub struct Overlap {
    /// `exact` (same pixels) or `near` (perceptual hashes within the distance).
    pub kind: &'static str,
    /// The first image (`split/path`).
    pub a: String,
    /// The second.
    pub b: String,
    /// Hamming distance of the perceptual hashes.
    pub distance: u32,
}

/// The audit's result (`audit.json`).
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// Images per split.
    pub images: BTreeMap<String, usize>,
    /// The near-duplicate threshold, bits.
    pub max_distance: u32,
    /// Counts per pair of splits (`train-test`, …) and kind.
    pub counts: BTreeMap<String, BTreeMap<String, usize>>,
    /// Every offending pair.
    pub overlaps: Vec<Overlap>,
    /// Manifest items whose `sha256` is not their file's (`split/id`).
    pub sha256_mismatches: Vec<String>,
}

/// Runs the audit and writes `audit.json` to `out` (default: the data directory).
///
/// # Errors
/// Unreadable files or images (every one named), a data directory without its files.
pub fn run(data: &Path, max_distance: u32, out: Option<&Path>) -> Result<AuditReport> {
    let data = DataDir::open(data)?;
    let mut images: Vec<Listed> = Vec::new();
    for c in read_llava(&data.train())? {
        images.push(("train", c.image, None));
    }
    for split in ["dev", "test"] {
        for it in read_manifest(&data.manifest(split))? {
            images.push((split, it.image, Some((it.id, it.sha256))));
        }
    }
    let hasher = image_hasher::HasherConfig::new()
        .hash_size(8, 8)
        .hash_alg(image_hasher::HashAlg::Gradient)
        .to_hasher();
    let mut seen: BTreeMap<(&str, String), usize> = BTreeMap::new();
    let mut audited: Vec<(AuditedImage, image_hasher::ImageHash)> = Vec::new();
    let mut bad = Vec::new();
    let mut mismatches = Vec::new();
    let bar = bindscope_core::run::progress(images.len() as u64, "auditing images");
    for (split, image, item) in &images {
        bar.inc(1);
        let path: PathBuf = data.images().join(image);
        if let Some((id, sha)) = item {
            match std::fs::read(&path) {
                Ok(bytes) => {
                    let h: String = Sha256::digest(&bytes)
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect();
                    if &h != sha {
                        mismatches.push(format!("{split}/{id}"));
                    }
                }
                Err(e) => {
                    bad.push(format!("{}: {e}", path.display()));
                    continue;
                }
            }
        }
        if seen.insert((split, image.clone()), 0).is_some() {
            continue; // several items of one image
        }
        match decode_file(&path, &DecodeOptions::hf()) {
            Ok(rgb) => {
                let mut s = Sha256::new();
                s.update((rgb.width as u64).to_le_bytes());
                s.update((rgb.height as u64).to_le_bytes());
                s.update(&rgb.data);
                let pixels_sha256 = s.finalize().iter().map(|b| format!("{b:02x}")).collect();
                let buf = image::RgbImage::from_raw(rgb.width as u32, rgb.height as u32, rgb.data)
                    .ok_or_else(|| {
                        anyhow::anyhow!("{}: pixel buffer of the wrong size", path.display())
                    })?;
                let hash = hasher.hash_image(&image::DynamicImage::ImageRgb8(buf));
                audited.push((
                    AuditedImage {
                        split,
                        image: image.clone(),
                        pixels_sha256,
                        phash: hash.to_base64(),
                    },
                    hash,
                ));
            }
            Err(e) => bad.push(format!("{}: {e}", path.display())),
        }
    }
    bar.finish_and_clear();
    if !bad.is_empty() {
        bail!(
            "{} images could not be read (no audit written):\n{}",
            bad.len(),
            bad.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
        );
    }
    let mut overlaps = Vec::new();
    let mut counts: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for pair in ["train-dev", "train-test", "dev-test"] {
        counts.insert(
            pair.into(),
            BTreeMap::from([("exact".to_string(), 0), ("near".to_string(), 0)]),
        );
    }
    for i in 0..audited.len() {
        for j in i + 1..audited.len() {
            let (a, ha) = &audited[i];
            let (b, hb) = &audited[j];
            if a.split == b.split {
                continue;
            }
            let distance = ha.dist(hb);
            let kind = if a.pixels_sha256 == b.pixels_sha256 {
                "exact"
            } else if distance <= max_distance {
                "near"
            } else {
                continue;
            };
            let pair = format!("{}-{}", a.split, b.split);
            *counts
                .entry(pair)
                .or_default()
                .entry(kind.to_string())
                .or_default() += 1;
            overlaps.push(Overlap {
                kind,
                a: format!("{}/{}", a.split, a.image),
                b: format!("{}/{}", b.split, b.image),
                distance,
            });
        }
    }
    let mut per_split = BTreeMap::new();
    for (a, _) in &audited {
        *per_split.entry(a.split.to_string()).or_insert(0) += 1;
    }
    let report = AuditReport {
        images: per_split,
        max_distance,
        counts,
        overlaps,
        sha256_mismatches: mismatches,
    };
    let path = out.map_or_else(|| data.root.join("audit.json"), Path::to_path_buf);
    bindscope_core::run::write_json(&path, &report)?;
    Ok(report)
}
