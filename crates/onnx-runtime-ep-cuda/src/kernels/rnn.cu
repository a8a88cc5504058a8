// Recurrent networks: RNN, GRU (linear_before_reset 0 and 1) and LSTM (peepholes,
// input_forget), every direction, sequence_lens, initial states, layout 0/1, clip and the
// activation list.
//
// Variant defines: RNN_T (T: the tensors' element type), RNN_A (A: the accumulator and the
// recurrent state: float, or double for double), RNN_KIND (0 RNN, 1 GRU, 2 LSTM: which cell
// kernels the module holds). Half types compute in float; the state stays in A between steps,
// so only the outputs are rounded to T.
//
// The work of a node:
//  1. rnn_proj: the input projection of every step at once, XW[d][t][b][n] = X[t,b,:] .
//     W[d,n,:] + Wb[d,n] (+ Rb[d,n] for every gate but GRU's hidden one), a tiled GEMM
//     (64x64 tiles, 16-deep k slices in shared memory, 4x4 outputs a thread), batched over the
//     directions, any strides (layout 1 is a stride permutation).
//  2. The recurrence, in one of two forms:
//     - rnn_fused_*: the whole sequence in one launch for small hidden sizes: a block per
//       (batch chunk, direction) keeps its chunk's hidden (and cell) state in shared memory
//       and loops over the steps with a block barrier between them.
//     - rnn_step_*: one launch per step (two for GRU with linear_before_reset = 0): a warp per
//       (direction, hidden unit, batch chunk) over the whole grid, the state in global
//       ping-pong buffers; rnn_init first writes the initial states when they are given.
//     Either way a warp owns one hidden unit j: it reads the unit's gate rows of R (one row
//     per gate), multiplies them with the previous hidden state of up to BCH batch rows (lanes
//     split k, V elements a lane: 16-byte loads on the vector path), reduces the NG x BCH
//     partial sums with a reduce-scatter across the warp, and lane bb then applies the gates,
//     the cell update, clip and the sequence_lens masking for batch row b0 + bb.
//
// sequence_lens are read on the device: steps at or past a row's length write 0 to Y and keep
// the state, so Y_h / Y_c hold the state of the last valid step (the reverse direction runs
// from t = len - 1 down to 0). Out-of-range lengths are clamped and reported (error code 16).

typedef RNN_T T;
typedef RNN_A A;

constexpr int VEC = 16 / (int)sizeof(T);

#define RNN_ERR_LENS 16u

#define M_RNN 0
#define M_GRU1 1 // GRU, linear_before_reset = 1: z, r and h rows in one pass
#define M_GRUA 2 // GRU, linear_before_reset = 0, phase A: z and r rows, r * H
#define M_GRUB 3 // GRU, linear_before_reset = 0, phase B: the h row times r * H
#define M_LSTM 4

#if RNN_KIND == 0
#define GATES 1
#elif RNN_KIND == 1
#define GATES 3
#else
#define GATES 4
#endif

// Launch parameters of the cell kernels (mirrored by RnnParams in src/ops/rnn.rs).
struct RnnParams {
  u64 xw;    // A [D][T][B][GATES*H]: the projections with their biases
  u64 r;     // T [D][GATES*H][H], contiguous
  u64 hprev; // A [D][B][H]: the state the step reads (step path)
  u64 hnext; // A [D][B][H]: the state the step writes (step path; rnn_init's target)
  u64 c;     // A [D][B][H]: LSTM cell state (step path)
  u64 zbuf;  // A [D][B][H]: GRU (lbr 0) update gate, phase A -> B
  u64 rh;    // A [D][B][H]: GRU (lbr 0) r * H, phase A -> B
  u64 y;     // T: Y (0: not written)
  u64 yh;    // T: Y_h (0: not written)
  u64 yc;    // T: Y_c (0: not written)
  u64 lens;  // sequence_lens (0: every row has T steps)
  u64 p;     // T: peepholes P [D][3H] (0: none)
  u64 bias;  // T: B [D][2*GATES*H] (0: none), for GRU's Rbh
  u64 h0;    // T: initial_h (0: zeros)
  u64 c0;    // T: initial_c (0: zeros)
  u64 err;
  i64 y_s[4];  // Y strides by (t, d, b, j)
  i64 yh_s[3]; // Y_h strides by (d, b, j)
  i64 yc_s[3];
  i64 h0_s[3];
  i64 c0_s[3];
  i64 p_s[2]; // P strides by (d, n)
  i64 b_s[2]; // B strides by (d, n)
  i64 lens_stride;
  i32 lens_code; // ONNX dtype code of sequence_lens
  i32 T, B, H, D;
  i32 step;
  i32 zero_prev;   // the previous state is all zeros (step 0 without initial states)
  i32 final_write; // this launch writes Y_h / Y_c (the last step; rnn_init when T == 0)
  i32 rev[2];      // per direction: 1 = reverse
  i32 act[6];      // activation codes by (direction, f/g/h)
  float alpha[6];
  float beta[6];
  float clip;
  i32 has_clip;
  i32 input_forget;
  u32 id;
};

