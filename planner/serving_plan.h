/* serving_plan.h - plans for a serving workload (docs/planning.md, "Serving a workload"): a
 * prefill pool and a decode pool with the KV cache moved between them, or one co-located pool,
 * for requests of given input and output lengths at a given rate under a time-to-first-token and
 * a per-token SLO. */
#ifndef MP_SERVING_PLAN_H
#define MP_SERVING_PLAN_H

#include "capacity_plan.h"

/* The workload: requests arriving at `rate` per second (Poisson) whose prompt and output lengths
 * are `nlen` classes (isls[i], osls[i]) of probability p[i] (one class: every request alike), and
 * the prefill passes to weigh. mp_serving_moments fills the means. */
struct mp_serving_req {
    const long *isls, *osls;
    const double *p;
    int nlen;
    long isl, osl;         /* the mean lengths, rounded: messages and the split curve */
    double isl_mean, osl_mean, isl_sq_mean; /* E[isl], E[osl], E[isl²] */
    long isl_max;
    double rate;        /* requests per second */
    double slo_ttft_ms; /* mean time to first token, queueing and KV transfer included (0: none) */
    const long *tokens; /* prefill tokens per EP rank per pass to weigh */
    int ntokens;
    const long *chunks; /* prefill chunk sizes to weigh (0: whole prompts) */
    int nchunk;
};

/* The mean TTFT as plan.json and the report state it (docs/planning.md, "Serving a workload"). */
#define MP_SERVING_TTFT_FORMULA                                                                    \
    "W + E[passes] * S + KV transfer; W = lambda * E[s^2] / (2 * (1 - rho)), the M/G/1 mean "    \
    "wait (Pollaczek-Khinchine, Kleinrock, Queueing Systems Vol. 1, 1975; rho * s / (2 * (1 - "   \
    "rho)), M/D/1, for one prompt length), s = S * isl / tokens of a pass, lambda = rate / "      \
    "instances, rho = lambda * E[s]"

/* The means of w's classes into w: E[isl], E[osl], E[isl²], the largest prompt and the rounded
 * means. */
void mp_serving_moments(struct mp_serving_req *w);

/* The decode pool's context: the KV length a request reaches, averaged over the output tokens
 * (Σ p·osl·(isl + osl) / Σ p·osl; isl + osl for one class). */
double mp_serving_decode_context(const struct mp_serving_req *w);

/* The prefill step's prompt length: the token-weighted E[isl²] / E[isl], whose causal keys per
 * token are the mix's mean (isl for one class). */
double mp_serving_prefill_context(const struct mp_serving_req *w);

/* Most utilization a pool without a TTFT bound is planned to: the queue stays finite. */
#define MP_SERVING_MAX_UTIL 0.9

/* How one prefill pass serves the workload on `instances` instances of its layout. */
struct mp_prefill_serve {
    long instances, gpus;
    double util;     /* ρ: each instance's busy share */
    double queue_ms; /* mean wait before a prompt's first pass (M/D/1) */
    double passes;   /* passes a prompt spans: ⌈isl / piece⌉ */
    double ttft_ms;  /* queue + passes · pass + KV transfer (disaggregated) */
};

/* A pool answer: found, the candidate it runs (a prefill candidate's batch is the tokens of its
 * instance's pass, token_ms the pass; a decode candidate as moeperf-plan weighs it) and how it
 * serves the workload. */
struct mp_prefill_pool {
    int found;
    struct mp_plan_cand c;
    long chunk;
    struct mp_prefill_serve s;
    double input_tok_s_gpu; /* the pass's prompt tokens per second per GPU */
};

struct mp_colocated_pool {
    int found;
    struct mp_plan_cand d, p; /* the decode step and the prefill pass the instances run */
    long chunk;
    struct mp_prefill_serve s;
    double tpot_ms;           /* the p99 gap between a sequence's tokens (coloc_serves) */
    double prefill_share;     /* f_p: the instances' time in prefill passes */
    double mem_gb_per_gpu;    /* the decode batch's and one pass's KV cache beside the weights */
};

/* A point of the P:D split curve: the GPUs each pool needs at other lengths of the same total. */
struct mp_split_point {
    long isl, osl;
    long prefill_gpus, decode_gpus; /* −1: no plan at these lengths */
};

#define MP_SERVING_SPLIT 5

struct mp_serving_answer {
    const char *choice; /* "disaggregated", "colocated", or "none" */
    char why[512];      /* with "none": the reason and the closest shortfall */
    struct mp_prefill_pool prefill;
    int decode_found;
    struct mp_plan_cand decode;
    double kv_bytes; /* one request's KV cache, moved from the prefill to the decode pool */
    double kv_ms;    /* its transfer over the prefill GPUs' NICs */
    struct mp_colocated_pool coloc;
    long gpus;            /* of the chosen answer */
    double ttft_ms, tpot_ms;
    double out_tok_s_gpu; /* rate · osl over the answer's GPUs */
    double usd_per_mtok;  /* with a GPU-hour price, else NaN */
    int nsplit;
    struct mp_split_point split[MP_SERVING_SPLIT];
};

/* The serving answer for workload w: decode candidates dc[0..nd) of request dq (its throughput
 * rate · osl, its context isl + osl) with best `dbest` (−1: none met the SLO), and prefill
 * candidates weighed here from dq with phase prefill at every token count and chunk of w, each EP
 * size on its own; the co-located pool from the pairs of each; the KV transfer; the choice (fewest
 * GPUs); and the P:D split at other input/output ratios of the same total length, on the chosen
 * pools' layouts. MP_OK, or the error of the model. */
int mp_serving_plan(const struct mp_plan_req *dq, const struct mp_plan_cand *dc, int nd,
                    int dbest, const struct mp_serving_req *w, struct mp_serving_answer *a);

/* Mean wait in an M/G/1 queue of arrival rate `lambda`, service times of mean `m1` and second
 * moment `m2` (the Pollaczek–Khinchine mean, Kleinrock, Queueing Systems Vol. 1, 1975:
 * λ·E[s²] / (2·(1 − ρ)), ρ = λ·E[s]; for one service time s, ρ·s / (2·(1 − ρ)), M/D/1); +∞ at
 * ρ ≥ 1. */
double mp_mg1_wait(double lambda, double m1, double m2);

#endif
