// Depthwise (and channel-multiplier) 2-D convolution, one output element per work-item, with the
// fused activation (ACT from conv.py). Dense and grouped convolutions use gemm.cl (implicit GEMM).
// g (int buffer): C, H, W, OC, OH, OW, KH, KW, stride h, stride w, pad top, pad left,
// dilation h, dilation w, channel multiplier (OC / C)
#ifndef ACT
#define ACT(v) (v)
#endif

#if HAS_Z
#define Z_ARG , __global const DT* restrict zr
#else
#define Z_ARG
#endif
// depthwise storage: float, or half through vload_half/vstore_half (float arithmetic)
#ifdef STORAGE_HALF
#define DT half
#define DLD(p, i) vload_half((i), (p))
#define DST(p, i, v) vstore_half((v), (i), (p))
#else
#define DT float
#define DLD(p, i) ((p)[i])
#define DST(p, i, v) ((p)[i] = (v))
#endif

__kernel void depthwise(__global const DT* restrict x, __global const DT* restrict w,
                        __global const DT* restrict bias, __global DT* restrict y,
                        const int total, __global const int* restrict g Z_ARG) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % g[5];
  int r = i / g[5];
  const int oh = r % g[4];
  r /= g[4];
  const int oc = r % g[3];
  const int b = r / g[3];
  const int c = oc / g[14];
  __global const DT* xp = x + (b * g[0] + c) * g[1] * g[2];
  __global const DT* wp = w + oc * g[6] * g[7];
  const int ih0 = oh * g[8] - g[10], iw0 = ow * g[9] - g[11];
  float acc = 0.0f;
  for (int kh = 0; kh < g[6]; ++kh) {
    const int ih = ih0 + kh * g[12];
    if (ih < 0 || ih >= g[1]) continue;
    for (int kw = 0; kw < g[7]; ++kw) {
      const int iw = iw0 + kw * g[13];
      if (iw >= 0 && iw < g[2]) acc = mad(DLD(xp, ih * g[2] + iw), DLD(wp, kh * g[7] + kw), acc);
    }
  }
#if HAS_BIAS
  acc += DLD(bias, oc);
#endif
#if HAS_Z
  acc += DLD(zr, i);  // the fused residual (Conv's Z input)
#endif
  DST(y, i, ACT(acc));
}

// ConvTranspose 2-D, one output element per work-item: y[b, m, oh, ow] gathers every
// x[b, c, ih, iw] * w[c, m % MG, kh, kw] of m's group with ih * SH + kh * DH == oh + begin_h (same
// for w); then bias and ACT. g (int buffer): C, H, W, M, OH, OW, KH, KW, stride h, stride w,
// begin h, begin w, dilation h, dilation w, CG (input channels per group), MG (outputs per group).
__kernel void conv_transpose(__global const float* restrict x, __global const float* restrict w,
                             __global const float* restrict bias, __global float* restrict y,
                             const int total, __global const int* restrict g) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % g[5];
  int r = i / g[5];
  const int oh = r % g[4];
  r /= g[4];
  const int m = r % g[3];
  const int b = r / g[3];
  const int cg = g[14], mg = g[15], grp = m / mg, mm = m - grp * mg;
  const int H = g[1], W = g[2], KH = g[6], KW = g[7];
  float acc = 0.0f;
  for (int ci = 0; ci < cg; ++ci) {
    const int c = grp * cg + ci;
    __global const float* xp = x + (long)(b * g[0] + c) * H * W;
    __global const float* wp = w + (long)(c * mg + mm) * KH * KW;
    for (int kh = 0; kh < KH; ++kh) {
      const int th = oh + g[10] - kh * g[12];
      if (th < 0 || th % g[8]) continue;
      const int ih = th / g[8];
      if (ih >= H) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int tw = ow + g[11] - kw * g[13];
        if (tw < 0 || tw % g[9]) continue;
        const int iw = tw / g[9];
        if (iw < W) acc = mad(xp[ih * W + iw], wp[kh * KW + kw], acc);
      }
    }
  }
#if HAS_BIAS
  acc += bias[m];
#endif
  y[i] = ACT(acc);
}
