// Shared pieces of the attention kernels (prepended to attention_fwd.cu and attention_mma.cu):
// the launch parameters (mirrored in src/ops/attention/sdpa.rs), the per-query-row setup, the
// score pipeline (scale, softcap, masks, biases, causal / window / padding ranges) and the
// tile loaders.
//
// Variant defines: ATT_T (T: Q, K, V and the outputs), ATT_ACC (ACC: float, or double for
// double inputs). Every problem is read in BNSH order through element strides, so 3-D
// (B, S, H*D) and 4-D (B, H, S, D) inputs, packed QKV and strided views all take the same path.
//
// Rows: one block works on the query rows of one (batch, kv head): row R stands for query head
// h = kv_head * group + R / sq and query i = R % sq, so the query heads of a GQA group share
// every K/V tile the block loads (and a decode step, sq = 1, still fills a tile with `group`
// rows).

typedef ATT_T T;
typedef ATT_ACC ACC;

// A (batch, head, seq, feature) view with an optional per-feature bias (com.microsoft
// MultiHeadAttention's bias input) added as the elements are read.
struct AttnSrc {
  const void *ptr;
  const void *bias; // bias[h * bias_h + c], or null
  i64 sb, sh, ss, sc;
  i64 bias_h;
  i32 vec; // 16-byte loads are safe: sc == 1, aligned base, row strides and width
  i32 _pad;
};

struct AttnParams {
  AttnSrc q, k, v, pk, pv; // pk / pv: past caches (ptr null: none); rows j < past read them
  void *out;
  i64 ob, oh, os, oc;
  // Additive (or boolean) mask / attention bias over (b, h, i, j).
  const void *mask;
  i64 mb, mh, ms, mt;
  // com.microsoft key padding mask: lengths [b], [b, t] or [b, s, t].
  const void *kpm;
  i64 kb, ks, kt;
  const i64 *nonpad; // per batch valid keys (ONNX Attention 24 nonpad_kv_seqlen), or null
  // GroupQueryAttention: per batch seqlens_k (valid keys - 1, dtype seqlens_code); the
  // queries sit after the first valid - sq keys unless first_prompt.
  const void *seqlens;
  // Attention sinks: one extra logit per query head (dtype sink_code; null with has_sink:
  // smooth softmax, logit 0) that joins the softmax denominator.
  const void *sink;
  void *part;        // split partials (ACC): O [splits][rows][dv], then (m, l) [splits][rows][2]
  u32 *count;        // per (tile, batch x kv head) finished splits (null: attn_combine merges)
  u32 *err;
  double scale, softcap, filter;
  i32 b, hq, hkv, group;
  i32 sq, skv, past, t;
  i32 d, dv, mask_len, mask_kind; // mask_kind: 0 none, 1 additive (dtype mask_code), 2 bool
  i32 mask_code, kpm_kind, kpm_code, causal; // kpm_kind: 0 none, 1 lengths, 2 [b,t], 3 [b,s,t]
  i32 left, right, contrib_causal, splits;   // left/right: -1 unbounded
  i32 chunk, vec_out, id, skip_filter;       // skip_filter: filter-masked keys may be skipped
  i32 plain, seqlens_code;                   // plain: no softcap, mask, key padding or chi
  i32 first_prompt, has_sink, sink_code, _pad;
};

template <typename A> __device__ __forceinline__ A neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ double neg_inf<double>() {
  return __longlong_as_double((long long)0xfff0000000000000ULL);
}

__device__ __forceinline__ float att_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double att_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float att_exp(float x) { return __expf(x); }
__device__ __forceinline__ double att_exp(double x) { return exp(x); }

// The ONNX dtype code of T.
template <typename E> __device__ constexpr int type_code() {
  return same_type<E, float>::value ? 1 : same_type<E, double>::value ? 11
         : same_type<E, f16>::value ? 10 : 16;
}

// Element `off` of a tensor of ONNX dtype `code` as a double (out of line: the rare dtypes).
__device__ __noinline__ double load_generic(const void *p, i64 off, int code) {
  switch (code) {
  case 1: return (double)((const float *)p)[off];
  case 11: return ((const double *)p)[off];
  case 10: return (double)__half2float(((const f16 *)p)[off]);
  case 16: return (double)__bfloat162float(((const bf16 *)p)[off]);
  case 9: return ((const u8 *)p)[off] ? 1.0 : 0.0;
  default: return (double)load_as_i64(p, off, code);
  }
}

