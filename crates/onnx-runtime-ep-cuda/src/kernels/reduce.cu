// Reductions over any set of axes (ReduceSum ... ReduceSumSquare, ArgMax/ArgMin). One module
// per reduction kind (REDUCE_KIND names the kind's struct template), with kernels for every
// numeric dtype. The host coalesces the input into kept axes (one output each) and reduced
// axes, then picks:
//   reduce_rows_X:   a group of blockDim.x threads per output (blockDim.y outputs a block);
//                    contiguous reduced runs are read with aligned 16-byte vector loads.
//   reduce_tile_X:   threadIdx.x over outputs, threadIdx.y over the reduced index (column
//                    reductions, where the kept axis is the fast one in memory), combined
//                    through shared memory.
//   reduce_finish_X: with gridDim.y > 1 the two kernels above write one partial per split
//                    of the reduced extent to `ws`; this combines the splits and finishes.
// Half types accumulate in float, double in double; integer sums, products, sums of squares
// and L1 wrap as the element type does; integer means, L2 and logs compute in double.

struct RedParams {
  i64 n_out;
  i64 n_red;
  i64 chunk;  // reduced elements per split
  i64 count;  // divisor of the mean
  i32 k_rank;
  i32 r_rank;
  i32 splits;
  i32 contig;  // one reduced axis of stride 1
  i32 flags;   // ArgMax/ArgMin: bit 0 max, bit 1 select_last_index
  i32 _pad;
  i64 k_dims[MAX_RANK];
  i64 k_in[MAX_RANK];
  i64 k_out[MAX_RANK];
  i64 r_dims[MAX_RANK];
  i64 r_in[MAX_RANK];
};

// ---- reduction kinds: init / step(acc, x, index) / combine / fin(acc) ----

template <typename X, bool FL = Traits<X>::is_float> struct KSum;
template <typename X> struct KSum<X, true> {
  typedef typename Traits<X>::F A;
  typedef X O;
  DEV explicit KSum(const RedParams &) {}
  DEV A init() const { return (A)0; }
  DEV A step(A a, X v, i64) const { return a + (A)widen(v); }
  DEV A combine(A a, A b) const { return a + b; }
  DEV O fin(A a) const { return Narrow<X>::from(a); }
};
template <typename X> struct KSum<X, false> {
  typedef u64 A;
  typedef X O;
  DEV explicit KSum(const RedParams &) {}
  DEV A init() const { return 0; }
  DEV A step(A a, X v, i64) const { return a + wrap64(v); }
  DEV A combine(A a, A b) const { return a + b; }
  DEV O fin(A a) const { return (X)a; }
};

template <typename X> struct KMean {
  typedef typename Traits<X>::F A;
  typedef X O;
  i64 count;
  DEV explicit KMean(const RedParams &p) : count(p.count) {}
  DEV A init() const { return (A)0; }
  DEV A step(A a, X v, i64) const { return a + (A)widen(v); }
  DEV A combine(A a, A b) const { return a + b; }
  DEV O fin(A a) const { return Narrow<X>::from(a / (A)count); }
};

template <typename X, bool MAX, bool FL = Traits<X>::is_float> struct KExt;
template <typename X, bool MAX> struct KExt<X, MAX, true> {
  typedef typename Traits<X>::F A;
  typedef X O;
  DEV explicit KExt(const RedParams &) {}
  DEV A init() const { return MAX ? -inf_of<A>() : inf_of<A>(); }
  // NaN-propagating: a NaN accumulator stays NaN, a NaN element makes it NaN.
  DEV A combine(A a, A b) const {
    return ((MAX ? (b > a) : (b < a)) || b != b) ? b : a;
  }
  DEV A step(A a, X v, i64) const { return combine(a, (A)widen(v)); }
  DEV O fin(A a) const { return Narrow<X>::from(a); }
};
template <typename X, bool MAX> struct KExt<X, MAX, false> {
  typedef X A;
  typedef X O;
  DEV explicit KExt(const RedParams &) {}
  DEV A init() const { return MAX ? IntLimits<X>::lo() : IntLimits<X>::hi(); }
  DEV A combine(A a, A b) const { return (MAX ? (b > a) : (b < a)) ? b : a; }
  DEV A step(A a, X v, i64) const { return combine(a, v); }
  DEV O fin(A a) const { return a; }
};
template <typename X> using KMax = KExt<X, true>;
template <typename X> using KMin = KExt<X, false>;

