// Unique (opset 11), mirroring the CPU provider (onnx-runtime-ep-cpu/src/ops/tensor/unique.rs):
// the slices along the axis (every element when there is no axis) are sorted by a
// lexicographic comparison of their elements, equal slices form groups, and the groups come
// out in sorted order or in order of their first occurrence.
//  1. uq_keys_T: every element as an order-preserving u64 key, in row-major order
//     [outer, dim, inner]. Floats follow the CPU's order: by value, -0.0 equal to 0.0, every
//     NaN equal to every NaN and after everything; integers and bool by value.
//  2. uq_sort_tiles / uq_sort_merge (index_sort.cuh): the slice ids 0..dim sorted by their
//     keys, ties by id (the CPU's stable sort), so each group's first id is its smallest.
//  3. uq_heads: 1 where a sorted slice differs from the one before it; an exclusive scan of
//     the heads numbers the groups (its total is the unique count the host reads).
//  4. uq_groups: each group's start (sorted position) and first index; flags over the input
//     order marking first indices, whose exclusive scan ranks the groups by first occurrence.
//  5. uq_meta, uq_inverse and uq_gather_wW write the outputs.

struct UqParams {
  i64 n;
  i32 rank;
  i32 _pad;
  i64 dims[MAX_RANK];
  i64 xs[MAX_RANK];
};

template <typename T> __device__ __forceinline__ u64 uq_key(T v) {
  if constexpr (same_type<T, float>::value || same_type<T, double>::value ||
                same_type<T, f16>::value || same_type<T, bf16>::value) {
    double d = (double)widen(v);
    if (d != d) return 0xffffffffffffffffull;
    if (d == 0.0) d = 0.0;
    const u64 b = (u64)__double_as_longlong(d);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
  } else if constexpr (same_type<T, bool>::value) {
    return v ? 1ull : 0ull;
  } else if constexpr ((T)(-1) < (T)0) {
    return (u64)(i64)v ^ 0x8000000000000000ull;
  } else {
    return (u64)v;
  }
}

#define UQ_KEYS(NAME, T)                                                                     \
  extern "C" __global__ void uq_keys_##NAME(const T *__restrict__ x, u64 *__restrict__ keys, \
                                            UqParams p) {                                    \
    GRID_LOOP(e, p.n) {                                                                      \
      i64 q = e, off = 0;                                                                    \
      for (int k = p.rank - 1; k >= 0; --k) {                                                \
        off += (q % p.dims[k]) * p.xs[k];                                                    \
        q /= p.dims[k];                                                                      \
      }                                                                                      \
      keys[e] = uq_key<T>(x[off]);                                                           \
    }                                                                                        \
  }

FOR_ALL(UQ_KEYS)

struct UqCmp {
  const u64 *keys;
  i64 outer, dim, inner;
  __device__ __forceinline__ int cmp3(u32 a, u32 b) const {
    for (i64 o = 0; o < outer; ++o) {
      const u64 *ka = keys + (o * dim + (i64)a) * inner;
      const u64 *kb = keys + (o * dim + (i64)b) * inner;
      for (i64 k = 0; k < inner; ++k) {
        const u64 x = ka[k], y = kb[k];
        if (x != y) return x < y ? -1 : 1;
      }
    }
    return 0;
  }
  __device__ __forceinline__ bool less(u32 a, u32 b) const {
    const int c = cmp3(a, b);
    return c != 0 ? c < 0 : a < b;
  }
};

extern "C" __global__ void uq_sort_tiles(u32 *ids, i64 n, UqCmp c) { isort_tiles_body(ids, n, c); }

extern "C" __global__ void uq_sort_merge(const u32 *src, u32 *dst, i64 n, i64 width, UqCmp c) {
  isort_merge_body(src, dst, n, width, c);
}

extern "C" __global__ void uq_iota(u32 *ids, i64 n) {
  GRID_LOOP(i, n) { ids[i] = (u32)i; }
}

