//! What every CUDA kernel shares: its node's description and runtime, input lookup, element
//! widths, host reads of shape-carrying inputs with the warm-then-capture rule, strided copies
//! and attribute parsing.

use super::params::{Strided2, MAX_DIMS, MAX_RANK};
use crate::compiler::ModuleSpec;
use crate::runtime::{CuPtr, CudaRuntime, Function, Module};
use onnx_runtime_ep_api::{CaptureSupport, DeviceKind, EpError, EpResult, TensorMut, TensorView};
use onnx_runtime_ir::{Attribute, DataType, Node};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

/// The node a kernel runs, its runtime and its id for device-side error reports.
pub struct Base {
    pub rt: Arc<CudaRuntime>,
    pub node: String,
    pub op: String,
    pub id: u32,
    /// Which node inputs are wired (optional inputs may be omitted).
    pub present: Vec<bool>,
    /// How many outputs the node has.
    pub outputs: usize,
}

/// The dtype and shape of each output of a node, as [`Kernel::output_types`] returns them.
///
/// [`Kernel::output_types`]: onnx_runtime_ep_api::Kernel::output_types
pub type OutputTypes = Vec<(DataType, Vec<usize>)>;

impl Base {
    pub fn new(rt: &Arc<CudaRuntime>, node: &Node) -> Self {
        let description = node.describe();
        Base {
            rt: rt.clone(),
            id: rt.register_kernel(description.clone()),
            node: description,
            op: node.op_type.clone(),
            present: node.inputs.iter().map(Option::is_some).collect(),
            outputs: node.outputs.len(),
        }
    }

    pub fn err(&self, message: impl Into<String>) -> EpError {
        EpError::InvalidInput {
            node: self.node.clone(),
            message: message.into(),
        }
    }

    pub fn unsupported(&self, dtype: DataType, detail: impl Into<String>) -> EpError {
        EpError::UnsupportedDtype {
            node: self.node.clone(),
            op: self.op.clone(),
            dtype,
            detail: detail.into(),
            hint: "cast the input to a supported type, or run this node on the CPU provider".into(),
        }
    }

    /// Whether node input `pos` is wired.
    pub fn has(&self, pos: usize) -> bool {
        self.present.get(pos).copied().unwrap_or(false)
    }

