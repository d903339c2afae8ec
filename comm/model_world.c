/* model_world.c - the model's world of virtual ranks that run the layer's own stages: one fiber
 * per rank on the calling thread, whose collectives meet in shared memory and move the host bytes
 * they are given between the ranks' buffers, as an MPI library would (docs/ARCHITECTURE.md, "The
 * model", traced ranks). */
#include <stdint.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "comm.h"
#include "error.h"
#include "fiber.h"
#include "vtime.h"

#define FIBER_STACK ((size_t)8 << 20) /* a rank's stack, a thread's default; mapped, not reserved */
#define FIBER_GUARD ((size_t)4096)   /* an inaccessible page below it: an overflow faults */

/* What a rank brings to a collective: its arguments, read by the rank that arrives last. */
struct vcall {
    const void *send;
    void *recv;
    const int *scount, *sdispl, *rcount, *rdispl;
    size_t bytes; /* alltoallv: one row's; alltoall_int: ints per peer; gather, bcast: the bytes */
    double *value;
    int slot; /* a started exchange's request slot; −1 blocking */
};

/* One group's meeting place: who has arrived at its current collective and what they brought. */
struct meet {
    int arrived;
    unsigned long gen; /* collectives completed on this group */
    struct vcall **calls; /* [group size] by group rank */
    double net_free;      /* virtual time: when the group's started exchanges are through */
};

/* A virtual rank's fiber: its context and stack (a guard page below it), and what it waits for
 * while parked in a meeting (its group's meeting to move past generation wait_gen). */
struct fiber {
    struct mp_fiber_context ctx;
    char *map; /* the mapping: guard page, then the stack */
    int done;
    const struct meet *wait;
    unsigned long wait_gen;
};

enum { KIND_TP = MP_GROUP_COUNT, KIND_WORLD, KINDS };

struct mp_vworld {
    int n, gpn;
    int failed; /* a rank left with an error: every meeting fails from now on */
    struct mp_comm **ranks;
    struct meet *meets; /* [KINDS · n]: a group's at its kind and its first member's world rank */
    int *rows_to;       /* [n·n] the exchange shown to the watcher, by EP rank */
    void (*watch)(void *arg, const struct mp_vworld_exchange *x);
    void *watch_arg;
    struct mp_vtime *time; /* [n] each rank's virtual time */
    double (*cost)(void *arg, const struct mp_vworld_exchange *x);
    void *cost_arg;
    int nodata; /* exchanges check their counts and move no bytes (mp_vworld_nodata) */
    /* mp_vworld_run's fibers and scheduler: the rank running now, each rank's entry */
    struct fiber *fib; /* [n], stacks mapped on the first run */
    struct mp_fiber_context sched;
    int cur;
    int (*fn)(struct mp_comm *c, void *arg);
    void *const *args;
    int *rc; /* [n] each rank's status */
#if MP_FIBER_ASAN
    const void *sched_bottom;
    size_t sched_size;
#endif
};

struct rank_state {
    struct mp_vworld *w;
    double slot_end[MP_COMM_SLOTS]; /* virtual time: when each started exchange is through */
};

static struct mp_vworld *world_of(struct mp_comm *c) { return ((struct rank_state *)c->priv)->w; }

/* The world ranks of group `kind` as rank c sees it, into `who` (at most c->size); its size. */
static int members(const struct mp_comm *c, int kind, int *who)
{
    if (kind == KIND_WORLD) {
        for (int r = 0; r < c->size; r++)
            who[r] = r;
        return c->size;
    }
    if (kind == KIND_TP) {
        for (int t = 0; t < c->tp; t++)
            who[t] = c->ep_rank * c->tp + t;
        return c->tp;
    }
    int n = c->group_size[kind];
    for (int i = 0; i < n; i++)
        who[i] = c->members[kind][i] * c->tp + c->tp_rank;
    return n;
}

/* Carry out the collective `op` of the n calls of group `who` (by group rank). */
enum op { OP_BARRIER, OP_MAX, OP_GATHER, OP_BCAST, OP_INTS, OP_ROWS, OP_REDUCE };

