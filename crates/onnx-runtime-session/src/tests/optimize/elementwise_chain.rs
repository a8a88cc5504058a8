//! Element-wise chains -> one internal FusedElementwise node, for sessions on a CUDA device
//! only. The device here is a stand-in that claims the op and then refuses every kernel (a
//! planned refusal), so the CPU provider's FusedElementwise kernel runs the fused node and is
//! checked against the unfused graph.

use super::*;
use crate::optimize::optimize_for_device;
use onnx_runtime_ep_api::{
    DeviceBuffer, DeviceId, DeviceKind, DevicePtr, DevicePtrMut, EpError, ExecutionProvider, Kernel,
};
use onnx_runtime_ep_cpu::ops::math::fused_elementwise::Program;
use onnx_runtime_ep_cpu::INTERNAL_DOMAIN;
use std::sync::Arc;
use OptimizationLevel::All;

const FUSED: &str = "ai.onnx_runtime_rs.internal:FusedElementwise";

/// A device that says it runs the internal and `com.microsoft` ops named (FusedElementwise
/// here) and nothing else, and refuses to build them.
pub(super) struct ChainDevice(pub DeviceKind, pub &'static [&'static str]);

impl ExecutionProvider for ChainDevice {
    fn name(&self) -> &str {
        "chain-test"
    }
    fn device_id(&self) -> DeviceId {
        DeviceId {
            kind: self.0,
            ordinal: 0,
        }
    }
    fn supports(&self, node: &Node, _: u64) -> bool {
        (node.domain == INTERNAL_DOMAIN || node.domain == "com.microsoft")
            && self.1.contains(&node.op_type.as_str())
    }
    fn get_kernel(
        &self,
        node: &Node,
        _: &[Vec<usize>],
        _: u64,
    ) -> Result<Box<dyn Kernel>, EpError> {
        Err(EpError::UnsupportedDtype {
            node: node.describe(),
            op: node.op_type.clone(),
            dtype: DataType::Float32,
            detail: "the test device runs nothing".into(),
            hint: "run it on the CPU".into(),
        })
    }
    fn allocate(&self, _: usize, _: usize) -> Result<DeviceBuffer, EpError> {
        Err(EpError::Other("the test device has no memory".into()))
    }
    fn deallocate(&self, _: DeviceBuffer) -> Result<(), EpError> {
        Ok(())
    }
    unsafe fn copy_from_host(&self, _: &[u8], _: DevicePtrMut) -> Result<(), EpError> {
        Err(EpError::Other("no copies".into()))
    }
    unsafe fn copy_to_host(&self, _: DevicePtr, _: &mut [u8]) -> Result<(), EpError> {
        Err(EpError::Other("no copies".into()))
    }
    unsafe fn copy_on_device(
        &self,
        _: DevicePtr,
        _: DevicePtrMut,
        _: usize,
    ) -> Result<(), EpError> {
        Err(EpError::Other("no copies".into()))
    }
    fn synchronize(&self) -> Result<(), EpError> {
        Ok(())
    }
}

fn cuda() -> Arc<dyn ExecutionProvider> {
    Arc::new(ChainDevice(DeviceKind::Cuda, &["FusedElementwise"]))
}

/// The graph `b` optimized at `level` for `device`.
pub(super) fn optimized(
    b: &G,
    level: OptimizationLevel,
    device: Option<&dyn ExecutionProvider>,
) -> Graph {
    let mut g = b.g.clone();
    optimize_for_device(&mut g, level, onnx_runtime_ep_cpu::registry(), device);
    g
}

pub(super) fn op_list(g: &Graph) -> Vec<String> {
    g.nodes
        .iter()
        .map(|n| {
            if n.domain.is_empty() {
                n.op_type.clone()
            } else {
                format!("{}:{}", n.domain, n.op_type)
            }
        })
        .collect()
}

/// Every node reads only graph inputs, initializers and values of earlier nodes.
fn assert_topological(g: &Graph) {
    let mut known: std::collections::HashSet<ValueId> = g.inputs.iter().copied().collect();
    known.extend(g.initializers.keys().copied());
    for n in &g.nodes {
        for &i in n.inputs.iter().flatten() {
            assert!(
                known.contains(&i),
                "{} reads '{}' before it is produced",
                n.describe(),
                g.value(i).name
            );
        }
        known.extend(n.outputs.iter().copied());
    }
}

