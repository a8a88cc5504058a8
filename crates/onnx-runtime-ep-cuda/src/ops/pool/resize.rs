//! Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9): nearest (four rounding modes and
//! Resize-10's), linear and cubic over any set of axes, every coordinate transformation mode,
//! antialias, axes, keep_aspect_ratio_policy, tf_crop_and_resize with roi and extrapolation.
//!
//! The geometry and the per-axis tap plan are the CPU provider's, ported in `resize_plan`.
//! Each plan becomes a table uploaded once per geometry into a device buffer the kernel
//! keeps; a run then reads roi/scales/sizes (through [`FloatReads`]: nothing when they are
//! initializers) and launches one kernel. Nearest is a bit-exact gather for every dtype (16
//! bytes of the innermost axis per thread where the layout allows); interpolation computes in
//! float (double for double and integers) and rounds integers half to even.

use super::resize_plan::{
    build_table, resize_spec, table_special, upsample_spec, Ctm, Geometry, Mode, ResizeSpec, Slot,
};
use super::{DeviceBlocks, FastDiv, FloatReads, FloatValues, FAST_LIMIT};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{DataType, Node};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const RS_MAX: usize = 8;

/// Mirrors `struct ResizeParams` in `kernels/resize.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ResizeParams {
    n: i64,
    rank: i32,
    m: i32,
    fast: i32,
    special: i32,
    out_dims: [i64; RS_MAX],
    div: [FastDiv; RS_MAX],
    xs: [i64; RS_MAX],
    ys: [i64; RS_MAX],
    slot: [i32; RS_MAX],
    axis: [i32; RS_MAX],
    taps: [i32; RS_MAX],
    tab: [i64; RS_MAX],
    flag: [i64; RS_MAX],
    idx: u64,
    wf: u64,
    wd: u64,
    flags: u64,
    extrap: u64,
    div_vec: FastDiv,
}

/// A geometry's tables on the device.
struct Table {
    slots: Vec<Slot>,
    /// Whether any output coordinate is outside the crop or has no tap.
    special: bool,
    idx: u64,
    wf: u64,
    wd: u64,
    flags: u64,
}

/// What a table depends on: input and output shapes, scales and roi (as bits).
type TableKey = (Vec<usize>, Vec<usize>, Vec<u64>, Vec<(u64, u64)>);

/// The dtypes Resize takes (the CPU provider's: floats and fixed-width integers).
const DTYPES: [DataType; 12] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
];

/// The launch parameters of a resize of `x` (shape, strides) into `y` (shape, strides) with
/// `table` (`extrap`: the extrapolation value's bits in the dtype).
fn resize_params(
    (xshape, xstrides): (&[usize], &[usize]),
    (yshape, ystrides): (&[usize], &[usize]),
    table: &Table,
    extrap: u64,
) -> ResizeParams {
    let rank = xshape.len();
    let slot_of = |a: usize| table.slots.iter().position(|s| s.axis == a);
    // Axes of the walk: (extent, input stride, output stride, slot), with size-1 axes that
    // are not resampled dropped and neighbouring plain axes merged where both layouts allow.
    let mut walk: Vec<(usize, i64, i64, Option<usize>)> = Vec::with_capacity(rank);
    for a in 0..rank {
        let (d, xs, ys, s) = (
            yshape[a],
            xstrides[a] as i64,
            ystrides[a] as i64,
            slot_of(a),
        );
        if s.is_none() && d == 1 {
            continue;
        }
        if let Some(last) = walk.last_mut() {
            if s.is_none() && last.3.is_none() && last.1 == xs * d as i64 && last.2 == ys * d as i64
            {
                last.0 *= d;
                last.1 = xs;
                last.2 = ys;
                continue;
            }
        }
        walk.push((d, xs, ys, s));
    }
    let mut p = ResizeParams {
        n: yshape.iter().product::<usize>() as i64,
        rank: walk.len() as i32,
        m: table.slots.len() as i32,
        fast: (yshape.iter().product::<usize>() <= FAST_LIMIT) as i32,
        special: table.special as i32,
        idx: table.idx,
        wf: table.wf,
        wd: table.wd,
        flags: table.flags,
        extrap,
        slot: [-1; RS_MAX],
        ..Default::default()
    };
    for (k, &(d, xs, ys, s)) in walk.iter().enumerate() {
        p.out_dims[k] = d as i64;
        p.div[k] = FastDiv::new(d);
        p.xs[k] = xs;
        p.ys[k] = ys;
        if let Some(s) = s {
            p.slot[k] = s as i32;
        }
    }
    for (s, sl) in table.slots.iter().enumerate() {
        // The walk position of the slot's axis (its input stride is read there).
        let k = walk
            .iter()
            .position(|w| w.3 == Some(s))
            .expect("every resampled axis is in the walk");
        p.axis[s] = k as i32;
        p.taps[s] = sl.taps as i32;
        p.tab[s] = sl.tab as i64;
        p.flag[s] = sl.flag as i64;
    }
    p
}

