// Tiled, register-blocked SGEMM with a fused epilogue, also used as implicit-GEMM convolution.
//
//   C[z](m, n) = ACT(alpha * sum_k A[z](m, k) * B[z](k, n) + beta * bias(m, n))
//
// Defines (from gemm.py / the tuned-parameter file):
//   TM, TN     outputs per work-item (rows, columns)      WM, WN   work-group shape (rows, columns)
//   BK         k-step of a tile                           USE_LOCAL  1: stage tiles in local memory
//   VEC_LDS    (local variant, TM and TN multiples of 4) 128-bit local loads, rows/cols in groups of 4
//   PREFETCH   (local variant; NT divides BM*BK and BN*BK) next tile's global loads into registers
//              before this tile's arithmetic
//   DBUF       (with PREFETCH) two local buffers, one barrier per k-step instead of two
//   VEC_GLD    (with PREFETCH; 4 * NT divides BM*BK and BN*BK) 128-bit global loads of A and B
//              along their contiguous dimension where flags allow it (bits 3 and 4: the operand's
//              leading dimension, batch stride and offset are multiples of 4) and the 4 elements
//              are in range; scalar loads elsewhere (edges, misaligned operands)
//   TRANS_A, TRANS_B   A is stored [K, M] / B is stored [N, K]
//   CONV       B(k, n) is the im2col matrix of the input image read on the fly (implicit GEMM):
//              geometry in `cv`, k decomposed through the table `ktab`; C is written as NCHW.
// Run-time arguments rather than defines (one program serves every epilogue and split, so a
// session builds fewer programs: cold start):
//   flags      bit 0: add beta * bias[m * bias_sm + n * bias_sn]; bit 1: add Z (laid out as C)
//              before the activation (the residual of a fused Conv + Add); bit 2: Relu (the
//              commonest fused activation; the others are the ACT define)
//   nsplit     k range split over the grid's z (low-occupancy shapes): partial sums go to the
//              float workspace ws, splitk_reduce adds them and runs the epilogue
// The work-item at (lx, ly) owns rows m0 + ly + i*WM and columns n0 + lx + j*WN (strided, so a
// warp's loads and stores are coalesced) in the local-memory variant, and the contiguous block
// rows m0 + ly*TM + i, columns n0 + lx*TN + j in the direct one (better for CPU devices).
#define BM (TM * WM)
#define BN (TN * WN)
#define NT (WM * WN)

#ifndef ACT
#define ACT(v) (v)
#endif

// Storage type T of A, B, bias, Z and C: float, or half read/written with vload_half/vstore_half
// (STORAGE_HALF; arithmetic stays float, so no cl_khr_fp16 is needed). Split-K's workspace is float.
#include "storage.cl"

// cv (int buffer): [0] C per group, [1] H, [2] W, [3] OH, [4] OW, [5] stride h, [6] stride w,
// [7] pad top, [8] pad left, [9] output channels (all groups), [10] image stride C*H*W; from
// [16] on, the k table (see conv_load)
#ifdef CONV
#define CV_ARGS , __global const int* restrict cv
#else
#define CV_ARGS
#endif

#if TRANS_A
#define A_AT(m, k) LD(A, (k) * lda + (m))
#else
#define A_AT(m, k) LD(A, (m) * lda + (k))
#endif
#if TRANS_B
#define B_AT(k, n) LD(B, (n) * ldb + (k))
#else
#define B_AT(k, n) LD(B, (k) * ldb + (n))
#endif

