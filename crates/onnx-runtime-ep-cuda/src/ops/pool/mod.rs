//! Pooling and resampling: MaxPool (with Indices), AveragePool, LpPool and the global pools
//! (`pooling`), Resize and Upsample (`resize`, its host-side plan in `resize_plan`), DepthToSpace and SpaceToDepth (`space`),
//! GridSample (`grid`), AffineGrid (`affine_grid`), MaxUnpool (`unpool`). Own NVRTC kernels (no cuDNN), semantics mirroring the CPU provider.
//!
//! Shared here: the modules' specs, division by a runtime constant for the kernels' index
//! math ([`FastDiv`]), device buffers a kernel keeps for its life ([`DeviceBlocks`]) and host
//! reads of float inputs with the warm-then-capture rule ([`FloatReads`]).

mod affine_grid;
mod grid;
mod pooling;
mod resize;
mod resize_plan;
mod space;
mod unpool;

use super::common::{in_host_memory, read_f64s, Base};
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CuPtr, CudaRuntime};
use onnx_runtime_ep_api::{CaptureSupport, EpError, EpResult, TensorMut, TensorView};
use onnx_runtime_ir::{Attribute, DataType, Node};
use std::sync::{Arc, Mutex, MutexGuard};

pub fn register(r: &mut Registry) {
    pooling::register(r);
    resize::register(r);
    space::register(r);
    grid::register(r);
    unpool::register(r);
    affine_grid::register(r);
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![
        pool_module(),
        resize_module(),
        grid_module(),
        unpool_module(),
        affine_grid_module(),
    ]
}

/// Windowed and global pools, every dtype.
pub(crate) fn pool_module() -> ModuleSpec {
    ModuleSpec::new(
        "pool",
        concat!(
            include_str!("../../kernels/pool_common.cuh"),
            include_str!("../../kernels/pool.cu")
        ),
    )
    .with_half()
}

/// Resize / Upsample: the nearest gather by width and the interpolations by dtype.
pub(crate) fn resize_module() -> ModuleSpec {
    ModuleSpec::new(
        "resize",
        concat!(
            include_str!("../../kernels/pool_common.cuh"),
            include_str!("../../kernels/resize.cu")
        ),
    )
    .with_half()
}

/// GridSample by dtype and spatial rank.
pub(crate) fn grid_module() -> ModuleSpec {
    ModuleSpec::new(
        "grid_sample",
        concat!(
            include_str!("../../kernels/pool_common.cuh"),
            include_str!("../../kernels/grid.cu")
        ),
    )
    .with_half()
}

/// MaxUnpool's zero fill and scatter, by element width.
pub(crate) fn unpool_module() -> ModuleSpec {
    ModuleSpec::new(
        "unpool",
        concat!(
            include_str!("../../kernels/pool_common.cuh"),
            include_str!("../../kernels/unpool.cu")
        ),
    )
    .with_half()
}

/// AffineGrid by dtype.
pub(crate) fn affine_grid_module() -> ModuleSpec {
    ModuleSpec::new("affine_grid", include_str!("../../kernels/affine_grid.cu")).with_half()
}

/// Division by `d` as the kernels do it for dividends below 2^31:
/// `(umulhi(n, m) + n) >> s` (mirrors `struct FastDiv` in `kernels/pool_common.cuh`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastDiv {
    pub d: u32,
    pub m: u32,
    pub s: u32,
    pub _pad: u32,
}

impl FastDiv {
    /// The divider for `d` (0 is taken as 1: an empty axis has no elements to divide).
    pub fn new(d: usize) -> Self {
        let d = d.clamp(1, 1 << 31) as u64;
        let mut s = 0u32;
        while (1u64 << s) < d {
            s += 1;
        }
        let m = ((1u64 << 32) * ((1u64 << s) - d)) / d + 1;
        FastDiv {
            d: d as u32,
            m: m as u32,
            s,
            _pad: 0,
        }
    }

    /// What the kernel computes (for the unit test).
    #[cfg(test)]
    fn div(&self, n: u32) -> u32 {
        let hi = ((n as u64 * self.m as u64) >> 32) as u32;
        (hi + n) >> self.s
    }
}

/// The largest element count whose indices the kernels' 32-bit division path takes.
pub const FAST_LIMIT: usize = (1 << 31) - 1;

/// Device buffers a kernel keeps for its whole life (resampling tables, partial results).
/// They are freed only when the kernel is dropped, so a CUDA graph captured with them stays
/// valid; every use is ordered on the provider's one stream.
pub struct DeviceBlocks {
    rt: Arc<CudaRuntime>,
    blocks: Mutex<Vec<CuPtr>>,
}

impl DeviceBlocks {
    pub fn new(rt: &Arc<CudaRuntime>) -> Self {
        DeviceBlocks {
            rt: rt.clone(),
            blocks: Mutex::new(Vec::new()),
        }
    }

