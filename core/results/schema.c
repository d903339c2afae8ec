/* schema.c - the columns of every CSV file the tools write (see schema.h); docs/CSV.md shows these
 * tables and tests/unit/test_schema.c keeps the two equal. */
#include "schema.h"

#include <string.h>

#define MP_COLUMN_DEFINE(n) const char MPC_##n[] = #n;
MP_COLUMN_NAMES(MP_COLUMN_DEFINE)
#undef MP_COLUMN_DEFINE

#define T MP_CELL_TEXT
#define I MP_CELL_INT
#define R MP_CELL_REAL
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- keys ---- */

static const struct mp_column workload_key[] = {
    {MPC_source, "–", T, "`measured` for a measured run, `model` for `--backend model`"},
    {MPC_backend, "–", T, "compute backend (`--backend`)"},
    {MPC_comm, "–", T, "communication backend (`--comm`)"},
    {MPC_model, "–", T,
     "model name: the preset, the model file's `name`, or the file's basename; overrides such as "
     "`--hidden` do not change it"},
    {MPC_hidden, "–", I, "H, hidden size"},
    {MPC_ffn, "–", I, "D, expert FFN dimension (whole, before the TP split)"},
    {MPC_experts, "–", I, "E, routed experts"},
    {MPC_topk, "–", I, "K, experts per token"},
    {MPC_shared, "–", I, "shared experts"},
    {MPC_layout, "–", T, "canonical `tpXepY`"},
    {MPC_tp, "ranks", I, "TP group size"},
    {MPC_ep, "ranks", I, "EP group size"},
    {MPC_world, "ranks", I, "ranks in the run (= tp · ep)"},
    {MPC_routing, "–", T,
     "`--routing` entry as given (`uniform`, `zipf:1.2`, `trace:/path/file.csv`, …)"},
    {MPC_group_limit, "–", T,
     "`--group-limit` entry as given: `off`, `G:M` or `M` (METRICS.md, Group-limited routing); "
     "`off` for ffn.csv"},
    {MPC_placement, "–", T, "`--placement` entry as given"},
    {MPC_overlap, "chunks", I, "`--overlap` entry: chunks pipelined (1: none; 1 for ffn.csv)"},
    {MPC_dispatch, "–", T,
     "`--dispatch` entry as given: `dynamic`, `padded` or `padded:F`, with `+graph` when "
     "`--graph` replayed the layer (`dynamic` for ffn.csv, `dynamic+graph` when `--graph` "
     "replayed the FFN)"},
    {MPC_dedup, "–", T,
     "`--dedup` entry: what a dispatched row stands for, `pair` (one per token-expert pair), "
     "`rank` (one per token and destination rank) or `node` (one per token and destination node, "
     "forwarded inside it); `pair` for ffn.csv"},
    {MPC_dispatch_dtype, "–", T,
     "`--dispatch-dtype` entry: what the dispatched rows travel in, `bf16` (the backend's "
     "activation type as it is: bf16 on GPUs, fp32 rows on the cpu backend) or `fp8` (e4m3 codes "
     "and one fp32 scale per 128 values: H + 4·⌈H/128⌉ bytes a row); the combine stays in the "
     "activation type; `bf16` for ffn.csv"},
    {MPC_weight_dtype, "–", T,
     "`--weight-dtype` entry: what the routed and shared experts' weights are stored in, `bf16` "
     "(the backend's weight type as it is: bf16 on GPUs, fp32 on the cpu backend) or `fp8` (e4m3 "
     "codes and one fp32 scale per 128×128 block of each matrix: 3·H·Dl + 4·3·⌈H/128⌉·⌈Dl/128⌉ "
     "bytes an expert); the router's weights stay as they are"},
    {MPC_expert_cache, "–", T,
     "`--expert-cache` entry: `off` (every local expert's weights resident) or `SLOTS:POLICY`, "
     "each rank keeping SLOTS experts resident and fetching the others from a host pool "
     "(METRICS.md, Expert cache); `off` for ffn.csv"},
    {MPC_batch, "tokens", I, "tokens per step for the whole EP instance"},
    {MPC_seq, "–", I, "`--seq`; the point has `batch · seq` tokens"},
    {MPC_context, "tokens", I,
     "`--context` entry: KV-cache tokens per sequence of the modelled step and of the memory per "
     "GPU (moeperf-layer; empty for ffn.csv)"},
    {MPC_micro_batches, "–", I,
     "`--micro-batches` entry: 1, or 2 when a model step splits its batch in two and overlaps one "
     "half's exchanges with the other's compute (the layer columns are then one half's; 1 for "
     "ffn.csv)"},
    {MPC_phase, "–", T,
     "`--phase` entry: the modelled step around the layer, `decode` (one token of every sequence "
     "from its KV cache) or `prefill` (a forward pass over prompts of `context` tokens; "
     "docs/planning.md, A prefill step); empty for ffn.csv"},
    {MPC_chunk, "tokens", I,
     "`--chunk` entry: a prefill step's prompts run in pieces of at most this many tokens, each "
     "reading the earlier pieces' KV cache; 0: whole prompts (and in decode); empty for ffn.csv"},
    {MPC_seed, "–", I, "`--seed`"},
    {MPC_flush_cache, "–", I,
     "1 when the device's caches were evicted before every timed iteration (`--flush-cache`, the "
     "default), 0 with `--no-flush-cache` and for `--backend model` (METRICS.md); warm and cold "
     "runs are different points"},
};
const struct mp_columns mp_workload_key_columns = {workload_key, N(workload_key)};

