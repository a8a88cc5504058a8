// Object-detection ops. RoiAlign (opsets 10, 16, 22): one thread per output element
// (roi, channel, bin row, bin column) works out its roi's geometry and sampling grid (fixed
// `sampling_ratio`, or adaptive ceil(roi extent / bins) when it is 0), samples X bilinearly
// at every grid point and averages (avg) or takes the maximum of (max: per sample the largest
// weighted corner, as the CPU provider and onnxruntime do) the samples. Everything in double,
// mirroring the CPU provider's arithmetic (products through __dmul_rn so nothing is contracted
// into an FMA the CPU does not do). A batch index outside [0, N) records error code 1 in the
// device error word and writes 0.

struct RoiAlignParams {
  i64 total; // rois * C * oh * ow
  i64 n, c, h, w;
  i64 oh, ow;
  i64 xs[4];
  i64 ys[4];
  i64 rs[2];   // rois strides (roi, coordinate)
  i64 bs;      // batch_indices stride
  i64 ratio;   // sampling_ratio (<= 0: adaptive)
  i64 max_grid; // cap on the adaptive grid per axis
  double scale; // spatial_scale
  i32 avg;
  i32 half_pixel;
  i32 roi_code;   // ONNX dtype of the rois
  i32 batch_code; // ONNX dtype of batch_indices
  u32 id;
  i32 _pad;
};

__device__ __forceinline__ double det_load(const void *p, i64 off, int code) {
  switch (code) {
  case 1: return (double)((const float *)p)[off];
  case 10: return (double)__half2float(((const f16 *)p)[off]);
  case 11: return ((const double *)p)[off];
  case 16: return (double)__bfloat162float(((const bf16 *)p)[off]);
  default: return 0.0;
  }
}

// Rust's `f as usize` for a non-negative count: truncation, NaN and negatives to 0.
__device__ __forceinline__ i64 ra_count(double v, i64 cap) {
  if (!(v > 0.0)) return 0;
  if (v >= (double)cap) return cap;
  return (i64)v;
}

template <typename T>
__device__ __forceinline__ void roi_align(const T *__restrict__ x, const void *__restrict__ rois,
                                          const void *__restrict__ bidx, T *__restrict__ y,
                                          u32 *err, const RoiAlignParams &p) {
  GRID_LOOP(t, p.total) {
    i64 q = t;
    const i64 pw = q % p.ow;
    q /= p.ow;
    const i64 ph = q % p.oh;
    q /= p.oh;
    const i64 ch = q % p.c;
    const i64 r = q / p.c;
    const i64 yo = r * p.ys[0] + ch * p.ys[1] + ph * p.ys[2] + pw * p.ys[3];
    const i64 b = load_as_i64(bidx, r * p.bs, p.batch_code);
    if (b < 0 || b >= p.n) {
      report_error(err, 1u, p.id);
      y[yo] = Narrow<T>::from(0.0);
      continue;
    }
    const double off = p.half_pixel ? 0.5 : 0.0;
    const i64 ro = r * p.rs[0];
    const double sw = __dmul_rn(det_load(rois, ro, p.roi_code), p.scale) - off;
    const double sh = __dmul_rn(det_load(rois, ro + p.rs[1], p.roi_code), p.scale) - off;
    const double ew = __dmul_rn(det_load(rois, ro + 2 * p.rs[1], p.roi_code), p.scale) - off;
    const double eh = __dmul_rn(det_load(rois, ro + 3 * p.rs[1], p.roi_code), p.scale) - off;
    double rw = ew - sw, rh = eh - sh;
    if (!p.half_pixel) {
      rw = fmax(rw, 1.0);
      rh = fmax(rh, 1.0);
    }
    const double bh = rh / (double)p.oh, bw = rw / (double)p.ow;
    const i64 gh = p.ratio > 0 ? p.ratio : ra_count(ceil(rh / (double)p.oh), p.max_grid);
    const i64 gw = p.ratio > 0 ? p.ratio : ra_count(ceil(rw / (double)p.ow), p.max_grid);
    const double count = (double)(gh * gw > 0 ? gh * gw : 1);
    const T *plane = x + b * p.xs[0] + ch * p.xs[1];
    const double hf = (double)p.h, wf = (double)p.w;
    double acc = 0.0;
    bool any = false;
    for (i64 iy = 0; iy < gh; ++iy) {
      const double yy = (sh + __dmul_rn((double)ph, bh)) +
                        __dmul_rn((double)iy + 0.5, bh) / (double)gh;
      for (i64 ix = 0; ix < gw; ++ix) {
        const double xx = (sw + __dmul_rn((double)pw, bw)) +
                          __dmul_rn((double)ix + 0.5, bw) / (double)gw;
        i64 o[4] = {0, 0, 0, 0};
        double wt[4] = {0.0, 0.0, 0.0, 0.0};
        if (!(yy < -1.0 || yy > hf || xx < -1.0 || xx > wf)) {
          double y1 = fmax(yy, 0.0), x1 = fmax(xx, 0.0);
          i64 yl = (i64)y1, xl = (i64)x1, yh, xh;
          if (yl >= p.h - 1) {
            yl = yh = p.h - 1;
            y1 = (double)yl;
          } else {
            yh = yl + 1;
          }
          if (xl >= p.w - 1) {
            xl = xh = p.w - 1;
            x1 = (double)xl;
          } else {
            xh = xl + 1;
          }
          const double ly = y1 - (double)yl, lx = x1 - (double)xl;
          const double hy = 1.0 - ly, hx = 1.0 - lx;
          o[0] = yl * p.xs[2] + xl * p.xs[3];
          o[1] = yl * p.xs[2] + xh * p.xs[3];
          o[2] = yh * p.xs[2] + xl * p.xs[3];
          o[3] = yh * p.xs[2] + xh * p.xs[3];
          wt[0] = __dmul_rn(hy, hx);
          wt[1] = __dmul_rn(hy, lx);
          wt[2] = __dmul_rn(ly, hx);
          wt[3] = __dmul_rn(ly, lx);
        }
        if (p.avg) {
          double s = 0.0;
#pragma unroll
          for (int j = 0; j < 4; ++j) s = s + __dmul_rn(wt[j], (double)widen(plane[o[j]]));
          acc = acc + s;
        } else {
          double m = -__longlong_as_double(0x7ff0000000000000LL);
#pragma unroll
          for (int j = 0; j < 4; ++j) m = fmax(m, __dmul_rn(wt[j], (double)widen(plane[o[j]])));
          acc = any ? fmax(acc, m) : m;
          any = true;
        }
      }
    }
    y[yo] = Narrow<T>::from(p.avg ? acc / count : acc);
  }
}

#define ROI_ALIGN(NAME, T)                                                                   \
  extern "C" __global__ void roi_align_##NAME(const T *x, const void *rois, const void *bidx, \
                                              T *y, u32 *err, RoiAlignParams p) {            \
    roi_align<T>(x, rois, bidx, y, err, p);                                                  \
  }

ROI_ALIGN(f32, float)
ROI_ALIGN(f64, double)
ROI_ALIGN(f16, f16)
ROI_ALIGN(bf16, bf16)
