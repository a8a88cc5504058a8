//! `TypeProto` <-> [`ValueType`] and `TensorShapeProto` <-> [`Shape`].

use crate::data::tensor::dtype_from_code;
use crate::proto::{self, tensor_shape_proto::dimension::Value as DimValue, type_proto};
use crate::LoadError;
use onnx_runtime_ir::{DataType, Dim, Shape, ValueType};

/// The value type, or `None` when the model leaves it open (no type, or an opaque type).
pub(crate) fn type_from_proto(t: &proto::TypeProto) -> Result<Option<ValueType>, LoadError> {
    use type_proto::Value;
    let Some(value) = &t.value else {
        return Ok(None);
    };
    Ok(Some(match value {
        Value::TensorType(tt) => ValueType::Tensor {
            dtype: dtype_from_code(tt.elem_type())?,
            shape: tt.shape.as_ref().map(shape_from_proto),
        },
        Value::SparseTensorType(tt) => ValueType::SparseTensor {
            dtype: dtype_from_code(tt.elem_type())?,
            shape: tt.shape.as_ref().map(shape_from_proto),
        },
        Value::SequenceType(s) => match inner(&s.elem_type)? {
            Some(e) => ValueType::Sequence(Box::new(e)),
            None => return Ok(None),
        },
        Value::OptionalType(s) => match inner(&s.elem_type)? {
            Some(e) => ValueType::Optional(Box::new(e)),
            None => return Ok(None),
        },
        Value::MapType(m) => match inner(&m.value_type)? {
            Some(e) => ValueType::Map {
                key: dtype_from_code(m.key_type())?,
                value: Box::new(e),
            },
            None => return Ok(None),
        },
        Value::OpaqueType(_) => return Ok(None),
    }))
}

fn inner(t: &Option<Box<proto::TypeProto>>) -> Result<Option<ValueType>, LoadError> {
    match t {
        Some(t) => type_from_proto(t),
        None => Ok(None),
    }
}

/// A shape; a negative or missing `dim_value` is an unknown dimension (`Dim::Symbolic("")`).
pub(crate) fn shape_from_proto(s: &proto::TensorShapeProto) -> Shape {
    Shape(
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(DimValue::DimValue(v)) if *v >= 0 => match usize::try_from(*v) {
                    Ok(v) => Dim::Static(v),
                    Err(_) => Dim::Symbolic(String::new()),
                },
                Some(DimValue::DimParam(p)) => Dim::Symbolic(p.clone()),
                _ => Dim::Symbolic(String::new()),
            })
            .collect(),
    )
}

pub(crate) fn shape_to_proto(s: &Shape) -> proto::TensorShapeProto {
    proto::TensorShapeProto {
        dim: s
            .0
            .iter()
            .map(|d| proto::tensor_shape_proto::Dimension {
                value: match d {
                    Dim::Static(v) => Some(DimValue::DimValue(*v as i64)),
                    Dim::Symbolic(p) if p.is_empty() => None,
                    Dim::Symbolic(p) => Some(DimValue::DimParam(p.clone())),
                },
                denotation: None,
            })
            .collect(),
    }
}

pub(crate) fn type_to_proto(t: &ValueType) -> proto::TypeProto {
    use type_proto::Value;
    let code = |d: DataType| Some(d.onnx_code());
    let value = match t {
        ValueType::Tensor { dtype, shape } => Value::TensorType(type_proto::Tensor {
            elem_type: code(*dtype),
            shape: shape.as_ref().map(shape_to_proto),
        }),
        ValueType::SparseTensor { dtype, shape } => {
            Value::SparseTensorType(type_proto::SparseTensor {
                elem_type: code(*dtype),
                shape: shape.as_ref().map(shape_to_proto),
            })
        }
        ValueType::Sequence(e) => Value::SequenceType(Box::new(type_proto::Sequence {
            elem_type: Some(Box::new(type_to_proto(e))),
        })),
        ValueType::Optional(e) => Value::OptionalType(Box::new(type_proto::Optional {
            elem_type: Some(Box::new(type_to_proto(e))),
        })),
        ValueType::Map { key, value } => Value::MapType(Box::new(type_proto::Map {
            key_type: code(*key),
            value_type: Some(Box::new(type_to_proto(value))),
        })),
    };
    proto::TypeProto {
        value: Some(value),
        denotation: None,
    }
}
