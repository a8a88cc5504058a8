// Cast, one module per target type, each with a kernel `cast_from_<tag>` per source type
// (small_types.cuh is prepended). Two kinds of variant:
// - OUT_T defined (a byte-aligned numeric C type or bool): from the numeric types and bool
//   through `convert<OUT_T>` (float to integer truncates toward zero, saturates at the
//   integer type's limits and maps NaN to 0; to bool is `x != 0`), and from the small types
//   (float8, float4, e8m0, packed 4/2-bit integers) as the CPU provider's Cast does;
// - CAST_TO defined (the ONNX code of a small type): from every type, as the CPU Cast does.
//   Packed targets (4 and 2 bits) are written densely, one thread per output byte.
// Every kernel takes (in, out, Strided2 p, int mode): mode bit 0 = saturate, bits 1-2 = the
// e8m0 round mode (0 up, 1 down, 2 nearest), bit 3 = both operands dense (element i lies at
// offset i on both sides, so no offset arithmetic). Packed inputs are dense: their offset is
// the element index.

#define CAST_DENSE 8

__device__ __forceinline__ void cast_offsets(const Strided2 &p, i64 i, int mode, i64 &a,
                                             i64 &b) {
  if (mode & CAST_DENSE) {
    a = i;
    b = i;
  } else {
    offsets2(p, i, a, b);
  }
}

#define FOR_SMALL(X)                                                                         \
  X(e4m3fn, 17)                                                                              \
  X(e4m3fnuz, 18)                                                                            \
  X(e5m2, 19)                                                                                \
  X(e5m2fnuz, 20)                                                                            \
  X(u4, 21)                                                                                  \
  X(i4, 22)                                                                                  \
  X(e2m1, 23)                                                                                \
  X(e8m0, 24)                                                                                \
  X(u2, 25)                                                                                  \
  X(i2, 26)

#define FOR_WIDE_CODES(X)                                                                    \
  X(f32, 1)                                                                                  \
  X(f64, 11)                                                                                 \
  X(f16, 10)                                                                                 \
  X(bf16, 16)                                                                                \
  X(i8, 3)                                                                                   \
  X(i16, 5)                                                                                  \
  X(i32, 6)                                                                                  \
  X(i64, 7)                                                                                  \
  X(u8, 2)                                                                                   \
  X(u16, 4)                                                                                  \
  X(u32, 12)                                                                                 \
  X(u64, 13)                                                                                 \
  X(bool, 9)

#ifdef OUT_T

#define CAST_FROM(NAME, T)                                                                   \
  extern "C" __global__ void cast_from_##NAME(const T *__restrict__ in,                     \
                                              OUT_T *__restrict__ out, Strided2 p,           \
                                              int mode) {                                    \
    GRID_LOOP(i, p.n) {                                                                      \
      i64 a, b;                                                                              \
      cast_offsets(p, i, mode, a, b);                                                        \
      out[b] = convert<OUT_T>(in[a]);                                                        \
    }                                                                                        \
  }

FOR_ALL(CAST_FROM)

#define CAST_FROM_SMALL(NAME, CODE)                                                          \
  extern "C" __global__ void cast_from_##NAME(const void *__restrict__ in,                  \
                                              OUT_T *__restrict__ out, Strided2 p,           \
                                              int mode) {                                    \
    GRID_LOOP(i, p.n) {                                                                      \
      i64 a, b;                                                                              \
      cast_offsets(p, i, mode, a, b);                                                        \
      out[b] = st_to<OUT_T>(st_load<CODE>(in, a));                                           \
    }                                                                                        \
  }

FOR_SMALL(CAST_FROM_SMALL)

#endif // OUT_T

#ifdef CAST_TO

// Byte-sized targets: one thread per element. Packed targets: one thread per output byte,
// which gathers its 2 or 4 elements, so no two threads write the same byte; the unused high
// bits of the last byte are zero.
template <int FROM>
__device__ __forceinline__ void cast_to_small(const void *__restrict__ in, u8 *__restrict__ out,
                                              const Strided2 &p, int mode) {
  const bool saturate = (mode & 1) != 0;
  const int round = (mode >> 1) & 3;
  constexpr int BITS = StBits<CAST_TO>::value;
  if constexpr (BITS == 8) {
    GRID_LOOP(i, p.n) {
      i64 a, b;
      cast_offsets(p, i, mode, a, b);
      out[b] = (u8)st_code<CAST_TO>(st_load<FROM>(in, a), saturate, round);
    }
  } else {
    constexpr int PER = 8 / BITS;
    const i64 bytes = (p.n + PER - 1) / PER;
    GRID_LOOP(j, bytes) {
      u32 byte = 0u;
#pragma unroll
      for (int k = 0; k < PER; ++k) {
        const i64 i = j * PER + k;
        if (i < p.n) {
          i64 a, b;
          cast_offsets(p, i, mode, a, b);
          byte |= st_code<CAST_TO>(st_load<FROM>(in, a), saturate, round) << (k * BITS);
        }
      }
      out[j] = (u8)byte;
    }
  }
}

#define CAST_TO_SMALL(NAME, CODE)                                                            \
  extern "C" __global__ void cast_from_##NAME(const void *__restrict__ in,                  \
                                              u8 *__restrict__ out, Strided2 p, int mode) {  \
    cast_to_small<CODE>(in, out, p, mode);                                                   \
  }

FOR_WIDE_CODES(CAST_TO_SMALL)
FOR_SMALL(CAST_TO_SMALL)

#endif // CAST_TO
