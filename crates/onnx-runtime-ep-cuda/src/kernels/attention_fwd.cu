// Attention on CUDA cores (float, double, and float16 / bfloat16 where tensor cores are not
// available), plus the pieces every attention path shares: the split-K combine, the
// score output (qk_matmul_output / MultiHeadAttention's 4th output), the past/present concat
// and the com.microsoft Attention input projection. Prepended by attention_common.cuh.
//
// attn_simt_<DP>: a fused, tiled, online-softmax (FlashAttention-2 style) kernel. One block
// of 128 threads per (query tile of BM rows, batch * kv head, split); it loops over key tiles
// of BN: K and V tiles go to shared memory, each thread computes a (BM/16) x (BN/8) block of
// S = Q K^T * scale, masks it, updates the running max / sum of its rows and accumulates O
// (BM/16 rows x DP/8 columns) in registers. S never reaches global memory. DP is the padded
// head size (Q/K and V are zero-padded to it); the Q.K loop runs over the real head size.
// With splits > 1 each block covers one chunk of the keys and writes unnormalized partials
// (O, max, sum) that attn_combine merges.
//
// Variant define ATT_SIMT_LIST: X(DP, BM, BN) entries to instantiate.

#define ATT_NT 128

template <int DP, int BM, int BN> __device__ __forceinline__ void attn_simt(const AttnParams &p) {
  constexpr int RM = BM / 16, RN = BN / 8, CN = DP / 8;
  constexpr int LQ = DP + 1, LK = DP + 1, LV = DP, LP = BN + 1;
  extern __shared__ __align__(16) unsigned char att_smem[];
  ACC *sQ = reinterpret_cast<ACC *>(att_smem);
  ACC *sK = sQ + BM * LQ;
  ACC *sV = sK + BN * LK;
  ACC *sP = sV + BN * LV;
  __shared__ RowInfo rows[BM];
  __shared__ int range[2];

  const int bi = blockIdx.y / p.hkv, kh = blockIdx.y % p.hkv;
  setup_rows<BM>(p, bi, kh, rows, range);
  const int tid = threadIdx.x, ty = tid >> 3, tx = tid & 7;

  for (int idx = tid; idx < BM * DP; idx += ATT_NT) {
    const int r = idx / DP, c = idx - r * DP;
    ACC v = (ACC)0;
    if (rows[r].valid && c < p.d) {
      const T *qrow = (const T *)p.q.ptr + rows[r].q_off;
      const T *qb = p.q.bias != nullptr ? (const T *)p.q.bias + (i64)rows[r].h * p.q.bias_h
                                        : nullptr;
      v = load_elem<ACC>(p.q, qrow, qb, c);
    }
    sQ[r * LQ + c] = v;
  }

  RowInfo ri[RM];
#pragma unroll
  for (int a = 0; a < RM; ++a) ri[a] = rows[ty + 16 * a];

  ACC o[RM][CN];
  ACC m[RM], l[RM];
#pragma unroll
  for (int a = 0; a < RM; ++a) {
    // An attention sink joins the first split's softmax as one extra logit (value zero).
    const bool sink = blockIdx.z == 0 && ri[a].sink != neg_inf<float>();
    m[a] = sink ? (ACC)ri[a].sink : neg_inf<ACC>();
    l[a] = (sink && tx == 0) ? (ACC)1 : (ACC)0;
#pragma unroll
    for (int k = 0; k < CN; ++k) o[a][k] = (ACC)0;
  }
  const ACC scale = (ACC)p.scale;
  int begin, end;
  split_range(p, range[0], range[1], BN, begin, end);

  for (int n0 = begin; n0 < end; n0 += BN) {
    __syncthreads();
    for (int idx = tid; idx < BN * DP; idx += ATT_NT) {
      const int r = idx / DP, c = idx - r * DP, j = n0 + r;
      ACC kv = (ACC)0, vv = (ACC)0;
      if (j < p.t) {
        const AttnSrc *s;
        const T *b;
        if (c < p.d) {
          const T *row = kv_row(p.k, p.pk, p.past, bi, kh, j, s, b);
          kv = load_elem<ACC>(*s, row, b, c);
        }
        if (c < p.dv) {
          const T *row = kv_row(p.v, p.pv, p.past, bi, kh, j, s, b);
          vv = load_elem<ACC>(*s, row, b, c);
        }
      }
      sK[r * LK + c] = kv;
      sV[r * LV + c] = vv;
    }
    __syncthreads();

    ACC s[RM][RN];
#pragma unroll
    for (int a = 0; a < RM; ++a)
#pragma unroll
      for (int b = 0; b < RN; ++b) s[a][b] = (ACC)0;
#pragma unroll 4
    for (int c = 0; c < p.d; ++c) {
      ACC qv[RM], kv[RN];
#pragma unroll
      for (int a = 0; a < RM; ++a) qv[a] = sQ[(ty + 16 * a) * LQ + c];
#pragma unroll
      for (int b = 0; b < RN; ++b) kv[b] = sK[(tx + 8 * b) * LK + c];
#pragma unroll
      for (int a = 0; a < RM; ++a)
#pragma unroll
        for (int b = 0; b < RN; ++b) s[a][b] += qv[a] * kv[b];
    }

#pragma unroll
    for (int a = 0; a < RM; ++a) {
      ACC mx = neg_inf<ACC>();
#pragma unroll
      for (int b = 0; b < RN; ++b) {
        s[a][b] = finish_score<ACC>(p, ri[a], n0 + tx + 8 * b, s[a][b] * scale);
        mx = s[a][b] > mx ? s[a][b] : mx;
      }
#pragma unroll
      for (int off = 1; off < 8; off <<= 1) {
        const ACC other = __shfl_xor_sync(0xffffffffu, mx, off);
        mx = other > mx ? other : mx;
      }
      const ACC mnew = mx > m[a] ? mx : m[a];
      const ACC mref = mnew == neg_inf<ACC>() ? (ACC)0 : mnew;
      const ACC alpha = att_exp(m[a] - mref);
      m[a] = mnew;
      ACC sum = (ACC)0;
#pragma unroll
      for (int b = 0; b < RN; ++b) {
        const ACC e = att_exp(s[a][b] - mref);
        sum += e;
        sP[(ty + 16 * a) * LP + tx + 8 * b] = e;
      }
      l[a] = l[a] * alpha + sum;
#pragma unroll
      for (int k = 0; k < CN; ++k) o[a][k] *= alpha;
    }
    __syncthreads();

#pragma unroll 4
    for (int j = 0; j < BN; ++j) {
      ACC pv[RM];
#pragma unroll
      for (int a = 0; a < RM; ++a) pv[a] = sP[(ty + 16 * a) * LP + j];
#pragma unroll
      for (int k = 0; k < CN; ++k) {
        const ACC vv = sV[j * LV + tx + 8 * k];
#pragma unroll
        for (int a = 0; a < RM; ++a) o[a][k] += pv[a] * vv;
      }
    }
  }

#pragma unroll
  for (int a = 0; a < RM; ++a) {
#pragma unroll
    for (int off = 1; off < 8; off <<= 1) l[a] += __shfl_xor_sync(0xffffffffu, l[a], off);
    if (!ri[a].valid) continue;
    if (p.splits > 1) {
      ACC *po = part_o(p, blockIdx.z, ri[a].gidx);
#pragma unroll
      for (int k = 0; k < CN; ++k) {
        const int c = tx + 8 * k;
        if (c < p.dv) po[c] = o[a][k];
      }
      if (tx == 0) {
        ACC *ml = part_ml(p, blockIdx.z, ri[a].gidx);
        ml[0] = m[a];
        ml[1] = l[a];
      }
    } else {
      const ACC inv = l[a] > (ACC)0 ? (ACC)1 / l[a] : (ACC)0;
      T *orow = (T *)p.out + ri[a].o_off;
#pragma unroll
      for (int k = 0; k < CN; ++k) {
        const int c = tx + 8 * k;
        if (c < p.dv) orow[(i64)c * p.oc] = Narrow<T>::from(o[a][k] * inv);
      }
    }
  }
}

