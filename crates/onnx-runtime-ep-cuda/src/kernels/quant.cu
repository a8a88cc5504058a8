// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear. One source, three module
// variants picked by a define:
//   QUANT_Q   QuantizeLinear: `quantize_to_<q>` for every quantized output type (x is
//             float32/float16/bfloat16/double/int32, picked at run time by its dtype code);
//   QUANT_DQ  DequantizeLinear: `dequantize_<q>` for every quantized input type (y is
//             float32/float16/bfloat16/double, picked at run time);
//   QUANT_DYN DynamicQuantizeLinear: `dql_partial` (per-block min/max) and `dql_quantize`.
//
// Semantics follow the CPU provider (crates/onnx-runtime-ep-cpu/src/ops/nn/quant): x / scale
// is divided in float32; integer outputs round half to even, add the zero point and saturate
// (NaN gives 0); float8/float4 outputs add the zero point in double and round to the nearest
// code, ties to the even code, saturating (or going to NaN/inf) past the largest finite value.
// Dequantization computes (x - zero_point) in double (exact), then multiplies by the scale in
// float32 (double for double outputs). Packed 4-bit and 2-bit types hold the lower-index element
// in the low bits of each byte.
//
// Work split: each thread handles chunks of 8 consecutive elements (row-major), so a packed
// output byte is always written by one thread. Contiguous tensors take index arithmetic and,
// when aligned, vector loads and stores of whole chunks; others unravel each index over the
// strides.

#define QCHUNK 8

// ---- quantized element codecs ----

// Integer types. `raw` holds the element's BITS low bits.
template <int BITS, bool SIGNED> struct QInt {
  static constexpr int bits = BITS;
  static constexpr bool is_int = true;
  static constexpr bool wide = BITS == 32;
  __device__ static __forceinline__ double decode(u32 raw) {
    if constexpr (BITS == 32) {
      return SIGNED ? (double)(int)raw : (double)raw;
    } else if constexpr (SIGNED) {
      int shift = 32 - BITS;
      return (double)(((int)(raw << shift)) >> shift);
    } else {
      return (double)raw;
    }
  }
  // q = x / scale (float32), z = the zero point's value.
  __device__ static __forceinline__ u32 quantize(float q, float z, bool) {
    if (q != q) return 0u;
    const float lo = SIGNED ? -(float)(1ll << (BITS - 1)) : 0.0f;
    const float hi = SIGNED ? (float)((1ll << (BITS - 1)) - 1) : (float)((1ll << BITS) - 1);
    float r = rintf(q) + z;
    r = r < lo ? lo : (r > hi ? hi : r);
    return ((u32)(int)r) & (u32)((1ull << BITS) - 1);
  }
};

__host__ __device__ constexpr double qpow2(int e) {
  double r = 1.0;
  for (int i = 0; i < e; ++i) r *= 2.0;
  for (int i = 0; i > e; --i) r *= 0.5;
  return r;
}

// 2^e for e in the normal double range, built from its bits.
__device__ __forceinline__ double pow2d(int e) {
  return __longlong_as_double((long long)(1023 + e) << 52);
}

#define QNAN __longlong_as_double(0x7ff8000000000000ll)
#define QINF __longlong_as_double(0x7ff0000000000000ll)

