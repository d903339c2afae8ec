/* plan_console.c - moeperf-plan's console: the assumptions, each routing's plan and its tables. */
#include "plan_console.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "dtype.h"
#include "gpumem.h"
#include "plan_answer.h"

/* The header of a candidate table (print_cand's columns). */
static void print_cand_header(void)
{
    printf("  %-9s %-16s %3s %-5s %-4s %-4s %6s %10s %10s %9s %9s %6s %6s %6s %9s %9s %4s %6s %7s "
           "%5s %-7s %s\n",
           "layout", "placement", "ovl", "dedup", "wt", "disp", "batch", "layer_us", "p99_us",
           "ffn_us", "comm_us", "ratio", "bubble", "imbal", "token_ms", "tok/s/rep", "dp", "gpus",
           "mem_gb", "cache", "over", "slo");
}

/* One candidate as a row of the table print_cand_header heads. */
static void print_cand(const struct mp_plan_cand *c)
{
    char lay[32], pl[32], cache[16] = "all";
    snprintf(lay, sizeof lay, "tp%dep%d", c->tp, c->ep);
    if (c->cache_slots > 0) /* the experts per layer kept resident with offload */
        snprintf(cache, sizeof cache, "%d", c->cache_slots);
    printf("  %-9s %-16s %3d %-5s %-4s %-4s %6ld %10.1f %10.1f %9.1f %9.1f %6.2f %6.3f %6.2f %9.2f "
           "%9.0f %4ld %6ld %7.1f %5s %-7s %s\n",
           lay, mp_plan_placement(c, pl, sizeof pl), c->overlap, mp_dedup_choices[c->dedup],
           mp_dtype_choices[c->weight_dtype], mp_dtype_choices[c->dispatch_dtype], c->batch,
           c->layer_us, c->layer_p99_us, c->ffn_us, c->comm_us, c->ratio, c->bubble, c->imbalance,
           c->token_p99_ms, c->replica_tps, c->dp, c->gpus, c->mem.total / 1e9, cache, c->over,
           c->meets ? "yes" : "no");
}

/* The remedies at the cheapest plan's layout and batch, ranked by the layer time they save against
 * contiguous placement without overlap with dedup pair (hot-expert replication, eplb, pipelining,
 * dedup rank and node, and their combinations in the sweep). */
static void print_remedies(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *b)
{
    int base, order[64];
    int na = mp_plan_remedies(c, n, b, &base, order, 64);
    if (base < 0 || na == 0)
        return;
    printf("remedies at tp%dep%d batch %ld against contiguous without overlap, dedup pair, bf16 "
           "(layer %.1f µs, imbalance %.2f):",
           b->tp, b->ep, b->batch, c[base].layer_us, c[base].imbalance);
    for (int i = 0; i < na; i++) {
        const struct mp_plan_cand *a = &c[order[i]];
        char what[64];
        printf("%s %s %+.0f%% (imbalance %.2f)", i ? "," : "", mp_plan_remedy(a, what, sizeof what),
               100 * (a->layer_us / c[base].layer_us - 1), a->imbalance);
    }
    printf("\n");
}

/* The dedup modes at the cheapest plan's layout, batch and placement, without overlap, fastest
 * first, each against pair: the remedy of --dedup on its own. */
static void print_dedup(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *b)
{
    int order[8], pair = -1;
    struct mp_plan_cand like = *b;
    like.overlap = 1;
    int k = mp_plan_dedup_modes(c, n, &like, order, 8);
    for (int i = 0; i < k; i++)
        if (c[order[i]].dedup == MP_DEDUP_PAIR)
            pair = order[i];
    if (k < 2 || pair < 0)
        return;
    char pl[64];
    printf("dedup modes at tp%dep%d batch %ld %s without overlap, fastest first:", b->tp, b->ep,
           b->batch, mp_plan_placement(b, pl, sizeof pl));
    for (int i = 0; i < k; i++) {
        const struct mp_plan_cand *a = &c[order[i]];
        printf("%s %d. %s %.1f µs", i ? "," : "", i + 1, mp_dedup_choices[a->dedup], a->layer_us);
        if (a != &c[pair])
            printf(" (%+.1f%% against pair)", 100 * (a->layer_us / c[pair].layer_us - 1));
    }
    printf("\n");
}

/* The network and FFN assumptions, once: the congestion a plan's inter-node exchanges assume
 * (docs/planning.md) and the FFN's rates. */
