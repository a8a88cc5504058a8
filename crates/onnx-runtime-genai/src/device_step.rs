//! [`DeviceStepRunner`]: the KV cache in the session's device memory, bound with
//! [`Session::run_bound`], so a decode step moves no cache byte to or from the host.
//!
//! Each step binds the past as device values, asks for the presents on the device (they are
//! the next step's past) and for the logits on the host; only the small feeds (ids, mask,
//! positions) cross from the host, and only the logits back. A greedy step
//! ([`StepRunner::step_argmax`]) keeps the logits on the device too and runs ArgMax there, so
//! only the chosen id comes back.
//!
//! With `past_present_share_buffer` (the onnxruntime-genai builder's GroupQueryAttention
//! models) the past is one buffer of `max_length` rows per layer, and every decode step feeds
//! the attention mask padded with zeros to `max_length`, as onnxruntime-genai does when it
//! captures CUDA graphs: the graph then computes `seqlens_k` = (ones in the mask) - 1, which
//! stays on the device, and `total_sequence_length` = the mask's length = `max_length`, the
//! same for every step. So every decode step has the same input signature (ids and positions
//! `[1, 1]`, mask `[1, max_length]`, caches `[1, kv_heads, max_length, head_size]`), and the
//! session's automatic CUDA graph, captured at the second decode step, is replayed for every
//! later one. Each present is bound into its past's memory ([`OutputOn::Into`]): the
//! attention writes the step's new rows there and nothing else, so a step copies no cache
//! bytes, and the captured graph works in those buffers (the same every step). The prompt step feeds the unpadded mask (`total_sequence_length` = the prompt
//! length marks it as the first prompt) and runs in a graph of its own signature.
//!
//! Concat-style caches (Optimum exports, builder models without a shared buffer) grow by one
//! row per step, so each step has a new signature and runs eagerly; the cache still stays on
//! the device.

use crate::config::ModelConfig;
use crate::error::GenResult;
use crate::step::{logits_of, logits_rows, StepLayout, StepLogits, StepRunner};
use onnx_runtime_ep_cpu::Value;
use onnx_runtime_ir::{Attribute, DataType, Dim, Graph, Node, NodeId, Shape};
use onnx_runtime_session::{DeviceValue, Input, Output, OutputOn, Session, SessionOptions};
use std::sync::Arc;

/// One layer's key or value cache.
enum Past {
    /// Before the first step of a growing cache: an empty host tensor (no device bytes).
    Empty(Value),
    Device(DeviceValue),
}

/// [`StepRunner`] that keeps the KV cache in device memory (a session with a device:
/// [`Session::device`]); see the module documentation for the feeds of each step.
pub struct DeviceStepRunner {
    layout: StepLayout,
    past: Vec<Past>,
    cached: usize,
    /// [`DeviceStepRunner::argmax_session`], once built: the logits' element type and rank, and it.
    argmax: Option<((DataType, usize), Session)>,
}

impl DeviceStepRunner {
    /// A runner for `session`, which must have a device, built from `cfg` as
    /// [`crate::HostStepRunner::new`] is. With a shared buffer, the zeroed `max_length`-row
    /// caches are copied to the device here, once.
    pub fn new(session: Arc<Session>, cfg: &ModelConfig) -> GenResult<DeviceStepRunner> {
        if session.device().is_none() {
            return Err(crate::GenError::option(
                "runner",
                "the device step runner needs a session with a device (SessionOptions::device)",
            ));
        }
        let layout = StepLayout::new(session, cfg)?;
        let past = if layout.share_buffer.is_some() {
            let zeros = layout.empty_past();
            let mut past = Vec::with_capacity(layout.cache_names.len());
            for _ in &layout.cache_names {
                past.push(Past::Device(layout.session.to_device(&zeros)?));
            }
            past
        } else {
            Vec::new()
        };
        let mut r = DeviceStepRunner {
            layout,
            past,
            cached: 0,
            argmax: None,
        };
        r.reset();
        Ok(r)
    }

    /// The device values of the cache (after at least one step, or with a shared buffer),
    /// keys and values interleaved by layer.
    pub fn cache(&self) -> Vec<&DeviceValue> {
        self.past
            .iter()
            .filter_map(|p| match p {
                Past::Device(d) => Some(d),
                Past::Empty(_) => None,
            })
            .collect()
    }
}

