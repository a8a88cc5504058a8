// Rotary position embeddings (ONNX RotaryEmbedding 23 and com.microsoft RotaryEmbedding):
// y = x with the first `rot` features of every head rotated pairwise by the cos/sin rows of
// its position; features beyond `rot` are copied. Pairs are (2i, 2i+1) when interleaved,
// else (i, i + rot/2). One thread per output element; x and y are read and written in
// (batch, seq, head, feature) order through element strides, so 3-D and 4-D layouts and
// strided views take the same path. Half types compute in float, double in double.
//
// Positions: pos_mode 0 uses cos/sin rows per (batch, seq) (offsets cb, cs), 1 reads
// position_ids[b, s], 2 uses position_ids[0] + s (com.microsoft's single offset), 3 (Group
// QueryAttention) past_b + s with past_b = 0 on the first prompt, else seqlens_k[b] + 1 - S
// (at least 0), 4 position_ids[b, s] clamped at 0. A position outside [0, rows) reports
// device error 1 and copies x.

struct RotaryParams {
  const void *x;
  void *y;
  const void *cos;
  const void *sin;
  const void *pos;
  i64 xb, xs, xh, xd;
  i64 yb, ys, yh, yd;
  i64 cb, cs, cp, cc; // cos: batch, seq, position, feature strides
  i64 nb, ns, np, nc; // sin
  i64 pb, ps;         // position_ids strides
  i64 n;              // elements: b * s * h * d
  u32 *err;
  i32 b, s, h, d;
  i32 rot, interleaved, pos_mode, rows;
  i32 pos_code, id;
  const void *seqlens;
  i32 seqlens_code, first_prompt;
};

// Feature c of the row xr (feature stride xd) at (batch bi, sequence si), rotated.
template <typename T, typename A>
__device__ __forceinline__ T rotary_at(const RotaryParams &p, const T *xr, i64 xd, int bi, int si,
                                      int c) {
  if (c >= p.rot) return xr[(i64)c * xd];
  const T *cosv = (const T *)p.cos;
  const T *sinv = (const T *)p.sin;
  const int half = p.rot / 2;
  int i, a, b;
  bool first;
  if (p.interleaved) {
    i = c >> 1;
    a = 2 * i;
    b = a + 1;
    first = (c & 1) == 0;
  } else {
    first = c < half;
    i = first ? c : c - half;
    a = i;
    b = i + half;
  }
  i64 co, so;
  if (p.pos_mode == 0) {
    co = (i64)bi * p.cb + (i64)si * p.cs + (i64)i * p.cc;
    so = (i64)bi * p.nb + (i64)si * p.ns + (i64)i * p.nc;
  } else {
    i64 pos;
    if (p.pos_mode == 1 || p.pos_mode == 4) {
      pos = load_as_i64(p.pos, (i64)bi * p.pb + (i64)si * p.ps, p.pos_code);
      if (p.pos_mode == 4 && pos < 0) pos = 0;
    } else if (p.pos_mode == 2) {
      pos = load_as_i64(p.pos, 0, p.pos_code) + si;
    } else {
      i64 total = load_as_i64(p.seqlens, bi, p.seqlens_code) + 1;
      if (total < 0) total = 0;
      pos = ((p.first_prompt || total < p.s) ? 0 : total - p.s) + si;
    }
    if (pos < 0 || pos >= p.rows) {
      report_error(p.err, 1u, (u32)p.id);
      return xr[(i64)c * xd];
    }
    co = pos * p.cp + (i64)i * p.cc;
    so = pos * p.np + (i64)i * p.nc;
  }
  const A cv = (A)widen(cosv[co]), sv = (A)widen(sinv[so]);
  const A x1 = (A)widen(xr[(i64)a * xd]), x2 = (A)widen(xr[(i64)b * xd]);
  const A v = first ? cv * x1 - sv * x2 : sv * x1 + cv * x2;
  return Narrow<T>::from(v);
}

// Output element idx of the (batch, seq, head, feature) index space.
template <typename T, typename A>
__device__ __forceinline__ void rotary_elem(const RotaryParams &p, i64 idx) {
  const int c = (int)(idx % p.d);
  i64 rest = idx / p.d;
  const int hh = (int)(rest % p.h);
  rest /= p.h;
  const int si = (int)(rest % p.s);
  const int bi = (int)(rest / p.s);
  const T *xr = (const T *)p.x + (i64)bi * p.xb + (i64)si * p.xs + (i64)hh * p.xh;
  T *out = (T *)p.y + (i64)bi * p.yb + (i64)si * p.ys + (i64)hh * p.yh + (i64)c * p.yd;
  *out = rotary_at<T, A>(p, xr, p.xd, bi, si, c);
}