static void print_network_header(const struct mp_cluster *cl)
{
    if (cl->congestion > 0)
        printf("# network: congestion γ = %g: inter-node time × (1 + γ·log2 incast), a tree that "
               "incast slows\n", cl->congestion);
    else
        printf("# network: congestion γ = 0: inter-node exchanges near line rate at any EP size "
               "(a non-blocking fat tree; a profile with congestion > 0 models a tree that incast "
               "slows)\n");
    printf("#   NIC %.0f GB/s × %.2f, NVLink %.0f GB/s × %.2f; FFN: %.0f TFLOP/s × %.2f "
           "(fp8 %.0f × %.2f), %.2f TB/s × %.2f, %.0f µs per fused call, blend %.2f\n",
           cl->inter_bw / 1e9, cl->inter_eff, cl->intra_bw / 1e9, cl->intra_eff, cl->flops / 1e12,
           cl->flops_eff, cl->flops_fp8 / 1e12, cl->flops_fp8_eff, cl->hbm_bw / 1e12, cl->hbm_eff,
           cl->ffn_call_us, cl->ffn_blend);
}

/* The memory assumptions, once: what a GPU may hold and how the weights are placed. */
static void print_memory_header(const struct mp_plan_req *q)
{
    const struct mp_model *m = &q->model;
    double usable = mp_gpumem_usable(&q->cluster, q->mem_reserve);
    if (usable > 0)
        printf("# memory per GPU: %g GB on %s less a %.0f%% reserve = %.1f GB for weights and KV "
               "cache\n",
               q->cluster.gpu_mem_gb, q->cluster.name, 100 * q->mem_reserve, usable / 1e9);
    else
        printf("# memory per GPU: not checked (%s gives no gpu_mem_gb)\n", q->cluster.name);
    int fp8 = 0;
    for (int i = 0; i < q->nwdtype; i++)
        fp8 |= q->wdtypes[i] == MP_DTYPE_FP8;
    printf("#   %g-byte weights%s and KV cache, %ld tokens of context per sequence; parameters "
           "%.4g: routed %.4g, shared %.4g, non-expert %.4g (split by %s)\n",
           q->weight_bytes, fp8 ? " (fp8 experts: 1 byte and a scale per 128x128 block)" : "",
           q->context, mp_model_total_params(m), mp_model_routed_params(m),
           mp_model_shared_params(m), mp_model_nonexpert_params(m),
           q->nonexpert == MP_NONEXPERT_WORLD ? "all tp·ep GPUs" : "tp, a copy per EP rank");
    if (m->attn != MP_ATTN_NONE && m->params > 0)
        printf("#   %s: parameters derived from its attention, vocabulary and dense-layer shape "
               "(the model card states %.4g)\n", m->name, m->params);
    else if (m->attn != MP_ATTN_NONE)
        printf("#   %s: parameters derived from its attention, vocabulary and dense-layer shape\n",
               m->name);
    else if (m->params <= 0)
        printf("#   %s gives no params: only the experts' weights are counted\n", m->name);
    if (m->attn_layers <= 0 || m->kv_heads <= 0 || m->kv_head_dim <= 0)
        printf("#   %s gives no KV-cache shape (attn_layers, kv_heads, kv_head_dim): no KV cache "
               "counted\n", m->name);
}

/* Why the cheapest-looking candidates were dropped: those meeting the SLO within --max-gpus but
 * not fitting in memory, cheaper than the plan chosen. */
static void print_dropped(const struct mp_plan_req *q, const struct mp_plan_cand *c, int n,
                          int best)
{
    int nofit = 0, order[3];
    for (int i = 0; i < n; i++)
        nofit += !c[i].fits;
    if (nofit == 0)
        return;
    int k = mp_plan_dropped(c, n, best, q->max_gpus, order, 3);
    printf("memory: %d of %d candidates do not fit in %.1f GB per GPU%s\n", nofit, n,
           mp_gpumem_usable(&q->cluster, q->mem_reserve) / 1e9,
           k ? "; cheaper ones dropped although they met the SLO:" : "");
    for (int i = 0; i < k; i++) {
        const struct mp_plan_cand *a = &c[order[i]];
        char pl[64];
        printf("  tp%dep%d %s batch %ld: %ld GPUs, p99 token %.2f ms, needs %.1f GB per GPU "
               "(routed experts %.1f, shared %.1f, non-expert %.1f, KV cache %.1f): %s overflow\n",
               a->tp, a->ep, mp_plan_remedy(a, pl, sizeof pl), a->batch, a->gpus, a->token_p99_ms,
               a->mem.total / 1e9, a->mem.routed / 1e9, a->mem.shared / 1e9,
               a->mem.nonexpert / 1e9, a->mem.kv / 1e9, a->over);
    }
    if (best < 0) { /* no plan: the least memory any candidate needs */
        int least = 0;
        for (int i = 1; i < n; i++)
            if (c[i].mem.total < c[least].mem.total)
                least = i;
        if (n > 0 && !c[least].fits)
            printf("  the least any candidate needs: %.1f GB per GPU (weights %.1f) at tp%dep%d "
                   "batch %ld\n",
                   c[least].mem.total / 1e9, c[least].mem.weights / 1e9, c[least].tp,
                   c[least].ep, c[least].batch);
    }
}

