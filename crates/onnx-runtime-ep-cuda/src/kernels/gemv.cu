// The decode product: Y[m, :] = act(A[m, :] B + bias) for at most 4 rows of A and a
// row-major B [K, N] (ONNX MatMul's weight layout: a row of B is N contiguous values) of
// float32, float16 or bfloat16, float32 accumulation. cuBLASLt's kernels for M = 1 leave most
// of the device idle on decode shapes (24 blocks for a 1536 x 2048 product on 132
// multiprocessors, 0.8-1.1 TB/s); this one reads B at bandwidth.
//
// gemv_<T>_m<MR>_c<CG>: a block is a tile of CG x V columns (V = 16 / sizeof(T)) and a split
// of K. Thread (r, c) = (tid / CG, tid % CG) reads 16 bytes of row k of B (columns n0 + V c
// ..) for k = k0 + r, k0 + r + L, ... of its split (L = 256 / CG row lanes), GV_U rows of
// loads in flight, and keeps MR x V float sums. Narrow tiles (CG = 2: 32 bytes of a row)
// give small products enough blocks to read all of K in one round of loads without splitting
// it; wide ones (CG = 8: 128 bytes) suit many columns. The row lanes of a block are added
// with shuffles (those of a warp) and shared memory (the eight warps), in a fixed order. With
// one split the block writes Y;
// with several each writes its float32 partial sums to `part`, and the last split of a tile
// to finish (a counter per tile, set back to zero for the next launch or graph replay) adds
// the splits in split order and writes Y, so runs give the same bytes.
//
// gemv_<T>_m<MR>_glu: the internal MatMulSiluMul, two weights of one shape read by the same
// threads, Y = silu(A Bg) * (A Bu), each product rounded to T first as the unfused graph does.
//
// B's rows and base are 16-byte aligned and N a multiple of V (the host checks); A is read
// element by element at any row stride.

#define GV_THREADS 256
#define GV_U 8

struct GemvParams {
  const void *a;
  const void *b;
  const void *b2; // the _glu variants' second weight
  const void *bias;
  void *y;
  float *part;  // [splits][m][NS][n] float32 partial sums (splits > 1)
  u32 *count;   // one counter per column tile (splits > 1)
  i64 a_rs, b_rs, y_rs;
  i32 m, n, k, kchunk; // rows of A, columns, K, rows of K per split
  i32 splits, act;
  float p0, p1; // the activation's parameters
};

template <typename T> struct GvVec {
  static const int V = 16 / sizeof(T);
  __device__ static __forceinline__ void widen_all(const uint4 &w, float (&f)[V]) {
    T e[V];
    memcpy(&e[0], &w, 16);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = widen(e[i]);
  }
};

template <typename T, int MR, bool G, int CG> __device__ void gemv(const GemvParams &p) {
  constexpr int V = GvVec<T>::V;
  constexpr int COLS = CG * V;         // columns of a tile
  constexpr int GV_LANES = GV_THREADS / CG; // row lanes
  constexpr int NS = G ? 2 : 1;
  constexpr int U = G ? GV_U / 2 : GV_U;
  __shared__ float red[GV_THREADS / 32][MR * NS][COLS];
  __shared__ float tot[MR * NS][COLS];
  __shared__ int last;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r = tid / CG, c = tid % CG;
  const int tile = blockIdx.x, split = blockIdx.y;
  const int n0 = tile * COLS;
  const int nc = n0 + c * V; // this thread's first column
  const bool live = nc < p.n;
  const int k0 = split * p.kchunk, k1 = min(p.k, k0 + p.kchunk);
  const T *bcol[NS];
  bcol[0] = reinterpret_cast<const T *>(p.b) + nc;
  if (G) bcol[NS - 1] = reinterpret_cast<const T *>(p.b2) + nc;

  float acc[NS][MR][V];
#pragma unroll
  for (int q = 0; q < NS; ++q)
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
      for (int i = 0; i < V; ++i) acc[q][m][i] = 0.f;

  // B is a weight: the first rows are loaded before pdl_wait, so under a programmatic
  // dependent launch their DRAM round trip overlaps the kernel ahead. Nothing else is read
  // before it.
  uint4 w[NS][U];
  int kk = k0 + r;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int k = kk + u * GV_LANES;
#pragma unroll
    for (int q = 0; q < NS; ++q)
      w[q][u] = live && k < k1 ? __ldg(reinterpret_cast<const uint4 *>(bcol[q] + (i64)k * p.b_rs))
                               : make_uint4(0, 0, 0, 0);
  }
  pdl_wait();
  const T *a = reinterpret_cast<const T *>(p.a);
  for (; kk < k1; kk += U * GV_LANES) {
    if (kk != k0 + r) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int k = kk + u * GV_LANES;
#pragma unroll
        for (int q = 0; q < NS; ++q)
          w[q][u] = live && k < k1
                        ? __ldg(reinterpret_cast<const uint4 *>(bcol[q] + (i64)k * p.b_rs))
                        : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = kk + u * GV_LANES;
      if (k >= k1) break;
      float x[MR];
#pragma unroll
      for (int m = 0; m < MR; ++m) x[m] = m < p.m ? widen(__ldg(a + (i64)m * p.a_rs + k)) : 0.f;
#pragma unroll
      for (int q = 0; q < NS; ++q) {
        float f[V];
        GvVec<T>::widen_all(w[q][u], f);
#pragma unroll
        for (int m = 0; m < MR; ++m)
#pragma unroll
          for (int i = 0; i < V; ++i) acc[q][m][i] = fmaf(x[m], f[i], acc[q][m][i]);
      }
    }
  }
  pdl_trigger();

  // The row lanes of a warp (lanes c, c + CG, ...), then the eight warps.
