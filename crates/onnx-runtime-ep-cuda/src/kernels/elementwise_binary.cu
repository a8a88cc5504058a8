// Broadcasting binary element-wise ops: the module's EW_OP for every dtype of EW_TYPES, as
// `ew_<tag>(a, b, out, EwParams<3>)` (operands a, b, then the output). Pow modules (EW_POW)
// also hold `ew_mixed_<tag>(a, b, out, p)` for an exponent of another dtype (its ONNX code in
// p.code). Integers wrap and divide truncating toward zero (as the CPU provider); an integer
// division or modulus by zero records device error 2 and writes 0.

struct EwBinBase {
  static const bool BOOL_OUT = false;
  // Elements per vector at most (heavy integer bodies take fewer).
  template <class T> static constexpr int maxv() { return 16; }
};

template <class Op, class T> struct EwOut2 {
  typedef typename Cond<Op::BOOL_OUT, bool, T>::type type;
};

// The unsigned type integer arithmetic wraps in.
template <class T> struct WrapT {
  typedef typename Cond<sizeof(T) == 8, u64, u32>::type type;
};

template <class T> __device__ __forceinline__ T ew_wrap_neg(T v) { return (T)(0ull - (u64)(i64)v); }

__device__ __forceinline__ void ew_div_by_zero(const EwParams<3> &p) {
  report_error(reinterpret_cast<u32 *>(p.err), 2u, p.id);
}

#define EW_ARITH(NAME, OPER)                                                                 \
  struct NAME : EwBinBase {                                                                  \
    template <class T>                                                                       \
    __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const {          \
      if constexpr (IsFloat<T>::value) {                                                     \
        return Narrow<T>::from(widen(a) OPER widen(b));                                      \
      } else {                                                                               \
        typedef typename WrapT<T>::type W;                                                   \
        return (T)((W)a OPER (W)b);                                                          \
      }                                                                                      \
    }                                                                                        \
  };
EW_ARITH(Add, +)
EW_ARITH(Sub, -)
EW_ARITH(Mul, *)

struct Div : EwBinBase {
  template <class T> static constexpr int maxv() { return IsFloat<T>::value ? 16 : 4; }
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &p) const {
    if constexpr (IsFloat<T>::value) {
      return Narrow<T>::from(widen(a) / widen(b));
    } else {
      if (b == (T)0) {
        ew_div_by_zero(p);
        return (T)0;
      }
      if constexpr (IsSigned<T>::value) {
        if (b == (T)-1) return ew_wrap_neg(a);
      }
      return (T)(a / b);
    }
  }
};

// Mod (out of line: fmod and integer remainders are long): flags bit 0 = fmod (C fmod / truncated remainder); else Python-style (the result takes
// the divisor's sign), for integers and, as the CPU provider does, floats.
template <class T> __device__ __noinline__ T ew_mod(T a, T b, const EwParams<3> &p) {
  const bool fm = (p.flags & 1) != 0;
  if constexpr (IsFloat<T>::value) {
    typedef typename Compute<T>::type C;
    C x = widen(a), y = widen(b);
    C r = fmod(x, y);
    if (!fm && r != (C)0 && ((r < (C)0) != (y < (C)0))) r += y;
    return Narrow<T>::from(r);
  } else {
    if (b == (T)0) {
      ew_div_by_zero(p);
      return (T)0;
    }
    T r;
    if constexpr (IsSigned<T>::value) {
      r = b == (T)-1 ? (T)0 : (T)(a % b);
      if (!fm && r != (T)0 && ((r < (T)0) != (b < (T)0))) {
        typedef typename WrapT<T>::type W;
        r = (T)((W)r + (W)b);
      }
    } else {
      r = (T)(a % b);
    }
    return r;
  }
}
struct Mod : EwBinBase {
  template <class T> static constexpr int maxv() { return 4; }
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &p) const {
    return ew_mod(a, b, p);
  }
};

// x^e for integers (wrapping); a negative e gives the truncated 1 / x^|e|.
template <class T> __device__ __forceinline__ T ew_pow_int(T x, i64 e) {
  if (e < 0) {
    if (x == (T)1) return (T)1;
    if constexpr (IsSigned<T>::value) {
      if (x == (T)-1) return (e % 2 == 0) ? (T)1 : x;
    }
    return (T)0;
  }
  typedef typename WrapT<T>::type W;
  W result = 1, base = (W)x;
  u64 k = (u64)e;
  while (k > 0) {
    if (k & 1) result = (W)(result * base);
    base = (W)(base * base);
    k >>= 1;
  }
  return (T)result;
}

// Pow with an exponent of the base's type (out of line): floats in the compute type, integers
// exactly.
template <class T> __device__ __noinline__ T ew_pow_same(T a, T b) {
  if constexpr (IsFloat<T>::value) {
    return Narrow<T>::from(pow(widen(a), widen(b)));
  } else {
    return ew_pow_int(a, (i64)b);
  }
}
struct Pow : EwBinBase {
  template <class T> static constexpr int maxv() { return IsFloat<T>::value ? 16 : 4; }
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const {
    return ew_pow_same(a, b);
  }
};

