/* test_plan_share.c - the planner's evaluation shares one traffic between candidates that differ
 * in their weight and dispatch dtypes alone: a sweep of dtype lists against a sweep of each dtype
 * pair alone, candidate by candidate to the bit (every dedup form, pipelined and not, two
 * micro-batches, replicated placements, and expert caches that fit one weight dtype and not the
 * other). */
#include <stdlib.h>

#include "capacity_plan.h"
#include "check.h"
#include "dedup.h"
#include "dtype.h"
#include "error.h"

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
    shared_sweep();
    CHECK_DONE();
}
