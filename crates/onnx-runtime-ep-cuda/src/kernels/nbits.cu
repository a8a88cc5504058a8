// com.microsoft MatMulNBits and GatherBlockQuantized.
//
// B is packed [N, k_blocks, blob]: column n's K codes are one contiguous row of
// row_bytes = k_blocks * blob bytes, `BITS`-bit codes low bits first. A weight dequantizes to
// (q - z) * scale with one scale (and zero point) per block of `block` codes along K.
//
// nbits_gemv_<T>_b<BITS>_m<MR>: the decode product (a few rows of A). 256 threads (8 warps); a
// column group of CPW = 2 columns is read by `wpc` warps together (32 * wpc lanes), so a block
// holds 8 / wpc groups; blockIdx.x picks MR rows of A, blockIdx.y the block's column groups
// (when A fits one shared-memory tile, a block walks every gridDim.y-th set of groups, so A is
// staged once for several).
// Every lane reads 16-byte chunks of its group's 2 rows of B (chunk j of each column at once,
// with its scales and zero points; the next chunk's loads go out before the current one is
// computed, the first before A is staged), and dequantizes in registers: a code becomes the float 2^23 + q by a byte
// permute into the mantissa, minus (2^23 + z) exactly, times A in float; the scale multiplies
// each block's partial sum. A is staged in shared memory as float (zero past K), tile by tile
// along K, padded by 4 floats per chunk so the lanes' float4 reads hit distinct banks. Lanes
// reduce by shuffles (and across the group's warps in shared memory); one lane writes each
// output with the bias. Integer zero points only (packed uint8, or the default 2^(BITS-1)).
//
// This is the general decode path (every bit width and block size, float32 activations); the
// 4-bit float16 / bfloat16 case runs on tensor cores (nbits_gemv.cu), the prefill path's
// dequantization is in nbits_dequant.cu.
//
// gbq_<T>_<I>: GatherBlockQuantized, one thread per output element; data int4 / uint4 (flat
// nibbles) or uint8 holding BITS-bit codes; an index outside [-s, s-1] writes 0 and reports
// device error 1.

#define NB_THREADS 256
#define NB_CPW 2
// Resident blocks per SM the register budget must allow (the unrolled dequantization would
// otherwise take over 200 registers a thread and leave one block per SM).
#define NB_MIN_BLOCKS(MR) 2

struct NbGemv {
  const void *a;
  const u8 *b;
  const void *scales;
  const u8 *zp;
  const void *bias;
  void *y;
  i64 a_rs, a_ks, y_rs;
  i32 m, n, k, kb;
  i32 block_log2, row_bytes, zrow, chunks;
  i32 wpc, tile_chunks, _pad0, _pad1;
};

template <typename T> __device__ __forceinline__ float to_f(T x) { return widen(x); }

// The code of element `e` (0..WE) of a 32-bit word, as the float 2^23 + q.
template <int BITS> struct Codes;
template <> struct Codes<4> {
  static const int WE = 8;
  __device__ static __forceinline__ void unpack(u32 w, float (&f)[8]) {
    const u32 lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      f[2 * b] = __uint_as_float(__byte_perm(lo, 0x4B000000u, 0x7540u + b));
      f[2 * b + 1] = __uint_as_float(__byte_perm(hi, 0x4B000000u, 0x7540u + b));
    }
  }
};
template <> struct Codes<8> {
  static const int WE = 4;
  __device__ static __forceinline__ void unpack(u32 w, float (&f)[4]) {
#pragma unroll
    for (int b = 0; b < 4; ++b) f[b] = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u + b));
  }
};
template <> struct Codes<2> {
  static const int WE = 16;
  __device__ static __forceinline__ void unpack(u32 w, float (&f)[16]) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const u32 x = (w >> (2 * s)) & 0x03030303u;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        f[4 * b + s] = __uint_as_float(__byte_perm(x, 0x4B000000u, 0x7540u + b));
    }
  }
};

// The integer zero point of (column n, block blk) as 2^23 + z.
template <int BITS>
__device__ __forceinline__ float zero_bias(const NbGemv &p, int n, int blk) {
  int z;
  if (p.zp == nullptr) {
    z = 1 << (BITS - 1);
  } else if (BITS == 8) {
    z = p.zp[(i64)n * p.zrow + blk];
  } else {
    const int per = 8 / BITS;
    z = (p.zp[(i64)n * p.zrow + blk / per] >> ((blk % per) * BITS)) & ((1 << BITS) - 1);
  }
  return 8388608.0f + (float)z;
}