// Launch parameters of the projection (mirrored by RnnProj in src/ops/rnn.rs).
struct RnnProj {
  u64 x, w, bias, out;
  i64 x_s[3]; // X strides by (t, b, k)
  i64 w_s[3]; // W strides by (d, n, k)
  i64 b_s[2]; // B strides by (d, n)
  i64 M;      // T * B rows
  i64 N;      // GATES * H columns
  i64 K;      // input size
  i32 nb;     // batch size (row m is (t, b) = (m / nb, m % nb))
  i32 add_rb; // columns n < add_rb also add Rb[d, n]
};

// ---- math ----

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double m_max(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ float m_min(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ double m_min(double a, double b) { return fmin(a, b); }
__device__ __forceinline__ float m_abs(float a) { return fabsf(a); }
__device__ __forceinline__ double m_abs(double a) { return fabs(a); }

// The ONNX activations, by code (the order of `Act` in src/ops/rnn.rs).
__device__ __forceinline__ A activate(A x, int code, A a, A b) {
  const A one = (A)1, zero = (A)0;
  switch (code) {
  case 0: return m_max(x, zero);                                   // Relu
  case 1: return m_tanh(x);                                        // Tanh
  case 2: return one / (one + m_exp(-x));                          // Sigmoid
  case 3: return a * x + b;                                        // Affine
  case 4: return x >= zero ? x : a * x;                            // LeakyRelu
  case 5: return x > a ? x : zero;                                 // ThresholdedRelu
  case 6: return a * m_tanh(b * x);                                // ScaledTanh
  case 7: return m_min(m_max(a * x + b, zero), one);               // HardSigmoid
  case 8: return x >= zero ? x : a * (m_exp(x) - one);             // Elu
  case 9: return x / (one + m_abs(x));                             // Softsign
  default: return m_log(one + m_exp(x));                           // Softplus
  }
}

// One direction's activations (f, g, h) and whether it runs in reverse, read from the
// parameters with constant indices (a dynamic index into a by-value parameter array would
// copy the parameters to local memory).
struct Dir {
  int code[3];
  A alpha[3];
  A beta[3];
  int rev;
};

__device__ __forceinline__ Dir dir_of(const RnnParams &p, int d) {
  Dir r;
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    r.code[k] = d ? p.act[3 + k] : p.act[k];
    r.alpha[k] = (A)(d ? p.alpha[3 + k] : p.alpha[k]);
    r.beta[k] = (A)(d ? p.beta[3 + k] : p.beta[k]);
  }
  r.rev = d ? p.rev[1] : p.rev[0];
  return r;
}

// Activation `which` (0 f, 1 g, 2 h; a constant) of a direction.
__device__ __forceinline__ A act_of(const Dir &dir, int which, A x) {
  return activate(x, dir.code[which], dir.alpha[which], dir.beta[which]);
}

__device__ __forceinline__ A clipv(const RnnParams &p, A x) {
  if (p.has_clip) {
    const A c = (A)p.clip;
    return m_min(m_max(x, -c), c);
  }
  return x;
}

// ---- loads ----

// Loads N consecutive elements (16-byte words when the pack is a multiple of 16 bytes; the
// caller guarantees the alignment).
template <typename E, int N> __device__ __forceinline__ void ldv(const E *p, E (&out)[N]) {
  constexpr int B = (int)sizeof(E) * N;
  if constexpr (B % 16 == 0) {
    uint4 w[B / 16];
    const uint4 *q = reinterpret_cast<const uint4 *>(p);
#pragma unroll
    for (int i = 0; i < B / 16; ++i) w[i] = q[i];
    memcpy(&out[0], &w[0], B);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = p[i];
  }
}

template <int V, typename E> __device__ __forceinline__ void ld_acc(const E *p, A (&out)[V]) {
  E raw[V];
  ldv<E, V>(p, raw);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = (A)widen(raw[i]);
}

__device__ __forceinline__ A load_t(u64 base, i64 off) {
  return (A)widen(reinterpret_cast<const T *>(base)[off]);
}

__device__ __forceinline__ void store_t(u64 base, i64 off, A v) {
  reinterpret_cast<T *>(base)[off] = convert<T>(v);
}

// The length of batch row b (clamped to [0, T]; an out-of-range value is reported).
__device__ __forceinline__ int seq_len(const RnnParams &p, int b) {
  if (p.lens == 0) return p.T;
  i64 v = load_as_i64(reinterpret_cast<const void *>(p.lens), (i64)b * p.lens_stride, p.lens_code);
  if (v < 0 || v > (i64)p.T) {
    report_error(reinterpret_cast<u32 *>(p.err), RNN_ERR_LENS, p.id);
    v = v < 0 ? 0 : (i64)p.T;
  }
  return (int)v;
}

// ---- the warp's dot products ----

constexpr int rows_of(int mode) {
  return mode == M_RNN ? 1 : mode == M_GRU1 ? 3 : mode == M_GRUA ? 2 : mode == M_GRUB ? 1 : 4;
}
constexpr int first_row(int mode) { return mode == M_GRUB ? 2 : 0; }
constexpr int pow2_at_least(int n) { return n <= 1 ? 1 : 2 * pow2_at_least((n + 1) / 2); }
constexpr int log2_of(int n) { return n <= 1 ? 0 : 1 + log2_of(n / 2); }

// acc[g][bb] = R[row g] . hsrc[bb] over k in [0, H), lanes splitting k in packs of V. `rows`
// points at the first row; row g is `gstride` elements further each. Rows bb >= nb are skipped.
template <int NG, int BCH, int V>
__device__ __forceinline__ void unit_dot(const T *__restrict__ rows, i64 gstride,
                                         const A *hsrc, i64 hstride, int nb, int H,
                                         A (&acc)[NG][BCH]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int g = 0; g < NG; ++g)
#pragma unroll
    for (int bb = 0; bb < BCH; ++bb) acc[g][bb] = (A)0;
  for (int k = lane * V; k < H; k += 32 * V) {
    A rv[NG][V];
#pragma unroll
    for (int g = 0; g < NG; ++g) ld_acc<V>(rows + g * gstride + k, rv[g]);
#pragma unroll
    for (int bb = 0; bb < BCH; ++bb) {
      if (bb < nb) {
        A hv[V];
        ld_acc<V>(hsrc + bb * hstride + k, hv);
#pragma unroll
        for (int g = 0; g < NG; ++g)
#pragma unroll
          for (int v = 0; v < V; ++v) acc[g][bb] += rv[g][v] * hv[v];
      }
    }
  }
}

