//! Conv and com.microsoft FusedConv on cuBLASLt (pointwise convolutions) and cuDNN's forward
//! convolution (the rest).
//!
//! `Y = act(conv(X, W) + B + Z)`. A pointwise convolution (kernel 1 everywhere, no pads, one
//! group, any strides and rank) is one strided-batched GEMM per call ([`super::pointwise`]),
//! with Z entering the product and the bias and activation in one epilogue pass. Others run
//! on cuDNN: with a bias, identity or ReLU, packed operands and an algorithm that allows it,
//! the whole expression is one `cudnnConvolutionBiasActivationForward` call; otherwise
//! `cudnnConvolutionForward` writes the output and one epilogue pass adds the bias and Z and
//! applies the activation. The first eager run of a shape times the heuristics' first
//! proposals ([`super::algo::TUNE_CANDIDATES`]) and keeps the fastest. A 1-D convolution runs as a
//! 2-D one over a trailing axis of 1; asymmetric pads run as cuDNN's symmetric
//! `min(begin, end)` on an input that a packing pass pads by the difference.
//!
//! The timed candidates include the backend (graph) API's engines ([`super::graph_plan`]);
//! a chosen graph plan runs the convolution and the same epilogue pass adds bias, Z and the
//! activation.
//!
//! `ONNX_RUNTIME_CUDA_CONV_LOG=1` prints each shape's choice (path, timed algorithms and
//! engines, why the backend API was passed over) when it is made;
//! `ONNX_RUNTIME_CUDA_CONV_GEMM=0` sends pointwise convolutions to cuDNN too;
//! `ONNX_RUNTIME_CUDA_CONV_BACKEND=0` keeps to the legacy API, `=force` to the backend one
//! wherever it builds.
//!
//! This module holds the kernel (checks, the per-shape plan cache, registration); the plan
//! of one shape and its GEMM / cuDNN run paths are in [`super::plan`].

use super::dnn::{self, ActDesc, ConvDesc, Dnn, FilterDesc, TensorDesc, Types};
use super::fused::Activation;
use super::plan::{Fused, Plan};
use super::pointwise::Engine;
use super::{
    check_spatial, parse_group, ConvGeom, Epilogue, Helpers, Scratch, WindowAttrs, FLOATS,
};
use crate::ops::common::{mut_ptr_of, ptr_of, Base, OutputTypes};
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Whether to print each shape's choice (`ONNX_RUNTIME_CUDA_CONV_LOG=1`; read when a choice
/// is made, once per shape).
pub(super) fn log_choices() -> bool {
    std::env::var("ONNX_RUNTIME_CUDA_CONV_LOG").is_ok_and(|v| v.trim() == "1")
}

/// A cuDNN algorithm's name without the enum's prefix.
pub(super) fn algo_name<A: std::fmt::Debug>(a: A) -> String {
    let s = format!("{a:?}");
    for prefix in [
        "CUDNN_CONVOLUTION_FWD_ALGO_",
        "CUDNN_CONVOLUTION_BWD_DATA_ALGO_",
    ] {
        if let Some(rest) = s.strip_prefix(prefix) {
            return rest.to_string();
        }
    }
    s
}

/// One shape's plan with what the per-call checks need without locking it.
struct Entry {
    dtype: DataType,
    x: Vec<usize>,
    w: Vec<usize>,
    m: usize,
    plan: Arc<Mutex<Plan>>,
}
pub(super) struct ConvKernel {
    pub(super) base: Base,
    wa: WindowAttrs,
    group: usize,
    pub(super) act: Activation,
    /// FusedConv (takes Z) rather than Conv.
    fused_op: bool,
    /// W is a constant initializer (packed once when it needs packing).
    pub(super) w_const: bool,
    pub(super) dnn: Arc<Dnn>,
    helpers: HashMap<DataType, Helpers>,
    /// Looked up by a scan comparing shapes, so a call allocates nothing.
    plans: Mutex<Vec<Entry>>,
    /// cuBLASLt for pointwise convolutions, made on the first one (the error text when the
    /// library is unusable: those run on cuDNN).
    engine: OnceLock<Result<Engine, String>>,
    warmed: AtomicBool,
}