/// The elements per thread of the vector nearest kernel (16 bytes of the innermost walk
/// axis) for elements of `w` bytes written at `y`, when `p`'s walk allows it: the innermost
/// axis contiguous in the output with an extent that is a multiple of the width, every other
/// output stride a multiple too, and `y` 16-byte aligned.
fn vector_width(p: &ResizeParams, w: usize, y: u64) -> Option<usize> {
    let v = 16 / w.clamp(1, 16);
    let rank = p.rank as usize;
    if v < 2 || rank == 0 || !y.is_multiple_of(16) {
        return None;
    }
    let last = rank - 1;
    let v64 = v as i64;
    (p.ys[last] == 1 && p.out_dims[last] % v64 == 0 && p.ys[..last].iter().all(|&s| s % v64 == 0))
        .then_some(v)
}

struct ResizeKernel {
    base: Base,
    spec: ResizeSpec,
    reads: FloatReads,
    /// `rs_nearest_w{1,2,4,8}` and `rs_nearest_vec_w{1,2,4,8}`.
    nearest: [Function; 4],
    nearest_vec: [Function; 4],
    /// `rs_interp_<dtype>_m{1,2,0}`.
    interp: HashMap<DataType, [Function; 3]>,
    tables: Mutex<HashMap<TableKey, Arc<Table>>>,
    blocks: DeviceBlocks,
}

impl ResizeKernel {
    fn check_dtype(&self, dtype: DataType) -> EpResult<()> {
        if DTYPES.contains(&dtype) {
            Ok(())
        } else {
            Err(self.base.unsupported(
                dtype,
                "the CUDA Resize takes float, double, float16, bfloat16 and integer types",
            ))
        }
    }

