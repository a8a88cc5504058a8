// The element-wise engine shared by the unary, binary and variadic modules (prepended to each
// of them after common.cuh and numeric.cuh). Every module holds ONE op (chosen by the module's
// `#define EW_OP`) for each dtype of its list (`#define EW_TYPES`), as `ew_<dtype tag>`.
//
// Two walks, picked by the host per launch (uniform branch):
//  - mode 1, fast: the output is contiguous and the coalesced walk has at most 3 axes
//    [D0, D1, D2] along which every input's innermost stride is 0 (broadcast) or 1. Each
//    thread handles V consecutive outputs with 16-byte loads and stores (a broadcast operand
//    loads one element). Same-shape, scalar, row ([R, C] + [C]), column ([R, C] + [R, 1]) and
//    per-channel ([N, C, HW] + [1, C, 1]) broadcasts all take it.
//  - mode 0, strided: any strides (rank <= 8 after coalescing), one element per iteration,
//    32-bit index arithmetic when the element count allows.
// Half types compute in float registers, double in double; integers in their own type.

#define EW_RANK 8
#define EW_MAXIN 8

template <int K> struct EwParams {
  i64 n;       // output elements
  i32 rank;    // walk axes (mode 0), 3 in mode 1
  i32 mode;    // 0 strided, 1 fast (vectorized)
  i32 narrow;  // every linear index fits in 32 bits
  i32 code;    // op-specific: the exponent's ONNX dtype (Pow), float8 format (IsNaN/IsInf)
  i64 dims[EW_RANK];
  i64 st[K][EW_RANK];  // element strides of each operand along the walk, output last
  double a, b, c;      // op attributes (alpha, beta, gamma, lambd, bias, 1/n ...)
  i64 flags;           // op flags (IsInf detection bits, Mod's fmod, ...)
  u64 err;             // the device error word (integer division by zero)
  u32 id;              // the kernel id device errors name
  u32 _pad;
};

template <bool B, class T, class F> struct Cond { typedef T type; };
template <class T, class F> struct Cond<false, T, F> { typedef F type; };

template <class T> struct IsFloat { static const bool value = false; };
template <> struct IsFloat<float> { static const bool value = true; };
template <> struct IsFloat<double> { static const bool value = true; };
template <> struct IsFloat<f16> { static const bool value = true; };
template <> struct IsFloat<bf16> { static const bool value = true; };

template <class T> struct IsSigned { static const bool value = (T)(-1) < (T)0; };
template <> struct IsSigned<f16> { static const bool value = true; };
template <> struct IsSigned<bf16> { static const bool value = true; };
template <> struct IsSigned<bool> { static const bool value = false; };

// The type an element computes in.
template <class T> struct Compute { typedef T type; };
template <> struct Compute<f16> { typedef float type; };
template <> struct Compute<bf16> { typedef float type; };

