//! Half-precision conversion of a float32 model at load (`SessionOptions::precision`).
//!
//! Every float32 tensor of the model's computation becomes float16 (or bfloat16): the
//! initializers are cast once, and the nodes run in half precision; the kernels accumulate
//! reductions, norms and softmax in float32 on their own. Left in float32:
//! - shape arithmetic (values computed from `Shape`/`Size`, and what is read only as a
//!   shape: Reshape's shape, Resize's scales, ...), so shapes stay exact;
//! - inputs the spec wants in float32 (Resize's roi and scales, Upsample's scales) and ops
//!   whose meaning depends on float32 (quantization, random numbers, NMS boxes): those run
//!   as written, with casts at their edges;
//! - values a control-flow body reads from the enclosing graph, and ops whose output types
//!   this pass does not know.
//!
//! The graph's float32 inputs and outputs keep their types: one Cast after each input and
//! before each output. One cast per value and direction is shared by all its readers, so no
//! chain of Casts is left between nodes; a model's own `Cast(to=FLOAT)` inside the half part
//! casts to half instead. Constants saturate at the half type's largest finite value rather
//! than overflowing to infinity (an attention mask of `finfo(float32).min` stays finite).

use crate::placement::{is_shape_math, makes_shape_values, shape_sinks};
use onnx_runtime_ir::{Attribute, DataType, Graph, Node, NodeId, TensorData, ValueId, ValueType};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The element type a session computes float32 models in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// As the model is written (the default).
    #[default]
    AsWritten,
    /// float32 computation converted to float16 at load.
    Float16,
    /// float32 computation converted to bfloat16 at load.
    BFloat16,
}

impl Precision {
    /// The half type a conversion goes to (`None`: run as written).
    pub fn half_type(self) -> Option<DataType> {
        match self {
            Precision::AsWritten => None,
            Precision::Float16 => Some(DataType::Float16),
            Precision::BFloat16 => Some(DataType::BFloat16),
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fp32" | "float32" | "as-written" => Ok(Precision::AsWritten),
            "fp16" | "float16" | "half" => Ok(Precision::Float16),
            "bf16" | "bfloat16" => Ok(Precision::BFloat16),
            other => Err(format!(
                "unknown precision '{other}': use fp32, fp16 or bf16"
            )),
        }
    }
}

/// What [`convert`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrecisionReport {
    /// Nodes now computing in half precision.
    pub half_nodes: usize,
    /// Nodes with float32 data left in float32, by op type, with the reason.
    pub kept: BTreeMap<String, String>,
    pub initializers: usize,
    /// Casts added at the edges of the half part (graph inputs and outputs included).
    pub casts: usize,
}

/// Ops whose first output has the element type of input `k` (and whose float inputs may all
/// be half). Outputs after the first that are not listed in [`fixed_output`] follow too.
fn follows(node: &Node) -> Option<usize> {
    const FIRST: &[&str] = &[
        "Abs",
        "Acos",
        "Acosh",
        "Add",
        "Asin",
        "Asinh",
        "Atan",
        "Atanh",
        "AveragePool",
        "BatchNormalization",
        "Ceil",
        "Celu",
        "Clip",
        "Concat",
        "Conv",
        "ConvTranspose",
        "Cos",
        "Cosh",
        "CumSum",
        "DepthToSpace",
        "Div",
        "Dropout",
        "Einsum",
        "Elu",
        "Erf",
        "Exp",
        "Expand",
        "Flatten",
        "Floor",
        "Gather",
        "GatherElements",
        "GatherND",
        "Gelu",
        "Gemm",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "GroupNormalization",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "InstanceNormalization",
        "LayerNormalization",
        "LeakyRelu",
        "Log",
        "LogSoftmax",
        "LpNormalization",
        "LRN",
        "MatMul",
        "Max",
        "MaxPool",
        "Mean",
        "MeanVarianceNormalization",
        "Min",
        "Mish",
        "Mod",
        "Mul",
        "Neg",
        "Pad",
        "Pow",
        "PRelu",
        "Reciprocal",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "ReduceSumSquare",
        "Relu",
        "Reshape",
        "Resize",
        "RMSNormalization",
        "Round",
        "ScatterElements",
        "ScatterND",
        "Selu",
        "Shrink",
        "Sigmoid",
        "Sign",
        "Sin",
        "Sinh",
        "Slice",
        "Softmax",
        "Softplus",
        "Softsign",
        "SpaceToDepth",
        "Split",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Sum",
        "Tan",
        "Tanh",
        "ThresholdedRelu",
        "Tile",
        "TopK",
        "Transpose",
        "Trilu",
        "Unsqueeze",
        "Upsample",
    ];
    const MS: &[&str] = &[
        "Attention",
        "BiasAdd",
        "BiasGelu",
        "FastGelu",
        "FusedConv",
        "FusedMatMul",
        "Gelu",
        "GroupQueryAttention",
        "LayerNormalization",
        "MultiHeadAttention",
        "QuickGelu",
        "RotaryEmbedding",
        "SimplifiedLayerNormalization",
        "SkipLayerNormalization",
        "SkipSimplifiedLayerNormalization",
    ];
    let op = node.op_type.as_str();
    match node.normalized_domain() {
        "" if op == "Where" => Some(1),
        "" if FIRST.contains(&op) => Some(0),
        "com.microsoft" if MS.contains(&op) => Some(0),
        // The optimizer's fused product (it runs before the conversion).
        onnx_runtime_ep_cpu::INTERNAL_DOMAIN if op == "MatMulBias" => Some(0),
        _ => None,
    }
}