    fn output_shape(
        &self,
        inputs: &[TensorView<'_>],
        values: &FloatValues,
    ) -> EpResult<(DataType, Geometry)> {
        let x = self.base.req(inputs, 0)?;
        check_view_rank(&self.base, x.shape)?;
        let sizes_dtype = self
            .spec
            .sizes_in
            .and_then(|i| self.base.input(inputs, i))
            .map(|v| v.dtype);
        let g = self.spec.geometry(values, x.shape, sizes_dtype)?;
        self.check_dtype(x.dtype)?;
        Ok((x.dtype, g))
    }

    /// The device table of a geometry: built and uploaded on first use, then kept.
    fn table(&self, shape: &[usize], g: &Geometry) -> EpResult<Arc<Table>> {
        let (out, scales, roi) = g;
        let key: TableKey = (
            shape.to_vec(),
            out.clone(),
            scales.iter().map(|s| s.to_bits()).collect(),
            roi.iter().map(|r| (r.0.to_bits(), r.1.to_bits())).collect(),
        );
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = tables.get(&key) {
            return Ok(t.clone());
        }
        if self.base.rt.is_capturing() {
            return Err(EpError::Capture {
                node: self.base.node.clone(),
                message: "Resize builds its sampling table on the first run of a geometry, \
                          which cannot happen during capture; run this signature eagerly first"
                    .into(),
            });
        }
        if shape.iter().any(|&d| d > i32::MAX as usize) {
            return Err(self.base.err(format!(
                "input extents {shape:?} exceed the CUDA Resize's 2^31 limit per axis"
            )));
        }
        let (bytes, slots, at) = build_table(&self.spec.at, shape, g);
        let ptr = self.blocks.upload(&bytes)?;
        let table = Arc::new(Table {
            special: table_special(&bytes, at[3]),
            slots,
            idx: ptr + at[0] as u64,
            wd: ptr + at[1] as u64,
            wf: ptr + at[2] as u64,
            flags: ptr + at[3] as u64,
        });
        tables.insert(key, table.clone());
        Ok(table)
    }

    fn launch(&self, x: &TensorView<'_>, y: &TensorMut<'_>, table: &Table) -> EpResult<()> {
        let n = y.numel();
        if n == 0 {
            return Ok(());
        }
        let mut p = resize_params(
            (x.shape, x.strides),
            (y.shape, y.strides),
            table,
            self.spec.extrap_bits(x.dtype),
        );
        let m = table.slots.len();
        let (mut px, mut py) = (ptr_of(x), mut_ptr_of(y));
        let mut threads = n as u64;
        let f = if self.spec.at.mode == Mode::Nearest || m == 0 {
            let w = x.dtype.element_size().unwrap_or(8);
            let slot = match w {
                1 => 0,
                2 => 1,
                4 => 2,
                _ => 3,
            };
            match vector_width(&p, w, py) {
                Some(v) => {
                    let last = p.rank as usize - 1;
                    p.div_vec = FastDiv::new(p.out_dims[last] as usize / v);
                    threads = (n / v) as u64;
                    self.nearest_vec[slot]
                }
                None => self.nearest[slot],
            }
        } else {
            let fns = self
                .interp
                .get(&x.dtype)
                .ok_or_else(|| self.base.unsupported(x.dtype, "no interpolation kernel"))?;
            match m {
                1 => fns[0],
                2 => fns[1],
                _ => fns[2],
            }
        };
        let mut args = [arg(&mut px), arg(&mut py), arg(&mut p)];
        // SAFETY: rs_*(x, y, ResizeParams) reads x inside its view (table indices are clamped
        // to each axis) and the kernel's table block, and writes inside y's view.
        unsafe { self.base.rt.launch(f, threads, &mut args) }
    }
}

impl Kernel for ResizeKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.reads.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let values = self.reads.peek(&self.base, inputs)?;
        let (dtype, (out, _, _)) = self.output_shape(inputs, &values)?;
        Ok(vec![(dtype, out)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let values = self.reads.values(base, inputs, outputs)?;
        let (dtype, g) = self.output_shape(inputs, &values)?;
        base.expect_outputs(outputs, &[(dtype, g.0.clone())])?;
        let x = base.req(inputs, 0)?;
        if outputs[0].numel() == 0 {
            return Ok(());
        }
        let table = self.table(x.shape, &g)?;
        self.launch(x, &outputs[0], &table)
    }

    fn capture_support(&self) -> CaptureSupport {
        if self
            .tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            return CaptureSupport::Unsupported {
                reason: format!(
                    "{}: {} builds its sampling table on its first run; run it once eagerly \
                     with the signature to capture",
                    self.base.node, self.base.op
                ),
            };
        }
        self.reads.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.reads.set_constant(constant);
    }
}

fn build(rt: &Arc<CudaRuntime>, node: &Node, spec: ResizeSpec) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, node);
    let mut host: Vec<usize> = Vec::new();
    if spec.at.ctm == Ctm::TfCropAndResize {
        host.extend(spec.roi_in);
    }
    if spec.scales_attr.is_none() {
        host.extend(spec.scales_in);
    }
    host.extend(spec.sizes_in);
    let reads = FloatReads::new(&base, &host, "roi/scales/sizes inputs");
    let module = base.module(&super::resize_module())?;
    let nearest = [
        module.function("rs_nearest_w1")?,
        module.function("rs_nearest_w2")?,
        module.function("rs_nearest_w4")?,
        module.function("rs_nearest_w8")?,
    ];
    let nearest_vec = [
        module.function("rs_nearest_vec_w1")?,
        module.function("rs_nearest_vec_w2")?,
        module.function("rs_nearest_vec_w4")?,
        module.function("rs_nearest_vec_w8")?,
    ];
    let mut interp = HashMap::new();
    for dtype in DTYPES {
        let tag = type_tag(dtype).expect("a typed dtype");
        let f = |m: &str| module.function(&format!("rs_interp_{tag}_{m}"));
        interp.insert(dtype, [f("m1")?, f("m2")?, f("m0")?]);
    }
    Ok(Box::new(ResizeKernel {
        blocks: DeviceBlocks::new(rt),
        base,
        spec,
        reads,
        nearest,
        nearest_vec,
        interp,
        tables: Mutex::new(HashMap::new()),
    }))
}

fn resize(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req.node, resize_spec(req.node, req.opset)?)
}

fn upsample(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req.node, upsample_spec(req.node, req.opset)?)
}

pub fn register(r: &mut Registry) {
    for since in [10, 11, 13, 18, 19] {
        r.register("", "Resize", since, resize);
    }
    for since in [7, 9] {
        r.register("", "Upsample", since, upsample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(
            std::mem::size_of::<ResizeParams>(),
            24 + 64 + 128 + 64 * 2 + 32 * 3 + 64 * 2 + 40 + 16
        );
    }
}
