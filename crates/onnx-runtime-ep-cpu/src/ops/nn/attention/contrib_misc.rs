//! com.microsoft MatMulNBits (2/4/8-bit blocked weights, dequantized once when constant,
//! then the SIMD GEMM) and com.microsoft RotaryEmbedding.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::attention::sdpa::{bhsd_to_bsh, bsh_to_bhsd, rotate};
use crate::ops::nn::common::{self, invalid, Real};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use rayon::prelude::*;

pub(super) struct NBits {
    node: String,
    k: usize,
    n: usize,
    bits: usize,
    block: usize,
    /// W as f32 [N, K], when B, scales and zero points are constants.
    packed: Option<Vec<f32>>,
}

impl NBits {
    /// Dequantizes B to f32 [N, K].
    fn dequantize(
        &self,
        b: &Tensor,
        scales: &Tensor,
        zp: Option<&Tensor>,
        g_idx: Option<&Tensor>,
    ) -> Result<Vec<f32>, EpError> {
        let node = &self.node;
        let (k, n, bits, block) = (self.k, self.n, self.bits, self.block);
        let kb = k.div_ceil(block);
        let blob = block * bits / 8;
        if b.dtype() != DataType::Uint8 || b.numel() != n * kb * blob {
            return Err(invalid(
                node,
                format!(
                    "B must be uint8 with N*k_blocks*blob = {} bytes, got {} {:?}",
                    n * kb * blob,
                    b.dtype(),
                    b.shape()
                ),
            ));
        }
        let sv = common::float_vec::<f32>(scales)
            .ok_or_else(|| invalid(node, "scales must be float"))?;
        let gi: Option<Vec<i64>> = g_idx
            .map(|g| common::ints_of(node, g, "g_idx"))
            .transpose()?;
        let groups = match &gi {
            Some(g) => g
                .iter()
                .map(|&x| x.max(0) as usize + 1)
                .max()
                .unwrap_or(kb)
                .max(kb),
            None => kb,
        };
        if sv.len() != n * groups {
            return Err(invalid(
                node,
                format!(
                    "scales has {} values; want N*k_blocks = {}",
                    sv.len(),
                    n * groups
                ),
            ));
        }
        let default_zp = (1u32 << (bits - 1)) as f32;
        // Zero points: packed uint8 like B, or unpacked floats.
        let zpv: Option<Vec<f32>> = match zp {
            None => None,
            Some(z) if z.dtype() == DataType::Uint8 => {
                let per_row = (groups * bits).div_ceil(8);
                if z.numel() != n * per_row {
                    return Err(invalid(
                        node,
                        format!(
                            "packed zero_points has {} bytes; want {}",
                            z.numel(),
                            n * per_row
                        ),
                    ));
                }
                let zb = z.bytes();
                let per_byte = 8 / bits;
                let mask = (1u32 << bits) - 1;
                Some(
                    (0..n * groups)
                        .map(|i| {
                            let (row, g) = (i / groups, i % groups);
                            let byte = zb[row * per_row + g / per_byte] as u32;
                            ((byte >> ((g % per_byte) * bits)) & mask) as f32
                        })
                        .collect(),
                )
            }
            Some(z) => {
                let v = common::float_vec::<f32>(z)
                    .ok_or_else(|| invalid(node, "zero_points must be uint8 or float"))?;
                if v.len() != n * groups {
                    return Err(invalid(
                        node,
                        "unpacked zero_points must have N*k_blocks values",
                    ));
                }
                Some(v)
            }
        };
        let bb = b.bytes();
        let per_byte = 8 / bits;
        let mask = (1u32 << bits) - 1;
        let mut w = vec![0f32; n * k];
        w.par_chunks_mut(k.max(1))
            .enumerate()
            .for_each(|(row, wr)| {
                for (kk, out) in wr.iter_mut().enumerate() {
                    let (blk, within) = (kk / block, kk % block);
                    let byte = bb[(row * kb + blk) * blob + within / per_byte] as u32;
                    let q = ((byte >> ((within % per_byte) * bits)) & mask) as f32;
                    let g = gi.as_ref().map_or(blk, |g| g[kk].max(0) as usize);
                    let z = zpv.as_ref().map_or(default_zp, |z| z[row * groups + g]);
                    *out = (q - z) * sv[row * groups + g];
                }
            });
        Ok(w)
    }
}

