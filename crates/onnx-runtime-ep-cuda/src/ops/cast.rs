//! Cast between every numeric dtype, bool and the small types (float8 e4m3fn / e4m3fnuz /
//! e5m2 / e5m2fnuz / e8m0, float4 e2m1, packed int4 / uint4 / int2 / uint2), honouring
//! strides. One NVRTC module per output type holds a kernel per input type, so the kernel is
//! ready whatever input dtype arrives at run time; one launch per Cast.
//!
//! Conversions that involve a small type follow the CPU provider's Cast bit for bit
//! (`kernels/small_types.cuh`): round to nearest even, `saturate` (opset 19+, default 1) for
//! the float8 targets, FNUZ formats without negative zero, e8m0 by its `round_mode` (opset
//! 25, default "up"), and floats out of an integer type's range WRAP into the packed integer
//! types (truncated toward zero to 64-bit bits first). Between numeric types and bool the
//! kernels keep `convert<>` (numeric.cuh; float to integer saturates). Packed (4/2-bit)
//! inputs must be dense; packed outputs are written densely, one thread per output byte.
//! Strings stay refused (the CPU provider runs them).

use super::common::*;
use super::params::Strided2;
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    is_contiguous, CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{Attribute, DataType, Node};
use std::collections::HashMap;
use std::sync::Arc;

const SOURCE: &str = concat!(
    include_str!("../kernels/small_types.cuh"),
    include_str!("../kernels/cast.cu")
);

/// The small types: dtype and kernel-name tag (the kernels know their ONNX codes).
pub const SMALL: [(DataType, &str); 10] = [
    (DataType::Float8E4M3FN, "e4m3fn"),
    (DataType::Float8E4M3FNUZ, "e4m3fnuz"),
    (DataType::Float8E5M2, "e5m2"),
    (DataType::Float8E5M2FNUZ, "e5m2fnuz"),
    (DataType::Uint4, "u4"),
    (DataType::Int4, "i4"),
    (DataType::Float4E2M1, "e2m1"),
    (DataType::Float8E8M0, "e8m0"),
    (DataType::Uint2, "u2"),
    (DataType::Int2, "i2"),
];

/// Mode bits of the kernels (mirrored in cast.cu).
const MODE_SATURATE: i32 = 1;
const MODE_DENSE: i32 = 8;

/// Every dtype Cast converts on the device, with its kernel-name tag.
fn all_tags() -> impl Iterator<Item = (DataType, &'static str)> {
    TYPED
        .iter()
        .map(|&(d, tag, _)| (d, tag))
        .chain(SMALL.iter().copied())
}

/// Cast to `to`: one module per output type holding a kernel per input type.
pub fn cast_module(to: DataType) -> Option<ModuleSpec> {
    if let Some((_, tag, ctype)) = TYPED.iter().find(|t| t.0 == to) {
        return Some(
            ModuleSpec::new(format!("cast_to_{tag}"), SOURCE)
                .define("OUT_T", ctype)
                .with_half(),
        );
    }
    let (_, tag) = SMALL.iter().find(|t| t.0 == to)?;
    Some(
        ModuleSpec::new(format!("cast_to_{tag}"), SOURCE)
            .define("CAST_TO", &to.onnx_code().to_string())
            .with_half(),
    )
}

/// Every Cast module variant.
pub fn modules() -> Vec<ModuleSpec> {
    all_tags().filter_map(|(d, _)| cast_module(d)).collect()
}

struct CastKernel {
    base: Base,
    to: DataType,
    from: HashMap<DataType, Function>,
    copy: WidthFns,
    /// `saturate` and the e8m0 round mode as the kernels' mode bits.
    mode: i32,
}

impl CastKernel {
    /// The kernel converting from `x`'s dtype: `None` when the input already has the target
    /// type (a plain copy).
    fn converter(&self, x: &TensorView<'_>) -> EpResult<Option<Function>> {
        let from = x.dtype;
        if from.is_sub_byte() && !is_contiguous(x.shape, x.strides) {
            return Err(self.base.unsupported(
                from,
                "a packed 4/2-bit input of the CUDA Cast must be dense; copy it to a \
                 contiguous tensor first",
            ));
        }
        if from == self.to {
            if !from.is_sub_byte() {
                self.base.width(from)?;
            }
            return Ok(None);
        }
        self.from.get(&from).copied().map(Some).ok_or_else(|| {
            self.base.unsupported(
                from,
                "the CUDA Cast takes numeric types, bool, float8, float4 and 4/2-bit integers",
            )
        })
    }
}

