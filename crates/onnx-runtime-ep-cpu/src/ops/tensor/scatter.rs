//! Writes by index: ScatterND, ScatterElements, Scatter (deprecated), each with the
//! reductions none, add, mul, max and min where the opset has them.

use super::common::{
    int_values, invalid, one, repack, strides_of, unpacked, unsupported, with_elem, Elem,
};
use super::gather::{check_elementwise_shapes, for_each_elementwise, resolve_index};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::shape::normalize_axis;
use crate::{attrs, dispatch_numeric, CpuRegistry, Tensor};
use half::{bf16, f16};
use onnx_runtime_ep_api::EpError;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl Reduction {
    pub fn parse(ctx: &BuildContext<'_>) -> Result<Reduction, EpError> {
        let s = attrs::string(ctx.node, "reduction", "none")?;
        Ok(match (s.as_str(), ctx.opset) {
            ("none", _) => Reduction::None,
            ("add", 16..) => Reduction::Add,
            ("mul", 16..) => Reduction::Mul,
            ("max", 18..) => Reduction::Max,
            ("min", 18..) => Reduction::Min,
            (other, opset) => {
                return Err(EpError::invalid_attribute(
                    ctx.node,
                    "reduction",
                    format!("'{other}' is not available at opset {opset} (none; add/mul from 16; max/min from 18)"),
                ))
            }
        })
    }
}

/// Arithmetic the reductions need; integers wrap like the reference implementations.
pub trait Acc: Copy + PartialOrd {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
}
macro_rules! acc_int {
    ($($t:ty),*) => {$(impl Acc for $t {
        fn add(self, o: Self) -> Self { self.wrapping_add(o) }
        fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
    })*};
}
acc_int!(i8, i16, i32, i64, u8, u16, u32, u64);
macro_rules! acc_float {
    ($($t:ty),*) => {$(impl Acc for $t {
        fn add(self, o: Self) -> Self { self + o }
        fn mul(self, o: Self) -> Self { self * o }
    })*};
}
acc_float!(f32, f64, f16, bf16);

fn reduce<T: Acc>(dst: &mut [T], src: &[T], r: Reduction) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = match r {
            Reduction::None => s,
            Reduction::Add => d.add(s),
            Reduction::Mul => d.mul(s),
            Reduction::Max => {
                if s > *d {
                    s
                } else {
                    *d
                }
            }
            Reduction::Min => {
                if s < *d {
                    s
                } else {
                    *d
                }
            }
        };
    }
}

/// Copies `data` and applies `updates[u..u + len]` at `data[d..d + len]` for every `(d, u)`
/// in `targets`, in order.
fn scatter_runs(
    node: &str,
    op: &str,
    data: &Tensor,
    updates: &Tensor,
    targets: &[(usize, usize)],
    len: usize,
    r: Reduction,
) -> Result<Tensor, EpError> {
    if updates.dtype() != data.dtype() {
        return Err(invalid(
            node,
            format!(
                "updates are {} but data is {}",
                updates.dtype(),
                data.dtype()
            ),
        ));
    }
    if r == Reduction::None {
        let mut out = unpacked(data).into_owned();
        let u = unpacked(updates);
        with_elem!(out.dtype(), T => {
            let src = T::items(&u);
            let dst = T::items_mut(&mut out);
            for &(d, s) in targets {
                dst[d..d + len].clone_from_slice(&src[s..s + len]);
            }
        }, return Err(unsupported(node, op, data.dtype(), "it has no element storage")));
        return Ok(repack(out, data.dtype()));
    }
    let mut out = data.clone();
    dispatch_numeric!(data.dtype(), T => {
        let src = updates.data::<T>();
        let dst = out.data_mut::<T>();
        for &(d, s) in targets {
            reduce(&mut dst[d..d + len], &src[s..s + len], r);
        }
    }, other => return Err(unsupported(node, op, other, "reductions need a numeric type")));
    Ok(out)
}

