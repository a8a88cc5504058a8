// Unary element-wise ops (math, activations, predicates, Clip, Shrink): the module's EW_OP for
// every dtype of EW_TYPES, as `ew_<tag>(x, y, lo, hi, EwParams<2>)` (lo/hi: Clip's optional
// bound tensors, null otherwise). Semantics follow the CPU provider (numpy): NaN propagates
// through the float maps, integers wrap.

template <class T> struct UArgs {
  const EwParams<2> *p;
  T lo, hi;
};

struct EwOpBase {
  static const bool BOOL_OUT = false;
  static const bool BOUNDS = false;
  static const int MAXV = 16;
};

template <class Op, class T> struct EwOut {
  typedef typename Cond<Op::BOOL_OUT, bool, T>::type type;
};

// A float map: `EXPR` in the compute type C on `x` (attributes through `p`).
#define EW_FMAP(NAME, EXPR)                                                                  \
  struct NAME : EwOpBase {                                                                   \
    template <class T>                                                                       \
    __device__ __forceinline__ T operator()(T v, const UArgs<T> &u) const {                 \
      typedef typename Compute<T>::type C;                                                   \
      const EwParams<2> &p = *u.p;                                                           \
      (void)p;                                                                               \
      C x = widen(v);                                                                        \
      return Narrow<T>::from((C)(EXPR));                                                     \
    }                                                                                        \
  };

EW_FMAP(Ceil, ceil(x))
EW_FMAP(Floor, floor(x))
EW_FMAP(Round, rint(x))  // the default rounding mode: halves to even
EW_FMAP(Sqrt, sqrt(x))
EW_FMAP(Reciprocal, (C)1 / x)
EW_FMAP(Exp, exp(x))
EW_FMAP(Log, log(x))
EW_FMAP(Sin, sin(x))
EW_FMAP(Cos, cos(x))
EW_FMAP(Tan, tan(x))
EW_FMAP(Asin, asin(x))
EW_FMAP(Acos, acos(x))
EW_FMAP(Atan, atan(x))
EW_FMAP(Sinh, sinh(x))
EW_FMAP(Cosh, cosh(x))
EW_FMAP(Asinh, asinh(x))
EW_FMAP(Acosh, acosh(x))
EW_FMAP(Atanh, atanh(x))
EW_FMAP(Erf, erf(x))
EW_FMAP(Tanh, tanh(x))
// Sigmoid of a half-type element, computed in float: exp2f (2 ulp, subnormals kept) of
// -|x| log2(e) and a fast reciprocal of 1 + t, in [1, 2]; without a branch. Its error (a few
// float ulps) is far below a half type's rounding; float and double keep ew_sigmoid.
__device__ __forceinline__ float ew_sigmoid_half(float x) {
  const float t = exp2f(-fabsf(x) * 1.4426950408889634f);
  const float r = __fdividef(1.0f, 1.0f + t);
  return x >= 0.0f ? r : t * r;  // NaN: t and r are NaN
}
template <class T, class C> __device__ __forceinline__ C ew_sigmoid_of(C x) {
  if constexpr (same_type<T, f16>::value || same_type<T, bf16>::value) {
    return ew_sigmoid_half(x);
  } else {
    return ew_sigmoid(x);
  }
}

EW_FMAP(Sigmoid, ew_sigmoid_of<T>(x))
EW_FMAP(Softplus, ew_softplus(x))
EW_FMAP(Softsign, x / ((C)1 + fabs(x)))
EW_FMAP(Mish, x * tanh(ew_softplus(x)))
EW_FMAP(GeluErf, ew_gelu_erf(x))
EW_FMAP(GeluTanh, ew_gelu_tanh(x))
EW_FMAP(HardSwish, x * fmin(fmax(x / (C)6 + (C)0.5, (C)0), (C)1))
EW_FMAP(LeakyRelu, x < (C)0 ? x * (C)p.a : x)
EW_FMAP(Elu, x < (C)0 ? (C)p.a * expm1(x) : x)
EW_FMAP(Selu, x > (C)0 ? (C)p.b * x : (C)p.b * ((C)p.a * exp(x) - (C)p.a))
EW_FMAP(Celu, fmax(x, (C)0) + fmin((C)p.a * expm1(x / (C)p.a), (C)0))
EW_FMAP(HardSigmoid, fmin(fmax((C)p.a * x + (C)p.b, (C)0), (C)1))
EW_FMAP(ThresholdedRelu, x > (C)p.a ? x : (C)0)
EW_FMAP(Swish, x * ew_sigmoid_of<T>((C)p.a * x))  // Swish and com.microsoft QuickGelu

