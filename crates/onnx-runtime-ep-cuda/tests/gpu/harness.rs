//! Running one node on the GPU from host tensors (optionally strided), random inputs, and
//! dtype-agnostic reference helpers.

use onnx_runtime_ep_api::{
    DeviceBuffer, DeviceId, DevicePtr, DevicePtrMut, EpError, ExecutionProvider, Kernel, TensorMut,
    TensorView,
};
use onnx_runtime_ep_cuda::runtime::cuptr;
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{compute_contiguous_strides, Attribute, DataType, Node, NodeId, ValueId};

pub fn gpu() -> CudaExecutionProvider {
    CudaExecutionProvider::new_default().expect("a CUDA device")
}

/// A host tensor: its logical shape and its elements in row-major order.
#[derive(Clone, Debug)]
pub struct T {
    pub dtype: DataType,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
    pub layout: Layout,
}

/// How the tensor is laid out on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Contiguous,
    /// Stored with its axes reversed (a transposed view).
    Reversed,
    /// Each innermost row padded by 3 elements.
    Padded,
}

impl T {
    pub fn new(dtype: DataType, shape: &[usize], bytes: Vec<u8>) -> T {
        assert_eq!(bytes.len(), dtype.storage_bytes(shape.iter().product()));
        T {
            dtype,
            shape: shape.to_vec(),
            bytes,
            layout: Layout::Contiguous,
        }
    }

    pub fn with_layout(mut self, layout: Layout) -> T {
        self.layout = layout;
        self
    }

    pub fn width(&self) -> usize {
        self.dtype.element_size().unwrap()
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn elem(&self, i: usize) -> &[u8] {
        let w = self.width();
        &self.bytes[i * w..(i + 1) * w]
    }

    /// Device storage and element strides for the layout.
    fn storage(&self, rng: &mut Rng) -> (Vec<u8>, Vec<usize>) {
        let w = self.width();
        let rank = self.shape.len();
        let (storage_shape, order): (Vec<usize>, Vec<usize>) = match self.layout {
            Layout::Contiguous => (self.shape.clone(), (0..rank).collect()),
            Layout::Reversed => (
                self.shape.iter().rev().copied().collect(),
                (0..rank).rev().collect(),
            ),
            Layout::Padded => {
                let mut s = self.shape.clone();
                if let Some(last) = s.last_mut() {
                    *last += 3;
                }
                (s, (0..rank).collect())
            }
        };
        let sstrides = compute_contiguous_strides(&storage_shape);
        // Logical axis order[k] is storage axis k.
        let mut strides = vec![0usize; rank];
        for (k, &axis) in order.iter().enumerate() {
            strides[axis] = sstrides[k];
        }
        let total: usize = storage_shape.iter().product::<usize>().max(1);
        let mut storage = rng.bytes(total * w);
        let cs = compute_contiguous_strides(&self.shape);
        for i in 0..self.numel() {
            let off: usize = (0..rank)
                .map(|k| (i / cs[k]) % self.shape[k] * strides[k])
                .sum();
            storage[off * w..(off + 1) * w].copy_from_slice(self.elem(i));
        }
        (storage, strides)
    }
}

pub fn node(op: &str, n_inputs: usize, n_outputs: usize, attrs: &[(&str, Attribute)]) -> Node {
    let inputs = (0..n_inputs).map(|i| Some(ValueId(i))).collect();
    let outputs = (0..n_outputs).map(|i| ValueId(100 + i)).collect();
    let mut node = Node::new(NodeId(7), op, inputs, outputs).with_name(format!("test_{op}"));
    for (k, v) in attrs {
        node.attributes.insert((*k).to_string(), v.clone());
    }
    node
}

/// Device copies of the inputs and outputs of one call, kept so a test can run the kernel
/// again (eagerly or under capture).
/// Views of bound inputs on the device.
fn input_views(inputs: &[(T, DeviceBuffer, Vec<usize>)], device: DeviceId) -> Vec<TensorView<'_>> {
    inputs
        .iter()
        .map(|(t, buf, strides)| {
            TensorView::new(DevicePtr(buf.as_ptr()), t.dtype, &t.shape, strides, device)
        })
        .collect()
}

