// Einsum's reduction: einsum_sum_<T> writes dst[kept] = sum of src over the reduced axes
// (indices summed in one operand only, and the final sum over labels the output drops). The
// walk over both sets of axes is strided (any views, broadcast kept axes with stride 0); the
// products themselves run on cuBLASLt or the integer GEMM of gemm.cu.
//
// Each 256-thread block owns 256 / g outputs and g threads sum each one. `lane_major`: the g
// threads of one output are adjacent (the reduced axis is the contiguous one: coalesced
// loads, warp-shuffle sums); otherwise adjacent threads own adjacent outputs (a kept axis is
// contiguous) and the g partial sums meet in shared memory. Half types sum in float, float64
// in double, integers in wrapping 32-bit (64-bit for the 64-bit types) unsigned arithmetic,
// which truncates to the element type exactly as the CPU provider's wrapping i64 sums do.
// Metadata comes by value (EinSumParams, mirrored in src/ops/gemm/einsum.rs).

#define EIN_THREADS 256

struct EinSumParams {
  i64 n_out;  // kept elements (outputs)
  i64 n_red;  // reduced elements per output
  i32 rank_k, rank_r;
  i32 g;           // threads per output: a power of two up to 256
  i32 lane_major;  // 1: the g threads of an output are adjacent
  i64 dims_k[MAX_DIMS];
  i64 sk_in[MAX_DIMS];
  i64 sk_out[MAX_DIMS];
  i64 dims_r[MAX_DIMS];
  i64 sr_in[MAX_DIMS];
  u64 src, dst;
};

template <typename T, typename A> __device__ void einsum_sum_body(const EinSumParams &p) {
  __shared__ __align__(8) unsigned char smem_raw[EIN_THREADS * 8];
  A *shm = reinterpret_cast<A *>(smem_raw);
  const T *src = (const T *)p.src;
  T *dst = (T *)p.dst;
  const int g = p.g;
  const int per = EIN_THREADS / g;
  const int tid = threadIdx.x;
  int slot, lane;
  if (p.lane_major) {
    slot = tid / g;
    lane = tid % g;
  } else {
    slot = tid % per;
    lane = tid / per;
  }
  // Block-uniform trip count: every thread reaches every __syncthreads below.
  for (i64 first = (i64)blockIdx.x * per; first < p.n_out; first += (i64)gridDim.x * per) {
    const i64 o = first + slot;
    A acc = (A)0;
    i64 oo = 0;
    if (o < p.n_out) {
      i64 rem = o, oi = 0;
      for (int d = p.rank_k - 1; d >= 0; --d) {
        const i64 q = rem / p.dims_k[d];
        const i64 x = rem - q * p.dims_k[d];
        rem = q;
        oi += x * p.sk_in[d];
        oo += x * p.sk_out[d];
      }
      if (p.rank_r == 1) {
        const i64 s = p.sr_in[0];
        for (i64 r = lane; r < p.n_red; r += g) acc += (A)widen(src[oi + r * s]);
      } else {
        for (i64 r = lane; r < p.n_red; r += g) {
          i64 rr = r, off = oi;
          for (int d = p.rank_r - 1; d >= 0; --d) {
            const i64 q = rr / p.dims_r[d];
            off += (rr - q * p.dims_r[d]) * p.sr_in[d];
            rr = q;
          }
          acc += (A)widen(src[off]);
        }
      }
    }
    if (g == 1) {
      if (o < p.n_out) dst[oo] = convert<T>(acc);
      continue;
    }
    if (p.lane_major) {
      const int w = g < 32 ? g : 32;
      for (int s = w / 2; s > 0; s >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, s, w);
      if (g > 32) {
        // One partial per warp; the output's first thread adds its g / 32 warps.
        if ((tid & 31) == 0) shm[tid >> 5] = acc;
        __syncthreads();
        if (lane == 0) {
          A t = (A)0;
          for (int k = 0; k < g / 32; ++k) t += shm[(tid >> 5) + k];
          acc = t;
        }
        __syncthreads();
      }
      if (lane == 0 && o < p.n_out) dst[oo] = convert<T>(acc);
    } else {
      shm[lane * per + slot] = acc;
      __syncthreads();
      for (int s = g / 2; s > 0; s >>= 1) {
        if (lane < s) shm[lane * per + slot] += shm[(lane + s) * per + slot];
        __syncthreads();
      }
      if (lane == 0 && o < p.n_out) dst[oo] = convert<T>(shm[slot]);
      __syncthreads();
    }
  }
}

#define EINSUM_SUM(tag, T, A)                                                                \
  extern "C" __global__ void __launch_bounds__(EIN_THREADS) einsum_sum_##tag(EinSumParams p) { \
    einsum_sum_body<T, A>(p);                                                                \
  }
EINSUM_SUM(f32, float, float)
EINSUM_SUM(f64, double, double)
EINSUM_SUM(f16, f16, float)
EINSUM_SUM(bf16, bf16, float)
EINSUM_SUM(i8, signed char, u32)
EINSUM_SUM(i16, short, u32)
EINSUM_SUM(i32, int, u32)
EINSUM_SUM(i64, long long, u64)
EINSUM_SUM(u8, unsigned char, u32)
EINSUM_SUM(u16, unsigned short, u32)
EINSUM_SUM(u32, unsigned int, u32)
EINSUM_SUM(u64, unsigned long long, u64)
