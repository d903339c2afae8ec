/* test_group_limit.c - --group-limit: the sampled draws, the gates' grouped top-k and the reference
 * keep every token within M groups, M = G changes nothing, and bad entries are refused. */
#include "check.h"
#include "error.h"
#include "reference.h"
#include "rng.h"
#include "routing.h"
#include "topk.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir[200];

/* The distinct groups (of `size` consecutive experts) token t's K ids fall in. */
static int groups_spanned(const int32_t *ids, int K, int size)
{
    int n = 0;
    for (int k = 0; k < K; k++) {
        int seen = 0;
        for (int j = 0; j < k; j++)
            seen |= ids[j] / size == ids[k] / size;
        n += !seen;
    }
    return n;
}

/* Every routing kind mp_routing_draw samples, for E = 16 experts. */
static const char *sampled_kinds(int i)
{
    static char counts[300];
    static const char *const fixed[] = {"uniform", "zipf:1.2", "hot:2:15", "lognormal:1", "gate"};
    if (i < 5)
        return fixed[i];
    if (i > 5)
        return NULL;
    snprintf(counts, sizeof counts, "%s/counts.csv", tmpdir);
    FILE *f = fopen(counts, "w");
    if (!f) {
        perror(counts);
        exit(1);
    }
    fputs("expert,count\n", f);
    for (int e = 0; e < 16; e++)
        fprintf(f, "%d,%d\n", e, 1 + (e * 7) % 11);
    fclose(f);
    memmove(counts + 6, counts, strlen(counts) + 1);
    memcpy(counts, "trace:", 6);
    return counts;
}

/* (1) No token's experts span more than M groups, for every sampled kind and several G:M; the
 * groups vary from token to token; ids and weights stay valid. */
static void test_draw_within_groups(void)
{
    enum { E = 16, K = 3, T = 300 };
    static const int gm[][2] = {{4, 1}, {4, 2}, {8, 2}, {2, 1}, {16, 3}};
    int32_t ids[T * K];
    float w[T * K];
    for (int i = 0; sampled_kinds(i); i++)
        for (size_t c = 0; c < sizeof gm / sizeof *gm; c++) {
            struct mp_routing r;
            CHECK_INT(mp_routing_parse(sampled_kinds(i), E, K, 7, &r), MP_OK);
            r.groups = gm[c][0];
            r.group_pick = gm[c][1];
            int size = E / r.groups, worst = 0, first_group = -1, varies = 0;
            for (int d = 0; d < 3; d++) {
                mp_routing_draw(&r, 7, d, T, 0, T, ids, w);
                for (int t = 0; t < T; t++) {
                    int n = groups_spanned(ids + t * K, K, size);
                    worst = n > worst ? n : worst;
                    for (int k = 0; k < K; k++) {
                        CHECK(ids[t * K + k] >= 0 && ids[t * K + k] < E);
                        for (int j = 0; j < k; j++)
                            CHECK(ids[t * K + j] != ids[t * K + k]);
                        CHECK(w[t * K + k] > 0);
                    }
                    if (first_group < 0)
                        first_group = ids[t * K] / size;
                    varies |= ids[t * K] / size != first_group;
                }
            }
            if (worst > r.group_pick)
                fprintf(stderr, "%s G:M %d:%d: a token spans %d groups\n", r.spec, r.groups,
                        r.group_pick, worst);
            CHECK(worst <= r.group_pick);
            CHECK(varies);
            mp_routing_free(&r);
        }
}

/* The groups are drawn in proportion to their mass: hot:2:15 on 16 experts puts 32/44 of the mass
 * in group 0 of 4, so with M = 1 about that share of tokens routes there. */