// Reduce-scatter of P values across the warp: afterwards lane L holds the warp-wide sum of
// value index L >> (5 - log2 P). Stage by stage each lane keeps half of its live values (the
// half its lane bit selects) and adds the partner's copy of that half; once one value is left
// the remaining lane bits are summed by a plain butterfly.
template <int P, int N, int O> __device__ __forceinline__ void reduce_scatter(A (&v)[P], int lane) {
  if constexpr (O >= 1) {
    if constexpr (N > 1) {
      const bool up = (lane & O) != 0;
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        const A send = up ? v[i] : v[i + N / 2];
        const A keep = up ? v[i + N / 2] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
      }
      reduce_scatter<P, N / 2, O / 2>(v, lane);
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
      reduce_scatter<P, 1, O / 2>(v, lane);
    }
  }
}

// Reduces acc over the warp; lane bb (< BCH) receives out[g] = the sum of acc[g][bb]. Every
// lane of the warp must call it.
template <int NG, int BCH>
__device__ __forceinline__ void warp_gates(A (&acc)[NG][BCH], A (&out)[NG]) {
  constexpr int NV = NG * BCH;
  constexpr int P = pow2_at_least(NV);
  constexpr int SH = 5 - log2_of(P);
  const int lane = threadIdx.x & 31;
  A v[P];
#pragma unroll
  for (int g = 0; g < NG; ++g)
#pragma unroll
    for (int bb = 0; bb < BCH; ++bb) v[g * BCH + bb] = acc[g][bb];
#pragma unroll
  for (int i = NV; i < P; ++i) v[i] = (A)0;
  reduce_scatter<P, P, 16>(v, lane);
  const int bb = lane % BCH;
#pragma unroll
  for (int g = 0; g < NG; ++g) out[g] = __shfl_sync(0xffffffffu, v[0], (g * BCH + bb) << SH);
}