// Minifloats: EB exponent bits, MB mantissa bits, exponent bias; KIND 0 = e4m3fn (only
// S.1111.111 is NaN), 1 = fnuz (0x80 is the only NaN, no negative zero), 2 = IEEE-like e5m2
// (inf and NaN in the top exponent), 3 = float4e2m1 (no NaN or inf). MAX_CODE is the largest
// finite positive code.
template <int EB, int MB, int BIAS, int KIND, u32 MAX_CODE> struct QMini {
  static constexpr int bits = 1 + EB + MB;
  static constexpr bool is_int = false;
  static constexpr bool wide = false;
  static constexpr u32 sign_bit = 1u << (bits - 1);
  static constexpr u32 nan_code = KIND == 1 ? sign_bit : ((1u << bits) - 1);

  __device__ static __forceinline__ double decode(u32 c) {
    const u32 e = (c >> MB) & ((1u << EB) - 1);
    const u32 f = c & ((1u << MB) - 1);
    const u32 emax = (1u << EB) - 1;
    if (KIND == 1 && c == sign_bit) return QNAN;
    if (KIND == 2 && e == emax) return f != 0 ? QNAN : ((c & sign_bit) ? -QINF : QINF);
    if (KIND == 0 && e == emax && f == (1u << MB) - 1) return QNAN;
    // Subnormal codes (e == 0) scale the mantissa by 2^(1 - BIAS - MB) like e == 1 does.
    const double m = (double)(e == 0 ? f : f + (1u << MB));
    const double mag = m * pow2d((int)(e == 0 ? 1 : e) - BIAS - MB);
    return (c & sign_bit) ? -mag : mag;
  }

  // The largest finite value (MAX_CODE is a normal code).
  __device__ static constexpr double max_value() {
    return (double)((MAX_CODE & ((1u << MB) - 1)) + (1u << MB)) *
           qpow2((int)(MAX_CODE >> MB) - BIAS - MB);
  }

  // The nearest code to t, ties to the even code.
  __device__ static __forceinline__ u32 encode(double t, bool saturate) {
    if (t != t) return KIND == 3 ? 0u : nan_code;
    const bool neg = t < 0.0;
    const double a = fabs(t);
    u32 code;
    if (a > max_value()) {
      if (saturate || KIND == 3) {
        code = MAX_CODE;
      } else if (KIND == 2) {
        code = ((1u << EB) - 1) << MB;
      } else {
        return nan_code;
      }
    } else if (a == 0.0) {
      code = 0u;
    } else {
      // a lies in [2^e, 2^(e+1)) (a is a normal double: it came from a float); below the
      // normal range the quantum stays 2^(emin - MB). a * 2^(MB - e) is exact.
      int e = (int)((__double_as_longlong(a) >> 52) & 0x7ff) - 1023;
      const int emin = 1 - BIAS;
      if (e < emin) e = emin;
      const double r = rint(a * pow2d(MB - e));
      code = ((u32)(e + BIAS - 1) << MB) + (u32)r;
    }
    if (neg && !(KIND == 1 && code == 0u)) code |= sign_bit;
    return code;
  }

  __device__ static __forceinline__ u32 quantize(float q, float z, bool saturate) {
    return encode((double)q + (double)z, saturate);
  }
};

typedef QInt<8, false> q_u8;
typedef QInt<8, true> q_i8;
typedef QInt<16, false> q_u16;
typedef QInt<16, true> q_i16;
typedef QInt<32, true> q_i32;
typedef QInt<4, false> q_u4;
typedef QInt<4, true> q_i4;
typedef QInt<2, false> q_u2;
typedef QInt<2, true> q_i2;
typedef QMini<4, 3, 7, 0, 0x7Eu> q_e4m3fn;
typedef QMini<4, 3, 8, 1, 0x7Fu> q_e4m3fnuz;
typedef QMini<5, 2, 15, 2, 0x7Bu> q_e5m2;
typedef QMini<5, 2, 16, 1, 0x7Fu> q_e5m2fnuz;
typedef QMini<2, 1, 1, 3, 0x7u> q_f4e2m1;

// Element `off` of a tensor of quantized type Q (packed types: `off` is the element index).
template <typename Q> __device__ __forceinline__ u32 load_raw(const void *p, i64 off) {
  if constexpr (Q::bits == 8) {
    return ((const u8 *)p)[off];
  } else if constexpr (Q::bits == 16) {
    return ((const u16 *)p)[off];
  } else if constexpr (Q::bits == 32) {
    return ((const u32 *)p)[off];
  } else if constexpr (Q::bits == 4) {
    return (((const u8 *)p)[off >> 1] >> ((off & 1) * 4)) & 0xFu;
  } else {
    return (((const u8 *)p)[off >> 2] >> ((off & 3) * 2)) & 0x3u;
  }
}

// Moves BYTES bytes between a suitably aligned device address and a local buffer in the widest
// accesses (memcpy on the local side: no type punning of local arrays).
template <int BYTES> __device__ __forceinline__ void vload(void *local, const void *src) {
  if constexpr (BYTES >= 16) {
#pragma unroll
    for (int k = 0; k < BYTES / 16; ++k) {
      const uint4 v = ((const uint4 *)src)[k];
      memcpy((u8 *)local + 16 * k, &v, 16);
    }
  } else if constexpr (BYTES == 8) {
    const uint2 v = *(const uint2 *)src;
    memcpy(local, &v, 8);
  } else if constexpr (BYTES == 4) {
    const u32 v = *(const u32 *)src;
    memcpy(local, &v, 4);
  } else if constexpr (BYTES == 2) {
    const u16 v = *(const u16 *)src;
    memcpy(local, &v, 2);
  } else {
    *(u8 *)local = *(const u8 *)src;
  }
}

