//! SVG plots with plotters: the palette and the canvas every study's plots share.

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The tab10 palette's first eight colours, shared by every plot.
pub const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The default canvas size in pixels (width, height).
pub const SIZE: (u32, u32) = (720, 480);

/// Draws a [`SIZE`] SVG with `draw` on a white canvas and writes it atomically to `path`.
pub fn render(
    path: &Path,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>,
) -> Result<()> {
    render_sized(path, SIZE, draw)
}

/// Draws an SVG of `size` pixels with `draw` on a white canvas and writes it atomically.
///
/// # Errors
/// What `draw` returns, a plotters drawing error, or the write of `path`.
pub fn render_sized(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>,
) -> Result<()> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
        draw(&root)?;
        root.present().map_err(|e| anyhow!("{e:?}"))?;
    }
    crate::fsutil::write_atomic(path, svg.as_bytes())?;
    Ok(())
}
