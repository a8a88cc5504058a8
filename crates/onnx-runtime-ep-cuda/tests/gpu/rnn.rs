//! The recurrent family (RNN, GRU, LSTM) against the CPU provider on random inputs: every
//! direction, with and without biases and initial states, sequence_lens (mixed lengths with
//! 0 and full ones, int32 and int64), peepholes and input_forget, layout 1, clip, activation
//! lists with alphas and betas, GRU's two reset modes, hidden sizes on both sides of the
//! one-launch limit (1, 16, 128, 136, 257), sequence lengths 1 and 37, batches 1 and 5,
//! strided inputs, omitted outputs and inputs, opsets 7 / 14 / 22, empty sequences, graph
//! capture, and bad inputs as errors naming the node. Half types run against a float32 CPU
//! reference on the same (upcast) values: the GPU keeps the state in float, so only the
//! output rounding differs. Weights are scaled by 1 / sqrt(fan-in) so states do not saturate.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider, Kernel};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const F32: DataType = DataType::Float32;
const F64: DataType = DataType::Float64;
const F16: DataType = DataType::Float16;
const BF16: DataType = DataType::BFloat16;

const DIRECTIONS: [&str; 3] = ["forward", "reverse", "bidirectional"];

/// Continuous uniform values in [lo, hi) stored as `dtype`.
fn uniform(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: f64, hi: f64) -> T {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| lo + (hi - lo) * ((rng.next() >> 11) as f64 / (1u64 << 53) as f64))
        .collect();
    from_f64s(dtype, shape, &v)
}

/// (rtol, atol) for outputs of `dtype` against a float32 (or same-type) reference after up to
/// 37 steps.
fn tol(dtype: DataType) -> (f64, f64) {
    match dtype {
        F64 => (1e-9, 1e-9),
        F16 => (2e-3, 2e-3),
        BF16 => (2e-2, 2e-2),
        _ => (1e-4, 1e-4),
    }
}

fn gates(op: &str) -> usize {
    match op {
        "RNN" => 1,
        "GRU" => 3,
        _ => 4,
    }
}

/// One recurrent node and its random inputs.
#[derive(Clone)]
struct Case {
    op: &'static str,
    dtype: DataType,
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    direction: &'static str,
    layout: bool,
    bias: bool,
    h0: bool,
    c0: bool,
    peep: bool,
    lens: Option<Vec<i64>>,
    lens_dtype: DataType,
    attrs: Vec<(&'static str, Attribute)>,
    outputs: usize,
    opset: u64,
    x_layout: Layout,
    w_layout: Layout,
    r_layout: Layout,
    b_layout: Layout,
    state_layout: Layout,
}

impl Case {
    fn new(op: &'static str, seq: usize, batch: usize, input: usize, hidden: usize) -> Case {
        Case {
            op,
            dtype: F32,
            seq,
            batch,
            input,
            hidden,
            direction: "forward",
            layout: false,
            bias: false,
            h0: false,
            c0: false,
            peep: false,
            lens: None,
            lens_dtype: DataType::Int32,
            attrs: Vec::new(),
            outputs: if op == "LSTM" { 3 } else { 2 },
            opset: 14,
            x_layout: Layout::Contiguous,
            w_layout: Layout::Contiguous,
            r_layout: Layout::Contiguous,
            b_layout: Layout::Contiguous,
            state_layout: Layout::Contiguous,
        }
    }
    fn dtype(mut self, d: DataType) -> Self {
        self.dtype = d;
        self
    }
    fn dir(mut self, d: &'static str) -> Self {
        self.direction = d;
        self
    }
    fn bias(mut self, on: bool) -> Self {
        self.bias = on;
        self
    }
    fn h0(mut self, on: bool) -> Self {
        self.h0 = on;
        self
    }
    fn c0(mut self, on: bool) -> Self {
        self.c0 = on;
        self
    }
    fn peep(mut self, on: bool) -> Self {
        self.peep = on;
        self
    }
    /// Every optional input (biases, initial states, peepholes).
    fn all(self) -> Self {
        self.bias(true).h0(true).c0(true).peep(true)
    }
    fn lens(mut self, v: &[i64]) -> Self {
        self.lens = Some(v.to_vec());
        self
    }
    fn lens_dtype(mut self, d: DataType) -> Self {
        self.lens_dtype = d;
        self
    }
    fn layout1(mut self) -> Self {
        self.layout = true;
        self
    }
    fn attr(mut self, k: &'static str, v: Attribute) -> Self {
        self.attrs.push((k, v));
        self
    }
    fn outs(mut self, n: usize) -> Self {
        self.outputs = n;
        self
    }
    fn opset(mut self, v: u64) -> Self {
        self.opset = v;
        self
    }
    fn strided(mut self) -> Self {
        self.x_layout = Layout::Reversed;
        self.w_layout = Layout::Padded;
        self.r_layout = Layout::Reversed;
        self.b_layout = Layout::Padded;
        self.state_layout = Layout::Reversed;
        self
    }

