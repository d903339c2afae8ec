/* capacity_plan.c - the capacity planner's evaluation and findings (see capacity_plan.h, docs/planning.md). */
#include "capacity_plan.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedup.h"
#include "error.h"
#include "placement.h"
#include "stats.h"
#include "vlayer.h"

const char *mp_plan_placement(const struct mp_plan_cand *c, char *buf, unsigned long len)
{
    if (c->eplb > 0)
        snprintf(buf, len, "eplb:%d", c->eplb);
    else if (c->replicate > 0)
        snprintf(buf, len, "replicate-hot:%d", c->replicate);
    else
        snprintf(buf, len, "contiguous");
    return buf;
}

const char *mp_plan_remedy(const struct mp_plan_cand *c, char *buf, unsigned long len)
{
    char pl[32];
    mp_plan_placement(c, pl, sizeof pl);
    int placed = c->replicate > 0 || c->eplb > 0;
    const char *part[6] = {placed ? pl : NULL, NULL, NULL, NULL, NULL, NULL};
    char ovl[32], dd[32];
    if (c->overlap > 1) {
        snprintf(ovl, sizeof ovl, "overlap %d", c->overlap);
        part[1] = ovl;
    }
    if (c->dedup != MP_DEDUP_PAIR) {
        snprintf(dd, sizeof dd, "dedup %s", mp_dedup_choices[c->dedup]);
        part[2] = dd;
    }
    if (c->weight_dtype == MP_DTYPE_FP8)
        part[3] = "fp8 weights";
    if (c->dispatch_dtype == MP_DTYPE_FP8)
        part[4] = "fp8 dispatch";
    if (c->micro_batches > 1)
        part[5] = "two micro-batches";
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < 6; i++)
        if (part[i] && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? " + " : "", part[i]);
    if (!used)
        snprintf(buf, len, "%s", pl);
    return buf;
}

/* order[0..k) sorted by layer_us, fastest first; ties keep their order (insertion sort: k is a
 * handful). */