/// Outputs whose type does not follow: (position, dtype).
fn fixed_output(node: &Node, position: usize) -> Option<DataType> {
    let op = node.op_type.as_str();
    match (op, position) {
        ("MaxPool" | "TopK", 1) => Some(DataType::Int64),
        ("Dropout", 1) => Some(DataType::Bool),
        // Mean and inverse standard deviation: float32 (stash_type) whatever X is.
        ("LayerNormalization", 1 | 2) if node.normalized_domain().is_empty() => {
            Some(DataType::Float32)
        }
        _ => None,
    }
}

/// Ops with a boolean output that may compare half inputs.
fn is_comparison(node: &Node) -> bool {
    node.normalized_domain().is_empty()
        && matches!(
            node.op_type.as_str(),
            "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "IsNaN" | "IsInf"
        )
}

/// Inputs the spec keeps in float32 whatever the data type.
fn float32_position(node: &Node, position: usize) -> bool {
    node.normalized_domain().is_empty()
        && match node.op_type.as_str() {
            "Resize" => position == 1 || position == 2,
            "Upsample" => position == 1,
            _ => false,
        }
}

/// The element type of every value whose type this pass can tell (None: unknown).
fn infer_dtypes(graph: &Graph, order: &[NodeId]) -> Vec<Option<DataType>> {
    let mut dt: Vec<Option<DataType>> = graph.values.iter().map(|v| v.dtype()).collect();
    for (v, t) in &graph.initializers {
        dt[v.0] = Some(t.dtype);
    }
    for &nid in order {
        let node = graph.node(nid);
        let input = |k: usize| node.inputs.get(k).copied().flatten().and_then(|v| dt[v.0]);
        let attr_int = |name: &str| match node.attribute(name) {
            Some(Attribute::Int(v)) => DataType::from_onnx(*v as i32),
            _ => None,
        };
        let first = if let Some(k) = follows(node) {
            input(k)
        } else if is_comparison(node) {
            Some(DataType::Bool)
        } else if node.normalized_domain().is_empty() {
            match node.op_type.as_str() {
                "Shape" | "Size" | "ArgMax" | "ArgMin" | "NonZero" => Some(DataType::Int64),
                "Not" | "And" | "Or" | "Xor" => Some(DataType::Bool),
                "Cast" => attr_int("to"),
                "CastLike" => input(1),
                "Range" => input(0),
                "ConstantOfShape" => match node.attribute("value") {
                    Some(Attribute::Tensor(t)) => Some(t.dtype),
                    _ => Some(DataType::Float32),
                },
                "Constant" => match node.attribute("value") {
                    Some(Attribute::Tensor(t)) => Some(t.dtype),
                    Some(Attribute::Float(_) | Attribute::Floats(_)) => Some(DataType::Float32),
                    Some(Attribute::Int(_) | Attribute::Ints(_)) => Some(DataType::Int64),
                    _ => None,
                },
                _ => None,
            }
        } else {
            None
        };
        for (p, &o) in node.outputs.iter().enumerate() {
            let t = if p == 0 {
                first
            } else if let Some(t) = fixed_output(node, p) {
                Some(t)
            } else if follows(node).is_some() {
                first
            } else {
                None
            };
            if dt[o.0].is_none() {
                dt[o.0] = t;
            }
        }
    }
    dt
}