template <typename X, bool FL = Traits<X>::is_float> struct KProd;
template <typename X> struct KProd<X, true> {
  typedef typename Traits<X>::F A;
  typedef X O;
  DEV explicit KProd(const RedParams &) {}
  DEV A init() const { return (A)1; }
  DEV A step(A a, X v, i64) const { return a * (A)widen(v); }
  DEV A combine(A a, A b) const { return a * b; }
  DEV O fin(A a) const { return Narrow<X>::from(a); }
};
template <typename X> struct KProd<X, false> {
  typedef u64 A;
  typedef X O;
  DEV explicit KProd(const RedParams &) {}
  DEV A init() const { return 1; }
  DEV A step(A a, X v, i64) const { return a * wrap64(v); }
  DEV A combine(A a, A b) const { return a * b; }
  DEV O fin(A a) const { return (X)a; }
};

template <typename X, bool FL = Traits<X>::is_float> struct KL1;
template <typename X> struct KL1<X, true> {
  typedef typename Traits<X>::F A;
  typedef X O;
  DEV explicit KL1(const RedParams &) {}
  DEV A init() const { return (A)0; }
  DEV A step(A a, X v, i64) const { return a + m_abs((A)widen(v)); }
  DEV A combine(A a, A b) const { return a + b; }
  DEV O fin(A a) const { return Narrow<X>::from(a); }
};
template <typename X> struct KL1<X, false> {
  typedef u64 A;
  typedef X O;
  DEV explicit KL1(const RedParams &) {}
  DEV A init() const { return 0; }
  DEV A step(A a, X v, i64) const {
    const u64 w = wrap64(v);
    if constexpr (SignedInt<X>::value) {
      if (v < (X)0) return a + (0ull - w);
    }
    return a + w;
  }
  DEV A combine(A a, A b) const { return a + b; }
  DEV O fin(A a) const { return (X)a; }
};

template <typename X> struct KL2 {
  typedef typename Traits<X>::F A;
  typedef X O;
  DEV explicit KL2(const RedParams &) {}
  DEV A init() const { return (A)0; }
  DEV A step(A a, X v, i64) const {
    const A x = (A)widen(v);
    return a + x * x;
  }
  DEV A combine(A a, A b) const { return a + b; }
  DEV O fin(A a) const { return Narrow<X>::from(m_sqrt(a)); }
};

template <typename X, bool FL = Traits<X>::is_float> struct KSumSquare;
template <typename X> struct KSumSquare<X, true> {
  typedef typename Traits<X>::F A;
  typedef X O;
  DEV explicit KSumSquare(const RedParams &) {}
  DEV A init() const { return (A)0; }
  DEV A step(A a, X v, i64) const {
    const A x = (A)widen(v);
    return a + x * x;
  }
  DEV A combine(A a, A b) const { return a + b; }
  DEV O fin(A a) const { return Narrow<X>::from(a); }
};
template <typename X> struct KSumSquare<X, false> {
  typedef u64 A;
  typedef X O;
  DEV explicit KSumSquare(const RedParams &) {}
  DEV A init() const { return 0; }
  DEV A step(A a, X v, i64) const {
    const u64 w = wrap64(v);
    return a + w * w;
  }
  DEV A combine(A a, A b) const { return a + b; }
  DEV O fin(A a) const { return (X)a; }
};

