// Storage type T of the tensors a kernel reads and writes: float, or half through
// vload_half/vstore_half (STORAGE_HALF; arithmetic stays float, so no cl_khr_fp16 is needed).
// Inlined by _common.source() where a .cl file has the line: #include "storage.cl"
#ifdef STORAGE_HALF
#define T half
#define LD(p, i) vload_half((i), (p))
#define ST(p, i, v) vstore_half((v), (i), (p))
#else
#define T float
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (v))
#endif
