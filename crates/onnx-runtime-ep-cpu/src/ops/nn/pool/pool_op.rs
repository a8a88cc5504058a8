//! MaxPool (with Indices), AveragePool, LpPool and the global pools, any spatial rank.
//! The windows of one plane are computed once as flat input offsets (CSR); planes run in
//! parallel.

use crate::kernel::{tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid, unsupported, Real};
use crate::ops::nn::pool::pool2d::{self, avg2d, global_avg, global_max, max2d};
use crate::ops::nn::pool::pool2d_fast;
use crate::ops::nn::window::{Window, WindowAttrs};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use rayon::prelude::*;

/// Every output position's window as flat in-plane input offsets.
struct Windows {
    starts: Vec<usize>,
    offsets: Vec<usize>,
    /// Per output position: the window's size counting padding (not the part past the end
    /// pads that ceil_mode adds).
    padded_count: Vec<usize>,
}

fn windows(w: &Window) -> Windows {
    let r = w.input.len();
    // Per dim, per output index: valid input coords and the padded count.
    let mut taps: Vec<Vec<(Vec<usize>, usize)>> = Vec::with_capacity(r);
    for d in 0..r {
        let mut v = Vec::with_capacity(w.output[d]);
        for o in 0..w.output[d] {
            let start = (o * w.strides[d]) as isize - w.pad_begin[d] as isize;
            let mut valid = vec![];
            let mut padded = 0;
            for k in 0..w.kernel[d] {
                let i = start + (k * w.dilations[d]) as isize;
                if i >= 0 && i < w.input[d] as isize {
                    valid.push(i as usize);
                }
                if i < (w.input[d] + w.pad_end[d]) as isize {
                    padded += 1;
                }
            }
            v.push((valid, padded));
        }
        taps.push(v);
    }
    let in_strides = crate::shape::contiguous_strides(&w.input);
    let out_sz = w.output_size();
    let mut res = Windows {
        starts: Vec::with_capacity(out_sz + 1),
        offsets: Vec::with_capacity(out_sz * w.kernel_size()),
        padded_count: Vec::with_capacity(out_sz),
    };
    let mut oidx = vec![0usize; r];
    let mut kidx = vec![0usize; r];
    for _ in 0..out_sz {
        res.starts.push(res.offsets.len());
        let lists: Vec<&(Vec<usize>, usize)> = (0..r).map(|d| &taps[d][oidx[d]]).collect();
        res.padded_count.push(lists.iter().map(|l| l.1).product());
        if lists.iter().all(|l| !l.0.is_empty()) {
            kidx.iter_mut().for_each(|k| *k = 0);
            'win: loop {
                res.offsets
                    .push((0..r).map(|d| lists[d].0[kidx[d]] * in_strides[d]).sum());
                let mut d = r;
                loop {
                    if d == 0 {
                        break 'win;
                    }
                    d -= 1;
                    kidx[d] += 1;
                    if kidx[d] < lists[d].0.len() {
                        break;
                    }
                    kidx[d] = 0;
                }
            }
        }
        for d in (0..r).rev() {
            oidx[d] += 1;
            if oidx[d] < w.output[d] {
                break;
            }
            oidx[d] = 0;
        }
    }
    res.starts.push(res.offsets.len());
    res
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Max,
    Avg { include_pad: bool },
    Lp { p: f64 },
}

struct PoolKernel {
    node: String,
    op: &'static str,
    kind: Kind,
    wa: WindowAttrs,
    storage_order: bool,
    /// Global pools reduce every spatial position.
    global: bool,
    n_outputs: usize,
}

impl PoolKernel {
    fn window(&self, x: &[usize]) -> Result<Window, EpError> {
        if x.len() < 3 || x.len() > 10 {
            return Err(invalid(
                &self.node,
                format!("X {x:?} must be [N, C, spatial...] with 1 to 8 spatial dims"),
            ));
        }
        let spatial = &x[2..];
        if self.global {
            let g = WindowAttrs {
                kernel: None,
                strides: None,
                dilations: None,
                pads: None,
                auto_pad: crate::ops::nn::window::AutoPad::NotSet,
                ceil_mode: false,
            };
            return g.resolve(&self.node, spatial, spatial);
        }
        let kernel = self
            .wa
            .kernel
            .clone()
            .ok_or_else(|| invalid(&self.node, "kernel_shape is required"))?;
        self.wa.resolve(&self.node, spatial, &kernel)
    }
}

