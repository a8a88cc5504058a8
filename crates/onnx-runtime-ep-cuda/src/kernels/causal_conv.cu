// CausalConvWithState (opset 27): depthwise causal 1-D convolution over
// concat(past_state or zeros, x) along the last axis, with optional bias and fused SiLU.
//
// One launch covers both outputs: indices [0, ny) are output elements y[b, c, t], indices
// [ny, n) are present_state elements present[b, c, j], the last k - 1 positions of the
// concatenation. The walk runs time fastest, then channels, so a warp reads and writes
// consecutive positions of a row and, in decode (length 1), consecutive channels: both
// layouts coalesce. Position p of the concatenation is past[p] for p < k - 1 (zero without a
// past_state) and x[p - (k - 1)] after. Every tensor is read through element strides; half
// types accumulate in float32.

struct CausalConvParams {
  const void *x;
  const void *w;
  const void *bias;
  const void *past;
  void *y;
  void *present;
  i64 xb, xc, xl; // input strides: batch, channel, position
  i64 wc, wk;     // weight strides: channel, tap
  i64 bc;         // bias stride
  i64 pb, pc, pk; // past_state strides
  i64 yb, yc, yl; // output strides
  i64 sb, sc, sk; // present_state strides
  i64 c, l, k;    // channels, length, kernel size
  i64 ny;         // output elements: batch * c * l
  i64 n;          // ny + batch * c * (k - 1)
  i32 silu;
  i32 _pad;
};

// Position p of concat(past or zeros, x) in row (b, c).
template <typename T>
__device__ __forceinline__ float cc_at(const CausalConvParams &p, const T *__restrict__ x,
                                       const T *__restrict__ past, i64 b, i64 c, i64 pos) {
  const i64 km1 = p.k - 1;
  if (pos >= km1) return (float)widen(x[b * p.xb + c * p.xc + (pos - km1) * p.xl]);
  return past != nullptr ? (float)widen(past[b * p.pb + c * p.pc + pos * p.pk]) : 0.f;
}

template <typename T> __device__ __forceinline__ void causal_conv(const CausalConvParams &p) {
  const T *__restrict__ x = (const T *)p.x;
  const T *__restrict__ w = (const T *)p.w;
  const T *__restrict__ bias = (const T *)p.bias;
  const T *__restrict__ past = (const T *)p.past;
  T *__restrict__ y = (T *)p.y;
  T *__restrict__ present = (T *)p.present;
  GRID_LOOP(idx, p.n) {
    if (idx < p.ny) {
      const i64 t = idx % p.l;
      const i64 bc = idx / p.l;
      const i64 c = bc % p.c, b = bc / p.c;
      float acc = bias != nullptr ? (float)widen(bias[c * p.bc]) : 0.f;
      const T *wr = w + c * p.wc;
      for (i64 j = 0; j < p.k; ++j) {
        acc = fmaf((float)widen(wr[j * p.wk]), cc_at(p, x, past, b, c, t + j), acc);
      }
      if (p.silu) acc = acc / (1.f + expf(-acc));
      y[b * p.yb + c * p.yc + t * p.yl] = Narrow<T>::from(acc);
    } else if (present != nullptr) {
      const i64 i = idx - p.ny;
      const i64 km1 = p.k - 1;
      const i64 j = i % km1;
      const i64 bc = i / km1;
      const i64 c = bc % p.c, b = bc / p.c;
      present[b * p.sb + c * p.sc + j * p.sk] = Narrow<T>::from(cc_at(p, x, past, b, c, p.l + j));
    }
  }
}

extern "C" __global__ void causal_conv_f32(CausalConvParams p) { causal_conv<float>(p); }
extern "C" __global__ void causal_conv_f16(CausalConvParams p) { causal_conv<f16>(p); }
extern "C" __global__ void causal_conv_bf16(CausalConvParams p) { causal_conv<bf16>(p); }
