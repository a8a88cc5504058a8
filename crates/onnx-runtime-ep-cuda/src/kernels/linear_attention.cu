// LinearAttention (opset 27): the recurrent form, run token by token inside one launch.
//
// One block per (batch, KV head, slice of `cols` value columns). A column m of the state
// S[dk, dv] belongs to `ks` consecutive lanes of a warp (ks a power of two up to 32); lane
// `split` keeps rows split, split + ks, ... (R of them) in registers for the whole time loop,
// so the state never leaves the SM between tokens. Each token:
//   decay   S *= exp(g)                     (per head, or per key row; gated rules)
//   write   u = v                           (linear / gated)
//           u = beta * (v - S^T k)          (delta / gated_delta; S already decayed)
//           S += k u^T
//   read    o_h = scale * q_h^T S           (every query head h sharing this KV head)
// The column sums over rows reduce across the ks lanes with warp shuffles: no shared memory
// and no block barrier. k, v, decay and beta of the next token are loaded while the current
// one computes. Inputs are read through (batch, time, packed channel) element strides, the
// states through 4-D strides; half types compute in float32, the state is float32 throughout
// and past_state / present_state may be any of float, float16 and bfloat16 (ONNX codes).

struct LinAttnParams {
  const void *q;
  const void *k;
  const void *v;
  const void *past;
  const void *decay;
  const void *beta;
  void *y;
  void *present;
  i64 qb, qt, qc;     // query strides: batch, time, packed channel
  i64 kb, kt, kc;     // key
  i64 vb, vt, vc;     // value
  i64 gb, gt, gc;     // decay (channel h for per-head decay, h * dk + i per key)
  i64 eb, et, ec;     // beta (ec = 0 for a (B, T, 1) beta)
  i64 pb, ph, pk, pv; // past_state: batch, head, key row, value column
  i64 ob, ot, oc;     // output
  i64 sb, sh, sk, sv; // present_state
  float scale;
  i32 b, t, hq, hkv, dk, dv;
  i32 ks;           // lanes per value column (power of two, at most 32)
  i32 cols;         // value columns per block
  i32 col_blocks;   // blocks per (batch, KV head)
  i32 decay_mode;   // 0: none, 1: per head, 2: per key row
  i32 has_beta;
  i32 past_code;    // ONNX dtype code of past_state (0 when absent)
  i32 present_code; // ONNX dtype code of present_state (0 when not written)
};

__device__ __forceinline__ float la_load_state(const void *p, i64 off, int code) {
  switch (code) {
  case 10: return __half2float(((const f16 *)p)[off]);
  case 16: return __bfloat162float(((const bf16 *)p)[off]);
  default: return ((const float *)p)[off];
  }
}

__device__ __forceinline__ void la_store_state(void *p, i64 off, int code, float x) {
  switch (code) {
  case 10: ((f16 *)p)[off] = __float2half_rn(x); break;
  case 16: ((bf16 *)p)[off] = __float2bfloat16_rn(x); break;
  default: ((float *)p)[off] = x; break;
  }
}

// The sum of x over the ks lanes of a column (every lane gets it).
__device__ __forceinline__ float la_column_sum(float x, int ks) {
  for (int off = ks >> 1; off > 0; off >>= 1) {
    x += __shfl_xor_sync(0xffffffffu, x, off);
  }
  return x;
}