template <int BYTES> __device__ __forceinline__ void vstore(void *dst, const void *local) {
  if constexpr (BYTES >= 16) {
#pragma unroll
    for (int k = 0; k < BYTES / 16; ++k) {
      uint4 v;
      memcpy(&v, (const u8 *)local + 16 * k, 16);
      ((uint4 *)dst)[k] = v;
    }
  } else if constexpr (BYTES == 8) {
    uint2 v;
    memcpy(&v, local, 8);
    *(uint2 *)dst = v;
  } else if constexpr (BYTES == 4) {
    u32 v;
    memcpy(&v, local, 4);
    *(u32 *)dst = v;
  } else if constexpr (BYTES == 2) {
    u16 v;
    memcpy(&v, local, 2);
    *(u16 *)dst = v;
  } else {
    *(u8 *)dst = *(const u8 *)local;
  }
}

// A scale element as double: float types, float8e8m0 (2^(c-127), 0xFF is NaN) and int32.
__device__ __forceinline__ double load_scale(const void *p, i64 off, int code) {
  switch (code) {
  case 1: return (double)((const float *)p)[off];
  case 10: return (double)__half2float(((const f16 *)p)[off]);
  case 16: return (double)__bfloat162float(((const bf16 *)p)[off]);
  case 11: return ((const double *)p)[off];
  case 24: {
    u32 c = ((const u8 *)p)[off];
    return c == 255u ? QNAN : pow2d((int)c - 127);
  }
  default: return (double)((const int *)p)[off]; // int32 (the host admits no other code)
  }
}

struct QParams {
  i64 n;
  i32 rank;
  i32 mode;     // 0 per tensor, 1 per axis, 2 blocked
  i32 vec;      // x, y and the parameters dense, x and y aligned for whole-chunk vector
                // accesses: 1 when every chunk of 8 elements shares one scale, 2 otherwise
                // (0: the strided walk)
  i32 _pad0;
  i32 saturate; // float8 outputs: saturate past the largest finite value
  i32 s_code;   // ONNX dtype of the scale
  i32 has_zp;
  i32 axis;
  i32 v_code;   // ONNX dtype of x (quantize) or y (dequantize)
  i32 _pad;
  i64 axis_len;       // x's extent along the axis
  i64 inner;          // elements after the axis
  i64 block;          // the block size (1 per axis)
  i64 param_axis_len; // the scale's extent along the axis (blocked)
  i64 dims[MAX_RANK];
  i64 xs[MAX_RANK];
  i64 ys[MAX_RANK];
  i64 ss[MAX_RANK]; // scale strides along x's axes (the axis walks blocks), 0 where constant
  i64 zs[MAX_RANK]; // zero point strides likewise
};

// The parameter index of dense element i (dense parameters).
__device__ __forceinline__ i64 param_index(const QParams &p, i64 i) {
  if (p.mode == 0) return 0;
  const i64 t = i / p.inner;
  const i64 a = t % p.axis_len;
  if (p.mode == 1) return a;
  return ((t / p.axis_len) * p.param_axis_len + a / p.block) * p.inner + (i - t * p.inner);
}

// The parameter index of consecutive dense elements, advanced one element at a time.
struct ParamCursor {
  i64 inner_i, a, outer, ab, ar;
  __device__ __forceinline__ ParamCursor(const QParams &p, i64 i) {
    const i64 t = i / p.inner;
    inner_i = i - t * p.inner;
    outer = t / p.axis_len;
    a = t - outer * p.axis_len;
    ab = a / p.block;
    ar = a - ab * p.block;
  }
  __device__ __forceinline__ i64 index(const QParams &p) const {
    return p.mode == 1 ? a : (outer * p.param_axis_len + ab) * p.inner + inner_i;
  }
  __device__ __forceinline__ void next(const QParams &p) {
    if (++inner_i == p.inner) {
      inner_i = 0;
      if (++ar == p.block) {
        ar = 0;
        ++ab;
      }
      if (++a == p.axis_len) {
        a = 0;
        ab = 0;
        ar = 0;
        ++outer;
      }
    }
  }
};

