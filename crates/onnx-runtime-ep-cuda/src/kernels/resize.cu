// Resize and Upsample: one thread per output element, reading per-axis tables the host worked
// out once per geometry (the CPU provider's plan: input index and weight of every tap of every
// output coordinate, in float64 and float32, and a flag per output coordinate) from a device
// buffer the kernel keeps. Axes whose plan is the identity are not resampled.
//
// `rs_nearest_w*` gathers elements bit for bit (every dtype of that width); `rs_nearest_vec_w*`
// does the same writing 16 bytes of the innermost axis per thread. A coordinate can be
// special: 1 = outside the crop (tf_crop_and_resize: the extrapolation value), 2 = no tap
// (exclude_outside dropped the nearest one: 0). The CPU provider resamples one axis at a time
// in its pass order, so the last special axis in that order decides.
//
// `rs_interp_*_m{1,2}` (linear, cubic, antialias) nest the tap loops with the first pass axis
// innermost, as the CPU's separable passes sum, skipping zero weights; `_m0` takes any number
// of resampled axes as a sum over the taps' product. A coordinate outside the crop on any axis
// gives the extrapolation value. Floats compute in float (double for double), integers in
// double, rounded half to even and saturated.

#define RS_MAX 8

struct ResizeParams {
  i64 n;
  i32 rank;
  i32 m;
  i32 fast;
  // Whether any coordinate of the table is special (flags worth reading).
  i32 special;
  i64 out_dims[RS_MAX];
  FastDiv div[RS_MAX];
  i64 xs[RS_MAX];
  i64 ys[RS_MAX];
  // Per axis: its slot in pass order, or -1 when the axis is not resampled.
  i32 slot[RS_MAX];
  // Per slot (pass order): the axis, its taps per output coordinate, its first table entry
  // (entry tab + j * taps + t for output coordinate j) and its first flag (flag + j).
  i32 axis[RS_MAX];
  i32 taps[RS_MAX];
  i64 tab[RS_MAX];
  i64 flag[RS_MAX];
  u64 idx;
  u64 wf;
  u64 wd;
  u64 flags;
  u64 extrap;
  // The vector kernels: the innermost walk axis' extent divided by the vector width.
  FastDiv div_vec;
};

template <int W>
__device__ __forceinline__ void rs_nearest(const typename Word<W>::T *__restrict__ x,
                                           typename Word<W>::T *__restrict__ y,
                                           const ResizeParams &p) {
  const i32 *idx = reinterpret_cast<const i32 *>(p.idx);
  const i32 *flags = reinterpret_cast<const i32 *>(p.flags);
  const bool fast = p.fast != 0;
  GRID_LOOP(i, p.n) {
    i64 q = i, xoff = 0, yoff = 0;
    int special = 0, special_slot = -1;
    for (int d = p.rank - 1; d >= 0; --d) {
      const i64 c = split_index(q, p.div[d], p.out_dims[d], fast);
      yoff += c * p.ys[d];
      const int s = p.slot[d];
      if (s < 0) {
        xoff += c * p.xs[d];
      } else {
        xoff += (i64)idx[p.tab[s] + c] * p.xs[d];
        if (p.special) {
          const int f = flags[p.flag[s] + c];
          if (f != 0 && s > special_slot) {
            special = f;
            special_slot = s;
          }
        }
      }
    }
    if (special == 1) {
      y[yoff] = (typename Word<W>::T)p.extrap;
    } else if (special == 2) {
      y[yoff] = (typename Word<W>::T)0;
    } else {
      y[yoff] = x[xoff];
    }
  }
}

extern "C" __global__ void rs_nearest_w1(const u8 *x, u8 *y, ResizeParams p) {
  rs_nearest<1>(x, y, p);
}
extern "C" __global__ void rs_nearest_w2(const u16 *x, u16 *y, ResizeParams p) {
  rs_nearest<2>(x, y, p);
}
extern "C" __global__ void rs_nearest_w4(const u32 *x, u32 *y, ResizeParams p) {
  rs_nearest<4>(x, y, p);
}
extern "C" __global__ void rs_nearest_w8(const u64 *x, u64 *y, ResizeParams p) {
  rs_nearest<8>(x, y, p);
}