template <class T> __device__ __forceinline__ T ew_wrap_neg(T v) { return (T)(0ull - (u64)(i64)v); }

// Abs, Neg, Sign and Relu: floats and integers.
struct Abs : EwOpBase {
  template <class T> __device__ __forceinline__ T operator()(T v, const UArgs<T> &) const {
    if constexpr (IsFloat<T>::value) {
      return Narrow<T>::from(fabs(widen(v)));
    } else if constexpr (IsSigned<T>::value) {
      return v < (T)0 ? ew_wrap_neg(v) : v;
    } else {
      return v;
    }
  }
};
struct Neg : EwOpBase {
  template <class T> __device__ __forceinline__ T operator()(T v, const UArgs<T> &) const {
    if constexpr (IsFloat<T>::value) {
      return Narrow<T>::from(-widen(v));
    } else {
      return ew_wrap_neg(v);
    }
  }
};
struct Sign : EwOpBase {
  template <class T> __device__ __forceinline__ T operator()(T v, const UArgs<T> &) const {
    typedef typename Compute<T>::type C;
    C x = widen(v);
    if constexpr (IsFloat<T>::value) {
      return x > (C)0 ? Narrow<T>::from((C)1) : (x < (C)0 ? Narrow<T>::from((C)-1) : v);
    } else if constexpr (IsSigned<T>::value) {
      return x > (C)0 ? (T)1 : (x < (C)0 ? (T)-1 : (T)0);
    } else {
      return x != (C)0 ? (T)1 : (T)0;
    }
  }
};
struct Relu : EwOpBase {
  template <class T> __device__ __forceinline__ T operator()(T v, const UArgs<T> &) const {
    typedef typename Compute<T>::type C;
    return widen(v) < (C)0 ? Narrow<T>::from((C)0) : v;
  }
};

// Float8 classes by ONNX dtype code: (is NaN, infinity sign).
__device__ __forceinline__ void ew_f8_class(int code, u8 b, bool &nan, int &inf) {
  inf = 0;
  switch (code) {
  case 17: nan = (b & 0x7f) == 0x7f; break;      // E4M3FN: no infinities
  case 18: case 20: nan = b == 0x80; break;      // E4M3FNUZ, E5M2FNUZ
  case 19: {                                      // E5M2
    u8 m = b & 0x7f;
    nan = m > 0x7c;
    if (m == 0x7c) inf = (b & 0x80) ? -1 : 1;
    break;
  }
  default: nan = false;
  }
}

// IsNaN and IsInf: float inputs (unsigned char is a float8 byte, its format in p.code).
struct IsNaN : EwOpBase {
  static const bool BOOL_OUT = true;
  template <class T> __device__ __forceinline__ bool operator()(T v, const UArgs<T> &u) const {
    if constexpr (same_type<T, unsigned char>::value) {
      bool nan;
      int inf;
      ew_f8_class(u.p->code, v, nan, inf);
      return nan;
    } else {
      auto x = widen(v);
      return x != x;
    }
  }
};
// flags: bit 0 detect positive, bit 1 detect negative.
struct IsInf : EwOpBase {
  static const bool BOOL_OUT = true;
  template <class T> __device__ __forceinline__ bool operator()(T v, const UArgs<T> &u) const {
    bool pos = (u.p->flags & 1) != 0, neg = (u.p->flags & 2) != 0;
    if constexpr (same_type<T, unsigned char>::value) {
      bool nan;
      int inf;
      ew_f8_class(u.p->code, v, nan, inf);
      return (inf > 0 && pos) || (inf < 0 && neg);
    } else {
      auto x = widen(v);
      return isinf(x) && ((x > 0 && pos) || (x < 0 && neg));
    }
  }
};