// x^e for an integral double x and a non-integral e, for integer bases (the result is then
// truncated). The CPU provider uses libm's pow, which is exact whenever the result is
// representable; CUDA's pow may be 2 ulp off (9^0.5 = 2.9999999999999996 truncates to 2). With
// e = p / 2^k (p odd), x^e is rational only when x is a perfect 2^k-th power (k <= 5 for
// x < 2^64 unless the root is 1): find the root with correctly rounded square roots and raise
// it to p exactly (by multiplication, exact below 2^53); anything else is irrational, so
// CUDA's pow truncates like libm's except within 2 ulp of an integer.
__device__ __forceinline__ double ew_pow_frac(double x, double e) {
  if (x >= 1.0 && fabs(e) < 9.0e15) {
    double p = e;
    int k = 0;
    while (p != trunc(p) && k < 6) {
      p *= 2.0;
      ++k;
    }
    if (p == trunc(p)) {
      double m = x;
      bool exact = true;
      for (int i = 0; i < k; ++i) {
        double s = sqrt(m);
        if (s != trunc(s) || fma(s, s, -m) != 0.0) {
          exact = false;
          break;
        }
        m = s;
      }
      if (exact) {
        double r = 1.0, b = m;
        u64 q = (u64)fabs(p);
        while (q > 0) {
          if (q & 1) r *= b;
          q >>= 1;
          if (q > 0) b *= b;
        }
        return p < 0.0 ? 1.0 / r : r;
      }
    }
  }
  return pow(x, e);
}

// Pow with an exponent of another dtype, widened to double: float bases compute in double
// (rounded to the compute type, then the base's type); integer bases take integral exponents
// exactly, others through double (exact where the result is an integer; truncating and
// saturating, NaN to 0, as the CPU provider's `as` cast).
template <class T> __device__ __noinline__ T ew_pow_mixed(T a, double e) {
  if constexpr (IsFloat<T>::value) {
    typedef typename Compute<T>::type C;
    return Narrow<T>::from((C)pow((double)widen(a), e));
  } else {
    if (e == trunc(e) && fabs(e) < 9.0e15) return ew_pow_int(a, (i64)e);
    return Narrow<T>::from(ew_pow_frac((double)a, e));
  }
}

__device__ __forceinline__ double ew_load_f64(const void *p, i64 off, int code) {
  switch (code) {
  case 1: return (double)((const float *)p)[off];
  case 2: return (double)((const u8 *)p)[off];
  case 3: return (double)((const signed char *)p)[off];
  case 4: return (double)((const u16 *)p)[off];
  case 5: return (double)((const short *)p)[off];
  case 6: return (double)((const int *)p)[off];
  case 7: return (double)((const i64 *)p)[off];
  case 10: return (double)__half2float(((const f16 *)p)[off]);
  case 11: return ((const double *)p)[off];
  case 12: return (double)((const u32 *)p)[off];
  case 13: return (double)((const u64 *)p)[off];
  case 16: return (double)__bfloat162float(((const bf16 *)p)[off]);
  default: return 0.0;
  }
}

// BitShift (unsigned; flags bit 0 = RIGHT): shifts past the width give 0.
struct BitShift : EwBinBase {
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &p) const {
    if ((u64)b >= (u64)(sizeof(T) * 8)) return (T)0;
    return (p.flags & 1) ? (T)(a >> b) : (T)(a << b);
  }
};
struct BitwiseAnd : EwBinBase {
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const { return (T)(a & b); }
};
struct BitwiseOr : EwBinBase {
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const { return (T)(a | b); }
};
struct BitwiseXor : EwBinBase {
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const { return (T)(a ^ b); }
};

#define EW_LOGIC(NAME, EXPR)                                                                 \
  struct NAME : EwBinBase {                                                                  \
    template <class T>                                                                       \
    __device__ __forceinline__ bool operator()(T a, T b, const EwParams<3> &) const {       \
      return (EXPR);                                                                         \
    }                                                                                        \
  };
EW_LOGIC(And, a && b)
EW_LOGIC(Or, a || b)
EW_LOGIC(Xor, (bool)a != (bool)b)

#define EW_COMPARE(NAME, OPER)                                                               \
  struct NAME : EwBinBase {                                                                  \
    static const bool BOOL_OUT = true;                                                       \
    template <class T>                                                                       \
    __device__ __forceinline__ bool operator()(T a, T b, const EwParams<3> &) const {       \
      return widen(a) OPER widen(b);                                                         \
    }                                                                                        \
  };
EW_COMPARE(Equal, ==)
EW_COMPARE(Less, <)
EW_COMPARE(Greater, >)
EW_COMPARE(LessOrEqual, <=)
EW_COMPARE(GreaterOrEqual, >=)

// PRelu: x < 0 ? x * slope : x.
struct PRelu : EwBinBase {
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const {
    typedef typename Compute<T>::type C;
    if constexpr (!IsSigned<T>::value) {
      return a;  // never negative
    } else if constexpr (IsFloat<T>::value) {
      return widen(a) < (C)0 ? Narrow<T>::from(widen(a) * widen(b)) : a;
    } else {
      typedef typename WrapT<T>::type W;
      return a < (T)0 ? (T)((W)a * (W)b) : a;
    }
  }
};