/// Values computed from `Shape`/`Size` through shape arithmetic (exact integers in float
/// clothing, sometimes): they stay as written.
fn shape_values(graph: &Graph, order: &[NodeId]) -> Vec<bool> {
    let mut shape = vec![false; graph.values.len()];
    let constant = |v: ValueId| graph.initializers.contains_key(&v) && !graph.inputs.contains(&v);
    for &nid in order {
        let node = graph.node(nid);
        let is_meta = node.normalized_domain().is_empty()
            && matches!(node.op_type.as_str(), "Shape" | "Size");
        let from_shapes = (is_shape_math(node) || makes_shape_values(node))
            && node.inputs.iter().flatten().any(|v| shape[v.0])
            && node
                .inputs
                .iter()
                .flatten()
                .all(|&v| shape[v.0] || constant(v));
        if is_meta || from_shapes {
            for &o in &node.outputs {
                shape[o.0] = true;
            }
        }
    }
    shape
}

/// Why a node with float32 data stays in float32, or None when it may run in half.
fn keep_reason(node: &Node, known: bool) -> Option<&'static str> {
    let op = node.op_type.as_str();
    if node
        .attributes
        .values()
        .any(|a| matches!(a, Attribute::Graph(_) | Attribute::Graphs(_)))
    {
        return Some("control flow");
    }
    const FLOAT32_OPS: &[&str] = &[
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        "NonMaxSuppression",
        "RoiAlign",
        "STFT",
        "DFT",
        "Det",
        "Range",
    ];
    if node.normalized_domain().is_empty() && FLOAT32_OPS.contains(&op) {
        return Some("needs float32");
    }
    if !known {
        return Some("its output types are not known to the conversion");
    }
    None
}

/// Names a subgraph (at any depth) reads, which may be values of the enclosing graph.
fn subgraph_reads(graph: &Graph, out: &mut BTreeSet<String>) {
    for node in &graph.nodes {
        for attr in node.attributes.values() {
            let mut visit = |g: &Graph| {
                for n in &g.nodes {
                    for v in n.inputs.iter().flatten() {
                        out.insert(g.value(*v).name.clone());
                    }
                }
                subgraph_reads(g, out);
            };
            match attr {
                Attribute::Graph(g) => visit(g),
                Attribute::Graphs(gs) => gs.iter().for_each(&mut visit),
                _ => {}
            }
        }
    }
}

