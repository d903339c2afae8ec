/* test_memplan.c - the planner's memory per GPU against hand computations from the models' published
 * figures: three presets and layouts (one with hot-expert replicas, one with eplb slots), the
 * component that overflows, and that a candidate which does not fit is never chosen. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "error.h"
#include "capacity_plan.h"

/* One candidate of `model` on h100-ndr (80 GB, 10% reserve) at one layout, placement and batch. */
static int plan_one(const char *model, const char *routing, int tp, int ep, int replicate,
                    int eplb, long batch, long context, enum mp_nonexpert_split split,
                    struct mp_plan_cand *out)
{
    struct mp_plan_req q = {0};
    struct mp_routing rt;
    if (mp_model_resolve(model, &q.model) != MP_OK ||
        mp_cluster_resolve("h100-ndr", &q.cluster) != MP_OK ||
        mp_routing_parse(routing, q.model.experts, q.model.topk, 1, &rt) != MP_OK)
        return -1;
    long batches[] = {batch};
    int tps[] = {tp}, eps[] = {ep}, reps[] = {replicate}, eplbs[] = {eplb};
    q.routing = &rt;
    q.batches = batches;
    q.nbatch = 1;
    q.seq = 1;
    q.tps = tps;
    q.ntp = 1;
    q.eps = eps;
    q.nep = 1;
    if (eplb > 0) {
        q.eplbs = eplbs;
        q.neplb = 1;
    } else {
        q.reps = reps;
        q.nrep = 1;
    }
    q.throughput = 0;
    q.max_gpus = 4096;
    q.iters = 1;
    q.seed = 1;
    q.context = context;
    q.weight_bytes = MP_BF16_BYTES;
    q.kv_bytes = MP_BF16_BYTES;
    q.mem_reserve = q.cluster.mem_reserve;
    q.nonexpert = split;
    struct mp_plan_cand *c = NULL;
    int n = 0, rc = mp_plan_evaluate(&q, &c, &n);
    mp_routing_free(&rt);
    if (rc != MP_OK || n != 1) {
        free(c);
        return -1;
    }
    *out = c[0];
    free(c);
    return 0;
}

/* Exact equality: every term is a whole number of bytes (or a half, after / tp), far below 2^53. */
#define CHECK_BYTES(a, b) CHECK_NEAR(a, b, 0)

