//! DeformConv (opsets 19, 22) against the CPU provider: the onnx node-suite shapes (plain,
//! with padding, with mask and bias, with several offset groups), groups, strides,
//! dilations, asymmetric pads, integer offsets (sample points on grid lines: zero-weight
//! corners skipped) and offsets reaching outside the input, 1-D and 3-D convolutions, a
//! product wide enough for several GEMM tiles, every float dtype (compared with the CPU's
//! output of the same dtype), strided inputs, and bad shapes as errors naming the node.

use super::harness::*;
use onnx_runtime_ir::{Attribute, DataType, Node};

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

#[derive(Clone, Default)]
struct Cfg {
    x: Vec<usize>,
    oc: usize,
    kernel: Vec<usize>,
    group: usize,
    offset_group: usize,
    pads: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    dilations: Option<Vec<i64>>,
    mask: bool,
    bias: bool,
    /// Offsets rounded to integers.
    integer: bool,
}

fn out_spatial(c: &Cfg) -> Vec<usize> {
    let nd = c.x.len() - 2;
    (0..nd)
        .map(|d| {
            let pads = c.pads.clone().unwrap_or(vec![0; 2 * nd]);
            let s = c.strides.clone().map_or(1, |v| v[d]) as usize;
            let dl = c.dilations.clone().map_or(1, |v| v[d]) as usize;
            let ext = (c.kernel[d] - 1) * dl + 1;
            (c.x[2 + d] + pads[d] as usize + pads[nd + d] as usize - ext) / s + 1
        })
        .collect()
}

fn deform_node(c: &Cfg, explicit_kernel: bool) -> Node {
    let mut attrs = Vec::new();
    if c.group != 1 {
        attrs.push(("group", Attribute::Int(c.group as i64)));
    }
    if c.offset_group != 1 {
        attrs.push(("offset_group", Attribute::Int(c.offset_group as i64)));
    }
    if explicit_kernel {
        attrs.push((
            "kernel_shape",
            Attribute::Ints(c.kernel.iter().map(|&k| k as i64).collect()),
        ));
    }
    for (name, v) in [
        ("pads", &c.pads),
        ("strides", &c.strides),
        ("dilations", &c.dilations),
    ] {
        if let Some(v) = v {
            attrs.push((name, Attribute::Ints(v.clone())));
        }
    }
    let mut n = node("DeformConv", 5, 1, &attrs);
    if !c.mask {
        n.inputs[4] = None;
    }
    if !c.bias {
        n.inputs[3] = None;
    }
    while n.inputs.last() == Some(&None) {
        n.inputs.pop();
    }
    n
}

/// Random inputs for `c` (values exact in bfloat16, so every dtype reads the same numbers).
fn make_inputs(rng: &mut Rng, c: &Cfg, dtype: DataType, layout: Layout) -> Vec<Option<T>> {
    let q = |v: f64| half::bf16::from_f64(v).to_f64();
    let u = |rng: &mut Rng, shape: &[usize], lo: f64, hi: f64, round: bool| -> T {
        let t = uniform(rng, DataType::Float64, shape, lo, hi);
        let v: Vec<f64> = (0..t.numel())
            .map(|i| {
                let x = get(&t, i);
                if round {
                    x.round()
                } else {
                    q(x)
                }
            })
            .collect();
        from_f64s(dtype, shape, &v)
    };
    let nd = c.x.len() - 2;
    let kk: usize = c.kernel.iter().product();
    let osp = out_spatial(c);
    let mut wshape = vec![c.oc, c.x[1] / c.group];
    wshape.extend_from_slice(&c.kernel);
    let mut oshape = vec![c.x[0], c.offset_group * kk * nd];
    oshape.extend_from_slice(&osp);
    let mut mshape = vec![c.x[0], c.offset_group * kk];
    mshape.extend_from_slice(&osp);
    let x = u(rng, &c.x, -1.0, 1.0, false).with_layout(layout);
    let w = u(rng, &wshape, -1.0, 1.0, false);
    let off = u(rng, &oshape, -2.0, 2.0, c.integer).with_layout(layout);
    let b = c.bias.then(|| u(rng, &[c.oc], -1.0, 1.0, false));
    let m = c
        .mask
        .then(|| u(rng, &mshape, 0.0, 1.0, false).with_layout(layout));
    vec![Some(x), Some(w), Some(off), b, m]
}

fn tol(dtype: DataType, terms: usize) -> (f64, f64) {
    let t = (terms.max(1) as f64).sqrt();
    match dtype {
        DataType::Float64 => (1e-10, 1e-12 * t),
        // float32 accumulation against the CPU's double sum.
        DataType::Float32 => (1e-4, 1e-5 * t),
        DataType::Float16 => (2e-3, 2e-3 * t),
        _ => (1.6e-2, 1.6e-2 * t),
    }
}

