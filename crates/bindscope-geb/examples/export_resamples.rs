//! Writes one interval's resample indices, for checking the bootstrap against another
//! implementation (`tests/fixtures/bootstrap_numpy.py` runs it):
//!
//! ```text
//! cargo run -p bindscope-geb --example export_resamples -- SEED marginal|paired GROUP N RESAMPLES OUT.safetensors
//! ```
//!
//! `OUT.safetensors` holds `indices`, `U32` `[RESAMPLES, N]` (`Resampler::export`).

use bindscope_geb::bootstrap::{self, Kind};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: export_resamples SEED marginal|paired GROUP N RESAMPLES OUT.safetensors";
    if args.len() != 6 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let number = |i: usize, what: &str| -> u64 {
        args[i].parse().unwrap_or_else(|_| {
            eprintln!(
                "{what} {:?}: expected a non-negative integer\n{usage}",
                args[i]
            );
            std::process::exit(2)
        })
    };
    let kind = match args[1].as_str() {
        "marginal" => Kind::Marginal,
        "paired" => Kind::Paired,
        other => {
            eprintln!("kind {other:?}: expected marginal or paired\n{usage}");
            std::process::exit(2)
        }
    };
    let (seed, group, n, b) = (
        number(0, "SEED"),
        number(2, "GROUP"),
        number(3, "N"),
        number(4, "RESAMPLES"),
    );
    if n == 0 || n > u64::from(u32::MAX) {
        eprintln!("N {n}: expected 1..=4294967295");
        std::process::exit(2);
    }
    if let Err(e) = bootstrap::resampler(seed, kind, group, n as usize, b as usize)
        .export(std::path::Path::new(&args[5]))
    {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
