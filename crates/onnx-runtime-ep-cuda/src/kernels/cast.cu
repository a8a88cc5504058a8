// Cast to OUT_T (defined per variant, e.g. `#define OUT_T float`) from every numeric dtype and
// bool, honouring input and output strides. Float to integer truncates toward zero, saturates
// at the integer type's limits and maps NaN to 0; to bool is `x != 0`.

#define CAST_FROM(NAME, T)                                                                   \
  extern "C" __global__ void cast_from_##NAME(const T *__restrict__ in,                     \
                                              OUT_T *__restrict__ out, Strided2 p) {         \
    GRID_LOOP(i, p.n) {                                                                      \
      i64 a, b;                                                                              \
      offsets2(p, i, a, b);                                                                  \
      out[b] = convert<OUT_T>(in[a]);                                                        \
    }                                                                                        \
  }

FOR_ALL(CAST_FROM)
