/* test_step.c - unit test of the whole decode step's model (core/cluster_model/step.c): each part against its
 * closed form on a profile where only memory (or only compute) costs time, the KV cache's split
 * over the TP group, sliding windows, and the step's composition with one and two micro-batches
 * (the exchanges' share of the SMs included). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "cluster.h"
#include "dtype.h"
#include "metrics.h"
#include "model.h"
#include "step.h"

/* A profile where a kernel costs only its bytes at 1e12 B/s: no launch, no blend, no host, and
 * compute (and the links) so fast they round to nothing. */
static struct mp_cluster memory_only(void)
{
    struct mp_cluster c;
    memset(&c, 0, sizeof c);
    c.flops = c.flops_fp8 = 1e30;
    c.flops_eff = c.flops_fp8_eff = c.fused_fp8_eff = c.attn_eff = 1;
    c.hbm_bw = 1e12;
    c.hbm_eff = 1;
    c.gpus_per_node = 8;
    c.intra_bw = c.inter_bw = 1e30;
    c.intra_eff = c.inter_eff = 1;
    c.elem_bytes = 2;
    return c;
}

/* A grouped-query model without dense layers or vocabulary: H 1024, 8 query and 2 KV heads of
 * 128, 4 layers, every one a MoE layer. */
static struct mp_model gqa_model(void)
{
    struct mp_model m;
    memset(&m, 0, sizeof m);
    m.hidden = 1024;
    m.ffn = 512;
    m.experts = 8;
    m.topk = 2;
    m.layers = m.attn_layers = 4;
    m.attn = MP_ATTN_GQA;
    m.q_heads = 8;
    m.kv_heads = 2;
    m.head_dim = 128;
    m.kv_head_dim = 256;
    return m;
}

static void test_gqa_memory_bound(void)
{
    struct mp_cluster c = memory_only();
    struct mp_model m = gqa_model();
    double b = 16, L = 1000, H = 1024;
    struct mp_step_spec s = {.tp = 1, .ep = 1, .tokens = b, .context = L, .micro_batches = 1,
                             .weight_dtype = MP_DTYPE_BF16};
    struct mp_step_parts p;
    mp_step_parts(&c, &m, &s, &p);
    /* per layer: qkv (H × 12·128) and o (8·128 × H) weights and their activations in and out,
     * then K and V of 2 heads for L tokens of b sequences */
    double qkv = H * 12 * 128 * 2 + b * (12 * 128 + H) * 2, o = 1024 * H * 2 + b * (H + 1024) * 2;
    double kv = b * L * 2 * 2 * 128 * 2;
    CHECK_NEAR(p.attn, 4 * (qkv + o + kv) / 1e12 * 1e6, 1e-9);
    CHECK(p.dense == 0 && p.head == 0 && p.host == 0);
    /* the small kernels: two norms (2·b·H each) and the rotary embedding with the cache write */
    CHECK_NEAR(p.misc, 4 * (2 * 2 * b * H * 2 + b * 12 * 128 * 2 * 2) / 1e12 * 1e6, 1e-9);
    /* tp 2: each rank one KV head and 4 query heads, the weights halved */
    s.tp = 2;
    struct mp_step_parts p2;
    mp_step_parts(&c, &m, &s, &p2);
    double qkv2 = H * 6 * 128 * 2 + b * (6 * 128 + H) * 2, o2 = 512 * H * 2 + b * (H + 512) * 2;
    CHECK_NEAR(p2.attn, 4 * (qkv2 + o2 + kv / 2) / 1e12 * 1e6, 1e-6);
}

/* A profile where a kernel costs only its FLOPs at 1e15 FLOP/s: memory, launches and links free. */
static struct mp_cluster compute_only(void)
{
    struct mp_cluster c = memory_only();
    c.flops = c.flops_fp8 = 1e15;
    c.hbm_bw = 1e30;
    return c;
}

/* A prefill pass: the GEMMs at the pass's tokens, the causal core at (L + 1) / 2 keys a token,
 * the LM head on each prompt's last token only; chunked prompts keep the FLOPs and read the
 * earlier pieces' KV cache back. */
