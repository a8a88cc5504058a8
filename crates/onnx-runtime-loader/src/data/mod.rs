//! Values as the ONNX test data stores them (`TensorProto`, `SequenceProto`, `OptionalProto`,
//! `MapProto` files such as `test_data_set_0/input_0.pb`), read into [`DataValue`]s and written
//! back.

mod sparse;
pub(crate) mod tensor;

pub use sparse::densify;
pub(crate) use sparse::{sparse_from_proto, sparse_to_proto};

use crate::error::{decode_error, Within};
use crate::external::ExternalFiles;
use crate::proto::{self, sequence_proto::DataType as ElemKind};
use crate::LoadError;
use onnx_runtime_ir::{DataType, SparseTensorData, TensorBytes, TensorData, ValueType};
use prost::Message;

/// A value of any type ONNX graphs pass around.
#[derive(Clone, Debug, PartialEq)]
pub enum DataValue {
    Tensor(TensorData),
    SparseTensor(SparseTensorData),
    Sequence(Vec<DataValue>),
    /// `None` is an empty optional.
    Optional(Option<Box<DataValue>>),
    /// Keys as a 1-D tensor (integer or string), values as a sequence of the same length.
    Map {
        keys: TensorData,
        values: Box<DataValue>,
    },
}

/// Reads a serialized `TensorProto` (external data is refused: there is no folder).
pub fn read_tensor_proto(bytes: &[u8]) -> Result<TensorData, LoadError> {
    let p = proto::TensorProto::decode(bytes)
        .map_err(|e| decode_error("tensor", e).with_origin("<tensor>"))?;
    tensor::tensor_from_proto(p, &ExternalFiles::none()).map_err(|e| e.with_origin("<tensor>"))
}

/// Reads a serialized `SparseTensorProto`.
pub fn read_sparse_tensor_proto(bytes: &[u8]) -> Result<DataValue, LoadError> {
    let p = proto::SparseTensorProto::decode(bytes)
        .map_err(|e| decode_error("sparse tensor", e).with_origin("<sparse tensor>"))?;
    sparse_from_proto(p, &ExternalFiles::none())
        .map(DataValue::SparseTensor)
        .map_err(|e| e.with_origin("<sparse tensor>"))
}

/// Reads a serialized `SequenceProto`.
pub fn read_sequence_proto(bytes: &[u8]) -> Result<DataValue, LoadError> {
    let p = proto::SequenceProto::decode(bytes)
        .map_err(|e| decode_error("sequence", e).with_origin("<sequence>"))?;
    sequence_from_proto(p).map_err(|e| e.with_origin("<sequence>"))
}

/// Reads a serialized `OptionalProto`.
pub fn read_optional_proto(bytes: &[u8]) -> Result<DataValue, LoadError> {
    let p = proto::OptionalProto::decode(bytes)
        .map_err(|e| decode_error("optional", e).with_origin("<optional>"))?;
    optional_from_proto(p).map_err(|e| e.with_origin("<optional>"))
}

/// Reads a serialized `MapProto`.
pub fn read_map_proto(bytes: &[u8]) -> Result<DataValue, LoadError> {
    let p =
        proto::MapProto::decode(bytes).map_err(|e| decode_error("map", e).with_origin("<map>"))?;
    map_from_proto(p).map_err(|e| e.with_origin("<map>"))
}

/// Reads a value serialized as the proto that `ty` calls for.
pub fn read_value(bytes: &[u8], ty: &ValueType) -> Result<DataValue, LoadError> {
    match ty {
        ValueType::Tensor { .. } => read_tensor_proto(bytes).map(DataValue::Tensor),
        ValueType::SparseTensor { .. } => read_sparse_tensor_proto(bytes),
        ValueType::Sequence(_) => read_sequence_proto(bytes),
        ValueType::Optional(_) => read_optional_proto(bytes),
        ValueType::Map { .. } => read_map_proto(bytes),
    }
}

