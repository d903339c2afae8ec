/* runfiles.c - opening, resuming and writing a tool's result files (see runfiles.h). */
#include "runfiles.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

/* Rank 0, before anything is written: the files' headers, and with --resume the points done and
 * every existing file's header checked (read only), so that a refusal touches no file. */
static int prepare(struct mp_runfiles *rf, const struct mp_session *s,
                   const struct mp_csv_schema *const *files)
{
    for (int i = 0; i < rf->nfiles; i++) {
        if (files[i]->key != files[0]->key) {
            mp_error("%s: its key columns differ from %s's", files[i]->file, files[0]->file);
            return MP_ERR_RUNTIME;
        }
        rf->ncols[i] = mp_schema_ncols(files[i]);
        rf->cols[i] = malloc((size_t)rf->ncols[i] * sizeof *rf->cols[i]);
        if (!rf->cols[i]) {
            mp_error("out of memory");
            return MP_ERR_RUNTIME;
        }
        mp_schema_header(files[i], rf->cols[i]);
        rf->names[i] = files[i]->file;
    }
    if (!s->o.resume)
        return MP_OK;
    int rc = MP_OK;
    for (int i = 0; i < rf->nfiles && rc == MP_OK; i++)
        rc = mp_csv_resume_ok(s->o.out, rf->names[i], rf->cols[i], rf->ncols[i]);
    return rc == MP_OK ? mp_keyset_load(s->o.out, rf->names[0], rf->nkey, &rf->done) : rc;
}

/* Rank 0, before the first row: --out made (an old run removed with --force), with --resume the
 * companions' rows of points without a summary row dropped, and every file opened. */
static int create(struct mp_runfiles *rf)
{
    struct mp_session *s = rf->s;
    rf->pending = 0;
    int rc = mp_session_make_out(s);
    for (int i = 1; i < rf->nfiles && rc == MP_OK && s->o.resume; i++)
        rc = mp_csv_filter(s->o.out, rf->names[i], rf->nkey, &rf->done);
    for (int i = 0; i < rf->nfiles && rc == MP_OK; i++)
        rc = mp_csv_open(&rf->csv[i], s->o.out, rf->names[i], rf->cols[i], rf->ncols[i],
                         s->o.resume);
    rf->open = rc == MP_OK;
    return rc;
}

int mp_runfiles_open(struct mp_runfiles *rf, struct mp_session *s,
                     const struct mp_csv_schema *const *files, int nfiles)
{
    memset(rf, 0, sizeof *rf);
    rf->s = s;
    rf->nkey = files[0]->key->n;
    rf->nfiles = nfiles < MP_RUNFILES_MAX ? nfiles : MP_RUNFILES_MAX;
    if (!s->o.out)
        return MP_OK;
    int rc = s->comm->rank == 0 ? prepare(rf, s, files) : MP_OK;
    int status = rc; /* every rank takes rank 0's verdict */
    s->comm->ops->bcast(s->comm, &status, sizeof status);
    if (status != MP_OK)
        s->agreed = 1;
    rf->pending = status == MP_OK && s->comm->rank == 0;
    return status;
}

int mp_runfiles_done(struct mp_runfiles *rf, struct mp_session *s, const struct mp_row *key)
{
    int done = 0;
    if (s->comm->rank == 0 && (rf->open || rf->pending) && s->o.resume) {
        char *k = mp_row_key(key, rf->nkey);
        done = k && mp_keyset_has(&rf->done, k);
        free(k);
    }
    s->comm->ops->bcast(s->comm, &done, sizeof done);
    return done;
}

int mp_runfiles_write(struct mp_runfiles *rf, int i, const struct mp_row *row)
{
    if (rf->pending) {
        int rc = create(rf);
        if (rc != MP_OK)
            return rc;
    }
    return rf->open ? mp_csv_write(&rf->csv[i], row) : MP_OK;
}

void mp_runfiles_close(struct mp_runfiles *rf)
{
    for (int i = 0; i < rf->nfiles; i++) {
        mp_csv_close(&rf->csv[i]);
        free(rf->cols[i]);
    }
    mp_keyset_free(&rf->done);
    memset(rf, 0, sizeof *rf);
}

int mp_flush_cache_active(const struct mp_session *s)
{
    return s->o.flush_cache && !s->modelled && s->cops && s->cops->flush_cache;
}

void mp_workload_key_row(struct mp_row *r, const struct mp_session *s, const struct mp_layout *lay,
                         const char *routing, const char *group_limit, const char *placement,
                         int overlap, const char *dispatch, const char *dedup,
                         const char *dispatch_dtype, const char *weight_dtype,
                         const char *expert_cache, long batch, const struct mp_step_key *step)
{
    const struct mp_model *m = &s->model;
    mp_row_reset(r);
    mp_row_str(r, s->modelled ? "model" : "measured");
    mp_row_str(r, s->o.backend);
    mp_row_str(r, s->o.comm);
    mp_row_str(r, m->name);
    mp_row_int(r, m->hidden);
    mp_row_int(r, m->ffn);
    mp_row_int(r, m->experts);
    mp_row_int(r, m->topk);
    mp_row_int(r, m->shared);
    mp_row_str(r, lay->name);
    mp_row_int(r, lay->tp);
    mp_row_int(r, lay->ep);
    mp_row_int(r, s->comm->size);
    mp_row_str(r, routing);
    mp_row_str(r, group_limit);
    mp_row_str(r, placement);
    mp_row_int(r, overlap);
    mp_row_str(r, dispatch);
    mp_row_str(r, dedup);
    mp_row_str(r, dispatch_dtype);
    mp_row_str(r, weight_dtype);
    mp_row_str(r, expert_cache);
    mp_row_int(r, batch);
    mp_row_int(r, s->o.seq);
    if (step) {
        mp_row_int(r, step->context);
        mp_row_int(r, step->micro_batches);
        mp_row_str(r, step->phase);
        mp_row_int(r, step->chunk);
    } else {
        mp_row_str(r, "");
        mp_row_int(r, 1);
        mp_row_str(r, "");
        mp_row_str(r, "");
    }
    mp_row_int(r, s->o.seed);
    mp_row_int(r, mp_flush_cache_active(s));
}
