//! One shared dtype-dispatch mechanism: a generic body instantiated per element type.
//!
//! ```text
//! dispatch_float!(t.dtype(), T => { compute::<T>(t) }, other => Err(unsupported(other)))
//! ```

/// Float types: f32, f64, f16, bf16.
#[macro_export]
macro_rules! dispatch_float {
    ($dtype:expr, $T:ident => $body:expr, $other:pat => $fallback:expr) => {{
        use onnx_runtime_ir::DataType as __D;
        match $dtype {
            __D::Float32 => {
                type $T = f32;
                $body
            }
            __D::Float64 => {
                type $T = f64;
                $body
            }
            __D::Float16 => {
                type $T = half::f16;
                $body
            }
            __D::BFloat16 => {
                type $T = half::bf16;
                $body
            }
            $other => $fallback,
        }
    }};
}

/// Integer types stored natively: int8..int64, uint8..uint64.
#[macro_export]
macro_rules! dispatch_int {
    ($dtype:expr, $T:ident => $body:expr, $other:pat => $fallback:expr) => {{
        use onnx_runtime_ir::DataType as __D;
        match $dtype {
            __D::Int8 => {
                type $T = i8;
                $body
            }
            __D::Int16 => {
                type $T = i16;
                $body
            }
            __D::Int32 => {
                type $T = i32;
                $body
            }
            __D::Int64 => {
                type $T = i64;
                $body
            }
            __D::Uint8 => {
                type $T = u8;
                $body
            }
            __D::Uint16 => {
                type $T = u16;
                $body
            }
            __D::Uint32 => {
                type $T = u32;
                $body
            }
            __D::Uint64 => {
                type $T = u64;
                $body
            }
            $other => $fallback,
        }
    }};
}

/// Every numeric type: floats then integers.
#[macro_export]
macro_rules! dispatch_numeric {
    ($dtype:expr, $T:ident => $body:expr, $other:pat => $fallback:expr) => {{
        $crate::dispatch_float!($dtype, $T => $body, __o => {
            $crate::dispatch_int!(__o, $T => $body, $other => $fallback)
        })
    }};
}

/// By element width, for ops that only move data: u8, u16, u32, u64. Bool, float8 and the
/// like move as their width's unsigned type; complex128, strings and sub-byte types take the
/// fallback (`ops::tensor::common::with_elem` also covers those).
#[macro_export]
macro_rules! dispatch_width {
    ($dtype:expr, $T:ident => $body:expr, $other:pat => $fallback:expr) => {{
        match $dtype.bit_width() {
            Some(8) => {
                type $T = u8;
                $body
            }
            Some(16) => {
                type $T = u16;
                $body
            }
            Some(32) => {
                type $T = u32;
                $body
            }
            Some(64) => {
                type $T = u64;
                $body
            }
            $other => $fallback,
        }
    }};
}
