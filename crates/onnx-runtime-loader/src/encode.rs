//! IR -> protobuf: [`Model`] to `ModelProto` bytes.

use crate::data::{sparse_to_proto, tensor::tensor_to_proto};
use crate::external_writer::ExternalWriter;
use crate::function::Function;
use crate::proto::{self, attribute_proto::AttributeType};
use crate::types::type_to_proto;
use crate::{LoadError, Model};
use bytes::Bytes;
use onnx_runtime_ir::{Attribute, AttributeKind, Graph, Node, TensorData, ValueId};
use prost::Message;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};

/// Protobuf messages cannot exceed 2 GiB.
const MAX_PROTO_BYTES: usize = i32::MAX as usize;

/// Encodes tensors inline, or (when writing external data) through the writer.
#[derive(Default)]
pub(crate) struct Encoder {
    pub(crate) external: Option<RefCell<ExternalWriter>>,
}

pub(crate) fn encode_model(m: &Model) -> Result<Vec<u8>, LoadError> {
    Encoder::default().model(m)
}

impl Encoder {
    pub(crate) fn model(&self, m: &Model) -> Result<Vec<u8>, LoadError> {
        let p = proto::ModelProto {
            ir_version: Some(m.ir_version),
            opset_import: encode_opsets(&m.graph.opset_imports),
            producer_name: some(&m.producer_name),
            producer_version: some(&m.producer_version),
            domain: some(&m.domain),
            model_version: (m.model_version != 0).then_some(m.model_version),
            doc_string: some(&m.doc_string),
            graph: Some(self.graph(&m.graph)),
            metadata_props: entries(&m.metadata_props),
            training_info: Vec::new(),
            functions: m.functions.iter().map(|f| self.function(f)).collect(),
            configuration: Vec::new(),
        };
        let len = p.encoded_len();
        if len > MAX_PROTO_BYTES {
            return Err(LoadError::Encode(format!(
                "the model needs {len} bytes, more than the 2 GiB a protobuf can hold; keep large \
             weights as external data"
            )));
        }
        Ok(p.encode_to_vec())
    }

    fn tensor(&self, t: &TensorData) -> proto::TensorProto {
        match &self.external {
            Some(w) => w.borrow_mut().tensor(t),
            None => tensor_to_proto(t),
        }
    }

    pub(crate) fn graph(&self, g: &Graph) -> proto::GraphProto {
        let name_of = |id: ValueId| g.value(id).name.clone();
        let mut initializer = Vec::with_capacity(g.initializers.len());
        for (&id, t) in &g.initializers {
            if g.sparse_initializers.contains_key(&id) {
                continue;
            }
            let mut p = self.tensor(t);
            p.name = Some(name_of(id));
            initializer.push(p);
        }
        let sparse_initializer = g
            .sparse_initializers
            .iter()
            .map(|(&id, s)| {
                let mut p = sparse_to_proto(s);
                if let Some(v) = p.values.as_mut() {
                    v.name = Some(name_of(id));
                }
                p
            })
            .collect();
        // value_info: the model's annotations, then types found since (e.g. by shape inference)
        // for node outputs that are not otherwise declared.
        let declared: HashSet<ValueId> = g
            .value_info
            .iter()
            .chain(&g.outputs)
            .chain(&g.inputs)
            .copied()
            .chain(g.initializers.keys().copied())
            .collect();
        let mut value_infos: Vec<_> = g.value_info.iter().map(|&id| value_info(g, id)).collect();
        let mut seen = HashSet::new();
        for n in &g.nodes {
            for &o in &n.outputs {
                let v = g.value(o);
                if v.ty.is_some() && !v.name.is_empty() && !declared.contains(&o) && seen.insert(o)
                {
                    value_infos.push(value_info(g, o));
                }
            }
        }
        proto::GraphProto {
            node: g.nodes.iter().map(|n| self.node(g, n)).collect(),
            name: Some(g.name.clone()),
            initializer,
            sparse_initializer,
            doc_string: some(&g.doc_string),
            input: g.inputs.iter().map(|&id| value_info(g, id)).collect(),
            output: g.outputs.iter().map(|&id| value_info(g, id)).collect(),
            value_info: value_infos,
            quantization_annotation: Vec::new(),
            metadata_props: entries(&g.metadata),
        }
    }

