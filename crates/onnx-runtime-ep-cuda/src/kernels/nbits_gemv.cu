// com.microsoft MatMulNBits, the decode product on tensor cores (sm_80+): 4-bit codes, blocks
// of at least 32 along K, K a multiple of 32, integer zero points (packed uint8 or the default
// 8), float16 / bfloat16 activations, M <= 16 rows of A. The _glu variants compute the
// internal MatMulNBitsSiluMul: two weight sets of the same shapes read by the same warp (two
// slabs of each in flight), y = silu(A B^T) * (A B2^T) in the epilogue.
//
// B is packed [N, k_blocks, blob]: column n's codes are one row of row_bytes bytes, low nibble
// first, so 16 bytes (a "chunk") hold 32 consecutive K codes of one column, all in one block.
//
// nq_gemv_<T>_r<R>: one warp per tile of 8 columns and a share of K. Lane (g, t) = (lane / 4,
// lane % 4) reads chunk 4 * s + t of column n0 + g for every 128-code slab s of its share:
// 16 bytes a load, U slabs of loads in flight before any is used. The warp multiplies with
// mma.sync.m16n8k16 (float32 accumulation): the 16 x 16 A operand is rows 0..15 of A, the
// 16 x 8 B operand the dequantized weights of the 8 columns. The dot product does not care in
// which order K is summed, so the K positions of one mma step are chosen to suit the loads:
// in step h (0..7 per slab), fragment positions 2t, 2t+1, 2t+8, 2t+9 stand for K codes
// 4h .. 4h+3 of lane t's chunk. B's pair registers are then codes (4h, 4h+1) and (4h+2, 4h+3)
// of the lane's own chunk, and A's pair registers are the matching two half2 words of A
// straight from memory (rows g and g + 8, the latter only when R = 2, i.e. M > 8).
// A code becomes a T exactly by OR-ing it into the mantissa of 1024 (float16) or 128
// (bfloat16) and subtracting (magic + z); one multiply by the block's scale rounds it to T
// (as the prefill path's dequantized weights are). Warps splitting K (ks of them, one block
// holds 8 / ks tiles) add their accumulators in shared memory; the first writes the outputs
// with the bias.

#define NQ_THREADS 256
#define NQ_U 4

struct NqGemv {
  const void *a;
  const u8 *b;
  const void *scales;
  const u8 *zp;
  const void *bias;
  void *y;
  i64 a_rs, y_rs;    // row strides of A and Y, in elements
  i32 m, n, kc, kb;  // rows, columns, 32-code chunks of K (K / 32), k_blocks
  i32 row_bytes, zrow, blk_shift, ks; // blk_shift = log2(block / 32); ks warps split K
  // The _glu variants: a second weight set (same shapes), y = silu(A B^T) * (A B2^T).
  const u8 *b2;
  const void *scales2;
  const u8 *zp2;
  // The _norm variants (the internal NormMatMulNBits): A = rms_norm(x (+ skip (+ nbias))) *
  // gamma, computed by every block into shared memory (m rows of K, x and skip rows at a_rs);
  // block 0 writes the rounded sum x + skip (+ nbias) to sum_out (row stride sum_rs) when set.
  const void *skip;
  const void *gamma;
  const void *nbias;
  void *sum_out;
  i64 sum_rs;
  float eps;
  i32 _pad;
};

