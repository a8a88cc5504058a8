// Softmax (MODE 0), LogSoftmax (MODE 1) and Hardmax (MODE 2) over the row axes (one axis from
// opset 13, the trailing axes from `axis` before), for float, double, float16 and bfloat16.
// Half types compute in float. The host coalesces the input into kept axes (one row each)
// and row axes, then picks:
//   soft_rvN_X / soft_rsN_X: a group of blockDim.x threads per row holding the row in
//       registers, N vectors a thread: one read, max and sum reductions (shuffles alone for
//       groups of up to a warp), one write (rv: 16-byte vectors of a contiguous row, rs:
//       scalars). 2 element transfers (read + write) per element.
//   soft_loopv_X: contiguous aligned rows longer than the registers hold: online max / sum
//       over 16-byte vectors, then a second read that writes (3 transfers, the second read
//       partly from L2).
//   soft_loop_X: any other row: the same one element at a time (Hardmax: the first maximum,
//       then the one-hot write).
//   soft_tile_X: rows whose axis is not the fast one in memory: threadIdx.x over rows,
//       threadIdx.y over the row, combined through shared memory.

struct SoftParams {
  i64 rows;
  i64 len;
  i32 k_rank;
  i32 r_rank;
  i32 contig;  // one row axis of stride 1 in both input and output
  i32 _pad;
  i64 k_dims[MAX_RANK];
  i64 k_in[MAX_RANK];
  i64 k_out[MAX_RANK];
  i64 r_dims[MAX_RANK];
  i64 r_in[MAX_RANK];
  i64 r_out[MAX_RANK];
};

template <typename F> struct SumOp {
  DEV F combine(F a, F b) const { return a + b; }
};
template <typename F> struct StatOp {
  DEV MaxSum<F> combine(MaxSum<F> a, MaxSum<F> b) const { return maxsum_combine(a, b); }
};

DEV i64 row_in(const SoftParams &p, i64 j) {
  return p.contig ? j : flat_offset(j, p.r_rank, p.r_dims, p.r_in);
}
DEV i64 row_out(const SoftParams &p, i64 j) {
  return p.contig ? j : flat_offset(j, p.r_rank, p.r_dims, p.r_out);
}

// The value written for x, given the row's max m and r = 1 / sum (softmax) or log(sum).
template <typename F> DEV F soft_value(F x, F m, F r) {
  if (MODE == 0) return m_exp(x - m) * r;
  return x - m - r;
}

// NaN-ignoring maximum (one instruction). A NaN in a row still makes the whole row NaN: its
// exp(NaN - m) makes the sum NaN, and every output is a product with (or log of) the sum.
DEV float m_fmax(float a, float b) { return fmaxf(a, b); }
DEV double m_fmax(double a, double b) { return fmax(a, b); }
template <typename F> struct FMaxOp {
  DEV F combine(F a, F b) const { return m_fmax(a, b); }
};

