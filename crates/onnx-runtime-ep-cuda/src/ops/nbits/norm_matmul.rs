//! The internal `NormMatMulNBits`: an LLM decoder's RMS norm fused into the MatMulNBits
//! products that read it (the session's rewrite of SimplifiedLayerNormalization or
//! com.microsoft SkipSimplifiedLayerNormalization whose normalized output only feeds
//! MatMulNBits / MatMulNBitsSiluMul nodes).
//!
//! Inputs: 0 x, 1 skip (optional), 2 gamma, 3 the norm's bias (optional), 4 B, 5 scales,
//! 6 zero points (optional), 7 the product's bias (optional, not with `glu`), 8 B2, 9 scales2,
//! 10 zero points 2 (optional): the up weights of `glu` = 1 (MatMulNBitsSiluMul). Attributes:
//! the product's (K, N, bits, block_size, accuracy_level), the norm's `epsilon`, `glu`.
//! Outputs: 0 the product, 1 (optional, with skip) the rounded sum x + skip (+ bias), the
//! norm's fourth output.
//!
//! Where the tensor-core GEMV takes the call (the decode step: M <= 16, float16 / bfloat16,
//! aligned rows, the normalized rows fit 48 KiB), one launch (`nq_gemv_*_norm`) computes the
//! norm in every block's prologue and the product from shared memory. Otherwise the norm
//! kernel writes the normalized rows to a workspace and the product runs as MatMulNBits would:
//! the same values as the unfused graph's kernels.

