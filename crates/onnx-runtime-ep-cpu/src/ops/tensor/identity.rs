//! Identity: passes its input through (tensors, sequences and optionals alike).

use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::CpuRegistry;
use onnx_runtime_ep_api::EpError;

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        match inputs.first().copied().flatten() {
            Some(v) => Ok(vec![v.clone()]),
            None => Err(EpError::InvalidInput {
                node: node.clone(),
                message: "Identity needs one input".into(),
            }),
        }
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "Identity", 1, build);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Tensor, Value};
    use onnx_runtime_ir::{Node, NodeId, ValueId};

    #[test]
    fn passes_through() {
        let node = Node::new(
            NodeId(0),
            "Identity",
            vec![Some(ValueId(0))],
            vec![ValueId(1)],
        );
        let k = build(&BuildContext::new(&node, 13)).unwrap();
        let x = Value::Tensor(Tensor::from_vec(vec![2], vec![1i64, 2]));
        let out = k.run(&[Some(&x)]).unwrap();
        assert_eq!(out[0].as_tensor().unwrap().data::<i64>(), &[1, 2]);
    }
}
