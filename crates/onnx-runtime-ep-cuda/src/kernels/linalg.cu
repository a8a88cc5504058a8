// Linear algebra. Det (opsets 11, 22): one block per matrix of the batch, LU decomposition
// with partial pivoting exactly as the CPU provider does it: per column the row of the largest
// |value| (NaN largest, ties to the last row: Rust's `max_by(total_cmp)`) from the diagonal
// down, a zero pivot ends with 0, row swaps flip the sign, and the rows below are eliminated
// (`a -= f * b` with f = a_rc / pivot, products through __dmul_rn / __fmul_rn so nothing is
// contracted into an FMA the CPU does not do). The matrix lives in shared memory (dynamic)
// or, when it does not fit, in a global scratch block per matrix. Acc is double for float and
// double inputs (the CPU's precision), float for the half types.

#define DET_MAX_BATCH 8

struct DetParams {
  i64 batch; // matrices
  i64 n;     // order
  i32 brank; // batch dims
  i32 _pad;
  i64 bdims[DET_MAX_BATCH];
  i64 xs[DET_MAX_BATCH]; // input strides of the batch dims
  i64 ys[DET_MAX_BATCH]; // output strides
  i64 sr, sc;            // input strides of rows and columns
};

__device__ __forceinline__ double det_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float det_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ u64 det_key(double v) { return (u64)__double_as_longlong(fabs(v)); }
__device__ __forceinline__ u64 det_key(float v) { return (u64)__float_as_uint(fabsf(v)); }

// Lexicographic (key, row) maximum.
__device__ __forceinline__ void det_better(u64 &k, i64 &r, u64 k2, i64 r2) {
  if (k2 > k || (k2 == k && r2 > r)) {
    k = k2;
    r = r2;
  }
}

template <typename T, typename Acc>
__device__ __forceinline__ void det_kernel(const T *__restrict__ x, T *__restrict__ y,
                                           Acc *scratch, const DetParams &p) {
  extern __shared__ __align__(16) unsigned char det_smem[];
  __shared__ u64 wkey[32];
  __shared__ i64 wrow[32];
  __shared__ i64 s_piv;
  const i64 n = p.n;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int lane = tid & 31, warp = tid >> 5, nwarps = (nt + 31) >> 5;
  for (i64 b = blockIdx.x; b < p.batch; b += gridDim.x) {
    Acc *A = scratch != nullptr ? scratch + (i64)blockIdx.x * (n * n + n) : (Acc *)det_smem;
    Acc *fac = A + n * n;
    i64 q = b, xo = 0, yo = 0;
    for (int k = p.brank - 1; k >= 0; --k) {
      const i64 c = q % p.bdims[k];
      q /= p.bdims[k];
      xo += c * p.xs[k];
      yo += c * p.ys[k];
    }
    for (i64 e = tid; e < n * n; e += nt) {
      const i64 i = e / n, j = e % n;
      A[e] = (Acc)widen(x[xo + i * p.sr + j * p.sc]);
    }
    __syncthreads();
    Acc d = (Acc)1;
    bool zero = false;
    for (i64 c = 0; c < n; ++c) {
      // Pivot row: the largest |A[r][c]| for r >= c (NaN largest, ties to the last row).
      u64 k = 0;
      i64 r = -1;
      for (i64 rr = c + tid; rr < n; rr += nt) det_better(k, r, det_key(A[rr * n + c]), rr);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const u64 k2 = __shfl_down_sync(0xffffffffu, k, o);
        const i64 r2 = __shfl_down_sync(0xffffffffu, r, o);
        det_better(k, r, k2, r2);
      }
      if (lane == 0) {
        wkey[warp] = k;
        wrow[warp] = r;
      }
      __syncthreads();
      if (tid == 0) {
        u64 bk = wkey[0];
        i64 br = wrow[0];
        for (int w = 1; w < nwarps; ++w) det_better(bk, br, wkey[w], wrow[w]);
        s_piv = br;
      }
      __syncthreads();
      const i64 pr = s_piv;
      const Acc pv = A[pr * n + c];
      // Every thread has read the pivot before any row moves.
      __syncthreads();
      if (pv == (Acc)0) {
        zero = true;
        break;
      }
      if (pr != c) {
        for (i64 j = tid; j < n; j += nt) {
          const Acc t = A[pr * n + j];
          A[pr * n + j] = A[c * n + j];
          A[c * n + j] = t;
        }
        d = -d;
      }
      __syncthreads();
      const Acc pivot = A[c * n + c];
      d = det_mul(d, pivot);
      for (i64 rr = c + 1 + tid; rr < n; rr += nt) fac[rr] = A[rr * n + c] / pivot;
      __syncthreads();
      const i64 m = n - c - 1;
      for (i64 e = tid; e < m * m; e += nt) {
        const i64 rr = c + 1 + e / m, kk = c + 1 + e % m;
        const Acc f = fac[rr];
        if (f != (Acc)0) A[rr * n + kk] = A[rr * n + kk] - det_mul(f, A[c * n + kk]);
      }
      __syncthreads();
    }
    if (tid == 0) y[yo] = Narrow<T>::from(zero ? (Acc)0 : d);
    __syncthreads();
  }
}

#define DET(NAME, T, ACC)                                                                    \
  extern "C" __global__ void det_##NAME(const T *x, T *y, ACC *scratch, DetParams p) {       \
    det_kernel<T, ACC>(x, y, scratch, p);                                                    \
  }

DET(f32, float, double)
DET(f64, double, double)
DET(f16, f16, float)
DET(bf16, bf16, float)
