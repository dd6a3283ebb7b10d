//! Run-time device selection.
//!
//! bindscope never hard-codes a backend: tensors live on a burn [`Device`] chosen from a string
//! (`--device`, or the `BURN_DEVICE` environment variable).
//!
//! | spec | device |
//! |---|---|
//! | `cpu` (or `flex`) | burn's pure-Rust `flex` backend, always compiled in |
//! | `cuda`, `cuda:N` | CUDA device N (default 0); needs the `cuda` cargo feature |
//! | `wgpu` | the best adapter wgpu offers (burn's default wgpu device: a high-performance GPU if there is one, else whatever adapter exists, a software one included) |
//! | `wgpu:N`, `wgpu:discrete[:N]` | the N-th discrete GPU |
//! | `wgpu:integrated[:N]` | the N-th integrated GPU (laptops, Apple silicon) |
//! | `wgpu:virtual[:N]` | the N-th virtual GPU (a VM's) |
//! | `wgpu:cpu` | the software adapter (Mesa lavapipe / llvmpipe, WARP) |
//!
//! Names are case-insensitive and surrounding whitespace is ignored; an empty spec is `cpu`.
//! Indices count adapters of one type on the graphics API wgpu settles on (Vulkan where it has
//! a hardware adapter, Metal on macOS), as burn's wgpu runtime counts them.
//!
//! [`parse_device`] only parses; [`open_device`] also acquires the device, so that a device that
//! does not exist is an error naming what exists, before any work starts. [`list_devices`] says
//! what this build and machine can use (`experiments devices`). Tests take their device from
//! [`test_device`].

use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

use burn::tensor::Device;

/// A `--device` string that cannot be turned into a usable device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The spec is not one of the forms in the module docs.
    #[error(
        "unknown device '{0}': expected cpu, cuda[:N], wgpu, wgpu:N (= wgpu:discrete:N), \
         wgpu:integrated[:N], wgpu:virtual[:N] or wgpu:cpu"
    )]
    Unknown(String),
    /// The index after `:` is not a non-negative integer that fits a `usize`.
    #[error("bad device index in '{0}': expected a device number 0, 1, 2, … after ':'")]
    BadIndex(String),
    /// The backend exists but this binary was built without its cargo feature.
    #[error("device '{spec}' needs bindscope built with `--features {feature}`")]
    NotCompiled {
        /// The spec as given.
        spec: String,
        /// The cargo feature that enables it.
        feature: &'static str,
    },
    /// The backend is compiled in but the machine has no such device.
    #[error("device '{spec}' is not available: {reason}; {}", available_text(.available))]
    Unavailable {
        /// The spec as given.
        spec: String,
        /// Why, in words.
        reason: String,
        /// The devices this build and machine can use, as `spec (name)` entries.
        available: Vec<String>,
    },
}

fn available_text(available: &[String]) -> String {
    format!("devices here: {}", available.join(", "))
}

/// Which wgpu adapter a `wgpu…` spec names (burn's `DeviceKind`, less `Existing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WgpuAdapter {
    /// `wgpu`: the best adapter wgpu offers (burn's `DeviceKind::DefaultDevice`).
    Best,
    /// `wgpu:N` / `wgpu:discrete:N`: the N-th discrete GPU.
    Discrete(usize),
    /// `wgpu:integrated:N`: the N-th integrated GPU.
    Integrated(usize),
    /// `wgpu:virtual:N`: the N-th virtual GPU.
    Virtual(usize),
    /// `wgpu:cpu`: the software adapter.
    Cpu,
}

/// A parsed device spec; `Display` prints its canonical form (`cpu`, `cuda:0`, `wgpu`,
/// `wgpu:1`, `wgpu:integrated:0`, `wgpu:cpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceSpec {
    /// burn's `flex` CPU backend.
    Cpu,
    /// CUDA device N.
    Cuda(usize),
    /// A wgpu adapter.
    Wgpu(WgpuAdapter),
}

impl FromStr for DeviceSpec {
    type Err = DeviceError;

