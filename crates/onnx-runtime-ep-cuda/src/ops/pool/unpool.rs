//! MaxUnpool (opsets 9, 11, 22): scatters X's values to the positions MaxPool's Indices name
//! (linear positions in the inferred unpooled shape `(in - 1) * stride + kernel - pads`, with
//! N and C) and places that shape at the origin of `output_shape` (input 2, read on the host;
//! it must keep N, C and be at least the inferred shape) when given; everything else is zero.
//! Float types (float, double, float16, bfloat16), any input strides. Indices out of range
//! write nothing and are reported as an error naming the node at the next synchronization.
//! Semantics mirror the CPU provider (`onnx-runtime-ep-cpu/src/ops/nn/pool/lp_unpool.rs`).

use super::{FastDiv, FAST_LIMIT};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::sync::Arc;

const UP_MAX: usize = 8;

/// Mirrors `struct UnpoolZero` in `kernels/unpool.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct UnpoolZero {
    n: i64,
    vec: i64,
    rank: i32,
    contig: i32,
    dims: [i64; UP_MAX],
    strides: [i64; UP_MAX],
}

/// Mirrors `struct UnpoolParams` in `kernels/unpool.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct UnpoolParams {
    n: i64,
    total: i64,
    rank: i32,
    id: u32,
    fast: i32,
    _pad: i32,
    xdims: [i64; UP_MAX],
    xdiv: [FastDiv; UP_MAX],
    xs: [i64; UP_MAX],
    is: [i64; UP_MAX],
    idims: [i64; UP_MAX],
    idiv: [FastDiv; UP_MAX],
    ys: [i64; UP_MAX],
}

/// `(zero, scatter)` by element width 2, 4, 8.
struct Fns([(Function, Function); 3]);

impl Fns {
    fn get(&self, width: usize) -> Option<(Function, Function)> {
        Some(
            self.0[match width {
                2 => 0,
                4 => 1,
                8 => 2,
                _ => return None,
            }],
        )
    }
}

struct UnpoolKernel {
    base: Base,
    host: HostReads,
    kernel: Vec<usize>,
    pads: Vec<usize>,
    strides: Vec<usize>,
    fns: Fns,
}

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

impl UnpoolKernel {
    /// The inferred unpooled shape and the output shape, checked against the inputs.
    fn plan(
        &self,
        inputs: &[TensorView<'_>],
        host: &HostValues,
    ) -> EpResult<(Vec<usize>, Vec<usize>)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let ind = base.req(inputs, 1)?;
        if !FLOATS.contains(&x.dtype) {
            return Err(base.unsupported(
                x.dtype,
                "MaxUnpool takes float, double, float16 and bfloat16",
            ));
        }
        if ind.dtype != DataType::Int64 {
            return Err(base.err(format!("indices must be int64, got {}", ind.dtype)));
        }
        let xs = x.shape;
        let nd = self.kernel.len();
        if xs.len() != nd + 2 || ind.shape != xs {
            return Err(base.err(format!(
                "X {xs:?} must have rank {} (N, C and one axis per kernel dim) and I {:?} the \
                 same shape",
                nd + 2,
                ind.shape
            )));
        }
        base.check_rank(xs.len(), UP_MAX)?;
        let mut inferred = xs[..2].to_vec();
        for d in 0..nd {
            let v = (xs[d + 2] as i64 - 1) * self.strides[d] as i64 + self.kernel[d] as i64
                - (self.pads[d] + self.pads[nd + d]) as i64;
            if v < 0 {
                return Err(base.err(format!("unpooled size of axis {} is {v}", d + 2)));
            }
            inferred.push(v as usize);
        }
        let out = match host.get(2).cloned().flatten() {
            Some(s) => {
                if s.len() != inferred.len()
                    || s.iter()
                        .zip(&inferred)
                        .enumerate()
                        .any(|(i, (&o, &f))| o < f as i64 || (i < 2 && o != f as i64))
                {
                    return Err(base.err(format!(
                        "output_shape {s:?} must keep N, C and be at least the unpooled shape \
                         {inferred:?}"
                    )));
                }
                s.iter().map(|&v| v as usize).collect()
            }
            None => inferred.clone(),
        };
        checked_numel(base, &out)?;
        Ok((inferred, out))
    }
}