// Packs of V elements moved by one load/store.
template <class T, int V> struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Elements per vector: 16 bytes of the widest operand, at most MAXV (ops with heavy integer
// bodies take fewer, to keep the unrolled code and its compile time small).
template <int MAXV, class A, class B = A, class C = A> struct VecWidth {
  static const int bytes = sizeof(A) > sizeof(B) ? (sizeof(A) > sizeof(C) ? sizeof(A) : sizeof(C))
                                                 : (sizeof(B) > sizeof(C) ? sizeof(B) : sizeof(C));
  static const int full = 16 / bytes < 1 ? 1 : 16 / bytes;
  static const int value = full > MAXV ? MAXV : full;
};

// 64-bit quotient and remainder, out of line: walks of more than 2^32 elements are rare, and
// one shared copy keeps every kernel of a module small.
__device__ __noinline__ u64 ew_divmod64(u64 a, u64 b, u64 *rem) {
  u64 q = a / b;
  *rem = a - q * b;
  return q;
}

// Offsets of element i of a strided walk for K operands.
template <int K>
__device__ __forceinline__ void ew_offsets(const EwParams<K> &p, i64 i, i64 (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = 0;
  if (p.narrow) {
    u32 r = (u32)i;
#pragma unroll 1
    for (int d = p.rank - 1; d >= 0; --d) {
      u32 dim = (u32)p.dims[d];
      u32 c = r % dim;
      r /= dim;
#pragma unroll
      for (int k = 0; k < K; ++k) off[k] += (i64)c * p.st[k][d];
    }
  } else {
    u64 r = (u64)i;
#pragma unroll 1
    for (int d = p.rank - 1; d >= 0; --d) {
      u64 c;
      r = ew_divmod64(r, (u64)p.dims[d], &c);
#pragma unroll
      for (int k = 0; k < K; ++k) off[k] += (i64)c * p.st[k][d];
    }
  }
}

// The 3-axis position of element i in mode 1.
template <int K>
__device__ __forceinline__ void ew_pos3(const EwParams<K> &p, i64 i, i64 &i0, i64 &i1, i64 &i2) {
  if (p.dims[0] == 1 && p.dims[1] == 1) {
    i0 = 0;
    i1 = 0;
    i2 = i;
  } else if (p.narrow) {
    u32 r = (u32)i, d2 = (u32)p.dims[2], d1 = (u32)p.dims[1];
    u32 t = r / d2;
    i2 = (i64)(r - t * d2);
    u32 q = t / d1;
    i1 = (i64)(t - q * d1);
    i0 = (i64)q;
  } else {
    u64 r2, r1;
    u64 t = ew_divmod64((u64)i, (u64)p.dims[2], &r2);
    i0 = (i64)ew_divmod64(t, (u64)p.dims[1], &r1);
    i1 = (i64)r1;
    i2 = (i64)r2;
  }
}

template <int K>
__device__ __forceinline__ i64 ew_off3(const EwParams<K> &p, int k, i64 i0, i64 i1, i64 i2) {
  return i0 * p.st[k][0] + i1 * p.st[k][1] + i2 * p.st[k][2];
}

// V elements of an operand at `off` whose innermost stride is `inner` (0: one element repeated).
template <int V, class T>
__device__ __forceinline__ void ew_load(const T *__restrict__ base, i64 off, i64 inner, T (&r)[V]) {
  if (inner == 0) {
    T s = base[off];
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = s;
  } else {
    Pack<T, V> pk = *reinterpret_cast<const Pack<T, V> *>(base + off);
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = pk.v[j];
  }
}

template <int V, class T> __device__ __forceinline__ void ew_store(T *__restrict__ base, i64 off, const T (&r)[V]) {
  Pack<T, V> pk;
#pragma unroll
  for (int j = 0; j < V; ++j) pk.v[j] = r[j];
  *reinterpret_cast<Pack<T, V> *>(base + off) = pk;
}

// ---- small math helpers shared by the ops ----

template <class C> __device__ __forceinline__ C ew_sigmoid(C x) {
  if (x >= (C)0) return (C)1 / ((C)1 + exp(-x));
  C e = exp(x);
  return e / ((C)1 + e);
}

template <class C> __device__ __forceinline__ C ew_softplus(C x) {
  return x > (C)0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

template <class C> __device__ __forceinline__ C ew_gelu_erf(C x) {
  return (C)0.5 * x * ((C)1 + erf(x * (C)0.70710678118654752440));
}

template <class C> __device__ __forceinline__ C ew_gelu_tanh(C x) {
  const C k = (C)0.79788456080286535588;  // sqrt(2 / pi)
  return (C)0.5 * x * ((C)1 + tanh(k * (x + (C)0.044715 * x * x * x)));
}

#define EW_FLOATS(X) X(f32, float) X(f64, double) X(f16, f16) X(bf16, bf16)
#define EW_SINTS(X) X(i8, signed char) X(i16, short) X(i32, int) X(i64, long long)
#define EW_UINTS(X)                                                                          \
  X(u8, unsigned char) X(u16, unsigned short) X(u32, unsigned int) X(u64, unsigned long long)
#define EW_INTS(X) EW_SINTS(X) EW_UINTS(X)
#define EW_SIGNED(X) EW_FLOATS(X) EW_SINTS(X)
#define EW_NUMERIC(X) EW_FLOATS(X) EW_INTS(X)
#define EW_BOOL(X) X(bool, bool)
#define EW_NUMERIC_BOOL(X) EW_NUMERIC(X) EW_BOOL(X)
// Pow's bases; PRelu's types.
#define EW_POW_BASES(X) EW_FLOATS(X) X(i32, int) X(i64, long long)
#define EW_PRELU_TYPES(X)                                                                    \
  EW_FLOATS(X) X(i32, int) X(i64, long long) X(u32, unsigned int) X(u64, unsigned long long)
// IsNaN and IsInf: floats and float8 bytes (`f8`, the format in p.code).
#define EW_ISNAN_TYPES(X) EW_FLOATS(X) X(f8, unsigned char)