static const struct mp_column a2a_key[] = {
    {MPC_source, "–", T, "`measured` for a measured run, `model` for `--backend model`"},
    {MPC_backend, "–", T, "compute backend (`--backend`)"},
    {MPC_comm, "–", T, "communication backend (`--comm`)"},
    {MPC_pattern, "–", T, "`uniform` or `moe`"},
    {MPC_layout, "–", T, "canonical `tpXepY`"},
    {MPC_tp, "ranks", I, "TP group size"},
    {MPC_ep, "ranks", I, "EP group size"},
    {MPC_world, "ranks", I, "ranks in the run (= tp · ep)"},
    {MPC_model, "–", T, "model name (moe; empty for uniform)"},
    {MPC_hidden, "–", I, "H, hidden size (moe; empty for uniform)"},
    {MPC_experts, "–", I, "E, routed experts (moe; empty for uniform)"},
    {MPC_topk, "–", I, "K, experts per token (moe; empty for uniform)"},
    {MPC_routing, "–", T, "`--routing` entry as given (moe; empty for uniform)"},
    {MPC_group_limit, "–", T, "`--group-limit` entry as given (moe; empty for uniform)"},
    {MPC_placement, "–", T, "`--placement` entry as given (moe; empty for uniform)"},
    {MPC_dedup, "–", T,
     "what a dispatched row stands for (`--dedup` pair, rank or node; moe; empty for uniform)"},
    {MPC_overlap, "chunks", I,
     "`--overlap` entry: chunks of tokens whose node forwards overlap the next chunk's inter-node "
     "phase (`--dedup node`; 1: none, and for uniform)"},
    {MPC_dispatch_dtype, "–", T,
     "`--dispatch-dtype` entry: what a dispatched row travels in, `bf16` (H times the backend's "
     "element size) or `fp8` (H + 4·⌈H/128⌉ bytes: e4m3 codes and one fp32 scale per 128 "
     "values); moe; empty for uniform, which sends `--bytes` as given"},
    {MPC_batch, "tokens", I, "tokens per step for the whole EP instance (0 for uniform)"},
    {MPC_seq, "–", I, "`--seq` (0 for uniform)"},
    {MPC_seed, "–", I, "`--seed`"},
    {MPC_bytes_per_peer, "bytes", I,
     "what one rank sends to one peer: the `--bytes` value for uniform, derived from the routing "
     "for moe (METRICS.md)"},
};
const struct mp_columns mp_a2a_key_columns = {a2a_key, N(a2a_key)};

/* ---- moeperf-layer ---- */