/// The fused nodes' programs.
fn programs(g: &Graph) -> Vec<String> {
    g.nodes
        .iter()
        .filter(|n| n.op_type == "FusedElementwise")
        .map(|n| {
            n.attribute("program")
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Runs `b` unoptimized on the CPU and optimized for the stand-in CUDA device (the fused
/// nodes fall back to the CPU kernel); outputs must agree within `atol + rtol * |want|`.
/// Returns the optimized graph.
fn check_fused(b: &G, feeds: &[(&str, Value)], atol: f64, rtol: f64) -> Graph {
    let plain = SessionOptions {
        optimization: OptimizationLevel::None,
        ..Default::default()
    };
    let want = Session::from_graph(&b.g, plain)
        .unwrap()
        .run(feeds)
        .unwrap();
    let on_device = SessionOptions {
        device: Some(cuda()),
        ..Default::default()
    };
    let session = Session::from_graph(&b.g, on_device).unwrap();
    let got = session.run(feeds).unwrap();
    assert_eq!(want.len(), got.len());
    for ((wn, w), (gn, g)) in want.iter().zip(&got) {
        assert_eq!(wn, gn);
        let (w, g) = (w.as_tensor().unwrap(), g.as_tensor().unwrap());
        assert_eq!(w.shape(), g.shape(), "output {wn}: shape");
        assert_eq!(w.dtype(), g.dtype(), "output {wn}: dtype");
        let (w, g) = (w.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
        for (i, (a, b)) in w.iter().zip(&g).enumerate() {
            assert!(
                (a - b).abs() <= atol + rtol * a.abs(),
                "output {wn}[{i}]: fused {b}, unfused {a}"
            );
        }
    }
    let dev = cuda();
    let g = optimized(b, All, Some(dev.as_ref()));
    assert_topological(&g);
    for p in programs(&g) {
        Program::parse(&p).unwrap_or_else(|e| panic!("{e}:\n{p}"));
    }
    g
}

fn scalar(b: &mut G, name: &str, v: f32) {
    b.init(name, &Tensor::scalar(v));
}

fn feed(name: &'static str, shape: &[usize], seed: u64) -> (&'static str, Value) {
    let n = shape.iter().product();
    let x: Vec<f32> = rand_f32(n, seed).iter().map(|v| v * 3.0).collect();
    (name, f32t(shape, &x))
}

/// GELU written out with a constant the Gelu fusion does not take (x / 1.5): five nodes.
fn gelu_like(b: &mut G, x: &str, y: &str) {
    scalar(b, "k", 1.5);
    scalar(b, "one", 1.0);
    scalar(b, "half", 0.5);
    b.node("Div", &[x, "k"], &["d"]);
    b.node("Erf", &["d"], &["e"]);
    b.node("Add", &["e", "one"], &["a"]);
    b.node("Mul", &[x, "a"], &["m"]);
    b.node("Mul", &["m", "half"], &[y]);
}

#[test]
fn written_out_gelu_fuses_only_for_a_cuda_device() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[4, 16]);
    gelu_like(&mut b, "x", "y");
    b.output("y");
    let g = check_fused(&b, &[feed("x", &[4, 16], 1)], 1e-6, 1e-5);
    assert_eq!(op_list(&g), [FUSED]);
    let node = &g.nodes[0];
    assert_eq!(node.inputs.len(), 1, "the scalar constants are literals");
    assert_eq!(node.attribute("dtype").unwrap().as_int(), Some(1));
    let p = &programs(&g)[0];
    assert!(
        p.contains("Erf") && p.contains("1.5") && p.contains("0.5"),
        "{p}"
    );
    assert_eq!(node.outputs, vec![b.g.value_by_name("y").unwrap()]);

    // No device, a CPU-kind device, or below level All: the nodes stay.
    let five = ["Div", "Erf", "Add", "Mul", "Mul"];
    assert_eq!(op_list(&optimized(&b, All, None)), five);
    let cpu_kind = ChainDevice(DeviceKind::Cpu, &["FusedElementwise"]);
    assert_eq!(op_list(&optimized(&b, All, Some(&cpu_kind))), five);
    let dev = cuda();
    assert_eq!(
        op_list(&optimized(&b, OptimizationLevel::Basic, Some(dev.as_ref()))),
        five
    );
}

/// The CPU-oriented fusions still run first: x + bias then the exact GELU becomes Add and
/// com.microsoft Gelu, and then both become one fused node.
#[test]
fn fused_ops_from_earlier_passes_join_the_chain() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[3, 8]);
    f32_init(&mut b, "bias", &[8], 2);
    scalar(&mut b, "k", std::f32::consts::SQRT_2);
    scalar(&mut b, "one", 1.0);
    scalar(&mut b, "half", 0.5);
    b.node("Add", &["x", "bias"], &["xb"]);
    b.node("Div", &["xb", "k"], &["d"]);
    b.node("Erf", &["d"], &["e"]);
    b.node("Add", &["e", "one"], &["a"]);
    b.node("Mul", &["xb", "a"], &["m"]);
    b.node("Mul", &["m", "half"], &["y"]);
    b.output("y");
    assert_eq!(
        op_list(&optimized(&b, All, None)),
        ["Add", "com.microsoft:Gelu"]
    );
    let g = check_fused(&b, &[feed("x", &[3, 8], 3)], 1e-6, 1e-5);
    assert_eq!(op_list(&g), [FUSED]);
    assert_eq!(g.nodes[0].inputs.len(), 2, "x and the bias vector");
    assert!(programs(&g)[0].contains("Gelu"));
}

/// x * sigmoid(x) (QuickGelu after the SiLU fusion) scaled by a per-channel tensor and
/// shifted: QuickGelu, Mul, Add -> one node with a broadcast [C, 1, 1] input.
#[test]
fn silu_then_per_channel_affine_fuses() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, 3, 4, 5]);
    f32_init(&mut b, "s", &[3, 1, 1], 4);
    f32_init(&mut b, "t", &[3, 1, 1], 5);
    b.node("Sigmoid", &["x"], &["sg"]);
    b.node("Mul", &["x", "sg"], &["silu"]);
    b.node("Mul", &["silu", "s"], &["sc"]);
    b.node("Add", &["sc", "t"], &["y"]);
    b.output("y");
    let g = check_fused(&b, &[feed("x", &[2, 3, 4, 5], 6)], 1e-6, 1e-5);
    assert_eq!(op_list(&g), [FUSED]);
    assert_eq!(g.nodes[0].inputs.len(), 3);
}

