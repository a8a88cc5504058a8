//! Minimal float32 test kernels: Add, Sub, Mul (same shape or a one-element operand), Less
//! (to bool), Neg and Identity. Enough to drive the executor and control flow.

use onnx_runtime_ep_api::EpError;
use onnx_runtime_ep_cpu::kernel::{kernel_fn, tensor_input};
use onnx_runtime_ep_cpu::{BuildContext, CpuKernel, CpuRegistry, Tensor, Value};

fn binary(ctx: &BuildContext<'_>, f: fn(f32, f32) -> f32) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let a = tensor_input(&node, inputs, 0)?;
        let b = tensor_input(&node, inputs, 1)?;
        let (x, y) = (a.data::<f32>(), b.data::<f32>());
        let (shape, out): (Vec<usize>, Vec<f32>) = if a.shape() == b.shape() {
            (
                a.shape().to_vec(),
                x.iter().zip(y).map(|(p, q)| f(*p, *q)).collect(),
            )
        } else if b.numel() == 1 {
            (a.shape().to_vec(), x.iter().map(|p| f(*p, y[0])).collect())
        } else if a.numel() == 1 {
            (b.shape().to_vec(), y.iter().map(|q| f(x[0], *q)).collect())
        } else {
            return Err(EpError::InvalidInput {
                node: node.clone(),
                message: format!("shapes {:?} and {:?} differ", a.shape(), b.shape()),
            });
        };
        Ok(vec![Value::Tensor(Tensor::from_vec(shape, out))])
    }))
}

fn add(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    binary(ctx, |a, b| a + b)
}
fn sub(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    binary(ctx, |a, b| a - b)
}
fn mul(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    binary(ctx, |a, b| a * b)
}

fn less(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let a = tensor_input(&node, inputs, 0)?;
        let b = tensor_input(&node, inputs, 1)?;
        let v: Vec<bool> = a
            .data::<f32>()
            .iter()
            .zip(b.data::<f32>())
            .map(|(x, y)| x < y)
            .collect();
        Ok(vec![Value::Tensor(Tensor::from_bools(
            a.shape().to_vec(),
            &v,
        ))])
    }))
}

/// Casts an int64 tensor to float32 (for Loop's iteration number).
fn to_float(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let a = tensor_input(&node, inputs, 0)?;
        let v: Vec<f32> = a.to_f64_vec().unwrap().iter().map(|&x| x as f32).collect();
        Ok(vec![Value::Tensor(Tensor::from_vec(a.shape().to_vec(), v))])
    }))
}

fn identity(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        inputs
            .first()
            .copied()
            .flatten()
            .map(|v| vec![v.clone()])
            .ok_or_else(|| EpError::Other(format!("{node}: no input")))
    }))
}

/// Records whether its second input was a build-time constant: outputs 1.0 if so.
fn saw_constant(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let known = ctx.constant(1).is_some();
    Ok(kernel_fn(move |_| {
        Ok(vec![Value::Tensor(Tensor::scalar(if known {
            1f32
        } else {
            0.
        }))])
    }))
}

pub(crate) fn registry() -> &'static CpuRegistry {
    static R: std::sync::OnceLock<CpuRegistry> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        let mut r = CpuRegistry::new();
        r.register("", "Add", 7, add);
        r.register("", "Sub", 7, sub);
        r.register("", "Mul", 7, mul);
        r.register("", "Less", 9, less);
        r.register("", "ToFloat", 1, to_float);
        r.register("", "Identity", 1, identity);
        r.register("", "SawConstant", 1, saw_constant);
        r
    })
}