use super::matmul::{build_nbits, row_strides, NBitsKernel, NQ_THREADS};
use super::Workspace;
use crate::ops::common::*;
use crate::runtime::{CuPtr, CudaRuntime};
use onnx_runtime_ep_api::{
    CaptureSupport, DevicePtr, DevicePtrMut, EpError, EpResult, Kernel, KernelRequest, TensorMut,
    TensorView,
};
use onnx_runtime_ir::{Attribute, Node, NodeId, ValueId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The op's name in the internal domain.
pub const OP: &str = "NormMatMulNBits";

/// Shared memory the prologue's normalized rows may take.
const NORM_SMEM: usize = 48 << 10;

/// The fused node's input positions that the product kernel reads (after A), in the
/// product's input order: MatMulNBits (B, scales, zero points, g_idx, bias) or
/// MatMulNBitsSiluMul (B, scales, zero points, B2, scales2, zero points 2).
const PRODUCT: [Option<usize>; 5] = [Some(4), Some(5), Some(6), None, Some(7)];
const PRODUCT_GLU: [Option<usize>; 6] = [Some(4), Some(5), Some(6), Some(8), Some(9), Some(10)];

struct NormNBits {
    base: Base,
    product: NBitsKernel,
    norm: Box<dyn Kernel>,
    skip: bool,
    glu: bool,
    eps: f32,
    /// The fallback's normalized rows and norm statistics.
    a_ws: Workspace,
    stat_ws: Workspace,
    /// Set by the first eager run (the fallback's workspaces are sized there), and whether
    /// a run took the fallback, whose norm and product kernels then speak for capture.
    warmed: AtomicBool,
    unfused_ran: AtomicBool,
}

impl NormNBits {
    fn positions(&self) -> &'static [Option<usize>] {
        if self.glu {
            &PRODUCT_GLU
        } else {
            &PRODUCT
        }
    }

    /// The product kernel's (compact) inputs with `a` as A.
    fn product_inputs<'a>(
        &self,
        inputs: &[TensorView<'a>],
        a: TensorView<'a>,
    ) -> Vec<TensorView<'a>> {
        let mut v = vec![a];
        for pos in self.positions().iter().flatten() {
            if let Some(t) = self.base.input(inputs, *pos) {
                v.push(*t);
            }
        }
        v
    }

    /// The norm kernel's (compact) inputs: x, skip, gamma, bias or x, gamma.
    fn norm_inputs<'a>(&self, inputs: &[TensorView<'a>]) -> Vec<TensorView<'a>> {
        let pos: &[usize] = if self.skip { &[0, 1, 2, 3] } else { &[0, 2] };
        pos.iter()
            .filter_map(|&p| self.base.input(inputs, p).copied())
            .collect()
    }

    /// The one-launch path, when the tensor-core GEMV takes the call. Returns false when it
    /// does not (nothing launched).
    fn fused(
        &self,
        inputs: &[TensorView<'_>],
        x: &TensorView<'_>,
        out: &TensorMut<'_>,
        sum: Option<&TensorMut<'_>>,
    ) -> EpResult<bool> {
        let base = &self.base;
        let pin = self.product_inputs(inputs, *x);
        let call = self.product.plan(&pin)?;
        let dtype = call.dtype;
        let k = self.product.k;
        let w = dtype.element_size().unwrap_or(4);
        let a_rows = row_strides(x.shape, x.strides);
        let Some((y_rs, 1)) = row_strides(out.shape, out.strides) else {
            return Ok(false);
        };
        let aligned = |p: CuPtr| p.is_multiple_of(16);
        let vector = |t: &TensorView<'_>| {
            t.dtype == dtype
                && t.numel() == k
                && t.strides.last().is_none_or(|&s| s == 1)
                && aligned(ptr_of(t))
        };
        let gamma = base.req(inputs, 2)?;
        let nbias = base.input(inputs, 3);
        let skip = base.input(inputs, 1);
        let same_rows = |shape: &[usize], strides: &[usize], p: CuPtr| {
            shape == x.shape && row_strides(shape, strides) == a_rows && aligned(p)
        };
        if !vector(gamma)
            || nbias.is_some_and(|b| !vector(b))
            || skip.is_some_and(|s| !same_rows(s.shape, s.strides, ptr_of(s)))
            || sum.is_some_and(|s| !same_rows(s.shape, s.strides, mut_ptr_of(s)))
            || call.m * k * w > NORM_SMEM
        {
            return Ok(false);
        }
        let rows = if call.m > 8 { 2 } else { 1 };
        let Some(&f) = self.product.nq_norm.get(&(dtype, rows)) else {
            return Ok(false);
        };
        let f = self.product.nq_function(f);
        let Some((_, grid, mut p)) =
            self.product
                .nq_launch(&call, ptr_of(x), &call.w, call.w2.as_ref(), a_rows)
        else {
            return Ok(false);
        };
        p.a = ptr_of(x);
        p.b = call.w.b;
        p.scales = call.w.scales;
        p.zp = call.w.zp_ptr();
        p.bias = if self.glu { 0 } else { call.bias.unwrap_or(0) };
        p.y = mut_ptr_of(out);
        p.y_rs = if call.m == 1 {
            out.shape.last().copied().unwrap_or(0) as i64
        } else {
            y_rs
        };
        if let Some(w2) = &call.w2 {
            p.b2 = w2.b;
            p.scales2 = w2.scales;
            p.zp2 = w2.zp_ptr();
        }
        p.skip = skip.map_or(0, ptr_of);
        p.gamma = ptr_of(gamma);
        p.nbias = nbias.map_or(0, ptr_of);
        p.sum_out = sum.map_or(0, mut_ptr_of);
        p.sum_rs = a_rows.map_or(0, |(rs, _)| rs);
        p.eps = self.eps;
        let smem = (call.m * k * w) as u32;
        let mut args = [arg(&mut p)];
        // SAFETY: nq_gemv_*_norm (NQ_THREADS threads, m x K elements of dynamic shared memory)
        // reads the checked views of x, skip, gamma and the norm bias (rows at a_rs, 16-byte
        // aligned), B (and B2), scales, zero points and bias, and writes M x N outputs at the
        // output's row stride and, from block 0, the sum rows at the same stride as x.
        unsafe {
            base.rt
                .launch_cfg(f, grid, (NQ_THREADS, 1, 1), smem, &mut args)?
        };
        Ok(true)
    }

    /// The norm into a workspace, then the product from it.
    fn unfused(
        &self,
        inputs: &[TensorView<'_>],
        x: &TensorView<'_>,
        outputs: &mut [TensorMut<'_>],
    ) -> EpResult<()> {
        let base = &self.base;
        let nin = self.norm_inputs(inputs);
        let types = self.norm.output_types(&nin)?;
        let dense = |shape: &[usize]| -> Vec<usize> {
            let mut st = vec![1; shape.len()];
            for i in (0..shape.len().saturating_sub(1)).rev() {
                st[i] = st[i + 1] * shape[i + 1];
            }
            st
        };
        let device = x.device;
        let (t0, s0) = &types[0];
        let a_strides = dense(s0);
        let numel: usize = s0.iter().product();
        let w = t0.element_size().unwrap_or(4);
        let a_ptr = self.a_ws.get(base, (numel * w).max(1), "normalized rows")?;
        let wants_sum = self.skip && outputs.len() > 1;
        {
            let dev = |p: CuPtr| DevicePtrMut(p as usize as *mut std::ffi::c_void);
            let mut nout = vec![TensorMut::new(dev(a_ptr), *t0, s0, &a_strides, device)];
            let stat_strides: Vec<Vec<usize>> = types.iter().map(|(_, s)| dense(s)).collect();
            if wants_sum {
                let stat_elems: usize = types[1].1.iter().product::<usize>().max(1);
                let sw = types[1].0.element_size().unwrap_or(4);
                let stats = self
                    .stat_ws
                    .get(base, 2 * stat_elems * sw, "norm statistics")?;
                for (i, (t, s)) in types.iter().enumerate().take(3).skip(1) {
                    let off = ((i - 1) * stat_elems * sw) as CuPtr;
                    nout.push(TensorMut::new(
                        dev(stats + off),
                        *t,
                        s,
                        &stat_strides[i],
                        device,
                    ));
                }
                let sum = &outputs[1];
                nout.push(TensorMut::new(
                    sum.ptr,
                    sum.dtype,
                    sum.shape,
                    sum.strides,
                    sum.device,
                ));
            }
            self.norm.execute(&nin, &mut nout)?;
        }
        let a = TensorView::new(
            DevicePtr(a_ptr as usize as *const std::ffi::c_void),
            *t0,
            s0,
            &a_strides,
            device,
        );
        let pin = self.product_inputs(inputs, a);
        self.product.execute(&pin, &mut outputs[..1])
    }
}

impl Kernel for NormNBits {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        let mut types = self
            .product
            .output_types(&self.product_inputs(inputs, *x))?;
        if self.skip && self.base.outputs > 1 {
            types.push((x.dtype, x.shape.to_vec()));
        }
        Ok(types)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let want = self.output_types(inputs)?;
        let given = outputs.len().min(want.len());
        base.outputs_at_least(outputs, 1)?;
        base.expect_outputs(&outputs[..given], &want[..given])?;
        if let Some(g) = base.input(inputs, 2) {
            if g.dtype != x.dtype {
                return Err(
                    base.unsupported(g.dtype, "NormMatMulNBits takes gamma of the input's type")
                );
            }
        }
        if outputs[0].numel() == 0 && given < 2 {
            return Ok(());
        }
        let (first, rest) = outputs.split_at_mut(1);
        let sum = if self.skip { rest.first() } else { None };
        if !(x.numel() > 0 && self.fused(inputs, x, &first[0], sum)?) {
            self.unfused(inputs, x, &mut outputs[..given])?;
            self.unfused_ran.store(true, Ordering::Release);
        }
        if !base.rt.is_capturing() {
            self.warmed.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        // The product's inputs: A (the normalized rows, computed), then its weights and bias
        // at the node's positions.
        let mut product = vec![false];
        product.extend(
            self.positions()
                .iter()
                .map(|p| p.is_some_and(|p| constant.get(p).copied().unwrap_or(false))),
        );
        self.product.set_constant(&product);
    }

    fn capture_support(&self) -> CaptureSupport {
        if !self.warmed.load(Ordering::Acquire) {
            return CaptureSupport::Unsupported {
                reason: format!(
                    "{}: NormMatMulNBits sizes its workspaces on its first eager run; run it \
                     once before capturing",
                    self.base.node
                ),
            };
        }
        if !self.unfused_ran.load(Ordering::Acquire) {
            // The fused kernel alone ran: it needs no workspace and no cuBLASLt algorithm.
            return CaptureSupport::Supported;
        }
        match self.product.capture_support() {
            CaptureSupport::Supported => self.norm.capture_support(),
            other => other,
        }
    }
}

/// A node of `op` with the fused node's name, `inputs` wired (ids are placeholders: kernels
/// read only which are present) and `outputs` outputs.
fn sub_node(fused: &Node, op: &str, domain: &str, inputs: &[bool], outputs: usize) -> Node {
    let ins = inputs
        .iter()
        .enumerate()
        .map(|(i, &p)| p.then_some(ValueId(i)))
        .collect();
    let outs = (0..outputs).map(|i| ValueId(100 + i)).collect();
    Node::new(NodeId(0), op, ins, outs)
        .with_domain(domain)
        .with_name(fused.name.clone())
}

pub fn norm_matmul_nbits(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
) -> EpResult<Box<dyn Kernel>> {
    let nd = req.node;
    let has = |i: usize| nd.inputs.get(i).copied().flatten().is_some();
    let glu = attr_int(nd, "glu")?.unwrap_or(0) != 0;
    if !has(0) || !has(2) || !has(4) || !has(5) || (glu && (!has(8) || !has(9) || has(7))) {
        return Err(EpError::invalid_attribute(
            nd,
            "inputs",
            "NormMatMulNBits takes x, skip?, gamma, bias?, then B, scales, zero points? and \
             bias? (or, with glu, no bias and B2, scales2, zero points 2?)",
        ));
    }
    let skip = has(1);
    let eps = attr_float(nd, "epsilon")?.unwrap_or(1e-5);
    let positions: &[Option<usize>] = if glu { &PRODUCT_GLU } else { &PRODUCT };
    let mut wired = vec![true];
    wired.extend(positions.iter().map(|p| p.is_some_and(has)));
    let (op, domain) = if glu {
        ("MatMulNBitsSiluMul", crate::ops::gemm::INTERNAL_DOMAIN)
    } else {
        ("MatMulNBits", "com.microsoft")
    };
    let mut pnode = sub_node(nd, op, domain, &wired, 1);
    for key in ["K", "N", "bits", "block_size", "accuracy_level"] {
        if let Some(a) = nd.attribute(key) {
            pnode.attributes.insert(key.into(), a.clone());
        }
    }
    let preq = KernelRequest {
        node: &pnode,
        input_shapes: &[],
        opset: 1,
    };
    let product = build_nbits(rt, &preq, glu)?;
    let (nop, ndomain, nwired, nouts) = if skip {
        (
            "SkipSimplifiedLayerNormalization",
            "com.microsoft",
            vec![true, true, true, has(3)],
            4,
        )
    } else {
        ("SimplifiedLayerNormalization", "", vec![true, true], 1)
    };
    if !skip && has(3) {
        return Err(EpError::invalid_attribute(
            nd,
            "inputs",
            "NormMatMulNBits without skip takes no norm bias",
        ));
    }
    let mut nnode = sub_node(nd, nop, ndomain, &nwired, nouts);
    nnode
        .attributes
        .insert("epsilon".into(), Attribute::Float(eps));
    if !skip {
        nnode.attributes.insert("axis".into(), Attribute::Int(-1));
    }
    let nreq = KernelRequest {
        node: &nnode,
        input_shapes: &[],
        opset: 1,
    };
    let norm = crate::ops::norm::rms_norm_kernel(rt, &nreq, skip)?;
    Ok(Box::new(NormNBits {
        base: Base::new(rt, nd),
        product,
        norm,
        skip,
        glu,
        eps,
        a_ws: Workspace::new(rt),
        stat_ws: Workspace::new(rt),
        warmed: AtomicBool::new(false),
        unfused_ran: AtomicBool::new(false),
    }))
}