// ---- the cell ----

// The new hidden value of unit (d, b, j) at a valid step whose input row is t. `hr` holds the
// recurrent products of the mode's rows. LSTM updates *cst (the cell state) in place; GRU phase
// A stores z and r * h_old and returns h_old; phase B takes z as z_in.
template <int MODE>
__device__ __forceinline__ A cell_update(const RnnParams &p, const Dir &dir, int d, int b, int j,
                                         int t, const A (&hr)[rows_of(MODE)], A h_old, A *cst,
                                         A z_in, A *z_out, A *rh_out) {
  const i64 H = p.H;
  const A *xr = reinterpret_cast<const A *>(p.xw) + (((i64)d * p.T + t) * p.B + b) * (GATES * H);
  const A one = (A)1;
  if constexpr (MODE == M_RNN) {
    return act_of(dir, 0, clipv(p, xr[j] + hr[0]));
  } else if constexpr (MODE == M_GRU1 || MODE == M_GRUA || MODE == M_GRUB) {
    A rbh = (A)0;
    if (MODE != M_GRUA && p.bias != 0)
      rbh = load_t(p.bias, (i64)d * p.b_s[0] + (GATES * H + 2 * H + j) * p.b_s[1]);
    if constexpr (MODE == M_GRUB) {
      const A hh = act_of(dir, 1, clipv(p, xr[2 * H + j] + hr[0] + rbh));
      return (one - z_in) * hh + z_in * h_old;
    } else {
      const A z = act_of(dir, 0, clipv(p, xr[j] + hr[0]));
      const A r = act_of(dir, 0, clipv(p, xr[H + j] + hr[1]));
      if constexpr (MODE == M_GRUA) {
        *z_out = z;
        *rh_out = r * h_old;
        return h_old;
      } else {
        const A hh = act_of(dir, 1, clipv(p, xr[2 * H + j] + r * (hr[2] + rbh)));
        return (one - z) * hh + z * h_old;
      }
    }
  } else {
    const A c_old = *cst;
    A pi = (A)0, po = (A)0, pf = (A)0;
    if (p.p != 0) {
      const i64 base = (i64)d * p.p_s[0];
      pi = load_t(p.p, base + (i64)j * p.p_s[1]);
      po = load_t(p.p, base + (H + j) * p.p_s[1]);
      pf = load_t(p.p, base + (2 * H + j) * p.p_s[1]);
    }
    const A gi = act_of(dir, 0, clipv(p, xr[j] + hr[0] + pi * c_old));
    A gf;
    if (p.input_forget) {
      gf = one - gi;
    } else {
      gf = act_of(dir, 0, clipv(p, xr[2 * H + j] + hr[2] + pf * c_old));
    }
    const A gc = act_of(dir, 1, clipv(p, xr[3 * H + j] + hr[3]));
    const A c_new = gf * c_old + gi * gc;
    *cst = c_new;
    const A go = act_of(dir, 0, clipv(p, xr[H + j] + hr[1] + po * c_new));
    return go * act_of(dir, 2, c_new);
  }
}

