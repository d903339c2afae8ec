/* compare_facts.h - what run.json says about the two sides of a comparison, side by side, with the
 * small text and JSON helpers the comparison shares (compare_facts.c). */
#ifndef MP_COMPARE_FACTS_H
#define MP_COMPARE_FACTS_H

#include <stddef.h>

struct cJSON;

/* A fact about the two runs from run.json, shown side by side. */
enum mp_cmp_fact_kind {
    MP_FACT_INFO,    /* shown; a difference means nothing (start time) */
    MP_FACT_LIBRARY, /* the libraries under test: a difference is expected */
    MP_FACT_SAME,    /* should be equal: a difference is a warning */
};
struct mp_cmp_fact {
    char *label;
    char *base, *new_; /* "-" when absent */
    enum mp_cmp_fact_kind kind;
    int differs;
};

/* A growable string: cmp_sb_put appends, cmp_sb_done finishes. */
struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
};

/* Append t (nothing once out of memory). */
void cmp_sb_put(struct sbuf *b, const char *t);
/* The string, "-" when empty, NULL (and a message) when out of memory. */
char *cmp_sb_done(struct sbuf *b);

/* strdup of s ("" for NULL); NULL after a message when out of memory. */
char *cmp_strdup(const char *s);

/* Append a formatted warning to the list *warn of *nwarn. MP_OK or MP_ERR_RUNTIME. */
__attribute__((format(printf, 3, 4))) int cmp_warn(char ***warn, int *nwarn, const char *fmt, ...);

/* dir/run.json parsed, or NULL when it is missing or not JSON. */
struct cJSON *cmp_load_runjson(const char *dir);
/* Member `name` of object o (NULL when o or the member is missing). */
const struct cJSON *cmp_jget(const struct cJSON *o, const char *name);
/* A JSON value as text (strings as they are, numbers with %.15g; "-" for none); NULL when out of
 * memory. */
char *cmp_json_text(const struct cJSON *v);

/* What the run.json of each side (run[0], run[1]; NULL when missing) says, side by side, appended
 * to *facts (*nfacts of them), with the number of runs each side pools (nruns), and a warning in
 * *warn for every difference outside the libraries under test. MP_OK or MP_ERR_RUNTIME. */
int cmp_collect_facts(const struct cJSON *const run[2], const int nruns[2],
                      struct mp_cmp_fact **facts, int *nfacts, char ***warn, int *nwarn);

#endif
