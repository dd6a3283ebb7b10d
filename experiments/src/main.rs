//! `experiments` — the bindscope studies as subcommands.
//!
//! ```text
//! cargo run --release -p experiments -- jer --model facebook/dinov2-small
//! cargo run --release -p experiments -- info --model ./my-checkpoint-dir
//! cargo run --release -p experiments -- embed --model openai/clip-vit-base-patch32 --images a.jpg b.png --out emb.safetensors
//! ```
//!
//! `--device cpu|cuda[:N]|wgpu[:N]|wgpu:integrated[:N]|wgpu:cpu` (or `BURN_DEVICE`) picks the
//! device; `cuda` and `wgpu` need the cargo features of the same name. `experiments devices`
//! lists what this build and machine can use. `geb train` also takes a comma-separated list of
//! devices (`--device cuda:0,cuda:1`) and trains data-parallel.

mod binding;
mod common;
mod cooco;
mod correlate;
mod embed;
mod finetune;
mod foveated;
mod geb;
mod generate;
mod geometry;
mod info;
mod jer;
mod probe_all;
mod saber;
mod zoo;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "experiments",
    version,
    about = "bindscope studies: what vision and vision–language embeddings keep"
)]
struct Cli {
    /// Device: cpu (burn flex), cuda[:N], wgpu (the best adapter), wgpu:N (discrete GPU N),
    /// wgpu:integrated[:N], wgpu:virtual[:N], wgpu:cpu (software adapter). `devices` lists them.
    /// `geb train` takes a comma-separated list (`cuda:0,cuda:1`): data-parallel training.
    #[arg(long, global = true, env = "BURN_DEVICE", default_value = "cpu")]
    device: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Jacobian effective rank of vision encoders (the main job).
    Jer(jer::JerArgs),
    /// Architecture, dimensions, parameter count, dtype and device of a checkpoint.
    Info(info::InfoArgs),
    /// Embed images or texts to .jsonl or .safetensors.
    Embed(embed::EmbedArgs),
    /// Text from a decoder language model (Llama, Qwen2, Qwen3): greedy or seeded sampling,
    /// chat templates, batches.
    Generate(generate::GenerateArgs),
    /// Textual attribute–object binding finetuning: triplet data, LoRA, LiNeS, PEFT export.
    Finetune(finetune::FinetuneArgs),
    // Its about text and the study design shown by `foveated --help` are `FoveatedArgs`' docs.
    Foveated(foveated::FoveatedArgs),
    /// Attribute Binding probe: shape–position binding over synthetic two-object scenes.
    Binding(binding::BindingArgs),
    /// Same/Different probe over synthetic two-object scenes.
    Samediff(binding::SameDiffArgs),
    /// Global and local geometry (G.PR, G.Iso, L.Iso) of embeddings of a folder of images.
    Geometry(geometry::GeometryArgs),
    /// One Table-3 row: JER, Same/Different, binding (three readouts), geometry → row.json.
    ProbeAll(probe_all::ProbeAllArgs),
    /// Table 2 and scatter plots from many row.json files.
    Correlate(correlate::CorrelateArgs),
    /// The study's encoders (Table 3): where each checkpoint comes from, its format, output and
    /// dimension, and whether its weights are here (`zoo --list`).
    Zoo(zoo::ZooArgs),
    /// Generative Embedding Benchmark: the mini-GEB data (`synth`), the generative readout
    /// (`train`, `eval`), the leakage audit (`audit`) and lmms-eval 0.7.3 scoring with
    /// bootstrap intervals (`score`).
    Geb(geb::GebArgs),
    /// SABER attribute–object binding benchmark: generate the items, evaluate an encoder.
    Saber(saber::SaberArgs),
    /// COOCO: object naming under scene–object congruence and noise; `prepare` writes the
    /// study's prepared images and region prompts, `score` scores answers with CLIP.
    Cooco(cooco::CoocoArgs),
    /// The devices this build and machine can use: backend, adapter name and type.
    Devices,
}

