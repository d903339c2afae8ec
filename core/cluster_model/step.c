/* step.c - the whole decode step's parts besides the MoE layers, and the step's time from its MoE
 * layers' (see step.h, docs/planning.md "What a step includes"). */
#include "step.h"

#include <math.h>
#include <stdlib.h>

#include "dtype.h"
#include "error.h"
#include "metrics.h"
#include "stats.h"

/* Bytes of an activation element: bf16, as every serving stack keeps them between kernels. */
#define ACT_BYTES 2.0

/* Bytes per weight element: block-scaled fp8 (MP_FP8_WEIGHT_BYTES), else the profile's element. */
static double weight_bytes(const struct mp_cluster *c, int dtype)
{
    return dtype == MP_DTYPE_FP8 ? MP_FP8_WEIGHT_BYTES : c->elem_bytes;
}

/* One kernel: the expert FFN's roofline (mp_cost_roofline_us) of its FLOPs at `rate` and its
 * bytes, plus launch_us, the fixed cost of one kernel (its ramp and tail)  [µs] */
static double kernel_us(const struct mp_cluster *c, double flops, double rate, double bytes)
{
    return mp_cost_roofline_us(c, flops, rate, bytes) + c->launch_us;
}

/* One GEMM of M rows: an M × K activation times a K × N weight in `dtype` (fp8: at the library
 * rate flops_fp8 · flops_fp8_eff, DeepGEMM's and cuBLASLt's block-scaled GEMMs), reading the
 * weight once and the activations in and out in bf16  [µs] */
static double gemm_us(const struct mp_cluster *c, double M, double N, double K, int dtype)
{
    double rate = dtype == MP_DTYPE_FP8 ? c->flops_fp8 * c->flops_fp8_eff : c->flops * c->flops_eff;
    double bytes = N * K * weight_bytes(c, dtype) + M * (N + K) * ACT_BYTES;
    return kernel_us(c, 2.0 * M * N * K, rate, bytes);
}

/* A small memory-bound kernel (a norm, the rotary embedding, a quantization, a KV-cache write)
 * moving `bytes`  [µs] */
static double small_us(const struct mp_cluster *c, double bytes)
{
    return kernel_us(c, 0, 1, bytes);
}

/* The kernel that quantizes a GEMM's bf16 input of `b` rows of `K` to fp8 with an fp32 scale per
 * 128 values, which block-scaled fp8 GEMMs take from a kernel of its own (DeepGEMM's README: "FP8
 * casting must be handled separately"); 0 for bf16 weights  [µs] */
static double quant_us(const struct mp_cluster *c, double b, double K, int dtype)
{
    return dtype == MP_DTYPE_FP8 ? small_us(c, b * K * (ACT_BYTES + 1 + 4.0 / MP_FP8_BLOCK)) : 0;
}

/* Ceiling of a / b for positive ints. */
static int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* What one micro-batch of `b` tokens costs in one attention layer of context `L` on one GPU. */
struct attn_cost {
    double attn;    /* projections, core and TP all-reduce */
    double misc;    /* its norms and small kernels */
    double kernels; /* kernels launched */
};

/* Multi-head latent attention in its absorbed decode form (DeepSeek-V2's paper, section 2.1.3;
 * FlashMLA): the queries' nope part is multiplied into the latent space by W_UK, attention runs
 * over the cached latent (kv_lora_rank + qk_rope_head_dim per token and layer, one head every
 * query head shares) and its output leaves the latent space through W_UV. The down projections
 * (q_a, kv_a) are replicated over the TP group, the heads split. */
