// Matrix-product helpers (the float products themselves run on cuBLASLt):
// - gemm_epilogue_<T>: out = act((zero_first ? 0 : alpha * out) + beta * C + bias) over a
//   strided output (activations cuBLASLt cannot fuse, Gemm's broadcast C, K = 0);
// - gemm_epilogue_rows_<T>: the same without C over rows of 16-byte-aligned vectors (the
//   common case: MatMulBias's GELU after the product), 16 bytes a load and a store;
// - igemm_<T>: integer MatMul/Gemm/Einsum with wrapping arithmetic (8- to 64-bit integers);
// - mmint_<A>_<B>: MatMulInteger, (A - a_zp) @ (B - b_zp) in int32;
// - qlmm_<A>_<B>_<Y>: QLinearMatMul, requantized with round-half-to-even and saturation.
// Metadata comes by value (EpiParams / IGemmParams mirrored in src/ops/gemm/*.rs).

#define EPI_RANK 10

struct EpiParams {
  i64 n;
  i32 rank;
  i32 act;
  i64 dims[EPI_RANK];
  i64 so[EPI_RANK];
  i64 sc[EPI_RANK];
  i64 bias_stride;
  i32 zero_first;
  i32 has_c;
  i32 has_bias;
  i32 _pad;
  double alpha;
  double beta;
  double p0;
  double p1;
  u64 out;
  u64 c;
  u64 bias;
};

template <typename T, typename A> __device__ void epilogue_body(const EpiParams &p) {
  T *out = (T *)p.out;
  const T *c = (const T *)p.c;
  const T *bias = (const T *)p.bias;
  const A alpha = (A)p.alpha, beta = (A)p.beta, p0 = (A)p.p0, p1 = (A)p.p1;
  GRID_LOOP(i, p.n) {
    i64 rem = i, oo = 0, oc = 0, col = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      i64 q = rem / p.dims[d];
      i64 x = rem - q * p.dims[d];
      rem = q;
      oo += x * p.so[d];
      oc += x * p.sc[d];
      if (d == p.rank - 1) col = x;
    }
    A v = p.zero_first ? (A)0 : alpha * (A)widen(out[oo]);
    if (p.has_c) v += beta * (A)widen(c[oc]);
    if (p.has_bias) v += (A)widen(bias[col * p.bias_stride]);
    out[oo] = convert<T>(activate<A>(v, p.act, p0, p1));
  }
}

// Rows of `cols` elements `ld` apart, cols and ld multiples of V = 16 / sizeof(T), the output
// and bias 16-byte aligned (the host checks).
struct EpiRows {
  i64 rows, cols, ld, bias_stride;
  i32 act, zero_first, has_bias, _pad;
  double alpha, p0, p1;
  u64 out, bias;
};

// One instantiation per activation the loop is compiled for (ACT < 0: any, read from p).
template <typename T, typename A, int ACT>
__device__ void epilogue_rows_loop(const EpiRows &p) {
  constexpr int V = 16 / sizeof(T);
  union Pack {
    uint4 u;
    T e[V];
  };
  const A alpha = (A)p.alpha, p0 = (A)p.p0, p1 = (A)p.p1;
  const int act = ACT < 0 ? p.act : ACT;
  const T *bias = (const T *)p.bias;
  const i64 per_row = p.cols / V, total = p.rows * per_row;
  auto one = [&](i64 r, i64 c0) {
    uint4 *o = (uint4 *)((T *)p.out + r * p.ld + c0);
    Pack x;
    x.u = *o;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      A v = p.zero_first ? (A)0 : alpha * (A)widen(x.e[j]);
      if (p.has_bias) v += (A)widen(bias[(c0 + j) * p.bias_stride]);
      x.e[j] = convert<T>(activate<A>(v, act, p0, p1));
    }
    *o = x.u;
  };
  if (total < (1ll << 31)) {
    // 32-bit index arithmetic (a 64-bit division per vector costs more than its math).
    const unsigned pr = (unsigned)per_row, n = (unsigned)total;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
      const unsigned r = i / pr;
      one(r, (i64)(i - r * pr) * V);
    }
  } else {
    GRID_LOOP(i, total) {
      const i64 r = i / per_row;
      one(r, (i - r * per_row) * V);
    }
  }
}

// The activation fixed at compile time for the common ones (no per-element dispatch).
template <typename T, typename A> __device__ void epilogue_rows_body(const EpiRows &p) {
  switch (p.act) {
  case 0: epilogue_rows_loop<T, A, 0>(p); break;
  case 1: epilogue_rows_loop<T, A, 1>(p); break;
  case 9: epilogue_rows_loop<T, A, 9>(p); break;
  case 10: epilogue_rows_loop<T, A, 10>(p); break;
  default: epilogue_rows_loop<T, A, -1>(p); break;
  }
}

