//! One model call per generation step, behind [`StepRunner`], and the host-value
//! implementation [`HostStepRunner`]: it builds the step's feeds (ids, mask, positions, the
//! past), runs the session, keeps the presents as the next past and returns the logits.
//!
//! The sampling and the loop only see [`StepRunner`]; [`crate::DeviceStepRunner`] keeps the
//! cache in device memory instead. Both build their feeds with [`StepLayout`].

use crate::config::{IoNames, ModelConfig};
use crate::error::{GenError, GenResult};
use half::slice::HalfFloatSliceExt;
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::{DataType, ValueType};
use onnx_runtime_session::Session;
use std::sync::Arc;

/// Logits of the last `rows` positions of a step, as f32, row-major `[rows, vocab]`.
#[derive(Clone, Debug, PartialEq)]
pub struct StepLogits {
    pub rows: usize,
    pub vocab: usize,
    pub data: Vec<f32>,
}

impl StepLogits {
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.vocab..(i + 1) * self.vocab]
    }

    /// The logits that choose the next token.
    pub fn last(&self) -> &[f32] {
        self.row(self.rows - 1)
    }
}

/// Runs the decoder for new tokens after those already in its KV cache.
pub trait StepRunner {
    /// Feeds `tokens` (the whole prompt first, then one token per step) and returns their
    /// logits. The cache then holds [`StepRunner::cached`] + `tokens.len()` tokens.
    fn step(&mut self, tokens: &[u32]) -> GenResult<StepLogits>;
    /// Feeds `tokens` as [`StepRunner::step`] does and returns the index of the largest of
    /// the last position's logits (the first of equal maxima): the greedy choice without a
    /// repetition penalty. This default takes the logits to the host ([`crate::sampling::argmax`]);
    /// [`crate::DeviceStepRunner`] computes it on the device, so that only the id crosses back.
    fn step_argmax(&mut self, tokens: &[u32]) -> GenResult<u32> {
        let logits = self.step(tokens)?;
        Ok(crate::sampling::argmax(logits.last()))
    }
    /// Tokens in the cache.
    fn cached(&self) -> usize;
    /// The most tokens the cache can hold, when it has a fixed size or the model a context
    /// limit.
    fn capacity(&self) -> Option<usize>;
    /// Empties the cache for a new sequence.
    fn reset(&mut self);
}

/// An integer input: its name and element type (int64 or int32).
#[derive(Clone, Debug)]
pub(crate) struct IntInput {
    pub name: String,
    dtype: DataType,
}

impl IntInput {
    fn tensor(&self, shape: Vec<usize>, values: impl Iterator<Item = i64>) -> Tensor {
        match self.dtype {
            DataType::Int32 => Tensor::from_vec(shape, values.map(|v| v as i32).collect()),
            _ => Tensor::from_vec(shape, values.collect()),
        }
    }
}

fn int_input(session: &Session, name: &str) -> Option<IntInput> {
    let io = session.inputs().iter().find(|i| i.name == name)?;
    let dtype = match &io.ty {
        Some(ValueType::Tensor { dtype, .. }) => *dtype,
        _ => DataType::Int64,
    };
    Some(IntInput {
        name: name.to_string(),
        dtype,
    })
}

/// What both runners know about the decoder's inputs and outputs: names, the cache's dtype
/// and layout, limits; and how one step's small feeds are built.
pub(crate) struct StepLayout {
    pub session: Arc<Session>,
    pub input_ids: IntInput,
    pub attention_mask: Option<IntInput>,
    pub position_ids: Option<IntInput>,
    /// A bool `[1]` input of Optimum's merged decoders: true once the cache has tokens.
    pub use_cache_branch: Option<String>,
    /// (past name, present name), keys and values interleaved: k0, v0, k1, v1...
    pub cache_names: Vec<(String, String)>,
    pub kv_dtype: DataType,
    /// KV heads and head size.
    pub kv_shape: [usize; 2],
    /// Rows of the shared buffer, or `None` for a growing cache.
    pub share_buffer: Option<usize>,
    pub capacity: Option<usize>,
    pub logits: String,
}