    fn nd(&self) -> usize {
        if self.direction == "bidirectional" {
            2
        } else {
            1
        }
    }

    fn what(&self) -> String {
        format!(
            "{} {} {} seq {} batch {} input {} hidden {}{}{}{}{}{}{} lens {:?} attrs {:?} \
             outputs {} opset {}",
            self.op,
            self.dtype,
            self.direction,
            self.seq,
            self.batch,
            self.input,
            self.hidden,
            if self.layout { " layout1" } else { "" },
            if self.bias { " B" } else { "" },
            if self.h0 { " h0" } else { "" },
            if self.c0 && self.op == "LSTM" {
                " c0"
            } else {
                ""
            },
            if self.peep && self.op == "LSTM" {
                " P"
            } else {
                ""
            },
            if self.x_layout != Layout::Contiguous {
                " strided"
            } else {
                ""
            },
            self.lens,
            self.attrs,
            self.outputs,
            self.opset
        )
    }

    /// The node (omitted inputs as None) and its inputs by position.
    fn build(&self, rng: &mut Rng) -> (Node, Vec<Option<T>>) {
        let (h, g, nd, dt) = (self.hidden, gates(self.op), self.nd(), self.dtype);
        let (seq, batch, input) = (self.seq, self.batch, self.input);
        let ws = 1.0 / (input.max(1) as f64).sqrt();
        let rs = 1.0 / (h as f64).sqrt();
        let x_shape = if self.layout {
            vec![batch, seq, input]
        } else {
            vec![seq, batch, input]
        };
        let state = if self.layout {
            vec![batch, nd, h]
        } else {
            vec![nd, batch, h]
        };
        let lstm = self.op == "LSTM";
        let mut inputs: Vec<Option<T>> = vec![
            Some(uniform(rng, dt, &x_shape, -1.0, 1.0).with_layout(self.x_layout)),
            Some(uniform(rng, dt, &[nd, g * h, input], -ws, ws).with_layout(self.w_layout)),
            Some(uniform(rng, dt, &[nd, g * h, h], -rs, rs).with_layout(self.r_layout)),
            self.bias
                .then(|| uniform(rng, dt, &[nd, 2 * g * h], -0.3, 0.3).with_layout(self.b_layout)),
            self.lens.as_ref().map(|l| {
                if self.lens_dtype == DataType::Int64 {
                    i64s(&[l.len()], l)
                } else {
                    let v: Vec<i32> = l.iter().map(|&x| x as i32).collect();
                    i32s(&[l.len()], &v)
                }
            }),
            self.h0
                .then(|| uniform(rng, dt, &state, -0.8, 0.8).with_layout(self.state_layout)),
        ];
        if lstm {
            inputs.push(
                self.c0
                    .then(|| uniform(rng, dt, &state, -0.8, 0.8).with_layout(self.state_layout)),
            );
            inputs.push(
                self.peep
                    .then(|| uniform(rng, dt, &[nd, 3 * h], -0.5, 0.5).with_layout(self.b_layout)),
            );
        }
        while matches!(inputs.last(), Some(None)) {
            inputs.pop();
        }
        let mut attrs: Vec<(&str, Attribute)> = vec![
            ("hidden_size", Attribute::Int(h as i64)),
            ("direction", Attribute::String(self.direction.into())),
        ];
        if self.layout {
            attrs.push(("layout", Attribute::Int(1)));
        }
        attrs.extend(self.attrs.iter().cloned());
        let mut n = node(self.op, inputs.len(), self.outputs, &attrs);
        for (i, t) in inputs.iter().enumerate() {
            if t.is_none() {
                n.inputs[i] = None;
            }
        }
        (n, inputs)
    }
}

/// Runs the node on the GPU with the wired inputs, checks that `output_types` gives the CPU
/// provider's output types, and compares every output with the CPU provider (on float32
/// copies of half inputs). Returns the GPU outputs.
fn check_node(
    ep: &CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[Option<T>],
    what: &str,
) -> Vec<T> {
    let up: Vec<Option<T>> = inputs.iter().map(|t| t.as_ref().map(half_as_f32)).collect();
    let up_refs: Vec<Option<&T>> = up.iter().map(Option::as_ref).collect();
    let want = cpu_reference(node, opset, &up_refs)
        .unwrap_or_else(|e| panic!("{what}: CPU reference (float32): {e}"));
    // The CPU outputs have the input's dtype (float32 here for half inputs).
    let dtype = inputs[0].as_ref().expect("X").dtype;
    let wired: Vec<T> = inputs.iter().flatten().cloned().collect();
    let shapes: Vec<Vec<usize>> = wired.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep
        .get_kernel(node, &shapes, opset)
        .unwrap_or_else(|e| panic!("{what}: get_kernel: {e}"));
    assert_eq!(
        kernel.capture_support(),
        CaptureSupport::Supported,
        "{what}: capture support"
    );
    let mut bound = Bound::new(ep, &wired, &[]);
    let types = bound
        .output_types(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: output_types: {e}"));
    let native_types: Vec<(DataType, Vec<usize>)> =
        want.iter().map(|t| (dtype, t.shape.clone())).collect();
    assert_eq!(
        types, native_types,
        "{what}: output_types vs the CPU outputs"
    );
    bound.set_outputs(&types);
    bound
        .execute(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: execute: {e}"));
    let got = bound
        .read()
        .unwrap_or_else(|e| panic!("{what}: reading the outputs: {e}"));
    let names = ["Y", "Y_h", "Y_c"];
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let (rtol, atol) = tol(g.dtype);
        assert_eq!(g.shape, w.shape, "{what}: {} shape", names[k]);
        let mut worst = (0.0f64, 0usize);
        for i in 0..w.numel() {
            let (gv, wv) = (get(g, i), get(w, i));
            let excess = (gv - wv).abs() - (atol + rtol * wv.abs());
            if excess.is_nan() || (excess > 0.0 && excess > worst.0) {
                worst = (
                    if excess.is_nan() {
                        f64::INFINITY
                    } else {
                        excess
                    },
                    i,
                );
            }
        }
        if worst.0 > 0.0 {
            let i = worst.1;
            panic!(
                "{what}: {} ({}) element {i} of {:?} (index {:?}): got {}, want {} \
                 (rtol {rtol}, atol {atol})",
                names[k],
                g.dtype,
                w.shape,
                unravel(&w.shape, i),
                get(g, i),
                get(w, i)
            );
        }
    }
    got
}

fn unravel(shape: &[usize], mut i: usize) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for k in (0..shape.len()).rev() {
        idx[k] = i % shape[k].max(1);
        i /= shape[k].max(1);
    }
    idx
}

fn check(ep: &CudaExecutionProvider, rng: &mut Rng, c: &Case) -> Vec<T> {
    let (n, inputs) = c.build(rng);
    check_node(ep, &n, c.opset, &inputs, &c.what())
}

// ---- each op, each direction ----

#[test]
fn rnn_every_direction_with_and_without_bias_and_initial_h() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    for hidden in [16, 160] {
        for dir in DIRECTIONS {
            for (bias, h0) in [(false, false), (true, false), (false, true), (true, true)] {
                let c = Case::new("RNN", 7, 3, 5, hidden).dir(dir).bias(bias).h0(h0);
                check(&ep, &mut rng, &c);
            }
        }
    }
}

