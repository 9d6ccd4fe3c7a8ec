// Elementwise kernels. elementwise.py appends one UNARY(name, expr) / BINARY(name, expr) line per
// row of its table; expressions read the float values x (and y) and the parameters a, b.
// Storage type T is float, or half read/written with vload_half/vstore_half (no cl_khr_fp16
// needed: half tensors compute in float everywhere).
#include "storage.cl"

// EW_VEC consecutive elements per work-item (elementwise.py launches n / EW_VEC work-items):
// where all of them are in range, one vector load per input and one vector store (VLD4/VST4:
// float4, or 4 halves in 64 bits), the expression evaluated per component as a scalar (the same
// results, NaN handling included, as one element per work-item); the tail element by element.
#define EW_VEC 4
#define EACH4(r, EXPR1) do { float x, y; (void)y;                                                 \
    x = xv.x; y = yv.x; r.x = (EXPR1); x = xv.y; y = yv.y; r.y = (EXPR1);                       \
    x = xv.z; y = yv.z; r.z = (EXPR1); x = xv.w; y = yv.w; r.w = (EXPR1); } while (0)

// Offsets of output element i in two broadcast inputs: meta = [rank, dims.., strides_a.., strides_b..].
inline void bcast_index(__global const int* meta, int i, int* ia, int* ib) {
  const int rank = meta[0];
  int r = i, oa = 0, ob = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int dim = meta[1 + d];
    const int c = r % dim;
    r /= dim;
    oa += c * meta[1 + rank + d];
    ob += c * meta[1 + 2 * rank + d];
  }
  *ia = oa;
  *ib = ob;
}

#define UNARY(NAME, EXPR)                                                                        \
  __kernel void unary_##NAME(__global const T* xp, __global T* yp, const int n, const float a,  \
                             const float b) {                                                    \
    const int i0 = get_global_id(0) * EW_VEC;                                                    \
    if (i0 + EW_VEC <= n) {                                                                      \
      const float4 xv = VLD4(xp, i0), yv = xv;                                                   \
      float4 r;                                                                                  \
      EACH4(r, EXPR);                                                                            \
      VST4(yp, i0, r);                                                                           \
    } else {                                                                                     \
      for (int i = i0; i < n; ++i) {                                                             \
        const float x = LD(xp, i);                                                               \
        ST(yp, i, (EXPR));                                                                       \
      }                                                                                          \
    }                                                                                            \
  }

// mode 0: same shapes; 1: y is one element; 2: x is one element; 3: general broadcast (meta).
#define BINARY(NAME, EXPR)                                                                       \
  __kernel void binary_##NAME(__global const T* xp, __global const T* yp, __global T* zp,       \
                              const int n, __global const int* meta, const int mode) {          \
    const int i0 = get_global_id(0) * EW_VEC;                                                    \
    if (i0 >= n) return;                                                                         \
    if (mode < 3 && i0 + EW_VEC <= n) {                                                          \
      const float4 xv = mode == 2 ? (float4)(LD(xp, 0)) : VLD4(xp, i0);                          \
      const float4 yv = mode == 1 ? (float4)(LD(yp, 0)) : VLD4(yp, i0);                          \
      float4 r;                                                                                  \
      EACH4(r, EXPR);                                                                            \
      VST4(zp, i0, r);                                                                           \
      return;                                                                                    \
    }                                                                                            \
    for (int i = i0; i < min(i0 + EW_VEC, n); ++i) {                                             \
      int ia = i, ib = i;                                                                        \
      if (mode == 1) ib = 0;                                                                     \
      else if (mode == 2) ia = 0;                                                                \
      else if (mode == 3) bcast_index(meta, i, &ia, &ib);                                        \
      const float x = LD(xp, ia);                                                                \
      const float y = LD(yp, ib);                                                                \
      ST(zp, i, (EXPR));                                                                         \
    }                                                                                            \
  }

// Clip to [a, b] (NaN stays NaN, as NumPy's maximum/minimum); EW_VEC elements per work-item.
#define CLIP_EXPR (x != x ? x : fmin(fmax(x, a), b))
__kernel void clip(__global const T* xp, __global T* yp, const int n, const float a, const float b) {
  const int i0 = get_global_id(0) * EW_VEC;
  if (i0 + EW_VEC <= n) {
    const float4 xv = VLD4(xp, i0), yv = xv;
    float4 r;
    EACH4(r, CLIP_EXPR);
    VST4(yp, i0, r);
  } else {
    for (int i = i0; i < n; ++i) {
      const float x = LD(xp, i);
      ST(yp, i, CLIP_EXPR);
    }
  }
}

// Strided copy (Transpose, Concat, Slice, Expand): out element i (contiguous over dims) reads
// src[base + sum(c_d * strides_d)]; writes dst[dst_base + i * 1] within a block of the output
// described by meta = [rank, dims.., src_strides.., dst_strides..].
__kernel void strided_copy(__global const T* src, __global T* dst, const int n, __global const int* meta,
                           const int src_base, const int dst_base) {
  const int i = get_global_id(0);
  if (i >= n) return;
  int ia, ib;
  bcast_index(meta, i, &ia, &ib);
#ifdef STORAGE_HALF
  vstore_half(vload_half(src_base + ia, src), dst_base + ib, dst);
#else
  dst[dst_base + ib] = src[src_base + ia];
#endif
}

// Cast of a T (half) tensor to float32: the output edge of float16 storage; EW_VEC per work-item.
__kernel void to_float(__global const T* x, __global float* y, const int n) {
  const int i0 = get_global_id(0) * EW_VEC;
  if (i0 + EW_VEC <= n) {
    *(__global float4*)(y + i0) = VLD4(x, i0);
  } else {
    for (int i = i0; i < n; ++i) y[i] = LD(x, i);
  }
}
