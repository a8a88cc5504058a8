//! Text generation with LLM decoders exported as ONNX, on an `onnx_runtime_session::Session`.
//!
//! A model folder is either the onnxruntime-genai model builder's (`genai_config.json` beside
//! `model.onnx`; com.microsoft GroupQueryAttention, MatMulNBits, ...) or a Hugging Face
//! Optimum export (`config.json` beside `model.onnx` or `decoder_model_merged.onnx`), with
//! a `tokenizer.json` when prompts are text.
//!
//! ```no_run
//! use onnx_runtime_genai::{GenerateOptions, Model};
//! # fn demo() -> onnx_runtime_genai::GenResult<()> {
//! let model = Model::load("qwen2-0.5b-int4", Default::default())?;
//! let prompt = model.encode("The capital of France is")?;
//! let out = model.generate(&prompt, &GenerateOptions::default(), &mut |t| print!("{}", t.text))?;
//! println!("\n{:?} tokens/s", out.timing.decode_tokens_per_s());
//! # Ok(()) }
//! ```
//!
//! The loop ([`generate()`]) sees the model only through [`StepRunner`]; [`HostStepRunner`]
//! feeds host values and keeps each step's presents as the next past (growing by Concat, or
//! one fixed buffer of `max_length` rows with `past_present_share_buffer`).
//! [`DeviceStepRunner`], chosen when the session has a device, keeps the cache in device
//! memory, and with a shared buffer gives every decode step the same input signature, so one
//! CUDA graph serves them all. Batch size 1.

mod arch;
mod config;
mod device_step;
mod error;
mod generate;
pub mod sampling;
mod step;
mod tokenizer;

pub use arch::{check_model, Architecture, Quantization};
pub use config::{Format, IoNames, ModelConfig, SearchDefaults, OPTIMUM_MODEL_FILES};
pub use device_step::DeviceStepRunner;
pub use error::{GenError, GenResult};
pub use generate::{
    generate, inspect, GenerateOptions, Generation, Inspection, Model, StopReason, Timing,
    TokenEvent,
};
pub use sampling::{Rng, SamplingOptions};
pub use step::{HostStepRunner, StepLogits, StepRunner};
pub use tokenizer::{Decode, StreamDecoder, Tokenizer};
