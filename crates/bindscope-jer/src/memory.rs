//! Up-front memory estimates: a probe or scene size that cannot fit is refused with a message
//! naming the flags, before any run directory or model output exists, instead of aborting on a
//! failed allocation (or panicking in the backend) in the middle of the work.
//!
//! The estimates are **lower bounds**: they count only tensors the computation must hold at
//! once, so a size they refuse cannot run; a size they accept may still be too large (the
//! backend's workspaces, allocator slack and the weights are not counted). For a ViT-style
//! encoder with `L` blocks, `heads` attention heads, hidden size `D`, patch size `p`, `P`
//! prefix tokens and a probe of `H × W` pixels, `T = ⌊H/p⌋·⌊W/p⌋ + P` tokens and `M = 3·H·W`:
//!
//! ```text
//! JER, per copy of the image in a backward chunk (autodiff keeps every block's tensors):
//!     L · (heads · T² + 4 · T · D) + 2 · M            f32 values
//!     (attention probabilities, materialised under autodiff; the block's input, its
//!      attention output, its MLP input and output; the input copy and its gradient)
//! JER with the shared backward (bindscope_models::linearize: one forward pass at batch 1 kept
//! once, then a chunk of cotangents through one block at a time):
//!     L · (heads · T² + 4 · T · D) + chunk · (heads · T² + T · D + 2 · M)
//!     (of the kept forward pass, the attention probabilities, q, k, v and one normalised
//!      input of every block — it keeps more; per cotangent, one block's attention-score
//!      gradient and its input gradient, the pixel gradient and its flattening)
//! JER, on the host, once per image:
//!     M + k · M            (output sketch: the probe and the k × M sketch)
//!     M + 5 · k · M        (input sketch: the probe, V in f64 twice while orthonormalised, V in f32)
//! forward pass without gradients (binding, geometry), per image of a batch:
//!     M + 2 · T · D        f32 values (the pixels, one block's input and output)
//! rendering a scene (binding), per image of a batch:
//!     M bytes (u8 canvas) + M f32 values (the preprocessed pixels)
//! ```
//!
//! On the CPU the device tensors live in host memory too, so everything is compared with the
//! host's available memory ([`available_bytes`]: `MemAvailable`, or the cgroup's limit less
//! its resident memory when that is smaller, through the `sysinfo` crate); on a GPU only the
//! host part is checked (a device that runs out of memory reports it as an error:
//! [`bindscope_core::device`]).

use anyhow::{Result, bail};
use bindscope_models::VisionEncoder;

/// Bytes of an f32.
const F32: f64 = 4.0;

/// What the estimates need to know of a vision encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncoderShape {
    /// Blocks `L`.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Hidden size `D`.
    pub hidden: usize,
    /// Patch size `p` in pixels.
    pub patch: usize,
    /// Prefix tokens `P` (CLS, registers).
    pub prefix: usize,
}

impl EncoderShape {
    /// The shape of `model` ([`VisionEncoder::info`], [`VisionEncoder::num_prefix_tokens`]).
    pub fn of(model: &dyn VisionEncoder) -> Self {
        let info = model.info();
        Self {
            layers: info.num_layers,
            heads: info.num_heads,
            hidden: info.hidden_size,
            patch: info.patch_size,
            prefix: model.num_prefix_tokens(),
        }
    }

    /// The token count `⌊H/p⌋·⌊W/p⌋ + P` of an `[H, W]` input (as f64: sizes from the
    /// command line can overflow integer arithmetic).
    pub fn tokens(&self, [h, w]: [usize; 2]) -> f64 {
        let p = self.patch.max(1) as f64;
        (h as f64 / p).floor() * (w as f64 / p).floor() + self.prefix as f64
    }
}

/// Lower bound of the device memory of one JER backward chunk of `chunk` copies of an
/// `[H, W]` probe, in bytes (module docs).
pub fn jer_device_bytes(shape: &EncoderShape, size: [usize; 2], chunk: usize) -> f64 {
    let t = shape.tokens(size);
    let m = 3.0 * size[0] as f64 * size[1] as f64;
    let per_block = shape.heads as f64 * t * t + 4.0 * t * shape.hidden as f64;
    F32 * chunk as f64 * (shape.layers as f64 * per_block + 2.0 * m)
}

/// Lower bound of the device memory of one JER chunk of `chunk` cotangents through the shared
/// backward ([`crate::Backward::Shared`]; module docs), in bytes.
pub fn jer_shared_device_bytes(shape: &EncoderShape, size: [usize; 2], chunk: usize) -> f64 {
    let t = shape.tokens(size);
    let m = 3.0 * size[0] as f64 * size[1] as f64;
    let d = shape.hidden as f64;
    let heads = shape.heads as f64;
    F32 * (shape.layers as f64 * (heads * t * t + 4.0 * t * d)
        + chunk as f64 * (heads * t * t + t * d + 2.0 * m))
}

/// Lower bound of the host memory of one JER probe image with `k` directions, in bytes
/// (module docs); `input_sketch` for [`crate::Estimator::InputSketch`].
pub fn jer_host_bytes(size: [usize; 2], k: usize, input_sketch: bool) -> f64 {
    let m = 3.0 * size[0] as f64 * size[1] as f64;
    let per_direction = if input_sketch { 5.0 } else { 1.0 };
    F32 * m * (1.0 + per_direction * k as f64)
}

