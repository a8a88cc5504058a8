//! Channel-wise and grouped normalizations: BatchNormalization (inference: a per-channel
//! affine `x * a + c` folded on the fly, 16-byte vectorized on contiguous tensors; training:
//! batch statistics and the running / saved statistics outputs), InstanceNormalization,
//! GroupNormalization (opset 18: per-group scale and bias; 21: per-channel),
//! MeanVarianceNormalization and LRN.
//!
//! The grouped norms view the input as groups (an instance and channel, an instance and group
//! of channels, the kept coordinates, a channel) of `len` elements in segments of a contiguous
//! (or strided) run. One block per group computes the statistics and normalizes (the second
//! read mostly hits L2); when there are too few groups to fill the device, each group is split
//! over several blocks: `group_stats` writes partial sums to a workspace the kernel keeps, and
//! `group_apply` combines them.

use super::kparams::*;
use super::{acc_dtype, chan_module, dtype_code, require_float, Scratch, FLOATS};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

struct ChanFns {
    stats: Function,
    apply: Function,
    bn_final: Function,
    bn_infer: Function,
    bn_infer_vec: Function,
    lrn: Function,
}

fn load_fns(base: &Base) -> EpResult<HashMap<DataType, ChanFns>> {
    let mut map = HashMap::new();
    for &(t, _, _) in &FLOATS {
        let m = base.module(&chan_module(t).expect("a float dtype"))?;
        map.insert(
            t,
            ChanFns {
                stats: m.function("group_stats")?,
                apply: m.function("group_apply")?,
                bn_final: m.function("bn_final")?,
                bn_infer: m.function("bn_infer")?,
                bn_infer_vec: m.function("bn_infer_vec")?,
                lrn: m.function("lrn")?,
            },
        );
    }
    Ok(map)
}

#[derive(Clone, Debug)]
enum Op {
    Batch {
        eps: f64,
        momentum: f64,
        training: bool,
    },
    Instance {
        eps: f64,
    },
    Group {
        eps: f64,
        groups: usize,
        per_channel: bool,
    },
    Mvn {
        axes: Vec<i64>,
    },
    Lrn {
        size: usize,
        alpha: f64,
        beta: f64,
        bias: f64,
    },
}

struct ChanKernel {
    base: Base,
    op: Op,
    fns: HashMap<DataType, ChanFns>,
    scratch: Scratch,
}

impl Drop for ChanKernel {
    fn drop(&mut self) {
        self.scratch.release(&self.base);
    }
}

/// One axis of a grouped view: (size, x stride, y stride).
type Axis = (usize, i64, i64);

/// The element stride of a parameter holding `count` values in order (one non-unit axis, or
/// dense); `None` for other layouts.
fn flat_stride(v: &TensorView<'_>) -> Option<i64> {
    let non_unit: Vec<usize> = (0..v.shape.len()).filter(|&k| v.shape[k] != 1).collect();
    match non_unit.len() {
        0 => Some(0),
        1 => Some(v.strides[non_unit[0]] as i64),
        _ => v.is_contiguous().then_some(1),
    }
}

/// A parameter of `count` values: its element stride, or an error naming it.
fn param(base: &Base, v: &TensorView<'_>, count: usize, what: &str) -> EpResult<i64> {
    require_float(base, v.dtype, what)?;
    if v.numel() != count {
        return Err(base.err(format!(
            "{what} has {} values (shape {:?}); want {count}",
            v.numel(),
            v.shape
        )));
    }
    flat_stride(v).ok_or_else(|| {
        base.unsupported(
            v.dtype,
            format!("{what} of shape {:?} has a layout the CUDA kernel does not take (strided over several axes)", v.shape),
        )
    })
}

