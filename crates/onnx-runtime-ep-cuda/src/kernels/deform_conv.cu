// DeformConv (opsets 19, 22), mirroring the CPU provider
// (onnx-runtime-ep-cpu/src/ops/nn/conv/deform_conv.rs): deformable im2col, then one product
// per (batch, group).
//  dc_pack_w_T: W [oc, ic / group, k...] (any strides) to a dense [oc, (ic / group) * kk]
//    matrix of the accumulation type A (float for float / float16 / bfloat16, double for
//    double).
//  dc_im2col_T: one thread per (batch, offset group, kernel tap, output position) works out
//    the displaced sampling point (position * stride - pad + tap * dilation + offset) and
//    the mask value once, then for every channel of its offset group the multilinear sample
//    (corners with a zero weight or outside the input are skipped, as on the CPU), in double:
//    col[batch][channel * kk + tap][position] = mask * sample.
//  dc_gemm_T: Y[b, g * ocg + o, pos] = sum_r Wp[g * ocg + o][r] * col[b][g * icg * kk + r][pos]
//    + B, a 64 x 64 shared-memory tiled product (4 x 4 outputs per thread) in A, written to
//    Y's strides.

#define DC_SP 6 // spatial axes (MAX_RANK - 2)
#define DC_BM 64
#define DC_BN 64
#define DC_BK 16

struct DcParams {
  i64 nd; // spatial axes
  i64 ic, oc, g, og, icg, ocg, ico, kk, npos;
  i64 b0, nb; // the chunk's first batch and its batch count
  i64 in_sp[DC_SP], out_sp[DC_SP], ker[DC_SP], str[DC_SP], pad[DC_SP], dil[DC_SP];
  i64 xs[MAX_RANK], ws[MAX_RANK], offs[MAX_RANK], ms[MAX_RANK], ys[MAX_RANK];
  i64 bs; // bias stride
  i32 has_mask, has_bias;
};

template <typename T, typename A>
__device__ void dc_pack_w(const T *__restrict__ w, A *__restrict__ wp, const DcParams &p) {
  const i64 r_len = p.icg * p.kk;
  GRID_LOOP(e, p.oc * r_len) {
    const i64 o = e / r_len;
    const i64 r = e % r_len;
    const i64 c = r / p.kk;
    i64 k = r % p.kk;
    i64 off = o * p.ws[0] + c * p.ws[1];
    for (int d = (int)p.nd - 1; d >= 0; --d) {
      off += (k % p.ker[d]) * p.ws[2 + d];
      k /= p.ker[d];
    }
    wp[e] = (A)widen(w[off]);
  }
}

template <typename T, typename A>
__device__ void dc_im2col(const T *__restrict__ x, const T *__restrict__ offset,
                          const T *__restrict__ mask, A *__restrict__ col, const DcParams &p) {
  const i64 total = p.nb * p.og * p.kk * p.npos;
  GRID_LOOP(e, total) {
    const i64 pos = e % p.npos;
    const i64 k = (e / p.npos) % p.kk;
    const i64 ogi = (e / (p.npos * p.kk)) % p.og;
    const i64 bl = e / (p.npos * p.kk * p.og);
    const i64 b = p.b0 + bl;
    i64 oidx[DC_SP], kidx[DC_SP];
    {
      i64 q = pos, r = k;
      for (int d = (int)p.nd - 1; d >= 0; --d) {
        oidx[d] = q % p.out_sp[d];
        q /= p.out_sp[d];
        kidx[d] = r % p.ker[d];
        r /= p.ker[d];
      }
    }
    i64 sp_off = 0, sp_mask = 0;
    for (int d = 0; d < (int)p.nd; ++d) {
      sp_off += oidx[d] * p.offs[2 + d];
      sp_mask += oidx[d] * p.ms[2 + d];
    }
    double lo[DC_SP], frac[DC_SP];
    for (int d = 0; d < (int)p.nd; ++d) {
      const i64 ch = ((ogi * p.kk + k) * p.nd + d);
      const double o = (double)widen(offset[b * p.offs[0] + ch * p.offs[1] + sp_off]);
      const double pd = ((double)(oidx[d] * p.str[d]) - (double)p.pad[d]) +
                        (double)(kidx[d] * p.dil[d]) + o;
      lo[d] = floor(pd);
      frac[d] = pd - lo[d];
    }
    const double m =
        p.has_mask ? (double)widen(mask[b * p.ms[0] + (ogi * p.kk + k) * p.ms[1] + sp_mask])
                   : 1.0;
    const int corners = 1 << (int)p.nd;
    for (i64 c = ogi * p.ico; c < (ogi + 1) * p.ico; ++c) {
      const T *plane = x + b * p.xs[0] + c * p.xs[1];
      double acc = 0.0;
      for (int corner = 0; corner < corners; ++corner) {
        double w = 1.0;
        i64 off = 0;
        bool skip = false;
        for (int d = 0; d < (int)p.nd; ++d) {
          const bool hi = (corner >> d) & 1;
          const double cc = hi ? lo[d] + 1.0 : lo[d];
          const double wd = hi ? frac[d] : 1.0 - frac[d];
          if (wd == 0.0 || cc < 0.0 || cc >= (double)p.in_sp[d]) {
            skip = true;
            break;
          }
          w = w * wd;
          off += (cc == cc ? (i64)cc : 0) * p.xs[2 + d];
        }
        if (skip) continue;
        acc += __dmul_rn(w, (double)widen(plane[off]));
      }
      col[((bl * p.ic + c) * p.kk + k) * p.npos + pos] = (A)(m * acc);
    }
  }
}