static void mla_layer(const struct mp_cluster *c, const struct mp_model *m, double b, double L,
                      int tp, int wd, struct attn_cost *a)
{
    double H = m->hidden, hq = ceil_div(m->q_heads, tp), nope = m->qk_nope_head_dim,
           rope = m->qk_rope_head_dim, lat = m->kv_lora_rank, v = m->v_head_dim,
           ql = m->q_lora_rank, cache = lat + rope;
    double proj = gemm_us(c, b, ql + cache, H, wd); /* q_a and kv_a fused */
    double small = small_us(c, 2 * b * H * ACT_BYTES) + small_us(c, b * cache * ACT_BYTES * 2) +
                   quant_us(c, b, H, wd);
    if (ql > 0) { /* q_a's norm, then q_b */
        proj += gemm_us(c, b, hq * (nope + rope), ql, wd);
        small += small_us(c, 2 * b * ql * ACT_BYTES) + quant_us(c, b, ql, wd);
    } else {
        proj += gemm_us(c, b, hq * (nope + rope), H, wd);
    }
    /* W_UK and W_UV: per head a GEMM of K nope (v) and N kv_lora_rank, one batched call each, in
     * bf16 (DeepSeek-V3's inference code dequantizes an fp8 wkv_b to absorb it) */
    proj += gemm_us(c, b, hq * lat, nope, MP_DTYPE_BF16) + gemm_us(c, b, hq * v, lat, MP_DTYPE_BF16);
    /* the rotary embedding and the latent's KV-cache write */
    small += small_us(c, b * hq * rope * ACT_BYTES * 2) + small_us(c, b * cache * ACT_BYTES);
    double kv_bytes = b * L * cache * c->elem_bytes;
    double flops = 2.0 * b * L * hq * (cache + lat); /* scores over the latent, then values */
    double core = kernel_us(c, flops, c->flops * c->attn_eff, kv_bytes);
    proj += gemm_us(c, b, H, hq * v, wd); /* o_proj */
    small += quant_us(c, b, hq * v, wd);
    double reduce = mp_cost_allreduce_us(c, b * H * ACT_BYTES, tp);
    small += small_us(c, 2 * b * H * ACT_BYTES); /* the post-attention norm and residual */
    a->attn = proj + core + reduce;
    a->misc = small;
    /* 5 GEMMs, the core, the all-reduce; norms (input, kv_a, q_a's, post-attention), the rotary
     * embedding and the cache write; fp8: the inputs of the fused down projection, q_b and o */
    a->kernels = 5 + 1 + (tp > 1) + 5 + (ql > 0) + (wd == MP_DTYPE_FP8) * (2 + (ql > 0));
}

/* Grouped-query (or multi-head) attention (Ainslie et al. 2023): q, k and v projected in one
 * GEMM, the KV heads split by the TP group (each rank keeps ⌈kv_heads / tp⌉), 2·head_dim cached
 * per KV head, token and layer; `L` the tokens a sequence attends to. */
static void gqa_layer(const struct mp_cluster *c, const struct mp_model *m, double b, double L,
                      int tp, int wd, struct attn_cost *a)
{
    double H = m->hidden, hq = ceil_div(m->q_heads, tp), hkv = ceil_div(m->kv_heads, tp),
           hd = m->head_dim;
    double proj = gemm_us(c, b, (hq + 2 * hkv) * hd, H, wd) + gemm_us(c, b, H, hq * hd, wd);
    double kv_bytes = b * L * 2 * hkv * hd * c->elem_bytes;
    double core = kernel_us(c, 4.0 * b * L * hq * hd, c->flops * c->attn_eff, kv_bytes);
    double reduce = mp_cost_allreduce_us(c, b * H * ACT_BYTES, tp);
    /* the input norm, the rotary embedding with the KV-cache write, the post-attention norm */
    double small = 2 * small_us(c, 2 * b * H * ACT_BYTES) +
                   small_us(c, b * (hq + 2 * hkv) * hd * ACT_BYTES * 2) + quant_us(c, b, H, wd) +
                   quant_us(c, b, hq * hd, wd);
    a->attn = proj + core + reduce;
    a->misc = small;
    a->kernels = 2 + 1 + (tp > 1) + 3 + 2 * (wd == MP_DTYPE_FP8);
}

