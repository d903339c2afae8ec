/* test_plan_share.c - the planner's evaluation shares one traffic between candidates that differ
 * in their weight and dispatch dtypes alone: a sweep of dtype lists against a sweep of each dtype
 * pair alone, candidate by candidate to the bit (every dedup form, pipelined and not, two
 * micro-batches, replicated placements, and expert caches that fit one weight dtype and not the
 * other); and its placement and remedies labels against the snprintf chains they stand for, at
 * every buffer length. */
#include <stdlib.h>

#include "capacity_plan.h"
#include "check.h"
#include "dedup.h"
#include "dtype.h"
#include "error.h"

/* The placement label as one snprintf writes it. */
static void placement_ref(const struct mp_plan_cand *c, char *buf, size_t len)
{
    if (c->eplb > 0)
        snprintf(buf, len, "eplb:%d", c->eplb);
    else if (c->replicate > 0)
        snprintf(buf, len, "replicate-hot:%d", c->replicate);
    else
        snprintf(buf, len, "contiguous");
}

/* The remedies label as a chain of snprintf calls writes it. */
static void remedy_ref(const struct mp_plan_cand *c, char *buf, size_t len)
{
    char pl[32], ovl[32], dd[32];
    placement_ref(c, pl, sizeof pl);
    const char *part[6] = {c->replicate > 0 || c->eplb > 0 ? pl : NULL};
    if (c->overlap > 1) {
        snprintf(ovl, sizeof ovl, "overlap %d", c->overlap);
        part[1] = ovl;
    }
    if (c->dedup != MP_DEDUP_PAIR) {
        snprintf(dd, sizeof dd, "dedup %s", mp_dedup_choices[c->dedup]);
        part[2] = dd;
    }
    part[3] = c->weight_dtype == MP_DTYPE_FP8 ? "fp8 weights" : NULL;
    part[4] = c->dispatch_dtype == MP_DTYPE_FP8 ? "fp8 dispatch" : NULL;
    part[5] = c->micro_batches > 1 ? "two micro-batches" : NULL;
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < 6; i++)
        if (part[i] && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? " + " : "", part[i]);
    if (!used)
        snprintf(buf, len, "%s", pl);
}

/* Every label of a range of candidates at every length from 0 to 90 bytes, asked for in an
 * order that revisits labels worked out before (the labels' table of recent ones). */
static void labels(void)
{
    static const int reps[] = {0, 2, 16, 123456789}, eplbs[] = {0, 6, 40}, ovls[] = {0, 1, 2, 32};
    int checked = 0;
    for (int round = 0; round < 2; round++)
        for (int v = 0; v < 4 * 3 * 4 * 3 * 2 * 2 * 2; v++) {
            int u = round ? v * 37 % (4 * 3 * 4 * 3 * 2 * 2 * 2) : v;
            struct mp_plan_cand c = {.replicate = reps[u % 4], .eplb = eplbs[u / 4 % 3],
                                     .overlap = ovls[u / 12 % 4], .dedup = u / 48 % 3,
                                     .weight_dtype = u / 144 % 2 ? MP_DTYPE_FP8 : MP_DTYPE_BF16,
                                     .dispatch_dtype = u / 288 % 2 ? MP_DTYPE_FP8
                                                                   : MP_DTYPE_BF16,
                                     .micro_batches = 1 + u / 576 % 2};
            for (size_t len = 0; len <= 90; len++) {
                char got[96], want[96];
                memset(got, 'x', sizeof got);
                memset(want, 'x', sizeof want);
                mp_plan_remedy(&c, got, len);
                remedy_ref(&c, want, len);
                memset(got, 'x', sizeof got);
                memset(want, 'x', sizeof want);
                mp_plan_remedy(&c, got, len);
                remedy_ref(&c, want, len);
                if (memcmp(got, want, sizeof got) != 0) {
                    fprintf(stderr, "remedies of case %d in %zu bytes: \"%.*s\", expected "
                            "\"%.*s\"\n", u, len, (int)len, got, (int)len, want);
                    check_failures++;
                }
                memset(got, 'x', sizeof got);
                memset(want, 'x', sizeof want);
                mp_plan_placement(&c, got, len);
                placement_ref(&c, want, len);
                CHECK(memcmp(got, want, sizeof got) == 0);
                checked++;
            }
        }
    CHECK(checked > 100000);
}

/* The request of the sweeps: deepseek-v3 on h100-ndr, layouts too small for its weights in bf16
 * (whose expert caches differ with the weight dtype) and large enough for them in fp8. */