static void test_group_share(void)
{
    enum { E = 16, K = 2, T = 4000 };
    int32_t *ids = malloc(sizeof(int32_t) * T * K);
    float *w = malloc(sizeof(float) * T * K);
    struct mp_routing r;
    CHECK_INT(mp_routing_parse("hot:2:15", E, K, 3, &r), MP_OK);
    r.groups = 4;
    r.group_pick = 1;
    mp_routing_draw(&r, 3, 0, T, 0, T, ids, w);
    long in0 = 0;
    for (int t = 0; t < T; t++)
        in0 += ids[t * K] / 4 == 0;
    CHECK_NEAR((double)in0 / T, 32.0 / 44.0, 0.03);
    mp_routing_free(&r);
    free(ids);
    free(w);
}

/* (2) With M = G the ids and weights are bit for bit those without the limit. */
static void test_all_groups_unchanged(void)
{
    enum { E = 16, K = 3, T = 200 };
    int32_t a[T * K], b[T * K];
    float wa[T * K], wb[T * K];
    for (int i = 0; sampled_kinds(i); i++)
        for (int G = 1; G <= E; G *= 2) {
            struct mp_routing r;
            CHECK_INT(mp_routing_parse(sampled_kinds(i), E, K, 11, &r), MP_OK);
            mp_routing_draw(&r, 11, 2, T, 0, T, a, wa);
            r.groups = G;
            r.group_pick = G;
            mp_routing_draw(&r, 11, 2, T, 0, T, b, wb);
            if (memcmp(a, b, sizeof a) || memcmp(wa, wb, sizeof wa))
                fprintf(stderr, "%s G:M %d:%d differs from off\n", r.spec, G, G);
            CHECK(!memcmp(a, b, sizeof a));
            CHECK(!memcmp(wa, wb, sizeof wa));
            mp_routing_free(&r);
        }
}

/* The gate's grouped top-k on random logits: within M groups, the same as the reference gate
 * (identity gate weights, so the logits are x), the same as plain top-k when M = G; and the group
 * score is the sum of the top two, not the best expert alone. */
static void test_gate_topk(void)
{
    enum { E = 16, K = 3, T = 500 };
    float *x = malloc(sizeof(float) * T * E), *wg = calloc(E * E, sizeof(float));
    int32_t ids[K], plain[K], *rids = malloc(sizeof(int32_t) * T * K);
    float w[K], *rw = malloc(sizeof(float) * T * K);
    for (int e = 0; e < E; e++)
        wg[e * E + e] = 1.0f;
    for (int i = 0; i < T * E; i++)
        x[i] = (float)(4.0 * mp_u01(mp_hash4(5, 1, (uint64_t)i, 0)) - 2.0);
    static const int gm[][2] = {{4, 1}, {4, 2}, {8, 2}, {8, 3}, {2, 1}};
    for (size_t c = 0; c < sizeof gm / sizeof *gm; c++) {
        int G = gm[c][0], M = gm[c][1], worst = 0, same_ref = 1;
        mp_reference_gate(x, wg, NULL, T, E, E, K, G, M, rids, rw);
        for (int t = 0; t < T; t++) {
            mp_topk_select_grouped(x + t * E, E, K, G, M, ids);
            mp_topk_weights(x + t * E, K, ids, w);
            int n = groups_spanned(ids, K, E / G);
            worst = n > worst ? n : worst;
            for (int k = 0; k < K; k++) {
                same_ref &= ids[k] == rids[t * K + k];
                CHECK_NEAR(w[k], rw[t * K + k], 1e-5);
            }
            /* M = G: plain top-k */
            mp_topk_select_grouped(x + t * E, E, K, G, G, ids);
            mp_topk_select(x + t * E, E, K, plain);
            CHECK(!memcmp(ids, plain, sizeof ids));
        }
        CHECK(worst <= M);
        CHECK(same_ref);
    }
    /* group 0 holds the largest logit alone, group 1 two close seconds: top-2 sums pick group 1 */
    float l[8] = {3.0f, -10, -10, -10, 2.5f, 2.5f, -10, -10};
    mp_topk_select_grouped(l, 8, 2, 2, 1, ids);
    CHECK_INT(ids[0], 4);
    CHECK_INT(ids[1], 5);
    float xl[8];
    memcpy(xl, l, sizeof l);
    float wg8[64] = {0};
    for (int e = 0; e < 8; e++)
        wg8[e * 8 + e] = 1.0f;
    mp_reference_gate(xl, wg8, NULL, 1, 8, 8, 2, 2, 1, rids, rw);
    CHECK_INT(rids[0], 4);
    CHECK_INT(rids[1], 5);
    free(x);
    free(wg);
    free(rids);
    free(rw);
}