// One lane's chunk of a column group: the 2 columns' 16 bytes, with the scale and zero point
// of the chunk's first block (chunks of several blocks read the others when they get there).
struct NbChunk {
  uint4 w[NB_CPW];
  float s[NB_CPW], zb[NB_CPW];
};

template <typename T, int BITS>
__device__ __forceinline__ void nb_load(const NbGemv &p, int n0, int j, bool valid, NbChunk &c) {
  constexpr int E = 4 * Codes<BITS>::WE;
  const T *S = (const T *)p.scales;
  const int blk = (j * E) >> p.block_log2;
#pragma unroll
  for (int col = 0; col < NB_CPW; ++col) {
    const int n = n0 + col;
    const bool live = valid && n < p.n;
    c.w[col] = make_uint4(0, 0, 0, 0);
    c.s[col] = 0.f;
    c.zb[col] = 8388608.f;
    if (live) {
      c.w[col] = __ldg(reinterpret_cast<const uint4 *>(p.b + (i64)n * p.row_bytes) + j);
      c.s[col] = to_f(S[(i64)n * p.kb + blk]);
      c.zb[col] = zero_bias<BITS>(p, n, blk);
    }
  }
}

// Adds chunk `c` (chunk j of the row, slot `cs` of the A tile) to the accumulators.
template <typename T, int BITS, int MR>
__device__ __forceinline__ void nb_dot(const NbGemv &p, const float *sA, int n0, int j, int cs,
                                       const NbChunk &c, float (&acc)[NB_CPW][MR]) {
  constexpr int WE = Codes<BITS>::WE;
  constexpr int E = 4 * WE;
  constexpr int P = E + 4;
  const T *S = (const T *)p.scales;
  // Words of a block segment: a segment shares one scale and zero point.
  const int wpb = min(4, (1 << p.block_log2) / WE);
  float part[NB_CPW][MR];
  float zb[NB_CPW], sc[NB_CPW];
#pragma unroll
  for (int wd = 0; wd < 4; ++wd) {
    if (wd % wpb == 0) {
      const int blk = (j * E + wd * WE) >> p.block_log2;
#pragma unroll
      for (int col = 0; col < NB_CPW; ++col) {
        if (wd == 0) {
          zb[col] = c.zb[col];
          sc[col] = c.s[col];
        } else {
          const int n = min(n0 + col, p.n - 1);
          zb[col] = zero_bias<BITS>(p, n, blk);
          sc[col] = n0 + col < p.n ? to_f(S[(i64)n * p.kb + blk]) : 0.f;
        }
#pragma unroll
        for (int m = 0; m < MR; ++m) part[col][m] = 0.f;
      }
    }
    float a[MR][WE];
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      const float4 *src = reinterpret_cast<const float4 *>(sA + (m * p.tile_chunks + cs) * P + wd * WE);
#pragma unroll
      for (int v = 0; v < WE / 4; ++v) {
        const float4 x = src[v];
        a[m][4 * v] = x.x;
        a[m][4 * v + 1] = x.y;
        a[m][4 * v + 2] = x.z;
        a[m][4 * v + 3] = x.w;
      }
    }
#pragma unroll
    for (int col = 0; col < NB_CPW; ++col) {
      const u32 word = wd == 0 ? c.w[col].x : wd == 1 ? c.w[col].y : wd == 2 ? c.w[col].z : c.w[col].w;
      float f[WE];
      Codes<BITS>::unpack(word, f);
#pragma unroll
      for (int e = 0; e < WE; ++e) {
        const float d = f[e] - zb[col];
#pragma unroll
        for (int m = 0; m < MR; ++m) part[col][m] = fmaf(d, a[m][e], part[col][m]);
      }
    }
    if (wd % wpb == wpb - 1) {
#pragma unroll
      for (int col = 0; col < NB_CPW; ++col)
#pragma unroll
        for (int m = 0; m < MR; ++m) acc[col][m] = fmaf(sc[col], part[col][m], acc[col][m]);
    }
  }
}

