// Device helpers of the reduction family (reduce.cu, softmax.cu, topk.cu), prepended to each
// of those sources: compute types, math overloads, shuffles of any small type, and group /
// column all-reductions.

#define DEV __device__ __forceinline__
#define FULL_MASK 0xffffffffu

// The compute type of a dtype: float for float/f16/bf16, double for double, and double for
// integers (for the reductions that are real-valued: mean, L2, log-sum, log-sum-exp).
template <typename X> struct Traits {
  static const bool is_float = false;
  typedef double F;
};
template <> struct Traits<float> {
  static const bool is_float = true;
  typedef float F;
};
template <> struct Traits<double> {
  static const bool is_float = true;
  typedef double F;
};
template <> struct Traits<f16> {
  static const bool is_float = true;
  typedef float F;
};
template <> struct Traits<bf16> {
  static const bool is_float = true;
  typedef float F;
};

DEV float m_exp(float x) { return expf(x); }
DEV double m_exp(double x) { return exp(x); }
DEV float m_log(float x) { return logf(x); }
DEV double m_log(double x) { return log(x); }
DEV float m_sqrt(float x) { return sqrtf(x); }
DEV double m_sqrt(double x) { return sqrt(x); }
DEV float m_abs(float x) { return fabsf(x); }
DEV double m_abs(double x) { return fabs(x); }

template <typename F> DEV F inf_of();
template <> DEV float inf_of<float>() { return __int_as_float(0x7f800000); }
template <> DEV double inf_of<double>() { return __longlong_as_double(0x7ff0000000000000LL); }

template <typename F> DEV F nan_of();
template <> DEV float nan_of<float>() { return __int_as_float(0x7fc00000); }
template <> DEV double nan_of<double>() { return __longlong_as_double(0x7ff8000000000000LL); }

// Whether the integer type X is signed (used only for integers).
template <typename X> struct SignedInt {
  static constexpr bool value = (X)(-1) < (X)0;
};

// An integer as 64 bits (sign-extended): wrapping arithmetic on it, truncated back to X, is
// X's own wrapping arithmetic.
template <typename X> DEV u64 wrap64(X v) {
  if constexpr (IntLimits<X>::is_int) {
    if constexpr (SignedInt<X>::value) {
      return (u64)(i64)v;
    } else {
      return (u64)v;
    }
  } else {
    return (u64)v;
  }
}

// __shfl_xor_sync of any trivially copyable value of up to 16 bytes.
template <typename A> DEV A shfl_xor_any(A v, int lane_mask) {
  constexpr int W = (int)((sizeof(A) + 3) / 4);
  int buf[W];
  memcpy(buf, &v, sizeof(A));
#pragma unroll
  for (int w = 0; w < W; ++w) buf[w] = __shfl_xor_sync(FULL_MASK, buf[w], lane_mask);
  A r;
  memcpy(&r, buf, sizeof(A));
  return r;
}

// Reduces `v` over the blockDim.x threads of each block row (threadIdx.y), with op.combine;
// every thread of the row gets the same result. blockDim.x is a power of two; groups narrower
// than a warp are aligned inside it. `smem` holds blockDim.y * (blockDim.x / 32) entries when
// blockDim.x > 32. Every thread of the block must call it (it synchronizes then).
template <typename A, typename Op> DEV A group_allreduce(A v, const Op &op, A *smem) {
  const int G = blockDim.x;
  const int w = G < 32 ? G : 32;
  for (int off = w >> 1; off > 0; off >>= 1) v = op.combine(v, shfl_xor_any(v, off));
  if (G <= 32) return v;
  const int nw = G >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  A *s = smem + threadIdx.y * nw;
  __syncthreads();  // an earlier call's readers are done with smem
  if (lane == 0) s[warp] = v;
  __syncthreads();
  v = s[0];
  for (int i = 1; i < nw; ++i) v = op.combine(v, s[i]);
  return v;
}

