// Pools over 1 to 8 spatial dims with any input strides.
//
// Windowed pools (MaxPool with its optional Indices, AveragePool, LpPool): one thread per
// output element; consecutive threads take consecutive output columns, so the window rows they
// read are coalesced along W. K = 1, 2, 3 spatial dims have their own kernels (the window loops
// unrolled into registers); K = 0 is the general kernel for any count up to 8.
//
// Global pools (GlobalMaxPool, GlobalAveragePool, GlobalLpPool) are reductions over each
// (n, c) plane: one warp per plane (`gpool_warp_*`), or one block per part of a plane
// (`gpool_block_*`) when there are few planes, the parts' partial results combined by
// `gpool_finish_*`. A plane stored as one run reads 16 bytes per load.
//
// Semantics follow the CPU provider: MaxPool keeps the first maximum in row-major window
// order (strict >) and a window with no input element gives 0 (and index n*C*plane + c*plane);
// AveragePool divides by the taps inside the input, or by the taps inside the padded extent
// with count_include_pad (taps past the end pads that ceil_mode adds are never counted); half
// types accumulate in float, double in double; the global max skips NaN.

#define POOL_MAXK 8
#define OP_MAX 0
#define OP_AVG 1
#define OP_LP 2

#define POOL_INCLUDE_PAD 1
#define POOL_INDICES 2
#define POOL_FAST 4

struct PoolParams {
  i64 n;
  i32 k;
  i32 flags;
  i64 C;
  i64 in_plane;
  i64 in_dims[POOL_MAXK];
  i64 out_dims[POOL_MAXK];
  i64 kernel[POOL_MAXK];
  i64 stride[POOL_MAXK];
  i64 dil[POOL_MAXK];
  i64 pad_b[POOL_MAXK];
  i64 pad_e[POOL_MAXK];
  i64 in_mul[POOL_MAXK];
  i64 xs_n, xs_c;
  i64 xs[POOL_MAXK];
  i64 ys_n, ys_c;
  i64 ys[POOL_MAXK];
  i64 is_n, is_c;
  i64 is[POOL_MAXK];
  FastDiv div_out[POOL_MAXK];
  FastDiv div_c;
  float p, inv_p;
  double p_d, inv_p_d;
};

__device__ __forceinline__ float lp_pow(float v, float p) { return powf(fabsf(v), p); }
__device__ __forceinline__ double lp_pow(double v, double p) { return pow(fabs(v), p); }
__device__ __forceinline__ float lp_root(float v, float inv) { return powf(v, inv); }
__device__ __forceinline__ double lp_root(double v, double inv) { return pow(v, inv); }

template <typename A> __device__ __forceinline__ A pick_p(float f, double d) {
  if constexpr (same_type<A, double>::value) {
    return d;
  } else {
    return (A)f;
  }
}

// The window's taps along one spatial dim: its first input coordinate `start` (possibly in the
// begin pad), the taps [lo, hi) that fall inside the input and the taps inside the padded
// extent (AveragePool's count_include_pad divisor).
struct Taps1 {
  int start, lo, hi, padded;
};

__device__ __forceinline__ Taps1 taps_of(const PoolParams &p, int d, i64 o) {
  const int in = (int)p.in_dims[d];
  const int dl = (int)p.dil[d];
  const int kd = (int)p.kernel[d];
  Taps1 t;
  t.start = (int)(o * p.stride[d] - p.pad_b[d]);
  const int s = t.start;
  int lo = 0;
  if (s < 0) lo = dl == 1 ? -s : (-s + dl - 1) / dl;
  const int e = in - s;
  int hi = e <= 0 ? 0 : (dl == 1 ? e : (e + dl - 1) / dl);
  if (hi > kd) hi = kd;
  if (hi < lo) hi = lo;
  const int ep = in + (int)p.pad_e[d] - s;
  int pc = ep <= 0 ? 0 : (dl == 1 ? ep : (ep + dl - 1) / dl);
  if (pc > kd) pc = kd;
  t.lo = lo;
  t.hi = hi;
  t.padded = pc;
  return t;
}

