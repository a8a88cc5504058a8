// TopK along one axis, for every numeric dtype: the k largest (or smallest) values of each row
// and their int64 indices, best first; ties go to the lower index and NaN ranks above every
// number (as the CPU provider orders them). One block per row:
//   topk_sort_X:   rows of up to 16384 elements: the row's (key, index) pairs are sorted in
//                  shared memory with a bitonic network, the first k written.
//   topk_select_X: longer rows: a radix select (8 bits a pass, from the top) finds the k-th
//                  key, an ordered compaction gathers the k winners (ties by lowest index)
//                  into shared memory, where they are sorted (k <= 16384) -- or, for larger
//                  k, writes the winners' indices to the indices output, which
//   topk_gsort_X:  sorts in place in global memory (same network), then writes the values.
// Keys are the values mapped to unsigned integers whose order is the wanted one (largest:
// ascending value order; smallest: its complement), with NaN canonical (highest) and -0 == +0.

struct TopKParams {
  i64 rows;
  i64 len;
  i64 k;
  i32 rank;
  i32 largest;
  i64 dims[MAX_RANK];  // the input's shape with the axis set to 1
  i64 in_strides[MAX_RANK];
  i64 val_strides[MAX_RANK];
  i64 idx_strides[MAX_RANK];
  i64 in_axis;
  i64 val_axis;
  i64 idx_axis;
  i64 n2;  // power of two >= the count sorted in shared memory (0: none)
};

DEV void topk_offsets(const TopKParams &p, i64 row, i64 &a, i64 &b, i64 &c) {
  a = 0;
  b = 0;
  c = 0;
  for (int k = p.rank - 1; k >= 0; --k) {
    const i64 d = p.dims[k];
    const i64 q = row % d;
    row /= d;
    a += q * p.in_strides[k];
    b += q * p.val_strides[k];
    c += q * p.idx_strides[k];
  }
}

// Monotone key of a value in ascending order: the bits of the type, NaN highest.
template <typename X> DEV u64 order_key(X v) {
  if constexpr (same_type<X, float>::value) {
    if (v != v) return 0xffffffffull;
    u32 b = v == 0.0f ? 0u : __float_as_uint(v);
    return (b & 0x80000000u) ? (u64)(~b) : (u64)(b | 0x80000000u);
  } else if constexpr (same_type<X, double>::value) {
    if (v != v) return ~0ull;
    u64 b = v == 0.0 ? 0ull : (u64)__double_as_longlong(v);
    return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
  } else if constexpr (same_type<X, f16>::value || same_type<X, bf16>::value) {
    const float f = widen(v);
    if (f != f) return 0xffffull;
    u16 b;
    if constexpr (same_type<X, f16>::value) {
      b = __half_as_ushort(v);
    } else {
      b = __bfloat16_as_ushort(v);
    }
    if (f == 0.0f) b = 0;
    return (b & 0x8000u) ? (u64)(u16)(~b) : (u64)(u16)(b | 0x8000u);
  } else if constexpr (SignedInt<X>::value) {
    constexpr int bits = 8 * sizeof(X);
    const u64 mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
    return ((u64)(i64)v & mask) ^ (1ull << (bits - 1));
  } else {
    return (u64)v;
  }
}

template <typename X> DEV u64 key_mask() {
  return sizeof(X) == 8 ? ~0ull : ((1ull << (8 * sizeof(X))) - 1);
}

// The key whose larger values are better.
template <typename X> DEV u64 best_key(X v, bool largest) {
  const u64 k = order_key(v);
  return largest ? k : (k ^ key_mask<X>());
}

DEV bool better_pair(u64 ka, u32 ia, u64 kb, u32 ib) {
  return ka > kb || (ka == kb && ia < ib);
}

// Sorts n (key, index) pairs best-first in shared memory; n2 is a power of two >= n.
// Bitonic network whose comparators all put the better element at the lower position (the
// first step of each merge compares mirrored positions), so positions >= n act as the worst
// elements and are never touched.
DEV void smem_sort(u64 *keys, u32 *ids, int n, int n2) {
  for (int size = 2; size <= n2; size <<= 1) {
    const int half = size >> 1;
    for (int t = threadIdx.x; t < (n2 >> 1); t += blockDim.x) {
      const int blk = t / half, off = t & (half - 1);
      const int i = blk * size + off, j = blk * size + size - 1 - off;
      if (j < n && better_pair(keys[j], ids[j], keys[i], ids[i])) {
        const u64 kt = keys[i];
        keys[i] = keys[j];
        keys[j] = kt;
        const u32 it = ids[i];
        ids[i] = ids[j];
        ids[j] = it;
      }
    }
    __syncthreads();
    for (int st = half >> 1; st > 0; st >>= 1) {
      for (int t = threadIdx.x; t < (n2 >> 1); t += blockDim.x) {
        const int i = 2 * t - (t & (st - 1)), j = i + st;
        if (j < n && better_pair(keys[j], ids[j], keys[i], ids[i])) {
          const u64 kt = keys[i];
          keys[i] = keys[j];
          keys[j] = kt;
          const u32 it = ids[i];
          ids[i] = ids[j];
          ids[j] = it;
        }
      }
      __syncthreads();
    }
  }
}