/// A 1-D convolution's shapes as 2-D ones (a trailing axis of 1); others unchanged.
pub(super) fn as_cudnn(v: &[usize], spatial: usize, fill: usize) -> Vec<usize> {
    let mut v = v.to_vec();
    if spatial == 1 {
        v.push(fill);
    }
    v
}

/// The stride between consecutive values of a tensor holding `m` values along one axis
/// (B of shape [M], or [1, M, 1] and the like), or None when it is not one axis.
pub(super) fn vector_stride(v: &TensorView<'_>) -> Option<usize> {
    if v.numel() <= 1 {
        return Some(0);
    }
    let axes = (0..v.rank()).filter(|&k| v.shape[k] != 1);
    let mut found = None;
    for k in axes {
        if found.is_some() {
            return None;
        }
        found = Some(v.strides[k]);
    }
    found
}
impl ConvKernel {
    /// Dtype, geometry and the optional inputs' checks shared by `output_types` and
    /// `execute`.
    fn validate(&self, inputs: &[TensorView<'_>]) -> EpResult<(DataType, ConvGeom)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let dtype = x.dtype;
        if Types::of(dtype, false).is_none() {
            return Err(base.unsupported(
                dtype,
                "the CUDA convolutions take float32, float64, float16 and bfloat16",
            ));
        }
        check_spatial(base, dtype, x.rank())?;
        let g = ConvGeom::new(base, &self.wa, self.group, x.shape, w.shape)?;
        self.check_extras(inputs, dtype, g.m, &g.out_shape())?;
        Ok((dtype, g))
    }

    /// W, B and Z against X's dtype, M output channels and the output shape `out`.
    fn check_extras(
        &self,
        inputs: &[TensorView<'_>],
        dtype: DataType,
        m: usize,
        out: &[usize],
    ) -> EpResult<()> {
        let base = &self.base;
        let extra = [base.input(inputs, 1), base.input(inputs, 2), self.z(inputs)];
        for t in extra.into_iter().flatten() {
            if t.dtype != dtype {
                return Err(base.err(format!("inputs mix {dtype} and {}", t.dtype)));
            }
        }
        if let Some(b) = base.input(inputs, 2) {
            if b.numel() != m {
                return Err(base.err(format!("B has {} values; want M={m}", b.numel())));
            }
            if vector_stride(b).is_none() {
                return Err(base.err(format!(
                    "B of shape {:?} must hold its {m} values along one axis",
                    b.shape
                )));
            }
        }
        if let Some(z) = self.z(inputs) {
            if z.shape != out {
                return Err(base.err(format!(
                    "Z has shape {:?}; it must have the output's shape {out:?}",
                    z.shape
                )));
            }
        }
        Ok(())
    }

    fn z<'a, 'b>(&self, inputs: &'b [TensorView<'a>]) -> Option<&'b TensorView<'a>> {
        if self.fused_op {
            self.base.input(inputs, 3)
        } else {
            None
        }
    }

    /// The cuBLASLt engine, made on first use (eagerly: the first pointwise run of a shape).
    pub(super) fn engine(&self) -> Result<&Engine, &str> {
        self.engine
            .get_or_init(|| Engine::new(&self.base.rt).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|s| s.as_str())
    }

    /// The plan made for these shapes, with its M and output shape (no allocation).
    fn find_plan(
        &self,
        dtype: DataType,
        x: &[usize],
        w: &[usize],
    ) -> Option<(usize, Arc<Mutex<Plan>>)> {
        let plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        plans
            .iter()
            .find(|e| e.dtype == dtype && e.x == x && e.w == w)
            .map(|e| (e.m, e.plan.clone()))
    }

    /// The plan for these shapes: made on first use (outside capture).
    fn plan(
        &self,
        dtype: DataType,
        g: &ConvGeom,
        x: &[usize],
        w: &[usize],
    ) -> EpResult<Arc<Mutex<Plan>>> {
        if let Some((_, p)) = self.find_plan(dtype, x, w) {
            return Ok(p);
        }
        if self.base.rt.is_capturing() {
            return Err(EpError::Capture {
                node: self.base.node.clone(),
                message: format!(
                    "{} chooses its algorithm on the first eager run of each input shape; X \
                     {x:?} with W {w:?} was not run eagerly: run it once before capturing",
                    self.base.op
                ),
            });
        }
        let plan = Arc::new(Mutex::new(self.make_plan(dtype, g, w)?));
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = plans
            .iter()
            .find(|e| e.dtype == dtype && e.x == x && e.w == w)
        {
            return Ok(e.plan.clone());
        }
        plans.push(Entry {
            dtype,
            x: x.to_vec(),
            w: w.to_vec(),
            m: g.m,
            plan: plan.clone(),
        });
        Ok(plan)
    }

    fn make_plan(&self, dtype: DataType, g: &ConvGeom, w: &[usize]) -> EpResult<Plan> {
        let base = &self.base;
        let ty = Types::of(dtype, base.rt.tf32())
            .ok_or_else(|| base.unsupported(dtype, "not a float type cuDNN convolves"))?;
        let win = &g.win;
        let r = win.input.len();
        let sym: Vec<usize> = (0..r)
            .map(|i| win.pad_begin[i].min(win.pad_end[i]))
            .collect();
        let mut xdims = vec![g.n, g.c];
        let mut xoff = vec![0i64, 0];
        for (i, &p) in sym.iter().enumerate() {
            xdims.push(win.input[i] + win.pad_begin[i] + win.pad_end[i] - 2 * p);
            xoff.push((win.pad_begin[i] - p) as i64);
        }
        let padded = xoff.iter().any(|&o| o != 0) || xdims[2..] != win.input[..];
        let out = g.out_shape();
        let xd = TensorDesc::new(ty.data, &as_cudnn(&xdims, r, 1))?;
        let wd = FilterDesc::new(ty.data, &as_cudnn(w, r, 1))?;
        let conv = ConvDesc::new(
            &as_cudnn(&sym, r, 0),
            &as_cudnn(&win.strides, r, 1),
            &as_cudnn(&win.dilations, r, 1),
            g.group,
            ty,
        )?;
        let ydims = as_cudnn(&out, r, 1);
        let cudnn_out = dnn::forward_output_dims(&conv, &xd, &wd, ydims.len())?;
        if cudnn_out != ydims {
            return Err(base.err(format!(
                "internal: cuDNN computes output {cudnn_out:?} where the ONNX rules give \
                 {ydims:?} (input {xdims:?}, W {w:?}, window {win:?})"
            )));
        }
        let yd = TensorDesc::new(ty.data, &ydims)?;
        let mut bdims = vec![1; ydims.len()];
        bdims[1] = g.m;
        let bias = TensorDesc::new(ty.data, &bdims)?;
        let algos = self.dnn.forward_algos(&xd, &wd, &conv, &yd, ty)?;
        let Some(first) = algos.first().copied() else {
            return Err(base.unsupported(
                dtype,
                format!(
                    "cuDNN {} has no forward algorithm for X {xdims:?}, W {w:?}, strides {:?}, \
                     dilations {:?}, group {}",
                    self.dnn.version, win.strides, win.dilations, g.group
                ),
            ));
        };
        let ws = self.dnn.workspace(&base.rt, first.workspace)?;
        Ok(Plan {
            geom: g.clone(),
            ty,
            x: xd,
            w: wd,
            conv,
            y: yd,
            bias,
            relu: ActDesc::new(true)?,
            identity: ActDesc::new(false)?,
            algos,
            current: 0,
            ws,
            xdims,
            xoff,
            padded,
            out,
            fused: Fused::Untried,
            tuned: false,
            gemm: false,
            choice: String::new(),
            w_packed: None,
            sx: Scratch::new(),
            sw: Scratch::new(),
            sy: Scratch::new(),
            graph: None,
            graph_ws: 0,
        })
    }
}

impl Kernel for ConvKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (dtype, g) = self.validate(inputs)?;
        Ok(vec![(dtype, g.out_shape())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let dtype = x.dtype;
        let bias = base.input(inputs, 2);
        let z = self.z(inputs);
        let h = self
            .helpers
            .get(&dtype)
            .ok_or_else(|| base.unsupported(dtype, "no epilogue kernels for this dtype"))?;
        // A shape seen before: its plan holds the geometry (no re-derivation, no allocation).
        if let Some((m, plan)) = self.find_plan(dtype, x.shape, w.shape) {
            let mut plan = plan.lock().unwrap_or_else(|e| e.into_inner());
            self.check_extras(inputs, dtype, m, &plan.out)?;
            let ok = outputs
                .first()
                .is_some_and(|o| o.dtype == dtype && o.shape == plan.out.as_slice());
            if !ok {
                base.expect_outputs(outputs, &[(dtype, plan.out.clone())])?;
            }
            return plan.run(self, h, x, w, bias, z, &outputs[0]);
        }
        let (dtype, g) = self.validate(inputs)?;
        let out_shape = g.out_shape();
        base.expect_outputs(outputs, &[(dtype, out_shape.clone())])?;
        let out = &outputs[0];
        if out.numel() == 0 {
            return Ok(());
        }
        if x.numel() == 0 || w.numel() == 0 {
            // No input channels or an empty input: every product is zero (or padding).
            h.finish(
                base,
                &Epilogue {
                    dims: out.shape,
                    dst: mut_ptr_of(out),
                    dst_strides: out.strides,
                    src: None,
                    bias: bias.map(|b| (ptr_of(b), vector_stride(b).unwrap_or(1))),
                    z: z.map(|z| (ptr_of(z), z.strides)),
                    act: self.act,
                },
            )?;
            self.warmed.store(true, Ordering::Release);
            return Ok(());
        }
        let plan = self.plan(dtype, &g, x.shape, w.shape)?;
        let mut plan = plan.lock().unwrap_or_else(|e| e.into_inner());
        plan.run(self, h, x, w, bias, z, out)?;
        if !base.rt.is_capturing() {
            self.warmed.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn capture_support(&self) -> CaptureSupport {
        if self.warmed.load(Ordering::Acquire) {
            CaptureSupport::Supported
        } else {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: {} chooses its algorithm and workspace on its first eager run; run it \
                     once before capturing",
                    self.base.node, self.base.op
                ),
            }
        }
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.w_const = constant.get(1).copied().unwrap_or(false);
    }
}

impl Drop for ConvKernel {
    fn drop(&mut self) {
        for e in self
            .plans
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            e.plan
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .release(&self.base);
        }
    }
}

fn build(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    fused_op: bool,
) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let wa = WindowAttrs::parse(node)?;
    let group = parse_group(node)?;
    let act = if fused_op {
        Activation::parse(node)?
    } else {
        Activation::None
    };
    let base = Base::new(rt, node);
    let dnn = Dnn::get(rt)?;
    let mut helpers = HashMap::new();
    for (dtype, _) in FLOATS {
        helpers.insert(dtype, Helpers::load(&base, dtype)?);
    }
    Ok(Box::new(ConvKernel {
        base,
        wa,
        group,
        act,
        fused_op,
        w_const: false,
        dnn,
        helpers,
        plans: Mutex::new(Vec::new()),
        engine: OnceLock::new(),
        warmed: AtomicBool::new(false),
    }))
}

pub fn build_conv(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, false)
}

pub fn build_fused(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, true)
}
