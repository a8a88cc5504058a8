//! [`Model`]: a decoder folder loaded (configuration, graph checked against it, session,
//! tokenizer), and [`generate`]: the prompt step, then one decode step per token, with the
//! sampler, stop tokens, streaming and timing.

use crate::arch::{check_model, Architecture};
use crate::config::ModelConfig;
use crate::device_step::DeviceStepRunner;
use crate::error::{GenError, GenResult};
use crate::sampling::{choose, Rng, SamplingOptions};
use crate::step::{HostStepRunner, StepLogits, StepRunner};
use crate::tokenizer::{Decode, StreamDecoder, Tokenizer};
use onnx_runtime_session::{Session, SessionOptions};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A decoder folder, ready to generate.
pub struct Model {
    pub config: ModelConfig,
    pub arch: Architecture,
    /// `None` when the folder has no `tokenizer.json` (prompts are then token ids).
    pub tokenizer: Option<Tokenizer>,
    /// Why there is no tokenizer, to report when a text prompt needs one.
    pub tokenizer_error: Option<String>,
    pub session: Arc<Session>,
}

/// A folder read without building a session (for `info`).
#[derive(Debug)]
pub struct Inspection {
    pub config: ModelConfig,
    pub arch: Architecture,
    /// Why the graph does not match the configuration ([`check_model`]), if it does not.
    pub mismatch: Option<GenError>,
}

/// Reads a folder's configuration and graph without building a session.
pub fn inspect(dir: &Path) -> GenResult<Inspection> {
    let config = ModelConfig::from_dir(dir)?;
    let model = load_graph(&config)?;
    let arch = Architecture::detect(&model.graph, &config.io);
    let mismatch = check_model(&config, &model.graph, &arch).err();
    Ok(Inspection {
        config,
        arch,
        mismatch,
    })
}

fn load_graph(config: &ModelConfig) -> GenResult<onnx_runtime_loader::Model> {
    if !config.model_file.is_file() {
        return Err(GenError::Folder {
            dir: config.dir.clone(),
            message: format!(
                "the model file {} that {} names does not exist",
                config.model_file.display(),
                config.config_file.display()
            ),
        });
    }
    onnx_runtime_loader::Model::load(&config.model_file)
        .map_err(|e| GenError::io(&config.model_file, e))
}

impl Model {
    /// Loads `dir`: the configuration, the graph (checked against it), the session and the
    /// tokenizer when there is one.
    pub fn load(dir: impl AsRef<Path>, options: SessionOptions) -> GenResult<Model> {
        let dir = dir.as_ref();
        let config = ModelConfig::from_dir(dir)?;
        let model = load_graph(&config)?;
        let arch = Architecture::detect(&model.graph, &config.io);
        check_model(&config, &model.graph, &arch)?;
        let session = Arc::new(Session::from_model(model, options)?);
        let (tokenizer, tokenizer_error) = match Tokenizer::from_dir(dir) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Ok(Model {
            config,
            arch,
            tokenizer,
            tokenizer_error,
            session,
        })
    }

    /// A fresh step runner (an empty cache) over the model's session: a
    /// [`DeviceStepRunner`] (the cache in device memory) when the session has a device, else a
    /// [`HostStepRunner`].
    pub fn runner(&self) -> GenResult<Box<dyn StepRunner>> {
        Ok(match self.session.device() {
            Some(_) => Box::new(self.device_runner()?),
            None => Box::new(self.host_runner()?),
        })
    }

    /// A fresh host-value step runner, whatever the session runs on.
    pub fn host_runner(&self) -> GenResult<HostStepRunner> {
        HostStepRunner::new(self.session.clone(), &self.config)
    }

    /// A fresh device-cache step runner (an error when the session has no device).
    pub fn device_runner(&self) -> GenResult<DeviceStepRunner> {
        DeviceStepRunner::new(self.session.clone(), &self.config)
    }

    /// Caps the sequence length (prompt and generated tokens) the runners allocate for and
    /// stop at, as onnxruntime-genai's `max_length` search option: a shared KV buffer then
    /// has `max_length` rows instead of the folder's `search.max_length` (often the whole
    /// context). An error when it is below 2 or above the model's context length.
    pub fn set_max_length(&mut self, max_length: usize) -> GenResult<()> {
        if max_length < 2 {
            return Err(GenError::option(
                "max_length",
                format!("is {max_length}: it must leave room for a prompt token and a new one"),
            ));
        }
        if let Some(c) = self.config.context_length.filter(|&c| max_length > c) {
            return Err(GenError::option(
                "max_length",
                format!("is {max_length}, above the model's context length {c}"),
            ));
        }
        self.config.search.max_length = Some(max_length);
        Ok(())
    }

