//! Channel-wise normalizations: BatchNormalization (inference and training mode),
//! InstanceNormalization, GroupNormalization (opset 18 per-group and 21 per-channel affine),
//! LRN and MeanVarianceNormalization.

use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, c, invalid, Real};
use crate::ops::nn::scratch::{par_build, worth_parallel, ChunkDone};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use rayon::prelude::*;

/// Mean and population variance of `v` (accumulated in f64).
pub fn mean_var<T: Real>(v: &[T]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = common::lane_sum(v, |x| x).to_f64c() / n;
    let m: T = c(mean);
    let var = common::lane_sum(v, |x| (x - m) * (x - m)).to_f64c() / n;
    (mean, var)
}

/// A per-channel parameter as compute-type values: `count` values, or one per element of
/// a channel-major block of `count * inner` (BatchNormalization spatial=0).
fn params<T: Real>(node: &str, t: &Tensor, count: usize, what: &str) -> Result<Vec<T>, EpError> {
    let v = common::float_vec::<T>(t)
        .ok_or_else(|| invalid(node, format!("{what} must be a float tensor")))?;
    if v.len() != count {
        return Err(invalid(
            node,
            format!("{what} has {} values; want {count}", v.len()),
        ));
    }
    Ok(v)
}

/// Output tensors as (shape, values).
type Outputs<T> = Vec<(Vec<usize>, Vec<T>)>;

/// Runs `f` over `x` in its compute type and narrows the result back to x's dtype.
fn with_compute<F32, F64>(
    node: &str,
    op: &str,
    x: &Tensor,
    f32f: F32,
    f64f: F64,
) -> Result<Vec<Tensor>, EpError>
where
    F32: FnOnce(&[f32]) -> Result<Outputs<f32>, EpError>,
    F64: FnOnce(&[f64]) -> Result<Outputs<f64>, EpError>,
{
    common::require_float(node, op, x.dtype())?;
    if x.dtype() == DataType::Float64 {
        Ok(f64f(x.data())?
            .into_iter()
            .map(|(s, v)| Tensor::from_vec(s, v))
            .collect())
    } else {
        let ux = common::upcast(x);
        Ok(f32f(ux.data())?
            .into_iter()
            .map(|(s, v)| common::tensor_from_f32(x.dtype(), s, v))
            .collect())
    }
}

#[allow(clippy::too_many_arguments)]
fn batch_norm<T: Real>(
    node: &str,
    shape: &[usize],
    x: &[T],
    inputs: [&Tensor; 4],
    eps: f64,
    momentum: f64,
    training: bool,
    n_out: usize,
) -> Result<Outputs<T>, EpError> {
    if shape.len() < 2 {
        return Err(invalid(node, format!("X {shape:?} must have rank >= 2")));
    }
    let (n, ch) = (shape[0], shape[1]);
    let inner: usize = shape[2..].iter().product();
    // Per-channel parameters, or per-activation ones (spatial = 0 in opsets < 9).
    let per = if inputs[0].numel() == ch { 1 } else { inner };
    let cnt = ch * per;
    let scale = params::<T>(node, inputs[0], cnt, "scale")?;
    let bias = params::<T>(node, inputs[1], cnt, "B")?;
    let mut mean = params::<T>(node, inputs[2], cnt, "mean")?;
    let mut var = params::<T>(node, inputs[3], cnt, "var")?;
    let (run_mean, run_var) = (mean.clone(), var.clone());
    if training {
        for ci in 0..ch {
            for j in 0..per {
                let vals: Vec<T> = (0..n)
                    .flat_map(|b| {
                        let base = (b * ch + ci) * inner;
                        if per == 1 {
                            x[base..base + inner].to_vec()
                        } else {
                            vec![x[base + j]]
                        }
                    })
                    .collect();
                let (m, v) = mean_var(&vals);
                mean[ci * per + j] = c(m);
                var[ci * per + j] = c(v);
            }
        }
    }
    // y = x * a + c with a = scale / sqrt(var + eps), c = bias - mean * a.
    let a: Vec<T> = (0..cnt)
        .map(|k| scale[k] / (var[k] + c(eps)).sqrt())
        .collect();
    let cc: Vec<T> = (0..cnt).map(|k| bias[k] - mean[k] * a[k]).collect();
    let y = affine_rows(x, inner, ch, per, &a, &cc);
    let mut out = vec![(shape.to_vec(), y)];
    let pshape = inputs[2].shape().to_vec();
    if training {
        let mo: T = c(momentum);
        let rm: Vec<T> = run_mean
            .iter()
            .zip(&mean)
            .map(|(&r, &m)| r * mo + m * (T::one() - mo))
            .collect();
        let rv: Vec<T> = run_var
            .iter()
            .zip(&var)
            .map(|(&r, &v)| r * mo + v * (T::one() - mo))
            .collect();
        out.push((pshape.clone(), rm));
        out.push((pshape.clone(), rv));
        out.push((pshape.clone(), mean));
        out.push((
            pshape,
            var.iter()
                .map(|&v| T::one() / (v + c(eps)).sqrt())
                .collect(),
        ));
    } else {
        out.push((pshape.clone(), run_mean));
        out.push((pshape.clone(), run_var.clone()));
        out.push((pshape.clone(), mean));
        out.push((pshape, run_var));
    }
    out.truncate(n_out.max(1));
    Ok(out)
}

