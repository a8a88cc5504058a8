//! Buffers for the hot `nn` kernels: per-thread reusable scratch (no allocation or zero-fill
//! per call), input planes laid out there as stride-phase-split rows, outputs written in place
//! without a zero-fill, a pointer that parallel tasks share to write disjoint blocks of one
//! output, the parallel split over planes and the AVX2 dispatch.

use crate::ops::nn::window::{row_phases, Window};
use bytemuck::Pod;
use std::cell::Cell;
use std::mem::MaybeUninit;

thread_local! {
    static SCRATCH: Cell<Vec<f64>> = const { Cell::new(Vec::new()) };
}

/// A per-thread scratch slice of `len` elements ([`scratch`]), handed back to the thread's
/// cache when dropped.
pub struct ScratchBuf<T: Pod> {
    buf: Vec<f64>,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

/// A per-thread scratch slice of `len` elements. The contents are whatever an earlier use
/// left there (zeros the first time): the user must write what it reads. Nested uses get a
/// fresh buffer rather than sharing one.
///
/// A guard rather than a closure: [`SimdWork::run`] bodies keep their hot loops in their own
/// body, which is what [`run_simd`]'s AVX2 copy compiles for AVX2 (a closure's body is a
/// function of its own that need not be inlined, and out of line it is baseline SSE2 code).
#[inline(always)]
pub fn scratch<T: Pod>(len: usize) -> ScratchBuf<T> {
    let mut buf = SCRATCH.with(Cell::take);
    let words = (len * std::mem::size_of::<T>()).div_ceil(8);
    if buf.len() < words {
        buf.resize(words, 0.0);
    }
    ScratchBuf {
        buf,
        len,
        _t: std::marker::PhantomData,
    }
}

impl<T: Pod> std::ops::Deref for ScratchBuf<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        let words = (self.len * std::mem::size_of::<T>()).div_ceil(8);
        &bytemuck::cast_slice::<f64, T>(&self.buf[..words])[..self.len]
    }
}

impl<T: Pod> std::ops::DerefMut for ScratchBuf<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        let words = (self.len * std::mem::size_of::<T>()).div_ceil(8);
        &mut bytemuck::cast_slice_mut::<f64, T>(&mut self.buf[..words])[..self.len]
    }
}

impl<T: Pod> Drop for ScratchBuf<T> {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // During thread teardown the cache may be gone; the buffer is then just freed.
        let _ = SCRATCH.try_with(|s| {
            let other = s.take();
            s.set(if other.len() > buf.len() { other } else { buf });
        });
    }
}

/// Runs `f` on a per-thread scratch slice of `len` elements (see [`scratch`]; inside a
/// [`SimdWork`] body use [`scratch`], so the loops are compiled for AVX2).
pub fn with_scratch<T: Pod, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    let mut buf = scratch::<T>(len);
    f(&mut buf)
}

/// Writes `v` into every element of `row` and returns it as initialised.
#[inline]
pub fn fill<T: Copy>(row: &mut [MaybeUninit<T>], v: T) -> &mut [T] {
    for e in row.iter_mut() {
        e.write(v);
    }
    // SAFETY: every element was just written; `MaybeUninit<T>` has `T`'s layout.
    unsafe { &mut *(row as *mut [MaybeUninit<T>] as *mut [T]) }
}

/// A 2-D window's geometry for input planes laid out as padded, stride-phase-split rows
/// ([`row_phases`]): every input row becomes `strides[1]` phases of `plen` elements, so the
/// input an output row reads for one kernel tap is one contiguous run of `ow` elements.
pub struct PhaseRows {
    pub ih: usize,
    pub iw: usize,
    pub oh: usize,
    pub ow: usize,
    pub kh: usize,
    pub kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pt: usize,
    pl: usize,
    plen: usize,
    row_len: usize,
}