#ifndef PREFETCH
#define PREFETCH 0
#endif
#ifndef DBUF
#define DBUF 0
#endif
#ifndef VEC_GLD
#define VEC_GLD 0
#endif
#ifndef HALF_VEC
#define HALF_VEC 0
#endif
#ifndef VEC_ST  // the epilogue's vector stores are compiled in (gemm.py: GPUs, per storage dtype)
#define VEC_ST 0
#endif
// VEC_GLD with half storage: 4 halves (64 bits) per load through vloada_half4 (OpenCL 1.2 core,
// float4 result, no cl_khr_fp16), where the device's build sets HALF_VEC (gemm.py: 1, or 2 for
// the integer widening below); HALF_VEC 0 keeps the half tiles on scalar vload_half
#if VEC_GLD && (!defined(STORAGE_HALF) || HALF_VEC)
#define VEC_A 1
#else
#define VEC_A 0
#endif
#if VEC_A && !defined(CONV)
#define VEC_B 1
#else
#define VEC_B 0
#endif
#if defined(STORAGE_HALF) && HALF_VEC == 2
// HALF_VEC 2: halves widened with integer and fp32-multiply operations instead of the conversion
// instruction (a quarter- or eighth-rate unit on NVIDIA GPUs): the 15 exponent/mantissa bits
// moved to float's position and scaled by 2^112 (exact, subnormal halves too), exponent 31
// (inf/NaN) restored, sign copied. Loads read the bits as ushort / uint2 (8-byte aligned).
inline float half_bits(const uint h) {
  const float f = as_float((h & 0x7fffu) << 13) * 0x1p112f;
  return as_float(as_uint(f) | ((h & 0x8000u) << 16) | (f >= 65536.0f ? 0x7f800000u : 0u));
}
#undef LD
#define LD(p, i) half_bits(((__global const ushort*)(p))[i])
inline float4 ld4_half_bits(__global const half* p) {
  const uint2 u = *(__global const uint2*)p;
  return (float4)(half_bits(u.x & 0xffffu), half_bits(u.x >> 16), half_bits(u.y & 0xffffu), half_bits(u.y >> 16));
}
#define LD4(p, i) ld4_half_bits((p) + (i))
#elif defined(STORAGE_HALF) && HALF_VEC == 3  // one 64-bit load, converted from a private copy
#define LD4(p, i) vld4_wide((p) + (i))
#elif defined(STORAGE_HALF)  // 4 consecutive elements from an offset that is a multiple of 4 (flags bits 3, 4)
#define LD4(p, i) vloada_half4(0, (p) + (i))
#else
#define LD4(p, i) (*(__global const float4*)((p) + (i)))
#endif

// The epilogue of one output: + beta * bias, fused activation, store (NCHW for convolutions).
#define BIAS_AT(m, n) ((flags & 1) ? beta * LD(bias, (m) * bias_sm + (n) * bias_sn) : 0.0f)
// flags bit 1: a residual Z laid out as C is added before the activation (Conv's fused Add)
#define Z_AT(i) ((flags & 2) ? LD(Zr, i) : 0.0f)
// flags bit 2: Relu, NaN kept (as the ACT line of Relu)
#define RELU_IF(v) (((flags & 4) && (v) < 0.0f) ? 0.0f : (v))
// 4 consecutive columns n..n+3 (n a multiple of 4) of row m, one vector store: for convolutions
// the 4 pixels lie in one image, contiguous in NCHW (gemm.py sets flags bit 5 only where OH*OW is
// a multiple of 4); bias and Z added and the activation applied per component, as STORE_C does
#define EPI1(r, v, m, n, z) do { const float t_ = ACT((v) + BIAS_AT(m, n) + (z)); (r) = RELU_IF(t_); } while (0)
#define STORE4_AT(C, m, n, i_, v0, v1, v2, v3) do {                                                \
    const float4 z4_ = (flags & 2) ? VLD4(Zr, i_) : (float4)(0.0f);                              \
    float4 r4_;                                                                                   \
    EPI1(r4_.x, v0, m, n, z4_.x); EPI1(r4_.y, v1, m, (n) + 1, z4_.y);                             \
    EPI1(r4_.z, v2, m, (n) + 2, z4_.z); EPI1(r4_.w, v3, m, (n) + 3, z4_.w);                       \
    VST4(C, i_, r4_); } while (0)
