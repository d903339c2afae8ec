/* step.h - one whole decode or prefill step on the cluster model: what a step computes and reads
 * besides its MoE layers (attention, dense layers, embedding and LM head, norms and small kernels,
 * the host's share), and the step's time from its MoE layers' with one micro-batch or two
 * overlapped (docs/planning.md, "What a step includes" and "A prefill step"). */
#ifndef MP_STEP_H
#define MP_STEP_H

#include "cluster.h"
#include "model.h"

/* The micro-batches a step may be split into: 1, or 2 (two-batch overlap). */
#define MP_STEP_MAX_MICRO_BATCHES 2

/* What a step does: one token of every sequence from its KV cache (decode), or a forward pass
 * over prompts that writes their KV cache and yields each prompt's first token (prefill). */
enum mp_phase { MP_PHASE_DECODE, MP_PHASE_PREFILL };

/* The phases' words, indexed by enum mp_phase and NULL-terminated (the option table's choices). */
extern const char *const mp_phase_choices[];

/* `word` ("decode" or "prefill") into *phase: MP_OK, or MP_ERR_USAGE naming `flag`. */
int mp_phase_parse(const char *flag, const char *word, enum mp_phase *phase);

/* One step (decode or prefill) of a deployment: a tp × ep layout whose attention is
 * data-parallel over the EP ranks (each holds its own sequences) and tensor-parallel inside each
 * TP group, as DeepSeek, SGLang and TensorRT-LLM deploy MoE models. */
struct mp_step_spec {
    int tp, ep;
    int phase;         /* enum mp_phase */
    double tokens;     /* tokens one EP rank computes in the step, all micro-batches: decode, one
                          per sequence; prefill, the prompt tokens of its forward pass */
    double context;    /* decode: KV-cache tokens per sequence; prefill: the prompt's length */
    double chunk;      /* prefill: each prompt runs in pieces of at most `chunk` tokens, a later
                          piece attending to the earlier ones' KV cache (chunked prefill); 0, or
                          chunk ≥ context: whole prompts */
    int micro_batches; /* 1, or 2: the tokens split in two, one's exchanges under the other's
                          compute */
    int weight_dtype;  /* enum mp_dtype of the attention and dense GEMMs' weights (fp8: as the
                          block-scaled fp8 checkpoints store them; the embedding and LM head stay
                          bf16, as those checkpoints keep them) */
    int pair_dispatch; /* 1: the MoE exchanges send each token-expert pair (--dedup pair), in
                          decode the low-latency kind, which frees its SMs while data flies; 0,
                          or any prefill: the high-throughput kind, which holds the profile's
                          exchange_sm_share of them while it runs */
};

/* µs of one step on one GPU, every layer and micro-batch: the parts besides the MoE blocks. */
struct mp_step_parts {
    double attn;     /* every layer's attention: projections, core, TP all-reduce */
    double dense;    /* the dense layers' FFNs and their TP all-reduce */
    double head;     /* embedding lookup, final norm, LM head, logits gathered over TP, sampling */
    double misc;     /* norms, rotary embedding, KV-cache writes, activations' quantization */
    double host;     /* step_host_us + the kernels' gaps (kernels · kernel_gap_us), the MoE
                        blocks' kernels included */
    double moe_side; /* the compute of one MoE layer's attention and small kernels (both
                        micro-batches): what two micro-batches overlap its exchanges with */
    double kernels;  /* kernels a step launches, the MoE blocks' included */
    double sm_share; /* σ: the SMs the exchanges hold while they run (exchange_sm_share, 0 for
                        a decode step's pair dispatch) */
};

/* The parts of step `s` of model `m` under profile `c` (every formula's source in step.c). A
 * model without attention (m->attn MP_ATTN_NONE) has attention and LM head 0. A prefill step
 * computes its attention over the prompts causally (MLA in its non-absorbed form), writes their
 * KV cache, runs the LM head on each prompt's last token only, and counts the MoE blocks' kernels
 * over their rows that the high-throughput dispatch's contiguous layout adds (misc). */