static void test_gqa_prefill(void)
{
    struct mp_cluster c = compute_only();
    struct mp_model m = gqa_model();
    m.vocab = 32000;
    double b = 4000, L = 1000, H = 1024, V = 32000;
    struct mp_step_spec s = {.tp = 1, .ep = 1, .tokens = b, .context = L, .micro_batches = 1,
                             .weight_dtype = MP_DTYPE_BF16, .phase = MP_PHASE_PREFILL};
    struct mp_step_parts p;
    mp_step_parts(&c, &m, &s, &p);
    double gemms = 2 * b * 12 * 128 * H + 2 * b * H * 1024, core = 4 * b * (L + 1) / 2 * 8 * 128;
    CHECK_NEAR(p.attn, 4 * (gemms + core) / 1e15 * 1e6, 1e-6);
    CHECK_NEAR(p.head, 2 * (b / L) * V * H / 1e15 * 1e6, 1e-9);
    /* chunks of 250: the same FLOPs; on memory alone, 4 pieces read back 0 + 250 + 500 + 750
     * tokens of K and V (2 heads of 128) a prompt, 1.5 a token */
    s.chunk = 250;
    struct mp_step_parts pc;
    mp_step_parts(&c, &m, &s, &pc);
    CHECK_NEAR(pc.attn, p.attn, 1e-9);
    struct mp_cluster mem = memory_only();
    s.chunk = 0;
    mp_step_parts(&mem, &m, &s, &p);
    s.chunk = 250;
    mp_step_parts(&mem, &m, &s, &pc);
    CHECK_NEAR(pc.attn - p.attn, 4 * b * 1.5 * 2 * 2 * 128 * 2 / 1e12 * 1e6, 1e-9);
    /* decode at the same tokens reads L keys of cache a sequence instead */
    s.phase = MP_PHASE_DECODE;
    s.chunk = 0;
    mp_step_parts(&c, &m, &s, &p);
    CHECK_NEAR(p.attn, 4 * (gemms + 4 * b * L * 8 * 128) / 1e15 * 1e6, 1e-6);
}

static void test_mla_cache_replicated(void)
{
    struct mp_cluster c = memory_only();
    struct mp_model m;
    memset(&m, 0, sizeof m);
    m.hidden = 7168;
    m.layers = m.attn_layers = 1;
    m.attn = MP_ATTN_MLA;
    m.q_heads = 128;
    m.q_lora_rank = 1536;
    m.kv_lora_rank = 512;
    m.qk_nope_head_dim = 128;
    m.qk_rope_head_dim = 64;
    m.v_head_dim = 128;
    struct mp_step_spec s = {.tp = 1, .ep = 1, .tokens = 64, .context = 100000,
                             .micro_batches = 1, .weight_dtype = MP_DTYPE_FP8};
    struct mp_step_parts p1, p8;
    mp_step_parts(&c, &m, &s, &p1);
    s.tp = 8;
    mp_step_parts(&c, &m, &s, &p8);
    /* the latent cache, 64 · 100000 · 576 · 2 bytes, is read whole on every rank of the group:
     * at this context it is most of the layer, and the heads' weights split */
    double cache_us = 64.0 * 100000 * 576 * 2 / 1e12 * 1e6;
    CHECK(p1.attn > cache_us && p8.attn > cache_us);
    CHECK(p8.attn < p1.attn);
    CHECK(p1.attn - cache_us < 0.1 * cache_us);
}

static void test_sliding_window(void)
{
    struct mp_cluster c = memory_only();
    struct mp_model m = gqa_model();
    struct mp_step_spec s = {.tp = 1, .ep = 1, .tokens = 8, .context = 100000,
                             .micro_batches = 1, .weight_dtype = MP_DTYPE_BF16};
    struct mp_step_parts full, half;
    mp_step_parts(&c, &m, &s, &full);
    m.sliding_layers = 2;
    m.sliding_window = 128;
    mp_step_parts(&c, &m, &s, &half);
    /* two layers read 128 tokens of cache instead of 100000 */
    double kv_token = 8 * 2 * 2 * 128 * 2 / 1e12 * 1e6;
    CHECK_NEAR(full.attn - half.attn, 2 * (100000 - 128) * kv_token, 1e-6);
}

static void test_dense_and_head(void)
{
    struct mp_cluster c = memory_only();
    struct mp_model m = gqa_model();
    m.dense_layers = 1;
    m.dense_ffn = 4096;
    m.vocab = 32000;
    struct mp_step_spec s = {.tp = 1, .ep = 4, .tokens = 32, .context = 10, .micro_batches = 1,
                             .weight_dtype = MP_DTYPE_FP8};
    struct mp_step_parts p;
    mp_step_parts(&c, &m, &s, &p);
    double wb = 1.0 + 4.0 / (128 * 128), H = 1024, F = 4096, b = 32;
    /* gate and up, the activation, down, and the fp8 quantization of both GEMMs' inputs */
    double quant = b * (H + F) * (2 + 1 + 4.0 / 128);
    double dense = (H * 2 * F * wb + b * (2 * F + H) * 2) + 3 * b * F * 2 +
                   (F * H * wb + b * (H + F) * 2) + quant;
    CHECK_NEAR(p.dense, dense / 1e12 * 1e6, 1e-9);
    /* the LM head stays bf16 */
    double head = 2 * (2 * b * H * 2) + 32000 * H * 2 + b * (32000 + H) * 2 + b * 32000 * 4.0;
    CHECK_NEAR(p.head, head / 1e12 * 1e6, 1e-9);
}

/* One micro-batch's layer of 50 µs: 10 of route and FFN, 40 of exchanges whose phases are a
 * quarter dispatch (notify 2, dispatch 8) and three quarters combine (TP reduce 6, combine 24). */
static struct mp_iter_metrics layer_50(double comm)
{
    struct mp_iter_metrics it;
    memset(&it, 0, sizeof it);
    it.layer_us = 10 + comm;
    it.comm_us = comm;
    it.notify_us = 2;
    it.dispatch_us = 8;
    it.tp_reduce_us = 6;
    it.combine_us = 24;
    return it;
}

