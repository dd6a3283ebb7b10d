//! `experiments zoo --list`: the encoders of a registry (`bindscope_binding::zoo`) — label,
//! architecture, objective family, source, file format, output used, embedding dimension — with
//! whether their weights are here (offline: `--weights-dir`, then the Hugging Face cache) and
//! the parameter count of every row a `probe-all --zoo` run has finished under `--out`.

use anyhow::{Result, bail};
use bindscope_binding::study::zoo::{Located, check_weights_dir, locate};
use bindscope_binding::zoo::{Source, zoo};
use bindscope_core::run::runs_root;
use std::io::Write;
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
    check_weights_dir(args.weights_dir.as_deref())?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| runs_root("probe-all").join(format!("zoo-{}", args.zoo)));
    let mut text = String::new();
    for (i, r) in rows.iter().enumerate() {
        // Offline: listing never downloads.
        let located = locate(r, args.weights_dir.as_deref(), true);
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
            v["weights"] = serde_json::to_value(&located)?;
            v["num_params"] = params.into();
            text.push_str(&format!("{v}\n"));
            continue;
        }
        let weights = match &located {
            Located::Found { spec } => format!("here ({spec})"),
            Located::Unreadable { path, reason } => format!("{path} is not a checkpoint: {reason}"),
            Located::Missing { .. } => "missing".to_string(),
        };
        text.push_str(&format!(
            "{:>2}. {}{}\n",
            i + 1,
            r.label,
            if r.in_paper {
                ""
            } else {
                "  (added by bindscope)"
            }
        ));
        text.push_str(&format!(
            "    architecture  {} ({})\n",
            r.architecture, r.format
        ));
        text.push_str(&format!("    objective     {}\n", r.family));
        text.push_str(&format!("    source        {source}\n"));
        if let Some(arch) = r.arch {
            text.push_str(&format!(
                "    sha256        {}\n",
                sha256.unwrap_or("not recorded yet (check the file you download by hand)")
            ));
            text.push_str(&format!("    --arch        {arch}\n"));
        }
        text.push_str(&format!(
            "    output        {} (dimension {})\n",
            r.output, r.embed_dim
        ));
        text.push_str(&format!(
            "    parameters    {}\n",
            params.map_or_else(
                || "— (counted when probe-all --zoo has run the row)".to_string(),
                |p| p.to_string()
            )
        ));
        text.push_str(&format!(
            "    local name    {} (in --weights-dir)\n",
            r.local
        ));
        text.push_str(&format!("    weights       {weights}\n"));
    }
    if !args.json {
        text.push_str(&format!(
            "\n{} rows: {} of the paper's Table 3 (it has 21; one is not named in this \
             registry's sources), {} added. Run them all: experiments probe-all --zoo {} \
             [--weights-dir DIR] [--images DIR]\n",
            rows.len(),
            rows.iter().filter(|r| r.in_paper).count(),
            rows.iter().filter(|r| !r.in_paper).count(),
            args.zoo
        ));
    }
    // A closed pipe (`zoo --list | head`) ends the listing quietly.
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
