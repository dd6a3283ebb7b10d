//! # bindscope-data
//!
//! Inputs for frozen encoders, reproducing the Hugging Face processors:
//! - [`image`]: decoding any readable image to RGB and preprocessing it as
//!   `preprocessor_config.json` says (resize, center crop, rescale, normalize);
//! - [`text`]: tokenization from `tokenizer.json` with each family's padding / truncation rules;
//! - [`textfile`]: the one reader of a user's text file (UTF-8 with line numbers in errors, a
//!   leading byte-order mark removed).

pub mod image;
pub mod lm;
pub mod text;
pub mod textfile;