pub struct Bound<'e> {
    pub ep: &'e CudaExecutionProvider,
    pub inputs: Vec<(T, DeviceBuffer, Vec<usize>)>,
    pub outputs: Vec<(DataType, Vec<usize>, DeviceBuffer, Vec<usize>)>,
}

impl<'e> Bound<'e> {
    pub fn new(
        ep: &'e CudaExecutionProvider,
        inputs: &[T],
        outs: &[(DataType, Vec<usize>)],
    ) -> Self {
        let mut rng = Rng::new(99);
        let inputs = inputs
            .iter()
            .map(|t| {
                let (storage, strides) = t.storage(&mut rng);
                let buf = ep.allocate(storage.len().max(1), 256).unwrap();
                unsafe { ep.runtime().htod(&storage, cuptr(buf.as_ptr())).unwrap() };
                (t.clone(), buf, strides)
            })
            .collect();
        let mut bound = Bound {
            ep,
            inputs,
            outputs: Vec::new(),
        };
        bound.set_outputs(outs);
        bound
    }

    /// Replaces the outputs with fresh contiguous device buffers of these dtypes and shapes.
    pub fn set_outputs(&mut self, outs: &[(DataType, Vec<usize>)]) {
        for (_, _, buf, _) in self.outputs.drain(..) {
            let _ = self.ep.deallocate(buf);
        }
        for (dtype, shape) in outs {
            let bytes = dtype.storage_bytes(shape.iter().product());
            let buf = self.ep.allocate(bytes.max(1), 256).unwrap();
            self.outputs.push((
                *dtype,
                shape.clone(),
                buf,
                compute_contiguous_strides(shape),
            ));
        }
    }

    /// What the kernel says its outputs are for the bound inputs.
    pub fn output_types(
        &self,
        kernel: &dyn Kernel,
    ) -> Result<Vec<(DataType, Vec<usize>)>, EpError> {
        kernel.output_types(&input_views(&self.inputs, self.ep.device_id()))
    }

    /// Rewrites input `i` with new logical values (same shape and layout).
    pub fn set_input(&mut self, i: usize, t: T) {
        let (storage, strides) = t.storage(&mut Rng::new(5));
        assert_eq!(strides, self.inputs[i].2);
        unsafe {
            self.ep
                .runtime()
                .htod(&storage, cuptr(self.inputs[i].1.as_ptr()))
                .unwrap()
        };
        self.inputs[i].0 = t;
    }

    pub fn execute(&mut self, kernel: &dyn Kernel) -> Result<(), EpError> {
        let device = self.ep.device_id();
        let views = input_views(&self.inputs, device);
        let mut outs: Vec<TensorMut<'_>> = self
            .outputs
            .iter_mut()
            .map(|(dtype, shape, buf, strides)| {
                TensorMut::new(
                    DevicePtrMut(buf.as_mut_ptr()),
                    *dtype,
                    shape,
                    strides,
                    device,
                )
            })
            .collect();
        kernel.execute(&views, &mut outs)
    }

    pub fn read(&self) -> Result<Vec<T>, EpError> {
        self.outputs
            .iter()
            .map(|(dtype, shape, buf, _)| {
                let mut bytes = vec![0u8; dtype.storage_bytes(shape.iter().product())];
                unsafe { self.ep.runtime().dtoh(&mut bytes, cuptr(buf.as_ptr()))? };
                Ok(T::new(*dtype, shape, bytes))
            })
            .collect()
    }
}

impl Drop for Bound<'_> {
    fn drop(&mut self) {
        for (_, buf, _) in self.inputs.drain(..) {
            let _ = self.ep.deallocate(buf);
        }
        for (_, _, buf, _) in self.outputs.drain(..) {
            let _ = self.ep.deallocate(buf);
        }
    }
}

