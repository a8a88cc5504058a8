// Gather / GatherElements / GatherND and ScatterND / ScatterElements (reduction none), by
// element width and index type. Both families walk one "iteration" shape whose coordinates
// feed three operands through per-axis strides (data side, indices, other side), then add the
// offset of k gathered index components. An index out of range is never dereferenced: the
// element is skipped (gather writes zero) and the error is recorded for the host.

struct IndexParams {
  i64 n;
  i32 rank;
  i32 k;                 // index components per lookup (1 for Gather/GatherElements)
  i64 dims[MAX_DIMS];    // iteration shape
  i64 dsf[MAX_DIMS];     // data-side (gathered tensor) stride of each iteration axis
  i64 isf[MAX_DIMS];     // indices stride of each iteration axis
  i64 osf[MAX_DIMS];     // other-side (gather output / scatter updates) stride
  i64 nd_dims[MAX_RANK]; // extent of each indexed data axis
  i64 nd_strides[MAX_RANK];
  i64 idx_last_stride;   // indices stride between the k components
  u32 id;
  u32 _pad;
};

template <typename I>
__device__ __forceinline__ bool index_offsets(const IndexParams &p, const I *idx, i64 i, i64 &d,
                                              i64 &o) {
  i64 rem = i, io = 0;
  d = 0;
  o = 0;
  for (int a = p.rank - 1; a >= 0; --a) {
    i64 c = rem % p.dims[a];
    rem /= p.dims[a];
    d += c * p.dsf[a];
    io += c * p.isf[a];
    o += c * p.osf[a];
  }
  for (int j = 0; j < p.k; ++j) {
    i64 v = (i64)idx[io + j * p.idx_last_stride];
    i64 extent = p.nd_dims[j];
    if (v < 0) v += extent;
    if (v < 0 || v >= extent) return false;
    d += v * p.nd_strides[j];
  }
  return true;
}

template <typename T, typename I>
__device__ void gather_nd(const T *__restrict__ data, const I *__restrict__ idx,
                          T *__restrict__ out, u32 *err, const IndexParams &p) {
  GRID_LOOP(i, p.n) {
    i64 d, o;
    if (index_offsets(p, idx, i, d, o)) {
      out[o] = data[d];
    } else {
      T zero{};
      out[o] = zero;
      report_error(err, 1u, p.id);
    }
  }
}

template <typename T, typename I>
__device__ void scatter_nd(T *__restrict__ out, const I *__restrict__ idx,
                           const T *__restrict__ upd, u32 *err, const IndexParams &p) {
  GRID_LOOP(i, p.n) {
    i64 d, o;
    if (index_offsets(p, idx, i, d, o)) {
      out[d] = upd[o];
    } else {
      report_error(err, 1u, p.id);
    }
  }
}

#define INDEX_KERNELS(W, IN, I)                                                              \
  extern "C" __global__ void gather_w##W##_##IN(const Word<W>::T *data, const I *idx,       \
                                                Word<W>::T *out, u32 *err, IndexParams p) {  \
    gather_nd(data, idx, out, err, p);                                                       \
  }                                                                                          \
  extern "C" __global__ void scatter_w##W##_##IN(Word<W>::T *out, const I *idx,             \
                                                 const Word<W>::T *upd, u32 *err,            \
                                                 IndexParams p) {                            \
    scatter_nd(out, idx, upd, err, p);                                                       \
  }

#define INDEX_WIDTH(W)                                                                       \
  INDEX_KERNELS(W, i32, i32)                                                                 \
  INDEX_KERNELS(W, i64, i64)

INDEX_WIDTH(1)
INDEX_WIDTH(2)
INDEX_WIDTH(4)
INDEX_WIDTH(8)
INDEX_WIDTH(16)
