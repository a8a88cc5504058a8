// The narrow ONNX types on the device: float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0), float4
// e2m1 and the packed int4 / uint4 / int2 / uint2, decoded to and encoded from wide values
// bit for bit as the CPU provider's Cast does (crates/onnx-runtime-ep-cpu/src/ops/math/
// cast.rs and small_float.rs). Prepended (after common.cuh and numeric.cuh) to the modules that
// need it; every name starts with `st_` / `St` so other families can prepend it too.
//
// The CPU Cast's model, mirrored here: a source element becomes either integer bits (integers,
// bool, packed integers; `uns` says whether widening to a float goes through u64) or a double
// (floats exactly; float8/float4/e8m0 decode to float32 first, NaN always positive). Targets:
// - floats: from the double (integers through double first, as `v as f64` does);
// - integers and packed integers: the low bits of the integer (floats truncate toward zero
//   to 64-bit bits first: NaN and infinities give 0, huge values saturate at the i64 / u64
//   limits), so out-of-range values WRAP;
// - bool: integer != 0, or double != 0 (NaN is true);
// - float8/float4: round to nearest even from the double; out of range saturates (saturate)
//   or becomes inf / NaN as the format allows; FNUZ formats have no negative zero;
// - e8m0: from the float32 nearest the double, by its exponent and round mode.

// 2^e as a double, for -1022 <= e <= 1023.
__device__ __forceinline__ double st_pow2(int e) {
  return __longlong_as_double((long long)(1023 + e) << 52);
}

__device__ __forceinline__ double st_nan(bool neg) {
  return __longlong_as_double((long long)(neg ? 0xfff8000000000000ull : 0x7ff8000000000000ull));
}

// The quiet NaN float32::NAN (what the CPU's decoders return for every NaN code).
__device__ __forceinline__ float st_nanf() { return __uint_as_float(0x7fc00000u); }

// A source element as the CPU Cast sees it.
struct StVal {
  double f;    // floats: the value (a NaN keeps its sign)
  i64 bits;    // integers: the value's two's complement bits
  bool is_int;
  bool uns;    // unsigned integer: widens to a float through u64
};

__device__ __forceinline__ StVal st_float(double f) {
  StVal v;
  v.f = f;
  v.bits = 0;
  v.is_int = false;
  v.uns = false;
  return v;
}

__device__ __forceinline__ StVal st_int(i64 bits, bool uns) {
  StVal v;
  v.f = 0.0;
  v.bits = bits;
  v.is_int = true;
  v.uns = uns;
  return v;
}

// float32 to double exactly; a NaN keeps its sign and payload (as x86's cvtss2sd does).
__device__ __forceinline__ double st_f32_to_f64(float x) {
  const u32 b = __float_as_uint(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) {
    return __longlong_as_double((long long)(((u64)(b >> 31) << 63) | 0x7ff8000000000000ull |
                                            ((u64)(b & 0x3fffffu) << 29)));
  }
  return (double)x;
}

// float16 bits to double exactly; a NaN keeps its sign and payload (as `half` does).
__device__ __forceinline__ double st_f16_to_f64(u16 h) {
  if ((h & 0x7fffu) > 0x7c00u) {
    return __longlong_as_double((long long)(((u64)(h >> 15) << 63) | 0x7ff8000000000000ull |
                                            ((u64)(h & 0x3ffu) << 42)));
  }
  return (double)__half2float(__ushort_as_half(h));
}

__device__ __forceinline__ double st_bf16_to_f64(u16 h) {
  return st_f32_to_f64(__uint_as_float((u32)h << 16));
}

