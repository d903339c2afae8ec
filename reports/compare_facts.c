/* compare_facts.c - what run.json says about the two sides of a comparison: libraries, build,
 * hosts, devices, environment and command line, side by side (compare_internal.h). */
#define _GNU_SOURCE /* asprintf */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare_internal.h"
#include "error.h"
#include "files.h"
#include "sort.h"

struct cJSON *cmp_load_runjson(const char *dir)
{
    char *path = mp_path_join(dir, "run.json");
    if (!path)
        return NULL;
    FILE *f = fopen(path, "rb");
    cJSON *j = NULL;
    if (f) {
        char *buf = NULL;
        size_t len = 0, cap = 0, got;
        char chunk[8192];
        while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
            if (len + got + 1 > cap) {
                cap = 2 * (len + got + 1);
                char *nb = realloc(buf, cap);
                if (!nb) {
                    free(buf);
                    buf = NULL;
                    break;
                }
                buf = nb;
            }
            memcpy(buf + len, chunk, got);
            len += got;
        }
        fclose(f);
        if (buf) {
            buf[len] = '\0';
            j = cJSON_Parse(buf);
            free(buf);
        }
    }
    free(path);
    return j;
}

/* A JSON value as text: strings as they are, numbers with %.15g, anything else unformatted JSON;
 * "-" when absent. Heap string. */
char *cmp_json_text(const cJSON *v)
{
    if (!v || cJSON_IsNull(v))
        return cmp_strdup("-");
    if (cJSON_IsString(v))
        return cmp_strdup(v->valuestring);
    if (cJSON_IsNumber(v)) {
        char buf[64];
        snprintf(buf, sizeof buf, "%.15g", v->valuedouble);
        return cmp_strdup(buf);
    }
    if (cJSON_IsBool(v))
        return cmp_strdup(cJSON_IsTrue(v) ? "true" : "false");
    char *s = cJSON_PrintUnformatted(v);
    if (!s)
        mp_error("out of memory");
    return s;
}

const cJSON *cmp_jget(const cJSON *o, const char *name)
{
    return o ? cJSON_GetObjectItemCaseSensitive(o, name) : NULL;
}


void cmp_sb_put(struct sbuf *b, const char *t)
{
    size_t n = strlen(t);
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = 2 * (b->len + n + 1);
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->len, t, n + 1);
    b->len += n;
}

/* Finish: the string, "-" when empty, NULL (and message) when out of memory. */
char *cmp_sb_done(struct sbuf *b)
{
    if (b->oom) {
        free(b->s);
        mp_error("out of memory");
        return NULL;
    }
    if (!b->s)
        return cmp_strdup("-");
    return b->s;
}

/* "build": "type, compiler, features". */
static char *build_text(const cJSON *run)
{
    const cJSON *b = cmp_jget(run, "build");
    if (!b)
        return cmp_strdup("-");
    struct sbuf sb = {0};
    const char *parts[] = {"type", "compiler", "features"};
    for (int i = 0; i < 3; i++) {
        char *t = cmp_json_text(cmp_jget(b, parts[i]));
        if (!t)
            return NULL;
        if (i)
            cmp_sb_put(&sb, ", ");
        cmp_sb_put(&sb, t);
        free(t);
    }
    return cmp_sb_done(&sb);
}

/* ranks[].FIELD, consecutive repeats run-length compressed: "vm×2,node7". */
static char *ranks_text(const cJSON *run, const char *field)
{
    const cJSON *ranks = cmp_jget(run, "ranks");
    if (!cJSON_IsArray(ranks))
        return cmp_strdup("-");
    struct sbuf sb = {0};
    int n = cJSON_GetArraySize(ranks);
    for (int i = 0; i < n;) {
        const cJSON *v = cmp_jget(cJSON_GetArrayItem(ranks, i), field);
        const char *s = cJSON_IsString(v) ? v->valuestring : "?";
        int j = i + 1;
        while (j < n) {
            const cJSON *w = cmp_jget(cJSON_GetArrayItem(ranks, j), field);
            if (strcmp(cJSON_IsString(w) ? w->valuestring : "?", s) != 0)
                break;
            j++;
        }
        if (i)
            cmp_sb_put(&sb, ", ");
        cmp_sb_put(&sb, s);
        if (j - i > 1) {
            char cnt[32];
            snprintf(cnt, sizeof cnt, " ×%d", j - i);
            cmp_sb_put(&sb, cnt);
        }
        i = j;
    }
    return cmp_sb_done(&sb);
}

