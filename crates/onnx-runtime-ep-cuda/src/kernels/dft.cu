// DFT (opsets 17, 20) and STFT (opset 17), mirroring the CPU provider
// (onnx-runtime-ep-cpu/src/ops/nn/signal/spectral.rs). A "line" is one transform: its
// samples x[line][t] for t < m = min(n, len) (zero beyond, so dft_length pads or truncates),
// real (comps 1) or complex (comps 2), times the window (STFT). The inverse one-sided case
// (irfft) first rebuilds the Hermitian spectrum of `len` bins from the n given ones (bins 0
// and len/2 real) and keeps only the real parts. Outputs are the first out_len bins, divided
// by len for the inverse. Everything in double (inputs widened, twiddles from sincospi in
// double), stored as float32 then narrowed for the 32- and 16-bit types, as the CPU does.
//
// dft_direct_T: one thread per output bin, O(len) per bin (any length); the twiddles of the
// length sit in shared memory when len <= DFT_TABLE. dft_fft_T: one block per line for
// power-of-two lengths up to DFT_FFT_MAX: bit-reversed load into shared memory, radix-2
// butterflies with a shared twiddle table (24 * len bytes of dynamic shared memory).

#define DFT_TABLE 4096

struct DftParams {
  i64 lines;
  i64 ldims[MAX_RANK]; // the line axes (every axis but the transform and complex ones)
  i64 lxs[MAX_RANK];   // their input strides
  i64 los[MAX_RANK];   // their output strides
  i64 n;               // samples the input has along the axis
  i64 len;             // transform length
  i64 out_len;         // bins written
  i64 m;               // samples read: min(n, len)
  i64 xt, xc;          // input strides: axis, complex component
  i64 ot, oc;          // output strides: axis, complex component
  i64 ws;              // window stride
  i32 nld;             // line axes
  i32 comps;           // 1 real, 2 complex input
  i32 out_comps;       // 2, or 1 (irfft: real parts)
  i32 inverse;
  i32 irfft;
  i32 win_code;        // ONNX dtype of the window, 0 without one
};

__device__ __forceinline__ double dft_load(const void *p, i64 off, int code) {
  switch (code) {
  case 1: return (double)((const float *)p)[off];
  case 10: return (double)__half2float(((const f16 *)p)[off]);
  case 11: return ((const double *)p)[off];
  case 16: return (double)__bfloat162float(((const bf16 *)p)[off]);
  default: return 0.0;
  }
}

__device__ __forceinline__ void dft_line(const DftParams &p, i64 l, i64 &xo, i64 &oo) {
  xo = 0;
  oo = 0;
  for (int d = p.nld - 1; d >= 0; --d) {
    const i64 c = l % p.ldims[d];
    l /= p.ldims[d];
    xo += c * p.lxs[d];
    oo += c * p.los[d];
  }
}

// Element t (< len) of the transform's input.
template <typename T>
__device__ __forceinline__ void dft_value(const T *__restrict__ x, const void *__restrict__ win,
                                          const DftParams &p, i64 xo, i64 t, double &re,
                                          double &im) {
  if (p.irfft) {
    const i64 half = p.len / 2;
    const bool conj = t > half;
    const i64 j = conj ? p.len - t : t;
    re = 0.0;
    im = 0.0;
    if (j < p.n) {
      const i64 o = xo + j * p.xt;
      re = (double)widen(x[o]);
      if (p.comps == 2) im = (double)widen(x[o + p.xc]);
    }
    if (j == 0 || (p.len % 2 == 0 && j == half)) im = 0.0;
    if (conj) im = -im;
    return;
  }
  re = 0.0;
  im = 0.0;
  if (t >= p.m) return;
  const i64 o = xo + t * p.xt;
  re = (double)widen(x[o]);
  if (p.win_code != 0) {
    const double w = dft_load(win, t * p.ws, p.win_code);
    re = re * w;
    if (p.comps == 2) im = (double)widen(x[o + p.xc]) * w;
  } else if (p.comps == 2) {
    im = (double)widen(x[o + p.xc]);
  }
}

template <typename T> __device__ __forceinline__ T dft_narrow(double v) {
  if constexpr (same_type<T, double>::value) {
    return v;
  } else {
    return Narrow<T>::from((float)v);
  }
}

template <typename T>
__device__ __forceinline__ void dft_store(T *__restrict__ y, const DftParams &p, i64 oo, i64 k,
                                          double re, double im) {
  if (p.inverse) {
    re /= (double)p.len;
    im /= (double)p.len;
  }
  const i64 o = oo + k * p.ot;
  y[o] = dft_narrow<T>(re);
  if (p.out_comps == 2) y[o + p.oc] = dft_narrow<T>(im);
}

