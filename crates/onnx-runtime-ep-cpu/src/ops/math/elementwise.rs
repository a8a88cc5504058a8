//! The elementwise engine: unary maps and broadcasting binary maps with fast paths.
//!
//! A binary broadcast is reduced to an outer iteration over "rows" and an inner contiguous
//! run: adjacent axes that broadcast the same way are merged, so same-shape inputs are one
//! run, a scalar operand is a stride-0 run and a row (bias) operand is a repeated run. Inner
//! runs are plain slice loops that auto-vectorize; the work is split over rayon above
//! [`PAR_THRESHOLD`] elements.

use super::vecmath;
use crate::{Element, Tensor};
use onnx_runtime_ir::DataType;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Element count above which elementwise loops run in parallel.
pub const PAR_THRESHOLD: usize = 1 << 16;
/// Elements per parallel task (at least half the threshold, so small inputs make few tasks).
const CHUNK: usize = 1 << 15;

/// `dst[i] = f(src[i])`, in parallel for large inputs.
pub fn map_into<T, U>(src: &[T], dst: &mut [U], f: impl Fn(T) -> U + Sync)
where
    T: Copy + Sync,
    U: Send,
{
    debug_assert_eq!(src.len(), dst.len());
    let run = |s: &[T], d: &mut [U]| {
        vecmath::with_avx2(|| {
            for (o, &x) in d.iter_mut().zip(s) {
                *o = f(x);
            }
        })
    };
    if src.len() >= PAR_THRESHOLD {
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| run(s, d));
    } else {
        run(src, dst);
    }
}

/// `dst[i] = f(src[i])` into uninitialised storage, in parallel for large inputs.
pub fn map_uninit<T, U>(src: &[T], dst: &mut [MaybeUninit<U>], f: impl Fn(T) -> U + Sync)
where
    T: Copy + Sync,
    U: Send,
{
    debug_assert_eq!(src.len(), dst.len());
    if src.len() >= PAR_THRESHOLD {
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| vecmath::map(s, d, &f));
    } else {
        vecmath::map(src, dst, &f);
    }
}

/// A new f32 tensor with `f` applied to every element of the f32 tensor `x`: as `unary`, but
/// each chunk runs through `vecmath::map_f32` (an AVX-512 build where the CPU has it; the same
/// bits).
pub fn unary_f32(x: &Tensor, f: impl Fn(f32) -> f32 + Sync) -> Tensor {
    let src = x.data::<f32>();
    let v = filled_vec(src.len(), |dst| {
        if src.len() >= PAR_THRESHOLD {
            dst.par_chunks_mut(CHUNK)
                .zip(src.par_chunks(CHUNK))
                .for_each(|(d, s)| vecmath::map_f32(s, d, &f));
        } else {
            vecmath::map_f32(src, dst, &f);
        }
    });
    Tensor::from_vec(x.shape().to_vec(), v)
}

/// A vector of `n` elements that `fill` writes, every one of them, into uninitialised storage.
pub fn filled_vec<U>(n: usize, fill: impl FnOnce(&mut [MaybeUninit<U>])) -> Vec<U> {
    let mut v = Vec::with_capacity(n);
    fill(&mut v.spare_capacity_mut()[..n]);
    // SAFETY: every caller's `fill` writes all `n` elements (map_uninit and Broadcast::run
    // write each output position exactly once).
    unsafe { v.set_len(n) };
    v
}

/// A tensor of `dtype` (stored as `U`) over `values`.
pub fn tensor_as<U: Element>(dtype: DataType, shape: Vec<usize>, values: Vec<U>) -> Tensor {
    let t = Tensor::from_vec(shape, values);
    if dtype == U::DTYPE {
        t
    } else {
        t.with_dtype(dtype)
    }
}

/// A new tensor of `out_dtype` (stored as `U`) with `f` applied to every element of `x`.
pub fn unary_as<T: Element, U: Element>(
    x: &Tensor,
    out_dtype: DataType,
    f: impl Fn(T) -> U + Sync,
) -> Tensor {
    let src = x.data::<T>();
    let v = filled_vec(src.len(), |d| map_uninit(src, d, f));
    tensor_as(out_dtype, x.shape().to_vec(), v)
}

/// A new tensor of `U::DTYPE` with `f` applied to every element of `x`.
pub fn unary<T: Element, U: Element>(x: &Tensor, f: impl Fn(T) -> U + Sync) -> Tensor {
    unary_as(x, U::DTYPE, f)
}

/// How two shapes broadcast, as merged outer axes plus one inner run.
#[derive(Debug, Clone)]
pub struct Broadcast {
    pub out_shape: Vec<usize>,
    /// The merged outer axes (row-major) and each input's stride along them.
    outer: Vec<usize>,
    a_outer: Vec<usize>,
    b_outer: Vec<usize>,
    /// Length of the inner run, and whether each input advances along it (else stride 0).
    inner: usize,
    a_step: bool,
    b_step: bool,
}