/// Converts `graph`'s float32 computation to `to` (float16 or bfloat16) in place.
pub fn convert(graph: &mut Graph, to: DataType) -> Result<PrecisionReport, String> {
    if !matches!(to, DataType::Float16 | DataType::BFloat16) {
        return Err(format!(
            "precision conversion goes to float16 or bfloat16, not {to}"
        ));
    }
    let order = crate::compile::topological_order(graph).map_err(|e| e.to_string())?;
    let dtypes = infer_dtypes(graph, &order);
    let shapes = shape_values(graph, &order);
    let sinks = shape_sinks(graph, &order);
    let mut pinned = BTreeSet::new();
    subgraph_reads(graph, &mut pinned);
    let f32_at = |v: ValueId| dtypes[v.0] == Some(DataType::Float32);

    // Which nodes run in half.
    let mut report = PrecisionReport::default();
    let mut half_node: BTreeSet<NodeId> = BTreeSet::new();
    for &nid in &order {
        let node = graph.node(nid);
        let data = |v: &ValueId| f32_at(*v) && !shapes[v.0] && !sinks[v.0];
        let float_in = node.inputs.iter().flatten().any(data);
        let float_out = node.outputs.iter().any(data);
        if !float_in && !float_out {
            continue;
        }
        let to_float =
            node.attribute("to") == Some(&Attribute::Int(DataType::Float32.onnx_code() as i64));
        let known = follows(node).is_some()
            || is_comparison(node)
            || (node.normalized_domain().is_empty()
                && match node.op_type.as_str() {
                    // A cast to an integer type reads its float input exactly as written.
                    "Cast" => to_float,
                    "CastLike" | "ConstantOfShape" | "Constant" => true,
                    _ => false,
                });
        let pinned_out = node
            .outputs
            .iter()
            .any(|o| pinned.contains(&graph.value(*o).name));
        let reason = keep_reason(node, known)
            .or(pinned_out.then_some("a control-flow body reads its output"));
        match reason {
            Some(r) => {
                report
                    .kept
                    .insert(crate::compile::op_name(node), r.to_string());
            }
            None => {
                half_node.insert(nid);
            }
        }
    }

    // The values that become half: float32 outputs of half nodes (except fixed float32
    // outputs), and float32 initializers every reader of which wants half.
    let consumers = graph.consumers();
    let wants_half = |graph: &Graph, c: NodeId, v: ValueId| {
        let n = graph.node(c);
        half_node.contains(&c)
            && n.inputs
                .iter()
                .enumerate()
                .filter(|(_, i)| **i == Some(v))
                .all(|(p, _)| !float32_position(n, p))
    };
    let mut half_value = vec![false; graph.values.len()];
    for &nid in &half_node {
        let node = graph.node(nid);
        for (p, &o) in node.outputs.iter().enumerate() {
            if f32_at(o) && fixed_output(node, p).is_none() && !shapes[o.0] && !sinks[o.0] {
                half_value[o.0] = true;
            }
        }
    }
    let graph_inputs: BTreeSet<ValueId> = graph.inputs.iter().copied().collect();
    let inits: Vec<ValueId> = graph.initializers.keys().copied().collect();
    for v in inits {
        if !f32_at(v) || graph_inputs.contains(&v) || shapes[v.0] || sinks[v.0] {
            continue;
        }
        let readers = &consumers[v.0];
        if !readers.is_empty()
            && readers.iter().all(|&c| wants_half(graph, c, v))
            && !pinned.contains(&graph.value(v).name)
            && !graph.outputs.contains(&v)
        {
            let t = graph.initializers.get_mut(&v).expect("listed above");
            *t = cast_tensor(t, to)?;
            half_value[v.0] = true;
            report.initializers += 1;
        }
    }

    // Edges: a half reader of a float32 value, or a float32 reader of a half value, reads a
    // cast (one per value and direction).
    let mut casts: HashMap<(ValueId, bool), ValueId> = HashMap::new();
    let mut new_nodes: Vec<Node> = Vec::new();
    let node_ids: Vec<NodeId> = graph.nodes.iter().map(|n| n.id).collect();
    for nid in node_ids {
        let half = half_node.contains(&nid);
        let inputs = graph.node(nid).inputs.clone();
        for (p, input) in inputs.iter().enumerate() {
            let Some(v) = *input else { continue };
            // A shape read as data by a half node (an attention scale from a dimension) is
            // cast like any float32 value; values read only as shapes are never touched.
            if !f32_at(v) || sinks[v.0] {
                continue;
            }
            let want_half = half && !float32_position(graph.node(nid), p);
            if want_half == half_value[v.0] {
                continue;
            }
            let cast = *casts.entry((v, want_half)).or_insert_with(|| {
                let name = format!(
                    "{}_as_{}",
                    graph.value(v).name,
                    if want_half { to.name() } else { "float" }
                );
                let dtype = if want_half { to } else { DataType::Float32 };
                let out = graph.create_value(fresh(graph, &name), typed(graph, v, dtype));
                let mut n = Node::new(NodeId(0), "Cast", vec![Some(v)], vec![out]);
                n.name = graph.value(out).name.clone();
                n.attributes
                    .insert("to".into(), Attribute::Int(dtype.onnx_code() as i64));
                new_nodes.push(n);
                out
            });
            graph.node_mut(nid).inputs[p] = Some(cast);
        }
    }
    // Graph outputs computed in half: a Cast back to float32 takes the output's name.
    let outputs = graph.outputs.clone();
    for (k, v) in outputs.into_iter().enumerate() {
        if !half_value[v.0] {
            continue;
        }
        let internal_name = fresh(graph, &format!("{}_{}", graph.value(v).name, to.name()));
        let internal = graph.create_value(internal_name, typed(graph, v, to));
        for node in graph.nodes.iter_mut() {
            for o in node.outputs.iter_mut() {
                if *o == v {
                    *o = internal;
                }
            }
            for i in node.inputs.iter_mut().flatten() {
                if *i == v {
                    *i = internal;
                }
            }
        }
        for n in new_nodes.iter_mut() {
            for i in n.inputs.iter_mut().flatten() {
                if *i == v {
                    *i = internal;
                }
            }
        }
        half_value[v.0] = false;
        let mut n = Node::new(NodeId(0), "Cast", vec![Some(internal)], vec![v]);
        n.name = format!("{}_to_float", graph.value(v).name);
        n.attributes.insert(
            "to".into(),
            Attribute::Int(DataType::Float32.onnx_code() as i64),
        );
        new_nodes.push(n);
        graph.outputs[k] = v;
    }
    report.casts = new_nodes.len();

    // Half nodes: types, attributes that name float32.
    let code = |d: DataType| d.onnx_code() as i64;
    for &nid in &half_node {
        let node = graph.node_mut(nid);
        if node.normalized_domain().is_empty() {
            match node.op_type.as_str() {
                "Cast"
                    if node.attribute("to") == Some(&Attribute::Int(code(DataType::Float32))) =>
                {
                    node.attributes
                        .insert("to".into(), Attribute::Int(code(to)));
                }
                "ConstantOfShape" | "Constant" => {
                    if let Some(Attribute::Tensor(t)) = node.attributes.get("value") {
                        if t.dtype == DataType::Float32 {
                            let c = cast_tensor(t, to)?;
                            node.attributes.insert("value".into(), Attribute::Tensor(c));
                        }
                    } else if node.op_type == "ConstantOfShape" {
                        let zero = TensorData::from_bytes(DataType::Float32, vec![1], vec![0; 4]);
                        let c = cast_tensor(&zero, to)?;
                        node.attributes.insert("value".into(), Attribute::Tensor(c));
                    } else if let Some(a) = node.attributes.get("value_float").cloned() {
                        if let Attribute::Float(f) = a {
                            let t = TensorData::from_bytes(
                                DataType::Float32,
                                vec![],
                                f.to_le_bytes().to_vec(),
                            );
                            node.attributes.remove("value_float");
                            node.attributes
                                .insert("value".into(), Attribute::Tensor(cast_tensor(&t, to)?));
                        }
                    } else if let Some(Attribute::Floats(fs)) =
                        node.attributes.get("value_floats").cloned()
                    {
                        let bytes = fs.iter().flat_map(|f| f.to_le_bytes()).collect();
                        let t = TensorData::from_bytes(DataType::Float32, vec![fs.len()], bytes);
                        node.attributes.remove("value_floats");
                        node.attributes
                            .insert("value".into(), Attribute::Tensor(cast_tensor(&t, to)?));
                    }
                }
                _ => {}
            }
        }
        report.half_nodes += 1;
    }
    // (Values made above have their types already.)
    for (i, is_half) in half_value.iter().enumerate() {
        if *is_half {
            retype(&mut graph.values[i].ty, to);
        }
    }
    for n in new_nodes {
        graph.insert_node(n);
    }
    graph.reindex_names();
    Ok(report)
}

