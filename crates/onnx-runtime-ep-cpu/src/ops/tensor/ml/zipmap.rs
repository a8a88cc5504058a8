//! ai.onnx.ml ZipMap: each row of X [N, C] (or X [C], one row) becomes a map from the C class
//! labels (int64 or string) to the row's float values; the output is the sequence of maps.

use super::super::common::invalid;
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let keys = match (
        attrs::opt_ints(n, "classlabels_int64s")?,
        attrs::opt_strings(n, "classlabels_strings")?,
    ) {
        (Some(v), None) => Tensor::from_vec(vec![v.len()], v),
        (None, Some(s)) => Tensor::from_strings(vec![s.len()], s),
        _ => {
            return Err(EpError::invalid_attribute(
                n,
                "classlabels_int64s",
                "exactly one of classlabels_int64s and classlabels_strings must be given",
            ))
        }
    };
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        if x.dtype() != DataType::Float32 {
            return Err(EpError::UnsupportedDtype {
                node: node.clone(),
                op: "ZipMap".into(),
                dtype: x.dtype(),
                detail: "ZipMap takes a float tensor".into(),
                hint: "cast X to float".into(),
            });
        }
        let c = keys.numel();
        let rows = match *x.shape() {
            [k] if k == c => 1,
            [rows, k] if k == c => rows,
            _ => {
                return Err(invalid(
                    &node,
                    format!(
                        "X {:?} must be [N, {c}] or [{c}]: one column per class label",
                        x.shape()
                    ),
                ))
            }
        };
        let v = x.data::<f32>();
        let maps = (0..rows)
            .map(|r| {
                let values = Tensor::from_vec(vec![c], v[r * c..(r + 1) * c].to_vec());
                (keys.clone(), values)
            })
            .collect();
        Ok(vec![Value::MapSequence(maps)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("ai.onnx.ml", "ZipMap", 1, build);
}
