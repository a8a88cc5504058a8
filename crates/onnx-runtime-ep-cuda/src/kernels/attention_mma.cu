// Attention on tensor cores for float16 / bfloat16 (sm_80+): a fused FlashAttention-2 style
// forward kernel on mma.sync.m16n8k16 (float32 accumulation). Prepended by
// attention_common.cuh (ATT_T is f16 or bf16, ATT_ACC float).
//
// attn_mma_<DP>: one block of 4 warps per (query tile of 64 rows, batch * kv head, split);
// each warp owns 16 query rows. Per key tile of BN keys: K and V go to shared memory (rows
// padded by 8 elements so ldmatrix is conflict-free), S = Q K^T comes out of the tensor cores
// in registers, is scaled / soft-capped / masked in float32, the running row max and sum are
// updated, the probabilities are rounded to T and fed straight back as the A operand of
// O += P V (the accumulator fragment of S is the A fragment of P). O stays in float32
// registers; at the end it is normalized, staged through shared memory and stored with
// 16-byte writes where the output allows. With splits > 1, each block covers one chunk of
// the keys and writes float32 partials for attn_combine.
//
// DP is the head size padded to a multiple of 16 (Q/K and V are zero-padded).
// Variant define ATT_MMA_LIST: X(DP, BN) entries to instantiate.

#define MMA_NT 128
#define MMA_BM 64

__device__ __forceinline__ u32 smem_addr(const void *p) {
  return (u32)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ldsm_x4(u32 &r0, u32 &r1, u32 &r2, u32 &r3, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_t(u32 &r0, u32 &r1, u32 &r2, u32 &r3, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(p)));
}

// d += a * b for one 16x8x16 tile.
__device__ __forceinline__ void mma16816(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                         u32 b1) {
  if constexpr (same_type<T, f16>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Two floats as a T pair in one register (lo in the low half).
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if constexpr (same_type<T, f16>::value) {
    __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&r, &h, 4);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &h, 4);
  }
  return r;
}

// 16-byte asynchronous copies global -> shared (sm_80+), committed and awaited in groups.
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Loads `nrows` rows (row r's pointer from `row_of(r)`) of up to DP features into shared
// memory rows of stride LD, zero-filling missing rows and features beyond `width`. With
// ASYNC, whole 16-byte chunks of unbiased vector-safe rows go by cp.async (the caller
// commits and waits); everything else is stored directly.
template <int DP, int LD, bool ASYNC, typename RowOf>
__device__ __forceinline__ void load_tile(T *sm, int nrows, int width, RowOf row_of) {
  constexpr int VEC = 8;
  constexpr int CPR = DP / VEC;
  for (int idx = threadIdx.x; idx < nrows * CPR; idx += MMA_NT) {
    const int r = idx / CPR, c0 = (idx - r * CPR) * VEC;
    const AttnSrc *src = nullptr;
    const T *bias = nullptr;
    const T *row = row_of(r, src, bias);
    float v[VEC];
    if (row == nullptr) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] = 0.f;
    } else if (bias == nullptr && src->vec && c0 + VEC <= width) {
      if constexpr (ASYNC) {
        cp_async16(sm + r * LD + c0, row + c0);
      } else {
        *reinterpret_cast<uint4 *>(sm + r * LD + c0) = *reinterpret_cast<const uint4 *>(row + c0);
      }
      continue;
    } else {
      load_chunk<float, VEC>(*src, row, bias, c0, width, v);
    }
    T tmp[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) tmp[e] = Narrow<T>::from(v[e]);
    *reinterpret_cast<uint4 *>(sm + r * LD + c0) = *reinterpret_cast<const uint4 *>(&tmp[0]);
  }
}

