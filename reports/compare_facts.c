/* compare_facts.c - what run.json says about the two sides of a comparison: libraries, build,
 * hosts, devices, environment and command line, side by side (compare_facts.h). */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare_facts.h"
#include "error.h"
#include "files.h"
#include "format.h"
#include "sort.h"

char *cmp_strdup(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d)
        mp_error("out of memory");
    return d;
}

int cmp_warn(char ***warn, int *nwarn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = mp_vformat(fmt, ap);
    va_end(ap);
    char **w = s ? realloc(*warn, (size_t)(*nwarn + 1) * sizeof *w) : NULL;
    if (!w) {
        free(s);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    *warn = w;
    w[(*nwarn)++] = s;
    return MP_OK;
}

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

/* Whether environment variable `k` configures the communication: NCCL_*, UCX_*, and Open MPI's
 * MCA parameters (OMPI_MCA_*: transports, binding, yielding) less those mpirun sets to identify
 * the job (its daemons, session directories, ids), which differ between any two runs. */
static int comm_setting(const char *k)
{
    static const char *const job[] = {"OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix",
                                      "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint",
                                      "OMPI_MCA_prte_", NULL};
    if (strncmp(k, "NCCL_", 5) == 0 || strncmp(k, "UCX_", 4) == 0)
        return 1;
    if (strncmp(k, "OMPI_MCA_", 9) != 0)
        return 0;
    for (int i = 0; job[i]; i++)
        if (strncmp(k, job[i], strlen(job[i])) == 0)
            return 0;
    return 1;
}

/* The variables that configure the communication (comm_setting), as sorted "K=V" words. */
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
        if (!comm_setting(v->string))
            continue;
        if (!(words[k] = mp_format("%s=%s", v->string, v->valuestring))) {
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

static int add_fact(struct mp_cmp_fact **facts, int *nfacts, const char *label, char *b,
                    char *n, enum mp_cmp_fact_kind kind)
{
    char *l = cmp_strdup(label);
    struct mp_cmp_fact *f = realloc(*facts, (size_t)(*nfacts + 1) * sizeof *f);
    if (!b || !n || !l || !f) {
        free(b);
        free(n);
        free(l);
        if (f)
            *facts = f;
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    *facts = f;
    f[(*nfacts)++] = (struct mp_cmp_fact){l, b, n, kind, strcmp(b, n) != 0};
    return MP_OK;
}

/* What run.json says about each side, side by side, and a warning for every difference outside
 * the libraries under test. */
/* The facts collected so far, as add_fact and field_fact append to them. */
struct fact_list {
    struct mp_cmp_fact **facts;
    int *nfacts;
};

/* Fact `label`: the value at `key` (in object `in` when given) of each side's run.json. */
static int field_fact(struct fact_list *fl, const char *label, const cJSON *rb, const cJSON *rn,
                      const char *in, const char *key, enum mp_cmp_fact_kind kind)
{
    if (in) {
        rb = cmp_jget(rb, in);
        rn = cmp_jget(rn, in);
    }
    return add_fact(fl->facts, fl->nfacts, label, cmp_json_text(cmp_jget(rb, key)),
                    cmp_json_text(cmp_jget(rn, key)), kind);
}

/* Every field of "libraries" on either side, as facts of kind MP_FACT_LIBRARY. */
static int library_facts(struct fact_list *fl, const cJSON *rb, const cJSON *rn)
{
    const cJSON *lib[2] = {cmp_jget(rb, "libraries"), cmp_jget(rn, "libraries")};
    for (int side = 0; side < 2; side++) {
        const cJSON *v;
        cJSON_ArrayForEach(v, lib[side])
        {
            if (!v->string || (side == 1 && cmp_jget(lib[0], v->string)))
                continue;
            char label[96];
            snprintf(label, sizeof label, "libraries.%s", v->string);
            int rc = field_fact(fl, label, lib[0], lib[1], NULL, v->string, MP_FACT_LIBRARY);
            if (rc != MP_OK)
                return rc;
        }
    }
    return MP_OK;
}

int cmp_collect_facts(const struct cJSON *const run[2], const int nruns[2],
                      struct mp_cmp_fact **facts, int *nfacts, char ***warn, int *nwarn)
{
    const cJSON *rb = run[0], *rn = run[1];
    struct fact_list fl = {facts, nfacts};
    int rc = MP_OK;
    MP_CHECK(field_fact(&fl, "tool", rb, rn, NULL, "tool", MP_FACT_SAME));
    MP_CHECK(library_facts(&fl, rb, rn));
    MP_CHECK(field_fact(&fl, "git_revision", rb, rn, NULL, "git_revision", MP_FACT_SAME));
    MP_CHECK(add_fact(facts, nfacts, "build", build_text(rb), build_text(rn), MP_FACT_SAME));
    MP_CHECK(field_fact(&fl, "world (ranks)", rb, rn, NULL, "world", MP_FACT_SAME));
    MP_CHECK(field_fact(&fl, "nodes", rb, rn, NULL, "nodes", MP_FACT_SAME));
    MP_CHECK(add_fact(facts, nfacts, "hosts (per rank)", ranks_text(rb, "host"),
                      ranks_text(rn, "host"), MP_FACT_SAME));
    MP_CHECK(add_fact(facts, nfacts, "devices (per rank)", ranks_text(rb, "device"),
                      ranks_text(rn, "device"), MP_FACT_SAME));
    MP_CHECK(field_fact(&fl, "cpu_model", rb, rn, "topology", "cpu_model", MP_FACT_SAME));
    MP_CHECK(add_fact(facts, nfacts, "NCCL_/UCX_/OMPI_MCA_ environment", env_text(rb),
                      env_text(rn), MP_FACT_SAME));
    MP_CHECK(field_fact(&fl, "cpu binding policy", rb, rn, NULL, "cpu_bind_policy",
                        MP_FACT_SAME));
    MP_CHECK(add_fact(facts, nfacts, "cpus bound (per rank)", ranks_text(rb, "cpu_bind"),
                      ranks_text(rn, "cpu_bind"), MP_FACT_SAME));
    MP_CHECK(add_fact(facts, nfacts, "command line", argv_text(rb), argv_text(rn), MP_FACT_SAME));
    MP_CHECK(field_fact(&fl, "debug", rb, rn, NULL, "debug", MP_FACT_SAME));
    MP_CHECK(field_fact(&fl, "finished", rb, rn, NULL, "finished", MP_FACT_SAME));
    MP_CHECK(field_fact(&fl, "start", rb, rn, NULL, "start", MP_FACT_INFO));
    char nb[32], nn[32];
    snprintf(nb, sizeof nb, "%d", nruns[0]);
    snprintf(nn, sizeof nn, "%d", nruns[1]);
    MP_CHECK(add_fact(facts, nfacts, "runs pooled", cmp_strdup(nb), cmp_strdup(nn), MP_FACT_INFO));

    if (run[0] && run[1])
        for (int i = 0; i < *nfacts; i++) {
            const struct mp_cmp_fact *f = &(*facts)[i];
            if (f->kind == MP_FACT_SAME && f->differs && strcmp(f->label, "debug") != 0 &&
                strcmp(f->label, "finished") != 0)
                MP_CHECK(cmp_warn(warn, nwarn,
                                  "the runs differ in more than the library under test: %s is "
                                  "'%s' in base, '%s' in new",
                                  f->label, f->base, f->new_));
        }
out:
    return rc;
}