static void sort_fastest(const struct mp_plan_cand *c, int *order, int k)
{
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && c[order[j]].layer_us < c[order[j - 1]].layer_us; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

/* Overlap 0 and 1 both mean no pipeline. */
static int depth(const struct mp_plan_cand *c) { return c->overlap > 1 ? c->overlap : 1; }

int mp_plan_same_setup(const struct mp_plan_cand *a, const struct mp_plan_cand *b)
{
    return a->tp == b->tp && a->ep == b->ep && a->replicate == b->replicate &&
           a->eplb == b->eplb && depth(a) == depth(b) && a->dedup == b->dedup &&
           a->weight_dtype == b->weight_dtype && a->dispatch_dtype == b->dispatch_dtype &&
           a->micro_batches == b->micro_batches;
}

int mp_plan_remedies(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *at,
                     int *base, int *order, int max)
{
    int k = 0;
    *base = -1;
    for (int i = 0; i < n; i++) {
        if (c[i].tp != at->tp || c[i].ep != at->ep || c[i].batch != at->batch)
            continue;
        if (c[i].micro_batches != at->micro_batches)
            continue;
        if (c[i].replicate == 0 && c[i].eplb == 0 && depth(&c[i]) == 1 &&
            c[i].dedup == MP_DEDUP_PAIR && c[i].weight_dtype == MP_DTYPE_BF16 &&
            c[i].dispatch_dtype == MP_DTYPE_BF16)
            *base = i;
        else if (k < max)
            order[k++] = i;
    }
    sort_fastest(c, order, k);
    return k;
}

int mp_plan_dedup_modes(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *at,
                        int *order, int max)
{
    int k = 0;
    for (int i = 0; i < n && k < max; i++)
        if (c[i].tp == at->tp && c[i].ep == at->ep && c[i].batch == at->batch &&
            c[i].replicate == at->replicate && c[i].eplb == at->eplb && depth(&c[i]) == depth(at) &&
            c[i].weight_dtype == at->weight_dtype && c[i].dispatch_dtype == at->dispatch_dtype &&
            c[i].micro_batches == at->micro_batches)
            order[k++] = i;
    sort_fastest(c, order, k);
    return k;
}

/* The candidate's setup beside its layout, batch and placement. */
struct setup {
    int overlap, dedup, weight_dtype, dispatch_dtype, micro_batches;
};

/* With --expert-cache fit: the most experts per layer every EP rank of a candidate that does
 * not fit can keep resident (static: one slot more for its staging) with the rest of its memory
 * as it is, capped below the fewest experts a rank holds; 0 when offloading is off, the model
 * cannot time the candidate's cache (pipelined, deduplicated, a profile without pcie_bw) or not
 * even one slot fits. */
static int offload_slots(const struct mp_plan_req *q, const struct mp_plan_cand *c,
                         const struct mp_placement *pl, double usable, int overlap, int dedup)
{
    if (!q->offload || overlap > 1 || dedup != MP_DEDUP_PAIR || !(q->cluster.pcie_bw > 0) ||
        !(usable > 0) || pl->max_local < 2)
        return 0;
    int fewest = pl->max_local;
    for (int p = 0; p < pl->ep; p++)
        if (mp_placement_nlocal(pl, p) < fewest)
            fewest = mp_placement_nlocal(pl, p);
    int staging = q->offload_policy == MP_CACHE_STATIC;
    double per_expert = c->mem.routed / pl->max_local; /* one expert of every layer */
    double room = usable - (c->mem.total - c->mem.routed);
    long s = per_expert > 0 && room > 0 ? (long)floor(room / per_expert) - staging : 0;
    if (s >= fewest)
        s = fewest - 1;
    return s >= 1 ? (int)s : 0;
}

/* Memory per GPU of candidate c on layout ml and placement pl against the profile's usable memory:
 * c->mem, c->over and c->fits; where it does not fit and --expert-cache fit allows, the largest
 * expert cache that does (c->cache_slots, ml->max_local, and pt's cache and warm-up, so the model
 * times its fetches). */
static void fit_memory(const struct mp_plan_req *q, struct mp_gpumem_layout *ml,
                       const struct mp_placement *pl, struct mp_point *pt, struct mp_plan_cand *c)
{
    const struct mp_model *m = &q->model;
    mp_gpumem_compute(m, ml, &c->mem);
    double usable = mp_gpumem_usable(&q->cluster, q->mem_reserve);
    c->over = mp_gpumem_over(&c->mem, usable);
    c->fits = !strcmp(c->over, "none");
    c->cache_slots = 0;
    int resident = c->fits ? 0 : offload_slots(q, c, pl, usable, pt->overlap, pt->dedup);
    if (resident > 0) { /* the largest cache that fits, its fetches timed by the model */
        int staging = q->offload_policy == MP_CACHE_STATIC;
        ml->max_local = resident + staging;
        mp_gpumem_compute(m, ml, &c->mem);
        c->over = mp_gpumem_over(&c->mem, usable);
        c->fits = !strcmp(c->over, "none");
        c->cache_slots = resident;
        pt->cache = (struct mp_cache_spec){.slots = resident, .policy = q->offload_policy};
        pt->warmup = MP_ROUTING_POOL_DRAWS; /* the timed iterations in steady state */
    }
}

/* Candidate c's times from the model's iterations `res` (freed here) of its layout tp×ep at
 * `batch` with setup su: the layer's medians and p99, the whole decode step's median, p99 and
 * parts, its replica's tokens/s, then its targets (mp_plan_apply_targets). MP_OK, or
 * MP_ERR_RUNTIME when out of memory or the step cannot be modelled. */
static int record_times(const struct mp_plan_req *q, int tp, int ep, long batch, struct setup su,
                        struct mp_point_result *res, struct mp_plan_cand *c)
{
    const struct mp_model *m = &q->model;
    int mb = su.micro_batches > 1 ? su.micro_batches : 1;
    int n = res->iters;
    double tokens = (double)batch * q->seq;
    struct mp_step_spec step = {.tp = tp, .ep = ep, .tokens = tokens / ep,
                                .context = (double)q->context, .micro_batches = mb,
                                .weight_dtype = su.weight_dtype, .phase = q->phase,
                                .chunk = (double)q->chunk,
                                .pair_dispatch = su.dedup == MP_DEDUP_PAIR};
    struct mp_step_result st;
    double *v = malloc((size_t)n * sizeof *v);
    if (!v || mp_step_of_point(&q->cluster, m, &step, res->metrics, n, &st) != MP_OK) {
        free(v);
        mp_point_result_free(res);
        return MP_ERR_RUNTIME;
    }
    /* the medians of the metrics a candidate keeps (the layer time's with its p99) */
    struct mp_summary s;
    struct mp_iter_metrics med = {0}, *M = &med;
    static const size_t kept[] = {
        offsetof(struct mp_iter_metrics, ffn_us), offsetof(struct mp_iter_metrics, comm_us),
        offsetof(struct mp_iter_metrics, comm_comp_ratio),
        offsetof(struct mp_iter_metrics, bubble_ratio),
        offsetof(struct mp_iter_metrics, load_imbalance),
        offsetof(struct mp_iter_metrics, local_hit_rate),
        offsetof(struct mp_iter_metrics, cache_hit_rate)};
    for (int i = 0; i < n; i++)
        v[i] = res->metrics[i].layer_us;
    mp_summarize(v, n, &s);
    med.layer_us = s.p50;
    c->layer_p99_us = s.p99;
    for (size_t k = 0; k < sizeof kept / sizeof *kept; k++) {
        for (int i = 0; i < n; i++)
            v[i] = *(const double *)((const char *)&res->metrics[i] + kept[k]);
        *(double *)((char *)&med + kept[k]) = mp_percentile_select(v, n, 50);
    }
    free(v);
    mp_point_result_free(res);
    c->tp = tp;
    c->ep = ep;
    c->batch = batch;
    c->layer_us = M->layer_us;
    c->ffn_us = M->ffn_us;
    c->comm_us = M->comm_us;
    c->ratio = M->comm_comp_ratio;
    c->bubble = M->bubble_ratio;
    c->imbalance = M->load_imbalance;
    c->hit = M->local_hit_rate;
    c->cache_hit_rate = c->cache_slots > 0 ? M->cache_hit_rate : NAN;
    /* the whole decode step (core/cluster_model/step.h); it yields one token per sequence:
     * batch·seq tokens */
    c->token_ms = st.p50[MP_STEP_TOTAL] / 1e3;
    c->token_p99_ms = st.p99[MP_STEP_TOTAL] / 1e3;
    for (int k = 0; k < MP_STEP_NPARTS; k++)
        c->part_ms[k] = st.p50[k] / 1e3;
    c->moe_ffn_ms = st.moe_compute / 1e3; /* of the median step, as its other parts */
    c->moe_comm_ms = c->part_ms[MP_STEP_MOE] - c->moe_ffn_ms - c->part_ms[MP_STEP_OVERLAP];
    c->replica_tps = c->token_ms > 0 ? tokens / (c->token_ms / 1e3) : 0;
    mp_plan_apply_targets(q, c);
    return MP_OK;
}

/* The traffic of the last point a placement's candidates built (mp_vtraffic_build) and the
 * point it was built for, so the candidates that differ from it in their dtypes alone time the
 * same draws (the weight dtype is read by the FFN's timing alone, the dispatch dtype re-prices
 * the rows, run_point); and the rank records every candidate of the placement is timed in. */
struct traffic_slot {
    struct mp_point pt;
    struct mp_vtraffic *t; /* [P], or NULL before the first build */
    int P;
    struct mp_rank_iter *recs; /* [tp·ep] (mp_vlayer_time) */
};

static void slot_free(struct traffic_slot *s)
{
    mp_vtraffic_free(s->t, s->P);
    free(s->recs);
    memset(s, 0, sizeof *s);
}

/* 1 when mp_vtraffic_build reads the same of points a and b: every field but the weight dtype
 * (and the label, which names the point), and but the dispatch dtype too with `any_dtype`. */
static int same_traffic(const struct mp_point *a, const struct mp_point *b, int any_dtype)
{
    return a->batch == b->batch && a->seq == b->seq && a->routing == b->routing &&
           a->placement == b->placement && a->warmup == b->warmup && a->iters == b->iters &&
           a->check == b->check && a->overlap == b->overlap && a->dispatch == b->dispatch &&
           a->dispatch_arg == b->dispatch_arg && a->dedup == b->dedup &&
           (any_dtype || a->dispatch_dtype == b->dispatch_dtype) &&
           a->blocked_activations == b->blocked_activations &&
           a->blocked_weights == b->blocked_weights && a->gemm == b->gemm &&
           a->cache.slots == b->cache.slots && a->cache.policy == b->cache.policy &&
           a->graph == b->graph && a->flush_cache == b->flush_cache &&
           a->straggle_rank == b->straggle_rank && a->straggle_us == b->straggle_us;
}

/* The model's run of point pt on layout tp×ep into res (mp_vlayer_run's metrics, no rank
 * records): the traffic in `slot` when it was built for the same draws (same_traffic), re-priced
 * when only its dispatch dtype differs (mp_vtraffic_retype), else built afresh there. MP_OK, or
 * the error of building the traffic or of timing it. */
static int run_point(const struct mp_plan_req *q, int tp, int ep, const struct mp_point *pt,
                     struct traffic_slot *slot, struct mp_point_result *res)
{
    if (slot->t && !same_traffic(&slot->pt, pt, 0) && same_traffic(&slot->pt, pt, 1) &&
        mp_vtraffic_retype(slot->t, slot->P, &q->cluster, &q->model, pt) == MP_OK)
        slot->pt = *pt;
    if (!slot->t || !same_traffic(&slot->pt, pt, 0)) {
        mp_vtraffic_free(slot->t, slot->P);
        slot->t = NULL;
        slot->P = 0;
        int rc = mp_vtraffic_build(&q->cluster, &q->model, tp, ep, (uint64_t)q->seed, pt,
                                   &slot->t, &slot->P);
        if (rc != MP_OK) {
            slot->t = NULL;
            return rc;
        }
        slot->pt = *pt;
    }
    if (!slot->recs) {
        slot->recs = malloc((size_t)tp * ep * sizeof *slot->recs);
        if (!slot->recs) {
            mp_error("out of memory modelling %d ranks", tp * ep);
            return MP_ERR_RUNTIME;
        }
    }
    return mp_vlayer_time(&q->cluster, &q->model, tp, ep, pt, slot->t, slot->P, slot->recs, res);
}

/* One candidate into *c: layout tp×ep, R hot experts replicated or `slots` eplb slots (placement
 * `pl`, packed onto the profile's nodes), setup su, `batch`: its memory per GPU, the model's run
 * of the layer (run_point, through the placement's traffic slot) and the step (record_times).
 * MP_OK, or the error of the model. */
static int evaluate_one(const struct mp_plan_req *q, int tp, int ep, int R, int slots,
                        struct setup su, long batch, struct mp_placement *pl,
                        struct traffic_slot *slot, struct mp_plan_cand *c)
{
    c->replicate = R;
    c->eplb = slots;
    c->overlap = su.overlap;
    c->dedup = su.dedup;
    c->weight_dtype = su.weight_dtype;
    c->dispatch_dtype = su.dispatch_dtype;
    c->micro_batches = su.micro_batches;
    int mb = su.micro_batches > 1 ? su.micro_batches : 1; /* the layer runs one micro-batch */
    struct mp_point pt = {.batch = (batch + mb - 1) / mb, .seq = q->seq, .routing = q->routing,
                          .placement = pl,
                          .iters = q->iters, .overlap = su.overlap, .dedup = su.dedup,
                          .weight_dtype = su.weight_dtype, .dispatch_dtype = su.dispatch_dtype};
    /* a prefill pass holds its prompts' KV cache, ⌈batch · seq / context⌉ of them */
    long sequences = q->phase == MP_PHASE_PREFILL
                         ? ((long)batch * q->seq + q->context - 1) / q->context
                         : batch;
    struct mp_gpumem_layout ml = {.tp = tp, .ep = ep, .max_local = pl->max_local,
                                  .sequences = sequences, .context = q->context,
                                  .weight_bytes = q->weight_bytes, .kv_bytes = q->kv_bytes,
                                  .nonexpert = q->nonexpert,
                                  .expert_dtype = (enum mp_dtype)su.weight_dtype};
    fit_memory(q, &ml, pl, &pt, c);
    struct mp_point_result res;
    int rc = run_point(q, tp, ep, &pt, slot, &res);
    if (rc != MP_OK)
        return rc;
    return record_times(q, tp, ep, batch, su, &res, c);
}

/* The setups a request sweeps, each list at least one entry (its default when not given). */
struct sweep {
    const int *ovl, *dds, *wds, *sds, *mbs;
    int novl, ndd, nwd, nsd, nmb;
};

/* Every candidate of layout tp×ep with R hot experts replicated or `slots` eplb slots, into
 * c[0 .. novl·ndd·nwd·nsd·nmb·nbatch) in enumeration order (overlap, dedup, weight dtype,
 * dispatch dtype, micro-batches, batch, the last varying fastest): the placement built and packed
 * once, and the candidates that differ in their dtypes alone evaluated one after another on one
 * traffic (run_point). MP_OK, or the first error. */
static int evaluate_placement(const struct mp_plan_req *q, const struct sweep *w, int tp, int ep,
                              int R, int slots, struct mp_plan_cand *c)
{
    char spec[64];
    struct mp_plan_cand like = {.replicate = R, .eplb = slots};
    mp_plan_placement(&like, spec, sizeof spec);
    struct mp_placement pl;
    int rc = mp_placement_build(spec, q->model.experts, ep, q->routing->prob, &pl);
    if (rc != MP_OK)
        return rc;
    if ((rc = mp_placement_pack_nodes(&pl, tp, q->cluster.gpus_per_node)) != MP_OK) {
        mp_placement_free(&pl);
        return rc;
    }
    struct traffic_slot slot = {0};
    int ns = w->nsd * w->nmb, nb = q->nbatch, nd = w->nwd * w->nsd; /* nd: dtype pairs */
    for (int o = 0; o < w->novl && rc == MP_OK; o++)
        for (int x = 0; x < w->ndd && rc == MP_OK; x++)
            for (int mb = 0; mb < w->nmb && rc == MP_OK; mb++)
                for (int i = 0; i < nb && rc == MP_OK; i++)
                    for (int y = 0; y < nd && rc == MP_OK; y++) {
                        int v = y % w->nwd, s = y / w->nwd * w->nmb + mb;
                        struct setup su = {w->ovl[o], w->dds[x], w->wds[v], w->sds[s / w->nmb],
                                           w->mbs[mb]};
                        size_t at = (((size_t)(o * w->ndd + x) * w->nwd + v) * ns + s) * nb + i;
                        rc = evaluate_one(q, tp, ep, R, slots, su, q->batches[i], &pl, &slot,
                                          &c[at]);
                    }
    slot_free(&slot);
    mp_placement_free(&pl);
    return rc;
}

void mp_plan_apply_targets(const struct mp_plan_req *q, struct mp_plan_cand *c)
{
    double need = q->throughput > 0 && c->replica_tps > 0 ? ceil(q->throughput / c->replica_tps) : 1;
    c->dp = need < 1 ? 1 : need > MP_PLAN_MAX_REPLICAS ? MP_PLAN_MAX_REPLICAS : (long)need;
    c->gpus = (long)c->tp * c->ep * c->dp;
    c->tok_s_gpu = c->replica_tps / (c->tp * c->ep);
    /* USD per million output tokens at the replicas' capacity: each GPU's price per second over
     * the tokens per second each GPU yields */
    c->usd_per_mtok = q->gpu_hour_price > 0 && c->tok_s_gpu > 0
                          ? q->gpu_hour_price / 3600.0 / c->tok_s_gpu * 1e6
                          : NAN;
    int slo_ok = 1;
    if (q->slo_token_ms > 0)
        slo_ok = c->token_p99_ms <= q->slo_token_ms;
    if (q->slo_layer_us > 0)
        slo_ok = slo_ok && c->layer_p99_us <= q->slo_layer_us;
    c->slo_ok = slo_ok;
    c->meets = slo_ok && c->gpus <= q->max_gpus && c->fits;
}

void mp_plan_scale_times(const struct mp_plan_req *q, struct mp_plan_cand *c, double f)
{
    c->layer_us *= f;
    c->layer_p99_us *= f;
    c->ffn_us *= f;
    c->comm_us *= f;
    c->token_ms *= f;
    c->token_p99_ms *= f;
    for (int k = 0; k < MP_STEP_NPARTS; k++)
        c->part_ms[k] *= f;
    c->moe_ffn_ms *= f;
    c->moe_comm_ms *= f;
    c->replica_tps /= f;
    mp_plan_apply_targets(q, c);
}

/* One placement's candidates to evaluate (evaluate_placement), into c[k .. k + per), its
 * messages held until they can be printed in the order a serial run prints them. */
struct plan_job {
    int tp, ep, R, slots, k, rc;
    struct mp_log_held said;
};

/* The jobs of one evaluation, shared by its threads: each takes the next job not taken. */
struct plan_pool {
    const struct mp_plan_req *q;
    const struct sweep *w;
    struct plan_job *jobs;
    int njobs, next;
    struct mp_plan_cand *c;
    pthread_mutex_t mu;
};

static void *plan_worker(void *arg)
{
    struct plan_pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int i = p->next < p->njobs ? p->next++ : -1;
        pthread_mutex_unlock(&p->mu);
        if (i < 0)
            return NULL;
        struct plan_job *j = &p->jobs[i];
        mp_log_hold(&j->said);
        j->rc = evaluate_placement(p->q, p->w, j->tp, j->ep, j->R, j->slots, &p->c[j->k]);
        mp_log_hold(NULL);
    }
}