static int perform(struct mp_vworld *w, struct mp_comm *c, int kind, enum op op,
                   struct vcall **calls, const int *who, int n)
{
    switch (op) {
    case OP_BARRIER:
    case OP_REDUCE: /* the rows are the model compute's, which holds no values to sum */
        return MP_OK;
    case OP_MAX: {
        double m = *calls[0]->value;
        for (int i = 1; i < n; i++)
            m = *calls[i]->value > m ? *calls[i]->value : m;
        for (int i = 0; i < n; i++)
            *calls[i]->value = m;
        return MP_OK;
    }
    case OP_GATHER:
        for (int i = 0; i < n; i++)
            memcpy((char *)calls[0]->recv + (size_t)i * calls[i]->bytes, calls[i]->send,
                   calls[i]->bytes);
        return MP_OK;
    case OP_BCAST:
        for (int i = 1; i < n; i++)
            memcpy(calls[i]->recv, calls[0]->send, calls[0]->bytes);
        return MP_OK;
    case OP_INTS:
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                memcpy((int *)calls[j]->recv + (size_t)i * calls[j]->bytes,
                       (const int *)calls[i]->send + (size_t)j * calls[i]->bytes,
                       calls[i]->bytes * sizeof(int));
        break;
    case OP_ROWS:
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                int rows = calls[i]->scount[j];
                if (rows != calls[j]->rcount[i]) {
                    mp_error("internal error: virtual rank %d sends %d rows to rank %d, which "
                             "expects %d", who[i], rows, who[j], calls[j]->rcount[i]);
                    return MP_ERR_RUNTIME;
                }
                if (rows > 0 && !w->nodata)
                    memcpy((char *)calls[j]->recv + (size_t)calls[j]->rdispl[i] * calls[j]->bytes,
                           (const char *)calls[i]->send +
                               (size_t)calls[i]->sdispl[j] * calls[i]->bytes,
                           (size_t)rows * calls[i]->bytes);
            }
        break;
    }
    return MP_OK;
}

/* The exchange as the watcher and the cost see it, by EP rank (group rank i is EP rank
 * who[i] / tp): rows from each to each, or for a count exchange the counts summed per peer. */
static void describe(struct mp_vworld *w, const struct mp_comm *c, int kind, enum op op,
                     struct vcall **calls, const int *who, int n, struct mp_vworld_exchange *x)
{
    int ep = c->ep, tp = c->tp;
    *x = (struct mp_vworld_exchange){.group = (enum mp_comm_group)kind, .tp_rank = c->tp_rank,
                                     .ep = ep, .rows_to = w->rows_to,
                                     .row_bytes = op == OP_ROWS ? calls[0]->bytes : 0,
                                     .counts = op == OP_INTS, .slot = calls[0]->slot,
                                     .members = who, .nmembers = n,
                                     .reduce = op == OP_REDUCE,
                                     .elems = op == OP_REDUCE ? calls[0]->bytes : 0};
    if (op == OP_REDUCE)
        return;
    memset(w->rows_to, 0, (size_t)ep * ep * sizeof *w->rows_to);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            long sum = 0;
            if (op == OP_ROWS)
                sum = calls[i]->scount[j];
            for (size_t q = 0; op == OP_INTS && q < calls[i]->bytes; q++)
                sum += ((const int *)calls[i]->send)[(size_t)j * calls[i]->bytes + q];
            w->rows_to[(size_t)(who[i] / tp) * ep + who[j] / tp] = (int)sum;
        }
}

/* The virtual time of a meeting: it starts when its last member arrives and, for an exchange
 * started in a slot, when the group's earlier started exchanges are through (one network, first
 * come first served); an exchange `x` takes what the cost says (other collectives, x NULL,
 * nothing). A blocking collective sets every member's clock to its end; a started one records
 * its end for the members' wait. */
