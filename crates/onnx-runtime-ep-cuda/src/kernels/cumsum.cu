// CumSum along one axis, typed. One thread scans one line (all coordinates but the axis);
// half types accumulate in float.

struct CumSumParams {
  i64 lines;
  i32 rank;
  i32 exclusive;
  i64 dims[MAX_RANK];  // shape with the scanned axis set to 1
  i64 in_strides[MAX_RANK];
  i64 out_strides[MAX_RANK];
  i64 len;
  i64 in_axis_stride;
  i64 out_axis_stride;
  i32 reverse;
  i32 _pad;
};

template <typename T>
__device__ void cumsum_nd(const T *__restrict__ in, T *__restrict__ out, const CumSumParams &p) {
  GRID_LOOP(line, p.lines) {
    i64 rem = line, io = 0, oo = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      i64 c = rem % p.dims[k];
      rem /= p.dims[k];
      io += c * p.in_strides[k];
      oo += c * p.out_strides[k];
    }
    decltype(widen(T())) acc = 0;
    for (i64 s = 0; s < p.len; ++s) {
      i64 j = p.reverse ? (p.len - 1 - s) : s;
      auto v = widen(in[io + j * p.in_axis_stride]);
      if (p.exclusive) {
        out[oo + j * p.out_axis_stride] = Narrow<T>::from(acc);
        acc += v;
      } else {
        acc += v;
        out[oo + j * p.out_axis_stride] = Narrow<T>::from(acc);
      }
    }
  }
}

#define CUMSUM(NAME, T)                                                                      \
  extern "C" __global__ void cumsum_##NAME(const T *in, T *out, CumSumParams p) {           \
    cumsum_nd(in, out, p);                                                                   \
  }

FOR_NUMERIC(CUMSUM)
