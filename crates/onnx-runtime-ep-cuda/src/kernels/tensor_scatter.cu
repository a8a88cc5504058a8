// TensorScatter (opset 24; placed after pool_common.cuh), written as a gather so it is one
// pass with no races: each output element at sequence position `pos` of batch b takes
// update[.., s, ..] when s = pos - write_indices[b] (mod max_sequence_length in circular mode)
// lies in [0, sequence_length), else past_cache's element. Values move as raw words of W
// bytes; a contiguous call is walked as [batch, mid, max_seq, inner] with the widest word that
// divides the inner run (16-byte moves on aligned caches). A write index that is negative, or
// that overruns the cache in linear mode, records error code 1 in the device error word and
// leaves that batch's cache as it was.

#define TS_MAX 8

struct ScatterParams {
  i64 n; // output elements (words)
  i32 rank;
  i32 axis;
  i64 max_seq, seq;
  i64 ws; // write_indices stride
  i32 has_w;
  i32 wcode; // ONNX dtype of write_indices
  i32 circular;
  i32 fast; // every index below 2^31: 32-bit multiply-high division
  u32 id;
  i32 _pad;
  i64 dims[TS_MAX];
  FastDiv div[TS_MAX];
  i64 ps[TS_MAX]; // past strides
  i64 us[TS_MAX]; // update strides
  i64 ys[TS_MAX]; // output strides
};

template <int W>
__device__ __forceinline__ void tensor_scatter(const void *past, const void *upd,
                                               const void *widx, void *y, u32 *err,
                                               const ScatterParams &p) {
  typedef typename Word<W>::T E;
  const E *pe = (const E *)past;
  const E *ue = (const E *)upd;
  E *ye = (E *)y;
  const bool fast = p.fast != 0;
  GRID_LOOP(i, p.n) {
    i64 q = i, po = 0, uo = 0, yo = 0, pos = 0, b = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      const i64 c = split_index(q, p.div[k], p.dims[k], fast);
      if (k == p.axis) {
        pos = c;
      } else {
        uo += c * p.us[k];
      }
      if (k == 0) b = c;
      po += c * p.ps[k];
      yo += c * p.ys[k];
    }
    const i64 w = p.has_w ? load_as_i64(widx, b * p.ws, p.wcode) : 0;
    bool from_update = false;
    if (w < 0 || (!p.circular && w > p.max_seq - p.seq)) {
      // Report once per batch (the element at its first position), not per element.
      if (pos == 0) report_error(err, 1u, p.id);
    } else {
      i64 s = pos - w;
      if (p.circular) {
        s %= p.max_seq;
        if (s < 0) s += p.max_seq;
      }
      if (s >= 0 && s < p.seq) {
        from_update = true;
        uo += s * p.us[p.axis];
      }
    }
    ye[yo] = from_update ? ue[uo] : pe[po];
  }
}

#define TENSOR_SCATTER(W)                                                                    \
  extern "C" __global__ void tensor_scatter_w##W(const void *past, const void *upd,          \
                                                 const void *widx, void *y, u32 *err,        \
                                                 ScatterParams p) {                          \
    tensor_scatter<W>(past, upd, widx, y, err, p);                                           \
  }

TENSOR_SCATTER(1)
TENSOR_SCATTER(2)
TENSOR_SCATTER(4)
TENSOR_SCATTER(8)
TENSOR_SCATTER(16)
