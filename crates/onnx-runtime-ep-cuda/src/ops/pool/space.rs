//! DepthToSpace (DCR and CRD) and SpaceToDepth: each is one strided copy. The input, viewed
//! with its channel (or spatial) axis split by the block size, is walked in the output's
//! order, so any input strides and every element width (all ONNX fixed-width types) work.

use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use std::sync::Arc;

struct SpaceKernel {
    base: Base,
    /// DepthToSpace (true) or SpaceToDepth.
    to_space: bool,
    crd: bool,
    b: usize,
    copy: WidthFns,
}

impl SpaceKernel {
    fn dims4(&self, x: &TensorView<'_>) -> EpResult<[usize; 4]> {
        match *x.shape {
            [n, c, h, w] => Ok([n, c, h, w]),
            _ => Err(self.base.err(format!(
                "input must be 4-D (N, C, H, W), got shape {:?}",
                x.shape
            ))),
        }
    }

    fn out_shape(&self, x: &TensorView<'_>) -> EpResult<Vec<usize>> {
        let [n, c, h, w] = self.dims4(x)?;
        let b = self.b;
        self.base.width(x.dtype)?;
        if self.to_space {
            if c % (b * b) != 0 {
                return Err(self.base.err(format!(
                    "channels {c} are not divisible by blocksize² ({})",
                    b * b
                )));
            }
            Ok(vec![n, c / (b * b), h * b, w * b])
        } else {
            if h % b != 0 || w % b != 0 {
                return Err(self.base.err(format!(
                    "height {h} and width {w} must be divisible by blocksize {b}"
                )));
            }
            Ok(vec![n, c * b * b, h / b, w / b])
        }
    }
}

/// The strided copy that is DepthToSpace (`to_space`) or SpaceToDepth of an [N, C, H, W]
/// input of strides `xstrides` into outputs of strides `ystrides` with block size `bsz`: the
/// walk's extents, input strides and output strides.
fn walk(
    to_space: bool,
    crd: bool,
    bsz: usize,
    ([n, c, h, w], xstrides): ([usize; 4], &[usize]),
    ystrides: &[usize],
) -> (Vec<usize>, Vec<i64>, Vec<i64>) {
    let b = bsz as i64;
    let s: Vec<i64> = istrides(xstrides);
    let o: Vec<i64> = istrides(ystrides);
    if to_space {
        // Walk (n, co, h, b1, w, b2): output row h * b + b1, column w * b + b2.
        let co = c / (bsz * bsz);
        let dims = vec![n, co, h, bsz, w, bsz];
        let out = vec![o[0], o[1], b * o[2], o[2], b * o[3], o[3]];
        let (sc, bb) = (s[1], b);
        let src = if crd {
            // Channel co * b * b + b1 * b + b2.
            vec![s[0], bb * bb * sc, s[2], bb * sc, s[3], sc]
        } else {
            // Channel (b1 * b + b2) * co + co_i.
            let co = co as i64;
            vec![s[0], sc, s[2], bb * co * sc, s[3], co * sc]
        };
        (dims, src, out)
    } else {
        // Walk the input (n, c, h', b1, w', b2) as the output's channel order wants.
        let (hb, wb) = (h / bsz, w / bsz);
        let src_c = s[1];
        let ci = c as i64;
        if crd {
            // Output channel c * b * b + b1 * b + b2: walk (n, c, b1, b2, h', w').
            let dims = vec![n, c, bsz, bsz, hb, wb];
            let src = vec![s[0], src_c, s[2], s[3], b * s[2], b * s[3]];
            let out = vec![o[0], b * b * o[1], b * o[1], o[1], o[2], o[3]];
            (dims, src, out)
        } else {
            // Output channel (b1 * b + b2) * c + c_i: walk (n, b1, b2, c, h', w').
            let dims = vec![n, bsz, bsz, c, hb, wb];
            let src = vec![s[0], s[2], s[3], src_c, b * s[2], b * s[3]];
            let out = vec![o[0], b * ci * o[1], ci * o[1], o[1], o[2], o[3]];
            (dims, src, out)
        }
    }
}

impl Kernel for SpaceKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        Ok(vec![(x.dtype, self.out_shape(x)?)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let shape = self.out_shape(x)?;
        base.expect_outputs(outputs, &[(x.dtype, shape.clone())])?;
        let y = &outputs[0];
        let (dims, a, bs) = walk(
            self.to_space,
            self.crd,
            self.b,
            (self.dims4(x)?, x.strides),
            y.strides,
        );
        let width = base.width(x.dtype)?;
        copy_strided(
            base,
            &self.copy,
            width,
            ptr_of(x),
            mut_ptr_of(y),
            &dims,
            &a,
            &bs,
            0,
            0,
        )
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    to_space: bool,
) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let b = attr_int(node, "blocksize")?.unwrap_or(0);
    if b <= 0 {
        return Err(EpError::invalid_attribute(
            node,
            "blocksize",
            format!("must be a positive integer, got {b}"),
        ));
    }
    let crd = match attr_string(node, "mode")?.as_deref() {
        None | Some("DCR") => false,
        Some("CRD") => true,
        Some(other) => {
            return Err(EpError::invalid_attribute(
                node,
                "mode",
                format!("'{other}' is not DCR or CRD"),
            ))
        }
    };
    let base = Base::new(rt, node);
    let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
    Ok(Box::new(SpaceKernel {
        base,
        to_space,
        crd,
        b: b as usize,
        copy,
    }))
}