    /// The view for node input `pos`. Views come either one per node input (omitted optional
    /// inputs in the middle take a placeholder that is ignored) or one per *wired* input in
    /// order; trailing omitted inputs may be left out in both forms.
    pub fn input<'a, 'b>(
        &self,
        inputs: &'b [TensorView<'a>],
        pos: usize,
    ) -> Option<&'b TensorView<'a>> {
        if !self.has(pos) {
            return None;
        }
        let wired_before = self.present[..pos].iter().filter(|p| **p).count();
        let all_wired = self.present.iter().all(|p| *p);
        if all_wired || inputs.len() > self.present.iter().filter(|p| **p).count() {
            inputs.get(pos)
        } else {
            inputs.get(wired_before)
        }
    }

    pub fn req<'a, 'b>(
        &self,
        inputs: &'b [TensorView<'a>],
        pos: usize,
    ) -> EpResult<&'b TensorView<'a>> {
        self.input(inputs, pos)
            .ok_or_else(|| self.err(format!("required input {pos} is missing")))
    }

    pub fn outputs_at_least(&self, outputs: &[TensorMut<'_>], n: usize) -> EpResult<()> {
        if outputs.len() < n {
            return Err(self.err(format!(
                "expected {n} output(s), the caller gave {}",
                outputs.len()
            )));
        }
        Ok(())
    }

    /// Element width in bytes for kernels that only move data.
    pub fn width(&self, dtype: DataType) -> EpResult<usize> {
        match dtype.element_size() {
            Some(w @ (1 | 2 | 4 | 8 | 16)) if dtype != DataType::String => Ok(w),
            _ => Err(self.unsupported(
                dtype,
                "the CUDA provider moves elements of 1, 2, 4, 8 or 16 bytes; strings and \
                 sub-byte types are not supported",
            )),
        }
    }

    pub fn same_dtype(&self, a: DataType, b: DataType, what: &str) -> EpResult<()> {
        if a != b {
            return Err(self.err(format!("{what}: dtype {b} does not match {a}")));
        }
        Ok(())
    }

    pub fn check_rank(&self, rank: usize, max: usize) -> EpResult<()> {
        if rank > max {
            return Err(self.err(format!(
                "rank {rank} exceeds the CUDA provider's limit of {max}; run this node on the CPU provider"
            )));
        }
        Ok(())
    }

    /// Normalizes a possibly negative `axis` into `0..rank`.
    pub fn axis(&self, axis: i64, rank: usize, what: &str) -> EpResult<usize> {
        let r = rank as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if a < 0 || a >= r.max(0) {
            return Err(self.err(format!(
                "{what} {axis} is out of range for rank {rank} (accepted: [-{rank}, {}])",
                r - 1
            )));
        }
        Ok(a as usize)
    }

    /// Checks that an output has the expected shape.
    pub fn expect_shape(&self, out: &TensorMut<'_>, want: &[usize], idx: usize) -> EpResult<()> {
        if out.shape != want {
            return Err(self.err(format!(
                "output {idx} has shape {:?} but the inputs give {want:?}",
                out.shape
            )));
        }
        Ok(())
    }

    /// Checks that the caller gave (at least) the outputs `want` describes, each of the dtype
    /// and shape given.
    pub fn expect_outputs(
        &self,
        outputs: &[TensorMut<'_>],
        want: &[(DataType, Vec<usize>)],
    ) -> EpResult<()> {
        self.outputs_at_least(outputs, want.len())?;
        for (idx, (out, (dtype, shape))) in outputs.iter().zip(want).enumerate() {
            self.same_dtype(*dtype, out.dtype, &format!("output {idx}"))?;
            self.expect_shape(out, shape, idx)?;
        }
        Ok(())
    }

    pub fn module(&self, spec: &ModuleSpec) -> EpResult<Arc<Module>> {
        self.rt.module(spec)
    }
}

/// The functions `prefix_w{1,2,4,8,16}suffix` of a module, by element width. For `copy_nd`
/// it also holds the 32-bit-index variants `copy_nd32_w*`.
pub struct WidthFns([Function; 5], Option<[Function; 5]>);

impl WidthFns {
    pub fn load(module: &Module, prefix: &str, suffix: &str) -> EpResult<Self> {
        let f = |p: &str, w: usize| module.function(&format!("{p}_w{w}{suffix}"));
        let load = |p: &str| -> EpResult<[Function; 5]> {
            Ok([f(p, 1)?, f(p, 2)?, f(p, 4)?, f(p, 8)?, f(p, 16)?])
        };
        let narrow = if prefix == "copy_nd" {
            Some(load("copy_nd32")?)
        } else {
            None
        };
        Ok(WidthFns(load(prefix)?, narrow))
    }

    fn slot(width: usize) -> usize {
        match width {
            1 => 0,
            2 => 1,
            4 => 2,
            8 => 3,
            _ => 4,
        }
    }

    pub fn get(&self, width: usize) -> Function {
        self.0[Self::slot(width)]
    }

    /// The 32-bit-index variant, where the module has one.
    pub fn get_narrow(&self, width: usize) -> Option<Function> {
        self.1.map(|f| f[Self::slot(width)])
    }
}

pub use super::modules::*;

/// Strides as signed element counts.
pub fn istrides(strides: &[usize]) -> Vec<i64> {
    strides.iter().map(|&s| s as i64).collect()
}

pub fn contiguous(shape: &[usize]) -> Vec<i64> {
    istrides(&onnx_runtime_ir::compute_contiguous_strides(shape))
}

/// Strides that read a tensor of `shape`/`strides` broadcast (right-aligned) to `out`.
pub fn broadcast_strides(
    base: &Base,
    shape: &[usize],
    strides: &[usize],
    out: &[usize],
    what: &str,
) -> EpResult<Vec<i64>> {
    if shape.len() > out.len() {
        return Err(base.err(format!(
            "{what} of shape {shape:?} cannot broadcast to {out:?}"
        )));
    }
    let lead = out.len() - shape.len();
    let mut result = vec![0i64; out.len()];
    for (k, &o) in out.iter().enumerate().skip(lead) {
        let d = shape[k - lead];
        if d == o {
            result[k] = if d == 1 { 0 } else { strides[k - lead] as i64 };
        } else if d == 1 {
            result[k] = 0;
        } else {
            return Err(base.err(format!(
                "{what} of shape {shape:?} cannot broadcast to {out:?} (axis {k}: {d} vs {o})"
            )));
        }
    }
    Ok(result)
}

/// The numpy-style broadcast of several shapes.
pub fn broadcast_shapes(base: &Base, shapes: &[&[usize]]) -> EpResult<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let lead = rank - s.len();
        for (k, &d) in s.iter().enumerate() {
            let o = &mut out[lead + k];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(base.err(format!("shapes {shapes:?} do not broadcast")));
            }
        }
    }
    Ok(out)
}

