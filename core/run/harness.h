/* harness.h - the measurement protocol the benchmarks share: warm-up iterations, an optional graph
 * capture and replay, the timed loop, the gather of every rank's samples with their max over
 * ranks, and the summary statistics of a strided sample. */
#ifndef MP_HARNESS_H
#define MP_HARNESS_H

#include <stddef.h>

#include "comm.h"
#include "stats.h"

/* 1 while this rank is inside a timed iteration: a test's malloc interposer reads it to prove the
 * timed loop allocates nothing. */
extern volatile int mp_in_timed_loop;

/* One point's loop. Every hook returns MP_OK or an error status, which ends the loop. */
struct mp_harness {
    int warmup, iters;
    /* one iteration: `step` counts the point's iterations from 0, warm-up included (the untimed
     * ones around a capture are step 0: they use the first draw), `sample` is the timed
     * iteration's index or −1 when untimed, `replay` is 1 once the capture was made */
    int (*iterate)(void *arg, int step, int sample, int replay);
    /* optional (graph replay): called once after the warm-up (and one untimed iteration when
     * there is no warm-up, so every buffer has grown), followed by one untimed replay */
    int (*capture)(void *arg);
    /* optional: before each timed iteration, outside its clock (e.g. a cache flush) */
    int (*before_timed)(void *arg);
    void *arg;
};

/* Run the warm-up, the capture (when h->capture) and the timed loop; with timed_us (may be NULL)
 * add the host time spent inside timed iterations (when all of them succeeded). */
int mp_harness_run(const struct mp_harness *h, double *timed_us);

/* Gather `n` samples of every rank to rank 0 (`all`: [size·n] scratch there, NULL elsewhere) and
 * set max[i] there to the largest rank's sample i: the slowest rank's time. Collective. */
int mp_harness_max_over_ranks(struct mp_comm *c, const double *mine, int n, double *all,
                              double *max);

/* Summarize n samples base[0], base[stride], … (copied into `scratch`, [n]; base unchanged). */
void mp_harness_summarize(const double *base, size_t stride, int n, double *scratch,
                          struct mp_summary *s);

#endif