#define EPILOGUE(tag, T, A)                                                                  \
  extern "C" __global__ void gemm_epilogue_##tag(EpiParams p) { epilogue_body<T, A>(p); }    \
  extern "C" __global__ void gemm_epilogue_rows_##tag(EpiRows p) {                          \
    epilogue_rows_body<T, A>(p);                                                             \
  }
EPILOGUE(f32, float, float)
EPILOGUE(f64, double, double)
EPILOGUE(f16, f16, float)
EPILOGUE(bf16, bf16, float)

// ---- integer products ----

struct IGemmParams {
  i64 m, n, k, batch;
  i32 rank, has_c;
  i32 za_code, zb_code;  // ONNX dtype codes of the zero points (unused when absent)
  i32 as_code, bs_code;  // ... of the scales (QLinearMatMul)
  i32 ys_code, yz_code;  // ... of y_scale and y_zero_point
  i64 dims[MAX_RANK];    // merged output batch axes
  i64 sa[MAX_RANK];      // batch strides of A, B, the output and the zero points
  i64 sb[MAX_RANK];
  i64 so[MAX_RANK];
  i64 sza[MAX_RANK];
  i64 szb[MAX_RANK];
  i64 a_rs, a_cs, b_rs, b_cs, o_rs, o_cs;
  i64 za_rs;  // A's zero point along rows
  i64 zb_cs;  // B's zero point along columns
  i64 c_rs, c_cs;   // Gemm's C over [M, N] (0 where broadcast)
  i64 as_rs, bs_cs; // scales along rows of A / columns of B
  u64 alpha, beta;  // Gemm's factors as bit patterns of the element type
  u64 a, b, out, za, zb, c, a_scale, b_scale, y_scale, y_zp;
};

#define IG_BM 64
#define IG_BN 64
#define IG_BK 16
#define IG_THREADS 256

__device__ __forceinline__ float load_as_f32(const void *p, i64 off, int code) {
  switch (code) {
  case 10: return __half2float(((const f16 *)p)[off]);
  case 16: return __bfloat162float(((const bf16 *)p)[off]);
  case 11: return (float)((const double *)p)[off];
  default: return ((const float *)p)[off];
  }
}