#define X(DP, BM, BN)                                                                        \
  extern "C" __global__ void __launch_bounds__(ATT_NT) attn_simt_##DP(AttnParams p) {        \
    attn_simt<DP, BM, BN>(p);                                                                \
  }
ATT_SIMT_LIST
#undef X

// attn_dec_<DP>: the decode kernel, for blocks of at most DEC_ROWS query rows (a decode step's
// GQA group, sq * group rows). One block of 128 threads per (batch * kv head, split of the
// keys); it walks its split DEC_KEYS keys at a time, and each chunk costs about one memory
// latency: the chunk's V rows are loaded (16 bytes a thread, into registers) before the
// scores are computed and staged in shared memory after them. Each key row of K is read once
// with 16-byte loads by LPK = DP / VEC lanes (a warp scores 32 / LPK keys at a time against
// every row of Q, kept in shared memory); the scores go through attn_simt's pipeline
// (finish_score); the online softmax runs in shared memory, one warp per row; P V reads the
// staged V: a thread owns two features of DEC_ROWS / RG rows. Splits write the partials
// attn_combine merges.
#define DEC_ROWS 16
#define DEC_KEYS 64

// Keys of V staged in shared memory at once (16 KiB of ACC), at most a chunk.
template <int DP> struct DecStage {
  static constexpr int VK0 = 16384 / (DP * (int)sizeof(ACC));
  static constexpr int VK = VK0 < DEC_KEYS ? VK0 : DEC_KEYS;
};