#if MODE < 2
// A row held in registers: a group of blockDim.x threads (a power of two; up to a warp reduces
// with shuffles alone) per row, blockDim.y rows a block; thread tx holds vectors tx, tx + G,
// ... tx + (NV - 1) G of V elements (V > 1: 16-byte loads and stores of a contiguous row).
// One read and one write per element.
template <typename X, int V, int NV>
DEV void soft_reg(const X *__restrict__ in, X *__restrict__ out, const SoftParams &p) {
  typedef typename Traits<X>::F F;
  __shared__ F smem[32];
  const int G = blockDim.x, tx = threadIdx.x;
  const i64 row = (i64)blockIdx.x * blockDim.y + threadIdx.y;
  const bool active = row < p.rows;
  i64 io = 0, oo = 0;
  if (active) split_offsets(row, p.k_rank, p.k_dims, p.k_in, p.k_out, io, oo);
  const i64 nvec = p.len / V;
  F vals[NV][V];
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const i64 j = (i64)c * G + tx;
    if (active && j < nvec) {
      if constexpr (V > 1) {
        const uint4 u = __ldg(reinterpret_cast<const uint4 *>(in + io) + j);
        const X *e = reinterpret_cast<const X *>(&u);
#pragma unroll
        for (int q = 0; q < V; ++q) vals[c][q] = (F)widen(e[q]);
      } else {
        vals[c][0] = (F)widen(in[io + row_in(p, j)]);
      }
    }
  }
  F m = -inf_of<F>();
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    if (active && (i64)c * G + tx < nvec) {
#pragma unroll
      for (int q = 0; q < V; ++q) m = m_fmax(m, vals[c][q]);
    }
  }
  const FMaxOp<F> mx;
  m = group_allreduce(m, mx, smem);
  F s = (F)0;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    if (active && (i64)c * G + tx < nvec) {
#pragma unroll
      for (int q = 0; q < V; ++q) {
        const F e = m_exp(vals[c][q] - m);
        if (MODE == 0) vals[c][q] = e;
        s += e;
      }
    }
  }
  s = group_allreduce(s, SumOp<F>(), smem);
  const F r = MODE == 0 ? (F)1 / s : m_log(s);
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const i64 j = (i64)c * G + tx;
    if (active && j < nvec) {
      if constexpr (V > 1) {
        uint4 u;
        X *e = reinterpret_cast<X *>(&u);
#pragma unroll
        for (int q = 0; q < V; ++q)
          e[q] = Narrow<X>::from(MODE == 0 ? vals[c][q] * r : vals[c][q] - m - r);
        reinterpret_cast<uint4 *>(out + oo)[j] = u;
      } else {
        out[oo + row_out(p, j)] =
            Narrow<X>::from(MODE == 0 ? vals[c][0] * r : vals[c][0] - m - r);
      }
    }
  }
}

// Online statistics of a vector of V elements: one rescale for the vector's maximum, then
// its exps. -inf elements add nothing (as maxsum_step skips them); a NaN makes the sum NaN.
template <typename F, int V> DEV MaxSum<F> maxsum_vec(MaxSum<F> a, const F (&x)[V]) {
  F vm = x[0];
#pragma unroll
  for (int q = 1; q < V; ++q) vm = m_fmax(vm, x[q]);
  if (vm > a.m) {
    a.s = a.m == -inf_of<F>() ? a.s : a.s * m_exp(a.m - vm);
    a.m = vm;
  }
#pragma unroll
  for (int q = 0; q < V; ++q) a.s += x[q] == -inf_of<F>() ? (F)0 : m_exp(x[q] - a.m);
  return a;
}

// Rows longer than the registers hold, contiguous and 16-byte aligned: online max / sum over
// 16-byte vectors (four loads in flight), then a second read that writes.
template <typename X>
DEV void soft_loopv(const X *__restrict__ in, X *__restrict__ out, const SoftParams &p) {
  typedef typename Traits<X>::F F;
  constexpr int V = (int)(16 / sizeof(X));
  constexpr int U = 4;
  __shared__ MaxSum<F> sstat[32];
  const int G = blockDim.x, tx = threadIdx.x;
  const i64 row = (i64)blockIdx.x * blockDim.y + threadIdx.y;
  const bool active = row < p.rows;
  i64 io = 0, oo = 0;
  if (active) split_offsets(row, p.k_rank, p.k_dims, p.k_in, p.k_out, io, oo);
  const i64 nvec = active ? p.len / V : 0;
  const uint4 *src = reinterpret_cast<const uint4 *>(in + io);
  MaxSum<F> st = maxsum_init<F>();
  for (i64 j0 = tx; j0 < nvec; j0 += (i64)U * G) {
    uint4 u[U];
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (j0 + (i64)k * G < nvec) u[k] = __ldg(src + j0 + (i64)k * G);
#pragma unroll
    for (int k = 0; k < U; ++k) {
      if (j0 + (i64)k * G < nvec) {
        const X *e = reinterpret_cast<const X *>(&u[k]);
        F x[V];
#pragma unroll
        for (int q = 0; q < V; ++q) x[q] = (F)widen(e[q]);
        st = maxsum_vec<F, V>(st, x);
      }
    }
  }
  st = group_allreduce(st, StatOp<F>(), sstat);
  const F m = st.m;
  // A +inf maximum makes exp(inf - inf) = NaN part of the sum, as the CPU provider has it.
  const F s = m == inf_of<F>() ? nan_of<F>() : st.s;
  const F r = MODE == 0 ? (F)1 / s : m_log(s);
  uint4 *dst = reinterpret_cast<uint4 *>(out + oo);
  for (i64 j0 = tx; j0 < nvec; j0 += (i64)U * G) {
    uint4 u[U];
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (j0 + (i64)k * G < nvec) u[k] = __ldg(src + j0 + (i64)k * G);
#pragma unroll
    for (int k = 0; k < U; ++k) {
      if (j0 + (i64)k * G < nvec) {
        const X *e = reinterpret_cast<const X *>(&u[k]);
        uint4 w;
        X *o = reinterpret_cast<X *>(&w);
#pragma unroll
        for (int q = 0; q < V; ++q) o[q] = Narrow<X>::from(soft_value((F)widen(e[q]), m, r));
        dst[j0 + (i64)k * G] = w;
      }
    }
  }
}
#endif