template <int DP, int BN> __device__ __forceinline__ void attn_mma(const AttnParams &p) {
  constexpr int BM = MMA_BM;
  constexpr int LD = DP + 8;
  constexpr int NT = BN / 8;  // n-tiles of S per warp
  constexpr int CT = DP / 8;  // n-tiles of O per warp
  constexpr int KQ = DP / 16; // k-steps of Q K^T
  constexpr int KP = BN / 16; // k-steps of P V
  extern __shared__ __align__(16) unsigned char att_smem[];
  T *sQ = reinterpret_cast<T *>(att_smem);
  // Two stages of K and V: the next tile loads while this one is computed.
  T *sKV = sQ + BM * LD;
  __shared__ RowInfo rows[BM];
  __shared__ int range[2];

  const int bi = blockIdx.y / p.hkv, kh = blockIdx.y % p.hkv;
  setup_rows<BM>(p, bi, kh, rows, range);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, q4 = lane & 3;

  load_tile<DP, LD, false>(sQ, BM, p.d, [&](int r, const AttnSrc *&src, const T *&bias) -> const T * {
    if (!rows[r].valid) return nullptr;
    src = &p.q;
    bias = p.q.bias != nullptr ? (const T *)p.q.bias + (i64)rows[r].h * p.q.bias_h : nullptr;
    return (const T *)p.q.ptr + rows[r].q_off;
  });

  const int ra = warp * 16 + g, rb = ra + 8;
  const RowInfo ia = rows[ra], ib = rows[rb];

  float o[CT][4];
#pragma unroll
  for (int c = 0; c < CT; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[c][e] = 0.f;
  // An attention sink joins the first split's softmax as one extra logit (value zero).
  const bool sink_a = blockIdx.z == 0 && ia.sink != neg_inf<float>();
  const bool sink_b = blockIdx.z == 0 && ib.sink != neg_inf<float>();
  float ma = sink_a ? ia.sink : neg_inf<float>(), mb = sink_b ? ib.sink : neg_inf<float>();
  float la = (sink_a && q4 == 0) ? 1.f : 0.f, lb = (sink_b && q4 == 0) ? 1.f : 0.f;
  const float scale = (float)p.scale;
  const float L2E = 1.4426950408889634f;

  int begin, end;
  split_range(p, range[0], range[1], BN, begin, end);
  auto load_kv = [&](int n0, int stage) {
    T *sK = sKV + stage * 2 * BN * LD;
    T *sV = sK + BN * LD;
    load_tile<DP, LD, true>(sK, BN, p.d, [&](int r, const AttnSrc *&src, const T *&bias) -> const T * {
      const int j = n0 + r;
      if (j >= p.t) return nullptr;
      return kv_row(p.k, p.pk, p.past, bi, kh, j, src, bias);
    });
    load_tile<DP, LD, true>(sV, BN, p.dv, [&](int r, const AttnSrc *&src, const T *&bias) -> const T * {
      const int j = n0 + r;
      if (j >= p.t) return nullptr;
      return kv_row(p.v, p.pv, p.past, bi, kh, j, src, bias);
    });
  };
  if (begin < end) load_kv(begin, 0);
  cp_async_commit();
  int stage = 0;
  for (int n0 = begin; n0 < end; n0 += BN, stage ^= 1) {
    // Prefetch the next tile into the other stage (free: the barrier at the end of the last
    // iteration saw every warp done with it), then wait for this tile's copies.
    if (n0 + BN < end) load_kv(n0 + BN, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T *sK = sKV + stage * 2 * BN * LD;
    const T *sV = sK + BN * LD;

    float s[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KQ; ++kk) {
      u32 a0, a1, a2, a3;
      ldsm_x4(a0, a1, a2, a3, sQ + (warp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        u32 b0, b1, b2, b3;
        ldsm_x4(b0, b1, b2, b3,
                sK + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 +
                    ((lane >> 3) & 1) * 8);
        mma16816(s[2 * np], a0, a1, a2, a3, b0, b1);
        mma16816(s[2 * np + 1], a0, a1, a2, a3, b2, b3);
      }
    }

    float mxa = neg_inf<float>(), mxb = neg_inf<float>();
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int j = n0 + n * 8 + q4 * 2;
      s[n][0] = finish_score<float>(p, ia, j, s[n][0] * scale);
      s[n][1] = finish_score<float>(p, ia, j + 1, s[n][1] * scale);
      s[n][2] = finish_score<float>(p, ib, j, s[n][2] * scale);
      s[n][3] = finish_score<float>(p, ib, j + 1, s[n][3] * scale);
      mxa = fmaxf(mxa, fmaxf(s[n][0], s[n][1]));
      mxb = fmaxf(mxb, fmaxf(s[n][2], s[n][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, off));
      mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, off));
    }
    const float na = fmaxf(ma, mxa), nb = fmaxf(mb, mxb);
    const float refa = na == neg_inf<float>() ? 0.f : na;
    const float refb = nb == neg_inf<float>() ? 0.f : nb;
    const float alpha_a = exp2f((ma - refa) * L2E), alpha_b = exp2f((mb - refb) * L2E);
    ma = na;
    mb = nb;
    const float oa = -refa * L2E, ob = -refb * L2E;
    float suma = 0.f, sumb = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      s[n][0] = exp2f(fmaf(s[n][0], L2E, oa));
      s[n][1] = exp2f(fmaf(s[n][1], L2E, oa));
      s[n][2] = exp2f(fmaf(s[n][2], L2E, ob));
      s[n][3] = exp2f(fmaf(s[n][3], L2E, ob));
      suma += s[n][0] + s[n][1];
      sumb += s[n][2] + s[n][3];
    }
    la = la * alpha_a + suma;
    lb = lb * alpha_b + sumb;
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      o[c][0] *= alpha_a;
      o[c][1] *= alpha_a;
      o[c][2] *= alpha_b;
      o[c][3] *= alpha_b;
    }

#pragma unroll
    for (int kk = 0; kk < KP; ++kk) {
      const u32 a0 = pack2(s[2 * kk][0], s[2 * kk][1]);
      const u32 a1 = pack2(s[2 * kk][2], s[2 * kk][3]);
      const u32 a2 = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      const u32 a3 = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int cp = 0; cp < CT / 2; ++cp) {
        u32 b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3, sV + (kk * 16 + (lane & 15)) * LD + cp * 16 + (lane >> 4) * 8);
        mma16816(o[2 * cp], a0, a1, a2, a3, b0, b1);
        mma16816(o[2 * cp + 1], a0, a1, a2, a3, b2, b3);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    la += __shfl_xor_sync(0xffffffffu, la, off);
    lb += __shfl_xor_sync(0xffffffffu, lb, off);
  }

  if (p.splits > 1) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const RowInfo &ri = half ? ib : ia;
      if (!ri.valid) continue;
      float *po = part_o(p, blockIdx.z, ri.gidx);
