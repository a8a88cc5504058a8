//! Ops that keep the elements in order and change only the shape: Reshape, Squeeze,
//! Unsqueeze, Flatten, Identity. Each is one `cuMemcpyDtoDAsync` on the stream (a strided copy
//! when the input is not contiguous). Shape-carrying inputs (Reshape's shape, the axes inputs
//! of opset 13) are read on the host to check the output shape the caller resolved.

use super::common::*;
use super::Registry;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use std::sync::Arc;

enum Rule {
    Reshape {
        allowzero: bool,
        attr_shape: Option<Vec<i64>>,
    },
    Squeeze {
        attr_axes: Option<Vec<i64>>,
    },
    Unsqueeze {
        attr_axes: Option<Vec<i64>>,
    },
    Flatten {
        axis: i64,
    },
    Identity,
}

struct ReshapeKernel {
    base: Base,
    host: HostReads,
    rule: Rule,
    fns: WidthFns,
}

fn reshape_shape(
    base: &Base,
    input: &[usize],
    spec: &[i64],
    allowzero: bool,
) -> EpResult<Vec<usize>> {
    let numel: usize = input.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        match s {
            -1 => {
                if infer.replace(i).is_some() {
                    return Err(base.err(format!("shape {spec:?} has more than one -1")));
                }
                out.push(1);
            }
            0 if !allowzero => out.push(*input.get(i).ok_or_else(|| {
                base.err(format!(
                    "shape {spec:?} copies dimension {i} (0) but the input {input:?} has rank {}",
                    input.len()
                ))
            })?),
            s if s < 0 => return Err(base.err(format!("shape {spec:?} has a negative entry"))),
            s => out.push(s as usize),
        }
    }
    if allowzero && infer.is_some() && spec.contains(&0) {
        return Err(base.err(format!("shape {spec:?} has both 0 and -1 with allowzero=1")));
    }
    if let Some(i) = infer {
        let rest = checked_numel(base, &out)?;
        if rest == 0 || !numel.is_multiple_of(rest) {
            return Err(base.err(format!(
                "cannot reshape {input:?} ({numel} elements) to {spec:?}"
            )));
        }
        out[i] = numel / rest;
    }
    if checked_numel(base, &out)? != numel {
        return Err(base.err(format!(
            "cannot reshape {input:?} ({numel} elements) to {spec:?}"
        )));
    }
    Ok(out)
}

impl ReshapeKernel {
    /// The output's dtype and shape for these inputs and host-read values.
    fn output_types_with(
        &self,
        inputs: &[TensorView<'_>],
        host: &HostValues,
    ) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        self.base.width(x.dtype)?;
        Ok(vec![(x.dtype, self.output_shape(x.shape, host)?)])
    }

    fn output_shape(&self, input: &[usize], host: &HostValues) -> EpResult<Vec<usize>> {
        let base = &self.base;
        match &self.rule {
            Rule::Identity => Ok(input.to_vec()),
            Rule::Flatten { axis } => {
                let r = input.len() as i64;
                let a = if *axis < 0 { axis + r } else { *axis };
                if a < 0 || a > r {
                    return Err(base.err(format!(
                        "axis {axis} is out of range for rank {r} (accepted: [-{r}, {r}])"
                    )));
                }
                let (lo, hi) = input.split_at(a as usize);
                Ok(vec![lo.iter().product(), hi.iter().product()])
            }
            Rule::Reshape {
                allowzero,
                attr_shape,
            } => {
                let spec = host
                    .get(1)
                    .and_then(Option::as_ref)
                    .or(attr_shape.as_ref())
                    .ok_or_else(|| base.err("the shape input is missing"))?;
                reshape_shape(base, input, spec, *allowzero)
            }
            Rule::Squeeze { attr_axes } => {
                let axes = host.get(1).cloned().flatten().or_else(|| attr_axes.clone());
                match axes {
                    None => Ok(input.iter().copied().filter(|&d| d != 1).collect()),
                    Some(axes) => {
                        let mut drop = vec![false; input.len()];
                        for a in axes {
                            let k = base.axis(a, input.len(), "axis")?;
                            if input[k] != 1 {
                                return Err(base.err(format!(
                                    "cannot squeeze axis {a} of shape {input:?}: its size is not 1"
                                )));
                            }
                            drop[k] = true;
                        }
                        Ok(input
                            .iter()
                            .zip(drop)
                            .filter(|(_, d)| !d)
                            .map(|(s, _)| *s)
                            .collect())
                    }
                }
            }
            Rule::Unsqueeze { attr_axes } => {
                let axes = host
                    .get(1)
                    .cloned()
                    .flatten()
                    .or_else(|| attr_axes.clone())
                    .ok_or_else(|| base.err("Unsqueeze needs axes"))?;
                let rank = input.len() + axes.len();
                let mut insert = vec![false; rank];
                for a in axes {
                    let k = base.axis(a, rank, "axis")?;
                    if std::mem::replace(&mut insert[k], true) {
                        return Err(base.err(format!("axis {a} is repeated")));
                    }
                }
                let mut it = input.iter();
                Ok(insert
                    .iter()
                    .map(|&ins| {
                        if ins {
                            1
                        } else {
                            *it.next().expect("rank adds up")
                        }
                    })
                    .collect())
            }
        }
    }
}

