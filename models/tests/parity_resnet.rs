//! Parity of the native ResNet with torchvision 0.29's `ResNet` (its own `Bottleneck` /
//! `BasicBlock` and forward, narrowed 16×), on the seeded fixtures of
//! `tests/fixtures/gen/resnet.py`, loaded from the PyTorch pickles a release ships: a training
//! checkpoint (`state_dict` nested, `module.` prefix, optimizer state beside it), a bare state
//! dict and a whole pickled model. Every stage's feature map, the pooled vector and the `fc`
//! logits must match to 1e-4 max abs error, at 64×64 and at 50×70 (odd sizes exercise the
//! convolutions' and the max pool's rounding). Then the bad inputs: a missing key, an unknown
//! prefix, a pickle without tensors, a root that is no dictionary, `--arch` disagreeing.

use crate::common::{Reference, device, fixture};
use bindscope_core::{Checkpoint, LoadOptions};
use bindscope_models::resnet::{BlockKind, ResNetModel};
use bindscope_models::{ForwardOptions, VisionEncoder, VisionReadout, registry};
use burn::prelude::*;

const TOL: f32 = 1e-4;

fn pth(name: &str) -> Checkpoint {
    let path = fixture("resnet").join(name);
    Checkpoint::resolve(&path.display().to_string()).unwrap()
}

fn load(name: &str) -> ResNetModel {
    ResNetModel::load(&pth(name), &device(), &LoadOptions::default()).unwrap()
}

fn check(r: &Reference, net: &str, model: &ResNetModel) {
    for prefix in ["", "odd."] {
        let pixels = r.tensor::<4>(&format!("{prefix}pixel_values"), &device());
        let out = model.forward(
            pixels.clone(),
            ForwardOptions {
                output_hidden_states: true,
                output_attentions: false,
                attention_last_rows: None,
            },
        );
        let hidden = out.hidden_states.unwrap();
        assert_eq!(hidden.len(), 5);
        for (i, h) in hidden.into_iter().enumerate() {
            r.assert_close(&format!("{net}.{prefix}hidden_states.{i}"), h, TOL);
        }
        r.assert_close(
            &format!("{net}.{prefix}hidden_states.4"),
            out.last_hidden_state,
            TOL,
        );
        r.assert_close(&format!("{net}.{prefix}pooled"), out.pooler_output, TOL);
        for readout in [
            VisionReadout::Pooled,
            VisionReadout::Summary,
            VisionReadout::MeanPatch,
        ] {
            let e = model.embed(pixels.clone(), readout);
            r.assert_close(&format!("{net}.{prefix}pooled"), e, TOL);
        }
        match model.logits(pixels) {
            Some(l) => {
                r.assert_close(&format!("{net}.{prefix}logits"), l, TOL);
            }
            None => assert!(!r.has(&format!("{net}.{prefix}logits"))),
        }
    }
}

#[test]
fn bottleneck_training_checkpoint_matches_torchvision() {
    let r = Reference::open("resnet");
    let model = load("bottleneck.pth.tar");
    assert_eq!(model.config.block, BlockKind::Bottleneck);
    assert_eq!(model.config.layers, [2, 1, 1, 1]);
    assert_eq!(model.config.out_channels, [16, 32, 64, 128]);
    assert_eq!(model.config.num_classes, Some(5));
    check(&r, "bottleneck", &model);
}

#[test]
fn basic_state_dict_and_whole_pickled_model_match_torchvision() {
    let r = Reference::open("resnet");
    for file in ["basic.pth", "full_model.pt"] {
        let model = load(file);
        assert_eq!(model.config.block, BlockKind::Basic, "{file}");
        assert_eq!(model.config.num_classes, None, "{file}");
        check(&r, "basic", &model);
    }
}