// A float truncated toward zero to 64-bit integer bits, as the CPU's `trunc_bits`: NaN and
// infinities give 0, values from 2^63 go through u64 (saturating at u64::MAX), values below
// -2^63 saturate at i64::MIN.
__device__ __forceinline__ i64 st_trunc_bits(double v) {
  if (!(fabs(v) <= 1.7976931348623157e308)) return 0; // NaN or infinite
  if (v >= 9223372036854775808.0) {
    return v >= 18446744073709551616.0 ? (i64)-1 : (i64)(u64)v;
  }
  if (v < -9223372036854775808.0) return (i64)(-9223372036854775807LL - 1);
  return (i64)v;
}

// The value as a double (integers as `v as f64`, unsigned ones through u64).
__device__ __forceinline__ double st_as_f64(const StVal &v) {
  if (v.is_int) return v.uns ? (double)(u64)v.bits : (double)v.bits;
  return v.f;
}

// The value as integer bits (floats truncated).
__device__ __forceinline__ i64 st_as_bits(const StVal &v) {
  return v.is_int ? v.bits : st_trunc_bits(v.f);
}

// ---- minifloats ----

// Sign, MB mantissa bits, exponent BIAS; MAX_CODE is the largest finite positive code, SIGN
// the sign bit. KIND 0 = e4m3fn (no infinity; S.1111.111 is NaN), 1 = fnuz (0x80 is the only
// NaN, no infinity, no negative zero), 2 = e5m2 (IEEE-like infinities and NaNs), 3 = float4
// e2m1 (neither).
template <int MB, int BIAS, u32 MAX_CODE, u32 SIGN, int KIND> struct StMini {
  __device__ static __forceinline__ u32 nan_code(bool neg) {
    if (KIND == 0) return 0x7fu | (neg ? 0x80u : 0u);
    if (KIND == 1) return 0x80u;
    if (KIND == 2) return 0x7eu | (neg ? 0x80u : 0u);
    return SIGN; // e2m1 has no NaN: negative zero, as ml_dtypes gives
  }

  __device__ static __forceinline__ u32 overflow(u32 sign, bool saturate) {
    if (saturate || KIND == 3) return MAX_CODE | sign;
    if (KIND == 2) return 0x7cu | sign;
    return nan_code(sign != 0);
  }

  // The code nearest x (ties to even); out-of-range values (after rounding) saturate to the
  // largest finite value when `saturate`, else become infinity or NaN as the format allows.
  __device__ static __forceinline__ u32 encode(double x, bool saturate) {
    const u64 xb = (u64)__double_as_longlong(x);
    const bool neg = (xb >> 63) != 0;
    const u32 sign = neg ? SIGN : 0u;
    const u64 mag = xb & 0x7fffffffffffffffull;
    if (mag > 0x7ff0000000000000ull) return nan_code(neg);
    if (mag == 0x7ff0000000000000ull) return overflow(sign, saturate);
    if (mag == 0ull) return KIND == 1 ? 0u : sign;
    const double v = __longlong_as_double((long long)mag);
    const int emin = 1 - BIAS;
    int e = (int)(mag >> 52) - 1023;
    if (e < emin) e = emin;
    // v / 2^(e - MB) is exact (a power-of-two scaling that stays in range); rint rounds half
    // to even. Below the normal range the quantum stays 2^(emin - MB).
    u64 n = (u64)rint(v * st_pow2(MB - e));
    const u64 implicit = 1ull << MB;
    u64 code;
    if (n < implicit) {
      code = n; // subnormal
    } else {
      if (n >= 2 * implicit) {
        n >>= 1;
        e += 1;
      }
      code = ((u64)(e + BIAS) << MB) | (n - implicit);
    }
    if (code > (u64)MAX_CODE) return overflow(sign, saturate);
    if (code == 0ull && KIND == 1) return 0u;
    return (u32)code | sign;
  }

  // The code's value as float32 (every NaN code gives the positive quiet NaN).
  __device__ static __forceinline__ float decode(u32 c) {
    const bool neg = (c & SIGN) != 0u;
    const u32 mag = c & (SIGN - 1u);
    if (KIND == 0 && mag == 0x7fu) return st_nanf();
    if (KIND == 1 && c == 0x80u) return st_nanf();
    if (KIND == 2 && mag >= 0x7cu) {
      if (mag != 0x7cu) return st_nanf();
      return __uint_as_float(neg ? 0xff800000u : 0x7f800000u);
    }
    const int field = (int)(mag >> MB);
    const u32 m = mag & ((1u << MB) - 1u);
    const double v = field == 0 ? (double)m * st_pow2(1 - BIAS - MB)
                                : (double)(m + (1u << MB)) * st_pow2(field - BIAS - MB);
    const float f = (float)v; // exact
    return neg ? -f : f;
  }
};

