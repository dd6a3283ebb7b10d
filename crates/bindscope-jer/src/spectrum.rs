//! Singular values of a sketch and the effective ranks computed from them.

/// Singular values (non-increasing, f64) of a row-major `rows × cols` f32 matrix, by faer's SVD
/// in f64 on the host.
///
/// # Errors
/// When the SVD does not converge (reported as a string by the caller).
pub fn singular_values(data: &[f32], rows: usize, cols: usize) -> Result<Vec<f64>, String> {
    assert_eq!(
        data.len(),
        rows * cols,
        "singular_values: {} values for a {rows}×{cols} matrix",
        data.len()
    );
    // A direct SVD in f64 (not an eigendecomposition of the f32 Gram matrix) keeps the small
    // singular values of the wide k×M sketches accurate.
    let m = faer::Mat::<f64>::from_fn(rows, cols, |i, j| data[i * cols + j] as f64);
    m.singular_values()
        .map_err(|e| format!("SVD did not converge: {e:?}"))
}

/// JER = (Σσ)² / Σσ² — the participation ratio of the singular values (paper §4.1).
/// Ranges from 1 (one direction) to k (flat spectrum). NaN for an all-zero spectrum.
pub fn jer(sigma: &[f64]) -> f64 {
    let s1: f64 = sigma.iter().sum();
    let s2: f64 = sigma.iter().map(|s| s * s).sum();
    s1 * s1 / s2
}

/// Entropy effective rank exp(H(p)), p_i = σ_i / Σσ (Roy & Vetterli, 2007). Zero σ contribute 0.
pub fn entropy_effective_rank(sigma: &[f64]) -> f64 {
    let total: f64 = sigma.iter().sum();
    let h: f64 = sigma
        .iter()
        .map(|s| s / total)
        .filter(|p| *p > 0.0)
        .map(|p| -p * p.ln())
        .sum();
    h.exp()
}

/// σ_i / σ_1.
pub fn normalized_spectrum(sigma: &[f64]) -> Vec<f64> {
    let top = sigma.first().copied().unwrap_or(0.0);
    sigma.iter().map(|s| s / top).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_of_flat_and_rank_one_spectra() {
        assert!((jer(&[2.0; 5]) - 5.0).abs() < 1e-12);
        assert!((entropy_effective_rank(&[2.0; 5]) - 5.0).abs() < 1e-12);
        assert!((jer(&[3.0, 0.0, 0.0]) - 1.0).abs() < 1e-12);
        assert!((entropy_effective_rank(&[3.0, 0.0, 0.0]) - 1.0).abs() < 1e-12);
        // (1+2)^2 / (1+4) = 9/5
        assert!((jer(&[2.0, 1.0]) - 1.8).abs() < 1e-12);
    }

    #[test]
    fn svd_of_known_matrix() {
        // diag(3, 2) padded with a zero column: singular values 3, 2.
        let s = singular_values(&[3.0, 0.0, 0.0, 0.0, 2.0, 0.0], 2, 3).unwrap();
        assert!(
            (s[0] - 3.0).abs() < 1e-12 && (s[1] - 2.0).abs() < 1e-12,
            "{s:?}"
        );
        // Rotation invariance: [[1, 1], [1, -1]] has singular values √2, √2.
        let s = singular_values(&[1.0, 1.0, 1.0, -1.0], 2, 2).unwrap();
        assert!(
            (s[0] - 2f64.sqrt()).abs() < 1e-12 && (s[1] - 2f64.sqrt()).abs() < 1e-12,
            "{s:?}"
        );
    }
}