// Nested loops over the taps of dims D..K-1 (compile-time K): `f(offset, local)` per tap, with
// the tap's input offset and its Indices position inside the plane.
template <int D, int K> struct TapLoop {
  template <typename F>
  __device__ static __forceinline__ void run(const Taps1 *t, const PoolParams &p, i64 off,
                                             i64 local, F &f) {
    const int dl = (int)p.dil[D];
    const i64 xs = p.xs[D];
    const i64 mul = p.in_mul[D];
    for (int k = t[D].lo; k < t[D].hi; ++k) {
      const int ix = t[D].start + k * dl;
      TapLoop<D + 1, K>::run(t, p, off + (i64)ix * xs, local + (i64)ix * mul, f);
    }
  }
};
template <int K> struct TapLoop<K, K> {
  template <typename F>
  __device__ static __forceinline__ void run(const Taps1 *, const PoolParams &, i64 off,
                                             i64 local, F &f) {
    f(off, local);
  }
};

template <typename T, typename A, int OP, int K>
__device__ __forceinline__ void pool_kernel(const T *__restrict__ x, T *__restrict__ y,
                                            i64 *__restrict__ ind, const PoolParams &p) {
  constexpr int N = K == 0 ? POOL_MAXK : K;
  const int k = K == 0 ? p.k : K;
  const bool fast = (p.flags & POOL_FAST) != 0;
  const A pw = pick_p<A>(p.p, p.p_d);
  const A inv = pick_p<A>(p.inv_p, p.inv_p_d);
  GRID_LOOP(i, p.n) {
    i64 o[N];
    i64 q = i;
    if constexpr (K != 0) {
#pragma unroll
      for (int d = K - 1; d >= 0; --d) o[d] = split_index(q, p.div_out[d], p.out_dims[d], fast);
    } else {
      for (int d = k - 1; d >= 0; --d) o[d] = split_index(q, p.div_out[d], p.out_dims[d], fast);
    }
    const i64 c = split_index(q, p.div_c, p.C, fast);
    const i64 nn = q;
    Taps1 t[N];
    i64 valid = 1, padded = 1;
    i64 yoff = nn * p.ys_n + c * p.ys_c;
    i64 ioff = nn * p.is_n + c * p.is_c;
#pragma unroll
    for (int d = 0; d < N; ++d) {
      if (K == 0 && d >= k) break;
      t[d] = taps_of(p, d, o[d]);
      valid *= (i64)(t[d].hi - t[d].lo);
      padded *= (i64)t[d].padded;
      yoff += o[d] * p.ys[d];
      ioff += o[d] * p.is[d];
    }
    const i64 base = nn * p.xs_n + c * p.xs_c;
    if constexpr (OP == OP_MAX) {
      T best = convert<T>(0.0f);
      i64 best_at = 0;
      bool found = false;
      auto f = [&](i64 off, i64 local) {
        const T v = x[off];
        if (!found || widen(v) > widen(best)) {
          best = v;
          best_at = local;
          found = true;
        }
      };
      if (valid > 0) {
        if constexpr (K != 0) {
          TapLoop<0, K>::run(t, p, base, 0, f);
        } else {
          int tk[POOL_MAXK];
          for (int d = 0; d < k; ++d) tk[d] = t[d].lo;
          while (true) {
            i64 off = base, local = 0;
            for (int d = 0; d < k; ++d) {
              const i64 ix = (i64)t[d].start + (i64)tk[d] * p.dil[d];
              off += ix * p.xs[d];
              local += ix * p.in_mul[d];
            }
            f(off, local);
            int d = k - 1;
            for (; d >= 0; --d) {
              if (++tk[d] < t[d].hi) break;
              tk[d] = t[d].lo;
            }
            if (d < 0) break;
          }
        }
      }
      y[yoff] = best;
      if (p.flags & POOL_INDICES) ind[ioff] = (nn * p.C + c) * p.in_plane + best_at;
    } else {
      A sum = (A)0;
      auto f = [&](i64 off, i64) {
        const A v = (A)widen(x[off]);
        if constexpr (OP == OP_AVG) {
          sum += v;
        } else {
          sum += lp_pow(v, pw);
        }
      };
      if (valid > 0) {
        if constexpr (K != 0) {
          TapLoop<0, K>::run(t, p, base, 0, f);
        } else {
          int tk[POOL_MAXK];
          for (int d = 0; d < k; ++d) tk[d] = t[d].lo;
          while (true) {
            i64 off = base;
            for (int d = 0; d < k; ++d) off += ((i64)t[d].start + (i64)tk[d] * p.dil[d]) * p.xs[d];
            f(off, 0);
            int d = k - 1;
            for (; d >= 0; --d) {
              if (++tk[d] < t[d].hi) break;
              tk[d] = t[d].lo;
            }
            if (d < 0) break;
          }
        }
      }
      A r;
      if constexpr (OP == OP_AVG) {
        r = sum / (A)((p.flags & POOL_INCLUDE_PAD) ? padded : valid);
      } else {
        r = lp_root(sum, inv);
      }
      y[yoff] = Narrow<T>::from(r);
    }
  }
}

