/* bench_opts.h - the option entries the benchmark binaries share, as table rows a binary lists, and
 * the resolution of model, layouts and backends every binary repeats. */
#ifndef MP_BENCH_OPTS_H
#define MP_BENCH_OPTS_H

#include <stddef.h>

#include "comm.h"
#include "compute.h" /* MP_MAX_CHUNKS */
#include "dedup.h"    /* mp_dedup_choices, MP_DEDUP_HELP */
#include "dtype.h"    /* mp_dtype_choices, MP_DISPATCH_DTYPE_HELP */
#include "dispatch.h" /* mp_dispatch_choices, MP_DISPATCH_HELP */
#include "model.h"
#include "options.h"
#include "step.h"     /* mp_phase_choices */

#define MP_O(field) offsetof(struct mp_bench_opts, field)
#define MP_NOLIMIT 1.0, 0.0

extern const char *const mp_routing_choices[];
extern const char *const mp_placement_choices[];
extern const char *const mp_gemm_choices[];
extern const char *const mp_cpu_bind_choices[];

/* Workload: model shape */
#define MP_OPT_MODEL(def)                                                                          \
    {"model", MP_OPT_STRING, MP_O(model), def, MP_NOLIMIT, NULL, "NAME|FILE",                      \
     "model preset (listed above) or a key=value model file"}
#define MP_OPT_EXPERTS {"experts", MP_OPT_INT, MP_O(experts), NULL, 1, MP_MODEL_EXPERTS_MAX, NULL, NULL, "override the expert count E"}
#define MP_OPT_TOPK {"topk", MP_OPT_INT, MP_O(topk), NULL, 1, MP_MODEL_TOPK_MAX, NULL, NULL, "override top-k K"}
#define MP_OPT_SHARED {"shared", MP_OPT_INT, MP_O(shared), NULL, 0, MP_MODEL_SHARED_MAX, NULL, NULL, "override the shared-expert count"}
#define MP_OPT_HIDDEN {"hidden", MP_OPT_INT, MP_O(hidden), NULL, 1, MP_MODEL_HIDDEN_MAX, NULL, NULL, "override the hidden size H"}
#define MP_OPT_FFN {"ffn", MP_OPT_INT, MP_O(ffn), NULL, 1, MP_MODEL_FFN_MAX, NULL, NULL, "override the expert FFN dimension D"}
#define MP_OPT_LAYERS {"layers", MP_OPT_INT, MP_O(layers), NULL, 1, MP_MODEL_LAYERS_MAX, NULL, NULL, "override the MoE layer count"}
/* Workload: the sweep */
#define MP_OPT_BATCH(def)                                                                          \
    {"batch", MP_OPT_INT_LIST, MP_O(batch), def, 1, 1 << 24, NULL, "LIST",                         \
     "tokens per step for the whole EP instance: 1,16,64 or 1:128:x2"}
#define MP_OPT_TOKENS_PER_RANK                                                                     \
    {"tokens-per-rank", MP_OPT_INT_LIST, MP_O(tokens_per_rank), NULL, 1, 1 << 24, NULL, "LIST",    \
     "tokens per EP rank per step, as DeepEP, pplx and vLLM count them, instead of --batch: each "  \
     "layout's batch is LIST times its ep (docs/CONVENTIONS.md)"}
#define MP_OPT_SEQ {"seq", MP_OPT_INT, MP_O(seq), "1", 1, 1 << 20, NULL, NULL, "sequence length (prefill): multiplies --batch"}
#define MP_OPT_CONTEXT                                                                             \
    {"context", MP_OPT_INT_LIST, MP_O(context), "4096", 1, 1 << 24, NULL, "LIST",                  \
     "KV-cache tokens per sequence: the modelled step's attention reads them, and the memory per " \
     "GPU holds them (a list sweeps)"}
