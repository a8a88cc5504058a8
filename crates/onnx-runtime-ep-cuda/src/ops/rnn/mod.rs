//! Recurrent networks: RNN, GRU (linear_before_reset 0 and 1) and LSTM (peepholes,
//! input_forget) of the ONNX domain, registered at every since-version the CPU provider has
//! (RNN / LSTM 1, 7, 14, 22; GRU 1, 3, 7, 14, 22), for float, double, float16 and bfloat16.
//! Every direction (both directions of a bidirectional node run in the same launches),
//! sequence_lens (read on the device), initial_h / initial_c, layout 0 and 1, clip, the
//! activation list with its alphas and betas, and any subset of the outputs Y, Y_h, Y_c.
//! Semantics follow the CPU provider (`onnx-runtime-ep-cpu/src/ops/nn/rnn/recurrent.rs`):
//! steps at or past a batch row's length write zeros to Y and keep the state, so Y_h / Y_c
//! hold the state after the row's last valid step.
//!
//! The work (kernels in `src/kernels/rnn.cu`, one NVRTC module per (kind, dtype)):
//! 1. `rnn_proj`: the input projection of every step at once, X[T*B, I] @ W^T[I, G*H] plus the
//!    biases that are simply added (every gate's Wb and Rb but GRU's Rbh), a tiled GEMM of our
//!    own into a float (double for double) workspace. Inputs with any strides are read in
//!    place; layout 1 is a stride permutation.
//! 2. The recurrence. Hidden sizes up to [`plan::FUSED_MAX_H`]: `rnn_fused_*`, the whole sequence
//!    in one launch, a block per (batch chunk, direction) holding its state in shared memory.
//!    Larger: `rnn_step_*`, one launch per step (two for GRU with linear_before_reset = 0), a
//!    warp per (direction, hidden unit, batch chunk) across the GPU, the state in ping-pong
//!    workspace buffers. Either way the gates, the cell update, clip and the sequence_lens
//!    masking are fused with the recurrent product H_prev @ R^T (R read as stored when it is
//!    contiguous, else packed once per run), accumulated in float (double for double).
//!
//! Nothing is read on the host and nothing synchronizes, so every launch can be captured; the
//! workspace is allocated on the first run of a shape and kept (capture after one eager run).

//!
//! [`plan`] computes the launch sequence and the workspace layout as plain data (testable
//! without a GPU); this module validates the node and its inputs and launches the sequence.

pub mod plan;

use super::common::*;
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{Attribute, DataType, Node};
use plan::{Act, Call, Config, Desc, Kind, Launch, STEP_THREADS};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The float dtypes the kernels take: dtype, tag, C type, accumulator C type.
const FLOATS: [(DataType, &str, &str, &str); 4] = [
    (DataType::Float32, "f32", "float", "float"),
    (DataType::Float64, "f64", "double", "double"),
    (DataType::Float16, "f16", "f16", "float"),
    (DataType::BFloat16, "bf16", "bf16", "float"),
];

fn cell_module(kind: Kind, dtype: DataType) -> Option<ModuleSpec> {
    let (_, tag, ctype, acc) = FLOATS.iter().find(|f| f.0 == dtype)?;
    Some(
        ModuleSpec::new(
            format!("rnn_{}_{tag}", kind.tag()),
            include_str!("../../kernels/rnn.cu"),
        )
        .define("RNN_T", ctype)
        .define("RNN_A", acc)
        .define("RNN_KIND", &kind.code().to_string())
        .with_half(),
    )
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    let mut all = Vec::new();
    for kind in [Kind::Rnn, Kind::Gru, Kind::Lstm] {
        for (dtype, _, _, _) in FLOATS {
            all.extend(cell_module(kind, dtype));
        }
    }
    all
}

// ---- attributes ----

fn attr_strings(node: &Node, name: &str) -> EpResult<Option<Vec<String>>> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Strings(v)) => Ok(Some(v.clone())),
        Some(Attribute::String(v)) => Ok(Some(vec![v.clone()])),
        Some(other) => Err(EpError::invalid_attribute(
            node,
            name,
            format!("expected a list of strings, got {:?}", other.kind()),
        )),
    }
}

fn attr_floats(node: &Node, name: &str) -> EpResult<Option<Vec<f32>>> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Floats(v)) => Ok(Some(v.clone())),
        Some(Attribute::Float(v)) => Ok(Some(vec![*v])),
        Some(other) => Err(EpError::invalid_attribute(
            node,
            name,
            format!("expected a list of floats, got {:?}", other.kind()),
        )),
    }
}

