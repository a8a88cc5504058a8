// Row-wise normalizations over the trailing axes of a tensor: LayerNormalization,
// RMSNormalization / SimplifiedLayerNormalization, SkipLayerNormalization /
// SkipSimplifiedLayerNormalization, and LpNormalization along a contiguous last axis.
//
// Variant defines: NORM_T (T: x, skip, y and the skip sum), NORM_S (S: scale, bias and skip
// bias), NORM_A (A: the accumulator and the statistics outputs: float, or double for double
// inputs). Half types compute in float.
//
// row_reg_<TPR>_<ITEMS>_<vec|one>: TPR threads per row (32: one warp, four rows per block; 64
// and more: the whole block on one row). Each thread holds ITEMS packs of VEC elements (16
// bytes, `vec`) or of one element (`one`) of its row in registers, so the row is read once and
// written once; the statistics are exact two-pass sums over the registers. Rows must have
// unit inner stride and a uniform row stride (the host checks it), `vec` also 16-byte aligned
// pointers and row strides and hidden sizes that are multiples of VEC.
//
// row_gen_<32|256>: any strides and broadcasts and rows of any length; reads each row twice
// (shifted sums for the statistics, then the normalization).

typedef NORM_T T;
typedef NORM_S S;
typedef NORM_A A;

#define RF_SCALE 1
#define RF_BETA 2
#define RF_SKIP 4
#define RF_SBIAS 8
#define RF_MEAN 16
#define RF_INV 32
#define RF_SUM 64

#define MODE_LN 0
#define MODE_RMS 1
#define MODE_L1 2
#define MODE_L2 3

constexpr int VEC = 16 / (int)sizeof(T);

// Loads N consecutive elements (16-byte words when the pack is a multiple of 16 bytes).
template <typename E, int N> __device__ __forceinline__ void ldv(const E *p, E (&out)[N]) {
  constexpr int B = (int)sizeof(E) * N;
  if constexpr (B % 16 == 0) {
    uint4 w[B / 16];
    const uint4 *q = reinterpret_cast<const uint4 *>(p);
#pragma unroll
    for (int i = 0; i < B / 16; ++i) w[i] = q[i];
    memcpy(&out[0], &w[0], B);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = p[i];
  }
}

template <typename E, int N> __device__ __forceinline__ void stv(E *p, const E (&in)[N]) {
  constexpr int B = (int)sizeof(E) * N;
  if constexpr (B % 16 == 0) {
    uint4 w[B / 16];
    memcpy(&w[0], &in[0], B);
    uint4 *q = reinterpret_cast<uint4 *>(p);
#pragma unroll
    for (int i = 0; i < B / 16; ++i) q[i] = w[i];
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = in[i];
  }
}

template <typename E> __device__ __forceinline__ A to_acc(E v) { return (A)widen(v); }

