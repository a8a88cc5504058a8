// GridSample over 1 to 6 spatial dims (2-D at opset 16): one thread per (grid point, run of
// channels). The point's taps along each axis (index and weight, or none for a zero) are worked
// out once in double precision exactly as the CPU provider does, then every channel of the run
// sums the taps' product in double (axis 0 slowest, the CPU's order) and narrows to T.
// K = 1, 2, 3 have their own kernels per tap count (1 nearest, 2 linear, 4 cubic); K = 0
// takes any count up to GS_MAX.

#define GS_MAX 6
#define GS_NEAREST 0
#define GS_LINEAR 1
#define GS_CUBIC 2
#define GS_ZEROS 0
#define GS_BORDER 1
#define GS_REFLECTION 2

struct GridParams {
  i64 points;
  i64 P;
  i32 k;
  i32 mode;
  i32 padding;
  i32 align;
  i32 grid_dtype;
  i32 _pad;
  i64 C;
  i64 cchunk;
  i64 in_dims[GS_MAX];
  i64 xs_n, xs_c;
  i64 xs[GS_MAX];
  i64 out_dims[GS_MAX];
  i64 gs_n;
  i64 gs[GS_MAX];
  i64 gs_last;
  i64 ys_n, ys_c;
  i64 ys[GS_MAX];
};

// Element `off` of a float tensor of ONNX dtype `code` as a double.
__device__ __forceinline__ double gs_load(const void *p, i64 off, int code) {
  switch (code) {
  case 1: return (double)((const float *)p)[off];
  case 10: return (double)__half2float(((const f16 *)p)[off]);
  case 11: return ((const double *)p)[off];
  case 16: return (double)__bfloat162float(((const bf16 *)p)[off]);
  default: return 0.0;
  }
}

__device__ __forceinline__ double gs_reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0.0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const i64 n = sat_i64(dx / range);
    const double r = dx - (double)n * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const i64 n = sat_i64(dx / range);
    const double r = dx - (double)n * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

// The element index of tap `i` along an axis of `d` elements, or -1 for a zero.
__device__ __forceinline__ i64 gs_tap(const GridParams &p, i64 i, i64 d, double lo, double hi) {
  if (p.padding == GS_ZEROS) return (i >= 0 && i < d) ? i : -1;
  i64 r = p.padding == GS_BORDER ? i : sat_i64(gs_reflect((double)i, lo, hi));
  if (r < 0) r = 0;
  if (r > d - 1) r = d - 1;
  return r;
}

// Taps of one axis: up to N (offset, weight) pairs (N = 1 nearest, 2 linear, 4 cubic); an
// offset of -1 is a zero tap.
template <int N> struct GsAxis {
  i64 off[N];
  double w[N];
  int n;
};

template <int N>
__device__ __forceinline__ GsAxis<N> gs_axis(const GridParams &p, int i, double nrm) {
  const i64 d = p.in_dims[i];
  const double df = (double)d;
  double lo, hi, x;
  if (p.align) {
    lo = 0.0;
    hi = df - 1.0;
    x = (nrm + 1.0) / 2.0 * (df - 1.0);
  } else {
    lo = -0.5;
    hi = df - 0.5;
    x = ((nrm + 1.0) * df - 1.0) / 2.0;
  }
  if (p.mode == GS_NEAREST) x = rint(x);
  if (x < lo || x > hi) {
    if (p.padding == GS_BORDER) {
      x = fmin(fmax(x, 0.0), df - 1.0);
    } else if (p.padding == GS_REFLECTION) {
      x = gs_reflect(x, lo, hi);
    }
  }
  GsAxis<N> a;
  const i64 st = p.xs[i];
  i64 t[4];
  double w[4];
  int n;
  if (p.mode == GS_NEAREST) {
    n = 1;
    t[0] = gs_tap(p, sat_i64(x), d, lo, hi);
    w[0] = 1.0;
  } else if (p.mode == GS_LINEAR) {
    const double x0 = floor(x);
    const double f = x - x0;
    const i64 i0 = sat_i64(x0);
    n = 2;
    t[0] = gs_tap(p, i0, d, lo, hi);
    t[1] = gs_tap(p, i0 + 1, d, lo, hi);
    w[0] = 1.0 - f;
    w[1] = f;
  } else {
    const double x0 = floor(x);
    const double s = fabs(x - x0);
    const double A = -0.75;
    const i64 i0 = sat_i64(x0);
    n = 4;
    w[0] = ((A * (s + 1.0) - 5.0 * A) * (s + 1.0) + 8.0 * A) * (s + 1.0) - 4.0 * A;
    w[1] = ((A + 2.0) * s - (A + 3.0)) * s * s + 1.0;
    w[2] = ((A + 2.0) * (1.0 - s) - (A + 3.0)) * (1.0 - s) * (1.0 - s) + 1.0;
    w[3] = ((A * (2.0 - s) - 5.0 * A) * (2.0 - s) + 8.0 * A) * (2.0 - s) - 4.0 * A;
#pragma unroll
    for (int j = 0; j < 4; ++j) t[j] = gs_tap(p, i0 - 1 + j, d, lo, hi);
  }
  a.n = n < N ? n : N;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    a.off[j] = (j < n && t[j] >= 0) ? t[j] * st : -1;
    a.w[j] = j < n ? w[j] : 0.0;
  }
  return a;
}