/// The activation list, `n_act` per direction, as the CPU provider reads it: the defaults
/// when absent, one direction's list serving both, alphas and betas taken in order by the
/// activations that use them (defaults past the end of the lists).
fn parse_acts(node: &Node, kind: Kind, dirs: usize) -> EpResult<Vec<Act>> {
    let alphas = attr_floats(node, "activation_alpha")?.unwrap_or_default();
    let betas = attr_floats(node, "activation_beta")?.unwrap_or_default();
    let defaults: &[&str] = match kind {
        Kind::Rnn => &["Tanh"],
        Kind::Gru => &["Sigmoid", "Tanh"],
        Kind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
    };
    let names: Vec<String> = match attr_strings(node, "activations")? {
        Some(n) => n,
        None => (0..dirs)
            .flat_map(|_| defaults.iter().map(|s| s.to_string()))
            .collect(),
    };
    let names: Vec<String> = if names.len() == kind.n_act() && dirs == 2 {
        names.iter().chain(names.iter()).cloned().collect()
    } else {
        names
    };
    if names.len() != kind.n_act() * dirs {
        return Err(EpError::invalid_attribute(
            node,
            "activations",
            format!(
                "{} names given; want {} per direction ({} for {dirs} direction(s))",
                names.len(),
                kind.n_act(),
                kind.n_act() * dirs
            ),
        ));
    }
    let (mut ai, mut bi) = (0, 0);
    let next = |v: &[f32], i: &mut usize, d: f32| -> f32 {
        let r = v.get(*i).copied().unwrap_or(d);
        *i += 1;
        r
    };
    names
        .iter()
        .map(|n| {
            Ok(match n.to_ascii_lowercase().as_str() {
                "relu" => (0, 0.0, 0.0),
                "tanh" => (1, 0.0, 0.0),
                "sigmoid" => (2, 0.0, 0.0),
                "affine" => (3, next(&alphas, &mut ai, 1.0), next(&betas, &mut bi, 0.0)),
                "leakyrelu" => (4, next(&alphas, &mut ai, 0.01), 0.0),
                "thresholdedrelu" => (5, next(&alphas, &mut ai, 1.0), 0.0),
                "scaledtanh" => (6, next(&alphas, &mut ai, 1.0), next(&betas, &mut bi, 1.0)),
                "hardsigmoid" => (7, next(&alphas, &mut ai, 0.2), next(&betas, &mut bi, 0.5)),
                "elu" => (8, next(&alphas, &mut ai, 1.0), 0.0),
                "softsign" => (9, 0.0, 0.0),
                "softplus" => (10, 0.0, 0.0),
                _ => {
                    return Err(EpError::invalid_attribute(
                        node,
                        "activations",
                        format!(
                            "unknown activation '{n}' (accepted: Relu, Tanh, Sigmoid, \
                             Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, \
                             Softsign, Softplus)"
                        ),
                    ))
                }
            })
        })
        .collect()
}

// ---- workspace ----

/// Device workspace kept between runs: it grows when a call needs more, and earlier blocks
/// stay until the kernel is dropped (a captured graph may still use them).
struct Scratch {
    blocks: Mutex<Vec<(CuPtr, usize)>>,
}

impl Scratch {
    fn get(&self, base: &Base, bytes: usize) -> EpResult<CuPtr> {
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(ptr, cap)) = blocks.last() {
            if cap >= bytes {
                return Ok(ptr);
            }
        }
        let capturing = base.rt.is_capturing();
        let (ptr, cap) = base.rt.allocate(bytes.max(256), 256).map_err(|e| match e {
            EpError::Capture { .. } if capturing => EpError::Capture {
                node: base.node.clone(),
                message: format!(
                    "{} needs a device workspace of {bytes} bytes (input projections and \
                     states) and none can be allocated during capture ({e}); run this shape \
                     once eagerly before capturing",
                    base.op
                ),
            },
            other => other,
        })?;
        blocks.push((ptr, cap));
        Ok(ptr)
    }
}

// ---- the kernel ----

struct Fns {
    proj: Function,
    init: Function,
    /// (mode, [b1_v0, b1_v1, b8_v0, b8_v1]).
    step: Vec<(u8, [Function; 4])>,
    fused: Vec<(u8, [Function; 4])>,
}

