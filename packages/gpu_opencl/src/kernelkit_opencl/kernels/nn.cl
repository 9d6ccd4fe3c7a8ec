// Normalization-style kernels over float tensors.

// Inference BatchNormalization: x is (N, C, inner...) flattened; channel c = (i / inner) % C.
__kernel void batch_norm(__global const float* restrict x, __global const float* restrict scale,
                         __global const float* restrict bias, __global const float* restrict mean,
                         __global const float* restrict var, __global float* restrict y, const int n,
                         const int channels, const int inner, const float epsilon) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int c = (i / inner) % channels;
  const float inv = scale[c] / sqrt(var[c] + epsilon);
  y[i] = (x[i] - mean[c]) * inv + bias[c];
}

// (Log)Softmax along an axis of length `len`; the tensor is (outer, len, inner); one work-item
// per (outer, inner) line. LOG selects LogSoftmax.
__kernel void softmax(__global const float* restrict x, __global float* restrict y, const int lines,
                      const int len, const int inner, const int log_mode) {
  const int t = get_global_id(0);
  if (t >= lines) return;
  const int o = t / inner, in = t - o * inner;
  const long base = (long)o * len * inner + in;
  float m = -INFINITY;
  for (int k = 0; k < len; ++k) m = fmax(m, x[base + (long)k * inner]);
  float s = 0.0f;
  for (int k = 0; k < len; ++k) s += exp(x[base + (long)k * inner] - m);
  if (log_mode) {
    const float ls = log(s);
    for (int k = 0; k < len; ++k) y[base + (long)k * inner] = x[base + (long)k * inner] - m - ls;
  } else {
    const float inv = 1.0f / s;
    for (int k = 0; k < len; ++k) y[base + (long)k * inner] = exp(x[base + (long)k * inner] - m) * inv;
  }
}

// Reductions over the last `len` elements of each of `rows` rows (reduced axes moved last by
// reduce.py). mode: 0 sum, 1 mean, 2 max, 3 min, 4 prod; NaN propagates through max and min.
__kernel void reduce_rows(__global const float* restrict x, __global float* restrict y, const int rows,
                          const int len, const int mode) {
  const int r = get_global_id(0);
  if (r >= rows) return;
  __global const float* xp = x + (long)r * len;
  float acc = mode == 2 ? -INFINITY : (mode == 3 ? INFINITY : (mode == 4 ? 1.0f : 0.0f));
  for (int k = 0; k < len; ++k) {
    const float v = xp[k];
    if (mode <= 1) acc += v;
    else if (mode == 4) acc *= v;
    else if (v != v || acc != acc) acc = acc + v;
    else acc = mode == 2 ? fmax(acc, v) : fmin(acc, v);
  }
  y[r] = mode == 1 ? acc / (float)len : acc;
}

// Storage type T: float, or half through vload_half/vstore_half (STORAGE_HALF; float arithmetic)
#include "storage.cl"

// Row kernels: one work-group of RG work-items per row, strided over the row (coalesced), with
// work-group reductions in local memory.
#define RG 128

#define WG_REDUCE(name, OP)                                                                         \
  inline float name(float v, __local float* red, const int lid) {                                  \
    red[lid] = v;                                                                                   \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                   \
    for (int o = RG / 2; o > 0; o >>= 1) {                                                          \
      if (lid < o) red[lid] = OP(red[lid], red[lid + o]);                                           \
      barrier(CLK_LOCAL_MEM_FENCE);                                                                 \
    }                                                                                               \
    const float t = red[0];                                                                         \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                   \
    return t;                                                                                       \
  }
#define ADD_(a, b) ((a) + (b))
WG_REDUCE(wg_sum, ADD_)
WG_REDUCE(wg_max, fmax)

