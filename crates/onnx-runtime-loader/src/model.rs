//! [`Model`]: a loaded `.onnx` file (graph, metadata, functions) and its loading options.

use crate::decode::{decode_function, decode_graph, decode_opsets, Decoder};
use crate::encode::{self, Encoder};
use crate::error::{decode_error, Within};
use crate::external::ExternalFiles;
use crate::external_writer::{ExternalDataOptions, ExternalWriter};
use crate::function::Function;
use crate::{inline, proto, LoadError};
use onnx_runtime_ir::Graph;
use prost::Message;
use std::cell::RefCell;
use std::path::Path;

/// How a model is loaded.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Replace calls of model-local functions by their bodies (default `true`). The functions
    /// stay in [`Model::functions`] either way.
    pub inline_functions: bool,
    /// How deep subgraphs (If/Loop/Scan bodies) and nested function calls may go.
    pub max_graph_depth: usize,
    /// The largest total size of the dense forms of the sparse initializers, in bytes.
    pub max_dense_sparse_bytes: usize,
    /// How much inlining may add, in (estimated) bytes of nodes and attributes, per byte of
    /// model file, plus [`Self::max_inlined_bytes_base`]; bounds the growth of hostile,
    /// exponentially nested function calls.
    pub max_inlined_bytes_per_byte: usize,
    pub max_inlined_bytes_base: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            inline_functions: true,
            max_graph_depth: 64,
            max_dense_sparse_bytes: 1 << 30,
            max_inlined_bytes_per_byte: 16,
            max_inlined_bytes_base: 64 << 20,
        }
    }
}

impl LoadOptions {
    /// The options of a faithful load: functions are not inlined.
    pub fn without_inlining() -> Self {
        LoadOptions {
            inline_functions: false,
            ..Default::default()
        }
    }
}

/// A model: its main graph, the `ModelProto` metadata and its model-local functions.
///
/// `training_info`, device `configuration`s, node device configurations, `metadata_props` of
/// nodes, values and tensors, quantization annotations and type denotations are not kept.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub graph: Graph,
    pub ir_version: i64,
    pub producer_name: String,
    pub producer_version: String,
    pub domain: String,
    pub model_version: i64,
    pub doc_string: String,
    pub metadata_props: Vec<(String, String)>,
    /// Model-local functions as loaded (kept whether or not they were inlined).
    pub functions: Vec<Function>,
}

/// The IR version a model written for `opset` (of the default domain) needs.
fn ir_version_for(opset: Option<u64>) -> i64 {
    match opset {
        Some(v) if v >= 25 => 13,
        Some(24) => 12,
        Some(23) => 11,
        Some(21..=22) => 10,
        Some(19..=20) => 9,
        Some(14..=18) => 8,
        _ => 7,
    }
}

impl Model {
    /// A model around a copy of `graph`, with the IR version its default-domain opset needs.
    pub fn new(graph: &Graph) -> Model {
        Model {
            ir_version: ir_version_for(graph.opset("")),
            producer_name: "onnx-runtime".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            domain: String::new(),
            model_version: 0,
            doc_string: String::new(),
            metadata_props: Vec::new(),
            functions: Vec::new(),
            graph: graph.clone(),
        }
    }

    /// Loads a model file (memory-mapped); external data is read from the model's folder.
    pub fn load(path: impl AsRef<Path>) -> Result<Model, LoadError> {
        Self::load_with(path, &LoadOptions::default())
    }

    /// Loads a model file without inlining its functions (what is loaded is what the file says).
    pub fn load_without_inlining(path: impl AsRef<Path>) -> Result<Model, LoadError> {
        Self::load_with(path, &LoadOptions::without_inlining())
    }

