// Helper kernels of the cuDNN convolutions (src/ops/conv/): packing of strided inputs (with
// the explicit part of asymmetric pads), the finishing epilogue (crop of a transposed
// convolution's result, per-channel bias, residual Z, activation, strided store) and direct
// integer convolutions (ConvInteger, QLinearConv). Metadata comes by value in the structs
// mirrored in src/ops/conv/mod.rs.

#define CONV_RANK 5

// ---- packing ----

// dst (contiguous, dims) [i] = src[i - off] (strided), zero where i - off leaves src.
struct ConvPack {
  i64 n;
  i32 rank;
  i32 _pad;
  i64 dims[CONV_RANK];
  i64 src_dims[CONV_RANK];
  i64 src_strides[CONV_RANK];
  i64 off[CONV_RANK];
};

template <typename W> __device__ void conv_pack(const W *src, W *dst, const ConvPack &p) {
  GRID_LOOP(i, p.n) {
    i64 rem = i;
    i64 s = 0;
    bool inside = true;
    for (int k = p.rank - 1; k >= 0; --k) {
      i64 d = p.dims[k];
      i64 c = rem % d;
      rem /= d;
      i64 j = c - p.off[k];
      if (j < 0 || j >= p.src_dims[k]) inside = false;
      s += j * p.src_strides[k];
    }
    dst[i] = inside ? src[s] : (W)0;
  }
}

#define CONV_PACK(W)                                                                         \
  extern "C" __global__ void conv_pack_w##W(const Word<W>::T *src, Word<W>::T *dst,          \
                                            ConvPack p) {                                    \
    conv_pack<Word<W>::T>(src, dst, p);                                                      \
  }
CONV_PACK(1)
CONV_PACK(2)
CONV_PACK(4)
CONV_PACK(8)

// ---- activations (the CPU provider's FusedConv set) ----

__device__ __forceinline__ float conv_exp(float x) { return expf(x); }
__device__ __forceinline__ double conv_exp(double x) { return exp(x); }
__device__ __forceinline__ float conv_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double conv_tanh(double x) { return tanh(x); }

template <typename F> __device__ __forceinline__ F conv_sigmoid(F x) {
  // Split by sign so exp never overflows.
  if (x >= (F)0) return (F)1 / ((F)1 + conv_exp(-x));
  F e = conv_exp(x);
  return e / ((F)1 + e);
}

template <typename F> __device__ __forceinline__ F conv_clamp01(F x) {
  F y = x < (F)0 ? (F)0 : x;
  return y > (F)1 ? (F)1 : y;
}

// Codes as in src/ops/conv/mod.rs `Activation::code`. NaN stays NaN (selects, not fmax).
template <typename F> __device__ __forceinline__ F conv_act(F x, int act, F a, F b) {
  switch (act) {
  case 1: return x < (F)0 ? (F)0 : x;                          // Relu
  case 2: return conv_tanh(x);                                 // Tanh
  case 3: return conv_sigmoid(x);                              // Sigmoid
  case 4: return x < (F)0 ? x * a : x;                         // LeakyRelu(alpha)
  case 5: {                                                    // Clip(min, max)
    F y = x < a ? a : x;
    return y > b ? b : y;
  }
  case 6: return conv_clamp01(x * a + b);                      // HardSigmoid(alpha, beta)
  case 7: return x * conv_clamp01(x * ((F)1 / (F)6) + (F)0.5); // HardSwish
  case 8: return x * conv_sigmoid(a * x);                      // QuickGelu(alpha)
  default: return x;
  }
}

// ---- the finishing epilogue ----

// dst[i] (strided) = act(src[i + off] (contiguous src_dims; zero outside or without src)
//                        + bias[c * bias_stride] + z[i] (strided))
struct ConvFinish {
  i64 n;
  i32 rank;
  i32 act;
  i64 dims[CONV_RANK];
  i64 dst_strides[CONV_RANK];
  i64 src_dims[CONV_RANK];
  i64 off[CONV_RANK];
  i64 z_strides[CONV_RANK];
  i64 bias_stride;
  // Elements per channel plane and channel count (the contiguous kernels' channel lookup).
  i64 inner;
  i64 channels;
  double alpha;
  double beta;
  i32 has_src;
  i32 has_bias;
  i32 has_z;
  i32 _pad;
};

template <typename T> struct ConvCompute { typedef float F; };
template <> struct ConvCompute<double> { typedef double F; };

template <typename T> __device__ void conv_finish(const T *src, const T *bias, const T *z, T *dst,
                                                  const ConvFinish &p) {
  typedef typename ConvCompute<T>::F F;
  const F a = (F)p.alpha, b = (F)p.beta;
  GRID_LOOP(i, p.n) {
    i64 rem = i, so = 0, zo = 0, d = 0, ss = 1, c = 0;
    bool inside = p.has_src != 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      i64 dim = p.dims[k];
      i64 idx = rem % dim;
      rem /= dim;
      if (k == 1) c = idx;
      i64 j = idx + p.off[k];
      if (j < 0 || j >= p.src_dims[k]) inside = false;
      so += j * ss;
      ss *= p.src_dims[k];
      zo += idx * p.z_strides[k];
      d += idx * p.dst_strides[k];
    }
    F v = inside ? (F)widen(src[so]) : (F)0;
    if (p.has_bias) v += (F)widen(bias[c * p.bias_stride]);
    if (p.has_z) v += (F)widen(z[zo]);
    dst[d] = Narrow<T>::from(conv_act<F>(v, p.act, a, b));
  }
}