template <typename X> struct KLogSum {
  typedef typename Traits<X>::F A;
  typedef X O;
  DEV explicit KLogSum(const RedParams &) {}
  DEV A init() const { return (A)0; }
  DEV A step(A a, X v, i64) const { return a + (A)widen(v); }
  DEV A combine(A a, A b) const { return a + b; }
  DEV O fin(A a) const { return Narrow<X>::from(m_log(a)); }
};

// Online log-sum-exp, as the CPU provider folds it: -inf elements are skipped.
template <typename X> struct KLogSumExp {
  typedef typename Traits<X>::F F;
  typedef MaxSum<F> A;
  typedef X O;
  DEV explicit KLogSumExp(const RedParams &) {}
  DEV A init() const { return maxsum_init<F>(); }
  DEV A step(A a, X v, i64) const { return maxsum_step(a, (F)widen(v)); }
  DEV A combine(A a, A b) const { return maxsum_combine(a, b); }
  DEV O fin(A a) const { return Narrow<X>::from(a.m + m_log(a.s)); }
};

// ArgMax / ArgMin: the value in the compute type for floats (exact for half types), the
// element type for integers (exact for 64-bit).
template <typename X> struct ArgValue {
  typedef typename Traits<X>::F type;
};
#define ARG_VALUE_INT(X)                                                                     \
  template <> struct ArgValue<X> {                                                           \
    typedef X type;                                                                          \
  };
ARG_VALUE_INT(signed char)
ARG_VALUE_INT(short)
ARG_VALUE_INT(int)
ARG_VALUE_INT(long long)
ARG_VALUE_INT(unsigned char)
ARG_VALUE_INT(unsigned short)
ARG_VALUE_INT(unsigned int)
ARG_VALUE_INT(unsigned long long)

template <typename X> struct KArg {
  typedef typename ArgValue<X>::type V;
  typedef ArgAcc<V> A;
  typedef i64 O;
  ArgPick<V> pick;
  DEV explicit KArg(const RedParams &p) {
    pick.max = (p.flags & 1) != 0;
    pick.last = (p.flags & 2) != 0;
  }
  DEV A init() const { return pick.init(); }
  DEV A step(A a, X v, i64 r) const {
    A b;
    b.v = (V)widen(v);
    b.i = r;
    return pick.combine(a, b);
  }
  DEV A combine(A a, A b) const { return pick.combine(a, b); }
  DEV O fin(A a) const { return a.i < 0 ? 0 : a.i; }
};

// ---- kernels ----

template <typename X, typename K>
DEV typename K::A step_vec(const K &k, typename K::A acc, const uint4 &u, i64 r) {
  constexpr int V = (int)(16 / sizeof(X));
  const X *e = reinterpret_cast<const X *>(&u);
#pragma unroll
  for (int q = 0; q < V; ++q) acc = k.step(acc, e[q], r + q);
  return acc;
}

// Loads a thread issues before folding them (independent loads in flight): 8 vectors of
// 4-byte elements (32 elements), fewer for vectors of more elements, for 8-byte elements
// and for wide accumulators (arg pairs, double max-sums), so that the unrolled folds fit the
// 64 registers of a 1024-thread block without spilling.
template <typename X, typename K> struct Unroll {
  static constexpr int V = (int)(16 / sizeof(X));
  static constexpr bool wide = sizeof(typename K::A) > 8;
  static constexpr int U0 = sizeof(X) == 8 ? 4 : 32 / V;
  static constexpr int vec = wide ? (Traits<X>::is_float ? 2 : 1) : (U0 < 2 ? 2 : U0);
  static constexpr int scalar = wide ? (Traits<X>::is_float ? 2 : 1) : 8;
};