static void test_composition(void)
{
    struct mp_step_parts p = {.attn = 100, .dense = 10, .head = 5, .misc = 20, .host = 7,
                              .moe_side = 30};
    struct mp_model m = gqa_model(); /* 4 MoE layers */
    struct mp_step_time t;
    struct mp_iter_metrics it = layer_50(40);
    mp_step_time(&p, &m, 1, &it, &t);
    CHECK_NEAR(t.moe, 200, 1e-12);
    CHECK(t.overlap == 0);
    CHECK_NEAR(t.step, 100 + 10 + 5 + 20 + 7 + 200, 1e-12);
    /* two micro-batches: a = 15 (attention), f = 10 (FFN), d = 10, c = 30; the slots hide
     * min(a, c) + min(a, d) + min(f, d) + min(f, c) = 15 + 10 + 10 + 10 per layer */
    mp_step_time(&p, &m, 2, &it, &t);
    CHECK_NEAR(t.moe, 400, 1e-12);
    CHECK_NEAR(t.overlap, 4 * 45, 1e-12);
    CHECK_NEAR(t.step, 142 + 400 - 180, 1e-12);
    /* exchanges of 4 µs (d 1, c 3): each hides whole, twice per layer */
    it = layer_50(4);
    mp_step_time(&p, &m, 2, &it, &t);
    CHECK_NEAR(t.overlap, 4 * 8, 1e-12);
}

/* Exchanges that hold a share σ of the SMs (the high-throughput kind) leave the compute beside
 * them the rest: a slot of compute x and exchange y hides min(x, (1 − σ)·y); only a decode step's
 * pair dispatch (the low-latency kind) has σ = 0. */
static void test_exchange_sm_share(void)
{
    struct mp_cluster c = compute_only();
    c.exchange_sm_share = 0.25;
    struct mp_model m = gqa_model(); /* 4 MoE layers */
    struct mp_step_spec s = {.tp = 1, .ep = 1, .tokens = 16, .context = 10, .micro_batches = 2,
                             .weight_dtype = MP_DTYPE_BF16};
    struct mp_step_parts p;
    mp_step_parts(&c, &m, &s, &p); /* a decode step's deduplicated dispatch holds them */
    CHECK_NEAR(p.sm_share, 0.25, 1e-15);
    s.pair_dispatch = 1; /* its pair dispatch, the low-latency kind, frees them */
    mp_step_parts(&c, &m, &s, &p);
    CHECK(p.sm_share == 0);
    s.phase = MP_PHASE_PREFILL; /* a prefill pass runs the high-throughput kind whatever the form */
    mp_step_parts(&c, &m, &s, &p);
    CHECK_NEAR(p.sm_share, 0.25, 1e-15);
    p = (struct mp_step_parts){.attn = 100, .moe_side = 30, .sm_share = 0.25};
    struct mp_step_time t;
    struct mp_iter_metrics it = layer_50(40);
    /* a = 15, f = 10, d = 10 (7.5 free), c = 30 (22.5 free): 15 + 7.5 + 7.5 + 10 per layer */
    mp_step_time(&p, &m, 2, &it, &t);
    CHECK_NEAR(t.overlap, 4 * 40, 1e-12);
    CHECK_NEAR(t.step, 100 + 400 - 160, 1e-12);
    /* one micro-batch runs its exchanges alone: nothing to share */
    mp_step_time(&p, &m, 1, &it, &t);
    CHECK(t.overlap == 0);
}

static void test_summarize(void)
{
    struct mp_step_parts p = {.attn = 100, .host = 10};
    struct mp_model m = gqa_model();
    struct mp_iter_metrics it[3];
    memset(it, 0, sizeof it);
    it[0].layer_us = 10;
    it[1].layer_us = 30;
    it[2].layer_us = 20;
    struct mp_step_result r;
    CHECK_INT(mp_step_summarize(&p, &m, 1, it, 3, 64, 0, 8, &r), 0);
    CHECK(r.valid);
    CHECK_NEAR(r.p50[MP_STEP_TOTAL], 110 + 4 * 20, 1e-12);
    CHECK_NEAR(r.p50[MP_STEP_MOE], 80, 1e-12);
    CHECK_NEAR(r.moe_compute, 80, 1e-12); /* the median iteration's, without exchanges */
    CHECK(r.p99[MP_STEP_TOTAL] > r.p50[MP_STEP_TOTAL]);
    CHECK_NEAR(r.p50[MP_STEP_ATTN], 100, 1e-12);
    CHECK_NEAR(r.tok_s_gpu, 64 / (190e-6) / 8, 1e-9);
}

int main(void)
{
    test_gqa_memory_bound();
    test_mla_cache_replicated();
    test_gqa_prefill();
    test_sliding_window();
    test_dense_and_head();
    test_composition();
    test_exchange_sm_share();
    test_summarize();
    return check_failures;
}