/// A chain with a broadcast bias whose first value is also read outside it (a ReduceSum and
/// the caller): that value becomes a second output of the fused node, under its own name.
#[test]
fn values_read_outside_the_chain_become_outputs() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, 3, 4]);
    f32_init(&mut b, "bias", &[4], 7);
    scalar(&mut b, "half", 0.5);
    b.node("Add", &["x", "bias"], &["t"]);
    b.node("Relu", &["t"], &["u"]);
    b.node("Mul", &["u", "half"], &["y"]);
    b.node_attrs(
        "ReduceSum",
        &["t"],
        &["r"],
        vec![("keepdims", Attribute::Int(0))],
    );
    b.output("y");
    b.output("r");
    b.output("t");
    let g = check_fused(&b, &[feed("x", &[2, 3, 4], 8)], 1e-6, 1e-5);
    assert_eq!(op_list(&g), [FUSED, "ReduceSum"]);
    let fused = &g.nodes[0];
    let names: Vec<&str> = fused
        .outputs
        .iter()
        .map(|&o| g.value(o).name.as_str())
        .collect();
    assert_eq!(names, ["t", "y"]);
}

/// Layer norm written out around non-constant gamma (the LayerNormalization fusion does not
/// take it): the element-wise runs before and after the second ReduceMean become two fused
/// nodes, never one (that would be a cycle through the ReduceMean).
#[test]
fn chains_never_merge_across_a_reduction() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, 3, 8]);
    b.input("gamma", DataType::Float32, &[8]);
    f32_init(&mut b, "beta", &[8], 9);
    scalar(&mut b, "two", 2.0);
    scalar(&mut b, "eps", 1e-5);
    let axes = vec![("axes", ints(&[-1]))];
    b.node_attrs("ReduceMean", &["x"], &["mu"], axes.clone());
    b.node("Sub", &["x", "mu"], &["d"]);
    b.node("Pow", &["d", "two"], &["sq"]);
    b.node_attrs("ReduceMean", &["sq"], &["var"], axes);
    b.node("Add", &["var", "eps"], &["ve"]);
    b.node("Sqrt", &["ve"], &["sd"]);
    b.node("Div", &["d", "sd"], &["n"]);
    b.node("Mul", &["n", "gamma"], &["g"]);
    b.node("Add", &["g", "beta"], &["y"]);
    b.output("y");
    let feeds = [feed("x", &[2, 3, 8], 10), feed("gamma", &[8], 11)];
    let g = check_fused(&b, &feeds, 1e-5, 1e-4);
    assert_eq!(op_list(&g), ["ReduceMean", FUSED, "ReduceMean", FUSED]);
    // The first fused node hands out both d (read by the second) and sq.
    assert_eq!(g.nodes[1].outputs.len(), 2);
}