fn build_scatter_nd(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let red = Reduction::parse(ctx)?;
    Ok(kernel_fn(move |inputs| {
        let data = tensor_input(&node, inputs, 0)?;
        let indices = tensor_input(&node, inputs, 1)?;
        let updates = tensor_input(&node, inputs, 2)?;
        let (ds, is) = (data.shape(), indices.shape());
        let q = is.len();
        let k = if q == 0 { usize::MAX } else { is[q - 1] };
        if k > ds.len() {
            return Err(invalid(
                &node,
                format!("indices {is:?} do not fit data {ds:?}"),
            ));
        }
        let mut want = is[..q - 1].to_vec();
        want.extend_from_slice(&ds[k..]);
        if updates.shape() != want.as_slice() {
            return Err(invalid(
                &node,
                format!(
                    "updates must have shape {want:?}, got {:?}",
                    updates.shape()
                ),
            ));
        }
        let len: usize = ds[k..].iter().product();
        let strides = strides_of(ds);
        let idx = int_values(&node, indices, "indices")?;
        let count: usize = is[..q - 1].iter().product();
        let mut targets = Vec::with_capacity(count);
        for t in 0..count {
            let mut off = 0;
            for j in 0..k {
                off += resolve_index(&node, idx[t * k + j], ds[j], "index")? * strides[j];
            }
            targets.push((off, t * len));
        }
        one(scatter_runs(
            &node,
            "ScatterND",
            data,
            updates,
            &targets,
            len,
            red,
        )?)
    }))
}

fn build_scatter_elements(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let red = Reduction::parse(ctx)?;
    let axis = attrs::int(ctx.node, "axis", 0)?;
    let op = ctx.node.op_type.clone();
    Ok(kernel_fn(move |inputs| {
        let data = tensor_input(&node, inputs, 0)?;
        let indices = tensor_input(&node, inputs, 1)?;
        let updates = tensor_input(&node, inputs, 2)?;
        let a = normalize_axis(&node, axis, data.rank())?;
        check_elementwise_shapes(&node, data.shape(), indices.shape(), a)?;
        if updates.shape() != indices.shape() {
            return Err(invalid(
                &node,
                format!(
                    "updates shape {:?} must equal indices shape {:?}",
                    updates.shape(),
                    indices.shape()
                ),
            ));
        }
        let dim = data.shape()[a];
        let strides = strides_of(data.shape());
        let idx = int_values(&node, indices, "indices")?;
        let mut targets = Vec::with_capacity(idx.len());
        let mut bad = None;
        for_each_elementwise(indices.shape(), &strides, a, |l, base| match resolve_index(
            &node, idx[l], dim, "index",
        ) {
            Ok(i) => targets.push((base + i * strides[a], l)),
            Err(e) => {
                bad.get_or_insert(e);
            }
        });
        if let Some(e) = bad {
            return Err(e);
        }
        one(scatter_runs(&node, &op, data, updates, &targets, 1, red)?)
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [11, 13, 16, 18] {
        r.register("", "ScatterND", since, build_scatter_nd);
        r.register("", "ScatterElements", since, build_scatter_elements);
    }
    for since in [9, 11] {
        r.register("", "Scatter", since, build_scatter_elements);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn scatter_nd_add() {
        // onnx reference ScatterND reduction=add with a repeated index.
        let n = node(
            "ScatterND",
            3,
            1,
            vec![("reduction", Attribute::String("add".into()))],
        );
        let o = run(
            &n,
            16,
            &[
                t(&[4], vec![1f32, 2., 3., 4.]),
                t(&[3, 1], vec![1i64, 1, -1]),
                t(&[3], vec![10f32, 20., 30.]),
            ],
        )
        .unwrap();
        assert_eq!(out::<f32>(&o, 0).1, vec![1., 32., 3., 34.]);
    }

    #[test]
    fn scatter_elements_forms() {
        // ScatterElements axis=1: data zeros(2,3), indices [[1,0],[2,2]], updates [[5,6],[7,8]].
        let n = node(
            "ScatterElements",
            3,
            1,
            vec![
                ("axis", Attribute::Int(1)),
                ("reduction", Attribute::String("max".into())),
            ],
        );
        let o = run(
            &n,
            18,
            &[
                t(&[2, 3], vec![0i32; 6]),
                t(&[2, 2], vec![1i64, 0, 2, 2]),
                t(&[2, 2], vec![5i32, 6, 7, 8]),
            ],
        )
        .unwrap();
        assert_eq!(out::<i32>(&o, 0).1, vec![6, 5, 0, 0, 0, 8]);
        let bad = node(
            "ScatterElements",
            3,
            1,
            vec![("reduction", Attribute::String("max".into()))],
        );
        assert!(run(
            &bad,
            16,
            &[
                t(&[1], vec![0i32]),
                t(&[1], vec![0i64]),
                t(&[1], vec![1i32])
            ]
        )
        .is_err());
    }
}
