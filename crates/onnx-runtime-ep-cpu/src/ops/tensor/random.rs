//! Random generators: RandomNormal, RandomUniform, their `Like` forms, Bernoulli and
//! Multinomial. A `seed` attribute makes a kernel's stream reproducible; without one each
//! kernel draws a fresh seed.

use super::common::{from_f64s, invalid, one, unsupported};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{DataType, Node};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// SplitMix64: small, fast and good enough for sampling.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

fn seeded(node: &Node) -> Result<Mutex<Rng>, EpError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0x5EED);
    let seed = match attrs::opt_float(node, "seed")? {
        Some(s) => s.to_bits() as u64 ^ 0xA5A5_0000,
        None => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            t ^ COUNTER.fetch_add(0x1234_5679, Ordering::Relaxed)
        }
    };
    Ok(Mutex::new(Rng(seed)))
}

fn dtype_attr(node: &Node, default: Option<DataType>) -> Result<Option<DataType>, EpError> {
    match attrs::opt_int(node, "dtype")? {
        None => Ok(default),
        Some(c) => DataType::from_onnx(c as i32).map(Some).ok_or_else(|| {
            EpError::invalid_attribute(node, "dtype", format!("unknown type code {c}"))
        }),
    }
}

#[derive(Clone, Copy)]
enum Dist {
    Normal { mean: f64, scale: f64 },
    Uniform { low: f64, high: f64 },
}

fn dist(node: &Node) -> Result<Dist, EpError> {
    Ok(if node.op_type.starts_with("RandomNormal") {
        Dist::Normal {
            mean: attrs::float(node, "mean", 0.0)? as f64,
            scale: attrs::float(node, "scale", 1.0)? as f64,
        }
    } else {
        Dist::Uniform {
            low: attrs::float(node, "low", 0.0)? as f64,
            high: attrs::float(node, "high", 1.0)? as f64,
        }
    })
}

fn sample(
    node: &str,
    rng: &Mutex<Rng>,
    d: Dist,
    dtype: DataType,
    shape: Vec<usize>,
) -> Result<Tensor, EpError> {
    if !dtype.is_float() {
        return Err(unsupported(
            node,
            "Random",
            dtype,
            "random values are floats",
        ));
    }
    let n: usize = super::common::checked_numel(node, &shape)?;
    let mut r = rng.lock().unwrap_or_else(|e| e.into_inner());
    let vals: Vec<f64> = (0..n)
        .map(|_| match d {
            Dist::Normal { mean, scale } => mean + scale * r.normal(),
            Dist::Uniform { low, high } => low + (high - low) * r.uniform(),
        })
        .collect();
    from_f64s(dtype, shape, &vals).ok_or_else(|| {
        unsupported(
            node,
            "Random",
            dtype,
            "float, double, float16 or bfloat16 only",
        )
    })
}

fn build_random(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let rng = seeded(ctx.node)?;
    let d = dist(ctx.node)?;
    let dtype = dtype_attr(ctx.node, Some(DataType::Float32))?.unwrap_or(DataType::Float32);
    let shape: Vec<usize> = attrs::ints(ctx.node, "shape")?
        .iter()
        .map(|&v| super::common::to_dim(&node, v, "shape"))
        .collect::<Result<_, _>>()?;
    Ok(kernel_fn(move |_| {
        one(sample(&node, &rng, d, dtype, shape.clone())?)
    }))
}

fn build_random_like(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let rng = seeded(ctx.node)?;
    let d = dist(ctx.node)?;
    let dtype = dtype_attr(ctx.node, None)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let dt = dtype.unwrap_or(x.dtype());
        one(sample(&node, &rng, d, dt, x.shape().to_vec())?)
    }))
}

fn build_bernoulli(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let rng = seeded(ctx.node)?;
    let dtype = dtype_attr(ctx.node, None)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let p = x
            .to_f64_vec()
            .filter(|_| x.dtype().is_float())
            .ok_or_else(|| {
                invalid(
                    &node,
                    format!("probabilities must be floats, got {}", x.dtype()),
                )
            })?;
        let mut r = rng.lock().unwrap_or_else(|e| e.into_inner());
        let vals: Vec<f64> = p.iter().map(|&p| (r.uniform() < p) as u8 as f64).collect();
        let dt = dtype.unwrap_or(x.dtype());
        from_f64s(dt, x.shape().to_vec(), &vals)
            .map(|t| vec![t.into()])
            .ok_or_else(|| unsupported(&node, "Bernoulli", dt, "numeric and bool only"))
    }))
}