pub fn fill<const N: usize>(values: &[i64]) -> [i64; N] {
    let mut a = [0i64; N];
    a[..values.len()].copy_from_slice(values);
    a
}

/// Drops size-1 axes and merges axes that are contiguous in both operands.
pub fn coalesce(dims: &[usize], a: &[i64], b: &[i64]) -> (Vec<usize>, Vec<i64>, Vec<i64>) {
    let mut d: Vec<usize> = Vec::new();
    let mut sa: Vec<i64> = Vec::new();
    let mut sb: Vec<i64> = Vec::new();
    for k in 0..dims.len() {
        if dims[k] == 1 {
            continue;
        }
        if let (Some(&ld), Some(&la), Some(&lb)) = (d.last(), sa.last(), sb.last()) {
            let _ = ld;
            if la == a[k] * dims[k] as i64 && lb == b[k] * dims[k] as i64 {
                let last = d.len() - 1;
                d[last] *= dims[k];
                sa[last] = a[k];
                sb[last] = b[k];
                continue;
            }
        }
        d.push(dims[k]);
        sa.push(a[k]);
        sb.push(b[k]);
    }
    (d, sa, sb)
}

/// Copies a strided walk over `dims` from `src` (strides `a`, offset `a_off`) to `dst`
/// (strides `b`, offset `b_off`), in elements of `width` bytes, on the stream. A walk that is
/// contiguous on both sides becomes one `cuMemcpyDtoDAsync`.
#[allow(clippy::too_many_arguments)]
pub fn copy_strided(
    base: &Base,
    fns: &WidthFns,
    width: usize,
    src: CuPtr,
    dst: CuPtr,
    dims: &[usize],
    a: &[i64],
    b: &[i64],
    a_off: i64,
    b_off: i64,
) -> EpResult<()> {
    let n: usize = dims.iter().product();
    if n == 0 {
        return Ok(());
    }
    let (d, sa, sb) = coalesce(dims, a, b);
    let w = width as i64;
    if d.is_empty() || (d.len() == 1 && sa[0] == 1 && sb[0] == 1) {
        // SAFETY: the caller's views cover these ranges.
        return unsafe {
            base.rt.dtod(
                (src as i64 + a_off * w) as CuPtr,
                (dst as i64 + b_off * w) as CuPtr,
                n * width,
            )
        };
    }
    if d.len() > MAX_DIMS {
        return Err(base.err(format!(
            "the copy needs {} axes after merging; the limit is {MAX_DIMS}",
            d.len()
        )));
    }
    let mut p = Strided2 {
        n: n as i64,
        rank: d.len() as i32,
        a_off,
        b_off,
        ..Default::default()
    };
    for k in 0..d.len() {
        p.dims[k] = d[k] as i64;
        p.a[k] = sa[k];
        p.b[k] = sb[k];
    }
    // Every offset the walk reaches lies between the offset plus the negative strides' reach
    // and the offset plus the positive strides' reach.
    let fits = |off: i64, strides: &[i64]| {
        let (mut lo, mut hi) = (off, off);
        for (k, &s) in strides.iter().enumerate() {
            let reach = s.saturating_mul(d[k] as i64 - 1);
            if reach < 0 {
                lo = lo.saturating_add(reach);
            } else {
                hi = hi.saturating_add(reach);
            }
        }
        lo >= i32::MIN as i64 && hi <= i32::MAX as i64
    };
    let narrow = n <= i32::MAX as usize / 2 && fits(a_off, &sa) && fits(b_off, &sb);
    let f = match fns.get_narrow(width) {
        Some(f) if narrow => f,
        _ => fns.get(width),
    };
    let (mut s, mut t) = (src, dst);
    let mut args = [arg(&mut s), arg(&mut t), arg(&mut p)];
    // SAFETY: copy_nd(32)_w{width}(src, dst, Strided2) reads/writes inside the caller's views.
    unsafe { base.rt.launch(f, n as u64, &mut args) }
}