// 16 bytes of consecutive outputs along the innermost walk axis per thread (V = 16 / W
// elements, one vector store). The host checks that the innermost axis is contiguous in the
// output, that its extent is a multiple of V and that every other output stride is too.
template <int W>
__device__ __forceinline__ void rs_nearest_vec(const typename Word<W>::T *__restrict__ x,
                                               typename Word<W>::T *__restrict__ y,
                                               const ResizeParams &p) {
  typedef typename Word<W>::T E;
  constexpr int V = 16 / W;
  struct __align__(16) Pack {
    E v[V];
  };
  const i32 *idx = reinterpret_cast<const i32 *>(p.idx);
  const i32 *flags = reinterpret_cast<const i32 *>(p.flags);
  const bool fast = p.fast != 0;
  const int last = p.rank - 1;
  const i64 groups = p.n / V;
  const int sl = p.slot[last];
  const i64 xs_last = p.xs[last];
  GRID_LOOP(i, groups) {
    i64 q = i;
    const i64 c0 = split_index(q, p.div_vec, p.out_dims[last] / V, fast) * V;
    i64 xoff = 0, yoff = c0;
    int special = 0, special_slot = -1;
    for (int d = last - 1; d >= 0; --d) {
      const i64 c = split_index(q, p.div[d], p.out_dims[d], fast);
      yoff += c * p.ys[d];
      const int s = p.slot[d];
      if (s < 0) {
        xoff += c * p.xs[d];
      } else {
        xoff += (i64)idx[p.tab[s] + c] * p.xs[d];
        if (p.special) {
          const int f = flags[p.flag[s] + c];
          if (f != 0 && s > special_slot) {
            special = f;
            special_slot = s;
          }
        }
      }
    }
    Pack out;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const i64 c = c0 + v;
      int sp = special;
      i64 xo = xoff;
      if (sl < 0) {
        xo += c * xs_last;
      } else {
        xo += (i64)idx[p.tab[sl] + c] * xs_last;
        if (p.special) {
          const int f = flags[p.flag[sl] + c];
          if (f != 0 && sl > special_slot) sp = f;
        }
      }
      out.v[v] = sp == 1 ? (E)p.extrap : sp == 2 ? (E)0 : x[xo];
    }
    *reinterpret_cast<Pack *>(y + yoff) = out;
  }
}

extern "C" __global__ void rs_nearest_vec_w1(const u8 *x, u8 *y, ResizeParams p) {
  rs_nearest_vec<1>(x, y, p);
}
extern "C" __global__ void rs_nearest_vec_w2(const u16 *x, u16 *y, ResizeParams p) {
  rs_nearest_vec<2>(x, y, p);
}
extern "C" __global__ void rs_nearest_vec_w4(const u32 *x, u32 *y, ResizeParams p) {
  rs_nearest_vec<4>(x, y, p);
}
extern "C" __global__ void rs_nearest_vec_w8(const u64 *x, u64 *y, ResizeParams p) {
  rs_nearest_vec<8>(x, y, p);
}

template <typename A> __device__ __forceinline__ const A *rs_weights(const ResizeParams &p) {
  if constexpr (same_type<A, double>::value) {
    return reinterpret_cast<const double *>(p.wd);
  } else {
    return reinterpret_cast<const float *>(p.wf);
  }
}

// Sum over the taps of slot `s` at output coordinate `j` of w * x[off + index * stride].
template <typename T, typename A>
__device__ __forceinline__ A rs_line(const T *__restrict__ x, i64 off, const i32 *__restrict__ idx,
                                     const A *__restrict__ w, const ResizeParams &p, int s, i64 j) {
  const i64 e = p.tab[s] + j * p.taps[s];
  const i64 st = p.xs[p.axis[s]];
  const int taps = p.taps[s];
  A acc = (A)0;
  for (int t = 0; t < taps; ++t) {
    const A wt = w[e + t];
    if (wt != (A)0) acc += wt * (A)widen(x[off + (i64)idx[e + t] * st]);
  }
  return acc;
}