impl PhaseRows {
    /// The layout for a 2-D `w`.
    pub fn new(w: &Window) -> PhaseRows {
        let (ow, kw, sw, dw) = (w.output[1], w.kernel[1], w.strides[1], w.dilations[1]);
        // Phase length: output column o of tap kx reads phase (kx*dw % sw) at o + kx*dw / sw.
        let plen = ow + ((kw - 1) * dw) / sw;
        PhaseRows {
            ih: w.input[0],
            iw: w.input[1],
            oh: w.output[0],
            ow,
            kh: w.kernel[0],
            kw,
            sh: w.strides[0],
            sw,
            dh: w.dilations[0],
            dw,
            pt: w.pad_begin[0],
            pl: w.pad_begin[1],
            plen,
            row_len: sw * plen,
        }
    }

    /// Elements of one laid-out input plane.
    pub fn plane_len(&self) -> usize {
        self.ih * self.row_len
    }

    /// One phase's length (at least `ow`).
    pub fn phase_len(&self) -> usize {
        self.plen
    }

    /// Lays out input plane `xp` ([ih, iw]) into `rows` (`plane_len` long), `pad` in the
    /// padding.
    #[inline(always)]
    pub fn lay_out<T: Copy>(&self, xp: &[T], pad: T, rows: &mut [T]) {
        let iw = self.iw;
        for (iy, dst) in rows.chunks_exact_mut(self.row_len).enumerate() {
            row_phases(
                &xp[iy * iw..(iy + 1) * iw],
                self.pl,
                self.sw,
                self.plen,
                pad,
                dst,
            );
        }
    }

    /// Elements of one laid-out input row.
    pub fn row_len(&self) -> usize {
        self.row_len
    }

    /// Lays out one input row `xr` (`iw` long) into `dst` (`row_len` long).
    #[inline(always)]
    pub fn lay_out_row<T: Copy>(&self, xr: &[T], pad: T, dst: &mut [T]) {
        row_phases(xr, self.pl, self.sw, self.plen, pad, dst);
    }

    /// The input row kernel row `ky` of output row `oy` reads; `None` in the padding.
    #[inline(always)]
    pub fn input_row(&self, oy: usize, ky: usize) -> Option<usize> {
        let iy = (oy * self.sh + ky * self.dh) as isize - self.pt as isize;
        (iy >= 0 && iy < self.ih as isize).then_some(iy as usize)
    }

    /// The run of `ow` elements kernel column `kx` reads in a row laid out by
    /// [`PhaseRows::lay_out_row`].
    #[inline(always)]
    pub fn row_run<'r, T>(&self, row: &'r [T], kx: usize) -> &'r [T] {
        let t = kx * self.dw;
        let start = (t % self.sw) * self.plen + t / self.sw;
        &row[start..start + self.ow]
    }

    /// The run kernel tap (ky, kx) reads in `rows` for output row `oy`; `None` when that tap
    /// row lies in the top or bottom padding.
    #[inline(always)]
    pub fn run<'r, T>(&self, rows: &'r [T], oy: usize, ky: usize, kx: usize) -> Option<&'r [T]> {
        let iy = (oy * self.sh + ky * self.dh) as isize - self.pt as isize;
        if iy < 0 || iy >= self.ih as isize {
            return None;
        }
        let t = kx * self.dw;
        let start = iy as usize * self.row_len + (t % self.sw) * self.plen + t / self.sw;
        Some(&rows[start..start + self.ow])
    }
}

/// A vector of `len` elements built by `f`, which gets the uninitialised storage.
///
/// # Safety
/// `f` must write every element of the slice it is given.
pub unsafe fn build_vec<T>(len: usize, f: impl FnOnce(&mut [MaybeUninit<T>])) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    f(&mut v.spare_capacity_mut()[..len]);
    // SAFETY: the caller's `f` initialised all `len` elements.
    unsafe { v.set_len(len) };
    v
}

