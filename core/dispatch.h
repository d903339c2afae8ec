/* dispatch.h - the layer's dispatch modes as a table of hooks: how the tokens reach their experts
 * and come back (dynamic, padded, pipelined), each mode in a file of its own (core/dispatch_*.c).
 * Adding a mode is one new file filling a struct mp_dispatch_mode and one entry in
 * mp_dispatch_modes (core/dispatch.c). */
#ifndef MP_DISPATCH_H
#define MP_DISPATCH_H

#include "layer.h"

struct mp_routing_pool;
struct mp_vtraffic;
struct mp_vdraw;

/* One dispatch mode. mp_layer_run calls, per point: validate, reserve, (weights, inputs and the
 * routing pool), setup, then for each pass plan, iterate (warm-up, capture, timed), and teardown
 * once at mp_layer_destroy. Every hook is collective (every rank calls it with the same point)
 * and returns MP_OK, MP_ERR_USAGE (with a message naming the flags) or MP_ERR_RUNTIME. */
struct mp_dispatch_mode {
    const char *name;
    /* whether this mode runs `pt` (its dispatch and overlap); the first mode that accepts a point
     * runs it */
    int (*accepts)(const struct mp_point *pt);
    /* optional: refuse a point this layer cannot run in this mode, before anything is set up */
    int (*validate)(const struct mp_layer *L, const struct mp_point *pt);
    /* optional, at mp_layer_create: what the mode keeps for the layout's lifetime */
    int (*create)(struct mp_layer *L);
    /* optional, before the point's weights are set up: grow the buffers the mode's rows need
     * (with a collective memory check) for `total` tokens in all */
    int (*reserve)(struct mp_layer *L, const struct mp_point *pt, long total);
    /* optional, after the weights and the routing pool: size the mode's own state for the point
     * (`tokens_per_rank`: the most tokens any EP rank holds) */
    int (*setup)(struct mp_layer *L, const struct mp_point *pt, long tokens_per_rank);
    /* hand the compute backend the cell layout of this mode's plan (mp_layer_plan_setup) */
    int (*plan)(struct mp_layer *L, const struct mp_point *pt, long tok0, long ntok);
    /* one timed layer forward with routing draw `d`: phase durations and counts into *rec */
    int (*iterate)(struct mp_layer *L, const struct mp_point *pt, struct mp_routing_pool *pool,
                   int d, long ntok, struct mp_rank_iter *rec);
    /* optional (--graph): capture the point's layer once for replay by later iterate calls; NULL
     * when the mode cannot be captured */
    int (*capture)(struct mp_layer *L, const struct mp_point *pt, struct mp_routing_pool *pool,
                   long ntok);
    /* optional, at mp_layer_destroy: free what create and setup made */
    void (*teardown)(struct mp_layer *L);
    /* optional: the mode a point is first run in, unpipelined, for its overlap efficiency */
    const struct mp_dispatch_mode *reference;
    /* for the cluster model: the traffic builder (core/vlayer.h, mp_vtraffic_fn) that fills one
     * routing draw's traffic as this mode moves and computes it; NULL: the model cannot express
     * the mode yet */
    void (*model_traffic)(struct mp_vtraffic *t, const struct mp_vdraw *d);
};

extern const struct mp_dispatch_mode mp_dispatch_dynamic;
extern const struct mp_dispatch_mode mp_dispatch_padded;
extern const struct mp_dispatch_mode mp_dispatch_pipelined;

/* The modes, NULL-terminated, in the order a point is offered to them. */
extern const struct mp_dispatch_mode *const mp_dispatch_modes[];

/* The mode that runs `pt`: the first of mp_dispatch_modes that accepts it (dynamic accepts every
 * point). */
const struct mp_dispatch_mode *mp_dispatch_for(const struct mp_point *pt);

#endif