template <typename T> struct NqType;
template <> struct NqType<f16> {
  static const u32 MAGIC = 0x64006400u; // 1024.0 in both halves
  static const u32 MAGIC1 = 0x6400u;
  __device__ static __forceinline__ u32 sub_mul(u32 v, u32 zz, u32 ss) {
    __half2 d = __hsub2(*reinterpret_cast<__half2 *>(&v), *reinterpret_cast<__half2 *>(&zz));
    __half2 r = __hmul2(d, *reinterpret_cast<__half2 *>(&ss));
    return *reinterpret_cast<u32 *>(&r);
  }
  __device__ static __forceinline__ void mma(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3,
                                             u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};
template <> struct NqType<bf16> {
  static const u32 MAGIC = 0x43004300u; // 128.0 in both halves
  static const u32 MAGIC1 = 0x4300u;
  __device__ static __forceinline__ u32 sub_mul(u32 v, u32 zz, u32 ss) {
    __nv_bfloat162 d = __hsub2(*reinterpret_cast<__nv_bfloat162 *>(&v),
                               *reinterpret_cast<__nv_bfloat162 *>(&zz));
    __nv_bfloat162 r = __hmul2(d, *reinterpret_cast<__nv_bfloat162 *>(&ss));
    return *reinterpret_cast<u32 *>(&r);
  }
  __device__ static __forceinline__ void mma(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3,
                                             u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ u32 nq_word(const uint4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Codes 2i and 2i+1 of word w (nibbles 2i, 2i+1) as (magic + c) pairs: byte i of w and byte i
// of w >> 4 side by side, low nibbles kept.
__device__ __forceinline__ u32 nq_pair(u32 w, u32 w4, int i, u32 magic) {
  return (__byte_perm(w, w4, (u32)i | ((4u + (u32)i) << 8)) & 0x000F000Fu) | magic;
}

// One lane's loads of one slab: its chunk, the chunk's scale (raw T bits) and zero point.
struct NqLoad {
  uint4 w;
  u32 s, z;
};

// One weight set's view of a warp's column tile.
struct NqCols {
  const uint4 *brow;
  const u16 *srow;
  const u8 *zrow;
};

__device__ __forceinline__ NqCols nq_cols(const u8 *b, const void *scales, const u8 *zp,
                                          const NqGemv &p, int nc) {
  NqCols c;
  c.brow = reinterpret_cast<const uint4 *>(b + (i64)nc * p.row_bytes);
  c.srow = reinterpret_cast<const u16 *>(scales) + (i64)nc * p.kb;
  c.zrow = zp == nullptr ? nullptr : zp + (i64)nc * p.zrow;
  return c;
}

__device__ __forceinline__ NqLoad nq_load(const NqCols &c, const NqGemv &p, int j) {
  NqLoad ld;
  ld.w = make_uint4(0, 0, 0, 0);
  ld.s = 0;
  ld.z = 8;
  if (j < p.kc) {
    const int blk = j >> p.blk_shift;
    ld.w = __ldg(c.brow + j);
    ld.s = __ldg(c.srow + blk);
    if (c.zrow != nullptr) ld.z = (__ldg(c.zrow + (blk >> 1)) >> ((blk & 1) * 4)) & 15u;
  }
  return ld;
}

// The 8 mma steps of one slab of one weight set, A words x0 / x1 of word group wd.
template <typename T, int R>
__device__ __forceinline__ void nq_step(float (&acc)[4], const NqLoad &ld, int wd,
                                        const uint4 &x0, const uint4 &x1) {
  typedef NqType<T> Ty;
  const u32 zz = (Ty::MAGIC1 | ld.z) * 0x00010001u;
  const u32 ss = ld.s * 0x00010001u;
  const u32 w = nq_word(ld.w, wd), w4 = w >> 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Step: codes 8wd + 4h .. +3, i.e. byte pairs 2h and 2h + 1 of the word.
    const u32 b0 = Ty::sub_mul(nq_pair(w, w4, 2 * h, Ty::MAGIC), zz, ss);
    const u32 b1 = Ty::sub_mul(nq_pair(w, w4, 2 * h + 1, Ty::MAGIC), zz, ss);
    const u32 a0 = nq_word(x0, 2 * h), a2 = nq_word(x0, 2 * h + 1);
    const u32 a1 = R == 2 ? nq_word(x1, 2 * h) : 0u;
    const u32 a3 = R == 2 ? nq_word(x1, 2 * h + 1) : 0u;
    Ty::mma(acc, a0, a1, a2, a3, b0, b1);
  }
}

// The _norm variants' prologue: rows 0..m-1 of A, normalized as SkipSimplifiedLayerNorm /
// SimplifiedLayerNorm would (the sum rounded to T, its mean square in float, the statistics
// in double, the product with gamma rounded to T), into sA ([m][K] of T, 16-byte aligned).
// Every thread of the block calls it; the sum of squares is reduced in a fixed order, so runs
// give the same bytes.
template <typename T> __device__ void nq_norm_rows(const NqGemv &p, T *sA, float *red) {
  const int K = p.kc * 32, C = K / 8; // 16-byte groups of a row
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int r = 0; r < p.m; ++r) {
    const T *xr = reinterpret_cast<const T *>(p.a) + (i64)r * p.a_rs;
    const T *sr = p.skip != nullptr ? reinterpret_cast<const T *>(p.skip) + (i64)r * p.a_rs
                                    : nullptr;
    uint4 *ar = reinterpret_cast<uint4 *>(sA + (i64)r * K);
    float ss = 0.f;
    for (int c = tid; c < C; c += NQ_THREADS) {
      uint4 xv = __ldg(reinterpret_cast<const uint4 *>(xr) + c);
      if (sr != nullptr) {
        const uint4 sv = __ldg(reinterpret_cast<const uint4 *>(sr) + c);
        uint4 bv = make_uint4(0, 0, 0, 0);
        if (p.nbias != nullptr) bv = __ldg(reinterpret_cast<const uint4 *>(p.nbias) + c);
        T xe[8], se[8], be[8];
        memcpy(&xe[0], &xv, 16);
        memcpy(&se[0], &sv, 16);
        memcpy(&be[0], &bv, 16);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          float v = widen(xe[e]) + widen(se[e]);
          if (p.nbias != nullptr) v += widen(be[e]);
          xe[e] = convert<T>(v);
        }
        memcpy(&xv, &xe[0], 16);
        if (blockIdx.x == 0 && p.sum_out != nullptr)
          reinterpret_cast<uint4 *>(reinterpret_cast<T *>(p.sum_out) + (i64)r * p.sum_rs)[c] = xv;
      }
      T xe[8];
      memcpy(&xe[0], &xv, 16);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += widen(xe[e]) * widen(xe[e]);
      ar[c] = xv;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    float tot = 0.f;
#pragma unroll
    for (int w = 0; w < NQ_THREADS / 32; ++w) tot += red[w];
    const float factor = (float)(1.0 / sqrt((double)tot / (double)K + (double)p.eps));
    __syncthreads(); // red is reused by the next row
    for (int c = tid; c < C; c += NQ_THREADS) {
      const uint4 gv = __ldg(reinterpret_cast<const uint4 *>(p.gamma) + c);
      uint4 xv = ar[c];
      T xe[8], ge[8];
      memcpy(&xe[0], &xv, 16);
      memcpy(&ge[0], &gv, 16);
#pragma unroll
      for (int e = 0; e < 8; ++e) xe[e] = convert<T>(widen(xe[e]) * factor * widen(ge[e]));
      memcpy(&xv, &xe[0], 16);
      ar[c] = xv;
    }
  }
  __syncthreads();
}

// G: the GLU variant (two weight sets, silu(first) * second in the epilogue); N: A is
// normalized by the prologue into shared memory (the _norm variants).
template <typename T, int R, bool G, bool N = false> __device__ void nq_gemv(const NqGemv &p) {
#if __CUDA_ARCH__ >= 800
  constexpr int NS = G ? 2 : 1;      // weight sets
  constexpr int U = G ? 2 : NQ_U;    // slabs of loads in flight per set
  __shared__ float red[NQ_THREADS / 32][32][4 * NS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int ks = p.ks;
  const int tile = blockIdx.x * (8 / ks) + warp / ks;
  const int kw = warp % ks;
  const int n0 = tile * 8;
  const bool active = n0 < p.n;
  // Loads read column min(n, N - 1); columns past N are never written.
  const int nc = min(n0 + g, p.n - 1);
  NqCols cols[NS];
  cols[0] = nq_cols(p.b, p.scales, p.zp, p, nc);
  if (G) cols[NS - 1] = nq_cols(p.b2, p.scales2, p.zp2, p, nc);
  // This lane's rows of A (g and g + 8); a missing row reads nothing and counts as zeros.
  const bool row0 = g < p.m, row1 = R == 2 && g + 8 < p.m;
  const int slabs = (p.kc + 3) >> 2;
  extern __shared__ __align__(16) unsigned char nq_smem[];
  const T *abase = reinterpret_cast<const T *>(p.a);
  i64 ars = p.a_rs;
  // The weights are constants of the model: the first slabs are loaded before pdl_wait, so
  // with a programmatic dependent launch their DRAM round trip overlaps the kernel before
  // this one (and, in the _norm variants, the prologue). Nothing else is read before it.
  NqLoad ld[NS][U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = (kw + u * ks) * 4 + t;
#pragma unroll
    for (int q = 0; q < NS; ++q) ld[q][u] = nq_load(cols[q], p, active ? j : p.kc);
  }
  pdl_wait();
  if (N) {
    nq_norm_rows<T>(p, reinterpret_cast<T *>(nq_smem), &red[0][0][0]);
    abase = reinterpret_cast<const T *>(nq_smem);
    ars = (i64)p.kc * 32;
  }
  const uint4 *a0p = reinterpret_cast<const uint4 *>(abase + (i64)(row0 ? g : 0) * ars);
  const uint4 *a1p = reinterpret_cast<const uint4 *>(abase + (i64)(row1 ? g + 8 : 0) * ars);

  // The accumulator fragments: acc[q][0], acc[q][1] = row g, columns 2t, 2t + 1;
  // acc[q][2], acc[q][3] = row g + 8 (q: weight set).
  float acc[NS][4];
#pragma unroll
  for (int q = 0; q < NS; ++q)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[q][i] = 0.f;

  if (active) {
    for (int s0 = kw; s0 < slabs; s0 += U * ks) {
      if (s0 != kw) { // the first slabs were loaded above
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int j = (s0 + u * ks) * 4 + t; // this lane's chunk
#pragma unroll
          for (int q = 0; q < NS; ++q) ld[q][u] = nq_load(cols[q], p, j);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int s = s0 + u * ks;
        if (s >= slabs) break; // uniform across the warp
        const int j = s * 4 + t;
        const bool live = j < p.kc;
#pragma unroll
        for (int wd = 0; wd < 4; ++wd) {
          // A words 4wd..4wd+3 of this lane's 32 codes: pairs (8wd + 2i, 8wd + 2i + 1).
          uint4 x0 = make_uint4(0, 0, 0, 0), x1 = make_uint4(0, 0, 0, 0);
          if (N) {
            if (live && row0) x0 = a0p[4 * j + wd];
            if (R == 2 && live && row1) x1 = a1p[4 * j + wd];
          } else {
            if (live && row0) x0 = __ldg(a0p + 4 * j + wd);
            if (R == 2 && live && row1) x1 = __ldg(a1p + 4 * j + wd);
          }
#pragma unroll
          for (int q = 0; q < NS; ++q) nq_step<T, R>(acc[q], ld[q][u], wd, x0, x1);
        }
      }
    }
  }
  float out[NS][4];
#pragma unroll
  for (int q = 0; q < NS; ++q)
#pragma unroll
    for (int i = 0; i < 4; ++i) out[q][i] = acc[q][i];
  if (ks > 1) {
    if (N) __syncthreads(); // the prologue's reduction used red
#pragma unroll
    for (int q = 0; q < NS; ++q)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp][lane][4 * q + i] = out[q][i];
    __syncthreads();
    if (kw == 0) {
      for (int w = 1; w < ks; ++w)
#pragma unroll
        for (int q = 0; q < NS; ++q)
#pragma unroll
          for (int i = 0; i < 4; ++i) out[q][i] += red[warp + w][lane][4 * q + i];
    }
  }
  if (!active || kw != 0) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >> 1) * 8;
    const int n = n0 + 2 * t + (i & 1);
    if (row < p.m && n < p.n) {
      float v = out[0][i];
      if (G) {
        // As the unfused graph: each product rounded to T, SiLU of the gate rounded to T,
        // then the product.
        const float gt = widen(convert<T>(v)), up = widen(convert<T>(out[NS - 1][i]));
        v = widen(convert<T>(gt / (1.f + expf(-gt)))) * up;
      } else if (p.bias != nullptr) {
        v += widen(reinterpret_cast<const T *>(p.bias)[n]);
      }
      reinterpret_cast<T *>(p.y)[(i64)row * p.y_rs + n] = convert<T>(v);
    }
  }
#endif
}