#[test]
fn gru_linear_before_reset_0_and_1_every_direction() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    for hidden in [16, 200] {
        for lbr in [0, 1] {
            for dir in DIRECTIONS {
                for on in [false, true] {
                    let c = Case::new("GRU", 9, 3, 6, hidden)
                        .dir(dir)
                        .bias(on)
                        .h0(on)
                        .attr("linear_before_reset", Attribute::Int(lbr));
                    check(&ep, &mut rng, &c);
                }
            }
        }
    }
}

#[test]
fn lstm_peepholes_input_forget_and_states_every_direction() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    for hidden in [16, 144] {
        for dir in DIRECTIONS {
            for (peep, forget) in [(false, 0), (true, 0), (false, 1), (true, 1)] {
                let c = Case::new("LSTM", 8, 3, 6, hidden)
                    .dir(dir)
                    .bias(true)
                    .h0(true)
                    .c0(peep)
                    .peep(peep)
                    .attr("input_forget", Attribute::Int(forget));
                check(&ep, &mut rng, &c);
            }
            // No optional input at all.
            check(&ep, &mut rng, &Case::new("LSTM", 8, 3, 6, hidden).dir(dir));
        }
    }
}

// ---- sequence_lens, layout 1 ----

#[test]
fn sequence_lens_mixed_with_zero_and_full_lengths() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    let lens = [37, 0, 5, 1, 37];
    for op in ["RNN", "GRU", "LSTM"] {
        for hidden in [16, 136] {
            for (k, dir) in DIRECTIONS.into_iter().enumerate() {
                let lens_dtype = if k == 1 {
                    DataType::Int64
                } else {
                    DataType::Int32
                };
                // With initial states (a row of length 0 keeps them) and without.
                for on in [false, true] {
                    let c = Case::new(op, 37, 5, 4, hidden)
                        .dir(dir)
                        .bias(true)
                        .h0(on)
                        .c0(on)
                        .peep(on)
                        .lens(&lens)
                        .lens_dtype(lens_dtype);
                    check(&ep, &mut rng, &c);
                }
            }
            // Every row full.
            let c = Case::new(op, 6, 5, 4, hidden)
                .dir("bidirectional")
                .lens(&[6; 5]);
            check(&ep, &mut rng, &c);
        }
    }
    // GRU with linear_before_reset 0 (two launches a step) and mixed lengths.
    for hidden in [16, 136] {
        let c = Case::new("GRU", 11, 5, 4, hidden)
            .dir("bidirectional")
            .all()
            .lens(&[11, 0, 3, 1, 7]);
        check(&ep, &mut rng, &c);
    }
}

