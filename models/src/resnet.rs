//! # ResNet — torchvision's `resnet18` … `resnet152`
//!
//! He et al., *Deep Residual Learning for Image Recognition* (CVPR 2016,
//! <https://arxiv.org/abs/1512.03385>), as torchvision implements it in
//! `torchvision.models.ResNet` (torchvision 0.29): the "ResNet v1.5" variant, whose bottleneck
//! puts the stride on the 3×3 convolution. This is the layout of the self-supervised ResNet-50
//! releases the JER study evaluates (Barlow Twins, VICReg, SwAV, SimCLR conversions), which come
//! as PyTorch `.pth` pickles ([`bindscope_core::pth`]) without a `config.json`.
//!
//! ```text
//! conv1 7×7/2 → bn1 → relu → maxpool 3×3/2 → layer1 … layer4 → mean over H×W → (fc)
//! Bottleneck:  relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x))))))))) + downsample(x))
//! BasicBlock:  relu(bn2(conv2(relu(bn1(conv1(x))))) + downsample(x))
//! ```
//!
//! BatchNorm runs in eval mode, from the running statistics ([`FrozenBatchNorm2d`]), on every
//! device, autodiff included: each row of a batch is computed on its own, so the Jacobian of
//! one image does not depend on the others (what the JER estimator's batched copies rely on).
//!
//! ## Config
//! There is no `config.json`: [`ResNetConfig::from_shapes`] reads the depth and widths off the
//! weights (`conv1.weight`, `layerS.B.convK.weight`, `fc.weight`), and a named architecture
//! (`--arch resnet50`) is checked against them ([`ARCHES`]). `resnet` names the layout at any
//! depth and width (the tiny test fixtures).
//!
//! ## Readout and outputs
//! The feature map of a stage, `[N, C, h, w]`, is handed out as tokens `[N, h·w, C]` (row-major
//! over `h, w`, no prefix tokens), so the studies see it as they see a ViT's patch tokens.
//! `pooler_output` and every [`VisionReadout`] is the global average pool of the last stage
//! (`avgpool` + `flatten`: 2048-d for ResNet-50), the representation the self-supervised papers
//! and the JER study evaluate; `fc` (when the checkpoint has one) is applied only by
//! [`ResNetModel::logits`]. `hidden_states` are the stem's output (after the max pool) and the
//! output of each of the four stages (5 tensors, as transformers' `ResNetModel`), each pooled
//! by [`VisionEncoder::readout`] to its own width.
//!
//! ## Keys
//! torchvision's `state_dict()` names: `conv1.weight`, `bn1.{weight,bias,running_mean,
//! running_var,num_batches_tracked}`, `layerS.B.{conv1,bn1,conv2,bn2,conv3,bn3}.*`,
//! `layerS.0.downsample.{0,1}.*` (the 1×1 convolution and its BatchNorm), `fc.{weight,bias}`.
//! `num_batches_tracked` is not used. Keys outside these (a projection head, SwAV's
//! `prototypes`) are ignored, as for one tower of a two-tower checkpoint.

use bindscope_core::{Checkpoint, LoadOptions};
use burn::module::Param;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Initializer, Linear, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::module::max_pool2d;
use burn::tensor::ops::MaxPoolOptions;
use std::collections::BTreeMap;

use crate::nn::{checkpoint_shapes, feature_map_tokens as to_tokens, linear, to_dtype, to_f32};
use crate::{EncoderOutput, ForwardOptions, ModelError, ModelInfo, VisionEncoder, VisionReadout};

/// The `model_type` of a torchvision ResNet of any depth and width (sizes read off the weights).
pub const MODEL_TYPE: &str = "resnet";

/// Residual block type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum BlockKind {
    /// `BasicBlock`: two 3×3 convolutions (ResNet-18 / 34).
    Basic,
    /// `Bottleneck`: 1×1, 3×3 (strided), 1×1 with 4× expansion (ResNet-50 / 101 / 152).
    Bottleneck,
}

