//! Softmax, LogSoftmax and Hardmax for float, double, float16 and bfloat16. Before opset 13
//! the input is coerced to 2-D at `axis` (default 1) and normalized over the trailing axes;
//! from 13 on over the single `axis` (default -1). Numerically stable (the row maximum is
//! subtracted); half types compute in float. Rows that fit in registers are read once.

use super::*;
use onnx_runtime_ep_api::{CaptureSupport, Kernel, KernelRequest, TensorMut, TensorView};
use std::collections::HashMap;

/// Softmax (0), LogSoftmax (1), Hardmax (2).
const OPS: [&str; 3] = ["Softmax", "LogSoftmax", "Hardmax"];

pub(crate) fn module(mode: usize) -> ModuleSpec {
    ModuleSpec::new(
        OPS[mode].to_ascii_lowercase(),
        with_common!("../../kernels/softmax.cu"),
    )
    .define("MODE", &mode.to_string())
    .with_half()
}

/// `SoftParams` of softmax.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SoftParams {
    pub rows: i64,
    pub len: i64,
    pub k_rank: i32,
    pub r_rank: i32,
    pub contig: i32,
    pub _pad: i32,
    pub k_dims: [i64; MAX_RANK],
    pub k_in: [i64; MAX_RANK],
    pub k_out: [i64; MAX_RANK],
    pub r_dims: [i64; MAX_RANK],
    pub r_in: [i64; MAX_RANK],
    pub r_out: [i64; MAX_RANK],
}

/// The kernels of softmax.cu.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SoftKernel {
    /// The row in registers: `nv` vectors a thread, 16-byte vectors (`vector`) or scalars.
    Reg {
        vector: bool,
        nv: i64,
    },
    /// A contiguous aligned row longer than the registers hold, in 16-byte vectors.
    LoopV,
    Loop,
    Tile,
}

/// The vectors a thread of the register kernels may hold (soft_rvN / soft_rsN of softmax.cu):
/// at most 32 float (16 in scalars) or 8 double values, which fit 64 registers without
/// spilling.
pub(crate) fn reg_caps(elem: usize, vector: bool) -> &'static [i64] {
    match (vector, elem) {
        (true, 4) => &[2, 4, 8],
        (true, _) => &[2, 4],
        (false, 8) => &[4, 8],
        (false, _) => &[4, 16],
    }
}

/// The group (threads per row, a power of two) and vectors a thread of the register kernels
/// for rows of `nvec` vectors: the fewest vectors a thread that keep a row within one warp
/// (reduced by shuffles alone), else the most, over up to 1024 threads; `None` when the row
/// does not fit.
pub(crate) fn reg_shape(nvec: i64, caps: &[i64]) -> Option<(i64, i64)> {
    for &c in caps {
        let g = np2(ceil_div(nvec, c));
        if g <= 32 {
            return Some((g, c));
        }
    }
    let c = *caps.last()?;
    let g = np2(ceil_div(nvec, c));
    (g <= 1024).then_some((g, c))
}