#[test]
fn layout_1_with_initial_states_and_sequence_lens() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    for op in ["RNN", "GRU", "LSTM"] {
        for hidden in [16, 136] {
            for dir in DIRECTIONS {
                let c = Case::new(op, 6, 4, 3, hidden)
                    .dir(dir)
                    .all()
                    .lens(&[6, 2, 0, 5])
                    .layout1();
                check(&ep, &mut rng, &c);
            }
            let c = Case::new(op, 5, 2, 3, hidden).layout1();
            check(&ep, &mut rng, &c);
        }
    }
}

// ---- clip and activations ----

#[test]
fn clip_and_non_default_activations() {
    let ep = gpu();
    let mut rng = Rng::new(6);
    let strings = |v: &[&str]| Attribute::Strings(v.iter().map(|s| s.to_string()).collect());
    let floats = |v: &[f32]| Attribute::Floats(v.to_vec());
    for hidden in [16, 136] {
        // LSTM [HardSigmoid, Tanh, Relu] with alpha / beta for HardSigmoid, and clip.
        let c = Case::new("LSTM", 12, 3, 5, hidden)
            .dir("bidirectional")
            .all()
            .attr("activations", strings(&["HardSigmoid", "Tanh", "Relu"]))
            .attr("activation_alpha", floats(&[0.3]))
            .attr("activation_beta", floats(&[0.45]))
            .attr("clip", Attribute::Float(0.7));
        check(&ep, &mut rng, &c);
        // Different lists per direction.
        let c = Case::new("LSTM", 12, 3, 5, hidden)
            .dir("bidirectional")
            .bias(true)
            .attr(
                "activations",
                strings(&[
                    "Sigmoid",
                    "ScaledTanh",
                    "Softsign",
                    "HardSigmoid",
                    "Tanh",
                    "Elu",
                ]),
            )
            .attr("activation_alpha", floats(&[0.9, 0.25, 1.3]))
            .attr("activation_beta", floats(&[1.1, 0.55]));
        check(&ep, &mut rng, &c);
        // GRU [HardSigmoid, Softsign] with clip, both reset modes.
        for lbr in [0, 1] {
            let c = Case::new("GRU", 12, 3, 5, hidden)
                .dir("reverse")
                .bias(true)
                .h0(true)
                .attr("activations", strings(&["HardSigmoid", "Softsign"]))
                .attr("activation_alpha", floats(&[0.25]))
                .attr("activation_beta", floats(&[0.4]))
                .attr("linear_before_reset", Attribute::Int(lbr))
                .attr("clip", Attribute::Float(1.5));
            check(&ep, &mut rng, &c);
        }
    }
    // RNN with every activation as f (alphas and betas where they apply), some with clip.
    let all: [(&str, &[f32], &[f32]); 11] = [
        ("Relu", &[], &[]),
        ("Tanh", &[], &[]),
        ("Sigmoid", &[], &[]),
        ("Affine", &[0.7], &[0.1]),
        ("LeakyRelu", &[0.2], &[]),
        ("ThresholdedRelu", &[0.1], &[]),
        ("ScaledTanh", &[1.2], &[0.8]),
        ("HardSigmoid", &[0.3], &[0.4]),
        ("Elu", &[0.6], &[]),
        ("Softsign", &[], &[]),
        ("Softplus", &[], &[]),
    ];
    for (k, (name, alpha, beta)) in all.iter().enumerate() {
        for hidden in [16, 136] {
            let mut c = Case::new("RNN", 10, 3, 4, hidden)
                .dir("bidirectional")
                .bias(true)
                .h0(true)
                .attr("activations", strings(&[name]));
            if !alpha.is_empty() {
                c = c.attr("activation_alpha", floats(alpha));
            }
            if !beta.is_empty() {
                c = c.attr("activation_beta", floats(beta));
            }
            if k % 3 == 0 {
                c = c.attr("clip", Attribute::Float(0.6));
            }
            check(&ep, &mut rng, &c);
        }
        // The defaults of alpha / beta.
        let c = Case::new("RNN", 4, 2, 3, 8).attr("activations", strings(&[name]));
        check(&ep, &mut rng, &c);
    }
}

