// Elementwise kernels. elementwise.py appends one UNARY(name, expr) / BINARY(name, expr) line per
// row of its table; expressions read the float values x (and y) and the parameters a, b.
// Storage type T is float, or half read/written with vload_half/vstore_half (no cl_khr_fp16
// needed: half tensors compute in float everywhere).
#ifdef STORAGE_HALF
#define T half
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half((v), (i), (p))
#else
#define T float
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#endif

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
    const int i = get_global_id(0);                                                              \
    if (i < n) {                                                                                 \
      const float x = LOAD(xp, i);                                                               \
      STORE(yp, i, (EXPR));                                                                      \
    }                                                                                            \
  }

// mode 0: same shapes; 1: y is one element; 2: x is one element; 3: general broadcast (meta).
#define BINARY(NAME, EXPR)                                                                       \
  __kernel void binary_##NAME(__global const T* xp, __global const T* yp, __global T* zp,       \
                              const int n, __global const int* meta, const int mode) {          \
    const int i = get_global_id(0);                                                              \
    if (i >= n) return;                                                                          \
    int ia = i, ib = i;                                                                          \
    if (mode == 1) ib = 0;                                                                       \
    else if (mode == 2) ia = 0;                                                                  \
    else if (mode == 3) bcast_index(meta, i, &ia, &ib);                                          \
    const float x = LOAD(xp, ia);                                                                \
    const float y = LOAD(yp, ib);                                                                \
    STORE(zp, i, (EXPR));                                                                        \
  }

// Clip to [a, b] (NaN stays NaN, as NumPy's maximum/minimum).
__kernel void clip(__global const T* xp, __global T* yp, const int n, const float a, const float b) {
  const int i = get_global_id(0);
  if (i < n) {
    const float x = LOAD(xp, i);
    STORE(yp, i, (x != x ? x : fmin(fmax(x, a), b)));
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

// Cast of a T (half) tensor to float32: the output edge of float16 storage.
__kernel void to_float(__global const T* x, __global float* y, const int n) {
  const int i = get_global_id(0);
  if (i < n) y[i] = LOAD(x, i);
}
