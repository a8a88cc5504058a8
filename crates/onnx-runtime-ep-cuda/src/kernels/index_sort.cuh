// Device sort of u32 ids by a caller's strict total order, and exclusive scans of i64 counts.
// Shared by NonMaxSuppression (nms.cu) and Unique (unique.cu); each module wraps the sort
// bodies in extern "C" kernels for its comparator `Cmp` (a struct passed by value with a
// `__device__ bool less(u32 a, u32 b) const` that never holds for a == b and orders every
// pair of distinct ids: callers break ties by id).
//
// Sort: tiles of ISORT_TILE ids are sorted in shared memory by a bitonic network (padding
// with ISORT_NONE, which sorts after every id), then bottom-up merge passes double the sorted
// runs: each id finds its place in the partner run by a binary search (a strict total order
// makes every destination distinct, so the merge needs no synchronization).
//
// Scan: isort_scan_tiles scans ISORT_SCAN_TILE values per block and leaves each tile's sum,
// isort_scan_sums scans the tile sums in one block (and writes the grand total after them),
// isort_scan_add adds each tile's offset.

#define ISORT_TILE 1024
#define ISORT_THREADS 512
#define ISORT_NONE 0xffffffffu
#define ISORT_SCAN_TILE 1024
#define ISORT_SCAN_THREADS 256

template <class Cmp> __device__ __forceinline__ bool isort_less(const Cmp &c, u32 a, u32 b) {
  if (b == ISORT_NONE) return a != ISORT_NONE;
  if (a == ISORT_NONE) return false;
  return c.less(a, b);
}

// Sorts ids[blockIdx.x * ISORT_TILE ..][..ISORT_TILE] (clipped to n) in place.
template <class Cmp> __device__ void isort_tiles_body(u32 *__restrict__ ids, i64 n, const Cmp &cmp) {
  __shared__ u32 s[ISORT_TILE];
  const i64 base = (i64)blockIdx.x * ISORT_TILE;
  for (int t = threadIdx.x; t < ISORT_TILE; t += blockDim.x) {
    const i64 i = base + t;
    s[t] = i < n ? ids[i] : ISORT_NONE;
  }
  __syncthreads();
  for (int k = 2; k <= ISORT_TILE; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = threadIdx.x; t < ISORT_TILE / 2; t += blockDim.x) {
        const int i = (t / j) * 2 * j + (t % j);
        const int l = i + j;
        const bool up = (i & k) == 0;
        const u32 a = s[i], b = s[l];
        const bool swap = up ? isort_less(cmp, b, a) : isort_less(cmp, a, b);
        if (swap) {
          s[i] = b;
          s[l] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int t = threadIdx.x; t < ISORT_TILE; t += blockDim.x) {
    const i64 i = base + t;
    if (i < n) ids[i] = s[t];
  }
}

// One merge pass: runs of `width` sorted ids in src become runs of 2 * width in dst.
template <class Cmp>
__device__ void isort_merge_body(const u32 *__restrict__ src, u32 *__restrict__ dst, i64 n,
                                 i64 width, const Cmp &cmp) {
  GRID_LOOP(i, n) {
    const i64 run = i / width;
    const i64 start = (run & ~1LL) * width;
    const i64 self = run * width;
    const u32 v = src[i];
    i64 lo, hi;
    if ((run & 1) == 0) {
      lo = start + width;
      hi = start + 2 * width < n ? start + 2 * width : n;
    } else {
      lo = start;
      hi = start + width;
    }
    i64 a = lo, b = hi > lo ? hi : lo;
    const i64 first = a;
    while (a < b) {
      const i64 m = (a + b) >> 1;
      if (cmp.less(src[m], v)) {
        a = m + 1;
      } else {
        b = m;
      }
    }
    dst[start + (i - self) + (a - first)] = v;
  }
}

// Exclusive scan of one value per thread over the block (blockDim.x a multiple of 32, at
// most 1024). Returns the prefix; *total receives the block's sum.
__device__ __forceinline__ i64 isort_block_scan(i64 v, i64 *total) {
  __shared__ i64 warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nw = blockDim.x >> 5;
  i64 x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const i64 y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    i64 s = lane < nw ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const i64 y = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += y;
    }
    warp_sums[lane] = s;
  }
  __syncthreads();
  const i64 before = warp > 0 ? warp_sums[warp - 1] : 0;
  *total = warp_sums[nw - 1];
  __syncthreads();
  return before + x - v;
}

// out[i] = sum of in[0..i) within the tile of ISORT_SCAN_TILE; sums[tile] = the tile's sum.
// ISORT_SCAN_THREADS threads per block, 4 values each.
extern "C" __global__ void isort_scan_tiles(const i64 *__restrict__ in, i64 *__restrict__ out,
                                            i64 *__restrict__ sums, i64 n) {
  const i64 base = (i64)blockIdx.x * ISORT_SCAN_TILE + (i64)threadIdx.x * 4;
  i64 v[4];
  i64 local = 0;
  for (int k = 0; k < 4; ++k) {
    v[k] = base + k < n ? in[base + k] : 0;
    local += v[k];
  }
  i64 total;
  i64 run = isort_block_scan(local, &total);
  for (int k = 0; k < 4; ++k) {
    if (base + k < n) out[base + k] = run;
    run += v[k];
  }
  if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

// Exclusive scan of sums[0..tiles) in place by one block; sums[tiles] = the grand total.
extern "C" __global__ void isort_scan_sums(i64 *__restrict__ sums, i64 tiles) {
  i64 carry = 0;
  for (i64 c = 0; c < tiles; c += blockDim.x) {
    const i64 i = c + threadIdx.x;
    const i64 v = i < tiles ? sums[i] : 0;
    i64 total;
    const i64 before = isort_block_scan(v, &total);
    if (i < tiles) sums[i] = carry + before;
    carry += total;
  }
  if (threadIdx.x == 0) sums[tiles] = carry;
}

// out[i] += sums[i / ISORT_SCAN_TILE].
extern "C" __global__ void isort_scan_add(i64 *__restrict__ out, const i64 *__restrict__ sums,
                                          i64 n) {
  GRID_LOOP(i, n) { out[i] += sums[i / ISORT_SCAN_TILE]; }
}