__device__ __forceinline__ i64 y_off(const RnnParams &p, int t, int d, int b, int j) {
  return (i64)t * p.y_s[0] + (i64)d * p.y_s[1] + (i64)b * p.y_s[2] + (i64)j * p.y_s[3];
}

__device__ __forceinline__ i64 st_off(const i64 (&s)[3], int d, int b, int j) {
  return (i64)d * s[0] + (i64)b * s[1] + (i64)j * s[2];
}

// ---- the input projection ----

#define PT 64
#define PK 16
#define PPAD 4

template <typename E> __device__ __forceinline__ void lds4(const E *p, E (&o)[4]) {
  if constexpr (sizeof(E) == 4) {
    const float4 v = *reinterpret_cast<const float4 *>(p);
    o[0] = v.x;
    o[1] = v.y;
    o[2] = v.z;
    o[3] = v.w;
  } else {
    const double2 a = *reinterpret_cast<const double2 *>(p);
    const double2 b = *reinterpret_cast<const double2 *>(p + 2);
    o[0] = a.x;
    o[1] = a.y;
    o[2] = b.x;
    o[3] = b.y;
  }
}

// out[d][m][n] = sum_k X[m, k] W[d, n, k] + bias. Grid (ceil(M / 64), ceil(N / 64), D), 256
// threads. The next k slice is fetched into registers while the current one is multiplied.
extern "C" __global__ void __launch_bounds__(256) rnn_proj(RnnProj p) {
  __shared__ __align__(16) A As[PK][PT + PPAD];
  __shared__ __align__(16) A Bs[PK][PT + PPAD];
  const int tid = threadIdx.x;
  const int tx = tid & 15, ty = tid >> 4;
  const int lk = tid & 15, lr = tid >> 4;
  const i64 m0 = (i64)blockIdx.x * PT;
  const i64 n0 = (i64)blockIdx.y * PT;
  const int d = blockIdx.z;
  const T *X = reinterpret_cast<const T *>(p.x);
  const T *W = reinterpret_cast<const T *>(p.w) + (i64)d * p.w_s[0];
  i64 xoff[4], woff[4];
  bool xok[4], wok[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const i64 m = m0 + lr + 16 * i;
    xok[i] = m < p.M;
    const i64 t = xok[i] ? m / p.nb : 0;
    const i64 b = xok[i] ? m - t * p.nb : 0;
    xoff[i] = t * p.x_s[0] + b * p.x_s[1];
    const i64 n = n0 + lr + 16 * i;
    wok[i] = n < p.N;
    woff[i] = wok[i] ? n * p.w_s[1] : 0;
  }
  A ra[4], rb[4];
  auto fetch = [&](i64 k0) {
    const i64 k = k0 + lk;
    const bool kin = k < p.K;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ra[i] = (xok[i] && kin) ? (A)widen(X[xoff[i] + k * p.x_s[2]]) : (A)0;
      rb[i] = (wok[i] && kin) ? (A)widen(W[woff[i] + k * p.w_s[2]]) : (A)0;
    }
  };
  fetch(0);
  A acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = (A)0;
  for (i64 k0 = 0; k0 < p.K; k0 += PK) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      As[lk][lr + 16 * i] = ra[i];
      Bs[lk][lr + 16 * i] = rb[i];
    }
    __syncthreads();
    if (k0 + PK < p.K) fetch(k0 + PK);
