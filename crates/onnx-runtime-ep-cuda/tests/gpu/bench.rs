//! Throughput of the copy kernels on large tensors (printed, with `--nocapture`), checked for
//! correctness on sampled elements.

use super::harness::*;
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType};

fn bench(
    op: &str,
    attrs: &[(&str, Attribute)],
    inputs: Vec<T>,
    out: Vec<usize>,
    check: impl Fn(&T, &T, usize) -> bool,
) {
    let ep = gpu();
    let n = node(op, inputs.len(), 1, attrs);
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(&n, &shapes, 13).unwrap();
    let mut b = Bound::new(&ep, &inputs, &[(DataType::Float32, out.clone())]);
    b.execute(kernel.as_ref()).unwrap();
    ep.runtime().synchronize().unwrap();
    let runs = 20;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        b.execute(kernel.as_ref()).unwrap();
    }
    ep.runtime().synchronize().unwrap();
    let secs = start.elapsed().as_secs_f64() / runs as f64;
    let bytes = 4.0 * (inputs[0].numel() + out.iter().product::<usize>()) as f64;
    eprintln!(
        "{op} {:?} -> {out:?} f32: {:.1} us, {:.0} GB/s (read + write)",
        inputs[0].shape,
        secs * 1e6,
        bytes / secs / 1e9
    );
    let got = &b.read().unwrap()[0];
    let mut rng = Rng::new(77);
    for _ in 0..10_000 {
        let i = rng.below(got.numel());
        assert!(check(&inputs[0], got, i), "{op}: element {i} is wrong");
    }
}

#[test]
fn copy_kernels_throughput() {
    let mut rng = Rng::new(71);
    let (r, c) = (8192usize, 8192usize);
    let x = random_bytes(&mut rng, DataType::Float32, &[r, c]);
    bench(
        "Transpose",
        &[("perm", Attribute::Ints(vec![1, 0]))],
        vec![x.clone()],
        vec![c, r],
        |x, got, i| {
            let (j, k) = (i / r, i % r);
            got.elem(i) == x.elem(k * c + j)
        },
    );
    let row = random_bytes(&mut rng, DataType::Float32, &[1, 4096]);
    bench(
        "Expand",
        &[],
        vec![row, i64s(&[2], &[16384, 4096])],
        vec![16384, 4096],
        |x, got, i| got.elem(i) == x.elem(i % 4096),
    );
    let a = random_bytes(&mut rng, DataType::Float32, &[4096, 96, 128]);
    bench(
        "Transpose",
        &[("perm", Attribute::Ints(vec![1, 0, 2]))],
        vec![a],
        vec![96, 4096, 128],
        |x, got, i| {
            let (h, s, d) = (i / (4096 * 128), (i / 128) % 4096, i % 128);
            got.elem(i) == x.elem((s * 96 + h) * 128 + d)
        },
    );
}

/// Times `MatMul` of `a_shape @ b_shape` in `dtype` (printed as microseconds and TFLOP/s with
/// `--nocapture`) and checks sampled output elements against a host dot product.
fn bench_matmul(dtype: DataType, a_shape: &[usize], b_shape: &[usize], tol: f64) {
    let ep = gpu();
    let mut rng = Rng::new(81);
    // Uniform values in [-1, 1), written straight to bytes (the weights have 16M elements).
    let uniform = |rng: &mut Rng, shape: &[usize]| {
        let n: usize = shape.iter().product();
        let mut bytes = Vec::with_capacity(dtype.storage_bytes(n));
        for _ in 0..n {
            let v = (rng.next() >> 40) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0;
            match dtype {
                DataType::Float16 => bytes.extend(half::f16::from_f32(v).to_ne_bytes()),
                DataType::BFloat16 => bytes.extend(half::bf16::from_f32(v).to_ne_bytes()),
                _ => bytes.extend(v.to_ne_bytes()),
            }
        }
        T::new(dtype, shape, bytes)
    };
    let (a, b) = (uniform(&mut rng, a_shape), uniform(&mut rng, b_shape));
    let (k, n) = (b_shape[b_shape.len() - 2], b_shape[b_shape.len() - 1]);
    let rows = a.numel() / k;
    let mut out_shape = a_shape.to_vec();
    *out_shape.last_mut().unwrap() = n;
    let node = node("MatMul", 2, 1, &[]);
    let kernel = ep
        .get_kernel(&node, &[a_shape.to_vec(), b_shape.to_vec()], 13)
        .unwrap();
    let mut bound = Bound::new(&ep, &[a.clone(), b.clone()], &[(dtype, out_shape.clone())]);
    bound.execute(kernel.as_ref()).unwrap();
    ep.runtime().synchronize().unwrap();
    let runs = 50;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        bound.execute(kernel.as_ref()).unwrap();
    }
    ep.runtime().synchronize().unwrap();
    let secs = start.elapsed().as_secs_f64() / runs as f64;
    let flops = 2.0 * rows as f64 * k as f64 * n as f64;
    eprintln!(
        "MatMul {a_shape:?} @ {b_shape:?} {dtype}: {:.1} us, {:.1} TFLOP/s",
        secs * 1e6,
        flops / secs / 1e12
    );
    let got = &bound.read().unwrap()[0];
    for _ in 0..200 {
        let (i, j) = (rng.below(rows), rng.below(n));
        let want: f64 = (0..k)
            .map(|p| get(&a, i * k + p) * get(&b, p * n + j))
            .sum();
        let g = get(got, i * n + j);
        assert!(
            (g - want).abs() <= tol * (1.0 + want.abs()),
            "MatMul {dtype} ({i}, {j}): got {g}, want {want}"
        );
    }
}

#[test]
fn matmul_throughput() {
    // BERT-base feed-forward (batch 1, 128 tokens) and LLM decode (one token).
    for dtype in [DataType::Float32, DataType::Float16, DataType::BFloat16] {
        let tol = if dtype == DataType::Float32 {
            1e-3
        } else {
            3e-2
        };
        bench_matmul(dtype, &[1, 128, 768], &[768, 3072], tol);
        bench_matmul(dtype, &[1, 1, 4096], &[4096, 4096], tol);
    }
    bench_matmul(DataType::Float16, &[8, 512, 1024], &[1024, 4096], 3e-2);
}