/// A vector of `len` elements where `f(chunk_index, chunk)` writes each `chunk`-sized piece
/// (the last may be shorter); pieces run in parallel when `parallel` is set.
pub fn par_build<T: Send>(
    len: usize,
    chunk: usize,
    parallel: bool,
    f: impl Fn(usize, &mut [MaybeUninit<T>]) -> ChunkDone + Sync + Send,
) -> Vec<T> {
    use rayon::prelude::*;
    let chunk = chunk.max(1);
    // SAFETY: the chunks cover all `len` elements, and each chunk's closure returns a
    // `ChunkDone`, whose constructor's contract is that the chunk was written in full.
    unsafe {
        build_vec(len, |out| {
            if parallel {
                out.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| {
                    f(i, c);
                });
            } else {
                out.chunks_mut(chunk).enumerate().for_each(|(i, c)| {
                    f(i, c);
                });
            }
        })
    }
}

/// Proof token a [`par_build`] chunk closure returns: made by [`ChunkDone::new`], whose
/// contract is that the chunk it was handed has been written in full.
pub struct ChunkDone(());

impl ChunkDone {
    /// # Safety
    /// Every element of the chunk the closure was handed must have been written.
    #[inline]
    pub unsafe fn new() -> Self {
        ChunkDone(())
    }
}

/// Whether a job of `work` element-operations is worth spreading over rayon's threads.
#[inline]
pub fn worth_parallel(work: usize) -> bool {
    work >= 1 << 16 && rayon::current_num_threads() > 1
}

/// Element-operations one parallel task over output planes should get at least.
const TASK_WORK: usize = 1 << 15;

/// How many of `planes` output planes (of `work_per_plane` element-operations each) one
/// parallel task gets; `None` when the job is not worth spreading over threads.
pub fn planes_per_task(planes: usize, work_per_plane: usize) -> Option<usize> {
    if !worth_parallel(planes * work_per_plane) {
        return None;
    }
    let threads = rayon::current_num_threads();
    Some(
        TASK_WORK
            .div_ceil(work_per_plane.max(1))
            .max(planes / (4 * threads))
            .clamp(1, planes.max(1)),
    )
}

/// A hot loop nest compiled twice, as built and for AVX2+FMA, the copy chosen at run time
/// by [`run_simd`]. `run` must be `#[inline(always)]` so its loops are compiled into each
/// copy (and vectorize for the wider registers in the AVX2 one).
pub trait SimdWork {
    fn run(self);
}

/// Runs `work` compiled for AVX2+FMA when the CPU has them, as built otherwise.
#[inline(always)]
pub fn run_simd<W: SimdWork>(work: W) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has the features `run_avx2_fma` is compiled for.
            unsafe { run_avx2_fma(work) };
            return;
        }
    }
    work.run();
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn run_avx2_fma<W: SimdWork>(work: W) {
    work.run();
}

/// A raw output pointer that parallel tasks share; each writes only its own disjoint block.
#[derive(Clone, Copy)]
pub struct SharedMut<T>(pub *mut T);

// SAFETY: users only write disjoint element ranges from different threads (documented at
// each use), and `T: Send` values may move between threads.
unsafe impl<T: Send> Send for SharedMut<T> {}
// SAFETY: as above; the pointer itself is only copied.
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    #[inline]
    pub fn get(self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_reused_and_reentrant() {
        let outer = with_scratch::<f32, _>(10, |a| {
            a.iter_mut().enumerate().for_each(|(i, v)| *v = i as f32);
            let inner = with_scratch::<f64, _>(5, |b| {
                b.fill(2.0);
                b.iter().sum::<f64>()
            });
            a.iter().sum::<f32>() + inner as f32
        });
        assert_eq!(outer, 45.0 + 10.0);
    }

    #[test]
    fn par_build_writes_every_chunk() {
        for parallel in [false, true] {
            let v = par_build::<u32>(103, 10, parallel, |i, c| {
                for (j, e) in c.iter_mut().enumerate() {
                    e.write((i * 10 + j) as u32);
                }
                // SAFETY: the loop wrote every element of `c`.
                unsafe { ChunkDone::new() }
            });
            assert_eq!(v, (0..103).collect::<Vec<u32>>());
        }
    }
}
