//! LpNormalization (x / ||x||_p along `axis`, p in {1, 2}; zero norms give zero) and
//! MaxUnpool (scatters pooled values back to the positions MaxPool's indices name, in the
//! inferred unpooled shape, then places that at the origin of `output_shape` if given).

use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid};
use crate::shape::normalize_axis;
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

fn from_f64(dtype: DataType, shape: Vec<usize>, v: Vec<f64>) -> Tensor {
    match dtype {
        DataType::Float64 => Tensor::from_vec(shape, v),
        d => common::tensor_from_f32(d, shape, v.into_iter().map(|x| x as f32).collect()),
    }
}

fn build_lp(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let p = attrs::int(n, "p", 2)?;
    if p != 1 && p != 2 {
        return Err(common::bad_attr(n, "p", format!("{p} must be 1 or 2")));
    }
    let axis = attrs::int(n, "axis", -1)?;
    let node = n.describe();
    Ok(kernel_fn(move |inputs: &[Option<&Value>]| {
        let x = tensor_input(&node, inputs, 0)?;
        common::require_float(&node, "LpNormalization", x.dtype())?;
        let shape = x.shape();
        let ax = normalize_axis(&node, axis, shape.len())?;
        let len = shape.get(ax).copied().unwrap_or(1);
        let inner: usize = shape.iter().skip(ax + 1).product();
        let outer: usize = shape.iter().take(ax).product();
        let mut v = common::floats_of(&node, x, "input")?;
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| (o * len + k) * inner + i;
                let norm = if p == 1 {
                    (0..len).map(|k| v[at(k)].abs()).sum::<f64>()
                } else {
                    (0..len).map(|k| v[at(k)] * v[at(k)]).sum::<f64>().sqrt()
                };
                for k in 0..len {
                    v[at(k)] = if norm == 0.0 { 0.0 } else { v[at(k)] / norm };
                }
            }
        }
        Ok(vec![Value::Tensor(from_f64(x.dtype(), shape.to_vec(), v))])
    }))
}

struct MaxUnpool {
    node: String,
    kernel: Vec<usize>,
    pads: Vec<usize>,
    strides: Vec<usize>,
}

impl CpuKernel for MaxUnpool {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let ind = tensor_input(node, inputs, 1)?;
        common::require_float(node, "MaxUnpool", x.dtype())?;
        if ind.dtype() != DataType::Int64 {
            return Err(common::unsupported(
                node,
                "MaxUnpool",
                ind.dtype(),
                "int64 indices",
            ));
        }
        let xs = x.shape();
        let nd = self.kernel.len();
        if xs.len() != nd + 2 || ind.shape() != xs {
            return Err(invalid(
                node,
                format!(
                    "X {xs:?} must have rank {} (N, C and one axis per kernel dim) and I {:?} the \
                     same shape",
                    nd + 2,
                    ind.shape()
                ),
            ));
        }
        let mut inferred = xs[..2].to_vec();
        for d in 0..nd {
            let v = (xs[d + 2] as i64 - 1) * self.strides[d] as i64 + self.kernel[d] as i64
                - (self.pads[d] + self.pads[nd + d]) as i64;
            if v < 0 {
                return Err(invalid(
                    node,
                    format!("unpooled size of axis {} is {v}", d + 2),
                ));
            }
            inferred.push(v as usize);
        }
        let out_shape = match optional_tensor_input(node, inputs, 2)? {
            Some(t) => {
                let s = common::ints_of(node, t, "output_shape")?;
                if s.len() != inferred.len()
                    || s.iter()
                        .zip(&inferred)
                        .enumerate()
                        .any(|(i, (&o, &f))| o < f as i64 || (i < 2 && o != f as i64))
                {
                    return Err(invalid(
                        node,
                        format!(
                            "output_shape {s:?} must keep N, C and be at least the unpooled \
                             shape {inferred:?}"
                        ),
                    ));
                }
                s.iter().map(|&v| v as usize).collect()
            }
            None => inferred.clone(),
        };
        let total: usize = inferred.iter().product();
        let mut y = vec![0.0f64; total];
        let xv = common::floats_of(node, x, "X")?;
        for (&i, &v) in ind.data::<i64>().iter().zip(&xv) {
            if i < 0 || i as usize >= total {
                return Err(invalid(
                    node,
                    format!("index {i} is out of range for unpooled shape {inferred:?}"),
                ));
            }
            y[i as usize] = v;
        }
        let mut out = vec![0.0f64; out_shape.iter().product()];
        let ostr = crate::shape::contiguous_strides(&out_shape);
        crate::shape::for_each_offset(&inferred, [&ostr], |lin, [o]| out[o] = y[lin]);
        Ok(vec![Value::Tensor(from_f64(x.dtype(), out_shape, out))])
    }
}