template <typename T, int V> struct alignas(sizeof(T) * V) ConvVec {
  T v[V];
};

// src, z and dst contiguous with dims (no crop); `inner` % V == 0 and every pointer aligned
// to V elements, so each thread's V elements share one channel and move as one load/store.
template <typename T, int V>
__device__ void conv_finish_contig(const T *src, const T *bias, const T *z, T *dst,
                                   const ConvFinish &p) {
  typedef typename ConvCompute<T>::F F;
  typedef ConvVec<T, V> Vec;
  const F a = (F)p.alpha, b = (F)p.beta;
  const i64 nv = p.n / V;
  // 32-bit division where every index fits (the common case): 64-bit division is a long
  // software sequence on the GPU.
  const bool small = p.n <= 0xffffffffLL;
  GRID_LOOP(i, nv) {
    const i64 e = i * V;
    const i64 c = small ? (i64)(((unsigned)e / (unsigned)p.inner) % (unsigned)p.channels)
                        : (e / p.inner) % p.channels;
    const F bv = p.has_bias ? (F)widen(bias[c * p.bias_stride]) : (F)0;
    Vec s, zz, out;
    if (p.has_src) s = reinterpret_cast<const Vec *>(src)[i];
    if (p.has_z) zz = reinterpret_cast<const Vec *>(z)[i];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      F v = p.has_src ? (F)widen(s.v[k]) : (F)0;
      v += bv;
      if (p.has_z) v += (F)widen(zz.v[k]);
      out.v[k] = Narrow<T>::from(conv_act<F>(v, p.act, a, b));
    }
    reinterpret_cast<Vec *>(dst)[i] = out;
  }
}

#define CONV_FINISH(TAG, T)                                                                  \
  extern "C" __global__ void conv_finish_##TAG(const T *src, const T *bias, const T *z,      \
                                               T *dst, ConvFinish p) {                       \
    conv_finish<T>(src, bias, z, dst, p);                                                    \
  }                                                                                          \
  extern "C" __global__ void conv_finish_contig_##TAG(const T *src, const T *bias,           \
                                                      const T *z, T *dst, ConvFinish p) {    \
    conv_finish_contig<T, 1>(src, bias, z, dst, p);                                          \
  }                                                                                          \
  extern "C" __global__ void conv_finish_vec_##TAG(const T *src, const T *bias, const T *z,  \
                                                   T *dst, ConvFinish p) {                   \
    conv_finish_contig<T, 16 / sizeof(T)>(src, bias, z, dst, p);                             \
  }
CONV_FINISH(f32, float)
CONV_FINISH(f64, double)
CONV_FINISH(f16, f16)
CONV_FINISH(bf16, bf16)

// ---- direct integer convolutions ----

// One output element per thread; spatial axes padded to three (size-1 axes, kernel 1).
struct ConvQ {
  i64 n;
  i64 out_dims[CONV_RANK]; // N, M, o0, o1, o2
  i64 in_dims[CONV_RANK];  // N, C, i0, i1, i2
  i64 x_strides[CONV_RANK];
  i64 w_strides[CONV_RANK]; // M, C/group, k0, k1, k2
  i64 y_strides[CONV_RANK];
  i64 kernel[3];
  i64 stride[3];
  i64 dil[3];
  i64 pad[3];
  i64 group_in;  // C / group
  i64 group_out; // M / group
  // Per-channel parameters: stride 0 for a scalar; unused when absent.
  i64 wzp_stride;
  i64 wscale_stride;
  i64 bias_stride;
  i32 has_xzp;
  i32 has_wzp;
  i32 has_bias;
  i32 _pad;
};