/// Group parameters for groups over the `kept` axes and elements over the `red` axes. With
/// `keep_first`, the first reduced axis stays a segment axis of its own (its coordinate picks
/// the per-channel scale of GroupNormalization 21).
fn group_params(kept: &[Axis], red: &[Axis], keep_first: bool) -> GroupParams {
    let split = |axes: &[Axis]| {
        let dims: Vec<usize> = axes.iter().map(|a| a.0).collect();
        let xs: Vec<i64> = axes.iter().map(|a| a.1).collect();
        let ys: Vec<i64> = axes.iter().map(|a| a.2).collect();
        coalesce(&dims, &xs, &ys)
    };
    let (gd, gx, gy) = split(kept);
    let (mut sd, mut sx, mut sy) = (Vec::new(), Vec::new(), Vec::new());
    let rest = if keep_first && !red.is_empty() {
        sd.push(red[0].0 as i64);
        sx.push(red[0].1);
        sy.push(red[0].2);
        &red[1..]
    } else {
        red
    };
    let (rd, rx, ry) = split(rest);
    let (run, rxs, rys) = match rd.len() {
        0 => (1, 0, 0),
        n => {
            for k in 0..n - 1 {
                sd.push(rd[k] as i64);
                sx.push(rx[k]);
                sy.push(ry[k]);
            }
            (rd[n - 1] as i64, rx[n - 1], ry[n - 1])
        }
    };
    GroupParams {
        groups: kept.iter().map(|a| a.0 as i64).product(),
        len: red.iter().map(|a| a.0 as i64).product(),
        run,
        rx: rxs,
        ry: rys,
        nsplit: 1,
        grank: gd.len() as i32,
        srank: sd.len() as i32,
        amod: 1,
        amul: 0,
        gdims: fill(&gd.iter().map(|&d| d as i64).collect::<Vec<_>>()),
        gx: fill(&gx),
        gy: fill(&gy),
        sdims: fill(&sd),
        sx: fill(&sx),
        sy: fill(&sy),
        ..Default::default()
    }
}

/// The statistics outputs of a BatchNormalization call.
struct BnOutputs {
    mean: CuPtr,
    var: CuPtr,
    mean_dt: DataType,
    var_dt: DataType,
    mean_s: i64,
    var_s: i64,
    outs: [CuPtr; 4],
    out_s: [i64; 4],
    flags: i32,
    out_dt: DataType,
    momentum: f64,
    eps: f64,
}

impl ChanKernel {
    fn fns(&self, t: DataType) -> EpResult<&ChanFns> {
        self.fns
            .get(&t)
            .ok_or_else(|| self.base.unsupported(t, "no kernel for this dtype"))
    }

