/* step.c - the whole decode or prefill step's parts besides the MoE layers, and the step's time
 * from its MoE layers' (see step.h, docs/planning.md "What a step includes", "A prefill step"). */
#include "step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "metrics.h"
#include "stats.h"

const char *const mp_phase_choices[] = {"decode", "prefill", NULL};

int mp_phase_parse(const char *flag, const char *word, enum mp_phase *phase)
{
    for (int i = 0; mp_phase_choices[i]; i++)
        if (strcmp(word, mp_phase_choices[i]) == 0) {
            *phase = (enum mp_phase)i;
            return MP_OK;
        }
    mp_usage("%s %s: accepted are decode (one token per sequence from its KV cache) and prefill "
             "(a forward pass over prompts)", flag, word);
    return MP_ERR_USAGE;
}

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

/* What one micro-batch of `b` tokens costs in one attention layer on one GPU. */
struct attn_cost {
    double attn;    /* projections, core and TP all-reduce */
    double misc;    /* its norms and small kernels */
    double kernels; /* kernels launched */
};

/* The work of one attention layer for one micro-batch on one GPU. Decode: `b` sequences each
 * reading `keys` tokens of KV cache. Prefill: `b` prompt tokens, each attending to `keys` tokens
 * on average (causal_keys), and `prefix` tokens of earlier prompt pieces per token whose KV cache
 * the pass reads back (chunked prefill). */
struct attn_work {
    int prefill;
    double b, keys, prefix;
};

/* Multi-head latent attention (DeepSeek-V2's paper, section 2.1.3). Decode runs it absorbed
 * (FlashMLA): the queries' nope part is multiplied into the latent space by W_UK, attention runs
 * over the cached latent (kv_lora_rank + qk_rope_head_dim per token and layer, one head every
 * query head shares) and its output leaves the latent space through W_UV. Prefill runs it as
 * multi-head attention, as SGLang's and vLLM's prefill paths do: W_UK and W_UV (kv_b) project the
 * latent of the pass's tokens, and of the earlier pieces' cached tokens, up to every head's nope
 * key and value, and the core is causal attention of head dims nope + rope (scores) and v. The
 * down projections (q_a, kv_a) are replicated over the TP group, the heads split. */
static void mla_layer(const struct mp_cluster *c, const struct mp_model *m,
                      const struct attn_work *w, int tp, int wd, struct attn_cost *a)
{
    double H = m->hidden, hq = ceil_div(m->q_heads, tp), nope = m->qk_nope_head_dim,
           rope = m->qk_rope_head_dim, lat = m->kv_lora_rank, v = m->v_head_dim,
           ql = m->q_lora_rank, cache = lat + rope, b = w->b;
    double proj = gemm_us(c, b, ql + cache, H, wd); /* q_a and kv_a fused */
    double small = small_us(c, 2 * b * H * ACT_BYTES) + small_us(c, b * cache * ACT_BYTES * 2) +
                   quant_us(c, b, H, wd);
    if (ql > 0) { /* q_a's norm, then q_b */
        proj += gemm_us(c, b, hq * (nope + rope), ql, wd);
        small += small_us(c, 2 * b * ql * ACT_BYTES) + quant_us(c, b, ql, wd);
    } else {
        proj += gemm_us(c, b, hq * (nope + rope), H, wd);
    }
    /* the rotary embedding and the latent's KV-cache write */
    small += small_us(c, b * hq * rope * ACT_BYTES * 2) + small_us(c, b * cache * ACT_BYTES);
    double core;
    if (w->prefill) {
        /* kv_b up-projects every attended token's latent once: the pass's and the prefix's */
        double up = b * (1 + w->prefix), pairs = b * w->keys;
        proj += gemm_us(c, up, hq * (nope + v), lat, wd);
        small += quant_us(c, up, lat, wd) + small_us(c, up * hq * (nope + rope) * ACT_BYTES);
        double bytes = (up * hq * (nope + rope + v) + b * hq * (nope + rope + v)) * ACT_BYTES;
        core = kernel_us(c, 2.0 * pairs * hq * (nope + rope + v), c->flops * c->attn_eff, bytes);
    } else {
        /* W_UK and W_UV: per head a GEMM of K nope (v) and N kv_lora_rank, one batched call each,
         * in bf16 (DeepSeek-V3's inference code dequantizes an fp8 wkv_b to absorb it) */
        proj += gemm_us(c, b, hq * lat, nope, MP_DTYPE_BF16) +
                gemm_us(c, b, hq * v, lat, MP_DTYPE_BF16);
        double kv_bytes = b * w->keys * cache * c->elem_bytes;
        double flops = 2.0 * b * w->keys * hq * (cache + lat); /* scores over the latent, values */
        core = kernel_us(c, flops, c->flops * c->attn_eff, kv_bytes);
    }
    proj += gemm_us(c, b, H, hq * v, wd); /* o_proj */
    small += quant_us(c, b, hq * v, wd);
    double reduce = mp_cost_allreduce_us(c, b * H * ACT_BYTES, tp);
    small += small_us(c, 2 * b * H * ACT_BYTES); /* the post-attention norm and residual */
    a->attn = proj + core + reduce;
    a->misc = small;
    /* 5 GEMMs (prefill: 4 and kv_b's key assembly), the core, the all-reduce; norms (input, kv_a,
     * q_a's, post-attention), the rotary embedding and the cache write; fp8: the inputs of the
     * fused down projection, q_b and o (prefill: and kv_b) */
    a->kernels = 5 + 1 + (tp > 1) + 5 + (ql > 0) + (wd == MP_DTYPE_FP8) * (2 + (ql > 0)) +
                 w->prefill * (wd == MP_DTYPE_FP8);
}

