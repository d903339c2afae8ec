/* test_layer_alloc.c - the timed loop allocates nothing: malloc, calloc, realloc and
 * posix_memalign are interposed and counted while the layer says it is inside a timed iteration.
 * An allocation counts as the project's when its immediate caller is code in this executable (the
 * project's library is linked in statically); allocations made inside shared libraries (Open MPI
 * buffers unexpected messages in a pool it grows on demand) are reported but not ours to remove.
 * Runs as a single process or under mpirun (every rank checks itself), with the dispatched rows
 * in bf16 and in fp8. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
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

/* glibc's own entry points, which the interposers forward to */
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t m);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);

static volatile long timed_allocs, library_allocs, all_allocs;
static void main_anchor(void);

/* Is `addr` code of this executable (not of a shared library)? */
static int in_executable(void *addr)
{
    static void *exe_base;
    Dl_info self, caller;
    if (!exe_base) {
        if (!dladdr((void *)main_anchor, &self))
            return 1;
        exe_base = self.dli_fbase;
    }
    if (!dladdr(addr, &caller))
        return 1; /* unknown: count it as ours, the strict choice */
    return caller.dli_fbase == exe_base;
}

static void count(void *caller)
{
    all_allocs++;
    if (!mp_in_timed_loop)
        return;
    mp_in_timed_loop = 0; /* dladdr may allocate */
    if (in_executable(caller))
        timed_allocs++;
    else
        library_allocs++;
    mp_in_timed_loop = 1;
}

#define CALLER __builtin_extract_return_addr(__builtin_return_address(0))

void *malloc(size_t n)
{
    count(CALLER);
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t m)
{
    count(CALLER);
    return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n)
{
    count(CALLER);
    return __libc_realloc(p, n);
}
int posix_memalign(void **out, size_t align, size_t n)
{
    count(CALLER);
    *out = __libc_memalign(align, n);
    return *out ? 0 : 12; /* ENOMEM */
}

static void main_anchor(void) {}

int main(int argc, char **argv)
{
    struct mp_comm *c;
    struct mp_compute *dev;
    const struct mp_compute_ops *ops = &mp_compute_cpu;
    CHECK_INT(mp_comm_mpi.init(&c, &argc, &argv, NULL), MP_OK);
    mp_log_init("test_layer_alloc", c->rank);
    CHECK_INT(ops->init(&dev, 0), MP_OK);
    CHECK_INT(c->ops->split(c, 1, c->size), MP_OK);

    struct mp_model m;
    CHECK_INT(mp_model_resolve("qwen3-30b-a3b", &m), MP_OK);
    CHECK_INT(mp_model_override(&m, 16, 4, 1, 128, 256, -1), MP_OK);
    const char *routings[] = {"hot:2:10", "gate:0.3"};
    struct mp_layer *L;
    CHECK_INT(mp_layer_create(&L, ops, dev, c, &m, 5, 64, 0, 2), MP_OK);
    /* two routings: unpipelined, in 2 chunks, padded dispatch; rows in bf16, then in fp8 */
    for (int k = 0; k < 12; k++) {
        int i = k % 6;
        struct mp_routing rt;
        struct mp_placement pl;
        CHECK_INT(mp_routing_parse(routings[i % 2], m.experts, m.topk, 5, &rt), MP_OK);
        CHECK_INT(mp_placement_build("replicate-hot:2", m.experts, c->ep, rt.prob, &pl), MP_OK);
        struct mp_point pt = {.batch = 64, .seq = 1, .routing = &rt, .placement = &pl,
                              .warmup = 1, .iters = 6, .check = 0, .overlap = i / 2 == 1 ? 2 : 1,
                              .dispatch = i >= 4 ? &mp_dispatch_padded : NULL,
                              .dispatch_arg = i == 5 ? 1.0 : 0,
                              .dispatch_dtype = k >= 6 ? MP_DTYPE_FP8 : MP_DTYPE_BF16};
        struct mp_point_result res;
        long before = all_allocs;
        CHECK_INT(mp_layer_run(L, &pt, &res), MP_OK);
        CHECK(all_allocs > before); /* the interposer sees the point's set-up */
        mp_point_result_free(&res);
        mp_placement_free(&pl);
        mp_routing_free(&rt);
    }
    mp_layer_destroy(L);
    if (timed_allocs != 0)
        fprintf(stderr, "rank %d: %ld allocations inside timed iterations\n", c->rank, timed_allocs);
    CHECK_INT(timed_allocs, 0);
    printf("rank %d: %ld allocations in total; inside timed iterations %ld by moeperf, %ld inside "
           "shared libraries\n", c->rank, all_allocs, timed_allocs, library_allocs);
    ops->fini(dev);
    int failures = check_failures;
    c->ops->fini(c);
    return failures ? 1 : 0;
}