impl Kernel for ReshapeKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        let host = self.host.values(base, inputs, outputs)?;
        base.expect_outputs(outputs, &self.output_types_with(inputs, &host)?)?;
        let out = &outputs[0];
        let width = base.width(x.dtype)?;
        let (src, dst) = (ptr_of(x), mut_ptr_of(out));
        if x.is_contiguous() && out.is_contiguous() {
            // SAFETY: both views hold numel elements of `width` bytes.
            return unsafe { base.rt.dtod(src, dst, x.numel() * width) };
        }
        if out.is_contiguous() {
            let dims = x.shape;
            copy_strided(
                base,
                &self.fns,
                width,
                src,
                dst,
                dims,
                &istrides(x.strides),
                &contiguous(dims),
                0,
                0,
            )
        } else if x.is_contiguous() {
            let dims = out.shape;
            copy_strided(
                base,
                &self.fns,
                width,
                src,
                dst,
                dims,
                &contiguous(dims),
                &istrides(out.strides),
                0,
                0,
            )
        } else {
            Err(base.err(
                "both the input and the output are strided; give a contiguous output".to_string(),
            ))
        }
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let host = self.host.peek(&self.base, inputs)?;
        self.output_types_with(inputs, &host)
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

fn build(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    rule: Rule,
    host_inputs: &[usize],
    what: &str,
) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let module = base.module(&copy_module())?;
    let fns = WidthFns::load(&module, "copy_nd", "")?;
    let host = HostReads::new(&base, host_inputs, what);
    Ok(Box::new(ReshapeKernel {
        base,
        host,
        rule,
        fns,
    }))
}

fn reshape(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let allowzero = attr_int(req.node, "allowzero")?.unwrap_or(0) != 0;
    let (attr_shape, host) = if req.opset < 5 {
        (
            Some(attr_ints(req.node, "shape")?.unwrap_or_default()),
            vec![],
        )
    } else {
        (None, vec![1])
    };
    build(
        rt,
        req,
        Rule::Reshape {
            allowzero,
            attr_shape,
        },
        &host,
        "shape input",
    )
}

fn squeeze(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let (attr_axes, host) = if req.opset < 13 {
        (attr_ints(req.node, "axes")?, vec![])
    } else {
        (None, vec![1])
    };
    build(rt, req, Rule::Squeeze { attr_axes }, &host, "axes input")
}

fn unsqueeze(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let (attr_axes, host) = if req.opset < 13 {
        (attr_ints(req.node, "axes")?, vec![])
    } else {
        (None, vec![1])
    };
    build(rt, req, Rule::Unsqueeze { attr_axes }, &host, "axes input")
}

fn flatten(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let axis = attr_int(req.node, "axis")?.unwrap_or(1);
    build(rt, req, Rule::Flatten { axis }, &[], "")
}

fn identity(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Rule::Identity, &[], "")
}

pub fn register(r: &mut Registry) {
    r.register("", "Reshape", 1, reshape);
    r.register("", "Squeeze", 1, squeeze);
    r.register("", "Unsqueeze", 1, unsqueeze);
    r.register("", "Flatten", 1, flatten);
    r.register("", "Identity", 1, identity);
}
