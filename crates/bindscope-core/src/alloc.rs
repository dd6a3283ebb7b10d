//! Process-wide allocator settings for the CPU backend.
//!
//! burn-flex allocates a fresh buffer for every op's output and frees the inputs it no longer
//! needs, so a forward/backward pass allocates and frees its activations' size many times over.
//! glibc's defaults hand every freed block above its mmap threshold (128 KiB, growing to at
//! most 32 MiB) back to the kernel at once (`munmap`, heap trimming), and the next op
//! page-faults and zeroes a fresh buffer in again.

/// Keeps memory that the CPU backend frees inside the process: every block comes from the
/// heap (`M_MMAP_MAX = 0`, so freed blocks of any size are reused instead of unmapped), the
/// heap is trimmed only when more than 1 GiB lies free at its top, and it grows 256 MiB at a
/// time. Call it first thing in `main` (and in a bench's entry point), before any other thread
/// exists. A no-op off Linux/glibc; a value glibc rejects leaves its default.
///
/// Measured on a 2-core machine: a 506-image ViT-S/14 feature extraction went from 105 s to
/// 87 s wall (system time 16 s → 1.1 s) with the mmap threshold at 32 MiB; the GEB training
/// step (SmolLM2-135M, 8 × 128 tokens, `benches/geb_train_step.rs`), whose logits are 201 MB,
/// spent 0.5–2.2 s in its loss with the 32 MiB threshold and 0.27 s with mmap off. Numbers
/// are unchanged: only where freed memory goes differs.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; callers run it before other threads
    // exist. A rejected value (return 0) leaves glibc's default.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 256 << 20);
    }
}
