// Signal-processing generators: the Hann, Hamming and Blackman windows (opset 17), one thread
// per element. The value is worked out in double exactly as the CPU provider does (products
// through __dmul_rn so nothing is contracted into an FMA that the CPU does not do), then
// stored as the output type: floats through float32 except double (the CPU's
// `as f32` then narrow), integers truncated (out of range or NaN gives 0, like the CPU's
// checked cast).

#define WIN_HANN 0
#define WIN_HAMMING 1
#define WIN_BLACKMAN 2

struct WindowParams {
  i64 n;      // elements
  i64 stride; // output element stride
  double nn;  // the divisor: size when periodic, size - 1 otherwise
  i32 kind;
  i32 _pad;
};

__device__ __forceinline__ double win_value(const WindowParams &p, i64 i) {
  const double two_pi = 6.283185307179586; // 2.0 * PI rounded as the CPU's `2.0 * PI`
  const double x = __dmul_rn(two_pi, (double)i) / p.nn;
  const double c = cos(x);
  switch (p.kind) {
  case WIN_HANN: return 0.5 - __dmul_rn(0.5, c);
  case WIN_HAMMING: {
    const double a = 25.0 / 46.0;
    return a - __dmul_rn(1.0 - a, c);
  }
  default: {
    const double c2 = cos(__dmul_rn(2.0, x));
    return (0.42 - __dmul_rn(0.5, c)) + __dmul_rn(0.08, c2);
  }
  }
}

template <typename T> __device__ __forceinline__ T win_store(double v) {
  if constexpr (same_type<T, double>::value) {
    return v;
  } else if constexpr (same_type<T, float>::value || same_type<T, f16>::value ||
                       same_type<T, bf16>::value) {
    return Narrow<T>::from((float)v);
  } else {
    // The CPU's `num_traits::cast(x.trunc())`: values outside T (and NaN) give 0.
    const double t = trunc(v);
    // (The 64-bit limits round up to 2^63 / 2^64 as doubles: those are out of range.)
    const double hi = (double)IntLimits<T>::hi();
    const bool fits = sizeof(T) == 8 ? t < hi : t <= hi;
    if (!(t >= (double)IntLimits<T>::lo() && fits)) return (T)0;
    return (T)t;
  }
}

#define WINDOW(NAME, T)                                                                      \
  extern "C" __global__ void window_##NAME(T *__restrict__ y, WindowParams p) {              \
    GRID_LOOP(i, p.n) { y[i * p.stride] = win_store<T>(win_value(p, i)); }                   \
  }

FOR_NUMERIC(WINDOW)