// K spatial dims (0: any count up to GS_MAX); N taps per axis (the mode's: 1, 2 or 4).
template <typename T, int K, int N>
__device__ __forceinline__ void grid_kernel(const T *__restrict__ x, const void *__restrict__ g,
                                            T *__restrict__ y, const GridParams &p) {
  constexpr int D = K == 0 ? GS_MAX : K;
  const int k = K == 0 ? p.k : K;
  const i64 chunks = (p.C + p.cchunk - 1) / p.cchunk;
  GRID_LOOP(tid, p.points * chunks) {
    const i64 q = tid % p.points;
    const i64 chunk = tid / p.points;
    const i64 nn = q / p.P;
    i64 r = q % p.P;
    i64 goff = nn * p.gs_n, yoff = nn * p.ys_n;
    for (int d = k - 1; d >= 0; --d) {
      const i64 c = r % p.out_dims[d];
      r /= p.out_dims[d];
      goff += c * p.gs[d];
      yoff += c * p.ys[d];
    }
    GsAxis<N> ax[D];
#pragma unroll
    for (int i = 0; i < D; ++i) {
      if (K == 0 && i >= k) break;
      // The grid's last axis holds (x, y, ...): x (entry 0) indexes the last spatial axis.
      ax[i] = gs_axis<N>(p, i, gs_load(g, goff + (i64)(k - 1 - i) * p.gs_last, p.grid_dtype));
    }
    const i64 c0 = chunk * p.cchunk;
    const i64 c1 = c0 + p.cchunk < p.C ? c0 + p.cchunk : p.C;
    for (i64 c = c0; c < c1; ++c) {
      const T *xp = x + nn * p.xs_n + c * p.xs_c;
      double acc = 0.0;
      if constexpr (K == 1) {
#pragma unroll
        for (int a = 0; a < N; ++a) {
          if (a < ax[0].n && ax[0].off[a] >= 0)
            acc += (1.0 * ax[0].w[a]) * (double)widen(xp[ax[0].off[a]]);
        }
      } else if constexpr (K == 2) {
#pragma unroll
        for (int a = 0; a < N; ++a) {
          if (a >= ax[0].n || ax[0].off[a] < 0) continue;
#pragma unroll
          for (int b = 0; b < N; ++b) {
            if (b >= ax[1].n || ax[1].off[b] < 0) continue;
            acc += ((1.0 * ax[0].w[a]) * ax[1].w[b]) *
                   (double)widen(xp[ax[0].off[a] + ax[1].off[b]]);
          }
        }
      } else if constexpr (K == 3) {
#pragma unroll
        for (int a = 0; a < N; ++a) {
          if (a >= ax[0].n || ax[0].off[a] < 0) continue;
#pragma unroll
          for (int b = 0; b < N; ++b) {
            if (b >= ax[1].n || ax[1].off[b] < 0) continue;
#pragma unroll
            for (int e = 0; e < N; ++e) {
              if (e >= ax[2].n || ax[2].off[e] < 0) continue;
              acc += (((1.0 * ax[0].w[a]) * ax[1].w[b]) * ax[2].w[e]) *
                     (double)widen(xp[ax[0].off[a] + ax[1].off[b] + ax[2].off[e]]);
            }
          }
        }
      } else {
        int t[GS_MAX];
        for (int i = 0; i < k; ++i) t[i] = 0;
        while (true) {
          double w = 1.0;
          i64 off = 0;
          bool zero = false;
          for (int i = 0; i < k; ++i) {
            const i64 o = ax[i].off[t[i]];
            if (o < 0) zero = true;
            off += o;
            w *= ax[i].w[t[i]];
          }
          if (!zero) acc += w * (double)widen(xp[off]);
          int i = k - 1;
          for (; i >= 0; --i) {
            if (++t[i] < ax[i].n) break;
            t[i] = 0;
          }
          if (i < 0) break;
        }
      }
      y[yoff + c * p.ys_c] = Narrow<T>::from(acc);
    }
  }
}

#define GRID_SAMPLE_K(NAME, T, K, N, TAG)                                                    \
  extern "C" __global__ void grid_sample_##NAME##_##TAG(const T *x, const void *g, T *y,     \
                                                       GridParams p) {                       \
    grid_kernel<T, K, N>(x, g, y, p);                                                        \
  }

#define GRID_SAMPLE(NAME, T)                                                                 \
  GRID_SAMPLE_K(NAME, T, 1, 1, k1_t1)                                                        \
  GRID_SAMPLE_K(NAME, T, 1, 2, k1_t2)                                                        \
  GRID_SAMPLE_K(NAME, T, 1, 4, k1_t4)                                                        \
  GRID_SAMPLE_K(NAME, T, 2, 1, k2_t1)                                                        \
  GRID_SAMPLE_K(NAME, T, 2, 2, k2_t2)                                                        \
  GRID_SAMPLE_K(NAME, T, 2, 4, k2_t4)                                                        \
  GRID_SAMPLE_K(NAME, T, 3, 1, k3_t1)                                                        \
  GRID_SAMPLE_K(NAME, T, 3, 2, k3_t2)                                                        \
  GRID_SAMPLE_K(NAME, T, 3, 4, k3_t4)                                                        \
  GRID_SAMPLE_K(NAME, T, 0, 4, k0)

GRID_SAMPLE(f32, float)
GRID_SAMPLE(f64, double)
GRID_SAMPLE(f16, f16)
GRID_SAMPLE(bf16, bf16)
