//! Typed attribute access with defaults and errors that name the node.

use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{Attribute, Node};

fn wrong_kind(node: &Node, name: &str, want: &str, got: &Attribute) -> EpError {
    EpError::invalid_attribute(node, name, format!("expected {want}, got {:?}", got.kind()))
}

pub fn int(node: &Node, name: &str, default: i64) -> Result<i64, EpError> {
    opt_int(node, name).map(|v| v.unwrap_or(default))
}

pub fn opt_int(node: &Node, name: &str) -> Result<Option<i64>, EpError> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Int(v)) => Ok(Some(*v)),
        Some(other) => Err(wrong_kind(node, name, "an int", other)),
    }
}

pub fn float(node: &Node, name: &str, default: f32) -> Result<f32, EpError> {
    opt_float(node, name).map(|v| v.unwrap_or(default))
}

pub fn opt_float(node: &Node, name: &str) -> Result<Option<f32>, EpError> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Float(v)) => Ok(Some(*v)),
        Some(Attribute::Int(v)) => Ok(Some(*v as f32)),
        Some(other) => Err(wrong_kind(node, name, "a float", other)),
    }
}

pub fn string(node: &Node, name: &str, default: &str) -> Result<String, EpError> {
    opt_string(node, name).map(|v| v.unwrap_or_else(|| default.to_string()))
}

pub fn opt_string(node: &Node, name: &str) -> Result<Option<String>, EpError> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::String(v)) => Ok(Some(v.clone())),
        Some(other) => Err(wrong_kind(node, name, "a string", other)),
    }
}

pub fn opt_ints(node: &Node, name: &str) -> Result<Option<Vec<i64>>, EpError> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Ints(v)) => Ok(Some(v.clone())),
        Some(Attribute::Int(v)) => Ok(Some(vec![*v])),
        Some(other) => Err(wrong_kind(node, name, "a list of ints", other)),
    }
}

pub fn ints(node: &Node, name: &str) -> Result<Vec<i64>, EpError> {
    opt_ints(node, name).map(Option::unwrap_or_default)
}

pub fn opt_floats(node: &Node, name: &str) -> Result<Option<Vec<f32>>, EpError> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Floats(v)) => Ok(Some(v.clone())),
        Some(Attribute::Float(v)) => Ok(Some(vec![*v])),
        Some(other) => Err(wrong_kind(node, name, "a list of floats", other)),
    }
}

pub fn opt_strings(node: &Node, name: &str) -> Result<Option<Vec<String>>, EpError> {
    match node.attribute(name) {
        None => Ok(None),
        Some(Attribute::Strings(v)) => Ok(Some(v.clone())),
        Some(other) => Err(wrong_kind(node, name, "a list of strings", other)),
    }
}
