// Helpers shared by the pooling and resampling modules (pool.cu, resize.cu, grid.cu), placed
// before each of them: division by a runtime constant through a multiply-high, stores that
// round to integers the way the CPU provider does, and the output index decomposition.

// n / d for 0 <= n < 2^31 and 1 <= d <= 2^31: (umulhi(n, m) + n) >> s, with m and s worked
// out on the host (FastDiv::new in src/ops/pool/mod.rs).
struct FastDiv {
  u32 d, m, s, _pad;
};

__device__ __forceinline__ u32 fdiv(const FastDiv &f, u32 n) {
  return (__umulhi(n, f.m) + n) >> f.s;
}

// Splits `q` by a divisor: returns q % d and leaves q / d in `q`. `fast` picks the 32-bit
// multiply-high path (every dividend below 2^31), otherwise a 64-bit division.
__device__ __forceinline__ i64 split_index(i64 &q, const FastDiv &f, i64 d, bool fast) {
  if (fast) {
    u32 n = (u32)q;
    u32 nq = fdiv(f, n);
    q = (i64)nq;
    return (i64)(n - nq * f.d);
  }
  i64 r = q % d;
  q /= d;
  return r;
}

// A computed value stored as T: integers round half to even and saturate (the CPU
// provider's `round_ties_even().clamp(min, max)`), floats narrow with round-to-nearest.
template <typename T> struct StoreRound {
  template <typename A> __device__ static __forceinline__ T from(A v) {
    if constexpr (IntLimits<T>::is_int) {
      double r = rint((double)v);
      if (r != r) return (T)0;
      if (r <= (double)IntLimits<T>::lo()) return IntLimits<T>::lo();
      if (r >= (double)IntLimits<T>::hi()) return IntLimits<T>::hi();
      return (T)r;
    } else {
      return Narrow<T>::from(v);
    }
  }
};

// The low sizeof(T) bytes of `bits` as a T (a value the host converted already).
template <typename T> __device__ __forceinline__ T from_bits(u64 bits) {
  typename Word<sizeof(T)>::T w = (typename Word<sizeof(T)>::T)bits;
  return bit_cast<T>(w);
}

// Rust's `f as i64`: truncation toward zero, saturating, NaN to 0.
__device__ __forceinline__ i64 sat_i64(double x) {
  if (x != x) return 0;
  if (x <= -9223372036854775808.0) return (i64)(-9223372036854775807LL - 1);
  if (x >= 9223372036854775807.0) return 9223372036854775807LL;
  return (i64)x;
}
