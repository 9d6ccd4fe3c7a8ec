// Row copies for GatherND, ScatterND and Expand on any element type TA (long, uchar for bool, ...).
// A "row" is `inner` consecutive elements; row tables are int, computed and range-checked on the host.

// out row i = src row rows[i]
__kernel void gather_rows(__global const TA* src, __global const int* rows, __global TA* out, const int n,
                          const int inner) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int r = i / inner, k = i - r * inner;
  out[i] = src[(long)rows[r] * inner + k];
}

// dst row rows[j] = updates row j (rows hold no repeats: the host kept each row's last write)
__kernel void scatter_rows(__global const TA* updates, __global const int* rows, __global TA* dst, const int n,
                           const int inner) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int j = i / inner, k = i - j * inner;
  dst[(long)rows[j] * inner + k] = updates[i];
}
