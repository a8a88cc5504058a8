//! Tensor data held by the IR (initializers, constant attributes) and value types.

use crate::{DataType, Shape};
use std::fmt;
use std::sync::Arc;

/// Bytes owned elsewhere (for example a memory-mapped file) that a tensor borrows a range of.
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    offset: usize,
    len: usize,
}

impl SharedBytes {
    /// A view of `owner[offset..offset + len]`; `None` if the range is outside `owner`.
    pub fn new(
        owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
        offset: usize,
        len: usize,
    ) -> Option<Self> {
        let end = offset.checked_add(len)?;
        if end > owner.as_ref().as_ref().len() {
            return None;
        }
        Some(SharedBytes { owner, offset, len })
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.owner.as_ref().as_ref()[self.offset..self.offset + self.len]
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({} bytes at {})", self.len, self.offset)
    }
}

/// The storage behind a [`TensorData`].
#[derive(Clone, Debug)]
pub enum TensorBytes {
    /// Little-endian packed elements owned by the tensor.
    Owned(Vec<u8>),
    /// Little-endian packed elements borrowed from a shared buffer (e.g. a memory map).
    Shared(SharedBytes),
    /// One string per element (for `DataType::String`).
    Strings(Vec<String>),
}

/// A constant tensor: an initializer or a tensor-valued attribute.
#[derive(Clone, Debug)]
pub struct TensorData {
    pub name: String,
    pub dtype: DataType,
    pub shape: Vec<usize>,
    pub data: TensorBytes,
    pub doc_string: String,
}

impl TensorData {
    /// A tensor of `dtype` and `shape` over little-endian packed `bytes`.
    pub fn from_bytes(dtype: DataType, shape: Vec<usize>, bytes: Vec<u8>) -> Self {
        TensorData {
            name: String::new(),
            dtype,
            shape,
            data: TensorBytes::Owned(bytes),
            doc_string: String::new(),
        }
    }

    pub fn from_strings(shape: Vec<usize>, strings: Vec<String>) -> Self {
        TensorData {
            name: String::new(),
            dtype: DataType::String,
            shape,
            data: TensorBytes::Strings(strings),
            doc_string: String::new(),
        }
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The packed bytes; empty for string tensors.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            TensorBytes::Owned(v) => v,
            TensorBytes::Shared(s) => s.as_slice(),
            TensorBytes::Strings(_) => &[],
        }
    }

    pub fn strings(&self) -> Option<&[String]> {
        match &self.data {
            TensorBytes::Strings(s) => Some(s),
            _ => None,
        }
    }

    /// Integer values of an int32/int64/uint8.. tensor widened to i64 (for shape-like constants).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        let b = self.bytes();
        let v = match self.dtype {
            DataType::Int64 => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            DataType::Int32 => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
            DataType::Int8 => b.iter().map(|&x| x as i8 as i64).collect(),
            DataType::Uint8 | DataType::Bool => b.iter().map(|&x| x as i64).collect(),
            _ => return None,
        };
        Some(v)
    }
}

impl PartialEq for TensorData {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.dtype == other.dtype
            && self.shape == other.shape
            && self.doc_string == other.doc_string
            && match (&self.data, &other.data) {
                (TensorBytes::Strings(a), TensorBytes::Strings(b)) => a == b,
                (TensorBytes::Strings(_), _) | (_, TensorBytes::Strings(_)) => false,
                _ => self.bytes() == other.bytes(),
            }
    }
}

/// The type of a graph value: tensors and the containers ONNX allows around them.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueType {
    /// A dense tensor; `shape` is `None` when even the rank is unknown.
    Tensor {
        dtype: DataType,
        shape: Option<Shape>,
    },
    SparseTensor {
        dtype: DataType,
        shape: Option<Shape>,
    },
    Sequence(Box<ValueType>),
    Optional(Box<ValueType>),
    Map {
        key: DataType,
        value: Box<ValueType>,
    },
}

impl ValueType {
    pub fn tensor(dtype: DataType, shape: Shape) -> Self {
        ValueType::Tensor {
            dtype,
            shape: Some(shape),
        }
    }
}
