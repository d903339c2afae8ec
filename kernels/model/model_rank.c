/* model_rank.c - the model's compute of one virtual rank (docs/ARCHITECTURE.md, "The model"),
 * two tables over the same code: a traced rank (mp_compute_model_rank) builds the dispatch plan
 * from the routing as a data backend does, so the layer's own stages decide every count, in host
 * buffers the exchanges may move; --backend model (mp_compute_model) holds no data at all. Both
 * compute nothing: each expert FFN is recorded (experts with rows, rows) and, on a virtual clock,
 * queued for the next mark to price. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "dplan_host.h"
#include "error.h"
#include "vtime.h"

/* --backend model's buffers: one name that holds nothing. */
static char no_data[64];

struct mp_compute {
    int data; /* its buffers hold host memory (a traced rank), else none (no_data) */
    struct mp_dplan_host plan;
    int last_mark;
    struct mp_vtime *now;       /* the rank's virtual time, or NULL (marks read 0) */
    struct mp_vwork_cost cost;  /* what prices the work below */
    struct mp_vwork work;       /* queued since the last mark */
    struct mp_vtime marks[MP_TIMER_SLOTS];
    /* an expert cache's timeline in the iteration's FFN phase (from its start) */
    int nslots;
    double *slot_free;      /* [nslots] when each slot's last FFN ended */
    double engine, stream;  /* when the copy engine and the FFNs are free */
    double exposed;         /* what the fetches added to the FFN phase */
    struct mp_vffn_seen seen; /* since the last mp_compute_model_rank_take */
    const void **weights;     /* [seen.distinct] the experts counted in it, by their weights */
    double *expert_rows;      /* [seen.distinct] and the rows each ran */
    int weights_cap;
};

/* A rank of either table; `data`: its buffers hold host memory (the traced ranks). */
static int model_init(struct mp_compute **out, int data)
{
    struct mp_compute *c = calloc(1, sizeof *c);
    if (!c) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    c->data = data;
    *out = c;
    return MP_OK;
}

static int rank_init(struct mp_compute **out, int local_rank)
{
    (void)local_rank;
    return model_init(out, 1);
}

static int virtual_init(struct mp_compute **out, int local_rank)
{
    (void)local_rank;
    return model_init(out, 0);
}

static void rank_fini(struct mp_compute *c)
{
    if (c) {
        mp_dplan_host_free(&c->plan);
        free(c->slot_free);
        free(c->weights);
        free(c->expert_rows);
    }
    free(c);
}

static const char *rank_device_name(struct mp_compute *c)
{
    return c->data ? "model (traced rank)" : "model (durations from the cluster profile)";
}

/* n elements of elem_size bytes (4: the byte sizes the layer computes from it fit); no_data on a
 * rank that holds none, and every copy to or from it moves nothing. */
static void *rank_alloc(struct mp_compute *c, size_t n)
{
    return c->data ? malloc(n ? n * sizeof(float) : sizeof(float)) : no_data;
}

/* As rank_alloc, zeroed by the kernel's untouched pages: a traced rank's buffers are sized for
 * the most rows a point could bring, its RSS what the rows it does receive touch. */
static void *rank_alloc_zeroed(struct mp_compute *c, size_t n)
{
    return c->data ? calloc(n ? n : 1, sizeof(float)) : no_data;
}

static void rank_free(struct mp_compute *c, void *p)
{
    if (c->data)
        free(p);
}

static int rank_copy_bytes(struct mp_compute *c, void *dst, const void *src, size_t bytes)
{
    if (c->data && bytes)
        memcpy(dst, src, bytes);
    return MP_OK;
}

static int rank_upload(struct mp_compute *c, void *dst, const float *src, size_t n)
{
    return rank_copy_bytes(c, dst, src, n * sizeof(float));
}

static int rank_download(struct mp_compute *c, float *dst, const void *src, size_t n)
{
    return rank_copy_bytes(c, dst, src, n * sizeof(float));
}

static int rank_gate(struct mp_compute *c, const void *x, const void *wg, const float *noise,
                     long ntok, int H, int E, int K, int G, int M, int32_t *ids, float *w)
{
    mp_error("internal error: traced virtual ranks have no activations to route by a gate");
    return MP_ERR_RUNTIME;
}

/* The row work, which moves no counts: nothing to do. */
static int rank_permute(struct mp_compute *c, const void *x, const int32_t *src_row, long row0,
                        long nrows, int H, void *out)
{
    return MP_OK;
}

static int rank_copy_rows(struct mp_compute *c, const void *src, void *dst,
                          const struct mp_chunk *ch, int nch, int H)
{
    return MP_OK;
}

static int rank_fp8(struct mp_compute *c, void *buf, long n, int H) { return MP_OK; }

static int rank_combine(struct mp_compute *c, const void *rows, const int32_t *tok, const float *w,
                        long row0, long nrows, const void *shared, int nshared, long ntok, int H,
                        void *y, int accumulate)
{
    return MP_OK;
}

