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

template <typename T, typename A> __device__ __forceinline__ void rotary(const RotaryParams &p) {
  const T *x = (const T *)p.x;
  T *y = (T *)p.y;
  const T *cosv = (const T *)p.cos;
  const T *sinv = (const T *)p.sin;
  const int half = p.rot / 2;
  GRID_LOOP(idx, p.n) {
    const int c = (int)(idx % p.d);
    i64 rest = idx / p.d;
    const int hh = (int)(rest % p.h);
    rest /= p.h;
    const int si = (int)(rest % p.s);
    const int bi = (int)(rest / p.s);
    const T *xr = x + (i64)bi * p.xb + (i64)si * p.xs + (i64)hh * p.xh;
    T *out = y + (i64)bi * p.yb + (i64)si * p.ys + (i64)hh * p.yh + (i64)c * p.yd;
    if (c >= p.rot) {
      *out = xr[(i64)c * p.xd];
      continue;
    }
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
        *out = xr[(i64)c * p.xd];
        continue;
      }
      co = pos * p.cp + (i64)i * p.cc;
      so = pos * p.np + (i64)i * p.nc;
    }
    const A cv = (A)widen(cosv[co]), sv = (A)widen(sinv[so]);
    const A x1 = (A)widen(xr[(i64)a * p.xd]), x2 = (A)widen(xr[(i64)b * p.xd]);
    const A v = first ? cv * x1 - sv * x2 : sv * x1 + cv * x2;
    *out = Narrow<T>::from(v);
  }
}

extern "C" __global__ void rotary_f32(RotaryParams p) { rotary<float, float>(p); }
extern "C" __global__ void rotary_f64(RotaryParams p) { rotary<double, double>(p); }
extern "C" __global__ void rotary_f16(RotaryParams p) { rotary<f16, float>(p); }
extern "C" __global__ void rotary_bf16(RotaryParams p) { rotary<bf16, float>(p); }