/// A kernel argument pointer for `cuLaunchKernel`.
pub fn arg<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

pub fn ptr_of(v: &TensorView<'_>) -> CuPtr {
    v.ptr.0 as usize as CuPtr
}

pub fn mut_ptr_of(v: &TensorMut<'_>) -> CuPtr {
    v.ptr.0 as usize as CuPtr
}

// ---- host reads of shape-carrying inputs ----

/// One tensor of a call: its dtype, shape and strides.
type Entry = (DataType, Vec<usize>, Vec<usize>);

/// The dtypes, shapes and strides of a call: what a warmed kernel must see again to run
/// during capture without reading anything on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    inputs: Vec<Entry>,
    outputs: Vec<Entry>,
}

impl Signature {
    pub fn of(inputs: &[TensorView<'_>], outputs: &[TensorMut<'_>]) -> Self {
        Signature {
            inputs: Self::of_inputs(inputs),
            outputs: outputs
                .iter()
                .map(|v| (v.dtype, v.shape.to_vec(), v.strides.to_vec()))
                .collect(),
        }
    }

    /// The inputs' part of a signature.
    fn of_inputs(inputs: &[TensorView<'_>]) -> Vec<Entry> {
        inputs
            .iter()
            .map(|v| (v.dtype, v.shape.to_vec(), v.strides.to_vec()))
            .collect()
    }
}

/// Host-read input values by node-input position.
pub type HostValues = Vec<Option<Vec<i64>>>;

/// Inputs a kernel must read on the host (Reshape's shape, Slice's starts, ...). After one
/// eager run the kernel remembers the values with the call's signature; during capture it
/// reads nothing and accepts only that signature.
pub struct HostReads {
    positions: Vec<usize>,
    what: String,
    constant: Vec<bool>,
    state: Mutex<Option<(Signature, HostValues)>>,
    /// What `peek` (for `output_types`) read last, with the inputs it read them from
    /// (addresses and layouts), for the `execute` that follows with the same inputs: a
    /// session asks for the output shapes and then runs, and should read the device once.
    peeked: Mutex<Option<(Located, HostValues)>>,
}

/// Inputs by address and layout.
type Located = Vec<(usize, Entry)>;

/// The inputs of a call by address and layout: what a peeked read is valid for.
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

impl HostReads {
    /// `positions` are node-input positions; those not wired are dropped.
    pub fn new(base: &Base, positions: &[usize], what: &str) -> Self {
        HostReads {
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

    /// The node-input positions read on the host (`Kernel::host_inputs`).
    pub fn positions(&self) -> Vec<usize> {
        self.positions.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Option<(Signature, HostValues)>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether every host-read input is an initializer (its values never change).
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
                "{} reads its {} on the host, which cannot happen during capture, and \
                 this signature was not run eagerly; warm the exact signature first",
                base.op, self.what
            ),
        }
    }

