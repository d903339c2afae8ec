/* serving_plan.c - a serving workload's prefill and decode pools, or one co-located pool (see
 * serving_plan.h, docs/planning.md "Serving a workload"). */
#include "serving_plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "error.h"
#include "dtype.h"
#include "gpumem.h"
#include "step.h"

/* Iterations of the model a prefill candidate runs: at thousands of tokens per rank each draw's
 * per-rank loads lie close to their mean, and drawing the routing of every token is most of a
 * prefill candidate's cost. */
#define PREFILL_ITERS 2

double mp_mg1_wait(double lambda, double m1, double m2)
{
    double rho = lambda * m1;
    return rho >= 1 ? INFINITY : rho <= 0 ? 0 : lambda * m2 / (2 * (1 - rho));
}

void mp_serving_moments(struct mp_serving_req *w)
{
    double e = 0, o = 0, e2 = 0;
    w->isl_max = 0;
    for (int i = 0; i < w->nlen; i++) {
        e += w->p[i] * w->isls[i];
        o += w->p[i] * w->osls[i];
        e2 += w->p[i] * (double)w->isls[i] * w->isls[i];
        w->isl_max = w->isls[i] > w->isl_max ? w->isls[i] : w->isl_max;
    }
    w->isl_mean = e;
    w->osl_mean = o;
    w->isl_sq_mean = e2;
    w->isl = lround(e);
    w->osl = lround(o);
}

double mp_serving_decode_context(const struct mp_serving_req *w)
{
    double num = 0, den = 0;
    for (int i = 0; i < w->nlen; i++) {
        num += w->p[i] * w->osls[i] * (double)(w->isls[i] + w->osls[i]);
        den += w->p[i] * w->osls[i];
    }
    return den > 0 ? num / den : 0;
}

double mp_serving_prefill_context(const struct mp_serving_req *w)
{
    return w->isl_mean > 0 ? w->isl_sq_mean / w->isl_mean : 0;
}

/* The KV cache of a request of `isl` tokens (the mean: every attention layer, one copy: the KV
 * heads of the model, kv_bytes an element) into *bytes, and its transfer from the prefill pool's
 * tp GPUs of the request's EP rank, each sending its share over its own NIC at inter_bw ·
 * inter_eff after one inter-node latency (SGLang and DeepSeek move it by RDMA, layer by layer),
 * into *ms; both linear in isl, so the mean's are the means. */
static void kv_transfer(const struct mp_plan_req *q, int tp, double isl, double *bytes, double *ms)
{
    const struct mp_model *m = &q->model;
    const struct mp_cluster *c = &q->cluster;
    *bytes = isl * m->attn_layers * m->kv_heads * m->kv_head_dim * q->kv_bytes;
    double bw = c->inter_bw * c->inter_eff * (tp > 0 ? tp : 1);
    *ms = bw > 0 ? (*bytes / bw * 1e6 + c->inter_lat_us) / 1e3 : INFINITY;
}

/* The passes a prompt spans on average at `chunk` (0: whole prompts): ⌈isl / piece⌉, piece the
 * chunk or the prompt; 0 when a pass of `tokens` per EP rank does not hold every class's piece
 * (the candidate is not weighed). */
static double prompt_passes(const struct mp_serving_req *w, long chunk, long tokens)
{
    double passes = 0;
    for (int i = 0; i < w->nlen; i++) {
        long isl = w->isls[i], piece = chunk > 0 && chunk < isl ? chunk : isl;
        if (tokens < piece)
            return 0;
        passes += w->p[i] * ceil((double)isl / piece);
    }
    return passes;
}

/* The first two moments (s, s²) of the seconds one instance of prefill candidate c (its batch the
 * prompt tokens of a pass, prefill_req) spends per prompt when its passes are full: the pass
 * time over the prompts a pass holds, S·isl / batch. */
static void prompt_service(const struct mp_plan_cand *c, const struct mp_serving_req *w,
                           double *m1, double *m2)
{
    double per = c->token_ms / 1e3 / (double)c->batch;
    *m1 = per * w->isl_mean;
    *m2 = per * per * w->isl_sq_mean;
}

