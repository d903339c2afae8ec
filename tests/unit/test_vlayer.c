/* test_vlayer.c - the model's layer for virtual ranks, pipelined and not: --overlap 1 is the
 * unpipelined model to the bit and follows its equations; with communication about as long as the
 * expert FFN, 2 and 4 chunks shorten the layer; with negligible communication overlap costs at most
 * the latencies it adds; the overlap efficiency stays within [0, 1] in both cases. The padded
 * dispatch moves whole slots with no count round and drops what a tight capacity cuts; a
 * straggler lengthens its own FFN and every rank's wait, not the communication; the bytes per
 * phase and link class equal a count made from the routing alone on 1, 2 and 4 ranks per node;
 * --dedup node's hop times add up to its dispatch and, with the wait, to its combine.
 * Deduplicated per rank: padded slots move (ep − 1)·cap rows each way whatever the routing, and
 * pipelined chunks of tokens add up to the unpipelined rows, with the metadata ahead of them.
 * An expert cache's fetches wait in full without a copy engine, and with one only for what the
 * FFNs before them do not hide. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cluster.h"
#include "dedup.h"
#include "dispatch.h"
#include "error.h"
#include "metrics.h"
#include "placement.h"
#include "routing.h"
#include "stats.h"
#include "vlayer.h"

#define EP 8
#define ITERS 4

static const struct mp_model model = {.name = "test", .hidden = 4096, .ffn = 4096, .experts = 64,
                                      .topk = 4, .shared = 1, .layers = 1};
static struct mp_routing routing;
static struct mp_placement placement;

/* One point on tp1ep8 (one node of the profile): its result. */
static struct mp_point_result run(const struct mp_cluster *cl, long batch, int overlap)
{
    struct mp_point pt = {.batch = batch, .seq = 1, .routing = &routing, .placement = &placement,
                          .iters = ITERS, .overlap = overlap};
    struct mp_point_result res;
    CHECK_INT(mp_vlayer_run(cl, &model, 1, EP, 5, &pt, &res), MP_OK);
    return res;
}

/* Median over iterations of metric field `k` (index in struct mp_iter_metrics). */
/* A traffic builder that counts its calls, for a mode the model must build with its entry's. */
static int stub_calls;
static void stub_traffic(struct mp_vtraffic *t, const struct mp_vdraw *d)
{
    stub_calls++;
    mp_vtraffic_dynamic(t, d);
}

/* The bytes per phase and link class of a tp1ep8 point (uniform routing, contiguous placement,
 * batch 256) on a profile of `gpn` ranks per node, against a count made here from the routing
 * draws alone: rank s holds tokens [32·s, 32·s + 32), expert x lives on rank x / 8, each pair to
 * another rank is one row out in the dispatch (from s) and one row back in the combine (from its
 * expert's rank), intra-node when both ranks share node rank / gpn. */
