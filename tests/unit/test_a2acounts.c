/* test_a2acounts.c - moeperf-a2a's counts and displacements: every peer's block starts and ends
 * where bytes_per_peer·p says, in bytes, at sizes whose offsets cross 2^31 and 2^32 (the shipped
 * sweep's 256M per peer at ep16 reaches 3.75 GiB), and the counts MPI and NCCL see stay positive
 * ints; the per-comm row limit and the MoE row bound refuse what an int cannot count. */
#include <limits.h>
#include <stdint.h>

#include "a2acounts.h"
#include "check.h"
#include "comm.h"
#include "error.h"

/* The uniform pattern of `ep` peers at `bytes` per peer: blocks tile the buffer in order. */
static void check_uniform(int ep, long long bytes)
{
    struct mp_a2a_counts c = {0};
    CHECK_INT(mp_a2a_counts_uniform(&c, ep, bytes), MP_OK);
    CHECK_INT(c.ndraws, 1);
    for (int p = 0; p < ep; p++) {
        CHECK(c.scount[p] > 0 && c.rcount[p] > 0);
        CHECK(c.sdispl[p] >= 0 && c.rdispl[p] >= 0);
        CHECK_INT(mp_a2a_offset(c.sdispl, p, c.row_bytes), (unsigned long long)bytes * p);
        CHECK_INT(mp_a2a_offset(c.rdispl, p, c.row_bytes), (unsigned long long)bytes * p);
        CHECK_INT((size_t)c.scount[p] * c.row_bytes, bytes);
        CHECK_INT((size_t)c.rcount[p] * c.row_bytes, bytes);
    }
    /* the last block ends at the end of the ep·bytes buffer */
    CHECK_INT(mp_a2a_offset(c.sdispl, ep - 1, c.row_bytes) + (size_t)c.scount[ep - 1] * c.row_bytes,
              (unsigned long long)bytes * ep);
    CHECK_NEAR(c.bytes_per_rank, (double)bytes * ep, 0);
    mp_a2a_counts_free(&c);
}

int main(void)
{
    const long long K = 1024, M = K * K, G = M * K;
    check_uniform(2, 1);
    check_uniform(16, 1 * K);
    check_uniform(16, 128 * M);     /* offsets up to 1.875 GiB: below 2^31 */
    check_uniform(16, 256 * M);     /* peer 8 starts at exactly 2^31, peer 15 at 3.75 GiB */
    check_uniform(9, 256 * M + 1);  /* an odd size straddling 2^31 */
    check_uniform(4, 1 * G);        /* peer 3 at 3 GiB: gpu-check's one-GPU point at 4 ranks */
    check_uniform(2, 3 * G);        /* a row over INT_MAX bytes (NCCL only), peer 1 at 3 GiB */
    check_uniform(64, 4 * G);       /* the --bytes maximum at 64 peers: 252 GiB offsets */

    /* one MPI datatype counts its bytes in an int; NCCL counts in size_t */
    CHECK_INT(mp_a2a_max_row_bytes(&mp_comm_mpi), INT_MAX);
    for (int i = 0; mp_comm_backends[i]; i++)
        if (mp_comm_backends[i]->memory == MP_MEMORY_DEVICE) /* nccl */
            CHECK(mp_a2a_max_row_bytes(mp_comm_backends[i]) >= (size_t)4 * G);

    /* MoE rows: tokens·topk must fit an int; the buffer is counted in size_t */
    size_t bytes = 0;
    CHECK_INT(mp_a2a_moe_fits(1 << 20, 8, 7168 * 2, &bytes), 1);
    CHECK_INT(bytes, (unsigned long long)(1 << 20) * 8 * 7168 * 2); /* 112 GiB: over 2^32 */
    CHECK_INT(mp_a2a_moe_fits(INT_MAX / 8, 8, 2, &bytes), 1);
    CHECK_INT(mp_a2a_moe_fits(INT_MAX / 8 + 1, 8, 2, &bytes), 0);
    CHECK_INT(mp_a2a_moe_fits((long long)1 << 44, 1024, 1 << 22, &bytes), 0);
    return check_failures;
}
