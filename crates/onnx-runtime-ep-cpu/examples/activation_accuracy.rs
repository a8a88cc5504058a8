//! Measures the float32 Sigmoid and Tanh approximations (`vecmath::sigmoid`, `vecmath::tanh`)
//! against float64 math on every float32 in a range (all of them by default), by band of x,
//! in ulps of the float32 result: |got - want| / ulp(want), with ulp(w) the spacing of
//! float32 values at |w| (subnormal spacing below the smallest normal). The numbers quoted in
//! the functions' doc comments and docs/cpu-math.md come from this.
//!
//!     cargo run --release -p onnx-runtime-ep-cpu --example activation_accuracy [STRIDE]
//!
//! STRIDE (default 1) visits every STRIDE-th bit pattern.

use onnx_runtime_ep_cpu::ops::math::vecmath;
use rayon::prelude::*;

/// The spacing of float32 values at |w|.
fn ulp(w: f64) -> f64 {
    let a = w.abs().max(f32::MIN_POSITIVE as f64);
    2f64.powi(a.log2().floor() as i32 - 23)
}

/// Worst error of one band: (ulps, at x, absolute error).
#[derive(Clone, Copy, Default)]
struct Worst {
    ulps: f64,
    x: f32,
    abs: f64,
    n: u64,
}

impl Worst {
    fn add(mut self, x: f32, got: f32, want: f64) -> Worst {
        let e = (got as f64 - want).abs();
        let u = e / ulp(want);
        if u > self.ulps {
            (self.ulps, self.x) = (u, x);
        }
        self.abs = self.abs.max(e);
        self.n += 1;
        self
    }
    fn merge(a: Worst, b: Worst) -> Worst {
        let w = if b.ulps > a.ulps { b } else { a };
        Worst {
            abs: a.abs.max(b.abs),
            n: a.n + b.n,
            ..w
        }
    }
}

/// Runs `f` against `want` over the float32 bit patterns (every `stride`-th), binned by
/// `band(x)` into `names.len()` bands (`None`: not counted).
fn measure(
    stride: u64,
    f: fn(f32) -> f32,
    want: fn(f64) -> f64,
    band: fn(f32) -> Option<usize>,
    names: &[&str],
) {
    let k = names.len();
    let res = (0..(1u64 << 32) / stride)
        .into_par_iter()
        .fold(
            || vec![Worst::default(); k],
            |mut acc, i| {
                let x = f32::from_bits((i * stride) as u32);
                if let Some(b) = x.is_finite().then(|| band(x)).flatten() {
                    acc[b] = acc[b].add(x, f(x), want(x as f64));
                }
                acc
            },
        )
        .reduce(
            || vec![Worst::default(); k],
            |a, b| {
                a.iter()
                    .zip(&b)
                    .map(|(a, b)| Worst::merge(*a, *b))
                    .collect()
            },
        );
    for (name, w) in names.iter().zip(&res) {
        println!(
            "  {name:<28} {:>11} inputs  max {:8.2} ulp (at x = {:e})  max abs {:.2e}",
            w.n, w.ulps, w.x, w.abs
        );
    }
}

fn main() {
    let stride: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().unwrap())
        .unwrap_or(1);
    println!("Sigmoid vs 1 / (1 + e^-x) in float64:");
    measure(
        stride,
        vecmath::sigmoid,
        |x| 1.0 / (1.0 + (-x).exp()),
        |x| {
            Some(match x {
                x if x >= -1.0 => 0,
                x if x >= -5.0 => 1,
                x if x >= -10.0 => 2,
                x if x >= -16.0 => 3,
                _ => 4,
            })
        },
        &[
            "x >= -1",
            "-5 <= x < -1",
            "-10 <= x < -5",
            "-16 <= x < -10",
            "x < -16",
        ],
    );
    println!("Tanh vs tanh in float64:");
    measure(
        stride,
        vecmath::tanh,
        f64::tanh,
        |x| {
            let a = x.abs();
            Some(match a {
                a if a >= 2.0 => 0,
                a if a >= 1e-30 => 1,
                a if a >= 1e-37 => 2,
                _ => 3,
            })
        },
        &[
            "|x| >= 2",
            "1e-30 <= |x| < 2",
            "1e-37 <= |x| < 1e-30",
            "|x| < 1e-37 (subnormal zone)",
        ],
    );
}