/// Serializes a tensor as a `TensorProto` (`raw_data`, or `string_data` for strings).
pub fn write_tensor_proto(t: &TensorData) -> Vec<u8> {
    tensor::tensor_to_proto(t).encode_to_vec()
}

/// Serializes a value as the proto its kind calls for (the inverse of [`read_value`]).
pub fn write_value(v: &DataValue) -> Vec<u8> {
    match v {
        DataValue::Tensor(t) => write_tensor_proto(t),
        DataValue::SparseTensor(s) => sparse_to_proto(s).encode_to_vec(),
        DataValue::Sequence(_) => sequence_to_proto(v).encode_to_vec(),
        DataValue::Optional(_) => optional_to_proto(v).encode_to_vec(),
        DataValue::Map { .. } => map_to_proto(v).encode_to_vec(),
    }
}

fn sequence_from_proto(p: proto::SequenceProto) -> Result<DataValue, LoadError> {
    let files = ExternalFiles::none();
    let name = p.name().to_string();
    let kind = p.elem_type;
    let mut out = Vec::new();
    let place = || format!("sequence '{name}'");
    // The kinds that are present must agree with elem_type (when it is set).
    let lists = [
        (ElemKind::Tensor, !p.tensor_values.is_empty()),
        (ElemKind::SparseTensor, !p.sparse_tensor_values.is_empty()),
        (ElemKind::Sequence, !p.sequence_values.is_empty()),
        (ElemKind::Map, !p.map_values.is_empty()),
        (ElemKind::Optional, !p.optional_values.is_empty()),
    ];
    let present: Vec<_> = lists.iter().filter(|(_, p)| *p).map(|(k, _)| *k).collect();
    if present.len() > 1 || kind.is_some_and(|k| present.first().is_some_and(|p| *p as i32 != k)) {
        return Err(LoadError::invalid(format!(
            "elem_type {kind:?} does not match the element lists present ({present:?})"
        )))
        .within(place);
    }
    for t in p.tensor_values {
        out.push(DataValue::Tensor(
            tensor::tensor_from_proto(t, &files).within(place)?,
        ));
    }
    for s in p.sparse_tensor_values {
        out.push(DataValue::SparseTensor(
            sparse_from_proto(s, &files).within(place)?,
        ));
    }
    for s in p.sequence_values {
        out.push(sequence_from_proto(s).within(place)?);
    }
    for m in p.map_values {
        out.push(map_from_proto(m).within(place)?);
    }
    for o in p.optional_values {
        out.push(optional_from_proto(o).within(place)?);
    }
    Ok(DataValue::Sequence(out))
}

fn optional_from_proto(p: proto::OptionalProto) -> Result<DataValue, LoadError> {
    let files = ExternalFiles::none();
    let name = p.name().to_string();
    let place = || format!("optional '{name}'");
    let inner = if let Some(t) = p.tensor_value {
        Some(DataValue::Tensor(
            tensor::tensor_from_proto(t, &files).within(place)?,
        ))
    } else if let Some(s) = p.sparse_tensor_value {
        Some(DataValue::SparseTensor(
            sparse_from_proto(s, &files).within(place)?,
        ))
    } else if let Some(s) = p.sequence_value {
        Some(sequence_from_proto(s).within(place)?)
    } else if let Some(m) = p.map_value {
        Some(map_from_proto(m).within(place)?)
    } else if let Some(o) = p.optional_value {
        Some(optional_from_proto(*o).within(place)?)
    } else {
        None
    };
    Ok(DataValue::Optional(inner.map(Box::new)))
}