    /// Case-insensitive; surrounding whitespace is ignored; an empty spec is the CPU (so an
    /// empty `BURN_DEVICE` means `cpu`, as an unset one does).
    fn from_str(spec: &str) -> Result<Self, DeviceError> {
        let lower = spec.trim().to_ascii_lowercase();
        if lower.is_empty() {
            return Ok(Self::Cpu);
        }
        let parts: Vec<&str> = lower.split(':').collect();
        let index = |s: &str| {
            s.parse::<usize>()
                .map_err(|_| DeviceError::BadIndex(spec.to_string()))
        };
        let unknown = || DeviceError::Unknown(spec.to_string());
        match parts.as_slice() {
            ["cpu" | "flex"] => Ok(Self::Cpu),
            ["cpu" | "flex", i] => match index(i)? {
                0 => Ok(Self::Cpu),
                _ => Err(DeviceError::BadIndex(spec.to_string())),
            },
            ["cuda"] => Ok(Self::Cuda(0)),
            ["cuda", i] => Ok(Self::Cuda(index(i)?)),
            ["wgpu"] => Ok(Self::Wgpu(WgpuAdapter::Best)),
            ["wgpu", "cpu"] => Ok(Self::Wgpu(WgpuAdapter::Cpu)),
            ["wgpu", "discrete"] => Ok(Self::Wgpu(WgpuAdapter::Discrete(0))),
            ["wgpu", "integrated"] => Ok(Self::Wgpu(WgpuAdapter::Integrated(0))),
            ["wgpu", "virtual"] => Ok(Self::Wgpu(WgpuAdapter::Virtual(0))),
            ["wgpu", "discrete", i] => Ok(Self::Wgpu(WgpuAdapter::Discrete(index(i)?))),
            ["wgpu", "integrated", i] => Ok(Self::Wgpu(WgpuAdapter::Integrated(index(i)?))),
            ["wgpu", "virtual", i] => Ok(Self::Wgpu(WgpuAdapter::Virtual(index(i)?))),
            ["wgpu", i] if i.starts_with(|c: char| c.is_ascii_digit() || c == '-') => {
                Ok(Self::Wgpu(WgpuAdapter::Discrete(index(i)?)))
            }
            ["wgpu", _] => Err(unknown()),
            _ => Err(unknown()),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(i) => write!(f, "cuda:{i}"),
            Self::Wgpu(WgpuAdapter::Best) => write!(f, "wgpu"),
            Self::Wgpu(WgpuAdapter::Discrete(i)) => write!(f, "wgpu:{i}"),
            Self::Wgpu(WgpuAdapter::Integrated(i)) => write!(f, "wgpu:integrated:{i}"),
            Self::Wgpu(WgpuAdapter::Virtual(i)) => write!(f, "wgpu:virtual:{i}"),
            Self::Wgpu(WgpuAdapter::Cpu) => write!(f, "wgpu:cpu"),
        }
    }
}

impl DeviceSpec {
    /// The backend's name: `cpu`, `cuda` or `wgpu`.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda(_) => "cuda",
            Self::Wgpu(_) => "wgpu",
        }
    }

    /// The burn device this spec names, without acquiring it (burn opens devices lazily, on
    /// the first tensor).
    ///
    /// # Errors
    /// [`DeviceError::NotCompiled`] when the backend's cargo feature is off.
    pub fn device(&self) -> Result<Device, DeviceError> {
        match *self {
            Self::Cpu => Ok(Device::flex()),
            Self::Cuda(i) => cuda::device(i).ok_or_else(|| self.not_compiled()),
            Self::Wgpu(a) => wgpu::device(a).ok_or_else(|| self.not_compiled()),
        }
    }

    fn not_compiled(&self) -> DeviceError {
        DeviceError::NotCompiled {
            spec: self.to_string(),
            feature: self.backend(),
        }
    }

    /// Acquires the device now, so that a missing adapter, driver or GPU is an error here
    /// rather than a panic at the first tensor. A device opened once is handed out again (burn
    /// registers a wgpu runtime once per process).
    ///
    /// # Errors
    /// [`DeviceError::NotCompiled`], or [`DeviceError::Unavailable`] naming the devices that
    /// do exist.
    pub fn open(&self) -> Result<Device, DeviceError> {
        static OPENED: Mutex<Vec<(DeviceSpec, Device)>> = Mutex::new(Vec::new());
        let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, d)) = opened.iter().find(|(s, _)| s == self) {
            return Ok(d.clone());
        }
        let device = match *self {
            Self::Cpu => Device::flex(),
            Self::Cuda(i) => cuda::open(i).map_err(|reason| self.unavailable(reason))?,
            Self::Wgpu(a) => wgpu::open(a).map_err(|reason| self.unavailable(reason))?,
        };
        opened.push((*self, device.clone()));
        Ok(device)
    }

    fn unavailable(&self, reason: Option<String>) -> DeviceError {
        match reason {
            None => self.not_compiled(),
            Some(reason) => DeviceError::Unavailable {
                spec: self.to_string(),
                reason,
                available: list_devices()
                    .iter()
                    .map(|d| format!("{} ({})", d.spec, d.name))
                    .collect(),
            },
        }
    }
}