impl StepLayout {
    /// The layout of `session`'s decoder, from `cfg` (names, cache layout, limits). The
    /// configuration is expected to have been checked against the graph
    /// ([`crate::check_model`]).
    pub fn new(session: Arc<Session>, cfg: &ModelConfig) -> GenResult<StepLayout> {
        let io = &cfg.io;
        let mismatch = |message: String| GenError::ModelMismatch {
            model: cfg.model_file.clone(),
            message,
        };
        let input_ids = int_input(&session, &io.input_ids)
            .ok_or_else(|| mismatch(format!("has no input '{}'", io.input_ids)))?;
        let attention_mask = io
            .attention_mask
            .as_deref()
            .and_then(|n| int_input(&session, n));
        let position_ids = io
            .position_ids
            .as_deref()
            .and_then(|n| int_input(&session, n));
        let use_cache_branch = session
            .inputs()
            .iter()
            .find(|i| i.name == "use_cache_branch")
            .map(|i| i.name.clone());
        let mut cache_names = Vec::new();
        for l in 0..cfg.num_layers {
            cache_names.push((
                IoNames::layer(&io.past_key, l),
                IoNames::layer(&io.present_key, l),
            ));
            cache_names.push((
                IoNames::layer(&io.past_value, l),
                IoNames::layer(&io.present_value, l),
            ));
        }
        let kv_dtype = session
            .inputs()
            .iter()
            .find(|i| i.name == cache_names[0].0)
            .and_then(|i| match &i.ty {
                Some(ValueType::Tensor { dtype, .. }) => Some(*dtype),
                _ => None,
            })
            .unwrap_or(DataType::Float32);
        let share_buffer = if cfg.past_present_share_buffer {
            Some(cfg.max_length().ok_or_else(|| GenError::Config {
                file: cfg.config_file.clone(),
                field: "search.max_length".into(),
                message: "is missing: past_present_share_buffer needs the buffer's length".into(),
            })?)
        } else {
            None
        };
        if attention_mask.is_none() && share_buffer.is_some() {
            return Err(mismatch(
                "past_present_share_buffer needs an attention_mask input: it tells the model how many cache rows are valid".into(),
            ));
        }
        Ok(StepLayout {
            session,
            input_ids,
            attention_mask,
            position_ids,
            use_cache_branch,
            cache_names,
            kv_dtype,
            kv_shape: [cfg.num_kv_heads, cfg.head_size],
            share_buffer,
            capacity: share_buffer.or(cfg.max_length()),
            logits: io.logits.clone(),
        })
    }

    /// An empty past for one layer's key or value: `max_length` zero rows with a shared
    /// buffer, else no rows.
    pub fn empty_past(&self) -> Tensor {
        let rows = self.share_buffer.unwrap_or(0);
        Tensor::zeros(
            self.kv_dtype,
            vec![1, self.kv_shape[0], rows, self.kv_shape[1]],
        )
    }

    /// The cache length after feeding `n` tokens to a cache of `cached`; an error when it
    /// would not fit.
    pub fn total_after(&self, cached: usize, n: usize) -> GenResult<usize> {
        if n == 0 {
            return Err(GenError::option(
                "prompt",
                "is empty: give at least one token",
            ));
        }
        let total = cached + n;
        if let Some(cap) = self.capacity {
            if total > cap {
                return Err(GenError::PromptTooLong {
                    prompt: total,
                    limit: cap,
                    what: if self.share_buffer.is_some() {
                        "the KV cache (search.max_length)"
                    } else {
                        "the model's context"
                    },
                });
            }
        }
        Ok(total)
    }

