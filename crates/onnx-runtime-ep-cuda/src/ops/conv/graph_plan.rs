//! Which cuDNN backend-API engines may run a shape: the switch
//! (`ONNX_RUNTIME_CUDA_CONV_BACKEND`), the engines refused for a dtype (float32 must stay true
//! FP32: no TF32 tensor cores, no down-converted inputs; no engine reduces in reduced
//! precision; no engine that compiles kernels at run time, which would make first runs take
//! seconds), and the finalized execution plans of the heuristics' first proposals
//! ([`candidates`]), which the first eager run of a shape times against the legacy
//! algorithms (see [`super::plan`]).

use super::algo::{self, Timer};
use super::conv::{as_cudnn, log_choices, ConvKernel};
use super::dnn::Dnn;
use super::graph::{self, ConvGraph, ConvSpec, EngineInfo, ExecPlan};
use super::plan::{Call, Plan};
use crate::runtime::CuPtr;
use cudarc::cudnn::sys;
use onnx_runtime_ep_api::{EpError, EpResult};
use std::sync::{Arc, OnceLock};

/// How the backend path takes part (`ONNX_RUNTIME_CUDA_CONV_BACKEND`: `0` off, `force` its
/// engines only where one builds, anything else or unset: timed against the legacy ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off,
    On,
    Force,
}

/// The switch, read once per process.
pub fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| parse_mode(std::env::var("ONNX_RUNTIME_CUDA_CONV_BACKEND").ok()))
}

fn parse_mode(v: Option<String>) -> Mode {
    match v.as_deref().map(str::trim) {
        Some("0") | Some("off") => Mode::Off,
        Some("force") | Some("2") => Mode::Force,
        _ => Mode::On,
    }
}

/// How many backend plans the first eager run of a shape times.
pub const GRAPH_CANDIDATES: usize = 4;

/// Execution plans tried (finalized) at most per shape, over both heuristics modes.
const MAX_ATTEMPTS: usize = 16;

/// Why an engine may not run a convolution of this dtype, or None.
pub fn refusal(info: &EngineInfo, float32: bool) -> Option<&'static str> {
    let has = |n: u32| info.numerical.contains(&n);
    if info.behavior.contains(&graph::BEHAVIOR_RUNTIME_COMPILATION) {
        return Some("compiles at run time");
    }
    if has(graph::NOTE_REDUCED_PRECISION_REDUCTION) {
        return Some("reduced-precision reduction");
    }
    if float32 && has(graph::NOTE_TENSOR_CORE) {
        return Some("TF32 tensor cores");
    }
    if float32 && has(graph::NOTE_DOWN_CONVERT_INPUTS) {
        return Some("down-converts inputs");
    }
    None
}

/// A short name of an engine for the logs and the benchmark: its global index and notes.
pub fn engine_name(info: &EngineInfo) -> String {
    let mut tags = Vec::new();
    if info.numerical.contains(&graph::NOTE_TENSOR_CORE) {
        tags.push("tensor cores");
    }
    if info.numerical.contains(&graph::NOTE_WINOGRAD) {
        tags.push("winograd");
    }
    if info.numerical.contains(&graph::NOTE_FFT) {
        tags.push("fft");
    }
    if tags.is_empty() {
        format!("graph engine {}", info.id)
    } else {
        format!("graph engine {} [{}]", info.id, tags.join(", "))
    }
}

/// One backend plan for a shape, with the operation graph it was made from (kept alive with
/// it).
pub struct Candidate {
    pub exec: ExecPlan,
    pub name: String,
    _graph: Arc<ConvGraph>,
}

