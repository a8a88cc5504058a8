//! Session tests over graphs built in code, with a small registry of test kernels so the
//! session logic is tested on its own.

mod basic;
mod binding;
mod capture;
mod control;
mod device;
mod in_place;
mod kernels;
mod optimize;
mod precision;
mod recorder;

use crate::{Session, SessionOptions};
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::{
    static_shape, Attribute, DataType, Dim, Graph, Node, NodeId, Shape, ValueId, ValueType,
};

pub(crate) fn options() -> SessionOptions {
    SessionOptions {
        registry: Some(kernels::registry()),
        ..Default::default()
    }
}

/// A graph builder for tests.
pub(crate) struct G {
    pub g: Graph,
}

impl G {
    pub fn new(opset: u64) -> G {
        let mut g = Graph::new();
        g.opset_imports.insert(String::new(), opset);
        G { g }
    }

    /// A graph without opset imports (a subgraph body).
    pub fn body() -> G {
        G { g: Graph::new() }
    }

    pub fn v(&mut self, name: &str) -> ValueId {
        self.g
            .value_by_name(name)
            .unwrap_or_else(|| self.g.create_value(name, None))
    }

    pub fn input(&mut self, name: &str, dtype: DataType, dims: &[i64]) -> ValueId {
        let shape = Shape(
            dims.iter()
                .map(|&d| {
                    if d < 0 {
                        Dim::Symbolic("n".into())
                    } else {
                        Dim::Static(d as usize)
                    }
                })
                .collect(),
        );
        let id = self.g.create_named_value(name, dtype, shape);
        self.g.add_input(id);
        id
    }

    pub fn input_typed(&mut self, name: &str, ty: ValueType) -> ValueId {
        let id = self.g.create_value(name, Some(ty));
        self.g.add_input(id);
        id
    }

    pub fn init(&mut self, name: &str, t: &Tensor) -> ValueId {
        let id = self.v(name);
        self.g.add_initializer(id, t.to_tensor_data(name));
        id
    }

    pub fn node(&mut self, op: &str, ins: &[&str], outs: &[&str]) -> NodeId {
        self.node_attrs(op, ins, outs, vec![])
    }

    pub fn node_attrs(
        &mut self,
        op: &str,
        ins: &[&str],
        outs: &[&str],
        attrs: Vec<(&str, Attribute)>,
    ) -> NodeId {
        let inputs = ins
            .iter()
            .map(|n| if n.is_empty() { None } else { Some(self.v(n)) })
            .collect();
        let outputs = outs
            .iter()
            .map(|n| {
                if n.is_empty() {
                    self.g.create_value("", None)
                } else {
                    self.v(n)
                }
            })
            .collect();
        let mut node = Node::new(NodeId(0), op, inputs, outputs);
        for (k, a) in attrs {
            node.attributes.insert(k.into(), a);
        }
        self.g.insert_node(node)
    }

    pub fn output(&mut self, name: &str) {
        let id = self.v(name);
        self.g.add_output(id);
    }

    pub fn output_typed(&mut self, name: &str, dtype: DataType, dims: &[usize]) {
        let id = self.v(name);
        self.g.value_mut(id).ty =
            Some(ValueType::tensor(dtype, static_shape(dims.iter().copied())));
        self.g.add_output(id);
    }

    pub fn session(&self) -> Session {
        Session::from_graph(&self.g, options()).unwrap()
    }
}

pub(crate) fn f32t(shape: &[usize], v: &[f32]) -> Value {
    Value::Tensor(Tensor::from_slice(shape.to_vec(), v))
}

pub(crate) fn out_f32(outs: &[(String, Value)], i: usize) -> (Vec<usize>, Vec<f32>) {
    let t = outs[i].1.as_tensor().expect("a tensor output");
    (t.shape().to_vec(), t.data::<f32>().to_vec())
}

/// Deterministic pseudo-random floats in [-1, 1) (xorshift), so tests use non-trivial data.
pub(crate) fn rand_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

pub(crate) fn assert_close(got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 1e-5 + 1e-5 * w.abs(),
            "element {i}: got {g}, want {w}"
        );
    }
}
