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