static void check_link_bytes(const struct mp_cluster *base, int gpn)
{
    struct mp_cluster cl = *base;
    cl.gpus_per_node = gpn;
    cl.ffn_blend = 0; /* the plain roofline: every rank's FFN, and so its wait, alike */
    long T = 256, per = T / EP;
    int K = model.topk, per_rank = model.experts / EP;
    struct mp_point pt = {.batch = T, .seq = 1, .routing = &routing, .placement = &placement,
                          .iters = ITERS, .overlap = 1};
    struct mp_point_result res;
    CHECK_INT(mp_vlayer_run(&cl, &model, 1, EP, 5, &pt, &res), MP_OK);
    int32_t *ids = malloc(sizeof *ids * (size_t)T * K);
    float *w = malloc(sizeof *w * (size_t)T * K);
    double row = model.hidden * cl.elem_bytes;
    for (int it = 0; it < ITERS && ids && w; it++) {
        double want[EP][4] = {{0}}; /* dispatch intra, dispatch inter, combine intra, inter */
        mp_routing_draw(&routing, 5, it, T, 0, T, ids, w); /* ITERS draws: iteration it, draw it */
        for (long tok = 0; tok < T; tok++)
            for (int k = 0; k < K; k++) {
                int s = (int)(tok / per), d = ids[tok * K + k] / per_rank;
                if (d == s)
                    continue;
                int inter = s / gpn != d / gpn;
                want[s][inter] += row;
                want[d][2 + inter] += row;
            }
        const struct mp_rank_iter *r = mp_point_ranks(&res, it);
        const struct mp_iter_metrics *m = &res.metrics[it];
        double sum[4] = {0}, sent = 0;
        for (int q = 0; q < EP; q++) {
            CHECK_NEAR(r[q].dispatch_intra, want[q][0], 0);
            CHECK_NEAR(r[q].dispatch_inter, want[q][1], 0);
            CHECK_NEAR(r[q].combine_intra, want[q][2], 0);
            CHECK_NEAR(r[q].combine_inter, want[q][3], 0);
            for (int c = 0; c < 4; c++)
                sum[c] += want[q][c];
            sent += r[q].bytes_sent;
        }
        CHECK_NEAR(m->dispatch_bytes_intranode, sum[0], 0);
        CHECK_NEAR(m->dispatch_bytes_internode, sum[1], 0);
        CHECK_NEAR(m->combine_bytes_intranode, sum[2], 0);
        CHECK_NEAR(m->combine_bytes_internode, sum[3], 0);
        CHECK_NEAR(m->bytes_intranode, sum[0] + sum[2], 0);
        CHECK_NEAR(m->bytes_internode, sum[1] + sum[3], 0);
        CHECK_NEAR(sum[0] + sum[1] + sum[2] + sum[3], sent, 0);
        CHECK(gpn > 1 ? sum[0] > 0 && sum[2] > 0 : sum[0] == 0 && sum[2] == 0);
        CHECK(sum[1] > 0 && sum[3] > 0); /* gpn < EP: some pairs cross nodes */
        /* every rank's dispatch and combine take alike here, so the slowest is rank 0 */
        if (gpn > 1)
            CHECK_NEAR(m->dispatch_intranode_GBps, r[0].dispatch_intra / r[0].dispatch / 1e3,
                       1e-12);
        else
            CHECK(isnan(m->dispatch_intranode_GBps) && isnan(m->combine_intranode_GBps));
        CHECK_NEAR(m->combine_internode_GBps, r[0].combine_inter / r[0].combine / 1e3, 1e-12);
    }
    free(ids);
    free(w);
    mp_point_result_free(&res);
}

/* --dedup node on nodes of 2 ranks: each rank's dispatch is its inter-node hop plus its
 * intra-node forward, its combine the two returns plus its wait for the slowest FFN and TP reduce
 * (docs/METRICS.md, "Hop times"), every part positive, and the iteration's hop times are those of
 * each phase's slowest rank; pair and rank leave them empty (NAN). */
static void check_hop_times(const struct mp_cluster *base)
{
    struct mp_cluster cl = *base;
    cl.gpus_per_node = 2;
    for (int mode = MP_DEDUP_PAIR; mode <= MP_DEDUP_NODE; mode++) {
        struct mp_point pt = {.batch = 256, .seq = 1, .routing = &routing, .placement = &placement,
                              .iters = ITERS, .overlap = 1, .dedup = mode};
        struct mp_point_result res;
        CHECK_INT(mp_vlayer_run(&cl, &model, 1, EP, 5, &pt, &res), MP_OK);
        for (int it = 0; it < ITERS; it++) {
            const struct mp_rank_iter *r = mp_point_ranks(&res, it);
            const struct mp_iter_metrics *m = &res.metrics[it];
            if (mode != MP_DEDUP_NODE) {
                for (int p = 0; p < EP; p++)
                    CHECK(isnan(r[p].dispatch_inter_us) && isnan(r[p].dispatch_intra_us) &&
                          isnan(r[p].combine_inter_us) && isnan(r[p].combine_intra_us));
                CHECK(isnan(m->dispatch_inter_us) && isnan(m->combine_intra_us));
                continue;
            }
            double slowest = 0;
            for (int p = 0; p < EP; p++)
                slowest = fmax(slowest, r[p].ffn + r[p].tp_reduce);
            for (int p = 0; p < EP; p++) {
                const struct mp_rank_iter *x = &r[p];
                CHECK(x->dispatch_inter_us > 0 && x->dispatch_intra_us > 0);
                CHECK(x->combine_inter_us > 0 && x->combine_intra_us > 0);
                CHECK_NEAR(x->dispatch_inter_us + x->dispatch_intra_us, x->dispatch,
                           1e-9 * x->dispatch);
                CHECK_NEAR(x->combine - x->combine_inter_us - x->combine_intra_us,
                           slowest - x->ffn - x->tp_reduce, 1e-9 * x->combine);
            }
            CHECK(m->dispatch_inter_us + m->dispatch_intra_us <= m->dispatch_us * (1 + 1e-12));
            CHECK(m->combine_inter_us + m->combine_intra_us <= m->combine_us * (1 + 1e-12));
        }
        mp_point_result_free(&res);
    }
}

