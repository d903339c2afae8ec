/* comm.h - the communication backend ops table (mpi, nccl, model): the world, its split into
 * tp × ep groups, the dispatch/combine all-to-all, the TP allreduce, and host-side collectives. */
#ifndef MP_COMM_H
#define MP_COMM_H

#include <stddef.h>

#include "config.h"
#include "registry.h"

struct mp_comm_ops;

/* The groups a dispatch exchange can run on, all within this rank's EP group: the whole EP group;
 * the intra-node group (the EP ranks on this rank's node); the inter-node group (the EP ranks with
 * this rank's local index among the EP ranks of their node, one per node). An EP rank's node is
 * that of its first TP rank, node_of[ep_rank · tp] (core/layer/dedup.h's mp_dedup_node_of), so the TP
 * ranks of an EP rank agree. The two node groups exist only when every node holds the same number
 * of EP ranks (struct mp_comm's node_groups). */
enum mp_comm_group { MP_GROUP_EP, MP_GROUP_EP_INTRA, MP_GROUP_EP_INTER, MP_GROUP_COUNT };

/* The request slots of the non-blocking exchange (ialltoallv: 0..MP_COMM_SLOTS−1). */
#define MP_COMM_SLOTS 64

/* The groups' names, in enum order ("ep", "ep-intra-node", "ep-inter-node"). */
extern const char *const mp_comm_group_names[MP_GROUP_COUNT];

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
    /* the EP group's node sub-groups of the current layout (mp_comm_node_groups, from split()):
     * node_groups 1 when they exist, 0 when some node holds a different number of EP ranks (or
     * before a split); members[g] [group_size[g]]: the EP ranks of group g in group-rank order
     * (EP order), group_rank[g] this rank's place there; MP_GROUP_EP is the whole EP group */
    int node_groups;
    int group_size[MP_GROUP_COUNT], group_rank[MP_GROUP_COUNT];
    int *members[MP_GROUP_COUNT];
    /* debug (MOEPERF_TEST_GROUPS): the exchanges (counts and rows) run on each group */
    long group_exchanges[MP_GROUP_COUNT];
    int *group_scratch; /* [4·ep] the per-peer arrays of an exchange on a node group */
    int *slot_scratch;  /* [MP_COMM_SLOTS·4·ep] those of each non-blocking one, until its wait */
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
    /* make the tp × ep groups of a layout current; tp·ep must equal size. Also builds the EP
     * group's intra- and inter-node groups (mp_comm_node_groups) where every node holds the same
     * number of EP ranks, and frees the previous layout's */
    int (*split)(struct mp_comm *c, int tp, int ep);

    /* EP group: every rank sends n ints to every peer (count exchange) */
    int (*alltoall_int)(struct mp_comm *c, const int *send, int *recv, int n);
    /* The same three exchanges on group g (enum mp_comm_group): the per-peer arrays count
     * group_size[g] peers in group-rank order. A node group (MP_GROUP_EP_INTRA, _INTER) may be
     * named only while node_groups is 1 (else MP_ERR_RUNTIME with a message); MP_GROUP_EP is the
     * hooks above. ialltoallv_group belongs with ialltoallv (both or neither); its slots are shared
     * with it. Callers with arrays indexed by EP rank use mp_comm_alltoallv_on and its kin. */
    int (*alltoall_int_group)(struct mp_comm *c, enum mp_comm_group g, const int *send, int *recv,
                              int n);
    int (*alltoallv_group)(struct mp_comm *c, enum mp_comm_group g, const void *send,
                           const int *scount, const int *sdispl, void *recv, const int *rcount,
                           const int *rdispl, size_t row_bytes);
    int (*ialltoallv_group)(struct mp_comm *c, enum mp_comm_group g, const void *send,
                            const int *scount, const int *sdispl, void *recv, const int *rcount,
                            const int *rdispl, size_t row_bytes, int slot);
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
#define MP_COMM_DECLARE(n) extern const struct mp_comm_ops mp_comm_##n;
MP_COMM_BACKENDS(MP_COMM_DECLARE, MP_REGISTRY_SKIP_ABSENT)
#undef MP_COMM_DECLARE
/* The names --comm accepts, NULL-terminated: every backend of the source tree, the ones this
 * binary was configured without included (looking one up says what builds it). */
extern const char *const mp_comm_choices[];

/* The model's traced ranks (docs/ARCHITECTURE.md, "The model"): a world of `world` virtual
 * ranks packed gpus_per_node to a node, each a struct mp_comm of table mp_comm_model_rank, run
 * one fiber each on the calling thread by mp_vworld_run. Their collectives meet in shared memory
 * and move the host bytes they are given between the ranks' buffers (the TP allreduce sums
 * nothing: the rows belong to the model compute's ranks, which hold no values); a started exchange
 * moves its rows when it starts. Each rank also keeps a virtual clock (mp_vworld_time_of), which its collectives move when
 * the world is timed (mp_vworld_time): a collective starts when its last member arrives, an
 * exchange started in a slot also once the group's earlier ones are through, and lasts what the
 * cost gives; a blocking one sets its members' clocks to its end, wait() on a slot to at least
 * that exchange's end. */
struct mp_vworld;
extern const struct mp_comm_ops mp_comm_model_rank;

