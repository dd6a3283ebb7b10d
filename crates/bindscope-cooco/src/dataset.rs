//! The COOCO release layout: `metadata.json`, an object keyed by image file name
//! (`<cocoid>_<scene>_<target>_<variant>.jpg`), each record with `scene`, `target`,
//! `swapped_object`, `target_bbox` (`[x, y, w, h]`, pixels of the stored image), `rel_level`
//! (`original`, `clean`, `same_target`, `high`, `middle`, `low`), `rel_score` and `excluded`;
//! the images in `images/` beside it (or beside `metadata.json` when there is no `images/`).
//!
//! [`load`] checks every record — the image present and readable (its header), the box finite,
//! of positive area and inside the image as decoded (EXIF orientation applied), the level
//! known — and either fails listing every
//! invalid record by file name, or with `skip_invalid` keeps the valid ones and lists the
//! others in [`Dataset::invalid`]. Records marked `excluded` are kept out as the study does,
//! and counted.

use crate::CoocoError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `rel_level`: the target's relation to the scene.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelLevel {
    /// The COCO image as it is.
    Original,
    /// The target removed (inpainted away).
    Clean,
    /// The target inpainted back (the inpainting control).
    SameTarget,
    /// A replacement highly related to the scene.
    High,
    /// A replacement of medium relatedness.
    Middle,
    /// A replacement of low relatedness.
    Low,
}

impl RelLevel {
    /// Every level, in the paper's order.
    pub const ALL: [RelLevel; 6] = [
        RelLevel::Original,
        RelLevel::Clean,
        RelLevel::SameTarget,
        RelLevel::High,
        RelLevel::Middle,
        RelLevel::Low,
    ];

    /// The metadata's spelling.
    pub fn name(self) -> &'static str {
        match self {
            RelLevel::Original => "original",
            RelLevel::Clean => "clean",
            RelLevel::SameTarget => "same_target",
            RelLevel::High => "high",
            RelLevel::Middle => "middle",
            RelLevel::Low => "low",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == s)
    }
}

/// One image of the dataset.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    /// The metadata key: the image's file name.
    pub file: String,
    /// `scene`: the scene label.
    pub scene: String,
    /// `target`: the original target's label.
    pub target: String,
    /// `swapped_object`: the replacement's label (absent for `original` / `clean`).
    pub swapped_object: Option<String>,
    /// `target_bbox` `[x, y, w, h]` in pixels of the stored image.
    pub target_bbox: [f64; 4],
    /// `rel_level`.
    pub rel_level: RelLevel,
    /// `rel_score`: the replacement's relatedness score, when given.
    pub rel_score: Option<f64>,
    /// `[width, height]` of the stored image.
    pub size: [usize; 2],
    /// sha256 of the image file's bytes (hex): what a run's identity records of it.
    #[serde(skip)]
    pub sha256: String,
}

impl Record {
    /// The label a correct answer names: the replacement where there is one, else the target.
    pub fn expected_label(&self) -> &str {
        self.swapped_object.as_deref().unwrap_or(&self.target)
    }
}

/// A record that failed a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Invalid {
    /// The metadata key.
    pub file: String,
    /// What is wrong.
    pub reason: String,
}

/// The checked dataset.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// `metadata.json`.
    pub metadata: PathBuf,
    /// Where the images are.
    pub images: PathBuf,
    /// The valid, not excluded records, by file name.
    pub records: Vec<Record>,
    /// The records skipped as invalid (only with `skip_invalid`).
    pub invalid: Vec<Invalid>,
    /// How many records were marked `excluded`.
    pub excluded: usize,
}

impl Dataset {
    /// The path of a record's image.
    pub fn image_path(&self, r: &Record) -> PathBuf {
        self.images.join(&r.file)
    }
}

fn string_field(v: &serde_json::Value, key: &str) -> Result<Option<String>, String> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{key} must be a string, got {other}")),
    }
}

