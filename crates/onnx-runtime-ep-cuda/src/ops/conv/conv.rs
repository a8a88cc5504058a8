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
//! proposals ([`dnn::TUNE_CANDIDATES`]) and keeps the fastest. A 1-D convolution runs as a
//! 2-D one over a trailing axis of 1; asymmetric pads run as cuDNN's symmetric
//! `min(begin, end)` on an input that a packing pass pads by the difference.
//!
//! `ONNX_RUNTIME_CUDA_CONV_LOG=1` prints each shape's choice (path, timed algorithms) when it
//! is made; `ONNX_RUNTIME_CUDA_CONV_GEMM=0` sends pointwise convolutions to cuDNN too.

use super::dnn::{self, ActDesc, Algo, ConvDesc, Dnn, FilterDesc, TensorDesc, Timer, Types};
use super::fused::Activation;
use super::pointwise::{self, Dims, Engine, Operands};
use super::{
    check_spatial, is_packed, parse_group, ConvGeom, Epilogue, Helpers, Scratch, Src, WindowAttrs,
    CONV_RANK, FLOATS,
};
use crate::ops::common::{mut_ptr_of, ptr_of, Base, OutputTypes};
use crate::ops::gemm::blas::BlasType;
use crate::ops::gemm::shape::Major;
use crate::runtime::{CuPtr, CudaRuntime};
use cudarc::cudnn::sys;
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const ZEROS: [i64; CONV_RANK] = [0; CONV_RANK];

/// Whether cuDNN's fused call worked for a plan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fused {
    Untried,
    Works,
    Fails,
}

/// Whether pointwise convolutions may run as GEMMs (`ONNX_RUNTIME_CUDA_CONV_GEMM=0` says no;
/// read once).
fn gemm_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("ONNX_RUNTIME_CUDA_CONV_GEMM").map_or(true, |v| v.trim() != "0")
    })
}

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

/// cuDNN descriptors, algorithm, path and buffers for one (dtype, X shape, W shape).
struct Plan {
    geom: ConvGeom,
    ty: Types,
    x: TensorDesc,
    w: FilterDesc,
    conv: ConvDesc,
    y: TensorDesc,
    bias: TensorDesc,
    relu: ActDesc,
    identity: ActDesc,
    algos: Vec<Algo<sys::cudnnConvolutionFwdAlgo_t>>,
    current: usize,
    ws: CuPtr,
    /// The input cuDNN reads (ONNX rank): X padded by the asymmetric part of the pads.
    xdims: Vec<usize>,
    /// Where X starts in it, per axis.
    xoff: Vec<i64>,
    padded: bool,
    out: Vec<usize>,
    fused: Fused,
    /// The first eager run (path choice, algorithm timing) is done.
    tuned: bool,
    /// Runs as a cuBLASLt GEMM (a pointwise convolution) rather than on cuDNN.
    gemm: bool,
    /// What the first eager run chose, in words (ONNX_RUNTIME_CUDA_CONV_LOG).
    choice: String,
    /// A constant W packed into `sw`: (the address it was packed from, the packed block).
    w_packed: Option<(CuPtr, CuPtr)>,
    sx: Scratch,
    sw: Scratch,
    sy: Scratch,
}

/// One shape's plan with what the per-call checks need without locking it.
struct Entry {
    dtype: DataType,
    x: Vec<usize>,
    w: Vec<usize>,
    m: usize,
    plan: Arc<Mutex<Plan>>,
}

struct ConvKernel {
    base: Base,
    wa: WindowAttrs,
    group: usize,
    act: Activation,
    /// FusedConv (takes Z) rather than Conv.
    fused_op: bool,
    /// W is a constant initializer (packed once when it needs packing).
    w_const: bool,
    dnn: Arc<Dnn>,
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
        if Types::of(dtype).is_none() {
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
    fn engine(&self) -> Result<&Engine, &str> {
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
        let ty = Types::of(dtype)
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
        })
    }
}

/// The operands of one call, resolved to device addresses.
struct Call<'a> {
    x: CuPtr,
    w: CuPtr,
    y: CuPtr,
    bias: Option<(CuPtr, usize)>,
    z: Option<&'a TensorView<'a>>,
}

impl Plan {
    fn algo(&self) -> Algo<sys::cudnnConvolutionFwdAlgo_t> {
        self.algos[self.current]
    }

