//! Host tensors and the values kernels exchange.

use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};
use onnx_runtime_ir::DataType;
use std::sync::Arc;

/// 64 bytes aligned to 64: the unit zero-filled host storage is allocated in, so every element
/// type (and SIMD loads) is aligned.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// The allocation behind [`AlignedBytes`]: 64-byte blocks, or a kernel's own `Vec` of elements
/// kept as the unsigned integer of the same width (so its allocation is reused, not copied, and
/// its alignment is the element type's).
#[derive(Clone)]
enum Buf {
    Blocks(Vec<Block>),
    W8(Vec<u8>),
    W16(Vec<u16>),
    W32(Vec<u32>),
    W64(Vec<u64>),
    /// Memory owned outside the runtime (e.g. a NumPy array), read in place and never written:
    /// a write or a copy-on-write clone copies it into a buffer of the runtime's own first.
    External(External),
}

/// `len` bytes at `ptr`, valid and unchanged while `owner` lives (see [`Tensor::from_external`]).
#[derive(Clone)]
struct External {
    ptr: *const u8,
    _owner: Arc<dyn Send + Sync>,
}

// SAFETY: the bytes are only read, and `Tensor::from_external`'s caller guarantees they stay
// valid and unchanged while the owner (itself Send + Sync) lives.
unsafe impl Send for External {}
unsafe impl Sync for External {}

/// Element bytes, aligned at least to the element type's alignment.
pub struct AlignedBytes {
    buf: Buf,
    len: usize,
}

impl Clone for AlignedBytes {
    /// External memory is copied (so a clone made to be written, as `Arc::make_mut` does,
    /// never writes the owner's memory); the runtime's own buffers are cloned as they are.
    fn clone(&self) -> Self {
        match &self.buf {
            Buf::External(_) => Self::from_slice(self.as_slice()),
            buf => AlignedBytes {
                buf: buf.clone(),
                len: self.len,
            },
        }
    }
}

impl AlignedBytes {
    /// `len` zero bytes aligned to 64.
    pub fn zeroed(len: usize) -> Self {
        AlignedBytes {
            buf: Buf::Blocks(vec![Block::zeroed(); len.div_ceil(64)]),
            len,
        }
    }

    pub fn from_slice(bytes: &[u8]) -> Self {
        let mut out = Self::zeroed(bytes.len());
        out.as_mut_slice().copy_from_slice(bytes);
        out
    }

