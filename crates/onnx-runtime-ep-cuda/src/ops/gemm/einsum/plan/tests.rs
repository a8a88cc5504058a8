//! Plans executed by a host model of their steps (the sum kernel's walk, strided copies,
//! batched products read through the planned views) against a direct summation over every
//! index, for transposed / padded input views and every kind of equation.
use super::super::equation::{resolve_shapes, split_equation};
use super::*;

/// Element strides of a layout: 0 contiguous, 1 axes reversed, 2 innermost rows padded
/// by 3; and the elements the storage spans.
fn layout(shape: &[usize], kind: usize) -> (Vec<usize>, usize) {
    let rank = shape.len();
    let (storage, order): (Vec<usize>, Vec<usize>) = match kind {
        1 => (
            shape.iter().rev().copied().collect(),
            (0..rank).rev().collect(),
        ),
        2 => {
            let mut s = shape.to_vec();
            if let Some(l) = s.last_mut() {
                *l += 3;
            }
            (s, (0..rank).collect())
        }
        _ => (shape.to_vec(), (0..rank).collect()),
    };
    let ss = onnx_runtime_ir::compute_contiguous_strides(&storage);
    let mut strides = vec![0; rank];
    for (k, &axis) in order.iter().enumerate() {
        strides[axis] = ss[k];
    }
    (strides, storage.iter().product::<usize>().max(1))
}

/// Calls `f(offset_a, offset_b)` over a row-major walk of `dims`.
fn walk(dims: &[usize], a: &[i64], b: &[i64], mut f: impl FnMut(i64, i64)) {
    let n: usize = dims.iter().product();
    for i in 0..n {
        let (mut rem, mut oa, mut ob) = (i, 0i64, 0i64);
        for d in (0..dims.len()).rev() {
            let x = (rem % dims[d]) as i64;
            rem /= dims[d];
            oa += x * a[d];
            ob += x * b[d];
        }
        f(oa, ob);
    }
}

/// Runs `plan` on host buffers: inputs, then temporaries, then the output.
fn simulate(plan: &Plan, inputs: &[Vec<f64>], out_len: usize) -> Vec<f64> {
    let n_in = inputs.len();
    let mut bufs: Vec<Vec<f64>> = inputs.to_vec();
    bufs.extend(plan.temps.iter().map(|&n| vec![f64::NAN; n]));
    bufs.push(vec![f64::NAN; out_len]);
    let out_idx = bufs.len() - 1;
    let idx = |b: Buf| match b {
        Buf::In(i) => i,
        Buf::Tmp(j) => n_in + j,
        Buf::Out => out_idx,
    };
    for step in &plan.steps {
        match step {
            Step::Sum { src, dst, p, .. } => {
                assert!(p.g >= 1 && 256 % p.g == 0, "lanes {}", p.g);
                let s = bufs[idx(*src)].clone();
                let d = &mut bufs[idx(*dst)];
                let (rk, rr) = (p.rank_k as usize, p.rank_r as usize);
                let dk: Vec<usize> = p.dims_k[..rk].iter().map(|&x| x as usize).collect();
                let dr: Vec<usize> = p.dims_r[..rr].iter().map(|&x| x as usize).collect();
                assert_eq!(dk.iter().product::<usize>() as i64, p.n_out);
                assert_eq!(dr.iter().product::<usize>() as i64, p.n_red);
                let zeros = vec![0i64; rr];
                walk(&dk, &p.sk_in[..rk], &p.sk_out[..rk], |oi, oo| {
                    let mut acc = 0.0;
                    walk(&dr, &p.sr_in[..rr], &zeros, |off, _| {
                        acc += s[(oi + off) as usize];
                    });
                    d[oo as usize] = acc;
                });
            }
            Step::Copy {
                src,
                dst,
                dims,
                s_src,
                s_dst,
            } => {
                let s = bufs[idx(*src)].clone();
                let d = &mut bufs[idx(*dst)];
                walk(dims, s_src, s_dst, |a, b| d[b as usize] = s[a as usize]);
            }
            Step::Gemm { a, b, out } => {
                assert_eq!((a.rows, a.cols, b.cols), (out.rows, b.rows, out.cols));
                assert_eq!((&a.batch, &b.batch), (&out.batch, &out.batch));
                let (sa, sb) = (bufs[idx(a.buf)].clone(), bufs[idx(b.buf)].clone());
                let d = &mut bufs[idx(out.buf)];
                let nb: usize = out.batch.iter().product();
                for bi in 0..nb {
                    let (mut rem, mut oa, mut ob, mut oo) = (bi, 0i64, 0i64, 0i64);
                    for k in (0..out.batch.len()).rev() {
                        let x = (rem % out.batch[k]) as i64;
                        rem /= out.batch[k];
                        oa += x * a.bstrides[k];
                        ob += x * b.bstrides[k];
                        oo += x * out.bstrides[k];
                    }
                    for i in 0..out.rows as i64 {
                        for j in 0..out.cols as i64 {
                            let v: f64 = (0..a.cols as i64)
                                .map(|p| {
                                    sa[(oa + i * a.rs + p * a.cs) as usize]
                                        * sb[(ob + p * b.rs + j * b.cs) as usize]
                                })
                                .sum();
                            d[(oo + i * out.rs + j * out.cs) as usize] = v;
                        }
                    }
                }
            }
        }
    }
    bufs.pop().unwrap()
}

