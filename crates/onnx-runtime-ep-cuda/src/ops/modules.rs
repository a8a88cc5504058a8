//! The compile units (NVRTC modules) the kernels use, and the list of every variant.

use crate::compiler::ModuleSpec;
use onnx_runtime_ir::DataType;

/// Movement by element width: strided copy, Where, Pad, fill, Trilu, int64 writes.
pub fn copy_module() -> ModuleSpec {
    ModuleSpec::new("copy", include_str!("../kernels/copy.cu"))
}

/// Gathers and scatters (no reduction) by element width and index type.
pub fn index_module() -> ModuleSpec {
    ModuleSpec::new("index", include_str!("../kernels/index.cu"))
}

/// Scatters with a reduction, typed.
pub fn scatter_reduce_module() -> ModuleSpec {
    ModuleSpec::new(
        "scatter_reduce",
        include_str!("../kernels/scatter_reduce.cu"),
    )
    .with_half()
}

pub fn cumsum_module() -> ModuleSpec {
    ModuleSpec::new("cumsum", include_str!("../kernels/cumsum.cu")).with_half()
}

/// Range and OneHot.
pub fn construct_module() -> ModuleSpec {
    ModuleSpec::new("construct", include_str!("../kernels/construct.cu")).with_half()
}

/// The dtypes the typed kernels are instantiated for, with their kernel-name tag and C type.
pub const TYPED: [(DataType, &str, &str); 13] = [
    (DataType::Float32, "f32", "float"),
    (DataType::Float64, "f64", "double"),
    (DataType::Float16, "f16", "f16"),
    (DataType::BFloat16, "bf16", "bf16"),
    (DataType::Int8, "i8", "signed char"),
    (DataType::Int16, "i16", "short"),
    (DataType::Int32, "i32", "int"),
    (DataType::Int64, "i64", "long long"),
    (DataType::Uint8, "u8", "unsigned char"),
    (DataType::Uint16, "u16", "unsigned short"),
    (DataType::Uint32, "u32", "unsigned int"),
    (DataType::Uint64, "u64", "unsigned long long"),
    (DataType::Bool, "bool", "bool"),
];

/// The kernel-name tag of a typed dtype (`f32`, `bf16`, ...).
pub fn type_tag(dtype: DataType) -> Option<&'static str> {
    TYPED.iter().find(|t| t.0 == dtype).map(|t| t.1)
}

/// Cast to `to`: one module per output type holding a kernel per input type (numeric types,
/// bool and the small float8 / float4 / 4- and 2-bit types; see `ops/cast.rs`).
pub fn cast_module(to: DataType) -> Option<ModuleSpec> {
    super::cast::cast_module(to)
}

/// Every module variant the provider can compile (the NVRTC test compiles them all).
pub fn all_modules() -> Vec<ModuleSpec> {
    let mut all = vec![
        copy_module(),
        index_module(),
        scatter_reduce_module(),
        cumsum_module(),
        construct_module(),
    ];
    all.extend(super::cast::modules());
    all.extend(super::family_modules());
    all
}
