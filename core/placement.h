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

/* The rank that serves (token, expert) for a token living on `src`: src itself if it holds a copy,
 * otherwise holders[token mod nholders]. */
int mp_placement_dest(const struct mp_placement *p, int src, int expert, long token);

#endif