/// Plans `eq` for inputs of `shapes` in layouts `kinds`, simulates it and compares with a
/// direct sum over every index assignment.
fn case(eq: &str, shapes: &[&[usize]], kinds: &[usize]) {
    let e = split_equation(eq);
    let what = format!("'{eq}' {shapes:?} layouts {kinds:?}");
    let (labels, sizes, out, out_shape) =
        resolve_shapes("test", &e, shapes).unwrap_or_else(|err| panic!("{what}: {err}"));
    let mut views = Vec::new();
    let mut data = Vec::new();
    for (i, shape) in shapes.iter().enumerate() {
        let (strides, span) = layout(shape, kinds[i % kinds.len()]);
        let buf: Vec<f64> = (0..span)
            .map(|x| ((x * 7919 + i * 31) % 11) as f64 - 5.0)
            .collect();
        views.push((shape.to_vec(), strides));
        data.push(buf);
    }
    let out_strides = onnx_runtime_ir::compute_contiguous_strides(&out_shape).to_vec();
    let r = Resolved {
        dtype: DataType::Float32,
        labels: labels.clone(),
        sizes: sizes.clone(),
        out: out.clone(),
        out_shape: out_shape.clone(),
    };
    let key = PlanKey {
        dtype: DataType::Float32,
        inputs: views.clone(),
        out_strides,
    };
    let plan = make_plan("test", 132, &r, &key).unwrap_or_else(|err| panic!("{what}: {err}"));
    let out_len: usize = out_shape.iter().product();
    let got = simulate(&plan, &data, out_len.max(1));
    // Direct: every assignment of every label.
    let all: Vec<Label> = {
        let mut v: Vec<Label> = sizes.keys().copied().collect();
        v.sort_unstable();
        v
    };
    let dims: Vec<usize> = all.iter().map(|l| sizes[l]).collect();
    let mut want = vec![0.0; out_len];
    let total: usize = dims.iter().product();
    for t in 0..total {
        let mut rem = t;
        let mut val: HashMap<Label, usize> = HashMap::new();
        for k in (0..all.len()).rev() {
            val.insert(all[k], rem % dims[k]);
            rem /= dims[k];
        }
        let mut prod = 1.0;
        for (i, (shape, strides)) in views.iter().enumerate() {
            let mut off = 0;
            for (a, l) in labels[i].iter().enumerate() {
                let x = if shape[a] == 1 { 0 } else { val[l] };
                off += x * strides[a];
            }
            prod *= data[i][off];
        }
        let o: usize = out.iter().fold(0, |acc, l| acc * sizes[l] + val[l]);
        want[o] += prod;
    }
    for (i, w) in want.iter().enumerate() {
        assert_eq!(got[i], *w, "{what}: output element {i} of {out_shape:?}");
    }
}