// Sum over the TPR threads of a row (TPR >= 32). Every thread gets the same value. `red`
// holds one value per warp (TPR > 32 only).
template <int TPR> __device__ __forceinline__ A row_sum(A v, A *red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (TPR > 32) {
    constexpr int NW = TPR / 32;
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) red[w] = v;
    __syncthreads();
    v = l < NW ? red[l] : (A)0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

// Parameters of the register kernels.
struct RowFast {
  i64 rows;
  i64 hidden;
  i64 x_row, y_row, sum_row;
  // Skip row of row r: ((r / skip_div) % skip_mod) * skip_row.
  i64 skip_row, skip_div, skip_mod;
  i64 stat_stride;
  double eps;
  i32 mode;
  i32 flags;
};

// The row statistics from the sums: the mean and the factor each centred value is multiplied
// by: 1 / sqrt(var + eps) for LN and RMS, 1 / norm for L1 / L2. Computed in double as the CPU
// provider does, then narrowed.
__device__ __forceinline__ void finish_stats(int mode, A s1, A s2, A shift, i64 h, double eps,
                                             A &mean, A &factor) {
  const double n = (double)h;
  if (mode == MODE_LN) {
    const double m = (double)shift + (double)s1 / n;
    double var = ((double)s2 - (double)s1 * (double)s1 / n) / n;
    if (var < 0) var = 0;
    mean = (A)m;
    factor = (A)(1.0 / sqrt(var + eps));
  } else if (mode == MODE_RMS) {
    mean = (A)0;
    factor = (A)(1.0 / sqrt((double)s1 / n + eps));
  } else {
    // L1 / L2: the reciprocal norm; zero norms give zero.
    const double nrm = mode == MODE_L1 ? (double)s1 : sqrt((double)s1);
    mean = (A)0;
    factor = nrm == 0 ? (A)0 : (A)(1.0 / nrm);
  }
}

// What a row sums for its statistics: x for LN, |x| for L1, x * x for RMS and L2.
__device__ __forceinline__ A stat_term(int mode, A v) {
  return mode == MODE_LN ? v : (mode == MODE_L1 ? (A)fabs(v) : v * v);
}

template <int TPR, int ITEMS, int V>
__device__ __forceinline__ void row_reg(const T *__restrict__ x, const T *__restrict__ skip,
                                        const S *__restrict__ sbias,
                                        const S *__restrict__ scale,
                                        const S *__restrict__ beta, T *__restrict__ y,
                                        A *__restrict__ mean_out, A *__restrict__ inv_out,
                                        T *__restrict__ sum_out, const RowFast &p) {
  constexpr int RPB = TPR >= 64 ? 1 : 128 / TPR;
  __shared__ A red[32];
  const int lane = threadIdx.x % TPR;
  const int sub = threadIdx.x / TPR;
  const i64 H = p.hidden;
  const int flags = p.flags, mode = p.mode;
  // Scale and bias are loaded with the row (before the reductions, off the critical path)
  // when they fit in registers.
  constexpr bool PREFETCH = ITEMS * V * (int)sizeof(S) <= 128;
  for (i64 row = (i64)blockIdx.x * RPB + sub; row < p.rows; row += (i64)gridDim.x * RPB) {
    T raw[ITEMS][V];
    S sc[ITEMS][V], bb[ITEMS][V];
    const T *xr = x + row * p.x_row;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const i64 e = ((i64)k * TPR + lane) * V;
      if (e < H) {
        ldv<T, V>(xr + e, raw[k]);
        if constexpr (PREFETCH) {
          if (flags & RF_SCALE) ldv<S, V>(scale + e, sc[k]);
          if (flags & RF_BETA) ldv<S, V>(beta + e, bb[k]);
        }
      }
    }
    if (flags & RF_SKIP) {
      const T *sr = skip + ((row / p.skip_div) % p.skip_mod) * p.skip_row;
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const i64 e = ((i64)k * TPR + lane) * V;
        if (e < H) {
          T sv[V];
          ldv<T, V>(sr + e, sv);
          S bv[V];
          if (flags & RF_SBIAS) ldv<S, V>(sbias + e, bv);
#pragma unroll
          for (int i = 0; i < V; ++i) {
            A s = to_acc(raw[k][i]) + to_acc(sv[i]);
            if (flags & RF_SBIAS) s += to_acc(bv[i]);
            // The sum is rounded to T before the statistics, as the CPU provider does.
            raw[k][i] = Narrow<T>::from(s);
          }
        }
      }
      if (flags & RF_SUM) {
        T *ur = sum_out + row * p.sum_row;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
          const i64 e = ((i64)k * TPR + lane) * V;
          if (e < H) stv<T, V>(ur + e, raw[k]);
        }
      }
    }
    A s1 = 0;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const i64 e = ((i64)k * TPR + lane) * V;
      if (e < H) {
#pragma unroll
        for (int i = 0; i < V; ++i) s1 += stat_term(mode, to_acc(raw[k][i]));
      }
    }
    s1 = row_sum<TPR>(s1, red);
    A mean, factor;
    if (mode == MODE_LN) {
      // Exact two-pass: the centred sum of squares over the registers.
      const A m = (A)((double)s1 / (double)H);
      A s2 = 0;
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const i64 e = ((i64)k * TPR + lane) * V;
        if (e < H) {
#pragma unroll
          for (int i = 0; i < V; ++i) {
            const A d = to_acc(raw[k][i]) - m;
            s2 += d * d;
          }
        }
      }
      s2 = row_sum<TPR>(s2, red);
      mean = m;
      factor = (A)(1.0 / sqrt((double)s2 / (double)H + p.eps));
    } else {
      finish_stats(mode, s1, (A)0, (A)0, H, p.eps, mean, factor);
    }
    T *yr = y + row * p.y_row;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const i64 e = ((i64)k * TPR + lane) * V;
      if (e < H) {
        if constexpr (!PREFETCH) {
          if (flags & RF_SCALE) ldv<S, V>(scale + e, sc[k]);
          if (flags & RF_BETA) ldv<S, V>(beta + e, bb[k]);
        }
        T out[V];
#pragma unroll
        for (int i = 0; i < V; ++i) {
          A r = (to_acc(raw[k][i]) - mean) * factor;
          if (flags & RF_SCALE) r = r * to_acc(sc[k][i]);
          if (flags & RF_BETA) r = r + to_acc(bb[k][i]);
          out[i] = Narrow<T>::from(r);
        }
        stv<T, V>(yr + e, out);
      }
    }
    if (lane == 0) {
      if (flags & RF_MEAN) mean_out[row * p.stat_stride] = mean;
      if (flags & RF_INV) inv_out[row * p.stat_stride] = factor;
    }
  }
}