// Two features of a staged V row, read with one shared-memory load.
struct alignas(2 * sizeof(ACC)) DecPair {
  ACC a, b;
};

// Whether feature group c0 of a V row takes the raw 16-byte prefetch (else load_chunk).
__device__ __forceinline__ bool dec_fast(const AttnSrc &s, const T *bias, int c0, int vec,
                                         int width) {
  return s.vec && bias == nullptr && c0 + vec <= width;
}

template <int DP> __device__ __forceinline__ void attn_dec(const AttnParams &p) {
  constexpr int VEC = 16 / (int)sizeof(T);
  constexpr int LPK = DP / VEC;
  if constexpr (LPK <= 32 && LPK * VEC == DP) {
    constexpr int KPW = 32 / LPK, NW = ATT_NT / 32;
    constexpr int VK = DecStage<DP>::VK;
    constexpr int ML = (VK * LPK + ATT_NT - 1) / ATT_NT; // V loads per thread per stage
    constexpr int NPAIR = DP / 2;
    constexpr int RG = NPAIR >= ATT_NT ? 1 : ATT_NT / NPAIR; // row groups of P V
    constexpr int RPT = DEC_ROWS / RG;                       // rows per thread
    __shared__ ACC sQ[DEC_ROWS][DP];
    __shared__ ACC sS[DEC_ROWS][DEC_KEYS];
    __shared__ __align__(16) ACC sV[VK][DP];
    __shared__ ACC sM[DEC_ROWS], sL[DEC_ROWS], sA[DEC_ROWS];
    __shared__ RowInfo rows[DEC_ROWS];
    __shared__ int range[2];
    const int bi = blockIdx.y / p.hkv, kh = blockIdx.y % p.hkv;
    setup_rows<DEC_ROWS>(p, bi, kh, rows, range);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int nrows = min(p.group * p.sq, DEC_ROWS);
    for (int idx = tid; idx < DEC_ROWS * LPK; idx += ATT_NT) {
      const int r = idx / LPK, c0 = (idx - r * LPK) * VEC;
      ACC v[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] = (ACC)0;
      if (rows[r].valid) {
        const T *qrow = (const T *)p.q.ptr + rows[r].q_off;
        const T *qb = p.q.bias != nullptr ? (const T *)p.q.bias + (i64)rows[r].h * p.q.bias_h
                                          : nullptr;
        load_chunk<ACC, VEC>(p.q, qrow, qb, c0, p.d, v);
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) sQ[r][c0 + e] = v[e];
    }
    // Rows past nrows take part in P V with zero weights (no predicates in its loop).
    for (int idx = tid; idx < DEC_ROWS * DEC_KEYS; idx += ATT_NT) {
      const int r = idx / DEC_KEYS;
      if (r >= nrows) sS[r][idx - r * DEC_KEYS] = (ACC)0;
    }
    if (tid < DEC_ROWS) {
      // An attention sink joins the first split's softmax as one extra logit (value zero).
      const bool sink = tid < nrows && blockIdx.z == 0 && rows[tid].sink != neg_inf<float>();
      sM[tid] = sink ? (ACC)rows[tid].sink : neg_inf<ACC>();
      sL[tid] = sink ? (ACC)1 : (ACC)0;
      sA[tid] = (ACC)0;
    }
    int begin, end;
    split_range(p, range[0], range[1], 1, begin, end);
    const int pair = tid % NPAIR, rg = tid / NPAIR, f0 = 2 * pair;
    ACC o[RPT][2];
#pragma unroll
    for (int i = 0; i < RPT; ++i) o[i][0] = o[i][1] = (ACC)0;
    const ACC scale = (ACC)p.scale;
    const int grp = lane / LPK, c0 = (lane % LPK) * VEC;
    // Loads (raw, where dec_fast) the V rows k0 .. k0 + nv of a stage into `raw`.
    auto v_load = [&](int k0, int nv, uint4 (&raw)[ML]) {
#pragma unroll
      for (int l = 0; l < ML; ++l) {
        const int idx = tid + l * ATT_NT;
        if (idx < nv * LPK) {
          const int key = idx / LPK, vc = (idx - key * LPK) * VEC;
          const AttnSrc *s;
          const T *b;
          const T *row = kv_row(p.v, p.pv, p.past, bi, kh, k0 + key, s, b);
          if (dec_fast(*s, b, vc, VEC, p.dv)) raw[l] = *reinterpret_cast<const uint4 *>(row + vc);
        }
      }
    };
    // Stores a stage into sV as ACC (the other feature groups load here).
    auto v_store = [&](int k0, int nv, const uint4 (&raw)[ML]) {
#pragma unroll
      for (int l = 0; l < ML; ++l) {
        const int idx = tid + l * ATT_NT;
        if (idx < nv * LPK) {
          const int key = idx / LPK, vc = (idx - key * LPK) * VEC;
          const AttnSrc *s;
          const T *b;
          const T *row = kv_row(p.v, p.pv, p.past, bi, kh, k0 + key, s, b);
          ACC v[VEC];
          if (dec_fast(*s, b, vc, VEC, p.dv)) {
            T tmp[VEC];
            memcpy(&tmp[0], &raw[l], 16);
#pragma unroll
            for (int e = 0; e < VEC; ++e) v[e] = (ACC)widen(tmp[e]);
          } else {
            load_chunk<ACC, VEC>(*s, row, b, vc, p.dv, v);
          }
#pragma unroll
          for (int e = 0; e < VEC; ++e) sV[key][vc + e] = v[e];
        }
      }
    };
    for (int k0 = begin; k0 < end; k0 += DEC_KEYS) {
      const int k1 = min(k0 + DEC_KEYS, end), n = k1 - k0;
      uint4 raw[ML];
      v_load(k0, min(n, VK), raw);
      __syncthreads();
      for (int j0 = k0 + warp * KPW; j0 < k1; j0 += 2 * NW * KPW) {
        ACC kv[2][VEC];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int j = j0 + u * NW * KPW + grp;
#pragma unroll
          for (int e = 0; e < VEC; ++e) kv[u][e] = (ACC)0;
          if (j < k1) {
            const AttnSrc *s;
            const T *b;
            const T *row = kv_row(p.k, p.pk, p.past, bi, kh, j, s, b);
            load_chunk<ACC, VEC>(*s, row, b, c0, p.d, kv[u]);
          }
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int jw = j0 + u * NW * KPW, j = jw + grp;
          if (jw >= k1) break; // uniform across the warp
          for (int r = 0; r < nrows; ++r) {
            ACC acc = (ACC)0;
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc += sQ[r][c0 + e] * kv[u][e];
#pragma unroll
            for (int off = LPK / 2; off > 0; off >>= 1)
              acc += __shfl_xor_sync(0xffffffffu, acc, off);
            if (lane % LPK == 0 && j < k1)
              sS[r][j - k0] = finish_score<ACC>(p, rows[r], j, acc * scale);
          }
        }
      }
      v_store(k0, min(n, VK), raw);
      __syncthreads();
      for (int r = warp; r < nrows; r += NW) {
        const ACC mold = sM[r];
        ACC mx = mold;
        for (int j = lane; j < n; j += 32) mx = sS[r][j] > mx ? sS[r][j] : mx;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
          const ACC other = __shfl_xor_sync(0xffffffffu, mx, off);
          mx = other > mx ? other : mx;
        }
        const ACC mref = mx == neg_inf<ACC>() ? (ACC)0 : mx;
        ACC sum = (ACC)0;
        for (int j = lane; j < n; j += 32) {
          const ACC e = att_exp(sS[r][j] - mref);
          sS[r][j] = e;
          sum += e;
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        __syncwarp();
        if (lane == 0) {
          const ACC alpha = mold == neg_inf<ACC>() ? (ACC)0 : att_exp(mold - mref);
          sA[r] = alpha;
          sM[r] = mx;
          sL[r] = sL[r] * alpha + sum;
        }
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        const ACC a = sA[rg + RG * i];
        o[i][0] *= a;
        o[i][1] *= a;
      }
      for (int v0 = 0; v0 < n; v0 += VK) {
        const int nv = min(VK, n - v0);
        if (v0 > 0) {
          // Chunks longer than a stage (large heads): the next stage, without prefetch.
          __syncthreads();
          v_load(k0 + v0, nv, raw);
          v_store(k0 + v0, nv, raw);
          __syncthreads();
        }
#pragma unroll 4
        for (int jj = 0; jj < nv; ++jj) {
          const DecPair vp = *reinterpret_cast<const DecPair *>(&sV[jj][f0]);
#pragma unroll
          for (int i = 0; i < RPT; ++i) {
            const ACC pr = sS[rg + RG * i][v0 + jj];
            o[i][0] += pr * vp.a;
            o[i][1] += pr * vp.b;
          }
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const int r = rg + RG * i;
      if (r >= nrows || !rows[r].valid) continue;
      if (p.splits > 1) {
        ACC *po = part_o(p, blockIdx.z, rows[r].gidx);
        if (f0 < p.dv) po[f0] = o[i][0];
        if (f0 + 1 < p.dv) po[f0 + 1] = o[i][1];
        if (pair == 0) {
          ACC *ml = part_ml(p, blockIdx.z, rows[r].gidx);
          ml[0] = sM[r];
          ml[1] = sL[r];
        }
      } else {
        const ACC inv = sL[r] > (ACC)0 ? (ACC)1 / sL[r] : (ACC)0;
        T *orow = (T *)p.out + rows[r].o_off;
        if (f0 < p.dv) orow[(i64)f0 * p.oc] = Narrow<T>::from(o[i][0] * inv);
        if (f0 + 1 < p.dv) orow[(i64)(f0 + 1) * p.oc] = Narrow<T>::from(o[i][1] * inv);
      }
    }
    if (p.splits > 1 && p.count != nullptr) split_finish(p, rows, nrows);
  }
}

#define DEC(DP)                                                                              \
  extern "C" __global__ void __launch_bounds__(ATT_NT) attn_dec_##DP(AttnParams p) {         \
    pdl_begin();                                                                             \
    attn_dec<DP>(p);                                                                         \
  }