#[test]
fn plans_match_a_direct_sum() {
    let cases: &[(&str, &[&[usize]])] = &[
        ("ij,jk->ik", &[&[3, 4], &[4, 5]]),
        ("ij,kj->ik", &[&[3, 4], &[5, 4]]),
        ("ji,jk->ik", &[&[4, 3], &[4, 5]]),
        ("ij,jk->ki", &[&[3, 4], &[4, 5]]),
        ("bij,bjk->bik", &[&[2, 3, 4], &[2, 4, 5]]),
        ("bij,bkj->bik", &[&[2, 3, 4], &[2, 5, 4]]),
        ("ibj,bjk->bik", &[&[3, 2, 4], &[2, 4, 5]]),
        ("bij,jk->bik", &[&[2, 3, 4], &[4, 5]]),
        ("ij,bjk->bik", &[&[3, 4], &[2, 4, 5]]),
        ("bij,bjk->kbi", &[&[2, 3, 4], &[2, 4, 5]]),
        ("...ij,...jk->...ik", &[&[2, 1, 3, 4], &[5, 4, 2]]),
        ("ab,bc,cd->ad", &[&[2, 3], &[3, 4], &[4, 2]]),
        ("i,j->ij", &[&[3], &[4]]),
        ("i,i", &[&[5], &[5]]),
        ("ij,ij->", &[&[3, 4], &[3, 4]]),
        ("ij,ij->ij", &[&[3, 4], &[3, 4]]),
        ("ij,ij->ji", &[&[3, 4], &[3, 4]]),
        ("ii->i", &[&[3, 3]]),
        ("ii", &[&[3, 3]]),
        ("aba->b", &[&[2, 3, 2]]),
        ("...ii->...i", &[&[3, 5, 5]]),
        ("bii,bij->bj", &[&[2, 3, 3], &[2, 3, 4]]),
        ("ij->i", &[&[3, 4]]),
        ("ij->j", &[&[3, 4]]),
        ("ij->", &[&[3, 4]]),
        ("ijk->ki", &[&[3, 4, 5]]),
        ("ijk->j", &[&[3, 4, 5]]),
        ("ij,jk", &[&[3, 4], &[4, 5]]),
        ("ba", &[&[3, 4]]),
        ("ij,ij", &[&[3, 4], &[3, 4]]),
        ("...k", &[&[2, 3, 4]]),
        ("->", &[&[]]),
        (",i->i", &[&[], &[4]]),
        ("i,->i", &[&[4], &[]]),
        ("bij", &[&[2, 3, 4]]),
        ("ijk->kji", &[&[2, 3, 4]]),
        ("ijx,jk->ik", &[&[2, 3, 4], &[3, 5]]),
        ("ij,jky->ik", &[&[2, 3], &[3, 4, 2]]),
        ("abc,cd,de->abe", &[&[2, 3, 4], &[4, 2], &[2, 3]]),
        ("bn,anm,bm->ba", &[&[2, 3], &[4, 3, 5], &[2, 5]]),
        ("abcd,cdbe->ae", &[&[2, 3, 4, 2], &[4, 2, 3, 5]]),
        ("ij,jk->ik", &[&[2, 1], &[3, 4]]),
        ("...i,...i->...", &[&[3, 1, 4], &[5, 4]]),
        ("i...,i...->...", &[&[4, 2, 3], &[4, 3]]),
        ("...ij->j", &[&[2, 3, 4, 5]]),
        ("ij,jk,kl,lm->mi", &[&[2, 3], &[3, 2], &[2, 4], &[4, 3]]),
        ("ij,jk->ik", &[&[3, 0], &[0, 4]]),
        ("ij,jk->ik", &[&[0, 4], &[4, 5]]),
        ("ij->i", &[&[3, 0]]),
    ];
    for (eq, shapes) in cases {
        for kinds in [[0, 0], [1, 0], [0, 1], [2, 1], [1, 2]] {
            case(eq, shapes, &kinds);
        }
    }
}

#[test]
fn sums_pick_lanes_by_layout() {
    let e = split_equation("ij->i");
    let shapes: [&[usize]; 1] = [&[64, 4096]];
    let (labels, sizes, out, out_shape) = resolve_shapes("t", &e, &shapes).unwrap();
    let r = Resolved {
        dtype: DataType::Float32,
        labels,
        sizes,
        out,
        out_shape,
    };
    let plan_of = |strides: Vec<usize>| {
        let key = PlanKey {
            dtype: DataType::Float32,
            inputs: vec![(vec![64, 4096], strides)],
            out_strides: vec![1],
        };
        make_plan("t", 132, &r, &key).unwrap()
    };
    // Rows summed along the contiguous axis: adjacent lanes share an output.
    match &plan_of(vec![4096, 1]).steps[..] {
        [Step::Sum { p, .. }] => assert!(p.lane_major == 1 && p.g >= 32, "{p:?}"),
        _ => panic!("one sum"),
    }
    // Summed along a strided axis with outputs contiguous: adjacent outputs per warp.
    match &plan_of(vec![1, 64]).steps[..] {
        [Step::Sum { p, .. }] => assert!(p.lane_major == 0 && p.g <= 8, "{p:?}"),
        _ => panic!("one sum"),
    }
}

#[test]
fn direct_products_need_no_copies() {
    // A batched product, a transposed operand and an output transposed through its
    // strides run as one product and nothing else.
    for (eq, shapes) in [
        ("bij,bjk->bik", [&[2usize, 3, 4][..], &[2, 4, 5][..]]),
        ("ij,kj->ik", [&[3, 4][..], &[5, 4][..]]),
        ("ij,jk->ki", [&[3, 4][..], &[4, 5][..]]),
        ("ibj,bjk->bik", [&[3, 2, 4][..], &[2, 4, 5][..]]),
    ] {
        let e = split_equation(eq);
        let (labels, sizes, out, out_shape) = resolve_shapes("t", &e, &shapes).unwrap();
        let out_strides = onnx_runtime_ir::compute_contiguous_strides(&out_shape).to_vec();
        let r = Resolved {
            dtype: DataType::Float32,
            labels,
            sizes,
            out,
            out_shape,
        };
        let key = PlanKey {
            dtype: DataType::Float32,
            inputs: shapes
                .iter()
                .map(|s| {
                    (
                        s.to_vec(),
                        onnx_runtime_ir::compute_contiguous_strides(s).to_vec(),
                    )
                })
                .collect(),
            out_strides,
        };
        let plan = make_plan("t", 132, &r, &key).unwrap();
        assert!(
            plan.temps.is_empty() && matches!(&plan.steps[..], [Step::Gemm { .. }]),
            "{eq}: {} steps, {} temps",
            plan.steps.len(),
            plan.temps.len()
        );
    }
}