/// The usable plans of the heuristics' first proposals (mode A, then the fallback list when
/// A gave fewer than `max`), best first, at most `max`; with notes on what was passed over.
/// An error means no operation graph could be built for the shape (the legacy path runs it).
/// `tf32`: float32 convolutions may use TF32 tensor cores (the provider's option).
pub fn candidates(
    dnn: &Dnn,
    spec: &ConvSpec,
    max: usize,
    tf32: bool,
) -> EpResult<(Vec<Candidate>, String)> {
    // Strict float32: no TF32, no down-converted inputs.
    let float32 = spec.data == sys::cudnnDataType_t::CUDNN_DATA_FLOAT && !tf32;
    let h = dnn.lock();
    let graph = Arc::new(ConvGraph::new(h.0, spec)?);
    let mut out: Vec<Candidate> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut seen: Vec<i64> = Vec::new();
    let mut attempts = 0usize;
    for heur in [
        sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A,
        sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK,
    ] {
        if out.len() >= max || attempts >= MAX_ATTEMPTS {
            break;
        }
        let from_a = heur == sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A;
        let cfgs = match graph::engine_configs(&graph, heur) {
            Ok(c) => c,
            Err(e) => {
                failed.push(format!("heuristics {heur:?}: {e}"));
                continue;
            }
        };
        let mut this_mode: Vec<i64> = Vec::new();
        for cfg in cfgs {
            if out.len() >= max || attempts >= MAX_ATTEMPTS {
                break;
            }
            let info = match graph::engine_info(&cfg) {
                Ok(i) => i,
                Err(e) => {
                    failed.push(format!("engine query: {e}"));
                    continue;
                }
            };
            // The fallback list repeats engines mode A proposed.
            if !from_a && seen.contains(&info.id) {
                continue;
            }
            if let Some(why) = refusal(&info, float32) {
                refused.push(format!("{} ({why})", info.id));
                continue;
            }
            attempts += 1;
            let name = engine_name(&info);
            let id = info.id;
            match ExecPlan::new(h.0, cfg, info) {
                Ok(exec) => {
                    this_mode.push(id);
                    out.push(Candidate {
                        exec,
                        name,
                        _graph: graph.clone(),
                    });
                }
                Err(e) => failed.push(format!("{id}: {e}")),
            }
        }
        seen.extend(this_mode);
    }
    let mut notes = Vec::new();
    if !refused.is_empty() {
        notes.push(format!("engines refused: {}", refused.join(", ")));
    }
    if !failed.is_empty() {
        notes.push(format!("engines that did not build: {}", failed.join("; ")));
    }
    Ok((out, notes.join("; ")))
}

/// Whether a call's operands meet the alignment the graph's tensors declare.
pub(super) fn aligned(c: &Call<'_>) -> bool {
    let a = graph::ALIGNMENT as CuPtr;
    [c.x, c.w, c.y].iter().all(|&p| p.is_multiple_of(a))
}