/* Threads for n jobs: one per online CPU, at most MP_PLAN_THREADS or MOEPERF_PLAN_THREADS (a
 * test hook: 1 runs them one after another on the caller's thread). */
#define MP_PLAN_THREADS 16
static int plan_threads(int n)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *e = getenv("MOEPERF_PLAN_THREADS");
    int asked = e ? atoi(e) : 0;
    int t = asked > 0 ? asked : cpus > 0 ? (int)cpus : 1;
    t = t < MP_PLAN_THREADS ? t : MP_PLAN_THREADS;
    return t < n ? t : n > 0 ? n : 1;
}

/* Run the pool's jobs on `nt` threads (the caller's among them); then print every job's messages
 * in job order up to the first that failed, whose status is returned (MP_OK when none did), as a
 * serial run would have stopped there. */
static int run_jobs(struct plan_pool *p, int nt)
{
    pthread_t th[MP_PLAN_THREADS];
    int started = 0;
    pthread_mutex_init(&p->mu, NULL);
    for (; started < nt - 1; started++)
        if (pthread_create(&th[started], NULL, plan_worker, p) != 0)
            break; /* fewer threads: the rest run here */
    plan_worker(p);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    int rc = MP_OK;
    for (int i = 0; i < p->njobs; i++) {
        if (rc == MP_OK) {
            mp_log_held_print(&p->jobs[i].said);
            rc = p->jobs[i].rc;
        }
        mp_log_held_free(&p->jobs[i].said);
    }
    return rc;
}

