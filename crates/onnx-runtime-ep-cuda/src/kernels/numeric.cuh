// Typed helpers for the modules that compute on values (prepended after cuda_fp16.h and
// cuda_bf16.h): widening of half types to float, narrowing with ONNX's rules, reading an index
// of any numeric dtype, and atomic read-modify-write for every element width.

typedef __half f16;
typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float widen(f16 x) { return __half2float(x); }
__device__ __forceinline__ float widen(bf16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T widen(T x) { return x; }

// Integer limits, for saturating float-to-integer conversion.
template <typename T> struct IntLimits { static const bool is_int = false; };
#define INT_LIMITS(T, LO, HI)                                                                \
  template <> struct IntLimits<T> {                                                          \
    static const bool is_int = true;                                                         \
    __device__ static __forceinline__ T lo() { return LO; }                                  \
    __device__ static __forceinline__ T hi() { return HI; }                                  \
  };
INT_LIMITS(signed char, -128, 127)
INT_LIMITS(unsigned char, 0, 255)
INT_LIMITS(short, -32768, 32767)
INT_LIMITS(unsigned short, 0, 65535)
INT_LIMITS(int, (-2147483647 - 1), 2147483647)
INT_LIMITS(unsigned int, 0u, 4294967295u)
INT_LIMITS(long long, (-9223372036854775807LL - 1), 9223372036854775807LL)
INT_LIMITS(unsigned long long, 0ull, 18446744073709551615ull)

// Float to integer: truncation toward zero, saturating at the type's limits, NaN to 0 (the
// same rules as Rust's `as`); other conversions are plain C conversions.
template <typename To> struct Narrow {
  template <typename F> __device__ static __forceinline__ To from(F x) {
    if constexpr (IntLimits<To>::is_int &&
                  (same_type<F, float>::value || same_type<F, double>::value)) {
      if (x != x) return (To)0;
      if (x <= (F)IntLimits<To>::lo()) return IntLimits<To>::lo();
      if (x >= (F)IntLimits<To>::hi()) return IntLimits<To>::hi();
    }
    return (To)x;
  }
};
template <> struct Narrow<bool> {
  template <typename F> __device__ static __forceinline__ bool from(F x) { return x != (F)0; }
};
template <> struct Narrow<f16> {
  __device__ static __forceinline__ f16 from(double x) { return __double2half(x); }
  template <typename F> __device__ static __forceinline__ f16 from(F x) {
    return __float2half_rn((float)x);
  }
};
template <> struct Narrow<bf16> {
  __device__ static __forceinline__ bf16 from(double x) { return __double2bfloat16(x); }
  template <typename F> __device__ static __forceinline__ bf16 from(F x) {
    return __float2bfloat16_rn((float)x);
  }
};

template <typename To, typename From> __device__ __forceinline__ To convert(From x) {
  return Narrow<To>::from(widen(x));
}

// Reads element `off` of a tensor of ONNX dtype `code` as an integer (floats truncate).
__device__ __forceinline__ i64 load_as_i64(const void *p, i64 off, int code) {
  switch (code) {
  case 1: return (i64)((const float *)p)[off];
  case 2: return (i64)((const u8 *)p)[off];
  case 3: return (i64)((const signed char *)p)[off];
  case 4: return (i64)((const u16 *)p)[off];
  case 5: return (i64)((const short *)p)[off];
  case 6: return (i64)((const int *)p)[off];
  case 7: return ((const i64 *)p)[off];
  case 9: return (i64)((const u8 *)p)[off];
  case 10: return (i64)__half2float(((const f16 *)p)[off]);
  case 11: return (i64)((const double *)p)[off];
  case 12: return (i64)((const u32 *)p)[off];
  case 13: return (i64)((const u64 *)p)[off];
  case 16: return (i64)__bfloat162float(((const bf16 *)p)[off]);
  default: return 0;
  }
}

template <typename To, typename From> __device__ __forceinline__ To bit_cast(From f) {
  To t;
  memcpy(&t, &f, sizeof(To));
  return t;
}

// op: 1 add, 2 mul, 3 max, 4 min; anything else replaces.
template <typename T> __device__ __forceinline__ T apply_op(T a, T b, int op) {
  auto x = widen(a);
  auto y = widen(b);
  switch (op) {
  case 1: return Narrow<T>::from(x + y);
  case 2: return Narrow<T>::from(x * y);
  case 3: return (y > x) ? b : a;
  case 4: return (y < x) ? b : a;
  default: return b;
  }
}

// Atomically replaces *addr with apply_op(*addr, v, op), for 1, 2, 4 and 8-byte types.
template <typename T> __device__ void atomic_apply(T *addr, T v, int op) {
  if constexpr (sizeof(T) == 8) {
    u64 *word = reinterpret_cast<u64 *>(addr);
    u64 old = *word, assumed;
    do {
      assumed = old;
      T cur = bit_cast<T>(assumed);
      old = atomicCAS(word, assumed, bit_cast<u64>(apply_op(cur, v, op)));
    } while (assumed != old);
  } else if constexpr (sizeof(T) == 4) {
    u32 *word = reinterpret_cast<u32 *>(addr);
    u32 old = *word, assumed;
    do {
      assumed = old;
      T cur = bit_cast<T>(assumed);
      old = atomicCAS(word, assumed, bit_cast<u32>(apply_op(cur, v, op)));
    } while (assumed != old);
  } else if constexpr (sizeof(T) == 2) {
    unsigned short *word = reinterpret_cast<unsigned short *>(addr);
    unsigned short old = *word, assumed;
    do {
      assumed = old;
      T cur = bit_cast<T>(assumed);
      old = atomicCAS(word, assumed, bit_cast<unsigned short>(apply_op(cur, v, op)));
    } while (assumed != old);
  } else {
    // One byte: CAS on the aligned 32-bit word that holds it.
    size_t addr_bits = reinterpret_cast<size_t>(addr);
    u32 *word = reinterpret_cast<u32 *>(addr_bits & ~(size_t)3);
    u32 shift = (u32)(addr_bits & 3) * 8;
    u32 old = *word, assumed;
    do {
      assumed = old;
      T cur = bit_cast<T>((u8)((assumed >> shift) & 0xffu));
      u8 next = bit_cast<u8>(apply_op(cur, v, op));
      u32 replaced = (assumed & ~(0xffu << shift)) | ((u32)next << shift);
      old = atomicCAS(word, assumed, replaced);
    } while (assumed != old);
  }
}

#define FOR_NUMERIC(X)                                                                       \
  X(f32, float)                                                                              \
  X(f64, double)                                                                             \
  X(f16, f16)                                                                                \
  X(bf16, bf16)                                                                              \
  X(i8, signed char)                                                                         \
  X(i16, short)                                                                              \
  X(i32, int)                                                                                \
  X(i64, long long)                                                                          \
  X(u8, unsigned char)                                                                       \
  X(u16, unsigned short)                                                                     \
  X(u32, unsigned int)                                                                       \
  X(u64, unsigned long long)

#define FOR_ALL(X) FOR_NUMERIC(X) X(bool, bool)
