// The activations fused after a matrix product (MatMulBias's `activation`; codes from
// `Act::code` in src/ops/gemm/shape.rs), shared by the epilogue kernels (gemm.cu) and the
// decode GEMV (gemv.cu).

__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }

// Split by sign so exp never overflows; NaN stays NaN.
template <typename A> __device__ __forceinline__ A sigmoid_of(A x) {
  if (x >= (A)0) return (A)1 / ((A)1 + m_exp(-x));
  A e = m_exp(x);
  return e / ((A)1 + e);
}

template <typename A> __device__ __forceinline__ A clamp01(A x) {
  A y = x < (A)0 ? (A)0 : x;
  return y > (A)1 ? (A)1 : y;
}

// The activations of MatMulBias (codes from `Act::code` in shape.rs).
template <typename A> __device__ __forceinline__ A activate(A x, int act, A p0, A p1) {
  switch (act) {
  case 1: return x < (A)0 ? (A)0 : x;
  case 2: return m_tanh(x);
  case 3: return sigmoid_of(x);
  case 4: return x < (A)0 ? x * p0 : x;
  case 5: {
    A y = x < p0 ? p0 : x;
    return y > p1 ? p1 : y;
  }
  case 6: return clamp01(x * p0 + p1);
  case 7: return x * clamp01(x * (A)(1.0 / 6.0) + (A)0.5);
  case 8: return x * sigmoid_of(p0 * x);
  case 9: return (A)0.5 * x * ((A)1 + m_erf(x * (A)0.70710678118654752440));
  case 10: {
    const A k = (A)0.79788456080286535588;  // sqrt(2 / pi)
    return (A)0.5 * x * ((A)1 + m_tanh(k * (x + (A)0.044715 * x * x * x)));
  }
  default: return x;
  }
}