impl Fns {
    fn load(base: &Base, kind: Kind, dtype: DataType) -> EpResult<Fns> {
        let m = base.module(&cell_module(kind, dtype).expect("a float dtype"))?;
        let four = |prefix: &str| -> EpResult<[Function; 4]> {
            Ok([
                m.function(&format!("{prefix}_b1_v0"))?,
                m.function(&format!("{prefix}_b1_v1"))?,
                m.function(&format!("{prefix}_b8_v0"))?,
                m.function(&format!("{prefix}_b8_v1"))?,
            ])
        };
        let mut step = Vec::new();
        for &mode in kind.step_modes() {
            step.push((mode, four(&format!("rnn_step_m{mode}"))?));
        }
        let mut fused = Vec::new();
        for &mode in kind.fused_modes() {
            fused.push((mode, four(&format!("rnn_fused_m{mode}"))?));
        }
        Ok(Fns {
            proj: m.function("rnn_proj")?,
            init: m.function("rnn_init")?,
            step,
            fused,
        })
    }

    fn pick(
        base: &Base,
        list: &[(u8, [Function; 4])],
        mode: u8,
        bch: usize,
        vec: bool,
    ) -> EpResult<Function> {
        let fns = list
            .iter()
            .find(|(m, _)| *m == mode)
            .map(|(_, f)| f)
            .ok_or_else(|| base.err(format!("no recurrent kernel for mode {mode}")))?;
        Ok(fns[usize::from(bch > 1) * 2 + usize::from(vec)])
    }
}

struct RnnKernel {
    base: Base,
    cfg: Config,
    fns: HashMap<DataType, Fns>,
    copy: WidthFns,
    scratch: Scratch,
}

/// The validated inputs of one call.
struct Inputs<'v, 'a> {
    dtype: DataType,
    seq: usize,
    batch: usize,
    input: usize,
    x: &'v TensorView<'a>,
    w: &'v TensorView<'a>,
    r: &'v TensorView<'a>,
    b: Option<&'v TensorView<'a>>,
    lens: Option<&'v TensorView<'a>>,
    h0: Option<&'v TensorView<'a>>,
    c0: Option<&'v TensorView<'a>>,
    p: Option<&'v TensorView<'a>>,
}

/// A present view (omitted inputs and placeholders are `None`).
fn present<'v, 'a>(v: Option<&'v TensorView<'a>>) -> Option<&'v TensorView<'a>> {
    v.filter(|v| v.dtype != DataType::Undefined)
}

fn desc<'a>(v: &TensorView<'a>) -> Desc<'a> {
    Desc {
        ptr: ptr_of(v),
        shape: v.shape,
        strides: v.strides,
    }
}

impl RnnKernel {
    fn state_shape(&self, batch: usize) -> Vec<usize> {
        let (nd, h) = (self.cfg.nd(), self.cfg.hidden);
        if self.cfg.layout {
            vec![batch, nd, h]
        } else {
            vec![nd, batch, h]
        }
    }