/// Builds the kernel for `node` and runs it once on `inputs`.
pub fn run(
    ep: &CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[T],
    outs: &[(DataType, Vec<usize>)],
) -> Result<Vec<T>, EpError> {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(node, &shapes, opset)?;
    let mut bound = Bound::new(ep, inputs, outs);
    bound.execute(kernel.as_ref())?;
    bound.read()
}

/// xorshift64*: reproducible random inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo) as u64) as i64
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A tensor of random bytes (any fixed-width dtype; used by ops that only move data).
pub fn random_bytes(rng: &mut Rng, dtype: DataType, shape: &[usize]) -> T {
    let n: usize = shape.iter().product();
    let mut bytes = rng.bytes(dtype.storage_bytes(n));
    if dtype == DataType::Bool {
        bytes.iter_mut().for_each(|b| *b &= 1);
    }
    T::new(dtype, shape, bytes)
}

pub fn i64s(shape: &[usize], values: &[i64]) -> T {
    T::new(
        DataType::Int64,
        shape,
        values.iter().flat_map(|v| v.to_ne_bytes()).collect(),
    )
}

pub fn i32s(shape: &[usize], values: &[i32]) -> T {
    T::new(
        DataType::Int32,
        shape,
        values.iter().flat_map(|v| v.to_ne_bytes()).collect(),
    )
}

/// The value of element `i` as f64 (numeric dtypes and bool).
pub fn get(t: &T, i: usize) -> f64 {
    let b = t.elem(i);
    match t.dtype {
        DataType::Float32 => f32::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Float64 => f64::from_ne_bytes(b.try_into().unwrap()),
        DataType::Float16 => half::f16::from_ne_bytes(b.try_into().unwrap()).to_f64(),
        DataType::BFloat16 => half::bf16::from_ne_bytes(b.try_into().unwrap()).to_f64(),
        DataType::Int8 => b[0] as i8 as f64,
        DataType::Uint8 | DataType::Bool => b[0] as f64,
        DataType::Int16 => i16::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Uint16 => u16::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Int32 => i32::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Uint32 => u32::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Int64 => i64::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Uint64 => u64::from_ne_bytes(b.try_into().unwrap()) as f64,
        other => panic!("no numeric view of {other}"),
    }
}

/// `v` stored as `dtype` with Rust's `as` rules (saturating, NaN to 0; bool is `v != 0`).
pub fn put(dtype: DataType, v: f64) -> Vec<u8> {
    match dtype {
        DataType::Float32 => (v as f32).to_ne_bytes().to_vec(),
        DataType::Float64 => v.to_ne_bytes().to_vec(),
        DataType::Float16 => half::f16::from_f64(v).to_ne_bytes().to_vec(),
        DataType::BFloat16 => half::bf16::from_f64(v).to_ne_bytes().to_vec(),
        DataType::Int8 => vec![v as i8 as u8],
        DataType::Uint8 => vec![v as u8],
        DataType::Bool => vec![(v != 0.0) as u8],
        DataType::Int16 => (v as i16).to_ne_bytes().to_vec(),
        DataType::Uint16 => (v as u16).to_ne_bytes().to_vec(),
        DataType::Int32 => (v as i32).to_ne_bytes().to_vec(),
        DataType::Uint32 => (v as u32).to_ne_bytes().to_vec(),
        DataType::Int64 => (v as i64).to_ne_bytes().to_vec(),
        DataType::Uint64 => (v as u64).to_ne_bytes().to_vec(),
        other => panic!("no numeric store for {other}"),
    }
}

pub fn from_f64s(dtype: DataType, shape: &[usize], values: &[f64]) -> T {
    T::new(
        dtype,
        shape,
        values.iter().flat_map(|&v| put(dtype, v)).collect(),
    )
}

