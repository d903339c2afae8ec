/* nvtx.h - NVTX ranges around the pipeline's phases and points ("moeperf/<phase>"), so an Nsight
 * Systems trace shows the pipeline; no-ops in builds without NVTX. */
#ifndef MP_NVTX_H
#define MP_NVTX_H

#include "config.h"

#if HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#define MP_RANGE_PUSH(name) nvtxRangePushA(name)
#define MP_RANGE_POP() nvtxRangePop()
#else
#define MP_RANGE_PUSH(name) ((void)(name))
#define MP_RANGE_POP() ((void)0)
#endif

#endif