DEC(32)
DEC(64)
DEC(128)
DEC(256)
#undef DEC

// Merges the split partials: one warp per output row (b, h, i), four rows per block.
extern "C" __global__ void __launch_bounds__(128) attn_combine(AttnParams p) {
  __shared__ ACC wts[4][64];
  const int warp = threadIdx.x >> 5;
  const i64 rows = (i64)p.b * p.hq * p.sq;
  const i64 row = (i64)blockIdx.x * 4 + warp;
  if (row >= rows) return;
  combine_row(p, row, wts[warp]);
}

// The scores output [b, hq, sq, t]: mode 0 the scaled (and soft-capped) Q K^T, 1 after the
// masks and biases, 2 the softmax probabilities. One warp per (b, h, i) row.
struct ScoresOut {
  void *out;
  i64 sb, sh, ss, st;
  i32 mode, _pad;
};

extern "C" __global__ void __launch_bounds__(128) attn_scores(AttnParams p, ScoresOut so) {
  const int lane = threadIdx.x & 31;
  const i64 nrows = (i64)p.b * p.hq * p.sq;
  const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
  const ACC scale = (ACC)p.scale;
  for (i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < nrows;
       row += warps) {
    const int i = (int)(row % p.sq);
    const i64 bh = row / p.sq;
    const int h = (int)(bh % p.hq), bi = (int)(bh / p.hq);
    const int kh = h / p.group;
    const RowInfo r = row_info(p, bi, kh, (h - kh * p.group) * p.sq + i);
    const T *qrow = (const T *)p.q.ptr + r.q_off;
    const T *qb =
        p.q.bias != nullptr ? (const T *)p.q.bias + (i64)h * p.q.bias_h : nullptr;
    T *orow = (T *)so.out + (i64)bi * so.sb + (i64)h * so.sh + (i64)i * so.ss;
    ACC mx = neg_inf<ACC>(), sum = (ACC)0;
    for (int pass = 0; pass < (so.mode == 2 ? 2 : 1); ++pass) {
      for (int j = lane; j < p.t; j += 32) {
        const AttnSrc *src;
        const T *kb;
        const T *krow = kv_row(p.k, p.pk, p.past, bi, kh, j, src, kb);
        ACC s = (ACC)0;
        for (int c = 0; c < p.d; ++c)
          s += load_elem<ACC>(p.q, qrow, qb, c) * load_elem<ACC>(*src, krow, kb, c);
        s *= scale;
        if (so.mode == 0) {
          if (p.softcap > 0.0) {
            const ACC cap = (ACC)p.softcap;
            s = cap * att_tanh(s / cap);
          }
          orow[(i64)j * so.st] = Narrow<T>::from(s);
          continue;
        }
        s = finish_score<ACC>(p, r, j, s);
        if (so.mode == 1) {
          orow[(i64)j * so.st] = Narrow<T>::from(s);
        } else if (pass == 0) {
          if (s > mx) {
            sum = sum * (mx == neg_inf<ACC>() ? (ACC)0 : att_exp(mx - s)) + (ACC)1;
            mx = s;
          } else if (s != neg_inf<ACC>()) {
            sum += att_exp(s - mx);
          }
        } else {
          const ACC pr = (mx == neg_inf<ACC>() || sum == (ACC)0) ? (ACC)0 : att_exp(s - mx) / sum;
          orow[(i64)j * so.st] = Narrow<T>::from(pr);
        }
      }
      if (so.mode == 2 && pass == 0) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
          const ACC om = __shfl_xor_sync(0xffffffffu, mx, off);
          const ACC os = __shfl_xor_sync(0xffffffffu, sum, off);
          const ACC nm = om > mx ? om : mx;
          if (nm != neg_inf<ACC>()) {
            sum = (mx == neg_inf<ACC>() ? (ACC)0 : sum * att_exp(mx - nm)) +
                  (om == neg_inf<ACC>() ? (ACC)0 : os * att_exp(om - nm));
          }
          mx = nm;
        }
      }
    }
  }
}