#define MP_OPT_MICRO_BATCHES                                                                       \
    {"micro-batches", MP_OPT_INT_LIST, MP_O(micro_batches), "1", 1, 2, NULL, "LIST",               \
     "--backend model: split a step's batch in 1 or 2 micro-batches, one's dispatch and combine " \
     "under the other's attention and GEMMs (two-batch overlap; a list sweeps)"}
#define MP_OPT_PHASE                                                                               \
    {"phase", MP_OPT_STRING_LIST, MP_O(phase), "decode", MP_NOLIMIT, mp_phase_choices, "LIST",     \
     "--backend model: the step around the layer, decode (a token of every sequence from its KV "  \
     "cache) or prefill (a forward pass over prompts of --context tokens; a list sweeps)"}
#define MP_OPT_CHUNK                                                                               \
    {"chunk", MP_OPT_INT_LIST, MP_O(chunk), "0", 0, 1 << 24, NULL, "LIST",                         \
     "--phase prefill: run each prompt in pieces of at most TOKENS, a later piece reading the "    \
     "earlier ones' KV cache (chunked prefill; 0: whole prompts; a list sweeps)"}
#define MP_OPT_LAYOUT(def)                                                                         \
    {"layout", MP_OPT_STRING_LIST, MP_O(layout), def, MP_NOLIMIT, NULL, "LIST",                    \
     "tpXepY layouts to sweep (tp·ep = ranks); default: ep = ranks"}
#define MP_OPT_ROUTING                                                                             \
    {"routing", MP_OPT_STRING_LIST, MP_O(routing), "uniform", MP_NOLIMIT, mp_routing_choices,      \
     "LIST", "uniform, zipf:S, hot:N:F, lognormal:SIGMA, gate[:TAU], trace:FILE"}
#define MP_OPT_PLACEMENT                                                                           \
    {"placement", MP_OPT_STRING_LIST, MP_O(placement), "contiguous", MP_NOLIMIT,                   \
     mp_placement_choices, "LIST", "contiguous, round-robin, replicate-hot:R, eplb:SLOTS"}
#define MP_OPT_GROUP_LIMIT                                                                         \
    {"group-limit", MP_OPT_STRING_LIST, MP_O(group_limit), "off", MP_NOLIMIT, NULL, "LIST",       \
     "off, G:M (G groups of consecutive experts, each token routed within M of them) or M (G = "  \
     "the nodes the EP ranks span)"}
#define MP_OPT_SEED {"seed", MP_OPT_LLONG, MP_O(seed), "1", MP_NOLIMIT, NULL, NULL, "seed of weights, inputs and routing"}
/* Protocol */
#define MP_OPT_WARMUP(def) {"warmup", MP_OPT_INT, MP_O(warmup), def, 0, 1000000, NULL, NULL, "untimed iterations per point"}
#define MP_OPT_ITERS(def) {"iters", MP_OPT_INT, MP_O(iters), def, 1, 10000000, NULL, NULL, "timed iterations per point"}
#define MP_OPT_BACKEND                                                                             \
    {"backend", MP_OPT_STRING, MP_O(backend), "cpu", MP_NOLIMIT, mp_compute_choices, NULL,         \
     "compute backend (model: --comm model too unless given)"}
#define MP_OPT_COMM                                                                                \
    {"comm", MP_OPT_STRING, MP_O(comm), "mpi", MP_NOLIMIT, mp_comm_choices, NULL,                  \
     "communication backend (model: --backend model too unless given)"}
#define MP_OPT_CPU_BIND                                                                            \
    {"cpu-bind", MP_OPT_STRING, MP_O(cpu_bind), "auto", MP_NOLIMIT, mp_cpu_bind_choices, NULL,     \
     "bind a GPU rank to its GPU's NUMA node: gpu, auto (when the launcher did not bind), none"}
#define MP_OPT_CLUSTER                                                                             \
    {"cluster", MP_OPT_STRING, MP_O(cluster), NULL, MP_NOLIMIT, NULL, "NAME|FILE",                 \
     "cluster profile for --backend model: h100-ndr (the default), h200-ndr, h800-ib, a100-hdr, "  \
     "b200-xdr, cpu-host or a file"}