/// Plans Softmax / LogSoftmax (`reg`: with the register kernels) or Hardmax over the row axes
/// `[start, end)` of a tensor of `shape` (input strides `a`, output strides `b`, elements of
/// `elem` bytes; `aligned`: both pointers are 16-byte aligned). `None` for an empty tensor.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_softmax(
    shape: &[usize],
    a: &[i64],
    b: &[i64],
    (start, end): (usize, usize),
    elem: usize,
    aligned: bool,
    reg: bool,
) -> Result<Option<Launch<SoftKernel, SoftParams>>, String> {
    let reduced: Vec<bool> = (0..shape.len()).map(|k| k >= start && k < end).collect();
    let (kept, red) = split_axes(shape, a, b, &reduced, false);
    // Hardmax (no register kernels) picks the first maximum in the row's logical order, so
    // its row index must walk the row axes in the tensor's order, not in memory order (a
    // transposed input would otherwise break ties at a different element).
    let red = if reg {
        red
    } else {
        logical_axes(shape, a, b, &reduced)
    };
    let (rows, len) = (product(&kept), product(&red));
    if rows == 0 || len == 0 {
        return Ok(None);
    }
    let row_path = len > 1 && reduced_is_fast(&kept, &red);
    let kept = if row_path {
        kept
    } else {
        split_axes(shape, a, b, &reduced, true).0
    };
    if kept.len().max(red.len()) > MAX_RANK {
        return Err(format!("more than {MAX_RANK} axes after merging"));
    }
    let contig = red.len() == 1 && red[0].a == 1 && red[0].b == 1;
    let mut p = SoftParams {
        rows,
        len,
        k_rank: kept.len() as i32,
        r_rank: red.len() as i32,
        contig: contig as i32,
        ..Default::default()
    };
    fill_axes(&kept, &mut p.k_dims, &mut p.k_in, &mut p.k_out);
    fill_axes(&red, &mut p.r_dims, &mut p.r_in, &mut p.r_out);
    if !row_path {
        let inner = kept.last().map_or(1, |k| k.dim as i64);
        let (bx, by) = tile_block(inner, rows, len);
        return Ok(Some(Launch {
            kernel: SoftKernel::Tile,
            grid: (grid_dim(ceil_div(rows, bx))?, 1, 1),
            block: (bx as u32, by as u32, 1),
            shared: (bx * by * ACC_BYTES) as u32,
            params: p,
        }));
    }
    let vmax = (16 / elem) as i64;
    let bytes16 = |s: i64| (s * elem as i64) % 16 == 0;
    let vector =
        contig && len % vmax == 0 && aligned && kept.iter().all(|k| bytes16(k.a) && bytes16(k.b));
    let v = if vector { vmax } else { 1 };
    let nvec = len / v;
    let shape = if reg {
        reg_shape(nvec, reg_caps(elem, vector))
    } else {
        None
    };
    let (kernel, g) = match shape {
        Some((g, nv)) => (SoftKernel::Reg { vector, nv }, g),
        None if reg && vector => (SoftKernel::LoopV, np2(ceil_div(nvec, 16)).clamp(32, 1024)),
        None => (SoftKernel::Loop, np2(ceil_div(len, 8)).clamp(32, 1024)),
    };
    // Groups of up to a warp: 128-thread blocks (fine-grained scheduling of short rows).
    let (bx, by) = (g as u32, (128 / g).max(1) as u32);
    Ok(Some(Launch {
        kernel,
        grid: (grid_dim(ceil_div(rows, i64::from(by)))?, 1, 1),
        block: (bx, by, 1),
        shared: 0,
        params: p,
    }))
}

/// The row axes (`reduced`) of size > 1 in the tensor's order, contiguous neighbours merged.
fn logical_axes(shape: &[usize], a: &[i64], b: &[i64], reduced: &[bool]) -> Vec<Axis> {
    let axes = (0..shape.len())
        .filter(|&k| reduced[k] && shape[k] != 1)
        .map(|k| Axis {
            dim: shape[k],
            a: a[k],
            b: b[k],
        })
        .collect();
    super::merge(axes)
}

struct SoftFns {
    /// Register-resident rows (Softmax, LogSoftmax): `(vector, nv)` -> soft_rvN / soft_rsN.
    reg: Vec<((bool, i64), Function)>,
    loopv: Option<Function>,
    lp: Function,
    tile: Function,
}

impl SoftFns {
    fn kernel(&self, k: SoftKernel) -> Option<Function> {
        match k {
            SoftKernel::Reg { vector, nv } => self
                .reg
                .iter()
                .find(|(key, _)| *key == (vector, nv))
                .map(|(_, f)| *f),
            SoftKernel::LoopV => self.loopv,
            SoftKernel::Loop => Some(self.lp),
            SoftKernel::Tile => Some(self.tile),
        }
    }
}

struct SoftmaxKernel {
    base: Base,
    legacy: bool,
    axis: i64,
    fns: HashMap<DataType, SoftFns>,
}

impl SoftmaxKernel {
    /// The row axes `[start, end)` of the input.
    fn row_axes(&self, x: &TensorView<'_>) -> EpResult<(usize, usize)> {
        let base = &self.base;
        if !self.fns.contains_key(&x.dtype) {
            return Err(base.unsupported(
                x.dtype,
                format!("{} takes float, double, float16 and bfloat16", base.op),
            ));
        }
        let rank = x.rank();
        if rank == 0 {
            return Ok((0, 0));
        }
        if self.legacy {
            let r = rank as i64;
            let a = if self.axis < 0 {
                self.axis + r
            } else {
                self.axis
            };
            if a < 0 || a > r {
                return Err(base.err(format!(
                    "axis {} is out of range for rank {rank} (accepted: [-{rank}, {rank}])",
                    self.axis
                )));
            }
            Ok((a as usize, rank))
        } else {
            let a = base.axis(self.axis, rank, "axis")?;
            Ok((a, a + 1))
        }
    }
}

