//! Plain graphs: values, initializers, liveness, ordering, input checks, errors.

use super::*;
use crate::compile::{Compiler, StepKind};
use crate::SessionError;
use std::collections::HashMap;

/// y = (x + a) * x, z = y - a; `a` is an initializer that is also an input.
fn chain() -> G {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, -1]);
    b.input("a", DataType::Float32, &[]);
    b.init("a", &Tensor::scalar(0.5f32));
    b.node("Add", &["x", "a"], &["t"]);
    b.node("Mul", &["t", "x"], &["y"]);
    b.node("Sub", &["y", "a"], &["z"]);
    b.output("y");
    b.output("z");
    b
}

#[test]
fn runs_a_chain_and_initializer_inputs_can_be_overridden() {
    let s = chain().session();
    let x = rand_f32(6, 1);
    let outs = s.run(&[("x", f32t(&[2, 3], &x))]).unwrap();
    assert_eq!(outs[0].0, "y");
    let want_y: Vec<f64> = x.iter().map(|&v| (v as f64 + 0.5) * v as f64).collect();
    let want_z: Vec<f64> = want_y.iter().map(|v| v - 0.5).collect();
    let (shape, y) = out_f32(&outs, 0);
    assert_eq!(shape, vec![2, 3]);
    assert_close(&y, &want_y);
    assert_close(&out_f32(&outs, 1).1, &want_z);

    let outs = s
        .run(&[("x", f32t(&[2, 3], &x)), ("a", f32t(&[], &[-2.0]))])
        .unwrap();
    let want_z: Vec<f64> = x
        .iter()
        .map(|&v| (v as f64 - 2.0) * v as f64 + 2.0)
        .collect();
    assert_close(&out_f32(&outs, 1).1, &want_z);
    assert_eq!(s.required_inputs().count(), 1);
}

#[test]
fn liveness_frees_each_intermediate_after_its_last_reader() {
    let b = chain();
    let compiler = Compiler {
        registry: super::kernels::registry(),
        opsets: [(String::new(), 13)].into(),
        device: None,
    };
    let plan = compiler.compile(&b.g, &HashMap::new()).unwrap();
    let slot = |n: &str| b.g.value_by_name(n).unwrap().0;
    // Step 0 (Add) makes t; step 1 (Mul) is t's and x's last reader; y and z are outputs.
    assert_eq!(plan.steps[0].free_after, Vec::<usize>::new());
    let mut freed = plan.steps[1].free_after.clone();
    freed.sort();
    let mut want = vec![slot("x"), slot("t")];
    want.sort();
    assert_eq!(freed, want);
    assert_eq!(plan.steps[2].free_after, vec![slot("a")]);
    assert!(matches!(plan.steps[0].kind, StepKind::Cpu(_)));
}

#[test]
fn unread_outputs_are_freed_at_once() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2]);
    b.node("Add", &["x", "x"], &["unused"]);
    b.node("Mul", &["x", "x"], &["y"]);
    b.output("y");
    let compiler = Compiler {
        registry: super::kernels::registry(),
        opsets: [(String::new(), 13)].into(),
        device: None,
    };
    let plan = compiler.compile(&b.g, &HashMap::new()).unwrap();
    assert_eq!(
        plan.steps[0].free_after,
        vec![b.g.value_by_name("unused").unwrap().0]
    );
}

#[test]
fn nodes_out_of_order_are_sorted_and_cycles_rejected() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[3]);
    b.node("Mul", &["t", "x"], &["y"]);
    b.node("Add", &["x", "x"], &["t"]);
    b.output("y");
    let x = rand_f32(3, 7);
    let outs = b.session().run(&[("x", f32t(&[3], &x))]).unwrap();
    let want: Vec<f64> = x.iter().map(|&v| 2.0 * v as f64 * v as f64).collect();
    assert_close(&out_f32(&outs, 0).1, &want);

    let mut c = G::new(13);
    c.input("x", DataType::Float32, &[3]);
    c.node("Add", &["x", "q"], &["p"]);
    c.node("Add", &["p", "x"], &["q"]);
    c.output("q");
    let err = Session::from_graph(&c.g, options())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cycle"), "{err}");
}

#[test]
fn undefined_values_are_an_error_at_creation() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[3]);
    b.node("Add", &["x", "nowhere"], &["y"]);
    b.output("y");
    let err = Session::from_graph(&b.g, options())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("'nowhere'") && err.contains("never produced"),
        "{err}"
    );
}

#[test]
fn every_unsupported_op_is_named_at_once() {
    let mut body = G::body();
    body.node("Baz", &[], &["o"]);
    body.output("o");
    let mut b = G::new(13);
    b.g.opset_imports.insert("com.example".into(), 2);
    b.input("x", DataType::Float32, &[3]);
    b.node("Foo", &["x"], &["a"]);
    let bar = b.node("Bar", &["a"], &["c"]);
    b.g.node_mut(bar).domain = "com.example".into();
    b.node_attrs(
        "If",
        &["c"],
        &["o"],
        vec![
            ("then_branch", Attribute::Graph(Box::new(body.g.clone()))),
            ("else_branch", Attribute::Graph(Box::new(body.g))),
        ],
    );
    b.output("o");
    let err = Session::from_graph(&b.g, options()).err().unwrap();
    match &err {
        SessionError::UnsupportedOps(ops) => assert_eq!(ops.len(), 3, "{err}"),
        other => panic!("unexpected error {other}"),
    }
    let msg = err.to_string();
    for want in [
        "Foo (opset 13)",
        "com.example::Bar (opset 2)",
        "Baz (opset 13)",
    ] {
        assert!(msg.contains(want), "{msg}");
    }
}