#pragma unroll
  for (int q = 0; q < NS; ++q)
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        float v = acc[q][m][i];
#pragma unroll
        for (int off = CG; off < 32; off <<= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        acc[q][m][i] = v;
      }
  if (lane < CG) {
#pragma unroll
    for (int q = 0; q < NS; ++q)
#pragma unroll
      for (int m = 0; m < MR; ++m)
#pragma unroll
        for (int i = 0; i < V; ++i) red[warp][q * MR + m][lane * V + i] = acc[q][m][i];
  }
  __syncthreads();
  for (int o = tid; o < MR * NS * COLS; o += GV_THREADS) {
    const int row = o / COLS, col = o % COLS;
    float v = 0.f;
#pragma unroll
    for (int w8 = 0; w8 < GV_THREADS / 32; ++w8) v += red[w8][row][col];
    tot[row][col] = v;
  }
  __syncthreads();

  const int ncols = min(COLS, p.n - n0);
  if (p.splits > 1) {
    for (int o = tid; o < MR * NS * COLS; o += GV_THREADS) {
      const int row = o / COLS, col = o % COLS, q = row / MR, m = row % MR;
      if (m < p.m && col < ncols)
        __stcg(p.part + (((i64)split * p.m + m) * NS + q) * p.n + n0 + col, tot[row][col]);
    }
    __threadfence(); // the partials visible device-wide before the count
    __syncthreads();
    if (tid == 0) {
      const u32 done = atomicAdd(p.count + tile, 1u) + 1u;
      last = done == (u32)p.splits;
      if (last) p.count[tile] = 0u; // every split has counted: the next launch starts at zero
      __threadfence();
    }
    __syncthreads();
    if (!last) return;
    for (int o = tid; o < MR * NS * COLS; o += GV_THREADS) {
      const int row = o / COLS, col = o % COLS, q = row / MR, m = row % MR;
      if (m >= p.m || col >= ncols) continue;
      float v = 0.f;
      for (int s = 0; s < p.splits; ++s)
        v += __ldcg(p.part + (((i64)s * p.m + m) * NS + q) * p.n + n0 + col);
      tot[row][col] = v;
    }
    __syncthreads();
  }
  T *y = reinterpret_cast<T *>(p.y);
  for (int o = tid; o < MR * COLS; o += GV_THREADS) {
    const int m = o / COLS, col = o % COLS, n = n0 + col;
    if (m >= p.m || col >= ncols) continue;
    float v = tot[m][col];
    if (G) {
      const float gt = widen(convert<T>(v)), up = widen(convert<T>(tot[MR + m][col]));
      v = widen(convert<T>(gt / (1.f + expf(-gt)))) * up;
    } else {
      if (p.bias != nullptr) v += widen(reinterpret_cast<const T *>(p.bias)[n]);
      v = activate<float>(v, p.act, p.p0, p.p1);
    }
    y[(i64)m * p.y_rs + n] = convert<T>(v);
  }
}

#define GEMV(T, TN, MR, CG)                                                                   \
  extern "C" __global__ void __launch_bounds__(GV_THREADS)                                    \
      gemv_##TN##_m##MR##_c##CG(GemvParams p) {                                               \
    gemv<T, MR, false, CG>(p);                                                                \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(GV_THREADS)                                    \
      gemv_##TN##_m##MR##_c##CG##_glu(GemvParams p) {                                         \
    gemv<T, MR, true, CG>(p);                                                                 \
  }
#define GEMV_CG(T, TN, MR) GEMV(T, TN, MR, 2) GEMV(T, TN, MR, 8)
#define GEMV_ALL(T, TN) GEMV_CG(T, TN, 1) GEMV_CG(T, TN, 2) GEMV_CG(T, TN, 4)
GEMV_ALL(float, f32)
GEMV_ALL(f16, f16)
GEMV_ALL(bf16, bf16)

// The prefill path of MatMulSiluMul (the two products on cuBLASLt, gate in y, up in `up`):
// y = silu(y) * up over n contiguous elements, SiLU rounded to T first as the unfused graph.
template <typename T> __device__ void silu_mul(T *y, const T *up, i64 n) {
  GRID_LOOP(i, n) {
    const float g = widen(y[i]);
    y[i] = convert<T>(widen(convert<T>(g / (1.f + expf(-g)))) * widen(up[i]));
  }
}
#define SILU_MUL(T, TN)                                                                      \
  extern "C" __global__ void silu_mul_##TN(T *y, const T *up, i64 n) { silu_mul<T>(y, up, n); }
SILU_MUL(float, f32)
SILU_MUL(f16, f16)
SILU_MUL(bf16, bf16)
