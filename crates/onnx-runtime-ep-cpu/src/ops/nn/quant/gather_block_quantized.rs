//! com.microsoft GatherBlockQuantized (opset 1): a Gather over block-quantized data that
//! dequantizes what it gathers, `(q - zero_point) * scale` with one scale (and zero point) per
//! `block_size` elements along `quantize_axis`.
//!
//! `data` is int4 / uint4 (any axes; zero points of the data's type, default 0), uint8 holding
//! `bits` = 2, 4 or 8-bit codes packed low bits first along the last axis (`gather_axis` 0,
//! `quantize_axis` the last axis, as onnxruntime requires; zero points packed the same way along the
//! scales' last axis, default 2^(bits-1)), or a float8 / float4e2m1 type (`float(code) * scale`,
//! no zero points; `block_size` 0 makes the whole `quantize_axis` one block and a scales
//! dimension of 1 broadcasts on the other axes). The output has the scales' dtype and shape
//! `data[..g] ++ indices ++ data[g+1..]` in logical (unpacked) elements. Indices may be negative
//! (counted from the end); one outside `[-s, s-1]` is an error naming it (onnxruntime 1.32
//! writes zeros for such a slice instead).

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, bad_attr, invalid};
use crate::ops::nn::quant::qtypes;
use crate::shape::normalize_axis;
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use rayon::prelude::*;

const OP: &str = "GatherBlockQuantized";

/// How the codes of `data` are stored and read.
#[derive(Clone)]
enum Codes {
    /// int4 / uint4: flat nibbles (low first), signed for int4.
    Nibbles { signed: bool },
    /// uint8 holding `bits`-bit codes, `8 / bits` per byte, low bits first.
    Packed { bits: usize },
    /// A float8 (256 codes) or float4e2m1 (16 codes, flat nibbles) type: code -> value.
    Float { table: Vec<f32>, nibbles: bool },
}

impl Codes {
    /// The code at logical element `i` (an integer for the integer kinds).
    #[inline]
    fn get(&self, bytes: &[u8], i: usize) -> f32 {
        match self {
            Codes::Nibbles { signed } => {
                let nib = (bytes[i / 2] >> (4 * (i % 2))) & 0xF;
                if *signed {
                    (((nib << 4) as i8) >> 4) as f32
                } else {
                    nib as f32
                }
            }
            Codes::Packed { bits: 8 } => bytes[i] as f32,
            Codes::Packed { bits } => {
                let per = 8 / bits;
                ((bytes[i / per] >> ((i % per) * bits)) & ((1u8 << bits) - 1)) as f32
            }
            Codes::Float { table, nibbles } => {
                let code = if *nibbles {
                    (bytes[i / 2] >> (4 * (i % 2))) & 0xF
                } else {
                    bytes[i]
                };
                table[code as usize]
            }
        }
    }
}

/// The value table of a minifloat type, decoded once through the quantization module.
fn float_table(dtype: DataType, codes: usize) -> Option<Vec<f32>> {
    let t = if codes == 16 {
        let bytes: Vec<u8> = (0..8u8).map(|b| (2 * b) | ((2 * b + 1) << 4)).collect();
        Tensor::from_bytes(dtype, vec![16], &bytes).ok()?
    } else {
        let bytes: Vec<u8> = (0..=255u8).collect();
        Tensor::from_bytes(dtype, vec![256], &bytes).ok()?
    };
    Some(qtypes::decode(&t)?.into_iter().map(|v| v as f32).collect())
}

struct Gbq {
    node: String,
    gather_axis: i64,
    quantize_axis: i64,
    /// 0: the whole quantize axis is one block (float8 / float4 data only).
    block: usize,
    bits: usize,
}

/// Everything a call derives from its input shapes and dtypes.
struct Layout {
    codes: Codes,
    /// Logical (unpacked) data shape.
    shape: Vec<usize>,
    gather: usize,
    quant: usize,
    block: usize,
    /// Element strides of the scales for each data axis (0 where a scale broadcasts).
    scale_strides: Vec<usize>,
    default_zp: f32,
}

