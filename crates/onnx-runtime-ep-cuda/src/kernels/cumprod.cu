// CumProd along one axis, typed. One thread scans one line (all coordinates but the axis),
// exclusive (starting from 1) and/or reversed. Half types multiply in float; integers wrap
// on overflow (multiplied as unsigned, so signed overflow is defined).

struct CumSumParams {
  i64 lines;
  i32 rank;
  i32 exclusive;
  i64 dims[MAX_RANK]; // shape with the scanned axis set to 1
  i64 in_strides[MAX_RANK];
  i64 out_strides[MAX_RANK];
  i64 len;
  i64 in_axis_stride;
  i64 out_axis_stride;
  i32 reverse;
  i32 _pad;
};

template <typename T> struct ProdOf {
  typedef T A;
  __device__ static __forceinline__ A mul(A a, A b) { return a * b; }
};
template <> struct ProdOf<int> {
  typedef int A;
  __device__ static __forceinline__ A mul(A a, A b) { return (int)((u32)a * (u32)b); }
};
template <> struct ProdOf<long long> {
  typedef long long A;
  __device__ static __forceinline__ A mul(A a, A b) { return (long long)((u64)a * (u64)b); }
};
template <> struct ProdOf<f16> {
  typedef float A;
  __device__ static __forceinline__ A mul(A a, A b) { return a * b; }
};
template <> struct ProdOf<bf16> {
  typedef float A;
  __device__ static __forceinline__ A mul(A a, A b) { return a * b; }
};

template <typename T>
__device__ void cumprod_nd(const T *__restrict__ in, T *__restrict__ out,
                           const CumSumParams &p) {
  typedef typename ProdOf<T>::A A;
  GRID_LOOP(line, p.lines) {
    i64 rem = line, io = 0, oo = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      i64 c = rem % p.dims[k];
      rem /= p.dims[k];
      io += c * p.in_strides[k];
      oo += c * p.out_strides[k];
    }
    A acc = (A)1;
    for (i64 s = 0; s < p.len; ++s) {
      i64 j = p.reverse ? (p.len - 1 - s) : s;
      A v = (A)widen(in[io + j * p.in_axis_stride]);
      if (p.exclusive) {
        out[oo + j * p.out_axis_stride] = Narrow<T>::from(acc);
        acc = ProdOf<T>::mul(acc, v);
      } else {
        acc = ProdOf<T>::mul(acc, v);
        out[oo + j * p.out_axis_stride] = Narrow<T>::from(acc);
      }
    }
  }
}

#define CUMPROD(NAME, T)                                                                     \
  extern "C" __global__ void cumprod_##NAME(const T *in, T *out, CumSumParams p) {          \
    cumprod_nd(in, out, p);                                                                  \
  }

CUMPROD(f32, float)
CUMPROD(f64, double)
CUMPROD(f16, f16)
CUMPROD(bf16, bf16)
CUMPROD(i32, int)
CUMPROD(i64, long long)
CUMPROD(u32, unsigned int)
CUMPROD(u64, unsigned long long)