fn build_multinomial(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let rng = seeded(ctx.node)?;
    let samples = attrs::int(ctx.node, "sample_size", 1)?;
    let samples = super::common::to_dim(&node, samples, "sample_size")?;
    let dtype = dtype_attr(ctx.node, Some(DataType::Int32))?.unwrap_or(DataType::Int32);
    if !matches!(dtype, DataType::Int32 | DataType::Int64) {
        return Err(EpError::invalid_attribute(
            ctx.node,
            "dtype",
            "must be int32 or int64",
        ));
    }
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let [batch, classes] = *x.shape() else {
            return Err(invalid(
                &node,
                format!("input must be [batch, classes], got {:?}", x.shape()),
            ));
        };
        let logits = x
            .to_f64_vec()
            .filter(|_| x.dtype().is_float())
            .ok_or_else(|| {
                invalid(
                    &node,
                    format!("input must be float log-probabilities, got {}", x.dtype()),
                )
            })?;
        let mut r = rng.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(batch * samples);
        for b in 0..batch {
            let row = &logits[b * classes..(b + 1) * classes];
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let cdf: Vec<f64> = row
                .iter()
                .scan(0.0, |acc, &v| {
                    *acc += (v - m).exp();
                    Some(*acc)
                })
                .collect();
            let total = cdf.last().copied().unwrap_or(0.0);
            for _ in 0..samples {
                let u = r.uniform() * total;
                let k = cdf
                    .iter()
                    .position(|&c| u < c)
                    .unwrap_or(classes.saturating_sub(1));
                out.push(k as f64);
            }
        }
        one(from_f64s(dtype, vec![batch, samples], &out).expect("int32 or int64"))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for op in ["RandomNormal", "RandomUniform"] {
        r.register("", op, 1, build_random);
    }
    for op in ["RandomNormalLike", "RandomUniformLike"] {
        r.register("", op, 1, build_random_like);
    }
    for since in [15, 22] {
        r.register("", "Bernoulli", since, build_bernoulli);
    }
    for since in [7, 22] {
        r.register("", "Multinomial", since, build_multinomial);
    }
    for (op, since) in [("RandomNormal", 22), ("RandomUniform", 22)] {
        r.register("", op, since, build_random);
    }
    for (op, since) in [("RandomNormalLike", 22), ("RandomUniformLike", 22)] {
        r.register("", op, since, build_random_like);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn uniform_range_and_normal_moments() {
        let n = node(
            "RandomUniform",
            0,
            1,
            vec![
                ("shape", Attribute::Ints(vec![100, 50])),
                ("low", Attribute::Float(-2.0)),
                ("high", Attribute::Float(3.0)),
                ("seed", Attribute::Float(1.0)),
            ],
        );
        let o = run(&n, 13, &[]).unwrap();
        let (s, v) = out::<f32>(&o, 0);
        assert_eq!(s, vec![100, 50]);
        assert!(v.iter().all(|&x| (-2.0..3.0).contains(&x)));
        let n = node(
            "RandomNormalLike",
            1,
            1,
            vec![
                ("mean", Attribute::Float(5.0)),
                ("seed", Attribute::Float(2.0)),
            ],
        );
        let o = run(&n, 13, &[t(&[20000], vec![0f64; 20000])]).unwrap();
        let v = out::<f64>(&o, 0).1;
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
        assert!(
            (mean - 5.0).abs() < 0.05 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
    }

    #[test]
    fn bernoulli_and_multinomial() {
        let n = node("Bernoulli", 1, 1, vec![("seed", Attribute::Float(0.0))]);
        let o = run(&n, 15, &[t(&[4], vec![0f32, 1., 0., 1.])]).unwrap();
        assert_eq!(out::<f32>(&o, 0).1, vec![0., 1., 0., 1.]);
        let n = node(
            "Multinomial",
            1,
            1,
            vec![("sample_size", Attribute::Int(10))],
        );
        let o = run(&n, 7, &[t(&[2, 3], vec![0f32, -1e9, -1e9, -1e9, -1e9, 0.])]).unwrap();
        assert_eq!(
            out::<i32>(&o, 0),
            (vec![2, 10], [vec![0; 10], vec![2; 10]].concat())
        );
    }
}
