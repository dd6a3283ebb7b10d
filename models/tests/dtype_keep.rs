//! `LoadOptions::keep_dtype` (`--dtype keep`): f16 and bf16 checkpoints of every family compute
//! in their own dtype and hand back f32 outputs close to the f32 reference.
//!
//! Each committed fixture (`tests/fixtures/<family>`) is converted to f16 and bf16 in a scratch
//! directory (every float32 tensor rounded to nearest) and run on the fixture's own inputs; the
//! outputs are compared with the f32 reference of transformers.
//!
//! # Tolerance
//! `16 u · max(1, max |reference|)`, with `u` the unit roundoff of the dtype (f16: 2⁻¹¹ ≈ 4.9e-4,
//! bf16: 2⁻⁸ ≈ 3.9e-3): 7.8e-3 and 6.3e-2 for outputs of size ≤ 1. The weights alone are
//! rounded by up to `u`, and every layer rounds again. transformers 5.24 itself (torch 2.x,
//! CPU, the model loaded with `dtype=torch.float16` / `torch.bfloat16`, inputs cast to it)
//! deviates from its own f32 outputs on these fixtures by 0.7e-3 – 4.8e-3 (f16) and
//! 5.7e-3 – 2.4e-2 (bf16) relative to `max(1, max |reference|)`, i.e. 1.5 – 10 `u`; the bound
//! leaves a factor of 1.6 – 2.6 over the worst of those. A model computing in f32 on rounded
//! weights would pass too, which is why the dtype the model holds is checked separately; one
//! that mixes dtypes panics, and one that computes garbage is off by O(1).

use crate::common::{Reference, checkpoint, device, fixture};
use bindscope_core::LoadOptions;
use bindscope_models::bert::BertModel;
use bindscope_models::clip::ClipModel;
use bindscope_models::dinov2::Dinov2Model;
use bindscope_models::registry::{load_text, load_vision};
use bindscope_models::siglip::SiglipModel;
use bindscope_models::vit::ViTModel;
use bindscope_models::vit_mae::ViTMAEModel;
use bindscope_models::{ForwardOptions, TextEncoder, VisionEncoder, VisionReadout};
use burn::prelude::*;
use burn::tensor::{DType, bf16, f16};

/// The two half-precision dtypes `keep_dtype` is for.
const HALF: [DType; 2] = [DType::F16, DType::BF16];

fn keep() -> LoadOptions {
    LoadOptions {
        keep_dtype: true,
        ..Default::default()
    }
}

/// The dtype's name as `ModelInfo::dtype` gives it.
fn name(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        _ => unreachable!(),
    }
}

/// The tolerance of the module docs, for a reference whose largest magnitude is `scale`; 4× that
/// on a GPU backend, whose half-precision kernels order and round their reductions differently
/// (ViT in f16 on wgpu / lavapipe: 8.8e-3 against the CPU bound of 7.8e-3).
fn tol(dtype: DType, scale: f32) -> f32 {
    let u = match dtype {
        DType::F16 => 2f32.powi(-11),
        DType::BF16 => 2f32.powi(-8),
        _ => unreachable!(),
    };
    let gpu = if bindscope_core::device::testing_on_accelerator() {
        4.0
    } else {
        1.0
    };
    gpu * 16.0 * u * scale.max(1.0)
}

/// The half dtypes the test device computes in (the CPU: both; wgpu on lavapipe: f16 only).
/// `keep_dtype_refuses_a_dtype_the_device_does_not_compute_in` checks the others are refused.
fn halves() -> Vec<DType> {
    HALF.into_iter()
        .filter(|d| device().supports_dtype(*d))
        .collect()
}

