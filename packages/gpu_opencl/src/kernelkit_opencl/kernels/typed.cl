// Comparisons, boolean logic, Where and Cast over one element type TA (-D TA=float|int|long|
// uchar|char; bool is uchar 0/1). typed.py appends one COMPARE(name, expr) row per comparison or
// logic op and one CAST(name, type, expr) row per target type; all live in this one program.

// NaN test of a TA value (always 0 for integer types; a function, not a constant, so that the
// compiler does not warn about constant operands)
inline int ISNAN(const TA v) {
#ifdef TA_FLOAT
  return isnan(v);
#else
  return 0;
#endif
}

// Offset of output element i in broadcast input `which`:
// meta = [rank, dims.., strides of input 0.., strides of input 1.., strides of input 2..].
inline int bcast_offset(__global const int* meta, int i, const int which) {
  const int rank = meta[0];
  int r = i, o = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int dim = meta[1 + d];
    const int c = r % dim;
    r /= dim;
    o += c * meta[1 + (1 + which) * rank + d];
  }
  return o;
}

// mode 0: every input has the output's shape; 1: broadcast through meta. Output is bool (uchar).
#define COMPARE(NAME, EXPR)                                                                      \
  __kernel void compare_##NAME(__global const TA* xp, __global const TA* yp, __global uchar* zp, \
                               const int n, __global const int* meta, const int mode) {          \
    const int i = get_global_id(0);                                                              \
    if (i >= n) return;                                                                          \
    const TA x = xp[mode ? bcast_offset(meta, i, 0) : i];                                        \
    const TA y = yp[mode ? bcast_offset(meta, i, 1) : i];                                        \
    zp[i] = (EXPR) ? 1 : 0;                                                                      \
  }

// Integer arithmetic (ARITH rows): like COMPARE, but the result has type TA. UTA is TA's unsigned
// twin, so that Add/Sub/Mul wrap around instead of overflowing (undefined for signed C types).
#define ARITH(NAME, EXPR)                                                                        \
  __kernel void arith_##NAME(__global const TA* xp, __global const TA* yp, __global TA* zp,     \
                             const int n, __global const int* meta, const int mode) {           \
    const int i = get_global_id(0);                                                              \
    if (i >= n) return;                                                                          \
    const TA x = xp[mode ? bcast_offset(meta, i, 0) : i];                                        \
    const TA y = yp[mode ? bcast_offset(meta, i, 1) : i];                                        \
    zp[i] = (TA)(EXPR);                                                                          \
  }

// Cast: y = EXPR of x, stored as TO.
#define CAST(NAME, TO, EXPR)                                                                     \
  __kernel void cast_##NAME(__global const TA* xp, __global TO* yp, const int n) {              \
    const int i = get_global_id(0);                                                              \
    if (i < n) {                                                                                 \
      const TA x = xp[i];                                                                        \
      yp[i] = (EXPR);                                                                            \
    }                                                                                            \
  }

// Cast to float16: stored as half through vstorea_half4 (no cl_khr_fp16 needed), 4 elements per
// work-item (typed.py launches n / 4; one vector load of 4 TA where all are in range).
#define VEC4_(t) t##4
#define VEC4(t) VEC4_(t)
__kernel void cast_float16(__global const TA* xp, __global half* yp, const int n) {
  const int i0 = get_global_id(0) * 4;
  if (i0 + 4 <= n) {
    vstorea_half4(convert_float4(*(__global const VEC4(TA)*)(xp + i0)), 0, yp + i0);
  } else {
    for (int i = i0; i < n; ++i) vstore_half((float)xp[i], i, yp);
  }
}

__kernel void logical_not(__global const uchar* xp, __global uchar* yp, const int n) {
  const int i = get_global_id(0);
  if (i < n) yp[i] = xp[i] ? 0 : 1;
}

// Where(c, x, y) over three broadcast inputs (mode as in COMPARE).
__kernel void where_select(__global const uchar* cp, __global const TA* xp, __global const TA* yp,
                           __global TA* zp, const int n, __global const int* meta, const int mode) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const uchar c = cp[mode ? bcast_offset(meta, i, 0) : i];
  zp[i] = c ? xp[mode ? bcast_offset(meta, i, 1) : i] : yp[mode ? bcast_offset(meta, i, 2) : i];
}

// Gather along an axis: data is (outer, axis_dim, inner), idx holds nidx in-range int indices;
// out is (outer, nidx, inner).
__kernel void gather(__global const TA* data, __global const int* idx, __global TA* out, const int n,
                     const int nidx, const int axis_dim, const int inner) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int k = i % inner, r = i / inner;
  const int j = r % nidx, o = r / nidx;
  out[i] = data[((long)o * axis_dim + idx[j]) * inner + k];
}

