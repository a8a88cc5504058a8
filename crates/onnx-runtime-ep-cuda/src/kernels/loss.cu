// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, typed by score type T (float,
// double, f16, bf16) and target type I (int32, int64). A "position" is one (n, d1..dk)
// coordinate; a group of G lanes (1 or a warp of 32) handles one position at a time: for
// SCE it computes the log-sum-exp over the C classes (one pass, online max/sum, merged
// across the group with shuffles), optionally writes log_prob, then every position takes
// -(x[t] - lse) * w[t]. Reduction none writes the per-position loss; sum/mean write one
// (loss sum, weight sum) pair per block, which loss_final_T reduces in a single block into
// the scalar output (mean divides on the device). Half types compute in float, double in
// double. A target out of [0, C) that is not ignore_index is never dereferenced: it
// contributes 0 and is reported through the device error word.

struct LossParams {
  i64 positions;
  i64 classes;
  i32 rank;    // position rank (1 + k)
  i32 softmax; // 1 for SoftmaxCrossEntropyLoss
  i64 dims[MAX_RANK];
  i64 xs[MAX_RANK]; // score stride of each position axis
  i64 ts[MAX_RANK]; // target stride
  i64 os[MAX_RANK]; // loss output stride (reduction none)
  i64 ls[MAX_RANK]; // log_prob stride
  i64 x_cstride;
  i64 l_cstride;
  i64 w_stride;
  i64 ignore_index;
  i32 has_ignore;
  i32 has_weight;
  i32 reduce; // 0: write per-position losses; else write block partials
  i32 has_logp;
  u32 id;
  u32 _pad;
};

#define FULL_MASK 0xffffffffu

template <typename T> struct LossAcc { typedef float A; };
template <> struct LossAcc<double> { typedef double A; };

__device__ __forceinline__ float loss_exp(float x) { return expf(x); }
__device__ __forceinline__ double loss_exp(double x) { return exp(x); }
__device__ __forceinline__ float loss_log(float x) { return logf(x); }
__device__ __forceinline__ double loss_log(double x) { return log(x); }
__device__ __forceinline__ void loss_neg_inf(float &v) { v = __int_as_float(0xff800000); }
__device__ __forceinline__ void loss_neg_inf(double &v) {
  v = __longlong_as_double((long long)0xfff0000000000000ULL);
}

// Adds v to a running (max, sum of exp(x - max)).
template <typename A> __device__ __forceinline__ void lse_push(A &m, A &s, A v) {
  if (v > m) {
    s = s * loss_exp(m - v) + (A)1;
    m = v;
  } else {
    s += (v == m) ? (A)1 : loss_exp(v - m);
  }
}

// Merges two running (max, sum) pairs.
template <typename A> __device__ __forceinline__ void lse_merge(A &m, A &s, A m2, A s2) {
  A big = m > m2 ? m : m2;
  A ninf;
  loss_neg_inf(ninf);
  if (big == ninf) {
    s = s + s2;
  } else {
    s = s * loss_exp(m - big) + s2 * loss_exp(m2 - big);
  }
  m = big;
}

// Sums a and b over the block (blockDim.x a multiple of 32, at most 1024); thread 0 holds
// the totals.
__device__ __forceinline__ void block_sum2(double &a, double &b) {
  __shared__ double sa[32], sb[32];
  for (int off = 16; off > 0; off >>= 1) {
    a += __shfl_down_sync(FULL_MASK, a, off);
    b += __shfl_down_sync(FULL_MASK, b, off);
  }
  int warp = threadIdx.x / 32, wl = threadIdx.x % 32;
  if (wl == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    int nw = blockDim.x / 32;
    a = wl < nw ? sa[wl] : 0.0;
    b = wl < nw ? sb[wl] : 0.0;
    for (int off = 16; off > 0; off >>= 1) {
      a += __shfl_down_sync(FULL_MASK, a, off);
      b += __shfl_down_sync(FULL_MASK, b, off);
    }
  }
}

