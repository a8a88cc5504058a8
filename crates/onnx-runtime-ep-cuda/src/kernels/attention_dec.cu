// attn_dec1_<DP>: the one-pass decode kernel (appended to attention_fwd.cu's module). A block of
// DEC1_NT threads per (batch * kv head, split of the keys) takes DEC1_NT keys at a time, one
// key per thread: the thread loads its key's K and V rows with 16-byte loads (the first
// pass's before the row setup, so they overlap the seqlens read), scores its key against
// every query row of the group (Q in shared memory), and the block takes each row's max and
// sum with warp shuffles and one exchange through shared memory. V goes to shared memory
// (16-byte chunks swizzled by key, so neither the stores nor P V's row reads conflict), the
// probabilities beside it, and P V runs as in attn_dec: a thread owns two features of
// DEC_ROWS / RG rows. A decode step over a few hundred keys is then one pass with a single
// round trip to memory, where attn_dec walks 64-key chunks with a latency each. With splits,
// the partials and the merge are attn_dec's (split_finish).
//
// Needs: K and V rows of 16-byte loads (AttnSrc.vec, no bias), head sizes a multiple of
// 16 / sizeof(T), DP * sizeof(T) <= 256 bytes, and the dynamic shared memory of
// dec1_smem_bytes (sm_80 and newer).

#define DEC1_NT 256

template <int DP> struct Dec1 {
  static constexpr int VEC = 16 / (int)sizeof(T);
  static constexpr int NV = DP / VEC; // 16-byte chunks of a row
  static constexpr int NPAIR = DP / 2;
  static constexpr int RG = DEC1_NT / NPAIR; // row groups of P V
  static constexpr int RPT = DEC_ROWS / RG;  // rows per thread in P V
};

// The 16-byte chunk of key row `key` where chunk c of its NV chunks is stored.
template <int NV> __device__ __forceinline__ int dec1_chunk(int key, int c) {
  return c ^ (key & ((NV < 8 ? NV : 8) - 1));
}

// Loads K and V rows of key j (zeros past s1 or past the head sizes).
template <int DP>
__device__ __forceinline__ void dec1_load(const AttnParams &p, int bi, int kh, int j, int s1,
                                          uint4 (&kr)[Dec1<DP>::NV], uint4 (&vr)[Dec1<DP>::NV]) {
  constexpr int VEC = Dec1<DP>::VEC, NV = Dec1<DP>::NV;
  const AttnSrc *s;
  const T *b;
  const T *krow = j < s1 ? kv_row(p.k, p.pk, p.past, bi, kh, j, s, b) : nullptr;
  const T *vrow = j < s1 ? kv_row(p.v, p.pv, p.past, bi, kh, j, s, b) : nullptr;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    kr[c] = krow != nullptr && c * VEC < p.d ? __ldg(reinterpret_cast<const uint4 *>(krow) + c)
                                            : make_uint4(0, 0, 0, 0);
    vr[c] = vrow != nullptr && c * VEC < p.dv ? __ldg(reinterpret_cast<const uint4 *>(vrow) + c)
                                             : make_uint4(0, 0, 0, 0);
  }
}

