//! Conversions between the loader's [`DataValue`] (what `.pb` test data and initializers hold)
//! and the host [`Value`]s kernels exchange.

use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::{DataType, TensorData, ValueType};
use onnx_runtime_loader::data::{self, DataValue};

/// The most bytes a sparse value may expand to when made dense (4 GiB).
const MAX_DENSE_BYTES: usize = 1 << 32;

fn tensor(t: &TensorData) -> Result<Tensor, String> {
    Tensor::from_tensor_data(t)
}

/// A host value from loaded data. `ty` (the declared type, if known) gives the element type
/// of empty sequences.
pub fn value_from_data(v: &DataValue, ty: Option<&ValueType>) -> Result<Value, String> {
    Ok(match v {
        DataValue::Tensor(t) => Value::Tensor(tensor(t)?),
        DataValue::SparseTensor(s) => {
            let dense = data::densify(s, MAX_DENSE_BYTES).map_err(|e| e.to_string())?;
            Value::Tensor(tensor(&dense)?)
        }
        DataValue::Sequence(items) => {
            let elem_ty = match ty {
                Some(ValueType::Sequence(inner)) => Some(inner.as_ref()),
                _ => None,
            };
            if !items.is_empty() && items.iter().all(|i| matches!(i, DataValue::Map { .. })) {
                let mut maps = Vec::with_capacity(items.len());
                for item in items {
                    if let Value::Map { keys, values } = value_from_data(item, elem_ty)? {
                        maps.push((keys, values));
                    }
                }
                return Ok(Value::MapSequence(maps));
            }
            let mut tensors = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match value_from_data(item, elem_ty)? {
                    Value::Tensor(t) => tensors.push(t),
                    other => {
                        return Err(format!(
                            "sequence element {i} is a {}; only sequences of tensors are supported",
                            other.kind_name()
                        ))
                    }
                }
            }
            let dtype = match (tensors.first(), elem_ty) {
                (Some(t), _) => t.dtype(),
                (None, Some(ValueType::Tensor { dtype, .. })) => *dtype,
                (None, _) => DataType::Undefined,
            };
            Value::Sequence {
                dtype,
                items: tensors,
            }
        }
        DataValue::Optional(None) => Value::Optional(None),
        DataValue::Optional(Some(inner)) => {
            let elem_ty = match ty {
                Some(ValueType::Optional(inner)) => Some(inner.as_ref()),
                _ => None,
            };
            Value::Optional(Some(Box::new(value_from_data(inner, elem_ty)?)))
        }
        DataValue::Map { keys, values } => {
            let keys = tensor(keys)?;
            let values = match values.as_ref() {
                DataValue::Tensor(t) => tensor(t)?,
                DataValue::Sequence(items) => {
                    let ts = items
                        .iter()
                        .map(|i| match i {
                            DataValue::Tensor(t) => tensor(t),
                            _ => Err("map values must be tensors".to_string()),
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    concat_flat(&ts)?
                }
                _ => return Err("map values must be tensors".into()),
            };
            Value::Map { keys, values }
        }
    })
}

/// Concatenates tensors of one dtype into a 1-D tensor.
fn concat_flat(items: &[Tensor]) -> Result<Tensor, String> {
    let Some(first) = items.first() else {
        return Ok(Tensor::zeros(DataType::Float32, vec![0]));
    };
    let n: usize = items.iter().map(Tensor::numel).sum();
    if first.dtype() == DataType::String {
        let all: Vec<String> = items.iter().flat_map(|t| t.strings().to_vec()).collect();
        return Ok(Tensor::from_strings(vec![n], all));
    }
    let bytes: Vec<u8> = items.iter().flat_map(|t| t.bytes().to_vec()).collect();
    Tensor::from_bytes(first.dtype(), vec![n], &bytes)
}

/// Loaded data from a host value (for writing outputs as `.pb` files).
pub fn value_to_data(v: &Value, name: &str) -> DataValue {
    match v {
        Value::Tensor(t) => DataValue::Tensor(t.to_tensor_data(name)),
        Value::Sequence { items, .. } => DataValue::Sequence(
            items
                .iter()
                .map(|t| DataValue::Tensor(t.to_tensor_data("")))
                .collect(),
        ),
        Value::Optional(None) => DataValue::Optional(None),
        Value::Optional(Some(inner)) => {
            DataValue::Optional(Some(Box::new(value_to_data(inner, name))))
        }
        Value::Map { keys, values } => DataValue::Map {
            keys: keys.to_tensor_data(""),
            values: Box::new(DataValue::Tensor(values.to_tensor_data(""))),
        },
        Value::MapSequence(maps) => DataValue::Sequence(
            maps.iter()
                .map(|(keys, values)| DataValue::Map {
                    keys: keys.to_tensor_data(""),
                    values: Box::new(DataValue::Tensor(values.to_tensor_data(""))),
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_protos() {
        let t = Tensor::from_vec(vec![2, 2], vec![1.5f32, -2.0, 3.25, 0.0]);
        let seq = Value::Sequence {
            dtype: DataType::Int64,
            items: vec![Tensor::from_vec(vec![3], vec![1i64, 2, 3])],
        };
        let opt = Value::Optional(Some(Box::new(Value::Tensor(t.clone()))));
        for (v, ty) in [
            (
                Value::Tensor(t.clone()),
                ValueType::tensor(DataType::Float32, Default::default()),
            ),
            (
                seq,
                ValueType::Sequence(Box::new(ValueType::Tensor {
                    dtype: DataType::Int64,
                    shape: None,
                })),
            ),
            (
                opt,
                ValueType::Optional(Box::new(ValueType::Tensor {
                    dtype: DataType::Float32,
                    shape: None,
                })),
            ),
        ] {
            let bytes = data::write_value(&value_to_data(&v, "x"));
            let back = data::read_value(&bytes, &ty).unwrap();
            let back = value_from_data(&back, Some(&ty)).unwrap();
            assert_eq!(
                crate::describe_value(&back),
                crate::describe_value(&v),
                "{ty:?}"
            );
        }
        let empty = DataValue::Sequence(vec![]);
        let ty = ValueType::Sequence(Box::new(ValueType::Tensor {
            dtype: DataType::Float16,
            shape: None,
        }));
        match value_from_data(&empty, Some(&ty)).unwrap() {
            Value::Sequence { dtype, items } => {
                assert_eq!(dtype, DataType::Float16);
                assert!(items.is_empty());
            }
            other => panic!("{other:?}"),
        }
    }
}