#pragma unroll
    for (int kk = 0; kk < PK; ++kk) {
      A a[4], b[4];
      lds4(&As[kk][ty * 4], a);
      lds4(&Bs[kk][tx * 4], b);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  A bias[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const i64 n = n0 + tx * 4 + j;
    bias[j] = (A)0;
    if (p.bias != 0 && n < p.N) {
      const i64 base = (i64)d * p.b_s[0];
      A s = load_t(p.bias, base + n * p.b_s[1]);
      if (n < p.add_rb) s += load_t(p.bias, base + (p.N + n) * p.b_s[1]);
      bias[j] = s;
    }
  }
  A *out = reinterpret_cast<A *>(p.out) + (i64)d * p.M * p.N;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const i64 m = m0 + ty * 4 + i;
    if (m >= p.M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const i64 n = n0 + tx * 4 + j;
      if (n < p.N) out[m * p.N + n] = acc[i][j] + bias[j];
    }
  }
}

// ---- initial states (step path) and the final states of an empty sequence ----

// For every (d, b, j): hnext = initial_h (or 0), c = initial_c (or 0) where those buffers are
// given; with final_write also Y_h / Y_c.
extern "C" __global__ void rnn_init(RnnParams p) {
  const i64 n = (i64)p.D * p.B * p.H;
  GRID_LOOP(i, n) {
    const int j = (int)(i % p.H);
    const int b = (int)((i / p.H) % p.B);
    const int d = (int)(i / ((i64)p.H * p.B));
    const A h = p.h0 != 0 ? load_t(p.h0, st_off(p.h0_s, d, b, j)) : (A)0;
    const A c = p.c0 != 0 ? load_t(p.c0, st_off(p.c0_s, d, b, j)) : (A)0;
    if (p.hnext != 0) reinterpret_cast<A *>(p.hnext)[i] = h;
    if (p.c != 0) reinterpret_cast<A *>(p.c)[i] = c;
    if (p.final_write) {
      if (p.yh != 0) store_t(p.yh, st_off(p.yh_s, d, b, j), h);
      if (p.yc != 0) store_t(p.yc, st_off(p.yc_s, d, b, j), c);
    }
  }
}

// ---- one step over the whole grid ----

// A warp per (direction, unit j, batch chunk), 256 threads a block.
template <int MODE, int BCH, int V> __device__ __forceinline__ void step_body(const RnnParams &p) {
  constexpr int NG = rows_of(MODE);
  const int lane = threadIdx.x & 31;
  const int nchunks = (p.B + BCH - 1) / BCH;
  const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (warp >= (i64)p.D * p.H * nchunks) return; // the whole warp leaves together
  const int chunk = (int)(warp % nchunks);
  const i64 unit = warp / nchunks;
  const int j = (int)(unit % p.H);
  const int d = (int)(unit / p.H);
  const int b0 = chunk * BCH;
  const int nb = min(BCH, p.B - b0);
  const i64 H = p.H;
  A acc[NG][BCH];
  if (p.zero_prev) {
#pragma unroll
    for (int g = 0; g < NG; ++g)
#pragma unroll
      for (int bb = 0; bb < BCH; ++bb) acc[g][bb] = (A)0;
  } else {
    const T *rows = reinterpret_cast<const T *>(p.r) +
                    (((i64)d * GATES + first_row(MODE)) * H + j) * H;
    const A *hsrc = reinterpret_cast<const A *>(MODE == M_GRUB ? p.rh : p.hprev) +
                    ((i64)d * p.B + b0) * H;
    unit_dot<NG, BCH, V>(rows, H * H, hsrc, H, nb, p.H, acc);
  }
  A hr[NG];
  warp_gates<NG, BCH>(acc, hr);
  if (lane >= nb) return;
  const int b = b0 + lane;
  const int len = seq_len(p, b);
  const Dir dir = dir_of(p, d);
  const i64 s = ((i64)d * p.B + b) * H + j;
  const A h_old = p.zero_prev ? (A)0 : reinterpret_cast<const A *>(p.hprev)[s];
  A *cst = nullptr;
  if constexpr (MODE == M_LSTM) {
    cst = reinterpret_cast<A *>(p.c) + s;
    if (p.zero_prev) *cst = (A)0;
  }
  const bool valid = p.step < len;
  const int t = dir.rev ? len - 1 - p.step : p.step;
  if constexpr (MODE == M_GRUA) {
    if (valid) {
      cell_update<MODE>(p, dir, d, b, j, t, hr, h_old, cst, (A)0, reinterpret_cast<A *>(p.zbuf) + s,
                        reinterpret_cast<A *>(p.rh) + s);
    }
    return;
  } else {
    A h = h_old;
    if (valid) {
      const A z_in = MODE == M_GRUB ? reinterpret_cast<const A *>(p.zbuf)[s] : (A)0;
      h = cell_update<MODE>(p, dir, d, b, j, t, hr, h_old, cst, z_in, nullptr, nullptr);
      if (p.y != 0) store_t(p.y, y_off(p, t, d, b, j), h);
    } else if (p.y != 0) {
      store_t(p.y, y_off(p, p.step, d, b, j), (A)0);
    }
    reinterpret_cast<A *>(p.hnext)[s] = h;
    if (p.final_write) {
      if (p.yh != 0) store_t(p.yh, st_off(p.yh_s, d, b, j), h);
      if constexpr (MODE == M_LSTM) {
        if (p.yc != 0) store_t(p.yc, st_off(p.yc_s, d, b, j), *cst);
      }
    }
  }
}