    pub fn load_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Model, LoadError> {
        let path = path.as_ref();
        let io = |source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::other("not a regular file")));
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let files = ExternalFiles::in_dir(dir)?;
        let origin = path.display().to_string();
        if meta.len() == 0 {
            return Self::decode(&[][..], &files, options).map_err(|e| e.with_origin(&origin));
        }
        // SAFETY: a read-only mapping of the model file. Large tensors keep borrowing it after
        // loading (no copy); as with every memory-mapped loader, the file must not be
        // truncated or rewritten in place while the model is alive ([`Model::save`] replaces
        // files instead of rewriting them).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::decode(bytes::Bytes::from_owner(map), &files, options)
            .map_err(|e| e.with_origin(&origin))
    }

    /// Loads a model from bytes; tensors stored as external data are refused (no folder).
    pub fn from_bytes(bytes: &[u8]) -> Result<Model, LoadError> {
        Self::from_bytes_with(bytes, None, &LoadOptions::default())
    }

    /// Loads a model from bytes, reading external data from `dir`.
    pub fn from_bytes_in_dir(bytes: &[u8], dir: &Path) -> Result<Model, LoadError> {
        Self::from_bytes_with(bytes, Some(dir), &LoadOptions::default())
    }

    pub fn from_bytes_with(
        bytes: &[u8],
        dir: Option<&Path>,
        options: &LoadOptions,
    ) -> Result<Model, LoadError> {
        let files = match dir {
            Some(d) => ExternalFiles::in_dir(d)?,
            None => ExternalFiles::none(),
        };
        Self::decode(bytes, &files, options).map_err(|e| e.with_origin("<model bytes>"))
    }

    fn decode(
        bytes: impl bytes::Buf,
        files: &ExternalFiles,
        options: &LoadOptions,
    ) -> Result<Model, LoadError> {
        let file_len = bytes.remaining();
        let mut m = proto::ModelProto::decode(bytes).map_err(|e| decode_error("model", e))?;
        let d = Decoder::new(files, options);
        let opsets = decode_opsets(&m.opset_import)?;
        let functions = std::mem::take(&mut m.functions)
            .into_iter()
            .map(|f| {
                let name = format!("function '{}::{}'", f.domain(), f.name());
                decode_function(&d, f).within(|| name)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut seen = std::collections::HashSet::new();
        for f in &functions {
            if !seen.insert((&f.domain, &f.name, &f.overload)) {
                return Err(LoadError::invalid(format!(
                    "function '{}::{}' (overload '{}') is defined twice; remove one",
                    f.domain, f.name, f.overload
                )));
            }
        }
        let g = m.graph.take().ok_or_else(|| {
            LoadError::invalid("the model has no graph; the file is empty or not an ONNX model")
        })?;
        let gname = g.name().to_string();
        let mut graph = decode_graph(&d, g, None, &opsets).within(|| format!("graph '{gname}'"))?;
        if options.inline_functions && !functions.is_empty() {
            let budget = options
                .max_inlined_bytes_base
                .saturating_add(file_len.saturating_mul(options.max_inlined_bytes_per_byte));
            inline::inline_functions(&mut graph, &functions, options.max_graph_depth, budget)?;
        }
        let model_version = m.model_version();
        Ok(Model {
            graph,
            ir_version: m.ir_version(),
            producer_name: m.producer_name.unwrap_or_default(),
            producer_version: m.producer_version.unwrap_or_default(),
            domain: m.domain.unwrap_or_default(),
            model_version,
            doc_string: m.doc_string.unwrap_or_default(),
            metadata_props: m
                .metadata_props
                .into_iter()
                .map(|e| (e.key.unwrap_or_default(), e.value.unwrap_or_default()))
                .collect(),
            functions,
        })
    }

    /// The model as `ModelProto` bytes. Tensors that were external data are written inline.
    pub fn to_bytes(&self) -> Result<Vec<u8>, LoadError> {
        encode::encode_model(self)
    }

    /// Writes the model to `path` (see [`Model::to_bytes`]). The file is written next to
    /// `path` and renamed over it, so saving over the file a model was loaded from (and still
    /// borrows tensors from) is safe.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), LoadError> {
        write_replacing(path.as_ref(), &self.to_bytes()?)
    }

    /// Writes the model to `path` with tensors of `options.threshold` bytes or more in the
    /// data file `options.location` next to it (how models past 2 GiB are stored). Both
    /// files are written aside and renamed into place.
    pub fn save_with_external_data(
        &self,
        path: impl AsRef<Path>,
        options: &ExternalDataOptions,
    ) -> Result<(), LoadError> {
        let path = path.as_ref();
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let encoder = Encoder {
            external: Some(RefCell::new(ExternalWriter::create(dir, options)?)),
        };
        let bytes = encoder.model(self)?;
        if let Some(writer) = encoder.external {
            writer.into_inner().finish(dir)?;
        }
        write_replacing(path, &bytes)
    }
}

/// Writes `bytes` beside `path`, then renames the file over `path`.
fn write_replacing(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    if let Err(source) = std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(LoadError::Write {
            path: path.to_path_buf(),
            source,
        });
    }
    Ok(())
}
