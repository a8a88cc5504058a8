// Helpers shared by every kernel module of onnx-runtime-ep-cuda (prepended by the compiler).
// Metadata comes BY VALUE in #[repr(C)] structs mirrored in src/ops/params.rs, so launches
// need no device-side metadata buffer and can be captured into CUDA graphs.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;
typedef int i32;

#define MAX_DIMS 16
#define MAX_RANK 8

// A 16-byte element moved as one unit (complex128 and friends).
struct __align__(16) w16_t {
  u64 lo, hi;
};

template <int W> struct Word;
template <> struct Word<1> { typedef u8 T; };
template <> struct Word<2> { typedef u16 T; };
template <> struct Word<4> { typedef u32 T; };
template <> struct Word<8> { typedef u64 T; };
template <> struct Word<16> { typedef w16_t T; };

template <typename A, typename B> struct same_type { static const bool value = false; };
template <typename A> struct same_type<A, A> { static const bool value = true; };

#define GRID_LOOP(i, n)                                                           \
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
       i += (i64)gridDim.x * blockDim.x)

// Records the first device-side error (e.g. an index out of range) for the host to report at
// its next synchronization: err[0] = code, err[1] = the kernel's id.
__device__ __forceinline__ void report_error(u32 *err, u32 code, u32 id) {
  if (err != nullptr && atomicCAS(err, 0u, code) == 0u) {
    atomicExch(err + 1, id);
  }
}

// A strided element-wise walk over `dims` with two operands (source, destination).
struct Strided2 {
  i64 n;
  i32 rank;
  i32 _pad;
  i64 dims[MAX_DIMS];
  i64 a[MAX_DIMS];
  i64 b[MAX_DIMS];
  i64 a_off;
  i64 b_off;
};

__device__ __forceinline__ void offsets2(const Strided2 &p, i64 i, i64 &a, i64 &b) {
  a = p.a_off;
  b = p.b_off;
  for (int k = p.rank - 1; k >= 0; --k) {
    i64 d = p.dims[k];
    i64 c = i % d;
    i /= d;
    a += c * p.a[k];
    b += c * p.b[k];
  }
}

// Programmatic dependent launch (sm_90 and newer). A kernel launched as a programmatic
// dependent (Function::overlapped on the host) may start while the kernel before it still
// runs: pdl_wait() blocks until every kernel ahead of it on the stream has finished and its
// writes are visible, and must come before any global memory access. pdl_trigger() lets the
// next kernel's blocks launch (they wait in their own pdl_wait); without it they launch as
// this kernel's blocks exit. Both are no-ops for a kernel launched the ordinary way.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// The start of a kernel that reads nothing before the kernels ahead of it are done.
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_trigger();
}