#pragma unroll
      for (int c = 0; c < CT; ++c) {
        const int col = c * 8 + q4 * 2;
        if (col < p.dv) po[col] = o[c][half * 2];
        if (col + 1 < p.dv) po[col + 1] = o[c][half * 2 + 1];
      }
      if (q4 == 0) {
        float *ml = part_ml(p, blockIdx.z, ri.gidx);
        ml[0] = half ? mb : ma;
        ml[1] = half ? lb : la;
      }
    }
    return;
  }

  // Normalize and stage the rows in sQ (once every thread is done with it).
  __syncthreads();
  const float inva = la > 0.f ? 1.f / la : 0.f, invb = lb > 0.f ? 1.f / lb : 0.f;
#pragma unroll
  for (int c = 0; c < CT; ++c) {
    const int col = c * 8 + q4 * 2;
    *reinterpret_cast<u32 *>(sQ + ra * LD + col) = pack2(o[c][0] * inva, o[c][1] * inva);
    *reinterpret_cast<u32 *>(sQ + rb * LD + col) = pack2(o[c][2] * invb, o[c][3] * invb);
  }
  __syncthreads();
  constexpr int CPR = DP / 8;
  for (int idx = tid; idx < BM * CPR; idx += MMA_NT) {
    const int r = idx / CPR, c0 = (idx - r * CPR) * 8;
    if (!rows[r].valid || c0 >= p.dv) continue;
    T *orow = (T *)p.out + rows[r].o_off;
    const T *srow = sQ + r * LD;
    if (p.vec_out && c0 + 8 <= p.dv) {
      *reinterpret_cast<uint4 *>(orow + c0) = *reinterpret_cast<const uint4 *>(srow + c0);
    } else {
      for (int e = 0; e < 8 && c0 + e < p.dv; ++e) orow[(i64)(c0 + e) * p.oc] = srow[c0 + e];
    }
  }
}

#define X(DP, BN)                                                                            \
  extern "C" __global__ void __launch_bounds__(MMA_NT) attn_mma_##DP(AttnParams p) {         \
    attn_mma<DP, BN>(p);                                                                     \
  }
ATT_MMA_LIST
#undef X
