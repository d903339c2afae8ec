/* test_routing.c - routing specs, traces, top-k sampling statistics, determinism and gate noise. */
#include "check.h"
#include "error.h"
#include "rng.h"
#include "routing.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir[200];

/* Write `text` to tmpdir/name and return the path (static buffer, one at a time). */
static const char *write_file(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    return path;
}

static int parse_trace(const char *name, const char *text, int experts, int topk,
                       struct mp_routing *r)
{
    char spec[300];
    snprintf(spec, sizeof spec, "trace:%s", write_file(name, text));
    return mp_routing_parse(spec, experts, topk, 1, r);
}

/* Exact inclusion probabilities of sequential weighted sampling without replacement (which
 * Efraimidis-Spirakis keys reproduce), by enumerating every ordered selection of `left` more
 * experts: P(sequence) = Π p_s / (1 − Σ earlier p). Adds P(sequence) into incl[e] for its members
 * and into first[s0] for its first pick. */
static void enumerate(const double *p, int E, int left, double mass_used, double pr, int *used,
                      int depth, double *incl, double *first)
{
    if (left == 0)
        return;
    for (int e = 0; e < E; e++) {
        if (used[e] || p[e] <= 0)
            continue;
        double q = pr * p[e] / (1.0 - mass_used);
        incl[e] += q;
        if (depth == 0)
            first[e] += q;
        used[e] = 1;
        enumerate(p, E, left - 1, mass_used + p[e], q, used, depth + 1, incl, first);
        used[e] = 0;
    }
}

/* Sample `ntok` tokens and compare each expert's inclusion count and first-position count with the
 * exact expectation: |count − N·π| <= 6·sqrt(N·π(1−π)) (a six-sigma bound on a binomial count). */
static void check_frequencies(const struct mp_routing *r, long ntok)
{
    int E = r->experts, K = r->topk;
    int32_t *ids = malloc((size_t)ntok * K * sizeof *ids);
    float *w = malloc((size_t)ntok * K * sizeof *w);
    double incl[64] = {0}, first[64] = {0}, want_incl[64] = {0}, want_first[64] = {0};
    int used[64] = {0};
    if (!ids || !w || E > 64) {
        CHECK(0);
        free(ids);
        free(w);
        return;
    }
    enumerate(r->prob, E, K, 0.0, 1.0, used, 0, want_incl, want_first);
    mp_routing_draw(r, 7, 3, ntok, 0, ntok, ids, w);
    for (long t = 0; t < ntok; t++) {
        first[ids[t * K]] += 1;
        for (int k = 0; k < K; k++)
            incl[ids[t * K + k]] += 1;
    }
    double sum_incl = 0;
    for (int e = 0; e < E; e++) {
        double pi = want_incl[e], pf = want_first[e];
        sum_incl += pi;
        CHECK(fabs(incl[e] - ntok * pi) <= 6 * sqrt(ntok * pi * (1 - pi)) + 1e-9);
        CHECK(fabs(first[e] - ntok * pf) <= 6 * sqrt(ntok * pf * (1 - pf)) + 1e-9);
        CHECK_NEAR(pf, r->prob[e], 1e-12); /* the first pick is distributed as p itself */
    }
    CHECK_NEAR(sum_incl, K, 1e-12);
    free(ids);
    free(w);
}

/* ids distinct and in range, weights positive and summing to 1 per token. */
static void check_draw_valid(const struct mp_routing *r, const int32_t *ids, const float *w,
                             long ntok)
{
    int K = r->topk;
    for (long t = 0; t < ntok; t++) {
        double s = 0;
        for (int k = 0; k < K; k++) {
            CHECK(ids[t * K + k] >= 0 && ids[t * K + k] < r->experts);
            for (int j = 0; j < k; j++)
                CHECK(ids[t * K + j] != ids[t * K + k]);
            CHECK(w[t * K + k] > 0);
            s += w[t * K + k];
        }
        CHECK(fabs(s - 1.0) <= 1e-6);
    }
}