impl Broadcast {
    /// The plan for `a` op `b` whose broadcast shape is `out_shape` (already validated).
    pub fn new(a: &[usize], b: &[usize], out_shape: &[usize]) -> Broadcast {
        let rank = out_shape.len();
        let pad = |s: &[usize]| {
            let mut v = vec![1usize; rank - s.len()];
            v.extend_from_slice(s);
            v
        };
        let (a, b) = (pad(a), pad(b));
        // Merged axes: (extent, a advances, b advances).
        let mut merged: Vec<(usize, bool, bool)> = Vec::new();
        for i in 0..rank {
            let d = out_shape[i];
            if d == 1 {
                continue;
            }
            let (sa, sb) = (a[i] != 1, b[i] != 1);
            match merged.last_mut() {
                Some(last) if last.1 == sa && last.2 == sb => last.0 *= d,
                _ => merged.push((d, sa, sb)),
            }
        }
        let (inner, a_step, b_step) = merged.pop().unwrap_or((1, true, true));
        let n = merged.len();
        let (mut a_outer, mut b_outer) = (vec![0; n], vec![0; n]);
        let (mut a_acc, mut b_acc) = (
            if a_step { inner } else { 1 },
            if b_step { inner } else { 1 },
        );
        for i in (0..n).rev() {
            let (d, sa, sb) = merged[i];
            if sa {
                a_outer[i] = a_acc;
                a_acc *= d;
            }
            if sb {
                b_outer[i] = b_acc;
                b_acc *= d;
            }
        }
        Broadcast {
            out_shape: out_shape.to_vec(),
            outer: merged.iter().map(|m| m.0).collect(),
            a_outer,
            b_outer,
            inner,
            a_step,
            b_step,
        }
    }

    fn rows(&self) -> usize {
        self.outer.iter().product()
    }

    /// Input offsets of outer row `row`.
    fn row_offsets(&self, mut row: usize) -> (usize, usize) {
        let (mut oa, mut ob) = (0, 0);
        for i in (0..self.outer.len()).rev() {
            let d = self.outer[i];
            let k = row % d;
            row /= d;
            oa += k * self.a_outer[i];
            ob += k * self.b_outer[i];
        }
        (oa, ob)
    }

    /// `out[i] = f(a[ia], b[ib])` over the broadcast, writing every element of `out` (the
    /// broadcast element count) exactly once.
    pub fn run<A, B, O, F>(&self, a: &[A], b: &[B], out: &mut [MaybeUninit<O>], f: F)
    where
        A: Copy + Sync,
        B: Copy + Sync,
        O: Send,
        F: Fn(A, B) -> O + Sync,
    {
        let total = out.len();
        if total == 0 {
            return;
        }
        let inner = self.inner;
        let (sa, sb) = (self.a_step, self.b_step);
        let rows = self.rows();
        let run_rows = |first_row: usize, out: &mut [MaybeUninit<O>]| {
            vecmath::with_avx2(|| {
                for (r, o) in out.chunks_mut(inner).enumerate() {
                    let (oa, ob) = self.row_offsets(first_row + r);
                    let a = &a[oa..oa + if sa { inner } else { 1 }];
                    let b = &b[ob..ob + if sb { inner } else { 1 }];
                    inner_run(a, b, o, sa, sb, &f);
                }
            })
        };
        if total < PAR_THRESHOLD {
            run_rows(0, out);
        } else if rows == 1 {
            // One long run: split it.
            out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
                let start = c * CHUNK;
                let a = if sa {
                    &a[start..start + o.len()]
                } else {
                    &a[..1]
                };
                let b = if sb {
                    &b[start..start + o.len()]
                } else {
                    &b[..1]
                };
                vecmath::with_avx2(|| inner_run(a, b, o, sa, sb, &f));
            });
        } else {
            let rows_per_task = (CHUNK / inner).max(1);
            out.par_chunks_mut(rows_per_task * inner)
                .enumerate()
                .for_each(|(c, o)| run_rows(c * rows_per_task, o));
        }
    }
}

#[inline(always)]
fn inner_run<A, B, O, F>(a: &[A], b: &[B], out: &mut [MaybeUninit<O>], sa: bool, sb: bool, f: &F)
where
    A: Copy,
    B: Copy,
    F: Fn(A, B) -> O,
{
    match (sa, sb) {
        (true, true) => {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                o.write(f(x, y));
            }
        }
        (true, false) => {
            let y = b[0];
            for (o, &x) in out.iter_mut().zip(a) {
                o.write(f(x, y));
            }
        }
        (false, true) => {
            let x = a[0];
            for (o, &y) in out.iter_mut().zip(b) {
                o.write(f(x, y));
            }
        }
        (false, false) => {
            let (x, y) = (a[0], b[0]);
            for o in out.iter_mut() {
                o.write(f(x, y));
            }
        }
    }
}