/* The most virtual ranks --backend model runs: each holds state per peer, so a point's memory and
 * time grow with the square of the world (2,048 ranks: 0.7 GB and 12 s a point of 20 iterations
 * on two cores; 4,096: 2.6 GB and 46 s). */
#define MP_WORLD_MAX 2048
#define MP_OPT_WORLD                                                                               \
    {"world", MP_OPT_INT, MP_O(world), NULL, 1, MP_WORLD_MAX, NULL, NULL,                          \
     "virtual ranks for --backend model (default: the first --layout's tp·ep, else one node of "   \
     "the profile)"}
#define MP_OPT_OUT {"out", MP_OPT_STRING, MP_O(out), NULL, MP_NOLIMIT, NULL, "DIR", "write CSV, samples and run.json into DIR"}
#define MP_OPT_RESUME {"resume", MP_OPT_FLAG, MP_O(resume), NULL, MP_NOLIMIT, NULL, NULL, "skip points already in --out"}
#define MP_OPT_FORCE {"force", MP_OPT_FLAG, MP_O(force), NULL, MP_NOLIMIT, NULL, NULL, "replace the run already in --out (every file of it goes)"}
#define MP_OPT_CHECK {"check", MP_OPT_FLAG, MP_O(check), NULL, MP_NOLIMIT, NULL, NULL, "compare every point's output with the single-process reference"}
#define MP_OPT_QUIET {"quiet", MP_OPT_FLAG, MP_O(quiet), NULL, MP_NOLIMIT, NULL, NULL, "no table on stdout"}
#define MP_OPT_INJECT_DELAY                                                                        \
    {"inject-delay-us", MP_OPT_DOUBLE, MP_O(inject_delay_us), "0", 0, 1e9, NULL, "US",             \
     "debug: busy-wait US µs before every dispatch/combine all-to-all (emulates a slower link)"}
#define MP_OPT_TIMEOUT                                                                             \
    {"timeout", MP_OPT_DOUBLE, MP_O(timeout), "600", 0, 1e7, NULL, "S",                            \
     "end the run with a message naming the point if one takes longer (0: never)"}
#define MP_OPT_STRAGGLE                                                                            \
    {"straggle", MP_OPT_STRING, MP_O(straggle), NULL, MP_NOLIMIT, NULL, "RANK:US",                 \
     "debug: world rank RANK spends US µs more in every expert FFN phase (a straggler)"}
#define MP_OPT_MAX_MEMORY                                                                          \
    {"max-memory", MP_OPT_SIZE, MP_O(max_memory), NULL, 1, 9.2e18, NULL, "SIZE",                   \
     "refuse points that need more per rank (default: 90% of the GPU's free memory with "      \
     "--backend cuda, else 90% of free host memory / ranks per host)"}
#define MP_OPT_OVERLAP                                                                             \
    {"overlap", MP_OPT_INT_LIST, MP_O(overlap), "1", 1, MP_MAX_CHUNKS, NULL, "LIST",               \
     "chunks to pipeline so dispatch, expert FFN and combine overlap (1: none; a list sweeps)"}
#define MP_OPT_DISPATCH                                                                            \
    {"dispatch", MP_OPT_STRING_LIST, MP_O(dispatch), "dynamic", MP_NOLIMIT, mp_dispatch_choices,   \
     "LIST", MP_DISPATCH_HELP}
#define MP_OPT_DEDUP                                                                               \
    {"dedup", MP_OPT_STRING_LIST, MP_O(dedup), "pair", MP_NOLIMIT, mp_dedup_choices, "LIST",       \
     MP_DEDUP_HELP}
#define MP_OPT_DISPATCH_DTYPE                                                                      \
    {"dispatch-dtype", MP_OPT_STRING_LIST, MP_O(dispatch_dtype), "bf16", MP_NOLIMIT,              \
     mp_dtype_choices, "LIST", MP_DISPATCH_DTYPE_HELP}