#ifdef CONV
#define STORE_C4(C, m, n, v0, v1, v2, v3) do { const int ohw_ = cv[3] * cv[4], b_ = (n) / ohw_;     \
    STORE4_AT(C, m, n, (b_ * cv[9] + (m)) * ohw_ + ((n) - b_ * ohw_), v0, v1, v2, v3); } while (0)
#else
#define STORE_C4(C, m, n, v0, v1, v2, v3) STORE4_AT(C, m, n, (m) * ldc + (n), v0, v1, v2, v3)
#endif
#ifdef CONV
#define STORE_C(C, m, n, v) do { const int ohw_ = cv[3] * cv[4], b_ = (n) / ohw_;                  \
    const int i_ = (b_ * cv[9] + (m)) * ohw_ + ((n) - b_ * ohw_);                                 \
    const float r_ = ACT((v) + BIAS_AT(m, n) + Z_AT(i_)); ST(C, i_, RELU_IF(r_)); } while (0)
#else
#define STORE_C(C, m, n, v) do { const int i_ = (m) * ldc + (n);                                    \
    const float r_ = ACT((v) + BIAS_AT(m, n) + Z_AT(i_)); ST(C, i_, RELU_IF(r_)); } while (0)
#endif

#ifdef CONV
// Per-column (output pixel) state of the implicit im2col matrix.
typedef struct { int base; int ih0; int iw0; } ncol;

inline ncol conv_col(const int n, const int N, __global const int* cv) {
  ncol c;
  if (n >= N) { c.base = 0; c.ih0 = -(1 << 28); c.iw0 = 0; return c; }  // out of range: always padding
  const int ohw = cv[3] * cv[4];
  const int b = n / ohw, p = n - b * ohw;
  const int oh = p / cv[4], ow = p - oh * cv[4];
  c.ih0 = oh * cv[5] - cv[7];
  c.iw0 = ow * cv[6] - cv[8];
  c.base = b * cv[10] + c.ih0 * cv[2] + c.iw0;  // cv[10]: image stride C_total*H*W
  return c;
}

// ktab[k] = (c*H*W + dh*W + dw, dh << 16 | dw) for k = (c, kh, kw), dh = kh*dil_h, dw = kw*dil_w
inline float conv_load(__global const T* B, const ncol c, const int k, const int K,
                       __global const int* cv) {
  if (k >= K) return 0.0f;
  const int2 t = vload2(k, cv + 16);
  const int ih = c.ih0 + (t.y >> 16), iw = c.iw0 + (t.y & 0xffff);
  return (ih >= 0 && ih < cv[1] && iw >= 0 && iw < cv[2]) ? LD(B, c.base + t.x) : 0.0f;
}
#endif