#[test]
fn input_errors_name_the_input_what_was_expected_and_what_came() {
    let s = chain().session();
    let err = s.run(&[]).err().unwrap().to_string();
    assert!(
        err.contains("missing input 'x'") && err.contains("float tensor [2, n]"),
        "{err}"
    );

    let err = s
        .run(&[(
            "x",
            Value::Tensor(Tensor::from_vec(vec![2, 3], vec![1i64; 6])),
        )])
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("input 'x'") && err.contains("expected float") && err.contains("got int64"),
        "{err}"
    );

    let err = s
        .run(&[("x", f32t(&[6], &[0.0; 6]))])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("[2, n]") && err.contains("[6]"), "{err}");

    let err = s
        .run(&[("x", f32t(&[3, 2], &[0.0; 6]))])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("got float tensor [3, 2]"), "{err}");

    let err = s
        .run(&[("x", f32t(&[2, 1], &[0.0; 2])), ("xx", f32t(&[1], &[0.0]))])
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("unknown input 'xx'") && err.contains("'x', 'a'"),
        "{err}"
    );
}

#[test]
fn constant_nodes_are_folded_and_seen_by_kernels_at_build_time() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2]);
    b.node_attrs(
        "Constant",
        &[],
        &["c"],
        vec![("value_floats", Attribute::Floats(vec![1.5, -2.0]))],
    );
    b.init("w", &Tensor::scalar(3f32));
    b.node("Add", &["x", "c"], &["y"]);
    b.node("SawConstant", &["x", "c"], &["k1"]);
    b.node("SawConstant", &["x", "x"], &["k2"]);
    b.node("SawConstant", &["x", "w"], &["k3"]);
    // c + w has only constant inputs: folded, and seen as a constant downstream.
    b.node("Add", &["c", "w"], &["cw"]);
    b.node("SawConstant", &["x", "cw"], &["k4"]);
    for o in ["y", "k1", "k2", "k3", "k4", "cw"] {
        b.output(o);
    }
    let outs = b.session().run(&[("x", f32t(&[2], &[1.0, 1.0]))]).unwrap();
    assert_eq!(out_f32(&outs, 0).1, vec![2.5, -1.0]);
    assert_eq!(out_f32(&outs, 1).1, vec![1.0]);
    assert_eq!(out_f32(&outs, 2).1, vec![0.0]);
    assert_eq!(out_f32(&outs, 3).1, vec![1.0]);
    assert_eq!(out_f32(&outs, 4).1, vec![1.0]);
    assert_eq!(out_f32(&outs, 5).1, vec![4.5, 1.0]);
    let compiler = Compiler {
        registry: super::kernels::registry(),
        opsets: [(String::new(), 13)].into(),
        device: None,
    };
    let plan = compiler.compile(&b.g, &HashMap::new()).unwrap();
    assert_eq!(plan.steps.len(), 5, "Constant and c + w are not steps");
}

#[test]
fn concurrent_runs_are_independent() {
    let s = std::sync::Arc::new(chain().session());
    let handles: Vec<_> = (0..8)
        .map(|seed| {
            let s = s.clone();
            std::thread::spawn(move || {
                for round in 0..50 {
                    let x = rand_f32(2 * (1 + seed as usize), seed * 1000 + round);
                    let outs = s.run(&[("x", f32t(&[2, 1 + seed as usize], &x))]).unwrap();
                    let want: Vec<f64> = x.iter().map(|&v| (v as f64 + 0.5) * v as f64).collect();
                    assert_close(&out_f32(&outs, 0).1, &want);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn sequences_pass_through_and_are_type_checked() {
    let mut b = G::new(13);
    b.input_typed(
        "s",
        ValueType::Sequence(Box::new(ValueType::Tensor {
            dtype: DataType::Float32,
            shape: None,
        })),
    );
    b.node("Identity", &["s"], &["o"]);
    b.output("o");
    let s = b.session();
    let seq = Value::Sequence {
        dtype: DataType::Float32,
        items: vec![Tensor::from_vec(vec![1], vec![1f32])],
    };
    let outs = s.run(&[("s", seq)]).unwrap();
    assert!(matches!(&outs[0].1, Value::Sequence { items, .. } if items.len() == 1));
    let err = s
        .run(&[("s", f32t(&[1], &[1.0]))])
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("sequence of float") && err.contains("got float tensor"),
        "{err}"
    );
}

#[test]
fn run_profiled_times_every_node_by_op_type_and_matches_run() {
    let s = chain().session();
    let x = rand_f32(6, 7);
    let feeds = [("x", f32t(&[2, 3], &x))];
    let mut profile = crate::Profile::new();
    for _ in 0..3 {
        let profiled = s.run_profiled(&feeds, &mut profile).unwrap();
        let plain = s.run(&feeds).unwrap();
        assert_eq!(out_f32(&profiled, 0), out_f32(&plain, 0));
        assert_eq!(out_f32(&profiled, 1), out_f32(&plain, 1));
    }
    assert_eq!(profile.runs(), 3);
    let ops = profile.by_op_type();
    let mut names: Vec<&str> = ops.iter().map(|(n, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(names, ["Add", "Mul", "Sub"]);
    assert!(ops.iter().all(|(_, t)| t.calls == 3));
    assert!(ops.windows(2).all(|w| w[0].1.total >= w[1].1.total));
    let nodes = profile.by_node();
    assert_eq!(nodes.len(), 3);
    assert_eq!(
        profile.total(),
        nodes
            .iter()
            .map(|(_, _, t)| t.total)
            .sum::<std::time::Duration>()
    );
}
