//! # bindscope-binding — compositional binding probes and what predicts them
//!
//! Source: "Global Geometry Is Not Enough for Vision Representations" (arXiv:2602.03282):
//! §3.1 and App. D.3 (geometric metrics), §5.1 and App. C / D.5 (synthetic binding probes and
//! readouts), Table 2 (correlations). The study, for one frozen encoder, flows one way:
//!
//! 1. [`scene`]: the 324 two-object scenes (3 shapes × 6 colours at LEFT and RIGHT) and their
//!    pixel-exact, platform-independent rendering (no anti-aliasing by default);
//! 2. [`tasks`]: the seeded Attribute Binding trials (query, target, distractors D1–D3) and
//!    Same/Different pairs over those scenes;
//! 3. the encoder embeds each scene once ([`study::scene_bank`]);
//! 4. [`readout`]: cosine, kNN and local-PCA scoring of binding candidates over the bank of
//!    scene embeddings, and the best-threshold Same/Different accuracy;
//! 5. [`geometry`]: G.PR, G.Iso and L.Iso of embeddings of natural images;
//! 6. [`stats`]: Pearson / partial correlations, OLS with leave-one-out R², and the jackknife
//!    across models.
//!
//! The metrics (`scene` … `stats`) are host-side f64 arithmetic (faer for eigendecompositions
//! and least squares, statrs for distributions) and depend on no model or device. The runs
//! that drive an encoder through them — configuration, run directory, resume logs, outputs —
//! are [`study`] (`experiments binding`, `samediff`, and [`study::geometry`]) and
//! [`correlate`] (Table 2 from many `probe-all` rows); each takes a serde `Config` and returns
//! a typed report.
//!
//! ```
//! use bindscope_binding::{scene::{render, RenderSpec}, tasks::binding_trial};
//! let trial = binding_trial(42, 0);
//! let img = render(&trial.query, &RenderSpec::default()); // 224×224 RGB
//! assert_eq!((img.width, img.height), (224, 224));
//! ```

pub mod correlate;
pub mod geometry;
pub mod readout;
pub mod scene;
pub mod stats;
pub mod study;
pub mod tasks;
pub mod zoo;