/// `f` over the numpy broadcast of `a` and `b`, into a new tensor of `out_dtype` stored as `O`.
pub fn binary_as<A: Element, B: Element, O: Element>(
    node: &str,
    a: &Tensor,
    b: &Tensor,
    out_dtype: DataType,
    f: impl Fn(A, B) -> O + Sync,
) -> Result<Tensor, onnx_runtime_ep_api::EpError> {
    let shape = crate::shape::broadcast_shapes(node, &[a.shape(), b.shape()])?;
    let plan = Broadcast::new(a.shape(), b.shape(), &shape);
    let n = shape.iter().product();
    let v = filled_vec(n, |d| plan.run(a.data::<A>(), b.data::<B>(), d, f));
    Ok(tensor_as(out_dtype, shape, v))
}

/// `f` over the broadcast of same-typed `a` and `b`, into a new tensor of their dtype.
pub fn binary<T: Element>(
    node: &str,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(T, T) -> T + Sync,
) -> Result<Tensor, onnx_runtime_ep_api::EpError> {
    binary_as(node, a, b, a.dtype(), f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference broadcast by per-element index arithmetic.
    fn naive(a: &[usize], b: &[usize], out: &[usize]) -> Vec<(usize, usize)> {
        let sa = crate::shape::broadcast_strides(a, out);
        let sb = crate::shape::broadcast_strides(b, out);
        let mut v = vec![];
        crate::shape::for_each_offset(out, [&sa, &sb], |_, [x, y]| v.push((x, y)));
        v
    }

    #[test]
    fn plans_match_index_arithmetic() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[2, 3, 4], &[2, 3, 4]),
            (&[2, 3, 4], &[]),
            (&[1], &[2, 3, 4]),
            (&[2, 3, 4], &[4]),
            (&[2, 3, 4], &[3, 1]),
            (&[2, 1, 4], &[1, 3, 1]),
            (&[5, 1, 1, 7], &[5, 6, 1, 1]),
            (&[1, 3, 1], &[2, 1, 4]),
            (&[0, 3], &[3]),
            (&[300, 257], &[257]),
            (&[300, 1], &[1, 257]),
        ];
        for &(a, b) in cases {
            let out = crate::shape::broadcast_shapes("n", &[a, b]).unwrap();
            let plan = Broadcast::new(a, b, &out);
            let na: usize = a.iter().product();
            let nb: usize = b.iter().product();
            let av: Vec<usize> = (0..na).collect();
            let bv: Vec<usize> = (0..nb).collect();
            let got = filled_vec(out.iter().product(), |d| {
                plan.run(&av, &bv, d, |x, y| (x, y))
            });
            assert_eq!(got, naive(a, b, &out), "{a:?} {b:?}");
        }
    }

    /// Rough timings of the broadcast fast paths against per-element index arithmetic
    /// (`cargo test --release -- --ignored --nocapture elementwise_speed`).
    #[test]
    #[ignore]
    fn elementwise_speed() {
        use std::time::Instant;
        let (rows, cols) = (2048, 2048);
        let a: Vec<f32> = (0..rows * cols).map(|i| (i % 97) as f32).collect();
        let b: Vec<f32> = (0..cols).map(|i| i as f32).collect();
        let mut out = vec![0f32; rows * cols];
        let mut out_u = vec![MaybeUninit::<f32>::uninit(); rows * cols];
        let shape = [rows, cols];
        for (name, bs) in [
            ("same shape", &shape[..]),
            ("row", &[cols][..]),
            ("scalar", &[][..]),
        ] {
            let nb: usize = bs.iter().product();
            let bv = if nb == rows * cols {
                a.clone()
            } else {
                b[..nb.max(1)].to_vec()
            };
            let plan = Broadcast::new(&shape, bs, &shape);
            let t = Instant::now();
            for _ in 0..10 {
                plan.run(&a, &bv, &mut out_u, |x, y| x + y);
            }
            let fast = t.elapsed().as_secs_f64() / 10.0;
            let sa = crate::shape::broadcast_strides(&shape, &shape);
            let sb = crate::shape::broadcast_strides(bs, &shape);
            let t = Instant::now();
            for _ in 0..10 {
                crate::shape::for_each_offset(&shape, [&sa, &sb], |i, [x, y]| {
                    out[i] = a[x] + bv[y]
                });
            }
            let slow = t.elapsed().as_secs_f64() / 10.0;
            eprintln!(
                "{name}: plan {:.2} ms, index arithmetic {:.2} ms",
                fast * 1e3,
                slow * 1e3
            );
        }
    }
}
