// Storage type T: float, or half through vload_half/vstore_half (STORAGE_HALF; float arithmetic)
#include "storage.cl"

// 2-D pooling, one output element per work-item. p (int buffer): C, H, W, OH, OW, KH, KW,
// stride h, stride w, pad top, pad left, dilation h, dilation w, pad bottom, pad right, flags (bit 0: count_include_pad, bit 1: storage_order)
__kernel void max_pool(__global const T* restrict x, __global T* restrict y,
                       __global long* restrict indices, const int total, __global const int* restrict p) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % p[4];
  const int oh = (i / p[4]) % p[3];
  const int bc = i / (p[4] * p[3]);
  __global const T* xp = x + bc * p[1] * p[2];
  float best = -INFINITY;
  int bh = -1, bw = -1;
  for (int kh = 0; kh < p[5]; ++kh) {
    const int ih = oh * p[7] - p[9] + kh * p[11];
    if (ih < 0 || ih >= p[1]) continue;
    for (int kw = 0; kw < p[6]; ++kw) {
      const int iw = ow * p[8] - p[10] + kw * p[12];
      if (iw < 0 || iw >= p[2]) continue;
      const float v = LD(xp, ih * p[2] + iw);
      if (v > best || bh < 0 || (v != v && best == best)) { best = v; bh = ih; bw = iw; }
    }
  }
  ST(y, i, best);
  const long hw = (p[15] & 2) ? (long)bw * p[1] + bh : (long)bh * p[2] + bw;
  indices[i] = (long)bc * p[1] * p[2] + hw;
}

__kernel void average_pool(__global const T* restrict x, __global T* restrict y, const int total,
                           __global const int* restrict p) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % p[4];
  const int oh = (i / p[4]) % p[3];
  const int bc = i / (p[4] * p[3]);
  __global const T* xp = x + bc * p[1] * p[2];
  float sum = 0.0f;
  int valid = 0, padded = 0;
  for (int kh = 0; kh < p[5]; ++kh) {
    const int ih = oh * p[7] - p[9] + kh * p[11];
    const bool in_h = ih >= 0 && ih < p[1], pad_h = ih >= -p[9] && ih < p[1] + p[13];
    for (int kw = 0; kw < p[6]; ++kw) {
      const int iw = ow * p[8] - p[10] + kw * p[12];
      if (in_h && iw >= 0 && iw < p[2]) { sum += LD(xp, ih * p[2] + iw); ++valid; }
      if (pad_h && iw >= -p[10] && iw < p[2] + p[14]) ++padded;
    }
  }
  ST(y, i, sum / (float)((p[15] & 1) ? padded : valid));
}

// One work-item per (n, c) row of length hw: mean (mode 0) or max (mode 1).
__kernel void global_pool(__global const T* restrict x, __global T* restrict y, const int rows,
                          const int hw, const int mode) {
  const int r = get_global_id(0);
  if (r >= rows) return;
  __global const T* xp = x + (long)r * hw;
  float acc = mode ? -INFINITY : 0.0f;
  for (int k = 0; k < hw; ++k) {  // max: NaN propagates, as in NumPy (fmax would skip it)
    const float v = LD(xp, k);
    acc = mode ? ((v > acc || v != v) ? v : acc) : acc + v;
  }
  ST(y, r, mode ? acc : acc / (float)hw);
}