impl DeviceStepRunner {
    /// Runs one step (see the module documentation) and returns the logits, left where
    /// `logits_on` says.
    fn run(&mut self, tokens: &[u32], logits_on: OutputOn) -> GenResult<(String, Output)> {
        let l = &self.layout;
        let total = l.total_after(self.cached, tokens.len())?;
        // The shared buffer's decode steps: the mask padded to the buffer, one signature.
        let mask_len = l.share_buffer.filter(|_| self.cached > 0);
        let small = l.small_feeds(tokens, self.cached, mask_len);
        let mut inputs: Vec<(&str, Input<'_>)> = small
            .iter()
            .map(|(name, v)| (*name, Input::Host(v)))
            .collect();
        for ((name, _), p) in l.cache_names.iter().zip(&self.past) {
            inputs.push((
                name,
                match p {
                    Past::Empty(v) => Input::Host(v),
                    Past::Device(d) => Input::Device(d),
                },
            ));
        }
        let mut outputs: Vec<(&str, OutputOn)> = vec![(&l.logits, logits_on)];
        // A shared buffer: each present is written into its past's memory (GroupQueryAttention
        // adds only the new rows there), so the step moves no cache bytes and every decode
        // step binds the same buffers, which one captured graph then reads and writes.
        let in_place = l.share_buffer.is_some();
        outputs.extend(l.cache_names.iter().map(|(past, present)| {
            let on = if in_place {
                OutputOn::Into(past.as_str())
            } else {
                OutputOn::Device
            };
            (present.as_str(), on)
        }));
        let mut results = l.session.run_bound(&inputs, &outputs)?.into_iter();
        drop(inputs);
        let logits = results
            .next()
            .ok_or_else(|| StepLayout::missing(&l.logits))?;
        let mut next = Vec::with_capacity(l.cache_names.len());
        for (_, present) in &l.cache_names {
            let (_, out) = results.next().ok_or_else(|| StepLayout::missing(present))?;
            let d = out
                .as_device()
                .cloned()
                .ok_or_else(|| crate::GenError::Output {
                    name: present.clone(),
                    message: "came back on the host; the device runner asked for it on the device"
                        .into(),
                })?;
            l.check_present(present, Some(d.shape()), total, || format!("{d:?}"))?;
            next.push(Past::Device(d));
        }
        self.past = next;
        self.cached = total;
        Ok(logits)
    }

    /// The session that finds the largest logit of each position on the device (ArgMax over
    /// the vocabulary, on the model session's device), built at the first greedy step for the
    /// logits' element type and rank. Its decode steps have one signature, so it runs as a captured
    /// device graph from the third on, as the model does.
    fn argmax_session(&mut self, dtype: DataType, rank: usize) -> GenResult<&Session> {
        if self
            .argmax
            .as_ref()
            .is_none_or(|(k, _)| *k != (dtype, rank))
        {
            let device = self.layout.session.device().cloned();
            let mut g = Graph::new();
            g.opset_imports.insert(String::new(), 13);
            let names: &[&str] = if rank == 2 {
                &["batch", "vocab"]
            } else {
                &["batch", "positions", "vocab"]
            };
            let dims = names.iter().map(|n| Dim::Symbolic((*n).into())).collect();
            let logits = g.create_named_value("logits", dtype, Shape(dims));
            g.add_input(logits);
            let ids = g.create_value("ids", None);
            let mut node = Node::new(NodeId(0), "ArgMax", vec![Some(logits)], vec![ids]);
            node.attributes.insert("axis".into(), Attribute::Int(-1));
            node.attributes.insert("keepdims".into(), Attribute::Int(0));
            g.insert_node(node);
            g.add_output(ids);
            let options = SessionOptions {
                device,
                ..SessionOptions::default()
            };
            self.argmax = Some(((dtype, rank), Session::from_graph(&g, options)?));
        }
        Ok(&self.argmax.as_ref().expect("built above").1)
    }
}

impl StepRunner for DeviceStepRunner {
    fn step(&mut self, tokens: &[u32]) -> GenResult<StepLogits> {
        let n = tokens.len();
        let (name, logits) = self.run(tokens, OutputOn::Host)?;
        logits_of(&name, &logits.into_host()?, n)
    }

    /// The greedy choice on the device: the logits stay there and ArgMax runs on them (NaN
    /// counts as the largest value there, as in ONNX's ArgMax; the host's
    /// [`crate::sampling::argmax`] skips NaN), so only the chosen id (8 bytes a position)
    /// comes back instead of the vocabulary's logits.
    fn step_argmax(&mut self, tokens: &[u32]) -> GenResult<u32> {
        let n = tokens.len();
        let (name, logits) = self.run(tokens, OutputOn::Device)?;
        let Some(d) = logits.as_device() else {
            return logits_of(&name, &logits.into_host()?, n)
                .map(|l| crate::sampling::argmax(l.last()));
        };
        let err = |message: String| crate::GenError::Output {
            name: name.clone(),
            message,
        };
        if !matches!(
            d.dtype(),
            DataType::Float32 | DataType::Float16 | DataType::BFloat16
        ) {
            return Err(err(format!("is {}; float logits expected", d.dtype())));
        }
        logits_rows(&name, d.shape(), n)?;
        let session = self.argmax_session(d.dtype(), d.shape().len())?;
        let out = session.run_bound(&[("logits", Input::Device(d))], &[("ids", OutputOn::Host)])?;
        let ids = out
            .into_iter()
            .next()
            .ok_or_else(|| err("the ArgMax session returned nothing".into()))?
            .1
            .into_host()?;
        let last = ids
            .as_tensor()
            .and_then(|t| t.to_i64_vec())
            .and_then(|v| v.last().copied())
            .ok_or_else(|| err("the ArgMax session returned no index".into()))?;
        u32::try_from(last).map_err(|_| err(format!("ArgMax returned index {last}")))
    }

    fn cached(&self) -> usize {
        self.cached
    }

    fn capacity(&self) -> Option<usize> {
        self.layout.capacity
    }

    /// A growing cache starts empty again. A shared buffer keeps its device memory: the
    /// prompt step reads none of its rows (attention kernels keep no past rows when the step
    /// is the first prompt) and overwrites the rows it fills, so nothing is copied.
    fn reset(&mut self) {
        if self.layout.share_buffer.is_none() {
            let empty = Value::Tensor(self.layout.empty_past());
            self.past = (0..self.layout.cache_names.len())
                .map(|_| Past::Empty(empty.clone()))
                .collect();
        }
        self.cached = 0;
    }
}