#define POOL_WINDOW(OPNAME, OP, NAME, T, A)                                                  \
  extern "C" __global__ void pool_##OPNAME##_##NAME##_k1(const T *x, T *y, i64 *ind,         \
                                                        PoolParams p) {                      \
    pool_kernel<T, A, OP, 1>(x, y, ind, p);                                                  \
  }                                                                                          \
  extern "C" __global__ void pool_##OPNAME##_##NAME##_k2(const T *x, T *y, i64 *ind,         \
                                                        PoolParams p) {                      \
    pool_kernel<T, A, OP, 2>(x, y, ind, p);                                                  \
  }                                                                                          \
  extern "C" __global__ void pool_##OPNAME##_##NAME##_k3(const T *x, T *y, i64 *ind,         \
                                                        PoolParams p) {                      \
    pool_kernel<T, A, OP, 3>(x, y, ind, p);                                                  \
  }                                                                                          \
  extern "C" __global__ void pool_##OPNAME##_##NAME##_k0(const T *x, T *y, i64 *ind,         \
                                                        PoolParams p) {                      \
    pool_kernel<T, A, OP, 0>(x, y, ind, p);                                                  \
  }

POOL_WINDOW(max, OP_MAX, f32, float, float)
POOL_WINDOW(max, OP_MAX, f64, double, double)
POOL_WINDOW(max, OP_MAX, f16, f16, float)
POOL_WINDOW(max, OP_MAX, bf16, bf16, float)
POOL_WINDOW(max, OP_MAX, i8, signed char, int)
POOL_WINDOW(max, OP_MAX, u8, unsigned char, int)
POOL_WINDOW(avg, OP_AVG, f32, float, float)
POOL_WINDOW(avg, OP_AVG, f64, double, double)
POOL_WINDOW(avg, OP_AVG, f16, f16, float)
POOL_WINDOW(avg, OP_AVG, bf16, bf16, float)
POOL_WINDOW(lp, OP_LP, f32, float, float)
POOL_WINDOW(lp, OP_LP, f64, double, double)
POOL_WINDOW(lp, OP_LP, f16, f16, float)
POOL_WINDOW(lp, OP_LP, bf16, bf16, float)

// ---- global pools ----

struct GlobalParams {
  i64 planes;
  i64 inner;
  i64 C;
  i64 xs_n, xs_c;
  i32 rank;
  i32 contiguous;
  i64 dims[POOL_MAXK];
  i64 strides[POOL_MAXK];
  i64 ys_n, ys_c;
  i64 splits;
  i64 chunk;
  float p, inv_p;
  double p_d, inv_p_d;
};

