//! Gemm: `alpha * op(A) @ op(B) + beta * C`, C broadcast to [M, N] (optional from opset 11).

use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid, unsupported, Real};
use crate::ops::nn::gemm::matmul::PackedWeights;
use crate::ops::nn::scratch::build_vec;
use crate::shape::{broadcast_strides, for_each_offset};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

#[derive(Clone, Copy)]
struct GemmAttrs {
    alpha: f64,
    beta: f64,
    trans_a: bool,
    trans_b: bool,
}

/// C broadcast to [m, n] as `T`s, or an error if it does not broadcast.
fn broadcast_c<T: Copy + Default>(
    node: &str,
    c: &[T],
    c_shape: &[usize],
    m: usize,
    n: usize,
) -> Result<Vec<T>, EpError> {
    if c_shape.len() > 2
        || c_shape
            .iter()
            .rev()
            .zip([n, m])
            .any(|(&d, want)| d != 1 && d != want)
    {
        return Err(invalid(
            node,
            format!("C of shape {c_shape:?} does not broadcast to [{m}, {n}]"),
        ));
    }
    let mut out = vec![T::default(); m * n];
    let strides = broadcast_strides(c_shape, &[m, n]);
    for_each_offset(&[m, n], [&strides], |i, [o]| out[i] = c[o]);
    Ok(out)
}

