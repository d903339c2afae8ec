/* session.h - what every benchmark binary does around its sweep: parse options, pick and start the
 * backends, resolve the model, prepare --out and run.json, and shut down with the right exit code. */
#ifndef MP_SESSION_H
#define MP_SESSION_H

#include "bench_opts.h"
#include "cluster.h"
#include "comm.h"
#include "compute.h"
#include "model.h"

struct cJSON;

/* The cluster profile of a model run without --cluster. */
#define MP_DEFAULT_CLUSTER "h100-ndr"

struct mp_session {
    const char *tool;
    struct mp_bench_opts o;
    const struct mp_opt *table;
    struct mp_model model;
    const struct mp_compute_ops *cops;
    struct mp_compute *dev;
    struct mp_comm *comm;
    struct cJSON *run; /* rank 0 only, when --out is set */
    int modelled;      /* --backend model --comm model: virtual ranks, durations from `cluster` */
    struct mp_cluster cluster;
    int cluster_default; /* the model's profile is MP_DEFAULT_CLUSTER: no --cluster given */
    int started_comm;
    int out_made; /* --out created and run.json begun (mp_session_make_out) */
    int out_replace; /* --force on a directory holding this tool's run: cleared when made */
    int agreed; /* set when every rank reached the same error (MPI can finalize cleanly) */
    int locked, lock_fd; /* rank 0: the run directory's writer lock held (runlock.h) */
};

/* Parse argv with `table`, start the comm and compute backends, resolve the model and check --out
 * (docs/CSV.md, "The run directory": new or empty, or this tool's run with --resume or --force);
 * it is made later (mp_session_make_out). Returns MP_OK, MP_HELP (exit 0), or an error status; on
 * error the message is printed and mp_session_end still must be called. */
int mp_session_start(struct mp_session *s, const char *tool, const struct mp_opt *table,
                     const char *summary, int argc, char **argv);

/* Rank 0 (other ranks: MP_OK, nothing done): create --out, with --force on an old run first
 * removing everything in it, and write its run.json begun, once. The result files call it before
 * their first row (mp_runfiles_write), so a command refused, or failing before it measured a
 * point, leaves no directory and an old run as it was; mp_session_end calls it for a run that
 * ended well without a row. MP_OK (also without --out), or an error after a message. */
int mp_session_make_out(struct mp_session *s);

/* Rank 0: write run.json as it stands (mp_session_note's additions) when --out is made; MP_OK
 * otherwise. */
int mp_session_save_run(struct mp_session *s);

/* The session of one of the model's virtual ranks (core/cluster_model/vrun.h) into *out: s's
 * options, model and profile with that rank's comm `c` and compute `dev` (of mp_compute_model);
 * run.json is rank 0's alone. Nothing is allocated: out lives as long as s, c and dev. */
void mp_session_virtual_rank(const struct mp_session *s, struct mp_comm *c,
                             struct mp_compute *dev, struct mp_session *out);

/* What a benchmark main asks of its ranks, the same on measured and on virtual ones. */

/* "backend B, comm C" for the console's first line, with ", cluster P" on the model (saying when
 * P is the default); written into buf[len], which is returned. */
const char *mp_session_backends(const struct mp_session *s, char *buf, size_t len);

/* The workload of the console's first line: "model NAME[ with --FLAG V ...] (H, D, E, top-K,
 * shared), N ranks on M node(s), " and mp_session_backends; a preset whose shape flags changed is
 * named with them (mp_model_overrides). Written into buf[len], which is returned. */
const char *mp_session_workload(const struct mp_session *s, char *buf, size_t len);

/* "model" when the session's ranks are the cluster model's virtual ones, "measured" otherwise:
 * the source column of every row. */
const char *mp_session_source(const struct mp_session *s);

/* Whether the run is priced by a cluster profile (the model backends): the columns that need one
 * (the whole decode step, memory per GPU, the roofline's peaks from the profile) are filled from
 * it. */
int mp_session_profiled(const struct mp_session *s);

/* Ranks per node as --dedup node groups them: the profile's gpus_per_node for virtual ranks, else
 * the ranks over the nodes the launcher placed them on. */
