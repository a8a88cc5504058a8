//! If, Loop and Scan against references computed here in float64 loops.

use super::*;

fn graph_attr(g: G) -> Attribute {
    Attribute::Graph(Box::new(g.g))
}

fn bool_t(v: bool) -> Tensor {
    Tensor::from_bools(vec![], &[v])
}

#[test]
fn if_picks_a_branch_that_reads_outer_values() {
    let mut then_b = G::body();
    then_b.node("Add", &["x", "c"], &["y_then"]);
    then_b.output("y_then");
    let mut else_b = G::body();
    else_b.node("Mul", &["x", "c"], &["y_else"]);
    else_b.output("y_else");

    let mut b = G::new(16);
    b.input("cond", DataType::Bool, &[]);
    b.input("x", DataType::Float32, &[3]);
    b.init("c", &Tensor::from_vec(vec![3], vec![1f32, -2.0, 0.25]));
    b.node_attrs(
        "If",
        &["cond"],
        &["y"],
        vec![
            ("then_branch", graph_attr(then_b)),
            ("else_branch", graph_attr(else_b)),
        ],
    );
    b.output("y");
    let s = b.session();
    let x = rand_f32(3, 3);
    let c = [1.0, -2.0, 0.25];
    for cond in [true, false] {
        let outs = s
            .run(&[("cond", Value::Tensor(bool_t(cond))), ("x", f32t(&[3], &x))])
            .unwrap();
        let want: Vec<f64> = x
            .iter()
            .zip(c)
            .map(|(&x, c)| if cond { x as f64 + c } else { x as f64 * c })
            .collect();
        assert_close(&out_f32(&outs, 0).1, &want);
    }
    let err = s
        .run(&[
            (
                "cond",
                Value::Tensor(Tensor::from_bools(vec![2], &[true, false])),
            ),
            ("x", f32t(&[3], &x)),
        ])
        .err();
    assert!(err.is_some(), "a two-element condition must be rejected");
}

/// Body: s' = s + float(i) * k (k from the outer graph), scan output s'.
fn accumulate_body() -> G {
    let mut body = G::body();
    body.input("i", DataType::Int64, &[]);
    body.input("cond_in", DataType::Bool, &[]);
    body.input("s", DataType::Float32, &[2]);
    body.node("ToFloat", &["i"], &["i_f"]);
    body.node("Mul", &["i_f", "k"], &["step"]);
    body.node("Add", &["s", "step"], &["s_out"]);
    body.node("Identity", &["cond_in"], &["cond_out"]);
    body.node("Identity", &["s_out"], &["scan"]);
    body.output("cond_out");
    body.output("s_out");
    body.output_typed("scan", DataType::Float32, &[2]);
    body
}

fn loop_graph(m: Option<i64>, cond: Option<bool>) -> G {
    let mut b = G::new(13);
    b.input("s0", DataType::Float32, &[2]);
    b.input("k", DataType::Float32, &[2]);
    let mut ins = vec!["", "", "s0"];
    if let Some(m) = m {
        b.init("M", &Tensor::scalar(m));
        ins[0] = "M";
    }
    if let Some(c) = cond {
        b.init("C", &bool_t(c));
        ins[1] = "C";
    }
    b.node_attrs(
        "Loop",
        &ins,
        &["s_final", "s_all"],
        vec![("body", graph_attr(accumulate_body()))],
    );
    b.output("s_final");
    b.output("s_all");
    b
}

#[test]
fn loop_with_trip_count_carries_state_and_stacks_scan_outputs() {
    let s0 = rand_f32(2, 11);
    let k = rand_f32(2, 12);
    for (m, cond) in [(Some(5), Some(true)), (Some(4), None)] {
        let s = loop_graph(m, cond).session();
        let outs = s
            .run(&[("s0", f32t(&[2], &s0)), ("k", f32t(&[2], &k))])
            .unwrap();
        let mut state: Vec<f64> = s0.iter().map(|&v| v as f64).collect();
        let mut all = Vec::new();
        for i in 0..m.unwrap() {
            for (s, k) in state.iter_mut().zip(&k) {
                *s += i as f64 * *k as f64;
            }
            all.extend(state.iter().copied());
        }
        assert_close(&out_f32(&outs, 0).1, &state);
        let (shape, got) = out_f32(&outs, 1);
        assert_eq!(shape, vec![m.unwrap() as usize, 2]);
        assert_close(&got, &all);
    }
}