/// `y = x * a + c` per channel (per == 1) or per channel and position (per == inner) over
/// rows of `inner` elements, channel `row % ch`; the output is never zero-filled and rows run
/// in parallel in chunks when the tensor is big.
fn affine_rows<T: Real>(x: &[T], inner: usize, ch: usize, per: usize, a: &[T], c: &[T]) -> Vec<T> {
    let inner = inner.max(1);
    let rows = x.len() / inner;
    let parallel = worth_parallel(x.len());
    let rows_per_task = if parallel {
        (1usize << 15)
            .div_ceil(inner)
            .max(rows / (4 * rayon::current_num_threads()))
            .max(1)
    } else {
        rows.max(1)
    };
    par_build(x.len(), rows_per_task * inner, parallel, |t, chunk| {
        for (j, yr) in chunk.chunks_mut(inner).enumerate() {
            let row = t * rows_per_task + j;
            let ci = row % ch;
            let xr = &x[row * inner..row * inner + yr.len()];
            if per == 1 {
                let (av, cv) = (a[ci], c[ci]);
                for (o, &xv) in yr.iter_mut().zip(xr) {
                    o.write(xv * av + cv);
                }
            } else {
                let (ar, cr) = (&a[ci * per..(ci + 1) * per], &c[ci * per..(ci + 1) * per]);
                for (((o, &xv), &av), &cv) in yr.iter_mut().zip(xr).zip(ar).zip(cr) {
                    o.write(xv * av + cv);
                }
            }
        }
        // SAFETY: each row of the chunk was written in full (x, a and c rows are as long as
        // the output row: per == inner when per != 1).
        unsafe { ChunkDone::new() }
    })
}

fn build_batch_norm(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let eps = attrs::float(n, "epsilon", 1e-5)? as f64;
    let momentum = attrs::float(n, "momentum", 0.9)? as f64;
    let n_out = n.outputs.len();
    // Before opset 14, extra outputs meant training; from 14 the attribute says so.
    let training = if ctx.opset >= 14 {
        attrs::int(n, "training_mode", 0)? != 0
    } else {
        attrs::int(n, "is_test", 0)? == 0 && n_out > 1
    };
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let ps = [
            tensor_input(&node, inputs, 1)?,
            tensor_input(&node, inputs, 2)?,
            tensor_input(&node, inputs, 3)?,
            tensor_input(&node, inputs, 4)?,
        ];
        let outs = with_compute(
            &node,
            "BatchNormalization",
            x,
            |xv| batch_norm::<f32>(&node, x.shape(), xv, ps, eps, momentum, training, n_out),
            |xv| batch_norm::<f64>(&node, x.shape(), xv, ps, eps, momentum, training, n_out),
        )?;
        // Statistics keep the parameters' dtype (opset 15 lets them differ from X).
        Ok(outs
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let want = if i == 0 { x.dtype() } else { ps[2].dtype() };
                Value::Tensor(recast(t, want))
            })
            .collect())
    }))
}

/// A float tensor converted to another float dtype (no-op when equal).
pub fn recast(t: Tensor, dtype: DataType) -> Tensor {
    if t.dtype() == dtype {
        return t;
    }
    let v = t.to_f64_vec().unwrap_or_default();
    match dtype {
        DataType::Float64 => Tensor::from_vec(t.shape().to_vec(), v),
        other => common::tensor_from_f32(
            other,
            t.shape().to_vec(),
            v.into_iter().map(|x| x as f32).collect(),
        ),
    }
}

/// Normalizes each of `rows` contiguous rows of `inner` values; `affine(row, j)` gives the
/// (scale, bias) index pair source for element j of a row as (scale, bias) values.
fn normalize_rows<T: Real>(
    x: &[T],
    inner: usize,
    eps: f64,
    affine: impl Fn(usize, usize) -> (T, T) + Sync,
) -> Vec<T> {
    let mut y = vec![T::zero(); x.len()];
    y.par_chunks_mut(inner.max(1))
        .enumerate()
        .for_each(|(row, yr)| {
            let xr = &x[row * inner..(row + 1) * inner];
            let (m, v) = mean_var(xr);
            let inv = 1.0 / (v + eps).sqrt();
            let (m, inv): (T, T) = (c(m), c(inv));
            for (j, (o, &xv)) in yr.iter_mut().zip(xr).enumerate() {
                let (s, b) = affine(row, j);
                *o = (xv - m) * inv * s + b;
            }
        });
    y
}