/// The named torchvision architectures: `(name, block, blocks per stage)`, all with the
/// standard widths (stem 64, stage widths 64, 128, 256, 512).
pub const ARCHES: &[(&str, BlockKind, [usize; 4])] = &[
    ("resnet18", BlockKind::Basic, [2, 2, 2, 2]),
    ("resnet34", BlockKind::Basic, [3, 4, 6, 3]),
    ("resnet50", BlockKind::Bottleneck, [3, 4, 6, 3]),
    ("resnet101", BlockKind::Bottleneck, [3, 4, 23, 3]),
    ("resnet152", BlockKind::Bottleneck, [3, 8, 36, 3]),
];

/// Every `model_type` (`--arch`) this file loads: [`MODEL_TYPE`] and the names of [`ARCHES`].
pub const MODEL_TYPES: &[&str] = &[
    MODEL_TYPE,
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
];

/// BatchNorm's `eps` in torchvision's ResNet.
pub const BATCH_NORM_EPS: f64 = 1e-5;

/// The shape of a torchvision ResNet, as read off its weights.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ResNetConfig {
    /// The residual block.
    pub block: BlockKind,
    /// Blocks per stage (`layer1` … `layer4`).
    pub layers: [usize; 4],
    /// Output channels of the stem (`conv1`): 64.
    pub stem_width: usize,
    /// Inner width of each stage's blocks (the output channels of `conv1` in a block): 64, 128,
    /// 256, 512 (twice that for the wide variants).
    pub widths: [usize; 4],
    /// Output channels of each stage: the widths for `BasicBlock`, 4× the planes for
    /// `Bottleneck` (256, 512, 1024, 2048).
    pub out_channels: [usize; 4],
    /// Classes of `fc`, when the checkpoint has one.
    pub num_classes: Option<usize>,
}

