/* bench_opts.c - layouts, model resolution and choice lists shared by the benchmark binaries. */
#include "bench_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "dtype.h"
#include "error.h"
#include "expert_cache.h"
#include "placement.h"
#include "routing.h"

const char *const mp_routing_choices[] = {"uniform", "zipf:", "hot:", "lognormal:", "gate",
                                          "gate:", "trace:", NULL};
const char *const mp_placement_choices[] = {"contiguous", "round-robin", "replicate-hot:", "eplb:",
                                            NULL};
const char *const mp_gemm_choices[] = {"loop", "grouped", "skinny", "fused", NULL};
const char *const mp_cpu_bind_choices[] = {"auto", "none", "gpu", NULL};

/* Parse a positive integer at *p, advancing it; -1 when there is none. */
static long take_int(const char **p)
{
    char *end;
    if (**p < '0' || **p > '9')
        return -1;
    long v = strtol(*p, &end, 10);
    *p = end;
    return v;
}

int mp_layout_parse(const char *text, struct mp_layout *out)
{
    const char *p = text;
    long tp = 1, ep = 1;
    int seen = 0;
    if (strncmp(p, "tp", 2) == 0) {
        p += 2;
        tp = take_int(&p);
        seen = 1;
    }
    if (tp >= 1 && strncmp(p, "ep", 2) == 0) {
        p += 2;
        ep = take_int(&p);
        seen = 1;
    }
    if (!seen || *p != '\0' || tp < 1 || ep < 1 || tp > 65536 || ep > 65536) {
        mp_usage("--layout: '%s' is not a layout (accepted: tpXepY, epY or tpX with X, Y >= 1, "
                 "e.g. tp2ep4)", text);
        return MP_ERR_USAGE;
    }
    out->tp = (int)tp;
    out->ep = (int)ep;
    snprintf(out->name, sizeof out->name, "tp%ldep%ld", tp, ep);
    return MP_OK;
}

int mp_layouts_resolve(const struct mp_strlist *list, int world, int virtual_world,
                       struct mp_layout **out, int *n)
{
    int count = list->n > 0 ? list->n : 1;
    struct mp_layout *l = calloc((size_t)count, sizeof *l);
    if (!l) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    if (list->n == 0) {
        l[0].tp = 1;
        l[0].ep = world;
        snprintf(l[0].name, sizeof l[0].name, "tp1ep%d", world);
    }
    for (int i = 0; i < list->n; i++) {
        if (mp_layout_parse(list->v[i], &l[i]) != MP_OK) {
            free(l);
            return MP_ERR_USAGE;
        }
        if (l[i].tp * l[i].ep != world && virtual_world) {
            mp_usage("--layout: %s needs tp·ep = %d ranks, but --world is %d (every layout of a "
                     "sweep has the same world)", list->v[i], l[i].tp * l[i].ep, world);
            free(l);
            return MP_ERR_USAGE;
        }
        if (l[i].tp * l[i].ep != world) {
            mp_usage("--layout: %s needs tp·ep = %d ranks, but %d ranks are running (start it with "
                     "mpirun -np %d, or pick layouts whose tp·ep is %d)",
                     list->v[i], l[i].tp * l[i].ep, world, l[i].tp * l[i].ep, world);
            free(l);
            return MP_ERR_USAGE;
        }
    }
    *out = l;
    *n = count;
    return MP_OK;
}

int mp_bench_model(const struct mp_bench_opts *o, struct mp_model *m)
{
    int rc = mp_model_resolve(o->model, m);
    if (rc != MP_OK)
        return rc;
    return mp_model_override(m, o->experts, o->topk, o->shared, o->hidden, o->ffn, o->layers);
}

const char *mp_bench_help(const char *summary)
{
    static char buf[8192];
    char list[4096];
    mp_model_list(list, sizeof list);
    snprintf(buf, sizeof buf, "%s\n\nModel presets:\n%s", summary, list);
    return buf;
}

int mp_routings_parse(const struct mp_strlist *list, const struct mp_model *m, long long seed,
                      const char *gate_refusal, struct mp_routing **out, int *n)
{
    struct mp_routing *r = calloc((size_t)(list->n > 0 ? list->n : 1), sizeof *r);
    if (!r) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    int rc = MP_OK, i;
    for (i = 0; i < list->n && rc == MP_OK; i++) {
        rc = mp_routing_parse(list->v[i], m->experts, m->topk, (uint64_t)seed, &r[i]);
        if (rc == MP_OK && gate_refusal && mp_routing_is_gate(&r[i])) {
            mp_usage("--routing: %s", gate_refusal);
            rc = MP_ERR_USAGE;
            i++; /* parsed: free it below */
            break;
        }
    }
    if (rc != MP_OK) {
        mp_routings_free(r, i);
        return rc;
    }
    *out = r;
    *n = list->n;
    return MP_OK;
}