    /// The token ids of a text prompt; an error when the folder has no tokenizer.
    pub fn encode(&self, text: &str) -> GenResult<Vec<u32>> {
        match &self.tokenizer {
            Some(t) => t.encode(text),
            None => Err(GenError::Tokenizer(
                self.tokenizer_error
                    .clone()
                    .unwrap_or_else(|| "the folder has no tokenizer".into()),
            )),
        }
    }

    /// Generates from `prompt` ids with the model's stop tokens: see [`generate`].
    pub fn generate(
        &self,
        prompt: &[u32],
        options: &GenerateOptions,
        on_token: &mut dyn FnMut(&TokenEvent<'_>),
    ) -> GenResult<Generation> {
        let mut runner = self.runner()?;
        self.generate_with(runner.as_mut(), prompt, options, on_token)
    }

    /// [`Model::generate`] with a given runner (a [`HostStepRunner`] on a device session, to
    /// compare; or one kept between generations).
    pub fn generate_with(
        &self,
        runner: &mut dyn StepRunner,
        prompt: &[u32],
        options: &GenerateOptions,
        on_token: &mut dyn FnMut(&TokenEvent<'_>),
    ) -> GenResult<Generation> {
        let stop = options
            .stop_tokens
            .clone()
            .unwrap_or_else(|| self.config.eos_token_ids.clone());
        let decoder = self.tokenizer.as_ref().map(|t| t as &dyn Decode);
        generate(
            runner,
            decoder,
            prompt,
            &GenerateOptions {
                stop_tokens: Some(stop),
                ..options.clone()
            },
            self.config.vocab_size,
            on_token,
        )
    }
}

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// New tokens at most (the stop token, when one ends generation, included).
    pub max_new_tokens: usize,
    pub sampling: SamplingOptions,
    /// Tokens that end generation; `None` for the model's `eos_token_id`s (with
    /// [`Model::generate`]; [`generate`] itself then stops on none).
    pub stop_tokens: Option<Vec<u32>>,
    /// Keep the prompt's logits (every position) and every step's in [`Generation`].
    pub keep_logits: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 128,
            sampling: SamplingOptions::default(),
            stop_tokens: None,
            keep_logits: false,
        }
    }
}

/// One generated token, as the streaming callback sees it.
#[derive(Debug)]
pub struct TokenEvent<'a> {
    pub id: u32,
    /// 0 for the token the prompt step chose.
    pub index: usize,
    /// The text this token completes (empty while a multi-byte character is incomplete, or
    /// without a tokenizer).
    pub text: &'a str,
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// A stop token was generated.
    StopToken,
    /// `max_new_tokens` were generated.
    MaxNewTokens,
    /// The cache or the context is full.
    MaxLength,
}

/// What was measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timing {
    /// The prompt step (the model call over every prompt token).
    pub prompt: Duration,
    /// From the call to the first token chosen (the prompt step and the sampler).
    pub first_token: Duration,
    /// Decode steps (one model call each, after the prompt) and their total time, sampling
    /// included.
    pub decode_steps: usize,
    pub decode: Duration,
}

impl Timing {
    /// Decode throughput: decode steps per second (`None` without decode steps).
    pub fn decode_tokens_per_s(&self) -> Option<f64> {
        (self.decode_steps > 0 && !self.decode.is_zero())
            .then(|| self.decode_steps as f64 / self.decode.as_secs_f64())
    }

    /// Prompt throughput: prompt tokens per second.
    pub fn prompt_tokens_per_s(&self, prompt_tokens: usize) -> Option<f64> {
        (!self.prompt.is_zero()).then(|| prompt_tokens as f64 / self.prompt.as_secs_f64())
    }
}

/// A finished generation.
#[derive(Clone, Debug)]
pub struct Generation {
    pub prompt_tokens: usize,
    /// The generated ids (the stop token included when one ended it).
    pub tokens: Vec<u32>,
    /// Their text, with a tokenizer.
    pub text: Option<String>,
    pub stop: StopReason,
    pub timing: Timing,
    /// With [`GenerateOptions::keep_logits`]: the prompt step's logits (every position the
    /// model returned).
    pub prompt_logits: Option<StepLogits>,
    /// With [`GenerateOptions::keep_logits`]: each decode step's logits (the last position).
    pub step_logits: Vec<Vec<f32>>,
}

