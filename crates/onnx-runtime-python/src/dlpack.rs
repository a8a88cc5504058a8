//! DLPack: the C structs of the DLPack exchange format (written here from the published
//! layout, versions 0.x and 1.x), the capsules that carry them through Python, and the
//! conversion between a DLPack tensor and this runtime's host tensors and device values.
//!
//! Export: a capsule named `dltensor` (or `dltensor_versioned` when the consumer asks for
//! `max_version >= (1, 0)`) holding a `DLManagedTensor[Versioned]` whose `manager_ctx` keeps
//! the runtime's tensor alive. A consumer renames the capsule `used_dltensor[_versioned]` and
//! calls the deleter when it is done; a capsule nobody consumed calls it from its destructor.
//!
//! Import: the capsule is checked (name, version, device, dtype, layout) before anything is
//! taken from it, so a refused capsule still frees itself; once accepted it is renamed and the
//! runtime calls the producer's deleter when its last reference to the memory goes.

use onnx_runtime_ep_api::{DeviceKind, ExecutionProvider};
use onnx_runtime_ep_cpu::Tensor;
use onnx_runtime_ir::DataType;
use onnx_runtime_session::DeviceValue;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_void, CStr};
use std::sync::Arc;

pub const KDL_CPU: i32 = 1;
pub const KDL_CUDA: i32 = 2;
const FLAG_READ_ONLY: u64 = 1;

const NAME: &CStr = c"dltensor";
const USED_NAME: &CStr = c"used_dltensor";
const NAME_V: &CStr = c"dltensor_versioned";
const USED_NAME_V: &CStr = c"used_dltensor_versioned";

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    /// In elements; null means compact row-major.
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

// DLPack type codes (dlpack.h's DLDataTypeCode).
const INT: u8 = 0;
const UINT: u8 = 1;
const FLOAT: u8 = 2;
const BFLOAT: u8 = 4;
const COMPLEX: u8 = 5;
const BOOL: u8 = 6;
const F8_E4M3FN: u8 = 10;
const F8_E4M3FNUZ: u8 = 11;
const F8_E5M2: u8 = 12;
const F8_E5M2FNUZ: u8 = 13;
const F8_E8M0FNU: u8 = 14;

fn dl_dtype(dtype: DataType) -> Option<DLDataType> {
    use DataType as D;
    let (code, bits) = match dtype {
        D::Int8 => (INT, 8),
        D::Int16 => (INT, 16),
        D::Int32 => (INT, 32),
        D::Int64 => (INT, 64),
        D::Uint8 => (UINT, 8),
        D::Uint16 => (UINT, 16),
        D::Uint32 => (UINT, 32),
        D::Uint64 => (UINT, 64),
        D::Float16 => (FLOAT, 16),
        D::Float32 => (FLOAT, 32),
        D::Float64 => (FLOAT, 64),
        D::BFloat16 => (BFLOAT, 16),
        D::Complex64 => (COMPLEX, 64),
        D::Complex128 => (COMPLEX, 128),
        D::Bool => (BOOL, 8),
        D::Float8E4M3FN => (F8_E4M3FN, 8),
        D::Float8E4M3FNUZ => (F8_E4M3FNUZ, 8),
        D::Float8E5M2 => (F8_E5M2, 8),
        D::Float8E5M2FNUZ => (F8_E5M2FNUZ, 8),
        D::Float8E8M0 => (F8_E8M0FNU, 8),
        _ => return None,
    };
    Some(DLDataType {
        code,
        bits,
        lanes: 1,
    })
}

fn from_dl_dtype(t: DLDataType) -> PyResult<DataType> {
    let found = DataType::ALL
        .iter()
        .copied()
        .find(|d| dl_dtype(*d).is_some_and(|x| x.code == t.code && x.bits == t.bits));
    match found {
        Some(d) if t.lanes == 1 => Ok(d),
        Some(_) => Err(PyTypeError::new_err(format!(
            "DLPack tensors of vector elements ({} lanes) are not supported",
            t.lanes
        ))),
        None => Err(PyTypeError::new_err(format!(
            "DLPack element type (code {}, {} bits) has no ONNX element type here",
            t.code, t.bits
        ))),
    }
}

/// What a capsule carries: the runtime's value, kept alive until the consumer's deleter.
pub enum Exported {
    Host(Tensor),
    Device(DeviceValue),
}