/// Parses a device spec (see the module docs) into a [`Device`], without acquiring it.
///
/// # Errors
/// [`DeviceError`] for unknown names, bad indices, or a backend not compiled in.
pub fn parse_device(spec: &str) -> Result<Device, DeviceError> {
    spec.parse::<DeviceSpec>()?.device()
}

/// Parses a device spec and acquires the device (see [`DeviceSpec::open`]). Commands call this
/// before any work, so a missing device leaves nothing behind.
///
/// # Errors
/// As [`parse_device`], and [`DeviceError::Unavailable`] for a device the machine lacks.
pub fn open_device(spec: &str) -> Result<Device, DeviceError> {
    spec.parse::<DeviceSpec>()?.open().map_err(|e| match e {
        // Name the device as the user wrote it (`wgpu:discrete`, not `wgpu:0`).
        DeviceError::Unavailable {
            reason, available, ..
        } => DeviceError::Unavailable {
            spec: spec.trim().to_string(),
            reason,
            available,
        },
        DeviceError::NotCompiled { feature, .. } => DeviceError::NotCompiled {
            spec: spec.trim().to_string(),
            feature,
        },
        other => other,
    })
}

/// `BURN_DEVICE`, or the empty spec (the CPU) when it is unset.
fn burn_device_var() -> String {
    std::env::var("BURN_DEVICE").unwrap_or_default()
}

/// The device named by `BURN_DEVICE`, acquired; the CPU (`flex`) when unset or empty.
///
/// # Errors
/// As [`open_device`] for the value of `BURN_DEVICE`.
pub fn device_from_env() -> Result<Device, DeviceError> {
    open_device(&burn_device_var())
}

/// The spec of `BURN_DEVICE` (CPU when unset or empty).
///
/// # Errors
/// As [`DeviceSpec::from_str`].
pub fn spec_from_env() -> Result<DeviceSpec, DeviceError> {
    burn_device_var().parse()
}

/// The device the test suite runs on: `BURN_DEVICE` (e.g. `BURN_DEVICE=wgpu cargo test
/// --features wgpu`), else the CPU.
///
/// # Panics
/// With the [`DeviceError`] text when `BURN_DEVICE` names a device this build or machine
/// cannot use: a test suite asked to run on a device must not quietly run on another.
pub fn test_device() -> Device {
    device_from_env().unwrap_or_else(|e| panic!("BURN_DEVICE: {e}"))
}

/// Whether the test suite runs on something other than the CPU backend (`BURN_DEVICE` set to
/// a `cuda` or `wgpu` device). Tests use it to state a backend's own tolerance.
pub fn testing_on_accelerator() -> bool {
    !matches!(spec_from_env(), Ok(DeviceSpec::Cpu))
}

/// A computation that failed on its device, reported when its result is read back (burn runs
/// GPU work asynchronously, so an allocation or kernel failure surfaces there).
#[derive(Debug, thiserror::Error)]
#[error(
    "the device failed to compute the result: {cause}. On a GPU this is most often memory (an \
     allocation past the device's largest buffer or its free memory): a smaller batch or input \
     size helps"
)]
pub struct ReadError {
    /// burn's execution error, in its words.
    pub cause: String,
}

