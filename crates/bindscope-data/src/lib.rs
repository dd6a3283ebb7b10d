//! # bindscope-data
//!
//! Inputs for frozen encoders, reproducing the Hugging Face processors:
//! - [`image`]: decoding any readable image to RGB and preprocessing it as
//!   `preprocessor_config.json` says (resize, center crop, rescale, normalize);
//! - [`text`]: tokenization from `tokenizer.json` with each family's padding / truncation rules.

pub mod image;
pub mod text;
