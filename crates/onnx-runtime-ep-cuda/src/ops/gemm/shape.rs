//! Shapes of batched products (numpy matmul semantics), operand views as strided matrices,
//! the column-major layouts cuBLASLt takes, and the activations of the fused ops.

use super::super::common::*;
use crate::runtime::CuPtr;
use onnx_runtime_ep_api::{EpError, EpResult, TensorView};
use onnx_runtime_ir::Node;

/// One operand of a batched product as the math sees it: `batch` stacked `rows x cols`
/// matrices at `ptr`, with element strides (`bstrides` per batch axis, `rs` between rows, `cs`
/// between columns). Strides of size-1 axes carry no meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mat {
    pub ptr: CuPtr,
    pub batch: Vec<usize>,
    pub bstrides: Vec<i64>,
    pub rows: usize,
    pub cols: usize,
    pub rs: i64,
    pub cs: i64,
}

impl Mat {
    /// The operand of a view: a 1-D left operand is `[1, K]`, a 1-D right operand `[K, 1]`;
    /// `trans_batch` (FusedMatMul, rank >= 3) moves axis 0 behind the batch axes, `trans`
    /// swaps the last two axes (ignored for 1-D operands).
    pub fn of(
        ptr: CuPtr,
        shape: &[usize],
        strides: &[usize],
        left: bool,
        trans: bool,
        trans_batch: bool,
    ) -> Mat {
        let s = istrides(strides);
        if shape.len() == 1 {
            let (rows, cols, rs, cs) = if left {
                (1, shape[0], s[0] * shape[0] as i64, s[0])
            } else {
                (shape[0], 1, s[0], 1)
            };
            return Mat {
                ptr,
                batch: Vec::new(),
                bstrides: Vec::new(),
                rows,
                cols,
                rs,
                cs,
            };
        }
        let r = shape.len();
        let (mut dims, mut st) = (shape.to_vec(), s);
        if trans_batch && r >= 3 {
            // [d0, b1.., d_{r-1}] read as [b1.., d0, d_{r-1}].
            let perm: Vec<usize> = (1..r - 1).chain([0, r - 1]).collect();
            dims = perm.iter().map(|&p| shape[p]).collect();
            st = perm.iter().map(|&p| st[p]).collect();
        }
        let (mut rows, mut cols, mut rs, mut cs) = (dims[r - 2], dims[r - 1], st[r - 2], st[r - 1]);
        if trans {
            std::mem::swap(&mut rows, &mut cols);
            std::mem::swap(&mut rs, &mut cs);
        }
        Mat {
            ptr,
            batch: dims[..r - 2].to_vec(),
            bstrides: st[..r - 2].to_vec(),
            rows,
            cols,
            rs,
            cs,
        }
    }

    /// The elements of all its matrices.
    pub fn numel(&self) -> usize {
        self.batch.iter().product::<usize>() * self.rows * self.cols
    }

    /// Its batch strides over `batch` (right-aligned broadcast): 0 where it is broadcast.
    pub fn batch_strides_over(&self, batch: &[usize]) -> Vec<i64> {
        let lead = batch.len() - self.batch.len();
        (0..batch.len())
            .map(|k| {
                if k < lead || self.batch[k - lead] == 1 {
                    0
                } else {
                    self.bstrides[k - lead]
                }
            })
            .collect()
    }

    /// The full walk (batch axes, rows, columns) with its strides.
    pub fn walk(&self) -> (Vec<usize>, Vec<i64>) {
        let mut dims = self.batch.clone();
        dims.extend([self.rows, self.cols]);
        let mut strides = self.bstrides.clone();
        strides.extend([self.rs, self.cs]);
        (dims, strides)
    }
}

/// The shapes of `a @ b` after 1-D promotion and batch broadcasting.
pub struct Product {
    pub a: Mat,
    pub b: Mat,
    pub batch: Vec<usize>,
    pub m: usize,
    pub n: usize,
    pub out_shape: Vec<usize>,
    pub a_vec: bool,
    pub b_vec: bool,
}

