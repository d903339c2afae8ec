/* mpi.c - the mpi communication backend: host buffers, MPI_Alltoallv for dispatch and combine,
 * MPI_Allreduce in the TP group, communicators split per layout (the EP group's intra- and
 * inter-node groups split from it where the nodes hold equal numbers of EP ranks). */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "comm.h"
#include "error.h"

#define NSLOTS 64

struct mpi_state {
    MPI_Comm ep_comm, tp_comm;
    MPI_Comm node_comm[MP_GROUP_COUNT]; /* [EP]: ep_comm; the intra- and inter-node groups */
    MPI_Request req[NSLOTS];
    /* the contiguous row types of the last two row sizes (a layer alternates its dispatch rows,
     * --dispatch-dtype fp8's packed ones, with its combine rows), the older one replaced first */
    MPI_Datatype row_type[2];
    size_t row_type_bytes[2];
    int row_type_next;
    int we_initialized;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
};

static struct mpi_state *st(struct mp_comm *c) { return c->priv; }

/* Report an MPI error with its text. */
static int mpi_fail(const char *what, int err)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    mp_error("%s failed: %s", what, msg);
    return MP_ERR_RUNTIME;
}

#define MPICHECK(call)                                                                             \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS)                                                                \
            return mpi_fail(#call, mpi_rc_);                                                       \
    } while (0)

/* Node index of every rank: ranks sharing memory form a node, numbered by their lowest rank. */
static int find_nodes(struct mp_comm *c)
{
    MPI_Comm local;
    MPICHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local));
    MPI_Comm_rank(local, &c->local_rank);
    MPI_Comm_size(local, &c->local_size);
    int leader = c->rank;
    MPI_Bcast(&leader, 1, MPI_INT, 0, local);
    MPI_Comm_free(&local);
    int *leaders = malloc((size_t)c->size * sizeof *leaders);
    c->node_of = malloc((size_t)c->size * sizeof *c->node_of);
    if (!leaders || !c->node_of) {
        free(leaders);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    MPICHECK(MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, MPI_COMM_WORLD));
    c->nnodes = 0;
    for (int r = 0; r < c->size; r++) {
        if (leaders[r] == r)
            c->nnodes++;
        int idx = 0; /* number of distinct leaders below this rank's leader */
        for (int q = 0; q < leaders[r]; q++)
            idx += leaders[q] == q;
        c->node_of[r] = idx;
    }
    free(leaders);
    return MP_OK;
}