impl CpuKernel for NBits {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let a = tensor_input(node, inputs, 0)?;
        common::require_float(node, "MatMulNBits", a.dtype())?;
        let owned;
        let w = match &self.packed {
            Some(w) => w,
            None => {
                owned = self.dequantize(
                    tensor_input(node, inputs, 1)?,
                    tensor_input(node, inputs, 2)?,
                    optional_tensor_input(node, inputs, 3)?,
                    optional_tensor_input(node, inputs, 4)?,
                )?;
                &owned
            }
        };
        let (k, n) = (self.k, self.n);
        if a.shape().last() != Some(&k) {
            return Err(invalid(
                node,
                format!("A {:?} must end in K={k}", a.shape()),
            ));
        }
        let m = a.numel() / k.max(1);
        let ua = common::upcast(a);
        let av: Vec<f32> = if a.dtype() == DataType::Float64 {
            a.data::<f64>().iter().map(|&x| x as f32).collect()
        } else {
            ua.data::<f32>().to_vec()
        };
        let mut y = vec![0f32; m * n];
        if let Some(bias) = optional_tensor_input(node, inputs, 5)? {
            let bv = common::float_vec::<f32>(bias).unwrap_or_default();
            if bv.len() != n {
                return Err(invalid(
                    node,
                    format!("bias has {} values; want N={n}", bv.len()),
                ));
            }
            y.chunks_mut(n.max(1)).for_each(|r| r.copy_from_slice(&bv));
            common::gemm(m, n, k, &av, k, 1, w, 1, k, &mut y, n, 1.0, 1.0);
        } else {
            common::gemm(m, n, k, &av, k, 1, w, 1, k, &mut y, n, 1.0, 0.0);
        }
        let mut shape = a.shape().to_vec();
        *shape.last_mut().expect("rank >= 1") = n;
        let t = Tensor::from_vec(shape, y);
        Ok(vec![Value::Tensor(
            crate::ops::nn::norm::channel_norm::recast(t, a.dtype()),
        )])
    }
}

fn build_nbits(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    Ok(Box::new(nbits_kernel(ctx, [1, 2, 3, 4])?))
}

/// The MatMulNBits kernel of `ctx.node`'s attributes whose B, scales, zero points and g_idx
/// are the node's inputs `pos` (dequantized once when they are constants).
pub(super) fn nbits_kernel(ctx: &BuildContext<'_>, pos: [usize; 4]) -> Result<NBits, EpError> {
    let nd = ctx.node;
    let req = |name: &str| -> Result<usize, EpError> {
        match attrs::opt_int(nd, name)? {
            Some(v) if v > 0 => Ok(v as usize),
            _ => Err(common::bad_attr(
                nd,
                name,
                "is required and must be positive",
            )),
        }
    };
    let (k, n) = (req("K")?, req("N")?);
    let bits = attrs::int(nd, "bits", 4)?;
    if ![2, 4, 8].contains(&bits) {
        return Err(common::bad_attr(
            nd,
            "bits",
            format!("{bits} is not 2, 4 or 8"),
        ));
    }
    let block = req("block_size")?;
    if block < 16 || !block.is_power_of_two() {
        return Err(common::bad_attr(
            nd,
            "block_size",
            format!("{block} must be a power of two >= 16"),
        ));
    }
    if attrs::int(nd, "weight_prepacked", 0)? != 0 {
        return Err(common::bad_attr(
            nd,
            "weight_prepacked",
            "EP-prepacked weights are CUDA layouts; export unprepacked weights for the CPU",
        ));
    }
    let mut kernel = NBits {
        node: nd.describe(),
        k,
        n,
        bits: bits as usize,
        block,
        packed: None,
    };
    let c = |i| match ctx.constant(i) {
        Some(Value::Tensor(t)) => Some(t),
        _ => None,
    };
    let absent = |i: usize| nd.inputs.get(i).copied().flatten().is_none();
    let [pb, ps, pz, pg] = pos;
    if let (Some(b), Some(s)) = (c(pb), c(ps)) {
        let zp_ok = absent(pz) || c(pz).is_some();
        let g_ok = absent(pg) || c(pg).is_some();
        if zp_ok && g_ok {
            kernel.packed = Some(kernel.dequantize(b, s, c(pz), c(pg))?);
        }
    }
    Ok(kernel)
}