static void time_meeting(struct mp_vworld *w, struct meet *m, const struct mp_vworld_exchange *x,
                         enum op op, int slot, const int *who, int n)
{
    double start = 0, dur = 0;
    for (int i = 0; i < n; i++)
        start = w->time[who[i]].clock > start ? w->time[who[i]].clock : start;
    if (x) /* an exchange of a timed world */
        dur = w->cost(w->cost_arg, x);
    if (op == OP_ROWS && slot >= 0) {
        start = m->net_free > start ? m->net_free : start;
        m->net_free = start + dur;
        for (int i = 0; i < n; i++)
            ((struct rank_state *)w->ranks[who[i]]->priv)->slot_end[slot] = start + dur;
        return;
    }
    if (op == OP_BARRIER && n == w->n) { /* everything is through: count from here again */
        for (int i = 0; i < n; i++) {
            struct rank_state *s = w->ranks[who[i]]->priv;
            struct mp_vtime *t = &w->time[who[i]];
            t->origin += start;
            t->shift = start;
            t->clock = 0;
            t->epoch++;
            memset(s->slot_end, 0, sizeof s->slot_end);
        }
        for (int i = 0; i < KINDS * w->n; i++)
            w->meets[i].net_free = 0;
        return;
    }
    for (int i = 0; i < n; i++)
        w->time[who[i]].clock = start + dur;
}

/* Every meeting fails from now on, and its waiters leave. */
static void fail_all(struct mp_vworld *w) { w->failed = 1; }

static void park(struct mp_vworld *w, const struct meet *m, unsigned long gen);

/* Rank c's part in collective `op` on group `kind`: wait until every member has brought its call;
 * the last to arrive carries it out for all. */
static int meet(struct mp_comm *c, int kind, enum op op, struct vcall *call)
{
    struct mp_vworld *w = world_of(c);
    int who[c->size > 0 ? c->size : 1];
    int n = members(c, kind, who), me = -1;
    for (int i = 0; i < n; i++)
        me = who[i] == c->rank ? i : me;
    if (me < 0) {
        mp_error("internal error: virtual rank %d is not in its own group", c->rank);
        return MP_ERR_RUNTIME;
    }
    struct meet *m = &w->meets[(size_t)kind * w->n + who[0]];
    int rc = MP_OK;
    if (w->failed) {
        rc = MP_ERR_RUNTIME;
    } else if (m->calls[me]) {
        mp_error("internal error: virtual rank %d met its group twice at once", c->rank);
        rc = MP_ERR_RUNTIME;
    } else {
        unsigned long gen = m->gen;
        m->calls[me] = call;
        if (++m->arrived == n) {
            rc = perform(w, c, kind, op, m->calls, who, n);
            /* an exchange is shown to the watcher and priced; every meeting is timed */
            int exchange = op == OP_INTS || op == OP_ROWS || op == OP_REDUCE;
            struct mp_vworld_exchange x;
            if (rc == MP_OK && exchange && (w->watch || w->cost))
                describe(w, c, kind, op, m->calls, who, n, &x);
            if (rc == MP_OK && w->watch && (op == OP_INTS || op == OP_ROWS))
                w->watch(w->watch_arg, &x);
            if (rc == MP_OK)
                time_meeting(w, m, exchange && w->cost ? &x : NULL, op, m->calls[0]->slot, who,
                             n);
            for (int i = 0; i < n; i++)
                m->calls[i] = NULL;
            m->arrived = 0;
            m->gen++;
            if (rc != MP_OK)
                fail_all(w);
        } else {
            while (m->gen == gen && !w->failed)
                park(w, m, gen);
            rc = m->gen == gen ? MP_ERR_RUNTIME : MP_OK; /* left because another rank failed */
        }
    }
    return rc;
}

static int rank_init(struct mp_comm **out, int *argc, char ***argv, const struct mp_comm_params *p)
{
    (void)out;
    (void)argc;
    (void)argv;
    (void)p;
    mp_error("internal error: virtual ranks are made by mp_vworld_create, not --comm");
    return MP_ERR_RUNTIME;
}

