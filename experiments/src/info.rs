//! `experiments info`: what a checkpoint is.

use crate::common::{self, ModelOpts};
use anyhow::{Context, Result};
use bindscope_data::image::{AnyresProcessor, ImageProcessor, ResizeTo};
use bindscope_models::ModelInfo;
use bindscope_models::llava_onevision::{self, LlavaOnevisionForConditionalGeneration};
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
    let opts = args.model_opts.load_options();
    // LLaVA-OneVision is one model, not a tower of the registry: its SigLIP tower (with the
    // projector) and its decoder are described from the loaded composite.
    let vlm = bindscope_models::registry::model_type(&ckpt)
        .is_ok_and(|t| t == llava_onevision::MODEL_TYPE);
    let loaded = if vlm {
        llava_towers(&ckpt, device, &opts)?
    } else {
        bindscope_models::registry::load_any(&ckpt, device, &opts)?
    };
    let dtypes: Vec<String> = bindscope_core::load::file_dtypes(&ckpt.weights)?
        .iter()
        .map(|d| bindscope_core::load::stored_dtype_name(d))
        .collect();
    // What the weights were loaded as, from the loaded towers themselves.
    let mut loaded_dtypes: Vec<&str> = loaded.iter().map(|(_, i)| i.dtype.as_str()).collect();
    loaded_dtypes.dedup();
    let loaded_dtype = loaded_dtypes.join(", ");
    let processor = if vlm {
        anyres_processor(&ckpt)?.map(Processor::Anyres)
    } else {
        image_processor(&ckpt, &loaded)?.map(Processor::Plain)
    };
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
        "preprocess": processor.as_ref().map(Processor::json),
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
    if loaded.iter().any(|(tower, _)| tower == "vision") {
        println!(
            "preprocess   {}",
            processor
                .as_ref()
                .map_or_else(|| NO_PROCESSOR.to_string(), Processor::line)
        );
    }
    Ok(())
}

/// The image preprocessing of a checkpoint: one view, or LLaVA-OneVision's anyres tiling.
enum Processor {
    Plain(ImageProcessor),
    Anyres(AnyresProcessor),
}

impl Processor {
    fn json(&self) -> serde_json::Value {
        match self {
            Self::Plain(p) => processor_json(p),
            Self::Anyres(a) => {
                let mut v = processor_json(&a.base);
                v["image_grid_pinpoints"] = serde_json::json!(a.image_grid_pinpoints);
                v
            }
        }
    }

    fn line(&self) -> String {
        match self {
            Self::Plain(p) => processor_line(p),
            Self::Anyres(a) => format!(
                "{}; anyres: the base view and {}×{} tiles of the best of {} grid resolutions",
                processor_line(&a.base),
                a.tile_size(),
                a.tile_size(),
                a.image_grid_pinpoints.len()
            ),
        }
    }
}

/// LLaVA-OneVision's processor from `preprocessor_config.json`, as `cooco run` reads it;
/// `Ok(None)` without one (which `cooco run` refuses).
fn anyres_processor(ckpt: &bindscope_core::Checkpoint) -> Result<Option<AnyresProcessor>> {
    ckpt.preprocessor_config
        .as_ref()
        .map(|p| AnyresProcessor::from_file(p).context("cannot preprocess images for this model"))
        .transpose()
}