template <typename X>
DEV void soft_loop(const X *__restrict__ in, X *__restrict__ out, const SoftParams &p) {
  typedef typename Traits<X>::F F;
  const int G = blockDim.x, tx = threadIdx.x;
  const i64 row = (i64)blockIdx.x * blockDim.y + threadIdx.y;
  const bool active = row < p.rows;
  i64 io = 0, oo = 0;
  if (active) split_offsets(row, p.k_rank, p.k_dims, p.k_in, p.k_out, io, oo);
  if constexpr (MODE < 2) {
    __shared__ MaxSum<F> sstat[32];
    MaxSum<F> st = maxsum_init<F>();
    if (active)
      for (i64 j = tx; j < p.len; j += G) st = maxsum_step(st, (F)widen(in[io + row_in(p, j)]));
    st = group_allreduce(st, StatOp<F>(), sstat);
    const F m = st.m;
    // A +inf maximum makes exp(inf - inf) = NaN part of the sum, as the CPU provider has it.
    const F s = m == inf_of<F>() ? nan_of<F>() : st.s;
    const F r = MODE == 0 ? (F)1 / s : m_log(s);
    if (active)
      for (i64 j = tx; j < p.len; j += G)
        out[oo + row_out(p, j)] =
            Narrow<X>::from(soft_value((F)widen(in[io + row_in(p, j)]), m, r));
  } else {
    __shared__ ArgAcc<F> sarg[32];
    ArgPick<F> pick;
    pick.max = true;
    pick.last = false;
    ArgAcc<F> best = pick.init();
    if (active) {
      for (i64 j = tx; j < p.len; j += G) {
        ArgAcc<F> b;
        b.v = (F)widen(in[io + row_in(p, j)]);
        b.i = j;
        best = pick.combine(best, b);
      }
    }
    best = group_allreduce(best, pick, sarg);
    if (active)
      for (i64 j = tx; j < p.len; j += G)
        out[oo + row_out(p, j)] = Narrow<X>::from(j == best.i ? 1.0f : 0.0f);
  }
}

template <typename X>
DEV void soft_tile(const X *__restrict__ in, X *__restrict__ out, const SoftParams &p) {
  typedef typename Traits<X>::F F;
  extern __shared__ __align__(16) unsigned char soft_dsmem[];
  const int by = blockDim.y, ty = threadIdx.y;
  const i64 row = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const bool active = row < p.rows;
  i64 io = 0, oo = 0;
  if (active) split_offsets(row, p.k_rank, p.k_dims, p.k_in, p.k_out, io, oo);
  if constexpr (MODE < 2) {
    MaxSum<F> st = maxsum_init<F>();
    if (active)
      for (i64 j = ty; j < p.len; j += by) st = maxsum_step(st, (F)widen(in[io + row_in(p, j)]));
    st = col_allreduce(st, StatOp<F>(), reinterpret_cast<MaxSum<F> *>(soft_dsmem));
    const F m = st.m;
    const F s = m == inf_of<F>() ? nan_of<F>() : st.s;
    const F r = MODE == 0 ? (F)1 / s : m_log(s);
    if (active)
      for (i64 j = ty; j < p.len; j += by)
        out[oo + row_out(p, j)] =
            Narrow<X>::from(soft_value((F)widen(in[io + row_in(p, j)]), m, r));
  } else {
    ArgPick<F> pick;
    pick.max = true;
    pick.last = false;
    ArgAcc<F> best = pick.init();
    if (active) {
      for (i64 j = ty; j < p.len; j += by) {
        ArgAcc<F> b;
        b.v = (F)widen(in[io + row_in(p, j)]);
        b.i = j;
        best = pick.combine(best, b);
      }
    }
    best = col_allreduce(best, pick, reinterpret_cast<ArgAcc<F> *>(soft_dsmem));
    if (active)
      for (i64 j = ty; j < p.len; j += by)
        out[oo + row_out(p, j)] = Narrow<X>::from(j == best.i ? 1.0f : 0.0f);
  }
}