fn max_pool<T: Copy + PartialOrd + Send + Sync + Default>(
    x: &[T],
    planes: usize,
    w: &Window,
    win: &Windows,
    storage_order: bool,
) -> (Vec<T>, Vec<i64>) {
    let (in_sz, out_sz) = (w.input_size(), w.output_size());
    let mut y = vec![T::default(); planes * out_sz];
    let mut idx = vec![0i64; planes * out_sz];
    let in_strides = crate::shape::contiguous_strides(&w.input);
    y.par_chunks_mut(out_sz.max(1))
        .zip(idx.par_chunks_mut(out_sz.max(1)))
        .enumerate()
        .for_each(|(p, (yp, ip))| {
            let xp = &x[p * in_sz..(p + 1) * in_sz];
            for o in 0..out_sz {
                let offs = &win.offsets[win.starts[o]..win.starts[o + 1]];
                let mut best: Option<(T, usize)> = None;
                for &off in offs {
                    let v = xp[off];
                    if best.is_none_or(|(b, _)| v > b) {
                        best = Some((v, off));
                    }
                }
                let (v, off) = best.unwrap_or((T::default(), 0));
                yp[o] = v;
                let local = if storage_order {
                    // Column-major over the spatial dims.
                    let mut rem = off;
                    let mut lin = 0;
                    let mut mul = 1;
                    for (st, &extent) in in_strides.iter().zip(&w.input) {
                        let c = rem / st;
                        rem %= st;
                        lin += c * mul;
                        mul *= extent;
                    }
                    lin
                } else {
                    off
                };
                ip[o] = (p * in_sz + local) as i64;
            }
        });
    (y, idx)
}

fn avg_lp_pool<T: Real>(x: &[T], planes: usize, w: &Window, win: &Windows, kind: Kind) -> Vec<T> {
    let (in_sz, out_sz) = (w.input_size(), w.output_size());
    let mut y = vec![T::zero(); planes * out_sz];
    y.par_chunks_mut(out_sz.max(1))
        .enumerate()
        .for_each(|(p, yp)| {
            let xp = &x[p * in_sz..(p + 1) * in_sz];
            for (o, out) in yp.iter_mut().enumerate() {
                let offs = &win.offsets[win.starts[o]..win.starts[o + 1]];
                *out = match kind {
                    Kind::Avg { include_pad } => {
                        let s: T = offs.iter().map(|&i| xp[i]).sum();
                        let n = if include_pad {
                            win.padded_count[o]
                        } else {
                            offs.len()
                        };
                        s / common::c::<T>(n as f64)
                    }
                    Kind::Lp { p } => {
                        let pp = common::c::<T>(p);
                        let s: T = offs.iter().map(|&i| xp[i].abs().powf(pp)).sum();
                        s.powf(T::one() / pp)
                    }
                    Kind::Max => unreachable!("max pools take max_pool"),
                };
            }
        });
    y
}

impl CpuKernel for PoolKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let dtype = x.dtype();
        let w = self.window(x.shape())?;
        let planes = x.shape()[0] * x.shape()[1];
        let mut shape = x.shape()[..2].to_vec();
        shape.extend(&w.output);
        if !(self.kind == Kind::Max && self.n_outputs > 1) {
            if let Some(y) = self.fast(x, planes, &w, shape.clone())? {
                return Ok(vec![Value::Tensor(y)]);
            }
        }
        let win = windows(&w);
        let y = match self.kind {
            Kind::Max => {
                let (y, idx) = crate::dispatch_float!(dtype, T => {
                    let (y, i) = max_pool::<T>(x.data(), planes, &w, &win, self.storage_order);
                    (Tensor::from_vec(shape.clone(), y), i)
                }, other => match other {
                    DataType::Int8 => {
                        let (y, i) = max_pool::<i8>(x.data(), planes, &w, &win, self.storage_order);
                        (Tensor::from_vec(shape.clone(), y), i)
                    }
                    DataType::Uint8 => {
                        let (y, i) = max_pool::<u8>(x.data(), planes, &w, &win, self.storage_order);
                        (Tensor::from_vec(shape.clone(), y), i)
                    }
                    other => return Err(unsupported(node, self.op, other, "float types, int8 or uint8")),
                });
                let mut out = vec![Value::Tensor(y)];
                if self.n_outputs > 1 {
                    out.push(Value::Tensor(Tensor::from_vec(shape, idx)));
                }
                return Ok(out);
            }
            kind => {
                common::require_float(node, self.op, dtype)?;
                if dtype == DataType::Float64 {
                    Tensor::from_vec(shape, avg_lp_pool::<f64>(x.data(), planes, &w, &win, kind))
                } else {
                    let ux = common::upcast(x);
                    common::tensor_from_f32(
                        dtype,
                        shape,
                        avg_lp_pool::<f32>(ux.data(), planes, &w, &win, kind),
                    )
                }
            }
        };
        Ok(vec![Value::Tensor(y)])
    }
}