extern "C" __global__ void uq_heads(const u32 *__restrict__ perm, i64 *__restrict__ heads,
                                    UqCmp c) {
  GRID_LOOP(p, c.dim) { heads[p] = (p == 0 || c.cmp3(perm[p - 1], perm[p]) != 0) ? 1 : 0; }
}

// hscan: the exclusive scan of heads (a head's group number).
extern "C" __global__ void uq_groups(const u32 *__restrict__ perm, const i64 *__restrict__ heads,
                                     const i64 *__restrict__ hscan, i64 *__restrict__ start,
                                     i64 *__restrict__ first, i64 *__restrict__ fflags, i64 dim) {
  GRID_LOOP(p, dim) {
    const i64 h = heads[p];
    const u32 id = perm[p];
    fflags[id] = h;
    if (h) {
      const i64 g = hscan[p];
      start[g] = p;
      first[g] = (i64)id;
    }
  }
}

struct UqMeta {
  i64 u, dim;
  i64 idx_stride, cnt_stride, inv_stride;
  i32 sorted;
  i32 _pad;
};

// The output position of group g: g when sorted, else its rank by first occurrence.
__device__ __forceinline__ i64 uq_pos(const UqMeta &m, const i64 *first, const i64 *rank, i64 g) {
  return m.sorted ? g : rank[first[g]];
}

// fo[r] = the first index of the r-th output group; indices / counts outputs when given.
extern "C" __global__ void uq_meta(const i64 *__restrict__ first, const i64 *__restrict__ start,
                                   const i64 *__restrict__ rank, i64 *__restrict__ fo,
                                   i64 *__restrict__ idx, i64 *__restrict__ cnt, UqMeta m) {
  GRID_LOOP(g, m.u) {
    const i64 r = uq_pos(m, first, rank, g);
    fo[r] = first[g];
    if (idx != nullptr) idx[r * m.idx_stride] = first[g];
    if (cnt != nullptr) cnt[r * m.cnt_stride] = (g + 1 < m.u ? start[g + 1] : m.dim) - start[g];
  }
}

extern "C" __global__ void uq_inverse(const u32 *__restrict__ perm, const i64 *__restrict__ heads,
                                      const i64 *__restrict__ hscan, const i64 *__restrict__ first,
                                      const i64 *__restrict__ rank, i64 *__restrict__ inv,
                                      UqMeta m) {
  GRID_LOOP(p, m.dim) {
    const i64 g = hscan[p] + heads[p] - 1;
    inv[(i64)perm[p] * m.inv_stride] = uq_pos(m, first, rank, g);
  }
}

struct UqGather {
  i64 n; // output elements
  i64 dim, inner, u;
  i32 xrank, yrank;
  i64 xdims[MAX_RANK];
  i64 xs[MAX_RANK];
  i64 ydims[MAX_RANK];
  i64 ys[MAX_RANK];
};

#define UQ_GATHER(W)                                                                         \
  extern "C" __global__ void uq_gather_w##W(const Word<W>::T *__restrict__ x,                \
                                            Word<W>::T *__restrict__ y,                      \
                                            const i64 *__restrict__ fo, UqGather g) {        \
    GRID_LOOP(t, g.n) {                                                                      \
      const i64 k = t % g.inner;                                                             \
      const i64 r = (t / g.inner) % g.u;                                                     \
      const i64 o = t / (g.inner * g.u);                                                     \
      i64 e = (o * g.dim + fo[r]) * g.inner + k;                                             \
      i64 xo = 0, yo = 0, q = t;                                                             \
      for (int d = g.xrank - 1; d >= 0; --d) {                                               \
        xo += (e % g.xdims[d]) * g.xs[d];                                                    \
        e /= g.xdims[d];                                                                     \
      }                                                                                      \
      for (int d = g.yrank - 1; d >= 0; --d) {                                               \
        yo += (q % g.ydims[d]) * g.ys[d];                                                    \
        q /= g.ydims[d];                                                                     \
      }                                                                                      \
      y[yo] = x[xo];                                                                         \
    }                                                                                        \
  }

UQ_GATHER(1)
UQ_GATHER(2)
UQ_GATHER(4)
UQ_GATHER(8)
