//! Variadic broadcasting folds: Max, Min (numeric; NaN propagates), Sum, Mean (floats), and
//! com.microsoft BiasAdd (X + bias + skip). One input is a copy, two take the binary kernels,
//! three or more fold in one launch per `EW_MAXIN` inputs (the output carries the fold into
//! the next launch).

use super::{binary, plan, vec_width, Fns, Operand, Plan, Source, Types, EW_MAXIN};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use std::sync::Arc;

/// The (op, functor of the fold, two-input binary functor, dtypes).
const OPS: &[(&str, &str, &str, Types)] = &[
    ("Max", "VMax", "BMax", Types::Numeric),
    ("Min", "VMin", "BMin", Types::Numeric),
    ("Sum", "VSum", "Add", Types::Floats),
    ("Mean", "VSum", "Mean2", Types::Floats),
];

pub fn modules() -> Vec<crate::compiler::ModuleSpec> {
    [
        ("VMax", Types::Numeric),
        ("VMin", Types::Numeric),
        ("VSum", Types::Floats),
    ]
    .iter()
    .map(|(f, t)| super::ew_module(Source::Variadic, f, *t))
    .collect()
}

struct VariadicKernel {
    base: Base,
    fns: Fns,
    types: Types,
    mean: bool,
    /// BiasAdd: the output has input 0's shape (the others broadcast to it).
    to_first: bool,
}

impl VariadicKernel {
    fn inputs<'a, 'b>(&self, inputs: &'b [TensorView<'a>]) -> EpResult<Vec<&'b TensorView<'a>>> {
        let base = &self.base;
        let n = base.present.len();
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            let t = base.req(inputs, i)?;
            if let Some(first) = v.first() {
                let first: &&TensorView<'_> = first;
                base.same_dtype(first.dtype, t.dtype, &format!("input {i}"))?;
            }
            v.push(t);
        }
        Ok(v)
    }
}

impl Kernel for VariadicKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let ts = self.inputs(inputs)?;
        let dtype = ts[0].dtype;
        if self.fns.get(dtype).is_none() {
            return Err(base.unsupported(
                dtype,
                format!("the CUDA {} takes {}", base.op, self.types.describe()),
            ));
        }
        let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape).collect();
        let shape = broadcast_shapes(base, &shapes)?;
        if self.to_first && shape != ts[0].shape {
            return Err(base.err(format!(
                "bias and skip must broadcast to the input's shape {:?}; the shapes are {shapes:?}",
                ts[0].shape
            )));
        }
        check_view_rank(base, &shape)?;
        Ok(vec![(dtype, shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.expect_outputs(outputs, &self.output_types(inputs)?)?;
        let ts = self.inputs(inputs)?;
        let dtype = ts[0].dtype;
        let f = self
            .fns
            .get(dtype)
            .ok_or_else(|| base.unsupported(dtype, "unsupported dtype"))?;
        let out = &outputs[0];
        let size = dtype.element_size().unwrap_or(1);
        let oo = || Operand {
            shape: out.shape,
            strides: out.strides.to_vec(),
            ptr: mut_ptr_of(out),
            size,
        };
        let v = vec_width(&[size], 8);
        let total = ts.len();
        let mut next = 0;
        while next < total {
            // The first launch folds EW_MAXIN inputs; each later one folds the output so far
            // with EW_MAXIN - 1 more.
            let mut ops: Vec<Operand<'_>> = Vec::with_capacity(EW_MAXIN);
            if next > 0 {
                ops.push(oo());
            }
            while ops.len() < EW_MAXIN && next < total {
                ops.push(Operand::of(ts[next]));
                next += 1;
            }
            let last = next == total;
            let mut ptrs = [0u64; EW_MAXIN];
            for (k, o) in ops.iter().enumerate() {
                ptrs[k] = o.ptr;
            }
            let mut count = ops.len() as i32;
            let Plan { mut p, threads } =
                plan::<{ EW_MAXIN + 1 }>(base, out.shape, &ops, &oo(), v)?
                    .flat_or_strided(ops.len());
            if p.n == 0 {
                return Ok(());
            }
            p.a = total as f64;
            p.flags = (self.mean && last) as i64;
            let mut po = mut_ptr_of(out);
            let mut args = [arg(&mut ptrs), arg(&mut po), arg(&mut count), arg(&mut p)];
            // SAFETY: ew_<tag>(EwPtrs, out, count, EwParams<9>) reads `count` inputs at their
            // broadcast offsets and writes each output element once, inside the views.
            unsafe { base.rt.launch(f, threads, &mut args)? };
        }
        Ok(())
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

/// One input: the output is a copy of it.
struct IdentityKernel {
    base: Base,
    types: Types,
    copy: WidthFns,
}

impl Kernel for IdentityKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        if !self.types.dtypes().contains(&x.dtype) {
            return Err(self.base.unsupported(
                x.dtype,
                format!("the CUDA {} takes {}", self.base.op, self.types.describe()),
            ));
        }
        Ok(vec![(x.dtype, x.shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.expect_outputs(outputs, &self.output_types(inputs)?)?;
        let x = base.req(inputs, 0)?;
        let out = &outputs[0];
        let width = base.width(x.dtype)?;
        copy_strided(
            base,
            &self.copy,
            width,
            ptr_of(x),
            mut_ptr_of(out),
            x.shape,
            &istrides(x.strides),
            &istrides(out.strides),
            0,
            0,
        )
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let &(_, fold, pair, types) = OPS
        .iter()
        .find(|o| o.0 == node.op_type)
        .ok_or_else(|| onnx_runtime_ep_api::EpError::unsupported_op("cuda", node, req.opset))?;
    let base = Base::new(rt, node);
    if let Some(i) = base.present.iter().position(|p| !p) {
        return Err(base.err(format!(
            "input {i} is omitted; {} takes only wired inputs",
            base.op
        )));
    }
    match base.present.len() {
        0 => Err(base.err(format!("{} needs at least one input", base.op))),
        1 => {
            let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
            Ok(Box::new(IdentityKernel { base, types, copy }))
        }
        2 => binary::build_subset(
            rt,
            req,
            pair,
            if pair == "Add" { Types::Numeric } else { types },
            types,
        ),
        _ => {
            let fns = Fns::load(&base, Source::Variadic, fold, types, &types.dtypes(), "ew_")?;
            Ok(Box::new(VariadicKernel {
                base,
                fns,
                types,
                mean: node.op_type == "Mean",
                to_first: false,
            }))
        }
    }
}

/// com.microsoft BiasAdd: X + bias + skip (bias and skip broadcast to X).
fn bias_add(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    if base.present.len() != 3 || base.present.iter().any(|p| !p) {
        return Err(base.err("BiasAdd takes three inputs: X, bias and skip"));
    }
    let types = Types::Floats;
    let fns = Fns::load(
        &base,
        Source::Variadic,
        "VSum",
        types,
        &types.dtypes(),
        "ew_",
    )?;
    Ok(Box::new(VariadicKernel {
        base,
        fns,
        types,
        mean: false,
        to_first: true,
    }))
}

pub fn register(r: &mut Registry) {
    for since in [1, 6, 8, 12, 13] {
        r.register("", "Max", since, build);
        r.register("", "Min", since, build);
    }
    for since in [1, 6, 8, 13] {
        r.register("", "Sum", since, build);
        r.register("", "Mean", since, build);
    }
    r.register("com.microsoft", "BiasAdd", 1, bias_add);
}