// ---- sizes ----

fn sizes(op: &'static str, seed: u64) {
    let ep = gpu();
    let mut rng = Rng::new(seed);
    for hidden in [1, 16, 128, 257] {
        for seq in [1, 37] {
            for batch in [1, 5] {
                let c = Case::new(op, seq, batch, 7, hidden)
                    .dir("bidirectional")
                    .all();
                check(&ep, &mut rng, &c);
            }
        }
    }
    // Hidden sizes on the vector path of the step kernels, and batches past one chunk.
    let c = Case::new(op, 9, 19, 33, 264).dir("forward").all();
    check(&ep, &mut rng, &c);
    let c = Case::new(op, 9, 19, 33, 96).dir("reverse").all();
    check(&ep, &mut rng, &c);
}

#[test]
fn rnn_hidden_sizes_sequence_lengths_and_batches() {
    sizes("RNN", 7);
}

#[test]
fn gru_hidden_sizes_sequence_lengths_and_batches() {
    sizes("GRU", 8);
    let ep = gpu();
    let mut rng = Rng::new(18);
    for hidden in [1, 128, 257] {
        let c = Case::new("GRU", 37, 5, 7, hidden)
            .dir("bidirectional")
            .all()
            .attr("linear_before_reset", Attribute::Int(1));
        check(&ep, &mut rng, &c);
    }
}

#[test]
fn lstm_hidden_sizes_sequence_lengths_and_batches() {
    sizes("LSTM", 9);
}

// ---- dtypes, strides, opsets ----

