// Data movement by element width: strided copy, Where, Pad, fill, Trilu.
// One instantiation per width (1, 2, 4, 8, 16 bytes) serves every dtype of that width.

template <typename T>
__device__ void copy_nd(const T *__restrict__ src, T *__restrict__ dst, const Strided2 &p) {
  GRID_LOOP(i, p.n) {
    i64 a, b;
    offsets2(p, i, a, b);
    dst[b] = src[a];
  }
}

// The same walk in 32-bit index arithmetic (64-bit division is several times slower), for
// walks whose element count and every offset fit in an int (the host checks).
template <typename T>
__device__ void copy_nd32(const T *__restrict__ src, T *__restrict__ dst, const Strided2 &p) {
  const i32 n = (i32)p.n;
  for (i32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    i32 rem = i, a = (i32)p.a_off, b = (i32)p.b_off;
    for (int k = p.rank - 1; k >= 0; --k) {
      i32 d = (i32)p.dims[k];
      i32 c = rem % d;
      rem /= d;
      a += c * (i32)p.a[k];
      b += c * (i32)p.b[k];
    }
    dst[b] = src[a];
  }
}

struct WhereParams {
  i64 n;
  i32 rank;
  i32 _pad;
  i64 dims[MAX_RANK];
  i64 c[MAX_RANK];
  i64 x[MAX_RANK];
  i64 y[MAX_RANK];
  i64 o[MAX_RANK];
};

template <typename T>
__device__ void where_nd(const u8 *__restrict__ cond, const T *__restrict__ x,
                         const T *__restrict__ y, T *__restrict__ out, const WhereParams &p) {
  GRID_LOOP(i, p.n) {
    i64 rem = i, co = 0, xo = 0, yo = 0, oo = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      i64 c = rem % p.dims[k];
      rem /= p.dims[k];
      co += c * p.c[k];
      xo += c * p.x[k];
      yo += c * p.y[k];
      oo += c * p.o[k];
    }
    out[oo] = cond[co] ? x[xo] : y[yo];
  }
}

// mode: 0 constant, 1 reflect, 2 edge, 3 wrap.
struct PadParams {
  i64 n;
  i32 rank;
  i32 mode;
  i64 out_dims[MAX_RANK];
  i64 in_dims[MAX_RANK];
  i64 in_strides[MAX_RANK];
  i64 out_strides[MAX_RANK];
  i64 begin[MAX_RANK];
  u64 value[2];
};

template <typename T>
__device__ void pad_nd(const T *__restrict__ in, T *__restrict__ out, const T *value_ptr,
                       const PadParams &p) {
  T fill;
  if (value_ptr != nullptr) {
    fill = *value_ptr;
  } else {
    memcpy(&fill, &p.value[0], sizeof(T));
  }
  GRID_LOOP(i, p.n) {
    i64 rem = i, io = 0, oo = 0;
    bool outside = false;
    for (int k = p.rank - 1; k >= 0; --k) {
      i64 c = rem % p.out_dims[k];
      rem /= p.out_dims[k];
      oo += c * p.out_strides[k];
      i64 d = p.in_dims[k];
      i64 s = c - p.begin[k];
      if (s < 0 || s >= d) {
        if (p.mode == 0) {
          outside = true;
        } else if (p.mode == 1) {
          if (d == 1) {
            s = 0;
          } else {
            i64 period = 2 * (d - 1);
            s = s % period;
            if (s < 0) s += period;
            if (s >= d) s = period - s;
          }
        } else if (p.mode == 2) {
          s = s < 0 ? 0 : d - 1;
        } else {
          s = s % d;
          if (s < 0) s += d;
        }
      }
      io += s * p.in_strides[k];
    }
    out[oo] = outside ? fill : in[io];
  }
}

struct FillParams {
  i64 n;
  i32 rank;
  i32 _pad;
  i64 dims[MAX_RANK];
  i64 strides[MAX_RANK];
  u64 value[2];
};

template <typename T> __device__ void fill_nd(T *__restrict__ out, const FillParams &p) {
  T v;
  memcpy(&v, &p.value[0], sizeof(T));
  GRID_LOOP(i, p.n) {
    i64 rem = i, oo = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      i64 c = rem % p.dims[k];
      rem /= p.dims[k];
      oo += c * p.strides[k];
    }
    out[oo] = v;
  }
}

