// Fused element-wise chains (the session's internal FusedElementwise): the walk around one
// generated function. The host generates, per program and dtype, a prefix defining
//   FE_NIN, FE_NOUT  the node's inputs and outputs
//   FE_V             elements per 16-byte vector of the storage type
//   FeT, C           the storage type and the compute type (float for f16/bf16/f32, double)
//   fe_in, fe_out    conversions between them; FE_INF, FE_NAN
// and the function `fe_eval(a, r)` (inserted at the marker below) that computes the outputs
// r[0..FE_NOUT) of one element from its inputs a[0..FE_NIN).
//
// Two walks, picked by the host per launch (uniform branch):
//  - mode 1, flat: every output contiguous and 16-byte aligned, every input either contiguous
//    with the output's shape (aligned; st[k][0] = 1) or a single element (st[k][0] = 0). Each
//    thread computes FE_V consecutive elements with one 16-byte load per full input and one
//    store per output; single-element inputs are read once per thread.
//  - mode 0, strided: any strides (the host coalesces the walk to at most FE_RANK axes), one
//    element per iteration, 32-bit index arithmetic when the element count allows.

#define FE_RANK 8
#define FE_MAXOPS 24

struct FeParams {
  i64 n;       // output elements
  i32 rank;    // walk axes (mode 0)
  i32 mode;    // 0 strided, 1 flat
  i32 narrow;  // every linear index fits in 32 bits
  i32 _pad;
  i64 dims[FE_RANK];
  i64 st[FE_MAXOPS][FE_RANK];  // element strides of each operand, inputs then outputs
  u64 ptr[FE_MAXOPS];          // device addresses, inputs then outputs
};

template <class T, int V> struct alignas(sizeof(T) * V) FePack {
  T v[V];
};

__device__ __forceinline__ C fe_sigmoid(C x) {
  if (x >= (C)0) return (C)1 / ((C)1 + exp(-x));
  C e = exp(x);
  return e / ((C)1 + e);
}

__device__ __forceinline__ C fe_softplus(C x) {
  return x > (C)0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

// (x < lo ? lo : x), then (> hi ? hi : .): NaN stays NaN, as the CPU's Clip.
__device__ __forceinline__ C fe_clip(C x, C lo, C hi) {
  C v = x < lo ? lo : x;
  return v > hi ? hi : v;
}

// NaN propagates through Max and Min (numpy.maximum / numpy.minimum).
__device__ __forceinline__ C fe_max(C a, C b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ C fe_min(C a, C b) { return (a < b || a != a) ? a : b; }

// @@FE_EVAL@@

extern "C" __global__ void __launch_bounds__(256) fused_ew(const FeParams p) {
  if (p.mode == 1) {
    const i64 nv = p.n / FE_V;
    C sc[FE_NIN];
#pragma unroll
    for (int k = 0; k < FE_NIN; ++k) {
      sc[k] = p.st[k][0] == 0 ? fe_in(((const FeT *)p.ptr[k])[0]) : (C)0;
    }
    GRID_LOOP(v, nv) {
      C a[FE_V][FE_NIN];
#pragma unroll
      for (int k = 0; k < FE_NIN; ++k) {
        if (p.st[k][0] != 0) {
          const FePack<FeT, FE_V> pk = reinterpret_cast<const FePack<FeT, FE_V> *>(p.ptr[k])[v];
#pragma unroll
          for (int j = 0; j < FE_V; ++j) a[j][k] = fe_in(pk.v[j]);
        } else {
#pragma unroll
          for (int j = 0; j < FE_V; ++j) a[j][k] = sc[k];
        }
      }
      C r[FE_V][FE_NOUT];
#pragma unroll
      for (int j = 0; j < FE_V; ++j) fe_eval(a[j], r[j]);
#pragma unroll
      for (int o = 0; o < FE_NOUT; ++o) {
        FePack<FeT, FE_V> pk;
#pragma unroll
        for (int j = 0; j < FE_V; ++j) pk.v[j] = fe_out(r[j][o]);
        reinterpret_cast<FePack<FeT, FE_V> *>(p.ptr[FE_NIN + o])[v] = pk;
      }
    }
    // The last n % FE_V elements, one per thread of the first threads.
    const i64 t = nv * FE_V + (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < p.n) {
      C a[FE_NIN];
#pragma unroll
      for (int k = 0; k < FE_NIN; ++k) {
        a[k] = p.st[k][0] != 0 ? fe_in(((const FeT *)p.ptr[k])[t]) : sc[k];
      }
      C r[FE_NOUT];
      fe_eval(a, r);
#pragma unroll
      for (int o = 0; o < FE_NOUT; ++o) ((FeT *)p.ptr[FE_NIN + o])[t] = fe_out(r[o]);
    }
  } else {
    GRID_LOOP(i, p.n) {
      i64 off[FE_NIN + FE_NOUT];
#pragma unroll
      for (int k = 0; k < FE_NIN + FE_NOUT; ++k) off[k] = 0;
      if (p.narrow) {
        u32 rem = (u32)i;
#pragma unroll 1
        for (int d = p.rank - 1; d >= 0; --d) {
          const u32 dim = (u32)p.dims[d];
          const u32 c = rem % dim;
          rem /= dim;
#pragma unroll
          for (int k = 0; k < FE_NIN + FE_NOUT; ++k) off[k] += (i64)c * p.st[k][d];
        }
      } else {
        u64 rem = (u64)i;
#pragma unroll 1
        for (int d = p.rank - 1; d >= 0; --d) {
          const u64 dim = (u64)p.dims[d];
          const u64 q = rem / dim;
          const u64 c = rem - q * dim;
          rem = q;
#pragma unroll
          for (int k = 0; k < FE_NIN + FE_NOUT; ++k) off[k] += (i64)c * p.st[k][d];
        }
      }
      C a[FE_NIN];
#pragma unroll
      for (int k = 0; k < FE_NIN; ++k) a[k] = fe_in(((const FeT *)p.ptr[k])[off[k]]);
      C r[FE_NOUT];
      fe_eval(a, r);
#pragma unroll
      for (int o = 0; o < FE_NOUT; ++o) {
        ((FeT *)p.ptr[FE_NIN + o])[off[FE_NIN + o]] = fe_out(r[o]);
      }
    }
  }
}
