//! The loader's error type: every message names the file, the place inside the model (graph,
//! node, tensor, field) and what the user can do about it.

use std::path::PathBuf;
use thiserror::Error;

/// A model or value could not be read or written.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("cannot read '{}': {source}; check that the file exists and is readable", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write '{}': {source}; check that the folder exists and is writable", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: not a valid ONNX protobuf ({detail}); the file is truncated, corrupted or not an ONNX {what}")]
    Decode {
        origin: String,
        what: &'static str,
        /// prost's description, with long field paths shortened.
        detail: String,
    },
    /// The protobuf parsed but its content is not a valid model (or exceeds a safety limit).
    #[error("{origin}: {}: {message}", location_string(location))]
    Invalid {
        origin: String,
        /// Where in the model, innermost last (e.g. `graph 'main'`, `node 'If_3' (If)`).
        location: Vec<String>,
        message: String,
    },
    /// A tensor stored outside the model file could not be used.
    #[error("{origin}: {}: external data: {message}", location_string(location))]
    ExternalData {
        origin: String,
        location: Vec<String>,
        message: String,
    },
    /// The model cannot be written as one protobuf.
    #[error("cannot encode the model: {0}")]
    Encode(String),
}

fn location_string(location: &[String]) -> String {
    if location.is_empty() {
        "model".to_string()
    } else {
        location.join(" > ")
    }
}

impl LoadError {
    /// An `Invalid` error with no location yet; callers add it as the error propagates.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        LoadError::Invalid {
            origin: String::new(),
            location: Vec::new(),
            message: message.into(),
        }
    }

    pub(crate) fn external(message: impl Into<String>) -> Self {
        LoadError::ExternalData {
            origin: String::new(),
            location: Vec::new(),
            message: message.into(),
        }
    }

    /// Prepends `place` (an enclosing scope) to the error's location.
    pub(crate) fn within(mut self, place: impl FnOnce() -> String) -> Self {
        if let LoadError::Invalid { location, .. } | LoadError::ExternalData { location, .. } =
            &mut self
        {
            location.insert(0, place());
        }
        self
    }

    /// Names the file a value was read from: the error's origin becomes `path` where it was
    /// a placeholder (`<tensor>`, `<sequence>`... for bytes read without a file name), so the
    /// message names the file once. Errors that already name a file are left as they are.
    pub fn in_file(mut self, path: &std::path::Path) -> Self {
        if let LoadError::Invalid { origin, .. }
        | LoadError::ExternalData { origin, .. }
        | LoadError::Decode { origin, .. } = &mut self
        {
            if origin.is_empty() || origin.starts_with('<') {
                *origin = path.display().to_string();
            }
        }
        self
    }

    /// Sets the file (or `<bytes>`) the error came from.
    pub(crate) fn with_origin(mut self, name: &str) -> Self {
        if let LoadError::Invalid { origin, .. }
        | LoadError::ExternalData { origin, .. }
        | LoadError::Decode { origin, .. } = &mut self
        {
            if origin.is_empty() {
                *origin = name.to_string();
            }
        }
        self
    }
}

/// Adds a location to the error of a `Result`.
pub(crate) trait Within<T> {
    fn within(self, place: impl FnOnce() -> String) -> Result<T, LoadError>;
}

impl<T> Within<T> for Result<T, LoadError> {
    fn within(self, place: impl FnOnce() -> String) -> Result<T, LoadError> {
        self.map_err(|e| e.within(place))
    }
}

pub(crate) fn decode_error(what: &'static str, source: prost::DecodeError) -> LoadError {
    // prost names every enclosing field ("GraphProto.node: AttributeProto.g: ..."); deep
    // nesting makes that path thousands of characters long, so keep its ends.
    let text = source.to_string();
    let parts: Vec<&str> = text.split(": ").collect();
    let detail = if parts.len() > 8 {
        format!(
            "{}: ... ({} more fields) ...: {}",
            parts[..4].join(": "),
            parts.len() - 7,
            parts[parts.len() - 3..].join(": ")
        )
    } else {
        text
    };
    LoadError::Decode {
        origin: String::new(),
        what,
        detail,
    }
}