    /// The step's feeds other than the cache: `input_ids` [1, n], `attention_mask` (ones over
    /// the `total` tokens; with `mask_len`, padded with zeros to that length), `position_ids`
    /// [1, n] (the new tokens' positions) and `use_cache_branch`.
    pub fn small_feeds(
        &self,
        tokens: &[u32],
        cached: usize,
        mask_len: Option<usize>,
    ) -> Vec<(&str, Value)> {
        let (n, total) = (tokens.len(), cached + tokens.len());
        let mut feeds: Vec<(&str, Value)> = Vec::with_capacity(4);
        feeds.push((
            &self.input_ids.name,
            self.input_ids
                .tensor(vec![1, n], tokens.iter().map(|&t| t as i64))
                .into(),
        ));
        if let Some(m) = &self.attention_mask {
            let len = mask_len.unwrap_or(total).max(total);
            let ones = std::iter::repeat_n(1, total);
            let zeros = std::iter::repeat_n(0, len - total);
            feeds.push((&m.name, m.tensor(vec![1, len], ones.chain(zeros)).into()));
        }
        if let Some(p) = &self.position_ids {
            feeds.push((
                &p.name,
                p.tensor(vec![1, n], (cached as i64)..(total as i64)).into(),
            ));
        }
        if let Some(name) = &self.use_cache_branch {
            feeds.push((name, Tensor::from_bools(vec![1], &[cached > 0]).into()));
        }
        feeds
    }

    /// Checks a present's shape after a step that leaves `total` tokens in the cache: as
    /// many rows as the shared buffer, or at least `total` rows.
    pub fn check_present(
        &self,
        present: &str,
        shape: Option<&[usize]>,
        total: usize,
        what: impl FnOnce() -> String,
    ) -> GenResult<()> {
        let rows = shape.and_then(|s| (s.len() == 4).then(|| s[2]));
        let want = self.share_buffer.unwrap_or(total);
        if rows.is_none_or(|r| r < total || (self.share_buffer.is_some() && r != want)) {
            return Err(GenError::Output {
                name: present.to_string(),
                message: format!(
                    "is {}; [1, kv_heads, {want}, head_size] expected after {total} tokens",
                    what()
                ),
            });
        }
        Ok(())
    }

    /// The error for an output the model did not return.
    pub fn missing(name: &str) -> GenError {
        GenError::Output {
            name: name.to_string(),
            message: "is not among the model's outputs".into(),
        }
    }
}

/// [`StepRunner`] over [`Session::run`] with host values: the presents a step returns are
/// the next step's past (no copy: values share their storage). With
/// `past_present_share_buffer` the past is one buffer of `max_length` rows per layer from the
/// start, and the attention mask says how many rows are valid.
pub struct HostStepRunner {
    layout: StepLayout,
    past: Vec<Value>,
    cached: usize,
}

impl HostStepRunner {
    /// A runner for `session`, built from `cfg` (names, cache layout, limits). The
    /// configuration is expected to have been checked against the graph
    /// ([`crate::check_model`]).
    pub fn new(session: Arc<Session>, cfg: &ModelConfig) -> GenResult<HostStepRunner> {
        let mut r = HostStepRunner {
            layout: StepLayout::new(session, cfg)?,
            past: Vec::new(),
            cached: 0,
        };
        r.reset();
        Ok(r)
    }
}

/// The rows (positions) and vocabulary size of logits of shape `[1, rows, vocab]` (or
/// `[1, vocab]`) returned for a step of `tokens` tokens.
pub(crate) fn logits_rows(name: &str, shape: &[usize], tokens: usize) -> GenResult<(usize, usize)> {
    let err = |message: String| GenError::Output {
        name: name.to_string(),
        message,
    };
    let (rows, vocab) = match shape {
        [1, r, v] => (*r, *v),
        [1, v] => (1, *v),
        s => return Err(err(format!("has shape {s:?}; [1, tokens, vocab] expected"))),
    };
    if rows == 0 || rows > tokens || vocab == 0 {
        return Err(err(format!(
            "has shape {shape:?} for a step of {tokens} tokens"
        )));
    }
    Ok((rows, vocab))
}