fn fresh(graph: &Graph, base: &str) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while graph.value_by_name(&name).is_some() {
        name = format!("{base}_{k}");
        k += 1;
    }
    name
}

/// `v`'s type with element type `dtype` (its shape kept).
fn typed(graph: &Graph, v: ValueId, dtype: DataType) -> Option<ValueType> {
    Some(ValueType::Tensor {
        dtype,
        shape: graph.value(v).shape().cloned(),
    })
}

fn retype(ty: &mut Option<ValueType>, to: DataType) {
    if let Some(ValueType::Tensor { dtype, .. }) = ty {
        if *dtype == DataType::Float32 {
            *dtype = to;
        }
    }
}

/// A float32 constant in `to`: finite values saturate at the type's largest finite value
/// (±65504 for float16; infinities and NaN stay what they are), and float16 keeps tiny
/// non-zero values at its smallest subnormal rather than 0.
pub(crate) fn cast_tensor(t: &TensorData, to: DataType) -> Result<TensorData, String> {
    if t.dtype != DataType::Float32 {
        return Err(format!("cannot cast a {} constant as float32", t.dtype));
    }
    let bytes = t.bytes();
    let mut out = Vec::with_capacity(bytes.len() / 2);
    for c in bytes.chunks_exact(4) {
        let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let h = match to {
            DataType::Float16 => {
                let max = half::f16::MAX.to_f32();
                let tiny = half::f16::from_bits(1).to_f32();
                let y = if x.is_finite() && x.abs() > max {
                    max.copysign(x)
                } else if x != 0.0 && x.abs() < tiny {
                    tiny.copysign(x)
                } else {
                    x
                };
                half::f16::from_f32(y).to_bits()
            }
            _ => {
                // Rounding can carry the largest float32 magnitudes to infinity.
                let y = half::bf16::from_f32(x);
                if x.is_finite() && y.is_infinite() {
                    half::bf16::MAX.copysign(y).to_bits()
                } else {
                    y.to_bits()
                }
            }
        };
        out.extend_from_slice(&h.to_le_bytes());
    }
    let mut c = TensorData::from_bytes(to, t.shape.clone(), out);
    c.name = t.name.clone();
    Ok(c)
}
