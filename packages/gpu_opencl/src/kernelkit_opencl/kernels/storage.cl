// Storage type T of the tensors a kernel reads and writes: float, or half through
// vload_half/vstore_half (STORAGE_HALF; arithmetic stays float, so no cl_khr_fp16 is needed).
// VLD4/VST4: 4 consecutive elements from/to an offset that is a multiple of 4 (buffers are
// allocated aligned): one 128-bit float4 access, or 4 halves (64 bits) through
// vloada_half4/vstorea_half4 (OpenCL 1.2 core, float4 in and out: no half vector type, which
// PoCL 3.0 aborts on, MEASURED.md).
// Inlined by _common.source() where a .cl file has the line: #include "storage.cl"
#ifdef STORAGE_HALF
#define T half
#define LD(p, i) vload_half((i), (p))
#define ST(p, i, v) vstore_half((v), (i), (p))
#define VLD4(p, i) vloada_half4(0, (p) + (i))
#define VST4(p, i, v) vstorea_half4((v), 0, (p) + (i))
#else
#define T float
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (v))
#define VLD4(p, i) (*(__global const float4*)((p) + (i)))
#define VST4(p, i, v) (*(__global float4*)((p) + (i)) = (v))
#endif
