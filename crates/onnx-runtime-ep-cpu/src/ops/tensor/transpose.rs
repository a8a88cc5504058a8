//! Axis permutations: Transpose, DepthToSpace, SpaceToDepth.

use super::common::{invalid, move_data, one};
use super::copy;
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor};
use onnx_runtime_ep_api::EpError;

/// `x` permuted by `perm` (already validated).
pub fn transpose_tensor(node: &str, x: &Tensor, perm: &[usize]) -> Result<Tensor, EpError> {
    let out_shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x.clone());
    }
    Ok(move_data!(
        node,
        "Transpose",
        x,
        out_shape,
        T,
        |src, dst| { copy::transpose(src, x.shape(), perm, dst) }
    ))
}

fn check_perm(node: &str, perm: &[i64], rank: usize) -> Result<Vec<usize>, EpError> {
    let mut seen = vec![false; rank];
    if perm.len() != rank {
        return Err(invalid(
            node,
            format!("perm {perm:?} must have one entry per input axis ({rank})"),
        ));
    }
    perm.iter()
        .map(|&p| {
            let a = if p < 0 { p + rank as i64 } else { p };
            if a < 0 || a >= rank as i64 || std::mem::replace(&mut seen[a as usize], true) {
                return Err(invalid(
                    node,
                    format!("perm {perm:?} is not a permutation of 0..{rank}"),
                ));
            }
            Ok(a as usize)
        })
        .collect()
}

fn build_transpose(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let perm = attrs::opt_ints(ctx.node, "perm")?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let perm = match &perm {
            Some(p) => check_perm(&node, p, x.rank())?,
            None => (0..x.rank()).rev().collect(),
        };
        one(transpose_tensor(&node, x, &perm)?)
    }))
}

fn blocksize(ctx: &BuildContext<'_>) -> Result<usize, EpError> {
    let b = attrs::int(ctx.node, "blocksize", 0)?;
    if b <= 0 {
        return Err(EpError::invalid_attribute(
            ctx.node,
            "blocksize",
            format!("must be a positive integer, got {b}"),
        ));
    }
    Ok(b as usize)
}

fn dims4(node: &str, x: &Tensor) -> Result<[usize; 4], EpError> {
    match *x.shape() {
        [n, c, h, w] => Ok([n, c, h, w]),
        _ => Err(invalid(
            node,
            format!("input must be 4-D (N, C, H, W), got shape {:?}", x.shape()),
        )),
    }
}

fn build_depth_to_space(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let b = blocksize(ctx)?;
    let crd = crd_mode(ctx)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let [n, c, h, w] = dims4(&node, x)?;
        if c % (b * b) != 0 {
            return Err(invalid(
                &node,
                format!("channels {c} are not divisible by blocksize² ({})", b * b),
            ));
        }
        let co = c / (b * b);
        let (tmp, perm) = if crd {
            (vec![n, co, b, b, h, w], [0, 1, 4, 2, 5, 3])
        } else {
            (vec![n, b, b, co, h, w], [0, 3, 4, 1, 5, 2])
        };
        let y = transpose_tensor(&node, &x.reshaped(tmp), &perm)?;
        one(y.reshaped(vec![n, co, h * b, w * b]))
    }))
}

/// The `mode` attribute of DepthToSpace and SpaceToDepth: true for CRD.
fn crd_mode(ctx: &BuildContext<'_>) -> Result<bool, EpError> {
    match attrs::string(ctx.node, "mode", "DCR")?.as_str() {
        "DCR" => Ok(false),
        "CRD" => Ok(true),
        other => Err(EpError::invalid_attribute(
            ctx.node,
            "mode",
            format!("'{other}' is not DCR or CRD"),
        )),
    }
}

