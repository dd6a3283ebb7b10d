//! The encoders of the JER / binding study ("Global Geometry Is Not Enough for Vision
//! Representations", Table 3), as one registry: where each checkpoint comes from, how bindscope
//! reads it and which output the study uses.
//!
//! [`JER21`] holds the rows of the paper's Table 3 that the study names — CLIP B/32, B/16,
//! L/14; SigLIP B/16; DINOv2 S/B/L; DINO S/B; MAE B/L; four self-supervised ResNet-50s (Barlow
//! Twins, VICReg, SwAV, SimCLR); ConvNeXt-B; BEiT; BEiT v2; I-JEPA; EVA-CLIP B/16 — 20 rows,
//! and two rows bindscope adds (SigLIP 2 B/16, DINOv2-S with registers), flagged
//! `in_paper: false`. The paper counts 21 encoders; the one row not listed here is not named in
//! the sources this registry was built from, and no row is guessed.
//!
//! Nothing here is a measurement: parameter counts come from the loaded model
//! (`row.json`'s `num_params`) and every metric from a run. The embedding dimension is the one
//! the checkpoint's config gives its pooled output ([`ZooEntry::embed_dim`]), checked against
//! the loaded model when a row runs.
//!
//! A row's weights are found, in order: under `--weights-dir` as [`ZooEntry::local`] (a
//! directory for Hub checkpoints, a file for `.pth` releases), then, for Hub ids, through the
//! Hugging Face cache and the Hub. The `.pth` releases are never downloaded by bindscope: the
//! listing says where the authors publish them.

use serde::Serialize;

/// Where a row's checkpoint is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// A Hugging Face Hub repository (`org/name`), transformers' or timm's layout.
    Hub {
        /// The repository id.
        id: &'static str,
    },
    /// A PyTorch pickle the authors publish outside the Hub.
    Release {
        /// Where to get it (a direct download, or the page that explains how).
        url: &'static str,
        /// The expected sha256 of the file, where recorded.
        sha256: Option<&'static str>,
    },
}

/// One encoder of the study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ZooEntry {
    /// The row's label in tables and plots (Table 3's name).
    pub label: &'static str,
    /// The architecture bindscope builds (`model_type`, or the `--arch` of a `.pth`).
    pub architecture: &'static str,
    /// The training objective's family.
    pub family: &'static str,
    /// Where the checkpoint comes from.
    pub source: Source,
    /// The file layout bindscope reads.
    pub format: &'static str,
    /// `--arch` for a `.pth` release without `config.json`.
    pub arch: Option<&'static str>,
    /// The name the checkpoint is looked up under in `--weights-dir`.
    pub local: &'static str,
    /// The output the study uses (bindscope's `pooled` readout of this architecture).
    pub output: &'static str,
    /// Dimension of that output.
    pub embed_dim: usize,
    /// Whether the row is one of the paper's Table 3 (`false`: added by bindscope).
    pub in_paper: bool,
}

const CLIP_OUT: &str = "image_embeds: visual_projection(post_layernorm(CLS))";
const CLS_LN: &str = "CLS after the final layernorm (pooler_output)";
const MAE_OUT: &str = "mean of the patch tokens after the final layernorm";
const GAP: &str = "global average pool of layer4 (2048-d, no fc)";

const fn hub(
    label: &'static str,
    architecture: &'static str,
    family: &'static str,
    id: &'static str,
    local: &'static str,
    output: &'static str,
    embed_dim: usize,
) -> ZooEntry {
    ZooEntry {
        label,
        architecture,
        family,
        source: Source::Hub { id },
        format: "transformers safetensors",
        arch: None,
        local,
        output,
        embed_dim,
        in_paper: true,
    }
}

const fn release(
    label: &'static str,
    family: &'static str,
    url: &'static str,
    local: &'static str,
) -> ZooEntry {
    ZooEntry {
        label,
        architecture: "resnet50",
        family,
        source: Source::Release { url, sha256: None },
        format: "PyTorch .pth (torchvision ResNet layout)",
        arch: Some("resnet50"),
        local,
        output: GAP,
        embed_dim: 2048,
        in_paper: true,
    }
}