fn main() {
    bindscope_core::alloc::keep_freed_memory();
    let cli = Cli::parse();
    if let Command::Devices = cli.command {
        print_devices();
        return;
    }
    let spec = cli.device;
    // Commands that only read or write files run on the CPU whatever device is named (the name
    // must still parse).
    let needs_device = match &cli.command {
        Command::Correlate(_) | Command::Zoo(_) | Command::Devices => false,
        Command::Cooco(a) => cooco::needs_device(a),
        Command::Geb(a) => geb::needs_device(a),
        Command::Saber(a) => saber::needs_device(a),
        Command::Finetune(a) => finetune::needs_device(a),
        _ => true,
    };
    // Several devices (`cuda:0,cuda:1`) are for data-parallel training only.
    let specs: Vec<&str> = spec.split(',').collect();
    let data_parallel = matches!(&cli.command, Command::Geb(a) if geb::trains(a));
    if specs.len() > 1 {
        let refusal = if !data_parallel {
            Some("several devices are for `geb train` (data-parallel); this command runs on one")
        } else if specs.iter().any(|s| s.trim().is_empty()) {
            Some("an empty device in the list (a stray comma?)")
        } else {
            None
        };
        if let Some(why) = refusal {
            eprintln!("error: --device {spec}: {why}");
            std::process::exit(1);
        }
    }
    // Acquired before any work: a missing device leaves no run directory behind.
    let opened = if needs_device {
        bindscope_core::open_device(specs[0]).and_then(|first| {
            let replicas = specs[1..]
                .iter()
                .map(|s| bindscope_core::open_device(s))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((first, replicas))
        })
    } else {
        spec.parse::<bindscope_core::DeviceSpec>()
            .map(|_| (burn::tensor::Device::flex(), Vec::new()))
    };
    let result = opened
        .map_err(anyhow::Error::from)
        .and_then(|(device, replicas)| {
            // Where every study runs: the device and this binary's build facts.
            let ctx = common::context(&device, &spec).with_replicas(replicas.clone());
            let done = match cli.command {
                Command::Jer(a) => jer::run(a, &ctx),
                Command::Info(a) => info::run(a, &device, &spec),
                Command::Embed(a) => embed::run(a, &device),
                Command::Generate(a) => generate::run(a, &device),
                Command::Finetune(a) => finetune::run(a, &ctx),
                Command::Foveated(a) => foveated::run(a, &ctx),
                Command::Binding(a) => binding::run_binding_cmd(a, &ctx),
                Command::Samediff(a) => binding::run_samediff_cmd(a, &ctx),
                Command::Geometry(a) => geometry::run(a, &ctx),
                Command::ProbeAll(a) => probe_all::run(a, &ctx),
                Command::Correlate(a) => correlate::run(a, &ctx),
                Command::Zoo(a) => zoo::run(a),
                Command::Geb(a) => geb::run(a, &ctx),
                Command::Saber(a) => saber::run(a, &ctx),
                Command::Cooco(a) => cooco::run(a, &ctx),
                Command::Devices => unreachable!("handled above"),
            };
            // Let queued GPU work finish before the process exits: a driver still compiling a
            // kernel on its own thread when the process tears down can crash (seen with Mesa
            // lavapipe: SIGSEGV in LLVM's code generator at exit).
            let _ = device.sync();
            for r in &replicas {
                let _ = r.sync();
            }
            done
        });
    if let Err(e) = result {
        eprintln!("error: {}", error_text(&e));
        std::process::exit(1);
    }
}

/// `experiments devices`: one line per device, `SPEC  NAME  (KIND)`, then the backends this
/// binary was built without.
fn print_devices() {
    let devices = bindscope_core::device::list_devices();
    let width = devices
        .iter()
        .map(|d| d.spec.to_string().len())
        .max()
        .unwrap_or(0);
    for d in &devices {
        println!("{:<width$}  {}  ({})", d.spec.to_string(), d.name, d.kind);
    }
    for (backend, built) in [
        ("cuda", cfg!(feature = "cuda")),
        ("wgpu", cfg!(feature = "wgpu")),
    ] {
        if !built {
            println!(
                "({backend}: not in this build; rebuild with `--features {backend}` to use it)"
            );
        }
    }
}

/// The error and its causes joined by ": ", leaving out a cause whose text the message already
/// holds (many library errors print their source themselves, so `{:#}` would repeat it).
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::error_text;

    #[test]
    fn error_text_keeps_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let inner = anyhow::Error::new(io).context("a.json: no such file");
        let e = inner.context("reading the config");
        assert_eq!(error_text(&e), "reading the config: a.json: no such file");
        let e = anyhow::anyhow!("root").context("outer");
        assert_eq!(error_text(&e), "outer: root");
    }
}