/* Grouped-query (or multi-head) attention (Ainslie et al. 2023): q, k and v projected in one
 * GEMM, the KV heads split by the TP group (each rank keeps ⌈kv_heads / tp⌉), 2·head_dim cached
 * per KV head, token and layer; each token attends to `keys` tokens. Decode reads them from the
 * KV cache; prefill computes them in the pass (FlashAttention reads q, k and v once) and reads
 * back only the earlier pieces' cached keys and values. */
static void gqa_layer(const struct mp_cluster *c, const struct mp_model *m,
                      const struct attn_work *w, int tp, int wd, struct attn_cost *a)
{
    double H = m->hidden, hq = ceil_div(m->q_heads, tp), hkv = ceil_div(m->kv_heads, tp),
           hd = m->head_dim, b = w->b;
    double proj = gemm_us(c, b, (hq + 2 * hkv) * hd, H, wd) + gemm_us(c, b, H, hq * hd, wd);
    double kv_bytes = w->prefill ? (b * (2 * hq + 2 * hkv) * hd + b * w->prefix * 2 * hkv * hd) *
                                       c->elem_bytes
                                 : b * w->keys * 2 * hkv * hd * c->elem_bytes;
    double core = kernel_us(c, 4.0 * b * w->keys * hq * hd, c->flops * c->attn_eff, kv_bytes);
    double reduce = mp_cost_allreduce_us(c, b * H * ACT_BYTES, tp);
    /* the input norm, the rotary embedding with the KV-cache write, the post-attention norm */
    double small = 2 * small_us(c, 2 * b * H * ACT_BYTES) +
                   small_us(c, b * (hq + 2 * hkv) * hd * ACT_BYTES * 2) + quant_us(c, b, H, wd) +
                   quant_us(c, b, hq * hd, wd);
    a->attn = proj + core + reduce;
    a->misc = small;
    a->kernels = 2 + 1 + (tp > 1) + 3 + 2 * (wd == MP_DTYPE_FP8);
}

/* The keys a prompt token attends to on average under a causal mask, in a prompt of `L` tokens
 * with a sliding window of `W` (0: none): position i (0-based) attends to min(i + 1, W), so
 * (L + 1) / 2 without a window, (W·(W + 1)/2 + (L − W)·W) / L with one shorter than the prompt. */
static double causal_keys(double L, double W)
{
    if (!(W > 0) || L <= W)
        return (L + 1) / 2;
    return (W * (W + 1) / 2 + (L - W) * W) / L;
}

/* The earlier pieces' tokens a prompt token's pass reads back, on average, when a prompt of `L`
 * tokens runs in pieces of `C`: piece j (of k = ⌈L / C⌉) reads the j·C tokens before it, C·k(k−1)/2
 * over the prompt, per token C·k·(k − 1) / (2·L); 0 for whole prompts. A sliding window caps the
 * piece's reach at W. */
static double prefix_tokens(double L, double C, double W)
{
    if (!(C > 0) || C >= L)
        return 0;
    double k = ceil(L / C), per = C * k * (k - 1) / (2 * L);
    return W > 0 && per > W ? W : per;
}

/* One attention layer of micro-batch `b` (sliding: a window `W` > 0). */
static void attn_layer(const struct mp_cluster *c, const struct mp_model *m,
                       const struct mp_step_spec *s, double b, double W, int tp, int wd,
                       struct attn_cost *a)
{
    a->attn = a->misc = a->kernels = 0;
    struct attn_work w = {.prefill = s->phase == MP_PHASE_PREFILL, .b = b};
    if (w.prefill) {
        w.keys = causal_keys(s->context, W);
        w.prefix = prefix_tokens(s->context, s->chunk, W);
    } else {
        w.keys = W > 0 ? fmin(s->context, W) : s->context;
    }
    if (m->attn == MP_ATTN_MLA)
        mla_layer(c, m, &w, tp, wd, a);
    else if (m->attn == MP_ATTN_GQA || m->attn == MP_ATTN_MHA)
        gqa_layer(c, m, &w, tp, wd, a);
}

/* Kernels of one MoE block besides its expert FFN's: routing, the activations' quantization,
 * dispatch, combine and the residual add. Their own time is the layer model's (route, dispatch,
 * combine phases); only their gaps count here. */
#define MOE_BLOCK_KERNELS 5

