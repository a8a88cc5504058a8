// Channel-wise and grouped normalizations: InstanceNormalization, GroupNormalization (per
// group and per channel affine), MeanVarianceNormalization, BatchNormalization (inference as a
// per-channel affine, training with batch statistics), LRN, and LpNormalization along any axis.
//
// Variant defines: NORM_T (T: x and y) and NORM_A (A: the compute type: float, or double for
// double inputs). The parameters (scale, bias, means, variances) may have any float dtype, read
// by dtype code.
//
// Grouped statistics: each group (an instance and channel for InstanceNormalization, an
// instance and group of channels for GroupNormalization, the kept coordinates for
// MeanVarianceNormalization, a channel for BatchNormalization training) is `len` elements laid
// out as segments (decomposed over sdims) of `run` elements with stride rx (ry in y). A group
// may be split over `nsplit` blocks: group_stats writes each block's shifted sums (about the
// group's first element, so the partial sums simply add) to a workspace, and group_apply
// combines them; with nsplit == 1 and no workspace group_apply computes the statistics itself.

typedef NORM_T T;
typedef NORM_A A;

#define NORM_AFFINE 0 // (x - mean) / sqrt(var + eps) * scale + bias
#define NORM_MVN 1    // (x - mean) / (sqrt(var) + 1e-9)
#define NORM_BN 2     // x * a + c, a = scale / sqrt(var + eps), c = bias - mean * a

__device__ __forceinline__ A load_param(const void *p, i64 off, int code) {
  switch (code) {
  case 1: return (A)((const float *)p)[off];
  case 11: return (A)((const double *)p)[off];
  case 10: return (A)__half2float(((const f16 *)p)[off]);
  case 16: return (A)__bfloat162float(((const bf16 *)p)[off]);
  default: return (A)0;
  }
}

__device__ __forceinline__ void store_param(void *p, i64 off, int code, A v) {
  switch (code) {
  case 1: ((float *)p)[off] = (float)v; break;
  case 11: ((double *)p)[off] = (double)v; break;
  case 10: ((f16 *)p)[off] = Narrow<f16>::from(v); break;
  case 16: ((bf16 *)p)[off] = Narrow<bf16>::from(v); break;
  default: break;
  }
}

template <typename E> __device__ __forceinline__ A to_acc(E v) { return (A)widen(v); }