struct TriluParams {
  i64 n;
  i32 rank;
  i32 upper;
  i64 dims[MAX_RANK];
  i64 in_strides[MAX_RANK];
  i64 out_strides[MAX_RANK];
  i64 k;
};

template <typename T>
__device__ void trilu_nd(const T *__restrict__ in, T *__restrict__ out, const i64 *k_ptr,
                         const TriluParams &p) {
  i64 kk = k_ptr != nullptr ? *k_ptr : p.k;
  GRID_LOOP(i, p.n) {
    i64 rem = i, io = 0, oo = 0, row = 0, col = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      i64 c = rem % p.dims[k];
      rem /= p.dims[k];
      io += c * p.in_strides[k];
      oo += c * p.out_strides[k];
      if (k == p.rank - 1) col = c;
      if (k == p.rank - 2) row = c;
    }
    bool keep = p.upper ? (col - row >= kk) : (col - row <= kk);
    if (keep) {
      out[oo] = in[io];
    } else {
      T zero{};
      out[oo] = zero;
    }
  }
}

// Writes up to 16 int64 values given by value (Shape, Size).
struct ValuesParams {
  i64 n;
  i64 stride;
  i64 values[16];
};

extern "C" __global__ void write_i64s(i64 *out, ValuesParams p) {
  GRID_LOOP(i, p.n) { out[i * p.stride] = p.values[i]; }
}

#define COPY_WIDTH(W)                                                                        \
  extern "C" __global__ void copy_nd_w##W(const Word<W>::T *src, Word<W>::T *dst,           \
                                          Strided2 p) {                                      \
    copy_nd(src, dst, p);                                                                    \
  }                                                                                          \
  extern "C" __global__ void copy_nd32_w##W(const Word<W>::T *src, Word<W>::T *dst,         \
                                            Strided2 p) {                                    \
    copy_nd32(src, dst, p);                                                                  \
  }                                                                                          \
  extern "C" __global__ void where_w##W(const u8 *cond, const Word<W>::T *x,                \
                                        const Word<W>::T *y, Word<W>::T *out,                \
                                        WhereParams p) {                                     \
    where_nd(cond, x, y, out, p);                                                            \
  }                                                                                          \
  extern "C" __global__ void pad_w##W(const Word<W>::T *in, Word<W>::T *out,                \
                                      const Word<W>::T *value, PadParams p) {                \
    pad_nd(in, out, value, p);                                                               \
  }                                                                                          \
  extern "C" __global__ void fill_w##W(Word<W>::T *out, FillParams p) { fill_nd(out, p); }  \
  extern "C" __global__ void trilu_w##W(const Word<W>::T *in, Word<W>::T *out,              \
                                        const i64 *k, TriluParams p) {                       \
    trilu_nd(in, out, k, p);                                                                 \
  }

COPY_WIDTH(1)
COPY_WIDTH(2)
COPY_WIDTH(4)
COPY_WIDTH(8)
COPY_WIDTH(16)

// Several device-to-device copies in one launch (a replayed graph's input and output copies):
// blockIdx.y picks the segment; 16-byte moves where both ends and the length allow, bytes for
// the rest.
#define COPY_MANY_SEGS 64
struct CopySeg {
  unsigned long long src, dst, bytes;
};
struct CopyMany {
  CopySeg seg[COPY_MANY_SEGS];
  int n;
  int _pad;
};

extern "C" __global__ void copy_many(CopyMany p) {
  if ((int)blockIdx.y >= p.n) return;
  const CopySeg g = p.seg[blockIdx.y];
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const bool wide = ((g.src | g.dst) & 15ull) == 0;
  const unsigned long long n16 = wide ? g.bytes / 16 : 0;
  const uint4 *s16 = (const uint4 *)g.src;
  uint4 *d16 = (uint4 *)g.dst;
  for (unsigned long long i = t; i < n16; i += step) d16[i] = s16[i];
  const unsigned char *s1 = (const unsigned char *)g.src;
  unsigned char *d1 = (unsigned char *)g.dst;
  for (unsigned long long i = n16 * 16 + t; i < g.bytes; i += step) d1[i] = s1[i];
}
