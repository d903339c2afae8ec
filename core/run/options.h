/* options.h - options declared as data: one table per binary (name, type, offset, default, range,
 * help), from which parsing, validation and --help are generated. */
#ifndef MP_OPTIONS_H
#define MP_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

enum mp_opt_type {
    MP_OPT_FLAG,        /* int: 0/1, takes no value (--check) */
    MP_OPT_INT,         /* int */
    MP_OPT_LLONG,       /* long long (--seed) */
    MP_OPT_DOUBLE,      /* double */
    MP_OPT_SIZE,        /* long long, accepts K/M/G suffixes (powers of 1024) */
    MP_OPT_STRING,      /* char * (heap copy) */
    MP_OPT_INT_LIST,    /* struct mp_list: "1,16,64", "1:128:x2", "8:64:+8", mixed with commas */
    MP_OPT_SIZE_LIST,   /* struct mp_list with K/M/G suffixes on each element */
    MP_OPT_STRING_LIST, /* struct mp_strlist: comma-separated words */
};

/* A numeric list: a sweep of values in the order given. */
struct mp_list {
    int n;
    long long *v;
};

/* A list of words (layouts, routings, placements). */
struct mp_strlist {
    int n;
    char **v;
};

/* One option. `min`/`max` bound numbers (every element of a list); min > max means unbounded.
 * `defval` is parsed like user input; NULL leaves the field "unset": -1 for INT/LLONG/SIZE/DOUBLE,
 * NULL for STRING, an empty list for lists, 0 for FLAG. `choices`, when set, is a NULL-terminated
 * list of accepted words for STRING and STRING_LIST (a word that starts with a choice followed by
 * ':' also matches, so "hot" admits "hot:4:15"). */
struct mp_opt {
    const char *name; /* without the leading "--" */
    enum mp_opt_type type;
    size_t offset;
    const char *defval;
    double min, max;
    const char *const *choices;
    const char *metavar;
    const char *help;
};

/* Parse argv[1..] into `opts` (a struct laid out as `table` says, terminated by an entry with
 * name NULL). Accepts "--name value" and "--name=value"; "--help" and "--version" print and return
 * MP_HELP. Every error prints one line naming the flag, the value and what is accepted, and returns
 * MP_ERR_USAGE. Positional arguments are refused unless `positional` is non-NULL, in which case
 * they are collected there (heap array, NULL-terminated; count in *npositional).
 * Details: every field of `opts` is overwritten first (nothing it held is freed). A flag's value
 * is the next argument unless that starts with "--" ("--batch --check" is a missing value); a FLAG
 * takes no value and "--no-NAME" turns it off (for flags that default to on); a repeated flag
 * keeps the last value; "--" ends the flags. On MP_HELP and on
 * errors the parser frees what it stored (mp_opts_free stays safe to call). Positional entries
 * point into argv: free only the array. */
int mp_opts_parse(const struct mp_opt *table, void *opts, int argc, char **argv,
                  const char *summary, char ***positional, int *npositional);

/* Print generated help: usage line, summary, then one line per option with metavar, default,
 * range or choices and help text. */
void mp_opts_help(FILE *f, const struct mp_opt *table, const char *summary);

/* Free heap memory the parser allocated in `opts`. */
void mp_opts_free(const struct mp_opt *table, void *opts);

/* Parse one list in the syntax of MP_OPT_INT_LIST / MP_OPT_SIZE_LIST (with_suffix selects K/M/G).
 * `what` names the flag for errors. Returns MP_OK or MP_ERR_USAGE (message printed). */
int mp_list_parse(const char *text, int with_suffix, const char *what, struct mp_list *out);
void mp_list_free(struct mp_list *l);

/* Parse a size with an optional K/M/G suffix (powers of 1024). Returns 0 on success, -1 if not. */
int mp_size_parse(const char *text, long long *out);

/* The flags the three benchmark binaries share (README.md, The binaries), plus the few that only
 * one binary reads; each binary's table lists the subset it accepts. */
struct mp_bench_opts {
    char *model;
    int experts, topk, shared, hidden, ffn, layers; /* -1: from the preset */
    struct mp_list batch;
    struct mp_list tokens_per_rank; /* --tokens-per-rank: instead of --batch, per EP rank */
    int seq;
    struct mp_list context;       /* moeperf-layer: KV-cache tokens per sequence; a list sweeps */
    struct mp_list micro_batches; /* moeperf-layer: 1 or 2 (two-batch overlap); a list sweeps */
    struct mp_strlist phase;      /* moeperf-layer: decode or prefill (the modelled step) */
    struct mp_list chunk;         /* moeperf-layer: prefill pieces' tokens (0: whole prompts) */
    struct mp_strlist layout, routing, placement;
    struct mp_strlist group_limit; /* --group-limit: off, G:M or M; a list sweeps them */
    long long seed;
    int warmup, iters;
    char *backend, *comm, *cluster;
    char *cpu_bind; /* --cpu-bind: auto, none, gpu */
    int world;
    char *out;
    int resume, force, check;
    double timeout;
    struct mp_list overlap; /* chunks to pipeline; a list sweeps them */
    struct mp_strlist dispatch; /* dynamic, padded, padded:F; a list sweeps them */
    struct mp_strlist dedup;    /* pair, rank, node (core/layer/dedup.h); a list sweeps them */
    struct mp_strlist dispatch_dtype; /* bf16, fp8 (core/workload/dtype.h); a list sweeps them */
    struct mp_strlist weight_dtype;   /* bf16, fp8 (core/workload/dtype.h); a list sweeps them */
    struct mp_strlist expert_cache;   /* off or SLOTS[:POLICY] (core/layer/expert_cache.h); a list */
    char *gemm;                 /* the expert FFN's GEMMs: "loop", "grouped" or "skinny" */
    int graph;                  /* replay a captured layer (padded dispatch, device backends) */
    int flush_cache;            /* evict the LLC / L2 before every timed iteration (untimed) */
    int rank_samples;           /* moeperf-layer: write layer_rank_samples.csv (on by default) */
    char *pattern;       /* moeperf-a2a */
    struct mp_list bytes; /* moeperf-a2a, per peer */
    int quiet;
    double inject_delay_us; /* debug: added to every dispatch/combine exchange */
    double min_busbw;       /* moeperf-a2a: the busbw floor in GB/s (0: none) */
    char *straggle;         /* debug: "RANK:US" */
    long long max_memory;   /* bytes one rank may allocate; -1: from the host's free memory */
};

#endif