static int mpi_init(struct mp_comm **out, int *argc, char ***argv,
                    const struct mp_comm_params *params)
{
    struct mp_comm *c = calloc(1, sizeof *c);
    struct mpi_state *s = calloc(1, sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    c->ops = &mp_comm_mpi;
    c->priv = s;
    s->ep_comm = s->tp_comm = MPI_COMM_NULL;
    for (int g = 0; g < MP_GROUP_COUNT; g++)
        s->node_comm[g] = MPI_COMM_NULL;
    for (int i = 0; i < NSLOTS; i++)
        s->req[i] = MPI_REQUEST_NULL;
    s->row_type[0] = s->row_type[1] = MPI_DATATYPE_NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        MPI_Init(argc, argv);
        s->we_initialized = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    int len = 0;
    MPI_Get_library_version(s->version, &len);
    for (char *p = s->version; *p; p++) /* keep the first line, no trailing newline */
        if (*p == '\n' || *p == ',') {
            *p = '\0';
            break;
        }
    *out = c;
    return find_nodes(c);
}

static void free_groups(struct mpi_state *s)
{
    for (int g = MP_GROUP_EP_INTRA; g < MP_GROUP_COUNT; g++)
        if (s->node_comm[g] != MPI_COMM_NULL)
            MPI_Comm_free(&s->node_comm[g]);
    s->node_comm[MP_GROUP_EP] = MPI_COMM_NULL;
    if (s->ep_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->ep_comm);
    if (s->tp_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->tp_comm);
}

static void mpi_fini(struct mp_comm *c)
{
    if (!c)
        return;
    struct mpi_state *s = st(c);
    free_groups(s);
    mp_comm_free_node_groups(c);
    for (int i = 0; i < 2; i++)
        if (s->row_type[i] != MPI_DATATYPE_NULL)
            MPI_Type_free(&s->row_type[i]);
    if (s->we_initialized)
        MPI_Finalize();
    free(c->node_of);
    free(s);
    free(c);
}

static const char *mpi_version(struct mp_comm *c) { return st(c)->version; }

static int mpi_split(struct mp_comm *c, int tp, int ep)
{
    struct mpi_state *s = st(c);
    if (tp * ep != c->size) {
        mp_usage("--layout: tp%dep%d needs %d ranks, the world has %d", tp, ep, tp * ep, c->size);
        return MP_ERR_USAGE;
    }
    free_groups(s);
    c->tp = tp;
    c->ep = ep;
    c->ep_rank = c->rank / tp;
    c->tp_rank = c->rank % tp;
    MPICHECK(MPI_Comm_split(MPI_COMM_WORLD, c->tp_rank, c->ep_rank, &s->ep_comm));
    MPICHECK(MPI_Comm_split(MPI_COMM_WORLD, c->ep_rank, c->tp_rank, &s->tp_comm));
    MPI_Comm_set_errhandler(s->ep_comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(s->tp_comm, MPI_ERRORS_RETURN);
    s->node_comm[MP_GROUP_EP] = s->ep_comm;
    int rc = mp_comm_node_groups(c);
    if (rc != MP_OK || !c->node_groups)
        return rc;
    /* the EP group's node groups: colour by the node of the EP rank's first TP rank, and by its
     * index among its node's EP ranks (every rank of the world decides alike from node_of); keyed
     * by EP rank, so group ranks follow members[] */
    int inter_color = 0;
    for (int q = 0; q < c->ep_rank; q++)
        inter_color += c->node_of[q * tp] == c->node_of[c->ep_rank * tp];
    MPICHECK(MPI_Comm_split(s->ep_comm, c->node_of[c->ep_rank * tp], c->ep_rank,
                            &s->node_comm[MP_GROUP_EP_INTRA]));
    MPICHECK(MPI_Comm_split(s->ep_comm, inter_color, c->ep_rank, &s->node_comm[MP_GROUP_EP_INTER]));
    for (int g = MP_GROUP_EP_INTRA; g < MP_GROUP_COUNT; g++) {
        int size = 0, rank = 0;
        MPI_Comm_set_errhandler(s->node_comm[g], MPI_ERRORS_RETURN);
        MPI_Comm_size(s->node_comm[g], &size);
        MPI_Comm_rank(s->node_comm[g], &rank);
        if (size != c->group_size[g] || rank != c->group_rank[g]) {
            mp_error("internal error: the %s communicator has %d ranks (this one %d), the layout "
                     "says %d (%d)", mp_comm_group_names[g], size, rank, c->group_size[g],
                     c->group_rank[g]);
            return MP_ERR_RUNTIME;
        }
    }
    return MP_OK;
}

/* The communicator of group g, or NULL after a message when the layout has no such group. */
static MPI_Comm group_comm(struct mp_comm *c, enum mp_comm_group g)
{
    if (g < 0 || g >= MP_GROUP_COUNT || st(c)->node_comm[g] == MPI_COMM_NULL) {
        mp_error("internal error: an exchange on the %s group, which this layout lacks",
                 g >= 0 && g < MP_GROUP_COUNT ? mp_comm_group_names[g] : "unknown");
        return MPI_COMM_NULL;
    }
    return st(c)->node_comm[g];
}

/* Debug: stretch an exchange by a fixed delay, as a slower link would. */
static void inject_delay(struct mp_comm *c)
{
    if (c->inject_delay_us <= 0)
        return;
    double until = mp_now_us() + c->inject_delay_us;
    while (mp_now_us() < until)
        ;
}

static int mpi_alltoall_int_group(struct mp_comm *c, enum mp_comm_group g, const int *send,
                                  int *recv, int n)
{
    MPI_Comm comm = group_comm(c, g);
    if (comm == MPI_COMM_NULL)
        return MP_ERR_RUNTIME;
    c->group_exchanges[g]++;
    MPICHECK(MPI_Alltoall(send, n, MPI_INT, recv, n, MPI_INT, comm));
    return MP_OK;
}

static int mpi_alltoall_int(struct mp_comm *c, const int *send, int *recv, int n)
{
    return mpi_alltoall_int_group(c, MP_GROUP_EP, send, recv, n);
}

/* The contiguous datatype of one row into *type, cached for the last two row sizes (a type freed
 * while an exchange in flight uses it stays valid for that exchange: MPI 4.0, section 5.1.10). */
static int row_type(struct mpi_state *s, size_t row_bytes, MPI_Datatype *type)
{
    for (int i = 0; i < 2; i++)
        if (s->row_type[i] != MPI_DATATYPE_NULL && s->row_type_bytes[i] == row_bytes) {
            *type = s->row_type[i];
            return MP_OK;
        }
    if (row_bytes > INT_MAX) {
        mp_error("row of %zu bytes is too large for one MPI datatype", row_bytes);
        return MP_ERR_RUNTIME;
    }
    int i = s->row_type_next;
    s->row_type_next = 1 - i;
    if (s->row_type[i] != MPI_DATATYPE_NULL)
        MPI_Type_free(&s->row_type[i]);
    MPICHECK(MPI_Type_contiguous((int)row_bytes, MPI_BYTE, &s->row_type[i]));
    MPICHECK(MPI_Type_commit(&s->row_type[i]));
    s->row_type_bytes[i] = row_bytes;
    *type = s->row_type[i];
    return MP_OK;
}

static int mpi_alltoallv_group(struct mp_comm *c, enum mp_comm_group g, const void *send,
                               const int *scount, const int *sdispl, void *recv, const int *rcount,
                               const int *rdispl, size_t row_bytes)
{
    struct mpi_state *s = st(c);
    MPI_Comm comm = group_comm(c, g);
    MPI_Datatype row;
    if (comm == MPI_COMM_NULL || row_type(s, row_bytes, &row) != MP_OK)
        return MP_ERR_RUNTIME;
    inject_delay(c);
    c->group_exchanges[g]++;
    MPICHECK(MPI_Alltoallv(send, scount, sdispl, row, recv, rcount, rdispl, row, comm));
    return MP_OK;
}

static int mpi_alltoallv(struct mp_comm *c, const void *send, const int *scount, const int *sdispl,
                         void *recv, const int *rcount, const int *rdispl, size_t row_bytes)
{
    return mpi_alltoallv_group(c, MP_GROUP_EP, send, scount, sdispl, recv, rcount, rdispl,
                               row_bytes);
}

static int mpi_ialltoallv_group(struct mp_comm *c, enum mp_comm_group g, const void *send,
                                const int *scount, const int *sdispl, void *recv,
                                const int *rcount, const int *rdispl, size_t row_bytes, int slot)
{
    struct mpi_state *s = st(c);
    if (slot < 0 || slot >= NSLOTS || s->req[slot] != MPI_REQUEST_NULL) {
        mp_error("request slot %d is out of range or busy", slot);
        return MP_ERR_RUNTIME;
    }
    MPI_Comm comm = group_comm(c, g);
    MPI_Datatype row;
    if (comm == MPI_COMM_NULL || row_type(s, row_bytes, &row) != MP_OK)
        return MP_ERR_RUNTIME;
    inject_delay(c);
    c->group_exchanges[g]++;
    MPICHECK(MPI_Ialltoallv(send, scount, sdispl, row, recv, rcount, rdispl, row, comm,
                            &s->req[slot]));
    return MP_OK;
}

static int mpi_ialltoallv(struct mp_comm *c, const void *send, const int *scount,
                          const int *sdispl, void *recv, const int *rcount, const int *rdispl,
                          size_t row_bytes, int slot)
{
    return mpi_ialltoallv_group(c, MP_GROUP_EP, send, scount, sdispl, recv, rcount, rdispl,
                                row_bytes, slot);
}

static int mpi_wait(struct mp_comm *c, int slot)
{
    MPICHECK(MPI_Wait(&st(c)->req[slot], MPI_STATUS_IGNORE));
    return MP_OK;
}

/* MPI advances non-blocking collectives only inside MPI calls: test every pending one. */
static void mpi_progress(struct mp_comm *c)
{
    struct mpi_state *s = st(c);
    for (int i = 0; i < NSLOTS; i++)
        if (s->req[i] != MPI_REQUEST_NULL) {
            int done = 0;
            MPI_Test(&s->req[i], &done, MPI_STATUS_IGNORE);
        }
}

static int mpi_allreduce_sum(struct mp_comm *c, void *buf, size_t n)
{
    float *p = buf;
    while (n > 0) { /* MPI counts are int: reduce in pieces */
        int piece = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        MPICHECK(MPI_Allreduce(MPI_IN_PLACE, p, piece, MPI_FLOAT, MPI_SUM, st(c)->tp_comm));
        p += piece;
        n -= (size_t)piece;
    }
    return MP_OK;
}

static int mpi_barrier(struct mp_comm *c)
{
    MPICHECK(MPI_Barrier(MPI_COMM_WORLD));
    return MP_OK;
}

static int mpi_gather(struct mp_comm *c, const void *send, size_t bytes, void *recv_root)
{
    if (bytes > INT_MAX) {
        mp_error("gather of %zu bytes per rank is too large", bytes);
        return MP_ERR_RUNTIME;
    }
    MPICHECK(MPI_Gather(send, (int)bytes, MPI_BYTE, recv_root, (int)bytes, MPI_BYTE, 0,
                        MPI_COMM_WORLD));
    return MP_OK;
}

static int mpi_gatherv(struct mp_comm *c, const void *send, size_t bytes, void *recv_root,
                       const size_t *bytes_of)
{
    int *counts = NULL, *displs = NULL;
    if (c->rank == 0) {
        counts = malloc((size_t)c->size * sizeof *counts);
        displs = malloc((size_t)c->size * sizeof *displs);
        if (!counts || !displs) {
            free(counts);
            free(displs);
            mp_error("out of memory");
            return MP_ERR_RUNTIME;
        }
        long long off = 0;
        for (int r = 0; r < c->size; r++) {
            counts[r] = (int)bytes_of[r];
            displs[r] = (int)off;
            off += (long long)bytes_of[r];
        }
        if (off > INT_MAX) {
            free(counts);
            free(displs);
            mp_error("gather of %lld bytes is too large", off);
            return MP_ERR_RUNTIME;
        }
    }
    int rc = MPI_Gatherv(send, (int)bytes, MPI_BYTE, recv_root, counts, displs, MPI_BYTE, 0,
                         MPI_COMM_WORLD);
    free(counts);
    free(displs);
    return rc == MPI_SUCCESS ? MP_OK : mpi_fail("MPI_Gatherv", rc);
}

static int mpi_bcast(struct mp_comm *c, void *buf, size_t bytes)
{
    MPICHECK(MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD));
    return MP_OK;
}

static int mpi_max_double(struct mp_comm *c, double *v)
{
    MPICHECK(MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return MP_OK;
}

const struct mp_comm_ops mp_comm_mpi = {
    .name = "mpi",
    .memory = MP_MEMORY_HOST,
    .max_row_bytes = INT_MAX, /* one MPI datatype counts its bytes in an int */
    .init = mpi_init,
    .fini = mpi_fini,
    .version = mpi_version,
    .split = mpi_split,
    .alltoall_int = mpi_alltoall_int,
    .alltoallv = mpi_alltoallv,
    .ialltoallv = mpi_ialltoallv,
    .alltoall_int_group = mpi_alltoall_int_group,
    .alltoallv_group = mpi_alltoallv_group,
    .ialltoallv_group = mpi_ialltoallv_group,
    .wait = mpi_wait,
    .progress = mpi_progress,
    .allreduce_sum = mpi_allreduce_sum,
    .barrier = mpi_barrier,
    .gather = mpi_gather,
    .gatherv = mpi_gatherv,
    .bcast = mpi_bcast,
    .max_double = mpi_max_double,
};
