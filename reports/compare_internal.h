/* compare_internal.h - what compare.c (the sides and the verdicts) and compare_facts.c (what
 * run.json says about each side) share; included only in reports/. */
#ifndef MP_COMPARE_INTERNAL_H
#define MP_COMPARE_INTERNAL_H

#include <stddef.h>

#include "compare.h"

struct cJSON;

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

/* Append a formatted warning to c->warn (printed to stderr when the load succeeds). MP_OK or
 * MP_ERR_RUNTIME. */
__attribute__((format(printf, 2, 3))) int cmp_add_warn(struct mp_cmp *c, const char *fmt, ...);

/* dir/run.json parsed, or NULL when it is missing or not JSON. */
struct cJSON *cmp_load_runjson(const char *dir);
/* Member `name` of object o (NULL when o or the member is missing). */
const struct cJSON *cmp_jget(const struct cJSON *o, const char *name);
/* A JSON value as text (strings as they are, numbers with %.15g; "-" for none); NULL when out of
 * memory. */
char *cmp_json_text(const struct cJSON *v);

/* What run.json says about each side (c->run[0], c->run[1]), side by side in c->facts, and a
 * warning for every difference outside the libraries under test. */
int cmp_collect_facts(struct mp_cmp *c);

#endif