    /// Reads every host-read input now (synchronizes the stream).
    fn read(&self, base: &Base, inputs: &[TensorView<'_>]) -> EpResult<HostValues> {
        let mut values: HostValues = vec![None; base.present.len()];
        for &p in &self.positions {
            let view = base.req(inputs, p)?;
            values[p] = Some(read_ints(base, view, &self.what)?);
        }
        Ok(values)
    }

    /// The values of the host-read inputs for this call (`execute`): read now, or the warmed
    /// values during capture and for constant inputs; the call's signature becomes the warmed
    /// one.
    pub fn values(
        &self,
        base: &Base,
        inputs: &[TensorView<'_>],
        outputs: &[TensorMut<'_>],
    ) -> EpResult<HostValues> {
        if self.positions.is_empty() {
            return Ok(vec![None; base.present.len()]);
        }
        let sig = Signature::of(inputs, outputs);
        let mut state = self.lock();
        if in_host_memory(base, &self.positions, inputs) {
            // Passed in host memory: read without waiting for the device, capture or not.
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
        // The values `output_types` just read for these very inputs, else a fresh read.
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

    /// The values of the host-read inputs for `inputs` alone, for `Kernel::output_types`
    /// (which has no outputs yet). Reads as [`HostReads::values`] does but leaves the warmed
    /// signature alone, so only `execute` warms a kernel for capture; the next `values` call
    /// for the same inputs takes what it read instead of reading again. During capture it
    /// answers from the warmed values when the inputs match the warmed signature's.
    pub fn peek(&self, base: &Base, inputs: &[TensorView<'_>]) -> EpResult<HostValues> {
        if self.positions.is_empty() {
            return Ok(vec![None; base.present.len()]);
        }
        if in_host_memory(base, &self.positions, inputs) {
            return self.read(base, inputs);
        }
        let sig = Signature::of_inputs(inputs);
        let warmed = self
            .lock()
            .as_ref()
            .filter(|(s, _)| s.inputs == sig)
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

/// Whether every wired input at `positions` is a view of host memory (`Kernel::host_inputs`).
pub fn in_host_memory(base: &Base, positions: &[usize], inputs: &[TensorView<'_>]) -> bool {
    positions.iter().all(|&p| {
        base.input(inputs, p)
            .is_none_or(|v| v.device.kind == DeviceKind::Cpu)
    })
}

/// Copies a tensor's elements of `w` bytes to the host in row-major order: read in place for a
/// view of host memory; otherwise a copy from the device that synchronizes the stream, refused
/// during capture, where the host cannot wait for the device.
pub fn read_bytes(base: &Base, view: &TensorView<'_>, w: usize, what: &str) -> EpResult<Vec<u8>> {
    if view.device.kind == DeviceKind::Cpu {
        return Ok(read_host_bytes(view, w));
    }
    if base.rt.is_capturing() {
        return Err(EpError::Capture {
            node: base.node.clone(),
            message: format!(
                "{} reads its {what} on the host, which cannot happen during capture; resolve \
                 it before capturing",
                base.op
            ),
        });
    }
    let span: usize = 1 + view
        .shape
        .iter()
        .zip(view.strides)
        .map(|(&d, &s)| d.saturating_sub(1) * s)
        .sum::<usize>();
    let mut bytes = vec![0u8; span * w];
    // SAFETY: the view covers `span` elements from its pointer.
    unsafe { base.rt.dtoh(&mut bytes, ptr_of(view))? };
    let strides = onnx_runtime_ir::compute_contiguous_strides(view.shape);
    let n = view.numel();
    let mut out = Vec::with_capacity(n * w);
    for i in 0..n {
        let mut off = 0usize;
        for ((&cs, &d), &s) in strides.iter().zip(view.shape).zip(view.strides) {
            off += (i / cs) % d * s;
        }
        out.extend_from_slice(&bytes[off * w..off * w + w]);
    }
    Ok(out)
}

/// The elements of a view of host memory in row-major order.
fn read_host_bytes(view: &TensorView<'_>, w: usize) -> Vec<u8> {
    let n = view.numel();
    let mut out = Vec::with_capacity(n * w);
    if n == 0 {
        return out;
    }
    let strides = onnx_runtime_ir::compute_contiguous_strides(view.shape);
    let base = view.ptr.0 as *const u8;
    for i in 0..n {
        let mut off = 0usize;
        for ((&cs, &d), &s) in strides.iter().zip(view.shape).zip(view.strides) {
            off += (i / cs) % d * s;
        }
        // SAFETY: `Kernel::host_inputs` views point at host memory valid for the view's
        // elements (the caller's contract).
        let elem = unsafe { std::slice::from_raw_parts(base.add(off * w), w) };
        out.extend_from_slice(elem);
    }
    out
}

/// Reads an integer tensor to the host (synchronizes the stream unless it is in host memory).
pub fn read_ints(base: &Base, view: &TensorView<'_>, what: &str) -> EpResult<Vec<i64>> {
    if view.numel() == 0 {
        return Ok(Vec::new());
    }
    let w = match view.dtype {
        DataType::Int64 | DataType::Uint64 => 8,
        DataType::Int32 | DataType::Uint32 => 4,
        DataType::Int16 | DataType::Uint16 => 2,
        DataType::Int8 | DataType::Uint8 => 1,
        other => {
            return Err(
                base.unsupported(other, format!("the {what} input must be an integer tensor"))
            )
        }
    };
    let bytes = read_bytes(base, view, w, what)?;
    Ok(bytes
        .chunks_exact(w)
        .map(|b| match view.dtype {
            DataType::Int64 => i64::from_ne_bytes(b.try_into().expect("8 bytes")),
            DataType::Uint64 => u64::from_ne_bytes(b.try_into().expect("8 bytes")) as i64,
            DataType::Int32 => i32::from_ne_bytes(b.try_into().expect("4 bytes")) as i64,
            DataType::Uint32 => u32::from_ne_bytes(b.try_into().expect("4 bytes")) as i64,
            DataType::Int16 => i16::from_ne_bytes(b.try_into().expect("2 bytes")) as i64,
            DataType::Uint16 => u16::from_ne_bytes(b.try_into().expect("2 bytes")) as i64,
            DataType::Int8 => b[0] as i8 as i64,
            _ => b[0] as i64,
        })
        .collect())
}

/// Reads a float or integer tensor to the host as `f64`s (synchronizes the stream).
pub fn read_f64s(base: &Base, view: &TensorView<'_>, what: &str) -> EpResult<Vec<f64>> {
    let w = match view.dtype {
        DataType::Float64 => 8,
        DataType::Float32 => 4,
        DataType::Float16 | DataType::BFloat16 => 2,
        d if d.is_integer() => {
            return Ok(read_ints(base, view, what)?
                .into_iter()
                .map(|v| v as f64)
                .collect())
        }
        other => return Err(base.unsupported(other, format!("the {what} input must be numeric"))),
    };
    if view.numel() == 0 {
        return Ok(Vec::new());
    }
    let bytes = read_bytes(base, view, w, what)?;
    Ok(bytes
        .chunks_exact(w)
        .map(|b| match view.dtype {
            DataType::Float64 => f64::from_ne_bytes(b.try_into().expect("8 bytes")),
            DataType::Float32 => f32::from_ne_bytes(b.try_into().expect("4 bytes")) as f64,
            DataType::Float16 => half::f16::from_ne_bytes(b.try_into().expect("2 bytes")).to_f64(),
            _ => half::bf16::from_ne_bytes(b.try_into().expect("2 bytes")).to_f64(),
        })
        .collect())
}

// ---- attributes ----

pub fn attr_int(node: &Node, name: &str) -> EpResult<Option<i64>> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Int(v)) => Ok(Some(*v)),
        Some(other) => Err(EpError::invalid_attribute(
            node,
            name,
            format!("expected an int, got {:?}", other.kind()),
        )),
    }
}

pub fn attr_ints(node: &Node, name: &str) -> EpResult<Option<Vec<i64>>> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Ints(v)) => Ok(Some(v.clone())),
        Some(Attribute::Int(v)) => Ok(Some(vec![*v])),
        Some(other) => Err(EpError::invalid_attribute(
            node,
            name,
            format!("expected a list of ints, got {:?}", other.kind()),
        )),
    }
}

pub fn attr_string(node: &Node, name: &str) -> EpResult<Option<String>> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::String(v)) => Ok(Some(v.clone())),
        Some(other) => Err(EpError::invalid_attribute(
            node,
            name,
            format!("expected a string, got {:?}", other.kind()),
        )),
    }
}

pub fn attr_float(node: &Node, name: &str) -> EpResult<Option<f32>> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Float(v)) => Ok(Some(*v)),
        Some(Attribute::Int(v)) => Ok(Some(*v as f32)),
        Some(other) => Err(EpError::invalid_attribute(
            node,
            name,
            format!("expected a float, got {:?}", other.kind()),
        )),
    }
}

/// The element count of `shape`, or an error naming the node when it overflows.
pub fn checked_numel(base: &Base, shape: &[usize]) -> EpResult<usize> {
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            base.err(format!(
                "shape {shape:?} has more elements than fit in memory"
            ))
        })
}

/// Checks a tensor's rank against the kernels' limit.
pub fn check_view_rank(base: &Base, shape: &[usize]) -> EpResult<()> {
    base.check_rank(shape.len(), MAX_RANK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_merges_contiguous_axes_and_drops_ones() {
        let (d, a, b) = coalesce(&[2, 1, 3, 4], &[12, 12, 4, 1], &[12, 99, 4, 1]);
        assert_eq!((d, a, b), (vec![24], vec![1], vec![1]));
        // A transpose keeps its axes.
        let (d, a, b) = coalesce(&[3, 2], &[1, 3], &[2, 1]);
        assert_eq!((d, a, b), (vec![3, 2], vec![1, 3], vec![2, 1]));
        // Broadcast axis (stride 0) stays separate.
        let (d, _, _) = coalesce(&[4, 5], &[0, 1], &[5, 1]);
        assert_eq!(d, vec![4, 5]);
    }
}
