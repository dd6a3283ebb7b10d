//! # bindscope-foveated — do frozen encoders lose binding information, or does pooling?
//!
//! Seed study "Foveated Probes Recover Localized Binding Information". For one frozen vision
//! encoder, the study flows one way:
//!
//! 1. scenes: [`csb`] (colour–shape binding, 6 classes) and [`csd`] (small-shape detection,
//!    2 classes), seeded and deterministic ([`rng`]), with test counterfactuals and nuisance
//!    variants ([`dataset`]); rasterised exactly by [`scene`] over the vocabulary of [`shapes`];
//! 2. the encoder runs once per scene and its patch tokens, summary token, GAP and oracle
//!    box pooling are cached as safetensors ([`features`]);
//! 3. readouts over the cached tokens — GAP, summary, oracle box pooling, the learned fovea —
//!    each followed by a linear or an MLP probe trained with one fixed recipe ([`probe`]);
//! 4. metrics ([`metrics`]): top-1, counterfactual flip rate, nuisance-to-signal ratio;
//! 5. [`viz`]: the fovea's attention maps as images;
//! 6. [`gqa`]: the paired colour questions built from GQA scene graphs (same readouts, plus a
//!    text-conditioned fovea).
//!
//! [`study`] runs the whole study into a run directory (`experiments foveated` maps its flags
//! to a [`study::Config`] and calls [`study::run`]).
//!
//! ```
//! use bindscope_foveated::{csb::CsbConfig, split::Split};
//! let scene = CsbConfig::default().base(42, Split::Train, 0);
//! assert_eq!(scene.label, 0); // scene i has label i mod 6
//! let img = scene.render(384, 4);
//! assert_eq!((img.width, img.height), (384, 384));
//! ```

pub mod csb;
pub mod csd;
pub mod dataset;
pub mod features;
pub mod gqa;
pub mod metrics;
pub mod probe;
pub mod rng;
pub mod scene;
pub mod shapes;
pub mod split;
pub mod study;
pub mod viz;