struct ExportCtx {
    _value: Exported,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

/// Drops an export's context attached to the interpreter, so the NumPy array a host tensor
/// may hold is released now rather than at PyO3's next call (consumers may call a deleter
/// from any thread, with or without the GIL). After the interpreter is gone it is leaked.
///
/// # Safety
/// `ctx` is an `ExportCtx` made by `export`, dropped once.
unsafe fn drop_ctx(ctx: *mut c_void) {
    // SAFETY: the caller's promise.
    let ctx = unsafe { Box::from_raw(ctx as *mut ExportCtx) };
    // SAFETY: Py_IsInitialized may be called at any time.
    if unsafe { ffi::Py_IsInitialized() } != 0 {
        Python::attach(|_| drop(ctx));
    } else {
        std::mem::forget(ctx);
    }
}

unsafe extern "C" fn delete_managed(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its context were made by `export` with Box::into_raw and are freed once.
    unsafe {
        let m = Box::from_raw(m);
        drop_ctx(m.manager_ctx);
    }
}

unsafe extern "C" fn delete_managed_v(m: *mut DLManagedTensorVersioned) {
    if m.is_null() {
        return;
    }
    // SAFETY: as in `delete_managed`.
    unsafe {
        let m = Box::from_raw(m);
        drop_ctx(m.manager_ctx);
    }
}

/// A capsule's destructor: frees the tensor unless a consumer took it (renamed the capsule).
unsafe extern "C" fn capsule_destructor(cap: *mut ffi::PyObject) {
    // SAFETY: `cap` is the capsule being destroyed; IsValid sets no error on a mismatch.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, NAME.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(cap, NAME.as_ptr()) as *mut DLManagedTensor;
            if let Some(d) = (*m).deleter {
                d(m);
            }
        } else if ffi::PyCapsule_IsValid(cap, NAME_V.as_ptr()) == 1 {
            let m =
                ffi::PyCapsule_GetPointer(cap, NAME_V.as_ptr()) as *mut DLManagedTensorVersioned;
            if let Some(d) = (*m).deleter {
                d(m);
            }
        }
    }
}

/// A DLPack capsule sharing `value`'s memory (no copy); `versioned` makes a
/// `DLManagedTensorVersioned` (DLPack 1.0) capsule. Device values are synchronized first, so
/// the bytes are final on any consumer stream.
pub fn export(py: Python<'_>, value: Exported, versioned: bool) -> PyResult<Py<PyAny>> {
    let (dtype, shape, data, device) = match &value {
        Exported::Host(t) => (
            t.dtype(),
            t.shape().to_vec(),
            t.bytes().as_ptr() as *mut c_void,
            DLDevice {
                device_type: KDL_CPU,
                device_id: 0,
            },
        ),
        Exported::Device(d) => {
            d.synchronize().map_err(|e| {
                crate::error(
                    crate::Code::EpFail,
                    format!("device error before export: {e}"),
                )
            })?;
            let id = d.device_id();
            if id.kind != DeviceKind::Cuda {
                return Err(PyBufferError::new_err(format!(
                    "values on {id} cannot be exported by DLPack"
                )));
            }
            (
                d.dtype(),
                d.shape().to_vec(),
                d.data_ptr() as *mut c_void,
                DLDevice {
                    device_type: KDL_CUDA,
                    device_id: id.ordinal as i32,
                },
            )
        }
    };
    let dl = dl_dtype(dtype).ok_or_else(|| {
        PyBufferError::new_err(format!(
            "a tensor(...) of element type {dtype} has no DLPack element type (strings and \
             sub-byte types cannot be exported)"
        ))
    })?;
    let shape: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    let mut ctx = Box::new(ExportCtx {
        _value: value,
        shape,
        strides,
    });
    let tensor = DLTensor {
        data,
        device,
        ndim: ctx.shape.len() as i32,
        dtype: dl,
        shape: ctx.shape.as_mut_ptr(),
        strides: ctx.strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let ctx = Box::into_raw(ctx) as *mut c_void;
    let (ptr, name) = if versioned {
        let m = Box::new(DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: ctx,
            deleter: Some(delete_managed_v),
            flags: 0,
            dl_tensor: tensor,
        });
        (Box::into_raw(m) as *mut c_void, NAME_V)
    } else {
        let m = Box::new(DLManagedTensor {
            dl_tensor: tensor,
            manager_ctx: ctx,
            deleter: Some(delete_managed),
        });
        (Box::into_raw(m) as *mut c_void, NAME)
    };
    // SAFETY: `ptr` is a managed tensor of the kind `name` says; the destructor frees it unless
    // a consumer renames the capsule.
    let cap = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(capsule_destructor)) };
    if cap.is_null() {
        // SAFETY: the capsule was not made, so nothing else frees the tensor.
        unsafe {
            if versioned {
                delete_managed_v(ptr as *mut DLManagedTensorVersioned)
            } else {
                delete_managed(ptr as *mut DLManagedTensor)
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: PyCapsule_New returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) }.unbind())
}

