/* resume_check.h - --resume refused when the run in --out was made with settings that change what
 * its rows mean. */
#ifndef MP_RESUME_CHECK_H
#define MP_RESUME_CHECK_H

#include "cluster.h"

/* What this command's rows mean beyond their key columns: the settings --resume compares with the
 * run.json of the run it adds to. */
struct mp_resume_settings {
    const char *dir, *tool;
    const char *backend, *comm; /* the compute and comm backends' names */
    int elem_bytes;             /* the compute backend's element size */
    const struct mp_cluster *cluster; /* a modelled run's profile; NULL for a measured run */
    const char *gemm;                 /* --gemm, NULL where the tool has none */
};

/* Rank 0, before anything is written: the run.json in s->dir against s (docs/CSV.md, "The run
 * directory"): the compute and comm backends and the element size, a modelled run's cluster
 * profile (its name and every parameter), --gemm, and the build (revision, type, compiler,
 * features). MP_OK when each agrees (or the old run.json does not record it), else MP_ERR_USAGE
 * after one line naming the setting and both values. */
int mp_resume_check_settings(const struct mp_resume_settings *s);

#endif