// MODE 0: integer MatMul/Gemm on T (wrapping, via the unsigned ACC); 1: MatMulInteger (int32
// out, zero points subtracted as the tiles load); 2: QLinearMatMul (64-bit exact sums).
// Each 256-thread block computes a 64 x 64 output tile of one batch (grid-z loops batches);
// thread (ty, tx) owns rows ty + 16 i and columns tx + 16 j.
template <typename TA, typename TB, typename ACC, int MODE, typename TO>
__device__ void igemm_body(const IGemmParams &p) {
  __shared__ ACC As[IG_BK][IG_BM + 1];
  __shared__ ACC Bs[IG_BK][IG_BN + 1];
  const TA *A = (const TA *)p.a;
  const TB *B = (const TB *)p.b;
  TO *O = (TO *)p.out;
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const i64 m0 = (i64)blockIdx.y * IG_BM;
  const i64 n0 = (i64)blockIdx.x * IG_BN;
  for (i64 z = blockIdx.z; z < p.batch; z += gridDim.z) {
    i64 rem = z, oa = 0, ob = 0, oo = 0, oza = 0, ozb = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      i64 q = rem / p.dims[d];
      i64 x = rem - q * p.dims[d];
      rem = q;
      oa += x * p.sa[d];
      ob += x * p.sb[d];
      oo += x * p.so[d];
      oza += x * p.sza[d];
      ozb += x * p.szb[d];
    }
    ACC acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = (ACC)0;
    for (i64 k0 = 0; k0 < p.k; k0 += IG_BK) {
#pragma unroll
      for (int t = 0; t < (IG_BM * IG_BK) / IG_THREADS; ++t) {
        const int idx = tid + t * IG_THREADS;
        const int lk = idx % IG_BK, lr = idx / IG_BK;
        const i64 r = m0 + lr, kk = k0 + lk;
        ACC v = (ACC)0;
        if (r < p.m && kk < p.k) {
          const TA x = A[oa + r * p.a_rs + kk * p.a_cs];
          if constexpr (MODE == 0) {
            v = (ACC)x;
          } else {
            const i64 zp =
                p.za ? load_as_i64((const void *)p.za, oza + r * p.za_rs, p.za_code) : 0;
            v = (ACC)((i64)x - zp);
          }
        }
        As[lk][lr] = v;
      }
#pragma unroll
      for (int t = 0; t < (IG_BN * IG_BK) / IG_THREADS; ++t) {
        const int idx = tid + t * IG_THREADS;
        const int ln = idx % IG_BN, lk = idx / IG_BN;
        const i64 c = n0 + ln, kk = k0 + lk;
        ACC v = (ACC)0;
        if (c < p.n && kk < p.k) {
          const TB x = B[ob + kk * p.b_rs + c * p.b_cs];
          if constexpr (MODE == 0) {
            v = (ACC)x;
          } else {
            const i64 zp =
                p.zb ? load_as_i64((const void *)p.zb, ozb + c * p.zb_cs, p.zb_code) : 0;
            v = (ACC)((i64)x - zp);
          }
        }
        Bs[lk][ln] = v;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < IG_BK; ++kk) {
        ACC av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const i64 r = m0 + ty + 16 * i, c = n0 + tx + 16 * j;
        if (r >= p.m || c >= p.n) continue;
        TO *dst = O + oo + r * p.o_rs + c * p.o_cs;
        if constexpr (MODE == 0) {
          ACC v = acc[i][j] * (ACC)p.alpha;
          if (p.has_c) v += (ACC)p.beta * (ACC)((const TO *)p.c)[r * p.c_rs + c * p.c_cs];
          *dst = (TO)v;
        } else if constexpr (MODE == 1) {
          *dst = (TO)(int)(u32)acc[i][j];
        } else {
          // As the CPU provider: f32(sum) * f32(sa * sb / ys), rounded half to even, plus the
          // zero point, saturated; NaN gives 0.
          const float sa = load_as_f32((const void *)p.a_scale, r * p.as_rs, p.as_code);
          const float sb = load_as_f32((const void *)p.b_scale, c * p.bs_cs, p.bs_code);
          const float ys = load_as_f32((const void *)p.y_scale, 0, p.ys_code);
          const float s = __fdiv_rn(__fmul_rn(sa, sb), ys);
          const float f = __fmul_rn((float)(i64)acc[i][j], s);
          TO q = (TO)0;
          if (f == f) {
            double d = (double)rintf(f) + (double)load_as_i64((const void *)p.y_zp, 0, p.yz_code);
            const double lo = (double)IntLimits<TO>::lo(), hi = (double)IntLimits<TO>::hi();
            d = d < lo ? lo : (d > hi ? hi : d);
            q = (TO)(int)d;
          }
          *dst = q;
        }
      }
    }
  }
}

#define IGEMM(tag, T, ACC)                                                                   \
  extern "C" __global__ void __launch_bounds__(IG_THREADS) igemm_##tag(IGemmParams p) {     \
    igemm_body<T, T, ACC, 0, T>(p);                                                          \
  }
IGEMM(i32, int, u32)
IGEMM(u32, unsigned int, u32)
IGEMM(i64, long long, u64)
IGEMM(u64, unsigned long long, u64)
// 8- and 16-bit element types (Einsum): 32-bit wrapping sums truncate to the element type.
IGEMM(i8, signed char, u32)
IGEMM(u8, unsigned char, u32)
IGEMM(i16, short, u32)
IGEMM(u16, unsigned short, u32)

#define MMINT(ta, TA, tb, TB)                                                                \
  extern "C" __global__ void __launch_bounds__(IG_THREADS) mmint_##ta##_##tb(IGemmParams p) { \
    igemm_body<TA, TB, u32, 1, int>(p);                                                      \
  }
MMINT(u8, unsigned char, u8, unsigned char)
MMINT(u8, unsigned char, i8, signed char)
MMINT(i8, signed char, u8, unsigned char)
MMINT(i8, signed char, i8, signed char)

#define QLMM(ta, TA, tb, TB, ty, TY)                                                         \
  extern "C" __global__ void __launch_bounds__(IG_THREADS)                                   \
      qlmm_##ta##_##tb##_##ty(IGemmParams p) {                                               \
    igemm_body<TA, TB, u64, 2, TY>(p);                                                       \
  }
#define QLMM_Y(ta, TA, tb, TB)                                                               \
  QLMM(ta, TA, tb, TB, u8, unsigned char)                                                    \
  QLMM(ta, TA, tb, TB, i8, signed char)
QLMM_Y(u8, unsigned char, u8, unsigned char)
QLMM_Y(u8, unsigned char, i8, signed char)
QLMM_Y(i8, signed char, u8, unsigned char)
QLMM_Y(i8, signed char, i8, signed char)