static void rank_fini(struct mp_comm *c) { (void)c; /* mp_vworld_free frees the ranks */ }
static const char *rank_version(struct mp_comm *c) { return "cluster model, traced ranks"; }

static int rank_split(struct mp_comm *c, int tp, int ep)
{
    if (tp < 1 || ep < 1 || tp * ep != c->size) {
        mp_usage("--layout: tp%dep%d needs %d ranks, the world has %d", tp, ep, tp * ep, c->size);
        return MP_ERR_USAGE;
    }
    c->tp = tp;
    c->ep = ep;
    c->ep_rank = c->rank / tp;
    c->tp_rank = c->rank % tp;
    return mp_comm_node_groups(c);
}

static int group_usable(const struct mp_comm *c, enum mp_comm_group g)
{
    if (g == MP_GROUP_EP || c->node_groups)
        return MP_OK;
    mp_error("internal error: the %s group named while the node groups are absent",
             mp_comm_group_names[g]);
    return MP_ERR_RUNTIME;
}

static int rank_alltoall_int_group(struct mp_comm *c, enum mp_comm_group g, const int *send,
                                   int *recv, int n)
{
    int rc = group_usable(c, g);
    struct vcall call = {.send = send, .recv = recv, .bytes = (size_t)n, .slot = -1};
    return rc != MP_OK ? rc : meet(c, g, OP_INTS, &call);
}

static int rank_alltoall_int(struct mp_comm *c, const int *send, int *recv, int n)
{
    return rank_alltoall_int_group(c, MP_GROUP_EP, send, recv, n);
}

/* Rows on group g, blocking (slot −1) or started in `slot`. */
static int rows_exchange(struct mp_comm *c, enum mp_comm_group g, const void *send,
                         const int *scount, const int *sdispl, void *recv, const int *rcount,
                         const int *rdispl, size_t row_bytes, int slot)
{
    int rc = group_usable(c, g);
    struct vcall call = {.send = send, .recv = recv, .scount = scount, .sdispl = sdispl,
                         .rcount = rcount, .rdispl = rdispl, .bytes = row_bytes, .slot = slot};
    if (rc == MP_OK)
        c->group_exchanges[g]++;
    return rc != MP_OK ? rc : meet(c, g, OP_ROWS, &call);
}

static int rank_alltoallv_group(struct mp_comm *c, enum mp_comm_group g, const void *send,
                                const int *scount, const int *sdispl, void *recv,
                                const int *rcount, const int *rdispl, size_t row_bytes)
{
    return rows_exchange(c, g, send, scount, sdispl, recv, rcount, rdispl, row_bytes, -1);
}

static int rank_alltoallv(struct mp_comm *c, const void *send, const int *scount,
                          const int *sdispl, void *recv, const int *rcount, const int *rdispl,
                          size_t row_bytes)
{
    return rank_alltoallv_group(c, MP_GROUP_EP, send, scount, sdispl, recv, rcount, rdispl,
                                row_bytes);
}

/* Started is done: every rank starts its exchanges in the same order (as MPI's non-blocking
 * collectives must be), so meeting at the start cannot deadlock, and the model compute's work
 * between start and wait takes no time to overlap. */
static int rank_ialltoallv_group(struct mp_comm *c, enum mp_comm_group g, const void *send,
                                 const int *scount, const int *sdispl, void *recv,
                                 const int *rcount, const int *rdispl, size_t row_bytes, int slot)
{
    if (slot < 0 || slot >= MP_COMM_SLOTS) {
        mp_error("internal error: request slot %d outside 0..%d", slot, MP_COMM_SLOTS - 1);
        return MP_ERR_RUNTIME;
    }
    return rows_exchange(c, g, send, scount, sdispl, recv, rcount, rdispl, row_bytes, slot);
}

static int rank_ialltoallv(struct mp_comm *c, const void *send, const int *scount,
                           const int *sdispl, void *recv, const int *rcount, const int *rdispl,
                           size_t row_bytes, int slot)
{
    return rank_ialltoallv_group(c, MP_GROUP_EP, send, scount, sdispl, recv, rcount, rdispl,
                                 row_bytes, slot);
}