__kernel
#if USE_LOCAL
__attribute__((reqd_work_group_size(WN, WM, 1)))
#endif
void gemm(__global const T* restrict A, __global const T* restrict B,
          __global const T* restrict bias, __global T* restrict C,
          const int M, const int N, const int K, const int lda, const int ldb, const int ldc,
          const int bias_sm, const int bias_sn, const float alpha, const float beta,
          const int za, const int zb, const int zc, const int zbias, const int flags, const int nsplit,
          __global float* restrict ws, __global const T* restrict Zr CV_ARGS) {
  const int lx = get_local_id(0), ly = get_local_id(1);
  const int n0 = get_group_id(0) * BN, m0 = get_group_id(1) * BM;
  // grid z = batch * nsplit: split sk of the k range [k_lo, K) of batch z
  const int z = get_group_id(2) / nsplit, sk = get_group_id(2) % nsplit;
  const int k_span = ((K + nsplit - 1) / nsplit + BK - 1) / BK * BK;
  const int k_lo = sk * k_span;
  const int k_hi = min(K, k_lo + k_span);
  A += z * za;
  B += z * zb;
  C += z * zc;
  bias += z * zbias;
  Zr += z * zc;
  float acc[TM][TN];
  _Pragma("unroll") for (int i = 0; i < TM; ++i)
    _Pragma("unroll") for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

#if USE_LOCAL
#if VEC_LDS
  // rows ly*4 + {0..3} (+ WM*4 per further group of 4): each group is one 128-bit local load
#define ROW(i) (m0 + ((i) >> 2) * (WM * 4) + ly * 4 + ((i) & 3))
#define COL(j) (n0 + ((j) >> 2) * (WN * 4) + lx * 4 + ((j) & 3))
#define PAD 4
#else
#define ROW(i) (m0 + ly + (i) * WM)
#define COL(j) (n0 + lx + (j) * WN)
#define PAD 1
#endif
#if DBUF
  __local float As2[2][BK][BM + PAD] __attribute__((aligned(16)));
  __local float Bs2[2][BK][BN + PAD] __attribute__((aligned(16)));
  int buf = 0;
#define As As2[buf]
#define Bs Bs2[buf]
#else
  __local float As[BK][BM + PAD] __attribute__((aligned(16)));
  __local float Bs[BK][BN + PAD] __attribute__((aligned(16)));
#endif
  const int tid = ly * WN + lx;
#ifdef CONV
  // NT % BN == 0 (checked by gemm.py): each work-item always loads the same column of the tile.
  const int my_n = tid % BN, my_k = tid / BN;
  const ncol mycol = conv_col(n0 + my_n, N, cv);
#endif
#if PREFETCH
  // the next tile's global loads are issued before this tile's arithmetic (registers pa/pb) and
  // written to local memory after it, so their latency hides behind the multiply-adds
#define NA (BM * BK / NT)
#define NB (BN * BK / NT)
  float pa[NA], pb[NB];
#if TRANS_A
#define A_IDX(i) const int kk = (i) / BM, mm = (i) - kk * BM
#else
#define A_IDX(i) const int mm = (i) / BK, kk = (i) - mm * BK
#endif
#if TRANS_B
#define B_IDX(i) const int nn = (i) / BK, kk = (i) - nn * BK
#else
#define B_IDX(i) const int kk = (i) / BN, nn = (i) - kk * BN
#endif
#if VEC_LDS  // rows of BM + 4 / BN + 4 floats: 16-byte aligned, one 128-bit local store
#define LDS_PUT4(p, v, r) (*(__local float4*)(p) = (float4)(v[4 * (r)], v[4 * (r) + 1], v[4 * (r) + 2], v[4 * (r) + 3]))
#else
#define LDS_PUT4(p, v, r) do { _Pragma("unroll") for (int c = 0; c < 4; ++c) (p)[c] = v[4 * (r) + c]; } while (0)
#endif
#if VEC_A
// 4 consecutive elements of the contiguous dimension per load: A stored [M, K] (k fastest) or
// [K, M] (TRANS_A, m fastest); pa[4r..4r+3] are they, stored back to As in the same order
#if TRANS_A
#define A_IDX4(q) const int kk = (q) / (BM / 4), mm = ((q) - kk * (BM / 4)) * 4
#define A_OFF4(m, k) ((k) * lda + (m))
#define A_IN4(m, k) ((m) + 3 < M && (k) < k_hi)
#define A_PUT4(r) do { A_IDX4(tid + (r) * NT); LDS_PUT4(&As[kk][mm], pa, r); } while (0)
#else
#define A_IDX4(q) const int mm = (q) / (BK / 4), kk = ((q) - mm * (BK / 4)) * 4
#define A_OFF4(m, k) ((m) * lda + (k))
#define A_IN4(m, k) ((m) < M && (k) + 3 < k_hi)
#define A_PUT4(r) do { A_IDX4(tid + (r) * NT);                                                    \
    _Pragma("unroll") for (int c = 0; c < 4; ++c) As[kk + c][mm] = pa[4 * (r) + c]; } while (0)