impl Gbq {
    fn layout(
        &self,
        data: &Tensor,
        scales: &Tensor,
        zp: Option<&Tensor>,
    ) -> Result<Layout, EpError> {
        let node = &self.node;
        let is_float_data = matches!(
            data.dtype(),
            DataType::Float8E4M3FN
                | DataType::Float8E4M3FNUZ
                | DataType::Float8E5M2
                | DataType::Float8E5M2FNUZ
                | DataType::Float4E2M1
        );
        let (codes, shape, default_zp) = match data.dtype() {
            DataType::Int4 | DataType::Uint4 => (
                Codes::Nibbles {
                    signed: data.dtype() == DataType::Int4,
                },
                data.shape().to_vec(),
                0.0,
            ),
            DataType::Uint8 => {
                let bits = self.bits;
                let mut s = data.shape().to_vec();
                if let Some(last) = s.last_mut() {
                    *last *= 8 / bits;
                }
                (Codes::Packed { bits }, s, (1u32 << (bits - 1)) as f32)
            }
            d if is_float_data => {
                let n = if d == DataType::Float4E2M1 { 16 } else { 256 };
                let table = float_table(d, n)
                    .ok_or_else(|| invalid(node, format!("no decoder for {d} codes")))?;
                (
                    Codes::Float {
                        table,
                        nibbles: n == 16,
                    },
                    data.shape().to_vec(),
                    0.0,
                )
            }
            other => {
                return Err(common::unsupported(
                    node,
                    OP,
                    other,
                    "int4, uint4, uint8 (2/4/8-bit codes), float8 or float4e2m1 data",
                ))
            }
        };
        let r = shape.len();
        if r == 0 {
            return Err(invalid(node, "data must have rank >= 1"));
        }
        let gather = normalize_axis(node, self.gather_axis, r)?;
        let quant = normalize_axis(node, self.quantize_axis, r)?;
        if let Codes::Packed { bits } = codes {
            if gather != 0 {
                return Err(invalid(
                    node,
                    format!("uint8 data needs gather_axis 0, got {}", self.gather_axis),
                ));
            }
            if quant != r - 1 || (bits < 8 && gather == quant) {
                return Err(invalid(
                    node,
                    format!(
                        "uint8 data is quantized along its last axis (and, for bits < 8, not \
                         the gathered one); got quantize_axis {}",
                        self.quantize_axis
                    ),
                ));
            }
        }
        let block =
            match self.block {
                0 if is_float_data => shape[quant].max(1),
                0 => return Err(invalid(
                    node,
                    "block_size 0 (one block per quantize axis) is only for float8 / float4 data",
                )),
                b => b,
            };
        // Scales: the data's shape with ceil(d / block) on the quantize axis (or 1 on other
        // axes for float data, broadcast).
        if !matches!(
            scales.dtype(),
            DataType::Float32 | DataType::Float16 | DataType::BFloat16
        ) {
            return Err(common::unsupported(
                node,
                OP,
                scales.dtype(),
                "float, float16 or bfloat16 scales",
            ));
        }
        let ss = scales.shape();
        let want: Vec<usize> = (0..r)
            .map(|a| {
                if a == quant {
                    shape[a].div_ceil(block)
                } else {
                    shape[a]
                }
            })
            .collect();
        let fits = ss.len() == r
            && (0..r).all(|a| ss[a] == want[a] || (is_float_data && a != quant && ss[a] == 1));
        if !fits {
            return Err(invalid(
                node,
                format!(
                    "scales has shape {ss:?}; want {want:?} (data {shape:?}, quantize_axis \
                     {quant}, block_size {block})"
                ),
            ));
        }
        let cs = onnx_runtime_ir::compute_contiguous_strides(ss);
        let scale_strides: Vec<usize> = (0..r)
            .map(|a| {
                if ss[a] == 1 && shape[a] != 1 {
                    0
                } else {
                    cs[a]
                }
            })
            .collect();
        if let Some(z) = zp {
            if is_float_data {
                return Err(invalid(
                    node,
                    "zero_points must be omitted for float8 / float4 data",
                ));
            }
            if z.dtype() != data.dtype() {
                return Err(invalid(
                    node,
                    format!(
                        "zero_points is {}; it must have data's type {}",
                        z.dtype(),
                        data.dtype()
                    ),
                ));
            }
            let zwant: Vec<usize> = match codes {
                Codes::Packed { bits } => {
                    let mut w = ss.to_vec();
                    let last = w.len() - 1;
                    w[last] = (w[last] * bits).div_ceil(8);
                    w
                }
                _ => ss.to_vec(),
            };
            if z.shape() != zwant.as_slice() {
                return Err(invalid(
                    node,
                    format!("zero_points has shape {:?}; want {zwant:?}", z.shape()),
                ));
            }
        }
        Ok(Layout {
            codes,
            shape,
            gather,
            quant,
            block,
            scale_strides,
            default_zp,
        })
    }