/* mp_vtraffic_time writes every field of every rank's record, whatever the point (the modelled
 * layer hands it records it has not cleared): dynamic, padded, rank- and node-deduplicated,
 * pipelined and pipelined deduplicated, on nodes of 2 ranks, with TP 2; no field keeps the
 * bytes it held before. */
static void check_every_field_written(const struct mp_cluster *base)
{
    struct mp_cluster cl = *base;
    cl.gpus_per_node = 2;
    struct { int overlap, dedup, padded; } kinds[] = {{1, MP_DEDUP_PAIR, 0}, {1, MP_DEDUP_PAIR, 1},
        {1, MP_DEDUP_RANK, 0}, {1, MP_DEDUP_NODE, 0}, {2, MP_DEDUP_PAIR, 0}, {2, MP_DEDUP_NODE, 0}};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        struct mp_point pt = {.batch = 64, .seq = 1, .routing = &routing, .placement = &placement,
                              .iters = 1, .overlap = kinds[k].overlap, .dedup = kinds[k].dedup,
                              .dispatch = kinds[k].padded ? &mp_dispatch_padded : NULL};
        struct mp_vtraffic *t = NULL;
        int ndraws = 0, tp = 2;
        CHECK_INT(mp_vtraffic_build(&cl, &model, tp, EP, 5, &pt, &t, &ndraws), MP_OK);
        struct mp_rank_iter ranks[2 * EP];
        memset(ranks, 0xa5, sizeof ranks);
        uint64_t poison;
        memset(&poison, 0xa5, sizeof poison);
        mp_vtraffic_time(&cl, &model, &t[0], ranks);
        for (int r = 0; r < tp * EP; r++)
            for (size_t f = 0; f < MP_RANK_ITER_FIELDS; f++) {
                uint64_t bits;
                memcpy(&bits, (const char *)&ranks[r] + f * sizeof(double), sizeof bits);
                if (bits == poison) {
                    fprintf(stderr, "kind %zu rank %d: field %zu of struct mp_rank_iter not "
                            "written\n", k, r, f);
                    check_failures++;
                }
            }
        mp_vtraffic_free(t, ndraws);
    }
}

/* The expert cache's fetch time (docs/METRICS.md, "Expert cache") on tp1ep8, uniform routing at
 * batch 256 (all 8 local experts of every rank get rows, in order), 2 lru slots: every access
 * misses (a cyclic scan of 8 experts through 2 slots), each miss a copy of c µs. Without a copy
 * engine the FFN phase waits for every copy, misses·c; with one and FFNs of nothing (free compute
 * and launches) for the same; with copies shorter than any expert's FFN only for the first, c,
 * unless one slot makes each copy wait for the FFN before it to end (misses·c again);
 * as the h100 profile has it (copies longer than FFNs) for less than misses·c, by at most the
 * FFNs' time under which the copies hid. */
