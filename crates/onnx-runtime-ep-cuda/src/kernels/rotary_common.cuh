// Rotary position embeddings, shared by rotary.cu and the attention module (whose one-pass
// decode kernel rotates GroupQueryAttention's queries and new keys itself): the parameters
// and the rotation of one feature. See rotary.cu for the position modes.

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