static const struct mp_column layer_cols[] = {
    {MPC_tokens_per_rank, "tokens", I, "most tokens any EP rank holds: `ceil(batch·seq / ep)`"},
    {MPC_iters, "count", I, "timed iterations"},
    {MPC_layer_us, "µs", R, "median of `layer_us`"},
    {MPC_layer_p99_us, "µs", R, "p99 of `layer_us`"},
    {MPC_layer_mean_us, "µs", R, "mean of `layer_us` over iterations"},
    {MPC_layer_stdev_us, "µs", R, "sample standard deviation of `layer_us` over iterations"},
    {MPC_layer_min_us, "µs", R, "minimum of `layer_us` over iterations"},
    {MPC_layer_max_us, "µs", R, "maximum of `layer_us` over iterations"},
    {MPC_layer_ci_lo_us, "µs", R, "lower bound of the 95 % confidence interval of the median of `layer_us`"},
    {MPC_layer_ci_hi_us, "µs", R, "upper bound of the 95 % confidence interval of the median of `layer_us`"},
    {MPC_spread, "–", R,
     "stability: (p90 − p10) / p50 of `layer_us` over iterations (METRICS.md, \"Stability\"); "
     "empty below 2 iterations"},
    {MPC_noisy, "–", I,
     "1 when `spread` exceeds 0.10 (too noisy to compare: moeperf-compare calls no change within "
     "a side's spread), else 0"},
    {MPC_ffn_us, "µs", R, "median of `ffn_us` (max over ranks)"},
    {MPC_ffn_p99_us, "µs", R, "p99 of `ffn_us` (max over ranks)"},
    {MPC_ffn_mean_us, "µs", R,
     "median over iterations of the per-iteration mean over ranks of the FFN time"},
    {MPC_comm_us, "µs", R, "median of `comm_us`"},
    {MPC_comm_p99_us, "µs", R, "p99 of `comm_us`"},
    {MPC_route_us, "µs", R, "median of the route phase's max over ranks"},
    {MPC_notify_us, "µs", R,
     "median of the notify phase's (the dynamic dispatch's count exchange) max over ranks; 0 "
     "without a count exchange (padded)"},
    {MPC_dispatch_us, "µs", R,
     "median of the dispatch phase's max over ranks (the data, without the count exchange)"},
    {MPC_tp_reduce_us, "µs", R, "median of the TP reduce phase's max over ranks"},
    {MPC_combine_us, "µs", R, "median of the combine phase's max over ranks"},
    {MPC_comm_comp_ratio, "–", R, "median of `comm_us / ffn_us`"},
    {MPC_bubble_ratio, "–", R, "median of `bubble_ratio`"},
    {MPC_wait_ratio, "–", R, "median of `wait_ratio`"},
    {MPC_load_imbalance, "–", R, "median of max/mean routed rows per rank"},
    {MPC_local_hit_rate, "–", R, "median share of token-expert pairs served on the token's rank"},
    {MPC_bytes_rank_max, "bytes", R,
     "median of the largest dispatch + combine bytes one rank sends to others"},
    {MPC_bytes_internode, "bytes", R,
     "median of dispatch + combine bytes sent between nodes, all ranks"},
    {MPC_bytes_intranode, "bytes", R,
     "median of dispatch + combine bytes sent between different ranks of one node, all ranks"},
    {MPC_dispatch_bytes_intranode, "bytes", R,
     "median of the dispatch's bytes sent within nodes, all ranks"},
    {MPC_dispatch_bytes_internode, "bytes", R,
     "median of the dispatch's bytes sent between nodes, all ranks"},
    {MPC_combine_bytes_intranode, "bytes", R,
     "median of the combine's bytes sent within nodes, all ranks"},
    {MPC_combine_bytes_internode, "bytes", R,
     "median of the combine's bytes sent between nodes, all ranks"},
    {MPC_drop_rate, "–", R,
     "median share of token-expert pairs a padded dispatch dropped over capacity (0 otherwise)"},
    {MPC_dispatch_intranode_GBps, "GB/s", R,
     "median of the dispatch's slowest rank's intra-node bytes / its dispatch time "
     "([METRICS.md](METRICS.md#link-bandwidth)); empty when no rank sends within a node, or "
     "pipelined"},
    {MPC_dispatch_internode_GBps, "GB/s", R,
     "median of the dispatch's slowest rank's inter-node bytes / its dispatch time; empty when no "
     "rank sends between nodes, or pipelined"},
    {MPC_combine_intranode_GBps, "GB/s", R,
     "median of the combine's slowest rank's intra-node bytes / its combine time; empty when no "
     "rank sends within a node, or pipelined"},
    {MPC_combine_internode_GBps, "GB/s", R,
     "median of the combine's slowest rank's inter-node bytes / its combine time; empty when no "
     "rank sends between nodes, or pipelined"},
    {MPC_dispatch_inter_us, "µs", R,
     "`--dedup node`: median of the dispatch's slowest rank's inter-node hop time "
     "([METRICS.md](METRICS.md#hop-times)); empty for `pair` and `rank`"},
    {MPC_dispatch_intra_us, "µs", R,
     "`--dedup node`: median of the dispatch's slowest rank's intra-node forward time; empty for "
     "`pair` and `rank`"},
    {MPC_combine_inter_us, "µs", R,
     "`--dedup node`: median of the combine's slowest rank's inter-node return time; empty for "
     "`pair` and `rank`"},
    {MPC_combine_intra_us, "µs", R,
     "`--dedup node`: median of the combine's slowest rank's intra-node return time; empty for "
     "`pair` and `rank`"},
    {MPC_cache_hit_rate, "–", R,
     "`--expert-cache`: median share of the experts' accesses (an expert with rows on a rank, once "
     "an iteration) that found its weights resident ([METRICS.md](METRICS.md#expert-cache)); "
     "empty with `off`"},
    {MPC_fetch_bytes, "bytes", R,
     "`--expert-cache`: median of the expert weight bytes all ranks fetched from their host pools "
     "(0 with `off`)"},
    {MPC_fetch_us, "µs", R,
     "`--expert-cache`: median of the longest time a rank's FFNs waited for fetches, the exposed "
     "part inside its FFN phase (0 with `off`)"},
    {MPC_cache_slots, "experts", I,
     "`--expert-cache`: its SLOTS, the experts a rank keeps resident (empty with `off`; the x of "
     "the expert_cache figure)"},
    {MPC_cache_policy, "–", T, "`--expert-cache`: its POLICY, `lru`, `lfu` or `static` (empty with "
     "`off`)"},
    {MPC_check_error, "–", R, "`‖out − ref‖/‖ref‖` with `--check`, else empty"},
    {MPC_overlap_efficiency, "–", R,
     "with `--overlap N > 1`: (t_comm + t_comp − t_ovrl) / min(t_comm, t_comp) as in IMB-NBC "
     "(METRICS.md), else empty"},
    {MPC_mem_gb_per_gpu, "GB", R,
     "`--backend model`: weights and KV cache the fullest GPU of the layout would hold to serve "
     "the model, bf16, `batch` sequences of `context` tokens (docs/planning.md, Memory per GPU); "
     "empty for measured runs"},
#define STEP_PART(name, what)                                                                      \
    {MPC_##name##_us, "µs", R,                                                                   \
     "`--backend model`: the step's " what " in its median iteration, the parts adding "   \
     "up (docs/planning.md, What a step includes); empty for measured runs, which time the layer"}, \
    {MPC_##name##_p99_us, "µs", R, "the same in the step's p99 iteration"}
    STEP_PART(step, "whole time, every layer: `attn_us + dense_us + head_us + misc_us + host_us "
                    "+ moe_us − overlap_us`"),
    STEP_PART(attn, "attention in every layer: projections, core over the KV cache, TP "
                    "all-reduce"),
    STEP_PART(dense, "dense layers' FFNs"),
    STEP_PART(head, "embedding, final norm, LM head and sampling"),
    STEP_PART(misc, "norms, rotary embedding, KV-cache writes and other small kernels"),
    STEP_PART(host, "host time not hidden under the GPU and the gaps between its kernels"),
    STEP_PART(moe, "MoE layers, one after the other: `layers · micro_batches · layer_us`"),
    STEP_PART(overlap, "time two micro-batches hide: each MoE layer's exchanges under the other "
                       "half's compute (0 with one micro-batch)"),
#undef STEP_PART
    {MPC_tok_s_gpu, "tokens/s", R,
     "`--backend model`: output tokens per second per GPU, `batch · seq / (step_us · world)` "
     "with the median step (prefill: each prompt's first token, `batch · seq / context` a step); "
     "empty for measured runs"},
    {MPC_input_tok_s_gpu, "tokens/s", R,
     "`--phase prefill`: prompt tokens per second per GPU, `batch · seq / (step_us · world)` with "
     "the median step; empty in decode and for measured runs"},
};

/* The per-iteration metrics of METRICS.md, in the field order of struct mp_iter_metrics. */
static const struct mp_column layer_sample_cols[] = {
    {MPC_iter, "–", I, "0-based index of the timed iteration"},
    {MPC_layer_us, "µs", R, "the slowest rank's layer time"},
    {MPC_ffn_us, "µs", R, "the slowest rank's FFN time"},
    {MPC_ffn_mean_us, "µs", R, "mean over ranks of the FFN time"},
    {MPC_comm_us, "µs", R, "`layer_us − ffn_us −` the slowest rank's route time"},
    {MPC_route_us, "µs", R, "the route phase's max over ranks"},
    {MPC_notify_us, "µs", R, "the notify phase's (count exchange) max over ranks; 0 for padded"},
    {MPC_dispatch_us, "µs", R, "the dispatch phase's max over ranks"},
    {MPC_tp_reduce_us, "µs", R, "the TP reduce phase's max over ranks"},
    {MPC_combine_us, "µs", R, "the combine phase's max over ranks"},
    {MPC_comm_comp_ratio, "–", R, "`comm_us / ffn_us`"},
    {MPC_bubble_ratio, "–", R, "share of all ranks' layer time spent waiting for the slowest FFN"},
    {MPC_wait_ratio, "–", R,
     "share of all ranks' layer time spent waiting in the collectives for the last rank of the "
     "group to arrive (notify, dispatch, TP reduce, combine; "
     "[METRICS.md](METRICS.md#wait_ratio))"},
    {MPC_load_imbalance, "–", R, "max/mean routed rows per rank"},
    {MPC_local_hit_rate, "–", R, "share of token-expert pairs served on the token's rank"},
    {MPC_bytes_rank_max, "bytes", R, "largest dispatch + combine bytes one rank sends to others"},
    {MPC_bytes_internode, "bytes", R, "dispatch + combine bytes sent between nodes, all ranks"},
    {MPC_bytes_intranode, "bytes", R,
     "dispatch + combine bytes sent between different ranks of one node, all ranks"},
    {MPC_dispatch_bytes_intranode, "bytes", R, "the dispatch's bytes sent within nodes, all ranks"},
    {MPC_dispatch_bytes_internode, "bytes", R, "the dispatch's bytes sent between nodes, all ranks"},
    {MPC_combine_bytes_intranode, "bytes", R, "the combine's bytes sent within nodes, all ranks"},
    {MPC_combine_bytes_internode, "bytes", R, "the combine's bytes sent between nodes, all ranks"},
    {MPC_drop_rate, "–", R,
     "share of token-expert pairs a padded dispatch dropped over capacity (0 otherwise)"},
    {MPC_dispatch_intranode_GBps, "GB/s", R,
     "intra-node bytes / dispatch time of the rank with the longest dispatch; empty when no rank "
     "sends within a node, or pipelined"},
    {MPC_dispatch_internode_GBps, "GB/s", R,
     "inter-node bytes / dispatch time of the rank with the longest dispatch; empty when no rank "
     "sends between nodes, or pipelined"},
    {MPC_combine_intranode_GBps, "GB/s", R,
     "intra-node bytes / combine time of the rank with the longest combine; empty when no rank "
     "sends within a node, or pipelined"},
    {MPC_combine_internode_GBps, "GB/s", R,
     "inter-node bytes / combine time of the rank with the longest combine; empty when no rank "
     "sends between nodes, or pipelined"},
    {MPC_dispatch_inter_us, "µs", R,
     "`--dedup node`: the inter-node hop time of the rank with the longest dispatch "
     "([METRICS.md](METRICS.md#hop-times)); with `dispatch_intra_us` at most `dispatch_us`; "
     "empty for `pair` and `rank`"},
    {MPC_dispatch_intra_us, "µs", R,
     "`--dedup node`: the intra-node forward time of the rank with the longest dispatch; empty "
     "for `pair` and `rank`"},
    {MPC_combine_inter_us, "µs", R,
     "`--dedup node`: the inter-node return time of the rank with the longest combine; with "
     "`combine_intra_us` at most `combine_us`; empty for `pair` and `rank`"},
    {MPC_combine_intra_us, "µs", R,
     "`--dedup node`: the intra-node return time of the rank with the longest combine; empty for "
     "`pair` and `rank`"},
    {MPC_cache_hit_rate, "–", R,
     "`--expert-cache`: Σ hits / Σ accesses of all ranks' experts ([METRICS.md](METRICS.md#expert-"
     "cache)); empty with `off`"},
    {MPC_fetch_bytes, "bytes", R, "`--expert-cache`: expert weight bytes all ranks fetched"},
    {MPC_fetch_us, "µs", R, "`--expert-cache`: the longest time a rank spent fetching"},
};

static const struct mp_column layer_rank_cols[] = {
    {MPC_rank, "–", I, "world rank"},
    {MPC_node, "–", I,
     "node index: ranks sharing memory form a node; nodes are numbered in order of their lowest "
     "rank"},
    {MPC_ep_rank, "–", I, "`rank / tp`"},
    {MPC_tp_rank, "–", I, "`rank mod tp`"},
    {MPC_tokens, "tokens", R, "tokens this rank holds"},
    {MPC_rows, "rows", R, "routed token-expert rows this rank's experts received and computed"},
    {MPC_ffn_rows, "rows", R, "`rows` + shared-expert rows (`shared · tokens`)"},
    {MPC_bytes_sent, "bytes", R, "dispatch + combine bytes sent to other ranks"},
    {MPC_dispatch_bytes_intranode, "bytes", R,
     "of those, the dispatch's to other ranks of this rank's node"},
    {MPC_dispatch_bytes_internode, "bytes", R, "of those, the dispatch's to ranks of other nodes"},
    {MPC_combine_bytes_intranode, "bytes", R,
     "of those, the combine's to other ranks of this rank's node"},
    {MPC_combine_bytes_internode, "bytes", R, "of those, the combine's to ranks of other nodes"},
    {MPC_route_us, "µs", R, "this rank's route time"},
    {MPC_notify_us, "µs", R, "this rank's notify time (the count exchange; 0 for padded)"},
    {MPC_dispatch_us, "µs", R, "this rank's dispatch time"},
    {MPC_ffn_us, "µs", R, "this rank's FFN time"},
    {MPC_tp_reduce_us, "µs", R, "this rank's TP reduce time"},
    {MPC_combine_us, "µs", R, "this rank's combine time"},
    {MPC_layer_us, "µs", R, "median of this rank's `L_r`, the sum of its six phases"},
    {MPC_start_skew_us, "µs", R,
     "start skew: how long this rank waited at the start of an iteration for the last rank to "
     "arrive, from its arrival at the start barrier to the end of the start alignment (mark to "
     "mark on this rank's timer, [METRICS.md](METRICS.md#measurement-protocol-moeperf-layer)); "
     "≥ 0, about the barrier's own latency on the last rank to arrive; not part of `layer_us`. 0 "
     "for `--backend model`"},
    {MPC_dispatch_inter_us, "µs", R,
     "`--dedup node`: this rank's inter-node hop time in the dispatch "
     "([METRICS.md](METRICS.md#hop-times)); empty for `pair` and `rank`"},
    {MPC_dispatch_intra_us, "µs", R,
     "`--dedup node`: this rank's intra-node forward time in the dispatch; empty for `pair` and "
     "`rank`"},
    {MPC_combine_inter_us, "µs", R,
     "`--dedup node`: this rank's inter-node return time in the combine; empty for `pair` and "
     "`rank`"},
    {MPC_combine_intra_us, "µs", R,
     "`--dedup node`: this rank's intra-node return time in the combine; empty for `pair` and "
     "`rank`"},
    {MPC_local_experts, "–", T,
     "the expert ids this rank's EP rank holds under the point's placement, replicas included, as "
     "ascending ranges separated by spaces (`0-3 9`)"},
    {MPC_cache_hits, "count", R,
     "`--expert-cache`: median over iterations of this rank's accesses that found the expert "
     "resident (0 with `off`)"},
    {MPC_cache_misses, "count", R, "`--expert-cache`: median of its fetches (0 with `off`)"},
    {MPC_fetch_bytes, "bytes", R, "`--expert-cache`: median of the bytes it fetched"},
    {MPC_fetch_us, "µs", R, "`--expert-cache`: median of the time it spent fetching"},
};

/* layer_rank_samples.csv: every rank's record of every timed iteration, unsummarised (the rows
 * layer_ranks.csv takes its medians over and layer_samples.csv its maxima over). */
static const struct mp_column layer_rank_sample_cols[] = {
    {MPC_iter, "–", I, "0-based index of the timed iteration"},
    {MPC_rank, "–", I, "world rank"},
    {MPC_node, "–", I, "node index (as in layer_ranks.csv)"},
    {MPC_host, "–", T, "the host the rank ran on; empty for `--backend model` (virtual ranks run nowhere)"},
    {MPC_ep_rank, "–", I, "`rank / tp`"},
    {MPC_tp_rank, "–", I, "`rank mod tp`"},
    {MPC_route_us, "µs", R, "this rank's route time in this iteration"},
    {MPC_notify_us, "µs", R, "its notify time (the count exchange; 0 for padded)"},
    {MPC_dispatch_us, "µs", R, "its dispatch time"},
    {MPC_ffn_us, "µs", R, "its expert FFN time"},
    {MPC_tp_reduce_us, "µs", R, "its TP reduce time"},
    {MPC_combine_us, "µs", R,
     "its combine time, the wait for the slowest rank's FFN and TP reduce included"},
    {MPC_layer_us, "µs", R, "`L_r`, the sum of its six phases; layer_samples.csv's `layer_us` is "
                            "the maximum over ranks"},
    {MPC_start_skew_us, "µs", R,
     "how long it waited at the iteration's start barrier for the last rank (as in "
     "layer_ranks.csv); not part of `layer_us`"},
    {MPC_notify_wait_us, "µs", R,
     "of `notify_us`, the time it waited for the last rank of its EP group to arrive "
     "([METRICS.md](METRICS.md#wait_ratio))"},
    {MPC_dispatch_wait_us, "µs", R, "of `dispatch_us`, likewise"},
    {MPC_tp_reduce_wait_us, "µs", R, "of `tp_reduce_us`, the wait for the last rank of its TP group"},
    {MPC_combine_wait_us, "µs", R,
     "of `combine_us`, the wait for the last rank of its EP group (the bubble among it)"},
    {MPC_wait_us, "µs", R,
     "`w_r`, the sum of its four waits; `Σ_r w_r / (N · layer_us)` over the iteration's ranks is "
     "layer_samples.csv's `wait_ratio`; `layer_us − wait_us` is the time it was busy"},
    {MPC_tokens, "tokens", R, "tokens it held"},
    {MPC_rows, "rows", R, "routed rows its experts computed"},
    {MPC_ffn_rows, "rows", R, "`rows` + shared-expert rows"},
    {MPC_bytes_sent, "bytes", R, "dispatch + combine bytes it sent to other ranks"},
    {MPC_cache_hits, "count", R, "`--expert-cache`: its accesses that found the expert resident"},
    {MPC_cache_misses, "count", R, "`--expert-cache`: its fetches"},
    {MPC_fetch_bytes, "bytes", R, "`--expert-cache`: the bytes it fetched"},
    {MPC_fetch_us, "µs", R, "`--expert-cache`: the time it spent fetching"},
};

const struct mp_csv_schema mp_schema_layer_rank_samples = {
    "layer_rank_samples.csv", "moeperf-layer",
    "one per point, timed iteration and rank (about 240 bytes a row: `iters · ranks` rows a "
    "point; `--no-rank-samples` leaves the file out)",
    &mp_workload_key_columns, {layer_rank_sample_cols, N(layer_rank_sample_cols)}};

const struct mp_csv_schema mp_schema_layer = {
    "layer.csv", "moeperf-layer", "one per point: summary over iterations",
    &mp_workload_key_columns, {layer_cols, N(layer_cols)}};
const struct mp_csv_schema mp_schema_layer_samples = {
    "layer_samples.csv", "moeperf-layer", "one per point and timed iteration",
    &mp_workload_key_columns, {layer_sample_cols, N(layer_sample_cols)}};
const struct mp_csv_schema mp_schema_layer_ranks = {
    "layer_ranks.csv", "moeperf-layer",
    "one per point and rank; each value is the median over the timed iterations, taken per column",
    &mp_workload_key_columns, {layer_rank_cols, N(layer_rank_cols)}};

/* ---- moeperf-a2a ---- */

static const struct mp_column a2a_cols[] = {
    {MPC_bytes_per_rank, "bytes", I,
     "bytes one rank sends in one alltoallv, self included (moe: mean over draws of the largest "
     "rank's send)"},
    {MPC_iters, "count", I, "timed iterations"},
    {MPC_time_us, "µs", R, "median of the slowest rank's time"},
    {MPC_time_p99_us, "µs", R, "p99 of the slowest rank's time"},
    {MPC_time_mean_us, "µs", R, "mean of the slowest rank's time"},
    {MPC_time_stdev_us, "µs", R, "sample standard deviation of the slowest rank's time"},
    {MPC_time_min_us, "µs", R, "minimum of the slowest rank's time"},
    {MPC_time_max_us, "µs", R, "maximum of the slowest rank's time"},
    {MPC_time_ci_lo_us, "µs", R, "lower bound of the 95 % confidence interval of the median"},
    {MPC_time_ci_hi_us, "µs", R, "upper bound of the 95 % confidence interval of the median"},
    {MPC_spread, "–", R,
     "stability: (p90 − p10) / p50 of the slowest rank's time over iterations (METRICS.md, "
     "\"Stability\"); empty below 2 iterations"},
    {MPC_noisy, "–", I, "1 when `spread` exceeds 0.10 (too noisy to compare), else 0"},
    {MPC_algbw_GBps, "GB/s", R, "`bytes_per_rank / time_us / 10³`"},
    {MPC_busbw_GBps, "GB/s", R, "`algbw · (ep − 1) / ep`"},
};
static const struct mp_column a2a_sample_cols[] = {
    {MPC_iter, "–", I, "0-based index of the timed iteration"},
    {MPC_time_us, "µs", R, "the slowest rank's time"},
};

const struct mp_csv_schema mp_schema_a2a = {"a2a.csv", "moeperf-a2a",
                                            "one per point: summary over iterations",
                                            &mp_a2a_key_columns, {a2a_cols, N(a2a_cols)}};
const struct mp_csv_schema mp_schema_a2a_samples = {
    "a2a_samples.csv", "moeperf-a2a", "one per point and timed iteration", &mp_a2a_key_columns,
    {a2a_sample_cols, N(a2a_sample_cols)}};

/* ---- moeperf-ffn ---- */

static const struct mp_column ffn_cols[] = {
    {MPC_tokens_per_rank, "tokens", I, "`ceil(batch·seq / ep)`"},
    {MPC_rows, "rows", I,
     "rows of the critical rank (the EP rank with the most rows), shared-expert rows included"},
    {MPC_active_experts, "count", I,
     "the critical rank's experts with at least one row, shared experts included"},
    {MPC_flops, "FLOP", I, "`6 · H · (D/tp) · rows`"},
    {MPC_weight_bytes, "bytes", I, "`3 · H · (D/tp) · active_experts · elem`"},
    {MPC_iters, "count", I, "timed iterations"},
    {MPC_ffn_us, "µs", R, "median of the FFN time (max over ranks)"},
    {MPC_ffn_p99_us, "µs", R, "p99 of the FFN time (max over ranks)"},
    {MPC_ffn_mean_us, "µs", R,
     "mean over iterations of the FFN time (in layer.csv: the mean over ranks)"},
    {MPC_ffn_stdev_us, "µs", R, "sample standard deviation over iterations"},
    {MPC_ffn_min_us, "µs", R, "minimum over iterations"},
    {MPC_ffn_max_us, "µs", R, "maximum over iterations"},
    {MPC_ffn_ci_lo_us, "µs", R, "lower bound of the 95 % confidence interval of the median"},
    {MPC_ffn_ci_hi_us, "µs", R, "upper bound of the 95 % confidence interval of the median"},
    {MPC_spread, "–", R,
     "stability: (p90 − p10) / p50 of the FFN time over iterations (METRICS.md, \"Stability\"); "
     "empty below 2 iterations"},
    {MPC_noisy, "–", I, "1 when `spread` exceeds 0.10 (too noisy to compare), else 0"},
    {MPC_achieved_GFLOPs, "GFLOP/s", R, "`flops` / median time"},
    {MPC_achieved_GBps, "GB/s", R, "`weight_bytes` / median time"},
    {MPC_peak_GFLOPs, "GFLOP/s", R,
     "compute roofline peak measured at start-up (rank 0); `--backend model`: the profile's "
     "`flops · flops_eff` (`flops_fp8` for fp8 weights); empty if not measured"},
    {MPC_peak_GBps, "GB/s", R,
     "memory roofline peak measured at start-up (rank 0); `--backend model`: the profile's "
     "`hbm_bw · hbm_eff`; empty if not measured"},
    {MPC_bound, "–", T, "`memory` or `compute`; empty without peaks"},
    {MPC_roofline_fraction, "–", R, "achieved FLOP/s / attainable FLOP/s; empty without peaks"},
    {MPC_cache_hit_rate, "–", R,
     "`--expert-cache`: every rank's timed accesses (an active expert, once an iteration) that "
     "found it resident, over all of them ([METRICS.md](METRICS.md#expert-cache)); empty with "
     "`off`"},
    {MPC_fetch_bytes, "bytes", R,
     "`--expert-cache`: the bytes all ranks fetched per timed iteration (0 with `off`)"},
    {MPC_fetch_us, "µs", R,
     "`--expert-cache`: median of the slowest rank's exposed fetch time, inside the FFN time (0 "
     "with `off`)"},
};
static const struct mp_column ffn_sample_cols[] = {
    {MPC_iter, "–", I, "0-based index of the timed iteration"},
    {MPC_ffn_us, "µs", R, "the FFN time, max over ranks"},
};

const struct mp_csv_schema mp_schema_ffn = {"ffn.csv", "moeperf-ffn",
                                            "one per point: summary over iterations",
                                            &mp_workload_key_columns, {ffn_cols, N(ffn_cols)}};
const struct mp_csv_schema mp_schema_ffn_samples = {
    "ffn_samples.csv", "moeperf-ffn", "one per point and timed iteration",
    &mp_workload_key_columns, {ffn_sample_cols, N(ffn_sample_cols)}};

/* ---- moeperf-plan ---- */

static const struct mp_column plan_cols[] = {
    {MPC_source, "–", T, "`model`"},
    {MPC_routing, "–", T, "`--routing` entry as given"},
    {MPC_group_limit, "–", T, "`--group-limit` entry: `off`, or G:M"},
    {MPC_tp, "ranks", I, "TP group size"},
    {MPC_ep, "ranks", I, "EP group size"},
    {MPC_replicate, "–", I, "hot experts replicated (`replicate-hot:R`), 0 for none"},
    {MPC_placement, "–", T, "the placement of the candidate"},
    {MPC_batch, "tokens", I, "tokens per step for one replica"},
    {MPC_layer_us, "µs", R, "modelled median layer time"},
    {MPC_layer_p99_us, "µs", R, "modelled p99 layer time"},
    {MPC_ffn_us, "µs", R, "modelled median FFN time"},
    {MPC_comm_us, "µs", R, "modelled median communication time"},
    {MPC_comm_comp_ratio, "–", R, "`comm_us / ffn_us`"},
    {MPC_bubble_ratio, "–", R, "modelled bubble ratio"},
    {MPC_load_imbalance, "–", R, "max/mean routed rows per rank"},
    {MPC_local_hit_rate, "–", R, "share of token-expert pairs served on the token's rank"},
    {MPC_token_ms, "ms", R,
     "the whole decode step per output token, median (docs/planning.md, What a step includes)"},
    {MPC_token_p99_ms, "ms", R, "its p99 (the MoE layers at their p99)"},
    {MPC_replica_tokens_per_s, "tokens/s", R, "output tokens per second one replica serves"},
    {MPC_dp, "–", I, "replicas needed for the target throughput"},
    {MPC_gpus, "GPUs", I, "GPUs of all replicas"},
    {MPC_meets_slo, "–", I,
     "1 when the candidate meets the SLO within `--max-gpus`, else 0; the plan is the cheapest "
     "with `meets_slo` 1 and `fits` 1"},
    {MPC_overlap, "chunks", I, "chunks pipelined (1: none)"},
    {MPC_dedup, "–", T, "what a dispatched row stands for (`--dedup`: pair, rank, node)"},
    {MPC_weight_dtype, "–", T, "the experts' weights (`--weight-dtype`: bf16, fp8)"},
    {MPC_dispatch_dtype, "–", T, "the dispatched rows (`--dispatch-dtype`: bf16, fp8)"},
    {MPC_mem_gb_per_gpu, "GB", R,
     "weights and KV cache on the layout's fullest GPU (docs/planning.md, Memory per GPU)"},
    {MPC_kv_gb_per_gpu, "GB", R, "the KV cache's part of `mem_gb_per_gpu` (`--context` tokens "
                                 "per sequence)"},
    {MPC_fits, "–", I,
     "1 when `mem_gb_per_gpu` is within the GPU's memory less its reserve (or the profile gives "
     "no memory), else 0; a candidate that does not fit is never chosen"},
    {MPC_over, "–", T,
     "what overflows: `weights` (the weights alone), `kv` (the KV cache tips it over) or `none`"},
    {MPC_cache_slots, "experts", I,
     "with `--expert-cache fit`: the experts per layer each EP rank keeps resident, the largest "
     "cache that fits (docs/planning.md, Offloaded experts); empty when all are"},
    {MPC_cache_hit_rate, "–", R, "its median hit rate, the fetches timed in `layer_us`; empty "
                                 "without a cache"},
    {MPC_context, "tokens", I, "`--context`: KV-cache tokens per sequence"},
    {MPC_micro_batches, "–", I, "1, or 2 micro-batches overlapped (`--micro-batches`)"},
    {MPC_attn_us, "µs", R, "the step's attention, every layer (median)"},
    {MPC_dense_us, "µs", R, "the step's dense layers"},
    {MPC_head_us, "µs", R, "the step's embedding, LM head and sampling"},
    {MPC_misc_us, "µs", R, "the step's norms and small kernels"},
    {MPC_host_us, "µs", R, "the step's host time and kernel gaps"},
    {MPC_moe_us, "µs", R, "the step's MoE layers one after the other (median)"},
    {MPC_overlap_us, "µs", R, "what two micro-batches hide of them (0 with one)"},
    {MPC_tok_s_gpu, "tokens/s", R, "output tokens per second per GPU"},
    {MPC_usd_per_mtok, "USD", R,
     "with `--gpu-hour-price`: USD per million output tokens at the replicas' capacity, else "
     "empty"},
};
static const struct mp_columns no_key = {NULL, 0};
const struct mp_csv_schema mp_schema_plan = {"plan.csv", "moeperf-plan", "one per candidate",
                                             &no_key, {plan_cols, N(plan_cols)}};

/* ---- moeperf-compare: its key is the key columns of the compared files ---- */

static const struct mp_column compare_cols[] = {
    {MPC_metric, "–", T, "the compared column, e.g. `layer_us`"},
    {MPC_gated, "–", I, "1 when the metric sets the exit status, 0 for a secondary metric"},
    {MPC_n_base, "count", I, "samples of the base run"},
    {MPC_n_new, "count", I, "samples of the new run"},
    {MPC_runs_base, "count", I, "base run directories"},
    {MPC_runs_new, "count", I, "new run directories"},
    {MPC_unit, "–", T, "what is ranked: `iteration` (samples) or `run` (one median per run)"},
    {MPC_units_base, "count", I, "units ranked on the base side"},
    {MPC_units_new, "count", I, "units ranked on the new side"},
    {MPC_base_median_us, "µs", R, "median of the base side"},
    {MPC_base_ci_lo_us, "µs", R, "lower bound of the 95 % confidence interval, base side"},
    {MPC_base_ci_hi_us, "µs", R, "upper bound of the 95 % confidence interval, base side"},
    {MPC_new_median_us, "µs", R, "median of the new side"},
    {MPC_new_ci_lo_us, "µs", R, "lower bound of the 95 % confidence interval, new side"},
    {MPC_new_ci_hi_us, "µs", R, "upper bound of the 95 % confidence interval, new side"},
    {MPC_change_pct, "%", R, "new median over base median, minus 1, in percent"},
    {MPC_u_base, "–", R, "Mann-Whitney U of the base side"},
    {MPC_p_value, "–", T, "two-sided p value, `%.6g`; empty when no test was made"},
    {MPC_test, "–", T, "`exact` or `normal`; empty when no test was made"},
    {MPC_noise_base, "–", R,
     "the base side's spread at the point: (p90 − p10) / p50 of the values ranked (METRICS.md, "
     "\"Stability\"); empty below 2"},
    {MPC_noise_new, "–", R, "the same of the new side"},
    {MPC_verdict, "–", T,
     "the verdict (docs/regression.md); a change within either side's spread is `unchanged`"},
    {MPC_reason, "–", T,
     "why a verdict is inconclusive, `within noise` for an unchanged one whose test alone would "
     "have called a change; empty otherwise"},
};
const struct mp_csv_schema mp_schema_compare = {
    "compare.csv", "moeperf-compare",
    "one per point and metric; the key columns are those of the compared files", &no_key,
    {compare_cols, N(compare_cols)}};

/* ---- ci/validate --summary: the model against published measurements ---- */

static const struct mp_column validation_cols[] = {
    {MPC_family, "–", T, "the family of published measurements (docs/validation.md)"},
    {MPC_profile, "–", T, "the shipped cluster profile the family is modelled with"},
    {MPC_point, "–", T, "the point of the family, in words"},
    {MPC_reference, "`unit`", R, "the published figure"},
    {MPC_model, "`unit`", R, "the model's figure with the profile"},
    {MPC_unit, "–", T, "the unit of `reference` and `model` (`us`, `GB/s`, `tokens/s`, ...)"},
    {MPC_ratio, "–", R, "`model / reference`"},
};
const struct mp_csv_schema mp_schema_validation = {
    "validation.csv", "ci/validate --summary",
    "one per point of the judged families; moeperf-plan's trust is read from it", &no_key,
    {validation_cols, N(validation_cols)}};

const struct mp_csv_schema *const mp_schemas[] = {
    &mp_schema_layer, &mp_schema_layer_samples, &mp_schema_layer_ranks,
    &mp_schema_layer_rank_samples, &mp_schema_a2a,
    &mp_schema_a2a_samples, &mp_schema_ffn, &mp_schema_ffn_samples, &mp_schema_plan,
    &mp_schema_compare, &mp_schema_validation, NULL,
};

/* ---- lookups ---- */

const struct mp_csv_schema *mp_schema_find(const char *file)
{
    for (int i = 0; mp_schemas[i]; i++)
        if (strcmp(mp_schemas[i]->file, file) == 0)
            return mp_schemas[i];
    return NULL;
}

int mp_schema_ncols(const struct mp_csv_schema *f) { return f->key->n + f->cols.n; }

const struct mp_column *mp_schema_column(const struct mp_csv_schema *f, int i)
{
    return i < f->key->n ? &f->key->col[i] : &f->cols.col[i - f->key->n];
}

int mp_schema_index(const struct mp_csv_schema *f, const char *name)
{
    for (int i = 0; i < mp_schema_ncols(f); i++)
        if (strcmp(mp_schema_column(f, i)->name, name) == 0)
            return i;
    return -1;
}

int mp_schema_header(const struct mp_csv_schema *f, const char **names)
{
    int n = mp_schema_ncols(f);
    for (int i = 0; i < n; i++)
        names[i] = mp_schema_column(f, i)->name;
    return n;
}

const char *mp_cell_format_name(enum mp_cell_format f)
{
    return f == MP_CELL_INT ? "int" : f == MP_CELL_REAL ? "real" : "text";
}
