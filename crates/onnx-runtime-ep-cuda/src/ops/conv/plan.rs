//! The plan of one (dtype, X shape, W shape) of Conv / FusedConv: cuDNN's descriptors, the
//! algorithms and the chosen one, workspace and scratch buffers; and its run paths: the first
//! eager run (the pointwise GEMM tried first, else cuDNN's proposals timed), the pointwise
//! convolution as one cuBLASLt GEMM, and cuDNN's forward convolution (fused with bias and
//! activation where it can be), each followed by the epilogue pass when needed.

use super::algo::{self, Algo, Timer};
use super::conv::{algo_name, log_choices, vector_stride, ConvKernel};
use super::dnn::{self, ActDesc, ConvDesc, FilterDesc, TensorDesc, Types};
use super::fused::Activation;
use super::graph_plan::{self, Candidate};
use super::pointwise::{self, Dims, Engine, Operands};
use super::{is_packed, ConvGeom, Epilogue, Helpers, Scratch, Src, CONV_RANK};
use crate::ops::common::{mut_ptr_of, ptr_of, Base};
use crate::ops::gemm::blas::BlasType;
use crate::ops::gemm::shape::Major;
use crate::runtime::CuPtr;
use cudarc::cudnn::sys;
use onnx_runtime_ep_api::{EpError, EpResult, TensorMut, TensorView};
use std::sync::OnceLock;

const ZEROS: [i64; CONV_RANK] = [0; CONV_RANK];

/// Whether cuDNN's fused call worked for a plan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Fused {
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

/// cuDNN descriptors, algorithm, path and buffers for one (dtype, X shape, W shape).
pub(super) struct Plan {
    pub(super) geom: ConvGeom,
    pub(super) ty: Types,
    pub(super) x: TensorDesc,
    pub(super) w: FilterDesc,
    pub(super) conv: ConvDesc,
    pub(super) y: TensorDesc,
    pub(super) bias: TensorDesc,
    pub(super) relu: ActDesc,
    pub(super) identity: ActDesc,
    pub(super) algos: Vec<Algo<sys::cudnnConvolutionFwdAlgo_t>>,
    pub(super) current: usize,
    pub(super) ws: CuPtr,
    /// The input cuDNN reads (ONNX rank): X padded by the asymmetric part of the pads.
    pub(super) xdims: Vec<usize>,
    /// Where X starts in it, per axis.
    pub(super) xoff: Vec<i64>,
    pub(super) padded: bool,
    pub(super) out: Vec<usize>,
    pub(super) fused: Fused,
    /// The first eager run (path choice, algorithm timing) is done.
    pub(super) tuned: bool,
    /// Runs as a cuBLASLt GEMM (a pointwise convolution) rather than on cuDNN.
    pub(super) gemm: bool,
    /// What the first eager run chose, in words (ONNX_RUNTIME_CUDA_CONV_LOG).
    pub(super) choice: String,
    /// A constant W packed into `sw`: (the address it was packed from, the packed block).
    pub(super) w_packed: Option<(CuPtr, CuPtr)>,
    pub(super) sx: Scratch,
    pub(super) sw: Scratch,
    pub(super) sy: Scratch,
    /// The backend-API (graph) plan the first eager run chose over the legacy algorithms,
    /// with its workspace (the legacy algorithm stays selected as the fallback for calls
    /// whose pointers the graph's alignment does not allow).
    pub(super) graph: Option<Candidate>,
    pub(super) graph_ws: CuPtr,
}
/// The operands of one call, resolved to device addresses.
pub(super) struct Call<'a> {
    pub(super) x: CuPtr,
    pub(super) w: CuPtr,
    pub(super) y: CuPtr,
    pub(super) bias: Option<(CuPtr, usize)>,
    pub(super) z: Option<&'a TensorView<'a>>,
}