// Offsets of element i in x, y, the scale and the zero point (strided walk; the axis walks the
// parameters' blocks).
__device__ __forceinline__ void q_offsets(const QParams &p, i64 i, i64 &xo, i64 &yo, i64 &so,
                                          i64 &zo) {
  xo = yo = so = zo = 0;
#pragma unroll 1
  for (int k = p.rank - 1; k >= 0; --k) {
    const i64 d = p.dims[k];
    const i64 q = i / d;
    const i64 c = i - q * d;
    i = q;
    xo += c * p.xs[k];
    yo += c * p.ys[k];
    const i64 cp = (k == p.axis) ? c / p.block : c;
    so += cp * p.ss[k];
    zo += cp * p.zs[k];
  }
}

// Element `off` of a float32/float16/bfloat16/double/int32 tensor as float32.
__device__ __forceinline__ float load_x(const void *p, i64 off, int code) {
  switch (code) {
  case 10: return __half2float(((const f16 *)p)[off]);
  case 16: return __bfloat162float(((const bf16 *)p)[off]);
  case 11: return (float)((const double *)p)[off];
  case 6: return (float)((const int *)p)[off];
  default: return ((const float *)p)[off];
  }
}

// Elements i0..i0+8 of a dense x aligned to 16 bytes, as float32.
__device__ __forceinline__ void load_x8(const void *p, i64 i0, int code, float *v) {
  switch (code) {
  case 10: {
    const uint4 w = *(const uint4 *)((const f16 *)p + i0);
    f16 h[8];
    memcpy(h, &w, 16);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __half2float(h[k]);
    break;
  }
  case 16: {
    const uint4 w = *(const uint4 *)((const bf16 *)p + i0);
    bf16 h[8];
    memcpy(h, &w, 16);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __bfloat162float(h[k]);
    break;
  }
  case 11: {
    const double2 *d = (const double2 *)((const double *)p + i0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      double2 w = d[j];
      v[2 * j] = (float)w.x;
      v[2 * j + 1] = (float)w.y;
    }
    break;
  }
  case 6: {
    const int4 *d = (const int4 *)((const int *)p + i0);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      int4 w = d[j];
      v[4 * j] = (float)w.x;
      v[4 * j + 1] = (float)w.y;
      v[4 * j + 2] = (float)w.z;
      v[4 * j + 3] = (float)w.w;
    }
    break;
  }
  default: {
    const float4 *d = (const float4 *)((const float *)p + i0);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float4 w = d[j];
      v[4 * j] = w.x;
      v[4 * j + 1] = w.y;
      v[4 * j + 2] = w.z;
      v[4 * j + 3] = w.w;
    }
  }
  }
}

// Stores a dequantized value: double outputs take `vd`, float32/float16/bfloat16 `vf`.
__device__ __forceinline__ void store_y(void *p, i64 off, int code, float vf, double vd) {
  switch (code) {
  case 11: ((double *)p)[off] = vd; break;
  case 10: ((f16 *)p)[off] = __float2half_rn(vf); break;
  case 16: ((bf16 *)p)[off] = __float2bfloat16_rn(vf); break;
  default: ((float *)p)[off] = vf;
  }
}

// Stores elements i0..i0+8 of a dense y aligned to 16 bytes.
__device__ __forceinline__ void store_y8(void *p, i64 i0, int code, const float *vf,
                                         const double *vd) {
  switch (code) {
  case 11: {
    double2 *d = (double2 *)((double *)p + i0);
#pragma unroll
    for (int j = 0; j < 4; ++j) d[j] = make_double2(vd[2 * j], vd[2 * j + 1]);
    break;
  }
  case 10: {
    __align__(16) f16 h[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) h[k] = __float2half_rn(vf[k]);
    uint4 w;
    memcpy(&w, h, 16);
    *(uint4 *)((f16 *)p + i0) = w;
    break;
  }
  case 16: {
    __align__(16) bf16 h[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) h[k] = __float2bfloat16_rn(vf[k]);
    uint4 w;
    memcpy(&w, h, 16);
    *(uint4 *)((bf16 *)p + i0) = w;
    break;
  }
  default: {
    float4 *d = (float4 *)((float *)p + i0);
    d[0] = make_float4(vf[0], vf[1], vf[2], vf[3]);
    d[1] = make_float4(vf[4], vf[5], vf[6], vf[7]);
  }
  }
}

// The scale and zero point of element i (fast path: dense parameters, cursor at i).
template <typename Q>
__device__ __forceinline__ void q_param(const void *scale, const void *zp, i64 pi,
                                        const QParams &p, double &s, double &z) {
  s = load_scale(scale, pi, p.s_code);
  z = p.has_zp ? Q::decode(load_raw<Q>(zp, pi)) : 0.0;
}