/* (3) Bad entries are refused as usage errors; good ones give G and M. */
static void test_parse(void)
{
    int G, M, inactive;
    static const char *const bad[] = {"", "x", "0:1", "3:1", "4:0", "4:5", "4:", ":2", "4:2:1",
                                      "-2", "4:1x", "32:1", "on", "4:1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = mp_group_limit_parse(bad[i], 16, 5, 2, &G, &M, &inactive);
        if (rc != MP_ERR_USAGE)
            fprintf(stderr, "--group-limit '%s' accepted\n", bad[i]);
        CHECK_INT(rc, MP_ERR_USAGE); /* "4:1": 1 group of 4 experts < top-5 */
    }
    CHECK_INT(mp_group_limit_parse("1", 16, 2, 3, &G, &M, &inactive), MP_ERR_USAGE); /* 3 ∤ 16 */
    CHECK_INT(mp_group_limit_parse("off", 16, 2, 2, &G, &M, &inactive), MP_OK);
    CHECK(G == 0 && M == 0 && !inactive);
    CHECK_INT(mp_group_limit_parse("4:2", 16, 2, 1, &G, &M, &inactive), MP_OK);
    CHECK(G == 4 && M == 2 && !inactive);
    CHECK_INT(mp_group_limit_parse("2", 16, 2, 4, &G, &M, &inactive), MP_OK); /* G = 4 nodes */
    CHECK(G == 4 && M == 2 && !inactive);
    CHECK_INT(mp_group_limit_parse("2", 16, 2, 2, &G, &M, &inactive), MP_OK); /* cannot bind */
    CHECK(G == 0 && M == 0 && inactive);
    CHECK_INT(mp_group_limit_parse("1", 16, 2, 1, &G, &M, &inactive), MP_OK); /* one node */
    CHECK(G == 0 && inactive);

    /* a per-token trace cannot be limited; a counts trace whose groups hold too few experts of
     * positive probability cannot either */
    struct mp_routing r;
    char path[300], spec[310];
    snprintf(path, sizeof path, "%s/tokens.csv", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("token,expert0,expert1\n0,0,5\n1,3,7\n", f);
    fclose(f);
    snprintf(spec, sizeof spec, "trace:%s", path);
    CHECK_INT(mp_routing_parse(spec, 8, 2, 1, &r), MP_OK);
    CHECK_INT(mp_group_limit_check(&r, "2:1", 2, 1), MP_ERR_USAGE);
    CHECK_INT(mp_group_limit_check(&r, "off", 0, 0), MP_OK);
    mp_routing_free(&r);
    snprintf(path, sizeof path, "%s/sparse.csv", tmpdir);
    f = fopen(path, "w");
    fputs("expert,count\n0,5\n1,4\n4,3\n", f); /* group 1 of 2 (experts 4..7) has one */
    fclose(f);
    snprintf(spec, sizeof spec, "trace:%s", path);
    CHECK_INT(mp_routing_parse(spec, 8, 2, 1, &r), MP_OK);
    CHECK_INT(mp_group_limit_check(&r, "2:1", 2, 1), MP_ERR_USAGE);
    CHECK_INT(mp_group_limit_check(&r, "2:2", 2, 2), MP_OK);
    mp_routing_free(&r);
}

int main(void)
{
    check_tmpdir(tmpdir, sizeof tmpdir, "mp_group_limit");
    mp_log_init("test_group_limit", -1);
    test_draw_within_groups();
    test_group_share();
    test_all_groups_unchanged();
    test_gate_topk();
    test_parse();
    static const char *const files[] = {"counts.csv", "tokens.csv", "sparse.csv", NULL};
    check_tmpdir_remove(tmpdir, files);
    CHECK_DONE();
}