/// Generates after `prompt` with `runner` (whose cache is reset first): the prompt step
/// chooses the first token, each decode step feeds the last token and chooses the next,
/// until a stop token, `max_new_tokens` or the cache's capacity. `decoder` (the tokenizer)
/// turns tokens into text for `on_token` as they are produced.
pub fn generate(
    runner: &mut dyn StepRunner,
    decoder: Option<&dyn Decode>,
    prompt: &[u32],
    options: &GenerateOptions,
    vocab_size: Option<usize>,
    on_token: &mut dyn FnMut(&TokenEvent<'_>),
) -> GenResult<Generation> {
    options.sampling.validate()?;
    if prompt.is_empty() {
        return Err(GenError::option(
            "prompt",
            "is empty: give at least one token",
        ));
    }
    if let Some(v) = vocab_size {
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= v) {
            return Err(GenError::option(
                "prompt",
                format!("token id {bad} is outside the vocabulary ({v} tokens)"),
            ));
        }
    }
    runner.reset();
    if let Some(cap) = runner.capacity() {
        if prompt.len() >= cap {
            return Err(GenError::PromptTooLong {
                prompt: prompt.len(),
                limit: cap - 1,
                what: "the KV cache (with room for one new token)",
            });
        }
    }
    let stop_tokens = options.stop_tokens.clone().unwrap_or_default();
    let mut rng = Rng::new(options.sampling.seed);
    let mut history: Vec<u32> = prompt.to_vec();
    let mut stream = StreamDecoder::new(prompt);
    let mut text = decoder.map(|_| String::new());
    let mut gen = Generation {
        prompt_tokens: prompt.len(),
        tokens: Vec::new(),
        text: None,
        stop: StopReason::MaxNewTokens,
        timing: Timing::default(),
        prompt_logits: None,
        step_logits: Vec::new(),
    };
    let start = Instant::now();
    let mut feed: Vec<u32> = prompt.to_vec();
    let mut decode_start = None;
    enum Stepped {
        Chosen(u32),
        Logits(StepLogits),
    }
    // Greedy without a penalty needs only the largest logit's index: the runner may find it
    // where the logits are (the device), so they need not come to the host.
    let greedy = !options.sampling.do_sample
        && options.sampling.repetition_penalty == 1.0
        && !options.keep_logits;
    while gen.tokens.len() < options.max_new_tokens {
        let t0 = Instant::now();
        // The greedy choice comes with the step; otherwise the logits do.
        let stepped = if greedy {
            Stepped::Chosen(runner.step_argmax(&feed)?)
        } else {
            Stepped::Logits(runner.step(&feed)?)
        };
        if gen.tokens.is_empty() {
            gen.timing.prompt = t0.elapsed();
        }
        let id = match stepped {
            Stepped::Chosen(id) => id,
            Stepped::Logits(logits) => {
                let mut last = logits.last().to_vec();
                if options.keep_logits {
                    if gen.tokens.is_empty() {
                        gen.prompt_logits = Some(logits.clone());
                    } else {
                        gen.step_logits.push(last.clone());
                    }
                }
                choose(&mut last, &history, &options.sampling, &mut rng)
            }
        };
        if gen.tokens.is_empty() {
            gen.timing.first_token = start.elapsed();
            decode_start = Some(Instant::now());
        } else {
            gen.timing.decode_steps += 1;
        }
        history.push(id);
        gen.tokens.push(id);
        let piece = match decoder {
            Some(d) if !stop_tokens.contains(&id) => stream.push(d, id)?,
            _ => String::new(),
        };
        if let Some(t) = &mut text {
            t.push_str(&piece);
        }
        on_token(&TokenEvent {
            id,
            index: gen.tokens.len() - 1,
            text: &piece,
        });
        if stop_tokens.contains(&id) {
            gen.stop = StopReason::StopToken;
            break;
        }
        // As onnxruntime-genai: the sequence (prompt and generated) ends at the limit.
        if runner.capacity().is_some_and(|cap| history.len() >= cap) {
            gen.stop = StopReason::MaxLength;
            break;
        }
        feed = vec![id];
    }
    if let Some(start) = decode_start {
        gen.timing.decode = start.elapsed();
    }
    if let (Some(d), Some(t)) = (decoder, &mut text) {
        let rest = stream.finish(d)?;
        if !rest.is_empty() {
            t.push_str(&rest);
            on_token(&TokenEvent {
                id: *gen.tokens.last().unwrap_or(&0),
                index: gen.tokens.len().saturating_sub(1),
                text: &rest,
            });
        }
    }
    gen.text = text;
    Ok(gen)
}