// Folds the contiguous run s[0..len) (reduced indices r0..r0+len) over the group's threads:
// the unaligned head and tail element-wise, the rest in aligned 16-byte vectors, U
// loads in flight a thread (the last round predicated, not serialized) into two
// accumulators.
template <typename X, typename K>
DEV typename K::A fold_contiguous(const K &k, typename K::A acc, const X *__restrict__ s,
                                  i64 len, i64 r0, int tx, int G) {
  typedef typename K::A A;
  constexpr int V = (int)(16 / sizeof(X));
  if (len <= 0) return acc;
  const unsigned mis = (unsigned)((size_t)s & 15u);
  i64 head = (i64)(((16u - mis) & 15u) / sizeof(X));
  if (head > len) head = len;
  for (i64 t = tx; t < head; t += G) acc = k.step(acc, s[t], r0 + t);
  const uint4 *vb = reinterpret_cast<const uint4 *>(s + head);
  const i64 nv = (len - head) / V;
  const i64 rb = r0 + head;
  constexpr int U = Unroll<X, K>::vec;
  A acc2 = k.init();
  for (i64 j = tx; j < nv; j += U * (i64)G) {
    uint4 u[U];
    if (j + (U - 1) * (i64)G < nv) {
#pragma unroll
      for (int q = 0; q < U; ++q) u[q] = __ldg(vb + j + q * (i64)G);
#pragma unroll
      for (int q = 0; q < U; ++q) {
        if (q & 1) {
          acc2 = step_vec<X>(k, acc2, u[q], rb + (j + q * (i64)G) * V);
        } else {
          acc = step_vec<X>(k, acc, u[q], rb + (j + q * (i64)G) * V);
        }
      }
    } else {
#pragma unroll
      for (int q = 0; q < U; ++q)
        if (j + q * (i64)G < nv) u[q] = __ldg(vb + j + q * (i64)G);
#pragma unroll
      for (int q = 0; q < U; ++q)
        if (j + q * (i64)G < nv) acc = step_vec<X>(k, acc, u[q], rb + (j + q * (i64)G) * V);
    }
  }
  acc = k.combine(acc, acc2);
  for (i64 t = head + nv * V + tx; t < len; t += G) acc = k.step(acc, s[t], r0 + t);
  return acc;
}

template <typename X, typename K>
DEV void rows_impl(const X *__restrict__ in, typename K::O *__restrict__ out,
                   typename K::A *__restrict__ ws, const RedParams &p) {
  typedef typename K::A A;
  __shared__ A smem[32];
  const K k(p);
  const int G = blockDim.x, tx = threadIdx.x;
  const i64 o = (i64)blockIdx.x * blockDim.y + threadIdx.y;
  const bool active = o < p.n_out;
  const i64 r0 = (i64)blockIdx.y * p.chunk;
  const i64 r1 = min(r0 + p.chunk, p.n_red);
  A acc = k.init();
  i64 in_off = 0, out_off = 0;
  if (active) {
    split_offsets(o, p.k_rank, p.k_dims, p.k_in, p.k_out, in_off, out_off);
    if (p.contig) {
      acc = fold_contiguous<X>(k, acc, in + in_off + r0, r1 - r0, r0, tx, G);
    } else {
      for (i64 r = r0 + tx; r < r1; r += G)
        acc = k.step(acc, in[in_off + flat_offset(r, p.r_rank, p.r_dims, p.r_in)], r);
    }
  }
  acc = group_allreduce(acc, k, smem);
  if (active && tx == 0) {
    if (p.splits > 1) {
      ws[(i64)blockIdx.y * p.n_out + o] = acc;
    } else {
      out[out_off] = k.fin(acc);
    }
  }
}