    /// Takes over `values`' allocation without copying.
    pub fn from_vec<T: Element>(values: Vec<T>) -> Self {
        let len = std::mem::size_of_val(values.as_slice());
        // Element types are 1, 2, 4 or 8 bytes wide with alignment equal to their width, so the
        // cast to the unsigned integer of that width keeps size and alignment and cannot fail.
        let buf = match std::mem::size_of::<T>() {
            1 => bytemuck::allocation::try_cast_vec(values).map(Buf::W8),
            2 => bytemuck::allocation::try_cast_vec(values).map(Buf::W16),
            4 => bytemuck::allocation::try_cast_vec(values).map(Buf::W32),
            8 => bytemuck::allocation::try_cast_vec(values).map(Buf::W64),
            _ => Err((bytemuck::PodCastError::SizeMismatch, values)),
        };
        match buf {
            Ok(buf) => AlignedBytes { buf, len },
            Err((_, values)) => Self::from_slice(bytemuck::cast_slice(&values)),
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        let bytes: &[u8] = match &self.buf {
            Buf::Blocks(v) => bytemuck::cast_slice(v),
            Buf::W8(v) => v,
            Buf::W16(v) => bytemuck::cast_slice(v),
            Buf::W32(v) => bytemuck::cast_slice(v),
            Buf::W64(v) => bytemuck::cast_slice(v),
            // SAFETY: `Tensor::from_external`'s caller guarantees `len` readable bytes at `ptr`
            // while the owner, which this buffer holds, lives.
            Buf::External(e) => unsafe { std::slice::from_raw_parts(e.ptr, self.len) },
        };
        &bytes[..self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if matches!(self.buf, Buf::External(_)) {
            *self = Self::from_slice(self.as_slice());
        }
        let bytes: &mut [u8] = match &mut self.buf {
            Buf::Blocks(v) => bytemuck::cast_slice_mut(v),
            Buf::W8(v) => v,
            Buf::W16(v) => bytemuck::cast_slice_mut(v),
            Buf::W32(v) => bytemuck::cast_slice_mut(v),
            Buf::W64(v) => bytemuck::cast_slice_mut(v),
            Buf::External(_) => unreachable!("copied above"),
        };
        &mut bytes[..self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What a tensor's elements are stored in.
#[derive(Clone)]
pub enum Storage {
    /// Little-endian packed elements (sub-byte types packed two or four to a byte).
    Bytes(AlignedBytes),
    Strings(Vec<String>),
}

/// A Rust type that is the storage of an ONNX element type. `bool` is stored as `u8` (0 or 1).
pub trait Element: Pod + Send + Sync + std::fmt::Debug + PartialEq + Default {
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t { const DTYPE: DataType = DataType::$d; })*
    };
}
element!(
    f32 => Float32, f64 => Float64, f16 => Float16, bf16 => BFloat16,
    i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64,
);

/// A contiguous row-major host tensor. Cloning shares the storage; writing through
/// [`Tensor::data_mut`] copies it first if it is shared.
#[derive(Clone)]
pub struct Tensor {
    dtype: DataType,
    shape: Vec<usize>,
    storage: Arc<Storage>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({} {:?})", self.dtype, self.shape)
    }
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl Tensor {
    /// A zero-filled tensor (empty strings for `String`).
    pub fn zeros(dtype: DataType, shape: Vec<usize>) -> Tensor {
        let n = numel(&shape);
        let storage = if dtype == DataType::String {
            Storage::Strings(vec![String::new(); n])
        } else {
            Storage::Bytes(AlignedBytes::zeroed(dtype.storage_bytes(n)))
        };
        Tensor {
            dtype,
            shape,
            storage: Arc::new(storage),
        }
    }

    /// A tensor over little-endian packed bytes. Errors if the length does not match.
    pub fn from_bytes(dtype: DataType, shape: Vec<usize>, bytes: &[u8]) -> Result<Tensor, String> {
        let n = numel(&shape);
        let want = dtype
            .checked_storage_bytes(n)
            .ok_or_else(|| format!("{dtype} tensor of shape {shape:?} has no byte storage"))?;
        if bytes.len() != want {
            return Err(format!(
                "{dtype} tensor of shape {shape:?} needs {want} bytes, got {}",
                bytes.len()
            ));
        }
        Ok(Tensor {
            dtype,
            shape,
            storage: Arc::new(Storage::Bytes(AlignedBytes::from_slice(bytes))),
        })
    }

    /// A tensor that reads `len` bytes at `ptr` in place (no copy), e.g. a NumPy array's
    /// memory; `owner` keeps that memory alive and is dropped with the last clone of the
    /// tensor. Writes (and copy-on-write clones) copy the bytes first, so the memory is never
    /// written. Errors if `len` does not match the shape or `ptr` is not aligned to the
    /// element width (8 bytes for the complex types).
    ///
    /// # Safety
    ///
    /// `ptr` must point to `len` readable bytes that stay valid, and are not written, while
    /// `owner` lives.
    pub unsafe fn from_external(
        dtype: DataType,
        shape: Vec<usize>,
        ptr: *const u8,
        len: usize,
        owner: Arc<dyn Send + Sync>,
    ) -> Result<Tensor, String> {
        let n = numel(&shape);
        let want = dtype
            .checked_storage_bytes(n)
            .ok_or_else(|| format!("{dtype} tensor of shape {shape:?} has no byte storage"))?;
        if len != want {
            return Err(format!(
                "{dtype} tensor of shape {shape:?} needs {want} bytes, got {len}"
            ));
        }
        // Complex elements are pairs of floats: aligned to the float, as NumPy aligns them.
        let align = dtype.element_size().unwrap_or(1).min(8);
        if len > 0 && (ptr.is_null() || !(ptr as usize).is_multiple_of(align)) {
            return Err(format!(
                "{dtype} tensor memory at {ptr:?} is not aligned to {align} bytes"
            ));
        }
        let buf = if len == 0 {
            Buf::Blocks(Vec::new())
        } else {
            Buf::External(External { ptr, _owner: owner })
        };
        Ok(Tensor {
            dtype,
            shape,
            storage: Arc::new(Storage::Bytes(AlignedBytes { buf, len })),
        })
    }

    /// A tensor of `T::DTYPE` that takes over `values`' allocation (no copy). Panics if the
    /// count does not match the shape.
    pub fn from_vec<T: Element>(shape: Vec<usize>, values: Vec<T>) -> Tensor {
        assert_eq!(
            numel(&shape),
            values.len(),
            "element count must match the shape"
        );
        Tensor {
            dtype: T::DTYPE,
            shape,
            storage: Arc::new(Storage::Bytes(AlignedBytes::from_vec(values))),
        }
    }

    /// A tensor of `T::DTYPE` holding `values`. Panics if the count does not match the shape.
    pub fn from_slice<T: Element>(shape: Vec<usize>, values: &[T]) -> Tensor {
        assert_eq!(
            numel(&shape),
            values.len(),
            "element count must match the shape"
        );
        Tensor {
            dtype: T::DTYPE,
            shape,
            storage: Arc::new(Storage::Bytes(AlignedBytes::from_slice(
                bytemuck::cast_slice(values),
            ))),
        }
    }

    pub fn from_bools(shape: Vec<usize>, values: &[bool]) -> Tensor {
        let bytes: Vec<u8> = values.iter().map(|&b| b as u8).collect();
        let mut t = Tensor::from_vec(shape, bytes);
        t.dtype = DataType::Bool;
        t
    }

    pub fn from_strings(shape: Vec<usize>, values: Vec<String>) -> Tensor {
        assert_eq!(
            numel(&shape),
            values.len(),
            "element count must match the shape"
        );
        Tensor {
            dtype: DataType::String,
            shape,
            storage: Arc::new(Storage::Strings(values)),
        }
    }

    /// A host tensor from IR tensor data (an initializer or a tensor attribute).
    pub fn from_tensor_data(data: &onnx_runtime_ir::TensorData) -> Result<Tensor, String> {
        match data.strings() {
            Some(strings) => {
                if strings.len() != data.numel() {
                    return Err(format!(
                        "string tensor '{}' of shape {:?} has {} strings",
                        data.name,
                        data.shape,
                        strings.len()
                    ));
                }
                Ok(Tensor::from_strings(data.shape.clone(), strings.to_vec()))
            }
            None => Tensor::from_bytes(data.dtype, data.shape.clone(), data.bytes())
                .map_err(|e| format!("tensor '{}': {e}", data.name)),
        }
    }

    /// IR tensor data holding a copy of this tensor's elements.
    pub fn to_tensor_data(&self, name: &str) -> onnx_runtime_ir::TensorData {
        let mut t = if self.dtype == DataType::String {
            onnx_runtime_ir::TensorData::from_strings(self.shape.clone(), self.strings().to_vec())
        } else {
            onnx_runtime_ir::TensorData::from_bytes(
                self.dtype,
                self.shape.clone(),
                self.bytes().to_vec(),
            )
        };
        t.name = name.to_string();
        t
    }

    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::from_slice(vec![], &[value])
    }

    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// The same storage under another shape with the same element count.
    pub fn reshaped(&self, shape: Vec<usize>) -> Tensor {
        assert_eq!(
            numel(&shape),
            self.numel(),
            "reshape must keep the element count"
        );
        Tensor {
            dtype: self.dtype,
            shape,
            storage: self.storage.clone(),
        }
    }

    /// The same bytes reinterpreted as another type of equal width (e.g. bool as uint8).
    pub fn with_dtype(&self, dtype: DataType) -> Tensor {
        assert_eq!(
            dtype.bit_width(),
            self.dtype.bit_width(),
            "retyping must keep the width"
        );
        Tensor {
            dtype,
            shape: self.shape.clone(),
            storage: self.storage.clone(),
        }
    }

    /// The packed bytes (empty for strings).
    pub fn bytes(&self) -> &[u8] {
        match self.storage.as_ref() {
            Storage::Bytes(b) => b.as_slice(),
            Storage::Strings(_) => &[],
        }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match Arc::make_mut(&mut self.storage) {
            Storage::Bytes(b) => b.as_mut_slice(),
            Storage::Strings(_) => &mut [],
        }
    }

    /// The elements as `T`. Panics if `T`'s width differs from the dtype's (a kernel bug:
    /// kernels dispatch on the dtype first).
    pub fn data<T: Element>(&self) -> &[T] {
        assert_eq!(
            Some(std::mem::size_of::<T>() * 8),
            self.dtype.bit_width(),
            "element type does not match {}",
            self.dtype
        );
        bytemuck::cast_slice(self.bytes())
    }

    pub fn data_mut<T: Element>(&mut self) -> &mut [T] {
        assert_eq!(
            Some(std::mem::size_of::<T>() * 8),
            self.dtype.bit_width(),
            "element type does not match {}",
            self.dtype
        );
        bytemuck::cast_slice_mut(self.bytes_mut())
    }

    pub fn strings(&self) -> &[String] {
        match self.storage.as_ref() {
            Storage::Strings(s) => s,
            Storage::Bytes(_) => &[],
        }
    }

    pub fn strings_mut(&mut self) -> &mut [String] {
        match Arc::make_mut(&mut self.storage) {
            Storage::Strings(s) => s,
            Storage::Bytes(_) => &mut [],
        }
    }

    /// Integer elements widened to i64 (int8..int64, uint8..uint64, bool); `None` otherwise.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        use DataType::*;
        Some(match self.dtype {
            Int64 => self.data::<i64>().to_vec(),
            Int32 => self.data::<i32>().iter().map(|&v| v as i64).collect(),
            Int16 => self.data::<i16>().iter().map(|&v| v as i64).collect(),
            Int8 => self.data::<i8>().iter().map(|&v| v as i64).collect(),
            Uint8 | Bool => self.data::<u8>().iter().map(|&v| v as i64).collect(),
            Uint16 => self.data::<u16>().iter().map(|&v| v as i64).collect(),
            Uint32 => self.data::<u32>().iter().map(|&v| v as i64).collect(),
            Uint64 => self.data::<u64>().iter().map(|&v| v as i64).collect(),
            _ => return None,
        })
    }

    /// Float elements widened to f64 (float types and integers); `None` for others.
    pub fn to_f64_vec(&self) -> Option<Vec<f64>> {
        use DataType::*;
        Some(match self.dtype {
            Float32 => self.data::<f32>().iter().map(|&v| v as f64).collect(),
            Float64 => self.data::<f64>().to_vec(),
            Float16 => self.data::<f16>().iter().map(|v| v.to_f64()).collect(),
            BFloat16 => self.data::<bf16>().iter().map(|v| v.to_f64()).collect(),
            _ => {
                return self
                    .to_i64_vec()
                    .map(|v| v.into_iter().map(|x| x as f64).collect())
            }
        })
    }
}

/// A value flowing between kernels.
#[derive(Clone, Debug)]
pub enum Value {
    Tensor(Tensor),
    /// A sequence of tensors of one element type (kept for empty sequences).
    Sequence {
        dtype: DataType,
        items: Vec<Tensor>,
    },
    /// An optional: `None` is an absent value.
    Optional(Option<Box<Value>>),
    /// A map (ai.onnx.ml): keys tensor (1-D) and values tensor (1-D), same length.
    Map {
        keys: Tensor,
        values: Tensor,
    },
    /// A sequence of maps (ai.onnx.ml ZipMap's output): per map, keys (1-D int64 or string)
    /// and values (1-D) of equal length.
    MapSequence(Vec<(Tensor, Tensor)>),
}

impl Value {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "tensor",
            Value::Sequence { .. } => "sequence",
            Value::Optional(_) => "optional",
            Value::Map { .. } => "map",
            Value::MapSequence(_) => "sequence of maps",
        }
    }

    /// The (keys, values) of each map of a sequence of maps.
    pub fn as_map_sequence(&self) -> Option<&[(Tensor, Tensor)]> {
        match self {
            Value::MapSequence(maps) => Some(maps),
            _ => None,
        }
    }

    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    pub fn into_tensor(self) -> Option<Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Self {
        Value::Tensor(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_vec_takes_the_allocation() {
        let v: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let ptr = v.as_ptr() as *const u8;
        let t = Tensor::from_vec(vec![10, 100], v);
        assert_eq!(t.bytes().as_ptr(), ptr, "no copy");
        assert_eq!(t.data::<f32>()[999], 499.5);
        // Same-width retyping and writes through a shared copy keep working.
        let h: Vec<f16> = vec![f16::from_f32(1.5); 3];
        let mut a = Tensor::from_vec(vec![3], h).with_dtype(DataType::Uint16);
        let b = a.clone();
        a.data_mut::<u16>()[0] = 0;
        assert_eq!(a.data::<u16>()[0], 0);
        assert_eq!(b.data::<u16>()[0], f16::from_f32(1.5).to_bits());
        let e = Tensor::from_vec::<i64>(vec![0, 4], Vec::new());
        assert!(e.data::<i64>().is_empty());
        let mut bools = Tensor::from_bools(vec![2], &[true, false]);
        assert_eq!(bools.bytes(), &[1, 0]);
        bools.bytes_mut()[1] = 1;
        assert_eq!(bools.bytes(), &[1, 1]);
    }

    #[test]
    fn external_memory_is_read_in_place_and_never_written() {
        let owner: Arc<Vec<f32>> = Arc::new(vec![1.0, 2.0, 3.0]);
        let ptr = owner.as_ptr() as *const u8;
        // SAFETY: `owner` holds the 12 bytes and nothing writes them.
        let t =
            unsafe { Tensor::from_external(DataType::Float32, vec![3], ptr, 12, owner.clone()) }
                .unwrap();
        assert_eq!(t.bytes().as_ptr(), ptr, "no copy");
        let mut u = t.clone();
        u.data_mut::<f32>()[0] = 9.0;
        let mut only = t.reshaped(vec![1, 3]);
        drop(t);
        only.data_mut::<f32>()[1] = 8.0;
        assert_eq!(
            owner.as_slice(),
            &[1.0, 2.0, 3.0],
            "the owner's memory is untouched"
        );
        assert_eq!(u.data::<f32>(), &[9.0, 2.0, 3.0]);
        assert_eq!(only.data::<f32>(), &[1.0, 8.0, 3.0]);
        // SAFETY: as above (the checks fail before anything is read).
        unsafe {
            assert!(
                Tensor::from_external(DataType::Float32, vec![2], ptr, 12, owner.clone()).is_err()
            );
            assert!(Tensor::from_external(
                DataType::Float32,
                vec![2],
                ptr.add(1),
                8,
                owner.clone()
            )
            .is_err());
        }
    }

    #[test]
    fn typed_access_and_sharing() {
        let a = Tensor::from_vec(vec![2, 2], vec![1.0f32, 2., 3., 4.]);
        let mut b = a.clone();
        b.data_mut::<f32>()[0] = 9.0;
        assert_eq!(a.data::<f32>(), &[1., 2., 3., 4.]);
        assert_eq!(b.data::<f32>(), &[9., 2., 3., 4.]);
        assert_eq!(b.reshaped(vec![4]).shape(), &[4]);
        assert!(Tensor::from_bytes(DataType::Float32, vec![2], &[0; 7]).is_err());
        let z = Tensor::zeros(DataType::Int4, vec![3]);
        assert_eq!(z.bytes().len(), 2);
    }
}