#endif
#define LOAD_A_TILE(k0) _Pragma("unroll") for (int r = 0; r < NA / 4; ++r) {                      \
      A_IDX4(tid + r * NT); const int m = m0 + mm, k = (k0) + kk;                                 \
      if ((flags & 8) && A_IN4(m, k)) {                                                           \
        const float4 v = LD4(A, A_OFF4(m, k));                                                    \
        pa[4 * r] = v.x; pa[4 * r + 1] = v.y; pa[4 * r + 2] = v.z; pa[4 * r + 3] = v.w;           \
      } else {                                                                                    \
        _Pragma("unroll") for (int c = 0; c < 4; ++c) {                                           \
          const int mc = TRANS_A ? m + c : m, kc = TRANS_A ? k : k + c;                           \
          pa[4 * r + c] = (mc < M && kc < k_hi) ? A_AT(mc, kc) : 0.0f; } } }
#define STORE_A_TILE() _Pragma("unroll") for (int r = 0; r < NA / 4; ++r) A_PUT4(r)
#else
#define LOAD_A_TILE(k0) _Pragma("unroll") for (int r = 0; r < NA; ++r) {                          \
      A_IDX(tid + r * NT); const int m = m0 + mm, k = (k0) + kk;                                  \
      pa[r] = (m < M && k < k_hi) ? A_AT(m, k) : 0.0f; }
#define STORE_A_TILE() _Pragma("unroll") for (int r = 0; r < NA; ++r) { A_IDX(tid + r * NT); As[kk][mm] = pa[r]; }
#endif
#define LOAD_TILES(k0) do { LOAD_A_TILE(k0); LOAD_B_TILE(k0); } while (0)
#ifdef CONV
#define LOAD_B_TILE(k0) _Pragma("unroll") for (int r = 0; r < NB; ++r)                            \
    pb[r] = conv_load(B, mycol, (k0) + my_k + r * (NT / BN), k_hi, cv)
#define STORE_B_TILE() _Pragma("unroll") for (int r = 0; r < NB; ++r) Bs[my_k + r * (NT / BN)][my_n] = pb[r]
#elif VEC_B
// B stored [K, N] (n fastest) or [N, K] (TRANS_B, k fastest), 4 consecutive elements per load
#if TRANS_B
#define B_IDX4(q) const int nn = (q) / (BK / 4), kk = ((q) - nn * (BK / 4)) * 4
#define B_OFF4(k, n) ((n) * ldb + (k))
#define B_IN4(k, n) ((n) < N && (k) + 3 < k_hi)
#define B_PUT4(r) do { B_IDX4(tid + (r) * NT);                                                    \
    _Pragma("unroll") for (int c = 0; c < 4; ++c) Bs[kk + c][nn] = pb[4 * (r) + c]; } while (0)
#else
#define B_IDX4(q) const int kk = (q) / (BN / 4), nn = ((q) - kk * (BN / 4)) * 4
#define B_OFF4(k, n) ((k) * ldb + (n))
#define B_IN4(k, n) ((n) + 3 < N && (k) < k_hi)
#define B_PUT4(r) do { B_IDX4(tid + (r) * NT); LDS_PUT4(&Bs[kk][nn], pb, r); } while (0)
#endif
#define LOAD_B_TILE(k0) _Pragma("unroll") for (int r = 0; r < NB / 4; ++r) {                      \
      B_IDX4(tid + r * NT); const int n = n0 + nn, k = (k0) + kk;                                 \
      if ((flags & 16) && B_IN4(k, n)) {                                                          \
        const float4 v = LD4(B, B_OFF4(k, n));                                                    \
        pb[4 * r] = v.x; pb[4 * r + 1] = v.y; pb[4 * r + 2] = v.z; pb[4 * r + 3] = v.w;           \
      } else {                                                                                    \
        _Pragma("unroll") for (int c = 0; c < 4; ++c) {                                           \
          const int nc = TRANS_B ? n : n + c, kc = TRANS_B ? k + c : k;                           \
          pb[4 * r + c] = (nc < N && kc < k_hi) ? B_AT(kc, nc) : 0.0f; } } }