void mp_routings_free(struct mp_routing *r, int n)
{
    for (int i = 0; r && i < n; i++)
        mp_routing_free(&r[i]);
    free(r);
}

int mp_sweep_validate(const struct mp_model *m, const struct mp_layout *layouts, int nlayouts,
                      const struct mp_strlist *placements)
{
    for (int i = 0; i < nlayouts; i++) {
        if (m->ffn % layouts[i].tp != 0) {
            mp_usage("--layout: %s splits each expert's FFN over %d ranks, which needs --ffn (%d) "
                     "divisible by %d", layouts[i].name, layouts[i].tp, m->ffn, layouts[i].tp);
            return MP_ERR_USAGE;
        }
        for (int p = 0; p < placements->n; p++) {
            struct mp_placement pl;
            int rc = mp_placement_build(placements->v[p], m->experts, layouts[i].ep, NULL, &pl);
            if (rc != MP_OK)
                return rc;
            mp_placement_free(&pl);
        }
    }
    return MP_OK;
}

int mp_ep_nodes(const struct mp_comm *c, int tp, int ep)
{
    int n = 0;
    for (int j = 0; j < ep; j++) {
        int seen = 0;
        for (int i = 0; i < j && !seen; i++)
            seen = c->node_of[i * tp] == c->node_of[j * tp];
        n += !seen;
    }
    return n;
}

int mp_placement_comm_nodes(struct mp_placement *pl, const struct mp_comm *c, int tp)
{
    int *node = malloc((size_t)pl->ep * sizeof *node);
    if (!node) {
        mp_error("out of memory recording the nodes of %d EP ranks", pl->ep);
        return MP_ERR_RUNTIME;
    }
    for (int q = 0; q < pl->ep; q++)
        node[q] = c->node_of[q * tp];
    int rc = mp_placement_set_nodes(pl, node);
    free(node);
    return rc;
}

int mp_group_limit_apply(const struct mp_routing *r, const char *spec, int nodes,
                         struct mp_routing *out, int *inactive)
{
    *out = *r;
    int rc = mp_group_limit_parse(spec, r->experts, r->topk, nodes, &out->groups,
                                  &out->group_pick, inactive);
    return rc != MP_OK ? rc : mp_group_limit_check(r, spec, out->groups, out->group_pick);
}

int mp_group_limits_validate(const struct mp_strlist *limits, const struct mp_routing *routings,
                             int nrout, const struct mp_layout *layouts, int nlayouts,
                             const struct mp_comm *c)
{
    for (int g = 0; g < limits->n; g++)
        for (int li = 0; li < nlayouts; li++) {
            int nodes = mp_ep_nodes(c, layouts[li].tp, layouts[li].ep), inactive = 0;
            for (int ri = 0; ri < nrout; ri++) {
                struct mp_routing view;
                int rc = mp_group_limit_apply(&routings[ri], limits->v[g], nodes, &view, &inactive);
                if (rc != MP_OK)
                    return rc;
            }
            if (inactive && c->rank == 0)
                mp_warn("--group-limit %s: the EP ranks of layout %s span %d node(s), so a token "
                        "cannot reach more; its points route as with --group-limit off",
                        limits->v[g], layouts[li].name, nodes);
        }
    return MP_OK;
}

static int asked_gemm; /* the mode has_asked_gemm tests (one thread parses options) */
static int has_asked_gemm(const struct mp_compute_ops *o) { return !!(o->gemm_modes & 1u << asked_gemm); }

