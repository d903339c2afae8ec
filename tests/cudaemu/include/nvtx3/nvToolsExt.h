/* nvToolsExt.h (cudaemu) - NVTX ranges as no-ops: the stand-in has no profiler to show them. */
#ifndef CUDAEMU_NVTOOLSEXT_H
#define CUDAEMU_NVTOOLSEXT_H
static inline int nvtxRangePushA(const char *name) { (void)name; return 0; }
static inline int nvtxRangePop(void) { return 0; }
#endif