/// A reader of an early member's value that comes before the group's last node in the file:
/// the node list is reordered so that the fused node comes first.
#[test]
fn the_node_list_stays_topological() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[5, 6]);
    b.node("Sigmoid", &["x"], &["s"]);
    b.node_attrs(
        "ReduceMax",
        &["s"],
        &["r"],
        vec![("keepdims", Attribute::Int(1))],
    );
    b.node("Mul", &["s", "x"], &["y"]);
    b.node("Sub", &["y", "r"], &["z"]);
    b.output("z");
    let g = check_fused(&b, &[feed("x", &[5, 6], 12)], 1e-6, 1e-5);
    // Sigmoid and Mul fuse (Sub reads the ReduceMax, which reads the group: it cannot join).
    assert_eq!(op_list(&g)[0], FUSED);
    assert!(op_list(&g).contains(&"ReduceMax".to_string()));
}

/// Float16 and float64 chains (between Casts from and to float32) keep their dtype (the f16
/// fused node rounds once, so it is compared loosely); an input of unknown dtype leaves the
/// chain alone.
#[test]
fn half_and_double_chains_and_unknown_dtypes() {
    for (dtype, tol) in [(DataType::Float16, 2e-2), (DataType::Float64, 1e-6)] {
        let mut b = G::new(13);
        b.input("x", DataType::Float32, &[4, 6]);
        let one = match dtype {
            DataType::Float16 => {
                Tensor::from_bytes(DataType::Float16, vec![], &[0x00, 0x3c]).unwrap()
            }
            _ => Tensor::scalar(1.0f64),
        };
        b.init("one", &one);
        let to = |d: DataType| vec![("to", Attribute::Int(d.onnx_code() as i64))];
        b.node_attrs("Cast", &["x"], &["xc"], to(dtype));
        b.node("Neg", &["xc"], &["n"]);
        b.node("Exp", &["n"], &["e"]);
        b.node("Add", &["e", "one"], &["a"]);
        b.node("Reciprocal", &["a"], &["r"]);
        b.node_attrs("Cast", &["r"], &["y"], to(DataType::Float32));
        b.output("y");
        let g = check_fused(&b, &[feed("x", &[4, 6], 13)], tol, tol);
        assert_eq!(op_list(&g), ["Cast", FUSED, "Cast"], "{dtype}");
        assert_eq!(
            g.nodes[1].attribute("dtype").unwrap().as_int(),
            Some(dtype.onnx_code() as i64)
        );
    }
    // x without a declared type: nothing is known, nothing fuses.
    let mut b = G::new(13);
    let x = b.g.create_value("x", None);
    b.g.add_input(x);
    b.node("Neg", &["x"], &["n"]);
    b.node("Exp", &["n"], &["y"]);
    b.output("y");
    let dev = cuda();
    assert_eq!(
        op_list(&optimized(&b, All, Some(dev.as_ref()))),
        ["Neg", "Exp"]
    );
}

/// Clip with constant bound inputs, variadic Sum / Mean / Max, Pow with an int64 exponent and
/// activations with attributes: all one node; the bounds and the exponent become literals.
#[test]
fn variadic_and_attribute_ops_fuse() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[3, 7]);
    f32_init(&mut b, "bias", &[7], 14);
    scalar(&mut b, "lo", -1.5);
    scalar(&mut b, "hi", 2.0);
    scalar(&mut b, "floor", 0.1);
    b.init("two", &Tensor::scalar(2i64));
    b.node("Clip", &["x", "lo", "hi"], &["c"]);
    b.node("Sum", &["c", "x", "bias"], &["s"]);
    b.node("Mean", &["s", "x"], &["m"]);
    b.node("Max", &["m", "floor"], &["mx"]);
    b.node("Pow", &["mx", "two"], &["p"]);
    b.node_attrs(
        "LeakyRelu",
        &["p"],
        &["l"],
        vec![("alpha", Attribute::Float(0.2))],
    );
    b.node_attrs(
        "HardSigmoid",
        &["l"],
        &["y"],
        vec![("alpha", Attribute::Float(0.3))],
    );
    b.output("y");
    let g = check_fused(&b, &[feed("x", &[3, 7], 15)], 1e-6, 1e-5);
    assert_eq!(op_list(&g), [FUSED]);
    let names: Vec<&str> = g.nodes[0]
        .inputs
        .iter()
        .map(|v| g.value(v.unwrap()).name.as_str())
        .collect();
    assert_eq!(names, ["x", "bias"]);
    let p = &programs(&g)[0];
    assert!(p.contains("Clip in0 -1.5 2.0"), "{p}");
    assert!(p.contains("Pow") && p.contains(" 2.0"), "{p}");
    // The unread bounds and exponent are gone from the graph.
    assert_eq!(g.initializers.len(), 1);
}