typedef StMini<3, 7, 0x7Eu, 0x80u, 0> st_e4m3fn;
typedef StMini<3, 8, 0x7Fu, 0x80u, 1> st_e4m3fnuz;
typedef StMini<2, 15, 0x7Bu, 0x80u, 2> st_e5m2;
typedef StMini<2, 16, 0x7Fu, 0x80u, 1> st_e5m2fnuz;
typedef StMini<1, 1, 0x7u, 0x8u, 3> st_e2m1;

// ---- float8 e8m0 (an exponent only, bias 127, 0xff is NaN) ----

// Round modes of Cast's `round_mode`.
#define ST_ROUND_UP 0
#define ST_ROUND_DOWN 1
#define ST_ROUND_NEAREST 2

// From x's float32 exponent, as the ONNX reference does: NaN and infinity give 0xff;
// `saturate` keeps rounding from stepping past the largest exponent (0xfe). The sign is
// ignored (negative inputs are undefined by the spec).
__device__ __forceinline__ u32 st_e8m0_encode(float x, bool saturate, int round) {
  const u32 bits = __float_as_uint(x);
  const u32 exponent = (bits >> 23) & 0xffu;
  if (exponent == 0xffu) return 0xffu;
  bool up;
  if (round == ST_ROUND_DOWN) {
    up = false;
  } else if (round == ST_ROUND_UP) {
    up = (bits & 0x7fffffu) != 0u;
  } else {
    const bool g = (bits & 0x400000u) != 0u;
    const bool r = (bits & 0x200000u) != 0u;
    const bool s = (bits & 0x1fffffu) != 0u;
    up = g && (r || s || exponent > 0u);
  }
  up = up && !(saturate && exponent == 0xfeu);
  return exponent + (up ? 1u : 0u);
}

// 2^(c - 127) (c = 0 is the float32 subnormal 2^-127), 0xff is NaN.
__device__ __forceinline__ float st_e8m0_decode(u32 c) {
  if (c == 0xffu) return st_nanf();
  if (c == 0u) return __uint_as_float(0x00400000u);
  return __uint_as_float(c << 23);
}

// ---- packed integers ----

// A BITS-wide code sign-extended (signed types) or zero-extended.
template <int BITS, bool SIGNED> __device__ __forceinline__ i64 st_packed_value(u32 code) {
  if (SIGNED && ((code >> (BITS - 1)) & 1u)) return (i64)code - ((i64)1 << BITS);
  return (i64)code;
}

// Element `i` of a packed tensor of BITS-wide codes (low bits first).
template <int BITS> __device__ __forceinline__ u32 st_packed_get(const void *p, i64 i) {
  constexpr int per = 8 / BITS;
  const u32 byte = ((const u8 *)p)[i / per];
  return (byte >> ((u32)(i % per) * BITS)) & ((1u << BITS) - 1u);
}

// ---- dtypes by ONNX code ----

// Bits per element of ONNX dtype CODE in packed storage (8 for the byte-sized small types).
template <int CODE> struct StBits {
  static constexpr int value =
      (CODE == 21 || CODE == 22 || CODE == 23) ? 4 : ((CODE == 25 || CODE == 26) ? 2 : 8);
};