    fn x<'v, 'a>(
        &self,
        inputs: &'v [TensorView<'a>],
        min_rank: usize,
    ) -> EpResult<&'v TensorView<'a>> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        require_float(base, x.dtype, "inputs")?;
        check_view_rank(base, x.shape)?;
        if x.shape.len() < min_rank {
            return Err(base.err(format!(
                "X of shape {:?} must have rank >= {min_rank} ([N, C, ...])",
                x.shape
            )));
        }
        Ok(x)
    }

    /// Checks the inputs; returns the output types.
    fn check(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        match &self.op {
            Op::Batch { training, .. } => {
                let x = self.x(inputs, 2)?;
                let ch = x.shape[1];
                let inner: usize = x.shape[2..].iter().product();
                let ps: Vec<&TensorView<'_>> = (1..5)
                    .map(|i| base.req(inputs, i))
                    .collect::<EpResult<_>>()?;
                let per = if ps[0].numel() == ch { 1 } else { inner };
                if *training && per != 1 {
                    return Err(base.unsupported(
                        x.dtype,
                        "training mode with per-activation parameters (spatial = 0) is not \
                         implemented on CUDA",
                    ));
                }
                for (p, what) in ps.iter().zip(["scale", "B", "mean", "var"]) {
                    param(base, p, ch * per, what)?;
                    if per != 1 && !p.is_contiguous() && flat_stride(p) != Some(1) {
                        return Err(base.unsupported(
                            p.dtype,
                            format!("non-contiguous per-activation {what}"),
                        ));
                    }
                }
                let mut types = vec![(x.dtype, x.shape.to_vec())];
                for _ in 1..base.outputs.min(5) {
                    types.push((ps[2].dtype, ps[2].shape.to_vec()));
                }
                Ok(types)
            }
            Op::Instance { .. } => {
                let x = self.x(inputs, 3)?;
                param(base, base.req(inputs, 1)?, x.shape[1], "scale")?;
                param(base, base.req(inputs, 2)?, x.shape[1], "B")?;
                Ok(vec![(x.dtype, x.shape.to_vec())])
            }
            Op::Group {
                groups,
                per_channel,
                ..
            } => {
                let x = self.x(inputs, 2)?;
                let ch = x.shape[1];
                if ch % groups != 0 {
                    return Err(base.err(format!(
                        "X {:?} must be [N, C, ...] with C divisible by num_groups={groups}",
                        x.shape
                    )));
                }
                let count = if *per_channel { ch } else { *groups };
                param(base, base.req(inputs, 1)?, count, "scale")?;
                param(base, base.req(inputs, 2)?, count, "bias")?;
                Ok(vec![(x.dtype, x.shape.to_vec())])
            }
            Op::Mvn { .. } => {
                let x = self.x(inputs, 0)?;
                self.mvn_axes(x.shape.len())?;
                Ok(vec![(x.dtype, x.shape.to_vec())])
            }
            Op::Lrn { .. } => {
                let x = self.x(inputs, 2)?;
                Ok(vec![(x.dtype, x.shape.to_vec())])
            }
        }
    }

    fn mvn_axes(&self, rank: usize) -> EpResult<Vec<bool>> {
        let Op::Mvn { axes } = &self.op else {
            unreachable!("mvn_axes on another op")
        };
        let mut reduced = vec![false; rank];
        for &a in axes {
            reduced[self.base.axis(a, rank, "axes entry")?] = true;
        }
        Ok(reduced)
    }

    /// Runs a grouped normalization: statistics (split over blocks when there are few
    /// groups), BatchNormalization statistics outputs, then the normalization.
    #[allow(clippy::too_many_arguments)]
    fn grouped(
        &self,
        x: &TensorView<'_>,
        y: &TensorMut<'_>,
        mut gp: GroupParams,
        scale: Option<(&TensorView<'_>, i64)>,
        bias: Option<(&TensorView<'_>, i64)>,
        bn: Option<BnOutputs>,
    ) -> EpResult<()> {
        let base = &self.base;
        let t = x.dtype;
        let fns = self.fns(t)?;
        if gp.groups == 0 || gp.len == 0 {
            return Ok(());
        }
        let (g, len) = (gp.groups, gp.len);
        let want_blocks = 4 * i64::from(base.rt.sm_count());
        let nsplit = if g < want_blocks && len >= 8192 {
            ((want_blocks + g - 1) / g).min(len / 4096).clamp(1, 64)
        } else {
            1
        };
        gp.nsplit = nsplit as i32;
        let chunk = (len + nsplit - 1) / nsplit;
        let block = if chunk >= 256 {
            256
        } else {
            (chunk as u32).div_ceil(32).max(1) * 32
        };
        let total = g * nsplit;
        let grid = total.min(1 << 24) as u32;
        if let (Some((s, ss)), Some((b, bs))) = (scale, bias) {
            gp.has_affine = 1;
            gp.scale_dt = dtype_code(s.dtype);
            gp.bias_dt = dtype_code(b.dtype);
            gp.scale_stride = ss;
            gp.bias_stride = bs;
        }
        let mut px = ptr_of(x);
        let mut ws: CuPtr = 0;
        if nsplit > 1 || bn.is_some() {
            let width = acc_dtype(t).element_size().unwrap_or(4);
            ws = self.scratch.get(base, total as usize * 2 * width)?;
            let mut args = [arg(&mut px), arg(&mut ws), arg(&mut gp)];
            // SAFETY: group_stats(x, ws, GroupParams) reads inside x and writes 2 values per
            // (group, split) into the workspace sized above.
            unsafe {
                base.rt
                    .launch_cfg(fns.stats, (grid, 1, 1), (block, 1, 1), 0, &mut args)?
            };
        }
        if let Some(bn) = &bn {
            self.bn_final(fns, px, ws, &gp, bn, gp.groups)?;
        }
        let mut py = mut_ptr_of(y);
        let mut psc = scale.map_or(0, |s| ptr_of(s.0));
        let mut pb = bias.map_or(0, |b| ptr_of(b.0));
        let mut args = [
            arg(&mut px),
            arg(&mut py),
            arg(&mut psc),
            arg(&mut pb),
            arg(&mut ws),
            arg(&mut gp),
        ];
        // SAFETY: group_apply(x, y, scale, bias, ws, GroupParams) reads inside x, the
        // parameters (count checked) and the workspace, and writes inside y.
        unsafe {
            base.rt
                .launch_cfg(fns.apply, (grid, 1, 1), (block, 1, 1), 0, &mut args)
        }
    }

    /// Writes the BatchNormalization statistics outputs of `channels` channels.
    fn bn_final(
        &self,
        fns: &ChanFns,
        mut px: CuPtr,
        mut ws: CuPtr,
        gp: &GroupParams,
        bn: &BnOutputs,
        channels: i64,
    ) -> EpResult<()> {
        let mut f = BnFinal {
            channels,
            flags: bn.flags,
            mean_dt: dtype_code(bn.mean_dt),
            var_dt: dtype_code(bn.var_dt),
            out_dt: dtype_code(bn.out_dt),
            momentum: bn.momentum,
            eps: bn.eps,
            mean_s: bn.mean_s,
            var_s: bn.var_s,
            out_s: bn.out_s,
        };
        let mut gp = *gp;
        let (mut m, mut v) = (bn.mean, bn.var);
        let [mut o1, mut o2, mut o3, mut o4] = bn.outs;
        let mut args = [
            arg(&mut px),
            arg(&mut ws),
            arg(&mut m),
            arg(&mut v),
            arg(&mut o1),
            arg(&mut o2),
            arg(&mut o3),
            arg(&mut o4),
            arg(&mut gp),
            arg(&mut f),
        ];
        // SAFETY: bn_final(x, ws, mean, var, o1..o4, GroupParams, BnFinal) reads one value per
        // channel of each parameter (and the workspace in training) and writes one per
        // channel of each wanted output.
        unsafe {
            self.base
                .rt
                .launch(fns.bn_final, channels as u64, &mut args)
        }
    }

    fn batch(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &[TensorMut<'_>],
        eps: f64,
        momentum: f64,
        training: bool,
    ) -> EpResult<()> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let y = &outputs[0];
        let t = x.dtype;
        let fns = self.fns(t)?;
        let ch = x.shape[1];
        let inner: usize = x.shape[2..].iter().product();
        let ps: Vec<&TensorView<'_>> = (1..5)
            .map(|i| base.req(inputs, i))
            .collect::<EpResult<_>>()?;
        let per1 = ps[0].numel() == ch;
        let cnt = if per1 { ch } else { ch * inner };
        let mut pst = [0i64; 4];
        for (k, (p, what)) in ps.iter().zip(["scale", "B", "mean", "var"]).enumerate() {
            pst[k] = param(base, p, cnt, what)?;
        }
        let mut flags = 0;
        let mut outs = [0 as CuPtr; 4];
        let mut out_s = [0i64; 4];
        for k in 0..4 {
            if let Some(o) = outputs.get(k + 1) {
                flags |= 1 << k;
                outs[k] = mut_ptr_of(o);
                out_s[k] = flat_stride(&o.as_view()).ok_or_else(|| {
                    base.err(format!(
                        "output {} has a layout the CUDA kernel does not write (strided over \
                         several axes)",
                        k + 1
                    ))
                })?;
            }
        }
        let stats = |flags: i32| BnOutputs {
            mean: ptr_of(ps[2]),
            var: ptr_of(ps[3]),
            mean_dt: ps[2].dtype,
            var_dt: ps[3].dtype,
            mean_s: pst[2],
            var_s: pst[3],
            outs,
            out_s,
            flags,
            out_dt: ps[2].dtype,
            momentum,
            eps,
        };
        let xs = istrides(x.strides);
        let ys = istrides(y.strides);
        if training {
            let kept = [(ch, xs[1], ys[1])];
            let mut red: Vec<Axis> = vec![(x.shape[0], xs[0], ys[0])];
            red.extend((2..x.shape.len()).map(|k| (x.shape[k], xs[k], ys[k])));
            let mut gp = group_params(&kept, &red, false);
            gp.mode = NORM_BN;
            gp.eps = eps;
            gp.amod = ch as i64;
            gp.amul = 1;
            return self.grouped(
                x,
                y,
                gp,
                Some((ps[0], pst[0])),
                Some((ps[1], pst[1])),
                Some(stats(flags)),
            );
        }
        if flags != 0 {
            // Inference with the extra outputs: copies of the given statistics, as the CPU
            // provider writes them.
            let gp = GroupParams::default();
            self.bn_final(fns, ptr_of(x), 0, &gp, &stats(flags | 16), cnt as i64)?;
        }
        let n = x.numel();
        if n == 0 {
            return Ok(());
        }
        let mut p = BnParams {
            n: n as i64,
            channels: ch as i64,
            inner: inner as i64,
            per: per1 as i32,
            contig: (x.is_contiguous() && y.is_contiguous()) as i32,
            rank: x.shape.len() as i32,
            dt: [
                dtype_code(ps[0].dtype),
                dtype_code(ps[1].dtype),
                dtype_code(ps[2].dtype),
                dtype_code(ps[3].dtype),
            ],
            _pad: 0,
            eps,
            ps: pst,
            dims: fill(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>()),
            xs: fill(&xs),
            ys: fill(&ys),
        };
        let v = 16 / t.element_size().unwrap_or(4);
        let (mut px, mut py) = (ptr_of(x), mut_ptr_of(y));
        let vec = p.contig == 1
            && per1
            && inner.is_multiple_of(v)
            && px.is_multiple_of(16)
            && py.is_multiple_of(16);
        let (f, threads) = if vec {
            (fns.bn_infer_vec, (n / v) as u64)
        } else {
            (fns.bn_infer, n as u64)
        };
        let (mut s0, mut s1, mut s2, mut s3) =
            (ptr_of(ps[0]), ptr_of(ps[1]), ptr_of(ps[2]), ptr_of(ps[3]));
        let mut args = [
            arg(&mut px),
            arg(&mut py),
            arg(&mut s0),
            arg(&mut s1),
            arg(&mut s2),
            arg(&mut s3),
            arg(&mut p),
        ];
        // SAFETY: bn_infer(_vec)(x, y, scale, B, mean, var, BnParams) reads inside x and the
        // parameters (counts checked) and writes inside y.
        unsafe { base.rt.launch(f, threads, &mut args) }
    }

    fn lrn(&self, x: &TensorView<'_>, y: &TensorMut<'_>) -> EpResult<()> {
        let Op::Lrn {
            size,
            alpha,
            beta,
            bias,
        } = &self.op
        else {
            unreachable!("lrn on another op")
        };
        let base = &self.base;
        let fns = self.fns(x.dtype)?;
        let n = x.numel();
        if n == 0 {
            return Ok(());
        }
        let xs = istrides(x.strides);
        let ys = istrides(y.strides);
        let mut p = LrnParams {
            n: n as i64,
            channels: x.shape[1] as i64,
            inner: x.shape[2..].iter().product::<usize>() as i64,
            lo: ((size - 1) / 2) as i64,
            hi: (size - 1).div_ceil(2) as i64,
            contig: (x.is_contiguous() && y.is_contiguous()) as i32,
            rank: x.shape.len() as i32,
            alpha_over_size: alpha / *size as f64,
            beta: *beta,
            bias: *bias,
            dims: fill(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>()),
            xs: fill(&xs),
            ys: fill(&ys),
        };
        let (mut px, mut py) = (ptr_of(x), mut_ptr_of(y));
        let mut args = [arg(&mut px), arg(&mut py), arg(&mut p)];
        // SAFETY: lrn(x, y, LrnParams) reads the channel window inside x and writes inside y.
        unsafe { base.rt.launch(fns.lrn, n as u64, &mut args) }
    }
}

impl Kernel for ChanKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        self.check(inputs)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let want = self.check(inputs)?;
        base.outputs_at_least(outputs, 1)?;
        let given = outputs.len().min(want.len());
        base.expect_outputs(&outputs[..given], &want[..given])?;
        let outputs = &outputs[..given];
        let x = base.req(inputs, 0)?;
        let y = &outputs[0];
        let xs = istrides(x.strides);
        let ys = istrides(y.strides);
        let axes = |r: std::ops::Range<usize>| -> Vec<Axis> {
            r.map(|k| (x.shape[k], xs[k], ys[k])).collect()
        };
        match &self.op {
            Op::Batch {
                eps,
                momentum,
                training,
            } => self.batch(inputs, outputs, *eps, *momentum, *training),
            Op::Instance { eps } => {
                let ch = x.shape[1];
                let (s, b) = (base.req(inputs, 1)?, base.req(inputs, 2)?);
                let (ss, bs) = (param(base, s, ch, "scale")?, param(base, b, ch, "B")?);
                let mut gp = group_params(&axes(0..2), &axes(2..x.shape.len()), false);
                gp.mode = NORM_AFFINE;
                gp.eps = *eps;
                gp.amod = ch as i64;
                gp.amul = 1;
                self.grouped(x, y, gp, Some((s, ss)), Some((b, bs)), None)
            }
            Op::Group {
                eps,
                groups,
                per_channel,
            } => {
                let (ch, groups) = (x.shape[1], *groups);
                let cg = ch / groups;
                let count = if *per_channel { ch } else { groups };
                let (s, b) = (base.req(inputs, 1)?, base.req(inputs, 2)?);
                let (ss, bs) = (
                    param(base, s, count, "scale")?,
                    param(base, b, count, "bias")?,
                );
                let kept = [
                    (x.shape[0], xs[0], ys[0]),
                    (groups, xs[1] * cg as i64, ys[1] * cg as i64),
                ];
                let mut red = vec![(cg, xs[1], ys[1])];
                red.extend(axes(2..x.shape.len()));
                let mut gp = group_params(&kept, &red, *per_channel);
                gp.mode = NORM_AFFINE;
                gp.eps = *eps;
                gp.amod = groups as i64;
                if *per_channel {
                    gp.amul = cg as i64;
                    gp.aseg = 1;
                } else {
                    gp.amul = 1;
                }
                self.grouped(x, y, gp, Some((s, ss)), Some((b, bs)), None)
            }
            Op::Mvn { .. } => {
                let reduced = self.mvn_axes(x.shape.len())?;
                let all = axes(0..x.shape.len());
                let kept: Vec<Axis> = (0..all.len())
                    .filter(|&k| !reduced[k])
                    .map(|k| all[k])
                    .collect();
                let red: Vec<Axis> = (0..all.len())
                    .filter(|&k| reduced[k])
                    .map(|k| all[k])
                    .collect();
                let mut gp = group_params(&kept, &red, false);
                gp.mode = NORM_MVN;
                self.grouped(x, y, gp, None, None, None)
            }
            Op::Lrn { .. } => self.lrn(x, y),
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, op: Op) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let fns = load_fns(&base)?;
    Ok(Box::new(ChanKernel {
        base,
        op,
        fns,
        scratch: Scratch::new(),
    }))
}