#define SOFT_ENTRY(KNAME, NAME, X, V, NV)                                                   \
  extern "C" __global__ void __launch_bounds__(1024)                                         \
      soft_##KNAME##NV##_##NAME(const X *__restrict__ in, X *__restrict__ out, SoftParams p) { \
    soft_reg<X, V, NV>(in, out, p);                                                          \
  }

// The register kernels of each dtype: soft_rvN (16-byte vectors) and soft_rsN (scalars), N
// vectors a thread; at most 32 float (16 as scalars, 8 double) values a thread, which fit the 64 registers
// of a 1024-thread block without spilling (`reg_caps` in softmax.rs).
#if MODE < 2
#define SOFT_REG_F(NAME, X)                                                                  \
  SOFT_ENTRY(rv, NAME, X, 4, 2) SOFT_ENTRY(rv, NAME, X, 4, 4) SOFT_ENTRY(rv, NAME, X, 4, 8)  \
  SOFT_ENTRY(rs, NAME, X, 1, 4) SOFT_ENTRY(rs, NAME, X, 1, 16) SOFT_LOOPV(NAME, X)
#define SOFT_REG_D(NAME, X)                                                                  \
  SOFT_ENTRY(rv, NAME, X, 2, 2) SOFT_ENTRY(rv, NAME, X, 2, 4) SOFT_ENTRY(rs, NAME, X, 1, 4)  \
  SOFT_ENTRY(rs, NAME, X, 1, 8) SOFT_LOOPV(NAME, X)
#define SOFT_REG_H(NAME, X)                                                                  \
  SOFT_ENTRY(rv, NAME, X, 8, 2) SOFT_ENTRY(rv, NAME, X, 8, 4) SOFT_ENTRY(rs, NAME, X, 1, 4)  \
  SOFT_ENTRY(rs, NAME, X, 1, 16) SOFT_LOOPV(NAME, X)
#define SOFT_LOOPV(NAME, X)                                                                  \
  extern "C" __global__ void __launch_bounds__(1024)                                         \
      soft_loopv_##NAME(const X *__restrict__ in, X *__restrict__ out, SoftParams p) {       \
    soft_loopv<X>(in, out, p);                                                               \
  }
#else
#define SOFT_REG_F(NAME, X)
#define SOFT_REG_D(NAME, X)
#define SOFT_REG_H(NAME, X)
#endif

#define SOFT_KERNELS(NAME, X, REG)                                                           \
  REG(NAME, X)                                                                               \
  extern "C" __global__ void __launch_bounds__(1024) soft_loop_##NAME(const X *__restrict__ in, X *__restrict__ out, \
                                              SoftParams p) {                                \
    soft_loop<X>(in, out, p);                                                                \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(1024) soft_tile_##NAME(const X *__restrict__ in, X *__restrict__ out, \
                                              SoftParams p) {                                \
    soft_tile<X>(in, out, p);                                                                \
  }

SOFT_KERNELS(f32, float, SOFT_REG_F)
SOFT_KERNELS(f64, double, SOFT_REG_D)
SOFT_KERNELS(f16, f16, SOFT_REG_H)
SOFT_KERNELS(bf16, bf16, SOFT_REG_H)
