//! A reference com.microsoft FusedConv for the optimizer tests, used until (and checked
//! against the same graphs as) the CPU provider's own kernel: the real Conv kernel, then the
//! activation in f64 on its output.

use onnx_runtime_ep_api::EpError;
use onnx_runtime_ep_cpu::kernel::kernel_fn;
use onnx_runtime_ep_cpu::{BuildContext, CpuKernel, CpuRegistry, Tensor, Value};
use onnx_runtime_ir::Attribute;

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let mut conv = ctx.node.clone();
    conv.op_type = "Conv".into();
    conv.domain = String::new();
    let act = match conv.attributes.remove("activation") {
        Some(Attribute::String(s)) => s,
        _ => panic!("FusedConv without an activation string"),
    };
    let p: Vec<f64> = match conv.attributes.remove("activation_params") {
        Some(Attribute::Floats(v)) => v.iter().map(|&x| x as f64).collect(),
        _ => vec![],
    };
    let has_z = conv.inputs.len() > 3;
    conv.inputs.truncate(3);
    let (_, factory) = onnx_runtime_ep_cpu::registry()
        .lookup("", "Conv", 11)
        .expect("a Conv kernel");
    let inner = factory(&BuildContext {
        node: &conv,
        opset: 11,
        constant_inputs: &ctx.constant_inputs[..ctx.constant_inputs.len().min(3)],
    })?;
    let f: Box<dyn Fn(f64) -> f64 + Send + Sync> = match act.as_str() {
        "Relu" => Box::new(|x: f64| x.max(0.0)),
        "Sigmoid" => Box::new(|x: f64| 1.0 / (1.0 + (-x).exp())),
        "Tanh" => Box::new(f64::tanh),
        "LeakyRelu" => Box::new(move |x: f64| if x < 0.0 { p[0] * x } else { x }),
        "Clip" => Box::new(move |x: f64| x.max(p[0]).min(p[1])),
        "HardSigmoid" => Box::new(move |x: f64| (p[0] * x + p[1]).clamp(0.0, 1.0)),
        "HardSwish" => Box::new(|x: f64| x * (x / 6.0 + 0.5).clamp(0.0, 1.0)),
        "QuickGelu" => Box::new(move |x: f64| x / (1.0 + (-p[0] * x).exp())),
        "Identity" | "" => Box::new(|x: f64| x),
        other => panic!("unknown activation {other}"),
    };
    Ok(kernel_fn(move |inputs| {
        let out = inner.run(&inputs[..inputs.len().min(3)])?;
        let t = out[0].as_tensor().expect("a tensor");
        let z: Option<Vec<f32>> = has_z.then(|| {
            let z = inputs[3].and_then(|v| v.as_tensor()).expect("a Z tensor");
            assert_eq!(z.shape(), t.shape(), "Z must have the output's shape");
            z.data::<f32>().to_vec()
        });
        let v: Vec<f32> = t
            .data::<f32>()
            .iter()
            .enumerate()
            .map(|(i, &x)| f(x as f64 + z.as_ref().map_or(0.0, |z| z[i] as f64)) as f32)
            .collect();
        Ok(vec![Value::Tensor(Tensor::from_vec(t.shape().to_vec(), v))])
    }))
}

/// Every CPU kernel, plus the reference FusedConv when the provider has none yet.
pub(crate) fn registry() -> &'static CpuRegistry {
    static R: std::sync::OnceLock<CpuRegistry> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        let mut r = CpuRegistry::new();
        onnx_runtime_ep_cpu::ops::register_all(&mut r);
        if !r.contains("com.microsoft", "FusedConv", 1) {
            r.register("com.microsoft", "FusedConv", 1, build);
        }
        r
    })
}
