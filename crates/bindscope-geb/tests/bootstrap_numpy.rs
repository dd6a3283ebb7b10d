//! The bootstrap against numpy 2.4.6 (`tests/fixtures/bootstrap_numpy.py`, run by hand): the
//! resample indices hash to what numpy read, and the interval bounds equal numpy's
//! `np.percentile(a[idx].mean(axis=1) [- b[idx].mean(axis=1)], [2.5, 97.5])` to the bit.

use bindscope_geb::bootstrap::{self, Kind};
use serde::Deserialize;
use sha2::Digest;

#[derive(Deserialize)]
struct Case {
    name: String,
    seed: u64,
    kind: String,
    group: u64,
    n: usize,
    resamples: usize,
    a_bits: Vec<u64>,
    b_bits: Option<Vec<u64>>,
    indices_sha256: String,
    lo_bits: u64,
    hi_bits: u64,
}

#[derive(Deserialize)]
struct Fixture {
    numpy: String,
    cases: Vec<Case>,
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("fixtures/bootstrap_numpy.json")).expect("fixture parses")
}

fn floats(bits: &[u64]) -> Vec<f64> {
    bits.iter().map(|&b| f64::from_bits(b)).collect()
}

fn kind(c: &Case) -> Kind {
    match c.kind.as_str() {
        "marginal" => Kind::Marginal,
        "paired" => Kind::Paired,
        k => panic!("{}: kind {k}", c.name),
    }
}

#[test]
fn indices_are_the_ones_numpy_read() {
    let f = fixture();
    assert!(f.numpy.starts_with("2.4"), "numpy {}", f.numpy);
    for c in &f.cases {
        let idx = bootstrap::resampler(c.seed, kind(c), c.group, c.n, c.resamples).all();
        assert_eq!(idx.len(), c.n * c.resamples);
        let bytes: Vec<u8> = idx.iter().flat_map(|v| v.to_le_bytes()).collect();
        let digest = format!("{:x}", sha2::Sha256::digest(&bytes));
        assert_eq!(digest, c.indices_sha256, "{}", c.name);
    }
}

#[test]
fn intervals_equal_numpys_bits() {
    let f = fixture();
    assert!(f.cases.len() >= 6);
    for c in &f.cases {
        let a = floats(&c.a_bits);
        assert_eq!(a.len(), c.n, "{}", c.name);
        let r = bootstrap::resampler(c.seed, kind(c), c.group, c.n, c.resamples);
        let got = match &c.b_bits {
            None => r.marginal(&a),
            Some(b) => r.paired(&a, &floats(b)),
        };
        assert_eq!(
            (got.lo.to_bits(), got.hi.to_bits()),
            (c.lo_bits, c.hi_bits),
            "{}: got [{:e}, {:e}], numpy [{:e}, {:e}]",
            c.name,
            got.lo,
            got.hi,
            f64::from_bits(c.lo_bits),
            f64::from_bits(c.hi_bits)
        );
    }
}
