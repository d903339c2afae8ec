/* comm.h - the communication backend ops table (mpi, nccl, model): the world, its split into
 * tp × ep groups, the dispatch/combine all-to-all, the TP allreduce, and host-side collectives. */
#ifndef MP_COMM_H
#define MP_COMM_H

#include <stddef.h>

#include "config.h"
#include "registry.h"

struct mp_comm_ops;

/* Facts every backend fills in; `priv` is the backend's own state. Rank r of a tp×ep layout has
 * ep_rank = r / tp and tp_rank = r mod tp, so a TP group is tp consecutive ranks (one node when
 * ranks are packed by node). The EP group of r is the ranks with the same tp_rank. */
struct mp_comm {
    const struct mp_comm_ops *ops;
    int rank, size;       /* world */
    int local_rank, local_size; /* within this host */
    int nnodes;
    int *node_of;         /* [size] node index of every world rank */
    int tp, ep, tp_rank, ep_rank; /* the current layout, after split() */
    double inject_delay_us; /* debug: added to every dispatch/combine exchange (0: off) */
    double timeout_s; /* --timeout: the deadline of a backend's set-up steps that can hang (0: none) */
    void *priv;
};

/* What a backend that does not discover its world needs to build one (the model backend). */
struct mp_comm_params {
    int world;         /* virtual ranks */
    int gpus_per_node; /* ranks per node, packed */
};

/* The ops table of a comm backend. Its capability data come first and must agree with its hooks
 * (mp_comm_check, run on every lookup). */
struct mp_comm_ops {
    const char *name;
    /* host: exchanges host buffers; device: runs its collectives on the compute backend's stream
     * (bind_device); virtual: builds a world of virtual ranks from mp_comm_params, moves no data */
    enum mp_memory_kind memory;
    /* the largest row, hence the most bytes to one peer, one all-to-all can express: an MPI
     * datatype counts its bytes in an int (INT_MAX); NCCL counts in size_t (SIZE_MAX) */
    size_t max_row_bytes;
    /* join the world (MPI_Init where needed); fills rank, size, local_*, nodes. `p` describes a
     * virtual world for backends that have no launcher (ignored by mpi and nccl). */
    int (*init)(struct mp_comm **out, int *argc, char ***argv, const struct mp_comm_params *p);
    void (*fini)(struct mp_comm *c);
    /* optional: on a failure this rank meets alone, drop the device communicators without
     * waiting for peers (what they have queued on the device ends), before the compute backend
     * frees the memory their queued operations use; fini still ends the world afterwards */
    void (*abort)(struct mp_comm *c);
    /* library version text for run.json ("Open MPI v4.1.4, ...") */
    const char *(*version)(struct mp_comm *c);
    /* make the tp × ep groups of a layout current; tp·ep must equal size */
    int (*split)(struct mp_comm *c, int tp, int ep);

    /* EP group: every rank sends n ints to every peer (count exchange) */
    int (*alltoall_int)(struct mp_comm *c, const int *send, int *recv, int n);
    /* EP group: rows of row_bytes bytes; counts and displacements in rows, per peer */
    int (*alltoallv)(struct mp_comm *c, const void *send, const int *scount, const int *sdispl,
                     void *recv, const int *rcount, const int *rdispl, size_t row_bytes);
    /* EP group, non-blocking (optional): start an alltoallv in request slot `slot` (0..63); the
     * count and displacement arrays must stay valid until wait(slot) returns. progress() lets
     * every started exchange advance without blocking. */
    int (*ialltoallv)(struct mp_comm *c, const void *send, const int *scount, const int *sdispl,
                      void *recv, const int *rcount, const int *rdispl, size_t row_bytes, int slot);
    int (*wait)(struct mp_comm *c, int slot);
    void (*progress)(struct mp_comm *c);
    /* optional: wait until the device work this rank queued (its collectives included) is done,
     * watching the communicators for errors while waiting; backends without it use the compute
     * backend's sync */
    int (*drain)(struct mp_comm *c);
    /* TP group: in-place sum of n fp32 (cpu) or elem-typed (device) values */
    int (*allreduce_sum)(struct mp_comm *c, void *buf, size_t n);
    /* optional: what follows on the compute stream waits for the latest exchange started with
     * ialltoallv (the order allreduce_sum keeps by itself on backends whose exchanges run beside the
     * compute stream), so a layer can time that wait apart from the reduce; absent where
     * allreduce_sum waits for no exchange */
    int (*join_exchanges)(struct mp_comm *c);
    /* world */
    int (*barrier)(struct mp_comm *c);
    /* optional, world: after the barrier, line the ranks' device timelines up on one another with a
     * one-element allreduce queued on the compute stream (nccl), so the marks after it start
     * together; absent where the barrier already does (host backends) */
    int (*align)(struct mp_comm *c);

    /* host-side world collectives on plain memory, for results and checks */
    int (*gather)(struct mp_comm *c, const void *send, size_t bytes, void *recv_root);
    int (*gatherv)(struct mp_comm *c, const void *send, size_t bytes, void *recv_root,
                   const size_t *bytes_of);
    int (*bcast)(struct mp_comm *c, void *buf, size_t bytes);
    /* max of a double over the world (to every rank) */
    int (*max_double)(struct mp_comm *c, double *v);

    /* optional: the compute backend's device stream and element size, for backends whose
     * collectives run on the device (nccl); called once after the compute backend starts */
    int (*bind_device)(struct mp_comm *c, void *stream, size_t elem_size);
};

/* The backends built into this binary, NULL-terminated, in the order of meson.build's list
 * (config.h's MP_COMM_BACKENDS, which declares each as mp_comm_NAME). */
extern const struct mp_comm_ops *const mp_comm_backends[];
#define MP_BUILT(n) extern const struct mp_comm_ops mp_comm_##n;
#define MP_ABSENT(n, hint)
MP_COMM_BACKENDS
#undef MP_BUILT
#undef MP_ABSENT
/* The names --comm accepts, NULL-terminated: every backend of the source tree, the ones this
 * binary was configured without included (looking one up says what builds it). */
extern const char *const mp_comm_choices[];

/* Collective over the world: whether every rank passed ok != 0 (one max_double). A refusal that
 * depends on a rank's own state (its free memory) goes through it, so every rank leaves together
 * instead of some waiting in the next collective. 1: all ok; 0: some rank not ok; < 0: the
 * exchange failed (−status). */
int mp_comm_agree(struct mp_comm *c, int ok);

/* Find a backend by name and check its table (mp_comm_check). MP_OK with *out set; MP_ERR_USAGE
 * (a message naming --comm and the built ones, or what builds a known backend left out of this
 * build); MP_ERR_RUNTIME for a table that fails its check (an internal error). */
int mp_comm_find(const char *name, const struct mp_comm_ops **out);

/* Whether a table is complete and its capability data agree with its hooks: 1, or 0 with the first
 * fault described in why[len]. */
int mp_comm_check(const struct mp_comm_ops *ops, char *why, size_t len);

/* The names of the built backends that satisfy `has` ("nccl", "mpi|model"), or "none", for messages
 * that say which backend would accept a request. */
const char *mp_comm_names_where(int (*has)(const struct mp_comm_ops *ops), char *buf, size_t len);

#endif
