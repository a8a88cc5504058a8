//! Fast paths of the pools: 2-D MaxPool/AveragePool over padded, stride-phase-split rows
//! (every window tap a contiguous run, so the loops vectorize; outputs never zero-filled) and
//! the global pools as one reduction per plane. Planes run in parallel in chunks big enough
//! to pay for the hand-off.

use super::common::{self, Real};
use super::scratch::{fill, par_build, with_scratch, worth_parallel, ChunkDone};
use super::window::{row_phases, Window};
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

/// Multiply-adds (or compares) one parallel task should get at least.
const TASK_WORK: usize = 1 << 15;

/// Per output index along one axis: the number of valid taps and the count including
/// padding (AveragePool's count_include_pad divisor).
fn tap_counts(w: &Window, d: usize) -> Vec<(usize, usize)> {
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
fn planes_vec<T: Send>(
    planes: usize,
    plane: usize,
    work_per_plane: usize,
    f: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync + Send,
) -> Vec<T> {
    let parallel = worth_parallel(planes * work_per_plane);
    let per_task = if parallel {
        let threads = rayon::current_num_threads();
        TASK_WORK
            .div_ceil(work_per_plane.max(1))
            .max(planes / (4 * threads))
            .clamp(1, planes.max(1))
    } else {
        planes.max(1)
    };
    par_build(
        planes * plane,
        per_task * plane.max(1),
        parallel,
        |i, chunk| {
            f(i * per_task, chunk);
            // SAFETY: `f` (pool_planes / the global reductions) writes every element of its
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
        pool_planes(x, w, first, out, T::LOWEST, step, |_: &mut [T], _| {})
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
        pool_planes(x, w, first, out, T::zero(), |a: T, b: T| a + b, finish)
    })
}

type Finish<'a, T> = &'a (dyn Fn(&mut [T], usize) + Sync);

fn pool_planes<T: bytemuck::Pod, F: Fn(T, T) -> T + Copy>(
    x: &[T],
    w: &Window,
    first: usize,
    out: &mut [MaybeUninit<T>],
    pad: T,
    step: F,
    finish: impl Fn(&mut [T], usize) + Sync,
) {
    let finish: Finish<'_, T> = &finish;
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has the feature `pool_planes_avx2` is compiled for.
            unsafe { pool_planes_avx2(x, w, first, out, pad, step, finish) };
            return;
        }
    }
    pool_planes_body(x, w, first, out, pad, step, finish);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn pool_planes_avx2<T: bytemuck::Pod, F: Fn(T, T) -> T + Copy>(
    x: &[T],
    w: &Window,
    first: usize,
    out: &mut [MaybeUninit<T>],
    pad: T,
    step: F,
    finish: Finish<'_, T>,
) {
    pool_planes_body(x, w, first, out, pad, step, finish);
}

/// Writes output planes `first..` (as many as `out` holds): each output row starts at `pad`,
/// folds in every tap with `step`, then gets `finish(row, oy)`.
#[inline(always)]
fn pool_planes_body<T: bytemuck::Pod, F: Fn(T, T) -> T + Copy>(
    x: &[T],
    w: &Window,
    first: usize,
    out: &mut [MaybeUninit<T>],
    pad: T,
    step: F,
    finish: Finish<'_, T>,
) {
    let (ih, iw) = (w.input[0], w.input[1]);
    let (oh, ow) = (w.output[0], w.output[1]);
    let (kh, kw) = (w.kernel[0], w.kernel[1]);
    let (sh, sw) = (w.strides[0], w.strides[1]);
    let (dh, dw) = (w.dilations[0], w.dilations[1]);
    let (pt, pl) = (w.pad_begin[0], w.pad_begin[1]);
    let plen = ow + ((kw - 1) * dw) / sw;
    let row_len = sw * plen;
    let plane = oh * ow;
    with_scratch(ih * row_len, |rows: &mut [T]| {
        for (j, o) in out.chunks_mut(plane).enumerate() {
            let xp = &x[(first + j) * ih * iw..(first + j + 1) * ih * iw];
            for (iy, dst) in rows.chunks_exact_mut(row_len).enumerate() {
                row_phases(&xp[iy * iw..(iy + 1) * iw], pl, sw, plen, pad, dst);
            }
            for oy in 0..oh {
                let orow = fill(&mut o[oy * ow..(oy + 1) * ow], pad);
                for ky in 0..kh {
                    let iy = (oy * sh + ky * dh) as isize - pt as isize;
                    if iy < 0 || iy >= ih as isize {
                        continue;
                    }
                    for kx in 0..kw {
                        let t = kx * dw;
                        let start = iy as usize * row_len + (t % sw) * plen + t / sw;
                        let src = &rows[start..start + ow];
                        for (v, &s) in orow.iter_mut().zip(src) {
                            *v = step(*v, s);
                        }
                    }
                }
                finish(orow, oy);
            }
        }
    });
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
mod tests {
    use super::super::common::testutil::rand;
    use super::super::window::{AutoPad, WindowAttrs};
    use super::*;

    /// Brute-force float64 2-D pools: (max, average without pads, average with pads).
    fn reference(x: &[f64], planes: usize, w: &Window) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
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
