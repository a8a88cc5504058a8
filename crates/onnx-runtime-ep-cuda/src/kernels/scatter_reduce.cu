// ScatterND / ScatterElements with a reduction (add, mul, max, min), typed by element dtype.
// Uses IndexParams from index.cu's layout (repeated here: modules compile on their own).

struct IndexParams {
  i64 n;
  i32 rank;
  i32 k;
  i64 dims[MAX_DIMS];
  i64 dsf[MAX_DIMS];
  i64 isf[MAX_DIMS];
  i64 osf[MAX_DIMS];
  i64 nd_dims[MAX_RANK];
  i64 nd_strides[MAX_RANK];
  i64 idx_last_stride;
  u32 id;
  u32 _pad;
};

template <typename T, typename I>
__device__ void scatter_reduce(T *out, const I *__restrict__ idx, const T *__restrict__ upd,
                               u32 *err, const IndexParams &p, int op) {
  GRID_LOOP(i, p.n) {
    i64 rem = i, d = 0, io = 0, o = 0;
    for (int a = p.rank - 1; a >= 0; --a) {
      i64 c = rem % p.dims[a];
      rem /= p.dims[a];
      d += c * p.dsf[a];
      io += c * p.isf[a];
      o += c * p.osf[a];
    }
    bool ok = true;
    for (int j = 0; j < p.k; ++j) {
      i64 v = (i64)idx[io + j * p.idx_last_stride];
      i64 extent = p.nd_dims[j];
      if (v < 0) v += extent;
      if (v < 0 || v >= extent) {
        ok = false;
        break;
      }
      d += v * p.nd_strides[j];
    }
    if (ok) {
      atomic_apply(out + d, upd[o], op);
    } else {
      report_error(err, 1u, p.id);
    }
  }
}

#define SCATTER_REDUCE(NAME, T)                                                              \
  extern "C" __global__ void scatter_reduce_##NAME##_i32(T *out, const int *idx,            \
                                                         const T *upd, u32 *err,             \
                                                         IndexParams p, int op) {            \
    scatter_reduce(out, idx, upd, err, p, op);                                               \
  }                                                                                          \
  extern "C" __global__ void scatter_reduce_##NAME##_i64(T *out, const i64 *idx,            \
                                                         const T *upd, u32 *err,             \
                                                         IndexParams p, int op) {            \
    scatter_reduce(out, idx, upd, err, p, op);                                               \
  }

FOR_ALL(SCATTER_REDUCE)