template <typename T, int R> __device__ __forceinline__ void lin_attn(const LinAttnParams &p) {
  const T *__restrict__ q = (const T *)p.q;
  const T *__restrict__ k = (const T *)p.k;
  const T *__restrict__ v = (const T *)p.v;
  const T *__restrict__ g = (const T *)p.decay;
  const T *__restrict__ be = (const T *)p.beta;
  T *__restrict__ y = (T *)p.y;
  const int ks = p.ks;
  const int split = threadIdx.x & (ks - 1);
  int blk = blockIdx.x;
  const int cb = blk % p.col_blocks;
  blk /= p.col_blocks;
  const int h = blk % p.hkv;
  const int bi = blk / p.hkv;
  const int m = cb * p.cols + (int)(threadIdx.x / ks);
  const bool col_ok = m < p.dv;
  const int group = p.hq / p.hkv;

  bool row_ok[R];
#pragma unroll
  for (int r = 0; r < R; ++r) row_ok[r] = split + r * ks < p.dk;

  float s[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const i64 i = split + r * ks;
    s[r] = (p.past != nullptr && col_ok && row_ok[r])
               ? la_load_state(p.past, bi * p.pb + h * p.ph + i * p.pk + m * p.pv, p.past_code)
               : 0.f;
  }

  // The per-token inputs of token t into (kn, gn, vn, en, bn).
  float kn[R], gn[R], vn = 0.f, en = 1.f, bn = 1.f;
#pragma unroll
  for (int r = 0; r < R; ++r) gn[r] = 1.f;
  auto fetch = [&](int t) {
    const i64 kbase = bi * p.kb + (i64)t * p.kt + (i64)h * p.dk * p.kc;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      kn[r] = row_ok[r] ? (float)widen(k[kbase + (i64)(split + r * ks) * p.kc]) : 0.f;
    }
    vn = col_ok ? (float)widen(v[bi * p.vb + (i64)t * p.vt + ((i64)h * p.dv + m) * p.vc]) : 0.f;
    const i64 gbase = bi * p.gb + (i64)t * p.gt;
    if (p.decay_mode == 1) {
      en = expf((float)widen(g[gbase + (i64)h * p.gc]));
    } else if (p.decay_mode == 2) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        gn[r] = row_ok[r]
                    ? expf((float)widen(g[gbase + ((i64)h * p.dk + split + r * ks) * p.gc]))
                    : 1.f;
      }
    }
    if (p.has_beta) bn = (float)widen(be[bi * p.eb + (i64)t * p.et + (i64)h * p.ec]);
  };

  if (p.t > 0) fetch(0);
  for (int t = 0; t < p.t; ++t) {
    float kk[R], gg[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      kk[r] = kn[r];
      gg[r] = gn[r];
    }
    float u = vn;
    const float e = en, bt = bn;
    if (t + 1 < p.t) fetch(t + 1);

    if (p.decay_mode == 1) {
#pragma unroll
      for (int r = 0; r < R; ++r) s[r] *= e;
    } else if (p.decay_mode == 2) {
#pragma unroll
      for (int r = 0; r < R; ++r) s[r] *= gg[r];
    }
    if (p.has_beta) {
      float part = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) part = fmaf(s[r], kk[r], part);
      u = bt * (u - la_column_sum(part, ks));
    }
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = fmaf(kk[r], u, s[r]);

    const i64 obase = bi * p.ob + (i64)t * p.ot;
    const i64 qbase = bi * p.qb + (i64)t * p.qt;
    for (int j = 0; j < group; ++j) {
      const int hh = h * group + j;
      float part = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float qv =
            row_ok[r] ? (float)widen(q[qbase + ((i64)hh * p.dk + split + r * ks) * p.qc]) : 0.f;
        part = fmaf(qv, s[r], part);
      }
      part = la_column_sum(part, ks);
      if (split == 0 && col_ok) {
        y[obase + ((i64)hh * p.dv + m) * p.oc] = Narrow<T>::from(p.scale * part);
      }
    }
  }

  if (p.present != nullptr && col_ok) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row_ok[r]) {
        const i64 i = split + r * ks;
        la_store_state(p.present, bi * p.sb + h * p.sh + i * p.sk + m * p.sv, p.present_code,
                       s[r]);
      }
    }
  }
}

#define LIN_ATTN(TAG, T, R)                                                                  \
  extern "C" __global__ void __launch_bounds__(256)                                          \
      linear_attention_##TAG##_r##R(LinAttnParams p) {                                       \
    lin_attn<T, R>(p);                                                                       \
  }
#define LIN_ATTN_ROWS(TAG, T)                                                                \
  LIN_ATTN(TAG, T, 4)                                                                        \
  LIN_ATTN(TAG, T, 8)                                                                        \
  LIN_ATTN(TAG, T, 16)                                                                       \
  LIN_ATTN(TAG, T, 32)

LIN_ATTN_ROWS(f32, float)
LIN_ATTN_ROWS(f16, f16)
LIN_ATTN_ROWS(bf16, bf16)
