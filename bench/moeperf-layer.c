/* moeperf-layer - measures a whole MoE layer (route, dispatch, expert FFN, TP reduce, combine) over
 * a sweep of batch sizes, layouts, routings and placements, and writes layer.csv. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_opts.h"
#include "clock.h"
#include "console.h"
#include "dedup.h"
#include "dispatch.h"
#include "dtype.h"
#include "error.h"
#include "expert_cache.h"
#include "weight_cache.h"
#include "gpumem.h"
#include "harness.h"
#include "layer.h"
#include "layer_rows.h"
#include "registry.h"
#include "results.h"
#include "runfiles.h"
#include "session.h"
#include "stats.h"

static const struct mp_opt options[] = {
    MP_OPT_MODEL("qwen3-30b-a3b"), MP_OPT_EXPERTS, MP_OPT_TOPK, MP_OPT_SHARED, MP_OPT_HIDDEN,
    MP_OPT_FFN, MP_OPT_LAYERS, MP_OPT_BATCH("1:128:x2"), MP_OPT_TOKENS_PER_RANK, MP_OPT_SEQ, MP_OPT_CONTEXT,
    MP_OPT_MICRO_BATCHES, MP_OPT_PHASE, MP_OPT_CHUNK, MP_OPT_LAYOUT(NULL),
    MP_OPT_ROUTING, MP_OPT_GROUP_LIMIT, MP_OPT_PLACEMENT, MP_OPT_OVERLAP, MP_OPT_DISPATCH,
    MP_OPT_DEDUP, MP_OPT_DISPATCH_DTYPE, MP_OPT_WEIGHT_DTYPE, MP_OPT_EXPERT_CACHE, MP_OPT_GEMM,
    MP_OPT_GRAPH, MP_OPT_SEED, MP_OPT_WARMUP("3"),
    MP_OPT_ITERS("20"),
    MP_OPT_BACKEND, MP_OPT_COMM, MP_OPT_CPU_BIND, MP_OPT_CLUSTER, MP_OPT_WORLD, MP_OPT_OUT,
    MP_OPT_RESUME, MP_OPT_FORCE, MP_OPT_CHECK, MP_OPT_QUIET,
    MP_OPT_TIMEOUT, MP_OPT_MAX_MEMORY, MP_OPT_INJECT_DELAY, MP_OPT_STRAGGLE, MP_OPT_FLUSH_CACHE,
    MP_OPT_RANK_SAMPLES,
    MP_OPT_END,
};

static const char summary[] =
    "Measure one MoE layer per point: route | dispatch | expert FFN | tp-reduce | combine.\n"
    "Run under mpirun with tp·ep ranks (a single process is tp1ep1). Medians on stdout;\n"
    "layer.csv, layer_samples.csv, layer_ranks.csv, layer_rank_samples.csv and run.json in --out.";

static const struct mp_csv_schema *const files[] = {
    &mp_schema_layer, &mp_schema_layer_samples, &mp_schema_layer_ranks,
    &mp_schema_layer_rank_samples};

/* Capabilities of compute backends, for messages that name the ones a request needs: the
 * dispatch-mode bit asked about (runs_wanted_mode reads it). */
static unsigned wanted_mode_bit;
static int runs_wanted_mode(const struct mp_compute_ops *o)
{
    return !!(o->dispatch_modes & wanted_mode_bit);
}
static int captures_graphs(const struct mp_compute_ops *o) { return o->graph; }

/* The sweep of one run: what every point shares, and the counts run.json notes. */
struct sweep {
    struct mp_session *s;
    struct mp_runfiles *f;
    struct mp_routing *routings;
    int gemm, straggle_rank, max_overlap;
    double straggle_us;
    int npoint, total, measured;
    int undeployable; /* model runs: points whose memory per GPU exceeds the profile's GPU */
    double timed_us;
    double fetch_rate; /* --expert-cache, measured runs: this rank's host-to-device copy rate */
};

/* The expert cache's copy rate, measured on every rank at once before the first point (what a
 * fetch moves at; docs/METRICS.md, "Expert cache"): printed and noted in run.json by rank 0. */