static void request(struct mp_plan_req *q, const struct mp_routing *rt)
{
    static const long batches[] = {1, 24, 128};
    static const int tps[] = {1, 4}, eps[] = {8, 16}, reps[] = {0, 2}, eplbs[] = {24};
    static const int ovl[] = {1, 2}, dds[] = {MP_DEDUP_PAIR, MP_DEDUP_RANK, MP_DEDUP_NODE};
    static const int mbs[] = {1, 2};
    q->routing = rt;
    q->batches = batches;
    q->nbatch = 3;
    q->seq = 1;
    q->tps = tps;
    q->ntp = 2;
    q->eps = eps;
    q->nep = 2;
    q->reps = reps;
    q->nrep = 2;
    q->eplbs = eplbs;
    q->neplb = 1;
    q->overlaps = ovl;
    q->noverlap = 2;
    q->dedups = dds;
    q->ndedup = 3;
    q->micro_batches = mbs;
    q->nmicro = 2;
    q->max_gpus = 4096;
    q->iters = 6;
    q->seed = 3;
    q->context = 4096;
    q->weight_bytes = MP_BF16_BYTES;
    q->kv_bytes = MP_BF16_BYTES;
    q->mem_reserve = q->cluster.mem_reserve;
    q->offload = 1;
    q->offload_policy = MP_CACHE_LRU;
}

/* Candidate a against b field by field: the same bytes (both evaluations zero their arrays). */
static void same_cand(const struct mp_plan_cand *a, const struct mp_plan_cand *b, int i)
{
    if (memcmp(a, b, sizeof *a) != 0) {
        fprintf(stderr, "candidate %d (tp%d ep%d R%d eplb %d overlap %d dedup %d weights %d "
                "dispatch %d micro %d batch %ld cache %d): shared %.17g us, alone %.17g us\n", i,
                a->tp, a->ep, a->replicate, a->eplb, a->overlap, a->dedup, a->weight_dtype,
                a->dispatch_dtype, a->micro_batches, a->batch, a->cache_slots, a->layer_us,
                b->layer_us);
        check_failures++;
    }
}

/* The sweep of both weight and both dispatch dtypes against the four sweeps of one of each. */
static void shared_sweep(void)
{
    static const int wd[] = {MP_DTYPE_BF16, MP_DTYPE_FP8}, dd[] = {MP_DTYPE_BF16, MP_DTYPE_FP8};
    struct mp_plan_req q = {0};
    struct mp_routing rt;
    CHECK_INT(mp_model_resolve("deepseek-v3", &q.model), MP_OK);
    CHECK_INT(mp_cluster_resolve("h100-ndr", &q.cluster), MP_OK);
    CHECK_INT(mp_routing_parse("hot:8:10", q.model.experts, q.model.topk, 3, &rt), MP_OK);
    request(&q, &rt);
    q.wdtypes = wd;
    q.ddtypes = dd;
    q.nwdtype = q.nddtype = 2;
    struct mp_plan_cand *all = NULL, *one[2][2] = {{NULL}};
    int n = 0, m[2][2] = {{0}}, cached = 0;
    CHECK_INT(mp_plan_evaluate(&q, &all, &n), MP_OK);
    for (int v = 0; v < 2; v++)
        for (int u = 0; u < 2; u++) {
            q.wdtypes = &wd[v];
            q.ddtypes = &dd[u];
            q.nwdtype = q.nddtype = 1;
            CHECK_INT(mp_plan_evaluate(&q, &one[v][u], &m[v][u]), MP_OK);
            CHECK_INT(4 * m[v][u], n);
        }
    /* in a placement's block of candidates (overlap, dedup, weight dtype, dispatch dtype, micro-
     * batches, batch; the last fastest) the sweeps of one pair drop the two dtype loops */
    int nb = q.nbatch, nmb = q.nmicro, per1 = q.noverlap * q.ndedup * nmb * nb;
    for (int i = 0; i < n && all && m[1][1] * 4 == n; i++) {
        int g = i / (4 * per1), r = i % (4 * per1), b = r % nb, s = r / nb % (2 * nmb);
        int v = r / nb / (2 * nmb) % 2, ox = r / nb / (2 * nmb) / 2, u = s / nmb, mb = s % nmb;
        same_cand(&all[i], &one[v][u][g * per1 + (ox * nmb + mb) * nb + b], i);
        cached += all[i].cache_slots > 0;
    }
    CHECK(n > 1000);
    CHECK(cached > 0); /* expert caches, whose traffic is the weight dtype's own */
    printf("%d candidates shared against alone, %d with an expert cache\n", n, cached);
    free(all);
    for (int v = 0; v < 2; v++)
        for (int u = 0; u < 2; u++)
            free(one[v][u]);
    mp_routing_free(&rt);
}

int main(void)
{
    labels();
    shared_sweep();
    CHECK_DONE();
}