fn to_i64(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// Times one backend plan on the call's operands (mean device time in microseconds), or
/// None when it needs a workspace beyond `cap`.
pub(super) fn time_candidate(
    k: &ConvKernel,
    timer: &Timer,
    g: &mut Candidate,
    c: &Call<'_>,
    cap: usize,
) -> EpResult<Option<f64>> {
    if g.exec.workspace > cap {
        return Ok(None);
    }
    let rt = &k.base.rt;
    let ws = k.dnn.workspace(rt, g.exec.workspace)?;
    rt.bind_thread()?;
    let exec = &mut g.exec;
    timer
        .time(rt, algo::TUNE_REPS, || {
            let h = k.dnn.lock();
            // SAFETY: the call's operands are the packed device buffers of the plan's shapes
            // (aligned: checked before the candidates were made), the workspace holds the
            // plan's size, and the handle is the one the plan was made with, held here.
            unsafe { exec.execute(h.0, c.x, c.w, c.y, ws) }
        })
        .map(Some)
}

impl Plan {
    /// The convolution as the backend API sees it (the same padded input, symmetric pads,
    /// 1-D made 2-D, as the legacy descriptors).
    fn graph_spec(&self) -> ConvSpec {
        let g = &self.geom;
        let win = &g.win;
        let r = win.input.len();
        let sym: Vec<usize> = (0..r)
            .map(|i| win.pad_begin[i].min(win.pad_end[i]))
            .collect();
        let mut w = vec![g.m, g.c / g.group.max(1)];
        w.extend(&win.kernel);
        ConvSpec {
            data: self.ty.data,
            compute: self.ty.compute,
            x: to_i64(&as_cudnn(&self.xdims, r, 1)),
            w: to_i64(&as_cudnn(&w, r, 1)),
            y: to_i64(&as_cudnn(&self.out, r, 1)),
            pads: to_i64(&as_cudnn(&sym, r, 0)),
            strides: to_i64(&as_cudnn(&win.strides, r, 1)),
            dilations: to_i64(&as_cudnn(&win.dilations, r, 1)),
        }
    }

    /// The backend plans to time for this shape (none when the switch is off, for float64,
    /// or when the first call's operands are not aligned), with a note on what was passed
    /// over or why none could be made.
    pub(super) fn graph_candidates(
        &self,
        k: &ConvKernel,
        c: &Call<'_>,
    ) -> (Vec<Candidate>, String) {
        if mode() == Mode::Off {
            return (Vec::new(), "off (ONNX_RUNTIME_CUDA_CONV_BACKEND=0)".into());
        }
        if self.ty.data == sys::cudnnDataType_t::CUDNN_DATA_DOUBLE {
            return (Vec::new(), String::new());
        }
        if !aligned(c) {
            return (
                Vec::new(),
                format!("operands not {}-byte aligned", graph::ALIGNMENT),
            );
        }
        if let Err(e) = k.base.rt.bind_thread() {
            return (Vec::new(), format!("no context ({e})"));
        }
        match candidates(
            &k.dnn,
            &self.graph_spec(),
            GRAPH_CANDIDATES,
            k.base.rt.tf32(),
        ) {
            Ok((list, note)) if list.is_empty() => {
                let note = if note.is_empty() {
                    "no engine proposed".to_string()
                } else {
                    format!("no usable engine ({note})")
                };
                (list, note)
            }
            Ok(found) => found,
            Err(e) => (Vec::new(), format!("no operation graph ({e})")),
        }
    }

    /// Makes `g` the plan's convolution, with a workspace it fits in.
    pub(super) fn adopt_graph(&mut self, k: &ConvKernel, g: Candidate) -> EpResult<()> {
        self.graph_ws = k.dnn.workspace(&k.base.rt, g.exec.workspace)?;
        self.graph = Some(g);
        Ok(())
    }

    /// The chosen backend plan into `c.y` (operands aligned: checked by the caller).
    pub(super) fn graph_forward(&mut self, k: &ConvKernel, c: &Call<'_>) -> EpResult<()> {
        let ws = self.graph_ws;
        let Some(g) = self.graph.as_mut() else {
            return Err(EpError::device("cudnn", "internal: no backend plan chosen"));
        };
        k.base.rt.bind_thread()?;
        let h = k.dnn.lock();
        // SAFETY: as in `time_candidate`; `ws` was sized for this plan when it was adopted.
        unsafe { g.exec.execute(h.0, c.x, c.w, c.y, ws) }
    }

    /// Leaves the backend plan after it failed at run time (eagerly): the legacy algorithm
    /// kept selected runs from now on.
    pub(super) fn drop_graph(&mut self, k: &ConvKernel, e: &EpError) {
        if let Some(g) = self.graph.take() {
            self.choice = format!(
                "{}; {} failed at run time ({e}), back on the legacy algorithm",
                self.choice, g.name
            );
            if log_choices() {
                eprintln!(
                    "{}: {}: backend plan {} failed ({e}); using the legacy algorithm",
                    k.base.node, k.base.op, g.name
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_reads_off_force_and_default() {
        assert_eq!(parse_mode(None), Mode::On);
        assert_eq!(parse_mode(Some("0".into())), Mode::Off);
        assert_eq!(parse_mode(Some(" force ".into())), Mode::Force);
        assert_eq!(parse_mode(Some("1".into())), Mode::On);
    }

    #[test]
    fn float32_refuses_tf32_and_down_conversion() {
        let tc = EngineInfo {
            id: 7,
            numerical: vec![graph::NOTE_TENSOR_CORE],
            behavior: vec![],
        };
        assert!(refusal(&tc, true).is_some());
        assert!(refusal(&tc, false).is_none());
        let down = EngineInfo {
            id: 8,
            numerical: vec![graph::NOTE_DOWN_CONVERT_INPUTS],
            behavior: vec![],
        };
        assert!(refusal(&down, true).is_some());
        let rt = EngineInfo {
            id: 9,
            numerical: vec![],
            behavior: vec![graph::BEHAVIOR_RUNTIME_COMPILATION],
        };
        assert!(refusal(&rt, false).is_some());
        let plain = EngineInfo {
            id: 1,
            numerical: vec![graph::NOTE_WINOGRAD],
            behavior: vec![],
        };
        assert!(refusal(&plain, true).is_none());
        assert_eq!(engine_name(&plain), "graph engine 1 [winograd]");
        assert_eq!(engine_name(&tc), "graph engine 7 [tensor cores]");
    }
}
