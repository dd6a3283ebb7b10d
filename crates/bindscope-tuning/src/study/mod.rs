//! The runs of `experiments finetune`: each sub-subcommand is a serde `Config` and a `run`
//! taking it with the [`Output`](bindscope_core::run::Output) and the
//! [`RunContext`](bindscope_core::run::RunContext), returning a typed report.
//!
//! - [`data`] (`finetune data`): generate template examples and/or import external JSONL,
//!   validate everything with one rule set (rejections, with line numbers and rules, in
//!   `data_report.json` and `rejected.jsonl`, never kept), and write the 80/10/10 split with
//!   both deferred_bind types held out (`splits/<name>.jsonl`);
//! - [`train`] (`finetune train`): measure the base model, train LoRA on q/k/v/o of every layer
//!   with the hinge triplet loss, apply LiNeS, measure the finetuned model with and without
//!   LiNeS, and export `adapter/` (PEFT, LiNeS folded in), `adapter_no_lines/` (PEFT) and
//!   `merged/` (HF layout); an interrupted run resumes from its last checkpoint.

pub mod data;
mod markdown;
pub mod measure;
pub mod train;