fn build_instance_norm(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let eps = attrs::float(n, "epsilon", 1e-5)? as f64;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let (st, bt) = (
            tensor_input(&node, inputs, 1)?,
            tensor_input(&node, inputs, 2)?,
        );
        let shape = x.shape().to_vec();
        if shape.len() < 3 {
            return Err(invalid(
                &node,
                format!("X {shape:?} must be [N, C, spatial...]"),
            ));
        }
        let ch = shape[1];
        let inner: usize = shape[2..].iter().product();
        macro_rules! go {
            ($T:ty) => {
                |xv: &[$T]| {
                    let s = params::<$T>(&node, st, ch, "scale")?;
                    let b = params::<$T>(&node, bt, ch, "B")?;
                    Ok(vec![(
                        shape.clone(),
                        normalize_rows(xv, inner, eps, |r, _| (s[r % ch], b[r % ch])),
                    )])
                }
            };
        }
        let outs = with_compute(&node, "InstanceNormalization", x, go!(f32), go!(f64))?;
        Ok(outs.into_iter().map(Value::Tensor).collect())
    }))
}

fn build_group_norm(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let eps = attrs::float(n, "epsilon", 1e-5)? as f64;
    let groups = attrs::opt_int(n, "num_groups")?
        .ok_or_else(|| common::bad_attr(n, "num_groups", "is required"))?;
    if groups < 1 {
        return Err(common::bad_attr(
            n,
            "num_groups",
            format!("{groups} must be >= 1"),
        ));
    }
    let groups = groups as usize;
    let per_channel = ctx.opset >= 21;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let (st, bt) = (
            tensor_input(&node, inputs, 1)?,
            tensor_input(&node, inputs, 2)?,
        );
        let shape = x.shape().to_vec();
        if shape.len() < 2 || shape[1] % groups != 0 {
            return Err(invalid(
                &node,
                format!("X {shape:?} must be [N, C, ...] with C divisible by num_groups={groups}"),
            ));
        }
        let ch = shape[1];
        let spatial: usize = shape[2..].iter().product();
        let cg = ch / groups;
        let count = if per_channel { ch } else { groups };
        macro_rules! go {
            ($T:ty) => {
                |xv: &[$T]| {
                    let s = params::<$T>(&node, st, count, "scale")?;
                    let b = params::<$T>(&node, bt, count, "bias")?;
                    let y = normalize_rows(xv, cg * spatial, eps, |r, j| {
                        let k = if per_channel {
                            (r % groups) * cg + j / spatial.max(1)
                        } else {
                            r % groups
                        };
                        (s[k], b[k])
                    });
                    Ok(vec![(shape.clone(), y)])
                }
            };
        }
        let outs = with_compute(&node, "GroupNormalization", x, go!(f32), go!(f64))?;
        Ok(outs.into_iter().map(Value::Tensor).collect())
    }))
}

fn build_lrn(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let size =
        attrs::opt_int(n, "size")?.ok_or_else(|| common::bad_attr(n, "size", "is required"))?;
    if size < 1 {
        return Err(common::bad_attr(n, "size", "must be >= 1"));
    }
    let size = size as usize;
    let alpha = attrs::float(n, "alpha", 1e-4)? as f64;
    let beta = attrs::float(n, "beta", 0.75)? as f64;
    let bias = attrs::float(n, "bias", 1.0)? as f64;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let shape = x.shape().to_vec();
        if shape.len() < 2 {
            return Err(invalid(&node, format!("X {shape:?} must be [N, C, ...]")));
        }
        let (ch, inner) = (shape[1], shape[2..].iter().product::<usize>());
        let (lo, hi) = ((size - 1) / 2, (size - 1).div_ceil(2));
        macro_rules! go {
            ($T:ty) => {
                |xv: &[$T]| {
                    let mut y = vec![<$T>::default(); xv.len()];
                    y.par_chunks_mut(inner.max(1))
                        .enumerate()
                        .for_each(|(row, yr)| {
                            let (b, ci) = (row / ch, row % ch);
                            let c0 = ci.saturating_sub(lo);
                            let c1 = (ci + hi).min(ch - 1);
                            for (j, o) in yr.iter_mut().enumerate() {
                                let mut sq = 0.0f64;
                                for cc in c0..=c1 {
                                    let v = xv[(b * ch + cc) * inner + j] as f64;
                                    sq += v * v;
                                }
                                let xv0 = xv[row * inner + j] as f64;
                                *o = (xv0 / (bias + alpha / size as f64 * sq).powf(beta)) as $T;
                            }
                        });
                    Ok(vec![(shape.clone(), y)])
                }
            };
        }
        let outs = with_compute(&node, "LRN", x, go!(f32), go!(f64))?;
        Ok(outs.into_iter().map(Value::Tensor).collect())
    }))
}