impl ResNetConfig {
    /// Reads the config off a state dict's shapes (torchvision key names).
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file` when a key the layout needs is missing or has
    /// the wrong rank (no `conv1.weight`, a stage without `layerS.0.conv1.weight`).
    pub fn from_shapes(
        shapes: &BTreeMap<String, Vec<usize>>,
        file: &str,
    ) -> Result<Self, ModelError> {
        let err = |message: String| ModelError::Unsupported {
            file: file.to_string(),
            message,
        };
        let conv_out = |key: &str| -> Result<usize, ModelError> {
            match shapes.get(key) {
                Some(s) if s.len() == 4 => Ok(s[0]),
                Some(s) => Err(err(format!(
                    "{key} has shape {s:?}; a convolution weight is [out, in, kh, kw]"
                ))),
                None => Err(err(format!("no {key}: {}", describe_keys(shapes)))),
            }
        };
        let stem_width = conv_out("conv1.weight")?;
        let block = if shapes.contains_key("layer1.0.conv3.weight") {
            BlockKind::Bottleneck
        } else {
            BlockKind::Basic
        };
        let mut layers = [0; 4];
        let mut widths = [0; 4];
        let mut out_channels = [0; 4];
        for s in 0..4 {
            let stage = format!("layer{}", s + 1);
            widths[s] = conv_out(&format!("{stage}.0.conv1.weight"))?;
            layers[s] = (0..)
                .take_while(|b| shapes.contains_key(&format!("{stage}.{b}.conv1.weight")))
                .count();
            let last = match block {
                BlockKind::Basic => "conv2",
                BlockKind::Bottleneck => "conv3",
            };
            out_channels[s] = conv_out(&format!("{stage}.0.{last}.weight"))?;
        }
        // A malformed `fc.weight` is left to the strict load to report with its shape.
        let num_classes = shapes.get("fc.weight").and_then(|s| s.first().copied());
        Ok(Self {
            block,
            layers,
            stem_width,
            widths,
            out_channels,
            num_classes,
        })
    }

    /// The named architecture of [`ARCHES`] this config is, if any.
    pub fn arch_name(&self) -> Option<&'static str> {
        let planes = [64, 128, 256, 512];
        let expansion = match self.block {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        };
        let standard = self.stem_width == 64
            && self.widths == planes
            && self.out_channels == planes.map(|p| p * expansion);
        ARCHES
            .iter()
            .find(|(_, b, l)| standard && *b == self.block && *l == self.layers)
            .map(|(n, _, _)| *n)
    }

    /// Checks the config against a named architecture (`resnet50`); [`MODEL_TYPE`] accepts any.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `file`, what the weights hold and what `arch` has.
    pub fn check_arch(&self, arch: &str, file: &str) -> Result<(), ModelError> {
        if arch == MODEL_TYPE || self.arch_name() == Some(arch) {
            return Ok(());
        }
        let Some((_, block, layers)) = ARCHES.iter().find(|(n, _, _)| *n == arch) else {
            return Err(ModelError::Unsupported {
                file: file.to_string(),
                message: format!("unknown ResNet architecture '{arch}' (known: {MODEL_TYPES:?})"),
            });
        };
        Err(ModelError::Unsupported {
            file: file.to_string(),
            message: format!(
                "--arch {arch} is a {block:?} ResNet with {layers:?} blocks per stage and the \
                 standard widths; the weights hold a {:?} ResNet with {:?} blocks, stem {}, \
                 widths {:?} ({})",
                self.block,
                self.layers,
                self.stem_width,
                self.widths,
                match self.arch_name() {
                    Some(n) => format!("that is {n}"),
                    None => format!("read it as --arch {MODEL_TYPE}"),
                }
            ),
        })
    }
}

/// What a state dict without torchvision's ResNet keys holds instead: the ResNet under a
/// prefix the loader does not strip, another library's layout, or just its first keys.
pub fn describe_keys(shapes: &BTreeMap<String, Vec<usize>>) -> String {
    let expected = "expected torchvision's ResNet state dict (conv1, bn1, layer1..4, fc), \
                    at the top level or under module., backbone., encoder. or model.";
    let nested: Vec<&str> = shapes
        .keys()
        .filter_map(|k| {
            let prefix = k.strip_suffix("conv1.weight")?;
            (!prefix.is_empty() && shapes.contains_key(&format!("{prefix}layer1.0.conv1.weight")))
                .then_some(prefix)
        })
        .collect();
    if let Some(prefix) = nested.last() {
        let all = if nested.len() > 1 {
            format!(" (there are ResNets under {})", nested.join(", "))
        } else {
            String::new()
        };
        return format!(
            "the ResNet's keys are under the prefix '{prefix}' ({prefix}conv1.weight, \
             {prefix}layer1.0.conv1.weight){all}, which is not a wrapper this loader strips; \
             {expected}"
        );
    }
    let layout = match bindscope_core::load::layout_of(shapes.keys().map(String::as_str)) {
        Some(l) => format!(" (this is {l})"),
        None => String::new(),
    };
    format!(
        "{expected}; found {} keys such as {}{layout}",
        shapes.len(),
        shapes
            .keys()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The torchvision ResNet architecture a state dict's keys and shapes say it is: a name of
/// [`ARCHES`], [`MODEL_TYPE`] for other depths and widths, `None` when the keys are not
/// torchvision's ResNet layout.
pub fn infer_arch(shapes: &BTreeMap<String, Vec<usize>>) -> Option<&'static str> {
    if !shapes.contains_key("conv1.weight") || !shapes.contains_key("layer1.0.conv1.weight") {
        return None;
    }
    let config = ResNetConfig::from_shapes(shapes, "").ok()?;
    Some(config.arch_name().unwrap_or(MODEL_TYPE))
}

/// `nn.BatchNorm2d` in eval mode: `(x − running_mean) / sqrt(running_var + eps) · weight +
/// bias`, per channel. The statistics are never updated, in training or not.
#[derive(Module, Debug)]
pub struct FrozenBatchNorm2d {
    /// `weight` (γ), `[C]`.
    pub weight: Param<Tensor<1>>,
    /// `bias` (β), `[C]`.
    pub bias: Param<Tensor<1>>,
    /// `running_mean`, `[C]`.
    pub running_mean: Param<Tensor<1>>,
    /// `running_var`, `[C]`.
    pub running_var: Param<Tensor<1>>,
    /// `eps`.
    #[module(skip)]
    pub eps: f64,
}

impl FrozenBatchNorm2d {
    /// Identity statistics (mean 0, variance 1, γ 1, β 0) for `c` channels.
    pub fn new(c: usize, device: &Device) -> Self {
        let p = |v: f32| Param::from_tensor(Tensor::full([c], v, device));
        Self {
            weight: p(1.0),
            bias: p(0.0),
            running_mean: p(0.0),
            running_var: p(1.0),
            eps: BATCH_NORM_EPS,
        }
    }