// Sums a and b over the block (blockDim.x a multiple of 32); every thread gets the sums.
__device__ __forceinline__ void block_sum2(A &a, A &b) {
  __shared__ A ra[32], rb[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (l == 0) {
    ra[w] = a;
    rb[w] = b;
  }
  __syncthreads();
  a = l < nw ? ra[l] : (A)0;
  b = l < nw ? rb[l] : (A)0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
}

struct GroupParams {
  i64 groups;
  i64 len;
  i64 run;
  i64 rx, ry;
  i32 nsplit;
  i32 grank;
  i32 srank;
  i32 mode;
  i32 has_affine;
  i32 scale_dt, bias_dt;
  i32 _pad;
  // Affine index of an element: (g % amod) * amul + c0 * aseg, c0 its coordinate along sdims[0].
  i64 amod, amul, aseg;
  i64 scale_stride, bias_stride;
  double eps;
  i64 gdims[MAX_RANK], gx[MAX_RANK], gy[MAX_RANK];
  i64 sdims[MAX_RANK], sx[MAX_RANK], sy[MAX_RANK];
};

__device__ __forceinline__ void group_base(const GroupParams &p, i64 g, i64 &xb, i64 &yb) {
  i64 rem = g;
  xb = 0;
  yb = 0;
  for (int k = p.grank - 1; k >= 0; --k) {
    const i64 d = p.gdims[k];
    const i64 c = rem % d;
    rem /= d;
    xb += c * p.gx[k];
    yb += c * p.gy[k];
  }
}

__device__ __forceinline__ void segment_base(const GroupParams &p, i64 seg, i64 &xo, i64 &yo,
                                             i64 &c0) {
  c0 = 0;
  for (int k = p.srank - 1; k >= 0; --k) {
    const i64 d = p.sdims[k];
    const i64 c = seg % d;
    seg /= d;
    xo += c * p.sx[k];
    yo += c * p.sy[k];
    c0 = c;
  }
}

// Calls f(x offset, y offset, c0) for elements [e0, e1) of the group based at (xb, yb), the
// block's threads sharing the work.
template <typename F>
__device__ __forceinline__ void walk(const GroupParams &p, i64 xb, i64 yb, i64 e0, i64 e1,
                                     F &&f) {
  if (e0 >= e1) return;
  const i64 run = p.run, B = blockDim.x;
  if (run < B && p.srank > 0) {
    // Short runs: one element per thread, its segment decomposed.
    for (i64 e = e0 + threadIdx.x; e < e1; e += B) {
      const i64 seg = e / run, j = e - seg * run;
      i64 xo = xb, yo = yb, c0;
      segment_base(p, seg, xo, yo, c0);
      f(xo + j * p.rx, yo + j * p.ry, c0);
    }
    return;
  }
  i64 seg = e0 / run, j0 = e0 - seg * run;
  while (e0 < e1) {
    const i64 jend = min(run, j0 + (e1 - e0));
    i64 xo = xb, yo = yb, c0;
    segment_base(p, seg, xo, yo, c0);
    i64 j = j0 + threadIdx.x;
    for (; j + 3 * B < jend; j += 4 * B) {
      f(xo + j * p.rx, yo + j * p.ry, c0);
      f(xo + (j + B) * p.rx, yo + (j + B) * p.ry, c0);
      f(xo + (j + 2 * B) * p.rx, yo + (j + 2 * B) * p.ry, c0);
      f(xo + (j + 3 * B) * p.rx, yo + (j + 3 * B) * p.ry, c0);
    }
    for (; j < jend; j += B) f(xo + j * p.rx, yo + j * p.ry, c0);
    e0 += jend - j0;
    ++seg;
    j0 = 0;
  }
}

// Shifted sums (about the group's first element) of elements [e0, e1) of group g, over the
// block.
__device__ __forceinline__ void group_sums(const T *__restrict__ x, const GroupParams &p,
                                           i64 xb, i64 yb, i64 e0, i64 e1, A shift, A &s1,
                                           A &s2) {
  s1 = 0;
  s2 = 0;
  walk(p, xb, yb, e0, e1, [&](i64 xo, i64, i64) {
    const A d = to_acc(x[xo]) - shift;
    s1 += d;
    s2 += d * d;
  });
  block_sum2(s1, s2);
}

__device__ __forceinline__ void mean_var(A s1, A s2, A shift, i64 len, double &mean,
                                         double &var) {
  const double n = (double)len;
  mean = (double)shift + (double)s1 / n;
  var = ((double)s2 - (double)s1 * (double)s1 / n) / n;
  if (var < 0) var = 0;
}

// Combines the workspace partials of group g over the block.
__device__ __forceinline__ void combine(const A *__restrict__ ws, const GroupParams &p, i64 g,
                                        A &s1, A &s2) {
  s1 = 0;
  s2 = 0;
  for (i64 i = threadIdx.x; i < p.nsplit; i += blockDim.x) {
    s1 += ws[2 * (g * p.nsplit + i)];
    s2 += ws[2 * (g * p.nsplit + i) + 1];
  }
  block_sum2(s1, s2);
}

extern "C" __global__ void __launch_bounds__(256)
    group_stats(const T *__restrict__ x, A *__restrict__ ws, GroupParams p) {
  const i64 total = p.groups * p.nsplit;
  for (i64 b = blockIdx.x; b < total; b += gridDim.x) {
    const i64 g = b / p.nsplit, s = b % p.nsplit;
    i64 xb, yb;
    group_base(p, g, xb, yb);
    const A shift = to_acc(x[xb]);
    A s1, s2;
    group_sums(x, p, xb, yb, p.len * s / p.nsplit, p.len * (s + 1) / p.nsplit, shift, s1, s2);
    if (threadIdx.x == 0) {
      ws[2 * b] = s1;
      ws[2 * b + 1] = s2;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256)
    group_apply(const T *__restrict__ x, T *__restrict__ y, const void *scale,
                const void *bias, const A *__restrict__ ws, GroupParams p) {
  const i64 total = p.groups * p.nsplit;
  for (i64 b = blockIdx.x; b < total; b += gridDim.x) {
    const i64 g = b / p.nsplit, s = b % p.nsplit;
    i64 xb, yb;
    group_base(p, g, xb, yb);
    const A shift = to_acc(x[xb]);
    A s1, s2;
    if (ws != nullptr) {
      combine(ws, p, g, s1, s2);
    } else {
      group_sums(x, p, xb, yb, 0, p.len, shift, s1, s2);
    }
    double dm, dv;
    mean_var(s1, s2, shift, p.len, dm, dv);
    const A mean = (A)dm, var = (A)dv;
    const A rstd =
        p.mode == NORM_MVN ? (A)(1.0 / (sqrt(dv) + 1e-9)) : (A)(1.0 / sqrt(dv + p.eps));
    const i64 gk = (g % p.amod) * p.amul;
    // Affine coefficients of the current c0, reloaded when it changes.
    i64 cur = -1;
    A sc = 1, bi = 0, a = 1, c = 0;
    walk(p, xb, yb, p.len * s / p.nsplit, p.len * (s + 1) / p.nsplit,
         [&](i64 xo, i64 yo, i64 c0) {
           if (c0 != cur) {
             cur = c0;
             if (p.has_affine) {
               const i64 k = gk + c0 * p.aseg;
               sc = load_param(scale, k * p.scale_stride, p.scale_dt);
               bi = load_param(bias, k * p.bias_stride, p.bias_dt);
             }
             if (p.mode == NORM_BN) {
               a = sc / (A)sqrt(var + (A)p.eps);
               c = bi - mean * a;
             }
           }
           const A v = to_acc(x[xo]);
           A r;
           if (p.mode == NORM_AFFINE) {
             r = (v - mean) * rstd * sc + bi;
           } else if (p.mode == NORM_MVN) {
             r = (v - mean) * rstd;
           } else {
             r = v * a + c;
           }
           y[yo] = Narrow<T>::from(r);
         });
  }
}

// BatchNormalization statistics outputs, one thread per channel: running mean and variance
// (momentum blend), saved mean and saved 1 / sqrt(var + eps) in training mode (batch statistics
// from the workspace), or copies of the input mean / variance in inference mode.
struct BnFinal {
  i64 channels;
  i32 flags; // 1, 2, 4, 8: outputs 1..4 wanted; 16: inference (copy the inputs)
  i32 mean_dt, var_dt, out_dt;
  double momentum, eps;
  i64 mean_s, var_s;
  i64 out_s[4];
};

extern "C" __global__ void bn_final(const T *__restrict__ x, const A *__restrict__ ws,
                                    const void *in_mean, const void *in_var, void *o1, void *o2,
                                    void *o3, void *o4, GroupParams p, BnFinal f) {
  GRID_LOOP(ch, f.channels) {
    const A rm = load_param(in_mean, ch * f.mean_s, f.mean_dt);
    const A rv = load_param(in_var, ch * f.var_s, f.var_dt);
    if (f.flags & 16) {
      if (f.flags & 1) store_param(o1, ch * f.out_s[0], f.out_dt, rm);
      if (f.flags & 2) store_param(o2, ch * f.out_s[1], f.out_dt, rv);
      if (f.flags & 4) store_param(o3, ch * f.out_s[2], f.out_dt, rm);
      if (f.flags & 8) store_param(o4, ch * f.out_s[3], f.out_dt, rv);
      continue;
    }
    i64 xb, yb;
    group_base(p, ch, xb, yb);
    const A shift = to_acc(x[xb]);
    A s1 = 0, s2 = 0;
    for (i64 i = 0; i < p.nsplit; ++i) {
      s1 += ws[2 * (ch * p.nsplit + i)];
      s2 += ws[2 * (ch * p.nsplit + i) + 1];
    }
    double dm, dv;
    mean_var(s1, s2, shift, p.len, dm, dv);
    const A m = (A)dm, v = (A)dv, mo = (A)f.momentum;
    if (f.flags & 1) store_param(o1, ch * f.out_s[0], f.out_dt, rm * mo + m * ((A)1 - mo));
    if (f.flags & 2) store_param(o2, ch * f.out_s[1], f.out_dt, rv * mo + v * ((A)1 - mo));
    if (f.flags & 4) store_param(o3, ch * f.out_s[2], f.out_dt, m);
    if (f.flags & 8) store_param(o4, ch * f.out_s[3], f.out_dt, (A)1 / (A)sqrt(v + (A)f.eps));
  }
}

// ---- BatchNormalization inference: y = x * a + c per channel (or per activation) ----

struct BnParams {
  i64 n;
  i64 channels;
  i64 inner;
  i32 per; // 1: per channel; 0: per channel and position (parameters of C * inner values)
  i32 contig;
  i32 rank;
  i32 dt[4]; // scale, bias, mean, var dtype codes
  i32 _pad;
  double eps;
  i64 ps[4]; // parameter element strides (per channel) or 1 (per activation, contiguous)
  i64 dims[MAX_RANK], xs[MAX_RANK], ys[MAX_RANK];
};

__device__ __forceinline__ void bn_coef(const BnParams &p, const void *sc, const void *b,
                                        const void *m, const void *v, i64 k, A &a, A &c) {
  const A s = load_param(sc, k * p.ps[0], p.dt[0]);
  const A bias = load_param(b, k * p.ps[1], p.dt[1]);
  const A mean = load_param(m, k * p.ps[2], p.dt[2]);
  const A var = load_param(v, k * p.ps[3], p.dt[3]);
  a = s / (A)sqrt(var + (A)p.eps);
  c = bias - mean * a;
}

extern "C" __global__ void bn_infer(const T *__restrict__ x, T *__restrict__ y, const void *sc,
                                    const void *b, const void *m, const void *v, BnParams p) {
  GRID_LOOP(i, p.n) {
    i64 xo = i, yo = i;
    if (!p.contig) {
      i64 rem = i;
      xo = 0;
      yo = 0;
      for (int k = p.rank - 1; k >= 0; --k) {
        const i64 c = rem % p.dims[k];
        rem /= p.dims[k];
        xo += c * p.xs[k];
        yo += c * p.ys[k];
      }
    }
    const i64 j = i % p.inner, ch = (i / p.inner) % p.channels;
    A a, c;
    bn_coef(p, sc, b, m, v, p.per ? ch : ch * p.inner + j, a, c);
    y[yo] = Narrow<T>::from(to_acc(x[xo]) * a + c);
  }
}

constexpr int VEC = 16 / (int)sizeof(T);

// Contiguous x and y, per-channel parameters, inner % VEC == 0, 16-byte aligned.
extern "C" __global__ void bn_infer_vec(const T *__restrict__ x, T *__restrict__ y,
                                        const void *sc, const void *b, const void *m,
                                        const void *v, BnParams p) {
  const i64 nv = p.n / VEC;
  GRID_LOOP(i, nv) {
    const i64 e = i * VEC;
    const i64 ch = (e / p.inner) % p.channels;
    A a, c;
    bn_coef(p, sc, b, m, v, ch, a, c);
    uint4 w = reinterpret_cast<const uint4 *>(x)[i];
    T vals[VEC];
    memcpy(&vals[0], &w, 16);
#pragma unroll
    for (int k = 0; k < VEC; ++k) vals[k] = Narrow<T>::from(to_acc(vals[k]) * a + c);
    memcpy(&w, &vals[0], 16);
    reinterpret_cast<uint4 *>(y)[i] = w;
  }
}

// ---- LRN: x / (bias + alpha / size * sum of squares over a channel window) ^ beta ----

struct LrnParams {
  i64 n;
  i64 channels;
  i64 inner;
  i64 lo, hi; // window: [c - lo, c + hi]
  i32 contig;
  i32 rank;
  double alpha_over_size, beta, bias;
  i64 dims[MAX_RANK], xs[MAX_RANK], ys[MAX_RANK];
};

extern "C" __global__ void lrn(const T *__restrict__ x, T *__restrict__ y, LrnParams p) {
  GRID_LOOP(i, p.n) {
    i64 xo = i, yo = i, cs = p.inner;
    if (!p.contig) {
      i64 rem = i;
      xo = 0;
      yo = 0;
      for (int k = p.rank - 1; k >= 0; --k) {
        const i64 c = rem % p.dims[k];
        rem /= p.dims[k];
        xo += c * p.xs[k];
        yo += c * p.ys[k];
      }
      cs = p.xs[1];
    }
    const i64 ch = (i / p.inner) % p.channels;
    const i64 c0 = ch - p.lo < 0 ? 0 : ch - p.lo;
    const i64 c1 = ch + p.hi > p.channels - 1 ? p.channels - 1 : ch + p.hi;
    A sq = 0;
    for (i64 cc = c0; cc <= c1; ++cc) {
      const A v = to_acc(x[xo + (cc - ch) * cs]);
      sq += v * v;
    }
    const A v0 = to_acc(x[xo]);
    const A den = (A)pow((A)p.bias + (A)p.alpha_over_size * sq, (A)p.beta);
    y[yo] = Narrow<T>::from(v0 / den);
  }
}

// ---- LpNormalization along any axis: one thread per line ----

struct LpParams {
  i64 lines;
  i64 len;
  i64 ax_x, ax_y;
  i32 p;
  i32 rank;
  i64 dims[MAX_RANK], xs[MAX_RANK], ys[MAX_RANK];
};

extern "C" __global__ void lp_lines(const T *__restrict__ x, T *__restrict__ y, LpParams p) {
  GRID_LOOP(line, p.lines) {
    i64 rem = line, xo = 0, yo = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      const i64 c = rem % p.dims[k];
      rem /= p.dims[k];
      xo += c * p.xs[k];
      yo += c * p.ys[k];
    }
    A s = 0;
    for (i64 k = 0; k < p.len; ++k) {
      const A v = to_acc(x[xo + k * p.ax_x]);
      s += p.p == 1 ? (A)fabs(v) : v * v;
    }
    const A nrm = p.p == 1 ? s : (A)sqrt(s);
    for (i64 k = 0; k < p.len; ++k) {
      const A v = to_acc(x[xo + k * p.ax_x]);
      y[yo + k * p.ax_y] = Narrow<T>::from(nrm == (A)0 ? (A)0 : v / nrm);
    }
  }
}
