// Depthwise (and channel-multiplier) 2-D convolution with the fused activation (ACT from
// conv.py). Dense and grouped convolutions use gemm.cl (implicit GEMM).
// Each work-item computes DW_VEC (4 or 8) consecutive outputs of one output row (b, oc, oh): per kernel
// row, the RW inputs those outputs read are loaded once into registers (with a bit per element
// for "in range", so that a padding tap is skipped as before, not multiplied by 0), each weight is
// read once; the outputs are stored with one vector store where OW is a multiple of 4 (float4,
// or 4 halves through vstorea_half4). The kernel width, stride and dilation along w are defines
// (KW_, SW_, DLW_; the register window is sized by them, RW <= 32: conv.py sends wider windows
// to the implicit GEMM), the rest is in g.
// g (int buffer): C, H, W, OC, OH, OW, KH, KW, stride h, stride w, pad top, pad left,
// dilation h, dilation w, channel multiplier (OC / C), groups of DW_VEC outputs per row
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
#define DST4(p, i, v) vstorea_half4((v), 0, (p) + (i))
#else
#define DT float
#define DLD(p, i) ((p)[i])
#define DST(p, i, v) ((p)[i] = (v))
#define DST4(p, i, v) (*(__global float4*)((p) + (i)) = (v))
#endif
#ifndef KW_
#define KW_ 3
#define SW_ 1
#define DLW_ 1
#endif
#ifndef DW_VEC
#define DW_VEC 4  // a multiple of 4 (conv.py: 4, or 8 through KERNELKIT_OPENCL_DW_VEC)
#endif
#define RW ((DW_VEC - 1) * SW_ + (KW_ - 1) * DLW_ + 1)

__kernel void depthwise(__global const DT* restrict x, __global const DT* restrict w,
                        __global const DT* restrict bias, __global DT* restrict y,
                        const int total, __global const int* restrict g Z_ARG) {
  const int t = get_global_id(0);
  if (t >= total) return;
  const int OW = g[5], OH = g[4], W = g[2];
  const int owq = t % g[15];
  int r = t / g[15];
  const int oh = r % OH;
  r /= OH;
  const int oc = r % g[3];
  const int b = r / g[3];
  const int c = oc / g[14];
  const int ow0 = owq * DW_VEC;
  __global const DT* xp = x + (b * g[0] + c) * g[1] * W;
  __global const DT* wp = w + oc * g[6] * KW_;
  const int ih0 = oh * g[8] - g[10], iw0 = ow0 * SW_ - g[11];
  float acc[DW_VEC];
  _Pragma("unroll") for (int v = 0; v < DW_VEC; ++v) acc[v] = 0.0f;
  for (int kh = 0; kh < g[6]; ++kh) {
    const int ih = ih0 + kh * g[12];
    if (ih < 0 || ih >= g[1]) continue;
    __global const DT* row = xp + ih * W;
    float xs[RW];
    int ok = 0;
    _Pragma("unroll") for (int e = 0; e < RW; ++e) {
      const int iw = iw0 + e;
      const int in = iw >= 0 && iw < W;
      xs[e] = in ? DLD(row, iw) : 0.0f;
      ok |= in << e;
    }
    _Pragma("unroll") for (int kw = 0; kw < KW_; ++kw) {
      const float wv = DLD(wp, kh * KW_ + kw);
      _Pragma("unroll") for (int v = 0; v < DW_VEC; ++v) {
        const int e = v * SW_ + kw * DLW_;
        if ((ok >> e) & 1) acc[v] = mad(xs[e], wv, acc[v]);
      }
    }
  }
  const int i0 = ((b * g[3] + oc) * OH + oh) * OW + ow0;
  float res[DW_VEC];
  _Pragma("unroll") for (int v = 0; v < DW_VEC; ++v) {
    float a = acc[v];
#if HAS_BIAS
    a += DLD(bias, oc);
#endif
#if HAS_Z
    if (ow0 + v < OW) a += DLD(zr, i0 + v);  // the fused residual (Conv's Z input)
#endif
    res[v] = ACT(a);
  }
  _Pragma("unroll") for (int q = 0; q < DW_VEC; q += 4) {
    if ((OW & 3) == 0) {  // i0 + q is a multiple of 4; ow0 + q < OW means all 4 are in range
      if (ow0 + q < OW) DST4(y, i0 + q, ((float4)(res[q], res[q + 1], res[q + 2], res[q + 3])));
    } else {
      _Pragma("unroll") for (int v = q; v < q + 4; ++v)
        if (ow0 + v < OW) DST(y, i0 + v, res[v]);
    }
  }
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
