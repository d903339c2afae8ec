/* routing.h - which experts each token goes to: seeded generators, the real-gate mode and traces. */
#ifndef MP_ROUTING_H
#define MP_ROUTING_H

#include <stdint.h>

enum mp_routing_kind {
    MP_ROUTE_UNIFORM,      /* "uniform" */
    MP_ROUTE_ZIPF,         /* "zipf:S": p_e ∝ 1/(e+1)^S */
    MP_ROUTE_HOT,          /* "hot:N:F": experts 0..N-1 F times as likely as the others */
    MP_ROUTE_LOGNORMAL,    /* "lognormal:SIGMA": p_e ∝ exp(SIGMA·z_e), z_e ~ N(0,1) from the seed */
    MP_ROUTE_GATE,         /* "gate" or "gate:TAU": softmax(x·Wg + TAU·Gumbel) → top-k, by the backend */
    MP_ROUTE_TRACE_COUNTS, /* "trace:FILE" with header "expert,count" */
    MP_ROUTE_TRACE_TOKENS, /* "trace:FILE" with header "token,expert0,...,expert{K-1}" */
};

/* Routing draws a point makes before timing and cycles through its iterations (fewer when it has
 * fewer iterations). */
#define MP_ROUTING_POOL_DRAWS 8

/* The draws of a point's pool: one per step, warm-up and timed, for a point with an expert cache
 * (`cached`: a cache would hold a short cycle's experts and hide the misses of routing re-drawn
 * each step; docs/METRICS.md, "Expert cache"), else at most MP_ROUTING_POOL_DRAWS, cycled; at
 * least 1. The measured layer and the model both size their pools by it. */
static inline int mp_routing_pool_size(int warmup, int iters, int cached)
{
    int steps = (warmup > 0 ? warmup : 0) + (iters > 0 ? iters : 0);
    if (!cached && steps > MP_ROUTING_POOL_DRAWS)
        steps = MP_ROUTING_POOL_DRAWS;
    return steps > 0 ? steps : 1;
}

struct mp_routing {
    enum mp_routing_kind kind;
    char spec[512];  /* as given (CSV column) */
    int experts, topk;
    double a, b;     /* zipf S | hot N,F | lognormal SIGMA | gate TAU */
    double *prob;    /* [experts] expected share of each expert, sums to 1; NULL for gate; a
                      * per-token trace gives each expert's frequency in the trace */
    double *cdf;     /* [experts+1] prefix sums of prob (cdf[0] = 0), when prob is set */
    long ntrace;     /* per-token trace: rows */
    int32_t *trace;  /* per-token trace: [ntrace * topk] expert ids */
    /* --group-limit G:M (0, 0: off): the experts form `groups` groups of experts/groups
     * consecutive ids and each token is routed within `group_pick` of them (mp_group_limit_*) */
    int groups, group_pick;
};

/* Parse `spec` for a model with `experts` experts and top-`topk` routing. Trace files are read
 * here. Errors print one line naming --routing or the file (with line number) and what is accepted,
 * and return MP_ERR_USAGE. */
int mp_routing_parse(const char *spec, int experts, int topk, uint64_t seed, struct mp_routing *r);
void mp_routing_free(struct mp_routing *r);

/* 1 if routing is decided by the compute backend's gate (MP_ROUTE_GATE), else 0. */
int mp_routing_is_gate(const struct mp_routing *r);

/* Draw the routing of global tokens [tok0, tok0+ntok) for draw number `draw` of a point with
 * `batch` tokens: ids[t*topk + k] are distinct expert ids, w[t*topk + k] > 0 sum to 1 per token.
 * Pure function of (seed, draw, token): any slice on any rank agrees with the whole.
 * Generated kinds and counts traces sample top-k without replacement by p, successively (each pick
 * proportional to p among the experts not yet picked: the distribution Efraimidis-Spirakis keys
 * also give), in O(K log E) per token; ids come in the order they were picked. Trace tokens use
 * row (draw*batch + token) mod ntrace with equal weights 1/K. For gate routing the ids are uniform
 * samples (the backend's gate decides the real routing).
 * With r->groups > 0 (--group-limit G:M) each token first draws M of the G groups without
 * replacement, each pick proportional to a group's total probability mass among the groups not
 * yet picked (gate routing: equal masses), then its top-k as above from the experts of the chosen
 * groups alone (their probabilities renormalised), from a stream of its own: with M = G the ids
 * and weights equal those without the limit. */
void mp_routing_draw(const struct mp_routing *r, uint64_t seed, int draw, long batch, long tok0,
                     long ntok, int32_t *ids, float *w);

/* Parse one --group-limit entry: "off", "G:M" (G groups of consecutive expert ids, M of them per
 * token), or "M" (G = `nodes`, the nodes the layout's EP ranks span, so under contiguous placement
 * a token reaches at most M nodes). Sets *groups and *pick (0, 0 for off, and for "M" when
 * M >= nodes: the limit cannot bind; *inactive is then set to 1, else 0). Refuses, naming
 * --group-limit, the value and what is accepted: G not dividing `experts`, M outside 1..G,
 * M·experts/G < topk. Returns MP_OK or MP_ERR_USAGE. */
int mp_group_limit_parse(const char *spec, int experts, int topk, int nodes, int *groups, int *pick,
                         int *inactive);

/* Whether routing `r` can be limited to `pick` of `groups` groups: refuses (MP_ERR_USAGE, naming
 * --group-limit `spec` and --routing) a per-token trace (its expert ids are fixed) and a routing
 * whose experts of positive probability could leave fewer than top-k in some choice of groups. */
int mp_group_limit_check(const struct mp_routing *r, const char *spec, int groups, int pick);

/* Gumbel noise for the gate: noise[t*experts + e] = TAU·g, g ~ Gumbel(0,1), for global tokens
 * [tok0, tok0+ntok) of draw `draw`; all zeros when TAU = 0. */
void mp_routing_gate_noise(const struct mp_routing *r, uint64_t seed, int draw, long tok0, long ntok,
                           float *noise);

#endif