/* One completed exchange as a watcher sees it: on group `group` of the EP group of TP rank
 * tp_rank, whose members are the world ranks members[nmembers]; counts 1 for a count exchange
 * (alltoall_int), 0 for rows; rows_to [ep·ep] the rows EP rank e sent EP rank p at e·ep + p (0
 * outside the group; for a count exchange the counts summed per peer), each of row_bytes bytes;
 * slot the request slot it was started in (−1: blocking). Valid during the call only. */
struct mp_vworld_exchange {
    enum mp_comm_group group;
    int tp_rank, ep, counts, slot;
    const int *rows_to;
    size_t row_bytes;
    const int *members;
    int nmembers;
    int reduce;   /* a TP group's allreduce of `elems` elements (rows_to and row_bytes unset) */
    size_t elems;
};

struct mp_vtime;
/* Make the world (MP_OK, or MP_ERR_RUNTIME out of memory); free it with mp_vworld_free. */
int mp_vworld_create(struct mp_vworld **out, int world, int gpus_per_node);
void mp_vworld_free(struct mp_vworld *w);
/* Rank r's communicator (split it to a layout before its layer uses it). */
struct mp_comm *mp_vworld_rank(struct mp_vworld *w, int r);
/* Call fn for every exchange completed from now on, on the fiber of the rank that completed it,
 * one call at a time. */
void mp_vworld_watch(struct mp_vworld *w, void (*fn)(void *arg, const struct mp_vworld_exchange *x),
                     void *arg);
/* Rank r's virtual time (base/vtime.h), which its compute moves too (mp_compute_model_rank_clock);
 * a barrier of the whole world starts a new epoch of every rank's. */
struct mp_vtime *mp_vworld_time_of(struct mp_vworld *w, int r);
/* Time the world's collectives from now on: `cost` gives an exchange's (counts, rows or a TP
 * allreduce) duration [µs], on the fiber of the rank that arrives last; barriers and the
 * other collectives take none. */
void mp_vworld_time(struct mp_vworld *w,
                    double (*cost)(void *arg, const struct mp_vworld_exchange *x), void *arg);
/* From now on the world's exchanges of rows check their counts and move no bytes: ranks that
 * hold no buffers (timing alone). */
void mp_vworld_nodata(struct mp_vworld *w);
/* Run fn(rank r's communicator, args[r]) for every rank, each on a fiber of its own (an 8 MiB
 * stack) on the calling thread, switched when it waits in a collective; a rank that fails makes
 * the others' collectives fail rather than wait, and ranks that all wait for each other
 * (collectives called in different orders) fail likewise. The first failure's status (by rank). */
int mp_vworld_run(struct mp_vworld *w, int (*fn)(struct mp_comm *c, void *arg), void *const *args);

/* Collective over the world: whether every rank passed ok != 0 (one max_double). A refusal that
 * depends on a rank's own state (its free memory) goes through it, so every rank leaves together
 * instead of some waiting in the next collective. 1: all ok; 0: some rank not ok; < 0: the
 * exchange failed (−status). */
int mp_comm_agree(struct mp_comm *c, int ok);

/* For split(): the EP group's node groups of the layout in c (tp, ep, ep_rank, node_of set): fills
 * node_groups, group_size, group_rank, members (the previous layout's freed) and group_scratch.
 * Every rank of the world computes the same answer from node_of. MP_OK or MP_ERR_RUNTIME (out of
 * memory). */
int mp_comm_node_groups(struct mp_comm *c);

/* Free what mp_comm_node_groups allocated (fini); with MOEPERF_TEST_GROUPS set, first print on
 * stderr how many exchanges ran on each group and the groups' sizes in the last layout, when any
 * did (the test hook of tests/integration/dedup_nodes.sh and gpu_dedup_nodes.sh). */
void mp_comm_free_node_groups(struct mp_comm *c);

/* The phase group a caller asks for when the node groups are absent falls back to the whole EP
 * group: g itself when node_groups, else MP_GROUP_EP. */
enum mp_comm_group mp_comm_phase_group(const struct mp_comm *c, enum mp_comm_group g);

/* Exchanges on group mp_comm_phase_group(c, g) with per-peer arrays indexed by EP rank ([ep]; the
 * count exchange's send/recv [ep·n]): the group's members' entries are passed to the group hook,
 * the others must be 0 (MP_ERR_RUNTIME with a message otherwise: rows for a rank outside the
 * group); recv entries of non-members are set to 0. On MP_GROUP_EP they are the plain hooks. */
int mp_comm_alltoall_int_on(struct mp_comm *c, enum mp_comm_group g, const int *send, int *recv,
                            int n);
int mp_comm_alltoallv_on(struct mp_comm *c, enum mp_comm_group g, const void *send,
                         const int *scount, const int *sdispl, void *recv, const int *rcount,
                         const int *rdispl, size_t row_bytes);
/* The non-blocking form (ialltoallv, optional): the group's per-peer arrays are kept per slot
 * until the exchange's wait, so the caller's may change; on MP_GROUP_EP the caller's must stay
 * valid, as ialltoallv says. */
int mp_comm_ialltoallv_on(struct mp_comm *c, enum mp_comm_group g, const void *send,
                          const int *scount, const int *sdispl, void *recv, const int *rcount,
                          const int *rdispl, size_t row_bytes, int slot);

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
