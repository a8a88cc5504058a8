// com.microsoft MatMulNBits, the prefill path's dequantization: W[n - n0, k] = (q - z) * scale
// for a tile of columns n0.., the [cols, K] row-major operand of the cuBLASLt product.
//
// nbits_dequant_<T>_b<BITS>_u<UB>: one thread per UB packed bytes of B (UB = 16 when rows of
// B are 16-byte multiples, else 4), i.e. 8 * UB / BITS codes. A code becomes the float
// 2^23 + q by OR-ing it into the mantissa, minus 2^23 exactly; (q - z) * scale is rounded to T
// once. A unit inside one block (the usual case) reads one scale and zero point; one spanning
// several blocks reads them per code. Outputs go out as 16-byte stores where the row allows
// (the unit's codes all below K, the destination 16-byte aligned), else element by element.
// Zero points: packed uint8, of A's type, or the default 2^(BITS-1). Indices are 32-bit: the
// host keeps a tile under 2^31 units.

struct NbDequant {
  const u8 *b;
  const void *scales;
  const void *zp;
  void *w;
  i32 units;     // cols * row_units
  i32 row_units; // units per row of B
  i32 n0, k, kb, block_log2;
  i32 row_bytes, zrow, zp_kind, _pad; // zp_kind: 0 default, 1 packed uint8, 2 A's type
};

template <typename T, int BITS>
__device__ __forceinline__ float nd_zero(const NbDequant &p, int n, int blk) {
  if (p.zp_kind == 0) return (float)(1 << (BITS - 1));
  if (p.zp_kind == 1) {
    const u8 *zp = (const u8 *)p.zp;
    const int per = 8 / BITS;
    return (float)((zp[(i64)n * p.zrow + blk / per] >> ((blk % per) * BITS)) &
                   ((1 << BITS) - 1));
  }
  return widen(((const T *)p.zp)[(i64)n * p.kb + blk]);
}

template <typename T, int BITS, int UB> __device__ void nbits_dequant(const NbDequant &p) {
  constexpr int WORDS = UB / 4;
  constexpr int E = 8 * UB / BITS; // codes per unit
  constexpr int CPW = 32 / BITS;   // codes per 32-bit word
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.units) return;
  const int nl = i / p.row_units, u = i - nl * p.row_units;
  const int n = p.n0 + nl;
  const int k0 = u * E;
  if (k0 >= p.k) return; // padding codes of the last block
  u32 words[WORDS];
  const u8 *src = p.b + (i64)n * p.row_bytes + (i64)u * UB;
  if (UB == 16) {
    const uint4 v = __ldg(reinterpret_cast<const uint4 *>(src));
    words[0] = v.x;
    words[1 % WORDS] = v.y;
    words[2 % WORDS] = v.z;
    words[3 % WORDS] = v.w;
  } else {
    words[0] = __ldg(reinterpret_cast<const u32 *>(src));
  }
  const T *S = (const T *)p.scales;
  const int blk0 = k0 >> p.block_log2;
  const bool one_block = ((k0 + E - 1) >> p.block_log2) == blk0;
  float s = widen(S[(i64)n * p.kb + blk0]);
  // The zero point as given: float zero points may be fractional.
  float z = nd_zero<T, BITS>(p, n, blk0);
  float v[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    if (!one_block && (e & ((1 << 4) - 1)) == 0 && e > 0) {
      // A new block starts at most every 16 codes (blocks are at least 16 long).
      const int blk = (k0 + e) >> p.block_log2;
      s = widen(S[(i64)n * p.kb + blk]);
      z = nd_zero<T, BITS>(p, n, blk);
    }
    const u32 q = (words[e / CPW] >> ((e % CPW) * BITS)) & ((1u << BITS) - 1u);
    v[e] = ((float)q - z) * s;
  }
  T *dst = (T *)p.w + (i64)nl * p.k + k0;
  constexpr int VEC = 16 / sizeof(T); // elements per 16-byte store
  if constexpr (E % VEC == 0) {
    if (k0 + E <= p.k && (reinterpret_cast<size_t>(dst) & 15) == 0) {
#pragma unroll
      for (int c = 0; c < E / VEC; ++c) {
        T tmp[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) tmp[e] = convert<T>(v[c * VEC + e]);
        uint4 pk;
        memcpy(&pk, tmp, 16);
        reinterpret_cast<uint4 *>(dst)[c] = pk;
      }
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < E; ++e)
    if (k0 + e < p.k) dst[e] = convert<T>(v[e]);
}

#define NB_DEQ(T, TN, BITS, UB)                                                               \
  extern "C" __global__ void __launch_bounds__(256)                                           \
      nbits_dequant_##TN##_b##BITS##_u##UB(NbDequant p) {                                     \
    nbits_dequant<T, BITS, UB>(p);                                                            \
  }
#define NB_DEQ_ALL(T, TN)                                                                     \
  NB_DEQ(T, TN, 2, 4)                                                                         \
  NB_DEQ(T, TN, 2, 16)                                                                        \
  NB_DEQ(T, TN, 4, 4)                                                                         \
  NB_DEQ(T, TN, 4, 16)                                                                        \
  NB_DEQ(T, TN, 8, 4)                                                                         \
  NB_DEQ(T, TN, 8, 16)
NB_DEQ_ALL(float, f32)
NB_DEQ_ALL(f16, f16)
NB_DEQ_ALL(bf16, bf16)