// ---- the whole sequence in one launch (small hidden sizes) ----

// A block per (batch chunk, direction): grid (ceil(B / BCH), D), 32 * NW threads (NW <= 16
// warps, warp w takes units w, w + NW, ...). Shared memory (A elements): h [2][BCH][H], then c
// [BCH][H] (LSTM), then z and r * h [BCH][H] each (GRU, lbr 0).
template <int FMODE, int BCH, int V>
__device__ __forceinline__ void fused_body(const RnnParams &p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr bool LSTM = FMODE == M_LSTM;
  constexpr bool GRU0 = FMODE == M_GRUA;
  const int H = p.H;
  const int tile = BCH * H;
  A *sh = reinterpret_cast<A *>(smem_raw);
  A *sc = sh + 2 * tile;
  A *sz = sc + (LSTM ? tile : 0);
  A *srh = sz + tile;
  const int d = blockIdx.y;
  const int b0 = blockIdx.x * BCH;
  const int nb = min(BCH, p.B - b0);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nw = blockDim.x >> 5;
  const T *R = reinterpret_cast<const T *>(p.r) + (i64)d * GATES * H * H;
  const i64 HH = (i64)H * H;
  for (int i = threadIdx.x; i < tile; i += blockDim.x) {
    const int bb = i / H, j = i % H;
    A h = (A)0, c = (A)0;
    if (bb < nb) {
      if (p.h0 != 0) h = load_t(p.h0, st_off(p.h0_s, d, b0 + bb, j));
      if (p.c0 != 0) c = load_t(p.c0, st_off(p.c0_s, d, b0 + bb, j));
    }
    sh[i] = h;
    sh[tile + i] = (A)0;
    if (LSTM) sc[i] = c;
    if (GRU0) {
      sz[i] = (A)0;
      srh[i] = (A)0;
    }
  }
  const int len = lane < nb ? seq_len(p, b0 + lane) : 0;
  const int b = b0 + lane;
  const Dir dir = dir_of(p, d);
  __syncthreads();
  for (int step = 0; step < p.T; ++step) {
    const A *cur = sh + (step & 1) * tile;
    A *nxt = sh + ((step & 1) ^ 1) * tile;
    const bool valid = step < len;
    const int t = dir.rev ? len - 1 - step : step;
    if constexpr (GRU0) {
      for (int j = warp; j < H; j += nw) {
        A acc[2][BCH], hr[2];
        unit_dot<2, BCH, V>(R + (i64)j * H, HH, cur, H, nb, H, acc);
        warp_gates<2, BCH>(acc, hr);
        if (lane < nb && valid) {
          const int s = lane * H + j;
          cell_update<M_GRUA>(p, dir, d, b, j, t, hr, cur[s], nullptr, (A)0, sz + s, srh + s);
        }
      }
      __syncthreads();
      for (int j = warp; j < H; j += nw) {
        A acc[1][BCH], hr[1];
        unit_dot<1, BCH, V>(R + (2 * H + (i64)j) * H, HH, srh, H, nb, H, acc);
        warp_gates<1, BCH>(acc, hr);
        if (lane < nb) {
          const int s = lane * H + j;
          A h = cur[s];
          if (valid) {
            h = cell_update<M_GRUB>(p, dir, d, b, j, t, hr, h, nullptr, sz[s], nullptr, nullptr);
            if (p.y != 0) store_t(p.y, y_off(p, t, d, b, j), h);
          } else if (p.y != 0) {
            store_t(p.y, y_off(p, step, d, b, j), (A)0);
          }
          nxt[s] = h;
        }
      }
    } else {
      constexpr int NG = rows_of(FMODE);
      for (int j = warp; j < H; j += nw) {
        A acc[NG][BCH], hr[NG];
        unit_dot<NG, BCH, V>(R + (i64)j * H, HH, cur, H, nb, H, acc);
        warp_gates<NG, BCH>(acc, hr);
        if (lane < nb) {
          const int s = lane * H + j;
          A h = cur[s];
          if (valid) {
            h = cell_update<FMODE>(p, dir, d, b, j, t, hr, h, LSTM ? sc + s : nullptr, (A)0,
                                   nullptr, nullptr);
            if (p.y != 0) store_t(p.y, y_off(p, t, d, b, j), h);
          } else if (p.y != 0) {
            store_t(p.y, y_off(p, step, d, b, j), (A)0);
          }
          nxt[s] = h;
        }
      }
    }
    __syncthreads();
  }
  const A *fin = sh + (p.T & 1) * tile;
  for (int i = threadIdx.x; i < tile; i += blockDim.x) {
    const int bb = i / H, j = i % H;
    if (bb >= nb) continue;
    if (p.yh != 0) store_t(p.yh, st_off(p.yh_s, d, b0 + bb, j), fin[i]);
    if (LSTM && p.yc != 0) store_t(p.yc, st_off(p.yc_s, d, b0 + bb, j), sc[i]);
  }
}