#[test]
fn double_half_and_bfloat16_against_float32() {
    let ep = gpu();
    let mut rng = Rng::new(10);
    for dtype in [F64, F16, BF16] {
        for op in ["RNN", "GRU", "LSTM"] {
            for hidden in [16, 257] {
                // 37 steps for bfloat16 (the loosest type), fewer for the others.
                let seq = if dtype == BF16 || hidden == 16 {
                    37
                } else {
                    12
                };
                let lens = [seq as i64, 0, 12.min(seq as i64), 1, seq as i64 - 7];
                let c = Case::new(op, seq, 5, 6, hidden)
                    .dtype(dtype)
                    .dir("bidirectional")
                    .all()
                    .lens(&lens)
                    .opset(22);
                check(&ep, &mut rng, &c);
            }
            // Vector loads (hidden a multiple of 8 past the one-launch limit).
            let c = Case::new(op, 5, 3, 6, 136)
                .dtype(dtype)
                .all()
                .attr("linear_before_reset", Attribute::Int(1))
                .opset(22);
            check(&ep, &mut rng, &c);
        }
    }
}

#[test]
fn strided_inputs_of_every_kind() {
    let ep = gpu();
    let mut rng = Rng::new(11);
    for op in ["RNN", "GRU", "LSTM"] {
        for hidden in [16, 136] {
            for layout1 in [false, true] {
                let mut c = Case::new(op, 6, 3, 5, hidden)
                    .dir("bidirectional")
                    .all()
                    .lens(&[6, 3, 0])
                    .strided();
                if layout1 {
                    c = c.layout1();
                }
                check(&ep, &mut rng, &c);
            }
        }
    }
}

#[test]
fn opsets_7_14_and_22() {
    let ep = gpu();
    let mut rng = Rng::new(12);
    for op in ["RNN", "GRU", "LSTM"] {
        for opset in [7, 14, 22] {
            let c = Case::new(op, 5, 2, 3, 12)
                .dir("bidirectional")
                .all()
                .opset(opset);
            check(&ep, &mut rng, &c);
        }
        let c = Case::new(op, 5, 2, 3, 12).dtype(BF16).all().opset(22);
        check(&ep, &mut rng, &c);
    }
}

// ---- optional outputs and inputs, empty shapes ----

#[test]
fn omitted_outputs_and_inputs() {
    let ep = gpu();
    let mut rng = Rng::new(13);
    for hidden in [16, 136] {
        for outs in [1, 2, 3] {
            let c = Case::new("LSTM", 7, 3, 4, hidden)
                .dir("bidirectional")
                .all()
                .outs(outs);
            check(&ep, &mut rng, &c);
        }
        for op in ["RNN", "GRU"] {
            for outs in [1, 2] {
                let c = Case::new(op, 7, 3, 4, hidden)
                    .dir("reverse")
                    .bias(true)
                    .h0(true)
                    .outs(outs);
                check(&ep, &mut rng, &c);
            }
        }
        // Omitted inputs in the middle: no B, but sequence_lens; no initial_h but initial_c;
        // peepholes without initial states.
        let c = Case::new("LSTM", 7, 3, 4, hidden)
            .dir("bidirectional")
            .lens(&[7, 2, 5])
            .c0(true);
        check(&ep, &mut rng, &c);
        let c = Case::new("LSTM", 7, 3, 4, hidden).peep(true);
        check(&ep, &mut rng, &c);
        let c = Case::new("GRU", 7, 3, 4, hidden).h0(true);
        check(&ep, &mut rng, &c);
    }
}

#[test]
fn empty_sequence_gives_the_initial_states() {
    let ep = gpu();
    let mut rng = Rng::new(14);
    for op in ["RNN", "GRU", "LSTM"] {
        for hidden in [16, 136] {
            let got = check(
                &ep,
                &mut rng,
                &Case::new(op, 0, 3, 4, hidden).dir("bidirectional").all(),
            );
            assert_eq!(got[0].numel(), 0);
            check(&ep, &mut rng, &Case::new(op, 0, 3, 4, hidden));
            // Every row of length 0.
            let c = Case::new(op, 4, 3, 4, hidden)
                .dir("bidirectional")
                .all()
                .lens(&[0, 0, 0]);
            check(&ep, &mut rng, &c);
        }
        // No batch rows: every output is empty.
        let c = Case::new(op, 4, 0, 3, 8);
        let (n, inputs) = c.build(&mut rng);
        let wired: Vec<T> = inputs.into_iter().flatten().collect();
        let outs: Vec<(DataType, Vec<usize>)> = (0..c.outputs)
            .map(|k| {
                (
                    F32,
                    if k == 0 {
                        vec![4, 1, 0, 8]
                    } else {
                        vec![1, 0, 8]
                    },
                )
            })
            .collect();
        let got = run(&ep, &n, 14, &wired, &outs).unwrap();
        assert!(got.iter().all(|t| t.numel() == 0));
    }
}