/// Random numeric values: integers in [lo, hi), with fractions for float dtypes.
pub fn random_numeric(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: i64, hi: i64) -> T {
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n)
        .map(|_| {
            let base = rng.range(lo, hi) as f64;
            if dtype.is_float() {
                base + (rng.below(4) as f64) * 0.25
            } else if dtype == DataType::Bool {
                (rng.below(2)) as f64
            } else {
                base
            }
        })
        .collect();
    from_f64s(dtype, shape, &values)
}

/// The expected output of a pure data-movement op: element `i` of the output is element
/// `src(i)` of `input` (a multi-index over `out_shape` in, a linear input index out).
pub fn moved(input: &T, out_shape: &[usize], src: impl Fn(&[usize]) -> usize) -> T {
    let n: usize = out_shape.iter().product();
    let cs = compute_contiguous_strides(out_shape);
    let mut bytes = Vec::with_capacity(input.dtype.storage_bytes(n));
    for i in 0..n {
        let idx: Vec<usize> = (0..out_shape.len())
            .map(|k| (i / cs[k]) % out_shape[k])
            .collect();
        bytes.extend_from_slice(input.elem(src(&idx)));
    }
    T::new(input.dtype, out_shape, bytes)
}

/// Linear index of a multi-index.
pub fn lin(shape: &[usize], idx: &[usize]) -> usize {
    let cs = compute_contiguous_strides(shape);
    idx.iter().zip(&cs).map(|(i, s)| i * s).sum()
}

pub fn assert_same(got: &T, want: &T, what: &str) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    assert_eq!(got.dtype, want.dtype, "{what}: dtype");
    if got.bytes != want.bytes {
        let w = got.width();
        let first = (0..got.numel())
            .find(|&i| got.bytes[i * w..(i + 1) * w] != want.bytes[i * w..(i + 1) * w])
            .unwrap();
        panic!(
            "{what}: element {first} differs: got {:?}, want {:?}",
            got.elem(first),
            want.elem(first)
        );
    }
}

pub fn assert_close(got: &T, want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.numel(), want.len(), "{what}: numel");
    for (i, &w) in want.iter().enumerate() {
        let g = get(got, i);
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// Dtypes of every element width, for byte-moving ops.
pub const MOVE_DTYPES: [DataType; 6] = [
    DataType::Float32,
    DataType::Float16,
    DataType::Int64,
    DataType::Uint8,
    DataType::Bool,
    DataType::Complex128,
];

/// The CPU provider's outputs for `node` at `opset` on host tensors (the reference every CUDA
/// compute kernel is tested against). `inputs[i] == None` leaves optional input `i` omitted.
pub fn cpu_reference(node: &Node, opset: u64, inputs: &[Option<&T>]) -> Result<Vec<T>, EpError> {
    use onnx_runtime_ep_cpu::{BuildContext, Tensor, Value};
    let (_, factory) = onnx_runtime_ep_cpu::registry()
        .lookup(node.normalized_domain(), &node.op_type, opset)
        .ok_or_else(|| EpError::unsupported_op("cpu", node, opset))?;
    let kernel = factory(&BuildContext::new(node, opset))?;
    let values: Vec<Option<Value>> = inputs
        .iter()
        .map(|t| {
            t.map(|t| {
                Value::Tensor(
                    Tensor::from_bytes(t.dtype, t.shape.clone(), &t.bytes)
                        .expect("a host tensor of matching size"),
                )
            })
        })
        .collect();
    let refs: Vec<Option<&Value>> = values.iter().map(Option::as_ref).collect();
    let outs = kernel.run(&refs)?;
    Ok(outs
        .into_iter()
        .map(|v| {
            let t = v.into_tensor().expect("a tensor output");
            T::new(t.dtype(), t.shape(), t.bytes().to_vec())
        })
        .collect())
}

/// Every element of `got` within `atol + rtol * |want|` of the CPU reference `want` (same
/// dtype and shape); NaN must match NaN, infinities must match exactly.
pub fn assert_close_to(got: &T, want: &T, rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.dtype, want.dtype, "{what}: dtype");
    assert_eq!(got.shape, want.shape, "{what}: shape");
    for i in 0..want.numel() {
        let (g, w) = (get(got, i), get(want, i));
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(
            ok,
            "{what}: element {i} of {:?}: got {g}, want {w}",
            want.shape
        );
    }
}

