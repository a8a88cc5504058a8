//! Fast paths of the pools: 2-D MaxPool/AveragePool over padded, stride-phase-split rows
//! (every window tap a contiguous run, so the loops vectorize; outputs never zero-filled) and
//! the global pools as one reduction per plane. Planes run in parallel in chunks big enough
//! to pay for the hand-off.

use crate::ops::nn::common::{self, Real};
use crate::ops::nn::scratch::PhaseRows;
use crate::ops::nn::scratch::{fill, par_build, planes_per_task, run_simd, scratch};
use crate::ops::nn::scratch::{ChunkDone, SimdWork};
use crate::ops::nn::window::Window;
use half::{bf16, f16};
use std::mem::MaybeUninit;

/// Element types MaxPool compares: with a value no input is below (the padding).
pub trait MaxElem: Copy + PartialOrd + Send + Sync + Default + bytemuck::Pod {
    const LOWEST: Self;
}

macro_rules! max_elem {
    ($($t:ty => $v:expr),*) => { $(impl MaxElem for $t { const LOWEST: Self = $v; })* };
}
max_elem!(f32 => f32::NEG_INFINITY, f64 => f64::NEG_INFINITY, f16 => f16::NEG_INFINITY,
    bf16 => bf16::NEG_INFINITY, i8 => i8::MIN, u8 => u8::MIN);

/// Per output index along one axis: the number of valid taps and the count including
/// padding (AveragePool's count_include_pad divisor).
pub(crate) fn tap_counts(w: &Window, d: usize) -> Vec<(usize, usize)> {
    (0..w.output[d])
        .map(|o| {
            let start = (o * w.strides[d]) as isize - w.pad_begin[d] as isize;
            let (mut valid, mut padded) = (0, 0);
            for k in 0..w.kernel[d] {
                let i = start + (k * w.dilations[d]) as isize;
                if i >= 0 && i < w.input[d] as isize {
                    valid += 1;
                }
                if i < (w.input[d] + w.pad_end[d]) as isize {
                    padded += 1;
                }
            }
            (valid, padded)
        })
        .collect()
}

/// Whether the fast 2-D path applies: every window covers at least one input element.
pub fn fits(w: &Window) -> bool {
    w.input.len() == 2 && (0..2).all(|d| tap_counts(w, d).iter().all(|&(v, _)| v > 0))
}

/// Splits `planes` output planes of `plane` elements into parallel chunks and runs `f` on
/// each chunk with the index of its first plane.
pub(crate) fn planes_vec<T: Send>(
    planes: usize,
    plane: usize,
    work_per_plane: usize,
    f: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync + Send,
) -> Vec<T> {
    let per_task = planes_per_task(planes, work_per_plane);
    let parallel = per_task.is_some();
    let per_task = per_task.unwrap_or(planes.max(1));
    par_build(
        planes * plane,
        per_task * plane.max(1),
        parallel,
        |i, chunk| {
            f(i * per_task, chunk);
            // SAFETY: `f` (PoolPlanes / the global reductions) writes every element of its
            // chunk.
            unsafe { ChunkDone::new() }
        },
    )
}

/// 2-D max pool; `w` must satisfy [`fits`].
pub fn max2d<T: MaxElem>(x: &[T], planes: usize, w: &Window) -> Vec<T> {
    let plane = w.output_size();
    let step = |a: T, b: T| if b > a { b } else { a };
    planes_vec(planes, plane, plane * w.kernel_size(), |first, out| {
        run_simd(PoolPlanes {
            x,
            w,
            first,
            out,
            pad: T::LOWEST,
            step,
            finish: &|_: &mut [T], _| {},
        })
    })
}

/// 2-D average pool; `w` must satisfy [`fits`].
pub fn avg2d<T: Real>(x: &[T], planes: usize, w: &Window, include_pad: bool) -> Vec<T> {
    let plane = w.output_size();
    let count = |d: usize| -> Vec<T> {
        tap_counts(w, d)
            .into_iter()
            .map(|(valid, padded)| common::c(if include_pad { padded } else { valid } as f64))
            .collect()
    };
    let (cy, cx) = (count(0), count(1));
    let finish = |row: &mut [T], oy: usize| {
        let ny = cy[oy];
        for (v, &nx) in row.iter_mut().zip(&cx) {
            *v /= nx * ny;
        }
    };
    planes_vec(planes, plane, plane * w.kernel_size(), |first, out| {
        run_simd(PoolPlanes {
            x,
            w,
            first,
            out,
            pad: T::zero(),
            step: |a: T, b: T| a + b,
            finish: &finish,
        })
    })
}