/* How prefill candidate c serves workload w on the fewest instances whose mean TTFT (the M/G/1
 * wait, the prompt's passes and `extra_ms`, the KV transfer) stays within the SLO, or at most
 * MP_SERVING_MAX_UTIL busy without one: 0 when none does (ttft_ms then the floor with no queue). */
static int serve_prefill(const struct mp_plan_cand *c, const struct mp_serving_req *w, long chunk,
                         double extra_ms, struct mp_prefill_serve *s)
{
    memset(s, 0, sizeof *s);
    s->passes = prompt_passes(w, chunk, c->batch / c->ep);
    if (!(s->passes > 0) || !(c->token_ms > 0))
        return 0;
    double m1, m2, floor_ms = s->passes * c->token_ms + extra_ms;
    prompt_service(c, w, &m1, &m2);
    s->ttft_ms = floor_ms;
    double need;
    if (w->slo_ttft_ms > 0) {
        if (floor_ms >= w->slo_ttft_ms)
            return 0;
        /* W ≤ X ⇔ (r/I)·m2 ≤ 2X·(1 − r·m1/I) ⇔ I ≥ r·(m1 + m2 / (2X)), r the rate */
        double slack = (w->slo_ttft_ms - floor_ms) / 1e3;
        need = ceil(w->rate * (m1 + m2 / (2 * slack)));
    } else {
        need = ceil(w->rate * m1 / MP_SERVING_MAX_UTIL);
    }
    if (!(need >= 1))
        need = 1;
    s->instances = need > MP_PLAN_MAX_REPLICAS ? MP_PLAN_MAX_REPLICAS : (long)need;
    s->gpus = s->instances * c->tp * c->ep;
    s->util = w->rate * m1 / s->instances;
    s->queue_ms = mp_mg1_wait(w->rate / s->instances, m1, m2) * 1e3;
    s->ttft_ms = s->queue_ms + floor_ms;
    return 1;
}

/* The request dq as a prefill request over `ep` alone at prompt length isl and `chunk`: batches
 * tokens · ep for each token count of w (into batches[]), no targets (the pool sizes itself). */
static struct mp_plan_req prefill_req(const struct mp_plan_req *dq, const struct mp_serving_req *w,
                                      const int *ep, long chunk, long *batches)
{
    struct mp_plan_req pq = *dq;
    pq.phase = MP_PHASE_PREFILL;
    pq.context = lround(mp_serving_prefill_context(w));
    pq.chunk = chunk;
    pq.eps = ep;
    pq.nep = 1;
    pq.seq = 1;
    for (int i = 0; i < w->ntokens; i++)
        batches[i] = w->tokens[i] * *ep;
    pq.batches = batches;
    pq.nbatch = w->ntokens;
    pq.throughput = 0;
    pq.slo_token_ms = pq.slo_layer_us = 0;
    pq.offload = 0;
    pq.iters = dq->iters < PREFILL_ITERS ? dq->iters : PREFILL_ITERS;
    return pq;
}

/* The TP sizes of dq under which layout tp×ep can hold the weights alone (its lightest weight
 * dtype, the fewest experts a rank holds), into tps[]; their count. */
static int tps_that_fit(const struct mp_plan_req *dq, int ep, int *tps)
{
    double usable = mp_gpumem_usable(&dq->cluster, dq->mem_reserve);
    int light = MP_DTYPE_BF16, n = 0;
    for (int i = 0; i < dq->nwdtype; i++)
        light = dq->wdtypes[i] == MP_DTYPE_FP8 ? MP_DTYPE_FP8 : light;
    for (int i = 0; i < dq->ntp; i++) {
        struct mp_gpumem_layout ml = {.tp = dq->tps[i], .ep = ep,
                                      .max_local = (dq->model.experts + ep - 1) / ep,
                                      .weight_bytes = dq->weight_bytes, .kv_bytes = dq->kv_bytes,
                                      .nonexpert = dq->nonexpert,
                                      .expert_dtype = (enum mp_dtype)light};
        struct mp_gpumem g;
        mp_gpumem_compute(&dq->model, &ml, &g);
        if (!(usable > 0) || g.weights <= usable)
            tps[n++] = dq->tps[i];
    }
    return n;
}

/* The request's dedup forms with node added when absent (DeepEP's normal kernels, the form
 * prefill deployments run), into dd[] (room for ndedup + 1). */