template <typename X>
DEV void write_sorted(const X *__restrict__ in, X *vals, i64 *idx, const TopKParams &p,
                      const u32 *ids, i64 a, i64 b, i64 c) {
  for (i64 j = threadIdx.x; j < p.k; j += blockDim.x) {
    const u32 s = ids[j];
    vals[b + j * p.val_axis] = in[a + (i64)s * p.in_axis];
    idx[c + j * p.idx_axis] = (i64)s;
  }
}

template <typename X>
DEV void topk_sort(const X *__restrict__ in, X *vals, i64 *idx, const TopKParams &p) {
  extern __shared__ __align__(16) unsigned char topk_dsmem[];
  u64 *keys = reinterpret_cast<u64 *>(topk_dsmem);
  u32 *ids = reinterpret_cast<u32 *>(keys + p.n2);
  const i64 row = blockIdx.x;
  i64 a, b, c;
  topk_offsets(p, row, a, b, c);
  const int n = (int)p.len;
  const bool largest = p.largest != 0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    keys[j] = best_key(in[a + (i64)j * p.in_axis], largest);
    ids[j] = (u32)j;
  }
  __syncthreads();
  smem_sort(keys, ids, n, (int)p.n2);
  write_sorted(in, vals, idx, p, ids, a, b, c);
}

// Exclusive prefix sum of v over the block (blockDim.x a multiple of 32, at most 1024);
// `total` gets the block's sum. scan holds 32 entries.
DEV u32 block_exclusive_scan(u32 v, u32 *scan, u32 &total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  u32 x = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const u32 y = __shfl_up_sync(FULL_MASK, x, off);
    if (lane >= off) x += y;
  }
  if (lane == 31) scan[warp] = x;
  __syncthreads();
  if (warp == 0) {
    u32 w = lane < nw ? scan[lane] : 0u;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const u32 y = __shfl_up_sync(FULL_MASK, w, off);
      if (lane >= off) w += y;
    }
    __syncwarp();
    if (lane < nw) scan[lane] = w;
  }
  __syncthreads();
  const u32 before = warp > 0 ? scan[warp - 1] : 0u;
  total = scan[nw - 1];
  __syncthreads();
  return before + x - v;
}

// Shared memory of topk_select: histogram, scan scratch, the selected digit, then the
// candidates' keys and indices.
#define SEL_HIST 0
#define SEL_SCAN 1024
#define SEL_MISC 1152
#define SEL_KEYS 1184