static void test_determinism(void)
{
    struct mp_routing r;
    enum { B = 32, K = 4 };
    int32_t a[B * K], b[B * K], c[5 * K];
    float wa[B * K], wb[B * K], wc[5 * K];
    CHECK_INT(mp_routing_parse("zipf:1.1", 64, K, 42, &r), MP_OK);
    CHECK_INT(r.kind, MP_ROUTE_ZIPF);
    CHECK_STR(r.spec, "zipf:1.1");
    CHECK_INT(mp_routing_is_gate(&r), 0);
    mp_routing_draw(&r, 42, 5, B, 0, B, a, wa);
    mp_routing_draw(&r, 42, 5, B, 0, B, b, wb);
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(!memcmp(wa, wb, sizeof wa));
    check_draw_valid(&r, a, wa, B);
    mp_routing_draw(&r, 42, 5, B, 5, 5, c, wc);
    CHECK(!memcmp(c, a + 5 * K, sizeof c));
    CHECK(!memcmp(wc, wa + 5 * K, sizeof wc));
    mp_routing_draw(&r, 42, 6, B, 0, B, b, wb); /* another draw differs */
    CHECK(memcmp(a, b, sizeof a) != 0);
    CHECK(memcmp(wa, wb, sizeof wa) != 0);
    mp_routing_draw(&r, 43, 5, B, 0, B, b, wb); /* another seed differs */
    CHECK(memcmp(a, b, sizeof a) != 0);
    mp_routing_free(&r);
    CHECK(r.prob == NULL);

    /* K = E: every expert once per token */
    CHECK_INT(mp_routing_parse("uniform", 5, 5, 1, &r), MP_OK);
    mp_routing_draw(&r, 1, 0, 10, 0, 10, a, wa);
    check_draw_valid(&r, a, wa, 10);
    mp_routing_free(&r);
}

static void test_uniform(void)
{
    struct mp_routing r;
    CHECK_INT(mp_routing_parse("uniform", 16, 4, 9, &r), MP_OK);
    CHECK_INT(r.kind, MP_ROUTE_UNIFORM);
    for (int e = 0; e < 16; e++)
        CHECK_NEAR(r.prob[e], 1.0 / 16, 1e-15);
    check_frequencies(&r, 100000); /* inclusion K/E = 1/4 for every expert */

    /* hot with N = experts is uniform */
    struct mp_routing h;
    CHECK_INT(mp_routing_parse("hot:16:15", 16, 4, 9, &h), MP_OK);
    for (int e = 0; e < 16; e++)
        CHECK(h.prob[e] == r.prob[e]);
    mp_routing_free(&h);
    mp_routing_free(&r);
}

static void test_hot(void)
{
    struct mp_routing r;
    CHECK_INT(mp_routing_parse("hot:2:15", 8, 2, 9, &r), MP_OK);
    CHECK_INT(r.kind, MP_ROUTE_HOT);
    CHECK_NEAR(r.a, 2, 0);
    CHECK_NEAR(r.b, 15, 0);
    /* weights 15,15,1×6 over 36 */
    for (int e = 0; e < 8; e++)
        CHECK_NEAR(r.prob[e], (e < 2 ? 15.0 : 1.0) / 36, 1e-15);
    /* by hand: P(hot 0 chosen) = P(first) + P(hot 1 first)·15/21 + P(a cold one first)·15/35
     * = 15/36 + 15/36·15/21 + 6/36·15/35 = 11/14 */
    double p_hot = 15.0 / 36 + 15.0 / 36 * 15.0 / 21 + 6.0 / 36 * 15.0 / 35;
    CHECK_NEAR(p_hot, 11.0 / 14, 1e-12);
    double incl[8] = {0}, first[8] = {0};
    int used[8] = {0};
    enumerate(r.prob, 8, 2, 0.0, 1.0, used, 0, incl, first);
    CHECK_NEAR(incl[0], p_hot, 1e-12);
    CHECK_NEAR(incl[1], p_hot, 1e-12);
    CHECK_NEAR(incl[5], (2 - 2 * p_hot) / 6, 1e-12);
    check_frequencies(&r, 200000);
    enum { N = 20000 };
    int32_t *ids = malloc(N * 2 * sizeof *ids);
    float *w = malloc(N * 2 * sizeof *w);
    if (ids && w) {
        long cnt[8] = {0};
        mp_routing_draw(&r, 11, 0, N, 0, N, ids, w);
        for (int i = 0; i < N * 2; i++)
            cnt[ids[i]]++;
        for (int c = 2; c < 8; c++) /* the hot share is ~10× each cold one */
            CHECK(cnt[0] > 5 * cnt[c] && cnt[1] > 5 * cnt[c]);
        CHECK(fabs(cnt[0] / (double)N - p_hot) < 0.02);
    }
    free(ids);
    free(w);
    mp_routing_free(&r);
}

