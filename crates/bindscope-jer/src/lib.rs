//! # bindscope-jer — Jacobian effective rank of frozen encoders
//!
//! Source: "Global Geometry Is Not Enough for Vision Representations", §4.1, App. A.4 and D.4.
//!
//! For an encoder `f: R^M → R^D` (input: the normalized pixel tensor the model receives, `M =
//! 3·H·W`; output: an embedding), the Jacobian `J(x) ∈ R^{D×M}` tells how many independent
//! directions of the input the embedding is sensitive to at `x`. With a sketch `S` of `J` and
//! its singular values `σ_1 ≥ … ≥ σ_k`,
//!
//! ```text
//! JER(x) = (Σ_i σ_i)² / Σ_i σ_i²                    (participation ratio of the spectrum)
//! erank(x) = exp(H(p)),  p_i = σ_i / Σ_j σ_j          (entropy effective rank, Roy & Vetterli 2007)
//! ```
//!
//! and JER is reported as the mean over probe images ([`probe`]).
//!
//! ## Two exact estimators (burn has reverse-mode autodiff only)
//! 1. **input-sketch** (the paper's definition): `S = J·V`, `V ∈ R^{M×k}` with orthonormal
//!    random columns. Computed exactly with reverse mode: the rows `e_iᵀ J` come from batched
//!    vector–Jacobian products over the output basis (cost ∝ D backward rows), then multiplied by
//!    `V`. The reference; slow on a CPU.
//! 2. **output-sketch** (default): `S = Gᵀ·J`, `G ∈ R^{D×k}` standard Gaussian, i.e. k VJPs
//!    computed in one batched backward over k copies of the image ([`sketch::batched_vjp`]).
//!
//! **Why they estimate the same thing.** Write `J = U Σ Wᵀ` (thin SVD, `U ∈ R^{D×r}`,
//! `W ∈ R^{M×r}`). Then `Gᵀ J = (Uᵀ G)ᵀ Σ Wᵀ`; `Uᵀ G` is again a standard Gaussian `r×k` matrix
//! (rotation invariance of the Gaussian) and `Wᵀ` has orthonormal rows, so the singular values
//! of `Gᵀ J` are those of `Σ·G'` with `G'` Gaussian. Likewise `J V = U Σ (Wᵀ V)`: `U` has
//! orthonormal columns and, for a Gaussian `V`, `Wᵀ V` is Gaussian, so the singular values of
//! `J V` are those of `Σ·G''`. Both sketches therefore have the same singular-value
//! distribution. With *orthonormal* `V` (the paper), `Wᵀ V` is a block of a random rotation; for
//! `M ≫ D` its columns are almost independent with norm ≈ `√(r/M)`, i.e. Gaussian up to a
//! common scale, which JER (scale-invariant) ignores — the difference vanishes as `M/D → ∞`
//! (here `M = 150 528` vs `D ≤ 1024`). The test `jer_estimators_agree` checks the two means agree
//! within their standard error.
//!
//! The encoder must be frozen (no dropout, no train-mode norm) so the rows of a batch are
//! independent; every encoder in `bindscope-models` is a pure inference module.
//!
//! ## The study
//! [`study::run`] takes a serde [`study::Config`] (models, probe images, seeds, k, estimator,
//! readout, normalization, depth, image size, dtype) and runs it: run directories keyed by each
//! model's [`study::Identity`], the resume log, the reports and plots ([`plot`]), and the
//! comparison table of several models.

pub mod memory;
pub mod plot;
pub mod probe;
pub mod sketch;
pub mod spectrum;
pub mod stats;
pub mod study;

pub use sketch::{Backward, Estimator, JerError, OutputSpectrum, jer_at, jer_at_with};
pub use spectrum::{entropy_effective_rank, jer, normalized_spectrum, singular_values};
pub use stats::{Summary, summarize};
