//! [`GenError`]: everything that can go wrong between a model folder and generated text.

use std::path::PathBuf;

/// Why a model folder cannot be read or a generation cannot run. Every variant says what to
/// fix: the file and field, the input name, the limit that was passed.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// A file of the folder cannot be read.
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    /// A configuration file is not valid JSON, or a field is missing or has the wrong type.
    #[error("{file}: {field}: {message}")]
    Config {
        file: PathBuf,
        /// The field's path, e.g. `model.decoder.head_size`.
        field: String,
        message: String,
    },
    /// The folder has neither `genai_config.json` nor `config.json`, or no model file.
    #[error("{dir}: {message}")]
    Folder { dir: PathBuf, message: String },
    /// The tokenizer cannot be loaded, or there is none and the prompt is text.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The graph does not have the inputs or outputs the configuration names, or their
    /// types do not match it.
    #[error("model {model}: {message}")]
    ModelMismatch { model: PathBuf, message: String },
    /// The prompt does not fit the KV cache or the context.
    #[error("the prompt has {prompt} tokens but {what} holds {limit}: shorten the prompt")]
    PromptTooLong {
        prompt: usize,
        limit: usize,
        what: &'static str,
    },
    /// A generation option is out of range (a temperature of 0 with sampling, top_p above 1...).
    #[error("option {option}: {message}")]
    Option {
        option: &'static str,
        message: String,
    },
    /// The session failed to build or to run a step.
    #[error(transparent)]
    Session(#[from] onnx_runtime_session::SessionError),
    /// A model output is not what a decoder returns (logits of the wrong shape or dtype...).
    #[error("step output {name}: {message}")]
    Output { name: String, message: String },
}

/// The crate's result type.
pub type GenResult<T> = Result<T, GenError>;

impl GenError {
    pub(crate) fn io(path: impl Into<PathBuf>, e: impl std::fmt::Display) -> GenError {
        GenError::Io {
            path: path.into(),
            message: e.to_string(),
        }
    }

    pub(crate) fn option(option: &'static str, message: impl Into<String>) -> GenError {
        GenError::Option {
            option,
            message: message.into(),
        }
    }
}