    /// A new block of at least `bytes` bytes (refused during capture).
    pub fn alloc(&self, bytes: usize) -> EpResult<CuPtr> {
        let (ptr, _) = self.rt.allocate(bytes.max(16), 256)?;
        self.blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ptr);
        Ok(ptr)
    }

    /// A new block holding `bytes` (uploaded on the stream; refused during capture).
    pub fn upload(&self, bytes: &[u8]) -> EpResult<CuPtr> {
        let ptr = self.alloc(bytes.len())?;
        // SAFETY: the block holds at least `bytes.len()` bytes.
        unsafe { self.rt.htod(bytes, ptr)? };
        Ok(ptr)
    }
}

impl Drop for DeviceBlocks {
    fn drop(&mut self) {
        let blocks = std::mem::take(self.blocks.get_mut().unwrap_or_else(|e| e.into_inner()));
        for ptr in blocks {
            let _ = self.rt.free(ptr);
        }
    }
}

/// A float list attribute (Upsample-7's `scales`).
pub fn attr_floats(node: &Node, name: &str) -> EpResult<Option<Vec<f32>>> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Floats(v)) => Ok(Some(v.clone())),
        Some(Attribute::Float(v)) => Ok(Some(vec![*v])),
        Some(Attribute::Ints(v)) => Ok(Some(v.iter().map(|&i| i as f32).collect())),
        Some(other) => Err(EpError::invalid_attribute(
            node,
            name,
            format!("expected a list of floats, got {:?}", other.kind()),
        )),
    }
}

/// The input strides of `shape`/`strides` merged where contiguous (size-1 axes dropped):
/// what a plane walk needs.
pub fn merge_axes(shape: &[usize], strides: &[usize]) -> (Vec<usize>, Vec<i64>) {
    let mut d: Vec<usize> = Vec::new();
    let mut s: Vec<i64> = Vec::new();
    for (&n, &st) in shape.iter().zip(strides) {
        if n == 1 {
            continue;
        }
        if let (Some(ld), Some(&ls)) = (d.last_mut(), s.last()) {
            if ls == st as i64 * n as i64 {
                *ld *= n;
                *s.last_mut().expect("a last stride") = st as i64;
                continue;
            }
        }
        d.push(n);
        s.push(st as i64);
    }
    (d, s)
}

// ---- host reads of float inputs ----

/// One tensor of a call: its dtype, shape and strides.
type Entry = (DataType, Vec<usize>, Vec<usize>);
/// Host-read values by node-input position (floats and integers as f64).
pub type FloatValues = Vec<Option<Vec<f64>>>;
/// A call's inputs and outputs by layout.
type Sig = (Vec<Entry>, Vec<Entry>);
/// The inputs of a call by address and layout: what a peeked read is valid for.
type Located = Vec<(usize, Entry)>;

