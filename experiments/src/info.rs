//! `experiments info`: what a checkpoint is.

use crate::common::{self, ModelOpts};
use anyhow::Result;
use burn::tensor::Device;

/// Arguments of `experiments info`.
#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// Hugging Face id, local checkpoint directory (transformers layout, or a timm repository of BEiT / EVA-02), or PyTorch .pth/.pt file (a torchvision ResNet; see --arch).
    #[arg(long)]
    model: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model_opts: ModelOpts,
}

pub fn run(args: InfoArgs, device: &Device, device_spec: &str) -> Result<()> {
    let ckpt = common::resolve(&args.model)?;
    let loaded =
        bindscope_models::registry::load_any(&ckpt, device, &args.model_opts.load_options())?;
    let dtypes: Vec<String> = bindscope_core::load::file_dtypes(&ckpt.weights)?
        .iter()
        .map(|d| bindscope_core::load::stored_dtype_name(d))
        .collect();
    // What the weights were loaded as, from the loaded towers themselves.
    let mut loaded_dtypes: Vec<&str> = loaded.iter().map(|(_, i)| i.dtype.as_str()).collect();
    loaded_dtypes.dedup();
    let loaded_dtype = loaded_dtypes.join(", ");
    let towers: Vec<serde_json::Value> = loaded
        .iter()
        .map(|(tower, info)| serde_json::json!({"tower": tower, "info": info}))
        .collect();
    let v = serde_json::json!({
        "model": args.model,
        "files": ckpt.weights.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "file_dtypes": dtypes,
        "loaded_dtype": loaded_dtype,
        "device": common::device_json(device_spec, device),
        "towers": towers,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("model        {}", args.model);
    println!(
        "weights      {} file(s), stored as {}",
        ckpt.weights.len(),
        dtypes.join(", ")
    );
    println!("loaded as    {loaded_dtype}");
    println!(
        "device       {}: {}",
        v["device"]["spec"].as_str().unwrap_or(device_spec),
        bindscope_core::device::device_name(device)
    );
    for (tower, info) in &loaded {
        println!(
            "{tower:<12} {}: {} layers, hidden {}, {} heads, embedding {}, {} parameters, input {}",
            info.model_type,
            info.num_layers,
            info.hidden_size,
            info.num_heads,
            info.embed_dim,
            info.num_params,
            if info.patch_size > 0 {
                format!(
                    "{}×{} (patch {})",
                    info.input_size[0], info.input_size[1], info.patch_size
                )
            } else {
                format!("≤ {} tokens", info.input_size[0])
            }
        );
    }
    Ok(())
}
