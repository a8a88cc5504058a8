// Miscellaneous tensor ops. Two module variants picked by a define:
//   MISC_MOVE    by element width: EyeLike (`eye_w*`), ReverseSequence (`revseq_w*`), and the
//                data-dependent selections of NonZero and Compress: per-tile counts of set
//                flags (`sel_count_w*`), their scan (`sel_scan`), the write of each set
//                element's rank (`sel_write_w*`: NonZero's coordinates or Compress's selected
//                indices) and Compress's gather (`compress_gather_w*`);
//   MISC_TYPED   typed: Col2Im (`col2im_<t>`).

#ifdef MISC_MOVE

// ---- EyeLike ----

struct EyeParams {
  i64 n;
  i64 cols;
  i64 k;
  i64 s0;
  i64 s1;
  u64 one; // the bits of 1 in the output type
};

template <int W> __device__ void eye_impl(typename Word<W>::T *__restrict__ out, const EyeParams &p) {
  typedef typename Word<W>::T T;
  const T one = (T)p.one;
  GRID_LOOP(e, p.n) {
    const i64 i = e / p.cols;
    const i64 j = e - i * p.cols;
    out[i * p.s0 + j * p.s1] = (j - i == p.k) ? one : (T)0;
  }
}

#define EYE(W)                                                                                \
  extern "C" __global__ void eye_w##W(Word<W>::T *out, EyeParams p) { eye_impl<W>(out, p); }
EYE(1)
EYE(2)
EYE(4)
EYE(8)

// ---- ReverseSequence ----

struct RevSeqParams {
  i64 n;
  i32 rank;
  i32 batch_axis;
  i32 time_axis;
  i32 lens_code; // 6 int32, 7 int64
  i64 lens_stride;
  i64 dims[MAX_RANK];
  i64 xs[MAX_RANK];
  i64 os[MAX_RANK];
  u32 id;
  u32 _pad;
};

// out[.., b, t, ..] = x[.., b, len[b] - 1 - t, ..] for t < len[b], else x[.., b, t, ..]. A
// length outside [0, steps] is reported (device error 1) and leaves its batch unreversed.
template <int W>
__device__ void revseq_impl(const typename Word<W>::T *__restrict__ x,
                            typename Word<W>::T *__restrict__ out, const void *__restrict__ lens,
                            u32 *err, const RevSeqParams &p) {
  GRID_LOOP(e, p.n) {
    i64 rem = e, xo = 0, oo = 0, b = 0, t = 0;
    #pragma unroll 1
    for (int k = p.rank - 1; k >= 0; --k) {
      const i64 d = p.dims[k];
      const i64 q = rem / d;
      const i64 c = rem - q * d;
      rem = q;
      xo += c * p.xs[k];
      oo += c * p.os[k];
      if (k == p.batch_axis) b = c;
      if (k == p.time_axis) t = c;
    }
    const i64 steps = p.dims[p.time_axis];
    i64 len = p.lens_code == 6 ? (i64)((const int *)lens)[b * p.lens_stride]
                               : ((const i64 *)lens)[b * p.lens_stride];
    if (len < 0 || len > steps) {
      if (t == 0) report_error(err, 1u, p.id);
      len = 0;
    }
    if (t < len) xo += (len - 1 - 2 * t) * p.xs[p.time_axis];
    out[oo] = x[xo];
  }
}

#define REVSEQ(W)                                                                             \
  extern "C" __global__ void revseq_w##W(const Word<W>::T *x, Word<W>::T *out,               \
                                         const void *lens, u32 *err, RevSeqParams p) {       \
    revseq_impl<W>(x, out, lens, err, p);                                                     \
  }
REVSEQ(1)
REVSEQ(2)
REVSEQ(4)
REVSEQ(8)
REVSEQ(16)

// ---- NonZero / Compress: data-dependent selection ----

#define SEL_THREADS 256
#define SEL_ROUNDS 16
#define SEL_TILE (SEL_THREADS * SEL_ROUNDS)