void plan_print_header(const struct mp_plan_req *q, int split)
{
    const struct mp_model *m = &q->model;
    printf("# moeperf-plan: %s (H %d, D %d, E %d, top-%d, %d shared, %d MoE layers) on %s\n",
           m->name, m->hidden, m->ffn, m->experts, m->topk, m->shared, m->layers, q->cluster.name);
    printf("# SLO: p99 token %s, p99 layer %s; target %.0f tokens/s; at most %d GPUs\n",
           q->slo_token_ms > 0 ? "set" : "none", q->slo_layer_us > 0 ? "set" : "none",
           q->throughput, q->max_gpus);
    if (q->slo_token_ms > 0 || q->slo_layer_us > 0)
        printf("#   token p99 <= %.2f ms, layer p99 <= %.1f us (0 = not bounded)\n",
               q->slo_token_ms, q->slo_layer_us);
    printf("# token_ms: the whole decode step per output token at %ld tokens of context: "
           "attention,\n"
           "# dense layers, LM head, small kernels, host and the MoE layers (layers × layer time;\n"
           "# docs/planning.md, \"What a step includes\"); layer_us: one MoE layer%s.\n",
           q->context, split ? " (of one micro-batch where two overlap)" : "");
    print_memory_header(q);
    print_network_header(&q->cluster);
}

/* The cheapest plan `best` of c[0..n): its layout, setup and cost, the batch cap of its setup,
 * the remedies and dedup modes at its layout and batch, and replicas against batch. */
static void print_cheapest(const struct mp_plan_cand *c, int n, int best)
{
    const struct mp_plan_cand *b = &c[best];
    char pl[64];
    mp_plan_remedy(b, pl, sizeof pl);
    printf("cheapest plan: tp%dep%d, %s, batch %ld × %ld replica(s) = %ld GPUs, "
           "p99 token %.2f ms, %.0f tokens/s, %.1f GB per GPU (weights %.1f, KV cache "
           "%.1f)\n",
           b->tp, b->ep, pl, b->batch, b->dp, b->gpus, b->token_p99_ms,
           b->replica_tps * b->dp, b->mem.total / 1e9, b->mem.weights / 1e9,
           b->mem.kv / 1e9);
    long cap = mp_plan_batch_cap(c, n, b);
    if (cap > 0)
        printf("batch cap for tp%dep%d %s: %ld (the largest batch with comm/ffn <= 1)\n",
               b->tp, b->ep, pl, cap);
    else
        printf("batch cap for tp%dep%d %s: none (network-bound at every batch)\n", b->tp,
               b->ep, pl);
    print_remedies(c, n, b);
    print_dedup(c, n, b);
    char rvb[256];
    for (int twice = 1; twice >= 0; twice--)
        if (mp_plan_replicas_vs_batch(c, n, best, twice, rvb, sizeof rvb) >= 0)
            printf("replicas vs batch: %s\n", rvb);
}

/* The shape over batch of the setup of `ref` (the plan, else the first candidate), then of
 * contiguous placement without overlap, dedup pair, at its layout beside it when that differs. */
static void print_over_batch(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *ref)
{
    for (int pass = 0; ref && pass < 2; pass++) {
        /* the chosen setup, then contiguous placement without overlap beside it */
        struct mp_plan_cand like = *ref;
        if (pass == 1) {
            if (ref->replicate == 0 && ref->eplb == 0 && ref->overlap <= 1 &&
                ref->dedup == MP_DEDUP_PAIR)
                break;
            like.replicate = like.eplb = 0;
            like.overlap = 1;
            like.dedup = MP_DEDUP_PAIR;
        }
        char pl[64];
        printf("\ntp%dep%d %s over batch:\n", like.tp, like.ep,
               mp_plan_remedy(&like, pl, sizeof pl));
        print_cand_header();
        for (int i = 0; i < n; i++)
            if (mp_plan_same_setup(&c[i], &like))
                print_cand(&c[i]);
    }
}