/* The NCCL_* and UCX_* variables (sorted "K=V" words): they configure the communication library.
 * OMPI_* is left out, as mpirun puts per-job identifiers there. */
static char *env_text(const cJSON *run)
{
    const cJSON *env = cmp_jget(run, "env");
    if (!cJSON_IsObject(env))
        return cmp_strdup("-");
    int n = cJSON_GetArraySize(env), k = 0;
    char **words = calloc((size_t)(n > 0 ? n : 1), sizeof *words);
    if (!words) {
        mp_error("out of memory");
        return NULL;
    }
    const cJSON *v;
    int oom = 0;
    cJSON_ArrayForEach(v, env)
    {
        if (!v->string || !cJSON_IsString(v))
            continue;
        if (strncmp(v->string, "NCCL_", 5) != 0 && strncmp(v->string, "UCX_", 4) != 0)
            continue;
        if (asprintf(&words[k], "%s=%s", v->string, v->valuestring) < 0) {
            words[k] = NULL;
            oom = 1;
            break;
        }
        k++;
    }
    qsort(words, (size_t)k, sizeof *words, mp_cmp_str);
    struct sbuf sb = {0};
    for (int i = 0; i < k; i++) {
        if (i)
            cmp_sb_put(&sb, " ");
        cmp_sb_put(&sb, words[i]);
        free(words[i]);
    }
    free(words);
    if (oom)
        sb.oom = 1;
    return cmp_sb_done(&sb);
}

/* argv without the program's directory and without the flags that do not change what is measured
 * (--out, --resume, --quiet) or that "debug" already shows (--inject-delay-us). */
static char *argv_text(const cJSON *run)
{
    const cJSON *argv = cmp_jget(run, "argv");
    if (!cJSON_IsArray(argv))
        return cmp_strdup("-");
    static const char *const drop_with_value[] = {"--out", "--inject-delay-us"};
    static const char *const drop_alone[] = {"--resume", "--quiet"};
    struct sbuf sb = {0};
    int n = cJSON_GetArraySize(argv);
    for (int i = 0; i < n; i++) {
        const cJSON *a = cJSON_GetArrayItem(argv, i);
        const char *s = cJSON_IsString(a) ? a->valuestring : "?";
        if (i == 0) {
            const char *slash = strrchr(s, '/');
            cmp_sb_put(&sb, slash ? slash + 1 : s);
            continue;
        }
        int skip = 0;
        for (size_t d = 0; d < sizeof drop_with_value / sizeof *drop_with_value; d++) {
            size_t l = strlen(drop_with_value[d]);
            if (strcmp(s, drop_with_value[d]) == 0) {
                skip = 2;
            } else if (strncmp(s, drop_with_value[d], l) == 0 && s[l] == '=') {
                skip = 1;
            }
        }
        for (size_t d = 0; d < sizeof drop_alone / sizeof *drop_alone; d++)
            if (strcmp(s, drop_alone[d]) == 0)
                skip = 1;
        if (skip) {
            i += skip - 1;
            continue;
        }
        cmp_sb_put(&sb, " ");
        cmp_sb_put(&sb, s);
    }
    return cmp_sb_done(&sb);
}