// ---- capture ----

#[test]
fn replay_matches_eager() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(15);
    let cases = [
        Case::new("LSTM", 9, 3, 5, 160)
            .dir("bidirectional")
            .all()
            .lens(&[9, 4, 0]),
        Case::new("GRU", 9, 3, 5, 24).dir("reverse").all(),
        Case::new("GRU", 9, 3, 5, 136).all().lens(&[2, 9, 5]),
        Case::new("RNN", 9, 1, 5, 8).all(),
    ];
    let built: Vec<(Node, Vec<T>)> = cases
        .iter()
        .map(|c| {
            let (n, inputs) = c.build(&mut rng);
            (n, inputs.into_iter().flatten().collect())
        })
        .collect();
    let kernels: Vec<Box<dyn Kernel>> = built
        .iter()
        .map(|(n, inputs)| {
            let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
            ep.get_kernel(n, &shapes, 14).unwrap()
        })
        .collect();
    let mut bounds: Vec<Bound<'_>> = built
        .iter()
        .zip(&kernels)
        .map(|((_, inputs), k)| {
            let mut b = Bound::new(&ep, inputs, &[]);
            let types = b.output_types(k.as_ref()).unwrap();
            b.set_outputs(&types);
            b
        })
        .collect();
    // Warm (allocates the workspaces), then capture.
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    let refs: Vec<&dyn Kernel> = kernels.iter().map(|k| k.as_ref()).collect();
    runtime.begin_graph_capture(&refs).unwrap();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        if let Err(e) = b.execute(k.as_ref()) {
            let _ = runtime.abort_graph_capture();
            panic!("execute during capture: {e}");
        }
    }
    runtime.end_graph_capture().unwrap();
    // New X, W and initial_h; replay; compare with an eager run on the same data.
    for b in bounds.iter_mut() {
        for i in [0, 1, 5] {
            if i >= b.inputs.len() {
                continue;
            }
            let t = b.inputs[i].0.clone();
            let fresh = uniform(&mut rng, t.dtype, &t.shape, -0.5, 0.5).with_layout(t.layout);
            b.set_input(i, fresh);
        }
    }
    runtime.replay_graph().unwrap();
    let replayed: Vec<Vec<T>> = bounds.iter().map(|b| b.read().unwrap()).collect();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    for (i, b) in bounds.iter().enumerate() {
        let eager = b.read().unwrap();
        for (o, (r, e)) in replayed[i].iter().zip(&eager).enumerate() {
            assert_same(r, e, &format!("case {i} ({}) output {o}", cases[i].what()));
        }
    }
    runtime.reset_graph().unwrap();
}

// ---- errors ----

fn error_of(
    ep: &CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[T],
    outs: &[(DataType, Vec<usize>)],
) -> EpError {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = match ep.get_kernel(node, &shapes, opset) {
        Ok(k) => k,
        Err(e) => return e,
    };
    let mut bound = Bound::new(ep, inputs, outs);
    if let Err(e) = bound.output_types(kernel.as_ref()) {
        return e;
    }
    if let Err(e) = bound.execute(kernel.as_ref()) {
        return e;
    }
    bound.read().expect_err("expected an error")
}

fn assert_names_node(e: &EpError, node: &Node, needle: &str) {
    let msg = e.to_string();
    assert!(
        msg.contains(&node.name) && msg.contains(needle),
        "expected an error naming {} and saying '{needle}', got: {msg}",
        node.name
    );
}

