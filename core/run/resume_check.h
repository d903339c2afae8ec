/* resume_check.h - --resume refused when the run in --out was made with settings that change what
 * its rows mean. */
#ifndef MP_RESUME_CHECK_H
#define MP_RESUME_CHECK_H

struct mp_session;

/* Rank 0, before anything is written: the run.json in s->o.out against this run's settings that
 * no key column tells apart (docs/CSV.md, "The run directory"): the compute and comm backends and
 * the compute element size, a modelled run's cluster profile (its name and every parameter),
 * --gemm, and the build (revision, type, compiler, features). MP_OK when each agrees (or the old
 * run.json does not record it), else MP_ERR_USAGE after one line naming the setting and both
 * values. */
int mp_resume_check_settings(const struct mp_session *s);

#endif