/// A consumed DLPack tensor: calls the producer's deleter when the runtime lets go of it.
struct Producer {
    managed: *mut c_void,
    versioned: bool,
}

// SAFETY: DLPack deleters may be called from any thread (producers that need the GIL take
// it, as NumPy's does); the pointer is only used to call the deleter, once.
unsafe impl Send for Producer {}
unsafe impl Sync for Producer {}

impl Drop for Producer {
    fn drop(&mut self) {
        // SAFETY: the consumer owns the managed tensor (the capsule was renamed) and calls its
        // deleter exactly once, here.
        unsafe {
            if self.versioned {
                let m = self.managed as *mut DLManagedTensorVersioned;
                if let Some(d) = (*m).deleter {
                    d(m)
                }
            } else {
                let m = self.managed as *mut DLManagedTensor;
                if let Some(d) = (*m).deleter {
                    d(m)
                }
            }
        }
    }
}

/// A value made from a DLPack capsule.
pub enum Imported {
    Host(Tensor),
    Device(DeviceValue),
}

/// What [`import`] took: the value, and whether the producer marked it read-only (a run
/// must not write its outputs there).
pub struct Import {
    pub value: Imported,
    pub read_only: bool,
}

/// Whether `strides` (in elements) describe the compact row-major layout of `shape`.
fn compact(shape: &[usize], strides: &[i64]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut want = 1i64;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        if n != 1 && s != want {
            return false;
        }
        want *= n as i64;
    }
    true
}

/// Copies a strided host tensor (strides in elements, possibly negative) to compact bytes.
///
/// # Safety
/// `base` must address every element the shape and strides reach, `width` bytes each.
unsafe fn gather(base: *const u8, shape: &[usize], strides: &[i64], width: usize) -> Vec<u8> {
    let numel: usize = shape.iter().product();
    let mut out = Vec::with_capacity(numel * width);
    let mut index = vec![0usize; shape.len()];
    for _ in 0..numel {
        let offset: i64 = index.iter().zip(strides).map(|(&i, &s)| i as i64 * s).sum();
        // SAFETY: the caller guarantees the element at this offset.
        let src = unsafe { base.offset(offset as isize * width as isize) };
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(src, width) });
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