/// A copy of `tests/fixtures/<fixture>` (its JSON files and `model.safetensors`) in a scratch
/// directory, with every float32 tensor stored as `dtype`.
fn converted(fixture_name: &str, dtype: DType) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture(fixture_name);
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(k, t)| {
            if t.dtype() != safetensors::Dtype::F32 {
                return (k, t.dtype(), t.shape().to_vec(), t.data().to_vec());
            }
            let values = t
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            let (st_dtype, data): (_, Vec<u8>) = match dtype {
                DType::F16 => (
                    safetensors::Dtype::F16,
                    values
                        .flat_map(|v| f16::from_f32(v).to_le_bytes())
                        .collect(),
                ),
                DType::BF16 => (
                    safetensors::Dtype::BF16,
                    values
                        .flat_map(|v| bf16::from_f32(v).to_le_bytes())
                        .collect(),
                ),
                _ => unreachable!(),
            };
            (k, st_dtype, t.shape().to_vec(), data)
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(k, d, s, b)| {
            (
                k.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    std::fs::write(
        dir.path().join("model.safetensors"),
        safetensors::serialize(views, None).unwrap(),
    )
    .unwrap();
    dir
}

/// Asserts `got` is f32 and within [`tol`] of reference `key`.
fn check<const D: usize>(r: &Reference, dtype: DType, key: &str, got: Tensor<D>) {
    assert_eq!(
        got.dtype(),
        DType::F32,
        "{} {}: {key} must come back in f32",
        r.name,
        name(dtype)
    );
    let (_, expected) = r.f32(key);
    let scale = expected.iter().map(|v| v.abs()).fold(0f32, f32::max);
    r.assert_close(key, got, tol(dtype, scale));
}

/// The checks every vision model gets: the trait's readouts (fused attention), a full forward
/// with hidden states and attention probabilities (the materialised softmax), and the
/// patch tokens.
fn check_vision(
    r: &Reference,
    dtype: DType,
    model: &dyn VisionEncoder,
    pooled_key: &str,
    last_key: &str,
) {
    assert_eq!(model.info().dtype, name(dtype), "{}", r.name);
    let d = device();
    let px = || r.tensor::<4>("pixel_values", &d);
    check(
        r,
        dtype,
        pooled_key,
        model.embed(px(), VisionReadout::Pooled),
    );
    let out = model.forward_vision(px(), ForwardOptions::all());
    for (i, a) in out.attentions.as_ref().unwrap().iter().enumerate() {
        assert_eq!(a.dtype(), DType::F32, "attention map {i}");
        let [_, _, _, tk] = a.dims();
        // Rows of probabilities sum to one.
        let rows = a.clone().sum_dim(3) - 1.0;
        let worst: f32 = rows.abs().max().into_scalar();
        assert!(
            worst < 1e-2,
            "{}: attention {i} rows sum off by {worst} (T = {tk})",
            r.name
        );
    }
    for h in out.hidden_states.as_ref().unwrap() {
        assert_eq!(h.dtype(), DType::F32);
    }
    check(r, dtype, last_key, out.last_hidden_state.clone());
    let last = out.hidden_states.unwrap().pop().unwrap();
    check(
        r,
        dtype,
        pooled_key,
        model.readout(last, VisionReadout::Pooled),
    );
    let tokens = model.patch_tokens(px());
    assert_eq!(tokens.dtype(), DType::F32);
}

#[test]
fn dinov2_computes_in_f16_and_bf16() {
    for fx in ["dinov2", "dinov2_registers"] {
        for dtype in halves() {
            let dir = converted(fx, dtype);
            let ck = checkpoint(dir.path());
            let r = Reference::open(fx);
            let model = load_vision(&ck, &device(), &keep()).unwrap();
            check_vision(
                &r,
                dtype,
                &*model,
                "vision.pooler_output",
                "vision.last_hidden_state",
            );
            // Another size: the position embeddings are resampled (in f32, then cast back).
            let concrete = Dinov2Model::load(&ck, &device(), &keep()).unwrap();
            let out = concrete.forward(
                r.tensor("interp.pixel_values", &device()),
                ForwardOptions::default(),
            );
            check(&r, dtype, "interp.vision.pooler_output", out.pooler_output);
        }
    }
}

#[test]
fn vit_computes_in_f16_and_bf16() {
    for dtype in halves() {
        let dir = converted("vit", dtype);
        let ck = checkpoint(dir.path());
        let r = Reference::open("vit");
        let model = load_vision(&ck, &device(), &keep()).unwrap();
        check_vision(
            &r,
            dtype,
            &*model,
            "vision.pooler_output",
            "vision.last_hidden_state",
        );
        let concrete = ViTModel::load(&ck, &device(), &keep()).unwrap();
        let out = concrete.forward(
            r.tensor("interp.pixel_values", &device()),
            ForwardOptions::default(),
        );
        check(&r, dtype, "interp.vision.pooler_output", out.pooler_output);
    }
}

#[test]
fn vit_mae_computes_in_f16_and_bf16() {
    for dtype in halves() {
        let dir = converted("vit_mae", dtype);
        let ck = checkpoint(dir.path());
        let r = Reference::open("vit_mae");
        let model = load_vision(&ck, &device(), &keep()).unwrap();
        check_vision(
            &r,
            dtype,
            &*model,
            "vision.mean_patch",
            "vision.last_hidden_state",
        );
        let concrete = ViTMAEModel::load(&ck, &device(), &keep()).unwrap();
        let out = concrete.forward(
            r.tensor("interp.pixel_values", &device()),
            ForwardOptions::default(),
        );
        check(
            &r,
            dtype,
            "interp.vision.last_hidden_state",
            out.last_hidden_state,
        );
    }
}

/// The text checks: the trait's embedding and a full forward with attention probabilities.
fn check_text(
    r: &Reference,
    dtype: DType,
    model: &dyn TextEncoder,
    embed_key: &str,
    last_key: &str,
) {
    assert_eq!(model.info().dtype, name(dtype), "{}", r.name);
    let (ids, mask) = r.text_inputs(&device());
    check(
        r,
        dtype,
        embed_key,
        model.embed_text(ids.clone(), mask.clone()),
    );
    let out = model.forward_text(ids, mask, ForwardOptions::all());
    check(r, dtype, last_key, out.last_hidden_state);
}

#[test]
fn clip_computes_in_f16_and_bf16() {
    for dtype in halves() {
        let dir = converted("clip", dtype);
        let ck = checkpoint(dir.path());
        let r = Reference::open("clip");
        let vision = load_vision(&ck, &device(), &keep()).unwrap();
        check_vision(
            &r,
            dtype,
            &*vision,
            "image_embeds",
            "vision.last_hidden_state",
        );
        // CLIP's final norm is applied to the patch tokens outside the forward pass.
        let tokens = vision.final_norm(r.tensor("vision.last_hidden_state", &device()));
        assert_eq!(tokens.dtype(), DType::F32);
        // Causal + padding mask (the bias in the model's dtype).
        let text = load_text(&ck, &device(), &keep()).unwrap();
        check_text(&r, dtype, &*text, "text_embeds", "text.last_hidden_state");
        // Both towers at once, and the resampled positions.
        let both = ClipModel::load(&ck, &device(), &keep()).unwrap();
        let (ids, mask) = r.text_inputs(&device());
        check(&r, dtype, "text_embeds", both.text_embeds(ids, mask));
        check(
            &r,
            dtype,
            "interp.image_embeds",
            both.image_embeds(r.tensor("interp.pixel_values", &device())),
        );
    }
}

#[test]
fn siglip_computes_in_f16_and_bf16() {
    for dtype in halves() {
        let dir = converted("siglip", dtype);
        let ck = checkpoint(dir.path());
        let r = Reference::open("siglip");
        let vision = load_vision(&ck, &device(), &keep()).unwrap();
        check_vision(
            &r,
            dtype,
            &*vision,
            "image_embeds",
            "vision.last_hidden_state",
        );
        let text = load_text(&ck, &device(), &keep()).unwrap();
        check_text(&r, dtype, &*text, "text_embeds", "text.last_hidden_state");
        // With the padding mask (transformers applies it only when given).
        let both = SiglipModel::load(&ck, &device(), &keep()).unwrap();
        let (ids, mask) = r.text_inputs(&device());
        let out = both.forward_text(ids, Some(mask), ForwardOptions::all());
        check(&r, dtype, "text_masked.pooler_output", out.pooler_output);
        check(
            &r,
            dtype,
            "interp.vision.pooler_output",
            both.forward_vision(
                r.tensor("interp.pixel_values", &device()),
                ForwardOptions::default(),
            )
            .pooler_output,
        );
    }
}

#[test]
fn bert_computes_in_f16_and_bf16() {
    for dtype in halves() {
        let dir = converted("bert", dtype);
        let ck = checkpoint(dir.path());
        let r = Reference::open("bert");
        let text = load_text(&ck, &device(), &keep()).unwrap();
        check_text(
            &r,
            dtype,
            &*text,
            "sentence_embedding",
            "text.last_hidden_state",
        );
        let model = BertModel::load(&ck, &device(), &keep()).unwrap();
        let (ids, mask) = r.text_inputs(&device());
        let out = model.forward(ids, mask, None, ForwardOptions::default());
        check(&r, dtype, "text.pooler_output", out.pooler_output);
    }
}

#[test]
fn without_keep_dtype_a_half_checkpoint_computes_in_f32() {
    let dir = converted("dinov2", DType::BF16);
    let ck = checkpoint(dir.path());
    let model = load_vision(&ck, &device(), &LoadOptions::default()).unwrap();
    assert_eq!(model.info().dtype, "float32");
    // The f32 fixture, kept, stays f32.
    let model = load_vision(&checkpoint(&fixture("dinov2")), &device(), &keep()).unwrap();
    assert_eq!(model.info().dtype, "float32");
}

#[test]
fn keep_dtype_refuses_a_checkpoint_of_mixed_float_dtypes() {
    // One tensor left in float32 among bfloat16 ones.
    let dir = converted("vit", DType::BF16);
    let path = dir.path().join("model.safetensors");
    let f32_dir = fixture("vit");
    let src = std::fs::read(f32_dir.join("model.safetensors")).unwrap();
    let src = safetensors::SafeTensors::deserialize(&src).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .map(|(k, v)| {
            if k == "layernorm.weight" {
                (k.clone(), src.tensor(&k).unwrap())
            } else {
                (k, v)
            }
        })
        .collect();
    let mixed = safetensors::serialize(views, None).unwrap();
    std::fs::write(&path, mixed).unwrap();
    let err = load_vision(&checkpoint(dir.path()), &device(), &keep())
        .err()
        .expect("mixed dtypes are refused")
        .to_string();
    assert!(err.contains("--dtype keep"), "{err}");
    assert!(
        err.contains("bfloat16") && err.contains("float32") && err.contains("layernorm.weight"),
        "{err}"
    );
    assert!(err.contains("--dtype f32"), "{err}");
    // Cast to f32, the same file loads.
    load_vision(&checkpoint(dir.path()), &device(), &LoadOptions::default()).unwrap();
}

#[test]
fn keep_dtype_refuses_a_dtype_the_device_does_not_compute_in() {
    for dtype in HALF {
        let dir = converted("vit", dtype);
        let ck = checkpoint(dir.path());
        match load_vision(&ck, &device(), &keep()) {
            Ok(model) => {
                assert!(device().supports_dtype(dtype), "{dtype:?} loaded");
                assert_eq!(model.info().dtype, name(dtype));
            }
            Err(e) => {
                let e = e.to_string();
                assert!(!device().supports_dtype(dtype), "{dtype:?}: {e}");
                assert!(
                    e.contains(name(dtype))
                        && e.contains("does not compute in it")
                        && e.contains("--dtype f32"),
                    "{e}"
                );
            }
        }
    }
}

#[test]
fn decoders_compute_in_f16_and_bf16_and_generate_through_the_cache() {
    use bindscope_models::generate::{GenerateOptions, generate};
    use bindscope_models::{LmInput, registry::load_causal_lm};
    let d = device();
    for fx in ["llama_tied", "qwen2", "qwen3"] {
        let r = Reference::open(fx);
        for dtype in halves() {
            let dir = converted(fx, dtype);
            let model = load_causal_lm(&checkpoint(dir.path()), &d, &keep()).unwrap();
            assert_eq!(model.info().dtype, name(dtype), "{fx}");
            // Row 0 of the fixture's batch has no padding: its logits at every position.
            let ids = r.int_tensor::<2>("input_ids", &d);
            let [_, t] = ids.dims();
            let mut cache = model.new_cache();
            let out = model
                .forward_causal(
                    LmInput::Ids(ids.slice([0..1, 0..t])),
                    None,
                    None,
                    &mut cache,
                    ForwardOptions::all(),
                )
                .unwrap();
            assert_eq!(out.logits.dtype(), DType::F32, "{fx}: logits in f32");
            for h in out.hidden_states.as_ref().unwrap() {
                assert_eq!(h.dtype(), DType::F32);
            }
            let (shape, want) = r.f32("logits");
            let v = shape[2];
            let got = out
                .logits
                .into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .unwrap();
            let want = &want[..t * v]; // row 0
            let scale = want.iter().map(|x| x.abs()).fold(0f32, f32::max);
            let worst = got
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            let bound = tol(dtype, scale);
            println!(
                "{fx} {}: logits max abs {worst:.2e} (bound {bound:.2e})",
                name(dtype)
            );
            assert!(
                worst <= bound,
                "{fx} {}: logits max abs {worst:e}",
                name(dtype)
            );
            // Generation runs in the half dtype through the cache.
            let opts = GenerateOptions {
                max_new_tokens: 5,
                ignore_eos: true,
                ..GenerateOptions::default()
            };
            let g = generate(model.as_ref(), &[vec![5, 6, 7]], &opts, &d).unwrap();
            assert_eq!(g[0].generated_ids.len(), 5);
        }
    }
}