// Element `off` of a tensor of ONNX dtype `code` as A (T and int32 inline).
template <typename A> __device__ __forceinline__ A load_as(const void *p, i64 off, int code) {
  if (code == type_code<T>()) return (A)widen(((const T *)p)[off]);
  if (code == 6) return (A)((const int *)p)[off];
  return (A)load_generic(p, off, code);
}

// Element `off` of an integer (or float, truncated) tensor of dtype `code`.
__device__ __forceinline__ i64 load_int(const void *p, i64 off, int code) {
  if (code == 6) return ((const int *)p)[off];
  if (code == 7) return ((const i64 *)p)[off];
  return (i64)load_generic(p, off, code);
}

// What one query row of a block needs.
struct RowInfo {
  i64 q_off, o_off, m_off, k_off;
  i64 gidx;  // ((b * hq + h) * sq + i): the row of the split partials
  int h, i;
  int lo, hi; // keys outside [lo, hi] are hidden (-inf)
  int chi;    // com.microsoft causal: keys beyond get mask_filter_value
  int rhi;    // the last key whose tile this row needs
  int klen;   // key padding lengths (kpm_kind 1)
  int valid;
  float sink; // the head's sink logit (-inf: none)
};

#define ATT_BIG 0x3fffffff

__device__ __forceinline__ RowInfo row_info(const AttnParams &p, int bi, int kh, int R) {
  RowInfo r;
  const int rows = p.group * p.sq;
  r.valid = R < rows;
  const int Rc = r.valid ? R : 0;
  const int hg = Rc / p.sq;
  r.i = Rc - hg * p.sq;
  r.h = kh * p.group + hg;
  r.q_off = (i64)bi * p.q.sb + (i64)r.h * p.q.sh + (i64)r.i * p.q.ss;
  r.o_off = (i64)bi * p.ob + (i64)r.h * p.oh + (i64)r.i * p.os;
  r.m_off = (i64)bi * p.mb + (i64)r.h * p.mh + (i64)r.i * p.ms;
  r.k_off = (i64)bi * p.kb + (i64)r.i * p.ks;
  r.gidx = ((i64)bi * p.hq + r.h) * p.sq + r.i;
  // Absolute position of the query: the keys before its block.
  i64 off = p.past;
  i64 valid_keys = p.t;
  if (p.nonpad != nullptr) {
    const i64 n = p.nonpad[bi];
    off = n - p.sq;
    valid_keys = n < 0 ? 0 : (n > p.t ? p.t : n);
  } else if (p.seqlens != nullptr) {
    i64 total = load_int(p.seqlens, bi, p.seqlens_code) + 1;
    if (total < 0) total = 0;
    off = (p.first_prompt || total < p.sq) ? 0 : total - p.sq;
    valid_keys = total > p.t ? p.t : total;
  }
  const i64 pos = off + r.i;
  i64 hi = valid_keys - 1;
  if (p.causal && pos < hi) hi = pos;
  if (p.right >= 0 && pos + p.right < hi) hi = pos + p.right;
  if (p.mask_kind != 0 && (i64)p.mask_len - 1 < hi) hi = p.mask_len - 1;
  i64 lo = 0;
  if (p.left >= 0 && pos - p.left > lo) lo = pos - p.left;
  if (hi < -1) hi = -1;
  if (lo > (i64)p.t) lo = p.t;
  r.lo = (int)lo;
  r.hi = (int)hi;
  r.chi = p.contrib_causal ? p.past + r.i : ATT_BIG;
  r.rhi = (p.contrib_causal && p.skip_filter && r.chi < r.hi) ? r.chi : r.hi;
  r.klen = ATT_BIG;
  if (p.kpm_kind == 1) {
    const i64 n = load_int(p.kpm, r.k_off, p.kpm_code);
    r.klen = n < 0 ? 0 : (n > ATT_BIG ? ATT_BIG : (int)n);
  }
  r.sink = neg_inf<float>();
  if (p.has_sink) {
    r.sink = p.sink != nullptr ? (float)load_generic(p.sink, r.h, p.sink_code) : 0.f;
  }
  if (!r.valid) {
    r.lo = 0;
    r.hi = -1;
    r.rhi = -1;
  }
  return r;
}

