/* clock.h - the monotonic clock every host-side timing in moeperf uses. */
#ifndef MP_CLOCK_H
#define MP_CLOCK_H

#include <time.h>

#define MP_CLOCK_NAME "clock_gettime(CLOCK_MONOTONIC)"

/* Microseconds on CLOCK_MONOTONIC: unaffected by wall-clock steps, ~20 ns to read via vDSO. */
static inline double mp_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

#endif