impl PoolKernel {
    /// Global pools and 2-D max and average pools without the window table; `None` where
    /// they do not apply.
    fn fast(
        &self,
        x: &Tensor,
        planes: usize,
        w: &Window,
        shape: Vec<usize>,
    ) -> Result<Option<Tensor>, EpError> {
        let dtype = x.dtype();
        let inner = w.input_size();
        if self.global {
            return Ok(Some(match self.kind {
                Kind::Max => {
                    macro_rules! gmax {
                        ($t:ty) => {
                            Tensor::from_vec(shape, global_max::<$t>(x.data(), planes, inner))
                        };
                    }
                    match dtype {
                        DataType::Float32 => gmax!(f32),
                        DataType::Float64 => gmax!(f64),
                        DataType::Float16 => gmax!(half::f16),
                        DataType::BFloat16 => gmax!(half::bf16),
                        DataType::Int8 => gmax!(i8),
                        DataType::Uint8 => gmax!(u8),
                        _ => return Ok(None),
                    }
                }
                Kind::Avg { .. } => match dtype {
                    DataType::Float64 => {
                        Tensor::from_vec(shape, global_avg::<f64>(x.data(), planes, inner))
                    }
                    DataType::Float32 | DataType::Float16 | DataType::BFloat16 => {
                        let ux = common::upcast(x);
                        common::tensor_from_f32(
                            dtype,
                            shape,
                            global_avg::<f32>(ux.data(), planes, inner),
                        )
                    }
                    _ => return Ok(None),
                },
                Kind::Lp { .. } => return Ok(None),
            }));
        }
        if !pool2d::fits(w) {
            return Ok(None);
        }
        Ok(Some(match self.kind {
            Kind::Max => {
                macro_rules! max {
                    ($t:ty) => {
                        Tensor::from_vec(shape, max2d::<$t>(x.data(), planes, w))
                    };
                }
                match dtype {
                    DataType::Float32 => match pool2d_fast::max2d_f32(x.data(), planes, w) {
                        Some(v) => Tensor::from_vec(shape, v),
                        None => max!(f32),
                    },
                    DataType::Float64 => max!(f64),
                    DataType::Float16 => max!(half::f16),
                    DataType::BFloat16 => max!(half::bf16),
                    DataType::Int8 => max!(i8),
                    DataType::Uint8 => max!(u8),
                    _ => return Ok(None),
                }
            }
            Kind::Avg { include_pad } => match dtype {
                DataType::Float64 => {
                    Tensor::from_vec(shape, avg2d::<f64>(x.data(), planes, w, include_pad))
                }
                DataType::Float32 => {
                    let v = pool2d_fast::avg3x3_f32(x.data(), planes, w, include_pad)
                        .unwrap_or_else(|| avg2d::<f32>(x.data(), planes, w, include_pad));
                    Tensor::from_vec(shape, v)
                }
                DataType::Float16 | DataType::BFloat16 => {
                    let ux = common::upcast(x);
                    common::tensor_from_f32(
                        dtype,
                        shape,
                        avg2d::<f32>(ux.data(), planes, w, include_pad),
                    )
                }
                _ => return Ok(None),
            },
            Kind::Lp { .. } => return Ok(None),
        }))
    }
}

fn make(
    ctx: &BuildContext<'_>,
    op: &'static str,
    kind: Kind,
    global: bool,
) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let wa = WindowAttrs::parse(n)?;
    if !global && wa.kernel.is_none() {
        return Err(common::bad_attr(n, "kernel_shape", "is required"));
    }
    Ok(Box::new(PoolKernel {
        node: n.describe(),
        op,
        kind,
        wa,
        storage_order: attrs::int(n, "storage_order", 0)? != 0,
        global,
        n_outputs: n.outputs.len(),
    }))
}