// present = concat(past, new) along the sequence: [b, heads, npast + snew, width].
struct ConcatParams {
  AttnSrc past, cur;
  void *out;
  i64 ob, oh, os, oc;
  i64 n; // elements (or 16-byte chunks when vec)
  i32 heads, npast, t, width;
  i32 vec, _pad;
};

extern "C" __global__ void attn_concat(ConcatParams p) {
  constexpr int VEC = 16 / (int)sizeof(T);
  GRID_LOOP(idx, p.n) {
    const int per = p.vec ? p.width / VEC : p.width;
    const int c = (int)(idx % per);
    i64 rest = idx / per;
    const int j = (int)(rest % p.t);
    rest /= p.t;
    const int h = (int)(rest % p.heads);
    const int bi = (int)(rest / p.heads);
    const AttnSrc *src;
    const T *bias;
    const T *row = kv_row(p.cur, p.past, p.npast, bi, h, j, src, bias);
    T *orow = (T *)p.out + (i64)bi * p.ob + (i64)h * p.oh + (i64)j * p.os;
    if (p.vec) {
      const int c0 = c * VEC;
      uint4 w = *reinterpret_cast<const uint4 *>(row + c0);
      if (bias != nullptr) {
        T tmp[VEC];
        memcpy(&tmp[0], &w, 16);
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          tmp[e] = Narrow<T>::from((ACC)widen(tmp[e]) + (ACC)widen(bias[c0 + e]));
        memcpy(&w, &tmp[0], 16);
      }
      *reinterpret_cast<uint4 *>(orow + c0) = w;
    } else if (bias != nullptr) {
      orow[(i64)c * p.oc] = Narrow<T>::from(load_elem<ACC>(*src, row, bias, c));
    } else {
      orow[(i64)c * p.oc] = row[(i64)c * src->sc];
    }
  }
}