impl Kernel for SoftmaxKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        check_view_rank(base, x.shape)?;
        self.row_axes(x)?;
        Ok(vec![(x.dtype, x.shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        check_view_rank(base, x.shape)?;
        let (start, end) = self.row_axes(x)?;
        base.expect_outputs(outputs, &[(x.dtype, x.shape.to_vec())])?;
        let out = &outputs[0];
        let fns = &self.fns[&x.dtype];
        let (src, dst) = (ptr_of(x), mut_ptr_of(out));
        let plan = plan_softmax(
            x.shape,
            &istrides(x.strides),
            &istrides(out.strides),
            (start, end),
            base.width(x.dtype)?,
            src.is_multiple_of(16) && dst.is_multiple_of(16),
            !fns.reg.is_empty(),
        )
        .map_err(|e| base.err(e))?;
        let Some(l) = plan else { return Ok(()) };
        let f = fns
            .kernel(l.kernel)
            .ok_or_else(|| base.err(format!("no {:?} kernel for this op", l.kernel)))?;
        let (mut pi, mut po, mut p) = (src, dst, l.params);
        let mut args = [arg(&mut pi), arg(&mut po), arg(&mut p)];
        // SAFETY: the kernel reads and writes each row inside the input and output views.
        unsafe { base.rt.launch_cfg(f, l.grid, l.block, l.shared, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, mode: usize) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let base = Base::new(rt, node);
    let module = base.module(&module(mode))?;
    let mut fns = HashMap::new();
    for (dtype, tag, _) in TYPED.iter().filter(|t| t.0.is_float()) {
        let elem = base.width(*dtype)?;
        let mut reg = Vec::new();
        let mut loopv = None;
        if mode < 2 {
            for vector in [true, false] {
                let kind = if vector { "rv" } else { "rs" };
                for &nv in reg_caps(elem, vector) {
                    let f = module.function(&format!("soft_{kind}{nv}_{tag}"))?;
                    reg.push(((vector, nv), f));
                }
            }
            loopv = Some(module.function(&format!("soft_loopv_{tag}"))?);
        }
        fns.insert(
            *dtype,
            SoftFns {
                reg,
                loopv,
                lp: module.function(&format!("soft_loop_{tag}"))?,
                tile: module.function(&format!("soft_tile_{tag}"))?,
            },
        );
    }
    let legacy = req.opset < 13;
    Ok(Box::new(SoftmaxKernel {
        legacy,
        axis: attr_int(node, "axis")?.unwrap_or(if legacy { 1 } else { -1 }),
        fns,
        base,
    }))
}

fn softmax(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, 0)
}

fn log_softmax(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, 1)
}

fn hardmax(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, 2)
}

