/* test_chunks.c - block row moves as runs and as launch tables (kernels/chunks.h): walking the
 * tables row by row, as copy_rows_kernel does, moves exactly the rows the chunk list names, each
 * once, for hand-made lists (empty chunks, runs that continue on one side only) and for the
 * regrouping lists of real dispatch plans, with tables small enough to take several launches. */
#include <stdlib.h>

#include "check.h"
#include "chunks.h"
#include "error.h"
#include "placement.h"
#include "dispatch_plan.h"
#include "routing.h"

/* Every row the tables of `cap` runs move, against the chunk list expanded row by row: returns
 * the number of launches. want[src row] = dst row (−1: not moved) over `nrows` source rows. */
static int walk(const struct mp_chunk *ch, int nch, int cap, long nrows)
{
    long *want = malloc(sizeof(long) * (size_t)(nrows + 1));
    int *seen = calloc((size_t)nrows + 1, sizeof(int));
    for (long r = 0; r < nrows; r++)
        want[r] = -1;
    for (int c = 0; c < nch; c++)
        for (long k = 0; k < ch[c].n; k++)
            want[ch[c].src + k] = ch[c].dst + k;
    int32_t *start = malloc(sizeof(int32_t) * (size_t)(cap + 1));
    int32_t *src = malloc(sizeof(int32_t) * (size_t)cap), *dst = malloc(sizeof(int32_t) * (size_t)cap);
    int i = 0, n, launches = 0;
    while ((n = mp_chunks_table(ch, nch, &i, cap, start, src, dst)) > 0) {
        launches++;
        CHECK(n <= cap);
        CHECK_INT(start[0], 0);
        for (int32_t r = 0; r < start[n]; r++) { /* one block per row */
            int run = mp_chunk_find(start, n, r);
            CHECK(run >= 0 && run < n && start[run] <= r && r < start[run + 1]);
            long from = src[run] + (r - start[run]), to = dst[run] + (r - start[run]);
            CHECK(from >= 0 && from < nrows);
            if (from < 0 || from >= nrows)
                continue;
            CHECK_INT(to, want[from]);
            seen[from]++;
        }
    }
    for (long r = 0; r < nrows; r++)
        CHECK_INT(seen[r], want[r] >= 0 ? 1 : 0);
    free(want);
    free(seen);
    free(start);
    free(src);
    free(dst);
    return launches;
}

int main(void)
{
    /* runs: 0..3 → 10..13 continues as 4..5 → 14..15 (one run); an empty chunk does not break it;
     * 6..7 → 20..21 continues on the source side only (new run) */
    struct mp_chunk a[] = {{.src = 0, .dst = 10, .n = 4}, {.src = 99, .dst = 99, .n = 0},
                           {.src = 4, .dst = 14, .n = 2}, {.src = 6, .dst = 20, .n = 2},
                           {.src = 8, .dst = 0, .n = 0}};
    struct mp_chunk run;
    int i = 0;
    CHECK_INT(mp_chunks_next(a, 5, &i, &run), 1);
    CHECK_INT(run.src, 0);
    CHECK_INT(run.dst, 10);
    CHECK_INT(run.n, 6);
    CHECK_INT(mp_chunks_next(a, 5, &i, &run), 1);
    CHECK_INT(run.src, 6);
    CHECK_INT(run.dst, 20);
    CHECK_INT(run.n, 2);
    CHECK_INT(mp_chunks_next(a, 5, &i, &run), 0);
    CHECK_INT(i, 5);
    struct mp_chunk none[] = {{.src = 0, .dst = 0, .n = 0}};
    i = 0;
    CHECK_INT(mp_chunks_next(none, 1, &i, &run), 0);
    CHECK_INT(walk(a, 5, 1, 8), 2); /* one run per launch */
    CHECK_INT(walk(a, 5, 8, 8), 1);

    /* binary search over a table with an empty-free run layout */
    int32_t start[] = {0, 3, 4, 9};
    CHECK_INT(mp_chunk_find(start, 3, 0), 0);
    CHECK_INT(mp_chunk_find(start, 3, 2), 0);
    CHECK_INT(mp_chunk_find(start, 3, 3), 1);
    CHECK_INT(mp_chunk_find(start, 3, 4), 2);
    CHECK_INT(mp_chunk_find(start, 3, 8), 2);
    CHECK_INT(mp_chunk_find(start, 1, 2), 0);

    /* the regrouping of real plans: source-major → expert-major and back, on 4 EP ranks */
    const int E = 24, ep = 4, K = 4;
    const long total = 300;
    struct mp_routing rt;
    struct mp_placement pl;
    CHECK_INT(mp_routing_parse("hot:3:10", E, K, 3, &rt), MP_OK);
    CHECK_INT(mp_placement_build("replicate-hot:2", E, ep, rt.prob, &pl), MP_OK);
    int32_t *ids = malloc(sizeof(int32_t) * total * K);
    float *w = malloc(sizeof(float) * total * K);
    mp_routing_draw(&rt, 3, 0, total, 0, total, ids, w);
    struct mp_plan p[4];
    for (int r = 0; r < ep; r++) {
        long tok0, n = mp_token_split(total, ep, r, &tok0);
        CHECK_INT(mp_plan_alloc(&p[r], ep, pl.max_local, total, K), MP_OK);
        mp_plan_send(&p[r], &pl, r, tok0, n, ids + tok0 * K, w + tok0 * K);
    }
    for (int r = 0; r < ep; r++) { /* the count exchange, by hand */
        for (int s = 0; s < ep; s++)
            for (int l = 0; l < pl.max_local; l++)
                p[r].recv_cnt[s * pl.max_local + l] = p[s].send_cnt[r * pl.max_local + l];
        mp_plan_recv(&p[r], mp_placement_nlocal(&pl, r));
        int launches = walk(p[r].to_expert, p[r].nchunks, 3, p[r].nrecv);
        CHECK(launches >= 1 || p[r].nrecv == 0);
        walk(p[r].to_source, p[r].nchunks, 1024, p[r].nrecv);
    }
    for (int r = 0; r < ep; r++)
        mp_plan_free(&p[r]);
    free(ids);
    free(w);
    mp_placement_free(&pl);
    mp_routing_free(&rt);
    CHECK_DONE();
}