/// Plans `op(a) @ op(b)` with numpy matmul semantics; a K mismatch or batch axes that do not
/// broadcast are errors naming the node.
pub fn product(
    base: &Base,
    a: &TensorView<'_>,
    b: &TensorView<'_>,
    trans: (bool, bool),
    trans_batch: (bool, bool),
) -> EpResult<Product> {
    if a.shape.is_empty() || b.shape.is_empty() {
        return Err(base.err(format!(
            "{} inputs must have rank >= 1, got A {:?} and B {:?}",
            base.op, a.shape, b.shape
        )));
    }
    let am = Mat::of(ptr_of(a), a.shape, a.strides, true, trans.0, trans_batch.0);
    let bm = Mat::of(ptr_of(b), b.shape, b.strides, false, trans.1, trans_batch.1);
    if am.cols != bm.rows {
        return Err(base.err(format!(
            "inner dimensions differ: {:?} @ {:?} (K {} vs {})",
            a.shape, b.shape, am.cols, bm.rows
        )));
    }
    let batch = broadcast_shapes(base, &[&am.batch, &bm.batch]).map_err(|_| {
        base.err(format!(
            "the batch axes of A {:?} and B {:?} do not broadcast ({:?} vs {:?})",
            a.shape, b.shape, am.batch, bm.batch
        ))
    })?;
    let (a_vec, b_vec) = (a.shape.len() == 1, b.shape.len() == 1);
    let mut out_shape = batch.clone();
    if !a_vec {
        out_shape.push(am.rows);
    }
    if !b_vec {
        out_shape.push(bm.cols);
    }
    check_view_rank(base, &out_shape)?;
    Ok(Product {
        m: am.rows,
        n: bm.cols,
        a: am,
        b: bm,
        batch,
        out_shape,
        a_vec,
        b_vec,
    })
}

impl Product {
    /// The output (shape `out_shape`, strides `strides`) as a batch of `m x n` matrices.
    pub fn out_mat(&self, ptr: CuPtr, strides: &[usize]) -> Mat {
        let s = istrides(strides);
        let r = self.batch.len();
        let mut k = r;
        let rs = if self.a_vec {
            0
        } else {
            k += 1;
            s[k - 1]
        };
        let cs = if self.b_vec { 1 } else { s[k] };
        Mat {
            ptr,
            batch: self.batch.clone(),
            bstrides: s[..r].to_vec(),
            rows: self.m,
            cols: self.n,
            rs,
            cs,
        }
    }
}

/// How a strided `rows x cols` matrix is stored for a BLAS: row-major with a leading
/// dimension (the library sees its transpose) or column-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Major {
    Row(i64),
    Col(i64),
}

/// The BLAS layout of a matrix with these strides, or `None` when it needs packing (no unit
/// stride, a broadcast axis, overlapping rows).
pub fn major(rows: usize, cols: usize, rs: i64, cs: i64) -> Option<Major> {
    let (r, c) = (rows as i64, cols as i64);
    if (cols <= 1 || cs == 1) && (rows <= 1 || rs >= c.max(1)) {
        return Some(Major::Row(if rows <= 1 { c.max(1) } else { rs }));
    }
    if (rows <= 1 || rs == 1) && (cols <= 1 || cs >= r.max(1)) {
        return Some(Major::Col(if cols <= 1 { r.max(1) } else { cs }));
    }
    None
}

/// Drops size-1 axes and merges neighbouring axes that are contiguous in every operand.
pub fn merge<const N: usize>(dims: &[usize], strides: [&[i64]; N]) -> (Vec<usize>, [Vec<i64>; N]) {
    let mut d: Vec<usize> = Vec::new();
    let mut s: [Vec<i64>; N] = std::array::from_fn(|_| Vec::new());
    for k in 0..dims.len() {
        if dims[k] == 1 {
            continue;
        }
        if let Some(last) = d.len().checked_sub(1) {
            if (0..N).all(|o| s[o][last] == strides[o][k] * dims[k] as i64) {
                d[last] *= dims[k];
                for o in 0..N {
                    s[o][last] = strides[o][k];
                }
                continue;
            }
        }
        d.push(dims[k]);
        for o in 0..N {
            s[o].push(strides[o][k]);
        }
    }
    (d, s)
}

/// An activation fused after the product (MatMulBias's `activation`, as the CPU provider
/// parses it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    None,
    Relu,
    Tanh,
    Sigmoid,
    LeakyRelu(f64),
    Clip(f64, f64),
    HardSigmoid(f64, f64),
    HardSwish,
    /// `x * sigmoid(alpha * x)`.
    QuickGelu(f64),
    /// `x/2 * (1 + erf(x / sqrt 2))`.
    Gelu,
    /// The tanh approximation of GELU.
    FastGelu,
}