#define STORE_B_TILE() _Pragma("unroll") for (int r = 0; r < NB / 4; ++r) B_PUT4(r)
#else
#define LOAD_B_TILE(k0) _Pragma("unroll") for (int r = 0; r < NB; ++r) {                          \
      B_IDX(tid + r * NT); const int n = n0 + nn, k = (k0) + kk;                                  \
      pb[r] = (n < N && k < k_hi) ? B_AT(k, n) : 0.0f; }
#define STORE_B_TILE() _Pragma("unroll") for (int r = 0; r < NB; ++r) { B_IDX(tid + r * NT); Bs[kk][nn] = pb[r]; }
#endif
  LOAD_TILES(k_lo);
  for (int k0 = k_lo; k0 < k_hi; k0 += BK) {
    STORE_A_TILE();
    STORE_B_TILE();
    if (k0 + BK < k_hi) LOAD_TILES(k0 + BK);
#else
  for (int k0 = k_lo; k0 < k_hi; k0 += BK) {
    for (int i = tid; i < BM * BK; i += NT) {
#if TRANS_A
      const int kk = i / BM, mm = i - kk * BM;
#else
      const int mm = i / BK, kk = i - mm * BK;
#endif
      const int m = m0 + mm, k = k0 + kk;
      As[kk][mm] = (m < M && k < k_hi) ? A_AT(m, k) : 0.0f;
    }
#ifdef CONV
    for (int kk = my_k; kk < BK; kk += NT / BN) Bs[kk][my_n] = conv_load(B, mycol, k0 + kk, k_hi, cv);
#else
    for (int i = tid; i < BN * BK; i += NT) {
#if TRANS_B
      const int nn = i / BK, kk = i - nn * BK;
#else
      const int kk = i / BN, nn = i - kk * BN;
#endif
      const int n = n0 + nn, k = k0 + kk;
      Bs[kk][nn] = (n < N && k < k_hi) ? B_AT(k, n) : 0.0f;
    }
#endif
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#if VEC_LDS
      _Pragma("unroll") for (int i = 0; i < TM; i += 4) {
        const float4 v = *(__local const float4*)&As[kk][(i >> 2) * (WM * 4) + ly * 4];
        a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
      }
      _Pragma("unroll") for (int j = 0; j < TN; j += 4) {
        const float4 v = *(__local const float4*)&Bs[kk][(j >> 2) * (WN * 4) + lx * 4];
        b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
      }
#else
      _Pragma("unroll") for (int i = 0; i < TM; ++i) a[i] = As[kk][ly + i * WM];
      _Pragma("unroll") for (int j = 0; j < TN; ++j) b[j] = Bs[kk][lx + j * WN];
#endif
      _Pragma("unroll") for (int i = 0; i < TM; ++i)
        _Pragma("unroll") for (int j = 0; j < TN; ++j) acc[i][j] = mad(a[i], b[j], acc[i][j]);
    }
#if DBUF  // the next k-step fills the other buffer: its barrier orders this step's reads first
    buf ^= 1;
#else
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
  }
#else  // direct: operands straight from global memory (caches do the tiling on CPUs)
#define ROW(i) (m0 + ly * TM + (i))
#define COL(j) (n0 + lx * TN + (j))
#if TN == 8 && !TRANS_B && !defined(CONV) && !defined(STORAGE_HALF)
  // float8 rows of B (CPU SIMD); interior tiles only, edges take the scalar loop below
  if (ROW(TM - 1) < M && COL(7) < N) {
    float8 vacc[TM];
    _Pragma("unroll") for (int i = 0; i < TM; ++i) vacc[i] = (float8)(0.0f);
    __global const float* bp = B + COL(0);
    for (int k = k_lo; k < k_hi; ++k) {
      const float8 bv = vload8(0, bp + k * ldb);
      _Pragma("unroll") for (int i = 0; i < TM; ++i) vacc[i] = mad((float8)(A_AT(ROW(i), k)), bv, vacc[i]);
    }
    _Pragma("unroll") for (int i = 0; i < TM; ++i) vstore8(vacc[i], 0, &acc[i][0]);
  } else