struct Not : EwOpBase {
  template <class T> __device__ __forceinline__ T operator()(T v, const UArgs<T> &) const { return !v; }
};
struct BitwiseNot : EwOpBase {
  template <class T> __device__ __forceinline__ T operator()(T v, const UArgs<T> &) const { return (T)~v; }
};

// Shrink (lambd = p.a, bias = p.b), computed in double as the CPU provider does.
struct Shrink : EwOpBase {
  template <class T> __device__ __forceinline__ T operator()(T v, const UArgs<T> &u) const {
    double f = (double)widen(v), lambd = u.p->a, bias = u.p->b;
    if (f < -lambd) return Narrow<T>::from(f + bias);
    if (f > lambd) return Narrow<T>::from(f - bias);
    return Narrow<T>::from(0.0);
  }
};

template <class T> __device__ __forceinline__ T ew_lowest() {
  if constexpr (IsFloat<T>::value) {
    return Narrow<T>::from(-__int_as_float(0x7f800000));
  } else if constexpr (same_type<T, bool>::value) {
    return false;
  } else {
    return IntLimits<T>::lo();
  }
}
template <class T> __device__ __forceinline__ T ew_highest() {
  if constexpr (IsFloat<T>::value) {
    return Narrow<T>::from(__int_as_float(0x7f800000));
  } else if constexpr (same_type<T, bool>::value) {
    return true;
  } else {
    return IntLimits<T>::hi();
  }
}

// Clip: max(min) with the bounds of UArgs (v < lo -> lo, then v > hi -> hi; NaN stays NaN).
struct Clip : EwOpBase {
  static const bool BOUNDS = true;
  template <class T> __device__ __forceinline__ T operator()(T v, const UArgs<T> &u) const {
    T r = widen(v) < widen(u.lo) ? u.lo : v;
    return widen(r) > widen(u.hi) ? u.hi : r;
  }
};

template <class Op, class T>
__device__ __forceinline__ void unary_run(const T *__restrict__ x,
                                          typename EwOut<Op, T>::type *__restrict__ y,
                                          const T *lo, const T *hi, const EwParams<2> &p) {
  typedef typename EwOut<Op, T>::type TO;
  Op op;
  UArgs<T> u;
  u.p = &p;
  if constexpr (Op::BOUNDS) {
    // Bounds: a tensor (opset 11+), else an attribute (flags bit 0: min in a, bit 1: max in
    // b), else the type's range.
    u.lo = lo != nullptr ? *lo : ((p.flags & 1) ? Narrow<T>::from(p.a) : ew_lowest<T>());
    u.hi = hi != nullptr ? *hi : ((p.flags & 2) ? Narrow<T>::from(p.b) : ew_highest<T>());
  }
  if (p.mode == 1) {
    constexpr int V = VecWidth<Op::MAXV, T, TO>::value;
    const i64 nv = p.n / V;
    GRID_LOOP(v, nv) {
      T r[V];
      ew_load<V>(x, v * V, 1, r);
      TO o[V];
#pragma unroll
      for (int j = 0; j < V; ++j) o[j] = op(r[j], u);
      ew_store<V>(y, v * V, o);
    }
    i64 t = nv * V + (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < p.n) y[t] = op(x[t], u);
  } else {
    GRID_LOOP(i, p.n) {
      i64 off[2];
      ew_offsets<2>(p, i, off);
      y[off[1]] = op(x[off[0]], u);
    }
  }
}

#define EW_UNARY_ENTRY(TAG, T)                                                               \
  extern "C" __global__ void __launch_bounds__(256)                                          \
      ew_##TAG(const T *__restrict__ x, typename EwOut<EW_OP, T>::type *__restrict__ y,     \
               const T *lo, const T *hi, EwParams<2> p) {                                    \
    unary_run<EW_OP, T>(x, y, lo, hi, p);                                                    \
  }

EW_TYPES(EW_UNARY_ENTRY)