impl Kernel for UnpoolKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let (_, out) = self.plan(inputs, &self.host.peek(base, inputs)?)?;
        Ok(vec![(base.req(inputs, 0)?.dtype, out)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let host = self.host.values(base, inputs, outputs)?;
        let (inferred, out_shape) = self.plan(inputs, &host)?;
        let x = base.req(inputs, 0)?;
        let ind = base.req(inputs, 1)?;
        base.expect_outputs(outputs, &[(x.dtype, out_shape.clone())])?;
        let y = &outputs[0];
        let n_out = y.numel();
        if n_out == 0 {
            return Ok(());
        }
        let width = base.width(x.dtype)?;
        let (zero, scatter) = self
            .fns
            .get(width)
            .ok_or_else(|| base.unsupported(x.dtype, "MaxUnpool takes float types"))?;
        // 1. Zero the output.
        let ys = istrides(y.strides);
        let (dims, st, _) = coalesce(y.shape, &ys, &ys);
        let contig = dims.len() <= 1 && st.first().is_none_or(|&s| s == 1);
        let mut z = UnpoolZero {
            n: n_out as i64,
            contig: contig as i32,
            rank: dims.len() as i32,
            ..Default::default()
        };
        if contig {
            if mut_ptr_of(y).is_multiple_of(16) {
                z.vec = (n_out * width / 16) as i64;
            }
        } else {
            base.check_rank(dims.len(), UP_MAX)?;
            z.dims = fill(&dims.iter().map(|&d| d as i64).collect::<Vec<_>>());
            z.strides = fill(&st);
        }
        let mut py = mut_ptr_of(y);
        let threads = if contig {
            (z.vec as u64).max((n_out - z.vec as usize * 16 / width) as u64)
        } else {
            n_out as u64
        };
        let mut args = [arg(&mut py), arg(&mut z)];
        // SAFETY: unpool_zero_wW(y, UnpoolZero) writes the output's elements inside its view.
        unsafe { base.rt.launch(zero, threads, &mut args)? };
        // 2. Scatter X.
        let n = x.numel();
        if n == 0 {
            return Ok(());
        }
        let total: usize = inferred.iter().product();
        let rank = x.rank();
        let fast = n <= FAST_LIMIT && total <= FAST_LIMIT;
        let mut p = UnpoolParams {
            n: n as i64,
            total: total as i64,
            rank: rank as i32,
            id: base.id,
            fast: fast as i32,
            ..Default::default()
        };
        for (k, (&xd, &id)) in x.shape.iter().zip(&inferred).enumerate() {
            p.xdims[k] = xd as i64;
            p.xdiv[k] = FastDiv::new(xd);
            p.xs[k] = x.strides[k] as i64;
            p.is[k] = ind.strides[k] as i64;
            p.idims[k] = id as i64;
            p.idiv[k] = FastDiv::new(id);
            p.ys[k] = y.strides[k] as i64;
        }
        let (mut px, mut pi, mut py, mut pe) =
            (ptr_of(x), ptr_of(ind), mut_ptr_of(y), base.rt.err_ptr());
        let mut args = [
            arg(&mut px),
            arg(&mut pi),
            arg(&mut py),
            arg(&mut pe),
            arg(&mut p),
        ];
        // SAFETY: max_unpool_wW(x, idx, y, err, UnpoolParams) reads X and I inside their views
        // and writes only at indices checked against the inferred shape, which lies inside
        // the output (every output axis is at least the inferred one).
        unsafe { base.rt.launch(scatter, n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

/// A non-negative int list attribute.
fn usize_list(
    node: &onnx_runtime_ir::Node,
    name: &str,
    values: Option<Vec<i64>>,
) -> EpResult<Option<Vec<usize>>> {
    values
        .map(|v| {
            v.iter()
                .map(|&x| {
                    usize::try_from(x).map_err(|_| {
                        EpError::invalid_attribute(node, name, format!("{x} must not be negative"))
                    })
                })
                .collect()
        })
        .transpose()
}

fn max_unpool(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let kernel = usize_list(node, "kernel_shape", attr_ints(node, "kernel_shape")?)?
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            EpError::invalid_attribute(node, "kernel_shape", "the required attribute is missing")
        })?;
    let nd = kernel.len();
    let pads = usize_list(node, "pads", attr_ints(node, "pads")?)?.unwrap_or(vec![0; 2 * nd]);
    let strides = usize_list(node, "strides", attr_ints(node, "strides")?)?.unwrap_or(vec![1; nd]);
    if pads.len() != 2 * nd || strides.len() != nd {
        return Err(EpError::invalid_attribute(
            node,
            "pads",
            format!("pads {pads:?} / strides {strides:?} do not match kernel_shape {kernel:?}"),
        ));
    }
    let base = Base::new(rt, node);
    let module = base.module(&super::unpool_module())?;
    let f = |w: usize| -> EpResult<(Function, Function)> {
        Ok((
            module.function(&format!("unpool_zero_w{w}"))?,
            module.function(&format!("max_unpool_w{w}"))?,
        ))
    };
    let fns = Fns([f(2)?, f(4)?, f(8)?]);
    let host = HostReads::new(&base, &[2], "output_shape input");
    Ok(Box::new(UnpoolKernel {
        base,
        host,
        kernel,
        pads,
        strides,
        fns,
    }))
}

pub fn register(r: &mut Registry) {
    for since in [9, 11, 22] {
        r.register("", "MaxUnpool", since, max_unpool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(std::mem::size_of::<UnpoolZero>(), 24 + 8 * 8 * 2);
        assert_eq!(
            std::mem::size_of::<UnpoolParams>(),
            32 + 8 * 8 * 5 + 16 * 8 * 2
        );
    }
}
