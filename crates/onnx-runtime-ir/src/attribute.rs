//! Node attributes: every kind ONNX's `AttributeProto` can carry.

use crate::{Graph, TensorData, ValueType};

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attribute {
    Float(f32),
    Int(i64),
    String(String),
    Tensor(TensorData),
    Graph(Box<Graph>),
    /// A sparse tensor, kept as (values, indices, dense shape).
    SparseTensor(Box<SparseTensorData>),
    TypeProto(ValueType),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<String>),
    Tensors(Vec<TensorData>),
    Graphs(Vec<Graph>),
    SparseTensors(Vec<SparseTensorData>),
    TypeProtos(Vec<ValueType>),
    /// Inside a function body: the value is the caller's attribute `name` (`ref_attr_name`).
    Ref {
        name: String,
        kind: AttributeKind,
    },
}

/// A sparse tensor as ONNX stores it.
#[derive(Clone, Debug, PartialEq)]
pub struct SparseTensorData {
    pub values: TensorData,
    pub indices: TensorData,
    pub dims: Vec<i64>,
}

/// The kind of an attribute, numbered as `AttributeProto.AttributeType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttributeKind {
    Undefined = 0,
    Float = 1,
    Int = 2,
    String = 3,
    Tensor = 4,
    Graph = 5,
    Floats = 6,
    Ints = 7,
    Strings = 8,
    Tensors = 9,
    Graphs = 10,
    SparseTensor = 11,
    SparseTensors = 12,
    TypeProto = 13,
    TypeProtos = 14,
}

impl Attribute {
    pub fn kind(&self) -> AttributeKind {
        match self {
            Attribute::Float(_) => AttributeKind::Float,
            Attribute::Int(_) => AttributeKind::Int,
            Attribute::String(_) => AttributeKind::String,
            Attribute::Tensor(_) => AttributeKind::Tensor,
            Attribute::Graph(_) => AttributeKind::Graph,
            Attribute::SparseTensor(_) => AttributeKind::SparseTensor,
            Attribute::TypeProto(_) => AttributeKind::TypeProto,
            Attribute::Floats(_) => AttributeKind::Floats,
            Attribute::Ints(_) => AttributeKind::Ints,
            Attribute::Strings(_) => AttributeKind::Strings,
            Attribute::Tensors(_) => AttributeKind::Tensors,
            Attribute::Graphs(_) => AttributeKind::Graphs,
            Attribute::SparseTensors(_) => AttributeKind::SparseTensors,
            Attribute::TypeProtos(_) => AttributeKind::TypeProtos,
            Attribute::Ref { kind, .. } => *kind,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Attribute::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_float(&self) -> Option<f32> {
        match self {
            Attribute::Float(v) => Some(*v),
            Attribute::Int(v) => Some(*v as f32),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Attribute::String(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_ints(&self) -> Option<&[i64]> {
        match self {
            Attribute::Ints(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_floats(&self) -> Option<&[f32]> {
        match self {
            Attribute::Floats(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            Attribute::Strings(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_tensor(&self) -> Option<&TensorData> {
        match self {
            Attribute::Tensor(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_graph(&self) -> Option<&Graph> {
        match self {
            Attribute::Graph(g) => Some(g),
            _ => None,
        }
    }
}