// The flags: element i (row-major over dims) is set when its bits outside `mask` (the sign
// bit of float types) are not all zero. Only i < limit can be selected; set elements at or
// past the limit are counted apart (Compress: a condition longer than the axis).
struct FlagParams {
  i64 n;
  i64 limit;
  i32 rank;
  i32 dense;
  i32 mode; // sel_write: 0 NonZero coordinates, 1 Compress indices
  u32 id;
  u64 mask;
  i64 dims[MAX_RANK];
  i64 strides[MAX_RANK];
};

template <int W> __device__ __forceinline__ bool flag_at(const void *x, i64 i, const FlagParams &p) {
  i64 off = i;
  if (!p.dense) {
    off = 0;
    i64 rem = i;
    #pragma unroll 1
    for (int k = p.rank - 1; k >= 0; --k) {
      const i64 d = p.dims[k];
      const i64 q = rem / d;
      off += (rem - q * d) * p.strides[k];
      rem = q;
    }
  }
  if constexpr (W == 16) {
    const w16_t v = ((const w16_t *)x)[off];
    return ((v.lo | v.hi) & p.mask) != 0;
  } else {
    return ((u64)((const typename Word<W>::T *)x)[off] & p.mask) != 0;
  }
}

__device__ __forceinline__ i64 block_sum_i64(i64 v, i64 *shared32) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  v = 0;
  if (warp == 0) {
    v = lane < warps ? shared32[lane] : 0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v; // valid in thread 0
}

// counts[tile] = set flags below the limit in the tile; counts[tiles + tile] = set flags at or
// past it. One block of SEL_THREADS per tile of SEL_TILE elements.
template <int W>
__device__ void sel_count_impl(const void *__restrict__ x, i64 *__restrict__ counts, i64 tiles,
                               const FlagParams &p) {
  __shared__ i64 s[32];
  const i64 base = (i64)blockIdx.x * SEL_TILE;
  i64 c = 0, beyond = 0;
  for (int r = 0; r < SEL_ROUNDS; ++r) {
    const i64 i = base + r * SEL_THREADS + threadIdx.x;
    if (i < p.n && flag_at<W>(x, i, p)) {
      if (i < p.limit) {
        ++c;
      } else {
        ++beyond;
      }
    }
  }
  c = block_sum_i64(c, s);
  if (threadIdx.x == 0) counts[blockIdx.x] = c;
  beyond = block_sum_i64(beyond, s);
  if (threadIdx.x == 0) counts[tiles + blockIdx.x] = beyond;
}

// One block of 1024 threads: counts[0..tiles) become exclusive offsets, counts[2 tiles] the
// total and counts[2 tiles + 1] the sum of the past-the-limit counts.
extern "C" __global__ void sel_scan(i64 *__restrict__ counts, i64 tiles) {
  __shared__ i64 warp_tot[32];
  __shared__ i64 s_carry;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warps = blockDim.x >> 5;
  if (tid == 0) s_carry = 0;
  __syncthreads();
  for (i64 b0 = 0; b0 < tiles; b0 += blockDim.x) {
    const i64 i = b0 + tid;
    const i64 v = i < tiles ? counts[i] : 0;
    i64 inc = v;
    for (int o = 1; o < 32; o <<= 1) {
      const i64 t = __shfl_up_sync(0xffffffffu, inc, o);
      if (lane >= o) inc += t;
    }
    if (lane == 31) warp_tot[warp] = inc;
    __syncthreads();
    if (warp == 0) {
      i64 w = lane < warps ? warp_tot[lane] : 0;
      for (int o = 1; o < 32; o <<= 1) {
        const i64 t = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += t;
      }
      if (lane < warps) warp_tot[lane] = w;
    }
    __syncthreads();
    const i64 carry = s_carry;
    if (i < tiles) counts[i] = carry + (warp > 0 ? warp_tot[warp - 1] : 0) + inc - v;
    const i64 chunk_total = warp_tot[warps - 1];
    __syncthreads();
    if (tid == 0) s_carry = carry + chunk_total;
    __syncthreads();
  }
  i64 beyond = 0;
  for (i64 i = tid; i < tiles; i += blockDim.x) beyond += counts[tiles + i];
  beyond = block_sum_i64(beyond, warp_tot);
  if (tid == 0) {
    counts[2 * tiles] = s_carry;
    counts[2 * tiles + 1] = beyond;
  }
}

