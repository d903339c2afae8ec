/* schema.h - the results schema: every CSV file the tools write, as a table of columns (name,
 * unit, cell format, meaning) that the writers take their headers from, the readers take their
 * column names from, and docs/CSV.md is generated from. */
#ifndef MP_SCHEMA_H
#define MP_SCHEMA_H

/* Every column name of every file, once. Each becomes a constant MPC_<name> holding "<name>", so a
 * reader that names a column that does not exist fails to compile. */
#define MP_COLUMN_NAMES(X)                                                                          \
    X(source) X(backend) X(comm) X(model) X(hidden) X(ffn) X(experts) X(topk) X(shared) X(layout)   \
    X(tp) X(ep) X(world) X(routing) X(group_limit) X(placement) X(overlap) X(dispatch) X(dedup) X(dispatch_dtype) X(weight_dtype)\
    X(batch) X(seq) X(seed) X(flush_cache) X(pattern) X(bytes_per_peer) X(iter)                     \
    X(tokens_per_rank) X(iters) X(layer_us) X(layer_p99_us) X(layer_mean_us) X(layer_stdev_us)      \
    X(layer_min_us) X(layer_max_us) X(layer_ci_lo_us) X(layer_ci_hi_us) X(ffn_us) X(ffn_p99_us)     \
    X(ffn_mean_us) X(comm_us) X(comm_p99_us) X(route_us) X(notify_us) X(dispatch_us)               \
    X(tp_reduce_us) X(combine_us) X(comm_comp_ratio) X(bubble_ratio) X(wait_ratio) X(load_imbalance) X(local_hit_rate)            \
    X(bytes_rank_max) X(bytes_internode) X(bytes_intranode) X(dispatch_bytes_intranode)             \
    X(dispatch_bytes_internode) X(combine_bytes_intranode) X(combine_bytes_internode)               \
    X(dispatch_intranode_GBps) X(dispatch_internode_GBps) X(combine_intranode_GBps)                 \
    X(combine_internode_GBps) X(dispatch_inter_us) X(dispatch_intra_us) X(combine_inter_us)        \
    X(combine_intra_us) X(drop_rate) X(check_error) X(overlap_efficiency)                     \
    X(rank) X(node) X(host) X(ep_rank) X(tp_rank) X(tokens) X(rows) X(ffn_rows) X(bytes_sent)       \
    X(start_skew_us) X(bytes_per_rank) X(time_us) X(time_p99_us) X(time_mean_us) X(time_stdev_us)  \
    X(time_min_us) X(time_max_us) X(time_ci_lo_us) X(time_ci_hi_us) X(algbw_GBps) X(busbw_GBps)    \
    X(active_experts) X(flops) X(weight_bytes) X(ffn_stdev_us) X(ffn_min_us) X(ffn_max_us)          \
    X(ffn_ci_lo_us) X(ffn_ci_hi_us) X(achieved_GFLOPs) X(achieved_GBps) X(peak_GFLOPs)             \
    X(peak_GBps) X(bound) X(roofline_fraction)                                                      \
    X(metric) X(gated) X(n_base) X(n_new) X(runs_base) X(runs_new) X(unit) X(units_base)            \
    X(units_new) X(base_median_us) X(base_ci_lo_us) X(base_ci_hi_us) X(new_median_us)              \
    X(new_ci_lo_us) X(new_ci_hi_us) X(change_pct) X(u_base) X(p_value) X(test) X(verdict) X(reason) \
    X(replicate) X(token_ms) X(token_p99_ms) X(replica_tokens_per_s) X(dp) X(gpus) X(meets_slo)     \
    X(mem_gb_per_gpu) X(kv_gb_per_gpu) X(fits) X(over) X(local_experts) X(notify_wait_us)           \
    X(dispatch_wait_us) X(tp_reduce_wait_us) X(combine_wait_us) X(wait_us) X(expert_cache)             \
    X(cache_hit_rate) X(fetch_bytes) X(fetch_us) X(cache_hits) X(cache_misses) X(cache_slots)      \
    X(cache_policy) X(context) X(micro_batches) X(phase) X(chunk) X(step_us) X(step_p99_us) X(attn_us)               \
    X(attn_p99_us) X(dense_us) X(dense_p99_us) X(head_us) X(head_p99_us) X(misc_us) X(misc_p99_us) \
    X(host_us) X(host_p99_us) X(moe_us) X(moe_p99_us) X(overlap_us) X(overlap_p99_us)             \
    X(tok_s_gpu) X(input_tok_s_gpu) X(gpu_hour_usd) X(usd_per_mtok) X(spread) X(noisy) X(noise_base) X(noise_new)   \
    X(family) X(profile) X(point) X(reference) X(ratio)

#define MP_COLUMN_DECLARE(n) extern const char MPC_##n[];
MP_COLUMN_NAMES(MP_COLUMN_DECLARE)
#undef MP_COLUMN_DECLARE

/* How a cell is written: text (quoted per RFC 4180 when needed), a decimal integer, or a real
 * number as mp_row_dbl writes it (empty when undefined). */
enum mp_cell_format { MP_CELL_TEXT, MP_CELL_INT, MP_CELL_REAL };

struct mp_column {
    const char *name;    /* an MPC_ constant */
    const char *unit;    /* "µs", "bytes", "–" for a plain number or text, ... */
    enum mp_cell_format format;
    const char *meaning; /* one line of Markdown, as docs/CSV.md shows it */
};

/* A group of columns: a key shared by several files, or the columns after a file's key. */
struct mp_columns {
    const struct mp_column *col;
    int n;
};

/* One CSV file: its key columns, then its own columns, in header order. */
struct mp_csv_schema {
    const char *file; /* "layer.csv" */
    const char *tool; /* the binary that writes it */
    const char *rows; /* what one row is */
    const struct mp_columns *key;
    struct mp_columns cols;
};

/* The key of layer and FFN points (layer.csv, layer_samples.csv, layer_ranks.csv, ffn.csv,
 * ffn_samples.csv) and of All-to-All points (a2a.csv, a2a_samples.csv). */
extern const struct mp_columns mp_workload_key_columns, mp_a2a_key_columns;

extern const struct mp_csv_schema mp_schema_layer_rank_samples;
extern const struct mp_csv_schema mp_schema_layer, mp_schema_layer_samples, mp_schema_layer_ranks,
    mp_schema_a2a, mp_schema_a2a_samples, mp_schema_ffn, mp_schema_ffn_samples, mp_schema_plan,
    mp_schema_compare, mp_schema_validation;

/* The most columns a file of fixed columns has (tests/unit/test_schema.c checks it): room for a
 * header on the stack. */
#define MP_SCHEMA_MAX_COLS 100

/* Every file above, in docs/CSV.md order, NULL-terminated. */
extern const struct mp_csv_schema *const mp_schemas[];

/* The file named `file` ("layer.csv"), or NULL. */
const struct mp_csv_schema *mp_schema_find(const char *file);
/* Columns in the header (key and own). */
int mp_schema_ncols(const struct mp_csv_schema *f);
/* Column i of the header (0 <= i < mp_schema_ncols). */
const struct mp_column *mp_schema_column(const struct mp_csv_schema *f, int i);
/* Header index of column `name`, or -1 when the file has no such column. */
int mp_schema_index(const struct mp_csv_schema *f, const char *name);
/* Fill names[0..ncols) with the header; returns ncols. names must hold mp_schema_ncols entries. */
int mp_schema_header(const struct mp_csv_schema *f, const char **names);
/* "text", "int" or "real". */
const char *mp_cell_format_name(enum mp_cell_format f);

#endif