static int rank_wait(struct mp_comm *c, int slot)
{
    if (slot < 0 || slot >= MP_COMM_SLOTS)
        return MP_ERR_RUNTIME;
    struct mp_vworld *w = world_of(c);
    double end = ((struct rank_state *)c->priv)->slot_end[slot];
    if (end > w->time[c->rank].clock)
        w->time[c->rank].clock = end;
    return MP_OK;
}

static void rank_progress(struct mp_comm *c) { (void)c; }

static int rank_allreduce_sum(struct mp_comm *c, void *buf, size_t n)
{
    struct vcall call = {.recv = buf, .bytes = n, .slot = -1};
    return meet(c, KIND_TP, OP_REDUCE, &call);
}

static int rank_barrier(struct mp_comm *c)
{
    struct vcall call = {.slot = -1};
    return meet(c, KIND_WORLD, OP_BARRIER, &call);
}

static int rank_gather(struct mp_comm *c, const void *send, size_t bytes, void *recv_root)
{
    struct vcall call = {.send = send, .recv = recv_root, .bytes = bytes, .slot = -1};
    return meet(c, KIND_WORLD, OP_GATHER, &call);
}

static int rank_gatherv(struct mp_comm *c, const void *send, size_t bytes, void *recv_root,
                        const size_t *bytes_of)
{
    (void)send;
    (void)bytes;
    (void)recv_root;
    (void)bytes_of;
    mp_error("internal error: traced virtual ranks gather no outputs (--check is refused)");
    return MP_ERR_RUNTIME;
}

static int rank_bcast(struct mp_comm *c, void *buf, size_t bytes)
{
    struct vcall call = {.send = buf, .recv = buf, .bytes = bytes, .slot = -1};
    return meet(c, KIND_WORLD, OP_BCAST, &call);
}

static int rank_max_double(struct mp_comm *c, double *v)
{
    struct vcall call = {.value = v, .slot = -1};
    return meet(c, KIND_WORLD, OP_MAX, &call);
}

const struct mp_comm_ops mp_comm_model_rank = {
    .name = "model-rank",
    .memory = MP_MEMORY_HOST, /* moves the host bytes it is given between the ranks' threads */
    .max_row_bytes = SIZE_MAX,
    .init = rank_init,
    .fini = rank_fini,
    .version = rank_version,
    .split = rank_split,
    .alltoall_int = rank_alltoall_int,
    .alltoall_int_group = rank_alltoall_int_group,
    .alltoallv = rank_alltoallv,
    .alltoallv_group = rank_alltoallv_group,
    .ialltoallv = rank_ialltoallv,
    .ialltoallv_group = rank_ialltoallv_group,
    .wait = rank_wait,
    .progress = rank_progress,
    .allreduce_sum = rank_allreduce_sum,
    .barrier = rank_barrier,
    .gather = rank_gather,
    .gatherv = rank_gatherv,
    .bcast = rank_bcast,
    .max_double = rank_max_double,
};

void mp_vworld_free(struct mp_vworld *w)
{
    if (!w)
        return;
    for (int r = 0; r < w->n && w->ranks; r++) {
        struct mp_comm *c = w->ranks[r];
        if (!c)
            continue;
        mp_comm_free_node_groups(c);
        free(c->node_of);
        free(c->priv);
        free(c);
    }
    for (int i = 0; i < KINDS * w->n && w->meets; i++)
        free(w->meets[i].calls);
    for (int r = 0; r < w->n && w->fib; r++)
        if (w->fib[r].map)
            munmap(w->fib[r].map, FIBER_GUARD + FIBER_STACK);
    free(w->fib);
    free(w->rc);
    free(w->meets);
    free(w->ranks);
    free(w->rows_to);
    free(w->time);
    free(w);
}

