// AffineGrid (opset 20): for each batch n and output point (d, h, w) of the 2-D or 3-D grid,
// the homogeneous base point (x, y[, z], 1) in normalized coordinates (x along the last axis;
// align_corners picks the corner or the pixel-centre convention) times theta[n] (k x (k + 1)),
// one thread per point writing its k coordinates. Worked in double exactly as the CPU provider
// does (products through __dmul_rn so nothing is contracted into an FMA), then narrowed to T.

struct AffineParams {
  i64 total;  // N * points
  i64 points; // points per batch
  i32 k;      // 2 or 3
  i32 align;
  i64 dims[3]; // spatial sizes, slowest first
  i64 ts[3];   // theta strides (n, row, column)
  i64 ys[5];   // output strides (n, spatial..., coordinate)
};

__device__ __forceinline__ double ag_base(i64 i, i64 d, bool align) {
  if (align) {
    if (d <= 1) return -1.0;
    return -1.0 + (2.0 * (double)i) / ((double)d - 1.0);
  }
  return -1.0 + (double)(2 * i + 1) / (double)d;
}

template <typename T>
__device__ __forceinline__ void affine_grid(const T *__restrict__ th, T *__restrict__ y,
                                            const AffineParams &p) {
  const int k = p.k;
  GRID_LOOP(t, p.total) {
    const i64 n = t / p.points;
    i64 rem = t % p.points;
    double h[4] = {1.0, 1.0, 1.0, 1.0};
    i64 yo = n * p.ys[0];
    for (int a = k - 1; a >= 0; --a) {
      const i64 i = rem % p.dims[a];
      rem /= p.dims[a];
      h[k - 1 - a] = ag_base(i, p.dims[a], p.align != 0);
      yo += i * p.ys[1 + a];
    }
    const T *tn = th + n * p.ts[0];
    for (int r = 0; r < k; ++r) {
      double acc = 0.0;
      for (int j = 0; j <= k; ++j) {
        acc = acc + __dmul_rn((double)widen(tn[r * p.ts[1] + j * p.ts[2]]), h[j]);
      }
      y[yo + r * p.ys[1 + k]] = Narrow<T>::from(acc);
    }
  }
}

#define AFFINE_GRID(NAME, T)                                                                 \
  extern "C" __global__ void affine_grid_##NAME(const T *th, T *y, AffineParams p) {         \
    affine_grid<T>(th, y, p);                                                                \
  }

AFFINE_GRID(f32, float)
AFFINE_GRID(f64, double)
AFFINE_GRID(f16, f16)
AFFINE_GRID(bf16, bf16)