#define MP_OPT_WEIGHT_DTYPE                                                                        \
    {"weight-dtype", MP_OPT_STRING_LIST, MP_O(weight_dtype), "bf16", MP_NOLIMIT,                  \
     mp_dtype_choices, "LIST", MP_WEIGHT_DTYPE_HELP}
#define MP_OPT_EXPERT_CACHE                                                                        \
    {"expert-cache", MP_OPT_STRING_LIST, MP_O(expert_cache), "off", MP_NOLIMIT, NULL, "LIST",      \
     "device expert cache: off (every local expert resident) or SLOTS[:POLICY], each rank keeping " \
     "SLOTS of its experts' weights resident and fetching the others from a host pool before "    \
     "their FFN; POLICY lru (default), lfu or static (the SLOTS hottest stay); a list sweeps them " \
     "(docs/METRICS.md, Expert cache)"}
#define MP_OPT_GEMM                                                                                \
    {"gemm", MP_OPT_STRING, MP_O(gemm), "loop", MP_NOLIMIT, mp_gemm_choices, NULL,                 \
     "expert FFN GEMMs: loop (one GEMM pair per expert), grouped (one grouped GEMM per stage "     \
     "for all experts), skinny (experts of at most 8 rows in one weight-streaming kernel per "     \
     "stage, the rest as in loop) or fused (one kernel per stage for every expert, shared ones "   \
     "included, a tile per expert by its rows); all but loop need --backend cuda"}
#define MP_OPT_GRAPH                                                                               \
    {"graph", MP_OPT_FLAG, MP_O(graph), NULL, MP_NOLIMIT, NULL, NULL,                              \
     "capture each padded point's layer in a CUDA Graph once and replay it (--backend cuda "        \
     "--comm nccl --dispatch padded[:F])"}
#define MP_OPT_FFN_GRAPH                                                                           \
    {"graph", MP_OPT_FLAG, MP_O(graph), NULL, MP_NOLIMIT, NULL, NULL,                              \
     "capture each point's expert FFN in a CUDA Graph once and replay it: the kernels' time "      \
     "without the host's launch costs (--backend cuda)"}
#define MP_OPT_FLUSH_CACHE                                                                         \
    {"flush-cache", MP_OPT_FLAG, MP_O(flush_cache), "1", MP_NOLIMIT, NULL, NULL,                   \
     "evict the last-level cache (cpu) or L2 (cuda) before every timed iteration, untimed, so "    \
     "weights come from memory as in a full-size model"}
#define MP_OPT_RANK_SAMPLES                                                                        \
    {"rank-samples", MP_OPT_FLAG, MP_O(rank_samples), "1", MP_NOLIMIT, NULL, NULL,                 \
     "write layer_rank_samples.csv: every rank's phases, rows and wait in every timed iteration "  \
     "(about 240 bytes per iteration and rank; turn it off for huge sweeps)"}
#define MP_OPT_END {NULL, 0, 0, NULL, 0, 0, NULL, NULL, NULL}

/* A parsed layout. */
struct mp_layout {
    int tp, ep;
    char name[32]; /* canonical "tpXepY" */
};

/* Parse "tpXepY", "epY" (tp 1) or "tpX" (ep 1). Errors name --layout; MP_ERR_USAGE. */
int mp_layout_parse(const char *text, struct mp_layout *out);

/* Parse every --layout for a world of `world` ranks (an empty list means ep = world), refusing a
 * layout whose tp·ep differs from the world (`virtual`: the world is --world, not mpirun's ranks).
 * Heap array in *out. */
int mp_layouts_resolve(const struct mp_strlist *list, int world, int virtual_world,
                       struct mp_layout **out, int *n);

struct mp_routing;

/* Parse every --routing for model `m`. `gate_refusal`, when not NULL, is the message printed if a
 * gate routing is given (tools that have no activations to route). Heap array in *out. */
int mp_routings_parse(const struct mp_strlist *list, const struct mp_model *m, long long seed,
                      const char *gate_refusal, struct mp_routing **out, int *n);
void mp_routings_free(struct mp_routing *r, int n);

