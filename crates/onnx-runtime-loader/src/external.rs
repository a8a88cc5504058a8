//! Tensors stored outside the model file (`data_location = EXTERNAL`): resolved against the
//! model's folder, memory-mapped once per file and borrowed without copying. A location that
//! is absolute, climbs with `..`, or resolves (through symlinks) outside the folder is refused,
//! so loading a model never reads a file outside its folder.

use crate::LoadError;
use memmap2::Mmap;
use onnx_runtime_ir::SharedBytes;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// Where external data may come from: the model's folder (canonicalized), or nowhere.
pub(crate) struct ExternalFiles {
    dir: Option<PathBuf>,
    maps: RefCell<HashMap<PathBuf, Arc<Mmap>>>,
}

/// One tensor's `external_data` entries.
pub(crate) struct ExternalRef<'a> {
    pub location: &'a str,
    pub offset: u64,
    pub length: Option<u64>,
}

impl ExternalRef<'_> {
    pub(crate) fn parse(
        entries: &[crate::proto::StringStringEntryProto],
    ) -> Result<ExternalRef<'_>, LoadError> {
        let mut location = None;
        let mut offset = 0;
        let mut length = None;
        for e in entries {
            let value = e.value();
            let number = || {
                value.trim().parse::<u64>().map_err(|_| {
                    LoadError::external(format!(
                        "'{}' is '{value}', not a non-negative integer",
                        e.key()
                    ))
                })
            };
            match e.key() {
                "location" => location = Some(value),
                "offset" => offset = number()?,
                "length" => length = Some(number()?),
                _ => {} // "checksum" and future keys are informative only
            }
        }
        let location = location.filter(|l| !l.is_empty()).ok_or_else(|| {
            LoadError::external("data_location is EXTERNAL but the 'location' key is missing")
        })?;
        Ok(ExternalRef {
            location,
            offset,
            length,
        })
    }
}

impl ExternalFiles {
    /// External data is refused (the model came from bytes without a folder).
    pub(crate) fn none() -> Self {
        ExternalFiles {
            dir: None,
            maps: RefCell::new(HashMap::new()),
        }
    }

    /// External data is read from `dir` and the folders below it.
    pub(crate) fn in_dir(dir: &Path) -> Result<Self, LoadError> {
        let dir = dir.canonicalize().map_err(|source| LoadError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(ExternalFiles {
            dir: Some(dir),
            maps: RefCell::new(HashMap::new()),
        })
    }

    /// The `expected` bytes that `r` names, borrowed from a memory map of the file.
    pub(crate) fn read(&self, r: &ExternalRef, expected: usize) -> Result<SharedBytes, LoadError> {
        let dir = self.dir.as_ref().ok_or_else(|| {
            LoadError::external(format!(
                "the tensor is stored in '{}' but the model was given as bytes without a folder; \
                 load it with Model::load(path) or Model::from_bytes_in_dir",
                r.location
            ))
        })?;
        let map = self.map_file(dir, r.location)?;
        let file_len = map.len() as u64;
        if r.offset > file_len {
            return Err(LoadError::external(format!(
                "offset {} is beyond the end of '{}' ({file_len} bytes); the data file does not \
                 belong to this model or is truncated",
                r.offset, r.location
            )));
        }
        let length = r.length.unwrap_or(file_len - r.offset);
        if length != expected as u64 {
            return Err(LoadError::external(format!(
                "'{}' holds {length} bytes at offset {} but the tensor's type and dims need \
                 {expected} bytes",
                r.location, r.offset
            )));
        }
        if r.offset + length > file_len {
            return Err(LoadError::external(format!(
                "bytes {}..{} are beyond the end of '{}' ({file_len} bytes); the data file is \
                 truncated or does not belong to this model",
                r.offset,
                r.offset + length,
                r.location
            )));
        }
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = map;
        SharedBytes::new(owner, r.offset as usize, length as usize)
            .ok_or_else(|| LoadError::external("range outside the mapped file"))
    }

    fn map_file(&self, dir: &Path, location: &str) -> Result<Arc<Mmap>, LoadError> {
        let rel = Path::new(location);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(LoadError::external(format!(
                "location '{location}' is absolute or contains '..'; external data must be a \
                 relative path inside the model's folder"
            )));
        }
        let full = dir.join(rel);
        let canonical = full.canonicalize().map_err(|e| {
            LoadError::external(format!(
                "cannot open '{}': {e}; put the data file next to the model",
                full.display()
            ))
        })?;
        if !canonical.starts_with(dir) {
            return Err(LoadError::external(format!(
                "location '{location}' resolves to '{}', outside the model's folder '{}' \
                 (through a symbolic link); copy the data file into the folder",
                canonical.display(),
                dir.display()
            )));
        }
        if let Some(m) = self.maps.borrow().get(&canonical) {
            return Ok(m.clone());
        }
        let open_err = |e: std::io::Error| {
            LoadError::external(format!("cannot map '{}': {e}", canonical.display()))
        };
        let file = std::fs::File::open(&canonical).map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        if !meta.is_file() {
            return Err(LoadError::external(format!(
                "'{}' is not a regular file",
                canonical.display()
            )));
        }
        // SAFETY: the mapping is read-only. As with every memory-mapped loader, another
        // process truncating or rewriting the file while the model is alive is undefined
        // behaviour; model files are not expected to change while in use.
        let map = Arc::new(unsafe { Mmap::map(&file) }.map_err(open_err)?);
        self.maps.borrow_mut().insert(canonical, map.clone());
        Ok(map)
    }
}