#[test]
fn loop_with_zero_trips_or_false_condition_returns_initial_values() {
    let s0 = rand_f32(2, 5);
    for (m, cond) in [(Some(0), Some(true)), (Some(3), Some(false))] {
        let s = loop_graph(m, cond).session();
        let outs = s
            .run(&[("s0", f32t(&[2], &s0)), ("k", f32t(&[2], &[1.0, 1.0]))])
            .unwrap();
        assert_eq!(out_f32(&outs, 0).1, s0);
        assert_eq!(out_f32(&outs, 1).0, vec![0, 2]);
    }
}

#[test]
fn while_loop_stops_on_the_body_condition() {
    // s' = s + 1; cond' = s' < limit; scan s'.
    let mut body = G::body();
    body.input("i", DataType::Int64, &[]);
    body.input("c", DataType::Bool, &[]);
    body.input("s", DataType::Float32, &[]);
    body.node("Add", &["s", "one"], &["s2"]);
    body.node("Less", &["s2", "limit"], &["c2"]);
    body.node("Identity", &["s2"], &["scan"]);
    body.output("c2");
    body.output("s2");
    body.output("scan");
    let mut b = G::new(11);
    b.input("limit", DataType::Float32, &[]);
    b.init("one", &Tensor::scalar(1f32));
    b.init("s0", &Tensor::scalar(0f32));
    b.init("true", &bool_t(true));
    b.node_attrs(
        "Loop",
        &["", "true", "s0"],
        &["s", "all"],
        vec![("body", graph_attr(body))],
    );
    b.output("s");
    b.output("all");
    let outs = b.session().run(&[("limit", f32t(&[], &[3.5]))]).unwrap();
    assert_eq!(out_f32(&outs, 0), (vec![], vec![4.0]));
    assert_eq!(out_f32(&outs, 1), (vec![4], vec![1.0, 2.0, 3.0, 4.0]));
}

#[test]
fn loop_carries_sequences() {
    let mut body = G::body();
    body.input("i", DataType::Int64, &[]);
    body.input("c", DataType::Bool, &[]);
    body.input_typed(
        "seq",
        ValueType::Sequence(Box::new(ValueType::Tensor {
            dtype: DataType::Float32,
            shape: None,
        })),
    );
    body.node("Identity", &["c"], &["c2"]);
    body.node("Identity", &["seq"], &["seq2"]);
    body.output("c2");
    body.output("seq2");
    let mut b = G::new(13);
    b.input_typed(
        "seq0",
        ValueType::Sequence(Box::new(ValueType::Tensor {
            dtype: DataType::Float32,
            shape: None,
        })),
    );
    b.init("M", &Tensor::scalar(3i64));
    b.node_attrs(
        "Loop",
        &["M", "", "seq0"],
        &["seq"],
        vec![("body", graph_attr(body))],
    );
    b.output("seq");
    let items = vec![
        Tensor::from_vec(vec![2], rand_f32(2, 9)),
        Tensor::from_vec(vec![1], vec![4f32]),
    ];
    let outs = b
        .session()
        .run(&[(
            "seq0",
            Value::Sequence {
                dtype: DataType::Float32,
                items: items.clone(),
            },
        )])
        .unwrap();
    match &outs[0].1 {
        Value::Sequence { items: got, .. } => {
            assert_eq!(got.len(), 2);
            assert_eq!(got[0].data::<f32>(), items[0].data::<f32>());
        }
        other => panic!("expected a sequence, got {other:?}"),
    }
}