// Element `off` of a tensor of ONNX dtype CODE (packed types: `off` is the element index).
template <int CODE> __device__ __forceinline__ StVal st_load(const void *p, i64 off) {
  if constexpr (CODE == 1) {
    return st_float(st_f32_to_f64(((const float *)p)[off]));
  } else if constexpr (CODE == 11) {
    return st_float(((const double *)p)[off]);
  } else if constexpr (CODE == 10) {
    return st_float(st_f16_to_f64(((const u16 *)p)[off]));
  } else if constexpr (CODE == 16) {
    return st_float(st_bf16_to_f64(((const u16 *)p)[off]));
  } else if constexpr (CODE == 2) {
    return st_int((i64)((const u8 *)p)[off], true);
  } else if constexpr (CODE == 3) {
    return st_int((i64)((const signed char *)p)[off], false);
  } else if constexpr (CODE == 4) {
    return st_int((i64)((const u16 *)p)[off], true);
  } else if constexpr (CODE == 5) {
    return st_int((i64)((const short *)p)[off], false);
  } else if constexpr (CODE == 6) {
    return st_int((i64)((const int *)p)[off], false);
  } else if constexpr (CODE == 7) {
    return st_int(((const i64 *)p)[off], false);
  } else if constexpr (CODE == 12) {
    return st_int((i64)((const u32 *)p)[off], true);
  } else if constexpr (CODE == 13) {
    return st_int((i64)((const u64 *)p)[off], true);
  } else if constexpr (CODE == 9) {
    return st_int(((const u8 *)p)[off] != 0 ? 1 : 0, true);
  } else if constexpr (CODE == 17) {
    return st_float((double)st_e4m3fn::decode(((const u8 *)p)[off]));
  } else if constexpr (CODE == 18) {
    return st_float((double)st_e4m3fnuz::decode(((const u8 *)p)[off]));
  } else if constexpr (CODE == 19) {
    return st_float((double)st_e5m2::decode(((const u8 *)p)[off]));
  } else if constexpr (CODE == 20) {
    return st_float((double)st_e5m2fnuz::decode(((const u8 *)p)[off]));
  } else if constexpr (CODE == 24) {
    return st_float((double)st_e8m0_decode(((const u8 *)p)[off]));
  } else if constexpr (CODE == 23) {
    return st_float((double)st_e2m1::decode(st_packed_get<4>(p, off)));
  } else if constexpr (CODE == 21) {
    return st_int(st_packed_value<4, false>(st_packed_get<4>(p, off)), false);
  } else if constexpr (CODE == 22) {
    return st_int(st_packed_value<4, true>(st_packed_get<4>(p, off)), false);
  } else if constexpr (CODE == 25) {
    return st_int(st_packed_value<2, false>(st_packed_get<2>(p, off)), false);
  } else {
    static_assert(CODE == 26, "st_load: not an ONNX numeric dtype code");
    return st_int(st_packed_value<2, true>(st_packed_get<2>(p, off)), false);
  }
}

// The code of a small ONNX dtype CODE (17 to 26) for v: a byte for the float8 types, the low
// 4 or 2 bits for the packed ones.
template <int CODE>
__device__ __forceinline__ u32 st_code(const StVal &v, bool saturate, int round) {
  if constexpr (CODE == 17) {
    return st_e4m3fn::encode(st_as_f64(v), saturate);
  } else if constexpr (CODE == 18) {
    return st_e4m3fnuz::encode(st_as_f64(v), saturate);
  } else if constexpr (CODE == 19) {
    return st_e5m2::encode(st_as_f64(v), saturate);
  } else if constexpr (CODE == 20) {
    return st_e5m2fnuz::encode(st_as_f64(v), saturate);
  } else if constexpr (CODE == 23) {
    return st_e2m1::encode(st_as_f64(v), saturate);
  } else if constexpr (CODE == 24) {
    return st_e8m0_encode((float)st_as_f64(v), saturate, round);
  } else if constexpr (CODE == 21 || CODE == 22) {
    return (u32)((u64)st_as_bits(v) & 0xfull);
  } else {
    static_assert(CODE == 25 || CODE == 26, "st_code: not a small ONNX dtype code");
    return (u32)((u64)st_as_bits(v) & 0x3ull);
  }
}

