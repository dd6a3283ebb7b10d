//! The binding study's tests, one binary: metrics against scipy / numpy, and the synthetic scenes.
//!
//! One binary per package rather than one per file: every test binary links burn, wgpu and the
//! models, so separate binaries multiply the link time and the disk a clean build needs.

mod binding_metrics;
mod binding_scenes;