fn build_mvn(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let axes = attrs::opt_ints(n, "axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let shape = x.shape().to_vec();
        let axes = crate::shape::normalize_axes(&node, &axes, shape.len())?;
        let red_shape: Vec<usize> = shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
            .collect();
        let rs = crate::shape::broadcast_strides(&red_shape, &shape);
        let groups: usize = red_shape.iter().product();
        let count = (x.numel() / groups.max(1)).max(1) as f64;
        macro_rules! go {
            ($T:ty) => {
                |xv: &[$T]| {
                    let mut sum = vec![0.0f64; groups];
                    let mut sq = vec![0.0f64; groups];
                    crate::shape::for_each_offset(&shape, [&rs], |i, [g]| {
                        let v = xv[i] as f64;
                        sum[g] += v;
                        sq[g] += v * v;
                    });
                    let mean: Vec<f64> = sum.iter().map(|s| s / count).collect();
                    let std: Vec<f64> = sq
                        .iter()
                        .zip(&mean)
                        .map(|(q, m)| (q / count - m * m).max(0.0).sqrt())
                        .collect();
                    let mut y = vec![<$T>::default(); xv.len()];
                    crate::shape::for_each_offset(&shape, [&rs], |i, [g]| {
                        y[i] = ((xv[i] as f64 - mean[g]) / (std[g] + 1e-9)) as $T;
                    });
                    Ok(vec![(shape.clone(), y)])
                }
            };
        }
        let outs = with_compute(&node, "MeanVarianceNormalization", x, go!(f32), go!(f64))?;
        Ok(outs.into_iter().map(Value::Tensor).collect())
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 6, 7, 9, 14, 15] {
        r.register("", "BatchNormalization", since, build_batch_norm);
    }
    for since in [1, 6, 22] {
        r.register("", "InstanceNormalization", since, build_instance_norm);
    }
    for since in [18, 21] {
        r.register("", "GroupNormalization", since, build_group_norm);
    }
    for since in [1, 13] {
        r.register("", "LRN", since, build_lrn);
    }
    for since in [9, 13] {
        r.register("", "MeanVarianceNormalization", since, build_mvn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn batch_norm_inference() {
        let (n, ch, s) = (2, 3, 4);
        let x = rand(n * ch * s, 41, -2.0, 2.0);
        let p: Vec<Vec<f64>> = (0..4).map(|i| rand(ch, 42 + i, 0.1, 1.0)).collect();
        let t = |v: &Vec<f64>| Some(Tensor::from_vec(vec![ch], f32s(v)));
        let out = run(
            build_batch_norm,
            &node(
                "BatchNormalization",
                5,
                1,
                vec![("epsilon", Attribute::Float(1e-3))],
            ),
            15,
            &[
                Some(Tensor::from_vec(vec![n, ch, s], f32s(&x))),
                t(&p[0]),
                t(&p[1]),
                t(&p[2]),
                t(&p[3]),
            ],
        )
        .unwrap();
        let want: Vec<f64> = (0..x.len())
            .map(|i| {
                let c = (i / s) % ch;
                (x[i] - p[2][c]) / (p[3][c] + 1e-3).sqrt() * p[0][c] + p[1][c]
            })
            .collect();
        assert_close(out[0].data::<f32>(), &want, 1e-5);
    }

    #[test]
    fn group_norm_21_per_channel() {
        let (n, ch, s, g) = (2, 4, 3, 2);
        let x = rand(n * ch * s, 51, -2.0, 2.0);
        let sc = rand(ch, 52, 0.5, 1.5);
        let bi = rand(ch, 53, -1.0, 1.0);
        let out = run(
            build_group_norm,
            &node(
                "GroupNormalization",
                3,
                1,
                vec![("num_groups", Attribute::Int(g as i64))],
            ),
            21,
            &[
                Some(Tensor::from_vec(vec![n, ch, s], f32s(&x))),
                Some(Tensor::from_vec(vec![ch], f32s(&sc))),
                Some(Tensor::from_vec(vec![ch], f32s(&bi))),
            ],
        )
        .unwrap();
        let blk = ch / g * s;
        let mut want = vec![];
        for chunk in x.chunks(blk) {
            let m = chunk.iter().sum::<f64>() / blk as f64;
            let v = chunk.iter().map(|a| (a - m).powi(2)).sum::<f64>() / blk as f64;
            for &a in chunk {
                want.push((a - m) / (v + 1e-5).sqrt());
            }
        }
        for (i, w) in want.iter_mut().enumerate() {
            let c = (i / s) % ch;
            *w = *w * sc[c] + bi[c];
        }
        assert_close(out[0].data::<f32>(), &want, 1e-5);
    }
}