/// The study's encoders (see the module docs): the paper's Table 3 rows bindscope knows, then
/// the rows it adds.
pub const JER21: &[ZooEntry] = &[
    hub(
        "CLIP ViT-B/32",
        "clip",
        "language–image contrastive",
        "openai/clip-vit-base-patch32",
        "clip-vit-base-patch32",
        CLIP_OUT,
        512,
    ),
    hub(
        "CLIP ViT-B/16",
        "clip",
        "language–image contrastive",
        "openai/clip-vit-base-patch16",
        "clip-vit-base-patch16",
        CLIP_OUT,
        512,
    ),
    hub(
        "CLIP ViT-L/14",
        "clip",
        "language–image contrastive",
        "openai/clip-vit-large-patch14",
        "clip-vit-large-patch14",
        CLIP_OUT,
        768,
    ),
    hub(
        "SigLIP ViT-B/16",
        "siglip",
        "language–image sigmoid",
        "google/siglip-base-patch16-224",
        "siglip-base-patch16-224",
        "pooler_output: the MAP head after post_layernorm",
        768,
    ),
    hub(
        "DINOv2 ViT-S/14",
        "dinov2",
        "self-distillation + masked image modelling",
        "facebook/dinov2-small",
        "dinov2-small",
        CLS_LN,
        384,
    ),
    hub(
        "DINOv2 ViT-B/14",
        "dinov2",
        "self-distillation + masked image modelling",
        "facebook/dinov2-base",
        "dinov2-base",
        CLS_LN,
        768,
    ),
    hub(
        "DINOv2 ViT-L/14",
        "dinov2",
        "self-distillation + masked image modelling",
        "facebook/dinov2-large",
        "dinov2-large",
        CLS_LN,
        1024,
    ),
    hub(
        "DINO ViT-S/16",
        "vit",
        "self-distillation",
        "facebook/dino-vits16",
        "dino-vits16",
        CLS_LN,
        384,
    ),
    hub(
        "DINO ViT-B/16",
        "vit",
        "self-distillation",
        "facebook/dino-vitb16",
        "dino-vitb16",
        CLS_LN,
        768,
    ),
    hub(
        "MAE ViT-B/16",
        "vit_mae",
        "masked image modelling (pixels)",
        "facebook/vit-mae-base",
        "vit-mae-base",
        MAE_OUT,
        768,
    ),
    hub(
        "MAE ViT-L/16",
        "vit_mae",
        "masked image modelling (pixels)",
        "facebook/vit-mae-large",
        "vit-mae-large",
        MAE_OUT,
        1024,
    ),
    release(
        "Barlow Twins ResNet-50",
        "redundancy reduction",
        "https://dl.fbaipublicfiles.com/barlowtwins/ljng/resnet50.pth",
        "barlowtwins-resnet50.pth",
    ),
    release(
        "VICReg ResNet-50",
        "variance–invariance–covariance",
        "https://dl.fbaipublicfiles.com/vicreg/resnet50.pth",
        "vicreg-resnet50.pth",
    ),
    release(
        "SwAV ResNet-50",
        "online clustering",
        "https://dl.fbaipublicfiles.com/deepcluster/swav_800ep_pretrain.pth.tar",
        "swav-resnet50.pth.tar",
    ),
    release(
        "SimCLR ResNet-50",
        "instance contrastive",
        "https://github.com/google-research/simclr (v1 ResNet-50 1×, converted to torchvision's \
         layout, e.g. with github.com/tonylins/simclr-converter)",
        "simclr-resnet50.pth",
    ),
    hub(
        "ConvNeXt-B",
        "convnext",
        "supervised (ImageNet-1k)",
        "facebook/convnext-base-224",
        "convnext-base-224",
        "pooler_output: layernorm of the global average",
        1024,
    ),
    hub(
        "BEiT ViT-B/16",
        "beit",
        "masked image modelling (dVAE tokens)",
        "microsoft/beit-base-patch16-224-pt22k",
        "beit-base-patch16-224-pt22k",
        "pooler_output: pooler.layernorm of the mean patch token",
        768,
    ),
    ZooEntry {
        format: "timm safetensors",
        ..hub(
            "BEiT v2 ViT-B/16",
            "beit",
            "masked image modelling (VQ-KD tokens)",
            "timm/beitv2_base_patch16_224.in1k_ft_in22k_in1k",
            "beitv2_base_patch16_224.in1k_ft_in22k_in1k",
            "forward_head(pre_logits=True): fc_norm of the mean patch token",
            768,
        )
    },
    hub(
        "I-JEPA ViT-H/14",
        "ijepa",
        "joint-embedding predictive",
        "facebook/ijepa_vith14_1k",
        "ijepa_vith14_1k",
        "mean of every token after the final layernorm",
        1280,
    ),
    ZooEntry {
        format: "timm safetensors",
        ..hub(
            "EVA-CLIP ViT-B/16",
            "eva",
            "language–image contrastive (EVA-02 MIM init)",
            "timm/eva02_base_patch16_clip_224.merged2b",
            "eva02_base_patch16_clip_224.merged2b",
            "head(norm(CLS)): open_clip's image embedding",
            512,
        )
    },
    ZooEntry {
        in_paper: false,
        ..hub(
            "SigLIP 2 ViT-B/16",
            "siglip",
            "language–image sigmoid + decoder losses",
            "google/siglip2-base-patch16-224",
            "siglip2-base-patch16-224",
            "pooler_output: the MAP head after post_layernorm",
            768,
        )
    },
    ZooEntry {
        in_paper: false,
        ..hub(
            "DINOv2 ViT-S/14 + registers",
            "dinov2_with_registers",
            "self-distillation + masked image modelling",
            "facebook/dinov2-with-registers-small",
            "dinov2-with-registers-small",
            CLS_LN,
            384,
        )
    },
];

