//! Kernel metadata passed BY VALUE at launch, mirroring the structs in `src/kernels/*.cu`
//! field for field (`#[repr(C)]`, fixed maximum rank). Passing metadata by value keeps every
//! launch free of host-to-device copies, so launches can be captured into CUDA graphs.

/// Axes a strided walk can have (Tile doubles a rank-8 tensor's axes).
pub const MAX_DIMS: usize = 16;
/// Highest tensor rank the kernels take.
pub const MAX_RANK: usize = 8;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Strided2 {
    pub n: i64,
    pub rank: i32,
    pub _pad: i32,
    pub dims: [i64; MAX_DIMS],
    pub a: [i64; MAX_DIMS],
    pub b: [i64; MAX_DIMS],
    pub a_off: i64,
    pub b_off: i64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct WhereParams {
    pub n: i64,
    pub rank: i32,
    pub _pad: i32,
    pub dims: [i64; MAX_RANK],
    pub c: [i64; MAX_RANK],
    pub x: [i64; MAX_RANK],
    pub y: [i64; MAX_RANK],
    pub o: [i64; MAX_RANK],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PadParams {
    pub n: i64,
    pub rank: i32,
    pub mode: i32,
    pub out_dims: [i64; MAX_RANK],
    pub in_dims: [i64; MAX_RANK],
    pub in_strides: [i64; MAX_RANK],
    pub out_strides: [i64; MAX_RANK],
    pub begin: [i64; MAX_RANK],
    pub value: [u64; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FillParams {
    pub n: i64,
    pub rank: i32,
    pub _pad: i32,
    pub dims: [i64; MAX_RANK],
    pub strides: [i64; MAX_RANK],
    pub value: [u64; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TriluParams {
    pub n: i64,
    pub rank: i32,
    pub upper: i32,
    pub dims: [i64; MAX_RANK],
    pub in_strides: [i64; MAX_RANK],
    pub out_strides: [i64; MAX_RANK],
    pub k: i64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ValuesParams {
    pub n: i64,
    pub stride: i64,
    pub values: [i64; 16],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IndexParams {
    pub n: i64,
    pub rank: i32,
    pub k: i32,
    pub dims: [i64; MAX_DIMS],
    pub dsf: [i64; MAX_DIMS],
    pub isf: [i64; MAX_DIMS],
    pub osf: [i64; MAX_DIMS],
    pub nd_dims: [i64; MAX_RANK],
    pub nd_strides: [i64; MAX_RANK],
    pub idx_last_stride: i64,
    pub id: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CumSumParams {
    pub lines: i64,
    pub rank: i32,
    pub exclusive: i32,
    pub dims: [i64; MAX_RANK],
    pub in_strides: [i64; MAX_RANK],
    pub out_strides: [i64; MAX_RANK],
    pub len: i64,
    pub in_axis_stride: i64,
    pub out_axis_stride: i64,
    pub reverse: i32,
    pub _pad: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OneHotParams {
    pub n: i64,
    pub rank: i32,
    pub axis: i32,
    pub dims: [i64; MAX_RANK + 1],
    pub out_strides: [i64; MAX_RANK + 1],
    pub idx_strides: [i64; MAX_RANK + 1],
    pub depth: i64,
    pub values_stride: i64,
    pub idx_dtype: i32,
    pub _pad: i32,
}