fn gemm_float<T: Real>(
    node: &str,
    at: &GemmAttrs,
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    c: Option<(&[T], &[usize])>,
) -> Result<(Vec<T>, usize, usize), EpError> {
    let (m, k, n) = dims(node, at, a_shape, b_shape)?;
    let (a_rs, a_cs) = if at.trans_a { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if at.trans_b { (1, k) } else { (n, 1) };
    let par = common::gemm_parallelism(m, n, k);
    let out = match c {
        Some((cv, cs)) if at.beta != 0.0 => {
            let mut out = broadcast_c(node, cv, cs, m, n)?;
            common::gemm(
                m,
                n,
                k,
                a,
                a_rs,
                a_cs,
                b,
                b_rs,
                b_cs,
                &mut out,
                n,
                T::from_f64c(at.alpha),
                T::from_f64c(at.beta),
            );
            out
        }
        _ => {
            // SAFETY: with beta = 0 the GEMM writes every element of the m x n block (row
            // stride n) without reading it, and `out` is the only access to the storage.
            unsafe {
                build_vec(m * n, |out| {
                    common::gemm_raw(
                        m,
                        n,
                        k,
                        a,
                        (a_rs, a_cs),
                        b,
                        (b_rs, b_cs),
                        out.as_mut_ptr() as *mut T,
                        n,
                        T::from_f64c(at.alpha),
                        T::zero(),
                        par,
                    )
                })
            }
        }
    };
    Ok((out, m, n))
}

fn dims(
    node: &str,
    at: &GemmAttrs,
    a: &[usize],
    b: &[usize],
) -> Result<(usize, usize, usize), EpError> {
    if a.len() != 2 || b.len() != 2 {
        return Err(invalid(
            node,
            format!("A {a:?} and B {b:?} must be 2-D; use MatMul for batched products"),
        ));
    }
    let (m, k) = if at.trans_a {
        (a[1], a[0])
    } else {
        (a[0], a[1])
    };
    let (kb, n) = if at.trans_b {
        (b[1], b[0])
    } else {
        (b[0], b[1])
    };
    if k != kb {
        return Err(invalid(
            node,
            format!("inner dimensions differ: op(A) is [{m}, {k}], op(B) is [{kb}, {n}]"),
        ));
    }
    Ok((m, k, n))
}

fn gemm_int<T>(
    node: &str,
    at: &GemmAttrs,
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    c: Option<(&[T], &[usize])>,
) -> Result<(Vec<T>, usize, usize), EpError>
where
    T: Copy + Default + num_traits::WrappingAdd + num_traits::WrappingMul + num_traits::NumCast,
{
    let (m, k, n) = dims(node, at, a_shape, b_shape)?;
    let cast = |v: f64| -> T { num_traits::NumCast::from(v).unwrap_or_default() };
    let (alpha, beta) = (cast(at.alpha), cast(at.beta));
    let mut out = match c {
        Some((cv, cs)) => {
            let mut o = broadcast_c(node, cv, cs, m, n)?;
            o.iter_mut().for_each(|v| *v = v.wrapping_mul(&beta));
            o
        }
        None => vec![T::default(); m * n],
    };
    for i in 0..m {
        for j in 0..n {
            let mut acc = T::default();
            for p in 0..k {
                let av = if at.trans_a {
                    a[p * m + i]
                } else {
                    a[i * k + p]
                };
                let bv = if at.trans_b {
                    b[j * k + p]
                } else {
                    b[p * n + j]
                };
                acc = acc.wrapping_add(&av.wrapping_mul(&bv));
            }
            out[i * n + j] = out[i * n + j].wrapping_add(&acc.wrapping_mul(&alpha));
        }
    }
    Ok((out, m, n))
}

/// Gemm in f32 (f16/bf16 upcast) on the general path.
fn gemm_f32(
    node: &str,
    at: &GemmAttrs,
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
) -> Result<Tensor, EpError> {
    let (ua, ub) = (common::upcast(a), common::upcast(b));
    let uc = c.map(common::upcast);
    let (o, m, nn) = gemm_float::<f32>(
        node,
        at,
        ua.data(),
        a.shape(),
        ub.data(),
        b.shape(),
        uc.as_ref().map(|c| (c.data::<f32>(), c.shape())),
    )?;
    Ok(common::tensor_from_f32(a.dtype(), vec![m, nn], o))
}

/// Gemm on B packed at build (a constant weight), alpha and `beta * C` applied to each
/// finished row segment; None when `b` is not the packed tensor.
fn packed_gemm(
    node: &str,
    at: &GemmAttrs,
    w: &PackedWeights,
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
) -> Result<Option<Tensor>, EpError> {
    let (m, _, n) = dims(node, at, a.shape(), b.shape())?;
    let uc = c.filter(|_| at.beta != 0.0).map(common::upcast);
    let cb = match &uc {
        Some(c) => Some(broadcast_c(node, c.data::<f32>(), c.shape(), m, n)?),
        None => None,
    };
    let (alpha, beta) = (at.alpha as f32, at.beta as f32);
    let finish = |i: usize, c0: usize, row: &mut [f32]| match &cb {
        Some(cv) => {
            let cr = &cv[i * n + c0..][..row.len()];
            row.iter_mut()
                .zip(cr)
                .for_each(|(v, &x)| *v = alpha * *v + beta * x);
        }
        None if alpha != 1.0 => row.iter_mut().for_each(|v| *v *= alpha),
        None => {}
    };
    Ok(w.product_2d(a, b, at.trans_a, &finish)
        .map(|(o, rows)| common::tensor_from_f32(a.dtype(), vec![rows, n], o)))
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let at = GemmAttrs {
        alpha: attrs::float(n, "alpha", 1.0)? as f64,
        beta: attrs::float(n, "beta", 1.0)? as f64,
        trans_a: attrs::int(n, "transA", 0)? != 0,
        trans_b: attrs::int(n, "transB", 0)? != 0,
    };
    let c_required = ctx.opset < 11;
    let weights = PackedWeights::from_constant(ctx, 1, at.trans_b);
    Ok(kernel_fn(move |inputs| {
        let a = tensor_input(&node, inputs, 0)?;
        let b = tensor_input(&node, inputs, 1)?;
        let c = if c_required {
            Some(tensor_input(&node, inputs, 2)?)
        } else {
            optional_tensor_input(&node, inputs, 2)?
        };
        let dtype = a.dtype();
        for t in std::iter::once(b).chain(c) {
            if t.dtype() != dtype {
                return Err(invalid(
                    &node,
                    format!(
                        "inputs mix {dtype} and {}; all must have one type",
                        t.dtype()
                    ),
                ));
            }
        }
        let out = match dtype {
            DataType::Float64 => {
                let (o, m, nn) = gemm_float::<f64>(
                    &node,
                    &at,
                    a.data(),
                    a.shape(),
                    b.data(),
                    b.shape(),
                    c.map(|c| (c.data::<f64>(), c.shape())),
                )?;
                Tensor::from_vec(vec![m, nn], o)
            }
            DataType::Float32 | DataType::Float16 | DataType::BFloat16 if weights.is_some() => {
                let w = weights.as_ref().expect("checked by the guard");
                match packed_gemm(&node, &at, w, a, b, c)? {
                    Some(t) => t,
                    None => gemm_f32(&node, &at, a, b, c)?,
                }
            }
            DataType::Float32 | DataType::Float16 | DataType::BFloat16 => {
                gemm_f32(&node, &at, a, b, c)?
            }
            DataType::Int32 | DataType::Int64 | DataType::Uint32 | DataType::Uint64 => {
                crate::dispatch_int!(dtype, T => {
                    let (o, m, nn) = gemm_int::<T>(
                        &node, &at, a.data(), a.shape(), b.data(), b.shape(),
                        c.map(|c| (c.data::<T>(), c.shape())),
                    )?;
                    Tensor::from_vec(vec![m, nn], o)
                }, other => return Err(unsupported(&node, "Gemm", other, "float or 32/64-bit integer types")))
            }
            other => {
                return Err(unsupported(
                    &node,
                    "Gemm",
                    other,
                    "float, double, float16, bfloat16, int32, int64, uint32 or uint64",
                ))
            }
        };
        Ok(vec![Value::Tensor(out)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 6, 7, 9, 11, 13] {
        r.register("", "Gemm", since, build);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn transposes_alpha_beta_and_bias_broadcast() {
        let (m, k, n) = (4, 6, 5);
        let a = rand(k * m, 7, -1.0, 1.0); // stored [k, m] (transA)
        let b = rand(n * k, 8, -1.0, 1.0); // stored [n, k] (transB)
        let c = rand(n, 9, -1.0, 1.0);
        let node = node(
            "Gemm",
            3,
            1,
            vec![
                ("transA", Attribute::Int(1)),
                ("transB", Attribute::Int(1)),
                ("alpha", Attribute::Float(0.5)),
                ("beta", Attribute::Float(2.0)),
            ],
        );
        let out = run(
            build,
            &node,
            13,
            &[
                Some(Tensor::from_vec(vec![k, m], f32s(&a))),
                Some(Tensor::from_vec(vec![n, k], f32s(&b))),
                Some(Tensor::from_vec(vec![n], f32s(&c))),
            ],
        )
        .unwrap();
        let mut want = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|p| a[p * m + i] * b[j * k + p]).sum();
                want[i * n + j] = 0.5 * s + 2.0 * c[j];
            }
        }
        assert_close(out[0].data::<f32>(), &want, 1e-5);
    }

    /// Gemm with B a constant (packed at build) against float64, for every transpose, C
    /// broadcast and alpha/beta, on sizes that cross the GEMM's panels and tasks.
    #[test]
    fn packed_constant_b_matches_reference() {
        let (m, k, n) = (20, 37, 45);
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            for c_shape in [vec![], vec![n], vec![m, 1], vec![m, n]] {
                let a = rand(m * k, 1, -1.0, 1.0);
                let b = rand(k * n, 2, -1.0, 1.0);
                let c = rand(c_shape.iter().product(), 3, -1.0, 1.0);
                let (alpha, beta) = (0.75, if c_shape.is_empty() { 0.0 } else { -1.5 });
                let node = node(
                    "Gemm",
                    if c_shape.is_empty() { 2 } else { 3 },
                    1,
                    vec![
                        ("transA", Attribute::Int(ta as i64)),
                        ("transB", Attribute::Int(tb as i64)),
                        ("alpha", Attribute::Float(alpha as f32)),
                        ("beta", Attribute::Float(beta as f32)),
                    ],
                );
                let a_shape = if ta { vec![k, m] } else { vec![m, k] };
                let b_shape = if tb { vec![n, k] } else { vec![k, n] };
                let bt = Value::Tensor(Tensor::from_vec(b_shape, f32s(&b)));
                let consts = [None, Some(&bt)];
                let kernel = build(&BuildContext {
                    constant_inputs: &consts,
                    ..BuildContext::new(&node, 13)
                })
                .unwrap();
                let at = Value::Tensor(Tensor::from_vec(a_shape, f32s(&a)));
                let ct = Value::Tensor(Tensor::from_vec(c_shape.clone(), f32s(&c)));
                let mut inputs = vec![Some(&at), Some(&bt)];
                if !c_shape.is_empty() {
                    inputs.push(Some(&ct));
                }
                let out = kernel.run(&inputs).unwrap();
                let got = out[0].as_tensor().unwrap();
                assert_eq!(got.shape(), &[m, n]);
                let mut want = vec![0.0; m * n];
                for i in 0..m {
                    for j in 0..n {
                        let s: f64 = (0..k)
                            .map(|p| {
                                let av = if ta { a[p * m + i] } else { a[i * k + p] };
                                let bv = if tb { b[j * k + p] } else { b[p * n + j] };
                                av * bv
                            })
                            .sum();
                        let cv = match c_shape.len() {
                            0 => 0.0,
                            1 => c[j],
                            _ if c_shape[1] == 1 => c[i],
                            _ => c[i * n + j],
                        };
                        want[i * n + j] = alpha * s + beta * cv;
                    }
                }
                assert_close(got.data::<f32>(), &want, 1e-5 * k as f64);
            }
        }
    }
}
