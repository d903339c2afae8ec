/* test_flush.c - --flush-cache's protocol: the layer evicts the caches exactly once before every
 * timed iteration and never between an iteration's marks (unpipelined, pipelined and padded), not
 * at all without flush_cache; and the cpu backend's flush_cache op runs and can be repeated. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "compute.h"
#include "dispatch.h"
#include "error.h"
#include "layer.h"
#include "model.h"
#include "placement.h"
#include "routing.h"

/* The cpu backend with mark and flush_cache recording the order of calls. */
static struct mp_compute_ops spy;
static long flushes, marks_after_flush, flushes_inside;
static int inside; /* between a START mark and the iteration's last mark */
static int last_was_flush;

/* core/layer/layer.c's marks: START begins an iteration; ALIGN (this rank's arrival at the start
 * barrier) comes between the flush and START, and is not work on the device */
enum { SPY_MARK_START = 0, SPY_MARK_ALIGN = 6 };

static int spy_mark(struct mp_compute *c, int slot)
{
    if (slot == SPY_MARK_ALIGN)
        return mp_compute_cpu.mark(c, slot);
    if (slot == SPY_MARK_START) { /* an iteration begins */
        inside = 1;
        marks_after_flush += last_was_flush;
    }
    last_was_flush = 0;
    return mp_compute_cpu.mark(c, slot);
}

static int spy_flush(struct mp_compute *c)
{
    flushes++;
    flushes_inside += inside;
    last_was_flush = 1;
    return mp_compute_cpu.flush_cache(c);
}

static int spy_sync(struct mp_compute *c)
{
    inside = 0; /* a drained device: the marks are read after this */
    return mp_compute_cpu.sync(c);
}

int main(int argc, char **argv)
{
    struct mp_comm *c;
    struct mp_compute *dev;
    spy = mp_compute_cpu;
    spy.mark = spy_mark;
    spy.flush_cache = spy_flush;
    spy.sync = spy_sync;
    CHECK(mp_compute_cpu.flush_cache != NULL);
    CHECK(mp_compute_model.flush_cache == NULL); /* no cache to evict */
    CHECK_INT(mp_comm_mpi.init(&c, &argc, &argv, NULL), MP_OK);
    mp_log_init("test_flush", c->rank);
    CHECK_INT(spy.init(&dev, 0), MP_OK);
    CHECK_INT(spy.flush_cache(dev), MP_OK); /* allocates its buffer, then reuses it */
    CHECK_INT(spy.flush_cache(dev), MP_OK);
    flushes = 0;
    CHECK_INT(c->ops->split(c, 1, c->size), MP_OK);

    struct mp_model m;
    CHECK_INT(mp_model_resolve("qwen3-30b-a3b", &m), MP_OK);
    CHECK_INT(mp_model_override(&m, 16, 4, 1, 128, 256, -1), MP_OK);
    struct mp_layer *L;
    CHECK_INT(mp_layer_create(&L, &spy, dev, c, &m, 5, 64, 0, 2), MP_OK);
    struct mp_routing rt;
    struct mp_placement pl;
    CHECK_INT(mp_routing_parse("hot:2:10", m.experts, m.topk, 5, &rt), MP_OK);
    CHECK_INT(mp_placement_build("contiguous", m.experts, c->ep, rt.prob, &pl), MP_OK);
    for (int mode = 0; mode < 4; mode++) { /* plain, pipelined in 2 chunks, padded; then off */
        const int iters = 5;
        struct mp_point pt = {.batch = 64, .seq = 1, .routing = &rt, .placement = &pl,
                              .warmup = 2, .iters = iters, .overlap = mode == 1 ? 2 : 1,
                              .dispatch = mode == 2 ? &mp_dispatch_padded : NULL,
                              .flush_cache = mode != 3};
        struct mp_point_result res;
        flushes = marks_after_flush = flushes_inside = 0;
        last_was_flush = 0;
        CHECK_INT(mp_layer_run(L, &pt, &res), MP_OK);
        /* the pipelined point measures its unpipelined reference first: twice the iterations */
        long want = mode == 3 ? 0 : mode == 1 ? 2 * iters : iters;
        if (flushes != want || marks_after_flush != want || flushes_inside != 0)
            fprintf(stderr, "mode %d: %ld flushes (want %ld), %ld followed by an iteration's start, "
                            "%ld inside an iteration\n",
                    mode, flushes, want, marks_after_flush, flushes_inside);
        CHECK_INT(flushes, want);
        CHECK_INT(marks_after_flush, want); /* each flush right before an iteration starts */
        CHECK_INT(flushes_inside, 0);
        mp_point_result_free(&res);
    }
    mp_placement_free(&pl);
    mp_routing_free(&rt);
    mp_layer_destroy(L);
    spy.fini(dev);
    int failures = check_failures;
    c->ops->fini(c);
    return failures ? 1 : 0;
}