#[test]
fn nested_subgraphs_read_values_two_scopes_up() {
    // If(cond) then: Loop 3 times s += k; else: k. `k` lives in the top graph.
    let mut body = G::body();
    body.input("i", DataType::Int64, &[]);
    body.input("c", DataType::Bool, &[]);
    body.input("s", DataType::Float32, &[2]);
    body.node("Add", &["s", "k"], &["s2"]);
    body.node("Identity", &["c"], &["c2"]);
    body.output("c2");
    body.output("s2");
    let mut then_b = G::body();
    then_b.node_attrs(
        "Loop",
        &["M", "", "k"],
        &["r"],
        vec![("body", graph_attr(body))],
    );
    then_b.output("r");
    let mut else_b = G::body();
    else_b.node("Identity", &["k"], &["r2"]);
    else_b.output("r2");
    let mut b = G::new(13);
    b.input("cond", DataType::Bool, &[]);
    b.input("k", DataType::Float32, &[2]);
    b.init("M", &Tensor::scalar(3i64));
    b.node_attrs(
        "If",
        &["cond"],
        &["out"],
        vec![
            ("then_branch", graph_attr(then_b)),
            ("else_branch", graph_attr(else_b)),
        ],
    );
    b.output("out");
    let s = b.session();
    let k = rand_f32(2, 21);
    let outs = s
        .run(&[("cond", Value::Tensor(bool_t(true))), ("k", f32t(&[2], &k))])
        .unwrap();
    let want: Vec<f64> = k.iter().map(|&v| 4.0 * v as f64).collect();
    assert_close(&out_f32(&outs, 0).1, &want);
    let outs = s
        .run(&[
            ("cond", Value::Tensor(bool_t(false))),
            ("k", f32t(&[2], &k)),
        ])
        .unwrap();
    assert_eq!(out_f32(&outs, 0).1, k);
}

#[test]
fn scan_9_with_axes_and_directions() {
    // body(s, a, b) -> (s + a*b, s + a*b, a*b); A: [4, 3] scanned on axis 0 forward,
    // B: [3, 4] on axis 1 in reverse; outputs stacked on axis 0 forward and axis -1 reversed.
    let mut body = G::body();
    body.input("s", DataType::Float32, &[3]);
    body.input("a", DataType::Float32, &[3]);
    body.input("b", DataType::Float32, &[3]);
    body.node("Mul", &["a", "b"], &["p"]);
    body.node("Add", &["s", "p"], &["s2"]);
    body.node("Identity", &["s2"], &["o1"]);
    body.node("Identity", &["p"], &["o2"]);
    body.output("s2");
    body.output("o1");
    body.output("o2");
    let mut b = G::new(11);
    b.input("s0", DataType::Float32, &[3]);
    b.input("A", DataType::Float32, &[4, 3]);
    b.input("B", DataType::Float32, &[3, 4]);
    b.node_attrs(
        "Scan",
        &["s0", "A", "B"],
        &["s", "O1", "O2"],
        vec![
            ("body", graph_attr(body)),
            ("num_scan_inputs", Attribute::Int(2)),
            ("scan_input_axes", Attribute::Ints(vec![0, 1])),
            ("scan_input_directions", Attribute::Ints(vec![0, 1])),
            ("scan_output_axes", Attribute::Ints(vec![0, -1])),
            ("scan_output_directions", Attribute::Ints(vec![0, 1])),
        ],
    );
    for o in ["s", "O1", "O2"] {
        b.output(o);
    }
    let (s0, a, bm) = (rand_f32(3, 1), rand_f32(12, 2), rand_f32(12, 3));
    let outs = b
        .session()
        .run(&[
            ("s0", f32t(&[3], &s0)),
            ("A", f32t(&[4, 3], &a)),
            ("B", f32t(&[3, 4], &bm)),
        ])
        .unwrap();
    let mut s: Vec<f64> = s0.iter().map(|&v| v as f64).collect();
    let mut o1 = vec![0.0; 12];
    let mut o2 = vec![0.0; 12]; // [3, 4]
    for t in 0..4 {
        for j in 0..3 {
            let p = a[t * 3 + j] as f64 * bm[j * 4 + (3 - t)] as f64;
            s[j] += p;
            o1[t * 3 + j] = s[j];
            o2[j * 4 + (3 - t)] = p;
        }
    }
    assert_close(&out_f32(&outs, 0).1, &s);
    assert_eq!(out_f32(&outs, 1).0, vec![4, 3]);
    assert_close(&out_f32(&outs, 1).1, &o1);
    assert_eq!(out_f32(&outs, 2).0, vec![3, 4]);
    assert_close(&out_f32(&outs, 2).1, &o2);
}