/// Takes the tensor a DLPack capsule carries. CPU tensors are read in place when compact
/// (strided ones are copied to compact row-major); CUDA tensors become a device value on
/// `cuda(ordinal)`'s provider without a copy (compact ones only). Refused capsules are left
/// untouched (their destructor frees them).
pub fn import(
    capsule: &Bound<'_, PyAny>,
    cuda: impl FnOnce(u32) -> PyResult<Arc<dyn ExecutionProvider>>,
) -> PyResult<Import> {
    let cap = capsule.as_ptr();
    // SAFETY: IsValid accepts any object and sets no error.
    let (versioned, managed) = unsafe {
        if ffi::PyCapsule_IsValid(cap, NAME_V.as_ptr()) == 1 {
            (true, ffi::PyCapsule_GetPointer(cap, NAME_V.as_ptr()))
        } else if ffi::PyCapsule_IsValid(cap, NAME.as_ptr()) == 1 {
            (false, ffi::PyCapsule_GetPointer(cap, NAME.as_ptr()))
        } else {
            let used = ffi::PyCapsule_IsValid(cap, USED_NAME.as_ptr()) == 1
                || ffi::PyCapsule_IsValid(cap, USED_NAME_V.as_ptr()) == 1;
            return Err(PyValueError::new_err(if used {
                "this DLPack capsule was already consumed (a capsule can be taken once)".to_string()
            } else {
                format!(
                    "expected a DLPack capsule named 'dltensor' or 'dltensor_versioned', got \
                     {}",
                    capsule.get_type().name()?
                )
            }));
        }
    };
    if managed.is_null() {
        return Err(PyValueError::new_err(
            "the DLPack capsule holds a null tensor",
        ));
    }
    let mut read_only = false;
    // SAFETY: a valid capsule of that name holds a managed tensor of that kind.
    let t: &DLTensor = unsafe {
        if versioned {
            let m = &*(managed as *const DLManagedTensorVersioned);
            read_only = m.flags & FLAG_READ_ONLY != 0;
            if m.version.major != 1 {
                return Err(PyValueError::new_err(format!(
                    "DLPack version {}.{} is not supported (1.x is)",
                    m.version.major, m.version.minor
                )));
            }
            &m.dl_tensor
        } else {
            &(*(managed as *const DLManagedTensor)).dl_tensor
        }
    };
    let dtype = from_dl_dtype(t.dtype)?;
    if t.ndim < 0 || (t.ndim > 0 && t.shape.is_null()) {
        return Err(PyValueError::new_err(format!(
            "the DLPack tensor has no shape (ndim {})",
            t.ndim
        )));
    }
    let ndim = t.ndim as usize;
    // SAFETY: a DLTensor's shape (and strides, when not null) hold `ndim` entries.
    let dims: &[i64] = if ndim == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    if let Some(d) = dims.iter().find(|d| **d < 0) {
        return Err(PyValueError::new_err(format!(
            "the DLPack tensor has a negative dimension {d}"
        )));
    }
    let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    let strides: Option<Vec<i64>> = (!t.strides.is_null() && ndim > 0)
        .then(|| unsafe { std::slice::from_raw_parts(t.strides, ndim) }.to_vec());
    let is_compact = strides.as_ref().is_none_or(|s| compact(&shape, s));
    let numel: usize = shape.iter().product();
    let width = dtype.element_size().unwrap_or(1);
    let data = (t.data as *const u8).wrapping_add(t.byte_offset as usize);
    let device = t.device;
    match device.device_type {
        KDL_CPU => {}
        KDL_CUDA if !is_compact => {
            return Err(PyValueError::new_err(format!(
                "the CUDA DLPack tensor of shape {shape:?} has strides {:?}, not compact \
                 row-major; make it contiguous first (e.g. tensor.contiguous())",
                strides.unwrap_or_default()
            )))
        }
        KDL_CUDA => {}
        other => {
            return Err(PyValueError::new_err(format!(
                "DLPack device type {other} is not supported: only CPU (1) and CUDA (2) \
                 tensors are"
            )))
        }
    }
    // Accepted: take the tensor from the capsule.
    let name = if versioned { USED_NAME_V } else { USED_NAME };
    // SAFETY: renaming a capsule we hold a reference to.
    if unsafe { ffi::PyCapsule_SetName(cap, name.as_ptr()) } != 0 {
        return Err(PyErr::fetch(capsule.py()));
    }
    let owner = Producer { managed, versioned };
    if device.device_type == KDL_CPU {
        if !is_compact {
            // SAFETY: the producer's strides reach only its elements.
            let bytes = unsafe { gather(data, &shape, strides.as_deref().unwrap_or(&[]), width) };
            drop(owner);
            let t = Tensor::from_bytes(dtype, shape, &bytes).map_err(PyValueError::new_err)?;
            return Ok(Import {
                value: Imported::Host(t),
                read_only: false,
            });
        }
        let len = width * numel;
        // SAFETY: the producer's tensor holds `len` compact bytes at `data` while its deleter
        // has not run; `owner` runs it when the last clone of the tensor goes.
        let t = unsafe { Tensor::from_external(dtype, shape, data, len, Arc::new(owner)) }
            .map_err(PyValueError::new_err)?;
        return Ok(Import {
            value: Imported::Host(t),
            read_only,
        });
    }
    let ep = cuda(device.device_id.max(0) as u32)?;
    // SAFETY: a compact CUDA tensor of `numel` elements at `data` on that device, valid until
    // `owner` runs the producer's deleter. The producer ordered its work before the provider's
    // stream (the stream the capsule was asked for).
    let v =
        unsafe { DeviceValue::from_raw(&ep, dtype, shape, data as *const c_void, Arc::new(owner)) }
            .map_err(crate::session_error)?;
    Ok(Import {
        value: Imported::Device(v),
        read_only,
    })
}
