/* dedup.c - the dispatch rows of each deduplication mode for one routing draw (see dedup.h). */
#include "dedup.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "padded.h"
#include "dispatch_plan.h"
#include "dispatch_plan_dedup.h"
#include "registry.h"

const char *const mp_dedup_choices[] = {"pair", "rank", "node", NULL};

int mp_dedup_parse(const char *word, enum mp_dedup *mode)
{
    char accepted[64] = "";
    for (int i = 0; mp_dedup_choices[i]; i++) {
        if (strcmp(word, mp_dedup_choices[i]) == 0) {
            *mode = (enum mp_dedup)i;
            return MP_OK;
        }
        mp_registry_append(accepted, sizeof accepted, mp_dedup_choices[i]);
    }
    mp_usage("--dedup: '%s' is not one of %s", word, accepted);
    return MP_ERR_USAGE;
}

double mp_dedup_meta_bytes(enum mp_dedup mode, int K)
{
    return mode == MP_DEDUP_PAIR ? 0 : (double)K * (sizeof(int32_t) + sizeof(float));
}

long mp_dedup_padded_capacity(long tokens, int K, int experts, int max_local, double factor)
{
    if (factor <= 0)
        return tokens < 1 ? 1 : tokens;
    double cap = (double)(max_local < 1 ? 1 : max_local) *
                 (double)mp_padded_capacity(tokens, K, experts, factor, 1);
    return cap < (double)tokens ? (long)cap : (tokens < 1 ? 1 : tokens);
}

long mp_dedup_padded_walk(const struct mp_placement *pl, int ep, long total, int K,
                          const int32_t *ids, float *w, long cap, const int *ep_node,
                          double *exp_pairs, double *dropped, double *local)
{
    long *rows = calloc((size_t)ep, sizeof *rows), *last = malloc((size_t)ep * sizeof *last);
    char *kept = calloc((size_t)ep, 1);
    long all = -1;
    if (!rows || !last || !kept)
        goto out;
    all = 0;
    if (exp_pairs)
        memset(exp_pairs, 0, (size_t)ep * pl->max_local * sizeof *exp_pairs);
    for (int e = 0; e < ep; e++) {
        long tok0, n = mp_token_split(total, ep, e, &tok0);
        for (int q = 0; q < ep; q++) {
            rows[q] = 0;
            last[q] = -1;
        }
        double drop = 0, own = 0;
        for (long t = tok0; t < tok0 + n; t++)
            for (int k = 0; k < K; k++) {
                int32_t x = ids[t * K + k];
                int d = mp_placement_dest(pl, e, x, t), q = d;
                if (ep_node && ep_node[d] != ep_node[e])
                    q = mp_dedup_relay(ep_node, ep, e, ep_node[d]);
                if (last[q] != t) { /* t's row at target q: kept while q's slot has room */
                    last[q] = t;
                    kept[q] = rows[q]++ < cap;
                }
                if (!kept[q]) {
                    drop++;
                    if (w)
                        w[t * K + k] = 0;
                    continue;
                }
                own += d == e;
                if (exp_pairs)
                    exp_pairs[(size_t)d * pl->max_local + mp_placement_local_index(pl, d, x)]++;
            }
        if (dropped)
            dropped[e] = drop;
        if (local)
            local[e] = own;
        all += (long)drop;
    }
out:
    free(rows);
    free(last);
    free(kept);
    return all;
}