/* Refuse, before anything is measured, layouts whose tp does not divide D and placements that
 * cannot be built for a layout's EP size. */
int mp_sweep_validate(const struct mp_model *m, const struct mp_layout *layouts, int nlayouts,
                      const struct mp_strlist *placements);

/* The nodes the EP group of world rank 0 spans in a tp × ep layout (ranks 0, tp, 2·tp, ...),
 * from the launcher's node_of: the G of a --group-limit entry given as M alone. */
int mp_ep_nodes(const struct mp_comm *c, int tp, int ep);

/* Record on `pl` the launcher's node of each EP rank of a tp × ep layout, that of its first TP
 * rank (c->node_of[q·tp], as the dedup dispatch takes it), so every plan prefers a replica on the
 * token's node (mp_placement_set_nodes). MP_OK or MP_ERR_RUNTIME. */
struct mp_placement;
int mp_placement_comm_nodes(struct mp_placement *pl, const struct mp_comm *c, int tp);

/* The routing of the points of --group-limit entry `spec`: a shallow copy of `r` (sharing its
 * arrays; never free it) with groups and group_pick set for a layout whose EP ranks span `nodes`
 * nodes (mp_group_limit_parse, mp_group_limit_check). *inactive as mp_group_limit_parse. */
int mp_group_limit_apply(const struct mp_routing *r, const char *spec, int nodes,
                         struct mp_routing *out, int *inactive);

/* Refuse, before anything is measured, every --group-limit entry that some routing and layout
 * cannot take; rank 0 notes an "M" entry that cannot bind on a layout (it routes as off). */
int mp_group_limits_validate(const struct mp_strlist *limits, const struct mp_routing *routings,
                             int nrout, const struct mp_layout *layouts, int nlayouts,
                             const struct mp_comm *c);

struct mp_compute_ops;

/* The enum mp_gemm that --gemm names; MP_ERR_USAGE (naming --gemm and the backends that run it)
 * when the compute backend `ops` lacks it in its gemm_modes. */
int mp_gemm_mode(const struct mp_bench_opts *o, const struct mp_compute_ops *ops, int *gemm);

/* --expert-cache's entries: each a cache word (mp_cache_spec_parse), with no more slots than the
 * fewest experts a rank holds under every layout and placement of the sweep. MP_OK, or
 * MP_ERR_USAGE after one line naming --expert-cache. */
int mp_expert_caches_validate(const struct mp_strlist *caches, const struct mp_model *m,
                              const struct mp_layout *layouts, int nlayouts,
                              const struct mp_strlist *placements);

/* Whether argv gives --NAME ("--NAME VALUE" or "--NAME=VALUE", before any "--"): for a default
 * that depends on whether a flag was given at all. */
int mp_flag_given(int argc, char **argv, const char *name);

/* --tokens-per-rank against --batch (docs/CONVENTIONS.md): given both on the command line
 * (argv[1..argc)), prints one line naming both and returns MP_ERR_USAGE; else MP_OK. */
int mp_batch_flags_check(const struct mp_bench_opts *o, int argc, char **argv);

/* The sweep's batches: how many, and the bi-th of a layout with `ep` EP ranks (--tokens-per-rank
 * times ep when it was given, else --batch's). The largest over the sweep's layouts' ep values
 * (eps[0..n)) sizes the buffers. */
int mp_sweep_nbatch(const struct mp_bench_opts *o);
long mp_sweep_batch(const struct mp_bench_opts *o, int bi, int ep);
long mp_sweep_max_batch(const struct mp_bench_opts *o, const int *eps, int n);

/* Parse --straggle RANK:US for a world of `world` ranks (NULL: off, rank -1). */
int mp_straggle_parse(const char *text, int world, int *rank, double *us);

/* Resolve --model and the per-field overrides. */
int mp_bench_model(const struct mp_bench_opts *o, struct mp_model *m);

/* The help text listing model presets, appended to a binary's summary (static buffer). */
const char *mp_bench_help(const char *summary);

#endif