static void check_cache_fetch(const struct mp_cluster *base)
{
    struct mp_point pt = {.batch = 256, .seq = 1, .routing = &routing, .placement = &placement,
                          .iters = ITERS, .overlap = 1, .warmup = 1,
                          .cache = {.slots = 2, .policy = MP_CACHE_LRU}};
    double bytes = 3.0 * model.hidden * model.ffn * base->elem_bytes;
    for (int kind = 0; kind < 5; kind++) {
        struct mp_cluster cl = *base;
        pt.cache.slots = kind == 4 ? 1 : 2;
        cl.copy_engine = kind != 0;
        if (kind == 1) { /* FFNs of nothing */
            cl.flops = cl.flops_fp8 = cl.hbm_bw = 1e30;
            cl.launch_us = cl.ffn_call_us = 0;
        }
        if (kind == 2 || kind == 4) /* copies shorter than any FFN */
            cl.pcie_bw = 1e15;
        double c = bytes / cl.pcie_bw * 1e6;
        struct mp_point_result res;
        CHECK_INT(mp_vlayer_run(&cl, &model, 1, EP, 5, &pt, &res), MP_OK);
        for (int i = 0; i < ITERS * EP; i++) {
            const struct mp_rank_iter *x = &res.ranks[i];
            CHECK_NEAR(x->cache_misses, 8, 0);
            CHECK_NEAR(x->cache_hits, 0, 0);
            if (kind < 2 || kind == 4) /* one slot: each fetch waits for the FFN before it */
                CHECK_NEAR(x->fetch_us, 8 * c, 1e-9 * c);
            else if (kind == 2)
                CHECK_NEAR(x->fetch_us, c, 1e-9 * c);
            else {
                double ffns = x->ffn - x->fetch_us; /* the FFN phase less its waits */
                CHECK(x->fetch_us < 8 * c && x->fetch_us >= 8 * c - ffns);
            }
        }
        mp_point_result_free(&res);
    }
}

static double median(const struct mp_point_result *r, size_t k)
{
    double v[ITERS];
    for (int i = 0; i < r->iters; i++)
        v[i] = ((const double *)&r->metrics[i])[k];
    struct mp_summary s;
    mp_summarize(v, r->iters, &s);
    return s.p50;
}
#define LAYER 0 /* layer_us */
#define FFN 1   /* ffn_us */
#define COMM 3  /* comm_us */
#define ROUTE 4 /* route_us */