fn depth_to_space(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, true)
}

fn space_to_depth(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, false)
}

pub fn register(r: &mut Registry) {
    for since in [1, 11, 13] {
        r.register("", "DepthToSpace", since, depth_to_space);
    }
    for since in [1, 13] {
        r.register("", "SpaceToDepth", since, space_to_depth);
    }
}

#[cfg(test)]
mod tests {
    use super::walk;
    use onnx_runtime_ep_cpu::{BuildContext, Tensor, Value};
    use onnx_runtime_ir::{compute_contiguous_strides, Attribute, DataType, Node, NodeId, ValueId};

    /// The CPU provider's output for `x` (f32 values 0, 1, 2, ... of `shape`).
    fn cpu(op: &str, b: usize, mode: &str, shape: [usize; 4]) -> Vec<f32> {
        let mut node = Node::new(NodeId(1), op, vec![Some(ValueId(0))], vec![ValueId(1)]);
        node.attributes
            .insert("blocksize".into(), Attribute::Int(b as i64));
        node.attributes
            .insert("mode".into(), Attribute::String(mode.into()));
        let (_, factory) = onnx_runtime_ep_cpu::registry()
            .lookup("", op, 13)
            .expect("a CPU kernel");
        let kernel = factory(&BuildContext::new(&node, 13)).unwrap();
        let n: usize = shape.iter().product();
        let x = Tensor::from_vec(shape.to_vec(), (0..n).map(|v| v as f32).collect::<Vec<_>>());
        let out = kernel.run(&[Some(&Value::Tensor(x))]).unwrap();
        let t = out.into_iter().next().unwrap().into_tensor().unwrap();
        assert_eq!(t.dtype(), DataType::Float32);
        t.data::<f32>().to_vec()
    }

    /// The walk applied on the host to a strided copy of the same input.
    fn walked(to_space: bool, crd: bool, b: usize, shape: [usize; 4], reversed: bool) -> Vec<f32> {
        let n: usize = shape.iter().product();
        // The input stored with its axes reversed (a transposed view) or contiguous.
        let xstrides: Vec<usize> = if reversed {
            let rs: Vec<usize> = shape.iter().rev().copied().collect();
            let cs = compute_contiguous_strides(&rs);
            (0..4).map(|k| cs[3 - k]).collect()
        } else {
            compute_contiguous_strides(&shape)
        };
        let cs = compute_contiguous_strides(&shape);
        let mut storage = vec![0f32; n];
        for i in 0..n {
            let off: usize = (0..4).map(|k| (i / cs[k]) % shape[k] * xstrides[k]).sum();
            storage[off] = i as f32;
        }
        let [nn, c, h, w] = shape;
        let out_shape = if to_space {
            [nn, c / (b * b), h * b, w * b]
        } else {
            [nn, c * b * b, h / b, w / b]
        };
        let ys = compute_contiguous_strides(&out_shape);
        let (dims, a, o) = walk(to_space, crd, b, (shape, &xstrides), &ys);
        let mut y = vec![f32::NAN; n];
        let total: usize = dims.iter().product();
        let ds = compute_contiguous_strides(&dims);
        for i in 0..total {
            let (mut src, mut dst) = (0i64, 0i64);
            for k in 0..dims.len() {
                let idx = ((i / ds[k]) % dims[k]) as i64;
                src += idx * a[k];
                dst += idx * o[k];
            }
            y[dst as usize] = storage[src as usize];
        }
        y
    }

    #[test]
    fn walks_match_the_cpu_provider() {
        for b in [2, 3] {
            for mode in ["DCR", "CRD"] {
                let crd = mode == "CRD";
                for reversed in [false, true] {
                    let shape = [2, 2 * b * b, 3, 4];
                    assert_eq!(
                        walked(true, crd, b, shape, reversed),
                        cpu("DepthToSpace", b, mode, shape),
                        "DepthToSpace {mode} b={b}"
                    );
                    let shape = [2, 3, 2 * b, 3 * b];
                    assert_eq!(
                        walked(false, crd, b, shape, reversed),
                        cpu("SpaceToDepth", b, mode, shape),
                        "SpaceToDepth {mode} b={b}"
                    );
                }
            }
        }
    }
}