fn eps_of(req: &KernelRequest<'_>) -> EpResult<f64> {
    Ok(attr_float(req.node, "epsilon")?.unwrap_or(1e-5) as f64)
}

fn batch_norm(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let n = req.node;
    // Before opset 14, extra outputs meant training (unless is_test, opsets 1 and 6); from
    // 14 the attribute says so. Mirrors the CPU provider.
    let training = if req.opset >= 14 {
        attr_int(n, "training_mode")?.unwrap_or(0) != 0
    } else {
        attr_int(n, "is_test")?.unwrap_or(0) == 0 && n.outputs.len() > 1
    };
    let op = Op::Batch {
        eps: eps_of(req)?,
        momentum: attr_float(n, "momentum")?.unwrap_or(0.9) as f64,
        training,
    };
    build(rt, req, op)
}

fn instance_norm(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let op = Op::Instance { eps: eps_of(req)? };
    build(rt, req, op)
}

fn group_norm(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let n = req.node;
    let groups = attr_int(n, "num_groups")?
        .ok_or_else(|| EpError::invalid_attribute(n, "num_groups", "is required"))?;
    if groups < 1 {
        return Err(EpError::invalid_attribute(
            n,
            "num_groups",
            format!("{groups} must be >= 1"),
        ));
    }
    let op = Op::Group {
        eps: eps_of(req)?,
        groups: groups as usize,
        per_channel: req.opset >= 21,
    };
    build(rt, req, op)
}