// Packs the codes of a whole chunk into bytes (8- and 16-bit: one word per code).
template <typename Q> struct Packed {
  static constexpr int wbytes = Q::bits >= 8 ? Q::bits / 8 : 1;
  static constexpr int per = Q::bits >= 8 ? 1 : 8 / Q::bits;
  static constexpr int nbytes = QCHUNK * Q::bits / 8;
};

// ---- QuantizeLinear ----

#ifdef QUANT_Q

template <typename Q>
__device__ __forceinline__ void quantize_impl(const void *__restrict__ x,
                                              const void *__restrict__ scale,
                                              const void *__restrict__ zp, void *__restrict__ y,
                                              const QParams &p) {
  const bool sat = p.saturate != 0;
  if (p.vec) {
    // Dense, aligned, one scale per chunk: one vector load of x and one vector store of the
    // chunk's codes.
    const i64 chunks = (p.n + QCHUNK - 1) / QCHUNK;
    GRID_LOOP(c, chunks) {
      const i64 i0 = c * QCHUNK;
      double sd = 1.0, zd = 0.0;
      if (p.vec == 1) q_param<Q>(scale, zp, param_index(p, i0), p, sd, zd);
      const float s = (float)sd, z = (float)zd;
      if (i0 + QCHUNK <= p.n && p.vec == 2) {
        // A scale per element: a cursor walks the parameters, a rolled loop the chunk.
        float xv[QCHUNK];
        load_x8(x, i0, p.v_code, xv);
        ParamCursor cur(p, i0);
        u64 lo = 0, hi = 0;
#pragma unroll 1
        for (int k = 0; k < QCHUNK; ++k) {
          double sk, zk;
          q_param<Q>(scale, zp, cur.index(p), p, sk, zk);
          cur.next(p);
          const u64 code = Q::quantize(xv[k] / (float)sk, (float)zk, sat);
          const int bit = k * Q::bits;
          if (bit < 64) {
            lo |= code << bit;
          } else {
            hi |= code << (bit - 64);
          }
        }
        u8 *dst = (u8 *)y + i0 * Q::bits / 8;
        if constexpr (Q::bits == 16) {
          *(uint4 *)dst = make_uint4((u32)lo, (u32)(lo >> 32), (u32)hi, (u32)(hi >> 32));
        } else if constexpr (Q::bits == 8) {
          *(uint2 *)dst = make_uint2((u32)lo, (u32)(lo >> 32));
        } else if constexpr (Q::bits == 4) {
          *(u32 *)dst = (u32)lo;
        } else {
          *(u16 *)dst = (u16)lo;
        }
      } else if (i0 + QCHUNK <= p.n) {
        float xv[QCHUNK];
        load_x8(x, i0, p.v_code, xv);
        if constexpr (Q::bits >= 8) {
          typedef typename Word<Packed<Q>::wbytes>::T W;
          __align__(16) W out[QCHUNK];
#pragma unroll
          for (int k = 0; k < QCHUNK; ++k) out[k] = (W)Q::quantize(xv[k] / s, z, sat);
          vstore<Packed<Q>::nbytes>((u8 *)y + i0 * Packed<Q>::wbytes, out);
        } else {
          constexpr int per = Packed<Q>::per;
          __align__(16) u8 out[Packed<Q>::nbytes];
#pragma unroll
          for (int b = 0; b < Packed<Q>::nbytes; ++b) {
            u32 v = 0;
#pragma unroll
            for (int t = 0; t < per; ++t) {
              v |= Q::quantize(xv[b * per + t] / s, z, sat) << (t * Q::bits);
            }
            out[b] = (u8)v;
          }
          vstore<Packed<Q>::nbytes>((u8 *)y + i0 / per, out);
        }
      } else {
        // The tail chunk.
        const int cnt = (int)(p.n - i0);
        u32 packed = 0;
#pragma unroll 1
        for (int k = 0; k < cnt; ++k) {
          double sk, zk;
          q_param<Q>(scale, zp, param_index(p, i0 + k), p, sk, zk);
          const u32 code = Q::quantize(load_x(x, i0 + k, p.v_code) / (float)sk, (float)zk, sat);
          if constexpr (Q::bits >= 8) {
            ((typename Word<Packed<Q>::wbytes>::T *)y)[i0 + k] = code;
          } else {
            packed |= code << (k * Q::bits);
          }
        }
        if constexpr (Q::bits < 8) {
          constexpr int per = Packed<Q>::per;
          u8 *dst = (u8 *)y + i0 / per;
#pragma unroll 1
          for (int b = 0; b < (cnt + per - 1) / per; ++b) dst[b] = (u8)(packed >> (8 * b));
        }
      }
    }
  } else {
    // One element per thread (packed outputs: one byte of a dense y), strided.
    constexpr int per = Packed<Q>::per;
    const i64 units = (p.n + per - 1) / per;
    GRID_LOOP(u, units) {
      u32 packed = 0;
      i64 yo = u;
#pragma unroll
      for (int t = 0; t < per; ++t) {
        const i64 i = u * per + t;
        if (per == 1 || i < p.n) {
          i64 xo, so, zo;
          q_offsets(p, i, xo, yo, so, zo);
          const float s = (float)load_scale(scale, so, p.s_code);
          const float z = p.has_zp ? (float)Q::decode(load_raw<Q>(zp, zo)) : 0.0f;
          packed |= Q::quantize(load_x(x, xo, p.v_code) / s, z, sat) << (t * Q::bits);
        }
      }
      if constexpr (Q::bits >= 8) {
        ((typename Word<Packed<Q>::wbytes>::T *)y)[yo] = packed;
      } else {
        ((u8 *)y)[u] = (u8)packed;
      }
    }
  }
}