/* One attention layer of micro-batch `b` at context `L` (sliding: min(L, window)). */
static void attn_layer(const struct mp_cluster *c, const struct mp_model *m, double b, double L,
                       int tp, int wd, struct attn_cost *a)
{
    a->attn = a->misc = a->kernels = 0;
    if (m->attn == MP_ATTN_MLA)
        mla_layer(c, m, b, L, tp, wd, a);
    else if (m->attn == MP_ATTN_GQA || m->attn == MP_ATTN_MHA)
        gqa_layer(c, m, b, L, tp, wd, a);
}

/* Kernels of one MoE block besides its expert FFN's: routing, the activations' quantization,
 * dispatch, combine and the residual add. Their own time is the layer model's (route, dispatch,
 * combine phases); only their gaps count here. */
#define MOE_BLOCK_KERNELS 5

void mp_step_parts(const struct mp_cluster *c, const struct mp_model *m,
                   const struct mp_step_spec *s, struct mp_step_parts *p)
{
    int mb = s->micro_batches > 1 ? s->micro_batches : 1, tp = s->tp > 0 ? s->tp : 1;
    int wd = s->weight_dtype;
    double b = s->tokens / mb, H = m->hidden;
    int nattn = m->attn_layers > 0 ? m->attn_layers : m->layers + m->dense_layers;
    int nslide = m->sliding_window > 0 ? m->sliding_layers : 0;
    if (nslide > nattn)
        nslide = nattn;
    struct attn_cost full, slide;
    attn_layer(c, m, b, s->context, tp, wd, &full);
    attn_layer(c, m, b, fmin(s->context, m->sliding_window), tp, wd, &slide);
    if (!(b > 0)) /* an EP rank without tokens does nothing but wait */
        full = slide = (struct attn_cost){0, 0, 0};
    /* which layers are MoE layers does not matter to the sums; a MoE layer's attention is the
     * full-context one unless every attention layer slides */
    const struct attn_cost *moe_attn = nslide < nattn ? &full : &slide;
    p->attn = mb * ((nattn - nslide) * full.attn + nslide * slide.attn);
    p->misc = mb * ((nattn - nslide) * full.misc + nslide * slide.misc);
    p->moe_side = mb * (moe_attn->attn + moe_attn->misc);
    double kernels = mb * ((nattn - nslide) * full.kernels + nslide * slide.kernels);

    /* dense layers: gate and up in one GEMM, the activation, down; split by TP (Megatron-LM's
     * column then row split, one all-reduce) */
    double dense = 0;
    if (m->dense_layers > 0 && m->dense_ffn > 0 && b > 0) {
        double F = (double)m->dense_ffn / tp;
        dense = gemm_us(c, b, 2 * F, H, wd) + small_us(c, 3 * b * F * ACT_BYTES) +
                gemm_us(c, b, H, F, wd) + mp_cost_allreduce_us(c, b * H * ACT_BYTES, tp) +
                quant_us(c, b, H, wd) + quant_us(c, b, F, wd);
        kernels += mb * m->dense_layers * (3.0 + (tp > 1) + 2 * (wd == MP_DTYPE_FP8));
    }
    p->dense = mb * m->dense_layers * dense;

    /* the embedding's rows, the final norm, the LM head in bf16 (vocab / tp columns), the logits
     * gathered over the TP group (half an all-reduce's traffic) and sampling over them */
    double head = 0;
    if (m->vocab > 0 && b > 0) {
        double V = (double)m->vocab / tp;
        head = small_us(c, 2 * b * H * ACT_BYTES) + small_us(c, 2 * b * H * ACT_BYTES) +
               gemm_us(c, b, V, H, MP_DTYPE_BF16) +
               mp_cost_allreduce_us(c, b * V * tp * 4, tp) / 2 +
               small_us(c, b * m->vocab * 4.0);
        kernels += mb * (4.0 + (tp > 1));
    }
    p->head = mb * head;
    kernels += (double)mb * m->layers * MOE_BLOCK_KERNELS;
    p->kernels = kernels;
    p->host = c->step_host_us + kernels * c->kernel_gap_us;
}

