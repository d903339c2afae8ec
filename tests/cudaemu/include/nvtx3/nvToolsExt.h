/* nvToolsExt.h (cudaemu) - the NVTX range calls moeperf makes (tests/cudaemu/nvtx.cc): no profiler
 * shows them, but with CUDAEMU_NVTX_LOG=PREFIX each process writes its pushes and pops, nested as
 * made, to PREFIX.<pid>, so a test can read the ranges an Nsight Systems trace would show. */
#ifndef CUDAEMU_NVTOOLSEXT_H
#define CUDAEMU_NVTOOLSEXT_H
#ifdef __cplusplus
extern "C" {
#endif
/* Open a range named `name` in this thread: returns its zero-based nesting level. */
int nvtxRangePushA(const char *name);
/* Close this thread's innermost range: returns its level, or −1 when none is open. */
int nvtxRangePop(void);
#ifdef __cplusplus
}
#endif
#endif