void mp_step_parts(const struct mp_cluster *c, const struct mp_model *m,
                   const struct mp_step_spec *s, struct mp_step_parts *p);

struct mp_iter_metrics;

/* A step's time from one iteration of its MoE layer (`it`: one micro-batch's tokens). */
struct mp_step_time {
    double step;    /* the step, µs */
    double moe;     /* the MoE layers one after the other: layers · micro_batches · layer_us */
    double overlap; /* what two micro-batches hide (0 with one micro-batch) */
};

/* step = attn + dense + head + misc + host + moe − overlap (docs/planning.md, "What a step
 * includes"). With two micro-batches A and B each MoE layer runs as the two-batch overlap of
 * DeepSeek's and SGLang's decode schedules it: four slots, each one micro-batch's compute beside
 * the other's exchange, A's attention with B's combine, B's attention with A's dispatch, A's
 * experts with B's dispatch, B's experts with A's combine; a slot lasts the longer of its two.
 * Per micro-batch a = moe_side / 2 (attention and small kernels), f = layer_us − comm_us (route
 * and expert FFN), and comm_us split into dispatch d (notify and dispatch) and combine c (TP
 * reduce and combine) in the shares of their phases. While an exchange of y runs, its kernels
 * hold σ = p->sm_share of the SMs and the compute x beside it runs on the rest, so the slot lasts
 * max(y, x + σ·y) and hides min(x, (1 − σ)·y); overlap = layers · (min(a, (1 − σ)c) +
 * min(a, (1 − σ)d) + min(f, (1 − σ)d) + min(f, (1 − σ)c)), with σ = 0 the longer of each pair. */
void mp_step_time(const struct mp_step_parts *p, const struct mp_model *m, int micro_batches,
                  const struct mp_iter_metrics *it, struct mp_step_time *t);

/* The parts of struct mp_step_result, in layer.csv's column order. */
enum { MP_STEP_TOTAL, MP_STEP_ATTN, MP_STEP_DENSE, MP_STEP_HEAD, MP_STEP_MISC, MP_STEP_HOST,
       MP_STEP_MOE, MP_STEP_OVERLAP, MP_STEP_NPARTS };

/* A modelled point's step over its iterations: the median step and its parts (those of the
 * iteration whose step is the median, nearest rank, so they add up), the p99 step likewise (µs),
 * the output tokens per second per GPU at the median step (prefill: each prompt's first token)
 * and, for a prefill step, the prompt tokens per second per GPU (NAN in decode); valid 0 for
 * measured points. */
struct mp_step_result {
    int valid;
    double p50[MP_STEP_NPARTS], p99[MP_STEP_NPARTS];
    double moe_compute; /* of the median step's MoE layers, their route and expert FFN:
                           layers · micro_batches · (layer_us − comm_us) of that iteration */
    double tok_s_gpu;
    double input_tok_s_gpu;
};

/* Summarize the step of every one of `iters` iterations of one micro-batch's MoE layer
 * (`metrics`) with parts `p`: `tokens` output tokens per step (batch · seq) and `input` prompt
 * tokens (0 in decode: input_tok_s_gpu NAN) over `gpus` GPUs. MP_OK, or MP_ERR_RUNTIME when out
 * of memory (r->valid stays 0). */
int mp_step_summarize(const struct mp_step_parts *p, const struct mp_model *m, int micro_batches,
                      const struct mp_iter_metrics *metrics, int iters, double tokens,
                      double input, int gpus, struct mp_step_result *r);

/* The step of a modelled point `s` from its layer model's `iters` iterations (one micro-batch's
 * tokens each): mp_step_parts, then mp_step_summarize over tp · ep GPUs with s->tokens · ep
 * output tokens (decode), or s->tokens · ep prompt tokens and s->tokens · ep / context first
 * tokens (prefill). MP_OK or MP_ERR_RUNTIME. */
int mp_step_of_point(const struct mp_cluster *c, const struct mp_model *m,
                     const struct mp_step_spec *s, const struct mp_iter_metrics *metrics,
                     int iters, struct mp_step_result *r);

#endif