#define QUANTIZE(QN)                                                                          \
  extern "C" __global__ void quantize_to_##QN(const void *x, const void *scale,              \
                                              const void *zp, void *y, QParams p) {          \
    quantize_impl<q_##QN>(x, scale, zp, y, p);                                               \
  }

QUANTIZE(u8)
QUANTIZE(i8)
QUANTIZE(u16)
QUANTIZE(i16)
QUANTIZE(u4)
QUANTIZE(i4)
QUANTIZE(u2)
QUANTIZE(i2)
QUANTIZE(e4m3fn)
QUANTIZE(e4m3fnuz)
QUANTIZE(e5m2)
QUANTIZE(e5m2fnuz)
QUANTIZE(f4e2m1)

#endif // QUANT_Q

// ---- DequantizeLinear ----

#ifdef QUANT_DQ

// (v - z) * s: in double for double outputs (`vd`), else in float32 (`vf`); (v - z) is exact
// in double, and for every type narrower than int32 in float32 as well.
template <typename Q>
__device__ __forceinline__ void dequantize_one(u32 raw, double z, double s, bool dbl, float &vf,
                                               double &vd) {
  const double v = Q::decode(raw);
  if (dbl) {
    vd = (v - z) * s;
  } else {
    const float d = Q::wide ? (float)(v - z) : ((float)v - (float)z);
    vf = d * (float)s;
  }
}