/* Why TP size tp cannot be planned, into why[len] (1), or 0 when it can. */
static int tp_refused(const struct mp_plan_req *q, int tp, char *why, size_t len)
{
    if (q->model.ffn % tp) {
        snprintf(why, len, "--tp %d does not divide %s's FFN width %d", tp, q->model.name,
                 q->model.ffn);
        return 1;
    }
    if (tp > q->cluster.gpus_per_node) {
        snprintf(why, len, "--tp %d is more than the %d GPUs of a %s node", tp,
                 q->cluster.gpus_per_node, q->cluster.name);
        return 1;
    }
    return 0;
}

/* Whether placement r of the request (replicate-hot:R, then eplb:SLOTS) has room on ep ranks. */
static int placement_fits(const struct mp_plan_req *q, int r, int ep)
{
    if (r < q->nrep) {
        int R = q->reps[r];
        return R <= q->model.experts && !(R > 0 && ep == 1);
    }
    int slots = q->eplbs[r - q->nrep];
    return ep > 1 && slots >= 1 && (long)slots <= (long)q->model.experts * (ep - 1);
}

int mp_plan_check_layouts(const struct mp_plan_req *q)
{
    char why[4][200];
    int nwhy = 0, any_layout = 0, any_tp = 0;
    for (int a = 0; a < q->ntp; a++) {
        char w[200];
        if (tp_refused(q, q->tps[a], w, sizeof w)) {
            if (nwhy < 4)
                snprintf(why[nwhy++], sizeof why[0], "%s", w);
            continue;
        }
        any_tp = 1;
        for (int b = 0; b < q->nep; b++) {
            int tp = q->tps[a], ep = q->eps[b];
            if (ep > q->model.experts || (long)tp * ep > q->max_gpus)
                continue;
            any_layout = 1;
            for (int r = 0; r < q->nrep + q->neplb; r++)
                if (placement_fits(q, r, ep))
                    return MP_OK;
        }
    }
    if (!any_tp) {
        /* the TP sizes' reasons say it all */
    } else if (!any_layout) {
        int over_experts = 0;
        for (int b = 0; b < q->nep; b++)
            over_experts += q->eps[b] > q->model.experts;
        if (over_experts == q->nep && nwhy < 4)
            snprintf(why[nwhy++], sizeof why[0], "--ep: every size is above %s's %d experts",
                     q->model.name, q->model.experts);
        else if (nwhy < 4)
            snprintf(why[nwhy++], sizeof why[0], "every --tp × --ep left is above --max-gpus %d",
                     q->max_gpus);
    } else if (nwhy < 4) {
        snprintf(why[nwhy++], sizeof why[0], "--replicate/--eplb: no placement has room on the "
                 "layouts left (replicate-hot:R needs R <= %d experts and 2 or more EP ranks, "
                 "eplb:SLOTS at most %d slots per EP rank beyond one)", q->model.experts,
                 q->model.experts);
    }
    mp_usage("no layout can be planned: %s%s%s%s%s%s%s", why[0], nwhy > 1 ? "; " : "",
             nwhy > 1 ? why[1] : "", nwhy > 2 ? "; " : "", nwhy > 2 ? why[2] : "",
             nwhy > 3 ? "; " : "", nwhy > 3 ? why[3] : "");
    return MP_ERR_USAGE;
}

