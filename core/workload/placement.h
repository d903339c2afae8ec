/* placement.h - which EP ranks hold which experts, replicas included, and where a token is served. */
#ifndef MP_PLACEMENT_H
#define MP_PLACEMENT_H

enum mp_placement_kind {
    MP_PLACE_CONTIGUOUS,    /* "contiguous": experts split into ep runs, sizes differ by at most 1 */
    MP_PLACE_ROUND_ROBIN,   /* "round-robin": expert e on rank e mod ep */
    MP_PLACE_REPLICATE_HOT, /* "replicate-hot:R": contiguous, plus the R hottest on every rank */
    MP_PLACE_EPLB,          /* "eplb:SLOTS": SLOTS redundant replicas balanced by expected load */
};

struct mp_placement {
    enum mp_placement_kind kind;
    char spec[64];
    int experts, ep, replicate; /* replicate: R of replicate-hot, SLOTS of eplb */
    int *home;        /* [experts] the rank holding the original copy */
    int *local_off;   /* [ep+1] prefix sums into local_ids */
    int *local_ids;   /* expert ids held by each rank, ascending, replicas included */
    int *holder_off;  /* [experts+1] prefix sums into holders */
    int *holders;     /* ranks holding each expert, ascending */
    int max_local;    /* largest number of experts on one rank */
    int *node;        /* [ep] node of each EP rank (mp_placement_set_nodes), NULL: one node */
};

/* Build the placement named by `spec` for `experts` experts on `ep` ranks. `load` ([experts],
 * expected share per expert, or NULL when unknown: uniform) ranks experts for replicate-hot (ties:
 * lower id first) and weighs them for eplb. eplb:SLOTS follows the expert-parallel load balancer's
 * two steps: each redundant slot goes to the expert with the highest load per replica (an expert has
 * at most one replica per rank), then replicas, heaviest (load / replicas) first, go to the
 * least-loaded rank with a free slot that does not hold that expert yet; every rank has
 * ⌈(experts + SLOTS) / ep⌉ slots. Errors print one line naming --placement and what is accepted;
 * returns MP_ERR_USAGE. */
int mp_placement_build(const char *spec, int experts, int ep, const double *load,
                       struct mp_placement *p);
void mp_placement_free(struct mp_placement *p);

/* Number of experts rank `ep_rank` holds. */
static inline int mp_placement_nlocal(const struct mp_placement *p, int ep_rank)
{
    return p->local_off[ep_rank + 1] - p->local_off[ep_rank];
}

/* Index of `expert` among rank `ep_rank`'s experts, or -1 if it holds no copy. */
int mp_placement_local_index(const struct mp_placement *p, int ep_rank, int expert);

/* Record the node of every EP rank, node[q] for q < ep (copied), so that mp_placement_dest prefers
 * a copy on the token's own node; NULL forgets them (one node). A placement starts on one node.
 * MP_OK or MP_ERR_RUNTIME (out of memory; the placement keeps its nodes). */
int mp_placement_set_nodes(struct mp_placement *p, const int *node);

/* The nodes of a cluster profile's ranks, packed gpus_per_node to a node, each EP rank on the node
 * of its first TP rank (q·tp / gpus_per_node, as the model's exchanges count them), for a replay
 * of a run on the model (calibration, the planner). MP_OK or MP_ERR_RUNTIME (out of memory). */
int mp_placement_pack_nodes(struct mp_placement *p, int tp, int gpus_per_node);

/* The rank that serves (token, expert) for a token living on `src`, the one replica rule every
 * plan, count and model follows: src itself if it holds a copy; else, when ranks of src's node
 * hold copies, the (token mod m)-th of those m ranks (ascending); else holders[token mod
 * nholders] (docs/METRICS.md, "Replica choice"). */
int mp_placement_dest(const struct mp_placement *p, int src, int expert, long token);

/* How many ranks of src's node hold `expert` (0 when src holds none on its node; every holder
 * when the placement has no nodes): the candidates mp_placement_dest rotates among, or 0 when it
 * rotates among all holders. */
int mp_placement_node_holders(const struct mp_placement *p, int src, int expert);

#endif