#define FETCH_RATE_BYTES ((size_t)32 << 20)
#define FETCH_RATE_REPS 5
static int measure_fetch_rate(struct sweep *sw)
{
    struct mp_session *s = sw->s;
    int cached = 0;
    for (int i = 0; i < s->o.expert_cache.n; i++)
        cached |= strcmp(s->o.expert_cache.v[i], "off") != 0;
    if (!cached || s->cops->memory == MP_MEMORY_VIRTUAL) /* no copy to time: the profile's */
        return MP_OK;
    int rc = mp_cache_fetch_rate(s->cops, s->dev, FETCH_RATE_BYTES, FETCH_RATE_REPS,
                                 &sw->fetch_rate);
    if (rc != MP_OK || s->comm->rank != 0)
        return rc;
    if (!s->o.quiet)
        printf("# expert cache: fetches copy at %.2f GB/s here (rank 0: %zu MiB from %s host "
               "memory, best of %d)\n", sw->fetch_rate / 1e9, FETCH_RATE_BYTES >> 20,
               s->cops->host_alloc ? "page-locked" : "pageable", FETCH_RATE_REPS);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "bytes", (double)FETCH_RATE_BYTES);
    cJSON_AddNumberToObject(j, "copies", FETCH_RATE_REPS);
    cJSON_AddNumberToObject(j, "bytes_per_s", sw->fetch_rate);
    cJSON_AddBoolToObject(j, "page_locked", s->cops->host_alloc != NULL);
    mp_session_note(s, "fetch_rate", j);
    return MP_OK;
}

/* Names of the dispatch modes whose `has` holds, '|'-joined into buf. */
static const char *modes_where(int (*has)(const struct mp_dispatch_mode *m), char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; mp_dispatch_modes[i]; i++)
        if (has(mp_dispatch_modes[i]))
            mp_registry_append(buf, len, mp_dispatch_modes[i]->name);
    return buf;
}
static int is_captured(const struct mp_dispatch_mode *m) { return m->capture != NULL; }
static int is_pipelined(const struct mp_dispatch_mode *m) { return m->pipelined != NULL; }

/* The backend runs mode `m` (`flag` its flag and value for the message), or a usage message. */
static int refuse_unrun_mode(const struct mp_session *s, const struct mp_dispatch_mode *m,
                             const char *flag)
{
    if (s->cops->dispatch_modes & m->backend_bit)
        return MP_OK;
    char names[256];
    wanted_mode_bit = m->backend_bit;
    mp_usage("%s: the %s backend does not run the %s dispatch; measure it with a --backend that "
             "does (built: %s)", flag, s->cops->name, m->name,
             mp_compute_names_where(runs_wanted_mode, names, sizeof names));
    return MP_ERR_USAGE;
}

/* Refuse flag combinations no point can run, before measuring: a bad --dispatch entry, a dispatch
 * mode the backend does not run, --graph with a mode that cannot be captured or without a backend
 * that replays, --overlap with a mode that has no pipelined form, --dedup rank|node on a backend
 * without the dedup dispatch or with a padded or pipelined dispatch. */