// Each set element below the limit learns its rank among them (the tile's offset plus a
// block-wide ballot scan per round) and writes: NonZero, its coordinates into
// out[axis * os0 + rank * os1]; Compress, its index into sel[rank]. Ranks past `total` (the
// count the output was sized for) are reported, not written.
template <int W>
__device__ void sel_write_impl(const void *__restrict__ x, const i64 *__restrict__ counts,
                               i64 *__restrict__ out, u32 *err, i64 total, i64 os0, i64 os1,
                               const FlagParams &p) {
  __shared__ int warp_cnt[SEL_THREADS / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 base = (i64)blockIdx.x * SEL_TILE;
  i64 running = counts[blockIdx.x];
  for (int r = 0; r < SEL_ROUNDS; ++r) {
    const i64 i = base + r * SEL_THREADS + threadIdx.x;
    const bool f = i < p.n && i < p.limit && flag_at<W>(x, i, p);
    const u32 ballot = __ballot_sync(0xffffffffu, f);
    if (lane == 0) warp_cnt[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, round = 0;
#pragma unroll
    for (int w = 0; w < SEL_THREADS / 32; ++w) {
      const int c = warp_cnt[w];
      before += w < warp ? c : 0;
      round += c;
    }
    if (f) {
      const i64 slot = running + before + __popc(ballot & ((1u << lane) - 1u));
      if (slot >= total) {
        report_error(err, 1u, p.id);
      } else if (p.mode == 1) {
        out[slot] = i;
      } else if (p.rank == 0) {
        out[slot * os1] = 0;
      } else {
        i64 rem = i;
        #pragma unroll 1
        for (int k = p.rank - 1; k >= 0; --k) {
          const i64 d = p.dims[k];
          const i64 q = rem / d;
          out[k * os0 + slot * os1] = rem - q * d;
          rem = q;
        }
      }
    }
    running += round;
    __syncthreads();
  }
}

#define SELECT(W)                                                                             \
  extern "C" __global__ void sel_count_w##W(const void *x, i64 *counts, i64 tiles,           \
                                            FlagParams p) {                                   \
    sel_count_impl<W>(x, counts, tiles, p);                                                   \
  }                                                                                           \
  extern "C" __global__ void sel_write_w##W(const void *x, const i64 *counts, i64 *out,      \
                                            u32 *err, i64 total, i64 os0, i64 os1,            \
                                            FlagParams p) {                                   \
    sel_write_impl<W>(x, counts, out, err, total, os0, os1, p);                               \
  }
SELECT(1)
SELECT(2)
SELECT(4)
SELECT(8)
SELECT(16)

struct CompressParams {
  i64 n;
  i32 rank;
  i32 axis;
  i32 flat; // no axis: the output is x flattened, row-major
  i32 _pad;
  i64 out_dims[MAX_RANK];
  i64 x_dims[MAX_RANK];
  i64 xs[MAX_RANK];
  i64 os[MAX_RANK];
};