/* The ranked table (the first 12 by mp_plan_by_cost), then the shape of the best layout over
 * batch; nothing when out of memory. */
static void print_ranked(const struct mp_plan_cand *c, int n, int best)
{
    struct mp_plan_cand *sorted = malloc((size_t)(n > 0 ? n : 1) * sizeof *sorted);
    if (sorted) {
        memcpy(sorted, c, (size_t)n * sizeof *sorted);
        qsort(sorted, (size_t)n, sizeof *sorted, mp_plan_by_cost);
        printf("\nranked (fewest GPUs meeting the SLO first):\n");
        print_cand_header();
        for (int i = 0; i < n && i < 12; i++)
            print_cand(&sorted[i]);
        print_over_batch(c, n, best >= 0 ? &c[best] : n > 0 ? &c[0] : NULL);
    }
    free(sorted);
}

/* How far a candidate's p99 is from the SLO: the larger of its token and layer p99 over their
 * bounds (1 or less: within; 0 without an SLO). */
static double slo_excess(const struct mp_plan_req *q, const struct mp_plan_cand *a)
{
    double x = 0;
    if (q->slo_token_ms > 0)
        x = a->token_p99_ms / q->slo_token_ms;
    if (q->slo_layer_us > 0 && a->layer_p99_us / q->slo_layer_us > x)
        x = a->layer_p99_us / q->slo_layer_us;
    return x;
}

/* No plan: the candidate that comes closest, and what it misses by. Among those that fit in
 * memory, one that meets the SLO with the fewest GPUs (then only --max-gpus stands in the way),
 * else the one nearest the SLO; when none fits, print_dropped names the least memory needed. */
static void print_closest(const struct mp_plan_req *q, const struct mp_plan_cand *c, int n)
{
    int near = -1, cheap = -1;
    for (int i = 0; i < n; i++) {
        if (!c[i].fits)
            continue;
        if (c[i].slo_ok && (cheap < 0 || c[i].gpus < c[cheap].gpus))
            cheap = i;
        if (near < 0 || slo_excess(q, &c[i]) < slo_excess(q, &c[near]))
            near = i;
    }
    char pl[64];
    if (cheap >= 0) {
        const struct mp_plan_cand *a = &c[cheap];
        printf("closest: tp%dep%d %s batch %ld meets the SLO (p99 token %.2f ms) but needs %ld GPUs "
               "(%ld replica(s)) for the target throughput, above --max-gpus %d\n",
               a->tp, a->ep, mp_plan_remedy(a, pl, sizeof pl), a->batch, a->token_p99_ms, a->gpus,
               a->dp, q->max_gpus);
    } else if (near >= 0) {
        const struct mp_plan_cand *a = &c[near];
        int by_layer = q->slo_layer_us > 0 && (q->slo_token_ms <= 0 ||
                                               a->layer_p99_us / q->slo_layer_us >
                                                   a->token_p99_ms / q->slo_token_ms);
        if (by_layer)
            printf("closest: tp%dep%d %s batch %ld, %ld GPUs: p99 layer %.1f µs against "
                   "--slo-layer-us %g (%.2f× over); no candidate within %d GPUs is faster\n",
                   a->tp, a->ep, mp_plan_remedy(a, pl, sizeof pl), a->batch, a->gpus,
                   a->layer_p99_us, q->slo_layer_us, slo_excess(q, a), q->max_gpus);
        else
            printf("closest: tp%dep%d %s batch %ld, %ld GPUs: p99 token %.2f ms against "
                   "--slo-token-ms %g (%.2f× over); no candidate within %d GPUs is faster\n",
                   a->tp, a->ep, mp_plan_remedy(a, pl, sizeof pl), a->batch, a->gpus,
                   a->token_p99_ms, q->slo_token_ms, slo_excess(q, a), q->max_gpus);
    }
}

void plan_print_findings(const struct mp_plan_req *q, const struct mp_plan_cand *c, int n,
                         int best, int quiet)
{
    if (best >= 0)
        print_cheapest(c, n, best);
    else {
        printf("no candidate meets the SLO and fits in memory within %d GPUs\n", q->max_gpus);
        print_closest(q, c, n);
    }
    print_dropped(q, c, n, best);
    /* the ranked table, then the shape of the best layout over batch */
    if (!quiet)
        print_ranked(c, n, best);
}