template <typename T, typename A>
__device__ void dc_gemm(const A *__restrict__ wp, const A *__restrict__ col,
                        const T *__restrict__ bias, T *__restrict__ y, const DcParams &p) {
  __shared__ A as[DC_BK][DC_BM];
  __shared__ A bs[DC_BK][DC_BN];
  const i64 r_len = p.icg * p.kk;
  const i64 bl = blockIdx.z / p.g;
  const i64 gi = blockIdx.z % p.g;
  const i64 o0 = (i64)blockIdx.y * DC_BM;
  const i64 p0 = (i64)blockIdx.x * DC_BN;
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const A *wa = wp + gi * p.ocg * r_len;
  const A *cb = col + (bl * p.ic + gi * p.icg) * p.kk * p.npos;
  A acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = (A)0;
  for (i64 k0 = 0; k0 < r_len; k0 += DC_BK) {
    for (int l = 0; l < 4; ++l) {
      const int idx = tid + l * 256;
      const int row = idx / DC_BK, kc = idx % DC_BK;
      const i64 o = o0 + row, r = k0 + kc;
      as[kc][row] = (o < p.ocg && r < r_len) ? wa[o * r_len + r] : (A)0;
      const int kr = idx / DC_BN, cc = idx % DC_BN;
      const i64 rr = k0 + kr, q = p0 + cc;
      bs[kr][cc] = (rr < r_len && q < p.npos) ? cb[rr * p.npos + q] : (A)0;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < DC_BK; ++kk) {
      A a[4], bv[4];
      for (int i = 0; i < 4; ++i) a[i] = as[kk][ty * 4 + i];
      for (int j = 0; j < 4; ++j) bv[j] = bs[kk][tx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * bv[j];
    }
    __syncthreads();
  }
  const i64 b = p.b0 + bl;
  for (int i = 0; i < 4; ++i) {
    const i64 o = o0 + ty * 4 + i;
    if (o >= p.ocg) continue;
    const i64 oc = gi * p.ocg + o;
    const A add = p.has_bias ? (A)widen(bias[oc * p.bs]) : (A)0;
    for (int j = 0; j < 4; ++j) {
      const i64 q = p0 + tx + 16 * j;
      if (q >= p.npos) continue;
      i64 off = b * p.ys[0] + oc * p.ys[1], r = q;
      for (int d = (int)p.nd - 1; d >= 0; --d) {
        off += (r % p.out_sp[d]) * p.ys[2 + d];
        r /= p.out_sp[d];
      }
      y[off] = Narrow<T>::from(acc[i][j] + add);
    }
  }
}

#define DC_KERNELS(NAME, T, A)                                                               \
  extern "C" __global__ void dc_pack_w_##NAME(const T *__restrict__ w, A *__restrict__ wp,   \
                                              DcParams p) {                                  \
    dc_pack_w<T, A>(w, wp, p);                                                               \
  }                                                                                          \
  extern "C" __global__ void dc_im2col_##NAME(const T *__restrict__ x,                       \
                                              const T *__restrict__ offset,                  \
                                              const T *__restrict__ mask,                    \
                                              A *__restrict__ col, DcParams p) {             \
    dc_im2col<T, A>(x, offset, mask, col, p);                                                \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(256)                                          \
      dc_gemm_##NAME(const A *__restrict__ wp, const A *__restrict__ col,                    \
                     const T *__restrict__ bias, T *__restrict__ y, DcParams p) {            \
    dc_gemm<T, A>(wp, col, bias, y, p);                                                      \
  }

DC_KERNELS(f32, float, float)
DC_KERNELS(f64, double, double)
DC_KERNELS(f16, f16, float)
DC_KERNELS(bf16, bf16, float)
