//! LoRA on the attention projections of a text encoder, LiNeS layer scaling, and export as a
//! PEFT adapter and as a merged Hugging Face checkpoint.
//!
//! ## LoRA (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models",
//! <https://arxiv.org/abs/2106.09685>)
//! burn 0.22's [`Module::apply_lora`] with a [`ParamGroup`] restricted (by regex over module
//! paths, [`TunableText::lora_targets`]) to the query, key, value and attention-output weights
//! of every layer: every base parameter is frozen, and each targeted weight `W` (burn layout
//! `[in, out]`) becomes `W + (α/r)·a·b` with trainable `a: [in, r]`, `b: [r, out]`, `b = 0` at
//! the start. `a` is re-drawn from a seeded generator as PEFT's default does
//! (`kaiming_uniform_(a=√5)` on `lora_A` `[r, in]`: uniform in `±1/√in`), and every factor gets
//! a parameter id derived from its path, so optimizer state saved by one process applies in the
//! next (resume).
//!
//! ## PEFT names
//! For a targeted weight with checkpoint key `<stem>.weight` (BERT: `encoder.layer.0.attention.
//! self.query.weight`, i.e. the HF name, not the module path `…self_attn…`):
//! `base_model.model.<stem>.lora_A.weight = aᵀ` `[r, in]` and
//! `base_model.model.<stem>.lora_B.weight = (s_ℓ·b)ᵀ` `[out, r]`; PEFT computes
//! `W_hf + (lora_alpha/r)·B·A`, the transpose of ours. The LiNeS scale `s_ℓ` is folded into `B`.
//!
//! ## LiNeS (Wang et al., 2024, "LiNeS: Post-training Layer Scaling Prevents Forgetting and
//! Enhances Model Merging", <https://arxiv.org/abs/2410.17146>)
//! After training, the update of layer `ℓ = 1..L` is multiplied by
//! `s_ℓ = α + β·(ℓ−1)/(L−1)` (`α + β` when `L = 1`): shallow layers, which hold general
//! features, keep less of the finetuning update than deep ones. [`LinesConfig::default`] uses
//! `α = 0.5`, `β = 0.5` (from half of the update at the first layer to all of it at the last),
//! the single-task setting of the paper (`α + β = 1`, so the last layer keeps its full update);
//! there is no task-vector merging here, so the paper's merging coefficient `λ` is 1.

use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_models::bert::BertModel;
use bindscope_models::clip::ClipTextModel;
use bindscope_models::siglip::SiglipTextModel;
use bindscope_models::{EncoderOutput, ModelError, TextEncoder};
use burn::module::{Lora, Module, ModuleMapper, ModuleVisitor, Param, ParamGroup, ParamId};
use burn::prelude::*;
use burn::tensor::{DType, TensorData};
use std::collections::BTreeMap;
use std::path::Path;

/// A text encoder the finetuning can adapt: which weights are LoRA targets, how their module
/// paths map to checkpoint keys, and how the sentence embedding is read from a forward pass.
pub trait TunableText: Module + TextEncoder + Sized + 'static {
    /// Loads the tower strictly (the loaders of `bindscope-models`).
    ///
    /// # Errors
    /// The loader's [`ModelError`].
    fn load_tower(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError>;

    /// Regex over module paths selecting q, k, v and attention-output weights of every layer.
    fn lora_targets() -> &'static str;

    /// PEFT `target_modules` (a regex PEFT full-matches against HF module names).
    fn peft_target_modules() -> &'static str;

    /// Candidate checkpoint keys (without `.weight`) of a target's module path, most likely
    /// first; the first one present in the checkpoint is used.
    fn checkpoint_stems(path: &str) -> Vec<String>;

    /// The sentence embedding of [`TextEncoder::embed_text`], from the output of
    /// [`TextEncoder::forward_text`] (so one forward pass can give both the embedding and the
    /// attention maps) or of [`TextEncoder::forward_text_unpadded`], which the trainer uses
    /// without an attention loss: read the output only through `attention_mask`, never at a
    /// padded position.
    ///
    /// # Shapes
    /// `attention_mask: [N, T]` → `[N, E]`.
    fn embedding_from(&self, out: &EncoderOutput, attention_mask: Tensor<2, Int>) -> Tensor<2>;
}