template <typename T>
__device__ void dft_direct(const T *__restrict__ x, const void *__restrict__ win, T *__restrict__ y,
                           const DftParams &p) {
  extern __shared__ double2 dft_tw[];
  const bool table = p.len <= DFT_TABLE;
  if (table) {
    for (i64 k = threadIdx.x; k < p.len; k += blockDim.x) {
      double s, c;
      sincospi(2.0 * (double)k / (double)p.len, &s, &c);
      dft_tw[k] = make_double2(c, s);
    }
    __syncthreads();
  }
  const i64 count = p.irfft ? p.len : p.m;
  const double sign = p.inverse ? 1.0 : -1.0;
  GRID_LOOP(e, p.lines * p.out_len) {
    const i64 k = e % p.out_len;
    const i64 l = e / p.out_len;
    i64 xo, oo;
    dft_line(p, l, xo, oo);
    double re = 0.0, im = 0.0;
    i64 r = 0; // (k * t) mod len
    for (i64 t = 0; t < count; ++t) {
      double c, s;
      if (table) {
        const double2 w = dft_tw[r];
        c = w.x;
        s = w.y;
      } else {
        sincospi(2.0 * (double)r / (double)p.len, &s, &c);
      }
      s *= sign;
      double xr, xi;
      dft_value(x, win, p, xo, t, xr, xi);
      re += xr * c - xi * s;
      im += xr * s + xi * c;
      r += k;
      if (r >= p.len) r -= p.len;
    }
    dft_store(y, p, oo, k, re, im);
  }
}

template <typename T>
__device__ void dft_fft(const T *__restrict__ x, const void *__restrict__ win, T *__restrict__ y,
                        const DftParams &p) {
  extern __shared__ double2 dft_sm[];
  double2 *buf = dft_sm;
  double2 *tw = dft_sm + p.len;
  const i64 half = p.len / 2;
  int lg = 0;
  while ((1LL << lg) < p.len) ++lg;
  const double sign = p.inverse ? 1.0 : -1.0;
  for (i64 j = threadIdx.x; j < half; j += blockDim.x) {
    double s, c;
    sincospi(2.0 * (double)j / (double)p.len, &s, &c);
    tw[j] = make_double2(c, sign * s);
  }
  for (i64 l = blockIdx.x; l < p.lines; l += gridDim.x) {
    i64 xo, oo;
    dft_line(p, l, xo, oo);
    __syncthreads(); // the twiddles are ready and the previous line's reads are done
    for (i64 t = threadIdx.x; t < p.len; t += blockDim.x) {
      double re, im;
      dft_value(x, win, p, xo, t, re, im);
      buf[(i64)(__brevll((u64)t) >> (64 - lg))] = make_double2(re, im);
    }
    __syncthreads();
    for (i64 h = 1; h < p.len; h <<= 1) {
      const i64 step = p.len / (2 * h);
      for (i64 j = threadIdx.x; j < half; j += blockDim.x) {
        const i64 pos = j & (h - 1);
        const i64 i0 = (j - pos) * 2 + pos;
        const i64 i1 = i0 + h;
        const double2 w = tw[pos * step];
        const double2 a = buf[i0], b = buf[i1];
        const double tr = w.x * b.x - w.y * b.y;
        const double ti = w.x * b.y + w.y * b.x;
        buf[i0] = make_double2(a.x + tr, a.y + ti);
        buf[i1] = make_double2(a.x - tr, a.y - ti);
      }
      __syncthreads();
    }
    for (i64 k = threadIdx.x; k < p.out_len; k += blockDim.x) {
      dft_store(y, p, oo, k, buf[k].x, buf[k].y);
    }
  }
}

#define DFT_KERNELS(NAME, T)                                                                 \
  extern "C" __global__ void dft_direct_##NAME(const T *__restrict__ x,                      \
                                               const void *__restrict__ win,                 \
                                               T *__restrict__ y, DftParams p) {             \
    dft_direct<T>(x, win, y, p);                                                             \
  }                                                                                          \
  extern "C" __global__ void dft_fft_##NAME(const T *__restrict__ x,                         \
                                            const void *__restrict__ win, T *__restrict__ y, \
                                            DftParams p) {                                   \
    dft_fft<T>(x, win, y, p);                                                                \
  }

DFT_KERNELS(f32, float)
DFT_KERNELS(f64, double)
DFT_KERNELS(f16, f16)
DFT_KERNELS(bf16, bf16)
