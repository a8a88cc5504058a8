//! Launch parameters of the norm kernels, passed BY VALUE and mirrored field for field in
//! `src/kernels/norm_row.cu` and `src/kernels/norm_chan.cu`.

use crate::ops::params::MAX_RANK;

/// `RowFast` in norm_row.cu: the register kernels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RowFast {
    pub rows: i64,
    pub hidden: i64,
    pub x_row: i64,
    pub y_row: i64,
    pub sum_row: i64,
    pub skip_row: i64,
    pub skip_div: i64,
    pub skip_mod: i64,
    pub stat_stride: i64,
    pub eps: f64,
    pub mode: i32,
    pub flags: i32,
}

/// `RowGen` in norm_row.cu: any layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RowGen {
    pub rows: i64,
    pub hidden: i64,
    pub eps: f64,
    pub mode: i32,
    pub flags: i32,
    pub orank: i32,
    pub irank: i32,
    pub odims: [i64; MAX_RANK],
    pub idims: [i64; MAX_RANK],
    pub xo: [i64; MAX_RANK],
    pub yo: [i64; MAX_RANK],
    pub ko: [i64; MAX_RANK],
    pub uo: [i64; MAX_RANK],
    pub so: [i64; MAX_RANK],
    pub xi: [i64; MAX_RANK],
    pub yi: [i64; MAX_RANK],
    pub ki: [i64; MAX_RANK],
    pub ui: [i64; MAX_RANK],
    pub gi: [i64; MAX_RANK],
    pub bi: [i64; MAX_RANK],
    pub ci: [i64; MAX_RANK],
}

/// Flags of `RowFast` / `RowGen`.
pub const RF_SCALE: i32 = 1;
pub const RF_BETA: i32 = 2;
pub const RF_SKIP: i32 = 4;
pub const RF_SBIAS: i32 = 8;
pub const RF_MEAN: i32 = 16;
pub const RF_INV: i32 = 32;
pub const RF_SUM: i32 = 64;

/// Statistics modes of the row kernels.
pub const MODE_LN: i32 = 0;
pub const MODE_RMS: i32 = 1;
pub const MODE_L1: i32 = 2;
pub const MODE_L2: i32 = 3;

/// `GroupParams` in norm_chan.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GroupParams {
    pub groups: i64,
    pub len: i64,
    pub run: i64,
    pub rx: i64,
    pub ry: i64,
    pub nsplit: i32,
    pub grank: i32,
    pub srank: i32,
    pub mode: i32,
    pub has_affine: i32,
    pub scale_dt: i32,
    pub bias_dt: i32,
    pub _pad: i32,
    pub amod: i64,
    pub amul: i64,
    pub aseg: i64,
    pub scale_stride: i64,
    pub bias_stride: i64,
    pub eps: f64,
    pub gdims: [i64; MAX_RANK],
    pub gx: [i64; MAX_RANK],
    pub gy: [i64; MAX_RANK],
    pub sdims: [i64; MAX_RANK],
    pub sx: [i64; MAX_RANK],
    pub sy: [i64; MAX_RANK],
}

/// Normalization forms of `group_apply`.
pub const NORM_AFFINE: i32 = 0;
pub const NORM_MVN: i32 = 1;
pub const NORM_BN: i32 = 2;

/// `BnFinal` in norm_chan.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BnFinal {
    pub channels: i64,
    pub flags: i32,
    pub mean_dt: i32,
    pub var_dt: i32,
    pub out_dt: i32,
    pub momentum: f64,
    pub eps: f64,
    pub mean_s: i64,
    pub var_s: i64,
    pub out_s: [i64; 4],
}

/// `BnParams` in norm_chan.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BnParams {
    pub n: i64,
    pub channels: i64,
    pub inner: i64,
    pub per: i32,
    pub contig: i32,
    pub rank: i32,
    pub dt: [i32; 4],
    pub _pad: i32,
    pub eps: f64,
    pub ps: [i64; 4],
    pub dims: [i64; MAX_RANK],
    pub xs: [i64; MAX_RANK],
    pub ys: [i64; MAX_RANK],
}

/// `LrnParams` in norm_chan.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LrnParams {
    pub n: i64,
    pub channels: i64,
    pub inner: i64,
    pub lo: i64,
    pub hi: i64,
    pub contig: i32,
    pub rank: i32,
    pub alpha_over_size: f64,
    pub beta: f64,
    pub bias: f64,
    pub dims: [i64; MAX_RANK],
    pub xs: [i64; MAX_RANK],
    pub ys: [i64; MAX_RANK],
}

/// `LpParams` in norm_chan.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LpParams {
    pub lines: i64,
    pub len: i64,
    pub ax_x: i64,
    pub ax_y: i64,
    pub p: i32,
    pub rank: i32,
    pub dims: [i64; MAX_RANK],
    pub xs: [i64; MAX_RANK],
    pub ys: [i64; MAX_RANK],
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The C layouts the kernels read (natural alignment, no hidden padding).
    #[test]
    fn layouts_match_the_kernels() {
        assert_eq!(size_of::<RowFast>(), 88);
        assert_eq!(offset_of!(RowGen, odims), 40);
        assert_eq!(size_of::<RowGen>(), 40 + 14 * 64);
        assert_eq!(offset_of!(GroupParams, amod), 72);
        assert_eq!(offset_of!(GroupParams, gdims), 120);
        assert_eq!(size_of::<BnFinal>(), 88);
        assert_eq!(offset_of!(BnParams, eps), 56);
        assert_eq!(offset_of!(LrnParams, alpha_over_size), 48);
        assert_eq!(offset_of!(LpParams, dims), 40);
    }
}