fn entries_in(inputs: &[TensorView<'_>]) -> Vec<Entry> {
    inputs
        .iter()
        .map(|v| (v.dtype, v.shape.to_vec(), v.strides.to_vec()))
        .collect()
}

fn entries_out(outputs: &[TensorMut<'_>]) -> Vec<Entry> {
    outputs
        .iter()
        .map(|v| (v.dtype, v.shape.to_vec(), v.strides.to_vec()))
        .collect()
}

fn located(inputs: &[TensorView<'_>]) -> Located {
    inputs
        .iter()
        .map(|v| {
            (
                v.ptr.0 as usize,
                (v.dtype, v.shape.to_vec(), v.strides.to_vec()),
            )
        })
        .collect()
}

/// Inputs a kernel reads on the host as numbers (Resize's roi, scales and sizes): the float
/// counterpart of `common::HostReads`, with the same rule. After one eager run the kernel
/// remembers the values with the call's signature; during capture it reads nothing and
/// accepts only that signature; initializer inputs are read once per signature; the values
/// `peek` (for `output_types`) read serve the `execute` that follows with the same inputs.
pub struct FloatReads {
    positions: Vec<usize>,
    what: String,
    constant: Vec<bool>,
    state: Mutex<Option<(Sig, FloatValues)>>,
    peeked: Mutex<Option<(Located, FloatValues)>>,
}

impl FloatReads {
    /// The node-input positions read on the host (`Kernel::host_inputs`).
    pub fn positions(&self) -> Vec<usize> {
        self.positions.clone()
    }

    /// `positions` are node-input positions; those not wired are dropped.
    pub fn new(base: &Base, positions: &[usize], what: &str) -> Self {
        FloatReads {
            positions: positions.iter().copied().filter(|&p| base.has(p)).collect(),
            what: what.into(),
            constant: Vec::new(),
            state: Mutex::new(None),
            peeked: Mutex::new(None),
        }
    }

    pub fn set_constant(&mut self, constant: &[bool]) {
        self.constant = constant.to_vec();
    }

    fn lock(&self) -> MutexGuard<'_, Option<(Sig, FloatValues)>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn all_constant(&self) -> bool {
        self.positions
            .iter()
            .all(|&p| self.constant.get(p).copied().unwrap_or(false))
    }

    pub fn capture_support(&self, base: &Base) -> CaptureSupport {
        if self.positions.is_empty() || self.lock().is_some() {
            CaptureSupport::Supported
        } else {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: {} reads its {} on the host; run it once eagerly with the signature to capture",
                    base.node, base.op, self.what
                ),
            }
        }
    }

    fn unwarmed(&self, base: &Base) -> EpError {
        EpError::Capture {
            node: base.node.clone(),
            message: format!(
                "{} reads its {} on the host, which cannot happen during capture, and this \
                 signature was not run eagerly; warm the exact signature first",
                base.op, self.what
            ),
        }
    }

    fn read(&self, base: &Base, inputs: &[TensorView<'_>]) -> EpResult<FloatValues> {
        let mut values: FloatValues = vec![None; base.present.len()];
        for &p in &self.positions {
            let view = base.req(inputs, p)?;
            values[p] = Some(read_f64s(base, view, &self.what)?);
        }
        Ok(values)
    }

    /// The values for this call (`execute`); the call's signature becomes the warmed one.
    pub fn values(
        &self,
        base: &Base,
        inputs: &[TensorView<'_>],
        outputs: &[TensorMut<'_>],
    ) -> EpResult<FloatValues> {
        if self.positions.is_empty() {
            return Ok(vec![None; base.present.len()]);
        }
        let sig = (entries_in(inputs), entries_out(outputs));
        let mut state = self.lock();
        if in_host_memory(base, &self.positions, inputs) {
            let values = self.read(base, inputs)?;
            *state = Some((sig, values.clone()));
            return Ok(values);
        }
        if base.rt.is_capturing() {
            return match state.as_ref() {
                Some((s, v)) if *s == sig => Ok(v.clone()),
                _ => Err(self.unwarmed(base)),
            };
        }
        if self.all_constant() {
            if let Some((s, v)) = state.as_ref() {
                if *s == sig {
                    return Ok(v.clone());
                }
            }
        }
        let peeked = self
            .peeked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .filter(|(at, _)| *at == located(inputs))
            .map(|(_, v)| v);
        let values = match peeked {
            Some(v) => v,
            None => self.read(base, inputs)?,
        };
        *state = Some((sig, values.clone()));
        Ok(values)
    }

    /// The values for `inputs` alone (`output_types`); leaves the warmed signature alone.
    pub fn peek(&self, base: &Base, inputs: &[TensorView<'_>]) -> EpResult<FloatValues> {
        if self.positions.is_empty() {
            return Ok(vec![None; base.present.len()]);
        }
        if in_host_memory(base, &self.positions, inputs) {
            return self.read(base, inputs);
        }
        let sig = entries_in(inputs);
        let warmed = self
            .lock()
            .as_ref()
            .filter(|(s, _)| s.0 == sig)
            .map(|(_, v)| v.clone());
        if base.rt.is_capturing() {
            return warmed.ok_or_else(|| self.unwarmed(base));
        }
        match warmed {
            Some(v) if self.all_constant() => Ok(v),
            _ => {
                let values = self.read(base, inputs)?;
                *self.peeked.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((located(inputs), values.clone()));
                Ok(values)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_div_matches_division_below_2_31() {
        let divisors = [
            1usize,
            2,
            3,
            5,
            7,
            10,
            49,
            56,
            64,
            100,
            1000,
            3136,
            65535,
            1 << 20,
        ];
        let big = [(1u32 << 31) - 1, (1 << 31) - 2, 1 << 30, 123_456_789];
        for &d in &divisors {
            let f = FastDiv::new(d);
            for n in (0..5000u32).chain(big) {
                assert_eq!(f.div(n), n / d as u32, "{n} / {d}");
            }
        }
        let f = FastDiv::new((1 << 31) - 1);
        assert_eq!(f.div((1 << 31) - 1), 1);
        assert_eq!(f.div((1 << 31) - 2), 0);
    }

    #[test]
    fn merge_axes_joins_contiguous_runs() {
        assert_eq!(merge_axes(&[4, 5], &[5, 1]), (vec![20], vec![1]));
        assert_eq!(
            merge_axes(&[4, 1, 5], &[8, 99, 1]),
            (vec![4, 5], vec![8, 1])
        );
        assert_eq!(merge_axes(&[3, 4], &[1, 3]), (vec![3, 4], vec![1, 3]));
        assert_eq!(merge_axes(&[1, 1], &[1, 1]), (vec![], vec![]));
    }
}