template <typename T, typename A, int M>
__device__ __forceinline__ void rs_interp(const T *__restrict__ x, T *__restrict__ y,
                                          const ResizeParams &p) {
  constexpr int S = M == 0 ? RS_MAX : M;
  const i32 *idx = reinterpret_cast<const i32 *>(p.idx);
  const i32 *flags = reinterpret_cast<const i32 *>(p.flags);
  const A *w = rs_weights<A>(p);
  const bool fast = p.fast != 0;
  const int m = M == 0 ? p.m : M;
  const T extrap = from_bits<T>(p.extrap);
  GRID_LOOP(i, p.n) {
    i64 q = i, xoff = 0, yoff = 0;
    i64 j[S];
    bool outside = false;
    for (int d = p.rank - 1; d >= 0; --d) {
      const i64 c = split_index(q, p.div[d], p.out_dims[d], fast);
      yoff += c * p.ys[d];
      const int s = p.slot[d];
      if (s < 0) {
        xoff += c * p.xs[d];
      } else {
        if constexpr (M == 0) {
          j[s] = c;
        } else {
#pragma unroll
          for (int u = 0; u < M; ++u)
            if (u == s) j[u] = c;
        }
        if (p.special) outside |= flags[p.flag[s] + c] == 1;
      }
    }
    if (outside) {
      y[yoff] = extrap;
      continue;
    }
    A acc = (A)0;
    if constexpr (M == 1) {
      acc = rs_line<T, A>(x, xoff, idx, w, p, 0, j[0]);
    } else if constexpr (M == 2) {
      const i64 e = p.tab[1] + j[1] * p.taps[1];
      const i64 st = p.xs[p.axis[1]];
      for (int t = 0; t < p.taps[1]; ++t) {
        const A wt = w[e + t];
        if (wt != (A)0) acc += wt * rs_line<T, A>(x, xoff + (i64)idx[e + t] * st, idx, w, p, 0, j[0]);
      }
    } else {
      // Any number of axes: the sum over every combination of taps of the weights' product.
      int t[RS_MAX];
      for (int s = 0; s < m; ++s) t[s] = 0;
      while (true) {
        A wt = (A)1;
        i64 off = xoff;
        for (int s = 0; s < m; ++s) {
          const i64 e = p.tab[s] + j[s] * p.taps[s] + t[s];
          wt *= w[e];
          off += (i64)idx[e] * p.xs[p.axis[s]];
        }
        if (wt != (A)0) acc += wt * (A)widen(x[off]);
        int s = 0;
        for (; s < m; ++s) {
          if (++t[s] < p.taps[s]) break;
          t[s] = 0;
        }
        if (s == m) break;
      }
    }
    y[yoff] = StoreRound<T>::from(acc);
  }
}

#define RS_INTERP(NAME, T, A)                                                                \
  extern "C" __global__ void rs_interp_##NAME##_m1(const T *x, T *y, ResizeParams p) {      \
    rs_interp<T, A, 1>(x, y, p);                                                             \
  }                                                                                          \
  extern "C" __global__ void rs_interp_##NAME##_m2(const T *x, T *y, ResizeParams p) {      \
    rs_interp<T, A, 2>(x, y, p);                                                             \
  }                                                                                          \
  extern "C" __global__ void rs_interp_##NAME##_m0(const T *x, T *y, ResizeParams p) {      \
    rs_interp<T, A, 0>(x, y, p);                                                             \
  }

RS_INTERP(f32, float, float)
RS_INTERP(f64, double, double)
RS_INTERP(f16, f16, float)
RS_INTERP(bf16, bf16, float)
RS_INTERP(i8, signed char, double)
RS_INTERP(i16, short, double)
RS_INTERP(i32, int, double)
RS_INTERP(i64, long long, double)
RS_INTERP(u8, unsigned char, double)
RS_INTERP(u16, unsigned short, double)
RS_INTERP(u32, unsigned int, double)
RS_INTERP(u64, unsigned long long, double)