fn build_space_to_depth(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let b = blocksize(ctx)?;
    // Output channel `(bh * b + bw) * c + ci` (DCR) or `ci * b * b + bh * b + bw` (CRD).
    let perm = if crd_mode(ctx)? {
        [0, 1, 3, 5, 2, 4]
    } else {
        [0, 3, 5, 1, 2, 4]
    };
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let [n, c, h, w] = dims4(&node, x)?;
        if h % b != 0 || w % b != 0 {
            return Err(invalid(
                &node,
                format!("height {h} and width {w} must be divisible by blocksize {b}"),
            ));
        }
        let tmp = vec![n, c, h / b, b, w / b, b];
        let y = transpose_tensor(&node, &x.reshaped(tmp), &perm)?;
        one(y.reshaped(vec![n, c * b * b, h / b, w / b]))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 13, 21, 23, 24, 25] {
        r.register("", "Transpose", since, build_transpose);
    }
    for since in [1, 11, 13] {
        r.register("", "DepthToSpace", since, build_depth_to_space);
    }
    for since in [1, 13, 28] {
        r.register("", "SpaceToDepth", since, build_space_to_depth);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn transpose_default_and_perm() {
        // numpy: np.arange(24).reshape(2,3,4).transpose(1,0,2).ravel()[:8]
        let x = t(&[2, 3, 4], (0..24i64).collect());
        let n = node(
            "Transpose",
            1,
            1,
            vec![("perm", Attribute::Ints(vec![1, 0, 2]))],
        );
        let o = run(&n, 13, std::slice::from_ref(&x)).unwrap();
        let (s, v) = out::<i64>(&o, 0);
        assert_eq!(s, vec![3, 2, 4]);
        assert_eq!(&v[..8], &[0, 1, 2, 3, 12, 13, 14, 15]);
        // np.arange(24).reshape(2,3,4).T.ravel()[:6]
        let o = run(&node("Transpose", 1, 1, vec![]), 13, &[x]).unwrap();
        assert_eq!(&out::<i64>(&o, 0).1[..6], &[0, 12, 4, 16, 8, 20]);
    }

    #[test]
    fn big_2d_transpose_and_int4() {
        let (r, c) = (67usize, 45usize);
        let src = rand_f32(r * c, 7);
        let x = t(&[r, c], src.clone());
        let o = run(&node("Transpose", 1, 1, vec![]), 13, &[x]).unwrap();
        let (s, v) = out::<f32>(&o, 0);
        assert_eq!(s, vec![c, r]);
        for i in 0..c {
            for j in 0..r {
                assert_eq!(v[i * r + j], src[j * c + i]);
            }
        }
        let packed = crate::Tensor::from_bytes(
            onnx_runtime_ir::DataType::Int4,
            vec![2, 3],
            &[0x21, 0x43, 0x65],
        )
        .unwrap();
        let o = run(&node("Transpose", 1, 1, vec![]), 21, &[Some(packed.into())]).unwrap();
        // [[1,2,3],[4,5,6]]^T = [1,4,2,5,3,6] packed low nibble first.
        assert_eq!(o[0].as_tensor().unwrap().bytes(), &[0x41, 0x52, 0x63]);
    }

    #[test]
    fn depth_space_round_trip() {
        // onnx reference: DepthToSpace DCR of arange(16).reshape(1,4,2,2), blocksize 2.
        let x = t(&[1, 4, 2, 2], (0..16i32).collect());
        let n = node("DepthToSpace", 1, 1, vec![("blocksize", Attribute::Int(2))]);
        let o = run(&n, 13, std::slice::from_ref(&x)).unwrap();
        let (s, v) = out::<i32>(&o, 0);
        assert_eq!(s, vec![1, 1, 4, 4]);
        assert_eq!(
            v,
            vec![0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15]
        );
        let n = node("SpaceToDepth", 1, 1, vec![("blocksize", Attribute::Int(2))]);
        let back = run(&n, 13, &[Some(o[0].clone())]).unwrap();
        assert_eq!(out::<i32>(&back, 0).1, (0..16).collect::<Vec<_>>());
    }

    #[test]
    fn space_to_depth_crd_inverts_depth_to_space_crd() {
        // x = arange(2*2*4*4).reshape(2,2,4,4); CRD output channel ci*4 + bh*2 + bw holds
        // x[n, ci, 2*i + bh, 2*j + bw] (spec), checked element by element.
        let (n_, c, h, w, b) = (2usize, 2usize, 4usize, 4usize, 2usize);
        let x = t(&[n_, c, h, w], (0..(n_ * c * h * w) as i32).collect());
        let attrs = || {
            vec![
                ("blocksize", Attribute::Int(b as i64)),
                ("mode", Attribute::String("CRD".into())),
            ]
        };
        let o = run(
            &node("SpaceToDepth", 1, 1, attrs()),
            28,
            std::slice::from_ref(&x),
        )
        .unwrap();
        let (s, v) = out::<i32>(&o, 0);
        assert_eq!(s, vec![n_, c * b * b, h / b, w / b]);
        for bn in 0..n_ {
            for ci in 0..c {
                for bh in 0..b {
                    for bw in 0..b {
                        for i in 0..h / b {
                            for j in 0..w / b {
                                let co = ci * b * b + bh * b + bw;
                                let got = v[((bn * c * b * b + co) * (h / b) + i) * (w / b) + j];
                                let want = ((bn * c + ci) * h + b * i + bh) * w + b * j + bw;
                                assert_eq!(got, want as i32, "n{bn} c{co} ({i},{j})");
                            }
                        }
                    }
                }
            }
        }
        let back = run(
            &node("DepthToSpace", 1, 1, attrs()),
            13,
            &[Some(o[0].clone())],
        )
        .unwrap();
        assert_eq!(
            out::<i32>(&back, 0).1,
            (0..(n_ * c * h * w) as i32).collect::<Vec<_>>()
        );
    }
}