    /// `[N, C, H, W]` → `[N, C, H, W]`.
    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let c = self.weight.dims()[0];
        let scale = self.weight.val() / (self.running_var.val() + self.eps).sqrt();
        let shift = self.bias.val() - self.running_mean.val() * scale.clone();
        x * scale.reshape([1, c, 1, 1]) + shift.reshape([1, c, 1, 1])
    }
}

fn conv(cin: usize, cout: usize, k: usize, stride: usize, device: &Device) -> Conv2d {
    let p = k / 2;
    Conv2dConfig::new([cin, cout], [k, k])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(p, p, p, p))
        .with_bias(false)
        .with_initializer(Initializer::Zeros)
        .init(device)
}

/// `downsample`: the 1×1 strided convolution and BatchNorm of a stage's first block (stored as
/// `downsample.0` and `downsample.1`).
#[derive(Module, Debug)]
pub struct Downsample {
    /// `downsample.0`.
    pub conv: Conv2d,
    /// `downsample.1`.
    pub bn: FrozenBatchNorm2d,
}

/// A `BasicBlock` (`conv3`/`bn3` absent) or `Bottleneck`.
#[derive(Module, Debug)]
pub struct Block {
    /// `conv1`: 1×1 (bottleneck) or 3×3 strided (basic).
    pub conv1: Conv2d,
    /// `bn1`.
    pub bn1: FrozenBatchNorm2d,
    /// `conv2`: 3×3, strided in a bottleneck.
    pub conv2: Conv2d,
    /// `bn2`.
    pub bn2: FrozenBatchNorm2d,
    /// `conv3`: the bottleneck's 1×1 expansion.
    pub conv3: Option<Conv2d>,
    /// `bn3`.
    pub bn3: Option<FrozenBatchNorm2d>,
    /// `downsample`, on a stage's first block when the stride or width changes.
    pub downsample: Option<Downsample>,
}

impl Block {
    fn new(
        kind: BlockKind,
        cin: usize,
        width: usize,
        cout: usize,
        stride: usize,
        device: &Device,
    ) -> Self {
        let downsample = (stride != 1 || cin != cout).then(|| Downsample {
            conv: conv(cin, cout, 1, stride, device),
            bn: FrozenBatchNorm2d::new(cout, device),
        });
        match kind {
            BlockKind::Basic => Self {
                conv1: conv(cin, width, 3, stride, device),
                bn1: FrozenBatchNorm2d::new(width, device),
                conv2: conv(width, cout, 3, 1, device),
                bn2: FrozenBatchNorm2d::new(cout, device),
                conv3: None,
                bn3: None,
                downsample,
            },
            BlockKind::Bottleneck => Self {
                conv1: conv(cin, width, 1, 1, device),
                bn1: FrozenBatchNorm2d::new(width, device),
                conv2: conv(width, width, 3, stride, device),
                bn2: FrozenBatchNorm2d::new(width, device),
                conv3: Some(conv(width, cout, 1, 1, device)),
                bn3: Some(FrozenBatchNorm2d::new(cout, device)),
                downsample,
            },
        }
    }

    /// `[N, Cin, H, W]` → `[N, Cout, H/s, W/s]`.
    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let identity = match &self.downsample {
            Some(d) => d.bn.forward(d.conv.forward(x.clone())),
            None => x.clone(),
        };
        let out = relu(self.bn1.forward(self.conv1.forward(x)));
        let out = self.bn2.forward(self.conv2.forward(out));
        let out = match (&self.conv3, &self.bn3) {
            (Some(c3), Some(b3)) => b3.forward(c3.forward(relu(out))),
            _ => out,
        };
        relu(out + identity)
    }
}

fn relu(x: Tensor<4>) -> Tensor<4> {
    burn::tensor::activation::relu(x)
}