impl TunableText for BertModel {
    fn load_tower(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        BertModel::load(ckpt, device, opts)
    }
    fn lora_targets() -> &'static str {
        r"^encoder\.layer\.\d+\.attention\.(self_attn\.(query|key|value)|output\.dense)\.weight$"
    }
    fn peft_target_modules() -> &'static str {
        r".*encoder\.layer\.\d+\.attention\.(self\.(query|key|value)|output\.dense)"
    }
    fn checkpoint_stems(path: &str) -> Vec<String> {
        let stem = path
            .strip_suffix(".weight")
            .unwrap_or(path)
            .replace(".attention.self_attn.", ".attention.self.");
        vec![stem.clone(), format!("bert.{stem}")]
    }
    fn embedding_from(&self, out: &EncoderOutput, attention_mask: Tensor<2, Int>) -> Tensor<2> {
        self.pool_sentence(out.last_hidden_state.clone(), attention_mask)
    }
}

const CLIP_TARGETS: &str =
    r"^text_model\.encoder\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj|out_proj)\.weight$";
const CLIP_PEFT: &str =
    r".*text_model\.encoder\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj|out_proj)";

impl TunableText for ClipTextModel {
    fn load_tower(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        ClipTextModel::load(ckpt, device, opts)
    }
    fn lora_targets() -> &'static str {
        CLIP_TARGETS
    }
    fn peft_target_modules() -> &'static str {
        CLIP_PEFT
    }
    fn checkpoint_stems(path: &str) -> Vec<String> {
        vec![path.strip_suffix(".weight").unwrap_or(path).to_string()]
    }
    fn embedding_from(&self, out: &EncoderOutput, _attention_mask: Tensor<2, Int>) -> Tensor<2> {
        self.project(out.pooler_output.clone())
    }
}

impl TunableText for SiglipTextModel {
    fn load_tower(
        ckpt: &Checkpoint,
        device: &Device,
        opts: &LoadOptions,
    ) -> Result<Self, ModelError> {
        SiglipTextModel::load(ckpt, device, opts)
    }
    fn lora_targets() -> &'static str {
        CLIP_TARGETS
    }
    fn peft_target_modules() -> &'static str {
        CLIP_PEFT
    }
    fn checkpoint_stems(path: &str) -> Vec<String> {
        vec![path.strip_suffix(".weight").unwrap_or(path).to_string()]
    }
    fn embedding_from(&self, out: &EncoderOutput, _attention_mask: Tensor<2, Int>) -> Tensor<2> {
        out.pooler_output.clone()
    }
}

/// The LoRA hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoraConfig {
    /// Rank `r`.
    pub rank: usize,
    /// `α`: the update is scaled by `α / r`.
    pub alpha: f64,
    /// Seed of the `a` initialisation.
    pub seed: u64,
}

impl Default for LoraConfig {
    /// `r = 4`, `α = 4` (scale 1), seed 0.
    fn default() -> Self {
        Self {
            rank: 4,
            alpha: 4.0,
            seed: 0,
        }
    }
}

/// FNV-1a of a path: the stable parameter id of a LoRA factor.
fn stable_id(path: &str) -> ParamId {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    ParamId::from(h)
}

/// Which factor of an adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Factor {
    /// `a: [in, r]`.
    A,
    /// `b: [r, out]`.
    B,
}

/// Maps the LoRA factors of a module: `f(base path, factor, [rows, cols], current values)` may
/// return new values (row-major); ids are set to [`stable_id`] of the factor's path.
struct FactorMapper<F> {
    path: Vec<String>,
    f: F,
}