template <typename Q>
__device__ __forceinline__ void dequantize_impl(const void *__restrict__ x,
                                                const void *__restrict__ scale,
                                                const void *__restrict__ zp, void *__restrict__ y,
                                                const QParams &p) {
  const bool dbl = p.v_code == 11;
  if (p.vec) {
    // Dense, aligned, one scale per chunk: one vector load of the codes, one vector store.
    const i64 chunks = (p.n + QCHUNK - 1) / QCHUNK;
    GRID_LOOP(c, chunks) {
      const i64 i0 = c * QCHUNK;
      double s = 1.0, z = 0.0;
      if (p.vec == 1) q_param<Q>(scale, zp, param_index(p, i0), p, s, z);
      if (i0 + QCHUNK <= p.n) {
        u32 raw[QCHUNK];
        if constexpr (Q::bits >= 8) {
          typedef typename Word<Packed<Q>::wbytes>::T W;
          __align__(16) W xb[QCHUNK];
          vload<Packed<Q>::nbytes>(xb, (const u8 *)x + i0 * Packed<Q>::wbytes);
#pragma unroll
          for (int k = 0; k < QCHUNK; ++k) raw[k] = (u32)xb[k];
        } else {
          constexpr int per = Packed<Q>::per;
          __align__(16) u8 xb[Packed<Q>::nbytes];
          vload<Packed<Q>::nbytes>(xb, (const u8 *)x + i0 / per);
#pragma unroll
          for (int k = 0; k < QCHUNK; ++k) {
            raw[k] = (xb[k / per] >> ((k % per) * Q::bits)) & ((1u << Q::bits) - 1);
          }
        }
        float vf[QCHUNK];
        double vd[QCHUNK];
        if (p.vec == 1) {
#pragma unroll
          for (int k = 0; k < QCHUNK; ++k) dequantize_one<Q>(raw[k], z, s, dbl, vf[k], vd[k]);
        } else {
          // A scale per element: a cursor walks the parameters, a rolled loop the chunk.
          ParamCursor cur(p, i0);
#pragma unroll 1
          for (int k = 0; k < QCHUNK; ++k) {
            double sk, zk;
            q_param<Q>(scale, zp, cur.index(p), p, sk, zk);
            cur.next(p);
            dequantize_one<Q>(raw[k], zk, sk, dbl, vf[k], vd[k]);
          }
        }
        store_y8(y, i0, p.v_code, vf, vd);
      } else {
#pragma unroll 1
        for (i64 i = i0; i < p.n; ++i) {
          if (p.vec == 2) q_param<Q>(scale, zp, param_index(p, i), p, s, z);
          float vf = 0.0f;
          double vd = 0.0;
          dequantize_one<Q>(load_raw<Q>(x, i), z, s, dbl, vf, vd);
          store_y(y, i, p.v_code, vf, vd);
        }
      }
    }
  } else {
    // One element per thread, strided (packed x: dense, indexed by element).
    GRID_LOOP(i, p.n) {
      i64 xo, yo, so, zo;
      q_offsets(p, i, xo, yo, so, zo);
      const double s = load_scale(scale, so, p.s_code);
      const double z = p.has_zp ? Q::decode(load_raw<Q>(zp, zo)) : 0.0;
      float vf = 0.0f;
      double vd = 0.0;
      dequantize_one<Q>(load_raw<Q>(x, xo), z, s, dbl, vf, vd);
      store_y(y, yo, p.v_code, vf, vd);
    }
  }
}

#define DEQUANTIZE(QN)                                                                        \
  extern "C" __global__ void dequantize_##QN(const void *x, const void *scale, const void *zp, \
                                             void *y, QParams p) {                            \
    dequantize_impl<q_##QN>(x, scale, zp, y, p);                                              \
  }

DEQUANTIZE(u8)
DEQUANTIZE(i8)
DEQUANTIZE(u16)
DEQUANTIZE(i16)
DEQUANTIZE(i32)
DEQUANTIZE(u4)
DEQUANTIZE(i4)
DEQUANTIZE(u2)
DEQUANTIZE(i2)
DEQUANTIZE(e4m3fn)
DEQUANTIZE(e4m3fnuz)
DEQUANTIZE(e5m2)
DEQUANTIZE(e5m2fnuz)
DEQUANTIZE(f4e2m1)

#endif // QUANT_DQ

// ---- DynamicQuantizeLinear ----

#ifdef QUANT_DYN

struct DqlParams {
  i64 n;
  i32 rank;
  i32 x_dense;  // x dense: linear offsets
  i32 y_dense;  // y dense: linear offsets
  i32 vec;      // both dense, x aligned to 16 bytes and y to 8
  i32 nparts;   // partial (min, max) pairs written by dql_partial
  i32 _pad;
  i64 dims[MAX_RANK];
  i64 xs[MAX_RANK];
  i64 ys[MAX_RANK];
};

__device__ __forceinline__ void dql_offsets(const DqlParams &p, i64 i, i64 &xo, i64 &yo) {
  xo = 0;
  yo = 0;
#pragma unroll 1
  for (int k = p.rank - 1; k >= 0; --k) {
    i64 d = p.dims[k];
    i64 c = i % d;
    i /= d;
    xo += c * p.xs[k];
    yo += c * p.ys[k];
  }
}

