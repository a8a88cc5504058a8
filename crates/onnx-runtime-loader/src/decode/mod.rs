//! Protobuf -> IR.

mod attribute;
mod graph;

pub(crate) use graph::{decode_graph, Decoder};

use crate::error::Within;
use crate::function::Function;
use crate::proto;
use crate::LoadError;
use onnx_runtime_ir::Attribute;
use std::collections::BTreeMap;

/// Opset imports as a map, refusing negative versions and a domain imported twice.
pub(crate) fn decode_opsets(
    imports: &[proto::OperatorSetIdProto],
) -> Result<BTreeMap<String, u64>, LoadError> {
    let mut out = BTreeMap::new();
    for o in imports {
        let domain = o.domain().to_string();
        let version = u64::try_from(o.version()).map_err(|_| {
            LoadError::invalid(format!(
                "opset_import of domain '{domain}' has negative version {}",
                o.version()
            ))
        })?;
        if out.insert(domain.clone(), version).is_some() {
            return Err(LoadError::invalid(format!(
                "opset_import lists domain '{domain}' twice; keep one version"
            )));
        }
    }
    Ok(out)
}

/// `FunctionProto` -> [`Function`]; the body is decoded as a graph of its own.
pub(crate) fn decode_function(
    d: &Decoder,
    mut f: proto::FunctionProto,
) -> Result<Function, LoadError> {
    let opsets = decode_opsets(&f.opset_import)?;
    let named = |name: String| proto::ValueInfoProto {
        name: Some(name),
        ..Default::default()
    };
    let body = proto::GraphProto {
        name: f.name.clone(),
        doc_string: f.doc_string.take(),
        input: std::mem::take(&mut f.input)
            .into_iter()
            .map(named)
            .collect(),
        output: std::mem::take(&mut f.output)
            .into_iter()
            .map(named)
            .collect(),
        node: std::mem::take(&mut f.node),
        value_info: std::mem::take(&mut f.value_info),
        metadata_props: std::mem::take(&mut f.metadata_props),
        ..Default::default()
    };
    let body = decode_graph(d, body, None, &opsets)?;
    let mut attribute_defaults = Vec::with_capacity(f.attribute_proto.len());
    for a in std::mem::take(&mut f.attribute_proto) {
        let name = a.name().to_string();
        let value = attribute::decode_attribute(d, a, None)
            .within(|| format!("default of attribute '{name}'"))?;
        if matches!(value, Attribute::Ref { .. }) {
            return Err(LoadError::invalid(format!(
                "the default of attribute '{name}' refers to another attribute"
            )));
        }
        attribute_defaults.push((name, value));
    }
    Ok(Function {
        name: f.name.unwrap_or_default(),
        domain: f.domain.unwrap_or_default(),
        overload: f.overload.unwrap_or_default(),
        attributes: f.attribute,
        attribute_defaults,
        body,
    })
}