/// Reads a float tensor back to the host: a `[d₀, …, d_{D-1}]` tensor of any float dtype
/// becomes a row-major `Vec<f32>` of d₀·…·d_{D-1} values.
///
/// # Errors
/// [`ReadError`] when the computation behind the tensor failed on its device, instead of
/// burn's panic in `into_data`.
pub fn to_host_f32<const D: usize>(t: burn::tensor::Tensor<D>) -> Result<Vec<f32>, ReadError> {
    let data = t.try_into_data().map_err(|e| ReadError {
        cause: summary_and_root_cause(&e.to_string()),
    })?;
    data.convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| ReadError {
            cause: format!("{e:?}"),
        })
}

/// burn's execution errors carry long chains of skipped kernels; what a reader needs is the
/// first line (burn's summary) and the root cause (the last `Caused by:` entry, e.g. "can't
/// allocate buffer of size: 2519236864"), as `summary (root cause)`.
fn summary_and_root_cause(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Caused by") && !l.starts_with("skipped"))
        .filter(|l| !l.contains("backtrace") && !l.starts_with("Asked at"))
        .collect();
    match (lines.first(), lines.last()) {
        (Some(first), Some(last)) if first != last => format!("{first} ({last})"),
        (Some(first), _) => first.to_string(),
        _ => text.trim().to_string(),
    }
}

/// The name of the hardware behind `device`: the adapter's or GPU's own name
/// (`llvmpipe (LLVM 15.0.6, 256 bits)`, `NVIDIA H100 PCIe`), or `CPU (burn flex)`.
pub fn device_name(device: &Device) -> String {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if let Some(id) = device.identity() {
        return id.name;
    }
    let _ = device;
    "CPU (burn flex)".to_string()
}

/// One device this build and machine can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// What to pass to `--device`.
    pub spec: DeviceSpec,
    /// The adapter's or GPU's own name (`llvmpipe (LLVM 15.0.6, 256 bits)`, `NVIDIA H100`).
    pub name: String,
    /// What kind of device it is, in words (`CPU (burn flex)`, `discrete GPU`, `software
    /// (CPU) adapter`, …), with the graphics API for wgpu.
    pub kind: String,
}

/// Every device this build and machine can use: the CPU always, CUDA devices when built with
/// `cuda` and a driver is present, wgpu adapters when built with `wgpu` (first `wgpu`, the
/// adapter the bare spec picks, then each adapter by its indexed spec).
pub fn list_devices() -> Vec<DeviceInfo> {
    let mut out = vec![DeviceInfo {
        spec: DeviceSpec::Cpu,
        name: format!("{} logical cores", cpu_count()),
        kind: "CPU (burn flex)".into(),
    }];
    out.extend(cuda::list());
    out.extend(wgpu::list());
    out
}

fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::{DeviceInfo, DeviceSpec};
    use burn::tensor::{Device, DeviceType};

    pub fn device(i: usize) -> Option<Device> {
        Some(Device::cuda(i))
    }

    fn count() -> usize {
        Device::enumerate(DeviceType::Cuda).into_iter().count()
    }

    pub fn open(i: usize) -> Result<Device, Option<String>> {
        let n = count();
        if i >= n {
            return Err(Some(if n == 0 {
                "no CUDA driver or GPU found".into()
            } else {
                format!("this machine has {n} CUDA device(s)")
            }));
        }
        Ok(Device::cuda(i))
    }

    pub fn list() -> Vec<DeviceInfo> {
        (0..count())
            .map(|i| {
                let name = Device::cuda(i)
                    .identity()
                    .map_or_else(|| "CUDA device".to_string(), |id| id.name);
                DeviceInfo {
                    spec: DeviceSpec::Cuda(i),
                    name,
                    kind: "CUDA GPU".into(),
                }
            })
            .collect()
    }
}

#[cfg(not(feature = "cuda"))]
mod cuda {
    use super::DeviceInfo;
    use burn::tensor::Device;

    pub fn device(_: usize) -> Option<Device> {
        None
    }

    pub fn open(_: usize) -> Result<Device, Option<String>> {
        Err(None)
    }

    pub fn list() -> Vec<DeviceInfo> {
        Vec::new()
    }
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use super::{DeviceInfo, DeviceSpec, WgpuAdapter};
    use burn::tensor::wgpu::wgpu as w;
    use burn::tensor::{Device, DeviceKind};

