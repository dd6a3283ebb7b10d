//! `experiments correlate runs/**/row.json`: the arguments of the paper's Table 2 and Figure 1
//! from many `probe-all` rows. The run is `bindscope_binding::correlate`.

use anyhow::Result;
use bindscope_binding::correlate::{self, CorrelateConfig};
use bindscope_core::run::{Output, RunContext};
use std::path::PathBuf;

/// Arguments of `experiments correlate`.
#[derive(clap::Args, Debug)]
pub struct CorrelateArgs {
    /// row.json files or directories holding them (searched recursively).
    #[arg(required = true, num_args = 1..)]
    rows: Vec<PathBuf>,
    /// The binding accuracy every metric is correlated with (a metric of the rows; another
    /// name is an error listing them).
    #[arg(long, default_value = "binding_cosine")]
    target: String,
    /// Covariates of the partial correlation (row fields or metrics).
    #[arg(long, value_delimiter = ',', default_value = "embed_dim,num_params")]
    covariates: Vec<String>,
    /// Predictors of the OLS regression.
    #[arg(long, value_delimiter = ',', default_value = "jer,same_diff")]
    ols: Vec<String>,
    /// Output directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: CorrelateArgs, ctx: &RunContext) -> Result<()> {
    let config = CorrelateConfig {
        rows: args.rows,
        target: args.target,
        covariates: args.covariates,
        ols: args.ols,
    };
    let output = Output::new(args.out, false);
    correlate::run(&config, &output, ctx)?;
    Ok(())
}
