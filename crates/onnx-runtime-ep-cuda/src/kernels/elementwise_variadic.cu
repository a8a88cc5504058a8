// Variadic broadcasting folds (Max, Min, Sum, Mean; com.microsoft BiasAdd is a 3-input Sum):
// the module's EW_OP for every dtype of EW_TYPES, as `ew_<tag>(inputs, out, count, p)` with up
// to EW_MAXIN inputs per launch (the host chains launches for more, the output then being
// input 0). Operand k's strides are p.st[k], the output's p.st[EW_MAXIN]. The fold runs in the
// compute type (float for half types); flags bit 0 divides the result by p.a (Mean's last
// launch). The fast walk (mode 1) takes only same-shape contiguous operands (one offset for
// all, 16-byte loads); broadcasts and strided operands take the strided walk.

struct EwPtrs {
  const void *p[EW_MAXIN];
};

// Max and Min propagate NaN (numpy.maximum / numpy.minimum), folding left to right.
struct VMax {
  template <class C> __device__ __forceinline__ C operator()(C acc, C y) const {
    return (acc > y || acc != acc) ? acc : y;
  }
};
struct VMin {
  template <class C> __device__ __forceinline__ C operator()(C acc, C y) const {
    return (acc < y || acc != acc) ? acc : y;
  }
};
struct VSum {
  template <class C> __device__ __forceinline__ C operator()(C acc, C y) const { return acc + y; }
};

template <class Op, class T>
__device__ __forceinline__ void variadic_run(const EwPtrs &in, T *o, int count,
                                             const EwParams<EW_MAXIN + 1> &p) {
  typedef typename Compute<T>::type C;
  Op op;
  const bool mean = IsFloat<T>::value && (p.flags & 1) != 0;
  const C div = (C)p.a;
  if (p.mode == 1) {
    // Every operand contiguous with the output's shape: one offset for all.
    constexpr int V = VecWidth<8, T>::value;
    const i64 nv = p.n / V;
    GRID_LOOP(v, nv) {
      const i64 off = v * V;
      C acc[V];
      {
        Pack<T, V> pk = *reinterpret_cast<const Pack<T, V> *>((const T *)in.p[0] + off);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = widen(pk.v[j]);
      }
#pragma unroll
      for (int k = 1; k < EW_MAXIN; ++k) {
        if (k >= count) break;
        Pack<T, V> pk = *reinterpret_cast<const Pack<T, V> *>((const T *)in.p[k] + off);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = op(acc[j], (C)widen(pk.v[j]));
      }
      T out[V];
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = Narrow<T>::from(mean ? acc[j] / div : acc[j]);
      ew_store<V>(o, off, out);
    }
    i64 t = nv * V + (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < p.n) {
      C acc = widen(((const T *)in.p[0])[t]);
      for (int k = 1; k < count; ++k) acc = op(acc, (C)widen(((const T *)in.p[k])[t]));
      o[t] = Narrow<T>::from(mean ? acc / div : acc);
    }
  } else {
    GRID_LOOP(i, p.n) {
      i64 off[EW_MAXIN + 1];
      ew_offsets<EW_MAXIN + 1>(p, i, off);
      C acc = widen(((const T *)in.p[0])[off[0]]);
#pragma unroll
      for (int k = 1; k < EW_MAXIN; ++k)
        if (k < count) acc = op(acc, (C)widen(((const T *)in.p[k])[off[k]]));
      o[off[EW_MAXIN]] = Narrow<T>::from(mean ? acc / div : acc);
    }
  }
}

// No __restrict__: after the first launch of a long fold the output is also input 0 (each
// element is read and then written by the same thread).
#define EW_VARIADIC_ENTRY(TAG, T)                                                            \
  extern "C" __global__ void __launch_bounds__(256)                                          \
      ew_##TAG(EwPtrs in, T *o, int count, EwParams<EW_MAXIN + 1> p) {                       \
    variadic_run<EW_OP, T>(in, o, count, p);                                                 \
  }
EW_TYPES(EW_VARIADIC_ENTRY)
