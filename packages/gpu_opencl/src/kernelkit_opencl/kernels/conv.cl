// Depthwise (and channel-multiplier) 2-D convolution, one output element per work-item, with the
// fused activation (ACT from conv.py). Dense and grouped convolutions use gemm.cl (implicit GEMM).
// g (int buffer): C, H, W, OC, OH, OW, KH, KW, stride h, stride w, pad top, pad left,
// dilation h, dilation w, channel multiplier (OC / C)
#ifndef ACT
#define ACT(v) (v)
#endif

__kernel void depthwise(__global const float* restrict x, __global const float* restrict w,
                        __global const float* restrict bias, __global float* restrict y,
                        const int total, __global const int* restrict g) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int ow = i % g[5];
  int r = i / g[5];
  const int oh = r % g[4];
  r /= g[4];
  const int oc = r % g[3];
  const int b = r / g[3];
  const int c = oc / g[14];
  __global const float* xp = x + (b * g[0] + c) * g[1] * g[2];
  __global const float* wp = w + oc * g[6] * g[7];
  const int ih0 = oh * g[8] - g[10], iw0 = ow * g[9] - g[11];
  float acc = 0.0f;
  for (int kh = 0; kh < g[6]; ++kh) {
    const int ih = ih0 + kh * g[12];
    if (ih < 0 || ih >= g[1]) continue;
    for (int kw = 0; kw < g[7]; ++kw) {
      const int iw = iw0 + kw * g[13];
      if (iw >= 0 && iw < g[2]) acc = mad(xp[ih * g[2] + iw], wp[kh * g[7] + kw], acc);
    }
  }
#if HAS_BIAS
  acc += bias[oc];
#endif
  y[i] = ACT(acc);
}
