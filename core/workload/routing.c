/* routing.c - parses --routing specs and --group-limit entries, reads routing traces and draws
 * each token's top-k experts. */
#include "routing.h"

#include "error.h"
#include "rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACCEPTED "accepted: uniform, zipf:S, hot:N:F, lognormal:SIGMA, gate[:TAU], trace:FILE"

/* Stream constants mixed into the seed so that the draws of one purpose never reuse another's. */
#define STREAM_KEYS 0x65732d6b657973ull    /* "es-keys": Efraimidis-Spirakis keys */
#define STREAM_WEIGHTS 0x77656967687473ull /* "weights": combine weights */
#define STREAM_GUMBEL 0x67756d62656cull    /* "gumbel": gate noise */
#define STREAM_LOGNORMAL 0x4c4e            /* "LN": lognormal expert scores */
#define STREAM_GROUPS 0x67726f757073ull    /* "groups": --group-limit group picks */

#define GL_ACCEPTED                                                                                \
    "accepted: off, G:M with G dividing the experts and 1 <= M <= G, or M alone (G = the nodes "  \
    "the EP ranks span)"

/* Strict number parsers: the whole string must be consumed and the value finite. */
static int parse_double(const char *s, double *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static int parse_ll(const char *s, long long *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* Normalise w[0..n) in place to sum 1; returns the number of non-zero entries. */
static int normalise(double *w, int n)
{
    double sum = 0;
    int nz = 0;
    for (int e = 0; e < n; e++)
        sum += w[e];
    for (int e = 0; e < n; e++) {
        w[e] /= sum;
        nz += w[e] > 0;
    }
    return nz;
}

/* ---- traces ---------------------------------------------------------------------------------- */

/* Strip surrounding blanks (and a trailing CR) in place. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* Split `line` at commas into at most `max` trimmed fields; returns the field count (may exceed
 * `max`, in which case only the first `max` are stored). */
static int split_csv(char *line, char **f, int max)
{
    int n = 0;
    char *p = line;
    for (;;) {
        char *c = strchr(p, ',');
        if (c)
            *c = '\0';
        if (n < max)
            f[n] = trim(p);
        n++;
        if (!c)
            return n;
        p = c + 1;
    }
}

/* Count commas + 1 without modifying the line. */
static int count_fields(const char *line)
{
    int n = 1;
    for (; *line; line++)
        n += *line == ',';
    return n;
}

/* Next line that is neither blank nor a '#' comment; returns its trimmed text or NULL at EOF.
 * `lineno` counts every physical line read. */
static char *next_line(FILE *f, char **buf, size_t *cap, long *lineno)
{
    while (getline(buf, cap, f) >= 0) {
        (*lineno)++;
        char *s = trim(*buf);
        if (*s && *s != '#')
            return s;
    }
    return NULL;
}

/* Read a "expert,count" trace (header already consumed) into r->prob. */
static int read_counts(FILE *f, const char *path, char **buf, size_t *cap, long *lineno,
                       struct mp_routing *r)
{
    int E = r->experts;
    long *first = calloc((size_t)E, sizeof *first); /* line where each expert was listed */
    r->prob = calloc((size_t)E, sizeof *r->prob);
    if (!first || !r->prob) {
        free(first);
        mp_error("out of memory reading trace %s", path);
        return MP_ERR_RUNTIME;
    }
    int rc = MP_ERR_USAGE;
    char *s;
    while ((s = next_line(f, buf, cap, lineno))) {
        char *fld[2];
        int n = split_csv(s, fld, 2);
        long long id, count;
        if (n != 2) {
            mp_usage("trace %s line %ld: expected 2 fields 'expert,count', got %d", path, *lineno,
                     n);
            goto out;
        }
        if (parse_ll(fld[0], &id) || id < 0 || id >= E) {
            mp_usage("trace %s line %ld: expert '%s' must be an integer in 0..%d", path, *lineno,
                     fld[0], E - 1);
            goto out;
        }
        if (parse_ll(fld[1], &count) || count < 0) {
            mp_usage("trace %s line %ld: count '%s' must be an integer >= 0", path, *lineno,
                     fld[1]);
            goto out;
        }
        if (first[id]) {
            mp_usage("trace %s line %ld: expert %lld already listed on line %ld", path, *lineno,
                     id, first[id]);
            goto out;
        }
        first[id] = *lineno;
        r->prob[id] = (double)count;
    }
    double total = 0;
    int nz = 0;
    for (int e = 0; e < E; e++) {
        total += r->prob[e];
        nz += r->prob[e] > 0;
    }
    if (total <= 0) {
        mp_usage("trace %s: the counts sum to 0 (at least %d experts need a count > 0)", path,
                 r->topk);
        goto out;
    }
    if (nz < r->topk) {
        mp_usage("trace %s: only %d expert(s) have a count > 0, the model routes top-%d", path, nz,
                 r->topk);
        goto out;
    }
    normalise(r->prob, E);
    rc = MP_OK;
out:
    free(first);
    return rc;
}

/* Read a "token,expert0,...,expert{K-1}" trace (header already consumed) into r->trace and the
 * per-expert frequency into r->prob. */
static int read_tokens(FILE *f, const char *path, char **buf, size_t *cap, long *lineno,
                       struct mp_routing *r)
{
    int E = r->experts, K = r->topk;
    long rows_cap = 1024;
    char **fld = malloc((size_t)(K + 1) * sizeof *fld);
    r->trace = malloc((size_t)rows_cap * (size_t)K * sizeof *r->trace);
    r->prob = calloc((size_t)E, sizeof *r->prob);
    if (!fld || !r->trace || !r->prob) {
        free(fld);
        mp_error("out of memory reading trace %s", path);
        return MP_ERR_RUNTIME;
    }
    int rc = MP_ERR_USAGE;
    char *s;
    while ((s = next_line(f, buf, cap, lineno))) {
        int n = split_csv(s, fld, K + 1);
        long long tok;
        if (n != K + 1) {
            mp_usage("trace %s line %ld: expected %d fields 'token,expert0,...,expert%d', got %d",
                     path, *lineno, K + 1, K - 1, n);
            goto out;
        }
        if (parse_ll(fld[0], &tok)) {
            mp_usage("trace %s line %ld: token '%s' is not an integer", path, *lineno, fld[0]);
            goto out;
        }
        if (r->ntrace == rows_cap) {
            rows_cap *= 2;
            int32_t *t = realloc(r->trace, (size_t)rows_cap * (size_t)K * sizeof *t);
            if (!t) {
                mp_error("out of memory reading trace %s", path);
                rc = MP_ERR_RUNTIME;
                goto out;
            }
            r->trace = t;
        }
        int32_t *row = r->trace + r->ntrace * K;
        for (int k = 0; k < K; k++) {
            long long id;
            if (parse_ll(fld[k + 1], &id) || id < 0 || id >= E) {
                mp_usage("trace %s line %ld: expert%d '%s' must be an integer in 0..%d", path,
                         *lineno, k, fld[k + 1], E - 1);
                goto out;
            }
            for (int j = 0; j < k; j++)
                if (row[j] == id) {
                    mp_usage("trace %s line %ld: expert %lld appears twice in one token", path,
                             *lineno, id);
                    goto out;
                }
            row[k] = (int32_t)id;
        }
        r->ntrace++;
    }
    if (r->ntrace == 0) {
        mp_usage("trace %s: no token rows after the header", path);
        goto out;
    }
    for (long i = 0; i < r->ntrace * K; i++)
        r->prob[r->trace[i]] += 1.0;
    normalise(r->prob, E);
    rc = MP_OK;
out:
    free(fld);
    return rc;
}

/* Open `path`, decide the format from its header and read it. */
static int read_trace(const char *path, struct mp_routing *r)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        mp_usage("--routing: 'trace:%s' — cannot read %s: %s", path, path, strerror(errno));
        return MP_ERR_USAGE;
    }
    char *buf = NULL;
    size_t cap = 0;
    long lineno = 0;
    int rc = MP_ERR_USAGE;
    char *s = next_line(f, &buf, &cap, &lineno);
    if (!s) {
        mp_usage("trace %s: empty (expected a header 'expert,count' or "
                 "'token,expert0,...,expert%d')",
                 path, r->topk - 1);
        goto out;
    }
    int n = count_fields(s);
    char **fld = malloc((size_t)n * sizeof *fld);
    if (!fld) {
        mp_error("out of memory reading trace %s", path);
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    split_csv(s, fld, n);
    int counts = n == 2 && !strcmp(fld[0], "expert") && !strcmp(fld[1], "count");
    int tokens = n >= 2 && !strcmp(fld[0], "token");
    for (int k = 1; tokens && k < n; k++) {
        char want[32];
        snprintf(want, sizeof want, "expert%d", k - 1);
        tokens = !strcmp(fld[k], want);
    }
    free(fld);
    if (counts) {
        r->kind = MP_ROUTE_TRACE_COUNTS;
        rc = read_counts(f, path, &buf, &cap, &lineno, r);
    } else if (tokens && n - 1 != r->topk) {
        mp_usage("trace %s line %ld: header has %d expert columns, the model routes top-%d", path,
                 lineno, n - 1, r->topk);
    } else if (tokens) {
        r->kind = MP_ROUTE_TRACE_TOKENS;
        rc = read_tokens(f, path, &buf, &cap, &lineno, r);
    } else {
        mp_usage("trace %s line %ld: header must be 'expert,count' or "
                 "'token,expert0,...,expert%d'",
                 path, lineno, r->topk - 1);
    }
out:
    free(buf);
    fclose(f);
    return rc;
}

/* ---- parsing --------------------------------------------------------------------------------- */

/* Fill r->prob for the generated kinds from r->kind, r->a, r->b. */
static int generated_prob(struct mp_routing *r, uint64_t seed)
{
    int E = r->experts;
    r->prob = malloc((size_t)E * sizeof *r->prob);
    if (!r->prob) {
        mp_error("out of memory for %d routing probabilities", E);
        return MP_ERR_RUNTIME;
    }
    double zmax = -INFINITY;
    for (int e = 0; e < E; e++) {
        switch (r->kind) {
        case MP_ROUTE_ZIPF: /* in logs, relative to expert 0, so large S underflows gracefully */
            r->prob[e] = exp(-r->a * log(e + 1.0));
            break;
        case MP_ROUTE_HOT:
            r->prob[e] = (e < (int)r->a && (int)r->a < E) ? r->b : 1.0;
            break;
        case MP_ROUTE_LOGNORMAL:
            r->prob[e] = mp_normal(mp_hash4(seed, STREAM_LOGNORMAL, (uint64_t)e, 1),
                                   mp_hash4(seed, STREAM_LOGNORMAL, (uint64_t)e, 2));
            if (r->prob[e] > zmax)
                zmax = r->prob[e];
            break;
        default:
            r->prob[e] = 1.0;
        }
    }
    if (r->kind == MP_ROUTE_LOGNORMAL) /* exp(SIGMA·(z − max z)): no overflow */
        for (int e = 0; e < E; e++)
            r->prob[e] = exp(r->a * (r->prob[e] - zmax));
    int nz = normalise(r->prob, E);
    if (nz < r->topk) {
        mp_usage("--routing: '%s' — leaves only %d expert(s) with a probability > 0 in double "
                 "precision, the model routes top-%d (%s)",
                 r->spec, nz, r->topk, ACCEPTED);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* Parse the kind and its parameters; prints the error itself. */
static int parse_spec(const char *spec, struct mp_routing *r)
{
    int E = r->experts;
    const char *arg = strchr(spec, ':');
    arg = arg ? arg + 1 : NULL;
    size_t klen = arg ? (size_t)(arg - 1 - spec) : strlen(spec);
#define KIND_IS(name) (klen == strlen(name) && !strncmp(spec, name, klen))
    if (KIND_IS("uniform") && !arg) {
        r->kind = MP_ROUTE_UNIFORM;
    } else if (KIND_IS("zipf")) {
        r->kind = MP_ROUTE_ZIPF;
        if (parse_double(arg, &r->a) || !(r->a > 0)) {
            mp_usage("--routing: '%s' — S must be a number > 0 (%s)", spec, ACCEPTED);
            return MP_ERR_USAGE;
        }
    } else if (KIND_IS("hot")) {
        r->kind = MP_ROUTE_HOT;
        char nbuf[64];
        const char *colon = arg ? strchr(arg, ':') : NULL;
        long long n = 0;
        int ok = colon && (size_t)(colon - arg) < sizeof nbuf;
        if (ok) {
            memcpy(nbuf, arg, (size_t)(colon - arg));
            nbuf[colon - arg] = '\0';
            ok = !parse_ll(nbuf, &n) && n >= 1 && n <= E && !parse_double(colon + 1, &r->b) &&
                 r->b >= 1;
        }
        if (!ok) {
            mp_usage("--routing: '%s' — N must be an integer in 1..%d (experts) and F a number "
                     ">= 1 (%s)",
                     spec, E, ACCEPTED);
            return MP_ERR_USAGE;
        }
        r->a = (double)n;
    } else if (KIND_IS("lognormal")) {
        r->kind = MP_ROUTE_LOGNORMAL;
        if (parse_double(arg, &r->a) || !(r->a >= 0)) {
            mp_usage("--routing: '%s' — SIGMA must be a number >= 0 (%s)", spec, ACCEPTED);
            return MP_ERR_USAGE;
        }
    } else if (KIND_IS("gate")) {
        r->kind = MP_ROUTE_GATE;
        r->a = 0;
        if (arg && (parse_double(arg, &r->a) || !(r->a >= 0))) {
            mp_usage("--routing: '%s' — TAU must be a number >= 0 (%s)", spec, ACCEPTED);
            return MP_ERR_USAGE;
        }
    } else if (KIND_IS("trace")) {
        if (!arg || !*arg) {
            mp_usage("--routing: '%s' — FILE is missing (%s)", spec, ACCEPTED);
            return MP_ERR_USAGE;
        }
        r->kind = MP_ROUTE_TRACE_COUNTS; /* read_trace decides */
    } else {
        mp_usage("--routing: '%s' is not a known routing (%s)", spec, ACCEPTED);
        return MP_ERR_USAGE;
    }
#undef KIND_IS
    return MP_OK;
}

int mp_routing_parse(const char *spec, int experts, int topk, uint64_t seed, struct mp_routing *r)
{
    memset(r, 0, sizeof *r);
    if (!spec)
        spec = "";
    if (strlen(spec) >= sizeof r->spec) {
        mp_usage("--routing: '%.40s...' is longer than %zu characters", spec, sizeof r->spec - 1);
        return MP_ERR_USAGE;
    }
    if (experts < 1 || topk < 1 || topk > experts) {
        mp_usage("--routing: '%s' needs 1 <= top-k <= experts, got top-%d of %d experts", spec,
                 topk, experts);
        return MP_ERR_USAGE;
    }
    strcpy(r->spec, spec);
    r->experts = experts;
    r->topk = topk;
    int rc = parse_spec(spec, r);
    if (rc == MP_OK) {
        if (r->kind == MP_ROUTE_TRACE_COUNTS)
            rc = read_trace(strchr(spec, ':') + 1, r);
        else if (r->kind != MP_ROUTE_GATE)
            rc = generated_prob(r, seed);
    }
    if (rc == MP_OK && r->prob) {
        r->cdf = malloc(((size_t)experts + 1) * sizeof *r->cdf);
        if (!r->cdf) {
            mp_error("out of memory");
            rc = MP_ERR_RUNTIME;
        } else {
            r->cdf[0] = 0;
            for (int e = 0; e < experts; e++)
                r->cdf[e + 1] = r->cdf[e] + r->prob[e];
        }
    }
    if (rc != MP_OK)
        mp_routing_free(r);
    return rc;
}

void mp_routing_free(struct mp_routing *r)
{
    free(r->prob);
    free(r->cdf);
    free(r->trace);
    r->prob = NULL;
    r->cdf = NULL;
    r->trace = NULL;
    r->ntrace = 0;
}

int mp_routing_is_gate(const struct mp_routing *r) { return r->kind == MP_ROUTE_GATE; }

/* ---- drawing --------------------------------------------------------------------------------- */

/* Rejected picks (an expert already chosen) after which one step falls back to an exact scan. */
#define MAX_REJECTS 32

/* Top-k by successive sampling without replacement: each pick is proportional to p among the
 * experts not yet picked (the distribution of Efraimidis & Spirakis, "Weighted random sampling with
 * a reservoir", Inf. Process. Lett. 97(5), 2006). A pick draws from the whole CDF by binary search
 * and is rejected while it hits a chosen expert, which leaves the conditional distribution exact;
 * after MAX_REJECTS it scans the remaining probabilities `prob` instead: their CDF differences can
 * round to 0 for experts far lighter than another, which would leave nothing to pick while
 * experts of positive probability remain. `cdf` and `prob` NULL mean uniform. */
static void sample_topk(const double *cdf, const double *prob, int E, int K, uint64_t seed,
                        uint64_t draw, uint64_t tok, int32_t *ids)
{
    struct mp_rng rng;
    mp_rng_seed(&rng, mp_hash4(seed ^ STREAM_KEYS, draw, tok, 0));
    double total = cdf ? cdf[E] : (double)E;
    for (int k = 0; k < K; k++) {
        int e = -1;
        for (int tries = 0; tries < MAX_REJECTS && e < 0; tries++) {
            double u = mp_rng_u01(&rng) * total;
            int c;
            if (cdf) { /* first e with cdf[e+1] > u */
                int lo = 0, hi = E - 1;
                while (lo < hi) {
                    int mid = (lo + hi) / 2;
                    if (cdf[mid + 1] > u)
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                c = lo;
            } else {
                c = (int)u < E ? (int)u : E - 1;
            }
            if (cdf && !(cdf[c + 1] > cdf[c]))
                continue; /* zero-probability expert: only rounding lands here */
            e = c;
            for (int j = 0; j < k; j++)
                if (ids[j] == c)
                    e = -1;
        }
        if (e < 0) { /* exact scan over the experts not yet chosen */
            double rest = 0;
            for (int c = 0; c < E; c++) {
                int taken = 0;
                for (int j = 0; j < k; j++)
                    taken |= ids[j] == c;
                if (!taken)
                    rest += prob ? prob[c] : 1.0;
            }
            double u = mp_rng_u01(&rng) * rest;
            for (int c = 0; c < E; c++) {
                int taken = 0;
                for (int j = 0; j < k; j++)
                    taken |= ids[j] == c;
                double p = prob ? prob[c] : 1.0;
                if (taken || !(p > 0))
                    continue;
                e = c;
                if (u < p)
                    break;
                u -= p;
            }
        }
        ids[k] = (int32_t)e;
    }
}

/* Random combine weights: g_k = 0.5 + u_k ∈ (0.5, 1.5), w_k = g_k / Σ g, so every w_k > 0. */
static void random_weights(int K, uint64_t seed, uint64_t draw, uint64_t tok, float *w)
{
    double sum = 0;
    for (int k = 0; k < K; k++)
        sum += 0.5 + mp_u01(mp_hash4(seed ^ STREAM_WEIGHTS, draw, tok, 1000 + (uint64_t)k));
    for (int k = 0; k < K; k++)
        w[k] = (float)((0.5 + mp_u01(mp_hash4(seed ^ STREAM_WEIGHTS, draw, tok,
                                               1000 + (uint64_t)k))) /
                       sum);
}

/* The M groups of one token (--group-limit): successive sampling without replacement, each pick
 * proportional to mass[g] among the groups not yet picked (uniform among the rest once only
 * massless groups remain); chosen[g] = 1 for the picked groups. */
static void pick_groups(const double *mass, int G, int M, uint64_t seed, uint64_t draw,
                        uint64_t tok, unsigned char *chosen)
{
    struct mp_rng rng;
    mp_rng_seed(&rng, mp_hash4(seed ^ STREAM_GROUPS, draw, tok, 0));
    memset(chosen, 0, (size_t)G);
    for (int m = 0; m < M; m++) {
        double rest = 0;
        int left = 0;
        for (int g = 0; g < G; g++)
            if (!chosen[g]) {
                rest += mass[g];
                left++;
            }
        double u = mp_rng_u01(&rng);
        int pick = -1;
        if (rest > 0) {
            u *= rest;
            for (int g = 0; g < G; g++) {
                if (chosen[g] || !(mass[g] > 0))
                    continue;
                pick = g;
                if (u < mass[g])
                    break;
                u -= mass[g];
            }
        } else {
            int n = (int)(u * left) < left ? (int)(u * left) : left - 1;
            for (int g = 0; g < G && pick < 0; g++)
                if (!chosen[g] && n-- == 0)
                    pick = g;
        }
        chosen[pick] = 1;
    }
}

/* mp_routing_draw with --group-limit: groups by pick_groups, then sample_topk over the experts of
 * the chosen groups (the others' probabilities set to 0; sample_topk draws against the masked
 * total, which renormalises). The masked CDF is summed in the order mp_routing_parse sums the
 * full one, so with every group chosen it is bit for bit the same. */
static void draw_grouped(const struct mp_routing *r, uint64_t seed, int draw, long tok0, long ntok,
                         int32_t *ids, float *w)
{
    int E = r->experts, K = r->topk, G = r->groups, M = r->group_pick, size = E / G;
    double *mass = malloc((size_t)G * sizeof *mass);
    double *prob = malloc((size_t)E * sizeof *prob);
    double *cdf = malloc(((size_t)E + 1) * sizeof *cdf);
    unsigned char *chosen = malloc((size_t)G);
    if (!mass || !prob || !cdf || !chosen)
        abort(); /* a few kB; the draws have no error path */
    for (int g = 0; g < G; g++) {
        mass[g] = 0;
        for (int e = g * size; e < (g + 1) * size; e++)
            mass[g] += r->prob ? r->prob[e] : 1.0;
    }
    for (long i = 0; i < ntok; i++) {
        uint64_t t = (uint64_t)(tok0 + i);
        pick_groups(mass, G, M, seed, (uint64_t)draw, t, chosen);
        cdf[0] = 0;
        for (int e = 0; e < E; e++) {
            prob[e] = chosen[e / size] ? (r->prob ? r->prob[e] : 1.0) : 0.0;
            cdf[e + 1] = cdf[e] + prob[e];
        }
        sample_topk(cdf, prob, E, K, seed, (uint64_t)draw, t, ids + i * K);
        random_weights(K, seed, (uint64_t)draw, t, w + i * K);
    }
    free(mass);
    free(prob);
    free(cdf);
    free(chosen);
}

void mp_routing_draw(const struct mp_routing *r, uint64_t seed, int draw, long batch, long tok0,
                     long ntok, int32_t *ids, float *w)
{
    int E = r->experts, K = r->topk;
    if (r->kind == MP_ROUTE_TRACE_TOKENS) {
        for (long i = 0; i < ntok; i++) {
            long long row = ((long long)draw * batch + tok0 + i) % r->ntrace;
            if (row < 0)
                row += r->ntrace;
            for (int k = 0; k < K; k++) {
                ids[i * K + k] = r->trace[row * K + k];
                w[i * K + k] = 1.0f / (float)K;
            }
        }
        return;
    }
    if (r->groups > 0) {
        draw_grouped(r, seed, draw, tok0, ntok, ids, w);
        return;
    }
    /* Gate routing has no prob: it gets uniform samples here (the backend's gate decides). */
    for (long i = 0; i < ntok; i++) {
        uint64_t t = (uint64_t)(tok0 + i);
        sample_topk(r->cdf, r->cdf ? r->prob : NULL, E, K, seed, (uint64_t)draw, t, ids + i * K);
        random_weights(K, seed, (uint64_t)draw, t, w + i * K);
    }
}

void mp_routing_gate_noise(const struct mp_routing *r, uint64_t seed, int draw, long tok0,
                           long ntok, float *noise)
{
    int E = r->experts;
    double tau = r->kind == MP_ROUTE_GATE ? r->a : 0.0;
    for (long i = 0; i < ntok; i++)
        for (int e = 0; e < E; e++) {
            float g = 0.0f;
            if (tau > 0) { /* Gumbel(0,1) by inversion: −ln(−ln u) */
                double u = mp_u01(mp_hash4(seed ^ STREAM_GUMBEL, (uint64_t)draw,
                                           (uint64_t)(tok0 + i), (uint64_t)e));
                g = (float)(tau * -log(-log(u)));
            }
            noise[i * E + e] = g;
        }
}

/* ---- --group-limit ---------------------------------------------------------------------------- */

int mp_group_limit_parse(const char *spec, int experts, int topk, int nodes, int *groups, int *pick,
                         int *inactive)
{
    *groups = *pick = *inactive = 0;
    if (!spec || !strcmp(spec, "off"))
        return MP_OK;
    const char *colon = strchr(spec, ':');
    long long G = nodes, M;
    int ok;
    if (colon) {
        char gbuf[32];
        ok = (size_t)(colon - spec) < sizeof gbuf;
        if (ok) {
            memcpy(gbuf, spec, (size_t)(colon - spec));
            gbuf[colon - spec] = '\0';
            ok = !parse_ll(gbuf, &G) && !parse_ll(colon + 1, &M);
        }
    } else {
        ok = !parse_ll(spec, &M);
    }
    if (!ok || G < 1 || M < 1) {
        mp_usage("--group-limit: '%s' is not a group limit (%s)", spec, GL_ACCEPTED);
        return MP_ERR_USAGE;
    }
    if (!colon && M >= G) { /* a token cannot reach more nodes than there are */
        *inactive = 1;
        return MP_OK;
    }
    if (G > experts || experts % G != 0) {
        if (colon)
            mp_usage("--group-limit: '%s' — G = %lld groups must divide the %d experts (%s)", spec,
                     G, experts, GL_ACCEPTED);
        else
            mp_usage("--group-limit: '%s' — the EP ranks span %lld nodes, which do not divide the "
                     "%d experts into equal groups; give G:M (%s)",
                     spec, G, experts, GL_ACCEPTED);
        return MP_ERR_USAGE;
    }
    if (M > G) {
        mp_usage("--group-limit: '%s' — M = %lld must be in 1..%lld (G) (%s)", spec, M, G,
                 GL_ACCEPTED);
        return MP_ERR_USAGE;
    }
    if (M * (experts / G) < topk) {
        mp_usage("--group-limit: '%s' — %lld group(s) of %lld experts hold fewer than the top-%d "
                 "each token routes to (M·E/G >= K is needed; %s)",
                 spec, M, experts / G, topk, GL_ACCEPTED);
        return MP_ERR_USAGE;
    }
    *groups = (int)G;
    *pick = (int)M;
    return MP_OK;
}

int mp_group_limit_check(const struct mp_routing *r, const char *spec, int groups, int pick)
{
    if (groups <= 0)
        return MP_OK;
    if (r->kind == MP_ROUTE_TRACE_TOKENS) {
        mp_usage("--group-limit %s with --routing %s: a per-token trace fixes every token's expert "
                 "ids, which cannot be limited to groups; use --group-limit off or a counts trace",
                 spec, r->spec);
        return MP_ERR_USAGE;
    }
    if (!r->prob)
        return MP_OK;
    /* the M groups with the fewest experts of positive probability must still hold top-k */
    int size = r->experts / groups, worst = 0;
    int *nz = calloc((size_t)groups, sizeof *nz);
    if (!nz) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    for (int e = 0; e < r->experts; e++)
        nz[e / size] += r->prob[e] > 0;
    for (int m = 0; m < pick; m++) { /* selection of the pick smallest counts */
        int lo = m;
        for (int g = m + 1; g < groups; g++)
            if (nz[g] < nz[lo])
                lo = g;
        int tmp = nz[m];
        nz[m] = nz[lo];
        nz[lo] = tmp;
        worst += nz[m];
    }
    free(nz);
    if (worst < r->topk) {
        mp_usage("--group-limit %s with --routing %s: %d group(s) can hold as few as %d expert(s) of "
                 "positive probability, fewer than the top-%d each token routes to; pick a larger "
                 "M or fewer groups",
                 spec, r->spec, pick, worst, r->topk);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}