struct MsRotary {
    node: String,
    num_heads: usize,
    rot_dim: usize,
    interleaved: bool,
}

impl MsRotary {
    fn compute<T: Real>(&self, inputs: &[Option<&Value>]) -> Result<Tensor, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let pos = tensor_input(node, inputs, 1)?;
        let (cos, sin) = (
            tensor_input(node, inputs, 2)?,
            tensor_input(node, inputs, 3)?,
        );
        let cv = |t: &Tensor| common::float_vec::<T>(t).unwrap_or_default();
        if cos.rank() != 2 || sin.shape() != cos.shape() {
            return Err(invalid(
                node,
                "cos_cache and sin_cache must be 2-D [max_seq, rotary_dim/2]",
            ));
        }
        let (rows, half) = (cos.shape()[0], cos.shape()[1]);
        let shape = x.shape().to_vec();
        let (b, s, h, d, mut xv) = match shape.len() {
            4 => {
                let (b, h, s, d) = (shape[0], shape[1], shape[2], shape[3]);
                (b, s, h, d, bhsd_to_bsh(&cv(x), b, h, s, d))
            }
            3 => {
                let d = shape[2].checked_div(self.num_heads).unwrap_or(2 * half);
                if d == 0 || shape[2] % d != 0 {
                    return Err(invalid(node, "hidden size must divide into heads"));
                }
                (shape[0], shape[1], shape[2] / d, d, cv(x))
            }
            _ => return Err(invalid(node, format!("input {shape:?} must be 3-D or 4-D"))),
        };
        let rot = if self.rot_dim > 0 {
            self.rot_dim
        } else {
            2 * half
        };
        if rot != 2 * half || rot > d {
            return Err(invalid(
                node,
                format!(
                    "rotary dim {rot} must be 2 x cache width {half} and at most head size {d}"
                ),
            ));
        }
        let ids = common::ints_of(node, pos, "position_ids")?;
        let position = |bi: usize, si: usize| -> i64 {
            if ids.len() == 1 {
                ids[0] + si as i64
            } else {
                ids[bi * s + si]
            }
        };
        if ids.len() != 1 && ids.len() != b * s {
            return Err(invalid(
                node,
                "position_ids must be one offset or [batch, seq]",
            ));
        }
        for bi in 0..b {
            for si in 0..s {
                let p = position(bi, si);
                if p < 0 || p as usize >= rows {
                    return Err(invalid(
                        node,
                        format!("position {p} is outside the caches of {rows} rows"),
                    ));
                }
            }
        }
        let (cvv, svv) = (cv(cos), cv(sin));
        rotate(&mut xv, (b, s, h, d), rot, self.interleaved, |bi, si| {
            let r = position(bi, si) as usize;
            (
                cvv[r * half..(r + 1) * half].to_vec(),
                svv[r * half..(r + 1) * half].to_vec(),
            )
        });
        let yv = if shape.len() == 4 {
            bsh_to_bhsd(&xv, b, s, h, d)
        } else {
            xv
        };
        Ok(crate::ops::nn::norm::channel_norm::recast(
            Tensor::from_vec(shape, yv),
            x.dtype(),
        ))
    }
}

impl CpuKernel for MsRotary {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let x = tensor_input(&self.node, inputs, 0)?;
        common::require_float(&self.node, "RotaryEmbedding", x.dtype())?;
        let y = if x.dtype() == DataType::Float64 {
            self.compute::<f64>(inputs)?
        } else {
            self.compute::<f32>(inputs)?
        };
        Ok(vec![Value::Tensor(y)])
    }
}

fn build_ms_rotary(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    if attrs::int(n, "is_packed_batching", 0)? != 0 {
        return Err(common::bad_attr(
            n,
            "is_packed_batching",
            "packed (ragged) batching is not supported on the CPU",
        ));
    }
    Ok(Box::new(MsRotary {
        node: n.describe(),
        num_heads: attrs::int(n, "num_heads", 0)?.max(0) as usize,
        rot_dim: attrs::int(n, "rotary_embedding_dim", 0)?.max(0) as usize,
        interleaved: attrs::int(n, "interleaved", 0)? != 0,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("com.microsoft", "MatMulNBits", 1, build_nbits);
    r.register("com.microsoft", "RotaryEmbedding", 1, build_ms_rotary);
}