/// Output planes `first..` of a 2-D pool (as many as `out` holds): each output row starts at
/// `pad`, folds in every tap with `step`, then gets `finish(row, oy)`.
struct PoolPlanes<'a, T, F> {
    x: &'a [T],
    w: &'a Window,
    first: usize,
    out: &'a mut [MaybeUninit<T>],
    pad: T,
    step: F,
    finish: &'a (dyn Fn(&mut [T], usize) + Sync),
}

impl<T: bytemuck::Pod, F: Fn(T, T) -> T + Copy> SimdWork for PoolPlanes<'_, T, F> {
    #[inline(always)]
    fn run(self) {
        let PoolPlanes {
            x,
            w,
            first,
            out,
            pad,
            step,
            finish,
        } = self;
        let g = PhaseRows::new(w);
        let (ih, iw, oh, ow) = (g.ih, g.iw, g.oh, g.ow);
        let plane = oh * ow;
        // Per output row: the kernel rows folded into one input-width row, that row laid out
        // in stride phases, then the kernel columns folded as contiguous runs.
        let mut buf_buf = scratch::<T>(g.row_len() + iw);
        let buf: &mut [T] = &mut buf_buf;
        let (phases, vrow) = buf.split_at_mut(g.row_len());
        for (j, o) in out.chunks_mut(plane).enumerate() {
            let xp = &x[(first + j) * ih * iw..(first + j + 1) * ih * iw];
            for oy in 0..oh {
                let mut rows = (0..g.kh).filter_map(|ky| g.input_row(oy, ky));
                let Some(r0) = rows.next() else {
                    // `fits` guarantees a valid row; an empty window stays `pad`.
                    fill(&mut o[oy * ow..(oy + 1) * ow], pad);
                    continue;
                };
                vrow.copy_from_slice(&xp[r0 * iw..(r0 + 1) * iw]);
                for r in rows {
                    for (v, &s) in vrow.iter_mut().zip(&xp[r * iw..(r + 1) * iw]) {
                        *v = step(*v, s);
                    }
                }
                g.lay_out_row(vrow, pad, phases);
                let orow = fill(&mut o[oy * ow..(oy + 1) * ow], pad);
                for kx in 0..g.kw {
                    for (v, &s) in orow.iter_mut().zip(g.row_run(phases, kx)) {
                        *v = step(*v, s);
                    }
                }
                finish(orow, oy);
            }
        }
    }
}

/// Global max over each plane of `inner` elements.
pub fn global_max<T: MaxElem>(x: &[T], planes: usize, inner: usize) -> Vec<T> {
    planes_vec(planes, 1, inner, |first, out| {
        for (j, o) in out.iter_mut().enumerate() {
            let p = &x[(first + j) * inner..(first + j + 1) * inner];
            let m = p.iter().fold(T::LOWEST, |a, &b| if b > a { b } else { a });
            // An empty plane has no maximum; the reference gives the type's default.
            o.write(if inner == 0 { T::default() } else { m });
        }
    })
}