static void test_zipf(void)
{
    struct mp_routing r;
    CHECK_INT(mp_routing_parse("zipf:1.2", 12, 2, 3, &r), MP_OK);
    double h = 0;
    for (int e = 0; e < 12; e++)
        h += pow(e + 1.0, -1.2);
    for (int e = 0; e < 12; e++) {
        CHECK_NEAR(r.prob[e], pow(e + 1.0, -1.2) / h, 1e-13);
        if (e)
            CHECK(r.prob[e] < r.prob[e - 1]);
    }
    check_frequencies(&r, 100000);
    enum { N = 50000 };
    static int32_t ids[N * 2];
    static float w[N * 2];
    long cnt[12] = {0};
    mp_routing_draw(&r, 3, 1, N, 0, N, ids, w);
    for (int i = 0; i < N * 2; i++)
        cnt[ids[i]]++;
    CHECK(cnt[0] > cnt[1] && cnt[1] > cnt[2] && cnt[2] > cnt[4] && cnt[4] > cnt[11]);
    mp_routing_free(&r);

    /* extreme skew leaving fewer than K experts representable is refused */
    CHECK_INT(mp_routing_parse("zipf:5000", 12, 2, 3, &r), MP_ERR_USAGE);
}

static void test_lognormal(void)
{
    struct mp_routing r, s, t;
    CHECK_INT(mp_routing_parse("lognormal:1.5", 32, 4, 77, &r), MP_OK);
    CHECK_INT(mp_routing_parse("lognormal:1.5", 32, 4, 77, &s), MP_OK);
    CHECK_INT(mp_routing_parse("lognormal:1.5", 32, 4, 78, &t), MP_OK);
    double sum = 0;
    int same = 1, differ = 0;
    for (int e = 0; e < 32; e++) {
        sum += r.prob[e];
        same &= r.prob[e] == s.prob[e];
        differ |= r.prob[e] != t.prob[e];
        /* p_e / p_0 = exp(SIGMA·(z_e − z_0)) with z from the documented hash stream */
        double ze = mp_normal(mp_hash4(77, 0x4c4e, e, 1), mp_hash4(77, 0x4c4e, e, 2));
        double z0 = mp_normal(mp_hash4(77, 0x4c4e, 0, 1), mp_hash4(77, 0x4c4e, 0, 2));
        CHECK_NEAR(r.prob[e] / r.prob[0], exp(1.5 * (ze - z0)), 1e-12);
    }
    CHECK_NEAR(sum, 1.0, 1e-12);
    CHECK(same);
    CHECK(differ);
    mp_routing_free(&r);
    mp_routing_free(&s);
    mp_routing_free(&t);
    CHECK_INT(mp_routing_parse("lognormal:0", 10, 3, 5, &r), MP_OK);
    for (int e = 0; e < 10; e++)
        CHECK_NEAR(r.prob[e], 0.1, 1e-15);
    mp_routing_free(&r);
}

static void test_parse_errors(void)
{
    static const char *bad[] = {
        "",           "foo",        "uniform:1",  "zipf",        "zipf:",         "zipf:abc",
        "zipf:0",     "zipf:-1",    "zipf:nan",   "zipf:1x",     "hot",           "hot:2",
        "hot:2:",     "hot:0:2",    "hot:9:2",    "hot:2:0.5",   "hot:1.5:2",     "hot:a:2",
        "hot:2:inf",  "lognormal",  "lognormal:", "lognormal:-1", "gate:",        "gate:-0.5",
        "gate:x",     "trace",      "trace:",     "Uniform",     "zipf:1:2",
    };
    struct mp_routing r;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = mp_routing_parse(bad[i], 8, 2, 1, &r);
        if (rc != MP_ERR_USAGE)
            fprintf(stderr, "spec '%s' accepted\n", bad[i]);
        CHECK_INT(rc, MP_ERR_USAGE);
        CHECK(r.prob == NULL && r.trace == NULL);
    }
    CHECK_INT(mp_routing_parse("uniform", 8, 9, 1, &r), MP_ERR_USAGE); /* top-k > experts */
    CHECK_INT(mp_routing_parse("uniform", 8, 0, 1, &r), MP_ERR_USAGE);
    char path[300];
    snprintf(path, sizeof path, "trace:%s/does-not-exist.csv", tmpdir);
    CHECK_INT(mp_routing_parse(path, 8, 2, 1, &r), MP_ERR_USAGE);
    CHECK_INT(mp_routing_parse("hot:8:1", 8, 2, 1, &r), MP_OK);
    mp_routing_free(&r);
    CHECK_INT(mp_routing_parse("zipf:1e-3", 8, 2, 1, &r), MP_OK);
    mp_routing_free(&r);
}