/* Each expert's rows, into the chunk whose FFN the last mark began (chunk 0 unpipelined). */
static int rank_expert_ffn(struct mp_compute *c, const struct mp_ffn_args *a)
{
    int k = c->last_mark >= MP_PHASE_MARKS ? (c->last_mark - MP_PHASE_MARKS) / MP_CHUNK_MARKS : 0;
    c->work.ffn_calls++;
    c->work.ffn_H = a->H;
    c->work.ffn_Dl = a->Dl;
    c->work.ffn_weight_dtype = a->weight_dtype;
    c->work.ffn_gemm = a->gemm;
    if (c->now && c->nslots > 0 && a->nexp == 1 && a->row_off[1] > a->row_off[0] &&
        c->cost.expert_us) /* one cached expert's FFN, on the cache's timeline */
        c->stream += c->cost.expert_us(c->cost.arg, &c->work,
                                       (double)(a->row_off[1] - a->row_off[0]));
    for (int e = 0; e < a->nexp; e++) {
        long rows = a->row_off[e + 1] - a->row_off[e];
        c->seen.rows[k] += (double)rows;
        c->seen.active[k] += rows > 0;
        c->work.ffn_rows += (double)rows;
        c->work.ffn_active += rows > 0;
        if (rows <= 0)
            continue;
        int i = 0;
        while (i < c->seen.distinct && c->weights[i] != a->wgu[e])
            i++;
        if (i == c->seen.distinct) {
            if (c->seen.distinct == c->weights_cap) {
                int cap = c->weights_cap ? 2 * c->weights_cap : 64;
                const void **w = realloc(c->weights, (size_t)cap * sizeof *w);
                if (w)
                    c->weights = w;
                double *r = realloc(c->expert_rows, (size_t)cap * sizeof *r);
                if (r)
                    c->expert_rows = r;
                if (!w || !r) {
                    mp_error("out of memory");
                    return MP_ERR_RUNTIME;
                }
                c->weights_cap = cap;
            }
            c->weights[i] = a->wgu[e];
            c->expert_rows[i] = 0;
            c->seen.distinct++;
        }
        c->expert_rows[i] += (double)rows;
    }
    c->seen.chunks = k + 1 > c->seen.chunks ? k + 1 : c->seen.chunks;
    return MP_OK;
}

static int rank_plan_setup(struct mp_compute *c, const struct mp_dplan_shape *s,
                           const int32_t **totals)
{
    int rc = mp_dplan_host_setup(&c->plan, s);
    *totals = c->plan.totals;
    return rc;
}

static int rank_plan_build(struct mp_compute *c, const int32_t *ids, const float *w, int wait)
{
    (void)wait;
    if (!ids)
        return rank_gate(c, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL);
    mp_dplan_host_build(&c->plan, ids, w);
    c->work.plan_builds++;
    c->work.plan_tokens += c->plan.s.ntok;
    return MP_OK;
}

/* The work queued since the last mark, priced onto the clock. */
static void settle(struct mp_compute *c)
{
    if (c->now && c->cost.work_us)
        c->now->clock += c->cost.work_us(c->cost.arg, &c->work);
    memset(&c->work, 0, sizeof c->work);
}

static int rank_mark(struct mp_compute *c, int slot)
{
    if (slot < 0 || slot >= MP_TIMER_SLOTS) {
        mp_error("internal error: timer slot %d outside 0..%d", slot, MP_TIMER_SLOTS - 1);
        return MP_ERR_RUNTIME;
    }
    settle(c);
    c->last_mark = slot;
    c->marks[slot] = c->now ? *c->now : (struct mp_vtime){0};
    return MP_OK;
}

static double rank_elapsed_us(struct mp_compute *c, int a, int b)
{
    if (a < 0 || b < 0 || a >= MP_TIMER_SLOTS || b >= MP_TIMER_SLOTS)
        return 0;
    return mp_vtime_between(&c->marks[a], &c->marks[b]);
}

static int rank_delay(struct mp_compute *c, double us)
{
    if (c->now)
        c->work.delay_us += us;
    return MP_OK;
}

void mp_compute_model_rank_clock(struct mp_compute *c, struct mp_vtime *t,
                                 const struct mp_vwork_cost *k)
{
    c->now = t;
    c->cost = k ? *k : (struct mp_vwork_cost){0};
    memset(&c->work, 0, sizeof c->work);
}
static int rank_sync(struct mp_compute *c) { return MP_OK; }

static int rank_measure_peak(struct mp_compute *c, double *flops_per_s, double *fp8_flops_per_s,
                             double *bytes_per_s)
{
    mp_error("internal error: a traced virtual rank has no device to measure");
    return MP_ERR_RUNTIME;
}

/* The cache's timeline starts again with the next FFN phase. */
static void cache_restart(struct mp_compute *c)
{
    c->engine = c->stream = c->exposed = 0;
    for (int s = 0; s < c->nslots; s++)
        c->slot_free[s] = 0;
}