/// Global average over each plane of `inner` elements.
pub fn global_avg<T: Real>(x: &[T], planes: usize, inner: usize) -> Vec<T> {
    planes_vec(planes, 1, inner, |first, out| {
        for (j, o) in out.iter_mut().enumerate() {
            let p = &x[(first + j) * inner..(first + j + 1) * inner];
            o.write(common::lane_sum(p, |v| v) / common::c::<T>(inner as f64));
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::rand;
    use crate::ops::nn::window::{AutoPad, WindowAttrs};

    /// Brute-force float64 2-D pools: (max, average without pads, average with pads).
    pub(crate) fn reference(
        x: &[f64],
        planes: usize,
        w: &Window,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (ih, iw) = (w.input[0] as isize, w.input[1] as isize);
        let (mut mx, mut av, mut avp) = (vec![], vec![], vec![]);
        for p in 0..planes {
            for oy in 0..w.output[0] {
                for ox in 0..w.output[1] {
                    let (mut m, mut s, mut n, mut np) = (f64::NEG_INFINITY, 0.0, 0, 0);
                    for ky in 0..w.kernel[0] {
                        for kx in 0..w.kernel[1] {
                            let iy = (oy * w.strides[0] + ky * w.dilations[0]) as isize
                                - w.pad_begin[0] as isize;
                            let ix = (ox * w.strides[1] + kx * w.dilations[1]) as isize
                                - w.pad_begin[1] as isize;
                            if iy < ih + w.pad_end[0] as isize && ix < iw + w.pad_end[1] as isize {
                                np += 1;
                            }
                            if iy < 0 || ix < 0 || iy >= ih || ix >= iw {
                                continue;
                            }
                            let v = x[p * (ih * iw) as usize + (iy * iw + ix) as usize];
                            m = m.max(v);
                            s += v;
                            n += 1;
                        }
                    }
                    mx.push(m);
                    av.push(s / n as f64);
                    avp.push(s / np as f64);
                }
            }
        }
        (mx, av, avp)
    }

    fn close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{i}: {g} vs {w}");
        }
    }

    #[test]
    fn pools_match_brute_force() {
        let cases = [
            // kernel, strides, dilations, pads, ceil
            ([3, 3], [1, 1], [1, 1], [1, 1, 1, 1], false),
            ([3, 3], [2, 2], [1, 1], [1, 1, 1, 1], true),
            ([2, 2], [2, 2], [1, 1], [0, 0, 0, 0], false),
            ([3, 2], [3, 2], [1, 1], [0, 1, 2, 1], true),
            ([3, 3], [1, 2], [2, 2], [2, 1, 2, 1], false),
            ([5, 5], [1, 1], [1, 1], [2, 2, 2, 2], false),
        ];
        for (k, s, d, p, ceil) in cases {
            let wa = WindowAttrs {
                kernel: Some(k.to_vec()),
                strides: Some(s.to_vec()),
                dilations: Some(d.to_vec()),
                pads: Some(p.to_vec()),
                auto_pad: AutoPad::NotSet,
                ceil_mode: ceil,
            };
            let w = wa.resolve("n", &[11, 9], &k).unwrap();
            assert!(fits(&w));
            // Enough planes for the parallel split.
            let planes = 700;
            let x = rand(planes * 99, 5, -1.0, 1.0);
            let (mx, av, avp) = reference(&x, planes, &w);
            let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            let up = |v: Vec<f32>| -> Vec<f64> { v.into_iter().map(f64::from).collect() };
            let mx32 = reference(&up(x32.clone()), planes, &w).0;
            close(&up(max2d(&x32, planes, &w)), &mx32, 0.0);
            close(&max2d(&x, planes, &w), &mx, 0.0);
            close(&up(avg2d(&x32, planes, &w, false)), &av, 1e-6);
            close(&up(avg2d(&x32, planes, &w, true)), &avp, 1e-6);
            close(&avg2d(&x, planes, &w, true), &avp, 1e-12);
            let xi: Vec<i8> = x.iter().map(|&v| (v * 100.0) as i8).collect();
            let xif: Vec<f64> = xi.iter().map(|&v| v as f64).collect();
            let want: Vec<f64> = reference(&xif, planes, &w).0;
            let got: Vec<f64> = max2d(&xi, planes, &w).into_iter().map(f64::from).collect();
            close(&got, &want, 0.0);
            let xh: Vec<f16> = x.iter().map(|&v| f16::from_f64(v)).collect();
            let xhf: Vec<f64> = xh.iter().map(|v| v.to_f64()).collect();
            let want: Vec<f64> = reference(&xhf, planes, &w).0;
            let got: Vec<f64> = max2d(&xh, planes, &w).iter().map(|v| v.to_f64()).collect();
            close(&got, &want, 0.0);
        }
    }

    #[test]
    fn global_pools() {
        for (planes, inner) in [(3, 17), (500, 300)] {
            let x = rand(planes * inner, 9, -1.0, 1.0);
            let mx: Vec<f64> = x
                .chunks(inner)
                .map(|c| c.iter().cloned().fold(f64::NEG_INFINITY, f64::max))
                .collect();
            let av: Vec<f64> = x
                .chunks(inner)
                .map(|c| c.iter().sum::<f64>() / inner as f64)
                .collect();
            close(&global_max(&x, planes, inner), &mx, 0.0);
            close(&global_avg(&x, planes, inner), &av, 1e-12);
            let u8s: Vec<u8> = x.iter().map(|&v| ((v + 1.0) * 100.0) as u8).collect();
            let want: Vec<u8> = u8s
                .chunks(inner)
                .map(|c| *c.iter().max().unwrap())
                .collect();
            assert_eq!(global_max(&u8s, planes, inner), want);
        }
    }
}
