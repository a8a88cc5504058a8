//! Det: determinants of the trailing square matrices, by LU decomposition with partial
//! pivoting in f64.

use super::common::{register_versions, NodeInfo};
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::{CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;

/// The determinant of the row-major n×n matrix `m` (overwritten).
fn det(m: &mut [f64], n: usize) -> f64 {
    let mut d = 1.0;
    for c in 0..n {
        let p = (c..n)
            .max_by(|&a, &b| m[a * n + c].abs().total_cmp(&m[b * n + c].abs()))
            .unwrap_or(c);
        if m[p * n + c] == 0.0 {
            return 0.0;
        }
        if p != c {
            for k in 0..n {
                m.swap(p * n + k, c * n + k);
            }
            d = -d;
        }
        let pivot = m[c * n + c];
        d *= pivot;
        for r in c + 1..n {
            let f = m[r * n + c] / pivot;
            if f != 0.0 {
                for k in c..n {
                    m[r * n + k] -= f * m[c * n + k];
                }
            }
        }
    }
    d
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let r = x.rank();
        if r < 2 || x.shape()[r - 1] != x.shape()[r - 2] {
            return Err(info.invalid(format!(
                "Det needs square matrices in the last two dimensions, got shape {:?}",
                x.shape()
            )));
        }
        if !matches!(
            x.dtype(),
            onnx_runtime_ir::DataType::Float32
                | onnx_runtime_ir::DataType::Float64
                | onnx_runtime_ir::DataType::Float16
                | onnx_runtime_ir::DataType::BFloat16
        ) {
            return Err(info.bad_dtype(x.dtype(), "Det takes float types"));
        }
        let n = x.shape()[r - 1];
        let v = x.to_f64_vec().unwrap_or_default();
        let out_shape = x.shape()[..r - 2].to_vec();
        let dets: Vec<f64> = if n == 0 {
            vec![1.0; out_shape.iter().product()]
        } else {
            v.chunks(n * n).map(|m| det(&mut m.to_vec(), n)).collect()
        };
        let t = Tensor::from_vec(out_shape, dets);
        let out = super::cast::native_to_native(&t, x.dtype())
            .ok_or_else(|| info.bad_dtype(x.dtype(), "Det takes float types"))?;
        Ok(vec![Value::Tensor(out)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    register_versions(r, "", "Det", &[11, 22], build);
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py det).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("Det", 11, vec![], &[f32s(&[3, 3], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544])], DataType::Float32, &[], &[-24.84244728088379], 1e-05);
        check("Det", 11, vec![], &[f32s(&[2, 4, 4], &[-0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654, -2.7859182357788086, 0.08933292329311371, -0.2027638554573059, 2.50300669670105, 0.7753575444221497, 0.0847058817744255, -0.018759388476610184, -1.5149104595184326, -2.9292359352111816, -1.845587134361267, 1.1521927118301392, -1.796359658241272, -0.7827821373939514, -2.9775946140289307, 1.9802863597869873, -2.0732336044311523, -1.3944041728973389])], DataType::Float32, &[2], &[6.469541549682617, 2.0032927989959717], 1e-05);
        check("Det", 11, vec![], &[f64s(&[2, 2, 2], &[2.281992923884972, 0.05874485921053907, 2.0829014781952164, 0.8383030016551576, 1.4506256841711425, -2.451026369621726, 0.24686292825893252, 0.04663341780209951])], DataType::Float64, &[2], &[1.7906417637625998, 0.6727151804490893], 1e-12);
        check("Det", 11, vec![], &[f32s(&[2, 2], &[1.0, 2.0, 2.0, 4.0])], DataType::Float32, &[], &[0.0], 1e-05);
    }
}