impl<F: FnMut(&str, Factor, [usize; 2], &Tensor<2>) -> Option<Vec<f32>>> ModuleMapper
    for FactorMapper<F>
{
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let path = self.path.join(".");
        let (base, factor) = if let Some(b) = path.strip_suffix(".lora.a") {
            (b, Factor::A)
        } else if let Some(b) = path.strip_suffix(".lora.b") {
            (b, Factor::B)
        } else {
            return param;
        };
        if D != 2 {
            return param;
        }
        let (_, tensor, mapper) = param.consume();
        let tracked = tensor.is_require_grad();
        let dims = tensor.dims();
        let shape2 = [dims[0], dims[1]];
        let t2: Tensor<2> = tensor.clone().reshape(shape2);
        let value: Tensor<D> = match (self.f)(base, factor, shape2, &t2) {
            Some(values) => {
                // A fresh leaf built with the parameter's own rank (a reshape would make it a
                // non-leaf, invisible to the optimizer).
                let device = tensor.device();
                let mut fresh = Tensor::<D>::from_data(TensorData::new(values, dims), &device);
                if device.is_autodiff() && tracked {
                    fresh = fresh.require_grad();
                }
                fresh
            }
            None => tensor,
        };
        Param::from_mapped_value(stable_id(&path), value, mapper)
    }
}

/// Collects the LoRA factors of a module as `(base path → (a, b))`.
struct FactorCollector {
    path: Vec<String>,
    found: BTreeMap<String, (Option<Tensor<2>>, Option<Tensor<2>>)>,
}

impl ModuleVisitor for FactorCollector {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if D != 2 {
            return;
        }
        let path = self.path.join(".");
        if !path.ends_with(".lora.a") && !path.ends_with(".lora.b") {
            return;
        }
        let t = param.val();
        let dims = t.dims();
        let t: Tensor<2> = t.reshape([dims[0], dims[1]]);
        if let Some(b) = path.strip_suffix(".lora.a") {
            self.found.entry(b.to_string()).or_default().0 = Some(t);
        } else if let Some(b) = path.strip_suffix(".lora.b") {
            self.found.entry(b.to_string()).or_default().1 = Some(t);
        }
    }
}

/// One adapter on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostAdapter {
    /// `a: [in, r]`, row-major.
    pub a: Vec<f32>,
    /// `b: [r, out]`, row-major.
    pub b: Vec<f32>,
    /// Input width.
    pub d_in: usize,
    /// Output width.
    pub d_out: usize,
    /// Rank.
    pub rank: usize,
    /// `α / r`.
    pub scale: f64,
}

impl HostAdapter {
    /// `scale·(a·b)ᵀ`: the update of the HF weight, `[out, in]` row-major.
    pub fn delta_hf(&self) -> Vec<f32> {
        let mut d = vec![0f32; self.d_out * self.d_in];
        for o in 0..self.d_out {
            for i in 0..self.d_in {
                let mut s = 0f64;
                for k in 0..self.rank {
                    s += f64::from(self.a[i * self.rank + k])
                        * f64::from(self.b[k * self.d_out + o]);
                }
                d[o * self.d_in + i] = (s * self.scale) as f32;
            }
        }
        d
    }
}

/// Every adapter of a model, by module path of the adapted weight.
pub type HostAdapters = BTreeMap<String, HostAdapter>;

fn host(t: Tensor<2>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32 data")
}

/// Attaches LoRA adapters to the [`TunableText::lora_targets`] of `model` (everything else
/// frozen), with seeded PEFT-style initialisation of `a` and path-derived parameter ids.
///
/// # Errors
/// When the target regex selects no weight.
pub fn apply_lora<M: TunableText>(model: M, cfg: &LoraConfig) -> Result<M, String> {
    apply_lora_to(model, cfg, M::lora_targets())
}