#[test]
fn scan_8_batches_with_sequence_lengths() {
    let mut body = G::body();
    body.input("s", DataType::Float32, &[2]);
    body.input("x", DataType::Float32, &[2]);
    body.node("Add", &["s", "x"], &["s2"]);
    body.node("Identity", &["s2"], &["o"]);
    body.output("s2");
    body.output("o");
    let mut b = G::new(8);
    b.input("lens", DataType::Int64, &[2]);
    b.input("s0", DataType::Float32, &[2, 2]);
    b.input("X", DataType::Float32, &[2, 3, 2]);
    b.node_attrs(
        "Scan",
        &["lens", "s0", "X"],
        &["s", "Y"],
        vec![
            ("body", graph_attr(body)),
            ("num_scan_inputs", Attribute::Int(1)),
            ("directions", Attribute::Ints(vec![1])),
        ],
    );
    b.output("s");
    b.output("Y");
    let (s0, x) = (rand_f32(4, 4), rand_f32(12, 5));
    let lens = [3usize, 2];
    let outs = b
        .session()
        .run(&[
            (
                "lens",
                Value::Tensor(Tensor::from_vec(vec![2], vec![3i64, 2])),
            ),
            ("s0", f32t(&[2, 2], &s0)),
            ("X", f32t(&[2, 3, 2], &x)),
        ])
        .unwrap();
    let mut s_want = vec![0.0; 4];
    let mut y_want = vec![0.0; 12];
    for batch in 0..2 {
        let mut s: Vec<f64> = s0[batch * 2..batch * 2 + 2]
            .iter()
            .map(|&v| v as f64)
            .collect();
        for t in 0..lens[batch] {
            let step = lens[batch] - 1 - t; // reverse within the valid length
            for j in 0..2 {
                s[j] += x[batch * 6 + step * 2 + j] as f64;
                y_want[batch * 6 + t * 2 + j] = s[j];
            }
        }
        s_want[batch * 2..batch * 2 + 2].copy_from_slice(&s);
    }
    assert_close(&out_f32(&outs, 0).1, &s_want);
    assert_eq!(out_f32(&outs, 1).0, vec![2, 3, 2]);
    assert_close(&out_f32(&outs, 1).1, &y_want);
}

#[test]
fn body_errors_say_where_they_happened() {
    let mut body = G::body();
    body.input("s", DataType::Float32, &[-1]);
    body.input("x", DataType::Float32, &[-1]);
    body.node("Add", &["s", "x"], &["s2"]);
    body.output("s2");
    let mut b = G::new(11);
    b.input("s0", DataType::Float32, &[-1]);
    b.input("X", DataType::Float32, &[-1, -1]);
    b.node_attrs(
        "Scan",
        &["s0", "X"],
        &["s"],
        vec![
            ("body", graph_attr(body)),
            ("num_scan_inputs", Attribute::Int(1)),
        ],
    );
    b.output("s");
    let err = b
        .session()
        .run(&[
            ("s0", f32t(&[2], &[0.0; 2])),
            ("X", f32t(&[2, 3], &[0.0; 6])),
        ])
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("Scan node #0 body, iteration 0") && err.contains("differ"),
        "{err}"
    );
}

fn f32_seq_type() -> ValueType {
    ValueType::Sequence(Box::new(ValueType::Tensor {
        dtype: DataType::Float32,
        shape: None,
    }))
}