template <typename X, typename K>
DEV void tile_impl(const X *__restrict__ in, typename K::O *__restrict__ out,
                   typename K::A *__restrict__ ws, const RedParams &p) {
  typedef typename K::A A;
  extern __shared__ __align__(16) unsigned char red_dsmem[];
  A *s = reinterpret_cast<A *>(red_dsmem);
  const K k(p);
  const int by = blockDim.y, ty = threadIdx.y;
  const i64 o = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const bool active = o < p.n_out;
  const i64 r0 = (i64)blockIdx.y * p.chunk;
  const i64 r1 = min(r0 + p.chunk, p.n_red);
  A acc = k.init();
  i64 in_off = 0, out_off = 0;
  if (active) {
    split_offsets(o, p.k_rank, p.k_dims, p.k_in, p.k_out, in_off, out_off);
    const X *b = in + in_off;
    if (p.r_rank <= 1) {
      // Unroll::scalar independent loads in flight a thread (coalesced across threadIdx.x: the
      // kept axis is the fast one), two accumulators; the last round predicated.
      const i64 st = p.r_rank == 1 ? p.r_in[0] : 0;
      constexpr int U = Unroll<X, K>::scalar;
      A acc2 = k.init();
      for (i64 r = r0 + ty; r < r1; r += U * (i64)by) {
        X v[U];
        if (r + (U - 1) * (i64)by < r1) {
#pragma unroll
          for (int q = 0; q < U; ++q) v[q] = b[(r + q * (i64)by) * st];
#pragma unroll
          for (int q = 0; q < U; ++q) {
            if (q & 1) {
              acc2 = k.step(acc2, v[q], r + q * (i64)by);
            } else {
              acc = k.step(acc, v[q], r + q * (i64)by);
            }
          }
        } else {
#pragma unroll
          for (int q = 0; q < U; ++q)
            if (r + q * (i64)by < r1) v[q] = b[(r + q * (i64)by) * st];
#pragma unroll
          for (int q = 0; q < U; ++q)
            if (r + q * (i64)by < r1) acc = k.step(acc, v[q], r + q * (i64)by);
        }
      }
      acc = k.combine(acc, acc2);
    } else {
      for (i64 r = r0 + ty; r < r1; r += by)
        acc = k.step(acc, b[flat_offset(r, p.r_rank, p.r_dims, p.r_in)], r);
    }
  }
  acc = col_allreduce(acc, k, s);
  if (active && ty == 0) {
    if (p.splits > 1) {
      ws[(i64)blockIdx.y * p.n_out + o] = acc;
    } else {
      out[out_off] = k.fin(acc);
    }
  }
}

template <typename X, typename K>
DEV void finish_impl(typename K::O *__restrict__ out, const typename K::A *__restrict__ ws,
                     const RedParams &p) {
  typedef typename K::A A;
  __shared__ A smem[32];
  const K k(p);
  const i64 o = (i64)blockIdx.x * blockDim.y + threadIdx.y;
  const bool active = o < p.n_out;
  A acc = k.init();
  if (active) {
    for (int s = threadIdx.x; s < p.splits; s += blockDim.x)
      acc = k.combine(acc, ws[(i64)s * p.n_out + o]);
  }
  acc = group_allreduce(acc, k, smem);
  if (active && threadIdx.x == 0) {
    i64 in_off, out_off;
    split_offsets(o, p.k_rank, p.k_dims, p.k_in, p.k_out, in_off, out_off);
    out[out_off] = k.fin(acc);
  }
}

#define REDUCE_KERNELS(NAME, X)                                                              \
  extern "C" __global__ void __launch_bounds__(1024) reduce_rows_##NAME(const X *__restrict__ in,                   \
                                                REDUCE_KIND<X>::O *__restrict__ out,         \
                                                REDUCE_KIND<X>::A *__restrict__ ws,          \
                                                RedParams p) {                               \
    rows_impl<X, REDUCE_KIND<X>>(in, out, ws, p);                                            \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(1024) reduce_tile_##NAME(const X *__restrict__ in,                   \
                                                REDUCE_KIND<X>::O *__restrict__ out,         \
                                                REDUCE_KIND<X>::A *__restrict__ ws,          \
                                                RedParams p) {                               \
    tile_impl<X, REDUCE_KIND<X>>(in, out, ws, p);                                            \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(1024) reduce_finish_##NAME(REDUCE_KIND<X>::O *__restrict__ out,      \
                                                  const REDUCE_KIND<X>::A *__restrict__ ws,  \
                                                  RedParams p) {                             \
    finish_impl<X, REDUCE_KIND<X>>(out, ws, p);                                              \
  }

FOR_NUMERIC(REDUCE_KERNELS)
