// Attention (ONNX opset 23) without mask or cache: y = softmax(q k^T * scale) v, per (batch, head).
// Storage type T: float, or half through vload_half/vstore_half (STORAGE_HALF; float arithmetic)
#include "storage.cl"
#ifdef STORAGE_HALF
#define LD4(p, i) vload_half4(0, (p) + (i))
#else
#define LD4(p, i) vload4(0, (p) + (i))
#endif

// Defines: WG work-items per group, ROWS query rows per group, DK / DV the head sizes of q/k and
// of v, KMAX >= the key count (one row of scores in local memory), NJ the key slices the output
// phase splits over (WG / DV when DV <= WG, else 1), BUFW = max(DK, WG), CAUSAL (key j > query i
// masked), QK_OUT (write the scaled scores before the mask to qk, (batch, heads, sq, sk)).
//
// One work-group per (block of ROWS query rows, batch * head): the scaled query rows go to local
// memory, each work-item computes the scores of keys j = lid, lid + WG, ... for all ROWS rows
// (ROWS accumulators), WG / ROWS work-items per row reduce the max and the sum of exponentials,
// then work-item (part, d) accumulates p[r][j] * v[j][d] over its contiguous slice of keys for all rows,
// and the slices are summed through local memory. Element (b, h, i, d) of q sits at
// q_off + b * qsb + h * qsh + i * qsi + d (4-D and 3-D layouts alike); key/value head h / group.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void attention(__global const T* restrict q, __global const T* restrict k, __global const T* restrict v,
               __global T* restrict y, __global T* restrict qk, const int q_off, const int k_off,
               const int v_off, const int heads, const int group, const int sq, const int sk,
               const int qsb, const int qsh, const int qsi, const int ksb, const int ksh, const int ksi,
               const int vsb, const int vsh, const int vsi, const int ysb, const int ysh, const int ysi,
               const float scale) {
  __local float buf[ROWS * BUFW];  // scaled q rows, then reduction partials
  __local float s[ROWS * KMAX];    // scores, then exp(score - max)
  __local float stat[ROWS];        // row max, then 1 / row sum
  const int lid = get_local_id(0), bh = get_group_id(1);
  const int b = bh / heads, h = bh - b * heads, kh = h / group;
  const int i0 = get_group_id(0) * ROWS, rows = min(ROWS, sq - i0);
  const long qbase = q_off + (long)b * qsb + (long)h * qsh + (long)i0 * qsi;
  for (int idx = lid; idx < ROWS * DK; idx += WG) {
    const int r = idx / DK, d = idx - r * DK;
    buf[idx] = r < rows ? LD(q, qbase + (long)r * qsi + d) * scale : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const long kbase = k_off + (long)b * ksb + (long)kh * ksh;
  for (int j = lid; j < sk; j += WG) {
    float acc[ROWS];
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
    const long kp = kbase + (long)j * ksi;
#if DK % 4 == 0  // four head elements a load (vloadn needs only element alignment)
    for (int d = 0; d < DK; d += 4) {
      const float4 kv = LD4(k, kp + d);
      for (int r = 0; r < ROWS; ++r) acc[r] += dot(vload4(0, buf + r * DK + d), kv);
    }
#else
    for (int d = 0; d < DK; ++d) {
      const float kv = LD(k, kp + d);
      for (int r = 0; r < ROWS; ++r) acc[r] = fma(buf[r * DK + d], kv, acc[r]);
    }
#endif
    for (int r = 0; r < ROWS; ++r) {
#if QK_OUT
      if (r < rows) ST(qk, ((long)bh * sq + i0 + r) * sk + j, acc[r]);
#endif
#if CAUSAL
      if (j > i0 + r) acc[r] = -INFINITY;
#endif
      s[r * KMAX + j] = acc[r];
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // softmax over each row: WG / ROWS work-items per row
  const int tpr = WG / ROWS, r = lid / tpr, t = lid - r * tpr;
  __local float* row = s + r * KMAX;
  float m = -INFINITY;
  for (int j = t; j < sk; j += tpr) m = fmax(m, row[j]);
  buf[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (t == 0) {
    for (int u = 1; u < tpr; ++u) m = fmax(m, buf[lid + u]);
    stat[r] = m == -INFINITY ? 0.0f : m;  // a fully masked row: every exp is 0
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  m = stat[r];
  float sum = 0.0f;
  for (int j = t; j < sk; j += tpr) {
    const float e = exp(row[j] - m);
    row[j] = e;
    sum += e;
  }
  buf[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (t == 0) {
    for (int u = 1; u < tpr; ++u) sum += buf[lid + u];
    stat[r] = sum == 0.0f ? 0.0f : 1.0f / sum;  // a fully masked row gives 0, as ONNX defines
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  // y[r][d] = sum_j p[r][j] v[j][d] / sum[r]: keys j0 <= j < j1 (j0 a multiple of 4), four at a time
  const long vbase = v_off + (long)b * vsb + (long)kh * vsh;
  const long ybase = (long)b * ysb + (long)h * ysh + (long)i0 * ysi;
#define ACCUMULATE(acc, d, j0, j1)                                                                  \
  {                                                                                                 \
    int j = (j0);                                                                                   \
    for (; j + 4 <= (j1); j += 4) {                                                                 \
      const __global T* vp = v + vbase + (long)j * vsi + (d);                                       \
      const float4 vv = (float4)(LD(vp, 0), LD(vp, vsi), LD(vp, 2 * vsi), LD(vp, 3 * vsi));         \
      for (int rr = 0; rr < ROWS; ++rr) acc[rr] += dot(vload4(0, s + rr * KMAX + j), vv);            \
    }                                                                                               \
    for (; j < (j1); ++j) {                                                                         \
      const float vv = LD(v, vbase + (long)j * vsi + (d));                                          \
      for (int rr = 0; rr < ROWS; ++rr) acc[rr] = fma(s[rr * KMAX + j], vv, acc[rr]);               \
    }                                                                                               \
  }
#if NJ > 1
  const int part = lid / DV, d = lid - part * DV, chunk = ((sk + NJ - 1) / NJ + 3) & ~3;
  if (part < NJ) {
    float acc[ROWS];
    for (int rr = 0; rr < ROWS; ++rr) acc[rr] = 0.0f;
    ACCUMULATE(acc, d, part * chunk, min(sk, (part + 1) * chunk));
    for (int rr = 0; rr < ROWS; ++rr) buf[(rr * NJ + part) * DV + d] = acc[rr];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int idx = lid; idx < rows * DV; idx += WG) {
    const int rr = idx / DV, dd = idx - rr * DV;
    float total = 0.0f;
    for (int p = 0; p < NJ; ++p) total += buf[(rr * NJ + p) * DV + dd];
    ST(y, ybase + (long)rr * ysi + dd, total * stat[rr]);
  }
#else
  for (int d = lid; d < DV; d += WG) {
    float acc[ROWS];
    for (int rr = 0; rr < ROWS; ++rr) acc[rr] = 0.0f;
    ACCUMULATE(acc, d, 0, sk);
    for (int rr = 0; rr < rows; ++rr) ST(y, ybase + (long)rr * ysi + d, acc[rr] * stat[rr]);
  }
#endif
}