#[test]
fn bad_inputs_and_attributes_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(16);
    let c = Case::new("LSTM", 5, 2, 3, 8)
        .dir("bidirectional")
        .all()
        .lens(&[5, 2]);
    let (n, inputs) = c.build(&mut rng);
    // Every input is wired: X, W, R, B, sequence_lens, initial_h, initial_c, P.
    assert_eq!(inputs.iter().flatten().count(), 8);
    let wired: Vec<T> = inputs.iter().flatten().cloned().collect();
    let outs = vec![
        (F32, vec![5, 2, 2, 8]),
        (F32, vec![2, 2, 8]),
        (F32, vec![2, 2, 8]),
    ];
    // W of the wrong shape (one direction only).
    let mut bad = wired.clone();
    bad[1] = uniform(&mut rng, F32, &[1, 32, 3], -0.5, 0.5);
    let e = error_of(&ep, &n, 14, &bad, &outs);
    assert_names_node(&e, &n, "W");
    // R of the wrong dtype.
    let mut bad = wired.clone();
    bad[2] = uniform(&mut rng, F64, &[2, 32, 8], -0.5, 0.5);
    let e = error_of(&ep, &n, 14, &bad, &outs);
    assert_names_node(&e, &n, "R");
    // X of rank 2.
    let mut bad = wired.clone();
    bad[0] = uniform(&mut rng, F32, &[5, 3], -0.5, 0.5);
    let e = error_of(&ep, &n, 14, &bad, &outs);
    assert_names_node(&e, &n, "3-D");
    // initial_h of the wrong shape.
    let mut bad = wired.clone();
    bad[5] = uniform(&mut rng, F32, &[2, 3, 8], -0.5, 0.5);
    let e = error_of(&ep, &n, 14, &bad, &outs);
    assert_names_node(&e, &n, "initial_h");
    // Float sequence_lens.
    let mut bad = wired.clone();
    bad[4] = uniform(&mut rng, F32, &[2], 0.0, 5.0);
    let e = error_of(&ep, &n, 14, &bad, &outs);
    assert_names_node(&e, &n, "sequence_lens");
    // A length past seq_length: reported by the device at the next synchronization.
    let mut bad = wired.clone();
    bad[4] = i32s(&[2], &[6, 2]);
    let e = error_of(&ep, &n, 14, &bad, &outs);
    assert_names_node(&e, &n, "sequence_lens");
    // An integer X is a planned refusal (the CPU kernel decides).
    let mut bad = wired.clone();
    bad[0] = i32s(&[5, 2, 3], &[1; 30]);
    let e = error_of(&ep, &n, 14, &bad, &outs);
    assert!(matches!(e, EpError::UnsupportedDtype { .. }), "{e}");
    // Attributes, refused when the kernel is built.
    let attr_err = |attrs: &[(&str, Attribute)], needle: &str| {
        let mut n = node("GRU", 3, 2, attrs);
        n.name = "bad_gru".into();
        let shapes = vec![vec![5, 2, 3], vec![1, 24, 3], vec![1, 24, 8]];
        let e = match ep.get_kernel(&n, &shapes, 14) {
            Ok(_) => panic!("expected '{needle}' to be refused"),
            Err(e) => e,
        };
        assert_names_node(&e, &n, needle);
    };
    let h8 = ("hidden_size", Attribute::Int(8));
    attr_err(&[], "hidden_size");
    attr_err(&[("hidden_size", Attribute::Int(0))], "hidden_size");
    attr_err(
        &[
            h8.clone(),
            ("direction", Attribute::String("sideways".into())),
        ],
        "direction",
    );
    attr_err(
        &[
            h8.clone(),
            (
                "activations",
                Attribute::Strings(vec!["Sigmoid".into(), "Tanh".into(), "Tanh".into()]),
            ),
        ],
        "activations",
    );
    attr_err(
        &[
            h8.clone(),
            (
                "activations",
                Attribute::Strings(vec!["Sigmoid".into(), "Gelu".into()]),
            ),
        ],
        "'Gelu'",
    );
    let mut n3 = node("GRU", 3, 3, &[h8]);
    n3.name = "gru_three_outputs".into();
    let shapes = vec![vec![5, 2, 3], vec![1, 24, 3], vec![1, 24, 8]];
    match ep.get_kernel(&n3, &shapes, 14) {
        Ok(_) => panic!("a GRU with 3 outputs must be refused"),
        Err(e) => assert_names_node(&e, &n3, "outputs"),
    }
}