int mp_vworld_create(struct mp_vworld **out, int world, int gpus_per_node)
{
    if (world < 1 || gpus_per_node < 1) {
        mp_error("internal error: a world of %d virtual ranks, %d to a node", world, gpus_per_node);
        return MP_ERR_RUNTIME;
    }
    struct mp_vworld *w = calloc(1, sizeof *w);
    if (!w)
        goto oom;
    w->n = world;
    w->gpn = gpus_per_node;
#ifdef __GLIBC__
    /* The ranks' row buffers, sized for the worst routing and mostly untouched, are mapped apart
     * (glibc's first threshold, kept there: it would otherwise rise to the largest block freed)
     * and unmapped when freed. On one thread's heap they left it in pieces that the next point's
     * sizes did not fit: a 31-point sweep of 144 ranks held 4.5 GB, not 0.5 GB. Process-wide. */
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
#endif
    w->ranks = calloc((size_t)world, sizeof *w->ranks);
    w->meets = calloc((size_t)KINDS * world, sizeof *w->meets);
    w->rows_to = malloc((size_t)world * world * sizeof *w->rows_to);
    w->time = calloc((size_t)world, sizeof *w->time);
    w->fib = calloc((size_t)world, sizeof *w->fib);
    w->rc = calloc((size_t)world, sizeof *w->rc);
    if (!w->ranks || !w->meets || !w->rows_to || !w->time || !w->fib || !w->rc)
        goto oom;
    for (int i = 0; i < KINDS * world; i++)
        if (!(w->meets[i].calls = calloc((size_t)world, sizeof *w->meets[i].calls)))
            goto oom;
    for (int r = 0; r < world; r++) {
        struct mp_comm *c = calloc(1, sizeof *c);
        struct rank_state *s = calloc(1, sizeof *s);
        w->ranks[r] = c;
        if (c)
            c->priv = s;
        if (!c || !s || !(c->node_of = malloc((size_t)world * sizeof *c->node_of)))
            goto oom;
        s->w = w;
        c->ops = &mp_comm_model_rank;
        c->rank = r;
        c->size = world;
        c->local_rank = 0;
        c->local_size = 1; /* one process: the memory guard counts it once */
        for (int q = 0; q < world; q++)
            c->node_of[q] = q / gpus_per_node;
        c->nnodes = (world + gpus_per_node - 1) / gpus_per_node;
    }
    *out = w;
    return MP_OK;
oom:
    mp_vworld_free(w);
    mp_error("out of memory for a world of %d virtual ranks", world);
    return MP_ERR_RUNTIME;
}

struct mp_comm *mp_vworld_rank(struct mp_vworld *w, int r) { return w->ranks[r]; }

void mp_vworld_watch(struct mp_vworld *w, void (*fn)(void *arg, const struct mp_vworld_exchange *x),
                     void *arg)
{
    w->watch = fn;
    w->watch_arg = arg;
}

struct mp_vtime *mp_vworld_time_of(struct mp_vworld *w, int r) { return &w->time[r]; }

void mp_vworld_nodata(struct mp_vworld *w) { w->nodata = 1; }

void mp_vworld_time(struct mp_vworld *w,
                    double (*cost)(void *arg, const struct mp_vworld_exchange *x), void *arg)
{
    w->cost = cost;
    w->cost_arg = arg;
}

/* The fibers: each rank runs fn on a stack of its own and gives the thread back (park) when it
 * waits in a meeting; the scheduler resumes, in rank order, every rank whose meeting has moved on,
 * until all have returned. A switch saves and restores the registers alone (base/fiber.h): no
 * thread, no lock, no system call. */
static _Thread_local struct mp_vworld *running; /* the world whose fibers this thread runs */

/* Switch from the running fiber (or the scheduler) `from` to `to`, whose stack is [bottom, +size)
 * (NULL for the scheduler's: the one AddressSanitizer recorded when it left it). */
