// Storage type T of the tensors a kernel reads and writes: float, or half through
// vload_half/vstore_half (STORAGE_HALF; arithmetic stays float, so no cl_khr_fp16 is needed).
// VLD4/VST4: 4 consecutive elements from/to an offset that is a multiple of 4 (buffers are
// allocated aligned): one 128-bit float4 access, or 4 halves (64 bits) through
// vloada_half4/vstorea_half4 (OpenCL 1.2 core, float4 in and out: no half vector type, which
// PoCL 3.0 aborts on, MEASURED.md).
// Inlined by _common.source() where a .cl file has the line: #include "storage.cl"
// HALF_WIDE (_common.storage_defines, default; KERNELKIT_OPENCL_HALF_WIDE=0 turns it off): the 4
// halves move as one 64-bit integer load/store, converted through vload_half4/vstore_half4 on a
// private copy (the conversions from registers): NVIDIA's compiler splits vloada_half4 and
// vstorea_half4 into four 16-bit accesses (PTX on the H100, docs/opencl.md session 5).
#ifdef STORAGE_HALF
#define T half
#define LD(p, i) vload_half((i), (p))
#define ST(p, i, v) vstore_half((v), (i), (p))
inline float4 vld4_wide(__global const half* p) {
  const uint2 t = *(__global const uint2*)p;
  return vload_half4(0, (__private const half*)&t);
}
inline void vst4_wide(__global half* p, const float4 v) {
  uint2 t;
  vstore_half4(v, 0, (__private half*)&t);
  *(__global uint2*)p = t;
}
#if HALF_WIDE
#define VLD4(p, i) vld4_wide((p) + (i))
#define VST4(p, i, v) vst4_wide((p) + (i), (v))
#else
#define VLD4(p, i) vloada_half4(0, (p) + (i))
#define VST4(p, i, v) vstorea_half4((v), 0, (p) + (i))
#endif
#else
#define T float
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (v))
#define VLD4(p, i) (*(__global const float4*)((p) + (i)))
#define VST4(p, i, v) (*(__global float4*)((p) + (i)) = (v))
#endif