/// [`apply_lora`] on the weights of any module whose paths match `targets` (a regex over
/// parameter paths, e.g. `r"self_attn\.(q_proj|v_proj)\.weight$"` for a decoder LM's query and
/// value projections), everything else frozen; same initialisation and parameter ids.
///
/// # Errors
/// When `targets` is not a valid regex or selects no weight.
pub fn apply_lora_to<M: Module>(model: M, cfg: &LoraConfig, targets: &str) -> Result<M, String> {
    let group = ParamGroup::from_regex(targets).map_err(|e| format!("{e:?}"))?;
    let model = model.apply_lora(Lora::new(cfg.rank, cfg.alpha).set_param_group(group));
    let mut rng = bindscope_saber::generate::Rng::new(cfg.seed, 0x10_4a);
    let mut count = 0usize;
    let model = model.map(&mut FactorMapper {
        path: Vec::new(),
        f: |_base: &str, factor: Factor, [rows, cols]: [usize; 2], _t: &Tensor<2>| {
            match factor {
                Factor::A => {
                    count += 1;
                    // PEFT: kaiming_uniform_(lora_A.weight [r, in], a=√5) → U(−1/√in, 1/√in).
                    let bound = 1.0 / (rows as f64).sqrt();
                    Some(
                        (0..rows * cols)
                            .map(|_| {
                                ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
                                    * bound
                            })
                            .map(|x| x as f32)
                            .collect(),
                    )
                }
                Factor::B => None,
            }
        },
    });
    if count == 0 {
        return Err(format!("no weight matches the LoRA targets {targets}"));
    }
    Ok(model)
}

/// The adapters of a LoRA model on the host (`lora` gives the scale `α / r`).
pub fn adapters<M: Module>(model: &M, lora: &LoraConfig) -> HostAdapters {
    let scale = lora.alpha / lora.rank as f64;
    let mut c = FactorCollector {
        path: Vec::new(),
        found: BTreeMap::new(),
    };
    model.visit(&mut c);
    c.found
        .into_iter()
        .filter_map(|(k, (a, b))| {
            let (a, b) = (a?, b?);
            let [d_in, rank] = a.dims();
            let [_, d_out] = b.dims();
            Some((
                k,
                HostAdapter {
                    a: host(a),
                    b: host(b),
                    d_in,
                    d_out,
                    rank,
                    scale,
                },
            ))
        })
        .collect()
}

/// Replaces the factors of `model` with `values` (e.g. a checkpoint's), keeping ids.
///
/// # Errors
/// A factor of the model is missing from `values` or has another shape.
pub fn set_adapters<M: Module>(model: M, values: &HostAdapters) -> Result<M, String> {
    let mut err = None;
    let model = model.map(&mut FactorMapper {
        path: Vec::new(),
        f: |base: &str, factor: Factor, shape: [usize; 2], _t: &Tensor<2>| {
            let Some(h) = values.get(base) else {
                err.get_or_insert(format!("no saved adapter for {base}"));
                return None;
            };
            let (v, want) = match factor {
                Factor::A => (&h.a, [h.d_in, h.rank]),
                Factor::B => (&h.b, [h.rank, h.d_out]),
            };
            if want != shape {
                err.get_or_insert(format!(
                    "{base}: saved {factor:?} has shape {want:?}, model {shape:?}"
                ));
                return None;
            }
            Some(v.clone())
        },
    });
    match err {
        Some(e) => Err(e),
        None => Ok(model),
    }
}

/// Number of trainable scalars (parameters that require gradients) of a module on an autodiff
/// device.
pub fn trainable_params<M: Module>(model: &M) -> usize {
    struct Count(usize);
    impl ModuleVisitor for Count {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if param.val().is_require_grad() {
                self.0 += param.lazy_shape().num_elements();
            }
        }
    }
    let mut c = Count(0);
    model.visit(&mut c);
    c.0
}

/// The layer index (0-based) of a module path (`…layer.3.…`, `…layers.3.…`).
pub fn layer_of(path: &str) -> Option<usize> {
    let parts: Vec<&str> = path.split('.').collect();
    parts
        .windows(2)
        .find(|w| w[0] == "layer" || w[0] == "layers")
        .and_then(|w| w[1].parse().ok())
}

/// LiNeS coefficients (module docs).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinesConfig {
    /// Scale of the first layer.
    pub alpha: f64,
    /// Added linearly up to the last layer.
    pub beta: f64,
}

impl Default for LinesConfig {
    /// `α = 0.5`, `β = 0.5`.
    fn default() -> Self {
        Self {
            alpha: 0.5,
            beta: 0.5,
        }
    }
}

impl LinesConfig {
    /// No scaling (`α = 1`, `β = 0`).
    pub fn identity() -> Self {
        Self {
            alpha: 1.0,
            beta: 0.0,
        }
    }

