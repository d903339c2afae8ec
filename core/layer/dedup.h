/* dedup.h - how many rows each dispatch deduplication mode (--dedup pair|rank|node) puts on the
 * wire between every pair of EP ranks for one routing draw: the counts the model times and the
 * unit test checks, independent of any backend (docs/METRICS.md, "Deduplicated dispatch"). */
#ifndef MP_DEDUP_H
#define MP_DEDUP_H

#include <stdint.h>

#include "placement.h"

/* What one dispatched row stands for. */
enum mp_dedup {
    MP_DEDUP_PAIR, /* one row per (token, expert) pair, to the rank that serves the pair */
    MP_DEDUP_RANK, /* one row per (token, destination rank ≠ own rank) */
    MP_DEDUP_NODE, /* one row per (token, destination node ≠ own node), forwarded inside it */
};

/* The --dedup words in enum order, NULL-terminated. */
extern const char *const mp_dedup_choices[];

/* --dedup's help text. */
#define MP_DEDUP_HELP                                                                              \
    "what a dispatched row stands for: pair (one per token-expert pair), rank (one per token and " \
    "destination rank, carrying its top-k ids and weights), node (one per token and destination " \
    "node, forwarded inside the node); a list sweeps them"

/* Read one --dedup word into *mode: MP_OK, or MP_ERR_USAGE after a message naming --dedup, the
 * word and the accepted words. */
int mp_dedup_parse(const char *word, enum mp_dedup *mode);

/* Dispatch metadata bytes that travel with every dispatched row of `mode` for top-`K` routing:
 * none for pair; K·(4 + 4) (an int32 expert id and a float weight per choice, as DeepEP's normal
 * mode sends them) for rank and node. Combine rows carry none. */
double mp_dedup_meta_bytes(enum mp_dedup mode, int K);

/* --dispatch padded with --dedup rank: the rows of the fixed slot every source sends every EP rank
 * (padding included), for `tokens` tokens per source (the most any rank holds). Lossless (factor
 * ≤ 0): `tokens`, as a token has at most one row at a rank. padded:F: the pair slots' capacity
 * summed over the `max_local` experts a rank holds, max_local · mp_padded_capacity(tokens, K,
 * experts, F) (kernels/padded.h), at most `tokens`: never more slot rows than --dedup pair's. */
long mp_dedup_padded_capacity(long tokens, int K, int experts, int max_local, double factor);

/* The pairs --dispatch padded with --dedup rank or node keeps, walked token by token for the whole
 * batch of `total` tokens split over `ep` ranks as mp_token_split does (ids [total·K]): a source's
 * row at target q (rank mode, ep_node NULL: the rank serving a pair, by mp_placement_dest; node
 * mode, ep_node [ep] the node of each EP rank: that rank when on the source's node, else the
 * source's relay on its node, mp_dedup_relay) is kept when fewer than `cap` of its earlier tokens
 * have one there, else dropped with every pair it carries (node's forwards never drop: their slots
 * are lossless). Fills, when
 * not NULL: exp_pairs [ep·max_local] the kept pairs of each (rank, local expert), dropped [ep] and
 * local [ep] the pairs each source dropped and kept on itself; with w non-NULL zeroes the dropped
 * pairs' weights (the --check reference's routing). Returns the pairs dropped in all, or −1 out of
 * memory. Independent of the plan the measured layer builds (core/layer/dispatch_plan_dedup.h). */
long mp_dedup_padded_walk(const struct mp_placement *pl, int ep, long total, int K,
                          const int32_t *ids, float *w, long cap, const int *ep_node,
                          double *exp_pairs, double *dropped, double *local);

/* The node of EP rank p when every EP rank has tp ranks and nodes hold gpus_per_node ranks: the
 * node of its first TP rank, p·tp / gpus_per_node (as the model's exchange counts it). */
static inline int mp_dedup_node_of(int p, int tp, int gpus_per_node)
{
    return (int)((long)p * tp / gpus_per_node);
}

/* One draw's dispatch rows. rows[h·ep·ep + e·ep + p]: rows EP rank e sends EP rank p in dispatch
 * hop h (h 0: the only hop of pair and rank; for node its inter-node phase, the rows over the
 * network to the relays; h 1: node's intra-node phase, the direct rows to the ranks of the token's
 * own node and the forwards from the relay to the ranks of its node that hold the token's experts;
 * the phases core/layer/dispatch_dedup.c runs on the EP group's node groups). The combine sends each
 * hop's rows back in reverse (hop 1 first), one row per row received: rows[h][p][e] from p to e.
 * e == p cells are 0. */
struct mp_dedup_counts {
    int ep, hops; /* hops: 2 for node, else 1 */
    double *rows; /* [2·ep·ep] */
    double *pairs; /* [ep] (token, expert) pairs each rank's experts run, the same for every mode */
    long *seen;    /* [2·ep] scratch */
};

int mp_dedup_alloc(struct mp_dedup_counts *c, int ep);
void mp_dedup_free(struct mp_dedup_counts *c);

/* Count the draw's rows for `mode`: `T` tokens split over the ep ranks as mp_token_split does,
 * `ids` [T·K] their experts; each pair served by mp_placement_dest(pl, own rank, expert, token),
 * whatever the mode; ranks on nodes by mp_dedup_node_of(tp, gpus_per_node). A node-mode token
 * bound for another node goes to that node's rank with its own local index in the node (local
 * index modulo the ranks there when that node has fewer). */
void mp_dedup_count(enum mp_dedup mode, const struct mp_placement *pl, const int32_t *ids, long T,
                    int K, int tp, int gpus_per_node, struct mp_dedup_counts *c);

/* The same for the tokens of chunk `chunk` of `nchunks` only: of each rank's tokens (as
 * mp_token_split gives them), the chunk's share (mp_token_split of them over nchunks), as the
 * pipelined deduplicated dispatch (--overlap N) cuts them. nchunks 1, chunk 0: mp_dedup_count. */
void mp_dedup_count_chunk(enum mp_dedup mode, const struct mp_placement *pl, const int32_t *ids,
                          long T, int K, int tp, int gpus_per_node, int nchunks, int chunk,
                          struct mp_dedup_counts *c);

/* Per EP rank p, the bytes it sends to other ranks in dispatch plus combine, all hops:
 * sent[p] in all, inter[p] of them to another node. A dispatch row is row_bytes + meta_bytes, a
 * combine row row_bytes. Either pointer may be NULL. */
void mp_dedup_bytes(const struct mp_dedup_counts *c, int tp, int gpus_per_node, double row_bytes,
                    double meta_bytes, double *sent, double *inter);

#endif
