// NonMaxSuppression (opsets 10, 11), mirroring the CPU provider
// (onnx-runtime-ep-cpu/src/ops/tensor/detection.rs) decision for decision:
//  1. nms_prepare: every box's corners (y1, x1, y2, x2) in double (center_point_box 1:
//     centre +- half extent; 0: the min / max of each coordinate pair), and every
//     (batch, class, box) candidate's sort key: its score as double in the total order of
//     f64::total_cmp (the key 0 marks a score not above score_threshold).
//  2. nms_sort_tiles / nms_sort_merge: the ids (segment * boxes + box, one segment per
//     (batch, class)) sorted by segment, then key descending, then box ascending: the CPU's
//     stable descending sort.
//  3. nms_select: one block per segment walks its candidates in that order (staged through
//     shared memory); a candidate is kept when its IoU with every kept box is <= the
//     threshold (so a NaN IoU suppresses), until max_output_boxes_per_class are kept. The
//     kept boxes of a segment are spread over the block's threads (kept box j belongs to
//     thread j % blockDim), so each thread only reads what it wrote itself.
//  4. isort_scan_* over the per-segment counts; nms_write writes [batch, class, box] rows.
// Products that feed a sum go through __dmul_rn so nothing is contracted into an FMA the CPU
// does not do.

struct NmsParams {
  i64 batches, classes, n; // boxes per batch
  i64 bs[3];               // boxes strides
  i64 ss[3];               // scores strides
  i64 max_out;
  double iou_th;
  double score_th;
  i32 box_code, score_code;
  i32 center, has_score_th;
};

__device__ __forceinline__ double nms_load(const void *p, i64 off, int code) {
  switch (code) {
  case 1: return (double)((const float *)p)[off];
  case 10: return (double)__half2float(((const f16 *)p)[off]);
  case 11: return ((const double *)p)[off];
  case 16: return (double)__bfloat162float(((const bf16 *)p)[off]);
  default: return 0.0;
  }
}