/// Checks one record against its image; `Err` says what is wrong.
fn check(file: &str, v: &serde_json::Value, images: &Path) -> Result<Option<Record>, String> {
    if !v.is_object() {
        return Err(format!("the record is not an object: {v}"));
    }
    match v.get("excluded") {
        Some(serde_json::Value::Bool(true)) => return Ok(None),
        None | Some(serde_json::Value::Null) | Some(serde_json::Value::Bool(false)) => {}
        Some(other) => return Err(format!("excluded must be true or false, got {other}")),
    }
    let need = |key: &str| -> Result<String, String> {
        string_field(v, key)?.ok_or_else(|| format!("no {key}"))
    };
    let need_label = |key: &str| -> Result<String, String> {
        let v = need(key)?;
        if v.trim().is_empty() {
            return Err(format!("{key} is empty"));
        }
        Ok(v)
    };
    let scene = need_label("scene")?;
    let target = need_label("target")?;
    let swapped_object = string_field(v, "swapped_object")?;
    let level = need("rel_level")?;
    let rel_level = RelLevel::parse(&level).ok_or_else(|| {
        format!(
            "unknown rel_level '{level}' (expected one of {})",
            RelLevel::ALL.map(RelLevel::name).join(", ")
        )
    })?;
    let bbox = v
        .get("target_bbox")
        .and_then(serde_json::Value::as_array)
        .filter(|a| a.len() == 4)
        .and_then(|a| {
            let n: Vec<f64> = a.iter().filter_map(serde_json::Value::as_f64).collect();
            (n.len() == 4).then(|| [n[0], n[1], n[2], n[3]])
        })
        .ok_or_else(|| "target_bbox must be [x, y, w, h], four numbers".to_string())?;
    let rel_score = match v.get("rel_score") {
        None | Some(serde_json::Value::Null) => None,
        Some(s) => Some(
            s.as_f64()
                .ok_or_else(|| format!("rel_score must be a number, got {s}"))?,
        ),
    };
    let path = images.join(file);
    if !path.is_file() {
        return Err(format!("image {} is missing", path.display()));
    }
    let bytes = std::fs::read(&path)
        .map_err(|e| format!("image {} is not readable: {e}", path.display()))?;
    let (w, h) = image::ImageReader::new(std::io::Cursor::new(&bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())
        .and_then(|r| r.into_dimensions().map_err(|e| e.to_string()))
        .map_err(|e| format!("image {} is not readable: {e}", path.display()))?;
    // The size the decoder hands out: EXIF orientations 5–8 swap the sides.
    let (w, h) = if bindscope_data::image::exif_orientation(&bytes) >= 5 {
        (h, w)
    } else {
        (w, h)
    };
    let [x, y, bw, bh] = bbox;
    if !bbox.iter().all(|c| c.is_finite()) || bw <= 0.0 || bh <= 0.0 {
        return Err(format!(
            "target_bbox {bbox:?} must be finite with a positive width and height"
        ));
    }
    if x < 0.0 || y < 0.0 || x + bw > w as f64 || y + bh > h as f64 {
        return Err(format!(
            "target_bbox {bbox:?} ([x, y, w, h]) is not inside the {w}x{h} image"
        ));
    }
    Ok(Some(Record {
        file: file.to_string(),
        scene,
        target,
        swapped_object,
        target_bbox: bbox,
        rel_level,
        rel_score,
        size: [w as usize, h as usize],
        sha256: {
            use sha2::Digest;
            format!("{:x}", sha2::Sha256::digest(&bytes))
        },
    }))
}

/// Reads and checks the dataset in `dir` (see the [module docs](self)).
///
/// # Errors
/// [`CoocoError::Io`] / [`CoocoError::Json`] for an unreadable or malformed `metadata.json`;
/// [`CoocoError::Invalid`] listing every invalid record (unless `skip_invalid`), or when no
/// record is left.
pub fn load(dir: &Path, skip_invalid: bool) -> Result<Dataset, CoocoError> {
    let metadata = dir.join("metadata.json");
    let text = std::fs::read_to_string(&metadata).map_err(|source| CoocoError::Io {
        path: metadata.clone(),
        source,
    })?;
    let all: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(&text).map_err(|e| CoocoError::Json {
            path: metadata.clone(),
            message: format!(
                "{e} (expected an object keyed by image file name, each value a record)"
            ),
        })?;
    let images = if dir.join("images").is_dir() {
        dir.join("images")
    } else {
        dir.to_path_buf()
    };
    let (mut records, mut invalid, mut excluded) = (Vec::new(), Vec::new(), 0);
    for (file, v) in &all {
        match check(file, v, &images) {
            Ok(Some(r)) => records.push(r),
            Ok(None) => excluded += 1,
            Err(reason) => invalid.push(Invalid {
                file: file.clone(),
                reason,
            }),
        }
    }
    if !invalid.is_empty() && !skip_invalid {
        let list: Vec<String> = invalid
            .iter()
            .map(|i| format!("  {}: {}", i.file, i.reason))
            .collect();
        return Err(CoocoError::Invalid(format!(
            "{}: {} invalid record(s) (pass --skip-invalid to leave them out and list them):\n{}",
            metadata.display(),
            invalid.len(),
            list.join("\n")
        )));
    }
    if records.is_empty() {
        return Err(CoocoError::Invalid(format!(
            "{}: no usable record ({} in the file, {excluded} excluded, {} invalid)",
            metadata.display(),
            all.len(),
            invalid.len()
        )));
    }
    Ok(Dataset {
        metadata,
        images,
        records,
        invalid,
        excluded,
    })
}