int mp_plan_evaluate(const struct mp_plan_req *q, struct mp_plan_cand **out, int *n)
{
    static const int no_overlap[] = {1}, pair_only[] = {MP_DEDUP_PAIR}, bf16[] = {MP_DTYPE_BF16},
                     one_batch[] = {1};
    struct sweep w = {
        .ovl = q->noverlap > 0 ? q->overlaps : no_overlap,
        .novl = q->noverlap > 0 ? q->noverlap : 1,
        .dds = q->ndedup > 0 ? q->dedups : pair_only, .ndd = q->ndedup > 0 ? q->ndedup : 1,
        .wds = q->nwdtype > 0 ? q->wdtypes : bf16, .nwd = q->nwdtype > 0 ? q->nwdtype : 1,
        .sds = q->nddtype > 0 ? q->ddtypes : bf16, .nsd = q->nddtype > 0 ? q->nddtype : 1,
        .mbs = q->nmicro > 0 ? q->micro_batches : one_batch, .nmb = q->nmicro > 0 ? q->nmicro : 1};
    int per = w.novl * w.ndd * w.nwd * w.nsd * w.nmb * q->nbatch; /* a placement's candidates */
    int cap = q->ntp * q->nep * (q->nrep + q->neplb) * per, k = 0, rc = MP_OK;
    int maxjobs = q->ntp * q->nep * (q->nrep + q->neplb);
    struct mp_plan_cand *c = calloc((size_t)(cap > 0 ? cap : 1), sizeof *c);
    struct plan_job *jobs = calloc((size_t)(maxjobs > 0 ? maxjobs : 1), sizeof *jobs);
    if (!c || !jobs) {
        free(c);
        free(jobs);
        mp_error("out of memory for %d candidates", cap);
        return MP_ERR_RUNTIME;
    }
    int njobs = 0;
    for (int a = 0; a < q->ntp && rc == MP_OK; a++)
        for (int b = 0; b < q->nep && rc == MP_OK; b++) {
            int tp = q->tps[a], ep = q->eps[b];
            char why[200];
            if (tp_refused(q, tp, why, sizeof why) || ep > q->model.experts ||
                (long)tp * ep > q->max_gpus)
                continue;
            /* placements: replicate-hot:R (0: contiguous), then eplb:SLOTS */
            for (int r = 0; r < q->nrep + q->neplb && rc == MP_OK; r++) {
                int R = r < q->nrep ? q->reps[r] : 0, slots = r < q->nrep ? 0 : q->eplbs[r - q->nrep];
                if (!placement_fits(q, r, ep))
                    continue; /* nothing to replicate onto, or no room for the redundant slots */
                jobs[njobs++] = (struct plan_job){.tp = tp, .ep = ep, .R = R, .slots = slots,
                                                  .k = k};
                k += per;
            }
        }
    /* the placements on threads of their own: each writes its own candidates */
    struct plan_pool pool = {.q = q, .w = &w, .jobs = jobs, .njobs = njobs, .c = c};
    rc = run_jobs(&pool, plan_threads(njobs));
    free(jobs);
    if (rc != MP_OK) {
        free(c);
        return rc;
    }
    *out = c;
    *n = k;
    return MP_OK;
}

