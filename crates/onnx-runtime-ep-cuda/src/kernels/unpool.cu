// MaxUnpool (placed after pool_common.cuh): the output is zeroed (16-byte stores on a
// contiguous aligned output), then one thread per element of X reads its index (int64, a
// linear position in the *inferred* unpooled shape N x C x spatial, the CPU provider's rule),
// checks it against that shape's element count, and writes X's value at the index's
// coordinates in the output (which may be larger: `output_shape` places the inferred shape at
// its origin). An index out of range writes nothing and records error code 1 in the device
// error word. Values move as raw words (by element width): the op only copies them.

#define UP_MAX 8

struct UnpoolZero {
  i64 n;         // output elements
  i64 vec;       // contiguous: 16-byte chunks from the (aligned) start, the rest one by one
  i32 rank;
  i32 contig;
  i64 dims[UP_MAX];
  i64 strides[UP_MAX];
};

struct UnpoolParams {
  i64 n;     // elements of X
  i64 total; // elements of the inferred shape
  i32 rank;
  u32 id;
  i32 fast; // every index below 2^31: 32-bit multiply-high division
  i32 _pad;
  i64 xdims[UP_MAX];
  FastDiv xdiv[UP_MAX];
  i64 xs[UP_MAX];
  i64 is[UP_MAX];
  i64 idims[UP_MAX];
  FastDiv idiv[UP_MAX];
  i64 ys[UP_MAX];
};

template <int W> __device__ __forceinline__ void unpool_zero(void *y, const UnpoolZero &p) {
  typedef typename Word<W>::T E;
  E *e = (E *)y;
  if (p.contig) {
    uint4 *v = (uint4 *)y;
    GRID_LOOP(i, p.vec) { v[i] = make_uint4(0u, 0u, 0u, 0u); }
    const i64 done = p.vec * (16 / W);
    GRID_LOOP(i, p.n - done) { e[done + i] = E{}; }
    return;
  }
  GRID_LOOP(i, p.n) {
    i64 q = i, off = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      off += (q % p.dims[k]) * p.strides[k];
      q /= p.dims[k];
    }
    e[off] = E{};
  }
}

template <int W>
__device__ __forceinline__ void unpool_scatter(const void *x, const i64 *__restrict__ idx,
                                               void *y, u32 *err, const UnpoolParams &p) {
  typedef typename Word<W>::T E;
  const E *xe = (const E *)x;
  E *ye = (E *)y;
  const bool fast = p.fast != 0;
  GRID_LOOP(i, p.n) {
    i64 q = i, xo = 0, io = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      const i64 c = split_index(q, p.xdiv[k], p.xdims[k], fast);
      xo += c * p.xs[k];
      io += c * p.is[k];
    }
    const i64 v = idx[io];
    if (v < 0 || v >= p.total) {
      report_error(err, 1u, p.id);
      continue;
    }
    q = v;
    i64 yo = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      yo += split_index(q, p.idiv[k], p.idims[k], fast) * p.ys[k];
    }
    ye[yo] = xe[xo];
  }
}

#define UNPOOL(W)                                                                            \
  extern "C" __global__ void unpool_zero_w##W(void *y, UnpoolZero p) { unpool_zero<W>(y, p); } \
  extern "C" __global__ void max_unpool_w##W(const void *x, const i64 *idx, void *y, u32 *err, \
                                             UnpoolParams p) {                               \
    unpool_scatter<W>(x, idx, y, err, p);                                                    \
  }

UNPOOL(2)
UNPOOL(4)
UNPOOL(8)