int main(void)
{
    mp_log_init("test_vlayer", -1);
    struct mp_cluster h100, comm_like_comp, fast;
    CHECK_INT(mp_cluster_resolve("h100-ndr", &h100), MP_OK);
    CHECK_INT(mp_routing_parse("uniform", model.experts, model.topk, 5, &routing), MP_OK);
    CHECK_INT(mp_placement_build("contiguous", model.experts, EP, routing.prob, &placement), MP_OK);
    check_hop_times(&h100);
    check_every_field_written(&h100);
    check_cache_fetch(&h100);

    /* --overlap 1 (and 0, the field's default) is the unpipelined model, bit for bit */
    struct mp_point_result r0 = run(&h100, 256, 0), r1 = run(&h100, 256, 1);
    CHECK_INT(r0.rank_period, r1.rank_period);
    CHECK(memcmp(r0.ranks, r1.ranks, sizeof *r0.ranks * (size_t)r0.rank_period * EP) == 0);
    CHECK(memcmp(r0.metrics, r1.metrics, sizeof *r0.metrics * ITERS) == 0);
    CHECK(isnan(r1.overlap_efficiency));
    /* ... and its equations (docs/planning.md): route, dispatch (launch, count round, data),
     * the slowest rank's FFN, combine (launch, data); tp 1 has no reduce */
    struct mp_point pt = {.batch = 256, .seq = 1, .routing = &routing, .placement = &placement,
                          .iters = ITERS, .overlap = 1};
    struct mp_vtraffic *t = NULL;
    int ndraws = 0;
    CHECK_INT(mp_vtraffic_build(&h100, &model, 1, EP, 5, &pt, &t, &ndraws), MP_OK);
    CHECK_INT(t[0].nchunks, 1);
    const struct mp_vexchange *a = &t[0].a2a;
    double data = mp_cost_exchange_us(&h100, a->intra_max, a->inter_max, a->uses_intra,
                                       a->uses_inter, a->incast);
    double counts = mp_cost_exchange_us(&h100, 0, 0, a->uses_intra, a->uses_inter, 1);
    double slowest = 0, HD = (double)model.hidden * model.ffn;
    for (int p = 0; p < EP; p++) {
        double f = mp_cost_ffn_us(&h100, 6 * HD * t[0].ffn_rows[p],
                                   3 * HD * t[0].active[p] * h100.elem_bytes, t[0].active[p],
                                   MP_GEMM_LOOP);
        slowest = f > slowest ? f : slowest;
    }
    double L = h100.launch_us + counts + (h100.launch_us + data) + slowest + (h100.launch_us + data);
    CHECK_NEAR(r1.metrics[0].layer_us, L, 1e-12);
    CHECK_NEAR(r1.metrics[0].notify_us, counts, 1e-12); /* the count round: its own phase */
    CHECK_NEAR(r1.metrics[0].dispatch_us, h100.launch_us + data, 1e-12);
    mp_vtraffic_free(t, ndraws);

    /* communication about as long as the FFN (an NVLink of 70 GB/s at batch 4096): 2 and 4 chunks
     * lower the layer time, the FFN stays the FFN and the efficiency is a fraction */
    comm_like_comp = h100;
    comm_like_comp.intra_bw = 70e9;
    struct mp_point_result c1 = run(&comm_like_comp, 4096, 1);
    double ratio = median(&c1, COMM) / median(&c1, FFN);
    CHECK(ratio > 0.5 && ratio < 2);
    for (int n = 2; n <= 4; n *= 2) {
        struct mp_point_result cn = run(&comm_like_comp, 4096, n);
        CHECK(median(&cn, LAYER) < 0.9 * median(&c1, LAYER));
        CHECK(median(&cn, LAYER) - median(&cn, ROUTE) >= median(&c1, FFN)); /* cannot beat compute */
        CHECK(cn.overlap_efficiency > 0 && cn.overlap_efficiency <= 1);
        /* the same pairs and bytes, cut differently */
        for (int r = 0; r < EP; r++) {
            CHECK_NEAR(cn.ranks[r].rows, c1.ranks[r].rows, 0);
            CHECK_NEAR(cn.ranks[r].bytes_sent, c1.ranks[r].bytes_sent, 0);
            CHECK_NEAR(cn.ranks[r].combine, 0, 0); /* recorded as a measured pipeline does */
        }
        mp_point_result_free(&cn);
    }
    mp_point_result_free(&c1);

    /* negligible communication (links of 10^15 B/s; latencies and launches remain): at a batch
     * where every chunk is weight-bound, overlap costs at most its added exchanges' latency and
     * launch, (N−1)·2·(launch + intra latency), and the FFN is unchanged */
    fast = h100;
    fast.intra_bw = fast.inter_bw = 1e15;
    struct mp_point_result f1 = run(&fast, 1024, 1);
    for (int n = 2; n <= 4; n *= 2) {
        struct mp_point_result fn = run(&fast, 1024, n);
        double added = (n - 1) * 2 * (fast.launch_us + fast.intra_lat_us);
        CHECK(median(&fn, LAYER) <= median(&f1, LAYER) + added);
        CHECK(median(&fn, LAYER) >= median(&f1, LAYER) - median(&f1, COMM));
        CHECK_NEAR(median(&fn, FFN), median(&f1, FFN), 1e-12);
        CHECK(fn.overlap_efficiency >= 0 && fn.overlap_efficiency <= 1);
        mp_point_result_free(&fn);
    }
    mp_point_result_free(&f1);

    /* the padded dispatch, lossless: every pair of ranks exchanges max_local·cap rows (cap = the
     * tokens a rank holds), nothing dropped, every slot row computed; the dispatch is launch and
     * the data round, with no count exchange */
    struct mp_point pp = pt;
    pp.dispatch = &mp_dispatch_padded;
    CHECK_INT(mp_vtraffic_build(&h100, &model, 1, EP, 5, &pp, &t, &ndraws), MP_OK);
    long cap = 256 / EP;
    double slot_bytes = (double)placement.max_local * cap * model.hidden * h100.elem_bytes;
    CHECK_INT(t[0].count_exchange, 0);
    CHECK_NEAR(t[0].a2a.intra_max, (EP - 1) * slot_bytes, 0);
    slowest = 0;
    double kept = 0;
    for (int p = 0; p < EP; p++) {
        CHECK_NEAR(t[0].dropped[p], 0, 0);
        CHECK_NEAR(t[0].bytes_sent[p], 2 * (EP - 1) * slot_bytes, 0);
        CHECK_NEAR(t[0].ffn_rows[p], (double)placement.max_local * EP * cap + t[0].tokens[p], 0);
        CHECK_INT(t[0].active[p], placement.max_local + model.shared);
        kept += t[0].rows[p];
        double f = mp_cost_ffn_us(&h100, 6 * HD * t[0].ffn_rows[p],
                                   3 * HD * t[0].active[p] * h100.elem_bytes, t[0].active[p],
                                   MP_GEMM_LOOP);
        slowest = f > slowest ? f : slowest;
    }
    CHECK_NEAR(kept, 256.0 * model.topk, 0); /* every pair kept */
    a = &t[0].a2a;
    data = mp_cost_exchange_us(&h100, a->intra_max, a->inter_max, a->uses_intra, a->uses_inter,
                                a->incast);
    struct mp_rank_iter pr[EP];
    mp_vtraffic_time(&h100, &model, &t[0], pr);
    struct mp_iter_metrics pm;
    mp_metrics_iter(pr, EP, 1, &pm);
    L = h100.launch_us + (h100.launch_us + data) + slowest + (h100.launch_us + data);
    CHECK_NEAR(pm.layer_us, L, 1e-12);
    CHECK_NEAR(pm.notify_us, 0, 0); /* no count exchange */
    CHECK_NEAR(pm.drop_rate, 0, 0);
    mp_vtraffic_free(t, ndraws);
    /* a tight capacity (0.5: half the mean load per slot) drops pairs; kept and dropped add up */
    pp.dispatch_arg = 0.5;
    CHECK_INT(mp_vtraffic_build(&h100, &model, 1, EP, 5, &pp, &t, &ndraws), MP_OK);
    double dropped = 0;
    kept = 0;
    for (int p = 0; p < EP; p++) {
        dropped += t[0].dropped[p];
        kept += t[0].rows[p];
    }
    CHECK(dropped > 0);
    CHECK_NEAR(kept + dropped, 256.0 * model.topk, 0);
    mp_vtraffic_free(t, ndraws);
    pp.overlap = 2; /* never pipelined, as measured */
    CHECK_INT(mp_vtraffic_build(&h100, &model, 1, EP, 5, &pp, &t, &ndraws), MP_ERR_USAGE);

    /* padded slots deduplicated per rank, lossless: every pair of ranks exchanges cap = 32 rows
     * (the tokens a rank holds), each with K·8 bytes of metadata on the way out; nothing dropped,
     * every pair kept; no count round */
    struct mp_point dp = pt;
    dp.dispatch = &mp_dispatch_padded;
    dp.dedup = MP_DEDUP_RANK;
    CHECK_INT(mp_vtraffic_build(&h100, &model, 1, EP, 5, &dp, &t, &ndraws), MP_OK);
    double row = model.hidden * h100.elem_bytes, meta = 8.0 * model.topk;
    kept = 0;
    for (int p = 0; p < EP; p++) {
        CHECK_NEAR(t[0].bytes_sent[p], (EP - 1) * cap * (2 * row + meta), 0);
        CHECK_NEAR(t[0].dropped[p], 0, 0);
        kept += t[0].rows[p];
    }
    CHECK_NEAR(kept, 256.0 * model.topk, 0);
    CHECK_INT(t[0].count_exchange, 0);
    mp_vtraffic_time(&h100, &model, &t[0], pr);
    mp_metrics_iter(pr, EP, 1, &pm);
    CHECK_NEAR(pm.notify_us, 0, 0);
    mp_vtraffic_free(t, ndraws);

    /* pipelined per rank over 2 chunks of tokens: the chunks' rows add up to each rank's, each
     * chunk's exchange is at most the whole one's rows (no metadata), the two together at least
     * that, and the metadata alone goes with the counts */
    struct mp_point up = pt, op2 = pt;
    up.dedup = op2.dedup = MP_DEDUP_RANK;
    op2.overlap = 2;
    struct mp_vtraffic *t1 = NULL;
    int nd1 = 0;
    CHECK_INT(mp_vtraffic_build(&h100, &model, 1, EP, 5, &up, &t1, &nd1), MP_OK);
    CHECK_INT(mp_vtraffic_build(&h100, &model, 1, EP, 5, &op2, &t, &ndraws), MP_OK);
    CHECK_INT(t[0].nchunks, 2);
    CHECK(t[0].chunk_hop != NULL && t[0].dedup_hops == 1);
    double whole = t1[0].hop[0].intra_max * row / (row + meta), sum = 0;
    for (int k = 0; k < 2; k++) {
        CHECK(t[0].chunk_hop[2 * k].intra_max <= whole + 1e-6);
        sum += t[0].chunk_hop[2 * k].intra_max;
    }
    CHECK(sum >= whole - 1e-6 && t[0].chunk_hop[0].intra_max > 0);
    CHECK_NEAR(t[0].meta[0].intra_max, t1[0].hop[0].intra_max * meta / (row + meta), 1e-6);
    for (int p = 0; p < EP; p++) {
        CHECK_NEAR(t[0].chunk_rows[p] + t[0].chunk_rows[EP + p], t1[0].rows[p], 0);
        CHECK_NEAR(t[0].bytes_sent[p], t1[0].bytes_sent[p], 0);
    }
    mp_vtraffic_free(t, ndraws);
    mp_vtraffic_free(t1, nd1);

    /* the model builds a point's traffic with its mode's model_traffic; a mode that has none runs
     * on traced ranks (tests/unit/test_vexec.c compares them) */
    struct mp_dispatch_mode other = mp_dispatch_dynamic;
    other.model_traffic = stub_traffic;
    struct mp_point op = pt;
    op.dispatch = &other;
    CHECK_INT(mp_vtraffic_build(&h100, &model, 1, EP, 5, &op, &t, &ndraws), MP_OK);
    CHECK(stub_calls == ndraws && ndraws > 0);
    mp_vtraffic_free(t, ndraws);
    other.model_traffic = NULL;
    stub_calls = 0;
    CHECK_INT(mp_vtraffic_build(&h100, &model, 1, EP, 5, &op, &t, &ndraws), MP_OK);
    CHECK(stub_calls == 0 && ndraws > 0 && t[0].count_exchange == 1);
    mp_vtraffic_free(t, ndraws);

    /* a straggler (rank 3, 1 ms): its FFN takes that much more, the slowest FFN sets every rank's
     * wait, and the communication is unchanged */
    struct mp_point sp = pt;
    sp.straggle_rank = 3;
    sp.straggle_us = 1000;
    struct mp_point_result sr;
    CHECK_INT(mp_vlayer_run(&h100, &model, 1, EP, 5, &sp, &sr), MP_OK);
    for (int i = 0; i < ITERS; i++) {
        CHECK_NEAR(mp_point_ranks(&sr, i)[3].ffn, mp_point_ranks(&r1, i)[3].ffn + 1000, 1e-9);
        CHECK_NEAR(sr.metrics[i].ffn_us, mp_point_ranks(&r1, i)[3].ffn + 1000, 1e-9);
        CHECK_NEAR(sr.metrics[i].layer_us - sr.metrics[i].ffn_us,
                   r1.metrics[i].layer_us - r1.metrics[i].ffn_us, 1e-9);
    }
    mp_point_result_free(&sr);

    /* bytes per phase and link class against an independent count, 1, 2 and 4 ranks per node */
    for (int gpn = 1; gpn <= 4; gpn *= 2)
        check_link_bytes(&h100, gpn);

    /* ranks holding fewer experts than the most loaded one (replicas of 4 hot experts: 12 or 8
     * local experts), pipelined: every chunk's rows add up to the unpipelined rows */
    mp_placement_free(&placement);
    CHECK_INT(mp_placement_build("eplb:12", model.experts, EP, routing.prob, &placement), MP_OK);
    CHECK(placement.max_local > mp_placement_nlocal(&placement, EP - 1) ||
          placement.max_local > mp_placement_nlocal(&placement, 0));
    struct mp_point_result u1 = run(&h100, 64, 1), u3 = run(&h100, 64, 3);
    for (int r = 0; r < EP; r++)
        CHECK_NEAR(u3.ranks[r].rows, u1.ranks[r].rows, 0);
    mp_point_result_free(&u1);
    mp_point_result_free(&u3);

    mp_point_result_free(&r0);
    mp_point_result_free(&r1);
    mp_placement_free(&placement);
    mp_routing_free(&routing);
    CHECK_DONE();
}