int mp_gemm_mode(const struct mp_bench_opts *o, const struct mp_compute_ops *ops, int *gemm)
{
    *gemm = MP_GEMM_LOOP;
    for (int g = MP_GEMM_LOOP; o->gemm && g < MP_GEMM_COUNT; g++)
        if (strcmp(o->gemm, mp_gemm_choices[g]) == 0)
            *gemm = g;
    if (*gemm != MP_GEMM_LOOP && !(ops->gemm_modes & 1u << *gemm)) {
        char names[256];
        asked_gemm = *gemm;
        mp_usage("--gemm %s: the %s backend does not have it; --gemm %s needs a --backend that "
                 "has it (built: %s), or use --gemm loop", o->gemm, ops->name, o->gemm,
                 mp_compute_names_where(has_asked_gemm, names, sizeof names));
        return MP_ERR_USAGE;
    }
    for (int i = 0; i < o->weight_dtype.n; i++) {
        enum mp_dtype dt;
        if (mp_dtype_parse("--weight-dtype", o->weight_dtype.v[i], &dt) != MP_OK)
            return MP_ERR_USAGE;
        if (dt == MP_DTYPE_FP8 && (ops->weight_dtypes & MP_DTYPE_BIT(dt)) &&
            !(ops->fp8_gemm_modes & 1u << *gemm)) {
            char modes[64] = "";
            for (int g = MP_GEMM_LOOP; g < MP_GEMM_COUNT; g++)
                if (ops->fp8_gemm_modes & 1u << g)
                    snprintf(modes + strlen(modes), sizeof modes - strlen(modes), "%s%s",
                             modes[0] ? ", " : "", mp_gemm_choices[g]);
            mp_usage("--gemm %s with --weight-dtype fp8: the %s backend runs fp8 expert weights "
                     "with --gemm %s only; choose one of those, or --weight-dtype bf16",
                     o->gemm ? o->gemm : "loop", ops->name, modes);
            return MP_ERR_USAGE;
        }
    }
    return MP_OK;
}

int mp_straggle_parse(const char *text, int world, int *rank, double *us)
{
    *rank = -1;
    *us = 0;
    if (!text)
        return MP_OK;
    char *end;
    long r = strtol(text, &end, 10);
    double v = *end == ':' ? strtod(end + 1, &end) : -1;
    if (end == text || *end || r < 0 || r >= world || !(v >= 0) || v > 1e9) {
        mp_usage("--straggle: '%s' is not RANK:US with 0 <= RANK < %d and 0 <= US <= 1e9", text,
                 world);
        return MP_ERR_USAGE;
    }
    *rank = (int)r;
    *us = v;
    return MP_OK;
}

int mp_flag_given(int argc, char **argv, const char *name)
{
    size_t n = strlen(name);
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (!strncmp(argv[i], "--", 2) && !strncmp(argv[i] + 2, name, n) &&
            (argv[i][2 + n] == 0 || argv[i][2 + n] == '='))
            return 1;
    return 0;
}

int mp_batch_flags_check(const struct mp_bench_opts *o, int argc, char **argv)
{
    if (o->tokens_per_rank.n > 0 && mp_flag_given(argc, argv, "batch")) {
        mp_usage("--tokens-per-rank and --batch: give one (--batch counts the tokens of the "
                 "whole EP instance, --tokens-per-rank those of one EP rank: batch = tokens "
                 "per rank × ep)");
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

int mp_sweep_nbatch(const struct mp_bench_opts *o)
{
    return o->tokens_per_rank.n ? o->tokens_per_rank.n : o->batch.n;
}

long mp_sweep_batch(const struct mp_bench_opts *o, int bi, int ep)
{
    return o->tokens_per_rank.n ? (long)o->tokens_per_rank.v[bi] * ep : (long)o->batch.v[bi];
}

long mp_sweep_max_batch(const struct mp_bench_opts *o, const int *eps, int n)
{
    long m = 0;
    for (int bi = 0; bi < mp_sweep_nbatch(o); bi++)
        for (int i = 0; i < n; i++) {
            long b = mp_sweep_batch(o, bi, eps[i]);
            m = b > m ? b : m;
        }
    return m;
}

int mp_expert_caches_validate(const struct mp_strlist *caches, const struct mp_model *m,
                              const struct mp_layout *layouts, int nlayouts,
                              const struct mp_strlist *placements)
{
    for (int c = 0; c < caches->n; c++) {
        struct mp_cache_spec spec;
        int rc = mp_cache_spec_parse(caches->v[c], &spec);
        for (int i = 0; i < nlayouts && rc == MP_OK && spec.slots > 0; i++)
            for (int p = 0; p < placements->n && rc == MP_OK; p++) {
                struct mp_placement pl;
                rc = mp_placement_build(placements->v[p], m->experts, layouts[i].ep, NULL, &pl);
                if (rc != MP_OK)
                    return rc;
                int fewest = mp_placement_nlocal(&pl, 0);
                for (int e = 1; e < pl.ep; e++)
                    fewest = mp_placement_nlocal(&pl, e) < fewest ? mp_placement_nlocal(&pl, e)
                                                                : fewest;
                mp_placement_free(&pl);
                rc = mp_cache_spec_check(caches->v[c], &spec, fewest);
            }
        if (rc != MP_OK)
            return rc;
    }
    return MP_OK;
}