/// Lower bound of a forward pass without gradients over a batch of `batch` `[H, W]` inputs,
/// in bytes (module docs).
pub fn forward_bytes(shape: &EncoderShape, size: [usize; 2], batch: usize) -> f64 {
    let t = shape.tokens(size);
    let m = 3.0 * size[0] as f64 * size[1] as f64;
    F32 * batch as f64 * (m + 2.0 * t * shape.hidden as f64)
}

/// Bytes of rendering and preprocessing a batch of `batch` square scenes of side `side`
/// (module docs).
pub fn render_bytes(side: usize, batch: usize) -> f64 {
    let m = 3.0 * side as f64 * side as f64;
    batch as f64 * m * (1.0 + F32)
}

/// The memory this process can still allocate, in bytes: the host's available memory
/// (`MemAvailable`, which counts reclaimable page cache), or the cgroup's limit less its
/// resident memory when that is smaller. `None` where the platform does not say.
///
/// Not the cgroup's "free" memory (limit − usage): its usage counts the page cache, so after
/// a build or a large read it reported 1.8 GB free on a 24 GB machine with 17 GB available,
/// and refused runs that fit.
pub fn available_bytes() -> Option<u64> {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    let host = sys.available_memory();
    let cgroup = sys
        .cgroup_limits()
        .map(|c| c.total_memory.saturating_sub(c.rss));
    match (host, cgroup) {
        (0, None) => None,
        (0, Some(c)) => Some(c),
        (h, Some(c)) if c > 0 => Some(h.min(c)),
        (h, _) => Some(h),
    }
}

/// `bytes` in words: `1.5 GB`, `120 MB`, `3.2e6 TB`.
pub fn human(bytes: f64) -> String {
    const GB: f64 = 1e9;
    if bytes >= 1e6 * 1e12 {
        format!("{:.1e} TB", bytes / 1e12)
    } else if bytes >= 1e12 {
        format!("{:.1} TB", bytes / 1e12)
    } else if bytes >= GB {
        format!("{:.1} GB", bytes / GB)
    } else {
        format!("{:.0} MB", (bytes / 1e6).ceil())
    }
}

/// Refuses `needed` bytes (a lower bound) when more than `available` are needed: the message
/// says what needs them and which flags reduce it (`what`, `hint`).
///
/// # Errors
/// `needed > available`.
pub fn ensure_fits(needed: f64, available: Option<u64>, what: &str, hint: &str) -> Result<()> {
    if let Some(avail) = available
        && needed > avail as f64
    {
        bail!(
            "{what} needs at least {} of memory, {} is available: {hint}",
            human(needed),
            human(avail as f64)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIT_B16: EncoderShape = EncoderShape {
        layers: 12,
        heads: 12,
        hidden: 768,
        patch: 16,
        prefix: 1,
    };

    #[test]
    fn estimates_count_tokens_like_the_patch_convolution() {
        let v = VIT_B16;
        assert_eq!(v.tokens([224, 224]), 197.0);
        // A stride-16 convolution drops the 15-pixel remainder.
        assert_eq!(v.tokens([239, 224]), 197.0);
        // 12 · (12 · 197² + 4 · 197 · 768) + 2 · 150 528 values per copy, 8 copies.
        let want = 4.0 * 8.0 * (12.0 * (12.0 * 197.0f64.powi(2) + 4.0 * 197.0 * 768.0) + 301056.0);
        assert_eq!(jer_device_bytes(&v, [224, 224], 8), want);
        // The default run fits a laptop; the size of the issue does not fit any machine.
        assert!(jer_device_bytes(&v, [224, 224], 8) < 1e9);
        assert!(jer_device_bytes(&v, [100_000, 100_000], 8) > 1e18);
        assert_eq!(
            forward_bytes(&v, [224, 224], 2),
            4.0 * 2.0 * (150528.0 + 2.0 * 197.0 * 768.0)
        );
        assert_eq!(jer_host_bytes([2, 2], 4, false), 4.0 * 12.0 * 5.0);
        assert_eq!(jer_host_bytes([2, 2], 4, true), 4.0 * 12.0 * 21.0);
    }

    #[test]
    fn refusals_say_how_much_and_which_flags() {
        assert!(ensure_fits(1e9, Some(2_000_000_000), "x", "y").is_ok());
        assert!(
            ensure_fits(1e30, None, "x", "y").is_ok(),
            "unknown: no refusal"
        );
        let e = ensure_fits(
            1.2e11,
            Some(8_000_000_000),
            "a 100000×100000 probe",
            "reduce --image-size",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "a 100000×100000 probe needs at least 120.0 GB of memory, 8.0 GB is available: reduce --image-size"
        );
        assert_eq!(human(3.2e18), "3.2e6 TB");
        assert_eq!(human(1.2e8), "120 MB");
    }

    #[test]
    fn this_machine_reports_its_memory() {
        if cfg!(target_os = "linux") {
            assert!(available_bytes().is_some_and(|b| b > 0));
        }
    }
}