// out[.., j, ..] = x[.., sel[j], ..] (flat: out[j] = x.flat[sel[j]]).
template <int W>
__device__ void compress_impl(const typename Word<W>::T *__restrict__ x,
                              typename Word<W>::T *__restrict__ out, const i64 *__restrict__ sel,
                              const CompressParams &p) {
  GRID_LOOP(e, p.n) {
    i64 xo = 0, oo = 0;
    if (p.flat) {
      oo = e * p.os[0];
      i64 rem = sel[e];
      #pragma unroll 1
      for (int k = p.rank - 1; k >= 0; --k) {
        const i64 d = p.x_dims[k];
        const i64 q = rem / d;
        xo += (rem - q * d) * p.xs[k];
        rem = q;
      }
    } else {
      i64 rem = e;
      #pragma unroll 1
      for (int k = p.rank - 1; k >= 0; --k) {
        const i64 d = p.out_dims[k];
        const i64 q = rem / d;
        const i64 c = rem - q * d;
        rem = q;
        oo += c * p.os[k];
        xo += (k == p.axis ? sel[c] : c) * p.xs[k];
      }
    }
    out[oo] = x[xo];
  }
}

#define COMPRESS(W)                                                                           \
  extern "C" __global__ void compress_gather_w##W(const Word<W>::T *x, Word<W>::T *out,      \
                                                  const i64 *sel, CompressParams p) {         \
    compress_impl<W>(x, out, sel, p);                                                         \
  }
COMPRESS(1)
COMPRESS(2)
COMPRESS(4)
COMPRESS(8)
COMPRESS(16)

#endif // MISC_MOVE

#ifdef MISC_TYPED

// ---- Col2Im ----

struct Col2ImParams {
  i64 n;        // output elements: batch * channels * image
  i32 rank;     // spatial dims
  i32 _pad;
  i64 channels;
  i64 ks;       // kernel elements
  i64 blocks;   // L: block positions
  i64 image[MAX_RANK];
  i64 kernel[MAX_RANK];
  i64 grid[MAX_RANK]; // block positions per spatial dim
  i64 strides[MAX_RANK];
  i64 dilations[MAX_RANK];
  i64 pads[MAX_RANK]; // begin pads
  i64 xs[3];          // x strides: batch, channel * kernel, block
  i64 os[2 + MAX_RANK];
};

// One thread per image element sums, in kernel-index order (as the CPU provider does), the
// columns of every block whose window covers it: position p receives kernel offset k from
// block o where o * stride + k * dilation - pad = p.
template <typename T>
__device__ void col2im_nd(const T *__restrict__ x, T *__restrict__ out, const Col2ImParams &p) {
  GRID_LOOP(e, p.n) {
    i64 rem = e, oo = 0;
    i64 pix[MAX_RANK];
#pragma unroll 1
    for (int d = p.rank - 1; d >= 0; --d) {
      const i64 q = rem / p.image[d];
      pix[d] = rem - q * p.image[d];
      oo += pix[d] * p.os[2 + d];
      rem = q;
    }
    const i64 c = rem % p.channels;
    const i64 b = rem / p.channels;
    oo += c * p.os[1] + b * p.os[0];
    const T *xb = x + b * p.xs[0] + c * p.ks * p.xs[1];
    decltype(widen(T())) acc = 0;
#pragma unroll 1
    for (i64 k = 0; k < p.ks; ++k) {
      i64 kr = k, block = 0, mul = 1;
      bool hit = true;
#pragma unroll 1
      for (int d = p.rank - 1; d >= 0; --d) {
        const i64 kq = kr / p.kernel[d];
        const i64 kd = kr - kq * p.kernel[d];
        kr = kq;
        const i64 t = pix[d] + p.pads[d] - kd * p.dilations[d];
        const i64 o = t / p.strides[d];
        if (t < 0 || o * p.strides[d] != t || o >= p.grid[d]) {
          hit = false;
          break;
        }
        block += o * mul;
        mul *= p.grid[d];
      }
      if (hit) acc += widen(xb[k * p.xs[1] + block * p.xs[2]]);
    }
    out[oo] = Narrow<T>::from(acc);
  }
}

#define COL2IM(NAME, T)                                                                       \
  extern "C" __global__ void col2im_##NAME(const T *x, T *out, Col2ImParams p) {             \
    col2im_nd(x, out, p);                                                                     \
  }
COL2IM(f32, float)
COL2IM(f64, double)
COL2IM(f16, f16)
COL2IM(bf16, bf16)

#endif // MISC_TYPED