    fn inputs<'v, 'a>(&self, inputs: &'v [TensorView<'a>]) -> EpResult<Inputs<'v, 'a>> {
        let base = &self.base;
        let kind = self.cfg.kind;
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let r = base.req(inputs, 2)?;
        let b = present(base.input(inputs, 3));
        let lens = present(base.input(inputs, 4));
        let h0 = present(base.input(inputs, 5));
        let (c0, p) = if kind == Kind::Lstm {
            (
                present(base.input(inputs, 6)),
                present(base.input(inputs, 7)),
            )
        } else {
            (None, None)
        };
        let dtype = x.dtype;
        if !FLOATS.iter().any(|f| f.0 == dtype) {
            return Err(base.unsupported(
                dtype,
                format!(
                    "the CUDA {} takes float, double, float16 or bfloat16",
                    base.op
                ),
            ));
        }
        if x.rank() != 3 {
            return Err(base.err(format!(
                "X {:?} must be 3-D [seq_length, batch_size, input_size] ([batch_size, \
                 seq_length, input_size] with layout 1)",
                x.shape
            )));
        }
        let (seq, batch) = if self.cfg.layout {
            (x.shape[1], x.shape[0])
        } else {
            (x.shape[0], x.shape[1])
        };
        let input = x.shape[2];
        let (h, nd) = (self.cfg.hidden, self.cfg.nd());
        let gh = kind.gates() * h;
        let expect = |t: &TensorView<'_>, shape: &[usize], what: &str| -> EpResult<()> {
            if t.shape != shape || t.dtype != dtype {
                return Err(base.err(format!(
                    "{what} is {} {:?}; want {dtype} {shape:?} (hidden_size {h}, {nd} \
                     direction(s), {} gate(s))",
                    t.dtype,
                    t.shape,
                    kind.gates()
                )));
            }
            Ok(())
        };
        expect(w, &[nd, gh, input], "W")?;
        expect(r, &[nd, gh, h], "R")?;
        if let Some(b) = b {
            expect(b, &[nd, 2 * gh], "B")?;
        }
        let state = self.state_shape(batch);
        if let Some(t) = h0 {
            expect(t, &state, "initial_h")?;
        }
        if let Some(t) = c0 {
            expect(t, &state, "initial_c")?;
        }
        if let Some(t) = p {
            expect(t, &[nd, 3 * h], "P")?;
        }
        if let Some(l) = lens {
            if !l.dtype.is_integer() {
                return Err(base.err(format!(
                    "sequence_lens must be an integer tensor (int32), got {}",
                    l.dtype
                )));
            }
            if l.numel() != batch || l.shape.iter().filter(|&&d| d > 1).count() > 1 {
                return Err(base.err(format!(
                    "sequence_lens {:?} must hold batch_size = {batch} values [batch_size]",
                    l.shape
                )));
            }
        }
        let limit = i32::MAX as usize;
        if seq > limit || batch > limit || h > limit / 8 || input > limit {
            return Err(base.err(format!(
                "shapes (seq {seq}, batch {batch}, hidden {h}, input {input}) exceed the CUDA \
                 kernels' 32-bit limits; run this node on the CPU provider"
            )));
        }
        Ok(Inputs {
            dtype,
            seq,
            batch,
            input,
            x,
            w,
            r,
            b,
            lens,
            h0,
            c0,
            p,
        })
    }

    fn types(&self, v: &Inputs<'_, '_>) -> OutputTypes {
        let (seq, batch, nd, h) = (v.seq, v.batch, self.cfg.nd(), self.cfg.hidden);
        let y = if self.cfg.layout {
            vec![batch, seq, nd, h]
        } else {
            vec![seq, nd, batch, h]
        };
        let n = self.base.outputs.clamp(1, self.cfg.kind.max_outputs());
        let mut out = vec![(v.dtype, y)];
        for _ in 1..n {
            out.push((v.dtype, self.state_shape(batch)));
        }
        out
    }

    /// One launch of the plan.
    fn launch(&self, fns: &Fns, width: usize, l: Launch<'_>) -> EpResult<()> {
        let base = &self.base;
        match l {
            Launch::PackR { src, dst } => copy_strided(
                base,
                &self.copy,
                width,
                src.ptr,
                dst,
                src.shape,
                &istrides(src.strides),
                &contiguous(src.shape),
                0,
                0,
            ),
            Launch::Proj { grid, mut p } => {
                let mut args = [arg(&mut p)];
                // SAFETY: rnn_proj(RnnProj) reads X, W and B through their views and writes
                // the D * T * B * G * H projections of the workspace.
                unsafe {
                    base.rt
                        .launch_cfg(fns.proj, grid, (256, 1, 1), 0, &mut args)
                }
            }
            Launch::Init { n, mut p } => {
                let mut args = [arg(&mut p)];
                // SAFETY: rnn_init(RnnParams) writes the workspace's state buffers (D*B*H
                // each) and the state outputs, and reads the initial states by their views.
                unsafe { base.rt.launch(fns.init, n as u64, &mut args) }
            }
            Launch::Fused {
                mode,
                bch,
                vec,
                grid,
                threads,
                shared,
                mut p,
            } => {
                let f = Fns::pick(base, &fns.fused, mode, bch, vec)?;
                let mut args = [arg(&mut p)];
                // SAFETY: rnn_fused_*(RnnParams) is written for this grid (batch chunks,
                // directions), block and shared memory; it reads the workspace projections
                // and R, and writes the outputs through their strides.
                unsafe {
                    base.rt
                        .launch_cfg(f, grid, (threads, 1, 1), shared, &mut args)
                }
            }
            Launch::Step {
                mode,
                bch,
                vec,
                blocks,
                mut p,
            } => {
                let f = Fns::pick(base, &fns.step, mode, bch, vec)?;
                let mut args = [arg(&mut p)];
                // SAFETY: rnn_step_*(RnnParams) runs a warp per (direction, unit, batch
                // chunk) over this grid; it reads the workspace projections, R and hprev, and
                // writes hnext (and the cell / GRU buffers) and the outputs by their strides.
                unsafe {
                    base.rt
                        .launch_cfg(f, (blocks, 1, 1), (STEP_THREADS as u32, 1, 1), 0, &mut args)
                }
            }
        }
    }
}