template <int DP> __device__ __forceinline__ void attn_dec1(const AttnParams &p) {
  using D = Dec1<DP>;
  constexpr int VEC = D::VEC, NV = D::NV, NPAIR = D::NPAIR, RG = D::RG, RPT = D::RPT;
  constexpr int NW = DEC1_NT / 32;
  static_assert(NV * VEC == DP && NV <= 16 && RG * NPAIR == DEC1_NT, "dec1 shape");
  extern __shared__ __align__(16) unsigned char dec1_smem[];
  uint4 *sV = reinterpret_cast<uint4 *>(dec1_smem);               // [DEC1_NT][NV]
  ACC *sP = reinterpret_cast<ACC *>(sV + DEC1_NT * NV);           // [DEC_ROWS][DEC1_NT]
  __shared__ __align__(16) ACC sQ[DEC_ROWS][DP];
  __shared__ ACC red[NW][DEC_ROWS];
  __shared__ ACC sM[DEC_ROWS], sL[DEC_ROWS], sA[DEC_ROWS];
  __shared__ RowInfo rows[DEC_ROWS];
  __shared__ int range[2];
  const int bi = blockIdx.y / p.hkv, kh = blockIdx.y % p.hkv;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int s0 = 0, s1 = p.t;
  if (p.splits > 1) {
    s0 = blockIdx.z * p.chunk;
    s1 = min(s0 + p.chunk, p.t);
  }
  // The first pass's rows go out before the row setup (every key j < t can be read).
  uint4 kr[NV], vr[NV];
  dec1_load<DP>(p, bi, kh, s0 + tid, s1, kr, vr);
  setup_rows<DEC_ROWS>(p, bi, kh, rows, range);
  const int nrows = min(p.group * p.sq, DEC_ROWS);
  for (int idx = tid; idx < DEC_ROWS * NV; idx += DEC1_NT) {
    const int r = idx / NV, c0 = (idx - r * NV) * VEC;
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
  if (tid < DEC_ROWS) {
    // An attention sink joins the first split's softmax as one extra logit (value zero).
    const bool sink = tid < nrows && blockIdx.z == 0 && rows[tid].sink != neg_inf<float>();
    sM[tid] = sink ? (ACC)rows[tid].sink : neg_inf<ACC>();
    sL[tid] = sink ? (ACC)1 : (ACC)0;
  }
  const int lo = max(s0, range[0]), hi = min(s1 - 1, range[1]);
  const int pair = tid % NPAIR, rg = tid / NPAIR, f0 = 2 * pair;
  ACC o[RPT][2];
#pragma unroll
  for (int i = 0; i < RPT; ++i) o[i][0] = o[i][1] = (ACC)0;
  const ACC scale = (ACC)p.scale;
  for (int k0 = s0; k0 < s1; k0 += DEC1_NT) {
    if (k0 + DEC1_NT <= lo || k0 > hi) continue; // uniform: no key of this pass is seen
    if (k0 != s0) dec1_load<DP>(p, bi, kh, k0 + tid, s1, kr, vr);
    const int j = k0 + tid;
    __syncthreads(); // the previous pass's P V is done with sV and sP (and sQ is written)
#pragma unroll
    for (int c = 0; c < NV; ++c) sV[tid * NV + dec1_chunk<NV>(tid, c)] = vr[c];
    ACC s[DEC_ROWS];
#pragma unroll
    for (int r = 0; r < DEC_ROWS; ++r) s[r] = (ACC)0;
#pragma unroll
    for (int c = 0; c < NV; ++c) {
      T e8[VEC];
      memcpy(&e8[0], &kr[c], 16);
      ACC kf[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) kf[e] = (ACC)widen(e8[e]);
#pragma unroll
      for (int r = 0; r < DEC_ROWS; ++r) {
        if (r >= nrows) break; // uniform
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[r] += sQ[r][c * VEC + e] * kf[e];
      }
    }
    // Scores, then each row's block max (warps, then across warps).
#pragma unroll
    for (int r = 0; r < DEC_ROWS; ++r) {
      if (r >= nrows) break;
      s[r] = j < s1 ? finish_score<ACC>(p, rows[r], j, s[r] * scale) : neg_inf<ACC>();
      ACC mx = s[r];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        const ACC other = __shfl_xor_sync(0xffffffffu, mx, off);
        mx = other > mx ? other : mx;
      }
      if (lane == 0) red[warp][r] = mx;
    }
    __syncthreads();
    if (tid < nrows) {
      const ACC mold = sM[tid];
      ACC mx = mold;
#pragma unroll
      for (int w = 0; w < NW; ++w) mx = red[w][tid] > mx ? red[w][tid] : mx;
      sA[tid] = mold == neg_inf<ACC>() ? (ACC)0 : att_exp(mold - mx);
      sM[tid] = mx;
    }
    __syncthreads();
    // Probabilities into sP; each row's sum of this pass (warps, then thread r below).
#pragma unroll
    for (int r = 0; r < DEC_ROWS; ++r) {
      if (r >= nrows) break;
      const ACC m = sM[r];
      const ACC e = s[r] == neg_inf<ACC>() ? (ACC)0 : att_exp(s[r] - m);
      sP[r * DEC1_NT + tid] = e;
      ACC sum = e;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      if (lane == 0) red[warp][r] = sum;
    }
    __syncthreads();
    if (tid < nrows) {
      ACC sum = (ACC)0;
#pragma unroll
      for (int w = 0; w < NW; ++w) sum += red[w][tid];
      sL[tid] = sL[tid] * sA[tid] + sum;
    }
    // P V over this pass's keys (rows past nrows compute values nobody writes).
    const int nk = min(DEC1_NT, s1 - k0);
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const int r = rg + RG * i;
      const ACC a = r < nrows ? sA[r] : (ACC)0;
      o[i][0] *= a;
      o[i][1] *= a;
    }
    const int pc = f0 / VEC, pe = f0 - pc * VEC; // the pair's chunk and place in it
#pragma unroll 4
    for (int jj = 0; jj < nk; ++jj) {
      const T *vrow = reinterpret_cast<const T *>(sV + jj * NV + dec1_chunk<NV>(jj, pc));
      const ACC va = (ACC)widen(vrow[pe]), vb = (ACC)widen(vrow[pe + 1]);
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        const int r = rg + RG * i;
        const ACC pr = r < nrows ? sP[r * DEC1_NT + jj] : (ACC)0;
        o[i][0] += pr * va;
        o[i][1] += pr * vb;
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

// Head sizes whose rows are more than 256 bytes (float32 128, double 64) are not built.
template <int DP> __device__ __forceinline__ void attn_dec1_entry(const AttnParams &p) {
  if constexpr (Dec1<DP>::NV <= 16) attn_dec1<DP>(p);
}

#define DEC1(DP)                                                                             \
  extern "C" __global__ void __launch_bounds__(DEC1_NT) attn_dec1_##DP(AttnParams p) {       \
    pdl_begin();                                                                             \
    attn_dec1_entry<DP>(p);                                                                  \
  }
DEC1(32)
DEC1(64)
DEC1(128)
#undef DEC1