pub fn register(r: &mut Registry) {
    let factories: [super::super::Factory; 3] = [softmax, log_softmax, hardmax];
    for (op, f) in OPS.iter().zip(factories) {
        for since in [1, 11, 13] {
            r.register("", op, since, f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardmax_rows_walk_the_logical_order() {
        // Hardmax-11 over axes 1.. of a [2, 3, 4, 5] input stored transposed (strides
        // reversed): the row index must be the logical one (first maximum wins ties).
        let l = plan_softmax(
            &[2, 3, 4, 5],
            &[1, 2, 6, 24],
            &[60, 20, 5, 1],
            (1, 4),
            8,
            true,
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(l.params.r_rank, 3);
        assert_eq!(&l.params.r_dims[..3], &[3, 4, 5]);
        assert_eq!(&l.params.r_in[..3], &[2, 6, 24]);
        assert_eq!(&l.params.r_out[..3], &[20, 5, 1]);
    }
}

#[cfg(test)]
mod squeeze_tests {
    use super::*;

    /// [1, 1000, 1, 1] (the output of a global pool) with axis 1: opset 1/11 rows over axes
    /// 1.. and opset 13 over axis 1 alone are both one contiguous row of 1000 elements.
    #[test]
    fn softmax_row_followed_by_unit_axes_stays_one_contiguous_row() {
        let (shape, s) = ([1usize, 1000, 1, 1], [1000i64, 1, 1, 1]);
        for axes in [(1, 4), (1, 2)] {
            for reg in [true, false] {
                for aligned in [true, false] {
                    for elem in [2usize, 4, 8] {
                        let l = plan_softmax(&shape, &s, &s, axes, elem, aligned, reg)
                            .unwrap()
                            .unwrap();
                        let what = format!("axes {axes:?} reg {reg} aligned {aligned} elem {elem}");
                        assert_ne!(l.kernel, SoftKernel::Tile, "{what}");
                        assert_eq!((l.params.rows, l.params.len), (1, 1000), "{what}");
                        assert_eq!(l.params.k_rank, 0, "{what}");
                        assert_eq!(l.params.r_rank, 1, "{what}");
                        assert_eq!(l.params.contig, 1, "{what}");
                        assert_eq!(
                            (l.params.r_dims[0], l.params.r_in[0], l.params.r_out[0]),
                            (1000, 1, 1),
                            "{what}"
                        );
                        assert!(l.grid.0 >= 1 && l.grid.1 >= 1 && l.grid.2 >= 1, "{what}");
                        let threads = l.block.0 * l.block.1 * l.block.2;
                        assert!((1..=1024).contains(&threads), "{what}");
                        assert!(l.block.0.is_power_of_two(), "{what}");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    fn plan(rows: usize, len: usize, elem: usize, aligned: bool) -> Launch<SoftKernel, SoftParams> {
        let shape = [rows, len];
        let s = [len as i64, 1];
        plan_softmax(&shape, &s, &s, (1, 2), elem, aligned, true)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn the_benchmark_shapes_hold_rows_in_registers() {
        // [16384, 1024] f32: a warp a row, 8 vectors a lane, 4 rows a 128-thread block.
        let l = plan(16384, 1024, 4, true);
        assert_eq!(
            l.kernel,
            SoftKernel::Reg {
                vector: true,
                nv: 8
            }
        );
        assert_eq!((l.block, l.grid), ((32, 4, 1), (4096, 1, 1)));
        // [4096, 4096] f32: 4 warps a row.
        let l = plan(4096, 4096, 4, true);
        assert_eq!(
            l.kernel,
            SoftKernel::Reg {
                vector: true,
                nv: 8
            }
        );
        assert_eq!((l.block, l.grid), ((128, 1, 1), (4096, 1, 1)));
        // [512, 32768] f32: 1024 threads a row.
        let l = plan(512, 32768, 4, true);
        assert_eq!(
            l.kernel,
            SoftKernel::Reg {
                vector: true,
                nv: 8
            }
        );
        assert_eq!(l.block, (1024, 1, 1));
        // f16 rows of 1024: a warp, 4 vectors of 8 a lane.
        let l = plan(100, 1024, 2, true);
        assert_eq!(
            l.kernel,
            SoftKernel::Reg {
                vector: true,
                nv: 4
            }
        );
        assert_eq!(l.block, (32, 4, 1));
        // Longer rows: the vector loop; unaligned ones: scalars.
        assert_eq!(plan(4, 40000, 4, true).kernel, SoftKernel::LoopV);
        assert_eq!(plan(4, 40000, 4, false).kernel, SoftKernel::Loop);
        assert_eq!(
            plan(4, 1000, 4, false).kernel,
            SoftKernel::Reg {
                vector: false,
                nv: 16
            }
        );
    }

    #[test]
    fn register_shapes_cover_the_row_with_existing_kernels() {
        for elem in [2usize, 4, 8] {
            for vector in [true, false] {
                let caps = reg_caps(elem, vector);
                for nvec in 1..20000i64 {
                    let Some((g, nv)) = reg_shape(nvec, caps) else {
                        assert!(nvec > 1024 * caps.last().unwrap());
                        continue;
                    };
                    let what = format!("elem {elem} vector {vector} nvec {nvec}");
                    assert!(caps.contains(&nv), "{what}");
                    assert!(g.count_ones() == 1 && g <= 1024, "{what}: group {g}");
                    assert!(g * nv >= nvec, "{what}: {g} x {nv}");
                    // Rows that fit a warp take one.
                    if nvec <= 32 * caps.last().unwrap() {
                        assert!(g <= 32, "{what}: group {g}");
                    }
                }
            }
        }
    }
}