#endif
  {
  int rows[TM];
  _Pragma("unroll") for (int i = 0; i < TM; ++i) rows[i] = min(ROW(i), M - 1);
#ifdef CONV
  ncol cols[TN];
  _Pragma("unroll") for (int j = 0; j < TN; ++j) cols[j] = conv_col(COL(j), N, cv);
#else
  int cols[TN];
  _Pragma("unroll") for (int j = 0; j < TN; ++j) cols[j] = min(COL(j), N - 1);
#endif
  for (int k = k_lo; k < k_hi; ++k) {
    float a[TM], b[TN];
    _Pragma("unroll") for (int i = 0; i < TM; ++i) a[i] = A_AT(rows[i], k);
#ifdef CONV
    _Pragma("unroll") for (int j = 0; j < TN; ++j) b[j] = conv_load(B, cols[j], k, k_hi, cv);
#else
    _Pragma("unroll") for (int j = 0; j < TN; ++j) b[j] = B_AT(k, cols[j]);
#endif
    _Pragma("unroll") for (int i = 0; i < TM; ++i)
      _Pragma("unroll") for (int j = 0; j < TN; ++j) acc[i][j] = mad(a[i], b[j], acc[i][j]);
  }
  }
#endif

  // epilogue: partial sums to the workspace (split-K), or alpha, bias, activation and store
#if USE_LOCAL && VEC_LDS && VEC_ST
  // a work-item's columns come in groups of 4 consecutive ones (COL): with flags bit 5 (C, and Z
  // laid out as C, may be accessed 4 elements at a time: see gemm.py), one vector store per group
  // (float4, or 4 halves through vstorea_half4) where all 4 are in range
  if (nsplit == 1 && (flags & 32)) {
    _Pragma("unroll") for (int i = 0; i < TM; ++i) {
      const int m = ROW(i);
      if (m >= M) continue;
      _Pragma("unroll") for (int j = 0; j < TN; j += 4) {
        const int n = COL(j);
        if (n + 3 < N) {
          STORE_C4(C, m, n, alpha * acc[i][j], alpha * acc[i][j + 1], alpha * acc[i][j + 2], alpha * acc[i][j + 3]);
        } else {
          _Pragma("unroll") for (int c = 0; c < 4; ++c)
            if (n + c < N) STORE_C(C, m, n + c, alpha * acc[i][j + c]);
        }
      }
    }
    return;
  }
#endif
  _Pragma("unroll") for (int i = 0; i < TM; ++i) {
    const int m = ROW(i);
    if (m >= M) continue;
    _Pragma("unroll") for (int j = 0; j < TN; ++j) {
      const int n = COL(j);
      if (n >= N) continue;
      if (nsplit > 1)
        ws[((long)get_group_id(2) * M + m) * N + n] = acc[i][j];
      else
        STORE_C(C, m, n, alpha * acc[i][j]);
    }
  }
}

// Split-K: out(z, m, n) = epilogue(sum over the nsplit partial sums in ws), one per work-item.
__kernel void splitk_reduce(__global const float* restrict ws, __global const T* restrict bias,
                            __global T* restrict C, const int M, const int N, const int ldc,
                            const int bias_sm, const int bias_sn, const float alpha, const float beta,
                            const int zc, const int zbias, const int total, const int flags,
                            const int nsplit, __global const T* restrict Zr CV_ARGS) {
  const int t = get_global_id(0);
  if (t >= total) return;
  const int n = t % N, m = (t / N) % M, z = t / (M * N);
  float v = 0.0f;
  for (int s = 0; s < nsplit; ++s) v += ws[((long)(z * nsplit + s) * M + m) * N + n];
  C += z * zc;
  bias += z * zbias;
  Zr += z * zc;
  STORE_C(C, m, n, alpha * v);
}
