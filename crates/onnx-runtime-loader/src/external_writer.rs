//! Writing large tensors to an external data file next to the model (for models past the
//! 2 GiB protobuf limit, and for memory-mapping them back without a copy).

use crate::data::tensor::tensor_to_proto;
use crate::proto::{self, tensor_proto::DataLocation, StringStringEntryProto};
use crate::LoadError;
use onnx_runtime_ir::{TensorBytes, TensorData};
use std::io::Write;
use std::path::{Component, Path, PathBuf};

/// Where and which tensors [`crate::Model::save_with_external_data`] writes externally.
#[derive(Clone, Debug)]
pub struct ExternalDataOptions {
    /// The data file, relative to the model's folder (e.g. `model.onnx.data`).
    pub location: String,
    /// Tensors of at least this many bytes go to the data file; smaller ones stay inline.
    pub threshold: usize,
}

impl ExternalDataOptions {
    pub fn new(location: impl Into<String>) -> Self {
        ExternalDataOptions {
            location: location.into(),
            threshold: 1024,
        }
    }
}

/// Appends tensor bytes to the data file and describes where they went.
pub(crate) struct ExternalWriter {
    file: std::io::BufWriter<std::fs::File>,
    tmp_path: PathBuf,
    done: bool,
    location: String,
    threshold: usize,
    offset: u64,
    error: Option<std::io::Error>,
}

impl ExternalWriter {
    /// Opens a temporary data file in `dir` (renamed into place by [`Self::finish`]).
    pub(crate) fn create(dir: &Path, options: &ExternalDataOptions) -> Result<Self, LoadError> {
        let rel = Path::new(&options.location);
        if options.location.is_empty()
            || rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(LoadError::Encode(format!(
                "external data location '{}' must be a relative path inside the model's folder",
                options.location
            )));
        }
        let final_path = dir.join(rel);
        let mut tmp = final_path.as_os_str().to_owned();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp_path = PathBuf::from(tmp);
        let file = std::fs::File::create(&tmp_path).map_err(|source| LoadError::Write {
            path: tmp_path.clone(),
            source,
        })?;
        Ok(ExternalWriter {
            file: std::io::BufWriter::with_capacity(1 << 20, file),
            tmp_path,
            location: options.location.clone(),
            threshold: options.threshold,
            offset: 0,
            error: None,
            done: false,
        })
    }

    /// The tensor's proto: external when large enough (and not strings), inline otherwise.
    pub(crate) fn tensor(&mut self, t: &TensorData) -> proto::TensorProto {
        let bytes = t.bytes();
        if matches!(t.data, TensorBytes::Strings(_)) || bytes.len() < self.threshold.max(1) {
            return tensor_to_proto(t);
        }
        // Page-align large tensors so that readers can map them; 64 bytes for the rest.
        let align = if bytes.len() >= 4096 { 4096 } else { 64 };
        let offset = self.offset.next_multiple_of(align);
        let pad = (offset - self.offset) as usize;
        if self.error.is_none() {
            let result = self
                .file
                .write_all(&vec![0u8; pad])
                .and_then(|_| self.file.write_all(bytes));
            if let Err(e) = result {
                self.error = Some(e);
            }
        }
        self.offset = offset + bytes.len() as u64;
        let entry = |k: &str, v: String| StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        };
        let mut p = tensor_to_proto(&TensorData::from_bytes(
            t.dtype,
            t.shape.clone(),
            Vec::new(),
        ));
        p.raw_data = None;
        p.name = (!t.name.is_empty()).then(|| t.name.clone());
        p.doc_string = (!t.doc_string.is_empty()).then(|| t.doc_string.clone());
        p.data_location = Some(DataLocation::External as i32);
        p.external_data = vec![
            entry("location", self.location.clone()),
            entry("offset", offset.to_string()),
            entry("length", bytes.len().to_string()),
        ];
        p
    }

    /// Flushes the data file and renames it to its location.
    pub(crate) fn finish(mut self, dir: &Path) -> Result<(), LoadError> {
        let final_path = dir.join(&self.location);
        let err = |source| LoadError::Write {
            path: final_path.clone(),
            source,
        };
        if let Some(e) = self.error.take() {
            return Err(err(e));
        }
        self.file.flush().map_err(err)?;
        std::fs::rename(&self.tmp_path, &final_path).map_err(err)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for ExternalWriter {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp_path);
        }
    }
}