// The com.microsoft Attention input projection: y[m, n] = x[m, :] . w[:, n] + bias[n], with
// x a [batch, seq, din] view (row m = (m / seq, m % seq)) and y contiguous [M, N]. 64x64
// tiles, 256 threads with 4x4 outputs each, accumulating in ACC.
struct ProjParams {
  const void *x, *w, *bias;
  void *y;
  i64 xb, xs, xk, wk, wn, bn;
  i32 m, n, k, seq;
};

extern "C" __global__ void __launch_bounds__(256) attn_proj(ProjParams p) {
  constexpr int BK = 16, TM = 64, LD = TM + 4;
  __shared__ ACC sa[BK][LD];
  __shared__ ACC sb[BK][LD];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int m0 = blockIdx.y * TM, n0 = blockIdx.x * TM;
  const T *x = (const T *)p.x;
  const T *w = (const T *)p.w;
  ACC acc[4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) acc[a][b] = (ACC)0;
  for (int k0 = 0; k0 < p.k; k0 += BK) {
    __syncthreads();
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int idx = tid + e * 256;
      // A: 64 rows x 16 k, read along k.
      const int ar = idx / BK, ak = idx % BK;
      const int gm = m0 + ar, gk = k0 + ak;
      ACC av = (ACC)0;
      if (gm < p.m && gk < p.k) {
        const int bi = gm / p.seq, si = gm - bi * p.seq;
        av = (ACC)widen(x[(i64)bi * p.xb + (i64)si * p.xs + (i64)gk * p.xk]);
      }
      sa[ak][ar] = av;
      // B: 16 k x 64 columns, read along n.
      const int bk = idx / TM, bn = idx % TM;
      const int gk2 = k0 + bk, gn = n0 + bn;
      ACC bv = (ACC)0;
      if (gk2 < p.k && gn < p.n) bv = (ACC)widen(w[(i64)gk2 * p.wk + (i64)gn * p.wn]);
      sb[bk][bn] = bv;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      ACC av[4], bv[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) av[a] = sa[kk][ty + 16 * a];
#pragma unroll
      for (int b = 0; b < 4; ++b) bv[b] = sb[kk][tx + 16 * b];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) acc[a][b] += av[a] * bv[b];
    }
  }
  T *y = (T *)p.y;
  const T *bias = (const T *)p.bias;
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int gm = m0 + ty + 16 * a;
    if (gm >= p.m) continue;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int gn = n0 + tx + 16 * b;
      if (gn >= p.n) continue;
      ACC v = acc[a][b];
      if (bias != nullptr) v += (ACC)widen(bias[(i64)gn * p.bn]);
      y[(i64)gm * p.n + gn] = Narrow<T>::from(v);
    }
  }
}