static void prefill_dedups(struct mp_plan_req *pq, int *dd)
{
    int has_node = 0, n = pq->ndedup > 0 ? pq->ndedup : 0;
    for (int i = 0; i < n; i++) {
        dd[i] = pq->dedups[i];
        has_node |= dd[i] == MP_DEDUP_NODE;
    }
    if (n == 0)
        dd[n++] = MP_DEDUP_PAIR;
    if (!has_node)
        dd[n++] = MP_DEDUP_NODE;
    pq->dedups = dd;
    pq->ndedup = n;
}

/* A weighed prefill candidate and the chunk it ran at. */
struct pcand {
    struct mp_plan_cand c;
    long chunk;
};

/* Every prefill candidate of dq's layouts (each EP size with its own batches) at every chunk of
 * w, into a heap array *out of *n. MP_OK or the model's error. */
static int prefill_candidates(const struct mp_plan_req *dq, const struct mp_serving_req *w,
                              struct pcand **out, int *n)
{
    *out = NULL;
    *n = 0;
    long *batches = malloc((size_t)(w->ntokens > 0 ? w->ntokens : 1) * sizeof *batches);
    int *dd = malloc((size_t)(dq->ndedup + 2) * sizeof *dd);
    int *tps = malloc((size_t)(dq->ntp > 0 ? dq->ntp : 1) * sizeof *tps);
    if (!batches || !dd || !tps) {
        free(batches);
        free(dd);
        free(tps);
        return MP_ERR_RUNTIME;
    }
    int rc = MP_OK;
    for (int e = 0; e < dq->nep && rc == MP_OK; e++)
        for (int k = 0; k < w->nchunk && rc == MP_OK; k++) {
            struct mp_plan_req pq = prefill_req(dq, w, &dq->eps[e], w->chunks[k], batches);
            prefill_dedups(&pq, dd);
            pq.tps = tps; /* a layout whose weights alone overflow is never weighed */
            if (dq->eps[e] > dq->model.experts || (pq.ntp = tps_that_fit(dq, dq->eps[e], tps)) == 0)
                continue;
            struct mp_plan_cand *c = NULL;
            int m = 0;
            if ((rc = mp_plan_evaluate(&pq, &c, &m)) != MP_OK)
                break;
            struct pcand *grown = realloc(*out, (size_t)(*n + m + 1) * sizeof *grown);
            if (!grown) {
                free(c);
                rc = MP_ERR_RUNTIME;
                break;
            }
            *out = grown;
            for (int i = 0; i < m; i++)
                (*out)[(*n)++] = (struct pcand){c[i], w->chunks[k]};
            free(c);
        }
    free(batches);
    free(dd);
    free(tps);
    return rc;
}

/* The cheapest prefill pool (fits in memory, within --max-gpus and the TTFT SLO: fewest GPUs,
 * then lowest TTFT) into *pool, and the best shortfall into why[] when there is none. */
static void pick_prefill(const struct mp_plan_req *dq, const struct pcand *pc, int npc,
                         const struct mp_serving_req *w, struct mp_prefill_pool *pool,
                         char *why, size_t wlen)
{
    memset(pool, 0, sizeof *pool);
    double best_floor = INFINITY;
    long least_gpus = 0;
    const struct pcand *floor_at = NULL, *gpus_at = NULL;
    for (int i = 0; i < npc; i++) {
        const struct mp_plan_cand *c = &pc[i].c;
        if (!c->fits)
            continue;
        double kv_bytes, kv_ms;
        kv_transfer(dq, c->tp, w->isl_mean, &kv_bytes, &kv_ms);
        struct mp_prefill_serve s;
        int ok = serve_prefill(c, w, pc[i].chunk, kv_ms, &s);
        if (!ok) {
            if (s.passes > 0 && s.ttft_ms < best_floor) {
                best_floor = s.ttft_ms;
                floor_at = &pc[i];
            }
            continue;
        }
        if (s.gpus > dq->max_gpus) {
            if (!gpus_at || s.gpus < least_gpus) {
                least_gpus = s.gpus;
                gpus_at = &pc[i];
            }
            continue;
        }
        if (!pool->found || s.gpus < pool->s.gpus ||
            (s.gpus == pool->s.gpus && s.ttft_ms < pool->s.ttft_ms)) {
            pool->found = 1;
            pool->c = *c;
            pool->chunk = pc[i].chunk;
            pool->s = s;
            pool->input_tok_s_gpu = c->replica_tps / (c->tp * c->ep);
        }
    }
    if (pool->found)
        return;
    if (gpus_at)
        snprintf(why, wlen, "the prefill pool needs %ld GPUs at the least (tp%dep%d at %ld tokens "
                 "per GPU), more than --max-gpus %d", least_gpus, gpus_at->c.tp, gpus_at->c.ep,
                 gpus_at->c.batch / gpus_at->c.ep, dq->max_gpus);
    else if (floor_at)
        snprintf(why, wlen, "no prefill pass reaches the TTFT SLO of %g ms: the fastest, tp%dep%d "
                 "at %ld tokens per GPU, needs %.1f ms with no queue (its passes and the KV "
                 "transfer), %.2fx the SLO", w->slo_ttft_ms, floor_at->c.tp, floor_at->c.ep,
                 floor_at->c.batch / floor_at->c.ep, best_floor, best_floor / w->slo_ttft_ms);
    else
        snprintf(why, wlen, "no prefill candidate fits in memory and holds a prompt of %ld tokens "
                 "(--prefill-tokens below the prompt need --chunk)", w->isl_max);
}