static int rank_cache_setup(struct mp_compute *c, int nslots, int fetches)
{
    (void)fetches;
    double *f = realloc(c->slot_free, (size_t)(nslots > 0 ? nslots : 1) * sizeof *f);
    if (!f) {
        mp_error("out of memory for an expert cache of %d slots", nslots);
        return MP_ERR_RUNTIME;
    }
    c->slot_free = f;
    c->nslots = nslots;
    cache_restart(c);
    return MP_OK;
}

/* The copy moves the rank's weights (a traced rank's small ones, whose time is the real expert's
 * fetch_us gives). */
static int rank_cache_fetch(struct mp_compute *c, int slot, void *const *dst,
                            const void *const *src, const size_t *bytes, int n)
{
    if (slot < 0 || slot >= c->nslots) {
        mp_error("internal error: cache slot %d outside 0..%d", slot, c->nslots - 1);
        return MP_ERR_RUNTIME;
    }
    double total = 0;
    for (int i = 0; i < n; i++) {
        rank_copy_bytes(c, dst[i], src[i], bytes[i]);
        total += (double)bytes[i];
    }
    if (!c->now || !c->cost.fetch_us)
        return MP_OK;
    double fetch = c->cost.fetch_us(c->cost.arg, total), add = fetch;
    if (c->cost.copy_engine) {
        double from = c->engine > c->slot_free[slot] ? c->engine : c->slot_free[slot];
        c->engine = from + fetch;
        add = c->engine > c->stream ? c->engine - c->stream : 0;
        c->stream = c->stream > c->engine ? c->stream : c->engine;
    }
    c->exposed += add;
    c->work.delay_us += add;
    return MP_OK;
}

static int rank_cache_release(struct mp_compute *c, int slot)
{
    if (slot < 0 || slot >= c->nslots) {
        mp_error("internal error: cache slot %d outside 0..%d", slot, c->nslots - 1);
        return MP_ERR_RUNTIME;
    }
    c->slot_free[slot] = c->stream;
    return MP_OK;
}

static int rank_cache_exposed_us(struct mp_compute *c, double *us)
{
    *us = c->exposed;
    cache_restart(c);
    return MP_OK;
}

int mp_compute_model_rank_experts(struct mp_compute *c, const void *const **weights,
                                  const double **rows)
{
    *weights = c->weights;
    *rows = c->expert_rows;
    return c->seen.distinct;
}

void mp_compute_model_rank_take(struct mp_compute *c, struct mp_vffn_seen *out)
{
    *out = c->seen;
    memset(&c->seen, 0, sizeof c->seen);
}

/* What both tables share: every hook (the rank's `data` tells them apart) and the kinds the model
 * prices. */
#define MODEL_HOOKS                                                                                \
    .dispatch_modes = MP_DISPATCH_ALL,                                                             \
    .dispatch_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16) | MP_DTYPE_BIT(MP_DTYPE_FP8),                   \
    .weight_dtypes = MP_DTYPE_BIT(MP_DTYPE_BF16) | MP_DTYPE_BIT(MP_DTYPE_FP8),                     \
    .gemm_modes = 1u << MP_GEMM_GROUPED | 1u << MP_GEMM_SKINNY | 1u << MP_GEMM_FUSED,              \
    .fp8_gemm_modes =                                                                              \
        1u << MP_GEMM_LOOP | 1u << MP_GEMM_GROUPED | 1u << MP_GEMM_SKINNY | 1u << MP_GEMM_FUSED,   \
    .check_tolerance = 1, /* never checked: --check is refused on the model */                    \
    .fini = rank_fini, .device_name = rank_device_name, .alloc = rank_alloc, .free = rank_free,    \
    .alloc_zeroed = rank_alloc_zeroed,                                                             \
    .upload = rank_upload, .download = rank_download, .upload_bytes = rank_copy_bytes,             \
    .download_bytes = rank_copy_bytes, .gate = rank_gate, .permute = rank_permute,                 \
    .copy_rows = rank_copy_rows, .fp8_pack = rank_fp8, .fp8_unpack = rank_fp8,                     \
    .expert_ffn = rank_expert_ffn, .combine = rank_combine, .plan_setup = rank_plan_setup,         \
    .plan_build = rank_plan_build, .mark = rank_mark, .elapsed_us = rank_elapsed_us,               \
    .sync = rank_sync, .measure_peak = rank_measure_peak, .cache_setup = rank_cache_setup,         \
    .cache_fetch = rank_cache_fetch, .cache_release = rank_cache_release,                          \
    .cache_exposed_us = rank_cache_exposed_us, .delay = rank_delay

const struct mp_compute_ops mp_compute_model_rank = {
    .name = "model-rank",
    .memory = MP_MEMORY_HOST,
    .elem_size = 4,
    .init = rank_init,
    MODEL_HOOKS,
};

/* --backend model: no data; the layer's model runs on traced ranks (core/cluster_model/vrun.c). */
const struct mp_compute_ops mp_compute_model = {
    .name = "model",
    .memory = MP_MEMORY_VIRTUAL,
    .elem_size = 2, /* the profile's element size governs; bf16 by default */
    .init = virtual_init,
    MODEL_HOOKS,
};