// GatherElements: out has idx's shape; meta = [rank, dims.., data strides.., axis].
__kernel void gather_elements(__global const TA* data, __global const int* idx, __global TA* out,
                              const int n, __global const int* meta) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int rank = meta[0], axis = meta[1 + 2 * rank];
  int r = i;
  long o = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int dim = meta[1 + d];
    const int c = r % dim;
    r /= dim;
    o += (long)(d == axis ? idx[i] : c) * meta[1 + rank + d];
  }
  out[i] = data[o];
}

// Pad: output coordinate c maps to s = c - begin on each axis of a (cropped) input of size `size`;
// outside [0, size) mode picks: 0 constant (*value), 1 edge, 2 reflect, 3 wrap.
// meta = [rank, out dims.., sizes.., input strides.., begins..]; base = offset of the crop.
__kernel void pad(__global const TA* x, __global TA* y, __global const TA* value, const int n,
                  __global const int* meta, const int base, const int mode) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int rank = meta[0];
  int r = i;
  long o = base;
  for (int d = rank - 1; d >= 0; --d) {
    const int dim = meta[1 + d];
    const int size = meta[1 + rank + d];
    int s = r % dim - meta[1 + 3 * rank + d];
    r /= dim;
    if (s < 0 || s >= size) {
      if (mode == 0) { y[i] = value[0]; return; }
      if (mode == 1) s = clamp(s, 0, size - 1);
      else if (mode == 3) s = ((s % size) + size) % size;
      else if (size == 1) s = 0;
      else {
        const int period = 2 * (size - 1);
        s = ((s % period) + period) % period;
        if (s >= size) s = period - s;
      }
    }
    o += (long)s * meta[1 + 2 * rank + d];
  }
  y[i] = x[o];
}

// ArgMax (is_max 1) / ArgMin along the middle axis of (outer, len, inner); one work-item per line.
// The first extreme wins, or the last with select_last; NaN beats every number (as NumPy).
__kernel void arg_extreme(__global const TA* x, __global long* out, const int lines, const int len,
                          const int inner, const int is_max, const int select_last) {
  const int t = get_global_id(0);
  if (t >= lines) return;
  const long base = (long)(t / inner) * len * inner + t % inner;
  int best_k = select_last ? len - 1 : 0;
  TA best = x[base + (long)best_k * inner];
  for (int j = 1; j < len; ++j) {
    const int k = select_last ? len - 1 - j : j;
    const TA v = x[base + (long)k * inner];
    const int better = is_max ? (v > best) : (v < best);
    if (!ISNAN(best) && (better || ISNAN(v))) {
      best = v;
      best_k = k;
    }
  }
  out[t] = best_k;
}

// CumSum along the middle axis of (outer, len, inner), optionally exclusive and/or reversed.
__kernel void cumsum(__global const TA* x, __global TA* y, const int lines, const int len, const int inner,
                     const int exclusive, const int reverse) {
  const int t = get_global_id(0);
  if (t >= lines) return;
  const long base = (long)(t / inner) * len * inner + t % inner;
  TA acc = 0;
  for (int j = 0; j < len; ++j) {
    const long o = base + (long)(reverse ? len - 1 - j : j) * inner;
    const TA v = x[o];
    if (exclusive) {
      y[o] = acc;
      acc += v;
    } else {
      acc += v;
      y[o] = acc;
    }
  }
}

// TopK along the middle axis of (outer, len, inner), one work-item per input element: its rank is
// the number of elements of its line ordered before it (largest: greater, or equal with a lower
// index; smallest: less, or equal with a lower index; NaN counts as the greatest), and elements of
// rank < k are written at that rank. Outputs are (outer, k, inner).
inline int topk_before(const TA a, const int ia, const TA b, const int ib, const int largest) {
  const int an = ISNAN(a), bn = ISNAN(b);
  const int eq = (a == b) || (an && bn);
  const int beyond = largest ? ((an && !bn) || (!an && !bn && a > b)) : ((!an && bn) || (!an && !bn && a < b));
  return beyond || (eq && ia < ib);
}

__kernel void topk(__global const TA* x, __global TA* values, __global long* indices, const int n, const int len,
                   const int inner, const int k, const int largest) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int in = i % inner, e = (i / inner) % len, o = i / (inner * len);
  const long base = (long)o * len * inner + in;
  const TA v = x[i];
  int rank = 0;
  for (int j = 0; j < len && rank < k; ++j) rank += topk_before(x[base + (long)j * inner], j, v, e, largest);
  if (rank < k) {
    const long at = ((long)o * k + rank) * inner + in;
    values[at] = v;
    indices[at] = e;
  }
}