template <typename A, int OP> struct Red {
  __device__ static __forceinline__ A init() {
    if constexpr (OP == OP_MAX) {
      if constexpr (same_type<A, double>::value) {
        return __longlong_as_double(0xfff0000000000000ULL);
      } else {
        return __int_as_float(0xff800000u);
      }
    } else {
      return (A)0;
    }
  }
  __device__ static __forceinline__ A step(A a, A v, A pw) {
    if constexpr (OP == OP_MAX) {
      return v > a ? v : a;
    } else if constexpr (OP == OP_AVG) {
      return a + v;
    } else {
      return a + lp_pow(v, pw);
    }
  }
  __device__ static __forceinline__ A combine(A a, A b) {
    if constexpr (OP == OP_MAX) {
      return b > a ? b : a;
    } else {
      return a + b;
    }
  }
  __device__ static __forceinline__ A finish(A a, i64 inner, A inv) {
    if constexpr (OP == OP_MAX) {
      return a;
    } else if constexpr (OP == OP_AVG) {
      return a / (A)inner;
    } else {
      return lp_root(a, inv);
    }
  }
};

// This lane's share of elements [lo, hi) of one plane (lanes `lane`, `lane + lanes`, ...).
template <typename T, typename A, int OP>
__device__ __forceinline__ A reduce_range(const T *__restrict__ base, i64 lo, i64 hi, int lane,
                                          int lanes, const GlobalParams &p, A pw) {
  typedef Red<A, OP> R;
  A acc = R::init();
  constexpr int V = 16 / sizeof(T);
  const T *ptr = base + lo;
  // Whole 16-byte words only where every plane (and every part of one) starts on a 16-byte
  // boundary, so that all planes sum in the same order: planes holding the same values give
  // the same result bit for bit (a model whose channels are equal keeps them equal).
  const bool words = p.contiguous && p.xs_c % V == 0 && (p.planes <= p.C || p.xs_n % V == 0) &&
                     (p.splits == 1 || p.chunk % V == 0) && ((size_t)ptr & 15) == 0;
  if (words) {
    const i64 n = hi - lo;
    const uint4 *vp = reinterpret_cast<const uint4 *>(ptr);
    const i64 nv = n / V;
    for (i64 v = lane; v < nv; v += lanes) {
      const uint4 raw = vp[v];
      T vals[V];
      memcpy(vals, &raw, 16);
#pragma unroll
      for (int j = 0; j < V; ++j) acc = R::step(acc, (A)widen(vals[j]), pw);
    }
    for (i64 e = nv * V + lane; e < n; e += lanes) acc = R::step(acc, (A)widen(ptr[e]), pw);
  } else if (p.contiguous) {
    const i64 n = hi - lo;
    for (i64 e = lane; e < n; e += lanes) acc = R::step(acc, (A)widen(ptr[e]), pw);
  } else {
    for (i64 e = lo + lane; e < hi; e += lanes) {
      i64 off = 0, q = e;
      for (int d = p.rank - 1; d >= 0; --d) {
        off += (q % p.dims[d]) * p.strides[d];
        q /= p.dims[d];
      }
      acc = R::step(acc, (A)widen(base[off]), pw);
    }
  }
  return acc;
}