int mp_dedup_alloc(struct mp_dedup_counts *c, int ep)
{
    memset(c, 0, sizeof *c);
    c->ep = ep;
    c->rows = calloc((size_t)2 * ep * ep, sizeof *c->rows);
    c->pairs = calloc((size_t)ep, sizeof *c->pairs);
    c->seen = calloc((size_t)2 * ep, sizeof *c->seen);
    if (!c->rows || !c->pairs || !c->seen) {
        mp_dedup_free(c);
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

void mp_dedup_free(struct mp_dedup_counts *c)
{
    free(c->rows);
    free(c->pairs);
    free(c->seen);
    memset(c, 0, sizeof *c);
}

/* The first EP rank of rank p's node and how many EP ranks that node has (ranks of a node are
 * contiguous: mp_dedup_node_of is non-decreasing in p). */
static void node_span(int p, int ep, int tp, int gpn, int *first, int *count)
{
    int n = mp_dedup_node_of(p, tp, gpn), lo = p, hi = p;
    while (lo > 0 && mp_dedup_node_of(lo - 1, tp, gpn) == n)
        lo--;
    while (hi + 1 < ep && mp_dedup_node_of(hi + 1, tp, gpn) == n)
        hi++;
    *first = lo;
    *count = hi - lo + 1;
}

void mp_dedup_count(enum mp_dedup mode, const struct mp_placement *pl, const int32_t *ids, long T,
                    int K, int tp, int gpus_per_node, struct mp_dedup_counts *c)
{
    mp_dedup_count_chunk(mode, pl, ids, T, K, tp, gpus_per_node, 1, 0, c);
}

void mp_dedup_count_chunk(enum mp_dedup mode, const struct mp_placement *pl, const int32_t *ids,
                          long T, int K, int tp, int gpus_per_node, int nchunks, int chunk,
                          struct mp_dedup_counts *c)
{
    int ep = c->ep;
    size_t cells = (size_t)ep * ep;
    double *hop0 = c->rows, *hop1 = c->rows + cells;
    memset(c->rows, 0, 2 * cells * sizeof *c->rows);
    memset(c->pairs, 0, (size_t)ep * sizeof *c->pairs);
    for (int p = 0; p < 2 * ep; p++)
        c->seen[p] = -1;
    c->hops = mode == MP_DEDUP_NODE ? 2 : 1;
    for (int e = 0; e < ep; e++) {
        long tok0, n = mp_token_split(T, ep, e, &tok0), off;
        n = mp_token_split(n, nchunks, chunk, &off); /* the chunk's share of e's tokens */
        tok0 += off;
        int ne = mp_dedup_node_of(e, tp, gpus_per_node), first_e, count_e;
        node_span(e, ep, tp, gpus_per_node, &first_e, &count_e);
        for (long t = tok0; t < tok0 + n; t++)
            for (int k = 0; k < K; k++) {
                int d = mp_placement_dest(pl, e, ids[t * K + k], t);
                c->pairs[d] += 1;
                if (d == e)
                    continue; /* served at home: no row */
                if (mode == MP_DEDUP_PAIR) {
                    hop0[(size_t)e * ep + d] += 1;
                    continue;
                }
                int fresh = c->seen[d] != t; /* first pair of t bound for rank d */
                c->seen[d] = t;
                if (mode == MP_DEDUP_RANK) {
                    hop0[(size_t)e * ep + d] += fresh;
                    continue;
                }
                if (mp_dedup_node_of(d, tp, gpus_per_node) == ne) {
                    hop1[(size_t)e * ep + d] += fresh; /* node's direct rows: intra-node phase */
                    continue;
                }
                int first_d, count_d;
                node_span(d, ep, tp, gpus_per_node, &first_d, &count_d);
                int relay = first_d + (e - first_e) % count_d;
                if (c->seen[ep + relay] != t) { /* once per (token, node) over the network */
                    c->seen[ep + relay] = t;
                    hop0[(size_t)e * ep + relay] += 1;
                }
                if (d != relay)
                    hop1[(size_t)relay * ep + d] += fresh; /* forwarded inside node once per rank */
            }
    }
}

void mp_dedup_bytes(const struct mp_dedup_counts *c, int tp, int gpus_per_node, double row_bytes,
                    double meta_bytes, double *sent, double *inter)
{
    int ep = c->ep;
    size_t cells = (size_t)ep * ep;
    for (int p = 0; p < ep; p++) {
        double all = 0, across = 0;
        int np = mp_dedup_node_of(p, tp, gpus_per_node);
        for (int h = 0; h < c->hops; h++)
            for (int q = 0; q < ep; q++) {
                if (q == p)
                    continue;
                /* dispatch rows p sends q, and combine rows p sends back for what q sent it */
                double b = c->rows[h * cells + (size_t)p * ep + q] * (row_bytes + meta_bytes) +
                           c->rows[h * cells + (size_t)q * ep + p] * row_bytes;
                all += b;
                if (mp_dedup_node_of(q, tp, gpus_per_node) != np)
                    across += b;
            }
        if (sent)
            sent[p] = all;
        if (inter)
            inter[p] = across;
    }
}