    fn kind(a: WgpuAdapter) -> DeviceKind {
        match a {
            WgpuAdapter::Best => DeviceKind::DefaultDevice,
            WgpuAdapter::Discrete(i) => DeviceKind::DiscreteGpu(i),
            WgpuAdapter::Integrated(i) => DeviceKind::IntegratedGpu(i),
            WgpuAdapter::Virtual(i) => DeviceKind::VirtualGpu(i),
            WgpuAdapter::Cpu => DeviceKind::Cpu,
        }
    }

    pub fn device(a: WgpuAdapter) -> Option<Device> {
        Some(Device::wgpu(kind(a)))
    }

    pub fn open(a: WgpuAdapter) -> Result<Device, Option<String>> {
        // Ask first, so the error can say what exists: burn's own acquisition of a missing
        // adapter is a panic at the first tensor.
        let (_, adapters) = settle();
        let present = match a {
            WgpuAdapter::Best => !adapters.is_empty(),
            _ => adapters
                .iter()
                .any(|(spec, _)| *spec == DeviceSpec::Wgpu(a)),
        };
        if !present {
            return Err(Some(if adapters.is_empty() {
                "wgpu finds no adapter (no Vulkan, Metal, DX12 or GL driver)".into()
            } else {
                let (what, n) = match a {
                    WgpuAdapter::Discrete(n) => ("discrete GPU", n),
                    WgpuAdapter::Integrated(n) => ("integrated GPU", n),
                    WgpuAdapter::Virtual(n) => ("virtual GPU", n),
                    WgpuAdapter::Cpu => ("software adapter", 0),
                    WgpuAdapter::Best => unreachable!("present when any adapter is"),
                };
                let same_type =
                    |b: &WgpuAdapter| std::mem::discriminant(b) == std::mem::discriminant(&a);
                let have = adapters
                    .iter()
                    .filter(|(s, _)| matches!(s, DeviceSpec::Wgpu(b) if same_type(b)))
                    .count();
                format!(
                    "wgpu counts each adapter type from 0 and this machine has {have} {what}(s), \
                     so there is no {what} {n}"
                )
            }));
        }
        match Device::wgpu_options().device_kind(kind(a)).init() {
            Ok(device) => Ok(device),
            // Already acquired in this process (a tensor or another caller got there first).
            Err(burn::tensor::wgpu::WgpuInitError::Registration { .. }) => {
                Ok(Device::wgpu(kind(a)))
            }
            Err(e) => Err(Some(e.to_string())),
        }
    }