static void switch_to(struct mp_vworld *w, struct mp_fiber_context *from,
                      struct mp_fiber_context *to, const void *bottom, size_t size, int ending)
{
#if MP_FIBER_ASAN
    void *fake = NULL;
    if (!bottom) {
        bottom = w->sched_bottom;
        size = w->sched_size;
    }
    __sanitizer_start_switch_fiber(ending ? NULL : &fake, bottom, size);
#else
    (void)w;
    (void)bottom;
    (void)size;
    (void)ending;
#endif
    mp_fiber_switch(from, to);
#if MP_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake, &w->sched_bottom, &w->sched_size);
#endif
}

/* A fiber's entry: the rank's run, then back to the scheduler for good. */
static void fiber_main(void)
{
    struct mp_vworld *w = running;
    int r = w->cur;
#if MP_FIBER_ASAN
    __sanitizer_finish_switch_fiber(NULL, &w->sched_bottom, &w->sched_size);
#endif
    w->rc[r] = w->fn(w->ranks[r], w->args[r]);
    if (w->rc[r] != MP_OK) /* the others leave their meetings instead of waiting for this rank */
        fail_all(w);
    w->fib[r].done = 1;
    switch_to(w, &w->fib[r].ctx, &w->sched, NULL, 0, 1);
}

/* The running rank waits for meeting m to move past generation gen: back to the scheduler. */
static void park(struct mp_vworld *w, const struct meet *m, unsigned long gen)
{
    struct fiber *f = &w->fib[w->cur];
    f->wait = m;
    f->wait_gen = gen;
    switch_to(w, &f->ctx, &w->sched, NULL, 0, 0);
}

/* Map rank r's stack (once per world) and make its context start at fiber_main. */
static int make_fiber(struct mp_vworld *w, int r)
{
    struct fiber *f = &w->fib[r];
    if (!f->map) {
        void *map = mmap(NULL, FIBER_GUARD + FIBER_STACK, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (map == MAP_FAILED)
            return -1;
        if (mprotect(map, FIBER_GUARD, PROT_NONE) != 0) {
            munmap(map, FIBER_GUARD + FIBER_STACK);
            return -1;
        }
        f->map = map;
    }
    mp_fiber_make(&f->ctx, f->map + FIBER_GUARD, FIBER_STACK, fiber_main);
    f->done = 0;
    f->wait = NULL;
    return 0;
}

int mp_vworld_run(struct mp_vworld *w, int (*fn)(struct mp_comm *c, void *arg), void *const *args)
{
    for (int r = 0; r < w->n; r++)
        if (make_fiber(w, r) != 0) {
            mp_error("cannot make the stack of virtual rank %d (%d ranks of %zu KiB)", r, w->n,
                     (size_t)FIBER_STACK >> 10);
            return MP_ERR_RUNTIME;
        }
    struct mp_vworld *outer = running;
    running = w;
    w->failed = 0;
    w->fn = fn;
    w->args = args;
    int rc = MP_OK;
    for (int live = w->n; live > 0;) {
        int resumed = 0;
        live = 0;
        for (int r = 0; r < w->n; r++) {
            struct fiber *f = &w->fib[r];
            if (f->done)
                continue;
            if (f->wait && f->wait->gen == f->wait_gen && !w->failed) {
                live++;
                continue;
            }
            w->cur = r;
            f->wait = NULL;
            switch_to(w, &w->sched, &f->ctx, f->map + FIBER_GUARD, FIBER_STACK, 0);
            resumed++;
            live += !f->done;
        }
        if (live > 0 && resumed == 0) { /* every rank waits for another: collectives misnested */
            mp_error("internal error: the %d virtual ranks left wait for each other", live);
            fail_all(w);
        }
    }
    running = outer;
    for (int r = 0; r < w->n; r++)
        if (rc == MP_OK && w->rc[r] != MP_OK)
            rc = w->rc[r];
    /* a failed run leaves meetings half attended: clear them for the next run */
    for (int i = 0; i < KINDS * w->n; i++) {
        w->meets[i].arrived = 0;
        memset(w->meets[i].calls, 0, (size_t)w->n * sizeof *w->meets[i].calls);
    }
    return rc;
}