template <typename A, int OP> __device__ __forceinline__ A warp_reduce(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Red<A, OP>::combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One warp per plane (grid-stride over planes).
template <typename T, typename A, int OP>
__device__ __forceinline__ void gpool_warp(const T *__restrict__ x, T *__restrict__ y,
                                           const GlobalParams &p) {
  const int lane = threadIdx.x & 31;
  const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
  const A pw = pick_p<A>(p.p, p.p_d);
  const A inv = pick_p<A>(p.inv_p, p.inv_p_d);
  for (i64 plane = warp; plane < p.planes; plane += warps) {
    const i64 nn = plane / p.C, c = plane % p.C;
    const T *base = x + nn * p.xs_n + c * p.xs_c;
    A acc = reduce_range<T, A, OP>(base, 0, p.inner, lane, 32, p, pw);
    acc = warp_reduce<A, OP>(acc);
    if (lane == 0) y[nn * p.ys_n + c * p.ys_c] = Narrow<T>::from(Red<A, OP>::finish(acc, p.inner, inv));
  }
}

// Block b reduces part (b % splits) of plane (b / splits): `chunk` elements. With one part per
// plane it writes the output, otherwise its partial result to `part[b]`.
template <typename T, typename A, int OP>
__device__ __forceinline__ void gpool_block(const T *__restrict__ x, T *__restrict__ y,
                                            A *__restrict__ part, const GlobalParams &p) {
  __shared__ A shared[32];
  const A pw = pick_p<A>(p.p, p.p_d);
  const A inv = pick_p<A>(p.inv_p, p.inv_p_d);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  for (i64 b = blockIdx.x; b < p.planes * p.splits; b += gridDim.x) {
    const i64 plane = b / p.splits, s = b % p.splits;
    const i64 nn = plane / p.C, c = plane % p.C;
    const i64 lo = s * p.chunk;
    const i64 hi = lo + p.chunk < p.inner ? lo + p.chunk : p.inner;
    const T *base = x + nn * p.xs_n + c * p.xs_c;
    A acc = lo < hi ? reduce_range<T, A, OP>(base, lo, hi, threadIdx.x, blockDim.x, p, pw)
                    : Red<A, OP>::init();
    acc = warp_reduce<A, OP>(acc);
    if (lane == 0) shared[warp] = acc;
    __syncthreads();
    if (warp == 0) {
      acc = lane < warps ? shared[lane] : Red<A, OP>::init();
      acc = warp_reduce<A, OP>(acc);
      if (lane == 0) {
        if (p.splits == 1) {
          y[nn * p.ys_n + c * p.ys_c] = Narrow<T>::from(Red<A, OP>::finish(acc, p.inner, inv));
        } else {
          part[b] = acc;
        }
      }
    }
    __syncthreads();
  }
}

// One thread per plane: combines the plane's parts in order and writes the output.
template <typename T, typename A, int OP>
__device__ __forceinline__ void gpool_finish(const A *__restrict__ part, T *__restrict__ y,
                                             const GlobalParams &p) {
  const A inv = pick_p<A>(p.inv_p, p.inv_p_d);
  GRID_LOOP(plane, p.planes) {
    A acc = Red<A, OP>::init();
    for (i64 s = 0; s < p.splits; ++s) acc = Red<A, OP>::combine(acc, part[plane * p.splits + s]);
    const i64 nn = plane / p.C, c = plane % p.C;
    y[nn * p.ys_n + c * p.ys_c] = Narrow<T>::from(Red<A, OP>::finish(acc, p.inner, inv));
  }
}

#define POOL_GLOBAL(OPNAME, OP, NAME, T, A)                                                  \
  extern "C" __global__ void gpool_warp_##OPNAME##_##NAME(const T *x, T *y, GlobalParams p) { \
    gpool_warp<T, A, OP>(x, y, p);                                                           \
  }                                                                                          \
  extern "C" __global__ void gpool_block_##OPNAME##_##NAME(const T *x, T *y, A *part,        \
                                                          GlobalParams p) {                  \
    gpool_block<T, A, OP>(x, y, part, p);                                                    \
  }                                                                                          \
  extern "C" __global__ void gpool_finish_##OPNAME##_##NAME(const A *part, T *y,             \
                                                           GlobalParams p) {                 \
    gpool_finish<T, A, OP>(part, y, p);                                                      \
  }

POOL_GLOBAL(max, OP_MAX, f32, float, float)
POOL_GLOBAL(max, OP_MAX, f64, double, double)
POOL_GLOBAL(max, OP_MAX, f16, f16, float)
POOL_GLOBAL(max, OP_MAX, bf16, bf16, float)
POOL_GLOBAL(max, OP_MAX, i8, signed char, float)
POOL_GLOBAL(max, OP_MAX, u8, unsigned char, float)
POOL_GLOBAL(avg, OP_AVG, f32, float, float)
POOL_GLOBAL(avg, OP_AVG, f64, double, double)
POOL_GLOBAL(avg, OP_AVG, f16, f16, float)
POOL_GLOBAL(avg, OP_AVG, bf16, bf16, float)
POOL_GLOBAL(lp, OP_LP, f32, float, float)
POOL_GLOBAL(lp, OP_LP, f64, double, double)
POOL_GLOBAL(lp, OP_LP, f16, f16, float)
POOL_GLOBAL(lp, OP_LP, bf16, bf16, float)