static int add_fact(struct mp_cmp *c, const char *label, char *b, char *n,
                    enum mp_cmp_fact_kind kind)
{
    char *l = cmp_strdup(label);
    struct mp_cmp_fact *f = realloc(c->facts, (size_t)(c->nfacts + 1) * sizeof *f);
    if (!b || !n || !l || !f) {
        free(b);
        free(n);
        free(l);
        if (f)
            c->facts = f;
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    c->facts = f;
    f[c->nfacts++] = (struct mp_cmp_fact){l, b, n, kind, strcmp(b, n) != 0};
    return MP_OK;
}

/* What run.json says about each side, side by side, and a warning for every difference outside
 * the libraries under test. */
int cmp_collect_facts(struct mp_cmp *c)
{
    const cJSON *rb = c->run[0], *rn = c->run[1];
    int rc = MP_OK;
    MP_CHECK(add_fact(c, "tool", cmp_json_text(cmp_jget(rb, "tool")), cmp_json_text(cmp_jget(rn, "tool")),
                      MP_FACT_SAME));
    /* every field of "libraries" on either side */
    const cJSON *lib[2] = {cmp_jget(rb, "libraries"), cmp_jget(rn, "libraries")};
    for (int side = 0; side < 2; side++) {
        const cJSON *v;
        cJSON_ArrayForEach(v, lib[side])
        {
            if (!v->string || (side == 1 && cmp_jget(lib[0], v->string)))
                continue;
            char label[96];
            snprintf(label, sizeof label, "libraries.%s", v->string);
            MP_CHECK(add_fact(c, label, cmp_json_text(cmp_jget(lib[0], v->string)),
                              cmp_json_text(cmp_jget(lib[1], v->string)), MP_FACT_LIBRARY));
        }
    }
    MP_CHECK(add_fact(c, "git_revision", cmp_json_text(cmp_jget(rb, "git_revision")),
                      cmp_json_text(cmp_jget(rn, "git_revision")), MP_FACT_SAME));
    MP_CHECK(add_fact(c, "build", build_text(rb), build_text(rn), MP_FACT_SAME));
    MP_CHECK(add_fact(c, "world (ranks)", cmp_json_text(cmp_jget(rb, "world")),
                      cmp_json_text(cmp_jget(rn, "world")), MP_FACT_SAME));
    MP_CHECK(add_fact(c, "nodes", cmp_json_text(cmp_jget(rb, "nodes")), cmp_json_text(cmp_jget(rn, "nodes")),
                      MP_FACT_SAME));
    MP_CHECK(add_fact(c, "hosts (per rank)", ranks_text(rb, "host"), ranks_text(rn, "host"),
                      MP_FACT_SAME));
    MP_CHECK(add_fact(c, "devices (per rank)", ranks_text(rb, "device"), ranks_text(rn, "device"),
                      MP_FACT_SAME));
    MP_CHECK(add_fact(c, "cpu_model", cmp_json_text(cmp_jget(cmp_jget(rb, "topology"), "cpu_model")),
                      cmp_json_text(cmp_jget(cmp_jget(rn, "topology"), "cpu_model")), MP_FACT_SAME));
    MP_CHECK(add_fact(c, "NCCL_/UCX_ environment", env_text(rb), env_text(rn), MP_FACT_SAME));
    MP_CHECK(add_fact(c, "command line", argv_text(rb), argv_text(rn), MP_FACT_SAME));
    MP_CHECK(add_fact(c, "debug", cmp_json_text(cmp_jget(rb, "debug")), cmp_json_text(cmp_jget(rn, "debug")),
                      MP_FACT_SAME));
    MP_CHECK(add_fact(c, "finished", cmp_json_text(cmp_jget(rb, "finished")),
                      cmp_json_text(cmp_jget(rn, "finished")), MP_FACT_SAME));
    MP_CHECK(add_fact(c, "start", cmp_json_text(cmp_jget(rb, "start")), cmp_json_text(cmp_jget(rn, "start")),
                      MP_FACT_INFO));
    char nb[32], nn[32];
    snprintf(nb, sizeof nb, "%d", c->nruns[0]);
    snprintf(nn, sizeof nn, "%d", c->nruns[1]);
    MP_CHECK(add_fact(c, "runs pooled", cmp_strdup(nb), cmp_strdup(nn), MP_FACT_INFO));

    if (c->run[0] && c->run[1])
        for (int i = 0; i < c->nfacts; i++) {
            const struct mp_cmp_fact *f = &c->facts[i];
            if (f->kind == MP_FACT_SAME && f->differs && strcmp(f->label, "debug") != 0 &&
                strcmp(f->label, "finished") != 0)
                MP_CHECK(cmp_add_warn(c, "the runs differ in more than the library under test: %s is "
                                     "'%s' in base, '%s' in new",
                                  f->label, f->base, f->new_));
        }
out:
    return rc;
}