template <typename T, int BITS, int MR> __device__ void nbits_gemv(const NbGemv &p) {
  constexpr int WE = Codes<BITS>::WE; // codes per 32-bit word
  constexpr int E = 4 * WE;           // codes per 16-byte chunk
  constexpr int P = E + 4;            // padded floats per chunk in shared memory
  extern __shared__ float4 smem4[];
  float *sA = reinterpret_cast<float *>(smem4);
  __shared__ float red[NB_THREADS / 32][NB_CPW * MR];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wpc = p.wpc, L = 32 * wpc;
  const int gl = (warp % wpc) * 32 + lane; // lane within the column group
  const int gpb = 8 / wpc;                 // column groups per block and step
  const int groups = (p.n + NB_CPW - 1) / NB_CPW;
  const int gstride = gridDim.y * gpb;
  // With one A tile the block walks several column groups (A staged once); otherwise the
  // grid covers every group (the host sizes it so).
  const bool one_tile = p.tile_chunks >= p.chunks;
  const int steps = one_tile ? (groups - (int)blockIdx.y * gpb + gstride - 1) / gstride : 1;
  const int m0 = blockIdx.x * MR;
  const T *A = (const T *)p.a;

  float acc[NB_CPW][MR];
#pragma unroll
  for (int c = 0; c < NB_CPW; ++c)
#pragma unroll
    for (int m = 0; m < MR; ++m) acc[c][m] = 0.f;

  int group = blockIdx.y * gpb + warp / wpc;
  for (int t0 = 0; t0 < p.chunks; t0 += p.tile_chunks) {
    const int tc = min(p.tile_chunks, p.chunks - t0);
    // The first chunk's loads go out before A is staged.
    NbChunk cur, nxt;
    nb_load<T, BITS>(p, group * NB_CPW, t0 + gl, gl < tc && group < groups, cur);
    __syncthreads();
    const int te = tc * E;
    for (int i = tid; i < MR * te; i += NB_THREADS) {
      const int m = i / te, r = i - m * te;
      const int k = t0 * E + r;
      float v = 0.f;
      if (m0 + m < p.m && k < p.k) v = to_f(A[(i64)(m0 + m) * p.a_rs + (i64)k * p.a_ks]);
      sA[(m * p.tile_chunks + r / E) * P + (r % E)] = v;
    }
    __syncthreads();
    for (int step = 0; step < steps; ++step) {
      const int g = group + step * gstride;
      const bool live = g < groups;
      for (int c = gl; c < tc; c += L) {
        // The next chunk of this group, or the first of the next group.
        if (c + L < tc) {
          nb_load<T, BITS>(p, g * NB_CPW, t0 + c + L, live, nxt);
        } else if (one_tile && step + 1 < steps) {
          nb_load<T, BITS>(p, (g + gstride) * NB_CPW, t0 + gl, gl < tc && g + gstride < groups, nxt);
        }
        if (live) nb_dot<T, BITS, MR>(p, sA, g * NB_CPW, t0 + c, c, cur, acc);
        cur = nxt;
      }
      const bool last = !one_tile ? t0 + p.tile_chunks >= p.chunks : true;
      if (!last) continue;
      // Reduce over the group's lanes: shuffles within each warp, then shared memory.
#pragma unroll
      for (int col = 0; col < NB_CPW; ++col)
#pragma unroll
        for (int m = 0; m < MR; ++m) {
          float v = acc[col][m];
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
          acc[col][m] = 0.f;
          if (lane == 0) red[warp][col * MR + m] = v;
        }
      __syncthreads();
      if (live && warp % wpc == 0 && lane < NB_CPW * MR) {
        const int col = lane / MR, m = lane % MR;
        float v = 0.f;
        for (int q = 0; q < wpc; ++q) v += red[warp + q][lane];
        const int n = g * NB_CPW + col;
        if (n < p.n && m0 + m < p.m) {
          if (p.bias != nullptr) v += to_f(((const T *)p.bias)[n]);
          ((T *)p.y)[(i64)(m0 + m) * p.y_rs + n] = convert<T>(v);
        }
      }
      __syncthreads();
    }
  }
}

#define NB_GEMV(T, TN, BITS, MR)                                                              \
  extern "C" __global__ void __launch_bounds__(NB_THREADS, NB_MIN_BLOCKS(MR))                 \
      nbits_gemv_##TN##_b##BITS##_m##MR(NbGemv p) {                                           \
    nbits_gemv<T, BITS, MR>(p);                                                               \
  }
#define NB_GEMV_ALL(T, TN)                                                                    \
  NB_GEMV(T, TN, 2, 1)                                                                        \
  NB_GEMV(T, TN, 2, 2)                                                                        \
  NB_GEMV(T, TN, 2, 4)                                                                        \
  NB_GEMV(T, TN, 4, 1)                                                                        \
  NB_GEMV(T, TN, 4, 2)                                                                        \
  NB_GEMV(T, TN, 4, 4)                                                                        \
  NB_GEMV(T, TN, 8, 1)                                                                        \
  NB_GEMV(T, TN, 8, 2)                                                                        \
  NB_GEMV(T, TN, 8, 4)

NB_GEMV_ALL(float, f32)
NB_GEMV_ALL(f16, f16)
NB_GEMV_ALL(bf16, bf16)

// ---- GatherBlockQuantized ----