template <typename X, typename W>
__device__ __forceinline__ long long conv_q_acc(const X *x, const W *w, const X *xzp,
                                                const W *wzp, const ConvQ &p, i64 i, i64 &m,
                                                i64 &yo) {
  i64 rem = i;
  i64 o[3];
  for (int k = 2; k >= 0; --k) {
    o[k] = rem % p.out_dims[2 + k];
    rem /= p.out_dims[2 + k];
  }
  m = rem % p.out_dims[1];
  const i64 nb = rem / p.out_dims[1];
  yo = nb * p.y_strides[0] + m * p.y_strides[1] + o[0] * p.y_strides[2] +
       o[1] * p.y_strides[3] + o[2] * p.y_strides[4];
  const i64 g = m / p.group_out;
  const int xz = p.has_xzp ? (int)xzp[0] : 0;
  const int wz = p.has_wzp ? (int)wzp[m * p.wzp_stride] : 0;
  long long acc = 0;
  const X *xb = x + nb * p.x_strides[0];
  const W *wb = w + m * p.w_strides[0];
  for (i64 ci = 0; ci < p.group_in; ++ci) {
    const X *xc = xb + (g * p.group_in + ci) * p.x_strides[1];
    const W *wc = wb + ci * p.w_strides[1];
    for (i64 k0 = 0; k0 < p.kernel[0]; ++k0) {
      const i64 i0 = o[0] * p.stride[0] - p.pad[0] + k0 * p.dil[0];
      if (i0 < 0 || i0 >= p.in_dims[2]) continue;
      for (i64 k1 = 0; k1 < p.kernel[1]; ++k1) {
        const i64 i1 = o[1] * p.stride[1] - p.pad[1] + k1 * p.dil[1];
        if (i1 < 0 || i1 >= p.in_dims[3]) continue;
        for (i64 k2 = 0; k2 < p.kernel[2]; ++k2) {
          const i64 i2 = o[2] * p.stride[2] - p.pad[2] + k2 * p.dil[2];
          if (i2 < 0 || i2 >= p.in_dims[4]) continue;
          const int xv = (int)xc[i0 * p.x_strides[2] + i1 * p.x_strides[3] + i2 * p.x_strides[4]];
          const int wv = (int)wc[k0 * p.w_strides[2] + k1 * p.w_strides[3] + k2 * p.w_strides[4]];
          acc += (long long)((xv - xz) * (wv - wz));
        }
      }
    }
  }
  return acc;
}

// ConvInteger: int32 output (saturated, as the CPU provider's `as i32`).
template <typename X, typename W>
__device__ void conv_integer(const X *x, const W *w, const X *xzp, const W *wzp, int *y,
                             const ConvQ &p) {
  GRID_LOOP(i, p.n) {
    i64 m, yo;
    long long acc = conv_q_acc<X, W>(x, w, xzp, wzp, p, i, m, yo);
    if (acc > 2147483647LL) acc = 2147483647LL;
    if (acc < -2147483648LL) acc = -2147483648LL;
    y[yo] = (int)acc;
  }
}

// QLinearConv: (acc + bias) * (x_scale * w_scale[m] / y_scale) in f32, rounded half to even,
// plus the output zero point, saturated; NaN gives 0 (the CPU provider's rules).
template <typename X, typename W, typename Y>
__device__ void qlinear_conv(const X *x, const float *xs, const X *xzp, const W *w,
                             const float *ws, const W *wzp, const float *ys, const Y *yzp,
                             const int *bias, Y *y, const ConvQ &p, float lo, float hi) {
  GRID_LOOP(i, p.n) {
    i64 m, yo;
    long long acc = conv_q_acc<X, W>(x, w, xzp, wzp, p, i, m, yo);
    if (p.has_bias) acc += (long long)bias[m * p.bias_stride];
    const float s = xs[0] * ws[m * p.wscale_stride] / ys[0];
    float v = rintf((float)acc * s) + (float)yzp[0];
    if (v != v) v = 0.0f;
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    y[yo] = (Y)v;
  }
}

#define CONV_INTEGER(XT, X, WT, W)                                                          \
  extern "C" __global__ void conv_integer_##XT##_##WT(const X *x, const W *w, const X *xzp,  \
                                                       const W *wzp, int *y, ConvQ p) {      \
    conv_integer<X, W>(x, w, xzp, wzp, y, p);                                               \
  }
CONV_INTEGER(u8, unsigned char, u8, unsigned char)
CONV_INTEGER(u8, unsigned char, i8, signed char)
CONV_INTEGER(i8, signed char, u8, unsigned char)
CONV_INTEGER(i8, signed char, i8, signed char)

#define QLINEAR_CONV(XT, X, WT, W, YT, Y, LO, HI)                                           \
  extern "C" __global__ void qlinear_conv_##XT##_##WT##_##YT(                                \
      const X *x, const float *xs, const X *xzp, const W *w, const float *ws, const W *wzp,  \
      const float *ys, const Y *yzp, const int *bias, Y *y, ConvQ p) {                       \
    qlinear_conv<X, W, Y>(x, xs, xzp, w, ws, wzp, ys, yzp, bias, y, p, LO, HI);              \
  }
#define QLINEAR_CONV_Y(XT, X, WT, W)                                                        \
  QLINEAR_CONV(XT, X, WT, W, u8, unsigned char, 0.0f, 255.0f)                               \
  QLINEAR_CONV(XT, X, WT, W, i8, signed char, -128.0f, 127.0f)
QLINEAR_CONV_Y(u8, unsigned char, u8, unsigned char)
QLINEAR_CONV_Y(u8, unsigned char, i8, signed char)
QLINEAR_CONV_Y(i8, signed char, u8, unsigned char)
QLINEAR_CONV_Y(i8, signed char, i8, signed char)