impl Kernel for RnnKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let v = self.inputs(inputs)?;
        Ok(self.types(&v))
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let v = self.inputs(inputs)?;
        let want = self.types(&v);
        base.outputs_at_least(outputs, 1)?;
        let given = outputs.len().min(want.len());
        base.expect_outputs(&outputs[..given], &want[..given])?;
        let fns = self.fns.get(&v.dtype).ok_or_else(|| {
            base.unsupported(v.dtype, "the CUDA recurrent kernels take float types")
        })?;
        let out = |k: usize| -> Option<Desc<'_>> {
            outputs[..given]
                .get(k)
                .filter(|o| o.numel() > 0 && !o.ptr.0.is_null())
                .map(|o| Desc {
                    ptr: mut_ptr_of(o),
                    shape: o.shape,
                    strides: o.strides,
                })
        };
        let width = v.dtype.element_size().unwrap_or(4);
        let call = Call {
            seq: v.seq,
            batch: v.batch,
            input: v.input,
            width,
            double: v.dtype == DataType::Float64,
            x: desc(v.x),
            w: desc(v.w),
            r: desc(v.r),
            b: v.b.map(desc),
            lens: v.lens.map(|l| (desc(l), l.dtype.onnx_code())),
            h0: v.h0.map(desc),
            c0: v.c0.map(desc),
            p: v.p.map(desc),
            y: out(0),
            yh: out(1),
            yc: out(2),
            err: base.rt.err_ptr(),
            id: base.id,
        };
        let ws = self.cfg.workspace(&call).map_err(|e| base.err(e))?;
        let ptr = if ws.bytes > 0 {
            self.scratch.get(base, ws.bytes)?
        } else {
            0
        };
        self.cfg
            .launches(&call, &ws, ptr, |l| self.launch(fns, width, l))
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

impl Drop for RnnKernel {
    fn drop(&mut self) {
        let blocks = self
            .scratch
            .blocks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner());
        for (ptr, _) in blocks.drain(..) {
            let _ = self.base.rt.free(ptr);
        }
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, kind: Kind) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let hidden = attr_int(node, "hidden_size")?
        .ok_or_else(|| EpError::invalid_attribute(node, "hidden_size", "is required"))?;
    if hidden < 1 {
        return Err(EpError::invalid_attribute(
            node,
            "hidden_size",
            format!("{hidden} must be positive"),
        ));
    }
    let direction = attr_string(node, "direction")?.unwrap_or_else(|| "forward".into());
    let dirs = match direction.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => {
            return Err(EpError::invalid_attribute(
                node,
                "direction",
                format!("'{other}' is not forward, reverse or bidirectional"),
            ))
        }
    };
    let acts = parse_acts(node, kind, dirs.len())?;
    let base = Base::new(rt, node);
    if base.outputs > kind.max_outputs() {
        return Err(base.err(format!(
            "{} has at most {} outputs; the node declares {}",
            base.op,
            kind.max_outputs(),
            base.outputs
        )));
    }
    let cfg = Config {
        kind,
        hidden: hidden as usize,
        dirs,
        acts,
        clip: attr_float(node, "clip")?,
        layout: attr_int(node, "layout")?.unwrap_or(0) != 0,
        linear_before_reset: attr_int(node, "linear_before_reset")?.unwrap_or(0) != 0,
        input_forget: attr_int(node, "input_forget")?.unwrap_or(0) != 0,
    };
    let mut fns = HashMap::new();
    for (dtype, _, _, _) in FLOATS {
        fns.insert(dtype, Fns::load(&base, kind, dtype)?);
    }
    let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
    Ok(Box::new(RnnKernel {
        base,
        cfg,
        fns,
        copy,
        scratch: Scratch {
            blocks: Mutex::new(Vec::new()),
        },
    }))
}

fn build_rnn(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Kind::Rnn)
}

fn build_gru(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Kind::Gru)
}

fn build_lstm(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Kind::Lstm)
}

pub fn register(r: &mut Registry) {
    for since in [1, 7, 14, 22] {
        r.register("", "RNN", since, build_rnn);
        r.register("", "LSTM", since, build_lstm);
    }
    for since in [1, 3, 7, 14, 22] {
        r.register("", "GRU", since, build_gru);
    }
}
