/* layer_rows.h - moeperf-layer's rows of a point and its console table. */
#ifndef MP_LAYER_ROWS_H
#define MP_LAYER_ROWS_H

#include "bench_opts.h"
#include "layer.h"
#include "placement.h"
#include "runfiles.h"
#include "session.h"

/* The run directory's files, in the order moeperf-layer opens them (mp_runfiles_open). */
enum { FILE_LAYER, FILE_SAMPLES, FILE_RANKS, FILE_RANK_SAMPLES };

/* Write point `res` of layout `lay` (its key words as the sweep names them, its placement pl) on
 * world rank 0: layer.csv's summary, layer_samples.csv, the per-rank files, and the console line
 * unless --quiet. MP_OK or the error of a write after its message. */
int layer_write_point(struct mp_session *s, struct mp_runfiles *f, const struct mp_layout *lay,
                      const char *routing, const char *group_limit, const char *placement,
                      int overlap, const char *dispatch, const char *dedup,
                      const char *dispatch_dtype, const char *weight_dtype,
                      const char *expert_cache, long batch, const struct mp_step_key *step,
                      const struct mp_placement *pl, const struct mp_point_result *res);

/* The console table's header: the model, ranks and backends, the units and the column titles. */
void layer_print_header(const struct mp_session *s);

#endif
