//! `TensorProto` <-> [`TensorData`]: every element type, from the typed fields, `raw_data` or
//! external data, into little-endian packed bytes (sub-byte types packed as ONNX packs them).

use crate::error::Within;
use crate::external::{ExternalFiles, ExternalRef};
use crate::proto::{self, tensor_proto::DataLocation};
use crate::LoadError;
use bytes::Bytes;
use onnx_runtime_ir::{DataType, SharedBytes, TensorBytes, TensorData};
use std::sync::Arc;

/// Tensors at least this large borrow the decoded buffer (for a memory-mapped model: the
/// file) instead of copying it.
const BORROW_BYTES: usize = 4096;

/// Lets a `Bytes` share the buffer a [`SharedBytes`] borrows.
struct Borrowed(SharedBytes);

impl AsRef<[u8]> for Borrowed {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// UTF-8 text from protobuf bytes; invalid sequences become U+FFFD.
pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Tensor storage over `raw`: borrowed when large, copied when small.
fn shared(raw: Bytes) -> TensorBytes {
    let len = raw.len();
    if len < BORROW_BYTES {
        return TensorBytes::Owned(raw.to_vec());
    }
    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(raw);
    match SharedBytes::new(owner, 0, len) {
        Some(s) => TensorBytes::Shared(s),
        None => unreachable!("a buffer's full range is inside it"),
    }
}

/// The element type named by an ONNX type code.
pub(crate) fn dtype_from_code(code: i32) -> Result<DataType, LoadError> {
    DataType::from_onnx(code).ok_or_else(|| {
        LoadError::invalid(format!(
            "unknown element type code {code} (this runtime knows ONNX types 0..=26); the model \
             needs a newer runtime or is corrupted"
        ))
    })
}

/// Tensor dims as sizes, and their element count, refusing negative dims and overflow.
pub(crate) fn checked_dims(dims: &[i64]) -> Result<(Vec<usize>, usize), LoadError> {
    let mut shape = Vec::with_capacity(dims.len());
    let mut numel: usize = 1;
    for &d in dims {
        let d = usize::try_from(d)
            .map_err(|_| LoadError::invalid(format!("dims {dims:?} has a negative dimension")))?;
        numel = numel.checked_mul(d).ok_or_else(|| {
            LoadError::invalid(format!("dims {dims:?} overflow: too many elements"))
        })?;
        shape.push(d);
    }
    Ok((shape, numel))
}

/// Converts a tensor, taking its buffers without copying where possible.
pub(crate) fn tensor_from_proto(
    mut t: proto::TensorProto,
    files: &ExternalFiles,
) -> Result<TensorData, LoadError> {
    let name = t.name.take().unwrap_or_default();
    tensor_body(&mut t, files)
        .within(|| format!("tensor '{name}'"))
        .map(|(dtype, shape, data)| TensorData {
            name,
            dtype,
            shape,
            data,
            doc_string: t.doc_string.take().unwrap_or_default(),
        })
}

fn tensor_body(
    t: &mut proto::TensorProto,
    files: &ExternalFiles,
) -> Result<(DataType, Vec<usize>, TensorBytes), LoadError> {
    let dtype = dtype_from_code(t.data_type())?;
    if dtype == DataType::Undefined {
        return Err(LoadError::invalid(
            "data_type is missing (UNDEFINED); set the tensor's element type",
        ));
    }
    let (shape, numel) = checked_dims(&t.dims)?;
    if t.segment.is_some() {
        return Err(LoadError::invalid(
            "segmented tensors (TensorProto.segment) are not supported; store the whole tensor",
        ));
    }
    let external = t.data_location == Some(DataLocation::External as i32);
    if dtype == DataType::String {
        if external {
            return Err(LoadError::invalid(
                "string tensors cannot be stored as external data",
            ));
        }
        if t.string_data.len() != numel {
            return Err(count_error(
                "string_data",
                t.string_data.len(),
                numel,
                &shape,
            ));
        }
        let strings = std::mem::take(&mut t.string_data)
            .into_iter()
            .map(|b| text(&b))
            .collect();
        return Ok((dtype, shape, TensorBytes::Strings(strings)));
    }
    let nbytes = dtype.checked_storage_bytes(numel).ok_or_else(|| {
        LoadError::invalid(format!(
            "{numel} elements of {dtype} overflow the address space"
        ))
    })?;
    if external {
        let r = ExternalRef::parse(&t.external_data)?;
        let bytes = files.read(&r, nbytes)?;
        return Ok((dtype, shape, TensorBytes::Shared(bytes)));
    }
    let typed_len = t.float_data.len()
        + t.int32_data.len()
        + t.int64_data.len()
        + t.double_data.len()
        + t.uint64_data.len()
        + t.string_data.len();
    if let Some(raw) = t
        .raw_data
        .take()
        .filter(|r| !r.is_empty() || typed_len == 0)
    {
        if raw.len() != nbytes {
            return Err(LoadError::invalid(format!(
                "raw_data has {} bytes but {numel} elements of {dtype} (dims {shape:?}) need \
                 {nbytes}; the tensor is truncated or its dims are wrong",
                raw.len()
            )));
        }
        return Ok((dtype, shape, shared(raw)));
    }
    let bytes = typed_to_bytes(t, dtype, numel, &shape)?;
    debug_assert_eq!(bytes.len(), nbytes);
    Ok((dtype, shape, TensorBytes::Owned(bytes)))
}

fn count_error(field: &str, have: usize, numel: usize, shape: &[usize]) -> LoadError {
    LoadError::invalid(format!(
        "{field} holds {have} values but dims {shape:?} need {numel}; the tensor is truncated or \
         its dims are wrong"
    ))
}

/// Packs a typed field (`float_data`, `int32_data`, ...) into little-endian bytes.
fn typed_to_bytes(
    t: &proto::TensorProto,
    dtype: DataType,
    numel: usize,
    shape: &[usize],
) -> Result<Vec<u8>, LoadError> {
    use DataType::*;
    let check = |field: &str, have: usize, want: usize| {
        if have == want {
            Ok(())
        } else {
            Err(count_error(field, have, want, shape))
        }
    };
    let complex = if dtype.is_complex() { 2 } else { 1 };
    let want = numel
        .checked_mul(complex)
        .ok_or_else(|| LoadError::invalid("too many elements"))?;
    Ok(match dtype {
        Float32 | Complex64 => {
            check("float_data", t.float_data.len(), want)?;
            t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        Float64 | Complex128 => {
            check("double_data", t.double_data.len(), want)?;
            t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        Int64 => {
            check("int64_data", t.int64_data.len(), want)?;
            t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        Uint64 => {
            check("uint64_data", t.uint64_data.len(), want)?;
            t.uint64_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        Uint32 => {
            check("uint64_data", t.uint64_data.len(), want)?;
            t.uint64_data
                .iter()
                .flat_map(|&v| (v as u32).to_le_bytes())
                .collect()
        }
        Int32 => {
            check("int32_data", t.int32_data.len(), want)?;
            t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        Int16 | Uint16 | Float16 | BFloat16 => {
            check("int32_data", t.int32_data.len(), want)?;
            t.int32_data
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect()
        }
        Int8 | Uint8 | Bool | Float8E4M3FN | Float8E4M3FNUZ | Float8E5M2 | Float8E5M2FNUZ
        | Float8E8M0 => {
            check("int32_data", t.int32_data.len(), want)?;
            t.int32_data.iter().map(|&v| v as u8).collect()
        }
        Int4 | Uint4 | Float4E2M1 | Int2 | Uint2 => {
            // Each int32 carries one packed byte (two 4-bit or four 2-bit elements).
            let packed = dtype.storage_bytes(numel);
            check("int32_data (packed bytes)", t.int32_data.len(), packed)?;
            t.int32_data.iter().map(|&v| v as u8).collect()
        }
        String | Undefined => unreachable!("handled by the caller"),
    })
}

/// Writes `t` as a `TensorProto`: `raw_data` for fixed-width types, `string_data` for strings.
pub(crate) fn tensor_to_proto(t: &TensorData) -> proto::TensorProto {
    let mut p = proto::TensorProto {
        dims: t.shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype.onnx_code()),
        name: (!t.name.is_empty()).then(|| t.name.clone()),
        doc_string: (!t.doc_string.is_empty()).then(|| t.doc_string.clone()),
        ..Default::default()
    };
    match &t.data {
        TensorBytes::Strings(s) => {
            p.string_data = s
                .iter()
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect()
        }
        // Borrowed bytes (a memory map) are written without another copy.
        TensorBytes::Shared(b) => p.raw_data = Some(Bytes::from_owner(Borrowed(b.clone()))),
        TensorBytes::Owned(b) => p.raw_data = Some(Bytes::copy_from_slice(b)),
    }
    p
}