// Normalize each of `rows` rows of `len` contiguous elements: y = (x - mean) * inv_std * s + b,
// var = mean((x - mean)^2). per_channel 0 (LayerNormalization): s, b are indexed by the position in
// the row; 1 (InstanceNormalization): by the row's channel r % channels. bias may be absent
// (has_bias 0); mean_out/inv_out are written when write_stats is 1. One work-group per row.
__kernel __attribute__((reqd_work_group_size(RG, 1, 1)))
void row_norm(__global const T* restrict x, __global const T* restrict scale,
              __global const T* restrict bias, __global T* restrict y,
              __global T* restrict mean_out, __global T* restrict inv_out, const int rows,
              const int len, const int channels, const float epsilon, const int per_channel,
              const int has_bias, const int write_stats) {
  __local float red[RG];
  const int r = get_group_id(0), lid = get_local_id(0);
  const long base = (long)r * len;
  float s = 0.0f;
  for (int k = lid; k < len; k += RG) s += LD(x, base + k);
  const float mean = wg_sum(s, red, lid) / (float)len;
  float v = 0.0f;
  for (int k = lid; k < len; k += RG) {
    const float d = LD(x, base + k) - mean;
    v += d * d;
  }
  const float inv = 1.0f / sqrt(wg_sum(v, red, lid) / (float)len + epsilon);
  const int c = r % channels;
  for (int k = lid; k < len; k += RG) {
    const int j = per_channel ? c : k;
    ST(y, base + k, (LD(x, base + k) - mean) * inv * LD(scale, j) + (has_bias ? LD(bias, j) : 0.0f));
  }
  if (write_stats && lid == 0) {
    ST(mean_out, r, mean);
    ST(inv_out, r, inv);
  }
}

// (Log)Softmax over contiguous rows of `len` (the axis is the last one): one work-group per row.
__kernel __attribute__((reqd_work_group_size(RG, 1, 1)))
void softmax_rows(__global const T* restrict x, __global T* restrict y, const int len,
                  const int log_mode) {
  __local float red[RG];
  const int r = get_group_id(0), lid = get_local_id(0);
  const long base = (long)r * len;
  float m = -INFINITY;
  for (int k = lid; k < len; k += RG) m = fmax(m, LD(x, base + k));
  m = wg_max(m, red, lid);
  float s = 0.0f;
  for (int k = lid; k < len; k += RG) s += exp(LD(x, base + k) - m);
  s = wg_sum(s, red, lid);
  if (log_mode) {
    const float ls = log(s);
    for (int k = lid; k < len; k += RG) ST(y, base + k, LD(x, base + k) - m - ls);
  } else {
    const float inv = 1.0f / s;
    for (int k = lid; k < len; k += RG) ST(y, base + k, exp(LD(x, base + k) - m) * inv);
  }
}

// LRN across channels of (N, C, inner): sum of squares over channels [c - lo, c + hi].
__kernel void lrn(__global const float* restrict x, __global float* restrict y, const int n, const int channels,
                  const int inner, const int lo, const int hi, const float alpha_over_size, const float beta,
                  const float bias) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int k = i % inner, c = (i / inner) % channels;
  const long base = (long)(i / (inner * channels)) * channels * inner + k;
  float s = 0.0f;
  for (int cc = max(c - lo, 0); cc <= min(c + hi, channels - 1); ++cc) {
    const float v = x[base + (long)cc * inner];
    s += v * v;
  }
  y[i] = x[i] / pow(bias + alpha_over_size * s, beta);
}

// Resize along the middle axis of (outer, size, inner) to (outer, n, inner): output index j reads
// source rows idx[j] and idx[n + j]; linear mixes them with weight w[j], nearest copies the first.
__kernel void resize_axis(__global const float* restrict x, __global float* restrict y,
                          __global const int* restrict idx, __global const float* restrict w, const int total,
                          const int size, const int n, const int inner, const int linear) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int in = i % inner, j = (i / inner) % n, o = i / (inner * n);
  const long base = (long)o * size * inner + in;
  const float a = x[base + (long)idx[j] * inner];
  y[i] = linear ? a * (1.0f - w[j]) + x[base + (long)idx[n + j] * inner] * w[j] : a;
}