template <typename T, typename I, int G>
__device__ void loss_body(const T *__restrict__ x, const I *__restrict__ target,
                          const T *__restrict__ w, T *__restrict__ out, T *__restrict__ logp,
                          double *__restrict__ partials, u32 *err, const LossParams &p) {
  typedef typename LossAcc<T>::A A;
  const int lane = G == 1 ? 0 : (int)(threadIdx.x % G);
  const i64 group = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / G;
  const i64 groups = ((i64)gridDim.x * blockDim.x) / G;
  A lsum = 0, wsum = 0;
  for (i64 pos = group; pos < p.positions; pos += groups) {
    i64 rem = pos, xo = 0, to = 0, oo = 0, lo = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      i64 c = rem % p.dims[k];
      rem /= p.dims[k];
      xo += c * p.xs[k];
      to += c * p.ts[k];
      oo += c * p.os[k];
      lo += c * p.ls[k];
    }
    A lse = 0;
    if (p.softmax) {
      A m, s = 0;
      loss_neg_inf(m);
      for (i64 c = lane; c < p.classes; c += G) {
        lse_push(m, s, (A)widen(x[xo + c * p.x_cstride]));
      }
      if (G > 1) {
        for (int off = G / 2; off > 0; off >>= 1) {
          A m2 = __shfl_xor_sync(FULL_MASK, m, off, G);
          A s2 = __shfl_xor_sync(FULL_MASK, s, off, G);
          lse_merge(m, s, m2, s2);
        }
      }
      lse = m + loss_log(s);
      if (p.has_logp) {
        for (i64 c = lane; c < p.classes; c += G) {
          logp[lo + c * p.l_cstride] = Narrow<T>::from((A)widen(x[xo + c * p.x_cstride]) - lse);
        }
      }
    }
    i64 t = (i64)target[to];
    A loss = 0, wt = 0;
    bool ignored = p.has_ignore && t == p.ignore_index;
    if (!ignored) {
      if (t < 0 || t >= p.classes) {
        if (lane == 0) report_error(err, 1u, p.id);
      } else {
        wt = p.has_weight ? (A)widen(w[t * p.w_stride]) : (A)1;
        loss = -((A)widen(x[xo + t * p.x_cstride]) - lse) * wt;
      }
    }
    if (lane == 0) {
      if (p.reduce == 0) {
        out[oo] = Narrow<T>::from(loss);
      } else {
        lsum += loss;
        wsum += wt;
      }
    }
  }
  if (p.reduce != 0) {
    double a = (double)lsum, b = (double)wsum;
    block_sum2(a, b);
    if (threadIdx.x == 0) {
      partials[2 * blockIdx.x] = a;
      partials[2 * blockIdx.x + 1] = b;
    }
  }
}

// One block: sums the (loss, weight) pairs of `nparts` blocks and writes the scalar loss.
template <typename T>
__device__ void loss_final_body(const double *__restrict__ partials, i32 nparts, i32 mean,
                                T *__restrict__ out) {
  double a = 0.0, b = 0.0;
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
    a += partials[2 * i];
    b += partials[2 * i + 1];
  }
  block_sum2(a, b);
  if (threadIdx.x == 0) {
    out[0] = Narrow<T>::from(mean ? a / b : a);
  }
}

#define LOSS_KERNEL(TN, T, IN, I, G)                                                         \
  extern "C" __global__ void __launch_bounds__(256)                                          \
      loss_##TN##_##IN##_g##G(const T *x, const I *t, const T *w, T *out, T *logp,          \
                              double *partials, u32 *err, LossParams p) {                    \
    loss_body<T, I, G>(x, t, w, out, logp, partials, err, p);                                \
  }

#define LOSS_TYPE(TN, T)                                                                     \
  LOSS_KERNEL(TN, T, i32, int, 1)                                                            \
  LOSS_KERNEL(TN, T, i32, int, 32)                                                           \
  LOSS_KERNEL(TN, T, i64, long long, 1)                                                      \
  LOSS_KERNEL(TN, T, i64, long long, 32)                                                     \
  extern "C" __global__ void __launch_bounds__(256)                                          \
      loss_final_##TN(const double *partials, i32 nparts, i32 mean, T *out) {                \
    loss_final_body<T>(partials, nparts, mean, out);                                         \
  }

LOSS_TYPE(f32, float)
LOSS_TYPE(f64, double)
LOSS_TYPE(f16, f16)
LOSS_TYPE(bf16, bf16)