// double to float16 bits as the CPU does on x86 with F16C (`half`'s from_f64 there: to float32
// first, then round to nearest even); a NaN keeps its sign and top payload bits.
__device__ __forceinline__ u16 st_f64_to_f16_bits(double d) {
  const u64 b = (u64)__double_as_longlong(d);
  if ((b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) {
    return (u16)(((b >> 48) & 0x8000u) | 0x7e00u | ((b >> 42) & 0x3ffu));
  }
  return __half_as_ushort(__float2half_rn((float)d));
}

// double to bfloat16 bits exactly as `half`'s bf16::from_f64 (which looks at the top 32 bits
// only, then rounds to nearest even).
__device__ __forceinline__ u16 st_f64_to_bf16_bits(double d) {
  const u64 val = (u64)__double_as_longlong(d);
  const u32 x = (u32)(val >> 32);
  const u32 sign = x & 0x80000000u;
  const u32 exp = x & 0x7ff00000u;
  const u32 man = x & 0x000fffffu;
  if (exp == 0x7ff00000u) {
    const u32 nan_bit = (man == 0u && (u32)val == 0u) ? 0u : 0x40u;
    return (u16)((sign >> 16) | 0x7f80u | nan_bit | (man >> 13));
  }
  const u32 half_sign = sign >> 16;
  const int half_exp = (int)(exp >> 20) - 1023 + 127;
  if (half_exp >= 0xff) return (u16)(half_sign | 0x7f80u);
  if (half_exp <= 0) {
    if (7 - half_exp > 21) return (u16)half_sign;
    const u32 m = man | 0x00100000u;
    u32 half_man = m >> (14 - half_exp);
    const u32 round_bit = 1u << (13 - half_exp);
    if ((m & round_bit) != 0u && (m & (3u * round_bit - 1u)) != 0u) half_man += 1u;
    return (u16)(half_sign | half_man);
  }
  const u32 bits = half_sign | ((u32)half_exp << 7) | (man >> 13);
  const u32 round_bit = 0x1000u;
  if ((man & round_bit) != 0u && (man & (3u * round_bit - 1u)) != 0u) return (u16)(bits + 1u);
  return (u16)bits;
}

// double to float32 as Rust's `as` (round to nearest even); a NaN keeps its sign and top
// payload bits, quieted.
__device__ __forceinline__ float st_f64_to_f32(double d) {
  const u64 b = (u64)__double_as_longlong(d);
  if ((b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) {
    return __uint_as_float((u32)((b >> 32) & 0x80000000u) | 0x7fc00000u |
                           (u32)((b >> 29) & 0x3fffffu));
  }
  return (float)d;
}

// v stored as a byte-aligned numeric type T (float, double, f16, bf16, the integers, bool).
template <typename T> __device__ __forceinline__ T st_to(const StVal &v) {
  if constexpr (same_type<T, bool>::value) {
    return v.is_int ? v.bits != 0 : v.f != 0.0;
  } else if constexpr (same_type<T, float>::value) {
    return st_f64_to_f32(st_as_f64(v));
  } else if constexpr (same_type<T, double>::value) {
    return st_as_f64(v);
  } else if constexpr (same_type<T, f16>::value) {
    return __ushort_as_half(st_f64_to_f16_bits(st_as_f64(v)));
  } else if constexpr (same_type<T, bf16>::value) {
    return __ushort_as_bfloat16(st_f64_to_bf16_bits(st_as_f64(v)));
  } else {
    // Integers keep the low bits (two's complement wrap).
    return (T)(u64)st_as_bits(v);
  }
}