// The order of f64::total_cmp as unsigned keys (key 0 is taken by "filtered out").
__device__ __forceinline__ u64 nms_key(double s) {
  const u64 b = (u64)__double_as_longlong(s);
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

extern "C" __global__ void nms_prepare(const void *__restrict__ boxes,
                                       const void *__restrict__ scores,
                                       double *__restrict__ corners, u64 *__restrict__ keys,
                                       u32 *__restrict__ ids, NmsParams p) {
  const i64 total = p.batches * p.classes * p.n;
  GRID_LOOP(t, total) {
    const i64 i = t % p.n;
    const i64 seg = t / p.n;
    const i64 c = seg % p.classes;
    const i64 b = seg / p.classes;
    if (c == 0) {
      const i64 o = b * p.bs[0] + i * p.bs[1];
      const double v0 = nms_load(boxes, o, p.box_code);
      const double v1 = nms_load(boxes, o + p.bs[2], p.box_code);
      const double v2 = nms_load(boxes, o + 2 * p.bs[2], p.box_code);
      const double v3 = nms_load(boxes, o + 3 * p.bs[2], p.box_code);
      double *q = corners + (b * p.n + i) * 4;
      if (p.center) {
        // (xc, yc, w, h): [yc - h/2, xc - w/2, yc + h/2, xc + w/2]
        q[0] = v1 - v3 / 2.0;
        q[1] = v0 - v2 / 2.0;
        q[2] = v1 + v3 / 2.0;
        q[3] = v0 + v2 / 2.0;
      } else {
        q[0] = fmin(v0, v2);
        q[1] = fmin(v1, v3);
        q[2] = fmax(v0, v2);
        q[3] = fmax(v1, v3);
      }
    }
    const double s = nms_load(scores, b * p.ss[0] + c * p.ss[1] + i * p.ss[2], p.score_code);
    keys[t] = (p.has_score_th && !(s > p.score_th)) ? 0ull : nms_key(s);
    ids[t] = (u32)t;
  }
}

struct NmsCmp {
  const u64 *keys;
  i64 n;
  __device__ __forceinline__ bool less(u32 a, u32 b) const {
    const i64 sa = (i64)a / n, sb = (i64)b / n;
    if (sa != sb) return sa < sb;
    const u64 ka = keys[a], kb = keys[b];
    if (ka != kb) return ka > kb;
    return a < b;
  }
};

extern "C" __global__ void nms_sort_tiles(u32 *ids, i64 n, NmsCmp c) {
  isort_tiles_body(ids, n, c);
}

extern "C" __global__ void nms_sort_merge(const u32 *src, u32 *dst, i64 n, i64 width, NmsCmp c) {
  isort_merge_body(src, dst, n, width, c);
}

// The CPU's iou(a, b): a is the kept box, b the candidate.
__device__ __forceinline__ double nms_iou(const double *a, const double *b) {
  const double aa = __dmul_rn(a[2] - a[0], a[3] - a[1]);
  const double ab = __dmul_rn(b[2] - b[0], b[3] - b[1]);
  if (aa <= 0.0 || ab <= 0.0) return 0.0;
  const double ih = fmax(fmin(a[2], b[2]) - fmax(a[0], b[0]), 0.0);
  const double iw = fmax(fmin(a[3], b[3]) - fmax(a[1], b[1]), 0.0);
  const double inter = __dmul_rn(ih, iw);
  const double uni = (aa + ab) - inter;
  if (uni <= 0.0) return 0.0;
  return inter / uni;
}

#define NMS_CHUNK 512

// One block per segment. kept[seg * n + j] = box index of the j-th kept box;
// counts[seg] = how many were kept.
extern "C" __global__ void nms_select(const u32 *__restrict__ sorted, const u64 *__restrict__ keys,
                                      const double *__restrict__ corners, u32 *__restrict__ kept,
                                      i64 *__restrict__ counts, NmsParams p) {
  __shared__ double cand[NMS_CHUNK][4];
  __shared__ u32 cand_box[NMS_CHUNK];
  __shared__ int cand_ok[NMS_CHUNK];
  const i64 seg = blockIdx.x;
  const i64 b = seg / p.classes;
  const i64 base = seg * p.n;
  const double *bc = corners + b * p.n * 4;
  u32 *mine = kept + base;
  i64 nkept = 0;
  bool done = p.max_out <= 0;
  for (i64 c0 = 0; c0 < p.n && !done; c0 += NMS_CHUNK) {
    const i64 len = p.n - c0 < NMS_CHUNK ? p.n - c0 : NMS_CHUNK;
    __syncthreads();
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
      const u32 id = sorted[base + c0 + t];
      const u32 box = (u32)((i64)id - base);
      cand_box[t] = box;
      cand_ok[t] = !(p.has_score_th && keys[id] == 0ull);
      for (int k = 0; k < 4; ++k) cand[t][k] = bc[(i64)box * 4 + k];
    }
    __syncthreads();
    for (i64 t = 0; t < len; ++t) {
      if (nkept >= p.max_out || !cand_ok[t]) {
        done = true;
        break;
      }
      const double *ci = cand[t];
      int suppressed = 0;
      for (i64 j = threadIdx.x; j < nkept; j += blockDim.x) {
        const double *ck = bc + (i64)mine[j] * 4;
        if (!(nms_iou(ck, ci) <= p.iou_th)) suppressed = 1;
      }
      if (!__syncthreads_or(suppressed)) {
        if ((i64)threadIdx.x == nkept % blockDim.x) mine[nkept] = cand_box[t];
        ++nkept;
      }
    }
  }
  if (threadIdx.x == 0) counts[seg] = nkept;
}

// Rows [batch, class, box] of every kept box: row offsets[seg] + j for the j-th of segment seg.
extern "C" __global__ void nms_write(const u32 *__restrict__ kept, const i64 *__restrict__ counts,
                                     const i64 *__restrict__ offsets, i64 *__restrict__ out,
                                     i64 os0, i64 os1, NmsParams p) {
  const i64 total = p.batches * p.classes * p.n;
  GRID_LOOP(t, total) {
    const i64 j = t % p.n;
    const i64 seg = t / p.n;
    if (j >= counts[seg]) continue;
    const i64 row = offsets[seg] + j;
    i64 *o = out + row * os0;
    o[0] = seg / p.classes;
    o[os1] = seg % p.classes;
    o[2 * os1] = (i64)kept[t];
  }
}
