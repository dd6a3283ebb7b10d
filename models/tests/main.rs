//! Parity of every model family with its PyTorch reference on committed fixtures, one binary (each
//! module is one family or one concern: attention kernels, chat templates, dtypes, checkpoint
//! layouts, load errors, fixture provenance).
//!
//! One binary per package rather than one per file: every test binary links burn, wgpu and the
//! models, so separate binaries multiply the link time and the disk a clean build needs.

mod attention;
mod chat_template;
mod common;
mod dtype_keep;
mod fixture_meta;
mod hf5_layouts;
mod load_errors;
mod parity_beit;
mod parity_bert;
mod parity_clip;
mod parity_convnext;
mod parity_decoders;
mod parity_eva;
mod parity_llava_onevision;
mod parity_resnet;
mod parity_siglip;
mod parity_vit_family;