// Resident blocks per SM the register budget allows: 3 (85 registers) for rows 0..7, 2 with
// the second row group.
#define NQ_GEMV(T, TN, R)                                                                     \
  extern "C" __global__ void __launch_bounds__(NQ_THREADS, 4 - R)                             \
      nq_gemv_##TN##_r##R(NqGemv p) {                                                         \
    pdl_trigger();                                                                            \
    nq_gemv<T, R, false>(p);                                                                  \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(NQ_THREADS, 4 - R)                             \
      nq_gemv_##TN##_r##R##_glu(NqGemv p) {                                                   \
    pdl_trigger();                                                                            \
    nq_gemv<T, R, true>(p);                                                                   \
  }
#define NQ_GEMV_NORM(T, TN, R)                                                                \
  extern "C" __global__ void __launch_bounds__(NQ_THREADS, 4 - R)                             \
      nq_gemv_##TN##_r##R##_norm(NqGemv p) {                                                  \
    pdl_trigger();                                                                            \
    nq_gemv<T, R, false, true>(p);                                                            \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(NQ_THREADS, 4 - R)                             \
      nq_gemv_##TN##_r##R##_glu_norm(NqGemv p) {                                              \
    pdl_trigger();                                                                            \
    nq_gemv<T, R, true, true>(p);                                                             \
  }
NQ_GEMV_NORM(f16, f16, 1)
NQ_GEMV_NORM(f16, f16, 2)
NQ_GEMV_NORM(bf16, bf16, 1)
NQ_GEMV_NORM(bf16, bf16, 2)
NQ_GEMV(f16, f16, 1)
NQ_GEMV(f16, f16, 2)
NQ_GEMV(bf16, bf16, 1)
NQ_GEMV(bf16, bf16, 2)
