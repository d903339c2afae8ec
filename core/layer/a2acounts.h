/* a2acounts.h - the per-peer counts and displacements of moeperf-a2a's exchanges, kept in rows so
 * that no count or displacement handed to MPI or NCCL overflows an int, however large the sweep. */
#ifndef MP_A2ACOUNTS_H
#define MP_A2ACOUNTS_H

#include <stddef.h>

struct mp_comm_ops;

/* Per-iteration send/receive counts and displacements in rows of `row_bytes`, nchunks sets per
 * draw: set d·nchunks + k is chunk k of draw d (moeperf-a2a --overlap; nchunks 1 otherwise).
 * Peer p's block of set i starts (size_t)sdispl[i·ep + p] · row_bytes bytes into the buffer. */
struct mp_a2a_counts {
    int ndraws, nchunks, ep;
    int *scount, *sdispl, *rcount, *rdispl; /* [ndraws·nchunks][ep] */
    size_t row_bytes;
    double bytes_per_rank; /* mean over draws of the largest per-rank send (self included) */
};

/* Zeroed arrays for `ndraws` draws of `nchunks` chunks each, of `ep` peers. Returns MP_OK or
 * MP_ERR_RUNTIME. */
int mp_a2a_counts_alloc(struct mp_a2a_counts *c, int ndraws, int nchunks, int ep);
void mp_a2a_counts_free(struct mp_a2a_counts *c);

/* The uniform pattern: one row of `bytes_per_peer` bytes to and from every peer, peer p's block at
 * row p. Returns MP_OK, or MP_ERR_RUNTIME when out of memory. */
int mp_a2a_counts_uniform(struct mp_a2a_counts *c, int ep, long long bytes_per_peer);

/* Byte offset of peer p's block: displ[p] rows of row_bytes, computed in size_t as the comm
 * backends compute it. */
size_t mp_a2a_offset(const int *displ, int p, size_t row_bytes);

/* The largest row, hence the largest uniform bytes per peer, that --comm `comm` can move (its
 * table's max_row_bytes: an MPI datatype counts its bytes in an int, NCCL counts in size_t). */
size_t mp_a2a_max_row_bytes(const struct mp_comm_ops *comm);

/* The MoE pattern's rows per rank are at most tokens·topk (every pair of the whole batch), and
 * they are counted and displaced in ints: returns 1 and the buffer bytes that hold them all in
 * *bytes when tokens·topk ≤ INT_MAX, else 0. */
int mp_a2a_moe_fits(long long tokens, int topk, size_t row_bytes, size_t *bytes);

#endif