static int refuse_flags(const struct sweep *sw)
{
    const struct mp_session *s = sw->s;
    for (int i = 0; i < s->o.micro_batches.n && !mp_session_profiled(s); i++)
        if (s->o.micro_batches.v[i] > 1) {
            mp_usage("--micro-batches %ld: the %s backend runs a step's batch as one; two "
                     "micro-batches overlapped are modelled only (--backend model), or use "
                     "--micro-batches 1", (long)s->o.micro_batches.v[i], s->o.backend);
            return MP_ERR_USAGE;
        }
    int decode = 0;
    for (int i = 0; i < s->o.phase.n; i++) {
        decode |= strcmp(s->o.phase.v[i], "decode") == 0;
        if (strcmp(s->o.phase.v[i], "prefill") == 0 && !mp_session_profiled(s)) {
            mp_usage("--phase prefill: the %s backend times the layer alone; the prefill step "
                     "around it is modelled only (--backend model), or measure prefill-sized "
                     "layers with --tokens-per-rank", s->o.backend);
            return MP_ERR_USAGE;
        }
    }
    for (int i = 0; i < s->o.chunk.n && decode; i++)
        if (s->o.chunk.v[i] > 0) {
            mp_usage("--chunk %ld: chunks split prompts, which a decode step has none of; give "
                     "--phase prefill alone, or --chunk 0", (long)s->o.chunk.v[i]);
            return MP_ERR_USAGE;
        }
    for (int di = 0; di < s->o.dispatch.n; di++) {
        const struct mp_dispatch_mode *mode;
        const char *word = s->o.dispatch.v[di];
        char flag[128], names[128];
        double arg;
        int rc;
        if ((rc = mp_dispatch_parse(word, &mode, &arg)) != MP_OK)
            return rc;
        snprintf(flag, sizeof flag, "--dispatch %s", word);
        if ((rc = refuse_unrun_mode(s, mode, flag)) != MP_OK)
            return rc;
        if (s->o.graph && !mode->capture) {
            mp_usage("--graph with --dispatch %s: only a dispatch that needs no host sync can be "
                     "captured; use --dispatch %s", word,
                     modes_where(is_captured, names, sizeof names));
            return MP_ERR_USAGE;
        }
        if (sw->max_overlap > 1 && !mode->pipelined) {
            mp_usage("--dispatch %s with --overlap %d: the %s dispatch has no pipelined form; "
                     "sweep them in separate runs, or use --dispatch %s with --overlap", word,
                     sw->max_overlap, mode->name, modes_where(is_pipelined, names, sizeof names));
            return MP_ERR_USAGE;
        }
        snprintf(flag, sizeof flag, "--overlap %d", sw->max_overlap);
        if (sw->max_overlap > 1 && (rc = refuse_unrun_mode(s, mode->pipelined, flag)) != MP_OK)
            return rc;
    }
    for (int xi = 0; xi < s->o.dedup.n; xi++) {
        enum mp_dedup dedup;
        const char *word = s->o.dedup.v[xi];
        int rc = mp_dedup_parse(word, &dedup);
        if (rc != MP_OK)
            return rc;
        if (dedup == MP_DEDUP_PAIR)
            continue;
        char flag[64];
        snprintf(flag, sizeof flag, "--dedup %s", word);
        /* every dispatch and overlap of the sweep with it: the mode that runs them takes it */
        for (int di = 0; di < s->o.dispatch.n; di++)
            for (int oi = 0; oi < s->o.overlap.n; oi++) {
                struct mp_point pt = {.overlap = (int)s->o.overlap.v[oi], .dedup = (int)dedup};
                mp_dispatch_parse(s->o.dispatch.v[di], &pt.dispatch, &pt.dispatch_arg);
                if ((rc = mp_dispatch_check_dedup(&pt)) != MP_OK ||
                    (rc = refuse_unrun_mode(s, mp_dispatch_for(&pt), flag)) != MP_OK)
                    return rc;
            }
    }
    int rc = mp_dtype_refuse_unsupported("--dispatch-dtype", s->o.dispatch_dtype.v,
                                         s->o.dispatch_dtype.n, s->cops, MP_DTYPE_USE_DISPATCH);
    if (rc == MP_OK)
        rc = mp_dtype_refuse_unsupported("--weight-dtype", s->o.weight_dtype.v,
                                         s->o.weight_dtype.n, s->cops, MP_DTYPE_USE_WEIGHTS);
    if (rc != MP_OK)
        return rc;
    int cached = 0;
    for (int i = 0; i < s->o.expert_cache.n; i++)
        cached |= strcmp(s->o.expert_cache.v[i], "off") != 0;
    if (cached && s->o.graph) {
        mp_usage("--expert-cache: a fetch is decided on the host before each expert's FFN, which "
                 "a captured layer cannot replay; drop --graph or --expert-cache");
        return MP_ERR_USAGE;
    }
    if (s->o.graph && (!s->cops->graph || sw->straggle_rank >= 0)) {
        char names[256];
        if (!s->cops->graph)
            mp_usage("--graph: replaying a captured layer needs a --backend with graph capture "
                     "(built: %s)", mp_compute_names_where(captures_graphs, names, sizeof names));
        else
            mp_usage("--graph: --straggle waits on the host inside the layer; drop one of them");
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* A model run's memory per GPU for the point (the experts in --weight-dtype, the rest of the
 * weights and the KV cache in bf16, `context` tokens per sequence, non-expert weights split by
 * tp; with --expert-cache only the SLOTS resident experts of each layer, static's staging slot
 * included: the rest live in host memory), with a
 * warning when it exceeds what the profile's GPU holds less its reserve: the point could not be
 * deployed (docs/planning.md). */
static void model_memory(struct sweep *sw, const struct mp_layout *lay,
                         const struct mp_placement *pl, const struct mp_cache_spec *cache,
                         long batch, long context, enum mp_dtype wtype, const char *label,
                         struct mp_point_result *res)
{
    const struct mp_session *s = sw->s;
    int resident = pl->max_local;
    if (cache->slots > 0 && cache->slots + (cache->policy == MP_CACHE_STATIC) < resident)
        resident = cache->slots + (cache->policy == MP_CACHE_STATIC);
    struct mp_gpumem_layout ml = {.tp = lay->tp, .ep = lay->ep, .max_local = resident,
                                  .sequences = batch, .context = context,
                                  .weight_bytes = MP_BF16_BYTES, .kv_bytes = MP_BF16_BYTES,
                                  .nonexpert = MP_NONEXPERT_TP, .expert_dtype = wtype};
    struct mp_gpumem g;
    mp_gpumem_compute(&s->model, &ml, &g);
    res->mem_gb_per_gpu = g.total / 1e9;
    double usable = mp_gpumem_usable(&s->cluster, s->cluster.mem_reserve);
    const char *over = mp_gpumem_over(&g, usable);
    if (strcmp(over, "none") != 0 && sw->undeployable++ == 0) { /* the first; the rest counted */
        mp_progress_clear();
        mp_warn("%s: %s needs %.1f GB per GPU (weights %.1f, KV cache %.1f at %ld tokens per "
                "sequence), more than the %.1f GB a %s GPU holds less its reserve: this point "
                "could not be deployed (%s overflow)",
                label, s->model.name, g.total / 1e9, g.weights / 1e9, g.kv / 1e9,
                context, usable / 1e9, s->cluster.name, over);
    }
}

/* Whether any --dispatch-dtype of the sweep is fp8 (struct mp_point's blocked_activations). */
static int sweep_has_fp8(const struct mp_bench_opts *o)
{
    for (int i = 0; i < o->dispatch_dtype.n; i++)
        if (strcmp(o->dispatch_dtype.v[i], "fp8") == 0)
            return 1;
    return 0;
}

/* Whether any --weight-dtype of the sweep is fp8 (struct mp_point's blocked_weights). */
static int sweep_has_fp8_weights(const struct mp_bench_opts *o)
{
    for (int i = 0; i < o->weight_dtype.n; i++)
        if (strcmp(o->weight_dtype.v[i], "fp8") == 0)
            return 1;
    return 0;
}

/* The point's words for its progress line and NVTX range: the defaults left unnamed, as before
 * their flags (cache_word NULL: no expert cache; context < 0: the default, unnamed). */
static void point_label(char *label, size_t size, const struct mp_layout *lay, const char *rname,
                        const char *gname, const char *pname, int overlap, const char *dispatch,
                        const char *dedup_word, const char *dtype_word, const char *wtype_word,
                        const char *cache_word, long batch, long context,
                        const struct mp_step_key *st)
{
    char extra[160] = "", group[80] = "", step[80] = "";
    size_t n = 0;
    if (strcmp(dedup_word, "pair") != 0)
        n += (size_t)snprintf(extra + n, sizeof extra - n, " dedup %s", dedup_word);
    if (strcmp(dtype_word, "bf16") != 0 && n < sizeof extra)
        n += (size_t)snprintf(extra + n, sizeof extra - n, " dispatch-dtype %s", dtype_word);
    if (strcmp(wtype_word, "bf16") != 0 && n < sizeof extra)
        n += (size_t)snprintf(extra + n, sizeof extra - n, " weight-dtype %s", wtype_word);
    if (cache_word && n < sizeof extra)
        snprintf(extra + n, sizeof extra - n, " expert-cache %s", cache_word);
    if (strcmp(gname, "off") != 0)
        snprintf(group, sizeof group, " group-limit %s", gname);
    n = 0;
    if (context >= 0)
        n += (size_t)snprintf(step, sizeof step, " context %ld", context);
    if (st->micro_batches > 1 && n < sizeof step)
        n += (size_t)snprintf(step + n, sizeof step - n, " micro-batches %d", st->micro_batches);
    if (strcmp(st->phase, "decode") != 0 && n < sizeof step)
        n += (size_t)snprintf(step + n, sizeof step - n, " phase %s", st->phase);
    if (st->chunk > 0 && n < sizeof step)
        snprintf(step + n, sizeof step - n, " chunk %ld", st->chunk);
    snprintf(label, size, "layout %s routing %s%s placement %s overlap %d dispatch %s%s batch "
             "%ld%s", lay->name, rname, group, pname, overlap, dispatch, extra, batch, step);
}

/* --check of a point (`label` in the messages): its relative error against the reference within
 * the backend's tight bound, and with fp8 dispatch or weights also against the reference of the
 * unquantized inputs and weights within fp8's looser bound (docs/METRICS.md); both reported when
 * both fail. MP_OK or MP_ERR_RUNTIME (s->agreed set: every rank fails alike). */
static int check_point(struct mp_session *s, const char *label, const struct mp_point_result *res,
                       enum mp_dtype dtype, enum mp_dtype wtype)
{
    int rc = MP_OK;
    double tight = mp_check_tight_bound(s->cops->check_tolerance, wtype == MP_DTYPE_FP8);
    if (!(res->check_error <= tight)) {
        mp_usage("--check failed at %s: relative error %.3g exceeds %.0e", label,
                 res->check_error, tight);
        rc = MP_ERR_RUNTIME;
        s->agreed = 1;
    }
    double loose = mp_fp8_check_bound(dtype == MP_DTYPE_FP8, wtype == MP_DTYPE_FP8);
    if ((dtype == MP_DTYPE_FP8 || wtype == MP_DTYPE_FP8) &&
        !(res->check_error_unquantized <= loose)) {
        mp_usage("--check failed at %s: relative error %.3g against the unquantized reference "
                 "exceeds fp8's bound %.3g", label, res->check_error_unquantized, loose);
        rc = MP_ERR_RUNTIME;
        s->agreed = 1;
    }
    return rc;
}

/* The step cells of sweep index `si`: context slowest, then micro-batches, phase and chunk. */
static struct mp_step_key step_of(const struct mp_bench_opts *o, int si)
{
    struct mp_step_key k;
    k.chunk = (long)o->chunk.v[si % o->chunk.n];
    si /= o->chunk.n;
    k.phase = o->phase.v[si % o->phase.n];
    si /= o->phase.n;
    k.micro_batches = (int)o->micro_batches.v[si % o->micro_batches.n];
    k.context = (long)o->context.v[si / o->micro_batches.n];
    return k;
}

/* One point of the sweep: skipped when --resume found it, else measured (or modelled), written
 * and checked. */
static int run_point(struct sweep *sw, const struct mp_layout *lay, struct mp_layer *L,
                     const struct mp_routing *routing, int ri, int gi, int pi,
                     const struct mp_placement *pl, int oi, int di, int xi, int wi, int ci,
                     int ti, int si, int bi)
{
    struct mp_session *s = sw->s;
    struct mp_comm *c = s->comm;
    long batch = mp_sweep_batch(&s->o, bi, lay->ep);
    struct mp_step_key step = step_of(&s->o, si);
    long context = step.context;
    int micro = step.micro_batches;
    int overlap = (int)s->o.overlap.v[oi], rc;
    const struct mp_dispatch_mode *mode;
    double dispatch_arg;
    mp_dispatch_parse(s->o.dispatch.v[di], &mode, &dispatch_arg); /* validated by refuse_flags */
    char dispatch[96]; /* the key cell: the entry, "+graph" when replayed */
    snprintf(dispatch, sizeof dispatch, "%s%s", s->o.dispatch.v[di], s->o.graph ? "+graph" : "");
    const char *rname = s->o.routing.v[ri], *pname = s->o.placement.v[pi];
    const char *gname = s->o.group_limit.v[gi];
    const char *dedup_word = s->o.dedup.v[xi];
    enum mp_dedup dedup;
    mp_dedup_parse(dedup_word, &dedup); /* validated by refuse_flags */
    const char *dtype_word = s->o.dispatch_dtype.v[ti];
    enum mp_dtype dtype;
    mp_dtype_parse("--dispatch-dtype", dtype_word, &dtype); /* validated by refuse_flags */
    const char *wtype_word = s->o.weight_dtype.v[wi];
    enum mp_dtype wtype;
    mp_dtype_parse("--weight-dtype", wtype_word, &wtype); /* validated by refuse_flags */
    struct mp_cache_spec cache;
    mp_cache_spec_parse(s->o.expert_cache.v[ci], &cache); /* validated at start-up */
    char cache_word[64] = "off"; /* the key cell: off or SLOTS:POLICY */
    if (cache.slots > 0)
        snprintf(cache_word, sizeof cache_word, "%d:%s", cache.slots,
                 mp_cache_policy_choices[cache.policy]);
    struct mp_row key = {0};
    sw->npoint++;
    mp_workload_key_row(&key, s, lay, rname, gname, pname, overlap, dispatch, dedup_word,
                        dtype_word, wtype_word, cache_word, batch, &step);
    int skip = mp_runfiles_done(sw->f, s, &key);
    mp_row_free(&key);
    if (skip)
        return MP_OK;
    char label[512];
    point_label(label, sizeof label, lay, rname, gname, pname, overlap, dispatch, dedup_word,
                dtype_word, wtype_word, cache.slots > 0 ? cache_word : NULL, batch,
                s->o.context.n > 1 || context != MP_CONTEXT_DEFAULT ? context : -1, &step);
    if (c->rank == 0)
        mp_progress(sw->npoint, sw->total, label);
    char range[600]; /* the point's NVTX range: its phases' ranges nest in it */
    snprintf(range, sizeof range, "moeperf/point %s", label);
    mp_session_watch(s, label);
    /* with two micro-batches the layer runs one half's tokens (the model only: refuse_flags) */
    long layer_batch = micro > 1 ? (batch + micro - 1) / micro : batch;
    struct mp_point pt = {.label = range, .batch = layer_batch, .seq = s->o.seq, .routing = routing,
                          .placement = pl, .warmup = s->o.warmup, .iters = s->o.iters,
                          .check = s->o.check, .overlap = overlap, .dispatch = mode,
                          .dispatch_arg = dispatch_arg, .dedup = (int)dedup,
                          .dispatch_dtype = (int)dtype, .weight_dtype = (int)wtype,
                          .blocked_activations = sweep_has_fp8(&s->o),
                          .blocked_weights = sweep_has_fp8_weights(&s->o),
                          .gemm = sw->gemm, .graph = s->o.graph,
                          .flush_cache = mp_flush_cache_active(s),
                          .straggle_rank = sw->straggle_rank, .straggle_us = sw->straggle_us,
                          .cache = cache};
    struct mp_point_result res;
    rc = mp_session_layer_point(s, L, lay->tp, lay->ep, &pt, &res);
    if (rc == MP_OK)
        mp_session_unwatch(s);
    else /* freeing the layer waits for the device: no longer than --timeout */
        rc = mp_session_fail(s, rc);
    sw->timed_us += res.timed_us;
    sw->measured++;
    if (rc == MP_OK && mp_session_profiled(s)) { /* the deployment and the step it is part of */
        enum mp_phase phase;
        mp_phase_parse("--phase", step.phase, &phase); /* validated by the option table */
        /* a prefill pass holds the KV cache of its prompts: ⌈batch · seq / context⌉ of them */
        long sequences = phase == MP_PHASE_PREFILL
                             ? ((long)batch * s->o.seq + context - 1) / context
                             : batch;
        model_memory(sw, lay, pl, &cache, sequences, context, wtype, label, &res);
        res.tokens_per_rank = ((long)batch * s->o.seq + lay->ep - 1) / lay->ep;
        struct mp_step_spec spec = {.tp = lay->tp, .ep = lay->ep, .context = (double)context,
                                    .tokens = (double)batch * s->o.seq / lay->ep,
                                    .micro_batches = micro, .weight_dtype = (int)wtype,
                                    .phase = (int)phase, .chunk = (double)step.chunk,
                                    .pair_dispatch = dedup == MP_DEDUP_PAIR};
        rc = mp_step_of_point(&s->cluster, &s->model, &spec, res.metrics, res.iters, &res.step);
    }
    if (rc == MP_OK && c->rank == 0)
        rc = layer_write_point(s, sw->f, lay, rname, gname, pname, overlap, dispatch, dedup_word,
                               dtype_word, wtype_word, cache_word, batch, &step, pl, &res);
    if (rc == MP_OK && s->o.check)
        rc = check_point(s, label, &res, dtype, wtype);
    mp_point_result_free(&res);
    return rc;
}

/* Every point of one layout: its layer created once (measured runs), then routing × group limit ×
 * placement × overlap × dispatch × dedup × weight dtype × dispatch dtype × batch (weights
 * reloaded only when their dtype changes). */
static int run_layout(struct sweep *sw, const struct mp_layout *lay)
{
    struct mp_session *s = sw->s;
    struct mp_comm *c = s->comm;
    const struct mp_model *m = &s->model;
    struct mp_layer *L = NULL;
    int rc = c->ops->split(c, lay->tp, lay->ep);
    if (rc == MP_OK)
        rc = mp_session_layer_create(s, &L, mp_sweep_max_batch(&s->o, &lay->ep, 1) * s->o.seq,
                                     sw->max_overlap);
    int nodes = mp_ep_nodes(c, lay->tp, lay->ep), inactive;
    /* context × micro-batches × phase × chunk, one index (step_of) */
    int nstep = s->o.context.n * s->o.micro_batches.n * s->o.phase.n * s->o.chunk.n;
    for (int ri = 0; ri < s->o.routing.n && rc == MP_OK; ri++)
        for (int gi = 0; gi < s->o.group_limit.n && rc == MP_OK; gi++) {
            struct mp_routing routing; /* validated by mp_group_limits_validate */
            rc = mp_group_limit_apply(&sw->routings[ri], s->o.group_limit.v[gi], nodes, &routing,
                                      &inactive);
            for (int pi = 0; pi < s->o.placement.n && rc == MP_OK; pi++) {
                struct mp_placement pl;
                rc = mp_placement_build(s->o.placement.v[pi], m->experts, lay->ep,
                                        sw->routings[ri].prob, &pl);
                if (rc == MP_OK)
                    rc = mp_placement_comm_nodes(&pl, c, lay->tp);
                for (int oi = 0; oi < s->o.overlap.n && rc == MP_OK; oi++)
                    for (int di = 0; di < s->o.dispatch.n && rc == MP_OK; di++)
                        for (int xi = 0; xi < s->o.dedup.n && rc == MP_OK; xi++)
                            for (int wi = 0; wi < s->o.weight_dtype.n && rc == MP_OK; wi++)
                                for (int ci = 0; ci < s->o.expert_cache.n && rc == MP_OK; ci++)
                                    for (int ti = 0; ti < s->o.dispatch_dtype.n && rc == MP_OK;
                                         ti++)
                                        for (int si = 0; si < nstep && rc == MP_OK; si++)
                                            for (int bi = 0;
                                                 bi < mp_sweep_nbatch(&s->o) && rc == MP_OK; bi++)
                                                rc = run_point(sw, lay, L, &routing, ri, gi, pi,
                                                               &pl, oi, di, xi, wi, ci, ti, si, bi);
                mp_placement_free(&pl);
            }
        }
    mp_layer_destroy(L);
    return rc;
}

/* The largest --overlap of the sweep: what each layout's layer is sized for (with the largest
 * batch of its layout). */
static void sweep_bounds(struct sweep *sw)
{
    const struct mp_bench_opts *o = &sw->s->o;
    sw->max_overlap = 1;
    for (int i = 0; i < o->overlap.n; i++)
        sw->max_overlap = o->overlap.v[i] > sw->max_overlap ? (int)o->overlap.v[i] : sw->max_overlap;
}

/* run.json: how much of the wall time the timed iterations took. */
static void note_sweep(struct mp_session *s, const struct sweep *sw, double t_main)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "points", sw->measured);
    cJSON_AddNumberToObject(j, "wall_s", (mp_now_us() - t_main) * 1e-6);
    cJSON_AddNumberToObject(j, "timed_s", sw->timed_us * 1e-6);
    mp_session_note(s, "sweep", j);
    mp_session_note(s, "flush_cache", cJSON_CreateBool(mp_flush_cache_active(s)));
    /* --dispatch-dtype as swept, with a row's wire bytes (the model's from its profile) */
    double act_bytes = mp_session_elem_bytes(s);
    cJSON *dt = cJSON_CreateArray();
    for (int i = 0; i < s->o.dispatch_dtype.n; i++) {
        enum mp_dtype d;
        if (mp_dtype_parse("--dispatch-dtype", s->o.dispatch_dtype.v[i], &d) != MP_OK)
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "dtype", s->o.dispatch_dtype.v[i]);
        cJSON_AddNumberToObject(e, "dispatch_row_bytes",
                                mp_dispatch_row_bytes(d, s->model.hidden,
                                                      s->model.hidden * act_bytes));
        cJSON_AddItemToArray(dt, e);
    }
    mp_session_note(s, "dispatch_dtype", dt);
    /* --weight-dtype as swept, with the bytes one expert's weight shard is read as at tp1 (the
     * model's element size from its profile) */
    cJSON *wt = cJSON_CreateArray();
    for (int i = 0; i < s->o.weight_dtype.n; i++) {
        enum mp_dtype d;
        if (mp_dtype_parse("--weight-dtype", s->o.weight_dtype.v[i], &d) != MP_OK)
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "dtype", s->o.weight_dtype.v[i]);
        cJSON_AddNumberToObject(e, "expert_weight_bytes",
                                mp_expert_weight_bytes(d, s->model.hidden, s->model.ffn,
                                                       act_bytes));
        cJSON_AddItemToArray(wt, e);
    }
    mp_session_note(s, "weight_dtype", wt);
}