impl Act {
    /// Reads `activation` and `activation_params`.
    pub fn parse(node: &Node) -> EpResult<Act> {
        let name = attr_string(node, "activation")?.unwrap_or_default();
        let params: Vec<f64> = match node.attribute("activation_params") {
            None => Vec::new(),
            Some(onnx_runtime_ir::Attribute::Floats(v)) => v.iter().map(|&x| x as f64).collect(),
            Some(onnx_runtime_ir::Attribute::Float(v)) => vec![*v as f64],
            Some(other) => {
                return Err(EpError::invalid_attribute(
                    node,
                    "activation_params",
                    format!("expected a list of floats, got {:?}", other.kind()),
                ))
            }
        };
        let want = |n: usize| -> EpResult<()> {
            if params.len() == n {
                Ok(())
            } else {
                Err(EpError::invalid_attribute(
                    node,
                    "activation_params",
                    format!(
                        "activation '{name}' takes {n} parameter(s), got {}",
                        params.len()
                    ),
                ))
            }
        };
        Ok(match name.as_str() {
            "" | "Identity" => Act::None,
            "Relu" => Act::Relu,
            "Tanh" => Act::Tanh,
            "Sigmoid" => Act::Sigmoid,
            "HardSwish" => Act::HardSwish,
            "Gelu" => Act::Gelu,
            "FastGelu" => Act::FastGelu,
            "LeakyRelu" => {
                want(1)?;
                Act::LeakyRelu(params[0])
            }
            "Clip" => {
                want(2)?;
                Act::Clip(params[0], params[1])
            }
            "HardSigmoid" => {
                want(2)?;
                Act::HardSigmoid(params[0], params[1])
            }
            "QuickGelu" => {
                want(1)?;
                Act::QuickGelu(params[0])
            }
            other => {
                return Err(EpError::invalid_attribute(
                    node,
                    "activation",
                    format!(
                        "'{other}' is not one of Relu, Tanh, Sigmoid, LeakyRelu, Clip, \
                         HardSigmoid, HardSwish, QuickGelu, Gelu or FastGelu"
                    ),
                ))
            }
        })
    }

    /// The kernel's activation code and its two parameters (`activate` in gemm.cu).
    pub fn code(self) -> (i32, f64, f64) {
        match self {
            Act::None => (0, 0.0, 0.0),
            Act::Relu => (1, 0.0, 0.0),
            Act::Tanh => (2, 0.0, 0.0),
            Act::Sigmoid => (3, 0.0, 0.0),
            Act::LeakyRelu(a) => (4, a, 0.0),
            Act::Clip(lo, hi) => (5, lo, hi),
            Act::HardSigmoid(a, b) => (6, a, b),
            Act::HardSwish => (7, 0.0, 0.0),
            Act::QuickGelu(a) => (8, a, 0.0),
            Act::Gelu => (9, 0.0, 0.0),
            Act::FastGelu => (10, 0.0, 0.0),
        }
    }
}

/// The largest power of two (up to 256) dividing an address and every byte offset the
/// library adds to it.
pub fn alignment(ptr: CuPtr, offsets_bytes: &[i64]) -> u32 {
    let mut x = ptr;
    for &o in offsets_bytes {
        x |= o.unsigned_abs();
    }
    if x == 0 {
        256
    } else {
        (1u64 << x.trailing_zeros().min(8)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors_of_common_layouts() {
        // Contiguous, transposed view, padded rows, vectors, broadcast rows.
        assert_eq!(major(3, 4, 4, 1), Some(Major::Row(4)));
        assert_eq!(major(3, 4, 1, 3), Some(Major::Col(3)));
        assert_eq!(major(3, 4, 7, 1), Some(Major::Row(7)));
        assert_eq!(major(1, 5, 0, 1), Some(Major::Row(5)));
        assert_eq!(major(5, 1, 1, 0), Some(Major::Row(1)));
        assert_eq!(major(5, 1, 3, 0), Some(Major::Row(3)));
        assert_eq!(major(3, 4, 0, 1), None);
        assert_eq!(major(3, 4, 8, 2), None);
        assert_eq!(major(1, 1, 0, 0), Some(Major::Row(1)));
    }

    #[test]
    fn merge_joins_contiguous_batches_only() {
        let (d, [a, b]) = merge(&[2, 3, 4], [&[12, 4, 1], &[0, 0, 0]]);
        assert_eq!((d, a, b), (vec![24], vec![1], vec![0]));
        let (d, [a, b]) = merge(&[2, 5], [&[12, 0], &[0, 24]]);
        assert_eq!((d, a, b), (vec![2, 5], vec![12, 0], vec![0, 24]));
        let (d, _) = merge(&[1, 1], [&[3, 3]]);
        assert!(d.is_empty());
    }

    #[test]
    fn trans_batch_moves_axis_zero_behind_the_batch() {
        // [M=2, b=3, K=4] contiguous read as [3, 2, 4].
        let m = Mat::of(0, &[2, 3, 4], &[12, 4, 1], true, false, true);
        assert_eq!((m.batch.clone(), m.bstrides.clone()), (vec![3], vec![4]));
        assert_eq!((m.rows, m.cols, m.rs, m.cs), (2, 4, 12, 1));
    }

    #[test]
    fn alignment_of_addresses_and_offsets() {
        assert_eq!(alignment(0x1000, &[]), 256);
        assert_eq!(alignment(0x1002, &[]), 2);
        assert_eq!(alignment(0x1000, &[24]), 8);
        assert_eq!(alignment(0, &[]), 256);
    }
}