fn check(c: &Cfg, dtype: DataType, layout: Layout, opset: u64, seed: u64, what: &str) {
    let mut rng = Rng::new(seed);
    let n = deform_node(c, seed.is_multiple_of(2));
    let inputs = make_inputs(&mut rng, c, dtype, layout);
    let want = reference(&n, opset, &inputs, what);
    let got = gpu_run(&gpu(), &n, opset, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    let terms = c.x[1] / c.group * c.kernel.iter().product::<usize>();
    let (rtol, atol) = tol(dtype, terms);
    assert_close_to(&got[0], &want[0], rtol, atol, what);
}

fn cfg2d(x: [usize; 4], oc: usize, k: [usize; 2]) -> Cfg {
    Cfg {
        x: x.to_vec(),
        oc,
        kernel: k.to_vec(),
        group: 1,
        offset_group: 1,
        ..Default::default()
    }
}

#[test]
fn deform_conv_onnx_node_suite_shapes() {
    // deform_conv_with_padding / with_mask_bias / with_multiple_offset_groups.
    let plain = cfg2d([1, 1, 3, 3], 1, [2, 2]);
    check(
        &plain,
        DataType::Float32,
        Layout::Contiguous,
        19,
        1,
        "plain",
    );
    let padded = Cfg {
        pads: Some(vec![1, 1, 1, 1]),
        ..plain.clone()
    };
    check(
        &padded,
        DataType::Float32,
        Layout::Contiguous,
        19,
        2,
        "with_padding",
    );
    let mask_bias = Cfg {
        mask: true,
        bias: true,
        ..plain.clone()
    };
    check(
        &mask_bias,
        DataType::Float32,
        Layout::Contiguous,
        22,
        3,
        "with_mask_bias",
    );
    let groups = Cfg {
        offset_group: 2,
        ..cfg2d([1, 2, 3, 3], 1, [2, 2])
    };
    check(
        &groups,
        DataType::Float32,
        Layout::Contiguous,
        22,
        4,
        "with_multiple_offset_groups",
    );
}

#[test]
fn deform_conv_groups_strides_dilations_pads() {
    let mut seed = 10;
    for (group, og) in [(1usize, 1usize), (2, 1), (1, 2), (2, 4)] {
        for (strides, dil, pads) in [
            (None, None, None),
            (Some(vec![2, 1]), Some(vec![1, 2]), Some(vec![1, 0, 2, 1])),
            (Some(vec![1, 2]), None, Some(vec![2, 2, 2, 2])),
        ] {
            for (mask, bias) in [(false, false), (true, true), (true, false)] {
                for integer in [false, true] {
                    seed += 1;
                    let c = Cfg {
                        group,
                        offset_group: og,
                        strides: strides.clone(),
                        dilations: dil.clone(),
                        pads: pads.clone(),
                        mask,
                        bias,
                        integer,
                        ..cfg2d([2, 4, 7, 6], 6, [3, 2])
                    };
                    let what = format!(
                        "DeformConv group {group} og {og} strides {strides:?} dil {dil:?} pads \
                         {pads:?} mask {mask} bias {bias} integer offsets {integer}"
                    );
                    check(&c, DataType::Float32, Layout::Contiguous, 22, seed, &what);
                }
            }
        }
    }
}

#[test]
fn deform_conv_1d_3d_and_wide_products() {
    let one_d = Cfg {
        x: vec![2, 3, 11],
        oc: 4,
        kernel: vec![3],
        group: 1,
        offset_group: 3,
        strides: Some(vec![2]),
        pads: Some(vec![1, 2]),
        mask: true,
        bias: true,
        ..Default::default()
    };
    check(
        &one_d,
        DataType::Float32,
        Layout::Contiguous,
        22,
        31,
        "DeformConv 1-D",
    );
    let three_d = Cfg {
        x: vec![1, 2, 4, 5, 3],
        oc: 3,
        kernel: vec![2, 2, 2],
        group: 1,
        offset_group: 1,
        pads: Some(vec![0, 1, 0, 1, 0, 1]),
        mask: true,
        ..Default::default()
    };
    check(
        &three_d,
        DataType::Float32,
        Layout::Contiguous,
        22,
        32,
        "DeformConv 3-D",
    );
    // Several 64 x 64 output tiles and a reduction longer than one 16-deep step.
    let wide = Cfg {
        pads: Some(vec![1, 1, 1, 1]),
        bias: true,
        mask: true,
        offset_group: 2,
        ..cfg2d([2, 24, 12, 13], 100, [3, 3])
    };
    check(
        &wide,
        DataType::Float32,
        Layout::Contiguous,
        22,
        33,
        "DeformConv wide",
    );
    check(
        &wide,
        DataType::Float64,
        Layout::Contiguous,
        22,
        34,
        "DeformConv wide f64",
    );
}

#[test]
fn deform_conv_every_dtype_and_layout() {
    let c = Cfg {
        group: 2,
        offset_group: 2,
        pads: Some(vec![1, 1, 1, 1]),
        mask: true,
        bias: true,
        ..cfg2d([2, 4, 6, 5], 4, [3, 3])
    };
    let mut seed = 40;
    for dtype in FLOATS {
        for layout in [Layout::Contiguous, Layout::Reversed, Layout::Padded] {
            seed += 1;
            check(
                &c,
                dtype,
                layout,
                22,
                seed,
                &format!("DeformConv {dtype} {layout:?}"),
            );
        }
    }
}

#[test]
fn deform_conv_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let c = cfg2d([1, 2, 5, 5], 2, [3, 3]);
    let mut rng = Rng::new(50);
    let mut inputs = make_inputs(&mut rng, &c, DataType::Float32, Layout::Contiguous);
    let n = deform_node(&c, false);
    // Offsets for the wrong number of taps.
    inputs[2] = Some(uniform(
        &mut rng,
        DataType::Float32,
        &[1, 16, 3, 3],
        -1.0,
        1.0,
    ));
    expect_err(&ep, &n, 22, &inputs, "offset shape");
    // W channels that do not fit X.
    let mut inputs = make_inputs(&mut rng, &c, DataType::Float32, Layout::Contiguous);
    inputs[1] = Some(uniform(
        &mut rng,
        DataType::Float32,
        &[2, 3, 3, 3],
        -1.0,
        1.0,
    ));
    expect_err(&ep, &n, 22, &inputs, "does not fit X");
}