// The score of key j for row r from the scaled dot product s: softcap, then the mask / bias,
// key padding, com.microsoft causal (mask_filter_value), then the -inf ranges.
template <typename A>
__device__ __forceinline__ A finish_score(const AttnParams &p, const RowInfo &r, int j, A s) {
  if (j < r.lo || j > r.hi) return neg_inf<A>();
  if (p.plain) return s;
  if (p.softcap > 0.0) {
    const A c = (A)p.softcap;
    s = c * att_tanh(s / c);
  }
  A add = (A)0;
  if (p.mask_kind == 1) {
    add = load_as<A>(p.mask, r.m_off + (i64)j * p.mt, p.mask_code);
  } else if (p.mask_kind == 2) {
    add = ((const u8 *)p.mask)[r.m_off + (i64)j * p.mt] ? (A)0 : neg_inf<A>();
  }
  if (p.kpm_kind != 0) {
    bool masked;
    if (p.kpm_kind == 1) masked = j >= r.klen;
    else masked = load_int(p.kpm, r.k_off + (i64)j * p.kt, p.kpm_code) == 0;
    if (masked) add += (A)p.filter;
  }
  if (j > r.chi) add = (A)p.filter;
  return s + add;
}

// The blocks' shared row setup: fills `rows` (BM entries) and the block's key range.
template <int BM>
__device__ __forceinline__ void setup_rows(const AttnParams &p, int bi, int kh, RowInfo *rows,
                                           int *range) {
  if (threadIdx.x == 0) {
    range[0] = ATT_BIG;
    range[1] = -1;
  }
  __syncthreads();
  for (int r = threadIdx.x; r < BM; r += blockDim.x) {
    RowInfo info = row_info(p, bi, kh, blockIdx.x * BM + r);
    rows[r] = info;
    if (info.valid && info.lo <= info.rhi) {
      atomicMin(&range[0], info.lo);
      atomicMax(&range[1], info.rhi);
    }
  }
  __syncthreads();
}

// The tile range [begin, end) of split `sp` within the block's key range [lo, hi].
__device__ __forceinline__ void split_range(const AttnParams &p, int lo, int hi, int bn,
                                            int &begin, int &end) {
  int s0 = 0, s1 = p.t;
  if (p.splits > 1) {
    s0 = blockIdx.z * p.chunk;
    s1 = s0 + p.chunk < p.t ? s0 + p.chunk : p.t;
  }
  begin = lo > s0 ? lo : s0;
  end = hi + 1 < s1 ? hi + 1 : s1;
  begin -= begin % bn;
  if (end < begin) end = begin;
}

// Element c of row `row` of `src` (+ bias) as A (any stride; c < width).
template <typename A>
__device__ __forceinline__ A load_elem(const AttnSrc &src, const T *row, const T *bias, int c) {
  A v = (A)widen(row[(i64)c * src.sc]);
  if (bias != nullptr) v += (A)widen(bias[c]);
  return v;
}

// The K (or V) row of key j: the past cache for j < past, else the new keys. Sets `src` to
// the view it reads (its strides and vector flag) and `bias` to the bias row (new keys only).
__device__ __forceinline__ const T *kv_row(const AttnSrc &cur, const AttnSrc &past, int npast,
                                           int bi, int kh, int j, const AttnSrc *&src,
                                           const T *&bias) {
  if (j < npast) {
    src = &past;
    bias = nullptr;
    return (const T *)past.ptr + (i64)bi * past.sb + (i64)kh * past.sh + (i64)j * past.ss;
  }
  src = &cur;
  bias = cur.bias != nullptr ? (const T *)cur.bias + (i64)kh * cur.bias_h : nullptr;
  return (const T *)cur.ptr + (i64)bi * cur.sb + (i64)kh * cur.sh + (i64)(j - npast) * cur.ss;
}