    /// `s_ℓ = α + β·(ℓ−1)/(L−1)` for the 0-based layer `layer` (`ℓ = layer + 1`) of `L`.
    pub fn scale(&self, layer: usize, num_layers: usize) -> f64 {
        if num_layers <= 1 {
            return self.alpha + self.beta;
        }
        self.alpha + self.beta * layer as f64 / (num_layers - 1) as f64
    }
}

/// `adapters` with `b` of each layer multiplied by its LiNeS scale.
///
/// # Errors
/// An adapter path without a layer index.
pub fn lines_scaled(
    adapters: &HostAdapters,
    lines: &LinesConfig,
    num_layers: usize,
) -> Result<HostAdapters, String> {
    adapters
        .iter()
        .map(|(k, h)| {
            let l = layer_of(k).ok_or_else(|| format!("{k}: no layer index"))?;
            let s = lines.scale(l, num_layers) as f32;
            let mut h = h.clone();
            h.b.iter_mut().for_each(|x| *x *= s);
            Ok((k.clone(), h))
        })
        .collect()
}

/// Maps module paths of adapted weights to their checkpoint key stems.
///
/// # Errors
/// A path none of whose candidates is a key of the checkpoint.
pub fn checkpoint_stems<M: TunableText>(
    ckpt: &Checkpoint,
    paths: impl IntoIterator<Item = String>,
) -> Result<BTreeMap<String, String>, String> {
    let mut keys = std::collections::BTreeSet::new();
    for f in &ckpt.weights {
        keys.extend(
            bindscope_core::load::read_safetensors_shapes(f)
                .map_err(|e| e.to_string())?
                .into_keys(),
        );
    }
    paths
        .into_iter()
        .map(|p| {
            let cands = M::checkpoint_stems(&p);
            let stem = cands
                .iter()
                .find(|s| keys.contains(&format!("{s}.weight")))
                .cloned();
            stem.map(|s| (p.clone(), s))
                .ok_or_else(|| format!("{p}: none of {cands:?} is a key of the checkpoint"))
        })
        .collect()
}

fn st_err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Writes tensors (f32) to a safetensors file atomically, with `{"format": "pt"}` metadata.
///
/// # Errors
/// I/O or serialization errors.
pub fn write_f32_safetensors(
    path: &Path,
    tensors: &[(String, Vec<usize>, Vec<f32>)],
) -> Result<(), String> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(k, s, v)| {
            (
                k.clone(),
                s.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
        .iter()
        .map(|(k, s, b)| {
            Ok((
                k.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                    .map_err(st_err)?,
            ))
        })
        .collect::<Result<_, String>>()?;
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    let out = safetensors::serialize(views, Some(meta)).map_err(st_err)?;
    bindscope_core::fsutil::write_atomic(path, &out).map_err(st_err)
}

/// Tensors on the host by name: `name → (shape, values)`.
pub type HostTensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// Reads every tensor of a safetensors file as f32 (`name → (shape, values)`).
///
/// # Errors
/// I/O, format, or a dtype other than f32 / f16 / bf16.
pub fn read_f32_safetensors(path: &Path) -> Result<HostTensors, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    st.tensors()
        .into_iter()
        .map(|(k, v)| {
            let vals = to_f32(v.dtype(), v.shape(), v.data())
                .map_err(|e| format!("{}: {k}: {e}", path.display()))?;
            Ok((k, (v.shape().to_vec(), vals)))
        })
        .collect()
}

fn burn_dtype(d: safetensors::Dtype) -> Option<DType> {
    match d {
        safetensors::Dtype::F32 => Some(DType::F32),
        safetensors::Dtype::F16 => Some(DType::F16),
        safetensors::Dtype::BF16 => Some(DType::BF16),
        _ => None,
    }
}

fn to_f32(d: safetensors::Dtype, shape: &[usize], data: &[u8]) -> Result<Vec<f32>, String> {
    let dt = burn_dtype(d).ok_or_else(|| format!("dtype {d:?} is not a float type"))?;
    TensorData::from_bytes_vec(data.to_vec(), shape.to_vec(), dt)
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| format!("{e:?}"))
}