// Reduces `v` over threadIdx.y (blockDim.y a power of two) for each threadIdx.x; every thread
// gets its column's result. `s` holds blockDim.x * blockDim.y entries. Every thread of the
// block must call it.
template <typename A, typename Op> DEV A col_allreduce(A v, const Op &op, A *s) {
  const int bx = blockDim.x, by = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  if (by == 1) return v;
  s[ty * bx + tx] = v;
  __syncthreads();
  for (int h = by >> 1; h > 0; h >>= 1) {
    if (ty < h) s[ty * bx + tx] = op.combine(s[ty * bx + tx], s[(ty + h) * bx + tx]);
    __syncthreads();
  }
  v = s[tx];
  __syncthreads();  // s may be reused
  return v;
}

// Offsets of flat index `o` over `rank` axes (row-major, last fastest) in two layouts.
DEV void split_offsets(i64 o, int rank, const i64 *dims, const i64 *sa, const i64 *sb, i64 &a,
                       i64 &b) {
  if (rank <= 1) {
    // One axis (o < dims[0]) or none (o == 0): no division.
    a = rank == 1 ? o * sa[0] : 0;
    b = rank == 1 ? o * sb[0] : 0;
    return;
  }
  a = 0;
  b = 0;
  for (int k = rank - 1; k >= 0; --k) {
    const i64 d = dims[k];
    const i64 c = o % d;
    o /= d;
    a += c * sa[k];
    b += c * sb[k];
  }
}

// The offset of flat index `r` over `rank` axes in one layout.
DEV i64 flat_offset(i64 r, int rank, const i64 *dims, const i64 *s) {
  if (rank == 1) return r * s[0];
  i64 off = 0;
  for (int k = rank - 1; k >= 0; --k) {
    const i64 d = dims[k];
    off += (r % d) * s[k];
    r /= d;
  }
  return off;
}

// The best (value, index) of a run: the larger (or smaller) value; NaN beats every number
// (numpy's argmax); ties go to the lower index, or the higher with `last`.
template <typename V> struct ArgAcc {
  V v;
  i64 i;  // -1: empty
};

template <typename V> struct ArgPick {
  bool max;
  bool last;
  DEV bool better(V v, V b) const {
    if (b != b) return false;
    if (v != v) return true;
    return max ? (v > b) : (v < b);
  }
  DEV ArgAcc<V> combine(ArgAcc<V> a, ArgAcc<V> b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    if (better(b.v, a.v)) return b;
    if (better(a.v, b.v)) return a;
    if (last) return b.i > a.i ? b : a;
    return b.i < a.i ? b : a;
  }
  DEV ArgAcc<V> init() const {
    ArgAcc<V> a;
    a.v = V();
    a.i = -1;
    return a;
  }
};

// A running maximum and the sum of exp(x - max) (online log-sum-exp / softmax statistics).
// -inf elements are skipped (they add exp(-inf) = 0), as the CPU provider folds them.
template <typename F> struct MaxSum {
  F m;  // -inf: nothing yet
  F s;
};

template <typename F> DEV MaxSum<F> maxsum_init() {
  MaxSum<F> a;
  a.m = -inf_of<F>();
  a.s = (F)0;
  return a;
}

template <typename F> DEV MaxSum<F> maxsum_step(MaxSum<F> a, F x) {
  if (x == -inf_of<F>()) return a;
  MaxSum<F> r;
  if (x > a.m) {
    r.m = x;
    r.s = a.s * m_exp(a.m - x) + (F)1;
  } else {
    r.m = a.m;
    r.s = a.s + m_exp(x - a.m);
  }
  return r;
}

template <typename F> DEV MaxSum<F> maxsum_combine(MaxSum<F> a, MaxSum<F> b) {
  // A side with no maximum yet adds nothing, but a NaN it met (its sum) still propagates.
  if (b.m == -inf_of<F>()) {
    if (b.s != b.s) a.s = b.s;
    return a;
  }
  if (a.m == -inf_of<F>()) {
    if (a.s != a.s) b.s = a.s;
    return b;
  }
  if (b.m > a.m) {
    MaxSum<F> t = a;
    a = b;
    b = t;
  }
  MaxSum<F> r;
  r.m = a.m;
  r.s = a.s + b.s * m_exp(b.m - a.m);
  return r;
}