fn map_from_proto(p: proto::MapProto) -> Result<DataValue, LoadError> {
    let name = p.name().to_string();
    let place = || format!("map '{name}'");
    let key = tensor::dtype_from_code(p.key_type()).within(place)?;
    let keys = if key == DataType::String {
        let s: Vec<String> = p
            .string_keys
            .into_iter()
            .map(|b| tensor::text(&b))
            .collect();
        TensorData::from_strings(vec![s.len()], s)
    } else if key.is_integer() && key.element_size().is_some() {
        let size = key.element_size().unwrap_or(8);
        let bytes: Vec<u8> = p
            .keys
            .iter()
            .flat_map(|k| k.to_le_bytes().into_iter().take(size))
            .collect();
        TensorData::from_bytes(key, vec![p.keys.len()], bytes)
    } else {
        return Err(LoadError::invalid(format!(
            "map keys of type {key} are not allowed (integers or strings)"
        )))
        .within(place);
    };
    let values = match p.values {
        Some(v) => sequence_from_proto(v).within(place)?,
        None => DataValue::Sequence(Vec::new()),
    };
    let n = match &values {
        DataValue::Sequence(v) => v.len(),
        _ => 0,
    };
    if n != keys.numel() {
        return Err(LoadError::invalid(format!(
            "{} keys but {n} values",
            keys.numel()
        )))
        .within(place);
    }
    Ok(DataValue::Map {
        keys,
        values: Box::new(values),
    })
}

fn kind_of(v: &DataValue) -> ElemKind {
    match v {
        DataValue::Tensor(_) => ElemKind::Tensor,
        DataValue::SparseTensor(_) => ElemKind::SparseTensor,
        DataValue::Sequence(_) => ElemKind::Sequence,
        DataValue::Optional(_) => ElemKind::Optional,
        DataValue::Map { .. } => ElemKind::Map,
    }
}

fn sequence_to_proto(v: &DataValue) -> proto::SequenceProto {
    let mut p = proto::SequenceProto::default();
    let DataValue::Sequence(items) = v else {
        return p;
    };
    p.elem_type = Some(items.first().map_or(ElemKind::Tensor, kind_of) as i32);
    for item in items {
        match item {
            DataValue::Tensor(t) => p.tensor_values.push(tensor::tensor_to_proto(t)),
            DataValue::SparseTensor(s) => p.sparse_tensor_values.push(sparse_to_proto(s)),
            DataValue::Sequence(_) => p.sequence_values.push(sequence_to_proto(item)),
            DataValue::Map { .. } => p.map_values.push(map_to_proto(item)),
            DataValue::Optional(_) => p.optional_values.push(optional_to_proto(item)),
        }
    }
    p
}

fn optional_to_proto(v: &DataValue) -> proto::OptionalProto {
    let mut p = proto::OptionalProto::default();
    let DataValue::Optional(Some(inner)) = v else {
        p.elem_type = Some(0);
        return p;
    };
    p.elem_type = Some(kind_of(inner) as i32);
    match inner.as_ref() {
        DataValue::Tensor(t) => p.tensor_value = Some(tensor::tensor_to_proto(t)),
        DataValue::SparseTensor(s) => p.sparse_tensor_value = Some(sparse_to_proto(s)),
        DataValue::Sequence(_) => p.sequence_value = Some(sequence_to_proto(inner)),
        DataValue::Map { .. } => p.map_value = Some(map_to_proto(inner)),
        DataValue::Optional(_) => p.optional_value = Some(Box::new(optional_to_proto(inner))),
    }
    p
}

fn map_to_proto(v: &DataValue) -> proto::MapProto {
    let mut p = proto::MapProto::default();
    let DataValue::Map { keys, values } = v else {
        return p;
    };
    p.key_type = Some(keys.dtype.onnx_code());
    match &keys.data {
        TensorBytes::Strings(s) => {
            p.string_keys = s
                .iter()
                .map(|s| bytes::Bytes::copy_from_slice(s.as_bytes()))
                .collect()
        }
        _ => {
            let size = keys.dtype.element_size().unwrap_or(8).max(1);
            p.keys = keys
                .bytes()
                .chunks_exact(size)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b[..c.len()].copy_from_slice(c);
                    let v = i64::from_le_bytes(b);
                    // Sign-extend signed keys narrower than 64 bits.
                    let shift = 64 - 8 * c.len() as u32;
                    if keys.dtype.is_signed_int() && shift > 0 {
                        (v << shift) >> shift
                    } else {
                        v
                    }
                })
                .collect();
        }
    }
    p.values = Some(sequence_to_proto(values));
    p
}