    fn compute(&self, inputs: &[Option<&Value>]) -> Result<Tensor, EpError> {
        let node = &self.node;
        let data = tensor_input(node, inputs, 0)?;
        let indices = tensor_input(node, inputs, 1)?;
        let scales = tensor_input(node, inputs, 2)?;
        let zp = optional_tensor_input(node, inputs, 3)?;
        if !matches!(indices.dtype(), DataType::Int32 | DataType::Int64) {
            return Err(common::unsupported(
                node,
                OP,
                indices.dtype(),
                "int32 or int64 indices",
            ));
        }
        let l = self.layout(data, scales, zp)?;
        let (g, q) = (l.gather, l.quant);
        let dg = l.shape[g];
        let idx: Vec<usize> = indices
            .to_i64_vec()
            .expect("integer indices")
            .into_iter()
            .map(|i| {
                let j = if i < 0 { i + dg as i64 } else { i };
                if j < 0 || j >= dg as i64 {
                    Err(invalid(
                        node,
                        format!(
                            "index {i} is out of range for gather axis {g} of length {dg}; use \
                             -{dg}..{}",
                            dg as i64 - 1
                        ),
                    ))
                } else {
                    Ok(j as usize)
                }
            })
            .collect::<Result<_, _>>()?;
        let outer: usize = l.shape[..g].iter().product();
        let inner: usize = l.shape[g + 1..].iter().product();
        // The scale offset of a data element is the sum of its axes' contributions.
        let axis_off = |a: usize, c: usize| {
            let c = if a == q { c / l.block } else { c };
            c * l.scale_strides[a]
        };
        let offsets = |axes: std::ops::Range<usize>| -> Vec<usize> {
            let dims = &l.shape[axes.clone()];
            let n: usize = dims.iter().product();
            let cs = onnx_runtime_ir::compute_contiguous_strides(dims);
            (0..n)
                .map(|i| {
                    axes.clone()
                        .enumerate()
                        .map(|(k, a)| axis_off(a, (i / cs[k]) % dims[k]))
                        .sum()
                })
                .collect()
        };
        let off_outer = offsets(0..g);
        let off_inner = offsets(g + 1..l.shape.len());
        let sv: Vec<f32> = common::float_vec::<f32>(scales).expect("float scales");
        let s_last = *scales.shape().last().expect("rank >= 1");
        let zp_bytes = zp.map(|z| z.bytes());
        let zero = |sl: usize| -> f32 {
            let Some(zb) = zp_bytes else {
                return l.default_zp;
            };
            match l.codes {
                Codes::Packed { bits } => {
                    let per = 8 / bits;
                    let (row, c) = (sl / s_last, sl % s_last);
                    let bpr = (s_last * bits).div_ceil(8);
                    ((zb[row * bpr + c / per] >> ((c % per) * bits)) & ((1u16 << bits) - 1) as u8)
                        as f32
                }
                _ => l.codes.get(zb, sl),
            }
        };
        let db = data.bytes();
        let n_idx = idx.len();
        let mut out = vec![0f32; outer * n_idx * inner];
        if inner > 0 {
            out.par_chunks_mut(inner)
                .enumerate()
                .for_each(|(row, dst)| {
                    let (o, j) = (row / n_idx.max(1), row % n_idx.max(1));
                    let gi = idx[j];
                    let base = (o * dg + gi) * inner;
                    let soff = off_outer[o] + axis_off(g, gi);
                    for (t, y) in dst.iter_mut().enumerate() {
                        let sl = soff + off_inner[t];
                        let code = l.codes.get(db, base + t);
                        *y = (code - zero(sl)) * sv[sl];
                    }
                });
        }
        let mut shape = l.shape[..g].to_vec();
        shape.extend_from_slice(indices.shape());
        shape.extend_from_slice(&l.shape[g + 1..]);
        Ok(common::tensor_from_f32(scales.dtype(), shape, out))
    }
}

impl CpuKernel for Gbq {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        Ok(vec![Value::Tensor(self.compute(inputs)?)])
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let nd = ctx.node;
    let bits = attrs::int(nd, "bits", 4)?;
    if ![2, 4, 8].contains(&bits) {
        return Err(bad_attr(nd, "bits", format!("{bits} is not 2, 4 or 8")));
    }
    let block = attrs::int(nd, "block_size", 128)?;
    if block != 0 && (block < 16 || !(block as u64).is_power_of_two()) {
        return Err(bad_attr(
            nd,
            "block_size",
            format!("{block} must be a power of two >= 16 (or 0 for float8 / float4 data)"),
        ));
    }
    Ok(Box::new(Gbq {
        node: nd.describe(),
        gather_axis: attrs::int(nd, "gather_axis", 0)?,
        quantize_axis: attrs::int(nd, "quantize_axis", 1)?,
        block: block as usize,
        bits: bits as usize,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("com.microsoft", OP, 1, build);
}