fn f32_seq(items: Vec<Tensor>) -> Value {
    Value::Sequence {
        dtype: DataType::Float32,
        items,
    }
}

/// SequenceMap over a sequence, a second sequence indexed alike and a tensor passed whole:
/// out = x + y * t per element, and x < y as a second output sequence.
fn sequence_map_session() -> crate::Session {
    let mut body = G::body();
    body.input("x", DataType::Float32, &[-1]);
    body.input("y", DataType::Float32, &[-1]);
    body.input("t", DataType::Float32, &[1]);
    body.node("Mul", &["y", "t"], &["yt"]);
    body.node("Add", &["x", "yt"], &["sum"]);
    body.node("Less", &["x", "y"], &["less"]);
    body.output("sum");
    body.output("less");
    // Declared element types (rank unknown): what empty output sequences take.
    for (name, dtype) in [("sum", DataType::Float32), ("less", DataType::Bool)] {
        let id = body.v(name);
        body.g.value_mut(id).ty = Some(ValueType::Tensor { dtype, shape: None });
    }
    let mut b = G::new(17);
    b.input_typed("xs", f32_seq_type());
    b.input_typed("ys", f32_seq_type());
    b.input("t", DataType::Float32, &[1]);
    b.node_attrs(
        "SequenceMap",
        &["xs", "ys", "t"],
        &["sums", "lesses"],
        vec![("body", graph_attr(body))],
    );
    b.output("sums");
    b.output("lesses");
    b.session()
}

#[test]
fn sequence_map_indexes_sequences_and_passes_tensors_whole() {
    let s = sequence_map_session();
    let lens = [3usize, 1, 5];
    let xs: Vec<Vec<f32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| rand_f32(n, i as u64))
        .collect();
    let ys: Vec<Vec<f32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| rand_f32(n, 10 + i as u64))
        .collect();
    let t = 0.75f32;
    let seq = |v: &[Vec<f32>]| {
        f32_seq(
            v.iter()
                .map(|x| Tensor::from_vec(vec![x.len()], x.clone()))
                .collect(),
        )
    };
    let outs = s
        .run(&[("xs", seq(&xs)), ("ys", seq(&ys)), ("t", f32t(&[1], &[t]))])
        .unwrap();
    let (sums, lesses) = match (&outs[0].1, &outs[1].1) {
        (Value::Sequence { items: a, .. }, Value::Sequence { items: b, .. }) => (a, b),
        other => panic!("expected two sequences, got {other:?}"),
    };
    assert_eq!(sums.len(), 3);
    for i in 0..3 {
        let want: Vec<f64> = xs[i]
            .iter()
            .zip(&ys[i])
            .map(|(&x, &y)| x as f64 + y as f64 * t as f64)
            .collect();
        assert_close(sums[i].data::<f32>(), &want);
        let less: Vec<u8> = xs[i]
            .iter()
            .zip(&ys[i])
            .map(|(x, y)| (x < y) as u8)
            .collect();
        assert_eq!(lesses[i].bytes(), less.as_slice());
    }

    // An empty input sequence gives empty sequences of the body's declared types.
    let outs = s
        .run(&[
            ("xs", f32_seq(vec![])),
            ("ys", f32_seq(vec![])),
            ("t", f32t(&[1], &[t])),
        ])
        .unwrap();
    match (&outs[0].1, &outs[1].1) {
        (
            Value::Sequence {
                dtype: d0,
                items: a,
            },
            Value::Sequence {
                dtype: d1,
                items: b,
            },
        ) => {
            assert!(a.is_empty() && b.is_empty());
            assert_eq!((*d0, *d1), (DataType::Float32, DataType::Bool));
        }
        other => panic!("expected two sequences, got {other:?}"),
    }

    // Sequences of different lengths are an error naming the input.
    let err = s
        .run(&[
            ("xs", seq(&xs)),
            ("ys", seq(&ys[..2])),
            ("t", f32t(&[1], &[t])),
        ])
        .unwrap_err()
        .to_string();
    assert!(err.contains("additional input 1"), "{err}");
}