// ---- shared by the pool, unpool, detection, linalg and tensor_scatter tests ----

/// Builds the kernel, asks `output_types`, runs on outputs of exactly those types.
/// `inputs[i] == None` is an omitted input (`node` must omit it too).
pub fn gpu_run(
    ep: &CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[Option<T>],
) -> Result<Vec<T>, EpError> {
    gpu_run_constants(ep, node, opset, inputs, &[])
}

/// [`gpu_run`] with the inputs at `constant[i]` true told to the kernel as model constants
/// (`Kernel::set_constant_inputs`, as a session does for initializers).
pub fn gpu_run_constants(
    ep: &CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[Option<T>],
    constant: &[bool],
) -> Result<Vec<T>, EpError> {
    let wired: Vec<T> = inputs.iter().flatten().cloned().collect();
    let shapes: Vec<Vec<usize>> = wired.iter().map(|t| t.shape.clone()).collect();
    let mut kernel = ep.get_kernel(node, &shapes, opset)?;
    if !constant.is_empty() {
        kernel.set_constant_inputs(constant);
    }
    let mut bound = Bound::new(ep, &wired, &[]);
    let types = bound.output_types(kernel.as_ref())?;
    bound.set_outputs(&types);
    bound.execute(kernel.as_ref())?;
    bound.read()
}

/// The CPU provider's outputs for `node` (`None` inputs omitted), or a panic naming `what`.
pub fn reference(node: &Node, opset: u64, inputs: &[Option<T>], what: &str) -> Vec<T> {
    let refs: Vec<Option<&T>> = inputs.iter().map(Option::as_ref).collect();
    cpu_reference(node, opset, &refs).unwrap_or_else(|e| panic!("{what}: CPU reference: {e}"))
}

/// Asserts that running `n` fails with an error naming the node and containing `needle`.
pub fn expect_err(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[Option<T>],
    needle: &str,
) {
    let err = gpu_run(ep, n, opset, inputs)
        .err()
        .unwrap_or_else(|| panic!("{}: expected an error saying '{needle}'", n.op_type))
        .to_string();
    assert!(
        err.contains(&n.name) && err.contains(needle),
        "{}: expected an error naming the node and saying '{needle}', got: {err}",
        n.op_type
    );
}

/// Values within `atol + rtol * |want|` (compared as f64, so a half output can be checked
/// against a float32 reference).
pub fn close_values(got: &T, want: &T, rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    for i in 0..want.numel() {
        let (g, w) = (get(got, i), get(want, i));
        assert!(
            (g - w).abs() <= atol + rtol * w.abs() || (g.is_nan() && w.is_nan()),
            "{what}: element {i} of {:?}: got {g}, want {w}",
            want.shape
        );
    }
}

/// `shape` values drawn uniformly from [lo, hi) in `dtype`.
pub fn uniform(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: f64, hi: f64) -> T {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| lo + (hi - lo) * (rng.next() >> 11) as f64 / (1u64 << 53) as f64)
        .collect();
    from_f64s(dtype, shape, &v)
}

/// A half-precision tensor's values as float32, in the same layout (other dtypes: the tensor
/// itself) — the input of a float32 reference for half-type kernels.
pub fn half_as_f32(t: &T) -> T {
    if t.dtype == DataType::Float16 || t.dtype == DataType::BFloat16 {
        let v: Vec<f64> = (0..t.numel()).map(|i| get(t, i)).collect();
        from_f64s(DataType::Float32, &t.shape, &v).with_layout(t.layout)
    } else {
        t.clone()
    }
}