    fn type_words(t: w::DeviceType) -> &'static str {
        match t {
            w::DeviceType::DiscreteGpu => "discrete GPU",
            w::DeviceType::IntegratedGpu => "integrated GPU",
            w::DeviceType::VirtualGpu => "virtual GPU",
            w::DeviceType::Cpu => "software (CPU) adapter",
            w::DeviceType::Other => "other adapter",
        }
    }

    /// The graphics API burn's wgpu runtime settles on, as it does: the first of its chain with
    /// a hardware adapter, else the first with any adapter; and that API's adapters with the
    /// spec that addresses each.
    fn settle() -> (Option<w::Backend>, Vec<(DeviceSpec, w::AdapterInfo)>) {
        let chain: &[w::Backend] = if cfg!(target_os = "macos") {
            &[w::Backend::Metal]
        } else {
            &[w::Backend::Vulkan, w::Backend::Dx12, w::Backend::Gl]
        };
        let mut software_only = None;
        for &api in chain {
            if !w::Instance::enabled_backend_features().contains(api.into()) {
                continue;
            }
            let instance = w::Instance::new(w::InstanceDescriptor {
                backends: api.into(),
                ..w::InstanceDescriptor::new_without_display_handle()
            });
            let infos: Vec<w::AdapterInfo> =
                futures_lite::future::block_on(instance.enumerate_adapters(api.into()))
                    .iter()
                    .map(w::Adapter::get_info)
                    .collect();
            if infos.iter().any(|i| i.device_type != w::DeviceType::Cpu) {
                return (Some(api), with_specs(infos));
            }
            if software_only.is_none() && !infos.is_empty() {
                software_only = Some((Some(api), with_specs(infos)));
            }
        }
        software_only.unwrap_or((None, Vec::new()))
    }

    fn with_specs(infos: Vec<w::AdapterInfo>) -> Vec<(DeviceSpec, w::AdapterInfo)> {
        let (mut d, mut i, mut v) = (0, 0, 0);
        let next = |n: &mut usize| {
            *n += 1;
            *n - 1
        };
        let mut out = Vec::new();
        for info in infos {
            let adapter = match info.device_type {
                w::DeviceType::DiscreteGpu => WgpuAdapter::Discrete(next(&mut d)),
                w::DeviceType::IntegratedGpu => WgpuAdapter::Integrated(next(&mut i)),
                w::DeviceType::VirtualGpu => WgpuAdapter::Virtual(next(&mut v)),
                w::DeviceType::Cpu => WgpuAdapter::Cpu,
                // Not addressable by a spec of ours; `wgpu` can still land on it.
                w::DeviceType::Other => continue,
            };
            out.push((DeviceSpec::Wgpu(adapter), info));
        }
        out
    }

    pub fn list() -> Vec<DeviceInfo> {
        let (api, adapters) = settle();
        let Some(api) = api else {
            return Vec::new();
        };
        let describe = |info: &w::AdapterInfo| format!("{}, {api:?}", type_words(info.device_type));
        // What the bare `wgpu` picks: wgpu's high-performance preference puts a discrete GPU
        // first, then integrated, virtual, software.
        let rank = |t: w::DeviceType| match t {
            w::DeviceType::DiscreteGpu => 0,
            w::DeviceType::IntegratedGpu => 1,
            w::DeviceType::VirtualGpu => 2,
            w::DeviceType::Other => 3,
            w::DeviceType::Cpu => 4,
        };
        let mut out = Vec::new();
        if let Some((_, best)) = adapters.iter().min_by_key(|(_, i)| rank(i.device_type)) {
            out.push(DeviceInfo {
                spec: DeviceSpec::Wgpu(WgpuAdapter::Best),
                name: best.name.clone(),
                kind: format!("{} (the best adapter)", describe(best)),
            });
        }
        out.extend(adapters.iter().map(|(spec, info)| DeviceInfo {
            spec: *spec,
            name: info.name.clone(),
            kind: describe(info),
        }));
        out
    }
}

#[cfg(not(feature = "wgpu"))]
mod wgpu {
    use super::{DeviceInfo, WgpuAdapter};
    use burn::tensor::Device;

    pub fn device(_: WgpuAdapter) -> Option<Device> {
        None
    }

    pub fn open(_: WgpuAdapter) -> Result<Device, Option<String>> {
        Err(None)
    }