/// torchvision's `ResNet`, as a frozen feature extractor.
#[derive(Module, Debug)]
pub struct ResNetModel {
    /// `conv1`: 7×7, stride 2, 3 → stem width.
    pub conv1: Conv2d,
    /// `bn1`.
    pub bn1: FrozenBatchNorm2d,
    /// `layer1`.
    pub layer1: Vec<Block>,
    /// `layer2`.
    pub layer2: Vec<Block>,
    /// `layer3`.
    pub layer3: Vec<Block>,
    /// `layer4`.
    pub layer4: Vec<Block>,
    /// `fc`, when the checkpoint has one.
    pub fc: Option<Linear>,
    /// The config the model was built from.
    #[module(skip)]
    pub config: ResNetConfig,
    /// The architecture name it was loaded as (`resnet50`, or [`MODEL_TYPE`]).
    #[module(skip)]
    pub arch: String,
}

impl ResNetModel {
    /// Builds the module tree for `config` (identity BatchNorm statistics, zero weights).
    pub fn new(config: &ResNetConfig, arch: &str, device: &Device) -> Self {
        let mut cin = config.stem_width;
        let mut stages: Vec<Vec<Block>> = Vec::with_capacity(4);
        for s in 0..4 {
            let stride = if s == 0 { 1 } else { 2 };
            let blocks = (0..config.layers[s])
                .map(|b| {
                    let block = Block::new(
                        config.block,
                        cin,
                        config.widths[s],
                        config.out_channels[s],
                        if b == 0 { stride } else { 1 },
                        device,
                    );
                    cin = config.out_channels[s];
                    block
                })
                .collect();
            stages.push(blocks);
        }
        let mut stages = stages.into_iter();
        let mut next = || stages.next().expect("four stages");
        Self {
            conv1: conv(3, config.stem_width, 7, 2, device),
            bn1: FrozenBatchNorm2d::new(config.stem_width, device),
            layer1: next(),
            layer2: next(),
            layer3: next(),
            layer4: next(),
            fc: config
                .num_classes
                .map(|k| linear(config.out_channels[3], k, true, &Initializer::Zeros, device)),
            config: config.clone(),
            arch: arch.to_string(),
        }
    }

    /// Loads a torchvision ResNet state dict (a `.pth` pickle or safetensors) strictly: every
    /// parameter and BatchNorm statistic of the layout must be present, with its shape. The
    /// architecture is `ckpt.arch` (`--arch`) when given, checked against the weights, else
    /// the one they hold.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] when the keys are not torchvision's ResNet layout or do not
    /// match `--arch`; [`ModelError::Load`] naming every missing key and every shape mismatch
    /// in the checkpoint's names.
    pub fn load(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        let file = ckpt.config.display().to_string();
        let shapes = checkpoint_shapes(ckpt)?;
        let config = ResNetConfig::from_shapes(&shapes, &file)?;
        let arch = match &ckpt.arch {
            Some(a) => {
                config.check_arch(a, &file)?;
                a.clone()
            }
            None => config.arch_name().unwrap_or(MODEL_TYPE).to_string(),
        };
        let model = Self::new(&config, &arch, device);
        load_weights(model, ckpt, opts)
    }

    /// The stem and four stages: `[N, 3, H, W]` → the five feature maps (stem after the max
    /// pool, then `layer1` … `layer4`), in the weights' dtype.
    fn features(&self, pixel_values: Tensor<4>) -> Vec<Tensor<4>> {
        let x = to_dtype(pixel_values, self.conv1.weight.dtype());
        let x = relu(self.bn1.forward(self.conv1.forward(x)));
        let x = max_pool2d(
            x,
            MaxPoolOptions::new([3, 3])
                .with_stride([2, 2])
                .with_padding_pairs([(1, 1), (1, 1)]),
        );
        let mut maps = vec![x.clone()];
        let mut x = x;
        for stage in [&self.layer1, &self.layer2, &self.layer3, &self.layer4] {
            for block in stage {
                x = block.forward(x);
            }
            maps.push(x.clone());
        }
        maps
    }