// com.microsoft FastGelu / BiasGelu with a bias: gelu(x + bias) in the compute type.
struct BiasGeluTanh : EwBinBase {
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const {
    return Narrow<T>::from(ew_gelu_tanh(widen(a) + widen(b)));
  }
};
struct BiasGeluErf : EwBinBase {
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const {
    return Narrow<T>::from(ew_gelu_erf(widen(a) + widen(b)));
  }
};

// Two-input Max / Min (NaN propagates, as the variadic fold) and Mean.
struct BMax : EwBinBase {
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const {
    auto x = widen(a), y = widen(b);
    return (x > y || x != x) ? a : b;
  }
};
struct BMin : EwBinBase {
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const {
    auto x = widen(a), y = widen(b);
    return (x < y || x != x) ? a : b;
  }
};
struct Mean2 : EwBinBase {
  template <class T> __device__ __forceinline__ T operator()(T a, T b, const EwParams<3> &) const {
    typedef typename Compute<T>::type C;
    return Narrow<T>::from((widen(a) + widen(b)) / (C)2);
  }
};

template <class Op, class T>
__device__ __forceinline__ void binary_run(const T *__restrict__ a, const T *__restrict__ b,
                                           typename EwOut2<Op, T>::type *__restrict__ o,
                                           const EwParams<3> &p) {
  typedef typename EwOut2<Op, T>::type TO;
  Op op;
  if (p.mode == 1) {
    constexpr int V = VecWidth<Op::template maxv<T>(), T, T, TO>::value;
    const i64 nv = p.n / V;
    const i64 ia = p.st[0][2], ib = p.st[1][2];
    GRID_LOOP(v, nv) {
      i64 i0, i1, i2;
      ew_pos3(p, v * V, i0, i1, i2);
      T ra[V], rb[V];
      ew_load<V>(a, ew_off3(p, 0, i0, i1, i2), ia, ra);
      ew_load<V>(b, ew_off3(p, 1, i0, i1, i2), ib, rb);
      TO r[V];
#pragma unroll
      for (int j = 0; j < V; ++j) r[j] = op(ra[j], rb[j], p);
      ew_store<V>(o, v * V, r);
    }
    // A 1-axis walk of a length that is not a multiple of V ends with a scalar tail.
    i64 t = nv * V + (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < p.n) o[t] = op(a[t * ia], b[t * ib], p);
  } else {
    GRID_LOOP(i, p.n) {
      i64 off[3];
      ew_offsets<3>(p, i, off);
      o[off[2]] = op(a[off[0]], b[off[1]], p);
    }
  }
}

// Pow with an exponent of another dtype (read as double by its code).
template <class T>
__device__ __forceinline__ void pow_mixed_run(const T *__restrict__ a, const void *__restrict__ b,
                                              T *__restrict__ o, const EwParams<3> &p) {
  if (p.mode == 1) {
    constexpr int V = VecWidth<4, T>::value;
    const i64 nv = p.n / V;
    const i64 ia = p.st[0][2], ib = p.st[1][2];
    GRID_LOOP(v, nv) {
      i64 i0, i1, i2;
      ew_pos3(p, v * V, i0, i1, i2);
      T ra[V];
      ew_load<V>(a, ew_off3(p, 0, i0, i1, i2), ia, ra);
      const i64 ob = ew_off3(p, 1, i0, i1, i2);
      T r[V];
#pragma unroll
      for (int j = 0; j < V; ++j) r[j] = ew_pow_mixed(ra[j], ew_load_f64(b, ob + j * ib, p.code));
      ew_store<V>(o, v * V, r);
    }
    i64 t = nv * V + (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < p.n) o[t] = ew_pow_mixed(a[t * ia], ew_load_f64(b, t * ib, p.code));
  } else {
    GRID_LOOP(i, p.n) {
      i64 off[3];
      ew_offsets<3>(p, i, off);
      o[off[2]] = ew_pow_mixed(a[off[0]], ew_load_f64(b, off[1], p.code));
    }
  }
}

#define EW_BINARY_ENTRY(TAG, T)                                                              \
  extern "C" __global__ void __launch_bounds__(256)                                          \
      ew_##TAG(const T *__restrict__ a, const T *__restrict__ b,                             \
               typename EwOut2<EW_OP, T>::type *__restrict__ o, EwParams<3> p) {            \
    binary_run<EW_OP, T>(a, b, o, p);                                                        \
  }
EW_TYPES(EW_BINARY_ENTRY)

#ifdef EW_POW
#define EW_POW_ENTRY(TAG, T)                                                                 \
  extern "C" __global__ void __launch_bounds__(256)                                          \
      ew_mixed_##TAG(const T *__restrict__ a, const void *__restrict__ b, T *__restrict__ o, \
                     EwParams<3> p) {                                                        \
    pow_mixed_run<T>(a, b, o, p);                                                            \
  }
EW_TYPES(EW_POW_ENTRY)
#endif
