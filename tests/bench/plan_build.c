/* plan_build.c - the dispatch plan of a pipelined point built two ways on this CPU, side by side:
 * one pass over the rank's pairs per chunk (mp_plan_send_group, the host plan) against one
 * counting sort by chunk-keyed cell (the backend-built plan, kernels/dplan.c). Checks that both
 * give the same rows, then prints the best-of-R time of each and their ratio per chunk count.
 * Usage: plan_build [tokens per rank] [repetitions] (defaults 4096, 30). */
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "dplan_host.h"
#include "error.h"
#include "placement.h"
#include "dispatch_plan.h"
#include "routing.h"

enum { E = 256, K = 8, EP = 16, RANK = 3 };

int main(int argc, char **argv)
{
    long ntok = argc > 1 ? atol(argv[1]) : 4096;
    int reps = argc > 2 ? atoi(argv[2]) : 30;
    if (ntok <= 0 || reps <= 0) {
        fprintf(stderr, "usage: plan_build [tokens per rank > 0] [repetitions > 0]\n");
        return 2;
    }
    long total = ntok * EP, tok0;
    struct mp_routing rt;
    struct mp_placement pl;
    if (mp_routing_parse("hot:4:15", E, K, 7, &rt) != MP_OK ||
        mp_placement_build("eplb:16", E, EP, rt.prob, &pl) != MP_OK)
        return 1;
    long n = mp_token_split(total, EP, RANK, &tok0);
    int32_t *ids = malloc(sizeof(int32_t) * n * K);
    float *w = malloc(sizeof(float) * n * K);
    int32_t *off = malloc(sizeof(int32_t) * (E + 1));
    int32_t *cell = malloc(sizeof(int32_t) * mp_route_table_size(&pl));
    struct mp_plan hp;
    if (!ids || !w || !off || !cell || mp_plan_alloc(&hp, EP, pl.max_local, n, K) != MP_OK)
        return 1;
    mp_routing_draw(&rt, 7, 0, total, tok0, n, ids, w);
    printf("plan of one rank: %ld tokens, top-%d of %d experts, ep%d, eplb:16 (max %d local), "
           "best of %d\n", n, K, E, EP, pl.max_local, reps);
    printf("%7s %16s %16s %8s\n", "chunks", "per-chunk (us)", "one sort (us)", "ratio");
    int bad = 0;
    for (int N = 1; N <= 8; N *= 2) {
        mp_route_table(&pl, RANK, pl.max_local, N, off, cell);
        struct mp_dplan_shape s = {.experts = E, .K = K, .max_local = pl.max_local,
                                   .ncells = N * EP * pl.max_local, .ntok = n, .tok0 = tok0,
                                   .cap = 0, .route_off = off, .route_cell = cell};
        struct mp_dplan_host dp = {0};
        if (mp_dplan_host_setup(&dp, &s) != MP_OK)
            return 1;
        double best_host = 1e300, best_sort = 1e300;
        for (int r = 0; r < reps; r++) { /* interleaved, so drift hits both alike */
            double t0 = mp_now_us();
            for (int k = 0; k < N; k++)
                mp_plan_send_group(&hp, &pl, RANK, tok0, n, ids, w, k, N);
            double t1 = mp_now_us();
            mp_dplan_host_build(&dp, ids, w);
            double t2 = mp_now_us();
            best_host = t1 - t0 < best_host ? t1 - t0 : best_host;
            best_sort = t2 - t1 < best_sort ? t2 - t1 : best_sort;
        }
        long row0 = 0; /* the same rows, chunk by chunk */
        for (int k = 0; k < N; k++) {
            mp_plan_send_group(&hp, &pl, RANK, tok0, n, ids, w, k, N);
            for (long i = 0; i < hp.nsend; i++)
                bad += dp.src_tok[row0 + i] != hp.src_tok[i] || dp.row_w[row0 + i] != hp.row_w[i];
            row0 += hp.nsend;
        }
        bad += row0 != dp.nrows;
        printf("%7d %16.1f %16.1f %8.3f\n", N, best_host, best_sort, best_sort / best_host);
        mp_dplan_host_free(&dp);
    }
    if (bad)
        fprintf(stderr, "plan_build: the two plans differ in %d rows\n", bad);
    mp_plan_free(&hp);
    mp_placement_free(&pl);
    mp_routing_free(&rt);
    free(ids);
    free(w);
    free(off);
    free(cell);
    return bad ? 1 : 0;
}