#define ROW_REG(TPR, ITEMS, NAME, V)                                                         \
  extern "C" __global__ void __launch_bounds__((TPR) >= 64 ? (TPR) : 128)                   \
      row_reg_##TPR##_##ITEMS##_##NAME(const T *x, const T *skip, const S *sbias,            \
                                       const S *scale, const S *beta, T *y, A *mean,         \
                                       A *inv, T *sum, RowFast p) {                          \
    pdl_begin();                                                                             \
    row_reg<TPR, ITEMS, V>(x, skip, sbias, scale, beta, y, mean, inv, sum, p);               \
  }

// Keep in step with REG_VEC / REG_ONE in src/ops/norm/row.rs.
#define ROW_REG_VEC(TPR, ITEMS) ROW_REG(TPR, ITEMS, vec, VEC)
#define ROW_REG_ONE(TPR, ITEMS) ROW_REG(TPR, ITEMS, one, 1)

ROW_REG_VEC(32, 1)
ROW_REG_VEC(32, 2)
ROW_REG_VEC(32, 4)
ROW_REG_VEC(32, 8)
ROW_REG_VEC(64, 8)
ROW_REG_VEC(128, 8)
ROW_REG_VEC(256, 8)
ROW_REG_VEC(512, 8)

ROW_REG_ONE(32, 1)
ROW_REG_ONE(32, 2)
ROW_REG_ONE(32, 4)
ROW_REG_ONE(32, 8)
ROW_REG_ONE(64, 8)
ROW_REG_ONE(128, 8)
ROW_REG_ONE(256, 8)
ROW_REG_ONE(512, 8)
ROW_REG_ONE(1024, 8)

// ---- general layouts ----

struct RowGen {
  i64 rows;
  i64 hidden;
  double eps;
  i32 mode;
  i32 flags;
  i32 orank;
  i32 irank;
  i64 odims[MAX_RANK];
  i64 idims[MAX_RANK];
  // Outer strides: x, y, skip, sum, statistics.
  i64 xo[MAX_RANK], yo[MAX_RANK], ko[MAX_RANK], uo[MAX_RANK], so[MAX_RANK];
  // Inner strides: x, y, skip, sum, scale, bias, skip bias.
  i64 xi[MAX_RANK], yi[MAX_RANK], ki[MAX_RANK], ui[MAX_RANK], gi[MAX_RANK], bi[MAX_RANK],
      ci[MAX_RANK];
};

struct InnerOff {
  i64 x, y, k, u, g, b, c;
};