    fn node(&self, g: &Graph, n: &Node) -> proto::NodeProto {
        proto::NodeProto {
            input: n
                .inputs
                .iter()
                .map(|i| i.map(|id| g.value(id).name.clone()).unwrap_or_default())
                .collect(),
            output: n
                .outputs
                .iter()
                .map(|&id| g.value(id).name.clone())
                .collect(),
            name: some(&n.name),
            op_type: Some(n.op_type.clone()),
            domain: some(&n.domain),
            overload: some(&n.overload),
            attribute: n
                .attributes
                .iter()
                .map(|(name, a)| self.attribute(name, a))
                .collect(),
            doc_string: some(&n.doc_string),
            metadata_props: Vec::new(),
            device_configurations: Vec::new(),
        }
    }

    fn attribute(&self, name: &str, a: &Attribute) -> proto::AttributeProto {
        let mut p = proto::AttributeProto {
            name: Some(name.to_string()),
            r#type: Some(attribute_type(a.kind()) as i32),
            ..Default::default()
        };
        match a {
            Attribute::Float(v) => p.f = Some(*v),
            Attribute::Int(v) => p.i = Some(*v),
            Attribute::String(s) => p.s = Some(Bytes::copy_from_slice(s.as_bytes())),
            Attribute::Tensor(t) => p.t = Some(self.tensor(t)),
            Attribute::Graph(g) => p.g = Some(self.graph(g)),
            Attribute::SparseTensor(s) => p.sparse_tensor = Some(sparse_to_proto(s)),
            Attribute::TypeProto(t) => p.tp = Some(type_to_proto(t)),
            Attribute::Floats(v) => p.floats = v.clone(),
            Attribute::Ints(v) => p.ints = v.clone(),
            Attribute::Strings(v) => {
                p.strings = v
                    .iter()
                    .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                    .collect()
            }
            Attribute::Tensors(v) => p.tensors = v.iter().map(|t| self.tensor(t)).collect(),
            Attribute::Graphs(v) => p.graphs = v.iter().map(|g| self.graph(g)).collect(),
            Attribute::SparseTensors(v) => {
                p.sparse_tensors = v.iter().map(sparse_to_proto).collect()
            }
            Attribute::TypeProtos(v) => p.type_protos = v.iter().map(type_to_proto).collect(),
            Attribute::Ref { name, .. } => p.ref_attr_name = Some(name.clone()),
        }
        p
    }

    fn function(&self, f: &Function) -> proto::FunctionProto {
        let body = &f.body;
        let names = |ids: &[ValueId]| ids.iter().map(|&id| body.value(id).name.clone()).collect();
        proto::FunctionProto {
            name: Some(f.name.clone()),
            input: names(&body.inputs),
            output: names(&body.outputs),
            attribute: f.attributes.clone(),
            attribute_proto: f
                .attribute_defaults
                .iter()
                .map(|(n, a)| self.attribute(n, a))
                .collect(),
            node: body.nodes.iter().map(|n| self.node(body, n)).collect(),
            doc_string: some(&body.doc_string),
            opset_import: encode_opsets(&body.opset_imports),
            domain: Some(f.domain.clone()),
            overload: some(&f.overload),
            value_info: body
                .value_info
                .iter()
                .map(|&id| value_info(body, id))
                .collect(),
            metadata_props: entries(&body.metadata),
        }
    }
}

fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn entries(kv: &[(String, String)]) -> Vec<proto::StringStringEntryProto> {
    kv.iter()
        .map(|(k, v)| proto::StringStringEntryProto {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

fn encode_opsets(opsets: &BTreeMap<String, u64>) -> Vec<proto::OperatorSetIdProto> {
    opsets
        .iter()
        .map(|(d, v)| proto::OperatorSetIdProto {
            domain: Some(d.clone()),
            version: Some(*v as i64),
        })
        .collect()
}

fn value_info(g: &Graph, id: ValueId) -> proto::ValueInfoProto {
    let v = g.value(id);
    proto::ValueInfoProto {
        name: Some(v.name.clone()),
        r#type: v.ty.as_ref().map(type_to_proto),
        doc_string: some(&v.doc_string),
        metadata_props: Vec::new(),
    }
}

fn attribute_type(kind: AttributeKind) -> AttributeType {
    use AttributeKind as K;
    match kind {
        K::Undefined => AttributeType::Undefined,
        K::Float => AttributeType::Float,
        K::Int => AttributeType::Int,
        K::String => AttributeType::String,
        K::Tensor => AttributeType::Tensor,
        K::Graph => AttributeType::Graph,
        K::Floats => AttributeType::Floats,
        K::Ints => AttributeType::Ints,
        K::Strings => AttributeType::Strings,
        K::Tensors => AttributeType::Tensors,
        K::Graphs => AttributeType::Graphs,
        K::SparseTensor => AttributeType::SparseTensor,
        K::SparseTensors => AttributeType::SparseTensors,
        K::TypeProto => AttributeType::TypeProto,
        K::TypeProtos => AttributeType::TypeProtos,
    }
}