int main(void)
{
    struct mp_plan_cand c;
    double usable = 80e9 * (1 - 0.1); /* h100-ndr: 80 GB less the 10% reserve = 72 GB */

    /* 1. deepseek-v3, tp1ep16, contiguous, batch 256, 4096 tokens of context. One expert is
     *    3·H·D = 3·7168·2048 parameters; 58 MoE layers; 256 routed experts, 16 per EP rank. */
    CHECK_INT(plan_one("deepseek-v3", "uniform", 1, 16, 0, 0, 256, 4096, MP_NONEXPERT_TP, &c), 0);
    double ds_routed = 16.0 * 58 * (3.0 * 7168 * 2048) * 2 / 1;   /* 81.7 GB */
    double ds_shared = 1.0 * 58 * (3.0 * 7168 * 2048) * 2 / 1;    /* 5.1 GB */
    /* the non-expert weights derived from the shape (mp_model_total_params): embedding and head,
     * 61 MLA layers (wq_a, q_norm, wq_b, wkv_a, kv_norm, wkv_b, wo), 3 dense layers, 58 routers
     * and the norms */
    double ds_mla = 7168.0 * 1536 + 1536 + 1536.0 * 128 * (128 + 64) + 7168.0 * (512 + 64) + 512 +
                    512.0 * 128 * (128 + 128) + 128.0 * 128 * 7168;
    double ds_rest = (2.0 * 129280 * 7168 + 61 * ds_mla + 3 * 3.0 * 7168 * 18432 +
                      256.0 * 7168 * 58 + 2.0 * 7168 * 61 + 7168) * 2 / 1; /* 29.1 GB */
    /* MLA: (kv_lora_rank 512 + qk_rope_head_dim 64) per token and layer, 61 layers, 256/16 = 16
     * sequences per EP rank, one latent head kept whole on the one GPU */
    double ds_kv = 16.0 * 4096 * 61 * 1 * (512 + 64) * 2;          /* 4.6 GB */
    CHECK_BYTES(c.mem.routed, ds_routed);
    CHECK_BYTES(c.mem.shared, ds_shared);
    CHECK_BYTES(c.mem.nonexpert, ds_rest);
    CHECK_BYTES(c.mem.kv, ds_kv);
    CHECK_BYTES(c.mem.total, ds_routed + ds_shared + ds_rest + ds_kv); /* 120.6 GB */
    CHECK_INT(c.fits, 0);
    CHECK_STR(c.over, "weights");
    CHECK_INT(c.slo_ok, 1); /* no SLO given ... */
    CHECK_INT(c.meets, 0);  /* ... yet not chosen: it does not fit */
    /* the same with the non-expert weights split over all 16 GPUs */
    CHECK_INT(plan_one("deepseek-v3", "uniform", 1, 16, 0, 0, 256, 4096, MP_NONEXPERT_WORLD, &c), 0);
    CHECK_BYTES(c.mem.nonexpert, ds_rest / 16);

    /* 2. qwen3-235b-a22b, tp4ep8, replicate-hot:4 under hot:4:15 (experts 0-3 hot, held by rank
     *    0): ranks 1-7 hold their 128/8 = 16 experts plus the 4 replicas = 20, each split by tp 4;
     *    94 layers, no shared expert. */
    CHECK_INT(plan_one("qwen3-235b-a22b", "hot:4:15", 4, 8, 4, 0, 64, 4096, MP_NONEXPERT_TP, &c), 0);
    double qw_routed = 20.0 * 94 * (3.0 * 4096 * 1536) * 2 / 4;    /* 17.7 GB */
    /* derived: embedding and head, 94 layers of q, k, v, o (64 query heads, 4 KV heads of 128),
     * routers and norms */
    double qw_rest = (2.0 * 151936 * 4096 + 94 * (2 * 4096.0 * 64 * 128 + 2 * 4096.0 * 4 * 128) +
                      128.0 * 4096 * 94 + 2.0 * 4096 * 94 + 4096) * 2 / 4; /* 4.0 GB */
    /* GQA: 2 · head_dim 128 per KV head, 4 KV heads over tp 4 = 1 per GPU; 64/8 = 8 sequences */
    double qw_kv = 8.0 * 4096 * 94 * 1 * (2 * 128) * 2;            /* 1.6 GB */
    CHECK_BYTES(c.mem.routed, qw_routed);
    CHECK_BYTES(c.mem.shared, 0);
    CHECK_BYTES(c.mem.nonexpert, qw_rest);
    CHECK_BYTES(c.mem.kv, qw_kv);
    CHECK_BYTES(c.mem.total, qw_routed + qw_rest + qw_kv);
    CHECK_INT(c.fits, 1);
    CHECK_STR(c.over, "none");
    CHECK_INT(c.meets, 1);
    /* at 64 times the context the KV cache alone tips it over */
    CHECK_INT(plan_one("qwen3-235b-a22b", "hot:4:15", 4, 8, 4, 0, 64, 4096 * 64, MP_NONEXPERT_TP,
                       &c), 0);
    CHECK_BYTES(c.mem.kv, 8.0 * (4096 * 64) * 94 * 1 * (2 * 128) * 2); /* 101 GB */
    CHECK(c.mem.weights <= usable);
    CHECK_INT(c.fits, 0);
    CHECK_STR(c.over, "kv");
    CHECK_INT(c.meets, 0);

    /* 3. mixtral-8x7b, tp2ep4, eplb:4: (8 + 4) / 4 = 3 expert slots per rank, each expert
     *    3·4096·14336; 32 layers; 8 KV heads over tp 2 = 4 per GPU; 32/4 = 8 sequences. */
    CHECK_INT(plan_one("mixtral-8x7b", "uniform", 2, 4, 0, 4, 32, 4096, MP_NONEXPERT_TP, &c), 0);
    double mx_routed = 3.0 * 32 * (3.0 * 4096 * 14336) * 2 / 2;    /* 16.9 GB */
    double mx_rest = (2.0 * 32000 * 4096 + 32 * (2 * 4096.0 * 32 * 128 + 2 * 4096.0 * 8 * 128) +
                      8.0 * 4096 * 32 + 2.0 * 4096 * 32 + 4096) * 2 / 2; /* 1.6 GB */
    double mx_kv = 8.0 * 4096 * 32 * 4 * (2 * 128) * 2;            /* 2.1 GB */
    CHECK_BYTES(c.mem.routed, mx_routed);
    CHECK_BYTES(c.mem.nonexpert, mx_rest);
    CHECK_BYTES(c.mem.kv, mx_kv);
    CHECK_BYTES(c.mem.total, mx_routed + mx_rest + mx_kv);
    CHECK_INT(c.fits, 1);

    /* the cheaper candidates dropped for memory, cheapest first, none when all fit */
    struct mp_plan_cand h[] = {
        {.gpus = 64, .token_p99_ms = 45, .slo_ok = 1, .fits = 0},  /* dropped */
        {.gpus = 96, .token_p99_ms = 30, .slo_ok = 1, .fits = 1, .meets = 1}, /* the plan */
        {.gpus = 32, .token_p99_ms = 40, .slo_ok = 1, .fits = 0},  /* dropped, cheapest */
        {.gpus = 16, .token_p99_ms = 90, .slo_ok = 0, .fits = 0},  /* missed the SLO anyway */
        {.gpus = 128, .token_p99_ms = 20, .slo_ok = 1, .fits = 0}, /* dearer than the plan */
        {.gpus = 64, .token_p99_ms = 44, .slo_ok = 1, .fits = 0},  /* dropped, before [0] */
    };
    int order[2], best = mp_plan_best(h, 6);
    CHECK_INT(best, 1);
    CHECK_INT(mp_plan_dropped(h, 6, best, 4096, order, 2), 2);
    CHECK_INT(order[0], 2);
    CHECK_INT(order[1], 5);
    CHECK_INT(mp_plan_dropped(h, 6, best, 48, order, 2), 1); /* within --max-gpus only */
    CHECK_DONE();
}