/// Saves adapters under their module paths (`<path>.lora_a` `[in, r]`, `<path>.lora_b`
/// `[r, out]`, plus the scale in the metadata-free tensor `<path>.scale` `[1]`): the training
/// checkpoint format.
///
/// # Errors
/// I/O errors.
pub fn save_host_adapters(path: &Path, adapters: &HostAdapters) -> Result<(), String> {
    let mut t = Vec::new();
    for (k, h) in adapters {
        t.push((format!("{k}.lora_a"), vec![h.d_in, h.rank], h.a.clone()));
        t.push((format!("{k}.lora_b"), vec![h.rank, h.d_out], h.b.clone()));
        t.push((format!("{k}.scale"), vec![1], vec![h.scale as f32]));
    }
    write_f32_safetensors(path, &t)
}

/// Reads what [`save_host_adapters`] wrote.
///
/// # Errors
/// I/O or format errors, incomplete adapters.
pub fn load_host_adapters(path: &Path) -> Result<HostAdapters, String> {
    let t = read_f32_safetensors(path)?;
    let mut out = HostAdapters::new();
    for (k, (shape, a)) in &t {
        let Some(base) = k.strip_suffix(".lora_a") else {
            continue;
        };
        let (bs, b) = t
            .get(&format!("{base}.lora_b"))
            .ok_or_else(|| format!("{}: {base}: no lora_b", path.display()))?;
        let (_, s) = t
            .get(&format!("{base}.scale"))
            .ok_or_else(|| format!("{}: {base}: no scale", path.display()))?;
        out.insert(
            base.to_string(),
            HostAdapter {
                a: a.clone(),
                b: b.clone(),
                d_in: shape[0],
                rank: shape[1],
                d_out: bs[1],
                scale: f64::from(s[0]),
            },
        );
    }
    Ok(out)
}

fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}

/// The PEFT tensors of `adapters` (LiNeS already applied to `b` if wanted): names
/// `base_model.model.<stem>.lora_A.weight` `[r, in]` and `…lora_B.weight` `[out, r]`, with `b`
/// multiplied by `scale / (lora_alpha / r)` so that PEFT's own scaling reproduces ours.
pub fn peft_tensors(
    adapters: &HostAdapters,
    stems: &BTreeMap<String, String>,
    lora: &LoraConfig,
) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let peft_scale = lora.alpha / lora.rank as f64;
    let mut out = Vec::new();
    for (k, h) in adapters {
        let stem = &stems[k];
        let fix = (h.scale / peft_scale) as f32;
        let bt: Vec<f32> = transpose(&h.b, h.rank, h.d_out)
            .into_iter()
            .map(|x| x * fix)
            .collect();
        out.push((
            format!("base_model.model.{stem}.lora_A.weight"),
            vec![h.rank, h.d_in],
            transpose(&h.a, h.d_in, h.rank),
        ));
        out.push((
            format!("base_model.model.{stem}.lora_B.weight"),
            vec![h.d_out, h.rank],
            bt,
        ));
    }
    out
}

/// Writes a PEFT adapter directory: `adapter_model.safetensors` ([`peft_tensors`]) and
/// `adapter_config.json`.
///
/// # Errors
/// I/O errors.
pub fn write_peft_adapter<M: TunableText>(
    dir: &Path,
    adapters: &HostAdapters,
    stems: &BTreeMap<String, String>,
    lora: &LoraConfig,
    base_model: &str,
    note: &str,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(st_err)?;
    write_f32_safetensors(
        &dir.join("adapter_model.safetensors"),
        &peft_tensors(adapters, stems, lora),
    )?;
    let config = serde_json::json!({
        "peft_type": "LORA",
        "task_type": null,
        "base_model_name_or_path": base_model,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": 0.0,
        "target_modules": M::peft_target_modules(),
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "modules_to_save": null,
        "use_rslora": false,
        "use_dora": false,
        "layers_to_transform": null,
        "layers_pattern": null,
        "rank_pattern": {},
        "alpha_pattern": {},
        "revision": null,
        "bindscope_note": note,
    });
    let text = serde_json::to_string_pretty(&config).map_err(st_err)? + "\n";
    bindscope_core::fsutil::write_atomic(&dir.join("adapter_config.json"), text.as_bytes())
        .map_err(st_err)
}