template <typename T, typename A> __device__ __forceinline__ void rotary(const RotaryParams &p) {
  GRID_LOOP(idx, p.n) { rotary_elem<T, A>(p, idx); }
}

// GroupQueryAttention's preparation in one launch: the rotated queries (rot.n elements, 0
// without rotary) and both present caches [b, kv_heads, tp, width]. Per batch a present cache
// holds the first min(past_b, pbuf, tp) rows of its past buffer, the s new rows at past_b
// (new keys rotated when rotate_k), zeros elsewhere; past_b = 0 on the first prompt, else
// seqlens_k[b] + 1 - s (at least 0). The new keys rotate at the queries' positions.
struct CacheView {
  const void *ptr; // null: no past buffer
  i64 sb, sh, ss, sc;
};

struct GqaPrepParams {
  RotaryParams rot;
  CacheView past_k, past_v, cur_k, cur_v;
  void *out_k, *out_v;
  i64 ob, oh, os, oc; // present strides (both caches)
  i64 npres;          // b * kv_heads * tp * width (in_place: b * kv_heads * s * width)
  i32 kv_heads, pbuf, tp, width;
  // in_place: the present caches are the past buffers (same memory and strides), so only the
  // s new rows at past_b are written; the kept rows are already there.
  i32 rotate_k, in_place;
};

template <typename T, typename A> __device__ __forceinline__ void gqa_prep(const GqaPrepParams &p) {
  const RotaryParams &r = p.rot;
  const i64 total_n = r.n + 2 * p.npres;
  GRID_LOOP(idx, total_n) {
    if (idx < r.n) {
      rotary_elem<T, A>(r, idx);
      continue;
    }
    i64 e = idx - r.n;
    const bool is_v = e >= p.npres;
    if (is_v) e -= p.npres;
    const int c = (int)(e % p.width);
    i64 rest = e / p.width;
    const int rows = p.in_place ? r.s : p.tp;
    int j = (int)(rest % rows);
    rest /= rows;
    const int h = (int)(rest % p.kv_heads);
    const int bi = (int)(rest / p.kv_heads);
    i64 total = load_as_i64(r.seqlens, bi, r.seqlens_code) + 1;
    if (total < 0) total = 0;
    const i64 past_b = (r.first_prompt || total < r.s) ? 0 : total - r.s;
    if (p.in_place) {
      // New row j of this batch: it goes to row past_b + j (dropped past the buffer).
      const i64 jj = past_b + j;
      if (jj >= p.tp) continue;
      j = (int)jj;
    }
    i64 keep = past_b < p.pbuf ? past_b : p.pbuf;
    if (keep > p.tp) keep = p.tp;
    const CacheView &past = is_v ? p.past_v : p.past_k;
    const CacheView &cur = is_v ? p.cur_v : p.cur_k;
    T v = Narrow<T>::from((A)0);
    if (j < keep) {
      const T *row = (const T *)past.ptr + (i64)bi * past.sb + (i64)h * past.sh + (i64)j * past.ss;
      v = row[(i64)c * past.sc];
    } else if (j >= past_b && j - past_b < r.s) {
      const int si = (int)(j - past_b);
      const T *row = (const T *)cur.ptr + (i64)bi * cur.sb + (i64)h * cur.sh + (i64)si * cur.ss;
      v = (!is_v && p.rotate_k) ? rotary_at<T, A>(r, row, cur.sc, bi, si, c) : row[(i64)c * cur.sc];
    }
    T *out = (T *)(is_v ? p.out_v : p.out_k);
    out[(i64)bi * p.ob + (i64)h * p.oh + (i64)j * p.os + (i64)c * p.oc] = v;
  }
}

extern "C" __global__ void rotary_f32(RotaryParams p) { rotary<float, float>(p); }
extern "C" __global__ void rotary_f64(RotaryParams p) { rotary<double, double>(p); }
extern "C" __global__ void rotary_f16(RotaryParams p) { rotary<f16, float>(p); }
extern "C" __global__ void rotary_bf16(RotaryParams p) { rotary<bf16, float>(p); }
// Launched as programmatic dependents (Function::overlapped): pdl_begin comes first.
#define GQA_PREP(TN, T, A)                                                                   \
  extern "C" __global__ void gqa_prep_##TN(GqaPrepParams p) {                                \
    pdl_begin();                                                                             \
    gqa_prep<T, A>(p);                                                                       \
  }
GQA_PREP(f32, float, float)
GQA_PREP(f64, double, double)
GQA_PREP(f16, f16, float)
GQA_PREP(bf16, bf16, float)
#undef GQA_PREP