void mp_step_time(const struct mp_step_parts *p, const struct mp_model *m, int micro_batches,
                  const struct mp_iter_metrics *it, struct mp_step_time *t)
{
    int mb = micro_batches > 1 ? micro_batches : 1;
    t->moe = (double)m->layers * mb * it->layer_us;
    t->overlap = 0;
    if (mb > 1) { /* the two-batch overlap's four slots (step.h) */
        double a = p->moe_side / mb, f = it->layer_us - it->comm_us;
        double out = it->notify_us + it->dispatch_us, back = it->tp_reduce_us + it->combine_us;
        double d = out + back > 0 ? it->comm_us * out / (out + back) : 0, c = it->comm_us - d;
        t->overlap = m->layers * (fmin(a, c) + fmin(a, d) + fmin(f, d) + fmin(f, c));
    }
    t->step = p->attn + p->dense + p->head + p->misc + p->host + t->moe - t->overlap;
}

/* The parts of step `t` (with p's fixed ones) into part[MP_STEP_NPARTS]. */
static void step_parts_of(const struct mp_step_parts *p, const struct mp_step_time *t, double *part)
{
    part[MP_STEP_TOTAL] = t->step;
    part[MP_STEP_ATTN] = p->attn;
    part[MP_STEP_DENSE] = p->dense;
    part[MP_STEP_HEAD] = p->head;
    part[MP_STEP_MISC] = p->misc;
    part[MP_STEP_HOST] = p->host;
    part[MP_STEP_MOE] = t->moe;
    part[MP_STEP_OVERLAP] = t->overlap;
}

int mp_step_summarize(const struct mp_step_parts *p, const struct mp_model *m, int micro_batches,
                      const struct mp_iter_metrics *metrics, int iters, double tokens, int gpus,
                      struct mp_step_result *r)
{
    r->valid = 0;
    int n = iters > 0 ? iters : 1, mb = micro_batches > 1 ? micro_batches : 1;
    double *step = malloc((size_t)n * 2 * sizeof *step), *sorted = step + n;
    if (!step) {
        mp_error("out of memory summarizing %d steps", n);
        return MP_ERR_RUNTIME;
    }
    struct mp_step_time t = {0};
    for (int i = 0; i < n; i++) {
        if (iters > 0)
            mp_step_time(p, m, mb, &metrics[i], &t);
        step[i] = t.step;
    }
    /* the step's median and p99 are those of one iteration each (nearest rank): its parts are
     * that iteration's, so they add up as the step does */
    for (int q = 0; q < 2; q++) {
        for (int i = 0; i < n; i++)
            sorted[i] = step[i];
        double want = mp_percentile_select(sorted, n, q ? 99 : 50);
        int at = 0;
        while (at < n - 1 && step[at] != want)
            at++;
        if (iters > 0)
            mp_step_time(p, m, mb, &metrics[at], &t);
        step_parts_of(p, &t, q ? r->p99 : r->p50);
        if (!q)
            r->moe_compute = iters > 0 ? (double)m->layers * mb *
                                             (metrics[at].layer_us - metrics[at].comm_us)
                                       : 0;
    }
    free(step);
    r->tok_s_gpu = r->p50[MP_STEP_TOTAL] > 0 && gpus > 0
                       ? tokens / (r->p50[MP_STEP_TOTAL] * 1e-6) / gpus
                       : NAN;
    r->valid = 1;
    return MP_OK;
}

int mp_step_of_point(const struct mp_cluster *c, const struct mp_model *m,
                     const struct mp_step_spec *s, const struct mp_iter_metrics *metrics,
                     int iters, struct mp_step_result *r)
{
    struct mp_step_parts parts;
    mp_step_parts(c, m, s, &parts);
    return mp_step_summarize(&parts, m, s->micro_batches, metrics, iters, s->tokens * s->ep,
                             s->tp * s->ep, r);
}