/* The MoE block's kernels over its rows in a prefill step, besides the expert GEMMs, the exchanges
 * and routing the layer model times: the high-throughput dispatch (DeepEP's normal kernels)
 * delivers a rank's rows unordered, so a kernel scatters them into each expert's contiguous
 * block for the grouped GEMM (fp8 rows read and written), one applies SiLU·mul to the first
 * GEMM's bf16 output and quantizes it for the second, and one gathers the second's bf16 rows
 * back into their tokens, weighting each. `rows` per GPU: the EP rank's token-expert pairs and
 * shared-expert rows, each TP rank holding D/tp of every row's intermediate  [µs] */
static double moe_row_kernels_us(const struct mp_cluster *c, const struct mp_model *m, double b,
                                 int tp)
{
    double H = m->hidden, Dl = (double)m->ffn / tp, rows = b * (m->topk + m->shared);
    double fp8_row = H + 4 * ceil(H / MP_FP8_BLOCK);
    return small_us(c, 2 * rows * fp8_row) +
           small_us(c, rows * (2 * Dl * ACT_BYTES + Dl + 4 * ceil(Dl / MP_FP8_BLOCK))) +
           small_us(c, rows * H * ACT_BYTES + b * H * ACT_BYTES);
}

void mp_step_parts(const struct mp_cluster *c, const struct mp_model *m,
                   const struct mp_step_spec *s, struct mp_step_parts *p)
{
    int mb = s->micro_batches > 1 ? s->micro_batches : 1, tp = s->tp > 0 ? s->tp : 1;
    int wd = s->weight_dtype, prefill = s->phase == MP_PHASE_PREFILL;
    double b = s->tokens / mb, H = m->hidden;
    int nattn = m->attn_layers > 0 ? m->attn_layers : m->layers + m->dense_layers;
    int nslide = m->sliding_window > 0 ? m->sliding_layers : 0;
    if (nslide > nattn)
        nslide = nattn;
    struct attn_cost full, slide;
    attn_layer(c, m, s, b, 0, tp, wd, &full);
    attn_layer(c, m, s, b, m->sliding_window, tp, wd, &slide);
    if (!(b > 0)) /* an EP rank without tokens does nothing but wait */
        full = slide = (struct attn_cost){0, 0, 0};
    if (prefill && b > 0) { /* a MoE layer's row kernels, counted with its attention's */
        double rk = m->layers > 0 ? moe_row_kernels_us(c, m, b, tp) * m->layers / nattn : 0;
        full.misc += rk;
        slide.misc += rk;
        full.kernels += 3.0 * m->layers / nattn;
        slide.kernels += 3.0 * m->layers / nattn;
    }
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
     * gathered over the TP group (half an all-reduce's traffic) and sampling over them; a prefill
     * pass runs the head on each prompt's last token only, b / context of them on average */
    double head = 0;
    if (m->vocab > 0 && b > 0) {
        double V = (double)m->vocab / tp, last = prefill ? b / fmax(s->context, 1) : b;
        head = small_us(c, 2 * b * H * ACT_BYTES) + small_us(c, 2 * b * H * ACT_BYTES) +
               gemm_us(c, last, V, H, MP_DTYPE_BF16) +
               mp_cost_allreduce_us(c, last * V * tp * 4, tp) / 2 +
               small_us(c, last * m->vocab * 4.0);
        kernels += mb * (4.0 + (tp > 1) + prefill);
    }
    p->head = mb * head;
    kernels += (double)mb * m->layers * MOE_BLOCK_KERNELS;
    p->kernels = kernels;
    p->host = c->step_host_us + kernels * c->kernel_gap_us;
    /* DeepEP's low-latency kernels, which a decode step's pair dispatch stands for, free their SMs
     * once their RDMA messages are issued (deepseek-ai/profile-data README); its normal kernels
     * hold theirs, and prefill runs those whatever the form (the low-latency kernels' buffers take
     * a decode batch, not a prompt's thousands of tokens per rank) */
    p->sm_share = s->pair_dispatch && s->phase == MP_PHASE_DECODE ? 0 : c->exchange_sm_share;
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
        double spare = 1 - p->sm_share; /* of the SMs, what the exchanges leave the compute */
        t->overlap = m->layers * (fmin(a, spare * c) + fmin(a, spare * d) + fmin(f, spare * d) +
                                  fmin(f, spare * c));
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
                      const struct mp_iter_metrics *metrics, int iters, double tokens,
                      double input, int gpus, struct mp_step_result *r)
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
    r->input_tok_s_gpu = input > 0 && r->p50[MP_STEP_TOTAL] > 0 && gpus > 0
                             ? input / (r->p50[MP_STEP_TOTAL] * 1e-6) / gpus
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
    double tokens = s->tokens * s->ep, input = 0;
    if (s->phase == MP_PHASE_PREFILL) { /* every prompt yields its first token */
        input = tokens;
        tokens /= s->context > 0 ? s->context : 1;
    }
    return mp_step_summarize(&parts, m, s->micro_batches, metrics, iters, tokens, input,
                             s->tp * s->ep, r);
}
