//! Times float32 Sigmoid and Tanh over 1M elements: the registered kernels (with their thread
//! split), the vectorized slice maps on one thread (AVX2+FMA `map`, AVX-512F `map_f32`), and
//! for comparison the exp-based forms the crate used before (1 / (1 + e^-x); tanh as an odd
//! polynomial below 0.625 and 1 - 2 / (e^2|x| + 1) above) through the same AVX2 map. Prints
//! the median ns per element.
//!
//!     cargo run --release -p onnx-runtime-ep-cpu --example activation_timing [N] [REPS]

use onnx_runtime_ep_cpu::kernel::BuildContext;
use onnx_runtime_ep_cpu::ops::math::vecmath;
use onnx_runtime_ep_cpu::{registry, Tensor, Value};
use onnx_runtime_ir::{Node, NodeId, ValueId};
use std::mem::MaybeUninit;
use std::time::Instant;

#[inline(always)]
fn sigmoid_exp(x: f32) -> f32 {
    1.0 / (1.0 + vecmath::exp(-x))
}

#[inline(always)]
fn tanh_exp(x: f32) -> f32 {
    let a = x.abs();
    let u = x * x;
    let p = -0.0056975223f32;
    let p = p * u + 0.020630307;
    let p = p * u - 0.053735863;
    let p = p * u + 0.13331366;
    let p = p * u - 0.33333275;
    let p = p * u + 1.0;
    let small = x * p;
    let big = 1.0 - 2.0 / (vecmath::exp(2.0 * a.min(10.0)) + 1.0);
    if a <= 0.625 || x.is_nan() {
        small
    } else {
        big.copysign(x)
    }
}

/// Median seconds of `reps` runs of `f`, after one warm-up run.
fn median(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let n = args.first().copied().unwrap_or(1 << 20);
    let reps = args.get(1).copied().unwrap_or(51);
    // Inputs spread over [-12, 12] (both the clamped and the polynomial ranges of tanh).
    let xs: Vec<f32> = (0..n)
        .map(|i| ((i as u64 * 2_654_435_761 % 1_000_003) as f32 / 1_000_003.0 - 0.5) * 24.0)
        .collect();
    let mut dst = vec![MaybeUninit::<f32>::uninit(); n];
    let per = |s: f64| s * 1e9 / n as f64;
    let threads = rayon::current_num_threads();
    println!("n = {n}, {reps} reps, median ns/element; rayon threads: {threads}");
    for (op, rational, exp_based) in [
        (
            "Sigmoid",
            vecmath::sigmoid as fn(f32) -> f32,
            sigmoid_exp as fn(f32) -> f32,
        ),
        ("Tanh", vecmath::tanh, tanh_exp),
    ] {
        let node = Node::new(NodeId(0), op, vec![Some(ValueId(0))], vec![ValueId(1)]);
        let (_, factory) = registry().lookup("", op, 13).unwrap();
        let kernel = factory(&BuildContext::new(&node, 13)).unwrap();
        let input = Value::Tensor(Tensor::from_vec(vec![n], xs.clone()));
        let k = median(reps, || {
            std::hint::black_box(kernel.run(&[Some(&input)]).unwrap());
        });
        // Closures so that the approximations inline into the map's loop.
        let r = match op {
            "Sigmoid" => median(reps, || {
                vecmath::map(&xs, &mut dst, &|x| vecmath::sigmoid(x))
            }),
            _ => median(reps, || vecmath::map(&xs, &mut dst, &|x| vecmath::tanh(x))),
        };
        // `map` above is the AVX2+FMA build; `map_f32` the AVX-512F one where the CPU has it.
        let w = match op {
            "Sigmoid" => median(reps, || {
                vecmath::map_f32(&xs, &mut dst, &|x| vecmath::sigmoid(x))
            }),
            _ => median(reps, || {
                vecmath::map_f32(&xs, &mut dst, &|x| vecmath::tanh(x))
            }),
        };
        let e = match op {
            "Sigmoid" => median(reps, || vecmath::map(&xs, &mut dst, &|x| sigmoid_exp(x))),
            _ => median(reps, || vecmath::map(&xs, &mut dst, &|x| tanh_exp(x))),
        };
        // Keep both forms honest: they approximate the same function.
        let worst = xs
            .iter()
            .map(|&x| (rational(x) - exp_based(x)).abs())
            .fold(0.0f32, f32::max);
        println!(
            "{op:<8} kernel {:6.3} | 1 thread: rational AVX2 {:6.3}, rational map_f32 {:6.3}, \
             exp-based AVX2 {:6.3} (exp-based / rational AVX2 = {:.2}) | \
             max |rational - exp-based| {worst:.1e}",
            per(k),
            per(r),
            per(w),
            per(e),
            e / r
        );
    }
}