// Loads VEC consecutive features [c0, c0 + VEC) of a row (zero beyond `width`) as A.
template <typename A, int VEC>
__device__ __forceinline__ void load_chunk(const AttnSrc &src, const T *row, const T *bias,
                                           int c0, int width, A (&out)[VEC]) {
  if (c0 >= width) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) out[e] = (A)0;
    return;
  }
  if (src.vec && c0 + VEC <= width) {
    T tmp[VEC];
    uint4 w = *reinterpret_cast<const uint4 *>(row + c0);
    memcpy(&tmp[0], &w, 16);
#pragma unroll
    for (int e = 0; e < VEC; ++e) out[e] = (A)widen(tmp[e]);
    if (bias != nullptr) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) out[e] += (A)widen(bias[c0 + e]);
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    const int c = c0 + e;
    out[e] = c < width ? load_elem<A>(src, row, bias, c) : (A)0;
  }
}

// Writes the split partials of one row: O (unnormalized) and (m, l).
__device__ __forceinline__ ACC *part_o(const AttnParams &p, int split, i64 gidx) {
  const i64 rows = (i64)p.b * p.hq * p.sq;
  return (ACC *)p.part + ((i64)split * rows + gidx) * p.dv;
}
__device__ __forceinline__ ACC *part_ml(const AttnParams &p, int split, i64 gidx) {
  const i64 rows = (i64)p.b * p.hq * p.sq;
  return (ACC *)p.part + (i64)p.splits * rows * p.dv + ((i64)split * rows + gidx) * 2;
}

// Merges the split partials of row `row` ((b * hq + h) * sq + i) into the output: one warp,
// `wts` a warp's 64 scratch weights. Reads go through L2 (__ldcg): other blocks wrote them in
// this launch when a kernel merges its own splits.
__device__ __forceinline__ void combine_row(const AttnParams &p, i64 row, ACC *wts) {
  const int lane = threadIdx.x & 31;
  const int i = (int)(row % p.sq);
  const i64 bh = row / p.sq;
  const int h = (int)(bh % p.hq), bi = (int)(bh / p.hq);
  ACC mx = neg_inf<ACC>();
  for (int s = lane; s < p.splits; s += 32) {
    const ACC ms = __ldcg(part_ml(p, s, row));
    mx = ms > mx ? ms : mx;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const ACC other = __shfl_xor_sync(0xffffffffu, mx, off);
    mx = other > mx ? other : mx;
  }
  ACC total = (ACC)0;
  for (int s = lane; s < p.splits; s += 32) {
    const ACC *ml = part_ml(p, s, row);
    const ACC m0 = __ldcg(ml);
    const ACC w = (mx == neg_inf<ACC>() || m0 == neg_inf<ACC>()) ? (ACC)0 : att_exp(m0 - mx);
    wts[s] = w;
    total += w * __ldcg(ml + 1);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
  __syncwarp();
  const ACC inv = total > (ACC)0 ? (ACC)1 / total : (ACC)0;
  T *orow = (T *)p.out + (i64)bi * p.ob + (i64)h * p.oh + (i64)i * p.os;
  for (int c = lane; c < p.dv; c += 32) {
    ACC acc = (ACC)0;
    for (int s = 0; s < p.splits; ++s) {
      const ACC w = wts[s];
      if (w != (ACC)0) acc += w * __ldcg(part_o(p, s, row) + c);
    }
    orow[(i64)c * p.oc] = Narrow<T>::from(acc * inv);
  }
  __syncwarp();
}

// A split kernel's own merge (p.count set): once a block has written its partials, the last
// block of its (tile, batch x kv head) to finish merges every split of the tile's `nrows`
// rows and sets the counter back to zero for the next launch (or graph replay). Every thread
// of the block calls it.
__device__ __forceinline__ void split_finish(const AttnParams &p, const RowInfo *rows,
                                             int nrows) {
  __shared__ int last;
  __shared__ ACC wts[4][64];
  __threadfence(); // every thread's partials visible device-wide before the count
  __syncthreads();
  if (threadIdx.x == 0) {
    u32 *cnt = p.count + ((i64)blockIdx.y * gridDim.x + blockIdx.x);
    const u32 done = atomicAdd(cnt, 1u) + 1u;
    last = done == (u32)p.splits;
    if (last) *cnt = 0u; // every split has counted: the next launch starts from zero
    __threadfence();
  }
  __syncthreads();
  if (!last) return;
  const int warp = threadIdx.x >> 5, nw = min((int)(blockDim.x >> 5), 4);
  if (warp >= nw) return;
  for (int r = warp; r < nrows; r += nw)
    if (rows[r].valid) combine_row(p, rows[r].gidx, wts[warp]);
}
