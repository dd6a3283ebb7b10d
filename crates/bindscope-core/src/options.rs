//! Options that several studies share, as the studies' `Config`s record them (serde, lowercase
//! names) and, with the `clap` feature, as command-line value enums.

use serde::{Deserialize, Serialize};

use crate::LoadOptions;

/// The float type the weights are computed in (`--dtype`).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// Cast every float weight to f32 (the default; what the parity tests check).
    #[default]
    F32,
    /// Keep the checkpoint's float dtype (f16 / bf16): the weights are held and computed in it
    /// (inputs cast to it, attention softmax in f32, outputs handed back in f32). The weights must be stored in one float dtype the device computes in;
    /// otherwise loading fails naming the dtypes.
    Keep,
}

impl Dtype {
    /// The load options of this dtype (every other option at its default).
    pub fn load_options(self) -> LoadOptions {
        LoadOptions {
            keep_dtype: self == Dtype::Keep,
            ..Default::default()
        }
    }
}

/// The mean / std a synthetic probe or scene is normalized with (`--normalize`).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Normalize {
    /// ImageNet mean / std (the papers' setting, every model).
    #[default]
    Imagenet,
    /// The checkpoint's own mean / std (`preprocessor_config.json`, a timm `pretrained_cfg`, or
    /// torchvision's ImageNet values for a `.pth`).
    Model,
}