/* Whether n co-located instances of decode step d and prefill pass p serve w: each instance
 * takes rate/n requests, its prefill passes a share f_p = λ·s_p of its time and its decode steps
 * f_d = λ·osl·step/batch; ρ = f_p + f_d; the tokens' p99 gap is the step's over 1 − f_p and the
 * TTFT the M/D/1 wait at ρ plus the prompt's passes. */
static int coloc_serves(const struct mp_plan_req *dq, const struct mp_plan_cand *d,
                        const struct mp_plan_cand *p, long chunk, const struct mp_serving_req *w,
                        long n, struct mp_colocated_pool *out)
{
    double lam = w->rate / n, m1, m2;
    prompt_service(p, w, &m1, &m2);
    double fp = lam * m1,
           fd = lam * w->osl_mean * (d->token_ms / 1e3) / ((double)d->batch * dq->seq);
    double rho = fp + fd, passes = prompt_passes(w, chunk, p->batch / p->ep);
    if (!(passes > 0) || rho >= (w->slo_ttft_ms > 0 ? 1 : MP_SERVING_MAX_UTIL))
        return 0;
    /* a pass between two of a sequence's steps holds its next token back a whole pass: the p99
     * gap is the step's and a pass once more than 1% of the gaps hold one (passes come f_p / S a
     * second, steps (1 − f_p) / step), else the steps' p99 spread over the time left to them */
    double pass_s = p->token_ms / 1e3, step_s = d->token_ms / 1e3;
    double held = pass_s > 0 ? fp * step_s / (pass_s * (1 - fp)) : 0;
    double tpot = held > 0.01 ? d->token_p99_ms + p->token_ms : d->token_p99_ms / (1 - fp);
    /* the decode steps are load the prompts queue behind: the wait at ρ, the prompts' moments */
    double queue = rho >= 1 ? INFINITY : lam * m2 / (2 * (1 - rho)) * 1e3;
    double ttft = queue + passes * p->token_ms;
    if ((dq->slo_token_ms > 0 && tpot > dq->slo_token_ms) ||
        (w->slo_ttft_ms > 0 && ttft > w->slo_ttft_ms))
        return 0;
    if (out) {
        out->s = (struct mp_prefill_serve){.instances = n, .gpus = n * d->tp * d->ep,
                                           .util = rho, .queue_ms = queue, .passes = passes,
                                           .ttft_ms = ttft};
        out->tpot_ms = tpot;
        out->prefill_share = fp;
    }
    return 1;
}

/* The cheapest co-located pool: each decode candidate that fits with each prefill pass of its
 * layout and weight dtype whose KV cache fits beside the decode batch's, on the fewest instances
 * that serve w (a bisection: every condition only eases as instances are added); fewest GPUs,
 * then the lowest p99 token gap. */