    pub fn list() -> Vec<DeviceInfo> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_form() {
        let cases = [
            ("cpu", DeviceSpec::Cpu),
            ("CPU", DeviceSpec::Cpu),
            ("flex", DeviceSpec::Cpu),
            (" cpu:0 ", DeviceSpec::Cpu),
            ("", DeviceSpec::Cpu),
            ("  ", DeviceSpec::Cpu),
            ("cuda", DeviceSpec::Cuda(0)),
            ("cuda:3", DeviceSpec::Cuda(3)),
            ("wgpu", DeviceSpec::Wgpu(WgpuAdapter::Best)),
            ("WGPU", DeviceSpec::Wgpu(WgpuAdapter::Best)),
            ("wgpu:0", DeviceSpec::Wgpu(WgpuAdapter::Discrete(0))),
            ("wgpu:2", DeviceSpec::Wgpu(WgpuAdapter::Discrete(2))),
            ("wgpu:discrete", DeviceSpec::Wgpu(WgpuAdapter::Discrete(0))),
            (
                "wgpu:discrete:1",
                DeviceSpec::Wgpu(WgpuAdapter::Discrete(1)),
            ),
            (
                "wgpu:integrated",
                DeviceSpec::Wgpu(WgpuAdapter::Integrated(0)),
            ),
            (
                "wgpu:Integrated:1",
                DeviceSpec::Wgpu(WgpuAdapter::Integrated(1)),
            ),
            ("wgpu:virtual:0", DeviceSpec::Wgpu(WgpuAdapter::Virtual(0))),
            ("wgpu:cpu", DeviceSpec::Wgpu(WgpuAdapter::Cpu)),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<DeviceSpec>().unwrap(), want, "{s}");
        }
    }

    #[test]
    fn canonical_form_parses_back() {
        for s in [
            "cpu",
            "cuda:1",
            "wgpu",
            "wgpu:1",
            "wgpu:integrated:2",
            "wgpu:virtual:0",
            "wgpu:cpu",
        ] {
            let spec: DeviceSpec = s.parse().unwrap();
            assert_eq!(spec.to_string(), s);
        }
    }

    #[test]
    fn rejects_garbage_with_the_spec_in_the_message() {
        for s in [
            "tpu",
            "wgpu:gpu",
            "wgpu:cpu:1",
            "cuda:0:1",
            "wgpu:",
            "wgpu:integrated:1:2",
        ] {
            let e = s.parse::<DeviceSpec>().unwrap_err();
            assert!(matches!(e, DeviceError::Unknown(_)), "{s}: {e}");
        }
        for s in [
            "cuda:x",
            "cpu:1",
            "wgpu:-1",
            "wgpu:integrated:-1",
            "cuda:-1",
            "wgpu:99999999999999999999999",
        ] {
            let e = s.parse::<DeviceSpec>().unwrap_err();
            assert!(matches!(e, DeviceError::BadIndex(_)), "{s}: {e}");
            assert!(e.to_string().contains(s), "{e}");
        }
    }

    #[test]
    fn backends_not_compiled_in_are_named_errors() {
        #[cfg(not(feature = "cuda"))]
        {
            let e = open_device("cuda:0").unwrap_err();
            assert!(
                matches!(
                    &e,
                    DeviceError::NotCompiled {
                        feature: "cuda",
                        ..
                    }
                ),
                "{e}"
            );
            assert!(e.to_string().contains("--features cuda"), "{e}");
        }
        #[cfg(not(feature = "wgpu"))]
        {
            let e = open_device("wgpu").unwrap_err();
            assert!(
                matches!(
                    &e,
                    DeviceError::NotCompiled {
                        feature: "wgpu",
                        ..
                    }
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn the_cpu_is_always_listed_and_opens() {
        let list = list_devices();
        assert_eq!(list[0].spec, DeviceSpec::Cpu);
        assert!(open_device("cpu").is_ok());
        // Every listed device's spec parses back to itself.
        for d in &list {
            assert_eq!(d.spec.to_string().parse::<DeviceSpec>().unwrap(), d.spec);
        }
    }

    #[test]
    fn results_come_back_row_major() {
        let device = test_device();
        let t = burn::tensor::Tensor::<2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &device);
        assert_eq!(
            to_host_f32(t.transpose()).unwrap(),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
    }

    /// A computation the device cannot hold comes back as an error, not burn's panic: 2^36 f32
    /// (256 GiB) is past the memory of any GPU.
    #[test]
    fn a_failed_device_computation_is_an_error() {
        let device = test_device();
        if !testing_on_accelerator() {
            return; // the CPU would try to allocate it: this runs in CI's wgpu pass
        }
        let t = burn::tensor::Tensor::<1>::ones([1usize << 36], &device) * 2.0;
        let e = to_host_f32(t).unwrap_err();
        assert!(e.to_string().contains("device failed"), "{e}");
    }

    /// A discrete GPU index far past anything a machine has: an error naming what exists,
    /// never a panic (the panic was burn's `AdapterUnavailable` at the first tensor upload).
    #[cfg(feature = "wgpu")]
    #[test]
    fn a_missing_wgpu_adapter_is_an_error_naming_what_exists() {
        let e = open_device("wgpu:99").unwrap_err();
        assert!(matches!(&e, DeviceError::Unavailable { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("wgpu:99") && text.contains("discrete GPU 99"),
            "{e}"
        );
        assert!(text.contains("cpu ("), "the CPU is always listed: {e}");
        // The user's own spelling is named, not the canonical form.
        let e = open_device("WGPU:Discrete:99").unwrap_err();
        assert!(e.to_string().contains("'WGPU:Discrete:99'"), "{e}");
    }
}