fn build_max(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    make(ctx, "MaxPool", Kind::Max, false)
}

fn build_avg(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let include_pad = attrs::int(ctx.node, "count_include_pad", 0)? != 0;
    make(ctx, "AveragePool", Kind::Avg { include_pad }, false)
}

fn build_lp(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let p = attrs::float(ctx.node, "p", 2.0)? as f64;
    make(ctx, "LpPool", Kind::Lp { p }, false)
}

fn build_global_max(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    make(ctx, "GlobalMaxPool", Kind::Max, true)
}

fn build_global_avg(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    make(
        ctx,
        "GlobalAveragePool",
        Kind::Avg { include_pad: false },
        true,
    )
}

fn build_global_lp(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let p = attrs::float(ctx.node, "p", 2.0)? as f64;
    make(ctx, "GlobalLpPool", Kind::Lp { p }, true)
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 8, 10, 11, 12, 22] {
        r.register("", "MaxPool", since, build_max);
    }
    for since in [1, 7, 10, 11, 19, 22] {
        r.register("", "AveragePool", since, build_avg);
    }
    for since in [1, 2, 11, 18, 22] {
        r.register("", "LpPool", since, build_lp);
    }
    for since in [1, 22] {
        r.register("", "GlobalMaxPool", since, build_global_max);
        r.register("", "GlobalAveragePool", since, build_global_avg);
    }
    for since in [1, 2, 22] {
        r.register("", "GlobalLpPool", since, build_global_lp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn max_with_indices_and_avg_pads() {
        let (h, w) = (5, 6);
        let x = rand(2 * h * w, 31, -1.0, 1.0);
        let attrs = vec![
            ("kernel_shape", Attribute::Ints(vec![3, 3])),
            ("strides", Attribute::Ints(vec![2, 2])),
            ("pads", Attribute::Ints(vec![1, 1, 1, 1])),
        ];
        let xt = Tensor::from_vec(vec![1, 2, h, w], f32s(&x));
        let out = run(
            build_max,
            &node("MaxPool", 1, 2, attrs.clone()),
            12,
            &[Some(xt.clone())],
        )
        .unwrap();
        let (oh, ow) = (3, 3);
        assert_eq!(out[0].shape(), &[1, 2, oh, ow]);
        let mut avg_attrs = attrs.clone();
        avg_attrs.push(("count_include_pad", Attribute::Int(1)));
        let avg = run(
            build_avg,
            &node("AveragePool", 1, 1, avg_attrs),
            11,
            &[Some(xt)],
        )
        .unwrap();
        let (mut want_max, mut want_idx, mut want_avg) = (vec![], vec![], vec![]);
        for c in 0..2 {
            for oy in 0..oh {
                for ox in 0..ow {
                    let (mut best, mut bi, mut s) = (f64::MIN, 0, 0.0);
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let (iy, ix) = (oy as isize * 2 - 1 + ky, ox as isize * 2 - 1 + kx);
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                continue;
                            }
                            let i = c * h * w + iy as usize * w + ix as usize;
                            s += x[i];
                            if x[i] > best {
                                best = x[i];
                                bi = i;
                            }
                        }
                    }
                    want_max.push(best);
                    want_idx.push(bi as i64);
                    want_avg.push(s / 9.0);
                }
            }
        }
        assert_close(out[0].data::<f32>(), &want_max, 1e-6);
        assert_eq!(out[1].data::<i64>(), want_idx.as_slice());
        assert_close(avg[0].data::<f32>(), &want_avg, 1e-5);
    }

    #[test]
    fn global_average() {
        let x = rand(3 * 8, 32, -1.0, 1.0);
        let out = run(
            build_global_avg,
            &node("GlobalAveragePool", 1, 1, vec![]),
            1,
            &[Some(Tensor::from_vec(vec![1, 3, 2, 4], f32s(&x)))],
        )
        .unwrap();
        let want: Vec<f64> = x.chunks(8).map(|c| c.iter().sum::<f64>() / 8.0).collect();
        assert_eq!(out[0].shape(), &[1, 3, 1, 1]);
        assert_close(out[0].data::<f32>(), &want, 1e-6);
    }
}