static void pick_colocated(const struct mp_plan_req *dq, const struct mp_plan_cand *dc, int nd,
                           const struct pcand *pc, int npc, const struct mp_serving_req *w,
                           struct mp_colocated_pool *pool)
{
    memset(pool, 0, sizeof *pool);
    double usable = mp_gpumem_usable(&dq->cluster, dq->mem_reserve);
    for (int i = 0; i < nd; i++) {
        const struct mp_plan_cand *d = &dc[i];
        if (!d->fits || !(d->token_ms > 0))
            continue;
        for (int j = 0; j < npc; j++) {
            const struct pcand *p = &pc[j];
            if (p->c.tp != d->tp || p->c.ep != d->ep || p->c.weight_dtype != d->weight_dtype ||
                !(p->c.token_ms > 0) || (usable > 0 && d->mem.total + p->c.mem.kv > usable))
                continue;
            long hi = dq->max_gpus / (d->tp * d->ep), lo = 1;
            if (hi < 1 || !coloc_serves(dq, d, &p->c, p->chunk, w, hi, NULL))
                continue;
            while (lo < hi) {
                long mid = lo + (hi - lo) / 2;
                if (coloc_serves(dq, d, &p->c, p->chunk, w, mid, NULL))
                    hi = mid;
                else
                    lo = mid + 1;
            }
            struct mp_colocated_pool cand = {.found = 1, .d = *d, .p = p->c, .chunk = p->chunk};
            coloc_serves(dq, d, &p->c, p->chunk, w, hi, &cand);
            cand.mem_gb_per_gpu = (d->mem.total + p->c.mem.kv) / 1e9;
            if (!pool->found || cand.s.gpus < pool->s.gpus ||
                (cand.s.gpus == pool->s.gpus && cand.tpot_ms < pool->tpot_ms))
                *pool = cand;
        }
    }
}

/* Request q narrowed to candidate c's layout and setup (one entry per list; lists[] holds them). */
static struct mp_plan_req narrowed(const struct mp_plan_req *q, const struct mp_plan_cand *c,
                                   int lists[8])
{
    struct mp_plan_req n = *q;
    lists[0] = c->tp;
    lists[1] = c->ep;
    lists[2] = c->replicate;
    lists[3] = c->eplb;
    lists[4] = c->overlap;
    lists[5] = c->dedup;
    lists[6] = c->weight_dtype;
    lists[7] = c->dispatch_dtype;
    n.tps = &lists[0];
    n.ntp = 1;
    n.eps = &lists[1];
    n.nep = 1;
    n.reps = c->eplb > 0 ? NULL : &lists[2];
    n.nrep = c->eplb > 0 ? 0 : 1;
    n.eplbs = &lists[3];
    n.neplb = c->eplb > 0;
    n.overlaps = &lists[4];
    n.noverlap = 1;
    n.dedups = &lists[5];
    n.ndedup = 1;
    n.wdtypes = &lists[6];
    n.nwdtype = 1;
    n.ddtypes = &lists[7];
    n.nddtype = 1;
    n.micro_batches = &c->micro_batches;
    n.nmicro = 1;
    return n;
}

/* The GPUs each pool needs at isl + osl = the asked total (the mean lengths') split at
 * input/output ratios 1/4, 1, 4, 16 and 64, every request alike, on the chosen pools' layouts and
 * setups (every token count and batch again). */
