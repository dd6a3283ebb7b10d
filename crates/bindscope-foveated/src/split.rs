//! Data splits and the scene sets a study evaluates.

use serde::{Deserialize, Serialize};

/// A data split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Probe training.
    Train,
    /// Model selection (best-validation checkpoint).
    Val,
    /// Reported numbers; counterfactuals and nuisance variants derive from these scenes.
    Test,
    /// CSD only: the clean `K = 0` split (the target alone).
    Clean,
}

impl Split {
    /// Stream key of the split.
    pub fn id(self) -> u64 {
        match self {
            Split::Train => 0,
            Split::Val => 1,
            Split::Test => 2,
            Split::Clean => 3,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
            Split::Test => "test",
            Split::Clean => "clean",
        }
    }
}

/// Number of base scenes per split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitSizes {
    /// Training scenes (default 6,000).
    pub train: usize,
    /// Validation scenes (default 2,000).
    pub val: usize,
    /// Test scenes (default 2,000).
    pub test: usize,
    /// CSD clean `K = 0` scenes (default 500; ignored by CSB).
    pub clean: usize,
}

impl Default for SplitSizes {
    fn default() -> Self {
        Self {
            train: 6000,
            val: 2000,
            test: 2000,
            clean: 500,
        }
    }
}

impl SplitSizes {
    /// Size of one split.
    pub fn get(&self, split: Split) -> usize {
        match split {
            Split::Train => self.train,
            Split::Val => self.val,
            Split::Test => self.test,
            Split::Clean => self.clean,
        }
    }
}