impl Kernel for CastKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        self.converter(x)?;
        Ok(vec![(self.to, x.shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        base.expect_outputs(outputs, &self.output_types(inputs)?)?;
        let x = base.req(inputs, 0)?;
        let out = &outputs[0];
        if self.to.is_sub_byte() && !is_contiguous(out.shape, out.strides) {
            return Err(base.err(format!(
                "a packed {} output must be dense, got strides {:?}",
                self.to, out.strides
            )));
        }
        let n = x.numel();
        let Some(f) = self.converter(x)? else {
            if x.dtype.is_sub_byte() {
                // Same packed type, both dense: the bytes as they are.
                // SAFETY: both views hold storage_bytes(n) bytes.
                return unsafe {
                    base.rt
                        .dtod(ptr_of(x), mut_ptr_of(out), x.dtype.storage_bytes(n))
                };
            }
            let width = base.width(x.dtype)?;
            return copy_strided(
                base,
                &self.copy,
                width,
                ptr_of(x),
                mut_ptr_of(out),
                x.shape,
                &istrides(x.strides),
                &istrides(out.strides),
                0,
                0,
            );
        };
        if n == 0 {
            return Ok(());
        }
        // Packed operands are dense, so their element strides are the contiguous ones.
        let a = if x.dtype.is_sub_byte() {
            contiguous(x.shape)
        } else {
            istrides(x.strides)
        };
        let b = if self.to.is_sub_byte() {
            contiguous(out.shape)
        } else {
            istrides(out.strides)
        };
        let (dims, sa, sb) = coalesce(x.shape, &a, &b);
        base.check_rank(dims.len(), super::params::MAX_DIMS)?;
        let dense = dims.is_empty() || (dims.len() == 1 && sa[0] == 1 && sb[0] == 1);
        let mut p = Strided2 {
            n: n as i64,
            rank: dims.len() as i32,
            ..Default::default()
        };
        p.dims = fill(&dims.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.a = fill(&sa);
        p.b = fill(&sb);
        let mut mode = self.mode | if dense { MODE_DENSE } else { 0 };
        // Packed targets: one thread per output byte.
        let threads = match self.to.bit_width() {
            Some(bits) if bits < 8 => n.div_ceil(8 / bits),
            _ => n,
        };
        let (mut pi, mut po) = (ptr_of(x), mut_ptr_of(out));
        let mut args = [arg(&mut pi), arg(&mut po), arg(&mut p), arg(&mut mode)];
        // SAFETY: cast_from_X(in, out, Strided2, mode) walks inside both views (packed
        // outputs: storage_bytes(n) bytes).
        unsafe { base.rt.launch(f, threads as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

/// Opset 1 spelled `to` as a type name ("FLOAT", "float8e4m3fn", ...).
fn dtype_from_name(name: &str) -> Option<DataType> {
    Some(match name.to_ascii_uppercase().as_str() {
        "FLOAT" => DataType::Float32,
        "DOUBLE" => DataType::Float64,
        "FLOAT16" => DataType::Float16,
        "BFLOAT16" => DataType::BFloat16,
        "INT8" => DataType::Int8,
        "INT16" => DataType::Int16,
        "INT32" => DataType::Int32,
        "INT64" => DataType::Int64,
        "UINT8" => DataType::Uint8,
        "UINT16" => DataType::Uint16,
        "UINT32" => DataType::Uint32,
        "UINT64" => DataType::Uint64,
        "BOOL" => DataType::Bool,
        _ => {
            return DataType::ALL
                .iter()
                .copied()
                .find(|d| d.name().eq_ignore_ascii_case(name))
        }
    })
}

/// The kernels' mode bits from `saturate` (default 1) and `round_mode` (default "up"), read
/// as the CPU provider reads them (whatever the target type; a bad round mode is an error).
fn parse_mode(node: &Node) -> EpResult<i32> {
    let saturate = attr_int(node, "saturate")?.unwrap_or(1) != 0;
    let round = match attr_string(node, "round_mode")?.as_deref().unwrap_or("up") {
        "up" => 0,
        "down" => 1,
        "nearest" => 2,
        other => {
            return Err(EpError::invalid_attribute(
                node,
                "round_mode",
                format!("must be 'up', 'down' or 'nearest', got '{other}'"),
            ))
        }
    };
    Ok(if saturate { MODE_SATURATE } else { 0 } | (round << 1))
}

fn cast(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let to = match node.attribute("to") {
        Some(Attribute::Int(code)) => DataType::from_onnx(*code as i32),
        Some(Attribute::String(name)) => dtype_from_name(name),
        _ => None,
    }
    .filter(|d| *d != DataType::Undefined)
    .ok_or_else(|| EpError::invalid_attribute(node, "to", "missing or not a known dtype"))?;
    cast_kernel_to(rt, node, to)
}

/// A Cast kernel converting input 0 of `node` to `to`, for ops that learn `to` at run time
/// (CastLike: the dtype of its second input). `saturate` and `round_mode` come from `node`.
pub(super) fn cast_kernel_to(
    rt: &Arc<CudaRuntime>,
    node: &Node,
    to: DataType,
) -> EpResult<Box<dyn Kernel>> {
    let mode = parse_mode(node)?;
    let base = Base::new(rt, node);
    let spec = cast_module(to).ok_or_else(|| {
        base.unsupported(
            to,
            "the CUDA Cast produces numeric types, bool, float8, float4 and 4/2-bit integers \
             (not strings or complex types)",
        )
    })?;
    let module = base.module(&spec)?;
    let mut from = HashMap::new();
    for (dtype, tag) in all_tags() {
        from.insert(dtype, module.function(&format!("cast_from_{tag}"))?);
    }
    let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
    Ok(Box::new(CastKernel {
        base,
        to,
        from,
        copy,
        mode,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "Cast", 1, cast);
}