#[test]
fn registry_infers_the_layout_and_reports_torchvision_counts() {
    // No config.json: the registry reads the architecture off the keys.
    let ckpt = pth("bottleneck.pth.tar");
    assert_eq!(registry::model_type(&ckpt).unwrap(), "resnet");
    let model = registry::load_vision(&ckpt, &device(), &LoadOptions::default()).unwrap();
    let info = model.info();
    assert_eq!((info.model_type.as_str(), info.embed_dim), ("resnet", 128));
    // sum(p.numel() for p in model.parameters()) of the fixture's torchvision module:
    // BatchNorm running statistics are buffers, not parameters.
    let (_, torchvision) = Reference::open("resnet").i64("bottleneck.num_params");
    assert_eq!(info.num_params as i64, torchvision[0]);
    // A directory holding the one pickle resolves to it too.
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bindscope-resnet-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture("resnet").join("basic.pth"), dir.join("basic.pth")).unwrap();
    let ckpt = Checkpoint::resolve(&dir.display().to_string()).unwrap();
    assert!(ckpt.is_pytorch_file());
    assert_eq!(registry::model_type(&ckpt).unwrap(), "resnet");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn batch_rows_are_independent_under_autodiff() {
    // Eval-mode BatchNorm: the gradient of image 0's embedding reaches image 0 only, and image
    // 0's embedding does not change with its batch neighbours.
    let ad = device().autodiff();
    let model = ResNetModel::load(&pth("basic.pth"), &ad, &LoadOptions::default())
        .unwrap()
        .no_grad();
    let r = Reference::open("resnet");
    let pixels = r.tensor::<4>("pixel_values", &ad).require_grad();
    let e = model.embed(pixels.clone(), VisionReadout::Pooled);
    let [_, d] = e.dims();
    let grads = e.clone().slice([0..1, 0..d]).sum().backward();
    let g = pixels.grad(&grads).unwrap();
    let [_, c, h, w] = g.dims();
    let other = g
        .clone()
        .slice([1..2, 0..c, 0..h, 0..w])
        .abs()
        .max()
        .into_scalar::<f32>();
    let own = g
        .slice([0..1, 0..c, 0..h, 0..w])
        .abs()
        .max()
        .into_scalar::<f32>();
    assert!(other == 0.0 && own > 0.0, "own {own}, other {other}");
    let alone = model.embed(
        r.tensor::<4>("pixel_values", &ad)
            .slice([0..1, 0..3, 0..64, 0..64]),
        VisionReadout::Pooled,
    );
    let diff = crate::common::max_abs_diff(alone, e.slice([0..1, 0..d]));
    assert!(diff <= 1e-6, "image 0 alone vs in a batch: {diff}");
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

fn load_err(name: &str) -> String {
    ResNetModel::load(&pth(name), &device(), &LoadOptions::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn missing_key_in_a_pth_is_named() {
    let err = load_err("missing_key.pth");
    assert!(
        err.contains("1 missing, 0 unexpected")
            && err.contains("missing key: layer2.0.bn1.running_var (float [8])")
            && err.contains("missing_key.pth"),
        "{err}"
    );
}

#[test]
fn unknown_prefix_is_named_with_what_was_expected() {
    let err = load_err("encoder_q.pth");
    assert!(
        err.contains("under the prefix 'encoder_q.'")
            && err.contains("encoder_q.layer1.0.conv1.weight")
            && err.contains("module., backbone., encoder. or model."),
        "{err}"
    );
    // The registry cannot tell the architecture either, and says so.
    let err = registry::model_type(&pth("encoder_q.pth"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("without config.json") && err.contains("under the prefix 'encoder_q.'"),
        "{err}"
    );
    // An --arch no pickle is read as is refused up front.
    let opts = LoadOptions {
        arch: Some("vit".into()),
        ..LoadOptions::default()
    };
    let err = registry::load_vision(&pth("basic.pth"), &device(), &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("--arch vit") && err.contains("resnet50"),
        "{err}"
    );
}

#[test]
fn pickles_without_a_state_dict_are_refused_with_what_was_found() {
    let err = load_err("no_tensors.pt");
    assert!(
        err.contains("no_tensors.pt") && err.contains("holds no tensors"),
        "{err}"
    );
    let err = load_err("tensor_root.pt");
    assert!(
        err.contains("tensor_root.pt")
            && err.contains("not a PyTorch checkpoint holding a state dict"),
        "{err}"
    );
}

#[test]
fn arch_is_checked_against_the_weights() {
    let ckpt = pth("bottleneck.pth.tar")
        .with_arch(Some("resnet50"))
        .unwrap();
    let err = ResNetModel::load(&ckpt, &device(), &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--arch resnet50")
            && err.contains("[2, 1, 1, 1]")
            && err.contains("--arch resnet"),
        "{err}"
    );
    // `resnet` takes any depth and width.
    let ckpt = pth("bottleneck.pth.tar").with_arch(Some("resnet")).unwrap();
    assert_eq!(registry::model_type(&ckpt).unwrap(), "resnet");
    ResNetModel::load(&ckpt, &device(), &LoadOptions::default()).unwrap();
    // A checkpoint with config.json refuses --arch.
    let hf = Checkpoint::from_dir("vit", &fixture("vit")).unwrap();
    let err = hf.with_arch(Some("resnet50")).unwrap_err().to_string();
    assert!(
        err.contains("config.json") && err.contains("--arch resnet50"),
        "{err}"
    );
}