fn build_unpool(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let kernel = common::usize_list(n, "kernel_shape", &attrs::ints(n, "kernel_shape")?)?;
    if kernel.is_empty() {
        return Err(common::bad_attr(
            n,
            "kernel_shape",
            "the required attribute is missing",
        ));
    }
    let nd = kernel.len();
    let pads = match attrs::opt_ints(n, "pads")? {
        Some(p) => common::usize_list(n, "pads", &p)?,
        None => vec![0; 2 * nd],
    };
    let strides = match attrs::opt_ints(n, "strides")? {
        Some(s) => common::usize_list(n, "strides", &s)?,
        None => vec![1; nd],
    };
    if pads.len() != 2 * nd || strides.len() != nd {
        return Err(common::bad_attr(
            n,
            "pads",
            format!("pads {pads:?} / strides {strides:?} do not match kernel_shape {kernel:?}"),
        ));
    }
    Ok(Box::new(MaxUnpool {
        node: n.describe(),
        kernel,
        pads,
        strides,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 22] {
        r.register("", "LpNormalization", since, build_lp);
    }
    for since in [9, 11, 22] {
        r.register("", "MaxUnpool", since, build_unpool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn lp_norm_axis0_p1_and_p2() {
        let x = rand(12, 5, -2.0, 2.0);
        for p in [1i64, 2] {
            let n = node(
                "LpNormalization",
                1,
                1,
                vec![("p", Attribute::Int(p)), ("axis", Attribute::Int(0))],
            );
            let out = run(
                build_lp,
                &n,
                22,
                &[Some(Tensor::from_vec(vec![3, 4], x.clone()))],
            )
            .unwrap();
            let mut want = x.clone();
            for j in 0..4 {
                let col: Vec<f64> = (0..3).map(|i| x[i * 4 + j]).collect();
                let norm: f64 = if p == 1 {
                    col.iter().map(|v| v.abs()).sum()
                } else {
                    col.iter().map(|v| v * v).sum::<f64>().sqrt()
                };
                for i in 0..3 {
                    want[i * 4 + j] = x[i * 4 + j] / norm;
                }
            }
            let got: Vec<f32> = out[0].data::<f64>().iter().map(|&v| v as f32).collect();
            assert_close(&got, &want, 1e-6);
        }
    }

    #[test]
    fn unpool_places_values() {
        let n = node(
            "MaxUnpool",
            3,
            1,
            vec![
                ("kernel_shape", Attribute::Ints(vec![2, 2])),
                ("strides", Attribute::Ints(vec![2, 2])),
            ],
        );
        let x = Tensor::from_vec(vec![1, 1, 2, 2], vec![5f32, 6., 7., 8.]);
        let i = Tensor::from_vec(vec![1, 1, 2, 2], vec![5i64, 7, 13, 15]);
        let s = Tensor::from_vec(vec![4], vec![1i64, 1, 5, 5]);
        let out = run(build_unpool, &n, 22, &[Some(x.clone()), Some(i), Some(s)]).unwrap();
        let y = out[0].data::<f32>();
        assert_eq!(out[0].shape(), &[1, 1, 5, 5]);
        assert_eq!((y[6], y[8], y[16], y[18]), (5., 6., 7., 8.));
        assert_eq!(y.iter().filter(|&&v| v != 0.0).count(), 4);
        let bad = Tensor::from_vec(vec![1, 1, 2, 2], vec![5i64, 7, 13, 16]);
        assert!(run(build_unpool, &n, 22, &[Some(x), Some(bad), None]).is_err());
    }
}