int mp_session_ranks_per_node(const struct mp_session *s);

/* Every --layout of the sweep for the session's world (mp_layouts_resolve), in a heap array. */
int mp_session_layouts(const struct mp_session *s, struct mp_layout **out, int *n);

/* The --timeout deadline: started (MP_OK, or MP_ERR_RUNTIME without its thread), armed for the
 * point `label` about to run, disarmed after it. Virtual ranks cannot hang: nothing to do. */
int mp_session_watch_start(const struct mp_session *s);
void mp_session_watch(const struct mp_session *s, const char *label);
void mp_session_unwatch(const struct mp_session *s);

/* Run fn(rank, arg) for each rank this process runs, `rank` the session fn works on: s itself on
 * the measured backends; on the model backends every virtual rank of the world, one after another
 * where they meet (core/cluster_model/vrun.h, mp_vrun_world), each on a session of its own
 * (mp_session_virtual_rank). The first failure's status (by rank). */
int mp_session_each_rank(struct mp_session *s, int (*fn)(struct mp_session *rank, void *arg),
                         void *arg);

/* Rank r's host as run.json's "ranks" names it (rank 0 with --out); "" for virtual ranks or when
 * absent. */
const char *mp_session_rank_host(const struct mp_session *s, int r);

struct mp_layer;
struct mp_point;
struct mp_point_result;
/* moeperf-layer's layer for a layout already split (c->ops->split): this rank's, made for up to
 * max_tokens tokens and max_overlap chunks (mp_layer_create); none (*out NULL) on the model
 * backends, whose virtual ranks make their own for each point. */
int mp_session_layer_create(const struct mp_session *s, struct mp_layer **out, long max_tokens,
                            int max_overlap);
/* One point of moeperf-layer on a tp × ep layout: mp_layer_run on this rank's layer L, or on the
 * model backends on every virtual rank of the layout (mp_vrun_point). res as mp_layer_run fills
 * it on rank 0. */
int mp_session_layer_point(const struct mp_session *s, struct mp_layer *L, int tp, int ep,
                           const struct mp_point *pt, struct mp_point_result *res);

/* The flags the chosen backends cannot honour, each refused naming the flag (MP_ERR_USAGE, the
 * message printed); MP_OK otherwise. With the model backends these are the flags a measured run
 * takes and a modelled one refuses (docs/planning.md lists them;
 * tests/integration/model_parity.sh holds every binary to that): --check (nothing computed to
 * compare), --inject-delay-us (the model has no wire to slow: a slower link is a profile with less
 * bandwidth) and --max-memory (virtual ranks hold no buffers); --graph is refused where each
 * binary checks graph capture. A binary whose table lacks a flag leaves it at its neutral 0. */
int mp_session_refuse_unsupported(const struct mp_session *s);

/* The bytes of one activation or weight element: the profile's elem_bytes on the model backends,
 * the compute backend's element size otherwise. */
double mp_session_elem_bytes(const struct mp_session *s);

/* Add the resolved workload (model fields and any tool-specific object) to run.json. */
void mp_session_note(struct mp_session *s, const char *key, struct cJSON *value);

/* A point failed with `rc`, and the binary is about to free what the point used (freeing device
 * memory waits for the device): keep the --timeout deadline armed from here on ("teardown after
 * <point>"), and when this rank may be failing alone (an error that is neither a usage error nor
 * agreed by every rank, in a world of several ranks) abort the device communicators now, so the
 * device stops waiting for collectives the other ranks will never join. Returns rc. */
int mp_session_fail(struct mp_session *s, int rc);

/* Finish: rewrite run.json with the end time and whether the sweep finished (rc == MP_OK), stop the
 * backends, free options. Returns the process exit code for `rc`. The --timeout deadline stays
 * armed through it ("teardown after <point>"). A rank failing alone (see mp_session_fail) aborts
 * its device communicators before anything waits for the device and ends with _exit(rc): the
 * others are stopped by the launcher or their own deadline. */
int mp_session_end(struct mp_session *s, int rc);

#endif