fn mvn(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let axes = attr_ints(req.node, "axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    build(rt, req, Op::Mvn { axes })
}

fn lrn(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let n = req.node;
    let size =
        attr_int(n, "size")?.ok_or_else(|| EpError::invalid_attribute(n, "size", "is required"))?;
    if size < 1 {
        return Err(EpError::invalid_attribute(n, "size", "must be >= 1"));
    }
    let op = Op::Lrn {
        size: size as usize,
        alpha: attr_float(n, "alpha")?.unwrap_or(1e-4) as f64,
        beta: attr_float(n, "beta")?.unwrap_or(0.75) as f64,
        bias: attr_float(n, "bias")?.unwrap_or(1.0) as f64,
    };
    build(rt, req, op)
}

pub fn register(r: &mut Registry) {
    for since in [1, 6, 7, 9, 14, 15] {
        r.register("", "BatchNormalization", since, batch_norm);
    }
    for since in [1, 6, 22] {
        r.register("", "InstanceNormalization", since, instance_norm);
    }
    for since in [18, 21] {
        r.register("", "GroupNormalization", since, group_norm);
    }
    for since in [9, 13] {
        r.register("", "MeanVarianceNormalization", since, mvn);
    }
    for since in [1, 13] {
        r.register("", "LRN", since, lrn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The (x offset, y offset, c0) of elements [e0, e1) of group g, as `group_base` and
    /// `walk` in norm_chan.cu visit them (all threads together).
    fn walk(gp: &GroupParams, g: i64, e0: i64, e1: i64) -> Vec<(i64, i64, i64)> {
        let (mut rem, mut xb, mut yb) = (g, 0, 0);
        for k in (0..gp.grank as usize).rev() {
            let c = rem % gp.gdims[k];
            rem /= gp.gdims[k];
            xb += c * gp.gx[k];
            yb += c * gp.gy[k];
        }
        let mut out = Vec::new();
        for e in e0..e1 {
            let (mut seg, j) = (e / gp.run, e % gp.run);
            let (mut xo, mut yo, mut c0) = (xb, yb, 0);
            for k in (0..gp.srank as usize).rev() {
                let c = seg % gp.sdims[k];
                seg /= gp.sdims[k];
                xo += c * gp.sx[k];
                yo += c * gp.sy[k];
                c0 = c;
            }
            out.push((xo + j * gp.rx, yo + j * gp.ry, c0));
        }
        out
    }

    /// GroupNormalization 21 on a padded [2, 6, 3, 5] input (strides [126, 21, 7, 1]) into a
    /// dense output: every group visits exactly its channels' elements, with c0 the channel in
    /// the group, and the split chunks cover the group once.
    #[test]
    fn group_walk_visits_each_element_once() {
        let (n, ch, h, w, groups) = (2usize, 6usize, 3usize, 5usize, 3usize);
        let cg = ch / groups;
        let xs = [126i64, 21, 7, 1];
        let ys = [90i64, 15, 5, 1];
        let kept = [
            (n, xs[0], ys[0]),
            (groups, xs[1] * cg as i64, ys[1] * cg as i64),
        ];
        let red = [(cg, xs[1], ys[1]), (h, xs[2], ys[2]), (w, xs[3], ys[3])];
        let gp = group_params(&kept, &red, true);
        assert_eq!(gp.groups, 6);
        for g in 0..6i64 {
            let (b, grp) = (g as usize / groups, g as usize % groups);
            let mut want = Vec::new();
            for c in 0..cg {
                for i in 0..h {
                    for j in 0..w {
                        let chn = (grp * cg + c) as i64;
                        let xo = b as i64 * xs[0] + chn * xs[1] + i as i64 * xs[2] + j as i64;
                        let yo = b as i64 * ys[0] + chn * ys[1] + i as i64 * ys[2] + j as i64;
                        want.push((xo, yo, c as i64));
                    }
                }
            }
            let mut got = walk(&gp, g, 0, gp.len);
            assert_eq!(got, want, "group {g}");
            // Split in 4 chunks the way the kernels cut them.
            let parts: Vec<_> = (0..4)
                .flat_map(|s| walk(&gp, g, gp.len * s / 4, gp.len * (s + 1) / 4))
                .collect();
            got.sort();
            let mut sorted = parts.clone();
            sorted.sort();
            assert_eq!(sorted, got, "group {g} split");
        }
        // MeanVarianceNormalization over axes [0, 2, 3] of the same layout: channel groups.
        let all: Vec<Axis> = [n, ch, h, w]
            .iter()
            .zip(xs.iter().zip(&ys))
            .map(|(&d, (&a, &b))| (d, a, b))
            .collect();
        let gp = group_params(&[all[1]], &[all[0], all[2], all[3]], false);
        assert_eq!((gp.groups, gp.len), (6, 30));
        for g in 0..6i64 {
            let mut got: Vec<i64> = walk(&gp, g, 0, gp.len).iter().map(|v| v.0).collect();
            got.sort();
            let mut want = Vec::new();
            for b in 0..n as i64 {
                for i in 0..h as i64 {
                    for j in 0..w as i64 {
                        want.push(b * xs[0] + g * xs[1] + i * xs[2] + j);
                    }
                }
            }
            want.sort();
            assert_eq!(got, want, "MVN group {g}");
        }
    }

    #[test]
    fn group_params_of_contiguous_group_norm() {
        // [2, 6, 4, 5], 3 groups of 2 channels: groups [N, G] merge, the group is one run.
        let kept = [(2, 120, 120), (3, 40, 40)];
        let red = [(2, 20, 20), (4, 5, 5), (5, 1, 1)];
        let gp = group_params(&kept, &red, false);
        assert_eq!(
            (gp.groups, gp.len, gp.run, gp.srank, gp.grank),
            (6, 40, 40, 0, 1)
        );
        // Per-channel affine keeps the channel axis as a segment axis.
        let gp = group_params(&kept, &red, true);
        assert_eq!((gp.len, gp.run, gp.srank), (40, 20, 1));
        assert_eq!((gp.sdims[0], gp.sx[0]), (2, 20));
        // BatchNormalization statistics: channel groups, batch segments.
        let gp = group_params(
            &[(6, 20, 20)],
            &[(2, 120, 120), (4, 5, 5), (5, 1, 1)],
            false,
        );
        assert_eq!((gp.groups, gp.len, gp.run, gp.srank), (6, 40, 20, 1));
    }
}
