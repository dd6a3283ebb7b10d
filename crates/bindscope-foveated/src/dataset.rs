//! The scene sets of one study: base splits, the test counterfactuals and nuisance variants.

use crate::csb::CsbConfig;
use crate::csd::CsdConfig;
use crate::scene::{Scene, Task, save_png};
use crate::split::{Split, SplitSizes};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A named set of scenes whose features are extracted together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetName {
    /// Base training scenes.
    Train,
    /// Base validation scenes.
    Val,
    /// Base test scenes.
    Test,
    /// Counterfactuals of the test scenes (CSB: up to 5 each; CSD: exactly 1).
    TestCf,
    /// Nuisance variants of the first `nuisance_scenes` test scenes.
    TestNuisance,
    /// CSD's clean `K = 0` split.
    Clean,
}

impl SetName {
    /// File-system name.
    pub fn name(self) -> &'static str {
        match self {
            SetName::Train => "train",
            SetName::Val => "val",
            SetName::Test => "test",
            SetName::TestCf => "test-cf",
            SetName::TestNuisance => "test-nuisance",
            SetName::Clean => "clean",
        }
    }
}

/// Everything that decides the scenes of a study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generator {
    /// CSB or CSD.
    pub task: Task,
    /// Scene seed.
    pub seed: u64,
    /// Base scenes per split.
    pub sizes: SplitSizes,
    /// Number of test scenes (the first ones) whose nuisance variants are generated; at most
    /// `sizes.test`.
    pub nuisance_scenes: usize,
    /// CSB settings (used when `task` is CSB).
    pub csb: CsbConfig,
    /// CSD settings (used when `task` is CSD).
    pub csd: CsdConfig,
}

impl Generator {
    /// The documented design for `task` with `seed`: 6,000 / 2,000 / 2,000 scenes (+ 500
    /// clean for CSD), nuisance variants for every test scene.
    pub fn new(task: Task, seed: u64) -> Self {
        let sizes = SplitSizes::default();
        Self {
            task,
            seed,
            nuisance_scenes: sizes.test,
            sizes,
            csb: CsbConfig::default(),
            csd: CsdConfig::default(),
        }
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// A message naming the bad setting.
    pub fn validate(&self) -> Result<(), String> {
        match self.task {
            Task::Csb => self.csb.validate()?,
            Task::Csd => self.csd.validate()?,
        }
        if self.sizes.train == 0 || self.sizes.val == 0 || self.sizes.test == 0 {
            return Err("every split needs at least one scene".into());
        }
        if self.nuisance_scenes > self.sizes.test {
            return Err(format!(
                "nuisance scenes ({}) exceed the test split ({})",
                self.nuisance_scenes, self.sizes.test
            ));
        }
        Ok(())
    }

    /// Number of classes.
    pub fn num_classes(&self) -> usize {
        self.task.num_classes()
    }

    /// Class names in label order.
    pub fn class_names(&self) -> Vec<String> {
        match self.task {
            Task::Csb => crate::csb::CLASS_NAMES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            Task::Csd => crate::csd::CLASS_NAMES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }

    /// Nuisance variants per base scene.
    pub fn nuisance_variants(&self) -> usize {
        match self.task {
            Task::Csb => self.csb.nuisance_variants,
            Task::Csd => self.csd.nuisance_variants,
        }
    }

    /// The sets of this study, in extraction order.
    pub fn sets(&self) -> Vec<SetName> {
        let mut v = vec![SetName::Train, SetName::Val, SetName::Test, SetName::TestCf];
        if self.nuisance_scenes > 0 && self.nuisance_variants() > 0 {
            v.push(SetName::TestNuisance);
        }
        if self.task == Task::Csd && self.sizes.clean > 0 {
            v.push(SetName::Clean);
        }
        v
    }

    /// Base scene `index` of `split`.
    pub fn base(&self, split: Split, index: usize) -> Scene {
        match self.task {
            Task::Csb => self.csb.base(self.seed, split, index),
            Task::Csd => self.csd.base(self.seed, split, index),
        }
    }

    /// Counterfactuals of test scene `index`.
    pub fn counterfactuals(&self, index: usize, base: &Scene) -> Vec<Scene> {
        match self.task {
            Task::Csb => self
                .csb
                .counterfactuals(self.seed, Split::Test, index, base),
            Task::Csd => vec![self.csd.counterfactual(index, base)],
        }
    }

    /// Nuisance variant `j` of test scene `index`.
    pub fn nuisance(&self, index: usize, base: &Scene, j: usize) -> Scene {
        match self.task {
            Task::Csb => self.csb.nuisance(self.seed, Split::Test, index, base, j),
            Task::Csd => self.csd.nuisance(self.seed, Split::Test, index, base, j),
        }
    }

    /// Every scene of a set, in a fixed order (counterfactuals and variants grouped by base
    /// scene, in base order).
    pub fn scenes(&self, set: SetName) -> Vec<Scene> {
        let base = |split: Split| {
            (0..self.sizes.get(split))
                .map(|i| self.base(split, i))
                .collect::<Vec<_>>()
        };
        match set {
            SetName::Train => base(Split::Train),
            SetName::Val => base(Split::Val),
            SetName::Test => base(Split::Test),
            SetName::Clean => {
                if self.task == Task::Csd {
                    base(Split::Clean)
                } else {
                    Vec::new()
                }
            }
            SetName::TestCf => (0..self.sizes.test)
                .flat_map(|i| {
                    let b = self.base(Split::Test, i);
                    self.counterfactuals(i, &b)
                })
                .collect(),
            SetName::TestNuisance => (0..self.nuisance_scenes)
                .flat_map(|i| {
                    let b = self.base(Split::Test, i);
                    (0..self.nuisance_variants()).map(move |j| (i, b.clone(), j))
                })
                .map(|(i, b, j)| self.nuisance(i, &b, j))
                .collect(),
        }
    }
}

/// Writes the first `n` scenes of each set as `<dir>/<set>/<k>.png` (rendered at `side` with
/// `supersample²` samples per pixel) and `<dir>/<set>/<k>.json` (the scene), `k` zero-padded
/// to five digits (`00000.png`).
///
/// # Errors
/// I/O errors, naming the file.
pub fn dump_images(
    generator: &Generator,
    n: usize,
    side: usize,
    supersample: usize,
    dir: &Path,
) -> std::io::Result<usize> {
    let mut written = 0;
    for set in generator.sets() {
        let scenes = generator.scenes(set);
        for (k, s) in scenes.iter().take(n).enumerate() {
            let base = dir.join(set.name());
            save_png(
                &s.render(side, supersample),
                &base.join(format!("{k:05}.png")),
            )?;
            let json = serde_json::to_string_pretty(s).map_err(std::io::Error::other)?;
            bindscope_core::fsutil::write_atomic(
                &base.join(format!("{k:05}.json")),
                json.as_bytes(),
            )?;
            written += 1;
        }
    }
    Ok(written)
}