template <typename X>
DEV void topk_select(const X *__restrict__ in, X *vals, i64 *idx, const TopKParams &p) {
  extern __shared__ __align__(16) unsigned char topk_dsmem[];
  u32 *hist = reinterpret_cast<u32 *>(topk_dsmem + SEL_HIST);
  u32 *scan = reinterpret_cast<u32 *>(topk_dsmem + SEL_SCAN);
  u32 *misc = reinterpret_cast<u32 *>(topk_dsmem + SEL_MISC);
  u64 *keys = reinterpret_cast<u64 *>(topk_dsmem + SEL_KEYS);
  u32 *ids = reinterpret_cast<u32 *>(keys + p.n2);
  const i64 row = blockIdx.x;
  i64 a, b, c;
  topk_offsets(p, row, a, b, c);
  const i64 len = p.len;
  const bool largest = p.largest != 0;
  const int tid = threadIdx.x, B = blockDim.x;

  // Radix select of the k-th best key, 8 bits at a time from the top.
  u64 want = 0, mask = 0;
  u32 kk = (u32)p.k;  // rank of the wanted key among those matching `want` under `mask`
  for (int shift = 8 * (int)sizeof(X) - 8; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += B) hist[i] = 0;
    __syncthreads();
    for (i64 j = tid; j < len; j += B) {
      const u64 key = best_key(in[a + j * p.in_axis], largest);
      if ((key & mask) == want) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      u32 cum = 0, sel = 0;
      for (int d = 255; d >= 0; --d) {
        const u32 h = hist[d];
        if (cum + h >= kk) {
          sel = (u32)d;
          break;
        }
        cum += h;
      }
      misc[0] = sel;
      misc[1] = kk - cum;
    }
    __syncthreads();
    want |= (u64)misc[0] << shift;
    mask |= (u64)255 << shift;
    kk = misc[1];
    __syncthreads();
  }
  const u64 thr = want;
  const u32 ties = kk;                 // elements equal to thr to take (the lowest indices)
  const u32 greater = (u32)p.k - ties;  // elements better than thr (all taken)
  const bool in_smem = p.n2 > 0;

  // Ordered compaction: greater ones into [0, greater), ties into [greater, k).
  u32 base_g = 0, base_e = 0;
  for (i64 c0 = 0; c0 < len; c0 += B) {
    const i64 j = c0 + tid;
    u64 key = 0;
    bool g = false, e = false;
    if (j < len) {
      key = best_key(in[a + j * p.in_axis], largest);
      g = key > thr;
      e = key == thr;
    }
    u32 total;
    const u32 ex = block_exclusive_scan((g ? 0x10000u : 0u) | (e ? 1u : 0u), scan, total);
    i64 slot = -1;
    if (g) slot = base_g + (ex >> 16);
    if (e && base_e + (ex & 0xffffu) < ties) slot = greater + base_e + (ex & 0xffffu);
    if (slot >= 0) {
      if (in_smem) {
        keys[slot] = key;
        ids[slot] = (u32)j;
      } else {
        idx[c + slot * p.idx_axis] = j;
      }
    }
    base_g += total >> 16;
    base_e += total & 0xffffu;
    if (base_g >= greater && base_e >= ties) break;
  }
  if (!in_smem) return;
  __syncthreads();
  smem_sort(keys, ids, (int)p.k, (int)p.n2);
  write_sorted(in, vals, idx, p, ids, a, b, c);
}

// Sorts the k indices topk_select wrote to the indices output (best first, by the input's
// keys), then writes the values. Global-memory bitonic network of one block per row.
template <typename X>
DEV void topk_gsort(const X *__restrict__ in, X *vals, i64 *idx, const TopKParams &p) {
  const i64 row = blockIdx.x;
  i64 a, b, c;
  topk_offsets(p, row, a, b, c);
  const i64 n = p.k, n2 = p.n2;
  const bool largest = p.largest != 0;
  i64 *ix = idx + c;
  const i64 st_i = p.idx_axis;
  for (i64 size = 2; size <= n2; size <<= 1) {
    const i64 half = size >> 1;
    for (i64 st = half; st > 0; st >>= 1) {
      for (i64 t = threadIdx.x; t < (n2 >> 1); t += blockDim.x) {
        i64 i, j;
        if (st == half) {
          const i64 blk = t / half, off = t & (half - 1);
          i = blk * size + off;
          j = blk * size + size - 1 - off;
        } else {
          i = 2 * t - (t & (st - 1));
          j = i + st;
        }
        if (j < n) {
          const i64 si = ix[i * st_i], sj = ix[j * st_i];
          const u64 ki = best_key(in[a + si * p.in_axis], largest);
          const u64 kj = best_key(in[a + sj * p.in_axis], largest);
          if (kj > ki || (kj == ki && sj < si)) {
            ix[i * st_i] = sj;
            ix[j * st_i] = si;
          }
        }
      }
      __syncthreads();
    }
  }
  for (i64 j = threadIdx.x; j < n; j += blockDim.x)
    vals[b + j * p.val_axis] = in[a + ix[j * st_i] * p.in_axis];
}

#define TOPK_KERNELS(NAME, X)                                                                \
  extern "C" __global__ void __launch_bounds__(1024)                                         \
      topk_sort_##NAME(const X *__restrict__ in, X *vals, i64 *idx, TopKParams p) {          \
    topk_sort<X>(in, vals, idx, p);                                                          \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(1024)                                         \
      topk_select_##NAME(const X *__restrict__ in, X *vals, i64 *idx, TopKParams p) {        \
    topk_select<X>(in, vals, idx, p);                                                        \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(1024)                                         \
      topk_gsort_##NAME(const X *__restrict__ in, X *vals, i64 *idx, TopKParams p) {         \
    topk_gsort<X>(in, vals, idx, p);                                                         \
  }

FOR_NUMERIC(TOPK_KERNELS)
