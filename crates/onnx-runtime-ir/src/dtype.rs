//! Element types, numbered exactly as ONNX's `TensorProto.DataType`.

use std::fmt;

/// An element type. The discriminant is the ONNX `TensorProto.DataType` number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum DataType {
    Undefined = 0,
    Float32 = 1,
    Uint8 = 2,
    Int8 = 3,
    Uint16 = 4,
    Int16 = 5,
    Int32 = 6,
    Int64 = 7,
    String = 8,
    Bool = 9,
    Float16 = 10,
    Float64 = 11,
    Uint32 = 12,
    Uint64 = 13,
    Complex64 = 14,
    Complex128 = 15,
    BFloat16 = 16,
    Float8E4M3FN = 17,
    Float8E4M3FNUZ = 18,
    Float8E5M2 = 19,
    Float8E5M2FNUZ = 20,
    Uint4 = 21,
    Int4 = 22,
    Float4E2M1 = 23,
    Float8E8M0 = 24,
    Uint2 = 25,
    Int2 = 26,
}

impl DataType {
    /// Every defined type, in ONNX numbering order (without `Undefined`).
    pub const ALL: [DataType; 26] = [
        DataType::Float32,
        DataType::Uint8,
        DataType::Int8,
        DataType::Uint16,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::String,
        DataType::Bool,
        DataType::Float16,
        DataType::Float64,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Complex64,
        DataType::Complex128,
        DataType::BFloat16,
        DataType::Float8E4M3FN,
        DataType::Float8E4M3FNUZ,
        DataType::Float8E5M2,
        DataType::Float8E5M2FNUZ,
        DataType::Uint4,
        DataType::Int4,
        DataType::Float4E2M1,
        DataType::Float8E8M0,
        DataType::Uint2,
        DataType::Int2,
    ];

    /// The type with ONNX number `code`, if there is one.
    pub fn from_onnx(code: i32) -> Option<DataType> {
        if code == 0 {
            return Some(DataType::Undefined);
        }
        DataType::ALL.iter().copied().find(|t| *t as i32 == code)
    }

    /// The ONNX `TensorProto.DataType` number.
    pub fn onnx_code(self) -> i32 {
        self as i32
    }

    /// Bits one element occupies in packed storage; `None` for `String` and `Undefined`,
    /// which have no fixed-width storage.
    pub fn bit_width(self) -> Option<usize> {
        use DataType::*;
        Some(match self {
            Undefined | String => return None,
            Int2 | Uint2 => 2,
            Int4 | Uint4 | Float4E2M1 => 4,
            Bool | Uint8 | Int8 | Float8E4M3FN | Float8E4M3FNUZ | Float8E5M2 | Float8E5M2FNUZ
            | Float8E8M0 => 8,
            Uint16 | Int16 | Float16 | BFloat16 => 16,
            Float32 | Int32 | Uint32 => 32,
            Float64 | Int64 | Uint64 | Complex64 => 64,
            Complex128 => 128,
        })
    }

    /// Bytes per element for byte-aligned types; `None` for sub-byte, string and undefined types.
    pub fn element_size(self) -> Option<usize> {
        match self.bit_width()? {
            b if b % 8 == 0 => Some(b / 8),
            _ => None,
        }
    }

    /// Whether elements are packed several to a byte (int4, uint4, float4e2m1, int2, uint2).
    pub fn is_sub_byte(self) -> bool {
        matches!(self.bit_width(), Some(b) if b < 8)
    }

    /// Bytes needed to store `count` elements, packing sub-byte types (rounded up to whole bytes).
    /// Strings have no fixed-width storage and report 0; use [`DataType::checked_storage_bytes`]
    /// where a count may come from untrusted input.
    pub fn storage_bytes(self, count: usize) -> usize {
        self.checked_storage_bytes(count).unwrap_or(0)
    }

    /// Like [`DataType::storage_bytes`], but `None` on overflow or for types without fixed width.
    pub fn checked_storage_bytes(self, count: usize) -> Option<usize> {
        let bits = self.bit_width()?;
        let total = count.checked_mul(bits)?;
        Some(total.div_ceil(8))
    }

    pub fn is_float(self) -> bool {
        use DataType::*;
        matches!(
            self,
            Float32
                | Float64
                | Float16
                | BFloat16
                | Float8E4M3FN
                | Float8E4M3FNUZ
                | Float8E5M2
                | Float8E5M2FNUZ
                | Float8E8M0
                | Float4E2M1
        )
    }

    pub fn is_signed_int(self) -> bool {
        use DataType::*;
        matches!(self, Int8 | Int16 | Int32 | Int64 | Int4 | Int2)
    }

    pub fn is_unsigned_int(self) -> bool {
        use DataType::*;
        matches!(self, Uint8 | Uint16 | Uint32 | Uint64 | Uint4 | Uint2)
    }

    pub fn is_integer(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    pub fn is_complex(self) -> bool {
        matches!(self, DataType::Complex64 | DataType::Complex128)
    }

    /// The lower-case name ONNX uses in type strings, e.g. `float`, `int64`, `float8e4m3fn`.
    pub fn name(self) -> &'static str {
        use DataType::*;
        match self {
            Undefined => "undefined",
            Float32 => "float",
            Uint8 => "uint8",
            Int8 => "int8",
            Uint16 => "uint16",
            Int16 => "int16",
            Int32 => "int32",
            Int64 => "int64",
            String => "string",
            Bool => "bool",
            Float16 => "float16",
            Float64 => "double",
            Uint32 => "uint32",
            Uint64 => "uint64",
            Complex64 => "complex64",
            Complex128 => "complex128",
            BFloat16 => "bfloat16",
            Float8E4M3FN => "float8e4m3fn",
            Float8E4M3FNUZ => "float8e4m3fnuz",
            Float8E5M2 => "float8e5m2",
            Float8E5M2FNUZ => "float8e5m2fnuz",
            Uint4 => "uint4",
            Int4 => "int4",
            Float4E2M1 => "float4e2m1",
            Float8E8M0 => "float8e8m0",
            Uint2 => "uint2",
            Int2 => "int2",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for t in DataType::ALL {
            assert_eq!(DataType::from_onnx(t.onnx_code()), Some(t));
        }
        assert_eq!(DataType::from_onnx(27), None);
        assert_eq!(DataType::from_onnx(-1), None);
    }

    #[test]
    fn storage_packs_sub_byte_types() {
        assert_eq!(DataType::Float32.storage_bytes(3), 12);
        assert_eq!(DataType::Int4.storage_bytes(3), 2);
        assert_eq!(DataType::Uint2.storage_bytes(5), 2);
        assert_eq!(DataType::Float4E2M1.storage_bytes(0), 0);
        assert_eq!(DataType::Complex128.storage_bytes(2), 32);
        assert_eq!(DataType::Bool.storage_bytes(7), 7);
        assert_eq!(DataType::Int64.checked_storage_bytes(usize::MAX), None);
        assert_eq!(DataType::String.checked_storage_bytes(1), None);
    }
}