    /// Full forward pass.
    ///
    /// # Shapes
    /// `pixel_values: [N, 3, H, W]` → `last_hidden_state: [N, h·w, C]` (the last stage's
    /// map as tokens, `h = ⌈H/32⌉`-ish as the convolutions round), `pooler_output: [N, C]` (its
    /// spatial mean), `hidden_states`: 5 tensors `[N, hᵢ·wᵢ, Cᵢ]` (stem, `layer1` …
    /// `layer4`); no attentions. Returned in f32.
    pub fn forward(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        let mut maps = self.features(pixel_values);
        let last = maps.pop().expect("five maps");
        let last_hidden_state = to_tokens(last.clone());
        let pooler_output = global_pool(last);
        let hidden_states = opts.output_hidden_states.then(|| {
            maps.into_iter()
                .map(to_tokens)
                .chain(std::iter::once(last_hidden_state.clone()))
                .collect()
        });
        EncoderOutput {
            last_hidden_state,
            pooler_output,
            hidden_states,
            attentions: None,
        }
        .into_f32()
    }

    /// Channels of every BatchNorm: their running statistics are buffers, not parameters, in
    /// torchvision's parameter count (25,557,032 for ResNet-50 with `fc`).
    fn batch_norm_channels(&self) -> usize {
        let bn = |b: &FrozenBatchNorm2d| b.weight.dims()[0];
        let mut n = bn(&self.bn1);
        for block in self
            .layer1
            .iter()
            .chain(&self.layer2)
            .chain(&self.layer3)
            .chain(&self.layer4)
        {
            n += bn(&block.bn1) + bn(&block.bn2);
            n += block.bn3.as_ref().map_or(0, bn);
            n += block.downsample.as_ref().map_or(0, |d| bn(&d.bn));
        }
        n
    }

    /// `fc` applied to the pooled features: `[N, 3, H, W]` → `[N, num_classes]` (torchvision's
    /// `model(x)`), `None` when the checkpoint has no `fc`.
    pub fn logits(&self, pixel_values: Tensor<4>) -> Option<Tensor<2>> {
        let fc = self.fc.as_ref()?;
        let mut maps = self.features(pixel_values);
        let pooled = global_pool(maps.pop().expect("five maps"));
        Some(to_f32(fc.forward(pooled)))
    }
}

/// `avgpool` + `flatten`: `[N, C, h, w]` → `[N, C]`.
fn global_pool(x: Tensor<4>) -> Tensor<2> {
    let [n, c, h, w] = x.dims();
    x.reshape([n, c, h * w]).mean_dim(2).reshape([n, c])
}

fn load_weights(
    model: ResNetModel,
    ckpt: &Checkpoint,
    opts: &LoadOptions,
) -> Result<ResNetModel, ModelError> {
    let mut opts = opts.clone();
    opts.remap
        .push((r"\.downsample\.0\.".into(), ".downsample.conv.".into()));
    opts.remap
        .push((r"\.downsample\.1\.".into(), ".downsample.bn.".into()));
    crate::nn::load_module(
        model,
        ckpt,
        &opts,
        &[r"(^|\.)num_batches_tracked$"],
        &[r"^(conv1|bn1|layer[1-4]|fc)\."],
    )
}

impl VisionEncoder for ResNetModel {
    fn forward_vision(&self, pixel_values: Tensor<4>, opts: ForwardOptions) -> EncoderOutput {
        self.forward(pixel_values, opts)
    }

    fn num_prefix_tokens(&self) -> usize {
        0
    }

    /// The spatial mean of the tokens (global average pool), whatever the readout.
    fn readout(&self, hidden: Tensor<3>, _readout: VisionReadout) -> Tensor<2> {
        let [n, _, c] = hidden.dims();
        to_f32(hidden.mean_dim(1).reshape([n, c]))
    }

    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            model_type: self.arch.clone(),
            dtype: bindscope_core::load::dtype_name(self.conv1.weight.dtype()),
            hidden_size: c.out_channels[3],
            embed_dim: c.out_channels[3],
            num_layers: c.layers.iter().sum(),
            num_heads: 0,
            num_params: self.num_params() - 2 * self.batch_norm_channels(),
            input_size: [224, 224],
            patch_size: 32,
        }
    }
}