    /// Makes algorithm `i` the current one: its math type and a workspace it fits in.
    fn select(&mut self, k: &ConvKernel, i: usize) -> EpResult<()> {
        self.current = i;
        let a = self.algo();
        self.conv.set_math(a.math)?;
        self.ws = k.dnn.workspace(&k.base.rt, a.workspace)?;
        Ok(())
    }

    /// Moves to the next algorithm after `current` failed at run time (eagerly only).
    fn next_algo(&mut self, k: &ConvKernel, failure: EpError) -> EpResult<()> {
        if k.base.rt.is_capturing() || self.current + 1 >= self.algos.len() {
            return Err(failure);
        }
        self.select(k, self.current + 1)
    }

    /// One `cudnnConvolutionForward` into `c.y` with algorithm `a` (the descriptor's math type
    /// already set for it) and workspace `ws` of at least `a.workspace` bytes.
    fn forward_with(
        &self,
        k: &ConvKernel,
        c: &Call<'_>,
        a: Algo<sys::cudnnConvolutionFwdAlgo_t>,
        ws: CuPtr,
    ) -> EpResult<()> {
        let scale = self.ty.scale(1.0, 0.0);
        k.base.rt.bind_thread()?;
        let status = {
            let h = k.dnn.lock();
            // SAFETY: the descriptors describe the packed buffers `c.x`, `c.w`, `c.y`
            // (sizes from the plan's shapes); the workspace holds `a.workspace` bytes.
            unsafe {
                sys::cudnnConvolutionForward(
                    h.0,
                    scale.alpha(),
                    self.x.0,
                    dnn::dptr(c.x),
                    self.w.0,
                    dnn::dptr(c.w),
                    self.conv.0,
                    a.algo,
                    dnn::dptr_mut(ws),
                    a.workspace,
                    scale.beta(),
                    self.y.0,
                    dnn::dptr_mut(c.y),
                )
            }
        };
        if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return Ok(());
        }
        dnn::check(status, &format!("cudnnConvolutionForward ({:?})", a.algo))
    }

    /// `cudnnConvolutionForward` into `c.y`, falling back to the next algorithm when one
    /// refuses at run time.
    fn forward(&mut self, k: &ConvKernel, c: &Call<'_>) -> EpResult<()> {
        loop {
            match self.forward_with(k, c, self.algo(), self.ws) {
                Ok(()) => return Ok(()),
                Err(e) => self.next_algo(k, e)?,
            }
        }
    }

    /// Times the heuristics' first proposals on this call's operands (the first eager run
    /// of the shape) and selects the fastest; the heuristics' first when timing fails.
    fn tune(&mut self, k: &ConvKernel, c: &Call<'_>) {
        let rt = &k.base.rt;
        let candidates: Vec<usize> = (0..self.algos.len())
            .filter(|&i| self.algos[i].proposed)
            .take(dnn::TUNE_CANDIDATES)
            .collect();
        let first = algo_name(self.algos[0].algo);
        if candidates.len() <= 1 {
            self.choice = format!("cuDNN {first} (the only proposal)");
            return;
        }
        let timer = match Timer::new(rt) {
            Ok(t) => t,
            Err(e) => {
                self.choice = format!("cuDNN {first} (heuristic; no timer: {e})");
                return;
            }
        };
        let cap = dnn::TUNE_WORKSPACE_CAP.max(self.algos[0].workspace);
        let mut best: Option<(usize, f64)> = None;
        let mut notes = Vec::new();
        for i in candidates {
            let a = self.algos[i];
            let name = algo_name(a.algo);
            if i > 0 && a.workspace > cap {
                notes.push(format!(
                    "{name} skipped ({} MiB workspace)",
                    a.workspace >> 20
                ));
                continue;
            }
            let timed = self.conv.set_math(a.math).and_then(|()| {
                let ws = k.dnn.workspace(rt, a.workspace)?;
                timer.time(rt, dnn::TUNE_REPS, || self.forward_with(k, c, a, ws))
            });
            match timed {
                Ok(us) => {
                    notes.push(format!("{name} {us:.1} us"));
                    if best.is_none_or(|b| us < b.1) {
                        best = Some((i, us));
                    }
                }
                Err(e) => notes.push(format!("{name} failed ({e})")),
            }
        }
        let chosen = best.map_or(0, |b| b.0);
        match self.select(k, chosen) {
            Ok(()) => {
                self.choice = format!(
                    "cuDNN {} (timed: {})",
                    algo_name(self.algo().algo),
                    notes.join(", ")
                );
            }
            Err(e) => {
                // Back to the heuristics' first; a failure there surfaces on the call.
                let _ = self.select(k, 0);
                self.choice = format!("cuDNN {first} (selecting the fastest failed: {e})");
            }
        }
    }

    /// `cudnnConvolutionBiasActivationForward`: `y = act(conv + z + bias)` in one call.
    fn forward_fused(&mut self, k: &ConvKernel, c: &Call<'_>, z: Option<CuPtr>) -> EpResult<()> {
        let a = self.algo();
        let scale = self.ty.scale(1.0, if z.is_some() { 1.0 } else { 0.0 });
        let act = if k.act == Activation::Relu {
            &self.relu
        } else {
            &self.identity
        };
        let bias = c.bias.map_or(0, |b| b.0);
        k.base.rt.bind_thread()?;
        let h = k.dnn.lock();
        // SAFETY: as in `forward`; Z (or Y, scaled by 0) has Y's packed shape and the bias
        // holds M packed values.
        let status = unsafe {
            sys::cudnnConvolutionBiasActivationForward(
                h.0,
                scale.alpha(),
                self.x.0,
                dnn::dptr(c.x),
                self.w.0,
                dnn::dptr(c.w),
                self.conv.0,
                a.algo,
                dnn::dptr_mut(self.ws),
                a.workspace,
                scale.beta(),
                self.y.0,
                dnn::dptr(z.unwrap_or(c.y)),
                self.bias.0,
                dnn::dptr(bias),
                act.0,
                self.y.0,
                dnn::dptr_mut(c.y),
            )
        };
        if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return Ok(());
        }
        dnn::check(status, "cudnnConvolutionBiasActivationForward")
    }

    /// W packed (contiguous); a constant W is packed once per address.
    fn packed_w(&mut self, k: &ConvKernel, h: &Helpers, w: &TensorView<'_>) -> EpResult<CuPtr> {
        let base = &k.base;
        let width = w.dtype.element_size().unwrap_or(4);
        let p = self.sw.get(base, w.numel() * width, "packed weights")?;
        let src = ptr_of(w);
        if k.w_const && self.w_packed == Some((src, p)) {
            return Ok(p);
        }
        h.pack(
            base,
            src,
            w.shape,
            w.strides,
            &ZEROS[..w.rank()],
            w.shape,
            p,
        )?;
        self.w_packed = Some((src, p));
        Ok(p)
    }

    /// The first eager run of the shape: a pointwise convolution tries the GEMM, others (and
    /// a GEMM cuBLASLt refuses) time cuDNN's proposals.
    #[allow(clippy::too_many_arguments)]
    fn first_run(
        &mut self,
        k: &ConvKernel,
        h: &Helpers,
        x: &TensorView<'_>,
        w: &TensorView<'_>,
        bias: Option<&TensorView<'_>>,
        z: Option<&TensorView<'_>>,
        out: &TensorMut<'_>,
    ) -> EpResult<()> {
        self.tuned = true;
        let mut note = String::new();
        if pointwise::eligible(&self.geom) && gemm_enabled() {
            match k.engine() {
                Ok(engine) => {
                    match self.run_gemm(k, engine, h, x, w, bias, z, out, log_choices()) {
                        Ok(desc) => {
                            self.gemm = true;
                            self.choice = desc;
                            self.log(k, x, w);
                            return Ok(());
                        }
                        Err(e) => note = format!("cuBLASLt refused the GEMM ({e}); "),
                    }
                }
                Err(e) => note = format!("cuBLASLt unusable ({e}); "),
            }
        }
        let result = self.run_dnn(k, h, x, w, bias, z, out, true);
        self.choice = format!("{note}{}", self.choice);
        self.log(k, x, w);
        result
    }

    fn log(&self, k: &ConvKernel, x: &TensorView<'_>, w: &TensorView<'_>) {
        if log_choices() {
            eprintln!(
                "{}: {} {} X {:?} W {:?}: {}",
                k.base.node, k.base.op, x.dtype, x.shape, w.shape, self.choice
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        k: &ConvKernel,
        h: &Helpers,
        x: &TensorView<'_>,
        w: &TensorView<'_>,
        bias: Option<&TensorView<'_>>,
        z: Option<&TensorView<'_>>,
        out: &TensorMut<'_>,
    ) -> EpResult<()> {
        if !self.tuned && !k.base.rt.is_capturing() {
            return self.first_run(k, h, x, w, bias, z, out);
        }
        if self.gemm {
            let engine = k.engine().map_err(|e| {
                k.base
                    .err(format!("internal: the GEMM path lost cuBLASLt ({e})"))
            })?;
            return self
                .run_gemm(k, engine, h, x, w, bias, z, out, false)
                .map(|_| ());
        }
        self.run_dnn(k, h, x, w, bias, z, out, false)
    }

    /// The pointwise convolution as one strided-batched GEMM, then the epilogue where a bias,
    /// an activation, an unpacked Z or a strided output asks for it. Returns the path in
    /// words when `describe`.
    #[allow(clippy::too_many_arguments)]
    fn run_gemm(
        &mut self,
        k: &ConvKernel,
        engine: &Engine,
        h: &Helpers,
        x: &TensorView<'_>,
        w: &TensorView<'_>,
        bias: Option<&TensorView<'_>>,
        z: Option<&TensorView<'_>>,
        out: &TensorMut<'_>,
        describe: bool,
    ) -> EpResult<String> {
        let base = &k.base;
        let dtype = x.dtype;
        let ty = BlasType::of(dtype)
            .ok_or_else(|| base.unsupported(dtype, "not a float type cuBLASLt multiplies"))?;
        let width = dtype.element_size().unwrap_or(4);
        let r = x.rank();
        let (n, c, m) = (self.geom.n, self.geom.c, self.geom.m);
        // X' = X at the convolution's strides: [N, C, out spatial...].
        let mut xs = [0usize; CONV_RANK];
        let mut xst = [0i64; CONV_RANK];
        xs[..r].copy_from_slice(&self.out[..r]);
        xs[1] = c;
        for (i, st) in xst.iter_mut().enumerate().take(r) {
            let s = if i >= 2 {
                self.geom.win.strides[i - 2]
            } else {
                1
            };
            *st = (x.strides[i] * s) as i64;
        }
        let (xs, xst) = (&xs[..r], &xst[..r]);
        let p: usize = xs[2..].iter().product();
        let (xp, x_major, x_batch, x_how) = match pointwise::mat_view(xs, xst) {
            Some((mj, b)) => (ptr_of(x), mj, b, "read in place"),
            None => {
                let bytes = n * c * p * width;
                let dst = self.sx.get(base, bytes, "packed input")?;
                let mut src_strides = [0usize; CONV_RANK];
                for (d, &s) in src_strides.iter_mut().zip(xst) {
                    *d = s as usize;
                }
                h.pack(base, ptr_of(x), xs, &src_strides[..r], &ZEROS[..r], xs, dst)?;
                let batch = if n > 1 { (c * p) as i64 } else { 0 };
                (dst, Major::Row(p.max(1) as i64), batch, "packed")
            }
        };
        let (wp, w_major) = match pointwise::w_view(w.shape, w.strides) {
            Some(mj) => (ptr_of(w), mj),
            None => (self.packed_w(k, h, w)?, Major::Row(c.max(1) as i64)),
        };
        let out_packed = is_packed(out.shape, out.strides);
        let d = if out_packed {
            mut_ptr_of(out)
        } else {
            self.sy
                .get(base, self.out.iter().product::<usize>() * width, "output")?
        };
        let z_in = z
            .filter(|z| out_packed && is_packed(z.shape, z.strides))
            .map(ptr_of);
        let ops = Operands {
            x: xp,
            x_major,
            x_batch,
            w: wp,
            w_major,
            d,
            z: z_in,
        };
        engine.run(base, ty, Dims { n, c, m, p }, &ops, width)?;
        let z_post = if z_in.is_some() { None } else { z };
        let epilogue =
            bias.is_some() || z_post.is_some() || k.act != Activation::None || !out_packed;
        if epilogue {
            h.finish(
                base,
                &Epilogue {
                    dims: out.shape,
                    dst: mut_ptr_of(out),
                    dst_strides: out.strides,
                    src: Some(Src {
                        ptr: d,
                        dims: &self.out,
                        off: &ZEROS[..r],
                    }),
                    bias: bias.map(|b| (ptr_of(b), vector_stride(b).unwrap_or(1))),
                    z: z_post.map(|z| (ptr_of(z), z.strides)),
                    act: k.act,
                },
            )?;
        }
        if !describe {
            return Ok(String::new());
        }
        let layout = |mj: Major| match mj {
            Major::Row(ld) => format!("row-major ld {ld}"),
            Major::Col(ld) => format!("column-major ld {ld}"),
        };
        Ok(format!(
            "cuBLASLt GEMM {ty:?} [{m}x{c}] @ [{c}x{p}] x {n} images (X {x_how}, {}; W {}; \
             Z {}; {})",
            layout(x_major),
            layout(w_major),
            match (z, z_in) {
                (None, _) => "none",
                (Some(_), Some(_)) => "as C",
                (Some(_), None) => "in the epilogue",
            },
            if epilogue {
                "one epilogue pass"
            } else {
                "no epilogue"
            }
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn run_dnn(
        &mut self,
        k: &ConvKernel,
        h: &Helpers,
        x: &TensorView<'_>,
        w: &TensorView<'_>,
        bias: Option<&TensorView<'_>>,
        z: Option<&TensorView<'_>>,
        out: &TensorMut<'_>,
        tune: bool,
    ) -> EpResult<()> {
        let base = &k.base;
        let width = x.dtype.element_size().unwrap_or(4);
        let xp = if !self.padded && is_packed(x.shape, x.strides) {
            ptr_of(x)
        } else {
            let bytes = self.xdims.iter().product::<usize>() * width;
            let p = self.sx.get(base, bytes, "padded input")?;
            h.pack(
                base,
                ptr_of(x),
                x.shape,
                x.strides,
                &self.xoff,
                &self.xdims,
                p,
            )?;
            p
        };
        let wp = if is_packed(w.shape, w.strides) {
            ptr_of(w)
        } else {
            self.packed_w(k, h, w)?
        };
        let out_packed = is_packed(out.shape, out.strides);
        let yp = if out_packed {
            mut_ptr_of(out)
        } else {
            let bytes = self.out.iter().product::<usize>() * width;
            self.sy.get(base, bytes, "output")?
        };
        let call = Call {
            x: xp,
            w: wp,
            y: yp,
            bias: bias.map(|b| (ptr_of(b), vector_stride(b).unwrap_or(1))),
            z,
        };
        if tune {
            self.tune(k, &call);
        }
        let capturing = base.rt.is_capturing();
        let z_packed = call.z.is_none_or(|z| is_packed(z.shape, z.strides));
        let fusable = k.act.cudnn_fusable()
            && call.bias.is_some_and(|b| b.1 == 1 || self.out[1] == 1)
            && z_packed
            && (k.act == Activation::Relu
                || self.algo().algo
                    == sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
            && match self.fused {
                Fused::Works => true,
                Fused::Untried => !capturing,
                Fused::Fails => false,
            };
        let r = out.rank();
        if fusable {
            match self.forward_fused(k, &call, call.z.map(ptr_of)) {
                Ok(()) => {
                    self.fused = Fused::Works;
                    if !out_packed {
                        // Only the strided store is left.
                        h.finish(
                            base,
                            &Epilogue {
                                dims: out.shape,
                                dst: mut_ptr_of(out),
                                dst_strides: out.strides,
                                src: Some(Src {
                                    ptr: yp,
                                    dims: &self.out,
                                    off: &ZEROS[..r],
                                }),
                                bias: None,
                                z: None,
                                act: Activation::None,
                            },
                        )?;
                    }
                    return Ok(());
                }
                Err(e) if capturing => return Err(e),
                Err(_) => self.fused = Fused::Fails,
            }
        }
        self.forward(k, &call)?;
        if call.bias.is_some() || call.z.is_some() || k.act != Activation::None || !out_packed {
            h.finish(
                base,
                &Epilogue {
                    dims: out.shape,
                    dst: mut_ptr_of(out),
                    dst_strides: out.strides,
                    src: Some(Src {
                        ptr: yp,
                        dims: &self.out,
                        off: &ZEROS[..r],
                    }),
                    bias: call.bias,
                    z: call.z.map(|z| (ptr_of(z), z.strides)),
                    act: k.act,
                },
            )?;
        }
        Ok(())
    }

    fn release(&self, base: &Base) {
        self.sx.release(base);
        self.sw.release(base);
        self.sy.release(base);
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
