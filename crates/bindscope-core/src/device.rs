//! Run-time device selection.
//!
//! bindscope never hard-codes a backend: tensors live on a burn [`Device`] chosen from a string.
//! `cpu` is the pure-Rust `flex` backend (always compiled in); `cuda[:N]` and `wgpu[:N]` need the
//! cargo features of the same name.

use burn::tensor::Device;

/// A `--device` string that cannot be turned into a device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The spec is not one of `cpu`, `cuda[:N]`, `wgpu[:N]`.
    #[error("unknown device '{0}': expected cpu, cuda[:N] or wgpu[:N]")]
    Unknown(String),
    /// The index after `:` is not a non-negative integer.
    #[error("bad device index in '{0}': expected a non-negative integer after ':'")]
    BadIndex(String),
    /// The backend exists but this binary was built without its cargo feature.
    #[error("device '{spec}' needs bindscope built with `--features {feature}`")]
    NotCompiled {
        /// The spec as given.
        spec: String,
        /// The cargo feature that enables it.
        feature: &'static str,
    },
}

/// Parses `cpu`, `cuda`, `cuda:N`, `wgpu`, `wgpu:N` (case-insensitive) into a [`Device`].
///
/// `cpu` maps to burn's `flex` backend. `wgpu:N` is the N-th discrete GPU.
///
/// # Errors
/// [`DeviceError`] for unknown names, bad indices, or a backend not compiled in.
pub fn parse_device(spec: &str) -> Result<Device, DeviceError> {
    let lower = spec.trim().to_ascii_lowercase();
    let (name, index) = match lower.split_once(':') {
        Some((n, i)) => (
            n.to_string(),
            Some(
                i.parse::<usize>()
                    .map_err(|_| DeviceError::BadIndex(spec.to_string()))?,
            ),
        ),
        None => (lower.clone(), None),
    };
    match name.as_str() {
        "cpu" | "flex" => {
            if index.is_some_and(|i| i != 0) {
                return Err(DeviceError::BadIndex(spec.to_string()));
            }
            Ok(Device::flex())
        }
        "cuda" => {
            #[cfg(feature = "cuda")]
            {
                Ok(Device::cuda(index.unwrap_or(0)))
            }
            #[cfg(not(feature = "cuda"))]
            {
                let _ = index;
                Err(DeviceError::NotCompiled {
                    spec: spec.to_string(),
                    feature: "cuda",
                })
            }
        }
        "wgpu" => {
            #[cfg(feature = "wgpu")]
            {
                Ok(Device::wgpu(burn::tensor::DeviceKind::DiscreteGpu(
                    index.unwrap_or(0),
                )))
            }
            #[cfg(not(feature = "wgpu"))]
            {
                let _ = index;
                Err(DeviceError::NotCompiled {
                    spec: spec.to_string(),
                    feature: "wgpu",
                })
            }
        }
        _ => Err(DeviceError::Unknown(spec.to_string())),
    }
}

/// The device named by `BURN_DEVICE` if set, else the CPU (`flex`).
///
/// # Errors
/// As [`parse_device`] for the value of `BURN_DEVICE`.
pub fn device_from_env() -> Result<Device, DeviceError> {
    match std::env::var("BURN_DEVICE") {
        Ok(s) if !s.trim().is_empty() => parse_device(&s),
        _ => Ok(Device::flex()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_and_rejects_garbage() {
        assert!(parse_device("cpu").is_ok());
        assert!(parse_device("CPU").is_ok());
        assert!(matches!(parse_device("tpu"), Err(DeviceError::Unknown(_))));
        assert!(matches!(
            parse_device("cuda:x"),
            Err(DeviceError::BadIndex(_))
        ));
        assert!(matches!(
            parse_device("cpu:1"),
            Err(DeviceError::BadIndex(_))
        ));
        #[cfg(not(feature = "cuda"))]
        assert!(matches!(
            parse_device("cuda:0"),
            Err(DeviceError::NotCompiled { .. })
        ));
    }
}
