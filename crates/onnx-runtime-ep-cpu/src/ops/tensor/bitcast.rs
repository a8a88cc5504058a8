//! BitCast (opset 26): the input's little-endian bits reinterpreted as the `to` type of the
//! same bit width; the shape is unchanged.

use super::common::{invalid, unsupported};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let code = attrs::opt_int(n, "to")?
        .ok_or_else(|| EpError::invalid_attribute(n, "to", "the required attribute is missing"))?;
    let to = i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .ok_or_else(|| {
            EpError::invalid_attribute(n, "to", format!("{code} is not an ONNX data type"))
        })?;
    let node = n.describe();
    if to == DataType::String || to.bit_width().is_none() {
        return Err(unsupported(
            &node,
            "BitCast",
            to,
            "every type except string",
        ));
    }
    Ok(kernel_fn(move |inputs: &[Option<&Value>]| {
        let x = tensor_input(&node, inputs, 0)?;
        let from = x.dtype();
        if from == DataType::String || from.bit_width().is_none() {
            return Err(unsupported(
                &node,
                "BitCast",
                from,
                "every type except string",
            ));
        }
        if from.bit_width() != to.bit_width() {
            return Err(invalid(
                &node,
                format!(
                    "cannot bit-cast {from} ({:?} bits) to {to} ({:?} bits): widths must match",
                    from.bit_width(),
                    to.bit_width()
                ),
            ));
        }
        Ok(vec![Value::Tensor(x.with_dtype(to))])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "BitCast", 26, build);
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn float_bits_as_int_and_width_mismatch() {
        let v = vec![1.5f32, -2.25, 0.0, f32::INFINITY];
        let n = node("BitCast", 1, 1, vec![("to", Attribute::Int(6))]);
        let res = run(&n, 26, &[t(&[2, 2], v.clone())]).unwrap();
        let (shape, bits) = out::<i32>(&res, 0);
        assert_eq!(shape, vec![2, 2]);
        let want: Vec<i32> = v.iter().map(|x| x.to_bits() as i32).collect();
        assert_eq!(bits, want);
        assert!(run(&n, 26, &[t(&[2], vec![1.0f64, 2.0])]).is_err());
    }
}
