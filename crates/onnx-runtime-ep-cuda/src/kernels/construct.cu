// Construction ops that compute values: Range (typed) and OneHot (by value width, any index
// dtype). Range reads start/delta on the device (range_T) or takes their bits by value when the
// session passed them in host memory (range_v_T, capturable without a device read).

#define RANGE(NAME, T)                                                                       \
  extern "C" __global__ void range_##NAME(T *out, const T *start, const T *delta, i64 n,    \
                                          i64 stride) {                                      \
    auto s = widen(*start);                                                                  \
    auto d = widen(*delta);                                                                  \
    GRID_LOOP(i, n) { out[i * stride] = Narrow<T>::from(s + (decltype(s))i * d); }           \
  }

// start and delta as their little-endian bits in the low bytes of a u64.
#define RANGE_V(NAME, T)                                                                     \
  extern "C" __global__ void range_v_##NAME(T *out, unsigned long long sbits,                \
                                            unsigned long long dbits, i64 n, i64 stride) {   \
    T st, dt;                                                                                \
    memcpy(&st, &sbits, sizeof(T));                                                          \
    memcpy(&dt, &dbits, sizeof(T));                                                          \
    auto s = widen(st);                                                                      \
    auto d = widen(dt);                                                                      \
    GRID_LOOP(i, n) { out[i * stride] = Narrow<T>::from(s + (decltype(s))i * d); }           \
  }

#define RANGES(NAME, T) RANGE(NAME, T) RANGE_V(NAME, T)
RANGES(f32, float)
RANGES(f64, double)
RANGES(i16, short)
RANGES(i32, int)
RANGES(i64, long long)
RANGES(f16, f16)
RANGES(bf16, bf16)

struct OneHotParams {
  i64 n;
  i32 rank;
  i32 axis;
  i64 dims[MAX_RANK + 1];
  i64 out_strides[MAX_RANK + 1];
  i64 idx_strides[MAX_RANK + 1];  // 0 on the one-hot axis
  i64 depth;
  i64 values_stride;
  i32 idx_dtype;
  i32 _pad;
};

// An index outside [-depth, depth) gives an all-`off` line, as the ONNX spec says.
template <typename T>
__device__ void one_hot(const void *idx, const T *values, T *out, const OneHotParams &p) {
  T off = values[0];
  T on = values[p.values_stride];
  GRID_LOOP(i, p.n) {
    i64 rem = i, io = 0, oo = 0, pos = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      i64 c = rem % p.dims[k];
      rem /= p.dims[k];
      io += c * p.idx_strides[k];
      oo += c * p.out_strides[k];
      if (k == p.axis) pos = c;
    }
    i64 v = load_as_i64(idx, io, p.idx_dtype);
    if (v < 0) v += p.depth;
    out[oo] = (v == pos) ? on : off;
  }
}

#define ONE_HOT(W)                                                                           \
  extern "C" __global__ void one_hot_w##W(const void *idx, const Word<W>::T *values,        \
                                          Word<W>::T *out, OneHotParams p) {                 \
    one_hot(idx, values, out, p);                                                            \
  }

ONE_HOT(1)
ONE_HOT(2)
ONE_HOT(4)
ONE_HOT(8)
ONE_HOT(16)