long mp_plan_batch_cap(const struct mp_plan_cand *c, int n, const struct mp_plan_cand *like)
{
    long cap = -1;
    for (int i = 0; i < n; i++)
        if (mp_plan_same_setup(&c[i], like) && c[i].ratio <= 1 && c[i].batch > cap)
            cap = c[i].batch;
    return cap;
}

int mp_plan_best(const struct mp_plan_cand *c, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!c[i].meets)
            continue;
        if (best < 0 || c[i].gpus < c[best].gpus ||
            (c[i].gpus == c[best].gpus && (c[i].token_p99_ms < c[best].token_p99_ms ||
                                           (c[i].token_p99_ms == c[best].token_p99_ms &&
                                            c[i].dp < c[best].dp))))
            best = i;
    }
    return best;
}

int mp_plan_scaled_batch(const struct mp_plan_cand *c, int n, int best, int num, int den)
{
    if (best < 0 || c[best].batch * num % den != 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (mp_plan_same_setup(&c[i], &c[best]) && c[i].batch == c[best].batch * num / den)
            return i;
    return -1;
}

/* 1 when a is cheaper than b: fewer GPUs, then a lower p99 token time. */
static int cheaper(const struct mp_plan_cand *a, const struct mp_plan_cand *b)
{
    return a->gpus < b->gpus || (a->gpus == b->gpus && a->token_p99_ms < b->token_p99_ms);
}

int mp_plan_dropped(const struct mp_plan_cand *c, int n, int best, int max_gpus, int *order,
                    int max)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].fits || !c[i].slo_ok || c[i].gpus > max_gpus ||
            (best >= 0 && !cheaper(&c[i], &c[best])))
            continue;
        /* insert into the cheapest `max` so far, in order; ties keep sweep order */
        int j = k < max ? k++ : max;
        while (j > 0 && cheaper(&c[i], &c[order[j - 1]])) {
            if (j < max)
                order[j] = order[j - 1];
            j--;
        }
        if (j < max)
            order[j] = i;
    }
    return k;
}
