//! TensorScatter (opset 24): writes `update` into a copy of `past_cache` along the sequence
//! `axis`, at `write_indices[batch]` (0 when omitted), wrapping around in `circular` mode.
//! Works on every element type: strings by value, sub-byte types unpacked and repacked.

use super::common::{invalid, repack, unpacked};
use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::shape::normalize_axis;
use crate::{attrs, CpuRegistry, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

struct TensorScatter {
    node: String,
    axis: i64,
    circular: bool,
}

impl TensorScatter {
    /// For every (prefix, sequence position) of `update`: the destination sequence index.
    fn plan(
        &self,
        past: &[usize],
        upd: &[usize],
        idx: Option<&[i64]>,
    ) -> Result<(usize, usize, usize, usize, Vec<i64>), EpError> {
        let node = &self.node;
        let rank = past.len();
        let axis = normalize_axis(node, self.axis, rank)?;
        if axis == 0 {
            return Err(invalid(node, "axis must not be the batch axis 0"));
        }
        if upd.len() != rank
            || (0..rank).any(|i| i != axis && upd[i] != past[i])
            || upd[axis] > past[axis]
        {
            return Err(invalid(
                node,
                format!(
                    "update shape {upd:?} must match past_cache shape {past:?} except along axis \
                     {axis}, where it must not be longer"
                ),
            ));
        }
        let batch = past[0];
        let widx = match idx {
            Some(w) if w.len() != batch => {
                return Err(invalid(
                    node,
                    format!("write_indices has {} values for batch {batch}", w.len()),
                ))
            }
            Some(w) => w.to_vec(),
            None => vec![0; batch],
        };
        let max_seq = past[axis];
        let seq = upd[axis];
        for &w in &widx {
            if w < 0 || (!self.circular && w as usize + seq > max_seq) {
                return Err(invalid(
                    node,
                    format!(
                        "write index {w} with {seq} updates does not fit max_sequence_length \
                         {max_seq} (use mode='circular' to wrap around)"
                    ),
                ));
            }
        }
        let prefix: usize = past[..axis].iter().product();
        let inner: usize = past[axis + 1..].iter().product();
        Ok((prefix, inner, max_seq, seq, widx))
    }
}

impl CpuKernel for TensorScatter {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let past = tensor_input(node, inputs, 0)?;
        let update = tensor_input(node, inputs, 1)?;
        if past.dtype() != update.dtype() {
            return Err(invalid(
                node,
                format!(
                    "past_cache is {} but update is {}",
                    past.dtype(),
                    update.dtype()
                ),
            ));
        }
        let idx = match optional_tensor_input(node, inputs, 2)? {
            Some(t) => Some(super::common::int_values(node, t, "write_indices")?),
            None => None,
        };
        let (prefix, inner, max_seq, seq, widx) =
            self.plan(past.shape(), update.shape(), idx.as_deref())?;
        let per_batch = prefix / past.shape()[0].max(1);
        let dst_of = |p: usize, s: usize| {
            let b = p / per_batch.max(1);
            let pos = (widx[b] as usize + s) % max_seq.max(1);
            (p * max_seq + pos) * inner
        };
        if past.dtype() == DataType::String {
            let mut out = past.clone();
            let src = update.strings();
            let dst = out.strings_mut();
            for p in 0..prefix {
                for s in 0..seq {
                    let d = dst_of(p, s);
                    let u = (p * seq + s) * inner;
                    dst[d..d + inner].clone_from_slice(&src[u..u + inner]);
                }
            }
            return Ok(vec![Value::Tensor(out)]);
        }
        let dtype = past.dtype();
        let mut out = unpacked(past).into_owned();
        let upd = unpacked(update);
        let width = out.bytes().len() / out.numel().max(1);
        let src = upd.bytes();
        let dst = out.bytes_mut();
        for p in 0..prefix {
            for s in 0..seq {
                let d = dst_of(p, s) * width;
                let u = (p * seq + s) * inner * width;
                dst[d..d + inner * width].copy_from_slice(&src[u..u + inner * width]);
            }
        }
        let out = if dtype.is_sub_byte() {
            repack(out, dtype)
        } else {
            out
        };
        Ok(vec![Value::Tensor(out)])
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let circular = match attrs::string(n, "mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        other => {
            return Err(EpError::invalid_attribute(
                n,
                "mode",
                format!("'{other}' is not 'linear' or 'circular'"),
            ))
        }
    };
    Ok(Box::new(TensorScatter {
        node: n.describe(),
        axis: attrs::int(n, "axis", -2)?,
        circular,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "TensorScatter", 24, build);
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    /// Reference: the spec's pseudocode on a (2, 3, 5, 2) cache, circular mode.
    #[test]
    fn circular_matches_pseudocode() {
        let past = rand_f32(2 * 3 * 5 * 2, 4);
        let upd = rand_f32(2 * 3 * 2 * 2, 5);
        let n = node(
            "TensorScatter",
            3,
            1,
            vec![("mode", Attribute::String("circular".into()))],
        );
        let w = vec![4i64, 1];
        let got = run(
            &n,
            24,
            &[
                t(&[2, 3, 5, 2], past.clone()),
                t(&[2, 3, 2, 2], upd.clone()),
                t(&[2], w.clone()),
            ],
        )
        .unwrap();
        let mut want = past;
        for b in 0..2 {
            for h in 0..3 {
                for s in 0..2 {
                    let pos = (w[b] as usize + s) % 5;
                    for k in 0..2 {
                        want[((b * 3 + h) * 5 + pos) * 2 + k] = upd[((b * 3 + h) * 2 + s) * 2 + k];
                    }
                }
            }
        }
        assert_eq!(out::<f32>(&got, 0).1, want);
        let lin = node("TensorScatter", 3, 1, vec![]);
        assert!(run(
            &lin,
            24,
            &[
                t(&[2, 3, 5, 2], vec![0f32; 60]),
                t(&[2, 3, 2, 2], vec![0f32; 24]),
                t(&[2], w),
            ],
        )
        .is_err());
    }
}