/// Logits `[batch, rows, vocab]` (or `[batch, vocab]`) of batch 1 as f32.
pub(crate) fn logits_of(name: &str, v: &Value, tokens: usize) -> GenResult<StepLogits> {
    let err = |message: String| GenError::Output {
        name: name.to_string(),
        message,
    };
    let t = v
        .as_tensor()
        .ok_or_else(|| err(format!("is a {}, not a tensor", v.kind_name())))?;
    let (rows, vocab) = logits_rows(name, t.shape(), tokens)?;
    // Half logits widen with the slice conversions (F16C where the CPU has it): a 150k-word
    // vocabulary is converted every decode step.
    let data: Vec<f32> = match t.dtype() {
        DataType::Float32 => t.data::<f32>().to_vec(),
        DataType::Float16 => {
            let mut out = vec![0f32; t.numel()];
            t.data::<half::f16>().convert_to_f32_slice(&mut out);
            out
        }
        DataType::BFloat16 => {
            let mut out = vec![0f32; t.numel()];
            t.data::<half::bf16>().convert_to_f32_slice(&mut out);
            out
        }
        DataType::Float64 => t
            .to_f64_vec()
            .unwrap_or_default()
            .into_iter()
            .map(|x| x as f32)
            .collect(),
        d => return Err(err(format!("is {d}; float logits expected"))),
    };
    Ok(StepLogits { rows, vocab, data })
}

impl StepRunner for HostStepRunner {
    fn step(&mut self, tokens: &[u32]) -> GenResult<StepLogits> {
        let l = &self.layout;
        let total = l.total_after(self.cached, tokens.len())?;
        let mut feeds = l.small_feeds(tokens, self.cached, None);
        for ((name, _), v) in l.cache_names.iter().zip(&self.past) {
            feeds.push((name, v.clone()));
        }
        let outputs = l.session.run(&feeds)?;
        drop(feeds);
        let mut logits = None;
        let mut next: Vec<Option<Value>> = vec![None; l.cache_names.len()];
        for (name, value) in outputs {
            if name == l.logits {
                logits = Some(logits_of(&name, &value, tokens.len())?);
            } else if let Some(i) = l.cache_names.iter().position(|(_, p)| *p == name) {
                next[i] = Some(value);
            }
        }
        let logits = logits.ok_or_else(|| StepLayout::missing(&l.logits))?;
        let mut new_past = Vec::with_capacity(next.len());
        for ((_, present), v) in l.cache_names.iter().zip(next) {
            let v = v.ok_or_else(|| StepLayout::missing(present))?;
            let shape = v.as_tensor().map(|t| t.shape());
            l.check_present(present, shape, total, || {
                onnx_runtime_session::describe_value(&v)
            })?;
            new_past.push(v);
        }
        self.past = new_past;
        self.cached = total;
        Ok(logits)
    }

    fn cached(&self) -> usize {
        self.cached
    }

    fn capacity(&self) -> Option<usize> {
        self.layout.capacity
    }

    fn reset(&mut self) {
        let empty = Value::Tensor(self.layout.empty_past());
        self.past = vec![empty; self.layout.cache_names.len()];
        self.cached = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logits_are_read_as_f32_rows() {
        let t = Tensor::from_vec(vec![1, 2, 3], vec![1f32, 2., 3., 4., 5., 6.]);
        let l = logits_of("logits", &t.into(), 2).unwrap();
        assert_eq!((l.rows, l.vocab), (2, 3));
        assert_eq!(l.last(), &[4., 5., 6.]);
        let h: Vec<half::f16> = [1.5f32, -2.0]
            .iter()
            .map(|&x| half::f16::from_f32(x))
            .collect();
        let l = logits_of("logits", &Tensor::from_vec(vec![1, 2], h).into(), 1).unwrap();
        assert_eq!(l.data, vec![1.5, -2.0]);
        let bad = Tensor::from_vec(vec![2, 1, 3], vec![0f32; 6]);
        assert!(logits_of("logits", &bad.into(), 1)
            .unwrap_err()
            .to_string()
            .contains("[1, tokens, vocab]"));
        let ints = Tensor::from_vec(vec![1, 3], vec![0i64; 3]);
        assert!(logits_of("logits", &ints.into(), 1).is_err());
        let b: Vec<half::bf16> = [0.25f32, -3.0]
            .iter()
            .map(|&x| half::bf16::from_f32(x))
            .collect();
        let l = logits_of("logits", &Tensor::from_vec(vec![1, 1, 2], b).into(), 1).unwrap();
        assert_eq!(l.data, vec![0.25, -3.0]);
    }
}