static int split_curve(const struct mp_plan_req *dq, const struct mp_serving_req *w,
                       struct mp_serving_answer *a)
{
    static const double ratio[MP_SERVING_SPLIT] = {0.25, 1, 4, 16, 64};
    long total = w->isl + w->osl;
    int dl[8], pl[8], rc = MP_OK;
    long *batches = malloc((size_t)(w->ntokens > 0 ? w->ntokens : 1) * sizeof *batches);
    if (!batches)
        return MP_ERR_RUNTIME;
    for (int r = 0; r < MP_SERVING_SPLIT && rc == MP_OK; r++) {
        struct mp_split_point *sp = &a->split[a->nsplit++];
        sp->isl = lround(total * ratio[r] / (1 + ratio[r]));
        sp->isl = sp->isl < 1 ? 1 : sp->isl >= total ? total - 1 : sp->isl;
        sp->osl = total - sp->isl;
        sp->prefill_gpus = sp->decode_gpus = -1;
        static const double one = 1;
        struct mp_serving_req w2 = *w;
        w2.isls = &sp->isl;
        w2.osls = &sp->osl;
        w2.p = &one;
        w2.nlen = 1;
        mp_serving_moments(&w2);
        w2.chunks = &a->prefill.chunk;
        w2.nchunk = 1;
        struct mp_plan_req pq = narrowed(dq, &a->prefill.c, pl);
        struct mp_plan_req pq2 = prefill_req(&pq, &w2, pq.eps, a->prefill.chunk, batches);
        struct mp_plan_cand *c = NULL;
        int n = 0;
        if ((rc = mp_plan_evaluate(&pq2, &c, &n)) != MP_OK)
            break;
        struct pcand *pc = malloc((size_t)(n > 0 ? n : 1) * sizeof *pc);
        for (int i = 0; pc && i < n; i++)
            pc[i] = (struct pcand){c[i], a->prefill.chunk};
        free(c);
        if (!pc) {
            rc = MP_ERR_RUNTIME;
            break;
        }
        struct mp_prefill_pool pool;
        char why[256];
        pick_prefill(dq, pc, n, &w2, &pool, why, sizeof why);
        free(pc);
        if (pool.found)
            sp->prefill_gpus = pool.s.gpus;
        struct mp_plan_req dq2 = narrowed(dq, &a->decode, dl);
        dq2.context = sp->isl + sp->osl;
        dq2.throughput = w->rate * sp->osl;
        if ((rc = mp_plan_evaluate(&dq2, &c, &n)) != MP_OK)
            break;
        int best = mp_plan_best(c, n);
        if (best >= 0)
            sp->decode_gpus = c[best].gpus;
        free(c);
    }
    free(batches);
    return rc;
}

int mp_serving_plan(const struct mp_plan_req *dq, const struct mp_plan_cand *dc, int nd,
                    int dbest, const struct mp_serving_req *w, struct mp_serving_answer *a)
{
    memset(a, 0, sizeof *a);
    a->choice = "none";
    struct pcand *pc = NULL;
    int npc = 0, rc = prefill_candidates(dq, w, &pc, &npc);
    if (rc != MP_OK) {
        free(pc);
        return rc;
    }
    char pwhy[256] = "";
    pick_prefill(dq, pc, npc, w, &a->prefill, pwhy, sizeof pwhy);
    a->decode_found = dbest >= 0;
    if (a->decode_found)
        a->decode = dc[dbest];
    if (a->prefill.found)
        kv_transfer(dq, a->prefill.c.tp, w->isl_mean, &a->kv_bytes, &a->kv_ms);
    pick_colocated(dq, dc, nd, pc, npc, w, &a->coloc);
    free(pc);
    long disagg = a->prefill.found && a->decode_found ? a->prefill.s.gpus + a->decode.gpus : 0;
    if (a->coloc.found && (!disagg || a->coloc.s.gpus < disagg)) {
        a->choice = "colocated";
        a->gpus = a->coloc.s.gpus;
        a->ttft_ms = a->coloc.s.ttft_ms;
        a->tpot_ms = a->coloc.tpot_ms;
    } else if (disagg) {
        a->choice = "disaggregated";
        a->gpus = disagg;
        a->ttft_ms = a->prefill.s.ttft_ms;
        a->tpot_ms = a->decode.token_p99_ms;
    } else if (!a->prefill.found) {
        snprintf(a->why, sizeof a->why, "%s; and no co-located pool serves it", pwhy);
    } else {
        snprintf(a->why, sizeof a->why, "no decode candidate meets the per-token SLO and fits "
                 "within --max-gpus %d at %g output tokens/s (the decode plan above names the "
                 "closest); and no co-located pool serves it", dq->max_gpus, dq->throughput);
    }
    if (a->gpus > 0) {
        a->out_tok_s_gpu = w->rate * w->osl_mean / a->gpus;
        a->usd_per_mtok = dq->gpu_hour_price > 0 && a->out_tok_s_gpu > 0
                              ? dq->gpu_hour_price / 3600.0 / a->out_tok_s_gpu * 1e6
                              : NAN;
    } else {
        a->usd_per_mtok = NAN;
    }
    if (a->prefill.found && a->decode_found)
        rc = split_curve(dq, w, a);
    return rc;
}
