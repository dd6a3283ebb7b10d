//! `experiments zoo --list`: the encoders of a registry (`bindscope_binding::zoo`) — label,
//! architecture, objective family, source, file format, output used, embedding dimension — with
//! whether their weights are here (offline: `--weights-dir`, then the Hugging Face cache) and
//! the parameter count of every row a `probe-all --zoo` run has finished under `--out`.

use anyhow::{Result, bail};
use bindscope_binding::study::zoo::{Located, locate};
use bindscope_binding::zoo::{Source, zoo};
use bindscope_core::run::runs_root;
use std::path::PathBuf;

/// Arguments of `experiments zoo`.
#[derive(clap::Args, Debug)]
pub struct ZooArgs {
    /// Print the registry (the only action so far).
    #[arg(long)]
    list: bool,
    /// Which registry: jer21 (the JER / binding study's Table 3, and the rows bindscope adds).
    #[arg(long, default_value = "jer21")]
    zoo: String,
    /// Where `probe-all --zoo --weights-dir` would look for checkpoints.
    #[arg(long, value_name = "DIR")]
    weights_dir: Option<PathBuf>,
    /// The `probe-all --zoo` output directory to read finished rows from (default
    /// runs/probe-all/zoo-<name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// JSON lines (one row per line) instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ZooArgs) -> Result<()> {
    if !args.list {
        bail!("give --list (experiments zoo --list)");
    }
    let rows = zoo(&args.zoo).map_err(anyhow::Error::msg)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| runs_root("probe-all").join(format!("zoo-{}", args.zoo)));
    for (i, r) in rows.iter().enumerate() {
        // Offline: listing never downloads.
        let weights = match locate(r, args.weights_dir.as_deref(), true) {
            Located::Found(spec) => format!("here ({spec})"),
            Located::Missing(_) => "missing".to_string(),
        };
        let row_json = out.join(r.slug()).join("row.json");
        let params = std::fs::read_to_string(&row_json)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["num_params"].as_u64());
        let (source, sha256) = match r.source {
            Source::Hub { id } => (id.to_string(), None),
            Source::Release { url, sha256 } => (url.to_string(), sha256),
        };
        if args.json {
            let mut v = serde_json::to_value(r)?;
            v["slug"] = r.slug().into();
            v["weights"] = weights.into();
            v["num_params"] = params.into();
            println!("{v}");
            continue;
        }
        println!(
            "{:>2}. {}{}",
            i + 1,
            r.label,
            if r.in_paper {
                ""
            } else {
                "  (added by bindscope)"
            }
        );
        println!("    architecture  {} ({})", r.architecture, r.format);
        println!("    objective     {}", r.family);
        println!("    source        {source}");
        if let Some(arch) = r.arch {
            println!(
                "    sha256        {}",
                sha256.unwrap_or("not recorded yet (check the file you download by hand)")
            );
            println!("    --arch        {arch}");
        }
        println!("    output        {} (dimension {})", r.output, r.embed_dim);
        println!(
            "    parameters    {}",
            params.map_or_else(
                || "— (counted when probe-all --zoo has run the row)".to_string(),
                |p| p.to_string()
            )
        );
        println!("    local name    {} (in --weights-dir)", r.local);
        println!("    weights       {weights}");
    }
    if !args.json {
        println!(
            "\n{} rows: {} of the paper's Table 3 (it has 21; one is not named in this \
             registry's sources), {} added. Run them all: experiments probe-all --zoo {} \
             [--weights-dir DIR] [--images DIR]",
            rows.len(),
            rows.iter().filter(|r| r.in_paper).count(),
            rows.iter().filter(|r| !r.in_paper).count(),
            args.zoo
        );
    }
    Ok(())
}