struct GbqParams {
  const u8 *data;
  const void *idx;
  const void *scales;
  const u8 *zp;
  void *y;
  u32 *err;
  i64 n;     // output elements
  i64 n_idx; // index count
  i64 inner; // product of the data dims after the gather axis
  i64 dims[MAX_RANK];   // logical data shape
  i64 sstr[MAX_RANK];   // scale strides per data axis (0: broadcast)
  i32 rank, gather, quant, block_log2;
  i32 kind, bits, s_last, zrow; // kind: 0 int4, 1 uint4, 2 uint8 codes of `bits`
  i32 id, _pad;
};

__device__ __forceinline__ int gbq_code(const u8 *bytes, i64 i, int kind, int bits) {
  if (kind == 2) {
    if (bits == 8) return bytes[i];
    const int per = 8 / bits;
    return (bytes[i / per] >> ((int)(i % per) * bits)) & ((1 << bits) - 1);
  }
  const int nib = (bytes[i >> 1] >> (4 * (int)(i & 1))) & 0xF;
  return kind == 0 ? ((nib ^ 8) - 8) : nib;
}

template <typename T, typename I> __device__ void gbq(const GbqParams &p) {
  const I *idx = (const I *)p.idx;
  const T *S = (const T *)p.scales;
  T *y = (T *)p.y;
  const i64 dg = p.dims[p.gather];
  GRID_LOOP(i, p.n) {
    const i64 t = i % p.inner;
    const i64 rest = i / p.inner;
    const i64 j = rest % p.n_idx;
    const i64 o = rest / p.n_idx;
    i64 g = (i64)idx[j];
    if (g < 0) g += dg;
    if (g < 0 || g >= dg) {
      y[i] = convert<T>(0.f);
      report_error(p.err, 1u, (u32)p.id);
      continue;
    }
    // Data and scale offsets: axes after the gather axis from t, the gather axis from g,
    // axes before it from o.
    i64 d = 0, s = 0, mul = 1, r = t;
    for (int a = p.rank - 1; a >= 0; --a) {
      i64 c;
      if (a > p.gather) {
        c = r % p.dims[a];
        r /= p.dims[a];
      } else if (a == p.gather) {
        c = g;
        r = o;
      } else {
        c = r % p.dims[a];
        r /= p.dims[a];
      }
      d += c * mul;
      mul *= p.dims[a];
      s += (a == p.quant ? (c >> p.block_log2) : c) * p.sstr[a];
    }
    const int q = gbq_code(p.data, d, p.kind, p.bits);
    float z;
    if (p.zp == nullptr) {
      z = p.kind == 2 ? (float)(1 << (p.bits - 1)) : 0.f;
    } else if (p.kind == 2) {
      const i64 row = s / p.s_last, col = s % p.s_last;
      if (p.bits == 8) {
        z = (float)p.zp[row * p.zrow + col];
      } else {
        const int per = 8 / p.bits;
        z = (float)((p.zp[row * p.zrow + col / per] >> ((int)(col % per) * p.bits)) &
                    ((1 << p.bits) - 1));
      }
    } else {
      z = (float)gbq_code(p.zp, s, p.kind, 4);
    }
    y[i] = convert<T>(((float)q - z) * to_f(S[s]));
  }
}

#define GBQ(T, TN, I, IN)                                                                     \
  extern "C" __global__ void gbq_##TN##_##IN(GbqParams p) { gbq<T, I>(p); }
GBQ(float, f32, int, i32)
GBQ(float, f32, long long, i64)
GBQ(f16, f16, int, i32)
GBQ(f16, f16, long long, i64)
GBQ(bf16, bf16, int, i32)
GBQ(bf16, bf16, long long, i64)

// MatMulNBitsSiluMul outside the tensor-core GEMV: y = silu(g) * u over the two products (of
// n elements each, contiguous), computed in float from T values, SiLU rounded to T first (as
// the unfused graph's QuickGelu output is).
template <typename T>
__device__ __forceinline__ void nbits_silu_mul(const T *g, const T *u, T *y, i64 n) {
  GRID_LOOP(i, n) {
    const float x = to_f(g[i]);
    const float s = to_f(convert<T>(x / (1.f + expf(-x))));
    y[i] = convert<T>(s * to_f(u[i]));
  }
}

#define NB_SILU_MUL(T, TN)                                                                    \
  extern "C" __global__ void nbits_silu_mul_##TN(const T *g, const T *u, T *y, i64 n) {       \
    nbits_silu_mul<T>(g, u, y, n);                                                            \
  }
NB_SILU_MUL(float, f32)
NB_SILU_MUL(f16, f16)
NB_SILU_MUL(bf16, bf16)
