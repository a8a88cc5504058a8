//! `AttributeProto` -> [`Attribute`].

use super::graph::{decode_graph, Decoder, Scope};
use crate::data::sparse_from_proto;
use crate::data::tensor::{tensor_from_proto, text};
use crate::error::Within;
use crate::proto::{self, attribute_proto::AttributeType};
use crate::types::type_from_proto;
use crate::LoadError;
use onnx_runtime_ir::{Attribute, AttributeKind, Graph};

fn kind_from_code(code: i32) -> Option<AttributeKind> {
    use AttributeKind::*;
    Some(match AttributeType::try_from(code).ok()? {
        AttributeType::Undefined => Undefined,
        AttributeType::Float => Float,
        AttributeType::Int => Int,
        AttributeType::String => String,
        AttributeType::Tensor => Tensor,
        AttributeType::Graph => Graph,
        AttributeType::SparseTensor => SparseTensor,
        AttributeType::TypeProto => TypeProto,
        AttributeType::Floats => Floats,
        AttributeType::Ints => Ints,
        AttributeType::Strings => Strings,
        AttributeType::Tensors => Tensors,
        AttributeType::Graphs => Graphs,
        AttributeType::SparseTensors => SparseTensors,
        AttributeType::TypeProtos => TypeProtos,
    })
}

/// The kind of an attribute written without `type` (old models): the field that is set.
fn infer_kind(a: &proto::AttributeProto) -> AttributeKind {
    use AttributeKind::*;
    if a.f.is_some() {
        Float
    } else if a.i.is_some() {
        Int
    } else if a.s.is_some() {
        String
    } else if a.t.is_some() {
        Tensor
    } else if a.g.is_some() {
        Graph
    } else if a.sparse_tensor.is_some() {
        SparseTensor
    } else if a.tp.is_some() {
        TypeProto
    } else if !a.floats.is_empty() {
        Floats
    } else if !a.ints.is_empty() {
        Ints
    } else if !a.strings.is_empty() {
        Strings
    } else if !a.tensors.is_empty() {
        Tensors
    } else if !a.graphs.is_empty() {
        Graphs
    } else if !a.sparse_tensors.is_empty() {
        SparseTensors
    } else if !a.type_protos.is_empty() {
        TypeProtos
    } else {
        Undefined
    }
}

/// Converts one attribute; subgraphs are decoded with `scope` as their enclosing scope.
pub(crate) fn decode_attribute(
    d: &Decoder,
    mut a: proto::AttributeProto,
    scope: Option<&Scope>,
) -> Result<Attribute, LoadError> {
    use AttributeKind as K;
    let kind = match a.r#type {
        Some(code) if code != 0 => kind_from_code(code)
            .ok_or_else(|| LoadError::invalid(format!("unknown attribute type code {code}")))?,
        _ => infer_kind(&a),
    };
    if let Some(r) = a.ref_attr_name.take().filter(|r| !r.is_empty()) {
        return Ok(Attribute::Ref { name: r, kind });
    }
    let missing = |field: &str| {
        LoadError::invalid(format!(
            "attribute of type {kind:?} has no '{field}' field; the model is malformed"
        ))
    };
    let graph = |g: proto::GraphProto, i: usize| -> Result<Graph, LoadError> {
        let name = g.name().to_string();
        decode_graph(d, g, scope, &std::collections::BTreeMap::new()).within(|| {
            if i == usize::MAX {
                format!("subgraph '{name}'")
            } else {
                format!("subgraph #{i} '{name}'")
            }
        })
    };
    let files = d.files;
    Ok(match kind {
        K::Undefined => {
            return Err(LoadError::invalid(
                "attribute has no type and no value; give it a value or remove it",
            ))
        }
        K::Float => Attribute::Float(a.f.ok_or_else(|| missing("f"))?),
        K::Int => Attribute::Int(a.i.ok_or_else(|| missing("i"))?),
        K::String => Attribute::String(text(&a.s.ok_or_else(|| missing("s"))?)),
        K::Tensor => Attribute::Tensor(tensor_from_proto(a.t.ok_or_else(|| missing("t"))?, files)?),
        K::Graph => Attribute::Graph(Box::new(graph(
            a.g.ok_or_else(|| missing("g"))?,
            usize::MAX,
        )?)),
        K::SparseTensor => Attribute::SparseTensor(Box::new(sparse_from_proto(
            a.sparse_tensor.ok_or_else(|| missing("sparse_tensor"))?,
            files,
        )?)),
        K::TypeProto => {
            let tp = a.tp.ok_or_else(|| missing("tp"))?;
            Attribute::TypeProto(type_from_proto(&tp)?.ok_or_else(|| {
                LoadError::invalid("type attribute with an opaque or empty type is not supported")
            })?)
        }
        K::Floats => Attribute::Floats(a.floats),
        K::Ints => Attribute::Ints(a.ints),
        K::Strings => Attribute::Strings(a.strings.iter().map(|s| text(s)).collect()),
        K::Tensors => Attribute::Tensors(
            a.tensors
                .into_iter()
                .map(|t| tensor_from_proto(t, files))
                .collect::<Result<_, _>>()?,
        ),
        K::Graphs => Attribute::Graphs(
            a.graphs
                .into_iter()
                .enumerate()
                .map(|(i, g)| graph(g, i))
                .collect::<Result<_, _>>()?,
        ),
        K::SparseTensors => Attribute::SparseTensors(
            a.sparse_tensors
                .into_iter()
                .map(|s| sparse_from_proto(s, files))
                .collect::<Result<_, _>>()?,
        ),
        K::TypeProtos => Attribute::TypeProtos(
            a.type_protos
                .iter()
                .map(|t| {
                    type_from_proto(t)?.ok_or_else(|| {
                        LoadError::invalid("opaque or empty types in a type list are not supported")
                    })
                })
                .collect::<Result<_, _>>()?,
        ),
    })
}