/// The two parts of a LLaVA-OneVision checkpoint as `info` lists towers: `vision` (the SigLIP
/// tower, the projector and `image_newline`; its embedding is the projector's output, the
/// decoder's width) and `decoder` (the language model and its head). Their parameter counts add
/// up to the checkpoint's.
fn llava_towers(
    ckpt: &bindscope_core::Checkpoint,
    device: &Device,
    opts: &bindscope_core::LoadOptions,
) -> Result<Vec<(String, ModelInfo)>> {
    use bindscope_models::CausalLm;
    use burn::module::Module;
    let m = LlavaOnevisionForConditionalGeneration::load(ckpt, device, opts)?;
    let v = &m.spec.vision;
    let decoder = m.language_model.info();
    let vision = ModelInfo {
        model_type: bindscope_models::siglip::VISION_MODEL_TYPE.into(),
        dtype: bindscope_core::load::dtype_name(m.vision_tower.post_layernorm.gamma.dtype()),
        hidden_size: v.hidden_size,
        embed_dim: decoder.hidden_size,
        num_layers: v.num_hidden_layers,
        num_heads: v.num_attention_heads,
        num_params: m.vision_tower.num_params()
            + m.multi_modal_projector.num_params()
            + m.image_newline.num_params(),
        input_size: [v.image_size, v.image_size],
        patch_size: v.patch_size,
    };
    Ok(vec![("vision".into(), vision), ("decoder".into(), decoder)])
}

/// What the table says of a vision checkpoint that carries no preprocessing of its own.
const NO_PROCESSOR: &str = "none (no preprocessor_config.json or timm pretrained_cfg: embed \
                            and cooco refuse images; jer --normalize model has no statistics \
                            to read)";

/// The image preprocessing `embed` (and `jer --normalize model`) would use, read and checked the
/// same way (`ImageProcessor::for_checkpoint_if_any`): `Ok(None)` for a checkpoint without a
/// vision tower or without any preprocessing config; an error, naming the file and field, for
/// one that is there but cannot be used.
fn image_processor(
    ckpt: &bindscope_core::Checkpoint,
    loaded: &[(String, ModelInfo)],
) -> Result<Option<ImageProcessor>> {
    if !loaded.iter().any(|(tower, _)| tower == "vision") {
        return Ok(None);
    }
    ImageProcessor::for_checkpoint_if_any(ckpt).context("cannot preprocess images for this model")
}

/// The processor under the names of transformers' `preprocessor_config.json`.
fn processor_json(p: &ImageProcessor) -> serde_json::Value {
    serde_json::json!({
        "kind": format!("{:?}", p.kind),
        "do_resize": p.do_resize,
        "size": match p.size {
            ResizeTo::ShortestEdge(s) => serde_json::json!({"shortest_edge": s}),
            ResizeTo::Exact { height, width } => serde_json::json!({"height": height, "width": width}),
        },
        "resample": format!("{:?}", p.resample),
        "do_center_crop": p.do_center_crop,
        "crop_size": {"height": p.crop_size.0, "width": p.crop_size.1},
        "do_rescale": p.do_rescale,
        "rescale_factor": p.rescale_factor,
        "do_normalize": p.do_normalize,
        "image_mean": p.image_mean,
        "image_std": p.image_std,
    })
}

/// One line for the table: resize, crop, rescale and normalisation in that order.
fn processor_line(p: &ImageProcessor) -> String {
    let mut steps = Vec::new();
    if p.do_resize {
        steps.push(match p.size {
            ResizeTo::ShortestEdge(s) => format!("resize short side to {s} ({:?})", p.resample),
            ResizeTo::Exact { height, width } => {
                format!("resize to {width}×{height} ({:?})", p.resample)
            }
        });
    }
    if p.do_center_crop {
        steps.push(format!("center crop {}×{}", p.crop_size.1, p.crop_size.0));
    }
    if p.do_rescale {
        // 1/255 (or any 1/n) as a fraction, which is how configs think of it.
        let n = (1.0 / p.rescale_factor).round();
        steps.push(if n > 1.0 && (n * p.rescale_factor - 1.0).abs() < 1e-12 {
            format!("rescale ×1/{n}")
        } else {
            format!("rescale ×{}", p.rescale_factor)
        });
    }
    if p.do_normalize {
        steps.push(format!(
            "normalize mean {:?} std {:?}",
            p.image_mean, p.image_std
        ));
    }
    format!("{:?}: {}", p.kind, steps.join(", "))
}
