/* dispatch.h - the layer's dispatch modes as a table of hooks: how the tokens reach their experts
 * and come back (dynamic, padded, pipelined), each mode in a file of its own (core/layer/dispatch_*.c).
 * Adding a mode is one new file filling a struct mp_dispatch_mode, one entry in MP_DISPATCH_MODES
 * below and its file in meson.build's core_src. */
#ifndef MP_DISPATCH_H
#define MP_DISPATCH_H

#include <stdint.h>

/* the table names the layer's types by pointer only (core/layer/layer.h), so the layer may use it */
struct mp_layer;
struct mp_point;
struct mp_rank_iter;
struct mp_routing_pool;
struct mp_vtraffic;
struct mp_vdraw;

/* The dispatch modes, X(NAME, WORDS, HELP) each: the mode mp_dispatch_NAME, defined in
 * core/layer/dispatch_NAME.c with .name "NAME"; WORDS how --dispatch chooses it: MP_DISPATCH_WORD (the
 * word NAME), MP_DISPATCH_WORD_ARG (NAME, and NAME:ARG that the mode's parse_arg reads) or
 * MP_DISPATCH_NO_WORD (never named: a point comes to it as another mode's `pipelined` or
 * `deduplicated`); HELP its
 * part of --dispatch's help, ending "; " (empty for NO_WORD). The order is the order of the
 * choices and the help; tests/unit/test_dispatch.c checks every entry against its table. */
#define MP_DISPATCH_MODES(X)                                                                       \
    X(dynamic, MP_DISPATCH_WORD, "dynamic (exact counts exchanged first); ")                       \
    X(padded, MP_DISPATCH_WORD_ARG, "padded (fixed slots, lossless); padded:F (capacity factor "   \
                                    "F, pairs over it dropped); ")                                 \
    X(pipelined, MP_DISPATCH_NO_WORD, "")                                                         \
    X(dedup, MP_DISPATCH_NO_WORD, "")                                                             \
    X(dedup_padded, MP_DISPATCH_NO_WORD, "")                                                      \
    X(dedup_pipelined, MP_DISPATCH_NO_WORD, "")

/* --dispatch's help text: every mode's HELP, then how a list sweeps. */
#define MP_DISPATCH_HELP_OF(name, words, help) help
#define MP_DISPATCH_HELP MP_DISPATCH_MODES(MP_DISPATCH_HELP_OF) "a list sweeps them"

/* One dispatch mode. mp_layer_run calls, per point: validate, reserve, (weights, inputs and the
 * routing pool), setup, then for each pass plan, iterate (warm-up, capture, timed), and teardown
 * once at mp_layer_destroy. Every hook is collective (every rank calls it with the same point)
 * and returns MP_OK, MP_ERR_USAGE (with a message naming the flags) or MP_ERR_RUNTIME. */
struct mp_dispatch_mode {
    const char *name; /* the --dispatch word (MP_DISPATCH_MODES' NAME) */
    /* optional, for a mode chosen as NAME:ARG: read ARG (the text after the colon) into *value,
     * the point's dispatch_arg; MP_OK, or MP_ERR_USAGE after a message naming --dispatch, `word`
     * (the whole entry) and what ARG accepts */
    int (*parse_arg)(const char *word, const char *arg, double *value);
    /* the bit of mp_compute_ops.dispatch_modes a compute backend sets when it runs this mode */
    unsigned backend_bit;
    /* optional: the mode that runs a point of this mode with --overlap above 1 (dynamic:
     * pipelined); NULL: such a point is refused (mp_dispatch_check_overlap) */
    const struct mp_dispatch_mode *pipelined;
    /* optional: the mode that runs a point of this mode with --dedup other than pair (dynamic:
     * dedup, padded: dedup_padded, pipelined: dedup_pipelined); NULL: such a point is refused
     * (mp_dispatch_check_dedup) */
    const struct mp_dispatch_mode *deduplicated;
    /* bit 1 << d for each enum mp_dedup d (core/layer/dedup.h) besides pair this mode's rows carry out */
    unsigned dedup_modes;
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
    /* optional: hand the compute backend the cell layout of this mode's plan
     * (mp_layer_plan_setup); NULL for a mode whose plan is built on the host every iteration */
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
    /* optional (--check): make the reference's routing (`ntok` tokens' top-K `ids` and `w`, all
     * ranks' tokens in order) what this mode computed (padded: the pairs over capacity dropped);
     * MP_OK or MP_ERR_RUNTIME (out of memory) */
    int (*check_routing)(const struct mp_layer *L, const struct mp_point *pt, long ntok, int K,
                         int32_t *ids, float *w);
    /* optional, for the cluster model: the traffic builder (core/cluster_model/vlayer.h, mp_vtraffic_fn) that
     * counts one routing draw's traffic as this mode moves and computes it, straight from the
     * draw, to the bit what traced ranks running `iterate` make (tests/unit/test_vexec.c); NULL:
     * the model runs the mode on traced ranks (core/cluster_model/vexec.h) */
    void (*model_traffic)(struct mp_vtraffic *t, const struct mp_vdraw *d);
};

#define MP_DISPATCH_DECLARE(name, words, help)                                                     \
    extern const struct mp_dispatch_mode mp_dispatch_##name;
MP_DISPATCH_MODES(MP_DISPATCH_DECLARE)
#undef MP_DISPATCH_DECLARE

/* The modes, NULL-terminated, in MP_DISPATCH_MODES' order. */
extern const struct mp_dispatch_mode *const mp_dispatch_modes[];

/* The words --dispatch accepts, NULL-terminated ("padded:" admits "padded:F"), from
 * MP_DISPATCH_MODES. */
extern const char *const mp_dispatch_choices[];

/* Parse one --dispatch entry: "NAME" or, for a mode with parse_arg, "NAME:ARG" into the mode and
 * its argument (0 without one). MP_OK, or MP_ERR_USAGE after a message naming --dispatch, the
 * entry and the accepted words. */
int mp_dispatch_parse(const char *word, const struct mp_dispatch_mode **mode, double *arg);

/* The mode that runs `pt`: the one it was given (pt->dispatch; NULL: dynamic), or with
 * pt->overlap above 1 that mode's pipelined form when it has one; then with pt->dedup other than
 * pair the deduplicated form of that when it has one. */
const struct mp_dispatch_mode *mp_dispatch_for(const struct mp_point *pt);

/* Refuse a point with --overlap above 1 whose mode has no pipelined form: MP_ERR_USAGE after a
 * message naming both flags and the modes that pipeline; else MP_OK. */
int mp_dispatch_check_overlap(const struct mp_point *pt);

/* Refuse a point whose --dedup its mode (mp_dispatch_for) does not carry out: MP_ERR_USAGE after a
 * message naming --dedup, the word and what runs it; else MP_OK. */
int mp_dispatch_check_dedup(const struct mp_point *pt);

#endif
