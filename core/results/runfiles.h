/* runfiles.h - a tool's CSV files in --out: one summary file and its companions (samples, per-rank
 * rows), all starting with the same workload key columns, opened with --resume handled, and the
 * collective "is this point already done?" question. */
#ifndef MP_RUNFILES_H
#define MP_RUNFILES_H

#include "results.h"
#include "schema.h"
#include "session.h"

#define MP_RUNFILES_MAX 4


struct mp_runfiles {
    int nkey, nfiles, open;
    int pending; /* rank 0: checked, made and opened at the first row */
    struct mp_session *s;
    struct mp_csv csv[MP_RUNFILES_MAX];
    const char **cols[MP_RUNFILES_MAX];
    int ncols[MP_RUNFILES_MAX];
    const char *names[MP_RUNFILES_MAX];
    struct mp_keyset done;
};

/* Collective. Without --out: nothing to open, MP_OK. With --out, rank 0 checks files[0] (the
 * summary, whose rows mark points done) and the companions, each with the header of its schema
 * (all of them sharing files[0]'s key columns): with --resume every existing file's header, and
 * the done keys loaded; nothing is written. The directory is made and the files opened at the
 * first row (mp_runfiles_write), where --resume also drops companion rows of points without a
 * summary row. Every rank returns the same status (s->agreed is set on failure). */
int mp_runfiles_open(struct mp_runfiles *rf, struct mp_session *s,
                     const struct mp_csv_schema *const *files, int nfiles);

/* Collective: 1 when --resume found the point whose key cells are `key` (rank 0's row) done. */
int mp_runfiles_done(struct mp_runfiles *rf, struct mp_session *s, const struct mp_row *key);

/* The key cells of a layer or FFN point (its workload), in the order of mp_workload_key_columns:
 * source, backend, comm, the model's shape, layout, world, routing, group_limit, placement,
 * overlap, dispatch, dedup, dispatch_dtype, weight_dtype, expert_cache, batch, seq, the step's
 * cells (context, micro_batches, phase, chunk; `step` NULL for moeperf-ffn: context, phase and
 * chunk empty, micro_batches 1), seed, flush_cache (1 when the caches were evicted before every
 * timed iteration, else 0: warm and cold runs are different points). */
struct mp_layout;

/* The key cells of the step a layer point is part of. */
struct mp_step_key {
    long context;      /* KV-cache tokens per sequence (decode), prompt length (prefill) */
    int micro_batches; /* 1 or 2 */
    const char *phase; /* "decode" or "prefill" */
    long chunk;        /* prefill pieces' tokens, 0: whole prompts */
};

void mp_workload_key_row(struct mp_row *r, const struct mp_session *s, const struct mp_layout *lay,
                         const char *routing, const char *group_limit, const char *placement,
                         int overlap, const char *dispatch, const char *dedup,
                         const char *dispatch_dtype, const char *weight_dtype,
                         const char *expert_cache, long batch, const struct mp_step_key *step);

/* 1 when this run evicts the device's caches before every timed iteration: --flush-cache (on by
 * default) on a measured backend that has a flush_cache op; 0 otherwise (--no-flush-cache, the
 * model backend). */
int mp_flush_cache_active(const struct mp_session *s);

/* 1 on rank 0 of a run with --out (its files to be written, or open), else 0. */
static inline int mp_runfiles_on(const struct mp_runfiles *rf) { return rf->open || rf->pending; }

/* Write a row to file i (rank 0); the first makes --out and opens the files (mp_runfiles_open). */
int mp_runfiles_write(struct mp_runfiles *rf, int i, const struct mp_row *row);

void mp_runfiles_close(struct mp_runfiles *rf);

#endif
