/* hostdevice.h - MP_HD, the qualifier that lets a plain-C inline function run in host and device
 * code (the index rules the host plan and the cuda kernels both follow). */
#ifndef MP_HOSTDEVICE_H
#define MP_HOSTDEVICE_H

#ifdef __CUDACC__
#define MP_HD __host__ __device__
#else
#define MP_HD
#endif

#endif