static void test_gate(void)
{
    struct mp_routing r;
    enum { T = 2000, E = 64 };
    static float noise[T * E], part[10 * E];
    CHECK_INT(mp_routing_parse("gate", E, 4, 1, &r), MP_OK);
    CHECK_INT(mp_routing_is_gate(&r), 1);
    CHECK(r.prob == NULL);
    CHECK_NEAR(r.a, 0, 0);
    noise[5] = 1.0f;
    mp_routing_gate_noise(&r, 1, 0, 0, T, noise);
    int zero = 1;
    for (long i = 0; i < (long)T * E; i++)
        zero &= noise[i] == 0.0f;
    CHECK(zero);
    mp_routing_free(&r);

    CHECK_INT(mp_routing_parse("gate:2", E, 4, 1, &r), MP_OK);
    CHECK_NEAR(r.a, 2, 0);
    mp_routing_gate_noise(&r, 1, 3, 0, T, noise);
    double sum = 0, sq = 0;
    for (long i = 0; i < (long)T * E; i++) {
        sum += noise[i];
        sq += (double)noise[i] * noise[i];
    }
    double n = (double)T * E, mean = sum / n, var = sq / n - mean * mean;
    /* Gumbel(0,1): mean γ = 0.5772, variance π²/6; scaled by TAU = 2. Standard error of the
     * mean is 2·1.28/sqrt(128000) = 0.0072, so 0.05 is a seven-sigma bound. */
    CHECK(fabs(mean - 2 * 0.5772156649) < 0.05);
    CHECK(fabs(var - 4 * 1.6449340668) < 0.25);
    mp_routing_gate_noise(&r, 1, 3, 100, 10, part);
    CHECK(!memcmp(part, noise + 100 * E, sizeof part));
    mp_routing_gate_noise(&r, 1, 4, 100, 10, part);
    CHECK(memcmp(part, noise + 100 * E, sizeof part) != 0);
    mp_routing_free(&r);
}

static void test_trace_counts(void)
{
    struct mp_routing r;
    CHECK_INT(parse_trace("counts.csv",
                          "# recorded counts\n"
                          "expert,count\n"
                          "0,30\n"
                          "\n"
                          "# expert 1 never chosen\n"
                          "2,10\r\n"
                          " 5 , 60\n"
                          "7,0\n",
                          8, 2, &r),
              MP_OK);
    CHECK_INT(r.kind, MP_ROUTE_TRACE_COUNTS);
    static const double want[8] = {0.3, 0, 0.1, 0, 0, 0.6, 0, 0};
    for (int e = 0; e < 8; e++)
        CHECK_NEAR(r.prob[e], want[e], 1e-15);
    check_frequencies(&r, 100000);
    enum { N = 1000 };
    static int32_t ids[N * 2];
    static float w[N * 2];
    mp_routing_draw(&r, 2, 0, N, 0, N, ids, w);
    check_draw_valid(&r, ids, w, N);
    for (int i = 0; i < N * 2; i++)
        CHECK(ids[i] == 0 || ids[i] == 2 || ids[i] == 5);
    mp_routing_free(&r);

    /* exactly K non-zero experts: both chosen for every token */
    CHECK_INT(parse_trace("two.csv", "expert,count\n3,1\n6,1000\n", 8, 2, &r), MP_OK);
    mp_routing_draw(&r, 2, 0, N, 0, N, ids, w);
    for (int t = 0; t < N; t++)
        CHECK((ids[2 * t] == 3 && ids[2 * t + 1] == 6) || (ids[2 * t] == 6 && ids[2 * t + 1] == 3));
    mp_routing_free(&r);

    /* exactly K non-zero experts, two of them so light next to the third that their CDF steps
     * round to 0: still all three for every token (found by fuzzing) */
    CHECK_INT(parse_trace("range.csv", "expert,count\n5,50\n1,2\n2,2749598205602693120\n", 12, 3,
                          &r),
              MP_OK);
    mp_routing_draw(&r, 7, 2, N / 3, 0, N / 3, ids, w);
    for (int t = 0; t < N / 3; t++) {
        int seen = 0;
        for (int k = 0; k < 3; k++)
            seen |= ids[3 * t + k] == 1 ? 1 : ids[3 * t + k] == 2 ? 2 : ids[3 * t + k] == 5 ? 4 : 8;
        CHECK_INT(seen, 7);
    }
    mp_routing_free(&r);
}