/// Writes a merged checkpoint in HF layout: `model.safetensors` with every tensor of the source
/// checkpoint under its own key and dtype, the adapted weights replaced by
/// `W + scale·(a·b)ᵀ` (computed in f32, stored back in the source dtype), and the source
/// directory's other files (config, tokenizer, sentence-transformers modules) copied.
///
/// # Errors
/// I/O or format errors, an adapted key missing from the checkpoint.
pub fn write_merged(
    src: &Checkpoint,
    out_dir: &Path,
    adapters: &HostAdapters,
    stems: &BTreeMap<String, String>,
) -> Result<(), String> {
    std::fs::create_dir_all(out_dir).map_err(st_err)?;
    let mut deltas: BTreeMap<String, Vec<f32>> = adapters
        .iter()
        .map(|(k, h)| (format!("{}.weight", stems[k]), h.delta_hf()))
        .collect();
    let files: Vec<Vec<u8>> = src
        .weights
        .iter()
        .map(|f| std::fs::read(f).map_err(|e| format!("{}: {e}", f.display())))
        .collect::<Result<_, _>>()?;
    let mut owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut borrowed: Vec<(String, safetensors::tensor::TensorView<'_>)> = Vec::new();
    for (f, bytes) in src.weights.iter().zip(&files) {
        let st = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| format!("{}: {e}", f.display()))?;
        for (k, v) in st.tensors() {
            match deltas.remove(&k) {
                Some(d) => {
                    let mut w = to_f32(v.dtype(), v.shape(), v.data())?;
                    if w.len() != d.len() {
                        return Err(format!(
                            "{k}: shape {:?} does not fit the adapter",
                            v.shape()
                        ));
                    }
                    w.iter_mut().zip(&d).for_each(|(x, y)| *x += y);
                    let dt = burn_dtype(v.dtype()).ok_or("float")?;
                    let data = TensorData::new(w, v.shape().to_vec()).convert_dtype(dt);
                    owned.push((k, v.dtype(), v.shape().to_vec(), data.as_bytes().to_vec()));
                }
                None => borrowed.push((k, v)),
            }
        }
    }
    if let Some(k) = deltas.keys().next() {
        return Err(format!("adapted weight {k} is not in the checkpoint"));
    }
    let mut all: Vec<(String, safetensors::tensor::TensorView<'_>)> = borrowed;
    for (k, dt, shape, b) in &owned {
        all.push((
            k.clone(),
            safetensors::tensor::TensorView::new(*dt, shape.clone(), b).map_err(st_err)?,
        ));
    }
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    let out = safetensors::serialize(all, Some(meta)).map_err(st_err)?;
    bindscope_core::fsutil::write_atomic(&out_dir.join("model.safetensors"), &out)
        .map_err(st_err)?;
    copy_side_files(src.dir(), out_dir, &src.weights)
}

/// Copies the non-weight files of a checkpoint directory (and small sub-directories such as
/// sentence-transformers' `1_Pooling`).
fn copy_side_files(src: &Path, dst: &Path, weights: &[std::path::PathBuf]) -> Result<(), String> {
    let skip_ext = [
        "safetensors",
        "bin",
        "h5",
        "msgpack",
        "onnx",
        "pt",
        "pth",
        "ot",
    ];
    for entry in std::fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))? {
        let entry = entry.map_err(st_err)?;
        let p = entry.path();
        let name = entry.file_name();
        if weights.iter().any(|w| w == &p) || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if p.is_dir() {
            let small = std::fs::read_dir(&p)
                .map(|d| {
                    d.flatten().all(|e| {
                        e.path().is_file() && e.metadata().is_ok_and(|m| m.len() < 1 << 20)
                    })
                })
                .unwrap_or(false);
            if small {
                copy_side_files(&p, &dst.join(&name), &[])?;
            }
            continue;
        }
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        if skip_ext.contains(&ext) || name == "model.safetensors.index.json" {
            continue;
        }
        std::fs::create_dir_all(dst).map_err(st_err)?;
        std::fs::copy(&p, dst.join(&name)).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}
