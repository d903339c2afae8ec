/* placement.h - which EP ranks hold which experts, replicas included, and where a token is served. */
#ifndef MP_PLACEMENT_H
#define MP_PLACEMENT_H

enum mp_placement_kind {
    MP_PLACE_CONTIGUOUS,    /* "contiguous": experts split into ep runs, sizes differ by at most 1 */
    MP_PLACE_ROUND_ROBIN,   /* "round-robin": expert e on rank e mod ep */
    MP_PLACE_REPLICATE_HOT, /* "replicate-hot:R": contiguous, plus the R hottest on every rank */
};

struct mp_placement {
    enum mp_placement_kind kind;
    char spec[64];
    int experts, ep, replicate;
    int *home;        /* [experts] the rank holding the original copy */
    int *local_off;   /* [ep+1] prefix sums into local_ids */
    int *local_ids;   /* expert ids held by each rank, ascending, replicas included */
    int *holder_off;  /* [experts+1] prefix sums into holders */
    int *holders;     /* ranks holding each expert, ascending */
    int max_local;    /* largest number of experts on one rank */
};

/* Build the placement named by `spec` for `experts` experts on `ep` ranks. `load` ([experts],
 * expected share per expert, or NULL when unknown) ranks experts for replicate-hot (ties: lower id
 * first). Errors print one line naming --placement and what is accepted; returns MP_ERR_USAGE. */
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