// Block-wide (min, max) of 256 threads' values; thread 0 gets the result. fminf/fmaxf skip
// NaN like Rust's f32::min/max.
__device__ __forceinline__ void block_minmax(float &lo, float &hi) {
  __shared__ float s_lo[32], s_hi[32];
  for (int o = 16; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warps = (blockDim.x + 31) >> 5;
  if (lane == 0) {
    s_lo[warp] = lo;
    s_hi[warp] = hi;
  }
  __syncthreads();
  if (warp == 0) {
    lo = lane < warps ? s_lo[lane] : 0.0f;
    hi = lane < warps ? s_hi[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
      lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
      hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
  }
}

// One (min, max) pair per block over a grid-stride share of x; the range starts at [0, 0].
extern "C" __global__ void dql_partial(const float *__restrict__ x, float2 *__restrict__ part,
                                       DqlParams p) {
  float lo = 0.0f, hi = 0.0f;
  const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const i64 stride = (i64)gridDim.x * blockDim.x;
  if (p.vec) {
    const i64 n4 = p.n >> 2;
    const float4 *x4 = (const float4 *)x;
#pragma unroll 4
    for (i64 i = tid; i < n4; i += stride) {
      float4 v = x4[i];
      lo = fminf(fminf(lo, v.x), fminf(v.y, fminf(v.z, v.w)));
      hi = fmaxf(fmaxf(hi, v.x), fmaxf(v.y, fmaxf(v.z, v.w)));
    }
    for (i64 i = (n4 << 2) + tid; i < p.n; i += stride) {
      lo = fminf(lo, x[i]);
      hi = fmaxf(hi, x[i]);
    }
  } else {
    for (i64 i = tid; i < p.n; i += stride) {
      i64 xo = i, yo;
      if (!p.x_dense) dql_offsets(p, i, xo, yo);
      lo = fminf(lo, x[xo]);
      hi = fmaxf(hi, x[xo]);
    }
  }
  block_minmax(lo, hi);
  if (threadIdx.x == 0) part[blockIdx.x] = make_float2(lo, hi);
}

// Clamp that keeps NaN (Rust's f32::clamp).
__device__ __forceinline__ float clamp_keep_nan(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// Rust's `f as u8`: NaN to 0, saturating.
__device__ __forceinline__ u8 to_u8_sat(float v) {
  if (v != v) return 0;
  return (u8)(v <= 0.0f ? 0.0f : (v >= 255.0f ? 255.0f : v));
}

__device__ __forceinline__ u8 dql_one(float v, float scale, float zp) {
  return to_u8_sat(clamp_keep_nan(rintf(v / scale) + zp, 0.0f, 255.0f));
}

// Every block folds the partials into the scale and zero point (block 0 writes them out),
// then quantizes its grid-stride share of x, 8 elements per thread.
extern "C" __global__ void dql_quantize(const float *__restrict__ x,
                                        const float2 *__restrict__ part, u8 *__restrict__ y,
                                        float *__restrict__ y_scale, u8 *__restrict__ y_zp,
                                        DqlParams p) {
  __shared__ float s_scale, s_zp;
  float lo = 0.0f, hi = 0.0f;
  for (int i = threadIdx.x; i < p.nparts; i += blockDim.x) {
    float2 v = part[i];
    lo = fminf(lo, v.x);
    hi = fmaxf(hi, v.y);
  }
  block_minmax(lo, hi);
  if (threadIdx.x == 0) {
    const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    const float zp = rintf(clamp_keep_nan(0.0f - lo / scale, 0.0f, 255.0f));
    s_scale = scale;
    s_zp = zp;
    if (blockIdx.x == 0) {
      y_scale[0] = scale;
      y_zp[0] = to_u8_sat(zp);
    }
  }
  __syncthreads();
  const float scale = s_scale, zp = s_zp;
  const i64 chunks = (p.n + 7) >> 3;
  GRID_LOOP(c, chunks) {
    const i64 i0 = c << 3;
    const int cnt = (int)min((i64)8, p.n - i0);
    if (p.vec && cnt == 8) {
      float4 a = ((const float4 *)(x + i0))[0];
      float4 b = ((const float4 *)(x + i0))[1];
      uint2 out;
      out.x = (u32)dql_one(a.x, scale, zp) | ((u32)dql_one(a.y, scale, zp) << 8) |
              ((u32)dql_one(a.z, scale, zp) << 16) | ((u32)dql_one(a.w, scale, zp) << 24);
      out.y = (u32)dql_one(b.x, scale, zp) | ((u32)dql_one(b.y, scale, zp) << 8) |
              ((u32)dql_one(b.z, scale, zp) << 16) | ((u32)dql_one(b.w, scale, zp) << 24);
      *(uint2 *)(y + i0) = out;
    } else {
      for (int k = 0; k < cnt; ++k) {
        i64 xo = i0 + k, yo = i0 + k;
        if (!p.x_dense || !p.y_dense) {
          i64 a, b;
          dql_offsets(p, i0 + k, a, b);
          if (!p.x_dense) xo = a;
          if (!p.y_dense) yo = b;
        }
        y[yo] = dql_one(x[xo], scale, zp);
      }
    }
  }
}

#endif // QUANT_DYN