#define STEP_KERNEL(MODE, BCH, V, NAME)                                                      \
  extern "C" __global__ void __launch_bounds__(256) NAME(RnnParams p) {                     \
    step_body<MODE, BCH, V>(p);                                                              \
  }
#define FUSED_KERNEL(MODE, BCH, V, NAME)                                                     \
  extern "C" __global__ void __launch_bounds__(512) NAME(RnnParams p) {                     \
    fused_body<MODE, BCH, V>(p);                                                             \
  }
// Every batch-chunk size (1, 8) and load width (one element, 16 bytes) of a mode.
#define MODE_KERNELS(KIND, MODE, N)                                                          \
  KIND(MODE, 1, 1, rnn_##N##_b1_v0)                                                          \
  KIND(MODE, 1, VEC, rnn_##N##_b1_v1)                                                        \
  KIND(MODE, 8, 1, rnn_##N##_b8_v0)                                                          \
  KIND(MODE, 8, VEC, rnn_##N##_b8_v1)

#if RNN_KIND == 0
MODE_KERNELS(STEP_KERNEL, M_RNN, step_m0)
MODE_KERNELS(FUSED_KERNEL, M_RNN, fused_m0)
#elif RNN_KIND == 1
MODE_KERNELS(STEP_KERNEL, M_GRU1, step_m1)
MODE_KERNELS(STEP_KERNEL, M_GRUA, step_m2)
MODE_KERNELS(STEP_KERNEL, M_GRUB, step_m3)
MODE_KERNELS(FUSED_KERNEL, M_GRU1, fused_m1)
MODE_KERNELS(FUSED_KERNEL, M_GRUA, fused_m2)
#else
MODE_KERNELS(STEP_KERNEL, M_LSTM, step_m4)
MODE_KERNELS(FUSED_KERNEL, M_LSTM, fused_m4)
#endif