int main(int argc, char **argv)
{
    double t_main = mp_now_us();
    struct mp_session s;
    struct mp_runfiles f = {0};
    struct mp_layout *layouts = NULL;
    struct sweep sw = {.s = &s, .f = &f};
    int nlayouts = 0, nrout = 0, rc = mp_session_start(&s, "moeperf-layer", options, summary, argc, argv);
    if (rc != MP_OK)
        goto out;
    struct mp_comm *c = s.comm;
    MP_CHECK(mp_session_layouts(&s, &layouts, &nlayouts));
    MP_CHECK(mp_routings_parse(&s.o.routing, &s.model, s.o.seed, NULL, &sw.routings, &nrout));
    MP_CHECK(mp_sweep_validate(&s.model, layouts, nlayouts, &s.o.placement));
    MP_CHECK(mp_expert_caches_validate(&s.o.expert_cache, &s.model, layouts, nlayouts,
                                       &s.o.placement));
    MP_CHECK(mp_group_limits_validate(&s.o.group_limit, sw.routings, nrout, layouts, nlayouts, c));
    MP_CHECK(mp_straggle_parse(s.o.straggle, c->size, &sw.straggle_rank, &sw.straggle_us));
    MP_CHECK(mp_gemm_mode(&s.o, s.cops, &sw.gemm));
    MP_CHECK(mp_session_watch_start(&s));
    MP_CHECK(mp_session_refuse_unsupported(&s));
    sweep_bounds(&sw);
    MP_CHECK(refuse_flags(&sw)); /* before --out is made and the table's header: one line */
    MP_CHECK(mp_runfiles_open(&f, &s, files, s.o.rank_samples ? 4 : 3));
    MP_CHECK(measure_fetch_rate(&sw));
    if (!s.o.quiet && c->rank == 0)
        layer_print_header(&s);
    sw.total = nlayouts * s.o.routing.n * s.o.group_limit.n * s.o.placement.n * s.o.overlap.n *
               s.o.dispatch.n * s.o.dedup.n * s.o.weight_dtype.n * s.o.expert_cache.n *
               s.o.dispatch_dtype.n * s.o.context.n * s.o.micro_batches.n *
               mp_sweep_nbatch(&s.o);
    for (int li = 0; li < nlayouts; li++)
        MP_CHECK(run_layout(&sw, &layouts[li]));
    if (sw.undeployable > 1 && c->rank == 0)
        mp_warn("%d of the %d points modelled could not be deployed (mem_gb_per_gpu in layer.csv; "
                "the first is named above)", sw.undeployable, sw.npoint);
out:
    if (s.run)
        note_sweep(&s, &sw, t_main);
    mp_runfiles_close(&f);
    mp_routings_free(sw.routings, nrout);
    free(layouts);
    if (rc == MP_ERR_USAGE)
        s.agreed = 1;
    return mp_session_end(&s, rc);
}