/// The registries `--zoo` accepts.
pub const ZOOS: &[(&str, &[ZooEntry])] = &[("jer21", JER21)];

/// The registry named `name`.
///
/// # Errors
/// A message listing the known names.
pub fn zoo(name: &str) -> Result<&'static [ZooEntry], String> {
    ZOOS.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, rows)| *rows)
        .ok_or_else(|| {
            format!(
                "unknown zoo '{name}': expected one of {}",
                ZOOS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            )
        })
}

impl ZooEntry {
    /// The run directory name of this row (its label, lower-case, non-alphanumerics as `-`).
    pub fn slug(&self) -> String {
        let mut out = String::new();
        for c in self.label.chars() {
            if c.is_ascii_alphanumeric() {
                out.push(c.to_ascii_lowercase());
            } else if !out.ends_with('-') {
                out.push('-');
            }
        }
        out.trim_matches('-').to_string()
    }

    /// Where to get the weights, in words.
    pub fn where_to_get(&self) -> String {
        match self.source {
            Source::Hub { id } => format!("https://huggingface.co/{id}"),
            Source::Release { url, .. } => url.to_string(),
        }
    }

    /// The Hub id, for Hub rows.
    pub fn hub_id(&self) -> Option<&'static str> {
        match self.source {
            Source::Hub { id } => Some(id),
            Source::Release { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_distinct_and_named() {
        let mut labels: Vec<_> = JER21.iter().map(|r| r.slug()).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), JER21.len());
        let mut locals: Vec<_> = JER21.iter().map(|r| r.local).collect();
        locals.sort();
        locals.dedup();
        assert_eq!(locals.len(), JER21.len());
        assert_eq!(JER21.iter().filter(|r| r.in_paper).count(), 20);
        // Every architecture is one the model registry builds.
        for r in JER21 {
            assert!(
                bindscope_models::registry::find(r.architecture).is_some(),
                "{}: {}",
                r.label,
                r.architecture
            );
            assert_eq!(r.arch.is_some(), r.hub_id().is_none(), "{}", r.label);
        }
        assert_eq!(JER21[0].slug(), "clip-vit-b-32");
        assert!(zoo("jer21").is_ok());
        assert!(zoo("all").unwrap_err().contains("jer21"));
    }
}