__device__ __forceinline__ InnerOff inner_offsets(const RowGen &p, i64 j) {
  InnerOff o = {0, 0, 0, 0, 0, 0, 0};
  for (int k = p.irank - 1; k >= 0; --k) {
    const i64 d = p.idims[k];
    const i64 c = j % d;
    j /= d;
    o.x += c * p.xi[k];
    o.y += c * p.yi[k];
    o.k += c * p.ki[k];
    o.u += c * p.ui[k];
    o.g += c * p.gi[k];
    o.b += c * p.bi[k];
    o.c += c * p.ci[k];
  }
  return o;
}

template <int TPR>
__device__ __forceinline__ void row_gen(const T *__restrict__ x, const T *__restrict__ skip,
                                        const S *__restrict__ sbias,
                                        const S *__restrict__ scale,
                                        const S *__restrict__ beta, T *__restrict__ y,
                                        A *__restrict__ mean_out, A *__restrict__ inv_out,
                                        T *__restrict__ sum_out, const RowGen &p) {
  constexpr int RPB = TPR >= 64 ? 1 : 128 / TPR;
  __shared__ A red[32];
  const int lane = threadIdx.x % TPR;
  const int sub = threadIdx.x / TPR;
  const i64 H = p.hidden;
  const int flags = p.flags, mode = p.mode;
  for (i64 row = (i64)blockIdx.x * RPB + sub; row < p.rows; row += (i64)gridDim.x * RPB) {
    i64 rem = row, xb = 0, yb = 0, kb = 0, ub = 0, sb = 0;
    for (int k = p.orank - 1; k >= 0; --k) {
      const i64 d = p.odims[k];
      const i64 c = rem % d;
      rem /= d;
      xb += c * p.xo[k];
      yb += c * p.yo[k];
      kb += c * p.ko[k];
      ub += c * p.uo[k];
      sb += c * p.so[k];
    }
    // The value normalized at inner offsets o: x, plus skip and skip bias rounded to T.
    auto value = [&](const InnerOff &o) -> A {
      A v = to_acc(x[xb + o.x]);
      if (flags & RF_SKIP) {
        v += to_acc(skip[kb + o.k]);
        if (flags & RF_SBIAS) v += to_acc(sbias[o.c]);
        v = to_acc(Narrow<T>::from(v));
      }
      return v;
    };
    const A shift = mode == MODE_LN ? value(inner_offsets(p, 0)) : (A)0;
    A s1 = 0, s2 = 0;
    for (i64 j = lane; j < H; j += TPR) {
      const InnerOff o = inner_offsets(p, j);
      const A v = value(o);
      if (flags & RF_SUM) sum_out[ub + o.u] = Narrow<T>::from(v);
      if (mode == MODE_LN) {
        const A d = v - shift;
        s1 += d;
        s2 += d * d;
      } else {
        s1 += stat_term(mode, v);
      }
    }
    s1 = row_sum<TPR>(s1, red);
    if (mode == MODE_LN) s2 = row_sum<TPR>(s2, red);
    A mean, factor;
    finish_stats(mode, s1, s2, shift, H, p.eps, mean, factor);
    for (i64 j = lane; j < H; j += TPR) {
      const InnerOff o = inner_offsets(p, j);
      A r = (value(o) - mean) * factor;
      if (flags & RF_SCALE) r = r * to_acc(scale[o.g]);
      if (flags & RF_BETA) r = r + to_acc(beta[o.b]);
      y[yb + o.y] = Narrow<T>::from(r);
    }
    if (lane == 0) {
      if (flags & RF_MEAN) mean_out[sb] = mean;
      if (flags & RF_INV) inv_out[sb] = factor;
    }
  }
}

#define ROW_GEN(TPR)                                                                         \
  extern "C" __global__ void __launch_bounds__((TPR) >= 64 ? (TPR) : 128)                   \
      row_gen_##TPR(const T *x, const T *skip, const S *sbias, const S *scale,               \
                    const S *beta, T *y, A *mean, A *inv, T *sum, RowGen p) {                \
    pdl_begin();                                                                             \
    row_gen<TPR>(x, skip, sbias, scale, beta, y, mean, inv, sum, p);                         \
  }

ROW_GEN(32)
ROW_GEN(256)