/// A timed candidate of the first eager run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Which {
    Legacy(usize),
    Graph(usize),
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
        if self.graph.is_some() && graph_plan::aligned(c) {
            match self.graph_forward(k, c) {
                Ok(()) => return Ok(()),
                Err(e) if k.base.rt.is_capturing() => return Err(e),
                Err(e) => self.drop_graph(k, &e),
            }
        }
        loop {
            match self.forward_with(k, c, self.algo(), self.ws) {
                Ok(()) => return Ok(()),
                Err(e) => self.next_algo(k, e)?,
            }
        }
    }

    /// Times the heuristics' first proposals on this call's operands (the first eager run
    /// of the shape): the legacy API's first [`algo::TUNE_CANDIDATES`] and the backend API's
    /// first [`graph_plan::GRAPH_CANDIDATES`] plans, and selects the fastest; the legacy
    /// heuristics' first when timing fails. A shape the backend API cannot plan runs on the
    /// legacy algorithms (the reason is in the log).
    fn tune(&mut self, k: &ConvKernel, c: &Call<'_>) {
        let rt = &k.base.rt;
        let (mut graphs, graph_note) = self.graph_candidates(k, c);
        let note = if graph_note.is_empty() {
            String::new()
        } else {
            format!("; backend: {graph_note}")
        };
        let force = graph_plan::mode() == graph_plan::Mode::Force && !graphs.is_empty();
        let legacy: Vec<usize> = if force {
            Vec::new()
        } else {
            (0..self.algos.len())
                .filter(|&i| self.algos[i].proposed)
                .take(algo::TUNE_CANDIDATES)
                .collect()
        };
        let first = algo_name(self.algos[0].algo);
        if legacy.len() + graphs.len() <= 1 {
            if let Some(g) = graphs.pop() {
                let name = g.name.clone();
                match self.adopt_graph(k, g) {
                    Ok(()) => self.choice = format!("cuDNN {name} (the only candidate{note})"),
                    Err(e) => self.choice = format!("cuDNN {first} ({name} unusable: {e}{note})"),
                }
            } else {
                self.choice = format!("cuDNN {first} (the only proposal{note})");
            }
            return;
        }
        let timer = match Timer::new(rt) {
            Ok(t) => t,
            Err(e) => {
                self.choice = format!("cuDNN {first} (heuristic; no timer: {e}{note})");
                return;
            }
        };
        let cap = algo::TUNE_WORKSPACE_CAP.max(self.algos[0].workspace);
        let mut best: Option<(Which, f64)> = None;
        let mut notes = Vec::new();
        for i in legacy {
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
                timer.time(rt, algo::TUNE_REPS, || self.forward_with(k, c, a, ws))
            });
            match timed {
                Ok(us) => {
                    notes.push(format!("{name} {us:.1} us"));
                    if best.is_none_or(|b| us < b.1) {
                        best = Some((Which::Legacy(i), us));
                    }
                }
                Err(e) => notes.push(format!("{name} failed ({e})")),
            }
        }
        for (i, g) in graphs.iter_mut().enumerate() {
            match graph_plan::time_candidate(k, &timer, g, c, cap) {
                Ok(Some(us)) => {
                    notes.push(format!("{} {us:.1} us", g.name));
                    if best.is_none_or(|b| us < b.1) {
                        best = Some((Which::Graph(i), us));
                    }
                }
                Ok(None) => notes.push(format!(
                    "{} skipped ({} MiB workspace)",
                    g.name,
                    g.exec.workspace >> 20
                )),
                Err(e) => notes.push(format!("{} failed ({e})", g.name)),
            }
        }
        // The legacy algorithm to keep selected: the chosen one, or the fastest legacy one as
        // the fallback behind a chosen graph plan.
        let legacy_best = match best {
            Some((Which::Legacy(i), _)) => i,
            _ => 0,
        };
        if let Err(e) = self.select(k, legacy_best) {
            // Back to the heuristics' first; a failure there surfaces on the call.
            let _ = self.select(k, 0);
            self.choice = format!("cuDNN {first} (selecting the fastest failed: {e}{note})");
            return;
        }
        let timed = notes.join(", ");
        if let Some((Which::Graph(i), _)) = best {
            let g = graphs.swap_remove(i);
            let name = g.name.clone();
            match self.adopt_graph(k, g) {
                Ok(()) => {
                    self.choice = format!("cuDNN {name} (timed: {timed}{note})");
                    return;
                }
                Err(e) => notes.push(format!("{name} unusable ({e})")),
            }
        }
        self.choice = format!(
            "cuDNN {} (timed: {}{note})",
            algo_name(self.algo().algo),
            notes.join(", ")
        );
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

    /// The path the first eager run chose, in a few words (the benchmark's column).
    pub(super) fn path(&self) -> String {
        if self.gemm {
            "cuBLASLt GEMM".into()
        } else if let Some(g) = &self.graph {
            format!("cuDNN {}", g.name)
        } else if self.fused == Fused::Works {
            format!(
                "cuDNN legacy {} (fused bias + activation)",
                algo_name(self.algo().algo)
            )
        } else {
            format!("cuDNN legacy {}", algo_name(self.algo().algo))
        }
    }

    /// Prints the choice (ONNX_RUNTIME_CUDA_CONV_LOG=1) and records its path.
    fn log(&self, k: &ConvKernel, x: &TensorView<'_>, w: &TensorView<'_>) {
        super::record_path(x.dtype, x.shape, w.shape, self.path());
        if log_choices() {
            eprintln!(
                "{}: {} {} X {:?} W {:?}: {}",
                k.base.node, k.base.op, x.dtype, x.shape, w.shape, self.choice
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
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
        let ty = BlasType::of(dtype, base.rt.tf32())
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
        let fusable = self.graph.is_none()
            && k.act.cudnn_fusable()
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

    /// Gives back the scratch buffers and destroys the backend plan (while the cuDNN handle
    /// it was made with is certainly alive: the kernel's own reference drops after this).
    pub(super) fn release(&mut self, base: &Base) {
        self.graph = None;
        self.sx.release(base);
        self.sw.release(base);
        self.sy.release(base);
    }
}
