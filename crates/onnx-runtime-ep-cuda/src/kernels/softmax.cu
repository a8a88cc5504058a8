// Softmax (MODE 0), LogSoftmax (MODE 1) and Hardmax (MODE 2) over the row axes (one axis from
// opset 13, the trailing axes from `axis` before), for float, double, float16 and bfloat16.
// Half types compute in float. The host coalesces the input into kept axes (one row each)
// and row axes, then picks:
//   soft_reg1_X / soft_regv_X: a group of blockDim.x threads per row holding the row in
//       registers: one read, max and sum reductions, one write (regv: 16-byte vectors).
//   soft_loop_X: rows longer than the registers hold: online max/sum, then a second read
//       that writes (Hardmax: the first maximum, then the one-hot write).
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

template <typename F> struct MaxOp {
  // NaN-propagating maximum.
  DEV F combine(F a, F b) const { return (b > a || b != b) ? b : a; }
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

// The elements a thread of soft_reg holds (blocks of up to 1024 threads get 64 registers).
template <typename X, int V> constexpr int soft_cap() {
  return V > 1 ? (sizeof(X) == 8 ? 8 : 32) : (sizeof(X) == 8 ? 4 : 8);
}

#if MODE < 2
template <typename X, int V>
DEV void soft_reg(const X *__restrict__ in, X *__restrict__ out, const SoftParams &p) {
  typedef typename Traits<X>::F F;
  constexpr int NV = soft_cap<X, V>() / V;
  __shared__ F smem[32];
  const int G = blockDim.x, tx = threadIdx.x;
  const i64 row = (i64)blockIdx.x * blockDim.y + threadIdx.y;
  const bool active = row < p.rows;
  i64 io = 0, oo = 0;
  if (active) split_offsets(row, p.k_rank, p.k_dims, p.k_in, p.k_out, io, oo);
  const i64 nvec = p.len / V;
  F vals[NV][V];
  F m = -inf_of<F>();
  const MaxOp<F> mx;
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
#pragma unroll
      for (int q = 0; q < V; ++q) m = mx.combine(m, vals[c][q]);
    }
  }
  m = group_allreduce(m, mx, smem);
  F s = (F)0;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const i64 j = (i64)c * G + tx;
    if (active && j < nvec) {
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

#if MODE < 2
#define SOFT_REG(NAME, X)                                                                    \
  extern "C" __global__ void __launch_bounds__(1024) soft_reg1_##NAME(const X *__restrict__ in, X *__restrict__ out, \
                                              SoftParams p) {                                \
    soft_reg<X, 1>(in, out, p);                                                              \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(1024) soft_regv_##NAME(const X *__restrict__ in, X *__restrict__ out, \
                                              SoftParams p) {                                \
    soft_reg<X, (int)(16 / sizeof(X))>(in, out, p);                                          \
  }
#else
#define SOFT_REG(NAME, X)
#endif

#define SOFT_KERNELS(NAME, X)                                                                \
  SOFT_REG(NAME, X)                                                                          \
  extern "C" __global__ void __launch_bounds__(1024) soft_loop_##NAME(const X *__restrict__ in, X *__restrict__ out, \
                                              SoftParams p) {                                \
    soft_loop<X>(in, out, p);                                                                \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(1024) soft_tile_##NAME(const X *__restrict__ in, X *__restrict__ out, \
                                              SoftParams p) {                                \
    soft_tile<X>(in, out, p);                                                                \
  }

SOFT_KERNELS(f32, float)
SOFT_KERNELS(f64, double)
SOFT_KERNELS(f16, f16)
SOFT_KERNELS(bf16, bf16)