static void test_trace_tokens(void)
{
    struct mp_routing r;
    CHECK_INT(parse_trace("tokens.csv",
                          "# three tokens, top-2\n"
                          "token,expert0,expert1\n"
                          "0,1,2\n"
                          "1,3,0\n"
                          "# a comment between rows\n"
                          "2,2,3\n",
                          4, 2, &r),
              MP_OK);
    CHECK_INT(r.kind, MP_ROUTE_TRACE_TOKENS);
    CHECK_INT(r.ntrace, 3);
    /* frequencies: expert 0 once, 1 once, 2 twice, 3 twice, over 6 */
    CHECK_NEAR(r.prob[0], 1.0 / 6, 1e-15);
    CHECK_NEAR(r.prob[1], 1.0 / 6, 1e-15);
    CHECK_NEAR(r.prob[2], 2.0 / 6, 1e-15);
    CHECK_NEAR(r.prob[3], 2.0 / 6, 1e-15);
    static const int32_t rows[3][2] = {{1, 2}, {3, 0}, {2, 3}};
    int32_t ids[8];
    float w[8];
    /* batch 4: draw 0 uses rows 0 1 2 0, draw 1 rows 1 2 0 1 */
    static const int want0[4] = {0, 1, 2, 0}, want1[4] = {1, 2, 0, 1};
    mp_routing_draw(&r, 9, 0, 4, 0, 4, ids, w);
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 2; k++) {
            CHECK_INT(ids[t * 2 + k], rows[want0[t]][k]);
            CHECK(w[t * 2 + k] == 0.5f);
        }
    mp_routing_draw(&r, 9, 1, 4, 0, 4, ids, w);
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 2; k++)
            CHECK_INT(ids[t * 2 + k], rows[want1[t]][k]);
    mp_routing_draw(&r, 9, 1, 4, 2, 2, ids, w); /* slice: tokens 2,3 of draw 1 → rows 0, 1 */
    CHECK_INT(ids[0], 1);
    CHECK_INT(ids[3], 0);
    mp_routing_free(&r);
}

static void test_trace_errors(void)
{
    static const struct {
        const char *text;
        int topk;
    } bad[] = {
        {"token,expert0,expert1,expert2\n0,1,2,3\n", 8},       /* 3 columns for top-8 */
        {"token,expert0,expert1,expert2\n0,1,2,3\n", 2},       /* 3 columns for top-2 */
        {"token,expert0,expert1\n0,1,8\n", 2},                 /* id out of range (E = 8) */
        {"token,expert0,expert1\n0,1,-1\n", 2},                /* negative id */
        {"token,expert0,expert1\n0,3,3\n", 2},                 /* repeated id in a token */
        {"token,expert0,expert1\n0,1\n", 2},                   /* short row */
        {"token,expert0,expert1\n0,1,2,3\n", 2},               /* long row */
        {"token,expert0,expert1\nx,1,2\n", 2},                 /* token not an integer */
        {"token,expert0,expert1\n0,1,2.5\n", 2},               /* id not an integer */
        {"token,expert0,expert1\n", 2},                        /* no rows */
        {"token,expertA,expert1\n0,1,2\n", 2},                 /* bad header */
        {"id,count\n0,1\n", 2},                                /* bad header */
        {"", 2},                                               /* empty */
        {"# only a comment\n", 2},                             /* empty */
        {"expert,count\n0,5\n", 2},                            /* 1 non-zero expert < K */
        {"expert,count\n0,5\n1,0\n", 2},                       /* idem */
        {"expert,count\n0,0\n1,0\n", 2},                       /* total 0 */
        {"expert,count\n8,5\n1,5\n", 2},                       /* id out of range */
        {"expert,count\n0,-5\n1,5\n", 2},                      /* negative count */
        {"expert,count\n0,1.5\n1,5\n", 2},                     /* count not an integer */
        {"expert,count\n0,1\n1,5\n0,2\n", 2},                  /* expert listed twice */
        {"expert,count\n0,1,2\n1,5\n", 2},                     /* extra field */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct mp_routing r;
        int rc = parse_trace("bad.csv", bad[i].text, 8, bad[i].topk, &r);
        if (rc != MP_ERR_USAGE)
            fprintf(stderr, "bad trace %zu accepted\n", i);
        CHECK_INT(rc, MP_ERR_USAGE);
        CHECK(r.prob == NULL && r.trace == NULL);
    }
}

int main(void)
{
    mp_log_init("test_routing", -1);
    check_tmpdir(tmpdir, sizeof tmpdir, "test_routing");
    test_determinism();
    test_uniform();
    test_hot();
    test_zipf();
    test_lognormal();
    test_parse_errors();
    test_gate();
    test_trace_counts();
    test_trace_tokens();
    test_trace_errors();
    static const char *const files[] = {"counts.csv", "two.csv", "tokens.csv", "bad.csv",
                                        "range.csv", NULL};
    check_tmpdir_remove(tmpdir, files);
    CHECK_DONE();
}
